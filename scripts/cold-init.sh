#!/usr/bin/env bash
# Cold /init of every example guest, in a fresh server with no compile cache: the upload
# compiled (the default tiered compiler), then the same guest as a signed artifact whose
# code the server trusts (no compile). Needs the examples built (their build.sh) and a
# release build. Usage: scripts/cold-init.sh [ROUNDS]   (prints the median of ROUNDS, 3)
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/lib.sh
bin=${CARGO_TARGET_DIR:-target}/release/wasmloop
rounds=${1:-3}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
"$bin" keygen "$work/keys" >/dev/null

# The /init body of FILE, written once: not while a fresh server waits for it.
make_body() {
  printf '{"value":{"code":"%s","binary":true}}' "$(base64 -w0 "$1")" >"$2"
}

# /init time of the body in FILE on a fresh server started with ARGS, in ms.
init_ms() {
  local file=$1; shift
  local port
  port=$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
  start_server "$port" --no-cache "$@"
  timed_init "$port" "$file" || exit 1
  kill "$server" 2>/dev/null || true; wait "$server" 2>/dev/null || true
}

median() { tr ' ' '\n' | sort -n | awk '{ v[NR] = $1 } END { print v[int((NR + 1) / 2)] }'; }

printf '%-34s %10s %14s %16s\n' guest size compiled "signed artifact"
for file in wasm-examples/out/hello-rust.wasm wasm-examples/out/hello-c.wasm \
            wasm-examples/out/hello-go.wasm wasm-examples/out/markdown.wasm \
            component-examples/out/hello-rust.wasm component-examples/out/hello-js.wasm \
            component-examples/out/hello-python.wasm; do
  [ -f "$file" ] || { echo "$file is missing: run its build.sh" >&2; exit 1; }
  "$bin" compile "$file" --output "$work/artifact.zip" --sign-key "$work/keys/sign.key"
  make_body "$file" "$work/module.json"
  make_body "$work/artifact.zip" "$work/artifact.json"
  compiled=$(for _ in $(seq "$rounds"); do echo -n "$(init_ms "$work/module.json") "; done | median)
  signed=$(for _ in $(seq "$rounds"); do
    echo -n "$(init_ms "$work/artifact.json" --trust-key "$work/keys/verify.key") "
  done | median)
  printf '%-34s %10s %11s ms %13s ms\n' "$file" "$(stat -c %s "$file")" "$compiled" "$signed"
done
