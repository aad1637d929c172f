#!/usr/bin/env bash
# Sparse embedding benchmarks. Each section prints its own table; append new sections
# at the end (each a function called from the list at the bottom).
#
# Section "ps": embedding rows pulled and pushed per second by one ps core for a
# 10,000,000 x 16 table (dense and lazy), Zipf-distributed ids, de-duplicated per batch
# as a worker does, over 127.0.0.1 against the same Store calls in-process (see
# test/bench/bench_sparse_ps.cc). Extra arguments go to bench_sparse_ps (--rows, --dim,
# --batch, --ids, --zipf, --clients, --seconds, --variants).
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD=${PSTRAIN_BUILD:-build}
export OPENBLAS_NUM_THREADS=1
if [ ! -f "$BUILD/build.ninja" ]; then meson setup "$BUILD" --buildtype=release >/dev/null; fi

section_ps() {
  echo "== ps: sparse pull/push rows per second, one ps core =="
  ninja -C "$BUILD" -j "${PSTRAIN_JOBS:-1}" test/bench/bench_sparse_ps >/dev/null
  "$BUILD/test/bench/bench_sparse_ps" "$@"
}

section_ps "$@"
