//! The database connection: opening, migrating, the shared connection and the store's clock.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Mutex, MutexGuard};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use rusqlite::Connection;

use super::{schema, search, Result, StoreError};

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
    pub(super) fn setup(mut conn: Connection, path: PathBuf, migrations: &[&str]) -> Result<Store> {
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
    pub(super) fn conn(&self) -> MutexGuard<'_, Connection> {
        self.conn.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Milliseconds since the Unix epoch, strictly increasing across calls.
    pub(super) fn now(&self) -> u64 {
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::SCHEMA_VERSION;

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
}
