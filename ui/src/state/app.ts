/** The app's state and every action the components call. Components never call the API directly. */
import { ApiError, chats, documents, messages, models, on, server, settings as settingsApi, stats, system } from "../api";
import type {
  CacheConfig,
  ChatSummary,
  ContextFit,
  DownloadProgress,
  ExportFormat,
  Id,
  ModelInfo,
  ModelsOverview,
  ModelStatus,
  ServerStatus,
  Settings,
  StatsSnapshot,
} from "../api/types";
import { baseName, isSupportedDocument } from "../api/documents";
import * as logic from "../lib/chatLogic";
import { sameCache } from "../lib/kivi";
import { isLocalModelId, withModel } from "../lib/models";
import type { ChatView } from "../lib/chatLogic";
import { Store, useSelector } from "./store";
import { statsHistory } from "./statsHistory";

export type View = "chat" | "settings" | "models";
export type Theme = "system" | "light" | "dark";

export interface Toast {
  id: number;
  kind: "error" | "info" | "success";
  title: string;
  message?: string;
}

export interface AppState {
  booted: boolean;
  bootError: string | null;
  view: View;
  panelOpen: boolean;
  chats: ChatSummary[];
  chatQuery: string;
  activeChatId: Id | null;
  chatView: ChatView | null;
  chatLoading: boolean;
  /** Text to put back into the composer (a failed send). */
  composerRestore: { text: string; n: number } | null;
  settings: Settings | null;
  modelStatus: ModelStatus | null;
  models: ModelsOverview | null;
  downloads: Record<string, DownloadProgress>;
  server: ServerStatus | null;
  stats: StatsSnapshot | null;
  toasts: Toast[];
  dragging: boolean;
  theme: Theme;
}

const THEME_KEY = "kivi.theme";
const PANEL_KEY = "kivi.panelOpen";

function storedTheme(): Theme {
  try {
    const t = localStorage.getItem(THEME_KEY);
    return t === "light" || t === "dark" ? t : "system";
  } catch {
    return "system";
  }
}

function storedPanelOpen(): boolean {
  try {
    const v = localStorage.getItem(PANEL_KEY);
    if (v === "0") return false;
    if (v === "1") return true;
  } catch {
    /* storage unavailable */
  }
  return typeof window === "undefined" || window.innerWidth >= 1200;
}

export const store = new Store<AppState>({
  booted: false,
  bootError: null,
  view: "chat",
  panelOpen: storedPanelOpen(),
  chats: [],
  chatQuery: "",
  activeChatId: null,
  chatView: null,
  chatLoading: false,
  composerRestore: null,
  settings: null,
  modelStatus: null,
  models: null,
  downloads: {},
  server: null,
  stats: null,
  toasts: [],
  dragging: false,
  theme: storedTheme(),
});

export const useApp = <T>(selector: (s: AppState) => T): T => useSelector(store, selector);

// ---------------------------------------------------------------------------------------------
// Toasts and errors

let toastSeq = 0;

export function toast(kind: Toast["kind"], title: string, message?: string, timeoutMs?: number): number {
  const id = ++toastSeq;
  store.set((s) => ({ toasts: [...s.toasts.slice(-4), { id, kind, title, message }] }));
  const ms = timeoutMs ?? (kind === "error" ? 12_000 : 4_000);
  if (ms > 0) setTimeout(() => dismissToast(id), ms);
  return id;
}

export function dismissToast(id: number): void {
  store.set((s) => ({ toasts: s.toasts.filter((t) => t.id !== id) }));
}

/** Shows a failed action; the back end's message already says what to do. */
export function reportError(title: string, e: unknown): void {
  const message = e instanceof ApiError || e instanceof Error ? e.message : String(e);
  toast("error", title, message);
}

// ---------------------------------------------------------------------------------------------
// Chat view helpers

/**
 * Updates the open chat's view, and its entry in the chat list with it (preview, counts):
 * the list is only re-read on some events, and the back end's copy of a streaming answer lags.
 */
function updateView(chatId: Id, fn: (v: ChatView) => ChatView): void {
  store.set((s) => {
    if (!s.chatView || s.chatView.chat.id !== chatId) return {};
    const chatView = fn(s.chatView);
    return { chatView, chats: logic.syncChatList(s.chats, chatView) };
  });
}

/**
 * The chat being opened and its events since `get_chat` was called: they may be newer than
 * the copy it returns, so they are applied to that copy (tokens carry their offset, so text
 * the copy already has is skipped).
 */
let opening: { chatId: Id; seq: number; updates: Array<(v: ChatView) => ChatView> } | null = null;

/** Applies a back-end event to the open chat, and keeps it for the chat being opened. */
function applyEvent(chatId: Id, fn: (v: ChatView) => ChatView): void {
  if (opening?.chatId === chatId) opening.updates.push(fn);
  updateView(chatId, fn);
}

function activeView(): ChatView | null {
  return store.get().chatView;
}

// ---------------------------------------------------------------------------------------------
// Boot

let booting: Promise<void> | null = null;

/** Subscribes to events, then loads everything the first screen needs. */
export function boot(): Promise<void> {
  booting ??= (async () => {
    if (typeof window !== "undefined" && !("__TAURI_INTERNALS__" in window)) {
      booting = null;
      store.set({
        bootError:
          "This is the KIVI Chat interface without its back end. Start the app with `cargo tauri dev` (or the built app), or run `npm run dev:mock` and open /e2e.html to try the UI with a mock back end.",
      });
      return;
    }
    try {
      await subscribeEvents();
      const [chatList, cfg, status, overview, srv, snapshot] = await Promise.all([
        chats.listChats(null),
        settingsApi.getSettings(),
        models.getModelStatus(),
        models.listModels(),
        server.getServerStatus(),
        stats.getStats(),
      ]);
      const downloads: Record<string, DownloadProgress> = {};
      for (const m of overview.models) if (m.download) downloads[m.id] = m.download;
      statsHistory.push(snapshot);
      store.set({ chats: chatList, settings: cfg, modelStatus: status, models: overview, downloads, server: srv, stats: snapshot, booted: true, bootError: null });
      if (chatList[0]) await selectChat(chatList[0].id);
    } catch (e) {
      booting = null;
      store.set({ bootError: e instanceof Error ? e.message : String(e) });
    }
  })();
  return booting;
}

let subscribed = false;

async function subscribeEvents(): Promise<void> {
  if (subscribed) return;
  subscribed = true;
  await Promise.all([
    on("chat-token", (ev) => applyEvent(ev.chatId, (v) => logic.applyToken(v, ev))),
    on("chat-done", (ev) => {
      applyEvent(ev.chatId, (v) => logic.applyDone(v, ev));
      if (ev.message.status === "error" && ev.chatId === store.get().activeChatId) {
        toast("error", "The answer failed", ev.message.error ?? undefined);
      }
      void refreshChats();
    }),
    on("prefill-progress", (ev) => {
      applyEvent(ev.chatId, (v) => logic.applyPrefill(v, ev));
      if (ev.state === "error" && ev.chatId === store.get().activeChatId) toast("error", "Reading the document failed", ev.error ?? undefined);
    }),
    on("stats", (snap) => {
      // A different cache (another chat, new settings) starts a new series on the chart.
      const prev = store.get().stats;
      if (prev && (prev.chatId !== snap.chatId || !sameCache(prev.cache, snap.cache))) statsHistory.clear();
      statsHistory.push(snap);
      store.set({ stats: snap });
    }),
    on("download-progress", (d) => {
      store.set((s) => ({ downloads: { ...s.downloads, [d.repoId]: d } }));
      if (d.state === "completed" || d.state === "cancelled") {
        if (d.state === "completed") toast("success", "Download complete", `${d.repoId} is ready to use.`);
        void refreshModels();
      }
      if (d.state === "failed") toast("error", `Download of ${d.repoId} failed`, d.error ?? "Check your connection, then resume it.");
    }),
    on("model-status", (m) => {
      const prev = store.get().modelStatus;
      store.set({ modelStatus: m });
      if (m.state === "failed" && prev?.state !== "failed") toast("error", "The model failed to load", m.error ?? undefined);
      if (m.modelId !== prev?.modelId) void refreshModels();
    }),
    on("server-status", (srv) => store.set({ server: srv })),
  ]);
}

// ---------------------------------------------------------------------------------------------
// Navigation and layout

export function setView(view: View): void {
  store.set({ view });
}

export function togglePanel(open?: boolean): void {
  const next = open ?? !store.get().panelOpen;
  store.set({ panelOpen: next });
  try {
    localStorage.setItem(PANEL_KEY, next ? "1" : "0");
  } catch {
    /* ignore */
  }
}

export function setTheme(theme: Theme): void {
  store.set({ theme });
  try {
    localStorage.setItem(THEME_KEY, theme);
  } catch {
    /* ignore */
  }
}

// ---------------------------------------------------------------------------------------------
// Chats

let searchTimer: ReturnType<typeof setTimeout> | null = null;
let searchSeq = 0;

export async function refreshChats(): Promise<void> {
  const seq = ++searchSeq;
  const q = store.get().chatQuery.trim();
  try {
    const list = await chats.listChats(q ? q : null);
    if (seq !== searchSeq) return;
    store.set((s) => {
      // The back end may retitle a chat (from its first message): keep the open one in step.
      const open = s.chatView && list.find((c) => c.id === s.chatView!.chat.id);
      const chatView = open && open.title !== s.chatView!.chat.title ? { ...s.chatView!, chat: { ...s.chatView!.chat, title: open.title } } : s.chatView;
      return { chats: logic.syncChatList(list, chatView), chatView };
    });
  } catch (e) {
    reportError("Could not load your chats", e);
  }
}

/** Filters the list by title and message text (debounced). */
export function searchChats(query: string): void {
  store.set({ chatQuery: query });
  if (searchTimer) clearTimeout(searchTimer);
  searchTimer = setTimeout(() => void refreshChats(), 180);
}

let selectSeq = 0;

export async function selectChat(chatId: Id): Promise<void> {
  const seq = ++selectSeq;
  opening = { chatId, seq, updates: [] };
  store.set({ activeChatId: chatId, chatLoading: true, view: "chat" });
  try {
    const chat = await chats.getChat(chatId);
    if (seq !== selectSeq) return;
    const updates = opening?.seq === seq ? opening.updates : [];
    const chatView = updates.reduce((v, fn) => fn(v), logic.openChat(chat));
    store.set((s) => ({ chatView, chats: logic.syncChatList(s.chats, chatView), chatLoading: false }));
  } catch (e) {
    if (seq !== selectSeq) return;
    store.set({ chatLoading: false });
    reportError("Could not open the chat", e);
  } finally {
    if (opening?.seq === seq) opening = null;
  }
}

export async function newChat(): Promise<Id | null> {
  try {
    const chat = await chats.createChat(null, null);
    ++selectSeq;
    store.set((s) => ({
      chats: [chat, ...s.chats.filter((c) => c.id !== chat.id)],
      activeChatId: chat.id,
      chatView: logic.openChat(chat),
      chatLoading: false,
      view: "chat",
    }));
    return chat.id;
  } catch (e) {
    reportError("Could not create a chat", e);
    return null;
  }
}

export async function renameChat(chatId: Id, title: string): Promise<void> {
  const t = title.trim();
  if (!t) return;
  try {
    const summary = await chats.renameChat(chatId, t);
    store.set((s) => {
      const chatView = s.chatView && s.chatView.chat.id === chatId ? { ...s.chatView, chat: { ...s.chatView.chat, title: summary.title } } : s.chatView;
      return { chats: logic.syncChatList(s.chats.map((c) => (c.id === chatId ? summary : c)), chatView), chatView };
    });
  } catch (e) {
    reportError("Could not rename the chat", e);
  }
}

export async function deleteChat(chatId: Id): Promise<void> {
  try {
    await chats.deleteChat(chatId);
    const wasActive = store.get().activeChatId === chatId;
    store.set((s) => ({ chats: s.chats.filter((c) => c.id !== chatId) }));
    if (wasActive) {
      const next = store.get().chats[0];
      if (next) await selectChat(next.id);
      else store.set({ activeChatId: null, chatView: null });
    }
  } catch (e) {
    reportError("Could not delete the chat", e);
  }
}

export async function saveSystemPrompt(chatId: Id, prompt: string): Promise<boolean> {
  try {
    const chat = await chats.setSystemPrompt(chatId, prompt);
    updateView(chatId, (v) => ({ ...v, chat: { ...chat, messages: v.chat.messages } }));
    toast("info", "System prompt saved", "The chat's cache was reset; the next message re-reads the conversation with the new prompt.");
    return true;
  } catch (e) {
    reportError("Could not save the system prompt", e);
    return false;
  }
}

export async function exportChat(chatId: Id, format: ExportFormat): Promise<void> {
  try {
    const path = await chats.exportChat(chatId, format);
    if (path) toast("success", "Chat exported", path);
  } catch (e) {
    reportError("Could not export the chat", e);
  }
}

// ---------------------------------------------------------------------------------------------
// Messages

let tempSeq = 0;

/** Sends a message in the open chat (creating a chat first when none is open); with
 * `asJson` the answer is a JSON object. */
export async function send(text: string, asJson = false): Promise<boolean> {
  const content = text.trim();
  if (!content) return false;
  let view = activeView();
  if (!view) {
    const id = await newChat();
    if (!id) return false;
    view = activeView();
    if (!view) return false;
  }
  if (logic.isBusy(view)) return false;
  const chatId = view.chat.id;
  const tempId = String(++tempSeq);
  updateView(chatId, (v) => logic.applyOptimisticSend(v, content, tempId));
  try {
    const started = await messages.sendMessage(chatId, content, asJson);
    updateView(chatId, (v) => logic.applyGenerationStarted(v, started, tempId));
    void refreshChats();
    return true;
  } catch (e) {
    updateView(chatId, (v) => logic.applySendFailed(v, tempId));
    store.set((s) => ({ composerRestore: { text: content, n: (s.composerRestore?.n ?? 0) + 1 } }));
    reportError("Your message was not sent", e);
    return false;
  }
}

/** Stops the running answer or prefill of the open chat. */
export async function stop(): Promise<void> {
  const view = activeView();
  if (!view || (!view.generation && !view.prefill)) return;
  const chatId = view.chat.id;
  updateView(chatId, logic.applyStopRequested);
  try {
    await messages.stopGeneration(chatId);
  } catch (e) {
    reportError("Could not stop", e);
  }
}

export async function regenerate(): Promise<void> {
  const view = activeView();
  if (!view || !logic.regenerableMessage(view)) return;
  const chatId = view.chat.id;
  updateView(chatId, (v) => logic.applyPending(v, true));
  try {
    const started = await messages.regenerate(chatId);
    updateView(chatId, (v) => logic.applyGenerationStarted(v, started));
  } catch (e) {
    updateView(chatId, (v) => logic.applyPending(v, false));
    reportError("Could not regenerate the answer", e);
  }
}

export async function editAndResend(messageId: Id, content: string): Promise<boolean> {
  const view = activeView();
  const text = content.trim();
  if (!view || !text) return false;
  const msg = view.chat.messages.find((m) => m.id === messageId);
  if (!msg || !logic.canEdit(view, msg)) return false;
  const chatId = view.chat.id;
  updateView(chatId, (v) => logic.applyPending(v, true));
  try {
    const started = await messages.editMessage(chatId, messageId, text);
    updateView(chatId, (v) => logic.applyGenerationStarted(v, started));
    return true;
  } catch (e) {
    updateView(chatId, (v) => logic.applyPending(v, false));
    reportError("Could not resend the message", e);
    return false;
  }
}

// ---------------------------------------------------------------------------------------------
// Documents

export function setDragging(dragging: boolean): void {
  if (store.get().dragging !== dragging) store.set({ dragging });
}

/** Attaches files to the open chat (creating one if needed), then prefills what fits. */
export async function attachPaths(paths: string[]): Promise<void> {
  const supported = paths.filter(isSupportedDocument);
  const rejected = paths.filter((p) => !isSupportedDocument(p));
  if (rejected.length) {
    toast("error", "Unsupported file type", `${rejected.map(baseName).join(", ")}: attach .txt, .md or .pdf files.`);
  }
  if (!supported.length) return;
  let view = activeView();
  if (!view) {
    if (!(await newChat())) return;
    view = activeView();
    if (!view) return;
  }
  const chatId = view.chat.id;
  let anyFits = false;
  for (const path of supported) {
    try {
      const doc = await documents.attachDocument(chatId, path);
      updateView(chatId, (v) => logic.applyDocumentAdded(v, doc));
      if (doc.fitsInContext) anyFits = true;
      else {
        toast(
          "error",
          `${doc.name} is too long for the context`,
          `It has ${doc.tokenCount.toLocaleString("en-US")} tokens; the context holds ${doc.contextLength.toLocaleString("en-US")}. Raise the context length in Settings, or remove the document.`,
        );
      }
    } catch (e) {
      reportError(`Could not attach ${baseName(path)}`, e);
    }
  }
  void refreshChats();
  if (anyFits) await prefill(chatId);
}

export async function pickAndAttach(): Promise<void> {
  try {
    const paths = await documents.pickDocuments();
    if (paths.length) await attachPaths(paths);
  } catch (e) {
    reportError("Could not open the file picker", e);
  }
}

/** Reads the chat's documents into its cache now, so the first question is quick. */
export async function prefill(chatId: Id): Promise<void> {
  const view = activeView();
  if (view && view.chat.id === chatId && (view.generation || view.pending)) return;
  try {
    await documents.prefillChat(chatId);
  } catch (e) {
    // Not fatal: the next message prefills. Say why when it helps (no model, busy).
    if (e instanceof ApiError && e.code === "busy") return;
    reportError("The document will be read with your first question", e);
  }
}

export async function removeDocument(documentId: Id): Promise<void> {
  const view = activeView();
  if (!view) return;
  const chatId = view.chat.id;
  try {
    await documents.removeDocument(chatId, documentId);
    updateView(chatId, (v) => logic.applyDocumentRemoved(v, documentId));
    void refreshChats();
  } catch (e) {
    reportError("Could not remove the document", e);
  }
}

/** Reads only the part of a too-long document that fits (the back end cuts it and says so
 * to the model), then reads it into the cache. */
export async function readPartOfDocument(documentId: Id): Promise<void> {
  const view = activeView();
  if (!view) return;
  const chatId = view.chat.id;
  try {
    const part = await documents.readPartOfDocument(chatId, documentId);
    updateView(chatId, (v) => logic.applyDocumentAdded(logic.applyDocumentRemoved(v, documentId), part));
    void refreshChats();
    await prefill(chatId);
  } catch (e) {
    reportError("Could not keep the part that fits", e);
  }
}

// ---------------------------------------------------------------------------------------------
// Settings

/** Saves settings; says what happened to the conversations' caches. */
export async function saveSettings(next: Settings): Promise<Settings | null> {
  try {
    const res = await settingsApi.updateSettings(next);
    store.set({ settings: res.settings });
    if (res.modelReload) {
      toast("info", "Settings saved · loading the model again", "The model loads on the new backend; each conversation's next message re-reads its history and documents.");
    }
    if (res.cacheReset) {
      if (!res.modelReload) toast("info", "Settings saved · caches reset", "Each conversation gets a new KV cache with these settings; the next message re-reads its history and documents.");
      const view = activeView();
      if (view) updateView(view.chat.id, (v) => ({ ...v, chat: { ...v.chat, cache: { config: null, tokens: 0 }, documents: v.chat.documents.map((d) => ({ ...d, prefilled: false })) } }));
      statsHistory.clear();
    } else toast("success", "Settings saved");
    return res.settings;
  } catch (e) {
    reportError("Settings were not saved", e);
    return null;
  }
}

/** "Fit this machine" for the cache settings `cache`; null (with a toast) when it cannot be told. */
export async function fitContext(cache: CacheConfig): Promise<ContextFit | null> {
  try {
    return await settingsApi.fitContextLength(cache);
  } catch (e) {
    reportError("Could not fit the context to this machine", e);
    return null;
  }
}

export async function loadDefaultSettings(): Promise<Settings | null> {
  try {
    return await settingsApi.getDefaultSettings();
  } catch (e) {
    reportError("Could not load the default settings", e);
    return null;
  }
}

// ---------------------------------------------------------------------------------------------
// Models

export async function refreshModels(): Promise<void> {
  try {
    const overview = await models.listModels();
    const downloads = { ...store.get().downloads };
    for (const m of overview.models) if (m.download) downloads[m.id] = m.download;
    store.set({ models: overview, downloads });
  } catch (e) {
    reportError("Could not list the models", e);
  }
}

/** Switches to a ready model (it loads in the background); false when that failed. */
export async function activateModel(modelId: string): Promise<boolean> {
  try {
    const status = await models.setActiveModel(modelId);
    store.set((s) => ({ modelStatus: status, models: s.models ? { ...s.models, activeModelId: modelId } : s.models }));
    return true;
  } catch (e) {
    reportError("Could not switch the model", e);
    return false;
  }
}

/**
 * "Add a model": a native dialog picks a `.gguf` file or (`folder`) a model folder; the model
 * joins the list (the file stays where it is) and becomes the active one. Resolves to the
 * added model, or null when the dialog was cancelled or adding failed (the error is shown).
 */
export async function addLocalModel(folder: boolean): Promise<ModelInfo | null> {
  let added: ModelInfo | null;
  try {
    added = await models.addLocalModel(folder);
  } catch (e) {
    reportError(folder ? "Could not add the model folder" : "Could not add the model file", e);
    return null;
  }
  if (!added) return null;
  const model = added;
  // Listed at once, even if the refresh below fails.
  store.set((s) => (s.models ? { models: withModel(s.models, model) } : {}));
  await refreshModels();
  if (await activateModel(model.id)) toast("success", "Model added", `${model.name} is loading.`);
  return model;
}

export async function downloadAction(kind: "download" | "pause" | "resume" | "cancel", repoId: string): Promise<void> {
  try {
    if (kind === "cancel") {
      await models.cancelDownload(repoId);
      store.set((s) => {
        const { [repoId]: _gone, ...rest } = s.downloads;
        return { downloads: rest };
      });
      await refreshModels();
      return;
    }
    const fn = kind === "download" ? models.downloadModel : kind === "pause" ? models.pauseDownload : models.resumeDownload;
    const d = await fn(repoId);
    store.set((s) => ({ downloads: { ...s.downloads, [repoId]: d } }));
    if (kind === "download") await refreshModels();
  } catch (e) {
    reportError(`Could not ${kind} ${repoId}`, e);
  }
}

export async function inspectModel(repoId: string) {
  return models.inspectModel(repoId);
}

/** The hub token's status (stored in the OS keychain, never shown). */
export async function hubTokenStatus() {
  return models.getHubTokenStatus();
}

/** Stores (or with `null` deletes) the hub token in the OS keychain. */
export async function saveHubToken(token: string | null) {
  return models.setHubToken(token);
}

/** Deletes a downloaded model's files; a local model only leaves the list (its file stays). */
export async function deleteModel(modelId: string): Promise<void> {
  try {
    await models.deleteModel(modelId);
    await refreshModels();
  } catch (e) {
    reportError(isLocalModelId(modelId) ? "Could not remove the model from the list" : "Could not delete the model", e);
  }
}

// ---------------------------------------------------------------------------------------------
// Server and links

export async function startServer(port: number, token: string | null): Promise<void> {
  try {
    store.set({ server: await server.startServer(port, token) });
  } catch (e) {
    reportError("The server did not start", e);
  }
}

export async function stopServer(): Promise<void> {
  try {
    store.set({ server: await server.stopServer() });
  } catch (e) {
    reportError("Could not stop the server", e);
  }
}

export async function openLink(url: string): Promise<void> {
  try {
    await system.openExternal(url);
  } catch (e) {
    reportError("Could not open the link", e);
  }
}

/** Copies text; falls back to a hidden textarea where the async clipboard is unavailable. */
export async function copyText(text: string, what = "Copied"): Promise<void> {
  try {
    await navigator.clipboard.writeText(text);
  } catch {
    const ta = document.createElement("textarea");
    ta.value = text;
    ta.setAttribute("readonly", "");
    ta.style.position = "fixed";
    ta.style.opacity = "0";
    document.body.appendChild(ta);
    ta.select();
    document.execCommand("copy");
    ta.remove();
  }
  toast("success", what, undefined, 1800);
}
