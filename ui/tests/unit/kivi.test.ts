import { describe, expect, it } from "vitest";
import { backendLabel, backendShort } from "../../src/lib/backends";
import { cacheLabel, cacheShortLabel, estimatedRatio, residualWindow, sameCache } from "../../src/lib/kivi";
import type { CacheConfig } from "../../src/api/types";

const kivi = (patch: Partial<CacheConfig> = {}): CacheConfig => ({ mode: "kivi", kBits: 2, vBits: 2, groupSize: 32, residualLength: 128, sinks: 0, rotation: "none", ...patch });

describe("residualWindow follows the engine (capacity R + G - 1, Q = max(0, floor((T - S' - R) / G) * G))", () => {
  it("keeps everything in full precision while the window holds at most R + G - 1 tokens", () => {
    expect(residualWindow(0, 128, 32)).toEqual({ sinks: 0, quantized: 0, residual: 0, capacity: 159, untilFlush: 159 });
    expect(residualWindow(100, 128, 32)).toEqual({ sinks: 0, quantized: 0, residual: 100, capacity: 159, untilFlush: 59 });
    // Full: the next token flushes.
    expect(residualWindow(159, 128, 32)).toEqual({ sinks: 0, quantized: 0, residual: 159, capacity: 159, untilFlush: 0 });
  });
  it("flushes whole groups", () => {
    expect(residualWindow(160, 128, 32)).toEqual({ sinks: 0, quantized: 32, residual: 128, capacity: 159, untilFlush: 31 });
    expect(residualWindow(8474, 128, 32)).toEqual({ sinks: 0, quantized: 8320, residual: 154, capacity: 159, untilFlush: 5 });
  });
  it("works with R = 0", () => {
    expect(residualWindow(70, 0, 32)).toEqual({ sinks: 0, quantized: 64, residual: 6, capacity: 31, untilFlush: 25 });
  });
  it("keeps the sinks apart: groups are quantized after them", () => {
    // Fewer tokens than sinks: all of them are sinks.
    expect(residualWindow(3, 128, 32, 4)).toEqual({ sinks: 3, quantized: 0, residual: 0, capacity: 159, untilFlush: 159 });
    expect(residualWindow(163, 128, 32, 4)).toEqual({ sinks: 4, quantized: 0, residual: 159, capacity: 159, untilFlush: 0 });
    expect(residualWindow(164, 128, 32, 4)).toEqual({ sinks: 4, quantized: 32, residual: 128, capacity: 159, untilFlush: 31 });
    // The engine's figures for 300 tokens with 4 sinks (src-tauri stats tests use the same).
    expect(residualWindow(300, 128, 32, 4)).toEqual({ sinks: 4, quantized: 160, residual: 136, capacity: 159, untilFlush: 23 });
    expect(residualWindow(100, 32, 32, 4)).toEqual({ sinks: 4, quantized: 64, residual: 32, capacity: 63, untilFlush: 31 });
  });
  it("always splits T exactly", () => {
    for (const sinks of [0, 4, 16]) {
      for (let t = 0; t < 600; t += 7) {
        const w = residualWindow(t, 64, 64, sinks);
        expect(w.sinks + w.quantized + w.residual).toBe(t);
        expect(w.sinks).toBe(Math.min(t, sinks));
        expect(w.quantized % 64).toBe(0);
        expect(w.residual).toBeLessThanOrEqual(w.capacity);
        expect(w.untilFlush).toBe(w.capacity - w.residual);
      }
    }
  });
});

describe("labels and estimates", () => {
  it("labels caches", () => {
    expect(cacheLabel(kivi({ vBits: 4 }))).toBe("KIVI K2 V4 · G32 · R128");
    expect(cacheLabel(kivi({ sinks: 4 }))).toBe("KIVI K2 V2 · G32 · R128 · S4");
    expect(cacheLabel(kivi({ rotation: "both" }))).toBe("KIVI K2 V2 · G32 · R128 · K+V rotated");
    expect(cacheLabel(kivi({ sinks: 4, rotation: "values" }))).toBe("KIVI K2 V2 · G32 · R128 · S4 · V rotated");
    expect(cacheLabel(kivi({ sinks: 16, rotation: "both" }))).toBe("KIVI K2 V2 · G32 · R128 · S16 · K+V rotated");
    expect(cacheLabel(kivi({ sinks: 4, rotation: "adaptive" }))).toBe("KIVI K2 V2 · G32 · R128 · S4 · rotated per head");
    expect(cacheLabel(kivi({ mode: "fp16" }))).toBe("Full precision");
    expect(cacheLabel(kivi({ mode: "fp16", sinks: 4, rotation: "both" }))).toBe("Full precision");
    expect(cacheLabel(null)).toBe("No cache");
    expect(cacheShortLabel(kivi())).toBe("K2V2");
    expect(cacheShortLabel(kivi({ mode: "fp16" }))).toBe("FP16");
  });
  it("estimates the compression of the quantized part", () => {
    expect(estimatedRatio(kivi())).toBeCloseTo(16 / 3, 5);
    expect(estimatedRatio(kivi({ kBits: 4, vBits: 4, groupSize: 128 }))).toBeCloseTo(16 / 4.25, 5);
    expect(estimatedRatio(kivi({ mode: "fp16" }))).toBe(1);
  });
  it("compares configs, ignoring KIVI fields in fp16 mode", () => {
    expect(sameCache(kivi(), kivi())).toBe(true);
    expect(sameCache(kivi(), kivi({ residualLength: 96 }))).toBe(false);
    expect(sameCache(kivi({ mode: "fp16", kBits: 4 }), kivi({ mode: "fp16" }))).toBe(true);
    // KIVI+: sinks and rotation build another cache; fp16 ignores them.
    expect(sameCache(kivi(), kivi({ sinks: 4 }))).toBe(false);
    expect(sameCache(kivi(), kivi({ rotation: "both" }))).toBe(false);
    expect(sameCache(kivi({ rotation: "values" }), kivi({ rotation: "both" }))).toBe(false);
    expect(sameCache(kivi({ rotation: "adaptive" }), kivi({ rotation: "both" }))).toBe(false);
    expect(sameCache(kivi({ sinks: 16, rotation: "both" }), kivi({ sinks: 16, rotation: "both" }))).toBe(true);
    expect(sameCache(kivi({ mode: "fp16", sinks: 16, rotation: "both" }), kivi({ mode: "fp16" }))).toBe(true);
    expect(sameCache(null, kivi())).toBe(false);
    expect(sameCache(null, null)).toBe(true);
  });
});

describe("backend names", () => {
  it("shortens the engine's backend names for the panel", () => {
    expect(backendShort("host")).toBe("CPU kernels");
    expect(backendShort("host-f32")).toBe("CPU kernels · f32");
    expect(backendShort("mlx-gpu-f16")).toBe("MLX · GPU · f16");
    expect(backendShort("mlx-cpu-bf16")).toBe("MLX · CPU · bf16");
    expect(backendShort("something-new")).toBe("something-new");
    expect(backendLabel("auto")).toBe("Automatic");
    expect(backendLabel("mlx-cpu")).toBe("mlx-cpu");
  });
});
