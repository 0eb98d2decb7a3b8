/**
 * End-to-end tests of the REAL desktop app: the debug build of src-tauri on the offline model,
 * driven through tauri-driver + WebKitWebDriver on a virtual display. scripts/e2e-app.sh
 * starts Xvfb and tauri-driver with a fresh KIVI_DATA_DIR and HF_HOME, and answers the native
 * open dialog through KIVI_TEST_PICK_FILES (WebDriver cannot reach native dialogs).
 *
 * One conversation is followed through: a streamed answer, a document read into the cache with
 * visible progress, the value bits changed in the settings pane (the live panel's bytes change),
 * and a restart that finds the chat again.
 */
import { mkdirSync } from "node:fs";
import { join, resolve } from "node:path";
import { fileURLToPath } from "node:url";
import { afterAll, describe, expect, it } from "vitest";
import { remote } from "webdriverio";
import { type Browser, invoke, sel, texts } from "./support";

const ROOT = resolve(fileURLToPath(new URL("../../..", import.meta.url)));
const APP = process.env.KIVI_APP ?? join(ROOT, "target", "debug", "kivi-chat");
const SHOTS = process.env.KIVI_SCREENSHOTS ?? join(ROOT, "artifacts", "screenshots");
const DRIVER_PORT = Number(process.env.TAURI_DRIVER_PORT ?? 4444);
const QUESTION = "What is the capital of France?";

let browser: Browser | null = null;

async function launch(): Promise<Browser> {
  const b = await remote({
    hostname: "127.0.0.1",
    port: DRIVER_PORT,
    logLevel: "warn",
    connectionRetryTimeout: 240_000,
    connectionRetryCount: 1,
    capabilities: { "tauri:options": { application: APP } } as WebdriverIO.Capabilities,
  });
  browser = b;
  return b;
}

async function close(): Promise<void> {
  if (browser) {
    await browser.deleteSession().catch(() => {});
    browser = null;
  }
}

afterAll(close);

/** The text of the first element with this test id ("" when there is none). */
async function text(b: Browser, id: string): Promise<string> {
  return (await texts(b, sel(id)))[0] ?? "";
}

async function waitReady(b: Browser): Promise<void> {
  await b.$(sel("app")).waitForExist({ timeout: 120_000 });
  await b.waitUntil(async () => (await invoke<{ state: string }>(b, "get_model_status")).state === "ready", {
    timeout: 240_000,
    interval: 500,
    timeoutMsg: "the offline model never became ready",
  });
}

async function shot(b: Browser, name: string): Promise<void> {
  mkdirSync(SHOTS, { recursive: true });
  await b.saveScreenshot(join(SHOTS, `app-${name}.png`));
}

/** "7.25 MiB" → bytes. */
function parseBytes(text: string): number {
  const m = text.trim().match(/^([\d.,]+)\s*(B|KiB|MiB|GiB)$/);
  if (!m) throw new Error(`not a byte count: ${text}`);
  const scale = { B: 1, KiB: 1024, MiB: 1024 ** 2, GiB: 1024 ** 3 }[m[2] as "B" | "KiB" | "MiB" | "GiB"];
  return Number(m[1]!.replace(/,/g, "")) * scale;
}

async function panelBytes(b: Browser): Promise<{ held: number; fp16: number }> {
  return {
    held: parseBytes(await text(b, "stat-held-bytes")),
    fp16: parseBytes(await text(b, "stat-fp16-bytes")),
  };
}

/** Sends a message and waits until its answer has ended; returns the answer's text. */
async function ask(b: Browser, text: string): Promise<string> {
  const before = (await b.$$(sel("message-assistant")).length);
  const input = b.$(sel("composer-input"));
  await input.waitForEnabled({ timeout: 60_000 });
  await input.setValue(text);
  await b.$(sel("send-button")).click();
  await b.waitUntil(async () => (await b.$$(sel("message-assistant")).length) > before, { timeout: 60_000 });
  const answer = b.$$(sel("message-assistant"))[before]!;
  await b.waitUntil(async () => (await answer.getAttribute("data-status")) !== "streaming", {
    timeout: 480_000,
    interval: 250,
    timeoutMsg: "the answer never finished",
  });
  expect(await answer.getAttribute("data-status")).toBe("complete");
  const contents = await texts(b, `${sel("message-assistant")} ${sel("message-content")}`);
  return contents[before] ?? "";
}

async function openView(b: Browser, view: "chat" | "settings" | "models"): Promise<void> {
  await b.$(sel(`nav-${view}`)).click();
  await b.$(sel(view === "chat" ? "composer" : `${view}-view`)).waitForDisplayed({ timeout: 30_000 });
}

async function setNumber(b: Browser, id: string, value: string): Promise<void> {
  const input = b.$(sel(id));
  await input.waitForDisplayed({ timeout: 30_000 });
  await input.clearValue();
  await input.setValue(value);
}

async function saveSettings(b: Browser): Promise<void> {
  await b.$(sel("settings-save")).click();
  await b.waitUntil(async () => !(await b.$(sel("settings-save-bar")).isExisting()) || !(await b.$(sel("settings-save")).isEnabled()), {
    timeout: 30_000,
    timeoutMsg: "the settings were not saved",
  });
}

describe("KIVI Chat, the real app", () => {
  let chatTitle = "";

  it("streams an answer, reads a document with progress, and shows the cache bytes change with the K/V bits", async () => {
    const b = await launch();
    await waitReady(b);

    // Short, deterministic answers so that a debug build finishes quickly.
    await openView(b, "settings");
    await setNumber(b, "maxtokens-input", "48");
    await setNumber(b, "temperature-input", "0");
    await saveSettings(b);
    const saved = await invoke<{ sampling: { maxTokens: number }; cache: { kBits: number; vBits: number } }>(b, "get_settings");
    expect(saved.sampling.maxTokens).toBe(48);
    expect([saved.cache.kBits, saved.cache.vBits]).toEqual([4, 2]);

    // A streamed answer from the offline model.
    await openView(b, "chat");
    await b.$(sel("new-chat")).click();
    const answer = await ask(b, QUESTION);
    expect(answer.length).toBeGreaterThan(0);
    // The chat is named after its first message.
    await b.waitUntil(async () => (await text(b, "chat-heading")).includes("capital of France"), {
      timeout: 30_000,
      timeoutMsg: "the chat was not named after its first message",
    });
    chatTitle = await text(b, "chat-heading");
    await shot(b, "chat");

    // An answer asked for as JSON: constrained decoding gives an object, shown as a tree.
    await b.$(sel("json-toggle")).click();
    await ask(b, "Alice is 30 years old and lives in Paris. Give her name, age and city as JSON.");
    await b.$(sel("json-answer")).waitForDisplayed({ timeout: 30_000 });
    // What the 135M model puts in the object is its own; that it is an object is the feature.
    expect(await text(b, "json-answer")).toMatch(/^JSON\{\d+ keys?\}/);
    await shot(b, "json");
    await b.$(sel("json-toggle")).click();

    // Attach a document: progress while it is read into the KV cache, then "cached".
    await b.$(sel("attach-button")).click();
    await b.$(sel("doc-chip")).waitForExist({ timeout: 120_000 });
    let sawProgress = false;
    let progressText = "";
    let shotTaken = false;
    await b.waitUntil(
      async () => {
        const now = await text(b, "prefill-text");
        if (now) {
          sawProgress = true;
          progressText = now;
          // A screenshot of the bar part-way (once some tokens are in).
          if (!shotTaken && !now.startsWith("0 ")) {
            shotTaken = true;
            await shot(b, "prefill");
          }
        }
        return b.$(sel("doc-cached")).isExisting();
      },
      { timeout: 480_000, interval: 100, timeoutMsg: "the document was never cached" },
    );
    expect(sawProgress).toBe(true);
    expect(progressText).toMatch(/tokens/);

    // A question about it: the panel shows the default K4 V2 cache's bytes.
    await ask(b, "Which whales does the chapter mention?");
    await b.$(sel("live-panel")).waitForDisplayed({ timeout: 30_000 });
    await b.waitUntil(async () => (await panelBytes(b)).held > 0, { timeout: 30_000 });
    const k4v2 = await panelBytes(b);
    expect(await text(b, "stat-cache-config")).toMatch(/K4\s*V2/);
    await shot(b, "panel");

    // K4 V4 in the settings pane: every cache is dropped...
    await openView(b, "settings");
    await b.$(sel("vbits-4")).click();
    await shot(b, "settings");
    await saveSettings(b);
    await b.waitUntil(async () => (await invoke<{ cache: { vBits: number } }>(b, "get_settings")).cache.vBits === 4, { timeout: 30_000 });
    await openView(b, "chat");
    await b.waitUntil(async () => (await panelBytes(b)).held === 0, { timeout: 30_000, timeoutMsg: "the panel still shows the old cache" });

    // ... and the same conversation, re-read into a 4-bit cache, holds more bytes per token.
    await ask(b, "Name one of them.");
    await b.waitUntil(async () => (await panelBytes(b)).held > 0, { timeout: 30_000 });
    const k4 = await panelBytes(b);
    expect(await text(b, "stat-cache-config")).toMatch(/K4\s*V4/);
    console.log(`panel: K4V2 held ${k4v2.held} of ${k4v2.fp16} fp16 bytes; K4V4 held ${k4.held} of ${k4.fp16}`);
    expect(k4.held / k4.fp16).toBeGreaterThan(k4v2.held / k4v2.fp16);
    await shot(b, "panel-k4v4");
    await close();
  });

  it("finds the chat again after a restart", async () => {
    expect(chatTitle).not.toBe("");
    const b = await launch();
    await b.$(sel("chat-list")).waitForExist({ timeout: 120_000 });
    const titles = await texts(b, sel("chat-item"));
    const index = titles.findIndex((t) => t.includes(chatTitle));
    expect(index, titles.join(" | ")).toBeGreaterThanOrEqual(0);
    await b.$$(sel("chat-item"))[index]!.click();
    await b.waitUntil(async () => (await b.$$(sel("message-assistant")).length) >= 3, { timeout: 30_000 });
    expect((await texts(b, `${sel("message-user")} ${sel("message-content")}`))[0]).toBe(QUESTION);
    expect(await b.$(sel("doc-chip")).isExisting()).toBe(true);
    await shot(b, "restarted");
    await close();
  });
});
