#!/usr/bin/env bash
# Push/pull throughput of one ps and one worker process over 127.0.0.1 against raw TCP
# on the same loopback, for 4 KiB .. 64 MiB tensors (see test/bench/pushpull_bench.cc),
# and over mutual TLS (throw-away certificates from scripts/make-certs.sh; PSTRAIN_BENCH_TLS=0
# leaves TLS out). Extra arguments go to bench_pushpull (--sizes 4k,1m,16m,64m; --seconds 1
# --rounds 5 by default).
#
#   scripts/bench-pushpull.sh --compare BASE_BUILD_DIR [PAIRS] [bench args...]
# compares with another build instead (e.g. of an earlier commit): runs BASE_BUILD_DIR's
# bench_pushpull and this one alternately, PAIRS times each (3), so that the machine's load
# hits both alike, and prints per size the median (and range) over pairs of this/base push
# and pull GB/s, and of this/base rpc-to-raw ratio (the same comparison with the load of the
# moment divided out).
set -euo pipefail
source "$(dirname "$0")/bench-lib.sh"
bench_build test/bench/bench_pushpull
BENCH="$BUILD/test/bench/bench_pushpull"

if [ "${1:-}" = "--compare" ]; then
  base="${2:?--compare BASE_BUILD_DIR}/test/bench/bench_pushpull"
  shift 2
  pairs=3
  if [[ "${1:-}" =~ ^[0-9]+$ ]]; then pairs=$1; shift; fi
  [ -x "$base" ] || { echo "$0: no $base (build its test/bench/bench_pushpull first)" >&2; exit 2; }
  out=$(mktemp -d)
  trap 'rm -rf "$out"' EXIT
  run_pairs "$out" "$pairs" "$base" "$BENCH" "$@"
  # Table rows: "<n> <KiB|MiB> push raw ratio pull raw ratio" (the first table only).
  awk -v pairs="$pairs" "$PAIR_AWK"'
    FNR == 1 { pair_file(); table = 0 }
    /^size +push GB\/s/ { table++; next }
    NF == 0 && table == 1 { table = 2; next }  # the end of the first table (the µs table follows)
    table == 1 && NF == 8 && ($2 == "KiB" || $2 == "MiB") {
      key = $1 " " $2
      if (!(key in seen)) { seen[key] = 1; order[++nsizes] = key }
      v[who, pair, key, "push"] = $3; v[who, pair, key, "pushr"] = $5
      v[who, pair, key, "pull"] = $6; v[who, pair, key, "pullr"] = $8
    }
    END {
      printf "%-8s %24s %24s   %16s %16s\n", "size", "push ratio (range)", "pull ratio (range)", "push (rpc/raw)", "pull (rpc/raw)"
      worst = 1e9
      for (s = 1; s <= nsizes; s++) {
        key = order[s]
        for (m = 1; m <= 4; m++) lists[m] = ""
        for (p = 1; p <= pairs; p++) {
          lists[1] = lists[1] " " v["this", p, key, "push"] / v["base", p, key, "push"]
          lists[2] = lists[2] " " v["this", p, key, "pull"] / v["base", p, key, "pull"]
          lists[3] = lists[3] " " v["this", p, key, "pushr"] / v["base", p, key, "pushr"]
          lists[4] = lists[4] " " v["this", p, key, "pullr"] / v["base", p, key, "pullr"]
        }
        a = median(lists[1]); b = median(lists[2])
        printf "%-8s %10.3f %13s %10.3f %13s   %16.3f %16.3f\n", key, a, "(" range(lists[1]) ")", b, "(" range(lists[2]) ")", median(lists[3]), median(lists[4])
        if (a < worst) worst = a
        if (b < worst) worst = b
      }
      printf "summary: lowest this/base GB/s ratio: %.3f (target >= 0.97: %s)\n", worst, (worst >= 0.97 ? "met" : "NOT met")
    }' "$out"/base.* "$out"/this.*
  exit 0
fi

if [ "${PSTRAIN_BENCH_TLS:-1}" != 0 ]; then
  certs=$(mktemp -d)
  trap 'rm -rf "$certs"' EXIT
  bash scripts/make-certs.sh "$certs" ps worker >/dev/null
  "$BENCH" --tls-dir "$certs" "$@"
else
  exec "$BENCH" "$@"
fi
