//! `x @ W^T` for a weight matrix in MLX's affine quantized layout, in plain Rust for the CPU.
//!
//! MLX's CPU `quantized_matmul` dequantizes every weight in a scalar loop (about 0.7 ms for
//! a 1536x576 4-bit matrix and one input row, 22-39 ms for SmolLM2's 49152x576 output
//! head), which made it most of a decode step. This kernel factors the scale and bias out
//! of each group,
//!
//! `y_o = sum_g s_og * (sum_{i in g} code_oi * x_i) + sum_g b_og * (sum_{i in g} x_i)`,
//!
//! so the inner loop is one multiply-add per code; with AVX2 and FMA (detected at run time)
//! a packed `u32` word is unpacked into eight lanes at once with variable shifts. The layout
//! is MLX's: `packed` is `[out, in * bits / 32]`, code `j` of a word sits at bits
//! `[j * bits, (j + 1) * bits)`, `scales` and `biases` are `[out, in / group]`, and the
//! weight is `code * scale + bias`.
//!
//! Bits 2, 4 and 8 are supported. Results agree with MLX's kernel to float rounding (the
//! sums run in a different order); tested in `kernels/tests/qmatmul.rs`.
//!
//! With [`Activations::Int8`] the input rows are quantized to int8 first and each block of
//! 32 codes becomes one integer dot product (`qmatmul/int8.rs`). From [`DENSE_MIN_ROWS`]
//! input rows (a prompt chunk) the weights are dequantized a block at a time and multiplied
//! by BLAS in float32 instead, whatever the activations (`qmatmul/dense.rs`).

use crate::{host::team, KernelError};

mod dense;
mod int8;
mod matrix;

pub use dense::DENSE_MIN_ROWS;
pub use int8::BLOCK as INT8_BLOCK;
pub use matrix::{supports, QuantMatrix};

use matrix::bias_term;

/// How the input rows enter the product.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Activations {
    /// As they are, in float32: the result is the exact product to float rounding.
    Float,
    /// Quantized to int8 per block of [`INT8_BLOCK`] values (`max|x| / 127` steps), with
    /// integer dot products against the codes; matrices whose groups do not hold whole
    /// blocks, and products of [`DENSE_MIN_ROWS`] rows or more, are multiplied in float32.
    Int8,
}

/// `out = x @ W^T` for `m` input rows `x` (`[m, cols]`), writing `out` (`[m, rows]`).
pub fn qmatmul(
    x: &[f32],
    m: usize,
    w: &QuantMatrix<'_>,
    out: &mut [f32],
    activations: Activations,
) -> Result<(), KernelError> {
    products(x, m, std::slice::from_ref(w), out, activations)
}

/// `x @ W_k^T` for every matrix `ws[k]`, all over the same input rows `x` (`[m, cols]`):
/// `[m, rows_k]` each.
///
/// Why not one [`qmatmul`] each: a block's query, key and value projections (and its gate
/// and up projections) read the same input. Here it is quantized once per bit width and
/// group size, and the rows of all the matrices are shared out in one section of the
/// team, so that a decode step hands work to its threads and waits for them once per
/// input instead of once per matrix. The results are those of [`qmatmul`].
pub fn qmatmul_many(
    x: &[f32],
    m: usize,
    ws: &[QuantMatrix<'_>],
    activations: Activations,
) -> Result<Vec<Vec<f32>>, KernelError> {
    let total: usize = ws.iter().map(|w| w.rows).sum();
    let mut all = vec![0f32; m * total];
    products(x, m, ws, &mut all, activations)?;
    let mut outs: Vec<Vec<f32>> = ws.iter().map(|w| Vec::with_capacity(m * w.rows)).collect();
    for row in all.chunks_exact(total.max(1)).take(m) {
        let mut rest = row;
        for (out, w) in outs.iter_mut().zip(ws) {
            let (mine, after) = rest.split_at(w.rows);
            out.extend_from_slice(mine);
            rest = after;
        }
    }
    Ok(outs)
}

/// One input's form for the matrices of one bit width and group size: its int8 rows (when
/// those matrices take int8 inputs) and the sums of its groups (the bias term's factors).
struct Input {
    bits: u32,
    group: usize,
    int8: Option<int8::Int8Rows>,
    xsums: Vec<f32>,
}

impl Input {
    fn new(x: &[f32], w: &QuantMatrix<'_>, activations: Activations) -> Self {
        let int8 = (activations == Activations::Int8 && int8::supports(w.bits, w.group))
            .then(|| int8::Int8Rows::new(x, w.cols, w.bits));
        // Per input row, the sum of each group of inputs (of the quantized ones over int8
        // inputs).
        let xsums: Vec<f32> = match &int8 {
            Some(x8) => x8.group_sums(w.group),
            None => x
                .chunks_exact(w.group)
                .map(|g| g.iter().sum::<f32>())
                .collect(),
        };
        Self {
            bits: w.bits,
            group: w.group,
            int8,
            xsums,
        }
    }
}

/// `out` (`[m, sum_k rows_k]`, each input row's outputs of `ws[0]`, then `ws[1]`, ...) =
/// `x @ W_k^T` for every matrix.
fn products(
    x: &[f32],
    m: usize,
    ws: &[QuantMatrix<'_>],
    out: &mut [f32],
    activations: Activations,
) -> Result<(), KernelError> {
    let cols = ws.first().map_or(0, |w| w.cols);
    let total: usize = ws.iter().map(|w| w.rows).sum();
    for w in ws {
        w.check()?;
        if x.len() != m * w.cols || out.len() != m * total {
            return Err(KernelError::Shape(format!(
                "inputs of {} floats and outputs of {} for {m} rows of a {}x{} matrix",
                x.len(),
                out.len(),
                w.rows,
                w.cols
            )));
        }
    }
    if m >= DENSE_MIN_ROWS {
        let mut first = 0;
        for w in ws {
            dense::products(x, m, w, out, total, first);
            first += w.rows;
        }
        return Ok(());
    }
    // One input per (bits, group), which the matrices of that kind share.
    let mut inputs: Vec<Input> = Vec::new();
    let mut input_of = Vec::with_capacity(ws.len());
    for w in ws {
        let at = inputs
            .iter()
            .position(|i| (i.bits, i.group) == (w.bits, w.group));
        input_of.push(at.unwrap_or_else(|| {
            inputs.push(Input::new(x, w, activations));
            inputs.len() - 1
        }));
    }
    let firsts: Vec<usize> = ws
        .iter()
        .scan(0, |at, w| {
            *at += w.rows;
            Some(*at - w.rows)
        })
        .collect();
    // Rows in blocks across the team's threads: a decode step's products are one input
    // row, so the output features are what there is to share. Several blocks per thread,
    // so that a helper that starts late leaves the caller less to wait for. Tiny products
    // stay on the calling thread, where even the team's hand-off would cost more than the
    // work. A block may span two matrices.
    let block = if total * cols >= PARALLEL_MIN_WEIGHTS {
        total
            .div_ceil(team::threads() * BLOCKS_PER_THREAD)
            .next_multiple_of(ROW_ALIGN)
    } else {
        total
    };
    for r in 0..m {
        let xr = &x[r * cols..(r + 1) * cols];
        let out_row = &mut out[r * total..(r + 1) * total];
        team::for_chunks_mut(out_row, block, |i, chunk| {
            let (start, end) = (i * block, i * block + chunk.len());
            for ((w, &first), &input) in ws.iter().zip(&firsts).zip(&input_of) {
                let (from, to) = (start.max(first), end.min(first + w.rows));
                if from >= to {
                    continue;
                }
                let input = &inputs[input];
                let groups = w.cols / w.group;
                let xs = &input.xsums[r * groups..(r + 1) * groups];
                let part = &mut chunk[from - start..to - start];
                match &input.int8 {
                    Some(x8) => int8::output_rows(w, x8, xs, r, from - first, part),
                    None => output_rows(w, xr, xs, from - first, part),
                }
            }
        });
    }
    Ok(())
}

/// Adds `sum_g b_og * xsum_g` to outputs `first..`.
fn add_bias(w: &QuantMatrix<'_>, xsums: &[f32], first: usize, out: &mut [f32]) {
    let groups = w.cols / w.group;
    for (o, y) in (first..).zip(out.iter_mut()) {
        *y += bias_term(&w.biases[o * groups..(o + 1) * groups], xsums);
    }
}

/// Weights (rows x cols) from which a product is shared across threads: every matrix of
/// SmolLM2 (the smallest is 192x576). Through rayon only those of 2^19 weights or more
/// were; with the team's hand-off, sharing the rest too took a step's products 1.04-1.07x
/// less time (`step_products`, the two thresholds alternated, int8 inputs, two threads).
const PARALLEL_MIN_WEIGHTS: usize = 1 << 16;

/// Row blocks per thread in a shared product.
const BLOCKS_PER_THREAD: usize = 4;

/// Row blocks start on multiples of this: whole cache lines of outputs per task.
const ROW_ALIGN: usize = 16;

/// Outputs `first..first + out.len()` of one input row `x` (with its group sums `xsums`).
fn output_rows(w: &QuantMatrix<'_>, x: &[f32], xsums: &[f32], first: usize, out: &mut [f32]) {
    let groups = w.cols / w.group;
    let words_per_row = w.cols * w.bits as usize / 32;
    let kernel = dot_kernel();
    for (o, y) in (first..).zip(out.iter_mut()) {
        let packed = &w.packed[o * words_per_row..(o + 1) * words_per_row];
        let scales = &w.scales[o * groups..(o + 1) * groups];
        // SAFETY: `dot_kernel` only returns the AVX2 kernel when the CPU has AVX2 and FMA;
        // the slices' lengths were checked by the caller.
        *y = unsafe { kernel(packed, scales, x, w.bits, w.group) };
    }
    add_bias(w, xsums, first, out);
}

type DotKernel = unsafe fn(&[u32], &[f32], &[f32], u32, usize) -> f32;

/// The fastest row kernel this CPU runs.
fn dot_kernel() -> DotKernel {
    #[cfg(target_arch = "x86_64")]
    {
        use std::sync::OnceLock;
        static HAS_AVX2: OnceLock<bool> = OnceLock::new();
        if *HAS_AVX2
            .get_or_init(|| is_x86_feature_detected!("avx2") && is_x86_feature_detected!("fma"))
        {
            return avx2::scaled_dot;
        }
    }
    scaled_dot_portable
}

/// `sum_g scale_g * sum_{i in g} code_i * x_i` over one row, in plain Rust.
///
/// # Safety
/// None beyond the slice lengths, which the caller checked (`unsafe` only to share the
/// signature of the SIMD kernels).
unsafe fn scaled_dot_portable(
    packed: &[u32],
    scales: &[f32],
    x: &[f32],
    bits: u32,
    group: usize,
) -> f32 {
    let per_word = 32 / bits as usize;
    let mask = (1u32 << bits) - 1;
    let words_per_group = group / per_word;
    let mut total = 0f32;
    for (g, (words, xg)) in packed
        .chunks_exact(words_per_group)
        .zip(x.chunks_exact(group))
        .enumerate()
    {
        let mut acc = 0f32;
        for (word, xw) in words.iter().zip(xg.chunks_exact(per_word)) {
            for (j, xi) in xw.iter().enumerate() {
                acc += ((word >> (j as u32 * bits)) & mask) as f32 * xi;
            }
        }
        total += scales[g] * acc;
    }
    total
}

#[cfg(target_arch = "x86_64")]
mod avx2 {
    use std::arch::x86_64::*;

    /// Horizontal sum of eight lanes.
    #[inline]
    #[target_feature(enable = "avx2,fma")]
    fn hsum(v: __m256) -> f32 {
        let lo = _mm256_castps256_ps128(v);
        let hi = _mm256_extractf128_ps::<1>(v);
        let s = _mm_add_ps(lo, hi);
        let s = _mm_add_ps(s, _mm_movehl_ps(s, s));
        let s = _mm_add_ss(s, _mm_shuffle_ps::<0b01>(s, s));
        _mm_cvtss_f32(s)
    }

    /// The AVX2 + FMA version of `scaled_dot_portable`.
    ///
    /// # Safety
    /// The CPU must support AVX2 and FMA; `packed` holds `x.len() * bits / 32` words and
    /// `scales` `x.len() / group` values.
    #[target_feature(enable = "avx2,fma")]
    pub(super) unsafe fn scaled_dot(
        packed: &[u32],
        scales: &[f32],
        x: &[f32],
        bits: u32,
        group: usize,
    ) -> f32 {
        let groups = scales.len();
        let xp = x.as_ptr();
        let wp = packed.as_ptr();
        let mut total = _mm256_setzero_ps();
        match bits {
            4 => {
                // One word: eight codes, lanes j = (word >> 4j) & 15.
                let shifts = _mm256_setr_epi32(0, 4, 8, 12, 16, 20, 24, 28);
                let mask = _mm256_set1_epi32(15);
                let words = group / 8;
                for g in 0..groups {
                    let mut acc0 = _mm256_setzero_ps();
                    let mut acc1 = _mm256_setzero_ps();
                    let base = g * words;
                    let mut w = 0;
                    while w + 1 < words {
                        // SAFETY: base + w + 1 < packed.len() and (base + w + 1) * 8 + 8
                        // <= x.len(), from the lengths the caller checked.
                        let (c0, c1) = unsafe {
                            (
                                _mm256_set1_epi32(*wp.add(base + w) as i32),
                                _mm256_set1_epi32(*wp.add(base + w + 1) as i32),
                            )
                        };
                        let c0 = _mm256_cvtepi32_ps(_mm256_and_si256(
                            _mm256_srlv_epi32(c0, shifts),
                            mask,
                        ));
                        let c1 = _mm256_cvtepi32_ps(_mm256_and_si256(
                            _mm256_srlv_epi32(c1, shifts),
                            mask,
                        ));
                        let (x0, x1) = unsafe {
                            (
                                _mm256_loadu_ps(xp.add((base + w) * 8)),
                                _mm256_loadu_ps(xp.add((base + w + 1) * 8)),
                            )
                        };
                        acc0 = _mm256_fmadd_ps(c0, x0, acc0);
                        acc1 = _mm256_fmadd_ps(c1, x1, acc1);
                        w += 2;
                    }
                    if w < words {
                        let c = unsafe { _mm256_set1_epi32(*wp.add(base + w) as i32) };
                        let c = _mm256_cvtepi32_ps(_mm256_and_si256(
                            _mm256_srlv_epi32(c, shifts),
                            mask,
                        ));
                        let xv = unsafe { _mm256_loadu_ps(xp.add((base + w) * 8)) };
                        acc0 = _mm256_fmadd_ps(c, xv, acc0);
                    }
                    let s = _mm256_set1_ps(unsafe { *scales.get_unchecked(g) });
                    total = _mm256_fmadd_ps(s, _mm256_add_ps(acc0, acc1), total);
                }
            }
            8 => {
                // Two words: eight codes, one byte each, in order.
                let words = group / 4;
                let bytes = wp as *const u8;
                for g in 0..groups {
                    let mut acc = _mm256_setzero_ps();
                    let base = g * words;
                    let mut w = 0;
                    while w < words {
                        let codes =
                            unsafe { _mm_loadl_epi64(bytes.add((base + w) * 4) as *const __m128i) };
                        let c = _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(codes));
                        let xv = unsafe { _mm256_loadu_ps(xp.add((base + w) * 4)) };
                        acc = _mm256_fmadd_ps(c, xv, acc);
                        w += 2;
                    }
                    let s = _mm256_set1_ps(unsafe { *scales.get_unchecked(g) });
                    total = _mm256_fmadd_ps(s, acc, total);
                }
            }
            _ => {
                // 2 bits: one word, sixteen codes, in two halves of eight.
                let lo = _mm256_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14);
                let hi = _mm256_setr_epi32(16, 18, 20, 22, 24, 26, 28, 30);
                let mask = _mm256_set1_epi32(3);
                let words = group / 16;
                for g in 0..groups {
                    let mut acc0 = _mm256_setzero_ps();
                    let mut acc1 = _mm256_setzero_ps();
                    let base = g * words;
                    for w in 0..words {
                        let c = unsafe { _mm256_set1_epi32(*wp.add(base + w) as i32) };
                        let c0 =
                            _mm256_cvtepi32_ps(_mm256_and_si256(_mm256_srlv_epi32(c, lo), mask));
                        let c1 =
                            _mm256_cvtepi32_ps(_mm256_and_si256(_mm256_srlv_epi32(c, hi), mask));
                        let (x0, x1) = unsafe {
                            (
                                _mm256_loadu_ps(xp.add((base + w) * 16)),
                                _mm256_loadu_ps(xp.add((base + w) * 16 + 8)),
                            )
                        };
                        acc0 = _mm256_fmadd_ps(c0, x0, acc0);
                        acc1 = _mm256_fmadd_ps(c1, x1, acc1);
                    }
                    let s = _mm256_set1_ps(unsafe { *scales.get_unchecked(g) });
                    total = _mm256_fmadd_ps(s, _mm256_add_ps(acc0, acc1), total);
                }
            }
        }
        hsum(total)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A seeded matrix in MLX's layout and its dequantized form.
    pub(super) struct Seeded {
        pub packed: Vec<u32>,
        pub scales: Vec<f32>,
        pub biases: Vec<f32>,
        /// `code * scale + bias`, row-major.
        pub dense: Vec<f32>,
        pub rows: usize,
        pub cols: usize,
        pub bits: u32,
        pub group: usize,
    }

    impl Seeded {
        pub fn view(&self) -> QuantMatrix<'_> {
            QuantMatrix {
                packed: &self.packed,
                scales: &self.scales,
                biases: &self.biases,
                rows: self.rows,
                cols: self.cols,
                bits: self.bits,
                group: self.group,
            }
        }
    }

    pub(super) fn matrix(rows: usize, cols: usize, bits: u32, group: usize) -> Seeded {
        let mut rng = crate::testdata::XorShift::new(7 + bits as u64);
        let per_word = 32 / bits as usize;
        let codes: Vec<u32> = (0..rows * cols)
            .map(|_| (rng.next_u64() % (1 << bits)) as u32)
            .collect();
        let packed: Vec<u32> = codes
            .chunks_exact(per_word)
            .map(|c| {
                c.iter()
                    .enumerate()
                    .fold(0u32, |w, (j, &q)| w | q << (j as u32 * bits))
            })
            .collect();
        let scales: Vec<f32> = (0..rows * cols / group)
            .map(|_| rng.normal() * 0.1)
            .collect();
        let biases: Vec<f32> = (0..rows * cols / group).map(|_| rng.normal()).collect();
        let dense: Vec<f32> = codes
            .iter()
            .enumerate()
            .map(|(i, &q)| q as f32 * scales[i / group] + biases[i / group])
            .collect();
        Seeded {
            packed,
            scales,
            biases,
            dense,
            rows,
            cols,
            bits,
            group,
        }
    }

    #[test]
    fn matches_the_dequantized_product_for_every_kernel() {
        for bits in [2, 4, 8] {
            for group in [32, 64, 128] {
                let (rows, cols, m) = (19, 256, 3);
                let seeded = matrix(rows, cols, bits, group);
                let (packed, scales, biases, dense) = (
                    &seeded.packed,
                    &seeded.scales,
                    &seeded.biases,
                    &seeded.dense,
                );
                let mut rng = crate::testdata::XorShift::new(99);
                let x: Vec<f32> = (0..m * cols).map(|_| rng.normal()).collect();
                let w = seeded.view();
                let mut out = vec![0f32; m * rows];
                qmatmul(&x, m, &w, &mut out, Activations::Float).unwrap();
                let mut portable = vec![0f32; m * rows];
                for r in 0..m {
                    for o in 0..rows {
                        let xr = &x[r * cols..(r + 1) * cols];
                        let p = &packed
                            [o * cols * bits as usize / 32..(o + 1) * cols * bits as usize / 32];
                        let s = &scales[o * cols / group..(o + 1) * cols / group];
                        let b: f32 = biases[o * cols / group..(o + 1) * cols / group]
                            .iter()
                            .zip(xr.chunks_exact(group))
                            .map(|(b, g)| b * g.iter().sum::<f32>())
                            .sum();
                        portable[r * rows + o] =
                            unsafe { scaled_dot_portable(p, s, xr, bits, group) } + b;
                    }
                }
                let mut int8 = vec![0f32; m * rows];
                qmatmul(&x, m, &w, &mut int8, Activations::Int8).unwrap();
                for r in 0..m {
                    let xr = &x[r * cols..(r + 1) * cols];
                    for o in 0..rows {
                        let want: f64 = (0..cols)
                            .map(|i| f64::from(xr[i]) * f64::from(dense[o * cols + i]))
                            .sum();
                        for got in [out[r * rows + o], portable[r * rows + o]] {
                            assert!(
                                (f64::from(got) - want).abs() < 1e-3 * (1.0 + want.abs()),
                                "bits {bits} group {group}: {got} vs {want}"
                            );
                        }
                        // int8 activations move each value by at most half a step of its
                        // block, and the product is the weights' with the moved values:
                        // bounded by sum |w| * max|x_block| / 254.
                        let bound: f64 = (0..cols)
                            .map(|i| {
                                let block = &xr[i / INT8_BLOCK * INT8_BLOCK..][..INT8_BLOCK];
                                let amax = block.iter().fold(0f32, |a, v| a.max(v.abs()));
                                f64::from(dense[o * cols + i]).abs() * f64::from(amax) / 254.0
                            })
                            .sum();
                        let got = f64::from(int8[r * rows + o]);
                        assert!(
                            (got - want).abs() <= bound * 1.001 + 1e-4 * (1.0 + want.abs()),
                            "int8, bits {bits} group {group}: {got} vs {want}, bound {bound}"
                        );
                    }
                }
            }
        }
    }

    /// Matrices over one input, multiplied together, give each one's own product exactly,
    /// with mixed bit widths and group sizes (inputs quantized once per kind), one and two
    /// input rows, and row blocks that span two matrices.
    #[test]
    fn several_matrices_over_one_input_equal_their_own_products() {
        let cols = 256;
        let kinds = [
            (576, 4, 32),
            (192, 4, 32),
            (200, 8, 64),
            (37, 2, 128),
            (1500, 4, 32),
        ];
        let data: Vec<_> = kinds
            .iter()
            .map(|&(rows, bits, group)| matrix(rows, cols, bits, group))
            .collect();
        let ws: Vec<QuantMatrix<'_>> = data.iter().map(Seeded::view).collect();
        let mut rng = crate::testdata::XorShift::new(11);
        for m in [1, 2, DENSE_MIN_ROWS + 3] {
            let x: Vec<f32> = (0..m * cols).map(|_| rng.normal()).collect();
            for activations in [Activations::Float, Activations::Int8] {
                for take in [1, 2, 3, ws.len()] {
                    let many = qmatmul_many(&x, m, &ws[..take], activations).unwrap();
                    assert_eq!(many.len(), take);
                    for (w, got) in ws.iter().zip(&many) {
                        let mut want = vec![0f32; m * w.rows];
                        qmatmul(&x, m, w, &mut want, activations).unwrap();
                        assert_eq!(got, &want, "{activations:?}, {take} matrices, m = {m}");
                    }
                }
            }
        }
        let other = QuantMatrix { cols: 128, ..ws[0] };
        assert!(qmatmul_many(&vec![0.0; cols], 1, &[ws[0], other], Activations::Float).is_err());
    }

    /// Rows dequantized one by one equal the seeded dense matrix; a product large enough to
    /// be split across threads equals the one-thread sums row by row.
    #[test]
    fn rows_and_the_threaded_product_match_the_dense_matrix() {
        for bits in [2, 4, 8] {
            let (rows, cols, group) = (2100, 256, 64);
            assert!(
                rows * cols >= PARALLEL_MIN_WEIGHTS,
                "must take the threaded path"
            );
            let seeded = matrix(rows, cols, bits, group);
            let (w, dense) = (seeded.view(), &seeded.dense);
            for r in [0, 1, 1049, rows - 1] {
                assert_eq!(
                    w.row(r).unwrap(),
                    dense[r * cols..(r + 1) * cols],
                    "row {r}"
                );
            }
            assert!(w.row(rows).is_none());
            let mut rng = crate::testdata::XorShift::new(5);
            let x: Vec<f32> = (0..cols).map(|_| rng.normal()).collect();
            let mut out = vec![0f32; rows];
            qmatmul(&x, 1, &w, &mut out, Activations::Float).unwrap();
            let mut serial = vec![0f32; rows];
            let xsums: Vec<f32> = x.chunks_exact(group).map(|g| g.iter().sum()).collect();
            output_rows(&w, &x, &xsums, 0, &mut serial);
            assert_eq!(out, serial, "{bits} bits");
        }
    }

    /// From [`DENSE_MIN_ROWS`] input rows the weights are dequantized in blocks and
    /// multiplied by `sgemm`: the product of the seeded dense matrix, with a block edge
    /// inside the matrix, at every bit width, and equal to the row kernels' within float
    /// rounding.
    #[test]
    fn many_rows_take_the_dense_product() {
        let (rows, cols, group) = (4500, 256, 64);
        assert!(rows * cols > dense::BLOCK_FLOATS, "must take two blocks");
        let mut rng = crate::testdata::XorShift::new(13);
        for bits in [2, 4, 8] {
            let seeded = matrix(rows, cols, bits, group);
            let (w, dense) = (seeded.view(), &seeded.dense);
            let m = DENSE_MIN_ROWS + 1;
            let x: Vec<f32> = (0..m * cols).map(|_| rng.normal()).collect();
            let mut out = vec![0f32; m * rows];
            qmatmul(&x, m, &w, &mut out, Activations::Int8).unwrap();
            for r in 0..m {
                let xr = &x[r * cols..(r + 1) * cols];
                let mut by_rows = vec![0f32; rows];
                qmatmul(xr, 1, &w, &mut by_rows, Activations::Float).unwrap();
                for o in (0..rows).step_by(7).chain([rows - 1]) {
                    let want: f64 = (0..cols)
                        .map(|i| f64::from(xr[i]) * f64::from(dense[o * cols + i]))
                        .sum();
                    let got = out[r * rows + o];
                    for got in [got, by_rows[o]] {
                        assert!(
                            (f64::from(got) - want).abs() < 1e-3 * (1.0 + want.abs()),
                            "bits {bits}, row {r}, output {o}: {got} vs {want}"
                        );
                    }
                }
            }
        }
    }

    #[test]
    fn refuses_shapes_that_do_not_fit() {
        let seeded = matrix(4, 64, 4, 32);
        let w = seeded.view();
        let mut out = vec![0f32; 4];
        assert!(qmatmul(&[0.0; 63], 1, &w, &mut out, Activations::Int8).is_err());
        let bad = QuantMatrix { rows: 5, ..w };
        assert!(qmatmul(&[0.0; 64], 1, &bad, &mut [0.0; 5], Activations::Float).is_err());
        assert!(!supports(3, 32));
        assert!(supports(8, 32));
    }
}
