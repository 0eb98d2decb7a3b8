//! The real Gemma 3 270M GGUF (offline data): a prompt longer than its 512-token window
//! read and continued greedily on both runtimes with the recommended cache (window layers
//! in their window caches, the three global layers in KIVI), must give the same tokens.
//!
//! The host runtime in float32 (`host-f32`) against MLX's operations in float32 on the CPU
//! (the Mac's graph); `KIVI_BACKEND` names another MLX backend for the second (the `mac`
//! stage's float16 is too slow on x86 for 270M parameters over 600 tokens, so the stage
//! does not run this).

mod offline;

use kivi_engine::backend::{Backend, Device, Precision, BACKEND_ENV};
use kivi_engine::cache::{CacheConfig, RECOMMENDED};
use kivi_engine::eval::{decode_step, greedy_token, prefill};
use kivi_engine::loader::load_local;

/// Greedy continuation of `prompt` on `backend`: the tokens, and the first step's logits.
fn continue_greedily(backend: Backend, prompt: &[u32], steps: usize) -> (Vec<u32>, Vec<f32>) {
    let loaded = load_local(&offline::gemma3_path(), backend).expect("the offline Gemma 3 loads");
    let config: CacheConfig = RECOMMENDED.parse().unwrap();
    let mut caches = config.make_layers(loaded.model.config(), loaded.model.backend());
    let mut logits = prefill(&loaded.model, &mut caches, prompt, 256).unwrap();

    let first = logits
        .as_dtype(mlx_rs::Dtype::Float32)
        .unwrap()
        .as_slice::<f32>()
        .to_vec();
    let mut tokens = Vec::new();
    for _ in 0..steps {
        let token = greedy_token(&logits).unwrap();
        tokens.push(token);
        logits = decode_step(&loaded.model, &mut caches, token).unwrap();
    }
    // Window layers hold their window and its slack; global layers every position.
    let stats: Vec<_> = caches.iter().map(|c| c.stats()).collect();
    let held = prompt.len() + steps;
    assert!(stats
        .iter()
        .all(|s| s.window == 0 || s.tokens == 511 + kivi_engine::cache::TRUNCATE_SLACK));
    assert_eq!(stats.iter().filter(|s| s.window == 0).count(), 3);
    assert!(stats.iter().all(|s| s.window > 0 || s.tokens == held));
    (tokens, first)
}

#[test]
fn both_runtimes_continue_a_prompt_past_the_window_alike() {
    let mlx = match std::env::var(BACKEND_ENV) {
        Ok(v) if v.starts_with("mlx") => v.parse().unwrap(),
        _ => Backend::mlx(Device::Cpu, Precision::F32),
    };
    let text = offline::workspace_root().join(".data/texts/moby-dick/chapter_1.txt");
    let text = std::fs::read_to_string(text).expect("scripts/setup.sh wrote the texts");
    let tokenizer = load_local(&offline::gemma3_path(), Backend::HOST_F32)
        .unwrap()
        .tokenizer;
    let all = tokenizer.encode(&text, true).unwrap();
    // Past the window and the slack the window layers keep (767 positions).
    let prompt = &all[..900.min(all.len())];
    assert!(prompt.len() == 900, "the prompt crosses the window");
    let (host, host_logits) = continue_greedily(Backend::HOST_F32, prompt, 12);
    let (other, other_logits) = continue_greedily(mlx, prompt, 12);
    let spread = host_logits.iter().fold(f32::MIN, |m, &v| m.max(v))
        - host_logits.iter().fold(f32::MAX, |m, &v| m.min(v));
    let worst = host_logits
        .iter()
        .zip(&other_logits)
        .map(|(a, b)| (a - b).abs())
        .fold(0f32, f32::max);
    println!(
        "host-f32: {:?}\n{mlx}: {:?}\nfirst step's logits differ by {:.1e} of their spread",
        tokenizer.decode(&host, false).unwrap(),
        tokenizer.decode(&other, false).unwrap(),
        worst / spread
    );
    assert_eq!(host, other, "greedy tokens on host-f32 and {mlx}");
    assert!(worst / spread < 1e-2);
}
