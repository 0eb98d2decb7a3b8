//! The MLX runtime: MLX operations on the backend's device (a Mac's GPU, or the CPU).

pub(crate) mod full;
pub(crate) mod kivi;

/// The MLX runtime ([`crate::runtime::Runtime`]).
pub(crate) struct Mlx;
