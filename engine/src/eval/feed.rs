//! Feeding tokens through a model in chunks, greedy decoding, and scoring a forced
//! continuation.

use mlx_rs::{Array, Dtype};

use crate::cache::KvCache;
use crate::decode::prompt_pieces;
use crate::error::ModelError;
use crate::model::Llama;
use crate::sampling::argmax_of;

use super::nll::target_log_probs;

/// Runs `tokens` through the model after what `caches` hold, as a session's prefill does
/// ([`prompt_pieces`]: `chunk` tokens per step, the last token alone), and returns the
/// logits of the last token (`[vocab]`, evaluated).
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
    let pieces: Vec<&[u32]> = prompt_pieces(tokens, chunk).collect();
    let (last, head) = pieces.split_last().expect("at least one chunk");
    for piece in head {
        model.forward(piece, caches)?.eval()?;
        crate::backend::release_freed_buffers();
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
    Ok(argmax_of(logits.as_slice::<f32>()))
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
        out.extend(target_log_probs(&logits, &[token])?);
        if i + 1 < tokens.len() {
            logits = decode_step(model, caches, token)?;
        }
    }
    Ok(out)
}
