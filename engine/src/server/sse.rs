//! Streaming answers as server-sent events, chunk for chunk as OpenAI sends them: a role
//! chunk (chat), content chunks, a chunk with `finish_reason`, a usage chunk when
//! `stream_options.include_usage` asks for one, and `data: [DONE]`.
//!
//! The body stream owns the [`Job`]: when the client disconnects, hyper drops the body,
//! and with it the job, which cancels the generation. Keep-alive comments every few
//! seconds make a vanished client show up even while the prompt is still running.

use std::convert::Infallible;
use std::time::Duration;

use axum::response::sse::{Event, KeepAlive, Sse};
use axum::response::{IntoResponse, Response};
use serde::Serialize;

use super::api::{ChatChunk, ChunkChoice, Delta, TextChoice, TextCompletion, Usage};
use super::meta::Meta;
use super::params::Endpoint;
use super::run::{Job, Step};

/// How often an idle stream sends a comment.
const KEEP_ALIVE: Duration = Duration::from_secs(5);

enum Stage {
    Head,
    Body,
    Usage(Box<Usage>),
    Done,
    End,
}

struct Stream {
    job: Job,
    endpoint: Endpoint,
    meta: Meta,
    include_usage: bool,
    stage: Stage,
}

/// The streaming response for a started job.
pub fn response(job: Job, endpoint: Endpoint, meta: Meta, include_usage: bool) -> Response {
    let state = Stream {
        job,
        endpoint,
        meta,
        include_usage,
        stage: Stage::Head,
    };
    let events = futures_util::stream::unfold(state, |mut state| async move {
        let event = state.advance().await?;
        Some((Ok::<_, Infallible>(event), state))
    });
    Sse::new(events)
        .keep_alive(KeepAlive::new().interval(KEEP_ALIVE))
        .into_response()
}

fn data(value: &impl Serialize) -> Event {
    Event::default().data(serde_json::to_string(value).expect("chunks serialize"))
}

impl Stream {
    async fn advance(&mut self) -> Option<Event> {
        loop {
            match std::mem::replace(&mut self.stage, Stage::End) {
                Stage::Head => {
                    self.stage = Stage::Body;
                    if self.endpoint == Endpoint::Chat {
                        let delta = Delta {
                            role: Some("assistant"),
                            content: Some(String::new()),
                        };
                        return Some(self.chunk(delta, None));
                    }
                }
                Stage::Body => match self.job.next().await {
                    Some(Step::Text(text)) => {
                        self.stage = Stage::Body;
                        let delta = Delta {
                            role: None,
                            content: Some(text),
                        };
                        return Some(self.chunk(delta, None));
                    }
                    Some(Step::Finished(outcome)) => {
                        self.stage = if self.include_usage {
                            Stage::Usage(Box::new(outcome.usage))
                        } else {
                            Stage::Done
                        };
                        return Some(self.chunk(Delta::default(), Some(outcome.finish_reason)));
                    }
                    Some(Step::Failed(error)) => return Some(data(&error.body())),
                    None => return None,
                },
                Stage::Usage(usage) => {
                    self.stage = Stage::Done;
                    return Some(self.usage_chunk(*usage));
                }
                Stage::Done => return Some(Event::default().data("[DONE]")),
                Stage::End => return None,
            }
        }
    }

    /// A content (or final) chunk; `usage: null` when usage was asked for, as OpenAI does.
    fn chunk(&self, delta: Delta, finish_reason: Option<&'static str>) -> Event {
        let usage = self.include_usage.then_some(None);
        let meta = &self.meta;
        match self.endpoint {
            Endpoint::Chat => data(&ChatChunk {
                id: meta.id.clone(),
                object: "chat.completion.chunk",
                created: meta.created,
                model: meta.model.clone(),
                system_fingerprint: None,
                choices: vec![ChunkChoice {
                    index: 0,
                    delta,
                    logprobs: None,
                    finish_reason,
                }],
                usage,
            }),
            Endpoint::Completions => data(&TextCompletion {
                id: meta.id.clone(),
                object: "text_completion",
                created: meta.created,
                model: meta.model.clone(),
                system_fingerprint: None,
                choices: vec![TextChoice {
                    text: delta.content.unwrap_or_default(),
                    index: 0,
                    logprobs: None,
                    finish_reason,
                }],
                usage,
            }),
        }
    }

    fn usage_chunk(&self, usage: Usage) -> Event {
        let meta = &self.meta;
        match self.endpoint {
            Endpoint::Chat => data(&ChatChunk {
                id: meta.id.clone(),
                object: "chat.completion.chunk",
                created: meta.created,
                model: meta.model.clone(),
                system_fingerprint: None,
                choices: Vec::new(),
                usage: Some(Some(usage)),
            }),
            Endpoint::Completions => data(&TextCompletion {
                id: meta.id.clone(),
                object: "text_completion",
                created: meta.created,
                model: meta.model.clone(),
                system_fingerprint: None,
                choices: Vec::new(),
                usage: Some(Some(usage)),
            }),
        }
    }
}
