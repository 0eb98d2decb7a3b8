//! How to load and run a model.

use std::time::Duration;

use super::request::ModelSource;
use crate::backend::Backend;
use crate::cache::CacheConfig;
#[cfg(feature = "hub")]
use crate::hub::ProgressSink;

/// How to load and run a model.
#[derive(Clone)]
pub struct EngineOptions {
    /// The model.
    pub source: ModelSource,
    /// Default KV cache of requests that do not choose one.
    pub cache: CacheConfig,
    /// Context window; `None` uses the model's training context.
    pub context_length: Option<usize>,
    /// Take the longest context the model allows and the memory holds with `cache`
    /// instead ([`crate::budget::longest_context`]: "fit this machine"); `context_length`
    /// is then ignored.
    pub fit_context: bool,
    /// Prompt tokens per prefill step (cancellation and progress are per chunk).
    pub prefill_chunk: usize,
    /// Conversations whose caches are kept for prefix reuse.
    pub max_cached_conversations: usize,
    /// Rate of statistics events while the prompt runs.
    pub stats_interval: Duration,
    /// Receives download progress when the source is a hub repository.
    #[cfg(feature = "hub")]
    pub download_progress: ProgressSink,
    /// Hugging Face token for gated or private hub repositories (default: `HF_TOKEN`).
    #[cfg(feature = "hub")]
    pub hub_token: Option<String>,
    /// Where and how the model runs; `None` takes [`Backend::chosen`] (`KIVI_BACKEND`, or
    /// the platform's default).
    pub backend: Option<Backend>,
    /// Memory the model may take, in bytes; `None` asks the system what is available.
    /// Loading refuses a model whose weights and KV cache for the whole context (in the
    /// default cache settings) would not fit (see [`crate::budget`]).
    pub available_memory: Option<u64>,
}

impl EngineOptions {
    /// Defaults: full cache, the model's context, 256-token prefill chunks, two cached
    /// conversations, statistics every 250 ms.
    pub fn new(source: ModelSource) -> Self {
        Self {
            source,
            cache: CacheConfig::Full,
            context_length: None,
            fit_context: false,
            prefill_chunk: 256,
            max_cached_conversations: 2,
            stats_interval: DEFAULT_STATS_INTERVAL,
            #[cfg(feature = "hub")]
            download_progress: ProgressSink::default(),
            #[cfg(feature = "hub")]
            hub_token: std::env::var("HF_TOKEN").ok().filter(|t| !t.is_empty()),
            backend: None,
            available_memory: None,
        }
    }
}

/// Default rate of statistics events during prefill.
pub const DEFAULT_STATS_INTERVAL: Duration = Duration::from_millis(250);
