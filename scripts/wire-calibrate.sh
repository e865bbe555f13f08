#!/usr/bin/env bash
# The model of a shaped link between network namespaces, for the
# simulator: `sparse-bench calibrate` at P = 2 on the shaped link (the rate
# and latency, `--fit large`: messages of 1 MiB and more), then on an
# unshaped pair (the veth's own speed, the peak under the shaper), and the
# shaper's bucket (scripts/netns-cluster.sh --shaping) as the file's
# `bucket_bytes` and `peak_bytes_per_s`: a tbf bucket lets a message's
# first bytes through at the peak after a pause (sparse_coll::sim::Bucket).
#
# Usage: sudo bash scripts/wire-calibrate.sh OUTDIR BIN CLUSTER_ARGS...
#   (FIT in the environment: the shaped calibration's --fit [large])
#   OUTDIR        gets calibrated.net (the model), calibrate.txt (the shaped
#                 calibration's output), peak.net and peak.txt (unshaped),
#                 shaping.txt
#   BIN           a sparse-bench built with --features mpi
#   CLUSTER_ARGS  scripts/netns-cluster.sh's options (--rate, --nice, ...)
set -euo pipefail
cd "$(dirname "$0")/.."
out=${1:?usage: wire-calibrate.sh OUTDIR BIN CLUSTER_ARGS...}
bin=${2:?usage: wire-calibrate.sh OUTDIR BIN CLUSTER_ARGS...}
shift 2
cluster=(bash scripts/netns-cluster.sh -q "$@")
"${cluster[@]}" --ranks 2 --shaping "$out/shaping.txt" -- \
    "$bin" calibrate --max-mib 16 --fit "${FIT:-large}" --out "$out/calibrated.net" | tee "$out/calibrate.txt"
grep -q "world size 2" "$out/calibrate.txt" || { echo "wire-calibrate: calibrate did not run on 2 ranks" >&2; exit 1; }
if ! grep -q '^rate none' "$out/shaping.txt"; then
    # The same pair unshaped (the last --rate wins): the wire under the shaper.
    "${cluster[@]}" --rate none --ranks 2 -- \
        "$bin" calibrate --max-mib 16 --fit large --out "$out/peak.net" > "$out/peak.txt"
    grep -q "world size 2" "$out/peak.txt" || { echo "wire-calibrate: the unshaped calibrate did not run on 2 ranks" >&2; exit 1; }
    peak=$(awk -F' *= *' '$1 == "bytes_per_s" {print $2}' "$out/peak.net")
    burst=$(awk '$1 == "burst_bytes" {print $2}' "$out/shaping.txt")
    [ -n "$peak" ] && [ -n "$burst" ] || { echo "wire-calibrate: no peak or bucket to add" >&2; exit 1; }
    {
        echo "# tbf's bucket (netns-cluster.sh) and the unshaped veth's bandwidth (peak.txt)"
        echo "bucket_bytes = $burst"
        echo "peak_bytes_per_s = $peak"
    } >> "$out/calibrated.net"
fi
echo "wire-calibrate: $(grep -v '^#' "$out/calibrated.net" | tr '\n' ' ')"
