#!/usr/bin/env bash
# Drives COUNT activations (default 1,000,000) of a hello action through HTTP with wrk
# (8 connections, every answer checked) and reports the server's resident memory after a
# warm-up and at the end. Fails when it grew by 10% or more, or any answer was wrong.
# Usage: scripts/soak.sh [wasm|native] [COUNT]
set -euo pipefail
cd "$(dirname "$0")/.."
backend=${1:-wasm}
count=${2:-1000000}
port=${PORT:-18190}
. scripts/lib.sh
need_wrk
case "$backend" in
  wasm) wasm-examples/build.sh 2>/dev/null; action=wasm-examples/out/hello-rust.wasm ;;
  native) native-examples/build.sh 2>/dev/null; action=native-examples/out/hello-rust ;;
  *) echo "usage: $0 [wasm|native] [COUNT]" >&2; exit 2 ;;
esac
cargo build --release --locked --quiet
bin="${CARGO_TARGET_DIR:-target}/release/wasmloop"
trap 'kill $server 2>/dev/null' EXIT
serve_action "$port" "$action"

rss() { awk '/VmRSS/ {print $2}' "/proc/$server/status"; }
url="http://127.0.0.1:$port/run"
wrk -t8 -c8 -d5s -s scripts/wrk-check.lua "$url" >/dev/null
start_rss=$(rss)
done_count=0 wrong=0 started=$(date +%s)
while [ "$done_count" -lt "$count" ]; do
  out=$(wrk -t8 -c8 -d10s -s scripts/wrk-check.lua "$url")
  done_count=$((done_count + $(awk '/requests in/ {print $1}' <<<"$out")))
  wrong=$((wrong + $(awk '/wrong or non-200/ {print $5}' <<<"$out")))
  echo "$done_count activations, RSS $(rss) KiB" >&2
done
end_rss=$(rss)
growth=$(awk -v a="$start_rss" -v b="$end_rss" 'BEGIN {printf "%.1f", (b - a) * 100 / a}')
echo "$backend: $done_count activations in $(( $(date +%s) - started )) s, $wrong wrong or non-200;" \
  "RSS after warm-up $start_rss KiB, at the end $end_rss KiB ($growth%)"
awk -v g="$growth" -v w="$wrong" 'BEGIN {exit !(g < 10 && w == 0)}'
