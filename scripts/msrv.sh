#!/usr/bin/env bash
# Checks each library crate (its tests and examples, every feature) with
# the Rust it declares as its minimum (rust-version), where that is older
# than the toolchain in use: scripts/msrv.py says which version each crate
# needs; this proves the code builds with it. The toolchain comes from
# rustup (the minimal profile, about 80 MB); where rustup cannot install
# it, this says so and fails unless MSRV_OPTIONAL=1.
set -euo pipefail
cd "$(dirname "$0")/.."
python3 scripts/msrv.py
current=$(rustc --version | awk '{print $2}')
declare -A by_version=()
while read -r name version; do
    by_version[$version]+=" -p $name"
done < <(cargo metadata --format-version 1 --offline --no-deps | python3 -c '
import json, sys
def v(text):
    parts = [int(p) for p in text.split("-")[0].split(".")]
    return tuple(parts + [0] * (3 - len(parts)))
current = v(sys.argv[1])
for p in json.load(sys.stdin)["packages"]:
    if p.get("publish") != [] and p.get("rust_version") and v(p["rust_version"]) < current:
        print(p["name"], p["rust_version"])' "$current")
for version in "${!by_version[@]}"; do
    if ! rustup run "$version" rustc --version >/dev/null 2>&1; then
        if ! rustup toolchain install "$version" --profile minimal >/dev/null 2>&1; then
            echo "rustup could not install Rust $version: the crates ${by_version[$version]} were not built with it"
            [ "${MSRV_OPTIONAL:-0}" = 1 ] && continue
            exit 1
        fi
    fi
    echo "Rust $version:${by_version[$version]} (every target, every feature)"
    # Its own target directory: artefacts of two compilers do not mix.
    # shellcheck disable=SC2086
    CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-target}/msrv-$version" \
        cargo "+$version" check --quiet --locked --all-targets --all-features ${by_version[$version]}
done
