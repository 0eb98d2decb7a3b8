//! The one place where the engine's numerics depend on the platform.

use mlx_rs::Dtype;
use serde::{Deserialize, Serialize};

/// OpenBLAS's kernel choice, for executables to correct first thing in `main`
/// ([`openblas::select_core`]).
pub use kivi_kernels::host::openblas;

/// Where the model runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Device {
    /// MLX's CPU back end (Linux).
    Cpu,
    /// Apple GPU through Metal (macOS).
    Metal,
}

impl Device {
    /// The device this build runs on.
    pub fn current() -> Self {
        if cfg!(target_os = "macos") {
            Device::Metal
        } else {
            Device::Cpu
        }
    }
}

impl std::fmt::Display for Device {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Device::Cpu => "cpu",
            Device::Metal => "metal",
        })
    }
}

/// Above how many rows (tokens) a quantized matrix is dequantized and multiplied densely
/// instead of through `quantized_matmul`.
///
/// MLX's CPU back end has no blocked quantized GEMM, its cost grows linearly with the
/// rows: measured here, a 256-token prefill chunk through a 576x1536 4-bit matrix takes
/// 270 ms with `quantized_matmul` and 37 ms as dequantize + (OpenBLAS) sgemm, while one
/// decode row is faster quantized (1.3 ms against 6.9 ms, dequantizing dominates); they
/// cross at about 6 rows. Metal's quantized kernels are fast at any size.
pub fn dense_matmul_min_rows() -> usize {
    match Device::current() {
        Device::Cpu => 8,
        Device::Metal => usize::MAX,
    }
}

/// Whether quantized matrices with fewer than [`dense_matmul_min_rows`] input rows (decode)
/// are multiplied by the plain-Rust kernel in [`kivi_kernels::qmatmul`] instead of MLX's.
///
/// MLX's CPU kernel dequantizes every weight in a scalar loop: 0.74 ms for one row through
/// a 1536x576 4-bit matrix and 21-39 ms through SmolLM2's 49152x576 output head, most of a
/// decode step. Metal's kernels are fast. `KIVI_HOST_QMATMUL=0` turns it off (to compare).
pub fn host_quantized_matmul() -> bool {
    use std::sync::OnceLock;
    static ON: OnceLock<bool> = OnceLock::new();
    *ON.get_or_init(|| {
        Device::current() == Device::Cpu
            && std::env::var("KIVI_HOST_QMATMUL").map_or(true, |v| v != "0")
    })
}

/// The dtype activations, dense weights, and quantization scales/biases are kept in.
///
/// On the CPU MLX emulates float16/bfloat16 and its quantized matmul with float16 scales
/// is 30-50x slower than with float32, so everything runs in float32 there. On Metal,
/// half precision halves memory traffic, which is what bounds decoding.
pub fn compute_dtype() -> Dtype {
    match Device::current() {
        Device::Cpu => Dtype::Float32,
        Device::Metal => Dtype::Float16,
    }
}
