//! Prints the error of KIVI decode attention against full-precision attention, per bit
//! width, on seeded synthetic data with SmolLM2's attention shapes (9 query heads, 3 KV
//! heads, head_dim 64). Run: `cargo run -p kivi-kernels --example error_table`.
//!
//! Columns: relative L2 error of the output and mean cosine similarity of output vectors,
//! against exact attention (f64) over the unquantized keys and values; and the largest
//! relative error against the spec (exact attention over the reference cache's dequantized
//! content), which only measures float rounding.

use kivi_kernels::{
    attention, mlx_quant, quantized_len, reference,
    reference::CacheSpec,
    reference_attention::{self, AttnShape},
    testdata::{Layer, Profile},
    CacheView, Kernels, KeyAxis, QuantSpec,
};
use mlx_rs::{Array, Dtype};

fn main() {
    let (heads, kv_heads, dim) = (9, 3, 64);
    let (group, residual) = (32, 128);
    println!("| data | T | setting | rel. error vs fp | cosine vs fp | rel. error vs spec |");
    println!("|---|---|---|---|---|---|");
    for profile in [Profile::Gaussian, Profile::Outliers] {
        for tokens in [1024, 4096] {
            // Averaged over a few seeds so the table does not hinge on one draw.
            let seeds = [1u64, 2, 3, 4];
            let layers: Vec<Layer> = seeds
                .iter()
                .map(|&s| {
                    Layer::new(
                        s * 1000 + tokens as u64,
                        profile,
                        (heads, kv_heads, dim),
                        tokens,
                        1,
                    )
                })
                .collect();
            for (kb, vb, axis) in [
                (4, 4, KeyAxis::PerChannel),
                (4, 2, KeyAxis::PerChannel),
                (2, 4, KeyAxis::PerChannel),
                (2, 2, KeyAxis::PerChannel),
                (2, 2, KeyAxis::PerToken),
            ] {
                let spec = CacheSpec {
                    keys: QuantSpec::new(kb, group).unwrap(),
                    values: QuantSpec::new(vb, group).unwrap(),
                    residual,
                    key_axis: axis,
                    storage: Default::default(),
                    sinks: 0,
                    rotation: Default::default(),
                };
                let (mut rel, mut cos, mut spec_rel) = (0.0, 0.0, 0.0f64);
                for layer in &layers {
                    let (r, c, s) = measure(layer, &spec);
                    rel += r / layers.len() as f64;
                    cos += c / layers.len() as f64;
                    spec_rel = spec_rel.max(s);
                }
                let name = match axis {
                    KeyAxis::PerChannel => format!("K{kb}V{vb}"),
                    KeyAxis::PerToken => format!("K{kb}V{vb} keys per token"),
                };
                println!(
                    "| {profile:?} | {tokens} | {name} | {rel:.4} | {cos:.4} | {spec_rel:.1e} |"
                );
            }
        }
    }
}

/// (relative error vs full precision, cosine vs full precision, relative error vs spec).
fn measure(layer: &Layer, spec: &CacheSpec) -> (f64, f64, f64) {
    let scale = 1.0 / (layer.dim as f32).sqrt();
    let shape = AttnShape {
        heads: layer.heads,
        kv_heads: layer.kv_heads,
        queries: layer.queries_len,
        tokens: layer.tokens,
        dim: layer.dim,
    };
    let got = kivi_attention(layer, spec, scale);
    let exact =
        reference_attention::attention(&layer.queries, &layer.keys, &layer.values, shape, scale);
    let vs_fp = reference_attention::compare(&got, &exact, layer.dim);
    let (mut k, mut v) = (vec![], vec![]);
    for h in 0..layer.kv_heads {
        let (hk, hv) =
            reference::dequantized_cache(layer.head_keys(h), layer.head_values(h), layer.dim, spec)
                .unwrap();
        k.extend(hk);
        v.extend(hv);
    }
    let want = reference_attention::attention(&layer.queries, &k, &v, shape, scale);
    let vs_spec = reference_attention::compare(&got, &want, layer.dim);
    (vs_fp.relative, vs_fp.cosine, vs_spec.relative)
}

fn kivi_attention(layer: &Layer, spec: &CacheSpec, scale: f32) -> Vec<f32> {
    let (t, d) = (layer.tokens as i32, layer.dim as i32);
    let shape = [1, layer.kv_heads as i32, t, d];
    let keys = Array::from_slice(&layer.keys, &shape);
    let values = Array::from_slice(&layer.values, &shape);
    let q = quantized_len(layer.tokens, spec.residual, spec.keys.group_size()) as i32;
    let k = keys.split_at_indices(&[q], Some(2)).unwrap();
    let v = values.split_at_indices(&[q], Some(2)).unwrap();
    let qk = match spec.key_axis {
        KeyAxis::PerChannel => mlx_quant::quantize(&k[0].swap_axes(-1, -2).unwrap(), spec.keys),
        KeyAxis::PerToken => mlx_quant::quantize(&k[0], spec.keys.for_axis(layer.dim).unwrap()),
    }
    .unwrap();
    let qv = mlx_quant::quantize(&v[0], spec.values.for_axis(layer.dim).unwrap()).unwrap();
    let view = CacheView {
        keys: Some(&qk),
        key_axis: spec.key_axis,
        values: Some(&qv),
        residual: Some(kivi_kernels::Residual::Arrays {
            keys: &k[1],
            values: &v[1],
        }),
        sinks: 0,
    };
    let queries = Array::from_slice(&layer.queries, &[1, layer.heads as i32, 1, d]);
    let out = attention::attend(&queries, view, scale, Kernels::Host).unwrap();
    out.as_dtype(Dtype::Float32)
        .unwrap()
        .as_slice::<f32>()
        .to_vec()
}
