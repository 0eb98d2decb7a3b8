//! The KIVI Chat engine: everything below the user interface.

pub mod backend;
pub mod budget;
pub mod cache;
pub mod decode;
pub mod document;
pub mod error;
pub mod eval;
pub mod gguf;
pub mod gpu_rules;
pub mod grammar;
#[cfg(feature = "hub")]
pub mod hub;
pub mod loader;
pub mod model;
pub(crate) mod runtime;
pub mod sampling;
#[cfg(feature = "server")]
pub mod server;
pub mod session;
pub mod stats;
pub mod tokenizer;
pub mod weights;
