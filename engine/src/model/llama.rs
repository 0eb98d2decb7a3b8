//! The Llama-architecture decoder: Llama 2/3.x, SmolLM2, Mistral, Qwen2/2.5 and Qwen3.
//!
//! These families share one network; what differs is configuration (see
//! [`Family`](super::config::Family)): Qwen2 adds biases to the q/k/v projections, Qwen3
//! RMS-normalizes each query and key head before RoPE, Llama 3 scales RoPE frequencies,
//! GGUF files keep Llama's Q/K rows in the interleaved RoPE layout. Per block:
//!
//! ```text
//! h   = x + o_proj(attention(rope(q_proj(norm1(x))), rope(k_proj(..)), v_proj(..)))
//! out = h + down_proj(silu(gate_proj(norm2(h))) * up_proj(norm2(h)))
//! ```
//!
//! Gemma 3 adds a norm on the attention's output and on the MLP's before each sum, gates
//! with GELU-tanh instead of SiLU, scales the embeddings by `sqrt(hidden)`, and gives its
//! window layers a RoPE base of their own.
//!
//! Attention goes through the layer's [`KvCache`], which appends the new keys and values
//! and attends over everything it holds (over the last `W` positions in a window layer,
//! whose cache the model's configuration asks for); grouped-query heads are the cache's
//! business.
//!
//! Each block is written once, over the operations of [`Ops`]; the runtime of the backend
//! the model was loaded with decides, once at load, which implementation runs: MLX's
//! operations (the Mac's GPU path) or the host kernels (the CPU's).
//! `tests/host_steps.rs` holds the two to the same logits.

use mlx_rs::{ops::indexing::IndexOp, Array};

use super::config::{ModelConfig, RopeConfig, RopeScaling};
use super::layers::{Embedding, Linear, RmsNorm};
use super::ops::{Ops, Tokens};
use super::rope::Rope;
use crate::backend::Backend;
use crate::cache::KvCache;
use crate::error::{LoadError, ModelError};
use crate::runtime::{chosen, ForRuntime, Runtime};
use crate::weights::Weights;

/// Multi-head attention with grouped key/value heads.
struct Attention {
    q_proj: Linear,
    k_proj: Linear,
    v_proj: Linear,
    o_proj: Linear,
    /// Qwen3's per-head norms of the queries and keys (over `head_dim`), before RoPE.
    qk_norm: Option<(RmsNorm, RmsNorm)>,
    n_heads: usize,
    n_kv_heads: usize,
    scale: f32,
}

impl Attention {
    fn load(w: &mut Weights, prefix: &str, c: &ModelConfig) -> Result<Self, LoadError> {
        let norm = |w: &mut Weights, name: &str| norm(w, &format!("{prefix}.{name}"), c);
        Ok(Self {
            q_proj: w.linear(&format!("{prefix}.q_proj"), c.qkv_bias)?,
            k_proj: w.linear(&format!("{prefix}.k_proj"), c.qkv_bias)?,
            v_proj: w.linear(&format!("{prefix}.v_proj"), c.qkv_bias)?,
            o_proj: w.linear(&format!("{prefix}.o_proj"), false)?,
            qk_norm: if c.qk_norm {
                Some((norm(w, "q_norm")?, norm(w, "k_norm")?))
            } else {
                None
            },
            n_heads: c.num_heads,
            n_kv_heads: c.num_kv_heads,
            scale: c.attention_scale(),
        })
    }

    /// The chunk's first position is the cache's length.
    fn forward<O: Ops>(
        &self,
        o: &O,
        x: &O::Rows,
        rope: &Rope,
        cache: &mut dyn KvCache,
    ) -> Result<O::Rows, ModelError> {
        let offset = cache.len();
        let [q, k, v] = o.linears([&self.q_proj, &self.k_proj, &self.v_proj], x)?;
        let q = o.split_heads(q, self.n_heads)?;
        let k = o.split_heads(k, self.n_kv_heads)?;
        let v = o.split_heads(v, self.n_kv_heads)?;
        let (q, k) = match &self.qk_norm {
            Some((q_norm, k_norm)) => (o.head_norm(q_norm, q)?, o.head_norm(k_norm, k)?),
            None => (q, k),
        };
        let q = o.rope(rope, q, offset)?;
        let k = o.rope(rope, k, offset)?;
        let out = o.attend(cache, q, k, v, self.scale)?;
        linear(o, &self.o_proj, &o.merge_heads(out)?)
    }
}

/// The gated feed-forward layer: SwiGLU, or GELU-tanh for Gemma.
struct Mlp {
    gate_proj: Linear,
    up_proj: Linear,
    down_proj: Linear,
    gelu: bool,
}

impl Mlp {
    fn load(w: &mut Weights, prefix: &str, c: &ModelConfig) -> Result<Self, LoadError> {
        Ok(Self {
            gate_proj: w.linear(&format!("{prefix}.gate_proj"), false)?,
            up_proj: w.linear(&format!("{prefix}.up_proj"), false)?,
            down_proj: w.linear(&format!("{prefix}.down_proj"), false)?,
            gelu: c.family.gemma_block(),
        })
    }

    fn forward<O: Ops>(&self, o: &O, x: &O::Rows) -> Result<O::Rows, ModelError> {
        let [gate, up] = o.linears([&self.gate_proj, &self.up_proj], x)?;
        let gated = if self.gelu {
            o.gelu_times(gate, &up)?
        } else {
            o.silu_times(gate, &up)?
        };
        linear(o, &self.down_proj, &gated)
    }
}

/// One pre-norm transformer block; Gemma's also normalizes the attention's and the MLP's
/// outputs before adding them.
struct Block {
    input_layernorm: RmsNorm,
    self_attn: Attention,
    post_attention_norm: Option<RmsNorm>,
    pre_mlp_norm: RmsNorm,
    post_mlp_norm: Option<RmsNorm>,
    mlp: Mlp,
}

impl Block {
    fn load(w: &mut Weights, p: &str, c: &ModelConfig) -> Result<Self, LoadError> {
        let norm = |w: &mut Weights, name: &str| norm(w, &format!("{p}.{name}"), c);
        let gemma = c.family.gemma_block();
        Ok(Block {
            input_layernorm: norm(w, "input_layernorm")?,
            self_attn: Attention::load(w, &format!("{p}.self_attn"), c)?,
            // Llama's `post_attention_layernorm` is the norm before the MLP; Gemma's
            // normalizes the attention's output, and `pre_feedforward_layernorm` comes
            // before the MLP.
            post_attention_norm: gemma
                .then(|| norm(w, "post_attention_layernorm"))
                .transpose()?,
            pre_mlp_norm: norm(
                w,
                if gemma {
                    "pre_feedforward_layernorm"
                } else {
                    "post_attention_layernorm"
                },
            )?,
            post_mlp_norm: gemma
                .then(|| norm(w, "post_feedforward_layernorm"))
                .transpose()?,
            mlp: Mlp::load(w, &format!("{p}.mlp"), c)?,
        })
    }

    fn forward<O: Ops>(
        &self,
        o: &O,
        x: O::Rows,
        rope: &Rope,
        cache: &mut dyn KvCache,
    ) -> Result<O::Rows, ModelError> {
        let attended =
            self.self_attn
                .forward(o, &o.rms_norm(&self.input_layernorm, &x)?, rope, cache)?;
        let attended = match &self.post_attention_norm {
            Some(norm) => o.rms_norm(norm, &attended)?,
            None => attended,
        };
        let h = o.add(x, &attended)?;
        let mlp = self.mlp.forward(o, &o.rms_norm(&self.pre_mlp_norm, &h)?)?;
        let mlp = match &self.post_mlp_norm {
            Some(norm) => o.rms_norm(norm, &mlp)?,
            None => mlp,
        };
        o.add(h, &mlp)
    }
}

/// The RMS norm `{prefix}`, its gain shifted by the configuration's offset (Gemma's
/// checkpoints store `w` for a gain of `1 + w`).
fn norm(w: &mut Weights, prefix: &str, c: &ModelConfig) -> Result<RmsNorm, LoadError> {
    let mut norm = w.rms_norm(prefix, c.rms_norm_eps)?;
    if c.norm_offset != 0.0 {
        norm.weight = norm
            .weight
            .add(mlx_rs::array!(c.norm_offset).as_dtype(norm.weight.dtype())?)?;
        norm.weight.eval()?;
    }
    Ok(norm)
}

/// `x W^T + b` for one of the model's linear layers.
fn linear<O: Ops>(o: &O, layer: &Linear, x: &O::Rows) -> Result<O::Rows, ModelError> {
    o.linear(&layer.weight, layer.bias.as_ref(), x)
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
    /// The window layers' RoPE, where their base differs (Gemma 3).
    local_rope: Option<Rope>,
    /// Gemma scales the embeddings by `sqrt(hidden)`.
    embed_scale: Option<f32>,
    /// Where and how it runs; its weights are in the backend's compute dtype.
    backend: Backend,
    /// The network's steps on the backend's runtime.
    steps: Steps,
}

/// The layers' caches, one per layer.
type Caches = [Box<dyn KvCache>];

/// The network's steps on one runtime, chosen when the model loads.
#[derive(Clone, Copy)]
struct Steps {
    forward: fn(&Llama, Tokens<'_>, &mut Caches) -> Result<Array, ModelError>,
    head: fn(&Llama, &Array) -> Result<Array, ModelError>,
    pipelines: bool,
}

impl ForRuntime for Steps {
    fn on<R: Runtime>() -> Self {
        Steps {
            forward: |model, tokens, caches| model.run(&R::ops(&model.backend), tokens, caches),
            head: |model, hidden| model.head(&R::head_ops(&model.backend), hidden),
            pipelines: R::PIPELINES,
        }
    }
}

impl Llama {
    /// Builds the model from a checkpoint's tensors (Hugging Face names). It runs on the
    /// backend the weights were prepared for.
    pub fn load(config: ModelConfig, w: &mut Weights) -> Result<Self, LoadError> {
        config.validate()?;
        let layers = (0..config.num_layers)
            .map(|i| Block::load(w, &format!("model.layers.{i}"), &config))
            .collect::<Result<Vec<_>, LoadError>>()?;
        // Tied embeddings are decided by the checkpoint itself: configs disagree on the
        // default of `tie_word_embeddings`, tensors do not.
        let lm_head = if w.contains("lm_head.weight") {
            Some(w.linear("lm_head", false)?)
        } else {
            None
        };
        let local_rope = config.local_rope_theta.map(|theta| {
            let local = RopeConfig {
                theta,
                scaling: RopeScaling::None,
                traditional: config.rope.traditional,
            };
            Rope::new(&local, config.head_dim)
        });
        Ok(Self {
            rope: Rope::new(&config.rope, config.head_dim),
            local_rope,
            // llama.cpp's scale, in float32 (mlx-lm rounds it to bfloat16 first).
            embed_scale: config
                .family
                .gemma_block()
                .then(|| (config.hidden_size as f32).sqrt()),
            embed_tokens: w.embedding("model.embed_tokens")?,
            norm: norm(w, "model.norm", &config)?,
            layers,
            lm_head,
            config,
            backend: w.backend(),
            steps: chosen(&w.backend()),
        })
    }

    /// The model's hyper-parameters.
    pub fn config(&self) -> &ModelConfig {
        &self.config
    }

    /// The backend it runs on.
    pub fn backend(&self) -> &Backend {
        &self.backend
    }

    /// Whether a decode step may be built on the previous token before that token is
    /// read back (the runtime takes lazy inputs).
    pub fn pipelines(&self) -> bool {
        self.steps.pipelines
    }

    /// Runs `tokens` (the positions after what the caches hold) through the network and
    /// returns the final hidden states `[1, L, hidden]`. One cache per layer.
    pub fn forward(
        &self,
        tokens: &[u32],
        caches: &mut [Box<dyn KvCache>],
    ) -> Result<Array, ModelError> {
        self.forward_tokens(Tokens::Host(tokens), caches)
    }

    /// [`Llama::forward`] for token ids in a `[L]` uint32 array, which may still be being
    /// computed: on the MLX backends the step's graph is built without waiting for it.
    pub fn forward_ids(
        &self,
        ids: &Array,
        caches: &mut [Box<dyn KvCache>],
    ) -> Result<Array, ModelError> {
        self.forward_tokens(Tokens::Device(ids), caches)
    }

    fn forward_tokens(
        &self,
        tokens: Tokens<'_>,
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
        self.backend
            .scoped(|| (self.steps.forward)(self, tokens, caches))
    }

    fn run<O: Ops>(
        &self,
        o: &O,
        tokens: Tokens<'_>,
        caches: &mut [Box<dyn KvCache>],
    ) -> Result<Array, ModelError> {
        let mut h = o.embed(&self.embed_tokens, tokens)?;
        if let Some(scale) = self.embed_scale {
            h = o.scaled(h, scale)?;
        }
        for (i, (layer, cache)) in self.layers.iter().zip(caches.iter_mut()).enumerate() {
            let rope = match (&self.local_rope, self.config.layer_window(i)) {
                (Some(local), Some(_)) => local,
                _ => &self.rope,
            };
            h = layer.forward(o, h, rope, cache.as_mut())?;
            o.check(&h, &|| format!("the hidden states after block {i}"))?;
        }
        o.array_of(o.rms_norm(&self.norm, &h)?)
    }

    /// Logits `[1, L, vocab]` for hidden states `[1, L, hidden]`.
    pub fn logits(&self, hidden: &Array) -> Result<Array, ModelError> {
        self.backend.scoped(|| (self.steps.head)(self, hidden))
    }

    fn head<O: Ops>(&self, o: &O, hidden: &Array) -> Result<Array, ModelError> {
        let x = o.rows_of(hidden)?;
        let logits = match &self.lm_head {
            Some(head) => linear(o, head, &x)?,
            None => o.linear(&self.embed_tokens.table, None, &x)?,
        };
        o.array_of(logits)
    }

    /// Logits of the last position only, `[vocab]`: what generation needs, without
    /// projecting every prompt position onto the vocabulary.
    pub fn last_logits(&self, hidden: &Array) -> Result<Array, ModelError> {
        self.backend.scoped(|| {
            let last = hidden.index((.., -1.., ..));
            Ok(self.logits(&last)?.reshape(&[-1])?)
        })
    }
}
