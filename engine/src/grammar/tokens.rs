//! The model's vocabulary as the grammar engine reads it: each token's bytes in a trie,
//! built once per model from the tokenizer the engine already loads (a `tokenizer.json`
//! or one assembled from GGUF metadata: byte-level BPE and SentencePiece alike).

use std::sync::Arc;

use llguidance::toktrie::{TokEnv, TokRxInfo, TokTrie, TokenId, TokenizerEnv};
use llguidance::ParserFactory;

use super::GrammarError;
use crate::tokenizer::Tokenizer;

/// A model's tokens as bytes, and the parser factory over them.
pub struct TokenTable {
    factory: ParserFactory,
}

/// [`TokenizerEnv`] over the engine's tokenizer.
struct Vocabulary {
    trie: TokTrie,
    tokenizer: tokenizers::Tokenizer,
}

impl TokenizerEnv for Vocabulary {
    fn tok_trie(&self) -> &TokTrie {
        &self.trie
    }

    /// Text the grammar forces (a schema's keys), tokenized as the model would read it;
    /// bytes that are not UTF-8 fall back to the longest tokens that spell them.
    fn tokenize_bytes(&self, s: &[u8]) -> Vec<TokenId> {
        self.trie.tokenize_with_greedy_fallback(s, |text| {
            self.tokenizer
                .encode(text, false)
                .map(|e| e.get_ids().to_vec())
                .unwrap_or_default()
        })
    }
}

impl TokenTable {
    /// The table of `tokenizer`: its end-of-turn tokens end a constrained answer.
    pub fn new(tokenizer: &Tokenizer) -> Result<Self, GrammarError> {
        let inner = tokenizer.inner();
        let json = inner
            .to_string(false)
            .map_err(|e| GrammarError::Tokenizer(e.to_string()))?;
        let json: serde_json::Value =
            serde_json::from_str(&json).map_err(|e| GrammarError::Tokenizer(e.to_string()))?;
        let words = llguidance::token_bytes_from_tokenizer_json(&json)
            .map_err(|e| GrammarError::Tokenizer(e.to_string()))?;
        let stops = tokenizer.stop_ids();
        let Some(&eos) = stops.first() else {
            return Err(GrammarError::Tokenizer(
                "the model has no end-of-turn token to end an answer with".into(),
            ));
        };
        let info = TokRxInfo::new(words.len() as u32, eos);
        let trie = TokTrie::from(&info, &words).with_eos_tokens(stops);
        let env: TokEnv = Arc::new(Vocabulary {
            trie,
            tokenizer: inner.clone(),
        });
        let mut factory =
            ParserFactory::new_simple(&env).map_err(|e| GrammarError::Tokenizer(e.to_string()))?;
        // Grammar warnings go to the caller as errors, not to stderr.
        factory.quiet();
        Ok(Self { factory })
    }

    /// Tokens in the table (ids from 0).
    pub fn len(&self) -> usize {
        self.factory.tok_env().tok_trie().vocab_size()
    }

    /// True for an empty vocabulary.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    pub(super) fn factory(&self) -> &ParserFactory {
        &self.factory
    }
}
