//! Decode attention over a KIVI cache in plain Rust, for the CPU.
//!
//! MLX's CPU `quantized_matmul` dequantizes every element (`scale * q + bias`, then a
//! multiply-add) in a scalar loop, and 2-bit codes unpack slower than 4-bit ones. For one
//! query position this kernel reads the packed codes directly, with the scale and zero
//! factored out of the inner loops ([`loops`]), and splits the quantized history into
//! spans of whole groups that run on separate threads: each span gives an unnormalized
//! softmax (its maximum, sum and weighted values), and the spans are combined exactly as
//! one softmax over all tokens would be. The full-precision cache's CPU path gets its
//! threads from BLAS; this one runs its spans on rayon's pool.
//!
//! It reads the evaluated MLX buffers as host slices ([`view`]) and returns a new array,
//! so it ends the lazy graph at the layer's queries (harmless on the CPU, where MLX runs
//! each op as it comes anyway). It is used for single-position decode with float32
//! queries and keys per channel; everything else takes the other paths. Tested against
//! the reference and the MLX path in `kernels/tests/fused.rs`.

mod loops;
pub(crate) mod view;

use std::ops::Range;

use mlx_rs::{Array, Dtype};
use rayon::prelude::*;

use crate::{attention::CacheView, KernelError, KeyAxis};
use view::{slice, Held, Parts};

/// Tokens (quantized and window) below which a span is not worth a thread of its own.
/// At 1024, a 2k-token cache ran on one thread: two spans took its calls from 0.24 to
/// 0.21-0.22 ms, and 1k-token calls from 0.13-0.18 to 0.08-0.12 ms (fastest of 300,
/// `decode_timing 1024 2048`, K4V4 with float16 storage).
const MIN_SPAN_TOKENS: usize = 512;

/// Most threads one call uses.
const MAX_THREADS: usize = 8;

/// True when [`decode`] handles this call: one float32 query position, keys per channel,
/// scales, zeros and the residual window stored in float32 or float16.
pub fn supports(queries: &Array, cache: &CacheView<'_>) -> bool {
    let stored = |a: &Array| matches!(a.dtype(), Dtype::Float32 | Dtype::Float16);
    queries.ndim() == 4
        && queries.dim(2) == 1
        && queries.dtype() == Dtype::Float32
        && cache.key_axis == KeyAxis::PerChannel
        && cache
            .keys
            .into_iter()
            .chain(cache.values)
            .all(|q| stored(&q.scales) && stored(&q.zeros))
        && cache.residual_keys.is_none_or(stored)
        && cache.residual_values.is_none_or(stored)
}

/// Attention output `[B, H, 1, Dv]` of one query position `[B, H, 1, D]` (the newest)
/// over the whole cache. See [`supports`] for what it accepts.
pub fn decode(queries: &Array, cache: CacheView<'_>, scale: f32) -> Result<Array, KernelError> {
    let threads = rayon::current_num_threads().min(MAX_THREADS);
    decode_on(queries, cache, scale, threads)
}

/// [`decode`] on at most `threads` threads.
fn decode_on(
    queries: &Array,
    cache: CacheView<'_>,
    scale: f32,
    threads: usize,
) -> Result<Array, KernelError> {
    if !supports(queries, &cache) {
        return Err(KernelError::Shape(
            "the fused kernel takes one float32 query position and per-channel keys".into(),
        ));
    }
    let held = Held::new(&cache, queries)?;
    let kv = held.parts()?;
    let &[batch, heads, _, dim] = queries.shape() else {
        unreachable!("checked by supports")
    };
    let (b, h, d) = (batch as usize, heads as usize, dim as usize);
    if kv.batch != b || kv.heads == 0 || h % kv.heads != 0 || kv.key_dim != d {
        return Err(KernelError::Shape(format!(
            "queries {:?} do not fit a cache of {} x {} heads of {}",
            queries.shape(),
            kv.batch,
            kv.heads,
            kv.key_dim
        )));
    }
    // Query heads `kv * rep .. (kv + 1) * rep` read KV head `kv`: consecutive in memory.
    let q: Vec<f32> = slice::<f32>(&held.queries)?
        .iter()
        .map(|x| x * scale)
        .collect();
    let out = attend(&kv, &q, h / kv.heads, threads);
    Ok(Array::from_slice(
        &out,
        &[batch, heads, 1, kv.value_dim as i32],
    ))
}

/// Tokens one thread attends: quantized tokens `tokens` (whole groups), and the residual
/// window if `residual`.
#[derive(Debug, Clone)]
struct Span {
    tokens: Range<usize>,
    residual: bool,
}

/// One span's attention for `rep` query rows of one KV head: `out` (`[rep, Dv]`) is
/// `sum_n e^(s_n - max) v_n` and `sum` is `sum_n e^(s_n - max)`, per row.
struct Partial {
    out: Vec<f32>,
    max: Vec<f32>,
    sum: Vec<f32>,
}

/// The spans for `threads` threads: runs of whole groups of the quantized tokens, the
/// first also taking the residual window of `residual` tokens, sized so that each span
/// has about as many tokens in all (a window token costs about what a quantized one does).
/// A span left with nothing (the window alone outweighing a share) is dropped.
fn spans(quantized: usize, residual: usize, group: usize, threads: usize) -> Vec<Span> {
    let groups = quantized / group;
    let count = threads.min((quantized + residual) / MIN_SPAN_TOKENS).max(1);
    // The window counted as groups of the first span.
    let window = residual.div_ceil(group);
    let bound = |i: usize| ((groups + window) * i / count).saturating_sub(window) * group;
    (0..count)
        .map(|i| Span {
            tokens: bound(i)..bound(i + 1),
            residual: i == 0,
        })
        .filter(|s| s.residual || !s.tokens.is_empty())
        .collect()
}

/// Attention of pre-scaled queries `q` (`[pairs, rep, D]`) over the whole cache,
/// `[pairs, rep, Dv]`.
fn attend(kv: &Parts<'_>, q: &[f32], rep: usize, threads: usize) -> Vec<f32> {
    let group = kv.keys.as_ref().map_or(1, |k| k.group);
    let spans = spans(kv.quantized, kv.residual, group, threads);
    // rayon's threads, not threads spawned per call: a decode step makes one call per
    // layer, and a spawn plus join cost about as much as a 4k-token span.
    let parts: Vec<Vec<Partial>> = spans
        .par_iter()
        .map(|s| loops::span(kv, q, rep, s))
        .collect();
    combine(&parts, rep, kv.value_dim)
}

/// One softmax over all spans: each span's sums and outputs rescaled to the common
/// maximum, added, and divided by the total.
fn combine(parts: &[Vec<Partial>], rep: usize, dv: usize) -> Vec<f32> {
    let pairs = parts[0].len();
    let mut out = vec![0f32; pairs * rep * dv];
    for (pair, out) in out.chunks_exact_mut(rep * dv).enumerate() {
        for (r, out) in out.chunks_exact_mut(dv).enumerate() {
            let max = parts
                .iter()
                .map(|p| p[pair].max[r])
                .fold(f32::NEG_INFINITY, f32::max);
            let mut total = 0f32;
            for p in parts {
                let p = &p[pair];
                let weight = (p.max[r] - max).exp();
                total += weight * p.sum[r];
                for (o, &x) in out.iter_mut().zip(&p.out[r * dv..(r + 1) * dv]) {
                    *o += weight * x;
                }
            }
            for o in out.iter_mut() {
                *o /= total;
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testdata::{Layer, PackedLayer, Profile};

    #[test]
    fn spans_cover_the_quantized_tokens_in_whole_groups() {
        assert_eq!(spans(0, 0, 32, 4).len(), 1);
        assert_eq!(spans(864, 128, 32, 4).len(), 1);
        // Nothing quantized: the window alone, not an empty second span.
        assert_eq!(spans(0, 1024, 32, 2).len(), 1);
        for (quantized, residual, group, threads) in [
            (4096, 128, 32, 2),
            (8192, 0, 128, 3),
            (5024, 32, 32, 8),
            (2048, 4096, 32, 2),
        ] {
            let spans = spans(quantized, residual, group, threads);
            assert_eq!(
                spans.len(),
                threads.min((quantized + residual) / MIN_SPAN_TOKENS)
            );
            assert_eq!(spans[0].tokens.start, 0);
            assert_eq!(spans.last().unwrap().tokens.end, quantized);
            for pair in spans.windows(2) {
                assert_eq!(pair[0].tokens.end, pair[1].tokens.start);
            }
            assert!(spans.iter().all(|s| s.tokens.start % group == 0));
            assert!(spans[0].residual && spans.iter().filter(|s| s.residual).count() == 1);
            // Balanced: the first span's window plus tokens match the others' tokens to
            // within a group (unless the window alone is more than a share).
            let share = (quantized + residual) / spans.len();
            for s in &spans[1..] {
                assert!(s.tokens.len().abs_diff(share) <= group || residual > share);
            }
        }
    }

    /// Spans on several threads combine to the one-thread result (same arithmetic,
    /// another summation order).
    #[test]
    fn threads_combine_to_the_single_thread_result() {
        let tokens = 5000;
        let layer = Layer::new(11, Profile::Outliers, (9, 3, 64), tokens, 1);
        let shape = [1, 3, tokens as i32, 64];
        let keys = Array::from_slice(&layer.keys, &shape);
        let values = Array::from_slice(&layer.values, &shape);
        let queries = Array::from_slice(&layer.queries, &[1, 9, 1, 64]);
        for bits in [2, 4] {
            let packed = PackedLayer::new(&keys, &values, bits, 32, 128).unwrap();
            let one = decode_on(&queries, packed.view(), 0.125, 1).unwrap();
            let one = one.as_slice::<f32>().to_vec();
            for threads in [2, 3, 4] {
                let many = decode_on(&queries, packed.view(), 0.125, threads).unwrap();
                let err = crate::reference_attention::compare(many.as_slice::<f32>(), &one, 64);
                assert!(
                    err.relative < 1e-5,
                    "{bits} bits, {threads} threads: {err:?}"
                );
            }
        }
    }
}
