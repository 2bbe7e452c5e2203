#!/usr/bin/env bash
# Starts wasmloop on ${PORT:-8080} with the WebAssembly hello (Rust) initialized, and keeps
# it in the foreground (Ctrl-C stops it). Try:
#   curl -s -XPOST localhost:8080/run -d '{"value":{"name":"Mike"}}'
set -euo pipefail
cd "$(dirname "$0")/.."
port=${PORT:-8080}

wasm-examples/build.sh
cargo build --release --locked --quiet
bin="${CARGO_TARGET_DIR:-target}/release/wasmloop"

"$bin" serve --listen "127.0.0.1:$port" &
server=$!
trap 'kill $server 2>/dev/null; wait $server 2>/dev/null' EXIT INT TERM

for _ in $(seq 1 100); do
  (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null && break
  sleep 0.05
done
code=$(base64 -w0 wasm-examples/out/hello-rust.wasm)
printf '{"value":{"code":"%s","binary":true,"main":"main"}}' "$code" |
  curl -sS -XPOST "localhost:$port/init" -H 'Content-Type: application/json' --data-binary @- >&2
echo "wasmloop serves the WebAssembly hello on port $port; try:" >&2
echo "  curl -s -XPOST localhost:$port/run -d '{\"value\":{\"name\":\"Mike\"}}'" >&2
wait $server
