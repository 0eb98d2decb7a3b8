//! The MLX runtime: MLX operations on the backend's device (a Mac's GPU, or the CPU): the
//! model's operations (`ops.rs`) and the caches' storage.

pub(crate) mod full;
pub(crate) mod kivi;
pub(crate) mod ops;

/// The MLX runtime ([`crate::runtime::Runtime`]).
pub(crate) struct Mlx;
