//! The full-precision KV cache: keys and values kept as they arrive.
//!
//! Two storages behind one type, chosen by the backend:
//!
//! - With the host kernels, host float16 buffers `[B * H, capacity, D]` (the backend's
//!   [`Backend::storage_dtype`], as other CPU engines keep their caches: half the bytes of
//!   float32 for every decode step to read) that grow with a little headroom (1/64 of the
//!   length, at least 4 tokens), so that a decode step writes one token instead of copying
//!   the whole cache. A decode step runs the fused kernel's window loops
//!   ([`kivi_kernels::fused::decode_window`]: float16 converted a chunk at a time, the
//!   tokens shared out among threads); a prompt chunk converts the held tokens to float32
//!   once and runs the host kernel ([`kivi_kernels::host::attention`]: BLAS products and a
//!   vectorized softmax). Appending by concatenation copied the whole cache every step
//!   (12.6 MB per layer at 8k tokens, as much as attention itself reads), and MLX's CPU
//!   softmax computes `exp` one lane at a time.
//! - With MLX's operations (a Mac's GPU), MLX buffers `[B, H, capacity, D]` in the compute
//!   dtype that grow in steps of [`MLX_STEP`] tokens and are written in place (a slice
//!   update, which MLX performs on the buffer itself when nothing else holds it), and
//!   MLX's fused attention over the filled part. Joining the history by concatenation
//!   copied all of it at every token, as much memory traffic as attention itself.
//!
//! `held_bytes` is what the buffers hold, headroom included.

use mlx_rs::{
    fast::{scaled_dot_product_attention, ScaledDotProductAttentionMask},
    ops::{
        concatenate,
        indexing::{IndexOp, TryIndexMutOp},
        zeros_dtype,
    },
    Array, Dtype,
};

use super::{
    host_kv::{host_floats, HostKv},
    CacheError, CacheState, KvCache, LayerKvStats,
};
use crate::backend::Backend;
use kivi_kernels::{
    fused,
    host::{
        attention::{self as host_attention, Segment, Shape},
        readable,
    },
    Kernels,
};

/// Keys and values of one layer, `[B, n_kv_heads, T, D]`.
pub struct FullCache {
    store: Store,
    /// Host buffers and the host kernels (the host backend), or MLX arrays and MLX's
    /// attention.
    host: bool,
}

#[derive(Default)]
enum Store {
    #[default]
    Empty,
    /// MLX buffers in the compute dtype.
    Mlx(MlxKv),
    /// Host float16 buffers (CPU).
    Host(HostKv),
}

/// Tokens an MLX buffer grows by (mlx-lm's step): few enough reallocations that their
/// copies cost nothing next to a step's attention, little enough headroom to account for.
pub const MLX_STEP: usize = 256;

/// MLX buffers `[B, H, capacity, D]`; the first `len` tokens are held.
struct MlxKv {
    keys: Array,
    values: Array,
    len: usize,
}

impl MlxKv {
    fn capacity(&self) -> usize {
        self.keys.dim(2) as usize
    }

    /// A buffer of `capacity` tokens shaped like `like` (`[B, H, _, D]`), zeros.
    fn buffer(like: &Array, capacity: usize) -> Result<Array, CacheError> {
        let &[b, h, _, d] = like.shape() else {
            unreachable!("4-D, checked by the caller")
        };
        Ok(zeros_dtype(&[b, h, capacity as i32, d], like.dtype())?)
    }

    /// Buffers holding `keys` and `values` (`[B, H, L, D]`), with room to grow.
    fn new(keys: &Array, values: &Array) -> Result<Self, CacheError> {
        let mut kv = Self {
            keys: Self::buffer(keys, 0)?,
            values: Self::buffer(values, 0)?,
            len: 0,
        };
        kv.append(keys, values)?;
        Ok(kv)
    }

    /// Writes `[B, H, L, D]` keys and values after the held tokens, growing the buffers
    /// by whole steps when they are full (the held part copied once).
    fn append(&mut self, keys: &Array, values: &Array) -> Result<(), CacheError> {
        let (at, len) = (self.len as i32, keys.dim(2));
        let needed = self.len + len as usize;
        if needed > self.capacity() {
            let capacity = needed.div_ceil(MLX_STEP) * MLX_STEP;
            for (buffer, like) in [(&mut self.keys, keys), (&mut self.values, values)] {
                let grown = Self::buffer(like, capacity - self.len)?;
                *buffer = if at == 0 {
                    grown
                } else {
                    concatenate(&[buffer.index((.., .., ..at, ..)), grown], 2)?
                };
            }
        }
        let dtype = self.keys.dtype();
        self.keys
            .try_index_mut((.., .., at..at + len, ..), keys.as_dtype(dtype)?)?;
        self.values
            .try_index_mut((.., .., at..at + len, ..), values.as_dtype(dtype)?)?;
        self.len = needed;
        Ok(())
    }

    /// The held keys and values, `[B, H, len, D]` views of the buffers.
    fn held(&self) -> (Array, Array) {
        let len = self.len as i32;
        (
            self.keys.index((.., .., ..len, ..)),
            self.values.index((.., .., ..len, ..)),
        )
    }
}

impl FullCache {
    /// An empty cache for a model running on `backend`.
    pub fn new(backend: Backend) -> Self {
        Self {
            store: Store::Empty,
            host: backend.kernels() == Kernels::Host,
        }
    }
}

fn dims4(a: &Array) -> Option<[usize; 4]> {
    match a.shape() {
        &[b, h, l, d] => Some([b as usize, h as usize, l as usize, d as usize]),
        _ => None,
    }
}

/// MLX's fused attention of `queries` (`L` positions) over what `kv` holds.
fn mlx_attention(queries: &Array, kv: &MlxKv, l: usize, scale: f32) -> Result<Array, CacheError> {
    let (keys, values) = kv.held();
    // MLX aligns a causal mask to the bottom right, so a chunk after a history sees the
    // whole history and itself causally.
    let mask = (l > 1).then_some(ScaledDotProductAttentionMask::Causal);
    Ok(scaled_dot_product_attention(
        queries, &keys, &values, scale, mask, None,
    )?)
}

impl KvCache for FullCache {
    fn attend(
        &mut self,
        queries: &Array,
        keys: &Array,
        values: &Array,
        scale: f32,
    ) -> Result<Array, CacheError> {
        let (Some([b, h, l, dk]), Some([vb, vh, vl, dv]), Some([qb, qh, ql, qd])) =
            (dims4(keys), dims4(values), dims4(queries))
        else {
            return Err(CacheError::Shape(format!(
                "queries, keys and values must be 4-D, got {:?}, {:?} and {:?}",
                queries.shape(),
                keys.shape(),
                values.shape()
            )));
        };
        if (b, h, l) != (vb, vh, vl) || (qb, ql, qd) != (b, l, dk) || h == 0 || qh % h != 0 {
            return Err(CacheError::Shape(format!(
                "queries {:?}, keys {:?} and values {:?} do not fit together",
                queries.shape(),
                keys.shape(),
                values.shape()
            )));
        }
        if matches!(self.store, Store::Empty) && self.host {
            self.store = Store::Host(HostKv::new(b, h, dk, dv));
        }
        match &mut self.store {
            Store::Host(host) => {
                if !host.fits(b, h, dk, dv) {
                    return Err(CacheError::Shape(format!(
                        "new keys {:?} and values {:?} differ from those held",
                        keys.shape(),
                        values.shape()
                    )));
                }
                let (k, v, q) = (
                    readable::<f32>(keys)?,
                    readable::<f32>(values)?,
                    readable::<f32>(queries)?,
                );
                host.append(host_floats(&k)?, host_floats(&v)?, l);
                let shape = Shape {
                    batch: b,
                    heads: qh,
                    kv_heads: h,
                    queries: l,
                    dim: dk,
                    value_dim: dv,
                };
                let out = if l == 1 {
                    fused::decode_window(host_floats(&q)?, qh, host.window(), scale)?
                } else {
                    let window = host.window();
                    let (keys, values) = (window.float32(true), window.float32(false));
                    let segment = |data, dim: usize| Segment {
                        data,
                        len: host.len,
                        head_stride: host.len * dim,
                        row_stride: dim,
                        channel_major: false,
                    };
                    let mut out = vec![0f32; b * qh * l * dv];
                    host_attention::attend(
                        host_floats(&q)?,
                        shape,
                        &[segment(&keys, dk)],
                        &[segment(&values, dv)],
                        scale,
                        &mut out,
                    )?;
                    out
                };
                let out = Array::from_slice(&out, &[b as i32, qh as i32, l as i32, dv as i32]);
                Ok(if queries.dtype() == Dtype::Float32 {
                    out
                } else {
                    out.as_dtype(queries.dtype())?
                })
            }
            Store::Mlx(kv) => {
                if (kv.keys.dim(1), kv.keys.dim(3), kv.values.dim(3))
                    != (h as i32, dk as i32, dv as i32)
                {
                    return Err(CacheError::Shape(format!(
                        "new keys {:?} and values {:?} differ from those held",
                        keys.shape(),
                        values.shape()
                    )));
                }
                kv.append(keys, values)?;
                mlx_attention(queries, kv, l, scale)
            }
            store => {
                let kv = MlxKv::new(keys, values)?;
                let out = mlx_attention(queries, &kv, l, scale);
                *store = Store::Mlx(kv);
                out
            }
        }
    }

    fn len(&self) -> usize {
        match &self.store {
            Store::Empty => 0,
            Store::Mlx(kv) => kv.len,
            Store::Host(host) => host.len,
        }
    }

    fn truncate(&mut self, len: usize) -> Result<usize, CacheError> {
        let keep = len.min(self.len());
        if keep == 0 {
            self.store = Store::Empty;
            return Ok(0);
        }
        match &mut self.store {
            Store::Empty => {}
            // The buffers keep their capacity: a shared prefix is usually followed by new
            // tokens at once.
            Store::Host(host) => host.len = keep,
            Store::Mlx(kv) => kv.len = keep,
        }
        Ok(keep)
    }

    fn stats(&self) -> LayerKvStats {
        let (tokens, held_bytes, elements) = match &self.store {
            Store::Empty => (0, 0, 0),
            Store::Mlx(kv) => (
                kv.len,
                (kv.keys.nbytes() + kv.values.nbytes()) as u64,
                ((kv.keys.size() + kv.values.size()) / kv.capacity().max(1) * kv.len) as u64,
            ),
            Store::Host(host) => (
                host.len,
                host.bytes(),
                (host.pairs() * host.len * (host.key_dim + host.value_dim)) as u64,
            ),
        };
        LayerKvStats {
            tokens,
            quantized_tokens: 0,
            sink_tokens: 0,
            residual_tokens: tokens,
            residual_capacity: 0,
            fp16_bytes: elements * 2,
            held_bytes,
            window: 0,
        }
    }

    fn state(&self) -> Result<CacheState, CacheError> {
        let arrays = match &self.store {
            Store::Empty => Vec::new(),
            Store::Mlx(kv) => {
                // Copies of exactly the held tokens: a view would save the headroom too.
                let (keys, values) = kv.held();
                vec![
                    ("keys".to_string(), keys.contiguous()?),
                    ("values".to_string(), values.contiguous()?),
                ]
            }
            Store::Host(host) => {
                let (keys, values) = host.window().arrays();
                vec![("keys".to_string(), keys), ("values".to_string(), values)]
            }
        };
        mlx_rs::transforms::eval(arrays.iter().map(|(_, a)| a))?;
        Ok(CacheState {
            tokens: self.len(),
            arrays,
        })
    }

    fn restore(&mut self, state: CacheState) -> Result<(), CacheError> {
        let bad = |why: String| Err(CacheError::State(why));
        let (mut keys, mut values) = (None, None);
        for (name, array) in state.arrays {
            match name.as_str() {
                "keys" => keys = Some(array),
                "values" => values = Some(array),
                other => return bad(format!("unknown array {other:?}")),
            }
        }
        let (keys, values) = match (keys, values) {
            (None, None) if state.tokens == 0 => {
                self.store = Store::Empty;
                return Ok(());
            }
            (Some(k), Some(v)) => (k, v),
            _ => {
                return bad(format!(
                    "keys and values do not hold {} tokens",
                    state.tokens
                ))
            }
        };
        let (&[b, h, t, _], &[vb, vh, vt, _]) = (keys.shape(), values.shape()) else {
            return bad("keys and values must be 4-D".into());
        };
        if (b, h, t) != (vb, vh, vt) || t as usize != state.tokens || t <= 0 || b <= 0 || h <= 0 {
            return bad(format!(
                "keys {:?} and values {:?} do not hold {} tokens",
                keys.shape(),
                values.shape(),
                state.tokens
            ));
        }
        if keys.dtype() != values.dtype() || !kivi_kernels::attention::is_float(keys.dtype()) {
            return bad(format!(
                "keys {:?} and values {:?} must be one float dtype",
                keys.dtype(),
                values.dtype()
            ));
        }
        self.store = if self.host {
            Store::Host(HostKv::from_arrays(&keys, &values, 0)?)
        } else {
            Store::Mlx(MlxKv::new(&keys, &values)?)
        };
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use kivi_kernels::attention::full_precision;

    fn f32s(a: &Array) -> Vec<f32> {
        let a = a.as_dtype(Dtype::Float32).unwrap();
        a.eval().unwrap();
        a.as_slice::<f32>().to_vec()
    }

    /// What a cache on `backend` holds of `a`: rounded to its full cache's dtype (float16
    /// on the host).
    fn as_held(a: &Array, backend: Backend) -> Array {
        if backend.full_cache_dtype() == Dtype::Float16 {
            let rounded = a.as_dtype(Dtype::Float16).unwrap();
            rounded.as_dtype(Dtype::Float32).unwrap()
        } else {
            a.clone()
        }
    }

    fn normals(seed: u64, shape: &[i32]) -> Array {
        let n: i32 = shape.iter().product();
        let values = kivi_kernels::testdata::XorShift::new(seed).normals(n as usize);
        Array::from_slice(&values, shape)
    }

    /// Both storages: host buffers (the host backend) and MLX arrays (a Mac's).
    const BACKENDS: [Backend; 2] = [
        Backend::HOST,
        Backend::mlx(crate::backend::Device::Cpu, crate::backend::Precision::F32),
    ];

    #[test]
    fn chunks_and_single_tokens_equal_attention_over_everything() {
        for backend in BACKENDS {
            chunks_and_single_tokens(backend);
        }
    }

    /// 9 query heads over 3 KV heads, appended 37 + 1 + 1 + 300 + 5 tokens: the host
    /// buffers grow with headroom several times.
    fn chunks_and_single_tokens(backend: Backend) {
        let (heads, kv, d) = (9, 3, 16);
        let total = 344;
        let keys = normals(1, &[1, kv, total, d]);
        let values = normals(2, &[1, kv, total, d]);
        let queries = normals(3, &[1, heads, total, d]);
        let mut cache = FullCache::new(backend);
        let mut at = 0;
        for len in [37, 1, 1, 300, 5] {
            use mlx_rs::ops::indexing::IndexOp;
            let from = at;
            let part = |a: &Array| a.index((.., .., from..from + len, ..));
            let out = cache
                .attend(&part(&queries), &part(&keys), &part(&values), 0.25)
                .unwrap();
            at += len;
            // Against attention over what the cache holds (float16 on the host), the
            // kernels' own difference: the summation order.
            let want = full_precision(
                &part(&queries),
                &as_held(&keys.index((.., .., ..at, ..)), backend),
                &as_held(&values.index((.., .., ..at, ..)), backend),
                0.25,
            )
            .unwrap();
            let worst = f32s(&out)
                .iter()
                .zip(f32s(&want))
                .map(|(a, b)| (a - b).abs())
                .fold(0f32, f32::max);
            assert!(worst < 1e-5, "{backend}, after {at} tokens: {worst}");
            assert_eq!(cache.len(), at as usize);
            let stats = cache.stats();
            assert_eq!(stats.fp16_bytes, (2 * kv * at * d * 2) as u64);
            let element = if backend.full_cache_dtype() == Dtype::Float16 {
                2
            } else {
                4
            };
            assert!(stats.held_bytes >= (2 * kv * at * d * element) as u64);
        }
        // Saved and restored, truncated: the same contents.
        let state = cache.state().unwrap();
        let mut restored = FullCache::new(backend);
        restored.restore(state.clone()).unwrap();
        assert_eq!(restored.len(), total as usize);
        let again = restored.state().unwrap();
        for ((_, a), (_, b)) in state.arrays.iter().zip(&again.arrays) {
            assert_eq!(f32s(a), f32s(b));
        }
        assert_eq!(restored.truncate(100).unwrap(), 100);
        let cut = restored.state().unwrap();
        assert_eq!(cut.arrays[0].1.shape(), &[1, kv, 100, d]);
        assert_eq!(restored.truncate(0).unwrap(), 0);
        assert_eq!(restored.stats().held_bytes, 0);
    }

    /// The MLX store grows by whole steps and writes later tokens into the same buffer:
    /// MLX updates it in place (its data pointer stays), not a copy per token.
    #[test]
    fn the_mlx_store_grows_in_steps_and_writes_in_place() {
        let mut cache = FullCache::new(BACKENDS[1]);
        let (kv, d) = (3, 16);
        let step = |cache: &mut FullCache, seed: u64, len: i32| {
            let k = normals(seed, &[1, kv, len, d]);
            let q = normals(seed + 1, &[1, 2 * kv, len, d]);
            let out = cache.attend(&q, &k, &k, 0.25).unwrap();
            out.eval().unwrap();
        };
        let data = |cache: &FullCache| match &cache.store {
            Store::Mlx(kv) => {
                kv.keys.eval().unwrap();
                kv.keys.as_slice::<f32>().as_ptr() as usize
            }
            _ => unreachable!("an MLX store"),
        };
        step(&mut cache, 10, 200);
        let first = data(&cache);
        let bytes = (2 * kv * MLX_STEP as i32 * d * 4) as u64;
        assert_eq!(cache.stats().held_bytes, bytes);
        for i in 0..56 {
            step(&mut cache, 20 + 2 * i, 1);
        }
        assert_eq!(cache.len(), 256);
        assert_eq!(data(&cache), first, "a decode step copied the buffer");
        assert_eq!(cache.stats().held_bytes, bytes);
        step(&mut cache, 200, 1);
        assert_eq!(cache.stats().held_bytes, 2 * bytes);
        assert_eq!(cache.stats().fp16_bytes, (2 * kv * 257 * d * 2) as u64);
    }

    #[test]
    fn the_first_append_is_held_exactly() {
        let mut cache = FullCache::new(Backend::HOST);
        let kv = normals(4, &[1, 1, 3, 4]);
        let q = normals(5, &[1, 2, 3, 4]);
        cache.attend(&q, &kv, &kv, 0.5).unwrap();
        assert_eq!(cache.stats().held_bytes, 2 * 12 * 2);
    }
}
