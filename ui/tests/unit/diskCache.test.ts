import { describe, expect, it } from "vitest";
import { diskCacheText } from "../../src/components/LivePanel";

describe("the panel's cache-file line", () => {
  it("says what happened to the file, its size and the time it took", () => {
    const file = { bytes: 12.5 * 1024 * 1024, tokens: 8474, seconds: 0.05 };
    expect(diskCacheText({ action: "saved", ...file })).toBe("Saved to disk · 12.5 MiB · 50 ms");
    expect(diskCacheText({ action: "restored", ...file })).toBe("Restored from disk · 12.5 MiB · 50 ms");
    expect(diskCacheText({ action: "reused", ...file })).toBe("Documents read from disk · 12.5 MiB · 50 ms");
  });
});
