//! The reference quantizer: the KIVI spec in plain Rust, small enough to check by eye.
//! Every other path (the MLX graph, the cache, attention) is tested against it.
//!
//! One group `g` of `G` values, `b` bits:
//! `zero = min(g)`, `scale = (max(g) - min(g)) / (2^b - 1)`,
//! `q = round((x - zero) / scale)` clamped to `[0, 2^b - 1]`, `x' = q * scale + zero`.
//! Rounding is to nearest, ties to even (as MLX's `round` and IEEE `rint`). A constant group
//! has `scale = 0`; its codes are 0 and it reconstructs exactly as `zero`, with no division
//! by zero. Inputs are finite `f32`.

use crate::{pack, quantized_len, rotation, sink_len, KernelError, KeyAxis, QuantSpec, Rotation};

/// A row-major `[rows, cols]` matrix quantized in groups of `G` consecutive values of a row.
#[derive(Debug, Clone, PartialEq)]
pub struct QuantizedMatrix {
    /// Bits and group size.
    pub spec: QuantSpec,
    /// Rows of the original matrix.
    pub rows: usize,
    /// Columns of the original matrix (a multiple of the group size).
    pub cols: usize,
    /// Codes packed in MLX's layout, `[rows, cols / (32 / b)]`.
    pub packed: Vec<u32>,
    /// One scale per group, `[rows, cols / G]`.
    pub scales: Vec<f32>,
    /// One zero point (the group's minimum) per group, `[rows, cols / G]`.
    pub zeros: Vec<f32>,
}

/// The format scales and zeros are stored in. With [`Storage::F16`] the scale and the
/// zero are rounded to float16 and the codes are computed against the rounded values, the
/// ones dequantization will use; a KIVI cache with float16 storage also rounds its inputs
/// (and keeps its residual window) in float16.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Storage {
    /// float32: the formulas as written.
    #[default]
    F32,
    /// float16.
    F16,
}

impl Storage {
    /// `x` as stored.
    pub fn round(self, x: f32) -> f32 {
        match self {
            Storage::F32 => x,
            Storage::F16 => half::f16::from_f32(x).to_f32(),
        }
    }
}

/// Quantizes one group into `codes` (same length) and returns `(scale, zero)`.
pub fn quantize_group(group: &[f32], bits: u32, codes: &mut [u8]) -> (f32, f32) {
    quantize_group_stored(group, bits, Storage::F32, codes)
}

/// [`quantize_group`] with the scale and zero stored as `storage` (returned as stored).
#[inline(always)]
pub fn quantize_group_stored(
    group: &[f32],
    bits: u32,
    storage: Storage,
    codes: &mut [u8],
) -> (f32, f32) {
    let max_code = ((1u32 << bits) - 1) as f32;
    let lo = group.iter().copied().fold(f32::INFINITY, f32::min);
    let hi = group.iter().copied().fold(f32::NEG_INFINITY, f32::max);
    let (scale, lo) = (storage.round((hi - lo) / max_code), storage.round(lo));
    // A constant group has x - zero == 0 for every x, so any divisor gives code 0.
    let divisor = if scale == 0.0 { 1.0 } else { scale };
    for (code, &x) in codes.iter_mut().zip(group) {
        // Through i32, exact for a clamped code: a float-to-u8 cast saturates, which the
        // compiler does not vectorize.
        *code = ((x - lo) / divisor).round_ties_even().clamp(0.0, max_code) as i32 as u8;
    }
    (scale, lo)
}

/// The value a code stands for: `q * scale + zero`.
pub fn dequantize_code(code: u8, scale: f32, zero: f32) -> f32 {
    f32::from(code) * scale + zero
}

/// Quantizes a row-major `[rows, cols]` matrix in groups along each row.
pub fn quantize_rows(
    x: &[f32],
    rows: usize,
    cols: usize,
    spec: QuantSpec,
) -> Result<QuantizedMatrix, KernelError> {
    quantize_rows_stored(x, rows, cols, spec, Storage::F32)
}

/// [`quantize_rows`] with scales and zeros stored as `storage`.
pub fn quantize_rows_stored(
    x: &[f32],
    rows: usize,
    cols: usize,
    spec: QuantSpec,
    storage: Storage,
) -> Result<QuantizedMatrix, KernelError> {
    let group = spec.group_size();
    if x.len() != rows * cols || !cols.is_multiple_of(group) {
        return Err(KernelError::Shape(format!(
            "cannot quantize {} values as [{rows}, {cols}] in groups of {group}",
            x.len()
        )));
    }
    let mut codes = vec![0u8; x.len()];
    let mut scales = Vec::with_capacity(x.len() / group);
    let mut zeros = Vec::with_capacity(x.len() / group);
    let groups = Groups {
        x,
        group,
        bits: spec.bits(),
        storage,
    };
    groups.quantize(&mut codes, &mut scales, &mut zeros);
    Ok(QuantizedMatrix {
        spec,
        rows,
        cols,
        packed: pack::pack(&codes, spec.bits()),
        scales,
        zeros,
    })
}

/// Consecutive groups of `x` to quantize.
struct Groups<'a> {
    x: &'a [f32],
    group: usize,
    bits: u32,
    storage: Storage,
}

impl Groups<'_> {
    /// Every group through [`quantize_group_stored`], compiled for AVX2 where the CPU has
    /// it: the same operations (a subtraction, a division, rounding to even), so the same
    /// bits, but the rounding becomes one instruction instead of a call to `rintf` per value
    /// (a KIVI flush quantizes every layer's group at once; this was most of its time).
    fn quantize(&self, codes: &mut [u8], scales: &mut Vec<f32>, zeros: &mut Vec<f32>) {
        #[cfg(target_arch = "x86_64")]
        {
            #[target_feature(enable = "avx2")]
            fn avx2(g: &Groups<'_>, codes: &mut [u8], scales: &mut Vec<f32>, zeros: &mut Vec<f32>) {
                g.each(codes, scales, zeros);
            }
            if is_x86_feature_detected!("avx2") {
                // SAFETY: the CPU supports AVX2 (checked at run time).
                return unsafe { avx2(self, codes, scales, zeros) };
            }
        }
        self.each(codes, scales, zeros);
    }

    #[inline(always)]
    fn each(&self, codes: &mut [u8], scales: &mut Vec<f32>, zeros: &mut Vec<f32>) {
        let chunks = self.x.chunks_exact(self.group);
        for (values, codes) in chunks.zip(codes.chunks_exact_mut(self.group)) {
            let (scale, zero) = quantize_group_stored(values, self.bits, self.storage, codes);
            scales.push(scale);
            zeros.push(zero);
        }
    }
}

impl QuantizedMatrix {
    /// The codes, one per value, row-major.
    pub fn codes(&self) -> Vec<u8> {
        pack::unpack(&self.packed, self.spec.bits())
    }

    /// The reconstruction `x'`, row-major `[rows, cols]`.
    pub fn dequantize(&self) -> Vec<f32> {
        let group = self.spec.group_size();
        self.codes()
            .iter()
            .enumerate()
            .map(|(i, &code)| dequantize_code(code, self.scales[i / group], self.zeros[i / group]))
            .collect()
    }
}

/// Transposes a row-major `[rows, cols]` matrix.
pub fn transpose(x: &[f32], rows: usize, cols: usize) -> Vec<f32> {
    assert_eq!(
        x.len(),
        rows * cols,
        "transpose: {} values are not [{rows}, {cols}]",
        x.len()
    );
    (0..cols)
        .flat_map(|c| (0..rows).map(move |r| x[r * cols + c]))
        .collect()
}

/// KIVI keys: `[T, D]` quantized per channel, i.e. stored transposed as `[D, T]` and grouped
/// along tokens (`T` a multiple of the group size).
pub fn quantize_keys(
    keys: &[f32],
    tokens: usize,
    dim: usize,
    spec: QuantSpec,
) -> Result<QuantizedMatrix, KernelError> {
    if keys.len() != tokens * dim {
        return Err(KernelError::Shape(format!(
            "{} key values are not [{tokens}, {dim}]",
            keys.len()
        )));
    }
    quantize_rows(&transpose(keys, tokens, dim), dim, tokens, spec)
}

/// KIVI values: `[T, D]` quantized per token, grouped along channels. The group size is
/// clamped to the head ([`QuantSpec::for_axis`]).
pub fn quantize_values(
    values: &[f32],
    tokens: usize,
    dim: usize,
    spec: QuantSpec,
) -> Result<QuantizedMatrix, KernelError> {
    quantize_rows(values, tokens, dim, spec.for_axis(dim)?)
}

/// Settings of a KIVI cache, as the reference needs them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CacheSpec {
    /// Key bits and group size (the group along tokens for per-channel keys).
    pub keys: QuantSpec,
    /// Value bits and group size (clamped to the head).
    pub values: QuantSpec,
    /// Tokens kept in full precision before whole groups are quantized (a multiple of G).
    pub residual: usize,
    /// Key grouping.
    pub key_axis: KeyAxis,
    /// How scales, zeros and the residual window are stored.
    pub storage: Storage,
    /// KIVI+: the first tokens kept in full precision for good (0: plain KIVI).
    pub sinks: usize,
    /// KIVI+: which of keys and values are stored in the Hadamard basis.
    pub rotation: Rotation,
}

impl CacheSpec {
    /// Plain KIVI (no sinks, no rotation).
    pub fn plain(
        keys: QuantSpec,
        values: QuantSpec,
        residual: usize,
        key_axis: KeyAxis,
        storage: Storage,
    ) -> Self {
        Self {
            keys,
            values,
            residual,
            key_axis,
            storage,
            sinks: 0,
            rotation: Rotation::None,
        }
    }
}

/// What a KIVI cache holding the stream `keys`, `values` (`[T, D]`, one head) stands for, in
/// the cache's own basis: keys and values rotated where the spec says (`x·H`), stored in
/// the storage format, then the first `S' = min(T, S)` tokens (sinks) and the window kept
/// exactly and the `Q = max(0, floor((T - S' - R) / G) * G)` tokens after the sinks
/// quantized and dequantized. This is the cache's content by the spec; attention over it
/// (with the query and output rotated alike) is what the cache's attention must equal.
pub fn dequantized_cache(
    keys: &[f32],
    values: &[f32],
    dim: usize,
    spec: &CacheSpec,
) -> Result<(Vec<f32>, Vec<f32>), KernelError> {
    read_by_append(keys, values, dim, spec, keys.len() / dim.max(1))
}

/// What the queries of a call that brings a KIVI cache from `held` tokens to the whole
/// stream `keys`, `values` (`[T, D]`, one head) read: attention runs before the call's
/// flush, so the history is the one of the cache holding the first `held` tokens
/// (`Q(held)` tokens after the sinks quantized), and every later token is kept exactly.
/// Otherwise as [`dequantized_cache`], which is this with `held = T`.
pub fn read_by_append(
    keys: &[f32],
    values: &[f32],
    dim: usize,
    spec: &CacheSpec,
    held: usize,
) -> Result<(Vec<f32>, Vec<f32>), KernelError> {
    let tokens = keys.len() / dim.max(1);
    if keys.len() != tokens * dim || values.len() != keys.len() || held > tokens {
        return Err(KernelError::Shape(format!(
            "keys ({}) and values ({}) are not both [T, {dim}] with T >= {held}",
            keys.len(),
            values.len()
        )));
    }
    let sinks = sink_len(tokens, spec.sinks);
    let held_sinks = sink_len(held, spec.sinks);
    let quantized = quantized_len(held - held_sinks, spec.residual, spec.keys.group_size());
    let (start, split) = (sinks * dim, (sinks + quantized) * dim);
    // Everything the cache holds went into its basis, then through the storage format.
    let stored = |x: &[f32], rotate: bool| -> Result<Vec<f32>, KernelError> {
        let mut x = x.to_vec();
        if rotate {
            rotation::rotate_rows(&mut x, dim)?;
        }
        Ok(x.iter().map(|&x| spec.storage.round(x)).collect())
    };
    let (all_keys, all_values) = (
        stored(keys, spec.rotation.keys())?,
        stored(values, spec.rotation.values())?,
    );
    let (keys, values) = (&all_keys[start..], &all_values[start..]);
    let split = split - start;
    let rows = |x: &[f32], rows: usize, cols: usize, q: QuantSpec| {
        quantize_rows_stored(x, rows, cols, q, spec.storage).map(|m| m.dequantize())
    };
    let mut k = match spec.key_axis {
        KeyAxis::PerChannel => transpose(
            &rows(
                &transpose(&keys[..split], quantized, dim),
                dim,
                quantized,
                spec.keys,
            )?,
            dim,
            quantized,
        ),
        KeyAxis::PerToken => rows(&keys[..split], quantized, dim, spec.keys.for_axis(dim)?)?,
    };
    let mut v = rows(&values[..split], quantized, dim, spec.values.for_axis(dim)?)?;
    k.extend_from_slice(&keys[split..]);
    v.extend_from_slice(&values[split..]);
    let with_sinks = |sunk: &[f32], rest: Vec<f32>| [&sunk[..start], &rest[..]].concat();
    Ok((with_sinks(&all_keys, k), with_sinks(&all_values, v)))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testdata::XorShift;

    fn spec(bits: u32, group: usize) -> QuantSpec {
        QuantSpec::new(bits, group).unwrap()
    }

    #[test]
    fn hand_computed_group() {
        // min 0, max 3, 2 bits: scale 1, codes are the values rounded half to even.
        let mut group: Vec<f32> = vec![0.0, 3.0, 0.5, 1.5, 2.5, 1.0, 2.0, 0.49];
        group.resize(32, 0.0);
        let q = quantize_rows(&group, 1, 32, spec(2, 32)).unwrap();
        assert_eq!((q.scales[0], q.zeros[0]), (1.0, 0.0));
        assert_eq!(&q.codes()[..8], &[0, 3, 0, 2, 2, 1, 2, 0]);
        assert_eq!(
            &q.dequantize()[..8],
            &[0.0, 3.0, 0.0, 2.0, 2.0, 1.0, 2.0, 0.0]
        );
    }

    #[test]
    fn constant_group_is_exact() {
        for bits in [2, 4] {
            for value in [0.0f32, -3.25, 1e-30, 7.5e20] {
                let x = vec![value; 64];
                let q = quantize_rows(&x, 2, 32, spec(bits, 32)).unwrap();
                assert_eq!(q.scales, vec![0.0, 0.0]);
                assert_eq!(q.dequantize(), x);
                assert!(q.codes().iter().all(|&c| c == 0));
            }
        }
    }

    #[test]
    fn error_is_at_most_half_a_step() {
        let mut rng = XorShift::new(7);
        for bits in [2, 4] {
            for group in [32, 64, 128] {
                let x: Vec<f32> = (0..4 * 256).map(|_| rng.normal() * 3.0).collect();
                let q = quantize_rows(&x, 4, 256, spec(bits, group)).unwrap();
                let back = q.dequantize();
                for (i, (a, b)) in x.iter().zip(&back).enumerate() {
                    let step = q.scales[i / group];
                    assert!(
                        (a - b).abs() <= step * 0.5 + 1e-5,
                        "bits={bits} G={group}: {a} vs {b}"
                    );
                }
                // The group's extremes are hit (the minimum exactly).
                for (g, values) in x.chunks(group).enumerate() {
                    let lo = values.iter().copied().fold(f32::INFINITY, f32::min);
                    assert_eq!(q.zeros[g], lo);
                }
            }
        }
    }

    #[test]
    fn keys_are_grouped_along_tokens_and_values_along_channels() {
        // One key channel is 100x the others: per-channel grouping keeps the others precise.
        let (tokens, dim) = (32, 64);
        let mut rng = XorShift::new(3);
        let mut keys: Vec<f32> = (0..tokens * dim).map(|_| rng.normal()).collect();
        for t in 0..tokens {
            keys[t * dim + 5] *= 100.0;
        }
        let k = quantize_keys(&keys, tokens, dim, spec(2, 32)).unwrap();
        assert_eq!((k.rows, k.cols), (dim, tokens));
        assert!(k.scales[5] > 20.0 * k.scales[4]);
        let back = transpose(&k.dequantize(), dim, tokens);
        let err: f32 = (0..tokens)
            .map(|t| (back[t * dim + 4] - keys[t * dim + 4]).abs())
            .sum();
        assert!(err / (tokens as f32) < 1.0);

        let v = quantize_values(&keys, tokens, dim, spec(4, 128)).unwrap();
        assert_eq!(v.spec.group_size(), 64, "value groups clamp to head_dim");
        assert_eq!(v.scales.len(), tokens);
    }

    #[test]
    fn dequantized_cache_keeps_the_residual_exact() {
        let (tokens, dim) = (100, 64);
        let mut rng = XorShift::new(11);
        let keys: Vec<f32> = (0..tokens * dim).map(|_| rng.normal()).collect();
        let values: Vec<f32> = (0..tokens * dim).map(|_| rng.normal()).collect();
        let cache = CacheSpec::plain(
            spec(2, 32),
            spec(2, 32),
            32,
            KeyAxis::PerChannel,
            Storage::F32,
        );
        let (k, v) = dequantized_cache(&keys, &values, dim, &cache).unwrap();
        let q = quantized_len(tokens, 32, 32) * dim;
        assert_eq!(q, 64 * dim);
        assert_eq!(&k[q..], &keys[q..]);
        assert_eq!(&v[q..], &values[q..]);
        assert_ne!(&k[..q], &keys[..q]);
    }

    #[test]
    fn a_call_reads_the_history_held_before_it() {
        let (tokens, dim) = (100, 64);
        let mut rng = XorShift::new(13);
        let keys: Vec<f32> = (0..tokens * dim).map(|_| rng.normal()).collect();
        let values: Vec<f32> = (0..tokens * dim).map(|_| rng.normal()).collect();
        let cache = CacheSpec::plain(
            spec(2, 32),
            spec(4, 32),
            32,
            KeyAxis::PerChannel,
            Storage::F32,
        );
        // 70 tokens held: one group quantized; the 30 new ones and the window stay exact,
        // although the whole stream's cache quantizes two groups.
        let held = 70;
        let (k, v) = read_by_append(&keys, &values, dim, &cache, held).unwrap();
        let (hk, hv) =
            dequantized_cache(&keys[..held * dim], &values[..held * dim], dim, &cache).unwrap();
        let q = 32 * dim;
        assert_eq!((&k[..held * dim], &v[..held * dim]), (&hk[..], &hv[..]));
        assert_ne!(&k[..q], &keys[..q]);
        assert_eq!((&k[q..], &v[q..]), (&keys[q..], &values[q..]));
        let (all, _) = dequantized_cache(&keys, &values, dim, &cache).unwrap();
        assert_ne!(&all[q..2 * q], &keys[q..2 * q]);
        assert!(read_by_append(&keys, &values, dim, &cache, tokens + 1).is_err());
    }

    #[test]
    fn sinks_stay_exact_and_groups_align_after_them() {
        let (tokens, dim, sinks) = (104, 64, 4);
        let mut rng = XorShift::new(12);
        let keys: Vec<f32> = (0..tokens * dim).map(|_| rng.normal()).collect();
        let values: Vec<f32> = (0..tokens * dim).map(|_| rng.normal()).collect();
        let mut cache = CacheSpec::plain(
            spec(2, 32),
            spec(2, 32),
            32,
            KeyAxis::PerChannel,
            Storage::F32,
        );
        cache.sinks = sinks;
        let (k, v) = dequantized_cache(&keys, &values, dim, &cache).unwrap();
        // 104 - 4 - 32 = 68: two groups quantized, at positions 4..68.
        let (s, q) = (sinks * dim, (sinks + 64) * dim);
        assert_eq!((&k[..s], &v[..s]), (&keys[..s], &values[..s]));
        assert_ne!(&k[s..q], &keys[s..q]);
        assert_eq!((&k[q..], &v[q..]), (&keys[q..], &values[q..]));
        // The quantized part is the plain quantizer's on the tokens after the sinks.
        let plain = CacheSpec { sinks: 0, ..cache };
        let (pk, _) = dequantized_cache(&keys[s..], &values[s..], dim, &plain).unwrap();
        assert_eq!(&k[s..], &pk[..]);
        // Fewer tokens than sinks: everything exact.
        let few = 3 * dim;
        let (k, _) = dequantized_cache(&keys[..few], &values[..few], dim, &cache).unwrap();
        assert_eq!(&k[..], &keys[..few]);
    }

    #[test]
    fn rotated_content_is_the_rotated_stream_quantized() {
        let (tokens, dim) = (96, 64);
        let mut rng = XorShift::new(13);
        let keys: Vec<f32> = (0..tokens * dim).map(|_| rng.normal()).collect();
        let values: Vec<f32> = (0..tokens * dim).map(|_| rng.normal()).collect();
        let mut cache = CacheSpec::plain(
            spec(4, 32),
            spec(4, 32),
            32,
            KeyAxis::PerChannel,
            Storage::F32,
        );
        cache.rotation = Rotation::Values;
        let (k, v) = dequantized_cache(&keys, &values, dim, &cache).unwrap();
        let plain = CacheSpec {
            rotation: Rotation::None,
            ..cache
        };
        let (pk, _) = dequantized_cache(&keys, &values, dim, &plain).unwrap();
        assert_eq!(k, pk, "keys are not rotated");
        let mut rotated = values.clone();
        rotation::rotate_rows(&mut rotated, dim).unwrap();
        let (_, want) = dequantized_cache(&keys, &rotated, dim, &plain).unwrap();
        assert_eq!(v, want);
    }
}
