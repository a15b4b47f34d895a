#!/usr/bin/env bash
# What `hako serve` adds to a call, measured in one run: for each package, the in-process calls/s
# of `hako bench` (the engine and compiler the server runs, as many threads as it has guest
# threads), `GET /healthz` under wrk (HTTP alone), and wrk on the two ways to call a tool: the
# operator API (POST /v1/packages/NAME/call) and MCP Streamable HTTP (POST /mcp/NAME). A server
# whose only costs were HTTP and the call would reach the composed ceiling
# 1 / (1/in-process + 1/healthz).
#
# The four are measured in ROUNDS interleaved rounds (healthz, in process, API, MCP, then
# again), so that a slow spell of a shared machine falls on all four; each round's call rates
# are divided by that round's ceiling, and the medians over the rounds are printed, with wrk's p50
# and p99 of the median round. Beside the rates, the server's CPU time per request (user +
# system, from /proc) is printed for each endpoint: what a call costs the server over what a
# /healthz request does, against what the call costs in process (threads / calls/s), is what
# serving adds, and moves far less than a rate with the load of the machine.
#
#   [HAKO=BINARY] [SERVE_ARGS="--ready-instances 0 …"] [ROUNDS=5] [PIN=1] benches/serve/run.sh
#       [SECONDS_PER_ROUND] [CONNECTIONS] [WRK_THREADS] [-- PACKAGE_DIR...]
#
# SERVE_ARGS are given to hako serve after its own flags (to compare its settings), and their
# --engine and --compiler to hako upload too. PIN=1 (on a
# machine of two cores or more) measures hako alone on a core: the server (--workers 1
# --http-threads 1) and the in-process bench (one thread) on CPU 0, wrk on CPU 1.
#
# Packages default to the greet example and benches/packages/data-8m (its module is built by
# benches/packages/build.sh); a package's tool and arguments come from its bench.json. wrk
# (Debian package `wrk`) runs on the same machine as the server and competes with it for
# cores; say so when reporting the figures.
set -euo pipefail
cd "$(dirname "$0")/../.."

duration="${1:-4}"
rounds="${ROUNDS:-5}"
connections="${2:-32}"
threads="${3:-1}"
shift $(( $# < 3 ? $# : 3 ))
[[ "${1:-}" == "--" ]] && shift
packages=("$@")
[[ ${#packages[@]} -gt 0 ]] || packages=(examples/greet benches/packages/data-8m)

# shellcheck source=benches/serve/common.sh
. benches/serve/common.sh
need wrk jq
hako="$(hako_binary)"
workers="$(nproc)"
pinned_server=""
pinned_wrk=""
pinned_args=""
if [[ "${PIN:-0}" == 1 && "$(nproc)" -ge 2 ]]; then
  workers=1
  pinned_server="taskset -c 0"
  pinned_wrk="taskset -c 1"
  pinned_args="--http-threads 1"
fi

store="$(mktemp -d)"
log="$(mktemp)"
cleanup() { [[ -n "${server:-}" ]] && kill "$server" 2>/dev/null; wait 2>/dev/null; rm -rf "$store" "$log"; }
trap cleanup EXIT

# wrk's requests/s, p50 and p99, non-2xx count, and the server's CPU µs per request for one
# endpoint, as one line of five fields.
measure() {
  local path="$1" body="$2" out before after
  before="$(cpu_ticks)"
  if [[ -n "$body" ]]; then
    # shellcheck disable=SC2086 # a command prefix, or nothing
    out="$(BODY="$body" $pinned_wrk wrk -t"$threads" -c"$connections" -d"${duration}s" --latency -s benches/serve/post.lua "$base$path")"
  else
    # shellcheck disable=SC2086
    out="$($pinned_wrk wrk -t"$threads" -c"$connections" -d"${duration}s" --latency "$base$path")"
  fi
  after="$(cpu_ticks)"
  awk -v ticks="$((after - before))" -v hz="$(getconf CLK_TCK)" '
       /^Requests\/sec:/ {rps=$2} $1 == "50%" {p50=$2} $1 == "99%" {p99=$2}
       /requests in/ {n=$1}
       /Non-2xx or 3xx responses:/ {bad=$5}
       END {printf "%s %s %s %s %.2f\n", rps, p50, p99, (bad == "" ? 0 : bad), ticks / hz * 1e6 / n}' <<<"$out"
}

# The server's CPU time so far (user + system), in clock ticks.
cpu_ticks() {
  awk '{print $14 + $15}' "/proc/$server/stat"
}

# The median of the numbers given one per line.
median() {
  sort -g | awk '{v[NR] = $1} END {print (NR % 2 ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2)}'
}

echo "machine: $(nproc) cores, $(uname -srm); hako serve --workers $workers ${pinned_args:+$pinned_args }${SERVE_ARGS:+$SERVE_ARGS }(wasmer, cranelift); wrk -t$threads -c$connections $([[ -n "$pinned_wrk" ]] && echo "on CPU 1, the server and the in-process bench on CPU 0" || echo "on the same cores"), $rounds rounds of ${duration}s per endpoint"
for package in "${packages[@]}"; do
  [[ -f "$package/module.wasm" ]] || { echo "$package has no module.wasm (benches/packages/build.sh builds the corpus)" >&2; exit 1; }
  name="$(jq -r .name "$package/subako-package.json")"
  tool="$(jq -r .tool "$package/bench.json")"
  args="$(jq -c .args "$package/bench.json")"

  # The in-process calls/s of one run of hako bench (on the server's core when pinned).
  in_process() {
    # shellcheck disable=SC2086
    $pinned_server "$hako" bench "$package" --engines wasmer-cranelift --tool "$tool" --args "$args" \
      --iterations 200 --threads "$workers" --json 2>/dev/null |
      jq -r '.. | objects | select(has("calls_per_s")) | .calls_per_s' | head -1
  }

  # shellcheck disable=SC2046 # a list of flags
  "$hako" upload "$package" --store "$store" $(upload_args) >/dev/null
  # shellcheck disable=SC2086 # SERVE_ARGS is a list of flags
  $pinned_server "$hako" serve --store "$store" --listen 127.0.0.1:0 --workers "$workers" $pinned_args ${SERVE_ARGS:-} >"$log" 2>/dev/null &
  server=$!
  for _ in $(seq 100); do grep -q listening "$log" && break; sleep 0.1; done
  base="$(sed -n 's/^hako: listening on //p' "$log")"
  [[ -n "$base" ]] || { echo "hako serve did not start" >&2; exit 1; }

  api_body="$(jq -cn --arg tool "$tool" --argjson args "$args" '{tool: $tool, arguments: $args}')"
  mcp_body="$(jq -cn --arg tool "$tool" --argjson args "$args" \
    '{jsonrpc: "2.0", id: 1, method: "tools/call", params: {name: $tool, arguments: $args}}')"
  curl -sf -X POST -H 'content-type: application/json' -d "$api_body" "$base/v1/packages/$name/call" >/dev/null
  BODY="$api_body" wrk -t"$threads" -c"$connections" -d2s -s benches/serve/post.lua "$base/v1/packages/$name/call" >/dev/null

  rows="$(mktemp)"
  for round in $(seq "$rounds"); do
    read -r health_rps health_p50 health_p99 health_bad health_cpu < <(measure /healthz "")
    echo "$round healthz $health_rps $health_p50 $health_p99 $health_bad $health_cpu 1" >>"$rows"
    # The machine's speed moves from one spell to the next (on a shared VM by a fifth and
    # more): each round's ceiling is of the in-process figure and /healthz measured in it.
    inproc="$(in_process)"
    echo "$round inproc $inproc - - 0 - 1" >>"$rows"
    ceiling="$(awk -v a="$inproc" -v b="$health_rps" 'BEGIN {print 1 / (1 / a + 1 / b)}')"
    for endpoint in "api|/v1/packages/$name/call|$api_body" "mcp|/mcp/$name|$mcp_body"; do
      IFS='|' read -r label path body <<<"$endpoint"
      read -r rps p50 p99 bad cpu < <(measure "$path" "$body")
      echo "$round $label $rps $p50 $p99 $bad $cpu $(awk -v a="$rps" -v c="$ceiling" 'BEGIN {print a / c}')" >>"$rows"
    done
  done
  # Columns of $rows: round, endpoint, rate, p50, p99, non-2xx, CPU µs per request, share.
  column() { awk -v e="$1" -v c="$2" '$2 == e {print $c}' "$rows" | median; }
  # The round whose rate is the median's (for its latencies).
  middle() { awk -v e="$1" '$2 == e' "$rows" | sort -k3,3g | sed -n "$(( (rounds + 1) / 2 ))p"; }
  inproc="$(column inproc 3)"
  inproc_cpu="$(awk -v a="$inproc" -v t="$workers" 'BEGIN {printf "%.2f", t / a * 1e6}')"
  health_cpu="$(column healthz 7)"
  health_rps="$(column healthz 3)"
  echo
  # The arguments as far as a line shows them (the Go package's are a 13 KB document).
  shown="$args"
  (( ${#shown} > 80 )) && shown="${shown:0:77}..."
  echo "$name ($tool $shown)"
  printf '  %-30s %10.0f calls/s                                   CPU %6.2f µs/call (threads / calls/s)\n' "in process (hako bench, median)" "$inproc" "$inproc_cpu"
  printf '  %-30s %10.0f req/s     p50 %8s   p99 %8s   CPU %6.2f µs/req\n' "GET /healthz" "$health_rps" "$(middle healthz | cut -d' ' -f4)" "$(middle healthz | cut -d' ' -f5)" "$health_cpu"
  printf '  %-30s %10.0f calls/s (of the medians; each round is divided by its own)\n' "composed ceiling" "$(awk -v a="$inproc" -v b="$health_rps" 'BEGIN {print 1 / (1 / a + 1 / b)}')"
  for endpoint in "api|POST /v1/packages/$name/call" "mcp|POST /mcp/$name"; do
    label="${endpoint%%|*}"
    cpu="$(column "$label" 7)"
    read -r _ _ _ p50 p99 _ _ _ < <(middle "$label")
    printf '  %-30s %10.0f calls/s   p50 %8s   p99 %8s   CPU %6.2f µs/call, %5.2f over HTTP and the call   %.2f of the ceiling (median of %s rounds)\n' \
      "${endpoint#*|}" "$(column "$label" 3)" "$p50" "$p99" "$cpu" \
      "$(awk -v c="$cpu" -v h="$health_cpu" -v i="$inproc_cpu" 'BEGIN {print c - h - i}')" \
      "$(column "$label" 8)" "$rounds"
  done
  echo "  non-2xx answers: $(awk '{n += $6} END {print n}' "$rows")"
  rm -f "$rows"
  curl -sf "$base/metrics" | grep -E '^hako_calls_(total|rejected_total|ready_total)' | sed 's/^/  /' || true
  kill "$server" 2>/dev/null; wait "$server" 2>/dev/null || true
  server=
done
