//! The back end without a window: the command functions called directly, on a real store in
//! a temporary folder and the real offline model (SmolLM2-135M), with events recorded instead
//! of sent to a webview, dialogs answered by a fake desktop, and downloads served by a local
//! hub-shaped HTTP server. Timings are printed, never asserted.

#[path = "../../engine/tests/support/hub_server.rs"]
mod hub_server;

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use kivi_engine::backend::{Backend, Device, Precision};
use serde_json::Value;

use crate::commands::{chats, documents, generation, models, server, settings, stats, system};
use crate::desktop::FakeDesktop;
use crate::document_part::grouped;
use crate::error::ErrorCode;
use crate::events::{names, RecordingSink};
use crate::state::{App, AppConfig, AppState};
use crate::store::{
    BackendChoice, CacheMode, DownloadFile, DownloadRecord, DownloadState, MessageStatus,
    RotationSetting, Settings, Store,
};
use crate::types::ModelAvailability;

/// The workspace root.
fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .unwrap()
        .to_path_buf()
}

fn offline_model() -> PathBuf {
    let path = root().join(".data/models/SmolLM2-135M-Instruct.Q4_1.gguf");
    assert!(
        path.is_file(),
        "run scripts/setup.sh to fetch {}",
        path.display()
    );
    path
}

fn chapter() -> PathBuf {
    root().join(".data/texts/moby-dick/chapter_97.txt")
}

struct Harness {
    app: App,
    sink: Arc<RecordingSink>,
    desktop: Arc<FakeDesktop>,
    dir: tempfile::TempDir,
}

/// A started app on a fresh data folder (and hub cache); `endpoint` is the hub.
fn harness_with(dir: tempfile::TempDir, endpoint: &str) -> Harness {
    let sink = Arc::new(RecordingSink::default());
    let desktop = Arc::new(FakeDesktop::default());
    let store = Store::open(dir.path().join("kivi-chat.db")).unwrap();
    let config = AppConfig {
        builtin_model: offline_model(),
        hub: kivi_engine::hub::HubConfig::new(dir.path().join("hub"), endpoint),
    };
    let app = AppState::new(store, sink.clone(), desktop.clone(), config);
    crate::startup::start(&app).unwrap();
    Harness {
        app,
        sink,
        desktop,
        dir,
    }
}

fn harness() -> Harness {
    // Nothing listens on port 9: a hub request would fail loudly.
    harness_with(tempfile::tempdir().unwrap(), "http://127.0.0.1:9")
}

impl Harness {
    async fn ready(&self) {
        self.app
            .model
            .wait_ready(Duration::from_secs(300))
            .await
            .expect("the offline model loads");
    }

    /// Short, deterministic answers.
    async fn quick_settings(&self, max_tokens: u32) -> Settings {
        let mut s = settings::get(&self.app).await.unwrap();
        s.sampling.max_tokens = max_tokens;
        s.sampling.temperature = 0.0;
        s.sampling.seed = Some(1);
        settings::update(&self.app, s).await.unwrap().settings
    }

    /// Waits for an event `name` whose payload satisfies `pred`.
    async fn wait_for(&self, name: &str, pred: impl Fn(&Value) -> bool) -> Value {
        let deadline = Instant::now() + Duration::from_secs(600);
        loop {
            if let Some(v) = self
                .sink
                .events()
                .into_iter()
                .find(|(n, p)| *n == name && pred(p))
                .map(|(_, p)| p)
            {
                return v;
            }
            assert!(Instant::now() < deadline, "no {name} event in time");
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    async fn done(&self, generation_id: &str) -> Value {
        self.wait_for(names::CHAT_DONE, |p| p["generationId"] == generation_id)
            .await
    }

    /// Every event of one generation or job, in order.
    fn of_job(&self, id: &str) -> Vec<(&'static str, Value)> {
        self.sink
            .events()
            .into_iter()
            .filter(|(_, p)| p["generationId"] == id || p["jobId"] == id)
            .collect()
    }

    async fn idle(&self, chat_id: &str) {
        let deadline = Instant::now() + Duration::from_secs(60);
        while self.app.jobs.get(chat_id).is_some() {
            assert!(Instant::now() < deadline, "the chat's job never ended");
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn chats_are_created_renamed_searched_and_deleted() {
    let h = harness();
    let a = chats::create(&h.app, None, None).await.unwrap();
    assert_eq!(a.title, "New chat");
    assert_eq!(a.cache.config, None);
    let b = chats::create(&h.app, Some("Whales".into()), Some("Be brief.".into()))
        .await
        .unwrap();
    assert_eq!(b.system_prompt, "Be brief.");
    let renamed = chats::rename(&h.app, a.id.clone(), "  Ahab  ".into())
        .await
        .unwrap();
    assert_eq!(renamed.title, "Ahab");
    let err = chats::rename(&h.app, a.id.clone(), " ".into())
        .await
        .unwrap_err();
    assert_eq!(
        (err.code, err.field.as_deref()),
        (ErrorCode::InvalidArgument, Some("title"))
    );
    let list = chats::list(&h.app, None).await.unwrap();
    assert_eq!(list[0].title, "Ahab", "most recently updated first");
    let found = chats::list(&h.app, Some("whal".into())).await.unwrap();
    assert_eq!(found.len(), 1);
    chats::delete(&h.app, b.id.clone()).await.unwrap();
    let err = chats::get(&h.app, b.id.clone()).await.unwrap_err();
    assert_eq!(err.code, ErrorCode::NotFound);
    assert_eq!(
        chats::delete(&h.app, "999".into()).await.unwrap_err().code,
        ErrorCode::NotFound
    );
    // Stopping a chat that runs nothing (or does not exist) is not an error.
    generation::stop(&h.app, "999".into()).await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_answer_asked_as_json_is_an_object_and_regenerates_as_json() {
    let h = harness();
    h.ready().await;
    h.quick_settings(120).await;
    let chat = chats::create(&h.app, None, None).await.unwrap();
    let started = generation::send_as_json(
        &h.app,
        chat.id.clone(),
        "Alice is 30 years old and lives in Paris. Give her name, age and city.".into(),
    )
    .await
    .unwrap();
    let done = h.done(&started.generation_id).await;
    let content = done["message"]["content"].as_str().unwrap().to_string();
    let value: serde_json::Value = serde_json::from_str(&content).expect(&content);
    assert!(value.is_object(), "{content}");

    // Regenerating a JSON answer asks for JSON again.
    let again = generation::answer_again(&h.app, chat.id.clone())
        .await
        .unwrap();
    let done = h.done(&again.generation_id).await;
    let content = done["message"]["content"].as_str().unwrap().to_string();
    let value: serde_json::Value = serde_json::from_str(&content).expect(&content);
    assert!(value.is_object(), "{content}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_answer_streams_then_ends_once_and_is_saved() {
    let h = harness();
    h.ready().await;
    let s = h.quick_settings(12).await;
    let chat = chats::create(&h.app, None, None).await.unwrap();
    let started = generation::send(
        &h.app,
        chat.id.clone(),
        "What is the capital of France?".into(),
    )
    .await
    .unwrap();
    let user = started.user_message.clone().unwrap();
    assert_eq!(user.content, "What is the capital of France?");
    assert_eq!(started.assistant_message.status, MessageStatus::Streaming);
    assert_eq!(started.assistant_message.content, "");

    let done = h.done(&started.generation_id).await;
    let events = h.of_job(&started.generation_id);
    let (last, _) = events.last().unwrap();
    assert_eq!(*last, names::CHAT_DONE, "chat-done comes last");
    assert_eq!(
        events
            .iter()
            .filter(|(n, _)| *n == names::CHAT_DONE)
            .count(),
        1
    );
    let streamed = streamed_text(&events);
    let message = &done["message"];
    assert_eq!(message["status"], "complete");
    assert_eq!(message["content"].as_str().unwrap(), streamed);
    assert!(!streamed.is_empty());
    let st = &message["stats"];
    assert_eq!(st["modelId"], crate::catalog::BUILTIN_ID);
    assert!(st["generatedTokens"].as_u64().unwrap() > 0);
    assert!(st["promptTokens"].as_u64().unwrap() > 5);
    assert!(st["kvHeldBytes"].as_u64().unwrap() > 0);
    assert!(st["ttftMs"].as_f64().unwrap() > 0.0);
    assert_eq!(st["cache"], serde_json::to_value(s.cache).unwrap());
    println!("answer: {streamed:?}");

    h.idle(&chat.id).await;
    let got = chats::get(&h.app, chat.id.clone()).await.unwrap();
    assert_eq!(got.title, "What is the capital of France?");
    assert_eq!(got.messages.len(), 2);
    assert_eq!(got.messages[1].content, streamed);
    assert_eq!(got.cache.config, Some(s.cache));
    assert!(got.cache.tokens > 5);
    // The panel describes this chat's cache.
    let snap = stats::snapshot(&h.app).await.unwrap();
    assert_eq!(snap.chat_id.as_deref(), Some(chat.id.as_str()));
    assert_eq!(snap.tokens, got.cache.tokens);
    assert!(snap.kv_held_bytes > 0 && snap.kv_fp16_bytes > 0);

    // Regenerate answers the same question again, replacing the answer.
    let again = generation::answer_again(&h.app, chat.id.clone())
        .await
        .unwrap();
    assert!(again.user_message.is_none());
    let done2 = h.done(&again.generation_id).await;
    assert_eq!(done2["message"]["status"], "complete");
    h.idle(&chat.id).await;
    let got = chats::get(&h.app, chat.id.clone()).await.unwrap();
    assert_eq!(got.messages.len(), 2);
    assert_eq!(got.messages[1].id, again.assistant_message.id);

    // Edit rewrites the question and answers it.
    let edited = generation::edit(
        &h.app,
        chat.id.clone(),
        user.id.clone(),
        "What is the capital of Italy?".into(),
    )
    .await
    .unwrap();
    assert_eq!(
        edited.user_message.as_ref().unwrap().content,
        "What is the capital of Italy?"
    );
    h.done(&edited.generation_id).await;
    h.idle(&chat.id).await;
    let got = chats::get(&h.app, chat.id.clone()).await.unwrap();
    assert_eq!(got.messages[0].content, "What is the capital of Italy?");
    assert_eq!(got.messages.len(), 2);
    // Stats were emitted while decoding.
    assert!(h
        .sink
        .payloads(names::STATS)
        .iter()
        .any(|p| p["phase"] == "decode"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn failed_checks_store_nothing() {
    let h = harness();
    h.ready().await;
    h.quick_settings(300).await;
    let chat = chats::create(&h.app, None, None).await.unwrap();
    let err = generation::send(&h.app, "4040".into(), "hi".into())
        .await
        .unwrap_err();
    assert_eq!(err.code, ErrorCode::NotFound);
    let err = generation::send(&h.app, chat.id.clone(), "  ".into())
        .await
        .unwrap_err();
    assert_eq!(
        (err.code, err.field.as_deref()),
        (ErrorCode::InvalidArgument, Some("content"))
    );
    let err = generation::answer_again(&h.app, chat.id.clone())
        .await
        .unwrap_err();
    assert_eq!(err.code, ErrorCode::InvalidArgument);

    // Busy while an answer is written; the chat keeps one question and one answer.
    let started = generation::send(&h.app, chat.id.clone(), "Tell me a long story.".into())
        .await
        .unwrap();
    let err = generation::send(&h.app, chat.id.clone(), "And another".into())
        .await
        .unwrap_err();
    assert_eq!(err.code, ErrorCode::Busy);
    assert_eq!(
        documents::prefill(&h.app, chat.id.clone())
            .await
            .unwrap_err()
            .code,
        ErrorCode::Busy
    );
    let err = chats::set_prompt(&h.app, chat.id.clone(), "x".into())
        .await
        .unwrap_err();
    assert_eq!(err.code, ErrorCode::Busy);
    generation::stop(&h.app, chat.id.clone()).await.unwrap();
    let done = h.done(&started.generation_id).await;
    assert_eq!(done["message"]["status"], "stopped");
    h.idle(&chat.id).await;
    assert_eq!(
        chats::get(&h.app, chat.id.clone())
            .await
            .unwrap()
            .messages
            .len(),
        2
    );

    // A document that does not fit is attached (so the user sees why) but sending fails.
    let mut s = settings::get(&h.app).await.unwrap();
    s.context_length = 1024;
    s.sampling.max_tokens = 800;
    settings::update(&h.app, s).await.unwrap();
    let doc = documents::attach(&h.app, chat.id.clone(), chapter().display().to_string())
        .await
        .unwrap();
    assert!(!doc.fits_in_context);
    assert_eq!(doc.context_length, 1024);
    let err = generation::send(&h.app, chat.id.clone(), "Summarize.".into())
        .await
        .unwrap_err();
    assert_eq!(err.code, ErrorCode::ContextOverflow, "{}", err.message);
    assert_eq!(
        documents::prefill(&h.app, chat.id.clone()).await.unwrap(),
        None,
        "nothing fits: nothing to prefill"
    );
    let got = chats::get(&h.app, chat.id.clone()).await.unwrap();
    assert_eq!(got.messages.len(), 2, "nothing was stored");
    // The part that fits, when asked for: the longest head, with a note saying which part
    // it is, in the original's place.
    let part = documents::read_part(&h.app, chat.id.clone(), doc.id.clone())
        .await
        .unwrap();
    assert!(part.fits_in_context, "{part:?}");
    assert!(
        part.name.starts_with(&format!("{} (first ", doc.name))
            && part
                .name
                .ends_with(&format!(" of {} tokens)", grouped(doc.token_count))),
        "{}",
        part.name
    );
    assert!(part.token_count < doc.token_count);
    assert!(
        (1024 - 16..=1024).contains(&part.context_needed),
        "the part fills the room: {part:?}"
    );
    let text = h.app.store.document_text(&part.id).unwrap();
    assert!(text.starts_with("[Only part of the document"), "{text}");
    let docs = chats::get(&h.app, chat.id.clone()).await.unwrap().documents;
    assert_eq!(docs.iter().map(|d| &d.id).collect::<Vec<_>>(), [&part.id]);
    // A document that fits is read whole.
    let err = documents::read_part(&h.app, chat.id.clone(), part.id.clone())
        .await
        .unwrap_err();
    assert_eq!(err.code, ErrorCode::InvalidArgument, "{}", err.message);
    documents::remove(&h.app, chat.id.clone(), part.id.clone())
        .await
        .unwrap();
    // Unsupported and missing files.
    let err = documents::attach(
        &h.app,
        chat.id.clone(),
        root().join("Cargo.toml").display().to_string(),
    )
    .await
    .unwrap_err();
    assert_eq!(err.code, ErrorCode::UnsupportedFile);
    let err = documents::attach(&h.app, chat.id.clone(), "/nonexistent/x.txt".into())
        .await
        .unwrap_err();
    assert_eq!(err.code, ErrorCode::Io, "{}", err.message);
    let err = documents::attach(&h.app, chat.id.clone(), "relative.txt".into())
        .await
        .unwrap_err();
    assert_eq!(err.code, ErrorCode::Io);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stop_keeps_the_text_so_far_and_streaming_text_is_saved() {
    let h = harness();
    h.ready().await;
    h.quick_settings(4000).await;
    let chat = chats::create(&h.app, None, None).await.unwrap();
    let started = generation::send(
        &h.app,
        chat.id.clone(),
        "Write a very long story about a whale and a ship.".into(),
    )
    .await
    .unwrap();
    let id = started.generation_id.clone();
    h.wait_for(names::CHAT_TOKEN, |p| p["generationId"] == id.as_str())
        .await;
    // A window that opens the chat now sees everything streamed so far, though the store
    // has not saved any of it yet.
    let streamed_before = streamed_text(&h.of_job(&id));
    let opened = chats::get(&h.app, chat.id.clone()).await.unwrap();
    let shown = &opened.messages[1];
    assert_eq!(shown.status, MessageStatus::Streaming);
    assert!(
        !streamed_before.is_empty() && shown.content.starts_with(&streamed_before),
        "opened mid-answer: {:?}, streamed before: {streamed_before:?}",
        shown.content
    );
    // The answer so far is saved about once a second while it streams.
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let saved = h
            .app
            .store
            .get_message(&started.assistant_message.id)
            .unwrap();
        if !saved.content.is_empty() {
            assert_eq!(saved.status, MessageStatus::Streaming);
            break;
        }
        assert!(
            Instant::now() < deadline,
            "the streaming answer is never saved"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    generation::stop(&h.app, chat.id.clone()).await.unwrap();
    let done = h.done(&id).await;
    let message = &done["message"];
    assert_eq!(message["status"], "stopped");
    let streamed = streamed_text(&h.of_job(&id));
    assert_eq!(message["content"].as_str().unwrap(), streamed);
    assert!(streamed.starts_with(&shown.content));
    assert!(message["stats"]["generatedTokens"].as_u64().unwrap() >= 1);
    // No more tokens after chat-done.
    let events = h.of_job(&id);
    assert_eq!(events.last().unwrap().0, names::CHAT_DONE);
}

/// The text of a generation's `chat-token` events, checking that each event's `offset` is
/// the UTF-16 length of the text before it.
fn streamed_text(events: &[(&'static str, Value)]) -> String {
    let mut text = String::new();
    for (_, p) in events.iter().filter(|(n, _)| *n == names::CHAT_TOKEN) {
        let offset = text.encode_utf16().count() as u64;
        assert_eq!(p["offset"].as_u64(), Some(offset), "{p}");
        text.push_str(p["delta"].as_str().unwrap());
    }
    text
}

/// Sends `question` and returns (time to first token in ms, the generation's events).
async fn ask(h: &Harness, chat_id: &str, question: &str) -> (f64, Vec<(&'static str, Value)>) {
    let (_, ttft, events) = answer(h, chat_id, question).await;
    (ttft, events)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn documents_prefill_and_the_kept_cache_answers_follow_ups_at_once() {
    let h = harness();
    h.ready().await;
    h.quick_settings(8).await;
    let chat = chats::create(&h.app, None, None).await.unwrap();
    let doc = documents::attach(&h.app, chat.id.clone(), chapter().display().to_string())
        .await
        .unwrap();
    assert_eq!(doc.name, "chapter_97.txt");
    assert_eq!(doc.kind, crate::store::DocumentKind::Txt);
    assert!(doc.token_count > 200, "{}", doc.token_count);
    assert!(doc.fits_in_context && !doc.prefilled);
    assert_eq!(doc.context_length, 8192);

    // Prefill now: progress with a rate and an ETA, then done; the document is cached.
    let job = documents::prefill(&h.app, chat.id.clone())
        .await
        .unwrap()
        .expect("a prefill job");
    let done = h
        .wait_for(names::PREFILL_PROGRESS, |p| {
            p["jobId"] == job.as_str() && p["state"] != "running"
        })
        .await;
    assert_eq!(done["state"], "done", "{done}");
    assert_eq!(done["documentIds"], serde_json::json!([doc.id]));
    let total = done["totalTokens"].as_u64().unwrap();
    assert!(total > doc.token_count, "{total}");
    assert_eq!(done["processedTokens"].as_u64().unwrap(), total);
    let running: Vec<Value> = h
        .of_job(&job)
        .into_iter()
        .filter(|(_, p)| p["state"] == "running")
        .map(|(_, p)| p)
        .collect();
    assert!(!running.is_empty());
    let processed: Vec<u64> = running
        .iter()
        .map(|p| p["processedTokens"].as_u64().unwrap())
        .collect();
    assert!(processed.windows(2).all(|w| w[0] <= w[1]), "{processed:?}");
    assert!(running
        .iter()
        .any(|p| p["tokensPerSec"].as_f64().is_some() && p["etaSeconds"].as_f64().is_some()));
    h.idle(&chat.id).await;
    let got = chats::get(&h.app, chat.id.clone()).await.unwrap();
    assert!(got.documents[0].prefilled);
    assert!(got.cache.tokens >= total);
    assert_eq!(
        documents::prefill(&h.app, chat.id.clone()).await.unwrap(),
        None,
        "everything is cached"
    );

    // The first question reuses the prefilled document: only the question runs.
    let (ttft1, events1) = ask(&h, &chat.id, "Who is the narrator?").await;
    assert!(
        !events1.iter().any(|(n, _)| *n == names::PREFILL_PROGRESS),
        "the document was not read again"
    );
    // So does a follow-up.
    let (ttft2, events2) = ask(&h, &chat.id, "Name one whale in the chapter.").await;
    assert!(!events2.iter().any(|(n, _)| *n == names::PREFILL_PROGRESS));

    // A new system prompt drops the cache: the next question reads everything again.
    let changed = chats::set_prompt(&h.app, chat.id.clone(), "Answer briefly.".into())
        .await
        .unwrap();
    assert_eq!(changed.cache.config, None);
    assert!(!changed.documents[0].prefilled);
    let (ttft3, events3) = ask(&h, &chat.id, "Name one whale in the chapter.").await;
    let reread = events3
        .iter()
        .filter(|(n, _)| *n == names::PREFILL_PROGRESS)
        .map(|(_, p)| p.clone())
        .collect::<Vec<_>>();
    let last = reread.last().expect("prefill progress for the re-read");
    assert_eq!(last["state"], "done");
    assert!(last["totalTokens"].as_u64().unwrap() > doc.token_count);
    println!(
        "time to first token on a {}-token document: first question {ttft1:.0} ms, \
         follow-up {ttft2:.0} ms (cache kept); after the cache was dropped {ttft3:.0} ms \
         (prefill {} tokens)",
        doc.token_count, last["totalTokens"]
    );

    // Removing the document drops the cache.
    documents::remove(&h.app, chat.id.clone(), doc.id.clone())
        .await
        .unwrap();
    let got = chats::get(&h.app, chat.id.clone()).await.unwrap();
    assert!(got.documents.is_empty());
    assert_eq!(got.cache.config, None);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cache_settings_changes_drop_caches_and_change_the_bytes() {
    let h = harness();
    h.ready().await;
    let mut s = h.quick_settings(4).await;
    // From K2 V2, so that K4 V4 below holds more bytes per token.
    s.cache.k_bits = 2;
    s.cache.v_bits = 2;
    s = settings::update(&h.app, s).await.unwrap().settings;
    let chat = chats::create(&h.app, None, None).await.unwrap();
    documents::attach(&h.app, chat.id.clone(), chapter().display().to_string())
        .await
        .unwrap();
    let (_, events) = ask(&h, &chat.id, "Who is the narrator?").await;
    let stats2 = events.last().unwrap().1["message"]["stats"].clone();
    assert_eq!(stats2["cache"]["kBits"], 2);

    // Sampling only: the cache stays.
    s.sampling.top_k = 10;
    let up = settings::update(&h.app, s).await.unwrap();
    assert!(!up.cache_reset);
    assert!(chats::get(&h.app, chat.id.clone())
        .await
        .unwrap()
        .cache
        .config
        .is_some());

    // K4 V4: every cache goes, and the panel says so.
    s.cache.k_bits = 4;
    s.cache.v_bits = 4;
    let up = settings::update(&h.app, s).await.unwrap();
    assert!(up.cache_reset);
    let got = chats::get(&h.app, chat.id.clone()).await.unwrap();
    assert_eq!(got.cache.config, None);
    assert!(!got.documents[0].prefilled);
    assert_eq!(stats::snapshot(&h.app).await.unwrap().cache, None);
    let again = generation::answer_again(&h.app, chat.id.clone())
        .await
        .unwrap();
    let done = h.done(&again.generation_id).await;
    h.idle(&chat.id).await;
    let stats4 = done["message"]["stats"].clone();
    assert_eq!(stats4["cache"]["kBits"], 4);
    let ratio = |s: &Value| s["kvHeldBytes"].as_f64().unwrap() / s["kvFp16Bytes"].as_f64().unwrap();
    println!(
        "held/fp16: K2V2 {:.3} ({} of {} bytes), K4V4 {:.3} ({} of {} bytes)",
        ratio(&stats2),
        stats2["kvHeldBytes"],
        stats2["kvFp16Bytes"],
        ratio(&stats4),
        stats4["kvHeldBytes"],
        stats4["kvFp16Bytes"]
    );
    assert!(ratio(&stats4) > ratio(&stats2));
    let got = chats::get(&h.app, chat.id.clone()).await.unwrap();
    assert_eq!(got.cache.config.unwrap().k_bits, 4);

    // fp16 ↔ fp16 changes of the unused KIVI fields are not a change; invalid settings name
    // their field.
    s.cache.mode = CacheMode::Fp16;
    assert!(settings::update(&h.app, s).await.unwrap().cache_reset);
    s.cache.k_bits = 2;
    assert!(!settings::update(&h.app, s).await.unwrap().cache_reset);
    s.cache.residual_length = 100;
    let err = settings::update(&h.app, s).await.unwrap_err();
    assert_eq!(err.field.as_deref(), Some("cache.residualLength"));
    let defaults = settings::defaults(&h.app).await.unwrap();
    assert_eq!(defaults, Settings::default());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fit_this_machine_offers_the_longest_context_the_memory_holds() {
    use crate::store::CacheMode;
    let h = harness();
    h.ready().await;
    let saved = settings::get(&h.app).await.unwrap();
    let kivi = settings::fit_context(&h.app, saved.cache).await.unwrap();
    assert_eq!(kivi.model_context, 8192, "SmolLM2's trained context");
    assert!(
        kivi.context_length == kivi.model_context
            || (kivi.context_length >= 512 && kivi.context_length % 256 == 0),
        "{kivi:?}"
    );
    assert!(
        kivi.kv_bytes > 0 && kivi.available_bytes > kivi.kv_bytes,
        "{kivi:?}"
    );
    let fp16 = crate::store::CacheSettings {
        mode: CacheMode::Fp16,
        ..saved.cache
    };
    let full = settings::fit_context(&h.app, fp16).await.unwrap();
    assert!(
        full.context_length <= kivi.context_length,
        "{full:?} {kivi:?}"
    );
    if full.context_length == kivi.context_length {
        assert!(full.kv_bytes > 2 * kivi.kv_bytes, "{full:?} {kivi:?}");
    }
    // Nothing is saved; settings that break a rule are refused by name.
    assert_eq!(settings::get(&h.app).await.unwrap(), saved);
    let bad = crate::store::CacheSettings {
        k_bits: 3,
        ..saved.cache
    };
    let err = settings::fit_context(&h.app, bad).await.unwrap_err();
    assert_eq!(err.field.as_deref(), Some("cache.kBits"), "{err:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kivi_plus_settings_reach_the_engine_and_the_panel_shows_its_window() {
    let h = harness();
    h.ready().await;
    let mut s = h.quick_settings(4).await;
    // A small window so that a short conversation already quantizes groups after the sinks.
    s.cache.residual_length = 32;
    s.cache.sinks = 4;
    s.cache.rotation = RotationSetting::Both;
    assert!(settings::update(&h.app, s).await.unwrap().cache_reset);
    let system = "You are a careful assistant on a ship. Answer in one short sentence. \
                  Whales, harpoons, the sea, the crew, the captain, the log book, the weather \
                  and the stars are what the crew talks about; keep to those and be brief.";
    let chat = chats::create(&h.app, None, Some(system.into()))
        .await
        .unwrap();
    let (_, events) = ask(&h, &chat.id, "Who keeps the log book on a whaling ship?").await;
    let done = &events.last().unwrap().1["message"]["stats"];
    assert_eq!(done["cache"]["sinks"], 4);
    assert_eq!(done["cache"]["rotation"], "both");

    let snap = stats::snapshot(&h.app).await.unwrap();
    let got = chats::get(&h.app, chat.id.clone()).await.unwrap();
    assert_eq!(got.cache.config, Some(s.cache));
    assert_eq!(snap.cache, Some(s.cache));
    let t = snap.tokens;
    assert!(t > 4 + 32 + 32, "{t} tokens: too few to quantize a group");
    // The engine's figures, as the snapshot carries them: 4 sinks, whole groups quantized
    // after them, a window of at most R + G - 1.
    assert_eq!(snap.sink_tokens, 4);
    assert_eq!(snap.residual_capacity, 32 + 32 - 1);
    assert_eq!(snap.quantized_tokens, (t - 4 - 32) / 32 * 32);
    assert_eq!(
        snap.quantized_tokens + snap.sink_tokens + snap.residual_tokens,
        t
    );
    assert_eq!(
        snap.tokens_until_flush,
        Some(snap.residual_capacity - snap.residual_tokens)
    );
    println!(
        "KIVI+ k2v2-g32-r32-s4-rot: {t} tokens = {} quantized + 4 sinks + {} window, {} until \
         the next flush; {} of {} fp16 bytes held",
        snap.quantized_tokens,
        snap.residual_tokens,
        snap.tokens_until_flush.unwrap(),
        snap.kv_held_bytes,
        snap.kv_fp16_bytes
    );

    // Rotation off is another cache: saving it resets every cache.
    s.cache.rotation = RotationSetting::None;
    assert!(settings::update(&h.app, s).await.unwrap().cache_reset);
    assert_eq!(
        chats::get(&h.app, chat.id.clone())
            .await
            .unwrap()
            .cache
            .config,
        None
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_backend_setting_reloads_the_model_and_the_panel_names_it() {
    let h = harness();
    h.ready().await;
    let mut s = h.quick_settings(4).await;
    assert_eq!(s.backend, BackendChoice::Auto);
    let before = stats::snapshot(&h.app).await.unwrap();
    assert_eq!(before.backend, Backend::chosen().unwrap().to_string());

    // MLX's operations (the Mac's path) on the CPU: the model loads again, caches reset.
    let mlx = Backend::mlx(Device::Cpu, Precision::F32);
    s.backend = BackendChoice::Fixed(mlx);
    let up = settings::update(&h.app, s).await.unwrap();
    assert!(up.model_reload && up.cache_reset);
    h.ready().await;
    assert_eq!(h.app.model.loaded().unwrap().info().backend, mlx);
    let snap = stats::snapshot(&h.app).await.unwrap();
    assert_eq!(snap.backend, "mlx-cpu-f32");
    assert!(
        snap.backend_name.starts_with("MLX on the CPU"),
        "{}",
        snap.backend_name
    );
    let chat = chats::create(&h.app, None, None).await.unwrap();
    let (_, events) = ask(&h, &chat.id, "Say hello.").await;
    assert!(events.iter().any(|(n, _)| *n == names::CHAT_TOKEN));

    // A GPU backend on a machine whose MLX has none is refused, naming the field, and
    // nothing changes.
    if Backend::mlx(Device::Gpu, Precision::F16)
        .check_available()
        .is_err()
    {
        let mut gpu = s;
        gpu.backend = BackendChoice::Fixed(Backend::mlx(Device::Gpu, Precision::F16));
        let err = settings::update(&h.app, gpu).await.unwrap_err();
        assert_eq!(err.field.as_deref(), Some("backend"));
        assert!(err.message.contains("needs a GPU"), "{}", err.message);
        assert_eq!(settings::get(&h.app).await.unwrap().backend, s.backend);
    }
    // Saved settings from before the backend existed read as `auto`.
    let old: Settings = serde_json::from_value(serde_json::json!({
        "cache": {"mode": "kivi", "kBits": 2, "vBits": 2, "groupSize": 32, "residualLength": 128},
        "contextLength": 8192,
        "sampling": {"temperature": 0.7, "topP": 0.9, "topK": 40, "repetitionPenalty": 1.1,
                     "maxTokens": 1024, "seed": null}
    }))
    .unwrap();
    assert_eq!(old.backend, BackendChoice::Auto);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn startup_marks_answers_interrupted_and_downloads_paused() {
    let dir = tempfile::tempdir().unwrap();
    let (chat_id, answer_id) = {
        let store = Store::open(dir.path().join("kivi-chat.db")).unwrap();
        let chat = store.create_chat(None, None).unwrap();
        let (_, answer) = store.begin_send(&chat.id, "Tell me about whales").unwrap();
        store
            .update_streaming_content(&answer.id, "Whales are")
            .unwrap();
        store
            .put_download(&DownloadRecord {
                repo_id: "mlx-community/Qwen3-8B-4bit".into(),
                state: DownloadState::Downloading,
                files: vec![DownloadFile {
                    name: "model.safetensors".into(),
                    downloaded_bytes: 1000,
                    total_bytes: Some(4000),
                    done: false,
                }],
                downloaded_bytes: 1000,
                total_bytes: Some(4000),
                error: None,
                updated_at: 0,
            })
            .unwrap();
        (chat.id, answer.id)
    };
    let h = harness_with(dir, "http://127.0.0.1:9");
    let chat = chats::get(&h.app, chat_id).await.unwrap();
    let answer = chat.messages.iter().find(|m| m.id == answer_id).unwrap();
    assert_eq!(answer.status, MessageStatus::Interrupted);
    assert_eq!(answer.content, "Whales are");
    let overview = models::list(&h.app).await.unwrap();
    assert_eq!(overview.models[0].id, crate::catalog::BUILTIN_ID);
    assert_eq!(overview.models[0].availability, ModelAvailability::Ready);
    let qwen = overview
        .models
        .iter()
        .find(|m| m.id == "mlx-community/Qwen3-8B-4bit")
        .unwrap();
    assert_eq!(qwen.availability, ModelAvailability::Paused);
    assert_eq!(qwen.download.as_ref().unwrap().downloaded_bytes, 1000);
    assert_eq!(
        overview.models.iter().filter(|m| m.recommended).count(),
        crate::catalog::RECOMMENDED.len()
    );
    // The built-in model is active and loads in the background.
    assert_eq!(
        overview.active_model_id.as_deref(),
        Some(crate::catalog::BUILTIN_ID)
    );
    h.ready().await;
    assert!(h
        .sink
        .payloads(names::MODEL_STATUS)
        .iter()
        .any(|p| p["state"] == "ready"));
    assert_eq!(
        models::delete(&h.app, crate::catalog::BUILTIN_ID.into())
            .await
            .unwrap_err()
            .code,
        ErrorCode::InvalidArgument
    );
    assert_eq!(
        models::activate(&h.app, "someone/not-downloaded".into())
            .await
            .unwrap_err()
            .code,
        ErrorCode::NotFound
    );
}

fn incomplete_files(cache: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    let mut stack = vec![cache.to_path_buf()];
    while let Some(dir) = stack.pop() {
        for e in std::fs::read_dir(&dir).into_iter().flatten().flatten() {
            let p = e.path();
            if p.is_dir() {
                stack.push(p);
            } else if p.to_string_lossy().ends_with(".incomplete") {
                out.push(p);
            }
        }
    }
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn downloads_pause_survive_a_restart_resume_and_cancel() {
    const TINY: &str = "kivi-test/tiny";
    const SHARDED: &str = "kivi-test/sharded";
    let hub = hub_server::FakeHub::start(vec![
        hub_server::tiny_model(TINY),
        hub_server::sharded_model(SHARDED),
    ])
    .await;
    hub.faults(|f| f.throttle = Some(Duration::from_millis(20)));
    let dir = tempfile::tempdir().unwrap();
    let h = harness_with(dir, &hub.endpoint());
    let cache = h.dir.path().join("hub");

    let err = models::download(&h.app, "not a repo".into())
        .await
        .unwrap_err();
    assert_eq!(err.field.as_deref(), Some("repoId"));
    let err = models::download(&h.app, "kivi-test/missing".into())
        .await
        .unwrap_err();
    assert_eq!(err.code, ErrorCode::NotFound, "{}", err.message);

    let first = models::download(&h.app, TINY.into()).await.unwrap();
    assert_eq!(first.state, DownloadState::Downloading);
    assert!(first.files.iter().any(|f| f.name == "model.safetensors"));
    h.wait_for(names::DOWNLOAD_PROGRESS, |p| {
        p["repoId"] == TINY && p["downloadedBytes"].as_u64().unwrap() > 200_000
    })
    .await;
    let paused = models::pause(&h.app, TINY.into()).await.unwrap();
    assert_eq!(paused.state, DownloadState::Paused);
    assert!(paused.downloaded_bytes > 0);
    assert_eq!(
        incomplete_files(&cache).len(),
        1,
        "the partial file is kept"
    );
    let listed = models::list(&h.app).await.unwrap();
    let tiny = listed.models.iter().find(|m| m.id == TINY).unwrap();
    assert_eq!(tiny.availability, ModelAvailability::Paused);

    // A restart: the app comes back on the same data and cache, the download still paused.
    let Harness { dir, app, .. } = h;
    app.shutdown();
    drop(app);
    let h = harness_with(dir, &hub.endpoint());
    let record = h.app.store.get_download(TINY).unwrap().unwrap();
    assert_eq!(record.state, DownloadState::Paused);
    hub.faults(|f| f.throttle = None);
    hub.clear_log();
    models::resume(&h.app, TINY.into()).await.unwrap();
    let done = h
        .wait_for(names::DOWNLOAD_PROGRESS, |p| {
            p["repoId"] == TINY && p["state"] != "downloading"
        })
        .await;
    assert_eq!(done["state"], "completed", "{done}");
    assert!(
        hub.requests()
            .iter()
            .any(|r| r.range.as_deref().is_some_and(|r| r != "bytes=0-")),
        "resumed from the partial file"
    );
    assert!(incomplete_files(&cache).is_empty());
    let listed = models::list(&h.app).await.unwrap();
    let tiny = listed.models.iter().find(|m| m.id == TINY).unwrap();
    assert_eq!(tiny.availability, ModelAvailability::Ready);
    assert!(tiny.download.is_none());

    // Cancel deletes the partial files and forgets the download.
    hub.faults(|f| f.throttle = Some(Duration::from_millis(20)));
    models::download(&h.app, SHARDED.into()).await.unwrap();
    h.wait_for(names::DOWNLOAD_PROGRESS, |p| {
        p["repoId"] == SHARDED && p["downloadedBytes"].as_u64().unwrap() > 100_000
    })
    .await;
    models::cancel(&h.app, SHARDED.into()).await.unwrap();
    h.wait_for(names::DOWNLOAD_PROGRESS, |p| {
        p["repoId"] == SHARDED && p["state"] == "cancelled"
    })
    .await;
    assert!(h.app.store.get_download(SHARDED).unwrap().is_none());
    assert!(incomplete_files(&cache).is_empty());
    assert_eq!(
        models::cancel(&h.app, SHARDED.into())
            .await
            .unwrap_err()
            .code,
        ErrorCode::NotFound
    );

    // Delete removes a downloaded model's files.
    models::delete(&h.app, TINY.into()).await.unwrap();
    assert!(!cache.join("models--kivi-test--tiny").exists());
    assert_eq!(
        models::delete(&h.app, TINY.into()).await.unwrap_err().code,
        ErrorCode::NotFound
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn export_dialogs_and_links() {
    let h = harness();
    let chat = chats::create(&h.app, Some("Moby: notes".into()), Some("Be brief.".into()))
        .await
        .unwrap();
    h.app
        .store
        .begin_send(&chat.id, "Who is Ahab?")
        .map(|(_, a)| {
            h.app
                .store
                .finish_message(&a.id, MessageStatus::Stopped, "The captain", None, None)
                .unwrap()
        })
        .unwrap();
    // Cancelled dialog.
    assert_eq!(
        chats::export(&h.app, chat.id.clone(), chats::ExportFormat::Markdown)
            .await
            .unwrap(),
        None
    );
    let target = h.dir.path().join("out.md");
    *h.desktop.save_to.lock().unwrap() = Some(target.clone());
    let path = chats::export(&h.app, chat.id.clone(), chats::ExportFormat::Markdown)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(PathBuf::from(&path), target);
    let md = std::fs::read_to_string(&target).unwrap();
    assert!(md.starts_with("# Moby: notes\n\n> Be brief.\n"), "{md}");
    assert!(md.contains("## You\n\nWho is Ahab?"));
    assert!(md.contains("## Assistant\n\nThe captain\n\n*(stopped)*"));
    let json_path = h.dir.path().join("out.json");
    *h.desktop.save_to.lock().unwrap() = Some(json_path.clone());
    chats::export(&h.app, chat.id.clone(), chats::ExportFormat::Json)
        .await
        .unwrap();
    let json: Value = serde_json::from_str(&std::fs::read_to_string(&json_path).unwrap()).unwrap();
    assert_eq!(json["title"], "Moby: notes");
    assert_eq!(json["messages"].as_array().unwrap().len(), 2);
    assert!(json["exportedAt"].as_u64().unwrap() > 0);
    assert!(json["app"].as_str().unwrap().starts_with("KIVI Chat "));

    *h.desktop.picked.lock().unwrap() = Some(vec![chapter()]);
    assert_eq!(
        documents::pick(&h.app).await.unwrap(),
        vec![chapter().display().to_string()]
    );
    *h.desktop.picked.lock().unwrap() = None;
    assert!(documents::pick(&h.app).await.unwrap().is_empty());

    system::open(&h.app, "https://example.org/kivi".into())
        .await
        .unwrap();
    let err = system::open(&h.app, "file:///etc/passwd".into())
        .await
        .unwrap_err();
    assert_eq!(err.field.as_deref(), Some("url"));
    assert_eq!(
        *h.desktop.opened.lock().unwrap(),
        vec!["https://example.org/kivi".to_string()]
    );

    // The hub token: refused when malformed; without a keychain a clear error.
    let err = models::set_token(&h.app, Some("two words".into()))
        .await
        .unwrap_err();
    assert_eq!(err.field.as_deref(), Some("token"));
    let status = models::token_status(&h.app).await.unwrap();
    if !status.keychain_available {
        assert!(status.error.unwrap().contains("keychain is not available"));
        let err = models::set_token(&h.app, Some("hf_test".into()))
            .await
            .unwrap_err();
        assert_eq!(err.code, ErrorCode::Io);
        assert!(h.app.hub_token().is_none());
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_local_server_starts_answers_and_stops() {
    use std::io::{Read, Write};
    let h = harness();
    let stopped = server::status(&h.app).await.unwrap();
    assert!(!stopped.running);
    assert_eq!(stopped.port, crate::server::DEFAULT_PORT);
    let err = server::start(&h.app, 80, None).await.unwrap_err();
    assert_eq!(err.field.as_deref(), Some("port"));
    let err = server::start(&h.app, 8080, Some(" ".into()))
        .await
        .unwrap_err();
    assert_eq!(err.field.as_deref(), Some("token"));
    h.ready().await;

    let taken = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = taken.local_addr().unwrap().port();
    let err = server::start(&h.app, u32::from(port), None)
        .await
        .unwrap_err();
    assert_eq!(err.code, ErrorCode::PortInUse);
    assert!(err.message.contains(&port.to_string()));
    drop(taken);

    let running = server::start(&h.app, u32::from(port), Some("s3cret".into()))
        .await
        .unwrap();
    assert!(running.running && running.auth_required);
    assert_eq!(running.url, Some(format!("http://127.0.0.1:{port}/v1")));
    assert!(h
        .sink
        .payloads(names::SERVER_STATUS)
        .iter()
        .any(|p| p["running"] == true));
    let body = tokio::task::spawn_blocking(move || {
        let mut s = std::net::TcpStream::connect(("127.0.0.1", port)).unwrap();
        s.write_all(
            b"GET /v1/models HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer s3cret\r\nConnection: close\r\n\r\n",
        )
        .unwrap();
        let mut out = String::new();
        s.read_to_string(&mut out).unwrap();
        out
    })
    .await
    .unwrap();
    assert!(body.starts_with("HTTP/1.1 200"), "{body}");
    assert!(body.contains(crate::catalog::BUILTIN_ID), "{body}");
    let stopped = server::stop(&h.app).await.unwrap();
    assert!(!stopped.running);
    assert_eq!(stopped.port, port, "the last port is remembered");
    assert!(std::net::TcpListener::bind(("127.0.0.1", port)).is_ok());
    // Stopping again is a no-op.
    assert!(!server::stop(&h.app).await.unwrap().running);
}

#[test]
fn only_the_app_commands_are_allowed_and_ipc_md_lists_them_all() {
    let build = include_str!("../build.rs");
    let manifest: Vec<String> = build
        .lines()
        .filter_map(|l| {
            l.trim()
                .strip_prefix('"')?
                .strip_suffix("\",")
                .map(String::from)
        })
        .collect();
    let main = include_str!("main.rs");
    let handler = main.split("generate_handler![").nth(1).unwrap();
    let handler = handler.split(']').next().unwrap();
    let mut registered: Vec<String> = handler
        .split(',')
        .filter_map(|c| c.trim().rsplit("::").next().map(str::to_string))
        .filter(|c| !c.is_empty())
        .collect();
    let ipc = include_str!("../../ui/IPC.md");
    let mut documented: Vec<String> = ipc
        .lines()
        .filter(|l| l.starts_with("#### `"))
        .flat_map(|l| {
            l.split('`')
                .skip(1)
                .step_by(2)
                .map(String::from)
                .collect::<Vec<_>>()
        })
        .collect();
    let capability: Value =
        serde_json::from_str(include_str!("../capabilities/default.json")).unwrap();
    let mut allowed: Vec<String> = capability["permissions"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p.as_str().unwrap().to_string())
        .collect();
    let mut expected: Vec<String> = manifest
        .iter()
        .map(|c| format!("allow-{}", c.replace('_', "-")))
        .chain([
            "core:event:allow-listen".into(),
            "core:event:allow-unlisten".into(),
        ])
        .collect();
    let mut manifest = manifest;
    for v in [
        &mut manifest,
        &mut registered,
        &mut documented,
        &mut allowed,
        &mut expected,
    ] {
        v.sort();
    }
    assert_eq!(manifest.len(), 37);
    assert_eq!(registered, manifest, "handler vs build.rs");
    assert_eq!(documented, manifest, "IPC.md vs build.rs");
    assert_eq!(allowed, expected, "capability vs build.rs");
}

/// Measures what the kept cache buys on a long document (run with `--ignored --nocapture`;
/// `KIVI_TTFT_DOC` picks the document). Prints, asserts nothing about time.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "a measurement: minutes in a debug build"]
async fn follow_up_ttft_on_a_long_document() {
    let doc_path = std::env::var("KIVI_TTFT_DOC")
        .map(PathBuf::from)
        .unwrap_or_else(|_| root().join(".data/texts/moby-dick/chapter_42.txt"));
    let h = harness();
    h.ready().await;
    h.quick_settings(16).await;
    let chat = chats::create(&h.app, None, None).await.unwrap();
    let doc = documents::attach(&h.app, chat.id.clone(), doc_path.display().to_string())
        .await
        .unwrap();
    assert!(doc.fits_in_context, "{} tokens", doc.token_count);
    let t0 = Instant::now();
    let job = documents::prefill(&h.app, chat.id.clone())
        .await
        .unwrap()
        .unwrap();
    let done = h
        .wait_for(names::PREFILL_PROGRESS, |p| {
            p["jobId"] == job.as_str() && p["state"] != "running"
        })
        .await;
    let prefill_s = t0.elapsed().as_secs_f64();
    h.idle(&chat.id).await;
    let (first, _) = ask(&h, &chat.id, "What is this chapter about?").await;
    let (second, _) = ask(&h, &chat.id, "Which colour does the chapter discuss?").await;
    // The same follow-up without the kept cache: a new system prompt drops it.
    chats::set_prompt(&h.app, chat.id.clone(), "Answer briefly.".into())
        .await
        .unwrap();
    let (cold, _) = ask(&h, &chat.id, "Which colour does the chapter discuss?").await;
    println!(
        "TTFT on {} ({} tokens; prefill_chat {:.1} s, {} tokens at {:.0} tok/s): first question \
         {first:.0} ms, follow-up {second:.0} ms with the kept cache; {cold:.0} ms without it",
        doc.name,
        doc.token_count,
        prefill_s,
        done["totalTokens"],
        done["tokensPerSec"].as_f64().unwrap_or(0.0)
    );
}

/// Sends a question and returns the finished answer's text, time to first token (ms) and
/// the generation's events.
async fn answer(
    h: &Harness,
    chat_id: &str,
    question: &str,
) -> (String, f64, Vec<(&'static str, Value)>) {
    let started = generation::send(&h.app, chat_id.to_string(), question.into())
        .await
        .unwrap();
    let done = h.done(&started.generation_id).await;
    h.idle(chat_id).await;
    assert_eq!(done["message"]["status"], "complete", "{done}");
    let text = done["message"]["content"].as_str().unwrap().to_string();
    let ttft = done["message"]["stats"]["ttftMs"].as_f64().unwrap();
    (text, ttft, h.of_job(&started.generation_id))
}

/// A chat on a ~1.2k-token document (several prompt chunks, far more than the window) with
/// one question answered; its id and the document's tokens.
async fn chat_on_a_document(h: &Harness) -> (String, u64) {
    h.ready().await;
    h.quick_settings(8).await;
    let chat = chats::create(&h.app, None, None).await.unwrap();
    let doc = root().join(".data/texts/moby-dick/chapter_12.txt");
    let doc = documents::attach(&h.app, chat.id.clone(), doc.display().to_string())
        .await
        .unwrap();
    answer(h, &chat.id, "What is this chapter about?").await;
    (chat.id, doc.token_count)
}

async fn wait_for_disk(h: &Harness, chat_id: &str) -> crate::types::DiskCacheEvent {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        if let Some(event) = h.app.disk.event(chat_id) {
            return event;
        }
        assert!(
            Instant::now() < deadline,
            "the chat's cache was never written"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_chat_cache_survives_a_restart_and_a_full_disk_loses_nothing() {
    use crate::types::DiskCacheAction;
    const FOLLOW_UP: &str = "Where does Queequeg come from?";
    // Without a restart: the follow-up's answer.
    let expected = {
        let h = harness();
        let (chat_id, _) = chat_on_a_document(&h).await;
        answer(&h, &chat_id, FOLLOW_UP).await.0
    };

    let h = harness();
    let (chat_id, doc_tokens) = chat_on_a_document(&h).await;
    // Idle: the cache is written.
    let saved = wait_for_disk(&h, &chat_id).await;
    assert_eq!(saved.action, DiskCacheAction::Saved);
    assert!(saved.tokens > doc_tokens, "{saved:?}");
    let file = h.app.disk.path(&chat_id).unwrap();
    let before = std::fs::read(&file).unwrap();
    assert_eq!(before.len() as u64, saved.bytes);
    let history = chats::get(&h.app, chat_id.clone()).await.unwrap().messages;

    // A full disk during a save (the temporary file is /dev/full: the kernel's ENOSPC): the
    // save fails, the previous file and the chat's history are as they were.
    let partial = format!("{}.{}.partial", file.display(), std::process::id());
    std::os::unix::fs::symlink("/dev/full", &partial).unwrap();
    assert!(crate::disk_caches::save(&h.app, &chat_id).await.is_none());
    assert!(!Path::new(&partial).exists(), "the failed save cleans up");
    assert_eq!(std::fs::read(&file).unwrap(), before);
    let after = chats::get(&h.app, chat_id.clone()).await.unwrap();
    assert_eq!(after.messages, history);

    // Quit as the app does, then start again on the same data folder.
    h.app.shutdown();
    crate::disk_caches::save_all(&h.app).await;
    assert_eq!(
        h.app.disk.event(&chat_id).unwrap().action,
        DiskCacheAction::Saved
    );
    drop(h.app.model.unload());
    let Harness { dir, .. } = h;
    let h = harness_with(dir, "http://127.0.0.1:9");
    h.ready().await;
    // Opening the chat reads the cache back in the background.
    let opened = chats::get(&h.app, chat_id.clone()).await.unwrap();
    assert_eq!(opened.messages.len(), history.len());
    let restored = wait_for_disk(&h, &chat_id).await;
    assert_eq!(restored.action, DiskCacheAction::Restored);
    assert_eq!(restored.tokens, saved.tokens);
    let opened = chats::get(&h.app, chat_id.clone()).await.unwrap();
    assert!(
        opened.documents[0].prefilled,
        "the document is in the restored cache"
    );
    assert_eq!(opened.cache.tokens, saved.tokens);
    let snapshot = stats::snapshot(&h.app).await.unwrap();
    assert_eq!(snapshot.disk_cache, Some(restored));

    let (text, ttft, events) = answer(&h, &chat_id, FOLLOW_UP).await;
    let read = prompt_tokens_read(&events);
    println!(
        "restart with a {doc_tokens}-token document: cache {} tokens, {:.1} MiB, written in \
         {:.3} s, read back in {:.3} s; follow-up time to first token {ttft:.0} ms \
         ({read} prompt tokens read with progress; none means under {})",
        restored.tokens,
        restored.bytes as f64 / 1048576.0,
        saved.seconds,
        restored.seconds,
        crate::generation::PREFILL_REPORT_MIN_TOKENS
    );
    assert!(read < doc_tokens / 4, "the document was read again: {read}");
    assert_eq!(
        text, expected,
        "the answer is the one without a restart (greedy)"
    );

    // The chat's cache goes with the chat.
    chats::delete(&h.app, chat_id.clone()).await.unwrap();
    assert!(!file.exists());
}

/// The most prompt tokens a generation read with progress (0 when it read too few to report).
fn prompt_tokens_read(events: &[(&'static str, Value)]) -> u64 {
    events
        .iter()
        .filter(|(n, _)| *n == names::PREFILL_PROGRESS)
        .filter_map(|(_, p)| p["totalTokens"].as_u64())
        .max()
        .unwrap_or(0)
}

/// A new chat on `doc` with `system_prompt`, its document attached and read if it must be
/// (`prefill_chat`); its id and the prompt tokens that read took (0: none to read).
async fn chat_attached(h: &Harness, doc: &Path, system_prompt: Option<&str>) -> (String, u64) {
    let chat = chats::create(&h.app, None, system_prompt.map(str::to_string))
        .await
        .unwrap();
    documents::attach(&h.app, chat.id.clone(), doc.display().to_string())
        .await
        .unwrap();
    let mut read = 0;
    if let Some(job) = documents::prefill(&h.app, chat.id.clone()).await.unwrap() {
        let done = h
            .wait_for(names::PREFILL_PROGRESS, |p| {
                p["jobId"] == job.as_str() && p["state"] != "running"
            })
            .await;
        read = done["totalTokens"].as_u64().unwrap_or(0);
    }
    h.idle(&chat.id).await;
    (chat.id, read)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_document_read_in_one_chat_is_not_read_again_in_the_next() {
    use crate::types::DiskCacheAction;
    let h = harness();
    let (first, doc_tokens) = chat_on_a_document(&h).await;
    assert_eq!(
        wait_for_disk(&h, &first).await.action,
        DiskCacheAction::Saved
    );
    let doc = root().join(".data/texts/moby-dick/chapter_12.txt");
    // Its chip's figures: the KIVI cache's bytes below float16's, the reading time at the
    // speed just measured.
    let read_doc = chats::get(&h.app, first.clone()).await.unwrap().documents[0].clone();
    let (kv, fp16) = (read_doc.kv_bytes.unwrap(), read_doc.kv_fp16_bytes.unwrap());
    assert!(kv > 0 && kv * 2 < fp16, "{kv} against {fp16}");
    let speed = h
        .app
        .live
        .reading_speed()
        .expect("a reading speed was measured");
    let secs = read_doc.read_seconds.unwrap();
    assert!(
        (secs - doc_tokens as f64 / speed).abs() < 1e-6,
        "{secs} s at {speed} tok/s"
    );

    // A new chat on the same document starts from the first chat's file.
    let (second, read) = chat_attached(&h, &doc, None).await;
    assert!(read < doc_tokens / 4, "the document was read again: {read}");
    let event = h
        .app
        .disk
        .event(&second)
        .expect("another chat's file was read");
    assert_eq!(event.action, DiskCacheAction::Reused);
    assert!(event.tokens > doc_tokens, "{event:?}");
    let opened = chats::get(&h.app, second.clone()).await.unwrap();
    assert!(
        opened.documents[0].prefilled,
        "the document is in the cache"
    );
    let (_, ttft, events) = answer(&h, &second, "Where does Queequeg come from?").await;
    let read = prompt_tokens_read(&events);
    println!(
        "a new chat on the same {doc_tokens}-token document: another chat's file ({} tokens, \
         {:.1} MiB) read in {:.3} s; first question's time to first token {ttft:.0} ms",
        event.tokens,
        event.bytes as f64 / 1048576.0,
        event.seconds
    );
    assert!(read < doc_tokens / 4, "the document was read again: {read}");
    // The first chat keeps its file; the second writes its own.
    assert!(h.app.disk.path(&first).unwrap().is_file());
    let saved = crate::disk_caches::save(&h.app, &second).await.unwrap();
    assert_eq!(saved.action, DiskCacheAction::Saved);

    // Another system prompt comes before the document: nothing to reuse, it is read.
    let (third, read) = chat_attached(&h, &doc, Some("Answer in one sentence.")).await;
    assert!(read > doc_tokens, "the document is read: {read}");
    assert_eq!(h.app.disk.event(&third), None);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_local_model_file_is_added_listed_activated_and_removed() {
    let h = harness();
    h.ready().await;
    // Cancelled dialog: nothing added.
    assert_eq!(models::add_local(&h.app, false).await.unwrap(), None);
    // Not a model: refused, nothing added.
    *h.desktop.model.lock().unwrap() = Some(chapter());
    let err = models::add_local(&h.app, false).await.unwrap_err();
    assert_eq!(err.code, ErrorCode::InvalidArgument);
    assert!(err.message.contains("Pick a .gguf file"), "{}", err.message);
    // A copy of the offline GGUF somewhere else on disk.
    let file = h.dir.path().join("my-smollm2.gguf");
    std::fs::copy(offline_model(), &file).unwrap();
    *h.desktop.model.lock().unwrap() = Some(file.clone());
    let added = models::add_local(&h.app, false).await.unwrap().unwrap();
    assert_eq!(added.source, crate::types::ModelSource::Local);
    assert_eq!(added.name, "my-smollm2");
    assert_eq!(added.availability, ModelAvailability::Ready);
    // Adding it twice lists it once.
    models::add_local(&h.app, false).await.unwrap();
    let listed = models::list(&h.app).await.unwrap();
    let ids: Vec<&str> = listed.models.iter().map(|m| m.id.as_str()).collect();
    assert_eq!(
        ids.iter().filter(|id| **id == added.id).count(),
        1,
        "{ids:?}"
    );
    assert_eq!(ids[1], added.id, "local models follow the built-in one");

    // It loads and answers.
    models::activate(&h.app, added.id.clone()).await.unwrap();
    h.ready().await;
    assert_eq!(h.app.model.model_id().as_deref(), Some(added.id.as_str()));
    h.quick_settings(4).await;
    let chat = chats::create(&h.app, None, None).await.unwrap();
    let (text, _, _) = answer(&h, &chat.id, "Say hello.").await;
    assert!(!text.is_empty());
    // In use: cannot be removed; after switching back, it can (the file stays).
    assert_eq!(
        models::delete(&h.app, added.id.clone())
            .await
            .unwrap_err()
            .code,
        ErrorCode::Busy
    );
    models::activate(&h.app, crate::catalog::BUILTIN_ID.into())
        .await
        .unwrap();
    models::delete(&h.app, added.id.clone()).await.unwrap();
    assert!(file.exists());
    let listed = models::list(&h.app).await.unwrap();
    assert!(listed.models.iter().all(|m| m.id != added.id));
}
