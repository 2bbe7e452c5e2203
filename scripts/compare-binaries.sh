#!/usr/bin/env bash
# Two wasmloop binaries side by side, interleaved in one run: the /run rows (module,
# component, pipe; persistent and fresh instances; one connection, server pinned to CPU 0
# and wrk to CPU 1, and eight connections against eight instances), then the plain-HTTP
# hello (`--protocol http`, kept instances), each with the server's own CPU per request.
# Each row alternates the binaries over ROUNDS rounds of SECONDS each and prints each
# binary's median req/s with its least and most, the new median over the old, and the
# server CPU per request (the server process alone: a pipe's children are not in it).
# Usage: [ONLY=PATTERN] scripts/compare-binaries.sh OLD_BINARY NEW_BINARY [SECONDS] [ROUNDS]
set -euo pipefail
cd "$(dirname "$0")/.."
old=$1 new=$2 seconds=${3:-3} rounds=${4:-5}
. scripts/lib.sh
need_wrk
wasm-examples/build.sh >/dev/null 2>&1
native-examples/build.sh >/dev/null 2>&1
component-examples/build.sh >/dev/null 2>&1

pids=()
trap 'kill "${pids[@]}" 2>/dev/null' EXIT

# CPU seconds process PID has used (user + system), from /proc.
cpu_of() {
  awk -v hz="$(getconf CLK_TCK)" '{ print ($14 + $15) / hz }' "/proc/$1/stat"
}

# One wrk run against PORT's PATH: "REQ_PER_S CPU_US_PER_REQ" for the server PID.
measure() { # PORT PID CONNECTIONS PATH SCRIPT
  local before after out rps reqs
  before=$(cpu_of "$2")
  out=$(taskset -c 1 wrk -t"$3" -c"$3" -d"${seconds}s" -s "$5" "http://127.0.0.1:$1$4")
  after=$(cpu_of "$2")
  if grep -q 'wrong [1-9]' <<<"$out"; then echo "wrong answers on port $1: $out" >&2; exit 1; fi
  rps=$(awk '/Requests\/sec/ {print $2}' <<<"$out")
  reqs=$(awk '/requests in/ {print $1}' <<<"$out")
  awk -v b="$before" -v a="$after" -v r="$rps" -v n="$reqs" \
    'BEGIN { printf "%s %.1f\n", r, (a - b) * 1e6 / (n > 0 ? n : 1) }'
}

# Median, least and most of the numbers on stdin.
spread() {
  sort -g | awk '{ v[NR] = $1 } END { printf "%s %s %s", v[int((NR + 1) / 2)], v[1], v[NR] }'
}

port=18300
row() { # LABEL CONNECTIONS PATH SCRIPT PIN FLAGS...
  local label=$1 conns=$2 path=$3 script=$4 pin=$5; shift 5
  # ONLY (a grep pattern) keeps the rows whose label matches it.
  grep -qE -- "${ONLY:-.}" <<<"$label" || return 0
  local ports=() servers=() bin
  for bin in "$old" "$new"; do
    port=$((port + 1))
    local wrap=
    [ "$pin" = pinned ] && wrap="taskset -c 0"
    WRAP=$wrap bin=$bin start_server "$port" "$@"
    pids+=("$server") ports+=("$port") servers+=("$server")
  done
  local results=(/tmp/compare.$$.0 /tmp/compare.$$.1)
  : >"${results[0]}"; : >"${results[1]}"
  for _ in $(seq 1 "$rounds"); do
    for i in 0 1; do
      measure "${ports[$i]}" "${servers[$i]}" "$conns" "$path" "$script" >>"${results[$i]}"
    done
  done
  local o n oc nc
  o=$(cut -d' ' -f1 "${results[0]}" | spread) n=$(cut -d' ' -f1 "${results[1]}" | spread)
  oc=$(cut -d' ' -f2 "${results[0]}" | spread | cut -d' ' -f1)
  nc=$(cut -d' ' -f2 "${results[1]}" | spread | cut -d' ' -f1)
  awk -v l="$label" -v o="$o" -v n="$n" -v oc="$oc" -v nc="$nc" 'BEGIN {
    split(o, a, " "); split(n, b, " ");
    printf "| %-34s | %8.0f (%.0f-%.0f) | %8.0f (%.0f-%.0f) | %5.2fx | %6.1f | %6.1f |\n",
      l, a[1], a[2], a[3], b[1], b[2], b[3], b[1] / a[1], oc, nc }'
  kill "${servers[@]}" 2>/dev/null || true
  rm -f "${results[@]}"
}

echo "old: $old; new: $new; $rounds rounds of ${seconds}s per binary and row, interleaved"
echo "| row | old req/s median (least-most) | new req/s median (least-most) | new/old | old server µs CPU/req | new |"
echo "|---|---|---|---|---|---|"
for form in module:wasm-examples/out/hello-rust.wasm component:component-examples/out/hello-rust.wasm pipe:native-examples/out/hello-rust; do
  name=${form%%:*} file=${form#*:}
  for lifetime in persistent fresh; do
    flags=()
    [ "$lifetime" = fresh ] && flags=(--max-activations-per-instance 1)
    row "$name $lifetime, 1 conn pinned" 1 /run scripts/wrk-check.lua pinned --action "$file" "${flags[@]}"
    row "$name $lifetime, 8 conn" 8 /run scripts/wrk-check.lua free --action "$file" --concurrency 8 "${flags[@]}"
  done
done
row "plain HTTP hello (http component), 1 conn pinned" 1 / scripts/wrk-floor.lua pinned \
  --protocol http --action component-examples/out/http-hello-rust.wasm
