//! Rebuilding a model's tokenizer from GGUF metadata.
//!
//! A GGUF file carries the vocabulary (`tokenizer.ggml.tokens`), token types and special
//! ids, and one of two kinds of model (`tokenizer.ggml.model`):
//!
//! - `gpt2`: byte-level BPE (Llama 3, Qwen, SmolLM2) with its merges; it names its
//!   pre-tokenizer (`tokenizer.ggml.pre`) instead of spelling it out. The split rules below
//!   are those llama.cpp applies for each name, which are the rules of the model's original
//!   `tokenizer.json`.
//! - `llama`: SentencePiece BPE (Gemma, Mistral, Llama 2) with a score per piece and no
//!   merges. SentencePiece merges, anywhere in the text, the adjacent pair whose joined
//!   piece scores highest; characters no piece covers fall back to byte pieces (`<0x0A>`).
//!   The same tokenizer as a ranked-merges BPE: every split of every normal piece into two
//!   normal pieces is a merge, ranked by the joined piece's score. Spaces become `▁`, with
//!   one before the text (and after each special token) when `add_space_prefix` says so.
//!   `tests/tokenizer_reference.rs` holds it to the `sentencepiece` library's own encoder.
//!
//! The metadata comes from the pure-Rust GGUF reader ([`crate::gguf`]), not from MLX.

use serde_json::{json, Value};

use super::Tokenizer;
use crate::error::LoadError;
use crate::gguf::{GgufError, Metadata};
use crate::weights::gguf::{ids, Gguf};

/// llama.cpp token types (SentencePiece's piece types, the same numbers).
const TOKEN_NORMAL: f64 = 1.0;
const TOKEN_CONTROL: f64 = 3.0;
const TOKEN_USER_DEFINED: f64 = 4.0;

/// SentencePiece's stand-in for a space.
const SPM_SPACE: &str = "\u{2581}";

/// Llama 3's split: case-insensitive contractions, letters with one leading non-letter,
/// numbers in runs of up to three digits.
const LLAMA3_SPLIT: &str = r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+";

/// Qwen2's split: Llama 3's with single digits.
const QWEN2_SPLIT: &str = r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+";

/// The pre-tokenizer (and normalizer) for a `tokenizer.ggml.pre` name.
fn pre_tokenizer(pre: &str) -> Result<(Value, Value), LoadError> {
    let byte_level = |use_regex: bool| json!({"type": "ByteLevel", "add_prefix_space": false, "trim_offsets": true, "use_regex": use_regex});
    let split_then_bytes = |pattern: &str| {
        json!({"type": "Sequence", "pretokenizers": [
            {"type": "Split", "pattern": {"Regex": pattern}, "behavior": "Isolated", "invert": false},
            byte_level(false),
        ]})
    };
    Ok(match pre {
        "llama3" | "llama-v3" | "llama-bpe" | "smaug-bpe" | "dbrx" | "falcon3" => {
            (split_then_bytes(LLAMA3_SPLIT), Value::Null)
        }
        "qwen2" | "deepseek-r1-qwen" => (split_then_bytes(QWEN2_SPLIT), json!({"type": "NFC"})),
        // StarCoder-style vocabularies (SmolLM, SmolLM2): every digit on its own, then
        // GPT-2's split.
        "smollm" | "starcoder" | "refact" | "codeshell" => (
            json!({"type": "Sequence", "pretokenizers": [
                {"type": "Digits", "individual_digits": true},
                byte_level(true),
            ]}),
            Value::Null,
        ),
        "gpt2" | "default" | "gpt-2" => (byte_level(true), Value::Null),
        other => {
            return Err(LoadError::Tokenizer(format!(
                "GGUF pre-tokenizer {other:?} is not supported (supported: llama-bpe, qwen2, \
                 smollm, gpt2); use the model's Hugging Face folder with tokenizer.json instead"
            )))
        }
    })
}

/// The vocabulary as `tokenizers` reads it: text to id.
fn vocab(tokens: &[String]) -> serde_json::Map<String, Value> {
    tokens
        .iter()
        .enumerate()
        .map(|(id, t)| (t.clone(), json!(id)))
        .collect()
}

/// A SentencePiece BPE vocabulary as a ranked-merges BPE (see the module's notes):
/// normalizer, decoder and model.
fn sentencepiece_spec(
    tokens: &[String],
    scores: &[f64],
    types: &[f64],
    unknown: Option<String>,
    space_prefix: bool,
) -> Value {
    let normal: std::collections::HashMap<&str, usize> = tokens
        .iter()
        .zip(types)
        .enumerate()
        .filter(|(_, (_, &t))| t == TOKEN_NORMAL)
        .map(|(id, (text, _))| (text.as_str(), id))
        .collect();
    // (score of the joined piece, left id, right id): the highest score merges first; ties
    // go to the lower ids, as the `tokenizers` library's own SentencePiece converter ranks
    // them.
    let mut merges: Vec<(f64, usize, usize)> = Vec::new();
    for (text, &id) in &normal {
        for (at, _) in text.char_indices().skip(1) {
            if let (Some(&left), Some(&right)) = (normal.get(&text[..at]), normal.get(&text[at..]))
            {
                merges.push((scores[id], left, right));
            }
        }
    }
    merges.sort_by(|a, b| b.0.total_cmp(&a.0).then(a.1.cmp(&b.1)).then(a.2.cmp(&b.2)));
    let merges: Vec<Value> = merges
        .iter()
        .map(|&(_, left, right)| json!([tokens[left], tokens[right]]))
        .collect();
    let space = json!({"type": "Replace", "pattern": {"String": " "}, "content": SPM_SPACE});
    let normalizer = if space_prefix {
        json!({"type": "Sequence", "normalizers": [
            {"type": "Prepend", "prepend": SPM_SPACE}, space]})
    } else {
        space
    };
    let mut decoders = vec![
        json!({"type": "Replace", "pattern": {"String": SPM_SPACE}, "content": " "}),
        json!({"type": "ByteFallback"}),
        json!({"type": "Fuse"}),
    ];
    if space_prefix {
        decoders.push(json!({"type": "Strip", "content": " ", "start": 1, "stop": 0}));
    }
    json!({
        "normalizer": normalizer,
        "pre_tokenizer": null,
        "decoder": {"type": "Sequence", "decoders": decoders},
        "model": {
            "type": "BPE", "dropout": null, "unk_token": unknown,
            "continuing_subword_prefix": null, "end_of_word_suffix": null,
            "fuse_unk": true, "byte_fallback": true, "ignore_merges": false,
            "vocab": vocab(tokens), "merges": merges,
        },
    })
}

impl Tokenizer {
    /// Builds the tokenizer a GGUF file describes (byte-level BPE or SentencePiece).
    pub fn from_gguf(g: &Gguf) -> Result<Self, LoadError> {
        Self::from_gguf_metadata(&g.header().metadata)
    }

    /// Builds the tokenizer from GGUF metadata, read by the pure-Rust reader (so that it
    /// can be fuzzed without a model file and without MLX).
    pub fn from_gguf_metadata(g: &Metadata) -> Result<Self, LoadError> {
        let err = |e: GgufError| LoadError::Tokenizer(e.to_string());
        let missing = |key: &str| LoadError::Tokenizer(format!("GGUF metadata lacks {key}"));
        let tokens = g
            .strings("tokenizer.ggml.tokens")
            .map_err(err)?
            .ok_or_else(|| missing("tokenizer.ggml.tokens"))?;
        let types = g
            .numbers("tokenizer.ggml.token_type")
            .map_err(err)?
            .unwrap_or_default();
        if !types.is_empty() && types.len() != tokens.len() {
            return Err(LoadError::Tokenizer(format!(
                "GGUF metadata has {} token types for {} tokens",
                types.len(),
                tokens.len()
            )));
        }
        let model = g
            .string("tokenizer.ggml.model")
            .map_err(err)?
            .unwrap_or_default();
        let spec = match model {
            "gpt2" => {
                let merges = g
                    .strings("tokenizer.ggml.merges")
                    .map_err(err)?
                    .ok_or_else(|| missing("tokenizer.ggml.merges"))?;
                let (pre_tokenizer, normalizer) = pre_tokenizer(
                    g.string("tokenizer.ggml.pre")
                        .map_err(err)?
                        .unwrap_or("default"),
                )?;
                json!({
                    "normalizer": normalizer,
                    "pre_tokenizer": pre_tokenizer,
                    "decoder": {"type": "ByteLevel", "add_prefix_space": true, "trim_offsets": true, "use_regex": true},
                    "model": {
                        "type": "BPE", "dropout": null, "unk_token": null,
                        "continuing_subword_prefix": null, "end_of_word_suffix": null,
                        "fuse_unk": false, "byte_fallback": false, "ignore_merges": false,
                        "vocab": vocab(tokens), "merges": merges,
                    },
                })
            }
            "llama" => {
                let scores = g
                    .numbers("tokenizer.ggml.scores")
                    .map_err(err)?
                    .ok_or_else(|| missing("tokenizer.ggml.scores"))?;
                if scores.len() != tokens.len() || types.len() != tokens.len() {
                    return Err(LoadError::Tokenizer(format!(
                        "GGUF metadata has {} scores and {} token types for {} tokens",
                        scores.len(),
                        types.len(),
                        tokens.len()
                    )));
                }
                let unknown = g
                    .number("tokenizer.ggml.unknown_token_id")
                    .map_err(err)?
                    .and_then(|id| tokens.get(id as usize).cloned());
                // llama.cpp's default: a space before the text, as SentencePiece's
                // `add_dummy_prefix` does.
                let space_prefix = g
                    .number("tokenizer.ggml.add_space_prefix")
                    .map_err(err)?
                    .is_none_or(|v| v != 0.0);
                sentencepiece_spec(tokens, &scores, &types, unknown, space_prefix)
            }
            other => {
                return Err(LoadError::Tokenizer(format!(
                    "GGUF tokenizer model {other:?} is not supported (supported: byte-level BPE \
                     \"gpt2\" and SentencePiece \"llama\"); use the model's Hugging Face folder \
                     instead"
                )))
            }
        };
        let added: Vec<Value> = tokens
            .iter()
            .zip(&types)
            .enumerate()
            .filter(|(_, (_, &t))| t == TOKEN_CONTROL || t == TOKEN_USER_DEFINED)
            .map(|(id, (content, &t))| {
                json!({"id": id, "content": content, "single_word": false, "lstrip": false,
                       "rstrip": false, "normalized": false, "special": t == TOKEN_CONTROL})
            })
            .collect();
        let mut spec = spec;
        spec["version"] = json!("1.0");
        spec["truncation"] = Value::Null;
        spec["padding"] = Value::Null;
        spec["post_processor"] = Value::Null;
        spec["added_tokens"] = Value::Array(added);
        let inner: tokenizers::Tokenizer = spec
            .to_string()
            .parse()
            .map_err(|e| LoadError::Tokenizer(format!("cannot build the GGUF vocabulary: {e}")))?;

        let token = |key: &str| -> Result<Option<u32>, LoadError> {
            Ok(g.number(key).map_err(err)?.map(|v| v as u32))
        };
        let text_of = |id: Option<u32>| id.and_then(|i| tokens.get(i as usize).cloned());
        let bos = text_of(token("tokenizer.ggml.bos_token_id")?);
        let eos_id = token("tokenizer.ggml.eos_token_id")?;
        let eos = text_of(eos_id);
        let add_bos = g
            .number("tokenizer.ggml.add_bos_token")
            .map_err(err)?
            .is_some_and(|v| v != 0.0);
        let mut stop_ids: Vec<u32> = eos_id.into_iter().collect();
        for key in ["tokenizer.ggml.eot_token_id", "tokenizer.ggml.eom_token_id"] {
            stop_ids.extend(
                g.numbers(key)
                    .map_err(err)?
                    .map(|v| ids(&v))
                    .unwrap_or_default(),
            );
        }
        let template = g
            .string("tokenizer.chat_template")
            .map_err(err)?
            .map(str::to_owned);
        Self::assemble(inner, bos, eos, add_bos, stop_ids, template)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::gguf::{code, write::to_bytes, Array, GgufHeader, Value};

    fn numbers(values: &[f64]) -> Value {
        Value::Array(Array::Numbers {
            code: code::F32,
            values: values.to_vec(),
        })
    }

    const TOKENS: [&str; 10] = [
        "<unk>",
        "<s>",
        "<0x21>",
        "a",
        "b",
        "c",
        "ab",
        "bc",
        "\u{2581}",
        "\u{2581}a",
    ];
    const TYPES: [f64; 10] = [2.0, 3.0, 6.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0];

    /// A SentencePiece vocabulary: `<unk>`, `<s>`, the byte piece of "!", and normal
    /// pieces whose scores decide the merges.
    fn metadata(scores: &[f64], types: &[f64], space_prefix: Option<bool>) -> Metadata {
        let mut metadata = vec![
            (
                "tokenizer.ggml.model".to_string(),
                Value::String("llama".into()),
            ),
            (
                "tokenizer.ggml.tokens".into(),
                Value::Array(Array::Strings(
                    TOKENS.iter().map(|t| t.to_string()).collect(),
                )),
            ),
            ("tokenizer.ggml.scores".into(), numbers(scores)),
            ("tokenizer.ggml.token_type".into(), numbers(types)),
            ("tokenizer.ggml.unknown_token_id".into(), Value::U32(0)),
            ("tokenizer.ggml.bos_token_id".into(), Value::U32(1)),
            ("tokenizer.ggml.add_bos_token".into(), Value::Bool(true)),
        ];
        if let Some(prefix) = space_prefix {
            metadata.push((
                "tokenizer.ggml.add_space_prefix".into(),
                Value::Bool(prefix),
            ));
        }
        GgufHeader::parse(&to_bytes(&metadata, &[]))
            .unwrap()
            .metadata
    }

    fn tokenizer(bc: f64, ab: f64, space_prefix: Option<bool>) -> Tokenizer {
        let scores = [0.0, 0.0, 0.0, -1.0, -1.0, -1.0, ab, bc, -1.0, -3.0];
        Tokenizer::from_gguf_metadata(&metadata(&scores, &TYPES, space_prefix)).unwrap()
    }

    #[test]
    fn sentencepiece_merges_the_best_scoring_pair_first() {
        let plain = Some(false);
        assert_eq!(
            tokenizer(-2.0, -5.0, plain).encode("abc", false).unwrap(),
            [3, 7]
        );
        assert_eq!(
            tokenizer(-5.0, -2.0, plain).encode("abc", false).unwrap(),
            [6, 5]
        );
    }

    #[test]
    fn sentencepiece_prefixes_a_space_falls_back_to_bytes_and_adds_bos() {
        // llama.cpp's default is a space before the text.
        let tok = tokenizer(-2.0, -5.0, None);
        // "!" has a byte piece; "é" has none and is unknown.
        assert_eq!(tok.encode("a!", false).unwrap(), [9, 2]);
        assert_eq!(tok.encode("a\u{e9}", false).unwrap(), [9, 0]);
        assert_eq!(tok.decode(&[9, 2], false).unwrap(), "a!");
        assert_eq!(tok.encode("a", true).unwrap(), [1, 9]);
        let plain = tokenizer(-2.0, -5.0, Some(false));
        // Without the prefix, a space inside the text is still a `▁`.
        assert_eq!(plain.encode("a b", false).unwrap(), [3, 8, 4]);
    }

    #[test]
    fn a_damaged_sentencepiece_section_is_refused_with_a_message() {
        let short = metadata(&[0.0; 9], &TYPES, None);
        let err = Tokenizer::from_gguf_metadata(&short)
            .err()
            .unwrap()
            .to_string();
        assert!(
            err.contains("9 scores") && err.contains("10 tokens"),
            "{err}"
        );
        let types = metadata(&[0.0; 10], &TYPES[..4], None);
        let err = Tokenizer::from_gguf_metadata(&types)
            .err()
            .unwrap()
            .to_string();
        assert!(err.contains("4 token types for 10 tokens"), "{err}");
    }
}
