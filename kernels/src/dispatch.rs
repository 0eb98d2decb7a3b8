//! Which implementation of the KIVI math runs: the host kernels or MLX operations.
//!
//! The engine's backend decides this once, when a model loads, and passes it down; nothing
//! in this crate looks at the platform or the environment to choose.

use serde::{Deserialize, Serialize};

/// The implementation attention and the cache buffers use.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Kernels {
    /// Plain-Rust kernels over host memory ([`crate::host`], [`crate::fused`]): the CPU,
    /// float32 compute.
    Host,
    /// MLX operations ([`crate::attention::attend_mlx`], [`crate::mlx_quant`]) on whatever
    /// device MLX's default stream is: the GPU on a Mac.
    Mlx,
}
