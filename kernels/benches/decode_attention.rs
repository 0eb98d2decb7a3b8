//! Decode attention (one query position) at long context with SmolLM2's shapes: 9 query
//! heads, 3 KV heads, head_dim 64. Full-precision MLX sdpa against the KIVI path at K4V4
//! and K2V2, G = 32, R = 128: the fused CPU kernel (what `attend` runs) and the MLX ops
//! (quantized matmuls on the packed history + residual, `attend_mlx`).
//! Run: `cargo bench -p kivi-kernels --bench decode_attention`.

use std::time::Duration;

use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion};
use kivi_kernels::{
    attention,
    testdata::{Layer, PackedLayer, Profile},
    CacheView, Kernels,
};
use mlx_rs::{transforms::eval, Array};

const HEADS: usize = 9;
const KV_HEADS: usize = 3;
const DIM: usize = 64;
const GROUP: usize = 32;
const RESIDUAL: usize = 128;

type Attend = fn(&Array, CacheView<'_>, f32) -> Result<Array, kivi_kernels::KernelError>;

fn decode_attention(c: &mut Criterion) {
    let mut group = c.benchmark_group("decode_attention");
    group
        .sample_size(20)
        .warm_up_time(Duration::from_millis(500))
        .measurement_time(Duration::from_secs(2));
    let scale = 1.0 / (DIM as f32).sqrt();
    for tokens in [1024usize, 2048, 4096, 8192] {
        let layer = Layer::new(
            tokens as u64,
            Profile::Outliers,
            (HEADS, KV_HEADS, DIM),
            tokens,
            1,
        );
        let shape = [1, KV_HEADS as i32, tokens as i32, DIM as i32];
        let keys = Array::from_slice(&layer.keys, &shape);
        let values = Array::from_slice(&layer.values, &shape);
        let queries = Array::from_slice(&layer.queries, &[1, HEADS as i32, 1, DIM as i32]);
        eval([&keys, &values, &queries]).unwrap();

        group.bench_with_input(BenchmarkId::new("fp32_sdpa", tokens), &tokens, |b, _| {
            b.iter(|| {
                let out = attention::full_precision(&queries, &keys, &values, scale).unwrap();
                out.eval().unwrap();
            })
        });
        for bits in [4, 2] {
            let kivi = PackedLayer::new(&keys, &values, bits, GROUP, RESIDUAL).unwrap();
            // `attend` runs the fused CPU kernel for this call; `attend_mlx` the MLX ops.
            let paths: [(&str, Attend); 2] = [
                ("fused", |q, v, s| attention::attend(q, v, s, Kernels::Host)),
                ("mlx_ops", attention::attend_mlx),
            ];
            for (path, attend) in paths {
                let name = format!("kivi_k{bits}v{bits}_{path}");
                group.bench_with_input(BenchmarkId::new(name, tokens), &tokens, |b, _| {
                    b.iter(|| {
                        let out = attend(&queries, kivi.view(), scale).unwrap();
                        out.eval().unwrap();
                    })
                });
            }
        }
    }
    group.finish();
}

criterion_group!(benches, decode_attention);
criterion_main!(benches);
