#!/bin/sh
# A native ActionLoop action in POSIX sh: {"name":"Mike"} -> {"message":"Hello, Mike!"}.
# The runtime passes no PATH, so this uses shell builtins only; it finds "name" with
# parameter expansion, which is enough for a demo but is no JSON parser.

hello() {
  name=Stranger
  case "$1" in
    *'"name":"'*)
      rest=${1#*\"name\":\"}
      name=${rest%%\"*}
      ;;
  esac
  echo "hello: greeting $name" >&2
  printf '{"message":"Hello, %s!"}\n' "$name"
}

# Given the JSON as first argument, run once and print the result on stdout.
if [ $# -gt 0 ]; then
  hello "$1"
  exit 0
fi

if [ -n "$__OW_WAIT_FOR_ACK" ]; then
  echo '{"ok":true}' >&3
fi
while IFS= read -r line; do
  hello "$line" >&3
done
