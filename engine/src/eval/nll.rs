//! Next-token negative log-likelihoods over a window, for perplexity.

use std::ops::Range;

use mlx_rs::{ops::indexing::IndexOp, Array, Dtype};

use crate::cache::KvCache;
use crate::error::ModelError;
use crate::model::Llama;
use crate::tokenizer::Tokenizer;

/// Negative log-likelihoods (natural log) of `window[t]` given `window[..t]` for every
/// target index `t` in `scored`, in order.
///
/// The window runs through `caches` (fresh ones, for a fixed-window measurement) in
/// `chunk`-token steps, each evaluated before the next, so a KIVI cache quantizes between
/// chunks and the scored tokens read the quantized history as they would in use. Logits
/// are computed only for the positions that predict a scored token.
pub fn window_nll(
    model: &Llama,
    caches: &mut [Box<dyn KvCache>],
    window: &[u32],
    scored: Range<usize>,
    chunk: usize,
) -> Result<Vec<f32>, ModelError> {
    if scored.start == 0 || scored.end > window.len() || scored.is_empty() {
        return Err(ModelError::Input(format!(
            "scored targets {scored:?} must lie in 1..={} (the first token has no context)",
            window.len()
        )));
    }
    let chunk = chunk.max(1);
    // Position p predicts target p + 1.
    let positions = scored.start - 1..scored.end - 1;
    let mut nll = Vec::with_capacity(scored.len());
    for (i, piece) in window.chunks(chunk).enumerate() {
        let start = i * chunk;
        let hidden = model.forward(piece, caches)?;
        let lo = positions.start.max(start);
        let hi = positions.end.min(start + piece.len());
        if lo >= hi {
            hidden.eval()?;
            continue;
        }
        let rows = hidden.index((.., (lo - start) as i32..(hi - start) as i32, ..));
        let logits = model.logits(&rows)?;
        let log_probs = target_log_probs(&logits, &window[lo + 1..hi + 1])?;
        nll.extend(log_probs.into_iter().map(|lp| -lp));
    }
    Ok(nll)
}

/// A window of a text as llama.cpp's perplexity reads it: its first token replaced by the
/// BOS where the tokenizer adds one (a model trained with a BOS first attends to it, and a
/// window cut from the middle of a text would otherwise start with none).
pub fn measured_window(tokenizer: &Tokenizer, window: &[u32]) -> Vec<u32> {
    let mut window = window.to_vec();
    if let (Some(bos), Some(first)) = (tokenizer.prepended_bos(), window.first_mut()) {
        *first = bos;
    }
    window
}

/// Log-probabilities (natural log) of `targets[i]` under the `i`-th row of `logits`
/// (`[.., n, vocab]` with `n = targets.len()` rows), computed in float32.
pub(crate) fn target_log_probs(logits: &Array, targets: &[u32]) -> Result<Vec<f32>, ModelError> {
    let n = targets.len() as i32;
    let vocab = logits.shape().last().copied().unwrap_or(0);
    if targets.iter().any(|&t| t as i64 >= i64::from(vocab)) {
        return Err(ModelError::Input(format!(
            "a target is outside the vocabulary of {vocab} tokens"
        )));
    }
    let logits = logits.as_dtype(Dtype::Float32)?.reshape(&[1, n, vocab])?;
    let ids: Vec<i32> = targets.iter().map(|&t| t as i32).collect();
    let ids = Array::from_slice(&ids, &[1, n, 1]);
    let picked = logits.take_along_axis(&ids, -1)?.reshape(&[n])?;
    let lse = logits.logsumexp_axis(-1, false)?.reshape(&[n])?;
    let values = picked.subtract(&lse)?;
    values.eval()?;
    Ok(values.as_slice::<f32>().to_vec())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn target_log_probs_are_a_normalized_log_softmax() {
        let rows = [1.0f32, 2.0, 3.0, -40.0, 0.5, 0.5, 0.5, 1000.0];
        let logits = Array::from_slice(&rows, &[2, 4]);
        let lp = target_log_probs(&logits, &[2, 3]).unwrap();
        let expected = 3.0 - (1f64.exp() + 2f64.exp() + 3f64.exp() + (-40f64).exp()).ln();
        assert!((f64::from(lp[0]) - expected).abs() < 1e-5, "{lp:?}");
        // A row dominated by one logit gives it probability 1.
        assert!(lp[1].abs() < 1e-5, "{lp:?}");
        let total: f64 = (0..4)
            .map(|t| f64::from(target_log_probs(&logits.index(0), &[t]).unwrap()[0]).exp())
            .sum();
        assert!((total - 1.0).abs() < 1e-5, "{total}");
        assert!(target_log_probs(&logits, &[4, 0]).is_err());
    }
}
