//! Rotary position embeddings, with the scalings Llama-family checkpoints use.

use mlx_rs::{fast, Array};

use super::config::{RopeConfig, RopeScaling};

/// RoPE over the full head dimension, applied through MLX's fused kernel.
pub struct Rope {
    dims: i32,
    traditional: bool,
    base: Option<f32>,
    scale: f32,
    /// Per-pair periods (`base^(2i/d)`, scaled), when the scaling is not uniform.
    periods: Option<Array>,
    /// The same periods for every scaling, for [`Rope::apply_host`]: the angle of pair `i`
    /// at position `p` is `p * scale / host_periods[i]`.
    host_periods: Vec<f32>,
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

    /// Rotates `x` (`[B, heads, L, D]`) whose first position is `offset`.
    pub fn apply(&self, x: &Array, offset: usize) -> Result<Array, mlx_rs::error::Exception> {
        fast::rope(
            x,
            self.dims,
            self.traditional,
            self.base,
            self.scale,
            offset as i32,
            self.periods.as_ref(),
        )
    }
}

impl Rope {
    /// [`Rope::apply`] on host memory for one position: `x` is `[heads, D]` row-major,
    /// rotated in place. Angles are computed in float64.
    pub fn apply_host(&self, x: &mut [f32], position: usize) {
        let d = self.dims as usize;
        let half = d / 2;
        let turns: Vec<(f64, f64)> = self
            .host_periods
            .iter()
            .map(|&period| (position as f64 * f64::from(self.scale) / f64::from(period)).sin_cos())
            .collect();
        for head in x.chunks_exact_mut(d) {
            for (i, &(sin, cos)) in turns.iter().enumerate() {
                // GGUF Llama rows pair neighbours; Hugging Face rows pair the two halves.
                let (a, b) = if self.traditional {
                    (2 * i, 2 * i + 1)
                } else {
                    (i, i + half)
                };
                let (x1, x2) = (f64::from(head[a]), f64::from(head[b]));
                head[a] = (x1 * cos - x2 * sin) as f32;
                head[b] = (x1 * sin + x2 * cos) as f32;
            }
        }
    }
}

/// `base^(2i/d)` for each rotated pair: the wavelength over 2π of pair `i`.
fn base_periods(head_dim: usize, theta: f32) -> Vec<f32> {
    (0..head_dim / 2)
        .map(|i| theta.powf(2.0 * i as f32 / head_dim as f32))
        .collect()
}

/// Llama 3.1's scaling: long wavelengths are stretched by `factor`, short ones kept, and
/// the band in between interpolated (as in the reference `apply_scaling`).
fn llama3_periods(
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

    fn values(a: &Array) -> Vec<f32> {
        a.eval().unwrap();
        a.as_slice::<f32>().to_vec()
    }

    /// Rotates one head by hand: pair `i` is (x[i], x[i + D/2]) in the Hugging Face layout.
    fn rotate_by_hand(x: &[f32], pos: usize, periods: &[f32]) -> Vec<f32> {
        let half = x.len() / 2;
        let mut out = x.to_vec();
        for i in 0..half {
            let angle = pos as f32 / periods[i];
            let (s, c) = angle.sin_cos();
            out[i] = x[i] * c - x[i + half] * s;
            out[i + half] = x[i] * s + x[i + half] * c;
        }
        out
    }

    #[test]
    fn plain_and_llama3_rope_match_hand_rotation() {
        let d = 8usize;
        let x: Vec<f32> = (0..d).map(|i| 0.3 * i as f32 - 1.0).collect();
        let array = Array::from_slice(&x, &[1, 1, 1, d as i32]);
        let configs = [
            RopeScaling::None,
            RopeScaling::Llama3 {
                factor: 8.0,
                low_freq_factor: 1.0,
                high_freq_factor: 4.0,
                original_max_position_embeddings: 64.0,
            },
        ];
        for scaling in configs {
            let config = RopeConfig {
                theta: 10_000.0,
                scaling: scaling.clone(),
                traditional: false,
            };
            let periods = match &scaling {
                RopeScaling::None => base_periods(d, 10_000.0),
                _ => llama3_periods(d, 10_000.0, 8.0, 1.0, 4.0, 64.0),
            };
            let rope = Rope::new(&config, d);
            for pos in [0usize, 3, 1000] {
                let got = values(&rope.apply(&array, pos).unwrap());
                let want = rotate_by_hand(&x, pos, &periods);
                for (g, w) in got.iter().zip(&want) {
                    assert!(
                        (g - w).abs() < 1e-3,
                        "{scaling:?} pos {pos}: {got:?} vs {want:?}"
                    );
                }
            }
        }
    }

    #[test]
    fn llama3_scaling_keeps_high_frequencies_and_stretches_low_ones() {
        let base = base_periods(64, 500_000.0);
        let scaled = llama3_periods(64, 500_000.0, 32.0, 1.0, 4.0, 8192.0);
        assert_eq!(scaled[0], base[0]);
        assert_eq!(scaled[31], base[31] * 32.0);
        assert!(scaled.iter().zip(&base).all(|(s, b)| s >= b));
    }
}
