import { defineConfig } from "vitest/config";

// End-to-end tests of the real desktop app (scripts/e2e-app.sh starts Xvfb and tauri-driver
// first): one session at a time, long timeouts (a debug build on the CPU).
export default defineConfig({
  test: {
    include: ["tests/app/**/*.test.ts"],
    environment: "node",
    fileParallelism: false,
    maxWorkers: 1,
    testTimeout: 600_000,
    hookTimeout: 300_000,
  },
});
