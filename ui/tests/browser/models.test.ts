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
      "mlx-community/Llama-3.2-3B-Instruct-4bit",
      "mlx-community/Qwen2.5-7B-Instruct-4bit",
      "mlx-community/Mistral-7B-Instruct-v0.3-4bit",
    ]);
    const mistral = page.locator(card("mlx-community/Mistral-7B-Instruct-v0.3-4bit"));
    expect(await mistral.locator(tid("fit-bad")).textContent()).toMatch(/needs ~7.40 GiB, 6.10 GiB available/);
    expect(await mistral.locator(tid("model-download")).textContent()).toMatch(/Download anyway/);
    await mistral.locator(tid("model-download")).click();
    await page.locator(tid("confirm-ok")).waitFor();
    await page.keyboard.press("Escape");
    expect((await mockCalls(page)).some((c) => c.cmd === "download_model")).toBe(false);
  });

  it("resumes, pauses and cancels a download with per-file progress, speed and time left", async () => {
    app = await openApp(env.browser, env.url);
    const { page } = app;
    await page.click(tid("nav-models"));
    const qwen = page.locator(card("mlx-community/Qwen2.5-7B-Instruct-4bit"));
    const dl = qwen.locator(tid("download-item"));
    expect(await dl.getAttribute("data-state")).toBe("paused");
    expect(await dl.locator(tid("download-file")).count()).toBe(4);
    expect(await dl.locator(tid("download-totals")).textContent()).toMatch(/1.63 GiB \/ 4.28 GiB · 38%/);

    await dl.locator(tid("download-resume")).click();
    await page.waitForFunction(() => /MiB\/s · .* left/.test(document.querySelector('[data-repo="mlx-community/Qwen2.5-7B-Instruct-4bit"] [data-testid="download-totals"]')?.textContent ?? ""));
    expect(await dl.getAttribute("data-state")).toBe("downloading");
    await dl.locator(tid("download-pause")).click();
    await page.waitForSelector(`${card("mlx-community/Qwen2.5-7B-Instruct-4bit")} ${tid("download-item")}[data-state="paused"]`);
    await dl.locator(tid("download-cancel")).click();
    await page.waitForSelector(`${card("mlx-community/Qwen2.5-7B-Instruct-4bit")} ${tid("download-item")}`, { state: "detached" });
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
