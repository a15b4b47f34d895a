#!/usr/bin/env bash
# hako serve under mixed load, with its defaults: calls that wait (a 200 ms sleep; a 200 ms wait
# on an HTTPS answer through subako_http, from a local TLS server), calls that compute until
# their time limit, and quick calls (greet) beside them, each kind from its own closed-loop
# clients (wrk, one per kind, all at once). Prints calls/s, p50 and p99 per kind and scenario,
# and the server's resident memory.
#
#   [HAKO=BINARY] [SERVE_ARGS="…"] [PIN=1] benches/serve/mixed.sh [SECONDS_PER_SCENARIO]
#
# The packages: examples/greet, and benches/serve/waits (built by benches/packages/build.sh)
# uploaded three times, as `sleeper`, `fetcher` and `spinner`, so that each kind is a package
# of its own. PIN=1 runs the server on CPU 0 and the clients on the others (taskset); without
# it everything shares the machine's cores. wrk and the TLS server (python3, openssl) run on
# the same machine: say so when reporting the figures. SERVE_ARGS are given to hako serve, and
# their --engine and --compiler to hako upload too.
set -euo pipefail
cd "$(dirname "$0")/../.."

duration="${1:-8}"
# shellcheck source=benches/serve/common.sh
. benches/serve/common.sh
need wrk openssl
[[ -f benches/serve/waits/module.wasm ]] ||
  { echo "benches/serve/waits has no module.wasm (benches/packages/build.sh builds it)" >&2; exit 1; }
hako="$(hako_binary)"
# 1,000 connections of wrk, and as many of the server: as many descriptors as allowed.
ulimit -n "$(ulimit -Hn)"

server_cpus=""
client_cpus=""
if [[ "${PIN:-0}" == 1 && "$(nproc)" -ge 2 ]]; then
  server_cpus="taskset -c 0"
  client_cpus="taskset -c 1-$(( $(nproc) - 1 ))"
fi

work="$(mktemp -d)"
cleanup() {
  [[ -n "${server:-}" ]] && kill "$server" 2>/dev/null
  [[ -n "${tls:-}" ]] && kill "$tls" 2>/dev/null
  wait 2>/dev/null
  rm -rf "$work"
}
trap cleanup EXIT

# The TLS server that answers /delay/MS after MS milliseconds.
mkdir "$work/tls"
$client_cpus python3 benches/serve/slow_https.py "$work/tls" >"$work/tls/port" &
tls=$!
for _ in $(seq 100); do [[ -s "$work/tls/port" ]] && break; sleep 0.1; done
port="$(cat "$work/tls/port")"
[[ -n "$port" ]] || { echo "the TLS server did not start" >&2; exit 1; }

store="$work/store"
# shellcheck disable=SC2046 # a list of flags
"$hako" upload examples/greet --store "$store" $(upload_args) >/dev/null
for name in sleeper fetcher spinner; do
  mkdir "$work/$name"
  cp benches/serve/waits/module.wasm "$work/$name/"
  sed "s/\"name\": \"waits\"/\"name\": \"$name\"/" benches/serve/waits/subako-package.json \
    >"$work/$name/subako-package.json"
  # shellcheck disable=SC2046 # a list of flags
  "$hako" upload "$work/$name" --store "$store" $(upload_args) >/dev/null
done
cat >"$work/policy.toml" <<POLICY
[tls]
extra_ca_files = ["$work/tls/ca.pem"]

[packages.fetcher]
allow_hosts = ["localhost:$port"]
trust_private = ["localhost"]
POLICY

# shellcheck disable=SC2086 # SERVE_ARGS and the CPU lists are lists of words
$server_cpus "$hako" serve --store "$store" --listen 127.0.0.1:0 --policy "$work/policy.toml" \
  ${SERVE_ARGS:-} >"$work/log" 2>"$work/stderr" &
server=$!
for _ in $(seq 100); do grep -q listening "$work/log" && break; sleep 0.1; done
base="$(sed -n 's/^hako: listening on //p' "$work/log")"
[[ -n "$base" ]] || { cat "$work/stderr" >&2; echo "hako serve did not start" >&2; exit 1; }

greet='{"tool":"greet","arguments":{"name":"Ada"}}'
sleep_body='{"tool":"sleep","arguments":{"ms":200}}'
fetch_body="{\"tool\":\"fetch\",\"arguments\":{\"url\":\"https://localhost:$port/delay/200\"}}"
spin_body='{"tool":"spin","arguments":{"ms":100000},"limits":{"timeout_ms":1000}}'

# Each call once, to load its module and to check that it answers.
for call in "greet|$greet" "sleeper|$sleep_body" "fetcher|$fetch_body"; do
  answer="$(curl -sf -X POST -d "${call#*|}" "$base/v1/packages/${call%%|*}/call")"
  grep -q '"outcome":"ok"' <<<"$answer" || { echo "${call%%|*} does not answer: $answer" >&2; exit 1; }
done

# Starts wrk with CONNECTIONS clients calling PACKAGE with BODY, its output to FILE.
load() {
  local connections="$1" package="$2" body="$3" file="$4"
  # shellcheck disable=SC2086
  BODY="$body" $client_cpus wrk -t1 -c"$connections" -d"${duration}s" --timeout 30s --latency \
    -s benches/serve/post.lua "$base/v1/packages/$package/call" >"$file" &
}

# One line of a wrk output: calls answered 200 a second, p50, p99 (of every answer), and
# answers that were not 2xx (503s past the bound on calls in flight).
summary() {
  awk -v seconds="$duration" '
       / requests in / {n=$1} $1 == "50%" {p50=$2} $1 == "99%" {p99=$2}
       /Non-2xx or 3xx responses:/ {bad=$5} /Socket errors/ {errors=$0}
       END {printf "%10.1f calls/s   p50 %9s   p99 %9s   non-2xx %s%s\n", (n - bad) / seconds,
            p50, p99, (bad == "" ? 0 : bad), (errors == "" ? "" : "   " errors)}' "$1"
}

rss() {
  awk '/^VmRSS/ {rss=$2} /^VmHWM/ {hwm=$2} END {printf "RSS %.0f MB (peak %.0f MB)", rss/1024, hwm/1024}' \
    "/proc/$server/status"
}

echo "machine: $(nproc) cores, $(uname -srm); hako serve ${SERVE_ARGS:-with its defaults}; ${duration}s a scenario;" \
  "${server_cpus:+server on CPU 0, clients on the others}${server_cpus:-server and clients on the same cores}"
scenario() {
  local title="$1"; shift
  echo
  echo "$title"
  local kinds=()
  while (($#)); do
    load "$1" "$2" "$3" "$work/out-$2-$1"
    kinds+=("$2-$1")
    shift 3
  done
  sleep $(( duration / 2 ))
  local during; during="$(rss)"
  wait $(jobs -p | grep -vx "$server" | grep -vx "$tls") 2>/dev/null || true
  for kind in "${kinds[@]}"; do
    printf '  %-16s %s\n' "$kind" "$(summary "$work/out-$kind")"
  done
  echo "  server: $during mid-run"
}

scenario "greet alone (4 callers)" 4 greet "$greet"
scenario "64 callers of a 200 ms sleep, greet beside them" 64 sleeper "$sleep_body" 4 greet "$greet"
scenario "64 callers waiting 200 ms on an HTTPS answer, greet beside them" 64 fetcher "$fetch_body" 4 greet "$greet"
scenario "8 callers of a loop until its 1 s limit, greet beside them" 8 spinner "$spin_body" 4 greet "$greet"
scenario "1,000 callers of a 200 ms sleep" 1000 sleeper "$sleep_body"
echo
curl -sf "$base/metrics" | grep -E '^hako_calls_(total|rejected_total)' | sed 's/^/  /' || true
