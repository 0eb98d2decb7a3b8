//! CPU kernels on host memory (plain Rust plus the BLAS MLX already loads), for the parts
//! of a forward pass where MLX's CPU back end is slow:
//!
//! - [`blas`]: `sgemm`, resolved at run time from the process's BLAS (OpenBLAS on Linux),
//!   with a plain-Rust fallback;
//! - [`openblas`]: OpenBLAS's kernels chosen again from the CPU's features where it fell
//!   back to SSE3 code on a CPU newer than the library;
//! - [`softmax`]: a vectorizable `exp` and row softmax. The MLX wheel for x86 computes
//!   `exp` one lane at a time through `fmaf` calls, which made softmax the largest cost of a
//!   long prefill;
//! - [`attention`]: float32 attention over keys and values held as host slices (several
//!   segments, token- or channel-major), causal within a chunk, grouped-query heads;
//! - [`lanes`]: float sums in fixed-width lanes, with a fused or separate multiply-add;
//! - [`dequantize`]: a packed KIVI tensor back in float32, for the attention of a chunk;
//! - [`quantize`]: the KIVI cache's flush (the reference quantizer and the joins to the
//!   quantized history) on host data, for the host kernels' cache;
//! - [`buffers`]: MLX arrays read as host slices (evaluated, contiguous, float16 read as
//!   float32);
//! - [`team`]: the threads that share a decode step's weight products and attention
//!   spans, spinning between them instead of parking.
//!
//! Everything here is tested against plain loops in f64 (`kernels/tests/host.rs`), and the
//! dequantizer against the reference quantizer bit for bit (`kernels/tests/mlx_quant.rs`).

pub mod attention;
pub mod blas;
pub mod buffers;
pub mod dequantize;
pub(crate) mod lanes;
pub mod openblas;
pub mod quantize;
pub mod softmax;
pub mod team;

pub use buffers::readable;

/// Whether the CPU has AVX2 and FMA (cached).
#[cfg(target_arch = "x86_64")]
pub(crate) fn has_avx2() -> bool {
    use std::sync::OnceLock;
    static HAS: OnceLock<bool> = OnceLock::new();
    *HAS.get_or_init(|| is_x86_feature_detected!("avx2") && is_x86_feature_detected!("fma"))
}

/// True when the CPU has AVX-512 F and VL as well as AVX2 and FMA (checked once).
#[cfg(target_arch = "x86_64")]
pub(crate) fn has_avx512vl() -> bool {
    use std::sync::OnceLock;
    static HAS: OnceLock<bool> = OnceLock::new();
    *HAS.get_or_init(|| {
        has_avx2() && is_x86_feature_detected!("avx512f") && is_x86_feature_detected!("avx512vl")
    })
}
