//! How holdfast reaches a Redis server. Every Redis connection it opens is dialled here: the
//! shared links, a client's own, a subscriber's, a sentinel's, a slot-map query. A
//! connection is a [`Stream`] (TCP, or TLS over it); a [`Target`] says where it goes and how
//! it introduces itself (AUTH, HELLO 3, SELECT, then INFO), and the handshake answers what
//! the server said of itself ([`Server`]).

use super::codec::{decode, encode};
use super::Proto;
use crate::error::{LinkError, LinkErrorKind};
use crate::resp::Output;
use bytes::{Bytes, BytesMut};
use redis_protocol::resp3::types::BytesFrame as Frame;
use rustls::pki_types::ServerName;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

/// A server's address: host and port.
pub type Addr = (String, u16);
use std::time::Duration;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, ReadBuf};
use tokio::net::TcpStream;

/// The TLS side of a target: the trust roots its servers are verified with.
#[derive(Clone)]
pub struct Tls(tokio_rustls::TlsConnector);

impl Tls {
    /// TLS verified by `config`'s trust roots.
    pub fn new(config: rustls::ClientConfig) -> Tls {
        Tls(tokio_rustls::TlsConnector::from(Arc::new(config)))
    }
}

impl std::fmt::Debug for Tls {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Tls")
    }
}

/// Where a connection goes and how it introduces itself. Its `Debug` never shows the
/// password.
#[derive(Clone)]
pub struct Target {
    host: String,
    port: u16,
    username: Option<String>,
    password: Option<String>,
    database: Option<u8>,
    proto: Proto,
    tls: Option<Tls>,
    connection_timeout: Duration,
    /// The reply timeout its senders give: how often a link looks for expired slots.
    response_timeout: Duration,
}

impl std::fmt::Debug for Target {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Target")
            .field("host", &self.host)
            .field("port", &self.port)
            .field("username", &self.username)
            .field("password", &self.password.as_ref().map(|_| "<redacted>"))
            .field("database", &self.database)
            .field("proto", &self.proto)
            .field("tls", &self.tls.is_some())
            .finish()
    }
}

impl Target {
    /// A target at `host:port` (empty for a server found at each dial: the primary the
    /// sentinels name, a Cluster's node, given with [`Target::at`]), speaking `proto`.
    pub fn new(
        (host, port): (String, u16),
        proto: Proto,
        (connection_timeout, response_timeout): (Duration, Duration),
    ) -> Target {
        Target {
            host,
            port,
            username: None,
            password: None,
            database: None,
            proto,
            tls: None,
            connection_timeout,
            response_timeout,
        }
    }

    /// The same target, authenticating as `username` (None: the default user) with
    /// `password`.
    pub fn with_auth(self, username: Option<String>, password: Option<String>) -> Target {
        Target {
            username,
            password,
            ..self
        }
    }

    /// The same target, selecting `database`.
    pub fn with_database(self, database: Option<u8>) -> Target {
        Target { database, ..self }
    }

    /// The same target over TLS (None: plain TCP).
    pub fn with_tls(self, tls: Option<Tls>) -> Target {
        Target { tls, ..self }
    }

    /// The same target at another address (the primary Sentinel named for this dial, a
    /// Cluster's node).
    pub fn at(&self, (host, port): &(String, u16)) -> Target {
        Target {
            host: host.clone(),
            port: *port,
            ..self.clone()
        }
    }

    /// The same target in another protocol.
    pub fn with_proto(&self, proto: Proto) -> Target {
        Target {
            proto,
            ..self.clone()
        }
    }

    /// The address it connects to.
    pub fn addr(&self) -> (String, u16) {
        (self.host.clone(), self.port)
    }

    /// Its protocol.
    pub fn proto(&self) -> Proto {
        self.proto
    }

    /// Its TLS, if it speaks TLS.
    pub fn tls(&self) -> Option<&Tls> {
        self.tls.as_ref()
    }

    /// Longest a connect and its handshake may take.
    pub fn connection_timeout(&self) -> Duration {
        self.connection_timeout
    }

    /// Longest a sent command waits for its reply.
    pub fn response_timeout(&self) -> Duration {
        self.response_timeout
    }
}

/// One connection to a Redis server: TCP, or TLS over TCP.
pub enum Stream {
    /// Plain TCP.
    Tcp(TcpStream),
    /// TLS (boxed: its state is kilobytes).
    Tls(Box<tokio_rustls::client::TlsStream<TcpStream>>),
}

impl Stream {
    /// The TCP connection under it.
    pub fn tcp(&self) -> &TcpStream {
        match self {
            Stream::Tcp(tcp) => tcp,
            Stream::Tls(tls) => tls.get_ref().0,
        }
    }

    /// Makes the coming close a reset: the kernel drops what it still holds unsent, so
    /// nothing holdfast gave up on reaches the server later.
    pub fn reset_on_close(&self) {
        let _ = self.tcp().set_zero_linger();
    }
}

impl AsyncRead for Stream {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<std::io::Result<()>> {
        match self.get_mut() {
            Stream::Tcp(tcp) => Pin::new(tcp).poll_read(cx, buf),
            Stream::Tls(tls) => Pin::new(tls.as_mut()).poll_read(cx, buf),
        }
    }
}

impl AsyncWrite for Stream {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        match self.get_mut() {
            Stream::Tcp(tcp) => Pin::new(tcp).poll_write(cx, buf),
            Stream::Tls(tls) => Pin::new(tls.as_mut()).poll_write(cx, buf),
        }
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[std::io::IoSlice<'_>],
    ) -> Poll<std::io::Result<usize>> {
        match self.get_mut() {
            Stream::Tcp(tcp) => Pin::new(tcp).poll_write_vectored(cx, bufs),
            Stream::Tls(tls) => Pin::new(tls.as_mut()).poll_write_vectored(cx, bufs),
        }
    }

    fn is_write_vectored(&self) -> bool {
        match self {
            Stream::Tcp(tcp) => tcp.is_write_vectored(),
            Stream::Tls(tls) => tls.is_write_vectored(),
        }
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        match self.get_mut() {
            Stream::Tcp(tcp) => Pin::new(tcp).poll_flush(cx),
            Stream::Tls(tls) => Pin::new(tls.as_mut()).poll_flush(cx),
        }
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        match self.get_mut() {
            Stream::Tcp(tcp) => Pin::new(tcp).poll_shutdown(cx),
            Stream::Tls(tls) => Pin::new(tls.as_mut()).poll_shutdown(cx),
        }
    }
}

/// Opens a connection to `host:port` (TLS when `tls` is given), without a Redis handshake
/// (a sentinel's), within `within`.
///
/// # Errors
/// `Unresolved` for a host that does not resolve, `Io` for a refused connect or a failed TLS
/// handshake, `Timeout`, `Config` for a host that is no TLS server name.
pub async fn open(
    (host, port): (&str, u16),
    tls: Option<&Tls>,
    within: Duration,
) -> Result<Stream, LinkError> {
    let open = async {
        // Resolved first, so a name that does not resolve is told from a refused connect.
        let addrs: Vec<std::net::SocketAddr> = tokio::net::lookup_host((host, port))
            .await
            .map_err(|e| {
                LinkError::io_of(
                    LinkErrorKind::Unresolved,
                    format!("the host `{host}` does not resolve"),
                    e,
                )
            })?
            .collect();
        let tcp = TcpStream::connect(&addrs[..])
            .await
            .map_err(|e| LinkError::io(format!("connecting to {host}:{port}"), e))?;
        let _ = tcp.set_nodelay(true);
        let Some(Tls(connector)) = tls else {
            return Ok(Stream::Tcp(tcp));
        };
        let name = ServerName::try_from(host.to_string()).map_err(|_| {
            LinkError::new(
                LinkErrorKind::Config,
                format!("`{host}` is no name a TLS certificate can be checked against"),
            )
        })?;
        let tls = connector
            .connect(name, tcp)
            .await
            .map_err(|e| LinkError::io(format!("the TLS handshake with {host}:{port}"), e))?;
        Ok(Stream::Tls(Box::new(tls)))
    };
    tokio::time::timeout(within, open).await.map_err(|_| {
        LinkError::new(
            LinkErrorKind::Timeout,
            format!("no connection to {host}:{port} within {within:?}"),
        )
    })?
}

/// Opens a connection to `target` and introduces it, within its connection timeout.
///
/// # Errors
/// As [`open`]; `Auth` for a refused password; `Protocol` for another refusal of the
/// handshake (`LOADING`, too many clients).
pub async fn connect(target: &Target) -> Result<(Stream, Server), LinkError> {
    let within = target.connection_timeout;
    let dial = async {
        let mut stream = open((&target.host, target.port), target.tls.as_ref(), within).await?;
        let server = handshake(&mut stream, target).await?;
        Ok::<_, LinkError>((stream, server))
    };
    tokio::time::timeout(within, dial).await.map_err(|_| {
        LinkError::new(
            LinkErrorKind::Timeout,
            format!(
                "no connection to {}:{} within {within:?}",
                target.host, target.port
            ),
        )
    })?
}

/// What a server says of itself in the handshake's `INFO`.
#[derive(Debug, Default)]
pub struct Server {
    /// Its version (major, minor).
    pub version: Option<(u32, u32)>,
    /// The whole `INFO` reply (its default sections: the version, and the memory section
    /// exact mode reads its eviction policy from).
    pub info: String,
}

impl Server {
    /// Whether its `INFO` says it is a primary (`role:master` in its replication section).
    pub fn is_primary(&self) -> bool {
        is_primary(&self.info)
    }
}

/// Whether an `INFO` reply's replication section says `role:master`.
pub fn is_primary(info: &str) -> bool {
    info.lines().any(|line| line.trim_end() == "role:master")
}

/// Introduces the connection: AUTH, HELLO 3 for RESP3, SELECT, then INFO for the version and
/// the eviction policy, all in one write.
async fn handshake<S: AsyncRead + AsyncWrite + Unpin>(
    stream: &mut S,
    target: &Target,
) -> Result<Server, LinkError> {
    let mut out = Output::default();
    let mut expected = Vec::new();
    if let Some(password) = &target.password {
        let mut args = vec![Bytes::from_static(b"AUTH")];
        args.extend(target.username.iter().map(|u| Bytes::from(u.clone())));
        args.push(Bytes::from(password.clone()));
        encode(&mut out, &args);
        expected.push(LinkErrorKind::Auth);
    }
    if target.proto == Proto::Resp3 {
        encode(
            &mut out,
            &[Bytes::from_static(b"HELLO"), Bytes::from_static(b"3")],
        );
        expected.push(LinkErrorKind::Protocol);
    }
    if let Some(db) = target.database.filter(|db| *db != 0) {
        encode(
            &mut out,
            &[Bytes::from_static(b"SELECT"), Bytes::from(db.to_string())],
        );
        expected.push(LinkErrorKind::Protocol);
    }
    // The default sections: `server` and `memory` in one reply, on every Redis version.
    encode(&mut out, &[Bytes::from_static(b"INFO")]);
    expected.push(LinkErrorKind::Protocol);
    out.write_to(stream)
        .await
        .map_err(|e| LinkError::io("writing the handshake", e))?;
    let mut buf = BytesMut::with_capacity(8 * 1024);
    let mut server = Server::default();
    for (i, kind) in expected.iter().enumerate() {
        let frame = loop {
            // The reply to HELLO 3 is RESP3; the ones before it are RESP2, which the RESP3
            // decoder reads too except for nulls, which none of these replies are.
            if let Some(frame) = decode(&mut buf, Proto::Resp3)? {
                break frame;
            }
            let read = stream
                .read_buf(&mut buf)
                .await
                .map_err(|e| LinkError::io("reading the handshake's replies", e))?;
            if read == 0 {
                return Err(LinkError::new(
                    LinkErrorKind::Io,
                    "the backend closed the connection during the handshake",
                ));
            }
        };
        match &frame {
            Frame::SimpleError { data, .. } => {
                return Err(LinkError::new(
                    handshake_error(*kind, data),
                    data.to_string(),
                ));
            }
            Frame::BlobString { data, .. } | Frame::VerbatimString { data, .. }
                if i + 1 == expected.len() =>
            {
                server.version = redis_version(data);
                server.info = String::from_utf8_lossy(data).into_owned();
            }
            _ => {}
        }
    }
    Ok(server)
}

/// The kind of an error reply to the handshake's command expecting `kind`. Only a refused
/// password (`WRONGPASS`, `NOAUTH`, `NOPERM`) is an authentication failure, which waiting
/// does not heal; anything else, such as `-ERR max number of clients reached` (which Redis
/// writes at accept, before it reads AUTH), is a server not taking this connection now.
fn handshake_error(kind: LinkErrorKind, reply: &str) -> LinkErrorKind {
    let prefix = reply.split(' ').next().unwrap_or_default();
    match (kind, prefix) {
        (LinkErrorKind::Auth, "WRONGPASS" | "NOAUTH" | "NOPERM") => LinkErrorKind::Auth,
        (LinkErrorKind::Auth, _) => LinkErrorKind::Protocol,
        (other, _) => other,
    }
}

/// `redis_version:7.0.15` in an INFO reply, as (7, 0).
fn redis_version(info: &[u8]) -> Option<(u32, u32)> {
    let text = std::str::from_utf8(info).ok()?;
    let value = text
        .lines()
        .find_map(|line| line.strip_prefix("redis_version:"))?;
    let mut parts = value.trim().split('.');
    let major = parts.next()?.parse().ok()?;
    let minor = parts.next()?.parse().ok()?;
    Some((major, minor))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Only a refused password fails a dial for good; a server turning connections away
    /// (`max number of clients`, written at accept, so read as the answer to AUTH) heals.
    #[test]
    fn only_a_refused_password_is_an_authentication_failure() {
        use crate::error::{classify, ErrorClass};
        for (expected, reply, class) in [
            (
                LinkErrorKind::Auth,
                "WRONGPASS invalid username-password pair",
                ErrorClass::Other,
            ),
            (
                LinkErrorKind::Auth,
                "NOAUTH Authentication required.",
                ErrorClass::Other,
            ),
            (
                LinkErrorKind::Auth,
                "NOPERM no permissions",
                ErrorClass::Other,
            ),
            (
                LinkErrorKind::Auth,
                "ERR max number of clients reached",
                ErrorClass::NotAttempted,
            ),
            (
                LinkErrorKind::Protocol,
                "ERR max number of clients reached",
                ErrorClass::NotAttempted,
            ),
            (
                LinkErrorKind::Protocol,
                "LOADING loading",
                ErrorClass::NotAttempted,
            ),
        ] {
            let source = LinkError::new(handshake_error(expected, reply), reply);
            let failed = crate::backend::BackendError::Connect { source };
            assert_eq!(classify(&failed), class, "{reply}");
        }
    }

    #[test]
    fn the_version_is_read_from_info() {
        let info = b"# Server\r\nredis_version:7.2.4\r\nredis_mode:standalone\r\n";
        assert_eq!(redis_version(info), Some((7, 2)));
        assert_eq!(redis_version(b"# Server\r\n"), None);
    }

    #[test]
    fn a_target_never_shows_its_password() {
        let target = Target::new(
            ("127.0.0.1".to_string(), 6379),
            Proto::Resp2,
            (Duration::from_secs(1), Duration::from_secs(1)),
        )
        .with_auth(Some("app".to_string()), Some("s3cret".to_string()));
        let shown = format!("{target:?}");
        assert!(
            !shown.contains("s3cret") && shown.contains("redacted"),
            "{shown}"
        );
    }
}
