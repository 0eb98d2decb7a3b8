//! The app's persistent state: chats, messages, documents, settings and downloads in SQLite.
//!
//! A plain library (no Tauri types) so that it is tested on its own. One [`Store`] owns one
//! connection behind a mutex; every method is a short statement or transaction, so the
//! commands can share an `Arc<Store>` (or Tauri managed state) and call it directly.
//!
//! Durability: the database runs in WAL mode with `synchronous = NORMAL`. In WAL mode NORMAL
//! never corrupts the file and loses nothing when the *process* dies (crash, kill, quit
//! mid-answer): a commit is in the WAL, in the OS page cache, before the call returns. Only a
//! power cut or an OS crash can drop the last commits since the previous checkpoint's fsync
//! (the database stays consistent). That is the right trade for a chat history: a streaming
//! answer is saved about once a second, and `FULL` would add an fsync to each of those saves
//! (tens of milliseconds on some laptop disks, and `F_FULLFSYNC`-class stalls on macOS) to
//! protect the last second of text against a power cut.

mod chats;
mod documents;
mod downloads;
mod error;
mod messages;
mod schema;
mod search;
mod settings;
pub mod types;

#[cfg(test)]
mod crash_tests;
#[cfg(test)]
mod load_tests;

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Mutex, MutexGuard};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use rusqlite::Connection;

pub use documents::NewDocument;
pub use error::{Result, StoreError};
#[cfg(test)]
pub use schema::SCHEMA_VERSION;
pub use types::*;

/// The title of a chat that has not been named yet (`send_message` replaces it).
pub const DEFAULT_CHAT_TITLE: &str = "New chat";

/// The app's database.
pub struct Store {
    conn: Mutex<Connection>,
    path: PathBuf,
    /// The last timestamp handed out: timestamps are strictly increasing within a process,
    /// so "most recently updated first" never ties between two quick changes.
    clock: AtomicU64,
}

impl std::fmt::Debug for Store {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Store").field("path", &self.path).finish()
    }
}

impl Store {
    /// Opens (creating it and its folder if needed) and migrates the database at `path`.
    pub fn open(path: impl AsRef<Path>) -> Result<Store> {
        let path = path.as_ref().to_path_buf();
        if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
            std::fs::create_dir_all(dir).map_err(|source| StoreError::Io {
                path: path.clone(),
                source,
            })?;
        }
        let conn = Connection::open(&path)?;
        Self::setup(conn, path, schema::MIGRATIONS)
    }

    /// A private database in memory (for tests and previews); WAL does not apply.
    #[cfg_attr(not(test), allow(dead_code))] // tests and future commands use it
    pub fn open_in_memory() -> Result<Store> {
        Self::setup(
            Connection::open_in_memory()?,
            PathBuf::from(":memory:"),
            schema::MIGRATIONS,
        )
    }

    /// Sets the connection up and migrates it with `migrations`.
    fn setup(mut conn: Connection, path: PathBuf, migrations: &[&str]) -> Result<Store> {
        // Another process (a second app instance, the CLI) may hold the write lock briefly.
        conn.busy_timeout(Duration::from_secs(5))?;
        // journal_mode answers with a row; in memory it stays "memory".
        let _mode: String = conn.query_row("PRAGMA journal_mode = WAL", [], |r| r.get(0))?;
        conn.pragma_update(None, "synchronous", "NORMAL")?;
        conn.pragma_update(None, "foreign_keys", true)?;
        search::register_functions(&conn)?;
        schema::migrate(&mut conn, migrations, &path)?;
        Ok(Store {
            conn: Mutex::new(conn),
            path,
            clock: AtomicU64::new(0),
        })
    }

    /// Where the database lives (`:memory:` for an in-memory one).
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The connection. A panic while it was held cannot leave a transaction open (a
    /// `Transaction` rolls back when dropped), so a poisoned lock is still usable.
    fn conn(&self) -> MutexGuard<'_, Connection> {
        self.conn.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Milliseconds since the Unix epoch, strictly increasing across calls.
    fn now(&self) -> u64 {
        let wall = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map(|d| d.as_millis() as u64)
            .unwrap_or(0);
        let mut last = self.clock.load(Ordering::Relaxed);
        loop {
            let next = wall.max(last + 1);
            match self
                .clock
                .compare_exchange_weak(last, next, Ordering::Relaxed, Ordering::Relaxed)
            {
                Ok(_) => return next,
                Err(seen) => last = seen,
            }
        }
    }
}

/// Parses an id the store handed out; anything else names nothing.
fn parse_id(what: &'static str, id: &str) -> Result<i64> {
    id.parse::<i64>()
        .ok()
        .filter(|n| *n > 0)
        .ok_or_else(|| StoreError::not_found(what, id))
}

/// A count or size for an INTEGER column (all stay far below 2^63).
fn to_sql_int(n: u64) -> i64 {
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn opens_a_file_database_in_wal_mode_with_foreign_keys() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("nested/folder/kivi.db");
        let store = Store::open(&path).unwrap();
        let conn = store.conn();
        let mode: String = conn
            .pragma_query_value(None, "journal_mode", |r| r.get(0))
            .unwrap();
        assert_eq!(mode, "wal");
        let sync: i64 = conn
            .pragma_query_value(None, "synchronous", |r| r.get(0))
            .unwrap();
        assert_eq!(sync, 1, "NORMAL");
        let fk: i64 = conn
            .pragma_query_value(None, "foreign_keys", |r| r.get(0))
            .unwrap();
        assert_eq!(fk, 1);
        assert_eq!(schema::user_version(&conn).unwrap(), SCHEMA_VERSION);
        drop(conn);
        drop(store);
        // Opening again migrates nothing and keeps working.
        let again = Store::open(&path).unwrap();
        assert_eq!(schema::user_version(&again.conn()).unwrap(), SCHEMA_VERSION);
    }

    #[test]
    fn the_store_can_be_shared_between_threads() {
        fn shareable<T: Send + Sync + 'static>() {}
        shareable::<Store>();
    }

    #[test]
    fn clock_is_strictly_increasing() {
        let store = Store::open_in_memory().unwrap();
        let mut last = 0;
        for _ in 0..1000 {
            let t = store.now();
            assert!(t > last);
            last = t;
        }
    }

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
}
