#!/usr/bin/env bash
# Reports, for each fault the test actions can show, what the client gets, how long it
# takes, and what the next activation gets, for both backends (release build).
# Usage: scripts/faults.sh
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/lib.sh
cargo build --release --locked --quiet
bin="${CARGO_TARGET_DIR:-target}/release/wasmloop"
guests="${CARGO_TARGET_DIR:-target}/faults-guests"
cargo build --quiet --locked --manifest-path tests/guest/Cargo.toml --target-dir "$guests"
cargo build --quiet --locked --release --target wasm32-wasip1 --manifest-path tests/guest/Cargo.toml --target-dir "$guests"
port=${PORT:-18290}

now_ms() { date +%s%3N; }

# BACKEND GUEST LABEL INPUT [EXTRA_FLAGS...]
fault() {
  local backend=$1 guest=$2 label=$3 input=$4
  shift 4
  local file="$guests/debug/$guest"
  [ "$backend" = wasm ] && file="$guests/wasm32-wasip1/release/$guest.wasm"
  serve_action "$port" "$file" "$@"
  local answer next
  answer=$(curl -sS -o /dev/stderr -w '%{http_code} %{time_total}s' -XPOST "127.0.0.1:$port/run" \
    -d "$input" 2>/tmp/fault-body)
  next=$(curl -sS -o /dev/null -w '%{http_code}' -XPOST "127.0.0.1:$port/run" -d '{"value":{"n":1}}')
  printf '| %s | %s | %s | %s | %s |\n' "$backend" "$label" "${answer% *} $(tr -d '\n' </tmp/fault-body)" "${answer#* }" "$next"
  kill $server; wait $server 2>/dev/null || true
}

echo "| backend | fault | client got | took | next /run |"
echo "|---|---|---|---|---|"
for b in native wasm; do
  fault $b slow "deadline in 500 ms, action asleep" "{\"value\":{\"sleep_ms\":600000},\"deadline\":\"$(( $(now_ms) + 500 ))\"}"
  fault $b slow "deadline in 500 ms, action spinning" "{\"value\":{\"spin_ms\":600000},\"deadline\":\"$(( $(now_ms) + 500 ))\"}"
  fault $b slow "--timeout 300ms, action asleep" '{"value":{"sleep_ms":600000}}' --timeout 300ms
  fault $b slow "deadline already past (\"123\")" '{"value":{"sleep_ms":10},"deadline":"123"}'
  fault $b exits_when_asked "exit 3 during a run" '{"value":{"exit":3}}'
  fault $b exits_when_asked "abort (signal / trap)" '{"value":{"abort":true}}'
  fault $b echo "result over --max-result-bytes 1000" "{\"value\":{\"x\":\"$(printf 'x%.0s' $(seq 1 2000))\"}}" --max-result-bytes 1000
  fault $b garbage_when_asked "a line that is not JSON" '{"value":{"garbage":true}}'
  fault $b answers_twice "a stray second line" '{"value":{"n":0}}'
  fault $b non_object "a JSON string as result" '{}'
  fault $b floods_logs "20 MiB of logs in one activation" '{"value":{"mib":10}}'
  fault $b grows_memory "allocates 300 MiB (cap 256 MiB)" '{"value":{"mib":300}}'
done
fault native closes_result_channel "closes fd 3 and hangs" '{"value":{"close":true}}'
