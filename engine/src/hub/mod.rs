//! Model download from the Hugging Face hub (or any server with the hub's API), into the
//! standard hub cache so files are shared with every other hub tool.
//!
//! - [`HubClient::list_files`]: a repository's files with sizes and LFS SHA-256s.
//! - [`HubClient::download_snapshot`]: the files a model needs ([`FileSelection`]), with
//!   [`DownloadEvent`]s (per file and total: bytes, rate, ETA), pause/cancel through a
//!   cancellation token, automatic resume (HTTP `Range`) after dropped connections, restarts
//!   and pauses, and verification of every file (size; SHA-256 or git SHA-1). A file that
//!   fails verification is deleted and reported.
//! - [`HubClient::plan_download`] + [`HubClient::download_planned`]: the same in two steps,
//!   so the app can show the size and memory estimate first.
//! - [`HubClient::cached_snapshot`]: the same files from the cache only (offline mode).
//! - [`disk_space`] / [`ensure_free_space`] and [`MemoryEstimate`]: will it fit on disk, in
//!   RAM.
//!
//! Configuration comes from [`HubConfig`] (`HF_HOME`, `HF_HUB_CACHE`, `HF_ENDPOINT`,
//! `HF_HUB_OFFLINE`); the token is passed in by the caller and never logged or shown.
//! Every repo id, revision, file name and blob name from the caller or the server is
//! validated before it becomes a path, so nothing is written outside the cache folder.
//!
//! ```no_run
//! # async fn demo() -> Result<(), kivi_engine::hub::HubError> {
//! use kivi_engine::hub::{DownloadOptions, FileSelection, HubClient, ProgressSink, SnapshotRequest};
//!
//! let client = HubClient::from_env(None)?;
//! let request = SnapshotRequest::parse(
//!     "mlx-community/Llama-3.2-3B-Instruct-4bit",
//!     FileSelection::Runnable,
//! )?;
//! let options = DownloadOptions::default()
//!     .with_progress(ProgressSink::new(|event| println!("{event:?}")));
//! let snapshot = client.download_snapshot(&request, &options).await?;
//! println!("model in {}", snapshot.dir.display());
//! # Ok(()) }
//! ```

mod cache_layout;
mod client;
mod config;
mod disk;
mod download;
mod error;
mod listing;
mod lock;
mod metadata;
mod options;
mod progress;
mod repo_id;
mod repo_path;
mod selection;
mod snapshot;
mod verify;

pub use cache_layout::{RepoCache, INCOMPLETE_SUFFIX};
pub use client::HubClient;
pub use config::{HubConfig, DEFAULT_ENDPOINT};
pub use disk::{disk_space, ensure_free_space, DiskSpace, DISK_RESERVE_BYTES};
pub use error::{HubError, HubResult};
pub use listing::{RepoFile, RepoListing};
// The estimate belongs to the memory budget, which builds without the hub; the download
// plan shows it, so it is named here too.
pub use crate::budget::{MemoryCheck, MemoryEstimate, MemoryFit};
pub use options::DownloadOptions;
pub use progress::{format_bytes, ByteProgress, DownloadEvent, PlannedFile, ProgressSink};
pub use repo_id::{CommitHash, RepoId, Revision};
pub use repo_path::{BlobEtag, RepoFilePath};
pub use selection::{FileSelection, SAFETENSORS_INDEX};
pub use snapshot::{DownloadPlan, Snapshot, SnapshotFile, SnapshotRequest};
pub use verify::ExpectedHash;

/// Re-exported so callers need no direct `tokio-util` dependency for pause/cancel.
pub use tokio_util::sync::CancellationToken;
