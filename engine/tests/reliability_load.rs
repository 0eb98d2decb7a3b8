//! Reliability under load, on the tiny random-weight models (so that thousands of tokens
//! take seconds): a 4,000-token generation runs in bounded memory (the process grows by
//! the KV cache and not much more) with a bounded rate of statistics, and a 7,000-token
//! document is prefilled in chunks with a progress event per chunk.

mod reliability_common;

use std::time::{Duration, Instant};

use kivi_engine::cache::{CacheConfig, KiviConfig};
use kivi_engine::sampling::SamplingParams;
use kivi_engine::session::{
    Document, Engine, EngineOptions, Event, FinishReason, ModelSource, Prompt, Request,
};
use kivi_engine::stats::{Phase, Stats};
use kivi_engine::tokenizer::{Message, Role};
use reliability_common::*;

const MIB: f64 = (1u64 << 20) as f64;

/// Every event of a generation, with the time it was read.
async fn events(engine: &Engine, request: Request) -> Vec<(Instant, Event)> {
    let mut generation = engine.generate(request);
    let mut out = Vec::new();
    while let Some(event) = generation.next().await {
        if let Event::Error { message } = &event {
            panic!("{message}");
        }
        out.push((Instant::now(), event));
    }
    out
}

fn stats_of(events: &[(Instant, Event)]) -> Vec<&Stats> {
    events
        .iter()
        .filter_map(|(_, e)| match e {
            Event::Stats(s) => Some(&**s),
            _ => None,
        })
        .collect()
}

async fn long_generation(fixture: &str, cache: CacheConfig) {
    let dir = tiny_copy_of(fixture, 8192);
    let mut options = EngineOptions::new(ModelSource::Path(dir.path().to_path_buf()));
    options.cache = cache;
    let engine = Engine::load(options).await.unwrap();
    let mut request = Request::text("Once upon a time");
    request.sampling = SamplingParams::greedy();
    request.max_tokens = 4000;
    let start = Instant::now();
    let events = events(&engine, request).await;
    let seconds = start.elapsed().as_secs_f64();
    let Some((_, Event::Done { reason, stats, .. })) = events.last() else {
        panic!("ends with Done");
    };
    assert_eq!(*reason, FinishReason::Length);
    assert_eq!(stats.generated_tokens, 4000);

    // Memory: from token 500 on, the process grows by about what the KV cache grows by.
    let decode: Vec<&Stats> = stats_of(&events)
        .into_iter()
        .filter(|s| s.phase == Phase::Decode)
        .collect();
    let at = |n: usize| decode.iter().find(|s| s.generated_tokens >= n).unwrap();
    let (early, last) = (at(500), decode.last().unwrap());
    let rss_growth =
        last.memory.process_resident_bytes as f64 - early.memory.process_resident_bytes as f64;
    let kv_growth = last.kv.total.held_bytes as f64 - early.kv.total.held_bytes as f64;
    let peak = decode
        .iter()
        .map(|s| s.memory.process_resident_bytes)
        .max()
        .unwrap();
    println!(
        "[{fixture} {cache}] 4000 tokens in {seconds:.1} s; resident at 500 tokens {:.1} MiB, \
         at 4000 {:.1} MiB (peak {:.1} MiB); KV cache grew {:.2} MiB",
        early.memory.process_resident_bytes as f64 / MIB,
        last.memory.process_resident_bytes as f64 / MIB,
        peak as f64 / MIB,
        kv_growth / MIB
    );
    assert!(kv_growth > 0.0);
    assert!(
        rss_growth < kv_growth + 64.0 * MIB,
        "resident memory grew {:.1} MiB for {:.2} MiB of KV cache",
        rss_growth / MIB,
        kv_growth / MIB
    );

    // Statistics: exactly one snapshot per generated token (the app throttles what it
    // shows), none repeated, and not more often than tokens arrive.
    assert_eq!(decode.len(), 4000);
    assert!(decode
        .windows(2)
        .all(|w| w[1].generated_tokens == w[0].generated_tokens + 1));
    let tokens = events
        .iter()
        .filter(|(_, e)| matches!(e, Event::Token { .. }))
        .count();
    assert!((4000..=4001).contains(&tokens), "{tokens} token events");
    println!(
        "[{fixture} {cache}] {} events in {seconds:.1} s: {:.0} statistics per second",
        events.len(),
        decode.len() as f64 / seconds
    );
}

#[tokio::test]
async fn a_long_generation_runs_in_bounded_memory_full_cache() {
    long_generation("tiny-llama3", CacheConfig::Full).await;
}

#[tokio::test]
async fn a_long_generation_runs_in_bounded_memory_kivi_cache() {
    long_generation(
        "tiny-mistral",
        CacheConfig::Kivi(KiviConfig::new(2, 2, 32, 128).unwrap()),
    )
    .await;
}

#[tokio::test]
async fn a_long_document_is_prefilled_in_chunks_with_progress() {
    let dir = tiny_copy(8192);
    let mut options = EngineOptions::new(ModelSource::Path(dir.path().to_path_buf()));
    options.prefill_chunk = 256;
    let interval = Duration::from_millis(20);
    options.stats_interval = interval;
    let engine = Engine::load(options).await.unwrap();
    // About 7,000 byte-level tokens of text.
    let text: String = (0..700)
        .map(|i| format!("Line {i:04}. "))
        .collect::<String>()
        .chars()
        .take(7000)
        .collect();
    let request = Request {
        prompt: Prompt::Chat {
            messages: vec![Message::new(Role::User, "Summarize the document.")],
            documents: vec![Document {
                name: "long.txt".into(),
                text,
            }],
        },
        sampling: SamplingParams::greedy(),
        max_tokens: 8,
        cache: None,
        format: None,
    };
    let counted = engine.count_prompt(&request.prompt).await.unwrap();
    assert!(counted > 7000, "{counted} prompt tokens");
    let events = events(&engine, request).await;
    let Some((_, Event::Started { prompt_tokens, .. })) = events.first() else {
        panic!("starts with Started");
    };
    assert_eq!(*prompt_tokens, counted);
    let progress: Vec<(usize, usize, Instant)> = events
        .iter()
        .filter_map(|(at, e)| match e {
            Event::Prefill { done, total, .. } => Some((*done, *total, *at)),
            _ => None,
        })
        .collect();
    let gaps: Vec<u128> = progress
        .windows(2)
        .map(|w| (w[1].2 - w[0].2).as_millis())
        .collect();
    println!("DEBUG chunk gaps ms: {gaps:?}");
    // One event per 256-token chunk of all but the last prompt token, in order, then one
    // for that token, which runs alone.
    assert_eq!(progress.len(), (counted - 1).div_ceil(256) + 1);
    for (i, (done, total, _)) in progress.iter().enumerate() {
        assert_eq!(*total, counted);
        let want = if i + 1 == progress.len() {
            counted
        } else {
            ((i + 1) * 256).min(counted - 1)
        };
        assert_eq!(*done, want);
    }
    // Statistics during prefill come at most once per interval (plus the first).
    let prefill_stats = stats_of(&events)
        .into_iter()
        .filter(|s| s.phase == Phase::Prefill)
        .count();
    let prefill_time = progress.last().unwrap().2 - events[0].0;
    let bound = (prefill_time.as_secs_f64() / interval.as_secs_f64()).ceil() as usize + 1;
    println!(
        "{counted} prompt tokens: {} chunks, {prefill_stats} statistics in {:.2} s (bound {bound})",
        progress.len(),
        prefill_time.as_secs_f64()
    );
    assert!(
        prefill_stats <= bound,
        "{prefill_stats} statistics > {bound}"
    );
    let Some((_, Event::Done { reason, stats, .. })) = events.last() else {
        panic!("ends with Done");
    };
    assert_eq!(*reason, FinishReason::Length);
    assert_eq!(stats.prefilled_tokens, counted);
    assert_eq!(stats.kv.total.tokens, counted + 7);
}
