/** Shared by the end-to-end tests of the real app (tests/app/*.test.ts). */
import type { remote } from "webdriverio";

export type Browser = Awaited<ReturnType<typeof remote>>;

export const sel = (id: string) => `[data-testid="${id}"]`;

/** The text of every element matching `selector` (WebKitWebDriver's getText() is unreliable). */
export async function texts(b: Browser, selector: string): Promise<string[]> {
  return b.execute((s: string) => [...document.querySelectorAll(s)].map((e) => (e.textContent ?? "").trim()), selector);
}

/** Calls a command through the app's own IPC (checks and set-up; the UI does the work). */
export async function invoke<T>(b: Browser, cmd: string, args: Record<string, unknown> = {}): Promise<T> {
  return b.executeAsync(
    (c: string, a: Record<string, unknown>, done: (v: unknown) => void) => {
      const w = window as unknown as { __TAURI_INTERNALS__: { invoke: (c: string, a: unknown) => Promise<unknown> } };
      w.__TAURI_INTERNALS__.invoke(c, a).then(done, (e: unknown) => done({ __error: e }));
    },
    cmd,
    args,
  ) as Promise<T>;
}
