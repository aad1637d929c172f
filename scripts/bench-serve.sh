#!/usr/bin/env bash
# pstrain-serve under wrk (Debian's wrk; test/bench/serve_post.lua posts the request body)
# for configs/job-ctr-emb.json's model and the DCN-v2 zoo model (configs/job-dcn-v2.json),
# each at its initial values (a model dir written by test/bench/serve_bench.cc). The server
# is pinned to core 0, wrk (and the checkpoint writer) to core 1 (the machine has two).
#
# Per model, at 1 and 64 instances per request, closed loop (wrk -c 8, no pacing): requests/s,
# examples/s, p50/p99, the server's CPU seconds per example (/proc/PID/stat utime + stime
# over the run, and its share in the kernel: stime), and the in-process scorer's CPU per
# example on the same examples (bench_serve score: ps::serving::Scorer on one thread) with
# their ratio. The load average is printed at the start and the end. At 1 instance:
# p99 at half the peak request rate, paced with wrk's delay() ("paced closed loop"); then the
# same load while a writer commits a delta of 1 % of the rows every 2 s and a full
# checkpoint every 10 s (the server polls every 0.5 s): p99 and failures under swaps, and
# the server's peak RSS meanwhile (VmHWM, reset first through /proc/PID/clear_refs) beside
# its RSS before.
#
#   scripts/bench-serve.sh [--seconds 10] [--swap-seconds 30]
set -euo pipefail
source "$(dirname "$0")/bench-lib.sh"

SECONDS_RUN=10
SWAP_SECONDS=30
while [ $# -gt 0 ]; do
  case "$1" in
    --seconds) SECONDS_RUN=$2; shift 2 ;;
    --swap-seconds) SWAP_SECONDS=$2; shift 2 ;;
    *) echo "bench-serve: unknown argument $1" >&2; exit 2 ;;
  esac
done
command -v wrk >/dev/null || { echo "bench-serve: needs wrk (apt-get install wrk)" >&2; exit 1; }

bench_build daemons/serve/pstrain-serve test/bench/bench_serve
echo "bench-serve: $(git rev-parse --short HEAD 2>/dev/null || echo '?'), server on core 0, wrk on core 1; load average $(cut -d' ' -f1-3 /proc/loadavg) ($(nproc) cores)"
TMP=$(mktemp -d)
SERVER=
WRITER=
cleanup() {
  stop_pid "$SERVER"
  stop_pid "$WRITER"
  rm -rf "$TMP"
}
trap cleanup EXIT
LUA=test/bench/serve_post.lua
TICKS=$(getconf CLK_TCK)

cpu_ticks() { awk '{print $14 + $15}' "/proc/$1/stat"; }
sys_ticks() { awk '{print $15}' "/proc/$1/stat"; }
rss_kib() { awk "/^$2:/ {print \$2}" "/proc/$1/status"; }

# run_wrk BODY SECONDS [DELAY_MS]: sets REQS NON2XX ERRS P50 P99 (us), CPU_TICKS and
# SYS_TICKS (the server's CPU, and its part in the kernel).
run_wrk() {
  local before out sys_before
  before=$(cpu_ticks "$SERVER")
  sys_before=$(sys_ticks "$SERVER")
  out=$(BODY_FILE=$1 PREDICT_PATH=/v1/models/m:predict DELAY_MS=${3:-0} \
        taskset -c 1 wrk -t1 -c8 -d"${2}s" --timeout 10s -s "$LUA" "http://127.0.0.1:$PORT" | grep '^wrk-summary:')
  CPU_TICKS=$(( $(cpu_ticks "$SERVER") - before ))
  SYS_TICKS=$(( $(sys_ticks "$SERVER") - sys_before ))
  read -r REQS NON2XX ERRS P50 P99 < <(echo "$out" | sed -E 's/.*requests=([0-9]+) non2xx=([0-9]+) errors=([0-9]+) p50_us=([0-9]+) p99_us=([0-9]+)/\1 \2 \3 \4 \5/')
}

for JOB in configs/job-ctr-emb.json configs/job-dcn-v2.json; do
  NAME=$(basename "$JOB" .json)
  DIR=$TMP/$NAME
  # The writer: ckpt-0 now, the swaps once $TMP/go-$NAME exists.
  taskset -c 1 "$BUILD/test/bench/bench_serve" model "$JOB" "$DIR" "$SWAP_SECONDS" 0.01 2 10 \
    "$TMP/go-$NAME" > "$TMP/writer.log" 2>&1 &
  WRITER=$!
  for _ in $(seq 3000); do grep -q "ckpt-0 committed" "$TMP/writer.log" && break; sleep 0.1; done
  for K in 1 64; do "$BUILD/test/bench/bench_serve" body "$JOB" "$K" "$TMP/body-$K.json"; done
  taskset -c 0 "$BUILD/daemons/serve/pstrain-serve" --model "m=$DIR" --port 0 --poll-seconds 0.5 \
    --threads 2 > "$TMP/serve.log" 2>&1 &
  SERVER=$!
  for _ in $(seq 600); do grep -q "ready: 1 model" "$TMP/serve.log" && break; sleep 0.1; done
  PORT=$(sed -nE 's|.*pstrain-serve: serving at http://[^ ]*:([0-9]+).*|\1|p' "$TMP/serve.log" | head -1)
  [ -n "$PORT" ] || { cat "$TMP/serve.log"; exit 1; }
  PARAM_MIB=$(du -sm "$DIR/ckpt-0" | cut -f1)
  echo "== $NAME (ckpt-0: ${PARAM_MIB} MiB; server RSS $(( $(rss_kib "$SERVER" VmRSS) / 1024 )) MiB)"
  for K in 1 64; do
    run_wrk "$TMP/body-$K.json" "$SECONDS_RUN"
    PEAK=$(( REQS / SECONDS_RUN ))
    [ "$K" = 1 ] && PEAK1=$PEAK
    SERVER_US=$(awk -v t="$CPU_TICKS" -v hz="$TICKS" -v n="$REQS" -v k="$K" 'BEGIN {printf "%.3f", t / hz / (n * k) * 1e6}')
    INPROC_US=$("$BUILD/test/bench/bench_serve" score "$DIR" "$TMP/body-$K.json" 3 | sed -E 's/.* examples, ([0-9.]+) us.*/\1/')
    RATIO=$(awk -v a="$SERVER_US" -v b="$INPROC_US" 'BEGIN {printf "%.2f", a / b}')
    KERNEL=$(awk -v s="$SYS_TICKS" -v t="$CPU_TICKS" 'BEGIN {printf "%d", t ? 100 * s / t : 0}')
    echo "$NAME instances=$K closed-loop: $PEAK req/s, $(( PEAK * K )) examples/s, p50 $P50 us, p99 $P99 us, non-2xx $NON2XX, errors $ERRS; server CPU $SERVER_US us/example ($KERNEL % in the kernel), in-process $INPROC_US us/example, ratio $RATIO"
  done
  # Half the peak request rate at 1 instance: 8 connections, each waiting DELAY_MS between requests.
  DELAY=$(awk -v p="$PEAK1" 'BEGIN {d = int(8 * 1000 / (p / 2)); if (d < 1) d = 1; print d}')
  run_wrk "$TMP/body-1.json" "$SECONDS_RUN" "$DELAY"
  STEADY_P99=$P99
  echo "$NAME instances=1 paced closed-loop (delay ${DELAY} ms x 8 connections): $(( REQS / SECONDS_RUN )) req/s, p50 $P50 us, p99 $P99 us, non-2xx $NON2XX, errors $ERRS"
  RSS_BEFORE=$(rss_kib "$SERVER" VmRSS)
  echo 5 > "/proc/$SERVER/clear_refs"
  MARK=$(wc -l < "$TMP/serve.log")
  touch "$TMP/go-$NAME"
  run_wrk "$TMP/body-1.json" "$SWAP_SECONDS" "$DELAY"
  wait "$WRITER" || { cat "$TMP/writer.log"; exit 1; }
  WRITER=
  sleep 1  # the server's last poll
  SWAPS=$(tail -n +"$((MARK + 1))" "$TMP/serve.log" | grep -c "serving step" || true)
  FULLS=$(tail -n +"$((MARK + 1))" "$TMP/serve.log" | grep -c "new full checkpoint" || true)
  FAILS=$(tail -n +"$((MARK + 1))" "$TMP/serve.log" | grep -c "serving on as it was" || true)
  HWM=$(rss_kib "$SERVER" VmHWM)
  echo "$NAME instances=1 paced closed-loop during swaps (${SWAP_SECONDS} s; $SWAPS versions served, $FULLS of them full checkpoints, $FAILS failed refreshes): p50 $P50 us, p99 $P99 us (steady $STEADY_P99 us, ratio $(awk -v a="$P99" -v b="$STEADY_P99" 'BEGIN {printf "%.2f", a / b}')), non-2xx $NON2XX, errors $ERRS"
  echo "$NAME server RSS before swaps $(( RSS_BEFORE / 1024 )) MiB, peak during swaps $(( HWM / 1024 )) MiB (one version's values: ckpt-0, ${PARAM_MIB} MiB on disk); --keep-versions 2, the default"
  kill "$SERVER"; wait "$SERVER" 2>/dev/null || true
  SERVER=
done
echo "bench-serve: load average at the end $(cut -d' ' -f1-3 /proc/loadavg)"
