//! Choosing the next token from the logits: greedy, or temperature sampling with top-k,
//! top-p (nucleus) and a repetition penalty, reproducible with a seed.
//!
//! The choice is made with MLX operations on the model's device and returns the token as
//! a lazy array: a decode step then reads back one token id instead of the whole
//! vocabulary's logits, and the next step's graph can be built on the token before it is
//! known (see [`crate::decode`]), as mlx-lm's `generate_step` does.

use mlx_rs::{
    error::Exception,
    ops::{
        self, argpartition,
        indexing::{argmax, IndexOp},
    },
    random::{categorical, RandomState},
    Array, Dtype,
};
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

    fn is_greedy(&self) -> bool {
        self.temperature <= 0.0 || self.top_k == 1
    }
}

/// The tokens before the one being chosen, for the repetition penalty: those already read
/// back (`known`, oldest first) and, when the previous token is still being computed on
/// the device, that token (`pending`, a one-element array).
#[derive(Clone, Copy)]
pub struct Context<'a> {
    /// Tokens read back so far.
    pub known: &'a [u32],
    /// The latest token, not read back yet.
    pub pending: Option<&'a Array>,
}

impl<'a> Context<'a> {
    /// Only tokens already read back.
    pub fn known(known: &'a [u32]) -> Self {
        Self {
            known,
            pending: None,
        }
    }
}

/// A token picker with its own random state.
pub struct Sampler {
    params: SamplingParams,
    random: Option<RandomState>,
}

impl Sampler {
    /// A sampler; with a seed it repeats its choices exactly.
    pub fn new(params: SamplingParams) -> Result<Self, Exception> {
        let random = if params.is_greedy() {
            None
        } else {
            let seed = params.seed.unwrap_or_else(|| {
                std::time::SystemTime::now()
                    .duration_since(std::time::UNIX_EPOCH)
                    .map_or(0, |d| d.as_nanos() as u64)
            });
            Some(RandomState::with_seed(seed)?)
        };
        Ok(Self { params, random })
    }

    /// The next token after `context` from `logits` (`[vocab]`, any float dtype, possibly
    /// not evaluated yet): a `[1]` uint32 array, lazy.
    pub fn sample(&mut self, logits: &Array, context: Context<'_>) -> Result<Array, Exception> {
        let p = &self.params;
        let mut logits = logits.reshape(&[-1])?.as_dtype(Dtype::Float32)?;
        if p.repetition_penalty != 1.0 && p.repetition_window > 0 {
            if let Some(seen) = recent(context, p.repetition_window)? {
                logits = penalize(&logits, &seen, p.repetition_penalty)?;
            }
        }
        let Some(random) = self.random.as_mut() else {
            return argmax(&logits, None)?.reshape(&[1]);
        };
        let key = random.next_key()?;
        let scaled = ops::divide(&logits, Array::from_f32(p.temperature))?;
        let vocab = scaled.dim(0);
        let top_k = (p.top_k > 0 && (p.top_k as i32) < vocab).then_some(p.top_k as i32);
        let token = if p.top_p < 1.0 {
            // Candidates sorted by likelihood; the top-k cut and the nucleus are prefixes.
            let order = ops::argsort(ops::negative(&scaled)?)?;
            let mut sorted = scaled.take_axis(&order, 0)?;
            if let Some(k) = top_k {
                let rank = Array::arange::<_, i32>(None, vocab, None)?;
                sorted = ops::select(&rank.lt(Array::from_int(k))?, &sorted, neg_inf())?;
            }
            let probs = ops::softmax(&sorted, true)?;
            // Keep each candidate whose predecessors' mass is still below top_p: the
            // smallest prefix reaching it.
            let before = ops::subtract(ops::cumsum(&probs, 0, None, None)?, &probs)?;
            let kept = ops::select(&before.lt(Array::from_f32(p.top_p))?, &sorted, neg_inf())?;
            let at = categorical(&kept, None, None, &key)?;
            order.take_axis(at.reshape(&[1])?, 0)?
        } else if let Some(k) = top_k {
            let best = argpartition(ops::negative(&scaled)?, k - 1)?.index(..k);
            let at = categorical(scaled.take_axis(&best, 0)?, None, None, &key)?;
            best.take_axis(at.reshape(&[1])?, 0)?
        } else {
            categorical(&scaled, None, None, &key)?.reshape(&[1])?
        };
        token.as_dtype(Dtype::Uint32)
    }
}

fn neg_inf() -> Array {
    Array::from_f32(f32::NEG_INFINITY)
}

/// The latest `window` tokens of `context` as an int32 array, `None` when there are none.
fn recent(context: Context<'_>, window: usize) -> Result<Option<Array>, Exception> {
    let from_known = window - usize::from(context.pending.is_some());
    let known = &context.known[context.known.len().saturating_sub(from_known)..];
    let known = (!known.is_empty())
        .then(|| Array::from_slice(known, &[known.len() as i32]).as_dtype(Dtype::Int32))
        .transpose()?;
    let pending = context
        .pending
        .map(|p| p.reshape(&[-1])?.as_dtype(Dtype::Int32))
        .transpose()?;
    Ok(match (known, pending) {
        (Some(k), Some(p)) => Some(ops::concatenate(&[k, p], 0)?),
        (one, other) => one.or(other),
    })
}

/// Positive logits of the `seen` tokens divided by `penalty`, negative ones multiplied. A
/// token seen twice gets the same new value twice, so repeats need no deduplication.
fn penalize(logits: &Array, seen: &Array, penalty: f32) -> Result<Array, Exception> {
    let old = logits.take_axis(seen, 0)?;
    let new = ops::select(
        &old.gt(Array::from_f32(0.0))?,
        ops::divide(&old, Array::from_f32(penalty))?,
        ops::multiply(&old, Array::from_f32(penalty))?,
    )?;
    logits.put_along_axis(seen, &new, 0)
}

/// Index of the largest value (the first one on ties), for logits already on the host.
pub fn argmax_of(values: &[f32]) -> u32 {
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

    /// Draws one token from host logits with only `known` context.
    fn draw(s: &mut Sampler, logits: &[f32], known: &[u32]) -> u32 {
        let logits = Array::from_slice(logits, &[logits.len() as i32]);
        let token = s.sample(&logits, Context::known(known)).unwrap();
        token.eval().unwrap();
        assert_eq!((token.shape(), token.dtype()), (&[1][..], Dtype::Uint32));
        token.as_slice::<u32>()[0]
    }

    #[test]
    fn greedy_picks_the_largest_logit_first_on_ties() {
        let mut s = Sampler::new(SamplingParams::greedy()).unwrap();
        assert_eq!(draw(&mut s, &[0.1, 3.0, -1.0, 2.9], &[]), 1);
        assert_eq!(draw(&mut s, &[0.1, 3.0, -1.0, 3.0], &[]), 1);
        assert_eq!(argmax_of(&[0.1, 3.0, -1.0, 3.0]), 1);
    }

    #[test]
    fn repetition_penalty_demotes_recent_tokens_only() {
        let mut p = SamplingParams::greedy();
        p.repetition_penalty = 1.5;
        p.repetition_window = 2;
        let mut s = Sampler::new(p).unwrap();
        // 3.0 / 1.5 = 2.0 < 2.9: token 1 loses to token 3.
        assert_eq!(draw(&mut s, &[0.1, 3.0, -1.0, 2.9], &[1]), 3);
        // Seen twice: penalized once.
        assert_eq!(draw(&mut s, &[0.1, 3.0, -1.0, 1.9], &[1, 1]), 1);
        // Token 1 is outside the window of the 2 latest tokens.
        assert_eq!(draw(&mut s, &[0.1, 3.0, -1.0, 2.9], &[1, 0, 2]), 1);
        // Negative logits are multiplied, pushing them further down.
        assert_eq!(draw(&mut s, &[-1.0, -1.2, -5.0], &[0]), 1);
        // A token still being computed counts as the latest one.
        let logits = Array::from_slice(&[0.1f32, 3.0, -1.0, 2.9], &[4]);
        let pending = Array::from_slice(&[1u32], &[1]);
        let context = Context {
            known: &[0, 2],
            pending: Some(&pending),
        };
        let token = s.sample(&logits, context).unwrap();
        token.eval().unwrap();
        assert_eq!(token.as_slice::<u32>(), &[3]);
    }

    #[test]
    fn same_seed_same_choices_and_top_k_one_is_greedy() {
        let logits: Vec<f32> = (0..50).map(|i| ((i * 7919) % 13) as f32 * 0.3).collect();
        let draws = |seed| {
            let mut p = params(1.0);
            p.seed = Some(seed);
            let mut s = Sampler::new(p).unwrap();
            (0..20)
                .map(|_| draw(&mut s, &logits, &[]))
                .collect::<Vec<_>>()
        };
        assert_eq!(draws(1), draws(1));
        assert_ne!(draws(1), draws(2));
        let mut p = params(5.0);
        p.top_k = 1;
        let mut s = Sampler::new(p).unwrap();
        assert_eq!(draw(&mut s, &logits, &[]), argmax_of(&logits));
    }

    fn frequencies(p: SamplingParams, logits: &[f32], n: usize) -> Vec<f64> {
        let mut s = Sampler::new(p).unwrap();
        let mut counts = vec![0usize; logits.len()];
        for _ in 0..n {
            counts[draw(&mut s, logits, &[]) as usize] += 1;
        }
        counts.iter().map(|&c| c as f64 / n as f64).collect()
    }

    #[test]
    fn temperature_sampling_follows_the_softmax() {
        let logits = [0.0f32, (2.0f32).ln(), (7.0f32).ln()]; // probabilities 1:2:7
        let got = frequencies(params(1.0), &logits, 4000);
        for (got, want) in got.iter().zip([0.1, 0.2, 0.7]) {
            assert!((got - want).abs() < 0.03, "{got} vs {want}");
        }
        // Temperature 2 flattens: probabilities proportional to sqrt(1:2:7).
        let got = frequencies(params(2.0), &logits, 4000);
        let roots = [1.0f64, 2f64.sqrt(), 7f64.sqrt()];
        let total: f64 = roots.iter().sum();
        for (got, root) in got.iter().zip(roots) {
            assert!(
                (got - root / total).abs() < 0.03,
                "{got} vs {}",
                root / total
            );
        }
    }

    #[test]
    fn top_k_and_top_p_cut_the_tail() {
        let logits = [0.0f32, (2.0f32).ln(), (7.0f32).ln()];
        let mut p = params(1.0);
        p.top_k = 2;
        let got = frequencies(p, &logits, 1000);
        assert_eq!(got[0], 0.0);
        assert!((got[1] - 2.0 / 9.0).abs() < 0.05, "{got:?}");
        // 0.7 alone reaches top_p = 0.6: only the best token remains.
        let mut p = params(1.0);
        p.top_p = 0.6;
        assert_eq!(frequencies(p, &logits, 300), vec![0.0, 0.0, 1.0]);
        // 0.7 + 0.2 reaches 0.85: the worst token never comes.
        let mut p = params(1.0);
        p.top_p = 0.85;
        let got = frequencies(p, &logits, 1000);
        assert!(got[1] > 0.1 && got[0] == 0.0, "{got:?}");
        // Both: top-k first, then the nucleus of what is left (2/9 vs 7/9: 0.7 < 0.75).
        let mut p = params(1.0);
        p.top_k = 2;
        p.top_p = 0.75;
        assert_eq!(frequencies(p, &logits, 300), vec![0.0, 0.0, 1.0]);
    }
}
