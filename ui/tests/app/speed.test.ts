/**
 * The optimized app's decode speed on a ~2k-token document (scripts/app-speed.sh runs it on
 * the release build, next to `kivi bench` at the same context). Not part of `make test`: it
 * measures, and prints `APP_DECODE <tok/s> <prompt tokens>` for the script; it asserts only
 * that the answers completed.
 */
import { afterAll, describe, expect, it } from "vitest";
import { remote } from "webdriverio";
import { type Browser, invoke } from "./support";

const APP = process.env.KIVI_APP!;
const DRIVER_PORT = Number(process.env.TAURI_DRIVER_PORT ?? 4444);
const DOC = process.env.KIVI_SPEED_DOC!;
const ANSWER_TOKENS = Number(process.env.KIVI_SPEED_TOKENS ?? 64);

let browser: Browser | null = null;
afterAll(async () => {
  await browser?.deleteSession().catch(() => {});
});

interface Message {
  role: string;
  status: string;
  stats: { decodeTokensPerSec: number | null; promptTokens: number; generatedTokens: number } | null;
}

describe("the optimized app's decode speed", () => {
  it("answers about a ~2k-token document and reports decode tok/s", async () => {
    const b = await remote({
      hostname: "127.0.0.1",
      port: DRIVER_PORT,
      logLevel: "warn",
      connectionRetryTimeout: 240_000,
      connectionRetryCount: 1,
      capabilities: { "tauri:options": { application: APP } } as WebdriverIO.Capabilities,
    });
    browser = b;
    await b.waitUntil(async () => (await invoke<{ state: string }>(b, "get_model_status")).state === "ready", {
      timeout: 240_000,
      interval: 500,
    });
    const settings = await invoke<Record<string, any>>(b, "get_settings");
    settings.sampling.maxTokens = ANSWER_TOKENS;
    settings.sampling.temperature = 0;
    await invoke(b, "update_settings", { settings });
    const chat = await invoke<{ id: string }>(b, "create_chat", {});
    await invoke(b, "attach_document", { chatId: chat.id, path: DOC });
    for (const question of ["Summarize this chapter in detail.", "Describe the whale's skeleton in detail."]) {
      await invoke(b, "send_message", { chatId: chat.id, content: question });
      let last: Message | undefined;
      await b.waitUntil(
        async () => {
          const got = await invoke<{ messages: Message[] }>(b, "get_chat", { chatId: chat.id });
          last = got.messages[got.messages.length - 1];
          return last?.role === "assistant" && last.status !== "streaming";
        },
        { timeout: 600_000, interval: 250 },
      );
      expect(["complete", "stopped"]).toContain(last!.status);
      const s = last!.stats!;
      console.log(`APP_DECODE ${s.decodeTokensPerSec} ${s.promptTokens} ${s.generatedTokens}`);
    }
  });
});
