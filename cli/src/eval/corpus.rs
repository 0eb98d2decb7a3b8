//! The texts measurements run on: Moby-Dick and the State of the Union addresses that
//! the project's set-up puts under `.data/texts`.

use std::path::{Path, PathBuf};

use anyhow::{bail, Context, Result};
use kivi_engine::tokenizer::Tokenizer;

/// The whole of Moby-Dick, relative to the repository root.
pub const MOBY_DICK: &str = ".data/texts/moby-dick.txt";

/// A text to measure on, with the name results are reported under.
#[derive(Debug, Clone)]
pub struct Text {
    /// File or folder name.
    pub name: String,
    /// The text (a folder's files joined in name order).
    pub content: String,
}

/// `path` when given, else the offline Moby-Dick found above the current folder or the
/// executable (as the offline model is).
pub fn resolve(path: Option<&Path>) -> Result<PathBuf> {
    if let Some(path) = path {
        return Ok(path.to_path_buf());
    }
    if let Some(found) = crate::args::find_offline(MOBY_DICK) {
        return Ok(found);
    }
    bail!(
        "no --text given and {MOBY_DICK} was not found above the current folder; run \
         scripts/setup.sh data, or pass --text FILE"
    )
}

/// Reads a text file, or every `.txt` file of a folder in name order.
pub fn read(path: &Path) -> Result<Text> {
    let name = path.file_stem().map_or_else(
        || path.display().to_string(),
        |s| s.to_string_lossy().into(),
    );
    let content = if path.is_dir() {
        let mut files: Vec<PathBuf> = std::fs::read_dir(path)
            .with_context(|| format!("cannot list {}", path.display()))?
            .filter_map(|e| e.ok().map(|e| e.path()))
            .filter(|p| p.extension().is_some_and(|e| e == "txt"))
            .collect();
        // Numeric-aware order, so chapter_2 comes before chapter_10.
        files.sort_by_key(|p| natural_key(p));
        if files.is_empty() {
            bail!("{} holds no .txt files", path.display());
        }
        let mut joined = String::new();
        for file in files {
            joined.push_str(
                std::fs::read_to_string(&file)
                    .with_context(|| format!("cannot read {}", file.display()))?
                    .trim(),
            );
            joined.push_str("\n\n");
        }
        joined
    } else {
        std::fs::read_to_string(path).with_context(|| format!("cannot read {}", path.display()))?
    };
    Ok(Text { name, content })
}

fn natural_key(path: &Path) -> (String, u64) {
    let stem = path
        .file_stem()
        .unwrap_or_default()
        .to_string_lossy()
        .into_owned();
    let digits: String = stem
        .chars()
        .rev()
        .take_while(char::is_ascii_digit)
        .collect();
    let number = digits
        .chars()
        .rev()
        .collect::<String>()
        .parse()
        .unwrap_or(0);
    (
        stem.trim_end_matches(|c: char| c.is_ascii_digit())
            .to_string(),
        number,
    )
}

/// The first `count` tokens of `text` (no special tokens), tokenizing only as much of it
/// as needed: the whole book takes seconds, a bench child needs a few thousand tokens.
pub fn leading_tokens(tokenizer: &Tokenizer, text: &str, count: usize) -> Result<Vec<u32>> {
    let ids = prefix_tokens(tokenizer, text, count)?;
    if ids.len() < count {
        bail!(
            "the text has {} tokens, fewer than the {count} needed",
            ids.len()
        );
    }
    Ok(ids)
}

/// Up to `count` leading tokens of `text` (all of them when it is shorter).
pub fn prefix_tokens(tokenizer: &Tokenizer, text: &str, count: usize) -> Result<Vec<u32>> {
    // About 4 characters per token in English prose; grow until enough.
    let mut chars = count.saturating_mul(6).max(1024);
    loop {
        let end = text
            .char_indices()
            .nth(chars)
            .map_or(text.len(), |(i, _)| i);
        let mut ids = tokenizer.encode(&text[..end], false)?;
        // The last token of a cut text may be half a word: only keep it at the true end.
        if ids.len() > count || end == text.len() {
            ids.truncate(count);
            return Ok(ids);
        }
        chars *= 2;
    }
}
