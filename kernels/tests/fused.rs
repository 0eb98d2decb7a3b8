//! The plain-Rust CPU decode kernel equals attention over the reference cache's dequantized
//! content and agrees with the MLX path, over bit widths, group sizes, residual lengths,
//! head layouts and batch sizes; it refuses what it does not handle.

mod common;

use common::{array, f32s, Parts};
use kivi_kernels::{
    attention, fused, reference,
    reference::CacheSpec,
    reference_attention::{self, AttnShape},
    testdata::{Layer, Profile},
    HostWindow, KeyAxis, QuantSpec,
};
use mlx_rs::{ops, Dtype};

fn spec(kb: u32, vb: u32, g: usize, r: usize) -> CacheSpec {
    CacheSpec {
        keys: QuantSpec::new(kb, g).unwrap(),
        values: QuantSpec::new(vb, g).unwrap(),
        residual: r,
        key_axis: KeyAxis::PerChannel,
        storage: Default::default(),
        sinks: 0,
        rotation: Default::default(),
    }
}

fn reference_output(layer: &Layer, spec: &CacheSpec, scale: f32) -> Vec<f32> {
    let (mut k, mut v) = (vec![], vec![]);
    for h in 0..layer.kv_heads {
        let (hk, hv) =
            reference::dequantized_cache(layer.head_keys(h), layer.head_values(h), layer.dim, spec)
                .unwrap();
        k.extend(hk);
        v.extend(hv);
    }
    let shape = AttnShape {
        heads: layer.heads,
        kv_heads: layer.kv_heads,
        queries: 1,
        tokens: layer.tokens,
        dim: layer.dim,
    };
    reference_attention::attention(&layer.queries, &k, &v, shape, scale)
}

#[test]
fn matches_the_reference_and_the_mlx_path() {
    let scale = 0.125;
    for (heads, kv_heads) in [(9, 3), (4, 4), (8, 2), (14, 2)] {
        for (kb, vb) in [(2, 2), (4, 4), (4, 2), (2, 4)] {
            for (g, r) in [(32, 32), (64, 128), (128, 0)] {
                for tokens in [5, 160, 256, 333] {
                    let layer = Layer::new(
                        tokens as u64 + g as u64,
                        Profile::Outliers,
                        (heads, kv_heads, 64),
                        tokens,
                        1,
                    );
                    let spec = spec(kb, vb, g, r);
                    let parts = Parts::new(&layer, &spec);
                    let queries = array(&layer.queries, &[1, heads, 1, 64]);
                    assert!(fused::accepts(&queries, &parts.view()));
                    let got = f32s(&fused::decode(&queries, parts.view(), scale).unwrap());
                    let what =
                        format!("{heads}/{kv_heads} heads K{kb}V{vb} G={g} R={r} T={tokens}");
                    let err = reference_attention::compare(
                        &got,
                        &reference_output(&layer, &spec, scale),
                        64,
                    );
                    assert!(err.relative < 1e-5 && err.max_abs < 1e-4, "{what}: {err:?}");
                    let mlx = f32s(&attention::attend_mlx(&queries, parts.view(), scale).unwrap());
                    let err = reference_attention::compare(&got, &mlx, 64);
                    assert!(err.relative < 1e-5, "{what} vs MLX: {err:?}");
                }
            }
        }
    }
}

#[test]
fn handles_a_batch() {
    let spec = spec(2, 4, 32, 32);
    let layers: Vec<Layer> = (0..2)
        .map(|s| Layer::new(s, Profile::Gaussian, (6, 2, 128), 200, 1))
        .collect();
    let stack = |pick: fn(&Layer) -> &Vec<f32>, shape: &[usize]| {
        let parts: Vec<_> = layers.iter().map(|l| array(pick(l), shape)).collect();
        ops::concatenate(&parts, 0).unwrap()
    };
    let keys = stack(|l| &l.keys, &[1, 2, 200, 128]);
    let values = stack(|l| &l.values, &[1, 2, 200, 128]);
    let queries = stack(|l| &l.queries, &[1, 6, 1, 128]);
    let parts = Parts::from_arrays(&keys, &values, &spec);
    let got = f32s(&fused::decode(&queries, parts.view(), 0.1).unwrap());
    let mlx = f32s(&attention::attend_mlx(&queries, parts.view(), 0.1).unwrap());
    assert_eq!(got.len(), 2 * 6 * 128);
    assert!(reference_attention::compare(&got, &mlx, 128).relative < 1e-5);
    for (b, layer) in layers.iter().enumerate() {
        let want = reference_output(layer, &spec, 0.1);
        let err = reference_attention::compare(&got[b * 6 * 128..(b + 1) * 6 * 128], &want, 128);
        assert!(err.relative < 1e-5, "batch {b}: {err:?}");
    }
}

#[test]
fn leaves_other_calls_to_the_mlx_path() {
    let layer = Layer::new(3, Profile::Gaussian, (4, 2, 64), 100, 2);
    let parts = Parts::new(&layer, &spec(2, 2, 32, 32));
    let chunk = array(&layer.queries, &[1, 4, 2, 64]);
    assert!(!fused::accepts(&chunk, &parts.view()));
    assert!(fused::decode(&chunk, parts.view(), 0.1).is_err());
    let one = array(&layer.queries[..4 * 64], &[1, 4, 1, 64]);
    assert!(!fused::accepts(
        &one.as_dtype(Dtype::Float16).unwrap(),
        &parts.view()
    ));
    let mut per_token = spec(2, 2, 32, 32);
    per_token.key_axis = KeyAxis::PerToken;
    let parts = Parts::new(&layer, &per_token);
    assert!(!fused::accepts(&one, &parts.view()));
}

#[test]
fn refuses_views_that_do_not_fit() {
    let spec = spec(2, 2, 32, 32);
    let long = Parts::new(&Layer::new(1, Profile::Gaussian, (4, 2, 64), 300, 1), &spec);
    let short = Parts::new(&Layer::new(2, Profile::Gaussian, (4, 2, 64), 200, 1), &spec);
    let queries = array(&[0.5; 4 * 64], &[1, 4, 1, 64]);
    // Keys of 256 quantized tokens with values of 160.
    let mut view = long.view();
    view.values = short.view().values;
    assert!(fused::decode(&queries, view, 0.1).is_err());
    // Residual of another head count.
    let other = Parts::new(&Layer::new(3, Profile::Gaussian, (4, 4, 64), 300, 1), &spec);
    let mut view = long.view();
    view.residual = other.view().residual;
    assert!(fused::decode(&queries, view, 0.1).is_err());
    // Queries of another head_dim.
    let wide = array(&[0.5; 4 * 128], &[1, 4, 1, 128]);
    assert!(fused::decode(&wide, long.view(), 0.1).is_err());
}

/// Scales, zeros and the residual window stored in float16 (what the KIVI cache keeps for
/// a float32 model): the kernel reads them and equals the reference with float16 storage;
/// the MLX path (float32 queries over float16 parameters) agrees.
#[test]
fn reads_float16_storage() {
    let scale = 0.125;
    for (kb, vb) in [(2, 2), (4, 4)] {
        let layer = Layer::new(31, Profile::Outliers, (9, 3, 64), 300, 1);
        let mut spec = spec(kb, vb, 32, 32);
        spec.storage = reference::Storage::F16;
        let half = |x: &[f32]| array(x, &[1, 3, 300, 64]).as_dtype(Dtype::Float16).unwrap();
        let parts = Parts::from_arrays(&half(&layer.keys), &half(&layer.values), &spec);
        let queries = array(&layer.queries, &[1, 9, 1, 64]);
        assert!(fused::accepts(&queries, &parts.view()));
        let got = f32s(&fused::decode(&queries, parts.view(), scale).unwrap());
        let err = reference_attention::compare(&got, &reference_output(&layer, &spec, scale), 64);
        assert!(err.relative < 1e-5, "K{kb}V{vb}: {err:?}");
        let mlx = f32s(&attention::attend_mlx(&queries, parts.view(), scale).unwrap());
        let err = reference_attention::compare(&got, &mlx, 64);
        assert!(err.relative < 1e-4, "K{kb}V{vb} vs MLX: {err:?}");
    }
}

/// A full-precision cache's float16 buffers (with headroom after each pair's tokens) give
/// attention over the float16-rounded keys and values, for several lengths (one span and
/// several, chunks and a partial chunk), head layouts and a batch of two.
#[test]
fn decode_window_equals_attention_over_the_rounded_window() {
    use half::f16;
    let scale = 0.125;
    for (heads, kv_heads, batch) in [(9, 3, 1), (4, 4, 2), (14, 2, 1)] {
        for tokens in [1, 77, 600, 3000] {
            let capacity = tokens + 5;
            let d = 64;
            let layers: Vec<Layer> = (0..batch)
                .map(|b| {
                    let seed = (tokens * 10 + b + heads) as u64;
                    Layer::new(seed, Profile::Outliers, (heads, kv_heads, d), tokens, 1)
                })
                .collect();
            let rounded =
                |x: &[f32]| -> Vec<f32> { x.iter().map(|&x| f16::from_f32(x).to_f32()).collect() };
            // [B * kv_heads, capacity, D], the headroom filled with what must not be read.
            let buffer = |part: fn(&Layer) -> &[f32]| -> Vec<f16> {
                let mut out = vec![f16::from_f32(1e4); batch * kv_heads * capacity * d];
                for (b, layer) in layers.iter().enumerate() {
                    for (h, head) in part(layer).chunks_exact(tokens * d).enumerate() {
                        let at = (b * kv_heads + h) * capacity * d;
                        for (o, &x) in out[at..][..tokens * d].iter_mut().zip(head) {
                            *o = f16::from_f32(x);
                        }
                    }
                }
                out
            };
            let (keys, values) = (buffer(|l| &l.keys), buffer(|l| &l.values));
            let queries: Vec<f32> = layers.iter().flat_map(|l| l.queries.clone()).collect();
            let window = HostWindow {
                keys: &keys,
                values: &values,
                batch,
                kv_heads,
                key_dim: d,
                value_dim: d,
                len: tokens,
                capacity,
            };
            let out = fused::decode_window(&queries, heads, window, scale).unwrap();
            for (b, layer) in layers.iter().enumerate() {
                let shape = AttnShape {
                    heads,
                    kv_heads,
                    queries: 1,
                    tokens,
                    dim: d,
                };
                let want = reference_attention::attention(
                    &layer.queries,
                    &rounded(&layer.keys),
                    &rounded(&layer.values),
                    shape,
                    scale,
                );
                let got = &out[b * heads * d..(b + 1) * heads * d];
                let err = reference_attention::compare(got, &want, d);
                assert!(
                    err.relative < 1e-5,
                    "{heads}/{kv_heads} heads, batch {b}, {tokens} tokens: {err:?}"
                );
            }
            // What does not fit is refused, not read out of bounds.
            let short = HostWindow {
                len: capacity + 1,
                ..window
            };
            assert!(fused::decode_window(&queries, heads, short, scale).is_err());
            assert!(fused::decode_window(&queries[1..], heads, window, scale).is_err());
        }
    }
}
