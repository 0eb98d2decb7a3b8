//! Feeding tokens through a model in chunks, greedy decoding, and scoring a forced
//! continuation.

use mlx_rs::{Array, Dtype};

use crate::cache::KvCache;
use crate::error::ModelError;
use crate::model::Llama;
use crate::sampling::argmax;

/// Runs `tokens` through the model after what `caches` hold, `chunk` tokens per step,
/// and returns the logits of the last token (`[vocab]`, evaluated).
///
/// Each step is evaluated before the next one starts, as in a session's prefill: a KIVI
/// cache then quantizes its oldest groups between chunks, so later chunks read the
/// quantized history exactly as they would in use.
pub fn prefill(
    model: &Llama,
    caches: &mut [Box<dyn KvCache>],
    tokens: &[u32],
    chunk: usize,
) -> Result<Array, ModelError> {
    if tokens.is_empty() {
        return Err(ModelError::Input("no tokens to prefill".into()));
    }
    let pieces: Vec<&[u32]> = tokens.chunks(chunk.max(1)).collect();
    let (last, head) = pieces.split_last().expect("at least one chunk");
    for piece in head {
        model.forward(piece, caches)?.eval()?;
    }
    let hidden = model.forward(last, caches)?;
    let logits = model.last_logits(&hidden)?;
    logits.eval()?;
    Ok(logits)
}

/// The most likely next token of `[vocab]` logits (the first one on ties).
pub fn greedy_token(logits: &Array) -> Result<u32, ModelError> {
    let logits = if logits.dtype() == Dtype::Float32 {
        logits.clone()
    } else {
        logits.as_dtype(Dtype::Float32)?
    };
    logits.eval()?;
    Ok(argmax(logits.as_slice::<f32>()))
}

/// Runs one token and returns the logits of what follows it (`[vocab]`, evaluated).
pub fn decode_step(
    model: &Llama,
    caches: &mut [Box<dyn KvCache>],
    token: u32,
) -> Result<Array, ModelError> {
    let hidden = model.forward(&[token], caches)?;
    let logits = model.last_logits(&hidden)?;
    logits.eval()?;
    Ok(logits)
}

/// Log-probabilities (natural log) of `tokens` fed one by one after the state whose
/// next-token logits are `logits` (teacher forcing): entry `i` is the log-probability of
/// `tokens[i]` given everything before it. Every token but the last ends up in `caches`.
pub fn forced_log_probs(
    model: &Llama,
    caches: &mut [Box<dyn KvCache>],
    mut logits: Array,
    tokens: &[u32],
) -> Result<Vec<f32>, ModelError> {
    let mut out = Vec::with_capacity(tokens.len());
    for (i, &token) in tokens.iter().enumerate() {
        let row = logits.as_dtype(Dtype::Float32)?;
        row.eval()?;
        out.push(log_prob(row.as_slice::<f32>(), token).ok_or_else(|| {
            ModelError::Input(format!("token {token} is outside the vocabulary"))
        })?);
        if i + 1 < tokens.len() {
            logits = decode_step(model, caches, token)?;
        }
    }
    Ok(out)
}

/// Natural log of the softmax probability of `token` in `logits`, summed in f64 so that
/// a 49k-entry vocabulary does not lose the small terms.
fn log_prob(logits: &[f32], token: u32) -> Option<f32> {
    let picked = *logits.get(token as usize)? as f64;
    let max = logits.iter().copied().fold(f32::NEG_INFINITY, f32::max) as f64;
    let sum: f64 = logits.iter().map(|&x| (x as f64 - max).exp()).sum();
    Some((picked - max - sum.ln()) as f32)
}

#[cfg(test)]
mod tests {
    use super::log_prob;

    #[test]
    fn log_probs_are_a_normalized_log_softmax() {
        let logits = [1.0f32, 2.0, 3.0, -40.0];
        let total: f64 = (0..4)
            .map(|t| (log_prob(&logits, t).unwrap() as f64).exp())
            .sum();
        assert!((total - 1.0).abs() < 1e-6, "{total}");
        let expected = 3.0 - (1f64.exp() + 2f64.exp() + 3f64.exp() + (-40f64).exp()).ln();
        assert!((log_prob(&logits, 2).unwrap() as f64 - expected).abs() < 1e-6);
        // Shifting every logit changes nothing.
        let shifted = logits.map(|x| x + 1000.0);
        assert!((log_prob(&shifted, 0).unwrap() - log_prob(&logits, 0).unwrap()).abs() < 1e-4);
        assert_eq!(log_prob(&logits, 4), None);
    }
}
