//! `[server]`: the client listener, its limits and its password.

use super::secrets::string_like;
use super::{invalid, ConfigError};
use serde::{Deserialize, Serialize};
use std::net::SocketAddr;
use std::time::Duration;

/// `[server]`
#[derive(Clone, Debug, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ServerConfig {
    /// The Redis endpoint clients connect to. Loopback unless configured otherwise.
    pub listen: SocketAddr,
    /// `/metrics`, `/healthz`, `/readyz`, `/backendz`.
    pub metrics_listen: SocketAddr,
    /// Serve `/config` (the effective configuration, secrets redacted) on the metrics port.
    /// Off by default: the port answers without authentication, and the image binds it on
    /// every interface for Prometheus and the kubelet.
    #[serde(default)]
    pub serve_config: bool,
    /// Label the per-request series (`holdfast_requests_total`, `holdfast_dispatches_total`,
    /// `holdfast_request_duration_seconds`, reply corrections) by command name. Off by
    /// default: their `command` label is then the command's kind, `read` or `write`, so a
    /// scrape holds a few series per namespace instead of dozens per command (a histogram is
    /// 16). Applied at start and at each reload.
    #[serde(default)]
    pub metrics_per_command: bool,
    /// When set, clients must `AUTH` (or `HELLO ... AUTH`) with it before anything else.
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "string_like"
    )]
    pub requirepass: Option<String>,
    /// A file holding `requirepass` (a mounted secret); its trailing newline is dropped.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub requirepass_file: Option<std::path::PathBuf>,
    /// Client connections beyond this are refused with an error.
    pub max_clients: usize,
    /// Largest request (one command with its arguments) accepted, in bytes; a larger one
    /// closes that connection, since its framing cannot be trusted to be skipped. The
    /// headers are checked as they arrive, so an announced size over a limit is refused
    /// before its body is buffered.
    pub max_request_bytes: usize,
    /// Largest argument (bulk string) accepted, refused from its header.
    pub max_bulk_bytes: usize,
    /// Most arguments in one request, refused from its header.
    pub max_arguments: usize,
    /// Most keys in one multi-key command (MGET, DEL, ...).
    pub max_keys_per_command: usize,
    /// Most commands queued between MULTI and EXEC; one more is refused and the
    /// transaction discarded (a queue is held in memory until EXEC).
    pub max_queued_commands: usize,
    /// Most pipelined requests of one client taken from its buffer at once, and so the most
    /// whose first dispatch is sent ahead together (benches/results.md).
    /// Bounds the memory a deep pipeline takes per connection.
    pub max_pipeline: usize,
    /// Most Pub/Sub messages waiting for one subscribed client that does not read them; at
    /// one more the client is disconnected, as Redis does past `client-output-buffer-limit
    /// pubsub` (its library reconnects and subscribes again).
    pub max_pubsub_backlog: usize,
    /// Runtime threads serving clients. 1 (the default) runs everything on one thread, as
    /// twemproxy does: a sidecar shares its host's cores with the application and the
    /// backend, and one thread spares every cross-thread wake-up. 0: one per core. Read at
    /// start only.
    pub threads: usize,
    /// A client silent for this long is disconnected; `0s` (the default) never, as Redis.
    #[serde(with = "humantime_serde")]
    pub idle_timeout: Duration,
    /// How long shutdown waits for held requests before closing connections.
    #[serde(with = "humantime_serde")]
    pub shutdown_grace: Duration,
    /// TLS on the client listener; off when absent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tls: Option<ServerTls>,
}

/// `[server.tls]`: the listener speaks TLS only.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ServerTls {
    /// PEM certificate chain, the server's certificate first.
    pub cert: std::path::PathBuf,
    /// PEM private key.
    pub key: std::path::PathBuf,
}

impl Default for ServerConfig {
    fn default() -> Self {
        ServerConfig {
            listen: SocketAddr::from(([127, 0, 0, 1], 6380)),
            metrics_listen: SocketAddr::from(([127, 0, 0, 1], 9380)),
            serve_config: false,
            metrics_per_command: false,
            requirepass: None,
            requirepass_file: None,
            max_clients: 10_000,
            max_request_bytes: 64 * 1024 * 1024,
            max_bulk_bytes: 64 * 1024 * 1024,
            max_arguments: 1024 * 1024,
            max_keys_per_command: 10_000,
            max_queued_commands: 10_000,
            max_pipeline: 256,
            max_pubsub_backlog: 10_000,
            threads: 1,
            idle_timeout: Duration::ZERO,
            shutdown_grace: Duration::from_secs(30),
            tls: None,
        }
    }
}

impl ServerConfig {
    /// Checks `[server]`.
    pub(super) fn check(&self) -> Result<(), ConfigError> {
        if self.max_clients == 0 {
            return Err(invalid("server.max_clients", "must be at least 1"));
        }
        if self.max_request_bytes < 1024 {
            return Err(invalid("server.max_request_bytes", "must be at least 1024"));
        }
        if let Some(tls) = &self.tls {
            crate::tls::acceptor(&tls.cert, &tls.key)
                .map_err(|e| invalid("server.tls", e.to_string()))?;
        }
        if self.max_bulk_bytes < 1024 {
            return Err(invalid("server.max_bulk_bytes", "must be at least 1024"));
        }
        if self.max_arguments < 3 {
            return Err(invalid("server.max_arguments", "must be at least 3"));
        }
        if self.max_queued_commands == 0 {
            return Err(invalid("server.max_queued_commands", "must be at least 1"));
        }
        if self.max_pubsub_backlog == 0 {
            return Err(invalid("server.max_pubsub_backlog", "must be at least 1"));
        }
        if self.max_pipeline == 0 || self.max_pipeline > 65_536 {
            return Err(invalid(
                "server.max_pipeline",
                "must be between 1 and 65536",
            ));
        }
        if self.threads > 1024 {
            return Err(invalid("server.threads", "must be between 0 and 1024"));
        }
        if self.max_keys_per_command == 0 {
            return Err(invalid("server.max_keys_per_command", "must be at least 1"));
        }
        Ok(())
    }
}
