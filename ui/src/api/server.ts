/** The local OpenAI-compatible server. */
import { call } from "./ipc";
import type { ServerStatus } from "./types";

export const getServerStatus = () => call<ServerStatus>("get_server_status");

/** `token`: when non-null, requests must send `Authorization: Bearer <token>`. */
export const startServer = (port: number, token: string | null) => call<ServerStatus>("start_server", { port, token });

export const stopServer = () => call<ServerStatus>("stop_server");
