/** The typed IPC surface of the app; IPC.md describes it for the Rust side. */
export * as chats from "./chats";
export * as messages from "./messages";
export * as documents from "./documents";
export * as settings from "./settings";
export * as models from "./models";
export * as stats from "./stats";
export * as server from "./server";
export * as system from "./system";
export { ApiError, call, on, toApiError } from "./ipc";
export type { UnlistenFn } from "./ipc";
export { EVENT_NAMES } from "./events";
export type { EventMap, EventName } from "./events";
export type * from "./types";
