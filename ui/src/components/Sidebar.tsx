/** Left column: brand, new chat, search, the conversation list, navigation. */
import { useState } from "preact/hooks";
import type { ChatSummary } from "../api/types";
import { chatSubtitle } from "../lib/chatLogic";
import { formatTime } from "../lib/format";
import { deleteChat, newChat, renameChat, searchChats, selectChat, setView, useApp } from "../state/app";
import { ConfirmDialog } from "./Modal";
import { IconChat, IconCube, IconEdit, IconPlus, IconSearch, IconSettings, IconTrash, IconX, Logo } from "./icons";

function ChatRow({ chat, active }: { chat: ChatSummary; active: boolean }) {
  const [editing, setEditing] = useState(false);
  const [title, setTitle] = useState(chat.title);
  const [confirming, setConfirming] = useState(false);

  const commit = () => {
    setEditing(false);
    if (title.trim() && title.trim() !== chat.title) void renameChat(chat.id, title);
    else setTitle(chat.title);
  };

  return (
    <li class={`chat-row${active ? " active" : ""}`} data-testid="chat-item" data-chat-id={chat.id}>
      {editing ? (
        <input
          class="chat-rename"
          data-testid="chat-rename-input"
          value={title}
          maxLength={200}
          aria-label="Chat title"
          ref={(el) => el?.focus()}
          onInput={(e) => setTitle(e.currentTarget.value)}
          onBlur={commit}
          onKeyDown={(e) => {
            if (e.key === "Enter") commit();
            if (e.key === "Escape") {
              e.stopPropagation();
              setTitle(chat.title);
              setEditing(false);
            }
          }}
        />
      ) : (
        <button type="button" class="chat-open" onClick={() => void selectChat(chat.id)} aria-current={active ? "page" : undefined}>
          <span class="chat-title" data-testid="chat-title">{chat.title || "New chat"}</span>
          <span class="chat-meta">
            <span class="chat-preview" data-testid="chat-preview">{chatSubtitle(chat)}</span>
            <span class="chat-time">{formatTime(chat.updatedAt)}</span>
          </span>
        </button>
      )}
      {!editing && (
        <span class="chat-actions">
          <button type="button" class="icon-btn small" title="Rename" aria-label="Rename chat" data-testid="chat-rename" onClick={() => { setTitle(chat.title); setEditing(true); }}>
            <IconEdit size={15} />
          </button>
          <button type="button" class="icon-btn small" title="Delete" aria-label="Delete chat" data-testid="chat-delete" onClick={() => setConfirming(true)}>
            <IconTrash size={15} />
          </button>
        </span>
      )}
      {confirming && (
        <ConfirmDialog
          title="Delete this chat?"
          message={<>“{chat.title || "New chat"}”, its messages, documents and KV cache will be deleted. This cannot be undone.</>}
          confirmLabel="Delete"
          danger
          testId="confirm-delete"
          onConfirm={() => void deleteChat(chat.id)}
          onClose={() => setConfirming(false)}
        />
      )}
    </li>
  );
}

export function Sidebar() {
  const chats = useApp((s) => s.chats);
  const query = useApp((s) => s.chatQuery);
  const activeId = useApp((s) => s.activeChatId);
  const view = useApp((s) => s.view);
  const modelStatus = useApp((s) => s.modelStatus);

  const dot = modelStatus?.state === "ready" ? "ok" : modelStatus?.state === "loading" ? "busy" : modelStatus?.state === "failed" ? "bad" : "off";

  return (
    <aside class="sidebar" data-testid="sidebar">
      <div class="brand">
        <Logo size={30} />
        <div class="brand-text">
          <span class="brand-name">KIVI Chat</span>
          <span class="brand-sub">local LLM · KIVI cache</span>
        </div>
      </div>
      <button type="button" class="btn primary block" data-testid="new-chat" onClick={() => void newChat()}>
        <IconPlus /> New chat
      </button>
      <label class="search">
        <IconSearch size={16} />
        <input
          type="search"
          placeholder="Search chats"
          value={query}
          data-testid="chat-search"
          aria-label="Search chats"
          onInput={(e) => searchChats(e.currentTarget.value)}
        />
        {query && (
          <button type="button" class="icon-btn small" aria-label="Clear search" onClick={() => searchChats("")}>
            <IconX size={14} />
          </button>
        )}
      </label>
      <nav class="chat-list-wrap" aria-label="Chats">
        {chats.length === 0 ? (
          <p class="list-empty" data-testid="chat-list-empty">
            {query ? <>No chat matches “{query}”.</> : <>No chats yet. Start one with <strong>New chat</strong>, or just type below.</>}
          </p>
        ) : (
          <ul class="chat-list" data-testid="chat-list">
            {chats.map((c) => (
              <ChatRow key={c.id} chat={c} active={c.id === activeId && view === "chat"} />
            ))}
          </ul>
        )}
      </nav>
      <div class="side-nav">
        <button type="button" class={`nav-btn${view === "chat" ? " active" : ""}`} data-testid="nav-chat" onClick={() => setView("chat")}>
          <IconChat /> Chat
        </button>
        <button type="button" class={`nav-btn${view === "models" ? " active" : ""}`} data-testid="nav-models" onClick={() => setView("models")}>
          <IconCube /> Models
          <span class={`status-dot ${dot}`} title={modelStatus?.name ?? "No model"} />
        </button>
        <button type="button" class={`nav-btn${view === "settings" ? " active" : ""}`} data-testid="nav-settings" onClick={() => setView("settings")}>
          <IconSettings /> Settings
        </button>
      </div>
    </aside>
  );
}
