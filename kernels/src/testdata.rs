//! Seeded test data: a tiny xorshift generator and key/value streams shaped like a
//! transformer's, with the outliers KIVI is designed around. Deterministic, for tests
//! and benchmarks; not for anything that needs good randomness.

/// xorshift64*: small, fast, and the same sequence on every platform.
#[derive(Debug, Clone)]
pub struct XorShift(u64);

impl XorShift {
    /// A generator from a seed (any value, 0 included).
    pub fn new(seed: u64) -> Self {
        Self(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1)
    }

    /// The next 64 random bits.
    pub fn next_u64(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }

    /// Uniform in `[0, 1)`.
    pub fn uniform(&mut self) -> f32 {
        (self.next_u64() >> 40) as f32 / (1u64 << 24) as f32
    }

    /// Standard normal (Box-Muller).
    pub fn normal(&mut self) -> f32 {
        let u1 = 1.0 - self.uniform(); // (0, 1]
        let u2 = self.uniform();
        (-2.0 * u1.ln()).sqrt() * (std::f32::consts::TAU * u2).cos()
    }

    /// `n` standard normal values.
    pub fn normals(&mut self, n: usize) -> Vec<f32> {
        (0..n).map(|_| self.normal()).collect()
    }
}

/// Keys, values and queries of one layer, row-major: keys and values `[kv_heads, T, D]`,
/// queries `[heads, L, D]`.
#[derive(Debug, Clone)]
pub struct Layer {
    /// Query heads.
    pub heads: usize,
    /// Key/value heads.
    pub kv_heads: usize,
    /// Tokens of keys and values.
    pub tokens: usize,
    /// Query positions (the last `queries` of the tokens).
    pub queries_len: usize,
    /// Head dimension.
    pub dim: usize,
    /// `[kv_heads, tokens, dim]`.
    pub keys: Vec<f32>,
    /// `[kv_heads, tokens, dim]`.
    pub values: Vec<f32>,
    /// `[heads, queries_len, dim]`.
    pub queries: Vec<f32>,
}

/// How the data is shaped.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Profile {
    /// Everything standard normal.
    Gaussian,
    /// A few key channels 5-20x larger (as in real keys, the reason KIVI groups keys per
    /// channel) and a few value tokens 10x larger.
    Outliers,
}

/// Channels of every key head that get scaled, and by how much.
pub const KEY_OUTLIER_CHANNELS: [(usize, f32); 4] = [(3, 5.0), (17, 8.0), (40, 12.0), (61, 20.0)];

/// Every this many tokens, a value token is 10x larger.
pub const VALUE_OUTLIER_EVERY: usize = 29;

impl Layer {
    /// A layer of seeded data.
    pub fn new(
        seed: u64,
        profile: Profile,
        (heads, kv_heads, dim): (usize, usize, usize),
        tokens: usize,
        queries_len: usize,
    ) -> Self {
        let mut rng = XorShift::new(seed);
        let mut keys = rng.normals(kv_heads * tokens * dim);
        let mut values = rng.normals(kv_heads * tokens * dim);
        let queries = rng.normals(heads * queries_len * dim);
        if profile == Profile::Outliers {
            for (i, k) in keys.iter_mut().enumerate() {
                let channel = i % dim;
                if let Some(&(_, factor)) = KEY_OUTLIER_CHANNELS.iter().find(|(c, _)| *c == channel)
                {
                    *k *= factor;
                }
            }
            for (i, v) in values.iter_mut().enumerate() {
                if (i / dim) % tokens % VALUE_OUTLIER_EVERY == 7 {
                    *v *= 10.0;
                }
            }
        }
        Self {
            heads,
            kv_heads,
            tokens,
            queries_len,
            dim,
            keys,
            values,
            queries,
        }
    }

    /// Keys of one KV head, `[tokens, dim]`.
    pub fn head_keys(&self, head: usize) -> &[f32] {
        let n = self.tokens * self.dim;
        &self.keys[head * n..(head + 1) * n]
    }

    /// Values of one KV head, `[tokens, dim]`.
    pub fn head_values(&self, head: usize) -> &[f32] {
        let n = self.tokens * self.dim;
        &self.values[head * n..(head + 1) * n]
    }
}

/// One layer's KIVI cache built in one go from full-precision keys and values
/// `[B, H, T, D]`: the first `quantized_len(T, residual, group)` tokens quantized (keys per
/// channel, stored transposed; values per token), the rest kept as the residual window.
/// Evaluated on return. For benchmarks of attention over a cache of a given length.
pub struct PackedLayer {
    pub keys: crate::mlx_quant::QuantizedArray,
    pub values: crate::mlx_quant::QuantizedArray,
    pub residual_keys: mlx_rs::Array,
    pub residual_values: mlx_rs::Array,
}

impl PackedLayer {
    pub fn new(
        keys: &mlx_rs::Array,
        values: &mlx_rs::Array,
        bits: u32,
        group: usize,
        residual: usize,
    ) -> Result<Self, crate::KernelError> {
        use crate::mlx_quant::quantize;
        let spec = crate::QuantSpec::new(bits, group)?;
        let q = crate::quantized_len(keys.dim(2) as usize, residual, group) as i32;
        let k = keys.split_at_indices(&[q], Some(2))?;
        let v = values.split_at_indices(&[q], Some(2))?;
        let layer = Self {
            keys: quantize(&k[0].swap_axes(-1, -2)?, spec)?,
            values: quantize(&v[0], spec)?,
            residual_keys: k[1].contiguous()?,
            residual_values: v[1].contiguous()?,
        };
        let mut all: Vec<&mlx_rs::Array> = layer.keys.arrays().into_iter().collect();
        all.extend(layer.values.arrays());
        all.extend([&layer.residual_keys, &layer.residual_values]);
        mlx_rs::transforms::eval(all)?;
        Ok(layer)
    }

    pub fn view(&self) -> crate::CacheView<'_> {
        crate::CacheView {
            keys: Some(&self.keys),
            key_axis: crate::KeyAxis::PerChannel,
            values: Some(&self.values),
            residual: Some(crate::Residual::Arrays {
                keys: &self.residual_keys,
                values: &self.residual_values,
            }),
            sinks: 0,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn is_deterministic_and_roughly_normal() {
        let a = XorShift::new(1).normals(10_000);
        assert_eq!(a, XorShift::new(1).normals(10_000));
        assert_ne!(a, XorShift::new(2).normals(10_000));
        let mean = a.iter().sum::<f32>() / a.len() as f32;
        let var = a.iter().map(|x| (x - mean).powi(2)).sum::<f32>() / a.len() as f32;
        assert!(
            mean.abs() < 0.05 && (var - 1.0).abs() < 0.05,
            "{mean} {var}"
        );
    }
}
