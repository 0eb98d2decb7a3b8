/**
 * The open conversation's state transitions, as pure functions (unit-tested): optimistic
 * send, streaming tokens, stop, regenerate, edit-and-resend, prefill progress.
 */
import type {
  Chat,
  ChatSummary,
  DocumentInfo,
  GenerationDoneEvent,
  GenerationStarted,
  Id,
  Message,
  PrefillProgressEvent,
  TokenEvent,
} from "../api/types";
import { formatBytes, formatCount, formatEta } from "./format";

export interface ActiveGeneration {
  id: Id;
  messageId: Id;
  /** Stop was requested; waiting for `chat-done`. */
  stopping: boolean;
}

/** Events that arrived before the command that started their generation returned. */
interface EarlyEvents {
  text: string;
  done: Message | null;
}

export interface ChatView {
  chat: Chat;
  generation: ActiveGeneration | null;
  /** Latest progress of a running prefill; cleared when it ends. */
  prefill: PrefillProgressEvent | null;
  /** A send/regenerate/edit call is in flight. */
  pending: boolean;
  early: Record<Id, EarlyEvents>;
}

export const PENDING_PREFIX = "pending:";

export function openChat(chat: Chat): ChatView {
  const streaming = [...chat.messages].reverse().find((m) => m.role === "assistant" && m.status === "streaming");
  return {
    chat,
    // A chat opened mid-answer (generation still running in the back end) keeps streaming.
    generation: streaming ? { id: "", messageId: streaming.id, stopping: false } : null,
    prefill: null,
    pending: false,
    early: {},
  };
}

const withMessages = (view: ChatView, messages: Message[]): ChatView => ({
  ...view,
  chat: { ...view.chat, messages, messageCount: messages.length },
});

/** Shows the user's message at once, before `send_message` returns. */
export function applyOptimisticSend(view: ChatView, content: string, tempId: string, now = Date.now()): ChatView {
  const msg: Message = {
    id: PENDING_PREFIX + tempId,
    chatId: view.chat.id,
    role: "user",
    content,
    status: "complete",
    error: null,
    createdAt: now,
    stats: null,
  };
  return { ...withMessages(view, [...view.chat.messages, msg]), pending: true };
}

/** Undoes an optimistic send (the command failed). */
export function applySendFailed(view: ChatView, tempId: string): ChatView {
  const id = PENDING_PREFIX + tempId;
  return { ...withMessages(view, view.chat.messages.filter((m) => m.id !== id)), pending: false };
}

/** Marks a regenerate/edit call in flight (inputs disable). */
export const applyPending = (view: ChatView, pending: boolean): ChatView => ({ ...view, pending });

/**
 * A generation started (send, regenerate or edit):
 * - send: the user message is new → replaces the optimistic one (or is appended);
 * - edit: the user message exists → it is replaced and every later message removed;
 * - regenerate: no user message → every message after the last user message is removed.
 * Then the streaming answer is appended, with any text that arrived early.
 */
export function applyGenerationStarted(view: ChatView, started: GenerationStarted, tempId?: string): ChatView {
  let messages = view.chat.messages;
  const user = started.userMessage;
  if (tempId) messages = messages.filter((m) => m.id !== PENDING_PREFIX + tempId);
  if (user) {
    const at = messages.findIndex((m) => m.id === user.id);
    messages = at >= 0 ? [...messages.slice(0, at), user] : [...messages, user];
  } else {
    let lastUser = -1;
    messages.forEach((m, i) => {
      if (m.role === "user") lastUser = i;
    });
    messages = messages.slice(0, lastUser + 1);
  }
  const early = view.early[started.generationId];
  let answer = started.assistantMessage;
  if (early) answer = early.done ?? { ...answer, content: answer.content + early.text };
  messages = [...messages.filter((m) => m.id !== answer.id), answer];
  const { [started.generationId]: _used, ...rest } = view.early;
  const done = early?.done != null;
  return {
    ...withMessages(view, messages),
    pending: false,
    early: rest,
    generation: done ? null : { id: started.generationId, messageId: answer.id, stopping: false },
  };
}

/** Appends streamed text to its message; buffers it when the message is not known yet. */
export function applyToken(view: ChatView, ev: TokenEvent): ChatView {
  if (ev.chatId !== view.chat.id) return view;
  const idx = view.chat.messages.findIndex((m) => m.id === ev.messageId);
  if (idx < 0) {
    const prev = view.early[ev.generationId] ?? { text: "", done: null };
    return { ...view, early: { ...view.early, [ev.generationId]: { ...prev, text: prev.text + ev.delta } } };
  }
  const msg = view.chat.messages[idx]!;
  if (msg.status !== "streaming") return view;
  // A chat opened mid-answer names its generation from the first event that reaches it.
  const generation = view.generation;
  if (generation && generation.messageId === ev.messageId && !generation.id) view = { ...view, generation: { ...generation, id: ev.generationId } };
  // ...and already shows the text up to some point: skip what it has.
  const delta = ev.delta.slice(Math.max(0, msg.content.length - ev.offset));
  if (!delta) return view;
  const messages = view.chat.messages.slice();
  messages[idx] = { ...msg, content: msg.content + delta };
  return withMessages(view, messages);
}

/** The generation ended: the stored message replaces the streamed one. */
export function applyDone(view: ChatView, ev: GenerationDoneEvent): ChatView {
  if (ev.chatId !== view.chat.id) return view;
  const idx = view.chat.messages.findIndex((m) => m.id === ev.message.id);
  if (idx < 0) {
    const prev = view.early[ev.generationId] ?? { text: "", done: null };
    return { ...view, early: { ...view.early, [ev.generationId]: { ...prev, done: ev.message } } };
  }
  const messages = view.chat.messages.slice();
  messages[idx] = ev.message;
  const ended = view.generation && (view.generation.messageId === ev.message.id || view.generation.id === ev.generationId);
  const prefillEnded = view.prefill && view.prefill.jobId === ev.generationId;
  return {
    ...withMessages(view, messages),
    generation: ended ? null : view.generation,
    prefill: prefillEnded ? null : view.prefill,
  };
}

/** Stop requested (Esc or the Stop button). The answer ends with the `chat-done` event. */
export function applyStopRequested(view: ChatView): ChatView {
  if (!view.generation) return view;
  return { ...view, generation: { ...view.generation, stopping: true } };
}

/** Prefill progress: kept while running, cleared when it ends; documents become `prefilled`. */
export function applyPrefill(view: ChatView, ev: PrefillProgressEvent): ChatView {
  if (ev.chatId !== view.chat.id) return view;
  if (ev.state === "running") return { ...view, prefill: ev };
  let documents: DocumentInfo[] = view.chat.documents;
  if (ev.state === "done" && ev.documentIds.length) {
    documents = documents.map((d) => (ev.documentIds.includes(d.id) ? { ...d, prefilled: true } : d));
  }
  return { ...view, prefill: null, chat: { ...view.chat, documents } };
}

export function applyDocumentAdded(view: ChatView, doc: DocumentInfo): ChatView {
  const documents = [...view.chat.documents.filter((d) => d.id !== doc.id), doc];
  return { ...view, chat: { ...view.chat, documents, documentCount: documents.length } };
}

export function applyDocumentRemoved(view: ChatView, documentId: Id): ChatView {
  const documents = view.chat.documents.filter((d) => d.id !== documentId);
  return { ...view, chat: { ...view.chat, documents, documentCount: documents.length } };
}

// ---------------------------------------------------------------------------------------------
// The open chat's entry in the chat list

const PREVIEW_CHARS = 120;

/**
 * A message's preview in the chat list, as the back end makes it (`preview_of`): one line
 * (whitespace collapsed), at most 120 characters, ending in "…" when cut.
 */
export function previewOf(text: string): string {
  const line = text.split(/\s+/u).filter(Boolean).join(" ");
  const chars = Array.from(line);
  if (chars.length <= PREVIEW_CHARS) return line;
  return `${chars.slice(0, PREVIEW_CHARS - 1).join("").trimEnd()}…`;
}

/**
 * The list entry of the open chat, from what the view holds now: its message and document
 * counts, and the preview of its last message with text. The chat list comes from
 * `list_chats`, whose preview is the stored last message: while an answer streams that is
 * the answer the back end saved so far ("" until its first save), so the list alone would
 * show an empty chat. Here an answer with no text yet gives way to the question before it.
 */
export function liveSummary(summary: ChatSummary, view: ChatView): ChatSummary {
  const { messages, documents } = view.chat;
  let preview = "";
  for (let i = messages.length - 1, found = false; i >= 0 && !found; i--) {
    preview = previewOf(messages[i]!.content);
    found = preview !== "";
  }
  return { ...summary, messageCount: messages.length, documentCount: documents.length, preview };
}

/**
 * Keeps the open chat's entry of a chat list in step with its view (see {@link liveSummary});
 * other entries are kept. Returns the same list when nothing changed (no re-render).
 */
export function syncChatList(list: ChatSummary[], view: ChatView | null): ChatSummary[] {
  if (!view) return list;
  const at = list.findIndex((c) => c.id === view.chat.id);
  if (at < 0) return list;
  const old = list[at]!;
  const next = liveSummary(old, view);
  if (next.preview === old.preview && next.messageCount === old.messageCount && next.documentCount === old.documentCount) return list;
  const out = list.slice();
  out[at] = next;
  return out;
}

/** The line under a chat's title in the list: its preview, else what it holds. */
export function chatSubtitle(chat: ChatSummary): string {
  if (chat.preview) return chat.preview;
  const n = chat.messageCount;
  const d = chat.documentCount;
  if (n > 0) return `${n} message${n === 1 ? "" : "s"}`;
  if (d > 0) return `${d} document${d === 1 ? "" : "s"}`;
  return "No messages yet";
}

/** True while an answer streams, a command is in flight or a prefill runs. */
export const isBusy = (view: ChatView): boolean => view.generation !== null || view.pending || view.prefill !== null;

/** The last message, when it is the assistant's and finished (so it can be regenerated). */
export function regenerableMessage(view: ChatView): Message | null {
  if (isBusy(view)) return null;
  const last = view.chat.messages[view.chat.messages.length - 1];
  if (!last) return null;
  if (last.role === "assistant" && last.status !== "streaming") return last;
  return null;
}

/** A user message can be edited and resent when nothing runs and it has a real id. */
export function canEdit(view: ChatView, message: Message): boolean {
  return !isBusy(view) && message.role === "user" && !message.id.startsWith(PENDING_PREFIX);
}

/** What reading a document costs, for its chip: "31,204 tokens · KV cache with it: 91.5 MiB
 * with K4V2 (float16: 360 MiB) · about 10 min 50 s to read". `cache` names the settings. */
export function documentCost(doc: DocumentInfo, cache: string): string {
  const parts = [`${formatCount(doc.tokenCount)} tokens`];
  if (doc.kvBytes != null) {
    const fp16 = doc.kvFp16Bytes != null && doc.kvFp16Bytes !== doc.kvBytes ? ` (float16: ${formatBytes(doc.kvFp16Bytes)})` : "";
    parts.push(`KV cache with it: ${formatBytes(doc.kvBytes)} with ${cache}${fp16}`);
  }
  if (doc.readSeconds != null && !doc.prefilled) parts.push(`about ${formatEta(doc.readSeconds)} to read`);
  return parts.join(" · ");
}

/** How much of a document too long for the context fits: its tokens beyond what comes before it
 * (system prompt, earlier documents) and the room kept for an answer; 0 when none. */
export function fittingTokens(doc: DocumentInfo): number {
  return Math.max(0, Math.min(doc.tokenCount, doc.contextLength - (doc.contextNeeded - doc.tokenCount)));
}

/** Total document tokens and whether all fit. */
export function documentBudget(docs: DocumentInfo[]): { tokens: number; allFit: boolean } {
  return { tokens: docs.reduce((n, d) => n + d.tokenCount, 0), allFit: docs.every((d) => d.fitsInContext) };
}
