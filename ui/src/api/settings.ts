/** Engine settings: KV cache, context length, sampling. */
import { call } from "./ipc";
import type { Settings, SettingsUpdate } from "./types";

export const getSettings = () => call<Settings>("get_settings");

export const getDefaultSettings = () => call<Settings>("get_default_settings");

/** Validates and saves; changing `cache` or `contextLength` drops every chat's KV cache. */
export const updateSettings = (settings: Settings) => call<SettingsUpdate>("update_settings", { settings });
