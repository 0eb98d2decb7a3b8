import { describe, expect, it } from "vitest";
import type { Settings } from "../../src/api/types";
import { isValid, parseNumberInput, parseRepoId, validatePort, validateSettings } from "../../src/lib/validate";

const base = (): Settings => ({
  cache: { mode: "kivi", kBits: 2, vBits: 4, groupSize: 32, residualLength: 128, sinks: 0, rotation: "none" },
  contextLength: 8192,
  sampling: { temperature: 0.7, topP: 0.9, topK: 40, repetitionPenalty: 1.1, maxTokens: 1024, seed: null },
  backend: "auto",
  diskCacheMib: 2048,
});

const withCache = (patch: Partial<Settings["cache"]>): Settings => ({ ...base(), cache: { ...base().cache, ...patch } });
const withSampling = (patch: Partial<Settings["sampling"]>): Settings => ({ ...base(), sampling: { ...base().sampling, ...patch } });

describe("validateSettings", () => {
  it("accepts the defaults", () => {
    expect(validateSettings(base())).toEqual({});
    expect(isValid(validateSettings(base()))).toBe(true);
  });

  it("allows only 2 or 4 bits for keys and values", () => {
    for (const b of [2, 4]) expect(validateSettings(withCache({ kBits: b as 2, vBits: b as 2 }))).toEqual({});
    for (const b of [0, 1, 3, 8, 16, 2.5]) {
      const e = validateSettings(withCache({ kBits: b as 2, vBits: b as 2 }));
      expect(e["cache.kBits"]).toMatch(/2 or 4/);
      expect(e["cache.vBits"]).toMatch(/2 or 4/);
    }
  });

  it("accepts the backend names the engine parses, and nothing else", () => {
    for (const b of ["auto", "host", "host-f32", "mlx-cpu", "mlx-cpu-f16", "mlx-gpu", "mlx-gpu-bf16"]) {
      expect(validateSettings({ ...base(), backend: b })).toEqual({});
    }
    for (const b of ["", "metal", "host-f16", "mlx-cpu-f64", "MLX-GPU", "cuda"]) {
      expect(validateSettings({ ...base(), backend: b }).backend).toMatch(/auto, host, or mlx-cpu/);
    }
  });

  it("allows group sizes 32, 64, 128 only", () => {
    for (const g of [32, 64, 128]) expect(validateSettings(withCache({ groupSize: g as 32, residualLength: 128 }))).toEqual({});
    expect(validateSettings(withCache({ groupSize: 48 as 32 }))["cache.groupSize"]).toBeDefined();
  });

  it("requires the residual length to be a multiple of the group size", () => {
    const e = validateSettings(withCache({ residualLength: 100 }));
    expect(e["cache.residualLength"]).toMatch(/multiple of the group size \(32\)/);
    expect(e["cache.residualLength"]).toMatch(/96 or 128/);
    expect(validateSettings(withCache({ groupSize: 128, residualLength: 64 }))["cache.residualLength"]).toMatch(/try 128/);
    expect(validateSettings(withCache({ groupSize: 64, residualLength: 192 }))).toEqual({});
    expect(validateSettings(withCache({ residualLength: 0 }))).toEqual({});
  });

  it("checks the residual range, whole numbers and that it stays below the context", () => {
    expect(validateSettings(withCache({ residualLength: -32 }))["cache.residualLength"]).toMatch(/between 0 and 4096/);
    expect(validateSettings(withCache({ residualLength: 4128 }))["cache.residualLength"]).toMatch(/between/);
    expect(validateSettings(withCache({ residualLength: 12.5 }))["cache.residualLength"]).toMatch(/whole number/);
    expect(validateSettings(withCache({ residualLength: Number.NaN }))["cache.residualLength"]).toBeDefined();
    const big = { ...withCache({ residualLength: 1024 }), contextLength: 1024 };
    expect(validateSettings(big)["cache.residualLength"]).toMatch(/smaller than the context/);
  });

  it("allows 0, 4 or 16 sink tokens, with the same message as the back end", () => {
    for (const n of [0, 4, 16] as const) {
      expect(validateSettings(withCache({ sinks: n }))).toEqual({});
      for (const rotation of ["none", "values", "both", "adaptive"] as const) expect(validateSettings(withCache({ sinks: n, rotation }))).toEqual({});
    }
    for (const n of [1, 2, 3, 5, 8, 32, 128, -4, 4.5, Number.NaN]) {
      expect(validateSettings(withCache({ sinks: n as 4 }))["cache.sinks"]).toBe("Sink tokens must be 0, 4 or 16.");
    }
    // Kept and checked in fp16 mode too, like the bits.
    expect(validateSettings(withCache({ mode: "fp16", sinks: 16, rotation: "both" }))).toEqual({});
    expect(validateSettings(withCache({ mode: "fp16", sinks: 5 as 4 }))["cache.sinks"]).toBeDefined();
  });

  it("allows rotation of nothing, values, or keys and values, with the back end's message", () => {
    for (const bad of ["keys", "on", true, false, ""]) {
      expect(validateSettings(withCache({ rotation: bad as "none" }))["cache.rotation"]).toBe("Rotation must be none, values, both or adaptive.");
    }
  });

  it("checks the context length range", () => {
    expect(validateSettings({ ...base(), contextLength: 256 }).contextLength).toBeDefined();
    expect(validateSettings({ ...base(), contextLength: 262_144 }).contextLength).toBeDefined();
    expect(validateSettings({ ...base(), contextLength: 4096.5 }).contextLength).toBeDefined();
    expect(validateSettings({ ...base(), contextLength: 131_072 })).toEqual({});
  });

  it("checks sampling ranges", () => {
    expect(validateSettings(withSampling({ temperature: -0.1 }))["sampling.temperature"]).toBeDefined();
    expect(validateSettings(withSampling({ temperature: 2.01 }))["sampling.temperature"]).toBeDefined();
    expect(validateSettings(withSampling({ temperature: 0 }))).toEqual({});
    expect(validateSettings(withSampling({ topP: 0 }))["sampling.topP"]).toBeDefined();
    expect(validateSettings(withSampling({ topP: 1.01 }))["sampling.topP"]).toBeDefined();
    expect(validateSettings(withSampling({ topP: 1 }))).toEqual({});
    expect(validateSettings(withSampling({ topK: 1001 }))["sampling.topK"]).toBeDefined();
    expect(validateSettings(withSampling({ topK: 2.5 }))["sampling.topK"]).toBeDefined();
    expect(validateSettings(withSampling({ topK: 0 }))).toEqual({});
    expect(validateSettings(withSampling({ repetitionPenalty: 0.9 }))["sampling.repetitionPenalty"]).toBeDefined();
    expect(validateSettings(withSampling({ repetitionPenalty: 2.5 }))["sampling.repetitionPenalty"]).toBeDefined();
    expect(validateSettings(withSampling({ maxTokens: 0 }))["sampling.maxTokens"]).toBeDefined();
    expect(validateSettings(withSampling({ maxTokens: 8192 }))["sampling.maxTokens"]).toMatch(/smaller than the context/);
    expect(validateSettings(withSampling({ seed: -1 }))["sampling.seed"]).toBeDefined();
    expect(validateSettings(withSampling({ seed: 2 ** 32 }))["sampling.seed"]).toBeDefined();
    expect(validateSettings(withSampling({ seed: 42 }))).toEqual({});
  });

  it("allows 0..=1048576 whole MiB of disk for saved caches, with the same message as the back end", () => {
    const msg = "Disk space for saved caches must be a whole number of MiB from 0 to 1048576 (0 keeps none).";
    for (const n of [0, 1, 2048, 1_048_576]) expect(validateSettings({ ...base(), diskCacheMib: n })).toEqual({});
    for (const n of [-1, 1_048_577, 2048.5, Number.NaN, Number.POSITIVE_INFINITY]) {
      expect(validateSettings({ ...base(), diskCacheMib: n })).toEqual({ diskCacheMib: msg });
    }
    // An old settings object without the field (the back end reads it as 2048) is not accepted as is.
    const { diskCacheMib: _, ...old } = base();
    expect(validateSettings(old as Settings).diskCacheMib).toBe(msg);
  });

  it("parses number inputs", () => {
    expect(parseNumberInput("")).toBeNull();
    expect(parseNumberInput(" 128 ")).toBe(128);
    expect(parseNumberInput("abc")).toBeNaN();
  });
});

describe("parseRepoId", () => {
  it("accepts owner/name ids", () => {
    for (const id of ["mlx-community/Llama-3.2-3B-Instruct-4bit", "mlx-community/Qwen3-8B-4bit", "mlx-community/Qwen3-14B-4bit", "a/b", "Org_1/model.v2"]) {
      expect(parseRepoId(id)).toEqual({ ok: true, repoId: id });
    }
  });

  it("trims and accepts a pasted hub URL", () => {
    expect(parseRepoId("  mlx-community/x-4bit ")).toEqual({ ok: true, repoId: "mlx-community/x-4bit" });
    expect(parseRepoId("https://huggingface.co/mlx-community/Llama-3.2-3B-Instruct-4bit/tree/main")).toEqual({ ok: true, repoId: "mlx-community/Llama-3.2-3B-Instruct-4bit" });
  });

  it("rejects malformed ids with a helpful message", () => {
    const bad = ["", "llama", "a/b/c", "/name", "owner/", "own er/name", "owner/na$me", "-owner/name", "owner/name-", "owner/na..me", "owner/na--me", ".owner/x", `${"a".repeat(97)}/x`, "owner/name?"];
    for (const id of bad) {
      const r = parseRepoId(id);
      expect(r.ok, id).toBe(false);
      if (!r.ok) expect(r.error.length).toBeGreaterThan(10);
    }
  });
});

describe("validatePort", () => {
  it("accepts 1024..65535 integers", () => {
    expect(validatePort(8080)).toBeNull();
    expect(validatePort(1024)).toBeNull();
    expect(validatePort(65535)).toBeNull();
    expect(validatePort(80)).toMatch(/1024/);
    expect(validatePort(70000)).toBeDefined();
    expect(validatePort(null)).toBeDefined();
    expect(validatePort(8080.5)).toBeDefined();
  });
});
