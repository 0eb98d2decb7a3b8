/** @vitest-environment jsdom */
import { describe, expect, it } from "vitest";
import { escapeHtml, highlightCode, renderMarkdown, resolveLanguage } from "../../src/lib/markdown";

const dom = (html: string) => {
  const d = document.createElement("div");
  d.innerHTML = html;
  return d;
};

describe("renderMarkdown", () => {
  it("renders emphasis, headings, lists and quotes", () => {
    const root = dom(renderMarkdown("# Title\n\nSome **bold** and *italic* and ~~gone~~.\n\n- one\n- two\n\n1. first\n2. second\n\n> quoted"));
    expect(root.querySelector("h1")!.textContent).toBe("Title");
    expect(root.querySelector("strong")!.textContent).toBe("bold");
    expect(root.querySelector("em")!.textContent).toBe("italic");
    expect(root.querySelector("del")!.textContent).toBe("gone");
    expect(root.querySelectorAll("ul li").length).toBe(2);
    expect(root.querySelectorAll("ol li").length).toBe(2);
    expect(root.querySelector("blockquote")!.textContent).toContain("quoted");
  });

  it("highlights fenced code in a known language", () => {
    const root = dom(renderMarkdown("```python\ndef f(x):\n    return x + 1\n```"));
    const code = root.querySelector("pre code")!;
    expect(code.classList.contains("language-python")).toBe(true);
    expect(code.querySelector(".hljs-keyword")!.textContent).toBe("def");
    expect(code.textContent).toBe("def f(x):\n    return x + 1");
  });

  it("resolves aliases (ts, rs, sh) and leaves unknown languages as escaped text", () => {
    expect(resolveLanguage("ts")).toBe("typescript");
    expect(resolveLanguage("rs")).toBe("rust");
    expect(resolveLanguage("sh")).toBe("bash");
    expect(resolveLanguage("brainfuck")).toBeNull();
    const root = dom(renderMarkdown("```brainfuck\n<>+-.\n```"));
    expect(root.querySelector("code")!.textContent).toBe("<>+-.");
    expect(root.querySelector("code span")).toBeNull();
  });

  it("renders inline code and tables", () => {
    const root = dom(renderMarkdown("Use `cargo test`.\n\n| a | b |\n|---|--:|\n| 1 | 2 |"));
    expect(root.querySelector("p code")!.textContent).toBe("cargo test");
    expect(root.querySelectorAll("table td").length).toBe(2);
    expect(root.querySelector("td[align]")?.getAttribute("align")).toBe("right");
  });

  it("renders task list items as text checkboxes (no inputs)", () => {
    const root = dom(renderMarkdown("- [x] done\n- [ ] todo"));
    expect(root.querySelector("input")).toBeNull();
    expect(root.textContent).toContain("☑");
    expect(root.textContent).toContain("☐");
  });

  it("copes with partial Markdown while streaming", () => {
    const root = dom(renderMarkdown("Here:\n\n```rust\nfn main() {\n    println!(\"hi"));
    expect(root.querySelector("pre code")!.textContent).toContain("println!");
    expect(() => renderMarkdown("**unclosed bold and [link](http")).not.toThrow();
  });

  it("escapes HTML specials", () => {
    expect(escapeHtml(`<a href="x">'&'</a>`)).toBe("&lt;a href=&quot;x&quot;&gt;&#39;&amp;&#39;&lt;/a&gt;");
    expect(highlightCode("<b>", "nope")).toBe("&lt;b&gt;");
  });
});
