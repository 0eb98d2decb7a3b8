//! Structured output: answers constrained to JSON, or to JSON that a schema accepts.
//!
//! At each step only the tokens that keep the answer a valid prefix of the format's
//! language may be sampled ([`Constraint::mask`]); the answer can end (an end-of-turn
//! token) only where the JSON is complete. The grammar engine is `llguidance`, made for
//! exactly this and used as a back end by llama.cpp, vLLM, SGLang and mlx-vlm: it compiles
//! a JSON schema to a grammar, walks it with an Earley parser over a trie of the model's
//! token bytes, and computes a step's mask in tens of microseconds (`docs/benchmarks.md`).
//! `outlines-core`, the alternative, compiles a schema to a regular expression and so
//! cannot express recursive schemas, and builds an index over the whole vocabulary for
//! each schema before the first token.
//!
//! - [`OutputFormat`]: what a request asks for;
//! - [`TokenTable`]: the model's tokens as bytes, built once per model;
//! - [`Constraint`]: one answer's parser state.

mod constraint;
mod tokens;

pub use constraint::Constraint;
pub use tokens::TokenTable;

use serde::{Deserialize, Serialize};
use serde_json::{json, Value};

/// What shape an answer must take.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum OutputFormat {
    /// Any JSON object (OpenAI's `json_object`).
    JsonObject,
    /// JSON valid under a JSON schema (draft 2020-12; `$ref` to the schema's own `$defs`,
    /// `enum`, `const`, `anyOf`, `required`, string and number bounds, ...).
    JsonSchema {
        /// The schema.
        schema: Value,
    },
}

/// Why a format cannot be used.
#[derive(Debug, thiserror::Error)]
pub enum GrammarError {
    /// The schema is not valid or uses what the grammar engine does not support.
    #[error("response format: {0}")]
    Schema(String),
    /// The model's tokenizer could not be turned into a token table.
    #[error("response format: this model's tokenizer cannot constrain output: {0}")]
    Tokenizer(String),
    /// The parser reached a state it cannot continue from.
    #[error("response format: the constrained answer cannot continue: {0}")]
    Parser(String),
}

impl GrammarError {
    /// The prefix every message of this error starts with, for callers that only see the
    /// message (the server's events).
    pub const PREFIX: &'static str = "response format: ";
}

impl OutputFormat {
    /// The schema the grammar is compiled from, with the layout answers are written in:
    /// JSON on one line, `", "` and `": "` between items (a small model given free
    /// whitespace can spend its whole budget on newlines). A schema's own `x-guidance`
    /// options win.
    pub(crate) fn schema(&self) -> Result<Value, GrammarError> {
        let mut schema = match self {
            OutputFormat::JsonObject => json!({"type": "object"}),
            OutputFormat::JsonSchema { schema } => schema.clone(),
        };
        let Some(object) = schema.as_object_mut() else {
            return Err(GrammarError::Schema(
                "the schema must be a JSON object".into(),
            ));
        };
        object.entry("x-guidance").or_insert_with(|| {
            json!({
                "whitespace_flexible": false,
                "item_separator": ", ",
                "key_separator": ": ",
            })
        });
        Ok(schema)
    }
}
