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

const card = (id: string) => `${tid("model-card")}[data-model-id="${id}"]`;

describe("model manager", () => {
  it("shows the built-in model ready, the recommended ones, and flags what will not fit", async () => {
    app = await openApp(env.browser, env.url);
    const { page } = app;
    await page.click(tid("nav-models"));
    await page.locator(tid("models-view")).waitFor();
    const builtin = page.locator(`${tid("installed-models")} ${tid("model-card")}`);
    expect(await builtin.count()).toBe(1);
    expect(await builtin.textContent()).toMatch(/SmolLM2.*Active.*Built in/);
    const recommended = page.locator(`${tid("recommended-models")} ${tid("model-card")}`);
    expect(await recommended.evaluateAll((els) => els.map((e) => e.getAttribute("data-model-id")))).toEqual([
      "mlx-community/Qwen3-4B-4bit",
      "mlx-community/Qwen3-8B-4bit",
      "mlx-community/Qwen3-14B-4bit",
      "mlx-community/Llama-3.2-3B-Instruct-4bit",
    ]);
    const large = page.locator(card("mlx-community/Qwen3-14B-4bit"));
    expect(await large.locator(tid("fit-bad")).textContent()).toMatch(/needs ~9.10 GiB, 6.10 GiB available/);
    expect(await large.locator(tid("model-download")).textContent()).toMatch(/Download anyway/);
    await large.locator(tid("model-download")).click();
    await page.locator(tid("confirm-ok")).waitFor();
    await page.keyboard.press("Escape");
    expect((await mockCalls(page)).some((c) => c.cmd === "download_model")).toBe(false);
  });

  it("resumes, pauses and cancels a download with per-file progress, speed and time left", async () => {
    app = await openApp(env.browser, env.url);
    const { page } = app;
    await page.click(tid("nav-models"));
    const qwen = page.locator(card("mlx-community/Qwen3-8B-4bit"));
    const dl = qwen.locator(tid("download-item"));
    expect(await dl.getAttribute("data-state")).toBe("paused");
    expect(await dl.locator(tid("download-file")).count()).toBe(4);
    expect(await dl.locator(tid("download-totals")).textContent()).toMatch(/1.63 GiB \/ 4.28 GiB · 38%/);

    await dl.locator(tid("download-resume")).click();
    await page.waitForFunction(() => /MiB\/s · .* left/.test(document.querySelector('[data-repo="mlx-community/Qwen3-8B-4bit"] [data-testid="download-totals"]')?.textContent ?? ""));
    expect(await dl.getAttribute("data-state")).toBe("downloading");
    await dl.locator(tid("download-pause")).click();
    await page.waitForSelector(`${card("mlx-community/Qwen3-8B-4bit")} ${tid("download-item")}[data-state="paused"]`);
    await dl.locator(tid("download-cancel")).click();
    await page.waitForSelector(`${card("mlx-community/Qwen3-8B-4bit")} ${tid("download-item")}`, { state: "detached" });
    await qwen.locator(tid("model-download")).waitFor();
    const cmds = (await mockCalls(page)).map((c) => c.cmd);
    expect(cmds).toEqual(expect.arrayContaining(["resume_download", "pause_download", "cancel_download"]));
  });

  it("validates a hub repo id, looks it up and downloads it", async () => {
    app = await openApp(env.browser, env.url);
    const { page } = app;
    await page.click(tid("nav-models"));
    await page.fill(tid("repo-input"), "just-a-name");
    await page.locator(tid("repo-input")).blur();
    await page.locator(tid("repo-error")).waitFor();
    expect(await page.locator(tid("repo-error")).textContent()).toMatch(/owner\/name/);
    await expect(page.locator(tid("repo-check")).isDisabled()).resolves.toBe(true);

    await page.fill(tid("repo-input"), "someone/nonexistent-model");
    await page.click(tid("repo-check"));
    await page.locator(tid("repo-lookup-error")).waitFor();
    expect(await page.locator(tid("repo-lookup-error")).textContent()).toMatch(/not found on the Hugging Face hub/);

    await page.fill(tid("repo-input"), "https://huggingface.co/mlx-community/Llama-3.2-1B-Instruct-4bit");
    await page.keyboard.press("Enter");
    const found = page.locator(`${tid("hub-lookup")} ${card("mlx-community/Llama-3.2-1B-Instruct-4bit")}`);
    await found.waitFor();
    expect(await found.locator(tid("fit-ok")).isVisible()).toBe(true);
    await found.locator(tid("model-download")).click();
    await found.locator(tid("download-item")).waitFor();
    const dl = (await mockCalls(page)).find((c) => c.cmd === "download_model");
    expect(dl?.args).toEqual({ repoId: "mlx-community/Llama-3.2-1B-Instruct-4bit" });
  });
});

describe("models on this computer", () => {
  const GGUF = "/home/user/models/Qwen2.5-0.5B-Instruct-Q4_K_M.gguf";
  const FOLDER = "/home/user/models/SmolLM2-360M-Instruct";
  const BUILTIN = "builtin/SmolLM2-135M-Instruct-Q4_1";

  it("adds a .gguf file: listed with a Local badge and its path, and it becomes the active model", async () => {
    app = await openApp(env.browser, env.url);
    const { page } = app;
    await page.click(tid("nav-models"));
    await page.locator(tid("models-view")).waitFor();
    expect(await page.locator(tid("no-model-hint")).count()).toBe(0);
    await page.click(tid("add-model-file"));
    const local = page.locator(`${tid("installed-models")} ${card(`local:${GGUF}`)}`);
    await local.waitFor();
    expect(await local.locator(tid("model-local-badge")).textContent()).toBe("Local");
    expect(await local.locator(tid("model-path")).textContent()).toBe(GGUF);
    expect(await local.locator("strong").textContent()).toBe("Qwen2.5-0.5B-Instruct-Q4_K_M");
    // Listed right after the built-in model.
    const ids = await page.locator(`${tid("installed-models")} ${tid("model-card")}`).evaluateAll((els) => els.map((e) => e.getAttribute("data-model-id")));
    expect(ids).toEqual([BUILTIN, `local:${GGUF}`]);
    // Added and used: it loads and becomes the active model.
    await page.waitForSelector(`${card(`local:${GGUF}`)}.active`);
    await page.waitForFunction(() => /Active: Qwen2.5-0.5B-Instruct-Q4_K_M/.test(document.querySelector('[data-testid="models-view"] .page-head')?.textContent ?? ""));
    expect(await local.textContent()).toMatch(/Active/);
    expect(await local.locator(tid("model-use")).count()).toBe(0);
    expect(await local.locator(tid("model-remove")).count()).toBe(0);
    await page.locator(tid("toast-success")).filter({ hasText: "Model added" }).waitFor();
    const cmds = (await mockCalls(page)).filter((c) => c.cmd === "add_local_model" || c.cmd === "set_active_model");
    expect(cmds).toEqual([
      { cmd: "add_local_model", args: { folder: false } },
      { cmd: "set_active_model", args: { modelId: `local:${GGUF}` } },
    ]);
  });

  it("adds a model folder, uses another model, and removes a local one from the list", async () => {
    app = await openApp(env.browser, env.url);
    const { page } = app;
    await page.click(tid("nav-models"));
    await page.click(tid("add-model-file"));
    await page.waitForSelector(`${card(`local:${GGUF}`)}.active`);
    await page.click(tid("add-model-folder"));
    const folder = page.locator(card(`local:${FOLDER}`));
    await page.waitForSelector(`${card(`local:${FOLDER}`)}.active`);
    expect(await folder.locator("strong").textContent()).toBe("SmolLM2-360M-Instruct");
    expect(await folder.locator(tid("model-local-badge")).isVisible()).toBe(true);

    // The file is no longer active: it can be used again, or removed from the list.
    const file = page.locator(card(`local:${GGUF}`));
    await file.locator(tid("model-use")).waitFor();
    expect(await file.locator(tid("model-remove")).textContent()).toMatch(/Remove from list/);
    expect(await file.locator(tid("model-delete")).count()).toBe(0);
    await file.locator(tid("model-remove")).click();
    await page.waitForSelector(card(`local:${GGUF}`), { state: "detached" });

    // Back to the built-in model; then the folder can go too.
    await page.locator(card(BUILTIN)).locator(tid("model-use")).click();
    await page.waitForSelector(`${card(BUILTIN)}.active`);
    await folder.locator(tid("model-remove")).click();
    await page.waitForSelector(card(`local:${FOLDER}`), { state: "detached" });
    const removed = (await mockCalls(page)).filter((c) => c.cmd === "delete_model").map((c) => c.args);
    expect(removed).toEqual([{ modelId: `local:${GGUF}` }, { modelId: `local:${FOLDER}` }]);
  });

  it("shows why a picked file is not a model, and a cancelled dialog changes nothing", async () => {
    app = await openApp(env.browser, env.url);
    const { page } = app;
    await page.click(tid("nav-models"));
    await page.evaluate(() => {
      window.__kiviMock.modelPick.file = "/home/user/notes.txt";
    });
    await page.click(tid("add-model-file"));
    const toast = page.locator(tid("toast-error"));
    await toast.waitFor();
    expect(await toast.textContent()).toMatch(/Could not add the model file.*notes\.txt is not a GGUF file\. Pick a \.gguf file, or a folder with config\.json and \.safetensors weights\./);
    await page.evaluate(() => {
      window.__kiviMock.modelPick.folder = null;
    });
    await page.click(tid("add-model-folder"));
    await page.waitForFunction(() => window.__kiviMock.calls.filter((c) => c.cmd === "add_local_model").length === 2);
    await expect(page.locator(tid("add-model-folder")).isEnabled()).resolves.toBe(true);
    expect(await page.locator(`${tid("installed-models")} ${tid("model-card")}`).count()).toBe(1);
    expect((await mockCalls(page)).some((c) => c.cmd === "set_active_model")).toBe(false);
  });

  it("without the bundled model: the built-in one is 'Not installed', with no download, and adding a file is the way in", async () => {
    app = await openApp(env.browser, env.url, { query: { scenario: "no-builtin" } });
    const { page } = app;
    await page.click(tid("nav-models"));
    const hint = page.locator(tid("no-model-hint"));
    await hint.waitFor();
    expect(await hint.textContent()).toMatch(/Add a .gguf file or a model folder, or download one below\./);
    const builtin = page.locator(`${tid("installed-models")} ${card(BUILTIN)}`);
    expect(await builtin.getAttribute("data-availability")).toBe("notDownloaded");
    expect(await builtin.locator(tid("model-unavailable")).textContent()).toMatch(/Not installed/);
    expect(await builtin.locator(tid("model-download")).count()).toBe(0);
    expect(await builtin.locator(tid("model-use")).count()).toBe(0);
    expect(await builtin.textContent()).not.toMatch(/Active|Built in · works offline/);
    // The built-in model is not among the downloads either.
    expect(await page.locator(`${tid("recommended-models")} ${card(BUILTIN)}`).count()).toBe(0);
    // "Add model file…" is the prominent action.
    expect(await page.locator(tid("add-model-file")).getAttribute("class")).toMatch(/\bprimary\b/);
    expect(await page.locator(tid("add-model-folder")).getAttribute("class")).not.toMatch(/\bprimary\b/);

    await page.click(tid("add-model-file"));
    await page.waitForSelector(`${card(`local:${GGUF}`)}.active`);
    await hint.waitFor({ state: "detached" });
    expect(await page.locator(tid("add-model-file")).getAttribute("class")).not.toMatch(/\bprimary\b/);
  });
});
