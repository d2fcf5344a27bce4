//! The Redis backend (standalone) through fred.
//!
//! fred's own replay is off (`max_command_attempts = 1`, fail fast): a command that was
//! written and lost comes back as an error for the retry loop to count, never re-sent below
//! it. Connections reconnect in the background; a dispatch that finds its connection down
//! waits for it at most the acquire timeout and then fails as not sent. Each client
//! connection is pinned to one backend connection, so `WAIT` sees that client's writes.

use super::{BackendError, Proto, Request};
use crate::config::RedisConfig;
use fred::interfaces::{ClientLike, EventInterface};
use fred::prelude::{Client, ReconnectPolicy};
use fred::types::config::{
    ConnectionConfig, Options, PerformanceConfig, TcpConfig, UnresponsiveConfig,
};
use fred::types::{ClusterHash, CustomCommand, RespVersion, Value};
use redis_protocol::resp3::types::BytesFrame as Frame;
use std::time::Duration;
use tokio::sync::OnceCell;

/// How often a dropped backend connection is re-dialled.
const RECONNECT_DELAY_MS: u32 = 100;

/// A standalone Redis with one pool per protocol version.
pub struct RedisBackend {
    /// The `[backends]` key.
    name: String,
    /// Connection settings shared by every client built for this backend.
    config: fred::types::config::Config,
    /// Connection timeouts, replay off.
    connection: ConnectionConfig,
    /// Longest wait for a reply to a sent, non-blocking command.
    response_timeout: Duration,
    /// Pool size, per protocol.
    pool_size: usize,
    /// RESP2 connections, opened at start.
    resp2: Vec<Client>,
    /// RESP3 connections, opened when the first RESP3 client needs one.
    resp3: OnceCell<Vec<Client>>,
}

impl RedisBackend {
    /// Builds the pool and starts connecting in the background.
    ///
    /// # Errors
    /// [`BackendError::Unsupported`] when the URL does not parse.
    pub fn new(name: &str, config: &RedisConfig) -> Result<RedisBackend, BackendError> {
        let parsed = fred::types::config::Config::from_url(&config.url).map_err(|e| {
            BackendError::Unsupported {
                what: format!("backends.{name}.url: {}", e.details()),
            }
        })?;
        let connection = ConnectionConfig {
            connection_timeout: config.connection_timeout,
            internal_command_timeout: config.connection_timeout,
            max_command_attempts: 1,
            max_redirections: 0,
            unresponsive: UnresponsiveConfig::default(),
            reconnect_on_auth_error: false,
            auto_client_setname: false,
            tcp: TcpConfig {
                nodelay: Some(true),
                ..TcpConfig::default()
            },
            ..ConnectionConfig::default()
        };
        let mut backend = RedisBackend {
            name: name.to_string(),
            config: parsed,
            connection,
            response_timeout: config.response_timeout,
            pool_size: config.pool_size,
            resp2: Vec::new(),
            resp3: OnceCell::new(),
        };
        backend.resp2 = backend.open_pool(RespVersion::RESP2);
        Ok(backend)
    }

    fn client(&self, version: RespVersion) -> Client {
        let mut config = self.config.clone();
        config.version = version;
        // The client keeps re-dialling from its first connect on, even when the backend is down
        // at start (fred's client-level fail_fast would give up after one try); each command
        // still fails fast (see `send`) instead of waiting in fred's queue for a reconnect.
        config.fail_fast = false;
        let perf = PerformanceConfig {
            default_command_timeout: Duration::ZERO,
            ..PerformanceConfig::default()
        };
        Client::new(
            config,
            Some(perf),
            Some(self.connection.clone()),
            Some(ReconnectPolicy::new_constant(0, RECONNECT_DELAY_MS)),
        )
    }

    fn open_pool(&self, version: RespVersion) -> Vec<Client> {
        (0..self.pool_size)
            .map(|_| {
                let client = self.client(version.clone());
                // The handle is not awaited: the connection task lives as long as the client.
                let _task = client.connect();
                client
            })
            .collect()
    }

    /// The `[backends]` key.
    pub fn name(&self) -> &str {
        &self.name
    }

    async fn pinned(&self, proto: Proto, pin: u64) -> &Client {
        let pool = match proto {
            Proto::Resp2 => &self.resp2,
            Proto::Resp3 => {
                self.resp3
                    .get_or_init(|| async { self.open_pool(RespVersion::RESP3) })
                    .await
            }
        };
        // pool_size is validated to be at least 1.
        &pool[(pin % pool.len() as u64) as usize]
    }

    /// Sends one request on the client's pinned connection.
    ///
    /// # Errors
    /// [`BackendError`]: `AcquireTimeout`/`Connect` when nothing was sent, `Sent` when the
    /// request was handed to the connection, `Reply` for an error reply.
    pub async fn dispatch(
        &self,
        request: &Request<'_>,
        acquire_timeout: Duration,
    ) -> Result<Frame, BackendError> {
        let client = self.pinned(request.proto, request.pin).await;
        ensure_connected(client, acquire_timeout).await?;
        send(client, request, self.response_timeout).await
    }

    /// A connection of its own, connected, for connection-bound commands.
    ///
    /// # Errors
    /// [`BackendError::Connect`] or [`BackendError::AcquireTimeout`].
    pub async fn dedicated(
        &self,
        proto: Proto,
        acquire_timeout: Duration,
    ) -> Result<DedicatedRedis, BackendError> {
        let version = match proto {
            Proto::Resp2 => RespVersion::RESP2,
            Proto::Resp3 => RespVersion::RESP3,
        };
        let mut config = self.config.clone();
        config.version = version;
        config.fail_fast = true;
        // No reconnect: a dedicated connection that breaks loses its WATCH or blocking
        // state, which the client must learn about, not have silently replaced.
        let client = Client::new(config, None, Some(self.connection.clone()), None);
        let _task = client.connect();
        ensure_connected(&client, acquire_timeout).await?;
        Ok(DedicatedRedis {
            client,
            response_timeout: self.response_timeout,
        })
    }

    /// Whether a PING is answered within `timeout`.
    pub async fn ready(&self, timeout: Duration) -> bool {
        let Some(client) = self.resp2.first() else {
            return false;
        };
        let args = [bytes::Bytes::from_static(b"PING")];
        let request = Request {
            args: &args,
            proto: Proto::Resp2,
            pin: 0,
            blocking: false,
        };
        let attempt = async {
            ensure_connected(client, timeout).await?;
            send(client, &request, timeout).await
        };
        matches!(tokio::time::timeout(timeout, attempt).await, Ok(Ok(_)))
    }
}

/// Waits until `client` is connected, at most `acquire_timeout`. A reconnect attempt that
/// fails meanwhile (refused, timed out) ends the wait at once as not sent, so a backend that
/// refuses connections during a failover costs a backoff step, not a whole acquire timeout.
async fn ensure_connected(client: &Client, acquire_timeout: Duration) -> Result<(), BackendError> {
    if client.is_connected() {
        return Ok(());
    }
    let mut errors = client.error_rx();
    let wait = async {
        tokio::select! {
            connected = client.wait_for_connect() => {
                connected.map_err(|source| BackendError::Connect { source })
            }
            failed = errors.recv() => match failed {
                Ok((source, _)) => Err(BackendError::Connect { source }),
                // The event stream closed or lagged: fall back to waiting for the connection.
                Err(_) => client
                    .wait_for_connect()
                    .await
                    .map_err(|source| BackendError::Connect { source }),
            },
        }
    };
    match tokio::time::timeout(acquire_timeout, wait).await {
        Ok(result) => result,
        Err(_) => Err(BackendError::AcquireTimeout {
            waited: acquire_timeout,
        }),
    }
}

async fn send(
    client: &Client,
    request: &Request<'_>,
    response_timeout: Duration,
) -> Result<Frame, BackendError> {
    let Some((name, rest)) = request.args.split_first() else {
        return Err(BackendError::Unsupported {
            what: "empty command".to_string(),
        });
    };
    // Names come from the command table, so they are ASCII.
    let name = String::from_utf8_lossy(name).into_owned();
    let command = CustomCommand::new(name, ClusterHash::FirstKey, request.blocking);
    let args: Vec<Value> = rest.iter().map(|a| Value::Bytes(a.clone())).collect();
    let options = Options {
        max_attempts: Some(1),
        max_redirections: Some(0),
        // Zero means no timeout in fred: a blocking command waits as long as it asked to.
        timeout: Some(if request.blocking {
            Duration::ZERO
        } else {
            response_timeout
        }),
        fail_fast: true,
        ..Options::default()
    };
    match client
        .with_options(&options)
        .custom_raw(command, args)
        .await
    {
        Ok(frame) => BackendError::check_reply(frame),
        Err(source) => Err(BackendError::Sent { source }),
    }
}

/// A fred client owned by one client connection (WATCH/MULTI/EXEC, blocking commands).
pub struct DedicatedRedis {
    /// The connection.
    client: Client,
    /// Reply timeout for non-blocking commands.
    response_timeout: Duration,
}

impl DedicatedRedis {
    /// Sends one request; a broken connection is not re-dialled.
    ///
    /// # Errors
    /// [`BackendError`].
    pub async fn send(&self, request: &Request<'_>) -> Result<Frame, BackendError> {
        if !self.client.is_connected() {
            return Err(BackendError::AcquireTimeout {
                waited: Duration::ZERO,
            });
        }
        send(&self.client, request, self.response_timeout).await
    }

    /// Closes the connection.
    pub async fn close(self) {
        let _ = self.client.quit().await;
    }
}
