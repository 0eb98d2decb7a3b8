//! The database schema as a list of migrations, applied by `PRAGMA user_version`.
//!
//! Migration `i` (1-based) takes a database from version `i - 1` to `i`; each runs in its own
//! transaction together with the `user_version` bump, so a failed migration leaves the file at
//! the previous version. Never edit a migration that has shipped: append a new one.
//! (Foreign keys are on for every connection; a future migration that rebuilds a table must
//! say `PRAGMA foreign_keys` itself, outside a transaction, which `migrate` does not do.)

use std::path::Path;

use rusqlite::{Connection, TransactionBehavior};

use super::error::{Result, StoreError};

/// Version 1: chats, messages, documents, settings, key-value state, downloads.
///
/// Ids are `INTEGER PRIMARY KEY AUTOINCREMENT` so that an id is never reused after a delete
/// (the UI may still hold a stale one). A document's `text` is its last column: SQLite reads a
/// row's columns in order, so listing documents never walks a large text's overflow pages.
const V1: &str = r#"
CREATE TABLE chats (
    id            INTEGER PRIMARY KEY AUTOINCREMENT,
    title         TEXT    NOT NULL,
    system_prompt TEXT    NOT NULL DEFAULT '',
    created_at    INTEGER NOT NULL,
    updated_at    INTEGER NOT NULL
);
CREATE INDEX chats_by_updated ON chats (updated_at DESC, id DESC);

CREATE TABLE messages (
    id         INTEGER PRIMARY KEY AUTOINCREMENT,
    chat_id    INTEGER NOT NULL REFERENCES chats (id) ON DELETE CASCADE,
    role       TEXT    NOT NULL CHECK (role IN ('user', 'assistant')),
    content    TEXT    NOT NULL,
    status     TEXT    NOT NULL
               CHECK (status IN ('complete', 'streaming', 'stopped', 'interrupted', 'error')),
    error      TEXT,
    created_at INTEGER NOT NULL,
    stats      TEXT    -- JSON GenerationStats, NULL until an answer ends
);
CREATE INDEX messages_by_chat ON messages (chat_id, id);
-- Start-up looks for answers left streaming by a crash; this index holds only those.
CREATE INDEX messages_streaming ON messages (status) WHERE status = 'streaming';

CREATE TABLE documents (
    id          INTEGER PRIMARY KEY AUTOINCREMENT,
    chat_id     INTEGER NOT NULL REFERENCES chats (id) ON DELETE CASCADE,
    name        TEXT    NOT NULL,
    path        TEXT    NOT NULL,
    kind        TEXT    NOT NULL CHECK (kind IN ('txt', 'md', 'pdf')),
    size_bytes  INTEGER NOT NULL,
    token_count INTEGER NOT NULL,
    added_at    INTEGER NOT NULL,
    prefilled   INTEGER NOT NULL DEFAULT 0 CHECK (prefilled IN (0, 1)),
    text        TEXT    NOT NULL
);
CREATE INDEX documents_by_chat ON documents (chat_id, id);

-- One row: the Settings of IPC.md as JSON.
CREATE TABLE settings (
    id    INTEGER PRIMARY KEY CHECK (id = 1),
    value TEXT    NOT NULL
);

-- Small values the app keeps across restarts (active model, last server port, ...), as JSON.
CREATE TABLE app_state (
    key   TEXT PRIMARY KEY,
    value TEXT NOT NULL
) WITHOUT ROWID;

CREATE TABLE downloads (
    repo_id          TEXT    PRIMARY KEY,
    state            TEXT    NOT NULL CHECK (state IN
                     ('queued', 'downloading', 'paused', 'failed', 'completed', 'cancelled')),
    files            TEXT    NOT NULL, -- JSON [DownloadFile]
    downloaded_bytes INTEGER NOT NULL,
    total_bytes      INTEGER,
    error            TEXT,
    updated_at       INTEGER NOT NULL
) WITHOUT ROWID;
"#;

/// Every migration, oldest first: `MIGRATIONS[i]` takes version `i` to `i + 1`.
pub(crate) const MIGRATIONS: &[&str] = &[V1];

/// The schema version this build writes.
#[cfg_attr(not(test), allow(dead_code))]
pub const SCHEMA_VERSION: u32 = MIGRATIONS.len() as u32;

/// Reads `PRAGMA user_version`.
pub(crate) fn user_version(conn: &Connection) -> Result<u32> {
    Ok(conn.pragma_query_value(None, "user_version", |row| row.get(0))?)
}

/// Brings the database up to `migrations.len()`; returns the version it found.
pub(crate) fn migrate(conn: &mut Connection, migrations: &[&str], path: &Path) -> Result<u32> {
    let found = user_version(conn)?;
    let known = migrations.len() as u32;
    if found > known {
        return Err(StoreError::TooNew {
            path: path.to_path_buf(),
            found,
            known,
        });
    }
    for (index, sql) in migrations.iter().enumerate().skip(found as usize) {
        // IMMEDIATE: take the write lock up front, so two processes opening the same new
        // file cannot both run migration 1.
        let tx = conn.transaction_with_behavior(TransactionBehavior::Immediate)?;
        // Another process may have migrated while we waited for the lock.
        if user_version(&tx)? > index as u32 {
            continue;
        }
        tx.execute_batch(sql)?;
        tx.pragma_update(None, "user_version", index as u32 + 1)?;
        tx.commit()?;
    }
    Ok(found)
}

#[cfg(test)]
mod tests {
    use super::super::Store;
    use super::*;

    /// A stand-in for a future migration 2, to exercise the upgrade path on a real v1 file.
    const TEST_V2: &str = "
        ALTER TABLE chats ADD COLUMN pinned INTEGER NOT NULL DEFAULT 0;
        UPDATE chats SET pinned = 1 WHERE title = 'important';
        CREATE INDEX chats_pinned ON chats (pinned);";

    fn open_with(path: &Path, migrations: &[&str]) -> Result<Store> {
        Store::setup(
            Connection::open(path).unwrap(),
            path.to_path_buf(),
            migrations,
        )
    }

    #[test]
    fn an_empty_file_is_migrated_to_the_current_version() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("v0.db");
        // A database file at version 0, as an older build that never wrote a schema left it.
        let conn = Connection::open(&path).unwrap();
        conn.execute_batch("CREATE TABLE leftover (x); INSERT INTO leftover VALUES (1);")
            .unwrap();
        assert_eq!(user_version(&conn).unwrap(), 0);
        drop(conn);
        let store = Store::open(&path).unwrap();
        assert_eq!(user_version(&store.conn()).unwrap(), SCHEMA_VERSION);
        store.create_chat(None, None).unwrap();
        let kept: i64 = store
            .conn()
            .query_row("SELECT x FROM leftover", [], |r| r.get(0))
            .unwrap();
        assert_eq!(kept, 1);
    }

    #[test]
    fn an_older_database_is_migrated_keeping_its_data() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("kivi.db");
        {
            // Written by "the old build": version 1 with some history.
            let old = open_with(&path, &[V1]).unwrap();
            let chat = old.create_chat(Some("important"), Some("sys")).unwrap();
            old.begin_send(&chat.id, "hello").unwrap();
            old.create_chat(Some("other"), None).unwrap();
            assert_eq!(user_version(&old.conn()).unwrap(), 1);
        }
        // "The new build" knows migration 2.
        let new = open_with(&path, &[V1, TEST_V2]).unwrap();
        assert_eq!(user_version(&new.conn()).unwrap(), 2);
        let pinned: Vec<(String, i64)> = new
            .conn()
            .prepare("SELECT title, pinned FROM chats ORDER BY id")
            .unwrap()
            .query_map([], |r| Ok((r.get(0)?, r.get(1)?)))
            .unwrap()
            .collect::<rusqlite::Result<_>>()
            .unwrap();
        assert_eq!(
            pinned,
            [("important".to_string(), 1), ("other".to_string(), 0)]
        );
        let chats = new.list_chats(None).unwrap();
        assert_eq!(chats.len(), 2);
        let important = new.get_chat(&chats[1].id).unwrap();
        assert_eq!(important.system_prompt, "sys");
        assert_eq!(important.messages.len(), 2);
        drop(new);
        // Reopening at the same version runs nothing again.
        let again = open_with(&path, &[V1, TEST_V2]).unwrap();
        assert_eq!(user_version(&again.conn()).unwrap(), 2);
    }

    #[test]
    fn a_failing_migration_changes_nothing() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("kivi.db");
        open_with(&path, &[V1]).unwrap();
        let broken = "ALTER TABLE chats ADD COLUMN pinned INTEGER; SELECT * FROM no_such_table;";
        let err = open_with(&path, &[V1, broken]).unwrap_err();
        assert!(matches!(err, StoreError::Sqlite(_)), "{err}");
        let conn = Connection::open(&path).unwrap();
        assert_eq!(user_version(&conn).unwrap(), 1);
        let has_pinned: i64 = conn
            .query_row(
                "SELECT count(*) FROM pragma_table_info('chats') WHERE name = 'pinned'",
                [],
                |r| r.get(0),
            )
            .unwrap();
        assert_eq!(has_pinned, 0, "the half-done migration was rolled back");
    }

    #[test]
    fn a_newer_database_is_refused_with_advice() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("kivi.db");
        open_with(&path, &[V1, TEST_V2]).unwrap();
        let err = Store::open(&path).unwrap_err();
        assert!(matches!(err, StoreError::TooNew { found: 2, .. }), "{err}");
        assert!(err.to_string().contains("update KIVI Chat"), "{err}");
        assert_eq!(err.ipc_code(), "io");
    }
}
