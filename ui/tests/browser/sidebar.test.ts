import { afterEach, describe, expect, it } from "vitest";
import { openApp, tid, useBrowser, type AppPage } from "./harness";

const env = useBrowser();
let app: AppPage | null = null;
afterEach(async () => {
  if (app) {
    expect(app.problems.errors, "page errors").toEqual([]);
    expect(app.problems.csp, "CSP violations").toEqual([]);
    await app.close();
  }
  app = null;
});

declare global {
  interface Window {
    /** Every text the watched chat's sidebar preview showed, in order. */
    __previews?: string[];
  }
}

// Under 120 characters, so the finished preview is the whole answer.
const REPLY = "Shared borrows can coexist: any number of `&T` at once, or exactly one `&mut T`, never both.";

describe("sidebar", () => {
  it("keeps a restored chat's preview while an answer streams into it: the question, then the answer", async () => {
    app = await openApp(env.browser, env.url);
    const { page } = app;
    // The mock back end, like the app's, stores a streaming answer's text about once a second.
    await page.evaluate((reply) => {
      window.__kiviMock.tokenDelayMs = 60;
      window.__kiviMock.replies = [reply];
    }, REPLY);

    // A chat from an earlier run (seeded), opened from the list.
    const row = page.locator(`${tid("chat-item")}[data-chat-id="chat-rust"]`);
    const preview = row.locator(tid("chat-preview"));
    expect(await preview.textContent()).toContain("Because `&mut` is an **exclusive** borrow");
    await row.locator(".chat-open").click();
    await page.waitForFunction(() => document.querySelector('[data-testid="chat-heading"]')?.textContent === "Borrow checker question");
    await page.locator(tid("message-assistant")).last().waitFor();

    // Record every text the preview shows from here on.
    await page.evaluate(() => {
      const read = () => document.querySelector('[data-chat-id="chat-rust"] [data-testid="chat-preview"]')?.textContent ?? "(gone)";
      const seen = [read()];
      window.__previews = seen;
      new MutationObserver(() => {
        const text = read();
        if (text !== seen[seen.length - 1]) seen.push(text);
      }).observe(document.body, { subtree: true, childList: true, characterData: true });
    });

    await page.fill(tid("composer-input"), "And  shared\nborrows?");
    await page.click(tid("send-button"));

    // Streaming: the preview follows the answer.
    await page.waitForFunction(() => {
      const el = document.querySelectorAll('[data-testid="message-assistant"]');
      const last = el[el.length - 1];
      return last?.getAttribute("data-status") === "streaming" && (last.textContent ?? "").includes("any number");
    });
    const midStream = (await preview.textContent()) ?? "";
    expect(midStream).not.toBe("No messages yet");
    expect(REPLY.startsWith(midStream)).toBe(true);
    expect(midStream).toContain("Shared borrows can coexist");

    await page.waitForSelector(`${tid("message-assistant")}[data-status="complete"]`);
    await page.waitForFunction((reply) => document.querySelector('[data-chat-id="chat-rust"] [data-testid="chat-preview"]')?.textContent === reply, REPLY);

    const seen = await page.evaluate(() => window.__previews ?? []);
    expect(seen).not.toContain("No messages yet");
    expect(seen).not.toContain("");
    // The question was shown until the answer had text (the mock prefills this chat first).
    expect(seen).toContain("And shared borrows?");
    expect(seen[seen.length - 1]).toBe(REPLY);

    // After reading the list again (a search and back), it still shows the answer.
    await page.fill(tid("chat-search"), "borrow");
    await page.waitForFunction(() => document.querySelectorAll('[data-testid="chat-item"]').length === 1);
    await page.fill(tid("chat-search"), "");
    await page.waitForFunction(() => document.querySelectorAll('[data-testid="chat-item"]').length === 2);
    expect(await preview.textContent()).toBe(REPLY);
  });
});
