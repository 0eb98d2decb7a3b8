//! Attention over a KIVI cache without rebuilding the quantized history in full precision.
//!
//! Scores over the quantized keys come from MLX's `quantized_matmul` on the packed data
//! (per-channel keys are stored `[D, Tq]`, so `q @ K^T` is a plain `x @ W` with
//! `transpose = false`); scores over the residual window are an ordinary matmul. One softmax
//! runs over both, and the weights multiply the packed values (again `quantized_matmul`,
//! values `[Tq, D]` grouped along `D`) plus the residual values.
//!
//! Grouped-query attention reshapes the queries `[B, H, L, D]` to `[B, n_kv, rep * L, D]`
//! (heads `kv * rep .. kv * rep + rep` share KV head `kv`), so keys and values are never
//! repeated.

use mlx_rs::{ops, Array, Dtype};

use crate::{
    cache_view::{CacheView, Residual},
    dispatch::Kernels,
    host::{dequantize::dequantize, readable},
    KernelError, KeyAxis,
};

/// Query positions attended at once: bounds the scores of a long prefill chunk to
/// `H * QUERY_BLOCK * T` floats (about 300 MB at H = 9, T = 32k) instead of `H * L * T`.
pub const QUERY_BLOCK: usize = 256;

/// Attention output `[B, H, L, Dv]` of `queries` `[B, H, L, D]` over everything in `cache`,
/// by the kernels the backend chose.
///
/// With the host kernels, single-position decode with per-channel keys runs the plain-Rust
/// kernel in [`crate::fused`] (measured faster than MLX's CPU quantized matmul, see the
/// README), and everything else [`attend_host`]; both need float32 queries. With MLX,
/// [`attend_mlx`] runs, on whatever device MLX's default stream is.
pub fn attend(
    queries: &Array,
    cache: CacheView<'_>,
    scale: f32,
    kernels: Kernels,
) -> Result<Array, KernelError> {
    match kernels {
        Kernels::Host if crate::fused::accepts(queries, &cache) => {
            crate::fused::decode(queries, cache, scale)
        }
        Kernels::Host => attend_host(queries, cache, scale),
        Kernels::Mlx => attend_mlx(queries, cache, scale),
    }
}

fn host_slice(a: &Array) -> Result<&[f32], KernelError> {
    a.try_as_slice::<f32>()
        .map_err(|e| KernelError::Shape(format!("cannot read an array on the host: {e}")))
}

/// One run of a cache's keys and values in float32, `[B, H, T, D]` each (keys `[B, H, D, T]`
/// when channel-major): the tokens `rows` of every (batch, KV head) pair.
struct Part<'a> {
    keys: &'a [f32],
    key_shape: &'a [usize],
    values: &'a [f32],
    value_shape: &'a [usize],
    channel_major: bool,
    rows: std::ops::Range<usize>,
}

impl<'a> Part<'a> {
    /// Tokens `rows` of token-major keys and values.
    fn rows(
        keys: &'a [f32],
        key_shape: &'a [usize],
        values: &'a [f32],
        value_shape: &'a [usize],
        rows: std::ops::Range<usize>,
    ) -> Self {
        Self {
            keys,
            key_shape,
            values,
            value_shape,
            channel_major: false,
            rows,
        }
    }
}

/// The same attention as [`attend_mlx`], on the CPU: the quantized history is dequantized
/// (to float32, for this call only, by [`crate::host::dequantize`]) and attended with the
/// residual window by [`crate::host::attention`] (BLAS products, vectorized softmax).
///
/// Dequantizing costs `O(T * D)` per call against the `O(L * T * D)` of a chunk's
/// attention; the products then run at BLAS speed instead of MLX's scalar CPU
/// `quantized_matmul`, and the softmax without MLX's scalar `exp`. The result equals
/// attention over what the cache stands for, as the MLX path's does, to float rounding.
pub fn attend_host(
    queries: &Array,
    cache: CacheView<'_>,
    scale: f32,
) -> Result<Array, KernelError> {
    use crate::host::attention::{attend, Segment, Shape};
    let &[batch, heads, len, dim] = queries.shape() else {
        return Err(KernelError::Shape(format!(
            "queries must be [B, heads, L, D], got {:?}",
            queries.shape()
        )));
    };
    if cache.keys.is_some() != cache.values.is_some() {
        return Err(KernelError::Shape("keys and values held unevenly".into()));
    }
    let kv_heads = cache
        .kv_heads()
        .ok_or_else(|| KernelError::Shape("attention over an empty cache".into()))?;
    let q = readable::<f32>(queries)?;
    let history = match (cache.keys, cache.values) {
        (Some(k), Some(v)) => Some((dequantize(k)?, dequantize(v)?)),
        _ => None,
    };
    let dims = |a: &Array| a.shape().iter().map(|&d| d as usize).collect::<Vec<_>>();
    // The residual in float32 with its shape `[B, H, Tr, D]`: keys, then values.
    type Floats32 = (Vec<f32>, Vec<usize>);
    let residual: Option<(Floats32, Floats32)> = match cache.residual {
        None => None,
        Some(Residual::Arrays { keys, values }) => {
            let (k, v) = (readable::<f32>(keys)?, readable::<f32>(values)?);
            Some((
                (host_slice(&k)?.to_vec(), dims(&k)),
                (host_slice(&v)?.to_vec(), dims(&v)),
            ))
        }
        Some(Residual::Host(w)) => {
            w.check()?;
            let shape = |dim| vec![w.batch, w.kv_heads, w.len, dim];
            Some((
                (w.float32(true), shape(w.key_dim)),
                (w.float32(false), shape(w.value_dim)),
            ))
        }
    };
    // The segments in position order: the residual's leading sinks, the history, then the
    // window. The sinks and the window are runs of rows of the same residual buffers; while
    // the sinks are still filling the window is empty, and an empty run is no segment.
    let mut parts: Vec<Part<'_>> = Vec::with_capacity(3);
    let residual = residual.as_ref();
    let residual_tokens = residual.map_or(0, |(_, (_, vs))| vs.get(2).copied().unwrap_or(0));
    let sinks = cache.sinks.min(residual_tokens);
    if let Some(((k, ks), (v, vs))) = residual.filter(|_| sinks > 0) {
        parts.push(Part::rows(k, ks, v, vs, 0..sinks));
    }
    if let Some(((k, ks), (v, vs))) = &history {
        parts.push(Part {
            channel_major: cache.key_axis == KeyAxis::PerChannel,
            ..Part::rows(k, ks, v, vs, 0..vs.get(2).copied().unwrap_or(0))
        });
    }
    if let Some(((k, ks), (v, vs))) = residual.filter(|_| residual_tokens > sinks) {
        parts.push(Part::rows(k, ks, v, vs, sinks..residual_tokens));
    }
    let (batch_n, kv_n, dim_n) = (batch as usize, kv_heads as usize, dim as usize);
    let value_dim = parts
        .first()
        .map_or(0, |p| p.value_shape.get(3).copied().unwrap_or(0));
    let mut keys = Vec::with_capacity(parts.len());
    let mut values = Vec::with_capacity(parts.len());
    for part in &parts {
        let (ks, vs) = (part.key_shape, part.value_shape);
        let misfit = || {
            KernelError::Shape(format!(
                "cache arrays {ks:?} and {vs:?} do not fit queries {:?}",
                queries.shape()
            ))
        };
        if ks.len() != 4 || vs.len() != 4 || ks[0] != batch_n || vs[1] != kv_n {
            return Err(misfit());
        }
        let tokens = vs[2];
        let (key_rows, key_cols) = if part.channel_major {
            (dim_n, tokens)
        } else {
            (tokens, dim_n)
        };
        if (ks[2], ks[3]) != (key_rows, key_cols) || vs[3] != value_dim {
            return Err(misfit());
        }
        let (skip, len) = (part.rows.start, part.rows.len());
        keys.push(Segment {
            data: &part.keys[skip * dim_n..],
            len,
            head_stride: key_rows * key_cols,
            row_stride: key_cols,
            channel_major: part.channel_major,
        });
        values.push(Segment {
            data: &part.values[skip * value_dim..],
            len,
            head_stride: tokens * value_dim,
            row_stride: value_dim,
            channel_major: false,
        });
    }
    let shape = Shape {
        batch: batch_n,
        heads: heads as usize,
        kv_heads: kv_n,
        queries: len as usize,
        dim: dim_n,
        value_dim,
    };
    let mut out = vec![0f32; shape.batch * shape.heads * shape.queries * value_dim];
    attend(host_slice(&q)?, shape, &keys, &values, scale, &mut out)?;
    Ok(Array::from_slice(
        &out,
        &[batch, heads, len, value_dim as i32],
    ))
}

/// Attention output `[B, H, L, Dv]` of `queries` `[B, H, L, D]` over everything in
/// `cache`, as MLX operations (quantized matmuls on the packed data).
///
/// The queries are the newest `L` positions of the `T = Tq + Tr` held (the cache holds the
/// chunk when it calls this): query `i` sits at position `T - L + i` and sees keys
/// `0..=T - L + i`, whether those keys are quantized or in the residual window. Long chunks
/// are processed [`QUERY_BLOCK`] positions at a time.
pub fn attend_mlx(queries: &Array, cache: CacheView<'_>, scale: f32) -> Result<Array, KernelError> {
    let &[_, heads, len, _] = queries.shape() else {
        return Err(KernelError::Shape(format!(
            "queries must be [B, heads, L, D], got {:?}",
            queries.shape()
        )));
    };
    let total = cache.quantized_len() + cache.residual_len();
    let kv_heads = cache
        .kv_heads()
        .ok_or_else(|| KernelError::Shape("attention over an empty cache".into()))?;
    if heads % kv_heads != 0 || len < 1 || (len as usize) > total {
        return Err(KernelError::Shape(format!(
            "{heads} query heads over {kv_heads} KV heads, {len} queries over {total} positions"
        )));
    }
    if cache.keys.is_some() != cache.values.is_some() {
        return Err(KernelError::Shape("keys and values held unevenly".into()));
    }
    // MLX reads arrays: a host window is copied into them.
    let copied = match cache.residual {
        Some(Residual::Host(w)) => {
            w.check()?;
            Some(w.arrays())
        }
        _ => None,
    };
    let cache = match &copied {
        Some((keys, values)) => CacheView {
            residual: Some(Residual::Arrays { keys, values }),
            ..cache
        },
        None => cache,
    };
    let first = total - len as usize;
    if len as usize <= QUERY_BLOCK {
        return attend_block(queries, cache, scale, first);
    }
    let cuts: Vec<i32> = (QUERY_BLOCK as i32..len).step_by(QUERY_BLOCK).collect();
    let blocks = queries.split_at_indices(&cuts, Some(2))?;
    let outputs = blocks
        .iter()
        .enumerate()
        .map(|(i, q)| attend_block(q, cache, scale, first + i * QUERY_BLOCK))
        .collect::<Result<Vec<_>, _>>()?;
    Ok(ops::concatenate(&outputs, 2)?)
}

/// Attention of queries at positions `first..first + L` (checked by the caller).
fn attend_block(
    queries: &Array,
    cache: CacheView<'_>,
    scale: f32,
    first: usize,
) -> Result<Array, KernelError> {
    let &[batch, heads, len, dim] = queries.shape() else {
        unreachable!("checked by attend_mlx")
    };
    let (tq, tr) = (cache.quantized_len(), cache.residual_len());
    let kv_heads = cache.kv_heads().expect("checked by attend_mlx");
    let rows = heads / kv_heads * len;
    let q = ops::multiply(queries, Array::from_f32(scale))?
        .as_dtype(queries.dtype())?
        .reshape(&[batch, kv_heads, rows, dim])?;

    // The residual's leading sinks (positions 0..S) come before the quantized history.
    let sinks = cache.sinks.min(tr) as i32;
    let (residual_keys, residual_values) = match cache.residual {
        Some(Residual::Arrays { keys, values }) => (Some(keys), Some(values)),
        // `attend_mlx` copies a host window into arrays first.
        Some(Residual::Host(_)) | None => (None, None),
    };
    let (sink_keys, window_keys) = split_sinks(residual_keys, sinks)?;
    let (sink_values, window_values) = split_sinks(residual_values, sinks)?;
    let mut scores = Vec::with_capacity(3);
    if let Some(keys) = &sink_keys {
        scores.push(q.matmul(keys.swap_axes(-1, -2)?)?);
    }
    if let Some(keys) = cache.keys {
        scores.push(keys.matmul(&q, cache.key_axis == KeyAxis::PerToken)?);
    }
    if let Some(keys) = &window_keys {
        scores.push(q.matmul(keys.swap_axes(-1, -2)?)?);
    }
    let mut scores = match scores.len() {
        1 => scores.pop().expect("one part"),
        _ => ops::concatenate(&scores, -1)?,
    };
    if first + (len as usize) < tq + tr || len > 1 {
        let shape = [batch, kv_heads, heads / kv_heads, len];
        scores = causal_mask(&scores, shape, first, tq + tr)?;
    }
    let weights = ops::softmax_axis(&scores, -1, true)?;

    // The weights split like the scores: sinks, quantized history, window.
    let (s, q_end) = (sinks, sinks + tq as i32);
    let cuts: Vec<i32> = [s, q_end]
        .into_iter()
        .filter(|&c| c > 0 && c < (tq + tr) as i32)
        .collect::<std::collections::BTreeSet<_>>()
        .into_iter()
        .collect();
    let mut pieces = weights.split_at_indices(&cuts, Some(-1))?.into_iter();
    let mut take = |len: i32| if len > 0 { pieces.next() } else { None };
    let (sink_w, quantized_w, window_w) =
        (take(s), take(tq as i32), take((tq + tr) as i32 - q_end));
    let mut out: Option<Array> = None;
    let mut add = |part: Array| -> Result<(), KernelError> {
        out = Some(match out.take() {
            Some(o) => ops::add(&o, &part)?,
            None => part,
        });
        Ok(())
    };
    if let (Some(w), Some(values)) = (sink_w, &sink_values) {
        add(w.matmul(values)?)?;
    }
    if let (Some(w), Some(values)) = (quantized_w, cache.values) {
        add(values.matmul(&w, false)?)?;
    }
    if let (Some(w), Some(values)) = (window_w, &window_values) {
        add(w.matmul(values)?)?;
    }
    let out = out.expect("a non-empty cache has a quantized or a residual part");
    let value_dim = out.dim(-1);
    Ok(out.reshape(&[batch, heads, len, value_dim])?)
}

/// A residual array `[B, H, Tr, D]` split into its first `sinks` tokens and the rest (either
/// `None` when empty).
fn split_sinks(
    residual: Option<&Array>,
    sinks: i32,
) -> Result<(Option<Array>, Option<Array>), KernelError> {
    let Some(residual) = residual else {
        return Ok((None, None));
    };
    let len = residual.dim(2);
    Ok(match sinks {
        0 => (None, Some(residual.clone())),
        s if s >= len => (Some(residual.clone()), None),
        s => {
            let mut parts = residual.split_at_indices(&[s], Some(2))?.into_iter();
            (parts.next(), parts.next())
        }
    })
}

/// Sets the scores of query `i` (at position `first + i`) for later keys to -inf. The
/// score rows are `rep * len` per KV head, repeat-major.
fn causal_mask(
    scores: &Array,
    [batch, kv_heads, rep, len]: [i32; 4],
    first: usize,
    total: usize,
) -> Result<Array, KernelError> {
    let (first, total) = (first as i32, total as i32);
    let positions = Array::arange::<_, i32>(first, first + len, None)?.reshape(&[len, 1])?;
    let keys = Array::arange::<_, i32>(None, total, None)?.reshape(&[1, total])?;
    let visible = keys.le(&positions)?;
    let hidden = Array::from_f32(f32::NEG_INFINITY).as_dtype(scores.dtype())?;
    let shaped = scores.reshape(&[batch, kv_heads, rep, len, total])?;
    Ok(ops::select(&visible, &shaped, &hidden)?.reshape(&[batch, kv_heads, rep * len, total])?)
}

/// Full-precision attention with MLX's fused kernel over keys and values `[B, n_kv, T, D]`,
/// causal for chunks: the baseline the KIVI path is measured against.
pub fn full_precision(
    queries: &Array,
    keys: &Array,
    values: &Array,
    scale: f32,
) -> Result<Array, KernelError> {
    use mlx_rs::fast::{scaled_dot_product_attention, ScaledDotProductAttentionMask};
    let mask = (queries.dim(2) > 1).then_some(ScaledDotProductAttentionMask::Causal);
    Ok(scaled_dot_product_attention(
        queries, keys, values, scale, mask, None,
    )?)
}

/// True for the float dtypes attention accepts.
pub fn is_float(dtype: Dtype) -> bool {
    matches!(dtype, Dtype::Float32 | Dtype::Float16 | Dtype::Bfloat16)
}
