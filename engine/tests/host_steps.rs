//! The host backend (decode steps on host memory, the host kernels' caches) against MLX's
//! operations in float32 (the graph a Mac runs, with MLX's caches), on the offline SmolLM2
//! (4-bit weights, interleaved RoPE) and the tiny dense Mistral (BLAS products, split-half
//! RoPE), with a full-precision and two KIVI caches: the model is written once, and both
//! implementations of its operations must give the same logits.

mod offline;

use std::path::Path;

use kivi_engine::backend::{Backend, Device, Precision};
use kivi_engine::cache::{CacheConfig, KvCache};
use kivi_engine::loader::{load_local, LoadedModel};
use mlx_rs::Array;

const MLX: Backend = Backend::mlx(Device::Cpu, Precision::F32);

/// Logits of `steps` one-token steps after a prefill of `prompt`, feeding the greedy token
/// back. Returns the logits rows and the tokens chosen.
fn steps(
    loaded: &LoadedModel,
    config: CacheConfig,
    prompt: &[u32],
    steps: usize,
) -> (Vec<Vec<f32>>, Vec<u32>) {
    let backend = loaded.model.backend();
    let mut caches: Vec<Box<dyn KvCache>> =
        config.make_layers(loaded.model.config().num_layers, backend);
    let hidden = loaded.model.forward(prompt, &mut caches).unwrap();
    let mut logits: Array = loaded.model.last_logits(&hidden).unwrap();
    let (mut rows, mut tokens) = (Vec::new(), Vec::new());
    for _ in 0..steps {
        logits.eval().unwrap();
        let row = logits.as_slice::<f32>().to_vec();
        let token = argmax(&row);
        rows.push(row);
        tokens.push(token);
        let hidden = loaded.model.forward(&[token], &mut caches).unwrap();
        logits = loaded.model.last_logits(&hidden).unwrap();
    }
    (rows, tokens)
}

fn argmax(row: &[f32]) -> u32 {
    (0..row.len())
        .max_by(|&a, &b| row[a].total_cmp(&row[b]))
        .unwrap() as u32
}

/// Host and MLX steps give the same logits to within `tolerance` and so the same greedy
/// tokens. float32 sums in another order differ by about 1e-4 of logits of 10-30; the
/// bound is looser for two reasons: the host's full cache holds its keys and values in
/// float16, MLX's float32 one in float32 (2.8e-2 on SmolLM2, 2.8e-4 on the tiny model),
/// and in a KIVI cache keys that differ in the last bit can round to the neighbouring
/// 2-bit code, a whole quantization step.
fn check(model: &Path, prompt: &[u32], count: usize, tolerance: f32) {
    let on_host = load_local(model, Backend::HOST).unwrap();
    let on_mlx = load_local(model, MLX).unwrap();
    for config in ["full", "k2v2-g32-r32", "k4v4-g32-r128"] {
        let config: CacheConfig = config.parse().unwrap();
        let (host, host_tokens) = steps(&on_host, config, prompt, count);
        let (mlx, mlx_tokens) = steps(&on_mlx, config, prompt, count);
        let mut worst = 0f32;
        for (a, b) in host.iter().zip(&mlx) {
            for (x, y) in a.iter().zip(b) {
                worst = worst.max((x - y).abs());
            }
        }
        println!("{config}: largest logit difference {worst:e}");
        assert!(
            worst < tolerance,
            "{config}: host and MLX logits differ by {worst}"
        );
        assert_eq!(host_tokens, mlx_tokens, "{config}");
    }
}

#[test]
fn host_steps_match_mlx_on_smollm2() {
    let path = offline::smollm2_path();
    let prompt = load_local(&path, Backend::HOST)
        .unwrap()
        .tokenizer
        .encode(
            "Call me Ishmael. Some years ago, never mind how long precisely, having little",
            false,
        )
        .unwrap();
    // The prompt and 40 decoded tokens stay inside a K2V2 R32 cache's window (R + G = 64
    // tokens), so both implementations attend over the same full-precision keys;
    // mac_path.rs compares them across flushes, where 2-bit codes make the comparison
    // statistical.
    check(&path, &prompt, 40, 5e-2);
}

#[test]
fn host_steps_match_mlx_on_a_dense_model() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/tiny-mistral");
    // Head dim 32: the K/V shapes the KIVI configurations group without clamping.
    check(&dir, &[1, 5, 9, 200, 17, 3], 40, 1e-3);
}
