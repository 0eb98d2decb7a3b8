/** Conversations: list, create, open, rename, delete, system prompt, export. */
import { call } from "./ipc";
import type { Chat, ChatSummary, ExportFormat, Id } from "./types";

/** Chats, most recently updated first; `query` filters by title and message text. */
export const listChats = (query: string | null = null) => call<ChatSummary[]>("list_chats", { query });

export const createChat = (title: string | null = null, systemPrompt: string | null = null) =>
  call<Chat>("create_chat", { title, systemPrompt });

export const getChat = (chatId: Id) => call<Chat>("get_chat", { chatId });

export const renameChat = (chatId: Id, title: string) => call<ChatSummary>("rename_chat", { chatId, title });

export const deleteChat = (chatId: Id) => call<null>("delete_chat", { chatId });

/** Also drops the chat's KV cache (its prefix changed). */
export const setSystemPrompt = (chatId: Id, systemPrompt: string) =>
  call<Chat>("set_system_prompt", { chatId, systemPrompt });

/** Opens a native save dialog and writes the file; resolves to its path, or null if cancelled. */
export const exportChat = (chatId: Id, format: ExportFormat) => call<string | null>("export_chat", { chatId, format });
