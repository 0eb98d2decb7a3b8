//! Rotary position embeddings, with the scalings Llama-family checkpoints use: the angle
//! of each rotated pair at each position. The rotation itself is an operation of the ops
//! seam ([`super::ops::Ops::rope`]): MLX's fused kernel, or a loop on host memory.

use mlx_rs::Array;

use super::config::{RopeConfig, RopeScaling};

/// RoPE over the full head dimension.
pub struct Rope {
    /// Rotated channels (the head dimension).
    pub(crate) dims: i32,
    /// Pairs are neighbouring channels (GGUF Llama rows) rather than the two halves.
    pub(crate) traditional: bool,
    /// `theta`, when the periods are uniform (`base^(2i/d)`) and MLX can derive them.
    pub(crate) base: Option<f32>,
    /// Positions are multiplied by this.
    pub(crate) scale: f32,
    /// Per-pair periods (`base^(2i/d)`, scaled), when the scaling is not uniform.
    pub(crate) periods: Option<Array>,
    /// The same periods for every scaling: the angle of pair `i` at position `p` is
    /// `p * scale / host_periods[i]`.
    pub(crate) host_periods: Vec<f32>,
}

impl Rope {
    /// RoPE for `head_dim` channels with the model's settings.
    pub fn new(config: &RopeConfig, head_dim: usize) -> Self {
        let dims = head_dim as i32;
        let plain = |scale: f32| Rope {
            dims,
            traditional: config.traditional,
            base: Some(config.theta),
            scale,
            periods: None,
            host_periods: base_periods(head_dim, config.theta),
        };
        let with_periods = |periods: Vec<f32>| Rope {
            dims,
            traditional: config.traditional,
            base: None,
            scale: 1.0,
            periods: Some(Array::from_slice(&periods, &[periods.len() as i32])),
            host_periods: periods,
        };
        match &config.scaling {
            RopeScaling::None => plain(1.0),
            RopeScaling::Linear { factor } => plain(1.0 / factor),
            RopeScaling::Llama3 {
                factor,
                low_freq_factor,
                high_freq_factor,
                original_max_position_embeddings,
            } => with_periods(llama3_periods(
                head_dim,
                config.theta,
                *factor,
                *low_freq_factor,
                *high_freq_factor,
                *original_max_position_embeddings,
            )),
            RopeScaling::Factors(factors) => with_periods(
                base_periods(head_dim, config.theta)
                    .iter()
                    .zip(factors)
                    .map(|(p, f)| p * f)
                    .collect(),
            ),
        }
    }
}

/// `base^(2i/d)` for each rotated pair: the wavelength over 2π of pair `i`.
pub(crate) fn base_periods(head_dim: usize, theta: f32) -> Vec<f32> {
    (0..head_dim / 2)
        .map(|i| theta.powf(2.0 * i as f32 / head_dim as f32))
        .collect()
}

/// Llama 3.1's scaling: long wavelengths are stretched by `factor`, short ones kept, and
/// the band in between interpolated (as in the reference `apply_scaling`).
pub(crate) fn llama3_periods(
    head_dim: usize,
    theta: f32,
    factor: f32,
    low_freq_factor: f32,
    high_freq_factor: f32,
    original: f32,
) -> Vec<f32> {
    let low_freq_wavelen = original / low_freq_factor;
    let high_freq_wavelen = original / high_freq_factor;
    base_periods(head_dim, theta)
        .into_iter()
        .map(|period| {
            let wavelen = 2.0 * std::f32::consts::PI * period;
            if wavelen > low_freq_wavelen {
                period * factor
            } else if wavelen < high_freq_wavelen {
                period
            } else {
                let smooth =
                    (original / wavelen - low_freq_factor) / (high_freq_factor - low_freq_factor);
                period / ((1.0 - smooth) / factor + smooth)
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn llama3_scaling_keeps_high_frequencies_and_stretches_low_ones() {
        let base = base_periods(64, 500_000.0);
        let scaled = llama3_periods(64, 500_000.0, 32.0, 1.0, 4.0, 8192.0);
        assert_eq!(scaled[0], base[0]);
        assert_eq!(scaled[31], base[31] * 32.0);
        assert!(scaled.iter().zip(&base).all(|(s, b)| s >= b));
    }
}
