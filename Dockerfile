# holdfast: a multi-stage build; the runtime image holds the binary and nothing else to run.
FROM rust:1-bookworm AS build
WORKDIR /src
COPY Cargo.toml Cargo.lock ./
COPY .cargo ./.cargo
COPY src ./src
COPY benches ./benches
RUN cargo build --release --locked --bin holdfast

FROM debian:bookworm-slim
RUN useradd --system --uid 10001 --home-dir /var/lib/holdfast --create-home holdfast
COPY --from=build /src/target/release/holdfast /usr/local/bin/holdfast
COPY config/holdfast.toml /etc/holdfast/holdfast.toml
USER holdfast
WORKDIR /var/lib/holdfast
# In a container the listeners must leave loopback to be reachable from the pod's peers.
ENV HOLDFAST_SERVER__LISTEN=0.0.0.0:6380 HOLDFAST_SERVER__METRICS_LISTEN=0.0.0.0:9380
EXPOSE 6380 9380
ENTRYPOINT ["/usr/local/bin/holdfast"]
CMD ["--config", "/etc/holdfast/holdfast.toml"]
