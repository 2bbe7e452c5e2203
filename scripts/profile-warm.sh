#!/usr/bin/env bash
# Where a warm activation's time goes, per bench row: system calls per activation (strace
# -c -f: the server and its child together) and the server process's instructions per
# activation (callgrind, which counts the same whatever else the machine does). Each figure
# is the difference between a run of N and of 2N activations on fresh servers, divided by
# N, so that start-up and /init cancel out. Needs a release build and the examples (the
# bench's). Usage: scripts/profile-warm.sh [ROWS] [N]   (defaults: all five rows, 2000)
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/lib.sh
rows=${1:-floor,wasm,wasm-logs,pipe,pipe-logs}
n=${2:-2000}
for tool in strace valgrind; do
  command -v "$tool" >/dev/null || { echo "$tool is missing: apt-get install $tool" >&2; exit 1; }
done
bin="${CARGO_TARGET_DIR:-target}/release/wasmloop"
port=${PORT:-18391}
work=$(mktemp -d)
# strace ignores signals while it runs a program: its child, the server, is stopped too.
trap 'for job in $(jobs -p); do pkill -P "$job"; kill "$job"; done 2>/dev/null; rm -rf "$work"' EXIT

# ROW HITS PROFILER...: starts the row's server under PROFILER, /init, HITS activations
# (each checked), then stops it; the profiler's output is in $work.
drive() {
  local row=$1 hits=$2
  shift 2
  local file=wasm-examples/out/hello-rust.wasm path=/run body='{"value":{"name":"Mike"}}'
  local expect='{"message":"Hello, Mike!"}'
  case $row in
    floor) path=/floor body='' expect='' ;;
    wasm) ;;
    wasm-logs) body='{"value":{"name":"Mike","logs":true}}' ;;
    pipe) file=native-examples/out/hello-rust ;;
    pipe-logs) file=native-examples/out/hello-rust body='{"value":{"name":"Mike","logs":true}}' ;;
    *) echo "unknown row $row" >&2; exit 1 ;;
  esac
  # Under valgrind the server cannot start its compile children (/proc/self/exe is
  # valgrind's own binary there), and the CPU it emulates lacks some of this one's
  # features: it gets the module precompiled by wasmloop under valgrind too.
  if [ "$1" = valgrind ] && [ "$file" != "${file%.wasm}" ]; then
    [ -f "$work/hello.cwasm" ] ||
      valgrind --tool=none -q "$bin" compile "$file" --output "$work/hello.cwasm" --wasm-compiler cranelift
    file=$work/hello.cwasm
  fi
  WRAP="$*" SERVER_LOG="$work/server.log" serve_action "$port" "$file" --no-cache --allow-precompiled \
    --wasm-compiler cranelift || { cat "$work/server.log" >&2; exit 1; }
  local check=(--expect "$expect")
  [ -z "$expect" ] && check=()
  "$bin" bench --url "http://127.0.0.1:$port$path" --hits "$hits" --warmup 0 \
    ${body:+--body "$body"} "${check[@]}" >"$work/bench.txt"
  awk '$1 == "url" && $NF != 0 { print "errors: " $0; exit 1 }' "$work/bench.txt" >&2
  # strace and valgrind write their counts when the server exits (strace ignores signals
  # itself: the server is its child; under valgrind, it is the process started).
  pkill -TERM -P "$server" -f "wasmloop serve" || kill -TERM "$server"
  wait "$server" 2>/dev/null || true
}

syscalls() { # ROW HITS: "name count" for every system call of the run
  drive "$1" "$2" strace -f -c -U name,calls -o "$work/strace.txt"
  awk '$1 ~ /^[a-z_0-9]+$/ && $2 ~ /^[0-9]+$/ && $1 != "total" { print $1, $2 }' "$work/strace.txt"
}

instructions() { # ROW HITS: the server's instructions for the run
  rm -f "$work"/callgrind.out.*
  drive "$1" "$2" valgrind --tool=callgrind --callgrind-out-file="$work/callgrind.out.%p" \
    --trace-children=no
  awk '/^summary:/ { print $2 }' "$work"/callgrind.out.* | head -1
}

for row in ${rows//,/ }; do
  syscalls "$row" "$n" >"$work/a"
  syscalls "$row" $((2 * n)) >"$work/b"
  per_call=$(join -a 2 -e 0 -o 0,1.2,2.2 <(sort "$work/a") <(sort "$work/b") |
    awk -v n="$n" '{ d = ($3 - $2) / n; if (d >= 0.05) printf "%s %.2f, ", $1, d; t += d }
                   END { printf "total %.2f", t }')
  a=$(instructions "$row" "$n")
  b=$(instructions "$row" $((2 * n)))
  echo "$row: instructions (server) $(( (b - a) / n )); system calls per activation: $per_call"
done
