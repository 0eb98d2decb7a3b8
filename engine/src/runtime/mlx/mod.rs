//! The MLX runtime's cache storage.

pub(crate) mod full;
