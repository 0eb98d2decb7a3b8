//! A model's hyper-parameters, read from Hugging Face `config.json` or GGUF metadata.

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::error::LoadError;

/// The model families the engine runs. All are Llama-architecture decoders; what sets
/// them apart is a handful of configuration flags (see [`ModelConfig`]) and, for Gemma 3,
/// the block's extra norms, its GELU and its sliding-window layers.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Family {
    /// Llama 2/3.x, SmolLM2 and other `LlamaForCausalLM` models.
    Llama,
    /// Mistral 7B and relatives: Llama with a sliding-window hint (ignored: the engine's
    /// contexts stay within the window the published checkpoints were trained with).
    Mistral,
    /// Qwen2/2.5: Llama with biases on the query, key and value projections.
    Qwen2,
    /// Qwen3 (dense): Llama with an RMS norm on each query and key head before RoPE, and
    /// no projection biases.
    Qwen3,
    /// Gemma 3 (text): Qwen3's head norms, norms after attention and after the MLP too, a
    /// GELU-tanh gated MLP, embeddings scaled by `sqrt(hidden)`, and five layers of six
    /// attending over a sliding window with their own RoPE base.
    Gemma3,
}

/// The families the engine runs, as messages that refuse another name them.
pub const SUPPORTED_FAMILIES: &str =
    "Llama (Llama 3.x, SmolLM2), Mistral, Qwen2/2.5, Qwen3 and Gemma 3";

impl Family {
    /// The family for a `model_type` (config.json) or `general.architecture` (GGUF).
    pub fn from_name(name: &str) -> Result<Self, LoadError> {
        match name {
            "llama" => Ok(Family::Llama),
            "mistral" => Ok(Family::Mistral),
            "qwen2" => Ok(Family::Qwen2),
            "qwen3" => Ok(Family::Qwen3),
            "gemma3" | "gemma3_text" => Ok(Family::Gemma3),
            other => Err(LoadError::UnsupportedArchitecture(other.to_string())),
        }
    }

    /// Whether the family puts biases on the q/k/v projections.
    pub fn qkv_bias(self) -> bool {
        matches!(self, Family::Qwen2)
    }

    /// Whether each query and key head is RMS-normalized before RoPE.
    pub fn qk_norm(self) -> bool {
        matches!(self, Family::Qwen3 | Family::Gemma3)
    }

    /// Gemma's block: norms after attention and after the MLP (before each residual sum),
    /// a GELU-tanh gate, and embeddings scaled by `sqrt(hidden)`.
    pub fn gemma_block(self) -> bool {
        matches!(self, Family::Gemma3)
    }

    /// Gemma 3's default layer pattern: every sixth layer global, the rest windowed.
    pub const GEMMA3_GLOBAL_EVERY: usize = 6;
}

/// How rotary position embeddings turn positions into angles.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub enum RopeScaling {
    /// Plain RoPE.
    None,
    /// Positions divided by `factor`.
    Linear {
        /// The divisor.
        factor: f32,
    },
    /// Llama 3.1's frequency-dependent scaling.
    Llama3 {
        /// Scale of the low frequencies.
        factor: f32,
        /// Wavelengths above `original / low_freq_factor` are fully scaled.
        low_freq_factor: f32,
        /// Wavelengths below `original / high_freq_factor` are not scaled.
        high_freq_factor: f32,
        /// The context the model was pre-trained with.
        original_max_position_embeddings: f32,
    },
    /// Per-frequency divisors as llama.cpp stores them (`rope_freqs.weight` in GGUF).
    Factors(Vec<f32>),
}

/// Rotary position embedding settings.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RopeConfig {
    /// Base of the geometric frequency progression.
    pub theta: f32,
    /// Scaling of positions or frequencies.
    pub scaling: RopeScaling,
    /// True when rotated pairs are adjacent channels (llama.cpp's layout of Llama Q/K rows
    /// in GGUF), false for the Hugging Face layout (first half with second half).
    pub traditional: bool,
}

/// A decoder's hyper-parameters, whatever file they came from.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ModelConfig {
    /// Model family.
    pub family: Family,
    /// Width of the residual stream.
    pub hidden_size: usize,
    /// Number of transformer blocks.
    pub num_layers: usize,
    /// Query heads.
    pub num_heads: usize,
    /// Key/value heads (fewer than `num_heads` for grouped-query attention).
    pub num_kv_heads: usize,
    /// Channels per head.
    pub head_dim: usize,
    /// Width of the SwiGLU feed-forward layer.
    pub intermediate_size: usize,
    /// Vocabulary size.
    pub vocab_size: usize,
    /// Epsilon of the RMS norms.
    pub rms_norm_eps: f32,
    /// Rotary embeddings.
    pub rope: RopeConfig,
    /// Whether q/k/v projections have biases.
    pub qkv_bias: bool,
    /// Whether query and key heads are RMS-normalized before RoPE (`q_norm`, `k_norm`).
    #[serde(default)]
    pub qk_norm: bool,
    /// Each layer's sliding window: `Some(W)` where a position attends to the last `W`
    /// positions (itself included) only, `None` where it attends to all. Empty: every layer
    /// global.
    #[serde(default)]
    pub windows: Vec<Option<usize>>,
    /// The RoPE base of the window layers, where it differs from [`RopeConfig::theta`]
    /// (Gemma 3: 10,000 locally, 1,000,000 globally); they are never scaled.
    #[serde(default)]
    pub local_rope_theta: Option<f32>,
    /// Attention scores are scaled by this to the power -1/2 (Gemma's
    /// `query_pre_attn_scalar`); `head_dim` where `None`.
    #[serde(default)]
    pub query_pre_attn_scalar: Option<f32>,
    /// Added to every RMS norm's gain at load: Gemma's checkpoints store `w` for a gain of
    /// `1 + w`; llama.cpp's converter adds the 1 in GGUF files.
    #[serde(default)]
    pub norm_offset: f32,
    /// Longest context the model was trained for.
    pub context_length: usize,
}

impl ModelConfig {
    /// Layer `i`'s sliding window, if it has one.
    pub fn layer_window(&self, i: usize) -> Option<usize> {
        self.windows.get(i).copied().flatten()
    }

    /// The attention scale of queries: `query_pre_attn_scalar^-1/2` or `head_dim^-1/2`.
    pub fn attention_scale(&self) -> f32 {
        self.query_pre_attn_scalar
            .unwrap_or(self.head_dim as f32)
            .powf(-0.5)
    }

    /// Per-layer windows for a model with `global_every`-periodic global layers (the last of
    /// each period global) and the rest over `window` tokens.
    pub fn periodic_windows(
        layers: usize,
        window: usize,
        global_every: usize,
    ) -> Vec<Option<usize>> {
        (0..layers)
            .map(|i| (global_every == 0 || (i + 1) % global_every != 0).then_some(window))
            .collect()
    }

    /// Parses a Hugging Face `config.json` (as published for Llama, Mistral, Qwen2 and Qwen3).
    pub fn from_hf_json(json: &Value) -> Result<Self, LoadError> {
        let model_type = json
            .get("model_type")
            .and_then(Value::as_str)
            .ok_or_else(|| LoadError::Config("config.json has no model_type".into()))?;
        // Gemma 3 4B and larger wrap the text model in an image-and-text one.
        if json.get("text_config").is_some() {
            return Err(LoadError::UnsupportedArchitecture(format!(
                "{model_type} (image and text)"
            )));
        }
        let family = Family::from_name(model_type)?;
        let int = |key: &str| -> Result<usize, LoadError> {
            json.get(key)
                .and_then(Value::as_u64)
                .map(|v| v as usize)
                .ok_or_else(|| LoadError::Config(format!("config.json lacks integer {key:?}")))
        };
        let hidden_size = int("hidden_size")?;
        let num_heads = int("num_attention_heads")?;
        let num_kv_heads = int("num_key_value_heads").unwrap_or(num_heads);
        let head_dim = match json.get("head_dim").and_then(Value::as_u64) {
            Some(d) => d as usize,
            None => derived_head_dim(hidden_size, num_heads)?,
        };
        let float = |key: &str, default: f32| {
            json.get(key)
                .and_then(Value::as_f64)
                .map_or(default, |v| v as f32)
        };
        let scaling = match json.get("rope_scaling") {
            None | Some(Value::Null) => RopeScaling::None,
            Some(s) => rope_scaling_from_json(s)?,
        };
        let config = ModelConfig {
            family,
            hidden_size,
            num_layers: int("num_hidden_layers")?,
            num_heads,
            num_kv_heads,
            head_dim,
            intermediate_size: int("intermediate_size")?,
            vocab_size: int("vocab_size")?,
            rms_norm_eps: float("rms_norm_eps", 1e-6),
            rope: RopeConfig {
                theta: float("rope_theta", 10_000.0),
                scaling,
                traditional: json
                    .get("rope_traditional")
                    .and_then(Value::as_bool)
                    .unwrap_or(false),
            },
            qkv_bias: family.qkv_bias()
                || json
                    .get("attention_bias")
                    .and_then(Value::as_bool)
                    .unwrap_or(false),
            qk_norm: family.qk_norm(),
            windows: Vec::new(),
            local_rope_theta: None,
            query_pre_attn_scalar: None,
            norm_offset: 0.0,
            context_length: int("max_position_embeddings").unwrap_or(4096),
        };
        let config = if family == Family::Gemma3 {
            gemma3_from_json(config, json)?
        } else {
            config
        };
        config.validate()?;
        Ok(config)
    }

    /// Checks the invariants the model code relies on.
    pub fn validate(&self) -> Result<(), LoadError> {
        let bad = |msg: String| Err(LoadError::Config(msg));
        if self.num_layers == 0
            || self.hidden_size == 0
            || self.head_dim == 0
            || self.num_heads == 0
            || self.intermediate_size == 0
            || self.vocab_size == 0
            || self.context_length == 0
        {
            return bad(format!("empty model: {self:?}"));
        }
        // Sizes become MLX (i32) shapes; a damaged file must not make them wrap.
        let sizes = [
            ("hidden size", self.hidden_size),
            ("head count", self.num_heads * self.head_dim),
            ("feed-forward size", self.intermediate_size),
            ("vocabulary size", self.vocab_size),
            ("layer count", self.num_layers.saturating_mul(1 << 16)),
        ];
        if let Some((what, _)) = sizes.iter().find(|(_, v)| *v > i32::MAX as usize) {
            return bad(format!("implausible {what}: {self:?}"));
        }
        if self.num_kv_heads == 0 || !self.num_heads.is_multiple_of(self.num_kv_heads) {
            return bad(format!(
                "{} query heads cannot share {} key/value heads",
                self.num_heads, self.num_kv_heads
            ));
        }
        if !self.windows.is_empty() && self.windows.len() != self.num_layers {
            return bad(format!(
                "{} layer windows for {} layers",
                self.windows.len(),
                self.num_layers
            ));
        }
        if self.windows.contains(&Some(0)) {
            return bad("a sliding window of 0 tokens".into());
        }
        if !self.head_dim.is_multiple_of(2) {
            return bad(format!(
                "head_dim {} is odd; RoPE needs pairs",
                self.head_dim
            ));
        }
        Ok(())
    }
}

/// The head size when the configuration gives none: the hidden size split evenly over the
/// query heads.
pub fn derived_head_dim(hidden_size: usize, num_heads: usize) -> Result<usize, LoadError> {
    if num_heads == 0 || !hidden_size.is_multiple_of(num_heads) {
        return Err(LoadError::Config(format!(
            "hidden size {hidden_size} is not divisible by the {num_heads} attention heads, and \
             no head size is given"
        )));
    }
    Ok(hidden_size / num_heads)
}

/// Gemma 3's settings beyond Llama's: the layer pattern (`layer_types`, or
/// `sliding_window_pattern`), the local RoPE base, the query scale, and gains stored as
/// `w` for `1 + w`.
fn gemma3_from_json(mut config: ModelConfig, json: &Value) -> Result<ModelConfig, LoadError> {
    let window = json
        .get("sliding_window")
        .and_then(Value::as_u64)
        .unwrap_or(512) as usize;
    config.windows = match json.get("layer_types").and_then(Value::as_array) {
        Some(types) => types
            .iter()
            .map(|t| match t.as_str() {
                Some("sliding_attention") => Ok(Some(window)),
                Some("full_attention") => Ok(None),
                other => Err(LoadError::Config(format!(
                    "layer type {other:?} is not supported (supported: sliding_attention, \
                     full_attention)"
                ))),
            })
            .collect::<Result<_, _>>()?,
        None => ModelConfig::periodic_windows(
            config.num_layers,
            window,
            json.get("sliding_window_pattern")
                .and_then(Value::as_u64)
                .map_or(Family::GEMMA3_GLOBAL_EVERY, |v| v as usize),
        ),
    };
    let float = |key: &str| json.get(key).and_then(Value::as_f64).map(|v| v as f32);
    config.local_rope_theta = Some(float("rope_local_base_freq").unwrap_or(10_000.0));
    config.query_pre_attn_scalar = Some(float("query_pre_attn_scalar").unwrap_or(256.0));
    config.norm_offset = 1.0;
    if json.get("rope_theta").is_none() {
        config.rope.theta = 1_000_000.0;
    }
    Ok(config)
}

fn rope_scaling_from_json(s: &Value) -> Result<RopeScaling, LoadError> {
    let kind = s
        .get("rope_type")
        .or_else(|| s.get("type"))
        .and_then(Value::as_str)
        .unwrap_or("default");
    let num = |key: &str, default: f32| {
        s.get(key)
            .and_then(Value::as_f64)
            .map_or(default, |v| v as f32)
    };
    match kind {
        "default" => Ok(RopeScaling::None),
        "linear" => Ok(RopeScaling::Linear {
            factor: num("factor", 1.0),
        }),
        "llama3" => Ok(RopeScaling::Llama3 {
            factor: num("factor", 1.0),
            low_freq_factor: num("low_freq_factor", 1.0),
            high_freq_factor: num("high_freq_factor", 4.0),
            original_max_position_embeddings: num("original_max_position_embeddings", 8192.0),
        }),
        other => Err(LoadError::Config(format!(
            "rope_scaling type {other:?} is not supported (supported: default, linear, llama3)"
        ))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn llama3_config_with_rope_scaling() {
        let json: Value = serde_json::from_str(
            r#"{"model_type":"llama","hidden_size":2048,"num_hidden_layers":16,
            "num_attention_heads":32,"num_key_value_heads":8,"intermediate_size":8192,
            "vocab_size":128256,"rms_norm_eps":1e-5,"rope_theta":500000.0,
            "max_position_embeddings":131072,"rope_scaling":{"factor":32.0,
            "high_freq_factor":4.0,"low_freq_factor":1.0,
            "original_max_position_embeddings":8192,"rope_type":"llama3"}}"#,
        )
        .unwrap();
        let c = ModelConfig::from_hf_json(&json).unwrap();
        assert_eq!(c.family, Family::Llama);
        assert_eq!(c.head_dim, 64);
        assert!(!c.qkv_bias);
        assert_eq!(c.rope.theta, 500000.0);
        assert!(matches!(c.rope.scaling, RopeScaling::Llama3 { factor, .. } if factor == 32.0));
    }

    #[test]
    fn qwen2_has_qkv_bias_and_unknown_types_are_rejected() {
        let mut json: Value = serde_json::from_str(
            r#"{"model_type":"qwen2","hidden_size":64,"num_hidden_layers":2,
            "num_attention_heads":4,"num_key_value_heads":2,"intermediate_size":128,
            "vocab_size":300}"#,
        )
        .unwrap();
        assert!(ModelConfig::from_hf_json(&json).unwrap().qkv_bias);
        json["model_type"] = "gemma".into();
        let err = ModelConfig::from_hf_json(&json).unwrap_err();
        assert!(matches!(err, LoadError::UnsupportedArchitecture(ref a) if a == "gemma"));
        assert!(
            err.to_string().contains(SUPPORTED_FAMILIES),
            "the refusal names the supported families: {err}"
        );
        json["model_type"] = "qwen3".into();
        let qwen3 = ModelConfig::from_hf_json(&json).unwrap();
        assert!(qwen3.qk_norm && !qwen3.qkv_bias);
        // Gemma 3 text: five window layers of six unless `layer_types` says otherwise.
        json["model_type"] = "gemma3_text".into();
        json["num_hidden_layers"] = 6.into();
        let gemma = ModelConfig::from_hf_json(&json).unwrap();
        assert_eq!(
            gemma.windows,
            [Some(512); 5].into_iter().chain([None]).collect::<Vec<_>>()
        );
        assert_eq!(
            (gemma.norm_offset, gemma.attention_scale()),
            (1.0, 256f32.powf(-0.5))
        );
        json["layer_types"] = serde_json::json!([
            "full_attention",
            "sliding_attention",
            "full_attention",
            "sliding_attention",
            "full_attention",
            "sliding_attention"
        ]);
        json["sliding_window"] = 1024.into();
        let gemma = ModelConfig::from_hf_json(&json).unwrap();
        assert_eq!(
            gemma.windows,
            [None, Some(1024), None, Some(1024), None, Some(1024)]
        );
        json["text_config"] = serde_json::json!({});
        json["model_type"] = "gemma3".into();
        let err = ModelConfig::from_hf_json(&json).unwrap_err().to_string();
        assert!(err.contains("gemma3 (image and text)"), "{err}");
        json["model_type"] = "llama".into();
        json["num_key_value_heads"] = 3.into();
        assert!(ModelConfig::from_hf_json(&json).is_err());
    }
}
