//! The decode loop (`kivi_engine::decode`): on the MLX backends each step is built on the
//! previous token before that token is read back, with the sampler on the device. Its
//! greedy tokens must be exactly those of a plain loop that reads every token before
//! feeding it, on every backend and cache, across flushes of a KIVI window; and the caches
//! must hold exactly the tokens fed.
//!
//! Tiny random-weight checkpoints, so that a hundred steps take a moment even in float16
//! (the `mac` stage runs this file with `KIVI_BACKEND=mlx-cpu-f16`).

mod offline;

use kivi_engine::backend::{Backend, Device, Precision};
use kivi_engine::cache::{CacheConfig, KvCache};
use kivi_engine::decode::Decoder;
use kivi_engine::eval::{decode_step, greedy_token, prefill};
use kivi_engine::loader::{load_local, LoadedModel};
use kivi_engine::sampling::{Sampler, SamplingParams};

/// The host kernels and MLX's operations in float32, plus `KIVI_BACKEND` when it names
/// another one.
fn backends() -> Vec<Backend> {
    let mut all = vec![Backend::HOST, Backend::mlx(Device::Cpu, Precision::F32)];
    let chosen = Backend::chosen().expect("KIVI_BACKEND names a backend");
    if !all.contains(&chosen) {
        all.push(chosen);
    }
    all
}

fn load(name: &str, backend: Backend) -> LoadedModel {
    let dir = offline::workspace_root()
        .join("engine/tests/fixtures")
        .join(name);
    load_local(&dir, backend).unwrap()
}

fn caches(loaded: &LoadedModel, config: CacheConfig) -> Vec<Box<dyn KvCache>> {
    config.make_layers(loaded.model.config(), loaded.model.backend())
}

const PROMPT: usize = 45;
const STEPS: usize = 70;

/// `STEPS` greedy tokens after the prompt, each read before it is fed.
fn step_by_step(loaded: &LoadedModel, config: CacheConfig, prompt: &[u32]) -> Vec<u32> {
    let mut caches = caches(loaded, config);
    let mut logits = prefill(&loaded.model, &mut caches, prompt, 16).unwrap();
    let mut tokens = Vec::new();
    for _ in 0..STEPS {
        let token = greedy_token(&logits).unwrap();
        tokens.push(token);
        logits = decode_step(&loaded.model, &mut caches, token).unwrap();
    }
    tokens
}

#[test]
fn the_decoder_gives_the_step_by_step_tokens_and_caches() {
    let prompt: Vec<u32> = (0..PROMPT as u32).map(|i| (i * 37 + 11) % 200).collect();
    // Quantized weights (tiny Qwen2), and a head wide enough for KIVI's groups (tiny
    // Mistral, head_dim 32) with a 32-token window that flushes every 32 steps.
    let runs = [
        ("tiny-qwen2", "full"),
        ("tiny-mistral", "full"),
        ("tiny-mistral", "k4v4-g32-r32"),
    ];
    for backend in backends() {
        for (fixture, config) in runs {
            let loaded = load(fixture, backend);
            let config: CacheConfig = config.parse().unwrap();
            let want = step_by_step(&loaded, config, &prompt);
            let mut caches = caches(&loaded, config);
            let logits = prefill(&loaded.model, &mut caches, &prompt, 16).unwrap();
            let sampler = Sampler::new(SamplingParams::greedy()).unwrap();
            let mut context = prompt.clone();
            let mut decoder =
                Decoder::new(&loaded.model, sampler, &logits, &context, None).unwrap();
            let mut got = Vec::new();
            for step in 0..STEPS {
                let more = step + 1 < STEPS;
                let token = decoder
                    .next_token(&loaded.model, &mut caches, &context, more)
                    .unwrap();
                got.push(token);
                context.push(token);
            }
            assert_eq!(got, want, "{backend} {fixture} {config}");
            // Every token handed out but the last is in the caches.
            for cache in &caches {
                assert_eq!(cache.len(), PROMPT + STEPS - 1, "{backend} {config}");
            }
            let past_the_last = decoder.next_token(&loaded.model, &mut caches, &context, false);
            assert!(past_the_last.is_err(), "{backend}: a token past the last");
        }
    }
}

/// Stopping right after a token whose step was built ahead (an end-of-text token on the
/// MLX backends) leaves the caches one position longer than the tokens the caller kept;
/// stopping before feeding the last accepted token (the host backend) one shorter. Either
/// way the caches are exactly one token off, so the caller can cut back.
#[test]
fn the_caches_are_one_token_off_where_the_caller_stops() {
    let prompt: Vec<u32> = (0..PROMPT as u32).collect();
    for backend in backends() {
        let loaded = load("tiny-mistral", backend);
        let config: CacheConfig = "k2v2-g32-r32".parse().unwrap();
        let mut caches = caches(&loaded, config);
        let logits = prefill(&loaded.model, &mut caches, &prompt, 64).unwrap();
        let sampler = Sampler::new(SamplingParams::greedy()).unwrap();
        let mut context = prompt.clone();
        let mut decoder = Decoder::new(&loaded.model, sampler, &logits, &context, None).unwrap();
        for _ in 0..5 {
            let token = decoder
                .next_token(&loaded.model, &mut caches, &context, true)
                .unwrap();
            context.push(token);
        }
        // The caller accepted 5 tokens; the last one's step was built ahead (MLX) or will
        // be built when the next token is asked for (host).
        let held = caches[0].len();
        let expected = if loaded.model.pipelines() {
            context.len()
        } else {
            context.len() - 1
        };
        assert_eq!(held, expected, "{backend}");
    }
}

/// A process that stops with a step in flight exits cleanly: the decoder waits for that
/// step when it is dropped. Before it did, the evaluation raced MLX's static destructors
/// at exit and about one such process in four aborted (a heap corruption). The test above
/// stops that way, so it runs here on its own in fresh processes; with that rate, twenty
/// clean exits in a row would happen by chance less than once in a hundred.
#[test]
fn a_process_stopping_with_a_step_in_flight_exits_cleanly() {
    let exe = std::env::current_exe().unwrap();
    for run in 0..20 {
        let out = std::process::Command::new(&exe)
            .args([
                "--exact",
                "the_caches_are_one_token_off_where_the_caller_stops",
                "--test-threads",
                "1",
            ])
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "run {run}: {}\n{}",
            out.status,
            String::from_utf8_lossy(&out.stderr)
        );
    }
}
