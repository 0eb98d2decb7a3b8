//! Driving one generation for a request: its turn in the queue, the engine's events
//! turned into text (stop sequences applied), and the final usage.
//!
//! A [`Job`] owns the engine's [`Generation`]; dropping it (the client went away, so its
//! handler future or response body was dropped) cancels the generation and frees the
//! turn, so the next request starts as soon as the engine notices (before its next token
//! or prefill chunk).

use tokio_util::sync::CancellationToken;

use super::api::Usage;
use super::error::ApiError;
use super::queue::Turn;
use super::stop::StopFilter;
use crate::session::{CancelHandle, Engine, Event, FinishReason, Generation, Request};
use crate::stats::Stats;

/// How a generation ended, for the response.
#[derive(Debug, Clone)]
pub struct Outcome {
    /// OpenAI's `finish_reason`: `stop` or `length`.
    pub finish_reason: &'static str,
    /// Tokens and KV statistics.
    pub usage: Usage,
}

/// What a job produced next.
#[derive(Debug)]
pub enum Step {
    /// Text to append (never empty).
    Text(String),
    /// The generation ended; nothing follows.
    Finished(Box<Outcome>),
    /// The generation failed after it started; nothing follows.
    Failed(ApiError),
}

/// Cancels the generation when the job is dropped early.
struct CancelOnDrop(CancelHandle);

impl Drop for CancelOnDrop {
    fn drop(&mut self) {
        self.0.cancel();
    }
}

/// A running generation.
pub struct Job {
    generation: Generation,
    _cancel: CancelOnDrop,
    _turn: Turn,
    queue_s: f64,
    filter: StopFilter,
    /// Token events up to the stop-sequence match (the engine may run one token past it).
    tokens_until_stop: usize,
    shutdown: CancellationToken,
    shutdown_seen: bool,
    /// A finished outcome waiting behind the last released text.
    finished: Option<Box<Outcome>>,
    done: bool,
}

impl Job {
    /// Submits `request` on its turn and waits until the engine has tokenized the prompt
    /// (so that a prompt that does not fit is an HTTP error, not a broken stream).
    pub async fn start(
        engine: &Engine,
        request: Request,
        stops: Vec<String>,
        turn: Turn,
        shutdown: CancellationToken,
        prompt_param: &str,
    ) -> Result<Job, ApiError> {
        let mut generation = engine.generate(request);
        let cancel = CancelOnDrop(generation.cancel_handle());
        loop {
            let event = tokio::select! {
                event = generation.next() => event,
                _ = shutdown.cancelled() => return Err(ApiError::shutting_down()),
            };
            match event {
                Some(Event::Started { .. }) => break,
                Some(Event::Error { message }) => {
                    return Err(ApiError::from_engine_message(&message, prompt_param))
                }
                Some(_) => {}
                None => return Err(ApiError::server("the model thread has stopped")),
            }
        }
        Ok(Job {
            generation,
            _cancel: cancel,
            queue_s: turn.queue_s,
            _turn: turn,
            filter: StopFilter::new(stops),
            tokens_until_stop: 0,
            shutdown,
            shutdown_seen: false,
            finished: None,
            done: false,
        })
    }

    /// The next piece of text, or the end. After `Finished` or `Failed` it returns `None`.
    pub async fn next(&mut self) -> Option<Step> {
        if self.done {
            return None;
        }
        if let Some(outcome) = self.finished.take() {
            self.done = true;
            return Some(Step::Finished(outcome));
        }
        loop {
            let event = if self.shutdown_seen {
                self.generation.next().await
            } else {
                tokio::select! {
                    event = self.generation.next() => event,
                    _ = self.shutdown.cancelled() => {
                        // Stopping the server: end the answer here, normally.
                        self.shutdown_seen = true;
                        self.generation.cancel();
                        continue;
                    }
                }
            };
            match event {
                Some(Event::Token { text, .. }) => {
                    if self.filter.stopped() {
                        continue;
                    }
                    self.tokens_until_stop += 1;
                    let (out, hit) = self.filter.push(&text);
                    if hit {
                        // The engine keeps the conversation's cache of what it generated,
                        // so a follow-up that quotes the cut answer still reuses it.
                        self.generation.cancel();
                    }
                    if !out.is_empty() {
                        return Some(Step::Text(out));
                    }
                }
                Some(Event::Done { reason, stats, .. }) => {
                    let outcome = Box::new(self.outcome(reason, &stats));
                    let rest = self.filter.finish();
                    if rest.is_empty() {
                        self.done = true;
                        return Some(Step::Finished(outcome));
                    }
                    self.finished = Some(outcome);
                    return Some(Step::Text(rest));
                }
                Some(Event::Error { message }) => {
                    self.done = true;
                    return Some(Step::Failed(ApiError::server(message)));
                }
                Some(Event::Started { .. } | Event::Prefill { .. } | Event::Stats(_)) => {}
                None => {
                    self.done = true;
                    return Some(Step::Failed(ApiError::server(
                        "the model thread has stopped",
                    )));
                }
            }
        }
    }

    fn outcome(&self, reason: FinishReason, stats: &Stats) -> Outcome {
        let (finish_reason, completion_tokens) = if self.filter.stopped() {
            ("stop", self.tokens_until_stop.min(stats.generated_tokens))
        } else {
            let finish = match reason {
                FinishReason::Length | FinishReason::ContextFull => "length",
                // Cancelled here means the server is stopping: the answer just ends.
                FinishReason::Stop | FinishReason::Cancelled => "stop",
            };
            (finish, stats.generated_tokens)
        };
        Outcome {
            finish_reason,
            usage: Usage::new(stats, completion_tokens, self.queue_s),
        }
    }
}
