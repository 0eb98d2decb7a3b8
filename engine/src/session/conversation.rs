//! What the engine reports of a conversation's cache.

use crate::cache::CacheConfig;
use crate::stats::KvStats;

/// A conversation's live KV cache.
#[derive(Debug, Clone, PartialEq)]
pub struct ConversationCache {
    /// The name given to [`super::Engine::generate_in`].
    pub conversation: String,
    /// The settings the cache was built with.
    pub cache: CacheConfig,
    /// Tokens it holds.
    pub tokens: usize,
    /// Its accounting, from the real buffers.
    pub kv: KvStats,
}
