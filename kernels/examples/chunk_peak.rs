//! What one prompt chunk's attention holds on the MLX path, read in one pass over the
//! quantized history or in spans ([`attention::SCORE_FLOATS`]), at growing contexts:
//! MLX's peak memory during the call minus what was allocated before it (the cache, the
//! queries). The shape is Llama 3.1 8B's (32 query heads, 8 KV heads, 128 channels), the
//! cache K4V2 G32 R128, the chunk one block of 256 queries. Run:
//! `cargo run --release -p kivi-kernels --example chunk_peak [tokens...]`.

use std::time::Instant;

use kivi_kernels::{attention, testdata::PackedLayer};
use mlx_rs::{random, transforms::eval, Array};

const HEADS: i32 = 32;
const KV_HEADS: i32 = 8;
const DIM: i32 = 128;
const QUERIES: i32 = 256;

fn memory(read: unsafe extern "C" fn(*mut usize) -> i32) -> usize {
    let mut bytes = 0;
    // SAFETY: the call writes one size through a valid pointer.
    unsafe { read(&mut bytes) };
    bytes
}

fn mib(bytes: usize) -> f64 {
    bytes as f64 / (1u64 << 20) as f64
}

fn main() {
    let tokens: Vec<usize> = std::env::args()
        .skip(1)
        .filter_map(|a| a.parse().ok())
        .collect();
    let tokens = if tokens.is_empty() {
        vec![8192, 16384, 32768]
    } else {
        tokens
    };
    println!("| T | attention | held before, MiB | peak beyond it, MiB | ms |");
    println!("|---|---|---:|---:|---:|");
    for t in tokens {
        let shape = [1, KV_HEADS, t as i32, DIM];
        let keys = random::normal::<f32>(&shape, None, None, None).unwrap();
        let values = random::normal::<f32>(&shape, None, None, None).unwrap();
        let queries = random::normal::<f32>(&[1, HEADS, QUERIES, DIM], None, None, None).unwrap();
        eval([&keys, &values, &queries]).unwrap();
        let layer = PackedLayer::new(&keys, &values, 4, 32, 128).unwrap();
        drop((keys, values));
        for (name, score_floats) in [("one pass", usize::MAX), ("spans", attention::SCORE_FLOATS)] {
            // SAFETY: no arguments.
            unsafe {
                mlx_sys::mlx_clear_cache();
                mlx_sys::mlx_reset_peak_memory();
            }
            let before = memory(mlx_sys::mlx_get_active_memory);
            let began = Instant::now();
            let out: Array =
                attention::attend_mlx_within(&queries, layer.view(), 0.088, score_floats).unwrap();
            out.eval().unwrap();
            let ms = began.elapsed().as_secs_f64() * 1e3;
            let peak = memory(mlx_sys::mlx_get_peak_memory);
            println!(
                "| {}k | {name} | {:.0} | {:.0} | {ms:.0} |",
                t / 1024,
                mib(before),
                mib(peak.saturating_sub(before)),
            );
        }
    }
}
