//! The app's persistent state: chats, messages, documents, settings and downloads in SQLite.
//!
//! A plain library (no Tauri types) so that it is tested on its own. One [`Store`] owns one
//! connection behind a mutex; every method is a short statement or transaction, so the
//! commands can share an `Arc<Store>` (or Tauri managed state) and call it directly.
//!
//! Durability: the database runs in WAL mode with `synchronous = NORMAL`. In WAL mode NORMAL
//! never corrupts the file and loses nothing when the *process* dies (crash, kill, quit
//! mid-answer): a commit is in the WAL, in the OS page cache, before the call returns. Only a
//! power cut or an OS crash can drop the last commits since the previous checkpoint's fsync
//! (the database stays consistent). That is the right trade for a chat history: a streaming
//! answer is saved about once a second, and `FULL` would add an fsync to each of those saves
//! (tens of milliseconds on some laptop disks, and `F_FULLFSYNC`-class stalls on macOS) to
//! protect the last second of text against a power cut.

mod chats;
mod db;
mod documents;
mod downloads;
mod error;
mod messages;
mod rows;
mod schema;
mod search;
mod settings;
pub mod types;

#[cfg(test)]
mod crash_tests;
#[cfg(test)]
mod load_tests;

pub use db::Store;
pub use documents::NewDocument;
pub use error::{Result, StoreError};
#[cfg(test)]
pub use schema::SCHEMA_VERSION;
pub use settings::MAX_CONTEXT_LENGTH;
pub use types::*;
