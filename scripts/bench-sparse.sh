#!/usr/bin/env bash
# Sparse embedding benchmarks. Each section prints its own table; append new sections
# at the end (each a function called from the list at the bottom).
#
# Section "ps": embedding rows pulled and pushed per second by one ps core for a
# 10,000,000 x 16 table (dense and lazy), Zipf-distributed ids, de-duplicated per batch
# as a worker does, over 127.0.0.1 against the same Store calls in-process (see
# test/bench/bench_sparse_ps.cc). Extra arguments go to bench_sparse_ps (--rows, --dim,
# --batch, --ids, --zipf, --clients, --seconds, --variants: dense, lazy, lazy-evict = lazy
# with the 4-byte last-push stamp of a table with "evict", index-bound and hash-bound =
# upper bounds for a lazy table (a direct index; a perfect hash table), in-process only,
# sweep = push times while eviction sweeps of the whole shard run, on the pushing thread
# and on a sweeper thread as in pstrain-ps;
# --cpu-time 1: in-process rates in the thread's CPU time, for a machine shared with other
# jobs; --pool-only 1: the ps hands every request to its handler thread instead of
# answering requests up to 1 MiB on its I/O thread as pstrain-ps does).
#
# Section "train": training examples per second of configs/job-ctr-emb.json (embedding +
# MLP, 8 tables of 1,116,134 rows x 8 in all, Adagrad, batch 256) on synthetic click data
# written by `pstrain gen-ctr` (seed 1, 1M training examples) into a temporary directory:
# (a) one process with an in-process store and no network, (b) 1 ps + 1 worker and (c)
# 1 ps + 2 workers as real daemons under `pstrain local` on free ports — first with dense
# tables, then with every table lazy (see test/bench/train_bench.cc: rates are medians of
# 500-step windows, each cluster compared with the (a) runs just before and after it).
# PSTRAIN_TRAIN_ARGS: extra bench_train flags for both runs (e.g. "--steps 6000").
# PSTRAIN_SPARSE_SECTIONS: which sections to run, in order (default "ps train").
set -euo pipefail
source "$(dirname "$0")/bench-lib.sh"

section_ps() {
  echo "== ps: sparse pull/push rows per second, one ps core =="
  bench_build test/bench/bench_sparse_ps
  "$BUILD/test/bench/bench_sparse_ps" "$@"
}

section_train() {
  echo "== train: embedding + MLP on synthetic click data, examples per second =="
  bench_build test/bench/bench_train launcher/pstrain \
    daemons/ps/pstrain-ps daemons/worker/pstrain-worker daemons/chief/pstrain-chief
  local tmp
  tmp=$(mktemp -d "${TMPDIR:-/tmp}/bench-sparse-XXXXXX")
  # shellcheck disable=SC2064  # expand $tmp now
  trap "rm -rf '$tmp'" EXIT
  "$BUILD/launcher/pstrain" gen-ctr --out "$tmp/data" --seed 1 --train-examples 1000000 \
    --eval-examples 1000
  # shellcheck disable=SC2206  # word splitting intended
  local args=(--job configs/job-ctr-emb.json --pstrain "$BUILD/launcher/pstrain" --base-dir "$tmp/data"
    --steps 10000 --log-every 500 --skip-steps 2000 --local-steps 5000 --warmup-steps 200
    ${PSTRAIN_TRAIN_ARGS:-})
  echo "-- dense tables"
  "$BUILD/test/bench/bench_train" "${args[@]}"
  echo "-- lazy tables (\"lazy\": true on every table)"
  "$BUILD/test/bench/bench_train" "${args[@]}" --lazy
  rm -rf "$tmp"
  trap - EXIT
}

for section in ${PSTRAIN_SPARSE_SECTIONS:-ps train}; do
  case "$section" in
    ps) section_ps "$@" ;;
    train) section_train ;;
    *) echo "bench-sparse.sh: unknown section \"$section\" (ps, train)" >&2; exit 2 ;;
  esac
done
