//! The cache of a sliding-window layer: the newest positions, in full precision.
//!
//! A window layer (five of Gemma 3's six) lets position `p` attend to positions
//! `p - W + 1 ..= p` only, so the cache never needs more than the last `W - 1` positions
//! before a chunk. It keeps [`TRUNCATE_SLACK`] more, so that a follow-up that shares all
//! but the last few tokens of the previous prompt (a chat's regenerated answer) can cut
//! back instead of reading the whole conversation again. KIVI's quantization belongs on
//! the global layers, whose history grows with the context; a window is small and is held
//! as it arrives (mlx-lm's rotating cache does the same and cannot quantize either).
//!
//! Its keys and values are MLX arrays in the dtype the backend keeps a full cache in
//! (float16 on the host backend, whose float32 compute converts a window's worth per
//! step), attended with MLX's fused attention and a mask of the window's band. What it
//! holds depends only on the positions seen, never on how they were chunked.

use mlx_rs::{
    fast::{scaled_dot_product_attention, ScaledDotProductAttentionMask},
    ops::{concatenate, indexing::IndexOp},
    Array,
};

use super::{CacheError, CacheState, KvCache, LayerKvStats};
use crate::backend::Backend;

/// Positions kept beyond the window, for cutting a conversation back by a few tokens.
pub const TRUNCATE_SLACK: usize = 256;

/// Keys and values of the newest positions of one window layer, `[B, n_kv_heads, T, D]`.
pub struct WindowCache {
    window: usize,
    /// `(keys, values)` of the newest `held` positions; `None` before the first.
    kv: Option<(Array, Array)>,
    /// Positions seen: the next position is this one.
    seen: usize,
    /// The dtype keys and values are held in.
    dtype: mlx_rs::Dtype,
}

impl WindowCache {
    /// An empty cache for a layer attending over the last `window` positions, of a model
    /// running on `backend`.
    pub fn new(window: usize, backend: &Backend) -> Self {
        Self {
            window: window.max(1),
            kv: None,
            seen: 0,
            dtype: backend.full_cache_dtype(),
        }
    }

    /// Most positions held between chunks.
    pub fn capacity(&self) -> usize {
        self.window - 1 + TRUNCATE_SLACK
    }

    fn held(&self) -> usize {
        self.kv.as_ref().map_or(0, |(k, _)| k.dim(2) as usize)
    }

    /// The first position held.
    fn first(&self) -> usize {
        self.seen - self.held()
    }

    /// The newest `keep` positions of `[B, H, T, D]` buffers.
    fn newest(keys: &Array, values: &Array, keep: usize) -> (Array, Array) {
        let from = (keys.dim(2) as usize).saturating_sub(keep) as i32;
        (
            keys.index((.., .., from.., ..)),
            values.index((.., .., from.., ..)),
        )
    }

    /// The additive band mask `[L, T]` of `l` queries from position `self.seen` over keys
    /// from position `first`, or `None` where every key is visible to every query (one
    /// query whose keys all lie within its window).
    fn mask(&self, first: usize, keys: usize, l: usize) -> Option<Array> {
        let last_key = first + keys - 1;
        if l == 1 && last_key + 1 - first <= self.window {
            return None;
        }
        let mut mask = Vec::with_capacity(l * keys);
        for q in self.seen..self.seen + l {
            for k in first..=last_key {
                let visible = k <= q && q - k < self.window;
                mask.push(visible);
            }
        }
        Some(Array::from_slice(&mask, &[l as i32, keys as i32]))
    }
}

fn dims4(a: &Array) -> Option<[i32; 4]> {
    match a.shape() {
        &[b, h, l, d] => Some([b, h, l, d]),
        _ => None,
    }
}

impl KvCache for WindowCache {
    fn attend(
        &mut self,
        queries: &Array,
        keys: &Array,
        values: &Array,
        scale: f32,
    ) -> Result<Array, CacheError> {
        let (Some([b, h, l, _]), Some(v), Some(q)) = (dims4(keys), dims4(values), dims4(queries))
        else {
            return Err(CacheError::Shape(format!(
                "keys {:?}, values {:?} and queries {:?} must be 4-D",
                keys.shape(),
                values.shape(),
                queries.shape()
            )));
        };
        if v[..3] != [b, h, l] || q[0] != b || q[2] != l || h == 0 || q[1] % h != 0 {
            return Err(CacheError::Shape(format!(
                "keys {:?}, values {:?} and queries {:?} do not fit together",
                keys.shape(),
                values.shape(),
                queries.shape()
            )));
        }
        if let Some((held_k, _)) = &self.kv {
            if held_k.shape()[..2] != [b, h] || held_k.dim(3) != keys.dim(3) {
                return Err(CacheError::Shape(format!(
                    "keys {:?} after a history of {:?}",
                    keys.shape(),
                    held_k.shape()
                )));
            }
        }
        let l = l as usize;
        // Attention reads the queries' dtype; the new positions are rounded to the held
        // dtype first, so that they read the same as when they are history.
        let (store, compute) = (self.dtype, queries.dtype());
        let (keys, values) = (keys.as_dtype(store)?, values.as_dtype(store)?);
        let capacity = self.capacity();
        // What is held next: the newest positions of the whole history, so that it never
        // depends on the chunking; one copy per step.
        let old = self.kv.take();
        let (held_k, held_v) = match &old {
            Some((k, v)) if l < capacity => {
                let (k, v) = Self::newest(k, v, capacity - l);
                (
                    concatenate(&[k, keys.clone()], 2)?,
                    concatenate(&[v, values.clone()], 2)?,
                )
            }
            _ => {
                let (k, v) = Self::newest(&keys, &values, capacity);
                (k.contiguous()?, v.contiguous()?)
            }
        };
        // The keys in some query's window: the last W - 1 positions before the chunk and
        // the chunk, a suffix of what is held unless the chunk is longer than the slack.
        let before = self.seen.min(self.window - 1);
        let (all_k, all_v) = if before + l <= held_k.dim(2) as usize {
            Self::newest(&held_k, &held_v, before + l)
        } else {
            let (k, v) = match &old {
                Some((k, v)) => Self::newest(k, v, before),
                None => (
                    keys.index((.., .., ..0, ..)),
                    values.index((.., .., ..0, ..)),
                ),
            };
            (
                concatenate(&[k, keys.clone()], 2)?,
                concatenate(&[v, values.clone()], 2)?,
            )
        };
        let (all_k, all_v) = (all_k.as_dtype(compute)?, all_v.as_dtype(compute)?);
        let mask = self.mask(self.seen - before, before + l, l);
        let out = scaled_dot_product_attention(
            queries,
            &all_k,
            &all_v,
            scale,
            mask.as_ref().map(ScaledDotProductAttentionMask::Array),
            None,
        )?;
        mlx_rs::transforms::eval([&held_k, &held_v])?;
        self.kv = Some((held_k, held_v));
        self.seen += l;
        Ok(out)
    }

    fn len(&self) -> usize {
        self.seen
    }

    /// Exact while the positions `len - W + 1 .. len` are still held; otherwise nothing is
    /// kept (0), and the caller runs the prompt again.
    fn truncate(&mut self, len: usize) -> Result<usize, CacheError> {
        if len >= self.seen {
            return Ok(self.seen);
        }
        let needed_from = len.saturating_sub(self.window - 1);
        if needed_from < self.first() || len == 0 {
            self.kv = None;
            self.seen = 0;
            return Ok(0);
        }
        if let Some((k, v)) = &self.kv {
            let keep = (len - self.first()) as i32;
            self.kv = Some((k.index((.., .., ..keep, ..)), v.index((.., .., ..keep, ..))));
        }
        self.seen = len;
        Ok(len)
    }

    fn stats(&self) -> LayerKvStats {
        let (held_bytes, fp16_bytes) = match &self.kv {
            Some((k, v)) => (
                (k.nbytes() + v.nbytes()) as u64,
                ((k.size() + v.size()) * 2) as u64,
            ),
            None => (0, 0),
        };
        LayerKvStats {
            tokens: self.held(),
            window: self.window,
            fp16_bytes,
            held_bytes,
            ..LayerKvStats::default()
        }
    }

    fn state(&self) -> Result<CacheState, CacheError> {
        let mut arrays = Vec::new();
        if let Some((k, v)) = &self.kv {
            arrays.push(("keys".to_string(), k.clone()));
            arrays.push(("values".to_string(), v.clone()));
        }
        Ok(CacheState {
            tokens: self.seen,
            arrays,
        })
    }

    fn restore(&mut self, state: CacheState) -> Result<(), CacheError> {
        let bad = |why: String| Err(CacheError::State(why));
        let expected = state.tokens.min(self.capacity());
        let mut arrays = state.arrays;
        arrays.sort_by(|a, b| a.0.cmp(&b.0));
        let kv = match arrays.as_slice() {
            [] if state.tokens == 0 => None,
            [(kn, k), (vn, v)] if kn == "keys" && vn == "values" => {
                let (Some(ks), Some(vs)) = (dims4(k), dims4(v)) else {
                    return bad("a window's keys and values must be 4-D".into());
                };
                if ks[..3] != vs[..3]
                    || ks[2] as usize != expected
                    || k.dtype() != self.dtype
                    || v.dtype() != self.dtype
                {
                    return bad(format!(
                        "a window of {} positions holding keys {ks:?} ({:?}) and values {vs:?} \
                         ({:?}) after {} positions; {:?} expected",
                        self.window,
                        k.dtype(),
                        v.dtype(),
                        state.tokens,
                        self.dtype
                    ));
                }
                Some((k.clone(), v.clone()))
            }
            other => {
                let names: Vec<&str> = other.iter().map(|(n, _)| n.as_str()).collect();
                return bad(format!(
                    "a window cache holds keys and values, not {names:?} for {} positions",
                    state.tokens
                ));
            }
        };
        self.kv = kv;
        self.seen = state.tokens;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::backend::{Device, Precision};

    const MLX_F32: Backend = Backend::mlx(Device::Cpu, Precision::F32);

    /// Deterministic `[1, heads, len, dim]` values for positions `from..from + len`.
    fn data(heads: usize, from: usize, len: usize, dim: usize, seed: f32) -> Array {
        let mut v = Vec::with_capacity(heads * len * dim);
        for h in 0..heads {
            for p in from..from + len {
                for d in 0..dim {
                    v.push(((h * 131 + p * 17 + d * 7) as f32 * 0.37 + seed).sin());
                }
            }
        }
        Array::from_slice(&v, &[1, heads as i32, len as i32, dim as i32])
    }

    fn values(a: &Array) -> Vec<f32> {
        let a = a
            .as_dtype(mlx_rs::Dtype::Float32)
            .unwrap()
            .contiguous()
            .unwrap();
        a.eval().unwrap();
        a.as_slice::<f32>().to_vec()
    }

    /// Feeds positions `0..total` in `chunks` (repeated), returning each position's output
    /// `[heads, dim]` rows and the cache.
    fn run(window: usize, total: usize, chunks: &[usize]) -> (Vec<Vec<f32>>, WindowCache) {
        let (heads, kv_heads, dim) = (4, 2, 8);
        let mut cache = WindowCache::new(window, &MLX_F32);
        let mut outs = vec![Vec::new(); total];
        let mut at = 0;
        for &chunk in chunks.iter().cycle() {
            if at == total {
                break;
            }
            let l = chunk.min(total - at);
            let q = data(heads, at, l, dim, 0.1);
            let k = data(kv_heads, at, l, dim, 0.2);
            let v = data(kv_heads, at, l, dim, 0.3);
            let out = values(&cache.attend(&q, &k, &v, 0.35).unwrap());
            for h in 0..heads {
                for i in 0..l {
                    outs[at + i].extend(&out[(h * l + i) * dim..][..dim]);
                }
            }
            at += l;
        }
        (outs, cache)
    }

    /// Attention of position `p` over positions `p - window + 1 ..= p`, by hand.
    fn reference(window: usize, p: usize) -> Vec<f32> {
        let (heads, kv_heads, dim) = (4, 2, 8);
        let q = values(&data(heads, p, 1, dim, 0.1));
        let first = (p + 1).saturating_sub(window);
        let k = values(&data(kv_heads, first, p + 1 - first, dim, 0.2));
        let v = values(&data(kv_heads, first, p + 1 - first, dim, 0.3));
        let n = p + 1 - first;
        let mut out = Vec::new();
        for h in 0..heads {
            let g = h / (heads / kv_heads);
            let scores: Vec<f32> = (0..n)
                .map(|j| {
                    (0..dim)
                        .map(|d| q[h * dim + d] * k[(g * n + j) * dim + d])
                        .sum::<f32>()
                        * 0.35
                })
                .collect();
            let max = scores.iter().copied().fold(f32::MIN, f32::max);
            let weights: Vec<f32> = scores.iter().map(|s| (s - max).exp()).collect();
            let sum: f32 = weights.iter().sum();
            for d in 0..dim {
                out.push(
                    (0..n)
                        .map(|j| weights[j] * v[(g * n + j) * dim + d])
                        .sum::<f32>()
                        / sum,
                );
            }
        }
        out
    }

    fn state_bytes(cache: &WindowCache) -> (usize, Vec<Vec<f32>>) {
        let state = cache.state().unwrap();
        (
            state.tokens,
            state.arrays.iter().map(|(_, a)| values(a)).collect(),
        )
    }

    #[test]
    fn each_position_attends_to_its_window_whatever_the_chunks() {
        let (window, total) = (8, 40);
        let (whole, cache) = run(window, total, &[total]);
        for chunks in [&[1][..], &[3], &[7, 1, 2], &[9]] {
            let (outs, chunked) = run(window, total, chunks);
            assert_eq!(state_bytes(&chunked), state_bytes(&cache), "{chunks:?}");
            for p in 0..total {
                let want = reference(window, p);
                for (got, want) in outs[p].iter().zip(&want) {
                    assert!((got - want).abs() < 1e-5, "{chunks:?} position {p}");
                }
                for (a, b) in outs[p].iter().zip(&whole[p]) {
                    assert!((a - b).abs() < 1e-5);
                }
            }
        }
        assert_eq!(cache.len(), total);
        assert_eq!(cache.stats().tokens, total.min(cache.capacity()));
        assert_eq!(cache.stats().window, window);
    }

    #[test]
    fn holds_the_window_and_its_slack_only() {
        let (window, total) = (4, 400);
        let (_, cache) = run(window, total, &[50]);
        let held = window - 1 + TRUNCATE_SLACK;
        assert_eq!(cache.stats().tokens, held);
        // 2 KV heads of 8 float32 values each, keys and values.
        assert_eq!(cache.stats().held_bytes, (held * 2 * 8 * 4 * 2) as u64);
        assert_eq!(cache.stats().fp16_bytes, (held * 2 * 8 * 2 * 2) as u64);
    }

    #[test]
    fn truncation_is_exact_within_the_slack_and_refused_beyond() {
        let (window, total) = (8, 300);
        let (_, mut cache) = run(window, total, &[13]);
        // Back 100 positions: still held, so the cache is the one of 200 positions.
        assert_eq!(cache.truncate(200).unwrap(), 200);
        let (_, fresh) = run(window, 200, &[13]);
        let (tokens, arrays) = state_bytes(&cache);
        let (fresh_tokens, fresh_arrays) = state_bytes(&fresh);
        assert_eq!(tokens, fresh_tokens);
        // The fresh cache holds the newest positions before 200; the cut one those too, and
        // the next step of each reads the same window.
        let tail = |a: &Vec<f32>, n: usize| a[a.len() - n..].to_vec();
        for (a, b) in arrays.iter().zip(&fresh_arrays) {
            let n = (window - 1) * 2 * 8;
            assert_eq!(tail(a, n), tail(b, n));
        }
        // Back past what is held: nothing is kept.
        assert_eq!(cache.truncate(10).unwrap(), 0);
        assert_eq!((cache.len(), cache.stats().tokens), (0, 0));
        // Within the first window everything is held.
        let (_, mut short) = run(window, 6, &[6]);
        assert_eq!(short.truncate(2).unwrap(), 2);
    }

    #[test]
    fn restore_takes_its_own_state_and_refuses_others() {
        let (_, cache) = run(8, 20, &[5]);
        let mut copy = WindowCache::new(8, &MLX_F32);
        copy.restore(cache.state().unwrap()).unwrap();
        assert_eq!(state_bytes(&copy), state_bytes(&cache));
        let mut state = cache.state().unwrap();
        state.tokens = 21;
        assert!(matches!(
            WindowCache::new(8, &MLX_F32).restore(state),
            Err(CacheError::State(_))
        ));
        let mut state = cache.state().unwrap();
        state.arrays.pop();
        assert!(WindowCache::new(8, &MLX_F32).restore(state).is_err());
    }
}
