//! Smoke tests of the measurement commands (`kivi ppl`, `kivi bench`, `kivi needle`) on
//! tiny settings against the offline SmolLM2: they run, write sane JSON and PNG plots.
//! No assertion is about time.

use std::path::{Path, PathBuf};
use std::process::Command;

use serde_json::Value;

/// The model the tests run (KIVI_MODEL, else the offline SmolLM2), or `None` (and a
/// message) when its file is absent.
fn model() -> Option<PathBuf> {
    let path = std::env::var_os("KIVI_MODEL").map_or_else(
        || {
            PathBuf::from(env!("CARGO_MANIFEST_DIR"))
                .join("../.data/models/SmolLM2-135M-Instruct.Q4_1.gguf")
        },
        PathBuf::from,
    );
    if path.is_file() {
        Some(path)
    } else {
        println!(
            "skipped: model file {} is absent (run `scripts/setup.sh data`)",
            path.display()
        );
        None
    }
}

fn text() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../.data/texts/moby-dick.txt")
}

fn kivi(model: &Path, args: &[&str]) -> String {
    let out = Command::new(env!("CARGO_BIN_EXE_kivi"))
        .args(args)
        .arg("--model")
        .arg(model)
        .arg("--text")
        .arg(text())
        .output()
        .expect("kivi starts");
    assert!(
        out.status.success(),
        "kivi {args:?} failed ({}): {}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

fn read_json(path: &Path) -> Value {
    serde_json::from_str(&std::fs::read_to_string(path).expect("JSON written")).expect("valid JSON")
}

fn assert_png(path: &Path) {
    let bytes = std::fs::read(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    assert_eq!(&bytes[1..4], b"PNG", "{} is not a PNG", path.display());
}

#[test]
fn ppl_scores_every_configuration_on_the_same_windows() {
    let Some(model) = model() else { return };
    let dir = tempfile::tempdir().unwrap();
    let json = dir.path().join("ppl.json");
    let tokens = dir.path().join("tokens.json");
    let stdout = kivi(
        &model,
        &[
            "ppl",
            "--windows",
            "1",
            "--window",
            "256",
            "--stride",
            "128",
            "--scored",
            "128",
            "--chunk",
            "64",
            "--configs",
            "full,k2v2-g32-r32,k2v2-g32-r32-per-token",
            "--json",
            json.to_str().unwrap(),
            "--dump-tokens",
            tokens.to_str().unwrap(),
        ],
    );
    assert!(stdout.contains("k2v2-g32-r32-per-token"), "{stdout}");
    let report = read_json(&json);
    let text = &report["texts"][0];
    assert_eq!(text["window_starts"], serde_json::json!([0]));
    let results = text["results"].as_array().unwrap();
    assert_eq!(results.len(), 3);
    for r in results {
        let ppl = r["perplexity"].as_f64().unwrap();
        assert!(ppl.is_finite() && ppl > 1.0, "{r}");
        assert_eq!(r["tokens_scored"], 128);
    }
    let full = results[0]["perplexity"].as_f64().unwrap();
    assert!(full < 1000.0, "full-precision perplexity {full}");
    assert_eq!(results[0]["delta_percent"].as_f64(), Some(0.0));
    assert_png(&dir.path().join("ppl.png"));
    let dump = read_json(&tokens);
    assert_eq!(
        dump["texts"][0]["windows"][0].as_array().unwrap().len(),
        256
    );
}

#[test]
fn bench_measures_each_configuration_in_its_own_process() {
    let Some(model) = model() else { return };
    let dir = tempfile::tempdir().unwrap();
    let json = dir.path().join("bench.json");
    let stdout = kivi(
        &model,
        &[
            "bench",
            "--contexts",
            "64",
            "--repeats",
            "1",
            "--decode-tokens",
            "4",
            "--configs",
            "full,k2v2-g32-r0",
            "--json",
            json.to_str().unwrap(),
        ],
    );
    assert!(stdout.contains("k2v2-g32-r0"), "{stdout}");
    let report = read_json(&json);
    let entries = report["entries"].as_array().unwrap();
    assert_eq!(entries.len(), 2);
    for e in entries {
        assert_eq!(e["context"], 64);
        assert_eq!(e["kv"]["tokens"], 64);
        assert!(e["decode_tokens_per_s"]["median"].as_f64().unwrap() > 0.0);
        assert!(e["prefill_tokens_per_s"]["median"].as_f64().unwrap() > 0.0);
        assert!(e["peak_rss_bytes"]["median"].as_f64().unwrap() > 0.0);
        assert_eq!(e["samples"].as_array().unwrap().len(), 1);
    }
    let (full, kivi) = (&entries[0], &entries[1]);
    assert_eq!(full["config"], "full");
    assert_eq!(full["decode_vs_full"]["median"].as_f64(), Some(1.0));
    // All 64 tokens quantized at 2 bits: several times smaller than float16.
    assert!(
        kivi["compression_vs_fp16"].as_f64().unwrap() > 1.0,
        "{kivi}"
    );
    assert!(kivi["kv"]["held_bytes"].as_u64() < full["kv"]["held_bytes"].as_u64());
    assert_png(&dir.path().join("bench.png"));
}

#[test]
fn needle_answers_and_draws_a_heat_map_per_configuration() {
    let Some(model) = model() else { return };
    let dir = tempfile::tempdir().unwrap();
    let json = dir.path().join("needle.json");
    kivi(
        &model,
        &[
            "needle",
            "--lengths",
            "256",
            "--depths",
            "0.5",
            "--configs",
            "full,k2v2-g32-r32",
            "--json",
            json.to_str().unwrap(),
        ],
    );
    let report = read_json(&json);
    let results = report["results"].as_array().unwrap();
    assert_eq!(results.len(), 2);
    for r in results {
        let outcome = &r["outcomes"][0];
        assert_eq!(outcome["trial"]["length"], 256);
        let value = outcome["trial"]["value"].as_str().unwrap();
        assert_eq!(value.len(), 4);
        assert!(outcome["prompt_tokens"].as_u64().unwrap() > 256);
        // A probability of 4 digit tokens: in (0, 1], and the mean is over the one trial.
        let logprob = outcome["value_logprob"].as_f64().unwrap();
        assert!(logprob < 0.0 && logprob > -200.0, "{logprob}");
        let mean = r["mean_value_prob"].as_f64().unwrap();
        assert!((mean - logprob.exp()).abs() < 1e-9, "{r}");
        let accuracy = r["accuracy"].as_f64().unwrap();
        assert!(accuracy == 0.0 || accuracy == 1.0);
        assert_eq!(
            accuracy == 1.0,
            outcome["correct"].as_bool().unwrap(),
            "{r}"
        );
        let name = r["config"].as_str().unwrap();
        assert_png(&dir.path().join(format!("needle-{name}.png")));
    }
}

/// `kivi plan` prints one row per model and setting and a cell per context, each with the
/// smallest Mac that holds it: Gemma 3's largest cache is float16 at 128k.
#[test]
fn plan_prints_a_row_per_model_and_setting() {
    let out = Command::new(env!("CARGO_BIN_EXE_kivi"))
        .args(["plan", "--contexts", "32k,128k"])
        .output()
        .expect("kivi starts");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = String::from_utf8_lossy(&out.stdout);
    let rows: Vec<Vec<&str>> = text
        .lines()
        .filter(|l| l.starts_with("| ") && !l.starts_with("| model"))
        .map(|l| l.trim_matches('|').split('|').map(str::trim).collect())
        .collect();
    assert_eq!(rows.len(), 3 * 4, "{text}");
    // "2.4 / 9.7 · 16 GB": the KV cache's GiB.
    let kv = |cell: &str| cell.split(' ').next().unwrap().parse::<f64>().unwrap();
    let gemma: Vec<&Vec<&str>> = rows.iter().filter(|r| r[0] == "Gemma 3 12B").collect();
    let float16 = gemma.iter().find(|r| r[1] == "float16").unwrap();
    assert!(
        gemma
            .iter()
            .all(|r| kv(r[3]) <= kv(float16[3]) && kv(r[2]) < kv(r[3])),
        "{text}"
    );
    assert!(
        rows.iter()
            .all(|r| r[2..].iter().all(|c| c.ends_with(" GB"))),
        "{text}"
    );
}
