//! One writer per blob: an advisory lock on `.locks/<repo>/<etag>.lock`, where the Python
//! hub client locks too, so two downloads of the same file (two windows, the CLI and the
//! app, or a Python tool) never append to the same partial file.

use std::path::{Path, PathBuf};
use std::time::Duration;

use fs4::{FileExt, TryLockError};
use tokio_util::sync::CancellationToken;

use super::error::{HubError, HubResult};

const POLL: Duration = Duration::from_millis(200);

/// Held while a blob is written; the OS releases it when dropped or when the process dies,
/// so a crash never leaves a stale lock.
#[derive(Debug)]
pub(crate) struct BlobLock {
    _file: Option<std::fs::File>,
}

fn open_lock_file(path: &Path) -> HubResult<std::fs::File> {
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir).map_err(|e| HubError::io("create", dir, e))?;
    }
    std::fs::OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .open(path)
        .map_err(|e| HubError::io("open the lock file", path, e))
}

/// Takes the lock, waiting (cancellably) while another download holds it.
pub(crate) async fn lock_blob(path: PathBuf, cancel: &CancellationToken) -> HubResult<BlobLock> {
    let file = open_lock_file(&path)?;
    loop {
        match try_lock(&file) {
            Ok(true) => return Ok(BlobLock { _file: Some(file) }),
            Ok(false) => {
                tokio::select! {
                    _ = cancel.cancelled() => return Err(HubError::Cancelled),
                    _ = tokio::time::sleep(POLL) => {}
                }
            }
            // File systems without locks (some network mounts): go on unlocked rather than
            // make downloads impossible there.
            Err(e) if e.kind() == std::io::ErrorKind::Unsupported => {
                return Ok(BlobLock { _file: None })
            }
            Err(e) => return Err(HubError::io("lock", path, e)),
        }
    }
}

/// Takes the lock only if it is free: `None` when another download holds it.
pub(crate) fn try_lock_blob(path: &Path) -> HubResult<Option<BlobLock>> {
    let file = open_lock_file(path)?;
    match try_lock(&file) {
        Ok(true) => Ok(Some(BlobLock { _file: Some(file) })),
        Ok(false) => Ok(None),
        Err(e) => Err(HubError::io("lock", path, e)),
    }
}

fn try_lock(file: &std::fs::File) -> std::io::Result<bool> {
    // Through fs4's trait: std's inherent `File::try_lock` is newer than our MSRV.
    match FileExt::try_lock(file) {
        Ok(()) => Ok(true),
        Err(TryLockError::WouldBlock) => Ok(false),
        Err(TryLockError::Error(e)) => Err(e),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn second_lock_waits_until_first_is_dropped() {
        let dir = std::env::temp_dir().join(format!("kivi-lock-test-{}", std::process::id()));
        let path = dir.join("x.lock");
        let cancel = CancellationToken::new();
        let first = lock_blob(path.clone(), &cancel).await.unwrap();
        assert!(try_lock_blob(&path).unwrap().is_none());
        drop(first);
        assert!(try_lock_blob(&path).unwrap().is_some());
        let _ = std::fs::remove_dir_all(dir);
    }
}
