/** Screenshots of the main views for the README (test-results/screenshots/*.png). */
import { mkdirSync } from "node:fs";
import { join } from "node:path";
import { afterEach, describe, expect, it } from "vitest";
import { openApp, SCREENSHOTS, tid, useBrowser, type AppPage } from "./harness";

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

mkdirSync(SCREENSHOTS, { recursive: true });
const shot = (name: string) => join(SCREENSHOTS, `${name}.png`);

/** Attaches a document, lets it prefill, then streams an answer: the panel gets a real history. */
async function documentThenAnswer(a: AppPage, question: string): Promise<void> {
  const { page } = a;
  await page.evaluate(() => {
    window.__kiviMock.tokenDelayMs = 45;
    window.__kiviMock.pickResult = ["/home/me/Documents/quarterly-report.md"];
  });
  await page.click(tid("new-chat"));
  await page.click(tid("attach-button"));
  await page.locator(tid("doc-cached")).waitFor({ timeout: 15_000 });
  await page.fill(tid("composer-input"), question);
  await page.keyboard.press("Enter");
  await page.waitForFunction(() => {
    const all = document.querySelectorAll('[data-testid="message-assistant"]');
    return all.length === 1 && all[0]!.getAttribute("data-status") === "complete";
  }, undefined, { timeout: 30_000 });
  await page.waitForTimeout(400);
}

describe("screenshots", () => {
  it("chat with a streamed answer and the live panel (light)", async () => {
    app = await openApp(env.browser, env.url, { width: 1440, height: 900 });
    await documentThenAnswer(app, "What does the report say about why Ishmael goes to sea? Quote it.");
    await app.page.screenshot({ path: shot("chat") });
    await app.page.locator(tid("live-panel")).screenshot({ path: shot("live-panel") });
  });

  it("chat while generating (dark)", async () => {
    app = await openApp(env.browser, env.url, { width: 1440, height: 900, colorScheme: "dark" });
    const { page } = app;
    await page.evaluate(() => {
      window.__kiviMock.tokenDelayMs = 70;
    });
    await page.fill(tid("composer-input"), "Summarize chapter one in three points.");
    await page.keyboard.press("Enter");
    await page.waitForFunction(() => (document.querySelector('[data-status="streaming"]')?.textContent ?? "").includes("Providence"), undefined, { timeout: 30_000 });
    await page.screenshot({ path: shot("chat-dark") });
    await page.keyboard.press("Escape");
  });

  it("settings pane", async () => {
    app = await openApp(env.browser, env.url, { width: 1440, height: 900, query: { panel: "0" } });
    const { page } = app;
    await page.click(tid("nav-settings"));
    await page.click(tid("kbits-4"));
    await page.locator(tid("cache-change-notice")).waitFor();
    await page.screenshot({ path: shot("settings") });
    await page.fill(tid("residual-input"), "100");
    await page.locator(tid("residual-error")).waitFor();
    await page.locator(tid("settings-cache")).screenshot({ path: shot("settings-validation") });
  });

  it("document prefill", async () => {
    app = await openApp(env.browser, env.url, { width: 1440, height: 900 });
    const { page } = app;
    await page.evaluate(() => {
      window.__kiviMock.holdPrefill = true;
      window.__kiviMock.prefillHoldAt = 0.58;
      window.__kiviMock.pickResult = ["/home/me/Documents/paper.pdf", "/home/me/Documents/moby-dick.txt"];
    });
    await page.click(tid("new-chat"));
    await page.click(tid("attach-button"));
    await page.locator(tid("prefill-progress")).waitFor();
    await page.waitForFunction(() => parseFloat((document.querySelector('[data-testid="prefill-bar"]') as HTMLElement).style.width) > 50);
    await page.evaluate(() => document.querySelectorAll('[data-testid="toast-error"] button').forEach((b) => (b as HTMLElement).click()));
    await page.waitForTimeout(700);
    await page.screenshot({ path: shot("documents") });
  });

  it("model manager", async () => {
    app = await openApp(env.browser, env.url, { width: 1440, height: 900, query: { panel: "0" } });
    const { page } = app;
    await page.click(tid("nav-models"));
    await page.locator(`${tid("download-resume")}`).click();
    await page.waitForTimeout(900);
    await page.screenshot({ path: shot("models") });
  });

  it("welcome screen and the smallest window (900×600)", async () => {
    app = await openApp(env.browser, env.url, { width: 1280, height: 800, query: { scenario: "empty", panel: "0" } });
    await app.page.locator(tid("welcome")).waitFor();
    await app.page.screenshot({ path: shot("welcome") });
    await app.close();
    app = await openApp(env.browser, env.url, { width: 900, height: 600, query: { panel: "0" } });
    await app.page.screenshot({ path: shot("small-window") });
    await app.page.click(tid("panel-toggle"));
    await app.page.locator(tid("live-panel")).waitFor();
    await app.page.waitForTimeout(300);
    await app.page.screenshot({ path: shot("small-window-panel") });
  });
});
