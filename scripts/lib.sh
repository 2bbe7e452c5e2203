# Shared by the scripts that start a wasmloop server: source it, don't run it.

# Waits (at most ~5 s) until something listens on 127.0.0.1:PORT.
wait_for_port() {
  for _ in $(seq 1 250); do
    (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null && return 0
    sleep 0.02
  done
  echo "nothing listens on 127.0.0.1:$1" >&2
  return 1
}

# Writes the /init body for FILE (sent as base64) on stdout.
init_body() {
  printf '{"value":{"code":"%s","binary":true,"main":"main"}}' "$(base64 -w0 "$1")"
}

# Initializes the server on PORT with FILE; prints its answer.
init_action() {
  init_body "$2" | curl -sS -XPOST "127.0.0.1:$1/init" -H 'Content-Type: application/json' --data-binary @-
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
