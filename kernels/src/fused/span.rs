//! How one decode call splits the cache among threads: spans of whole quantized groups
//! and of window tokens, and what each span gives back for the combined softmax.

use std::ops::Range;

/// Tokens (quantized and window) below which a span is not worth a thread of its own.
/// Through rayon it was 512. With the team's hand-off ([`crate::host::team`]), two spans
/// of a 512-token cache cut a SmolLM2 decode step's attention from 3.2-3.4 ms to 2.3-3.0
/// (K2V2) and from 4.0-4.3 to 2.1-2.5 (full cache), and the step by 1.05-1.2x
/// (`decode_step`, three alternated runs, two threads).
const MIN_SPAN_TOKENS: usize = 128;

/// Tokens one thread attends: quantized tokens `tokens` (whole groups) and window tokens
/// `window` (counted from the window's first token).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct Span {
    pub(super) tokens: Range<usize>,
    pub(super) window: Range<usize>,
}

/// One span's attention for `rep` query rows of one KV head: `out` (`[rep, Dv]`) is
/// `sum_n e^(s_n - max) v_n` and `sum` is `sum_n e^(s_n - max)`, per row.
pub(super) struct Partial {
    pub(super) out: Vec<f32>,
    pub(super) max: Vec<f32>,
    pub(super) sum: Vec<f32>,
}

/// The spans for `threads` threads: the `quantized` tokens, then the `window` tokens, cut
/// into runs of about equal length (a window token costs about what a quantized one
/// does), with the cuts inside the quantized tokens on whole groups. A full-precision
/// cache is all window, and its tokens are shared out like a KIVI cache's.
pub(super) fn spans(quantized: usize, window: usize, group: usize, threads: usize) -> Vec<Span> {
    let total = quantized + window;
    let count = threads.min(total / MIN_SPAN_TOKENS).max(1);
    let bound = |i: usize| {
        let at = total * i / count;
        if at < quantized {
            at / group * group
        } else {
            at
        }
    };
    (0..count)
        .map(|i| {
            let (from, to) = (bound(i), bound(i + 1));
            Span {
                tokens: from.min(quantized)..to.min(quantized),
                window: from.max(quantized) - quantized..to.max(quantized) - quantized,
            }
        })
        .enumerate()
        .filter(|(i, s)| *i == 0 || !s.tokens.is_empty() || !s.window.is_empty())
        .map(|(_, s)| s)
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn spans_cover_the_quantized_tokens_in_whole_groups_then_the_window() {
        assert_eq!(
            spans(0, 0, 32, 4),
            [Span {
                tokens: 0..0,
                window: 0..0
            }]
        );
        assert_eq!(spans(192, 32, 32, 4).len(), 1);
        // Nothing quantized: the window shared out (a full-precision cache).
        assert_eq!(
            spans(0, 1024, 32, 2),
            [
                Span {
                    tokens: 0..0,
                    window: 0..512
                },
                Span {
                    tokens: 0..0,
                    window: 512..1024
                }
            ]
        );
        for (quantized, window, group, threads) in [
            (4096, 128, 32, 2),
            (8192, 0, 128, 3),
            (5024, 32, 32, 8),
            (2048, 4096, 32, 2),
            (0, 8195, 32, 3),
            (128, 1024, 128, 2),
        ] {
            let spans = spans(quantized, window, group, threads);
            assert_eq!(
                spans.len(),
                threads.min((quantized + window) / MIN_SPAN_TOKENS)
            );
            let (first, last) = (&spans[0], spans.last().unwrap());
            assert_eq!((first.tokens.start, first.window.start), (0, 0));
            assert_eq!((last.tokens.end, last.window.end), (quantized, window));
            for pair in spans.windows(2) {
                assert_eq!(pair[0].tokens.end, pair[1].tokens.start);
                assert_eq!(pair[0].window.end, pair[1].window.start);
            }
            assert!(spans.iter().all(|s| s.tokens.start % group == 0));
            // Balanced to within a group.
            let share = (quantized + window) / spans.len();
            for s in &spans {
                assert!(
                    (s.tokens.len() + s.window.len()).abs_diff(share) <= group,
                    "{s:?} of {quantized} + {window}"
                );
            }
        }
    }
}
