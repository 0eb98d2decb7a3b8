//! The KIVI Chat engine: everything below the user interface.

pub mod cache;
