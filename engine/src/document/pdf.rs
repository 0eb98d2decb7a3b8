//! A PDF's text layer.
//!
//! Two crates, each for what it does best (measured on PDFs from reportlab, fpdf2 and cairo,
//! and on 900 damaged copies of them; see the report in `mod.rs`):
//!
//! - `pdf-extract` turns a page's glyphs into text using their positions, so words and lines
//!   come out right where other extractors glue or split them (cairo's per-glyph runs give
//!   "C all me" with lopdf's own `extract_text`). But it panics on 2-10% of damaged files
//!   (index out of bounds, `unwrap` on missing objects), so every call runs under
//!   `catch_unwind`, page by page, with lopdf's simpler `extract_text` as the fallback for a
//!   page it cannot read. Its lopdf (0.42) also cannot load a file whose cross-reference
//!   table is broken or missing.
//! - `lopdf` 0.47 never panicked on the same inputs and rebuilds a broken cross-reference
//!   table by scanning the objects (as PDF viewers do). It is used only when pdf-extract's
//!   lopdf cannot load the file: it loads and decrypts it, writes a clean copy, and that copy
//!   goes to pdf-extract.

#[cfg(feature = "pdf")]
use std::cell::Cell;
#[cfg(feature = "pdf")]
use std::collections::BTreeMap;
#[cfg(feature = "pdf")]
use std::panic::{catch_unwind, AssertUnwindSafe};
#[cfg(feature = "pdf")]
use std::sync::Once;

#[cfg(feature = "pdf")]
use pdf_extract::{Document, PlainTextOutput};

#[cfg(feature = "pdf")]
use super::text::tidy_pdf_text;

/// What a PDF yielded.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct PdfText {
    /// The pages' text, separated by blank lines.
    pub text: String,
    /// Pages in the document.
    pub pages: usize,
    /// Pages whose text could not be read (1-based), left out of `text`.
    pub unreadable_pages: Vec<u32>,
    /// The file was damaged and read through a repaired copy.
    pub repaired: bool,
}

/// Why a PDF yielded no text.
#[derive(Debug, Clone, PartialEq, Eq)]
#[cfg_attr(not(feature = "pdf"), allow(dead_code))]
pub(crate) enum PdfError {
    /// It needs a password.
    Encrypted,
    /// It cannot be parsed; the reason is the parser's.
    Corrupt(String),
    /// It parsed, but no page has text.
    NoText {
        /// Pages in the document.
        pages: usize,
    },
}

#[cfg(feature = "pdf")]
thread_local! {
    /// Set while [`guarded`] runs: a panic there is expected and reported as an error.
    static QUIET: Cell<bool> = const { Cell::new(false) };
}

#[cfg(feature = "pdf")]
/// Installs (once) a panic hook that stays silent for panics inside [`guarded`] and passes
/// every other panic to the hook that was there before. Without it each damaged PDF would
/// print pdf-extract's panic message (and, with `RUST_BACKTRACE` set, a backtrace) to stderr.
fn install_quiet_hook() {
    static ONCE: Once = Once::new();
    ONCE.call_once(|| {
        let previous = std::panic::take_hook();
        std::panic::set_hook(Box::new(move |info| {
            if !QUIET.with(Cell::get) {
                previous(info);
            }
        }));
    });
}

#[cfg(feature = "pdf")]
/// Runs `f`, turning a panic into an error message.
fn guarded<T>(f: impl FnOnce() -> T) -> Result<T, String> {
    install_quiet_hook();
    let was_quiet = QUIET.with(|q| q.replace(true));
    let result = catch_unwind(AssertUnwindSafe(f));
    QUIET.with(|q| q.set(was_quiet));
    result.map_err(|payload| {
        payload
            .downcast_ref::<String>()
            .cloned()
            .or_else(|| payload.downcast_ref::<&str>().map(|s| s.to_string()))
            .unwrap_or_else(|| "the PDF parser failed".to_string())
    })
}

#[cfg(feature = "pdf")]
/// Loads the document, repairing it with lopdf 0.47 when needed, and decrypts it.
fn load(bytes: &[u8]) -> Result<(Document, bool), PdfError> {
    let (mut doc, repaired) = match guarded(|| Document::load_mem(bytes)) {
        Ok(Ok(doc)) => (doc, false),
        Ok(Err(first)) => (repair(bytes, &first.to_string())?, true),
        Err(panic) => (repair(bytes, &panic)?, true),
    };
    if doc.is_encrypted() {
        match guarded(|| doc.decrypt("")) {
            Ok(Ok(())) => {}
            Ok(Err(pdf_extract::Error::Decryption(
                pdf_extract::encryption::DecryptionError::IncorrectPassword,
            ))) => return Err(PdfError::Encrypted),
            Ok(Err(e)) => return Err(PdfError::Corrupt(format!("cannot decrypt it: {e}"))),
            Err(panic) => return Err(PdfError::Corrupt(format!("cannot decrypt it: {panic}"))),
        }
    }
    Ok((doc, repaired))
}

#[cfg(feature = "pdf")]
/// Loads a file that pdf-extract's lopdf rejected with lopdf 0.47 (which rebuilds broken
/// cross-reference tables) and hands back a clean copy.
fn repair(bytes: &[u8], first_error: &str) -> Result<Document, PdfError> {
    let corrupt = || PdfError::Corrupt(first_error.to_string());
    let mut fixed = match guarded(|| lopdf::Document::load_mem(bytes)) {
        Ok(Ok(doc)) => doc,
        Ok(Err(lopdf::Error::Decryption(_))) => return Err(PdfError::Encrypted),
        Ok(Err(_)) | Err(_) => return Err(corrupt()),
    };
    // lopdf 0.47 decrypts while loading; what stays encrypted needs a password.
    if fixed.is_encrypted() {
        return Err(PdfError::Encrypted);
    }
    if fixed.get_pages().is_empty() {
        return Err(corrupt());
    }
    let mut clean = Vec::with_capacity(bytes.len());
    match guarded(|| fixed.save_to(&mut clean)) {
        Ok(Ok(())) => {}
        _ => return Err(corrupt()),
    }
    match guarded(|| Document::load_mem(&clean)) {
        Ok(Ok(doc)) => Ok(doc),
        _ => Err(corrupt()),
    }
}

#[cfg(feature = "pdf")]
/// One page's text: pdf-extract's, else lopdf's; `None` when neither can read it.
fn page_text(doc: &Document, page: u32) -> Option<String> {
    let layout = guarded(|| {
        let mut text = String::new();
        pdf_extract::output_doc_page(doc, &mut PlainTextOutput::new(&mut text), page).map(|()| text)
    });
    if let Ok(Ok(text)) = layout {
        return Some(text);
    }
    match guarded(|| doc.extract_text(&[page])) {
        Ok(Ok(text)) => Some(text),
        _ => None,
    }
}

#[cfg(feature = "pdf")]
/// Extracts the text layer of a PDF held in memory.
pub(crate) fn extract(bytes: &[u8]) -> Result<PdfText, PdfError> {
    let (doc, repaired) = load(bytes)?;
    let pages: BTreeMap<u32, _> = guarded(|| doc.get_pages())
        .map_err(|panic| PdfError::Corrupt(format!("cannot read its page tree: {panic}")))?;
    if pages.is_empty() {
        return Err(PdfError::Corrupt("it has no pages".into()));
    }
    let mut text = String::new();
    let mut unreadable_pages = Vec::new();
    for (&page, &id) in &pages {
        let tidy = page_text(&doc, page).map(|raw| tidy_pdf_text(&raw));
        match tidy {
            Some(tidy) if !tidy.is_empty() => {
                if !text.is_empty() {
                    text.push_str("\n\n");
                }
                text.push_str(&tidy);
            }
            // A page without text is fine (a figure, a blank page) if its content is all
            // there; a page whose content stream is missing or broken is damage, which a
            // truncated file shows this way, and must not read as "scanned, needs OCR".
            Some(_) if matches!(guarded(|| doc.get_page_content(id)), Ok(Ok(_))) => {}
            _ => unreadable_pages.push(page),
        }
    }
    if text.is_empty() {
        return Err(if unreadable_pages.is_empty() && !repaired {
            PdfError::NoText { pages: pages.len() }
        } else {
            PdfError::Corrupt(format!(
                "no text could be recovered from its {} page(s)",
                pages.len()
            ))
        });
    }
    Ok(PdfText {
        text,
        pages: pages.len(),
        unreadable_pages,
        repaired,
    })
}

/// Without the `pdf` feature (the fuzz targets' build), a PDF cannot be read.
#[cfg(not(feature = "pdf"))]
pub(crate) fn extract(_bytes: &[u8]) -> Result<PdfText, PdfError> {
    Err(PdfError::Corrupt(
        "this build has no PDF support (the `pdf` feature is off)".into(),
    ))
}
