/** Pure helpers for the model manager: local models (`local:<path>`), grouping, labels. */
import type { ModelInfo, ModelsOverview } from "../api/types";

/** The id prefix of a model file or folder the user added (`add_local_model`). */
export const LOCAL_PREFIX = "local:";

export const isLocalModelId = (id: string): boolean => id.startsWith(LOCAL_PREFIX);

/** The absolute path of a local model (its id minus `local:`); null for other ids. */
export function localModelPath(id: string): string | null {
  return isLocalModelId(id) ? id.slice(LOCAL_PREFIX.length) : null;
}

export interface ModelGroups {
  /** The built-in model and the added local ones (whatever their availability), then the
   * downloaded hub models; in the back end's order. */
  onComputer: ModelInfo[];
  /** Hub models not downloaded (yet) that the app recommends. */
  recommended: ModelInfo[];
  /** Other hub models not downloaded (looked up this session). */
  other: ModelInfo[];
}

/** Splits the list for the Models view. The built-in and local models are never offered for
 * download: they stay under "On this computer" even when their file is missing. */
export function groupModels(models: readonly ModelInfo[]): ModelGroups {
  const onComputer: ModelInfo[] = [];
  const recommended: ModelInfo[] = [];
  const other: ModelInfo[] = [];
  for (const m of models) {
    if (m.source !== "hub" || m.availability === "ready") onComputer.push(m);
    else if (m.recommended) recommended.push(m);
    else other.push(m);
  }
  return { onComputer, recommended, other };
}

/** Whether any model can be used right now (else the view asks to add or download one). */
export const anyReadyModel = (models: readonly ModelInfo[]): boolean => models.some((m) => m.availability === "ready");

/** Why a built-in or local model cannot be used (null when it can, and for hub models, whose
 * state the download controls show). */
export function unavailableLabel(m: ModelInfo): string | null {
  if (m.availability === "ready") return null;
  if (m.source === "builtin") return "Not installed";
  if (m.source === "local") return "Not found: moved or deleted";
  return null;
}

/** The overview with `model` in it (replaced when listed, else put after the built-in and
 * local models, where `list_models` lists a newly added local model). */
export function withModel(overview: ModelsOverview, model: ModelInfo): ModelsOverview {
  const list = overview.models;
  const at = list.findIndex((m) => m.id === model.id);
  if (at >= 0) return { ...overview, models: list.map((m, i) => (i === at ? model : m)) };
  let insert = 0;
  list.forEach((m, i) => {
    if (m.source !== "hub") insert = i + 1;
  });
  return { ...overview, models: [...list.slice(0, insert), model, ...list.slice(insert)] };
}

/** An installed model other than the active one whose context holds `tokens`: the smallest
 * such file (the quickest to load), for "too long for the context" advice; null when none. */
export function modelWithRoomFor(overview: ModelsOverview | null, tokens: number): ModelInfo | null {
  const fitting = (overview?.models ?? []).filter(
    (m) => m.availability === "ready" && m.id !== overview?.activeModelId && m.contextLength != null && m.contextLength >= tokens,
  );
  fitting.sort((a, b) => (a.sizeBytes ?? Infinity) - (b.sizeBytes ?? Infinity) || a.name.localeCompare(b.name));
  return fitting[0] ?? null;
}
