//! The full-precision KV cache: keys and values kept as they arrive.

use mlx_rs::{
    fast::{scaled_dot_product_attention, ScaledDotProductAttentionMask},
    ops::concatenate,
    Array,
};

use super::{CacheError, KvCache, LayerKvStats};

/// Keys and values of one layer in the model's compute dtype, `[B, n_kv_heads, T, D]`.
#[derive(Default)]
pub struct FullCache {
    keys: Option<Array>,
    values: Option<Array>,
}

impl FullCache {
    /// An empty cache.
    pub fn new() -> Self {
        Self::default()
    }
}

fn append(held: &mut Option<Array>, new: &Array) -> Result<Array, CacheError> {
    let all = match held.take() {
        Some(old) => concatenate(&[old, new.clone()], 2)?,
        None => new.clone(),
    };
    *held = Some(all.clone());
    Ok(all)
}

impl KvCache for FullCache {
    fn attend(
        &mut self,
        queries: &Array,
        keys: &Array,
        values: &Array,
        scale: f32,
    ) -> Result<Array, CacheError> {
        let keys = append(&mut self.keys, keys)?;
        let values = append(&mut self.values, values)?;
        // MLX aligns a causal mask to the bottom right, so a chunk after a history sees
        // the whole history and itself causally.
        let mask = (queries.dim(2) > 1).then_some(ScaledDotProductAttentionMask::Causal);
        Ok(scaled_dot_product_attention(
            queries, &keys, &values, scale, mask, None,
        )?)
    }

    fn len(&self) -> usize {
        self.keys.as_ref().map_or(0, |k| k.dim(2) as usize)
    }

    fn truncate(&mut self, len: usize) -> Result<usize, CacheError> {
        use mlx_rs::ops::indexing::IndexOp;
        let keep = len.min(self.len());
        for held in [&mut self.keys, &mut self.values] {
            if let Some(array) = held.take() {
                *held = (keep > 0).then(|| array.index((.., .., ..keep as i32, ..)));
            }
        }
        Ok(keep)
    }

    fn stats(&self) -> LayerKvStats {
        let (tokens, held_bytes, elements) = match (&self.keys, &self.values) {
            (Some(k), Some(v)) => (
                k.dim(2) as usize,
                (k.nbytes() + v.nbytes()) as u64,
                (k.size() + v.size()) as u64,
            ),
            _ => (0, 0, 0),
        };
        LayerKvStats {
            tokens,
            quantized_tokens: 0,
            residual_tokens: tokens,
            residual_capacity: 0,
            fp16_bytes: elements * 2,
            held_bytes,
        }
    }
}
