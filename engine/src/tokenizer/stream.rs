//! Incremental detokenization: turning a growing list of token ids into text pieces.
//!
//! With byte-level BPE a token can end in the middle of a UTF-8 character (an emoji is
//! often two or three tokens), and decoding a token alone can differ from decoding it in
//! context. So the stream re-decodes a short window and emits only text that is complete:
//! a piece is held back while it ends in U+FFFD, the mark of an unfinished character.

use super::{Tokenizer, TokenizerError};

/// Decodes tokens one at a time into complete UTF-8 text pieces.
#[derive(Debug, Default, Clone)]
pub struct TextStream {
    tokens: Vec<u32>,
    /// Start of the window re-decoded for context.
    prefix_offset: usize,
    /// End of the text already emitted.
    read_offset: usize,
}

impl TextStream {
    /// An empty stream.
    pub fn new() -> Self {
        Self::default()
    }

    /// Adds a token; returns the text it completes, if any.
    pub fn push(
        &mut self,
        tokenizer: &Tokenizer,
        token: u32,
    ) -> Result<Option<String>, TokenizerError> {
        self.tokens.push(token);
        let prefix = tokenizer.decode(&self.tokens[self.prefix_offset..self.read_offset], true)?;
        let text = tokenizer.decode(&self.tokens[self.prefix_offset..], true)?;
        if text.len() > prefix.len() && !text.ends_with('\u{FFFD}') && text.starts_with(&prefix) {
            let piece = text[prefix.len()..].to_string();
            self.prefix_offset = self.read_offset;
            self.read_offset = self.tokens.len();
            Ok(Some(piece))
        } else {
            Ok(None)
        }
    }

    /// Text still held back (an unfinished character at the end of generation), decoded
    /// as it is.
    pub fn flush(&mut self, tokenizer: &Tokenizer) -> Result<Option<String>, TokenizerError> {
        let prefix = tokenizer.decode(&self.tokens[self.prefix_offset..self.read_offset], true)?;
        let text = tokenizer.decode(&self.tokens[self.prefix_offset..], true)?;
        self.prefix_offset = self.tokens.len();
        self.read_offset = self.tokens.len();
        Ok(text
            .strip_prefix(&prefix)
            .filter(|rest| !rest.is_empty())
            .map(str::to_owned))
    }

    /// All tokens pushed so far.
    pub fn tokens(&self) -> &[u32] {
        &self.tokens
    }
}
