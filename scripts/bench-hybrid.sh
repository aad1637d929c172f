#!/usr/bin/env bash
# Hybrid update modes: does training the embeddings asynchronously
# while the dense layers stay synchronous (PERSIA's hybrid) cost accuracy?
# configs/job-ctr-emb-hybrid.json (embedding + MLP, Adagrad, 8000 steps) on `pstrain
# gen-ctr` data (seed 1, 1M train / 100k eval examples, written into a temporary
# directory and deleted afterwards), 2 ps + 2 workers under `pstrain local`, trained
# twice with the same data, seed and steps: all sync ({"mode": "sync"}) and as the file
# says (dense sync, sparse async). Prints both final eval AUCs and their difference;
# the target is |hybrid - sync| <= 0.003 (exit 1 beyond it).
set -euo pipefail
source "$(dirname "$0")/bench-lib.sh"
bench_build test/bench/bench_data launcher/pstrain \
  daemons/ps/pstrain-ps daemons/worker/pstrain-worker daemons/chief/pstrain-chief
PSTRAIN="$BUILD/launcher/pstrain"
BENCH="$BUILD/test/bench/bench_data"
TMP=$(mktemp -d "${TMPDIR:-/tmp}/bench-hybrid-XXXXXX")
# shellcheck disable=SC2064  # expand $TMP now
trap "rm -rf '$TMP'" EXIT
echo "load average at start: $(cut -d' ' -f1-3 /proc/loadavg) ($(nproc) cores)"

"$PSTRAIN" gen-ctr --out "$TMP/ctr" --seed 1 >/dev/null
echo "ground truth: $(grep -o '"eval_auc": [0-9.]*' "$TMP/ctr/ctr.json")"
sed "s|\"base_dir\": \"[^\"]*\"|\"base_dir\": \"$TMP/ctr\"|" configs/job-ctr-emb-hybrid.json > "$TMP/job.json"

auc_of() { sed -n 's/.* auc \([0-9.]*\) .*/\1/p'; }
echo "-- all sync: {\"mode\": \"sync\"}"
sync_line=$("$BENCH" auc --job "$TMP/job.json" --pstrain "$PSTRAIN" --update '{"mode": "sync"}')
echo "$sync_line"
echo "-- hybrid: $(grep -o '"update": {.*}}' configs/job-ctr-emb-hybrid.json)"
hybrid_line=$("$BENCH" auc --job "$TMP/job.json" --pstrain "$PSTRAIN")
echo "$hybrid_line"
sync_auc=$(echo "$sync_line" | auc_of)
hybrid_auc=$(echo "$hybrid_line" | auc_of)
echo "load average at end: $(cut -d' ' -f1-3 /proc/loadavg)"
awk -v s="$sync_auc" -v h="$hybrid_auc" 'BEGIN {
  d = h - s; a = d < 0 ? -d : d
  printf "auc: sync %.5f  hybrid %.5f  difference %+.5f (target |difference| <= 0.003: %s)\n", s, h, d,
         a <= 0.003 ? "met" : "NOT met"
  exit a <= 0.003 ? 0 : 1 }'
