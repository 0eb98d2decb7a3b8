//! Model weights from GGUF files or Hugging Face safetensors folders, turned into the
//! model's building blocks (dense or MLX-quantized linear maps, embeddings, norms).
//!
//! Tensors are keyed by their Hugging Face names (`model.layers.3.self_attn.q_proj.weight`)
//! whatever the file format; a quantized matrix adds `.scales` and `.biases` beside its
//! `.weight`, MLX's layout, which is also what MLX's GGUF reader produces for Q4_0, Q4_1
//! and Q8_0 tensors.

pub mod gguf;
pub mod safetensors;

use std::collections::HashMap;

use mlx_rs::{Array, Dtype, Stream};

use crate::backend::Backend;
use crate::error::LoadError;
use crate::gpu_rules;
use crate::model::layers::{Embedding, Linear, Matrix, Quantization, RmsNorm};

/// Bit widths MLX's quantized matmul supports.
const SUPPORTED_BITS: [i32; 6] = [2, 3, 4, 5, 6, 8];

/// How a checkpoint's quantized tensors are grouped.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum QuantScheme {
    /// No quantized tensors.
    None,
    /// Groups of this many inputs everywhere (GGUF blocks are 32; MLX checkpoints say).
    Uniform {
        /// Inputs per group.
        group_size: i32,
        /// Declared bits, checked against the tensor shapes (GGUF mixes widths: None).
        bits: Option<i32>,
        /// Per-module overrides from an MLX config (`"model.embed_tokens": {...}`).
        overrides: HashMap<String, Quantization>,
    },
}

/// A checkpoint's tensors, consumed as the model takes them, for one backend: floats are
/// handed out in its compute dtype.
pub struct Weights {
    tensors: HashMap<String, Array>,
    scheme: QuantScheme,
    backend: Backend,
}

impl Weights {
    /// Wraps tensors keyed by Hugging Face names, for a model that will run on `backend`.
    pub fn new(tensors: HashMap<String, Array>, scheme: QuantScheme, backend: Backend) -> Self {
        Self {
            tensors,
            scheme,
            backend,
        }
    }

    /// The backend the tensors are prepared for.
    pub fn backend(&self) -> Backend {
        self.backend
    }

    /// Whether a tensor is present.
    pub fn contains(&self, name: &str) -> bool {
        self.tensors.contains_key(name)
    }

    /// A tensor's shape, if present.
    pub fn shape(&self, name: &str) -> Option<&[i32]> {
        self.tensors.get(name).map(|a| a.shape())
    }

    /// Removes a tensor, converted to the compute dtype when it holds floats.
    ///
    /// The tensor is evaluated here, so that reading and converting the file happens while
    /// loading and not in the first request (where it would count as time to first token).
    pub fn take(&mut self, name: &str) -> Result<Array, LoadError> {
        let array = self
            .tensors
            .remove(name)
            .ok_or_else(|| LoadError::Weights(format!("tensor {name:?} is missing")))?;
        let array = to_compute(array, self.backend.compute_dtype())?;
        array.eval()?;
        gpu_rules::check(&self.backend, || format!("the weight {name:?}"), &array)?;
        Ok(array)
    }

    fn take_opt(&mut self, name: &str) -> Result<Option<Array>, LoadError> {
        if self.contains(name) {
            self.take(name).map(Some)
        } else {
            Ok(None)
        }
    }

    /// The matrix `{prefix}.weight`, quantized when `{prefix}.scales` is present.
    pub fn matrix(&mut self, prefix: &str) -> Result<Matrix, LoadError> {
        let Some(scales) = self.take_opt(&format!("{prefix}.scales"))? else {
            return Ok(Matrix::Dense(self.take(&format!("{prefix}.weight"))?));
        };
        let biases = self.take_opt(&format!("{prefix}.biases"))?.ok_or_else(|| {
            LoadError::UnsupportedQuantization(format!(
                "{prefix} has scales but no biases; only affine (scale + bias) quantization is supported"
            ))
        })?;
        let weight = self
            .tensors
            .remove(&format!("{prefix}.weight"))
            .ok_or_else(|| LoadError::Weights(format!("tensor {prefix}.weight is missing")))?;
        weight.eval()?;
        gpu_rules::check(
            &self.backend,
            || format!("the weight {prefix}.weight"),
            &weight,
        )?;
        if weight.dtype() != Dtype::Uint32 {
            return Err(LoadError::UnsupportedQuantization(format!(
                "{prefix}.weight is {:?}, expected packed uint32",
                weight.dtype()
            )));
        }
        let quant = self.quantization_of(prefix, &weight, &scales)?;
        Ok(Matrix::Quantized {
            weight,
            scales,
            biases,
            quant,
        })
    }

    /// Infers the bit width from the shapes: `in = scales_cols * group`, and the packed
    /// row holds `in * bits / 32` words.
    fn quantization_of(
        &self,
        prefix: &str,
        weight: &Array,
        scales: &Array,
    ) -> Result<Quantization, LoadError> {
        let QuantScheme::Uniform {
            group_size,
            bits: declared,
            overrides,
        } = &self.scheme
        else {
            return Err(LoadError::UnsupportedQuantization(format!(
                "{prefix} is quantized but the checkpoint declares no quantization"
            )));
        };
        let (group_size, declared) = match overrides.get(prefix) {
            Some(q) => (q.group_size, Some(q.bits)),
            None => (*group_size, *declared),
        };
        let packed_cols = *weight.shape().last().unwrap_or(&0);
        let inputs = *scales.shape().last().unwrap_or(&0) * group_size;
        let bits = if inputs > 0 {
            packed_cols * 32 / inputs
        } else {
            0
        };
        if !SUPPORTED_BITS.contains(&bits) || packed_cols * 32 != bits * inputs {
            return Err(LoadError::UnsupportedQuantization(format!(
                "{prefix}: packed width {packed_cols} does not fit {inputs} inputs at a supported bit width"
            )));
        }
        if let Some(d) = declared.filter(|&d| d != bits) {
            return Err(LoadError::UnsupportedQuantization(format!(
                "{prefix}: config declares {d} bits but the tensors hold {bits}"
            )));
        }
        Ok(Quantization { group_size, bits })
    }

    /// The linear map `{prefix}`, with its bias when the checkpoint has one (`required`
    /// makes a missing bias an error: Qwen2's q/k/v projections must have theirs).
    pub fn linear(&mut self, prefix: &str, required_bias: bool) -> Result<Linear, LoadError> {
        let bias_name = format!("{prefix}.bias");
        let bias = if required_bias || self.contains(&bias_name) {
            Some(self.take(&bias_name)?)
        } else {
            None
        };
        Ok(Linear {
            weight: self.matrix(prefix)?,
            bias,
        })
    }

    /// The embedding table `{prefix}`.
    pub fn embedding(&mut self, prefix: &str) -> Result<Embedding, LoadError> {
        Ok(Embedding {
            table: self.matrix(prefix)?,
        })
    }

    /// The RMS norm `{prefix}`.
    pub fn rms_norm(&mut self, prefix: &str, eps: f32) -> Result<RmsNorm, LoadError> {
        Ok(RmsNorm {
            weight: self.take(&format!("{prefix}.weight"))?,
            eps,
        })
    }
}

/// Floats go to the compute dtype (float32 on the host backend, where half-precision
/// scales would make quantized products 30-50x slower); packed integers stay as they are.
///
/// A float64 tensor is converted on the CPU stream: a GPU stream refuses float64 even as
/// the source of a conversion.
fn to_compute(array: Array, compute: Dtype) -> Result<Array, LoadError> {
    Ok(match array.dtype() {
        Dtype::Float64 => mlx_rs::with_stream(&Stream::cpu(), || array.as_dtype(compute))?,
        Dtype::Float16 | Dtype::Bfloat16 | Dtype::Float32 if array.dtype() != compute => {
            array.as_dtype(compute)?
        }
        _ => array,
    })
}

/// The files of `dir` whose extension is `extension`, sorted.
pub(crate) fn files_with_extension(
    dir: &std::path::Path,
    extension: &str,
) -> Result<Vec<std::path::PathBuf>, LoadError> {
    let entries = std::fs::read_dir(dir).map_err(|source| LoadError::Io {
        path: dir.to_path_buf(),
        source,
    })?;
    let mut files: Vec<_> = entries
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|e| e == extension))
        .collect();
    files.sort();
    Ok(files)
}
