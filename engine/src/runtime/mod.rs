//! The two runtimes a model runs on, each holding the operations and the cache storage
//! that keep its tensors where it reads them:
//!
//! - [`host`]: plain-Rust kernels over host memory (the CPU backends): float16 buffers
//!   written in place, read by the host attention kernels;
//! - [`mlx`]: MLX operations on the backend's device (a Mac's GPU, or the CPU): MLX
//!   buffers and MLX's fused attention.
//!
//! The model is written once over [`Runtime::Ops`], and the rules a cache kind follows on
//! either runtime (what it accepts, what it reports, what a saved state must hold, KIVI's
//! flush points) live with the kind in [`crate::cache`], written once over [`Runtime`].
//! Which runtime a backend runs on is decided in one place, [`chosen`]; what depends on
//! it is made there once (a model's steps when it loads, a cache when it is made).

pub(crate) mod host;
pub(crate) mod mlx;

use kivi_kernels::Kernels;

use crate::backend::Backend;
use crate::cache::{kivi_runtime::KiviRuntime, KvCache};
use crate::model::ops::Ops;
use host::ops::HostOps;
use host::Host;
use mlx::ops::MlxOps;
use mlx::Mlx;

/// A runtime: the model's operations, its caches' storage, and how decoding overlaps.
pub(crate) trait Runtime: KiviRuntime {
    /// The full-precision cache's storage and attention.
    type FullCache: KvCache + Default + 'static;

    /// The operations a model's blocks run.
    type Ops<'a>: Ops;

    /// Whether a decode step is built on the previous token before that token is read
    /// back ([`crate::decode`]): MLX's operations take lazy inputs, the host kernels need
    /// values.
    const PIPELINES: bool;

    /// The operations of a model's blocks on `backend`.
    fn ops(backend: &Backend) -> Self::Ops<'_>;

    /// The operations of the output head.
    fn head_ops(backend: &Backend) -> Self::Ops<'_> {
        Self::ops(backend)
    }
}

impl Runtime for Host {
    type FullCache = host::full::HostFullCache;
    type Ops<'a> = HostOps<'a>;
    const PIPELINES: bool = false;

    fn ops(backend: &Backend) -> HostOps<'_> {
        HostOps::new(backend)
    }

    fn head_ops(backend: &Backend) -> HostOps<'_> {
        // The head's product takes float32 inputs on every host backend: the logits decide
        // the token, and int8 inputs there flipped close choices (SmolLM2 answered "What is
        // the capital of France?" with "L'Étoile ..." instead of "The capital of France is
        // Paris."), for about a fifth of a step's weights (docs/benchmarks.md).
        HostOps::new(backend).with_float_inputs()
    }
}

impl Runtime for Mlx {
    type FullCache = mlx::full::MlxFullCache;
    type Ops<'a> = MlxOps<'a>;
    const PIPELINES: bool = true;

    fn ops(backend: &Backend) -> MlxOps<'_> {
        MlxOps::new(backend)
    }
}

/// Something made for one runtime: a model's steps, a cache maker.
pub(crate) trait ForRuntime {
    /// The thing for runtime `R`.
    fn on<R: Runtime>() -> Self;
}

/// `T` for the runtime `backend` runs on: the one place that asks which it is.
pub(crate) fn chosen<T: ForRuntime>(backend: &Backend) -> T {
    match backend.kernels() {
        Kernels::Host => T::on::<Host>(),
        Kernels::Mlx => T::on::<Mlx>(),
    }
}
