# holdfast: a multi-stage build; the runtime image holds the binary and nothing else to run.
#
# Base images are pinned by version, so a rebuild gets the same toolchain and userland rather
# than whatever a floating tag points at that day. A tag can still be pushed again: in a
# registry you control, pin by digest as well (`FROM debian:bookworm-20251229-slim@sha256:…`)
# and let a bot propose the bumps. tests/offline/image.rs checks the rules this file follows.

# The toolchain the project is built and tested with (Cargo.toml's rust-version is the floor).
FROM rust:1.95.0-bookworm AS build
WORKDIR /src

# Dependencies first, in a layer of their own that depends only on the manifest, the lockfile
# and .cargo (LIBSQLITE3_FLAGS), so a change to src/ recompiles holdfast alone. Stub sources
# rather than BuildKit cache mounts: the layer works with any builder and travels with a
# registry layer cache to a fresh CI runner, where a cache mount would start empty.
COPY Cargo.toml Cargo.lock ./
COPY .cargo ./.cargo
# cargo reads every target the manifest names, so each needs a file: the binary, the library
# and the [[bench]]es (benches/hot_path.rs, benches/sqlite_drivers.rs). The stubs' own
# artifacts are then removed, or cargo could take them for up to date when the real sources
# come in.
RUN mkdir -p src benches \
    && echo 'fn main() {}' > src/main.rs \
    && touch src/lib.rs benches/hot_path.rs benches/sqlite_drivers.rs \
    && cargo build --release --locked --bin holdfast \
    && rm -rf src benches target/release/holdfast \
        target/release/.fingerprint/holdfast-* \
        target/release/deps/holdfast-* \
        target/release/deps/libholdfast-*
COPY src ./src
COPY benches ./benches
RUN cargo build --release --locked --bin holdfast

FROM debian:bookworm-20251229-slim
LABEL org.opencontainers.image.title="holdfast" \
      org.opencontainers.image.description="A Redis-protocol sidecar that holds requests through backend failover without changing what the client sees" \
      org.opencontainers.image.version="0.1.0" \
      org.opencontainers.image.licenses="MIT OR Apache-2.0" \
      org.opencontainers.image.documentation="README.md and docs/ in the source repository" \
      org.opencontainers.image.base.name="debian:bookworm-20251229-slim"
# ca-certificates: a `rediss://` backend without `tls_ca` verifies its server against the
# system's trust store, which the slim image does not ship.
# The user and group get a fixed id, 10001, so files have an owner and USER below can be
# numeric. data/ is where the image's configuration keeps its SQLite file (`data/holdfast.db`,
# relative to the WORKDIR): created here, owned by that user, because under a read-only root
# filesystem holdfast cannot create it, and VOLUME below copies its ownership into the volume.
# DL3008 (pin apt versions) is ignored: Debian drops a superseded version from the archive
# when it ships a security update, so a pinned ca-certificates would break the build; the
# dated base tag fixes everything else.
# hadolint ignore=DL3008
RUN apt-get update \
    && apt-get install -y --no-install-recommends ca-certificates \
    && rm -rf /var/lib/apt/lists/* \
    && groupadd --system --gid 10001 holdfast \
    && useradd --system --uid 10001 --gid 10001 --home-dir /var/lib/holdfast --create-home \
        --shell /usr/sbin/nologin holdfast \
    && mkdir -p /var/lib/holdfast/data \
    && chown 10001:10001 /var/lib/holdfast/data
COPY --from=build /src/target/release/holdfast /usr/local/bin/holdfast
# The image's defaults come from a file a mount replaces whole (no ENV: the environment would
# override the keys of a configuration mounted over this one, `listen` included).
COPY deploy/image/holdfast.toml /etc/holdfast/holdfast.toml
# Numeric: with a user name, Kubernetes' runAsNonRoot cannot tell the user is not root and
# refuses to start the container.
USER 10001:10001
WORKDIR /var/lib/holdfast
# The SQLite file's directory: a volume keeps the data past the container and stays writable
# under a read-only root (Docker mounts one here; on Kubernetes mount an emptyDir or a
# PersistentVolumeClaim at this path). The path is not moved with an ENV
# HOLDFAST_BACKENDS__LOCAL__PATH: the image's environment reaches every configuration mounted
# over the default one, and one without a `local` backend would then fail to load.
VOLUME ["/var/lib/holdfast/data"]
EXPOSE 6380 9380
# No HEALTHCHECK: the image has no HTTP client; the orchestrator probes /healthz and /readyz
# on the metrics port (deploy/kubernetes, deploy/compose).
ENTRYPOINT ["/usr/local/bin/holdfast"]
CMD ["--config", "/etc/holdfast/holdfast.toml"]
