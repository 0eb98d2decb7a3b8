/** Number formatting for the panel, downloads and messages. Binary units (1 KiB = 1024 B). */

const UNITS = ["B", "KiB", "MiB", "GiB", "TiB"];

/** 0 → "0 B", 1536 → "1.50 KiB", 12.3 MiB → "12.3 MiB" (3 significant digits). */
export function formatBytes(bytes: number | null | undefined): string {
  if (bytes == null || !Number.isFinite(bytes) || bytes < 0) return "—";
  if (bytes < 1024) return `${Math.round(bytes)} B`;
  let value = bytes;
  let unit = 0;
  while (value >= 1024 && unit < UNITS.length - 1) {
    value /= 1024;
    unit++;
  }
  const digits = value >= 100 ? 0 : value >= 10 ? 1 : 2;
  let text = value.toFixed(digits);
  if (text === "1024" && unit < UNITS.length - 1) {
    text = "1.00";
    unit++;
  }
  return `${text} ${UNITS[unit]}`;
}

/** fp16 bytes over held bytes: "4.57×"; "—" when there is nothing to compare. */
export function formatRatio(fp16Bytes: number | null | undefined, heldBytes: number | null | undefined): string {
  const r = ratio(fp16Bytes, heldBytes);
  if (r == null) return "—";
  return `${r >= 10 ? r.toFixed(1) : r.toFixed(2)}×`;
}

/** fp16 / held, or null when either is missing or held is 0. */
export function ratio(fp16Bytes: number | null | undefined, heldBytes: number | null | undefined): number | null {
  if (fp16Bytes == null || heldBytes == null || !(heldBytes > 0) || !(fp16Bytes > 0)) return null;
  return fp16Bytes / heldBytes;
}

/** Seconds left as "< 1 s", "42 s", "3 min 05 s", "2 h 07 min"; "—" when unknown. */
export function formatEta(seconds: number | null | undefined): string {
  if (seconds == null || !Number.isFinite(seconds) || seconds < 0) return "—";
  if (seconds < 1) return "< 1 s";
  const s = Math.round(seconds);
  if (s < 60) return `${s} s`;
  if (s < 3600) return `${Math.floor(s / 60)} min ${String(s % 60).padStart(2, "0")} s`;
  const m = Math.round(s / 60);
  return `${Math.floor(m / 60)} h ${String(m % 60).padStart(2, "0")} min`;
}

/** Seconds from work left and a rate; null when the rate is unknown or zero. */
export function etaSeconds(remaining: number, perSecond: number | null | undefined): number | null {
  if (perSecond == null || !(perSecond > 0) || !Number.isFinite(perSecond)) return null;
  return Math.max(0, remaining) / perSecond;
}

/** 12345 → "12,345". */
export function formatCount(n: number | null | undefined): string {
  if (n == null || !Number.isFinite(n)) return "—";
  return Math.round(n).toLocaleString("en-US");
}

/** Compact token counts: 950 → "950", 12_345 → "12.3k", 1_250_000 → "1.25M". */
export function formatTokens(n: number | null | undefined): string {
  if (n == null || !Number.isFinite(n)) return "—";
  if (n < 1000) return String(Math.round(n));
  if (n < 1_000_000) return `${(n / 1000).toFixed(n < 10_000 ? 2 : n < 100_000 ? 1 : 0)}k`;
  return `${(n / 1_000_000).toFixed(2)}M`;
}

/** 18.234 → "18.2 tok/s"; "—" when unknown. */
export function formatRate(tokensPerSec: number | null | undefined): string {
  if (tokensPerSec == null || !Number.isFinite(tokensPerSec) || tokensPerSec < 0) return "—";
  const digits = tokensPerSec >= 100 ? 0 : 1;
  return `${tokensPerSec.toFixed(digits)} tok/s`;
}

/** Bytes per second: "3.40 MiB/s". */
export function formatSpeed(bytesPerSec: number | null | undefined): string {
  if (bytesPerSec == null || !Number.isFinite(bytesPerSec) || bytesPerSec < 0) return "—";
  return `${formatBytes(bytesPerSec)}/s`;
}

/** 350 → "350 ms", 1234 → "1.23 s", 75_000 → "1 min 15 s". */
export function formatDuration(ms: number | null | undefined): string {
  if (ms == null || !Number.isFinite(ms) || ms < 0) return "—";
  if (ms < 1000) return `${Math.round(ms)} ms`;
  if (ms < 60_000) return `${(ms / 1000).toFixed(ms < 10_000 ? 2 : 1)} s`;
  return formatEta(ms / 1000);
}

/** 0.4567 → "46%" (clamped to 0..100). */
export function formatPercent(fraction: number | null | undefined): string {
  if (fraction == null || !Number.isFinite(fraction)) return "—";
  return `${Math.round(Math.min(1, Math.max(0, fraction)) * 100)}%`;
}

/** A timestamp as "14:05" today, "Mon 14:05" this week, else "12 Mar 2025". */
export function formatTime(epochMs: number, now: number = Date.now()): string {
  const d = new Date(epochMs);
  const sameDay = new Date(now).toDateString() === d.toDateString();
  const hm = d.toLocaleTimeString("en-GB", { hour: "2-digit", minute: "2-digit" });
  if (sameDay) return hm;
  if (Math.abs(now - epochMs) < 6 * 86_400_000) return `${d.toLocaleDateString("en-GB", { weekday: "short" })} ${hm}`;
  return d.toLocaleDateString("en-GB", { day: "numeric", month: "short", year: "numeric" });
}
