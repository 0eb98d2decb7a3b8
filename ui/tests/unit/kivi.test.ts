import { describe, expect, it } from "vitest";
import { backendLabel, backendShort } from "../../src/lib/backends";
import { cacheLabel, cacheShortLabel, estimatedRatio, residualWindow, sameCache } from "../../src/lib/kivi";
import type { CacheConfig } from "../../src/api/types";

const kivi = (patch: Partial<CacheConfig> = {}): CacheConfig => ({ mode: "kivi", kBits: 2, vBits: 2, groupSize: 32, residualLength: 128, ...patch });

describe("residualWindow (Q(T) = max(0, floor((T - R) / G) * G))", () => {
  it("keeps everything in full precision until R + G tokens", () => {
    expect(residualWindow(0, 128, 32)).toEqual({ quantized: 0, residual: 0, capacity: 160, untilFlush: 160 });
    expect(residualWindow(100, 128, 32)).toEqual({ quantized: 0, residual: 100, capacity: 160, untilFlush: 60 });
    expect(residualWindow(159, 128, 32)).toEqual({ quantized: 0, residual: 159, capacity: 160, untilFlush: 1 });
  });
  it("flushes whole groups", () => {
    expect(residualWindow(160, 128, 32)).toEqual({ quantized: 32, residual: 128, capacity: 160, untilFlush: 32 });
    expect(residualWindow(8474, 128, 32)).toEqual({ quantized: 8320, residual: 154, capacity: 160, untilFlush: 6 });
  });
  it("works with R = 0", () => {
    expect(residualWindow(70, 0, 32)).toEqual({ quantized: 64, residual: 6, capacity: 32, untilFlush: 26 });
  });
  it("always splits T exactly", () => {
    for (let t = 0; t < 600; t += 7) {
      const w = residualWindow(t, 64, 64);
      expect(w.quantized + w.residual).toBe(t);
      expect(w.quantized % 64).toBe(0);
      expect(w.residual).toBeLessThan(w.capacity);
    }
  });
});

describe("labels and estimates", () => {
  it("labels caches", () => {
    expect(cacheLabel(kivi({ vBits: 4 }))).toBe("KIVI K2 V4 · G32 · R128");
    expect(cacheLabel(kivi({ mode: "fp16" }))).toBe("Full precision");
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
    expect(sameCache(null, kivi())).toBe(false);
    expect(sameCache(null, null)).toBe(true);
  });
});

describe("backend names", () => {
  it("shortens the engine's backend names for the panel", () => {
    expect(backendShort("host")).toBe("CPU kernels");
    expect(backendShort("mlx-gpu-f16")).toBe("MLX · GPU · f16");
    expect(backendShort("mlx-cpu-bf16")).toBe("MLX · CPU · bf16");
    expect(backendShort("something-new")).toBe("something-new");
    expect(backendLabel("auto")).toBe("Automatic");
    expect(backendLabel("mlx-cpu")).toBe("mlx-cpu");
  });
});
