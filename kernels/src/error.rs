//! The one error type of the kernels.

/// Errors from the KIVI kernels.
#[derive(Debug, thiserror::Error)]
pub enum KernelError {
    /// A bit width other than 2 or 4.
    #[error("unsupported bit width {0}: KIVI stores 2 or 4 bits per value")]
    Bits(u32),
    /// A group size other than 32, 64 or 128.
    #[error("unsupported group size {0}: allowed group sizes are 32, 64 and 128")]
    GroupSize(usize),
    /// Inputs whose shapes do not fit together.
    #[error("shape mismatch: {0}")]
    Shape(String),
    /// An MLX operation failed.
    #[error("MLX error: {0}")]
    Mlx(#[from] mlx_rs::error::Exception),
}
