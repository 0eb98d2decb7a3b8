//! The folder of saved chat caches: file names, what happened to each chat's file, and the
//! least-recently-used trimming.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::time::SystemTime;

use kivi_engine::session::SavedConversation;

use crate::types::{DiskCacheAction, DiskCacheEvent};

/// Cache files' extension.
const EXTENSION: &str = "kvc";

/// The cache folder and what happened to each chat's file.
pub struct DiskCaches {
    pub(super) dir: PathBuf,
    /// Per chat, bumped when a job ends: an idle save skips when another job ran since.
    versions: Mutex<HashMap<String, u64>>,
    /// Each chat's last save or restore, for the panel.
    events: Mutex<HashMap<String, DiskCacheEvent>>,
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

impl DiskCaches {
    /// The caches in `dir` (made if missing). Leftovers of saves cut short by a crash are
    /// removed; they never carry a cache file's name.
    pub fn new(dir: PathBuf) -> Self {
        if let Err(e) = std::fs::create_dir_all(&dir) {
            eprintln!("kivi-chat: cannot make {}: {e}", dir.display());
        }
        for entry in std::fs::read_dir(&dir).into_iter().flatten().flatten() {
            if entry.file_name().to_string_lossy().ends_with(".partial") {
                let _ = std::fs::remove_file(entry.path());
            }
        }
        Self {
            dir,
            versions: Mutex::default(),
            events: Mutex::default(),
        }
    }

    /// The chat's cache file (`None` for an id that is not a plain name).
    pub fn path(&self, chat_id: &str) -> Option<PathBuf> {
        let plain = !chat_id.is_empty()
            && chat_id
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_');
        plain.then(|| self.dir.join(format!("chat-{chat_id}.{EXTENSION}")))
    }

    /// The chat's last save or restore since the app started.
    pub fn event(&self, chat_id: &str) -> Option<DiskCacheEvent> {
        lock(&self.events).get(chat_id).copied()
    }

    pub(super) fn bump(&self, chat_id: &str) -> u64 {
        let mut versions = lock(&self.versions);
        let v = versions.entry(chat_id.to_string()).or_default();
        *v += 1;
        *v
    }

    pub(super) fn version(&self, chat_id: &str) -> u64 {
        lock(&self.versions).get(chat_id).copied().unwrap_or(0)
    }

    /// Deletes the chat's file (its prompt's prefix changed, or the chat is gone).
    pub fn forget(&self, chat_id: &str) {
        if let Some(path) = self.path(chat_id) {
            let _ = std::fs::remove_file(path);
        }
        lock(&self.events).remove(chat_id);
    }

    /// Remembers what just happened to the chat's file, for the panel.
    pub(super) fn record(
        &self,
        chat_id: &str,
        action: DiskCacheAction,
        file: &SavedConversation,
    ) -> DiskCacheEvent {
        let event = DiskCacheEvent {
            action,
            bytes: file.bytes,
            tokens: file.tokens as u64,
            seconds: file.secs,
        };
        lock(&self.events).insert(chat_id.to_string(), event);
        event
    }
}

pub(super) fn touch(path: &Path) {
    if let Ok(file) = std::fs::File::options().append(true).open(path) {
        let _ = file.set_modified(SystemTime::now());
    }
}

/// Deletes the least recently used cache files until they take at most `limit` bytes.
pub(super) fn trim(dir: &Path, limit: u64) {
    let mut files: Vec<(SystemTime, u64, PathBuf)> = std::fs::read_dir(dir)
        .into_iter()
        .flatten()
        .flatten()
        .filter(|e| e.path().extension().is_some_and(|x| x == EXTENSION))
        .filter_map(|e| {
            let meta = e.metadata().ok()?;
            Some((meta.modified().ok()?, meta.len(), e.path()))
        })
        .collect();
    files.sort();
    let mut total: u64 = files.iter().map(|f| f.1).sum();
    for (_, len, path) in files {
        if total <= limit {
            break;
        }
        if std::fs::remove_file(&path).is_ok() {
            total -= len;
        }
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    #[test]
    fn files_are_named_for_plain_chat_ids_only() {
        let dir = tempfile::tempdir().unwrap();
        let disk = DiskCaches::new(dir.path().join("kv-caches"));
        assert_eq!(
            disk.path("12").unwrap(),
            dir.path().join("kv-caches/chat-12.kvc")
        );
        assert!(disk.path("../12").is_none());
        assert!(disk.path("").is_none());
    }

    #[test]
    fn leftovers_of_interrupted_saves_are_removed_at_start() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("chat-1.kvc.123.partial"), b"half").unwrap();
        std::fs::write(dir.path().join("chat-1.kvc"), b"whole").unwrap();
        DiskCaches::new(dir.path().to_path_buf());
        let names: Vec<_> = std::fs::read_dir(dir.path())
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .collect();
        assert_eq!(names, vec![std::ffi::OsString::from("chat-1.kvc")]);
    }

    #[test]
    fn trimming_deletes_the_least_recently_used_first() {
        let dir = tempfile::tempdir().unwrap();
        let t0 = SystemTime::now() - Duration::from_secs(100);
        for (i, name) in ["chat-1.kvc", "chat-2.kvc", "chat-3.kvc"]
            .iter()
            .enumerate()
        {
            let path = dir.path().join(name);
            std::fs::write(&path, vec![0u8; 1000]).unwrap();
            let file = std::fs::File::options().append(true).open(&path).unwrap();
            file.set_modified(t0 + Duration::from_secs(10 * i as u64))
                .unwrap();
        }
        std::fs::write(dir.path().join("notes.txt"), vec![0u8; 5000]).unwrap();
        // chat-1 was opened again: now the most recent.
        touch(&dir.path().join("chat-1.kvc"));
        trim(dir.path(), 2000);
        let mut left: Vec<_> = std::fs::read_dir(dir.path())
            .unwrap()
            .map(|e| e.unwrap().file_name().into_string().unwrap())
            .collect();
        left.sort();
        assert_eq!(left, ["chat-1.kvc", "chat-3.kvc", "notes.txt"]);
        trim(dir.path(), 0);
        assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 1);
    }
}
