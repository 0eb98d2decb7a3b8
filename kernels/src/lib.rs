//! KIVI math: the spec in plain Rust, the same quantizer on MLX, and attention over a
//! quantized KV cache.
//!
//! - [`spec`]: bit widths, group sizes, the residual flush rule `Q(T)`, KIVI+'s sinks and
//!   rotation.
//! - [`pack`]: packing 2- and 4-bit codes into `u32` words in MLX's layout.
//! - [`reference`]: the reference quantizer, the spec every other path is tested against.
//! - [`reference_attention`]: attention in plain Rust (f64), the spec for attention.
//! - [`mlx_quant`]: the same quantizer as an MLX graph, bit-identical to the reference.
//! - [`rotation`]: KIVI+'s Hadamard basis, on the host and as an MLX operation, alike.
//! - [`attention`]: decode and chunk attention over quantized history plus residual
//!   ([`CacheView`]), by the implementation [`Kernels`] names.
//! - [`fused`]: a plain-Rust CPU kernel for single-position decode attention.
//! - [`host`]: float32 attention, softmax and `sgemm` on host memory, for the CPU.
//! - [`qmatmul`]: `x @ W^T` over MLX-quantized weights in plain Rust for the CPU: row
//!   kernels over float32 or int8 inputs for decode steps, dequantized blocks through BLAS
//!   for prompt chunks.
//! - [`ggml`]: ggml's quantized blocks (GGUF tensor data) decoded, and converted to MLX's
//!   affine layout.
//! - [`testdata`]: seeded random keys and values (with outliers) for tests and benchmarks.

pub mod attention;
mod cache_view;
mod dispatch;
mod error;
pub mod fused;
pub mod ggml;
pub mod host;
pub mod mlx_quant;
pub mod pack;
pub mod qmatmul;
pub mod reference;
pub mod reference_attention;
pub mod rotation;
pub mod spec;
pub mod testdata;

pub use cache_view::{CacheView, HostWindow, Residual};
pub use dispatch::Kernels;
pub use error::KernelError;
pub use spec::{quantized_after, quantized_len, sink_len, KeyAxis, QuantSpec, Rotation};
