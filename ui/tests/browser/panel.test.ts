import { afterEach, describe, expect, it } from "vitest";
import type { StatsSnapshot } from "../../src/api/types";
import { openApp, tid, useBrowser, type AppPage } from "./harness";

const env = useBrowser();
let app: AppPage | null = null;
afterEach(async () => {
  if (app) {
    expect(app.problems.errors).toEqual([]);
    expect(app.problems.csp).toEqual([]);
    await app.close();
  }
  app = null;
});

const MiB = 1024 * 1024;

function snapshot(t: number, patch: Partial<StatsSnapshot>): StatsSnapshot {
  return {
    timestampMs: t,
    phase: "decode",
    chatId: "chat-moby",
    device: "gpu",
    deviceName: "Apple silicon GPU (Metal)",
    backend: "mlx-gpu-f16",
    backendName: "MLX on the GPU, float16",
    cache: { mode: "kivi", kBits: 2, vBits: 2, groupSize: 32, residualLength: 128, sinks: 0, rotation: "none" },
    contextLength: 8192,
    tokens: 1000,
    quantizedTokens: 900,
    sinkTokens: 0,
    residualTokens: 100,
    // The engine's window holds at most R + G - 1 tokens.
    residualCapacity: 159,
    tokensUntilFlush: 59,
    kvFp16Bytes: 100 * MiB,
    kvHeldBytes: 20 * MiB,
    windowLayers: 0,
    windowTokens: 0,
    kvWindowHeldBytes: 0,
    decodeTokensPerSec: 31.4,
    prefillTokensPerSec: 1520,
    ttftMs: 287,
    processMemoryBytes: 2048 * MiB,
    systemMemoryUsedBytes: 8192 * MiB,
    systemMemoryTotalBytes: 16384 * MiB,
    deviceMemoryBytes: 900 * MiB,
    diskCache: null,
    ...patch,
  };
}

const text = (app: AppPage, id: string) => app.page.locator(tid(id)).textContent();

describe("live panel", () => {
  it("shows what stats events say: bytes, ratio, residual gauge, speeds, memory", async () => {
    app = await openApp(env.browser, env.url);
    const { page } = app;
    await page.evaluate(() => {
      window.__kiviMock.autoStats = false;
    });
    await page.locator(tid("live-panel")).waitFor();
    const t0 = Date.now() + 10_000;
    await page.evaluate((s) => window.__kiviMock.emit("stats", s), snapshot(t0, {}));
    await page.waitForFunction(() => document.querySelector('[data-testid="stat-held-bytes"]')?.textContent === "20.0 MiB");
    expect(await text(app, "stat-fp16-bytes")).toBe("100 MiB");
    expect(await text(app, "stat-ratio")).toBe("5.00×");
    expect(await text(app, "stat-saved")).toBe("80% less memory");
    expect(await text(app, "residual-text")).toBe("100 / 159 tokens in full precision");
    expect(await text(app, "residual-flush")).toBe("59 more before the next flush");
    // No sinks configured: no sinks segment.
    expect(await page.locator(tid("residual-sinks")).count()).toBe(0);
    expect(await page.locator(tid("stat-sinks")).count()).toBe(0);
    expect(await page.getAttribute(tid("residual-meter"), "aria-valuenow")).toBe("63");
    expect(await text(app, "stat-decode")).toBe("31.4 tok/s");
    expect(await text(app, "stat-prefill")).toBe("1520 tok/s");
    expect(await text(app, "stat-ttft")).toBe("287 ms");
    expect(await text(app, "stat-process-mem")).toBe("2.00 GiB");
    expect(await text(app, "stat-system-mem")).toBe("8.00 GiB / 16.0 GiB");
    expect(await text(app, "stat-device-mem")).toBe("900 MiB");
    expect(await text(app, "stat-device")).toContain("MLX · GPU · f16");
    expect(await text(app, "stat-backend")).toBe("MLX on the GPU, float16 · Apple silicon GPU (Metal)");
    expect(await text(app, "stat-phase")).toContain("Generating");
    expect(await text(app, "stat-tokens")).toBe("1,000 / 8,192 tokens");
    const samples0 = Number(await page.getAttribute(tid("kv-chart"), "data-samples"));

    // A flush: the window drops back to R, held bytes grow less than fp16 bytes.
    await page.evaluate((s) => window.__kiviMock.emit("stats", s), snapshot(t0 + 200, { tokens: 1060, quantizedTokens: 932, residualTokens: 128, tokensUntilFlush: 31, kvFp16Bytes: 106 * MiB, kvHeldBytes: 20.5 * MiB }));
    await page.waitForFunction(() => document.querySelector('[data-testid="stat-held-bytes"]')?.textContent === "20.5 MiB");
    expect(await text(app, "stat-fp16-bytes")).toBe("106 MiB");
    expect(await text(app, "stat-ratio")).toBe("5.17×");
    expect(await text(app, "residual-text")).toBe("128 / 159 tokens in full precision");
    expect(await text(app, "residual-flush")).toBe("31 more before the next flush");
    expect(await page.getAttribute(tid("residual-meter"), "aria-valuenow")).toBe("81");
    expect(Number(await page.getAttribute(tid("kv-chart"), "data-samples"))).toBe(samples0 + 1);
    expect(await page.getAttribute(tid("kv-chart"), "aria-label")).toMatch(/20.5 MiB held, 106 MiB in fp16, ratio 5.17×/);
    // A model without window layers shows no window-layer line.
    expect(await page.locator(tid("stat-window-layers")).count()).toBe(0);

    // The canvas really has something drawn on it.
    const painted = await page.evaluate(() => {
      const c = document.querySelector('[data-testid="kv-chart"]') as HTMLCanvasElement;
      const d = c.getContext("2d")!.getImageData(0, 0, c.width, c.height).data;
      let n = 0;
      for (let i = 3; i < d.length; i += 4) if (d[i]! > 0) n++;
      return n;
    });
    expect(painted).toBeGreaterThan(500);
  });

  it("shows a model's sliding-window layers apart from the layers the setting quantizes", async () => {
    app = await openApp(env.browser, env.url);
    const { page } = app;
    await page.evaluate(() => {
      window.__kiviMock.autoStats = false;
    });
    // Gemma 3 270M after 1,000 tokens: 15 window layers of 512 tokens (767 held each).
    await page.evaluate(
      (s) => window.__kiviMock.emit("stats", s),
      snapshot(Date.now() + 10_000, { windowLayers: 15, windowTokens: 767, kvWindowHeldBytes: 11.2 * MiB, kvHeldBytes: 12 * MiB }),
    );
    await page.waitForSelector(tid("stat-window-layers"));
    expect(await text(app, "stat-window-layers")).toBe("15 window layers · 767 tokens each11.2 MiB of the held bytes");
    expect(await text(app, "stat-held-bytes")).toBe("12.0 MiB");
  });

  it("explains full precision mode (no residual window)", async () => {
    app = await openApp(env.browser, env.url);
    const { page } = app;
    await page.evaluate(() => {
      window.__kiviMock.autoStats = false;
    });
    const fp16 = { mode: "fp16" as const, kBits: 2 as const, vBits: 2 as const, groupSize: 32 as const, residualLength: 128, sinks: 4 as const, rotation: "both" as const };
    await page.evaluate(
      (s) => window.__kiviMock.emit("stats", s),
      snapshot(Date.now() + 10_000, { cache: fp16, quantizedTokens: 0, residualTokens: 1000, residualCapacity: 0, tokensUntilFlush: null, kvFp16Bytes: 100 * MiB, kvHeldBytes: 100 * MiB }),
    );
    await page.waitForSelector(`${tid("residual-gauge")}[data-mode="fp16"]`);
    expect(await text(app, "residual-text")).toMatch(/Full precision/);
    expect(await text(app, "stat-ratio")).toBe("1.00×");
    expect(await text(app, "stat-cache-config")).toBe("Full precision");
    // fp16 ignores KIVI+'s sinks: no sinks segment.
    expect(await page.locator(tid("stat-sinks")).count()).toBe(0);
  });

  it("shows KIVI+ sinks as their own segment beside the window, with the engine's figures", async () => {
    app = await openApp(env.browser, env.url);
    const { page } = app;
    await page.evaluate(() => {
      window.__kiviMock.autoStats = false;
    });
    const t0 = Date.now() + 10_000;
    const plus = { mode: "kivi" as const, kBits: 2 as const, vBits: 2 as const, groupSize: 32 as const, residualLength: 128, sinks: 4 as const, rotation: "both" as const };
    // The engine after 1000 tokens with 4 sinks: 864 quantized after them, 132 in the window.
    await page.evaluate(
      (s) => window.__kiviMock.emit("stats", s),
      snapshot(t0, { cache: plus, quantizedTokens: 864, sinkTokens: 4, residualTokens: 132, residualCapacity: 159, tokensUntilFlush: 27 }),
    );
    await page.waitForFunction(() => document.querySelector('[data-testid="residual-sinks"]')?.textContent === "4 sinks");
    expect(await text(app, "stat-cache-config")).toBe("KIVI K2 V2 · G32 · R128 · S4 · K+V rotated");
    expect(await text(app, "residual-text")).toBe("132 / 159 tokens in full precision");
    expect(await text(app, "residual-flush")).toBe("27 more before the next flush");
    expect(await text(app, "stat-quantized")).toBe("864 quantized");
    expect(await text(app, "stat-sinks")).toBe("4 sinks");
    expect(await text(app, "stat-window")).toBe("132 full precision");
    expect(await text(app, "stat-tokens")).toBe("1,000 / 8,192 tokens");

    // A full window: the next token flushes.
    await page.evaluate(
      (s) => window.__kiviMock.emit("stats", s),
      snapshot(t0 + 200, { cache: plus, tokens: 1027, quantizedTokens: 864, sinkTokens: 4, residualTokens: 159, residualCapacity: 159, tokensUntilFlush: 0 }),
    );
    await page.waitForFunction(() => document.querySelector('[data-testid="residual-flush"]')?.textContent === "the next token flushes");
    expect(await text(app, "residual-text")).toBe("159 / 159 tokens in full precision");
  });

  it("shows the mock back end's sinks after saving KIVI+ settings and answering", async () => {
    app = await openApp(env.browser, env.url, { query: { scenario: "empty" } });
    const { page } = app;
    await page.evaluate(() => {
      window.__kiviMock.tokenDelayMs = 5;
    });
    await page.click(tid("nav-settings"));
    await page.click(tid("sinks-16"));
    await page.click(tid("rotation-both"));
    await page.click(tid("settings-save"));
    await page.waitForFunction(() => window.__kiviMock.settings().cache.sinks === 16);
    await page.click(tid("nav-chat"));
    await page.fill(tid("composer-input"), "Go");
    await page.keyboard.press("Enter");
    await page.waitForFunction(() => document.querySelector('[data-testid="message-assistant"]')?.getAttribute("data-status") === "complete", undefined, { timeout: 30_000 });
    await page.waitForFunction(() => document.querySelector('[data-testid="stat-sinks"]')?.textContent === "16 sinks");
    // What the panel shows is what the back end sent, as it is.
    await page.evaluate(() => {
      window.__kiviMock.autoStats = false;
    });
    const snap = await page.evaluate(() => window.__kiviMock.snapshot());
    await page.evaluate((s) => window.__kiviMock.emit("stats", { ...s, timestampMs: Date.now() + 10_000 }), snap);
    await page.waitForFunction((q) => document.querySelector('[data-testid="stat-quantized"]')?.textContent === q, `${snap.quantizedTokens.toLocaleString("en-US")} quantized`);
    expect(snap.sinkTokens).toBe(16);
    expect(snap.residualCapacity).toBe(128 + 32 - 1);
    expect(snap.quantizedTokens + snap.sinkTokens + snap.residualTokens).toBe(snap.tokens);
    expect(await text(app, "residual-sinks")).toBe("16 sinks");
    expect(await text(app, "residual-text")).toBe(`${snap.residualTokens} / 159 tokens in full precision`);
    expect(await text(app, "stat-cache-config")).toMatch(/· S16 · K\+V rotated/);
  });

  it("says when the chat's cache was restored from or saved to disk", async () => {
    app = await openApp(env.browser, env.url);
    const { page } = app;
    await page.evaluate(() => {
      window.__kiviMock.autoStats = false;
    });
    const t0 = Date.now() + 10_000;
    // No save or read since the app started: no line.
    await page.evaluate((s) => window.__kiviMock.emit("stats", s), snapshot(t0, { diskCache: null }));
    await page.waitForFunction(() => document.querySelector('[data-testid="stat-held-bytes"]')?.textContent === "20.0 MiB");
    expect(await page.locator(tid("disk-cache-line")).count()).toBe(0);

    // Opened after a restart: the cache was read back from disk.
    await page.evaluate(
      (s) => window.__kiviMock.emit("stats", s),
      snapshot(t0 + 100, { phase: "idle", diskCache: { action: "restored", bytes: 12.3 * MiB, tokens: 8474, seconds: 0.2 } }),
    );
    await page.locator(tid("disk-cache-line")).waitFor();
    expect(await text(app, "disk-cache-line")).toBe("Restored from disk · 12.3 MiB · 200 ms");
    expect(await page.getAttribute(tid("disk-cache-line"), "data-action")).toBe("restored");
    expect(await page.getAttribute(tid("disk-cache-line"), "title")).toMatch(/^8,474 tokens\. .*without re-reading the documents/);

    // Later written again when the chat went idle.
    await page.evaluate(
      (s) => window.__kiviMock.emit("stats", s),
      snapshot(t0 + 200, { phase: "idle", diskCache: { action: "saved", bytes: 12.5 * MiB, tokens: 8600, seconds: 0.05 } }),
    );
    await page.waitForFunction(() => document.querySelector('[data-testid="disk-cache-line"]')?.getAttribute("data-action") === "saved");
    expect(await text(app, "disk-cache-line")).toBe("Saved to disk · 12.5 MiB · 50 ms");

    // Another chat without a file: the line goes.
    await page.evaluate((s) => window.__kiviMock.emit("stats", s), snapshot(t0 + 300, { chatId: "chat-rust", diskCache: null }));
    await page.waitForSelector(tid("disk-cache-line"), { state: "detached" });
  });

  it("shows the mock back end's restored cache, then its save after an answer", async () => {
    app = await openApp(env.browser, env.url);
    const { page } = app;
    await page.evaluate(() => {
      window.__kiviMock.tokenDelayMs = 5;
    });
    const snap = await page.evaluate(() => window.__kiviMock.snapshot());
    expect(snap.diskCache?.action).toBe("restored");
    await page.waitForFunction(() => document.querySelector('[data-testid="disk-cache-line"]')?.getAttribute("data-action") === "restored");
    expect(await text(app, "disk-cache-line")).toMatch(/^Restored from disk · [\d.]+ [KM]iB · 210 ms$/);
    await page.fill(tid("composer-input"), "Go on");
    await page.keyboard.press("Enter");
    await page.waitForFunction(() => document.querySelector('[data-testid="disk-cache-line"]')?.getAttribute("data-action") === "saved", undefined, { timeout: 30_000 });
    expect(await text(app, "disk-cache-line")).toMatch(/^Saved to disk · [\d.]+ [KM]iB · [\d.]+ ms$/);
  });

  it("stays responsive under a burst of events and shows the latest one", async () => {
    app = await openApp(env.browser, env.url);
    const { page } = app;
    await page.evaluate(() => {
      window.__kiviMock.autoStats = false;
    });
    const t0 = Date.now() + 10_000;
    const burst = Array.from({ length: 400 }, (_, i) => snapshot(t0 + i * 10, { tokens: 1000 + i, kvFp16Bytes: (100 + i) * MiB, kvHeldBytes: 20 * MiB + i * 4096 }));
    const ms = await page.evaluate(async (list) => {
      const start = performance.now();
      for (const s of list) void window.__kiviMock.emit("stats", s);
      await new Promise((r) => requestAnimationFrame(() => r(null)));
      return performance.now() - start;
    }, burst);
    expect(ms).toBeLessThan(3000);
    await page.waitForFunction(() => document.querySelector('[data-testid="stat-fp16-bytes"]')?.textContent === "499 MiB");
    // Still usable: typing works right away.
    await page.fill(tid("composer-input"), "still responsive");
    expect(await page.inputValue(tid("composer-input"))).toBe("still responsive");
  });

  it("updates while a real (mocked) generation streams", async () => {
    app = await openApp(env.browser, env.url, { query: { scenario: "empty" } });
    const { page } = app;
    await page.evaluate(() => {
      window.__kiviMock.tokenDelayMs = 40;
    });
    await page.fill(tid("composer-input"), "Go");
    await page.keyboard.press("Enter");
    await page.waitForFunction(() => document.querySelector('[data-testid="stat-phase"]')?.textContent?.includes("Generating"));
    const first = await text(app, "stat-fp16-bytes");
    await page.waitForFunction((f) => document.querySelector('[data-testid="stat-fp16-bytes"]')?.textContent !== f, first);
    await page.keyboard.press("Escape");
  });
});
