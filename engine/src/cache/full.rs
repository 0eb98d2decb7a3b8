//! The full-precision KV cache: keys and values kept as they arrive.

use mlx_rs::{
    fast::{scaled_dot_product_attention, ScaledDotProductAttentionMask},
    ops::concatenate,
    Array,
};

use super::{CacheError, CacheState, KvCache, LayerKvStats};

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

    fn state(&self) -> Result<CacheState, CacheError> {
        let arrays: Vec<(String, Array)> = [("keys", &self.keys), ("values", &self.values)]
            .into_iter()
            .filter_map(|(name, a)| a.as_ref().map(|a| (name.to_string(), a.clone())))
            .collect();
        mlx_rs::transforms::eval(arrays.iter().map(|(_, a)| a))?;
        Ok(CacheState {
            tokens: self.len(),
            arrays,
        })
    }

    fn restore(&mut self, state: CacheState) -> Result<(), CacheError> {
        let bad = |why: String| Err(CacheError::State(why));
        let (mut keys, mut values) = (None, None);
        for (name, array) in state.arrays {
            match name.as_str() {
                "keys" => keys = Some(array),
                "values" => values = Some(array),
                other => return bad(format!("unknown array {other:?}")),
            }
        }
        match (&keys, &values) {
            (None, None) if state.tokens == 0 => {}
            (Some(k), Some(v)) => {
                let (&[b, h, t, _], &[vb, vh, vt, _]) = (k.shape(), v.shape()) else {
                    return bad("keys and values must be 4-D".into());
                };
                if (b, h, t) != (vb, vh, vt) || t as usize != state.tokens || t == 0 {
                    return bad(format!(
                        "keys {:?} and values {:?} do not hold {} tokens",
                        k.shape(),
                        v.shape(),
                        state.tokens
                    ));
                }
                if k.dtype() != v.dtype() || !kivi_kernels::attention::is_float(k.dtype()) {
                    return bad(format!(
                        "keys {:?} and values {:?} must be one float dtype",
                        k.dtype(),
                        v.dtype()
                    ));
                }
            }
            _ => {
                return bad(format!(
                    "keys and values do not hold {} tokens",
                    state.tokens
                ))
            }
        }
        self.keys = keys;
        self.values = values;
        Ok(())
    }
}
