//! What a KIVI cache needs from the runtime it runs on: where its residual window lives,
//! how tokens are rotated and quantized, and which kernels attend. The cache's rules (the
//! flush points, sinks, the adaptive basis, accounting, the saved layout) are written once
//! in `kivi.rs` over this trait; `runtime/host/kivi.rs` and `runtime/mlx/kivi.rs` implement
//! it, and `CacheConfig::make` picks one when a model loads.
//!
//! Both implementations give the same bits: tokens rounded to the storage dtype as MLX
//! rounds them, the same quantizer, the same rotation in float32 (`kivi_tests.rs`).

use kivi_kernels::{mlx_quant::QuantizedArray, Kernels, QuantSpec, Residual};
use mlx_rs::{Array, Dtype};

use super::CacheError;

/// The tokens an append flushes out of the window, `[B, H, F, D]` keys and values in the
/// storage dtype, to be quantized.
pub(crate) type Flushed = Option<(Array, Array)>;

/// Where an append's tokens go: the first `sinks` residual tokens stay; `flush` tokens
/// after them leave the window once the call's queries have read it.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Step {
    pub(crate) sinks: usize,
    pub(crate) flush: usize,
    /// The most tokens the window holds between calls (a host window's buffer size).
    pub(crate) room: usize,
    /// The storage dtype new tokens are rounded to.
    pub(crate) dtype: Dtype,
}

/// A runtime's residual window: the sinks, then the newest tokens, in full precision.
pub(crate) trait ResidualWindow: Clone + std::fmt::Debug + Send + Sized {
    /// An append worked out before anything changes (so that an error in the quantizer,
    /// after it, leaves the cache as it was).
    type Entry;
    /// How the window drops a call's flushed tokens, once its queries have read them.
    type Cut;

    /// A window holding `keys` and `values` (`[B, H, T, D]`, checked by the caller), with
    /// room for `room` tokens.
    fn from_arrays(keys: Array, values: Array, room: usize) -> Result<Self, CacheError>;

    /// Tokens held.
    fn len(&self) -> usize;

    /// The window as the attention kernels read it.
    fn view(&self) -> Residual<'_>;

    /// Keys and values as `[B, H, Tr, D]` arrays of exactly the tokens held.
    fn arrays(&self) -> (Array, Array);

    /// Bytes allocated (a window's room for its largest size included).
    fn bytes(&self) -> u64;

    /// Tokens a window holding `tokens` allocates, `room` being its size between calls
    /// (for estimates before a cache exists).
    fn allocated(tokens: usize, room: usize) -> usize;

    /// Arrays still to be evaluated (lazy MLX operations), for [`super::KiviCache::eval`].
    fn pending(&self) -> Vec<&Array>;

    /// The first `keep` tokens (`keep > 0`).
    fn truncated(self, keep: usize) -> Result<Self, CacheError>;

    /// The tokens `keys` and `values` (`[B, H, L, D]`, checked against the held ones)
    /// flush from `held` (rounded to the storage dtype), and the append, checked.
    fn plan(
        held: Option<&Self>,
        keys: &Array,
        values: &Array,
        step: Step,
    ) -> Result<(Flushed, Self::Entry), CacheError>;

    /// The window holding every token, the new ones included, given the one before the
    /// call; and the cut [`ResidualWindow::cut`] makes after attention.
    fn enter(entry: Self::Entry, held: Option<Self>) -> (Self, Self::Cut);

    /// The window after the flush (`None` when empty).
    fn cut(cut: Self::Cut, window: Self) -> Option<Self>;
}

/// The operations a KIVI cache runs on its runtime.
pub(crate) trait KiviRuntime: Send + 'static {
    /// The residual window's storage.
    type Window: ResidualWindow;

    /// The kernels that attend over the cache.
    const KERNELS: Kernels;

    /// `(x ⊙ s)·H` along the last axis of the heads `on` names (`None`: every head) of
    /// `x`, a float32 `[B, heads, L, D]` array; `on` is per head of `x`, batch-major, and
    /// `scales` (`None`: all ones) `[B * heads, D]`, one factor per head and channel, each
    /// product rounded to float32 before the rotation.
    fn rotate(x: &Array, on: Option<&[bool]>, scales: Option<&[f32]>) -> Result<Array, CacheError>;

    /// `x` quantized in groups along its last axis, or along its second-last when
    /// `transposed` (then stored with those two axes swapped).
    fn quantize(x: &Array, spec: QuantSpec, transposed: bool)
        -> Result<QuantizedArray, CacheError>;

    /// `held` followed by `new` along `axis`.
    fn concatenate(
        held: &QuantizedArray,
        new: &QuantizedArray,
        axis: i32,
    ) -> Result<QuantizedArray, CacheError>;
}
