#!/usr/bin/env bash
# Measures requests/s and p50/p99 with wrk, in one run, for: the HTTP floor (a path with no
# action), the WebAssembly hello (Rust) and the native hello (Rust), at 1 and 8 connections.
# Every hello answer is checked (wrk-check.lua). Usage: scripts/bench-wrk.sh [SECONDS]
set -euo pipefail
cd "$(dirname "$0")/.."
seconds=${1:-10}
. scripts/lib.sh
build_for_measuring

start() { # PORT FILE: a server running FILE, its logs discarded
  serve_action "$1" "$2"
  pids+=("$server")
}
pids=()
trap 'kill "${pids[@]}" 2>/dev/null' EXIT
start 18181 wasm-examples/out/hello-rust.wasm
start 18182 native-examples/out/hello-rust

measure() { # LABEL URL SCRIPT CONNECTIONS
  local out
  out=$(wrk -t"$4" -c"$4" -d"${seconds}s" -s "$3" "$2")
  printf '%-8s %3s conn  %9s req/s  %s  %s\n' "$1" "$4" \
    "$(awk '/Requests\/sec/ {print $2}' <<<"$out")" \
    "$(grep -o 'p50.*' <<<"$out")" \
    "$(grep -o 'wrong.*' <<<"$out" || true)"
}
for c in 1 8; do
  measure floor http://127.0.0.1:18181/floor scripts/wrk-floor.lua "$c"
  measure wasm http://127.0.0.1:18181/run scripts/wrk-check.lua "$c"
  measure native http://127.0.0.1:18182/run scripts/wrk-check.lua "$c"
done
