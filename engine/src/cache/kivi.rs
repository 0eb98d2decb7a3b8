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
//! The backend chooses the kernels: with the host kernels, new tokens are written into the
//! host window (`kivi_window.rs`), flushed tokens are quantized and joined to the history
//! on the host ([`kivi_kernels::host::quantize`]) and attention runs the CPU kernels; with
//! MLX, all three are MLX operations, the path a Mac runs. The two give the same bits
//! (`kivi_tests.rs`).

use kivi_kernels::{
    attention,
    host::{self, readable},
    mlx_quant::{self, QuantizedArray},
    quantized_after,
    reference::Storage,
    rotation, sink_len, CacheView, KernelError, Kernels, KeyAxis, QuantSpec,
};
use mlx_rs::{ops, transforms::eval, Array, Dtype};

use super::config::KiviConfig;
use super::{CacheError, CacheState, KvCache, LayerKvStats};
use crate::backend::Backend;
use crate::runtime::host::kv::host_floats;
use basis::{HeadBasis, QueryEnergy};
use window::{HostAppend, Roll, Window};

/// The groups a call moves from the window to the history: quantized as the call's tokens
/// enter the window, joined to the history after the call's queries have read them.
struct Leaving {
    /// The history with the new groups joined (`None`: unchanged).
    history: Option<(QuantizedArray, QuantizedArray)>,
    /// How the window drops them.
    cut: window::Cut,
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
#[derive(Default)]
struct Next {
    window: Option<Window>,
    adaptive: Option<Adaptive>,
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

/// One layer's KIVI cache.
pub struct KiviCache {
    config: KiviConfig,
    dims: Option<Dims>,
    keys: Option<QuantizedArray>,
    values: Option<QuantizedArray>,
    window: Option<Window>,
    tokens: usize,
    quantized: usize,
    /// Which kernels append to the window and attend.
    kernels: Kernels,
    /// The dtype of scales, zeros and the residual window.
    storage: Dtype,
    /// With an adaptive rotation, its state.
    adaptive: Option<Adaptive>,
}

impl std::fmt::Debug for KiviCache {
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

impl KiviCache {
    /// An empty cache for a model running on `backend`.
    pub fn new(config: KiviConfig, backend: Backend) -> Self {
        Self::empty(config, backend.kernels(), backend.storage_dtype())
    }

    fn empty(config: KiviConfig, kernels: Kernels, storage: Dtype) -> Self {
        Self {
            config,
            dims: None,
            keys: None,
            values: None,
            window: None,
            tokens: 0,
            quantized: 0,
            kernels,
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

    /// The settings.
    pub fn config(&self) -> &KiviConfig {
        &self.config
    }

    /// Positions stored quantized.
    pub fn quantized_len(&self) -> usize {
        self.quantized
    }

    /// Appends keys and values `[B, H, L, D]` (in the model's basis: KIVI+'s rotation is
    /// applied here) and applies the flush rule, without attention.
    pub fn append(&mut self, keys: &Array, values: &Array) -> Result<(), CacheError> {
        let leaving = self.admit(keys, values, None)?;
        self.leave(leaving);
        Ok(())
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
    ) -> Result<Leaving, CacheError> {
        let dims = self.check_new(keys, values)?;
        let len = keys.dim(2) as usize;
        if len == 0 {
            return Ok(Leaving {
                history: None,
                cut: window::Cut::Keep,
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
        let (keys, values) = (&keys, &values);
        let held = next.window.as_ref().or(self.window.as_ref());
        let host_tokens = match self.kernels {
            Kernels::Host => Some((readable::<f32>(keys)?, readable::<f32>(values)?)),
            Kernels::Mlx => None,
        };
        let (flushed, roll) = match &host_tokens {
            Some((k, v)) => {
                let [b, h, dk, dv] = [dims.batch, dims.heads, dims.key_dim, dims.value_dim];
                let add = HostAppend {
                    keys: host_floats(k)?,
                    values: host_floats(v)?,
                    shape: [b as usize, h as usize, len, dk as usize, dv as usize],
                    sinks,
                    flush,
                    room: self.config.residual_room(),
                };
                window::roll_host(held, add)?
            }
            None => {
                let (held_k, held_v) = match held {
                    Some(Window::Mlx { keys, values }) => (Some(keys), Some(values)),
                    Some(Window::Host(_)) => {
                        return Err(CacheError::Shape("a host window on MLX kernels".into()))
                    }
                    None => (None, None),
                };
                let k = window::roll_mlx(held_k, keys, sinks, flush, dims.dtype)?;
                let v = window::roll_mlx(held_v, values, sinks, flush, dims.dtype)?;
                let kept = k
                    .kept
                    .zip(v.kept)
                    .map(|(keys, values)| Window::Mlx { keys, values });
                let joined = Window::Mlx {
                    keys: k.joined,
                    values: v.joined,
                };
                (k.flushed.zip(v.flushed), Roll::Mlx { joined, kept })
            }
        };
        let history = match flushed {
            Some((old_k, old_v)) => {
                let (new_k, key_axis) = self.quantize_keys(&old_k, dims)?;
                let new_v = self.quantize(&old_v, self.value_spec(dims)?, false)?;
                Some((
                    self.extend(self.keys.as_ref(), new_k, key_axis)?,
                    self.extend(self.values.as_ref(), new_v, -2)?,
                ))
            }
            None => None,
        };
        let held = next.window.or_else(|| self.window.take());
        let (joined, cut) = roll.enter(held);
        self.window = Some(joined);
        if let (Some(adaptive), Some(state)) = (&mut self.adaptive, next.adaptive) {
            *adaptive = state;
        }
        self.dims = Some(dims);
        self.tokens = total;
        Ok(Leaving {
            history,
            cut,
            quantized,
        })
    }

    /// Moves the groups [`Self::admit`] quantized from the window to the history.
    fn leave(&mut self, leaving: Leaving) {
        if let Some((keys, values)) = leaving.history {
            self.keys = Some(keys);
            self.values = Some(values);
        }
        self.window = leaving.cut.apply(self.window.take());
        self.quantized = leaving.quantized;
    }

    /// Keeps the first `keep` residual tokens.
    fn keep_window(&mut self, keep: usize) -> Result<(), CacheError> {
        self.window = match self.window.take() {
            Some(w) => w.truncated(keep)?,
            None => None,
        };
        Ok(())
    }

    /// `x·H` along the last axis (KIVI+'s basis) in the heads `heads` names, computed in
    /// float32 and returned in `x`'s dtype: on the host with the host kernels, else as MLX
    /// operations (the same bits). `x` is `[B, heads, L, D]`; with a choice per KV head, a
    /// tensor of query heads follows each one's KV head.
    fn rotated(&self, x: &Array, heads: Heads<'_>) -> Result<Array, CacheError> {
        let mask = match heads {
            Heads::None => return Ok(x.clone()),
            Heads::All => None,
            Heads::Chosen(mask) => Some(mask),
        };
        if x.size() == 0 {
            return Ok(x.clone());
        }
        let &[b, h, l, d] = x.shape() else {
            return Err(CacheError::Shape(format!(
                "cannot rotate an array of shape {:?}",
                x.shape()
            )));
        };
        let (b, h, l, d) = (b as usize, h as usize, l as usize, d as usize);
        let per_kv = mask.map_or(1, |m| h / (m.len() / b.max(1)).max(1));
        if mask.is_some_and(|m| per_kv == 0 || m.len() * per_kv != b * h) {
            return Err(CacheError::Shape(format!(
                "{h} heads do not follow the basis of {} KV heads",
                mask.map_or(0, <[bool]>::len)
            )));
        }
        // Whether head `i` of `x` (batch-major) is rotated.
        let on = |i: usize| mask.is_none_or(|m| m[i / per_kv]);
        let dtype = x.dtype();
        let out = if self.kernels == Kernels::Host {
            let x = readable::<f32>(x)?;
            let mut data = x
                .try_as_slice::<f32>()
                .map_err(|e| CacheError::Shape(format!("cannot read an array to rotate: {e}")))?
                .to_vec();
            for (i, head) in data.chunks_exact_mut(l * d).enumerate() {
                if on(i) {
                    rotation::rotate_rows(head, d)?;
                }
            }
            Array::from_slice(&data, x.shape())
        } else {
            let x = x.as_dtype(Dtype::Float32)?;
            let all = rotation::rotate(&x)?;
            match mask {
                None => all,
                Some(_) => {
                    let flags: Vec<u32> = (0..b * h).map(|i| u32::from(on(i))).collect();
                    let shape = [b as i32, h as i32, 1, 1];
                    let on = Array::from_slice(&flags, &shape).as_dtype(Dtype::Bool)?;
                    ops::select(&on, &all, &x)?
                }
            }
        };
        Ok(if dtype == Dtype::Float32 {
            out
        } else {
            out.as_dtype(dtype)?
        })
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
    ) -> Result<(Array, Array, Next), CacheError> {
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
                self.rotated(&keys, Heads::chosen(&chosen.keys))?,
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
                let host = self.kernels == Kernels::Host;
                Some(Window::from_arrays(
                    self.rotated(&k, Heads::chosen(&chosen.keys))?,
                    self.rotated(&v, Heads::chosen(&chosen.values))?,
                    host,
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
        let held = self.window.as_ref().map(Window::arrays);
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
            residual: self.window.as_ref().map(Window::view),
            sinks: sink_len(self.tokens, self.config.sinks()),
        }
    }

    /// Everything held, rebuilt as float32 keys and values `[B, H, T, D]` in position order
    /// and in the cache's basis (rotated where KIVI+ rotates), for tests and quality
    /// measurements; attention never does this.
    pub fn dequantized(&self) -> Result<Option<(Array, Array)>, CacheError> {
        if self.dims.is_none() {
            return Ok(None);
        }
        let sinks = sink_len(self.tokens, self.config.sinks()) as i32;
        let (mut keys, mut values) = (Vec::new(), Vec::new());
        let mut window = Vec::new();
        let residual = self.window.as_ref().map(Window::arrays);
        let (held_k, held_v) = (
            residual.as_ref().map(|r| &r.0),
            residual.as_ref().map(|r| &r.1),
        );
        for (held, into) in [(held_k, &mut keys), (held_v, &mut values)] {
            if let Some(a) = held {
                let (sunk, rest) = match sinks {
                    0 => (None, Some(a.clone())),
                    s => {
                        let (sunk, rest) = window::split_tokens(a, s)?;
                        (Some(sunk), rest)
                    }
                };
                into.extend(sunk);
                window.push(rest);
            }
        }
        if let (Some(k), Some(v)) = (&self.keys, &self.values) {
            let k = k.dequantize()?;
            keys.push(match self.config.key_axis() {
                KeyAxis::PerChannel => k.swap_axes(-1, -2)?,
                KeyAxis::PerToken => k,
            });
            values.push(v.dequantize()?);
        }
        let mut window = window.into_iter();
        keys.extend(window.next().flatten());
        values.extend(window.next().flatten());
        let keys = ops::concatenate(&keys, 2)?.as_dtype(Dtype::Float32)?;
        let values = ops::concatenate(&values, 2)?.as_dtype(Dtype::Float32)?;
        Ok(Some((keys, values)))
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
            residual: self.window.as_ref().map_or(0, Window::bytes),
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
        if let Some(Window::Mlx { keys, values }) = &self.window {
            arrays.extend([keys, values]);
        }
        Ok(eval(arrays)?)
    }

    /// Keys `[B, H, F, D]` quantized, and the axis along which they join the history.
    fn quantize_keys(&self, keys: &Array, dims: Dims) -> Result<(QuantizedArray, i32), CacheError> {
        Ok(match self.config.key_axis() {
            KeyAxis::PerChannel => (self.quantize(keys, self.config.key_spec(), true)?, -1),
            KeyAxis::PerToken => (self.quantize(keys, self.key_token_spec(dims)?, false)?, -2),
        })
    }

    /// `x` quantized in groups along its last axis, or along its second-last when
    /// `transposed` (then stored with those two axes swapped): on the host with the host
    /// kernels, else as MLX operations. The two give the same bits.
    fn quantize(
        &self,
        x: &Array,
        spec: QuantSpec,
        transposed: bool,
    ) -> Result<QuantizedArray, CacheError> {
        if self.kernels == Kernels::Host {
            return Ok(host::quantize::quantize(x, spec, transposed)?);
        }
        let x = if transposed {
            x.swap_axes(-1, -2)?
        } else {
            x.clone()
        };
        Ok(mlx_quant::quantize(&x, spec)?)
    }

    /// The history `held` followed by `new` along `axis`, as [`Self::quantize`] chooses.
    fn extend(
        &self,
        held: Option<&QuantizedArray>,
        new: QuantizedArray,
        axis: i32,
    ) -> Result<QuantizedArray, CacheError> {
        let Some(old) = held else { return Ok(new) };
        Ok(if self.kernels == Kernels::Host {
            host::quantize::concatenate(&[old, &new], axis)?
        } else {
            QuantizedArray::concatenate(&[old, &new], axis)?
        })
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

impl KvCache for KiviCache {
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
        let rotated = self.rotated(queries, self.key_heads());
        let out = rotated.and_then(|queries| {
            Ok(attention::attend(
                &queries,
                self.view(),
                scale,
                self.kernels,
            )?)
        });
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
            *self = Self::empty(self.config, self.kernels, self.storage);
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
        self.tokens = self.quantized + self.window.as_ref().map_or(0, Window::len);
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
        *self = Self::from_state(self.config, self.kernels, self.storage, state)?;
        Ok(())
    }
}

/// An adaptive basis's state as arrays: each head's choice, `basis.keys` and
/// `basis.values` (`[B, H, 1, 1]`, 0 or 1), or before it the queries' energy,
/// `basis.queries` (`[B, H, 1, Dk]`).
fn basis_arrays(adaptive: &Adaptive, dims: Dims) -> Vec<(&'static str, Array)> {
    let [b, h] = [dims.batch, dims.heads];
    match &adaptive.chosen {
        Some(chosen) => {
            let flags = |mask: &[bool]| {
                let flags: Vec<u32> = mask.iter().map(|&on| u32::from(on)).collect();
                Array::from_slice(&flags, &[b, h, 1, 1])
            };
            vec![
                ("basis.keys", flags(&chosen.keys)),
                ("basis.values", flags(&chosen.values)),
            ]
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

#[path = "kivi_window.rs"]
mod window;

#[path = "kivi_basis.rs"]
mod basis;

#[cfg(test)]
#[path = "kivi_tests.rs"]
mod tests;
