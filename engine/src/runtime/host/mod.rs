//! The host runtime: plain-Rust kernels over host memory (the CPU backends): the model's
//! operations (`ops.rs`) and the caches' storage.

pub(crate) mod full;
pub(crate) mod kivi;
pub(crate) mod kv;
pub(crate) mod ops;

/// The host runtime ([`crate::runtime::Runtime`]).
pub(crate) struct Host;
