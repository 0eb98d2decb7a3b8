#!/usr/bin/env python3
"""Finds Rust source files that import each other in a circle.

Each `.rs` file of a crate is a module. A file depends on another when it names an item of
it: in a `use` declaration or in a path in the code (`crate::host::readable(..)`,
`super::view::Parts`). Names re-exported by a module (`pub use x::Y`) are followed to the
module that defines them, so `crate::KernelError` is an edge to `error.rs`, not to
`lib.rs`; a re-export itself is not an edge. Declaring a child module (`mod loops;`) is
not an edge. A file's own tests
(`#[cfg(test)] mod tests { .. }` and the file named by a `#[path]` test module) are not
counted: a test may use its parent freely.

    scripts/import_cycles.py CRATE_SRC_DIR...

Prints each circle it finds and exits 1 if there is one.
"""

import re
import sys
from pathlib import Path

USE = re.compile(r"^\s*(pub(\([^)]*\))?\s+)?use\s+([^;]+);", re.M)
PATH = re.compile(r"\b((?:crate|super|self)(?:::[A-Za-z_][A-Za-z0-9_]*)+)")
MOD_DECL = re.compile(r"^\s*(?:pub(?:\([^)]*\))?\s+)?mod\s+([a-z_][a-z0-9_]*)\s*;", re.M)
PATH_ATTR = re.compile(r'#\[path\s*=\s*"([^"]+)"\]\s*(?:pub(?:\([^)]*\))?\s+)?mod\s+(\w+)\s*;')


def strip_comments(text):
    text = re.sub(r"/\*.*?\*/", "", text, flags=re.S)
    text = re.sub(r"//[^\n]*", "", text)
    return re.sub(r'"(?:\\.|[^"\\])*"', '""', text)


def strip_tests(text):
    """Drops `#[cfg(test)] mod x { ... }` blocks and `#[cfg(test)] mod x;` lines."""
    out, i = [], 0
    pattern = re.compile(r"#\[cfg\(test\)\]\s*(?:#\[[^\]]*\]\s*)*mod\s+\w+\s*(\{|;)")
    while True:
        m = pattern.search(text, i)
        if not m:
            out.append(text[i:])
            return "".join(out)
        out.append(text[i : m.start()])
        if m.group(1) == ";":
            i = m.end()
            continue
        depth, j = 1, m.end()
        while j < len(text) and depth:
            depth += {"{": 1, "}": -1}.get(text[j], 0)
            j += 1
        i = j


def expand_use(tree):
    """`a::{b, c::{d, e as f}}` -> ['a::b', 'a::c::d', 'a::c::e']."""

    def split_top(s):
        parts, depth, cur = [], 0, ""
        for ch in s:
            if ch == "," and depth == 0:
                parts.append(cur)
                cur = ""
                continue
            depth += {"{": 1, "}": -1}.get(ch, 0)
            cur += ch
        return parts + [cur]

    def walk(prefix, s):
        s = s.strip()
        if not s:
            return []
        if s.endswith("}") and "{" in s:
            head, body = s.split("{", 1)
            head = head.strip().rstrip(":").strip()
            base = f"{prefix}::{head}" if prefix and head else (head or prefix)
            return [item for part in split_top(body[:-1]) for item in walk(base, part)]
        s = re.sub(r"\s+as\s+\w+$", "", s).replace(" ", "")
        return [f"{prefix}::{s}" if prefix else s]

    return walk("", " ".join(tree.split()))


class Crate:
    def __init__(self, src):
        self.src = Path(src)
        self.files = {}  # module path tuple -> Path
        self.test_files = set()
        for path in sorted(self.src.rglob("*.rs")):
            self.files[self.module_of(path)] = path
        self.children = {
            mod: set(MOD_DECL.findall(strip_comments(path.read_text())))
            for mod, path in self.files.items()
        }
        self.path_mods = {}  # (parent module, name) -> module path of a #[path] file
        for mod, path in list(self.files.items()):
            text = path.read_text()
            for m in PATH_ATTR.finditer(text):
                target = (path.parent / m.group(1)).resolve()
                for other_mod, other in self.files.items():
                    if other.resolve() == target:
                        self.path_mods[(mod, m.group(2))] = other_mod
                        prefix = text[max(0, m.start() - 40) : m.start()]
                        if "cfg(test)" in prefix:
                            self.test_files.add(other_mod)
        self.reexports = {}  # (module, name) -> full path it stands for
        for mod, path in self.files.items():
            text = strip_comments(path.read_text())
            for m in USE.finditer(text):
                if not m.group(1):
                    continue
                for item in expand_use(m.group(3)):
                    name = item.rsplit("::", 1)[-1]
                    if name in ("self", "*"):
                        continue
                    self.reexports[(mod, name)] = self.absolute(mod, item)

    def module_of(self, path):
        rel = path.relative_to(self.src).with_suffix("")
        parts = list(rel.parts)
        if parts[-1] in ("lib", "main", "mod"):
            parts = parts[:-1]
        return tuple(parts)

    def child(self, mod, name):
        if (mod, name) in self.path_mods:
            return self.path_mods[(mod, name)]
        return mod + (name,)

    def absolute(self, mod, item):
        parts = item.split("::")
        if parts[0] == "crate":
            base, parts = (), parts[1:]
        elif parts[0] in ("super", "self"):
            base = mod
            while parts and parts[0] in ("super", "self"):
                if parts[0] == "super":
                    base = self.parent(base)
                parts = parts[1:]
        elif parts[0] in self.children.get(mod, ()):
            base = mod  # a child module named without `self::`
        else:
            return None  # an external crate or a local name
        return (base, tuple(parts))

    def parent(self, mod):
        for (parent, name), target in self.path_mods.items():
            if target == mod:
                return parent
        return mod[:-1]

    def resolve(self, base, parts, depth=0):
        """The file module that defines `base::parts`."""
        mod = base
        for i, part in enumerate(parts):
            nxt = self.child(mod, part)
            if nxt in self.files:
                mod = nxt
                continue
            key = (mod, part)
            if key in self.reexports and self.reexports[key] and depth < 20:
                target = self.reexports[key]
                return self.resolve(target[0], target[1] + parts[i + 1 :], depth + 1)
            return mod
        return mod

    def edges(self):
        graph = {}
        for mod, path in self.files.items():
            if mod in self.test_files:
                continue
            text = strip_tests(strip_comments(path.read_text()))
            targets = set()
            for m in USE.finditer(text):
                if m.group(1):
                    continue  # a re-export is followed through, not an edge of its own
                for item in expand_use(m.group(3)):
                    ab = self.absolute(mod, item)
                    if ab:
                        targets.add(self.resolve(*ab))
            text = USE.sub("", text)
            child_paths = re.compile(
                r"(?<![\w:])((?:%s)(?:::[A-Za-z_][A-Za-z0-9_]*)+)"
                % "|".join(sorted(self.children.get(mod, ())) or ["$^"])
            )
            for m in list(PATH.finditer(text)) + list(child_paths.finditer(text)):
                ab = self.absolute(mod, m.group(1))
                if ab:
                    targets.add(self.resolve(*ab))
            targets.discard(mod)
            graph[mod] = {t for t in targets if t in self.files and t not in self.test_files}
        return graph


def cycles(graph):
    index, low, stack, on, out, counter = {}, {}, [], set(), [], [0]

    def strong(v):
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in graph.get(v, ()):
            if w not in index:
                strong(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(sorted(comp))

    sys.setrecursionlimit(10000)
    for v in graph:
        if v not in index:
            strong(v)
    return out


def main(dirs):
    found = False
    for src in dirs:
        crate = Crate(src)
        for comp in cycles(crate.edges()):
            found = True
            names = [str(crate.files[m].relative_to(Path(src).parent)) for m in comp]
            print(f"import circle: {' <-> '.join(names)}")
    return 1 if found else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:] or ["kernels/src", "engine/src", "cli/src", "src-tauri/src"]))
