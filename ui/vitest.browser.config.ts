import { defineConfig } from "vitest/config";

// Browser tests (npm run test:browser): the built e2e bundle in headless Chromium.
// One file at a time: the machine is small and each file runs its own browser.
export default defineConfig({
  test: {
    include: ["tests/browser/**/*.test.ts"],
    environment: "node",
    fileParallelism: false,
    maxWorkers: 1,
    testTimeout: 60_000,
    hookTimeout: 120_000,
  },
});
