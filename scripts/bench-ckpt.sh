#!/usr/bin/env bash
# Checkpoint save/restore throughput against plain write+fsync / read of the same bytes
# on the same disk (test/bench/ckpt_bench.cc). Builds what is needed, runs in a fresh
# directory under $PSTRAIN_BENCH_DIR (default /tmp; put it on the disk the checkpoints
# will live on), removes it afterwards and prints the table.
#
#   scripts/bench-ckpt.sh [--gib 1.0] [--repeat 3] [--optimizer sgd|adam|...] [--shards 16] [--ps 2]
#                         [--delta-fraction 0.01]   (a delta checkpoint after that share of rows changed; 0: none)
#
# Run as root to drop the page cache before reads; otherwise reads come from memory and
# the output says so.
set -euo pipefail
source "$(dirname "$0")/bench-lib.sh"

bench_build test/bench/bench_ckpt

BASE=${PSTRAIN_BENCH_DIR:-/tmp}
mkdir -p "$BASE"
WORK=$(mktemp -d "$BASE/bench-ckpt.XXXXXX")
trap 'rm -rf "$WORK"' EXIT

echo "bench-ckpt: $(df -h --output=source,fstype,size,avail "$WORK" | tail -1 | tr -s ' ')" \
     "$(nproc) cores, $(git rev-parse --short HEAD 2>/dev/null || echo '?')"
"$BUILD/test/bench/bench_ckpt" --dir "$WORK" "$@"
