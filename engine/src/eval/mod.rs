//! Measurement helpers for `kivi bench`, `kivi ppl` and `kivi needle`: running a token
//! stream through a model and its KV caches in fixed chunks, scoring next-token
//! log-likelihoods, and greedy decoding, without the session machinery (no prefix reuse,
//! no events) so that what is timed or scored is the model and the cache alone.

mod feed;
mod nll;

pub use feed::{decode_step, forced_log_probs, greedy_token, prefill};
pub use nll::{measured_window, window_nll};
