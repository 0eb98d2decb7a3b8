//! Running a chat's jobs on the engine: the prompt a chat renders to, the checks before a
//! generation starts (context), and the event pumps that turn the engine's events into
//! `chat-token`, `chat-done`, `prefill-progress` and `stats`, save the streaming answer about
//! once a second, and keep the chat's cache record and documents' `prefilled` flags.
//!
//! Every job runs in the chat's own engine cache (`Engine::generate_in(chat_id, ..)`), so a
//! follow-up question re-uses the prefix it shares with the previous turn: the system prompt,
//! the documents (placed at the start of the first user message) and the history.

use std::time::{Duration, Instant};

use kivi_engine::grammar::OutputFormat;
use kivi_engine::sampling::SamplingParams;
use kivi_engine::session::{Document, Engine, Event, FinishReason, Generation, Prompt, Request};
use kivi_engine::stats::{Phase as EnginePhase, Stats};
use kivi_engine::tokenizer::{Message as EngineMessage, Role as EngineRole};

use crate::chat_cache::{engine_cache, CacheRecord};
use crate::error::{CommandError, CommandResult, ErrorCode};
use crate::events::{Throttle, TokenBatcher, PREFILL_INTERVAL};
use crate::jobs::Job;
use crate::state::{estimate_tokens, App, AppState};
use crate::store::{
    CacheSettings, Chat, DocumentInfo, GenerationStats, Id, Message, MessageStatus, Role, Settings,
    StoreError,
};
use crate::types::{GenerationDoneEvent, Phase, PrefillProgressEvent, PrefillState, TokenEvent};

/// A generation prompt with fewer new tokens than this reports no prefill progress.
pub const PREFILL_REPORT_MIN_TOKENS: u64 = 64;
/// A streaming answer is saved this often, so a crash keeps most of it.
const SAVE_INTERVAL: Duration = Duration::from_secs(1);
/// How long the context check waits for the model thread to count the prompt before it
/// estimates (the thread may be busy with another chat's answer).
const COUNT_TIMEOUT: Duration = Duration::from_secs(2);

/// A job ready to run: its request and what it reads.
pub struct Plan {
    /// What the engine runs.
    pub request: Request,
    /// The cache settings it runs with.
    pub cache: CacheSettings,
    /// Documents in the prompt that the chat's cache does not hold yet.
    pub new_documents: Vec<Id>,
    /// Prompt tokens (counted, or estimated while the model thread was busy).
    pub prompt_tokens: u64,
}

/// The engine's messages for a chat's history: its system prompt, then each user message
/// and each answer with text (failed answers without text are left out).
pub fn engine_messages(system_prompt: &str, messages: &[Message]) -> Vec<EngineMessage> {
    let mut out = Vec::with_capacity(messages.len() + 1);
    if !system_prompt.trim().is_empty() {
        out.push(EngineMessage::new(EngineRole::System, system_prompt));
    }
    for m in messages {
        match m.role {
            Role::User => out.push(EngineMessage::new(EngineRole::User, m.content.clone())),
            Role::Assistant => {
                if m.status != MessageStatus::Streaming && !m.content.trim().is_empty() {
                    out.push(EngineMessage::new(EngineRole::Assistant, m.content.clone()));
                }
            }
        }
    }
    out
}

/// Sampling settings as the engine takes them.
pub fn sampling(settings: &Settings) -> SamplingParams {
    let s = &settings.sampling;
    SamplingParams {
        temperature: s.temperature,
        top_p: s.top_p,
        top_k: s.top_k as usize,
        repetition_penalty: s.repetition_penalty,
        seed: s.seed.map(u64::from),
        ..SamplingParams::default()
    }
}

/// The documents of a chat that fit, with their texts, and which of them are not cached.
fn fitting_documents(
    app: &AppState,
    documents: &[DocumentInfo],
) -> CommandResult<(Vec<Document>, Vec<Id>)> {
    let mut docs = Vec::new();
    let mut new = Vec::new();
    for d in documents.iter().filter(|d| d.fits_in_context) {
        docs.push(Document {
            name: d.name.clone(),
            text: app.store.document_text(&d.id)?,
        });
        if !d.prefilled {
            new.push(d.id.clone());
        }
    }
    Ok((docs, new))
}

/// Plans a generation that answers `messages` (the history up to and including the question)
/// in `chat`, in `format` if one is asked for: checks that the documents and the prompt plus
/// `maxTokens` fit the context.
pub async fn plan_generation(
    app: &AppState,
    engine: &Engine,
    chat: &Chat,
    messages: &[Message],
    format: Option<OutputFormat>,
) -> CommandResult<Plan> {
    let settings = app.settings();
    let context = app.context_length(&settings);
    let mut documents = chat.documents.clone();
    app.apply_fit(&chat.system_prompt, &mut documents).await;
    if let Some(d) = documents.iter().find(|d| !d.fits_in_context) {
        return Err(CommandError::new(
            ErrorCode::ContextOverflow,
            format!(
                "{} ({} tokens) does not fit in the context of {context} tokens with the \
                 answer's {} tokens. Read only the part that fits, remove it, or raise the \
                 context length (or lower max tokens) in Settings.",
                d.name, d.token_count, settings.sampling.max_tokens
            ),
        ));
    }
    let (docs, new_documents) = fitting_documents(app, &documents)?;
    let prompt = Prompt::Chat {
        messages: engine_messages(&chat.system_prompt, messages),
        documents: docs,
    };
    let prompt_tokens =
        count_prompt(engine, &prompt, &documents, messages, &chat.system_prompt).await?;
    let max_tokens = u64::from(settings.sampling.max_tokens);
    if prompt_tokens + max_tokens > context {
        return Err(CommandError::new(
            ErrorCode::ContextOverflow,
            format!(
                "The conversation is {prompt_tokens} tokens; with room for a {max_tokens}-token \
                 answer it does not fit in the context of {context} tokens. Start a new chat, \
                 remove a document, or raise the context length (or lower max tokens) in \
                 Settings."
            ),
        ));
    }
    Ok(Plan {
        request: Request {
            prompt,
            sampling: sampling(&settings),
            max_tokens: max_tokens as usize,
            cache: Some(engine_cache(&settings.cache)),
            format,
        },
        cache: settings.cache,
        new_documents,
        prompt_tokens,
    })
}

/// Plans a `prefill_chat` job: the system prompt, the documents that fit and the history;
/// `None` when no document needs reading (everything is cached or nothing fits).
pub async fn plan_prefill(
    app: &AppState,
    engine: &Engine,
    chat: &Chat,
) -> CommandResult<Option<Plan>> {
    let settings = app.settings();
    let mut documents = chat.documents.clone();
    app.apply_fit(&chat.system_prompt, &mut documents).await;
    let cached = app
        .caches
        .get(&chat.id)
        .is_some_and(|r| crate::chat_cache::same_cache(&r.config, &settings.cache));
    let (docs, new_documents) = fitting_documents(app, &documents)?;
    if docs.is_empty() || (cached && new_documents.is_empty()) {
        return Ok(None);
    }
    let prompt = Prompt::Chat {
        messages: engine_messages(&chat.system_prompt, &chat.messages),
        documents: docs,
    };
    let prompt_tokens = count_prompt(
        engine,
        &prompt,
        &documents,
        &chat.messages,
        &chat.system_prompt,
    )
    .await?;
    if prompt_tokens >= app.context_length(&settings) {
        return Ok(None);
    }
    Ok(Some(Plan {
        request: Request {
            prompt,
            sampling: SamplingParams::greedy(),
            // Prefill only: the prompt goes into the chat's cache, nothing is generated.
            max_tokens: 0,
            cache: Some(engine_cache(&settings.cache)),
            format: None,
        },
        cache: settings.cache,
        new_documents,
        prompt_tokens,
    }))
}

/// The prompt's length, from the model thread; estimated from the parts if that thread is
/// busy with another chat for longer than [`COUNT_TIMEOUT`] (the engine checks the real
/// length again before it runs).
async fn count_prompt(
    engine: &Engine,
    prompt: &Prompt,
    documents: &[DocumentInfo],
    messages: &[Message],
    system_prompt: &str,
) -> CommandResult<u64> {
    match tokio::time::timeout(COUNT_TIMEOUT, engine.count_prompt(prompt)).await {
        Ok(Ok(n)) => Ok(n as u64),
        Ok(Err(e)) => Err(e.into()),
        Err(_) => {
            let docs: u64 = documents
                .iter()
                .filter(|d| d.fits_in_context)
                .map(|d| d.token_count + 8)
                .sum();
            let history: u64 = messages
                .iter()
                .map(|m| estimate_tokens(&m.content) + 6)
                .sum();
            Ok(docs + history + estimate_tokens(system_prompt) + 32)
        }
    }
}

/// A running generation's identity.
pub struct GenerationJob {
    /// The chat.
    pub chat_id: Id,
    /// The job (its id is the generation id).
    pub job: Job,
    /// The streaming answer.
    pub message_id: Id,
    /// The model that writes it.
    pub model_id: String,
}

/// Reports a prefill as `prefill-progress`.
struct PrefillReport {
    chat_id: Id,
    job_id: Id,
    document_ids: Vec<Id>,
    /// Report even small prompts (`prefill_chat` jobs always report).
    always: bool,
    total: u64,
    processed: u64,
    rate: Option<f64>,
    announced: bool,
    finished: bool,
    throttle: Throttle,
}

impl PrefillReport {
    fn new(chat_id: &str, job_id: &str, document_ids: Vec<Id>, always: bool) -> Self {
        Self {
            chat_id: chat_id.into(),
            job_id: job_id.into(),
            document_ids,
            always,
            total: 0,
            processed: 0,
            rate: None,
            announced: false,
            finished: false,
            throttle: Throttle::new(PREFILL_INTERVAL),
        }
    }

    fn event(&self, state: PrefillState, error: Option<String>) -> PrefillProgressEvent {
        let eta = match (state, self.rate) {
            (PrefillState::Running, Some(r)) if r > 0.0 => {
                Some(self.total.saturating_sub(self.processed) as f64 / r)
            }
            (PrefillState::Done, _) => Some(0.0),
            _ => None,
        };
        PrefillProgressEvent {
            chat_id: self.chat_id.clone(),
            job_id: self.job_id.clone(),
            document_ids: self.document_ids.clone(),
            state,
            processed_tokens: self.processed,
            total_tokens: self.total,
            tokens_per_sec: self.rate,
            eta_seconds: eta,
            error,
        }
    }

    fn started(&mut self, app: &AppState, new_tokens: u64) {
        self.total = new_tokens;
        if self.always || new_tokens >= PREFILL_REPORT_MIN_TOKENS {
            self.announced = true;
            self.throttle.ready(Instant::now());
            app.events.prefill(&self.event(PrefillState::Running, None));
        }
    }

    fn progress(&mut self, app: &AppState, done: usize, total: usize, rate: f64) {
        self.processed = done as u64;
        self.total = total as u64;
        if rate > 0.0 {
            self.rate = Some(rate);
        }
        if self.announced && !self.finished && self.throttle.ready(Instant::now()) {
            app.events.prefill(&self.event(PrefillState::Running, None));
        }
    }

    fn finish(&mut self, app: &AppState, state: PrefillState, error: Option<String>) {
        if state == PrefillState::Done {
            self.processed = self.total;
        }
        if self.announced && !self.finished {
            app.events.prefill(&self.event(state, error));
        }
        self.finished = true;
    }
}

/// How a job ended.
enum Outcome {
    Done {
        reason: FinishReason,
        stats: Box<Stats>,
    },
    Failed {
        message: String,
    },
}

fn phase_of(stats: &Stats) -> Phase {
    match stats.phase {
        EnginePhase::Prefill => Phase::Prefill,
        EnginePhase::Decode => Phase::Decode,
        EnginePhase::Done => Phase::Idle,
    }
}

fn generation_stats(
    model_id: &str,
    cache: CacheSettings,
    stats: Option<&Stats>,
    prompt_tokens: u64,
) -> GenerationStats {
    let Some(s) = stats else {
        return GenerationStats {
            model_id: model_id.into(),
            cache,
            prompt_tokens,
            generated_tokens: 0,
            ttft_ms: None,
            prefill_tokens_per_sec: None,
            decode_tokens_per_sec: None,
            kv_fp16_bytes: 0,
            kv_held_bytes: 0,
        };
    };
    GenerationStats {
        model_id: model_id.into(),
        cache,
        prompt_tokens: s.prompt_tokens as u64,
        generated_tokens: s.generated_tokens as u64,
        ttft_ms: s.time_to_first_token_s.map(|t| t * 1000.0),
        prefill_tokens_per_sec: (s.prefilled_tokens > 0).then_some(s.prefill_tokens_per_s),
        decode_tokens_per_sec: (s.generated_tokens > 1).then_some(s.decode_tokens_per_s),
        kv_fp16_bytes: s.kv.total.fp16_bytes,
        kv_held_bytes: s.kv.total.held_bytes,
    }
}

fn mark_prefilled(app: &AppState, chat_id: &str, documents: &[Id]) {
    if documents.is_empty() {
        return;
    }
    if let Err(e) = app.store.set_documents_prefilled(chat_id, documents, true) {
        eprintln!("kivi-chat: {e}");
    }
}

/// Starts pumping a generation's events; the job ends with exactly one `chat-done` (unless
/// the chat was deleted meanwhile).
pub fn spawn_generation(app: &App, generation: Generation, job: GenerationJob, plan: &Plan) {
    let app = app.clone();
    let cache = plan.cache;
    let new_documents = plan.new_documents.clone();
    let prompt_tokens = plan.prompt_tokens;
    app.live
        .start_job(&job.chat_id, app.caches.get(&job.chat_id), Phase::Prefill);
    tauri::async_runtime::spawn(async move {
        pump_generation(&app, generation, &job, cache, new_documents, prompt_tokens).await;
        app.jobs.end(&job.chat_id, &job.job.id);
        app.live.set_phase(Phase::Idle);
        app.emit_stats();
        app.reconcile_caches();
        crate::disk_caches::save_when_idle(&app, &job.chat_id);
    });
}

async fn pump_generation(
    app: &App,
    mut generation: Generation,
    job: &GenerationJob,
    cache: CacheSettings,
    new_documents: Vec<Id>,
    prompt_tokens: u64,
) {
    let chat_id = job.chat_id.as_str();
    let generation_id = job.job.id.clone();
    let mut prefill = PrefillReport::new(chat_id, &generation_id, new_documents.clone(), false);
    let mut batcher = TokenBatcher::new();
    // The answer so far lives in the job, where `get_chat` reads it too.
    let answer = || job.job.answer().map(|(_, text)| text).unwrap_or_default();
    let mut last_save = Instant::now();
    let mut first_token = true;
    let mut last_stats: Option<Box<Stats>> = None;
    // The answer's length in UTF-16 code units before the next event's delta.
    let mut sent = 0u64;
    let mut token = |delta: String| {
        let offset = sent;
        sent += delta.encode_utf16().count() as u64;
        TokenEvent {
            chat_id: chat_id.to_string(),
            generation_id: generation_id.clone(),
            message_id: job.message_id.clone(),
            delta,
            offset,
        }
    };
    let outcome = loop {
        let deadline = batcher.deadline();
        let event = tokio::select! {
            event = generation.next() => event,
            _ = sleep_until(deadline), if deadline.is_some() => {
                if let Some(delta) = batcher.take(Instant::now()) {
                    app.events.token(&token(delta));
                }
                continue;
            }
        };
        match event {
            None => {
                break Outcome::Failed {
                    message: "The model stopped unexpectedly. Try again; if it keeps \
                              happening, restart KIVI Chat."
                        .into(),
                }
            }
            Some(Event::Started {
                prompt_tokens,
                reused_tokens,
            }) => {
                let new = prompt_tokens.saturating_sub(reused_tokens) as u64;
                prefill.started(app, new);
                app.emit_stats();
            }
            Some(Event::Prefill {
                done,
                total,
                tokens_per_s,
            }) => prefill.progress(app, done, total, tokens_per_s),
            Some(Event::Stats(stats)) => {
                app.live.update(chat_id, cache, &stats, phase_of(&stats));
                app.caches
                    .set(chat_id, CacheRecord::from_kv(cache, &stats.kv));
                last_stats = Some(stats);
            }
            Some(Event::Token { text, .. }) => {
                if first_token {
                    first_token = false;
                    // The prompt is in the cache: its `done` comes before the first token.
                    prefill.finish(app, PrefillState::Done, None);
                    mark_prefilled(app, chat_id, &new_documents);
                    app.live.set_phase(Phase::Decode);
                }
                job.job.stream(&job.message_id, &text);
                if let Some(delta) = batcher.push(&text, Instant::now()) {
                    app.events.token(&token(delta));
                }
                if last_save.elapsed() >= SAVE_INTERVAL {
                    last_save = Instant::now();
                    if let Err(e) = app
                        .store
                        .update_streaming_content(&job.message_id, &answer())
                    {
                        eprintln!("kivi-chat: cannot save the answer so far: {e}");
                    }
                }
            }
            Some(Event::Done { reason, stats, .. }) => break Outcome::Done { reason, stats },
            Some(Event::Error { message }) => break Outcome::Failed { message },
        }
    };
    if let Some(delta) = batcher.take(Instant::now()) {
        app.events.token(&token(delta));
    }

    let (status, error, stats) = match outcome {
        Outcome::Done { reason, stats } => {
            let cancelled = reason == FinishReason::Cancelled;
            if !cancelled || !first_token {
                // The whole prompt ran (an answer may end at once with an end token).
                prefill.finish(app, PrefillState::Done, None);
                mark_prefilled(app, chat_id, &new_documents);
            } else {
                // Stopped while reading the prompt: chat-done `stopped` says it all.
                prefill.finished = true;
            }
            app.live.update(chat_id, cache, &stats, Phase::Idle);
            app.caches
                .set(chat_id, CacheRecord::from_kv(cache, &stats.kv));
            let status = if cancelled {
                MessageStatus::Stopped
            } else {
                MessageStatus::Complete
            };
            let stats = generation_stats(&job.model_id, cache, Some(&stats), prompt_tokens);
            (status, None, stats)
        }
        Outcome::Failed { message } => {
            prefill.finish(app, PrefillState::Error, Some(message.clone()));
            let stats =
                generation_stats(&job.model_id, cache, last_stats.as_deref(), prompt_tokens);
            let message = crate::error::sentence(message);
            (MessageStatus::Error, Some(message), stats)
        }
    };
    match app.store.finish_message(
        &job.message_id,
        status,
        &answer(),
        error.as_deref(),
        Some(&stats),
    ) {
        Ok(message) => app.events.done(&GenerationDoneEvent {
            chat_id: chat_id.to_string(),
            generation_id,
            message,
        }),
        // The chat was deleted meanwhile: nothing to report.
        Err(StoreError::NotFound { .. }) => {}
        Err(e) => eprintln!("kivi-chat: cannot save the answer: {e}"),
    }
}

/// Starts pumping a `prefill_chat` job's events; it ends with one `prefill-progress` of
/// state `done`, `cancelled` or `error`.
pub fn spawn_prefill(app: &App, generation: Generation, chat_id: &str, job: Job, plan: &Plan) {
    let app = app.clone();
    let chat_id = chat_id.to_string();
    let cache = plan.cache;
    let documents = plan.new_documents.clone();
    app.live
        .start_job(&chat_id, app.caches.get(&chat_id), Phase::Prefill);
    tauri::async_runtime::spawn(async move {
        pump_prefill(&app, generation, &chat_id, &job, cache, documents).await;
        app.jobs.end(&chat_id, &job.id);
        app.live.set_phase(Phase::Idle);
        app.emit_stats();
        app.reconcile_caches();
        crate::disk_caches::save_when_idle(&app, &chat_id);
    });
}

async fn pump_prefill(
    app: &App,
    mut generation: Generation,
    chat_id: &str,
    job: &Job,
    cache: CacheSettings,
    documents: Vec<Id>,
) {
    let mut report = PrefillReport::new(chat_id, &job.id, documents.clone(), true);
    loop {
        match generation.next().await {
            Some(Event::Started {
                prompt_tokens,
                reused_tokens,
            }) => {
                report.started(app, prompt_tokens.saturating_sub(reused_tokens) as u64);
                app.emit_stats();
            }
            Some(Event::Prefill {
                done,
                total,
                tokens_per_s,
            }) => report.progress(app, done, total, tokens_per_s),
            Some(Event::Stats(stats)) => {
                app.live.update(chat_id, cache, &stats, phase_of(&stats));
                app.caches
                    .set(chat_id, CacheRecord::from_kv(cache, &stats.kv));
            }
            Some(Event::Token { .. }) => {}
            Some(Event::Done { reason, stats, .. }) => {
                app.live.update(chat_id, cache, &stats, Phase::Idle);
                app.caches
                    .set(chat_id, CacheRecord::from_kv(cache, &stats.kv));
                if reason == FinishReason::Cancelled {
                    report.finish(app, PrefillState::Cancelled, None);
                } else {
                    mark_prefilled(app, chat_id, &documents);
                    report.finish(app, PrefillState::Done, None);
                }
                return;
            }
            Some(Event::Error { message }) => {
                report.finish(
                    app,
                    PrefillState::Error,
                    Some(crate::error::sentence(message)),
                );
                return;
            }
            None => {
                report.finish(
                    app,
                    PrefillState::Error,
                    Some("The model stopped unexpectedly. Try again.".into()),
                );
                return;
            }
        }
    }
}

async fn sleep_until(deadline: Option<Instant>) {
    if let Some(deadline) = deadline {
        tokio::time::sleep_until(deadline.into()).await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn msg(role: Role, content: &str, status: MessageStatus) -> Message {
        Message {
            id: "1".into(),
            chat_id: "1".into(),
            role,
            content: content.into(),
            status,
            error: None,
            created_at: 0,
            stats: None,
        }
    }

    #[test]
    fn history_keeps_questions_and_answers_with_text() {
        let history = [
            msg(Role::User, "q1", MessageStatus::Complete),
            msg(Role::Assistant, "a1", MessageStatus::Stopped),
            msg(Role::User, "q2", MessageStatus::Complete),
            msg(Role::Assistant, "", MessageStatus::Error),
            msg(Role::User, "q3", MessageStatus::Complete),
        ];
        let out = engine_messages("Be brief.", &history);
        let roles: Vec<_> = out.iter().map(|m| (m.role, m.content.as_str())).collect();
        assert_eq!(
            roles,
            [
                (EngineRole::System, "Be brief."),
                (EngineRole::User, "q1"),
                (EngineRole::Assistant, "a1"),
                (EngineRole::User, "q2"),
                (EngineRole::User, "q3"),
            ]
        );
        assert_eq!(engine_messages("  ", &history[..1]).len(), 1);
    }

    #[test]
    fn sampling_follows_the_settings() {
        let mut s = Settings::default();
        s.sampling.seed = Some(7);
        let p = sampling(&s);
        assert_eq!(p.seed, Some(7));
        assert_eq!(p.top_k, 40);
        assert!((p.temperature - 0.7).abs() < 1e-6);
    }
}
