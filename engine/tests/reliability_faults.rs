//! Reliability: faults at the engine level. Cancelling at any moment (queued, during
//! prefill, during decode, or by dropping the generation) ends the work within a step and
//! leaves the engine answering exactly as a fresh one; a model or context that would not
//! fit in memory is refused before it is loaded.

mod reliability_common;

use kivi_engine::backend::Backend;
use kivi_engine::budget::{self, KvShape};
use kivi_engine::cache::{CacheConfig, KiviConfig};
use kivi_engine::error::LoadError;
use kivi_engine::sampling::SamplingParams;
use kivi_engine::session::{
    Engine, EngineError, EngineOptions, Event, FinishReason, ModelSource, Request,
};
use reliability_common::*;

fn options(dir: &tempfile::TempDir) -> EngineOptions {
    let mut options = EngineOptions::new(ModelSource::Path(dir.path().to_path_buf()));
    options.prefill_chunk = 16;
    options.max_cached_conversations = 2;
    options
}

fn request(prompt: String, max_tokens: usize, cache: Option<CacheConfig>) -> Request {
    let mut r = Request::text(prompt);
    r.sampling = SamplingParams::greedy();
    r.max_tokens = max_tokens;
    r.cache = cache;
    r
}

/// A deterministic pseudo-random stream.
fn rng(mut seed: u64) -> impl FnMut(u64) -> u64 {
    move |below| {
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        seed % below.max(1)
    }
}

/// Text, generated count and reason of a request run to the end.
async fn answer(engine: &Engine, r: Request) -> (String, usize, FinishReason) {
    let mut generation = engine.generate(r);
    while let Some(event) = generation.next().await {
        match event {
            Event::Done {
                reason,
                text,
                stats,
            } => return (text, stats.generated_tokens, reason),
            Event::Error { message } => panic!("{message}"),
            _ => {}
        }
    }
    panic!("no Done event");
}

#[tokio::test]
async fn cancelling_at_random_moments_leaves_the_engine_as_good_as_new() {
    let dir = tiny_copy_of("tiny-mistral", 4096);
    let engine = Engine::load(options(&dir)).await.unwrap();
    let kivi = CacheConfig::Kivi(KiviConfig::new(2, 2, 32, 32).unwrap());
    let mut next = rng(0x5eed_cafe);
    let (mut in_prefill, mut in_decode, mut queued, mut dropped) = (0, 0, 0, 0);
    for round in 0..40 {
        let prompt: String = (0..20 + next(600))
            .map(|i| char::from(b'0' + ((i * 7 + round) % 10) as u8))
            .collect();
        let cache = (next(2) == 0).then_some(kivi);
        // Far more tokens than can be produced before the cancel lands.
        let mut generation = engine.generate(request(prompt, 5000, cache));
        // Cancel after this many events (0: before the request starts).
        let cancel_after = if round % 7 == 3 { 0 } else { 1 + next(60) };
        let drop_it = next(5) == 0;
        let mut seen = 0;
        let mut after_cancel = 0;
        let mut cancelled_in = None;
        if cancel_after == 0 {
            generation.cancel();
            cancelled_in = Some("queue");
        }
        let end = loop {
            let event = generation.next().await.expect("events until Done");
            if cancelled_in.is_some()
                && matches!(event, Event::Prefill { .. } | Event::Token { .. })
            {
                after_cancel += 1;
            }
            match &event {
                Event::Done { reason, .. } => break Some(*reason),
                Event::Error { message } => panic!("round {round}: {message}"),
                _ => {}
            }
            seen += 1;
            if seen == cancel_after && cancelled_in.is_none() {
                cancelled_in = Some(match event {
                    Event::Token { .. } => "decode",
                    _ => "prefill",
                });
                if drop_it {
                    drop(generation);
                    dropped += 1;
                    break None;
                }
                generation.cancel();
            }
        };
        match cancelled_in {
            Some("queue") => queued += 1,
            Some("prefill") => in_prefill += 1,
            Some(_) => in_decode += 1,
            None => {}
        }
        if let Some(reason) = end {
            assert_eq!(reason, FinishReason::Cancelled, "round {round}");
            // The model thread checks the switch before every chunk and token. It does
            // not wait for the reader, so what arrives after the cancel is the backlog
            // the reader had not read yet plus at most one step.
            assert!(
                after_cancel <= 64,
                "round {round}: {after_cancel} steps after the cancel"
            );
        }
    }
    println!("cancelled: {queued} queued, {in_prefill} in prefill, {in_decode} in decode, {dropped} by dropping");
    assert!(in_prefill > 0 && in_decode > 0 && queued > 0);

    // The engine answers a new request exactly as a fresh engine does, in both caches.
    let fresh = Engine::load(options(&dir)).await.unwrap();
    for cache in [None, Some(kivi)] {
        let r = request("Call me Ishmael. Some years ago".into(), 40, cache);
        let after = answer(&engine, r.clone()).await;
        assert_eq!(after.2, FinishReason::Length);
        assert_eq!(after, answer(&fresh, r).await, "{cache:?}");
    }
}

#[tokio::test]
async fn a_model_that_does_not_fit_is_refused_before_loading() {
    let dir = tiny_copy(4096);
    let mut small = options(&dir);
    small.available_memory = Some(64 << 20);
    let err = Engine::load(small).await.err().expect("refused");
    let EngineError::Load(LoadError::InsufficientMemory {
        needed, available, ..
    }) = &err
    else {
        panic!("expected a memory refusal: {err}");
    };
    assert_eq!(*available, 64 << 20);
    assert!(*needed > *available);
    let msg = err.to_string();
    assert!(
        msg.contains("not enough memory")
            && msg.contains("KV cache")
            && msg.contains("shorter context"),
        "{msg}"
    );
    // With the memory it needs, it loads.
    let need = budget::estimate(dir.path(), None, &CacheConfig::Full, &Backend::HOST).unwrap();
    let mut enough = options(&dir);
    enough.available_memory = Some(need.total());
    Engine::load(enough).await.unwrap();
}

#[tokio::test]
async fn the_kv_cache_of_the_context_counts_and_kivi_makes_it_fit() {
    let path = smollm2_path();
    let full = budget::estimate(&path, None, &CacheConfig::Full, &Backend::HOST).unwrap();
    let kivi_config = CacheConfig::Kivi(KiviConfig::default());
    let kivi = budget::estimate(&path, None, &kivi_config, &Backend::HOST).unwrap();
    // SmolLM2: 8192 tokens x 30 layers x 3 KV heads x 64 channels x K and V, in float16.
    assert_eq!(full.context, 8192);
    assert_eq!(full.kv_cache, 8192 * 30 * 3 * 64 * 2 * 2);
    // The default K4V2 cache: 3.8 times smaller.
    assert!(kivi.kv_cache * 3 < full.kv_cache);
    assert_eq!(full.weights, kivi.weights);
    let short = budget::estimate(&path, Some(1024), &CacheConfig::Full, &Backend::HOST).unwrap();
    assert_eq!(short.kv_cache * 8, full.kv_cache);
    println!(
        "SmolLM2: full {}; KIVI {}",
        full.describe(),
        kivi.describe()
    );

    // Just too little for the full cache: refused, naming the parts; enough for KIVI.
    let available = full.total() - 1;
    let mut options = EngineOptions::new(ModelSource::Path(path.clone()));
    options.available_memory = Some(available);
    let err = Engine::load(options.clone()).await.err().expect("refused");
    assert!(
        err.to_string().contains("8192 tokens with the full cache"),
        "{err}"
    );
    options.cache = kivi_config;
    let engine = Engine::load(options.clone()).await.unwrap();
    drop(engine);
    // A shorter context fits too.
    options.cache = CacheConfig::Full;
    options.context_length = Some(1024);
    Engine::load(options).await.unwrap();
}

/// "Fit this machine": with memory for the weights and about half the full cache, the
/// engine takes the longest context that fits (a step of 256 more would not), and the
/// default KIVI cache fits the model's whole context in the same memory.
#[tokio::test]
async fn fit_this_machine_takes_the_longest_context_that_fits() {
    let path = smollm2_path();
    let full = budget::estimate(&path, None, &CacheConfig::Full, &Backend::HOST).unwrap();
    let available = full.total() - full.kv_cache / 2;
    let fitted =
        budget::longest_context(&path, &CacheConfig::Full, &Backend::HOST, Some(available))
            .unwrap();
    assert!(
        fitted.context < 8192 && fitted.context.is_multiple_of(256),
        "{fitted:?}"
    );
    assert!(fitted.total() <= available);
    let longer = budget::estimate(
        &path,
        Some(fitted.context + 256),
        &CacheConfig::Full,
        &Backend::HOST,
    )
    .unwrap();
    assert!(longer.total() > available, "{longer:?}");
    let kivi = CacheConfig::recommended();
    let whole = budget::longest_context(&path, &kivi, &Backend::HOST, Some(available)).unwrap();
    assert_eq!(whole.context, 8192);

    // The engine loads with the fitted context; with too little memory for even a short
    // one it refuses, as a fixed context does.
    let mut options = EngineOptions::new(ModelSource::Path(path.clone()));
    options.available_memory = Some(available);
    options.fit_context = true;
    options.context_length = Some(8192);
    let engine = Engine::load(options.clone()).await.unwrap();
    assert_eq!(engine.context_length(), fitted.context);
    drop(engine);
    options.available_memory = Some(full.weights);
    let err = Engine::load(options).await.err().expect("refused");
    assert!(err.to_string().contains("not enough memory"), "{err}");
}

#[tokio::test]
async fn the_kv_estimate_matches_the_real_buffers() {
    for (fixture, shape) in [
        // Tiny Mistral: 2 layers, 2 KV heads, head_dim 32; float32 on the CPU.
        ("tiny-mistral", KvShape::global(2, 2, 32)),
        // Tiny Gemma 3: 2 of its 4 layers over an 8-token window.
        (
            "tiny-gemma3",
            KvShape {
                window_layers: 2,
                window: 8,
                ..KvShape::global(4, 2, 32)
            },
        ),
    ] {
        let dir = tiny_copy_of(fixture, 4096);
        let engine = Engine::load(options(&dir)).await.unwrap();
        for cache in [
            CacheConfig::Full,
            CacheConfig::Kivi(KiviConfig::new(2, 2, 32, 32).unwrap()),
            CacheConfig::Kivi(KiviConfig::new(4, 2, 64, 128).unwrap()),
        ] {
            let mut generation = engine.generate(request("x".repeat(700), 30, Some(cache)));
            let stats = loop {
                match generation.next().await.unwrap() {
                    Event::Done { stats, .. } => break stats,
                    Event::Error { message } => panic!("{message}"),
                    _ => {}
                }
            };
            let tokens = stats.kv.total.tokens;
            let estimate = budget::kv_cache_bytes(shape, tokens, &cache, &Backend::HOST);
            let held = stats.kv.total.held_bytes;
            println!("{fixture}, {cache}: {tokens} tokens, estimate {estimate} B, held {held} B");
            let error = (estimate as f64 - held as f64).abs() / held as f64;
            assert!(
                error < 0.05,
                "{fixture}, {cache}: estimate {estimate} vs held {held}"
            );
        }
    }
}
