/** A modal dialog: Esc or the backdrop closes it; focus moves into it and back. */
import type { ComponentChildren } from "preact";
import { useEffect, useRef } from "preact/hooks";
import { IconX } from "./icons";

export function Modal(props: {
  title: string;
  onClose: () => void;
  children: ComponentChildren;
  footer?: ComponentChildren;
  testId?: string;
  wide?: boolean;
}) {
  const ref = useRef<HTMLDivElement>(null);
  useEffect(() => {
    const before = document.activeElement as HTMLElement | null;
    const first = ref.current?.querySelector<HTMLElement>("textarea, input, select, button.primary, button");
    first?.focus();
    const onKey = (e: KeyboardEvent) => {
      if (e.key === "Escape") {
        e.stopPropagation();
        e.preventDefault();
        props.onClose();
      }
    };
    window.addEventListener("keydown", onKey, true);
    return () => {
      window.removeEventListener("keydown", onKey, true);
      before?.focus?.();
    };
  }, []);
  return (
    <div class="modal-backdrop" onMouseDown={(e) => e.target === e.currentTarget && props.onClose()}>
      <div ref={ref} class={`modal${props.wide ? " wide" : ""}`} role="dialog" aria-modal="true" aria-label={props.title} data-testid={props.testId}>
        <header class="modal-head">
          <h2>{props.title}</h2>
          <button type="button" class="icon-btn" aria-label="Close" onClick={props.onClose}>
            <IconX />
          </button>
        </header>
        <div class="modal-body">{props.children}</div>
        {props.footer && <footer class="modal-foot">{props.footer}</footer>}
      </div>
    </div>
  );
}

export function ConfirmDialog(props: {
  title: string;
  message: ComponentChildren;
  confirmLabel: string;
  danger?: boolean;
  onConfirm: () => void;
  onClose: () => void;
  testId?: string;
}) {
  return (
    <Modal
      title={props.title}
      onClose={props.onClose}
      testId={props.testId}
      footer={
        <>
          <button type="button" class="btn" onClick={props.onClose}>
            Cancel
          </button>
          <button
            type="button"
            class={`btn primary${props.danger ? " danger" : ""}`}
            data-testid="confirm-ok"
            onClick={() => {
              props.onConfirm();
              props.onClose();
            }}
          >
            {props.confirmLabel}
          </button>
        </>
      }
    >
      <div class="confirm-text">{props.message}</div>
    </Modal>
  );
}
