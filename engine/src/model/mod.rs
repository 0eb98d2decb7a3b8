//! Language models: hyper-parameters, building blocks, and the Llama-family decoder.

pub mod config;
pub mod host;
pub mod layers;
pub mod llama;
pub mod rope;

pub use config::{Family, ModelConfig, RopeConfig, RopeScaling};
pub use llama::Llama;
