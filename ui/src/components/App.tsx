/** The window: sidebar, the current view, the live panel; global keys and file drops. */
import { useEffect } from "preact/hooks";
import { getCurrentWebview } from "@tauri-apps/api/webview";
import { attachPaths, boot, newChat, setDragging, setView, stop, useApp } from "../state/app";
import { ErrorBoundary } from "./ErrorBoundary";
import { ChatView } from "./ChatView";
import { LivePanel } from "./LivePanel";
import { ModelsView } from "./ModelsView";
import { SettingsView } from "./SettingsView";
import { Sidebar } from "./Sidebar";
import { Toasts } from "./Toasts";
import { IconFile, Logo } from "./icons";

function useTheme() {
  const theme = useApp((s) => s.theme);
  useEffect(() => {
    const root = document.documentElement;
    if (theme === "system") root.removeAttribute("data-theme");
    else root.setAttribute("data-theme", theme);
  }, [theme]);
}

function useGlobalKeys() {
  useEffect(() => {
    const onKey = (e: KeyboardEvent) => {
      if (e.key === "Escape" && !e.defaultPrevented) void stop();
      const mod = e.ctrlKey || e.metaKey;
      if (mod && !e.shiftKey && !e.altKey && e.key.toLowerCase() === "n") {
        e.preventDefault();
        void newChat();
      } else if (mod && !e.shiftKey && !e.altKey && e.key.toLowerCase() === "k") {
        e.preventDefault();
        setView("chat");
        document.querySelector<HTMLInputElement>('[data-testid="chat-search"]')?.focus();
      } else if (mod && e.key === ",") {
        e.preventDefault();
        setView("settings");
      }
    };
    window.addEventListener("keydown", onKey);
    return () => window.removeEventListener("keydown", onKey);
  }, []);
}

/** Tauri's drag-drop event gives file paths (HTML5 drops carry no paths in a webview). */
function useFileDrop() {
  useEffect(() => {
    let unlisten: (() => void) | null = null;
    let disposed = false;
    try {
      getCurrentWebview()
        .onDragDropEvent((ev) => {
          const p = ev.payload;
          if (p.type === "enter" || p.type === "over") setDragging(true);
          else if (p.type === "leave") setDragging(false);
          else if (p.type === "drop") {
            setDragging(false);
            if (p.paths.length) void attachPaths(p.paths);
          }
        })
        .then((fn) => {
          if (disposed) fn();
          else unlisten = fn;
        })
        .catch(() => undefined);
    } catch {
      /* not running inside Tauri */
    }
    return () => {
      disposed = true;
      unlisten?.();
    };
  }, []);
}

function BootScreen() {
  const error = useApp((s) => s.bootError);
  return (
    <div class="boot" data-testid="boot-screen">
      <Logo size={64} />
      {error ? (
        <>
          <h1>KIVI Chat could not start</h1>
          <p class="field-error" data-testid="boot-error">{error}</p>
          <button type="button" class="btn primary" onClick={() => void boot()}>
            Try again
          </button>
        </>
      ) : (
        <p class="muted">Starting…</p>
      )}
    </div>
  );
}

export function App() {
  const booted = useApp((s) => s.booted);
  const view = useApp((s) => s.view);
  const panelOpen = useApp((s) => s.panelOpen);
  const dragging = useApp((s) => s.dragging);
  useTheme();
  useGlobalKeys();
  useFileDrop();
  useEffect(() => {
    void boot();
  }, []);

  if (!booted) return <BootScreen />;

  return (
    <div class={`app${panelOpen ? " with-panel" : ""}`} data-testid="app" data-view={view}>
      <Sidebar />
      <main class="main">
        <ErrorBoundary key={view}>{view === "settings" ? <SettingsView /> : view === "models" ? <ModelsView /> : <ChatView />}</ErrorBoundary>
      </main>
      {panelOpen && (
        <ErrorBoundary>
          <LivePanel />
        </ErrorBoundary>
      )}
      {dragging && (
        <div class="drop-overlay" data-testid="drop-overlay">
          <div class="drop-box">
            <IconFile size={36} />
            <strong>Drop to attach</strong>
            <span>.txt, .md or .pdf</span>
          </div>
        </div>
      )}
      <Toasts />
    </div>
  );
}
