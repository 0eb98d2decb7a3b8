//! KIVI+'s adaptive basis (`-rota`): per KV head, whether keys and values enter the cache
//! rotated, chosen once from the cache's own data, with no calibration.
//!
//! A Hadamard basis helps where outliers move from token to token and hurts where they sit
//! in a few fixed channels that the queries weigh heavily: per-channel key groups already
//! give such a channel a scale of its own, and the rotation spreads every other channel's
//! error into it, where each unit of error costs the most in the scores (2-bit keys with 4
//! sinks: SmolLM2 +10.6% perplexity plain against +3.4% rotated, Qwen2.5 +10.7% against
//! +121%, Gemma 3 +1.3% against +19.3%; `docs/benchmarks.md`). So each head takes the basis
//! that loses less on its own first groups:
//!
//! - keys: plain, rotated, or rotated after each channel `c` is multiplied by
//!   `s_c ∝ (w_c / v_c)^(1/4)` (the queries divided by it, so `q·k` is unchanged), by the
//!   error each leaves, measured in the model's basis with every channel weighted by the
//!   queries' energy there (`w_c = Σ q_c²` over the query heads that read the KV head, at
//!   the first `S + R + G` positions), which is the error the attention scores see.
//!   Why the factors: a rotation spreads the error evenly over the channels, so a channel
//!   the queries weigh heavily and whose keys vary little (`v_c`, the variance within a
//!   group) pays for everyone's error; scaled by `s_c`, the score error after the rotation
//!   is proportional to `(Σ_c sqrt(w_c v_c))²`, the least any factors give (Cauchy-Schwarz),
//!   never more than the unscaled rotation's `Σ w_c · Σ v_c`. 2-bit keys with 4 sinks:
//!   Qwen2.5 +11.3% perplexity choosing between plain and rotated, +5.5% with the factors;
//!   SmolLM2 +3.4% and +2.3%, Gemma 3 +1.0% and +0.5%;
//! - values: the plain squared error (attention mixes values with the same weights in every
//!   channel, and the rotation keeps norms).
//!
//! The choice is made when the first group is about to be quantized, from the first
//! `floor((R + G) / G)` groups after the sinks, all in the window then and never quantized
//! before; the window is then rewritten in the chosen basis. Every token is rounded to the
//! storage dtype before its rotation, so a token rotated with the window and one rotated as
//! it arrives hold the same bits. The queries are summed one position at a time in position
//! order, so one prefill, any chunking and token-by-token decode choose alike, and both
//! runtimes run this same host code over the same numbers.

use kivi_kernels::{
    reference::{dequantize_code, quantize_group_stored, Storage},
    rotation, QuantSpec,
};

/// Per KV head (`batch × heads`, batch-major), whether keys and values are rotated, and
/// the keys' channel factors.
#[derive(Debug, Clone, PartialEq)]
pub(super) struct HeadBasis {
    pub(super) keys: Vec<bool>,
    pub(super) values: Vec<bool>,
    /// Per KV head and key channel (`[pairs, Dk]`), the factor a rotated head's keys are
    /// multiplied by before the rotation, and its queries divided by (`q·k` unchanged);
    /// empty: all ones.
    pub(super) key_scales: Vec<f32>,
}

/// Which side of the scores [`HeadBasis::key_factors`] is for.
#[derive(Debug, Clone, Copy)]
pub(super) enum Scaling {
    /// Keys, multiplied by the scales.
    Keys,
    /// Queries, divided by them.
    Queries,
}

impl HeadBasis {
    /// The factors each KV head's channels take before the rotation (`[pairs, Dk]`), or
    /// `None` when all are ones.
    pub(super) fn key_factors(&self, scaling: Scaling) -> Option<Vec<f32>> {
        if self.key_scales.iter().all(|&s| s == 1.0) {
            return None;
        }
        Some(match scaling {
            Scaling::Keys => self.key_scales.clone(),
            Scaling::Queries => self.key_scales.iter().map(|s| 1.0 / s).collect(),
        })
    }
}

/// `Σ q_c²` per KV head and key channel (`[pairs, D]`) over the queries of the positions
/// before the choice's span; empty until queries arrive.
#[derive(Debug, Clone, Default, PartialEq)]
pub(super) struct QueryEnergy {
    pub(super) sums: Vec<f32>,
}

/// The shape of a `[B, heads, L, D]` block: `[B, heads, L, D]`.
pub(super) type Shape4 = [usize; 4];

impl QueryEnergy {
    /// Adds the queries `q` (`[B, Hq, L, D]`, row-major float32) of positions
    /// `first .. first + L`, those before `span`, to the sums of their KV heads
    /// (`kv_heads`, each read by `Hq / kv_heads` consecutive query heads).
    pub(super) fn add(
        &mut self,
        q: &[f32],
        shape: Shape4,
        kv_heads: usize,
        first: usize,
        span: usize,
    ) {
        let [batch, heads, len, dim] = shape;
        let per = heads / kv_heads.max(1);
        let count = span.saturating_sub(first).min(len);
        if count == 0 || per == 0 {
            return;
        }
        self.sums.resize(batch * kv_heads * dim, 0.0);
        let mut position = vec![0f32; dim];
        for t in 0..count {
            for pair in 0..batch * kv_heads {
                let (b, h) = (pair / kv_heads, pair % kv_heads);
                position.fill(0.0);
                for j in h * per..(h + 1) * per {
                    let row = ((b * heads + j) * len + t) * dim;
                    for (acc, &x) in position.iter_mut().zip(&q[row..row + dim]) {
                        *acc += x * x;
                    }
                }
                let sums = &mut self.sums[pair * dim..(pair + 1) * dim];
                for (s, p) in sums.iter_mut().zip(&position) {
                    *s += p;
                }
            }
        }
    }

    /// One KV head's weights: its sums, or ones where no query was seen (a cache filled
    /// without attention).
    fn weights(&self, pair: usize, dim: usize) -> Vec<f32> {
        match self.sums.get(pair * dim..(pair + 1) * dim) {
            Some(w) if w.iter().any(|&x| x > 0.0) => w.to_vec(),
            _ => vec![1.0; dim],
        }
    }
}

/// The window's first tokens in the model's basis, as stored (float32 host copies of
/// `[B, H, T, D]` keys and values).
pub(super) struct Sample<'a> {
    pub(super) keys: &'a [f32],
    pub(super) values: &'a [f32],
    /// `[B, H, T, Dk]`.
    pub(super) key_shape: Shape4,
    pub(super) value_dim: usize,
}

/// The quantization the choice weighs, as the cache applies it.
pub(super) struct Quantizers {
    pub(super) keys: QuantSpec,
    /// Clamped to the value head (`QuantSpec::for_axis`).
    pub(super) values: QuantSpec,
    pub(super) storage: Storage,
}

/// Each head's basis, from tokens `from .. from + count` of `sample` (`count` a multiple of
/// the key group).
pub(super) fn choose(
    sample: &Sample<'_>,
    from: usize,
    count: usize,
    energy: &QueryEnergy,
    quant: &Quantizers,
) -> HeadBasis {
    let [batch, heads, tokens, key_dim] = sample.key_shape;
    let value_dim = sample.value_dim;
    let rows = |data: &[f32], pair: usize, dim: usize| {
        let start = (pair * tokens + from) * dim;
        data[start..start + count * dim].to_vec()
    };
    let rotatable = |dim: usize| rotation::check_dim(dim).is_ok();
    let mut basis = HeadBasis {
        keys: Vec::with_capacity(batch * heads),
        values: Vec::with_capacity(batch * heads),
        key_scales: Vec::with_capacity(batch * heads * key_dim),
    };
    for pair in 0..batch * heads {
        let keys = rows(sample.keys, pair, key_dim);
        let weights = energy.weights(pair, key_dim);
        let key_error = |rotate, scales: &[f32]| {
            let error = error_of(&keys, key_dim, rotate, scales, quant.storage, |x| {
                quantize_channels(x, key_dim, quant.keys, quant.storage)
            });
            weighted(&error, &weights)
        };
        // Plain, rotated, or rotated with each channel scaled first: whichever loses least.
        let ones = vec![1f32; key_dim];
        let mut best = (key_error(false, &ones), false, ones.clone());
        if rotatable(key_dim) {
            let scales = channel_scales(&keys, key_dim, quant.keys.group_size(), &weights);
            for scales in [ones, scales] {
                let error = key_error(true, &scales);
                if error < best.0 {
                    best = (error, true, scales);
                }
            }
        }
        basis.keys.push(best.1);
        basis.key_scales.extend(best.2);
        let values = rows(sample.values, pair, value_dim);
        let value_error = |rotate| {
            let ones = vec![1f32; value_dim];
            let error = error_of(&values, value_dim, rotate, &ones, quant.storage, |x| {
                quantize_rows(x, quant.values, quant.storage)
            });
            weighted(&error, &vec![1.0; value_dim])
        };
        basis
            .values
            .push(rotatable(value_dim) && value_error(true) < value_error(false));
    }
    basis
}

/// `x̂ - x` in the model's basis, where `x̂` is `x` (rows of `dim`) stored as the cache
/// stores it: each channel multiplied by its factor in `scales`, in the basis `rotate`
/// names, and quantized by `quantize` (which replaces its input with the values its codes
/// stand for).
fn error_of(
    x: &[f32],
    dim: usize,
    rotate: bool,
    scales: &[f32],
    storage: Storage,
    quantize: impl Fn(&mut [f32]),
) -> Vec<f32> {
    let mut stored: Vec<f32> = x
        .chunks_exact(dim)
        .flat_map(|row| row.iter().zip(scales).map(|(v, s)| v * s))
        .collect();
    if rotate {
        rotation::rotate_rows(&mut stored, dim).expect("a power-of-two head, checked");
        stored.iter_mut().for_each(|v| *v = storage.round(*v));
    }
    quantize(&mut stored);
    if rotate {
        // H·H = I: the reconstruction back in the model's basis.
        rotation::rotate_rows(&mut stored, dim).expect("a power-of-two head, checked");
    }
    for row in stored.chunks_exact_mut(dim) {
        row.iter_mut().zip(scales).for_each(|(v, s)| *v /= s);
    }
    stored.iter().zip(x).map(|(a, b)| a - b).collect()
}

/// Per channel, `(w_c / v_c)^(1/4)`, `v_c` the keys' variance within their groups: the
/// factor that makes a rotation's error, spread evenly over the channels, cost the
/// scores least (geometric mean 1).
fn channel_scales(x: &[f32], dim: usize, group: usize, weights: &[f32]) -> Vec<f32> {
    // Each channel's variance about its group's mean (the part a group's zero point does
    // not absorb), summed over the whole groups of `x`.
    let mut variance = vec![0f64; dim];
    for rows in x.chunks_exact(group * dim) {
        for (c, v) in variance.iter_mut().enumerate() {
            let values = || rows.iter().skip(c).step_by(dim).map(|&x| f64::from(x));
            let mean = values().sum::<f64>() / group as f64;
            *v += values().map(|x| (x - mean) * (x - mean)).sum::<f64>();
        }
    }
    // Floors keep a constant channel, or one no query reads, from an unbounded factor.
    let floor = |values: &[f64]| 1e-4 * values.iter().sum::<f64>() / dim as f64 + 1e-30;
    let weights: Vec<f64> = weights.iter().map(|&w| f64::from(w)).collect();
    let (v_floor, w_floor) = (floor(&variance), floor(&weights));
    let raw: Vec<f64> = variance
        .iter()
        .zip(&weights)
        .map(|(&v, &w)| (w.max(w_floor) / v.max(v_floor)).powf(0.25))
        .collect();
    let log_mean = raw.iter().map(|r| r.ln()).sum::<f64>() / dim as f64;
    raw.iter().map(|r| (r / log_mean.exp()) as f32).collect()
}

/// `Σ w_c e_c²` over rows of `weights.len()` channels, in float64.
fn weighted(error: &[f32], weights: &[f32]) -> f64 {
    error
        .chunks_exact(weights.len())
        .flat_map(|row| row.iter().zip(weights))
        .map(|(&e, &w)| f64::from(w) * f64::from(e) * f64::from(e))
        .sum()
}

/// Rows of `[T, dim]` quantized per channel in groups of `G` tokens (KIVI's keys), in
/// place.
fn quantize_channels(x: &mut [f32], dim: usize, spec: QuantSpec, storage: Storage) {
    let (group, tokens) = (spec.group_size(), x.len() / dim);
    let (mut values, mut codes) = (vec![0f32; group], vec![0u8; group]);
    for channel in 0..dim {
        for start in (0..tokens - tokens % group).step_by(group) {
            for (t, v) in values.iter_mut().enumerate() {
                *v = x[(start + t) * dim + channel];
            }
            let (scale, zero) = quantize_group_stored(&values, spec.bits(), storage, &mut codes);
            for (t, &code) in codes.iter().enumerate() {
                x[(start + t) * dim + channel] = dequantize_code(code, scale, zero);
            }
        }
    }
}

/// Each row quantized in groups of consecutive channels (KIVI's values), in place.
fn quantize_rows(x: &mut [f32], spec: QuantSpec, storage: Storage) {
    let mut codes = vec![0u8; spec.group_size()];
    for group in x.chunks_exact_mut(spec.group_size()) {
        let (scale, zero) = quantize_group_stored(group, spec.bits(), storage, &mut codes);
        for (v, &code) in group.iter_mut().zip(&codes) {
            *v = dequantize_code(code, scale, zero);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use kivi_kernels::testdata::XorShift;

    const DIM: usize = 64;
    const TOKENS: usize = 64;

    fn quantizers() -> Quantizers {
        Quantizers {
            keys: QuantSpec::new(2, 32).unwrap(),
            values: QuantSpec::new(2, 32).unwrap(),
            storage: Storage::F16,
        }
    }

    /// Two KV heads: the first's keys carry a large offset in two channels that barely
    /// varies, where its queries are large (Qwen2.5's key bias); the second's keys have
    /// outliers that move from token to token, in channels its queries treat like the rest.
    fn two_heads() -> (Vec<f32>, QueryEnergy) {
        let mut rng = XorShift::new(11);
        let mut keys = rng.normals(2 * TOKENS * DIM);
        for t in 0..TOKENS {
            let row = t * DIM;
            keys[row + 3] = 60.0 + 0.01 * keys[row + 3];
            keys[row + 40] = -45.0 + 0.01 * keys[row + 40];
            let moving = TOKENS * DIM + row + (t * 7) % DIM;
            keys[moving] += 30.0;
        }
        let mut sums = vec![1.0; 2 * DIM];
        sums[3] = 400.0;
        sums[40] = 400.0;
        (keys, QueryEnergy { sums })
    }

    #[test]
    fn fixed_outlier_channels_stay_plain_and_moving_outliers_are_rotated() {
        let (keys, energy) = two_heads();
        let sample = Sample {
            keys: &keys,
            values: &keys,
            key_shape: [1, 2, TOKENS, DIM],
            value_dim: DIM,
        };
        let basis = choose(&sample, 0, TOKENS, &energy, &quantizers());
        assert_eq!(basis.keys, [false, true]);
        // Values: a token's outlier widens its own group unless the rotation spreads it.
        assert!(basis.values[1]);
    }

    /// Qwen2.5's keys: a channel with a large offset that varies a little, where the
    /// queries are large, beside channels whose outliers move from token to token. Plain
    /// keys leave the moving outliers a group's range; rotating alone spreads every
    /// channel's error into the one the queries weigh most; scaling that channel up before
    /// the rotation keeps its share of the error small.
    #[test]
    fn a_weighted_channel_is_scaled_up_before_the_rotation() {
        let mut rng = XorShift::new(7);
        let mut keys = rng.normals(TOKENS * DIM);
        for t in 0..TOKENS {
            keys[t * DIM + 3] = 80.0 + 0.5 * keys[t * DIM + 3];
            let moving = 4 + (t * 5) % (DIM - 4);
            keys[t * DIM + moving] += 25.0;
        }
        let mut sums = vec![1.0; DIM];
        sums[3] = 500.0;
        let energy = QueryEnergy { sums };
        let sample = Sample {
            keys: &keys,
            values: &keys,
            key_shape: [1, 1, TOKENS, DIM],
            value_dim: DIM,
        };
        let basis = choose(&sample, 0, TOKENS, &energy, &quantizers());
        assert!(basis.keys[0]);
        let scales = basis.key_factors(Scaling::Keys).expect("scaled");
        let largest = (0..DIM).max_by(|&a, &b| scales[a].total_cmp(&scales[b]));
        assert_eq!(largest, Some(3));
        // The queries take the inverse, so that `q·k` is unchanged.
        let inverse = basis.key_factors(Scaling::Queries).unwrap();
        assert!(scales
            .iter()
            .zip(&inverse)
            .all(|(s, i)| (s * i - 1.0).abs() < 1e-6));
    }

    #[test]
    fn query_energy_is_the_same_for_any_chunking() {
        let (heads, kv, len) = (4, 2, 50);
        let q = XorShift::new(3).normals(heads * len * DIM);
        let mut whole = QueryEnergy::default();
        whole.add(&q, [1, heads, len, DIM], kv, 0, 40);
        let mut stepped = QueryEnergy::default();
        for t in 0..len {
            let one: Vec<f32> = (0..heads)
                .flat_map(|h| q[(h * len + t) * DIM..(h * len + t + 1) * DIM].to_vec())
                .collect();
            stepped.add(&one, [1, heads, 1, DIM], kv, t, 40);
        }
        assert_eq!(whole, stepped);
        // Positions past the span count for nothing.
        let mut late = QueryEnergy::default();
        late.add(&q, [1, heads, len, DIM], kv, 40, 40);
        assert!(late.sums.is_empty());
    }

    #[test]
    fn a_head_that_cannot_be_rotated_stays_plain() {
        let dim = 96;
        let x = XorShift::new(5).normals(TOKENS * dim);
        let sample = Sample {
            keys: &x,
            values: &x,
            key_shape: [1, 1, TOKENS, dim],
            value_dim: dim,
        };
        let basis = choose(&sample, 0, TOKENS, &QueryEnergy::default(), &quantizers());
        assert_eq!((basis.keys[0], basis.values[0]), (false, false));
    }
}
