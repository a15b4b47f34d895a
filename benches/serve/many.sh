#!/usr/bin/env bash
# Many packages on one server: N distinct copies of a package (its module made distinct by a
# custom section, so each is a package and a module of its own), called in turn through
# `POST /v1/packages/NAME-i/call`, against the same server with one of them called alone.
# Prints calls/s, p50 and p99 for each count, its share of the rate of one package alone
# measured just before it, and the server's module loads and calls on instances made ahead
# (from /metrics).
#
#   [HAKO=BINARY] [SERVE_ARGS="…"] [PIN=1] benches/serve/many.sh [SECONDS] [CONNECTIONS]
#       [COUNT...] [-- PACKAGE_DIR]
#
# Counts default to 1 32 200 1000; the package to examples/greet (its tool and arguments from
# bench.json). PIN=1 (two cores or more): the server (--workers 1 --http-threads 1) on CPU 0,
# wrk on CPU 1. SERVE_ARGS are given to hako serve, and their --engine and --compiler to hako
# upload too. Needs wrk and jq (Debian packages).
set -euo pipefail
cd "$(dirname "$0")/../.."

duration="${1:-4}"
connections="${2:-8}"
shift $(( $# < 2 ? $# : 2 ))
counts=()
while [[ $# -gt 0 && "$1" != "--" ]]; do counts+=("$1"); shift; done
[[ "${1:-}" == "--" ]] && shift
package="${1:-examples/greet}"
[[ ${#counts[@]} -gt 0 ]] || counts=(1 32 200 1000)

# shellcheck source=benches/serve/common.sh
. benches/serve/common.sh
need wrk jq
hako="$(hako_binary)"
pinned_server=""
pinned_wrk=""
pinned_args=""
if [[ "${PIN:-0}" == 1 && "$(nproc)" -ge 2 ]]; then
  pinned_server="taskset -c 0"
  pinned_wrk="taskset -c 1"
  pinned_args="--workers 1 --http-threads 1"
fi

work="$(mktemp -d)"
log="$work/server.log"
cleanup() { [[ -n "${server:-}" ]] && kill "$server" 2>/dev/null; wait 2>/dev/null; rm -rf "$work"; }
trap cleanup EXIT

tool="$(jq -r .tool "$package/bench.json")"
args="$(jq -c .args "$package/bench.json")"
body="$(jq -cn --arg tool "$tool" --argjson args "$args" '{tool: $tool, arguments: $args}')"
most=0
for count in "${counts[@]}"; do (( count > most )) && most=$count; done

# Copies 1 … most of the package, each module with a custom section naming its number (a
# custom section is id 0, its size, the name's length and bytes, then the payload).
store="$work/store"
for i in $(seq "$most"); do
  copy="$work/package"
  rm -rf "$copy"; cp -rL "$package" "$copy"
  jq --arg name "many-$i" '.name = $name' "$package/subako-package.json" >"$copy/subako-package.json"
  python3 - "$copy/module.wasm" "$i" <<'PY'
import sys
path, number = sys.argv[1], sys.argv[2].encode()
name = b"hako-bench-copy"
content = bytes([len(name)]) + name + number
with open(path, "ab") as f:
    f.write(bytes([0, len(content)]) + content)
PY
  # shellcheck disable=SC2046 # a list of flags
  "$hako" upload "$copy" --store "$store" $(upload_args) >/dev/null
done

# shellcheck disable=SC2086 # command prefixes and lists of flags
$pinned_server "$hako" serve --store "$store" --listen 127.0.0.1:0 $pinned_args ${SERVE_ARGS:-} >"$log" 2>/dev/null &
server=$!
for _ in $(seq 100); do grep -q listening "$log" && break; sleep 0.1; done
base="$(sed -n 's/^hako: listening on //p' "$log")"
[[ -n "$base" ]] || { echo "hako serve did not start" >&2; exit 1; }
metric() { curl -sf "$base/metrics" | awk -v m="$1" '$1 == m {print $2}' | head -1; }
total() { curl -sf "$base/metrics" | awk -v m="$1" 'index($1, m) == 1 {n += $2} END {print n + 0}'; }
loads() { total 'hako_module_loads_total{source="artifact"}'; }
calls() { total 'hako_calls_total{'; }

where="on the same cores"
[[ -n "$pinned_wrk" ]] && where="on CPU 1, the server on CPU 0"
echo "machine: $(nproc) cores, $(uname -srm); hako serve ${pinned_args:-(defaults)} ${SERVE_ARGS:-}; wrk -t1 -c$connections $where, ${duration}s per count; $(jq -r .name "$package/subako-package.json") ($tool)"
# One measured run of COUNT packages in turn (after a warm-up pass over every one of them):
# calls/s, p50, p99, artifact loads and calls on instances made ahead per call.
measure() {
  local count="$1" out calls loads_before ready_before calls_before rps p50 p99
  # shellcheck disable=SC2086
  BODY="$body" PACKAGES="$count" PREFIX=many $pinned_wrk wrk -t1 -c"$connections" -d"$(( count > 100 ? 3 : 1 ))s" -s benches/serve/rotate.lua "$base" >/dev/null
  loads_before="$(loads)"; ready_before="$(metric hako_calls_ready_total)"; calls_before="$(calls)"
  # shellcheck disable=SC2086
  out="$(BODY="$body" PACKAGES="$count" PREFIX=many $pinned_wrk wrk -t1 -c"$connections" -d"${duration}s" --latency -s benches/serve/rotate.lua "$base")"
  calls=$(( $(calls) - calls_before ))
  read -r rps p50 p99 < <(awk '/^Requests\/sec:/ {r=$2} $1 == "50%" {a=$2} $1 == "99%" {b=$2} END {print r, a, b}' <<<"$out")
  echo "$rps $p50 $p99 $(awk -v a="$(loads)" -v b="$loads_before" -v n="$calls" 'BEGIN {print (a - b) / (n ? n : 1)}') $(awk -v a="$(metric hako_calls_ready_total)" -v b="$ready_before" -v n="$calls" 'BEGIN {print (a - b) / (n ? n : 1)}')"
}

# Each count is measured right after one package alone, and its share is of that rate: the
# machine's speed moves from one spell to the next, and a share of a rate measured minutes
# before would mix two machines.
printf '%-10s %12s %10s %10s %14s %10s %18s %14s\n' packages calls/s p50 p99 "one just before" "of one" "artifact loads/call" "ready/call"
for count in "${counts[@]}"; do
  one=""
  if (( count > 1 )); then
    read -r one _ < <(measure 1)
  fi
  read -r rps p50 p99 loads_per_call ready_per_call < <(measure "$count")
  [[ -n "$one" ]] || one="$rps"
  printf '%-10s %12.0f %10s %10s %14.0f %10.2f %18.3f %14.3f\n' "$count" "$rps" "$p50" "$p99" "$one" \
    "$(awk -v a="$rps" -v b="$one" 'BEGIN {print a / b}')" "$loads_per_call" "$ready_per_call"
done
echo "server RSS: $(awk '/VmRSS/ {print $2 / 1024 " MB"}' "/proc/$server/status")"
