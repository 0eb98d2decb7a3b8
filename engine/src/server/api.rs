//! The JSON the endpoints read and write, field for field as OpenAI's API has it, plus
//! the KIVI extensions (`kv_cache` in a request, `usage.kv_cache` and `usage.timings` in
//! a response).

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::stats::Stats;

/// The body of `POST /v1/chat/completions` and `POST /v1/completions` (one type for
/// both: the handler checks that `messages` or `prompt` is there). Fields whose JSON
/// type varies (`stop`, `prompt`, message `content`, `kv_cache`) stay [`Value`]s and are
/// checked by hand, for error messages that say what is allowed. Every other field is
/// kept in `others` and checked by [`super::fields`]: accepted where it asks for nothing,
/// refused by name otherwise.
#[derive(Debug, Default, Deserialize)]
pub struct CompletionBody {
    /// Must name the served model when given.
    pub model: Option<String>,
    /// Chat: the conversation.
    pub messages: Option<Vec<ChatMessage>>,
    /// Completions: the text to continue (a string, or an array of one string).
    pub prompt: Option<Value>,
    /// Stream server-sent events.
    pub stream: Option<bool>,
    /// Streaming options.
    pub stream_options: Option<StreamOptions>,
    /// Sampling temperature, 0 to 2 (default 1; 0 is greedy).
    pub temperature: Option<f32>,
    /// Nucleus sampling, in (0, 1].
    pub top_p: Option<f32>,
    /// Extension (as in vLLM): keep the k most likely tokens; 0 or -1 is off.
    pub top_k: Option<i64>,
    /// Extension (as in vLLM): penalty on recently seen tokens, > 0 (1 is off).
    pub repetition_penalty: Option<f32>,
    /// Most tokens to generate (deprecated by OpenAI for chat in favour of the next).
    pub max_tokens: Option<u64>,
    /// Most tokens to generate; wins over `max_tokens`.
    pub max_completion_tokens: Option<u64>,
    /// Stop sequences: a string or an array of up to 4.
    pub stop: Option<Value>,
    /// Seed of the sampler.
    pub seed: Option<i64>,
    /// Number of choices; only 1 is supported.
    pub n: Option<u64>,
    /// Log probabilities are not supported (`false`/0 accepted).
    pub logprobs: Option<Value>,
    /// Completions: echo the prompt (not supported).
    pub echo: Option<bool>,
    /// Tools are not supported (an empty list is accepted).
    pub tools: Option<Value>,
    /// `{"type": "text" | "json_object" | "json_schema", ...}`: JSON answers by
    /// constrained decoding.
    pub response_format: Option<Value>,
    /// Extension: the KV cache for this request, `"full"`, a short name like
    /// `"k2v2-g32-r128"`, or `{k_bits, v_bits, group_size, residual_length}`.
    pub kv_cache: Option<Value>,
    /// Every other field, for [`super::fields::check_others`].
    #[serde(flatten)]
    pub others: serde_json::Map<String, Value>,
}

/// One message of a chat request.
#[derive(Debug, Deserialize)]
pub struct ChatMessage {
    /// `system`, `developer`, `user` or `assistant`.
    pub role: String,
    /// A string or an array of `{type: "text", text}` parts.
    pub content: Option<Value>,
    /// Tool calls are not supported.
    pub tool_calls: Option<Value>,
}

/// `stream_options`.
#[derive(Debug, Default, Deserialize)]
pub struct StreamOptions {
    /// Send a last chunk with `usage` (and the KIVI statistics) before `[DONE]`.
    pub include_usage: Option<bool>,
}

/// Token counts and the KIVI statistics of one request.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Usage {
    /// Prompt length in tokens.
    pub prompt_tokens: usize,
    /// Generated tokens.
    pub completion_tokens: usize,
    /// The sum.
    pub total_tokens: usize,
    /// As OpenAI reports prompt caching: `cached_tokens` is the prompt prefix whose KV
    /// cache was reused from an earlier request.
    pub prompt_tokens_details: PromptTokensDetails,
    /// Extension: the KV cache after this request.
    pub kv_cache: KvUsage,
    /// Extension: where the time went.
    pub timings: Timings,
}

/// `usage.prompt_tokens_details`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PromptTokensDetails {
    /// Prompt tokens reused from the cache of an earlier request.
    pub cached_tokens: usize,
}

/// `usage.kv_cache`: the conversation's KV cache, summed over layers.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct KvUsage {
    /// The cache kind: `full` or a KIVI short name like `k2v2-g32-r128`.
    pub config: String,
    /// Tokens whose keys and values the cache holds.
    pub tokens: usize,
    /// Of those, tokens held quantized.
    pub quantized_tokens: usize,
    /// Of those, tokens in the full-precision residual window.
    pub residual_tokens: usize,
    /// Bytes the same tokens take in float16.
    pub fp16_bytes: u64,
    /// Bytes the cache actually holds (packed data, scales, zeros, residual window).
    pub held_bytes: u64,
    /// `held_bytes / fp16_bytes` (below 1 means smaller than float16).
    pub ratio: f64,
}

/// `usage.timings`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Timings {
    /// Seconds the request waited in the server's queue.
    pub queue_s: f64,
    /// Seconds from the engine taking the request to the first token.
    pub time_to_first_token_s: Option<f64>,
    /// Prompt tokens run per second (reused tokens are not run).
    pub prefill_tokens_per_s: f64,
    /// Tokens generated per second after the first.
    pub decode_tokens_per_s: f64,
}

impl Usage {
    /// Usage from a generation's final statistics.
    pub fn new(stats: &Stats, completion_tokens: usize, queue_s: f64) -> Self {
        let kv = &stats.kv.total;
        Self {
            prompt_tokens: stats.prompt_tokens,
            completion_tokens,
            total_tokens: stats.prompt_tokens + completion_tokens,
            prompt_tokens_details: PromptTokensDetails {
                cached_tokens: stats.reused_tokens,
            },
            kv_cache: KvUsage {
                config: stats.cache.clone(),
                tokens: kv.tokens,
                quantized_tokens: kv.quantized_tokens,
                residual_tokens: kv.residual_tokens,
                fp16_bytes: kv.fp16_bytes,
                held_bytes: kv.held_bytes,
                ratio: stats.kv.compression,
            },
            timings: Timings {
                queue_s,
                time_to_first_token_s: stats.time_to_first_token_s,
                prefill_tokens_per_s: stats.prefill_tokens_per_s,
                decode_tokens_per_s: stats.decode_tokens_per_s,
            },
        }
    }
}

/// A non-streaming chat completion.
#[derive(Debug, Serialize)]
pub struct ChatCompletion {
    /// `chatcmpl-...`.
    pub id: String,
    /// `chat.completion`.
    pub object: &'static str,
    /// Unix seconds.
    pub created: u64,
    /// The served model id.
    pub model: String,
    /// Always null.
    pub system_fingerprint: Option<String>,
    /// One choice.
    pub choices: Vec<ChatChoice>,
    /// Tokens and KV statistics.
    pub usage: Usage,
}

/// A chat completion's choice.
#[derive(Debug, Serialize)]
pub struct ChatChoice {
    /// 0.
    pub index: usize,
    /// The answer.
    pub message: AssistantMessage,
    /// Always null.
    pub logprobs: Option<()>,
    /// `stop` or `length`.
    pub finish_reason: &'static str,
}

/// The assistant's answer.
#[derive(Debug, Serialize)]
pub struct AssistantMessage {
    /// `assistant`.
    pub role: &'static str,
    /// The text.
    pub content: String,
    /// Always null.
    pub refusal: Option<String>,
}

/// One streamed chat chunk.
#[derive(Debug, Serialize)]
pub struct ChatChunk {
    /// The same id on every chunk of a response.
    pub id: String,
    /// `chat.completion.chunk`.
    pub object: &'static str,
    /// Unix seconds.
    pub created: u64,
    /// The served model id.
    pub model: String,
    /// Always null.
    pub system_fingerprint: Option<String>,
    /// One choice, or none on the usage chunk.
    pub choices: Vec<ChunkChoice>,
    /// Absent unless `stream_options.include_usage`; then null except on the last chunk.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub usage: Option<Option<Usage>>,
}

/// A chat chunk's choice.
#[derive(Debug, Serialize)]
pub struct ChunkChoice {
    /// 0.
    pub index: usize,
    /// What to append.
    pub delta: Delta,
    /// Always null.
    pub logprobs: Option<()>,
    /// Set on the last content chunk.
    pub finish_reason: Option<&'static str>,
}

/// A chat chunk's delta.
#[derive(Debug, Default, Serialize)]
pub struct Delta {
    /// `assistant` on the first chunk.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub role: Option<&'static str>,
    /// Text to append.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub content: Option<String>,
}

/// A text completion, whole or one streamed chunk.
#[derive(Debug, Serialize)]
pub struct TextCompletion {
    /// `cmpl-...`.
    pub id: String,
    /// `text_completion`.
    pub object: &'static str,
    /// Unix seconds.
    pub created: u64,
    /// The served model id.
    pub model: String,
    /// Always null.
    pub system_fingerprint: Option<String>,
    /// One choice, or none on a streamed usage chunk.
    pub choices: Vec<TextChoice>,
    /// Always there when not streaming; when streaming as for [`ChatChunk::usage`].
    #[serde(skip_serializing_if = "Option::is_none")]
    pub usage: Option<Option<Usage>>,
}

/// A text completion's choice.
#[derive(Debug, Serialize)]
pub struct TextChoice {
    /// The text (whole, or what to append).
    pub text: String,
    /// 0.
    pub index: usize,
    /// Always null.
    pub logprobs: Option<()>,
    /// `stop` or `length`; null on streamed chunks but the last.
    pub finish_reason: Option<&'static str>,
}

/// `GET /v1/models`.
#[derive(Debug, Serialize)]
pub struct ModelList {
    /// `list`.
    pub object: &'static str,
    /// The one loaded model.
    pub data: Vec<ModelCard>,
}

/// One model.
#[derive(Debug, Clone, Serialize)]
pub struct ModelCard {
    /// The name requests use.
    pub id: String,
    /// `model`.
    pub object: &'static str,
    /// When the server started, Unix seconds.
    pub created: u64,
    /// `kivi`.
    pub owned_by: &'static str,
    /// Extension: the context window in tokens.
    pub context_length: usize,
}
