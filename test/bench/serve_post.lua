-- wrk script for scripts/bench-serve.sh: POSTs the body in $BODY_FILE to $PREDICT_PATH.
-- With $DELAY_MS set, each connection waits that long before each request (a paced,
-- closed-loop load: at most connections * 1000 / DELAY_MS requests a second).
local f = assert(io.open(os.getenv("BODY_FILE"), "r"))
wrk.body = f:read("*a")
f:close()
wrk.method = "POST"
wrk.path = os.getenv("PREDICT_PATH")
wrk.headers["Content-Type"] = "application/json"
local delay_ms = tonumber(os.getenv("DELAY_MS") or "0")
if delay_ms > 0 then
  function delay()
    return delay_ms
  end
end
function done(summary, latency, requests)
  io.write(string.format("wrk-summary: requests=%d non2xx=%d errors=%d p50_us=%d p99_us=%d\n",
    summary.requests, summary.errors.status, summary.errors.connect + summary.errors.read +
    summary.errors.write + summary.errors.timeout, latency:percentile(50), latency:percentile(99)))
end
