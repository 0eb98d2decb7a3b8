//! Perplexity over fixed windows, each on fresh caches, fed in chunks.

use std::time::Instant;

use anyhow::{bail, Result};
use kivi_engine::cache::CacheConfig;
use kivi_engine::eval::{measured_window, window_nll};
use kivi_engine::loader::LoadedModel;
use serde::{Deserialize, Serialize};

/// How windows are cut and scored.
#[derive(Debug, Clone, Copy, Serialize, Deserialize)]
pub struct WindowPlan {
    /// Tokens per window.
    pub window: usize,
    /// Tokens between window starts.
    pub stride: usize,
    /// Last tokens of each window that are scored.
    pub scored: usize,
    /// Tokens per forward step.
    pub chunk: usize,
    /// Token offset of the first window.
    pub offset: usize,
}

impl WindowPlan {
    /// Checks the plan makes sense.
    pub fn validate(&self) -> Result<()> {
        if self.window < 2 || self.stride == 0 || self.chunk == 0 {
            bail!("--window must be at least 2 and --stride, --chunk positive");
        }
        if self.scored == 0 || self.scored >= self.window {
            bail!(
                "--scored must be between 1 and --window - 1 ({}), not {}",
                self.window - 1,
                self.scored
            );
        }
        Ok(())
    }

    /// Tokens needed for `count` windows.
    pub fn tokens_for(&self, count: usize) -> usize {
        self.offset + (count.max(1) - 1) * self.stride + self.window
    }

    /// Window start offsets that fit in `total` tokens, at most `limit` of them.
    pub fn starts(&self, total: usize, limit: Option<usize>) -> Vec<usize> {
        (0..)
            .map(|i| self.offset + i * self.stride)
            .take_while(|s| s + self.window <= total)
            .take(limit.unwrap_or(usize::MAX))
            .collect()
    }
}

/// One configuration's perplexity on one text.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct PplResult {
    /// Short name (`full`, `k2v2-g32-r128`, ...).
    pub config: String,
    /// The settings.
    pub cache: CacheConfig,
    /// `exp` of the mean negative log-likelihood over every scored token.
    pub perplexity: f64,
    /// Mean negative log-likelihood (nats per token).
    pub mean_nll: f64,
    /// Perplexity change against the full-precision cache, in percent (when measured).
    pub delta_percent: Option<f64>,
    /// Each window's perplexity, in window order.
    pub window_perplexity: Vec<f64>,
    /// Tokens scored in all.
    pub tokens_scored: usize,
    /// Wall time of this configuration.
    pub seconds: f64,
}

/// Every configuration on one text.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct TextPpl {
    /// Text name (file stem).
    pub text: String,
    /// Tokens the text was cut from (only as many as the windows need are tokenized).
    pub tokens_available: usize,
    /// Window start offsets.
    pub window_starts: Vec<usize>,
    /// One entry per configuration, in the order asked.
    pub results: Vec<PplResult>,
}

/// Runs every configuration over the same windows of `tokens`; `progress` is told about
/// each finished window.
pub fn run_text(
    loaded: &LoadedModel,
    name: &str,
    tokens: &[u32],
    plan: &WindowPlan,
    limit: Option<usize>,
    configs: &[CacheConfig],
    mut progress: impl FnMut(&CacheConfig, usize, usize, f64),
) -> Result<TextPpl> {
    let starts = plan.starts(tokens.len(), limit);
    if starts.is_empty() {
        bail!(
            "{name} has {} tokens, fewer than one window of {} after offset {}",
            tokens.len(),
            plan.window,
            plan.offset
        );
    }
    let scored = plan.window - plan.scored..plan.window;
    let mut results = Vec::new();
    for config in configs {
        let began = Instant::now();
        let (mut sum, mut count) = (0f64, 0usize);
        let mut window_perplexity = Vec::new();
        for (i, &start) in starts.iter().enumerate() {
            let window = measured_window(&loaded.tokenizer, &tokens[start..start + plan.window]);
            let mut caches = config.make_layers(loaded.model.config(), loaded.model.backend());
            let nll = window_nll(
                &loaded.model,
                &mut caches,
                &window,
                scored.clone(),
                plan.chunk,
            )?;
            let window_sum: f64 = nll.iter().map(|&v| f64::from(v)).sum();
            if !window_sum.is_finite() {
                bail!("{config} produced a non-finite log-likelihood in window {i}");
            }
            let ppl = (window_sum / nll.len() as f64).exp();
            window_perplexity.push(ppl);
            sum += window_sum;
            count += nll.len();
            progress(config, i, starts.len(), ppl);
        }
        let mean_nll = sum / count as f64;
        results.push(PplResult {
            config: config.to_string(),
            cache: *config,
            perplexity: mean_nll.exp(),
            mean_nll,
            delta_percent: None,
            window_perplexity,
            tokens_scored: count,
            seconds: began.elapsed().as_secs_f64(),
        });
    }
    if let Some(full) = results
        .iter()
        .find(|r| r.cache == CacheConfig::Full)
        .map(|r| r.perplexity)
    {
        for r in &mut results {
            r.delta_percent = Some((r.perplexity / full - 1.0) * 100.0);
        }
    }
    Ok(TextPpl {
        text: name.to_string(),
        tokens_available: tokens.len(),
        window_starts: starts,
        results,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn windows_fit_the_text() {
        let plan = WindowPlan {
            window: 2048,
            stride: 1024,
            scored: 1024,
            chunk: 128,
            offset: 0,
        };
        assert!(plan.validate().is_ok());
        assert_eq!(plan.starts(5000, None), vec![0, 1024, 2048]);
        assert_eq!(plan.starts(5000, Some(2)), vec![0, 1024]);
        assert!(plan.starts(2000, None).is_empty());
        assert_eq!(plan.tokens_for(4), 3 * 1024 + 2048);
        let bad = WindowPlan {
            scored: 2048,
            ..plan
        };
        assert!(bad.validate().is_err());
    }
}
