/** The conversation: header, model banner, messages, prefill progress, composer. */
import { useEffect, useLayoutEffect, useRef, useState } from "preact/hooks";
import { documentBudget, fittingTokens, isBusy, canEdit as canEditMessage, regenerableMessage } from "../lib/chatLogic";
import { modelWithRoomFor } from "../lib/models";
import { cacheLabel, sameCache } from "../lib/kivi";
import { formatCount, formatEta, formatPercent, formatRate } from "../lib/format";
import {
  activateModel,
  readPartOfDocument,
  exportChat,
  pickAndAttach,
  renameChat,
  saveSystemPrompt,
  setView,
  stop,
  togglePanel,
  useApp,
} from "../state/app";
import type { ChatView as ChatViewState } from "../lib/chatLogic";
import { Composer } from "./Composer";
import { MessageItem } from "./MessageItem";
import { Modal } from "./Modal";
import { IconAlert, IconBolt, IconExport, IconFile, IconPanel, IconPrompt, IconSliders, Logo } from "./icons";

function ModelBanner() {
  const status = useApp((s) => s.modelStatus);
  if (!status || status.state === "ready") return null;
  if (status.state === "loading") {
    return (
      <div class="banner info" data-testid="model-banner" data-state="loading">
        <span class="spinner" aria-hidden="true" />
        <span>
          Loading <strong>{status.name ?? status.modelId}</strong>…{status.progress != null && ` ${formatPercent(status.progress)}`}
        </span>
        {status.progress != null && (
          <span class="bar slim">
            <span style={{ width: formatPercent(status.progress) }} />
          </span>
        )}
      </div>
    );
  }
  if (status.state === "failed") {
    return (
      <div class="banner bad" role="alert" data-testid="model-banner" data-state="failed">
        <IconAlert />
        <span class="banner-text">
          <strong>{status.name ?? "The model"} failed to load.</strong> {status.error ?? "Pick another model, or download it again."}
        </span>
        {status.modelId && (
          <button type="button" class="btn small" onClick={() => void activateModel(status.modelId!)}>
            Retry
          </button>
        )}
        <button type="button" class="btn small" onClick={() => setView("models")}>
          Open Models
        </button>
      </div>
    );
  }
  return (
    <div class="banner" data-testid="model-banner" data-state="unloaded">
      <IconAlert />
      <span class="banner-text">No model is loaded. Choose one in Models to start chatting.</span>
      <button type="button" class="btn small primary" onClick={() => setView("models")}>
        Open Models
      </button>
    </div>
  );
}

function PrefillBar({ view }: { view: ChatViewState }) {
  const p = view.prefill;
  if (!p) return null;
  const fraction = p.totalTokens > 0 ? p.processedTokens / p.totalTokens : 0;
  const names = view.chat.documents.filter((d) => p.documentIds.includes(d.id)).map((d) => d.name);
  const what = names.length ? `Reading ${names.join(", ")}` : "Reading the conversation";
  return (
    <div class="prefill" data-testid="prefill-progress" role="status">
      <div class="prefill-top">
        <span class="prefill-what">
          <IconFile size={15} /> {what}
        </span>
        <span class="prefill-nums" data-testid="prefill-text">
          {formatCount(p.processedTokens)} / {formatCount(p.totalTokens)} tokens · {formatRate(p.tokensPerSec)} · {formatEta(p.etaSeconds)} left
        </span>
        <button type="button" class="btn small" data-testid="prefill-cancel" onClick={() => void stop()}>
          Cancel
        </button>
      </div>
      <div class="bar" role="progressbar" aria-valuemin={0} aria-valuemax={100} aria-valuenow={Math.round(fraction * 100)} aria-label="Prefill progress">
        <span data-testid="prefill-bar" style={{ width: `${(Math.min(1, fraction) * 100).toFixed(1)}%` }} />
      </div>
    </div>
  );
}

function SystemPromptDialog({ view, onClose }: { view: ChatViewState; onClose: () => void }) {
  const [text, setText] = useState(view.chat.systemPrompt);
  const changed = text !== view.chat.systemPrompt;
  return (
    <Modal
      title="System prompt"
      onClose={onClose}
      testId="system-prompt-dialog"
      wide
      footer={
        <>
          <span class="hint grow">{changed && view.chat.messageCount > 0 ? "Saving resets this chat's KV cache; the next message re-reads the conversation." : ""}</span>
          <button type="button" class="btn" onClick={onClose}>
            Cancel
          </button>
          <button
            type="button"
            class="btn primary"
            data-testid="system-prompt-save"
            disabled={!changed}
            onClick={async () => {
              if (await saveSystemPrompt(view.chat.id, text)) onClose();
            }}
          >
            Save
          </button>
        </>
      }
    >
      <p class="hint">Instructions the model sees before every message of this chat.</p>
      <textarea
        class="system-prompt-input"
        data-testid="system-prompt-input"
        rows={8}
        value={text}
        placeholder="You are a careful assistant. Answer from the attached documents and quote them."
        onInput={(e) => setText(e.currentTarget.value)}
      />
    </Modal>
  );
}

function ChatHeader({ view }: { view: ChatViewState }) {
  const settings = useApp((s) => s.settings);
  const panelOpen = useApp((s) => s.panelOpen);
  const [editing, setEditing] = useState(false);
  const [title, setTitle] = useState(view.chat.title);
  const [promptOpen, setPromptOpen] = useState(false);
  const [exportOpen, setExportOpen] = useState(false);
  useEffect(() => setTitle(view.chat.title), [view.chat.title]);

  // Live numbers when the engine's current cache is this chat's; else what get_chat said.
  const live = useApp((s) => (s.stats && s.stats.chatId === view.chat.id && s.stats.cache ? s.stats : null));
  const cache = live ? { config: live.cache, tokens: live.tokens } : view.chat.cache;
  const configured = settings?.cache ?? null;
  const rebuild = cache.config && configured && !sameCache(cache.config, configured);
  const cacheNote = !cache.config
    ? view.chat.messageCount > 0 || view.chat.documents.length > 0
      ? "No cache yet: the next message reads the conversation and documents into a new cache."
      : "A cache is built with the first message."
    : rebuild
      ? "Built with other settings: the next message rebuilds it."
      : `${formatCount(cache.tokens)} tokens cached`;

  const commit = () => {
    setEditing(false);
    if (title.trim() && title.trim() !== view.chat.title) void renameChat(view.chat.id, title);
    else setTitle(view.chat.title);
  };

  return (
    <header class="chat-header">
      <div class="chat-heading">
        {editing ? (
          <input
            class="title-input"
            value={title}
            maxLength={200}
            aria-label="Chat title"
            data-testid="chat-title-input"
            ref={(el) => el?.focus()}
            onInput={(e) => setTitle(e.currentTarget.value)}
            onBlur={commit}
            onKeyDown={(e) => {
              if (e.key === "Enter") commit();
              if (e.key === "Escape") {
                e.stopPropagation();
                setEditing(false);
                setTitle(view.chat.title);
              }
            }}
          />
        ) : (
          <h1 class="chat-name" title="Click to rename" data-testid="chat-heading" onClick={() => setEditing(true)}>
            {view.chat.title || "New chat"}
          </h1>
        )}
        <div class="chat-sub">
          <span class={`cache-pill${configured?.mode === "fp16" ? " fp16" : ""}`} data-testid="cache-pill" title={cacheNote}>
            <IconBolt size={13} /> {cacheLabel(configured)}
          </span>
          <span class="muted small" data-testid="cache-note">{cacheNote}</span>
        </div>
      </div>
      <div class="header-actions">
        <button type="button" class={`btn ghost${view.chat.systemPrompt ? " on" : ""}`} data-testid="system-prompt-button" onClick={() => setPromptOpen(true)} title="System prompt for this chat">
          <IconPrompt /> <span class="label">System prompt</span>
        </button>
        <div class="menu-wrap">
          <button type="button" class="btn ghost" data-testid="export-button" aria-haspopup="menu" aria-expanded={exportOpen} onClick={() => setExportOpen(!exportOpen)} disabled={view.chat.messageCount === 0}>
            <IconExport /> <span class="label">Export</span>
          </button>
          {exportOpen && (
            <div class="menu" role="menu" onMouseLeave={() => setExportOpen(false)}>
              <button type="button" role="menuitem" data-testid="export-markdown" onClick={() => { setExportOpen(false); void exportChat(view.chat.id, "markdown"); }}>
                Markdown (.md)
              </button>
              <button type="button" role="menuitem" data-testid="export-json" onClick={() => { setExportOpen(false); void exportChat(view.chat.id, "json"); }}>
                JSON (.json)
              </button>
            </div>
          )}
        </div>
        <button type="button" class={`icon-btn${panelOpen ? " on" : ""}`} data-testid="panel-toggle" title="Live KV cache panel" aria-label="Toggle the live KV cache panel" aria-pressed={panelOpen} onClick={() => togglePanel()}>
          <IconPanel />
        </button>
      </div>
      {promptOpen && <SystemPromptDialog view={view} onClose={() => setPromptOpen(false)} />}
    </header>
  );
}

function Welcome() {
  const settings = useApp((s) => s.settings);
  return (
    <div class="welcome" data-testid="welcome">
      <Logo size={56} />
      <h2>Chat with long documents, on your machine</h2>
      <p class="muted">
        KIVI Chat keeps the model's KV cache in 2- or 4-bit form, so long documents fit in far less memory. Nothing leaves your computer.
      </p>
      <div class="welcome-cards">
        <button type="button" class="welcome-card" data-testid="welcome-attach" onClick={() => void pickAndAttach()}>
          <IconFile />
          <strong>Attach a document</strong>
          <span>.txt, .md or .pdf — or drop it anywhere in the window</span>
        </button>
        <button type="button" class="welcome-card" onClick={() => togglePanel(true)}>
          <IconPanel />
          <strong>Watch the cache</strong>
          <span>fp16 vs {settings?.cache.mode === "fp16" ? "KIVI" : cacheLabel(settings?.cache)} bytes, live</span>
        </button>
        <button type="button" class="welcome-card" onClick={() => setView("settings")}>
          <IconSliders />
          <strong>Tune KIVI</strong>
          <span>key/value bits, group size, residual window</span>
        </button>
      </div>
    </div>
  );
}

function EmptyChat({ view }: { view: ChatViewState }) {
  const docs = view.chat.documents;
  const budget = documentBudget(docs);
  const tooLong = docs.filter((d) => !d.fitsInContext);
  const neededContext = Math.max(0, ...tooLong.map((d) => d.contextNeeded));
  const longer = useApp((s) => (tooLong.length ? modelWithRoomFor(s.models, neededContext) : null));
  const one = tooLong.length === 1 ? tooLong[0]! : null;
  return (
    <div class="empty-chat" data-testid="empty-chat">
      {tooLong.length > 0 ? (
        <>
          <h3>
            {tooLong.length === 1 ? `${tooLong[0]!.name} is too long for the context` : `${tooLong.length} documents are too long for the context`}
          </h3>
          <p class="muted" data-testid="too-long-text">
            {one &&
              `It has ${formatCount(one.tokenCount)} tokens; with the system prompt, the documents before it and room for an answer it needs a context of ${formatCount(one.contextNeeded)} tokens, and the context holds ${formatCount(one.contextLength)}: ${formatCount(fittingTokens(one))} of its tokens would fit, and nothing is cut without you. `}
            Read only its first part (the model is told which part it sees), remove it, or raise the context length in Settings (“Fit this machine” finds the longest this computer holds).
            {longer && ` ${longer.name}, installed, reads up to ${formatCount(longer.contextLength)} tokens.`}
            {docs.length > tooLong.length && " The other documents can be used as usual."}
          </p>
          <div class="empty-actions">
            <button type="button" class="btn" onClick={() => setView("settings")}>
              Open Settings
            </button>
            {longer && (
              <button type="button" class="btn" data-testid="use-longer-model" onClick={() => void activateModel(longer.id)}>
                Use {longer.name}
              </button>
            )}
            {one && fittingTokens(one) > 0 && (
              <button type="button" class="btn" data-testid="read-part" onClick={() => void readPartOfDocument(one.id)}>
                Read the part that fits (about {formatCount(fittingTokens(one))} tokens)
              </button>
            )}
          </div>
        </>
      ) : docs.length ? (
        <>
          <h3>Ask about your document{docs.length > 1 ? "s" : ""}</h3>
          <p class="muted">{formatCount(budget.tokens)} tokens attached. The first question reads them into the KV cache; follow-up questions reuse it.</p>
        </>
      ) : (
        <>
          <h3>Start the conversation</h3>
          <p class="muted">Type a question below, or attach a .txt, .md or .pdf document (drag it into the window).</p>
        </>
      )}
    </div>
  );
}

export function ChatView() {
  const view = useApp((s) => s.chatView);
  const loading = useApp((s) => s.chatLoading);
  const scroller = useRef<HTMLDivElement>(null);
  const stick = useRef(true);

  const messages = view?.chat.messages ?? [];
  const last = messages[messages.length - 1];

  useLayoutEffect(() => {
    const el = scroller.current;
    if (el && stick.current) el.scrollTop = el.scrollHeight;
  }, [messages.length, last?.content, last?.status, view?.prefill != null]);

  useEffect(() => {
    stick.current = true;
    const el = scroller.current;
    if (el) el.scrollTop = el.scrollHeight;
  }, [view?.chat.id]);

  // Markdown paints on animation frames: follow the content's growth, not just new props.
  useEffect(() => {
    const el = scroller.current;
    const inner = el?.firstElementChild;
    if (!el || !inner) return;
    const ro = new ResizeObserver(() => {
      if (stick.current) el.scrollTop = el.scrollHeight;
    });
    ro.observe(inner);
    return () => ro.disconnect();
  }, []);

  const onScroll = () => {
    const el = scroller.current;
    if (el) stick.current = el.scrollHeight - el.scrollTop - el.clientHeight < 80;
  };

  const regenId = view ? regenerableMessage(view)?.id : undefined;
  const busy = view ? isBusy(view) : false;

  return (
    <section class="chat" data-testid="chat-view" aria-busy={loading}>
      {view ? <ChatHeader view={view} /> : <header class="chat-header placeholder" />}
      <ModelBanner />
      <div class="messages" ref={scroller} onScroll={onScroll} data-testid="messages">
        <div class="messages-inner">
          {!view && !loading && <Welcome />}
          {view && messages.length === 0 && <EmptyChat view={view} />}
          {view &&
            messages.map((m) => (
              <MessageItem
                key={m.id}
                message={m}
                canRegenerate={m.id === regenId}
                canEdit={!busy && canEditMessage(view, m)}
                stopping={!!view.generation?.stopping && view.generation.messageId === m.id}
                prefilling={!!view.prefill && view.generation?.messageId === m.id}
              />
            ))}
        </div>
      </div>
      {view && <PrefillBar view={view} />}
      <Composer />
    </section>
  );
}
