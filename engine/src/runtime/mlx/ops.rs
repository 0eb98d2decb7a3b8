//! [`Ops`] as MLX operations: the graph a Mac runs on its GPU, and the host backend's path
//! for prompt chunks on the CPU. Rows are `[1, L, width]` arrays and heads
//! `[1, heads, L, D]`, MLX's attention layout; nothing is evaluated here.
//!
//! Every array made is checked against the GPU-stream rules ([`crate::gpu_rules`]) where
//! the backend is guarded.

use mlx_rs::{fast, nn::silu, ops, Array, Dtype};

use crate::backend::Backend;
use crate::cache::KvCache;
use crate::error::ModelError;
use crate::gpu_rules;
use crate::model::layers::{Embedding, Matrix, RmsNorm};
use crate::model::ops::{Ops, Tokens};
use crate::model::rope::Rope;

/// MLX operations on the backend's device.
pub(crate) struct MlxOps<'a> {
    backend: &'a Backend,
}

impl<'a> MlxOps<'a> {
    pub(crate) fn new(backend: &'a Backend) -> Self {
        Self { backend }
    }

    /// `array`, after the GPU-stream guard.
    fn checked(&self, what: &str, array: Array) -> Result<Array, ModelError> {
        gpu_rules::check(self.backend, || what.to_string(), &array)?;
        Ok(array)
    }

    /// `x @ W^T` for `x` `[.., in]`.
    fn matmul(&self, weight: &Matrix, x: &Array) -> Result<Array, ModelError> {
        Ok(match weight {
            Matrix::Dense(w) => x.matmul(w.t())?,
            Matrix::Quantized {
                weight,
                scales,
                biases,
                quant,
            } if self.backend.dequantize_for_matmul(rows(x)) => x.matmul(
                ops::dequantize(weight, scales, biases, quant.group_size, quant.bits)?.t(),
            )?,
            Matrix::Quantized {
                weight,
                scales,
                biases,
                quant,
            } => ops::quantized_matmul(
                x,
                weight,
                scales,
                biases,
                true,
                quant.group_size,
                quant.bits,
            )?,
        })
    }
}

/// Rows of `x` seen as a matrix `[rows, last axis]`.
fn rows(x: &Array) -> usize {
    x.shape()[..x.ndim().saturating_sub(1)]
        .iter()
        .map(|&d| d as usize)
        .product()
}

impl Ops for MlxOps<'_> {
    type Rows = Array;
    type Heads = Array;

    fn embed(&self, table: &Embedding, tokens: Tokens<'_>) -> Result<Array, ModelError> {
        let ids = match tokens {
            Tokens::Host(ids) => Array::from_slice(ids, &[ids.len() as i32]),
            Tokens::Device(ids) => ids.reshape(&[-1])?,
        };
        let rows = match &table.table {
            Matrix::Dense(w) => w.take_axis(&ids, 0)?,
            Matrix::Quantized {
                weight,
                scales,
                biases,
                quant,
            } => ops::dequantize(
                weight.take_axis(&ids, 0)?,
                scales.take_axis(&ids, 0)?,
                &biases.take_axis(&ids, 0)?,
                quant.group_size,
                quant.bits,
            )?,
        };
        let rows = rows.reshape(&[1, ids.dim(0), -1])?;
        self.checked("the token embeddings", rows)
    }

    fn linear(
        &self,
        weight: &Matrix,
        bias: Option<&Array>,
        x: &Array,
    ) -> Result<Array, ModelError> {
        let y = self.matmul(weight, x)?;
        let y = match bias {
            Some(b) => y.add(b)?,
            None => y,
        };
        self.checked("a linear layer's output", y)
    }

    fn rms_norm(&self, norm: &RmsNorm, x: &Array) -> Result<Array, ModelError> {
        self.checked(
            "an RMS norm's output",
            fast::rms_norm(x, Some(&norm.weight), norm.eps)?,
        )
    }

    /// `[1, heads, L, D]`: MLX's norm runs over the last axis, one head's vector.
    fn head_norm(&self, norm: &RmsNorm, x: Array) -> Result<Array, ModelError> {
        self.rms_norm(norm, &x)
    }

    fn silu_times(&self, gate: Array, up: &Array) -> Result<Array, ModelError> {
        self.checked("the MLP's gated product", silu(gate)?.multiply(up)?)
    }

    /// In float16 the sum is taken in float32 and clipped to float16's range: Gemma's
    /// residual stream grows past 65,504, where a float16 sum would be infinite (mlx-lm
    /// clips the same way). Elsewhere the result is the float16 sum, rounded once.
    fn add(&self, x: Array, y: &Array) -> Result<Array, ModelError> {
        let sum = if x.dtype() == Dtype::Float16 {
            let max = f32::from(half::f16::MAX);
            ops::clip(
                &x.as_dtype(Dtype::Float32)?
                    .add(y.as_dtype(Dtype::Float32)?)?,
                (&Array::from_f32(-max), &Array::from_f32(max)),
            )?
            .as_dtype(Dtype::Float16)?
        } else {
            x.add(y)?
        };
        self.checked("a residual sum", sum)
    }

    fn scaled(&self, x: Array, s: f32) -> Result<Array, ModelError> {
        let s = Array::from_f32(s).as_dtype(x.dtype())?;
        self.checked("scaled embeddings", x.multiply(&s)?)
    }

    /// Scalars in the input's dtype, so that float16 stays float16.
    fn gelu_times(&self, gate: Array, up: &Array) -> Result<Array, ModelError> {
        let dtype = gate.dtype();
        let c = |v: f32| Array::from_f32(v).as_dtype(dtype);
        let cube = gate.multiply(&gate)?.multiply(&gate)?;
        let inner = gate
            .add(cube.multiply(c(0.044_715)?)?)?
            .multiply(c(0.797_884_6)?)?;
        let gelu = gate
            .multiply(c(0.5)?)?
            .multiply(ops::tanh(&inner)?.add(c(1.0)?)?)?;
        self.checked("the MLP's gated product", gelu.multiply(up)?)
    }

    fn split_heads(&self, x: Array, heads: usize) -> Result<Array, ModelError> {
        let (l, width) = (x.dim(1), x.dim(2));
        let heads = heads as i32;
        Ok(x.reshape(&[1, l, heads, width / heads])?
            .transpose_axes(&[0, 2, 1, 3])?)
    }

    fn merge_heads(&self, x: Array) -> Result<Array, ModelError> {
        let (heads, l, dim) = (x.dim(1), x.dim(2), x.dim(3));
        Ok(x.transpose_axes(&[0, 2, 1, 3])?
            .reshape(&[1, l, heads * dim])?)
    }

    fn rope(&self, rope: &Rope, x: Array, offset: usize) -> Result<Array, ModelError> {
        let rotated = fast::rope(
            &x,
            rope.dims,
            rope.traditional,
            rope.base,
            rope.scale,
            offset as i32,
            rope.periods.as_ref(),
        )?;
        self.checked("RoPE's output", rotated)
    }

    fn attend(
        &self,
        cache: &mut dyn KvCache,
        queries: Array,
        keys: Array,
        values: Array,
        scale: f32,
    ) -> Result<Array, ModelError> {
        let out = cache.attend(&queries, &keys, &values, scale)?;
        self.checked("the KV cache's attention output", out)
    }

    fn array_of(&self, x: Array) -> Result<Array, ModelError> {
        Ok(x)
    }

    fn rows_of(&self, x: &Array) -> Result<Array, ModelError> {
        self.checked("the hidden states", x.clone())
    }

    fn check(&self, x: &Array, what: &dyn Fn() -> String) -> Result<(), ModelError> {
        Ok(gpu_rules::check(self.backend, what, x)?)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::backend::{Device, Precision};
    use crate::model::config::{RopeConfig, RopeScaling};
    use crate::model::layers::{Linear, Quantization};
    use crate::model::rope::{base_periods, llama3_periods};

    fn values(a: &Array) -> Vec<f32> {
        let a = a.as_dtype(Dtype::Float32).unwrap();
        a.eval().unwrap();
        a.as_slice::<f32>().to_vec()
    }

    const CPU: Backend = Backend::mlx(Device::Cpu, Precision::F32);

    #[test]
    fn quantized_linear_and_embedding_agree_with_their_dense_twins() {
        let ops = MlxOps::new(&CPU);
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
        let bias = Array::from_slice(&[1.0f32, 2., 3., 4., 5., 6.], &[out as i32]);
        let q = Linear {
            weight: quantized,
            bias: Some(bias.clone()),
        };
        let d = Linear {
            weight: Matrix::Dense(dense_equiv),
            bias: Some(bias),
        };
        // 2 rows go through quantized_matmul, 20 through dequantize + matmul on the CPU.
        for rows in [2usize, 20] {
            let x: Vec<f32> = (0..rows * inp).map(|i| (i as f32 * 0.37).cos()).collect();
            let x = Array::from_slice(&x, &[1, rows as i32, inp as i32]);
            let yq = ops.linear(&q.weight, q.bias.as_ref(), &x).unwrap();
            let yd = ops.linear(&d.weight, d.bias.as_ref(), &x).unwrap();
            assert_eq!(yq.shape(), &[1, rows as i32, out as i32]);
            for (a, b) in values(&yq).iter().zip(values(&yd)) {
                assert!((a - b).abs() < 1e-3, "{rows} rows: {a} vs {b}");
            }
        }
        let emb_q = Embedding { table: q.weight };
        let emb_d = Embedding { table: d.weight };
        let (eq, ed) = (
            ops.embed(&emb_q, Tokens::Host(&[5, 0, 2])).unwrap(),
            ops.embed(&emb_d, Tokens::Host(&[5, 0, 2])).unwrap(),
        );
        assert_eq!(eq.shape(), &[1, 3, inp as i32]);
        assert_eq!(values(&eq), values(&ed));
    }

    #[test]
    fn rms_norm_matches_formula() {
        let x = Array::from_slice(&[1.0f32, 2.0, 3.0, 4.0], &[1, 1, 4]);
        let norm = RmsNorm {
            weight: Array::from_slice(&[1.0f32, 0.5, 2.0, 1.0], &[4]),
            eps: 0.0,
        };
        let y = values(&MlxOps::new(&CPU).rms_norm(&norm, &x).unwrap());
        let rms = (30.0f32 / 4.0).sqrt();
        let want = [1.0 / rms, 1.0 / rms, 6.0 / rms, 4.0 / rms];
        for (a, b) in y.iter().zip(want) {
            assert!((a - b).abs() < 1e-5);
        }
    }

    /// Rotates one head by hand: pair `i` is (x[i], x[i + D/2]) in the Hugging Face layout.
    fn rotate_by_hand(x: &[f32], pos: usize, periods: &[f32]) -> Vec<f32> {
        let half = x.len() / 2;
        let mut out = x.to_vec();
        for i in 0..half {
            let angle = pos as f32 / periods[i];
            let (s, c) = angle.sin_cos();
            out[i] = x[i] * c - x[i + half] * s;
            out[i + half] = x[i] * s + x[i + half] * c;
        }
        out
    }

    #[test]
    fn plain_and_llama3_rope_match_hand_rotation() {
        let d = 8usize;
        let x: Vec<f32> = (0..d).map(|i| 0.3 * i as f32 - 1.0).collect();
        let array = Array::from_slice(&x, &[1, 1, 1, d as i32]);
        let configs = [
            RopeScaling::None,
            RopeScaling::Llama3 {
                factor: 8.0,
                low_freq_factor: 1.0,
                high_freq_factor: 4.0,
                original_max_position_embeddings: 64.0,
            },
        ];
        for scaling in configs {
            let config = RopeConfig {
                theta: 10_000.0,
                scaling: scaling.clone(),
                traditional: false,
            };
            let periods = match &scaling {
                RopeScaling::None => base_periods(d, 10_000.0),
                _ => llama3_periods(d, 10_000.0, 8.0, 1.0, 4.0, 64.0),
            };
            let rope = Rope::new(&config, d);
            for pos in [0usize, 3, 1000] {
                let got = values(&MlxOps::new(&CPU).rope(&rope, array.clone(), pos).unwrap());
                let want = rotate_by_hand(&x, pos, &periods);
                for (g, w) in got.iter().zip(&want) {
                    assert!(
                        (g - w).abs() < 1e-3,
                        "{scaling:?} pos {pos}: {got:?} vs {want:?}"
                    );
                }
            }
        }
    }

    #[test]
    fn the_guard_stops_a_float64_array_entering_the_model() {
        // A norm gain that reached the model as float64 (the loader converts every float
        // tensor to the compute dtype, so only a bug could do this): on a GPU stream MLX
        // would refuse it at evaluation; the guard names it before anything runs.
        let norm = RmsNorm {
            weight: Array::from_slice(&[1.0f32; 4], &[4])
                .as_dtype(Dtype::Float64)
                .unwrap(),
            eps: 1e-6,
        };
        let x = Array::from_slice(&[1.0f32, 2.0, 3.0, 4.0], &[1, 1, 4]);
        let err = MlxOps::new(&CPU)
            .rms_norm(&norm, &x)
            .unwrap_err()
            .to_string();
        assert!(err.contains("RMS norm") && err.contains("Float64"), "{err}");
    }
}
