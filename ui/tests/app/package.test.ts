/**
 * The INSTALLED package, end to end (scripts/e2e-package.sh installs the .deb first): the
 * installed binary starts with a fresh data folder and no built-in model, as on a machine
 * without the source tree; the offline SmolLM2 GGUF is added through the Models view's
 * "Add model file" (the native dialog answered by KIVI_TEST_PICK_MODEL), becomes the active
 * model, and answers a question in a new chat, streamed.
 */
import { mkdirSync } from "node:fs";
import { join, resolve } from "node:path";
import { fileURLToPath } from "node:url";
import { afterAll, describe, expect, it } from "vitest";
import { remote } from "webdriverio";
import { type Browser, invoke, sel, texts } from "./support";

const ROOT = resolve(fileURLToPath(new URL("../../..", import.meta.url)));
const APP = process.env.KIVI_APP ?? "/usr/bin/kivi-chat";
const SHOTS = process.env.KIVI_SCREENSHOTS ?? join(ROOT, "artifacts", "screenshots");
const DRIVER_PORT = Number(process.env.TAURI_DRIVER_PORT ?? 4444);

let browser: Browser | null = null;
afterAll(async () => {
  await browser?.deleteSession().catch(() => {});
});

describe("KIVI Chat, installed from its package", () => {
  it("starts without a model, adds the offline GGUF from the Models view and answers", async () => {
    const b = await remote({
      hostname: "127.0.0.1",
      port: DRIVER_PORT,
      logLevel: "warn",
      connectionRetryTimeout: 240_000,
      connectionRetryCount: 1,
      capabilities: { "tauri:options": { application: APP } } as WebdriverIO.Capabilities,
    });
    browser = b;
    await b.$(sel("app")).waitForExist({ timeout: 120_000 });

    // No built-in model in an installed app without one: the Models view says so.
    await b.$(sel("nav-models")).click();
    await b.$(sel("models-view")).waitForDisplayed({ timeout: 30_000 });
    await b.$(sel("no-model-hint")).waitForDisplayed({ timeout: 60_000 });
    expect((await texts(b, sel("model-unavailable")))[0]).toMatch(/Not installed/);
    mkdirSync(SHOTS, { recursive: true });
    await b.saveScreenshot(join(SHOTS, "package-no-model.png"));

    // Add the GGUF file: it is listed as a local model and becomes the active one.
    await b.$(sel("add-model-file")).click();
    await b.waitUntil(
      async () => {
        const s = await invoke<{ state: string; modelId: string | null }>(b, "get_model_status");
        return s.state === "ready" && (s.modelId ?? "").startsWith("local:");
      },
      { timeout: 240_000, interval: 500, timeoutMsg: "the added model never became ready" },
    );
    expect(await b.$(sel("model-local-badge")).isExisting()).toBe(true);
    expect((await texts(b, sel("model-path")))[0]).toMatch(/SmolLM2-135M-Instruct\.Q4_1\.gguf$/);

    // Short answers, then a streamed one in a new chat.
    const settings = await invoke<Record<string, any>>(b, "get_settings");
    settings.sampling.maxTokens = 16;
    settings.sampling.temperature = 0;
    await invoke(b, "update_settings", { settings });
    await b.$(sel("nav-chat")).click();
    await b.$(sel("new-chat")).click();
    const input = b.$(sel("composer-input"));
    await input.waitForEnabled({ timeout: 60_000 });
    await input.setValue("What is the capital of France?");
    await b.$(sel("send-button")).click();
    const answer = b.$(sel("message-assistant"));
    await answer.waitForExist({ timeout: 60_000 });
    let sawStreaming = false;
    await b.waitUntil(
      async () => {
        const status = await answer.getAttribute("data-status");
        sawStreaming ||= status === "streaming";
        return status !== "streaming";
      },
      { timeout: 480_000, interval: 100, timeoutMsg: "the answer never finished" },
    );
    expect(await answer.getAttribute("data-status")).toBe("complete");
    const content = (await texts(b, `${sel("message-assistant")} ${sel("message-content")}`))[0] ?? "";
    expect(content.length).toBeGreaterThan(0);
    await b.saveScreenshot(join(SHOTS, "package-answer.png"));
    console.log(`installed app answered (streamed: ${sawStreaming}): ${JSON.stringify(content)}`);
  });
});
