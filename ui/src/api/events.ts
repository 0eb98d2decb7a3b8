/** Event names and payloads the back end emits (see IPC.md, "Events"). */
import type {
  DownloadProgress,
  GenerationDoneEvent,
  ModelStatus,
  PrefillProgressEvent,
  ServerStatus,
  StatsSnapshot,
  TokenEvent,
} from "./types";

export interface EventMap {
  "chat-token": TokenEvent;
  "chat-done": GenerationDoneEvent;
  "prefill-progress": PrefillProgressEvent;
  stats: StatsSnapshot;
  "download-progress": DownloadProgress;
  "model-status": ModelStatus;
  "server-status": ServerStatus;
}

export type EventName = keyof EventMap;

export const EVENT_NAMES: readonly EventName[] = [
  "chat-token",
  "chat-done",
  "prefill-progress",
  "stats",
  "download-progress",
  "model-status",
  "server-status",
];
