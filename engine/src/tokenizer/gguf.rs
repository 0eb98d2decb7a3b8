//! Rebuilding a byte-level BPE tokenizer from GGUF metadata.
//!
//! A GGUF file carries the vocabulary (`tokenizer.ggml.tokens`), the merges, token types
//! and special ids, and names its pre-tokenizer (`tokenizer.ggml.pre`) instead of spelling
//! it out. The split rules below are those llama.cpp applies for each name, which are the
//! rules of the model's original `tokenizer.json`.
//!
//! The metadata comes from the pure-Rust GGUF reader ([`crate::gguf`]), not from MLX.

use serde_json::{json, Value};

use super::Tokenizer;
use crate::error::LoadError;
use crate::gguf::{GgufError, Metadata};
use crate::weights::gguf::{ids, Gguf};

/// llama.cpp token types.
const TOKEN_CONTROL: f64 = 3.0;
const TOKEN_USER_DEFINED: f64 = 4.0;

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

impl Tokenizer {
    /// Builds the tokenizer a GGUF file describes (byte-level BPE vocabularies only).
    pub fn from_gguf(g: &Gguf) -> Result<Self, LoadError> {
        Self::from_gguf_metadata(&g.header().metadata)
    }

    /// Builds the tokenizer from GGUF metadata, read by the pure-Rust reader (so that it
    /// can be fuzzed without a model file and without MLX).
    pub fn from_gguf_metadata(g: &Metadata) -> Result<Self, LoadError> {
        let err = |e: GgufError| LoadError::Tokenizer(e.to_string());
        let model = g
            .string("tokenizer.ggml.model")
            .map_err(err)?
            .unwrap_or_default();
        if model != "gpt2" {
            return Err(LoadError::Tokenizer(format!(
                "GGUF tokenizer model {model:?} is not supported: only byte-level BPE (\"gpt2\") \
                 vocabularies can be rebuilt; use the model's Hugging Face folder instead"
            )));
        }
        let missing = |key: &str| LoadError::Tokenizer(format!("GGUF metadata lacks {key}"));
        let tokens = g
            .strings("tokenizer.ggml.tokens")
            .map_err(err)?
            .ok_or_else(|| missing("tokenizer.ggml.tokens"))?;
        let merges = g
            .strings("tokenizer.ggml.merges")
            .map_err(err)?
            .ok_or_else(|| missing("tokenizer.ggml.merges"))?;
        let types = g
            .numbers("tokenizer.ggml.token_type")
            .map_err(err)?
            .unwrap_or_default();
        let (pre_tokenizer, normalizer) = pre_tokenizer(
            g.string("tokenizer.ggml.pre")
                .map_err(err)?
                .unwrap_or("default"),
        )?;

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
        let vocab: serde_json::Map<String, Value> = tokens
            .iter()
            .enumerate()
            .map(|(id, t)| (t.clone(), json!(id)))
            .collect();
        let spec = json!({
            "version": "1.0",
            "truncation": null,
            "padding": null,
            "added_tokens": added,
            "normalizer": normalizer,
            "pre_tokenizer": pre_tokenizer,
            "post_processor": null,
            "decoder": {"type": "ByteLevel", "add_prefix_space": true, "trim_offsets": true, "use_regex": true},
            "model": {
                "type": "BPE", "dropout": null, "unk_token": null,
                "continuing_subword_prefix": null, "end_of_word_suffix": null,
                "fuse_unk": false, "byte_fallback": false, "ignore_merges": false,
                "vocab": vocab, "merges": merges,
            },
        });
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
