/**
 * Keeps the code and IPC.md in step: every command the wrappers invoke is documented with
 * the same argument names, every documented command has a wrapper, and the events match.
 */
/** @vitest-environment jsdom */
import ipcMd from "../../IPC.md?raw";
import { afterEach, describe, expect, it } from "vitest";
import { clearMocks, mockIPC } from "@tauri-apps/api/mocks";
import { chats, documents, messages, models, server, settings, stats, system, ApiError, toApiError, EVENT_NAMES } from "../../src/api";
import type { Settings } from "../../src/api/types";


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

const SETTINGS: Settings = {
  cache: { mode: "kivi", kBits: 2, vBits: 2, groupSize: 32, residualLength: 128 },
  contextLength: 8192,
  sampling: { temperature: 0.7, topP: 0.9, topK: 40, repetitionPenalty: 1.1, maxTokens: 512, seed: null },
  backend: "auto",
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
  await messages.sendMessage("c", "hi");
  await messages.regenerate("c");
  await messages.editMessage("c", "m", "hi");
  await messages.stopGeneration("c");
  await documents.pickDocuments();
  await documents.attachDocument("c", "/a.txt");
  await documents.removeDocument("c", "d");
  await documents.prefillChat("c");
  await settings.getSettings();
  await settings.getDefaultSettings();
  await settings.updateSettings(SETTINGS);
  await models.listModels();
  await models.inspectModel("a/b");
  await models.downloadModel("a/b");
  await models.pauseDownload("a/b");
  await models.resumeDownload("a/b");
  await models.cancelDownload("a/b");
  await models.deleteModel("a/b");
  await models.setActiveModel("a/b");
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
