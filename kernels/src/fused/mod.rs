//! Decode attention over a KIVI cache in plain Rust, for the CPU.
//!
//! MLX's CPU `quantized_matmul` dequantizes every element (`scale * q + bias`, then a
//! multiply-add) in a scalar loop, and 2-bit codes unpack slower than 4-bit ones. For one
//! query position this kernel reads the packed codes directly, with the scale and zero
//! factored out of the inner loops ([`loops`]), and splits the quantized history into
//! spans of whole groups that run on separate threads: each span gives an unnormalized
//! softmax (its maximum, sum and weighted values), and the spans are combined exactly as
//! one softmax over all tokens would be. The full-precision cache's CPU path gets its
//! threads from BLAS; this one runs its spans on the kernels' thread team ([`team`]).
//!
//! It reads the evaluated MLX buffers as host slices ([`view`]) and returns a new array,
//! so it ends the lazy graph at the layer's queries (harmless on the CPU, where MLX runs
//! each op as it comes anyway). It is used for single-position decode with float32
//! queries and keys per channel; everything else takes the other paths. The host
//! backend's full-precision cache decodes through its window loops alone
//! ([`decode_window`]: float16 host buffers, all of them window). Tested against the
//! reference and the MLX path in `kernels/tests/fused.rs`.

mod loops;
mod span;
mod view;

use mlx_rs::{Array, Dtype};

use crate::{
    cache_view::{CacheView, HostWindow, Residual},
    host::{
        buffers::{slice, Floats},
        team,
    },
    KernelError, KeyAxis,
};
use span::{spans, Partial};
use view::{Held, Parts};

/// Most threads one call uses.
const MAX_THREADS: usize = 8;

/// True when [`decode`] handles this call: one float32 query position, keys per channel,
/// scales, zeros and the residual window stored in float32 or float16.
pub fn accepts(queries: &Array, cache: &CacheView<'_>) -> bool {
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
        && match cache.residual {
            Some(Residual::Arrays { keys, values }) => stored(keys) && stored(values),
            Some(Residual::Host(_)) | None => true,
        }
}

/// Attention output `[B, H, 1, Dv]` of one query position `[B, H, 1, D]` (the newest)
/// over the whole cache. See [`accepts`] for what it accepts.
pub fn decode(queries: &Array, cache: CacheView<'_>, scale: f32) -> Result<Array, KernelError> {
    let threads = team::threads().min(MAX_THREADS);
    decode_on(queries, cache, scale, threads)
}

/// [`decode`] on at most `threads` threads.
fn decode_on(
    queries: &Array,
    cache: CacheView<'_>,
    scale: f32,
    threads: usize,
) -> Result<Array, KernelError> {
    if !accepts(queries, &cache) {
        return Err(KernelError::Shape(
            "the fused kernel takes one float32 query position and per-channel keys".into(),
        ));
    }
    let held = Held::new(&cache, queries)?;
    let kv = held.parts()?;
    let &[batch, heads, _, dim] = queries.shape() else {
        unreachable!("checked by accepts")
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

/// Attention output `[B, H, Dv]` of one query position per head (`queries` `[B, H, D]`,
/// the newest token's) over all of `window`'s tokens: the KIVI kernel's window loops, with
/// the tokens shared out among threads in spans.
pub fn decode_window(
    queries: &[f32],
    heads: usize,
    window: HostWindow<'_>,
    scale: f32,
) -> Result<Vec<f32>, KernelError> {
    let w = window;
    if w.kv_heads == 0
        || !heads.is_multiple_of(w.kv_heads)
        || queries.len() != w.batch * heads * w.key_dim
    {
        return Err(KernelError::Shape(format!(
            "{} query floats do not fit {} heads over {} x {} KV heads of {}",
            queries.len(),
            heads,
            w.batch,
            w.kv_heads,
            w.key_dim
        )));
    }
    w.check()?;
    if w.len == 0 {
        return Err(KernelError::Shape("attention over an empty window".into()));
    }
    let kv = Parts {
        batch: w.batch,
        heads: w.kv_heads,
        key_dim: w.key_dim,
        value_dim: w.value_dim,
        quantized: 0,
        residual: w.len,
        window_stride: w.capacity,
        keys: None,
        values: None,
        residual_keys: Floats::F16(w.keys),
        residual_values: Floats::F16(w.values),
    };
    let q: Vec<f32> = queries.iter().map(|x| x * scale).collect();
    let threads = team::threads().min(MAX_THREADS);
    Ok(attend(&kv, &q, heads / w.kv_heads, threads))
}

/// Attention of pre-scaled queries `q` (`[pairs, rep, D]`) over the whole cache,
/// `[pairs, rep, Dv]`.
fn attend(kv: &Parts<'_>, q: &[f32], rep: usize, threads: usize) -> Vec<f32> {
    let group = kv.keys.as_ref().map_or(1, |k| k.group);
    let spans = spans(kv.quantized, kv.residual, group, threads);
    // The team's threads, not threads spawned per call: a decode step makes one call per
    // layer, and a spawn plus join cost about as much as a 4k-token span.
    let isa = loops::Isa::best();
    let parts: Vec<Vec<Partial>> =
        team::map(spans.len(), |i| loops::span(isa, kv, q, rep, &spans[i]));
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

    /// A layer of SmolLM2's shapes (9 query heads over 3 KV heads of 64) with `tokens`
    /// tokens and outlier channels, and its keys, values and queries as arrays.
    fn smollm_layer(seed: u64, tokens: usize) -> (Layer, [Array; 3]) {
        let layer = Layer::new(seed, Profile::Outliers, (9, 3, 64), tokens, 1);
        let shape = [1, 3, tokens as i32, 64];
        let arrays = [
            Array::from_slice(&layer.keys, &shape),
            Array::from_slice(&layer.values, &shape),
            Array::from_slice(&layer.queries, &[1, 9, 1, 64]),
        ];
        (layer, arrays)
    }

    /// The loops compiled for each instruction set this CPU has give the portable loops'
    /// result (the same arithmetic, with fused or separate multiply-adds).
    #[test]
    fn every_instruction_set_gives_the_portable_result() {
        let (layer, [keys, values, queries]) = smollm_layer(5, 1000);
        let q: Vec<f32> = layer.queries.iter().map(|x| x * 0.125).collect();
        for bits in [2, 4] {
            let packed = PackedLayer::new(&keys, &values, bits, 32, 128).unwrap();
            let view = packed.view();
            let held = Held::new(&view, &queries).unwrap();
            let kv = held.parts().unwrap();
            let all = span::Span {
                tokens: 0..kv.quantized,
                window: 0..kv.residual,
            };
            let portable = loops::span(loops::Isa::Portable, &kv, &q, 3, &all);
            for isa in loops::Isa::available() {
                let parts = loops::span(isa, &kv, &q, 3, &all);
                for (p, want) in parts.iter().zip(&portable) {
                    let scale = want.sum.iter().fold(0f32, |m, s| m.max(s.abs()));
                    for (x, y) in p.sum.iter().zip(&want.sum) {
                        assert!((x - y).abs() <= 1e-5 * scale, "{isa:?}, {bits} bits");
                    }
                    for (x, y) in p.max.iter().zip(&want.max) {
                        assert!(
                            (x - y).abs() <= 1e-5 * y.abs().max(1.0),
                            "{isa:?}, {bits} bits"
                        );
                    }
                    let err = crate::reference_attention::compare(&p.out, &want.out, 64);
                    assert!(err.relative < 1e-5, "{isa:?}, {bits} bits: {err:?}");
                }
            }
        }
    }

    /// Spans on several threads combine to the one-thread result (same arithmetic,
    /// another summation order).
    #[test]
    fn threads_combine_to_the_single_thread_result() {
        let (_, [keys, values, queries]) = smollm_layer(11, 5000);
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
