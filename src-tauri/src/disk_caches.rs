//! Chats' KV caches kept on disk, so a chat about a long document continues after a
//! restart without reading the document again.
//!
//! When a chat goes idle (no job for [`IDLE_SAVE_DELAY`] after its last one) and when the
//! app quits, the engine writes the chat's cache, with the token ids it holds, to
//! `<data folder>/kv-caches/chat-<id>.kvc` in the engine's cache-file format (a synced
//! temporary file renamed over the old one: a crash or a full disk leaves the previous file
//! or none). When the chat is opened again and the engine holds no cache for it, the file
//! is read back and checked (model, cache settings, checksum); the next question then
//! reuses it as far as its prompt starts with the file's tokens. A refused file (another
//! model, other settings, damage) is deleted and the chat's documents are read again on its
//! next message. Files are kept under the `diskCacheMib` setting, least recently used
//! first out, and a chat's file goes with the chat.

use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::time::{Duration, SystemTime};

use crate::chat_cache::{engine_cache, CacheRecord};
use crate::state::{App, AppState};
use crate::types::{DiskCacheAction, DiskCacheEvent};

/// How long a chat stays without a job before its cache is written.
pub const IDLE_SAVE_DELAY: Duration = Duration::from_secs(2);
/// At quit, the most time spent writing caches (the rest are read again next time).
const QUIT_SAVE_BUDGET: Duration = Duration::from_secs(20);
/// Cache files' extension.
const EXTENSION: &str = "kvc";
/// The `extra` entry listing the documents the cache holds (document ids, comma-separated).
const DOCUMENTS: &str = "kivi-chat.documents";

/// The cache folder and what happened to each chat's file.
pub struct DiskCaches {
    dir: PathBuf,
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

    fn bump(&self, chat_id: &str) -> u64 {
        let mut versions = lock(&self.versions);
        let v = versions.entry(chat_id.to_string()).or_default();
        *v += 1;
        *v
    }

    fn version(&self, chat_id: &str) -> u64 {
        lock(&self.versions).get(chat_id).copied().unwrap_or(0)
    }

    /// Deletes the chat's file (its prompt's prefix changed, or the chat is gone).
    pub fn forget(&self, chat_id: &str) {
        if let Some(path) = self.path(chat_id) {
            let _ = std::fs::remove_file(path);
        }
        lock(&self.events).remove(chat_id);
    }

    fn record(&self, chat_id: &str, event: DiskCacheEvent) {
        lock(&self.events).insert(chat_id.to_string(), event);
    }
}

/// A job in `chat_id` ended: write its cache once the chat has stayed idle a moment.
pub fn save_when_idle(app: &App, chat_id: &str) {
    let version = app.disk.bump(chat_id);
    let app = app.clone();
    let chat_id = chat_id.to_string();
    tauri::async_runtime::spawn(async move {
        tokio::time::sleep(IDLE_SAVE_DELAY).await;
        if app.disk.version(&chat_id) == version && app.jobs.get(&chat_id).is_none() {
            save(&app, &chat_id).await;
        }
    });
}

/// Writes the chat's cache now (nothing when the engine holds none or the setting keeps
/// none on disk), then trims the folder to the setting.
pub async fn save(app: &AppState, chat_id: &str) -> Option<DiskCacheEvent> {
    let limit = u64::from(app.settings().disk_cache_mib) << 20;
    let engine = app.model.loaded()?;
    let path = app.disk.path(chat_id)?;
    if limit == 0 {
        return None;
    }
    let documents = app
        .store
        .get_chat(chat_id)
        .ok()?
        .documents
        .iter()
        .filter(|d| d.prefilled)
        .map(|d| d.id.clone())
        .collect::<Vec<_>>()
        .join(",");
    let extra = BTreeMap::from([(DOCUMENTS.to_string(), documents)]);
    match engine.save_conversation(chat_id, &path, extra).await {
        Ok(Some(saved)) => {
            let event = DiskCacheEvent {
                action: DiskCacheAction::Saved,
                bytes: saved.bytes,
                tokens: saved.tokens as u64,
                seconds: saved.secs,
            };
            app.disk.record(chat_id, event);
            trim(&app.disk.dir, limit);
            Some(event)
        }
        Ok(None) => None,
        // A full disk or a read-only folder: the chat itself is in the database, untouched;
        // its document is read again next time.
        Err(e) => {
            eprintln!("kivi-chat: cannot save chat {chat_id}'s cache: {e}");
            None
        }
    }
}

/// At quit: writes every chat cache the engine holds (within a time budget).
pub async fn save_all(app: &AppState) {
    let chats = app.caches.chat_ids();
    let all = async {
        for chat_id in chats {
            save(app, &chat_id).await;
        }
    };
    if tokio::time::timeout(QUIT_SAVE_BUDGET, all).await.is_err() {
        eprintln!("kivi-chat: stopped saving caches at quit after {QUIT_SAVE_BUDGET:?}");
    }
}

/// The chat was opened or is about to run a job: when the engine holds no cache for it
/// and its file exists, reads the file back (checked) so the next question starts at once.
pub async fn restore(app: &AppState, chat_id: &str) -> Option<DiskCacheEvent> {
    if app.caches.get(chat_id).is_some() {
        return None;
    }
    let engine = app.model.loaded()?;
    let path = app.disk.path(chat_id).filter(|p| p.is_file())?;
    let settings = app.settings();
    match engine
        .restore_conversation(chat_id, &path, engine_cache(&settings.cache))
        .await
    {
        Ok(Some(restored)) => {
            let record = CacheRecord::from_kv(settings.cache, &restored.kv);
            app.caches.set(chat_id, record);
            let documents: Vec<String> = restored
                .extra
                .get(DOCUMENTS)
                .map(|ids| ids.split(',').filter(|id| !id.is_empty()))
                .into_iter()
                .flatten()
                .map(str::to_string)
                .collect();
            if let Err(e) = app.store.set_documents_prefilled(chat_id, &documents, true) {
                eprintln!("kivi-chat: {e}");
            }
            // Recently used: the last to go when the folder is trimmed.
            touch(&path);
            let event = DiskCacheEvent {
                action: DiskCacheAction::Restored,
                bytes: restored.bytes,
                tokens: restored.tokens as u64,
                seconds: restored.secs,
            };
            app.disk.record(chat_id, event);
            // The panel follows the opened chat, unless another chat's job is running.
            if app.live.phase() == crate::types::Phase::Idle {
                app.live.show(chat_id, Some(record));
            }
            app.emit_stats();
            Some(event)
        }
        Ok(None) => None,
        Err(e) => {
            eprintln!(
                "kivi-chat: chat {chat_id}'s saved cache was not used ({e}); its documents are \
                 read again on the next message"
            );
            let _ = std::fs::remove_file(&path);
            None
        }
    }
}

/// The chat was deleted: its file goes, after any save already queued on the engine.
pub async fn remove(app: &AppState, chat_id: &str) {
    if let Some(engine) = app.model.loaded() {
        // Answered after the commands queued before it (a save among them).
        let _ = engine.conversations().await;
    }
    app.disk.forget(chat_id);
}

/// The `diskCacheMib` setting changed: trims the folder to it now.
pub fn trim_to(app: &AppState, disk_cache_mib: u32) {
    trim(&app.disk.dir, u64::from(disk_cache_mib) << 20);
}

fn touch(path: &Path) {
    if let Ok(file) = std::fs::File::options().append(true).open(path) {
        let _ = file.set_modified(SystemTime::now());
    }
}

/// Deletes the least recently used cache files until they take at most `limit` bytes.
fn trim(dir: &Path, limit: u64) {
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
