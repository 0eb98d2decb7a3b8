/** @vitest-environment jsdom */
import { describe, expect, it, vi } from "vitest";
import { Store } from "../../src/state/store";
import { History } from "../../src/state/statsHistory";
import type { StatsSnapshot } from "../../src/api/types";
import { niceCeil } from "../../src/components/KvChart";

describe("Store", () => {
  it("applies updates at once and notifies once per frame", async () => {
    const s = new Store({ a: 1, b: "x" });
    const fn = vi.fn();
    s.subscribe(fn);
    s.set({ a: 2 });
    s.set((st) => ({ a: st.a + 1 }));
    expect(s.get()).toEqual({ a: 3, b: "x" });
    expect(fn).not.toHaveBeenCalled();
    s.flush();
    expect(fn).toHaveBeenCalledTimes(1);
    s.set({ b: "y" });
    await new Promise((r) => setTimeout(r, 150));
    expect(fn).toHaveBeenCalledTimes(2);
  });
});

const snap = (t: number, fp16: number, held: number): StatsSnapshot =>
  ({ timestampMs: t, kvFp16Bytes: fp16, kvHeldBytes: held, tokens: fp16 / 10 }) as StatsSnapshot;

describe("stats history", () => {
  it("keeps the newest samples and drops out-of-order ones", () => {
    const h = new History(3);
    h.push(snap(1, 10, 5));
    h.push(snap(2, 20, 6));
    h.push(snap(2, 99, 99));
    h.push(snap(1, 99, 99));
    h.push(snap(3, 30, 7));
    h.push(snap(4, 40, 8));
    expect(h.samples.map((s) => s.t)).toEqual([2, 3, 4]);
    const v = h.version;
    h.clear();
    expect(h.samples.length).toBe(0);
    expect(h.version).toBe(v + 1);
  });

  it("picks readable axis tops", () => {
    expect(niceCeil(0.98)).toBe(1);
    expect(niceCeil(1.3)).toBe(2);
    expect(niceCeil(2.2)).toBe(2.5);
    expect(niceCeil(7)).toBe(10);
    expect(niceCeil(0)).toBe(1);
  });
});
