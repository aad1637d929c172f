#!/usr/bin/env bash
# Soak of a job that follows arriving data (train_data.follow) under `pstrain local`
# (chief, 2 workers, 2 ps on 127.0.0.1):
#  1. idle: the job runs with nothing to train for IDLE seconds; the CPU the chief and the
#     workers use then (utime + stime from /proc/<pid>/stat), as % of one core, against
#     the 1 % target;
#  2. soak: a directory of LibSVM files with its _SUCCESS marker arrives every
#     EVERY seconds for MINUTES minutes; every SAMPLE seconds, each task's RSS (VmRSS)
#     and open files (/proc/<pid>/fd) are printed as a table row, and at the end each
#     task's RSS growth (KiB/min, least squares over the samples after the first minute).
#
#   scripts/bench-soak.sh [--minutes N (10)] [--idle S (60)] [--every S (10)]
#                         [--sample S (30)] [--examples N per directory (20000)] [--keep]
set -euo pipefail
source "$(dirname "$0")/bench-lib.sh"
minutes=10 idle=60 every=10 sample=30 examples=20000 keep=0
while [ $# -gt 0 ]; do
  case $1 in
    --minutes) minutes=$2; shift 2 ;;
    --idle) idle=$2; shift 2 ;;
    --every) every=$2; shift 2 ;;
    --sample) sample=$2; shift 2 ;;
    --examples) examples=$2; shift 2 ;;
    --keep) keep=1; shift ;;
    *) echo "$0: unknown argument $1" >&2; exit 2 ;;
  esac
done
bench_build launcher/pstrain daemons/ps/pstrain-ps daemons/worker/pstrain-worker \
  daemons/chief/pstrain-chief
dir=$(mktemp -d /tmp/pstrain-soak-XXXXXX)
local_pid=
cleanup() {
  if [ -n "$local_pid" ] && kill -0 "$local_pid" 2>/dev/null; then
    kill -TERM "$local_pid" 2>/dev/null || true
    wait "$local_pid" 2>/dev/null || true
  fi
  if [ $keep = 0 ]; then rm -rf "$dir"; else echo "kept $dir"; fi
}
trap cleanup EXIT
local_cluster_file "$dir/cluster.json"
mkdir -p "$dir/in"
features=100000
cat > "$dir/job.json" <<JOB
{"model": {"type": "logistic_regression", "num_features": $features, "num_fields": 1},
 "train_data": {"format": "libsvm", "files": "$dir/in/*/*.libsvm", "num_features": $features,
                "follow": {"done_marker": "_SUCCESS", "poll_seconds": 1}},
 "optimizer": {"type": "sgd", "learning_rate": 0.05},
 "batch_size": 256, "steps_per_dispatch": 10, "log_every_steps": 200,
 "model_dir": "$dir/model",
 "checkpoint": {"every_seconds": 60, "max_to_keep": 2}}
JOB
"$BUILD/launcher/pstrain" local --cluster "$dir/cluster.json" --job "$dir/job.json" \
  > "$dir/log.txt" 2>&1 &
local_pid=$!

# The pid of each daemon `pstrain local` started, by role.
declare -A pid
for _ in $(seq 600); do
  pid=()
  ps_n=0 w_n=0
  for p in $(pgrep -P "$local_pid" || true); do
    case $(tr '\0' ' ' < "/proc/$p/cmdline" 2>/dev/null) in
      *pstrain-chief*) pid[chief]=$p ;;
      *pstrain-ps*) pid[ps$ps_n]=$p; ps_n=$((ps_n + 1)) ;;
      *pstrain-worker*) pid[w$w_n]=$p; w_n=$((w_n + 1)) ;;
    esac
  done
  [ ${#pid[@]} = 5 ] && grep -q "no file matches yet" "$dir/log.txt" && break
  kill -0 "$local_pid" 2>/dev/null || { cat "$dir/log.txt"; exit 1; }
  sleep 0.1
done
[ ${#pid[@]} = 5 ] || { echo "$0: the cluster did not start" >&2; tail "$dir/log.txt" >&2; exit 1; }
tasks="chief w0 w1 ps0 ps1"
hz=$(getconf CLK_TCK)
ticks() { awk '{ print $14 + $15 }' "/proc/$1/stat"; }

echo "idle: ${idle} s with nothing to train (load average $(cut -d' ' -f1-3 /proc/loadavg))"
declare -A t0
for t in $tasks; do t0[$t]=$(ticks "${pid[$t]}"); done
sleep "$idle"
sum=0
for t in $tasks; do
  d=$(( $(ticks "${pid[$t]}") - t0[$t] ))
  pct=$(awk -v d="$d" -v hz="$hz" -v s="$idle" 'BEGIN { printf "%.3f", 100 * d / hz / s }')
  printf "  %-6s %6s %% of a core\n" "$t" "$pct"
  case $t in chief|w0|w1) sum=$((sum + d)) ;; esac
done
awk -v d="$sum" -v hz="$hz" -v s="$idle" 'BEGIN { p = 100 * d / hz / s;
  printf "  chief + workers: %.3f %% of a core (target <= 1 %%: %s)\n", p, (p <= 1 ? "met" : "NOT met") }'

# LibSVM lines with 4 features each, the ids drawn from the example's number.
drop() {
  local d="$dir/in/$(printf 'd%05d' "$1")"
  mkdir -p "$d"
  awk -v n="$examples" -v seed="$1" -v f="$features" 'BEGIN { srand(seed);
    for (i = 0; i < n; i++) printf "%d %d:1 %d:1 %d:1 %d:1\n", i % 2, 1 + int(rand() * f),
      1 + int(rand() * f), 1 + int(rand() * f), 1 + int(rand() * f) }' > "$d/part-0.libsvm"
  : > "$d/_SUCCESS"
}
rss() { awk '/^VmRSS:/ { print $2 }' "/proc/$1/status"; }
fds() { ls "/proc/$1/fd" | wc -l; }

echo
echo "soak: a directory of $examples examples every $every s for $minutes min; RSS KiB / open files"
printf "%6s" "min"
for t in $tasks; do printf " %16s" "$t"; done
printf "  %s\n" "files trained"
start=$(date +%s)
end=$((start + minutes * 60))
next_drop=$start next_sample=$start n=0
: > "$dir/samples.txt"
while [ "$(date +%s)" -lt "$end" ]; do
  now=$(date +%s)
  if [ "$now" -ge "$next_drop" ]; then drop "$n"; n=$((n + 1)); next_drop=$((next_drop + every)); fi
  if [ "$now" -ge "$next_sample" ]; then
    m=$(awk -v s=$((now - start)) 'BEGIN { printf "%.1f", s / 60 }')
    printf "%6s" "$m"
    line="$m"
    for t in $tasks; do
      if [ ! -d "/proc/${pid[$t]}" ]; then
        echo; echo "$0: $t (pid ${pid[$t]}) is gone:" >&2; tail -20 "$dir/log.txt" >&2; exit 1
      fi
      r=$(rss "${pid[$t]}"); f=$(fds "${pid[$t]}")
      printf " %9s / %4s" "$r" "$f"
      line="$line $r"
    done
    trained=$(grep -o '[0-9]* file(s) followed are trained' "$dir/log.txt" | tail -1 | cut -d' ' -f1)
    printf "  %s\n" "${trained:-0}"
    echo "$line" >> "$dir/samples.txt"
    next_sample=$((next_sample + sample))
  fi
  kill -0 "$local_pid" 2>/dev/null || { echo "$0: the job ended" >&2; tail "$dir/log.txt" >&2; exit 1; }
  sleep 1
done
echo
echo "RSS growth after the first minute (least squares, KiB/min):"
i=2
for t in $tasks; do
  awk -v c=$i -v name="$t" '$1 >= 1 { n++; x += $1; y += $c; xx += $1 * $1; xy += $1 * $c }
    END { if (n < 2 || n * xx == x * x) { printf "  %-6s (too few samples)\n", name; exit }
          printf "  %-6s %8.1f\n", name, (n * xy - x * y) / (n * xx - x * x) }' "$dir/samples.txt"
  i=$((i + 1))
done
lag=$(grep -o 'data lag of the last [0-9.]* s' "$dir/log.txt" | tail -1 || true)
echo "$n directories dropped; last: ${lag:-no file trained}"
