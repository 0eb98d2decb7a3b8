/** @vitest-environment jsdom */
import { afterEach, beforeEach, describe, expect, it } from "vitest";
import { clearMocks, mockIPC } from "@tauri-apps/api/mocks";
import type { ModelInfo, ModelsOverview } from "../../src/api/types";
import { anyReadyModel, groupModels, isLocalModelId, localModelPath, modelWithRoomFor, unavailableLabel, withModel } from "../../src/lib/models";
import { addLocalModel, deleteModel, store } from "../../src/state/app";

const model = (id: string, source: ModelInfo["source"], availability: ModelInfo["availability"] = "ready", recommended = false): ModelInfo => ({
  id,
  name: id,
  source,
  recommended,
  availability,
  sizeBytes: null,
  memoryEstimateBytes: null,
  fitsInMemory: null,
  contextLength: null,
  download: null,
});

const BUILTIN = model("builtin/SmolLM2-135M-Instruct-Q4_1", "builtin");
const GGUF = "/home/user/models/Qwen2.5-0.5B-Instruct-Q4_K_M.gguf";
const LOCAL = { ...model(`local:${GGUF}`, "local"), name: "Qwen2.5-0.5B-Instruct-Q4_K_M" };

describe("local model ids", () => {
  it("are `local:` plus the absolute path", () => {
    expect(isLocalModelId(`local:${GGUF}`)).toBe(true);
    expect(isLocalModelId("mlx-community/Llama-3.2-3B-Instruct-4bit")).toBe(false);
    expect(localModelPath(`local:${GGUF}`)).toBe(GGUF);
    expect(localModelPath("local:C:\\Models\\phi.gguf")).toBe("C:\\Models\\phi.gguf");
    expect(localModelPath(BUILTIN.id)).toBeNull();
  });
});

describe("grouping the models", () => {
  it("keeps the built-in and local models on this computer, even when their file is missing", () => {
    const list = [
      model(BUILTIN.id, "builtin", "notDownloaded"),
      LOCAL,
      model("local:/gone.gguf", "local", "notDownloaded"),
      model("a/downloaded", "hub"),
      model("a/recommended", "hub", "notDownloaded", true),
      model("a/paused", "hub", "paused", true),
      model("a/looked-up", "hub", "notDownloaded"),
    ];
    const g = groupModels(list);
    expect(g.onComputer.map((m) => m.id)).toEqual([BUILTIN.id, LOCAL.id, "local:/gone.gguf", "a/downloaded"]);
    expect(g.recommended.map((m) => m.id)).toEqual(["a/recommended", "a/paused"]);
    expect(g.other.map((m) => m.id)).toEqual(["a/looked-up"]);
  });

  it("knows when no model is ready, and says why a built-in or local one is not", () => {
    expect(anyReadyModel([model(BUILTIN.id, "builtin", "notDownloaded"), model("a/b", "hub", "notDownloaded")])).toBe(false);
    expect(anyReadyModel([model(BUILTIN.id, "builtin", "notDownloaded"), LOCAL])).toBe(true);
    expect(unavailableLabel(model(BUILTIN.id, "builtin", "notDownloaded"))).toBe("Not installed");
    expect(unavailableLabel(model("local:/gone.gguf", "local", "notDownloaded"))).toMatch(/moved or deleted/);
    expect(unavailableLabel(BUILTIN)).toBeNull();
    expect(unavailableLabel(LOCAL)).toBeNull();
    expect(unavailableLabel(model("a/b", "hub", "notDownloaded"))).toBeNull();
  });

  it("puts a newly added local model after the built-in and local ones, or replaces it", () => {
    const other = model("local:/other.gguf", "local");
    const hub = model("a/b", "hub");
    const o: ModelsOverview = { models: [BUILTIN, other, hub], activeModelId: BUILTIN.id, availableMemoryBytes: 1, totalMemoryBytes: 2 };
    expect(withModel(o, LOCAL).models.map((m) => m.id)).toEqual([BUILTIN.id, other.id, LOCAL.id, hub.id]);
    const renamed = { ...other, name: "renamed" };
    const again = withModel(o, renamed);
    expect(again.models.map((m) => m.id)).toEqual(o.models.map((m) => m.id));
    expect(again.models[1]!.name).toBe("renamed");
    expect(o.models[1]!.name).toBe(other.id);
  });
});

describe("adding a local model", () => {
  let calls: { cmd: string; args: Record<string, unknown> }[];
  let listed: ModelInfo[];
  let added: ModelInfo | null;
  let addError: unknown;
  let activateError: unknown;

  beforeEach(() => {
    calls = [];
    listed = [BUILTIN];
    added = LOCAL;
    addError = null;
    activateError = null;
    store.set({ models: { models: [BUILTIN], activeModelId: BUILTIN.id, availableMemoryBytes: 1, totalMemoryBytes: 2 }, toasts: [] });
    mockIPC((cmd, payload) => {
      const args = (payload ?? {}) as Record<string, unknown>;
      calls.push({ cmd, args });
      switch (cmd) {
        case "add_local_model":
          if (addError) throw addError;
          if (added) listed = [BUILTIN, added];
          return added;
        case "list_models":
          return { models: listed, activeModelId: BUILTIN.id, availableMemoryBytes: 1, totalMemoryBytes: 2 };
        case "set_active_model":
          if (activateError) throw activateError;
          return { modelId: args.modelId, name: "x", state: "loading", progress: 0, error: null };
        case "delete_model":
          if (args.modelId === LOCAL.id && store.get().models?.activeModelId === LOCAL.id) {
            throw { code: "busy", message: "This model is in use. Switch to another model first, then remove it.", field: null };
          }
          listed = listed.filter((m) => m.id !== args.modelId);
          return null;
        default:
          return null;
      }
    });
  });
  afterEach(() => clearMocks());

  it("adds the picked file, lists it and makes it the active model", async () => {
    const result = await addLocalModel(false);
    expect(result?.id).toBe(LOCAL.id);
    expect(calls.map((c) => c.cmd)).toEqual(["add_local_model", "list_models", "set_active_model"]);
    expect(calls[0]!.args).toEqual({ folder: false });
    expect(calls[2]!.args).toEqual({ modelId: LOCAL.id });
    const s = store.get();
    expect(s.models?.models.map((m) => m.id)).toEqual([BUILTIN.id, LOCAL.id]);
    expect(s.models?.activeModelId).toBe(LOCAL.id);
    expect(s.modelStatus).toMatchObject({ modelId: LOCAL.id, state: "loading" });
    expect(s.toasts.map((t) => t.kind)).toEqual(["success"]);
  });

  it("asks for a folder with folder: true", async () => {
    await addLocalModel(true);
    expect(calls[0]).toEqual({ cmd: "add_local_model", args: { folder: true } });
  });

  it("does nothing more when the dialog was cancelled", async () => {
    added = null;
    expect(await addLocalModel(false)).toBeNull();
    expect(calls.map((c) => c.cmd)).toEqual(["add_local_model"]);
    expect(store.get().toasts).toEqual([]);
  });

  it("shows the back end's message when the file is not a model, and activates nothing", async () => {
    const message = "/home/user/notes.txt is not a GGUF file. Pick a .gguf file, or a folder with config.json and .safetensors weights.";
    addError = { code: "invalidArgument", field: "path", message };
    expect(await addLocalModel(false)).toBeNull();
    expect(calls.map((c) => c.cmd)).toEqual(["add_local_model"]);
    expect(store.get().toasts).toMatchObject([{ kind: "error", title: "Could not add the model file", message }]);
  });

  it("keeps the added model listed when switching to it fails", async () => {
    activateError = { code: "busy", message: "An answer is being written.", field: null };
    expect((await addLocalModel(false))?.id).toBe(LOCAL.id);
    const s = store.get();
    expect(s.models?.models.map((m) => m.id)).toContain(LOCAL.id);
    expect(s.models?.activeModelId).toBe(BUILTIN.id);
    expect(s.toasts).toMatchObject([{ kind: "error", title: "Could not switch the model" }]);
  });

  it("removes a local model from the list, and says so when it is in use", async () => {
    await addLocalModel(false);
    store.set({ toasts: [] });
    await deleteModel(LOCAL.id);
    expect(store.get().toasts).toMatchObject([{ kind: "error", title: "Could not remove the model from the list" }]);
    store.set((s) => ({ models: s.models && { ...s.models, activeModelId: BUILTIN.id }, toasts: [] }));
    await deleteModel(LOCAL.id);
    expect(calls.filter((c) => c.cmd === "delete_model").map((c) => c.args)).toEqual([{ modelId: LOCAL.id }, { modelId: LOCAL.id }]);
    expect(store.get().models?.models.map((m) => m.id)).toEqual([BUILTIN.id]);
    expect(store.get().toasts).toEqual([]);
  });
});

describe("modelWithRoomFor", () => {
  it("names the smallest installed model, other than the active one, whose context holds the tokens", () => {
    const m = (id: string, contextLength: number | null, sizeBytes: number, availability: ModelInfo["availability"] = "ready") => ({
      ...model(id, "hub", availability),
      contextLength,
      sizeBytes,
    });
    const overview: ModelsOverview = {
      models: [m("active", 8192, 1), m("big", 131072, 9e9), m("small", 40960, 2e9), m("unknown", null, 1), m("notHere", 131072, 1, "notDownloaded")],
      activeModelId: "active",
      availableMemoryBytes: 0,
      totalMemoryBytes: 0,
    };
    expect(modelWithRoomFor(overview, 33_000)?.id).toBe("small");
    expect(modelWithRoomFor(overview, 60_000)?.id).toBe("big");
    expect(modelWithRoomFor(overview, 200_000)).toBeNull();
    expect(modelWithRoomFor(null, 1)).toBeNull();
  });
});
