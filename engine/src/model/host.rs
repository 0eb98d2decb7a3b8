//! The building blocks of a one-token decode step on host memory (the CPU).
//!
//! Why: on the CPU every MLX evaluation hands work to MLX's stream thread and waits for it
//! to come back. A decode step through MLX makes about 25 such operations and 7
//! evaluations per layer, each costing 15-40 µs of thread wake-up (more on a virtual
//! machine whose idle cores halt), while the arithmetic of a 576-wide layer is a few
//! microseconds. A step of SmolLM2-135M spent more time in those hand-offs than in its
//! matrix products. Here the same layer runs as plain loops over the weights' host
//! buffers: norms, RoPE, SiLU and residual adds in place, products through
//! [`kivi_kernels::qmatmul`] (quantized) or BLAS (dense); only the KV cache is still
//! reached through its MLX-array interface.
//!
//! It applies where every weight is float32 on the host: the CPU build (see
//! [`host_decode`]). The MLX path stays the definition: the tests run both on the same
//! model and compare every logit.

use kivi_kernels::{
    host::blas::{self, Operand},
    qmatmul::{self, QuantMatrix},
};
use mlx_rs::{Array, Dtype};

use super::layers::{Embedding, Linear, Matrix, RmsNorm};
use crate::device::{host_quantized_matmul, Device};
use crate::error::ModelError;

/// Whether one-token steps run on host memory: on the CPU, unless `KIVI_HOST_DECODE=0`
/// (to compare against the MLX path).
pub fn host_decode() -> bool {
    use std::sync::OnceLock;
    static ON: OnceLock<bool> = OnceLock::new();
    *ON.get_or_init(|| {
        Device::current() == Device::Cpu
            && host_quantized_matmul()
            && std::env::var("KIVI_HOST_DECODE").map_or(true, |v| v != "0")
    })
}

/// A weight matrix `[rows, cols]` as host slices.
pub(super) enum HostMatrix<'a> {
    /// MLX's affine quantized layout.
    Quantized(QuantMatrix<'a>),
    /// Row-major float32.
    Dense {
        data: &'a [f32],
        rows: usize,
        cols: usize,
    },
}

impl HostMatrix<'_> {
    /// Output features.
    pub(super) fn rows(&self) -> usize {
        match self {
            HostMatrix::Quantized(w) => w.rows,
            HostMatrix::Dense { rows, .. } => *rows,
        }
    }

    /// Input features.
    pub(super) fn cols(&self) -> usize {
        match self {
            HostMatrix::Quantized(w) => w.cols,
            HostMatrix::Dense { cols, .. } => *cols,
        }
    }

    /// `x @ W^T` for `m` rows `x` (`[m, cols]`), `[m, rows]`.
    pub(super) fn apply(&self, x: &[f32], m: usize) -> Result<Vec<f32>, ModelError> {
        match self {
            HostMatrix::Quantized(w) => {
                let mut out = vec![0f32; m * w.rows];
                qmatmul::qmatmul(x, m, w, &mut out).map_err(|e| ModelError::Host(e.to_string()))?;
                Ok(out)
            }
            &HostMatrix::Dense { data, rows, cols } => {
                if x.len() != m * cols {
                    return Err(ModelError::Host(format!(
                        "{} inputs for {m} rows of {cols}",
                        x.len()
                    )));
                }
                let mut out = vec![0f32; m * rows];
                let a = Operand {
                    data: x,
                    ld: cols,
                    trans: false,
                };
                let b = Operand {
                    data,
                    ld: cols,
                    trans: true,
                };
                blas::sgemm(m, rows, cols, 1.0, a, b, 0.0, &mut out, rows);
                Ok(out)
            }
        }
    }
}

impl Matrix {
    /// The matrix as host slices, or `None` when its buffers are not float32 (or packed
    /// `u32`), not contiguous, or quantized at a width [`qmatmul`] lacks.
    pub(super) fn host(&self) -> Option<HostMatrix<'_>> {
        match self {
            Matrix::Dense(w) if w.ndim() == 2 && w.dtype() == Dtype::Float32 => {
                Some(HostMatrix::Dense {
                    data: w.try_as_slice::<f32>().ok()?,
                    rows: w.dim(0) as usize,
                    cols: w.dim(1) as usize,
                })
            }
            Matrix::Dense(_) => None,
            Matrix::Quantized {
                weight,
                scales,
                biases,
                quant,
            } => {
                let (bits, group) = (quant.bits as u32, quant.group_size as usize);
                if scales.dtype() != Dtype::Float32
                    || biases.dtype() != Dtype::Float32
                    || quant.group_size <= 0
                    || !qmatmul::supports(bits, group)
                    || weight.ndim() != 2
                {
                    return None;
                }
                Some(HostMatrix::Quantized(QuantMatrix {
                    packed: weight.try_as_slice::<u32>().ok()?,
                    scales: scales.try_as_slice::<f32>().ok()?,
                    biases: biases.try_as_slice::<f32>().ok()?,
                    rows: weight.dim(0) as usize,
                    cols: weight.dim(1) as usize * 32 / bits as usize,
                    bits,
                    group,
                }))
            }
        }
    }
}

impl Linear {
    /// True when [`Linear::forward_host`] can run.
    pub(super) fn on_host(&self) -> bool {
        self.weight.host().is_some() && self.bias.as_ref().is_none_or(floats_on_host)
    }

    /// `x W^T + b` for one row `x`.
    pub(super) fn forward_host(&self, x: &[f32]) -> Result<Vec<f32>, ModelError> {
        let w = self.weight.host().ok_or_else(|| not_on_host("a weight"))?;
        let mut y = w.apply(x, 1)?;
        if let Some(b) = &self.bias {
            add_in_place(&mut y, host_floats(b)?);
        }
        Ok(y)
    }
}

impl Embedding {
    /// True when [`Embedding::row_host`] can run.
    pub(super) fn on_host(&self) -> bool {
        self.table.host().is_some()
    }

    /// Row `id` of the table, dequantized.
    pub(super) fn row_host(&self, id: u32) -> Result<Vec<f32>, ModelError> {
        let table = self
            .table
            .host()
            .ok_or_else(|| not_on_host("the embedding"))?;
        let id = id as usize;
        match table {
            HostMatrix::Dense { data, rows, cols } => data
                .get(id * cols..(id + 1) * cols)
                .filter(|_| id < rows)
                .map(<[f32]>::to_vec),
            HostMatrix::Quantized(w) => w.row(id),
        }
        .ok_or_else(|| ModelError::Input(format!("token id {id} is outside the vocabulary")))
    }
}

impl RmsNorm {
    /// True when [`RmsNorm::forward_host`] can run.
    pub(super) fn on_host(&self) -> bool {
        floats_on_host(&self.weight)
    }

    /// `x / sqrt(mean(x^2) + eps) * weight` for one row.
    pub(super) fn forward_host(&self, x: &[f32]) -> Result<Vec<f32>, ModelError> {
        let w = host_floats(&self.weight)?;
        let mean_square = x.iter().map(|v| v * v).sum::<f32>() / x.len() as f32;
        let inv = 1.0 / (mean_square + self.eps).sqrt();
        Ok(x.iter().zip(w).map(|(v, g)| v * inv * g).collect())
    }
}

/// `silu(gate) * up`, into `gate`.
pub(super) fn silu_times(gate: &mut [f32], up: &[f32]) {
    for (g, u) in gate.iter_mut().zip(up) {
        *g = *g / (1.0 + (-*g).exp()) * u;
    }
}

/// `x += y`.
pub(super) fn add_in_place(x: &mut [f32], y: &[f32]) {
    for (a, b) in x.iter_mut().zip(y) {
        *a += b;
    }
}

/// An array's elements as host float32 values, converting and copying only when needed.
pub(super) fn host_vec(a: &Array) -> Result<Vec<f32>, ModelError> {
    if a.dtype() == Dtype::Float32 {
        if let Ok(v) = a.try_as_slice::<f32>() {
            return Ok(v.to_vec());
        }
    }
    let a = a.as_dtype(Dtype::Float32)?.contiguous()?;
    a.eval()?;
    Ok(host_floats(&a)?.to_vec())
}

fn floats_on_host(a: &Array) -> bool {
    a.dtype() == Dtype::Float32 && a.try_as_slice::<f32>().is_ok()
}

fn host_floats(a: &Array) -> Result<&[f32], ModelError> {
    a.try_as_slice::<f32>()
        .map_err(|e| ModelError::Host(format!("cannot read an array on the host: {e}")))
}

fn not_on_host(what: &str) -> ModelError {
    ModelError::Host(format!("{what} is not on the host"))
}
