//! The Llama-architecture decoder: Llama 2/3.x, SmolLM2, Mistral and Qwen2/2.5.
//!
//! These families share one network; what differs is configuration (see
//! [`Family`](super::config::Family)): Qwen2 adds biases to the q/k/v projections, Llama 3
//! scales RoPE frequencies, GGUF files keep Llama's Q/K rows in the interleaved RoPE
//! layout. Per block:
//!
//! ```text
//! h   = x + o_proj(attention(rope(q_proj(norm1(x))), rope(k_proj(..)), v_proj(..)))
//! out = h + down_proj(silu(gate_proj(norm2(h))) * up_proj(norm2(h)))
//! ```
//!
//! Attention goes through the layer's [`KvCache`], which appends the new keys and values
//! and attends over everything it holds; grouped-query heads are the cache's business.

use mlx_rs::{nn::silu, ops::indexing::IndexOp, Array};

use super::config::ModelConfig;
use super::layers::{Embedding, Linear, RmsNorm};
use super::rope::Rope;
use crate::cache::KvCache;
use crate::error::{LoadError, ModelError};
use crate::weights::Weights;

type MlxResult<T> = Result<T, mlx_rs::error::Exception>;

/// Multi-head attention with grouped key/value heads.
struct Attention {
    q_proj: Linear,
    k_proj: Linear,
    v_proj: Linear,
    o_proj: Linear,
    n_heads: i32,
    n_kv_heads: i32,
    head_dim: i32,
    scale: f32,
}

impl Attention {
    fn load(w: &mut Weights, prefix: &str, c: &ModelConfig) -> Result<Self, LoadError> {
        Ok(Self {
            q_proj: w.linear(&format!("{prefix}.q_proj"), c.qkv_bias)?,
            k_proj: w.linear(&format!("{prefix}.k_proj"), c.qkv_bias)?,
            v_proj: w.linear(&format!("{prefix}.v_proj"), c.qkv_bias)?,
            o_proj: w.linear(&format!("{prefix}.o_proj"), false)?,
            n_heads: c.num_heads as i32,
            n_kv_heads: c.num_kv_heads as i32,
            head_dim: c.head_dim as i32,
            scale: (c.head_dim as f32).powf(-0.5),
        })
    }

    /// `x` is `[B, L, hidden]`; the chunk's first position is the cache's length.
    fn forward(
        &self,
        x: &Array,
        rope: &Rope,
        cache: &mut dyn KvCache,
    ) -> Result<Array, ModelError> {
        let (b, l) = (x.dim(0), x.dim(1));
        // [B, L, heads * D] -> [B, heads, L, D]
        let heads = |y: Array, n: i32| -> MlxResult<Array> {
            y.reshape(&[b, l, n, self.head_dim])?
                .transpose_axes(&[0, 2, 1, 3])
        };
        let offset = cache.len();
        let q = rope.apply(&heads(self.q_proj.forward(x)?, self.n_heads)?, offset)?;
        let k = rope.apply(&heads(self.k_proj.forward(x)?, self.n_kv_heads)?, offset)?;
        let v = heads(self.v_proj.forward(x)?, self.n_kv_heads)?;
        let out = cache.attend(&q, &k, &v, self.scale)?;
        let out =
            out.transpose_axes(&[0, 2, 1, 3])?
                .reshape(&[b, l, self.n_heads * self.head_dim])?;
        Ok(self.o_proj.forward(&out)?)
    }
}

/// The SwiGLU feed-forward layer.
struct Mlp {
    gate_proj: Linear,
    up_proj: Linear,
    down_proj: Linear,
}

impl Mlp {
    fn load(w: &mut Weights, prefix: &str) -> Result<Self, LoadError> {
        Ok(Self {
            gate_proj: w.linear(&format!("{prefix}.gate_proj"), false)?,
            up_proj: w.linear(&format!("{prefix}.up_proj"), false)?,
            down_proj: w.linear(&format!("{prefix}.down_proj"), false)?,
        })
    }

    fn forward(&self, x: &Array) -> MlxResult<Array> {
        let gate = silu(self.gate_proj.forward(x)?)?;
        self.down_proj
            .forward(&gate.multiply(self.up_proj.forward(x)?)?)
    }
}

/// One pre-norm transformer block.
struct Block {
    input_layernorm: RmsNorm,
    self_attn: Attention,
    post_attention_layernorm: RmsNorm,
    mlp: Mlp,
}

impl Block {
    fn forward(
        &self,
        x: &Array,
        rope: &Rope,
        cache: &mut dyn KvCache,
    ) -> Result<Array, ModelError> {
        let h = x.add(
            self.self_attn
                .forward(&self.input_layernorm.forward(x)?, rope, cache)?,
        )?;
        let out = h.add(
            self.mlp
                .forward(&self.post_attention_layernorm.forward(&h)?)?,
        )?;
        Ok(out)
    }
}

/// A Llama-architecture causal language model.
pub struct Llama {
    config: ModelConfig,
    embed_tokens: Embedding,
    layers: Vec<Block>,
    norm: RmsNorm,
    /// `None` when the output projection is the embedding table (tied embeddings).
    lm_head: Option<Linear>,
    rope: Rope,
}

impl Llama {
    /// Builds the model from a checkpoint's tensors (Hugging Face names).
    pub fn load(config: ModelConfig, w: &mut Weights) -> Result<Self, LoadError> {
        config.validate()?;
        let layers = (0..config.num_layers)
            .map(|i| {
                let p = format!("model.layers.{i}");
                Ok(Block {
                    input_layernorm: w
                        .rms_norm(&format!("{p}.input_layernorm"), config.rms_norm_eps)?,
                    self_attn: Attention::load(w, &format!("{p}.self_attn"), &config)?,
                    post_attention_layernorm: w.rms_norm(
                        &format!("{p}.post_attention_layernorm"),
                        config.rms_norm_eps,
                    )?,
                    mlp: Mlp::load(w, &format!("{p}.mlp"))?,
                })
            })
            .collect::<Result<Vec<_>, LoadError>>()?;
        // Tied embeddings are decided by the checkpoint itself: configs disagree on the
        // default of `tie_word_embeddings`, tensors do not.
        let lm_head = if w.contains("lm_head.weight") {
            Some(w.linear("lm_head", false)?)
        } else {
            None
        };
        Ok(Self {
            rope: Rope::new(&config.rope, config.head_dim),
            embed_tokens: w.embedding("model.embed_tokens")?,
            norm: w.rms_norm("model.norm", config.rms_norm_eps)?,
            layers,
            lm_head,
            config,
        })
    }

    /// The model's hyper-parameters.
    pub fn config(&self) -> &ModelConfig {
        &self.config
    }

    /// Runs `tokens` (the positions after what the caches hold) through the network and
    /// returns the final hidden states `[1, L, hidden]`. One cache per layer.
    pub fn forward(
        &self,
        tokens: &[u32],
        caches: &mut [Box<dyn KvCache>],
    ) -> Result<Array, ModelError> {
        if caches.len() != self.layers.len() {
            return Err(ModelError::Input(format!(
                "{} caches for {} layers",
                caches.len(),
                self.layers.len()
            )));
        }
        if tokens.is_empty() {
            return Err(ModelError::Input("no tokens to run".into()));
        }
        let ids = Array::from_slice(tokens, &[1, tokens.len() as i32]);
        let mut h = self.embed_tokens.forward(&ids)?;
        for (layer, cache) in self.layers.iter().zip(caches.iter_mut()) {
            h = layer.forward(&h, &self.rope, cache.as_mut())?;
        }
        Ok(self.norm.forward(&h)?)
    }

    /// Logits `[1, L, vocab]` for hidden states `[1, L, hidden]`.
    pub fn logits(&self, hidden: &Array) -> Result<Array, ModelError> {
        Ok(match &self.lm_head {
            Some(head) => head.forward(hidden)?,
            None => self.embed_tokens.as_linear(hidden)?,
        })
    }

    /// Logits of the last position only, `[vocab]`: what generation needs, without
    /// projecting every prompt position onto the vocabulary.
    pub fn last_logits(&self, hidden: &Array) -> Result<Array, ModelError> {
        let last = hidden.index((.., -1.., ..));
        Ok(self.logits(&last)?.reshape(&[-1])?)
    }
}
