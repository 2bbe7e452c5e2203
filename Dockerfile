# wasmloop as an OpenWhisk action runtime image: serves /init and /run on port 8080.
# Build: docker build -t wasmloop .    Run: docker run -p 8080:8080 wasmloop

FROM rust:1.95-slim-bookworm AS build
WORKDIR /src
COPY Cargo.toml Cargo.lock ./
COPY src ./src
# Without `wasmloop bench` (its HTTP client, progress bar and plots): 0.7 MB and 12
# crates less, for a command the image never runs.
RUN cargo build --release --locked --no-default-features --bin wasmloop

FROM debian:bookworm-slim
# An unprivileged user owns the two folders the runtime writes: actions and compiled modules.
RUN useradd --system --uid 10001 --user-group --no-create-home wasmloop \
    && mkdir -p /action /var/cache/wasmloop \
    && chown wasmloop:wasmloop /action /var/cache/wasmloop
COPY --from=build /src/target/release/wasmloop /usr/local/bin/wasmloop
USER 10001:10001
WORKDIR /action
ENV WASMLOOP_ACTION_DIR=/action \
    WASMLOOP_CACHE_DIR=/var/cache/wasmloop
EXPOSE 8080
ENTRYPOINT ["/usr/local/bin/wasmloop"]
CMD ["serve"]
