//! KV caches: one per attention layer, full precision or KIVI, behind one trait.
//!
//! The seam between a model and its cache is [`KvCache::attend`]: an attention layer
//! hands over the new keys, values and queries and gets the attention output back. Each
//! cache kind owns both its storage and the attention over it, so no model ever sees
//! packed data and a new cache kind touches no model.
//!
//! - the full-precision cache (`CacheConfig::Full`): keys and values as they arrive, in
//!   the runtime's storage (`runtime/host/full.rs`, `runtime/mlx/full.rs`).
//! - the KIVI cache (`kivi.rs`, on either runtime through `kivi_runtime.rs`): quantized
//!   history plus a full-precision residual window.
//! - [`WindowCache`]: a sliding-window layer's newest positions (Gemma 3's local layers),
//!   whatever the cache setting: each layer gets the cache its attention needs
//!   ([`CacheConfig::make_layers`]).
//! - [`CacheConfig`] / [`KiviConfig`]: which cache to make ([`CacheConfig::make`], for the
//!   backend the model runs on), validated and serializable.
//! - [`file`]: saving a model's caches and reopening them without a new prefill.

pub(crate) mod arrays;
mod config;
pub mod file;
pub(crate) mod full;
mod kivi;
pub(crate) mod kivi_runtime;
mod make;
mod window;

pub use config::{CacheConfig, ConfigError, KiviConfig, RECOMMENDED};
pub use kivi::KiviBytes;
pub use kivi_kernels::{KeyAxis, Rotation};
pub use window::{WindowCache, TRUNCATE_SLACK};

use mlx_rs::Array;
use serde::{Deserialize, Serialize};

/// Errors from a KV cache.
#[derive(Debug, thiserror::Error)]
pub enum CacheError {
    /// An MLX operation failed.
    #[error("MLX error in the KV cache: {0}")]
    Mlx(#[from] mlx_rs::error::Exception),
    /// Keys, values or queries do not have the shapes the cache expects.
    #[error("KV cache shape mismatch: {0}")]
    Shape(String),
    /// Saved contents that this cache cannot hold (wrong names, shapes or dtypes).
    #[error("saved KV cache contents are inconsistent: {0}")]
    State(String),
    /// The cache kind does not support the operation.
    #[error("this KV cache kind does not support {0}")]
    Unsupported(&'static str),
}

/// A cache's contents as named arrays plus its token count: what [`KvCache::state`] gives
/// and [`KvCache::restore`] takes, and what [`file`] saves.
#[derive(Debug, Clone)]
pub struct CacheState {
    /// Positions held.
    pub tokens: usize,
    /// The cache's buffers, evaluated, by name (names are the cache kind's own).
    pub arrays: Vec<(String, mlx_rs::Array)>,
}

/// One layer's KV cache.
///
/// Shapes follow MLX's attention convention: queries `[B, n_heads, L, D]`, keys and
/// values `[B, n_kv_heads, L, D]` for the `L` newest positions. `n_heads` is a multiple
/// of `n_kv_heads` (grouped-query attention).
pub trait KvCache: Send {
    /// Appends the keys and values of the next `L` positions and returns the attention
    /// output `[B, n_heads, L, D]` of `queries` over everything held, causal within the
    /// new chunk (position `i` of the chunk sees the history and chunk positions `<= i`).
    fn attend(
        &mut self,
        queries: &Array,
        keys: &Array,
        values: &Array,
        scale: f32,
    ) -> Result<Array, CacheError>;

    /// Number of positions held.
    fn len(&self) -> usize;

    /// True when nothing is held.
    fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Keeps only the first `len` positions, for reusing a shared prompt prefix. Returns
    /// the number of positions actually kept, which may be smaller (down to 0) when the
    /// cache cannot reproduce that exact prefix (a quantized cache keeps whole groups).
    fn truncate(&mut self, len: usize) -> Result<usize, CacheError>;

    /// Exact accounting of what this layer holds.
    fn stats(&self) -> LayerKvStats;

    /// The contents as named, evaluated arrays, for saving to a file.
    fn state(&self) -> Result<CacheState, CacheError> {
        Err(CacheError::Unsupported("saving"))
    }

    /// Replaces the contents with a saved state of a cache of the same kind and settings,
    /// after checking that it is consistent.
    fn restore(&mut self, state: CacheState) -> Result<(), CacheError> {
        let _ = state;
        Err(CacheError::Unsupported("loading"))
    }
}

/// What one layer's cache holds, measured from its real buffers.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct LayerKvStats {
    /// Positions held.
    pub tokens: usize,
    /// Positions stored quantized.
    pub quantized_tokens: usize,
    /// KIVI+'s attention sinks: the first positions, kept in full precision for good.
    #[serde(default)]
    pub sink_tokens: usize,
    /// Positions in the full-precision residual window (sinks not counted).
    pub residual_tokens: usize,
    /// Most positions the residual window holds before its oldest group is quantized
    /// (KIVI: `R + G - 1`; 0 for a full-precision cache, which has no window).
    pub residual_capacity: usize,
    /// The layer's sliding window in positions (its cache a [`WindowCache`]); 0 for a layer
    /// that attends to every position.
    #[serde(default)]
    pub window: usize,
    /// Bytes the same keys and values would take in float16.
    pub fp16_bytes: u64,
    /// Bytes the cache actually holds: packed data, scales, zeros and residual (for a
    /// full-precision cache, its keys and values in their compute dtype).
    pub held_bytes: u64,
}
