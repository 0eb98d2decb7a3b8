//! Errors of loading a model from disk and of running it.

use std::path::PathBuf;

use crate::cache::CacheError;

/// Why a model, its weights, its tokenizer or its chat template could not be loaded.
#[derive(Debug, thiserror::Error)]
pub enum LoadError {
    /// A file or folder the model needs is not there.
    #[error("{what} not found at {path}: {hint}")]
    Missing {
        /// What was looked for (for example "config.json").
        what: String,
        /// Where it was looked for.
        path: PathBuf,
        /// What the user can do about it.
        hint: String,
    },
    /// Reading a file failed.
    #[error("cannot read {path}: {source}")]
    Io {
        /// The file.
        path: PathBuf,
        /// The underlying error.
        source: std::io::Error,
    },
    /// A JSON file (config.json, tokenizer_config.json, ...) is malformed.
    #[error("invalid JSON in {path}: {source}")]
    Json {
        /// The file.
        path: PathBuf,
        /// The underlying error.
        source: serde_json::Error,
    },
    /// MLX could not read a GGUF file.
    #[error("cannot read GGUF file {path}: {source}")]
    Gguf {
        /// The file.
        path: PathBuf,
        /// The underlying error.
        source: mlx_rs::io::GgufError,
    },
    /// A GGUF file that is damaged, truncated or not one the engine can load; checked
    /// before MLX's reader sees it (see [`crate::gguf`]).
    #[error("cannot load the GGUF file {path}: {source}")]
    InvalidGguf {
        /// The file.
        path: PathBuf,
        /// What is wrong with it.
        source: crate::gguf::GgufError,
    },
    /// The model with a KV cache for the whole context would not fit in the memory that
    /// is available; refused before loading (see [`crate::budget`]).
    #[error(
        "not enough memory: this model needs about {:.2} GiB ({detail}) but {:.2} GiB is \
         available; choose a smaller model or quantization, a shorter context or a KIVI \
         cache, or close other programs",
        *.needed as f64 / (1u64 << 30) as f64,
        *.available as f64 / (1u64 << 30) as f64
    )]
    InsufficientMemory {
        /// Estimated bytes: weights, KV cache and runtime.
        needed: u64,
        /// Bytes available.
        available: u64,
        /// The parts of the estimate.
        detail: String,
    },
    /// The model's configuration lacks a value or has an impossible one.
    #[error("bad model configuration: {0}")]
    Config(String),
    /// The model family is not one the engine implements.
    #[error("unsupported model architecture {0:?}: supported are {families}", families = crate::model::SUPPORTED_FAMILIES)]
    UnsupportedArchitecture(String),
    /// The weights use a quantization the engine cannot run.
    #[error("unsupported quantization: {0}")]
    UnsupportedQuantization(String),
    /// A tensor the architecture needs is absent or has the wrong shape.
    #[error("weights: {0}")]
    Weights(String),
    /// The tokenizer could not be built.
    #[error("tokenizer: {0}")]
    Tokenizer(String),
    /// The chat template does not compile.
    #[error("chat template: {0}")]
    Template(String),
    /// An MLX operation failed while preparing the weights.
    #[error("MLX error while loading: {0}")]
    Mlx(#[from] mlx_rs::error::Exception),
    /// The backend cannot run here.
    #[error(transparent)]
    Backend(#[from] crate::backend::BackendError),
    /// A weight that a GPU stream would refuse (see [`crate::gpu_rules`]).
    #[error(transparent)]
    GpuRule(#[from] crate::gpu_rules::GpuRuleError),
}

/// An error while running the model.
#[derive(Debug, thiserror::Error)]
pub enum ModelError {
    /// An MLX operation failed.
    #[error("MLX error in the model: {0}")]
    Mlx(#[from] mlx_rs::error::Exception),
    /// The KV cache failed.
    #[error(transparent)]
    Cache(#[from] CacheError),
    /// The caller passed inputs the model cannot take.
    #[error("model input: {0}")]
    Input(String),
    /// A step on host memory could not read a weight or an array.
    #[error("host decode step: {0}")]
    Host(String),
    /// An array that a GPU stream would refuse (see [`crate::gpu_rules`]).
    #[error(transparent)]
    GpuRule(#[from] crate::gpu_rules::GpuRuleError),
    /// The answer's format cannot be kept to.
    #[error(transparent)]
    Grammar(#[from] crate::grammar::GrammarError),
}
