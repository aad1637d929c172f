#!/usr/bin/env bash
# Chaos run: trains the Fashion-MNIST MLP (configs/job-fmnist-mlp.json) on a local cluster
# (configs/cluster-local.json's shape: chief, 2 workers, 2 ps, on free ports of 127.0.0.1)
# under `pstrain local --restart on-failure`, and kills (SIGKILL) a worker, a ps or the
# chief at moments drawn from a seeded schedule. The run must heal itself: a killed task
# is restarted by the launcher; a restarted worker rejoins, a restarted ps is restored by
# the chief from the newest checkpoint, a restarted chief restores the newest checkpoint
# and takes over.
#
#   scripts/chaos.sh [--seed N] [--faults K] [--model-dir DIR] [--keep] [--steps N]
#                    [--checkpoint-every N] [--min-accuracy X] [--heal-timeout S] [--timeout S]
#                    [--update JSON]    (the job's "update", e.g. '{"mode": "sync"}')
#
# The schedule: K faults (default 6); with K >= 3 every kind (worker, ps, chief) is hit at
# least once; the kinds, the target indices and the global steps at which the faults fire
# are drawn with --seed (default 1). A fault fires at the first progress line at or past
# its step, and only once the previous fault has healed (so each recovery is measured
# alone). A fault not healed within --heal-timeout seconds (default 120) ends the run
# (the launcher is stopped) and fails it. At the end it checks, and exits 1 if any check
# fails:
#   - the launcher exited 0 (every task's last exit was 0);
#   - `pstrain inspect MODEL_DIR --verify` exits 0 (no checkpoint is corrupt), and the
#     final checkpoint's MANIFEST says global_step == the job's steps and final;
#   - the chief's final evaluation accuracy >= --min-accuracy (default 0.87);
#   - every scheduled fault was injected and healed;
# and prints a table per fault and per kind: faults injected, survived, the seconds from
# the kill to recovery (worker: "rejoined"; ps: the first progress line after
# "recovered"; chief: the new chief's first progress line), the seconds without progress
# (kill -> next progress line), and the steps rewound to the newest checkpoint.
#
# Environment: PSTRAIN_BUILD (default build). Not part of the test suite: it trains the
# full job (9000 steps by default) and takes a few minutes.
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$(pwd)

SEED=1
FAULTS=6
MODEL_DIR=""
KEEP=0
STEPS=""
UPDATE=""
CKPT_EVERY=300
MIN_ACC=0.87
TIMEOUT=1800
HEAL_TIMEOUT=120
LOG_EVERY=50

usage() { sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'; }
die() { echo "chaos: $*" >&2; exit 2; }
while [ $# -gt 0 ]; do
  case "$1" in
    --seed) SEED=${2:?--seed needs a value}; shift 2 ;;
    --faults) FAULTS=${2:?--faults needs a value}; shift 2 ;;
    --model-dir) MODEL_DIR=${2:?--model-dir needs a value}; shift 2 ;;
    --keep) KEEP=1; shift ;;
    --steps) STEPS=${2:?--steps needs a value}; shift 2 ;;
    --checkpoint-every) CKPT_EVERY=${2:?--checkpoint-every needs a value}; shift 2 ;;
    --min-accuracy) MIN_ACC=${2:?--min-accuracy needs a value}; shift 2 ;;
    --timeout) TIMEOUT=${2:?--timeout needs a value}; shift 2 ;;
    --heal-timeout) HEAL_TIMEOUT=${2:?--heal-timeout needs a value}; shift 2 ;;
    --update) UPDATE=${2:?--update needs a value}; shift 2 ;;
    -h|--help) usage; exit 0 ;;
    *) die "unknown argument \"$1\" (see --help)" ;;
  esac
done
for v in SEED FAULTS CKPT_EVERY TIMEOUT HEAL_TIMEOUT; do
  [[ ${!v} =~ ^[0-9]+$ ]] || die "--$(echo "$v" | tr 'A-Z_' 'a-z-'): \"${!v}\" is not a non-negative integer"
done
[ -z "$STEPS" ] || [[ $STEPS =~ ^[0-9]+$ ]] || die "--steps: \"$STEPS\" is not a non-negative integer"
[ "$CKPT_EVERY" -gt 0 ] || die "--checkpoint-every: must be > 0 (a restarted ps or chief restores the newest checkpoint)"

BUILD=${PSTRAIN_BUILD:-build}
PSTRAIN=$ROOT/$BUILD/launcher/pstrain
for exe in "$PSTRAIN" "$ROOT/$BUILD"/daemons/{ps/pstrain-ps,worker/pstrain-worker,chief/pstrain-chief}; do
  [ -x "$exe" ] || die "$exe is missing: build first (scripts/setup.sh, or meson setup $BUILD && ninja -C $BUILD)"
done
command -v python3 >/dev/null || die "python3 is needed (meson brings it)"

WORK=$(mktemp -d "${TMPDIR:-/tmp}/pstrain-chaos-XXXXXX")
[ -n "$MODEL_DIR" ] || MODEL_DIR=$WORK/model
[ ! -e "$MODEL_DIR" ] || [ -z "$(ls -A "$MODEL_DIR")" ] || die "--model-dir $MODEL_DIR is not empty (the run must start from scratch)"
MODEL_DIR=$(mkdir -p "$MODEL_DIR" && cd "$MODEL_DIR" && pwd)
LOG=$WORK/pstrain-local.log
LAUNCHER_PID=""
TAIL_PID=""
declare -A PID=()  # task -> pid of its current process (from the launcher's "started" lines)

# SIGTERM to the launcher (a graceful stop through the chief); after 10 s SIGKILL to it
# and to every task it started.
stop_launcher() {
  [ -n "$LAUNCHER_PID" ] && kill -0 "$LAUNCHER_PID" 2>/dev/null || return 0
  echo "chaos: stopping the launcher (pid $LAUNCHER_PID)" >&2
  kill -TERM "$LAUNCHER_PID" 2>/dev/null || true
  for _ in $(seq 50); do kill -0 "$LAUNCHER_PID" 2>/dev/null || break; sleep 0.2; done
  if kill -0 "$LAUNCHER_PID" 2>/dev/null; then
    for t in "${!PID[@]}"; do kill -KILL "${PID[$t]}" 2>/dev/null || true; done
    kill -KILL "$LAUNCHER_PID" 2>/dev/null || true
  fi
}

cleanup() {
  local rc=$?
  if [ -n "$TAIL_PID" ]; then kill "$TAIL_PID" 2>/dev/null || true; fi
  stop_launcher
  if [ "$KEEP" = 1 ]; then
    echo "chaos: kept $WORK (log: $LOG, model dir: $MODEL_DIR)" >&2
  else
    rm -rf "$WORK"
    case "$MODEL_DIR" in "$WORK"/*) ;; *) [ "$rc" != 0 ] || rm -rf "$MODEL_DIR" ;; esac
  fi
  exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

# ---- the cluster file, the job and the schedule -----------------------------------------
python3 - "$ROOT" "$WORK" "$MODEL_DIR" "${STEPS:-0}" "$CKPT_EVERY" "$LOG_EVERY" "$SEED" "$FAULTS" "$UPDATE" <<'EOF'
import json, random, socket, sys
root, work, model_dir, steps, ckpt_every, log_every, seed, faults, update = sys.argv[1:]
steps, ckpt_every, log_every, seed, faults = map(int, (steps, ckpt_every, log_every, seed, faults))

cluster = json.load(open(f"{root}/configs/cluster-local.json"))["cluster"]
socks = []
for tasks in cluster.values():
    for i, hp in enumerate(tasks):
        s = socket.socket()
        s.bind(("127.0.0.1", 0))
        socks.append(s)
        tasks[i] = f"127.0.0.1:{s.getsockname()[1]}"
for s in socks:
    s.close()
json.dump({"cluster": cluster}, open(f"{work}/cluster.json", "w"), indent=2)

job = json.load(open(f"{root}/configs/job-fmnist-mlp.json"))
if steps > 0:
    job["steps"] = steps
steps = job["steps"]
job["model_dir"] = model_dir
job["log_every_steps"] = log_every
job["checkpoint"] = dict(job.get("checkpoint", {}), every_steps=ckpt_every)
if update:
    job["update"] = json.loads(update)
json.dump(job, open(f"{work}/job.json", "w"), indent=2)

rng = random.Random(seed)
kinds = ["worker", "ps", "chief"] if faults >= 3 else []
kinds += [rng.choice(["worker", "ps", "chief"]) for _ in range(faults - len(kinds))]
rng.shuffle(kinds)
# Fault steps: after the first checkpoint, before the last 15% of the job.
lo, hi = min(ckpt_every, steps // 10), int(steps * 0.85)
at = sorted(rng.randint(lo, hi) for _ in kinds)
with open(f"{work}/schedule", "w") as f:
    for k, s in zip(kinds, at):
        index = 0 if k == "chief" else rng.randrange(len(cluster[k]))
        f.write(f"{s} {k}:{index}\n")
EOF
JOB_STEPS=$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["steps"])' "$WORK/job.json")
mapfile -t SCHEDULE <"$WORK/schedule"

echo "chaos: seed $SEED, $FAULTS fault(s), $JOB_STEPS steps, checkpoint every $CKPT_EVERY steps"
echo "chaos: work dir $WORK, model dir $MODEL_DIR"
echo "chaos: schedule (global step: task to SIGKILL):"
for s in "${SCHEDULE[@]}"; do echo "chaos:   ${s%% *}: ${s#* }"; done

# ---- run ------------------------------------------------------------------------------------
export OPENBLAS_NUM_THREADS=1
START=$(date +%s.%N)
"$PSTRAIN" local --cluster "$WORK/cluster.json" --job "$WORK/job.json" --model-dir "$MODEL_DIR" \
  --restart on-failure --max-restarts $((FAULTS + 1)) >"$LOG" 2>&1 &
LAUNCHER_PID=$!
exec {LINES_FD}< <(exec tail -n +1 -F "$LOG" 2>/dev/null)
TAIL_PID=$!

# Seconds since the epoch of a daemon log line's UTC stamp (2024-06-11T11:20:00.123Z).
stamp_secs() { date -u -d "$1" +%s.%N; }
now() { date +%s.%N; }
fsub() { python3 -c "import sys; print(f'{float(sys.argv[1]) - float(sys.argv[2]):.1f}')" "$1" "$2"; }

NEXT=0              # index into SCHEDULE of the next fault
STATE=armed         # armed: waiting for the next fault's step; healing: waiting for recovery
LAST_STEP=0         # the chief's newest progress step
KIND="" TARGET="" KILL_AT="" KILL_AT_S=0 STEP_AT_KILL=0 RESUMED="" STALL=""
declare -a F_KIND=() F_TARGET=() F_STEP=() F_HEALED=() F_SECS=() F_STALL=() F_REDONE=()

heal() {  # $1: the recovery line's stamp; $2: steps run again
  local secs
  secs=$(fsub "$(stamp_secs "$1")" "$KILL_AT")
  [ -n "$STALL" ] || STALL=$secs
  F_HEALED+=(yes); F_SECS+=("$secs"); F_STALL+=("$STALL"); F_REDONE+=("$2")
  echo "chaos: fault $NEXT healed: $TARGET back after $secs s (no progress for $STALL s), $2 step(s) rewound"
  STATE=armed
}

inject() {
  local spec=${SCHEDULE[$NEXT]}
  TARGET=${spec#* }
  KIND=${TARGET%%:*}
  local pid=${PID[$TARGET]:-}
  [ -n "$pid" ] || { echo "chaos: no pid known for $TARGET" >&2; return 1; }
  KILL_AT=$(now)
  KILL_AT_S=$EPOCHSECONDS
  STEP_AT_KILL=$LAST_STEP
  kill -KILL "$pid"
  NEXT=$((NEXT + 1))
  F_KIND+=("$KIND"); F_TARGET+=("$TARGET"); F_STEP+=("$LAST_STEP")
  echo "chaos: fault $NEXT/$FAULTS at step $LAST_STEP: SIGKILL $TARGET (pid $pid)"
  STATE=healing
  RESUMED=""
  STALL=""
}

re_started='^\[pstrain\] +started ([a-z]+:[0-9]+) \(pid ([0-9]+)\)'
re_chief='^\[chief:0\] +([0-9T:.-]+Z) [A-Z] \[chief:0\] (.*)$'
deadline=$((EPOCHSECONDS + TIMEOUT))
GAVE_UP=""
while :; do
  if [ "$STATE" = healing ] && [ $((EPOCHSECONDS - KILL_AT_S)) -ge "$HEAL_TIMEOUT" ]; then
    GAVE_UP="fault $NEXT ($TARGET) did not heal within --heal-timeout $HEAL_TIMEOUT s"
  elif [ "$EPOCHSECONDS" -ge "$deadline" ]; then
    GAVE_UP="the run did not finish within --timeout $TIMEOUT s"
  fi
  if [ -n "$GAVE_UP" ]; then
    echo "chaos: $GAVE_UP: stopping the run" >&2
    stop_launcher
    break
  fi
  if ! IFS= read -r -t 1 line <&"$LINES_FD"; then
    kill -0 "$LAUNCHER_PID" 2>/dev/null || break
    continue
  fi
  if [[ $line =~ $re_started ]]; then
    PID[${BASH_REMATCH[1]}]=${BASH_REMATCH[2]}
    continue
  fi
  [[ $line =~ $re_chief ]] || continue
  ts=${BASH_REMATCH[1]}
  msg=${BASH_REMATCH[2]}
  progress=0
  if [[ $msg =~ ^step\ ([0-9]+)/([0-9]+)\  ]]; then
    LAST_STEP=${BASH_REMATCH[1]}
    progress=1
  fi
  if [ "$STATE" = healing ]; then
    case "$KIND" in
      worker)
        # Training goes on with the other worker: the stall is until its next progress.
        if [ "$progress" = 1 ] && [ -z "$STALL" ]; then
          s=$(fsub "$(stamp_secs "$ts")" "$KILL_AT")
          [[ $s == -* ]] || STALL=$s
        fi
        [[ $msg == "$TARGET rejoined"* ]] && heal "$ts" 0 ;;
      ps)
        if [[ $msg =~ ^recovered:\ resuming\ at\ step\ [0-9]+\ \(([0-9]+)\ step ]]; then RESUMED=${BASH_REMATCH[1]}; fi
        [ -n "$RESUMED" ] && [ "$progress" = 1 ] && heal "$ts" "$RESUMED" ;;
      chief)
        # The new chief: "restored ckpt-N...: resuming at step N", then its first progress.
        if [[ $msg =~ resuming\ at\ step\ ([0-9]+)$ ]]; then RESUMED=$((STEP_AT_KILL - BASH_REMATCH[1])); fi
        if [[ $msg == "no checkpoint in "* ]]; then RESUMED=$STEP_AT_KILL; fi
        [ -n "$RESUMED" ] && [ "$progress" = 1 ] && heal "$ts" "≥$RESUMED" ;;
    esac
    continue
  fi
  if [ "$progress" = 1 ] && [ "$NEXT" -lt "${#SCHEDULE[@]}" ]; then
    want=${SCHEDULE[$NEXT]%% *}
    # Not in the last 2 progress lines of the job: the chief may be finishing.
    if [ "$LAST_STEP" -ge "$want" ] && [ "$LAST_STEP" -lt $((JOB_STEPS - 2 * LOG_EVERY)) ]; then
      inject || exit 1
    fi
  fi
done
set +e
wait "$LAUNCHER_PID"
LAUNCHER_RC=$?
set -e
LAUNCHER_PID=""
END=$(now)
[ "$STATE" = healing ] && F_HEALED+=(no) && F_SECS+=("-") && F_STALL+=("-") && F_REDONE+=("-")

# ---- checks -----------------------------------------------------------------------------------
FAILED=0
check() {  # $1: ok|FAIL, $2: text
  printf 'chaos: [%s] %s\n' "$1" "$2"
  [ "$1" = ok ] || FAILED=1
}
echo
echo "chaos: ---- launcher's last lines ----"
tail -n 8 "$LOG"
echo "chaos: ----"
[ -z "$GAVE_UP" ] || check FAIL "$GAVE_UP"
if [ "$LAUNCHER_RC" = 0 ]; then
  check ok "the launcher exited 0: $(grep -o 'all [0-9]* tasks exited cleanly' "$LOG" | tail -n 1)"
else
  check FAIL "the launcher exited $LAUNCHER_RC (log: $LOG; use --keep to keep it)"
fi

set +e
INSPECT=$("$PSTRAIN" inspect "$MODEL_DIR" --verify 2>&1)
INSPECT_RC=$?
set -e
if [ "$INSPECT_RC" = 0 ]; then check ok "pstrain inspect --verify: every checkpoint reads back intact"
else check FAIL "pstrain inspect --verify exited $INSPECT_RC:"; echo "$INSPECT" | sed 's/^/chaos:     /'; fi

MANIFEST=$MODEL_DIR/ckpt-$JOB_STEPS/MANIFEST
FINAL=$(python3 - "$MANIFEST" "$JOB_STEPS" <<'EOF' 2>&1
import json, sys
try:
    m = json.load(open(sys.argv[1]))
except Exception as e:
    print(f"FAIL cannot read {sys.argv[1]}: {e}"); sys.exit()
ok = m.get("global_step") == int(sys.argv[2]) and m.get("final") is True
print(("ok" if ok else "FAIL") + f" final checkpoint {sys.argv[1]}: global_step {m.get('global_step')}, final {m.get('final')}")
EOF
)
check "${FINAL%% *}" "${FINAL#* }"

ACC=$(python3 - "$MODEL_DIR/train_metrics.jsonl" "$JOB_STEPS" "$MIN_ACC" <<'EOF' 2>&1
import json, sys
path, steps, want = sys.argv[1], int(sys.argv[2]), float(sys.argv[3])
final = None
try:
    for line in open(path):
        line = line.strip()
        if line:
            j = json.loads(line)
            if "final_eval" in j:
                final = j["final_eval"]
except Exception as e:
    print(f"FAIL cannot read {path}: {e}"); sys.exit()
if final is None:
    print(f"FAIL no final_eval in {path}"); sys.exit()
ok = final["accuracy"] >= want and final["step"] == steps
print(("ok" if ok else "FAIL") + f" final evaluation at step {final['step']} on {final['examples']} examples: "
      f"accuracy {final['accuracy']:.4f} (needed >= {want})")
EOF
)
check "${ACC%% *}" "${ACC#* }"

HEALED=0
for h in "${F_HEALED[@]}"; do [ "$h" = yes ] && HEALED=$((HEALED + 1)); done
if [ "${#F_KIND[@]}" = "$FAULTS" ] && [ "$HEALED" = "$FAULTS" ]; then
  check ok "all $FAULTS fault(s) injected and healed"
else
  check FAIL "${#F_KIND[@]} of $FAULTS fault(s) injected, $HEALED healed"
fi

# ---- the table --------------------------------------------------------------------------------
echo
echo "chaos: seed $SEED, $JOB_STEPS steps, wall time $(fsub "$END" "$START") s"
# recovery: kill -> the task is back in service (worker: "rejoined"; ps: first progress
# after "recovered"; chief: the new chief's first progress). stall: kill -> the next
# progress line (a worker's loss does not stop training). rewound: steps run again from
# the newest checkpoint ("≥": the chief was killed between two progress lines).
printf '%-3s %-6s %-9s %-7s %-10s %-8s %s\n' "#" "step" "killed" "healed" "recovery s" "stall s" "rewound steps"
for i in "${!F_KIND[@]}"; do
  printf '%-3s %-6s %-9s %-7s %-10s %-8s %s\n' "$((i + 1))" "${F_STEP[$i]}" "${F_TARGET[$i]}" "${F_HEALED[$i]}" \
    "${F_SECS[$i]}" "${F_STALL[$i]}" "${F_REDONE[$i]}"
done
echo
printf '%-7s %-9s %-9s %-17s %-15s %s\n' kind injected survived "recovery s (max)" "stall s (max)" "rewound steps"
for kind in worker ps chief; do
  python3 - "$kind" "${F_KIND[*]:-}" "${F_HEALED[*]:-}" "${F_SECS[*]:-}" "${F_STALL[*]:-}" "${F_REDONE[*]:-}" <<'EOF'
import sys
kind, kinds, healed, secs, stall, redone = sys.argv[1], *[a.split() for a in sys.argv[2:]]
rows = [i for i, k in enumerate(kinds) if k == kind]
ok = [i for i in rows if healed[i] == "yes"]
s = [float(secs[i]) for i in ok]
t = [float(stall[i]) for i in ok]
r = [redone[i] for i in ok]
lower = any(x.startswith("≥") for x in r)
total_redone = sum(int(x.lstrip("≥")) for x in r)
print(f"{kind:<7} {len(rows):<9} {len(ok):<9} {f'{sum(s):.1f} ({max(s, default=0):.1f})':<17} "
      f"{f'{sum(t):.1f} ({max(t, default=0):.1f})':<15} {'≥' if lower else ''}{total_redone}")
EOF
done
echo
if [ "$FAILED" = 0 ]; then echo "chaos: PASSED"; else echo "chaos: FAILED"; fi
exit "$FAILED"
