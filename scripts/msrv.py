#!/usr/bin/env python3
"""Checks each library crate's `rust-version` against what it needs.

A crate needs the highest of:
- its edition's first Rust (2024: 1.85);
- the highest `rust-version` declared by a package in its dependency tree
  with every feature on, normal and build dependencies (not dev), as
  locked in Cargo.lock (`cargo metadata --locked --all-features`);
- 1.88 where its code (src, tests, examples, benches) uses let chains.

Language features and standard-library calls newer than that are caught
by building with that Rust (scripts/msrv.sh) and by clippy's
`incompatible_msrv`, which reads each crate's `rust-version`. Exits 1
where a crate declares another version than the one it needs, saying
which dependency or file decides it.
"""
import json
import os
import re
import subprocess
import sys

EDITION_MIN = {"2015": (1, 0, 0), "2018": (1, 31, 0), "2021": (1, 56, 0), "2024": (1, 85, 0)}
LET_CHAINS = (1, 88, 0)
# A let chain: `&& let` inside a condition, or `if let ... &&` before the
# block opens.
LET_CHAIN_RE = re.compile(r"&&\s*let\s|\b(?:if|while)\s+let\s[^{;]*?\s&&\s")


def version(text):
    parts = [int(p) for p in text.split(".")]
    return tuple(parts + [0] * (3 - len(parts)))


def show(v):
    return ".".join(str(x) for x in (v if v[2] else v[:2]))


def let_chain_files(root):
    found = []
    for sub in ("src", "tests", "examples", "benches"):
        for dirpath, _, files in os.walk(os.path.join(root, sub)):
            for f in files:
                if f.endswith(".rs"):
                    path = os.path.join(dirpath, f)
                    text = re.sub(r"//[^\n]*", "", open(path, encoding="utf-8").read())
                    if LET_CHAIN_RE.search(text):
                        found.append(path)
    return sorted(found)


def main():
    meta = json.loads(subprocess.run(
        ["cargo", "metadata", "--format-version", "1", "--locked", "--all-features"],
        check=True, capture_output=True, text=True).stdout)
    packages = {p["id"]: p for p in meta["packages"]}
    nodes = {n["id"]: n for n in meta["resolve"]["nodes"]}
    bad = 0
    for wid in meta["workspace_members"]:
        pkg = packages[wid]
        if pkg.get("publish") == []:
            continue  # not a library that packages (bench)
        need, why = EDITION_MIN[pkg["edition"]], f"edition {pkg['edition']}"
        seen, stack = set(), [wid]
        while stack:
            i = stack.pop()
            if i in seen:
                continue
            seen.add(i)
            for d in nodes[i]["deps"]:
                if any(k["kind"] in (None, "build") for k in d["dep_kinds"]):
                    stack.append(d["pkg"])
        for i in seen - {wid}:
            rv = packages[i].get("rust_version")
            if rv and version(rv) > need:
                need, why = version(rv), f"{packages[i]['name']} {packages[i]['version']}"
        root = os.path.dirname(pkg["manifest_path"])
        chains = let_chain_files(root)
        if chains and LET_CHAINS > need:
            need, why = LET_CHAINS, f"let chains in {os.path.relpath(chains[0])}"
        declared = pkg.get("rust_version")
        ok = declared is not None and version(declared) == need
        bad += not ok
        print(f"{pkg['name']:14} declares {declared or 'nothing':6} needs {show(need):6} ({why})"
              + ("" if ok else "  <- wrong"))
    if bad:
        print(f"{bad} crate(s) declare a rust-version other than the one they need")
        sys.exit(1)


if __name__ == "__main__":
    main()
