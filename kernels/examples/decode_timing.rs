//! Decode attention timings that hold up on a busy machine: the variants run interleaved,
//! many times, and the table shows the minimum and the median per call. Also times the
//! pieces of the KIVI path. Run:
//! `cargo run --release -p kivi-kernels --example decode_timing [tokens...]`.

use std::time::{Duration, Instant};

use kivi_kernels::{
    attention, fused, host,
    testdata::{Layer, PackedLayer, Profile},
};
use mlx_rs::{ops, transforms::eval, Array};

const HEADS: i32 = 9;
const KV_HEADS: i32 = 3;
const DIM: i32 = 64;
/// SmolLM2-135M's layers.
const LAYERS: usize = 30;

/// The example's cache: G = 32, R = 128.
fn kivi(keys: &Array, values: &Array, bits: u32) -> PackedLayer {
    PackedLayer::new(keys, values, bits, 32, 128).unwrap()
}

/// Token-major keys or values of `t` tokens per head, as the full cache's CPU path holds
/// them (float32 host buffers, read by BLAS products).
fn segment(data: &[f32], t: usize) -> host::attention::Segment<'_> {
    host::attention::Segment {
        data,
        len: t,
        head_stride: t * DIM as usize,
        row_stride: DIM as usize,
        channel_major: false,
    }
}

fn main() {
    // SAFETY: the first statement of main: no other thread exists yet.
    unsafe { host::openblas::prepare() };
    let tokens: Vec<usize> = std::env::args()
        .skip(1)
        .filter_map(|a| a.parse().ok())
        .collect();
    let tokens = if tokens.is_empty() {
        vec![1024, 2048, 4096, 8192]
    } else {
        tokens
    };
    println!("| T | variant | min ms | median ms |");
    println!("|---|---|---|---|");
    for t in tokens {
        let layer = Layer::new(t as u64, Profile::Outliers, (9, 3, 64), t, 1);
        let shape = [1, KV_HEADS, t as i32, DIM];
        let keys = Array::from_slice(&layer.keys, &shape);
        let values = Array::from_slice(&layer.values, &shape);
        let queries = Array::from_slice(&layer.queries, &[1, HEADS, 1, DIM]);
        eval([&keys, &values, &queries]).unwrap();
        let k4 = kivi(&keys, &values, 4);
        let k2 = kivi(&keys, &values, 2);
        // What the engine's cache holds: scales, zeros and the window in float16.
        let half = |a: &Array| a.as_dtype(mlx_rs::Dtype::Float16).unwrap();
        let k4_f16 = kivi(&half(&keys), &half(&values), 4);
        let k2_f16 = kivi(&half(&keys), &half(&values), 2);
        // A decode step reads every layer's cache in turn, so a layer's packed codes have
        // left the CPU caches by its next call: 30 such layers, read round-robin.
        let layers: Vec<PackedLayer> = (0..LAYERS)
            .map(|_| kivi(&half(&keys), &half(&values), 4))
            .collect();
        let next = std::cell::Cell::new(0usize);
        let scale = 0.125;
        let q = ops::multiply(&queries, Array::from_f32(scale))
            .unwrap()
            .reshape(&[1, KV_HEADS, 3, DIM])
            .unwrap();
        let tq = k2.values.packed.dim(2);
        let w = Array::ones::<f32>(&[1, KV_HEADS, 3, tq]).unwrap();
        eval([&q, &w]).unwrap();

        type Run<'a> = Box<dyn Fn() -> Array + 'a>;
        let host_shape = host::attention::Shape {
            batch: 1,
            heads: HEADS as usize,
            kv_heads: KV_HEADS as usize,
            queries: 1,
            dim: DIM as usize,
            value_dim: DIM as usize,
        };
        let variants: Vec<(&str, Run)> = vec![
            (
                "fp32 host (full cache)",
                Box::new(|| {
                    let mut out = vec![0f32; (HEADS * DIM) as usize];
                    host::attention::attend(
                        &layer.queries,
                        host_shape,
                        &[segment(&layer.keys, t)],
                        &[segment(&layer.values, t)],
                        scale,
                        &mut out,
                    )
                    .unwrap();
                    Array::from_slice(&out, &[1, HEADS, 1, DIM])
                }),
            ),
            (
                "fp32 sdpa",
                Box::new(|| attention::full_precision(&queries, &keys, &values, scale).unwrap()),
            ),
            (
                "KIVI K4V4, MLX ops",
                Box::new(|| attention::attend_mlx(&queries, k4.view(), scale).unwrap()),
            ),
            (
                "KIVI K2V2, MLX ops",
                Box::new(|| attention::attend_mlx(&queries, k2.view(), scale).unwrap()),
            ),
            (
                "KIVI K4V4, fused",
                Box::new(|| fused::decode(&queries, k4.view(), scale).unwrap()),
            ),
            (
                "KIVI K2V2, fused",
                Box::new(|| fused::decode(&queries, k2.view(), scale).unwrap()),
            ),
            (
                "KIVI K4V4, fused, float16 storage",
                Box::new(|| fused::decode(&queries, k4_f16.view(), scale).unwrap()),
            ),
            (
                "KIVI K4V4, fused, float16 storage, 30 layers in turn",
                Box::new(|| {
                    let layer = next.get();
                    next.set((layer + 1) % LAYERS);
                    fused::decode(&queries, layers[layer].view(), scale).unwrap()
                }),
            ),
            (
                "KIVI K2V2, fused, float16 storage",
                Box::new(|| fused::decode(&queries, k2_f16.view(), scale).unwrap()),
            ),
            (
                "  K2 scores qmm (q @ K^T)",
                Box::new(|| k2.keys.matmul(&q, false).unwrap()),
            ),
            (
                "  V2 output qmm (w @ V)",
                Box::new(|| k2.values.matmul(&w, false).unwrap()),
            ),
            (
                "  fp32 scores matmul",
                Box::new(|| q.matmul(keys.swap_axes(-1, -2).unwrap()).unwrap()),
            ),
        ];
        // `DECODE_TIMING_ONLY=fused` times only the variants whose name contains it.
        let only = std::env::var("DECODE_TIMING_ONLY").unwrap_or_default();
        let variants: Vec<(&str, Run)> = variants
            .into_iter()
            .filter(|(name, _)| name.contains(&only))
            .collect();
        let mut times: Vec<Vec<Duration>> = vec![Vec::new(); variants.len()];
        let rounds = std::env::var("DECODE_TIMING_ROUNDS").map_or(20, |r| r.parse().unwrap_or(20));
        for _ in 0..rounds {
            for (i, (_, run)) in variants.iter().enumerate() {
                let start = Instant::now();
                run().eval().unwrap();
                times[i].push(start.elapsed());
            }
        }
        for ((name, _), mut samples) in variants.iter().zip(times) {
            samples.sort();
            let ms = |d: Duration| d.as_secs_f64() * 1e3;
            println!(
                "| {t} | {name} | {:.3} | {:.3} |",
                ms(samples[0]),
                ms(samples[samples.len() / 2])
            );
        }
    }
}
