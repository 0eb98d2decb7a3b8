//! Free disk space, checked before a download so a full disk is reported up front rather
//! than half-way through a multi-gigabyte file.

use std::path::{Path, PathBuf};

use serde::Serialize;

use super::error::{HubError, HubResult};

/// Left free on top of what a download needs, so the disk is never filled to the last byte
/// (the OS, the app's database and logs need room too).
pub const DISK_RESERVE_BYTES: u64 = 256 * 1024 * 1024;

/// Space on the file system that holds a path.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct DiskSpace {
    /// The existing folder that was measured (the path itself or its nearest parent).
    pub measured_at: PathBuf,
    /// Bytes an unprivileged user can still write.
    pub available: u64,
    /// Size of the file system.
    pub total: u64,
}

/// Measures the file system that holds `path`; `path` need not exist yet (the cache folder
/// before the first download), its nearest existing parent is measured instead.
pub fn disk_space(path: &Path) -> HubResult<DiskSpace> {
    let mut probe = path.to_path_buf();
    while !probe.exists() {
        if !probe.pop() {
            probe = PathBuf::from(".");
            break;
        }
    }
    let stats =
        fs4::statvfs(&probe).map_err(|e| HubError::io("measure free space on", &probe, e))?;
    Ok(DiskSpace {
        measured_at: probe,
        available: stats.available_space(),
        total: stats.total_space(),
    })
}

/// Fails with [`HubError::InsufficientDiskSpace`] unless `needed` bytes plus
/// [`DISK_RESERVE_BYTES`] fit on the disk that holds `path`.
pub fn ensure_free_space(path: &Path, needed: u64) -> HubResult<DiskSpace> {
    let space = disk_space(path)?;
    if needed.saturating_add(DISK_RESERVE_BYTES) > space.available {
        return Err(HubError::InsufficientDiskSpace {
            path: space.measured_at,
            needed,
            available: space.available,
        });
    }
    Ok(space)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn measures_a_path_that_does_not_exist_yet() {
        let dir = std::env::temp_dir().join("kivi-no-such-dir/a/b");
        let space = disk_space(&dir).unwrap();
        assert!(space.total > 0);
        assert!(dir.starts_with(&space.measured_at));
    }

    #[test]
    fn refuses_an_impossible_download() {
        let err = ensure_free_space(&std::env::temp_dir(), u64::MAX / 2).unwrap_err();
        assert!(matches!(err, HubError::InsufficientDiskSpace { .. }));
        assert!(err.to_string().contains("HF_HUB_CACHE"), "{err}");
    }
}
