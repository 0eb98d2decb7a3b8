//! Needle in a haystack: a random fact ("The secret code for <word> is <number>.") placed
//! at a given depth of a passage cut from the corpus, asked back through the chat
//! template, answered greedily, scored by exact match of the number.
//!
//! The question comes before and after the document and asks for the number only: with
//! it, SmolLM2-135M retrieves a 4-digit number at full precision, which it does not for a
//! passphrase of words (see issue 8). Every trial is drawn from a fixed seed before any
//! configuration runs, so all configurations answer the same questions on the same text.
//! Each question depends only on the seed, its cell and its number within the cell, so a
//! cell asked alone (`--lengths 4k --depths 0.5`) gets the same question as in the whole
//! grid, and `--trials 3` asks the `--trials 1` questions plus two more per cell.

use anyhow::{bail, Result};
use kivi_engine::cache::CacheConfig;
use kivi_engine::eval::{decode_step, forced_log_probs, greedy_token, prefill};
use kivi_engine::loader::LoadedModel;
use kivi_engine::tokenizer::{Message, Role, Tokenizer};
use rand::{rngs::StdRng, Rng, SeedableRng};
use serde::{Deserialize, Serialize};

/// Keys of the facts.
const WORDS: [&str; 16] = [
    "falcon", "harbor", "lantern", "meadow", "copper", "violet", "glacier", "orchard", "timber",
    "saffron", "beacon", "quarry", "thistle", "walnut", "cobalt", "juniper",
];

/// One question: where the fact goes and what it says.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Trial {
    /// Haystack tokens.
    pub length: usize,
    /// Where the fact sits, as a fraction of the haystack (0 = start, 1 = end).
    pub depth: f64,
    /// The fact's key.
    pub word: String,
    /// The fact's value (4 digits).
    pub value: String,
    /// Token offset of the haystack in the corpus.
    pub offset: usize,
}

/// A trial's outcome under one configuration.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Outcome {
    /// The question.
    pub trial: Trial,
    /// Tokens of the whole prompt (template, questions and document).
    pub prompt_tokens: usize,
    /// What the model answered.
    pub answer: String,
    /// Whether the first number in the answer is the value.
    pub correct: bool,
    /// Natural log of the probability the model gives the value's tokens after the
    /// lead-in "The secret code for <word> is", the answer forced. Exact match is all or
    /// nothing; this shows how sure the model was, so two caches can be compared on the
    /// same question even where both answer right (or both wrong).
    pub value_logprob: f64,
}

/// One configuration's results.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct ConfigResult {
    /// Short name.
    pub config: String,
    /// Settings.
    pub cache: CacheConfig,
    /// Fraction of trials answered exactly.
    pub accuracy: f64,
    /// Mean over trials of the probability of the value, forced (see
    /// [`Outcome::value_logprob`]).
    pub mean_value_prob: f64,
    /// Accuracy per depth (rows) and length (columns).
    pub grid: Vec<Vec<f64>>,
    /// Every trial.
    pub outcomes: Vec<Outcome>,
    /// Wall time.
    pub seconds: f64,
}

/// Tokens of the corpus the passages are cut from. Fixed, not sized from the grid, so that
/// a question does not depend on which other cells are asked.
pub const CORPUS_TOKENS: usize = 65536;

/// Draws the trials: `trials` per (length, depth) cell, each with its own fact and its
/// own passage of the corpus (`corpus_tokens` long).
pub fn draw_trials(
    lengths: &[usize],
    depths: &[f64],
    trials: usize,
    corpus_tokens: usize,
    seed: u64,
) -> Result<Vec<Trial>> {
    let mut out = Vec::new();
    for &length in lengths {
        if length > corpus_tokens {
            bail!("a haystack of {length} tokens is longer than the corpus ({corpus_tokens})");
        }
        for &depth in depths {
            for index in 0..trials {
                let mut rng = StdRng::seed_from_u64(cell_seed(seed, length, depth, index));
                out.push(Trial {
                    length,
                    depth,
                    word: WORDS[rng.random_range(0..WORDS.len())].to_string(),
                    value: rng.random_range(1000..10000).to_string(),
                    offset: rng.random_range(0..=corpus_tokens - length),
                });
            }
        }
    }
    Ok(out)
}

/// One question's own seed: the run's seed mixed with its cell and number (SplitMix64's
/// finalizer after each part, so nearby cells get unrelated streams).
fn cell_seed(seed: u64, length: usize, depth: f64, index: usize) -> u64 {
    let mix = |h: u64, part: u64| {
        let mut z = (h ^ part).wrapping_add(0x9e37_79b9_7f4a_7c15);
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    };
    [length as u64, depth.to_bits(), index as u64]
        .into_iter()
        .fold(mix(0, seed), mix)
}

/// The user message of a trial: question, document with the fact inside, question again.
pub fn message(haystack: &str, trial: &Trial) -> String {
    let fact = format!("The secret code for {} is {}.", trial.word, trial.value);
    let document = insert_at_depth(haystack, &fact, trial.depth);
    let question = format!("What is the secret code for {}?", trial.word);
    format!(
        "Question: {question}\n\nDocument:\n{document}\n\nQuestion: {question} Answer with the \
         number only."
    )
}

/// Puts `fact` at `depth` of `text`, at the next sentence boundary so no sentence is cut.
pub fn insert_at_depth(text: &str, fact: &str, depth: f64) -> String {
    let text = text.trim();
    let target = ((text.len() as f64) * depth.clamp(0.0, 1.0)) as usize;
    let at = if target == 0 {
        0
    } else {
        text.char_indices()
            .skip_while(|&(i, _)| i < target)
            .find(|&(i, c)| c == '.' && text[i + 1..].starts_with(char::is_whitespace))
            .map_or(text.len(), |(i, _)| i + 1)
    };
    let (head, tail) = text.split_at(at);
    match (head.is_empty(), tail.is_empty()) {
        (true, _) => format!("{fact} {tail}"),
        (_, true) => format!("{head} {fact}"),
        _ => format!("{head} {fact}{tail}"),
    }
}

/// Whether the first run of digits in `answer` is `value`.
pub fn matches(answer: &str, value: &str) -> bool {
    let digits: String = answer
        .chars()
        .skip_while(|c| !c.is_ascii_digit())
        .take_while(char::is_ascii_digit)
        .collect();
    digits == value
}

/// Asks one trial's question with a fresh cache of `config` and greedy decoding.
pub fn ask(
    loaded: &LoadedModel,
    corpus: &[u32],
    trial: &Trial,
    config: &CacheConfig,
    chunk: usize,
    max_tokens: usize,
) -> Result<Outcome> {
    let tokenizer = &loaded.tokenizer;
    let haystack = tokenizer.decode(&corpus[trial.offset..trial.offset + trial.length], true)?;
    let messages = [Message::new(Role::User, message(&haystack, trial))];
    let text = tokenizer.apply_chat_template(&messages, true)?;
    // The template writes the special tokens itself.
    let prompt = tokenizer.encode(&text, false)?;
    let mut caches = config.make_layers(loaded.model.config(), loaded.model.backend());
    let prompt_logits = prefill(&loaded.model, &mut caches, &prompt, chunk)?;
    // The prompt's cache, to score the forced answer on after the greedy one.
    let prompt_states = caches
        .iter()
        .map(|c| c.state())
        .collect::<Result<Vec<_>, _>>()?;
    let mut logits = prompt_logits.clone();
    let mut answer_ids = Vec::new();
    for _ in 0..max_tokens {
        let token = greedy_token(&logits)?;
        if tokenizer.is_stop(token) {
            break;
        }
        answer_ids.push(token);
        logits = decode_step(&loaded.model, &mut caches, token)?;
    }
    let answer = tokenizer.decode(&answer_ids, true)?.trim().to_string();
    for (cache, state) in caches.iter_mut().zip(prompt_states) {
        cache.restore(state)?;
    }
    let (forced, value_at) = forced_answer(tokenizer, trial)?;
    let log_probs = forced_log_probs(&loaded.model, &mut caches, prompt_logits, &forced)?;
    let value_logprob = log_probs[value_at..].iter().map(|&x| f64::from(x)).sum();
    Ok(Outcome {
        correct: matches(&answer, &trial.value),
        trial: trial.clone(),
        prompt_tokens: prompt.len(),
        answer,
        value_logprob,
    })
}

/// The forced answer "The secret code for <word> is <value>" as tokens, and the index of
/// the value's first token in it.
fn forced_answer(tokenizer: &Tokenizer, trial: &Trial) -> Result<(Vec<u32>, usize)> {
    let lead_in = format!("The secret code for {} is", trial.word);
    let lead_ids = tokenizer.encode(&lead_in, false)?;
    let ids = tokenizer.encode(&format!("{lead_in} {}", trial.value), false)?;
    // The value is what follows the lead-in's tokens; a tokenizer that merged across the
    // boundary would leave that undefined.
    if !ids.starts_with(&lead_ids) || ids.len() == lead_ids.len() {
        bail!("{lead_in:?} does not tokenize as a prefix of the forced answer");
    }
    Ok((ids, lead_ids.len()))
}

/// How a configuration answered the same questions as a baseline (the first one asked).
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct Paired {
    /// Questions both answered exactly.
    pub both_right: usize,
    /// Questions only the baseline answered.
    pub lost: usize,
    /// Questions only this configuration answered.
    pub gained: usize,
    /// Questions answered word for word as the baseline did.
    pub identical: usize,
    /// Mean change of the code's log-probability (forced answer) from the baseline's.
    pub mean_logprob_change: f64,
    /// Its standard error over the questions.
    pub standard_error: f64,
}

/// Compares `outcomes` with the `baseline`'s, question by question (same order).
pub fn paired(baseline: &[Outcome], outcomes: &[Outcome]) -> Paired {
    let pairs: Vec<(&Outcome, &Outcome)> = baseline.iter().zip(outcomes).collect();
    let count =
        |f: &dyn Fn(&Outcome, &Outcome) -> bool| pairs.iter().filter(|(b, o)| f(b, o)).count();
    let changes: Vec<f64> = pairs
        .iter()
        .map(|(b, o)| o.value_logprob - b.value_logprob)
        .collect();
    let n = changes.len() as f64;
    let mean = changes.iter().sum::<f64>() / n.max(1.0);
    let variance = changes.iter().map(|c| (c - mean).powi(2)).sum::<f64>() / (n - 1.0).max(1.0);
    Paired {
        both_right: count(&|b, o| b.correct && o.correct),
        lost: count(&|b, o| b.correct && !o.correct),
        gained: count(&|b, o| !b.correct && o.correct),
        identical: count(&|b, o| b.answer == o.answer),
        mean_logprob_change: mean,
        standard_error: (variance / n.max(1.0)).sqrt(),
    }
}

/// Accuracy per (depth, length) cell.
pub fn grid(outcomes: &[Outcome], lengths: &[usize], depths: &[f64]) -> Vec<Vec<f64>> {
    depths
        .iter()
        .map(|&d| {
            lengths
                .iter()
                .map(|&l| {
                    let cell: Vec<bool> = outcomes
                        .iter()
                        .filter(|o| o.trial.length == l && o.trial.depth == d)
                        .map(|o| o.correct)
                        .collect();
                    cell.iter().filter(|&&c| c).count() as f64 / cell.len().max(1) as f64
                })
                .collect()
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn facts_go_at_sentence_boundaries() {
        let text = "One. Two two. Three three three.";
        assert_eq!(
            insert_at_depth(text, "X.", 0.0),
            "X. One. Two two. Three three three."
        );
        assert_eq!(
            insert_at_depth(text, "X.", 1.0),
            "One. Two two. Three three three. X."
        );
        assert_eq!(
            insert_at_depth(text, "X.", 0.3),
            "One. Two two. X. Three three three."
        );
    }

    #[test]
    fn pairs_count_flips_both_ways_and_average_the_change() {
        let trial = draw_trials(&[100], &[0.0], 1, 1000, 7).unwrap().remove(0);
        let outcome = |answer: &str, correct, value_logprob| Outcome {
            trial: trial.clone(),
            prompt_tokens: 10,
            answer: answer.into(),
            correct,
            value_logprob,
        };
        let base = [
            outcome("1", true, -1.0),
            outcome("2", true, -2.0),
            outcome("x", false, -3.0),
        ];
        let other = [
            outcome("1", true, -1.5),
            outcome("y", false, -2.0),
            outcome("3", true, -2.0),
        ];
        let p = paired(&base, &other);
        assert_eq!((p.both_right, p.lost, p.gained, p.identical), (1, 1, 1, 1));
        // Changes -0.5, 0, +1: mean 1/6, sample variance 0.5833, standard error 0.441.
        assert!((p.mean_logprob_change - 1.0 / 6.0).abs() < 1e-12);
        assert!((p.standard_error - (0.583_333_333_333_333_4f64 / 3.0).sqrt()).abs() < 1e-9);
        assert_eq!(paired(&base, &base).identical, 3);
        assert_eq!(paired(&base, &base).mean_logprob_change, 0.0);
    }

    #[test]
    fn answers_match_on_the_first_number() {
        assert!(matches("4821", "4821"));
        assert!(matches("The secret code is 4821.", "4821"));
        assert!(!matches("48210", "4821"));
        assert!(!matches("no idea", "4821"));
        assert!(!matches("1234 or 4821", "4821"));
    }

    #[test]
    fn trials_are_reproducible() {
        let a = draw_trials(&[100, 200], &[0.0, 0.5], 2, 1000, 7).unwrap();
        let b = draw_trials(&[100, 200], &[0.0, 0.5], 2, 1000, 7).unwrap();
        assert_eq!(a.len(), 8);
        assert_eq!(
            serde_json::to_string(&a).unwrap(),
            serde_json::to_string(&b).unwrap()
        );
        assert!(a
            .iter()
            .all(|t| t.value.len() == 4 && t.offset + t.length <= 1000));
        assert!(draw_trials(&[2000], &[0.0], 1, 1000, 7).is_err());
    }

    #[test]
    fn a_question_depends_only_on_its_cell_and_number() {
        let grid = draw_trials(&[100, 200], &[0.0, 0.5, 1.0], 3, 1000, 7).unwrap();
        let alone = draw_trials(&[200], &[0.5], 1, 1000, 7).unwrap();
        let same = |a: &Trial, b: &Trial| {
            (a.length, a.depth, &a.word, &a.value, a.offset)
                == (b.length, b.depth, &b.word, &b.value, b.offset)
        };
        // The first question of cell (200, 0.5) in the grid is the one asked alone.
        let first = grid
            .iter()
            .find(|t| t.length == 200 && t.depth == 0.5)
            .unwrap();
        assert!(same(first, &alone[0]));
        // The questions of a cell differ from one another, and another seed changes them.
        let cell: Vec<&Trial> = grid
            .iter()
            .filter(|t| t.length == 200 && t.depth == 0.5)
            .collect();
        assert!(!same(cell[0], cell[1]) && !same(cell[1], cell[2]));
        let other = draw_trials(&[200], &[0.5], 1, 1000, 8).unwrap();
        assert!(!same(&alone[0], &other[0]));
    }
}
