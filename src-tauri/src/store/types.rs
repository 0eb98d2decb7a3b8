//! The values that cross the IPC boundary (ui/IPC.md), as the store reads and writes them.
//!
//! Every struct is camelCase, every `Option` is serialized (as `null`), every unit enum is a
//! camelCase string, so the commands can return these as they are.

use kivi_engine::backend::{Backend, BackendError};
use kivi_engine::cache::Rotation;
use serde::{Deserialize, Serialize};

/// An opaque identifier chosen by the back end; the store uses stringified integers.
pub type Id = String;

/// Whether a KV cache is KIVI-quantized or plain fp16.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub enum CacheMode {
    /// Keys per channel, values per token, quantized to `kBits`/`vBits`.
    Kivi,
    /// Full precision (the KIVI fields are kept but ignored).
    Fp16,
}

/// How a KV cache is built (IPC `CacheConfig`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct CacheSettings {
    /// KIVI or fp16.
    pub mode: CacheMode,
    /// Key bits: 2 or 4.
    pub k_bits: u8,
    /// Value bits: 2 or 4.
    pub v_bits: u8,
    /// Group size G: 32, 64 or 128.
    pub group_size: u32,
    /// Residual window R: tokens kept in full precision, a multiple of `group_size`.
    pub residual_length: u32,
    /// KIVI+ attention sinks: the first tokens of a conversation, kept in full precision for
    /// good; 0, 4 or 16. Settings saved before KIVI+ have none, which reads as 0 (plain KIVI).
    #[serde(default)]
    pub sinks: u32,
    /// KIVI+ Hadamard rotation: what the cache stores in a rotated basis. Settings saved
    /// before KIVI+ have none, which reads as off (plain KIVI).
    #[serde(default)]
    pub rotation: RotationSetting,
}

/// What a KIVI+ cache stores in a Hadamard basis (IPC
/// `"none" | "values" | "both" | "adaptive"`).
///
/// The app offers values alone (the recommended cache: it helps every model measured), keys
/// too (which helps SmolLM2's 2-bit keys and costs Qwen2.5 +12% to +139% perplexity), and
/// a basis chosen per KV head from the cache's first groups (which keeps what rotating keys
/// gains on SmolLM2 and loses nothing on Qwen2.5; docs/benchmarks.md "Caches across
/// models"); the engine's keys-only rotation is for experiments. Settings saved when this was an on/off switch read `true` as both and
/// `false` as none, which is what the switch meant.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "camelCase")]
pub enum RotationSetting {
    /// Nothing rotated.
    #[default]
    None,
    /// Values only; the attention output is rotated back.
    Values,
    /// Keys (after RoPE) and values.
    Both,
    /// Keys and values each rotated in the KV heads where that quantizes them better,
    /// chosen at the cache's first flush.
    Adaptive,
}

impl RotationSetting {
    /// The engine's rotation.
    pub fn engine(self) -> Rotation {
        match self {
            RotationSetting::None => Rotation::None,
            RotationSetting::Values => Rotation::Values,
            RotationSetting::Both => Rotation::Both,
            RotationSetting::Adaptive => Rotation::Adaptive,
        }
    }

    /// The app's setting for an engine rotation, if the app offers it (keys alone it does
    /// not).
    pub fn from_engine(rotation: Rotation) -> Option<Self> {
        [Self::None, Self::Values, Self::Both, Self::Adaptive]
            .into_iter()
            .find(|s| s.engine() == rotation)
    }
}

impl<'de> Deserialize<'de> for RotationSetting {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        #[derive(Deserialize)]
        #[serde(rename_all = "camelCase")]
        enum Named {
            None,
            Values,
            Both,
            Adaptive,
        }
        #[derive(Deserialize)]
        #[serde(untagged)]
        enum Saved {
            Switch(bool),
            Named(Named),
        }
        Ok(
            match Saved::deserialize(d).map_err(|_| {
                serde::de::Error::custom(
                    "rotation must be \"none\", \"values\", \"both\" or \"adaptive\"",
                )
            })? {
                Saved::Switch(false) | Saved::Named(Named::None) => RotationSetting::None,
                Saved::Named(Named::Values) => RotationSetting::Values,
                Saved::Switch(true) | Saved::Named(Named::Both) => RotationSetting::Both,
                Saved::Named(Named::Adaptive) => RotationSetting::Adaptive,
            },
        )
    }
}

/// The IPC name of [`CacheSettings`].
pub type CacheConfig = CacheSettings;

/// How answers are sampled.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct SamplingSettings {
    /// 0..=2; 0 means greedy.
    pub temperature: f32,
    /// (0, 1].
    pub top_p: f32,
    /// 0..=1000; 0 disables top-k.
    pub top_k: u32,
    /// 1..=2; 1 disables the penalty.
    pub repetition_penalty: f32,
    /// 1..=32768 and below `contextLength`: the longest answer.
    pub max_tokens: u32,
    /// A fixed seed, or `None` for a random one per answer.
    pub seed: Option<u32>,
}

/// Where and how the model runs (IPC: `"auto"` or a backend name such as `"host"`,
/// `"mlx-cpu-f16"`, `"mlx-gpu-f16"`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash)]
pub enum BackendChoice {
    /// The platform's choice (`KIVI_BACKEND` when set, for tests): MLX on the GPU in
    /// float16 on Apple silicon, the host kernels elsewhere.
    #[default]
    Auto,
    /// This backend.
    Fixed(Backend),
}

impl BackendChoice {
    /// The backend this choice stands for here.
    pub fn resolve(self) -> Result<Backend, BackendError> {
        match self {
            BackendChoice::Auto => Backend::chosen(),
            BackendChoice::Fixed(backend) => Ok(backend),
        }
    }
}

impl Serialize for BackendChoice {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        match self {
            BackendChoice::Auto => serializer.serialize_str("auto"),
            BackendChoice::Fixed(backend) => backend.serialize(serializer),
        }
    }
}

impl<'de> Deserialize<'de> for BackendChoice {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let text = String::deserialize(deserializer)?;
        if text.trim().eq_ignore_ascii_case("auto") {
            return Ok(BackendChoice::Auto);
        }
        text.parse()
            .map(BackendChoice::Fixed)
            .map_err(serde::de::Error::custom)
    }
}

/// Everything the settings pane edits (validated by [`Settings::validate`]).
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Settings {
    /// How KV caches are built.
    pub cache: CacheSettings,
    /// Tokens a chat's KV cache may hold (prompt, documents and answer): 512..=131072.
    pub context_length: u32,
    /// How answers are sampled.
    pub sampling: SamplingSettings,
    /// Where and how the model runs (an advanced setting; settings saved before it existed
    /// read as `auto`).
    #[serde(default)]
    pub backend: BackendChoice,
    /// MiB of disk the chats' saved KV caches may take (least recently used go first);
    /// 0 keeps no cache on disk. 0..=1048576; settings saved before it existed read as the
    /// default.
    #[serde(default = "default_disk_cache_mib")]
    pub disk_cache_mib: u32,
}

/// `diskCacheMib`'s default: room for a few long documents' caches of a small or medium
/// model on a laptop.
pub const DEFAULT_DISK_CACHE_MIB: u32 = 2048;

fn default_disk_cache_mib() -> u32 {
    DEFAULT_DISK_CACHE_MIB
}

/// What `fit_context_length` returns: "Fit this machine".
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ContextFit {
    /// The longest context (a multiple of 256 tokens, at most the model's trained context
    /// and the setting's maximum) whose KV cache with the given settings the memory holds
    /// beside the loaded model.
    pub context_length: u32,
    /// The loaded model's trained context.
    pub model_context: u32,
    /// Bytes that context's KV cache takes.
    pub kv_bytes: u64,
    /// The memory the estimate had: what the system has available now plus what the
    /// loaded model holds.
    pub available_bytes: u64,
}

/// What `update_settings` returns.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct SettingsUpdate {
    /// The settings as saved.
    pub settings: Settings,
    /// True when `cache`, `contextLength` or `backend` changed, so every chat's KV cache
    /// was dropped.
    pub cache_reset: bool,
    /// True when `backend` changed and the active model is loading again on the new one.
    pub model_reload: bool,
}

/// Who wrote a message.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub enum Role {
    /// The person using the app.
    User,
    /// The model.
    Assistant,
}

/// Where a message stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub enum MessageStatus {
    /// Finished normally (every user message is complete).
    Complete,
    /// Being written by a running generation.
    Streaming,
    /// The user stopped it; the text so far is kept.
    Stopped,
    /// The app quit or crashed while it was streaming; the last saved text is kept.
    Interrupted,
    /// The generation failed; `error` says why.
    Error,
}

impl Role {
    /// The name stored in the database and sent over IPC.
    pub fn as_str(self) -> &'static str {
        match self {
            Role::User => "user",
            Role::Assistant => "assistant",
        }
    }

    /// The inverse of [`Role::as_str`].
    pub fn parse(s: &str) -> Option<Self> {
        match s {
            "user" => Some(Role::User),
            "assistant" => Some(Role::Assistant),
            _ => None,
        }
    }
}

impl MessageStatus {
    /// The name stored in the database and sent over IPC.
    pub fn as_str(self) -> &'static str {
        match self {
            MessageStatus::Complete => "complete",
            MessageStatus::Streaming => "streaming",
            MessageStatus::Stopped => "stopped",
            MessageStatus::Interrupted => "interrupted",
            MessageStatus::Error => "error",
        }
    }

    /// The inverse of [`MessageStatus::as_str`].
    pub fn parse(s: &str) -> Option<Self> {
        Some(match s {
            "complete" => MessageStatus::Complete,
            "streaming" => MessageStatus::Streaming,
            "stopped" => MessageStatus::Stopped,
            "interrupted" => MessageStatus::Interrupted,
            "error" => MessageStatus::Error,
            _ => return None,
        })
    }
}

/// Measurements of one answer, filled in when it ends.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct GenerationStats {
    /// The model that wrote the answer.
    pub model_id: String,
    /// The cache settings the answer was generated with.
    pub cache: CacheSettings,
    /// Tokens of the prompt (system prompt, documents, history, question).
    pub prompt_tokens: u64,
    /// Tokens of the answer.
    pub generated_tokens: u64,
    /// Time to first token.
    pub ttft_ms: Option<f64>,
    /// Prompt processing speed.
    pub prefill_tokens_per_sec: Option<f64>,
    /// Generation speed.
    pub decode_tokens_per_sec: Option<f64>,
    /// KV bytes at the end: the same tokens in fp16 ...
    pub kv_fp16_bytes: u64,
    /// ... and what the cache really held.
    pub kv_held_bytes: u64,
}

/// One message of a chat.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Message {
    /// The message's id.
    pub id: Id,
    /// The chat it belongs to.
    pub chat_id: Id,
    /// Who wrote it.
    pub role: Role,
    /// Plain text; for the assistant, Markdown written by the model.
    pub content: String,
    /// Where it stands.
    pub status: MessageStatus,
    /// Why it failed, when `status` is `error`.
    pub error: Option<String>,
    /// Milliseconds since the Unix epoch.
    pub created_at: u64,
    /// Assistant messages once ended (complete, stopped or error); else `None`.
    pub stats: Option<GenerationStats>,
}

/// What kind of file a document was read from (`.markdown` files are `md`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub enum DocumentKind {
    /// Plain text.
    Txt,
    /// Markdown, kept as text.
    Md,
    /// A PDF's text layer.
    Pdf,
}

impl DocumentKind {
    /// The name stored in the database and sent over IPC.
    pub fn as_str(self) -> &'static str {
        match self {
            DocumentKind::Txt => "txt",
            DocumentKind::Md => "md",
            DocumentKind::Pdf => "pdf",
        }
    }

    /// The inverse of [`DocumentKind::as_str`].
    pub fn parse(s: &str) -> Option<Self> {
        match s {
            "txt" => Some(DocumentKind::Txt),
            "md" => Some(DocumentKind::Md),
            "pdf" => Some(DocumentKind::Pdf),
            _ => None,
        }
    }
}

/// A document attached to a chat (without its text; see `Store::document_text`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct DocumentInfo {
    /// The document's id.
    pub id: Id,
    /// The chat it is attached to.
    pub chat_id: Id,
    /// File name, no directories.
    pub name: String,
    /// Absolute path it was read from.
    pub path: String,
    /// What kind of file it was.
    pub kind: DocumentKind,
    /// File size.
    pub size_bytes: u64,
    /// Tokens of the extracted text (the active model's tokenizer).
    pub token_count: u64,
    /// Computed, not stored: see [`apply_context_fit`]. The store returns `true` until then.
    pub fits_in_context: bool,
    /// The context length `fits_in_context` was computed against (0 until then).
    pub context_length: u64,
    /// Computed, not stored: the context this document needs, the system prompt, the
    /// documents up to it and room for an answer together (0 until computed).
    #[serde(default)]
    pub context_needed: u64,
    /// Computed, not stored (`AppState::apply_fit`): bytes the chat's KV cache holds once the
    /// system prompt and the documents up to this one are read, with the current cache
    /// settings; `None` without a loaded model.
    #[serde(default)]
    pub kv_bytes: Option<u64>,
    /// The same tokens' keys and values in float16.
    #[serde(default)]
    pub kv_fp16_bytes: Option<u64>,
    /// Seconds to read this document at the last measured reading speed of the loaded
    /// model; `None` before one was measured.
    #[serde(default)]
    pub read_seconds: Option<f64>,
    /// Its tokens are in the chat's current KV cache.
    pub prefilled: bool,
    /// Milliseconds since the Unix epoch.
    pub added_at: u64,
}

/// The chat's live KV cache, if any (the store knows nothing of caches: it returns "none").
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ChatCacheInfo {
    /// The settings the cache was built with; `None` when the chat has no cache.
    pub config: Option<CacheSettings>,
    /// Tokens in the cache (0 when none).
    pub tokens: u64,
}

/// One line of the chat list.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ChatSummary {
    /// The chat's id.
    pub id: Id,
    /// Its title.
    pub title: String,
    /// Milliseconds since the Unix epoch.
    pub created_at: u64,
    /// Last change to the chat (a message sent or finished, a rename, a document, ...).
    pub updated_at: u64,
    /// Messages in the chat.
    pub message_count: u64,
    /// Documents attached.
    pub document_count: u64,
    /// The start of the last message, at most 120 characters, one line; "" when none.
    pub preview: String,
}

/// A whole chat: the [`ChatSummary`] fields (flattened in JSON) plus its contents.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Chat {
    /// The chat's id.
    pub id: Id,
    /// Its title.
    pub title: String,
    /// Milliseconds since the Unix epoch.
    pub created_at: u64,
    /// Last change to the chat.
    pub updated_at: u64,
    /// Messages in the chat.
    pub message_count: u64,
    /// Documents attached.
    pub document_count: u64,
    /// The start of the last message, at most 120 characters, one line; "" when none.
    pub preview: String,
    /// "" when none.
    pub system_prompt: String,
    /// Oldest first.
    pub messages: Vec<Message>,
    /// In attach order.
    pub documents: Vec<DocumentInfo>,
    /// Filled in by the caller, which owns the caches; the store returns "no cache".
    pub cache: ChatCacheInfo,
}

impl Chat {
    /// The summary part of the chat.
    #[cfg_attr(not(test), allow(dead_code))] // tests and future commands use it
    pub fn summary(&self) -> ChatSummary {
        ChatSummary {
            id: self.id.clone(),
            title: self.title.clone(),
            created_at: self.created_at,
            updated_at: self.updated_at,
            message_count: self.message_count,
            document_count: self.document_count,
            preview: self.preview.clone(),
        }
    }
}

/// What `send_message`, `regenerate` and `edit_message` return.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct GenerationStarted {
    /// The generation's id (chosen by the caller).
    pub generation_id: Id,
    /// The new (send) or edited (edit) user message; `None` for regenerate.
    pub user_message: Option<Message>,
    /// The answer being written: status `streaming`, content "".
    pub assistant_message: Message,
}

/// Where a model download stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub enum DownloadState {
    /// Waiting for its turn.
    Queued,
    /// Transferring.
    Downloading,
    /// Stopped by the user or by a restart; resumable.
    Paused,
    /// Stopped by an error; `error` says why.
    Failed,
    /// All files are there.
    Completed,
    /// Stopped and forgotten.
    Cancelled,
}

impl DownloadState {
    /// The name stored in the database.
    pub fn as_str(self) -> &'static str {
        match self {
            DownloadState::Queued => "queued",
            DownloadState::Downloading => "downloading",
            DownloadState::Paused => "paused",
            DownloadState::Failed => "failed",
            DownloadState::Completed => "completed",
            DownloadState::Cancelled => "cancelled",
        }
    }

    /// The inverse of [`DownloadState::as_str`].
    pub fn parse(s: &str) -> Option<Self> {
        Some(match s {
            "queued" => DownloadState::Queued,
            "downloading" => DownloadState::Downloading,
            "paused" => DownloadState::Paused,
            "failed" => DownloadState::Failed,
            "completed" => DownloadState::Completed,
            "cancelled" => DownloadState::Cancelled,
            _ => return None,
        })
    }
}

/// One file of a download.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct DownloadFile {
    /// Path inside the repository, e.g. `model.safetensors`.
    pub name: String,
    /// Bytes already on disk.
    pub downloaded_bytes: u64,
    /// `None` until the hub reported the size.
    pub total_bytes: Option<u64>,
    /// The file is complete (and verified).
    pub done: bool,
}

/// A download's progress (`download-progress`, and inside `ModelInfo`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct DownloadProgress {
    /// Hub repo id, `owner/name`.
    pub repo_id: String,
    /// Where it stands.
    pub state: DownloadState,
    /// Every file, in a stable order.
    pub files: Vec<DownloadFile>,
    /// Sum over the files.
    pub downloaded_bytes: u64,
    /// Sum over the files, `None` while any size is unknown.
    pub total_bytes: Option<u64>,
    /// Averaged over the last few seconds; 0 unless downloading.
    pub bytes_per_sec: f64,
    /// Estimated seconds left.
    pub eta_seconds: Option<f64>,
    /// Why it failed, when `state` is `failed`.
    pub error: Option<String>,
}

/// What the store keeps of a download so that it survives a restart (no rates: they are live).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct DownloadRecord {
    /// Hub repo id, `owner/name`.
    pub repo_id: String,
    /// Where it stands.
    pub state: DownloadState,
    /// Every file, in a stable order.
    pub files: Vec<DownloadFile>,
    /// Sum over the files.
    pub downloaded_bytes: u64,
    /// Sum over the files, `None` while any size is unknown.
    pub total_bytes: Option<u64>,
    /// Why it failed, when `state` is `failed`.
    pub error: Option<String>,
    /// Last saved, milliseconds since the Unix epoch (set by the store).
    pub updated_at: u64,
}

impl DownloadRecord {
    /// The record as a progress report with no live rate.
    pub fn to_progress(&self) -> DownloadProgress {
        DownloadProgress {
            repo_id: self.repo_id.clone(),
            state: self.state,
            files: self.files.clone(),
            downloaded_bytes: self.downloaded_bytes,
            total_bytes: self.total_bytes,
            bytes_per_sec: 0.0,
            eta_seconds: None,
            error: self.error.clone(),
        }
    }
}

impl From<&DownloadProgress> for DownloadRecord {
    fn from(p: &DownloadProgress) -> Self {
        DownloadRecord {
            repo_id: p.repo_id.clone(),
            state: p.state,
            files: p.files.clone(),
            downloaded_bytes: p.downloaded_bytes,
            total_bytes: p.total_bytes,
            error: p.error.clone(),
            updated_at: 0,
        }
    }
}

/// Sets `fits_in_context` and `context_length` of a chat's documents (in attach order).
///
/// `fixed_tokens` is `tokens(systemPrompt) + sampling.maxTokens`; a document fits when that
/// plus the token counts of every document up to and including it is ≤ `context_length`.
pub fn apply_context_fit(documents: &mut [DocumentInfo], fixed_tokens: u64, context_length: u64) {
    let mut sum = fixed_tokens;
    for doc in documents {
        sum = sum.saturating_add(doc.token_count);
        doc.fits_in_context = sum <= context_length;
        doc.context_length = context_length;
        doc.context_needed = sum;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn cache() -> CacheSettings {
        CacheSettings {
            mode: CacheMode::Kivi,
            k_bits: 2,
            v_bits: 4,
            group_size: 32,
            residual_length: 128,
            sinks: 0,
            rotation: RotationSetting::None,
        }
    }

    #[test]
    fn messages_serialize_camel_case_with_nulls() {
        let m = Message {
            id: "7".into(),
            chat_id: "1".into(),
            role: Role::Assistant,
            content: "hi".into(),
            status: MessageStatus::Interrupted,
            error: None,
            created_at: 5,
            stats: None,
        };
        assert_eq!(
            serde_json::to_value(&m).unwrap(),
            json!({"id":"7","chatId":"1","role":"assistant","content":"hi","status":"interrupted",
                   "error":null,"createdAt":5,"stats":null})
        );
        let stats = GenerationStats {
            model_id: "builtin/x".into(),
            cache: cache(),
            prompt_tokens: 10,
            generated_tokens: 3,
            ttft_ms: None,
            prefill_tokens_per_sec: Some(1.5),
            decode_tokens_per_sec: None,
            kv_fp16_bytes: 100,
            kv_held_bytes: 30,
        };
        assert_eq!(
            serde_json::to_value(&stats).unwrap(),
            json!({"modelId":"builtin/x",
                   "cache":{"mode":"kivi","kBits":2,"vBits":4,"groupSize":32,"residualLength":128,
                            "sinks":0,"rotation":"none"},
                   "promptTokens":10,"generatedTokens":3,"ttftMs":null,"prefillTokensPerSec":1.5,
                   "decodeTokensPerSec":null,"kvFp16Bytes":100,"kvHeldBytes":30})
        );
    }

    #[test]
    fn rotation_reads_its_names_and_the_old_switch() {
        for (saved, want) in [
            (json!("none"), RotationSetting::None),
            (json!("values"), RotationSetting::Values),
            (json!("both"), RotationSetting::Both),
            (json!("adaptive"), RotationSetting::Adaptive),
            (json!(false), RotationSetting::None),
            (json!(true), RotationSetting::Both),
        ] {
            let got: RotationSetting = serde_json::from_value(saved.clone()).unwrap();
            assert_eq!(got, want, "{saved}");
        }
        assert_eq!(
            serde_json::to_value(RotationSetting::Values).unwrap(),
            json!("values")
        );
        for bad in [json!("keys"), json!(1), json!(null), json!("Both")] {
            let err = serde_json::from_value::<RotationSetting>(bad.clone()).unwrap_err();
            assert!(
                err.to_string()
                    .contains("\"none\", \"values\", \"both\" or \"adaptive\""),
                "{bad}: {err}"
            );
        }
    }

    #[test]
    fn chat_is_flat_and_enums_are_camel_case() {
        let chat = Chat {
            id: "1".into(),
            title: "t".into(),
            created_at: 1,
            updated_at: 2,
            message_count: 0,
            document_count: 0,
            preview: String::new(),
            system_prompt: String::new(),
            messages: vec![],
            documents: vec![],
            cache: ChatCacheInfo::default(),
        };
        let v = serde_json::to_value(&chat).unwrap();
        for key in [
            "id",
            "title",
            "createdAt",
            "updatedAt",
            "messageCount",
            "documentCount",
            "preview",
            "systemPrompt",
            "messages",
            "documents",
        ] {
            assert!(v.get(key).is_some(), "missing {key}");
        }
        assert_eq!(v["cache"], json!({"config": null, "tokens": 0}));
        assert_eq!(
            serde_json::to_value(DownloadState::Downloading).unwrap(),
            json!("downloading")
        );
        assert_eq!(
            serde_json::to_value(CacheMode::Fp16).unwrap(),
            json!("fp16")
        );
        assert_eq!(serde_json::to_value(DocumentKind::Md).unwrap(), json!("md"));
        for s in [
            "queued",
            "downloading",
            "paused",
            "failed",
            "completed",
            "cancelled",
        ] {
            assert_eq!(DownloadState::parse(s).unwrap().as_str(), s);
        }
    }

    #[test]
    fn context_fit_accumulates_in_attach_order() {
        let doc = |id: &str, tokens| DocumentInfo {
            id: id.into(),
            chat_id: "1".into(),
            name: format!("{id}.txt"),
            path: format!("/tmp/{id}.txt"),
            kind: DocumentKind::Txt,
            size_bytes: 1,
            token_count: tokens,
            fits_in_context: true,
            context_length: 0,
            context_needed: 0,
            kv_bytes: None,
            kv_fp16_bytes: None,
            read_seconds: None,
            prefilled: false,
            added_at: 0,
        };
        let mut docs = vec![doc("a", 3000), doc("b", 4000), doc("c", 100)];
        apply_context_fit(&mut docs, 1024 + 20, 8192);
        assert_eq!(
            docs.iter().map(|d| d.fits_in_context).collect::<Vec<_>>(),
            [true, true, true]
        );
        apply_context_fit(&mut docs, 1024 + 20, 6000);
        assert_eq!(
            docs.iter().map(|d| d.fits_in_context).collect::<Vec<_>>(),
            [true, false, false]
        );
        assert!(docs.iter().all(|d| d.context_length == 6000));
        assert_eq!(
            docs.iter().map(|d| d.context_needed).collect::<Vec<_>>(),
            [4044, 8044, 8144]
        );
        let json = serde_json::to_value(&docs[0]).unwrap();
        assert_eq!(json["fitsInContext"], json!(true));
        assert_eq!(json["contextNeeded"], json!(4044));
        assert_eq!(json["kind"], json!("txt"));
    }
}
