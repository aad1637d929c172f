#!/usr/bin/env bash
# A straggler against the shard queue: 3 epochs of streamed CTR data (`pstrain gen-ctr`,
# LibSVM in 16 files, 1M examples by default) on 2 ps + 2 workers under `pstrain local`,
# async updates, worker:1 held at about half speed. The slow-down is the same for any
# build: this script stops worker:1 with SIGSTOP and lets it go on with SIGCONT, 50 ms
# each (a 50 % duty cycle), from its start to its end.
#
#   scripts/bench-straggler.sh --base BASE_BUILD_DIR [--examples N] [--epochs E]
#
# Runs the same job twice, in one run of the script:
#   static   BASE_BUILD_DIR's pstrain: a build whose workers each stream their own share of
#            the files (any build before the shard queue), with steps = E x examples / batch;
#   dynamic  this build: the chief leases shards; "epochs": E.
# For each: the wall time of training (the chief's elapsed seconds at its last progress
# record), the steps each worker ran, and each worker's rate while both trained (the mean
# of its examples/s in the progress records in which both workers were running, start-up
# left out). Other load on the machine shares the cores too, so the slow worker's rate is
# measured, not assumed to be half. Reported:
#   - dynamic wall / static wall, for the same number of examples (goal <= 0.75);
#   - static wall until every example is trained E times: the static split gives each
#     worker half the files, so that is when the slow worker has trained E x examples / 2
#     (at the rate it showed), while the fast one re-trains its own half meanwhile;
#   - dynamic wall / (E x examples / the sum of the workers' rates in the dynamic run)
#     (goal <= 1.10: the time lost to the tail of the queue).
set -euo pipefail
source "$(dirname "$0")/bench-lib.sh"
base_build="" examples=1000000 epochs=3
while [ $# -gt 0 ]; do
  case "$1" in
    --base) base_build=$2; shift 2 ;;
    --examples) examples=$2; shift 2 ;;
    --epochs) epochs=$2; shift 2 ;;
    -h | --help) sed -n '2,24p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "$0: unknown argument $1" >&2; exit 2 ;;
  esac
done
[ -n "$base_build" ] || { echo "$0: --base BASE_BUILD_DIR is required (see --help)" >&2; exit 2; }
[ -x "$base_build/launcher/pstrain" ] || { echo "$0: no $base_build/launcher/pstrain" >&2; exit 2; }
bench_build launcher/pstrain daemons/ps/pstrain-ps daemons/worker/pstrain-worker \
  daemons/chief/pstrain-chief
PY=/usr/bin/python3
TMP=$(mktemp -d "${TMPDIR:-/tmp}/bench-straggler-XXXXXX")
duty_pid=""
cleanup() {
  [ -n "$duty_pid" ] && kill "$duty_pid" 2>/dev/null
  if [ "${PSTRAIN_BENCH_KEEP:-0}" = 1 ]; then echo "kept $TMP"; else rm -rf "$TMP"; fi
}
trap cleanup EXIT
echo "load average at start: $(cut -d' ' -f1-3 /proc/loadavg) ($(nproc) cores)"

"$BUILD/launcher/pstrain" gen-ctr --out "$TMP/ctr" --seed 1 --train-examples "$examples" \
  --eval-examples 10000 --files 16 >/dev/null
batch=$($PY -c 'import json; print(json.load(open("configs/job-ctr-emb.json"))["batch_size"])')
steps=$((epochs * examples / batch))
# job MODE: the CTR embedding job on the generated files; MODE static (steps) or dynamic (epochs).
job() {
  $PY - "$1" "$TMP" "$steps" "$epochs" <<'EOF'
import json, sys
mode, tmp, steps, epochs = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
j = json.load(open("configs/job-ctr-emb.json"))
for key, name in (("train_data", "train"), ("eval_data", "eval")):
    j[key].pop("path")
    j[key]["files"] = [name + "-*.libsvm"]
j["base_dir"] = tmp + "/ctr"
j["model_dir"] = tmp + "/model-" + mode
j["log_every_steps"] = 200
j.pop("steps", None)
if mode == "static":
    j["steps"] = steps
else:
    j["epochs"] = epochs
json.dump(j, open(tmp + "/job-" + mode + ".json", "w"))
EOF
}

# slow_worker1 CLUSTER_FILE: once worker:1 of that cluster runs, a 50 % SIGSTOP/SIGCONT cycle.
slow_worker1() {
  local chief pid="" task1='"task": ?\{("index": ?1, ?"type": ?"worker"|"type": ?"worker", ?"index": ?1)\}'
  chief=$(grep -o '"chief": \["[^"]*"' "$1" | grep -o '[0-9.]\+:[0-9]\+')
  while [ -z "$pid" ]; do
    for p in /proc/[0-9]*; do
      [[ "$(readlink "$p/exe" 2>/dev/null)" == */pstrain-worker ]] || continue
      env=$(tr '\0' '\n' < "$p/environ" 2>/dev/null | grep '^TF_CONFIG=' || true)
      if [[ "$env" == *"$chief"* ]] && grep -qE "$task1" <<< "$env"; then pid=${p#/proc/}; fi
    done
    [ -z "$pid" ] && sleep 0.05
  done
  echo "worker:1 (pid $pid): stopped and continued every 50 ms" >&2
  while kill -STOP "$pid" 2>/dev/null; do
    sleep 0.05
    kill -CONT "$pid" 2>/dev/null || break
    sleep 0.05
  done
}

# run MODE PSTRAIN: trains; prints "wall steps0 steps1 rate0 rate1" from the chief's records.
run() {
  local mode=$1 pstrain=$2
  job "$mode"
  local_cluster_file "$TMP/cluster-$mode.json"
  slow_worker1 "$TMP/cluster-$mode.json" &
  duty_pid=$!
  "$pstrain" local --cluster "$TMP/cluster-$mode.json" --job "$TMP/job-$mode.json" \
    --model-dir "$TMP/model-$mode" > "$TMP/log-$mode" 2>&1 ||
    { echo "$mode run failed:"; tail -20 "$TMP/log-$mode"; exit 1; }
  kill "$duty_pid" 2>/dev/null || true
  wait "$duty_pid" 2>/dev/null || true
  duty_pid=""
  $PY - "$TMP/model-$mode/train_metrics.jsonl" "$batch" <<'EOF'
import json, sys
path, batch = sys.argv[1], int(sys.argv[2])
rates, steps, wall, n = {}, {}, 0.0, 0
for line in open(path):
    r = json.loads(line)
    if "step" not in r or not r.get("workers"):
        continue
    wall = r["elapsed_sec"]
    n += 1
    for w in r["workers"]:
        steps[w["task"]] = w["steps"]
    # A worker's rate: the mean of its rates over the windows in which every worker ran,
    # after the first two (start-up).
    if n > 2 and all(w["state"] == "running" for w in r["workers"]):
        for w in r["workers"]:
            rates.setdefault(w["task"], []).append(w["examples_per_s"])
ts = sorted(steps)
rates = [sum(rates[t]) / len(rates[t]) if rates.get(t) else 0 for t in ts]
print(wall, *[steps[t] for t in ts], *rates)
EOF
}

echo "static: $base_build/launcher/pstrain, $steps steps of $batch"
read -r s_wall s_steps0 s_steps1 s_rate0 s_rate1 < <(run static "$base_build/launcher/pstrain")
echo "dynamic: $BUILD/launcher/pstrain, $epochs epochs"
read -r d_wall d_steps0 d_steps1 d_rate0 d_rate1 < <(run dynamic "$BUILD/launcher/pstrain")
echo "load average at end: $(cut -d' ' -f1-3 /proc/loadavg)"
awk -v ex="$examples" -v ep="$epochs" -v b="$batch" \
  -v sw="$s_wall" -v s0="$s_steps0" -v s1="$s_steps1" -v sr0="$s_rate0" -v sr1="$s_rate1" \
  -v dw="$d_wall" -v d0="$d_steps0" -v d1="$d_steps1" -v dr0="$d_rate0" -v dr1="$d_rate1" 'BEGIN {
  printf "%-8s %8s %9s %9s %12s %12s\n", "", "wall s", "steps w0", "steps w1", "w0 ex/s", "w1 ex/s"
  printf "%-8s %8.1f %9d %9d %12.0f %12.0f\n", "static", sw, s0, s1, sr0, sr1
  printf "%-8s %8.1f %9d %9d %12.0f %12.0f\n", "dynamic", dw, d0, d1, dr0, dr1
  slow = sr0 < sr1 ? sr0 : sr1
  full = ep * ex / 2 / slow
  ideal = ep * ex / (dr0 + dr1)
  printf "dynamic / static wall, same examples: %.3f (goal <= 0.75)\n", dw / sw
  printf "static wall until every example is trained %d times: %.1f s (the slow worker, %.0f ex/s, trains its half); dynamic / that: %.3f\n", ep, full, slow, dw / full
  printf "dynamic wall / (examples / sum of the workers\047 rates = %.1f s): %.3f (goal <= 1.10)\n", ideal, dw / ideal }'
