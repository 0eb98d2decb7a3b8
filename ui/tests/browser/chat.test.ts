import { afterEach, describe, expect, it } from "vitest";
import { mockCalls, openApp, tid, useBrowser, type AppPage } from "./harness";

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
    /** Every text the streaming answer showed, in order. */
    __shown?: string[];
  }
}

describe("chat", () => {
  it("sends with Enter, streams the answer as Markdown, and Esc stops it", async () => {
    app = await openApp(env.browser, env.url, { query: { scenario: "empty" } });
    const { page } = app;
    await expect(page.locator(tid("welcome")).isVisible()).resolves.toBe(true);
    await page.evaluate(() => {
      window.__kiviMock.tokenDelayMs = 80;
    });
    await page.click(tid("new-chat"));
    await page.fill(tid("composer-input"), "Why does Ishmael go to sea?");
    await page.keyboard.press("Enter");

    const user = page.locator(tid("message-user")).last();
    await user.waitFor();
    expect(await user.locator(tid("message-content")).textContent()).toBe("Why does Ishmael go to sea?");
    expect(await page.inputValue(tid("composer-input"))).toBe("");

    const answer = page.locator(tid("message-assistant")).last();
    await page.waitForFunction(() => {
      const el = document.querySelectorAll('[data-testid="message-assistant"]');
      const last = el[el.length - 1];
      return last?.getAttribute("data-status") === "streaming" && (last.textContent ?? "").includes("drizzly");
    });
    await expect(page.locator(tid("stop-button")).isVisible()).resolves.toBe(true);
    const streamedSoFar = (await answer.locator(tid("message-content")).textContent()) ?? "";
    expect(streamedSoFar.length).toBeGreaterThan(10);

    await page.keyboard.press("Escape");
    await page.waitForSelector(`${tid("message-assistant")}[data-status="stopped"]`);
    await answer.locator(tid("badge-stopped")).waitFor();
    const final = (await answer.locator(tid("message-content")).textContent()) ?? "";
    expect(final).toContain("Ishmael opens with a confession");
    expect(final).not.toContain("Carpet-Bag");
    expect((await mockCalls(page)).some((c) => c.cmd === "stop_generation")).toBe(true);
    await expect(page.locator(tid("send-button")).isVisible()).resolves.toBe(true);
    // The chat got its title from the first message.
    expect(await page.locator(tid("chat-heading")).textContent()).toBe("Why does Ishmael go to sea?");
  });

  it("shows a chat opened again mid-answer as far as it has streamed, and goes on without a gap", async () => {
    app = await openApp(env.browser, env.url);
    const { page } = app;
    const reply = Array.from({ length: 150 }, (_, i) => `word${i}`).join(" ");
    await page.evaluate((text) => {
      window.__kiviMock.tokenDelayMs = 25;
      window.__kiviMock.replies = [text];
    }, reply);
    const open = async (id: string, heading: string) => {
      await page.locator(`${tid("chat-item")}[data-chat-id="${id}"] .chat-open`).click();
      await page.waitForFunction((h) => document.querySelector('[data-testid="chat-heading"]')?.textContent === h, heading);
    };
    await open("chat-rust", "Borrow checker question");
    await page.fill(tid("composer-input"), "Say many words");
    await page.click(tid("send-button"));
    await page.waitForFunction(() => (document.querySelector('[data-testid="message-assistant"][data-status="streaming"]')?.textContent ?? "").includes("word5"));

    // Away while the answer goes on (the back end saves it about once a second), then back.
    await open("chat-moby", "Moby-Dick, chapter 1");
    await page.waitForTimeout(700);
    await page.evaluate(() => {
      const shown: string[] = [];
      window.__shown = shown;
      new MutationObserver(() => {
        const text = document.querySelector('[data-testid="message-assistant"][data-status="streaming"] [data-testid="message-content"]')?.textContent?.trim();
        if (text && text !== shown[shown.length - 1]) shown.push(text);
      }).observe(document.body, { subtree: true, childList: true, characterData: true });
    });
    await open("chat-rust", "Borrow checker question");
    await page.waitForFunction(() => document.querySelector('[data-testid="message-assistant"]:last-of-type')?.getAttribute("data-status") === "complete" && !document.querySelector('[data-status="streaming"]'));

    const shown = await page.evaluate(() => window.__shown ?? []);
    expect(shown.length).toBeGreaterThan(3);
    // Every text shown is the start of the answer: nothing streamed while away is missing.
    for (const text of shown) expect(reply.startsWith(text), text).toBe(true);
    expect(shown[0]).toContain("word25");
    const final = await page.locator(`${tid("message-assistant")} ${tid("message-content")}`).last().textContent();
    expect(final?.trim()).toBe(reply);
  });

  it("renders a complete answer with highlighted code, stats and actions", async () => {
    app = await openApp(env.browser, env.url, { query: { scenario: "empty" } });
    const { page } = app;
    await page.evaluate(() => {
      window.__kiviMock.tokenDelayMs = 1;
    });
    await page.fill(tid("composer-input"), "Count the whales");
    await page.click(tid("send-button"));
    const answer = page.locator(`${tid("message-assistant")}[data-status="complete"]`);
    await answer.waitFor();
    expect(await answer.locator("ol li").count()).toBe(3);
    expect(await answer.locator("blockquote").count()).toBe(1);
    expect(await answer.locator("pre code.language-python .hljs-keyword").first().textContent()).toBe("import");
    expect(await answer.locator(".code-head").first().textContent()).toContain("python");
    expect(await answer.locator(tid("message-stats")).textContent()).toMatch(/K2V2.*tokens.*tok\/s.*TTFT/);
    await expect(answer.locator(tid("message-regenerate")).isVisible()).resolves.toBe(true);
  });

  it("has keyboard shortcuts: Ctrl+N new chat, Ctrl+K search, Ctrl+, settings", async () => {
    app = await openApp(env.browser, env.url);
    const { page } = app;
    await page.keyboard.press("Control+n");
    await page.waitForFunction(() => document.querySelectorAll('[data-testid="chat-item"]').length === 3);
    expect(await page.locator(tid("chat-heading")).textContent()).toBe("New chat");
    // A new chat focuses its composer once its view has loaded; wait for that, or the
    // composer may take the focus back from the search box that Ctrl+K gives it.
    await page.waitForFunction(
      () => document.activeElement?.getAttribute("data-testid") === "composer-input",
    );
    await page.keyboard.press("Control+k");
    await page.waitForFunction(
      () => document.activeElement?.getAttribute("data-testid") === "chat-search",
    );
    await page.keyboard.press("Control+,");
    await page.locator(tid("settings-view")).waitFor();
  });

  it("Shift+Enter adds a line instead of sending", async () => {
    app = await openApp(env.browser, env.url, { query: { scenario: "empty" } });
    const { page } = app;
    await page.click(tid("composer-input"));
    await page.keyboard.type("line one");
    await page.keyboard.press("Shift+Enter");
    await page.keyboard.type("line two");
    expect(await page.inputValue(tid("composer-input"))).toBe("line one\nline two");
    expect((await mockCalls(page)).some((c) => c.cmd === "send_message")).toBe(false);
    await page.keyboard.press("Enter");
    await page.locator(tid("message-user")).waitFor();
    const sent = (await mockCalls(page)).find((c) => c.cmd === "send_message");
    expect(sent?.args.content).toBe("line one\nline two");
  });

  it("regenerates the last answer and edits-and-resends a question", async () => {
    app = await openApp(env.browser, env.url, { query: { scenario: "empty" } });
    const { page } = app;
    await page.evaluate(() => {
      window.__kiviMock.tokenDelayMs = 1;
      window.__kiviMock.replies = ["First answer.", "Second answer.", "Answer to the edited question."];
    });
    await page.fill(tid("composer-input"), "Original question");
    await page.keyboard.press("Enter");
    await page.waitForSelector(`${tid("message-assistant")}[data-status="complete"]`);
    expect((await page.locator(`${tid("message-assistant")} ${tid("message-content")}`).textContent())?.trim()).toBe("First answer.");

    await page.hover(tid("message-assistant"));
    await page.click(tid("message-regenerate"));
    await page.waitForFunction(() => document.querySelector('[data-testid="message-assistant"] [data-testid="message-content"]')?.textContent?.trim() === "Second answer.");
    await page.waitForSelector(`${tid("message-assistant")}[data-status="complete"]`);
    expect(await page.locator(tid("message-assistant")).count()).toBe(1);

    await page.hover(tid("message-user"));
    await page.click(tid("message-edit"));
    await page.fill(tid("edit-input"), "Edited question");
    await page.click(tid("edit-send"));
    await page.waitForFunction(() => document.querySelector('[data-testid="message-assistant"] [data-testid="message-content"]')?.textContent?.trim() === "Answer to the edited question.");
    expect(await page.locator(tid("message-user")).count()).toBe(1);
    expect(await page.locator(`${tid("message-user")} ${tid("message-content")}`).textContent()).toBe("Edited question");
    const calls = await mockCalls(page);
    expect(calls.filter((c) => c.cmd === "regenerate").length).toBe(1);
    expect(calls.find((c) => c.cmd === "edit_message")?.args.content).toBe("Edited question");
  });

  it("answers as JSON when asked: a collapsible tree with a copy button, regenerated as JSON", async () => {
    app = await openApp(env.browser, env.url, { query: { scenario: "empty" } });
    const { page } = app;
    await page.evaluate(() => {
      window.__kiviMock.tokenDelayMs = 1;
    });
    await page.click(tid("json-toggle"));
    expect(await page.getAttribute(tid("json-toggle"), "aria-pressed")).toBe("true");
    await page.fill(tid("composer-input"), "Who are the parties, the date and the price?");
    await page.keyboard.press("Enter");
    await page.waitForSelector(`${tid("message-assistant")}[data-status="complete"]`);
    expect((await mockCalls(page)).find((c) => c.cmd === "send_message")?.args.asJson).toBe(true);

    const tree = page.locator(tid("json-answer"));
    await tree.waitFor();
    const text = (await tree.textContent()) ?? "";
    expect(text).toContain("parties");
    expect(text).toContain('"Ada Lovelace"');
    expect(text).toContain("{3 keys}");
    // Model text stays text: the string holding markup made no element.
    expect(text).toContain('"<b>not bold</b>"');
    expect(await tree.locator("b").count()).toBe(0);

    // A node collapses and opens again.
    const parties = tree.locator(tid("json-node")).nth(1);
    expect(await parties.getAttribute("open")).not.toBeNull();
    await parties.locator("summary").first().click();
    expect(await parties.getAttribute("open")).toBeNull();
    await parties.locator("summary").first().click();
    expect(await parties.getAttribute("open")).not.toBeNull();

    await page.click(tid("json-copy"));
    await page.locator(tid("toast-success")).first().waitFor();

    // Regenerating a JSON answer gives JSON again (the mock answers as the back end does).
    await page.hover(tid("message-assistant"));
    await page.click(tid("message-regenerate"));
    await page.waitForSelector(`${tid("message-assistant")}[data-status="complete"] ${tid("json-answer")}`);
  });

  it("shows history from the back end with an interrupted badge, and searches, renames and deletes chats", async () => {
    app = await openApp(env.browser, env.url);
    const { page } = app;
    expect(await page.locator(tid("chat-item")).count()).toBe(2);
    await page.locator(tid("badge-interrupted")).waitFor();
    expect(await page.locator(tid("badge-interrupted")).getAttribute("title")).toMatch(/Regenerate/);

    await page.fill(tid("chat-search"), "borrow");
    await page.waitForFunction(() => document.querySelectorAll('[data-testid="chat-item"]').length === 1);
    expect(await page.locator(tid("chat-title")).textContent()).toBe("Borrow checker question");
    await page.fill(tid("chat-search"), "zzzz-no-match");
    await page.locator(tid("chat-list-empty")).waitFor();
    await page.fill(tid("chat-search"), "");
    await page.waitForFunction(() => document.querySelectorAll('[data-testid="chat-item"]').length === 2);

    const row = page.locator(tid("chat-item")).first();
    await row.hover();
    await row.locator(tid("chat-rename")).click();
    await page.fill(tid("chat-rename-input"), "Whale notes");
    await page.keyboard.press("Enter");
    await page.waitForFunction(() => document.querySelector('[data-testid="chat-title"]')?.textContent === "Whale notes");

    await row.hover();
    await row.locator(tid("chat-delete")).click();
    await page.click(tid("confirm-ok"));
    await page.waitForFunction(() => document.querySelectorAll('[data-testid="chat-item"]').length === 1);
  });

  it("exports a chat in both formats and sets a system prompt", async () => {
    app = await openApp(env.browser, env.url);
    const { page } = app;
    await page.click(tid("export-button"));
    await page.click(tid("export-markdown"));
    await page.locator(tid("toast-success")).first().waitFor();
    await page.click(tid("export-button"));
    await page.click(tid("export-json"));
    await page.click(tid("system-prompt-button"));
    await page.fill(tid("system-prompt-input"), "Be brief.");
    await page.click(tid("system-prompt-save"));
    await page.waitForSelector(tid("system-prompt-dialog"), { state: "detached" });
    const calls = await mockCalls(page);
    expect(calls.filter((c) => c.cmd === "export_chat").map((c) => c.args.format)).toEqual(["markdown", "json"]);
    expect(calls.find((c) => c.cmd === "set_system_prompt")?.args.systemPrompt).toBe("Be brief.");
    await page.waitForFunction(() => /No cache yet/.test(document.querySelector('[data-testid="cache-note"]')?.textContent ?? ""));
  });

  it("explains a model that failed to load, and a message that could not be sent", async () => {
    app = await openApp(env.browser, env.url, { query: { scenario: "no-model" } });
    const { page } = app;
    const banner = page.locator(`${tid("model-banner")}[data-state="failed"]`);
    await banner.waitFor();
    expect(await banner.textContent()).toMatch(/failed to load.*download it again/);
    await page.fill(tid("composer-input"), "Hello?");
    await page.keyboard.press("Enter");
    const toast = page.locator(tid("toast-error"));
    await toast.waitFor();
    expect(await toast.textContent()).toMatch(/not sent.*No model is loaded/);
    // The text is given back so nothing is lost.
    await page.waitForFunction(() => (document.querySelector('[data-testid="composer-input"]') as HTMLTextAreaElement).value === "Hello?");
  });
});
