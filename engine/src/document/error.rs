//! Why a document could not be read, each with what the user can do about it.

use std::path::{Path, PathBuf};

use super::{MAX_FILE_BYTES, SUPPORTED_EXTENSIONS_TEXT};

/// The file's name for messages (the full path is in the error's fields).
fn name(path: &Path) -> String {
    path.file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_else(|| path.display().to_string())
}

/// What an unsupported file is, by its extension.
fn what(extension: &Option<String>) -> String {
    match extension {
        Some(e) => format!(".{e} files"),
        None => "it has no file extension".into(),
    }
}

fn megabytes(bytes: &u64) -> String {
    format!("{:.1} MB", *bytes as f64 / 1e6)
}

/// What kind of failure, for mapping to the app's error codes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ErrorCategory {
    /// Not a `.txt`, `.md`/`.markdown` or `.pdf` file (IPC `unsupportedFile`).
    UnsupportedFile,
    /// The file cannot be read (IPC `io`).
    Io,
    /// The file was read but holds no usable text (IPC `invalidDocument`).
    InvalidDocument,
}

/// Why a document's text could not be extracted.
#[derive(Debug, thiserror::Error)]
pub enum DocumentError {
    /// The extension is not one the app reads.
    #[error(
        "{} is not a supported document type ({}). KIVI Chat reads {SUPPORTED_EXTENSIONS_TEXT} \
         files: save or export the document in one of those formats",
        name(.path),
        what(.extension)
    )]
    Unsupported {
        /// The file.
        path: PathBuf,
        /// Its extension, if it has one.
        extension: Option<String>,
    },
    /// The file cannot be opened or read.
    #[error(
        "cannot read {}: {source}. Check that the file exists and that you may read it",
        .path.display()
    )]
    Io {
        /// The file.
        path: PathBuf,
        /// The underlying error.
        source: std::io::Error,
    },
    /// The file is larger than [`MAX_FILE_BYTES`].
    #[error(
        "{} is too large ({}); documents can be at most {}. Split it, or keep the part you need",
        name(.path), megabytes(.size), megabytes(&MAX_FILE_BYTES)
    )]
    TooLarge {
        /// The file.
        path: PathBuf,
        /// Its size in bytes.
        size: u64,
    },
    /// The file holds no text (zero bytes, or only whitespace).
    #[error("{} is empty: there is no text in it to read", name(.path))]
    Empty {
        /// The file.
        path: PathBuf,
    },
    /// The file holds binary data, not text.
    #[error(
        "{} does not contain text (it holds binary data). If it is a document in another \
         format, export it as .txt, .md or .pdf; if it is UTF-16 text without a byte-order \
         mark, save it as UTF-8",
        name(.path)
    )]
    Binary {
        /// The file.
        path: PathBuf,
    },
    /// The text is in an encoding the app does not read.
    #[error(
        "{} is not in a text encoding KIVI Chat can read ({detail}). Save it as UTF-8 \
         (in most editors: Save As, encoding UTF-8) and attach it again",
        name(.path)
    )]
    Encoding {
        /// The file.
        path: PathBuf,
        /// What was found, e.g. "invalid UTF-8 at byte 1234".
        detail: String,
    },
    /// A PDF whose pages have no text layer (scanned, or only images).
    #[error(
        "{} has no text layer: its {pages} page(s) contain only images or drawings, as scanned \
         PDFs do. Run it through OCR (text recognition) first, for example with OCRmyPDF or \
         your scanner's software, then attach the result",
        name(.path)
    )]
    NoTextLayer {
        /// The file.
        path: PathBuf,
        /// How many pages it has.
        pages: usize,
    },
    /// A PDF that needs a password to open.
    #[error(
        "{} is protected by a password. Open it in a PDF viewer, save or print it as a new \
         PDF without a password, and attach that",
        name(.path)
    )]
    Encrypted {
        /// The file.
        path: PathBuf,
    },
    /// A PDF that cannot be parsed (damaged, truncated, or not a PDF at all).
    #[error(
        "{} is not a readable PDF ({reason}). It may be damaged or incompletely downloaded: \
         download or export it again",
        name(.path)
    )]
    CorruptPdf {
        /// The file.
        path: PathBuf,
        /// What the parser reported.
        reason: String,
    },
}

impl DocumentError {
    /// What kind of failure this is.
    pub fn category(&self) -> ErrorCategory {
        match self {
            DocumentError::Unsupported { .. } => ErrorCategory::UnsupportedFile,
            DocumentError::Io { .. } => ErrorCategory::Io,
            _ => ErrorCategory::InvalidDocument,
        }
    }

    /// The file the error is about.
    pub fn path(&self) -> &Path {
        match self {
            DocumentError::Unsupported { path, .. }
            | DocumentError::Io { path, .. }
            | DocumentError::TooLarge { path, .. }
            | DocumentError::Empty { path }
            | DocumentError::Binary { path }
            | DocumentError::Encoding { path, .. }
            | DocumentError::NoTextLayer { path, .. }
            | DocumentError::Encrypted { path }
            | DocumentError::CorruptPdf { path, .. } => path,
        }
    }
}
