#!/usr/bin/env bash
# Scaling figures for planning a cluster, with fake compute (the job key fake_compute_ms:
# workers sleep instead of computing), so that 2 cores suffice (see test/bench/scale_bench.cc):
#
#   scripts/bench-scale.sh chief  [flags]  the chief's CPU per dispatched pack, 64 workers
#   scripts/bench-scale.sh ps     [flags]  one ps core's capacity for 4 KiB pulls, 16 clients
#   scripts/bench-scale.sh fanout [flags]  the demo model's step time with 1, 2, 4 and 8 ps
#   scripts/bench-scale.sh [all]           the three, in that order
#
# Flags go to bench_scale (chief: --workers --fake-compute-ms --steps-per-dispatch --seconds;
# ps: --clients --depth --bytes --seconds --ps-cpu --client-cpu; fanout: --ps-tasks --steps
# --fake-compute-ms --combine 1,0 [A/B of combine_push_pull]). PSTRAIN_BENCH_JOB picks fanout's job
# (configs/job-fmnist-mlp.json).
set -euo pipefail
source "$(dirname "$0")/bench-lib.sh"
JOB=${PSTRAIN_BENCH_JOB:-configs/job-fmnist-mlp.json}
bench_build test/bench/bench_scale launcher/pstrain \
  daemons/ps/pstrain-ps daemons/worker/pstrain-worker daemons/chief/pstrain-chief
BENCH="$BUILD/test/bench/bench_scale"
what=${1:-all}
[ $# -gt 0 ] && shift
run() {
  case "$1" in
    chief) "$BENCH" chief --pstrain "$BUILD/launcher/pstrain" "${@:2}" ;;
    ps) "$BENCH" ps --ps "$BUILD/daemons/ps/pstrain-ps" "${@:2}" ;;
    fanout) "$BENCH" fanout --pstrain "$BUILD/launcher/pstrain" --job "$JOB" "${@:2}" ;;
    *) echo "$0: unknown figure \"$1\" (chief, ps, fanout or all)" >&2; exit 2 ;;
  esac
}
if [ "$what" = all ]; then
  for f in chief ps fanout; do run "$f" "$@"; echo; done
else
  run "$what" "$@"
fi
