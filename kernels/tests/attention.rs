//! Attention over quantized history plus residual equals attention over the reference
//! cache's dequantized content (tight), for decode and causal chunks, grouped-query heads,
//! every bit width pair, and both key groupings; and stays close to full precision.

mod common;

use common::{array, f32s, Parts};
use kivi_kernels::{
    attention, reference,
    reference::CacheSpec,
    reference_attention::{self, AttnShape},
    testdata::{Layer, Profile},
    Kernels, KeyAxis, QuantSpec,
};

fn cache_spec(kb: u32, vb: u32, g: usize, r: usize, key_axis: KeyAxis) -> CacheSpec {
    CacheSpec {
        keys: QuantSpec::new(kb, g).unwrap(),
        values: QuantSpec::new(vb, g).unwrap(),
        residual: r,
        key_axis,
        storage: Default::default(),
        sinks: 0,
        rotation: Default::default(),
    }
}

fn shape(layer: &Layer) -> AttnShape {
    AttnShape {
        heads: layer.heads,
        kv_heads: layer.kv_heads,
        queries: layer.queries_len,
        tokens: layer.tokens,
        dim: layer.dim,
    }
}

/// The reference cache's dequantized keys and values, all heads.
fn dequantized(layer: &Layer, spec: &CacheSpec) -> (Vec<f32>, Vec<f32>) {
    let (mut k, mut v) = (vec![], vec![]);
    for h in 0..layer.kv_heads {
        let (hk, hv) =
            reference::dequantized_cache(layer.head_keys(h), layer.head_values(h), layer.dim, spec)
                .unwrap();
        k.extend(hk);
        v.extend(hv);
    }
    (k, v)
}

/// The output of `attend` with the host kernels (the fused CPU kernel where it applies).
fn kivi_output(layer: &Layer, spec: &CacheSpec, scale: f32) -> Vec<f32> {
    kivi_outputs(layer, spec, scale).0
}

/// Outputs of `attend` with the host kernels and with MLX operations.
fn kivi_outputs(layer: &Layer, spec: &CacheSpec, scale: f32) -> (Vec<f32>, Vec<f32>) {
    let parts = Parts::new(layer, spec);
    let shape = [1, layer.heads, layer.queries_len, layer.dim];
    let queries = array(&layer.queries, &shape);
    (
        f32s(&attention::attend(&queries, parts.view(), scale, Kernels::Host).unwrap()),
        f32s(&attention::attend(&queries, parts.view(), scale, Kernels::Mlx).unwrap()),
    )
}

fn check_against_dequantized_reference(layer: &Layer, spec: &CacheSpec) {
    let scale = 1.0 / (layer.dim as f32).sqrt();
    let (dispatched, mlx) = kivi_outputs(layer, spec, scale);
    let (k, v) = dequantized(layer, spec);
    let want = reference_attention::attention(&layer.queries, &k, &v, shape(layer), scale);
    for (path, got) in [("attend", dispatched), ("attend_mlx", mlx)] {
        let err = reference_attention::compare(&got, &want, layer.dim);
        assert!(
            err.relative < 1e-5 && err.max_abs < 1e-4,
            "{path}: T={} L={} {spec:?}: {err:?}",
            layer.tokens,
            layer.queries_len
        );
    }
}

#[test]
fn decode_matches_the_dequantized_reference() {
    for (kb, vb) in [(2, 2), (4, 4), (4, 2), (2, 4)] {
        for (g, r) in [(32, 32), (32, 128), (128, 128), (64, 0)] {
            for tokens in [17, 200, 320] {
                let layer = Layer::new(tokens as u64, Profile::Outliers, (9, 3, 64), tokens, 1);
                check_against_dequantized_reference(
                    &layer,
                    &cache_spec(kb, vb, g, r, KeyAxis::PerChannel),
                );
            }
        }
    }
}

#[test]
fn causal_chunks_match_the_dequantized_reference() {
    // A chunk of 50 ending at 300 with R = 32: Q(300) = 256, so chunk positions 250..255
    // are attended in quantized form, the rest from the residual.
    for (tokens, chunk) in [(300, 50), (64, 64), (130, 7)] {
        let layer = Layer::new(1, Profile::Gaussian, (4, 2, 64), tokens, chunk);
        for (kb, vb) in [(2, 2), (4, 2)] {
            check_against_dequantized_reference(
                &layer,
                &cache_spec(kb, vb, 32, 32, KeyAxis::PerChannel),
            );
        }
    }
}

/// KIVI+'s sinks: the residual arrays hold the first tokens ahead of the window, and chunk
/// attention must order them before the quantized history (a chunk that starts at 0 sees
/// sinks causally among themselves). While the sinks are still filling (as many tokens as
/// sinks or fewer) the residual is all sinks and the window empty.
#[test]
fn sinks_are_attended_in_position_order() {
    let filling = [(3, 2), (4, 4), (4, 3), (16, 7), (2, 2)];
    for (tokens, chunk) in [(300, 1), (300, 50), (64, 64), (20, 20), (140, 9)]
        .into_iter()
        .chain(filling)
    {
        let layer = Layer::new(
            tokens as u64 + 5,
            Profile::Outliers,
            (4, 2, 64),
            tokens,
            chunk,
        );
        for sinks in [4, 16] {
            let mut spec = cache_spec(2, 2, 32, 32, KeyAxis::PerChannel);
            spec.sinks = sinks;
            check_against_dequantized_reference(&layer, &spec);
        }
    }
}

#[test]
fn per_token_keys_match_the_dequantized_reference() {
    let layer = Layer::new(8, Profile::Outliers, (9, 3, 64), 260, 3);
    for g in [32, 128] {
        check_against_dequantized_reference(&layer, &cache_spec(4, 2, g, 32, KeyAxis::PerToken));
    }
}

#[test]
fn without_quantized_history_it_is_full_precision_attention() {
    let layer = Layer::new(2, Profile::Gaussian, (9, 3, 64), 40, 40);
    let spec = cache_spec(2, 2, 32, 128, KeyAxis::PerChannel);
    let scale = 0.125;
    let got = kivi_output(&layer, &spec, scale);
    let shape4 = [1, 3, 40, 64];
    let fp = attention::full_precision(
        &array(&layer.queries, &[1, 9, 40, 64]),
        &array(&layer.keys, &shape4),
        &array(&layer.values, &shape4),
        scale,
    )
    .unwrap();
    let err = reference_attention::compare(&got, &f32s(&fp), 64);
    assert!(err.max_abs < 1e-5, "{err:?}");
}

/// Error against full-precision attention stays within the bounds the README documents
/// (the `error_table` example prints the full table).
#[test]
fn error_against_full_precision_is_bounded() {
    let layer = Layer::new(21, Profile::Outliers, (9, 3, 64), 1024, 1);
    let scale = 1.0 / 8.0;
    let exact = reference_attention::attention(
        &layer.queries,
        &layer.keys,
        &layer.values,
        shape(&layer),
        scale,
    );
    let measure = |kb, vb, axis| {
        let got = kivi_output(&layer, &cache_spec(kb, vb, 32, 128, axis), scale);
        reference_attention::compare(&got, &exact, 64)
    };
    for (kb, vb, max_rel, min_cos) in [(4, 4, 0.25, 0.98), (4, 2, 0.6, 0.88), (2, 2, 0.8, 0.7)] {
        let err = measure(kb, vb, KeyAxis::PerChannel);
        assert!(
            err.relative < max_rel && err.cosine > min_cos,
            "K{kb}V{vb}: {err:?}"
        );
    }
    // The reason keys are grouped per channel: with outlier channels, per-token key groups
    // are far worse.
    let per_channel = measure(2, 2, KeyAxis::PerChannel);
    let per_token = measure(2, 2, KeyAxis::PerToken);
    assert!(
        per_token.relative > 1.3 * per_channel.relative
            && per_token.cosine < per_channel.cosine - 0.2,
        "{per_token:?} vs {per_channel:?}"
    );
}

#[test]
fn long_chunks_are_attended_in_blocks() {
    // 600 queries: three blocks of at most QUERY_BLOCK positions, the middle one masked
    // although it is not the newest.
    const { assert!(600 > 2 * attention::QUERY_BLOCK) };
    let layer = Layer::new(30, Profile::Gaussian, (2, 1, 64), 700, 600);
    check_against_dequantized_reference(&layer, &cache_spec(4, 4, 32, 64, KeyAxis::PerChannel));
}

/// A block whose scores over the quantized history would pass the bound (MLX), and every
/// host call, reads that history in spans with an online softmax: the same attention, for causal chunks that reach into
/// the history, decode, several query blocks, sinks, and both key groupings, down to spans
/// of one group.
#[test]
fn history_read_in_spans_matches_the_dequantized_reference() {
    for (tokens, chunk, sinks, axis) in [
        (700, 50, 0, KeyAxis::PerChannel),
        (700, 1, 4, KeyAxis::PerChannel),
        (700, 600, 4, KeyAxis::PerChannel),
        (500, 9, 16, KeyAxis::PerToken),
    ] {
        let layer = Layer::new(tokens as u64, Profile::Outliers, (4, 2, 64), tokens, chunk);
        let mut spec = cache_spec(2, 4, 32, 32, axis);
        spec.sinks = sinks;
        let parts = Parts::new(&layer, &spec);
        let queries = array(&layer.queries, &[1, 4, chunk, 64]);
        let scale = 0.125;
        let (k, v) = dequantized(&layer, &spec);
        let want = reference_attention::attention(&layer.queries, &k, &v, shape(&layer), scale);
        let rows = 4 * chunk.min(attention::QUERY_BLOCK);
        // Spans of one group, of a few groups (the last one short), and one pass.
        for (span, score_floats) in [(32, 1), (96, rows * 96), (4096, attention::SCORE_FLOATS)] {
            let view = parts.view();
            let mlx = attention::attend_mlx_within(&queries, view, scale, score_floats);
            let host = attention::attend_host_in_spans(&queries, view, scale, span);
            for (path, got) in [("MLX", mlx), ("host", host)] {
                let err = reference_attention::compare(&f32s(&got.unwrap()), &want, 64);
                assert!(
                    err.relative < 1e-5 && err.max_abs < 1e-4,
                    "{path}: T={tokens} L={chunk} S={sinks} {axis:?} in spans of {span}: {err:?}"
                );
            }
        }
    }
}

/// The Mac's dtype: float16 queries, window, scales and zeros. The spans give what one
/// pass gives, to float16 rounding, and both stay near the float32 reference.
#[test]
fn history_read_in_spans_in_float16_matches_one_pass() {
    use mlx_rs::Dtype;
    let (tokens, chunk) = (700, 300);
    let layer = Layer::new(11, Profile::Outliers, (4, 2, 64), tokens, chunk);
    let spec = CacheSpec {
        storage: reference::Storage::F16,
        ..cache_spec(4, 2, 32, 32, KeyAxis::PerChannel)
    };
    let half = |data: &[f32], shape: &[usize]| array(data, shape).as_dtype(Dtype::Float16).unwrap();
    let kv_shape = [1, 2, tokens, 64];
    let parts = Parts::from_arrays(
        &half(&layer.keys, &kv_shape),
        &half(&layer.values, &kv_shape),
        &spec,
    );
    let queries = half(&layer.queries, &[1, 4, chunk, 64]);
    let scale = 0.125;
    let run = |score_floats| {
        let out = attention::attend_mlx_within(&queries, parts.view(), scale, score_floats);
        let out = out.unwrap();
        assert_eq!(out.dtype(), Dtype::Float16);
        f32s(&out.as_dtype(Dtype::Float32).unwrap())
    };
    let (one_pass, spans) = (run(attention::SCORE_FLOATS), run(4 * 256 * 64));
    let err = reference_attention::compare(&spans, &one_pass, 64);
    // A unit in the last place of float16 near the outliers' outputs (16-32) is 0.016-0.031:
    // the bound is relative.
    assert!(err.relative < 3e-3 && err.cosine > 0.99999, "{err:?}");
    let (k, v) = dequantized(&layer, &spec);
    let want = reference_attention::attention(&layer.queries, &k, &v, shape(&layer), scale);
    let err = reference_attention::compare(&spans, &want, 64);
    // Queries, products and output in float16: a few units in its last place.
    assert!(err.relative < 1e-2 && err.cosine > 0.9999, "{err:?}");
}
