#!/usr/bin/env bash
# What `hako serve` adds to a call, measured in one run: for each package, the in-process calls/s
# of `hako bench` (the engine and compiler the server runs, as many threads as it has guest
# threads), `GET /healthz` under wrk (HTTP alone), and wrk on the two ways to call a tool: the
# operator API (POST /v1/packages/NAME/call) and MCP Streamable HTTP (POST /mcp/NAME). A server
# whose only costs were HTTP and the call would reach the composed ceiling
# 1 / (1/in-process + 1/healthz); each endpoint's calls/s is printed with its share of it, with
# wrk's p50/p99 and the server's outcome counters.
#
#   [HAKO=BINARY] [SERVE_ARGS="--ready-instances 0 …"] benches/serve/run.sh [DURATION_S]
#       [CONNECTIONS] [WRK_THREADS] [-- PACKAGE_DIR...]
#
# SERVE_ARGS are given to hako serve after its own flags (to compare its settings).
#
# Packages default to the greet example and benches/packages/data-8m (its module is built by
# benches/packages/build.sh); a package's tool and arguments come from its bench.json. wrk
# (Debian package `wrk`) runs on the same machine as the server and competes with it for
# cores; say so when reporting the figures.
set -euo pipefail
cd "$(dirname "$0")/../.."

duration="${1:-10}"
connections="${2:-32}"
threads="${3:-1}"
shift $(( $# < 3 ? $# : 3 ))
[[ "${1:-}" == "--" ]] && shift
packages=("$@")
[[ ${#packages[@]} -gt 0 ]] || packages=(examples/greet benches/packages/data-8m)

command -v wrk >/dev/null || { echo "wrk is not installed (apt-get install -y wrk)" >&2; exit 1; }
command -v jq >/dev/null || { echo "jq is not installed (apt-get install -y jq)" >&2; exit 1; }
# $HAKO names a hako binary to measure instead of building one (release, default features).
hako="${HAKO:-}"
if [[ -z "$hako" ]]; then
  cargo build --release --quiet
  hako="${CARGO_TARGET_DIR:-target}/release/hako"
fi
workers="$(nproc)"

store="$(mktemp -d)"
log="$(mktemp)"
cleanup() { [[ -n "${server:-}" ]] && kill "$server" 2>/dev/null; wait 2>/dev/null; rm -rf "$store" "$log"; }
trap cleanup EXIT

# wrk's requests/s, p50 and p99, and non-2xx count for one endpoint, as one line of four fields.
measure() {
  local path="$1" body="$2" out
  if [[ -n "$body" ]]; then
    out="$(BODY="$body" wrk -t"$threads" -c"$connections" -d"${duration}s" --latency -s benches/serve/post.lua "$base$path")"
  else
    out="$(wrk -t"$threads" -c"$connections" -d"${duration}s" --latency "$base$path")"
  fi
  awk '/^Requests\/sec:/ {rps=$2} $1 == "50%" {p50=$2} $1 == "99%" {p99=$2}
       /Non-2xx or 3xx responses:/ {bad=$5}
       END {printf "%s %s %s %s\n", rps, p50, p99, (bad == "" ? 0 : bad)}' <<<"$out"
}

echo "machine: $(nproc) cores, $(uname -srm); hako serve --workers $workers ${SERVE_ARGS:+$SERVE_ARGS }(wasmer, cranelift); wrk -t$threads -c$connections -d${duration}s on the same cores"
for package in "${packages[@]}"; do
  [[ -f "$package/module.wasm" ]] || { echo "$package has no module.wasm (benches/packages/build.sh builds the corpus)" >&2; exit 1; }
  name="$(jq -r .name "$package/subako-package.json")"
  tool="$(jq -r .tool "$package/bench.json")"
  args="$(jq -c .args "$package/bench.json")"

  # The in-process figure moves between runs of hako bench; the median of five is the one used.
  inproc="$(for _ in 1 2 3 4 5; do
    "$hako" bench "$package" --engines wasmer-cranelift --tool "$tool" --args "$args" \
      --iterations 200 --threads "$workers" --json 2>/dev/null |
      jq -r '.. | objects | select(has("calls_per_s")) | .calls_per_s' | head -1
  done | sort -g | sed -n 3p)"

  "$hako" upload "$package" --store "$store" >/dev/null
  # shellcheck disable=SC2086 # SERVE_ARGS is a list of flags
  "$hako" serve --store "$store" --listen 127.0.0.1:0 --workers "$workers" ${SERVE_ARGS:-} >"$log" 2>/dev/null &
  server=$!
  for _ in $(seq 100); do grep -q listening "$log" && break; sleep 0.1; done
  base="$(sed -n 's/^hako: listening on //p' "$log")"
  [[ -n "$base" ]] || { echo "hako serve did not start" >&2; exit 1; }

  api_body="$(jq -cn --arg tool "$tool" --argjson args "$args" '{tool: $tool, arguments: $args}')"
  mcp_body="$(jq -cn --arg tool "$tool" --argjson args "$args" \
    '{jsonrpc: "2.0", id: 1, method: "tools/call", params: {name: $tool, arguments: $args}}')"
  curl -sf -X POST -H 'content-type: application/json' -d "$api_body" "$base/v1/packages/$name/call" >/dev/null
  BODY="$api_body" wrk -t"$threads" -c"$connections" -d2s -s benches/serve/post.lua "$base/v1/packages/$name/call" >/dev/null

  read -r health_rps health_p50 health_p99 health_bad < <(measure /healthz "")
  ceiling="$(awk -v a="$inproc" -v b="$health_rps" 'BEGIN {printf "%.0f", 1 / (1 / a + 1 / b)}')"
  echo
  echo "$name ($tool $args)"
  printf '  %-34s %10.0f calls/s\n' "in process (hako bench)" "$inproc"
  printf '  %-34s %10.0f req/s     p50 %8s   p99 %8s   non-2xx %s\n' "GET /healthz" "$health_rps" "$health_p50" "$health_p99" "$health_bad"
  printf '  %-34s %10s calls/s\n' "composed ceiling" "$ceiling"
  for endpoint in "/v1/packages/$name/call|$api_body" "/mcp/$name|$mcp_body"; do
    path="${endpoint%%|*}"
    read -r rps p50 p99 bad < <(measure "$path" "${endpoint#*|}")
    printf '  %-34s %10.0f calls/s   p50 %8s   p99 %8s   non-2xx %s   %.2f of the ceiling\n' \
      "POST $path" "$rps" "$p50" "$p99" "$bad" "$(awk -v a="$rps" -v c="$ceiling" 'BEGIN {print a / c}')"
  done
  curl -sf "$base/metrics" | grep -E '^hako_calls_(total|rejected_total|ready_total)' | sed 's/^/  /' || true
  kill "$server" 2>/dev/null; wait "$server" 2>/dev/null || true
  server=
done
