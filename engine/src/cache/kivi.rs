//! The KIVI cache: quantized history plus a full-precision residual window, per layer.
//!
//! Storage (`B` batch, `H` KV heads, `D` head_dim), MLX arrays but for the host window:
//! - keys per channel: packed `[B, H, D, Tq * b / 32]` (`u32`), scales and zeros
//!   `[B, H, D, Tq / G]` — keys are stored transposed so a group runs along tokens;
//!   per token (ablation): `[B, H, Tq, D * b / 32]`, `[B, H, Tq, D / G']`;
//! - values: packed `[B, H, Tq, D * b / 32]`, scales and zeros `[B, H, Tq, D / G']`, where
//!   `G'` is the group size clamped to the head (`QuantSpec::for_axis`);
//! - residual keys and values `[B, H, Tr, D]` in the storage dtype: MLX arrays, or host
//!   float16 buffers with room for the largest window, written in place (`kivi_window.rs`).
//!
//! Scales, zeros and the residual window are stored in the backend's storage dtype
//! ([`Backend::storage_dtype`]: float16 when the model computes in float32, the compute
//! dtype otherwise). New keys and values are rounded to the storage dtype as they arrive,
//! before anything is quantized, so that one prefill, any chunking and token-by-token
//! decode still give bit-identical arrays. Attention converts back to float32 as it reads.
//!
//! The flush rule lives in [`kivi_kernels::quantized_after`]: after an append of `L` tokens
//! the oldest whole groups leave the window while it holds `R + G` or more, so a cache
//! built from empty has `Q(T) = max(0, floor((T - R) / G) * G)` quantized tokens. Each group
//! is quantized from its own data alone, so one prefill, any chunking and token-by-token
//! decode of the same stream give bit-identical arrays.
//!
//! Attention runs between the append and the flush: a call's queries read the history as
//! it stood before the call, and the window with the call's own tokens in full precision
//! (the KIVI paper's prefill). The groups the call flushes are read quantized from the
//! next call on. A prompt chunk therefore never attends to quantized copies of itself,
//! and its outputs depend on where chunks begin; the cache's bits do not.
//!
//! KIVI+ (both optional, see [`KiviConfig`]):
//! - **sinks**: the first `S` tokens stay in full precision for good, at the front of the
//!   residual arrays (which then hold the sinks, then the window); the flush rule runs on
//!   the tokens after them, so `Q(T) = max(0, floor((T - S - R) / G) * G)` quantized tokens
//!   sit at positions `[S, S + Q)` ([`kivi_kernels::sink_len`]);
//! - **a Hadamard basis**: keys (after RoPE) and values enter as `k·H`, `v·H`
//!   ([`kivi_kernels::rotation`]), attention takes `q·H` and its output is multiplied by `H`
//!   once. Every token is rotated on its own, so both keep the cache a function of the
//!   token stream alone.
//!
//! The history's buffers are exactly the size of their content (appends concatenate, cuts
//! copy); a host window keeps room for `S + R + G` tokens (the largest window and a
//! decode step's token). `held_bytes` is what the buffers hold, that room included. MLX
//! arrays are lazy until the caller evaluates the attention output (or calls
//! [`KiviCache::eval`]).
//!
//! The runtime the model runs on holds the window and does the arithmetic
//! ([`KiviRuntime`], `kivi_runtime.rs`): on the host runtime new tokens are written into
//! host buffers, flushed tokens are quantized and joined to the history by the host
//! kernels and attention runs the CPU kernels; on MLX all three are MLX operations, the
//! path a Mac runs. Everything here is written once over it, and the two give the same
//! bits (`kivi_tests.rs`).

use kivi_kernels::{
    attention, host::readable, mlx_quant::QuantizedArray, quantized_after, reference::Storage,
    rotation, sink_len, CacheView, KernelError, KeyAxis, QuantSpec,
};
use mlx_rs::{ops, transforms::eval, Array, Dtype};

use super::arrays::host_floats;
use super::config::KiviConfig;
use super::kivi_runtime::{KiviRuntime, ResidualWindow, Step};
use super::{CacheError, CacheState, KvCache, LayerKvStats};
use basis::{HeadBasis, QueryEnergy, Scaling};

/// A runtime's window cut, as [`ResidualWindow::cut`] takes it.
type Cut<R> = <<R as KiviRuntime>::Window as ResidualWindow>::Cut;

/// The groups a call moves from the window to the history: quantized as the call's tokens
/// enter the window, joined to the history after the call's queries have read them.
struct Leaving<C> {
    /// The history with the new groups joined (`None`: unchanged).
    history: Option<(QuantizedArray, QuantizedArray)>,
    /// How the window drops them (`None`: nothing was appended).
    cut: Option<C>,
    /// Quantized positions after the move.
    quantized: usize,
}

/// KIVI+'s adaptive basis (`kivi_basis.rs`): the queries counted so far, then each head's
/// choice, made at the first flush.
#[derive(Debug, Clone, Default)]
struct Adaptive {
    energy: QueryEnergy,
    chosen: Option<HeadBasis>,
}

/// What an append changes in an adaptive basis, worked out before anything changes: the
/// window rewritten in a basis just chosen, and the basis's state after the call.
struct Next<W> {
    window: Option<W>,
    adaptive: Option<Adaptive>,
}

impl<W> Default for Next<W> {
    fn default() -> Self {
        Self {
            window: None,
            adaptive: None,
        }
    }
}

/// The KV heads a rotation applies to.
#[derive(Debug, Clone, Copy)]
enum Heads<'a> {
    None,
    All,
    /// Per KV head (`batch × heads`); a tensor with more heads than these (queries, the
    /// attention output) follows its KV head's choice.
    Chosen(&'a [bool]),
}

impl<'a> Heads<'a> {
    fn fixed(on: bool) -> Self {
        if on {
            Heads::All
        } else {
            Heads::None
        }
    }

    fn chosen(mask: &'a [bool]) -> Self {
        if mask.iter().all(|&on| on) {
            Heads::All
        } else if mask.iter().any(|&on| on) {
            Heads::Chosen(mask)
        } else {
            Heads::None
        }
    }
}

/// Shapes fixed by the first append: batch, KV heads, key and value head_dim, and the
/// storage dtype of scales, zeros and the residual window.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Dims {
    batch: i32,
    heads: i32,
    key_dim: i32,
    value_dim: i32,
    dtype: Dtype,
}

/// Where the held bytes go.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct KiviBytes {
    /// Packed key and value codes.
    pub packed: u64,
    /// Scales and zeros of keys and values.
    pub params: u64,
    /// Residual keys and values.
    pub residual: u64,
}

impl KiviBytes {
    /// Everything held.
    pub fn total(&self) -> u64 {
        self.packed + self.params + self.residual
    }
}

/// One layer's KIVI cache, on the runtime `R`.
pub(crate) struct KiviCache<R: KiviRuntime> {
    config: KiviConfig,
    dims: Option<Dims>,
    keys: Option<QuantizedArray>,
    values: Option<QuantizedArray>,
    window: Option<R::Window>,
    tokens: usize,
    quantized: usize,
    /// The dtype of scales, zeros and the residual window.
    storage: Dtype,
    /// With an adaptive rotation, its state.
    adaptive: Option<Adaptive>,
}

impl<R: KiviRuntime> std::fmt::Debug for KiviCache<R> {
    // Array's Debug prints (and evaluates) the data; show the bookkeeping only.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("KiviCache")
            .field("config", &self.config.to_string())
            .field("tokens", &self.tokens)
            .field("quantized", &self.quantized)
            .field("dims", &self.dims)
            .finish()
    }
}

impl<R: KiviRuntime> KiviCache<R> {
    /// An empty cache keeping scales, zeros and the window in `storage`
    /// ([`Backend::storage_dtype`](crate::backend::Backend::storage_dtype)).
    pub(crate) fn new(config: KiviConfig, storage: Dtype) -> Self {
        Self {
            config,
            dims: None,
            keys: None,
            values: None,
            window: None,
            tokens: 0,
            quantized: 0,
            storage,
            adaptive: config.rotation().adaptive().then(Adaptive::default),
        }
    }

    /// The positions whose queries an adaptive basis counts: every one before the first
    /// flush can happen (`S + R + G`).
    fn basis_span(&self) -> usize {
        self.config.sinks() + self.config.residual_length() + self.config.group_size()
    }

    /// The heads whose keys (and queries) are rotated now.
    fn key_heads(&self) -> Heads<'_> {
        match &self.adaptive {
            None => Heads::fixed(self.config.rotation().keys()),
            Some(Adaptive {
                chosen: Some(b), ..
            }) => Heads::chosen(&b.keys),
            Some(_) => Heads::None,
        }
    }

    /// The heads whose values (and attention outputs) are rotated now.
    fn value_heads(&self) -> Heads<'_> {
        match &self.adaptive {
            None => Heads::fixed(self.config.rotation().values()),
            Some(Adaptive {
                chosen: Some(b), ..
            }) => Heads::chosen(&b.values),
            Some(_) => Heads::None,
        }
    }

    /// Writes new keys and values into the window in full precision (rotated into KIVI+'s
    /// basis, rounded to the storage dtype) and quantizes, aside, the groups the flush rule
    /// moves out of it; [`Self::leave`] moves them. In between, the cache holds every token
    /// with the history as it was, so a call's queries read the call's own tokens and the
    /// window in full precision. Everything that can fail runs before anything changes, so
    /// an error leaves the cache as it was. `queries`, the call's, count towards an
    /// adaptive basis.
    fn admit(
        &mut self,
        keys: &Array,
        values: &Array,
        queries: Option<&Array>,
    ) -> Result<Leaving<Cut<R>>, CacheError> {
        let dims = self.check_new(keys, values)?;
        let len = keys.dim(2) as usize;
        if len == 0 {
            return Ok(Leaving {
                history: None,
                cut: None,
                quantized: self.quantized,
            });
        }
        let total = self.tokens + len;
        // Sinks fill first and stay; the flush rule runs on the tokens after them.
        let sinks = sink_len(total, self.config.sinks());
        let quantized = quantized_after(
            self.quantized,
            total - sinks,
            self.config.residual_length(),
            self.config.group_size(),
        );
        let flush = quantized - self.quantized;
        let (keys, values, next) = self.in_basis(keys, values, queries, flush > 0, dims)?;
        let held = next.window.as_ref().or(self.window.as_ref());
        let step = Step {
            sinks,
            flush,
            room: self.config.residual_room(),
            dtype: dims.dtype,
        };
        let (flushed, entry) = R::Window::plan(held, &keys, &values, step)?;
        let history = match flushed {
            Some((old_k, old_v)) => {
                let (new_k, key_axis) = self.quantize_keys(&old_k, dims)?;
                let new_v = R::quantize(&old_v, self.value_spec(dims)?, false)?;
                Some((
                    Self::extend(self.keys.as_ref(), new_k, key_axis)?,
                    Self::extend(self.values.as_ref(), new_v, -2)?,
                ))
            }
            None => None,
        };
        let held = next.window.or_else(|| self.window.take());
        let (joined, cut) = R::Window::enter(entry, held);
        self.window = Some(joined);
        if let (Some(adaptive), Some(state)) = (&mut self.adaptive, next.adaptive) {
            *adaptive = state;
        }
        self.dims = Some(dims);
        self.tokens = total;
        Ok(Leaving {
            history,
            cut: Some(cut),
            quantized,
        })
    }

    /// Moves the groups [`Self::admit`] quantized from the window to the history.
    fn leave(&mut self, leaving: Leaving<Cut<R>>) {
        if let Some((keys, values)) = leaving.history {
            self.keys = Some(keys);
            self.values = Some(values);
        }
        self.window = match (leaving.cut, self.window.take()) {
            (Some(cut), Some(window)) => R::Window::cut(cut, window),
            (_, window) => window,
        };
        self.quantized = leaving.quantized;
    }

    /// Keeps the first `keep` residual tokens.
    fn keep_window(&mut self, keep: usize) -> Result<(), CacheError> {
        self.window = match self.window.take() {
            Some(w) if keep > 0 => Some(w.truncated(keep)?),
            _ => None,
        };
        Ok(())
    }

    /// `x·H` along the last axis (KIVI+'s basis) in the heads `heads` names, computed in
    /// float32 by the runtime and returned in `x`'s dtype. `x` is `[B, heads, L, D]`; with a
    /// choice per KV head, a tensor of query heads follows each one's KV head.
    fn rotated(&self, x: &Array, heads: Heads<'_>) -> Result<Array, CacheError> {
        self.rotated_by(x, heads, None)
    }

    /// [`Self::rotated`], each rotated head's channels first multiplied by its KV head's
    /// `factors` (`[B * KV heads, D]`).
    fn rotated_by(
        &self,
        x: &Array,
        heads: Heads<'_>,
        factors: Option<&[f32]>,
    ) -> Result<Array, CacheError> {
        let mask = match heads {
            Heads::None => return Ok(x.clone()),
            Heads::All => None,
            Heads::Chosen(mask) => Some(mask),
        };
        if x.size() == 0 {
            return Ok(x.clone());
        }
        let &[b, h, _, d] = x.shape() else {
            return Err(CacheError::Shape(format!(
                "cannot rotate an array of shape {:?}",
                x.shape()
            )));
        };
        let (b, h, d) = (b as usize, h as usize, d as usize);
        // Each of `x`'s heads, batch-major, follows its KV head's choice.
        let pairs = mask
            .map(<[bool]>::len)
            .or(factors.map(|f| f.len() / d.max(1)))
            .unwrap_or(b * h);
        let per_kv = (b * h) / pairs.max(1);
        if per_kv == 0 || pairs * per_kv != b * h {
            return Err(CacheError::Shape(format!(
                "{h} heads do not follow the basis of {pairs} KV heads"
            )));
        }
        let on: Option<Vec<bool>> = mask.map(|m| (0..b * h).map(|i| m[i / per_kv]).collect());
        let factors: Option<Vec<f32>> = match factors {
            Some(f) if f.len() == pairs * d => Some(
                f.chunks_exact(d)
                    .flat_map(|head| std::iter::repeat_n(head, per_kv).flatten().copied())
                    .collect(),
            ),
            Some(f) => {
                return Err(CacheError::Shape(format!(
                    "{} channel factors for {pairs} KV heads of {d} channels",
                    f.len()
                )))
            }
            None => None,
        };
        let (on, factors) = (on.as_deref(), factors.as_deref());
        let dtype = x.dtype();
        if dtype == Dtype::Float32 {
            return R::rotate(x, on, factors);
        }
        let out = R::rotate(&x.as_dtype(Dtype::Float32)?, on, factors)?;
        Ok(out.as_dtype(dtype)?)
    }

    /// Keys in an adaptive basis's chosen basis: each rotated head's channels multiplied by
    /// its factors, then rotated.
    fn keys_in(&self, keys: &Array, chosen: &HeadBasis) -> Result<Array, CacheError> {
        let factors = chosen.key_factors(Scaling::Keys);
        self.rotated_by(keys, Heads::chosen(&chosen.keys), factors.as_deref())
    }

    /// The call's keys and values in the basis they are stored in (KIVI+'s rotation) and
    /// what the call changes in an adaptive basis: its queries counted and, when the call
    /// flushes the first group (`flushing`), each head's choice, with the window rewritten
    /// in it.
    fn in_basis(
        &self,
        keys: &Array,
        values: &Array,
        queries: Option<&Array>,
        flushing: bool,
        dims: Dims,
    ) -> Result<(Array, Array, Next<R::Window>), CacheError> {
        let Some(adaptive) = &self.adaptive else {
            let rotation = self.config.rotation();
            return Ok((
                self.rotated(keys, Heads::fixed(rotation.keys()))?,
                self.rotated(values, Heads::fixed(rotation.values()))?,
                Next::default(),
            ));
        };
        // Rounded to the storage dtype before any rotation, as the window's tokens are when
        // the window is rewritten: a token holds the same bits whenever it arrived.
        let (keys, values) = (keys.as_dtype(dims.dtype)?, values.as_dtype(dims.dtype)?);
        let in_chosen = |chosen: &HeadBasis| -> Result<(Array, Array), CacheError> {
            Ok((
                self.keys_in(&keys, chosen)?,
                self.rotated(&values, Heads::chosen(&chosen.values))?,
            ))
        };
        if let Some(chosen) = &adaptive.chosen {
            let (keys, values) = in_chosen(chosen)?;
            return Ok((keys, values, Next::default()));
        }
        let mut energy = adaptive.energy.clone();
        if let Some(queries) = queries {
            self.count_queries(&mut energy, queries, dims)?;
        }
        if !flushing {
            let next = Next {
                window: None,
                adaptive: Some(Adaptive {
                    energy,
                    chosen: None,
                }),
            };
            return Ok((keys, values, next));
        }
        let chosen = self.choose_basis(&keys, &values, &energy, dims)?;
        let window = match &self.window {
            Some(w) => {
                let (k, v) = w.arrays();
                Some(R::Window::from_arrays(
                    self.keys_in(&k, &chosen)?,
                    self.rotated(&v, Heads::chosen(&chosen.values))?,
                    self.config.residual_room(),
                )?)
            }
            None => None,
        };
        let (keys, values) = in_chosen(&chosen)?;
        let next = Next {
            window,
            adaptive: Some(Adaptive {
                energy: QueryEnergy::default(),
                chosen: Some(chosen),
            }),
        };
        Ok((keys, values, next))
    }

    /// Adds the energy of a call's queries (`[B, Hq, L, Dk]`, the call's positions) to
    /// `energy`, for the positions an adaptive basis counts.
    fn count_queries(
        &self,
        energy: &mut QueryEnergy,
        queries: &Array,
        dims: Dims,
    ) -> Result<(), CacheError> {
        let span = self.basis_span();
        if self.tokens >= span {
            return Ok(());
        }
        let &[b, h, l, d] = queries.shape() else {
            return Err(CacheError::Shape(format!(
                "queries must be [B, heads, L, D], got {:?}",
                queries.shape()
            )));
        };
        if b != dims.batch || d != dims.key_dim || h % dims.heads != 0 {
            return Err(CacheError::Shape(format!(
                "queries {:?} do not fit keys of {dims:?}",
                queries.shape()
            )));
        }
        let q = readable::<f32>(queries)?;
        let shape = [b, h, l, d].map(|n| n as usize);
        energy.add(
            host_floats(&q)?,
            shape,
            dims.heads as usize,
            self.tokens,
            span,
        );
        Ok(())
    }

    /// Each head's basis, from the window (all in the model's basis before the first flush)
    /// followed by the call's `keys` and `values` (rounded to the storage dtype).
    fn choose_basis(
        &self,
        keys: &Array,
        values: &Array,
        energy: &QueryEnergy,
        dims: Dims,
    ) -> Result<HeadBasis, CacheError> {
        let held = self.window.as_ref().map(R::Window::arrays);
        let joined = |held: Option<&Array>, new: &Array| -> Result<Array, CacheError> {
            let all = match held {
                Some(old) => ops::concatenate(&[old, new], 2)?,
                None => new.clone(),
            };
            Ok(readable::<f32>(&all)?)
        };
        let k = joined(held.as_ref().map(|w| &w.0), keys)?;
        let v = joined(held.as_ref().map(|w| &w.1), values)?;
        let group = self.config.group_size();
        let sample = basis::Sample {
            keys: host_floats(&k)?,
            values: host_floats(&v)?,
            key_shape: [dims.batch, dims.heads, k.dim(2), dims.key_dim].map(|n| n as usize),
            value_dim: dims.value_dim as usize,
        };
        let quant = basis::Quantizers {
            keys: self.config.key_spec(),
            values: self.value_spec(dims)?,
            storage: if dims.dtype == Dtype::Float16 {
                Storage::F16
            } else {
                Storage::F32
            },
        };
        let count = (self.config.residual_length() + group) / group * group;
        Ok(basis::choose(
            &sample,
            self.config.sinks(),
            count,
            energy,
            &quant,
        ))
    }

    /// The cache as the attention kernel reads it.
    pub fn view(&self) -> CacheView<'_> {
        CacheView {
            keys: self.keys.as_ref(),
            key_axis: self.config.key_axis(),
            values: self.values.as_ref(),
            residual: self.window.as_ref().map(R::Window::view),
            sinks: sink_len(self.tokens, self.config.sinks()),
        }
    }

    /// The buffers held, by name: `keys.packed`, `keys.scales`, `keys.zeros`, the same for
    /// `values`, `residual.keys`, `residual.values` (those that exist). A host window is
    /// copied into arrays of exactly its tokens.
    pub fn arrays(&self) -> Vec<(&'static str, Array)> {
        let mut named = self.quantized_arrays();
        if let Some(w) = &self.window {
            let (keys, values) = w.arrays();
            named.extend([("residual.keys", keys), ("residual.values", values)]);
        }
        if let (Some(adaptive), Some(dims)) = (&self.adaptive, self.dims) {
            named.extend(basis_arrays(adaptive, dims));
        }
        named
    }

    /// The quantized history's arrays, by name.
    fn quantized_arrays(&self) -> Vec<(&'static str, Array)> {
        let mut named = Vec::new();
        for (q, [packed, scales, zeros]) in [
            (&self.keys, ["keys.packed", "keys.scales", "keys.zeros"]),
            (
                &self.values,
                ["values.packed", "values.scales", "values.zeros"],
            ),
        ] {
            if let Some(q) = q {
                named.extend([
                    (packed, q.packed.clone()),
                    (scales, q.scales.clone()),
                    (zeros, q.zeros.clone()),
                ]);
            }
        }
        named
    }

    /// Held bytes by kind, from the buffers' sizes (nothing is evaluated or copied).
    pub fn bytes(&self) -> KiviBytes {
        let mut bytes = KiviBytes {
            residual: self.window.as_ref().map_or(0, R::Window::bytes),
            ..KiviBytes::default()
        };
        for q in self.keys.iter().chain(&self.values) {
            bytes.packed += q.packed.nbytes() as u64;
            bytes.params += (q.scales.nbytes() + q.zeros.nbytes()) as u64;
        }
        bytes
    }

    /// Evaluates every held array, so that no graph (and no input it references) stays
    /// alive behind them.
    pub fn eval(&self) -> Result<(), CacheError> {
        let mut arrays: Vec<&Array> = Vec::new();
        for q in self.keys.iter().chain(&self.values) {
            arrays.extend(q.arrays());
        }
        if let Some(w) = &self.window {
            arrays.extend(w.pending());
        }
        Ok(eval(arrays)?)
    }

    /// Keys `[B, H, F, D]` quantized, and the axis along which they join the history.
    fn quantize_keys(&self, keys: &Array, dims: Dims) -> Result<(QuantizedArray, i32), CacheError> {
        Ok(match self.config.key_axis() {
            KeyAxis::PerChannel => (R::quantize(keys, self.config.key_spec(), true)?, -1),
            KeyAxis::PerToken => (R::quantize(keys, self.key_token_spec(dims)?, false)?, -2),
        })
    }

    /// The history `held` followed by `new` along `axis`.
    fn extend(
        held: Option<&QuantizedArray>,
        new: QuantizedArray,
        axis: i32,
    ) -> Result<QuantizedArray, CacheError> {
        match held {
            Some(old) => R::concatenate(old, &new, axis),
            None => Ok(new),
        }
    }

    fn key_token_spec(&self, dims: Dims) -> Result<QuantSpec, CacheError> {
        Ok(self.config.key_spec().for_axis(dims.key_dim as usize)?)
    }

    fn value_spec(&self, dims: Dims) -> Result<QuantSpec, CacheError> {
        Ok(self.config.value_spec().for_axis(dims.value_dim as usize)?)
    }

    /// Checks new keys and values against each other and against what is held.
    fn check_new(&self, keys: &Array, values: &Array) -> Result<Dims, CacheError> {
        let (&[b, h, l, dk], &[vb, vh, vl, dv]) = (keys.shape(), values.shape()) else {
            return Err(CacheError::Shape(format!(
                "keys and values must be [B, kv_heads, L, D], got {:?} and {:?}",
                keys.shape(),
                values.shape()
            )));
        };
        if (b, h, l) != (vb, vh, vl) || keys.dtype() != values.dtype() {
            return Err(CacheError::Shape(format!(
                "keys {:?} {:?} and values {:?} {:?} do not match",
                keys.shape(),
                keys.dtype(),
                values.shape(),
                values.dtype()
            )));
        }
        if !attention::is_float(keys.dtype()) {
            return Err(CacheError::Shape(format!(
                "keys must be floats, not {:?}",
                keys.dtype()
            )));
        }
        let dims = Dims {
            batch: b,
            heads: h,
            key_dim: dk,
            value_dim: dv,
            dtype: self.storage,
        };
        match self.dims {
            Some(held) if held != dims => Err(CacheError::Shape(format!(
                "new keys/values {dims:?} differ from those held {held:?}"
            ))),
            Some(_) => Ok(dims),
            None => {
                // Fail on the first append, not at the first flush, if the head cannot be
                // grouped or rotated.
                self.value_spec(dims)?;
                if self.config.key_axis() == KeyAxis::PerToken {
                    self.key_token_spec(dims)?;
                }
                if self.config.rotation().keys() {
                    rotation::check_dim(dims.key_dim as usize)?;
                }
                if self.config.rotation().values() {
                    rotation::check_dim(dims.value_dim as usize)?;
                }
                Ok(dims)
            }
        }
    }
}

impl<R: KiviRuntime> KvCache for KiviCache<R> {
    fn attend(
        &mut self,
        queries: &Array,
        keys: &Array,
        values: &Array,
        scale: f32,
    ) -> Result<Array, CacheError> {
        if queries.ndim() != 4 || keys.ndim() != 4 || queries.dim(2) != keys.dim(2) {
            return Err(CacheError::Shape(format!(
                "queries {:?} do not fit keys {:?}",
                queries.shape(),
                keys.shape()
            )));
        }
        // Attend, then flush: the queries read the history as it stood before the call and
        // the window with the call's own tokens in full precision (the KIVI paper's
        // prefill); the groups this call flushes are read quantized from the next call on.
        let leaving = self.admit(keys, values, Some(queries))?;
        // KIVI+'s basis (as it stands after the append, which may choose it): keys enter
        // rotated, so the queries are rotated alike; the output of rotated values is rotated
        // back (H·H = I).
        let factors = self.adaptive.as_ref().and_then(|a| a.chosen.as_ref());
        let factors = factors.and_then(|b| b.key_factors(Scaling::Queries));
        let rotated = self.rotated_by(queries, self.key_heads(), factors.as_deref());
        let out = rotated
            .and_then(|queries| Ok(attention::attend(&queries, self.view(), scale, R::KERNELS)?));
        // The flush completes whatever attention returned: the tokens are held either way.
        self.leave(leaving);
        self.rotated(&out?, self.value_heads())
    }

    fn len(&self) -> usize {
        self.tokens
    }

    /// Keeps what is held of the first `len` positions without requantizing anything: if
    /// `len` reaches into the residual window, exactly `len` are kept (the quantized part
    /// stays as it is, so the window may then hold fewer than `R` tokens); if it reaches
    /// into the quantized history, whole groups up to `len` are kept and the window is
    /// emptied. Later appends follow the same flush rule.
    fn truncate(&mut self, len: usize) -> Result<usize, CacheError> {
        if len >= self.tokens {
            return Ok(self.tokens);
        }
        if self.adaptive.is_some() && len < self.basis_span() {
            // Before its span an adaptive basis has counted queries past `len`, or has chosen
            // from tokens past it: a cut cache could not be the prefix's own.
            *self = Self::new(self.config, self.storage);
            return Ok(0);
        }
        // The residual arrays begin with the sinks: cutting inside them or the window keeps
        // exactly `len` tokens of the residual after the quantized part.
        let sinks = sink_len(self.tokens, self.config.sinks());
        let in_residual = len >= sinks + self.quantized;
        if in_residual || len <= sinks {
            let keep = len - if in_residual { self.quantized } else { 0 };
            self.keep_window(keep)?;
            if !in_residual {
                self.keys = None;
                self.values = None;
                self.quantized = 0;
            }
        } else {
            let group = self.config.group_size();
            let keep = (len - sinks) / group * group;
            let key_axis = match self.config.key_axis() {
                KeyAxis::PerChannel => -1,
                KeyAxis::PerToken => -2,
            };
            self.keys = match self.keys.take() {
                Some(k) if keep > 0 => Some(k.take(key_axis, keep)?),
                _ => None,
            };
            self.values = match self.values.take() {
                Some(v) if keep > 0 => Some(v.take(-2, keep)?),
                _ => None,
            };
            // The window goes; the sinks stay.
            self.keep_window(sinks)?;
            self.quantized = keep;
        }
        self.tokens = self.quantized + self.window.as_ref().map_or(0, R::Window::len);
        if self.tokens == 0 {
            self.dims = None;
        }
        Ok(self.tokens)
    }

    fn stats(&self) -> LayerKvStats {
        let fp16_bytes = self.dims.map_or(0, |d| {
            let per_token =
                i64::from(d.batch) * i64::from(d.heads) * i64::from(d.key_dim + d.value_dim);
            self.tokens as u64 * per_token as u64 * 2
        });
        let sinks = sink_len(self.tokens, self.config.sinks());
        LayerKvStats {
            tokens: self.tokens,
            quantized_tokens: self.quantized,
            sink_tokens: sinks,
            residual_tokens: self.tokens - self.quantized - sinks,
            residual_capacity: self.config.residual_capacity(),
            fp16_bytes,
            held_bytes: self.bytes().total(),
            window: 0,
        }
    }

    fn state(&self) -> Result<CacheState, CacheError> {
        self.eval()?;
        Ok(CacheState {
            tokens: self.tokens,
            arrays: self
                .arrays()
                .into_iter()
                .map(|(n, a)| (n.to_string(), a))
                .collect(),
        })
    }

    fn restore(&mut self, state: CacheState) -> Result<(), CacheError> {
        *self = Self::from_state(self.config, self.storage, state)?;
        Ok(())
    }
}

/// An adaptive basis's state as arrays: each head's choice, `basis.keys` and
/// `basis.values` (`[B, H, 1, 1]`, 0 or 1) and, unless all are ones, its keys' channel
/// factors `basis.key_scales` (`[B, H, 1, Dk]`, float32); or before the choice the queries'
/// energy, `basis.queries` (`[B, H, 1, Dk]`).
fn basis_arrays(adaptive: &Adaptive, dims: Dims) -> Vec<(&'static str, Array)> {
    let [b, h] = [dims.batch, dims.heads];
    match &adaptive.chosen {
        Some(chosen) => {
            let flags = |mask: &[bool]| {
                let flags: Vec<u32> = mask.iter().map(|&on| u32::from(on)).collect();
                Array::from_slice(&flags, &[b, h, 1, 1])
            };
            let mut arrays = vec![
                ("basis.keys", flags(&chosen.keys)),
                ("basis.values", flags(&chosen.values)),
            ];
            if chosen.key_factors(Scaling::Keys).is_some() {
                let shape = [b, h, 1, dims.key_dim];
                arrays.push((
                    "basis.key_scales",
                    Array::from_slice(&chosen.key_scales, &shape),
                ));
            }
            arrays
        }
        None if adaptive.energy.sums.is_empty() => Vec::new(),
        None => vec![(
            "basis.queries",
            Array::from_slice(&adaptive.energy.sums, &[b, h, 1, dims.key_dim]),
        )],
    }
}

impl From<KernelError> for CacheError {
    fn from(e: KernelError) -> Self {
        match e {
            KernelError::Mlx(e) => CacheError::Mlx(e),
            other => CacheError::Shape(other.to_string()),
        }
    }
}

#[path = "kivi_state.rs"]
mod state;

#[path = "kivi_basis.rs"]
mod basis;

#[cfg(test)]
#[path = "kivi_tests.rs"]
mod tests;
