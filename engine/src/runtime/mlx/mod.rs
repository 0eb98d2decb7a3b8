//! The MLX runtime's cache storage.

pub(crate) mod full;
pub(crate) mod kivi;
