//! What `kivi bench`, `kivi ppl` and `kivi needle` share: loading the model and texts,
//! naming cache configurations, summarizing repeated measurements, memory probes, plots.

pub mod bench;
pub mod configs;
pub mod corpus;
pub mod memory;
pub mod needle;
pub mod plot;
pub mod ppl;
pub mod setup;
pub mod summary;
