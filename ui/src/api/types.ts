/**
 * The data that crosses the IPC boundary. Every type here mirrors a Rust struct or enum
 * serialized with `#[serde(rename_all = "camelCase")]`; IPC.md is the normative description.
 * Optional Rust values (`Option<T>`) are always present and `null` when absent, never omitted.
 */

/** An opaque identifier chosen by the back end (a UUID string or a stringified integer). */
export type Id = string;

/** Milliseconds since the Unix epoch (UTC). */
export type EpochMillis = number;

// ---------------------------------------------------------------------------------------------
// Errors

/** Machine-readable error kinds; Rust: `enum ErrorCode` with `rename_all = "camelCase"`. */
export type ErrorCode =
  | "notFound"
  | "invalidArgument"
  | "busy"
  | "cancelled"
  | "modelNotLoaded"
  | "modelLoadFailed"
  | "contextOverflow"
  | "unsupportedFile"
  | "invalidDocument"
  | "insufficientMemory"
  | "network"
  | "portInUse"
  | "io"
  | "internal";

/** What every failing command rejects with (Rust: `Err(CommandError)`). */
export interface CommandError {
  code: ErrorCode;
  /** A sentence for the user: what went wrong and what to do about it. */
  message: string;
  /** For `invalidArgument`: the offending field as a dotted path (`cache.residualLength`). */
  field: string | null;
}

// ---------------------------------------------------------------------------------------------
// Settings

export type CacheMode = "kivi" | "fp16";
export type Bits = 2 | 4;
export type GroupSize = 32 | 64 | 128;
/** KIVI+ attention sinks the settings offer (0 = none). */
export type SinkTokens = 0 | 4 | 16;
/** KIVI+: what the cache stores in a Hadamard basis ("both": keys and values; "adaptive":
 * each, per KV head, where that quantizes better, chosen from the cache's first groups). */
export type RotationChoice = "none" | "values" | "both" | "adaptive";

/** How a KV cache is built. `kBits`, `vBits`, `groupSize`, `residualLength`, `sinks` and
 * `rotation` are kept (and validated) in fp16 mode too, so switching back to KIVI restores
 * them; an fp16 cache ignores them. */
export interface CacheConfig {
  mode: CacheMode;
  kBits: Bits;
  vBits: Bits;
  groupSize: GroupSize;
  /** R: tokens kept in full precision; a multiple of `groupSize`, 0..=4096, < contextLength. */
  residualLength: number;
  /** KIVI+: the first tokens of a conversation, kept in full precision for good (0, 4 or 16;
   * settings saved before KIVI+ read as 0). */
  sinks: SinkTokens;
  /** KIVI+: values, or keys and values, stored in a rotated (Hadamard) basis (settings saved
   * when this was a switch read `true` as "both" and `false` as "none"). */
  rotation: RotationChoice;
}

export interface SamplingSettings {
  /** 0..=2; 0 means greedy. */
  temperature: number;
  /** (0, 1]. */
  topP: number;
  /** 0..=1000 integer; 0 disables top-k. */
  topK: number;
  /** 1..=2; 1 disables the penalty. */
  repetitionPenalty: number;
  /** 1..=32768 integer and < contextLength: the longest answer. */
  maxTokens: number;
  /** 0..=4294967295 integer, or null for a random seed per answer. */
  seed: number | null;
}

export interface Settings {
  cache: CacheConfig;
  /** 512..=131072 integer: tokens the KV cache may hold (prompt, documents and answer). */
  contextLength: number;
  sampling: SamplingSettings;
  /** Where and how the model runs: "auto" or a backend name ("host", "mlx-cpu-f16",
   * "mlx-gpu-f16", ...). */
  backend: string;
  /** 0..=1048576 integer: MiB of disk the chats' saved KV caches may take; the least recently
   * used files are evicted first; 0 keeps no cache on disk. Settings saved before it existed
   * read as 2048 (the default). Changing it does not reset the caches. */
  diskCacheMib: number;
}

/** What `fit_context_length` returns: "Fit this machine". */
export interface ContextFit {
  /** The longest context (a multiple of 256 tokens, at most the model's trained context and
   * 131,072) whose KV cache with the given settings the memory holds beside the loaded model. */
  contextLength: number;
  /** The loaded model's trained context. */
  modelContext: number;
  /** Bytes that context's KV cache takes. */
  kvBytes: number;
  /** Memory the estimate had: available now plus what the loaded model holds. */
  availableBytes: number;
}

export interface SettingsUpdate {
  settings: Settings;
  /** True when `cache`, `contextLength` or `backend` changed, so every chat's KV cache was
   * dropped (`diskCacheMib` alone never resets them). */
  cacheReset: boolean;
  /** True when `backend` changed and the active model is loading again on the new one. */
  modelReload: boolean;
}

// ---------------------------------------------------------------------------------------------
// Chats and messages

export type Role = "user" | "assistant";

export type MessageStatus = "complete" | "streaming" | "stopped" | "interrupted" | "error";

/** Measurements of one answer, filled in when it ends. */
export interface GenerationStats {
  modelId: string;
  /** The cache settings this answer was generated with. */
  cache: CacheConfig;
  promptTokens: number;
  generatedTokens: number;
  ttftMs: number | null;
  prefillTokensPerSec: number | null;
  decodeTokensPerSec: number | null;
  /** KV bytes at the end of the answer: the same tokens in fp16, and what the cache held. */
  kvFp16Bytes: number;
  kvHeldBytes: number;
}

export interface Message {
  id: Id;
  chatId: Id;
  role: Role;
  /** Plain text; for the assistant, Markdown written by the model (rendered sanitized). */
  content: string;
  status: MessageStatus;
  /** Set when `status` is `error`. */
  error: string | null;
  createdAt: EpochMillis;
  /** Assistant messages only, once finished (complete, stopped or error); else null. */
  stats: GenerationStats | null;
}

export type DocumentKind = "txt" | "md" | "pdf";

export interface DocumentInfo {
  id: Id;
  chatId: Id;
  /** File name without directories, e.g. `moby-dick.txt`. */
  name: string;
  /** Absolute path it was read from. */
  path: string;
  kind: DocumentKind;
  sizeBytes: number;
  /** Tokens of the extracted text, counted with the active model's tokenizer. */
  tokenCount: number;
  /** The system prompt, every document up to and including this one (in attach order) and
   * room for one answer (`sampling.maxTokens`) fit in `contextLength`. */
  fitsInContext: boolean;
  /** The context length `fitsInContext` was computed against. */
  contextLength: number;
  /** The context this document needs: the system prompt, the documents up to it and room for
   * an answer together. */
  contextNeeded: number;
  /** Bytes the chat's KV cache holds once the system prompt and the documents up to this one
   * are read, with the current cache settings; null without a loaded model. */
  kvBytes: number | null;
  /** The same tokens' keys and values in float16. */
  kvFp16Bytes: number | null;
  /** Seconds to read this document at the loaded model's last measured reading speed; null
   * before one was measured. */
  readSeconds: number | null;
  /** Its tokens are in the chat's current KV cache (follow-up questions skip its prefill). */
  prefilled: boolean;
  addedAt: EpochMillis;
}

/** The chat's live KV cache, if any. */
export interface ChatCacheInfo {
  /** The settings the cache was built with; null when the chat has no cache (yet, or dropped). */
  config: CacheConfig | null;
  /** Tokens in the cache. */
  tokens: number;
}

export interface ChatSummary {
  id: Id;
  title: string;
  createdAt: EpochMillis;
  updatedAt: EpochMillis;
  messageCount: number;
  documentCount: number;
  /** The start of the last message, at most 120 characters, single line; "" when empty. */
  preview: string;
}

export interface Chat extends ChatSummary {
  systemPrompt: string;
  /** Oldest first. */
  messages: Message[];
  /** In attach order. */
  documents: DocumentInfo[];
  cache: ChatCacheInfo;
}

/** Returned by `send_message`, `regenerate` and `edit_message`. */
export interface GenerationStarted {
  generationId: Id;
  /** The new (send) or edited (edit) user message; null for regenerate. */
  userMessage: Message | null;
  /** The answer being written: status `streaming`, content "". */
  assistantMessage: Message;
}

export type ExportFormat = "markdown" | "json";

// ---------------------------------------------------------------------------------------------
// Events

/** `chat-token`: new text of a streaming answer. */
export interface TokenEvent {
  chatId: Id;
  generationId: Id;
  messageId: Id;
  /** Text to append (one or more tokens, already detokenized; may be ""). */
  delta: string;
  /** The answer's length before `delta`, in UTF-16 code units (JavaScript string length). */
  offset: number;
}

/** `chat-done`: a generation ended (complete, stopped or failed). Always sent, exactly once. */
export interface GenerationDoneEvent {
  chatId: Id;
  generationId: Id;
  /** The final stored message (status complete | stopped | error, stats filled in). */
  message: Message;
}

export type PrefillState = "running" | "done" | "cancelled" | "error";

/** `prefill-progress`: prompt processing of a `prefill_chat` job or of a generation. */
export interface PrefillProgressEvent {
  chatId: Id;
  /** The `prefill_chat` job id, or the generation id when a generation prefills its prompt. */
  jobId: Id;
  /** Documents whose tokens this prefill covers (not yet cached before it); may be empty. */
  documentIds: Id[];
  state: PrefillState;
  processedTokens: number;
  totalTokens: number;
  tokensPerSec: number | null;
  etaSeconds: number | null;
  /** Set when `state` is `error`. */
  error: string | null;
}

export type Phase = "idle" | "loading" | "prefill" | "decode";

/** What happened to a chat's cache file: "saved" = written to the data folder when the chat
 * went idle or the app quit; "restored" = read back and checked when the chat was opened after
 * a restart, so the next question starts at once without re-reading its documents; "reused" =
 * another chat's file that had read the same documents (same system prompt, model and cache
 * settings), read instead of reading them again. */
export type DiskCacheAction = "saved" | "restored" | "reused";

/** The last write or read of a chat's cache file ("restored from disk, 12.3 MiB, 0.2 s"). */
export interface DiskCacheEvent {
  action: DiskCacheAction;
  /** Size of the file. */
  bytes: number;
  /** Tokens the cache holds. */
  tokens: number;
  /** How long the write, or the read with its checks, took. */
  seconds: number;
}
export type Device = "cpu" | "gpu";

/** `stats` (and `get_stats`): a snapshot of the engine and the KV cache it works on. */
export interface StatsSnapshot {
  timestampMs: EpochMillis;
  phase: Phase;
  /** The chat whose cache the numbers describe; null when there is no cache. */
  chatId: Id | null;
  device: Device;
  /** Human-readable, e.g. "Apple silicon GPU (Metal)" or "CPU · x86_64 · 16 threads". */
  deviceName: string;
  /** The backend's name: "host", "mlx-cpu-f16", "mlx-gpu-f16", ... */
  backend: string;
  /** The backend in words: "MLX on the GPU, float16". */
  backendName: string;
  /** The described cache's settings; null when there is no cache. */
  cache: CacheConfig | null;
  contextLength: number;
  /** Tokens in the cache: quantizedTokens + sinkTokens + residualTokens. */
  tokens: number;
  /** Tokens stored quantized (the engine's count). */
  quantizedTokens: number;
  /** KIVI+ attention sinks held: the first tokens, in full precision for good (0 without
   * sinks and in fp16 mode). */
  sinkTokens: number;
  /** Tokens in the full-precision residual window, sinks not counted (all tokens in fp16 mode). */
  residualTokens: number;
  /** The engine's most tokens in the window before its oldest group is quantized: R + G - 1
   * in KIVI mode; 0 in fp16 mode. */
  residualCapacity: number;
  /** Tokens that can still enter the window before its oldest group is quantized
   * (residualCapacity - residualTokens; 0 = the next token flushes); null in fp16 mode. */
  tokensUntilFlush: number | null;
  /** The same tokens' K and V in fp16, all layers. */
  kvFp16Bytes: number;
  /** What the cache really holds: packed data + scales + zeros + residual, all layers. */
  kvHeldBytes: number;
  /** Layers attending over a sliding window (Gemma 3's local layers), whose caches hold their
   * newest positions in full precision whatever the settings; 0 for most models. */
  windowLayers: number;
  /** Positions each window layer holds (its window and a slack). */
  windowTokens: number;
  /** The part of kvHeldBytes the window layers hold. */
  kvWindowHeldBytes: number;
  decodeTokensPerSec: number | null;
  prefillTokensPerSec: number | null;
  ttftMs: number | null;
  processMemoryBytes: number;
  systemMemoryUsedBytes: number;
  systemMemoryTotalBytes: number;
  /** Memory the device holds for MLX (Metal active memory); null on the CPU. */
  deviceMemoryBytes: number | null;
  /** The described chat's cache file: when it was last written or read back; null when
   * neither happened since the app started. */
  diskCache: DiskCacheEvent | null;
}

// ---------------------------------------------------------------------------------------------
// Models and downloads

/** "builtin": shipped with the app; "hub": a Hugging Face repo; "local": a `.gguf` file or a
 * model folder on this computer that the user added (`add_local_model`, id `local:<path>`). */
export type ModelSource = "builtin" | "hub" | "local";
export type ModelAvailability = "ready" | "notDownloaded" | "downloading" | "paused" | "failed";

export type DownloadState = "queued" | "downloading" | "paused" | "failed" | "completed" | "cancelled";

export interface DownloadFile {
  /** Path inside the repository, e.g. `model.safetensors`. */
  name: string;
  downloadedBytes: number;
  /** Null until the hub reported the size. */
  totalBytes: number | null;
  done: boolean;
}

/** `download-progress` (and inside ModelInfo). */
export interface DownloadProgress {
  repoId: string;
  state: DownloadState;
  files: DownloadFile[];
  downloadedBytes: number;
  totalBytes: number | null;
  /** Averaged over the last few seconds; 0 when paused. */
  bytesPerSec: number;
  etaSeconds: number | null;
  error: string | null;
}

export interface ModelInfo {
  /** Hub repo id (`owner/name`), a built-in id such as `builtin/SmolLM2-135M-Instruct-Q4_1`, or
   * `local:<absolute path>` for a model file or folder the user added. */
  id: string;
  /** Display name, e.g. "Llama 3.2 3B Instruct (4-bit)". */
  name: string;
  source: ModelSource;
  recommended: boolean;
  availability: ModelAvailability;
  /** Total size of the model files; null until known. */
  sizeBytes: number | null;
  /** Memory needed to run it: weights plus a KV cache at the current context length. */
  memoryEstimateBytes: number | null;
  /** memoryEstimateBytes <= available memory; null when unknown. */
  fitsInMemory: boolean | null;
  /** The model's maximum context; null when unknown. */
  contextLength: number | null;
  /** Present while a download exists (queued, downloading, paused, failed). */
  download: DownloadProgress | null;
}

export interface ModelsOverview {
  models: ModelInfo[];
  activeModelId: string | null;
  availableMemoryBytes: number;
  totalMemoryBytes: number;
}

export type ModelLoadState = "unloaded" | "loading" | "ready" | "failed";

/** `model-status` (and `get_model_status`, `set_active_model`). */
export interface ModelStatus {
  modelId: string | null;
  /** Display name of modelId. */
  name: string | null;
  state: ModelLoadState;
  /** 0..=1 while loading, when known. */
  progress: number | null;
  /** Set when `state` is `failed`: what went wrong and what to do. */
  error: string | null;
}

/** `get_hub_token_status` / `set_hub_token`: a Hugging Face token kept in the OS keychain
 * (the token itself never comes back to the UI). */
export interface HubTokenStatus {
  /** A token is stored and used for hub requests. */
  stored: boolean;
  /** The OS keychain could be reached (false on a Linux machine without a Secret Service). */
  keychainAvailable: boolean;
  /** Why the keychain cannot be used; null otherwise. */
  error: string | null;
}

// ---------------------------------------------------------------------------------------------
// Local OpenAI-compatible server

/** `server-status` (and the server commands). */
export interface ServerStatus {
  running: boolean;
  /** Always `127.0.0.1` (the server never listens on other interfaces). */
  host: string;
  /** The port it listens on, or the last/default one (8080) when stopped. */
  port: number;
  /** `http://127.0.0.1:{port}/v1` while running; null when stopped. */
  url: string | null;
  /** Requests must carry `Authorization: Bearer <token>`. */
  authRequired: boolean;
  /** Why it stopped or failed to start; null otherwise. */
  error: string | null;
}
