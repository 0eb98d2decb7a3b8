/** The live KV-cache statistics (also pushed as the `stats` event). */
import { call } from "./ipc";
import type { StatsSnapshot } from "./types";

export const getStats = () => call<StatsSnapshot>("get_stats");
