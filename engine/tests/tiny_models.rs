//! Qwen2, Qwen3, Mistral and Llama 3 (RoPE scaling) against mlx-lm on tiny random
//! checkpoints.
//!
//! The folders under tests/fixtures/tiny-* and their reference.json (mlx-lm's logits after
//! loading the same folder) come from `scripts/reference/tiny_models.py`; a `model.gguf`
//! beside them holds the same weights as llama.cpp lays them out, and must give the same
//! logits.

mod offline;

use std::path::PathBuf;

use kivi_engine::backend::{Backend, Kernels, Precision};
use kivi_engine::cache::CacheConfig;
use kivi_engine::loader::load_local;
use kivi_engine::model::{Family, RopeScaling};
use serde_json::Value;

/// The backend under test (`KIVI_BACKEND`: the host kernels by default; the Mac's
/// configuration, MLX in float16, in the `mac` stage of scripts/test.sh) and the largest
/// difference allowed between one of its logits and mlx-lm's float32 one, relative to the
/// row's largest logit where that is larger than 1. The logits are about 1 in size: float32 sums in another order differ by about 1e-5; the host
/// backend's float16 keys and values (mlx-lm's are float32) moved them by up to 2e-4;
/// float16 rounds every weight and activation to 11 bits (a step of 1e-3 at 1.0) through
/// two blocks.
///
/// On the host kernels the check runs `host-f32`: int8 inputs to the quantized products
/// (`host`) move these random models' logits by about 5e-3, and `host_steps.rs` holds
/// them to float32 on SmolLM2.
fn backend() -> (Backend, f32) {
    let backend = match Backend::chosen().expect("KIVI_BACKEND names a backend") {
        b if b.kernels() == Kernels::Host => Backend::HOST_F32,
        b => b,
    };
    let tolerance = match backend.precision() {
        Precision::F32 if backend.full_cache_dtype() == mlx_rs::Dtype::Float32 => 1e-4,
        Precision::F32 => 1e-3,
        Precision::F16 => 1.5e-2,
        Precision::Bf16 => 1e-1,
    };
    (backend, tolerance)
}

fn fixture(name: &str) -> PathBuf {
    offline::workspace_root()
        .join("engine/tests/fixtures")
        .join(name)
}

/// Runs the fixture's tokens in the given chunks and compares every logit. `name` is a
/// fixture folder, or a file in one (its GGUF).
fn check(name: &str, chunks: &[usize]) -> kivi_engine::loader::LoadedModel {
    let path = fixture(name);
    let dir = if path.is_file() {
        path.parent().unwrap().to_path_buf()
    } else {
        path.clone()
    };
    let reference: Value =
        serde_json::from_str(&std::fs::read_to_string(dir.join("reference.json")).unwrap())
            .unwrap();
    let tokens: Vec<u32> = reference["tokens"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t.as_u64().unwrap() as u32)
        .collect();
    let (backend, tolerance) = backend();
    let loaded = load_local(&path, backend).unwrap_or_else(|e| panic!("{name}: {e}"));
    // Full precision on the global layers; a window layer gets its window cache.
    let mut caches = CacheConfig::Full.make_layers(loaded.model.config(), &backend);
    let mut rows: Vec<Vec<f32>> = Vec::new();
    let mut start = 0;
    for &len in chunks {
        let hidden = loaded
            .model
            .forward(&tokens[start..start + len], &mut caches)
            .unwrap();
        let logits = loaded
            .model
            .logits(&hidden)
            .unwrap()
            .as_dtype(mlx_rs::Dtype::Float32)
            .unwrap();
        logits.eval().unwrap();
        let vocab = loaded.model.config().vocab_size;
        rows.extend(logits.as_slice::<f32>().chunks(vocab).map(<[f32]>::to_vec));
        start += len;
    }
    assert_eq!(start, tokens.len());
    let mut worst = 0.0f32;
    for (p, (row, want)) in rows
        .iter()
        .zip(reference["logits"].as_array().unwrap())
        .enumerate()
    {
        let want: Vec<f32> = want
            .as_array()
            .unwrap()
            .iter()
            .map(|w| w.as_f64().unwrap() as f32)
            .collect();
        // Errors grow with the row's scale: relative to its largest logit past 1 (the
        // random Gemma's reach 4).
        let scale = want.iter().fold(1.0f32, |m, w| m.max(w.abs()));
        for (v, (got, want)) in row.iter().zip(want).enumerate() {
            let diff = (got - want).abs() / scale;
            worst = worst.max(diff);
            assert!(
                diff < tolerance,
                "{name} on {backend}, position {p} token {v}: {got} vs {want}"
            );
        }
    }
    println!("{name} on {backend}: largest relative logit difference {worst:e}");
    loaded
}

#[test]
fn qwen2_with_qkv_bias_and_mlx_4bit_weights() {
    let loaded = check("tiny-qwen2", &[16]);
    assert_eq!(loaded.info.config.family, Family::Qwen2);
    assert!(loaded.info.config.qkv_bias);
    assert_eq!(loaded.info.quantization, "mlx 4-bit g64");
    check("tiny-qwen2", &[5, 1, 10]);
}

#[test]
fn qwen3_with_query_and_key_head_norms() {
    let loaded = check("tiny-qwen3", &[16]);
    assert_eq!(loaded.info.config.family, Family::Qwen3);
    assert!(loaded.info.config.qk_norm && !loaded.info.config.qkv_bias);
    assert_eq!(loaded.info.config.head_dim, 32);
    check("tiny-qwen3", &[3, 1, 12]);
}

#[test]
fn qwen3_from_gguf_gives_the_same_logits() {
    let loaded = check("tiny-qwen3/model.gguf", &[16]);
    assert_eq!(loaded.info.config.family, Family::Qwen3);
    assert!(loaded.info.config.qk_norm);
    assert!(!loaded.info.config.rope.traditional);
    assert_eq!(
        loaded.tokenizer.encode("he t", false).unwrap(),
        vec![256, 257],
        "the GGUF's merges"
    );
    check("tiny-qwen3/model.gguf", &[1, 7, 8]);
}

#[test]
fn gemma3_with_window_layers_past_their_window() {
    let loaded = check("tiny-gemma3", &[48]);
    let config = &loaded.info.config;
    assert_eq!(config.family, Family::Gemma3);
    assert_eq!(
        (0..4).map(|i| config.layer_window(i)).collect::<Vec<_>>(),
        [Some(8), None, Some(8), None]
    );
    // Chunks across the window's edge, and steps of one.
    check("tiny-gemma3", &[5, 1, 10, 8, 3, 1, 1, 19]);
}

#[test]
fn mistral_with_explicit_head_dim_and_untied_head() {
    let loaded = check("tiny-mistral", &[16]);
    assert_eq!(loaded.info.config.family, Family::Mistral);
    assert_eq!(loaded.info.config.head_dim, 32);
    check("tiny-mistral", &[7, 9]);
}

#[test]
fn llama3_rope_scaling() {
    let loaded = check("tiny-llama3", &[16]);
    assert!(matches!(
        loaded.info.config.rope.scaling,
        RopeScaling::Llama3 { .. }
    ));
    check("tiny-llama3", &[1, 1, 14]);
}
