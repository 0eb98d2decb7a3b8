//! Products over many input rows (prompt chunks): the weights dequantized to float32 a
//! block of rows at a time, then multiplied by BLAS's `sgemm`.
//!
//! Why: the row kernels read every packed weight once per input row, which suits a decode
//! step's one row; a 256-token chunk would read the weights 256 times. Dequantized once per
//! chunk, a matrix feeds a blocked GEMM instead, which reuses each weight across the rows
//! from cache. MLX's CPU back end does the same for chunks (dequantize, then matmul), but
//! its dequantization is a general strided copy and a shift per code, a tenth of a
//! 512-token prefill; here each packed word becomes its floats in one pass.

use super::QuantMatrix;
use crate::host::blas::{self, Operand};

/// Input rows from which [`super::qmatmul`] dequantizes and runs `sgemm`: below this the
/// row kernels' single pass over the packed weights is faster.
pub const DENSE_MIN_ROWS: usize = 8;

/// Dequantized weights held at once: 4 MiB of float32, SmolLM2's largest layer matrix in
/// one block, its 49152-row output head in 28.
pub(super) const BLOCK_FLOATS: usize = 1 << 20;

/// Outputs `first..first + w.rows` of every input row: `out` is `[m, ldc]` and receives
/// `x @ W^T` (`[m, w.rows]`) in those columns.
pub(super) fn products(
    x: &[f32],
    m: usize,
    w: &QuantMatrix<'_>,
    out: &mut [f32],
    ldc: usize,
    first: usize,
) {
    let block = (BLOCK_FLOATS / w.cols.max(1)).clamp(1, w.rows.max(1));
    let mut weights = vec![0f32; block * w.cols];
    for start in (0..w.rows).step_by(block) {
        let rows = start..(start + block).min(w.rows);
        let n = rows.len();
        let weights = &mut weights[..n * w.cols];
        // On the calling thread: a team section would leave its helper spinning into the
        // `sgemm` below, against OpenBLAS's own threads (a 512-token prefill 1.1-1.2x
        // slower than dequantizing here alone).
        w.dequantize_rows(rows, weights);
        let a = Operand {
            data: x,
            ld: w.cols,
            trans: false,
        };
        let b = Operand {
            data: weights,
            ld: w.cols,
            trans: true,
        };
        blas::sgemm(m, n, w.cols, 1.0, a, b, 0.0, &mut out[first + start..], ldc);
    }
}
