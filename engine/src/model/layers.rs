//! The building blocks of a Llama-family decoder: linear maps (dense or MLX-quantized),
//! the token embedding, and RMS normalization.

use mlx_rs::{fast, ops, Array, Dtype};

use super::host::HostMatrix;
use crate::device::{dense_matmul_min_rows, host_quantized_matmul};

type MlxResult<T> = Result<T, mlx_rs::error::Exception>;

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

impl Matrix {
    /// `x @ W^T`.
    fn apply(&self, x: &Array) -> MlxResult<Array> {
        match self {
            Matrix::Dense(w) => x.matmul(w.t()),
            Matrix::Quantized {
                weight,
                scales,
                biases,
                quant,
            } if rows(x) >= dense_matmul_min_rows() => {
                x.matmul(ops::dequantize(weight, scales, biases, quant.group_size, quant.bits)?.t())
            }
            Matrix::Quantized {
                weight,
                scales,
                biases,
                quant,
            } => {
                if host_quantized_matmul() {
                    if let Some(y) = host_qmatmul(x, self)? {
                        return Ok(y);
                    }
                }
                ops::quantized_matmul(
                    x,
                    weight,
                    scales,
                    biases,
                    true,
                    quant.group_size,
                    quant.bits,
                )
            }
        }
    }

    /// Rows `ids` of the matrix, dequantized: the embedding lookup.
    fn rows(&self, ids: &Array) -> MlxResult<Array> {
        match self {
            Matrix::Dense(w) => w.take_axis(ids, 0),
            Matrix::Quantized {
                weight,
                scales,
                biases,
                quant,
            } => ops::dequantize(
                weight.take_axis(ids, 0)?,
                scales.take_axis(ids, 0)?,
                &biases.take_axis(ids, 0)?,
                quant.group_size,
                quant.bits,
            ),
        }
    }
}

/// `x @ W^T` through the plain-Rust kernel ([`kivi_kernels::qmatmul`]) on host memory, or
/// `None` when it does not apply (not float32, a bit width it lacks, non-contiguous
/// weights), in which case MLX's own kernel runs.
///
/// It evaluates `x` (the graph up to this layer), which costs nothing extra on the CPU,
/// where MLX runs each operation as it is evaluated anyway.
fn host_qmatmul(x: &Array, matrix: &Matrix) -> MlxResult<Option<Array>> {
    let Some(w @ HostMatrix::Quantized(_)) = matrix.host() else {
        return Ok(None);
    };
    if x.dtype() != Dtype::Float32 || x.dim(-1) as usize != w.cols() {
        return Ok(None);
    }
    let x = x.contiguous()?;
    let Ok(xs) = x.try_as_slice::<f32>() else {
        return Ok(None);
    };
    let Ok(out) = w.apply(xs, rows(&x)) else {
        return Ok(None);
    };
    let mut shape = x.shape().to_vec();
    *shape.last_mut().expect("checked above") = w.rows() as i32;
    Ok(Some(Array::from_slice(&out, &shape)))
}

/// Rows of `x` seen as a matrix `[rows, last axis]`.
fn rows(x: &Array) -> usize {
    x.shape()[..x.ndim().saturating_sub(1)]
        .iter()
        .map(|&d| d as usize)
        .product()
}

/// `y = x W^T + b`.
pub struct Linear {
    /// The weight matrix.
    pub weight: Matrix,
    /// Optional bias `[out]`.
    pub bias: Option<Array>,
}

impl Linear {
    /// Applies the map to the last axis of `x`.
    pub fn forward(&self, x: &Array) -> MlxResult<Array> {
        let y = self.weight.apply(x)?;
        match &self.bias {
            Some(b) => y.add(b),
            None => Ok(y),
        }
    }
}

/// The token embedding table `[vocab, hidden]`, also the output head when tied.
pub struct Embedding {
    /// The table.
    pub table: Matrix,
}

impl Embedding {
    /// Looks up token ids (any shape) and appends the hidden axis.
    pub fn forward(&self, ids: &Array) -> MlxResult<Array> {
        let flat = ids.reshape(&[-1])?;
        let rows = self.table.rows(&flat)?;
        let mut shape = ids.shape().to_vec();
        shape.push(-1);
        rows.reshape(&shape)
    }

    /// Uses the table as the output projection (tied embeddings): `x @ E^T`.
    pub fn as_linear(&self, x: &Array) -> MlxResult<Array> {
        self.table.apply(x)
    }
}

/// RMS normalization with a learned per-channel gain.
pub struct RmsNorm {
    /// Gain `[hidden]`.
    pub weight: Array,
    /// Added to the mean square for stability.
    pub eps: f32,
}

impl RmsNorm {
    /// Normalizes the last axis.
    pub fn forward(&self, x: &Array) -> MlxResult<Array> {
        fast::rms_norm(x, Some(&self.weight), self.eps)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn values(a: &Array) -> Vec<f32> {
        a.eval().unwrap();
        a.as_slice::<f32>().to_vec()
    }

    #[test]
    fn quantized_linear_and_embedding_agree_with_their_dense_twins() {
        let (out, inp) = (6usize, 64usize);
        let w: Vec<f32> = (0..out * inp)
            .map(|i| ((i * 37 % 17) as f32 - 8.0) / 8.0)
            .collect();
        let w = Array::from_slice(&w, &[out as i32, inp as i32]);
        let (packed, scales, biases) = ops::quantize(&w, 32, 4).unwrap();
        let dense_equiv = ops::dequantize(&packed, &scales, &biases, 32, 4).unwrap();
        let quantized = Matrix::Quantized {
            weight: packed,
            scales,
            biases,
            quant: Quantization {
                group_size: 32,
                bits: 4,
            },
        };
        let x: Vec<f32> = (0..2 * inp).map(|i| (i as f32 * 0.1).sin()).collect();
        let x = Array::from_slice(&x, &[1, 2, inp as i32]);
        let bias = Array::from_slice(&[1.0f32, 2., 3., 4., 5., 6.], &[out as i32]);
        let q = Linear {
            weight: quantized,
            bias: Some(bias.clone()),
        };
        let d = Linear {
            weight: Matrix::Dense(dense_equiv),
            bias: Some(bias),
        };
        let (yq, yd) = (q.forward(&x).unwrap(), d.forward(&x).unwrap());
        assert_eq!(yq.shape(), &[1, 2, out as i32]);
        for (a, b) in values(&yq).iter().zip(values(&yd)) {
            assert!((a - b).abs() < 1e-3, "{a} vs {b}");
        }

        // Enough rows to take the dequantize + dense path on the CPU.
        let x20: Vec<f32> = (0..20 * inp).map(|i| (i as f32 * 0.37).cos()).collect();
        let x20 = Array::from_slice(&x20, &[20, inp as i32]);
        for (a, b) in values(&q.forward(&x20).unwrap())
            .iter()
            .zip(values(&d.forward(&x20).unwrap()))
        {
            assert!((a - b).abs() < 1e-3, "{a} vs {b}");
        }

        let emb_q = Embedding { table: q.weight };
        let emb_d = Embedding { table: d.weight };
        let ids = Array::from_slice(&[5u32, 0, 2], &[1, 3]);
        let (eq, ed) = (emb_q.forward(&ids).unwrap(), emb_d.forward(&ids).unwrap());
        assert_eq!(eq.shape(), &[1, 3, inp as i32]);
        assert_eq!(values(&eq), values(&ed));
    }

    #[test]
    fn rms_norm_matches_formula() {
        let x = Array::from_slice(&[1.0f32, 2.0, 3.0, 4.0], &[1, 4]);
        let w = Array::from_slice(&[1.0f32, 0.5, 2.0, 1.0], &[4]);
        let y = values(
            &RmsNorm {
                weight: w,
                eps: 0.0,
            }
            .forward(&x)
            .unwrap(),
        );
        let rms = (30.0f32 / 4.0).sqrt();
        let want = [1.0 / rms, 1.0 / rms, 6.0 / rms, 4.0 / rms];
        for (a, b) in y.iter().zip(want) {
            assert!((a - b).abs() < 1e-5);
        }
    }
}
