//! Decoding token by token after a prefill, as mlx-lm's `generate_step` runs it.
//!
//! The sampler picks each token on the device ([`crate::sampling`]), so a step reads back
//! one token id. On the MLX backends the step that feeds a token to the model is built on
//! the token's lazy array and handed to MLX (`async_eval`) *before* the token is read back:
//! the device computes step `n + 1` while the caller reads, detokenizes and reports token
//! `n`, and no step waits for the host. The host backend's kernels run on host values, so
//! there each token is read first and fed when the next one is asked for.
//!
//! A constrained answer ([`crate::grammar`]) is not pipelined: the mask of step `n + 1`
//! depends on token `n`, so each token is read and given to the parser before the next
//! step's logits are masked and sampled.
//!
//! So when the caller stops, the caches may hold one token more than it accepted (an
//! end-of-text token fed before it was read) or, on the host backend, one fewer (the last
//! accepted token, never fed): the caller compares the caches' length with its tokens and
//! cuts the longer back (`session::prefix::Slot::sync`).

use mlx_rs::{error::Exception, ops, transforms::async_eval, Array};

use crate::cache::KvCache;
use crate::error::ModelError;
use crate::grammar::Constraint;
use crate::model::Llama;
use crate::sampling::{Context, Sampler};

/// Token-by-token generation over one set of layer caches.
pub struct Decoder {
    sampler: Sampler,
    /// Build the next step before reading the current token (the MLX backends).
    pipelined: bool,
    /// The next token to hand out, sampled (maybe still being computed).
    pending: Option<Array>,
    /// A token handed out but not fed to the model yet (the host backend, and any
    /// constrained answer).
    unfed: Option<u32>,
    /// The format the answer must keep to.
    constraint: Option<Constraint>,
}

impl Decoder {
    /// Starts from `logits` (`[vocab]`, the prefill's last position) after the tokens
    /// `context` that the caches hold, for `model`; with a `constraint`, every token keeps
    /// to its format.
    pub fn new(
        model: &Llama,
        sampler: Sampler,
        logits: &Array,
        context: &[u32],
        constraint: Option<Constraint>,
    ) -> Result<Self, ModelError> {
        let mut decoder = Self {
            pipelined: model.pipelines() && constraint.is_none(),
            sampler,
            pending: None,
            unfed: None,
            constraint,
        };
        let first = decoder.sample(logits, Context::known(context))?;
        async_eval([&first])?;
        decoder.pending = Some(first);
        Ok(decoder)
    }

    /// A token from `logits`, masked by the constraint if there is one.
    fn sample(&mut self, logits: &Array, context: Context<'_>) -> Result<Array, ModelError> {
        let Some(constraint) = self.constraint.as_mut() else {
            return Ok(self.sampler.sample(logits, context)?);
        };
        let logits = logits.reshape(&[-1])?;
        let mask = constraint.mask(logits.dim(0) as usize)?;
        let masked = ops::add(&logits.as_dtype(mlx_rs::Dtype::Float32)?, &mask)?;
        Ok(self.sampler.sample(&masked, context)?)
    }

    /// The next token. `context` is every token the caches should hold before it (the
    /// prompt and the tokens handed out so far, which the caller appends as it accepts
    /// them). With `more`, the caller may ask for another token after this one, so the
    /// step feeding this one may be built now; without it, this is the last token and
    /// nothing is fed.
    pub fn next_token(
        &mut self,
        model: &Llama,
        caches: &mut [Box<dyn KvCache>],
        context: &[u32],
        more: bool,
    ) -> Result<u32, ModelError> {
        if let Some(token) = self.unfed.take() {
            let logits = step(model, &Array::from_slice(&[token], &[1]), caches)?;
            self.pending = Some(self.sample(&logits, Context::known(context))?);
        }
        let current = self
            .pending
            .take()
            .ok_or_else(|| ModelError::Input("the decoder has handed out its last token".into()))?;
        if more && self.pipelined {
            let logits = step(model, &current, caches)?;
            let next = self.sampler.sample(
                &logits,
                Context {
                    known: context,
                    pending: Some(&current),
                },
            )?;
            async_eval([&next])?;
            self.pending = Some(next);
        }
        let token = read_token(&current)?;
        if let Some(constraint) = self.constraint.as_mut() {
            constraint.commit(token)?;
        }
        if more && !self.pipelined {
            self.unfed = Some(token);
        }
        Ok(token)
    }
}

/// A step built ahead and never read is still being computed when the caller stops; it
/// is waited for here, so that no evaluation outlives the decoder. One left running at
/// process exit raced MLX's static destructors (a heap corruption in about one exit in
/// four, seen in `decode_loop`'s tests run one per process).
impl Drop for Decoder {
    fn drop(&mut self) {
        if let Some(pending) = self.pending.take() {
            // Nothing reads its value: an error here has no one left to report to.
            let _ = pending.eval();
        }
    }
}

/// One token through the model: the logits of what follows it, lazy.
fn step(
    model: &Llama,
    token: &Array,
    caches: &mut [Box<dyn KvCache>],
) -> Result<Array, ModelError> {
    let hidden = model.forward_ids(token, caches)?;
    model.last_logits(&hidden)
}

/// Waits for a sampled token and reads it.
fn read_token(token: &Array) -> Result<u32, Exception> {
    token.eval()?;
    Ok(token.as_slice::<u32>()[0])
}

/// How a prompt is fed before decoding: `chunk` tokens at a time over all but its last
/// token, then that token alone, as a decode step runs it. Why: a prompt met again (a
/// reused prefix, everything but the last token held) then gets the logits it got the
/// first time, although a backend's steps and chunks may round differently (the host's
/// steps give the weight products int8 inputs, its chunks float32). An empty prompt gives
/// no piece.
pub fn prompt_pieces(tokens: &[u32], chunk: usize) -> impl Iterator<Item = &[u32]> {
    let (body, last) = tokens.split_at(tokens.len().saturating_sub(1));
    body.chunks(chunk.max(1))
        .chain(std::iter::once(last).filter(|l| !l.is_empty()))
}

#[cfg(test)]
mod tests {
    use super::prompt_pieces;

    #[test]
    fn the_last_prompt_token_runs_alone() {
        let tokens: Vec<u32> = (0..10).collect();
        let lens = |chunk| {
            prompt_pieces(&tokens, chunk)
                .map(<[u32]>::len)
                .collect::<Vec<_>>()
        };
        assert_eq!(lens(4), [4, 4, 1, 1]);
        assert_eq!(lens(9), [9, 1]);
        assert_eq!(lens(256), [9, 1]);
        assert_eq!(lens(0), [1; 10]);
        assert_eq!(prompt_pieces(&[7], 4).collect::<Vec<_>>(), [&[7][..]]);
        assert_eq!(prompt_pieces(&[], 4).count(), 0);
        let joined: Vec<u32> = prompt_pieces(&tokens, 3).flatten().copied().collect();
        assert_eq!(joined, tokens);
    }
}
