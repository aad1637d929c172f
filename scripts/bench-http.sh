#!/usr/bin/env bash
# The HTTP server (libps/http: /metrics, pstrain-serve) over 127.0.0.1
# (test/bench/http_bench.cc): small GETs on one and on several keep-alive connections, a
# new connection per request, and a big POST body echoed back. Builds what is needed.
#
#   scripts/bench-http.sh [--threads 2] [--seconds 2] [--connections 4] [--body-mib 4]
set -euo pipefail
source "$(dirname "$0")/bench-lib.sh"

bench_build test/bench/bench_http
echo "bench-http: $(git rev-parse --short HEAD 2>/dev/null || echo '?')"
"$BUILD/test/bench/bench_http" "$@"
