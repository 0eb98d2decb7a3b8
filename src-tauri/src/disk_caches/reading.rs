//! A document is read once: a chat that starts on documents another chat has already read
//! (the same system prompt and the same documents in the same order) starts from that
//! chat's saved cache file instead of reading them again.
//!
//! Each saved file names what its prompt starts with: a hash of the chat's system prompt
//! and the documents its cache holds (the [`READING`] entry). A chat with no cache of its
//! own looks for another chat's file with its own hash; the engine checks the file's model
//! and cache settings as for any restore, and the next question reuses the file only as far
//! as its prompt starts with the file's tokens, so another chat's turns in the file are
//! never part of this chat's answer.

use std::path::PathBuf;
use std::time::SystemTime;

use sha2::{Digest, Sha256};

use crate::state::AppState;
use crate::store::{Chat, DocumentInfo};

/// The `extra` entry holding the hash of the system prompt and the documents the cache holds.
pub(super) const READING: &str = "kivi-chat.reading";

/// The hash of a prompt's start: the system prompt, then each document's name and text.
/// `None` without documents (a system prompt alone is read in a moment).
pub(super) fn key(
    app: &AppState,
    system_prompt: &str,
    documents: &[&DocumentInfo],
) -> Option<String> {
    if documents.is_empty() {
        return None;
    }
    let mut hash = Sha256::new();
    let mut part = |bytes: &[u8]| {
        hash.update((bytes.len() as u64).to_le_bytes());
        hash.update(bytes);
    };
    part(system_prompt.as_bytes());
    for doc in documents {
        part(doc.name.as_bytes());
        part(app.store.document_text(&doc.id).ok()?.as_bytes());
    }
    Some(format!("{:x}", hash.finalize()))
}

/// The key of what a chat's cache holds: its system prompt and its prefilled documents.
pub(super) fn held_key(app: &AppState, chat: &Chat) -> Option<String> {
    let prefilled: Vec<&DocumentInfo> = chat.documents.iter().filter(|d| d.prefilled).collect();
    key(app, &chat.system_prompt, &prefilled)
}

/// Another chat's cache file that holds the start of `chat_id`'s prompt (its system prompt
/// and the documents that fit), the most recently used first; with the key it was found by
/// and the documents it covers.
pub(super) async fn other_chats_file(
    app: &AppState,
    chat_id: &str,
) -> Option<(PathBuf, String, Vec<String>)> {
    let chat = app.store.get_chat(chat_id).ok()?;
    let mut documents = chat.documents.clone();
    app.apply_fit(&chat.system_prompt, &mut documents).await;
    let fitting: Vec<&DocumentInfo> = documents.iter().filter(|d| d.fits_in_context).collect();
    let wanted = key(app, &chat.system_prompt, &fitting)?;
    let mut files: Vec<(SystemTime, String)> = app
        .store
        .list_chats(None)
        .ok()?
        .into_iter()
        .filter(|other| other.id != chat_id)
        .filter_map(|other| {
            let path = app.disk.path(&other.id)?;
            let modified = std::fs::metadata(path).ok()?.modified().ok()?;
            Some((modified, other.id))
        })
        .collect();
    files.sort_by_key(|f| std::cmp::Reverse(f.0));
    let found = files.into_iter().find_map(|(_, other)| {
        let other = app.store.get_chat(&other).ok()?;
        (held_key(app, &other).as_deref() == Some(wanted.as_str())).then_some(other.id)
    })?;
    let ids = fitting.iter().map(|d| d.id.clone()).collect();
    Some((app.disk.path(&found)?, wanted, ids))
}
