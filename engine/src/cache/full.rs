//! The full-precision KV cache: keys and values kept as they arrive.
//!
//! Each runtime keeps them its own way ([`CacheConfig::make`](super::CacheConfig::make)
//! chooses once): the host runtime in float16 host buffers written in place
//! (`runtime/host/full.rs`), the MLX runtime in MLX buffers grown in steps
//! (`runtime/mlx/full.rs`). What both follow lives here: the shapes a call must have, the
//! statistics, and what a saved state must hold. `held_bytes` is what the buffers hold,
//! headroom included.

use mlx_rs::Array;

use super::{CacheError, CacheState, LayerKvStats};

/// The shapes of one call: `B`, KV heads `H`, new positions `L`, key and value head
/// dimensions, and query heads (a multiple of `H`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Call {
    pub(crate) batch: usize,
    pub(crate) kv_heads: usize,
    pub(crate) len: usize,
    pub(crate) key_dim: usize,
    pub(crate) value_dim: usize,
    pub(crate) heads: usize,
}

fn dims4(a: &Array) -> Option<[usize; 4]> {
    match a.shape() {
        &[b, h, l, d] => Some([b as usize, h as usize, l as usize, d as usize]),
        _ => None,
    }
}

/// Checks queries `[B, n_heads, L, D]` against keys and values `[B, H, L, D]`.
pub(crate) fn check_call(
    queries: &Array,
    keys: &Array,
    values: &Array,
) -> Result<Call, CacheError> {
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
    Ok(Call {
        batch: b,
        kv_heads: h,
        len: l,
        key_dim: dk,
        value_dim: dv,
        heads: qh,
    })
}

/// The error for new keys and values whose heads or dimensions differ from those held.
pub(crate) fn differs(keys: &Array, values: &Array) -> CacheError {
    CacheError::Shape(format!(
        "new keys {:?} and values {:?} differ from those held",
        keys.shape(),
        values.shape()
    ))
}

/// A full cache's statistics: `tokens` held in `held_bytes`, `elements` key and value
/// numbers (2 bytes each in float16).
pub(crate) fn stats(tokens: usize, held_bytes: u64, elements: u64) -> LayerKvStats {
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

/// Keeps the first `len` of the positions `store` holds (its count, `held`), or drops the
/// store when that is none; returns the positions kept. The buffers keep their capacity: a
/// shared prefix is usually followed by new tokens at once.
pub(crate) fn truncate<S>(
    store: &mut Option<S>,
    len: usize,
    held: impl Fn(&mut S) -> &mut usize,
) -> usize {
    let kept = store.as_mut().map_or(0, |s| {
        let kept = len.min(*held(s));
        *held(s) = kept;
        kept
    });
    if kept == 0 {
        *store = None;
    }
    kept
}

/// The saved state of a full cache holding `tokens` positions as `kv` (keys, values
/// `[B, H, T, D]` of exactly those positions), evaluated.
pub(crate) fn state(tokens: usize, kv: Option<(Array, Array)>) -> Result<CacheState, CacheError> {
    let arrays = match kv {
        None => Vec::new(),
        Some((keys, values)) => vec![("keys".to_string(), keys), ("values".to_string(), values)],
    };
    mlx_rs::transforms::eval(arrays.iter().map(|(_, a)| a))?;
    Ok(CacheState { tokens, arrays })
}

/// The keys and values `[B, H, T, D]` of a saved full cache, checked (`None`: empty).
pub(crate) fn restored(state: CacheState) -> Result<Option<(Array, Array)>, CacheError> {
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
        (None, None) if state.tokens == 0 => return Ok(None),
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
    Ok(Some((keys, values)))
}

#[cfg(test)]
mod tests {
    use crate::backend::Backend;
    use crate::cache::CacheConfig;
    use kivi_kernels::attention::full_precision;
    use mlx_rs::{Array, Dtype};

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
        let mut cache = CacheConfig::Full.make(&backend);
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
        let mut restored = CacheConfig::Full.make(&backend);
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

    #[test]
    fn the_first_append_is_held_exactly() {
        let mut cache = CacheConfig::Full.make(&Backend::HOST);
        let kv = normals(4, &[1, 1, 3, 4]);
        let q = normals(5, &[1, 2, 3, 4]);
        cache.attend(&q, &kv, &kv, 0.5).unwrap();
        assert_eq!(cache.stats().held_bytes, 2 * 12 * 2);
    }
}
