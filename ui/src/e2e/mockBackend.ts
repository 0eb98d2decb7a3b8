/**
 * A fake back end for browser tests and `npm run dev:mock`: every command of IPC.md, in
 * memory, with streamed answers, prefill progress, downloads and `stats` events.
 * Only e2e.html loads this; the production bundle (index.html) never does.
 * Tests steer it through `window.__kiviMock` (see MockControl).
 */
import { mockIPC, mockWindows } from "@tauri-apps/api/mocks";
import { emit } from "@tauri-apps/api/event";
import type {
  CacheConfig,
  Chat,
  ChatSummary,
  CommandError,
  DiskCacheEvent,
  DocumentInfo,
  DownloadProgress,
  GenerationStarted,
  Message,
  ModelInfo,
  ModelStatus,
  ServerStatus,
  Settings,
  StatsSnapshot,
} from "../api/types";
import type { EventMap, EventName } from "../api/events";
import { validateSettings } from "../lib/validate";
import { residualWindow, sameCache } from "../lib/kivi";
import { parseJsonAnswer } from "../lib/jsonAnswer";

const GiB = 1024 ** 3;
const MiB = 1024 ** 2;

export interface MockControl {
  /** Every command the UI invoked, in order. */
  calls: { cmd: string; args: Record<string, unknown> }[];
  /** Emits an event to the UI as the back end would. */
  emit<K extends EventName>(event: K, payload: EventMap[K]): Promise<void>;
  /** Any other event, e.g. Tauri's `tauri://drag-drop` with `{ paths, position }`. */
  emit(event: string, payload: unknown): Promise<void>;
  /** The next answers' text (consumed one per generation; then the default answer). */
  replies: string[];
  /** Milliseconds between streamed chunks. */
  tokenDelayMs: number;
  /** Emit `stats` on a timer (disable for deterministic panel tests). */
  autoStats: boolean;
  /** Paths `pick_documents` returns. */
  pickResult: string[];
  /** What the model dialog of `add_local_model` returns: a `.gguf` file (`file`) or a model
   * folder (`folder`); null = the dialog was cancelled. A file not ending in `.gguf`, or a
   * folder whose name contains "empty", is rejected as the back end rejects a non-model. */
  modelPick: { file: string | null; folder: string | null };
  /** Keep prefill jobs from finishing (they stop at `prefillHoldAt` of the total). */
  holdPrefill: boolean;
  prefillHoldAt: number;
  /** Makes the next call of `cmd` fail with this error. */
  failNext(cmd: string, error: Partial<CommandError>): void;
  /** The mock's current stats snapshot. */
  snapshot(): StatsSnapshot;
  settings(): Settings;
}

declare global {
  interface Window {
    __kiviMock: MockControl;
  }
}

// -------------------------------------------------------------------------------------------
// State

let seq = 100;
const newId = (prefix: string) => `${prefix}-${++seq}`;
const now = () => Date.now();

const DEFAULT_SETTINGS: Settings = {
  cache: { mode: "kivi", kBits: 2, vBits: 2, groupSize: 32, residualLength: 128, sinks: 4, rotation: "both" },
  contextLength: 32768,
  sampling: { temperature: 0.7, topP: 0.9, topK: 40, repetitionPenalty: 1.1, maxTokens: 1024, seed: null },
  backend: "auto",
  diskCacheMib: 2048,
};
// The saved settings start as a user's from before KIVI+ (plain KIVI), so that the tests
// see the KIVI+ controls change something.
let settings: Settings = { ...structuredClone(DEFAULT_SETTINGS), cache: { ...DEFAULT_SETTINGS.cache, sinks: 0, rotation: "none" } };

/** The backend the mock runs on: what `auto` resolves to on this (Linux) machine. */
const backendOf = (choice: string) => (choice === "auto" ? "host" : choice);
const BACKEND_NAMES: Record<string, string> = {
  host: "host kernels on the CPU, float32 (KV cache in float16)",
  "mlx-cpu-f32": "MLX on the CPU, float32 (KV cache in float16)",
  "mlx-cpu-f16": "MLX on the CPU, float16",
};

interface ChatRecord {
  chat: Chat;
  cacheTokens: number;
  cacheConfig: CacheConfig | null;
  /** The chat's cache file: last written or read back (null: neither since the mock started). */
  diskCache: DiskCacheEvent | null;
}
const chats = new Map<string, ChatRecord>();

// Model dimensions for the byte accounting (Llama 3.2 3B: 28 layers, 8 KV heads, head_dim 128).
const LAYERS = 28;
const KV_HEADS = 8;
const HEAD_DIM = 128;

/** fp16 bytes and held bytes of a cache holding `t` tokens, and its split (sinks, quantized,
 * window), computed as the engine would. */
function kvBytes(t: number, cfg: CacheConfig | null): { fp16: number; held: number; quantized: number; sinks: number; residual: number } {
  const perTokenFp16 = 2 * LAYERS * KV_HEADS * HEAD_DIM * 2;
  const fp16 = t * perTokenFp16;
  if (!cfg || cfg.mode === "fp16") return { fp16, held: fp16, quantized: 0, sinks: 0, residual: t };
  const w = residualWindow(t, cfg.residualLength, cfg.groupSize, cfg.sinks);
  const q = w.quantized;
  const heads = LAYERS * KV_HEADS;
  const keys = q * HEAD_DIM * (cfg.kBits / 8) + (q / cfg.groupSize) * HEAD_DIM * 4;
  const values = q * HEAD_DIM * (cfg.vBits / 8) + q * (HEAD_DIM / cfg.groupSize) * 4;
  // Sinks and the window are both held in fp16.
  const residual = (w.sinks + w.residual) * HEAD_DIM * 2 * 2;
  return { fp16, held: heads * (keys + values + residual), quantized: q, sinks: w.sinks, residual: w.residual };
}

let phase: StatsSnapshot["phase"] = "idle";
let statsChatId: string | null = null;
let decodeRate: number | null = null;
let prefillRate: number | null = null;
let ttft: number | null = null;

function snapshot(): StatsSnapshot {
  const rec = statsChatId ? chats.get(statsChatId) : undefined;
  const t = rec?.cacheTokens ?? 0;
  const cfg = rec?.cacheConfig ?? null;
  const b = kvBytes(t, cfg);
  const kivi = cfg && cfg.mode === "kivi";
  const w = kivi ? residualWindow(t, cfg.residualLength, cfg.groupSize, cfg.sinks) : null;
  return {
    timestampMs: now(),
    phase,
    chatId: rec ? statsChatId : null,
    device: "cpu",
    deviceName: "CPU · x86_64 · 16 threads (mock)",
    backend: backendOf(settings.backend),
    backendName: BACKEND_NAMES[backendOf(settings.backend)] ?? backendOf(settings.backend),
    cache: cfg,
    contextLength: settings.contextLength,
    tokens: t,
    quantizedTokens: b.quantized,
    sinkTokens: b.sinks,
    residualTokens: b.residual,
    residualCapacity: w ? w.capacity : 0,
    tokensUntilFlush: w ? w.untilFlush : null,
    kvFp16Bytes: b.fp16,
    kvHeldBytes: b.held,
    windowLayers: 0,
    windowTokens: 0,
    kvWindowHeldBytes: 0,
    decodeTokensPerSec: decodeRate,
    prefillTokensPerSec: prefillRate,
    ttftMs: ttft,
    processMemoryBytes: 2.31 * GiB + b.held,
    systemMemoryUsedBytes: 9.4 * GiB + b.held,
    systemMemoryTotalBytes: 16 * GiB,
    deviceMemoryBytes: null,
    diskCache: rec?.diskCache ? { ...rec.diskCache } : null,
  };
}

/** The chat's cache as the back end writes it to disk when the chat goes idle (about
 * 1.5 GiB/s); null when there is nothing to keep (no cache, or `diskCacheMib` is 0). */
function savedToDisk(rec: ChatRecord): DiskCacheEvent | null {
  if (!rec.cacheConfig || rec.cacheTokens === 0 || settings.diskCacheMib === 0) return null;
  const bytes = kvBytes(rec.cacheTokens, rec.cacheConfig).held + 64 * 1024;
  return { action: "saved", bytes, tokens: rec.cacheTokens, seconds: bytes / (1.5 * GiB) };
}

function summary(c: Chat): ChatSummary {
  const last = c.messages[c.messages.length - 1];
  return {
    id: c.id,
    title: c.title,
    createdAt: c.createdAt,
    updatedAt: c.updatedAt,
    messageCount: c.messages.length,
    documentCount: c.documents.length,
    preview: last ? last.content.replace(/\s+/g, " ").slice(0, 120) : "",
  };
}

function chatOut(rec: ChatRecord): Chat {
  const c = rec.chat;
  const messages = c.messages.map((m) => (m.status === "streaming" && streamed.has(m.id) ? { ...m, content: streamed.get(m.id)! } : m));
  return structuredClone({
    ...c,
    messages,
    ...summary(c),
    documents: withFit(c),
    cache: { config: rec.cacheConfig, tokens: rec.cacheTokens },
  });
}

const estimateTokens = (text: string) => Math.max(1, Math.round(text.length / 4));

/** The mock model's reading speed (prompt tokens a second), as its prefills run. */
const MOCK_READING_SPEED = 1874.2;

function withFit(c: Chat): DocumentInfo[] {
  const system = estimateTokens(c.systemPrompt);
  let used = system + settings.sampling.maxTokens;
  let held = system;
  return c.documents.map((d) => {
    used += d.tokenCount;
    held += d.tokenCount;
    const bytes = kvBytes(held, settings.cache);
    return {
      ...d,
      fitsInContext: used <= settings.contextLength,
      contextLength: settings.contextLength,
      contextNeeded: used,
      kvBytes: bytes.held,
      kvFp16Bytes: bytes.fp16,
      readSeconds: d.tokenCount / MOCK_READING_SPEED,
    };
  });
}

function msg(chatId: string, role: Message["role"], content: string, status: Message["status"], createdAt: number): Message {
  return { id: newId("msg"), chatId, role, content, status, error: null, createdAt, stats: null };
}

function statsFor(tokens: number, prompt: number, cfg: CacheConfig) {
  const b = kvBytes(prompt + tokens, cfg);
  return {
    modelId: activeModelId,
    cache: cfg,
    promptTokens: prompt,
    generatedTokens: tokens,
    ttftMs: 412,
    prefillTokensPerSec: 1874.2,
    decodeTokensPerSec: 23.6,
    kvFp16Bytes: b.fp16,
    kvHeldBytes: b.held,
  };
}

/** The answer to a question asked as JSON: what the real back end's constrained decoding
 * writes (one line, `", "` and `": "` between items). */
const JSON_REPLY = `{"parties": [{"name": "Ada Lovelace", "role": "seller"}, {"name": "Charles Babbage", "role": "buyer"}], "date": {"year": 2024, "month": 5, "day": 3}, "price": 1200, "currency": "GBP", "signed": true, "note": "<b>not bold</b>"}`;

const DEFAULT_REPLY = `Ishmael opens with a confession: whenever he feels **"a damp, drizzly November"** in his soul, he goes to sea.

Three ideas in the first chapter:

1. **The sea as a cure** — a substitute for "pistol and ball".
2. **Everyone is drawn to water** — the crowds on the Manhattan piers, "fixed in ocean reveries".
3. **Fate** — he imagines his voyage as a line in a grand programme of Providence.

> "Call me Ishmael. Some years ago—never mind how long precisely—having little or no money in my purse…"

To count how often *whale* appears, you could run:

\`\`\`python
import re
from collections import Counter

text = open("moby-dick.txt", encoding="utf-8").read().lower()
words = Counter(re.findall(r"[a-z']+", text))
print(words["whale"], words["whales"])
\`\`\`

Want a summary of the next chapter, *The Carpet-Bag*?`;

function seed(): void {
  const t0 = now() - 3 * 3600_000;
  const c1: Chat = {
    id: "chat-moby",
    title: "Moby-Dick, chapter 1",
    createdAt: t0,
    updatedAt: t0 + 600_000,
    messageCount: 0,
    documentCount: 0,
    preview: "",
    systemPrompt: "Answer from the attached book. Quote it where you can.",
    messages: [],
    documents: [],
    cache: { config: null, tokens: 0 },
  };
  c1.documents.push({
    id: "doc-sotu",
    chatId: c1.id,
    name: "sotu-2016.txt",
    path: "/home/me/Documents/sotu-2016.txt",
    kind: "txt",
    sizeBytes: 31_250,
    tokenCount: 7412,
    fitsInContext: true,
    contextLength: settings.contextLength,
    contextNeeded: 0,
    kvBytes: null,
    kvFp16Bytes: null,
    readSeconds: null,
    prefilled: true,
    addedAt: t0,
  });
  const u1 = msg(c1.id, "user", "What does Ishmael say about why he goes to sea?", "complete", t0 + 1000);
  const a1 = msg(c1.id, "assistant", DEFAULT_REPLY, "complete", t0 + 2000);
  a1.stats = statsFor(412, 7650, settings.cache);
  const u2 = msg(c1.id, "user", "And what about the Spouter-Inn?", "complete", t0 + 500_000);
  const a2 = msg(c1.id, "assistant", "The Spouter-Inn is where Ishmael spends his first night in New Bedford. He describes a", "interrupted", t0 + 501_000);
  c1.messages.push(u1, a1, u2, a2);
  // As after a restart: the chat's cache was read back from disk when it was opened.
  const c1Cache = { ...settings.cache };
  const c1Bytes = kvBytes(8474, c1Cache).held + 64 * 1024;
  chats.set(c1.id, { chat: c1, cacheTokens: 8474, cacheConfig: c1Cache, diskCache: { action: "restored", bytes: c1Bytes, tokens: 8474, seconds: 0.21 } });

  const t1 = now() - 2 * 86_400_000;
  const c2: Chat = {
    id: "chat-rust",
    title: "Borrow checker question",
    createdAt: t1,
    updatedAt: t1 + 60_000,
    messageCount: 0,
    documentCount: 0,
    preview: "",
    systemPrompt: "",
    messages: [],
    documents: [],
    cache: { config: null, tokens: 0 },
  };
  const u3 = msg(c2.id, "user", "Why can't I hold two mutable borrows of a Vec?", "complete", t1);
  const a3 = msg(c2.id, "assistant", "Because `&mut` is an **exclusive** borrow:\n\n```rust\nlet mut v = vec![1, 2, 3];\nlet a = &mut v;\nlet b = &mut v; // error[E0499]\na.push(4);\n```\n\nUse one borrow at a time, or split the slice with `split_at_mut`.", "complete", t1 + 2000);
  a3.stats = statsFor(96, 220, { mode: "fp16", kBits: 4, vBits: 4, groupSize: 64, residualLength: 128, sinks: 0, rotation: "none" });
  c2.messages.push(u3, a3);
  chats.set(c2.id, { chat: c2, cacheTokens: 0, cacheConfig: null, diskCache: null });
  statsChatId = c1.id;
}

// Models -------------------------------------------------------------------------------------

let activeModelId = "builtin/SmolLM2-135M-Instruct-Q4_1";
const models: ModelInfo[] = [
  {
    id: "builtin/SmolLM2-135M-Instruct-Q4_1",
    name: "SmolLM2 135M Instruct (Q4_1)",
    source: "builtin",
    recommended: false,
    availability: "ready",
    sizeBytes: 98 * MiB,
    memoryEstimateBytes: 310 * MiB,
    fitsInMemory: true,
    contextLength: 8192,
    download: null,
  },
  {
    id: "mlx-community/Qwen3-4B-4bit",
    name: "Qwen3 4B (4-bit)",
    source: "hub",
    recommended: true,
    availability: "notDownloaded",
    sizeBytes: 2.11 * GiB,
    memoryEstimateBytes: 3.3 * GiB,
    fitsInMemory: true,
    contextLength: 40960,
    download: null,
  },
  {
    id: "mlx-community/Qwen3-8B-4bit",
    name: "Qwen3 8B (4-bit)",
    source: "hub",
    recommended: true,
    availability: "paused",
    sizeBytes: 4.28 * GiB,
    memoryEstimateBytes: 5.6 * GiB,
    fitsInMemory: true,
    contextLength: 40960,
    download: null,
  },
  {
    id: "mlx-community/Qwen3-14B-4bit",
    name: "Qwen3 14B (4-bit)",
    source: "hub",
    recommended: true,
    availability: "notDownloaded",
    sizeBytes: 7.74 * GiB,
    memoryEstimateBytes: 9.1 * GiB,
    fitsInMemory: false,
    contextLength: 40960,
    download: null,
  },
  {
    id: "mlx-community/Llama-3.2-3B-Instruct-4bit",
    name: "Llama 3.2 3B Instruct (4-bit)",
    source: "hub",
    recommended: true,
    availability: "notDownloaded",
    sizeBytes: 1.69 * GiB,
    memoryEstimateBytes: 2.9 * GiB,
    fitsInMemory: true,
    contextLength: 131072,
    download: null,
  },
];
const downloads = new Map<string, DownloadProgress>();
downloads.set("mlx-community/Qwen3-8B-4bit", {
  repoId: "mlx-community/Qwen3-8B-4bit",
  state: "paused",
  files: [
    { name: "config.json", downloadedBytes: 1_200, totalBytes: 1_200, done: true },
    { name: "tokenizer.json", downloadedBytes: 7_031_000, totalBytes: 7_031_000, done: true },
    { name: "model-00001-of-00002.safetensors", downloadedBytes: 1.62 * GiB, totalBytes: 2.14 * GiB, done: false },
    { name: "model-00002-of-00002.safetensors", downloadedBytes: 0, totalBytes: 2.13 * GiB, done: false },
  ],
  downloadedBytes: 1.627 * GiB,
  totalBytes: 4.28 * GiB,
  bytesPerSec: 0,
  etaSeconds: null,
  error: null,
});
let modelStatus: ModelStatus = { modelId: activeModelId, name: models[0]!.name, state: "ready", progress: null, error: null };

/** A model file or folder the user added, as `add_local_model` lists it (id `local:<path>`). */
function localModel(path: string, folder: boolean): ModelInfo {
  const base = path.replace(/[\\/]+$/, "").split(/[\\/]/).pop() ?? path;
  return {
    id: `local:${path}`,
    name: folder ? base : base.replace(/\.gguf$/, ""),
    source: "local",
    recommended: false,
    availability: "ready",
    sizeBytes: folder ? 0.72 * GiB : 0.46 * GiB,
    memoryEstimateBytes: null,
    fitsInMemory: null,
    contextLength: null,
    download: null,
  };
}

function modelOut(m: ModelInfo): ModelInfo {
  const d = downloads.get(m.id) ?? null;
  return { ...m, download: d && d.state !== "completed" && d.state !== "cancelled" ? structuredClone(d) : null };
}

// Server ---------------------------------------------------------------------------------

let hubToken: string | null = null;

let server: ServerStatus = { running: false, host: "127.0.0.1", port: 8080, url: null, authRequired: false, error: null };

// -------------------------------------------------------------------------------------------
// Control

const failures = new Map<string, Partial<CommandError>>();

const control: MockControl = {
  calls: [],
  emit: (event: string, payload: unknown) => emit(event, payload),
  replies: [],
  tokenDelayMs: 25,
  autoStats: true,
  pickResult: ["/home/me/Documents/quarterly-report.md"],
  modelPick: { file: "/home/user/models/Qwen2.5-0.5B-Instruct-Q4_K_M.gguf", folder: "/home/user/models/SmolLM2-360M-Instruct" },
  holdPrefill: false,
  prefillHoldAt: 0.46,
  failNext(cmd, error) {
    failures.set(cmd, error);
  },
  snapshot,
  settings: () => structuredClone(settings),
};

function fail(code: CommandError["code"], message: string, field: string | null = null): never {
  throw { code, message, field } satisfies CommandError;
}

function getChat(id: unknown): ChatRecord {
  const rec = typeof id === "string" ? chats.get(id) : undefined;
  if (!rec) fail("notFound", "This chat no longer exists. Pick another one from the list.");
  return rec;
}

// Jobs (generation and prefill) ------------------------------------------------------------

interface Job {
  id: string;
  chatId: string;
  cancelled: boolean;
  /** The answer was asked for as JSON. */
  asJson: boolean;
}
const jobs = new Map<string, Job>();

const sleep = (ms: number) => new Promise<void>((r) => setTimeout(r, ms));

function splitReply(text: string): string[] {
  return text.match(/\s*\S+|\s+/g) ?? [text];
}

/** Prefills `total` tokens for a job, emitting progress; returns false when cancelled. */
async function runPrefill(job: Job, total: number, documentIds: string[], rate = MOCK_READING_SPEED): Promise<boolean> {
  const rec = chats.get(job.chatId);
  if (!rec) return false;
  phase = "prefill";
  statsChatId = job.chatId;
  prefillRate = rate;
  const start = rec.cacheTokens;
  const step = Math.max(64, Math.round(total / 24));
  let done = 0;
  while (done < total) {
    if (job.cancelled) {
      await emit("prefill-progress", { chatId: job.chatId, jobId: job.id, documentIds, state: "cancelled", processedTokens: done, totalTokens: total, tokensPerSec: rate, etaSeconds: null, error: null });
      phase = "idle";
      return false;
    }
    const cap = control.holdPrefill ? Math.floor(total * control.prefillHoldAt) : total;
    if (done >= cap) {
      await sleep(50);
      continue;
    }
    done = Math.min(cap, done + step);
    rec.cacheTokens = start + done;
    await emit("prefill-progress", {
      chatId: job.chatId,
      jobId: job.id,
      documentIds,
      state: "running",
      processedTokens: done,
      totalTokens: total,
      tokensPerSec: rate,
      etaSeconds: (total - done) / rate,
      error: null,
    });
    await sleep(60);
  }
  await emit("prefill-progress", { chatId: job.chatId, jobId: job.id, documentIds, state: "done", processedTokens: total, totalTokens: total, tokensPerSec: rate, etaSeconds: 0, error: null });
  for (const d of rec.chat.documents) if (documentIds.includes(d.id)) d.prefilled = true;
  phase = "idle";
  return true;
}

function ensureCache(rec: ChatRecord): void {
  if (!rec.cacheConfig || !sameCache(rec.cacheConfig, settings.cache)) {
    rec.cacheConfig = { ...settings.cache };
    rec.cacheTokens = 0;
    rec.diskCache = null;
    for (const d of rec.chat.documents) d.prefilled = false;
  }
}

/** How often the back end saves a streaming answer's text (its SAVE_INTERVAL): until then
 * `list_chats` sees the text of the last save ("" before the first one). */
const SAVE_INTERVAL_MS = 1000;

/** Streaming answers' text so far, by message id: `get_chat` shows it, as the app's running
 * job does. */
const streamed = new Map<string, string>();

async function runGeneration(job: Job, answer: Message, prompt: number): Promise<void> {
  const rec = chats.get(job.chatId)!;
  await sleep(10);
  const pendingDocs = rec.chat.documents.filter((d) => !d.prefilled && d.fitsInContext);
  const toPrefill = Math.max(0, prompt - rec.cacheTokens);
  if (toPrefill > 0) {
    const ok = await runPrefill(job, toPrefill, pendingDocs.map((d) => d.id), 2210.5);
    if (!ok) return finish(job, answer, "stopped", 0, prompt);
  }
  const text = control.replies.shift() ?? (job.asJson ? JSON_REPLY : DEFAULT_REPLY);
  const parts = splitReply(text);
  phase = "decode";
  statsChatId = job.chatId;
  ttft = 380 + Math.round(Math.random() * 80);
  let n = 0;
  let content = answer.content;
  let lastSave = now();
  for (const p of parts) {
    if (job.cancelled) return finish(job, answer, "stopped", n, prompt, content);
    if (!chats.has(job.chatId)) return;
    const offset = content.length;
    content += p;
    streamed.set(answer.id, content);
    if (now() - lastSave >= SAVE_INTERVAL_MS) {
      lastSave = now();
      answer.content = content;
    }
    n++;
    rec.cacheTokens++;
    decodeRate = 21 + Math.sin(n / 7) * 3;
    await emit("chat-token", { chatId: job.chatId, generationId: job.id, messageId: answer.id, delta: p, offset });
    await sleep(control.tokenDelayMs);
  }
  return finish(job, answer, "complete", n, prompt, content);
}

async function finish(job: Job, answer: Message, status: Message["status"], generated: number, prompt: number, content = answer.content): Promise<void> {
  jobs.delete(job.id);
  streamed.delete(answer.id);
  phase = "idle";
  answer.content = content;
  answer.status = status;
  answer.stats = statsFor(generated, prompt, settings.cache);
  const rec = chats.get(job.chatId);
  if (rec) {
    rec.chat.updatedAt = now();
    // The chat goes idle: its cache is written to disk.
    rec.diskCache = savedToDisk(rec) ?? rec.diskCache;
  }
  await emit("chat-done", { chatId: job.chatId, generationId: job.id, message: structuredClone(answer) });
  void pushStats();
}

function busy(chatId: string): boolean {
  return [...jobs.values()].some((j) => j.chatId === chatId);
}

function promptTokens(rec: ChatRecord): number {
  const c = rec.chat;
  return (
    estimateTokens(c.systemPrompt) +
    withFit(c).filter((d) => d.fitsInContext).reduce((n, d) => n + d.tokenCount, 0) +
    c.messages.reduce((n, m) => n + estimateTokens(m.content) + 4, 0)
  );
}

function startGeneration(rec: ChatRecord, user: Message | null, asJson = false): GenerationStarted {
  if (modelStatus.state !== "ready") fail("modelNotLoaded", "No model is loaded yet. Wait for it to finish loading, or pick one in Models.");
  const docs = withFit(rec.chat);
  if (docs.some((d) => !d.fitsInContext)) {
    fail("contextOverflow", "The attached documents do not fit in the context. Raise the context length in Settings, or remove a document.");
  }
  ensureCache(rec);
  const answer = msg(rec.chat.id, "assistant", "", "streaming", now());
  rec.chat.messages.push(answer);
  rec.chat.updatedAt = now();
  const job: Job = { id: newId("gen"), chatId: rec.chat.id, cancelled: false, asJson };
  jobs.set(job.id, job);
  void runGeneration(job, answer, promptTokens(rec));
  return { generationId: job.id, userMessage: user ? structuredClone(user) : null, assistantMessage: structuredClone(answer) };
}

// Downloads -------------------------------------------------------------------------------

function runDownload(repoId: string): void {
  const tick = async () => {
    const d = downloads.get(repoId);
    if (!d || d.state !== "downloading") return;
    const speed = 18.5 * MiB;
    let budget = speed / 4;
    for (const f of d.files) {
      if (f.done || budget <= 0) continue;
      const total = f.totalBytes ?? 0;
      const take = Math.min(budget, total - f.downloadedBytes);
      f.downloadedBytes += take;
      budget -= take;
      if (f.downloadedBytes >= total) f.done = true;
    }
    d.downloadedBytes = d.files.reduce((n, f) => n + f.downloadedBytes, 0);
    d.bytesPerSec = speed;
    d.etaSeconds = d.totalBytes ? (d.totalBytes - d.downloadedBytes) / speed : null;
    if (d.files.every((f) => f.done)) {
      d.state = "completed";
      d.bytesPerSec = 0;
      d.etaSeconds = 0;
      const m = models.find((x) => x.id === repoId);
      if (m) m.availability = "ready";
    }
    await emit("download-progress", structuredClone(d));
    if (d.state === "downloading") setTimeout(() => void tick(), 250);
  };
  setTimeout(() => void tick(), 250);
}

function newDownload(m: ModelInfo): DownloadProgress {
  const size = m.sizeBytes ?? GiB;
  return {
    repoId: m.id,
    state: "downloading",
    files: [
      { name: "config.json", downloadedBytes: 0, totalBytes: 1_100, done: false },
      { name: "tokenizer.json", downloadedBytes: 0, totalBytes: 9_085_000, done: false },
      { name: "model.safetensors", downloadedBytes: 0, totalBytes: size - 9_086_100, done: false },
    ],
    downloadedBytes: 0,
    totalBytes: size,
    bytesPerSec: 0,
    etaSeconds: null,
    error: null,
  };
}

// Stats timer -----------------------------------------------------------------------------

async function pushStats(): Promise<void> {
  await emit("stats", snapshot());
}

function statsLoop(): void {
  let last = 0;
  const loop = () => {
    const t = now();
    const interval = phase === "idle" ? 1000 : 150;
    if (control.autoStats && t - last >= interval) {
      last = t;
      void pushStats();
    }
    setTimeout(loop, 50);
  };
  loop();
}

// -------------------------------------------------------------------------------------------
// Commands

const FILE_TOKENS: Record<string, number> = { "moby-dick.txt": 287_412, "sotu-2016.txt": 7412, "quarterly-report.md": 5_230, "paper.pdf": 11_870 };

async function handle(cmd: string, a: Record<string, unknown>): Promise<unknown> {
  switch (cmd) {
    // chats
    case "list_chats": {
      const q = typeof a.query === "string" ? a.query.toLowerCase() : "";
      return [...chats.values()]
        .map((r) => r.chat)
        .filter((c) => !q || c.title.toLowerCase().includes(q) || c.messages.some((m) => m.content.toLowerCase().includes(q)))
        .sort((x, y) => y.updatedAt - x.updatedAt)
        .map(summary);
    }
    case "create_chat": {
      const t = now();
      const chat: Chat = {
        id: newId("chat"),
        title: typeof a.title === "string" && a.title ? a.title : "New chat",
        createdAt: t,
        updatedAt: t,
        messageCount: 0,
        documentCount: 0,
        preview: "",
        systemPrompt: typeof a.systemPrompt === "string" ? a.systemPrompt : "",
        messages: [],
        documents: [],
        cache: { config: null, tokens: 0 },
      };
      const rec: ChatRecord = { chat, cacheTokens: 0, cacheConfig: null, diskCache: null };
      chats.set(chat.id, rec);
      return chatOut(rec);
    }
    case "get_chat":
      return chatOut(getChat(a.chatId));
    case "rename_chat": {
      const rec = getChat(a.chatId);
      const title = String(a.title ?? "").trim();
      if (!title) fail("invalidArgument", "A chat title cannot be empty.", "title");
      rec.chat.title = title.slice(0, 200);
      return summary(rec.chat);
    }
    case "delete_chat": {
      getChat(a.chatId);
      for (const j of jobs.values()) if (j.chatId === a.chatId) j.cancelled = true;
      chats.delete(a.chatId as string);
      if (statsChatId === a.chatId) statsChatId = null;
      return null;
    }
    case "set_system_prompt": {
      const rec = getChat(a.chatId);
      rec.chat.systemPrompt = String(a.systemPrompt ?? "");
      rec.cacheConfig = null;
      rec.cacheTokens = 0;
      rec.diskCache = null;
      for (const d of rec.chat.documents) d.prefilled = false;
      setTimeout(() => void pushStats(), 0);
      return chatOut(rec);
    }
    case "export_chat": {
      const rec = getChat(a.chatId);
      return `/home/me/Documents/${rec.chat.title.replace(/[^\w.-]+/g, "-")}.${a.format === "json" ? "json" : "md"}`;
    }

    // messages
    case "send_message": {
      const rec = getChat(a.chatId);
      if (busy(rec.chat.id)) fail("busy", "An answer is still being written. Stop it (Esc) or wait for it to finish.");
      const content = String(a.content ?? "").trim();
      if (!content) fail("invalidArgument", "The message is empty.", "content");
      if (modelStatus.state !== "ready") fail("modelNotLoaded", "No model is loaded yet. Wait for it to finish loading, or pick one in Models.");
      const user = msg(rec.chat.id, "user", content, "complete", now());
      rec.chat.messages.push(user);
      if (rec.chat.title === "New chat") rec.chat.title = content.length > 48 ? `${content.slice(0, 47)}…` : content;
      return startGeneration(rec, user, a.asJson === true);
    }
    case "regenerate": {
      const rec = getChat(a.chatId);
      if (busy(rec.chat.id)) fail("busy", "An answer is still being written.");
      const msgs = rec.chat.messages;
      let lastUser = -1;
      msgs.forEach((m, i) => {
        if (m.role === "user") lastUser = i;
      });
      if (lastUser < 0) fail("invalidArgument", "There is no question to answer again.");
      // A JSON answer is asked again as JSON, as the back end does.
      const old = msgs.slice(lastUser + 1).find((m) => m.role === "assistant");
      const value = old ? parseJsonAnswer(old.content) : null;
      const asJson = value !== null && !Array.isArray(value);
      rec.chat.messages = msgs.slice(0, lastUser + 1);
      rec.cacheTokens = Math.min(rec.cacheTokens, promptTokens(rec));
      return startGeneration(rec, null, asJson);
    }
    case "edit_message": {
      const rec = getChat(a.chatId);
      if (busy(rec.chat.id)) fail("busy", "An answer is still being written.");
      const i = rec.chat.messages.findIndex((m) => m.id === a.messageId && m.role === "user");
      if (i < 0) fail("notFound", "That message no longer exists.");
      const user = { ...rec.chat.messages[i]!, content: String(a.content ?? "").trim() };
      rec.chat.messages = [...rec.chat.messages.slice(0, i), user];
      rec.cacheTokens = Math.min(rec.cacheTokens, promptTokens(rec));
      return startGeneration(rec, user);
    }
    case "stop_generation": {
      for (const j of jobs.values()) if (j.chatId === a.chatId) j.cancelled = true;
      return null;
    }

    // documents
    case "pick_documents":
      return [...control.pickResult];
    case "attach_document": {
      const rec = getChat(a.chatId);
      const path = String(a.path ?? "");
      const name = path.split(/[\\/]/).pop() ?? path;
      const ext = name.split(".").pop()?.toLowerCase() ?? "";
      if (!["txt", "md", "markdown", "pdf"].includes(ext)) fail("unsupportedFile", `${name} is not a .txt, .md or .pdf file.`);
      if (name.startsWith("missing")) fail("io", `${name} could not be read: the file does not exist. Check that it was not moved.`);
      const doc: DocumentInfo = {
        id: newId("doc"),
        chatId: rec.chat.id,
        name,
        path,
        kind: ext === "pdf" ? "pdf" : ext === "txt" ? "txt" : "md",
        sizeBytes: (FILE_TOKENS[name] ?? 4000) * 4,
        tokenCount: FILE_TOKENS[name] ?? 3000 + (name.length * 977) % 9000,
        fitsInContext: true,
        contextLength: settings.contextLength,
        contextNeeded: 0,
        kvBytes: null,
        kvFp16Bytes: null,
        readSeconds: null,
        prefilled: false,
        addedAt: now(),
      };
      rec.chat.documents.push(doc);
      return withFit(rec.chat).find((d) => d.id === doc.id);
    }
    case "remove_document": {
      const rec = getChat(a.chatId);
      rec.chat.documents = rec.chat.documents.filter((d) => d.id !== a.documentId);
      rec.cacheConfig = null;
      rec.cacheTokens = 0;
      rec.diskCache = null;
      setTimeout(() => void pushStats(), 0);
      return null;
    }
    case "read_part_of_document": {
      const rec = getChat(a.chatId);
      if (busy(rec.chat.id)) fail("busy", "The chat is busy.");
      const docs = withFit(rec.chat);
      const doc = docs.find((d) => d.id === a.documentId) ?? fail("notFound", "That document is not in this chat.");
      if (doc.fitsInContext) fail("invalidArgument", `${doc.name} fits in the context: it is read whole.`);
      const fixed = estimateTokens(rec.chat.systemPrompt) + settings.sampling.maxTokens;
      const others = docs.filter((d) => d.id !== doc.id).reduce((n, d) => n + d.tokenCount, 0);
      const head = settings.contextLength - fixed - others - 40;
      if (head <= 0) fail("contextOverflow", `No part of ${doc.name} fits.`);
      const part: DocumentInfo = {
        ...rec.chat.documents.find((d) => d.id === doc.id)!,
        id: newId("doc"),
        name: `${doc.name} (first ${head.toLocaleString("en-US")} of ${doc.tokenCount.toLocaleString("en-US")} tokens)`,
        tokenCount: head + 40,
        prefilled: false,
        addedAt: now(),
      };
      rec.chat.documents = [...rec.chat.documents.filter((d) => d.id !== doc.id), part];
      rec.cacheConfig = null;
      rec.cacheTokens = 0;
      rec.diskCache = null;
      return withFit(rec.chat).find((d) => d.id === part.id);
    }
    case "prefill_chat": {
      const rec = getChat(a.chatId);
      if (busy(rec.chat.id)) fail("busy", "The chat is busy.");
      if (modelStatus.state !== "ready") fail("modelNotLoaded", "No model is loaded yet; the document will be read with your first question.");
      ensureCache(rec);
      const pending = withFit(rec.chat).filter((d) => d.fitsInContext && !rec.chat.documents.find((x) => x.id === d.id)!.prefilled);
      const total = Math.max(0, promptTokens(rec) - rec.cacheTokens);
      if (!pending.length || total === 0) return null;
      const job: Job = { id: newId("prefill"), chatId: rec.chat.id, cancelled: false, asJson: false };
      jobs.set(job.id, job);
      void runPrefill(job, total, pending.map((d) => d.id)).finally(() => jobs.delete(job.id));
      return job.id;
    }

    // settings
    case "get_settings":
      return structuredClone(settings);
    case "get_default_settings":
      return structuredClone(DEFAULT_SETTINGS);
    case "fit_context_length": {
      const cache = a.cache as CacheConfig;
      const errors = Object.entries(validateSettings({ ...settings, cache })).filter(([field]) => field.startsWith("cache."));
      if (errors.length) fail("invalidArgument", errors[0]![1], errors[0]![0]);
      // The mock machine has 6.1 GiB available beside the model's weights: the context
      // stops where the KV cache would take it all, in steps of 256, at most the model's own.
      const available = 6.1 * GiB + 100 * MiB;
      const modelContext = models.find((m) => m.id === activeModelId)?.contextLength ?? 8192;
      let contextLength = Math.min(modelContext, 131072);
      while (contextLength > 512 && kvBytes(contextLength, cache).held > available) contextLength -= 256;
      return { contextLength, modelContext, kvBytes: kvBytes(contextLength, cache).held, availableBytes: available };
    }
    case "update_settings": {
      const next = a.settings as Settings;
      const errors = Object.entries(validateSettings(next));
      if (errors.length) fail("invalidArgument", errors[0]![1], errors[0]![0]);
      const reload = next.backend !== settings.backend;
      if (reload && backendOf(next.backend).startsWith("mlx-gpu")) {
        fail("invalidArgument", `This computer cannot run that backend: the backend ${next.backend} needs a GPU, but this build of MLX has none.`, "backend");
      }
      const reset = !sameCache(next.cache, settings.cache) || next.contextLength !== settings.contextLength || reload;
      settings = structuredClone(next);
      if (reset) {
        for (const rec of chats.values()) {
          rec.cacheConfig = null;
          rec.cacheTokens = 0;
          for (const d of rec.chat.documents) d.prefilled = false;
        }
      }
      if (reset) setTimeout(() => void pushStats(), 0);
      return { settings: structuredClone(settings), cacheReset: reset, modelReload: reload };
    }

    // models
    case "list_models":
      return { models: models.map(modelOut), activeModelId, availableMemoryBytes: 6.1 * GiB, totalMemoryBytes: 16 * GiB };
    case "inspect_model": {
      const repoId = String(a.repoId ?? "");
      const known = models.find((m) => m.id === repoId);
      if (known) return modelOut(known);
      if (/nonexistent|missing/i.test(repoId)) fail("notFound", `${repoId} was not found on the Hugging Face hub. Check the spelling (owner/name).`);
      const m: ModelInfo = {
        id: repoId,
        name: repoId.split("/")[1]!,
        source: "hub",
        recommended: false,
        availability: "notDownloaded",
        sizeBytes: 0.86 * GiB,
        memoryEstimateBytes: 1.4 * GiB,
        fitsInMemory: true,
        contextLength: 131072,
        download: null,
      };
      models.push(m);
      return modelOut(m);
    }
    case "download_model": {
      const m = models.find((x) => x.id === a.repoId);
      if (!m) fail("notFound", "Unknown model. Check it first.");
      const d = newDownload(m);
      downloads.set(m.id, d);
      m.availability = "downloading";
      runDownload(m.id);
      return structuredClone(d);
    }
    case "pause_download": {
      const d = downloads.get(a.repoId as string);
      if (!d) fail("notFound", "No such download.");
      d.state = "paused";
      d.bytesPerSec = 0;
      d.etaSeconds = null;
      await emit("download-progress", structuredClone(d));
      return structuredClone(d);
    }
    case "resume_download": {
      const d = downloads.get(a.repoId as string);
      if (!d) fail("notFound", "No such download.");
      d.state = "downloading";
      runDownload(d.repoId);
      return structuredClone(d);
    }
    case "cancel_download": {
      const d = downloads.get(a.repoId as string);
      if (d) d.state = "cancelled";
      downloads.delete(a.repoId as string);
      const m = models.find((x) => x.id === a.repoId);
      if (m) m.availability = "notDownloaded";
      return null;
    }
    case "add_local_model": {
      const folder = a.folder === true;
      const path = folder ? control.modelPick.folder : control.modelPick.file;
      if (path == null) return null;
      const why = folder ? (/empty/i.test(path) ? "holds no model the app can load" : null) : /\.gguf$/i.test(path) ? null : "is not a GGUF file";
      if (why) fail("invalidArgument", `${path} ${why}. Pick a .gguf file, or a folder with config.json and .safetensors weights.`, "path");
      const known = models.find((x) => x.id === `local:${path}`);
      if (known) return modelOut(known);
      // Listed after the built-in and the other local models (not activated).
      const m = localModel(path, folder);
      let at = 0;
      models.forEach((x, i) => {
        if (x.source !== "hub") at = i + 1;
      });
      models.splice(at, 0, m);
      return modelOut(m);
    }
    case "delete_model": {
      const m = models.find((x) => x.id === a.modelId);
      if (m?.source === "local") {
        // Leaves the list only; the file stays.
        if (m.id === activeModelId) fail("busy", "This model is in use. Switch to another model first, then remove it.");
        models.splice(models.indexOf(m), 1);
        return null;
      }
      if (typeof a.modelId === "string" && a.modelId.startsWith("local:")) fail("notFound", `${a.modelId.slice(6)} is not in the list of models.`);
      if (!m || m.source === "builtin") fail("invalidArgument", "The built-in model ships with KIVI Chat and cannot be deleted.");
      if (m.id === activeModelId) fail("busy", "This model is in use. Switch to another model first, then delete it.");
      m.availability = "notDownloaded";
      return null;
    }
    case "set_active_model": {
      const m = models.find((x) => x.id === a.modelId && x.availability === "ready");
      if (!m && typeof a.modelId === "string" && a.modelId.startsWith("local:")) fail("notFound", `${a.modelId.slice(6)} is no longer there. Add the model again from its new place.`);
      if (!m) fail("notFound", "That model is not downloaded yet.");
      activeModelId = m.id;
      for (const rec of chats.values()) {
        rec.cacheConfig = null;
        rec.cacheTokens = 0;
      }
      modelStatus = { modelId: m.id, name: m.name, state: "loading", progress: 0, error: null };
      void (async () => {
        for (let p = 0.25; p <= 1; p += 0.25) {
          await sleep(150);
          modelStatus = { ...modelStatus, progress: p };
          await emit("model-status", modelStatus);
        }
        modelStatus = { ...modelStatus, state: "ready", progress: null };
        await emit("model-status", modelStatus);
      })();
      return modelStatus;
    }
    case "get_model_status":
      return modelStatus;
    case "get_hub_token_status":
      return { stored: hubToken !== null, keychainAvailable: true, error: null };
    case "set_hub_token": {
      const token = typeof a.token === "string" ? a.token.trim() : null;
      if (token !== null && (!token || /\s/.test(token))) fail("invalidArgument", "That does not look like a hub token.", "token");
      hubToken = token;
      return { stored: hubToken !== null, keychainAvailable: true, error: null };
    }

    // stats, server, system
    case "get_stats":
      return snapshot();
    case "get_server_status":
      return server;
    case "start_server": {
      const port = Number(a.port);
      if (!Number.isInteger(port) || port < 1024 || port > 65535) fail("invalidArgument", "Port must be from 1024 to 65535.", "port");
      if (port === 8081) fail("portInUse", "Port 8081 is already in use by another program. Choose another port.", "port");
      server = { running: true, host: "127.0.0.1", port, url: `http://127.0.0.1:${port}/v1`, authRequired: typeof a.token === "string" && a.token !== "", error: null };
      void emit("server-status", server);
      return server;
    }
    case "stop_server":
      server = { ...server, running: false, url: null, authRequired: false };
      void emit("server-status", server);
      return server;
    case "open_external":
      return null;
    default:
      fail("internal", `The mock back end does not know "${cmd}".`);
  }
}

/** Installs the mock IPC (with event mocking) and a main window, then seeds data. */
export function installMockBackend(options: { scenario?: string } = {}): MockControl {
  mockWindows("main");
  mockIPC(
    async (cmd, payload) => {
      const args = (payload ?? {}) as Record<string, unknown>;
      control.calls.push({ cmd, args: structuredClone(args) });
      const failure = failures.get(cmd);
      if (failure) {
        failures.delete(cmd);
        throw { code: failure.code ?? "internal", message: failure.message ?? "Mock failure.", field: failure.field ?? null };
      }
      return handle(cmd, args);
    },
    { shouldMockEvents: true },
  );
  if (options.scenario !== "empty") seed();
  if (options.scenario === "no-builtin") {
    // An installed app without the bundled model file: the built-in model is "not installed".
    const b = models[0]!;
    Object.assign(b, { availability: "notDownloaded", sizeBytes: null, memoryEstimateBytes: null, fitsInMemory: null });
    modelStatus = {
      modelId: activeModelId,
      name: b.name,
      state: "failed",
      progress: null,
      error: "The model file is missing: /opt/kivi-chat/models/SmolLM2-135M-Instruct-Q4_1.gguf does not exist. Reinstall KIVI Chat (or set KIVI_MODEL to a .gguf file), or download another model in Models.",
    };
  }
  if (options.scenario === "no-model") modelStatus = { modelId: activeModelId, name: models[0]!.name, state: "failed", progress: null, error: "The weights file is damaged (checksum mismatch). Delete the model and download it again." };
  window.__kiviMock = control;
  statsLoop();
  return control;
}
