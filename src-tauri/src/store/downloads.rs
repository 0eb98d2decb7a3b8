//! Model downloads' state, kept so that a download survives a restart (as `paused`).

use rusqlite::types::Type;
use rusqlite::{params, OptionalExtension, Row};

use super::rows::to_sql_int;
use super::types::{DownloadFile, DownloadRecord, DownloadState};
use super::{Result, Store};

const COLUMNS: &str = "repo_id, state, files, downloaded_bytes, total_bytes, error, updated_at";

fn record_from_row(row: &Row<'_>) -> rusqlite::Result<DownloadRecord> {
    let state: String = row.get(1)?;
    let files: String = row.get(2)?;
    Ok(DownloadRecord {
        repo_id: row.get(0)?,
        state: DownloadState::parse(&state).ok_or_else(|| {
            rusqlite::Error::FromSqlConversionFailure(
                1,
                Type::Text,
                format!("unknown download state {state:?}").into(),
            )
        })?,
        files: serde_json::from_str::<Vec<DownloadFile>>(&files)
            .map_err(|e| rusqlite::Error::FromSqlConversionFailure(2, Type::Text, Box::new(e)))?,
        downloaded_bytes: row.get::<_, i64>(3)? as u64,
        total_bytes: row.get::<_, Option<i64>>(4)?.map(|n| n as u64),
        error: row.get(5)?,
        updated_at: row.get::<_, i64>(6)? as u64,
    })
}

impl Store {
    /// The saved state of one download, if there is one.
    pub fn get_download(&self, repo_id: &str) -> Result<Option<DownloadRecord>> {
        Ok(self
            .conn()
            .query_row(
                &format!("SELECT {COLUMNS} FROM downloads WHERE repo_id = ?1"),
                [repo_id],
                record_from_row,
            )
            .optional()?)
    }

    /// Every saved download, oldest change first.
    pub fn list_downloads(&self) -> Result<Vec<DownloadRecord>> {
        let conn = self.conn();
        let mut stmt = conn.prepare_cached(&format!(
            "SELECT {COLUMNS} FROM downloads ORDER BY updated_at, repo_id"
        ))?;
        let rows = stmt.query_map([], record_from_row)?;
        Ok(rows.collect::<rusqlite::Result<_>>()?)
    }

    /// Saves (inserts or replaces) a download's state; `updated_at` is set to now.
    pub fn put_download(&self, record: &DownloadRecord) -> Result<DownloadRecord> {
        let files = serde_json::to_string(&record.files)?;
        let now = self.now();
        self.conn().execute(
            "INSERT INTO downloads (repo_id, state, files, downloaded_bytes, total_bytes, error,
                                    updated_at)
             VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7)
             ON CONFLICT (repo_id) DO UPDATE SET
                 state = excluded.state, files = excluded.files,
                 downloaded_bytes = excluded.downloaded_bytes,
                 total_bytes = excluded.total_bytes, error = excluded.error,
                 updated_at = excluded.updated_at",
            params![
                record.repo_id,
                record.state.as_str(),
                files,
                to_sql_int(record.downloaded_bytes),
                record.total_bytes.map(to_sql_int),
                record.error,
                now as i64,
            ],
        )?;
        Ok(DownloadRecord {
            updated_at: now,
            ..record.clone()
        })
    }

    /// Forgets a download; returns whether there was one.
    pub fn delete_download(&self, repo_id: &str) -> Result<bool> {
        Ok(self
            .conn()
            .execute("DELETE FROM downloads WHERE repo_id = ?1", [repo_id])?
            == 1)
    }

    /// At start-up: downloads that were queued or running when the app stopped become
    /// `paused` (resumable, their bytes kept). Returns how many.
    pub fn pause_unfinished_downloads(&self) -> Result<usize> {
        Ok(self.conn().execute(
            "UPDATE downloads SET state = 'paused'
             WHERE state IN ('queued', 'downloading')",
            [],
        )?)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn record(repo: &str, state: DownloadState) -> DownloadRecord {
        DownloadRecord {
            repo_id: repo.into(),
            state,
            files: vec![
                DownloadFile {
                    name: "config.json".into(),
                    downloaded_bytes: 700,
                    total_bytes: Some(700),
                    done: true,
                },
                DownloadFile {
                    name: "model.safetensors".into(),
                    downloaded_bytes: 1 << 31,
                    total_bytes: None,
                    done: false,
                },
            ],
            downloaded_bytes: 700 + (1 << 31),
            total_bytes: None,
            error: None,
            updated_at: 0,
        }
    }

    #[test]
    fn downloads_survive_a_restart_as_paused() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("kivi.db");
        {
            let store = Store::open(&path).unwrap();
            assert_eq!(store.get_download("a/b").unwrap(), None);
            let saved = store
                .put_download(&record("mlx-community/A", DownloadState::Downloading))
                .unwrap();
            assert!(saved.updated_at > 0);
            store
                .put_download(&record("mlx-community/B", DownloadState::Queued))
                .unwrap();
            let mut failed = record("mlx-community/C", DownloadState::Failed);
            failed.error = Some("The hub cannot be reached.".into());
            store.put_download(&failed).unwrap();
            // An update replaces the row.
            let mut more = record("mlx-community/A", DownloadState::Downloading);
            more.files[1].downloaded_bytes += 5;
            more.total_bytes = Some(9_000_000_000);
            store.put_download(&more).unwrap();
        }
        let store = Store::open(&path).unwrap();
        assert_eq!(store.pause_unfinished_downloads().unwrap(), 2);
        let a = store.get_download("mlx-community/A").unwrap().unwrap();
        assert_eq!(a.state, DownloadState::Paused);
        assert_eq!(a.files[1].downloaded_bytes, (1 << 31) + 5);
        assert_eq!(a.total_bytes, Some(9_000_000_000));
        let progress = a.to_progress();
        assert_eq!(progress.bytes_per_sec, 0.0);
        assert_eq!(progress.files, a.files);
        let c = store.get_download("mlx-community/C").unwrap().unwrap();
        assert_eq!(c.state, DownloadState::Failed);
        assert_eq!(c.error.as_deref(), Some("The hub cannot be reached."));
        assert_eq!(
            store
                .list_downloads()
                .unwrap()
                .iter()
                .map(|r| r.repo_id.as_str())
                .collect::<Vec<_>>(),
            ["mlx-community/B", "mlx-community/C", "mlx-community/A"]
        );
        assert!(store.delete_download("mlx-community/B").unwrap());
        assert!(!store.delete_download("mlx-community/B").unwrap());
        assert_eq!(store.list_downloads().unwrap().len(), 2);
    }
}
