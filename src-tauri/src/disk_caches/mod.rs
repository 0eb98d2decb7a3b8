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
//! next message. A chat with no file of its own whose documents another chat has read
//! starts from that chat's file ([`reading`]). Files are kept under the `diskCacheMib`
//! setting, least recently used first out, and a chat's file goes with the chat.

mod folder;
mod reading;

use std::collections::BTreeMap;
use std::time::Duration;

pub use folder::DiskCaches;
use folder::{touch, trim};

use crate::chat_cache::{engine_cache, CacheRecord};
use crate::state::{App, AppState};
use crate::types::{DiskCacheAction, DiskCacheEvent};

/// How long a chat stays without a job before its cache is written.
pub const IDLE_SAVE_DELAY: Duration = Duration::from_secs(2);
/// At quit, the most time spent writing caches (the rest are read again next time).
const QUIT_SAVE_BUDGET: Duration = Duration::from_secs(20);
/// The `extra` entry listing the documents the cache holds (document ids, comma-separated).
const DOCUMENTS: &str = "kivi-chat.documents";

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
    let chat = app.store.get_chat(chat_id).ok()?;
    let documents = chat
        .documents
        .iter()
        .filter(|d| d.prefilled)
        .map(|d| d.id.clone())
        .collect::<Vec<_>>()
        .join(",");
    let mut extra = BTreeMap::from([(DOCUMENTS.to_string(), documents)]);
    if let Some(key) = reading::held_key(app, &chat) {
        extra.insert(reading::READING.to_string(), key);
    }
    match engine.save_conversation(chat_id, &path, extra).await {
        Ok(Some(saved)) => {
            let event = app.disk.record(chat_id, DiskCacheAction::Saved, &saved);
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

/// The chat was opened or is about to run a job: when the engine holds no cache for it,
/// reads its file back (checked) so the next question starts at once, or, when it has none,
/// another chat's file that holds its documents.
pub async fn restore(app: &AppState, chat_id: &str) -> Option<DiskCacheEvent> {
    if app.caches.get(chat_id).is_some() {
        return None;
    }
    let engine = app.model.loaded()?;
    let (path, action, shared) = match app.disk.path(chat_id).filter(|p| p.is_file()) {
        Some(own) => (own, DiskCacheAction::Restored, None),
        None => {
            let (path, key, documents) = reading::other_chats_file(app, chat_id).await?;
            (path, DiskCacheAction::Reused, Some((key, documents)))
        }
    };
    let settings = app.settings();
    match engine
        .restore_conversation(chat_id, &path, engine_cache(&settings.cache))
        .await
    {
        Ok(Some(restored)) => {
            let record = CacheRecord::from_kv(settings.cache, &restored.kv);
            app.caches.set(chat_id, record);
            let documents: Vec<String> = match &shared {
                // The file was found by its key: it holds these documents when the key it
                // was written with is the same.
                Some((key, documents)) => match restored.extra.get(reading::READING) {
                    Some(held) if held == key => documents.clone(),
                    _ => Vec::new(),
                },
                None => restored
                    .extra
                    .get(DOCUMENTS)
                    .map(|ids| ids.split(',').filter(|id| !id.is_empty()))
                    .into_iter()
                    .flatten()
                    .map(str::to_string)
                    .collect(),
            };
            if let Err(e) = app.store.set_documents_prefilled(chat_id, &documents, true) {
                eprintln!("kivi-chat: {e}");
            }
            // Recently used: the last to go when the folder is trimmed.
            touch(&path);
            let event = app.disk.record(chat_id, action, &restored);
            // The panel follows the opened chat, unless another chat's job is running.
            if app.live.phase() == crate::types::Phase::Idle {
                app.live.show(chat_id, Some(record));
            }
            app.emit_stats();
            Some(event)
        }
        Ok(None) => None,
        Err(e) if shared.is_some() => {
            // Another chat's file: that chat finds out for itself when it is opened.
            eprintln!(
                "kivi-chat: another chat's saved cache was not used for chat {chat_id} ({e})"
            );
            None
        }
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
