#!/usr/bin/env bash
# Runs every check: formatting, lints, then all tests. Installs what the tests need first
# (the Rust wasm32-wasip1 target, the examples' toolchains: gcc, zip, clang and wasi-libc
# from Debian, Go from PyPI).
set -euo pipefail
cd "$(dirname "$0")/.."

rustup component add rustfmt clippy >/dev/null 2>&1 || true
rustup target add wasm32-wasip1 >/dev/null 2>&1
native-examples/build.sh
wasm-examples/build.sh

cargo fmt --check
for crate in tests/guest native-examples/rust wasm-examples/rust wasm-examples/markdown; do
  cargo fmt --check --manifest-path "$crate/Cargo.toml"
done
cargo clippy --all-targets --locked -- -D warnings
scripts/check-dockerfile.sh
cargo test --locked
