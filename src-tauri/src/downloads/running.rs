//! The running downloads: each one's pause/cancel switch and live progress.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use kivi_engine::hub::CancellationToken;
use tokio::sync::watch;

use crate::store::DownloadProgress;

/// What a stop of the token means.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Stop {
    Pause,
    Cancel,
}

pub(super) struct Running {
    pub(super) cancel: CancellationToken,
    pub(super) stop: Arc<Mutex<Option<Stop>>>,
    pub(super) progress: Arc<Mutex<DownloadProgress>>,
    pub(super) finished: watch::Receiver<bool>,
}

/// The running downloads.
#[derive(Default)]
pub struct Downloads {
    running: Mutex<HashMap<String, Running>>,
}

impl Downloads {
    pub(super) fn map(&self) -> std::sync::MutexGuard<'_, HashMap<String, Running>> {
        self.running.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The live progress of a running download.
    pub fn progress(&self, repo: &str) -> Option<DownloadProgress> {
        self.map()
            .get(repo)
            .map(|r| r.progress.lock().unwrap_or_else(|p| p.into_inner()).clone())
    }

    /// Stops every running download as a pause (at quit); their state stays resumable.
    pub fn pause_all(&self) {
        for r in self.map().values() {
            *r.stop.lock().unwrap_or_else(|p| p.into_inner()) = Some(Stop::Pause);
            r.cancel.cancel();
        }
    }
}

pub(super) fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}
