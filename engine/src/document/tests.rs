//! Extraction from real files: text files written here, PDFs from real producers in
//! `tests/fixtures/documents/` (made by `make_pdfs.py` there), and damaged copies of them.

use std::path::{Path, PathBuf};

use super::*;

fn fixture(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures/documents")
        .join(name)
}

fn write(dir: &Path, name: &str, bytes: &[u8]) -> PathBuf {
    let path = dir.join(name);
    std::fs::write(&path, bytes).unwrap();
    path
}

const PAGE_1: &str = "Call me Ishmael. Some years ago, never mind how long precisely,\n\
    having little or no money in my purse, and nothing particular\n\
    to interest me on shore, I thought I would sail about a little.";
const PAGE_2_LAST: &str = "Accents survive: café, naïve, Straße, déjà vu, Ærø.";

/// The text with all whitespace runs made single spaces (producers differ in line breaks).
fn words(text: &str) -> String {
    text.split_whitespace().collect::<Vec<_>>().join(" ")
}

#[test]
fn text_and_markdown_files() {
    let dir = tempfile::tempdir().unwrap();
    let txt = write(
        dir.path(),
        "notes.txt",
        b"\n\nFirst line\r\nsecond\rthird\n\n",
    );
    let doc = extract(&txt).unwrap();
    assert_eq!(doc.text, "First line\nsecond\nthird");
    assert_eq!(doc.kind, DocumentKind::Txt);
    assert_eq!(doc.name, "notes.txt");
    assert_eq!(doc.path, txt);
    assert_eq!(doc.size_bytes, 28);
    assert_eq!(
        doc.source,
        Source::Text {
            encoding: TextEncoding::Utf8
        }
    );

    let md = "# Title\n\n- *item* with `code`\n\n```rust\nfn main() {}\n```";
    for name in ["README.md", "guide.markdown", "UPPER.MD", "Notes.Txt"] {
        let doc = extract(&write(dir.path(), name, md.as_bytes())).unwrap();
        assert_eq!(doc.text, md, "{name}: Markdown is kept as text");
    }
    assert_eq!(
        DocumentKind::from_path(Path::new("a.markdown")).unwrap(),
        DocumentKind::Md
    );
    assert_eq!(
        serde_json::to_value(DocumentKind::Md).unwrap(),
        serde_json::json!("md")
    );
}

#[test]
fn utf16_and_latin1_files() {
    let dir = tempfile::tempdir().unwrap();
    let text = "Über die Straße\r\n日本語 🐋";
    let mut le = vec![0xFF, 0xFE];
    le.extend(text.encode_utf16().flat_map(u16::to_le_bytes));
    let doc = extract(&write(dir.path(), "utf16.txt", &le)).unwrap();
    assert_eq!(doc.text, "Über die Straße\n日本語 🐋");
    assert_eq!(
        doc.source,
        Source::Text {
            encoding: TextEncoding::Utf16Le
        }
    );
    let mut be = vec![0xFE, 0xFF];
    be.extend(text.encode_utf16().flat_map(u16::to_be_bytes));
    assert_eq!(
        extract(&write(dir.path(), "utf16be.md", &be)).unwrap().text,
        "Über die Straße\n日本語 🐋"
    );

    // ISO-8859-1, as older Project Gutenberg files are.
    let latin1 = b"The caf\xE9 on the \xEEle de la Cit\xE9 served cr\xEApes \xE0 la carte.\n";
    let doc = extract(&write(dir.path(), "latin1.txt", latin1)).unwrap();
    assert_eq!(
        doc.text,
        "The café on the île de la Cité served crêpes à la carte."
    );
    assert_eq!(
        doc.source,
        Source::Text {
            encoding: TextEncoding::Windows1252
        }
    );
}

#[test]
fn files_that_are_not_text() {
    let dir = tempfile::tempdir().unwrap();
    let check = |name: &str, bytes: &[u8], expect: &dyn Fn(&DocumentError) -> bool| {
        let err = extract(&write(dir.path(), name, bytes)).unwrap_err();
        assert!(expect(&err), "{name}: {err:?}");
        assert_eq!(err.category(), ErrorCategory::InvalidDocument);
        assert!(err.to_string().contains(name), "{err}");
    };
    check("empty.txt", b"", &|e| {
        matches!(e, DocumentError::Empty { .. })
    });
    check("blank.md", b"  \r\n\t\n", &|e| {
        matches!(e, DocumentError::Empty { .. })
    });
    let mut elf = b"\x7fELF\x02\x01\x01\0\0\0\0\0\0\0\0\0".to_vec();
    elf.extend((0..4000u32).map(|i| (i * 7 % 251) as u8));
    check("program.txt", &elf, &|e| {
        matches!(e, DocumentError::Binary { .. })
    });
    let err = extract(&write(dir.path(), "p.txt", &elf)).unwrap_err();
    assert!(err.to_string().contains("binary data"), "{err}");
    // Shift-JIS: not UTF-8, and too many high bytes to be Latin-1.
    let sjis = b"\x93\xfa\x96\x7b\x8c\xea\x82\xcc\x83\x65\x83\x4c\x83\x58\x83\x67\x82\xc5\x82\xb7";
    check("japanese.txt", sjis, &|e| {
        matches!(e, DocumentError::Encoding { .. }) && e.to_string().contains("Save it as UTF-8")
    });
    // A PDF saved with a .txt name is binary too.
    let pdf = std::fs::read(fixture("fpdf2-truetype.pdf")).unwrap();
    let err = extract(&write(dir.path(), "renamed.txt", &pdf)).unwrap_err();
    assert!(
        matches!(
            err,
            DocumentError::Binary { .. } | DocumentError::Encoding { .. }
        ),
        "{err:?}"
    );
}

#[test]
fn unsupported_missing_and_oversized_files() {
    let dir = tempfile::tempdir().unwrap();
    for name in ["report.docx", "README", "archive.tar.gz", "slides.PPTX"] {
        let err = extract(&write(dir.path(), name, b"x")).unwrap_err();
        assert!(matches!(err, DocumentError::Unsupported { .. }), "{err:?}");
        assert_eq!(err.category(), ErrorCategory::UnsupportedFile);
        let msg = err.to_string();
        assert!(msg.contains(".txt, .md, .markdown and .pdf"), "{msg}");
    }
    assert!(extract(&dir.path().join("x.docx"))
        .unwrap_err()
        .to_string()
        .contains(".docx files"));
    assert!(extract(&dir.path().join("README"))
        .unwrap_err()
        .to_string()
        .contains("no file extension"));

    let missing = extract(&dir.path().join("missing.txt")).unwrap_err();
    assert!(matches!(missing, DocumentError::Io { .. }), "{missing:?}");
    assert_eq!(missing.category(), ErrorCategory::Io);
    assert!(missing.to_string().contains("missing.txt"));
    let folder = dir.path().join("folder.md");
    std::fs::create_dir(&folder).unwrap();
    assert!(matches!(
        extract(&folder).unwrap_err(),
        DocumentError::Io { .. }
    ));

    // A sparse file just over the limit: refused before it is read.
    let big = dir.path().join("big.txt");
    std::fs::File::create(&big)
        .unwrap()
        .set_len(MAX_FILE_BYTES + 1)
        .unwrap();
    let err = extract(&big).unwrap_err();
    assert!(
        matches!(err, DocumentError::TooLarge { size, .. } if size == MAX_FILE_BYTES + 1),
        "{err:?}"
    );
    assert!(err.to_string().contains("52.4 MB"), "{err}");
}

#[test]
fn pdfs_from_real_producers() {
    for name in [
        "reportlab-helvetica.pdf",
        "fpdf2-truetype.pdf",
        "cairo-truetype.pdf",
        "encrypted-owner-only.pdf",
    ] {
        let doc = extract(&fixture(name)).unwrap();
        assert_eq!(doc.kind, DocumentKind::Pdf);
        assert_eq!(
            doc.source,
            Source::Pdf {
                pages: 2,
                unreadable_pages: vec![],
                repaired: false
            },
            "{name}"
        );
        let text = words(&doc.text);
        assert!(text.starts_with(&words(PAGE_1)), "{name}: {:?}", doc.text);
        assert!(
            text.contains("keys per channel and values per token"),
            "{name}"
        );
        // cairo places "Ærø" as two runs; pdf-extract sees the gap as a space.
        assert!(
            text.ends_with(PAGE_2_LAST) || text.ends_with("déjà vu, Æ rø."),
            "{name}: {text}"
        );
        assert!(!doc.text.contains('\r') && !doc.text.contains("\n\n\n"));
    }
    // Lines stay lines.
    let doc = extract(&fixture("reportlab-helvetica.pdf")).unwrap();
    assert!(doc.text.starts_with(PAGE_1), "{:?}", doc.text);
    assert_eq!(
        serde_json::to_value(&doc.source).unwrap(),
        serde_json::json!({"pdf": {"pages": 2, "unreadablePages": [], "repaired": false}})
    );
}

#[test]
fn pdfs_without_text_need_ocr() {
    for name in ["image-only.pdf", "empty-page.pdf"] {
        let err = extract(&fixture(name)).unwrap_err();
        assert!(
            matches!(err, DocumentError::NoTextLayer { pages: 1, .. }),
            "{name}: {err:?}"
        );
        assert!(err.to_string().contains("OCR"), "{err}");
        assert_eq!(err.category(), ErrorCategory::InvalidDocument);
    }
}

#[test]
fn password_protected_pdf() {
    let err = extract(&fixture("encrypted-user-password.pdf")).unwrap_err();
    assert!(matches!(err, DocumentError::Encrypted { .. }), "{err:?}");
    assert!(err.to_string().contains("password"), "{err}");
}

#[test]
fn damaged_pdfs() {
    let dir = tempfile::tempdir().unwrap();
    let good = std::fs::read(fixture("reportlab-helvetica.pdf")).unwrap();

    // Every byte offset shifted (a line added after the header): repaired, text intact.
    let header_end = good.iter().position(|b| *b == b'\n').unwrap() + 1;
    let mut shifted = good[..header_end].to_vec();
    shifted.extend_from_slice(b"% this line moves every object\n");
    shifted.extend_from_slice(&good[header_end..]);
    let doc = extract(&write(dir.path(), "shifted.pdf", &shifted)).unwrap();
    assert!(matches!(doc.source, Source::Pdf { repaired: true, .. }));
    assert!(doc.text.starts_with(PAGE_1), "{:?}", doc.text);

    // The cross-reference table and trailer cut off: rebuilt from the objects.
    let xref = good.windows(4).rposition(|w| w == b"xref").unwrap();
    let doc = extract(&write(dir.path(), "no-xref.pdf", &good[..xref])).unwrap();
    assert!(words(&doc.text).ends_with(PAGE_2_LAST));

    // Cut in the middle (an interrupted download): refused as damaged.
    let half = &good[..good.len() / 2];
    let err = extract(&write(dir.path(), "truncated.pdf", half)).unwrap_err();
    assert!(matches!(err, DocumentError::CorruptPdf { .. }), "{err:?}");
    assert!(err.to_string().contains("damaged"), "{err}");

    // Not a PDF at all, and a PDF header followed by garbage.
    for (name, bytes) in [
        (
            "html.pdf",
            b"<html><body>404 Not Found</body></html>".to_vec(),
        ),
        (
            "garbage.pdf",
            [&b"%PDF-1.7\n"[..], &[0xA7u8; 3000][..]].concat(),
        ),
    ] {
        let err = extract(&write(dir.path(), name, &bytes)).unwrap_err();
        assert!(
            matches!(err, DocumentError::CorruptPdf { .. }),
            "{name}: {err:?}"
        );
    }
}

/// Damaged copies of the fixtures (cut, bytes overwritten, ranges deleted): extraction
/// returns text or a `DocumentError`, and never panics (pdf-extract's panics are caught).
#[test]
fn damaged_pdfs_never_panic() {
    let mut seed = 0x5eed_u64;
    let mut next = move || {
        seed = seed
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        (seed >> 33) as usize
    };
    let (mut ok, mut failed) = (0, 0);
    for name in [
        "reportlab-helvetica.pdf",
        "fpdf2-truetype.pdf",
        "cairo-truetype.pdf",
    ] {
        let good = std::fs::read(fixture(name)).unwrap();
        for i in 0..60 {
            let mut bytes = good.clone();
            match i % 3 {
                0 => bytes.truncate(next() % good.len()),
                1 => {
                    for _ in 0..1 + next() % 8 {
                        let at = next() % bytes.len();
                        bytes[at] = next() as u8;
                    }
                }
                _ => {
                    let at = next() % bytes.len();
                    let end = (at + next() % 200).min(bytes.len());
                    bytes.drain(at..end);
                }
            }
            match extract_bytes(DocumentKind::Pdf, &bytes, Path::new("fuzz.pdf")) {
                Ok((text, _)) => {
                    assert!(!text.trim().is_empty());
                    ok += 1;
                }
                Err(e) => {
                    assert_eq!(e.category(), ErrorCategory::InvalidDocument, "{e:?}");
                    failed += 1;
                }
            }
        }
    }
    println!("damaged PDFs: {ok} read, {failed} refused");
}
