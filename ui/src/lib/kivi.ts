/** KIVI cache arithmetic the UI needs (the back end is the authority; see IPC.md). */
import type { CacheConfig } from "../api/types";

/**
 * How the engine splits a KIVI cache's tokens. The live panel shows the engine's own figures
 * (`StatsSnapshot`); this follows the same definitions for the mock back end and for
 * estimates before any statistics arrive.
 */
export interface ResidualWindow {
  /** KIVI+ attention sinks held: S' = min(T, S), the first tokens, in full precision for good. */
  sinks: number;
  /** Tokens stored quantized: max(0, floor((T - S' - R) / G) * G). */
  quantized: number;
  /** Tokens in the full-precision window, sinks not counted: T - S' - quantized. */
  residual: number;
  /** R + G - 1: the most tokens the window holds; one more and its oldest G are quantized. */
  capacity: number;
  /** Tokens that can still enter the window before the next flush: capacity - residual
   * (0 = the next token flushes). */
  untilFlush: number;
}

/** The window after T tokens with window R, group G (R a multiple of G) and S sinks. */
export function residualWindow(tokens: number, residualLength: number, groupSize: number, sinks = 0): ResidualWindow {
  const t = Math.max(0, Math.floor(tokens));
  const held = Math.min(t, Math.max(0, Math.floor(sinks)));
  const quantized = Math.max(0, Math.floor((t - held - residualLength) / groupSize) * groupSize);
  const residual = t - held - quantized;
  const capacity = residualLength + groupSize - 1;
  return { sinks: held, quantized, residual, capacity, untilFlush: capacity - residual };
}

/**
 * Rough ratio fp16 / KIVI for the quantized part, per element: b bits of data plus a scale
 * and a zero per group of G (`scaleBytes` each: 2, the engine stores them in float16).
 * The residual window is not counted; the live panel shows the measured numbers.
 */
export function estimatedRatio(config: CacheConfig, scaleBytes = 2): number {
  if (config.mode === "fp16") return 1;
  const perElement = (bits: number) => bits + (2 * scaleBytes * 8) / config.groupSize;
  const avgBits = (perElement(config.kBits) + perElement(config.vBits)) / 2;
  return 16 / avgBits;
}

/** "KIVI K2 V4 · G32 · R128", with KIVI+ " · S4" (sinks) and " · V rotated", " · K+V rotated"
 * or " · rotated per head";
 * or "Full precision". */
export function cacheLabel(config: CacheConfig | null | undefined): string {
  if (!config) return "No cache";
  if (config.mode === "fp16") return "Full precision";
  const sinks = config.sinks > 0 ? ` · S${config.sinks}` : "";
  const rotated = { none: "", values: " · V rotated", both: " · K+V rotated", adaptive: " · rotated per head" }[config.rotation];
  return `KIVI K${config.kBits} V${config.vBits} · G${config.groupSize} · R${config.residualLength}${sinks}${rotated}`;
}

/** Short form for badges: "K2V4" or "FP16". */
export function cacheShortLabel(config: CacheConfig | null | undefined): string {
  if (!config) return "—";
  return config.mode === "fp16" ? "FP16" : `K${config.kBits}V${config.vBits}`;
}

/** True when two configs build the same cache (fp16 ignores the KIVI fields). */
export function sameCache(a: CacheConfig | null | undefined, b: CacheConfig | null | undefined): boolean {
  if (!a || !b) return a === b;
  if (a.mode !== b.mode) return false;
  if (a.mode === "fp16") return true;
  return (
    a.kBits === b.kBits &&
    a.vBits === b.vBits &&
    a.groupSize === b.groupSize &&
    a.residualLength === b.residualLength &&
    a.sinks === b.sinks &&
    a.rotation === b.rotation
  );
}
