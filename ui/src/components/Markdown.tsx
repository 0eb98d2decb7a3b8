/** Sanitized Markdown. While streaming, re-renders at most once per animation frame. */
import { useEffect, useLayoutEffect, useRef } from "preact/hooks";
import { renderMarkdown, SAFE_URL } from "../lib/markdown";
import { copyText, openLink } from "../state/app";

/** Adds a header (language, Copy) to each code block; our own DOM, built without HTML strings. */
function decorateCodeBlocks(root: HTMLElement): void {
  for (const pre of Array.from(root.querySelectorAll("pre"))) {
    if (pre.parentElement?.classList.contains("code-block")) continue;
    const code = pre.querySelector("code");
    const lang = Array.from(code?.classList ?? []).find((c) => c.startsWith("language-"))?.slice(9) ?? "";
    const wrap = document.createElement("div");
    wrap.className = "code-block";
    const head = document.createElement("div");
    head.className = "code-head";
    const label = document.createElement("span");
    label.textContent = lang || "text";
    const btn = document.createElement("button");
    btn.type = "button";
    btn.className = "code-copy";
    btn.textContent = "Copy";
    btn.setAttribute("data-testid", "code-copy");
    head.append(label, btn);
    pre.replaceWith(wrap);
    wrap.append(head, pre);
  }
}

export function Markdown({ source, streaming = false, testId }: { source: string; streaming?: boolean; testId?: string }) {
  const ref = useRef<HTMLDivElement>(null);
  const latest = useRef(source);
  const rendered = useRef<string | null>(null);
  const frame = useRef(0);
  latest.current = source;

  const paint = () => {
    frame.current = 0;
    const el = ref.current;
    if (!el || rendered.current === latest.current) return;
    rendered.current = latest.current;
    el.innerHTML = renderMarkdown(latest.current);
    decorateCodeBlocks(el);
  };

  useLayoutEffect(() => {
    if (!streaming) {
      if (frame.current) cancelAnimationFrame(frame.current);
      paint();
    } else if (!frame.current) {
      if (rendered.current === null) paint();
      else frame.current = requestAnimationFrame(paint);
    }
  }, [source, streaming]);

  useEffect(() => () => {
    if (frame.current) cancelAnimationFrame(frame.current);
  }, []);

  const onClick = (e: MouseEvent) => {
    const target = e.target as HTMLElement;
    const copy = target.closest<HTMLButtonElement>(".code-copy");
    if (copy) {
      const code = copy.closest(".code-block")?.querySelector("code");
      if (code) void copyText(code.textContent ?? "", "Code copied");
      return;
    }
    const a = target.closest("a");
    if (a) {
      // The webview never navigates: safe links open in the system browser.
      e.preventDefault();
      const href = a.getAttribute("href");
      if (href && SAFE_URL.test(href)) void openLink(href);
    }
  };

  return <div ref={ref} class="markdown" data-testid={testId} onClick={onClick} />;
}
