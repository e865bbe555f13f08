#!/usr/bin/env python3
"""The rules of the workspace's pages, checked on the tree:

- bench/RESULTS.md is a page of current tables: at most 600 lines, no
  heading named after an issue or an issue's item;
- each dated note under docs/notes/ (YYYY-MM-DD-topic.md) is at most 100
  lines, and docs/notes/README.md lists every note;
- docs/status.md has one row per feature, each line at most 300 characters;
- at most 50 tracked files under bench/wire and bench/gpu (summaries that
  tables are built from, not raw output);
- every library crate has a README.md that its lib.rs includes as its
  documentation (`#![doc = include_str!("../README.md")]`);
- every relative link of the repository's markdown pages resolves to a
  file or folder of the tree.

Prints every violation and exits 1 if there is one. Run by scripts/test.sh.
"""
import os
import re
import subprocess
import sys

LIBRARY_CRATES = ["sparse-core", "sparse-select", "sparse-coll", "backend-cpu", "backend-cuda",
                  "residual-sgd"]
NOTE_NAME = re.compile(r"^\d{4}-\d{2}-\d{2}-[a-z0-9-]+\.md$")
ISSUE_HEADING = re.compile(r"^#+ .*\b(issues?\s*#?\d+|items?\s+\d+)", re.IGNORECASE)
LINK = re.compile(r"\]\(([^)\s]+)\)")


def tracked(paths):
    try:
        out = subprocess.run(["git", "ls-files", "--", *paths], check=True,
                             capture_output=True, text=True).stdout
        return [line for line in out.splitlines() if line]
    except (OSError, subprocess.CalledProcessError):
        files = []
        for p in paths:
            for root, _, names in os.walk(p):
                files += [os.path.join(root, n) for n in names]
        return files


def lines(path):
    return open(path, encoding="utf-8").read().splitlines()


def main():
    bad = []
    results = lines("bench/RESULTS.md")
    if len(results) > 600:
        bad.append(f"bench/RESULTS.md: {len(results)} lines (at most 600)")
    for n, line in enumerate(results, 1):
        if ISSUE_HEADING.search(line):
            bad.append(f"bench/RESULTS.md:{n}: a heading named after an issue: {line.strip()}")
    notes = sorted(f for f in os.listdir("docs/notes") if f != "README.md")
    index = open("docs/notes/README.md", encoding="utf-8").read()
    for f in notes:
        path = os.path.join("docs/notes", f)
        if not NOTE_NAME.match(f):
            bad.append(f"{path}: not named YYYY-MM-DD-topic.md")
        if len(lines(path)) > 100:
            bad.append(f"{path}: {len(lines(path))} lines (at most 100)")
        if f not in index:
            bad.append(f"docs/notes/README.md does not list {f}")
    for n, line in enumerate(lines("docs/status.md"), 1):
        if len(line) > 300:
            bad.append(f"docs/status.md:{n}: a line of {len(line)} characters (at most 300)")
    raw = tracked(["bench/wire", "bench/gpu"])
    if len(raw) > 50:
        bad.append(f"{len(raw)} tracked files under bench/wire and bench/gpu (at most 50)")
    for crate in LIBRARY_CRATES:
        if not os.path.isfile(f"{crate}/README.md"):
            bad.append(f"{crate}: no README.md")
        if '#![doc = include_str!("../README.md")]' not in open(f"{crate}/src/lib.rs").read():
            bad.append(f"{crate}/src/lib.rs does not include its README as its documentation")
    pages = [p for p in tracked(["."]) if p.endswith(".md") and os.path.isfile(p)]
    for page in pages:
        text = re.sub(r"```.*?```", "", open(page, encoding="utf-8").read(), flags=re.DOTALL)
        for m in LINK.finditer(text):
            target = m.group(1).split("#")[0]
            if not target or re.match(r"^[a-z]+:", target):
                continue
            if not os.path.exists(os.path.normpath(os.path.join(os.path.dirname(page), target))):
                bad.append(f"{page}: a link to {m.group(1)}, which is not in the tree")
    for b in bad:
        print(b)
    if bad:
        sys.exit(1)
    print(f"pages: RESULTS {len(results)} lines, {len(notes)} notes, status rows <= 300 characters, "
          f"{len(raw)} files under bench/wire and bench/gpu, {len(LIBRARY_CRATES)} crate READMEs, "
          f"the links of {len(pages)} pages resolve")


if __name__ == "__main__":
    main()
