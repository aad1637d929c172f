#!/usr/bin/env bash
# Installs what pstrain needs from Debian 12's packages (only what is missing) and
# configures + builds into ./build. Safe to run again. Run as root (or with sudo).
set -euo pipefail
cd "$(dirname "$0")/.."

PACKAGES=(g++ meson ninja-build pkg-config flatbuffers-compiler libflatbuffers-dev
          libboost-dev libboost-program-options-dev nlohmann-json3-dev libopenblas-dev
          libssl-dev openssl zlib1g-dev libprotobuf-dev protobuf-compiler catch2 dataset-fashion-mnist
          libsimdjson-dev)
# What only the tests need (scripts/test.sh sets PSTRAIN_WITH_TEST_TOOLS=1): one line per
# test that uses real outside software, naming the test.
TEST_PACKAGES=(
  chromium   # integration_report: the HTML report rendered headless
  slurm-wlm munge   # slurm: scripts/slurm/pstrain.sbatch on a real single-node Slurm
  python3-yaml      # kubernetes_manifests: deploy/kubernetes/*.yaml rendered and checked
  prometheus # prometheus: a real Prometheus scrapes a local cluster; promtool checks deploy/prometheus
  iproute2 nftables   # netns: a cluster across network namespaces, shaped and partitioned
  clang-format      # format: every C++ file as .clang-format says
  curl              # http_tls: HTTPS with a client certificate and Expect: 100-continue
)
if [ "${PSTRAIN_WITH_TEST_TOOLS:-0}" = 1 ]; then PACKAGES+=("${TEST_PACKAGES[@]}"); fi
# What only benchmarks need (PSTRAIN_WITH_BENCH_TOOLS=1), naming the script.
BENCH_PACKAGES=(
  wrk   # scripts/bench-serve.sh: the HTTP load on pstrain-serve
)
if [ "${PSTRAIN_WITH_BENCH_TOOLS:-0}" = 1 ]; then PACKAGES+=("${BENCH_PACKAGES[@]}"); fi
# What only scripts/fuzz.sh needs (it sets PSTRAIN_WITH_FUZZ_TOOLS=1); the normal build
# stays GCC.
FUZZ_PACKAGES=(
  clang   # libFuzzer and clang's sanitizers for the test/fuzz programs
)
if [ "${PSTRAIN_WITH_FUZZ_TOOLS:-0}" = 1 ]; then PACKAGES+=("${FUZZ_PACKAGES[@]}"); fi

missing=()
for p in "${PACKAGES[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  echo "setup: installing ${missing[*]}"
  SUDO=""; [ "$(id -u)" -eq 0 ] || SUDO=sudo
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi

# PSTRAIN_SETUP_NO_BUILD=1: packages only (scripts/fuzz.sh and test-sanitize.sh build their own).
if [ "${PSTRAIN_SETUP_NO_BUILD:-0}" = 1 ]; then exit 0; fi

BUILD=${PSTRAIN_BUILD:-build}
if [ ! -f "$BUILD/build.ninja" ]; then
  meson setup "$BUILD" --buildtype=release >/dev/null
fi
# Two cores: more jobs only thrash memory on the Asio-heavy translation units.
# PSTRAIN_TARGETS: build only these ninja targets (scripts/demo.sh builds the executables
# it runs); unset, everything, tests included.
read -r -a targets <<< "${PSTRAIN_TARGETS:-}"
ninja -C "$BUILD" -j "${PSTRAIN_JOBS:-2}" "${targets[@]}"
