//! The generation session on the offline SmolLM2: events, prefix reuse across turns (full
//! and KIVI caches), cancellation, and context checks.

mod offline;

use kivi_engine::cache::{CacheConfig, KiviConfig};
use kivi_engine::sampling::SamplingParams;
use kivi_engine::session::{Document, Event, FinishReason, Prompt, Request};
use kivi_engine::stats::Phase;
use kivi_engine::tokenizer::{Message, Role};

fn chat(messages: Vec<Message>, documents: Vec<Document>, max_tokens: usize) -> Request {
    Request {
        prompt: Prompt::Chat {
            messages,
            documents,
        },
        sampling: SamplingParams::greedy(),
        max_tokens,
        cache: None,
        format: None,
    }
}

fn document() -> Document {
    Document {
        name: "notes.txt".into(),
        text: "The ship is called the Pequod. Its captain is Ahab, who hunts a white whale \
               named Moby Dick. The narrator is Ishmael, a sailor from Manhattan."
            .into(),
    }
}

/// Two turns on one engine: the second reuses the first's cache. Returns the second
/// turn's outcome and that of the same request on a fresh engine.
async fn second_turn_reuses_the_prefix(cache: CacheConfig) -> (offline::Outcome, offline::Outcome) {
    let engine = offline::engine(|o| o.cache = cache).await;
    let q1 = Message::new(Role::User, "What is the ship called?");
    let first = offline::run(&engine, chat(vec![q1.clone()], vec![document()], 12)).await;
    assert_eq!(first.error, None);
    assert_eq!(first.reused, 0);
    println!("[{cache}] turn 1: {:?}", first.text);

    let turn2 = vec![
        q1,
        Message::new(Role::Assistant, first.text.trim()),
        Message::new(Role::User, "Who is its captain?"),
    ];
    let second = offline::run(&engine, chat(turn2.clone(), vec![document()], 12)).await;
    println!(
        "[{cache}] turn 2: reused {} of {} prompt tokens: {:?}",
        second.reused, second.prompt_tokens, second.text
    );
    assert_eq!(second.error, None);
    // The whole first prompt is shared (a KIVI cache may give back a partial group).
    let slack = match cache {
        CacheConfig::Full => 0,
        CacheConfig::Kivi(k) => k.group_size(),
    };
    assert!(
        second.reused + slack >= first.prompt_tokens,
        "reused {} of a {}-token first prompt",
        second.reused,
        first.prompt_tokens
    );
    assert!(second.reused < second.prompt_tokens);
    let Some(Event::Done { stats, .. }) = second.events.last() else {
        panic!("turn 2 ends with Done");
    };
    assert_eq!(stats.prefilled_tokens, second.prompt_tokens - second.reused);
    assert!(!second.ids.is_empty());

    let fresh_engine = offline::engine(|o| o.cache = cache).await;
    let fresh = offline::run(&fresh_engine, chat(turn2, vec![document()], 12)).await;
    assert_eq!(fresh.reused, 0);
    println!("[{cache}] fresh turn 2: {:?}", fresh.text);
    (second, fresh)
}

/// The reused turn's answer starts as a fresh engine's. Not all of it need be the same:
/// turn 1's answer entered the cache through decode steps, and a fresh engine reads it in a
/// prompt chunk, which on the host backend rounds differently (the steps' weight products
/// take int8 inputs), so a near tie late in the answer may go either way.
fn assert_same_start(reused: &[u32], fresh: &[u32]) {
    let half = fresh.len() / 2;
    assert!(
        half > 0 && reused.get(..half) == fresh.get(..half),
        "reusing the prefix changed the answer: {reused:?} against {fresh:?}"
    );
}

#[tokio::test]
async fn second_turn_reuses_the_prefix_with_the_full_cache() {
    let (reused, fresh) = second_turn_reuses_the_prefix(CacheConfig::Full).await;
    assert_same_start(&reused.ids, &fresh.ids);
}

#[tokio::test]
async fn second_turn_reuses_the_prefix_with_kivi() {
    // While every token fits the residual window KIVI holds them in full precision, so
    // reuse must not change the answer more than the full cache's reuse may.
    let wide = KiviConfig::new(2, 2, 32, 256).unwrap();
    let (reused, fresh) = second_turn_reuses_the_prefix(CacheConfig::Kivi(wide)).await;
    assert_same_start(&reused.ids, &fresh.ids);
    // With a short window part of the shared prefix was quantized while turn 1 decoded,
    // whereas a fresh prefill attends to the whole prompt in full precision: the answers
    // may differ, but the reuse must work.
    let narrow = KiviConfig::new(2, 2, 32, 32).unwrap();
    second_turn_reuses_the_prefix(CacheConfig::Kivi(narrow)).await;
}

#[tokio::test]
async fn events_arrive_in_order_with_statistics() {
    let engine = offline::engine(|o| o.prefill_chunk = 4).await;
    let mut request = Request::text("The sea was calm and the sky");
    request.sampling = SamplingParams::greedy();
    request.max_tokens = 6;
    let out = offline::run(&engine, request).await;
    assert!(matches!(
        out.events.first(),
        Some(Event::Started {
            reused_tokens: 0,
            ..
        })
    ));
    let prefill: Vec<(usize, usize)> = out
        .events
        .iter()
        .filter_map(|e| match e {
            Event::Prefill { done, total, .. } => Some((*done, *total)),
            _ => None,
        })
        .collect();
    // Chunks of 4 over all but the last prompt token, which runs alone.
    let total = out.prompt_tokens;
    let mut want: Vec<(usize, usize)> = (1..=(total - 1).div_ceil(4))
        .map(|i| ((4 * i).min(total - 1), total))
        .collect();
    want.push((total, total));
    assert_eq!(prefill, want, "one progress event per chunk");
    let Some(Event::Done {
        reason,
        text,
        stats,
    }) = out.events.last()
    else {
        panic!("the last event is Done: {:?}", out.events.last());
    };
    assert_eq!(*reason, FinishReason::Length);
    assert_eq!(text, &out.pieces.concat());
    assert_eq!(stats.phase, Phase::Done);
    assert_eq!(stats.generated_tokens, 6);
    // The last generated token is never fed back, so the cache holds one less.
    assert_eq!(stats.kv.total.tokens, total + 5);
    assert_eq!(stats.kv.layers.len(), 30);
    assert!(stats.kv.total.held_bytes > 0 && stats.prefill_tokens_per_s > 0.0);
    assert!(stats.decode_tokens_per_s > 0.0 && stats.time_to_first_token_s.is_some());
    assert!(stats.memory.process_resident_bytes > 0);
    let token_stats = out
        .events
        .windows(2)
        .filter(|w| matches!(w[0], Event::Token { .. }) && matches!(w[1], Event::Stats(_)))
        .count();
    assert_eq!(token_stats, 6, "statistics follow every token");
}

#[tokio::test]
async fn cancel_stops_decoding_and_prefill() {
    let engine = offline::engine(|o| o.prefill_chunk = 8).await;
    // Greedy, this prompt runs on for well over 64 tokens without an end token.
    let mut request = Request::text("Once upon a time, there was a little");
    request.max_tokens = 10_000;
    let mut generation = engine.generate(request);
    let mut generated = 0;
    let reason = loop {
        match generation.next().await.expect("events until Done") {
            Event::Token { .. } => {
                generated += 1;
                generation.cancel();
            }
            Event::Done { reason, .. } => break reason,
            Event::Error { message } => panic!("{message}"),
            _ => {}
        }
    };
    assert_eq!(reason, FinishReason::Cancelled);
    // The model thread does not wait for the reader: it may finish a step or two before
    // the cancel lands, but it checks before every token.
    assert!(generated <= 3, "{generated} tokens after the cancel");

    // Cancelled during prefill: no token at all.
    let long = "whale ".repeat(60);
    let mut generation = engine.generate(Request::text(long));
    let mut chunks = 0;
    loop {
        match generation.next().await.expect("events until Done") {
            Event::Prefill { .. } => {
                chunks += 1;
                generation.cancel();
            }
            Event::Token { .. } => panic!("no token after a cancel during prefill"),
            Event::Done { reason, stats, .. } => {
                assert_eq!(reason, FinishReason::Cancelled);
                assert!(stats.prefilled_tokens < stats.prompt_tokens);
                assert!(
                    stats.prefilled_tokens % 8 == 0
                        || stats.prefilled_tokens == stats.prompt_tokens - 1,
                    "whole chunks only"
                );
                break;
            }
            Event::Error { message } => panic!("{message}"),
            _ => {}
        }
    }
    assert!(chunks <= 3, "{chunks} chunks after the cancel");

    // Cancelled while queued behind another request: nothing of it runs.
    let mut request = Request::text("Call me Ishmael.");
    request.max_tokens = 10_000;
    let mut running = engine.generate(request);
    let mut queued = engine.generate(Request::text("Once upon a time"));
    queued.cancel();
    loop {
        match running.next().await {
            Some(Event::Token { .. } | Event::Done { .. }) | None => break,
            _ => {}
        }
    }
    running.cancel();
    let mut last = None;
    while let Some(event) = queued.next().await {
        last = Some(event);
    }
    let Some(Event::Done { reason, stats, .. }) = last else {
        panic!("ends with Done: {last:?}");
    };
    assert_eq!(reason, FinishReason::Cancelled);
    assert_eq!(stats.prefilled_tokens, 0);
}

#[tokio::test]
async fn prompt_longer_than_the_context_is_refused() {
    let engine = offline::engine(|o| o.context_length = Some(64)).await;
    let out = offline::run(
        &engine,
        chat(
            vec![Message::new(Role::User, "Summarize.")],
            vec![Document {
                name: "long.txt".into(),
                text: "Call me Ishmael. ".repeat(40),
            }],
            8,
        ),
    )
    .await;
    let message = out.error.expect("an error event");
    assert!(message.contains("context holds 64"), "{message}");
    assert_eq!(out.ids.len(), 0);

    // Generation stops when the context fills up (greedy, this story has no end token
    // within 64 tokens).
    let mut request = Request::text("Once upon a time, there was a little");
    request.max_tokens = 1000;
    let out = offline::run(&engine, request).await;
    assert_eq!(out.reason, Some(FinishReason::ContextFull));
    assert_eq!(out.prompt_tokens + out.ids.len(), 64);

    let too_long = kivi_engine::session::Engine::load({
        let mut o = kivi_engine::session::EngineOptions::new(
            kivi_engine::session::ModelSource::Path(offline::smollm2_path()),
        );
        o.context_length = Some(100_000);
        o
    })
    .await;
    assert!(too_long
        .err()
        .unwrap()
        .to_string()
        .contains("exceeds the model's 8192"));
}

/// The held bytes and cache name a request ended with.
fn final_cache(out: &offline::Outcome) -> (u64, String) {
    let Some(Event::Done { stats, .. }) = out.events.last() else {
        panic!("ends with Done: {:?}", out.events.last());
    };
    (stats.kv.total.held_bytes, stats.cache.clone())
}

#[tokio::test]
async fn a_slot_built_with_other_cache_settings_is_rebuilt() {
    // Regression: with every slot in use, the least recently used slot was handed to a
    // request with other cache settings and its old caches were truncated and reused, so
    // a K2V2 request ran on K4V4 caches.
    let k4v4 = CacheConfig::Kivi(KiviConfig::new(4, 4, 32, 32).unwrap());
    let k2v2 = CacheConfig::Kivi(KiviConfig::new(2, 2, 32, 32).unwrap());
    let with = |cache| {
        let mut r = chat(
            vec![Message::new(Role::User, "Who is the captain?")],
            vec![document()],
            4,
        );
        r.cache = Some(cache);
        r
    };
    let engine = offline::engine(|o| o.max_cached_conversations = 1).await;
    let first = offline::run(&engine, with(k4v4)).await;
    assert_eq!(first.error, None);
    assert!(first.prompt_tokens > 64, "long enough to quantize groups");
    let second = offline::run(&engine, with(k2v2)).await;
    assert_eq!(second.error, None);
    assert_eq!(second.reused, 0, "nothing reused from a K4V4 cache");
    let (held, name) = final_cache(&second);
    assert_eq!(name, "k2v2-g32-r32");

    let fresh_engine = offline::engine(|o| o.max_cached_conversations = 1).await;
    let fresh = offline::run(&fresh_engine, with(k2v2)).await;
    assert_eq!((held, name), final_cache(&fresh));
    assert_eq!(second.ids, fresh.ids);
    assert!(held < final_cache(&first).0, "2-bit holds less than 4-bit");

    // The same holds for a named conversation whose settings change.
    let a = offline::run_in(&engine, "chat-a", with(k4v4)).await;
    let b = offline::run_in(&engine, "chat-a", with(k2v2)).await;
    assert_eq!(b.reused, 0);
    assert_eq!(final_cache(&b).1, "k2v2-g32-r32");
    assert!(final_cache(&b).0 < final_cache(&a).0);
}

#[tokio::test]
async fn conversations_keep_their_caches_and_prefill_only_requests_fill_them() {
    let kivi = CacheConfig::Kivi(KiviConfig::default());
    let engine = offline::engine(|o| {
        o.max_cached_conversations = 2;
        o.cache = kivi;
    })
    .await;
    // Prefill only: the documents go into chat-1's cache, no token is generated.
    let system = Message::new(Role::System, "Answer from the document.");
    let prefill = offline::run_in(
        &engine,
        "chat-1",
        chat(vec![system.clone()], vec![document()], 0),
    )
    .await;
    assert_eq!(prefill.error, None);
    assert!(prefill.ids.is_empty());
    assert_eq!(prefill.reason, Some(FinishReason::Length));
    let caches = engine.conversations().await.unwrap();
    assert_eq!(caches.len(), 1);
    assert_eq!(caches[0].conversation, "chat-1");
    assert_eq!(caches[0].tokens, prefill.prompt_tokens);
    assert_eq!(caches[0].cache, kivi);
    assert!(caches[0].kv.total.held_bytes > 0);

    // An anonymous request does not take chat-1's slot for its (shared) prefix.
    let other = offline::run(&engine, chat(vec![system.clone()], vec![document()], 2)).await;
    assert_eq!(other.reused, 0);

    // The question reuses nearly all of the prefilled prompt (the document text).
    let question = Message::new(Role::User, "Who is the captain?");
    let counted = engine
        .count_prompt(&Prompt::Chat {
            messages: vec![system.clone(), question.clone()],
            documents: vec![document()],
        })
        .await
        .unwrap();
    let asked = offline::run_in(
        &engine,
        "chat-1",
        chat(vec![system, question], vec![document()], 4),
    )
    .await;
    assert_eq!(asked.error, None);
    assert_eq!(asked.prompt_tokens, counted);
    println!(
        "prefilled {} tokens; the question reused {} of {}",
        prefill.prompt_tokens, asked.reused, asked.prompt_tokens
    );
    assert!(
        asked.reused + 8 >= prefill.prompt_tokens - 8,
        "reused {} of {} prefilled",
        asked.reused,
        prefill.prompt_tokens
    );
    engine.drop_conversation("chat-1").unwrap();
    assert!(engine.conversations().await.unwrap().is_empty());
}
