/** Messages and generation. Answers stream through `chat-token` and end with `chat-done`. */
import { call } from "./ipc";
import type { GenerationStarted, Id } from "./types";

/** Sends a question; with `asJson` the answer is a JSON object (constrained decoding). */
export const sendMessage = (chatId: Id, content: string, asJson = false) =>
  call<GenerationStarted>("send_message", { chatId, content, asJson });

/** Replaces the last answer with a new one. */
export const regenerate = (chatId: Id) => call<GenerationStarted>("regenerate", { chatId });

/** Rewrites a user message, deletes every message after it and answers again. */
export const editMessage = (chatId: Id, messageId: Id, content: string) =>
  call<GenerationStarted>("edit_message", { chatId, messageId, content });

/** Stops the chat's running generation or prefill; a no-op when nothing runs. */
export const stopGeneration = (chatId: Id) => call<null>("stop_generation", { chatId });
