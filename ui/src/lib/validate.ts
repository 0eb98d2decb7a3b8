/** Input validation shared by the settings pane and the model manager (the back end re-checks). */
import type { Settings } from "../api/types";

export const BIT_CHOICES = [2, 4] as const;
export const GROUP_CHOICES = [32, 64, 128] as const;
/** KIVI+ attention sinks (0 = none); the back end accepts these only (`SINK_CHOICES`). */
export const SINK_CHOICES = [0, 4, 16] as const;
/** KIVI+ rotations the back end accepts (`RotationSetting`). */
export const ROTATION_CHOICES = ["none", "values", "both", "adaptive"] as const;
export const LIMITS = {
  residualLength: { min: 0, max: 4096 },
  contextLength: { min: 512, max: 131_072 },
  temperature: { min: 0, max: 2 },
  topP: { min: 0, max: 1 },
  topK: { min: 0, max: 1000 },
  repetitionPenalty: { min: 1, max: 2 },
  maxTokens: { min: 1, max: 32_768 },
  seed: { min: 0, max: 4_294_967_295 },
  /** MiB of disk for the chats' saved KV caches (0 keeps none; at most 1 TiB). */
  diskCacheMib: { min: 0, max: 1_048_576 },
  port: { min: 1024, max: 65_535 },
} as const;

/** Field path (as in CommandError.field) → message. Empty when valid. */
export type SettingsErrors = Partial<Record<SettingsField, string>>;
export type SettingsField =
  | "cache.kBits"
  | "cache.vBits"
  | "cache.groupSize"
  | "cache.residualLength"
  | "cache.sinks"
  | "cache.rotation"
  | "contextLength"
  | "sampling.temperature"
  | "sampling.topP"
  | "sampling.topK"
  | "sampling.repetitionPenalty"
  | "sampling.maxTokens"
  | "sampling.seed"
  | "backend"
  | "diskCacheMib";

/** The names the engine parses: auto, host[-f32], mlx-cpu[-dtype], mlx-gpu[-dtype]. */
const BACKEND_NAME = /^(auto|host(-f32)?|mlx-(cpu|gpu)(-(f32|f16|bf16))?)$/;

const isInt = (n: unknown): n is number => typeof n === "number" && Number.isInteger(n);
const isNum = (n: unknown): n is number => typeof n === "number" && Number.isFinite(n);

/** Checks every rule in IPC.md ("Settings"); returns the errors by field. */
export function validateSettings(s: Settings): SettingsErrors {
  const e: SettingsErrors = {};
  const { cache, sampling } = s;
  if (!(BIT_CHOICES as readonly number[]).includes(cache.kBits)) e["cache.kBits"] = "Key bits must be 2 or 4.";
  if (!(BIT_CHOICES as readonly number[]).includes(cache.vBits)) e["cache.vBits"] = "Value bits must be 2 or 4.";
  const groupOk = (GROUP_CHOICES as readonly number[]).includes(cache.groupSize);
  if (!groupOk) e["cache.groupSize"] = "Group size must be 32, 64 or 128.";

  const r = cache.residualLength;
  const { min: rMin, max: rMax } = LIMITS.residualLength;
  if (!isInt(r)) e["cache.residualLength"] = "Residual length must be a whole number of tokens.";
  else if (r < rMin || r > rMax) e["cache.residualLength"] = `Residual length must be between ${rMin} and ${rMax} tokens.`;
  else if (groupOk && r % cache.groupSize !== 0) {
    const lower = Math.floor(r / cache.groupSize) * cache.groupSize;
    const upper = lower + cache.groupSize;
    e["cache.residualLength"] =
      `Residual length must be a multiple of the group size (${cache.groupSize}): try ${lower === 0 ? upper : `${lower} or ${upper}`}.`;
  } else if (isInt(s.contextLength) && r >= s.contextLength) {
    e["cache.residualLength"] = "Residual length must be smaller than the context length.";
  }
  if (!(SINK_CHOICES as readonly number[]).includes(cache.sinks)) e["cache.sinks"] = "Sink tokens must be 0, 4 or 16.";
  if (!(ROTATION_CHOICES as readonly string[]).includes(cache.rotation)) e["cache.rotation"] = "Rotation must be none, values, both or adaptive.";

  const c = s.contextLength;
  if (!isInt(c) || c < LIMITS.contextLength.min || c > LIMITS.contextLength.max) {
    e.contextLength = `Context length must be a whole number from ${LIMITS.contextLength.min} to ${LIMITS.contextLength.max.toLocaleString("en-US")}.`;
  }

  const range = (field: SettingsField, v: unknown, lim: { min: number; max: number }, label: string, int = false) => {
    if ((int ? !isInt(v) : !isNum(v)) || (v as number) < lim.min || (v as number) > lim.max) {
      e[field] = `${label} must be ${int ? "a whole number " : ""}from ${lim.min} to ${lim.max}.`;
    }
  };
  range("sampling.temperature", sampling.temperature, LIMITS.temperature, "Temperature");
  if (!isNum(sampling.topP) || sampling.topP <= 0 || sampling.topP > 1) e["sampling.topP"] = "Top-p must be greater than 0 and at most 1.";
  range("sampling.topK", sampling.topK, LIMITS.topK, "Top-k", true);
  range("sampling.repetitionPenalty", sampling.repetitionPenalty, LIMITS.repetitionPenalty, "Repetition penalty");
  range("sampling.maxTokens", sampling.maxTokens, LIMITS.maxTokens, "Max tokens", true);
  if (!e["sampling.maxTokens"] && isInt(c) && sampling.maxTokens >= c) {
    e["sampling.maxTokens"] = "Max tokens must be smaller than the context length.";
  }
  if (sampling.seed !== null) range("sampling.seed", sampling.seed, LIMITS.seed, "Seed", true);
  if (!BACKEND_NAME.test(s.backend)) {
    e.backend = "Backend must be auto, host, or mlx-cpu / mlx-gpu with -f32, -f16 or -bf16.";
  }
  const disk = s.diskCacheMib;
  if (!isInt(disk) || disk < LIMITS.diskCacheMib.min || disk > LIMITS.diskCacheMib.max) {
    e.diskCacheMib = "Disk space for saved caches must be a whole number of MiB from 0 to 1048576 (0 keeps none).";
  }
  return e;
}

/** True when validateSettings found nothing. */
export const isValid = (errors: object) => Object.keys(errors).length === 0;

/** Parses a number input; "" → null, junk → NaN (so validation reports it). */
export function parseNumberInput(raw: string): number | null {
  const t = raw.trim();
  if (t === "") return null;
  return Number(t);
}

export type RepoIdResult = { ok: true; repoId: string } | { ok: false; error: string };

const PART = /^[A-Za-z0-9](?:[A-Za-z0-9._-]*[A-Za-z0-9])?$/;

/**
 * Validates a Hugging Face repo id `owner/name` (also accepts a pasted hub URL). Each part:
 * letters, digits, `-`, `_`, `.`; starts and ends with a letter or digit; no `--` or `..`;
 * at most 96 characters.
 */
export function parseRepoId(input: string): RepoIdResult {
  let s = input.trim();
  const url = s.match(/^https?:\/\/(?:www\.)?huggingface\.co\/([^?#]+)/i);
  if (url) s = url[1]!.split("/").slice(0, 2).join("/");
  if (!s) return { ok: false, error: "Enter a model repository as owner/name, e.g. mlx-community/Llama-3.2-3B-Instruct-4bit." };
  const parts = s.split("/");
  if (parts.length !== 2) return { ok: false, error: "Use the form owner/name, e.g. mlx-community/Qwen3-8B-4bit." };
  for (const [i, p] of parts.entries()) {
    const what = i === 0 ? "owner" : "name";
    if (!p) return { ok: false, error: `The ${what} is missing: use owner/name.` };
    if (p.length > 96) return { ok: false, error: `The ${what} is longer than 96 characters.` };
    if (!PART.test(p) || p.includes("--") || p.includes("..")) {
      return { ok: false, error: `The ${what} "${p}" may only use letters, digits, "-", "_" and ".", and must start and end with a letter or digit.` };
    }
  }
  return { ok: true, repoId: `${parts[0]}/${parts[1]}` };
}

/** Validates a server port; returns an error message or null. */
export function validatePort(port: number | null): string | null {
  if (port == null || !Number.isInteger(port) || port < LIMITS.port.min || port > LIMITS.port.max) {
    return `Port must be a whole number from ${LIMITS.port.min} to ${LIMITS.port.max}.`;
  }
  return null;
}
