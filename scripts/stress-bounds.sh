#!/usr/bin/env bash
# Runs the tests whose bounds a busy machine could move (the servers' memory high-water
# mark under log floods, resident growth, deadlines, CPU clocks) RUNS times (default 10),
# each with HOGS CPU-bound processes (default 2) sharing the machine, and counts the runs
# that failed. Usage: scripts/stress-bounds.sh [RUNS] [HOGS]. Needs the examples built
# (scripts/test.sh builds them).
set -euo pipefail
cd "$(dirname "$0")/.."
runs=${1:-10}
hogs=${2:-2}
WASMTIME=$(scripts/install-wasmtime.sh)
export WASMTIME
cargo test --locked --no-run --quiet
pids=()
trap 'kill "${pids[@]}" 2>/dev/null || true' EXIT
for _ in $(seq "$hogs"); do
  # A CPU-bound process of its own, ended with the script.
  sh -c 'while :; do :; done' &
  pids+=($!)
done
failed=0
for run in $(seq "$runs"); do
  log=$(mktemp)
  ok=yes
  cargo test --locked --test it -- \
    logs::wasm::repeated_64 logs::native::repeated_64 logs::component::repeated_64 \
    logs::wasm::a_burst_of_empty logs::native::a_burst_of_empty logs::component::a_burst_of_empty \
    limits::unsent_http_requests limits::stray_stdout_lines \
    faults::wasm::a_deadline faults::native::a_deadline faults::a_deadline_takes_down \
    reports::wasm::in_json >"$log" 2>&1 || ok=
  cargo test --locked --lib -- report::tests::cpu_spent >>"$log" 2>&1 || ok=
  cargo test --locked -p wasmloop-bench --lib -- cpu::tests >>"$log" 2>&1 || ok=
  if [ -n "$ok" ]; then
    echo "run $run of $runs: passed"
  else
    failed=$((failed + 1))
    echo "run $run of $runs: FAILED"
    grep -E '^(test .* FAILED|---- |.*panicked at)' "$log" | head -20
  fi
  rm -f "$log"
done
echo "$failed of $runs runs failed, with $hogs CPU-bound processes beside them"
[ "$failed" = 0 ]
