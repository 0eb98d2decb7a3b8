/** @vitest-environment jsdom */
import { describe, expect, it } from "vitest";
import { renderMarkdown, sanitizeHtml } from "../../src/lib/markdown";

/** Parses sanitized HTML into a detached container for inspection. */
function dom(html: string): HTMLElement {
  const div = document.createElement("div");
  div.innerHTML = html;
  return div;
}

/** True when nothing in the tree could run script or load anything. */
function assertInert(html: string): void {
  const root = dom(html);
  expect(root.querySelectorAll("script, iframe, frame, object, embed, svg, math, img, style, link, meta, base, form, input, template").length).toBe(0);
  for (const el of Array.from(root.querySelectorAll("*"))) {
    for (const attr of Array.from(el.attributes)) {
      expect(attr.name.startsWith("on"), `${el.tagName} has ${attr.name}`).toBe(false);
      expect(["style", "src", "srcset", "srcdoc", "action", "formaction", "xlink:href"]).not.toContain(attr.name);
      if (attr.name === "href") expect(attr.value).toMatch(/^(https?:|mailto:)/i);
    }
  }
}

const PAYLOADS: Record<string, string> = {
  script: "<script>window.__xss = 1</script>",
  scriptUpper: "<SCRIPT SRC=//evil.example/x.js></SCRIPT>",
  imgOnerror: '<img src=x onerror="window.__xss=1">',
  onclick: '<div onclick="window.__xss=1">click</div>',
  onmouseover: '<a onmouseover="alert(1)" href="https://ok.example">hover</a>',
  jsLinkHtml: '<a href="javascript:window.__xss=1">x</a>',
  jsLinkEncoded: '<a href="jav&#x09;ascript:alert(1)">x</a>',
  jsLinkMarkdown: "[click me](javascript:window.__xss=1)",
  jsLinkMarkdownCase: "[click me](JaVaScRiPt:alert(1))",
  dataLinkMarkdown: "[payload](data:text/html;base64,PHNjcmlwdD5hbGVydCgxKTwvc2NyaXB0Pg==)",
  dataLinkHtml: '<a href="data:text/html,<script>alert(1)</script>">x</a>',
  vbscript: "[x](vbscript:msgbox(1))",
  svgOnload: '<svg onload="window.__xss=1"><circle r="5"/></svg>',
  svgScript: "<svg><script>window.__xss=1</script></svg>",
  svgAnimate: '<svg><a><animate attributeName="href" values="javascript:alert(1)"/><text y="20">x</text></a></svg>',
  iframeSrcdoc: '<iframe srcdoc="<script>parent.__xss=1</script>"></iframe>',
  iframeJs: '<iframe src="javascript:alert(1)"></iframe>',
  objectData: '<object data="javascript:alert(1)"></object>',
  embed: '<embed src="data:image/svg+xml,<svg onload=alert(1)>">',
  mathml: '<math><mtext><table><mglyph><style><img src=x onerror=alert(1)></style></mglyph></table></mtext></math>',
  style: "<style>body{background:url(javascript:alert(1))}</style>",
  styleAttr: '<p style="background:url(javascript:alert(1))">styled</p>',
  formAction: '<form action="javascript:alert(1)"><button>go</button></form>',
  metaRefresh: '<meta http-equiv="refresh" content="0;url=javascript:alert(1)">',
  markdownImage: "![alt text](https://evil.example/track.png)",
  markdownImageOnerror: '![x" onerror="alert(1)](x)',
  dataImage: "![pixel](data:image/png;base64,iVBORw0KGgo=)",
  templateInject: "<template><script>alert(1)</script></template>",
  nestedQuotes: '<a href="https://ok.example" title=""><img src=x onerror=alert(1)>">x</a>',
  htmlInCode: "```html\n<script>alert(1)</script>\n```",
  inlineHtmlInText: "Hello <b onmouseover=alert(1)>bold</b> world",
  brokenTag: "<img src=x onerror=alert(1)//",
  noscript: "<noscript><p title=\"</noscript><img src=x onerror=alert(1)>\"></noscript>",
};

describe("sanitizer: model output never runs", () => {
  for (const [name, payload] of Object.entries(PAYLOADS)) {
    it(`renders ${name} inert (Markdown path)`, () => {
      assertInert(renderMarkdown(payload));
    });
    it(`renders ${name} inert (raw HTML path)`, () => {
      assertInert(sanitizeHtml(payload));
    });
  }

  it("shows raw HTML from the model as text instead of dropping it", () => {
    const root = dom(renderMarkdown("Try <script>alert(1)</script> here"));
    expect(root.textContent).toContain("<script>alert(1)</script>");
    expect(root.querySelector("script")).toBeNull();
  });

  it("drops javascript: and data: hrefs but keeps the link text", () => {
    const root = dom(renderMarkdown("[click me](javascript:alert(1)) and [data](data:text/html,hi)"));
    const links = Array.from(root.querySelectorAll("a"));
    expect(links.map((a) => a.textContent)).toEqual(["click me", "data"]);
    for (const a of links) expect(a.hasAttribute("href")).toBe(false);
  });

  it("keeps http(s) and mailto links, with rel=noopener", () => {
    const root = dom(renderMarkdown("[site](https://example.com/a?b=1) <mailto:me@example.com>"));
    const links = Array.from(root.querySelectorAll("a"));
    expect(links[0]!.getAttribute("href")).toBe("https://example.com/a?b=1");
    expect(links[0]!.getAttribute("rel")).toContain("noopener");
    expect(links[1]!.getAttribute("href")).toBe("mailto:me@example.com");
  });

  it("replaces images with their alt text", () => {
    const root = dom(renderMarkdown("![a cat](https://example.com/cat.png)"));
    expect(root.querySelector("img")).toBeNull();
    expect(root.textContent).toContain("[image: a cat]");
  });

  it("keeps only highlight.js and language classes", () => {
    const html = sanitizeHtml('<span class="hljs-keyword evil-class">x</span><p class="attack">y</p>');
    const root = dom(html);
    expect(root.querySelector("span")!.getAttribute("class")).toBe("hljs-keyword");
    expect(root.querySelector("p")!.hasAttribute("class")).toBe(false);
  });

  it("drops ids and names (no DOM clobbering)", () => {
    const root = dom(sanitizeHtml('<p id="app">a</p><a name="__kiviMock">b</a>'));
    expect(root.querySelector("[id]")).toBeNull();
    expect(root.querySelector("[name]")).toBeNull();
  });
});
