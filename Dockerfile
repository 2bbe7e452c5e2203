# wasmloop as an OpenWhisk action runtime image: serves /init and /run on port 8080.
# Build: docker build -t wasmloop .    Run: docker run -p 8080:8080 wasmloop
# The sandboxed image (WebAssembly only, a fresh instance per activation, json logs):
#        docker build --target sandboxed -t wasmloop:sandboxed .
# scripts/image-test.sh builds the final stage around a binary built on the host instead,
# and checks the image the way OpenWhisk's invoker runs it.

FROM rust:1.95-slim-bookworm AS build
WORKDIR /src
COPY Cargo.toml Cargo.lock build.rs ./
COPY src ./src
# The workspace's other members: cargo reads the bench's manifest, and builds none of it
# here; the runtime uses `common` (what it shares with the bench).
COPY bench ./bench
COPY common ./common
# `wasmloop new` embeds the SDKs, the templates and the components' WIT world (build.rs
# finds the WASI packages it names in cargo's registry).
COPY sdk ./sdk
COPY templates ./templates
COPY component-examples/wit ./component-examples/wit
# Without `wasmloop bench` (its HTTP client, progress bar and plots): 0.7 MB and 12
# crates less, for a command the image never runs.
RUN cargo build --release --locked --no-default-features --bin wasmloop

FROM debian:bookworm-slim AS runtime
# tini is PID 1: it forwards signals to wasmloop and reaps the orphans native actions
# leave, which would otherwise pile up as zombies against the platform's --pids-limit.
# (Skipped when the base image has it already, as scripts/image-test.sh's does.)
# hadolint ignore=DL3008
RUN command -v tini >/dev/null \
    || (apt-get update && apt-get install -y --no-install-recommends tini \
        && rm -rf /var/lib/apt/lists/*)
# An unprivileged user owns the compile cache; actions are unpacked under /tmp, so that a
# read-only root with a tmpfs on /tmp still serves.
RUN useradd --system --uid 10001 --user-group --no-create-home wasmloop \
    && mkdir -p /var/cache/wasmloop \
    && chown wasmloop:wasmloop /var/cache/wasmloop
COPY --from=build /src/target/release/wasmloop /usr/local/bin/wasmloop
USER 10001:10001
WORKDIR /tmp
ENV WASMLOOP_CACHE_DIR=/var/cache/wasmloop
EXPOSE 8080
ENTRYPOINT ["/usr/bin/tini", "--", "/usr/local/bin/wasmloop"]
CMD ["serve"]

# For tenants' code: only WebAssembly runs (a native executable or script sent to /init
# is refused, where the stock image would run it with the container's privileges), each
# activation gets a fresh instance (nothing of the one before: memory, globals, WASI
# context), and every line is a JSON record naming its activation. Components reach no
# host until a derived image lists some in WASMLOOP_ALLOW_OUTBOUND.
FROM runtime AS sandboxed
ENV WASMLOOP_BACKENDS=http,wasm,component \
    WASMLOOP_MAX_ACTIVATIONS_PER_INSTANCE=1 \
    WASMLOOP_LOG_FORMAT=json

# The stock image, the default target: every backend, as OpenWhisk's runtimes behave.
FROM runtime
