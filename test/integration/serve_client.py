"""A pstrain-serve client on Python's standard library alone, for serve_test.cc.

  serve_client.py HOST PORT MODEL IMAGES_IDX_GZ COUNT OUT

Sends the first COUNT images of the IDX file (pixels 0..255) to MODEL as one row request
and as one columnar request, checks the status, metadata and error answers, and writes
the row answer's predictions to OUT one instance a line, each number exactly as the
server printed it (space-separated), as `pstrain predict` writes its scores. Exits 1
with a message on the first check that fails.
"""
import gzip
import http.client
import json
import sys


def fail(msg):
    print("serve_client: FAILED: " + msg, flush=True)
    sys.exit(1)


def call(conn, method, path, body=None):
    headers = {"Content-Type": "application/json"} if body is not None else {}
    conn.request(method, path, body=body, headers=headers)
    r = conn.getresponse()
    data = r.read().decode()
    return r.status, r.getheader("X-Pstrain-Model-Step"), data


def main():
    host, port, model, images, count, out = sys.argv[1:7]
    port, count = int(port), int(count)
    with gzip.open(images, "rb") as f:
        raw = f.read()
    n, rows, cols = (int.from_bytes(raw[i:i + 4], "big") for i in (4, 8, 12))
    size = rows * cols
    pixels = [list(raw[16 + i * size:16 + (i + 1) * size]) for i in range(min(n, count))]
    conn = http.client.HTTPConnection(host, port, timeout=60)

    status, step, body = call(conn, "GET", "/v1/models/" + model)
    if status != 200:
        fail("status: %d %s" % (status, body))
    st = json.loads(body)["model_version_status"][0]
    if st["state"] != "AVAILABLE" or step is None or step.split("/")[0] != st["version"]:
        fail("status: %s, header %s" % (body, step))
    version = st["version"]

    status, _, body = call(conn, "GET", "/v1/models/%s/versions/%s/metadata" % (model, version))
    sig = json.loads(body)["metadata"]["signature_def"]["signature_def"]["serving_default"]
    dims = [d["size"] for d in sig["inputs"]["image"]["tensor_shape"]["dim"]]
    if status != 200 or dims != ["-1", str(size)] or sig["inputs"]["image"]["dtype"] != "DT_FLOAT":
        fail("metadata: %d %s" % (status, body))

    status, _, body = call(conn, "POST", "/v1/models/%s:predict" % model,
                           json.dumps({"instances": pixels}))
    if status != 200:
        fail("row predict: %d %s" % (status, body[:300]))
    # parse_float=str keeps every number as the server printed it.
    preds = json.loads(body, parse_float=str)["predictions"]
    status, _, body = call(conn, "POST", "/v1/models/%s/versions/%s:predict" % (model, version),
                           json.dumps({"signature_name": "serving_default",
                                       "inputs": {"image": pixels}}))
    if status != 200 or json.loads(body, parse_float=str)["outputs"] != preds:
        fail("columnar predict differs from row predict: %d %s" % (status, body[:300]))

    for method, path, req, want in [
        ("POST", "/v1/models/%s:predict" % model, "{not json", 400),
        ("POST", "/v1/models/%s:predict" % model, json.dumps({"instances": [[1, 2]]}), 400),
        ("POST", "/v1/models/%s:predict" % model,
         json.dumps({"instances": [[0] * size], "inputs": [[0] * size]}), 400),
        ("POST", "/v1/models/nope:predict", json.dumps({"instances": [[0] * size]}), 404),
        ("GET", "/v1/models/%s/versions/999999" % model, None, 404),
    ]:
        status, step, body = call(conn, method, path, req)
        if status != want or "error" not in json.loads(body) or step is None:
            fail("%s %s: want %d, got %d %s" % (method, path, want, status, body))

    with open(out, "w") as f:
        for p in preds:
            f.write(" ".join(p if isinstance(p, list) else [p]) + "\n")
    print("serve_client: ok: %d predictions, version %s" % (len(preds), version), flush=True)


main()
