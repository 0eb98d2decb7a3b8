//! The weights of a Llama-family decoder's building blocks: linear maps (dense or
//! MLX-quantized), the token embedding, and RMS normalization. What they compute is
//! written once, in `llama.rs`, over the operations of [`super::ops::Ops`].

use mlx_rs::Array;

/// An affine quantization in MLX's layout: `weight` packs `bits`-bit values into u32 words
/// along the input dimension; each group of `group_size` inputs has a scale and a bias.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Quantization {
    /// Inputs per scale/bias pair.
    pub group_size: i32,
    /// Bits per weight.
    pub bits: i32,
}

/// A weight matrix `[out, in]`, dense or quantized.
pub enum Matrix {
    /// Full-precision weights in the compute dtype.
    Dense(Array),
    /// Quantized weights with their per-group scales and biases (in the compute dtype).
    Quantized {
        /// Packed values, `[out, in * bits / 32]`, u32.
        weight: Array,
        /// `[out, in / group_size]`.
        scales: Array,
        /// `[out, in / group_size]`.
        biases: Array,
        /// Group size and bit width.
        quant: Quantization,
    },
}

/// `y = x W^T + b`.
pub struct Linear {
    /// The weight matrix.
    pub weight: Matrix,
    /// Optional bias `[out]`.
    pub bias: Option<Array>,
}

/// The token embedding table `[vocab, hidden]`, also the output head when tied.
pub struct Embedding {
    /// The table.
    pub table: Matrix,
}

/// RMS normalization with a learned per-channel gain.
pub struct RmsNorm {
    /// Gain `[hidden]`.
    pub weight: Array,
    /// Added to the mean square for stability.
    pub eps: f32,
}
