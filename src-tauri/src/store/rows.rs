//! What the store's tables share: ids, chat rows and their summaries, titles and previews,
//! search patterns.

use rusqlite::{params, Connection, OptionalExtension, Row};

use super::types::ChatSummary;
use super::{Result, StoreError};

/// The title of a chat that has not been named yet (`send_message` replaces it).
pub const DEFAULT_CHAT_TITLE: &str = "New chat";

/// Parses an id the store handed out; anything else names nothing.
pub(super) fn parse_id(what: &'static str, id: &str) -> Result<i64> {
    id.parse::<i64>()
        .ok()
        .filter(|n| *n > 0)
        .ok_or_else(|| StoreError::not_found(what, id))
}

/// A count or size for an INTEGER column (all stay far below 2^63).
pub(super) fn to_sql_int(n: u64) -> i64 {
    i64::try_from(n).unwrap_or(i64::MAX)
}

/// Collapses all whitespace (newlines included) to single spaces.
fn one_line(text: &str) -> String {
    text.split_whitespace().collect::<Vec<_>>().join(" ")
}

/// Cuts `text` to at most `max` characters, ending in "…" when it was cut. With `at_word`
/// it cuts before a word that would not fit, unless that leaves less than half.
fn truncate_chars(text: &str, max: usize, at_word: bool) -> String {
    if text.chars().count() <= max {
        return text.to_string();
    }
    let keep: String = text.chars().take(max.saturating_sub(1)).collect();
    let mut cut = keep.as_str();
    if at_word {
        // Cut at the last space when the next character continues a word.
        let next = text.chars().nth(max.saturating_sub(1));
        if next.is_some_and(|c| !c.is_whitespace()) {
            if let Some(space) = keep.rfind(' ') {
                if keep[..space].chars().count() >= max / 2 {
                    cut = &keep[..space];
                }
            }
        }
    }
    format!("{}…", cut.trim_end())
}

/// A message's preview in the chat list: one line, at most 120 characters.
pub fn preview_of(text: &str) -> String {
    truncate_chars(&one_line(text), 120, false)
}

/// The title `send_message` gives a "New chat" from its first message: one line, at most
/// 48 characters, cut at a word with "…".
pub fn title_from_message(content: &str) -> String {
    let title = truncate_chars(&one_line(content), 48, true);
    if title.is_empty() {
        DEFAULT_CHAT_TITLE.to_string()
    } else {
        title
    }
}

/// The columns of a [`ChatSummary`], for `c` = chats. Counts use the `(chat_id, id)`
/// indexes; the preview reads one message per chat, the last with text (an answer that has
/// just started has none yet), cut to what a preview can use.
pub(crate) const SUMMARY_COLUMNS: &str = "c.id, c.title, c.created_at, c.updated_at,
    (SELECT count(*) FROM messages m WHERE m.chat_id = c.id),
    (SELECT count(*) FROM documents d WHERE d.chat_id = c.id),
    (SELECT substr(m.content, 1, 1000) FROM messages m WHERE m.chat_id = c.id
        AND m.content <> '' ORDER BY m.id DESC LIMIT 1)";

pub(crate) fn summary_from_row(row: &Row<'_>) -> rusqlite::Result<ChatSummary> {
    let preview: Option<String> = row.get(6)?;
    Ok(ChatSummary {
        id: row.get::<_, i64>(0)?.to_string(),
        title: row.get(1)?,
        created_at: row.get::<_, i64>(2)? as u64,
        updated_at: row.get::<_, i64>(3)? as u64,
        message_count: row.get::<_, i64>(4)? as u64,
        document_count: row.get::<_, i64>(5)? as u64,
        preview: preview.as_deref().map(preview_of).unwrap_or_default(),
    })
}

/// Escapes `%`, `_` and `\` for `LIKE ... ESCAPE '\'` and wraps the query in `%...%`.
pub(crate) fn like_pattern(query: &str) -> String {
    let mut pattern = String::with_capacity(query.len() + 2);
    pattern.push('%');
    for c in query.chars() {
        if matches!(c, '%' | '_' | '\\') {
            pattern.push('\\');
        }
        pattern.push(c);
    }
    pattern.push('%');
    pattern
}

/// Fails with `NotFound` unless the chat exists.
pub(crate) fn require_chat(conn: &Connection, chat: i64, id: &str) -> Result<()> {
    let exists = conn
        .query_row("SELECT 1 FROM chats WHERE id = ?1", [chat], |_| Ok(()))
        .optional()?;
    exists.ok_or_else(|| StoreError::not_found("chat", id))
}

/// Marks a chat changed now.
pub(crate) fn touch(conn: &Connection, chat: i64, now: u64) -> Result<()> {
    conn.execute(
        "UPDATE chats SET updated_at = ?2 WHERE id = ?1",
        params![chat, now as i64],
    )?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_that_are_not_ours_are_not_found() {
        for bad in ["", "abc", "-1", "0", "1.5", "99999999999999999999"] {
            assert!(matches!(
                parse_id("chat", bad),
                Err(StoreError::NotFound { what: "chat", .. })
            ));
        }
        assert_eq!(parse_id("chat", "42").unwrap(), 42);
    }

    #[test]
    fn previews_are_one_line_and_short() {
        assert_eq!(preview_of(""), "");
        assert_eq!(preview_of("  Hello\n\n  world\t!  "), "Hello world !");
        let long = "word ".repeat(100);
        let p = preview_of(&long);
        assert_eq!(p.chars().count(), 120);
        assert!(p.ends_with('…'));
        let wide = "日本語".repeat(100);
        assert_eq!(preview_of(&wide).chars().count(), 120);
    }

    #[test]
    fn titles_are_cut_at_a_word() {
        assert_eq!(title_from_message("  What is KIVI?\n"), "What is KIVI?");
        let t = title_from_message(
            "Please summarize the second chapter of the attached report in five bullet points",
        );
        assert!(t.chars().count() <= 48, "{t}");
        assert_eq!(t, "Please summarize the second chapter of the…");
        let word = "a".repeat(100);
        let t = title_from_message(&word);
        assert_eq!(t.chars().count(), 48);
        assert!(t.ends_with('…'));
        assert_eq!(title_from_message(" \n "), DEFAULT_CHAT_TITLE);
    }

    #[test]
    fn like_patterns_escape_wildcards() {
        assert_eq!(like_pattern("a%b_c\\d"), "%a\\%b\\_c\\\\d%");
    }
}
