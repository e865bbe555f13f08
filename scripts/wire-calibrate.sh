#!/usr/bin/env bash
# The model of a shaped link between network namespaces, for the
# simulator: `sparse-bench calibrate` at P = 2 on the shaped link (the rate
# and latency, `--fit large`: messages of 1 MiB and more), and the
# shaper's bucket (scripts/netns-cluster.sh --shaping) as the file's
# `bucket_bytes` and `peak_bytes_per_s` (sparse_coll::sim::Bucket): a tbf
# bucket lets a message's first bytes through faster than the rate after
# a pause. The peak is fitted to the same ping-pong's messages that fit in
# the bucket (least squares of their time after the latency, through the
# origin): what the bucket gives TCP's messages here, about twice the rate,
# not the veth's own speed (1.1 GB/s unshaped for 16 MiB), which messages
# of kilobytes never reach.
#
# The bucket is added where MODEL_BUCKET=fit is in the environment (default: a
# plain alpha-beta link). It helps at 1 Gb/s and hurts at 100 Mb/s: a
# ping-pong's messages within the bucket move at twice the rate, an
# exchange's (both directions at once, what the collectives do) at the
# rate (bench/RESULTS.md, "A token bucket in the model").
#
# Usage: sudo bash scripts/wire-calibrate.sh OUTDIR BIN CLUSTER_ARGS...
#   (FIT in the environment: the shaped calibration's --fit [large];
#   MODEL_BUCKET: fit or none [none])
#   OUTDIR        gets calibrated.net (the model), calibrate.txt (the
#                 calibration's output) and shaping.txt
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
if [ "${MODEL_BUCKET:-none}" = fit ] && ! grep -q '^rate none' "$out/shaping.txt"; then
    burst=$(awk '$1 == "burst_bytes" {print $2}' "$out/shaping.txt")
    peak=$(awk -v burst="$burst" '
        $1 == "fit:" { done = 1 }
        !done && $1 ~ /^[0-9]+$/ && NF >= 4 {
            if ($1 == 0) alpha = $2
            else if ($1 <= burst) { b[++n] = $1; t[n] = $2 }
        }
        END {
            for (i = 1; i <= n; i++) { sbt += b[i] * (t[i] - alpha) * 1e-6; sbb += b[i] * b[i] }
            if (n > 0 && sbt > 0) printf "%.6e\n", sbb / sbt
        }' "$out/calibrate.txt")
    [ -n "$peak" ] && [ -n "$burst" ] || { echo "wire-calibrate: no message within the bucket to fit its peak" >&2; exit 1; }
    {
        echo "# tbf's bucket (netns-cluster.sh) and the bandwidth of the ping-pong's messages within it"
        echo "bucket_bytes = $burst"
        echo "peak_bytes_per_s = $peak"
    } >> "$out/calibrated.net"
fi
echo "wire-calibrate: $(grep -v '^#' "$out/calibrated.net" | tr '\n' ' ')"
