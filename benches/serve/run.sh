#!/usr/bin/env bash
# Throughput and latency of `hako serve` for the bundled greet example, through the operator API
# (POST /v1/packages/greet/call) and MCP Streamable HTTP (POST /mcp/greet), measured with wrk
# (Debian package `wrk`) on loopback. Builds hako in release, uploads greet into a temporary
# store, starts the server, warms it up, then runs wrk once per endpoint and prints calls/s and
# the p50/p99 latencies wrk measured, and the server's own outcome counters.
#
#   benches/serve/run.sh [DURATION_S] [CONNECTIONS] [WRK_THREADS] [-- extra hako serve flags]
#
# The load generator runs on the same machine as the server and competes with it for cores;
# say so when reporting the figures.
set -euo pipefail
cd "$(dirname "$0")/../.."

duration="${1:-10}"
connections="${2:-32}"
threads="${3:-1}"
shift $(( $# < 3 ? $# : 3 ))
[[ "${1:-}" == "--" ]] && shift
extra=("$@")

command -v wrk >/dev/null || { echo "wrk is not installed (apt-get install -y wrk)" >&2; exit 1; }
cargo build --release --quiet
target="${CARGO_TARGET_DIR:-target}"
hako="$target/release/hako"

store="$(mktemp -d)"
log="$(mktemp)"
cleanup() { [[ -n "${server:-}" ]] && kill "$server" 2>/dev/null; wait 2>/dev/null; rm -rf "$store" "$log"; }
trap cleanup EXIT

"$hako" upload examples/greet --store "$store" >/dev/null
"$hako" serve --store "$store" --listen 127.0.0.1:0 "${extra[@]}" >"$log" 2>/dev/null &
server=$!
for _ in $(seq 100); do grep -q listening "$log" && break; sleep 0.1; done
base="$(sed -n 's/^hako: listening on //p' "$log")"
[[ -n "$base" ]] || { echo "hako serve did not start" >&2; exit 1; }

api_body='{"tool":"greet","arguments":{"name":"Ada"}}'
mcp_body='{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"greet","arguments":{"name":"Ada"}}}'

echo "machine: $(nproc) cores, $(uname -srm); hako serve ${extra[*]:-(defaults)}; wrk -t$threads -c$connections -d${duration}s"
curl -sf -X POST -H 'content-type: application/json' -d "$api_body" "$base/v1/packages/greet/call" >/dev/null
BODY="$api_body" wrk -t"$threads" -c"$connections" -d2s -s benches/serve/post.lua "$base/v1/packages/greet/call" >/dev/null

run() {
  local name="$1" path="$2" body="$3"
  local out
  out="$(BODY="$body" wrk -t"$threads" -c"$connections" -d"${duration}s" --latency -s benches/serve/post.lua "$base$path")"
  local rps p50 p99 errors
  rps="$(awk '/^Requests\/sec:/ {print $2}' <<<"$out")"
  p50="$(awk '$1 == "50%" {print $2}' <<<"$out")"
  p99="$(awk '$1 == "99%" {print $2}' <<<"$out")"
  errors="$(awk '/Non-2xx or 3xx responses:/ {print $5}' <<<"$out")"
  printf '%-28s %10s calls/s   p50 %8s   p99 %8s   non-2xx %s\n' "$name" "$rps" "$p50" "$p99" "${errors:-0}"
}

run "POST /v1/packages/greet/call" /v1/packages/greet/call "$api_body"
run "POST /mcp/greet" /mcp/greet "$mcp_body"
curl -sf "$base/metrics" | grep -E '^hako_calls_(total|rejected_total)' || true
