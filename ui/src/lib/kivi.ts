/** KIVI cache arithmetic the UI needs (the back end is the authority; see DESIGN.md). */
import type { CacheConfig } from "../api/types";

export interface ResidualWindow {
  /** Tokens stored quantized: max(0, floor((T - R) / G) * G). */
  quantized: number;
  /** Tokens in the full-precision window: T - quantized. */
  residual: number;
  /** R + G: the window flushes one group of G tokens when it reaches this. */
  capacity: number;
  /** Tokens to append before the next flush. */
  untilFlush: number;
}

/** The residual window after T tokens with window R and group G (R a multiple of G). */
export function residualWindow(tokens: number, residualLength: number, groupSize: number): ResidualWindow {
  const t = Math.max(0, Math.floor(tokens));
  const quantized = Math.max(0, Math.floor((t - residualLength) / groupSize) * groupSize);
  const residual = t - quantized;
  const capacity = residualLength + groupSize;
  return { quantized, residual, capacity, untilFlush: capacity - residual };
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

/** "KIVI K2 V4 · G32 · R128" or "Full precision". */
export function cacheLabel(config: CacheConfig | null | undefined): string {
  if (!config) return "No cache";
  if (config.mode === "fp16") return "Full precision";
  return `KIVI K${config.kBits} V${config.vBits} · G${config.groupSize} · R${config.residualLength}`;
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
  return a.kBits === b.kBits && a.vBits === b.vBits && a.groupSize === b.groupSize && a.residualLength === b.residualLength;
}
