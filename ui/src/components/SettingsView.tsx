/** Settings: model, KV cache, context, sampling, local server, appearance. */
import { useEffect, useMemo, useState } from "preact/hooks";
import type { Bits, CacheMode, GroupSize, RotationChoice, Settings, SinkTokens } from "../api/types";
import { BACKEND_CHOICES, backendLabel } from "../lib/backends";
import { cacheLabel, estimatedRatio, sameCache } from "../lib/kivi";
import { formatBytes, formatCount } from "../lib/format";
import { GROUP_CHOICES, LIMITS, ROTATION_CHOICES, SINK_CHOICES, isValid, parseNumberInput, validatePort, validateSettings, type SettingsErrors } from "../lib/validate";
import {
  activateModel,
  copyText,
  fitContext,
  loadDefaultSettings,
  saveSettings,
  setTheme,
  setView,
  startServer,
  stopServer,
  useApp,
  type Theme,
} from "../state/app";
import { Field, NumberInput, Segmented } from "./controls";
import { IconMonitor, IconMoon, IconServer, IconSun } from "./icons";

/** The editable form: choices as values, numbers as the text the user typed. */
interface Draft {
  mode: CacheMode;
  kBits: Bits;
  vBits: Bits;
  groupSize: GroupSize;
  residualLength: string;
  sinks: SinkTokens;
  rotation: RotationChoice;
  contextLength: string;
  temperature: string;
  topP: string;
  topK: string;
  repetitionPenalty: string;
  maxTokens: string;
  seed: string;
  backend: string;
  diskCacheMib: string;
}

export function toDraft(s: Settings): Draft {
  return {
    mode: s.cache.mode,
    kBits: s.cache.kBits,
    vBits: s.cache.vBits,
    groupSize: s.cache.groupSize,
    residualLength: String(s.cache.residualLength),
    sinks: s.cache.sinks,
    rotation: s.cache.rotation,
    contextLength: String(s.contextLength),
    temperature: String(s.sampling.temperature),
    topP: String(s.sampling.topP),
    topK: String(s.sampling.topK),
    repetitionPenalty: String(s.sampling.repetitionPenalty),
    maxTokens: String(s.sampling.maxTokens),
    seed: s.sampling.seed == null ? "" : String(s.sampling.seed),
    backend: s.backend,
    diskCacheMib: String(s.diskCacheMib),
  };
}

const num = (raw: string): number => parseNumberInput(raw) ?? Number.NaN;

export function fromDraft(d: Draft): Settings {
  return {
    cache: {
      mode: d.mode,
      kBits: d.kBits,
      vBits: d.vBits,
      groupSize: d.groupSize,
      residualLength: num(d.residualLength),
      sinks: d.sinks,
      rotation: d.rotation,
    },
    contextLength: num(d.contextLength),
    sampling: {
      temperature: num(d.temperature),
      topP: num(d.topP),
      topK: num(d.topK),
      repetitionPenalty: num(d.repetitionPenalty),
      maxTokens: num(d.maxTokens),
      seed: parseNumberInput(d.seed),
    },
    backend: d.backend,
    diskCacheMib: num(d.diskCacheMib),
  };
}

function SectionTitle({ title, sub }: { title: string; sub?: string }) {
  return (
    <div class="section-title">
      <h2>{title}</h2>
      {sub && <p class="muted">{sub}</p>}
    </div>
  );
}

function ModelSection() {
  const models = useApp((s) => s.models);
  const status = useApp((s) => s.modelStatus);
  const ready = models?.models.filter((m) => m.availability === "ready") ?? [];
  const active = models?.activeModelId ?? status?.modelId ?? "";
  return (
    <section class="card" data-testid="settings-model">
      <SectionTitle title="Model" sub="The model that answers. Switching it gives every chat a new KV cache." />
      <div class="row">
        <select
          class="select grow"
          value={active}
          aria-label="Active model"
          data-testid="model-select"
          onChange={(e) => void activateModel(e.currentTarget.value)}
        >
          {!active && <option value="">No model</option>}
          {ready.map((m) => (
            <option key={m.id} value={m.id}>
              {m.name}
            </option>
          ))}
        </select>
        <span class={`pill ${status?.state ?? "unloaded"}`} data-testid="model-state">
          {status?.state === "ready" ? "Ready" : status?.state === "loading" ? "Loading…" : status?.state === "failed" ? "Failed" : "Not loaded"}
        </span>
        <button type="button" class="btn" onClick={() => setView("models")}>
          Manage models
        </button>
      </div>
      {status?.state === "failed" && <p class="field-error">{status.error}</p>}
    </section>
  );
}

function ServerSection() {
  const srv = useApp((s) => s.server);
  const [port, setPort] = useState(String(srv?.port ?? 8080));
  const [token, setToken] = useState("");
  const [showToken, setShowToken] = useState(false);
  const [busy, setBusy] = useState(false);
  useEffect(() => {
    if (srv && !srv.running) setPort((p) => (p ? p : String(srv.port)));
  }, [srv?.port]);
  const portErr = validatePort(parseNumberInput(port));
  const running = !!srv?.running;

  const generate = () => {
    const bytes = crypto.getRandomValues(new Uint8Array(24));
    setToken(Array.from(bytes, (b) => b.toString(16).padStart(2, "0")).join(""));
    setShowToken(true);
  };

  return (
    <section class="card" data-testid="settings-server">
      <SectionTitle title="Local API server" sub="An OpenAI-compatible endpoint (/v1/chat/completions, /v1/models) on this computer only (127.0.0.1), for other apps and scripts." />
      <div class="fields">
        <Field label="Port" error={portErr ?? undefined} errorTestId="server-port-error">
          <NumberInput value={port} onInput={setPort} testId="server-port" label="Server port" step={1} min={1024} max={65535} invalid={!!portErr} width="110px" />
        </Field>
        <Field label="Bearer token (optional)" hint="When set, requests must send Authorization: Bearer <token>." wide>
          <div class="row">
            <input
              {...({ type: showToken ? "text" : "password" } as { type: "text" })}
              class="grow"
              value={token}
              autocomplete="off"
              spellcheck={false}
              placeholder="No token: any local app may connect"
              aria-label="Bearer token"
              data-testid="server-token"
              disabled={running}
              onInput={(e) => setToken(e.currentTarget.value)}
            />
            <button type="button" class="btn" onClick={() => setShowToken(!showToken)} disabled={!token}>
              {showToken ? "Hide" : "Show"}
            </button>
            <button type="button" class="btn" onClick={generate} disabled={running}>
              Generate
            </button>
          </div>
        </Field>
      </div>
      <div class="server-status row" data-testid="server-status" data-running={running ? "true" : "false"}>
        <IconServer />
        {running ? (
          <>
            <span class="pill ready">Running</span>
            <code class="server-url" data-testid="server-url">{srv?.url}</code>
            <button type="button" class="btn small" onClick={() => void copyText(srv?.url ?? "", "URL copied")}>
              Copy URL
            </button>
            {srv?.authRequired && <span class="muted small">token required</span>}
          </>
        ) : (
          <span class="muted">{srv?.error ? <span class="field-error">{srv.error}</span> : "Stopped."}</span>
        )}
        <span class="grow" />
        {running ? (
          <button type="button" class="btn" data-testid="server-stop" disabled={busy} onClick={async () => { setBusy(true); await stopServer(); setBusy(false); }}>
            Stop server
          </button>
        ) : (
          <button
            type="button"
            class="btn primary"
            data-testid="server-start"
            disabled={busy || !!portErr}
            onClick={async () => {
              setBusy(true);
              await startServer(Number(port), token.trim() ? token.trim() : null);
              setBusy(false);
            }}
          >
            Start server
          </button>
        )}
      </div>
    </section>
  );
}

function AppearanceSection() {
  const theme = useApp((s) => s.theme);
  return (
    <section class="card" data-testid="settings-appearance">
      <SectionTitle title="Appearance" />
      <Segmented<Theme>
        value={theme}
        label="Theme"
        testId="theme"
        onChange={setTheme}
        options={[
          { value: "system", label: <><IconMonitor size={15} /> System</> },
          { value: "light", label: <><IconSun size={15} /> Light</> },
          { value: "dark", label: <><IconMoon size={15} /> Dark</> },
        ]}
      />
    </section>
  );
}

export function SettingsView() {
  const saved = useApp((s) => s.settings);
  const chatView = useApp((s) => s.chatView);
  const activeModel = useApp((s) => s.models?.models.find((m) => m.id === s.models?.activeModelId) ?? null);
  const [draft, setDraft] = useState<Draft | null>(saved ? toDraft(saved) : null);
  const [saving, setSaving] = useState(false);
  /** The last "Fit this machine" answer, shown while the field holds its context. */
  const [fitted, setFitted] = useState<{ context: string; note: string } | null>(null);

  useEffect(() => {
    if (saved && !draft) setDraft(toDraft(saved));
  }, [saved]);

  const candidate = useMemo(() => (draft ? fromDraft(draft) : null), [draft]);
  const errors: SettingsErrors = useMemo(() => (candidate ? validateSettings(candidate) : {}), [candidate]);

  if (!saved || !draft || !candidate) {
    return (
      <section class="page" data-testid="settings-view">
        <p class="muted">Loading settings…</p>
      </section>
    );
  }

  const set = <K extends keyof Draft>(k: K, v: Draft[K]) => setDraft({ ...draft, [k]: v });
  const dirty = JSON.stringify(toDraft(saved)) !== JSON.stringify(draft);
  const backendChanged = saved.backend !== candidate.backend;
  const cacheChanged = !sameCache(saved.cache, candidate.cache) || saved.contextLength !== candidate.contextLength || backendChanged;
  const valid = isValid(errors);
  const kivi = draft.mode === "kivi";
  const modelMax = activeModel?.contextLength ?? null;
  const ctxWarn = modelMax != null && candidate.contextLength > modelMax ? `Longer than ${activeModel?.name}'s trained context (${formatCount(modelMax)}); answers may degrade.` : undefined;
  const ratio = kivi && !errors["cache.groupSize"] ? estimatedRatio(candidate.cache) : null;

  const chat = chatView?.chat;
  const docTokens = chat?.documents.reduce((n, d) => n + d.tokenCount, 0) ?? 0;

  const fit = async () => {
    const found = await fitContext(candidate.cache);
    if (!found) return;
    set("contextLength", String(found.contextLength));
    const bound = found.contextLength >= found.modelContext ? `${activeModel?.name ?? "the model"}'s trained context` : "the memory available";
    const note = `Fits this machine: ${formatCount(found.contextLength)} tokens (up to ${bound}); their KV cache takes ${formatBytes(found.kvBytes)} of ${formatBytes(found.availableBytes)} available with the model.`;
    setFitted({ context: String(found.contextLength), note });
  };

  const save = async () => {
    if (!valid) return;
    setSaving(true);
    const next = await saveSettings(candidate);
    setSaving(false);
    if (next) setDraft(toDraft(next));
  };

  return (
    <section class="page" data-testid="settings-view">
      <header class="page-head">
        <div>
          <h1>Settings</h1>
          <p class="muted">Saved on this computer. The back end checks every value again.</p>
        </div>
      </header>

      <div class="page-body">
        <ModelSection />

        <section class="card" data-testid="settings-cache">
          <SectionTitle title="KV cache" sub="KIVI stores keys per channel and values per token in 2 or 4 bits; the newest tokens stay in full precision." />
          <div class="fields">
            <Field label="KV cache" hint={kivi ? "Quantized with KIVI." : "Full precision (fp16): the baseline to compare against."}>
              <Segmented<CacheMode>
                value={draft.mode}
                label="KV cache mode"
                testId="cache-mode"
                onChange={(v) => set("mode", v)}
                options={[
                  { value: "fp16", label: "Full precision" },
                  { value: "kivi", label: "KIVI" },
                ]}
              />
            </Field>
            <Field label="Key bits" error={errors["cache.kBits"]}>
              <Segmented<Bits> value={draft.kBits} label="Key bits" testId="kbits" disabled={!kivi} onChange={(v) => set("kBits", v)} options={[{ value: 2, label: "2-bit" }, { value: 4, label: "4-bit" }]} />
            </Field>
            <Field label="Value bits" error={errors["cache.vBits"]}>
              <Segmented<Bits> value={draft.vBits} label="Value bits" testId="vbits" disabled={!kivi} onChange={(v) => set("vBits", v)} options={[{ value: 2, label: "2-bit" }, { value: 4, label: "4-bit" }]} />
            </Field>
            <Field label="Group size" hint="Tokens (keys) or channels (values) that share one scale and zero." error={errors["cache.groupSize"]}>
              <Segmented<GroupSize>
                value={draft.groupSize}
                label="Group size"
                testId="group"
                disabled={!kivi}
                onChange={(v) => set("groupSize", v)}
                options={GROUP_CHOICES.map((g) => ({ value: g, label: String(g) }))}
              />
            </Field>
            <Field
              label="Residual length"
              hint={`Newest tokens kept in full precision: a multiple of the group size (${draft.groupSize}), ${LIMITS.residualLength.min}–${LIMITS.residualLength.max}.`}
              error={errors["cache.residualLength"]}
              errorTestId="residual-error"
            >
              <NumberInput
                value={draft.residualLength}
                onInput={(v) => set("residualLength", v)}
                testId="residual-input"
                label="Residual length"
                step={draft.groupSize}
                min={0}
                max={LIMITS.residualLength.max}
                invalid={!!errors["cache.residualLength"]}
                width="110px"
              />
              <span class="unit">tokens</span>
            </Field>
            <Field
              label="Sink tokens"
              hint="Keep the first tokens of the conversation in full precision: they attract attention from every later token."
              error={errors["cache.sinks"]}
              errorTestId="sinks-error"
            >
              <Segmented<SinkTokens>
                value={draft.sinks}
                label="Sink tokens"
                testId="sinks"
                disabled={!kivi}
                onChange={(v) => set("sinks", v)}
                options={SINK_CHOICES.map((n) => ({ value: n, label: n === 0 ? "None" : String(n) }))}
              />
            </Field>
            <Field
              label="Hadamard rotation"
              hint="Store values (or keys and values) in a rotated basis that spreads outlier channels. Values help every model measured; keys too take SmolLM2's 2-bit cache from +6.5% to +3.4% perplexity but cost Qwen2.5 +12% or more. Per head rotates each head's keys and values only where that quantizes them better, first scaling the key channels the queries weigh most (2-bit: Qwen2.5 +5.5%, SmolLM2 +2.3%): the safe choice for a 2-bit cache on a model you have not measured. Needs a head size that is a power of two (64, 128, …)."
              error={errors["cache.rotation"]}
              errorTestId="rotation-error"
            >
              <Segmented<RotationChoice>
                value={draft.rotation}
                label="Hadamard rotation"
                testId="rotation"
                disabled={!kivi}
                onChange={(v) => set("rotation", v)}
                options={ROTATION_CHOICES.map((r) => ({ value: r, label: { none: "Off", values: "Values", both: "Keys and values", adaptive: "Per head" }[r] }))}
              />
            </Field>
            <Field
              label="Context length"
              hint={ctxWarn ?? (fitted?.context === draft.contextLength ? fitted.note : "Tokens the cache may hold: system prompt, documents, conversation and answer.")}
              error={errors.contextLength}
              errorTestId="context-error"
            >
              <NumberInput value={draft.contextLength} onInput={(v) => set("contextLength", v)} testId="context-input" label="Context length" step={1024} min={512} max={131072} invalid={!!errors.contextLength} width="110px" />
              <span class="unit">tokens</span>
              <span class="presets">
                {[4096, 8192, 16384, 32768].map((n) => (
                  <button type="button" key={n} class={`chip-btn${draft.contextLength === String(n) ? " on" : ""}`} onClick={() => set("contextLength", String(n))}>
                    {n / 1024}k
                  </button>
                ))}
                <button type="button" class="chip-btn" data-testid="context-fit" title="The longest context the model allows and this machine's memory holds with these cache settings" onClick={() => void fit()}>
                  Fit this machine
                </button>
              </span>
            </Field>
            <Field
              label="Disk space for saved caches"
              hint="Chats' KV caches are kept on disk so a long document is not re-read after a restart; the least recently used go first. 0 keeps none."
              error={errors.diskCacheMib}
              errorTestId="disk-cache-error"
            >
              <NumberInput
                value={draft.diskCacheMib}
                onInput={(v) => set("diskCacheMib", v)}
                testId="disk-cache-input"
                label="Disk space for saved caches"
                step={512}
                min={LIMITS.diskCacheMib.min}
                max={LIMITS.diskCacheMib.max}
                invalid={!!errors.diskCacheMib}
                width="110px"
              />
              <span class="unit">MiB</span>
              {!errors.diskCacheMib && (
                <span class="muted small" data-testid="disk-cache-size">
                  {candidate.diskCacheMib === 0 ? "nothing kept on disk" : `up to ${formatBytes(candidate.diskCacheMib * 1024 * 1024)}`}
                </span>
              )}
            </Field>
          </div>
          <div class="cache-summary">
            <span class="cache-pill">{cacheLabel(candidate.cache)}</span>
            {ratio != null && <span class="muted small">about {ratio.toFixed(1)}× smaller than fp16 for the quantized part (estimate; the live panel shows the real bytes)</span>}
          </div>
          {cacheChanged && (
            <div class="notice" data-testid="cache-change-notice" role="note">
              <strong>Saving starts a new KV cache for every conversation.</strong>{" "}
              {chat && (chat.messageCount > 0 || docTokens > 0) ? (
                <>
                  “{chat.title || "New chat"}” keeps its {chat.messageCount} message{chat.messageCount === 1 ? "" : "s"}
                  {docTokens > 0 && <> and {formatCount(docTokens)} document tokens</>}; they are re-read (prefilled) with {cacheLabel(candidate.cache)} on your next message.
                </>
              ) : (
                <>Conversations keep their messages; each is re-read (prefilled) with {cacheLabel(candidate.cache)} on its next message.</>
              )}{" "}
              Answers already written keep the label of the settings that produced them.
            </div>
          )}
        </section>

        <section class="card" data-testid="settings-sampling">
          <SectionTitle title="Sampling" sub="How the next token is chosen." />
          <div class="fields">
            <Field label="Temperature" hint="0 is greedy; higher is more varied. 0–2." error={errors["sampling.temperature"]} errorTestId="temperature-error">
              <input type="range" min={0} max={2} step={0.05} value={Number.isFinite(num(draft.temperature)) ? num(draft.temperature) : 0} aria-label="Temperature slider" onInput={(e) => set("temperature", e.currentTarget.value)} />
              <NumberInput value={draft.temperature} onInput={(v) => set("temperature", v)} testId="temperature-input" label="Temperature" step={0.05} min={0} max={2} invalid={!!errors["sampling.temperature"]} width="72px" />
            </Field>
            <Field label="Top-p" hint="Nucleus sampling, (0, 1]." error={errors["sampling.topP"]} errorTestId="topp-error">
              <input type="range" min={0.05} max={1} step={0.01} value={Number.isFinite(num(draft.topP)) ? num(draft.topP) : 1} aria-label="Top-p slider" onInput={(e) => set("topP", e.currentTarget.value)} />
              <NumberInput value={draft.topP} onInput={(v) => set("topP", v)} testId="topp-input" label="Top-p" step={0.01} min={0.01} max={1} invalid={!!errors["sampling.topP"]} width="72px" />
            </Field>
            <Field label="Top-k" hint="0 turns it off. 0–1000." error={errors["sampling.topK"]} errorTestId="topk-error">
              <NumberInput value={draft.topK} onInput={(v) => set("topK", v)} testId="topk-input" label="Top-k" step={1} min={0} max={1000} invalid={!!errors["sampling.topK"]} width="90px" />
            </Field>
            <Field label="Repetition penalty" hint="1 turns it off. 1–2." error={errors["sampling.repetitionPenalty"]} errorTestId="penalty-error">
              <NumberInput value={draft.repetitionPenalty} onInput={(v) => set("repetitionPenalty", v)} testId="penalty-input" label="Repetition penalty" step={0.05} min={1} max={2} invalid={!!errors["sampling.repetitionPenalty"]} width="90px" />
            </Field>
            <Field label="Max tokens" hint="The longest answer, less than the context length." error={errors["sampling.maxTokens"]} errorTestId="maxtokens-error">
              <NumberInput value={draft.maxTokens} onInput={(v) => set("maxTokens", v)} testId="maxtokens-input" label="Max tokens" step={64} min={1} max={32768} invalid={!!errors["sampling.maxTokens"]} width="90px" />
            </Field>
            <Field label="Seed" hint="Empty: a new random seed for each answer." error={errors["sampling.seed"]} errorTestId="seed-error">
              <NumberInput value={draft.seed} onInput={(v) => set("seed", v)} testId="seed-input" label="Seed" placeholder="random" step={1} min={0} invalid={!!errors["sampling.seed"]} width="120px" />
            </Field>
          </div>
        </section>

        <section class="card" data-testid="settings-advanced">
          <SectionTitle title="Advanced" sub="Where the model runs. Changing it loads the model again; every conversation gets a new KV cache." />
          <div class="fields">
            <Field label="Backend" hint={BACKEND_CHOICES.find((b) => b.value === draft.backend)?.hint} error={errors.backend} errorTestId="backend-error">
              <select class="select" value={draft.backend} aria-label="Backend" data-testid="backend-select" onChange={(e) => set("backend", e.currentTarget.value)}>
                {!BACKEND_CHOICES.some((b) => b.value === draft.backend) && <option value={draft.backend}>{backendLabel(draft.backend)}</option>}
                {BACKEND_CHOICES.map((b) => (
                  <option key={b.value} value={b.value}>
                    {b.label}
                  </option>
                ))}
              </select>
            </Field>
          </div>
          {backendChanged && (
            <div class="notice" data-testid="backend-change-notice" role="note">
              <strong>Saving loads the model again on {backendLabel(candidate.backend)}.</strong> Conversations keep their messages; each is re-read on its next message.
            </div>
          )}
        </section>

        <ServerSection />
        <AppearanceSection />
      </div>

      <footer class={`save-bar${dirty ? " dirty" : ""}`} data-testid="settings-save-bar">
        <span class="muted small" data-testid="settings-state">
          {!valid ? "Fix the highlighted fields to save." : dirty ? (cacheChanged ? "Unsaved changes (the KV cache settings changed)." : "Unsaved changes.") : "All changes saved."}
        </span>
        <span class="grow" />
        <button
          type="button"
          class="btn ghost"
          data-testid="settings-defaults"
          onClick={async () => {
            const d = await loadDefaultSettings();
            if (d) setDraft(toDraft(d));
          }}
        >
          Restore defaults
        </button>
        <button type="button" class="btn" data-testid="settings-revert" disabled={!dirty || saving} onClick={() => setDraft(toDraft(saved))}>
          Revert
        </button>
        <button type="button" class="btn primary" data-testid="settings-save" disabled={!dirty || !valid || saving} onClick={() => void save()}>
          {cacheChanged ? "Save and reset caches" : "Save"}
        </button>
      </footer>
    </section>
  );
}
