//! Document text extraction: the text of a `.txt`, `.md`/`.markdown` or `.pdf` file, ready
//! to be tokenized and prefilled.
//!
//! [`extract`] reads a file and returns its text with line endings normalized, or a
//! [`DocumentError`] that says what was wrong and what to do. It is CPU- and IO-bound and can
//! take a while on a large PDF: call it from a blocking thread (`spawn_blocking`).
//!
//! - Text and Markdown: kept as they are (Markdown is not rendered), decoded as described in
//!   `text.rs` (UTF-8, UTF-16 with a byte-order mark, else Windows-1252 for mostly-ASCII
//!   files), refused when they hold binary data.
//! - PDF: the text layer, page by page (see `pdf.rs` for the crates and why). A PDF without
//!   one (scanned, images only) is refused with advice to run OCR first.

mod error;
mod pdf;
mod text;

use std::io::Read;
use std::path::{Path, PathBuf};

use serde::Serialize;

pub use error::{DocumentError, ErrorCategory};
pub use text::{normalize, TextEncoding};

/// The largest file read (50 MiB): far more text than any context holds.
pub const MAX_FILE_BYTES: u64 = 50 * 1024 * 1024;

/// The extensions read, without the dot (compared case-insensitively).
pub const SUPPORTED_EXTENSIONS: &[&str] = &["txt", "md", "markdown", "pdf"];

/// [`SUPPORTED_EXTENSIONS`] for messages.
pub(crate) const SUPPORTED_EXTENSIONS_TEXT: &str = ".txt, .md, .markdown and .pdf";

/// What kind of document a file is, by its extension.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "camelCase")]
pub enum DocumentKind {
    /// `.txt`
    Txt,
    /// `.md` or `.markdown`, kept as text.
    Md,
    /// `.pdf`: its text layer.
    Pdf,
}

impl DocumentKind {
    /// The kind for a path's extension, or `Unsupported`.
    pub fn from_path(path: &Path) -> Result<DocumentKind, DocumentError> {
        let extension = path.extension().map(|e| e.to_string_lossy().to_lowercase());
        match extension.as_deref() {
            Some("txt") => Ok(DocumentKind::Txt),
            Some("md" | "markdown") => Ok(DocumentKind::Md),
            Some("pdf") => Ok(DocumentKind::Pdf),
            _ => Err(DocumentError::Unsupported {
                path: path.to_path_buf(),
                extension,
            }),
        }
    }

    /// `txt`, `md` or `pdf`.
    pub fn as_str(self) -> &'static str {
        match self {
            DocumentKind::Txt => "txt",
            DocumentKind::Md => "md",
            DocumentKind::Pdf => "pdf",
        }
    }
}

/// How the text was obtained.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase", rename_all_fields = "camelCase")]
pub enum Source {
    /// A text or Markdown file in this encoding.
    Text {
        /// The encoding it was read in.
        encoding: TextEncoding,
    },
    /// A PDF's text layer.
    Pdf {
        /// Pages in the document.
        pages: usize,
        /// Pages (1-based) whose text could not be read and is missing; usually empty.
        unreadable_pages: Vec<u32>,
        /// The file was damaged (for example a broken cross-reference table) and was read
        /// through a repaired copy.
        repaired: bool,
    },
}

/// A document's text and what is known about the file.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ExtractedDocument {
    /// The file's name, without directories.
    pub name: String,
    /// The path it was read from (absolute when the caller passed an absolute one).
    pub path: PathBuf,
    /// Its kind, by extension.
    pub kind: DocumentKind,
    /// The file's size in bytes.
    pub size_bytes: u64,
    /// The extracted text: LF line endings, never empty.
    pub text: String,
    /// How the text was obtained.
    pub source: Source,
}

/// Reads a document and extracts its text.
pub fn extract(path: &Path) -> Result<ExtractedDocument, DocumentError> {
    let kind = DocumentKind::from_path(path)?;
    let io = |source| DocumentError::Io {
        path: path.to_path_buf(),
        source,
    };
    let file = std::fs::File::open(path).map_err(io)?;
    let meta = file.metadata().map_err(io)?;
    if meta.is_dir() {
        return Err(io(std::io::Error::other("it is a folder, not a file")));
    }
    if meta.len() > MAX_FILE_BYTES {
        return Err(DocumentError::TooLarge {
            path: path.to_path_buf(),
            size: meta.len(),
        });
    }
    // Read at most one byte past the limit, in case the file grows while being read.
    let mut bytes = Vec::with_capacity(meta.len() as usize);
    file.take(MAX_FILE_BYTES + 1)
        .read_to_end(&mut bytes)
        .map_err(io)?;
    if bytes.len() as u64 > MAX_FILE_BYTES {
        return Err(DocumentError::TooLarge {
            path: path.to_path_buf(),
            size: bytes.len() as u64,
        });
    }
    let (text, source) = extract_bytes(kind, &bytes, path)?;
    Ok(ExtractedDocument {
        name: path
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default(),
        path: path.to_path_buf(),
        kind,
        size_bytes: bytes.len() as u64,
        text,
        source,
    })
}

/// Extracts the text of a document held in memory; `path` is only used in errors.
pub fn extract_bytes(
    kind: DocumentKind,
    bytes: &[u8],
    path: &Path,
) -> Result<(String, Source), DocumentError> {
    let path_buf = || path.to_path_buf();
    if bytes.is_empty() {
        return Err(DocumentError::Empty { path: path_buf() });
    }
    let (text, source) = match kind {
        DocumentKind::Txt | DocumentKind::Md => {
            let (decoded, encoding) = text::decode(bytes).map_err(|e| match e {
                text::DecodeError::Binary => DocumentError::Binary { path: path_buf() },
                text::DecodeError::Encoding(detail) => DocumentError::Encoding {
                    path: path_buf(),
                    detail,
                },
            })?;
            (normalize(&decoded), Source::Text { encoding })
        }
        DocumentKind::Pdf => {
            let pdf = pdf::extract(bytes).map_err(|e| match e {
                pdf::PdfError::Encrypted => DocumentError::Encrypted { path: path_buf() },
                pdf::PdfError::Corrupt(reason) => DocumentError::CorruptPdf {
                    path: path_buf(),
                    reason,
                },
                pdf::PdfError::NoText { pages } => DocumentError::NoTextLayer {
                    path: path_buf(),
                    pages,
                },
            })?;
            (
                pdf.text,
                Source::Pdf {
                    pages: pdf.pages,
                    unreadable_pages: pdf.unreadable_pages,
                    repaired: pdf.repaired,
                },
            )
        }
    };
    if text.trim().is_empty() {
        return Err(DocumentError::Empty { path: path_buf() });
    }
    Ok((text, source))
}

#[cfg(test)]
mod tests;
