//! Shared set-up for the hub tests: a client on a fresh cache folder, an event recorder,
//! and file-tree helpers for "nothing written outside the cache" checks.
#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use kivi_engine::hub::{DownloadEvent, DownloadOptions, HubClient, HubConfig, ProgressSink};

/// A temporary folder holding `hub/` (the cache); its parent is checked for strays.
pub struct Sandbox {
    pub root: tempfile::TempDir,
}

impl Sandbox {
    pub fn new() -> Self {
        Sandbox {
            root: tempfile::tempdir().unwrap(),
        }
    }

    /// The hub cache folder inside the sandbox.
    pub fn cache(&self) -> PathBuf {
        self.root.path().join("hub")
    }

    /// A client for `endpoint` on this sandbox's cache.
    pub fn client(&self, endpoint: &str) -> HubClient {
        HubClient::new(HubConfig::new(self.cache(), endpoint)).unwrap()
    }

    /// An offline client on this sandbox's cache.
    pub fn offline_client(&self) -> HubClient {
        // An endpoint nothing listens on: any request would fail loudly.
        HubClient::new(HubConfig::new(self.cache(), "http://127.0.0.1:9").with_offline(true))
            .unwrap()
    }

    /// Every file or link under the sandbox that is not inside the cache folder.
    pub fn strays(&self) -> Vec<PathBuf> {
        all_entries(self.root.path())
            .into_iter()
            .filter(|p| !p.starts_with(self.cache()))
            .collect()
    }
}

/// Every file, link and folder below `dir` (not following links).
pub fn all_entries(dir: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    let Ok(entries) = std::fs::read_dir(dir) else {
        return out;
    };
    for entry in entries.filter_map(Result::ok) {
        let path = entry.path();
        let is_dir = entry.file_type().map(|t| t.is_dir()).unwrap_or(false);
        out.push(path.clone());
        if is_dir {
            out.extend(all_entries(&path));
        }
    }
    out
}

/// Files under `dir` whose name ends with `suffix`.
pub fn files_ending(dir: &Path, suffix: &str) -> Vec<PathBuf> {
    all_entries(dir)
        .into_iter()
        .filter(|p| p.to_string_lossy().ends_with(suffix))
        .collect()
}

/// A sink that keeps every event.
#[derive(Clone, Default)]
pub struct Recorder(pub Arc<Mutex<Vec<DownloadEvent>>>);

impl Recorder {
    pub fn sink(&self) -> ProgressSink {
        let events = self.0.clone();
        ProgressSink::new(move |e| events.lock().unwrap().push(e))
    }

    pub fn events(&self) -> Vec<DownloadEvent> {
        self.0.lock().unwrap().clone()
    }
}

/// Options with quick retries, so failure tests do not wait seconds.
pub fn fast_options() -> DownloadOptions {
    DownloadOptions::default().with_retries(3, Duration::from_millis(10))
}

/// Options that give up at the first failure (to leave a partial file behind).
pub fn no_retry_options() -> DownloadOptions {
    DownloadOptions::default().with_retries(0, Duration::from_millis(10))
}
