/** Notifications, bottom right. Errors stay until dismissed or timed out. */
import { dismissToast, useApp } from "../state/app";
import { IconAlert, IconCheck, IconInfo, IconX } from "./icons";

export function Toasts() {
  const toasts = useApp((s) => s.toasts);
  return (
    <div class="toasts" aria-live="polite" data-testid="toasts">
      {toasts.map((t) => (
        <div key={t.id} class={`toast ${t.kind}`} role={t.kind === "error" ? "alert" : "status"} data-testid={`toast-${t.kind}`}>
          <span class="toast-icon">{t.kind === "error" ? <IconAlert /> : t.kind === "success" ? <IconCheck /> : <IconInfo />}</span>
          <div class="toast-text">
            <strong>{t.title}</strong>
            {t.message && <p>{t.message}</p>}
          </div>
          <button type="button" class="icon-btn small" aria-label="Dismiss" onClick={() => dismissToast(t.id)}>
            <IconX size={14} />
          </button>
        </div>
      ))}
    </div>
  );
}
