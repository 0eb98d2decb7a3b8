import { afterEach, describe, expect, it } from "vitest";
import { mockCalls, openApp, tid, useBrowser, type AppPage } from "./harness";

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

const text = (page: AppPage["page"], id: string) => page.locator(tid(id)).textContent();

describe("settings", () => {
  it("rejects a residual length that is not a multiple of the group size, and saves a good one", async () => {
    app = await openApp(env.browser, env.url);
    const { page } = app;
    await page.click(tid("nav-settings"));
    await page.locator(tid("settings-view")).waitFor();

    await page.fill(tid("residual-input"), "100");
    const error = page.locator(tid("residual-error"));
    await error.waitFor();
    expect(await error.textContent()).toMatch(/multiple of the group size \(32\).*96 or 128/);
    expect(await page.getAttribute(tid("residual-input"), "aria-invalid")).toBe("true");
    await expect(page.locator(tid("settings-save")).isDisabled()).resolves.toBe(true);
    expect(await page.locator(tid("settings-state")).textContent()).toMatch(/Fix the highlighted fields/);

    await page.fill(tid("residual-input"), "96");
    await page.waitForSelector(tid("residual-error"), { state: "detached" });
    // What happens to the conversation is said before saving.
    const notice = page.locator(tid("cache-change-notice"));
    await notice.waitFor();
    expect(await notice.textContent()).toMatch(/new KV cache.*re-read \(prefilled\) with KIVI K2 V2 · G32 · R96 on your next message/);
    expect(await page.locator(tid("settings-save")).textContent()).toBe("Save and reset caches");

    await page.click(tid("settings-save"));
    await page.locator(tid("toast-info")).waitFor();
    expect(await page.locator(tid("toast-info")).textContent()).toMatch(/caches reset/);
    const saved = await page.evaluate(() => window.__kiviMock.settings());
    expect(saved.cache.residualLength).toBe(96);
    await page.waitForSelector(tid("cache-change-notice"), { state: "detached" });
    expect(await page.locator(tid("settings-state")).textContent()).toMatch(/All changes saved/);
  });

  it("fits the context to this machine with the cache being edited", async () => {
    app = await openApp(env.browser, env.url);
    const { page } = app;
    await page.click(tid("nav-settings"));
    await page.locator(tid("settings-view")).waitFor();
    await page.fill(tid("context-input"), "4096");
    await page.click(tid("context-fit"));
    await page.waitForFunction(() => (document.querySelector('[data-testid="context-input"]') as HTMLInputElement).value === "8192");
    expect(await page.locator(".field-hint", { hasText: "Fits this machine" }).textContent()).toMatch(
      /^Fits this machine: 8,192 tokens \(up to .+'s trained context\); their KV cache takes [\d.]+ MiB of 6\.\d+ GiB available with the model\.$/,
    );
    const call = (await mockCalls(page)).find((c) => c.cmd === "fit_context_length");
    expect(call?.args.cache).toEqual(await page.evaluate(() => window.__kiviMock.settings().cache));
    // Nothing is saved until Save.
    expect(await page.evaluate(() => window.__kiviMock.settings().contextLength)).not.toBe(8192);
  });

  it("re-validates when the group size changes, and saves bits and the fp16 switch", async () => {
    app = await openApp(env.browser, env.url);
    const { page } = app;
    await page.click(tid("nav-settings"));
    await page.click(tid("group-64"));
    // 128 is a multiple of 64: still valid.
    expect(await page.locator(tid("residual-error")).count()).toBe(0);
    await page.fill(tid("residual-input"), "96");
    await page.locator(tid("residual-error")).waitFor();
    expect(await page.locator(tid("residual-error")).textContent()).toMatch(/\(64\)/);
    await page.fill(tid("residual-input"), "192");
    await page.click(tid("kbits-4"));
    await page.click(tid("settings-save"));
    await page.locator(tid("toast-info")).waitFor();
    let saved = await page.evaluate(() => window.__kiviMock.settings());
    expect(saved.cache).toEqual({ mode: "kivi", kBits: 4, vBits: 2, groupSize: 64, residualLength: 192, sinks: 0, rotation: "none" });

    await page.click(tid("cache-mode-fp16"));
    await expect(page.locator(tid("kbits-2")).isDisabled()).resolves.toBe(true);
    await page.click(tid("settings-save"));
    await page.waitForFunction(() => window.__kiviMock.settings().cache.mode === "fp16");
    saved = await page.evaluate(() => window.__kiviMock.settings());
    expect(saved.cache.mode).toBe("fp16");
  });

  it("offers KIVI+ sink tokens and Hadamard rotation; saving them resets the caches", async () => {
    app = await openApp(env.browser, env.url);
    const { page } = app;
    await page.click(tid("nav-settings"));
    const cache = page.locator(tid("settings-cache"));
    // Both controls, off by default, each with its one-line explanation.
    for (const n of ["0", "4", "16"]) await page.locator(tid(`sinks-${n}`)).waitFor();
    expect(await page.getAttribute(tid("sinks-0"), "aria-checked")).toBe("true");
    expect(await page.getAttribute(tid("rotation-none"), "aria-checked")).toBe("true");
    expect(await page.getAttribute(tid("rotation"), "role")).toBe("radiogroup");
    expect(await cache.textContent()).toContain("Keep the first tokens of the conversation in full precision: they attract attention from every later token.");
    expect(await cache.textContent()).toContain("Store values (or keys and values) in a rotated basis that spreads outlier channels");
    expect(await page.locator(tid("cache-change-notice")).count()).toBe(0);

    // Sinks alone are a cache change: the notice says so before saving.
    await page.click(tid("sinks-4"));
    expect(await page.getAttribute(tid("sinks-4"), "aria-checked")).toBe("true");
    const notice = page.locator(tid("cache-change-notice"));
    await notice.waitFor();
    expect(await notice.textContent()).toMatch(/new KV cache.*re-read \(prefilled\) with KIVI K2 V2 · G32 · R128 · S4 on your next message/);
    expect(await page.locator(tid("settings-save")).textContent()).toBe("Save and reset caches");
    // Back to none: no change, no notice.
    await page.click(tid("sinks-0"));
    await page.waitForSelector(tid("cache-change-notice"), { state: "detached" });

    // Rotation alone is a cache change too.
    await page.click(tid("rotation-values"));
    expect(await page.getAttribute(tid("rotation-values"), "aria-checked")).toBe("true");
    await notice.waitFor();
    expect(await notice.textContent()).toMatch(/KIVI K2 V2 · G32 · R128 · V rotated/);
    await page.click(tid("rotation-adaptive"));
    expect(await notice.textContent()).toMatch(/KIVI K2 V2 · G32 · R128 · rotated per head/);
    await page.click(tid("rotation-both"));
    expect(await notice.textContent()).toMatch(/KIVI K2 V2 · G32 · R128 · K\+V rotated/);

    await page.click(tid("sinks-16"));
    expect(await page.locator(".cache-pill").textContent()).toBe("KIVI K2 V2 · G32 · R128 · S16 · K+V rotated");
    await page.click(tid("settings-save"));
    await page.locator(tid("toast-info")).waitFor();
    expect(await page.locator(tid("toast-info")).textContent()).toMatch(/caches reset/);
    const update = (await mockCalls(page)).filter((c) => c.cmd === "update_settings").pop();
    expect((update?.args.settings as { cache: unknown }).cache).toEqual({ mode: "kivi", kBits: 2, vBits: 2, groupSize: 32, residualLength: 128, sinks: 16, rotation: "both" });
    let saved = await page.evaluate(() => window.__kiviMock.settings());
    expect([saved.cache.sinks, saved.cache.rotation]).toEqual([16, "both"]);
    await page.waitForSelector(tid("cache-change-notice"), { state: "detached" });

    // fp16 ignores them: both are disabled, like the bits, and keep their values.
    await page.click(tid("cache-mode-fp16"));
    for (const id of ["sinks-0", "sinks-4", "sinks-16", "rotation-none", "rotation-both", "kbits-2"]) {
      await expect(page.locator(tid(id)).isDisabled(), id).resolves.toBe(true);
    }
    expect(await page.getAttribute(tid("sinks-16"), "aria-checked")).toBe("true");
    await page.click(tid("settings-save"));
    await page.waitForFunction(() => window.__kiviMock.settings().cache.mode === "fp16");
    saved = await page.evaluate(() => window.__kiviMock.settings());
    expect([saved.cache.sinks, saved.cache.rotation]).toEqual([16, "both"]);
    await page.click(tid("cache-mode-kivi"));
    await expect(page.locator(tid("rotation-both")).isDisabled()).resolves.toBe(false);
    expect(await page.getAttribute(tid("rotation-both"), "aria-checked")).toBe("true");
  });

  it("switches the backend: the model loads again and the panel names the new one", async () => {
    app = await openApp(env.browser, env.url);
    const { page } = app;
    await page.click(tid("nav-settings"));
    await page.selectOption(tid("backend-select"), "mlx-cpu-f16");
    const notice = page.locator(tid("backend-change-notice"));
    await notice.waitFor();
    expect(await notice.textContent()).toMatch(/loads the model again on MLX on the CPU \(float16\)/);
    await page.click(tid("settings-save"));
    await page.locator(tid("toast-info")).first().waitFor();
    expect(await page.locator(tid("toast-info")).first().textContent()).toMatch(/loading the model again/);
    expect((await page.evaluate(() => window.__kiviMock.settings())).backend).toBe("mlx-cpu-f16");
    await page.waitForFunction(() => document.querySelector('[data-testid="stat-device"]')?.textContent?.includes("MLX · CPU · f16"));

    // A GPU backend on a machine without one is refused with the reason; nothing changes.
    await page.selectOption(tid("backend-select"), "mlx-gpu-f16");
    await page.click(tid("settings-save"));
    await page.locator(tid("toast-error")).waitFor();
    expect(await page.locator(tid("toast-error")).textContent()).toMatch(/needs a GPU/);
    expect((await page.evaluate(() => window.__kiviMock.settings())).backend).toBe("mlx-cpu-f16");
  });

  it("validates and saves the disk space for saved caches without resetting the caches", async () => {
    app = await openApp(env.browser, env.url);
    const { page } = app;
    await page.click(tid("nav-settings"));
    const cache = page.locator(tid("settings-cache"));
    expect(await page.inputValue(tid("disk-cache-input"))).toBe("2048");
    expect(await text(page, "disk-cache-size")).toBe("up to 2.00 GiB");
    expect(await cache.textContent()).toContain("Chats' KV caches are kept on disk so a long document is not re-read after a restart; the least recently used go first. 0 keeps none.");

    const msg = "Disk space for saved caches must be a whole number of MiB from 0 to 1048576 (0 keeps none).";
    for (const bad of ["-1", "1048577", "1.5", "lots", ""]) {
      await page.fill(tid("disk-cache-input"), bad);
      await page.locator(tid("disk-cache-error")).waitFor();
      expect(await text(page, "disk-cache-error"), bad).toBe(msg);
      expect(await page.getAttribute(tid("disk-cache-input"), "aria-invalid")).toBe("true");
      await expect(page.locator(tid("settings-save")).isDisabled()).resolves.toBe(true);
    }

    // 0 keeps none; a disk limit alone is not a cache change.
    await page.fill(tid("disk-cache-input"), "0");
    await page.waitForSelector(tid("disk-cache-error"), { state: "detached" });
    expect(await text(page, "disk-cache-size")).toBe("nothing kept on disk");
    expect(await page.locator(tid("cache-change-notice")).count()).toBe(0);
    expect(await page.locator(tid("settings-save")).textContent()).toBe("Save");

    await page.fill(tid("disk-cache-input"), "8192");
    expect(await text(page, "disk-cache-size")).toBe("up to 8.00 GiB");
    await page.click(tid("settings-save"));
    await page.locator(tid("toast-success")).waitFor();
    expect(await page.locator(tid("toast-info")).count()).toBe(0);
    const update = (await mockCalls(page)).filter((c) => c.cmd === "update_settings").pop();
    expect((update?.args.settings as { diskCacheMib: unknown }).diskCacheMib).toBe(8192);
    expect((await page.evaluate(() => window.__kiviMock.settings())).diskCacheMib).toBe(8192);
    expect(await text(page, "settings-state")).toMatch(/All changes saved/);

    // Restore defaults brings back 2048.
    await page.click(tid("settings-defaults"));
    await page.waitForFunction(() => (document.querySelector('[data-testid="disk-cache-input"]') as HTMLInputElement | null)?.value === "2048");
  });

  it("validates sampling fields and reverts", async () => {
    app = await openApp(env.browser, env.url);
    const { page } = app;
    await page.click(tid("nav-settings"));
    await page.fill(tid("temperature-input"), "3");
    await page.locator(tid("temperature-error")).waitFor();
    await page.fill(tid("topp-input"), "0");
    await page.locator(tid("topp-error")).waitFor();
    await page.fill(tid("maxtokens-input"), "40000");
    await page.locator(tid("maxtokens-error")).waitFor();
    await page.fill(tid("seed-input"), "-4");
    await page.locator(tid("seed-error")).waitFor();
    await page.fill(tid("context-input"), "100");
    await page.locator(tid("context-error")).waitFor();
    await expect(page.locator(tid("settings-save")).isDisabled()).resolves.toBe(true);
    await page.click(tid("settings-revert"));
    expect(await page.locator(".field-error").count()).toBe(0);
    expect(await page.inputValue(tid("temperature-input"))).toBe("0.7");
    expect((await mockCalls(page)).some((c) => c.cmd === "update_settings")).toBe(false);
  });

  it("starts and stops the local server and shows its URL", async () => {
    app = await openApp(env.browser, env.url);
    const { page } = app;
    await page.click(tid("nav-settings"));
    await page.fill(tid("server-port"), "80");
    await page.locator(tid("server-port-error")).waitFor();
    await expect(page.locator(tid("server-start")).isDisabled()).resolves.toBe(true);

    await page.fill(tid("server-port"), "8081");
    await page.click(tid("server-start"));
    await page.locator(tid("toast-error")).waitFor();
    expect(await page.locator(tid("toast-error")).textContent()).toMatch(/already in use/);

    await page.fill(tid("server-port"), "9090");
    await page.fill(tid("server-token"), "s3cret");
    await page.click(tid("server-start"));
    await page.locator(tid("server-url")).waitFor();
    expect(await page.locator(tid("server-url")).textContent()).toBe("http://127.0.0.1:9090/v1");
    const start = (await mockCalls(page)).filter((c) => c.cmd === "start_server").pop();
    expect(start?.args).toEqual({ port: 9090, token: "s3cret" });
    await page.click(tid("server-stop"));
    await page.waitForSelector(`${tid("server-status")}[data-running="false"]`);
  });
});
