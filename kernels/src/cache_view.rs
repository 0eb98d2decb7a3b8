//! One layer's KIVI cache as the attention kernels read it: borrowed arrays or host
//! buffers, no storage.

use half::{f16, slice::HalfFloatSliceExt};
use mlx_rs::Array;

use crate::{mlx_quant::QuantizedArray, KernelError, KeyAxis};

/// One layer's cache as attention reads it: the quantized history, then the full-precision
/// residual window (newest tokens). Either part may be absent. With KIVI+'s attention
/// sinks, the residual begins with the `sinks` first tokens of the sequence, which come
/// before the quantized history in position order (chunk attention orders its segments
/// that way; decode attention sees every token and needs no order).
#[derive(Debug, Clone, Copy)]
pub struct CacheView<'a> {
    /// Quantized keys: `[B, n_kv, D, Tq]` per channel, or `[B, n_kv, Tq, D]` per token.
    pub keys: Option<&'a QuantizedArray>,
    /// How `keys` is grouped.
    pub key_axis: KeyAxis,
    /// Quantized values, `[B, n_kv, Tq, D]` grouped along `D`.
    pub values: Option<&'a QuantizedArray>,
    /// The residual keys and values.
    pub residual: Option<Residual<'a>>,
    /// Leading residual tokens that are attention sinks (positions `0..sinks`).
    pub sinks: usize,
}

/// The residual tokens, in full precision.
#[derive(Debug, Clone, Copy)]
pub enum Residual<'a> {
    /// MLX arrays `[B, n_kv, Tr, D]` (the MLX kernels' cache).
    Arrays {
        /// Residual keys.
        keys: &'a Array,
        /// Residual values.
        values: &'a Array,
    },
    /// Float16 host buffers with headroom, written in place (the host kernels' cache).
    Host(HostWindow<'a>),
}

/// Keys and values in host memory, in float16: pair `p = b * kv_heads + h` holds its `len`
/// tokens from token `p * capacity` (`[capacity, D]` rows, the rest headroom).
#[derive(Debug, Clone, Copy)]
pub struct HostWindow<'a> {
    pub keys: &'a [f16],
    pub values: &'a [f16],
    pub batch: usize,
    pub kv_heads: usize,
    pub key_dim: usize,
    pub value_dim: usize,
    pub len: usize,
    pub capacity: usize,
}

impl HostWindow<'_> {
    /// Checks that the buffers hold `len` tokens of every pair at the stated capacity.
    pub fn check(&self) -> Result<(), KernelError> {
        let pairs = self.batch * self.kv_heads;
        if self.len > self.capacity
            || self.keys.len() < pairs * self.capacity * self.key_dim
            || self.values.len() < pairs * self.capacity * self.value_dim
        {
            return Err(KernelError::Shape(format!(
                "a window of {} tokens in buffers of {} and {} halves ({pairs} pairs of {} \
                 tokens)",
                self.len,
                self.keys.len(),
                self.values.len(),
                self.capacity
            )));
        }
        Ok(())
    }

    /// The held keys or values in float32, `[B * H, len, D]` without headroom.
    pub fn float32(&self, keys: bool) -> Vec<f32> {
        self.float32_span(keys, 0..self.len)
    }

    /// The keys or values of tokens `tokens` (held ones) in float32, `[B * H, n, D]`.
    pub fn float32_span(&self, keys: bool, tokens: std::ops::Range<usize>) -> Vec<f32> {
        let (data, dim) = self.buffer(keys);
        let n = tokens.len();
        let mut out = vec![0f32; self.batch * self.kv_heads * n * dim];
        if n > 0 {
            for (p, out) in out.chunks_exact_mut(n * dim).enumerate() {
                data[(p * self.capacity + tokens.start) * dim..][..n * dim]
                    .convert_to_f32_slice(out);
            }
        }
        out
    }

    /// The held tokens as `[B, H, len, D]` float16 arrays (copies).
    pub fn arrays(&self) -> (Array, Array) {
        let copy = |keys: bool| {
            let (data, dim) = self.buffer(keys);
            let mut out = Vec::with_capacity(self.batch * self.kv_heads * self.len * dim);
            for p in 0..self.batch * self.kv_heads {
                out.extend_from_slice(&data[p * self.capacity * dim..][..self.len * dim]);
            }
            let shape = [self.batch, self.kv_heads, self.len, dim].map(|d| d as i32);
            Array::from_slice(&out, &shape)
        };
        (copy(true), copy(false))
    }

    fn buffer(&self, keys: bool) -> (&[f16], usize) {
        if keys {
            (self.keys, self.key_dim)
        } else {
            (self.values, self.value_dim)
        }
    }
}

impl CacheView<'_> {
    /// Quantized positions `Tq`.
    pub fn quantized_len(&self) -> usize {
        self.values.map_or(0, |v| v.packed.dim(-2) as usize)
    }

    /// Residual positions `Tr`.
    pub fn residual_len(&self) -> usize {
        match self.residual {
            None => 0,
            Some(Residual::Arrays { keys, .. }) => keys.dim(-2) as usize,
            Some(Residual::Host(w)) => w.len,
        }
    }

    /// The history's positions can be cut in multiples of this: the key groups of
    /// per-channel keys, any position otherwise.
    pub(crate) fn key_span_unit(&self) -> usize {
        match (self.keys, self.key_axis) {
            (Some(keys), KeyAxis::PerChannel) => keys.spec.group_size(),
            _ => 1,
        }
    }

    pub(crate) fn kv_heads(&self) -> Option<i32> {
        let residual = match self.residual {
            None => None,
            Some(Residual::Arrays { keys, .. }) => Some(keys.dim(1)),
            Some(Residual::Host(w)) => Some(w.kv_heads as i32),
        };
        residual.or_else(|| self.values.map(|v| v.packed.dim(1)))
    }
}
