#!/usr/bin/env bash
# The model of a shaped link between network namespaces, for the
# simulator: `sparse-bench calibrate` at P = 2 on the shaped link (the rate
# and latency, `--fit large`: messages of 1 MiB and more), and, where asked,
# the shaper's bucket (scripts/netns-cluster.sh --shaping) as the file's
# `bucket_bytes` and `peak_bytes_per_s` (sparse_coll::sim::Bucket): a tbf
# bucket lets a message through faster than the rate while it holds tokens.
#
# MODEL_BUCKET (default none: a plain alpha-beta link):
#   veth  the bucket with the veth's own speed as its peak: a second
#         calibration on the same namespaces unshaped (--rate none), its
#         bandwidth (`--fit large`). What a tbf does: while tokens last,
#         packets leave at the wire's speed. Right where each timed call
#         starts from a full bucket (`sparse-bench allreduce --gap-ms`,
#         scripts/wire-bench.sh's GAP_MS): in a loop of calls without a
#         pause the bucket holds what the previous calls and their floors
#         left, which the replay of one call does not know
#         (docs/notes/2026-11-27-tbf-bucket.md).
#   fit   the peak fitted to the shaped ping-pong's messages that fit in
#         the bucket (least squares of their time after the latency, through
#         the origin): about twice the rate, what a ping-pong loop's steady
#         state gets (each bucket refills while the peer answers), kept to
#         reproduce the older tables.
#
# Usage: sudo bash scripts/wire-calibrate.sh OUTDIR BIN CLUSTER_ARGS...
#   (FIT in the environment: the shaped calibration's --fit [large];
#   MODEL_BUCKET: veth, fit or none [none])
#   OUTDIR        gets calibrated.net (the model), calibrate.txt (the
#                 calibration's output), shaping.txt, and with
#                 MODEL_BUCKET=veth peak.txt (the unshaped calibration)
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
model_bucket=${MODEL_BUCKET:-none}
case $model_bucket in none|fit|veth) ;; *) echo "wire-calibrate: MODEL_BUCKET=$model_bucket: give none, fit or veth" >&2; exit 2 ;; esac
if [ "$model_bucket" != none ] && ! grep -q '^rate none' "$out/shaping.txt"; then
    burst=$(awk '$1 == "burst_bytes" {print $2}' "$out/shaping.txt")
    [ -n "$burst" ] || { echo "wire-calibrate: no burst in $out/shaping.txt" >&2; exit 1; }
    if [ "$model_bucket" = veth ]; then
        # The same namespaces and options, unshaped (the last --rate wins).
        "${cluster[@]}" --ranks 2 --rate none -- \
            "$bin" calibrate --max-mib 16 --fit large --out "$out/peak.net" | tee "$out/peak.txt"
        grep -q "world size 2" "$out/peak.txt" || { echo "wire-calibrate: the unshaped calibrate did not run on 2 ranks" >&2; exit 1; }
        peak=$(awk '$1 == "bytes_per_s" {print $3}' "$out/peak.net")
        [ -n "$peak" ] || { echo "wire-calibrate: no bandwidth in $out/peak.net" >&2; exit 1; }
        why="the veth's own speed (unshaped calibrate, $out/peak.txt)"
    else
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
        [ -n "$peak" ] || { echo "wire-calibrate: no message within the bucket to fit its peak" >&2; exit 1; }
        why="the bandwidth of the ping-pong's messages within it"
    fi
    {
        echo "# tbf's bucket (netns-cluster.sh) and $why"
        echo "bucket_bytes = $burst"
        echo "peak_bytes_per_s = $peak"
    } >> "$out/calibrated.net"
fi
echo "wire-calibrate: $(grep -v '^#' "$out/calibrated.net" | tr '\n' ' ')"
