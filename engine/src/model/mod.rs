//! Language models: hyper-parameters, building blocks, the Llama-family decoder, and the
//! operations it is written in (MLX's, or the host kernels').

pub mod config;
pub mod layers;
pub mod llama;
pub(crate) mod ops;
pub mod rope;

pub use config::{Family, ModelConfig, RopeConfig, RopeScaling, SUPPORTED_FAMILIES};
pub use llama::Llama;
