#!/usr/bin/env python3
"""The structure rules of the workspace (issue 41), checked on the source:

- no library file over MAX_FILE lines (library code: each crate's src/,
  without src/bin/);
- no library function over MAX_FN lines (a function's lines from its `fn`
  to its closing brace; functions inside `#[cfg(test)]` modules are tests,
  not library code);
- no cycle between the top-level modules of a crate: module `a` uses `b`
  when a file under `a` names `crate::b::...` (or, through the crate
  root's re-exports, an item `b` defines), and the graph of those edges
  must be acyclic.

Prints every violation and exits 1 if there is one; `--list` prints the
longest files and functions too. Run by scripts/test.sh.
"""
import os
import re
import sys

MAX_FILE = 1100
MAX_FN = 110
CRATES = ["sparse-core", "sparse-select", "sparse-coll", "backend-cpu", "backend-cuda",
          "residual-sgd", "bench", "python"]


def test_module_files(src):
    """Files declared as `#[cfg(test)] mod x;`: tests, not library code."""
    out = set()
    for root, _, files in os.walk(src):
        for f in files:
            if not f.endswith(".rs"):
                continue
            path = os.path.join(root, f)
            here = root if f in ("mod.rs", "lib.rs", "main.rs") else os.path.join(root, f[:-3])
            for m in re.finditer(r"#\[cfg\(test\)\]\s*(?:pub(?:\([^)]*\))?\s+)?mod\s+(\w+)\s*;", open(path).read()):
                for cand in (os.path.join(here, m.group(1) + ".rs"), os.path.join(here, m.group(1), "mod.rs")):
                    out.add(os.path.normpath(cand))
    return out


def library_files(crate):
    src = os.path.join(crate, "src")
    tests = test_module_files(src)
    for root, dirs, files in os.walk(src):
        if os.path.relpath(root, src).split(os.sep)[0] == "bin":
            continue
        for f in sorted(files):
            path = os.path.normpath(os.path.join(root, f))
            if f.endswith(".rs") and path not in tests:
                yield path


def strip(text):
    """The text with comments, strings and char literals blanked (lines
    kept), so that braces and paths inside them do not count."""
    out = []
    i, n = 0, len(text)
    while i < n:
        c = text[i]
        if text.startswith("//", i):
            j = text.find("\n", i)
            j = n if j < 0 else j
            out.append(" " * (j - i))
            i = j
        elif text.startswith("/*", i):
            depth, j = 1, i + 2
            while j < n and depth:
                if text.startswith("/*", j):
                    depth, j = depth + 1, j + 2
                elif text.startswith("*/", j):
                    depth, j = depth - 1, j + 2
                else:
                    j += 1
            out.append(re.sub(r"[^\n]", " ", text[i:j]))
            i = j
        elif c == "r" and re.match(r'r#*"', text[i:i + 10]) and (i == 0 or not (text[i - 1].isalnum() or text[i - 1] == "_")):
            hashes = re.match(r'r(#*)"', text[i:]).group(1)
            end = text.find('"' + hashes, i + 2 + len(hashes))
            end = n if end < 0 else end + 1 + len(hashes)
            out.append(re.sub(r"[^\n]", " ", text[i:end]))
            i = end
        elif c == '"':
            j = i + 1
            while j < n and text[j] != '"':
                j += 2 if text[j] == "\\" else 1
            out.append(re.sub(r"[^\n]", " ", text[i:j + 1]))
            i = j + 1
        elif c == "'" and re.match(r"'(\\.|[^\\'])'|'\\u\{[0-9a-fA-F]+\}'|'\\x[0-9a-fA-F]{2}'", text[i:i + 12]):
            m = re.match(r"'(\\.|[^\\'])'|'\\u\{[0-9a-fA-F]+\}'|'\\x[0-9a-fA-F]{2}'", text[i:i + 12])
            out.append(" " * len(m.group(0)))
            i += len(m.group(0))
        else:
            out.append(c)
            i += 1
    return "".join(out)


def block_end(code, open_at):
    """Index of the brace closing the one at `open_at`."""
    depth = 0
    for j in range(open_at, len(code)):
        if code[j] == "{":
            depth += 1
        elif code[j] == "}":
            depth -= 1
            if depth == 0:
                return j
    return len(code) - 1


def test_spans(code):
    """Character spans of `#[cfg(test)]` items (test modules)."""
    spans = []
    for m in re.finditer(r"#\[cfg\(test\)\]\s*(pub(\([^)]*\))?\s+)?mod\s+\w+\s*\{", code):
        open_at = m.end() - 1
        spans.append((m.start(), block_end(code, open_at)))
    return spans


def functions(code):
    """(name, first line, line count) of every function with a body."""
    out = []
    for m in re.finditer(r"\bfn\s+(\w+)", code):
        # The body's brace: the first `{` after the signature at depth 0 of
        # parentheses and angle-free scanning; a `;` first means no body.
        j, paren = m.end(), 0
        while j < len(code):
            c = code[j]
            if c == "(":
                paren += 1
            elif c == ")":
                paren -= 1
            elif c == ";" and paren == 0:
                j = -1
                break
            elif c == "{" and paren == 0:
                break
            j += 1
        if j < 0 or j >= len(code):
            continue
        end = block_end(code, j)
        first = code.count("\n", 0, m.start()) + 1
        last = code.count("\n", 0, end) + 1
        out.append((m.group(1), first, last - first + 1, m.start()))
    return out


def root_reexports(crate):
    """Names the crate root re-exports, mapped to their top-level module."""
    lib = os.path.join(crate, "src", "lib.rs")
    code = strip(open(lib).read())
    names = {}
    for m in re.finditer(r"pub\s+use\s+(\w+)::([^;]+);", code):
        module, rest = m.group(1), m.group(2)
        for name in re.findall(r"\b(\w+)\b(?!\s*::)", rest.replace("{", " ").replace("}", " ")):
            names.setdefault(name, module)
    return names


def top_module(crate, path):
    rel = os.path.relpath(path, os.path.join(crate, "src"))
    parts = rel[:-3].split(os.sep)
    if parts == ["lib"] or parts == ["main"]:
        return None
    return parts[0] if parts[-1] != "mod" or len(parts) > 1 else parts[0]


def module_edges(crate):
    files = list(library_files(crate))
    tops = {top_module(crate, f) for f in files} - {None}
    reexports = root_reexports(crate)
    edges = {}
    for f in files:
        a = top_module(crate, f)
        if a is None:
            continue
        code = strip(open(f).read())
        for s, e in reversed(test_spans(code)):
            code = code[:s] + code[e + 1:]
        used = set()

        def note(prefix):
            # prefix::b::..., and `use prefix::{b::x, y}` groups.
            for m in re.finditer(r"\b" + prefix + r"::(\{[^}]*\}|\w+)", code):
                group = m.group(1)
                heads = re.findall(r"(?:^|[{,])\s*(\w+)", group) if group.startswith("{") else [group]
                for h in heads:
                    if h in tops:
                        used.add(h)
                    elif h in reexports:
                        used.add(reexports[h])

        note("crate")
        # super:: from a top-level module file is the crate root.
        depth = len(os.path.relpath(f, os.path.join(crate, "src")).split(os.sep))
        if depth == 1 or (depth == 2 and f.endswith("mod.rs")):
            note("super")
        used.discard(a)
        edges.setdefault(a, set()).update(used)
    return edges


def cycles(edges):
    """One cycle per strongly connected component of more than one node."""
    index, low, on, stack, out, counter = {}, {}, set(), [], [], [0]

    def visit(v):
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in sorted(edges.get(v, ())):
            if w not in index:
                visit(w)
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

    for v in sorted(edges):
        if v not in index:
            visit(v)
    return out


def main():
    os.chdir(os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
    listing = "--list" in sys.argv
    bad = []
    sizes, fns = [], []
    for crate in CRATES:
        for f in library_files(crate):
            text = open(f).read()
            lines = text.count("\n") + (0 if text.endswith("\n") else 1)
            sizes.append((lines, f))
            if lines > MAX_FILE:
                bad.append(f"{f}: {lines} lines (at most {MAX_FILE})")
            code = strip(text)
            tests = test_spans(code)
            for name, first, count, at in functions(code):
                if any(s <= at <= e for s, e in tests):
                    continue
                fns.append((count, f"{f}:{first} fn {name}"))
                if count > MAX_FN:
                    bad.append(f"{f}:{first}: fn {name} is {count} lines (at most {MAX_FN})")
        for comp in cycles(module_edges(crate)):
            bad.append(f"{crate}: import cycle between the modules {', '.join(comp)}")
    if listing:
        for n, f in sorted(sizes, reverse=True)[:15]:
            print(f"{n:6} {f}")
        for n, f in sorted(fns, reverse=True)[:15]:
            print(f"{n:6} {f}")
    for b in bad:
        print(b)
    if bad:
        sys.exit(1)
    print(f"structure: {len(sizes)} library files (at most {MAX_FILE} lines), "
          f"{len(fns)} functions (at most {MAX_FN} lines), no import cycle between modules")


if __name__ == "__main__":
    main()
