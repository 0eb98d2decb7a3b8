//! GGUF files (llama.cpp's format): hyper-parameters from the metadata, tensors read and
//! converted by the project's own reader ([`crate::gguf::native`]), renamed to Hugging
//! Face names.
//!
//! Quantized tensors become MLX-quantized triplets (`weight`, `scales`, `biases`) in groups
//! of 32, at 4 or 8 bits; float tensors stay floats.

use std::collections::HashMap;
use std::fs::File;
use std::path::{Path, PathBuf};

use mlx_rs::Array;

use crate::gguf::native::{self, NativeTensor};

use super::{QuantScheme, Weights};
use crate::backend::Backend;
use crate::error::LoadError;
use crate::model::config::{Family, ModelConfig, RopeConfig, RopeScaling};

/// The group size of every quantized GGUF tensor as the engine holds it.
const GGUF_GROUP_SIZE: i32 = kivi_kernels::ggml::GROUP as i32;

/// An open GGUF file: metadata lookups and its tensors.
pub struct Gguf {
    path: PathBuf,
    /// The header as the pure-Rust reader validated it.
    header: crate::gguf::GgufHeader,
}

impl Gguf {
    /// Reads a `.gguf` file.
    pub fn open(path: &Path) -> Result<Self, LoadError> {
        if !path.is_file() {
            return Err(LoadError::Missing {
                what: "GGUF model file".into(),
                path: path.to_path_buf(),
                hint: "pass --model with an existing .gguf file or model folder".into(),
            });
        }
        let header = crate::gguf::validate_file(path)?;
        Ok(Self {
            path: path.to_path_buf(),
            header,
        })
    }

    /// The validated header: metadata and tensor descriptions, read in pure Rust.
    pub fn header(&self) -> &crate::gguf::GgufHeader {
        &self.header
    }

    /// The validated header's metadata, with errors naming the file.
    fn meta<T>(&self, got: Result<T, crate::gguf::GgufError>) -> Result<T, LoadError> {
        got.map_err(|source| crate::gguf::load_error(&self.path, source))
    }

    /// A string metadata value.
    pub fn string(&self, key: &str) -> Result<Option<String>, LoadError> {
        let value = self.meta(self.header.metadata.string(key))?;
        Ok(value.map(str::to_string))
    }

    /// A list-of-strings metadata value.
    pub fn strings(&self, key: &str) -> Result<Option<Vec<String>>, LoadError> {
        let value = self.meta(self.header.metadata.strings(key))?;
        Ok(value.map(<[String]>::to_vec))
    }

    /// A numeric (or boolean) metadata array, as `f64`s, from the header the project's own
    /// reader parsed (never through an MLX array: MLX refuses float64 on a GPU stream).
    pub fn numbers(&self, key: &str) -> Result<Option<Vec<f64>>, LoadError> {
        self.meta(self.header.metadata.numbers(key))
    }

    /// A scalar numeric metadata value.
    pub fn number(&self, key: &str) -> Result<Option<f64>, LoadError> {
        self.meta(self.header.metadata.number(key))
    }

    fn required(&self, key: &str) -> Result<f64, LoadError> {
        self.number(key)?.ok_or_else(|| {
            LoadError::Config(format!(
                "GGUF metadata lacks {key:?} ({})",
                self.path.display()
            ))
        })
    }

    /// The model's hyper-parameters.
    pub fn config(&self) -> Result<ModelConfig, LoadError> {
        let arch = self
            .string("general.architecture")?
            .ok_or_else(|| LoadError::Config("GGUF metadata lacks general.architecture".into()))?;
        let family = Family::from_name(&arch)?;
        let key = |name: &str| format!("{arch}.{name}");
        let hidden_size = self.required(&key("embedding_length"))? as usize;
        let num_heads = self.required(&key("attention.head_count"))? as usize;
        let num_kv_heads = self
            .number(&key("attention.head_count_kv"))?
            .map_or(num_heads, |v| v as usize);
        let head_dim = match self.number(&key("attention.key_length"))? {
            Some(v) => v as usize,
            None => crate::model::config::derived_head_dim(hidden_size, num_heads)?,
        };
        let vocab_size = match self.number(&key("vocab_size"))? {
            Some(v) => v as usize,
            None => self
                .strings("tokenizer.ggml.tokens")?
                .map(|t| t.len())
                .ok_or_else(|| LoadError::Config("GGUF metadata has no vocabulary size".into()))?,
        };
        let scaling = match self.string(&key("rope.scaling.type"))?.as_deref() {
            None | Some("none") => RopeScaling::None,
            Some("linear") => RopeScaling::Linear {
                factor: self.number(&key("rope.scaling.factor"))?.unwrap_or(1.0) as f32,
            },
            Some(other) => {
                return Err(LoadError::Config(format!(
                    "GGUF rope scaling {other:?} is not supported (supported: none, linear, llama3 rope_freqs)"
                )))
            }
        };
        let config = ModelConfig {
            family,
            hidden_size,
            num_layers: self.required(&key("block_count"))? as usize,
            num_heads,
            num_kv_heads,
            head_dim,
            intermediate_size: self.required(&key("feed_forward_length"))? as usize,
            vocab_size,
            rms_norm_eps: self
                .number(&key("attention.layer_norm_rms_epsilon"))?
                .unwrap_or(1e-6) as f32,
            rope: RopeConfig {
                theta: self.number(&key("rope.freq_base"))?.unwrap_or(10_000.0) as f32,
                scaling,
                // llama.cpp's converter permutes the Q/K rows of the `llama` architecture so
                // that rotated pairs are adjacent channels; other architectures keep the
                // Hugging Face layout.
                traditional: arch == "llama",
            },
            qkv_bias: family.qkv_bias(),
            qk_norm: family.qk_norm(),
            windows: Vec::new(),
            local_rope_theta: None,
            query_pre_attn_scalar: None,
            // llama.cpp's converter stores Gemma's gains as `1 + w` already.
            norm_offset: 0.0,
            context_length: self.number(&key("context_length"))?.unwrap_or(4096.0) as usize,
        };
        let config = if family == Family::Gemma3 {
            // llama.cpp's own constants for the architecture: the pattern and local base
            // are not in the file. Its query scale is `head_dim^-1/2`, which is
            // `query_pre_attn_scalar` in every published Gemma 3 but the 27B.
            let window = self
                .number(&key("attention.sliding_window"))?
                .ok_or_else(|| {
                    LoadError::Config("a gemma3 GGUF without attention.sliding_window".into())
                })? as usize;
            ModelConfig {
                windows: ModelConfig::periodic_windows(
                    config.num_layers,
                    window,
                    Family::GEMMA3_GLOBAL_EVERY,
                ),
                local_rope_theta: Some(10_000.0),
                ..config
            }
        } else {
            config
        };
        config.validate()?;
        Ok(config)
    }

    /// A short description of the weights' quantization: the file type from
    /// `general.file_type`, then how tensors the engine does not hold as stored are held
    /// ("Q4_K_M (Q5_0 as 8-bit, Q6_K re-quantized to 8-bit g32)").
    pub fn quantization_name(&self) -> Result<String, LoadError> {
        let name = match self.number("general.file_type")?.map(|v| v as u32) {
            Some(0) => "F32",
            Some(1) => "F16",
            Some(2) => "Q4_0",
            Some(3) => "Q4_1",
            Some(7) => "Q8_0",
            Some(8) => "Q5_0",
            Some(9) => "Q5_1",
            Some(10) => "Q2_K",
            Some(11) => "Q3_K_S",
            Some(12) => "Q3_K_M",
            Some(13) => "Q3_K_L",
            Some(14) => "Q4_K_S",
            Some(15) => "Q4_K_M",
            Some(16) => "Q5_K_S",
            Some(17) => "Q5_K_M",
            Some(18) => "Q6_K",
            Some(21) => "Q2_K_S",
            Some(32) => "BF16",
            Some(other) => return Ok(format!("GGUF file type {other}")),
            None => "unknown",
        };
        let mut changed: Vec<String> = Vec::new();
        for t in &self.header.tensors {
            let held = native::describe(t.ggml_type);
            if held != t.ggml_type.name && !changed.contains(&held) {
                changed.push(held);
            }
        }
        changed.sort();
        Ok(if changed.is_empty() {
            name.to_string()
        } else {
            format!("{name} ({})", changed.join(", "))
        })
    }

    /// All tensors, converted ([`native::convert`]) and renamed to Hugging Face names.
    /// Llama 3's `rope_freqs` moves into the configuration's RoPE scaling.
    pub fn weights(
        &self,
        config: &mut ModelConfig,
        backend: Backend,
    ) -> Result<Weights, LoadError> {
        let io = |source| LoadError::Io {
            path: self.path.clone(),
            source,
        };
        let mut file = File::open(&self.path).map_err(io)?;
        let threads = std::thread::available_parallelism().map_or(1, |n| n.get());
        let mut tensors = HashMap::with_capacity(self.header.tensors.len() * 3);
        let mut data = Vec::new();
        for info in &self.header.tensors {
            self.header
                .read_tensor(&mut file, info, &mut data)
                .map_err(io)?;
            let tensor = native::convert(info, &data, threads)
                .map_err(|e| crate::gguf::load_error(&self.path, e))?;
            if info.name == "rope_freqs.weight" {
                config.rope.scaling = RopeScaling::Factors(tensor.values());
                continue;
            }
            let Some(hf) = hf_name(&info.name, config.family) else {
                return Err(LoadError::Weights(format!(
                    "unexpected GGUF tensor {:?}: not part of a Llama-family model",
                    info.name
                )));
            };
            match tensor {
                NativeTensor::Dense { values, shape } => {
                    tensors.insert(hf, Array::from_slice(&values, &shape));
                }
                NativeTensor::Quantized {
                    packed,
                    scales,
                    biases,
                    shape,
                    bits,
                } => {
                    let prefix = hf.strip_suffix(".weight").unwrap_or(&hf);
                    let (words, groups) = native::quantized_shapes(&shape, bits);
                    tensors.insert(
                        format!("{prefix}.scales"),
                        Array::from_slice(&scales, &groups),
                    );
                    tensors.insert(
                        format!("{prefix}.biases"),
                        Array::from_slice(&biases, &groups),
                    );
                    tensors.insert(hf.clone(), Array::from_slice(&packed, &words));
                }
            }
        }
        if tensors.contains_key("model.layers.0.self_attn.q_proj.bias") {
            config.qkv_bias = true;
        }
        Ok(Weights::new(
            tensors,
            QuantScheme::Uniform {
                group_size: GGUF_GROUP_SIZE,
                bits: None,
                overrides: HashMap::new(),
            },
            backend,
        ))
    }

    /// The path the file was read from.
    pub fn path(&self) -> &Path {
        &self.path
    }
}

/// Maps llama.cpp's tensor names to Hugging Face's (`blk.3.attn_q.scales` to
/// `model.layers.3.self_attn.q_proj.scales`). Gemma's norms after attention and after the
/// MLP have names of their own; its `ffn_norm` is Hugging Face's `pre_feedforward_layernorm`.
fn hf_name(gguf: &str, family: Family) -> Option<String> {
    let (base, suffix) = gguf.rsplit_once('.')?;
    let module = match base {
        "token_embd" => "model.embed_tokens".to_string(),
        "output_norm" => "model.norm".to_string(),
        "output" => "lm_head".to_string(),
        _ => {
            let rest = base.strip_prefix("blk.")?;
            let (layer, part) = rest.split_once('.')?;
            let layer: usize = layer.parse().ok()?;
            let part = match part {
                "attn_norm" => "input_layernorm",
                "ffn_norm" if family.gemma_block() => "pre_feedforward_layernorm",
                "ffn_norm" => "post_attention_layernorm",
                "post_attention_norm" => "post_attention_layernorm",
                "post_ffw_norm" => "post_feedforward_layernorm",
                "attn_q" => "self_attn.q_proj",
                "attn_k" => "self_attn.k_proj",
                "attn_v" => "self_attn.v_proj",
                "attn_output" => "self_attn.o_proj",
                "attn_q_norm" => "self_attn.q_norm",
                "attn_k_norm" => "self_attn.k_norm",
                "ffn_gate" => "mlp.gate_proj",
                "ffn_up" => "mlp.up_proj",
                "ffn_down" => "mlp.down_proj",
                _ => return None,
            };
            format!("model.layers.{layer}.{part}")
        }
    };
    Some(format!("{module}.{suffix}"))
}

/// Converts a metadata array to `u32` token ids.
pub(crate) fn ids(values: &[f64]) -> Vec<u32> {
    values.iter().map(|&v| v as u32).collect()
}

#[cfg(test)]
mod tests {
    use super::{hf_name as name_in, Family};

    fn hf_name(gguf: &str) -> Option<String> {
        name_in(gguf, Family::Llama)
    }

    #[test]
    fn gguf_names_map_to_hugging_face_names() {
        assert_eq!(
            hf_name("blk.12.attn_q.scales").as_deref(),
            Some("model.layers.12.self_attn.q_proj.scales")
        );
        assert_eq!(
            hf_name("blk.0.ffn_down.weight").as_deref(),
            Some("model.layers.0.mlp.down_proj.weight")
        );
        assert_eq!(
            hf_name("token_embd.biases").as_deref(),
            Some("model.embed_tokens.biases")
        );
        assert_eq!(hf_name("output.weight").as_deref(), Some("lm_head.weight"));
        assert_eq!(
            hf_name("blk.0.attn_q.bias").as_deref(),
            Some("model.layers.0.self_attn.q_proj.bias")
        );
        assert_eq!(hf_name("blk.0.ssm_conv.weight"), None);
        // Llama's only norm before the MLP, Gemma's first of two.
        assert_eq!(
            hf_name("blk.1.ffn_norm.weight").as_deref(),
            Some("model.layers.1.post_attention_layernorm.weight")
        );
        assert_eq!(
            name_in("blk.1.ffn_norm.weight", Family::Gemma3).as_deref(),
            Some("model.layers.1.pre_feedforward_layernorm.weight")
        );
        assert_eq!(
            name_in("blk.1.post_attention_norm.weight", Family::Gemma3).as_deref(),
            Some("model.layers.1.post_attention_layernorm.weight")
        );
    }
}
