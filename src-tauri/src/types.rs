//! The IPC types (ui/IPC.md) the store does not persist: events' payloads, live statistics,
//! models and the server. Same conventions as `store::types`: camelCase, every `Option`
//! serialized (as `null`), unit enums as camelCase strings.

use serde::{Deserialize, Serialize};

use crate::store::{CacheConfig, DownloadProgress, Id, Message};

/// `chat-token`: decoded text of a streaming answer (possibly several tokens).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct TokenEvent {
    /// The chat.
    pub chat_id: Id,
    /// The generation.
    pub generation_id: Id,
    /// The assistant message being written.
    pub message_id: Id,
    /// Text to append.
    pub delta: String,
    /// The answer's length before `delta`, in UTF-16 code units (a JavaScript string's
    /// length): a window that opened the chat mid-answer skips what it already shows.
    pub offset: u64,
}

/// `chat-done`: the final stored message of a generation.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct GenerationDoneEvent {
    /// The chat.
    pub chat_id: Id,
    /// The generation.
    pub generation_id: Id,
    /// Status complete, stopped or error, with its statistics.
    pub message: Message,
}

/// Where a prefill stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub enum PrefillState {
    /// Tokens are being processed.
    Running,
    /// Everything is in the cache.
    Done,
    /// Stopped by the user.
    Cancelled,
    /// Failed (`error` says why).
    Error,
}

/// `prefill-progress`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct PrefillProgressEvent {
    /// The chat.
    pub chat_id: Id,
    /// `prefill_chat`'s job id, or the generation id.
    pub job_id: Id,
    /// Documents this prefill reads (not cached before).
    pub document_ids: Vec<Id>,
    /// Where it stands.
    pub state: PrefillState,
    /// Tokens done.
    pub processed_tokens: u64,
    /// Tokens this prefill processes (not counting cached ones).
    pub total_tokens: u64,
    /// Speed so far.
    pub tokens_per_sec: Option<f64>,
    /// Time left at that speed.
    pub eta_seconds: Option<f64>,
    /// Why it failed, when `state` is `error`.
    pub error: Option<String>,
}

/// What the engine is doing.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub enum Phase {
    /// Nothing runs.
    Idle,
    /// A model is loading.
    Loading,
    /// A prompt is being processed.
    Prefill,
    /// Tokens are being generated.
    Decode,
}

/// The device the model computes on.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub enum Device {
    /// The CPU (the host kernels, or MLX's CPU back end).
    Cpu,
    /// The GPU through MLX (Metal on a Mac).
    Gpu,
}

/// `stats` and `get_stats`: the live panel's numbers.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct StatsSnapshot {
    /// Milliseconds since the Unix epoch.
    pub timestamp_ms: u64,
    /// What the engine is doing.
    pub phase: Phase,
    /// The chat whose cache is described (running or last used).
    pub chat_id: Option<Id>,
    /// Where the model runs.
    pub device: Device,
    /// E.g. "CPU · 16 threads".
    pub device_name: String,
    /// The backend's name: `host`, `mlx-cpu-f16`, `mlx-gpu-f16`, ...
    pub backend: String,
    /// The backend in words: "MLX on the GPU, float16".
    pub backend_name: String,
    /// The described cache's settings; `None` = no cache.
    pub cache: Option<CacheConfig>,
    /// The context length in force.
    pub context_length: u64,
    /// Tokens in the cache: quantized + sinks + window.
    pub tokens: u64,
    /// Tokens stored quantized (the engine's count).
    pub quantized_tokens: u64,
    /// KIVI+ attention sinks held: the first tokens, in full precision for good (the
    /// engine's count; 0 without sinks and for fp16).
    pub sink_tokens: u64,
    /// Tokens in the full-precision window, sinks not counted (fp16: every token).
    pub residual_tokens: u64,
    /// The engine's most tokens in the window before its oldest group is quantized:
    /// KIVI `R + G - 1`; fp16 0.
    pub residual_capacity: u64,
    /// The engine's tokens that can still enter the window before its oldest group is
    /// quantized (`residual_capacity - residual_tokens`, 0 = the next token flushes);
    /// fp16 `None`.
    pub tokens_until_flush: Option<u64>,
    /// The same tokens' K and V in fp16.
    pub kv_fp16_bytes: u64,
    /// What the cache really holds.
    pub kv_held_bytes: u64,
    /// Layers attending over a sliding window (Gemma 3's local layers); 0 for most models.
    pub window_layers: u64,
    /// Positions each window layer holds: its window and a slack, in full precision.
    pub window_tokens: u64,
    /// The part of `kv_held_bytes` the window layers hold.
    pub kv_window_held_bytes: u64,
    /// Current or last generation.
    pub decode_tokens_per_sec: Option<f64>,
    /// Current or last prefill.
    pub prefill_tokens_per_sec: Option<f64>,
    /// Time to first token of the current or last generation.
    pub ttft_ms: Option<f64>,
    /// Resident memory of the app.
    pub process_memory_bytes: u64,
    /// Memory in use on the machine.
    pub system_memory_used_bytes: u64,
    /// Memory of the machine.
    pub system_memory_total_bytes: u64,
    /// MLX active memory on Metal; `None` on the CPU.
    pub device_memory_bytes: Option<u64>,
    /// The described chat's cache file: when it was last written or read back; `None` when
    /// neither happened since the app started.
    pub disk_cache: Option<DiskCacheEvent>,
}

/// What happened to a chat's cache file.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub enum DiskCacheAction {
    /// Written (the chat went idle, or the app quit).
    Saved,
    /// Read back and checked (the chat was opened after a restart or an eviction).
    Restored,
    /// Another chat's file read and checked: it had read the same documents (with the same
    /// system prompt, model and cache settings), so this chat does not read them again.
    Reused,
}

/// A chat's cache file, as the panel shows it ("restored from disk, 12.3 MiB, 0.2 s").
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct DiskCacheEvent {
    /// Written or read.
    pub action: DiskCacheAction,
    /// Size of the file.
    pub bytes: u64,
    /// Tokens the cache holds.
    pub tokens: u64,
    /// How long the write or the read (with its checks) took.
    pub seconds: f64,
}

/// Where a model comes from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub enum ModelSource {
    /// Shipped with the app.
    Builtin,
    /// A Hugging Face hub repository.
    Hub,
    /// A file or folder on this computer the user added (id `local:<path>`).
    Local,
}

/// Whether a model can be used.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub enum ModelAvailability {
    /// On disk.
    Ready,
    /// Not on disk.
    NotDownloaded,
    /// Being downloaded.
    Downloading,
    /// A download is paused.
    Paused,
    /// A download failed.
    Failed,
}

/// One model of the list.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ModelInfo {
    /// Hub repo id or `builtin/...`.
    pub id: String,
    /// Display name.
    pub name: String,
    /// Built in or from the hub.
    pub source: ModelSource,
    /// On the fixed recommended list.
    pub recommended: bool,
    /// Whether it can be used.
    pub availability: ModelAvailability,
    /// Total file size, when known.
    pub size_bytes: Option<u64>,
    /// Weights plus a KV cache at the current context length.
    pub memory_estimate_bytes: Option<u64>,
    /// `memory_estimate_bytes` ≤ available memory.
    pub fits_in_memory: Option<bool>,
    /// The model's maximum context.
    pub context_length: Option<u64>,
    /// The download, while one exists.
    pub download: Option<DownloadProgress>,
}

/// `list_models`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ModelsOverview {
    /// Built-in first, then downloaded, then recommended, then others looked up.
    pub models: Vec<ModelInfo>,
    /// The chosen model.
    pub active_model_id: Option<String>,
    /// Memory free for a model now.
    pub available_memory_bytes: u64,
    /// Memory of the machine.
    pub total_memory_bytes: u64,
}

/// Where loading the active model stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub enum ModelLoadState {
    /// Nothing loaded.
    Unloaded,
    /// Loading.
    Loading,
    /// Ready to generate.
    Ready,
    /// Loading failed.
    Failed,
}

/// `model-status` and `get_model_status`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ModelStatus {
    /// The active model.
    pub model_id: Option<String>,
    /// Its display name.
    pub name: Option<String>,
    /// Where loading stands.
    pub state: ModelLoadState,
    /// 0..=1 while loading, when known.
    pub progress: Option<f64>,
    /// Why loading failed, and what to do.
    pub error: Option<String>,
}

/// `server-status` and the server commands.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ServerStatus {
    /// Listening.
    pub running: bool,
    /// Always "127.0.0.1".
    pub host: String,
    /// The listening port, or the last used/default one.
    pub port: u16,
    /// "http://127.0.0.1:{port}/v1" while running.
    pub url: Option<String>,
    /// Requests need a bearer token.
    pub auth_required: bool,
    /// Why it stopped or failed.
    pub error: Option<String>,
}

/// `get_hub_token_status` / `set_hub_token`: whether a hub token is stored in the OS
/// keychain (the token itself never crosses the IPC boundary back to the UI).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct HubTokenStatus {
    /// A token is stored (and used for hub requests).
    pub stored: bool,
    /// The keychain could be reached.
    pub keychain_available: bool,
    /// Why the keychain cannot be used, when it cannot.
    pub error: Option<String>,
}
