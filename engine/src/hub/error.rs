//! The one error type of the hub module.

use std::path::PathBuf;

use super::progress::format_bytes;

/// Everything that can go wrong while listing, downloading or resolving a model.
///
/// Each message says what was wrong and what to do about it; none of them ever contains the
/// access token.
#[derive(Debug, thiserror::Error)]
pub enum HubError {
    /// A repo id that is not `owner/name` with the hub's allowed characters.
    #[error(
        "invalid repo id {id:?}: {reason}; use the form owner/name, \
         for example mlx-community/Llama-3.2-3B-Instruct-4bit"
    )]
    InvalidRepoId { id: String, reason: &'static str },

    /// A revision that could not be a branch, tag or commit.
    #[error(
        "invalid revision {revision:?}: {reason}; use a branch (main), a tag, \
         or a 40-character commit hash"
    )]
    InvalidRevision {
        revision: String,
        reason: &'static str,
    },

    /// A file name (from the server, an index file or the caller) that could escape the cache.
    #[error(
        "refusing the file name {name:?}: {reason}. Nothing was written; the hub \
         (or HF_ENDPOINT) sent a name that would land outside the models folder"
    )]
    UnsafeFileName { name: String, reason: &'static str },

    /// A header value that would become part of a cache path but has an unsafe form.
    #[error(
        "the hub sent an unusable {what} {value:?} for {file}; refusing to use it as a \
         cache path. Check HF_ENDPOINT points at a real hub"
    )]
    BadServerValue {
        what: &'static str,
        value: String,
        file: String,
    },

    /// `HF_ENDPOINT` or the configured endpoint is not an http(s) URL.
    #[error("invalid hub endpoint {endpoint:?}: {reason}; set HF_ENDPOINT to a URL like https://huggingface.co")]
    InvalidEndpoint {
        endpoint: String,
        reason: &'static str,
    },

    /// The token cannot be sent in an HTTP header.
    #[error(
        "the access token contains characters an HTTP header cannot carry; copy it again \
         from the hub's settings page"
    )]
    InvalidToken,

    /// The hub could not be reached, or the connection broke and retries were used up.
    #[error(
        "could not {action} (hub {endpoint}): {detail}. Check the network connection and \
         try again; any partial download is kept and resumes. Set HF_HUB_OFFLINE=1 to use \
         only models already downloaded"
    )]
    Network {
        action: String,
        endpoint: String,
        /// The whole cause chain ("error sending request: ... Connection refused"), as
        /// reqwest's own message names only the outermost step.
        detail: String,
        #[source]
        source: reqwest::Error,
    },

    /// The connection ended without an error but before the whole file arrived.
    #[error(
        "the connection ended after {} of {} of {file}; start the download again, it \
         resumes from there",
        format_bytes(*received), format_bytes(*expected)
    )]
    TransferInterrupted {
        file: String,
        received: u64,
        expected: u64,
    },

    /// The repository does not exist (or is private and no token was given).
    #[error(
        "repository {repo} was not found on {endpoint}; check the repo id, or pass a \
         token if it is private"
    )]
    RepoNotFound { repo: String, endpoint: String },

    /// The revision does not exist in the repository.
    #[error("revision {revision:?} of {repo} was not found; check the branch, tag or commit")]
    RevisionNotFound { repo: String, revision: String },

    /// The file does not exist at that revision.
    #[error("file {file} was not found in {repo} at revision {revision}")]
    FileNotFound {
        repo: String,
        revision: String,
        file: String,
    },

    /// 401/403: private or gated repository.
    #[error(
        "access to {repo} was denied (HTTP {status}); the repo is private or gated: accept \
         its terms on the hub and pass a token with read access"
    )]
    AccessDenied { repo: String, status: u16 },

    /// Any other unexpected HTTP status.
    #[error("the hub answered HTTP {status} while trying to {action}; try again later")]
    HttpStatus { status: u16, action: String },

    /// A response we could not understand.
    #[error("the hub's answer to {action} is not what a hub sends: {detail}")]
    BadResponse { action: String, detail: String },

    /// The downloaded size differs from what the hub announced.
    #[error(
        "{file}: downloaded {actual} bytes but the hub announced {expected}; the damaged \
         download was deleted, start the download again"
    )]
    SizeMismatch {
        file: String,
        expected: u64,
        actual: u64,
    },

    /// The downloaded content does not hash to what the hub announced.
    #[error(
        "{file}: {algorithm} of the downloaded data is {actual}, the hub announced \
         {expected}; the damaged download was deleted, start the download again"
    )]
    HashMismatch {
        file: String,
        algorithm: &'static str,
        expected: String,
        actual: String,
    },

    /// The pre-download check found too little free space.
    #[error(
        "not enough disk space in {}: the download needs {} more but only {} are free; \
         free up space or point HF_HUB_CACHE at a larger disk",
        path.display(), format_bytes(*needed), format_bytes(*available)
    )]
    InsufficientDiskSpace {
        path: PathBuf,
        needed: u64,
        available: u64,
    },

    /// A write failed because the disk (or quota) is full.
    #[error(
        "the disk is full while writing {}; free up space and start the download again \
         (what was downloaded so far is kept and resumes)",
        path.display()
    )]
    DiskFull { path: PathBuf },

    /// Any other file-system failure.
    #[error("could not {action} {}: {source}", path.display())]
    Io {
        action: &'static str,
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },

    /// The caller's cancellation token fired (pause or cancel).
    #[error(
        "download paused; the partial files are kept in the cache and the next download \
         of this model resumes them"
    )]
    Cancelled,

    /// Offline mode and the requested thing is not in the cache.
    #[error(
        "offline mode (HF_HUB_OFFLINE) is on and {what} is not in the cache at {}; \
         connect to the network and download it once, or unset HF_HUB_OFFLINE",
        cache.display()
    )]
    NotCached { what: String, cache: PathBuf },

    /// The selection matched nothing runnable in the repository.
    #[error("{repo} has nothing to download for this selection: {detail}")]
    NothingToDownload { repo: String, detail: String },
}

impl HubError {
    /// Whether trying the same transfer again may succeed (dropped connections, 5xx, 429).
    pub fn is_transient(&self) -> bool {
        match self {
            HubError::Network { .. } | HubError::TransferInterrupted { .. } => true,
            HubError::HttpStatus { status, .. } => *status == 429 || *status >= 500,
            _ => false,
        }
    }

    /// Wraps an I/O error, turning "no space left" into [`HubError::DiskFull`].
    pub(crate) fn io(
        action: &'static str,
        path: impl Into<PathBuf>,
        source: std::io::Error,
    ) -> Self {
        let path = path.into();
        if is_disk_full(&source) {
            HubError::DiskFull { path }
        } else {
            HubError::Io {
                action,
                path,
                source,
            }
        }
    }
}

/// ENOSPC / EDQUOT on Unix, ERROR_DISK_FULL / ERROR_HANDLE_DISK_FULL on Windows. The raw
/// codes matter because `ErrorKind::StorageFull` does not cover quota errors.
fn is_disk_full(error: &std::io::Error) -> bool {
    #[cfg(target_os = "linux")]
    const DISK_FULL_CODES: &[i32] = &[28, 122];
    #[cfg(target_os = "macos")]
    const DISK_FULL_CODES: &[i32] = &[28, 69];
    #[cfg(windows)]
    const DISK_FULL_CODES: &[i32] = &[112, 39];
    #[cfg(not(any(target_os = "linux", target_os = "macos", windows)))]
    const DISK_FULL_CODES: &[i32] = &[28];
    error.kind() == std::io::ErrorKind::StorageFull
        || error
            .raw_os_error()
            .is_some_and(|code| DISK_FULL_CODES.contains(&code))
}

/// The module's result type.
pub type HubResult<T> = Result<T, HubError>;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_full_disk_is_named_as_such() {
        let full = std::io::Error::from(std::io::ErrorKind::StorageFull);
        let err = HubError::io("write", "/cache/blobs/x.incomplete", full);
        assert!(matches!(err, HubError::DiskFull { .. }));
        assert!(err.to_string().contains("free up space"), "{err}");
        #[cfg(unix)]
        assert!(matches!(
            HubError::io("write", "/x", std::io::Error::from_raw_os_error(28)),
            HubError::DiskFull { .. }
        ));
        let other = HubError::io("write", "/x", std::io::Error::other("boom"));
        assert!(matches!(other, HubError::Io { .. }));
    }

    #[test]
    fn transient_errors() {
        assert!(HubError::HttpStatus {
            status: 503,
            action: String::new()
        }
        .is_transient());
        assert!(HubError::HttpStatus {
            status: 429,
            action: String::new()
        }
        .is_transient());
        assert!(!HubError::HttpStatus {
            status: 404,
            action: String::new()
        }
        .is_transient());
        assert!(!HubError::Cancelled.is_transient());
    }
}
