#!/usr/bin/env bash
# Builds the runtime image and checks it the way OpenWhisk's invoker runs containers: the
# contract cases (tests/it/contract.rs, all three backends) against a container each, then
# the image's own checks (tests/it/image.rs: memory limit, pause, SIGKILL, orphans, a
# read-only root, a derived image with its action built in, size and idle memory), and the
# Dockerfile's sandboxed stage (WebAssembly only, fresh instances, json logs).
#
# On a fresh Debian machine it installs Docker (docker.io) and debootstrap, starts dockerd
# if none runs (and stops it again), and makes a Debian base image with debootstrap, cached
# as a tarball in $WASMLOOP_IMAGE_CACHE: no registry is needed. The image's final stage is
# the Dockerfile's own, around the binary the Dockerfile's build step makes on the host
# (scripts/check-dockerfile.sh); `docker build .` builds it all from source instead.
#
# With --prepare it only installs what it needs and makes the base's tarball, and exits:
# scripts/test.sh runs that in the background while it compiles.
set -euo pipefail
cd "$(dirname "$0")/.."
prepare_only=
[ "${1:-}" != --prepare ] || prepare_only=yes
cache=${WASMLOOP_IMAGE_CACHE:-/var/cache/wasmloop/images}
image=${WASMLOOP_IMAGE:-wasmloop:test}
base=wasmloop-base:bookworm
mkdir -p "$cache"

as_root() { if [ "$(id -u)" = 0 ]; then "$@"; else sudo "$@"; fi; }
if ! command -v dockerd >/dev/null || ! command -v debootstrap >/dev/null; then
  echo "installing docker.io and debootstrap from Debian" >&2
  as_root apt-get update -qq
  DEBIAN_FRONTEND=noninteractive as_root apt-get install -y -qq docker.io debootstrap >/dev/null
fi

tarball=$cache/bookworm-minbase-tini.tar
if [ ! -s "$tarball" ]; then
  echo "making a Debian bookworm base image with debootstrap (once; cached in $cache)" >&2
  rootfs=$(mktemp -d)
  mirror=$(sed -n 's/^URIs: *//p' /etc/apt/sources.list.d/debian.sources 2>/dev/null | head -1)
  as_root debootstrap --variant=minbase --include=tini bookworm "$rootfs" \
    "${mirror:-http://deb.debian.org/debian}" >"$cache/debootstrap.log"
  as_root rm -rf "$rootfs"/var/cache/apt/archives/*.deb "$rootfs"/var/lib/apt/lists/*
  as_root tar -C "$rootfs" -c . >"$tarball.part" && mv "$tarball.part" "$tarball"
  as_root rm -rf "$rootfs"
fi
[ -z "$prepare_only" ] || exit 0

# dockerd writes its own pid here: `$!` would be that of the wrapper that started it.
pidfile=$cache/dockerd.pid
started=
cleanup() {
  if [ -n "$started" ] && [ -s "$pidfile" ]; then
    echo "stopping the dockerd this script started" >&2
    pid=$(cat "$pidfile")
    as_root kill "$pid" 2>/dev/null || true
    for _ in $(seq 150); do as_root kill -0 "$pid" 2>/dev/null || break; sleep 0.2; done
  fi
}
trap cleanup EXIT
# A daemon may run whose socket this user cannot open: ask as root before starting another.
if ! as_root docker info >/dev/null 2>&1; then
  echo "starting dockerd" >&2
  as_root rm -f "$pidfile"
  as_root setsid dockerd --pidfile "$pidfile" >"$cache/dockerd.log" 2>&1 &
  started=yes
  for _ in $(seq 100); do docker info >/dev/null 2>&1 && break; sleep 0.2; done
  docker info >/dev/null 2>&1 || { cat "$cache/dockerd.log" >&2; exit 1; }
fi

if ! docker image inspect "$base" >/dev/null 2>&1; then
  docker import "$tarball" "$base" >/dev/null
fi

binary=${CARGO_TARGET_DIR:-target}/release/wasmloop
[ -x "$binary" ] || scripts/check-dockerfile.sh
context=$(mktemp -d)
trap 'rm -rf "$context"; cleanup' EXIT
cp "$binary" "$context/wasmloop"
# The Dockerfile's final stage, word for word but for its base and where the binary comes from.
sed -n '/^FROM debian:bookworm-slim/,$p' Dockerfile |
  sed "s|^FROM debian:bookworm-slim|FROM $base|; s|^COPY --from=build /src/target/release/wasmloop |COPY wasmloop |" \
    >"$context/Dockerfile"
grep -q '^COPY wasmloop ' "$context/Dockerfile" || { echo "the Dockerfile's final stage changed shape" >&2; exit 1; }
echo "building $image" >&2
DOCKER_BUILDKIT=0 docker build -q -t "$image" "$context" >/dev/null
docker image inspect -f 'image size: {{.Size}} bytes' "$image" >&2
# The Dockerfile's recipe for tenants' code, from the same context.
sandboxed=$image-sandboxed
echo "building $sandboxed (--target sandboxed)" >&2
DOCKER_BUILDKIT=0 docker build -q --target sandboxed -t "$sandboxed" "$context" >/dev/null

echo "running the contract cases and the image's checks against containers" >&2
WASMLOOP_TEST_IMAGE=$image WASMLOOP_TEST_SANDBOXED_IMAGE=$sandboxed \
  cargo test --locked --test it -- contract:: image:: --include-ignored
