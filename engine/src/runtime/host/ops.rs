//! [`Ops`] on host memory: the host backend's decode steps and prompt chunks.
//!
//! Why: on the CPU every MLX evaluation hands work to MLX's stream thread and waits for it
//! to come back. A decode step through MLX makes about 25 such operations and 7
//! evaluations per layer, each costing 15-40 µs of thread wake-up (more on a virtual
//! machine whose idle cores halt), while the arithmetic of a 576-wide layer is a few
//! microseconds. A step of SmolLM2-135M spent more time in those hand-offs than in its
//! matrix products. Here the same operations run as plain loops over the weights' host
//! buffers: norms, RoPE, SiLU and residual adds, products through
//! [`kivi_kernels::qmatmul`] (quantized) or BLAS (dense). Only the KV cache is reached
//! through its MLX-array interface (its host-kernel implementation reads the arrays'
//! buffers in place).
//!
//! Prompt chunks run here too: `qmatmul` dequantizes the weights for a chunk's rows and
//! multiplies with BLAS, as MLX's CPU back end did for them, but without its strided
//! dequantization and scalar `exp` (a 512-token prefill 1.3-1.5x faster).
//!
//! The host backend computes in float32, so every weight is a float32 host buffer; a
//! matrix the host kernels cannot multiply (a bit width [`qmatmul`] lacks) goes through
//! MLX's operations for that product alone.

use kivi_kernels::{
    host::{
        blas::{self, Operand},
        readable,
    },
    qmatmul::{self, Activations, QuantMatrix},
};
use mlx_rs::{Array, Dtype};

use crate::backend::Backend;
use crate::cache::KvCache;
use crate::error::ModelError;
use crate::model::layers::{Embedding, Linear, Matrix, RmsNorm};
use crate::model::ops::{each_linear, per_layer, Ops, Tokens};
use crate::model::rope::Rope;
use crate::runtime::mlx::ops::MlxOps;

/// Host-memory operations.
pub(crate) struct HostOps<'a> {
    /// For the products the host kernels lack.
    mlx: MlxOps<'a>,
    /// How quantized products take their inputs ([`Backend::host_activations`]).
    activations: Activations,
}

impl<'a> HostOps<'a> {
    pub(crate) fn new(backend: &'a Backend) -> Self {
        Self {
            mlx: MlxOps::new(backend),
            activations: backend.host_activations(),
        }
    }

    /// The same operations with float32 inputs to every quantized product, whatever the
    /// backend's choice: for the output head (see the host runtime's head operations).
    pub(crate) fn with_float_inputs(self) -> Self {
        Self {
            activations: Activations::Float,
            ..self
        }
    }
}

/// `y` plus the layer's bias, if it has one, on every row.
fn with_bias(mut y: HostRows, bias: Option<&Array>) -> Result<HostRows, ModelError> {
    if let Some(b) = bias {
        let b = readable::<f32>(b)?;
        let b = host_floats(&b)?;
        for row in y.data.chunks_exact_mut(b.len()) {
            for (v, add) in row.iter_mut().zip(b) {
                *v += add;
            }
        }
    }
    Ok(y)
}

/// `[rows, width]`, row-major.
pub(crate) struct HostRows {
    data: Vec<f32>,
    rows: usize,
}

impl HostRows {
    fn width(&self) -> usize {
        self.data.len() / self.rows.max(1)
    }
}

/// `[heads, len, dim]`, row-major: the layout of a `[1, heads, len, dim]` MLX array.
pub(crate) struct HostHeads {
    data: Vec<f32>,
    heads: usize,
    len: usize,
}

impl HostHeads {
    fn dim(&self) -> usize {
        self.data.len() / (self.heads * self.len).max(1)
    }

    fn array(&self) -> Array {
        let shape = [1, self.heads as i32, self.len as i32, self.dim() as i32];
        Array::from_slice(&self.data, &shape)
    }
}

/// A weight matrix `[rows, cols]` as host slices.
enum HostMatrix<'a> {
    /// MLX's affine quantized layout.
    Quantized(QuantMatrix<'a>),
    /// Row-major float32.
    Dense {
        data: &'a [f32],
        rows: usize,
        cols: usize,
    },
}

impl<'a> HostMatrix<'a> {
    /// The matrix as host slices, or `None` when its buffers are not float32 (or packed
    /// `u32`), not contiguous, or quantized at a width [`qmatmul`] lacks.
    fn of(matrix: &'a Matrix) -> Option<Self> {
        match matrix {
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

    /// `x @ W^T` for `m` rows `x` (`[m, cols]`), `[m, rows]`.
    fn apply(&self, x: &[f32], m: usize, activations: Activations) -> Result<Vec<f32>, ModelError> {
        match self {
            HostMatrix::Quantized(w) => {
                let mut out = vec![0f32; m * w.rows];
                qmatmul::qmatmul(x, m, w, &mut out, activations)
                    .map_err(|e| ModelError::Host(e.to_string()))?;
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

    /// Row `id`, dequantized.
    fn row(&self, id: usize) -> Option<Vec<f32>> {
        match *self {
            HostMatrix::Dense { data, rows, cols } => data
                .get(id * cols..(id + 1) * cols)
                .filter(|_| id < rows)
                .map(<[f32]>::to_vec),
            HostMatrix::Quantized(ref w) => w.row(id),
        }
    }
}

/// An array's elements as host float32 values, converting and copying only when needed.
fn host_vec(a: &Array) -> Result<Vec<f32>, ModelError> {
    let a = readable::<f32>(a)?;
    Ok(host_floats(&a)?.to_vec())
}

fn host_floats(a: &Array) -> Result<&[f32], ModelError> {
    a.try_as_slice::<f32>()
        .map_err(|e| ModelError::Host(format!("cannot read an array on the host: {e}")))
}

/// `[a, b, c]` to `[b, a, c]` for row-major data.
fn swap_outer(data: &[f32], a: usize, b: usize, c: usize) -> Vec<f32> {
    if a == 1 || b == 1 {
        return data.to_vec();
    }
    let mut out = vec![0f32; data.len()];
    for i in 0..a {
        for j in 0..b {
            out[(j * a + i) * c..][..c].copy_from_slice(&data[(i * b + j) * c..][..c]);
        }
    }
    out
}

impl Ops for HostOps<'_> {
    type Rows = HostRows;
    type Heads = HostHeads;

    fn embed(&self, table: &Embedding, tokens: Tokens<'_>) -> Result<HostRows, ModelError> {
        let Some(matrix) = HostMatrix::of(&table.table) else {
            return self.rows_of(&self.mlx.embed(table, tokens)?);
        };
        let read;
        let tokens = match tokens {
            Tokens::Host(ids) => ids,
            Tokens::Device(ids) => {
                read = readable::<u32>(ids)?;
                read.try_as_slice::<u32>()
                    .map_err(|e| ModelError::Host(format!("cannot read token ids: {e}")))?
            }
        };
        let mut data = Vec::new();
        for &id in tokens {
            let row = matrix.row(id as usize).ok_or_else(|| {
                ModelError::Input(format!("token id {id} is outside the vocabulary"))
            })?;
            data.extend(row);
        }
        Ok(HostRows {
            data,
            rows: tokens.len(),
        })
    }

    fn linear(
        &self,
        weight: &Matrix,
        bias: Option<&Array>,
        x: &HostRows,
    ) -> Result<HostRows, ModelError> {
        let y = match HostMatrix::of(weight) {
            Some(w) => HostRows {
                data: w.apply(&x.data, x.rows, self.activations)?,
                rows: x.rows,
            },
            None => {
                let x = Array::from_slice(&x.data, &[1, x.rows as i32, x.width() as i32]);
                return self.rows_of(&self.mlx.linear(weight, bias, &x)?);
            }
        };
        with_bias(y, bias)
    }

    /// Quantized layers over one input run as one product ([`qmatmul::qmatmul_many`]: the
    /// input quantized once, one hand-off to the threads); any other layer, one by one.
    fn linears<const N: usize>(
        &self,
        layers: [&Linear; N],
        x: &HostRows,
    ) -> Result<[HostRows; N], ModelError> {
        let quantized: Option<Vec<QuantMatrix<'_>>> = layers
            .iter()
            .map(|l| match HostMatrix::of(&l.weight) {
                Some(HostMatrix::Quantized(w)) => Some(w),
                _ => None,
            })
            .collect();
        let Some(ws) = quantized else {
            return each_linear(self, layers, x);
        };
        let outs = qmatmul::qmatmul_many(&x.data, x.rows, &ws, self.activations)
            .map_err(|e| ModelError::Host(e.to_string()))?;
        per_layer(
            outs.into_iter().zip(layers).map(|(data, layer)| {
                with_bias(HostRows { data, rows: x.rows }, layer.bias.as_ref())
            }),
        )
    }

    fn rms_norm(&self, norm: &RmsNorm, x: &HostRows) -> Result<HostRows, ModelError> {
        Ok(HostRows {
            data: rms_normed(norm, &x.data)?,
            rows: x.rows,
        })
    }

    fn head_norm(&self, norm: &RmsNorm, x: HostHeads) -> Result<HostHeads, ModelError> {
        Ok(HostHeads {
            data: rms_normed(norm, &x.data)?,
            ..x
        })
    }

    fn scaled(&self, mut x: HostRows, s: f32) -> Result<HostRows, ModelError> {
        x.data.iter_mut().for_each(|v| *v *= s);
        Ok(x)
    }

    fn gelu_times(&self, mut gate: HostRows, up: &HostRows) -> Result<HostRows, ModelError> {
        for (g, u) in gate.data.iter_mut().zip(&up.data) {
            *g = gelu_tanh(*g) * u;
        }
        Ok(gate)
    }

    fn silu_times(&self, mut gate: HostRows, up: &HostRows) -> Result<HostRows, ModelError> {
        for (g, u) in gate.data.iter_mut().zip(&up.data) {
            *g = *g / (1.0 + (-*g).exp()) * u;
        }
        Ok(gate)
    }

    fn add(&self, mut x: HostRows, y: &HostRows) -> Result<HostRows, ModelError> {
        for (a, b) in x.data.iter_mut().zip(&y.data) {
            *a += b;
        }
        Ok(x)
    }

    fn split_heads(&self, x: HostRows, heads: usize) -> Result<HostHeads, ModelError> {
        let dim = x.width() / heads;
        Ok(HostHeads {
            data: swap_outer(&x.data, x.rows, heads, dim),
            heads,
            len: x.rows,
        })
    }

    fn merge_heads(&self, x: HostHeads) -> Result<HostRows, ModelError> {
        let dim = x.dim();
        Ok(HostRows {
            data: swap_outer(&x.data, x.heads, x.len, dim),
            rows: x.len,
        })
    }

    /// Angles are computed in float64.
    fn rope(&self, rope: &Rope, mut x: HostHeads, offset: usize) -> Result<HostHeads, ModelError> {
        let d = rope.dims as usize;
        let half = d / 2;
        for l in 0..x.len {
            let position = (offset + l) as f64;
            let turns: Vec<(f64, f64)> = rope
                .host_periods
                .iter()
                .map(|&period| (position * f64::from(rope.scale) / f64::from(period)).sin_cos())
                .collect();
            for h in 0..x.heads {
                let head = &mut x.data[(h * x.len + l) * d..][..d];
                for (i, &(sin, cos)) in turns.iter().enumerate() {
                    // GGUF Llama rows pair neighbours; Hugging Face rows pair the two halves.
                    let (a, b) = if rope.traditional {
                        (2 * i, 2 * i + 1)
                    } else {
                        (i, i + half)
                    };
                    let (x1, x2) = (f64::from(head[a]), f64::from(head[b]));
                    head[a] = (x1 * cos - x2 * sin) as f32;
                    head[b] = (x1 * sin + x2 * cos) as f32;
                }
            }
        }
        Ok(x)
    }

    fn attend(
        &self,
        cache: &mut dyn KvCache,
        queries: HostHeads,
        keys: HostHeads,
        values: HostHeads,
        scale: f32,
    ) -> Result<HostHeads, ModelError> {
        let out = cache.attend(&queries.array(), &keys.array(), &values.array(), scale)?;
        Ok(HostHeads {
            data: host_vec(&out)?,
            heads: queries.heads,
            len: queries.len,
        })
    }

    fn array_of(&self, x: HostRows) -> Result<Array, ModelError> {
        let width = x.width() as i32;
        Ok(Array::from_slice(&x.data, &[1, x.rows as i32, width]))
    }

    fn rows_of(&self, x: &Array) -> Result<HostRows, ModelError> {
        let width = x.dim(-1).max(1) as usize;
        let data = host_vec(x)?;
        Ok(HostRows {
            rows: data.len() / width,
            data,
        })
    }

    fn check(&self, _: &HostRows, _: &dyn Fn() -> String) -> Result<(), ModelError> {
        // Host buffers are float32 by type; the arrays made from them are checked where
        // the cache takes them.
        Ok(())
    }
}

/// GELU's tanh approximation, `x/2 (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3)))`.
fn gelu_tanh(x: f32) -> f32 {
    const SQRT_2_OVER_PI: f32 = 0.797_884_6;
    0.5 * x * (1.0 + (SQRT_2_OVER_PI * (x + 0.044_715 * x * x * x)).tanh())
}

/// RMS normalization of each run of `gain`'s length in `data` (a row, or one head's
/// vector), times the gain.
fn rms_normed(norm: &RmsNorm, data: &[f32]) -> Result<Vec<f32>, ModelError> {
    let w = readable::<f32>(&norm.weight)?;
    let w = host_floats(&w)?;
    if w.is_empty() || !data.len().is_multiple_of(w.len()) {
        return Err(ModelError::Input(format!(
            "an RMS norm of {} channels over {} values",
            w.len(),
            data.len()
        )));
    }
    let mut out = Vec::with_capacity(data.len());
    for run in data.chunks_exact(w.len()) {
        let mean_square = run.iter().map(|v| v * v).sum::<f32>() / run.len() as f32;
        let inv = 1.0 / (mean_square + norm.eps).sqrt();
        out.extend(run.iter().zip(w).map(|(v, g)| v * inv * g));
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::backend::{Device, Precision};
    use crate::model::config::{RopeConfig, RopeScaling};

    fn values(a: &Array) -> Vec<f32> {
        a.eval().unwrap();
        a.as_slice::<f32>().to_vec()
    }

    /// RoPE, head splitting and merging on the host against MLX's kernel, for several
    /// positions at once in both pair layouts.
    #[test]
    fn host_rope_and_heads_match_mlx() {
        let (heads, len, d) = (3usize, 5usize, 16usize);
        let x: Vec<f32> = (0..heads * len * d)
            .map(|i| (i as f32 * 0.37).sin())
            .collect();
        let host_backend = Backend::HOST;
        let mlx_backend = Backend::mlx(Device::Cpu, Precision::F32);
        let (host, mlx) = (HostOps::new(&host_backend), MlxOps::new(&mlx_backend));
        for traditional in [false, true] {
            let rope = Rope::new(
                &RopeConfig {
                    theta: 10_000.0,
                    scaling: RopeScaling::None,
                    traditional,
                },
                d,
            );
            let rows = HostRows {
                data: x.clone(),
                rows: len,
            };
            let array = Array::from_slice(&x, &[1, len as i32, (heads * d) as i32]);
            let h = host.split_heads(rows, heads).unwrap();
            let h = host.rope(&rope, h, 7).unwrap();
            let m = mlx.split_heads(array, heads).unwrap();
            let m = mlx.rope(&rope, m, 7).unwrap();
            for (a, b) in h.data.iter().zip(values(&m.contiguous().unwrap())) {
                assert!((a - b).abs() < 1e-5, "{traditional}: {a} vs {b}");
            }
            let merged = host.merge_heads(h).unwrap();
            let m = mlx.merge_heads(m).unwrap();
            for (a, b) in merged.data.iter().zip(values(&m.contiguous().unwrap())) {
                assert!((a - b).abs() < 1e-5);
            }
        }
    }
}
