#!/usr/bin/env bash
# WASI 0.3 HTTP components beside their peers, in one run, as plain HTTP: wasmloop's
# http-p3 (--wasip3: up to 16 activations in one instance), `wasmtime serve` with its p3
# defaults (instances reused 128 times, 16 requests at once), and wasmloop's WASI 0.2 HTTP
# backend, its instances kept (one activation each). Two handlers: the hello (the same
# source built for 0.3 and 0.2: component-examples/http-rust-p3 and http-rust), and an
# I/O-bound one whose every request waits 100 ms (tests/p3-guest and tests/http-guest,
# /sleep). Each row: req/s, p99, the server's resident memory after the run, and for the
# I/O-bound handler the memory each extra activation in flight cost (resident after the
# run less resident before it, over the requests in flight). Servers are pinned to CPU 0, wrk to
# CPU 1. Usage: scripts/bench-p3.sh [SECONDS]
set -euo pipefail
cd "$(dirname "$0")/.."
seconds=${1:-5}
. scripts/lib.sh
build_for_measuring
component-examples/build.sh >/dev/null 2>&1
wasmtime=$(scripts/install-wasmtime.sh)
guests=${CARGO_TARGET_DIR:-target}/bench-p3-guests
for guest in p3-guest http-guest; do
  cargo build --quiet --release --locked --target wasm32-wasip2 \
    --manifest-path "tests/$guest/Cargo.toml" --target-dir "$guests"
done
p3_hello=component-examples/out/http-hello-p3-rust.wasm
p2_hello=component-examples/out/http-hello-rust.wasm
p3_io=$guests/wasm32-wasip2/release/wasmloop_test_p3_guest.wasm
p2_io=$guests/wasm32-wasip2/release/wasmloop_test_http_guest.wasm

pids=()
trap 'kill "${pids[@]}" 2>/dev/null' EXIT

# Starts a server on PORT (the rest: its command), pinned to CPU 0, and waits until it
# answers.
serve_on() { # PORT COMMAND...
  local port=$1; shift
  taskset -c 0 "$@" >/dev/null 2>&1 &
  pids+=("$!")
  for _ in $(seq 200); do
    curl -s -o /dev/null "127.0.0.1:$port/" && return 0
    sleep 0.05
  done
  echo "the server on $port did not answer" >&2; return 1
}
rss_kib() { awk '/VmRSS/ {print $2}' "/proc/$1/status"; }
# The server's pid on PORT: the last one started.
last_pid() { echo "${pids[-1]}"; }

# One wrk run: "REQ_PER_S P99_MS" for URL at CONNECTIONS, with BODY posted if given.
load() { # URL CONNECTIONS [BODY]
  local script="" out
  if [ -n "${3:-}" ]; then
    script=$(mktemp --suffix=.lua)
    printf 'wrk.method = "POST"\nwrk.body = [[%s]]\n' "$3" > "$script"
  fi
  out=$(taskset -c 1 wrk -t1 -c"$2" -d"${seconds}s" --latency ${script:+-s "$script"} "$1")
  [ -n "$script" ] && rm -f "$script"
  awk '/Requests\/sec/ {rps=$2} / 99%/ {p=$2} END {
    if (p ~ /us$/) { sub(/us$/, "", p); p /= 1000 } else if (p ~ /ms$/) { sub(/ms$/, "", p) }
    else if (p ~ /s$/) { sub(/s$/, "", p); p *= 1000 }
    printf "%s %.1f", rps, p }' <<<"$out"
}

row() { # LABEL PID URL CONNECTIONS [BODY]
  local idle busy result
  idle=$(rss_kib "$2")
  result=$(load "$3" "$4" "${5:-}")
  busy=$(rss_kib "$2")
  printf '%-24s %4s conn  %10s req/s  p99 %8s ms  resident %6s MiB' "$1" "$4" \
    ${result% *} ${result#* } "$((busy / 1024))"
  if [ -z "${5:-}" ] && [ "$4" -gt 1 ]; then
    printf '  %5s KiB per request in flight' "$(( (busy - idle) / $4 ))"
  fi
  echo
}

echo "hello (POST {\"name\":\"Mike\"}), servers on CPU 0, wrk on CPU 1, ${seconds}s a row"
serve_on 18301 "$bin" serve --wasip3 --protocol http --listen 127.0.0.1:18301 --action "$p3_hello"
p3=$(last_pid)
serve_on 18302 "$wasmtime" serve -Scli --addr 127.0.0.1:18302 "$p3_hello"
peer=$(last_pid)
serve_on 18303 "$bin" serve --protocol http --listen 127.0.0.1:18303 --action "$p2_hello"
p2=$(last_pid)
for c in 1 8 64; do
  row "wasmloop http-p3" "$p3" http://127.0.0.1:18301/ "$c" '{"name":"Mike"}'
  row "wasmtime serve (p3)" "$peer" http://127.0.0.1:18302/ "$c" '{"name":"Mike"}'
  row "wasmloop http (0.2 kept)" "$p2" http://127.0.0.1:18303/ "$c" '{"name":"Mike"}'
done
kill "${pids[@]}"; pids=()

echo "I/O-bound (each request waits 100 ms)"
# Sixteen instances of sixteen activations each: 256 in flight, as wasmtime serve makes them.
serve_on 18311 "$bin" serve --wasip3 --protocol http --listen 127.0.0.1:18311 --concurrency 16 --max-queue 4096 --action "$p3_io"
p3=$(last_pid)
serve_on 18312 "$wasmtime" serve -Scli --addr 127.0.0.1:18312 "$p3_io"
peer=$(last_pid)
# One instance per activation in flight: as many instances as connections.
serve_on 18313 "$bin" serve --protocol http --listen 127.0.0.1:18313 --concurrency 256 --max-queue 4096 --action "$p2_io"
p2=$(last_pid)
for c in 1 8 64 256; do
  row "wasmloop http-p3" "$p3" "http://127.0.0.1:18311/sleep?ms=100" "$c"
  row "wasmtime serve (p3)" "$peer" "http://127.0.0.1:18312/sleep?ms=100" "$c"
  row "wasmloop http (0.2 kept)" "$p2" "http://127.0.0.1:18313/sleep?100" "$c"
done
