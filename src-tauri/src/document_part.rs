//! The part of a document that fits the context: its longest head, cut between words, that
//! together with a note saying which part it is takes at most the tokens there is room for.
//! The note goes into the document's text, so the model reads which part it sees and that
//! the rest is missing; nothing is cut without the user asking for it.

use std::future::Future;

/// The note at the head of a part: the model reads it before the text.
fn note(name: &str, tokens: u64, total: u64) -> String {
    format!(
        "[Only part of the document \"{name}\" is included here: its first {} of {} tokens. \
         The rest of it is not shown.]\n\n",
        grouped(tokens),
        grouped(total)
    )
}

/// A part of a document: its text (the note, then the head) and that text's tokens.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Part {
    /// The note and the head.
    pub text: String,
    /// Tokens of `text`.
    pub tokens: u64,
    /// Tokens of the head alone.
    pub head_tokens: u64,
}

/// The longest head of `text` (a document of `total` tokens called `name`), cut where
/// whitespace begins, whose note and head together count at most `room` tokens by `count`;
/// `None` when not even a word fits.
///
/// `count` is the model's tokenizer; a head's count grows with its length, so a binary
/// search over the cut points finds the longest (about 2·log2(n) counts), among the heads
/// of at most twice the bytes the room holds at the document's average bytes per token.
pub async fn first_part<E, F, Fut>(
    name: &str,
    text: &str,
    total: u64,
    room: u64,
    count: F,
) -> Result<Option<Part>, E>
where
    F: Fn(String) -> Fut,
    Fut: Future<Output = Result<u64, E>>,
{
    // Cut points: the starts of whitespace runs after a word, and the end.
    let mut cuts: Vec<usize> = text
        .char_indices()
        .zip(text.chars().skip(1))
        .filter(|((_, c), next)| !c.is_whitespace() && next.is_whitespace())
        .map(|((i, c), _)| i + c.len_utf8())
        .collect();
    cuts.push(text.len());
    let part = |cut: usize| {
        let head = &text[..cut];
        let count = &count;
        async move {
            let head_tokens = count(head.to_string()).await?;
            let text = format!("{}{head}", note(name, head_tokens, total));
            let tokens = count(text.clone()).await?;
            Ok::<_, E>(Part {
                text,
                tokens,
                head_tokens,
            })
        }
    };
    // Heads up to twice the document's average bytes per token times the room: a long
    // document's search then never counts the whole of it.
    let reach = (text.len() as u128 * u128::from(room) * 2 / u128::from(total.max(1))) as usize;
    let within = cuts.partition_point(|&cut| cut <= reach);
    // The last cut whose part fits, if any: `lo` fits (or is -1), `hi` does not.
    let (mut lo, mut hi): (isize, isize) = (-1, (within + 1).min(cuts.len()) as isize);
    let mut best = None;
    while hi - lo > 1 {
        let mid = lo + (hi - lo) / 2;
        let candidate = part(cuts[mid as usize]).await?;
        if candidate.tokens <= room {
            lo = mid;
            best = Some(candidate);
        } else {
            hi = mid;
        }
    }
    Ok(best)
}

/// `12345` as `12,345`.
pub fn grouped(n: u64) -> String {
    let digits = n.to_string();
    let mut out = String::new();
    for (i, c) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(c);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    /// One token per word.
    async fn words(text: String) -> Result<u64, ()> {
        Ok(text.split_whitespace().count() as u64)
    }

    fn run<T>(f: impl Future<Output = T>) -> T {
        tauri::async_runtime::block_on(f)
    }

    #[test]
    fn the_longest_head_that_fits_with_its_note() {
        let text = "one two  three\nfour five six seven";
        let note_words = note("a.txt", 0, 7).split_whitespace().count() as u64;
        let part = run(first_part("a.txt", text, 7, note_words + 3, words))
            .unwrap()
            .unwrap();
        assert_eq!(part.head_tokens, 3);
        assert!(part.text.ends_with("\n\none two  three"), "{}", part.text);
        assert!(
            part.text.contains("its first 3 of 7 tokens"),
            "{}",
            part.text
        );
        assert_eq!(part.tokens, note_words + 3);
        // Room for everything: the whole text, still with its note.
        let all = run(first_part("a.txt", text, 7, 1000, words))
            .unwrap()
            .unwrap();
        assert!(all.text.ends_with("five six seven"));
        assert_eq!(all.head_tokens, 7);
        // No room even for the note.
        assert_eq!(run(first_part("a.txt", text, 7, 2, words)).unwrap(), None);
    }

    #[test]
    fn counts_are_grouped_in_thousands() {
        assert_eq!(grouped(0), "0");
        assert_eq!(grouped(999), "999");
        assert_eq!(grouped(12_345), "12,345");
        assert_eq!(grouped(1_234_567), "1,234,567");
    }
}
