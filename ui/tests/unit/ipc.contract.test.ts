/**
 * Keeps the code and IPC.md in step: every command the wrappers invoke is documented with
 * the same argument names, every documented command has a wrapper, and the events match.
 */
/** @vitest-environment jsdom */
import ipcMd from "../../IPC.md?raw";
import typesTs from "../../src/api/types.ts?raw";
import validateTs from "../../src/lib/validate.ts?raw";
import { readFileSync } from "node:fs";
import { dirname, join, resolve } from "node:path";
import { fileURLToPath } from "node:url";
import { afterEach, describe, expect, it } from "vitest";
import { clearMocks, mockIPC } from "@tauri-apps/api/mocks";
import { chats, documents, messages, models, server, settings, stats, system, ApiError, toApiError, EVENT_NAMES } from "../../src/api";
import type { Settings } from "../../src/api/types";
import { validateSettings } from "../../src/lib/validate";


/** Documented commands → argument names, from "#### `name`" headings and their "- args:" line. */
function documentedCommands(): Map<string, string[]> {
  const out = new Map<string, string[]>();
  const sections = ipcMd.split(/^#### /m).slice(1);
  for (const sec of sections) {
    const heading = sec.split("\n")[0]!;
    const names = [...heading.matchAll(/`([a-z_]+)`/g)].map((m) => m[1]!);
    const argsLine = sec.split("\n").find((l) => l.startsWith("- args:")) ?? "";
    const obj = argsLine.match(/`\{([^`]*)\}`/);
    const keys = obj ? [...obj[1]!.matchAll(/(\w+)\s*:/g)].map((m) => m[1]!) : [];
    for (const n of names) out.set(n, keys);
  }
  return out;
}

function documentedEvents(): string[] {
  const section = ipcMd.split(/^## Events/m)[1]!.split(/^## /m)[0]!;
  return [...section.matchAll(/^\| `([a-z-]+)` \|/gm)].map((m) => m[1]!);
}

/** The Rust back end's source file `path` (relative to src-tauri/src). */
const REPO = resolve(dirname(fileURLToPath(import.meta.url)), "../../..");
const rust = (path: string) => readFileSync(join(REPO, "src-tauri", "src", path), "utf8");

/** The body of `head {` ... up to the first line that is just `}`. */
function block(text: string, head: RegExp, what: string): string {
  const m = head.exec(text);
  if (!m) throw new Error(`${what} not found`);
  const rest = text.slice(m.index + m[0].length);
  return rest.slice(0, rest.search(/^}/m));
}

/** Field names of `interface name { ... }` in TypeScript (types.ts or IPC.md's listings). */
const tsFields = (text: string, name: string) =>
  [...block(text, new RegExp(`interface ${name}(?: extends \\w+)? \\{`), `interface ${name}`).matchAll(/^ {2}(\w+)\??:/gm)].map((m) => m[1]!);

/** Field names of `pub struct name { ... }` in Rust, as serde's `rename_all = "camelCase"` writes them. */
const rustFields = (text: string, name: string) =>
  [...block(text, new RegExp(`pub struct ${name} \\{`), `struct ${name}`).matchAll(/^ {4}pub (\w+):/gm)].map((m) =>
    m[1]!.replace(/_([a-z0-9])/g, (_, c: string) => c.toUpperCase()),
  );

const SETTINGS: Settings = {
  cache: { mode: "kivi", kBits: 2, vBits: 2, groupSize: 32, residualLength: 128, sinks: 0, rotation: "none" },
  contextLength: 8192,
  sampling: { temperature: 0.7, topP: 0.9, topK: 40, repetitionPenalty: 1.1, maxTokens: 512, seed: null },
  backend: "auto",
  diskCacheMib: 2048,
};

/** Calls every wrapper once. */
async function callEveryWrapper(): Promise<void> {
  await chats.listChats("q");
  await chats.createChat("t", "s");
  await chats.getChat("c");
  await chats.renameChat("c", "t");
  await chats.deleteChat("c");
  await chats.setSystemPrompt("c", "p");
  await chats.exportChat("c", "markdown");
  await messages.sendMessage("c", "hi", true);
  await messages.regenerate("c");
  await messages.editMessage("c", "m", "hi");
  await messages.stopGeneration("c");
  await documents.pickDocuments();
  await documents.attachDocument("c", "/a.txt");
  await documents.removeDocument("c", "d");
  await documents.readPartOfDocument("c", "d");
  await documents.prefillChat("c");
  await settings.getSettings();
  await settings.getDefaultSettings();
  await settings.fitContextLength(SETTINGS.cache);
  await settings.updateSettings(SETTINGS);
  await models.listModels();
  await models.inspectModel("a/b");
  await models.downloadModel("a/b");
  await models.pauseDownload("a/b");
  await models.resumeDownload("a/b");
  await models.cancelDownload("a/b");
  await models.deleteModel("a/b");
  await models.setActiveModel("a/b");
  await models.addLocalModel(true);
  await models.getModelStatus();
  await models.getHubTokenStatus();
  await models.setHubToken("hf_x");
  await stats.getStats();
  await server.getServerStatus();
  await server.startServer(8080, null);
  await server.stopServer();
  await system.openExternal("https://example.com");
}

afterEach(() => clearMocks());

describe("IPC contract", () => {
  it("documents exactly the commands the wrappers call, with the same argument names", async () => {
    const calls: { cmd: string; args: Record<string, unknown> }[] = [];
    mockIPC((cmd, args) => {
      calls.push({ cmd, args: (args ?? {}) as Record<string, unknown> });
      return null;
    });
    await callEveryWrapper();
    const documented = documentedCommands();
    const called = new Set(calls.map((c) => c.cmd));
    expect([...called].sort()).toEqual([...documented.keys()].sort());
    for (const c of calls) {
      expect(Object.keys(c.args).sort(), `arguments of ${c.cmd}`).toEqual([...documented.get(c.cmd)!].sort());
    }
  });

  it("documents exactly the events the UI knows", () => {
    expect([...EVENT_NAMES].sort()).toEqual(documentedEvents().sort());
  });

  it("subscribes to every event at start-up", async () => {
    const listened = new Set<string>();
    const overview = { models: [], activeModelId: null, availableMemoryBytes: 0, totalMemoryBytes: 0 };
    mockIPC((cmd, args) => {
      const a = (args ?? {}) as Record<string, unknown>;
      if (cmd === "plugin:event|listen") {
        listened.add(a.event as string);
        return 1;
      }
      if (cmd === "list_chats") return [];
      if (cmd === "list_models") return overview;
      if (cmd === "get_settings") return SETTINGS;
      if (cmd === "get_stats") return { timestampMs: 1, kvFp16Bytes: 0, kvHeldBytes: 0, tokens: 0 };
      return null;
    });
    const { boot, store } = await import("../../src/state/app");
    await boot();
    expect(store.get().booted).toBe(true);
    for (const e of EVENT_NAMES) expect(listened.has(e), e).toBe(true);
  });
});

describe("the types on both sides", () => {
  // Each IPC type: its TypeScript interface, the Rust struct that serializes it, where that lives.
  const pairs: [ts: string, rustName: string, file: string][] = [
    ["CacheConfig", "CacheSettings", "store/types.rs"],
    ["SamplingSettings", "SamplingSettings", "store/types.rs"],
    ["Settings", "Settings", "store/types.rs"],
    ["GenerationStats", "GenerationStats", "store/types.rs"],
    ["ChatCacheInfo", "ChatCacheInfo", "store/types.rs"],
    ["StatsSnapshot", "StatsSnapshot", "types.rs"],
    ["DiskCacheEvent", "DiskCacheEvent", "types.rs"],
    ["ModelInfo", "ModelInfo", "types.rs"],
  ];
  for (const [ts, rustName, file] of pairs) {
    it(`${ts}: the same fields in types.ts, IPC.md and Rust's ${rustName}`, () => {
      const fields = tsFields(typesTs, ts);
      expect(fields.length).toBeGreaterThan(1);
      expect(tsFields(ipcMd, ts), "IPC.md").toEqual(fields);
      expect(rustFields(rust(file), rustName), `src-tauri/src/${file}`).toEqual(fields);
    });
  }

  it("ModelSource has the same members in types.ts, IPC.md and Rust (local models included)", () => {
    const union = (text: string) => {
      const m = /type ModelSource = ([^;]+);/.exec(text);
      if (!m) throw new Error("type ModelSource not found");
      return [...m[1]!.matchAll(/"(\w+)"/g)].map((x) => x[1]!);
    };
    const variants = [...block(rust("types.rs"), /pub enum ModelSource \{/, "enum ModelSource").matchAll(/^ {4}([A-Z]\w*),/gm)].map(
      (x) => x[1]!.charAt(0).toLowerCase() + x[1]!.slice(1),
    );
    expect(union(typesTs)).toEqual(["builtin", "hub", "local"]);
    expect(union(ipcMd), "IPC.md").toEqual(union(typesTs));
    expect(variants, "src-tauri/src/types.rs").toEqual(union(typesTs));
  });

  it("the KIVI+ fields are in the contract", () => {
    expect(tsFields(typesTs, "CacheConfig")).toEqual(expect.arrayContaining(["sinks", "rotation"]));
    expect(tsFields(typesTs, "StatsSnapshot")).toEqual(expect.arrayContaining(["sinkTokens", "residualCapacity", "tokensUntilFlush"]));
    // Settings saved before KIVI+ lack them: Rust must read them as off.
    const cache = block(rust("store/types.rs"), /pub struct CacheSettings \{/, "CacheSettings");
    expect(cache).toMatch(/#\[serde\(default\)\]\s*pub sinks: u32/);
    expect(cache).toMatch(/#\[serde\(default\)\]\s*pub rotation: RotationSetting/);
    // Its names, the same on both sides.
    const names = [...block(rust("store/types.rs"), /pub enum RotationSetting \{/, "RotationSetting").matchAll(/^\s+(\w+),$/gm)].map((m) => m[1]!.toLowerCase());
    expect(names).toEqual(["none", "values", "both", "adaptive"]);
    expect(typesTs).toContain('export type RotationChoice = "none" | "values" | "both" | "adaptive";');
  });

  it("the validation rules name the same fields and say the same thing", () => {
    // Rust's string continuations (`\` at the end of a line) joined, as the compiler does.
    const settingsRs = rust("store/settings.rs").replace(/\\\n\s*/g, "");
    const rustRules = [...settingsRs.matchAll(/"(cache\.\w+|contextLength|sampling\.\w+|diskCacheMib)"/g)].map((m) => m[1]!);
    expect(rustRules).toContain("cache.sinks");
    expect(settingsRs).toContain(`"Sink tokens must be 0, 4 or 16."`);
    expect(ipcMd).toMatch(/\| `cache\.sinks` \| 0, 4 or 16 \|/);
    // Every field Rust checks is checked (and documented) here too.
    for (const field of new Set(rustRules)) {
      expect(validateTs, `validate.ts checks ${field}`).toContain(`"${field}"`);
      expect(ipcMd, `IPC.md documents ${field}`).toContain(`\`${field}\``);
    }
    const disk = "Disk space for saved caches must be a whole number of MiB from 0 to 1048576 (0 keeps none).";
    expect(rustRules).toContain("diskCacheMib");
    expect(settingsRs).toContain(`"${disk}"`);
    expect(validateSettings({ ...SETTINGS, diskCacheMib: 1_048_577 }).diskCacheMib).toBe(disk);
    expect(ipcMd).toMatch(/\| `diskCacheMib` \| integer, 0 ≤ n ≤ 1048576 /);
  });

  it("settings saved before diskCacheMib read as 2048", () => {
    const settingsTypes = block(rust("store/types.rs"), /pub struct Settings \{/, "Settings");
    expect(settingsTypes).toMatch(/#\[serde\(default = "default_disk_cache_mib"\)\]\s*pub disk_cache_mib: u32/);
    expect(rust("store/types.rs")).toMatch(/pub const DEFAULT_DISK_CACHE_MIB: u32 = 2048;/);
  });
});

describe("errors", () => {
  it("passes CommandError through as ApiError", async () => {
    mockIPC(() => {
      throw { code: "invalidArgument", message: "Residual length must be a multiple of 32.", field: "cache.residualLength" };
    });
    const err = await settings.updateSettings(SETTINGS).catch((e: unknown) => e);
    expect(err).toBeInstanceOf(ApiError);
    expect(err).toMatchObject({ code: "invalidArgument", field: "cache.residualLength", command: "update_settings", message: "Residual length must be a multiple of 32." });
  });

  it("normalizes strings, unknown codes and junk", () => {
    expect(toApiError("x", "plain failure")).toMatchObject({ code: "internal", message: "plain failure" });
    expect(toApiError("x", { code: "weird", message: "m" })).toMatchObject({ code: "internal", message: "m", field: null });
    expect(toApiError("x", undefined).message).toMatch(/Restart KIVI Chat/);
    expect(toApiError("x", { message: "" }).message).toMatch(/"x"/);
  });
});
