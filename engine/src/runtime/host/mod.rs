//! The host runtime's cache storage.

pub(crate) mod full;
pub(crate) mod kivi;
pub(crate) mod kv;
