//! The MLX runtime's full-precision cache: MLX buffers `[B, H, capacity, D]` in the
//! compute dtype that grow in steps of [`MLX_STEP`] tokens and are written in place (a
//! slice update, which MLX performs on the buffer itself when nothing else holds it), and
//! MLX's fused attention over the filled part. Joining the history by concatenation copied
//! all of it at every token, as much memory traffic as attention itself.

use mlx_rs::{
    fast::{scaled_dot_product_attention, ScaledDotProductAttentionMask},
    ops::{
        concatenate,
        indexing::{IndexOp, TryIndexMutOp},
        zeros_dtype,
    },
    Array,
};

use crate::cache::full::{check_call, differs, restored, state, stats, truncate};
use crate::cache::{CacheError, CacheState, KvCache, LayerKvStats};

/// Keys and values of one layer in MLX buffers.
#[derive(Default)]
pub(crate) struct MlxFullCache {
    kv: Option<MlxKv>,
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

impl KvCache for MlxFullCache {
    fn attend(
        &mut self,
        queries: &Array,
        keys: &Array,
        values: &Array,
        scale: f32,
    ) -> Result<Array, CacheError> {
        let call = check_call(queries, keys, values)?;
        match &mut self.kv {
            Some(kv) => {
                let held = (kv.keys.dim(1), kv.keys.dim(3), kv.values.dim(3));
                let new = (call.kv_heads, call.key_dim, call.value_dim);
                if held != (new.0 as i32, new.1 as i32, new.2 as i32) {
                    return Err(differs(keys, values));
                }
                kv.append(keys, values)?;
                mlx_attention(queries, kv, call.len, scale)
            }
            None => {
                let kv = MlxKv::new(keys, values)?;
                let out = mlx_attention(queries, &kv, call.len, scale);
                self.kv = Some(kv);
                out
            }
        }
    }

    fn len(&self) -> usize {
        self.kv.as_ref().map_or(0, |kv| kv.len)
    }

    fn truncate(&mut self, len: usize) -> Result<usize, CacheError> {
        Ok(truncate(&mut self.kv, len, |kv| &mut kv.len))
    }

    fn stats(&self) -> LayerKvStats {
        match &self.kv {
            None => stats(0, 0, 0),
            Some(kv) => stats(
                kv.len,
                (kv.keys.nbytes() + kv.values.nbytes()) as u64,
                ((kv.keys.size() + kv.values.size()) / kv.capacity().max(1) * kv.len) as u64,
            ),
        }
    }

    fn state(&self) -> Result<CacheState, CacheError> {
        // Copies of exactly the held tokens: a view would save the headroom too.
        let kv = match &self.kv {
            Some(kv) => {
                let (keys, values) = kv.held();
                Some((keys.contiguous()?, values.contiguous()?))
            }
            None => None,
        };
        state(self.len(), kv)
    }

    fn restore(&mut self, state: CacheState) -> Result<(), CacheError> {
        self.kv = match restored(state)? {
            Some((keys, values)) => Some(MlxKv::new(&keys, &values)?),
            None => None,
        };
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn normals(seed: u64, shape: &[i32]) -> Array {
        let n: i32 = shape.iter().product();
        let values = kivi_kernels::testdata::XorShift::new(seed).normals(n as usize);
        Array::from_slice(&values, shape)
    }

    /// The MLX store grows by whole steps and writes later tokens into the same buffer:
    /// MLX updates it in place (its data pointer stays), not a copy per token.
    #[test]
    fn the_mlx_store_grows_in_steps_and_writes_in_place() {
        let mut cache = MlxFullCache::default();
        let (kv, d) = (3, 16);
        let step = |cache: &mut MlxFullCache, seed: u64, len: i32| {
            let k = normals(seed, &[1, kv, len, d]);
            let q = normals(seed + 1, &[1, 2 * kv, len, d]);
            let out = cache.attend(&q, &k, &k, 0.25).unwrap();
            out.eval().unwrap();
        };
        let data = |cache: &MlxFullCache| {
            let kv = cache.kv.as_ref().expect("an MLX store");
            kv.keys.eval().unwrap();
            kv.keys.as_slice::<f32>().as_ptr() as usize
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
}
