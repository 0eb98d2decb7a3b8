import { defineConfig } from "vitest/config";

// Unit tests (npm test): pure logic and the sanitizer, in jsdom.
export default defineConfig({
  oxc: { jsx: { runtime: "automatic", importSource: "preact" } },
  test: {
    include: ["tests/unit/**/*.test.{ts,tsx}"],
    // Pure logic runs in node; files that need a DOM say `@vitest-environment jsdom`.
    environment: "node",
    environmentOptions: { jsdom: { pretendToBeVisual: true } },
    pool: "threads",
    maxWorkers: 2,
  },
});
