/** Small form controls shared by the settings and model views. */
import type { ComponentChildren } from "preact";

export function Segmented<T extends string | number>(props: {
  value: T;
  options: readonly { value: T; label: ComponentChildren; title?: string }[];
  onChange: (v: T) => void;
  testId: string;
  label: string;
  disabled?: boolean;
}) {
  return (
    <div class={`segmented${props.disabled ? " disabled" : ""}`} role="radiogroup" aria-label={props.label} data-testid={props.testId}>
      {props.options.map((o) => (
        <button
          key={String(o.value)}
          type="button"
          role="radio"
          aria-checked={o.value === props.value}
          class={o.value === props.value ? "on" : ""}
          title={o.title}
          disabled={props.disabled}
          data-testid={`${props.testId}-${o.value}`}
          onClick={() => props.onChange(o.value)}
        >
          {o.label}
        </button>
      ))}
    </div>
  );
}

export function Field(props: {
  label: ComponentChildren;
  hint?: ComponentChildren;
  error?: string | undefined;
  errorTestId?: string;
  children: ComponentChildren;
  wide?: boolean;
}) {
  return (
    <div class={`field${props.error ? " invalid" : ""}${props.wide ? " wide" : ""}`}>
      <div class="field-label">{props.label}</div>
      <div class="field-control">{props.children}</div>
      {props.error ? (
        <div class="field-error" role="alert" data-testid={props.errorTestId}>
          {props.error}
        </div>
      ) : (
        props.hint && <div class="field-hint">{props.hint}</div>
      )}
    </div>
  );
}

export function NumberInput(props: {
  value: string;
  onInput: (raw: string) => void;
  testId: string;
  label: string;
  step?: number | string;
  min?: number;
  max?: number;
  placeholder?: string;
  invalid?: boolean;
  width?: string;
}) {
  return (
    <input
      type="text"
      inputMode="decimal"
      class={`num${props.invalid ? " invalid" : ""}`}
      value={props.value}
      placeholder={props.placeholder}
      aria-label={props.label}
      aria-invalid={props.invalid ? "true" : "false"}
      data-testid={props.testId}
      style={props.width ? { width: props.width } : undefined}
      onInput={(e) => props.onInput(e.currentTarget.value)}
      onKeyDown={(e) => {
        // Arrow keys step the value like a spin box.
        if ((e.key === "ArrowUp" || e.key === "ArrowDown") && props.step != null) {
          const n = Number(props.value);
          if (!Number.isFinite(n)) return;
          e.preventDefault();
          const step = Number(props.step);
          let next = n + (e.key === "ArrowUp" ? step : -step);
          if (props.min != null) next = Math.max(props.min, next);
          if (props.max != null) next = Math.min(props.max, next);
          props.onInput(String(Number(next.toFixed(4))));
        }
      }}
    />
  );
}
