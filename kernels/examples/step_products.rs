//! One decode step's weight products, float inputs against int8 inputs, alternated in one
//! process: SmolLM2-135M's shapes (30 layers of seven matrices and the 49152x576 head),
//! 4-bit in groups of 32, seeded values, about 100 MB of weights streamed per step as in a
//! real step (where `cargo bench --bench qmatmul` times one matrix that stays in cache).
//!
//! `cargo run --release -p kivi-kernels --example step_products` (`RAYON_NUM_THREADS=1`
//! for one thread). Prints the minimum and median of 20 steps each, and the ratio of the
//! medians.
use kivi_kernels::qmatmul::{qmatmul, Activations, QuantMatrix};
use kivi_kernels::testdata::XorShift;
use std::time::Instant;

fn main() {
    let mut rng = XorShift::new(3);
    let shapes: Vec<(usize, usize)> = (0..30)
        .flat_map(|_| {
            [
                (576, 576),
                (192, 576),
                (192, 576),
                (576, 576),
                (1536, 576),
                (1536, 576),
                (576, 1536),
            ]
        })
        .chain([(49152, 576)])
        .collect();
    let mats: Vec<(Vec<u32>, Vec<f32>, Vec<f32>)> = shapes
        .iter()
        .map(|&(r, c)| {
            (
                (0..r * c / 8).map(|_| rng.next_u64() as u32).collect(),
                (0..r * c / 32).map(|_| rng.normal() * 0.01).collect(),
                (0..r * c / 32).map(|_| rng.normal() * 0.01).collect(),
            )
        })
        .collect();
    let x576: Vec<f32> = (0..576).map(|_| rng.normal()).collect();
    let x1536: Vec<f32> = (0..1536).map(|_| rng.normal()).collect();
    let mut out = vec![0f32; 49152];
    let mut run = |a: Activations| {
        let t = Instant::now();
        for (&(rows, cols), (p, s, b)) in shapes.iter().zip(&mats) {
            let w = QuantMatrix {
                packed: p,
                scales: s,
                biases: b,
                rows,
                cols,
                bits: 4,
                group: 32,
            };
            let x = if cols == 576 { &x576 } else { &x1536 };
            qmatmul(x, 1, &w, &mut out[..rows], a).unwrap();
        }
        t.elapsed().as_secs_f64() * 1e3
    };
    let (mut f, mut i) = (vec![], vec![]);
    for _ in 0..20 {
        f.push(run(Activations::Float));
        i.push(run(Activations::Int8));
    }
    f.sort_by(|a, b| a.partial_cmp(b).unwrap());
    i.sort_by(|a, b| a.partial_cmp(b).unwrap());
    println!(
        "threads {}: float min {:.2} median {:.2} ms; int8 min {:.2} median {:.2} ms; median float/int8 {:.2}x",
        rayon::current_num_threads(), f[0], f[10], i[0], i[10], f[10] / i[10]
    );
}
