/** Engine settings: KV cache, context length, sampling. */
import { call } from "./ipc";
import type { CacheConfig, ContextFit, Settings, SettingsUpdate } from "./types";

export const getSettings = () => call<Settings>("get_settings");

export const getDefaultSettings = () => call<Settings>("get_default_settings");

/** "Fit this machine": the longest context the active model allows and the memory holds beside
 * it with `cache` (nothing is saved). */
export const fitContextLength = (cache: CacheConfig) => call<ContextFit>("fit_context_length", { cache });

/** Validates and saves; changing `cache` or `contextLength` drops every chat's KV cache. */
export const updateSettings = (settings: Settings) => call<SettingsUpdate>("update_settings", { settings });
