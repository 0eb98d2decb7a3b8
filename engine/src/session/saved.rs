//! Conversations kept on disk: a named conversation's caches written to a cache file
//! ([`crate::cache::file`]) with the token ids they hold, and read back into a slot, so a
//! chat about a long document continues after a restart without reading the document again.
//!
//! The file names the model (a fingerprint of its weights and the backend it ran on) and
//! the cache settings; the loader refuses a file made for anything else. The token ids
//! travel in the file's `extra` entries: the next request reuses the restored cache only
//! as far as its prompt starts with those tokens (the usual prefix rule), so a restored
//! cache can never answer for a prompt it does not hold.

use std::collections::BTreeMap;
use std::path::Path;
use std::time::Instant;

use super::error::EngineError;
use super::prefix::{self, Slot};
use crate::cache::file::{self, CacheFileError};
use crate::cache::CacheConfig;
use crate::loader::ModelInfo;
use crate::stats::KvStats;

/// The `extra` entry holding the cached token ids (decimal, comma-separated).
const TOKEN_IDS: &str = "kivi.token_ids";

/// A conversation written to or read from disk.
#[derive(Debug, Clone, PartialEq)]
pub struct SavedConversation {
    /// Tokens the cache holds.
    pub tokens: usize,
    /// Size of the file.
    pub bytes: u64,
    /// Seconds the write or the read (with its checks) took.
    pub secs: f64,
    /// The caller's entries, as given to [`super::Engine::save_conversation`].
    pub extra: BTreeMap<String, String>,
    /// The cache's accounting (from the restored buffers after a read).
    pub kv: KvStats,
}

/// What identifies a model's caches: the weights (path, size, storage) and the backend
/// (its storage dtype decides what the buffers hold).
pub fn model_id(info: &ModelInfo) -> String {
    let bytes = weight_bytes(&info.path);
    format!(
        "{}|{}|{bytes}|{}",
        info.path.display(),
        info.quantization,
        info.backend
    )
}

fn weight_bytes(path: &Path) -> u64 {
    if path.is_file() {
        return std::fs::metadata(path).map_or(0, |m| m.len());
    }
    std::fs::read_dir(path)
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|e| e.metadata().ok().filter(|m| m.is_file()))
        .map(|m| m.len())
        .sum()
}

/// Writes the slot of `conversation` to `path`; `None` when no slot holds it.
pub fn save(
    slots: &mut [Slot],
    model_id: &str,
    info: &ModelInfo,
    conversation: &str,
    path: &Path,
    mut extra: BTreeMap<String, String>,
) -> Result<Option<SavedConversation>, EngineError> {
    let start = Instant::now();
    let Some(slot) = slots
        .iter_mut()
        .find(|s| s.conversation.as_deref() == Some(conversation))
    else {
        return Ok(None);
    };
    slot.sync()?;
    let ids = slot
        .tokens
        .iter()
        .map(u32::to_string)
        .collect::<Vec<_>>()
        .join(",");
    let caller = extra.clone();
    extra.insert(TOKEN_IDS.to_string(), ids);
    file::save(
        path,
        model_id,
        &slot.choice,
        &info.backend,
        slot.caches.iter().map(|c| c.as_ref()),
        &extra,
    )?;
    Ok(Some(SavedConversation {
        tokens: slot.tokens.len(),
        bytes: file_len(path)?,
        secs: start.elapsed().as_secs_f64(),
        extra: caller,
        kv: KvStats::from_caches(&slot.caches),
    }))
}

/// Reads `path` into the slot of `conversation` (made, or taken from the least recently
/// used conversation, as a request would). A slot that already holds tokens for the
/// conversation is newer than any file and is kept: the answer is then `None`.
pub fn restore(
    slots: &mut Vec<Slot>,
    max_slots: usize,
    model_id: &str,
    info: &ModelInfo,
    conversation: &str,
    path: &Path,
    choice: CacheConfig,
) -> Result<Option<SavedConversation>, EngineError> {
    let start = Instant::now();
    if slots
        .iter()
        .any(|s| s.conversation.as_deref() == Some(conversation) && !s.tokens.is_empty())
    {
        return Ok(None);
    }
    let mut loaded = file::load(path, model_id, &choice, &info.backend)?;
    let ids = loaded.header.extra.remove(TOKEN_IDS).unwrap_or_default();
    let tokens = parse_ids(&ids)?;
    if tokens.len() != loaded.header.tokens || loaded.header.layers != info.config.num_layers {
        return Err(CacheFileError::Corrupt(format!(
            "{} token ids and {} layers for a cache of {} tokens and a model of {} layers",
            tokens.len(),
            loaded.header.layers,
            loaded.header.tokens,
            info.config.num_layers
        ))
        .into());
    }
    let windows: Vec<usize> = (0..info.config.num_layers)
        .map(|i| info.config.layer_window(i).unwrap_or(0))
        .collect();
    let file_windows = if loaded.header.windows.is_empty() {
        vec![0; loaded.header.layers]
    } else {
        loaded.header.windows.clone()
    };
    if file_windows != windows {
        return Err(CacheFileError::Corrupt(format!(
            "the cache's layer windows {file_windows:?} are not the model's {windows:?}"
        ))
        .into());
    }
    let index = prefix::choose_for(slots, conversation, max_slots);
    let mut slot = Slot::new(choice, loaded.caches);
    slot.tokens = tokens;
    slot.conversation = Some(conversation.to_string());
    let kv = KvStats::from_caches(&slot.caches);
    if index == slots.len() {
        slots.push(slot);
    } else {
        slots[index] = slot;
    }
    Ok(Some(SavedConversation {
        tokens: loaded.header.tokens,
        bytes: file_len(path)?,
        secs: start.elapsed().as_secs_f64(),
        extra: loaded.header.extra,
        kv,
    }))
}

fn parse_ids(ids: &str) -> Result<Vec<u32>, CacheFileError> {
    if ids.is_empty() {
        return Ok(Vec::new());
    }
    ids.split(',')
        .map(|id| {
            id.parse::<u32>()
                .map_err(|_| CacheFileError::Corrupt(format!("token id {id:?}")))
        })
        .collect()
}

fn file_len(path: &Path) -> Result<u64, CacheFileError> {
    std::fs::metadata(path)
        .map(|m| m.len())
        .map_err(|source| CacheFileError::Io {
            path: path.to_path_buf(),
            source,
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn token_ids_round_trip_and_damage_is_refused() {
        assert_eq!(parse_ids("").unwrap(), Vec::<u32>::new());
        assert_eq!(parse_ids("1,20,300").unwrap(), vec![1, 20, 300]);
        assert!(parse_ids("1,,3").is_err());
        assert!(parse_ids("1,-2").is_err());
        assert!(parse_ids("99999999999").is_err());
    }
}
