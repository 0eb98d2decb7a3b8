/** A JSON answer as a collapsible tree, with a button that copies it indented. Keys and
 * strings are text nodes (Preact escapes them): nothing from the model becomes HTML. */
import type { Json } from "../lib/jsonAnswer";
import { summary } from "../lib/jsonAnswer";
import { copyText } from "../state/app";
import { IconCopy } from "./icons";

function Leaf({ value }: { value: Json }) {
  if (value === null) return <span class="json-null">null</span>;
  if (typeof value === "string") return <span class="json-string">{JSON.stringify(value)}</span>;
  if (typeof value === "number") return <span class="json-number">{String(value)}</span>;
  return <span class="json-bool">{String(value)}</span>;
}

function Node({ name, value, depth }: { name: string | null; value: Json; depth: number }) {
  const label = name === null ? null : <span class="json-key">{name}</span>;
  if (value === null || typeof value !== "object") {
    return (
      <div class="json-row" data-testid="json-leaf">
        {label}
        {label && <span class="json-colon">: </span>}
        <Leaf value={value} />
      </div>
    );
  }
  const entries: [string, Json][] = Array.isArray(value) ? value.map((v, i) => [String(i), v]) : Object.entries(value);
  return (
    <details class="json-node" open={depth < 3} data-testid="json-node">
      <summary>
        {label}
        {label && <span class="json-colon">: </span>}
        <span class="json-summary">{summary(value)}</span>
      </summary>
      <div class="json-children">
        {entries.map(([k, v]) => (
          <Node key={k} name={k} value={v} depth={depth + 1} />
        ))}
      </div>
    </details>
  );
}

export function JsonTree({ value }: { value: Json[] | { [key: string]: Json } }) {
  return (
    <div class="json-answer" data-testid="json-answer">
      <div class="json-bar">
        <span class="json-tag">JSON</span>
        <button
          type="button"
          class="icon-btn small"
          title="Copy JSON"
          aria-label="Copy JSON"
          data-testid="json-copy"
          onClick={() => void copyText(JSON.stringify(value, null, 2), "JSON copied")}
        >
          <IconCopy size={15} />
        </button>
      </div>
      <Node name={null} value={value} depth={0} />
    </div>
  );
}
