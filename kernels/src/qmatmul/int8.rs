//! The quantized product over 8-bit-quantized activations, with integer dot products.
//!
//! Why: a decode step reads every weight once, and the float kernel spends about three
//! instructions per code unpacking it to a float lane before its multiply-add. Quantizing
//! the input row to int8 first (per block of [`BLOCK`] values, `x_i ~ d_k * q_i`, as
//! llama.cpp does for its `Q8` activations) turns a block of 32 codes into one integer
//! dot product: `vpdpbusd` (AVX-VNNI or AVX-512 VNNI) or `vpmaddubsw` + `vpmaddwd` (AVX2).
//!
//! `y_o = sum_k s_o(k) * d_k * (sum_{i in k} code_oi * q_i) + sum_g b_og * (sum_{i in g} x_i)`
//!
//! The bias term takes the sums of the quantized inputs (`xsum_g = sum d_k * q_i`,
//! [`Int8Rows::group_sums`]), as llama.cpp's `Q8_1` sums do, so that the product is exactly
//! the weights times the quantized inputs: the rounding error of each input is then
//! multiplied by its weight, which is centred on zero, not by `scale * code` alone, which
//! is not (a 4-bit code averages 7.5 steps), and the error does not need the bias term to
//! cancel. Measured on SmolLM2 with the exact float sums instead: logits up to 0.63 from
//! mlx-lm's (`engine/tests/mlx_lm_reference.rs`); with these sums, see that test.
//! The integer sums are exact, so every kernel computes the same block sums as the plain
//! Rust one (`portable`); only the float accumulation of the blocks runs in a different
//! order. The activations' rounding (at most half a step of `max|x_k| / 127` per value)
//! is the whole numeric difference from the float kernel.
//!
//! The packed codes are read in MLX's layout as they are; the activations are reordered
//! within each block to match it instead ([`Int8Rows::new`]): a 4-bit block's sixteen
//! bytes split into low nibbles (even codes) and high nibbles (odd codes), a 2-bit block's
//! eight bytes into four bit planes (codes `4b + p`), and 8-bit codes are in order.

use super::matrix::{bias_term, QuantMatrix};
use crate::host::lanes::{dot, Separate, LANES};

/// Activations sharing one int8 scale.
pub const BLOCK: usize = 32;

/// Whether the int8 kernel runs this matrix: its groups must hold a power of two of
/// whole blocks (32, 64, 128, ...: every GGUF and MLX group size), so that a block finds
/// its scale with a shift.
pub(super) fn supports(bits: u32, group: usize) -> bool {
    matches!(bits, 2 | 4 | 8) && group >= BLOCK && group.is_power_of_two()
}

/// Input rows quantized to int8, reordered for one bit width.
pub(super) struct Int8Rows {
    /// `[m, cols]`, each block in the order of the weights' codes.
    q: Vec<i8>,
    /// `[m, cols / BLOCK]`: the step of each block (NaN when the block holds a value that
    /// is not finite, so that the output is not finite either, as with float inputs).
    d: Vec<f32>,
    /// `[m, cols / BLOCK]`: `128 * sum q` of each block, for the AVX2 8-bit kernel's sign
    /// trick and the bias term's sums ([`Int8Rows::group_sums`]).
    qsum128: Vec<i32>,
    /// Per row, the values kept out of the int8 blocks (index, value): see [`OUTLIERS`].
    outliers: Vec<Vec<(usize, f32)>>,
    cols: usize,
}

/// At most this many values per row, each above [`OUTLIER_RMS`] times the row's RMS, are
/// multiplied in float32 instead of taking a block's int8 range. Why: normalized hidden
/// states have a few outlier channels (SmolLM2's reach 20-40x the RMS), and one of them
/// makes the step of its block so coarse that the other 31 values round to a few levels.
/// Their products cost one weight column each.
const OUTLIERS: usize = 8;

/// See [`OUTLIERS`].
const OUTLIER_RMS: f32 = 6.0;

/// The indices of row `x`'s outliers, largest first.
fn outliers(x: &[f32]) -> Vec<usize> {
    let rms = (dot::<Separate>(x, x) / x.len().max(1) as f32).sqrt();
    let limit = OUTLIER_RMS * rms;
    let mut big: Vec<usize> = (0..x.len()).filter(|&i| x[i].abs() > limit).collect();
    big.sort_by(|&a, &b| x[b].abs().total_cmp(&x[a].abs()));
    big.truncate(OUTLIERS);
    big
}

/// A block's largest magnitude, or `None` when it holds a value that is not finite.
fn block_amax(xb: &[f32; BLOCK]) -> Option<f32> {
    let (mut amax, mut finite) = ([0f32; LANES], [true; LANES]);
    for c in xb.chunks_exact(LANES) {
        for l in 0..LANES {
            amax[l] = amax[l].max(c[l].abs());
            finite[l] &= c[l].is_finite();
        }
    }
    finite
        .iter()
        .all(|&f| f)
        .then(|| amax.iter().fold(0f32, |a, &v| a.max(v)))
}

/// Code `i` of a block of [`BLOCK`] at `bits` sits at this position of the reordered block.
fn position(i: usize, bits: u32) -> usize {
    match bits {
        4 => (i % 2) * 16 + i / 2,
        2 => (i % 4) * 8 + i / 4,
        _ => i,
    }
}

impl Int8Rows {
    /// Quantizes `m` rows of `cols` (a multiple of [`BLOCK`]) for weights of `bits`.
    pub(super) fn new(x: &[f32], cols: usize, bits: u32) -> Self {
        let blocks = x.len() / BLOCK;
        let mut q = vec![0i8; x.len()];
        let mut d = Vec::with_capacity(blocks);
        let mut qsum128 = Vec::with_capacity(blocks);
        let mut rest = x.to_vec();
        let mut kept = Vec::new();
        for row in rest.chunks_exact_mut(cols) {
            // A fold, not `all`: without the early exit the check vectorizes.
            let finite = row.iter().fold(true, |f, v| f & v.is_finite());
            let found: Vec<(usize, f32)> = if finite {
                outliers(row).into_iter().map(|i| (i, row[i])).collect()
            } else {
                Vec::new()
            };
            for &(i, _) in &found {
                row[i] = 0.0;
            }
            kept.push(found);
        }
        for (xb, qb) in rest.chunks_exact(BLOCK).zip(q.chunks_exact_mut(BLOCK)) {
            let xb: &[f32; BLOCK] = xb.try_into().expect("chunks of BLOCK");
            let Some(amax) = block_amax(xb) else {
                d.push(f32::NAN);
                qsum128.push(0);
                continue;
            };
            let step = amax / 127.0;
            let inv = if step > 0.0 { 1.0 / step } else { 0.0 };
            // In the inputs' order first, so that the arithmetic vectorizes, then moved to
            // the codes' order.
            let mut codes = [0i8; BLOCK];
            for (c, v) in codes.iter_mut().zip(xb) {
                // Half away from zero, as `f32::round`, without its libm call; |v * inv|
                // <= 127 up to rounding, and the cast saturates.
                let r = v * inv;
                *c = (r + 0.5f32.copysign(r)) as i8;
            }
            let sum: i32 = codes.iter().map(|&c| i32::from(c)).sum();
            for (i, &c) in codes.iter().enumerate() {
                qb[position(i, bits)] = c;
            }
            d.push(step);
            qsum128.push(128 * sum);
        }
        Self {
            q,
            d,
            qsum128,
            outliers: kept,
            cols,
        }
    }

    /// `[m, cols / group]`: the sum of the values each group of inputs stands for
    /// (`d_k * q_i`, and the outliers themselves), the bias term's factors.
    pub(super) fn group_sums(&self, group: usize) -> Vec<f32> {
        let blocks_per_group = group / BLOCK;
        let groups = self.cols / group;
        let mut sums: Vec<f32> = self
            .d
            .chunks_exact(blocks_per_group)
            .zip(self.qsum128.chunks_exact(blocks_per_group))
            .map(|(d, qsum128)| {
                d.iter()
                    .zip(qsum128)
                    .map(|(d, s)| d * (s / 128) as f32)
                    .sum()
            })
            .collect();
        for (r, kept) in self.outliers.iter().enumerate() {
            for &(i, v) in kept {
                sums[r * groups + i / group] += v;
            }
        }
        sums
    }

    /// Row `r` as the values it stands for (`d_k * q_i`, or the outlier itself), in the
    /// input's order.
    #[cfg(test)]
    pub(super) fn dequantized(&self, r: usize, bits: u32) -> Vec<f64> {
        let (q, d, _) = self.row(r);
        let mut values: Vec<f64> = (0..self.cols)
            .map(|i| {
                let (k, j) = (i / BLOCK, i % BLOCK);
                f64::from(d[k]) * f64::from(q[k * BLOCK + position(j, bits)])
            })
            .collect();
        for &(i, v) in &self.outliers[r] {
            values[i] = f64::from(v);
        }
        values
    }

    /// Row `r`: its codes, steps and sums.
    fn row(&self, r: usize) -> (&[i8], &[f32], &[i32]) {
        let blocks = self.cols / BLOCK;
        (
            &self.q[r * self.cols..(r + 1) * self.cols],
            &self.d[r * blocks..(r + 1) * blocks],
            &self.qsum128[r * blocks..(r + 1) * blocks],
        )
    }
}

/// Outputs `first..first + out.len()` of input row `r`, whose group sums (the bias
/// term's factors, [`Int8Rows::group_sums`]) are `xsums`.
pub(super) fn output_rows(
    w: &QuantMatrix<'_>,
    x: &Int8Rows,
    xsums: &[f32],
    r: usize,
    first: usize,
    out: &mut [f32],
) {
    output_rows_with(kernel(w.bits), w, x, xsums, r, first, out)
}

/// [`output_rows`] with a given kernel (the tests run each one this CPU has).
fn output_rows_with(
    kernel: Kernel,
    w: &QuantMatrix<'_>,
    x: &Int8Rows,
    xsums: &[f32],
    r: usize,
    first: usize,
    out: &mut [f32],
) {
    let (q, d, qsum128) = x.row(r);
    // Each outlier's word, shift and group in a weight row, found once for all rows.
    let per_word = 32 / w.bits as usize;
    let mask = (1u32 << w.bits) - 1;
    let taps: Vec<(usize, u32, usize, f32)> = x.outliers[r]
        .iter()
        .map(|&(i, v)| (i / per_word, (i % per_word) as u32 * w.bits, i / w.group, v))
        .collect();
    let groups = w.cols / w.group;
    let words_per_row = w.cols * w.bits as usize / 32;
    for (o, y) in (first..).zip(out.iter_mut()) {
        let row = Row {
            packed: &w.packed[o * words_per_row..(o + 1) * words_per_row],
            scales: &w.scales[o * groups..(o + 1) * groups],
            biases: &w.biases[o * groups..(o + 1) * groups],
            xsums,
            q,
            d,
            qsum128,
            bits: w.bits,
            group: w.group,
        };
        // SAFETY: `kernel` returns a SIMD kernel only when the CPU has its features; the
        // row's slices hold `cols` codes, `cols / BLOCK` blocks and `cols / group` groups
        // (checked by the caller).
        let mut y_o = unsafe { kernel(&row) };
        for &(word, shift, g, v) in &taps {
            let code = (row.packed[word] >> shift) & mask;
            y_o += v * code as f32 * row.scales[g];
        }
        *y = y_o;
    }
}

/// One weight row and one quantized input row.
struct Row<'a> {
    packed: &'a [u32],
    scales: &'a [f32],
    biases: &'a [f32],
    /// The quantized input's sums per group ([`Int8Rows::group_sums`]).
    xsums: &'a [f32],
    q: &'a [i8],
    d: &'a [f32],
    qsum128: &'a [i32],
    bits: u32,
    group: usize,
}

/// `y_o` for one row, bias term included.
type Kernel = unsafe fn(&Row<'_>) -> f32;

/// Every kernel this CPU runs for `bits`, the fastest first.
fn kernels(bits: u32) -> Vec<Kernel> {
    #[allow(unused_mut)]
    let mut all: Vec<Kernel> = Vec::new();
    #[cfg(target_arch = "x86_64")]
    all.extend(x86::available(bits));
    all.push(portable);
    all
}

/// The fastest kernel this CPU runs for `bits`.
fn kernel(bits: u32) -> Kernel {
    use std::sync::OnceLock;
    static BEST: OnceLock<[Kernel; 3]> = OnceLock::new();
    let best = BEST.get_or_init(|| [2, 4, 8].map(|b| kernels(b)[0]));
    best[bits.trailing_zeros() as usize - 1]
}

/// `sum_k s(k) * d_k * block_k + sum_g b_g * xsum_g` in plain Rust, over the reordered
/// codes.
///
/// # Safety
/// None (`unsafe` to share the SIMD kernels' signature).
unsafe fn portable(row: &Row<'_>) -> f32 {
    let blocks_per_group = row.group / BLOCK;
    let per_word = 32 / row.bits as usize;
    let mask = (1u32 << row.bits) - 1;
    let words_per_block = BLOCK / per_word;
    let mut total = 0f32;
    for (k, (words, qb)) in row
        .packed
        .chunks_exact(words_per_block)
        .zip(row.q.chunks_exact(BLOCK))
        .enumerate()
    {
        let mut sum = 0i32;
        for (w, word) in words.iter().enumerate() {
            for j in 0..per_word {
                let code = ((word >> (j as u32 * row.bits)) & mask) as i32;
                sum += code * i32::from(qb[position(w * per_word + j, row.bits)]);
            }
        }
        total += row.scales[k / blocks_per_group] * row.d[k] * sum as f32;
    }
    total + bias_term(row.biases, row.xsums)
}

#[cfg(target_arch = "x86_64")]
mod x86 {
    use std::arch::x86_64::*;

    // The parent's items by their full path: `scripts/import_cycles.py` reads `super` in
    // an inline module as the file's parent module.
    use crate::qmatmul::int8::{Kernel, Row, BLOCK};

    /// The kernels this CPU runs for `bits`, fastest first: VNNI (256-bit `vpdpbusd`,
    /// from AVX-512 VNNI or AVX-VNNI), then AVX2.
    pub(super) fn available(bits: u32) -> Vec<Kernel> {
        let mut all: Vec<Kernel> = Vec::new();
        if !(is_x86_feature_detected!("avx2") && is_x86_feature_detected!("fma")) {
            return all;
        }
        let by_bits = |k: [Kernel; 3]| k[bits.trailing_zeros() as usize - 1];
        if is_x86_feature_detected!("avx512vnni") && is_x86_feature_detected!("avx512vl") {
            all.push(by_bits([vnni512::<2>, vnni512::<4>, vnni512::<8>]));
        }
        if is_x86_feature_detected!("avxvnni") {
            all.push(by_bits([vnni::<2>, vnni::<4>, vnni::<8>]));
        }
        all.push(by_bits([avx2::<2>, avx2::<4>, avx2::<8>]));
        all
    }

    /// The 32 codes of block `k` as unsigned bytes, in the reordered positions.
    ///
    /// # Safety
    /// AVX2; `wp` holds block `k`.
    #[inline(always)]
    unsafe fn codes<const BITS: u32>(wp: *const u32, k: usize) -> __m256i {
        unsafe {
            match BITS {
                4 => {
                    let bytes = _mm_loadu_si128(wp.add(k * 4) as *const __m128i);
                    let m4 = _mm_set1_epi8(0x0f);
                    let lo = _mm_and_si128(bytes, m4);
                    let hi = _mm_and_si128(_mm_srli_epi16::<4>(bytes), m4);
                    _mm256_set_m128i(hi, lo)
                }
                2 => {
                    let bytes = _mm_loadl_epi64(wp.add(k * 2) as *const __m128i);
                    let m2 = _mm_set1_epi8(0x03);
                    let p0 = _mm_and_si128(bytes, m2);
                    let p1 = _mm_and_si128(_mm_srli_epi16::<2>(bytes), m2);
                    let p2 = _mm_and_si128(_mm_srli_epi16::<4>(bytes), m2);
                    let p3 = _mm_and_si128(_mm_srli_epi16::<6>(bytes), m2);
                    _mm256_set_m128i(_mm_unpacklo_epi64(p2, p3), _mm_unpacklo_epi64(p0, p1))
                }
                _ => _mm256_loadu_si256(wp.add(k * 8) as *const __m256i),
            }
        }
    }

    /// Horizontal sum of eight lanes.
    #[inline(always)]
    unsafe fn hsum(v: __m256) -> f32 {
        unsafe {
            let s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps::<1>(v));
            let s = _mm_add_ps(s, _mm_movehl_ps(s, s));
            let s = _mm_add_ss(s, _mm_shuffle_ps::<0b01>(s, s));
            _mm_cvtss_f32(s)
        }
    }

    /// One kernel per dot-product instruction, each for 2, 4 and 8 bits: the loop is the
    /// same. Each block's integer sums are scaled by `s(k) * d_k` into one of four float
    /// accumulators, so that consecutive blocks do not wait on each other's multiply-add;
    /// the bias term runs eight groups at a time.
    macro_rules! kernel {
        ($name:ident, $features:literal, |$c:ident, $q:ident, $k:ident, $row:ident| $dot:expr) => {
            /// # Safety
            /// The CPU has the named features; the row's slices fit (see `output_rows`).
            #[target_feature(enable = $features)]
            unsafe fn $name<const BITS: u32>($row: &Row<'_>) -> f32 {
                let blocks = $row.q.len() / BLOCK;
                let shift = ($row.group / BLOCK).trailing_zeros();
                let wp = $row.packed.as_ptr();
                let qp = $row.q.as_ptr();
                let (sp, dp) = ($row.scales.as_ptr(), $row.d.as_ptr());
                // SAFETY (every block below): `$k < blocks`, so block `$k` lies inside the
                // row's codes, activations and steps, and its group `$k >> shift` inside
                // its scales.
                let block = |$k: usize| unsafe {
                    let sums = {
                        let $c = codes::<BITS>(wp, $k);
                        let $q = _mm256_loadu_si256(qp.add($k * BLOCK) as *const __m256i);
                        $dot
                    };
                    let step = *sp.add($k >> shift) * *dp.add($k);
                    (_mm256_set1_ps(step), _mm256_cvtepi32_ps(sums))
                };
                let mut acc = [_mm256_setzero_ps(); 4];
                let mut k = 0;
                while k + 4 <= blocks {
                    for (u, a) in acc.iter_mut().enumerate() {
                        let (step, v) = block(k + u);
                        *a = _mm256_fmadd_ps(step, v, *a);
                    }
                    k += 4;
                }
                while k < blocks {
                    let (step, v) = block(k);
                    acc[0] = _mm256_fmadd_ps(step, v, acc[0]);
                    k += 1;
                }
                let groups = $row.scales.len();
                let (bp, xp) = ($row.biases.as_ptr(), $row.xsums.as_ptr());
                let mut bias = _mm256_setzero_ps();
                let mut g = 0;
                while g + 8 <= groups {
                    // SAFETY: g + 8 <= groups = biases.len() = xsums.len().
                    let (b, x) =
                        unsafe { (_mm256_loadu_ps(bp.add(g)), _mm256_loadu_ps(xp.add(g))) };
                    bias = _mm256_fmadd_ps(b, x, bias);
                    g += 8;
                }
                let tail: f32 = $row.biases[g..]
                    .iter()
                    .zip(&$row.xsums[g..])
                    .map(|(b, x)| b * x)
                    .sum();
                let total =
                    _mm256_add_ps(_mm256_add_ps(acc[0], acc[1]), _mm256_add_ps(acc[2], acc[3]));
                unsafe { hsum(_mm256_add_ps(total, bias)) + tail }
            }
        };
    }

    kernel!(vnni512, "avx2,fma,avx512vnni,avx512vl", |c, q, k, row| {
        _mm256_dpbusd_epi32(_mm256_setzero_si256(), c, q)
    });

    kernel!(vnni, "avx2,fma,avxvnni", |c, q, k, row| {
        _mm256_dpbusd_avx_epi32(_mm256_setzero_si256(), c, q)
    });

    kernel!(avx2, "avx2,fma", |c, q, k, row| {
        let ones = _mm256_set1_epi16(1);
        if BITS == 8 {
            // Codes up to 255 would saturate `vpmaddubsw`'s 16-bit pair sums: multiply
            // |code - 128| by q with code - 128's sign, and add back 128 * sum q.
            let centred = _mm256_xor_si256(c, _mm256_set1_epi8(-128));
            let pairs =
                _mm256_maddubs_epi16(_mm256_abs_epi8(centred), _mm256_sign_epi8(q, centred));
            let back = _mm256_zextsi128_si256(_mm_cvtsi32_si128(row.qsum128[k]));
            _mm256_add_epi32(_mm256_madd_epi16(pairs, ones), back)
        } else {
            // Codes below 16: pair sums stay under 2 * 15 * 128.
            _mm256_madd_epi16(_mm256_maddubs_epi16(c, q), ones)
        }
    });
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::qmatmul::tests::matrix;
    use crate::testdata::XorShift;

    /// Every kernel this CPU has, at every width and group, equals the product of the
    /// dequantized weights with the dequantized activations (computed in f64) to float
    /// rounding; the activations are within half a step of the input.
    #[test]
    fn each_kernel_equals_the_product_of_what_the_codes_stand_for() {
        for bits in [2u32, 4, 8] {
            let kernels = kernels(bits);
            assert!(kernels.len() > 1 || !cfg!(target_arch = "x86_64"));
            for group in [32usize, 64, 128] {
                let (rows, cols) = (7, 384);
                let seeded = matrix(rows, cols, bits, group);
                // `code * scale` of every weight, without the bias.
                let scaled: Vec<f64> = seeded
                    .dense
                    .iter()
                    .enumerate()
                    .map(|(i, v)| f64::from(*v) - f64::from(seeded.biases[i / group]))
                    .collect();
                let mut rng = XorShift::new(11 + bits as u64 + group as u64);
                let w = seeded.view();
                let biases = &seeded.biases;
                // Two rows: one with an outlier, one all zero in its second block.
                let mut x: Vec<f32> = (0..2 * cols).map(|_| rng.normal()).collect();
                x[5] = 40.0;
                x[cols + BLOCK..cols + 2 * BLOCK].fill(0.0);
                let rows8 = Int8Rows::new(&x, cols, bits);
                let xsums = rows8.group_sums(group);
                for r in 0..2 {
                    let xq = rows8.dequantized(r, bits);
                    if r == 0 {
                        assert_eq!(xq[5], 40.0, "the outlier is kept in float32");
                    }
                    for (g, sum) in xsums[r * cols / group..][..cols / group].iter().enumerate() {
                        let want: f64 = xq[g * group..][..group].iter().sum();
                        assert!((f64::from(*sum) - want).abs() <= 1e-5 * (1.0 + want.abs()));
                    }
                    for (i, v) in xq.iter().enumerate() {
                        let xi = f64::from(x[r * cols + i]);
                        let amax = x[r * cols + i / BLOCK * BLOCK..][..BLOCK]
                            .iter()
                            .fold(0f32, |a, v| a.max(v.abs()));
                        assert!((v - xi).abs() <= f64::from(amax) / 254.0 * 1.0001);
                    }
                    for (n, kernel) in kernels.iter().enumerate() {
                        let mut out = vec![0f32; rows];
                        output_rows_with(
                            *kernel,
                            &w,
                            &rows8,
                            &xsums[r * cols / group..(r + 1) * cols / group],
                            r,
                            0,
                            &mut out,
                        );
                        for (o, got) in out.iter().enumerate() {
                            let bias: f64 = (0..cols / group)
                                .map(|g| {
                                    f64::from(biases[o * cols / group + g])
                                        * f64::from(xsums[r * cols / group + g])
                                })
                                .sum();
                            let want: f64 =
                                bias + (0..cols).map(|i| scaled[o * cols + i] * xq[i]).sum::<f64>();
                            let size: f64 = (0..cols)
                                .map(|i| (scaled[o * cols + i] * xq[i]).abs())
                                .sum::<f64>()
                                + (0..cols / group)
                                    .map(|g| {
                                        (f64::from(biases[o * cols / group + g])
                                            * f64::from(xsums[r * cols / group + g]))
                                        .abs()
                                    })
                                    .sum::<f64>();
                            assert!(
                                (f64::from(*got) - want).abs() <= 1e-5 * size,
                                "kernel {n}, {bits} bits, group {group}, row {r}, output \
                                 {o}: {got} vs {want}"
                            );
                        }
                    }
                }
            }
        }
    }

    #[test]
    fn values_that_are_not_finite_give_outputs_that_are_not() {
        let x: Vec<f32> = (0..64)
            .map(|i| if i == 40 { f32::INFINITY } else { 1.0 })
            .collect();
        let rows8 = Int8Rows::new(&x, 64, 4);
        let packed = vec![0x1111_1111u32; 8];
        let (scales, biases) = (vec![1f32; 2], vec![0f32; 2]);
        let w = QuantMatrix {
            packed: &packed,
            scales: &scales,
            biases: &biases,
            rows: 1,
            cols: 64,
            bits: 4,
            group: 32,
        };
        for kernel in kernels(4) {
            let mut out = [0f32];
            output_rows_with(kernel, &w, &rows8, &[1.0, 1.0], 0, 0, &mut out);
            assert!(!out[0].is_finite());
        }
    }
}
