//! One layer's KIVI cache as the attention kernels read it: borrowed arrays, no storage.

use mlx_rs::Array;

use crate::{mlx_quant::QuantizedArray, KeyAxis};

/// One layer's cache as attention reads it: the quantized history, then the full-precision
/// residual window (newest tokens). Either part may be absent. With KIVI+'s attention
/// sinks, the residual arrays begin with the `sinks` first tokens of the sequence, which
/// come before the quantized history in position order (chunk attention orders its
/// segments that way; decode attention sees every token and needs no order).
#[derive(Debug, Clone, Copy)]
pub struct CacheView<'a> {
    /// Quantized keys: `[B, n_kv, D, Tq]` per channel, or `[B, n_kv, Tq, D]` per token.
    pub keys: Option<&'a QuantizedArray>,
    /// How `keys` is grouped.
    pub key_axis: KeyAxis,
    /// Quantized values, `[B, n_kv, Tq, D]` grouped along `D`.
    pub values: Option<&'a QuantizedArray>,
    /// Residual keys, `[B, n_kv, Tr, D]`.
    pub residual_keys: Option<&'a Array>,
    /// Residual values, `[B, n_kv, Tr, D]`.
    pub residual_values: Option<&'a Array>,
    /// Leading residual tokens that are attention sinks (positions `0..sinks`).
    pub sinks: usize,
}

impl CacheView<'_> {
    /// Quantized positions `Tq`.
    pub fn quantized_len(&self) -> usize {
        self.values.map_or(0, |v| v.packed.dim(-2) as usize)
    }

    /// Residual positions `Tr`.
    pub fn residual_len(&self) -> usize {
        self.residual_keys.map_or(0, |k| k.dim(-2) as usize)
    }

    pub(crate) fn kv_heads(&self) -> Option<i32> {
        self.residual_keys
            .map(|k| k.dim(1))
            .or_else(|| self.values.map(|v| v.packed.dim(1)))
    }
}
