/**
 * KV bytes over time on a canvas: fp16-equivalent vs held (left axis) and their ratio
 * (right axis). Drawn only when new samples arrive (the store notifies once per frame)
 * or the size or theme changes.
 */
import { useEffect, useRef } from "preact/hooks";
import { formatBytes } from "../lib/format";
import type { Sample } from "../state/statsHistory";

const WINDOW_MS = 120_000;

/** A "nice" upper bound (1, 2, 2.5, 5 × 10^k) at or above v. */
export function niceCeil(v: number): number {
  if (!(v > 0)) return 1;
  const exp = Math.pow(10, Math.floor(Math.log10(v)));
  for (const m of [1, 2, 2.5, 5, 10]) if (m * exp >= v) return m * exp;
  return 10 * exp;
}

/** Bytes axis top: a multiple of a power of 1024 that reads well. */
function niceBytesCeil(v: number): number {
  if (!(v > 0)) return 1024 * 1024;
  let unit = 1;
  while (v / unit >= 1000) unit *= 1024;
  const top = niceCeil(v / unit);
  // 1000 MiB reads worse than 1 GiB (with quarter ticks of 256 MiB).
  return top >= 1000 ? unit * 1024 : top * unit;
}

function cssVar(el: Element, name: string, fallback: string): string {
  return getComputedStyle(el).getPropertyValue(name).trim() || fallback;
}

export function drawChart(canvas: HTMLCanvasElement, samples: readonly Sample[]): void {
  const rect = canvas.getBoundingClientRect();
  const dpr = window.devicePixelRatio || 1;
  const w = Math.max(1, Math.round(rect.width));
  const h = Math.max(1, Math.round(rect.height));
  if (canvas.width !== w * dpr || canvas.height !== h * dpr) {
    canvas.width = w * dpr;
    canvas.height = h * dpr;
  }
  const ctx = canvas.getContext("2d");
  if (!ctx) return;
  ctx.setTransform(dpr, 0, 0, dpr, 0, 0);
  ctx.clearRect(0, 0, w, h);

  const colFp16 = cssVar(canvas, "--chart-fp16", "#94a3b8");
  const colHeld = cssVar(canvas, "--chart-held", "#2563eb");
  const colRatio = cssVar(canvas, "--chart-ratio", "#d97706");
  const colGrid = cssVar(canvas, "--chart-grid", "rgba(127,127,127,0.18)");
  const colText = cssVar(canvas, "--text-muted", "#64748b");

  const padL = 58, padR = 34, padT = 8, padB = 20;
  const pw = w - padL - padR;
  const ph = h - padT - padB;
  if (pw < 20 || ph < 20) return;

  const last = samples[samples.length - 1];
  const t1 = last ? last.t : Date.now();
  const first = samples[0];
  const t0 = first && t1 - first.t < WINDOW_MS ? Math.min(first.t, t1 - 10_000) : t1 - WINDOW_MS;
  const visible = samples.filter((s) => s.t >= t0);

  let maxBytes = 0;
  let maxRatio = 0;
  for (const s of visible) {
    maxBytes = Math.max(maxBytes, s.fp16, s.held);
    if (s.held > 0 && s.fp16 > 0) maxRatio = Math.max(maxRatio, s.fp16 / s.held);
  }
  const yTop = niceBytesCeil(maxBytes * 1.08);
  const rTop = Math.max(2, niceCeil(maxRatio * 1.15));

  const x = (t: number) => padL + ((t - t0) / Math.max(1, t1 - t0)) * pw;
  const y = (b: number) => padT + ph - (b / yTop) * ph;
  const yr = (r: number) => padT + ph - (r / rTop) * ph;

  ctx.font = "10.5px system-ui, -apple-system, 'Segoe UI', sans-serif";
  ctx.lineWidth = 1;
  ctx.strokeStyle = colGrid;
  ctx.fillStyle = colText;
  ctx.textBaseline = "middle";
  for (let i = 0; i <= 4; i++) {
    const v = (yTop * i) / 4;
    const yy = Math.round(y(v)) + 0.5;
    ctx.beginPath();
    ctx.moveTo(padL, yy);
    ctx.lineTo(padL + pw, yy);
    ctx.stroke();
    ctx.textAlign = "right";
    ctx.fillText(v === 0 ? "0" : formatBytes(v), padL - 6, yy);
    ctx.textAlign = "left";
    const r = (rTop * i) / 4;
    ctx.fillText(`${Number.isInteger(r) ? r : r.toFixed(1)}×`, padL + pw + 6, yy);
  }
  ctx.textAlign = "center";
  ctx.textBaseline = "alphabetic";
  const spanS = (t1 - t0) / 1000;
  for (const frac of [0, 0.5, 1]) {
    const secs = Math.round(spanS * (1 - frac));
    ctx.fillText(secs === 0 ? "now" : `-${secs}s`, padL + frac * pw, h - 5);
  }

  if (!visible.length) return;

  const line = (pick: (s: Sample) => number | null, color: string, dash: number[], width: number, fill = false) => {
    ctx.beginPath();
    ctx.setLineDash(dash);
    ctx.strokeStyle = color;
    ctx.lineWidth = width;
    let started = false;
    let firstX = 0;
    let lastX = 0;
    for (const s of visible) {
      const v = pick(s);
      if (v == null) continue;
      const xx = x(s.t);
      if (!started) {
        ctx.moveTo(xx, v);
        firstX = xx;
        started = true;
      } else ctx.lineTo(xx, v);
      lastX = xx;
    }
    if (visible.length === 1 && started) ctx.lineTo(lastX - 0.01, pick(visible[0]!) ?? 0);
    ctx.stroke();
    if (fill && started) {
      ctx.lineTo(lastX, padT + ph);
      ctx.lineTo(firstX, padT + ph);
      ctx.closePath();
      ctx.globalAlpha = 0.12;
      ctx.fillStyle = color;
      ctx.fill();
      ctx.globalAlpha = 1;
    }
    ctx.setLineDash([]);
  };

  line((s) => y(s.fp16), colFp16, [], 1.6);
  line((s) => y(s.held), colHeld, [], 2.2, true);
  line((s) => (s.held > 0 && s.fp16 > 0 ? yr(s.fp16 / s.held) : null), colRatio, [5, 4], 1.6);

  for (const [v, c] of [[y(last!.fp16), colFp16], [y(last!.held), colHeld]] as const) {
    ctx.beginPath();
    ctx.fillStyle = c;
    ctx.arc(x(last!.t), v, 3, 0, Math.PI * 2);
    ctx.fill();
  }
}

export function KvChart({ samples, version, label }: { samples: readonly Sample[]; version: number; label: string }) {
  const ref = useRef<HTMLCanvasElement>(null);
  const data = useRef(samples);
  data.current = samples;

  useEffect(() => {
    const canvas = ref.current;
    if (!canvas) return;
    let frame = 0;
    const redraw = () => {
      if (frame) return;
      frame = requestAnimationFrame(() => {
        frame = 0;
        drawChart(canvas, data.current);
      });
    };
    const ro = new ResizeObserver(redraw);
    ro.observe(canvas);
    const mq = window.matchMedia("(prefers-color-scheme: dark)");
    mq.addEventListener("change", redraw);
    const mo = new MutationObserver(redraw);
    mo.observe(document.documentElement, { attributes: true, attributeFilter: ["data-theme"] });
    return () => {
      ro.disconnect();
      mq.removeEventListener("change", redraw);
      mo.disconnect();
      if (frame) cancelAnimationFrame(frame);
    };
  }, []);

  useEffect(() => {
    if (ref.current) drawChart(ref.current, data.current);
  }, [version]);

  return <canvas ref={ref} class="kv-chart" data-testid="kv-chart" data-samples={samples.length} role="img" aria-label={label} />;
}
