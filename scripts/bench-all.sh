#!/usr/bin/env bash
# Runs every benchmark back to back, as docs/design/performance.md was measured,
# and writes each one's output to DIR/<name>.txt and an index of start/end times, exit
# codes and load averages to DIR/index.txt. Run it on an otherwise idle machine: the
# figures there are from one such run. Takes about 11 minutes on 2 cores.
#
#   scripts/bench-all.sh [DIR]   (default: a new directory under ${TMPDIR:-/tmp})
#
# Exit status: 0 when every benchmark exited 0, else 1 (the index names the failures).
set -uo pipefail
cd "$(dirname "$0")/.." || exit 2
out=${1:-$(mktemp -d "${TMPDIR:-/tmp}/pstrain-bench-XXXXXX")}
mkdir -p "$out"
export OPENBLAS_NUM_THREADS=1
failed=0
run() {
  local name=$1 t0 rc
  shift
  echo "== $name start $(date +%T) load $(cut -d' ' -f1-3 /proc/loadavg)" >> "$out/index.txt"
  t0=$(date +%s)
  "$@" > "$out/$name.txt" 2>&1
  rc=$?
  [ $rc = 0 ] || failed=1
  echo "== $name end $(date +%T) rc $rc $(($(date +%s) - t0)) s load $(cut -d' ' -f1-3 /proc/loadavg)" >> "$out/index.txt"
  echo "$name: exit $rc ($(($(date +%s) - t0)) s)"
}
# The update modes: the demo job with its "update" set.
jobs_dir=$(mktemp -d)
trap 'rm -rf "$jobs_dir"' EXIT
python3 - "$jobs_dir" <<'PY'
import json, sys
job = json.load(open("configs/job-fmnist-mlp.json"))
for name, update in [("bounded", {"mode": "bounded_staleness", "staleness": 4}), ("sync", {"mode": "sync"})]:
    json.dump(dict(job, update=update), open(f"{sys.argv[1]}/job-fmnist-mlp-{name}.json", "w"))
PY
echo "benchmarks into $out"
run pushpull scripts/bench-pushpull.sh
run train-demo scripts/bench-train.sh --rounds 3
run train-small env PSTRAIN_BENCH_JOB=configs/job-fmnist-mlp-small.json scripts/bench-train.sh --rounds 3
run mode-bounded env PSTRAIN_BENCH_JOB="$jobs_dir/job-fmnist-mlp-bounded.json" scripts/bench-train.sh
run mode-sync env PSTRAIN_BENCH_JOB="$jobs_dir/job-fmnist-mlp-sync.json" scripts/bench-train.sh
run sparse-ps env PSTRAIN_SPARSE_SECTIONS=ps scripts/bench-sparse.sh --variants dense,index-bound,hash-bound,lazy,sweep
run sparse-train env PSTRAIN_SPARSE_SECTIONS=train scripts/bench-sparse.sh
# fanout before chief: the chief's 64 workers leave the machine loaded for a while.
run scale-fanout scripts/bench-scale.sh fanout --ps-tasks 1,2,4,8,1,8 --steps 8000
run scale-ps scripts/bench-scale.sh ps
run scale-chief scripts/bench-scale.sh chief
run ckpt scripts/bench-ckpt.sh
run data scripts/bench-data.sh
run conv scripts/bench-conv.sh
run hybrid scripts/bench-hybrid.sh
run zoo scripts/bench-zoo.sh
run http scripts/bench-http.sh
echo "index: $out/index.txt"
exit $failed
