//! The `kivi` binary end to end on the offline SmolLM2.

use std::path::PathBuf;
use std::process::{Command, Output, Stdio};

use serde_json::Value;

fn model() -> PathBuf {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../.data/models/SmolLM2-135M-Instruct.Q4_1.gguf");
    assert!(
        path.is_file(),
        "offline model missing at {}: run `scripts/setup.sh data` to fetch it",
        path.display()
    );
    path
}

fn kivi(args: &[&str], stdin: &str) -> Output {
    let mut child = Command::new(env!("CARGO_BIN_EXE_kivi"))
        .args(args)
        .env_remove("KIVI_MODEL")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("kivi starts");
    use std::io::Write;
    child
        .stdin
        .take()
        .unwrap()
        .write_all(stdin.as_bytes())
        .unwrap();
    child.wait_with_output().unwrap()
}

/// Fails the test with the exit status and stderr when `kivi` did not succeed.
fn assert_succeeded(out: &Output) {
    assert!(
        out.status.success(),
        "{}: {}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
}

#[test]
fn generate_streams_text_and_json_lines() {
    let model = model();
    let model = model.to_str().unwrap();
    let out = kivi(
        &[
            "generate",
            "--model",
            model,
            "--max-tokens",
            "12",
            "--repetition-penalty",
            "1",
            "Once upon a time, there was a little",
        ],
        "",
    );
    assert_succeeded(&out);
    let text = String::from_utf8(out.stdout).unwrap();
    assert!(text.starts_with(" girl named Emma"), "{text:?}");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("decode 12 tok"), "{stderr}");

    let out = kivi(
        &[
            "generate",
            "--json",
            "--model",
            model,
            "--max-tokens",
            "3",
            "--cache",
            "k2v2-g32-r32",
            "The sea",
        ],
        "",
    );
    assert_succeeded(&out);
    let events: Vec<Value> = String::from_utf8(out.stdout)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).expect("every line is JSON"))
        .collect();
    assert_eq!(events[0]["type"], "started");
    assert_eq!(events.iter().filter(|e| e["type"] == "token").count(), 3);
    let done = events.last().unwrap();
    assert_eq!(done["type"], "done");
    assert_eq!(done["reason"], "length");
    assert_eq!(done["stats"]["cache"], "k2v2-g32-r32");
    assert_eq!(done["stats"]["kv"]["layers"].as_array().unwrap().len(), 30);
}

#[test]
fn chat_answers_each_turn_and_reuses_the_prefix() {
    let model = model();
    // The full cache: with the default KIVI cache, SmolLM2's greedy first token here is a
    // knife-edge between "The capital" and "L'Étoile" that CPUs summing in another order
    // (AVX-512 against AVX2 loops, OpenBLAS's core kernels) decide differently; this test
    // is about turns and prefix reuse, which do not depend on the cache kind.
    let out = kivi(
        &[
            "chat",
            "--model",
            model.to_str().unwrap(),
            "--max-tokens",
            "16",
            "--cache",
            "full",
        ],
        "What is the capital of France?\nAnd of Italy?\n/exit\n",
    );
    assert_succeeded(&out);
    let stderr = String::from_utf8_lossy(&out.stderr);
    let summaries: Vec<&str> = stderr.lines().filter(|l| l.contains("reused")).collect();
    assert_eq!(summaries.len(), 2, "{stderr}");
    assert!(summaries[0].contains("(reused 0)"), "{stderr}");
    assert!(
        !summaries[1].contains("(reused 0)"),
        "second turn reuses the first: {stderr}"
    );
    let stdout = String::from_utf8(out.stdout).unwrap();
    assert!(stdout.contains("Paris"), "{stdout}");
}

#[test]
fn bad_settings_are_explained() {
    let model = model();
    let out = kivi(
        &[
            "generate",
            "--model",
            model.to_str().unwrap(),
            "--cache",
            "k2v2-g32-r100",
            "x",
        ],
        "",
    );
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("multiple of the group size"), "{stderr}");

    let out = kivi(&["generate", "--context", "lots", "x"], "");
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("neither a number of tokens nor `fit`"),
        "{stderr}"
    );

    let out = kivi(&["generate", "--model", "/nonexistent/model.gguf", "x"], "");
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("neither an existing file"), "{stderr}");
}

/// `--context fit` takes the longest context this machine's memory holds: the whole of
/// SmolLM2's 8192 tokens with its default cache here (the engine's own test holds the
/// choice when memory is short).
#[test]
fn context_fit_takes_the_longest_that_fits() {
    let model = model();
    let args = [
        "generate",
        "--model",
        model.to_str().unwrap(),
        "--context",
        "fit",
    ];
    let out = kivi(&[&args[..], &["--max-tokens", "2", "The sea"]].concat(), "");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    assert!(stderr.contains("context 8192"), "{stderr}");
}

#[test]
fn json_schema_answers_keep_to_the_schema_and_a_cut_one_fails() {
    let model = model();
    let model = model.to_str().unwrap();
    let dir = std::env::temp_dir().join(format!("kivi-cli-schema-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let schema = dir.join("person.json");
    std::fs::write(
        &schema,
        r#"{"type": "object",
            "properties": {"name": {"type": "string", "maxLength": 20},
                           "age": {"type": "integer", "minimum": 0, "maximum": 150}},
            "required": ["name", "age"], "additionalProperties": false}"#,
    )
    .unwrap();
    let schema = schema.to_str().unwrap();
    let ask = |max_tokens: &str| {
        kivi(
            &[
                "generate",
                "--model",
                model,
                "--chat",
                "--temperature",
                "0",
                "--max-tokens",
                max_tokens,
                "--json-schema",
                schema,
                "Alice is 30 years old. Give her name and age as JSON.",
            ],
            "",
        )
    };
    let out = ask("100");
    assert_succeeded(&out);
    let text = String::from_utf8(out.stdout).unwrap();
    let value: Value = serde_json::from_str(text.trim()).expect(&text);
    assert!(value["name"].is_string(), "{text}");
    assert!(value["age"].as_u64().is_some_and(|a| a <= 150), "{text}");
    assert_eq!(value.as_object().unwrap().len(), 2, "{text}");

    // Cut JSON is a failure, said on stderr.
    let out = ask("3");
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("before its JSON was complete"), "{stderr}");

    // A schema file that is not JSON is named.
    std::fs::write(dir.join("bad.json"), "{not json").unwrap();
    let bad = dir.join("bad.json");
    let out = kivi(
        &[
            "generate",
            "--model",
            model,
            "--json-schema",
            bad.to_str().unwrap(),
            "x",
        ],
        "",
    );
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("bad.json is not JSON"), "{stderr}");
    std::fs::remove_dir_all(&dir).ok();
}
