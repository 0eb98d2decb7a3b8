//! Keys and values in host float16 buffers with headroom, written in place: the full
//! cache's store and the KIVI cache's residual window on the host backend.
//!
//! Pair `p = b * H + h` holds its tokens from token `p * capacity` (`[capacity, D]` rows,
//! the rest headroom), so appending a token writes one row per pair instead of copying
//! what is held. New tokens are rounded to float16 (round to nearest even, as MLX's
//! conversion rounds), so the buffers hold the same bits as the MLX path's arrays.

use half::{f16, slice::HalfFloatSliceExt};
use kivi_kernels::HostWindow;

use crate::cache::arrays::HostBlock;

/// Host buffers `[B * H, capacity, D]` of keys and values.
#[derive(Debug, Clone)]
pub(crate) struct HostKv {
    pub(crate) batch: usize,
    pub(crate) heads: usize,
    pub(crate) key_dim: usize,
    pub(crate) value_dim: usize,
    pub(crate) len: usize,
    capacity: usize,
    keys: Vec<f16>,
    values: Vec<f16>,
}

impl HostKv {
    pub(crate) fn new(batch: usize, heads: usize, key_dim: usize, value_dim: usize) -> Self {
        Self {
            batch,
            heads,
            key_dim,
            value_dim,
            len: 0,
            capacity: 0,
            keys: Vec::new(),
            values: Vec::new(),
        }
    }

    /// Buffers with room for `capacity` tokens (at least those given) holding `block`.
    pub(crate) fn from_block(block: &HostBlock, capacity: usize) -> Self {
        let [b, h, t, dk, dv] = block.dims;
        let mut store = Self::new(b, h, dk, dv);
        store.resize(capacity.max(t));
        store.append(&block.keys, &block.values, t);
        store
    }

    pub(crate) fn pairs(&self) -> usize {
        self.batch * self.heads
    }

    /// Whether tokens of these dimensions fit the buffers.
    pub(crate) fn fits(
        &self,
        batch: usize,
        heads: usize,
        key_dim: usize,
        value_dim: usize,
    ) -> bool {
        (self.batch, self.heads, self.key_dim, self.value_dim) == (batch, heads, key_dim, value_dim)
    }

    /// Bytes allocated, headroom included.
    pub(crate) fn bytes(&self) -> u64 {
        ((self.keys.len() + self.values.len()) * std::mem::size_of::<f16>()) as u64
    }

    /// Makes room for `needed` tokens: exactly for the first append, with headroom after.
    pub(crate) fn reserve(&mut self, needed: usize) {
        if needed > self.capacity {
            let capacity = if self.capacity == 0 {
                needed
            } else {
                needed + (needed / 64).max(4)
            };
            self.resize(capacity);
        }
    }

    /// Moves the held tokens into buffers of `capacity` tokens (at least the held ones).
    pub(crate) fn resize(&mut self, capacity: usize) {
        let capacity = capacity.max(self.len);
        if capacity == self.capacity {
            return;
        }
        let (pairs, old_capacity, len) = (self.pairs(), self.capacity, self.len);
        let moved = |old: &[f16], dim: usize| -> Vec<f16> {
            let mut new = vec![f16::ZERO; pairs * capacity * dim];
            for p in 0..pairs {
                let from = &old[p * old_capacity * dim..][..len * dim];
                new[p * capacity * dim..][..len * dim].copy_from_slice(from);
            }
            new
        };
        self.keys = moved(&self.keys, self.key_dim);
        self.values = moved(&self.values, self.value_dim);
        self.capacity = capacity;
    }

    /// Appends `[B, H, L, D]` keys and values given as host slices, rounded to float16.
    pub(crate) fn append(&mut self, keys: &[f32], values: &[f32], len: usize) {
        self.reserve(self.len + len);
        let (cap, at) = (self.capacity, self.len);
        for (buffer, new, dim) in [
            (&mut self.keys, keys, self.key_dim),
            (&mut self.values, values, self.value_dim),
        ] {
            for p in 0..self.batch * self.heads {
                buffer[(p * cap + at) * dim..][..len * dim]
                    .convert_from_f32_slice(&new[p * len * dim..][..len * dim]);
            }
        }
        self.len += len;
    }

    /// Tokens `from..from + n` of every pair, `[B * H, n, D]` keys and values, of what is
    /// held followed by `keys` and `values` (`[B, H, L, D]`, not yet appended, rounded as
    /// [`Self::append`] rounds them).
    pub(crate) fn rows_with(
        &self,
        keys: &[f32],
        values: &[f32],
        new: usize,
        from: usize,
        n: usize,
    ) -> (Vec<f16>, Vec<f16>) {
        let (held, cap) = (self.len, self.capacity);
        let rows = |buffer: &[f16], incoming: &[f32], dim: usize| {
            let mut out = vec![f16::ZERO; self.pairs() * n * dim];
            for (p, out) in out.chunks_exact_mut(n * dim).enumerate() {
                // Rows `from..from + n` of held rows then incoming rows.
                let split = held.clamp(from, from + n) - from;
                let own = &buffer[(p * cap + from.min(held)) * dim..][..split * dim];
                out[..split * dim].copy_from_slice(own);
                let first_new = (from + split).saturating_sub(held);
                out[split * dim..].convert_from_f32_slice(
                    &incoming[(p * new + first_new) * dim..][..(n - split) * dim],
                );
            }
            out
        };
        (
            rows(&self.keys, keys, self.key_dim),
            rows(&self.values, values, self.value_dim),
        )
    }

    /// Drops tokens `from..from + n` of every pair; the later ones move down.
    pub(crate) fn remove(&mut self, from: usize, n: usize) {
        let (cap, len) = (self.capacity, self.len);
        for (buffer, dim) in [
            (&mut self.keys, self.key_dim),
            (&mut self.values, self.value_dim),
        ] {
            for p in 0..self.batch * self.heads {
                let pair = &mut buffer[p * cap * dim..][..len * dim];
                pair.copy_within((from + n) * dim.., from * dim);
            }
        }
        self.len -= n;
    }

    /// The buffers as the kernels read them.
    pub(crate) fn window(&self) -> HostWindow<'_> {
        HostWindow {
            keys: &self.keys,
            values: &self.values,
            batch: self.batch,
            kv_heads: self.heads,
            key_dim: self.key_dim,
            value_dim: self.value_dim,
            len: self.len,
            capacity: self.capacity,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Two pairs of one-channel tokens: pair 0 holds `0, 1, 2, ...`, pair 1 `100, 101, ...`.
    fn tokens(from: usize, n: usize) -> Vec<f32> {
        (0..2)
            .flat_map(|p| (from..from + n).map(move |t| (p * 100 + t) as f32))
            .collect()
    }

    fn held(kv: &HostKv) -> Vec<Vec<f32>> {
        let w = kv.window();
        w.float32(true)
            .chunks(w.len.max(1))
            .map(<[f32]>::to_vec)
            .collect()
    }

    #[test]
    fn rows_span_the_held_and_the_new_tokens() {
        let mut kv = HostKv::new(1, 2, 1, 1);
        let first = tokens(0, 5);
        kv.append(&first, &first, 5);
        let new = tokens(5, 3);
        for (from, n, want) in [
            (1, 2, [1.0, 2.0]),
            (4, 2, [4.0, 5.0]),
            (5, 2, [5.0, 6.0]),
            (6, 2, [6.0, 7.0]),
        ] {
            let (k, v) = kv.rows_with(&new, &new, 3, from, n);
            let got: Vec<f32> = k.iter().map(|x| x.to_f32()).collect();
            let other: Vec<f32> = want.iter().map(|x| x + 100.0).collect();
            assert_eq!(
                got,
                [&want[..], &other[..]].concat(),
                "rows {from}..{}",
                from + n
            );
            assert_eq!(k, v);
        }
        // Nothing changed.
        assert_eq!(
            held(&kv),
            [tokens(0, 5)[..5].to_vec(), tokens(0, 5)[5..].to_vec()]
        );
    }

    #[test]
    fn removing_rows_moves_the_later_ones_down_in_place() {
        let mut kv = HostKv::new(1, 2, 1, 1);
        kv.resize(8);
        let first = tokens(0, 6);
        kv.append(&first, &first, 6);
        kv.remove(1, 3);
        assert_eq!(held(&kv), [vec![0.0, 4.0, 5.0], vec![100.0, 104.0, 105.0]]);
        assert_eq!(kv.bytes(), (2 * 8 * 2 * 2) as u64);
        let more = tokens(6, 2);
        kv.append(&more, &more, 2);
        assert_eq!(
            held(&kv),
            [
                vec![0.0, 4.0, 5.0, 6.0, 7.0],
                vec![100.0, 104.0, 105.0, 106.0, 107.0]
            ]
        );
        // Still the same buffers: the room was enough.
        assert_eq!(kv.bytes(), (2 * 8 * 2 * 2) as u64);
        kv.resize(5);
        assert_eq!(kv.bytes(), (2 * 5 * 2 * 2) as u64);
        assert_eq!(held(&kv)[1], vec![100.0, 104.0, 105.0, 106.0, 107.0]);
    }
}
