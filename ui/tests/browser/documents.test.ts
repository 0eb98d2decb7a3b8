import { afterEach, describe, expect, it } from "vitest";
import { mockCalls, openApp, tid, useBrowser, type AppPage } from "./harness";

const env = useBrowser();
let app: AppPage | null = null;

/** Opens the app with no chats, starts one and attaches `path` through the file picker. */
async function attachInNewChat(path: string) {
  app = await openApp(env.browser, env.url, { query: { scenario: "empty" } });
  const { page } = app;
  await page.evaluate((picked) => {
    window.__kiviMock.pickResult = [picked];
  }, path);
  await page.click(tid("new-chat"));
  await page.click(tid("attach-button"));
  return page;
}
afterEach(async () => {
  if (app) {
    expect(app.problems.errors).toEqual([]);
    expect(app.problems.csp).toEqual([]);
    await app.close();
  }
  app = null;
});

describe("documents", () => {
  it("attaches a picked file as a chip with its tokens, shows prefill progress, and cancels it", async () => {
    app = await openApp(env.browser, env.url, { query: { scenario: "empty" } });
    const { page } = app;
    await page.evaluate(() => {
      window.__kiviMock.holdPrefill = true;
      window.__kiviMock.pickResult = ["/home/me/Documents/quarterly-report.md"];
    });
    await page.click(tid("welcome-attach"));
    const chip = page.locator(tid("doc-chip"));
    await chip.waitFor();
    expect(await chip.locator(".doc-name").textContent()).toBe("quarterly-report.md");
    expect(await chip.locator(tid("doc-tokens")).textContent()).toBe("5.23k tok");
    expect(await chip.getAttribute("data-fits")).toBe("true");
    // What reading it costs: the KV bytes with the current cache, against float16, and the time.
    // (The reading time shows on the chip until the reading starts, here at once.)
    expect(await chip.locator(tid("doc-kv")).textContent()).toMatch(/^[\d.]+ [KM]iB KV( · ~\d s)?$/);
    expect(await chip.getAttribute("title")).toMatch(/^quarterly-report\.md: 5,2\d\d tokens · KV cache with it: [\d.]+ [KM]iB with K\d+V\d+ \(float16: [\d.]+ [KM]iB\) · about \d s to read\. Read with the next message\.$/);

    const progress = page.locator(tid("prefill-progress"));
    await progress.waitFor();
    await page.waitForFunction(() => /tok\/s · .* left/.test(document.querySelector('[data-testid="prefill-text"]')?.textContent ?? ""));
    expect(await progress.textContent()).toMatch(/Reading quarterly-report\.md/);
    expect(await page.locator(tid("prefill-text")).textContent()).toMatch(/^[\d,]+ \/ 5,2\d\d tokens · 1874 tok\/s · .+ left$/);
    await page.waitForFunction(() => parseFloat((document.querySelector('[data-testid="prefill-bar"]') as HTMLElement).style.width) > 0);
    // Sending waits for the document; the stop button cancels the prefill.
    await expect(page.locator(tid("stop-button")).isVisible()).resolves.toBe(true);

    await page.click(tid("prefill-cancel"));
    await page.waitForSelector(tid("prefill-progress"), { state: "detached" });
    const calls = await mockCalls(page);
    expect(calls.map((c) => c.cmd)).toEqual(expect.arrayContaining(["pick_documents", "attach_document", "prefill_chat", "stop_generation"]));
    expect(calls.find((c) => c.cmd === "attach_document")?.args.path).toBe("/home/me/Documents/quarterly-report.md");
  });

  it("finishes a prefill and marks the document cached; Esc cancels a running one", async () => {
    const page = await attachInNewChat("/home/me/Documents/paper.pdf");
    await page.locator(tid("doc-cached")).waitFor({ timeout: 10_000 });
    expect(await page.locator(tid("prefill-progress")).count()).toBe(0);

    await page.evaluate(() => {
      window.__kiviMock.holdPrefill = true;
      window.__kiviMock.pickResult = ["/home/me/Documents/sotu-2016.txt"];
    });
    await page.click(tid("attach-button"));
    await page.locator(tid("prefill-progress")).waitFor();
    await page.keyboard.press("Escape");
    await page.waitForSelector(tid("prefill-progress"), { state: "detached" });
  });

  it("takes files dropped on the window (Tauri drag-drop events)", async () => {
    app = await openApp(env.browser, env.url, { query: { scenario: "empty" } });
    const { page } = app;
    await page.click(tid("new-chat"));
    await page.evaluate(() => window.__kiviMock.emit("tauri://drag-enter", { paths: ["/a/notes.txt"], position: { x: 10, y: 10 } }));
    await page.locator(tid("drop-overlay")).waitFor();
    await page.evaluate(() => window.__kiviMock.emit("tauri://drag-drop", { paths: ["/a/notes.txt", "/a/picture.png"], position: { x: 10, y: 10 } }));
    await page.waitForSelector(tid("drop-overlay"), { state: "detached" });
    await page.locator(tid("doc-chip")).waitFor();
    expect(await page.locator(".doc-name").textContent()).toBe("notes.txt");
    // The unsupported file is refused with advice.
    expect(await page.locator(tid("toast-error")).first().textContent()).toMatch(/picture\.png.*\.txt, \.md or \.pdf/);
    expect((await mockCalls(page)).filter((c) => c.cmd === "attach_document").length).toBe(1);
  });

  it("flags a document too long for the context and says what to do", async () => {
    const page = await attachInNewChat("/books/moby-dick.txt");
    const chip = page.locator(tid("doc-chip"));
    await chip.waitFor();
    expect(await chip.getAttribute("data-fits")).toBe("false");
    expect(await chip.locator(tid("doc-too-long")).isVisible()).toBe(true);
    expect(await chip.getAttribute("title")).toMatch(/287,412 tokens do not fit the context of 32,768.*Raise the context length in Settings/);
    expect(await page.locator(tid("toast-error")).textContent()).toMatch(/too long.*287,412 tokens.*32,768/);
    expect(await page.locator(tid("empty-chat")).textContent()).toMatch(/moby-dick\.txt is too long.*287,412 tokens.*raise the context length/);
    // How much fits: the context less the system prompt and the room for an answer.
    const maxTokens = (await page.evaluate(() => window.__kiviMock.settings())).sampling.maxTokens;
    const text = (await page.locator(tid("too-long-text")).textContent()) ?? "";
    const [, needed, fits] = /needs a context of ([\d,]+) tokens, and the context holds 32,768: ([\d,]+) of its tokens would fit/.exec(text) ?? [];
    const num = (s?: string) => Number(s?.replace(/,/g, ""));
    expect(num(needed) - 287_412 - maxTokens).toBeLessThan(8); // the system prompt's few tokens
    expect(num(fits)).toBe(32_768 - (num(needed) - 287_412));
    // No installed model reads 287k tokens: none is offered.
    expect(await page.locator(tid("use-longer-model")).count()).toBe(0);
    // No prefill for a document that does not fit.
    expect((await mockCalls(page)).some((c) => c.cmd === "prefill_chat")).toBe(false);
    await chip.locator(tid("doc-remove")).click();
    await page.waitForSelector(tid("doc-chip"), { state: "detached" });
  });

  it("reads only the part of a too-long document that fits, when asked, and says so", async () => {
    const page = await attachInNewChat("/books/moby-dick.txt");
    await page.locator(tid("doc-chip")).waitFor();
    const button = page.locator(tid("read-part"));
    expect(await button.textContent()).toMatch(/Read the part that fits \(about [\d,]+ tokens\)/);
    // Nothing is read before the user asks.
    expect((await mockCalls(page)).some((c) => c.cmd === "read_part_of_document")).toBe(false);
    await button.click();
    const chip = page.locator(`${tid("doc-chip")}[data-fits="true"]`);
    await chip.waitFor();
    expect(await page.locator(".doc-name").textContent()).toMatch(/^moby-dick\.txt \(first [\d,]+ of 287,412 tokens\)$/);
    expect(await page.locator(tid("read-part")).count()).toBe(0);
    const calls = await mockCalls(page);
    expect(calls.filter((c) => c.cmd === "read_part_of_document").length).toBe(1);
    // The part is read into the cache as any document that fits.
    expect(calls.some((c) => c.cmd === "prefill_chat")).toBe(true);
  });
});
