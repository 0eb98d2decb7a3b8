import { describe, expect, it } from "vitest";
import {
  etaSeconds,
  formatBytes,
  formatCount,
  formatDuration,
  formatEta,
  formatPercent,
  formatRate,
  formatRatio,
  formatSpeed,
  formatTime,
  formatTokens,
  ratio,
} from "../../src/lib/format";

describe("formatBytes", () => {
  it("uses binary units with three significant digits", () => {
    expect(formatBytes(0)).toBe("0 B");
    expect(formatBytes(512)).toBe("512 B");
    expect(formatBytes(1023)).toBe("1023 B");
    expect(formatBytes(1024)).toBe("1.00 KiB");
    expect(formatBytes(1536)).toBe("1.50 KiB");
    expect(formatBytes(12.34 * 1024 ** 2)).toBe("12.3 MiB");
    expect(formatBytes(187 * 1024 ** 2)).toBe("187 MiB");
    expect(formatBytes(1.25 * 1024 ** 3)).toBe("1.25 GiB");
    expect(formatBytes(2 * 1024 ** 4)).toBe("2.00 TiB");
  });
  it("rounds up to the next unit instead of printing 1024", () => {
    expect(formatBytes(1024 ** 2 - 1)).toBe("1.00 MiB");
  });
  it("shows a dash for missing or invalid values", () => {
    expect(formatBytes(null)).toBe("—");
    expect(formatBytes(undefined)).toBe("—");
    expect(formatBytes(-1)).toBe("—");
    expect(formatBytes(Number.NaN)).toBe("—");
  });
});

describe("ratios", () => {
  it("divides fp16 by held bytes", () => {
    expect(ratio(927, 187)).toBeCloseTo(4.957, 3);
    expect(formatRatio(927, 187)).toBe("4.96×");
    expect(formatRatio(1000, 100)).toBe("10.0×");
    expect(formatRatio(100, 100)).toBe("1.00×");
  });
  it("has no ratio when nothing is held", () => {
    expect(ratio(0, 0)).toBeNull();
    expect(formatRatio(100, 0)).toBe("—");
    expect(formatRatio(null, 5)).toBe("—");
  });
});

describe("time left", () => {
  it("formats seconds, minutes and hours", () => {
    expect(formatEta(0.4)).toBe("< 1 s");
    expect(formatEta(42)).toBe("42 s");
    expect(formatEta(59.6)).toBe("1 min 00 s");
    expect(formatEta(185)).toBe("3 min 05 s");
    expect(formatEta(7620)).toBe("2 h 07 min");
    expect(formatEta(null)).toBe("—");
    expect(formatEta(Number.POSITIVE_INFINITY)).toBe("—");
  });
  it("derives an ETA from remaining work and a rate", () => {
    expect(etaSeconds(1000, 250)).toBe(4);
    expect(etaSeconds(-5, 250)).toBe(0);
    expect(etaSeconds(1000, 0)).toBeNull();
    expect(etaSeconds(1000, null)).toBeNull();
  });
});

describe("other formats", () => {
  it("formats rates, speeds, counts, tokens, durations, percents", () => {
    expect(formatRate(18.234)).toBe("18.2 tok/s");
    expect(formatRate(1874.2)).toBe("1874 tok/s");
    expect(formatRate(null)).toBe("—");
    expect(formatSpeed(3.4 * 1024 ** 2)).toBe("3.40 MiB/s");
    expect(formatCount(1234567)).toBe("1,234,567");
    expect(formatTokens(950)).toBe("950");
    expect(formatTokens(7412)).toBe("7.41k");
    expect(formatTokens(12_345)).toBe("12.3k");
    expect(formatTokens(287_412)).toBe("287k");
    expect(formatTokens(1_250_000)).toBe("1.25M");
    expect(formatDuration(350)).toBe("350 ms");
    expect(formatDuration(1234)).toBe("1.23 s");
    expect(formatDuration(75_000)).toBe("1 min 15 s");
    expect(formatPercent(0.4567)).toBe("46%");
    expect(formatPercent(1.5)).toBe("100%");
  });
  it("formats timestamps relative to now", () => {
    const now = new Date(2025, 2, 12, 15, 30).getTime();
    expect(formatTime(new Date(2025, 2, 12, 9, 5).getTime(), now)).toBe("09:05");
    expect(formatTime(new Date(2025, 2, 10, 9, 5).getTime(), now)).toMatch(/^Mon 09:05$/);
    expect(formatTime(new Date(2024, 0, 3).getTime(), now)).toBe("3 Jan 2024");
  });
});
