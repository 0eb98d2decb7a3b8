//! Choosing the next token from the logits: greedy, or temperature sampling with top-k,
//! top-p (nucleus) and a repetition penalty, reproducible with a seed.

use rand::{rngs::StdRng, Rng, SeedableRng};
use serde::{Deserialize, Serialize};

/// How to pick tokens.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct SamplingParams {
    /// Softmax temperature; 0 picks the most likely token (greedy).
    pub temperature: f32,
    /// Keep the smallest set of tokens whose probabilities add up to `top_p` (1 = off).
    pub top_p: f32,
    /// Keep the `top_k` most likely tokens (0 = off).
    pub top_k: usize,
    /// Divide positive logits (multiply negative ones) of recently seen tokens by this
    /// (1 = off), as in the CTRL paper and `transformers`.
    pub repetition_penalty: f32,
    /// How many of the latest tokens the repetition penalty looks at.
    pub repetition_window: usize,
    /// Seed of the random generator; `None` seeds from the clock.
    pub seed: Option<u64>,
}

impl Default for SamplingParams {
    fn default() -> Self {
        Self {
            temperature: 0.0,
            top_p: 1.0,
            top_k: 0,
            repetition_penalty: 1.0,
            repetition_window: 64,
            seed: None,
        }
    }
}

impl SamplingParams {
    /// Always the most likely token.
    pub fn greedy() -> Self {
        Self::default()
    }
}

/// A token picker with its own random state.
pub struct Sampler {
    params: SamplingParams,
    rng: StdRng,
}

impl Sampler {
    /// A sampler; with a seed it repeats its choices exactly.
    pub fn new(params: SamplingParams) -> Self {
        let seed = params.seed.unwrap_or_else(|| {
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(0, |d| d.as_nanos() as u64)
        });
        Self {
            params,
            rng: StdRng::seed_from_u64(seed),
        }
    }

    /// Picks the next token from `logits` (one per vocabulary entry), given the tokens
    /// seen so far (`context`, oldest first) for the repetition penalty.
    pub fn sample(&mut self, logits: &[f32], context: &[u32]) -> u32 {
        let mut logits = logits.to_vec();
        let p = &self.params;
        if p.repetition_penalty != 1.0 {
            let start = context.len().saturating_sub(p.repetition_window);
            let mut seen: Vec<u32> = context[start..].to_vec();
            seen.sort_unstable();
            seen.dedup();
            for id in seen {
                if let Some(l) = logits.get_mut(id as usize) {
                    *l = if *l > 0.0 {
                        *l / p.repetition_penalty
                    } else {
                        *l * p.repetition_penalty
                    };
                }
            }
        }
        if p.temperature <= 0.0 || p.top_k == 1 {
            return argmax(&logits);
        }
        // Candidates, most likely first.
        let mut order: Vec<u32> = (0..logits.len() as u32).collect();
        let by_logit = |a: &u32, b: &u32| logits[*b as usize].total_cmp(&logits[*a as usize]);
        if p.top_k > 0 && p.top_k < order.len() {
            order.select_nth_unstable_by(p.top_k - 1, by_logit);
            order.truncate(p.top_k);
        }
        order.sort_unstable_by(by_logit);
        let max = logits[order[0] as usize];
        let mut probs: Vec<f32> = order
            .iter()
            .map(|&i| ((logits[i as usize] - max) / p.temperature).exp())
            .collect();
        let total: f32 = probs.iter().sum();
        probs.iter_mut().for_each(|q| *q /= total);
        if p.top_p < 1.0 {
            let mut cumulative = 0.0;
            let keep = probs
                .iter()
                .position(|q| {
                    cumulative += q;
                    cumulative >= p.top_p
                })
                .map_or(probs.len(), |i| i + 1);
            probs.truncate(keep);
            order.truncate(keep);
        }
        let total: f32 = probs.iter().sum();
        let mut r = self.rng.random::<f32>() * total;
        for (q, &id) in probs.iter().zip(&order) {
            if r < *q {
                return id;
            }
            r -= q;
        }
        *order.last().expect("at least one candidate")
    }
}

/// Index of the largest value (the first one on ties).
pub fn argmax(values: &[f32]) -> u32 {
    let mut best = 0;
    for (i, v) in values.iter().enumerate() {
        if *v > values[best] {
            best = i;
        }
    }
    best as u32
}

#[cfg(test)]
mod tests {
    use super::*;

    fn params(temperature: f32) -> SamplingParams {
        SamplingParams {
            temperature,
            seed: Some(7),
            ..SamplingParams::default()
        }
    }

    #[test]
    fn greedy_picks_the_largest_logit() {
        let mut s = Sampler::new(SamplingParams::greedy());
        assert_eq!(s.sample(&[0.1, 3.0, -1.0, 2.9], &[]), 1);
    }

    #[test]
    fn repetition_penalty_demotes_recent_tokens_only() {
        let mut p = SamplingParams::greedy();
        p.repetition_penalty = 1.5;
        p.repetition_window = 2;
        let mut s = Sampler::new(p);
        // 3.0 / 1.5 = 2.0 < 2.9: token 1 loses to token 3.
        assert_eq!(s.sample(&[0.1, 3.0, -1.0, 2.9], &[1]), 3);
        // Token 1 is outside the window of the 2 latest tokens.
        assert_eq!(s.sample(&[0.1, 3.0, -1.0, 2.9], &[1, 0, 2]), 1);
        // Negative logits are multiplied, pushing them further down.
        assert_eq!(s.sample(&[-1.0, -1.2, -5.0], &[0]), 1);
    }

    #[test]
    fn same_seed_same_choices_and_top_k_one_is_greedy() {
        let logits: Vec<f32> = (0..50).map(|i| ((i * 7919) % 13) as f32 * 0.3).collect();
        let draw = |seed| {
            let mut p = params(1.0);
            p.seed = Some(seed);
            let mut s = Sampler::new(p);
            (0..20).map(|_| s.sample(&logits, &[])).collect::<Vec<_>>()
        };
        assert_eq!(draw(1), draw(1));
        assert_ne!(draw(1), draw(2));
        let mut p = params(5.0);
        p.top_k = 1;
        assert_eq!(Sampler::new(p).sample(&logits, &[]), argmax(&logits));
    }

    #[test]
    fn temperature_sampling_follows_the_softmax() {
        let logits = [0.0f32, (2.0f32).ln(), (7.0f32).ln()]; // probabilities 1:2:7
        let mut s = Sampler::new(params(1.0));
        let mut counts = [0usize; 3];
        let n = 20_000;
        for _ in 0..n {
            counts[s.sample(&logits, &[]) as usize] += 1;
        }
        for (count, want) in counts.iter().zip([0.1, 0.2, 0.7]) {
            let got = *count as f64 / n as f64;
            assert!((got - want).abs() < 0.02, "{counts:?}");
        }
    }

    #[test]
    fn top_k_and_top_p_cut_the_tail() {
        let logits = [0.0f32, (2.0f32).ln(), (7.0f32).ln()];
        let mut p = params(1.0);
        p.top_k = 2;
        let mut s = Sampler::new(p);
        assert!((0..500).all(|_| s.sample(&logits, &[]) != 0));
        // 0.7 alone reaches top_p = 0.6: only the best token remains.
        let mut p = params(1.0);
        p.top_p = 0.6;
        let mut s = Sampler::new(p);
        assert!((0..500).all(|_| s.sample(&logits, &[]) == 2));
        // 0.7 + 0.2 reaches 0.85: the worst token never comes.
        let mut p = params(1.0);
        p.top_p = 0.85;
        let mut s = Sampler::new(p);
        let picks: Vec<u32> = (0..2000).map(|_| s.sample(&logits, &[])).collect();
        assert!(picks.contains(&1) && !picks.contains(&0));
    }
}
