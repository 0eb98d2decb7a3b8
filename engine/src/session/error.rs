//! Why the engine could not do what was asked.

use crate::error::{LoadError, ModelError};
use crate::tokenizer::{TemplateError, TokenizerError};

/// Why the engine could not do what was asked.
#[derive(Debug, thiserror::Error)]
pub enum EngineError {
    /// The model could not be loaded.
    #[error(transparent)]
    Load(#[from] LoadError),
    /// Running the model failed.
    #[error(transparent)]
    Model(#[from] ModelError),
    /// Encoding or decoding failed.
    #[error(transparent)]
    Tokenizer(#[from] TokenizerError),
    /// The chat template failed on this conversation.
    #[error(transparent)]
    Template(#[from] TemplateError),
    /// The prompt does not fit the context window.
    #[error(
        "the prompt is {prompt_tokens} tokens but the context holds {context_length}: \
         shorten the conversation or the documents, or raise the context length"
    )]
    ContextOverflow {
        /// Prompt length.
        prompt_tokens: usize,
        /// Context window.
        context_length: usize,
    },
    /// The requested context is longer than the model was trained for.
    #[error("context length {requested} exceeds the model's {max}")]
    ContextTooLong {
        /// Asked for.
        requested: usize,
        /// The model's limit.
        max: usize,
    },
    /// The prompt rendered to no tokens.
    #[error("the prompt is empty")]
    EmptyPrompt,
    /// The model could not be fetched from the hub.
    #[error("hub: {0}")]
    Hub(String),
    /// The model thread is gone (it panicked or the engine was shut down).
    #[error("the model thread has stopped")]
    WorkerGone,
    /// A conversation could not be written to or read from its cache file.
    #[error(transparent)]
    CacheFile(#[from] crate::cache::file::CacheFileError),
    /// The request's output format cannot be used (a schema the grammar engine refuses).
    #[error(transparent)]
    Grammar(#[from] crate::grammar::GrammarError),
    /// The model thread could not be started.
    #[error("cannot start the model thread: {0}")]
    Spawn(std::io::Error),
}

impl From<mlx_rs::error::Exception> for EngineError {
    fn from(e: mlx_rs::error::Exception) -> Self {
        EngineError::Model(ModelError::Mlx(e))
    }
}

impl From<crate::cache::CacheError> for EngineError {
    fn from(e: crate::cache::CacheError) -> Self {
        EngineError::Model(ModelError::Cache(e))
    }
}
