//! The model thread: owns the model, tokenizer and KV caches (MLX arrays stay on the
//! thread that made them), runs one request at a time, and reports through channels.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Instant;

use tokio::sync::mpsc::{UnboundedReceiver, UnboundedSender};
use tokio::sync::oneshot;

use super::conversation::ConversationCache;
use super::error::EngineError;
use super::options::EngineOptions;
use super::prefix::{self, Slot};
use super::prompt;
use super::request::{Event, FinishReason, Prompt, Request};
use super::saved::{self, SavedConversation};
use crate::cache::CacheConfig;
use crate::decode::{prompt_pieces, Decoder};
use crate::grammar::{Constraint, TokenTable};
use crate::loader::LoadedModel;
use crate::sampling::Sampler;
use crate::stats::{KvStats, MemoryProbe, Phase, Stats};
use crate::tokenizer::TextStream;

/// Work for the model thread.
pub enum Command {
    /// Run a request, reporting to `events`, until done or `cancel` is set; with a
    /// conversation, in that conversation's cache slot.
    Generate {
        request: Box<Request>,
        conversation: Option<String>,
        events: UnboundedSender<Event>,
        cancel: Arc<AtomicBool>,
    },
    /// Count the tokens of a text.
    CountTokens {
        text: String,
        reply: oneshot::Sender<Result<usize, EngineError>>,
    },
    /// Count the tokens of a rendered prompt.
    CountPrompt {
        prompt: Box<Prompt>,
        reply: oneshot::Sender<Result<usize, EngineError>>,
    },
    /// Forget every cached conversation.
    ClearCache,
    /// Forget one conversation's cache.
    DropConversation { conversation: String },
    /// Write a conversation's cache to a file (`None`: no cache holds it).
    SaveConversation {
        conversation: String,
        path: PathBuf,
        extra: BTreeMap<String, String>,
        reply: oneshot::Sender<Result<Option<SavedConversation>, EngineError>>,
    },
    /// Read a conversation's cache from a file (`None`: a live cache holds it already).
    RestoreConversation {
        conversation: String,
        path: PathBuf,
        cache: CacheConfig,
        reply: oneshot::Sender<Result<Option<SavedConversation>, EngineError>>,
    },
    /// Describe the caches of the named conversations.
    Conversations {
        reply: oneshot::Sender<Vec<ConversationCache>>,
    },
}

/// The model thread's state.
pub struct Worker {
    loaded: LoadedModel,
    options: EngineOptions,
    context_length: usize,
    /// Set when the engine is dropped: stops the running generation.
    shutdown: Arc<AtomicBool>,
    slots: Vec<Slot>,
    memory: MemoryProbe,
    /// What names this model in cache files (`saved::model_id`).
    model_id: String,
    /// The model's tokens for constrained answers, built by the first request that asks
    /// for a format.
    tokens: Option<TokenTable>,
}

/// Timing of one request, for its statistics.
struct Clock {
    start: Instant,
    prefill_start: Instant,
    prefill_end: Option<Instant>,
    first_token: Option<Instant>,
    last_stats: Instant,
}

impl Worker {
    /// A worker for a loaded model.
    pub fn new(
        loaded: LoadedModel,
        options: EngineOptions,
        context_length: usize,
        shutdown: Arc<AtomicBool>,
    ) -> Self {
        let model_id = saved::model_id(&loaded.info);
        Self {
            loaded,
            options,
            context_length,
            shutdown,
            slots: Vec::new(),
            memory: MemoryProbe::new(),
            model_id,
            tokens: None,
        }
    }

    /// Serves commands until every sender is gone.
    pub fn run(mut self, mut commands: UnboundedReceiver<Command>) {
        while let Some(command) = commands.blocking_recv() {
            match command {
                Command::Generate {
                    request,
                    conversation,
                    events,
                    cancel,
                } => {
                    if let Err(e) = self.generate(&request, conversation, &events, &cancel) {
                        if matches!(e, EngineError::Model(_)) {
                            // A failed step may have appended to some layers' caches and
                            // not others: those caches no longer match their tokens.
                            self.slots.clear();
                        }
                        let _ = events.send(Event::Error {
                            message: e.to_string(),
                        });
                    }
                }
                Command::CountTokens { text, reply } => {
                    let count = self
                        .loaded
                        .tokenizer
                        .encode(&text, false)
                        .map(|ids| ids.len())
                        .map_err(EngineError::from);
                    let _ = reply.send(count);
                }
                Command::CountPrompt { prompt, reply } => {
                    let count =
                        prompt::encode(&self.loaded.tokenizer, &prompt).map(|ids| ids.len());
                    let _ = reply.send(count);
                }
                Command::ClearCache => self.slots.clear(),
                Command::DropConversation { conversation } => self
                    .slots
                    .retain(|s| s.conversation.as_deref() != Some(conversation.as_str())),
                Command::SaveConversation {
                    conversation,
                    path,
                    extra,
                    reply,
                } => {
                    let saved = saved::save(
                        &mut self.slots,
                        &self.model_id,
                        &self.loaded.info,
                        &conversation,
                        &path,
                        extra,
                    );
                    let _ = reply.send(saved);
                }
                Command::RestoreConversation {
                    conversation,
                    path,
                    cache,
                    reply,
                } => {
                    let restored = saved::restore(
                        &mut self.slots,
                        self.options.max_cached_conversations,
                        &self.model_id,
                        &self.loaded.info,
                        &conversation,
                        &path,
                        cache,
                    );
                    let _ = reply.send(restored);
                }
                Command::Conversations { reply } => {
                    let caches = self
                        .slots
                        .iter()
                        .filter_map(|s| {
                            Some(ConversationCache {
                                conversation: s.conversation.clone()?,
                                cache: s.choice,
                                tokens: s.tokens.len(),
                                kv: KvStats::from_caches(&s.caches),
                            })
                        })
                        .collect();
                    let _ = reply.send(caches);
                }
            }
        }
    }

    /// The slot for `prompt`, its caches truncated to the shared prefix. Returns the
    /// slot's index and the number of prompt tokens reused.
    fn prepare_slot(
        &mut self,
        choice: CacheConfig,
        prompt: &[u32],
        conversation: Option<String>,
    ) -> Result<(usize, usize), EngineError> {
        let max = self.options.max_cached_conversations;
        let index = match &conversation {
            Some(id) => prefix::choose_for(&self.slots, id, max),
            None => prefix::choose(&self.slots, choice, prompt, max),
        };
        let model = self.loaded.model.config();
        if index == self.slots.len() {
            let caches = choice.make_layers(model, self.loaded.model.backend());
            self.slots.push(Slot::new(choice, caches));
        }
        let slot = &mut self.slots[index];
        // A slot built with other settings (the least recently used one when every slot is
        // in use, or a conversation whose settings changed) gets new caches: truncating its
        // old ones would run this request on the old settings.
        if slot.choice != choice {
            slot.rebuild(
                choice,
                choice.make_layers(model, self.loaded.model.backend()),
            );
        }
        slot.conversation = conversation;
        // At least the last prompt token must run, to get the logits of what follows.
        let shared = prefix::common_prefix(&slot.tokens, prompt).min(prompt.len() - 1);
        let reused = slot.truncate(shared)?;
        slot.last_used = Instant::now();
        Ok((index, reused))
    }

    fn stats(&mut self, slot: usize, phase: Phase, clock: &Clock, counts: Counts) -> Stats {
        let now = Instant::now();
        let prefill_secs = clock
            .prefill_end
            .unwrap_or(now)
            .duration_since(clock.prefill_start)
            .as_secs_f64();
        let decode_tokens_per_s = match clock.first_token {
            Some(first) if counts.generated > 1 => {
                (counts.generated - 1) as f64 / now.duration_since(first).as_secs_f64()
            }
            _ => 0.0,
        };
        let slot = &self.slots[slot];
        Stats {
            phase,
            prompt_tokens: counts.prompt,
            reused_tokens: counts.reused,
            prefilled_tokens: counts.prefilled,
            prefill_total: counts.prompt - counts.reused,
            prefill_tokens_per_s: rate(counts.prefilled, prefill_secs),
            generated_tokens: counts.generated,
            decode_tokens_per_s,
            time_to_first_token_s: clock
                .first_token
                .map(|t| t.duration_since(clock.start).as_secs_f64()),
            elapsed_s: now.duration_since(clock.start).as_secs_f64(),
            kv: KvStats::from_caches(&slot.caches),
            memory: self.memory.read(),
            backend: self.loaded.info.backend,
            cache: slot.choice.to_string(),
        }
    }

    fn generate(
        &mut self,
        request: &Request,
        conversation: Option<String>,
        events: &UnboundedSender<Event>,
        cancel: &AtomicBool,
    ) -> Result<(), EngineError> {
        let start = Instant::now();
        let prompt = prompt::encode(&self.loaded.tokenizer, &request.prompt)?;
        if prompt.len() >= self.context_length {
            return Err(EngineError::ContextOverflow {
                prompt_tokens: prompt.len(),
                context_length: self.context_length,
            });
        }
        // A schema the grammar engine refuses fails here, before a long prompt is read.
        let constraint = match &request.format {
            Some(format) => Some(Constraint::new(self.token_table()?, format)?),
            None => None,
        };
        let choice = request.cache.unwrap_or(self.options.cache);
        let (slot, reused) = self.prepare_slot(choice, &prompt, conversation)?;
        let _ = events.send(Event::Started {
            prompt_tokens: prompt.len(),
            reused_tokens: reused,
        });
        let mut clock = Clock {
            start,
            prefill_start: Instant::now(),
            prefill_end: None,
            first_token: None,
            last_stats: Instant::now(),
        };
        let mut counts = Counts {
            prompt: prompt.len(),
            reused,
            prefilled: 0,
            generated: 0,
        };
        let interval = self.options.stats_interval;
        let emit_stats =
            |worker: &mut Self, phase, clock: &mut Clock, counts: Counts, force: bool| {
                if force || clock.last_stats.elapsed() >= interval {
                    clock.last_stats = Instant::now();
                    let _ = events.send(Event::Stats(Box::new(
                        worker.stats(slot, phase, clock, counts),
                    )));
                }
            };

        // Prefill in chunks, checking for cancellation between chunks.
        let pending = prompt[reused..].to_vec();
        let mut logits = None;
        for piece in prompt_pieces(&pending, self.options.prefill_chunk) {
            if self.stopped(cancel, events) {
                return self.finish(
                    slot,
                    FinishReason::Cancelled,
                    String::new(),
                    &clock,
                    counts,
                    events,
                );
            }
            let slot_ref = &mut self.slots[slot];
            let hidden = self.loaded.model.forward(piece, &mut slot_ref.caches)?;
            slot_ref.tokens.extend_from_slice(piece);
            counts.prefilled += piece.len();
            if counts.prefilled == pending.len() {
                let last = self.loaded.model.last_logits(&hidden)?;
                last.eval()?;
                logits = Some(last);
            } else {
                hidden.eval()?;
            }
            crate::backend::release_freed_buffers();
            let _ = events.send(Event::Prefill {
                done: counts.prefilled,
                total: pending.len(),
                tokens_per_s: rate(
                    counts.prefilled,
                    clock.prefill_start.elapsed().as_secs_f64(),
                ),
            });
            emit_stats(self, Phase::Prefill, &mut clock, counts, false);
        }
        clock.prefill_end = Some(Instant::now());
        let logits = logits.expect("at least one prompt token is prefilled");
        if request.max_tokens == 0 {
            // A prefill-only request: the prompt is in the cache for the next one.
            return self.finish(
                slot,
                FinishReason::Length,
                String::new(),
                &clock,
                counts,
                events,
            );
        }

        // Decode.
        let sampler = Sampler::new(request.sampling.clone())?;
        let mut decoder = Decoder::new(
            &self.loaded.model,
            sampler,
            &logits,
            &self.slots[slot].tokens,
            constraint,
        )?;
        let mut stream = TextStream::new();
        let mut text = String::new();
        let reason = loop {
            if self.stopped(cancel, events) {
                break FinishReason::Cancelled;
            }
            // Whether a token may follow this one: then the step feeding it is built
            // before it is read (see `crate::decode`).
            let more = counts.generated + 1 < request.max_tokens
                && self.slots[slot].tokens.len() + 1 < self.context_length;
            let slot_ref = &mut self.slots[slot];
            let token = decoder.next_token(
                &self.loaded.model,
                &mut slot_ref.caches,
                &slot_ref.tokens,
                more,
            )?;
            if clock.first_token.is_none() {
                clock.first_token = Some(Instant::now());
            }
            if self.loaded.tokenizer.is_stop(token) {
                break FinishReason::Stop;
            }
            counts.generated += 1;
            let piece = stream
                .push(&self.loaded.tokenizer, token)?
                .unwrap_or_default();
            text.push_str(&piece);
            let _ = events.send(Event::Token {
                id: token,
                text: piece,
            });
            emit_stats(self, Phase::Decode, &mut clock, counts, true);
            if counts.generated >= request.max_tokens {
                break FinishReason::Length;
            }
            if self.slots[slot].tokens.len() + 1 >= self.context_length {
                break FinishReason::ContextFull;
            }
            self.slots[slot].tokens.push(token);
        };
        // An end-of-text token fed ahead, or a token accepted but not fed (the host
        // backend feeds each one when the next is asked for): caches and tokens agree
        // again before the slot is reused.
        self.slots[slot].sync()?;
        if let Some(rest) = stream.flush(&self.loaded.tokenizer)? {
            text.push_str(&rest);
            let _ = events.send(Event::Token {
                id: *stream.tokens().last().unwrap_or(&0),
                text: rest,
            });
        }
        self.finish(slot, reason, text, &clock, counts, events)
    }

    /// The model's token table, built on first use.
    fn token_table(&mut self) -> Result<&TokenTable, EngineError> {
        if self.tokens.is_none() {
            self.tokens = Some(TokenTable::new(&self.loaded.tokenizer)?);
        }
        Ok(self.tokens.as_ref().expect("built above"))
    }

    /// Whether the generation must stop: cancelled, its reader gone, or the engine dropped.
    fn stopped(&self, cancel: &AtomicBool, events: &UnboundedSender<Event>) -> bool {
        cancel.load(Ordering::Relaxed)
            || self.shutdown.load(Ordering::Relaxed)
            || events.is_closed()
    }

    fn finish(
        &mut self,
        slot: usize,
        reason: FinishReason,
        text: String,
        clock: &Clock,
        counts: Counts,
        events: &UnboundedSender<Event>,
    ) -> Result<(), EngineError> {
        let stats = self.stats(slot, Phase::Done, clock, counts);
        let _ = events.send(Event::Done {
            reason,
            text,
            stats: Box::new(stats),
        });
        Ok(())
    }
}

/// Token counts of one request.
#[derive(Clone, Copy)]
struct Counts {
    prompt: usize,
    reused: usize,
    prefilled: usize,
    generated: usize,
}

fn rate(tokens: usize, secs: f64) -> f64 {
    if secs > 0.0 {
        tokens as f64 / secs
    } else {
        0.0
    }
}
