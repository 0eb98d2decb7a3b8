import { fileURLToPath } from "node:url";
import { defineConfig } from "vite";

const here = (p: string) => fileURLToPath(new URL(p, import.meta.url));

// `--mode e2e` builds the test entry (e2e.html: the app plus a mocked Tauri back end) into
// dist-e2e/. The production build (index.html → dist/) never includes the mock.
export default defineConfig(({ mode }) => {
  const e2e = mode === "e2e";
  return {
    clearScreen: false,
    server: { port: 1420, strictPort: true },
    oxc: { jsx: { runtime: "automatic", importSource: "preact" } },
    build: {
      target: "es2022",
      outDir: e2e ? "dist-e2e" : "dist",
      emptyOutDir: true,
      chunkSizeWarningLimit: 400,
      rolldownOptions: { input: here(e2e ? "e2e.html" : "index.html") },
    },
  };
});
