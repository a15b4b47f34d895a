#!/usr/bin/env bash
# A package through a loopback OCI registry against the same from a folder, side by side in one
# run: `hako push` (to an empty registry, and again when the registry has every blob), then
# `hako check` and `hako upload` (into an empty store) of the folder and of the reference.
# Prints the median of each over RUNS runs (default 5), in milliseconds.
#
#   benches/registry/run.sh [HAKO] [PACKAGE]
#
# HAKO defaults to target/release/hako, PACKAGE to benches/packages/go (build it with
# benches/packages/build.sh). Needs Debian's docker-registry. The registry runs on loopback
# over plain HTTP with filesystem storage in a temporary folder, so what is measured is hako's
# side: requests, hashing, writes, the checks and the compile.
set -euo pipefail
here=$(cd "$(dirname "$0")/../.." && pwd)
hako=${1:-$here/target/release/hako}
package=${2:-$here/benches/packages/go}
runs=${RUNS:-5}
work=$(mktemp -d)
registry_pid=
trap '[[ -n $registry_pid ]] && kill "$registry_pid" 2>/dev/null; rm -rf "$work"' EXIT

port=$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
start_registry() {
  rm -rf "$work/data"
  cat >"$work/config.yml" <<EOF
version: 0.1
log: {level: error, accesslog: {disabled: true}}
storage: {filesystem: {rootdirectory: $work/data}}
http: {addr: 127.0.0.1:$port, secret: bench}
EOF
  docker-registry serve "$work/config.yml" >"$work/registry.log" 2>&1 &
  registry_pid=$!
  until (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null; do sleep 0.05; done
}
stop_registry() {
  kill "$registry_pid"
  wait "$registry_pid" 2>/dev/null || true
  registry_pid=
}

# Milliseconds one command takes.
ms() {
  local start end
  start=$(date +%s%N)
  "$@" >/dev/null 2>&1
  end=$(date +%s%N)
  echo $(((end - start) / 1000000))
}
median() { sort -n | awk '{a[NR] = $1} END {print a[int((NR + 1) / 2)]}'; }

reference="oci://127.0.0.1:$port/bench/package:1"
declare -A results
for ((run = 0; run < runs; run++)); do
  start_registry
  results[push]+="$(ms "$hako" push "$package" "$reference") "
  results[push again]+="$(ms "$hako" push "$package" "$reference") "
  results[check folder]+="$(ms "$hako" check "$package") "
  results[check registry]+="$(ms "$hako" check "$reference") "
  rm -rf "$work/store" && results[upload folder]+="$(ms "$hako" upload --store "$work/store" "$package") "
  rm -rf "$work/store" && results[upload registry]+="$(ms "$hako" upload --store "$work/store" "$reference") "
  stop_registry
done
printf '%s, %s bytes of module, median of %s runs (ms)\n' "$package" \
  "$(stat -c %s "$package/module.wasm")" "$runs"
for what in "push" "push again" "check folder" "check registry" "upload folder" "upload registry"; do
  printf '  %-16s %6s\n' "$what" "$(tr ' ' '\n' <<<"${results[$what]}" | grep . | median)"
done
