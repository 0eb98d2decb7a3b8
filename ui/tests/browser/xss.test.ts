import { afterEach, describe, expect, it } from "vitest";
import type { Page } from "playwright-core";
import { openApp, tid, useBrowser, type AppPage } from "./harness";

const env = useBrowser();
let app: AppPage | null = null;
afterEach(async () => {
  if (app) {
    expect(app.problems.errors).toEqual([]);
    await app.close();
  }
  app = null;
});

/** Model output that tries every trick to run `window.__xss = 1`. */
const PAYLOAD = [
  "Here is the summary you asked for.",
  "",
  '<script>window.__xss = 1</script>',
  '<img src=x onerror="window.__xss=1">',
  '<svg onload="window.__xss=1"><circle r="4"/></svg>',
  '<iframe srcdoc="<script>parent.__xss=1</script>"></iframe>',
  '<div onclick="window.__xss=1" onmouseover="window.__xss=1">hover me</div>',
  '<a href="javascript:window.__xss=1">html link</a>',
  "[markdown link](javascript:window.__xss=1)",
  "[data link](data:text/html;base64,PHNjcmlwdD5wYXJlbnQuX194c3M9MTwvc2NyaXB0Pg==)",
  "![img](x\" onerror=\"window.__xss=1)",
  '<math><mtext><table><mglyph><style><img src=x onerror="window.__xss=1"></style></mglyph></table></mtext></math>',
  '<object data="javascript:window.__xss=1"></object><embed src="javascript:window.__xss=1">',
  '<form action="javascript:window.__xss=1"><button>go</button></form>',
  "```html",
  '<img src=x onerror="window.__xss=1">',
  "```",
  "The end.",
].join("\n");

async function assertInert(page: Page): Promise<void> {
  // Give any handler a chance to fire: hover and click everything in the answer.
  const answer = page.locator(tid("message-assistant")).last();
  for (const el of await answer.locator(".markdown *").all()) {
    await el.hover({ force: true, timeout: 1000 }).catch(() => undefined);
  }
  for (const a of await answer.locator(".markdown a").all()) await a.click({ force: true, timeout: 1000 }).catch(() => undefined);
  await page.waitForTimeout(300);
  expect(await page.evaluate(() => window.__xss)).toBeUndefined();
  const found = await page.evaluate(() => {
    const root = document.querySelector('[data-testid="messages"]')!;
    const bad = root.querySelectorAll("script, iframe, object, embed, svg:not(.icon):not(.logo), math, img, form, style, link, meta");
    const handlers: string[] = [];
    for (const el of Array.from(root.querySelectorAll("*"))) {
      for (const a of Array.from(el.attributes)) {
        if (a.name.startsWith("on")) handlers.push(`${el.tagName}.${a.name}`);
        if (a.name === "href" && !/^(https?:|mailto:)/i.test(a.value)) handlers.push(`${el.tagName}[href=${a.value}]`);
        if (["src", "srcdoc", "style", "action", "formaction"].includes(a.name)) handlers.push(`${el.tagName}[${a.name}]`);
      }
    }
    return { bad: Array.from(bad).map((e) => e.tagName), handlers, url: location.href };
  });
  expect(found.bad).toEqual([]);
  expect(found.handlers).toEqual([]);
  expect(found.url).not.toMatch(/^(javascript|data):/);
}

describe("XSS in model output", () => {
  for (const csp of [false, true]) {
    it(`renders a hostile answer inert ${csp ? "under the app's CSP" : "without any CSP (the sanitizer alone)"}`, async () => {
      app = await openApp(env.browser, env.url, { query: csp ? { scenario: "empty" } : { scenario: "empty", nocsp: "1" } });
      const { page } = app;
      await page.evaluate((p) => {
        window.__kiviMock.tokenDelayMs = 2;
        window.__kiviMock.replies = [p];
      }, PAYLOAD);
      await page.fill(tid("composer-input"), "Summarize");
      await page.keyboard.press("Enter");
      await page.waitForSelector(`${tid("message-assistant")}[data-status="complete"]`);
      const shown = (await page.locator(`${tid("message-assistant")} ${tid("message-content")}`).textContent()) ?? "";
      // Raw HTML is shown as text, so the user sees what the model wrote.
      expect(shown).toContain("<script>window.__xss = 1</script>");
      expect(shown).toContain("The end.");
      await assertInert(page);
      if (csp) expect(app.problems.csp).toEqual([]);
    });
  }

  it("treats a streaming partial payload the same (tag split across tokens)", async () => {
    app = await openApp(env.browser, env.url, { query: { scenario: "empty", nocsp: "1" } });
    const { page } = app;
    await page.evaluate(() => {
      window.__kiviMock.tokenDelayMs = 30;
      window.__kiviMock.replies = ['Start <img src=x one rror=1> <img src=x onerror="window.__xss=1"> <scr ipt>x</scr ipt> end'];
    });
    await page.fill(tid("composer-input"), "go");
    await page.keyboard.press("Enter");
    await page.waitForSelector(`${tid("message-assistant")}[data-status="complete"]`);
    await assertInert(page);
  });

  it("shows chat titles, user text and document names as text", async () => {
    app = await openApp(env.browser, env.url, { query: { scenario: "empty", nocsp: "1" } });
    const { page } = app;
    const evil = '<img src=x onerror="window.__xss=1">';
    await page.evaluate((p) => {
      window.__kiviMock.tokenDelayMs = 1;
      window.__kiviMock.pickResult = [`/tmp/${p}.md`];
    }, evil);
    await page.fill(tid("composer-input"), evil);
    await page.keyboard.press("Enter");
    await page.waitForSelector(`${tid("message-assistant")}[data-status="complete"]`);
    await page.click(tid("attach-button"));
    await page.locator(tid("doc-chip")).waitFor();
    expect(await page.locator(`${tid("message-user")} ${tid("message-content")}`).textContent()).toBe(evil);
    expect(await page.locator(tid("chat-heading")).textContent()).toBe(evil.length > 48 ? `${evil.slice(0, 47)}…` : evil);
    expect(await page.locator(".doc-name").textContent()).toBe(`${evil}.md`);
    await page.waitForTimeout(200);
    expect(await page.evaluate(() => window.__xss)).toBeUndefined();
    expect(await page.evaluate(() => document.querySelectorAll("img").length)).toBe(0);
  });
});
