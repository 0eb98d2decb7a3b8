//! The one error type commands return (IPC.md "Errors"): a machine-readable code, a sentence
//! for the user, and the offending field for `invalidArgument`.

use serde::Serialize;

use kivi_engine::document::{DocumentError, ErrorCategory};
use kivi_engine::hub::HubError;
use kivi_engine::session::EngineError;

use crate::store::StoreError;

/// IPC `ErrorCode`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub enum ErrorCode {
    /// An id does not exist.
    NotFound,
    /// A value breaks a rule (with `field`).
    InvalidArgument,
    /// The chat already runs a generation or prefill; a model in use.
    Busy,
    /// Reserved: an operation was cancelled.
    #[allow(dead_code)]
    Cancelled,
    /// No model is ready.
    ModelNotLoaded,
    /// Loading the model failed.
    ModelLoadFailed,
    /// The prompt does not fit the context.
    ContextOverflow,
    /// Not a .txt, .md/.markdown or .pdf file.
    UnsupportedFile,
    /// A document without usable text.
    InvalidDocument,
    /// Not enough memory.
    InsufficientMemory,
    /// The hub cannot be reached.
    Network,
    /// The server port is taken.
    PortInUse,
    /// A file cannot be read or written.
    Io,
    /// Anything else (a bug).
    Internal,
}

/// What a failing command rejects with.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, thiserror::Error)]
#[serde(rename_all = "camelCase")]
#[error("{message}")]
pub struct CommandError {
    /// What kind of failure.
    pub code: ErrorCode,
    /// Shown to the user as is: what went wrong and what to do.
    pub message: String,
    /// For `invalidArgument`: the argument as a dotted path in the UI's terms.
    pub field: Option<String>,
}

/// The result of every command.
pub type CommandResult<T> = Result<T, CommandError>;

impl CommandError {
    /// An error without a field.
    pub fn new(code: ErrorCode, message: impl Into<String>) -> Self {
        Self {
            code,
            message: message.into(),
            field: None,
        }
    }

    /// `invalidArgument` for `field`.
    pub fn invalid(field: impl Into<String>, message: impl Into<String>) -> Self {
        Self {
            code: ErrorCode::InvalidArgument,
            message: message.into(),
            field: Some(field.into()),
        }
    }

    /// `busy`.
    pub fn busy(message: impl Into<String>) -> Self {
        Self::new(ErrorCode::Busy, message)
    }

    /// `notFound`.
    pub fn not_found(message: impl Into<String>) -> Self {
        Self::new(ErrorCode::NotFound, message)
    }

    /// `internal`.
    pub fn internal(message: impl Into<String>) -> Self {
        Self::new(ErrorCode::Internal, message)
    }

    /// `modelNotLoaded`, saying why.
    pub fn model_not_loaded(why: &str) -> Self {
        Self::new(ErrorCode::ModelNotLoaded, why)
    }
}

/// Capitalizes the first letter, for messages built from lower-case library errors.
pub fn sentence(text: impl AsRef<str>) -> String {
    let text = text.as_ref();
    let mut chars = text.chars();
    match chars.next() {
        Some(first) => first.to_uppercase().chain(chars).collect(),
        None => String::new(),
    }
}

impl From<StoreError> for CommandError {
    fn from(e: StoreError) -> Self {
        let code = match e.ipc_code() {
            "notFound" => ErrorCode::NotFound,
            "invalidArgument" => ErrorCode::InvalidArgument,
            "io" => ErrorCode::Io,
            _ => ErrorCode::Internal,
        };
        CommandError {
            code,
            field: e.field().map(str::to_owned),
            message: sentence(e.to_string()),
        }
    }
}

impl From<DocumentError> for CommandError {
    fn from(e: DocumentError) -> Self {
        let code = match e.category() {
            ErrorCategory::UnsupportedFile => ErrorCode::UnsupportedFile,
            ErrorCategory::Io => ErrorCode::Io,
            ErrorCategory::InvalidDocument => ErrorCode::InvalidDocument,
        };
        CommandError::new(code, sentence(e.to_string()))
    }
}

impl From<HubError> for CommandError {
    fn from(e: HubError) -> Self {
        let code = match &e {
            HubError::InvalidRepoId { .. } => {
                return CommandError::invalid("repoId", sentence(e.to_string()))
            }
            HubError::RepoNotFound { .. }
            | HubError::RevisionNotFound { .. }
            | HubError::FileNotFound { .. }
            | HubError::AccessDenied { .. } => ErrorCode::NotFound,
            HubError::Network { .. }
            | HubError::TransferInterrupted { .. }
            | HubError::HttpStatus { .. }
            | HubError::NotCached { .. } => ErrorCode::Network,
            HubError::NothingToDownload { .. } => ErrorCode::UnsupportedFile,
            HubError::InsufficientDiskSpace { .. }
            | HubError::DiskFull { .. }
            | HubError::Io { .. } => ErrorCode::Io,
            HubError::Cancelled => ErrorCode::Cancelled,
            _ => ErrorCode::Internal,
        };
        CommandError::new(code, sentence(e.to_string()))
    }
}

impl From<EngineError> for CommandError {
    fn from(e: EngineError) -> Self {
        let code = match &e {
            EngineError::ContextOverflow { .. } | EngineError::ContextTooLong { .. } => {
                ErrorCode::ContextOverflow
            }
            EngineError::Load(_) | EngineError::Hub(_) => ErrorCode::ModelLoadFailed,
            EngineError::WorkerGone => ErrorCode::ModelNotLoaded,
            _ => ErrorCode::Internal,
        };
        CommandError::new(code, sentence(e.to_string()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn serializes_as_the_ipc_contract_says() {
        let e = CommandError::invalid("cache.residualLength", "Residual length ...");
        assert_eq!(
            serde_json::to_value(&e).unwrap(),
            json!({"code": "invalidArgument", "message": "Residual length ...", "field": "cache.residualLength"})
        );
        let e = CommandError::new(ErrorCode::PortInUse, "Port 8080 is in use.");
        assert_eq!(
            serde_json::to_value(&e).unwrap(),
            json!({"code": "portInUse", "message": "Port 8080 is in use.", "field": null})
        );
        for (code, name) in [
            (ErrorCode::NotFound, "notFound"),
            (ErrorCode::ModelNotLoaded, "modelNotLoaded"),
            (ErrorCode::ModelLoadFailed, "modelLoadFailed"),
            (ErrorCode::ContextOverflow, "contextOverflow"),
            (ErrorCode::UnsupportedFile, "unsupportedFile"),
            (ErrorCode::InvalidDocument, "invalidDocument"),
            (ErrorCode::InsufficientMemory, "insufficientMemory"),
        ] {
            assert_eq!(serde_json::to_value(code).unwrap(), json!(name));
        }
    }

    #[test]
    fn library_errors_keep_their_message_and_get_a_code() {
        let e: CommandError = StoreError::invalid("title", "The title is empty.").into();
        assert_eq!(e.code, ErrorCode::InvalidArgument);
        assert_eq!(e.field.as_deref(), Some("title"));
        let e: CommandError = StoreError::not_found("chat", "9").into();
        assert_eq!(e.code, ErrorCode::NotFound);
        assert!(
            e.message.starts_with("Chat 9 does not exist"),
            "{}",
            e.message
        );
        let e: CommandError = EngineError::ContextOverflow {
            prompt_tokens: 10,
            context_length: 5,
        }
        .into();
        assert_eq!(e.code, ErrorCode::ContextOverflow);
        assert_eq!(sentence("élan"), "Élan");
    }
}
