/** One message: user text (plain) or the assistant's Markdown, with its badges and actions. */
import { memo } from "../lib/memo";
import { useState } from "preact/hooks";
import type { Message } from "../api/types";
import { cacheLabel, cacheShortLabel } from "../lib/kivi";
import { formatBytes, formatCount, formatDuration, formatRate, formatRatio, formatTime } from "../lib/format";
import { copyText, editAndResend, regenerate } from "../state/app";
import { parseJsonAnswer } from "../lib/jsonAnswer";
import { JsonTree } from "./JsonTree";
import { Markdown } from "./Markdown";
import { IconAlert, IconCopy, IconEdit, IconRefresh, Logo } from "./icons";

interface Props {
  message: Message;
  canRegenerate: boolean;
  canEdit: boolean;
  stopping: boolean;
  prefilling: boolean;
}

function StatsLine({ message }: { message: Message }) {
  const s = message.stats;
  if (!s) return null;
  const title = `${cacheLabel(s.cache)} · model ${s.modelId}\nPrompt ${formatCount(s.promptTokens)} tokens · prefill ${formatRate(s.prefillTokensPerSec)}\nKV cache: ${formatBytes(s.kvHeldBytes)} held, ${formatBytes(s.kvFp16Bytes)} in fp16 (${formatRatio(s.kvFp16Bytes, s.kvHeldBytes)})`;
  return (
    <div class="msg-stats" title={title} data-testid="message-stats">
      <span class="cache-tag">{cacheShortLabel(s.cache)}</span>
      <span>{formatCount(s.generatedTokens)} tokens</span>
      <span>{formatRate(s.decodeTokensPerSec)}</span>
      <span>TTFT {formatDuration(s.ttftMs)}</span>
    </div>
  );
}

function MessageItemImpl({ message, canRegenerate, canEdit, stopping, prefilling }: Props) {
  const [editing, setEditing] = useState(false);
  const [draft, setDraft] = useState(message.content);
  const isUser = message.role === "user";
  const streaming = message.status === "streaming";
  const json = !isUser && !streaming ? parseJsonAnswer(message.content) : null;

  const submitEdit = async () => {
    if (!draft.trim()) return;
    if (await editAndResend(message.id, draft)) setEditing(false);
  };

  return (
    <article
      class={`msg ${message.role}${streaming ? " streaming" : ""}`}
      data-testid={isUser ? "message-user" : "message-assistant"}
      data-message-id={message.id}
      data-status={message.status}
    >
      <div class="msg-avatar" aria-hidden="true">
        {isUser ? <span class="avatar-user">You</span> : <Logo size={26} />}
      </div>
      <div class="msg-main">
        <div class="msg-head">
          <span class="msg-author">{isUser ? "You" : "Assistant"}</span>
          <span class="msg-time">{formatTime(message.createdAt)}</span>
          {message.status === "interrupted" && (
            <span class="badge warn" data-testid="badge-interrupted" title="The app closed while this answer was being written. Regenerate it for a complete answer.">
              Interrupted
            </span>
          )}
          {message.status === "stopped" && (
            <span class="badge" data-testid="badge-stopped" title="You stopped this answer.">
              Stopped
            </span>
          )}
          {message.status === "error" && <span class="badge bad" data-testid="badge-error">Failed</span>}
          {streaming && stopping && <span class="badge">Stopping…</span>}
          {!editing && !streaming && (
            <div class="msg-actions">
              <button type="button" class="icon-btn small" title="Copy" aria-label="Copy message" data-testid="message-copy" onClick={() => void copyText(message.content, "Message copied")}>
                <IconCopy size={15} />
              </button>
              {isUser && canEdit && (
                <button type="button" class="icon-btn small" title="Edit and resend" aria-label="Edit and resend" data-testid="message-edit" onClick={() => { setDraft(message.content); setEditing(true); }}>
                  <IconEdit size={15} />
                </button>
              )}
              {!isUser && canRegenerate && (
                <button type="button" class="icon-btn small" title="Regenerate" aria-label="Regenerate answer" data-testid="message-regenerate" onClick={() => void regenerate()}>
                  <IconRefresh size={15} />
                </button>
              )}
            </div>
          )}
        </div>

        {editing ? (
          <div class="msg-edit">
            <textarea
              data-testid="edit-input"
              value={draft}
              rows={Math.min(12, Math.max(3, draft.split("\n").length + 1))}
              aria-label="Edit message"
              ref={(el) => el?.focus()}
              onInput={(e) => setDraft(e.currentTarget.value)}
              onKeyDown={(e) => {
                if (e.key === "Enter" && !e.shiftKey && !e.isComposing) {
                  e.preventDefault();
                  void submitEdit();
                } else if (e.key === "Escape") {
                  e.stopPropagation();
                  setEditing(false);
                  setDraft(message.content);
                }
              }}
            />
            <div class="msg-edit-actions">
              <span class="hint">Later messages are replaced by a new answer.</span>
              <button type="button" class="btn" onClick={() => { setEditing(false); setDraft(message.content); }}>
                Cancel
              </button>
              <button type="button" class="btn primary" data-testid="edit-send" disabled={!draft.trim()} onClick={() => void submitEdit()}>
                Save &amp; send
              </button>
            </div>
          </div>
        ) : isUser ? (
          <div class="msg-text" data-testid="message-content">{message.content}</div>
        ) : (
          <>
            {json ? (
              <div class="msg-json" data-testid="message-content">
                <JsonTree value={json} />
              </div>
            ) : message.content ? (
              <Markdown source={message.content} streaming={streaming} testId="message-content" />
            ) : streaming ? (
              <div class="thinking" data-testid="thinking">
                <span class="dots"><i /><i /><i /></span> {prefilling ? "Reading the conversation…" : "Thinking…"}
              </div>
            ) : (
              <div class="msg-text muted" data-testid="message-content">(no text)</div>
            )}
          </>
        )}

        {message.status === "error" && (
          <div class="msg-error" role="alert" data-testid="message-error">
            <IconAlert size={16} /> <span>{message.error ?? "The answer failed."}</span>
          </div>
        )}

        {!editing && !streaming && !isUser && message.stats && (
          <div class="msg-foot">
            <StatsLine message={message} />
          </div>
        )}
      </div>
    </article>
  );
}

export const MessageItem = memo(MessageItemImpl);
