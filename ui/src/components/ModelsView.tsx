/** Model manager: installed, added from this computer, recommended, any hub repo; downloads
 * with per-file progress. */
import { useEffect, useState } from "preact/hooks";
import type { DownloadProgress, HubTokenStatus, ModelInfo } from "../api/types";
import { ApiError } from "../api/ipc";
import { formatBytes, formatCount, formatEta, formatPercent, formatSpeed } from "../lib/format";
import { anyReadyModel, groupModels, localModelPath, unavailableLabel } from "../lib/models";
import { parseRepoId } from "../lib/validate";
import { activateModel, addLocalModel, deleteModel, downloadAction, hubTokenStatus, inspectModel, saveHubToken, useApp } from "../state/app";
import { ConfirmDialog } from "./Modal";
import { IconAlert, IconCheck, IconCube, IconDownload, IconFile, IconPause, IconPlay, IconPlus, IconSearch, IconTrash, IconX } from "./icons";

function FitFlag({ model, available }: { model: ModelInfo; available: number }) {
  if (model.fitsInMemory == null || model.memoryEstimateBytes == null) return <span class="muted small">memory need unknown</span>;
  return model.fitsInMemory ? (
    <span class="flag ok" data-testid="fit-ok">
      <IconCheck size={13} /> fits in memory (~{formatBytes(model.memoryEstimateBytes)})
    </span>
  ) : (
    <span class="flag bad" data-testid="fit-bad" title="Running it would swap heavily or fail to load.">
      <IconAlert size={13} /> needs ~{formatBytes(model.memoryEstimateBytes)}, {formatBytes(available)} available
    </span>
  );
}

function DownloadBox({ d }: { d: DownloadProgress }) {
  const fraction = d.totalBytes ? d.downloadedBytes / d.totalBytes : 0;
  const active = d.state === "downloading" || d.state === "queued";
  return (
    <div class="download" data-testid="download-item" data-repo={d.repoId} data-state={d.state}>
      <div class="download-top">
        <span class="download-state">
          {d.state === "downloading" ? "Downloading" : d.state === "queued" ? "Queued" : d.state === "paused" ? "Paused" : d.state === "failed" ? "Failed" : d.state === "completed" ? "Done" : "Cancelled"}
        </span>
        <span class="muted small" data-testid="download-totals">
          {formatBytes(d.downloadedBytes)} / {d.totalBytes != null ? formatBytes(d.totalBytes) : "?"} · {formatPercent(fraction)}
          {d.state === "downloading" && (
            <>
              {" "}· {formatSpeed(d.bytesPerSec)} · {formatEta(d.etaSeconds)} left
            </>
          )}
        </span>
        <span class="grow" />
        {active && (
          <button type="button" class="btn small" data-testid="download-pause" onClick={() => void downloadAction("pause", d.repoId)}>
            <IconPause size={14} /> Pause
          </button>
        )}
        {(d.state === "paused" || d.state === "failed") && (
          <button type="button" class="btn small primary" data-testid="download-resume" onClick={() => void downloadAction("resume", d.repoId)}>
            <IconPlay size={14} /> Resume
          </button>
        )}
        {d.state !== "completed" && d.state !== "cancelled" && (
          <button type="button" class="btn small" data-testid="download-cancel" onClick={() => void downloadAction("cancel", d.repoId)}>
            <IconX size={14} /> Cancel
          </button>
        )}
      </div>
      <div class="bar">
        <span style={{ width: `${(Math.min(1, fraction) * 100).toFixed(1)}%` }} />
      </div>
      {d.error && <p class="field-error">{d.error}</p>}
      <ul class="download-files">
        {d.files.map((f) => {
          const ff = f.totalBytes ? f.downloadedBytes / f.totalBytes : f.done ? 1 : 0;
          return (
            <li key={f.name} data-testid="download-file" class={f.done ? "done" : ""}>
              <span class="file-name" title={f.name}>{f.name}</span>
              <span class="bar slim">
                <span style={{ width: `${(Math.min(1, ff) * 100).toFixed(1)}%` }} />
              </span>
              <span class="file-size muted small">
                {f.done ? <IconCheck size={13} /> : null} {formatBytes(f.downloadedBytes)}
                {f.totalBytes != null && ` / ${formatBytes(f.totalBytes)}`}
              </span>
            </li>
          );
        })}
      </ul>
    </div>
  );
}

function ModelCard({ model, activeId, available, download }: { model: ModelInfo; activeId: string | null; available: number; download: DownloadProgress | null }) {
  const [confirm, setConfirm] = useState<null | "download" | "delete">(null);
  const isActive = model.id === activeId;
  const ready = model.availability === "ready";
  const hub = model.source === "hub";
  const path = model.source === "local" ? (localModelPath(model.id) ?? model.id) : null;
  const unavailable = unavailableLabel(model);
  const d = download && download.state !== "completed" && download.state !== "cancelled" ? download : null;
  const start = () => (model.fitsInMemory === false ? setConfirm("download") : void downloadAction("download", model.id));
  return (
    <div class={`model-card${isActive && ready ? " active" : ""}`} data-testid="model-card" data-model-id={model.id} data-availability={model.availability}>
      <div class="model-top">
        <IconCube />
        <div class="model-title">
          <strong>{model.name}</strong>
          {path != null ? (
            <code class="muted small" data-testid="model-path" title={path}>
              {path}
            </code>
          ) : (
            <code class="muted small">{model.id}</code>
          )}
        </div>
        <span class="grow" />
        {path != null && (
          <span class="badge" data-testid="model-local-badge" title="A model file or folder on this computer that you added">
            Local
          </span>
        )}
        {isActive && ready && <span class="pill ready">Active</span>}
      </div>
      <div class="model-meta muted small">
        {model.source === "builtin" && ready && <span>Built in · works offline</span>}
        {model.source === "local" && ready && <span>On this computer · works offline</span>}
        {unavailable && (
          <span class="flag bad" data-testid="model-unavailable">
            <IconAlert size={13} /> {unavailable}
          </span>
        )}
        {model.sizeBytes != null && <span>{formatBytes(model.sizeBytes)} on disk</span>}
        {model.contextLength != null && <span>{formatCount(model.contextLength)}-token context</span>}
        {!ready && hub && <FitFlag model={model} available={available} />}
      </div>
      {d ? (
        <DownloadBox d={d} />
      ) : (ready || hub || (path != null && !isActive)) && (
        <div class="model-actions">
          {ready ? (
            <>
              {!isActive && (
                <button type="button" class="btn primary small" data-testid="model-use" onClick={() => void activateModel(model.id)}>
                  Use this model
                </button>
              )}
              {hub && !isActive && (
                <button type="button" class="btn small ghost" data-testid="model-delete" onClick={() => setConfirm("delete")}>
                  <IconTrash size={14} /> Delete
                </button>
              )}
            </>
          ) : hub ? (
            <button type="button" class={`btn small${model.fitsInMemory === false ? "" : " primary"}`} data-testid="model-download" onClick={start}>
              <IconDownload size={14} /> {model.fitsInMemory === false ? "Download anyway" : "Download"}
            </button>
          ) : null}
          {path != null && !isActive && (
            <button
              type="button"
              class="btn small ghost"
              data-testid="model-remove"
              title="Removes it from this list; the file stays where it is."
              onClick={() => void deleteModel(model.id)}
            >
              <IconX size={14} /> Remove from list
            </button>
          )}
        </div>
      )}
      {confirm === "download" && (
        <ConfirmDialog
          title="This model may not fit in memory"
          message={<>It needs about {formatBytes(model.memoryEstimateBytes)}, and {formatBytes(available)} is available. It may fail to load or make the computer swap. Download it anyway?</>}
          confirmLabel="Download anyway"
          onConfirm={() => void downloadAction("download", model.id)}
          onClose={() => setConfirm(null)}
        />
      )}
      {confirm === "delete" && (
        <ConfirmDialog
          title={`Delete ${model.name}?`}
          message={<>Its files ({formatBytes(model.sizeBytes)}) are removed from this computer. You can download it again later.</>}
          confirmLabel="Delete"
          danger
          onConfirm={() => void deleteModel(model.id)}
          onClose={() => setConfirm(null)}
        />
      )}
    </div>
  );
}

/** The optional hub token for gated or private repos, kept in the OS keychain. */
function HubToken() {
  const [status, setStatus] = useState<HubTokenStatus | null>(null);
  const [input, setInput] = useState("");
  const [error, setError] = useState<string | null>(null);
  const [busy, setBusy] = useState(false);
  useEffect(() => {
    hubTokenStatus()
      .then(setStatus)
      .catch(() => setStatus(null));
  }, []);
  const save = async (token: string | null) => {
    setBusy(true);
    setError(null);
    try {
      setStatus(await saveHubToken(token));
      setInput("");
    } catch (e) {
      setError(e instanceof ApiError ? e.message : String(e));
    } finally {
      setBusy(false);
    }
  };
  const state = !status
    ? "Checking the keychain…"
    : status.stored
      ? "A token is stored in the system keychain."
      : status.keychainAvailable
        ? "No token stored (public models need none)."
        : "No system keychain is available, so no token can be stored (public models need none).";
  return (
    <form
      class="hub-token"
      data-testid="hub-token"
      onSubmit={(e) => {
        e.preventDefault();
        if (input.trim()) void save(input.trim());
      }}
    >
      <p class="muted small" data-testid="hub-token-status">
        Access token for gated or private repos: {state}
      </p>
      <div class="row">
        <input
          class="grow"
          type="password"
          value={input}
          placeholder="hf_…"
          autocomplete="off"
          spellcheck={false}
          aria-label="Hugging Face access token"
          data-testid="hub-token-input"
          onInput={(e) => setInput(e.currentTarget.value)}
        />
        <button type="submit" class="btn" data-testid="hub-token-save" disabled={busy || !input.trim()}>
          Save token
        </button>
        {status?.stored && (
          <button type="button" class="btn ghost" data-testid="hub-token-clear" disabled={busy} onClick={() => void save(null)}>
            Remove
          </button>
        )}
      </div>
      {error && (
        <p class="field-error" role="alert" data-testid="hub-token-error">
          {error}
        </p>
      )}
    </form>
  );
}

function HubLookup({ activeId, available, downloads }: { activeId: string | null; available: number; downloads: Record<string, DownloadProgress> }) {
  const [input, setInput] = useState("");
  const [touched, setTouched] = useState(false);
  const [found, setFound] = useState<ModelInfo | null>(null);
  const [lookupError, setLookupError] = useState<string | null>(null);
  const [busy, setBusy] = useState(false);
  const parsed = parseRepoId(input);
  const showError = touched && input.trim() !== "" && !parsed.ok;

  const check = async () => {
    setTouched(true);
    if (!parsed.ok) return;
    setBusy(true);
    setLookupError(null);
    setFound(null);
    try {
      setFound(await inspectModel(parsed.repoId));
    } catch (e) {
      setLookupError(e instanceof ApiError ? e.message : String(e));
    } finally {
      setBusy(false);
    }
  };

  return (
    <section class="card" data-testid="hub-lookup">
      <h2>Any model from the Hugging Face hub</h2>
      <p class="muted">MLX checkpoints of Llama 3.x, SmolLM2, Mistral, Qwen2/2.5 and Qwen3, e.g. from mlx-community.</p>
      <form
        class="row"
        onSubmit={(e) => {
          e.preventDefault();
          void check();
        }}
      >
        <input
          class={`grow${showError ? " invalid" : ""}`}
          value={input}
          placeholder="owner/name, e.g. mlx-community/Llama-3.2-1B-Instruct-4bit"
          spellcheck={false}
          autocomplete="off"
          aria-label="Hub repository id"
          aria-invalid={showError ? "true" : "false"}
          data-testid="repo-input"
          onInput={(e) => {
            setInput(e.currentTarget.value);
            setFound(null);
            setLookupError(null);
          }}
          onBlur={() => setTouched(true)}
        />
        <button type="submit" class="btn" data-testid="repo-check" disabled={busy || !parsed.ok}>
          <IconSearch size={15} /> {busy ? "Checking…" : "Check"}
        </button>
      </form>
      {showError && !parsed.ok && (
        <p class="field-error" role="alert" data-testid="repo-error">
          {parsed.error}
        </p>
      )}
      {lookupError && (
        <p class="field-error" role="alert" data-testid="repo-lookup-error">
          {lookupError}
        </p>
      )}
      {found && <ModelCard model={found} activeId={activeId} available={available} download={downloads[found.id] ?? found.download} />}
      <HubToken />
    </section>
  );
}

/** "Add a model": pick a .gguf file or a model folder; it joins the list and becomes active. */
function AddLocalModel({ prominent }: { prominent: boolean }) {
  const [busy, setBusy] = useState(false);
  const add = async (folder: boolean) => {
    setBusy(true);
    try {
      await addLocalModel(folder);
    } finally {
      setBusy(false);
    }
  };
  return (
    <div class="row add-local" data-testid="add-local-model">
      <button
        type="button"
        class={`btn${prominent ? " primary" : ""}`}
        data-testid="add-model-file"
        disabled={busy}
        title="A .gguf model file on this computer (e.g. from LM Studio or llama.cpp); it stays where it is"
        onClick={() => void add(false)}
      >
        <IconPlus size={15} /> Add model file…
      </button>
      <button
        type="button"
        class="btn"
        data-testid="add-model-folder"
        disabled={busy}
        title="A folder with config.json and .safetensors weights; it stays where it is"
        onClick={() => void add(true)}
      >
        <IconFile size={15} /> Add model folder…
      </button>
    </div>
  );
}

export function ModelsView() {
  const overview = useApp((s) => s.models);
  const downloads = useApp((s) => s.downloads);
  const status = useApp((s) => s.modelStatus);
  if (!overview) {
    return (
      <section class="page" data-testid="models-view">
        <p class="muted">Loading models…</p>
      </section>
    );
  }
  const { models, activeModelId, availableMemoryBytes, totalMemoryBytes } = overview;
  const { onComputer, recommended, other } = groupModels(models);
  const anyReady = anyReadyModel(models);
  const card = (m: ModelInfo) => <ModelCard key={m.id} model={m} activeId={activeModelId} available={availableMemoryBytes} download={downloads[m.id] ?? m.download} />;

  return (
    <section class="page" data-testid="models-view">
      <header class="page-head page-head-row">
        <div class="grow">
          <h1>Models</h1>
          <p class="muted">
            {formatBytes(availableMemoryBytes)} of {formatBytes(totalMemoryBytes)} memory available.
            {status?.state === "ready" && status.name && <> Active: <strong>{status.name}</strong>.</>}
          </p>
        </div>
        <AddLocalModel prominent={!anyReady} />
      </header>
      <div class="page-body">
        <section class="card">
          <h2>On this computer</h2>
          {!anyReady && (
            <p class="notice" role="status" data-testid="no-model-hint">
              <strong>No model is ready to use.</strong> Add a .gguf file or a model folder, or download one below.
            </p>
          )}
          {onComputer.length > 0 && (
            <div class="model-grid" data-testid="installed-models">
              {onComputer.map(card)}
            </div>
          )}
        </section>
        {(recommended.length > 0 || other.length > 0) && (
          <section class="card">
            <h2>Recommended</h2>
            <p class="muted">4-bit MLX models that work well with long documents. Downloads continue after a restart.</p>
            <div class="model-grid" data-testid="recommended-models">
              {recommended.map(card)}
              {other.map(card)}
            </div>
          </section>
        )}
        <HubLookup activeId={activeModelId} available={availableMemoryBytes} downloads={downloads} />
      </div>
    </section>
  );
}
