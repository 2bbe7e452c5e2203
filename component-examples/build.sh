#!/usr/bin/env bash
# Builds every component example into component-examples/out/ (or $OUT) as NAME.wasm: the
# hello and fetch actions in Rust (wasm32-wasip2), Python (componentize-py) and JavaScript
# (componentize-js), and the hello as an HTTP component (wasi:http/proxy) in each, and in
# Rust for WASI 0.3 (wasi:http/service@0.3.0) too. Installs what is missing from the package registries: the Rust target
# wasm32-wasip2 (rustup), componentize-py (PyPI), componentize-js (npm, pinned by
# js/package-lock.json).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(dirname "$here")
out=${OUT:-$here/out}
mkdir -p "$out"
target_dir=${CARGO_TARGET_DIR:-$root/target}/component-examples
componentize_py_version=0.25.1

if ! rustup target list --installed | grep -qx wasm32-wasip2; then
  echo "installing the Rust target wasm32-wasip2" >&2
  rustup target add wasm32-wasip2
fi
if [ "$(componentize-py --version 2>/dev/null)" != "componentize-py $componentize_py_version" ]; then
  echo "installing componentize-py $componentize_py_version from PyPI" >&2
  python3 -m pip install --quiet "componentize-py==$componentize_py_version" 2>/dev/null ||
    python3 -m pip install --quiet --break-system-packages "componentize-py==$componentize_py_version"
  hash -r
fi
if ! command -v npm >/dev/null; then
  echo "installing Node.js and npm from Debian" >&2
  as_root() { if [ "$(id -u)" = 0 ]; then "$@"; else sudo "$@"; fi; }
  as_root apt-get update -qq
  DEBIAN_FRONTEND=noninteractive as_root apt-get install -y -qq nodejs npm >/dev/null
fi
# Installed again whenever the lock file changes (the stamp holds the lock file's hash).
lock_hash=$(sha256sum "$here/js/package-lock.json" | cut -d' ' -f1)
if [ "$(cat "$here/js/node_modules/.installed-from" 2>/dev/null)" != "$lock_hash" ]; then
  echo "installing componentize-js from npm" >&2
  (cd "$here/js" && npm ci --no-audit --no-fund --loglevel=error)
  echo "$lock_hash" > "$here/js/node_modules/.installed-from"
fi

echo "building component-examples/rust, http-rust, http-rust-p3 and wasm-examples/rust for wasm32-wasip2" >&2
for crate in "$here/rust" "$here/http-rust" "$here/http-rust-p3" "$root/wasm-examples/rust"; do
  cargo build --quiet --release --locked --target wasm32-wasip2 \
    --manifest-path "$crate/Cargo.toml" --target-dir "$target_dir"
done
# The same hello source as the WASI preview 1 example: only the target differs.
cp "$target_dir/wasm32-wasip2/release/hello.wasm" "$out/hello-rust.wasm"
cp "$target_dir/wasm32-wasip2/release/fetch.wasm" "$out/fetch-rust.wasm"
cp "$target_dir/wasm32-wasip2/release/http_hello.wasm" "$out/http-hello-rust.wasm"
# The same hello for WASI 0.3 (wasi:http/service@0.3.0), served with --wasip3.
cp "$target_dir/wasm32-wasip2/release/http_hello_p3.wasm" "$out/http-hello-p3-rust.wasm"

# The WASI interfaces, as wasmloop's own wasmtime-wasi-http crate defines them.
wit=$(mktemp -d)
trap 'rm -rf "$wit"' EXIT
http_crate=$(cargo metadata --format-version 1 --locked --manifest-path "$root/Cargo.toml" |
  python3 -c 'import json, sys; print(next(p["manifest_path"] for p in json.load(sys.stdin)["packages"] if p["name"] == "wasmtime-wasi-http"))')
cp "$here/wit/world.wit" "$wit/"
cp -r "$(dirname "$http_crate")/wit/deps" "$wit/deps"

for action in hello fetch; do
  echo "building component-examples/python/$action.py" >&2
  (cd "$here/python" && componentize-py -d "$wit" -w action componentize "$action" \
    -p . -p "$root/sdk/python" -o "$out/$action-python.wasm" >/dev/null)
  echo "building component-examples/js/$action.js" >&2
  # From the root: componentize-js reads only files under its working folder, and the
  # examples import ../../sdk/js.
  (cd "$root" && "$here/js/node_modules/.bin/componentize-js" "$here/js/$action.js" \
    --wit "$wit" --world-name action -o "$out/$action-js.wasm" >/dev/null)
done

# The HTTP hello: the standard wasi:http/proxy world, not wasmloop's stdio one.
echo "building component-examples/python/http_hello.py" >&2
(cd "$here/python" && componentize-py -d "$wit" -w wasi:http/proxy@0.2.12 componentize http_hello \
  -p . -o "$out/http-hello-python.wasm" >/dev/null)
# componentize-js's engine exports the handler at the wasi:http version it was built
# against: the world must name that one (wasmloop serves any 0.2.x).
engine=$here/js/node_modules/@bytecodealliance/componentize-js/lib/starlingmonkey_embedding.wasm
http_version=$(grep -ao 'wasi:http/incoming-handler@0\.2\.[0-9]*' "$engine" | head -1 | cut -d@ -f2)
wit_js=$(mktemp -d)
trap 'rm -rf "$wit" "$wit_js"' EXIT
cp -r "$wit/deps" "$wit_js/"
# Same interfaces, older name: an item gated on a later 0.2 release would not resolve, and
# wasmloop provides every stable one, so each counts as released from 0.2.0.
sed -i -E "s/@0\.2\.12\b/@$http_version/g; s/@since\(version = [0-9.]+\)/@since(version = 0.2.0)/" \
  "$wit_js"/deps/*.wit
printf 'package wasmloop:http-example;\n\nworld proxy {\n  include wasi:http/proxy@%s;\n}\n' \
  "$http_version" > "$wit_js/world.wit"
echo "building component-examples/js/http-hello.js (wasi:http $http_version)" >&2
(cd "$root" && "$here/js/node_modules/.bin/componentize-js" "$here/js/http-hello.js" \
  --wit "$wit_js" --world-name proxy -o "$out/http-hello-js.wasm" >/dev/null)

echo "component examples are in $out" >&2
