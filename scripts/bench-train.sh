#!/usr/bin/env bash
# Training throughput of the Fashion-MNIST MLP (784-256-128-10, batch 128): (a) one
# process with an in-process store and no network, (b) 1 ps + 1 worker and (c) 1 ps + 2
# workers as real daemons under `pstrain local` (see test/bench/train_bench.cc), with each
# process's CPU ms per step (what 2 cores allow). PSTRAIN_BENCH_JOB picks another job, e.g.
# configs/job-fmnist-mlp-small.json (784-128-10, SGD, batch 64).
# Extra arguments go to bench_train (--steps, --local-steps, --workers 1,2,
# --steps-per-dispatch N, --dispatches-per-worker N, --keep, --rounds N (the sequence N
# times and the median of each ratio: single runs on 2 cores vary by up to 1.8x), ...).
set -euo pipefail
source "$(dirname "$0")/bench-lib.sh"
JOB=${PSTRAIN_BENCH_JOB:-configs/job-fmnist-mlp.json}
bench_build test/bench/bench_train launcher/pstrain \
  daemons/ps/pstrain-ps daemons/worker/pstrain-worker daemons/chief/pstrain-chief
exec "$BUILD/test/bench/bench_train" --job "$JOB" --pstrain "$BUILD/launcher/pstrain" "$@"
