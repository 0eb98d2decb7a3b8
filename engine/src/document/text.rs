//! Plain text: telling text from binary data, decoding it, and normalizing it.
//!
//! Decoding, in order: a byte-order mark decides (UTF-8, UTF-16 LE/BE; UTF-32 is refused);
//! without one, NUL bytes near the start mean binary data; then strict UTF-8; then, for files
//! that are mostly ASCII with a few other bytes (the signature of Latin-1/Windows-1252 files,
//! such as older Project Gutenberg texts), Windows-1252, which is a superset of Latin-1's
//! printable characters. A file with many non-ASCII bytes that is not UTF-8 (Shift-JIS, GBK,
//! ...) is refused with a clear error instead of being turned into mojibake.

use serde::Serialize;

/// The encoding a text document was read in.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "camelCase")]
pub enum TextEncoding {
    /// UTF-8 (with or without a byte-order mark); also plain ASCII.
    Utf8,
    /// UTF-16, little-endian, with a byte-order mark.
    Utf16Le,
    /// UTF-16, big-endian, with a byte-order mark.
    Utf16Be,
    /// Not valid UTF-8 and mostly ASCII: read as Windows-1252 (Latin-1's superset).
    Windows1252,
}

/// Why bytes could not be decoded as text.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum DecodeError {
    /// NUL bytes or many control characters: not text.
    Binary,
    /// Text in an encoding that is not read; the detail says what was found.
    Encoding(String),
}

/// How far into the file NUL bytes mark it as binary (as git's heuristic does).
const BINARY_SNIFF_BYTES: usize = 8000;
/// How many characters the control-character check looks at.
const CONTROL_SNIFF_CHARS: usize = 64 * 1024;
/// More than this share of control characters (besides tab, newline, CR, form feed) is binary.
const MAX_CONTROL_SHARE: f64 = 0.05;
/// At most this share of bytes ≥ 0x80 for the Windows-1252 fallback: Western-European text
/// in Latin-1 has a few percent; double-byte encodings have a third or more.
const MAX_LATIN1_HIGH_SHARE: f64 = 0.25;

/// Decodes a text file's bytes (which must not be empty).
pub(crate) fn decode(bytes: &[u8]) -> Result<(String, TextEncoding), DecodeError> {
    let (text, encoding) =
        if bytes.starts_with(&[0xFF, 0xFE, 0, 0]) || bytes.starts_with(&[0, 0, 0xFE, 0xFF]) {
            return Err(DecodeError::Encoding(
                "UTF-32, which is not supported".into(),
            ));
        } else if let Some(rest) = bytes.strip_prefix(&[0xEF, 0xBB, 0xBF]) {
            (utf8(rest)?, TextEncoding::Utf8)
        } else if let Some(rest) = bytes.strip_prefix(&[0xFF, 0xFE]) {
            (
                utf16(rest, u16::from_le_bytes, "UTF-16 LE")?,
                TextEncoding::Utf16Le,
            )
        } else if let Some(rest) = bytes.strip_prefix(&[0xFE, 0xFF]) {
            (
                utf16(rest, u16::from_be_bytes, "UTF-16 BE")?,
                TextEncoding::Utf16Be,
            )
        } else {
            if bytes[..bytes.len().min(BINARY_SNIFF_BYTES)].contains(&0) {
                return Err(DecodeError::Binary);
            }
            match std::str::from_utf8(bytes) {
                Ok(text) => (text.to_string(), TextEncoding::Utf8),
                Err(e) => (
                    windows_1252(bytes, e.valid_up_to())?,
                    TextEncoding::Windows1252,
                ),
            }
        };
    if looks_binary(&text) {
        return Err(DecodeError::Binary);
    }
    Ok((text, encoding))
}

fn utf8(bytes: &[u8]) -> Result<String, DecodeError> {
    String::from_utf8(bytes.to_vec()).map_err(|e| {
        DecodeError::Encoding(format!(
            "it starts with a UTF-8 byte-order mark but has invalid UTF-8 at byte {}",
            e.utf8_error().valid_up_to() + 3
        ))
    })
}

fn utf16(bytes: &[u8], unit: fn([u8; 2]) -> u16, name: &str) -> Result<String, DecodeError> {
    if !bytes.len().is_multiple_of(2) {
        return Err(DecodeError::Encoding(format!(
            "{name} text must have an even number of bytes; the file may be cut off"
        )));
    }
    let units = bytes.chunks_exact(2).map(|pair| unit([pair[0], pair[1]]));
    char::decode_utf16(units)
        .collect::<Result<String, _>>()
        .map_err(|e| {
            DecodeError::Encoding(format!(
                "invalid {name}: an unpaired surrogate 0x{:04X}",
                e.unpaired_surrogate()
            ))
        })
}

/// Windows-1252's characters for bytes 0x80..=0x9F (`None`: undefined in Windows-1252).
#[rustfmt::skip]
const CP1252_HIGH: [Option<char>; 32] = [
    Some('€'), None, Some('‚'), Some('ƒ'), Some('„'), Some('…'), Some('†'), Some('‡'),
    Some('ˆ'), Some('‰'), Some('Š'), Some('‹'), Some('Œ'), None, Some('Ž'), None,
    None, Some('‘'), Some('’'), Some('“'), Some('”'), Some('•'), Some('–'), Some('—'),
    Some('˜'), Some('™'), Some('š'), Some('›'), Some('œ'), None, Some('ž'), Some('Ÿ'),
];

/// Reads bytes that are not UTF-8 as Windows-1252, if they look like Western-European text.
fn windows_1252(bytes: &[u8], utf8_valid_up_to: usize) -> Result<String, DecodeError> {
    let not_utf8 = || {
        DecodeError::Encoding(format!(
            "invalid UTF-8 at byte {utf8_valid_up_to}, and it does not look like Latin-1 either"
        ))
    };
    let high = bytes.iter().filter(|b| **b >= 0x80).count();
    if high as f64 / bytes.len() as f64 > MAX_LATIN1_HIGH_SHARE {
        return Err(not_utf8());
    }
    bytes
        .iter()
        .map(|&b| match b {
            0x80..=0x9F => CP1252_HIGH[usize::from(b - 0x80)],
            // Latin-1 is the first 256 code points of Unicode.
            _ => Some(char::from(b)),
        })
        .collect::<Option<String>>()
        .ok_or_else(not_utf8)
}

/// Whether decoded text is mostly control characters (a binary file that happened to decode).
fn looks_binary(text: &str) -> bool {
    let mut total = 0usize;
    let mut control = 0usize;
    for c in text.chars().take(CONTROL_SNIFF_CHARS) {
        total += 1;
        if c.is_control() && !matches!(c, '\n' | '\r' | '\t' | '\u{0C}') {
            control += 1;
        }
    }
    total > 0 && control as f64 / total as f64 > MAX_CONTROL_SHARE
}

/// Normalizes extracted text: CRLF and lone CR become LF; a byte-order mark, NUL and other
/// control characters (but tab, newline and form feed) go; blank lines at the start and
/// whitespace at the end are trimmed. Everything else is kept as it was.
pub fn normalize(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut chars = text.chars().peekable();
    while let Some(c) = chars.next() {
        match c {
            '\r' => {
                chars.next_if_eq(&'\n');
                out.push('\n');
            }
            '\n' | '\t' | '\u{0C}' => out.push(c),
            '\u{FEFF}' => {}
            c if c.is_control() => {}
            c => out.push(c),
        }
    }
    let end = out.trim_end().len();
    out.truncate(end);
    // Drop leading blank lines, but keep the first line's indentation.
    let start = out
        .char_indices()
        .take_while(|(_, c)| c.is_whitespace())
        .filter(|(_, c)| *c == '\n')
        .last()
        .map_or(0, |(i, _)| i + 1);
    out.split_off(start)
}

/// Normalizes a PDF page's text further: trailing spaces on each line go, and runs of more
/// than one blank line (frequent between a PDF's text blocks) become one.
#[cfg_attr(not(feature = "pdf"), allow(dead_code))]
pub(crate) fn tidy_pdf_text(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut newlines = 0;
    for line in normalize(text).split('\n') {
        let line = line.trim_end();
        if line.is_empty() {
            newlines += 1;
            continue;
        }
        if !out.is_empty() {
            out.push_str(if newlines >= 1 { "\n\n" } else { "\n" });
        }
        newlines = 0;
        out.push_str(line);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn utf16le(s: &str) -> Vec<u8> {
        let mut v = vec![0xFF, 0xFE];
        v.extend(s.encode_utf16().flat_map(u16::to_le_bytes));
        v
    }

    fn utf16be(s: &str) -> Vec<u8> {
        let mut v = vec![0xFE, 0xFF];
        v.extend(s.encode_utf16().flat_map(u16::to_be_bytes));
        v
    }

    #[test]
    fn utf8_with_and_without_bom() {
        let s = "Ahab — «Straße» 日本 🐋";
        assert_eq!(
            decode(s.as_bytes()).unwrap(),
            (s.to_string(), TextEncoding::Utf8)
        );
        let mut bom = vec![0xEF, 0xBB, 0xBF];
        bom.extend_from_slice(s.as_bytes());
        assert_eq!(decode(&bom).unwrap(), (s.to_string(), TextEncoding::Utf8));
        bom.push(0xFF);
        assert!(
            matches!(decode(&bom), Err(DecodeError::Encoding(d)) if d.contains("byte-order mark"))
        );
    }

    #[test]
    fn utf16_with_bom_both_orders() {
        let s = "Call me Ishmael.\r\nÜber 日本 🐋";
        assert_eq!(
            decode(&utf16le(s)).unwrap(),
            (s.to_string(), TextEncoding::Utf16Le)
        );
        assert_eq!(
            decode(&utf16be(s)).unwrap(),
            (s.to_string(), TextEncoding::Utf16Be)
        );
        let mut odd = utf16le(s);
        odd.pop();
        assert!(matches!(decode(&odd), Err(DecodeError::Encoding(d)) if d.contains("even")));
        let mut lone = vec![0xFF, 0xFE];
        lone.extend(0xD800u16.to_le_bytes());
        lone.extend(u16::from(b'a').to_le_bytes());
        assert!(matches!(decode(&lone), Err(DecodeError::Encoding(d)) if d.contains("surrogate")));
        // UTF-16 without a byte-order mark has NULs: it reads as binary (the message says so).
        let no_bom: Vec<u8> = "plain".encode_utf16().flat_map(u16::to_le_bytes).collect();
        assert_eq!(decode(&no_bom), Err(DecodeError::Binary));
        let utf32 = decode(&[0xFF, 0xFE, 0, 0, b'a', 0, 0, 0]);
        assert!(matches!(utf32, Err(DecodeError::Encoding(d)) if d.contains("UTF-32")));
    }

    #[test]
    fn latin1_and_windows_1252_fall_back() {
        // "Café naïve — “quoted” for 5€" in Windows-1252.
        let bytes = b"Caf\xE9 na\xEFve \x97 \x93quoted\x94 for 5\x80".to_vec();
        let (text, enc) = decode(&bytes).unwrap();
        assert_eq!(enc, TextEncoding::Windows1252);
        assert_eq!(text, "Café naïve — “quoted” for 5€");
        // Byte 0x81 is undefined in Windows-1252.
        assert!(matches!(
            decode(b"abc \x81 def"),
            Err(DecodeError::Encoding(_))
        ));
        // Mostly high bytes (Shift-JIS "日本語のテキスト"): refused, not turned into mojibake.
        let sjis = b"\x93\xfa\x96\x7b\x8c\xea\x82\xcc\x83\x65\x83\x4c\x83\x58\x83\x67";
        let err = decode(sjis).unwrap_err();
        assert!(
            matches!(&err, DecodeError::Encoding(d) if d.contains("invalid UTF-8 at byte 0")),
            "{err:?}"
        );
    }

    #[test]
    fn binary_data_is_recognized() {
        let mut png = b"\x89PNG\r\n\x1a\n\0\0\0\rIHDR".to_vec();
        png.extend([0u8; 100]);
        assert_eq!(decode(&png), Err(DecodeError::Binary));
        // No NULs, valid UTF-8, but mostly control characters.
        let controls: Vec<u8> = (0..2000)
            .map(|i| [1u8, 2, 3, b'a', 0x1B, 7][i % 6])
            .collect();
        assert_eq!(decode(&controls), Err(DecodeError::Binary));
        // A few stray control characters in real text are fine.
        let mut text = "word ".repeat(1000).into_bytes();
        text[10] = 0x07;
        assert!(decode(&text).is_ok());
        // NULs far from the start do not make a text binary (normalize drops them).
        let mut late = "a".repeat(BINARY_SNIFF_BYTES + 10).into_bytes();
        late.push(0);
        assert!(decode(&late).is_ok());
    }

    #[test]
    fn normalization() {
        assert_eq!(normalize("a\r\nb\rc\nd"), "a\nb\nc\nd");
        assert_eq!(
            normalize("\u{FEFF}\n\n  indented\n\ttab\0\u{7}\n\n  \n"),
            "  indented\n\ttab"
        );
        assert_eq!(normalize("x\r\n\r\ny"), "x\n\ny");
        assert_eq!(normalize(" \n\t\n"), "");
        assert_eq!(normalize("page\u{0C}next"), "page\u{0C}next");
    }

    #[test]
    fn pdf_text_tidying() {
        assert_eq!(
            tidy_pdf_text("\n\nLine one  \n\nline two\n\n\n\nPara\nnext\r\n"),
            "Line one\n\nline two\n\nPara\nnext"
        );
    }
}
