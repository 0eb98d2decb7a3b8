/**
 * Markdown for model output: `marked` renders, `highlight.js` colors code, DOMPurify sanitizes.
 * Model and document text must never run as HTML or script, so there are two walls:
 * raw HTML in the Markdown is escaped (shown as text) at render time, and the result is
 * sanitized with an allow-list (no script, style, iframe, svg, img, forms, on* attributes,
 * links only to http(s) and mailto).
 */
import { Marked, type Tokens } from "marked";
import DOMPurify from "dompurify";
import hljs from "highlight.js/lib/core";
import bash from "highlight.js/lib/languages/bash";
import c from "highlight.js/lib/languages/c";
import cpp from "highlight.js/lib/languages/cpp";
import css from "highlight.js/lib/languages/css";
import diff from "highlight.js/lib/languages/diff";
import go from "highlight.js/lib/languages/go";
import java from "highlight.js/lib/languages/java";
import javascript from "highlight.js/lib/languages/javascript";
import json from "highlight.js/lib/languages/json";
import markdownLang from "highlight.js/lib/languages/markdown";
import python from "highlight.js/lib/languages/python";
import rust from "highlight.js/lib/languages/rust";
import sql from "highlight.js/lib/languages/sql";
import typescript from "highlight.js/lib/languages/typescript";
import xml from "highlight.js/lib/languages/xml";
import yaml from "highlight.js/lib/languages/yaml";

const LANGUAGES = { bash, c, cpp, css, diff, go, java, javascript, json, markdown: markdownLang, python, rust, sql, typescript, xml, yaml };
for (const [name, lang] of Object.entries(LANGUAGES)) hljs.registerLanguage(name, lang);
const ALIASES: Record<string, string> = {
  sh: "bash", shell: "bash", zsh: "bash", console: "bash", js: "javascript", jsx: "javascript", mjs: "javascript",
  ts: "typescript", tsx: "typescript", py: "python", rs: "rust", html: "xml", svg: "xml", md: "markdown",
  yml: "yaml", "c++": "cpp", h: "c", hpp: "cpp", golang: "go", patch: "diff",
};

const ESCAPES: Record<string, string> = { "&": "&amp;", "<": "&lt;", ">": "&gt;", '"': "&quot;", "'": "&#39;" };

/** Escapes text for use in HTML content or a quoted attribute. */
export function escapeHtml(text: string): string {
  return text.replace(/[&<>"']/g, (ch) => ESCAPES[ch]!);
}

/** The highlight.js name for a fence's info string, or null when not bundled. */
export function resolveLanguage(info: string | undefined): string | null {
  const word = (info ?? "").trim().split(/\s+/)[0]?.toLowerCase() ?? "";
  if (!word) return null;
  const name = ALIASES[word] ?? word;
  return hljs.getLanguage(name) ? name : null;
}

/** A safe class suffix for a fence's info string (shown as the code block's label). */
function languageLabel(info: string | undefined): string {
  return ((info ?? "").trim().split(/\s+/)[0] ?? "").toLowerCase().replace(/[^a-z0-9+#_-]/g, "").slice(0, 24);
}

/** Highlights code (escaped HTML out); plain escaped text for unknown languages. */
export function highlightCode(code: string, info?: string): string {
  const language = resolveLanguage(info);
  if (!language) return escapeHtml(code);
  try {
    return hljs.highlight(code, { language, ignoreIllegals: true }).value;
  } catch {
    return escapeHtml(code);
  }
}

const marked = new Marked({
  gfm: true,
  breaks: false,
  async: false,
  renderer: {
    code({ text, lang }: Tokens.Code): string {
      const label = languageLabel(lang);
      const cls = label ? ` language-${label}` : "";
      return `<pre><code class="hljs${cls}">${highlightCode(text.replace(/\n$/, ""), lang)}</code></pre>\n`;
    },
    // Raw HTML written by the model is shown as text, never parsed.
    html({ text }: Tokens.HTML | Tokens.Tag): string {
      return escapeHtml(text);
    },
    // No images: they could load remote content or smuggle data: URLs. Show the alt text.
    image({ text }: Tokens.Image): string {
      return escapeHtml(text ? `[image: ${text}]` : "[image]");
    },
    checkbox({ checked }: Tokens.Checkbox): string {
      return checked ? "☑ " : "☐ ";
    },
  },
});

const ALLOWED_TAGS = [
  "a", "b", "blockquote", "br", "code", "del", "em", "h1", "h2", "h3", "h4", "h5", "h6", "hr", "i", "kbd",
  "li", "ol", "p", "pre", "s", "span", "strong", "sub", "sup", "table", "tbody", "td", "th", "thead", "tr", "ul",
];
const ALLOWED_ATTR = ["href", "title", "class", "align", "start"];
/** Only web and mail links survive; javascript:, data:, vbscript:, file: and the rest are dropped. */
export const SAFE_URL = /^(?:https?:|mailto:)/i;
const SAFE_CLASS = /^(?:hljs(?:-[a-z0-9_-]+)?|language-[a-z0-9+#_-]+|[a-z]+_)$/;

type Purifier = ReturnType<typeof DOMPurify>;
let purifier: Purifier | null = null;

function getPurifier(): Purifier {
  if (purifier) return purifier;
  const p = DOMPurify(window);
  p.addHook("uponSanitizeAttribute", (_node, data) => {
    if (data.attrName === "class") {
      const kept = data.attrValue.split(/\s+/).filter((c) => SAFE_CLASS.test(c));
      data.attrValue = kept.join(" ");
      if (!kept.length) data.keepAttr = false;
    }
  });
  p.addHook("afterSanitizeAttributes", (node) => {
    if (node.nodeName === "A") {
      const href = node.getAttribute("href");
      if (href && !SAFE_URL.test(href.trim())) node.removeAttribute("href");
      if (node.hasAttribute("href")) node.setAttribute("rel", "noopener noreferrer nofollow");
    }
  });
  purifier = p;
  return p;
}

/** Sanitizes HTML with the app's strict allow-list; the result is inert. */
export function sanitizeHtml(html: string): string {
  return getPurifier().sanitize(html, {
    ALLOWED_TAGS,
    ALLOWED_ATTR,
    ALLOWED_URI_REGEXP: SAFE_URL,
    // Attribute values are checked against the URI pattern unless listed as URI-safe.
    ADD_URI_SAFE_ATTR: ["align", "start"],
    ALLOW_DATA_ATTR: false,
    ALLOW_ARIA_ATTR: false,
    ALLOW_UNKNOWN_PROTOCOLS: false,
    ALLOW_SELF_CLOSE_IN_ATTR: false,
    SAFE_FOR_TEMPLATES: false,
    WHOLE_DOCUMENT: false,
    RETURN_DOM: false,
    RETURN_DOM_FRAGMENT: false,
    KEEP_CONTENT: true,
    FORBID_TAGS: ["script", "style", "iframe", "frame", "object", "embed", "svg", "math", "img", "form", "input", "link", "meta", "base", "template"],
    FORBID_ATTR: ["style", "src", "srcset", "action", "formaction", "xlink:href", "id", "name"],
  }) as string;
}

/** Renders Markdown to sanitized HTML. */
export function renderMarkdown(source: string): string {
  const html = marked.parse(source, { async: false }) as string;
  return sanitizeHtml(html);
}
