//! One-token steps on host memory (`model::host`) against the MLX path they stand in for,
//! on the offline SmolLM2 (4-bit weights, interleaved RoPE) and the tiny dense Mistral
//! (BLAS products, split-half RoPE), with a full-precision and a KIVI cache.

mod offline;

use std::path::Path;

use kivi_engine::cache::{CacheConfig, KvCache};
use kivi_engine::loader::{load_local, LoadedModel};
use mlx_rs::Array;

/// Logits of `steps` one-token steps after a prefill of `prompt`, feeding the greedy token
/// back, with host steps on or off. Returns the logits rows and the tokens chosen.
fn steps(
    loaded: &mut LoadedModel,
    host: bool,
    config: CacheConfig,
    prompt: &[u32],
    steps: usize,
) -> (Vec<Vec<f32>>, Vec<u32>) {
    let on = loaded.model.set_host_steps(host);
    assert_eq!(on, host, "host steps should be available on the CPU");
    let mut caches: Vec<Box<dyn KvCache>> = config.make_layers(loaded.model.config().num_layers);
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

/// Host and MLX steps give the same logits (float32 sums in another order: about 1e-4 of
/// logits of 10-30) and so the same greedy tokens. With a KIVI cache the bound is looser:
/// keys that differ in the last bit can round to the neighbouring 2-bit code, a whole
/// quantization step, so `kivi_tolerance` applies there.
fn check(
    loaded: &mut LoadedModel,
    prompt: &[u32],
    count: usize,
    tolerance: f32,
    kivi_tolerance: f32,
) {
    for config in ["full", "k2v2-g32-r32", "k4v4-g32-r128"] {
        let config: CacheConfig = config.parse().unwrap();
        let (host, host_tokens) = steps(loaded, true, config, prompt, count);
        let (mlx, mlx_tokens) = steps(loaded, false, config, prompt, count);
        let mut worst = 0f32;
        for (a, b) in host.iter().zip(&mlx) {
            for (x, y) in a.iter().zip(b) {
                worst = worst.max((x - y).abs());
            }
        }
        println!("{config}: largest logit difference {worst:e}");
        let tolerance = match config {
            CacheConfig::Full => tolerance,
            CacheConfig::Kivi(_) => kivi_tolerance,
        };
        assert!(
            worst < tolerance,
            "{config}: host and MLX logits differ by {worst}"
        );
        assert_eq!(host_tokens, mlx_tokens, "{config}");
    }
    loaded.model.set_host_steps(true);
}

#[test]
fn host_steps_match_mlx_on_smollm2() {
    let mut loaded = load_local(&offline::smollm2_path()).unwrap();
    let prompt = loaded
        .tokenizer
        .encode(
            "Call me Ishmael. Some years ago, never mind how long precisely, having little",
            false,
        )
        .unwrap();
    // 40 decoded tokens take a K2V2 R32 cache across two flushes of the window.
    check(&mut loaded, &prompt, 40, 2e-3, 5e-2);
}

#[test]
fn host_steps_match_mlx_on_a_dense_model() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/tiny-mistral");
    let mut loaded = load_local(&dir).unwrap();
    // Head dim 32: the K/V shapes the KIVI configurations group without clamping.
    check(&mut loaded, &[1, 5, 9, 200, 17, 3], 40, 1e-4, 1e-3);
}
