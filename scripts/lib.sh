# Shared by the scripts that start a wasmloop server: source it, don't run it.

# Writes the /init body for FILE (sent as base64) on stdout.
init_body() {
  printf '{"value":{"code":"%s","binary":true,"main":"main"}}' "$(base64 -w0 "$1")"
}

# Starts `$bin serve` on 127.0.0.1:PORT with FLAGS (under $WRAP, e.g. valgrind, if set),
# its stdout in ${SERVER_OUT:-/dev/null} and stderr in ${SERVER_LOG:-/dev/null}; sets $server
# and returns once it answers.
start_server() {
  local port=$1; shift
  # shellcheck disable=SC2086 # $WRAP is a command and its arguments
  ${WRAP:-} "$bin" serve --listen "127.0.0.1:$port" "$@" >"${SERVER_OUT:-/dev/null}" 2>"${SERVER_LOG:-/dev/null}" &
  server=$!
  for _ in $(seq 1 3000); do
    # Waits in the listen backlog until the server accepts (after --action's start-up).
    curl -s -o /dev/null "127.0.0.1:$port/" && return 0
    kill -0 "$server" 2>/dev/null || { echo "wasmloop serve $* exited" >&2; return 1; }
    sleep 0.02
  done
  echo "wasmloop serve $* does not answer on port $port" >&2
  return 1
}

# A server (as start_server) running FILE: the server installs it itself before it accepts
# (`--action`, as an image's built-in action), so there is no /init to send.
serve_action() {
  local port=$1 file=$2; shift 2
  start_server "$port" --action "$file" "$@"
}

# Initializes the server on PORT with the /init body in BODY_FILE; prints how long it took
# in ms, and fails with the answer unless it was {"ok":true}.
timed_init() {
  local answer seconds
  answer=$(mktemp)
  seconds=$(curl -sS -o "$answer" -w '%{time_total}' -XPOST "127.0.0.1:$1/init" --data-binary @"$2")
  grep -q '"ok":true' "$answer" || { echo "/init failed: $(cat "$answer")" >&2; rm -f "$answer"; return 1; }
  rm -f "$answer"
  awk -v s="$seconds" 'BEGIN { printf "%.1f", s * 1000 }'
}

# wrk, from Debian, for the load-driving scripts.
need_wrk() {
  command -v wrk >/dev/null && return 0
  if [ "$(id -u)" = 0 ]; then apt-get update -qq && apt-get install -y -qq wrk >/dev/null
  else sudo apt-get update -qq && sudo apt-get install -y -qq wrk >/dev/null; fi
}

# The examples and a release build of wasmloop, for the measuring scripts; sets $bin.
build_for_measuring() {
  need_wrk
  native-examples/build.sh 2>/dev/null
  wasm-examples/build.sh 2>/dev/null
  cargo build --release --locked --quiet
  bin="${CARGO_TARGET_DIR:-target}/release/wasmloop"
}
