import { describe, expect, it } from "vitest";
import type { Chat, ChatSummary, DocumentInfo, GenerationStarted, Message } from "../../src/api/types";
import {
  applyDocumentAdded,
  applyDocumentRemoved,
  applyDone,
  applyGenerationStarted,
  applyOptimisticSend,
  applyPending,
  applyPrefill,
  applySendFailed,
  applyStopRequested,
  applyToken,
  canEdit,
  chatSubtitle,
  documentBudget,
  documentCost,
  fittingTokens,
  liveSummary,
  isBusy,
  openChat,
  PENDING_PREFIX,
  previewOf,
  regenerableMessage,
  syncChatList,
  type ChatView,
} from "../../src/lib/chatLogic";

let n = 0;
const msg = (role: Message["role"], content: string, status: Message["status"] = "complete", id = `m${++n}`): Message => ({
  id,
  chatId: "c1",
  role,
  content,
  status,
  error: null,
  createdAt: 1000 + n,
  stats: null,
});

const chat = (messages: Message[] = [], documents: DocumentInfo[] = []): Chat => ({
  id: "c1",
  title: "Test",
  createdAt: 1,
  updatedAt: 2,
  messageCount: messages.length,
  documentCount: documents.length,
  preview: "",
  systemPrompt: "",
  messages,
  documents,
  cache: { config: null, tokens: 0 },
});

const doc = (id: string, tokenCount: number, fitsInContext = true): DocumentInfo => ({
  id,
  chatId: "c1",
  name: `${id}.txt`,
  path: `/tmp/${id}.txt`,
  kind: "txt",
  sizeBytes: tokenCount * 4,
  tokenCount,
  fitsInContext,
  contextNeeded: 0,
  kvBytes: null,
  kvFp16Bytes: null,
  readSeconds: null,
  contextLength: 8192,
  prefilled: false,
  addedAt: 1,
});

const started = (user: Message | null, answerId = "a1", generationId = "g1"): GenerationStarted => ({
  generationId,
  userMessage: user,
  assistantMessage: { ...msg("assistant", "", "streaming", answerId) },
});

const contents = (v: ChatView) => v.chat.messages.map((m) => `${m.role}:${m.content}:${m.status}`);

describe("send and stream", () => {
  it("shows the user's message at once, then the streaming answer", () => {
    let v = openChat(chat());
    v = applyOptimisticSend(v, "Hello", "t1");
    expect(v.pending).toBe(true);
    expect(v.chat.messages[0]!.id).toBe(`${PENDING_PREFIX}t1`);
    expect(isBusy(v)).toBe(true);

    const user = msg("user", "Hello", "complete", "u1");
    v = applyGenerationStarted(v, started(user), "t1");
    expect(v.pending).toBe(false);
    expect(v.chat.messages.map((m) => m.id)).toEqual(["u1", "a1"]);
    expect(v.generation).toEqual({ id: "g1", messageId: "a1", stopping: false });
    expect(v.chat.messageCount).toBe(2);
  });

  it("appends streamed tokens in order", () => {
    let v = applyGenerationStarted(openChat(chat()), started(msg("user", "Hi", "complete", "u1")));
    let offset = 0;
    for (const delta of ["The ", "whale ", "is ", "white."]) {
      v = applyToken(v, { chatId: "c1", generationId: "g1", messageId: "a1", delta, offset });
      offset += delta.length;
    }
    expect(v.chat.messages[1]!.content).toBe("The whale is white.");
    expect(v.chat.messages[1]!.status).toBe("streaming");
  });

  it("continues a chat opened mid-answer from where its copy ends, skipping what it has", () => {
    // get_chat returned the answer as far as "The whale"; events from before and after that
    // point arrive afterwards (they were held while the chat was being opened).
    let v = openChat(chat([msg("user", "Hi", "complete", "u1"), msg("assistant", "The whale", "streaming", "a1")]));
    expect(v.generation?.messageId).toBe("a1");
    const token = (delta: string, offset: number) => ({ chatId: "c1", generationId: "g1", messageId: "a1", delta, offset });
    v = applyToken(v, token("The ", 0));
    expect(v.chat.messages[1]!.content).toBe("The whale");
    v = applyToken(v, token("whale is", 4));
    expect(v.chat.messages[1]!.content).toBe("The whale is");
    v = applyToken(v, token(" white 🐋.", 12));
    expect(v.chat.messages[1]!.content).toBe("The whale is white 🐋.");
    // Offsets count UTF-16 code units, as JavaScript strings do.
    v = applyToken(v, token("🐋.", 19));
    v = applyToken(v, token(" Ahab", 22));
    expect(v.chat.messages[1]!.content).toBe("The whale is white 🐋. Ahab");
    expect(v.generation?.id).toBe("g1");
  });

  it("ignores tokens of other chats and keeps the same state object for empty deltas", () => {
    const v = applyGenerationStarted(openChat(chat()), started(msg("user", "Hi", "complete", "u1")));
    expect(applyToken(v, { chatId: "other", generationId: "g1", messageId: "a1", delta: "x", offset: 0 })).toBe(v);
    expect(applyToken(v, { chatId: "c1", generationId: "g1", messageId: "a1", delta: "", offset: 0 })).toBe(v);
  });

  it("buffers tokens and the end that arrive before send_message returns", () => {
    let v = applyOptimisticSend(openChat(chat()), "Hi", "t1");
    v = applyToken(v, { chatId: "c1", generationId: "g1", messageId: "a1", delta: "Early ", offset: 0 });
    v = applyToken(v, { chatId: "c1", generationId: "g1", messageId: "a1", delta: "bird", offset: 6 });
    v = applyGenerationStarted(v, started(msg("user", "Hi", "complete", "u1")), "t1");
    expect(v.chat.messages[1]!.content).toBe("Early bird");
    expect(v.generation?.messageId).toBe("a1");
    expect(v.early).toEqual({});

    let w = applyOptimisticSend(openChat(chat()), "Hi", "t2");
    const final = { ...msg("assistant", "Done already", "complete", "a2") };
    w = applyDone(w, { chatId: "c1", generationId: "g2", message: final });
    w = applyGenerationStarted(w, started(msg("user", "Hi", "complete", "u2"), "a2", "g2"), "t2");
    expect(w.chat.messages[1]).toEqual(final);
    expect(w.generation).toBeNull();
  });

  it("replaces the streamed message with the stored one when done", () => {
    let v = applyGenerationStarted(openChat(chat()), started(msg("user", "Hi", "complete", "u1")));
    v = applyToken(v, { chatId: "c1", generationId: "g1", messageId: "a1", delta: "Partial", offset: 0 });
    const final: Message = { ...v.chat.messages[1]!, content: "Partial answer", status: "complete" };
    v = applyDone(v, { chatId: "c1", generationId: "g1", message: final });
    expect(v.generation).toBeNull();
    expect(v.chat.messages[1]).toEqual(final);
    expect(isBusy(v)).toBe(false);
  });

  it("removes the optimistic message when sending fails", () => {
    let v = applyOptimisticSend(openChat(chat([msg("user", "a", "complete", "u0")])), "Hello", "t9");
    v = applySendFailed(v, "t9");
    expect(v.chat.messages.map((m) => m.id)).toEqual(["u0"]);
    expect(v.pending).toBe(false);
  });
});

describe("stop", () => {
  it("marks the generation as stopping, then ends it with the stopped message", () => {
    let v = applyGenerationStarted(openChat(chat()), started(msg("user", "Hi", "complete", "u1")));
    v = applyToken(v, { chatId: "c1", generationId: "g1", messageId: "a1", delta: "Half an", offset: 0 });
    v = applyStopRequested(v);
    expect(v.generation?.stopping).toBe(true);
    // Tokens already in flight still append until chat-done.
    v = applyToken(v, { chatId: "c1", generationId: "g1", messageId: "a1", delta: "swer", offset: 7 });
    v = applyDone(v, { chatId: "c1", generationId: "g1", message: { ...v.chat.messages[1]!, status: "stopped" } });
    expect(v.generation).toBeNull();
    expect(contents(v)).toEqual(["user:Hi:complete", "assistant:Half answer:stopped"]);
    expect(regenerableMessage(v)?.id).toBe("a1");
  });

  it("is a no-op without a generation", () => {
    const v = openChat(chat());
    expect(applyStopRequested(v)).toBe(v);
  });

  it("ignores tokens for a message that already ended", () => {
    let v = openChat(chat([msg("user", "Hi", "complete", "u1"), msg("assistant", "Done", "stopped", "a1")]));
    v = applyToken(v, { chatId: "c1", generationId: "g1", messageId: "a1", delta: " more", offset: 4 });
    expect(v.chat.messages[1]!.content).toBe("Done");
  });
});

describe("regenerate", () => {
  it("replaces the last answer with a new streaming one", () => {
    const history = [msg("user", "Q1", "complete", "u1"), msg("assistant", "A1", "complete", "a1"), msg("user", "Q2", "complete", "u2"), msg("assistant", "A2", "complete", "a2")];
    let v = openChat(chat(history));
    expect(regenerableMessage(v)?.id).toBe("a2");
    v = applyPending(v, true);
    expect(regenerableMessage(v)).toBeNull();
    v = applyGenerationStarted(v, started(null, "a3", "g3"));
    expect(v.chat.messages.map((m) => m.id)).toEqual(["u1", "a1", "u2", "a3"]);
    expect(v.generation?.messageId).toBe("a3");
  });

  it("can regenerate an interrupted or failed answer", () => {
    const v = openChat(chat([msg("user", "Q", "complete", "u1"), msg("assistant", "partial", "interrupted", "a1")]));
    expect(regenerableMessage(v)?.id).toBe("a1");
    const w = openChat(chat([msg("user", "Q", "complete", "u1"), { ...msg("assistant", "", "error", "a1"), error: "boom" }]));
    expect(regenerableMessage(w)?.id).toBe("a1");
  });

  it("offers nothing while streaming or when the last message is the user's", () => {
    expect(regenerableMessage(openChat(chat([msg("user", "Q", "complete", "u1")])))).toBeNull();
    const streaming = openChat(chat([msg("user", "Q", "complete", "u1"), msg("assistant", "x", "streaming", "a1")]));
    expect(streaming.generation?.messageId).toBe("a1");
    expect(regenerableMessage(streaming)).toBeNull();
  });
});

describe("edit and resend", () => {
  it("rewrites the user message and drops everything after it", () => {
    const history = [msg("user", "Q1", "complete", "u1"), msg("assistant", "A1", "complete", "a1"), msg("user", "Q2", "complete", "u2"), msg("assistant", "A2", "complete", "a2")];
    let v = openChat(chat(history));
    expect(canEdit(v, history[0]!)).toBe(true);
    expect(canEdit(v, history[1]!)).toBe(false);
    v = applyGenerationStarted(v, started({ ...history[0]!, content: "Q1 edited" }, "a9", "g9"));
    expect(contents(v)).toEqual(["user:Q1 edited:complete", "assistant::streaming"]);
    expect(v.generation?.id).toBe("g9");
  });

  it("cannot edit while busy or an optimistic message", () => {
    let v = applyOptimisticSend(openChat(chat()), "Hello", "t1");
    expect(canEdit(v, v.chat.messages[0]!)).toBe(false);
    v = applyGenerationStarted(v, started(msg("user", "Hello", "complete", "u1")), "t1");
    expect(canEdit(v, v.chat.messages[0]!)).toBe(false);
  });
});

describe("documents and prefill", () => {
  it("tracks prefill progress and marks documents cached when done", () => {
    let v = openChat(chat([], [doc("d1", 5000), doc("d2", 900000, false)]));
    expect(documentBudget(v.chat.documents)).toEqual({ tokens: 905000, allFit: false });
    const base = { chatId: "c1", jobId: "p1", documentIds: ["d1"], totalTokens: 5000, tokensPerSec: 1000, error: null };
    v = applyPrefill(v, { ...base, state: "running", processedTokens: 1000, etaSeconds: 4 });
    expect(v.prefill?.processedTokens).toBe(1000);
    expect(isBusy(v)).toBe(true);
    v = applyPrefill(v, { ...base, state: "done", processedTokens: 5000, etaSeconds: 0 });
    expect(v.prefill).toBeNull();
    expect(v.chat.documents.map((d) => d.prefilled)).toEqual([true, false]);
  });

  it("clears a cancelled prefill without caching", () => {
    let v = openChat(chat([], [doc("d1", 5000)]));
    const base = { chatId: "c1", jobId: "p1", documentIds: ["d1"], totalTokens: 5000, tokensPerSec: 1000, etaSeconds: null, error: null };
    v = applyPrefill(v, { ...base, state: "running", processedTokens: 100 });
    v = applyPrefill(v, { ...base, state: "cancelled", processedTokens: 100 });
    expect(v.prefill).toBeNull();
    expect(v.chat.documents[0]!.prefilled).toBe(false);
  });

  it("adds and removes documents", () => {
    let v = openChat(chat());
    v = applyDocumentAdded(v, doc("d1", 10));
    v = applyDocumentAdded(v, doc("d2", 20));
    expect(v.chat.documentCount).toBe(2);
    v = applyDocumentRemoved(v, "d1");
    expect(v.chat.documents.map((d) => d.id)).toEqual(["d2"]);
  });
});

describe("the open chat's entry in the chat list", () => {
  // A chat from an earlier run, as `list_chats` lists it.
  const restored = () => chat([msg("user", "Why two borrows?", "complete", "u0"), msg("assistant", "Because `&mut` is exclusive.", "complete", "a0")]);
  const summaryOf = (c: Chat, patch: Partial<ChatSummary> = {}): ChatSummary => ({
    id: c.id,
    title: c.title,
    createdAt: c.createdAt,
    updatedAt: c.updatedAt,
    messageCount: c.messages.length,
    documentCount: c.documents.length,
    preview: previewOf(c.messages[c.messages.length - 1]?.content ?? ""),
    ...patch,
  });
  const other: ChatSummary = { id: "c2", title: "Other", createdAt: 1, updatedAt: 1, messageCount: 0, documentCount: 0, preview: "" };

  it("makes previews as the back end does: one line, at most 120 characters", () => {
    expect(previewOf("")).toBe("");
    expect(previewOf("  \n\t ")).toBe("");
    expect(previewOf("  Hello\n\n  world\t!  ")).toBe("Hello world !");
    const p = previewOf("word ".repeat(60));
    expect(Array.from(p).length).toBe(120);
    expect(p.endsWith("…")).toBe(true);
    expect(Array.from(previewOf("é".repeat(300))).length).toBe(120);
  });

  it("shows the question, then the streaming answer, of a restored chat, and never an empty chat", () => {
    const c = restored();
    let list = [summaryOf(c), other];
    let v = openChat(c);
    list = syncChatList(list, v);
    expect(list[0]!.preview).toBe("Because `&mut` is exclusive.");

    v = applyOptimisticSend(v, "And  shared\nones?", "t1");
    list = syncChatList(list, v);
    expect(list[0]).toMatchObject({ preview: "And shared ones?", messageCount: 3 });

    v = applyGenerationStarted(v, started(msg("user", "And  shared\nones?", "complete", "u1")), "t1");
    // What `list_chats` says right after send_message: the last message is the empty answer.
    list = syncChatList([summaryOf(v.chat, { preview: "" }), other], v);
    expect(list[0]).toMatchObject({ preview: "And shared ones?", messageCount: 4 });
    expect(chatSubtitle(list[0]!)).not.toBe("No messages yet");

    v = applyToken(v, { chatId: "c1", generationId: "g1", messageId: "a1", delta: "Shared borrows ", offset: 0 });
    list = syncChatList(list, v);
    expect(list[0]).toMatchObject({ preview: "Shared borrows", messageCount: 4 });
    v = applyToken(v, { chatId: "c1", generationId: "g1", messageId: "a1", delta: "can coexist.", offset: 15 });
    list = syncChatList(list, v);
    expect(list[0]!.preview).toBe("Shared borrows can coexist.");

    v = applyDone(v, { chatId: "c1", generationId: "g1", message: { ...v.chat.messages[3]!, status: "complete" } });
    list = syncChatList(list, v);
    expect(list[0]).toMatchObject({ preview: "Shared borrows can coexist.", messageCount: 4, documentCount: 0 });
    expect(list[1]).toBe(other);
  });

  it("keeps the same list when nothing shown changed, and other chats' entries as they are", () => {
    const c = restored();
    const list = [summaryOf(c), other];
    const v = openChat(c);
    expect(syncChatList(list, v)).toBe(list);
    expect(syncChatList(list, null)).toBe(list);
    expect(syncChatList([other], v)).toEqual([other]);
    // Long answers: the preview stops changing after 120 characters, so does the list.
    let w = applyGenerationStarted(v, started(msg("user", "Q", "complete", "u1")));
    w = applyToken(w, { chatId: "c1", generationId: "g1", messageId: "a1", delta: "x".repeat(200), offset: 0 });
    const l1 = syncChatList(list, w);
    w = applyToken(w, { chatId: "c1", generationId: "g1", messageId: "a1", delta: "more", offset: 200 });
    expect(syncChatList(l1, w)).toBe(l1);
  });

  it("counts documents, and skips an answer that ended without text", () => {
    let v = applyDocumentAdded(openChat(restored()), doc("d1", 100));
    v = applyGenerationStarted(v, started(msg("user", "Summarize", "complete", "u1")));
    v = applyDone(v, { chatId: "c1", generationId: "g1", message: { ...v.chat.messages[3]!, status: "error", error: "boom" } });
    expect(liveSummary(summaryOf(v.chat, { preview: "" }), v)).toMatchObject({ preview: "Summarize", messageCount: 4, documentCount: 1 });
  });

  it("says 'No messages yet' only for a chat without messages", () => {
    const s = (messageCount: number, documentCount: number, preview = ""): ChatSummary => ({ ...other, messageCount, documentCount, preview });
    expect(chatSubtitle(s(0, 0))).toBe("No messages yet");
    expect(chatSubtitle(s(0, 1))).toBe("1 document");
    expect(chatSubtitle(s(0, 2))).toBe("2 documents");
    expect(chatSubtitle(s(1, 0))).toBe("1 message");
    expect(chatSubtitle(s(4, 1))).toBe("4 messages");
    expect(chatSubtitle(s(4, 1, "Hi"))).toBe("Hi");
  });
});

describe("documentCost", () => {
  it("says the tokens, the KV bytes against float16 and the reading time", () => {
    const d = { ...doc("report", 31204), kvBytes: 91.5 * 2 ** 20, kvFp16Bytes: 360 * 2 ** 20, readSeconds: 650 };
    expect(documentCost(d, "K4V2")).toBe("31,204 tokens · KV cache with it: 91.5 MiB with K4V2 (float16: 360 MiB) · about 10 min 50 s to read");
    // Read already: no reading time. Full precision: no float16 figure beside the same bytes.
    expect(documentCost({ ...d, prefilled: true }, "K4V2")).toBe("31,204 tokens · KV cache with it: 91.5 MiB with K4V2 (float16: 360 MiB)");
    expect(documentCost({ ...d, kvBytes: d.kvFp16Bytes }, "FP16")).toBe("31,204 tokens · KV cache with it: 360 MiB with FP16 · about 10 min 50 s to read");
    // No model loaded, no speed measured: the tokens alone.
    expect(documentCost(doc("report", 31204), "K4V2")).toBe("31,204 tokens");
  });
});

describe("fittingTokens", () => {
  it("is the context left after what comes before the document and the answer's room", () => {
    const d = { ...doc("book", 287_412, false), contextLength: 32_768, contextNeeded: 287_412 + 1024 + 30 };
    expect(fittingTokens(d)).toBe(32_768 - 1024 - 30);
    // Earlier documents took it all: none fits.
    expect(fittingTokens({ ...d, contextNeeded: 287_412 + 40_000 })).toBe(0);
    // A document that fits fits whole.
    expect(fittingTokens({ ...d, tokenCount: 100, contextNeeded: 1154, fitsInContext: true })).toBe(100);
  });
});
