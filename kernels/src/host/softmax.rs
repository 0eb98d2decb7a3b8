//! A vectorizable `exp` and softmax over rows.
//!
//! `exp` is Cephes' `expf` (range reduction by `ln 2` in two parts, a degree-6 polynomial,
//! the exponent put back through the float's bits): relative error below 2e-7 on the range
//! softmax uses (`x <= 0`), and written without calls or branches so that the compiler
//! turns the loops below into SIMD code.

const LOG2E: f32 = std::f32::consts::LOG2_E;
const LN2_HI: f32 = 0.693_359_4;
const LN2_LO: f32 = -2.121_944_4e-4;
/// Below this, `exp` is 0 in practice (`exp(-87.3)` is the smallest normal float).
const MIN_ARG: f32 = -87.3;
const MAX_ARG: f32 = 88.7;
/// 1.5 * 2^23: adding it to a float of magnitude below 2^22 rounds that float to the
/// nearest whole number and leaves the number in the low mantissa bits.
const SHIFTER: f32 = 12_582_912.0;
/// Partial sums kept by [`exp_in_place`]: one AVX register of floats.
const LANES: usize = 8;

/// `e^x` (relative error below 2e-7 for `-87 < x < 88`; clamped outside).
#[inline(always)]
pub fn exp(x: f32) -> f32 {
    let x = x.clamp(MIN_ARG, MAX_ARG);
    // n = round(x / ln 2) by the shifter, not `floor`: without SSE4.1 in the baseline
    // target, `floor` is a call to `floorf` per element, which also stops vectorization.
    let shifted = x * LOG2E + SHIFTER;
    let n = shifted - SHIFTER;
    let r = x - n * LN2_HI - n * LN2_LO;
    let mut p = 1.987_569_1e-4f32;
    p = p * r + 1.398_199_9e-3;
    p = p * r + 8.333_452e-3;
    p = p * r + 4.166_579_6e-2;
    p = p * r + 1.666_666_5e-1;
    p = p * r + 0.5;
    let y = p * r * r + r + 1.0;
    // 2^n from the low mantissa bits of the shifted float, which hold n: `n as i32` would
    // be a saturating conversion, which does not vectorize.
    let n = shifted.to_bits().wrapping_sub(SHIFTER.to_bits());
    y * f32::from_bits(n.wrapping_add(127) << 23)
}

/// Below this, `x - max` gets weight 0 instead of `e^(x - max)` (under 1.6e-28).
///
/// Such a weight cannot change a float32 sum that holds the row's largest weight, 1, even
/// summed over millions of tokens; but its products with small scales or values are
/// subnormal floats, which x86 CPUs handle in microcode at many times the cost of a normal
/// multiply-add. Rows with an attention sink are full of them: K4V4 decode at 8k tokens
/// after a real prefill ran at 12.2 tokens/s with them and 16.5 with subnormals flushed.
const NEGLIGIBLE: f32 = -64.0;

/// `e^(x - max)`, or 0 where that is negligible ([`NEGLIGIBLE`]).
#[inline(always)]
fn weight(x: f32, max: f32) -> f32 {
    let d = x - max;
    // Clamped, so that `exp` itself works on normal floats only (its result near its own
    // lower clamp, -87.3, is subnormal); then a select, not a branch, so that the loops
    // stay vectorized.
    let e = exp(d.max(NEGLIGIBLE));
    if d < NEGLIGIBLE {
        0.0
    } else {
        e
    }
}

/// Replaces each `x` of a non-empty row by its weight `e^(x - max)` (0 where negligible)
/// and returns `(max, sum)`: the unnormalized softmax, for callers that combine rows
/// computed in parts.
#[inline(always)]
pub(crate) fn exp_in_place(row: &mut [f32]) -> (f32, f32) {
    let max = row_max(row);
    (max, exp_against(row, max))
}

#[inline(always)]
fn row_max(row: &[f32]) -> f32 {
    row.iter().copied().fold(f32::NEG_INFINITY, f32::max)
}

/// Replaces each `x` of `row` by its weight `e^(x - max)` (0 where negligible) for a `max`
/// at least the row's own, and returns their sum.
#[inline(always)]
fn exp_against(row: &mut [f32], max: f32) -> f32 {
    // Eight partial sums: one running total would be a chain of dependent additions that
    // keeps the loop (and its `exp`) from being vectorized.
    let mut lanes = [0f32; LANES];
    let mut chunks = row.chunks_exact_mut(LANES);
    for chunk in &mut chunks {
        for (x, lane) in chunk.iter_mut().zip(&mut lanes) {
            *x = weight(*x, max);
            *lane += *x;
        }
    }
    let mut total: f32 = lanes.iter().sum();
    for x in chunks.into_remainder() {
        *x = weight(*x, max);
        total += *x;
    }
    total
}

/// A softmax taken one part of each row at a time (an online softmax): each row's running
/// maximum `max` and sum `sum`, and its output so far `out` (the weighted values, not yet
/// divided by the sum).
pub struct RunningRows<'a> {
    /// Each row's largest score so far (-inf before its first visible one).
    pub max: &'a mut [f32],
    /// Each row's sum of `e^(score - max)` so far.
    pub sum: &'a mut [f32],
    /// Each row's weighted values so far, `[rows, out_width]`.
    pub out: &'a mut [f32],
}

/// Folds the next part of each row into `running`: `rows` (`[n, width]`) holds row `i`'s
/// scores over the part's keys, of which the first `valid(i)` are visible. Each row becomes
/// its weights against the row's new running maximum (0 where masked), its sum takes them,
/// and its output so far is rescaled to that maximum, ready for the part's weighted values
/// to be added.
pub fn fold_rows(
    rows: &mut [f32],
    width: usize,
    valid: impl Fn(usize) -> usize,
    running: RunningRows<'_>,
) {
    // A named function with the target features, not a closure passed to a generic helper:
    // a closure is compiled for the baseline target, without AVX2 (and `exp`'s loops
    // were, until this was found by disassembling the binary).
    #[cfg(target_arch = "x86_64")]
    {
        #[target_feature(enable = "avx2,fma")]
        fn avx2(
            rows: &mut [f32],
            width: usize,
            valid: &dyn Fn(usize) -> usize,
            running: RunningRows<'_>,
        ) {
            fold_body(rows, width, valid, running);
        }
        if super::has_avx2() {
            // SAFETY: the CPU supports AVX2 and FMA (checked at run time).
            return unsafe { avx2(rows, width, &valid, running) };
        }
    }
    fold_body(rows, width, &valid, running);
}

#[inline(always)]
fn fold_body(
    rows: &mut [f32],
    width: usize,
    valid: &dyn Fn(usize) -> usize,
    running: RunningRows<'_>,
) {
    let out_width = running.out.len() / running.max.len().max(1);
    let outs = running.out.chunks_exact_mut(out_width.max(1));
    let rows = rows.chunks_exact_mut(width).zip(running.max.iter_mut());
    for (i, (((row, max), sum), out)) in rows.zip(running.sum.iter_mut()).zip(outs).enumerate() {
        let (seen, hidden) = row.split_at_mut(valid(i).min(width));
        hidden.fill(0.0);
        if seen.is_empty() {
            continue;
        }
        let new_max = max.max(row_max(seen));
        let part = exp_against(seen, new_max);
        if new_max > *max && *max > f32::NEG_INFINITY {
            // What came before was weighed against a smaller maximum.
            let rescale = weight(*max, new_max);
            *sum *= rescale;
            for o in out.iter_mut() {
                *o *= rescale;
            }
        }
        *sum += part;
        *max = new_max;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn exp_is_accurate_on_the_softmax_range() {
        let mut worst = 0f64;
        let mut x = -87.0f32;
        while x < 20.0 {
            let want = f64::from(x).exp();
            let got = f64::from(exp(x));
            worst = worst.max(((got - want) / want).abs());
            x += 0.0137;
        }
        assert!(worst < 3e-7, "relative error {worst}");
        assert_eq!(exp(0.0), 1.0);
        assert!(exp(-1000.0) < 1e-37);
    }

    /// Weights too small to count are exactly 0, so that no product with them is a
    /// subnormal float; the others are `e^(x - max)` and the sum is theirs.
    #[test]
    fn negligible_weights_are_zero_and_none_is_subnormal() {
        let xs = [
            30.0f32,
            29.0,
            -20.0,
            -33.9,
            -34.1,
            -60.0,
            -200.0,
            30.0 - 87.5,
        ];
        let mut row = xs.to_vec();
        let (max, sum) = exp_in_place(&mut row);
        assert_eq!(max, 30.0);
        let mut want_sum = 0f64;
        for (&x, &w) in xs.iter().zip(&row) {
            assert!(w == 0.0 || w.is_normal(), "{x}: {w}");
            let d = f64::from(x - max);
            if d < f64::from(NEGLIGIBLE) {
                assert_eq!(w, 0.0, "{x}");
            } else {
                let want = d.exp();
                assert!(
                    (f64::from(w) - want).abs() <= 3e-7 * want,
                    "{x}: {w} vs {want}"
                );
                want_sum += want;
            }
        }
        assert!((f64::from(sum) - want_sum).abs() < 1e-6 * want_sum);
        // The weights left out weigh nothing next to the largest.
        assert_eq!(1.0f32 + (NEGLIGIBLE.exp() * 1e6), 1.0);
    }

    /// Rows folded in three parts, each masked where its keys follow the row's query, give
    /// the softmax-weighted values of the whole visible row; a part no key of which is
    /// visible leaves the row as it was.
    #[test]
    fn rows_folded_in_parts_are_the_softmax_of_the_whole_row() {
        let (n, width, dv) = (3usize, 12usize, 2usize);
        let scores: Vec<f32> = (0..n * width)
            .map(|i| (i as f32 * 0.37).sin() * 9.0)
            .collect();
        let values: Vec<f32> = (0..width * dv).map(|i| (i as f32 * 0.71).cos()).collect();
        let visible = [12usize, 7, 1];
        let (mut max, mut sum) = (vec![f32::NEG_INFINITY; n], vec![0f32; n]);
        let mut out = vec![0f32; n * dv];
        for part in [0..5usize, 5..9, 9..12] {
            let mut rows: Vec<f32> = (0..n)
                .flat_map(|r| scores[r * width..][part.clone()].to_vec())
                .collect();
            let len = part.len();
            let running = RunningRows {
                max: &mut max,
                sum: &mut sum,
                out: &mut out,
            };
            fold_rows(
                &mut rows,
                len,
                |r| visible[r].saturating_sub(part.start).min(len),
                running,
            );
            for (r, weights) in rows.chunks_exact(len).enumerate() {
                for (j, &w) in weights.iter().enumerate() {
                    assert!(j < visible[r].saturating_sub(part.start) || w == 0.0);
                    for c in 0..dv {
                        out[r * dv + c] += w * values[(part.start + j) * dv + c];
                    }
                }
            }
        }
        for r in 0..n {
            let row = &scores[r * width..][..visible[r]];
            let top = row.iter().copied().fold(f32::NEG_INFINITY, f32::max);
            assert_eq!(max[r], top);
            let weights: Vec<f64> = row.iter().map(|&x| f64::from(x - top).exp()).collect();
            let total: f64 = weights.iter().sum();
            for c in 0..dv {
                let want: f64 = weights
                    .iter()
                    .enumerate()
                    .map(|(j, w)| w * f64::from(values[j * dv + c]))
                    .sum::<f64>()
                    / total;
                let got = f64::from(out[r * dv + c] / sum[r]);
                assert!((got - want).abs() < 1e-6, "row {r}: {got} vs {want}");
            }
        }
    }
}
