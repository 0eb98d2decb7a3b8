//! The engine's Llama against mlx-lm's on the same SmolLM2 weights.
//!
//! The fixture comes from `scripts/reference/mlx_lm_smollm2.py`: mlx-lm's own Llama run on
//! the GGUF converted by `scripts/gguf_to_mlx.py --format exact` (the same quantized
//! blocks, Q/K rows permuted back to the Hugging Face layout). The engine reads the GGUF
//! directly (interleaved RoPE on the permuted rows) and, in the last test, the converted
//! folder (MLX-quantized safetensors).

mod offline;

use std::path::Path;

use kivi_engine::backend::{Activations, Backend, Device, Precision};
use kivi_engine::cache::{CacheConfig, KvCache};
use kivi_engine::loader::{load_local, LoadedModel};
use kivi_engine::sampling::SamplingParams;
use kivi_engine::session::Request;
use mlx_rs::Array;
use serde_json::Value;

/// Largest allowed difference of a logit on `backend` (typical logits are 10-30). float32
/// sums in a different order differ by about 1e-4; the host backend's full cache holds its
/// keys and values in float16 (mlx-lm's, and MLX's float32 operations', in float32), which
/// moved logits by up to 4e-3. The default host backend quantizes the inputs of its
/// blocks' quantized products to int8 (`host`, against `host-f32`) in decode steps and
/// chunks of fewer than 8 tokens, which moved them by up to 0.25 (1.5% of a logit of 17;
/// 0.63 while the bias term took the exact input sums, `kernels/src/qmatmul/int8.rs`);
/// every top token stays mlx-lm's.
fn tolerance(backend: Backend) -> f32 {
    if backend.host_activations() == Activations::Int8 {
        0.4
    } else if backend.full_cache_dtype() == mlx_rs::Dtype::Float32 {
        2e-3
    } else {
        1e-2
    }
}

fn fixture() -> Value {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/smollm2_mlx_lm.json");
    serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap()
}

fn ids(v: &Value) -> Vec<u32> {
    v.as_array()
        .unwrap()
        .iter()
        .map(|x| x.as_u64().unwrap() as u32)
        .collect()
}

fn caches(n: usize, backend: Backend) -> Vec<Box<dyn KvCache>> {
    (0..n).map(|_| CacheConfig::Full.make(&backend)).collect()
}

/// The float32 paths: the host kernels, and MLX's operations (the graph a Mac runs, on
/// the CPU in float32, with MLX's full cache); and the default host backend, its quantized
/// products over int8 inputs.
const BACKENDS: [Backend; 3] = [
    Backend::HOST_F32,
    Backend::mlx(Device::Cpu, Precision::F32),
    Backend::HOST,
];

/// Logits `[L][vocab]` of `tokens`, run in chunks of the given sizes.
fn logits(loaded: &LoadedModel, tokens: &[u32], chunks: &[usize]) -> Vec<Vec<f32>> {
    let mut caches = caches(loaded.model.config().num_layers, *loaded.model.backend());
    let mut rows = Vec::new();
    let mut start = 0;
    for &len in chunks {
        let hidden = loaded
            .model
            .forward(&tokens[start..start + len], &mut caches)
            .unwrap();
        let out: Array = loaded.model.logits(&hidden).unwrap();
        out.eval().unwrap();
        let vocab = out.dim(2) as usize;
        rows.extend(out.as_slice::<f32>().chunks(vocab).map(<[f32]>::to_vec));
        start += len;
    }
    assert_eq!(start, tokens.len());
    rows
}

/// Compares logits with the fixture's top entries; returns the largest difference.
fn compare(rows: &[Vec<f32>], fixture: &Value, backend: Backend) -> f32 {
    let positions = fixture["positions"].as_array().unwrap();
    assert_eq!(rows.len(), positions.len());
    let mut worst = 0.0f32;
    for (p, (row, reference)) in rows.iter().zip(positions).enumerate() {
        let top = ids(&reference["top_ids"]);
        let values: Vec<f32> = reference["top_logits"]
            .as_array()
            .unwrap()
            .iter()
            .map(|v| v.as_f64().unwrap() as f32)
            .collect();
        assert_eq!(
            kivi_engine::sampling::argmax_of(row),
            top[0],
            "position {p}: top token"
        );
        for (id, want) in top.iter().zip(values) {
            let diff = (row[*id as usize] - want).abs();
            worst = worst.max(diff);
            assert!(
                diff < tolerance(backend),
                "position {p} token {id}: {} vs {want}",
                row[*id as usize]
            );
        }
    }
    worst
}

#[test]
fn gguf_logits_match_mlx_lm_in_one_pass_and_in_chunks() {
    for backend in BACKENDS {
        gguf_logits_on(backend);
    }
}

fn gguf_logits_on(backend: Backend) {
    let fixture = fixture();
    let loaded = load_local(&offline::smollm2_path(), backend).unwrap();
    let prompt = ids(&fixture["logits_prompt_ids"]);
    assert_eq!(
        loaded
            .tokenizer
            .encode(fixture["logits_prompt"].as_str().unwrap(), false)
            .unwrap(),
        prompt
    );
    let worst = compare(
        &logits(&loaded, &prompt, &[prompt.len()]),
        &fixture,
        backend,
    );
    println!("{backend}, one pass: largest logit difference {worst:e}");
    // Chunked prefill and single-token steps go through the cache and RoPE offsets.
    let worst = compare(&logits(&loaded, &prompt, &[4, 1, 5]), &fixture, backend);
    println!("{backend}, chunks 4+1+5: largest logit difference {worst:e}");
    let worst = compare(&logits(&loaded, &prompt, &[1; 10]), &fixture, backend);
    println!("{backend}, one token at a time: largest logit difference {worst:e}");
}

#[test]
fn long_prompt_in_chunks_matches_mlx_lm() {
    // Chunks of 88 tokens and more run dense products, and the head takes float32 inputs
    // on every host backend: `host` would repeat `host-f32` exactly.
    for backend in &BACKENDS[..2] {
        long_prompt_on(*backend);
    }
}

/// 600 tokens in chunks of 256: several chunks of history, and the dense matmul path the
/// CPU takes for prefill chunks.
fn long_prompt_on(backend: Backend) {
    let fixture = fixture();
    let loaded = load_local(&offline::smollm2_path(), backend).unwrap();
    let prompt = ids(&fixture["long_prompt_ids"]);
    assert_eq!(prompt.len(), 600);
    let mut caches = caches(loaded.model.config().num_layers, backend);
    let mut hidden = None;
    for chunk in prompt.chunks(256) {
        hidden = Some(loaded.model.forward(chunk, &mut caches).unwrap());
    }
    let last = loaded.model.last_logits(&hidden.unwrap()).unwrap();
    last.eval().unwrap();
    let row = last.as_slice::<f32>();
    let reference = &fixture["long_last"];
    let top = ids(&reference["top_ids"]);
    assert_eq!(kivi_engine::sampling::argmax_of(row), top[0]);
    let mut worst = 0.0f32;
    for (id, want) in top.iter().zip(reference["top_logits"].as_array().unwrap()) {
        let diff = (row[*id as usize] - want.as_f64().unwrap() as f32).abs();
        worst = worst.max(diff);
        assert!(
            diff < tolerance(backend),
            "{backend}, token {id}: {} vs {want}",
            row[*id as usize]
        );
    }
    println!("{backend}, 600 tokens in chunks: largest logit difference {worst:e}");
}

#[tokio::test]
async fn greedy_continuation_matches_mlx_lm() {
    let fixture = fixture();
    // Token for token: the float32 host backend (int8 inputs move logits enough to change
    // a close greedy choice).
    let engine = offline::engine(|o| o.backend = Some(Backend::HOST_F32)).await;
    let mut request = Request::text(fixture["story_prompt"].as_str().unwrap());
    request.sampling = SamplingParams::greedy();
    let want = ids(&fixture["greedy_ids"]);
    request.max_tokens = want.len();
    let out = offline::run(&engine, request).await;
    println!(
        "engine: {:?}\nmlx-lm: {:?}",
        out.text, fixture["greedy_text"]
    );
    assert_eq!(out.prompt_tokens, ids(&fixture["story_prompt_ids"]).len());
    assert_eq!(out.ids, want);
    assert_eq!(out.text, fixture["greedy_text"].as_str().unwrap());
}

#[test]
fn converted_mlx_folder_matches_the_gguf_and_mlx_lm() {
    let root = offline::workspace_root();
    let dir = std::env::temp_dir().join(format!("kivi-smollm2-exact-{}", std::process::id()));
    let status = std::process::Command::new(root.join(".venv/bin/python"))
        .arg(root.join("scripts/gguf_to_mlx.py"))
        .arg(offline::smollm2_path())
        .arg(&dir)
        .status()
        .expect("the project's .venv Python runs (scripts/setup.sh venv)");
    assert!(status.success(), "scripts/gguf_to_mlx.py failed");
    let loaded = load_local(&dir, Backend::HOST_F32).unwrap();
    std::fs::remove_dir_all(&dir).ok();
    assert_eq!(loaded.info.quantization, "mlx 4-bit g32");
    assert!(!loaded.info.config.rope.traditional);
    let fixture = fixture();
    let prompt = ids(&fixture["logits_prompt_ids"]);
    assert_eq!(
        loaded
            .tokenizer
            .encode(fixture["logits_prompt"].as_str().unwrap(), false)
            .unwrap(),
        prompt
    );
    let worst = compare(
        &logits(&loaded, &prompt, &[3, 7]),
        &fixture,
        Backend::HOST_F32,
    );
    println!("safetensors folder: largest logit difference {worst:e}");
}
