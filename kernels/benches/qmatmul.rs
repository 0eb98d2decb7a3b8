//! One decode row through SmolLM2-135M's quantized matrices (576x576, 1536x576, 576x1536
//! and the 49152x576 output head, 4-bit in groups of 32, and the head at 8 bits), with
//! float32 activations against int8 activations: the weight products of a decode step.
//! Run: `cargo bench -p kivi-kernels --bench qmatmul`; criterion prints both times per
//! shape, and the line after each pair gives their ratio and the weight bytes read per
//! second. The input row holds two outliers.

use std::time::{Duration, Instant};

use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion};
use kivi_kernels::qmatmul::{qmatmul, Activations, QuantMatrix};
use kivi_kernels::testdata::XorShift;

struct Owned {
    packed: Vec<u32>,
    scales: Vec<f32>,
    biases: Vec<f32>,
    rows: usize,
    cols: usize,
    bits: u32,
}

impl Owned {
    fn new(rows: usize, cols: usize, bits: u32) -> Self {
        let mut rng = XorShift::new(rows as u64 * 31 + cols as u64);
        let groups = rows * cols / 32;
        Owned {
            packed: (0..rows * cols * bits as usize / 32)
                .map(|_| rng.next_u64() as u32)
                .collect(),
            scales: (0..groups).map(|_| rng.normal() * 0.01).collect(),
            biases: (0..groups).map(|_| rng.normal() * 0.01).collect(),
            rows,
            cols,
            bits,
        }
    }

    fn matrix(&self) -> QuantMatrix<'_> {
        QuantMatrix {
            packed: &self.packed,
            scales: &self.scales,
            biases: &self.biases,
            rows: self.rows,
            cols: self.cols,
            bits: self.bits,
            group: 32,
        }
    }

    fn bytes(&self) -> usize {
        self.packed.len() * 4 + (self.scales.len() + self.biases.len()) * 4
    }
}

fn products(c: &mut Criterion) {
    let mut group = c.benchmark_group("qmatmul");
    group
        .sample_size(20)
        .warm_up_time(Duration::from_millis(300))
        .measurement_time(Duration::from_secs(1));
    for (rows, cols, bits) in [
        (576, 576, 4),
        (1536, 576, 4),
        (576, 1536, 4),
        (49152, 576, 4),
        (49152, 576, 8),
    ] {
        let w = Owned::new(rows, cols, bits);
        let mut rng = XorShift::new(3);
        let mut x: Vec<f32> = (0..cols).map(|_| rng.normal()).collect();
        // Two outlier channels, as normalized hidden states have (int8 inputs multiply
        // them in float32, one weight column each).
        x[17] = 30.0;
        x[300] = -25.0;
        let mut out = vec![0f32; rows];
        let name = format!("{rows}x{cols} {bits}-bit");
        let mut seconds = [0f64; 2];
        for (i, (label, activations)) in
            [("float", Activations::Float), ("int8", Activations::Int8)]
                .into_iter()
                .enumerate()
        {
            group.bench_with_input(BenchmarkId::new(label, &name), &w, |b, w| {
                b.iter(|| qmatmul(&x, 1, &w.matrix(), &mut out, activations).unwrap())
            });
            // A plain timing for the ratio line (criterion keeps its estimates to itself).
            let reps = (200_000_000 / (rows * cols)).max(10);
            let start = Instant::now();
            for _ in 0..reps {
                qmatmul(&x, 1, &w.matrix(), &mut out, activations).unwrap();
            }
            seconds[i] = start.elapsed().as_secs_f64() / reps as f64;
        }
        println!(
            "{name}: int8 {:.1} us, float {:.1} us, float/int8 {:.2}x; int8 reads {:.1} GB/s",
            seconds[1] * 1e6,
            seconds[0] * 1e6,
            seconds[0] / seconds[1],
            w.bytes() as f64 / seconds[1] / 1e9
        );
    }
    group.finish();
}

criterion_group!(benches, products);
criterion_main!(benches);
