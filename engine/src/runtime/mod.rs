//! The two runtimes a model runs on, each holding the cache storage that keeps its tensors
//! where its operations read them:
//!
//! - [`host`]: plain-Rust kernels over host memory (the CPU backends): float16 buffers
//!   written in place, read by the host attention kernels;
//! - [`mlx`]: MLX operations on the backend's device (a Mac's GPU, or the CPU): MLX
//!   buffers and MLX's fused attention.
//!
//! The rules a cache kind follows on either runtime (what it accepts, what it reports, what
//! a saved state must hold, KIVI's flush points) live with the kind in [`crate::cache`],
//! written once over [`Runtime`]; which runtime a new cache gets is decided once, in
//! `CacheConfig::make`.

pub(crate) mod host;
pub(crate) mod mlx;

use crate::cache::{kivi_runtime::KiviRuntime, KvCache};

/// A runtime, as the caches see it: its full-precision cache, and what its KIVI cache
/// runs on (the runtime itself).
pub(crate) trait Runtime: KiviRuntime {
    /// The full-precision cache's storage and attention.
    type FullCache: KvCache + Default + 'static;
}

impl Runtime for host::kivi::HostKivi {
    type FullCache = host::full::HostFullCache;
}

impl Runtime for mlx::kivi::MlxKivi {
    type FullCache = mlx::full::MlxFullCache;
}
