//! What can go wrong when reading or writing the app's database.

use std::path::PathBuf;

/// An error of the store, with a message the user can act on.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    /// An id names nothing (it was deleted, or never existed).
    #[error(
        "{what} {id} does not exist (it may have been deleted); reload the list and try again"
    )]
    NotFound {
        /// "chat", "message", "document", "download".
        what: &'static str,
        /// The id that was asked for.
        id: String,
    },
    /// A value breaks a rule; `field` names it as the UI does (`title`, `cache.residualLength`).
    #[error("{message}")]
    InvalidArgument {
        /// The offending field as a dotted path.
        field: String,
        /// What is wrong and what would be right.
        message: String,
    },
    /// The database file or its folder cannot be created or opened.
    #[error(
        "cannot open the chat database at {path}: {source}. Check that the folder exists, \
         is writable and the disk is not full"
    )]
    Io {
        /// The database file.
        path: PathBuf,
        /// The underlying error.
        source: std::io::Error,
    },
    /// The database was written by a newer version of the app.
    #[error(
        "the chat database at {path} has schema version {found}, but this version of KIVI \
         Chat knows only up to {known}; update KIVI Chat (or move the file away to start fresh)"
    )]
    TooNew {
        /// The database file.
        path: PathBuf,
        /// Its `user_version`.
        found: u32,
        /// The newest version this build knows.
        known: u32,
    },
    /// SQLite failed (disk full, database locked by another process, corrupt file, ...).
    #[error(
        "the chat database failed: {0}. If the disk is full, free some space; if another \
         KIVI Chat is running, close it"
    )]
    Sqlite(#[from] rusqlite::Error),
    /// A JSON column could not be read or written.
    #[error(
        "the chat database holds data this version cannot read ({0}); it may have been \
         written by another version of KIVI Chat"
    )]
    Json(#[from] serde_json::Error),
}

impl StoreError {
    /// A helper for `InvalidArgument`.
    pub fn invalid(field: impl Into<String>, message: impl Into<String>) -> Self {
        StoreError::InvalidArgument {
            field: field.into(),
            message: message.into(),
        }
    }

    /// A helper for `NotFound`.
    pub fn not_found(what: &'static str, id: impl Into<String>) -> Self {
        StoreError::NotFound {
            what,
            id: id.into(),
        }
    }

    /// The IPC `ErrorCode` this error maps to (`notFound`, `invalidArgument`, `io`, `internal`).
    pub fn ipc_code(&self) -> &'static str {
        match self {
            StoreError::NotFound { .. } => "notFound",
            StoreError::InvalidArgument { .. } => "invalidArgument",
            StoreError::Io { .. } | StoreError::TooNew { .. } | StoreError::Sqlite(_) => "io",
            StoreError::Json(_) => "internal",
        }
    }

    /// The IPC `field` for `invalidArgument`, else `None`.
    pub fn field(&self) -> Option<&str> {
        match self {
            StoreError::InvalidArgument { field, .. } => Some(field),
            _ => None,
        }
    }
}

/// The store's result type.
pub type Result<T, E = StoreError> = std::result::Result<T, E>;
