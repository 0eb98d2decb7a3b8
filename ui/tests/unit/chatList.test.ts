/** @vitest-environment jsdom */
/**
 * The chat list while an answer streams into a chat restored from an earlier run: the back
 * end lists the chat with the preview of its stored last message, which is the empty
 * streaming answer until it is saved, yet the list must show the question, then the answer.
 */
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { clearMocks, mockIPC } from "@tauri-apps/api/mocks";
import { emit } from "@tauri-apps/api/event";
import type { Chat, ChatSummary, Message } from "../../src/api/types";
import { chatSubtitle } from "../../src/lib/chatLogic";
import { boot, selectChat, send, store } from "../../src/state/app";

const message = (id: string, chatId: string, role: Message["role"], content: string, status: Message["status"] = "complete"): Message => ({
  id,
  chatId,
  role,
  content,
  status,
  error: null,
  createdAt: 1000,
  stats: null,
});

/** A back end that stores a streaming answer's text only when it ends, as the app's may. */
const chats = new Map<string, Chat>();

function summary(c: Chat): ChatSummary {
  const last = c.messages[c.messages.length - 1];
  return {
    id: c.id,
    title: c.title,
    createdAt: c.createdAt,
    updatedAt: c.updatedAt,
    messageCount: c.messages.length,
    documentCount: c.documents.length,
    preview: last ? last.content.replace(/\s+/g, " ").trim().slice(0, 120) : "",
  };
}

function restored(id: string, title: string, updatedAt: number, messages: Message[]): Chat {
  return { id, title, createdAt: 1, updatedAt, messageCount: 0, documentCount: 0, preview: "", systemPrompt: "", messages, documents: [], cache: { config: null, tokens: 0 } };
}

const entry = () => store.get().chats.find((c) => c.id === "c-rust")!;

beforeAll(() => {
  chats.set("c-moby", restored("c-moby", "Moby-Dick", 3000, [message("m1", "c-moby", "user", "Why the sea?"), message("m2", "c-moby", "assistant", "A damp November.")]));
  chats.set("c-rust", restored("c-rust", "Borrow checker", 2000, [message("m3", "c-rust", "user", "Two mutable borrows?"), message("m4", "c-rust", "assistant", "No: `&mut` is exclusive.")]));
  mockIPC(
    (cmd, payload) => {
      const args = (payload ?? {}) as Record<string, unknown>;
      switch (cmd) {
        case "list_chats":
          return [...chats.values()].sort((a, b) => b.updatedAt - a.updatedAt).map(summary);
        case "get_chat": {
          const c = chats.get(String(args.chatId))!;
          return structuredClone({ ...c, ...summary(c) });
        }
        case "send_message": {
          const c = chats.get(String(args.chatId))!;
          const user = message("m5", c.id, "user", String(args.content));
          const answer = message("m6", c.id, "assistant", "", "streaming");
          c.messages.push(user, answer);
          c.updatedAt = 4000;
          return { generationId: "g1", userMessage: user, assistantMessage: answer };
        }
        case "get_settings":
        case "get_model_status":
        case "get_server_status":
          return null;
        case "list_models":
          return { models: [], activeModelId: null, availableMemoryBytes: 1, totalMemoryBytes: 2 };
        case "get_stats":
          return { timestampMs: 1, chatId: null };
        default:
          return null;
      }
    },
    { shouldMockEvents: true },
  );
});
afterAll(() => clearMocks());

describe("the chat list while an answer streams into a restored chat", () => {
  it("shows the question, then the answer, and the right count; never 'No messages yet'", async () => {
    await boot();
    expect(store.get().bootError).toBeNull();
    await selectChat("c-rust");
    expect(entry()).toMatchObject({ preview: "No: `&mut` is exclusive.", messageCount: 2 });

    expect(await send("And  shared\nborrows?")).toBe(true);
    // send() re-reads the list; the back end lists the empty streaming answer as the last message.
    await new Promise((r) => setTimeout(r, 20));
    expect(entry()).toMatchObject({ preview: "And shared borrows?", messageCount: 4 });
    expect(chatSubtitle(entry())).not.toBe("No messages yet");

    await emit("chat-token", { chatId: "c-rust", generationId: "g1", messageId: "m6", delta: "Yes, many ", offset: 0 });
    expect(entry()).toMatchObject({ preview: "Yes, many", messageCount: 4 });
    await emit("chat-token", { chatId: "c-rust", generationId: "g1", messageId: "m6", delta: "at once.", offset: 10 });
    expect(entry().preview).toBe("Yes, many at once.");

    // The back end stores the answer, says it is done, and the list is read again.
    const stored = chats.get("c-rust")!.messages[3]!;
    Object.assign(stored, { content: "Yes, many at once.", status: "complete" });
    await emit("chat-done", { chatId: "c-rust", generationId: "g1", message: structuredClone(stored) });
    await new Promise((r) => setTimeout(r, 20));
    expect(entry()).toMatchObject({ preview: "Yes, many at once.", messageCount: 4 });
    // The other chat keeps what the back end says.
    expect(store.get().chats.find((c) => c.id === "c-moby")).toMatchObject({ preview: "A damp November.", messageCount: 2 });
  });
});
