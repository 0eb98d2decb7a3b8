/** The one place that talks to Tauri: typed `invoke`/`listen` with normalized errors. */
import { invoke } from "@tauri-apps/api/core";
import { listen, type UnlistenFn } from "@tauri-apps/api/event";
import type { CommandError, ErrorCode } from "./types";
import type { EventMap, EventName } from "./events";

const ERROR_CODES: ReadonlySet<string> = new Set<ErrorCode>([
  "notFound",
  "invalidArgument",
  "busy",
  "cancelled",
  "modelNotLoaded",
  "modelLoadFailed",
  "contextOverflow",
  "unsupportedFile",
  "invalidDocument",
  "insufficientMemory",
  "network",
  "portInUse",
  "io",
  "internal",
]);

/** A failed command. `code` and `field` come from the back end's CommandError. */
export class ApiError extends Error implements CommandError {
  readonly code: ErrorCode;
  readonly field: string | null;
  readonly command: string;

  constructor(command: string, code: ErrorCode, message: string, field: string | null = null) {
    super(message);
    this.code = code;
    this.field = field;
    this.command = command;
  }
}

/** Turns whatever `invoke` rejected with into an ApiError (a CommandError, a string, an Error). */
export function toApiError(command: string, raw: unknown): ApiError {
  if (raw instanceof ApiError) return raw;
  if (raw && typeof raw === "object") {
    const o = raw as Record<string, unknown>;
    const message = typeof o.message === "string" && o.message ? o.message : "";
    const code = typeof o.code === "string" && ERROR_CODES.has(o.code) ? (o.code as ErrorCode) : "internal";
    const field = typeof o.field === "string" ? o.field : null;
    if (message) return new ApiError(command, code, message, field);
  }
  if (typeof raw === "string" && raw) return new ApiError(command, "internal", raw);
  return new ApiError(command, "internal", `The app's back end failed to run "${command}". Restart KIVI Chat and try again.`);
}

/** Calls a back-end command. Arguments are camelCase (Tauri maps them to snake_case Rust args). */
export async function call<T>(command: string, args?: Record<string, unknown>): Promise<T> {
  try {
    return await invoke<T>(command, args);
  } catch (e) {
    throw toApiError(command, e);
  }
}

/** Subscribes to a back-end event; resolves to the unsubscribe function. */
export function on<K extends EventName>(event: K, handler: (payload: EventMap[K]) => void): Promise<UnlistenFn> {
  return listen<EventMap[K]>(event, (e) => handler(e.payload));
}

export type { UnlistenFn };
