//! Messages: the user's questions and the model's answers, including answers being streamed.
//!
//! An answer's life: [`Store::begin_send`] (or `begin_regenerate` / `begin_edit`) stores it
//! as `streaming` with empty content; the generation saves its text with
//! [`Store::update_streaming_content`] about once a second (one UPDATE, nothing else); it ends
//! with [`Store::finish_message`]. Answers still `streaming` at start-up were cut off by a crash
//! or quit: [`Store::mark_streaming_interrupted`] turns them into `interrupted`.

use rusqlite::types::Type;
use rusqlite::{params, Connection, OptionalExtension, Row};

use super::rows::{parse_id, require_chat, title_from_message, touch, DEFAULT_CHAT_TITLE};
use super::types::{GenerationStats, Message, MessageStatus, Role};
use super::{Result, Store, StoreError};

const COLUMNS: &str = "id, chat_id, role, content, status, error, created_at, stats";

fn bad_column(index: usize, what: &str, value: &str) -> rusqlite::Error {
    rusqlite::Error::FromSqlConversionFailure(
        index,
        Type::Text,
        format!("unknown {what} {value:?}").into(),
    )
}

fn message_from_row(row: &Row<'_>) -> rusqlite::Result<Message> {
    let role: String = row.get(2)?;
    let status: String = row.get(4)?;
    let stats: Option<String> = row.get(7)?;
    let stats =
        match stats {
            Some(json) => Some(serde_json::from_str::<GenerationStats>(&json).map_err(|e| {
                rusqlite::Error::FromSqlConversionFailure(7, Type::Text, Box::new(e))
            })?),
            None => None,
        };
    Ok(Message {
        id: row.get::<_, i64>(0)?.to_string(),
        chat_id: row.get::<_, i64>(1)?.to_string(),
        role: Role::parse(&role).ok_or_else(|| bad_column(2, "role", &role))?,
        content: row.get(3)?,
        status: MessageStatus::parse(&status).ok_or_else(|| bad_column(4, "status", &status))?,
        error: row.get(5)?,
        created_at: row.get::<_, i64>(6)? as u64,
        stats,
    })
}

/// A chat's messages, oldest first.
pub(crate) fn list(conn: &Connection, chat: i64) -> Result<Vec<Message>> {
    let mut stmt = conn.prepare_cached(&format!(
        "SELECT {COLUMNS} FROM messages WHERE chat_id = ?1 ORDER BY id"
    ))?;
    let rows = stmt.query_map([chat], message_from_row)?;
    Ok(rows.collect::<rusqlite::Result<_>>()?)
}

fn get(conn: &Connection, message: i64, id: &str) -> Result<Message> {
    conn.query_row(
        &format!("SELECT {COLUMNS} FROM messages WHERE id = ?1"),
        [message],
        message_from_row,
    )
    .optional()?
    .ok_or_else(|| StoreError::not_found("message", id))
}

/// A message of the given chat, or `NotFound`.
fn get_in_chat(conn: &Connection, chat: i64, message: i64, id: &str) -> Result<Message> {
    let m = get(conn, message, id)?;
    if m.chat_id != chat.to_string() {
        return Err(StoreError::not_found("message", id));
    }
    Ok(m)
}

fn check_content(content: &str) -> Result<()> {
    if content.trim().is_empty() {
        return Err(StoreError::invalid(
            "content",
            "The message is empty. Type a question first.",
        ));
    }
    Ok(())
}

fn insert(
    conn: &Connection,
    chat: i64,
    role: Role,
    content: &str,
    status: MessageStatus,
    now: u64,
) -> Result<Message> {
    conn.execute(
        "INSERT INTO messages (chat_id, role, content, status, created_at)
         VALUES (?1, ?2, ?3, ?4, ?5)",
        params![chat, role.as_str(), content, status.as_str(), now as i64],
    )?;
    let id = conn.last_insert_rowid();
    get(conn, id, &id.to_string())
}

/// Stores a user message; a chat still called "New chat" is named after it.
fn insert_user(conn: &Connection, chat: i64, content: &str, now: u64) -> Result<Message> {
    let message = insert(
        conn,
        chat,
        Role::User,
        content,
        MessageStatus::Complete,
        now,
    )?;
    conn.execute(
        "UPDATE chats SET title = ?2 WHERE id = ?1 AND title = ?3",
        params![chat, title_from_message(content), DEFAULT_CHAT_TITLE],
    )?;
    Ok(message)
}

fn insert_streaming(conn: &Connection, chat: i64, now: u64) -> Result<Message> {
    insert(
        conn,
        chat,
        Role::Assistant,
        "",
        MessageStatus::Streaming,
        now,
    )
}

/// Deletes the chat's messages after `message` (by id order); returns how many.
fn delete_after(conn: &Connection, chat: i64, message: i64) -> Result<usize> {
    Ok(conn.execute(
        "DELETE FROM messages WHERE chat_id = ?1 AND id > ?2",
        params![chat, message],
    )?)
}

impl Store {
    /// A chat's messages, oldest first.
    #[cfg_attr(not(test), allow(dead_code))] // tests and future commands use it
    pub fn messages(&self, chat_id: &str) -> Result<Vec<Message>> {
        let chat = parse_id("chat", chat_id)?;
        let conn = self.conn();
        require_chat(&conn, chat, chat_id)?;
        list(&conn, chat)
    }

    /// One message.
    #[cfg_attr(not(test), allow(dead_code))] // tests and future commands use it
    pub fn get_message(&self, message_id: &str) -> Result<Message> {
        let message = parse_id("message", message_id)?;
        get(&self.conn(), message, message_id)
    }

    /// Stores a user message (`content` must not be blank). A chat still titled "New chat"
    /// gets a title from it (at most 48 characters, cut at a word).
    #[cfg_attr(not(test), allow(dead_code))] // tests and future commands use it
    pub fn append_user_message(&self, chat_id: &str, content: &str) -> Result<Message> {
        let chat = parse_id("chat", chat_id)?;
        check_content(content)?;
        let now = self.now();
        let mut conn = self.conn();
        let tx = conn.transaction()?;
        require_chat(&tx, chat, chat_id)?;
        let message = insert_user(&tx, chat, content, now)?;
        touch(&tx, chat, now)?;
        tx.commit()?;
        Ok(message)
    }

    /// Stores an empty assistant message with status `streaming`.
    #[cfg_attr(not(test), allow(dead_code))] // tests and future commands use it
    pub fn create_streaming_message(&self, chat_id: &str) -> Result<Message> {
        let chat = parse_id("chat", chat_id)?;
        let now = self.now();
        let mut conn = self.conn();
        let tx = conn.transaction()?;
        require_chat(&tx, chat, chat_id)?;
        let message = insert_streaming(&tx, chat, now)?;
        touch(&tx, chat, now)?;
        tx.commit()?;
        Ok(message)
    }

    /// `send_message`: stores the user message and an empty streaming answer, atomically.
    /// Returns `(user message, answer)`.
    pub fn begin_send(&self, chat_id: &str, content: &str) -> Result<(Message, Message)> {
        let chat = parse_id("chat", chat_id)?;
        check_content(content)?;
        let now = self.now();
        let mut conn = self.conn();
        let tx = conn.transaction()?;
        require_chat(&tx, chat, chat_id)?;
        let user = insert_user(&tx, chat, content, now)?;
        let answer = insert_streaming(&tx, chat, now)?;
        touch(&tx, chat, now)?;
        tx.commit()?;
        Ok((user, answer))
    }

    /// `regenerate`: deletes everything after the chat's last user message and stores a new
    /// streaming answer to it, atomically. Returns `(that user message, answer)`.
    pub fn begin_regenerate(&self, chat_id: &str) -> Result<(Message, Message)> {
        let chat = parse_id("chat", chat_id)?;
        let now = self.now();
        let mut conn = self.conn();
        let tx = conn.transaction()?;
        require_chat(&tx, chat, chat_id)?;
        let last_user: Option<i64> = tx
            .query_row(
                "SELECT id FROM messages WHERE chat_id = ?1 AND role = 'user'
                 ORDER BY id DESC LIMIT 1",
                [chat],
                |r| r.get(0),
            )
            .optional()?;
        let Some(last_user) = last_user else {
            return Err(StoreError::invalid(
                "chatId",
                "This chat has no question to answer again. Send a message first.",
            ));
        };
        delete_after(&tx, chat, last_user)?;
        let user = get(&tx, last_user, &last_user.to_string())?;
        let answer = insert_streaming(&tx, chat, now)?;
        touch(&tx, chat, now)?;
        tx.commit()?;
        Ok((user, answer))
    }

    /// `edit_message`: replaces a user message's content, deletes every later message and
    /// stores a new streaming answer, atomically. Returns `(edited message, answer)`.
    pub fn begin_edit(
        &self,
        chat_id: &str,
        message_id: &str,
        content: &str,
    ) -> Result<(Message, Message)> {
        let chat = parse_id("chat", chat_id)?;
        let message = parse_id("message", message_id)?;
        check_content(content)?;
        let now = self.now();
        let mut conn = self.conn();
        let tx = conn.transaction()?;
        require_chat(&tx, chat, chat_id)?;
        let old = get_in_chat(&tx, chat, message, message_id)?;
        if old.role != Role::User {
            return Err(StoreError::not_found("user message", message_id));
        }
        tx.execute(
            "UPDATE messages SET content = ?2 WHERE id = ?1",
            params![message, content],
        )?;
        delete_after(&tx, chat, message)?;
        let edited = get(&tx, message, message_id)?;
        let answer = insert_streaming(&tx, chat, now)?;
        touch(&tx, chat, now)?;
        tx.commit()?;
        Ok((edited, answer))
    }

    /// Saves a streaming answer's text so far: one UPDATE, cheap enough for every second.
    /// Returns `false` (and changes nothing) when the message is gone or no longer streaming,
    /// so a generation racing a delete or a stop needs no special case.
    pub fn update_streaming_content(&self, message_id: &str, content: &str) -> Result<bool> {
        let Ok(message) = parse_id("message", message_id) else {
            return Ok(false);
        };
        let changed = self.conn().execute(
            "UPDATE messages SET content = ?2 WHERE id = ?1 AND status = 'streaming'",
            params![message, content],
        )?;
        Ok(changed == 1)
    }

    /// Ends an answer: its final text, status (complete, stopped, error or interrupted),
    /// error text and statistics; the chat counts as updated.
    pub fn finish_message(
        &self,
        message_id: &str,
        status: MessageStatus,
        content: &str,
        error: Option<&str>,
        stats: Option<&GenerationStats>,
    ) -> Result<Message> {
        let message = parse_id("message", message_id)?;
        if status == MessageStatus::Streaming {
            return Err(StoreError::invalid(
                "status",
                "An answer cannot be finished as still streaming.",
            ));
        }
        let stats = stats.map(serde_json::to_string).transpose()?;
        let now = self.now();
        let mut conn = self.conn();
        let tx = conn.transaction()?;
        let chat: i64 = tx
            .query_row(
                "SELECT chat_id FROM messages WHERE id = ?1",
                [message],
                |r| r.get(0),
            )
            .optional()?
            .ok_or_else(|| StoreError::not_found("message", message_id))?;
        tx.execute(
            "UPDATE messages SET content = ?2, status = ?3, error = ?4, stats = ?5 WHERE id = ?1",
            params![message, content, status.as_str(), error, stats],
        )?;
        touch(&tx, chat, now)?;
        let done = get(&tx, message, message_id)?;
        tx.commit()?;
        Ok(done)
    }

    /// Deletes every message of the chat after `message_id`; returns how many.
    #[cfg_attr(not(test), allow(dead_code))] // tests and future commands use it
    pub fn delete_messages_after(&self, chat_id: &str, message_id: &str) -> Result<usize> {
        let chat = parse_id("chat", chat_id)?;
        let message = parse_id("message", message_id)?;
        let now = self.now();
        let mut conn = self.conn();
        let tx = conn.transaction()?;
        require_chat(&tx, chat, chat_id)?;
        get_in_chat(&tx, chat, message, message_id)?;
        let deleted = delete_after(&tx, chat, message)?;
        touch(&tx, chat, now)?;
        tx.commit()?;
        Ok(deleted)
    }

    /// Replaces a message's content (`content` must not be blank); nothing else changes.
    #[cfg_attr(not(test), allow(dead_code))] // tests and future commands use it
    pub fn edit_message(&self, chat_id: &str, message_id: &str, content: &str) -> Result<Message> {
        let chat = parse_id("chat", chat_id)?;
        let message = parse_id("message", message_id)?;
        check_content(content)?;
        let now = self.now();
        let mut conn = self.conn();
        let tx = conn.transaction()?;
        get_in_chat(&tx, chat, message, message_id)?;
        tx.execute(
            "UPDATE messages SET content = ?2 WHERE id = ?1",
            params![message, content],
        )?;
        touch(&tx, chat, now)?;
        let edited = get(&tx, message, message_id)?;
        tx.commit()?;
        Ok(edited)
    }

    /// At start-up: every answer still `streaming` (the app crashed or quit mid-answer)
    /// becomes `interrupted`, keeping its last saved text. Returns how many.
    pub fn mark_streaming_interrupted(&self) -> Result<usize> {
        Ok(self.conn().execute(
            "UPDATE messages SET status = 'interrupted' WHERE status = 'streaming'",
            [],
        )?)
    }
}

#[cfg(test)]
mod tests {
    use super::super::types::{CacheMode, CacheSettings, RotationSetting};
    use super::*;

    fn stats() -> GenerationStats {
        GenerationStats {
            model_id: "builtin/SmolLM2-135M-Instruct-Q4_1".into(),
            cache: CacheSettings {
                mode: CacheMode::Kivi,
                k_bits: 2,
                v_bits: 2,
                group_size: 32,
                residual_length: 128,
                // KIVI+ fields round-trip through the stored JSON too.
                sinks: 4,
                rotation: RotationSetting::Both,
            },
            prompt_tokens: 42,
            generated_tokens: 7,
            ttft_ms: Some(12.5),
            prefill_tokens_per_sec: Some(900.0),
            decode_tokens_per_sec: Some(55.5),
            kv_fp16_bytes: 1_000_000,
            kv_held_bytes: 250_000,
        }
    }

    fn contents(store: &Store, chat: &str) -> Vec<String> {
        store
            .messages(chat)
            .unwrap()
            .into_iter()
            .map(|m| m.content)
            .collect()
    }

    #[test]
    fn a_conversation_streams_and_finishes() {
        let store = Store::open_in_memory().unwrap();
        let chat = store.create_chat(None, None).unwrap();
        let (user, answer) = store
            .begin_send(&chat.id, "What is the KIVI cache about, in short?")
            .unwrap();
        assert_eq!(user.role, Role::User);
        assert_eq!(user.status, MessageStatus::Complete);
        assert_eq!(answer.role, Role::Assistant);
        assert_eq!(answer.status, MessageStatus::Streaming);
        assert_eq!(answer.content, "");
        assert_eq!(answer.stats, None);
        // The first message names the chat.
        assert_eq!(
            store.get_chat(&chat.id).unwrap().title,
            "What is the KIVI cache about, in short?"
        );

        assert!(store.update_streaming_content(&answer.id, "It").unwrap());
        assert!(store
            .update_streaming_content(&answer.id, "It quantizes")
            .unwrap());
        assert_eq!(
            store.get_message(&answer.id).unwrap().content,
            "It quantizes"
        );
        let done = store
            .finish_message(
                &answer.id,
                MessageStatus::Complete,
                "It quantizes the KV cache.",
                None,
                Some(&stats()),
            )
            .unwrap();
        assert_eq!(done.status, MessageStatus::Complete);
        assert_eq!(done.stats, Some(stats()));
        // A finished answer is no longer updated by a late save.
        assert!(!store.update_streaming_content(&answer.id, "late").unwrap());
        assert!(!store.update_streaming_content("999", "x").unwrap());
        assert!(!store.update_streaming_content("bogus", "x").unwrap());

        // A second question does not rename the chat.
        store.append_user_message(&chat.id, "And V?").unwrap();
        let chat = store.get_chat(&chat.id).unwrap();
        assert_eq!(chat.title, "What is the KIVI cache about, in short?");
        assert_eq!(chat.message_count, 3);
        assert_eq!(
            chat.messages.iter().map(|m| &m.content).collect::<Vec<_>>(),
            [
                "What is the KIVI cache about, in short?",
                "It quantizes the KV cache.",
                "And V?"
            ]
        );
        assert_eq!(chat.preview, "And V?");
    }

    #[test]
    fn errors_are_stored_with_their_text() {
        let store = Store::open_in_memory().unwrap();
        let chat = store.create_chat(Some("t"), None).unwrap();
        let answer = store.create_streaming_message(&chat.id).unwrap();
        let failed = store
            .finish_message(
                &answer.id,
                MessageStatus::Error,
                "partial",
                Some("The model ran out of memory."),
                Some(&stats()),
            )
            .unwrap();
        assert_eq!(failed.status, MessageStatus::Error);
        assert_eq!(
            failed.error.as_deref(),
            Some("The model ran out of memory.")
        );
        assert!(matches!(
            store.finish_message(&answer.id, MessageStatus::Streaming, "", None, None),
            Err(StoreError::InvalidArgument { .. })
        ));
        assert!(matches!(
            store.finish_message("77", MessageStatus::Complete, "", None, None),
            Err(StoreError::NotFound {
                what: "message",
                ..
            })
        ));
    }

    #[test]
    fn empty_messages_are_rejected_and_nothing_is_stored() {
        let store = Store::open_in_memory().unwrap();
        let chat = store.create_chat(None, None).unwrap();
        for bad in ["", "  \n\t"] {
            let err = store.begin_send(&chat.id, bad).unwrap_err();
            assert_eq!(err.field(), Some("content"));
            assert_eq!(err.ipc_code(), "invalidArgument");
            assert!(store.append_user_message(&chat.id, bad).is_err());
        }
        assert!(store.messages(&chat.id).unwrap().is_empty());
        assert_eq!(store.get_chat(&chat.id).unwrap().title, "New chat");
        assert!(matches!(
            store.begin_send("55", "hi"),
            Err(StoreError::NotFound { what: "chat", .. })
        ));
    }

    #[test]
    fn regenerate_replaces_the_last_answer() {
        let store = Store::open_in_memory().unwrap();
        let chat = store.create_chat(None, None).unwrap();
        let err = store.begin_regenerate(&chat.id).unwrap_err();
        assert_eq!(err.field(), Some("chatId"));

        let (_, a1) = store.begin_send(&chat.id, "q1").unwrap();
        store
            .finish_message(&a1.id, MessageStatus::Complete, "a1", None, None)
            .unwrap();
        let (q2, a2) = store.begin_send(&chat.id, "q2").unwrap();
        store
            .finish_message(&a2.id, MessageStatus::Stopped, "a2 partial", None, None)
            .unwrap();
        let (user, a3) = store.begin_regenerate(&chat.id).unwrap();
        assert_eq!(user.id, q2.id);
        assert_eq!(a3.status, MessageStatus::Streaming);
        assert_eq!(contents(&store, &chat.id), ["q1", "a1", "q2", ""]);
        assert!(matches!(
            store.get_message(&a2.id),
            Err(StoreError::NotFound { .. })
        ));
    }

    #[test]
    fn edit_rewrites_a_question_and_drops_what_followed() {
        let store = Store::open_in_memory().unwrap();
        let chat = store.create_chat(None, None).unwrap();
        let (q1, a1) = store.begin_send(&chat.id, "q1").unwrap();
        store
            .finish_message(&a1.id, MessageStatus::Complete, "a1", None, None)
            .unwrap();
        let (_, a2) = store.begin_send(&chat.id, "q2").unwrap();
        store
            .finish_message(&a2.id, MessageStatus::Complete, "a2", None, None)
            .unwrap();

        // Only user messages of this chat can be edited this way.
        assert!(matches!(
            store.begin_edit(&chat.id, &a1.id, "x"),
            Err(StoreError::NotFound { .. })
        ));
        let other = store.create_chat(None, None).unwrap();
        assert!(matches!(
            store.begin_edit(&other.id, &q1.id, "x"),
            Err(StoreError::NotFound { .. })
        ));
        assert_eq!(
            store.begin_edit(&chat.id, &q1.id, " ").unwrap_err().field(),
            Some("content")
        );
        assert_eq!(contents(&store, &chat.id), ["q1", "a1", "q2", "a2"]);

        let (edited, answer) = store.begin_edit(&chat.id, &q1.id, "q1 better").unwrap();
        assert_eq!(edited.id, q1.id);
        assert_eq!(edited.content, "q1 better");
        assert_eq!(answer.status, MessageStatus::Streaming);
        assert_eq!(contents(&store, &chat.id), ["q1 better", ""]);
    }

    #[test]
    fn delete_after_and_plain_edit() {
        let store = Store::open_in_memory().unwrap();
        let chat = store.create_chat(None, None).unwrap();
        let ids: Vec<String> = (0..5)
            .map(|i| {
                store
                    .append_user_message(&chat.id, &format!("m{i}"))
                    .unwrap()
                    .id
            })
            .collect();
        assert_eq!(store.delete_messages_after(&chat.id, &ids[2]).unwrap(), 2);
        assert_eq!(contents(&store, &chat.id), ["m0", "m1", "m2"]);
        assert_eq!(store.delete_messages_after(&chat.id, &ids[2]).unwrap(), 0);
        assert!(matches!(
            store.delete_messages_after(&chat.id, &ids[4]),
            Err(StoreError::NotFound { .. })
        ));
        let edited = store.edit_message(&chat.id, &ids[1], "m1'").unwrap();
        assert_eq!(edited.content, "m1'");
        assert_eq!(contents(&store, &chat.id), ["m0", "m1'", "m2"]);
    }

    #[test]
    fn streaming_answers_become_interrupted_at_start_up() {
        let store = Store::open_in_memory().unwrap();
        let chat = store.create_chat(None, None).unwrap();
        let (_, a1) = store.begin_send(&chat.id, "q1").unwrap();
        store.update_streaming_content(&a1.id, "half an").unwrap();
        let other = store.create_chat(None, None).unwrap();
        let a2 = store.create_streaming_message(&other.id).unwrap();
        let (_, a3) = store.begin_send(&other.id, "q").unwrap();
        store
            .finish_message(&a3.id, MessageStatus::Complete, "done", None, None)
            .unwrap();

        assert_eq!(store.mark_streaming_interrupted().unwrap(), 2);
        let m1 = store.get_message(&a1.id).unwrap();
        assert_eq!(m1.status, MessageStatus::Interrupted);
        assert_eq!(m1.content, "half an");
        assert_eq!(m1.stats, None);
        assert_eq!(
            store.get_message(&a2.id).unwrap().status,
            MessageStatus::Interrupted
        );
        assert_eq!(
            store.get_message(&a3.id).unwrap().status,
            MessageStatus::Complete
        );
        assert_eq!(store.mark_streaming_interrupted().unwrap(), 0);
    }
}
