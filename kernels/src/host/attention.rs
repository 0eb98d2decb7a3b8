//! Float32 attention over keys and values in host memory: `softmax(q k^T * scale) v`, causal
//! within the chunk of queries, with grouped-query heads.
//!
//! The cache may hold its keys and values in several segments (a KIVI cache's dequantized
//! history and its residual window, or a full-precision cache's buffer), each token-major
//! (`[T, D]` per head) or channel-major (`[D, T]`, KIVI's per-channel keys). Scores for all
//! segments of a part go into one row (one `sgemm` per segment), the row is folded into a
//! running softmax, and the output sums one `sgemm` per value segment; a caller may hand
//! the positions over in several parts ([`Running`]) to bound what it holds at once. Query heads `kv * rep .. (kv + 1) * rep`
//! share KV head `kv`, so their rows are contiguous and go through the same products as
//! one matrix; keys and values are never repeated.

use super::blas::{sgemm, Operand};
use super::softmax::{fold_rows, RunningRows};
use crate::KernelError;

/// Score rows held at once: bounds the scratch to `ROW_BLOCK` times a part's positions.
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
/// `L` positions) over `keys` and `values` (every position, in order) into `out`. Query `i`
/// sits at position `T - L + i` and sees keys `0 ..= T - L + i`.
pub fn attend(
    q: &[f32],
    shape: Shape,
    keys: &[Segment<'_>],
    values: &[Segment<'_>],
    scale: f32,
    out: &mut [f32],
) -> Result<(), KernelError> {
    let total = keys.iter().map(|s| s.len).sum();
    let mut running = Running::new(q, shape, total, scale, out)?;
    running.add(0, keys, values)?;
    running.finish();
    Ok(())
}

/// Attention over a cache read one part at a time (a long history in spans, so that no
/// buffer grows with the context): each part's scores are folded into a running softmax
/// per query row ([`fold_rows`]), and [`Running::finish`] divides by the sums. The scratch
/// is [`ROW_BLOCK`] rows of the widest part.
pub struct Running<'a> {
    q: &'a [f32],
    shape: Shape,
    total: usize,
    scale: f32,
    out: &'a mut [f32],
    max: Vec<f32>,
    sum: Vec<f32>,
    scores: Vec<f32>,
}

impl<'a> Running<'a> {
    /// Attention of queries `q` (`[B, H, L, D]`, the newest `L` of `total` positions) into
    /// `out` (`[B, H, L, Dv]`), before any part.
    pub fn new(
        q: &'a [f32],
        shape: Shape,
        total: usize,
        scale: f32,
        out: &'a mut [f32],
    ) -> Result<Self, KernelError> {
        let Shape {
            batch,
            heads,
            kv_heads,
            queries,
            ..
        } = shape;
        if kv_heads == 0
            || heads % kv_heads != 0
            || queries == 0
            || queries > total
            || q.len() != batch * heads * queries * shape.dim
            || out.len() != batch * heads * queries * shape.value_dim
        {
            return Err(KernelError::Shape(format!(
                "attention of {shape:?} over {total} positions with {} query and {} output \
                 floats",
                q.len(),
                out.len()
            )));
        }
        out.fill(0.0);
        let rows = batch * heads * queries;
        Ok(Self {
            q,
            shape,
            total,
            scale,
            out,
            max: vec![f32::NEG_INFINITY; rows],
            sum: vec![0.0; rows],
            scores: Vec::new(),
        })
    }

    /// Folds in the keys and values at positions `start..` (segments in order, keys and
    /// values of the same lengths).
    pub fn add(
        &mut self,
        start: usize,
        keys: &[Segment<'_>],
        values: &[Segment<'_>],
    ) -> Result<(), KernelError> {
        let Shape {
            batch,
            heads,
            kv_heads,
            queries,
            dim,
            value_dim,
        } = self.shape;
        let width: usize = keys.iter().map(|s| s.len).sum();
        let value_width: usize = values.iter().map(|s| s.len).sum();
        if width != value_width || start + width > self.total {
            return Err(KernelError::Shape(format!(
                "keys {width} and values {value_width} at {start} of {} positions",
                self.total
            )));
        }
        if width == 0 {
            return Ok(());
        }
        let rep = heads / kv_heads;
        let rows = rep * queries;
        let block = ROW_BLOCK.min(rows);
        self.scores.resize(block * width, 0.0);
        // Query `i` sees the part's keys before position `T - L + i + 1`.
        let seen = self.total - queries + 1;
        for pair in 0..batch * kv_heads {
            let key_ops = keys
                .iter()
                .map(|s| s.operand(pair, dim, true))
                .collect::<Result<Vec<_>, _>>()?;
            let value_ops = values
                .iter()
                .map(|s| s.operand(pair, value_dim, false))
                .collect::<Result<Vec<_>, _>>()?;
            let q_pair = &self.q[pair * rows * dim..(pair + 1) * rows * dim];
            let pair_rows = pair * rows..(pair + 1) * rows;
            for first in (0..rows).step_by(block) {
                let n = block.min(rows - first);
                let scores = &mut self.scores[..n * width];
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
                            self.scale,
                            a,
                            *op,
                            0.0,
                            &mut scores[column..],
                            width,
                        );
                    }
                    column += segment.len;
                }
                let at = pair_rows.start + first;
                let out_block = &mut self.out[at * value_dim..(at + n) * value_dim];
                // Row `first + r` is query `(first + r) % L` of its head.
                let visible = |r: usize| (seen + (first + r) % queries).saturating_sub(start);
                let running = RunningRows {
                    max: &mut self.max[at..at + n],
                    sum: &mut self.sum[at..at + n],
                    out: out_block,
                };
                fold_rows(scores, width, visible, running);
                let mut column = 0;
                for (segment, op) in values.iter().zip(&value_ops) {
                    if segment.len > 0 {
                        let weights = Operand {
                            data: &scores[column..],
                            ld: width,
                            trans: false,
                        };
                        sgemm(
                            n,
                            value_dim,
                            segment.len,
                            1.0,
                            weights,
                            *op,
                            1.0,
                            out_block,
                            value_dim,
                        );
                    }
                    column += segment.len;
                }
            }
        }
        Ok(())
    }

    /// Divides each row's weighted values by its sum: the attention output.
    pub fn finish(self) {
        let value_dim = self.shape.value_dim;
        for (out, sum) in self.out.chunks_exact_mut(value_dim).zip(&self.sum) {
            let inv = 1.0 / sum;
            for o in out {
                *o *= inv;
            }
        }
    }
}
