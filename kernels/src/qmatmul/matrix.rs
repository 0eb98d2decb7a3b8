//! A quantized weight matrix as host slices, in MLX's affine layout, and its rows
//! dequantized.

use std::ops::Range;

use crate::KernelError;

/// A quantized weight matrix `[rows, cols]` as host slices, in MLX's layout.
#[derive(Debug, Clone, Copy)]
pub struct QuantMatrix<'a> {
    /// Packed codes, `[rows, cols * bits / 32]`.
    pub packed: &'a [u32],
    /// One scale per group, `[rows, cols / group]`.
    pub scales: &'a [f32],
    /// One bias per group, `[rows, cols / group]`.
    pub biases: &'a [f32],
    /// Output features.
    pub rows: usize,
    /// Input features.
    pub cols: usize,
    /// Bits per code (2, 4 or 8).
    pub bits: u32,
    /// Inputs per scale/bias pair.
    pub group: usize,
}

/// True when [`super::qmatmul`] handles this bit width and group size.
pub fn supports(bits: u32, group: usize) -> bool {
    matches!(bits, 2 | 4 | 8) && group > 0 && group.is_multiple_of(32 / bits as usize)
}

impl QuantMatrix<'_> {
    /// Row `r` dequantized (`code * scale + bias`): an embedding lookup. `None` when `r` is
    /// not a row.
    pub fn row(&self, r: usize) -> Option<Vec<f32>> {
        if r >= self.rows || self.check().is_err() {
            return None;
        }
        let mut out = vec![0f32; self.cols];
        self.dequantize_rows(r..r + 1, &mut out);
        Some(out)
    }

    pub(super) fn check(&self) -> Result<(), KernelError> {
        if !supports(self.bits, self.group) || !self.cols.is_multiple_of(self.group) {
            return Err(KernelError::Shape(format!(
                "quantized matmul over {} bits, groups of {}, {} inputs is not supported",
                self.bits, self.group, self.cols
            )));
        }
        let words = self.rows * self.cols * self.bits as usize / 32;
        let groups = self.rows * self.cols / self.group;
        if self.packed.len() != words || self.scales.len() != groups || self.biases.len() != groups
        {
            return Err(KernelError::Shape(format!(
                "a {}x{} matrix at {} bits in groups of {} needs {words} words and {groups} \
                 scales and biases, got {}, {} and {}",
                self.rows,
                self.cols,
                self.bits,
                self.group,
                self.packed.len(),
                self.scales.len(),
                self.biases.len()
            )));
        }
        Ok(())
    }

    /// Rows `rows` dequantized (`code * scale + bias`) into `out`, `[rows.len(), cols]`.
    pub fn dequantize_rows(&self, rows: Range<usize>, out: &mut [f32]) {
        let w = self;
        // A matrix that failed `check` would index out of bounds below.
        let words_per_row = w.cols * w.bits as usize / 32;
        let groups = w.cols / w.group;
        for (r, out) in rows.zip(out.chunks_exact_mut(w.cols)) {
            let words = &w.packed[r * words_per_row..(r + 1) * words_per_row];
            let scales = &w.scales[r * groups..(r + 1) * groups];
            let biases = &w.biases[r * groups..(r + 1) * groups];
            match w.bits {
                2 => row::<2>(words, scales, biases, w.group, out),
                4 => row::<4>(words, scales, biases, w.group, out),
                _ => row::<8>(words, scales, biases, w.group, out),
            }
        }
    }
}

/// One row: each word's `32 / BITS` codes, times the group's scale plus its bias. The
/// shifts are constants once `BITS` is, so the loop over a word unrolls and vectorizes.
fn row<const BITS: u32>(
    words: &[u32],
    scales: &[f32],
    biases: &[f32],
    group: usize,
    out: &mut [f32],
) {
    let per_word = (32 / BITS) as usize;
    let mask = (1u32 << BITS) - 1;
    let words_per_group = group / per_word;
    for (((out, words), &s), &b) in out
        .chunks_exact_mut(group)
        .zip(words.chunks_exact(words_per_group))
        .zip(scales)
        .zip(biases)
    {
        for (out, &word) in out.chunks_exact_mut(per_word).zip(words) {
            for (j, o) in out.iter_mut().enumerate() {
                *o = ((word >> (j as u32 * BITS)) & mask) as f32 * s + b;
            }
        }
    }
}

/// `sum_g b_g * xsum_g` for one weight row: the bias term of both kernels' plain-Rust paths.
pub(super) fn bias_term(biases: &[f32], xsums: &[f32]) -> f32 {
    // Eight independent partial sums, so that the compiler keeps them in one vector.
    let mut lanes = [0f32; 8];
    let (whole, rest) = biases.split_at(biases.len() / 8 * 8);
    for (b, s) in whole.chunks_exact(8).zip(xsums.chunks_exact(8)) {
        for j in 0..8 {
            lanes[j] += b[j] * s[j];
        }
    }
    let tail: f32 = rest
        .iter()
        .zip(&xsums[whole.len()..])
        .map(|(b, s)| b * s)
        .sum();
    lanes.iter().sum::<f32>() + tail
}
