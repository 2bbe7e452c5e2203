#!/usr/bin/env bash
# Starts wasmloop on ${PORT:-8080} with the WebAssembly hello (Rust) initialized, and keeps
# it in the foreground (Ctrl-C stops it). Try:
#   curl -s -XPOST localhost:8080/run -d '{"value":{"name":"Mike"}}'
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/lib.sh
port=${PORT:-8080}

wasm-examples/build.sh
cargo build --release --locked --quiet
bin="${CARGO_TARGET_DIR:-target}/release/wasmloop"

SERVER_OUT=/dev/stdout SERVER_LOG=/dev/stderr serve_action "$port" wasm-examples/out/hello-rust.wasm
trap 'kill $server 2>/dev/null; wait $server 2>/dev/null' EXIT INT TERM
echo "wasmloop serves the WebAssembly hello on port $port; try:" >&2
echo "  curl -s -XPOST localhost:$port/run -d '{\"value\":{\"name\":\"Mike\"}}'" >&2
wait $server
