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

use std::ops::Range;

use mlx_rs::{ops, Array, Dtype};

use crate::{
    cache_view::{CacheView, Residual},
    dispatch::Kernels,
    host::{
        attention::{Segment, Shape},
        dequantize::dequantize,
        readable,
    },
    KernelError, KeyAxis,
};

/// Query positions attended at once: the scores of a long prefill chunk are computed
/// `QUERY_BLOCK` rows per head at a time instead of `L`.
pub const QUERY_BLOCK: usize = 256;

/// Most scores one block of queries holds at once, all heads together (2^24 floats, 64 MB
/// in float32). A block whose scores over the quantized history would pass it reads that
/// history in spans with an online softmax ([`attend_mlx_within`]), so a prompt chunk's
/// scratch is bounded by `SCORE_FLOATS` plus its scores over the sinks and the window
/// (which hold at most `S + R + G + L` positions), however long the context. A decode step
/// (`H` rows) stays in one pass up to `SCORE_FLOATS / H` positions (500k at `H` = 32).
pub const SCORE_FLOATS: usize = 1 << 24;

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

/// Quantized positions the host path dequantizes at once: bounds what a prompt chunk's
/// attention holds to one span of the history in float32 (`HOST_SPAN * D * 4` bytes per
/// KV head for keys and for values) and [`crate::host::attention`]'s scores to 256 rows of
/// it, however long the context (a multiple of every group size).
pub const HOST_SPAN: usize = 4096;

/// One run of a cache's keys and values in float32, `[B, H, T, D]` each (keys `[B, H, D, T]`
/// when channel-major): the tokens `rows` of every (batch, KV head) pair.
struct Part<'a> {
    keys: &'a [f32],
    key_shape: &'a [usize],
    values: &'a [f32],
    value_shape: &'a [usize],
    channel_major: bool,
    rows: Range<usize>,
}

impl Part<'_> {
    /// The part as one key and one value segment for `shape`'s queries, after checking
    /// that its arrays fit them.
    fn segments(&self, shape: Shape) -> Result<(Segment<'_>, Segment<'_>), KernelError> {
        let (ks, vs) = (self.key_shape, self.value_shape);
        let misfit = || {
            KernelError::Shape(format!(
                "cache arrays {ks:?} and {vs:?} do not fit queries of {shape:?}"
            ))
        };
        if ks.len() != 4 || vs.len() != 4 || ks[0] != shape.batch || vs[1] != shape.kv_heads {
            return Err(misfit());
        }
        let (dim, value_dim, tokens) = (shape.dim, shape.value_dim, vs[2]);
        let (key_rows, key_cols) = if self.channel_major {
            (dim, tokens)
        } else {
            (tokens, dim)
        };
        if (ks[2], ks[3]) != (key_rows, key_cols) || vs[3] != value_dim {
            return Err(misfit());
        }
        let (skip, len) = (self.rows.start, self.rows.len());
        let keys = Segment {
            data: &self.keys[skip * dim..],
            len,
            head_stride: key_rows * key_cols,
            row_stride: key_cols,
            channel_major: self.channel_major,
        };
        let values = Segment {
            data: &self.values[skip * value_dim..],
            len,
            head_stride: tokens * value_dim,
            row_stride: value_dim,
            channel_major: false,
        };
        Ok((keys, values))
    }
}

/// The same attention as [`attend_mlx`], on the CPU: the quantized history is dequantized
/// to float32 [`HOST_SPAN`] positions at a time (for this call only, by
/// [`crate::host::dequantize`]) and each span, like the sinks and the window, is folded
/// into [`crate::host::attention::Running`] (BLAS products, a vectorized online softmax).
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
    attend_host_in_spans(queries, cache, scale, HOST_SPAN)
}

/// [`attend_host`] dequantizing `span` positions of the history at a time (a multiple of
/// the key groups).
pub fn attend_host_in_spans(
    queries: &Array,
    cache: CacheView<'_>,
    scale: f32,
    span: usize,
) -> Result<Array, KernelError> {
    use crate::host::attention::Running;
    let [batch, heads, len, dim] = query_dims(queries)?;
    if cache.keys.is_some() != cache.values.is_some() {
        return Err(KernelError::Shape("keys and values held unevenly".into()));
    }
    let kv_heads = cache
        .kv_heads()
        .ok_or_else(|| KernelError::Shape("attention over an empty cache".into()))?;
    let group = cache.key_span_unit();
    if span == 0 || !span.is_multiple_of(group) {
        return Err(KernelError::Shape(format!(
            "spans of {span} positions over groups of {group}"
        )));
    }
    let q = readable::<f32>(queries)?;
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
    let residual = residual.as_ref();
    let residual_tokens = residual.map_or(0, |(_, (_, vs))| vs.get(2).copied().unwrap_or(0));
    let tq = cache.quantized_len();
    let value_dim = match (residual, cache.values) {
        (Some((_, (_, vs))), _) => vs.get(3).copied().unwrap_or(0),
        // Values are quantized along their channels.
        (None, Some(values)) => values.len(),
        (None, None) => 0,
    };
    let shape = Shape {
        batch: batch as usize,
        heads: heads as usize,
        kv_heads: kv_heads as usize,
        queries: len as usize,
        dim: dim as usize,
        value_dim,
    };
    let mut out = vec![0f32; shape.batch * shape.heads * shape.queries * value_dim];
    let mut running = Running::new(
        host_slice(&q)?,
        shape,
        tq + residual_tokens,
        scale,
        &mut out,
    )?;
    // In position order: the residual's leading sinks, the history, then the window. The
    // sinks and the window are runs of rows of the same residual buffers (while the sinks
    // are still filling the window is empty). The sinks go with the history's first span
    // and the window with its last, so that a history of one span is one softmax.
    let sinks = cache.sinks.min(residual_tokens);
    let residual_part = |rows: Range<usize>| {
        residual
            .filter(|_| !rows.is_empty())
            .map(|((k, ks), (v, vs))| Part {
                keys: k,
                key_shape: ks,
                values: v,
                value_shape: vs,
                channel_major: false,
                rows,
            })
    };
    let (sink_part, window_part) = (
        residual_part(0..sinks),
        residual_part(sinks..residual_tokens),
    );
    let mut add = |at: usize, parts: &[Option<&Part<'_>>]| -> Result<(), KernelError> {
        let (mut keys, mut values) = (Vec::with_capacity(3), Vec::with_capacity(3));
        for part in parts.iter().flatten() {
            let (k, v) = part.segments(shape)?;
            keys.push(k);
            values.push(v);
        }
        running.add(at, &keys, &values)
    };
    match (cache.keys, cache.values) {
        (Some(keys), Some(values)) if tq > 0 => {
            let channel_major = cache.key_axis == KeyAxis::PerChannel;
            let key_axis = if channel_major { -1 } else { -2 };
            for start in (0..tq).step_by(span) {
                let n = span.min(tq - start);
                let (k, ks) = dequantize(&keys.span(key_axis, start, n)?)?;
                let (v, vs) = dequantize(&values.span(-2, start, n)?)?;
                let history = Part {
                    keys: &k,
                    key_shape: &ks,
                    values: &v,
                    value_shape: &vs,
                    channel_major,
                    rows: 0..n,
                };
                let (first, last) = (start == 0, start + n == tq);
                let before = sink_part.as_ref().filter(|_| first);
                let after = window_part.as_ref().filter(|_| last);
                let at = if first { 0 } else { sinks + start };
                add(at, &[before, Some(&history), after])?;
            }
        }
        _ => add(0, &[sink_part.as_ref(), window_part.as_ref()])?,
    }
    running.finish();
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
/// are processed [`QUERY_BLOCK`] positions at a time, each within [`SCORE_FLOATS`].
pub fn attend_mlx(queries: &Array, cache: CacheView<'_>, scale: f32) -> Result<Array, KernelError> {
    attend_mlx_within(queries, cache, scale, SCORE_FLOATS)
}

/// [`attend_mlx`] with a block's scores over the quantized history held to `score_floats`
/// (at least one quantization group of positions at a time): past it, the history is read
/// in spans whose scores fit, each folded into a running maximum, sum and output (an online
/// softmax, as the decode kernel's spans are). The result equals one softmax over every
/// score to float rounding.
pub fn attend_mlx_within(
    queries: &Array,
    cache: CacheView<'_>,
    scale: f32,
    score_floats: usize,
) -> Result<Array, KernelError> {
    let [_, heads, len, _] = query_dims(queries)?;
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
        return attend_block(queries, cache, scale, first, score_floats);
    }
    let cuts: Vec<i32> = (QUERY_BLOCK as i32..len).step_by(QUERY_BLOCK).collect();
    let blocks = queries.split_at_indices(&cuts, Some(2))?;
    let outputs = blocks
        .iter()
        .enumerate()
        .map(|(i, q)| attend_block(q, cache, scale, first + i * QUERY_BLOCK, score_floats))
        .collect::<Result<Vec<_>, _>>()?;
    Ok(ops::concatenate(&outputs, 2)?)
}

/// Attention of queries at positions `first..first + L` (checked by the caller).
fn attend_block(
    queries: &Array,
    cache: CacheView<'_>,
    scale: f32,
    first: usize,
    score_floats: usize,
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
    let group = cache.key_span_unit();
    let span = (score_floats / (batch * heads * len) as usize / group * group).max(group);
    if tq > span {
        let parts = Parts {
            sinks: sink_keys.as_ref().zip(sink_values.as_ref()),
            window: window_keys.as_ref().zip(window_values.as_ref()),
            shape: [batch, kv_heads, heads / kv_heads, len],
            first,
        };
        let out = parts.attend_in_spans(&q, cache, span)?;
        let value_dim = out.dim(-1);
        return Ok(out.reshape(&[batch, heads, len, value_dim])?);
    }
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
        scores = causal_mask(&scores, shape, first, 0..tq + tr)?;
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

/// Sets the scores of query `i` (at position `first + i`) for later keys to -inf, the
/// scores' columns being the keys at positions `keys`. The score rows are `rep * len` per
/// KV head, repeat-major.
fn causal_mask(
    scores: &Array,
    [batch, kv_heads, rep, len]: [i32; 4],
    first: usize,
    keys: Range<usize>,
) -> Result<Array, KernelError> {
    let first = first as i32;
    let (start, end, n) = (keys.start as i32, keys.end as i32, keys.len() as i32);
    let positions = Array::arange::<_, i32>(first, first + len, None)?.reshape(&[len, 1])?;
    let keys = Array::arange::<_, i32>(start, end, None)?.reshape(&[1, n])?;
    let visible = keys.le(&positions)?;
    let hidden = Array::from_f32(f32::NEG_INFINITY).as_dtype(scores.dtype())?;
    let shaped = scores.reshape(&[batch, kv_heads, rep, len, n])?;
    Ok(ops::select(&visible, &shaped, &hidden)?.reshape(&[batch, kv_heads, rep * len, n])?)
}

/// The full-precision parts of one block's attention, for [`Parts::attend_in_spans`].
struct Parts<'a> {
    /// The sinks' keys and values (positions `0..S`).
    sinks: Option<(&'a Array, &'a Array)>,
    /// The window's keys and values (after the quantized history).
    window: Option<(&'a Array, &'a Array)>,
    /// `[B, n_kv, rep, L]`.
    shape: [i32; 4],
    /// The block's first query position.
    first: usize,
}

impl Parts<'_> {
    /// The block's output `[B, n_kv, rep * L, Dv]`: the sinks, the quantized history
    /// `span` positions at a time, then the window, each folded into an [`Online`]
    /// softmax in position order (so the first part, holding position 0, which every query
    /// sees, gives each row a finite maximum).
    fn attend_in_spans(
        &self,
        q: &Array,
        cache: CacheView<'_>,
        span: usize,
    ) -> Result<Array, KernelError> {
        let mut online = Online::default();
        let sinks = self.sinks.map_or(0, |(keys, _)| keys.dim(2) as usize);
        if let Some((keys, values)) = self.sinks {
            let scores = self.masked(q.matmul(keys.swap_axes(-1, -2)?)?, 0..sinks)?;
            online.fold(&scores, |w| Ok(w.matmul(values)?))?;
        }
        let tq = cache.quantized_len();
        if let (Some(keys), Some(values)) = (cache.keys, cache.values) {
            let per_token = cache.key_axis == KeyAxis::PerToken;
            let key_axis = if per_token { -2 } else { -1 };
            for start in (0..tq).step_by(span) {
                let n = span.min(tq - start);
                let (keys, values) = (keys.span(key_axis, start, n)?, values.span(-2, start, n)?);
                let at = sinks + start;
                let scores = self.masked(keys.matmul(q, per_token)?, at..at + n)?;
                online.fold(&scores, |w| values.matmul(w, false))?;
                // Computed now, so that each span's scores are freed before the next
                // span's are made: left lazy, MLX may schedule every span's products
                // before their folds and hold them all at once.
                online.eval()?;
            }
        }
        if let Some((keys, values)) = self.window {
            let at = sinks + tq;
            let scores = q.matmul(keys.swap_axes(-1, -2)?)?;
            let scores = self.masked(scores, at..at + keys.dim(2) as usize)?;
            online.fold(&scores, |w| Ok(w.matmul(values)?))?;
        }
        online.finish(q.dtype())
    }

    /// `scores` over the keys at positions `keys`, masked where a query precedes a key.
    fn masked(&self, scores: Array, keys: Range<usize>) -> Result<Array, KernelError> {
        if keys.end <= self.first + 1 {
            return Ok(scores);
        }
        causal_mask(&scores, self.shape, self.first, keys)
    }
}

/// A softmax taken a part of each row at a time: the running maximum, the sum of
/// `exp(score - maximum)` and the weighted values, in float32, rescaled when the maximum
/// grows.
#[derive(Default)]
struct Online {
    state: Option<[Array; 3]>,
}

impl Online {
    /// Folds in one part's scores `[.., rows, n]`; `weigh` multiplies weights (in the
    /// scores' dtype) by the part's values.
    fn fold(
        &mut self,
        scores: &Array,
        weigh: impl FnOnce(&Array) -> Result<Array, KernelError>,
    ) -> Result<(), KernelError> {
        let dtype = scores.dtype();
        let scores = scores.as_dtype(Dtype::Float32)?;
        let part_max = scores.max_axis(-1, true)?;
        let max = match &self.state {
            Some([max, ..]) => ops::maximum(max, &part_max)?,
            None => part_max,
        };
        let weights = ops::exp(ops::subtract(&scores, &max)?)?;
        let sum = weights.sum_axis(-1, true)?;
        let out = weigh(&weights.as_dtype(dtype)?)?.as_dtype(Dtype::Float32)?;
        self.state = Some(match self.state.take() {
            None => [max, sum, out],
            Some([old_max, old_sum, old_out]) => {
                let rescale = ops::exp(ops::subtract(&old_max, &max)?)?;
                [
                    max,
                    ops::add(ops::multiply(&old_sum, &rescale)?, &sum)?,
                    ops::add(ops::multiply(&old_out, &rescale)?, &out)?,
                ]
            }
        });
        Ok(())
    }

    /// Evaluates the running state.
    fn eval(&self) -> Result<(), KernelError> {
        if let Some(state) = &self.state {
            mlx_rs::transforms::eval(state.iter())?;
        }
        Ok(())
    }

    /// The output, weighted values over the sum, in `dtype`.
    fn finish(self, dtype: Dtype) -> Result<Array, KernelError> {
        let [_, sum, out] = self
            .state
            .ok_or_else(|| KernelError::Shape("attention over no positions".into()))?;
        Ok(ops::divide(&out, &sum)?.as_dtype(dtype)?)
    }
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

/// `[B, heads, L, D]` of the queries.
fn query_dims(queries: &Array) -> Result<[i32; 4], KernelError> {
    match *queries.shape() {
        [batch, heads, len, dim] => Ok([batch, heads, len, dim]),
        _ => Err(KernelError::Shape(format!(
            "queries must be [B, heads, L, D], got {:?}",
            queries.shape()
        ))),
    }
}

/// True for the float dtypes attention accepts.
pub fn is_float(dtype: Dtype) -> bool {
    matches!(dtype, Dtype::Float32 | Dtype::Float16 | Dtype::Bfloat16)
}
