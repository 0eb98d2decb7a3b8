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
//!
//! Each block has two forwards: the MLX one (any number of positions, any device), and a
//! one-position twin on host memory (`forward_host`) that the CPU uses for decode steps,
//! where MLX's per-operation thread hand-offs cost more than the arithmetic (see
//! [`host`]). `tests/host_steps.rs` holds the two to the same logits.

use mlx_rs::{nn::silu, ops::indexing::IndexOp, Array};

use super::config::ModelConfig;
use super::host;
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

    /// [`Attention::forward`] for one position on host memory (`x` is `[hidden]`). With one
    /// position, `[heads * D]` is already the `[1, heads, 1, D]` layout the cache takes.
    fn forward_host(
        &self,
        x: &[f32],
        rope: &Rope,
        cache: &mut dyn KvCache,
    ) -> Result<Vec<f32>, ModelError> {
        let offset = cache.len();
        let mut q = self.q_proj.forward_host(x)?;
        let mut k = self.k_proj.forward_host(x)?;
        let v = self.v_proj.forward_host(x)?;
        rope.apply_host(&mut q, offset);
        rope.apply_host(&mut k, offset);
        let shape = |n: i32| [1, n, 1, self.head_dim];
        let out = cache.attend(
            &Array::from_slice(&q, &shape(self.n_heads)),
            &Array::from_slice(&k, &shape(self.n_kv_heads)),
            &Array::from_slice(&v, &shape(self.n_kv_heads)),
            self.scale,
        )?;
        self.o_proj.forward_host(&host::host_vec(&out)?)
    }

    fn on_host(&self) -> bool {
        [&self.q_proj, &self.k_proj, &self.v_proj, &self.o_proj]
            .iter()
            .all(|l| l.on_host())
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

    fn forward_host(&self, x: &[f32]) -> Result<Vec<f32>, ModelError> {
        let mut gate = self.gate_proj.forward_host(x)?;
        host::silu_times(&mut gate, &self.up_proj.forward_host(x)?);
        self.down_proj.forward_host(&gate)
    }

    fn on_host(&self) -> bool {
        [&self.gate_proj, &self.up_proj, &self.down_proj]
            .iter()
            .all(|l| l.on_host())
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

    /// [`Block::forward`] for one position on host memory, updating `x` in place.
    fn forward_host(
        &self,
        x: &mut [f32],
        rope: &Rope,
        cache: &mut dyn KvCache,
    ) -> Result<(), ModelError> {
        let attended =
            self.self_attn
                .forward_host(&self.input_layernorm.forward_host(x)?, rope, cache)?;
        host::add_in_place(x, &attended);
        let mlp = self
            .mlp
            .forward_host(&self.post_attention_layernorm.forward_host(x)?)?;
        host::add_in_place(x, &mlp);
        Ok(())
    }

    fn on_host(&self) -> bool {
        self.input_layernorm.on_host()
            && self.post_attention_layernorm.on_host()
            && self.self_attn.on_host()
            && self.mlp.on_host()
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
    /// One-token steps run on host memory ([`host`]): on the CPU, when every weight is
    /// there in float32.
    host_steps: bool,
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
        let mut model = Self {
            rope: Rope::new(&config.rope, config.head_dim),
            embed_tokens: w.embedding("model.embed_tokens")?,
            norm: w.rms_norm("model.norm", config.rms_norm_eps)?,
            layers,
            lm_head,
            config,
            host_steps: false,
        };
        model.set_host_steps(host::host_decode());
        Ok(model)
    }

    /// Runs one-token steps on host memory (`on`, where the weights allow it) or through
    /// MLX; returns whether host steps are now on. For tests and benchmarks that compare
    /// the two paths in one process.
    pub fn set_host_steps(&mut self, on: bool) -> bool {
        self.host_steps = on
            && self.embed_tokens.on_host()
            && self.norm.on_host()
            && self.layers.iter().all(Block::on_host);
        self.host_steps
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
        if let (&[token], true) = (tokens, self.host_steps) {
            let mut x = self.embed_tokens.row_host(token)?;
            for (layer, cache) in self.layers.iter().zip(caches.iter_mut()) {
                layer.forward_host(&mut x, &self.rope, cache.as_mut())?;
            }
            let hidden = self.norm.forward_host(&x)?;
            return Ok(Array::from_slice(&hidden, &[1, 1, hidden.len() as i32]));
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
