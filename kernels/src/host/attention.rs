//! Float32 attention over keys and values in host memory: `softmax(q k^T * scale) v`, causal
//! within the chunk of queries, with grouped-query heads.
//!
//! The cache may hold its keys and values in several segments (a KIVI cache's dequantized
//! history and its residual window, or a full-precision cache's buffer), each token-major
//! (`[T, D]` per head) or channel-major (`[D, T]`, KIVI's per-channel keys). Scores for all
//! segments go into one row (one `sgemm` per segment), one softmax runs over the row, and
//! the output sums one `sgemm` per value segment. Query heads `kv * rep .. (kv + 1) * rep`
//! share KV head `kv`, so their rows are contiguous and go through the same products as
//! one matrix; keys and values are never repeated.

use super::blas::{sgemm, Operand};
use super::softmax::softmax_rows;
use crate::KernelError;

/// Score rows held at once: bounds the scratch to `ROW_BLOCK * T` floats.
const ROW_BLOCK: usize = 256;

/// One segment of keys or values for every (batch, KV head) pair.
#[derive(Debug, Clone, Copy)]
pub struct Segment<'a> {
    /// The elements.
    pub data: &'a [f32],
    /// Tokens in the segment.
    pub len: usize,
    /// Floats from one (batch, KV head) pair to the next (pairs are batch-major).
    pub head_stride: usize,
    /// Floats from one row to the next: a token (token-major) or a channel (channel-major).
    pub row_stride: usize,
    /// `[D, len]` per head instead of `[len, D]`.
    pub channel_major: bool,
}

/// The dimensions of one attention call.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Shape {
    /// Batch entries.
    pub batch: usize,
    /// Query heads.
    pub heads: usize,
    /// Key/value heads (divides `heads`).
    pub kv_heads: usize,
    /// Query positions: the newest `queries` of the tokens held.
    pub queries: usize,
    /// Key (and query) head dimension.
    pub dim: usize,
    /// Value head dimension.
    pub value_dim: usize,
}

impl Segment<'_> {
    fn operand(&self, pair: usize, dim: usize, as_keys: bool) -> Result<Operand<'_>, KernelError> {
        // An empty segment has no rows to bound (nor any product to take part in).
        if self.len == 0 {
            return Ok(Operand {
                data: &[],
                ld: self.row_stride.max(1),
                trans: false,
            });
        }
        let start = pair * self.head_stride;
        let (rows, cols) = if self.channel_major {
            (dim, self.len)
        } else {
            (self.len, dim)
        };
        let end = start + rows.saturating_sub(1) * self.row_stride + cols;
        if self.row_stride < cols || end > self.data.len() {
            return Err(KernelError::Shape(format!(
                "a segment of {} floats cannot hold {rows}x{cols} (row stride {}) at {start}",
                self.data.len(),
                self.row_stride
            )));
        }
        // Keys enter as op(B) = K^T `[D, len]`; values as op(B) = V `[len, Dv]`.
        let trans = if as_keys {
            !self.channel_major
        } else {
            self.channel_major
        };
        Ok(Operand {
            data: &self.data[start..end],
            ld: self.row_stride,
            trans,
        })
    }
}

/// Writes the attention output `[B, H, L, Dv]` of queries `q` (`[B, H, L, D]`, the newest
/// `L` positions) over `keys` and `values` into `out`. Query `i` sits at position
/// `T - L + i` and sees keys `0 ..= T - L + i`.
pub fn attend(
    q: &[f32],
    shape: Shape,
    keys: &[Segment<'_>],
    values: &[Segment<'_>],
    scale: f32,
    out: &mut [f32],
) -> Result<(), KernelError> {
    let Shape {
        batch,
        heads,
        kv_heads,
        queries,
        dim,
        value_dim,
    } = shape;
    let total: usize = keys.iter().map(|s| s.len).sum();
    let value_total: usize = values.iter().map(|s| s.len).sum();
    if kv_heads == 0
        || heads % kv_heads != 0
        || queries == 0
        || queries > total
        || total != value_total
        || q.len() != batch * heads * queries * dim
        || out.len() != batch * heads * queries * value_dim
    {
        return Err(KernelError::Shape(format!(
            "attention of {shape:?} over {total} keys and {value_total} values with {} query \
             and {} output floats",
            q.len(),
            out.len()
        )));
    }
    let rep = heads / kv_heads;
    let rows = rep * queries;
    let block = ROW_BLOCK.min(rows);
    let mut scores = vec![0f32; block * total];
    for pair in 0..batch * kv_heads {
        let key_ops = keys
            .iter()
            .map(|s| s.operand(pair, dim, true))
            .collect::<Result<Vec<_>, _>>()?;
        let value_ops = values
            .iter()
            .map(|s| s.operand(pair, value_dim, false))
            .collect::<Result<Vec<_>, _>>()?;
        let q_pair = &q[pair * rows * dim..(pair + 1) * rows * dim];
        let out_pair = &mut out[pair * rows * value_dim..(pair + 1) * rows * value_dim];
        for first in (0..rows).step_by(block) {
            let n = block.min(rows - first);
            let scores = &mut scores[..n * total];
            let a = Operand {
                data: &q_pair[first * dim..(first + n) * dim],
                ld: dim,
                trans: false,
            };
            let mut column = 0;
            for (segment, op) in keys.iter().zip(&key_ops) {
                if segment.len > 0 {
                    sgemm(
                        n,
                        segment.len,
                        dim,
                        scale,
                        a,
                        *op,
                        0.0,
                        &mut scores[column..],
                        total,
                    );
                }
                column += segment.len;
            }
            // Row `first + r` is query `(first + r) % L` of its head.
            softmax_rows(scores, total, total, |r| {
                total - queries + (first + r) % queries + 1
            });
            let out_block = &mut out_pair[first * value_dim..(first + n) * value_dim];
            let mut column = 0;
            let mut beta = 0.0;
            for (segment, op) in values.iter().zip(&value_ops) {
                if segment.len > 0 {
                    let weights = Operand {
                        data: &scores[column..],
                        ld: total,
                        trans: false,
                    };
                    sgemm(
                        n,
                        value_dim,
                        segment.len,
                        1.0,
                        weights,
                        *op,
                        beta,
                        out_block,
                        value_dim,
                    );
                    beta = 1.0;
                }
                column += segment.len;
            }
        }
    }
    Ok(())
}
