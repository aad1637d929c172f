"""Steady load on pstrain-serve for serve_swap_test.cc, on Python's standard library alone.

  serve_load.py HOST PORT MODEL IMAGES_IDX_GZ THREADS INSTANCES STOP_FILE OUT_JSON

THREADS threads, each on its own keep-alive connection, POST predict requests of
INSTANCES images (three different bodies, in turn) until STOP_FILE exists. Then writes to
OUT_JSON: the requests sent, those that failed (a status other than 200, or no answer),
the X-Pstrain-Model-Step headers that do not name exactly one version ("<base>/<step>"),
the steps answered, and "mixed": the (step, body) pairs answered with more than one set of
predictions (a batch scored with parameters of two versions would differ from one scored
with either).
"""
import gzip
import http.client
import json
import os
import re
import sys
import threading


def main():
    host, port, model, images, threads, instances, stop, out = sys.argv[1:9]
    port, threads, instances = int(port), int(threads), int(instances)
    with gzip.open(images, "rb") as f:
        raw = f.read()
    rows, cols = (int.from_bytes(raw[i:i + 4], "big") for i in (8, 12))
    size = rows * cols
    bodies = []
    for b in range(3):
        first = b * instances
        pixels = [list(raw[16 + i * size:16 + (i + 1) * size])
                  for i in range(first, first + instances)]
        bodies.append(json.dumps({"instances": pixels}))
    lock = threading.Lock()
    answers = {}  # (header, body) -> set of prediction texts
    totals = {"requests": 0, "failed": 0, "bad_headers": []}
    one_version = re.compile(r"^[0-9]+/[0-9]+$")

    def run():
        conn = http.client.HTTPConnection(host, port, timeout=60)
        n = 0
        last = False  # one request more once the stop file is there: it sees the last state
        while not last:
            last = os.path.exists(stop)
            b = n % len(bodies)
            n += 1
            try:
                conn.request("POST", "/v1/models/%s:predict" % model, body=bodies[b],
                             headers={"Content-Type": "application/json"})
                r = conn.getresponse()
                data = r.read().decode()
                header = r.getheader("X-Pstrain-Model-Step")
                ok = r.status == 200
            except (OSError, http.client.HTTPException) as e:
                ok, header, data = False, None, str(e)
                conn.close()
                conn = http.client.HTTPConnection(host, port, timeout=60)
            with lock:
                totals["requests"] += 1
                if not ok:
                    totals["failed"] += 1
                    print("serve_load: failed: %s %s" % (header, data[:200]), flush=True)
                    continue
                if header is None or not one_version.match(header):
                    totals["bad_headers"].append(header)
                    continue
                preds = json.dumps(json.loads(data)["predictions"])
                answers.setdefault((header, b), set()).add(preds)

    ts = [threading.Thread(target=run) for _ in range(threads)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    steps = sorted({int(h.split("/")[1]) for h, _ in answers})
    mixed = sorted("%s body %d" % (h, b) for (h, b), p in answers.items() if len(p) > 1)
    result = dict(totals, steps=steps, versions=sorted({h for h, _ in answers}), mixed=mixed)
    with open(out, "w") as f:
        json.dump(result, f)
    print("serve_load: %d requests, %d failed, %d bad headers, %d steps answered, %d mixed"
          % (totals["requests"], totals["failed"], len(totals["bad_headers"]), len(steps),
             len(mixed)), flush=True)


if __name__ == "__main__":
    main()
