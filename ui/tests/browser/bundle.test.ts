/** The production bundle: no mock, nothing CSP would block, nothing remote. */
import { existsSync, readdirSync, readFileSync } from "node:fs";
import { join } from "node:path";
import { describe, expect, it } from "vitest";
import { UI_ROOT } from "./harness";

const DIST = join(UI_ROOT, "dist");
const files = (ext: string) => readdirSync(join(DIST, "assets")).filter((f) => f.endsWith(ext)).map((f) => readFileSync(join(DIST, "assets", f), "utf8"));

describe("production bundle (dist/)", () => {
  it("exists (npm run build)", () => {
    expect(existsSync(join(DIST, "index.html"))).toBe(true);
  });

  it("does not contain the mock back end", () => {
    const html = readFileSync(join(DIST, "index.html"), "utf8");
    expect(html).not.toMatch(/e2e|mock/i);
    // Strings only the mock (src/e2e/) and @tauri-apps/api/mocks contain.
    for (const js of files(".js")) {
      for (const marker of ["__kiviMock", "shouldMockEvents", "The mock back end does not know", "installMockBackend"]) {
        expect(js.includes(marker), marker).toBe(false);
      }
    }
  });

  it("has no inline scripts, eval or new Function (script-src 'self')", () => {
    const html = readFileSync(join(DIST, "index.html"), "utf8");
    for (const m of html.matchAll(/<script\b([^>]*)>([\s\S]*?)<\/script>/g)) {
      expect(m[1]).toMatch(/src=/);
      expect(m[2]!.trim()).toBe("");
    }
    expect(html).not.toMatch(/\son[a-z]+=/i);
    for (const js of files(".js")) {
      expect(/\beval\(/.test(js), "eval(").toBe(false);
      expect(/new Function\(/.test(js), "new Function(").toBe(false);
    }
  });

  it("loads nothing remote (no CDN scripts, styles or fonts)", () => {
    const html = readFileSync(join(DIST, "index.html"), "utf8");
    expect(html).not.toMatch(/(src|href)="(https?:)?\/\//);
    for (const css of files(".css")) {
      expect(css).not.toMatch(/url\((["']?)(https?:)?\/\//);
      expect(css).not.toMatch(/@import/);
    }
  });
});
