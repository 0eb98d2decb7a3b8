//! What a caller asks the engine for, and what it gets back.

use std::path::PathBuf;

use serde::{Deserialize, Serialize};

use crate::cache::CacheConfig;
use crate::grammar::OutputFormat;
use crate::sampling::SamplingParams;
use crate::stats::Stats;
use crate::tokenizer::Message;

/// Where a model comes from.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ModelSource {
    /// A `.gguf` file or a Hugging Face model folder on disk.
    Path(PathBuf),
    /// A Hugging Face hub repository (`mlx-community/Llama-3.2-3B-Instruct-4bit`),
    /// downloaded into the standard Hugging Face cache first.
    Hub {
        /// `owner/name`.
        repo_id: String,
        /// Branch, tag or commit; `None` for the default branch.
        revision: Option<String>,
        /// The `.gguf` file to fetch from a GGUF repository; `None` fetches a safetensors
        /// checkpoint.
        file: Option<String>,
    },
}

/// A document placed in the prompt, ahead of the conversation.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Document {
    /// Shown to the model as the document's title.
    pub name: String,
    /// The full text.
    pub text: String,
}

/// The text to continue.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Prompt {
    /// A conversation rendered with the model's chat template; the model answers as the
    /// assistant. Documents go into the first user message, so that follow-up questions
    /// about the same documents share (and reuse) the prompt's prefix.
    Chat {
        /// The conversation so far, ending with the user's message.
        messages: Vec<Message>,
        /// Documents to answer from.
        documents: Vec<Document>,
    },
    /// Plain text to continue as is (no chat template; BOS added if the model wants one).
    Text(String),
}

/// One generation.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Request {
    /// What to continue.
    pub prompt: Prompt,
    /// How to pick tokens.
    pub sampling: SamplingParams,
    /// Stop after this many generated tokens; 0 only prefills the prompt into the cache
    /// (the generation ends with `Done`, reason `Length`, and no token).
    pub max_tokens: usize,
    /// KV cache to run with; `None` uses the engine's default.
    pub cache: Option<CacheConfig>,
    /// The shape the answer must take (JSON, or JSON under a schema); `None` is free text.
    #[serde(default)]
    pub format: Option<OutputFormat>,
}

impl Request {
    /// A chat request with default sampling and no documents.
    pub fn chat(messages: Vec<Message>) -> Self {
        Self {
            prompt: Prompt::Chat {
                messages,
                documents: Vec::new(),
            },
            sampling: SamplingParams::default(),
            max_tokens: 512,
            cache: None,
            format: None,
        }
    }

    /// A plain-text completion request with default sampling.
    pub fn text(prompt: impl Into<String>) -> Self {
        Self {
            prompt: Prompt::Text(prompt.into()),
            sampling: SamplingParams::default(),
            max_tokens: 512,
            cache: None,
            format: None,
        }
    }
}

/// Why a generation ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum FinishReason {
    /// The model produced an end-of-turn token.
    Stop,
    /// `max_tokens` were generated.
    Length,
    /// The context window is full.
    ContextFull,
    /// The caller cancelled.
    Cancelled,
}

/// What a running generation reports, in order: `Started`, `Prefill`/`Stats` while the
/// prompt runs, then `Token`s (each followed by `Stats`), and finally `Done` or `Error`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum Event {
    /// The prompt is tokenized; `reused_tokens` of it come from the cache.
    Started {
        /// Prompt length in tokens.
        prompt_tokens: usize,
        /// Tokens whose keys and values were kept from an earlier request.
        reused_tokens: usize,
    },
    /// Prefill progress after each chunk.
    Prefill {
        /// Tokens run so far.
        done: usize,
        /// Tokens to run.
        total: usize,
        /// Prefill speed so far.
        tokens_per_s: f64,
    },
    /// A generated token and the text it completes (empty while a multi-byte character is
    /// still partial).
    Token {
        /// Token id.
        id: u32,
        /// Text to append.
        text: String,
    },
    /// Statistics, on every token and at a fixed rate during prefill.
    Stats(Box<Stats>),
    /// The generation ended.
    Done {
        /// Why.
        reason: FinishReason,
        /// The whole generated text.
        text: String,
        /// Final statistics.
        stats: Box<Stats>,
    },
    /// The generation failed; nothing follows.
    Error {
        /// What went wrong, for the user.
        message: String,
    },
}
