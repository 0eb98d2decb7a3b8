//! One answer's parser state: which tokens may come next, and the tokens chosen so far.

use llguidance::api::TopLevelGrammar;
use llguidance::Matcher;
use mlx_rs::Array;

use super::{GrammarError, OutputFormat, TokenTable};

/// The state of one constrained answer.
pub struct Constraint {
    matcher: Matcher,
    /// Additive mask, reused between steps: 0 for an allowed token, -inf otherwise.
    bias: Vec<f32>,
}

impl Constraint {
    /// A fresh answer in `format` over `table`'s tokens; a schema the grammar engine
    /// refuses is an error here, before any token.
    pub fn new(table: &TokenTable, format: &OutputFormat) -> Result<Self, GrammarError> {
        let grammar = TopLevelGrammar::from_json_schema(format.schema()?);
        let parser = table
            .factory()
            .create_parser(grammar)
            .map_err(|e| GrammarError::Schema(e.to_string()))?;
        Ok(Self {
            matcher: Matcher::new(Ok(parser)),
            bias: Vec::new(),
        })
    }

    /// The mask to add to logits of `vocab` entries before sampling: a model whose output
    /// layer is wider than its tokenizer (padded vocabularies) never picks the padding.
    /// Once the answer is complete only the end-of-turn tokens are allowed.
    pub fn mask(&mut self, vocab: usize) -> Result<Array, GrammarError> {
        let allowed = self
            .matcher
            .compute_mask_or_eos()
            .map_err(|e| GrammarError::Parser(e.to_string()))?;
        if allowed.is_zero() {
            return Err(GrammarError::Parser(
                "no token can continue the answer".into(),
            ));
        }
        self.bias.clear();
        self.bias.resize(vocab, f32::NEG_INFINITY);
        allowed.iter_set_entries(|i| {
            if let Some(b) = self.bias.get_mut(i) {
                *b = 0.0;
            }
        });
        Ok(Array::from_slice(&self.bias, &[vocab as i32]))
    }

    /// Records the token sampled under the last mask.
    pub fn commit(&mut self, token: u32) -> Result<(), GrammarError> {
        if self.matcher.is_stopped() {
            // The answer was complete and the mask allowed only an end-of-turn token,
            // which the stopped parser has no state for.
            return Ok(());
        }
        self.matcher
            .consume_token(token)
            .map_err(|e| GrammarError::Parser(e.to_string()))
    }

    /// Whether the answer so far is complete JSON of the format.
    pub fn is_complete(&mut self) -> bool {
        self.matcher.is_stopped() || self.matcher.is_accepting().unwrap_or(false)
    }
}
