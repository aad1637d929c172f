#!/usr/bin/env bash
# Training throughput of the Fashion-MNIST MLP (784-256-128-10, batch 128): (a) one
# process with an in-process store and no network, (b) 1 ps + 1 worker and (c) 1 ps + 2
# workers as real daemons under `pstrain local` (see test/bench/train_bench.cc), with each
# process's CPU ms per step (what 2 cores allow). PSTRAIN_BENCH_JOB picks another job, e.g.
# configs/job-fmnist-mlp-small.json (784-128-10, SGD, batch 64); a job whose train_data is
# streamed ("files") runs the clusters only, as (a) has no in-process reader for it.
# Extra arguments go to bench_train (--steps, --local-steps, --workers 1,2,
# --steps-per-dispatch N, --dispatches-per-worker N, --keep, --rounds N (the sequence N
# times and the median of each ratio: single runs on 2 cores vary by up to 1.8x), ...).
#
#   scripts/bench-train.sh --compare BASE_BUILD_DIR [PAIRS] [bench args...]
# compares with another build (e.g. of an earlier commit): runs BASE_BUILD_DIR's bench_train
# with its own pstrain and this one alternately, PAIRS times each (5), and prints per setup
# the median (and range) over pairs of this/base ex/s and of base/this CPU ms per step
# (above 1: this build needs less CPU per step).
set -euo pipefail
source "$(dirname "$0")/bench-lib.sh"
JOB=${PSTRAIN_BENCH_JOB:-configs/job-fmnist-mlp.json}
bench_build test/bench/bench_train launcher/pstrain \
  daemons/ps/pstrain-ps daemons/worker/pstrain-worker daemons/chief/pstrain-chief
if [ "${1:-}" = "--compare" ]; then
  base_build="${2:?--compare BASE_BUILD_DIR}"
  shift 2
  pairs=5
  if [[ "${1:-}" =~ ^[0-9]+$ ]]; then pairs=$1; shift; fi
  for f in test/bench/bench_train launcher/pstrain; do
    [ -x "$base_build/$f" ] || { echo "$0: no $base_build/$f (build it first)" >&2; exit 2; }
  done
  out=$(mktemp -d)
  trap 'rm -rf "$out"' EXIT
  run_pairs "$out" "$pairs" "$base_build/test/bench/bench_train --job $JOB --pstrain $base_build/launcher/pstrain" \
    "$BUILD/test/bench/bench_train --job $JOB --pstrain $BUILD/launcher/pstrain" "$@"
  # Rows: "(x) ... <ex/s> (<all>) ..." in the rate table, "  (x) ...; total <ms> ms CPU in ..." below.
  awk -v pairs="$pairs" "$PAIR_AWK"'
    FNR == 1 { pair_file() }
    /^\([a-z]\) / && $0 !~ /local, run [2-9]/ {
      key = $1 " " $2 " " $3 " " $4 " " $5 " " $6
      if ($2 == "local,") key = "(a) local"
      for (i = 1; i <= NF; i++) if ($i ~ /^[0-9]+$/ && $(i + 1) ~ /^\(/) { rate[who, pair, key] = $i; break }
      if (!(key in seen)) { seen[key] = 1; order[++n] = key }
    }
    /^  \([a-z]\) / && /total/ && $0 !~ /local, run [2-9]/ {
      key = $1 " " $2 " " $3 " " $4 " " $5 " " $6
      if ($2 == "local,") key = "(a) local"
      for (i = 1; i <= NF; i++) if ($i == "total") { cpu[who, pair, key] = $(i + 1); break }
    }
    END {
      printf "%-28s %22s %26s\n", "setup", "ex/s this/base", "CPU/step base/this"
      worst = 1e9
      for (s = 1; s <= n; s++) {
        key = order[s]; r = ""; c = ""
        for (p = 1; p <= pairs; p++) {
          r = r " " rate["this", p, key] / rate["base", p, key]
          if (cpu["this", p, key] > 0) c = c " " cpu["base", p, key] / cpu["this", p, key]
        }
        m = median(r)
        printf "%-28s %8.3f (%s) %12.3f (%s)\n", key, m, range(r), median(c), range(c)
        if (m < worst) worst = m
      }
      printf "summary: lowest median this/base ex/s: %.3f (target >= 0.97: %s)\n", worst, (worst >= 0.97 ? "met" : "NOT met")
    }' "$out"/base.* "$out"/this.*
  exit 0
fi
exec "$BUILD/test/bench/bench_train" --job "$JOB" --pstrain "$BUILD/launcher/pstrain" "$@"
