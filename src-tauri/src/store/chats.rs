//! Chats: the list (with search), create, rename, system prompt, delete, and a whole chat.

use rusqlite::{params, Connection, OptionalExtension};

use super::rows::{parse_id, summary_from_row, DEFAULT_CHAT_TITLE, SUMMARY_COLUMNS};
use super::types::{Chat, ChatCacheInfo, ChatSummary};
use super::{Result, Store, StoreError};

/// The longest chat title, in characters.
pub const MAX_TITLE_CHARS: usize = 200;

/// Trims a title and checks its length.
fn clean_title(title: &str) -> Result<String> {
    let title = title.trim();
    let chars = title.chars().count();
    if chars == 0 {
        return Err(StoreError::invalid(
            "title",
            "The title is empty. Type a name for the chat.",
        ));
    }
    if chars > MAX_TITLE_CHARS {
        return Err(StoreError::invalid(
            "title",
            format!("The title is {chars} characters long; use at most {MAX_TITLE_CHARS}."),
        ));
    }
    Ok(title.to_string())
}

pub(crate) fn summary(conn: &Connection, chat: i64, id: &str) -> Result<ChatSummary> {
    let sql = format!("SELECT {SUMMARY_COLUMNS} FROM chats c WHERE c.id = ?1");
    conn.query_row(&sql, [chat], summary_from_row)
        .optional()?
        .ok_or_else(|| StoreError::not_found("chat", id))
}

pub(crate) fn whole_chat(conn: &Connection, chat: i64, id: &str) -> Result<Chat> {
    let s = summary(conn, chat, id)?;
    let system_prompt: String = conn.query_row(
        "SELECT system_prompt FROM chats WHERE id = ?1",
        [chat],
        |r| r.get(0),
    )?;
    Ok(Chat {
        id: s.id,
        title: s.title,
        created_at: s.created_at,
        updated_at: s.updated_at,
        message_count: s.message_count,
        document_count: s.document_count,
        preview: s.preview,
        system_prompt,
        messages: super::messages::list(conn, chat)?,
        documents: super::documents::list(conn, chat)?,
        cache: ChatCacheInfo::default(),
    })
}

impl Store {
    /// Every chat, most recently updated first; with a non-empty `query`, only those whose
    /// title or any message contains it (case-insensitive substring).
    ///
    /// Search scans titles and contents (see `search.rs` for the measurements and why no
    /// index): about 15 ms without a match on 10,000 messages, in a release build.
    pub fn list_chats(&self, query: Option<&str>) -> Result<Vec<ChatSummary>> {
        let conn = self.conn();
        let query = query.map(str::trim).filter(|q| !q.is_empty());
        let Some(query) = query else {
            let sql = format!(
                "SELECT {SUMMARY_COLUMNS} FROM chats c ORDER BY c.updated_at DESC, c.id DESC"
            );
            let mut stmt = conn.prepare_cached(&sql)?;
            let rows = stmt.query_map([], summary_from_row)?;
            return Ok(rows.collect::<rusqlite::Result<_>>()?);
        };
        super::search::search_chats(&conn, query)
    }

    /// Creates an empty chat; `title` `None` (or blank) gives "New chat".
    pub fn create_chat(&self, title: Option<&str>, system_prompt: Option<&str>) -> Result<Chat> {
        let title = match title.map(str::trim).filter(|t| !t.is_empty()) {
            Some(t) => clean_title(t)?,
            None => DEFAULT_CHAT_TITLE.to_string(),
        };
        let now = self.now() as i64;
        let conn = self.conn();
        conn.execute(
            "INSERT INTO chats (title, system_prompt, created_at, updated_at)
             VALUES (?1, ?2, ?3, ?3)",
            params![title, system_prompt.unwrap_or(""), now],
        )?;
        let chat = conn.last_insert_rowid();
        whole_chat(&conn, chat, &chat.to_string())
    }

    /// A chat with its messages (oldest first) and documents (attach order).
    pub fn get_chat(&self, chat_id: &str) -> Result<Chat> {
        let chat = parse_id("chat", chat_id)?;
        whole_chat(&self.conn(), chat, chat_id)
    }

    /// One chat's list entry.
    pub fn chat_summary(&self, chat_id: &str) -> Result<ChatSummary> {
        let chat = parse_id("chat", chat_id)?;
        summary(&self.conn(), chat, chat_id)
    }

    /// Renames a chat (trimmed, 1..=200 characters).
    pub fn rename_chat(&self, chat_id: &str, title: &str) -> Result<ChatSummary> {
        let chat = parse_id("chat", chat_id)?;
        let title = clean_title(title)?;
        let now = self.now() as i64;
        let conn = self.conn();
        let changed = conn.execute(
            "UPDATE chats SET title = ?2, updated_at = ?3 WHERE id = ?1",
            params![chat, title, now],
        )?;
        if changed == 0 {
            return Err(StoreError::not_found("chat", chat_id));
        }
        summary(&conn, chat, chat_id)
    }

    /// Replaces a chat's system prompt ("" for none).
    pub fn set_system_prompt(&self, chat_id: &str, system_prompt: &str) -> Result<Chat> {
        let chat = parse_id("chat", chat_id)?;
        let now = self.now() as i64;
        let conn = self.conn();
        let changed = conn.execute(
            "UPDATE chats SET system_prompt = ?2, updated_at = ?3 WHERE id = ?1",
            params![chat, system_prompt, now],
        )?;
        if changed == 0 {
            return Err(StoreError::not_found("chat", chat_id));
        }
        whole_chat(&conn, chat, chat_id)
    }

    /// Deletes a chat with its messages and documents (one statement: foreign keys cascade).
    pub fn delete_chat(&self, chat_id: &str) -> Result<()> {
        let chat = parse_id("chat", chat_id)?;
        let changed = self
            .conn()
            .execute("DELETE FROM chats WHERE id = ?1", [chat])?;
        if changed == 0 {
            return Err(StoreError::not_found("chat", chat_id));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::super::types::{MessageStatus, Role};
    use super::super::{NewDocument, Store, StoreError};
    use super::*;
    use crate::store::DocumentKind;

    fn titles(store: &Store, query: Option<&str>) -> Vec<String> {
        store
            .list_chats(query)
            .unwrap()
            .into_iter()
            .map(|c| c.title)
            .collect()
    }

    #[test]
    fn create_get_rename_and_list_most_recent_first() {
        let store = Store::open_in_memory().unwrap();
        let a = store.create_chat(None, None).unwrap();
        assert_eq!(a.title, "New chat");
        assert_eq!(a.system_prompt, "");
        assert!(a.messages.is_empty() && a.documents.is_empty());
        assert_eq!(a.cache, ChatCacheInfo::default());
        assert_eq!(a.created_at, a.updated_at);
        let b = store
            .create_chat(Some("  Report  "), Some("Be brief."))
            .unwrap();
        assert_eq!(b.title, "Report");
        assert_eq!(b.system_prompt, "Be brief.");
        assert_eq!(titles(&store, None), ["Report", "New chat"]);

        let renamed = store.rename_chat(&a.id, "  Moby-Dick  ").unwrap();
        assert_eq!(renamed.title, "Moby-Dick");
        assert!(renamed.updated_at > a.updated_at);
        assert_eq!(titles(&store, None), ["Moby-Dick", "Report"]);

        let got = store.get_chat(&b.id).unwrap();
        assert_eq!(got.summary(), store.chat_summary(&b.id).unwrap());
        let prompt = store.set_system_prompt(&b.id, "Answer in French.").unwrap();
        assert_eq!(prompt.system_prompt, "Answer in French.");
        assert_eq!(titles(&store, None), ["Report", "Moby-Dick"]);
    }

    #[test]
    fn titles_are_validated() {
        let store = Store::open_in_memory().unwrap();
        let chat = store.create_chat(None, None).unwrap();
        for bad in ["", "   ", &"x".repeat(201)] {
            match store.rename_chat(&chat.id, bad) {
                Err(StoreError::InvalidArgument { field, message }) => {
                    assert_eq!(field, "title");
                    assert!(!message.is_empty());
                }
                other => panic!("{bad:?}: {other:?}"),
            }
        }
        assert!(store.rename_chat(&chat.id, &"é".repeat(200)).is_ok());
        assert!(matches!(
            store.create_chat(Some(&"x".repeat(201)), None),
            Err(StoreError::InvalidArgument { .. })
        ));
    }

    #[test]
    fn unknown_chats_are_not_found() {
        let store = Store::open_in_memory().unwrap();
        for id in ["1", "x"] {
            assert!(matches!(
                store.get_chat(id),
                Err(StoreError::NotFound { what: "chat", .. })
            ));
            assert!(matches!(
                store.rename_chat(id, "t"),
                Err(StoreError::NotFound { .. })
            ));
            assert!(matches!(
                store.delete_chat(id),
                Err(StoreError::NotFound { .. })
            ));
            assert!(matches!(
                store.set_system_prompt(id, ""),
                Err(StoreError::NotFound { .. })
            ));
        }
        let err = store.get_chat("12").unwrap_err();
        assert_eq!(err.ipc_code(), "notFound");
        assert!(err.to_string().contains("chat 12 does not exist"), "{err}");
    }

    #[test]
    fn summaries_count_and_preview() {
        let store = Store::open_in_memory().unwrap();
        let chat = store.create_chat(Some("c"), None).unwrap();
        store
            .append_user_message(&chat.id, "first question")
            .unwrap();
        let answer = store.create_streaming_message(&chat.id).unwrap();
        // An answer that has not written anything yet: the question is the preview.
        let streaming = &store.list_chats(None).unwrap()[0];
        assert_eq!(
            (streaming.message_count, streaming.preview.as_str()),
            (2, "first question")
        );
        store
            .finish_message(
                &answer.id,
                MessageStatus::Complete,
                &format!("Line one\n\nline   two {}", "long ".repeat(50)),
                None,
                None,
            )
            .unwrap();
        store
            .add_document(
                &chat.id,
                &NewDocument {
                    name: "a.txt".into(),
                    path: "/tmp/a.txt".into(),
                    kind: DocumentKind::Txt,
                    size_bytes: 3,
                    token_count: 1,
                    text: "abc".into(),
                },
            )
            .unwrap();
        let s = &store.list_chats(None).unwrap()[0];
        assert_eq!(s.message_count, 2);
        assert_eq!(s.document_count, 1);
        assert!(s.preview.starts_with("Line one line two long long"));
        assert!(s.preview.chars().count() <= 120 && !s.preview.contains('\n'));
        let chat = store.get_chat(&chat.id).unwrap();
        assert_eq!(chat.messages[0].role, Role::User);
        assert_eq!(chat.messages[1].role, Role::Assistant);
    }

    #[test]
    fn search_matches_titles_and_contents_case_insensitively() {
        let store = Store::open_in_memory().unwrap();
        let whale = store.create_chat(Some("Whale facts"), None).unwrap();
        let sotu = store.create_chat(Some("Speeches"), None).unwrap();
        let umlaut = store.create_chat(Some("Deutsch"), None).unwrap();
        store
            .append_user_message(&sotu.id, "What did LINCOLN say in 1862?")
            .unwrap();
        store
            .append_user_message(&umlaut.id, "Über GRÖSSE und Straße")
            .unwrap();
        store
            .append_user_message(&whale.id, "100% of 5_000 and a \\ backslash")
            .unwrap();

        assert_eq!(titles(&store, Some("whale")), ["Whale facts"]);
        assert_eq!(titles(&store, Some("lincoln")), ["Speeches"]);
        assert_eq!(titles(&store, Some("  Lincoln ")), ["Speeches"]);
        assert_eq!(titles(&store, Some("über")), ["Deutsch"]);
        assert_eq!(titles(&store, Some("grösse")), ["Deutsch"]);
        assert_eq!(
            titles(&store, Some("STRASSE")).len(),
            0,
            "no full case folding"
        );
        assert_eq!(titles(&store, Some("straße")), ["Deutsch"]);
        // LIKE's wildcards are literal in a query.
        assert_eq!(titles(&store, Some("100%")), ["Whale facts"]);
        assert_eq!(titles(&store, Some("5_0")), ["Whale facts"]);
        assert_eq!(titles(&store, Some("%")), ["Whale facts"]);
        assert_eq!(titles(&store, Some("_")), ["Whale facts"]);
        assert_eq!(titles(&store, Some("a \\ b")), ["Whale facts"]);
        assert!(titles(&store, Some("nothing like this")).is_empty());
        // Empty and blank queries list everything.
        assert_eq!(titles(&store, Some("")).len(), 3);
        assert_eq!(titles(&store, Some("  ")).len(), 3);
        // Results keep the most-recent-first order.
        assert_eq!(
            titles(&store, Some("e")),
            ["Whale facts", "Deutsch", "Speeches"]
        );
    }
}
