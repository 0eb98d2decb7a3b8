//! The host runtime: plain-Rust kernels over host memory (the CPU backends).

pub(crate) mod full;
pub(crate) mod kivi;
pub(crate) mod kv;

/// The host runtime ([`crate::runtime::Runtime`]).
pub(crate) struct Host;
