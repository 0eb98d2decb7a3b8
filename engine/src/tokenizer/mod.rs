//! Tokenizers (Hugging Face `tokenizers`), chat templates, and streaming detokenization.
//!
//! A tokenizer comes from a model folder's `tokenizer.json` and `tokenizer_config.json`,
//! or is rebuilt from a GGUF file's metadata (see [`gguf`]).

pub mod gguf;
pub mod stream;
pub mod template;

use std::path::Path;

use serde_json::Value;

use crate::error::LoadError;
use crate::weights::safetensors::read_json;
pub use stream::TextStream;
pub use template::{ChatTemplate, Message, Role, TemplateError};

/// Why text could not be encoded or decoded.
#[derive(Debug, thiserror::Error)]
#[error("tokenizer: {0}")]
pub struct TokenizerError(String);

/// Token texts that end a turn in the chat formats the engine knows, used as stop tokens
/// when the vocabulary marks them special (llama.cpp does the same).
const END_OF_TURN_MARKERS: [&str; 7] = [
    "<|im_end|>",
    "<|eot_id|>",
    "<|eom_id|>",
    "<|endoftext|>",
    "<|end_of_text|>",
    "</s>",
    "<end_of_turn>",
];

/// A model's tokenizer, its special tokens, and its chat template.
pub struct Tokenizer {
    inner: tokenizers::Tokenizer,
    /// Beginning-of-sequence token, if the model has one.
    bos: Option<String>,
    /// End-of-sequence token text.
    eos: Option<String>,
    /// True when the BOS must be prepended by hand (GGUF vocabularies have no
    /// post-processor to do it).
    prepend_bos: bool,
    stop_ids: Vec<u32>,
    template: Option<ChatTemplate>,
}

impl Tokenizer {
    /// Assembles a tokenizer from its parts; `stop_ids` gains the vocabulary's special
    /// end-of-turn tokens.
    fn assemble(
        inner: tokenizers::Tokenizer,
        bos: Option<String>,
        eos: Option<String>,
        prepend_bos: bool,
        mut stop_ids: Vec<u32>,
        template_source: Option<String>,
    ) -> Result<Self, LoadError> {
        for marker in END_OF_TURN_MARKERS {
            let special = inner
                .get_added_vocabulary()
                .get_added_tokens_decoder()
                .iter()
                .any(|(_, t)| t.content == marker && t.special);
            if let (true, Some(id)) = (special, inner.token_to_id(marker)) {
                stop_ids.push(id);
            }
        }
        stop_ids.sort_unstable();
        stop_ids.dedup();
        let template = template_source
            .map(|s| {
                ChatTemplate::new(
                    &s,
                    bos.as_deref().unwrap_or(""),
                    eos.as_deref().unwrap_or(""),
                )
            })
            .transpose()?;
        Ok(Self {
            inner,
            bos,
            eos,
            prepend_bos,
            stop_ids,
            template,
        })
    }

    /// Loads `tokenizer.json`, `tokenizer_config.json` and the stop tokens of
    /// `generation_config.json`/`config.json` from a Hugging Face model folder.
    pub fn from_folder(dir: &Path) -> Result<Self, LoadError> {
        let path = dir.join("tokenizer.json");
        if !path.is_file() {
            return Err(LoadError::Missing {
                what: "tokenizer.json".into(),
                path,
                hint: "the model folder must contain the tokenizer of a Hugging Face checkpoint"
                    .into(),
            });
        }
        let inner = tokenizers::Tokenizer::from_file(&path)
            .map_err(|e| LoadError::Tokenizer(format!("{}: {e}", path.display())))?;
        let config_path = dir.join("tokenizer_config.json");
        let config = if config_path.is_file() {
            read_json(&config_path)?
        } else {
            Value::Null
        };
        let token_text = |key: &str| -> Option<String> {
            match config.get(key)? {
                Value::String(s) => Some(s.clone()),
                v => v.get("content")?.as_str().map(str::to_owned),
            }
        };
        let (bos, eos) = (token_text("bos_token"), token_text("eos_token"));
        let mut stop_ids: Vec<u32> = eos.iter().filter_map(|t| inner.token_to_id(t)).collect();
        for file in ["generation_config.json", "config.json"] {
            let p = dir.join(file);
            if p.is_file() {
                stop_ids.extend(ids_of(read_json(&p)?.get("eos_token_id")));
            }
        }
        let mut template = match config.get("chat_template") {
            Some(Value::String(s)) => Some(s.clone()),
            // Several named templates: the default one is the chat template.
            Some(Value::Array(list)) => list
                .iter()
                .find(|t| t.get("name").and_then(Value::as_str) == Some("default"))
                .and_then(|t| t.get("template")?.as_str().map(str::to_owned)),
            _ => None,
        };
        let jinja = dir.join("chat_template.jinja");
        if template.is_none() && jinja.is_file() {
            template = Some(
                std::fs::read_to_string(&jinja).map_err(|source| LoadError::Io {
                    path: jinja.clone(),
                    source,
                })?,
            );
        }
        Self::assemble(inner, bos, eos, false, stop_ids, template)
    }

    /// Encodes text. `add_special_tokens` adds what the model puts around a raw sequence
    /// (its BOS, if any); special-token texts inside `text` always map to their ids.
    pub fn encode(&self, text: &str, add_special_tokens: bool) -> Result<Vec<u32>, TokenizerError> {
        let encoding = self
            .inner
            .encode(text, add_special_tokens)
            .map_err(|e| TokenizerError(e.to_string()))?;
        let mut ids = encoding.get_ids().to_vec();
        if add_special_tokens && self.prepend_bos {
            if let Some(bos) = self.bos.as_deref().and_then(|b| self.inner.token_to_id(b)) {
                if ids.first() != Some(&bos) {
                    ids.insert(0, bos);
                }
            }
        }
        Ok(ids)
    }

    /// Decodes ids to text, leaving out special tokens when `skip_special` is true.
    pub fn decode(&self, ids: &[u32], skip_special: bool) -> Result<String, TokenizerError> {
        self.inner
            .decode(ids, skip_special)
            .map_err(|e| TokenizerError(e.to_string()))
    }

    /// Whether generating `id` ends the answer.
    pub fn is_stop(&self, id: u32) -> bool {
        self.stop_ids.contains(&id)
    }

    /// The ids that end generation.
    pub fn stop_ids(&self) -> &[u32] {
        &self.stop_ids
    }

    /// The id of a token text, if it is in the vocabulary.
    pub fn token_id(&self, token: &str) -> Option<u32> {
        self.inner.token_to_id(token)
    }

    /// Vocabulary size including added tokens.
    pub fn vocab_size(&self) -> usize {
        self.inner.get_vocab_size(true)
    }

    /// The largest token id the tokenizer can produce (added tokens included).
    pub fn max_token_id(&self) -> Option<u32> {
        self.inner.get_vocab(true).into_values().max()
    }

    /// The id put before a sequence (its BOS) where the model's tokenizer adds one (Gemma,
    /// Llama 2), else `None` (SmolLM2, Qwen).
    pub fn prepended_bos(&self) -> Option<u32> {
        if !self.prepend_bos {
            return None;
        }
        self.bos.as_deref().and_then(|b| self.inner.token_to_id(b))
    }

    /// The end-of-sequence token text.
    pub fn eos_token(&self) -> Option<&str> {
        self.eos.as_deref()
    }

    /// The chat template, if the model has one.
    pub fn chat_template(&self) -> Option<&ChatTemplate> {
        self.template.as_ref()
    }

    /// Renders a conversation with the model's chat template.
    pub fn apply_chat_template(
        &self,
        messages: &[Message],
        add_generation_prompt: bool,
    ) -> Result<String, TemplateError> {
        match &self.template {
            Some(t) => t.render(messages, add_generation_prompt),
            None => Err(TemplateError::missing()),
        }
    }

    /// The underlying Hugging Face tokenizer.
    pub fn inner(&self) -> &tokenizers::Tokenizer {
        &self.inner
    }
}

impl TemplateError {
    fn missing() -> Self {
        TemplateError::from_message(
            "the model has no chat template (a base model?): use plain completion instead",
        )
    }
}

/// Token ids from a JSON number or list of numbers.
fn ids_of(value: Option<&Value>) -> Vec<u32> {
    match value {
        Some(Value::Number(n)) => n.as_u64().map(|v| v as u32).into_iter().collect(),
        Some(Value::Array(list)) => list
            .iter()
            .filter_map(|v| v.as_u64().map(|v| v as u32))
            .collect(),
        _ => Vec::new(),
    }
}
