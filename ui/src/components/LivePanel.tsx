/** The live panel: what the KV cache really costs, updated from `stats` events. */
import type { DiskCacheEvent, StatsSnapshot } from "../api/types";
import { backendShort } from "../lib/backends";
import { cacheLabel } from "../lib/kivi";
import { formatBytes, formatCount, formatDuration, formatPercent, formatRate, formatRatio } from "../lib/format";
import { togglePanel, useApp } from "../state/app";
import { statsHistory } from "../state/statsHistory";
import { KvChart } from "./KvChart";
import { IconCpu, IconX } from "./icons";

const PHASE_LABEL: Record<StatsSnapshot["phase"], string> = {
  idle: "Idle",
  loading: "Loading model",
  prefill: "Prefill",
  decode: "Generating",
};

function Meter({ fraction, testId, label, marker }: { fraction: number; testId?: string; label: string; marker?: number }) {
  const pct = Math.max(0, Math.min(1, fraction)) * 100;
  return (
    <div class="meter" role="meter" aria-label={label} aria-valuemin={0} aria-valuemax={100} aria-valuenow={Math.round(pct)} data-testid={testId}>
      <span class="meter-fill" style={{ width: `${pct.toFixed(1)}%` }} />
      {marker != null && <span class="meter-marker" style={{ left: `${(marker * 100).toFixed(1)}%` }} />}
    </div>
  );
}

/** "23 more before the next flush", or "the next token flushes" when the window is full. */
function flushText(untilFlush: number | null): string {
  if (untilFlush == null) return "";
  return untilFlush <= 0 ? "the next token flushes" : `${formatCount(untilFlush)} more before the next flush`;
}

/** The window as the engine reports it: its fill, capacity (R + G - 1) and, beside it, the sinks. */
function ResidualGauge({ s }: { s: StatsSnapshot }) {
  if (!s.cache || s.cache.mode === "fp16" || s.residualCapacity <= 0) {
    const text = !s.cache
      ? "No cache yet: send a message to build one."
      : s.cache.mode === "fp16"
        ? "Full precision: every token is kept in fp16, nothing is quantized."
        : "No tokens in the cache yet.";
    return (
      <div class="panel-block" data-testid="residual-gauge" data-mode={s.cache?.mode ?? "none"}>
        <div class="block-head">
          <span>Residual window</span>
        </div>
        <p class="muted small" data-testid="residual-text">
          {text}
        </p>
      </div>
    );
  }
  const { residualLength: r, groupSize: g, sinks } = s.cache;
  const fill = s.residualTokens / s.residualCapacity;
  const showSinks = sinks > 0 || s.sinkTokens > 0;
  return (
    <div class="panel-block" data-testid="residual-gauge" data-mode="kivi">
      <div class="block-head">
        <span>Residual window</span>
        <span class="muted small">
          R {r} · G {g}
          {sinks > 0 && <> · S {sinks}</>}
        </span>
      </div>
      <div class="window-row">
        {showSinks && (
          <span class="sink-seg" data-testid="residual-sinks" title="Attention sinks: the first tokens, kept in full precision for good, outside the window">
            {formatCount(s.sinkTokens)} sinks
          </span>
        )}
        <Meter fraction={fill} testId="residual-meter" label="Residual window fill" marker={r / s.residualCapacity} />
      </div>
      <div class="block-foot wrap">
        <span data-testid="residual-text">
          <strong>{formatCount(s.residualTokens)}</strong> / {formatCount(s.residualCapacity)} tokens in full precision
        </span>
        <span data-testid="residual-flush">{flushText(s.tokensUntilFlush)}</span>
      </div>
      <p class="muted tiny">
        The window holds up to R + G − 1 tokens; the next one quantizes its oldest {g} as one group.
        {showSinks && " Sinks stay in full precision for good."}
      </p>
    </div>
  );
}

/** "Restored from disk · 12.3 MiB · 200 ms": the described chat's cache file, last written or read. */
export function diskCacheText(d: DiskCacheEvent): string {
  const what = { restored: "Restored from disk", reused: "Documents read from disk", saved: "Saved to disk" }[d.action];
  return `${what} · ${formatBytes(d.bytes)} · ${formatDuration(d.seconds * 1000)}`;
}

function DiskCacheLine({ d }: { d: DiskCacheEvent }) {
  const why = {
    restored: "Read back from the data folder and checked when the chat was opened after a restart: the next question starts at once, without re-reading the documents.",
    reused: "Another chat had read these documents (same system prompt, model and cache settings): its saved cache was read instead of reading them again.",
    saved: "Written to the data folder when the chat went idle or the app quit, so it can be read back after a restart.",
  }[d.action];
  return (
    <p class="muted small disk-cache-line" data-testid="disk-cache-line" data-action={d.action} title={`${formatCount(d.tokens)} tokens. ${why}`}>
      {diskCacheText(d)}
    </p>
  );
}

export function LivePanel() {
  const s = useApp((st) => st.stats);
  const activeChatId = useApp((st) => st.activeChatId);
  const chats = useApp((st) => st.chats);

  const describedChat = s?.chatId && s.chatId !== activeChatId ? chats.find((c) => c.id === s.chatId)?.title : null;
  const ratioText = s ? formatRatio(s.kvFp16Bytes, s.kvHeldBytes) : "—";
  const saved = s && s.kvFp16Bytes > 0 ? 1 - s.kvHeldBytes / s.kvFp16Bytes : null;
  const sysFrac = s && s.systemMemoryTotalBytes > 0 ? s.systemMemoryUsedBytes / s.systemMemoryTotalBytes : 0;
  const ctxFrac = s && s.contextLength > 0 ? s.tokens / s.contextLength : 0;
  const chartLabel = s
    ? `KV cache bytes over time: ${formatBytes(s.kvHeldBytes)} held, ${formatBytes(s.kvFp16Bytes)} in fp16, ratio ${ratioText}`
    : "KV cache bytes over time: no data yet";

  return (
    <aside class="panel" data-testid="live-panel" aria-label="Live KV cache panel">
      <header class="panel-head">
        <div>
          <h2>KV cache · live</h2>
          <div class="panel-sub">
            <span class={`phase phase-${s?.phase ?? "idle"}`} data-testid="stat-phase">
              <i /> {PHASE_LABEL[s?.phase ?? "idle"]}
            </span>
            <span class="device" data-testid="stat-device" title={s ? `${s.backendName} · ${s.deviceName}` : undefined}>
              <IconCpu size={13} /> {s ? backendShort(s.backend) : "—"}
            </span>
          </div>
        </div>
        <button type="button" class="icon-btn small" aria-label="Close panel" onClick={() => togglePanel(false)}>
          <IconX size={15} />
        </button>
      </header>

      <div class="panel-scroll">
        <div class="cache-config" data-testid="stat-cache-config">
          {cacheLabel(s?.cache)}
          {describedChat && <span class="muted small"> · {describedChat}</span>}
        </div>

        <div class="big-stats">
          <div class="big held">
            <span class="big-label"><i class="swatch held" /> Held</span>
            <span class="big-value" data-testid="stat-held-bytes">{formatBytes(s?.kvHeldBytes ?? 0)}</span>
          </div>
          <div class="big fp16">
            <span class="big-label"><i class="swatch fp16" /> As fp16</span>
            <span class="big-value" data-testid="stat-fp16-bytes">{formatBytes(s?.kvFp16Bytes ?? 0)}</span>
          </div>
          <div class="big ratio">
            <span class="big-label"><i class="swatch ratio" /> Ratio</span>
            <span class="big-value" data-testid="stat-ratio">{ratioText}</span>
            <span class="muted tiny" data-testid="stat-saved">{saved != null && saved > 0 ? `${formatPercent(saved)} less memory` : " "}</span>
          </div>
        </div>

        <KvChart samples={statsHistory.samples} version={statsHistory.version} label={chartLabel} />

        {s && <ResidualGauge s={s} />}

        <div class="panel-block">
          <div class="block-head">
            <span>Context</span>
            <span class="muted small" data-testid="stat-tokens">
              {formatCount(s?.tokens ?? 0)} / {formatCount(s?.contextLength ?? 0)} tokens
            </span>
          </div>
          <Meter fraction={ctxFrac} label="Context used" testId="context-meter" />
          <div class="block-foot muted small" data-testid="stat-breakdown">
            <span data-testid="stat-quantized">{formatCount(s?.quantizedTokens ?? 0)} quantized</span>
            {s && (s.sinkTokens > 0 || (s.cache?.mode === "kivi" && s.cache.sinks > 0)) && (
              <span data-testid="stat-sinks">{formatCount(s.sinkTokens)} sinks</span>
            )}
            <span data-testid="stat-window">{formatCount(s?.residualTokens ?? 0)} full precision</span>
          </div>
          {s && s.windowLayers > 0 && (
            <div
              class="block-foot muted small"
              data-testid="stat-window-layers"
              title="Layers that attend over a sliding window keep their newest tokens in full precision, whatever the cache setting; the setting applies to the other layers."
            >
              <span>
                {s.windowLayers} window layers · {formatCount(s.windowTokens)} tokens each
              </span>
              <span>{formatBytes(s.kvWindowHeldBytes)} of the held bytes</span>
            </div>
          )}
          {s?.diskCache && <DiskCacheLine d={s.diskCache} />}
        </div>

        <div class="metric-grid">
          <div class="metric">
            <span class="metric-label">Decode</span>
            <span class="metric-value" data-testid="stat-decode">{formatRate(s?.decodeTokensPerSec)}</span>
          </div>
          <div class="metric">
            <span class="metric-label">Prefill</span>
            <span class="metric-value" data-testid="stat-prefill">{formatRate(s?.prefillTokensPerSec)}</span>
          </div>
          <div class="metric">
            <span class="metric-label">Time to first token</span>
            <span class="metric-value" data-testid="stat-ttft">{formatDuration(s?.ttftMs)}</span>
          </div>
          <div class="metric">
            <span class="metric-label">Process memory</span>
            <span class="metric-value" data-testid="stat-process-mem">{formatBytes(s?.processMemoryBytes)}</span>
          </div>
        </div>

        <div class="panel-block">
          <div class="block-head">
            <span>System memory</span>
            <span class="muted small" data-testid="stat-system-mem">
              {formatBytes(s?.systemMemoryUsedBytes)} / {formatBytes(s?.systemMemoryTotalBytes)}
            </span>
          </div>
          <Meter fraction={sysFrac} label="System memory used" />
          {s?.deviceMemoryBytes != null && (
            <div class="block-foot muted small">
              <span>Device (MLX)</span>
              <span data-testid="stat-device-mem">{formatBytes(s.deviceMemoryBytes)}</span>
            </div>
          )}
        </div>
        <p class="muted tiny device-name" data-testid="stat-backend">
          {s ? `${s.backendName} · ${s.deviceName}` : ""}
        </p>
      </div>
    </aside>
  );
}
