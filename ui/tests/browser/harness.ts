/**
 * Browser-test plumbing: a static server for the e2e build (dist-e2e/) that sends the app's
 * real Content-Security-Policy, and a headless Chromium (Debian's, via playwright-core).
 */
import { createServer, type Server } from "node:http";
import { existsSync, readFileSync, statSync } from "node:fs";
import { extname, join, normalize, resolve } from "node:path";
import { fileURLToPath } from "node:url";
import { chromium, type Browser, type Page } from "playwright-core";
import { afterAll, beforeAll } from "vitest";

export const UI_ROOT = resolve(fileURLToPath(new URL("../..", import.meta.url)));
export const DIST = join(UI_ROOT, "dist-e2e");
export const SCREENSHOTS = join(UI_ROOT, "test-results", "screenshots");

const FALLBACK_CSP =
  "default-src 'self'; script-src 'self'; style-src 'self' 'unsafe-inline'; img-src 'self' data:; connect-src ipc: http://ipc.localhost";

/** The CSP from src-tauri/tauri.conf.json (what the app runs under), else the documented one. */
export function appCsp(): string {
  try {
    const conf = JSON.parse(readFileSync(join(UI_ROOT, "..", "src-tauri", "tauri.conf.json"), "utf8"));
    const csp = conf?.app?.security?.csp;
    if (typeof csp === "string" && csp) return csp;
  } catch {
    /* fall back */
  }
  return FALLBACK_CSP;
}

const TYPES: Record<string, string> = {
  ".html": "text/html; charset=utf-8",
  ".js": "text/javascript; charset=utf-8",
  ".css": "text/css; charset=utf-8",
  ".svg": "image/svg+xml",
  ".png": "image/png",
  ".json": "application/json",
};

/** Serves dist-e2e on 127.0.0.1 (random port). `?nocsp=1` on the page URL drops the CSP header. */
export function startServer(): Promise<{ server: Server; url: string }> {
  if (!existsSync(join(DIST, "e2e.html"))) throw new Error("dist-e2e/ is missing: run `vite build --mode e2e` first (npm run test:browser does).");
  const csp = appCsp();
  const server = createServer((req, res) => {
    const u = new URL(req.url ?? "/", "http://localhost");
    let path = normalize(decodeURIComponent(u.pathname)).replace(/^(\.\.[/\\])+/, "");
    if (path === "/" || path === "") path = "/e2e.html";
    const file = join(DIST, path);
    if (!file.startsWith(DIST) || !existsSync(file) || !statSync(file).isFile()) {
      res.writeHead(404).end("not found");
      return;
    }
    const headers: Record<string, string> = { "Content-Type": TYPES[extname(file)] ?? "application/octet-stream", "Cache-Control": "no-store" };
    if (extname(file) === ".html" && u.searchParams.get("nocsp") !== "1") headers["Content-Security-Policy"] = csp;
    res.writeHead(200, headers).end(readFileSync(file));
  });
  return new Promise((ok) => {
    server.listen(0, "127.0.0.1", () => {
      const addr = server.address();
      const port = typeof addr === "object" && addr ? addr.port : 0;
      ok({ server, url: `http://127.0.0.1:${port}/` });
    });
  });
}

export const CHROMIUM = process.env.CHROMIUM_PATH ?? "/usr/bin/chromium";

export function launchBrowser(): Promise<Browser> {
  return chromium.launch({
    executablePath: CHROMIUM,
    args: ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run", "--disable-background-networking", "--disable-component-update", "--disable-sync"],
  });
}

export interface PageProblems {
  errors: string[];
  csp: string[];
}

/** Collects uncaught errors, console errors and CSP violations of a page. */
export function watchProblems(page: Page): PageProblems {
  const problems: PageProblems = { errors: [], csp: [] };
  page.on("pageerror", (e) => problems.errors.push(String(e)));
  page.on("console", (m) => {
    const text = m.text();
    if (/Content.Security.Policy|Refused to/i.test(text)) problems.csp.push(text);
    else if (m.type() === "error") problems.errors.push(text);
  });
  return problems;
}

export interface AppPage {
  page: Page;
  problems: PageProblems;
  close: () => Promise<void>;
}

export interface OpenOptions {
  query?: Record<string, string>;
  width?: number;
  height?: number;
  colorScheme?: "light" | "dark";
}

/** Opens the e2e build in a fresh context and waits until the app has booted. */
export async function openApp(browser: Browser, baseUrl: string, opts: OpenOptions = {}): Promise<AppPage> {
  const context = await browser.newContext({
    viewport: { width: opts.width ?? 1280, height: opts.height ?? 800 },
    colorScheme: opts.colorScheme ?? "light",
    deviceScaleFactor: 1,
  });
  const page = await context.newPage();
  const problems = watchProblems(page);
  const q = new URLSearchParams({ panel: "1", ...opts.query }).toString();
  await page.goto(`${baseUrl}?${q}`);
  await page.waitForSelector('[data-testid="app"]', { timeout: 15_000 });
  return { page, problems, close: () => context.close() };
}

/** `[data-testid="id"]`. */
export const tid = (id: string) => `[data-testid="${id}"]`;

/** Starts the server and a browser for a test file; closes both after it. */
export function useBrowser(): { browser: Browser; url: string } {
  const ctx = {} as { browser: Browser; url: string; server: Server };
  beforeAll(async () => {
    const s = await startServer();
    ctx.server = s.server;
    ctx.url = s.url;
    ctx.browser = await launchBrowser();
  });
  afterAll(async () => {
    await ctx.browser?.close();
    ctx.server?.close();
  });
  return ctx;
}

/** Calls recorded by the mock back end. */
export function mockCalls(page: Page): Promise<{ cmd: string; args: Record<string, unknown> }[]> {
  return page.evaluate(() => window.__kiviMock.calls);
}
