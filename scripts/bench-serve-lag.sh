#!/usr/bin/env bash
# How soon pstrain-serve serves a new checkpoint, and its peak memory while full checkpoints
# are swapped. A writer (test/bench/serve_bench.cc "model": one ps's checkpointer, as a
# training job's chief commits them) changes 1 % of the rows of configs/job-ctr-emb.json's
# model (35 MiB) and commits a delta every --delta-seconds, and a full checkpoint every
# --full-seconds; pstrain-serve follows the model dir (--poll-seconds, --keep-versions 2)
# while a client posts a 1-instance request every 20 ms. Per delta: the lag from its
# commit time (its MANIFEST's unix_time) to the first response whose X-Pstrain-Model-Step
# names it (BASE/STEP with STEP the delta's step); the median and the max over the deltas.
# The server's peak RSS over the run (VmHWM, reset through /proc/PID/clear_refs after ckpt-0
# is loaded) beside one model's bytes (ckpt-0 on disk) and the RSS before.
#
#   scripts/bench-serve-lag.sh [--seconds 40] [--delta-seconds 2] [--full-seconds 10]
#                              [--poll-seconds 1]
set -euo pipefail
source "$(dirname "$0")/bench-lib.sh"

RUN_SECONDS=40
DELTA_SECONDS=2
FULL_SECONDS=10
POLL_SECONDS=1
while [ $# -gt 0 ]; do
  case "$1" in
    --seconds) RUN_SECONDS=$2; shift 2 ;;
    --delta-seconds) DELTA_SECONDS=$2; shift 2 ;;
    --full-seconds) FULL_SECONDS=$2; shift 2 ;;
    --poll-seconds) POLL_SECONDS=$2; shift 2 ;;
    *) echo "bench-serve-lag: unknown argument $1" >&2; exit 2 ;;
  esac
done

bench_build daemons/serve/pstrain-serve test/bench/bench_serve
echo "bench-serve-lag: $(git rev-parse --short HEAD 2>/dev/null || echo '?'); load average $(cut -d' ' -f1-3 /proc/loadavg) ($(nproc) cores)"
TMP=$(mktemp -d)
SERVER=
WRITER=
cleanup() {
  stop_pid "$SERVER"
  stop_pid "$WRITER"
  if [ -n "${KEEP_TMP:-}" ]; then echo "kept $TMP"; else rm -rf "$TMP"; fi
}
trap cleanup EXIT
JOB=configs/job-ctr-emb.json
DIR=$TMP/model
"$BUILD/test/bench/bench_serve" model "$JOB" "$DIR" "$RUN_SECONDS" 0.01 "$DELTA_SECONDS" \
  "$FULL_SECONDS" "$TMP/go" > "$TMP/writer.log" 2>&1 &
WRITER=$!
for _ in $(seq 3000); do grep -q "ckpt-0 committed" "$TMP/writer.log" && break; sleep 0.1; done
"$BUILD/test/bench/bench_serve" body "$JOB" 1 "$TMP/body.json"
"$BUILD/daemons/serve/pstrain-serve" --model "m=$DIR" --port 0 --poll-seconds "$POLL_SECONDS" \
  --keep-versions 2 --threads 2 > "$TMP/serve.log" 2>&1 &
SERVER=$!
for _ in $(seq 600); do grep -q "ready: 1 model" "$TMP/serve.log" && break; sleep 0.1; done
PORT=$(sed -nE 's|.*pstrain-serve: serving at http://[^ ]*:([0-9]+).*|\1|p' "$TMP/serve.log" | head -1)
[ -n "$PORT" ] || { cat "$TMP/serve.log"; exit 1; }
MODEL_MIB=$(du -sm "$DIR/ckpt-0" | cut -f1)
RSS_BEFORE=$(awk '/^VmRSS:/ {print $2}' "/proc/$SERVER/status")
echo 5 > "/proc/$SERVER/clear_refs"
# The client: from its first answer (then the writer starts) until the writer ends (and
# the last commit's poll), the first time each step answers.
python3 - "$PORT" "$TMP/body.json" "$TMP/seen.txt" "$WRITER" "$POLL_SECONDS" "$TMP/client-ready" <<'PY' &
import http.client, os, sys, time
port, body_file, out, writer, poll = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4]), float(sys.argv[5])
body = open(body_file).read()
conn = http.client.HTTPConnection("127.0.0.1", int(port))
seen = {}
end = None
while end is None or time.time() < end:
    conn.request("POST", "/v1/models/m:predict", body, {"Content-Type": "application/json"})
    r = conn.getresponse()
    r.read()
    now = time.time()
    if r.status != 200:
        sys.exit("bench-serve-lag: status %d" % r.status)
    step = int(r.getheader("X-Pstrain-Model-Step").split("/")[1])
    seen.setdefault(step, now)
    if not os.path.exists(sys.argv[6]):
        open(sys.argv[6], "w").close()
    if end is None and not os.path.exists("/proc/%d" % writer):
        end = now + 2 * poll + 3  # the last commit's poll, and its load
    time.sleep(0.02)
with open(out, "w") as f:
    for step, t in sorted(seen.items()):
        f.write("%d %.3f\n" % (step, t))
PY
CLIENT=$!
for _ in $(seq 1200); do [ -e "$TMP/client-ready" ] && break; sleep 0.1; done
touch "$TMP/go"
wait "$CLIENT"
wait "$WRITER" || { cat "$TMP/writer.log"; exit 1; }
WRITER=
HWM=$(awk '/^VmHWM:/ {print $2}' "/proc/$SERVER/status")
FULLS=$(grep -c "full checkpoint" "$TMP/writer.log" || true)
python3 - "$DIR" "$TMP/seen.txt" <<'PY'
import json, os, statistics, sys
model_dir, seen_file = sys.argv[1], sys.argv[2]
seen = {int(a): float(b) for a, b in (l.split() for l in open(seen_file))}
lags, full_lags, missed = [], [], []
manifests = []  # ckpt-N/MANIFEST and ckpt-N/delta-M/MANIFEST
for name in os.listdir(model_dir):
    if name.startswith("ckpt-") and name != "ckpt-0":
        manifests.append(os.path.join(model_dir, name, "MANIFEST"))
    if name.startswith("ckpt-"):
        for d in os.listdir(os.path.join(model_dir, name)):
            if d.startswith("delta-"):
                manifests.append(os.path.join(model_dir, name, d, "MANIFEST"))
for path in manifests:
    if not os.path.exists(path):
        continue  # removed by the writer's cleanup: not committed any more
    m = json.load(open(path))
    step = m["global_step"]
    if step not in seen:
        missed.append(step)  # never the state that answered (a newer one came first)
        continue
    (lags if m.get("base") is not None else full_lags).append(seen[step] - m["unix_time"])
def line(what, xs):
    if xs:
        print("bench-serve-lag: %s: %d served, lag median %.2f s, max %.2f s" %
              (what, len(xs), statistics.median(xs), max(xs)))
line("deltas", lags)
line("full checkpoints", full_lags)
print("bench-serve-lag: %d checkpoints never answered (a newer one was served first): %s" %
      (len(missed), sorted(missed)))
PY
echo "bench-serve-lag: server RSS before $(( RSS_BEFORE / 1024 )) MiB, peak $(( HWM / 1024 )) MiB over $FULLS full checkpoint swaps with --keep-versions 2 (one model: ckpt-0, $MODEL_MIB MiB on disk)"
echo "bench-serve-lag: load average at the end $(cut -d' ' -f1-3 /proc/loadavg)"
