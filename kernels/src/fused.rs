//! Decode attention over a KIVI cache in plain Rust, for the CPU.
//!
//! MLX's CPU `quantized_matmul` dequantizes every element (`scale * q + bias`, then a
//! multiply-add) in a scalar loop, and 2-bit codes unpack slower than 4-bit ones. For one
//! query position this kernel does the same work with the scale and zero factored out of
//! the inner loop:
//!
//! `q . k'_n = sum_c (q_c * s_cg) * code_cn + sum_c q_c * z_cg` (keys per channel), and
//! `sum_n w_n v'_nd = sum_n (w_n * s_ng) * code_nd + sum_n w_n * z_ng` (values per token),
//!
//! so the inner loops are one multiply-add per code, over codes unpacked through a lookup
//! table. It reads the evaluated MLX buffers as host slices and returns a new array, so it
//! ends the lazy graph at the layer's queries (harmless on the CPU, where MLX runs each op
//! as it comes anyway). It is used for single-position decode in float32 with keys per
//! channel; everything else takes the MLX path. Tested against the reference and the MLX
//! path in `kernels/tests/fused.rs`.

use mlx_rs::{Array, Dtype};

use crate::{attention::CacheView, mlx_quant::QuantizedArray, KernelError, KeyAxis};

/// True when [`decode`] handles this call: one query position, float32 throughout, keys
/// per channel.
pub fn supports(queries: &Array, cache: &CacheView<'_>) -> bool {
    let f32s = |a: Option<&Array>| a.is_none_or(|a| a.dtype() == Dtype::Float32);
    queries.ndim() == 4
        && queries.dim(2) == 1
        && queries.dtype() == Dtype::Float32
        && cache.key_axis == KeyAxis::PerChannel
        && f32s(cache.keys.map(|k| &k.scales))
        && f32s(cache.values.map(|v| &v.scales))
        && f32s(cache.residual_keys)
        && f32s(cache.residual_values)
}

/// Attention output `[B, H, 1, Dv]` of one query position `[B, H, 1, D]` (the newest)
/// over the whole cache. See [`supports`] for what it accepts.
pub fn decode(queries: &Array, cache: CacheView<'_>, scale: f32) -> Result<Array, KernelError> {
    if !supports(queries, &cache) {
        return Err(KernelError::Shape(
            "the fused kernel takes one float32 query position and per-channel keys".into(),
        ));
    }
    let held = Held::new(&cache, queries)?;
    let kv = held.parts()?;
    let &[batch, heads, _, dim] = queries.shape() else {
        unreachable!("checked by supports")
    };
    let (b, h, d) = (batch as usize, heads as usize, dim as usize);
    if kv.batch != b || kv.heads == 0 || h % kv.heads != 0 || kv.key_dim != d {
        return Err(KernelError::Shape(format!(
            "queries {:?} do not fit a cache of {} x {} heads of {}",
            queries.shape(),
            kv.batch,
            kv.heads,
            kv.key_dim
        )));
    }
    let q = slice::<f32>(&held.queries)?;
    let rep = h / kv.heads;
    let mut out = vec![0f32; b * h * kv.value_dim];
    // Query heads `kv * rep .. (kv + 1) * rep` read KV head `kv`: consecutive in memory.
    // One thread: whole heads per thread measured no faster on the 2-core machine this
    // was tuned on, where the other core is busy with the rest of the model anyway.
    for (index, out) in out.chunks_exact_mut(rep * kv.value_dim).enumerate() {
        let q: Vec<f32> = q[index * rep * d..(index + 1) * rep * d]
            .iter()
            .map(|x| x * scale)
            .collect();
        kv.head(index, &q, rep, out);
    }
    Ok(Array::from_slice(
        &out,
        &[batch, heads, 1, kv.value_dim as i32],
    ))
}

/// One quantized tensor as host slices.
struct Quantized<'a> {
    packed: &'a [u32],
    scales: &'a [f32],
    zeros: &'a [f32],
    bits: u32,
    group: usize,
}

impl<'a> Quantized<'a> {
    fn new(q: &QuantizedArray, arrays: &'a [Array; 3]) -> Result<Self, KernelError> {
        Ok(Self {
            packed: slice::<u32>(&arrays[0])?,
            scales: slice::<f32>(&arrays[1])?,
            zeros: slice::<f32>(&arrays[2])?,
            bits: q.spec.bits(),
            group: q.spec.group_size(),
        })
    }

    /// The part of one `(batch, head)` pair: `rows` rows of `cols` codes.
    fn head(&self, index: usize, rows: usize, cols: usize) -> Quantized<'a> {
        let words = rows * cols * self.bits as usize / 32;
        let groups = rows * cols / self.group;
        Quantized {
            packed: &self.packed[index * words..(index + 1) * words],
            scales: &self.scales[index * groups..(index + 1) * groups],
            zeros: &self.zeros[index * groups..(index + 1) * groups],
            ..*self
        }
    }

    /// The zero point that goes with centred codes: `q * s + z = (q - mid) * s + (z + mid * s)`.
    ///
    /// Centring keeps the factored-out term `sum w * zero` near the size of the result: with
    /// the raw minimum as zero, it and the code term are both large and nearly cancel
    /// (values grouped around 0 have a zero near -2), which cost two decimal digits.
    fn centred_zero(&self, scale: f32, zero: f32) -> f32 {
        zero + scale * ((1u32 << self.bits) - 1) as f32 / 2.0
    }

    /// Codes `[start, start + out.len())` of a row, centred, as floats (`start` and the
    /// length are whole words).
    fn unpack(&self, row: usize, cols: usize, start: usize, out: &mut [f32]) {
        let per_word = 32 / self.bits as usize;
        let first = (row * cols + start) / per_word;
        let words = &self.packed[first..first + out.len() / per_word];
        for (word, out) in words.iter().zip(out.chunks_exact_mut(per_word)) {
            for (byte, out) in word
                .to_le_bytes()
                .iter()
                .zip(out.chunks_exact_mut(per_word / 4))
            {
                match self.bits {
                    2 => out.copy_from_slice(&LUT2[*byte as usize]),
                    _ => out.copy_from_slice(&LUT4[*byte as usize]),
                }
            }
        }
    }
}

/// Byte to its four 2-bit codes, lowest bits first, centred (`code - 1.5`).
static LUT2: [[f32; 4]; 256] = {
    let mut t = [[0f32; 4]; 256];
    let mut i = 0;
    while i < 256 {
        t[i] = [
            (i & 3) as f32 - 1.5,
            ((i >> 2) & 3) as f32 - 1.5,
            ((i >> 4) & 3) as f32 - 1.5,
            (i >> 6) as f32 - 1.5,
        ];
        i += 1;
    }
    t
};

/// Byte to its two 4-bit codes, lowest bits first, centred (`code - 7.5`).
static LUT4: [[f32; 2]; 256] = {
    let mut t = [[0f32; 2]; 256];
    let mut i = 0;
    while i < 256 {
        t[i] = [(i & 15) as f32 - 7.5, (i >> 4) as f32 - 7.5];
        i += 1;
    }
    t
};

/// Contiguous, evaluated arrays the kernel reads (the cache's own buffers when they are
/// already contiguous, which they are), owned here so that slices can borrow them.
struct Held {
    queries: Array,
    keys: Option<(QuantizedArray, [Array; 3])>,
    values: Option<(QuantizedArray, [Array; 3])>,
    residual: Option<(Array, Array)>,
}

impl Held {
    fn new(cache: &CacheView<'_>, queries: &Array) -> Result<Self, KernelError> {
        let quantized = |q: &QuantizedArray| -> Result<_, KernelError> {
            Ok((
                q.clone(),
                [
                    q.packed.contiguous()?,
                    q.scales.contiguous()?,
                    q.zeros.contiguous()?,
                ],
            ))
        };
        let residual = match (cache.residual_keys, cache.residual_values) {
            (Some(k), Some(v)) => Some((k.contiguous()?, v.contiguous()?)),
            (None, None) => None,
            _ => {
                return Err(KernelError::Shape(
                    "residual keys and values held unevenly".into(),
                ))
            }
        };
        if cache.keys.is_some() != cache.values.is_some() {
            return Err(KernelError::Shape(
                "quantized keys and values held unevenly".into(),
            ));
        }
        Ok(Self {
            queries: queries.contiguous()?,
            keys: cache.keys.map(quantized).transpose()?,
            values: cache.values.map(quantized).transpose()?,
            residual,
        })
    }

    /// Host views of the arrays, after checking that their shapes fit together (so that
    /// no slice below can go out of bounds, whatever view the caller built).
    fn parts(&self) -> Result<Parts<'_>, KernelError> {
        let mut arrays: Vec<&Array> = Vec::new();
        for (_, a) in self.keys.iter().chain(&self.values) {
            arrays.extend(a.iter());
        }
        if let Some((k, v)) = &self.residual {
            arrays.extend([k, v]);
        }
        if arrays.iter().any(|a| a.ndim() != 4) {
            return Err(KernelError::Shape("cache arrays must be 4-D".into()));
        }
        let dims = |a: &Array| a.shape().iter().map(|&d| d as usize).collect::<Vec<_>>();
        let (mut batch, mut heads, mut key_dim, mut value_dim) = (0, 0, 0, 0);
        let (mut quantized, mut residual) = (0, 0);
        let (mut keys, mut values) = (None, None);
        let mut expected: Vec<(&Array, [usize; 4])> = Vec::new();
        if let (Some((k, ka)), Some((v, va))) = (&self.keys, &self.values) {
            // keys [B, H, D, Tq * b / 32], values [B, H, Tq, Dv * b / 32]
            let (ks, vs) = (dims(&ka[0]), dims(&va[0]));
            (batch, heads, key_dim) = (ks[0], ks[1], ks[2]);
            quantized = vs[2];
            value_dim = vs[3] * v.spec.per_word();
            let (kg, vg) = (
                quantized / k.spec.group_size(),
                value_dim / v.spec.group_size(),
            );
            let key_words = quantized / k.spec.per_word();
            expected.extend([
                (&ka[0], [batch, heads, key_dim, key_words]),
                (&ka[1], [batch, heads, key_dim, kg]),
                (&ka[2], [batch, heads, key_dim, kg]),
                (&va[1], [batch, heads, quantized, vg]),
                (&va[2], [batch, heads, quantized, vg]),
            ]);
            if !quantized.is_multiple_of(k.spec.group_size())
                || !value_dim.is_multiple_of(v.spec.group_size())
            {
                return Err(KernelError::Shape(
                    "quantized arrays are not whole groups".into(),
                ));
            }
            keys = Some(Quantized::new(k, ka)?);
            values = Some(Quantized::new(v, va)?);
        }
        let (mut residual_keys, mut residual_values): (&[f32], &[f32]) = (&[], &[]);
        if let Some((k, v)) = &self.residual {
            let (ks, vs) = (dims(k), dims(v));
            if keys.is_none() {
                (batch, heads, key_dim, value_dim) = (ks[0], ks[1], ks[3], vs[3]);
            }
            residual = ks[2];
            expected.extend([
                (k, [batch, heads, residual, key_dim]),
                (v, [batch, heads, residual, value_dim]),
            ]);
            residual_keys = slice::<f32>(k)?;
            residual_values = slice::<f32>(v)?;
        }
        for (array, shape) in expected {
            if dims(array) != shape {
                return Err(KernelError::Shape(format!(
                    "cache array {:?} where {shape:?} was expected",
                    array.shape()
                )));
            }
        }
        Ok(Parts {
            batch,
            heads,
            key_dim,
            value_dim,
            quantized,
            residual,
            keys,
            values,
            residual_keys,
            residual_values,
        })
    }
}

/// The whole cache as host slices.
struct Parts<'a> {
    batch: usize,
    heads: usize,
    key_dim: usize,
    value_dim: usize,
    quantized: usize,
    residual: usize,
    keys: Option<Quantized<'a>>,
    values: Option<Quantized<'a>>,
    residual_keys: &'a [f32],
    residual_values: &'a [f32],
}

impl Parts<'_> {
    /// Attention of `rep` pre-scaled query rows `q` (`[rep, D]`) over KV head `index`
    /// (batch-major), written to `out` (`[rep, Dv]`).
    fn head(&self, index: usize, q: &[f32], rep: usize, out: &mut [f32]) {
        let (d, dv, tq, tr) = (self.key_dim, self.value_dim, self.quantized, self.residual);
        let total = tq + tr;
        let mut scores = vec![0f32; rep * total];
        if let Some(keys) = &self.keys {
            // Keys per channel: row c holds channel c of all Tq tokens.
            let k = keys.head(index, d, tq);
            let (g, groups) = (k.group, tq / k.group);
            let mut codes = vec![0f32; g];
            let mut bias = vec![0f32; rep * groups];
            for c in 0..d {
                for group in 0..groups {
                    k.unpack(c, tq, group * g, &mut codes);
                    let s = k.scales[c * groups + group];
                    let z = k.centred_zero(s, k.zeros[c * groups + group]);
                    for r in 0..rep {
                        let qc = q[r * d + c];
                        bias[r * groups + group] += qc * z;
                        let a = qc * s;
                        let start = r * total + group * g;
                        for (o, &code) in scores[start..start + g].iter_mut().zip(&codes) {
                            *o += a * code;
                        }
                    }
                }
            }
            for r in 0..rep {
                for (n, o) in scores[r * total..r * total + tq].iter_mut().enumerate() {
                    *o += bias[r * groups + n / g];
                }
            }
        }
        let rk = &self.residual_keys[index * tr * d..(index + 1) * tr * d];
        for r in 0..rep {
            let qr = &q[r * d..(r + 1) * d];
            for (n, key) in rk.chunks_exact(d).enumerate() {
                scores[r * total + tq + n] = qr.iter().zip(key).map(|(a, b)| a * b).sum();
            }
        }
        for row in scores.chunks_exact_mut(total) {
            softmax(row);
        }
        out.fill(0.0);
        if let Some(values) = &self.values {
            // Values per token: row n holds token n's Dv channels.
            let v = values.head(index, tq, dv);
            let (g, groups) = (v.group, dv / v.group);
            let mut codes = vec![0f32; g];
            let mut bias = vec![0f32; rep * groups];
            for n in 0..tq {
                for group in 0..groups {
                    v.unpack(n, dv, group * g, &mut codes);
                    let s = v.scales[n * groups + group];
                    let z = v.centred_zero(s, v.zeros[n * groups + group]);
                    for r in 0..rep {
                        let w = scores[r * total + n];
                        bias[r * groups + group] += w * z;
                        let a = w * s;
                        let start = r * dv + group * g;
                        for (o, &code) in out[start..start + g].iter_mut().zip(&codes) {
                            *o += a * code;
                        }
                    }
                }
            }
            for r in 0..rep {
                for (c, o) in out[r * dv..(r + 1) * dv].iter_mut().enumerate() {
                    *o += bias[r * groups + c / g];
                }
            }
        }
        let rv = &self.residual_values[index * tr * dv..(index + 1) * tr * dv];
        for r in 0..rep {
            for (n, value) in rv.chunks_exact(dv).enumerate() {
                let w = scores[r * total + tq + n];
                for (o, &x) in out[r * dv..(r + 1) * dv].iter_mut().zip(value) {
                    *o += w * x;
                }
            }
        }
    }
}

/// In-place softmax of one row.
fn softmax(row: &mut [f32]) {
    let max = row.iter().copied().fold(f32::NEG_INFINITY, f32::max);
    let mut total = 0f32;
    for x in row.iter_mut() {
        *x = (*x - max).exp();
        total += *x;
    }
    for x in row.iter_mut() {
        *x /= total;
    }
}

fn slice<T: mlx_rs::ArrayElement>(a: &Array) -> Result<&[T], KernelError> {
    a.try_as_slice::<T>()
        .map_err(|e| KernelError::Shape(format!("cannot read an array on the host: {e}")))
}
