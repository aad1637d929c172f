# Sourced by scripts/bench-*.sh: works from the repository root, builds into $BUILD, runs
# OpenBLAS on one thread (benchmarks report ratios measured in one run; a second BLAS
# thread would only compete with the daemons for the two cores).
cd "$(dirname "${BASH_SOURCE[0]}")/.."
BUILD=${PSTRAIN_BUILD:-build}
export OPENBLAS_NUM_THREADS=1

# bench_build TARGET...: configures the build once (release) and builds what a benchmark runs.
bench_build() {
  if [ ! -f "$BUILD/build.ninja" ]; then meson setup "$BUILD" --buildtype=release >/dev/null; fi
  ninja -C "$BUILD" -j "${PSTRAIN_JOBS:-2}" "$@" >/dev/null
}

# local_cluster_file FILE: a cluster file for chief, 2 workers and 2 ps on five consecutive
# free ports of 127.0.0.1 below Linux's ephemeral range (32768+).
local_cluster_file() {
  local base busy p
  while :; do
    base=$((20000 + RANDOM % 12000))
    busy=0
    for p in 0 1 2 3 4; do (: <"/dev/tcp/127.0.0.1/$((base + p))") 2>/dev/null && busy=1; done
    [ $busy = 0 ] && break
  done
  cat > "$1" <<EOF
{"cluster": {"chief": ["127.0.0.1:$base"], "worker": ["127.0.0.1:$((base + 1))", "127.0.0.1:$((base + 2))"],
             "ps": ["127.0.0.1:$((base + 3))", "127.0.0.1:$((base + 4))"]}}
EOF
}

# run_pairs OUT PAIRS BASE_CMD THIS_CMD [ARGS...]: runs BASE_CMD ARGS then THIS_CMD ARGS
# (each a command line in one string, split on spaces), PAIRS times, into OUT/base.I and
# OUT/this.I, so that the machine's load hits both alike; prints the load around them.
run_pairs() {
  local out=$1 pairs=$2 base=$3 this=$4 i
  shift 4
  echo "load average at start: $(cut -d' ' -f1-3 /proc/loadavg) ($(nproc) cores); $pairs pairs, base first"
  for i in $(seq "$pairs"); do
    $base "$@" > "$out/base.$i"
    $this "$@" > "$out/this.$i"
  done
  echo "load average at end: $(cut -d' ' -f1-3 /proc/loadavg)"
}

# Awk functions for run_pairs' tables: median and "lo-hi" range of a space-separated list;
# pair_file() sets who ("base" or "this") and pair from FILENAME (call it at FNR == 1).
PAIR_AWK='
  function median(list,   n, a, i, j, t) {
    n = split(list, a, " ")
    for (i = 1; i <= n; i++) for (j = i + 1; j <= n; j++) if (a[j] < a[i]) { t = a[i]; a[i] = a[j]; a[j] = t }
    return n % 2 ? a[(n + 1) / 2] : (a[n / 2] + a[n / 2 + 1]) / 2
  }
  function range(list,   n, a, i, lo, hi) {
    n = split(list, a, " "); lo = a[1]; hi = a[1]
    for (i = 2; i <= n; i++) { if (a[i] < lo) lo = a[i]; if (a[i] > hi) hi = a[i] }
    return sprintf("%.2f-%.2f", lo, hi)
  }
  function pair_file(   name, parts) {
    name = FILENAME; sub(".*/", "", name); split(name, parts, "."); who = parts[1]; pair = parts[2]
  }
'

# stop_pid PID: stops a background process this script started (SIGTERM) and reaps it;
# nothing for an empty PID or one already gone.
stop_pid() {
  [ -n "${1:-}" ] || return 0
  kill "$1" 2>/dev/null || true
  wait "$1" 2>/dev/null || true
}
