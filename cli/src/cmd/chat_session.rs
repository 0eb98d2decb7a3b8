//! `kivi chat --session FILE`: a conversation kept on disk, so that a chat about a long
//! document goes on after the program ends without reading the document again.
//!
//! The file is the engine's conversation cache file (`Engine::save_conversation`): the KV
//! cache and the token ids it holds, plus one entry of ours with what the next prompt is
//! built from (system prompt, documents, turns). The engine reuses the restored cache only
//! as far as the new prompt starts with its tokens, so a session resumed with other
//! settings reads what differs again rather than answering from the wrong cache.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use anyhow::{bail, Context, Result};
use kivi_engine::cache::CacheConfig;
use kivi_engine::session::{Document, Engine, SavedConversation};
use kivi_engine::tokenizer::Message;
use serde::{Deserialize, Serialize};

/// The conversation's name in the engine (one conversation per `kivi chat`).
pub const CONVERSATION: &str = "kivi-chat";

/// The cache file's entry that holds [`Transcript`] as JSON.
const TRANSCRIPT: &str = "kivi.chat.transcript";

/// What a prompt of the conversation is built from.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Transcript {
    /// The documents, ahead of the turns.
    pub documents: Vec<Document>,
    /// The system prompt, if any, then the turns.
    pub messages: Vec<Message>,
}

/// A session file: where the conversation is kept.
pub struct Session {
    path: PathBuf,
}

impl Session {
    /// The session at `path`.
    pub fn new(path: &Path) -> Self {
        Self {
            path: path.to_path_buf(),
        }
    }

    /// Reads the file into the engine's cache for [`CONVERSATION`] and gives back its
    /// transcript; `None` when there is no file yet (a new session).
    pub async fn resume(&self, engine: &Engine, cache: CacheConfig) -> Result<Option<Transcript>> {
        if !self.path.exists() {
            return Ok(None);
        }
        let restored = engine
            .restore_conversation(CONVERSATION, self.path.clone(), cache)
            .await
            .with_context(|| {
                format!(
                    "cannot resume the session {} (start a new one with another --session file)",
                    self.path.display()
                )
            })?
            .context("the conversation already had a cache")?;
        let transcript = transcript_of(&restored)?;
        eprintln!(
            "[session {}: {} tokens of KV cache read in {:.2} s ({}), {}, {}]",
            self.path.display(),
            restored.tokens,
            restored.secs,
            mib(restored.bytes),
            count(transcript.documents.len(), "document"),
            count(transcript.messages.len(), "message"),
        );
        Ok(Some(transcript))
    }

    /// Writes the conversation's cache and `transcript` to the file (the engine writes a
    /// temporary file and renames it, so a kill leaves the previous session whole).
    pub async fn save(&self, engine: &Engine, transcript: &Transcript) -> Result<()> {
        let extra = BTreeMap::from([(TRANSCRIPT.to_string(), serde_json::to_string(transcript)?)]);
        let saved = engine
            .save_conversation(CONVERSATION, self.path.clone(), extra)
            .await
            .with_context(|| format!("cannot save the session to {}", self.path.display()))?;
        if let Some(saved) = saved {
            eprintln!(
                "[session saved: {} tokens, {} in {:.2} s]",
                saved.tokens,
                mib(saved.bytes),
                saved.secs
            );
        }
        Ok(())
    }
}

fn transcript_of(restored: &SavedConversation) -> Result<Transcript> {
    let Some(json) = restored.extra.get(TRANSCRIPT) else {
        bail!("the cache file holds no kivi chat session (no {TRANSCRIPT} entry)");
    };
    serde_json::from_str(json).context("the session's transcript is damaged")
}

/// The documents of a resumed session, checked against those given on the command line:
/// a session keeps the documents it was started with.
pub fn documents_for(saved: &[Document], given: Vec<Document>) -> Result<Vec<Document>> {
    if given.is_empty() || given == saved {
        return Ok(saved.to_vec());
    }
    let names = |docs: &[Document]| {
        docs.iter()
            .map(|d| d.name.as_str())
            .collect::<Vec<_>>()
            .join(", ")
    };
    bail!(
        "this session was started with other documents ({}) than --file gives ({}): \
         leave out --file to go on, or start a new session with another --session file",
        if saved.is_empty() {
            "none".to_string()
        } else {
            names(saved)
        },
        names(&given)
    )
}

fn count(n: usize, what: &str) -> String {
    format!("{n} {what}{}", if n == 1 { "" } else { "s" })
}

fn mib(bytes: u64) -> String {
    format!("{:.1} MiB", bytes as f64 / (1024.0 * 1024.0))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn doc(name: &str, text: &str) -> Document {
        Document {
            name: name.into(),
            text: text.into(),
        }
    }

    #[test]
    fn a_resumed_session_keeps_its_documents() {
        let saved = vec![doc("a.txt", "alpha")];
        assert_eq!(documents_for(&saved, vec![]).unwrap(), saved);
        assert_eq!(documents_for(&saved, saved.clone()).unwrap(), saved);
        let err = documents_for(&saved, vec![doc("a.txt", "changed")]).unwrap_err();
        assert!(err.to_string().contains("other documents (a.txt)"), "{err}");
        let err = documents_for(&[], vec![doc("b.txt", "beta")]).unwrap_err();
        assert!(err.to_string().contains("(none)"), "{err}");
    }
}
