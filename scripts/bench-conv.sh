#!/usr/bin/env bash
# conv2d forward+backward GFLOP/s against single-thread sgemm GFLOP/s of the same shapes,
# measured in the same run (test/bench/conv_bench.cc). Default layers: the Fashion-MNIST
# CNN's (configs/job-fmnist-cnn.json). Extra arguments go to bench_conv (--batch N,
# --seconds S, --layer HxWxC:FxK[:same|valid][:sS] ...).
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD=${PSTRAIN_BUILD:-build}
export OPENBLAS_NUM_THREADS=1
if [ ! -f "$BUILD/build.ninja" ]; then meson setup "$BUILD" --buildtype=release >/dev/null; fi
ninja -C "$BUILD" -j "${PSTRAIN_JOBS:-2}" test/bench/bench_conv >/dev/null
exec "$BUILD/test/bench/bench_conv" "$@"
