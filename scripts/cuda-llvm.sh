#!/usr/bin/env bash
# Supplies the LLVM 23.1 bundle that cubecl-llvm's build script needs, from
# PyPI instead of the GitHub release it would download (these machines reach
# only the package registries). Prints the XDG_DATA_HOME to build the `cuda`
# configuration with:
#
#   XDG_DATA_HOME=$(bash scripts/cuda-llvm.sh) cargo build -p backend-cuda --features cuda
#
# Needed at build time only: the built binaries do not use it.
set -euo pipefail

version=23.1.1.post0
root=${SPARSE_LLVM_CACHE:-$HOME/.cache/sparse-comm/llvm-$version}
bundle=$root/mlc_llvm_static/static
xdg=$root/xdg
link=$xdg/tracel/tracel-llvm-23.1.0-4

if [ ! -x "$bundle/bin/llvm-config" ]; then
    tmp=$(mktemp -d)
    trap 'rm -rf "$tmp"' EXIT
    python3 -m pip download --quiet --no-deps --only-binary=:all: \
        --platform manylinux_2_28_x86_64 -d "$tmp" \
        "mlc-llvm-static==$version" "mlc-llvm-static-extra-targets==$version" >&2
    mkdir -p "$root"
    for wheel in "$tmp"/*.whl; do
        python3 -m zipfile -e "$wheel" "$root" >&2
    done
    chmod +x "$bundle"/bin/*
fi
mkdir -p "$(dirname "$link")"
ln -sfn "$bundle" "$link"
touch "$link/.tracel-llvm-installed"
echo "$xdg"
