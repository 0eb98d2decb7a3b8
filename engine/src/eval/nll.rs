//! Next-token negative log-likelihoods over a window, for perplexity.

use std::ops::Range;

use mlx_rs::{ops::indexing::IndexOp, Array, Dtype};

use crate::cache::KvCache;
use crate::error::ModelError;
use crate::model::Llama;

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
        let logits = model.logits(&rows)?.as_dtype(Dtype::Float32)?;
        let n = (hi - lo) as i32;
        let targets: Vec<i32> = window[lo + 1..hi + 1].iter().map(|&t| t as i32).collect();
        let targets = Array::from_slice(&targets, &[1, n, 1]);
        let picked = logits.take_along_axis(&targets, -1)?.reshape(&[n])?;
        let lse = logits.logsumexp_axis(-1, false)?.reshape(&[n])?;
        let values = lse.subtract(&picked)?;
        values.eval()?;
        nll.extend_from_slice(values.as_slice::<f32>());
    }
    Ok(nll)
}
