//! How one decode call splits the cache among threads: spans of whole quantized groups,
//! and what each span gives back for the combined softmax.

use std::ops::Range;

/// Tokens (quantized and window) below which a span is not worth a thread of its own.
/// At 1024, a 2k-token cache ran on one thread: two spans took its calls from 0.24 to
/// 0.21-0.22 ms, and 1k-token calls from 0.13-0.18 to 0.08-0.12 ms (fastest of 300,
/// `decode_timing 1024 2048`, K4V4 with float16 storage).
const MIN_SPAN_TOKENS: usize = 512;

/// Tokens one thread attends: quantized tokens `tokens` (whole groups), and the residual
/// window if `residual`.
#[derive(Debug, Clone)]
pub(super) struct Span {
    pub(super) tokens: Range<usize>,
    pub(super) residual: bool,
}

/// One span's attention for `rep` query rows of one KV head: `out` (`[rep, Dv]`) is
/// `sum_n e^(s_n - max) v_n` and `sum` is `sum_n e^(s_n - max)`, per row.
pub(super) struct Partial {
    pub(super) out: Vec<f32>,
    pub(super) max: Vec<f32>,
    pub(super) sum: Vec<f32>,
}

/// The spans for `threads` threads: runs of whole groups of the quantized tokens, the
/// first also taking the residual window of `residual` tokens, sized so that each span
/// has about as many tokens in all (a window token costs about what a quantized one does).
/// A span left with nothing (the window alone outweighing a share) is dropped.
pub(super) fn spans(quantized: usize, residual: usize, group: usize, threads: usize) -> Vec<Span> {
    let groups = quantized / group;
    let count = threads.min((quantized + residual) / MIN_SPAN_TOKENS).max(1);
    // The window counted as groups of the first span.
    let window = residual.div_ceil(group);
    let bound = |i: usize| ((groups + window) * i / count).saturating_sub(window) * group;
    (0..count)
        .map(|i| Span {
            tokens: bound(i)..bound(i + 1),
            residual: i == 0,
        })
        .filter(|s| s.residual || !s.tokens.is_empty())
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn spans_cover_the_quantized_tokens_in_whole_groups() {
        assert_eq!(spans(0, 0, 32, 4).len(), 1);
        assert_eq!(spans(864, 128, 32, 4).len(), 1);
        // Nothing quantized: the window alone, not an empty second span.
        assert_eq!(spans(0, 1024, 32, 2).len(), 1);
        for (quantized, residual, group, threads) in [
            (4096, 128, 32, 2),
            (8192, 0, 128, 3),
            (5024, 32, 32, 8),
            (2048, 4096, 32, 2),
        ] {
            let spans = spans(quantized, residual, group, threads);
            assert_eq!(
                spans.len(),
                threads.min((quantized + residual) / MIN_SPAN_TOKENS)
            );
            assert_eq!(spans[0].tokens.start, 0);
            assert_eq!(spans.last().unwrap().tokens.end, quantized);
            for pair in spans.windows(2) {
                assert_eq!(pair[0].tokens.end, pair[1].tokens.start);
            }
            assert!(spans.iter().all(|s| s.tokens.start % group == 0));
            assert!(spans[0].residual && spans.iter().filter(|s| s.residual).count() == 1);
            // Balanced: the first span's window plus tokens match the others' tokens to
            // within a group (unless the window alone is more than a share).
            let share = (quantized + residual) / spans.len();
            for s in &spans[1..] {
                assert!(s.tokens.len().abs_diff(share) <= group || residual > share);
            }
        }
    }
}
