/** Documents attached to a chat (.txt, .md, .pdf). The back end reads, parses and tokenizes. */
import { call } from "./ipc";
import type { DocumentInfo, Id } from "./types";

/** Opens the native file dialog (multi-select, .txt/.md/.pdf); resolves to [] when cancelled. */
export const pickDocuments = () => call<string[]>("pick_documents");

export const attachDocument = (chatId: Id, path: string) => call<DocumentInfo>("attach_document", { chatId, path });

export const removeDocument = (chatId: Id, documentId: Id) => call<null>("remove_document", { chatId, documentId });

/** Replaces a document too long for the context by its longest head that fits, with a note
 * telling the model which part it sees; resolves to the part (a document of its own). */
export const readPartOfDocument = (chatId: Id, documentId: Id) => call<DocumentInfo>("read_part_of_document", { chatId, documentId });

/** Prefills the chat's system prompt and documents into its KV cache now, so the first question
 * answers quickly. Resolves to the job id (progress comes as `prefill-progress`), or null when
 * everything is already cached. */
export const prefillChat = (chatId: Id) => call<string | null>("prefill_chat", { chatId });

export const SUPPORTED_EXTENSIONS = ["txt", "md", "markdown", "pdf"] as const;

/** True when the path names a file type the back end can read. */
export function isSupportedDocument(path: string): boolean {
  const dot = path.lastIndexOf(".");
  if (dot < 0) return false;
  const ext = path.slice(dot + 1).toLowerCase();
  return (SUPPORTED_EXTENSIONS as readonly string[]).includes(ext);
}

/** The file name of a path (either separator). */
export function baseName(path: string): string {
  const parts = path.split(/[\\/]/);
  return parts[parts.length - 1] || path;
}
