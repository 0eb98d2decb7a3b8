/** The message box: document chips, text, attach, send/stop. Enter sends, Shift+Enter breaks. */
import { useEffect, useLayoutEffect, useRef, useState } from "preact/hooks";
import type { DocumentInfo } from "../api/types";
import { documentCost, isBusy } from "../lib/chatLogic";
import { formatBytes, formatCount, formatEta, formatTokens } from "../lib/format";
import { cacheShortLabel } from "../lib/kivi";
import { pickAndAttach, removeDocument, send, stop, useApp } from "../state/app";
import { IconAlert, IconCheck, IconFile, IconPaperclip, IconSend, IconStop, IconX } from "./icons";

function DocChip({ doc, prefilling, cache }: { doc: DocumentInfo; prefilling: boolean; cache: string }) {
  const state = !doc.fitsInContext ? "too-long" : prefilling ? "reading" : doc.prefilled ? "cached" : "ready";
  const title = !doc.fitsInContext
    ? `${doc.name}: ${formatCount(doc.tokenCount)} tokens do not fit the context of ${formatCount(doc.contextLength)} tokens (with the system prompt, earlier documents and room for an answer). Raise the context length in Settings, or remove it.`
    : `${doc.name}: ${documentCost(doc, cache)}${doc.prefilled ? ". In the KV cache: follow-up questions skip re-reading it." : ". Read with the next message."}`;
  return (
    <div class={`doc-chip ${state}`} data-testid="doc-chip" data-fits={doc.fitsInContext ? "true" : "false"} title={title}>
      <IconFile size={15} />
      <span class="doc-name">{doc.name}</span>
      <span class="doc-tokens" data-testid="doc-tokens">{formatTokens(doc.tokenCount)} tok</span>
      {state !== "too-long" && doc.kvBytes != null && (
        <span class="doc-kv" data-testid="doc-kv">
          {formatBytes(doc.kvBytes)} KV{state === "ready" && doc.readSeconds != null ? ` · ~${formatEta(doc.readSeconds)}` : ""}
        </span>
      )}
      {state === "too-long" && (
        <span class="doc-flag bad" data-testid="doc-too-long">
          <IconAlert size={13} /> too long
        </span>
      )}
      {state === "cached" && (
        <span class="doc-flag ok" data-testid="doc-cached">
          <IconCheck size={13} /> cached
        </span>
      )}
      {state === "ready" && <span class="doc-flag" data-testid="doc-fits">fits</span>}
      {state === "reading" && <span class="doc-flag busy">reading…</span>}
      <button type="button" class="icon-btn tiny" aria-label={`Remove ${doc.name}`} data-testid="doc-remove" onClick={() => void removeDocument(doc.id)}>
        <IconX size={13} />
      </button>
    </div>
  );
}

export function Composer() {
  const view = useApp((s) => s.chatView);
  const restore = useApp((s) => s.composerRestore);
  const modelReady = useApp((s) => s.modelStatus?.state === "ready");
  const cache = useApp((s) => cacheShortLabel(s.settings?.cache));
  const [text, setText] = useState("");
  const [asJson, setAsJson] = useState(false);
  const ref = useRef<HTMLTextAreaElement>(null);

  const busy = view ? isBusy(view) : false;
  const generating = !!view?.generation;
  const prefilling = !!view?.prefill;
  const docs = view?.chat.documents ?? [];

  useEffect(() => {
    if (restore) setText((t) => (t ? t : restore.text));
  }, [restore]);

  useEffect(() => {
    ref.current?.focus();
  }, [view?.chat.id]);

  useLayoutEffect(() => {
    const el = ref.current;
    if (!el) return;
    el.style.height = "auto";
    el.style.height = `${Math.min(el.scrollHeight, 240)}px`;
  }, [text]);

  const submit = async () => {
    if (busy || !text.trim()) return;
    const sent = text;
    setText("");
    const ok = await send(sent, asJson);
    if (!ok) setText((t) => (t ? t : sent));
  };

  const onKeyDown = (e: KeyboardEvent) => {
    if (e.key === "Enter" && !e.shiftKey && !e.isComposing) {
      e.preventDefault();
      void submit();
    }
  };

  const placeholder = prefilling
    ? "Reading the document… you can type your question meanwhile"
    : docs.length
      ? "Ask about the document…"
      : "Message KIVI Chat…";

  return (
    <div class="composer-wrap">
      <form
        class={`composer${busy ? " busy" : ""}`}
        data-testid="composer"
        onSubmit={(e) => {
          e.preventDefault();
          void submit();
        }}
      >
        {docs.length > 0 && (
          <div class="doc-chips" data-testid="doc-chips">
            {docs.map((d) => (
              <DocChip key={d.id} doc={d} cache={cache} prefilling={prefilling && (view?.prefill?.documentIds.includes(d.id) ?? false)} />
            ))}
          </div>
        )}
        <textarea
          ref={ref}
          rows={1}
          value={text}
          placeholder={placeholder}
          aria-label="Message"
          data-testid="composer-input"
          onInput={(e) => setText(e.currentTarget.value)}
          onKeyDown={onKeyDown}
        />
        <div class="composer-bar">
          <button type="button" class="icon-btn" title="Attach .txt, .md or .pdf" aria-label="Attach a document" data-testid="attach-button" onClick={() => void pickAndAttach()}>
            <IconPaperclip />
          </button>
          <button
            type="button"
            class={`icon-btn json-toggle${asJson ? " on" : ""}`}
            title={asJson ? "Answer as JSON: on (the answer is a JSON object, shown as a tree)" : "Answer as JSON"}
            aria-label="Answer as JSON"
            aria-pressed={asJson}
            data-testid="json-toggle"
            onClick={() => setAsJson((on) => !on)}
          >
            {"{ }"}
          </button>
          <span class="composer-hint">
            {generating ? (
              <>
                <kbd>Esc</kbd> stops
              </>
            ) : prefilling ? (
              <>
                <kbd>Esc</kbd> cancels reading
              </>
            ) : (
              <>
                <kbd>Enter</kbd> sends · <kbd>Shift</kbd>+<kbd>Enter</kbd> new line · drop files to attach
              </>
            )}
          </span>
          {generating || prefilling ? (
            <button type="button" class="send-btn stop" data-testid="stop-button" title="Stop (Esc)" aria-label="Stop" onClick={() => void stop()}>
              <IconStop />
            </button>
          ) : (
            <button
              type="submit"
              class="send-btn"
              data-testid="send-button"
              title={modelReady ? "Send (Enter)" : "Send (the model is not ready yet)"}
              aria-label="Send"
              disabled={!text.trim() || busy}
            >
              <IconSend />
            </button>
          )}
        </div>
      </form>
    </div>
  );
}
