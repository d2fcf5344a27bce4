//! TLS on the client listener and to a `rediss://` backend, with certificates made for the
//! test (rcgen) and a real redis-server speaking TLS.

use crate::support;

use crate::support::resp::frame_len;
use crate::support::tls::{tls_redis, Certs};
use crate::support::*;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::time::timeout;

async fn tls_command(
    stream: &mut tokio_rustls::client::TlsStream<TcpStream>,
    args: &[&str],
) -> Vec<u8> {
    stream.write_all(&encode_str(args)).await.unwrap();
    let mut buf = Vec::new();
    let mut chunk = [0u8; 4096];
    loop {
        if let Some(len) = frame_len(&buf) {
            buf.truncate(len);
            return buf;
        }
        let n = timeout(Duration::from_secs(10), stream.read(&mut chunk))
            .await
            .unwrap()
            .unwrap();
        assert!(n > 0, "closed");
        buf.extend_from_slice(&chunk[..n]);
    }
}

async fn tls_connect(addr: &str, ca: &Path) -> tokio_rustls::client::TlsStream<TcpStream> {
    let config = holdfast::tls::client_config(ca).unwrap();
    let connector = tokio_rustls::TlsConnector::from(Arc::new(config));
    let tcp = TcpStream::connect(addr).await.unwrap();
    let name = rustls::pki_types::ServerName::try_from("127.0.0.1").unwrap();
    connector.connect(name, tcp).await.unwrap()
}

#[tokio::test(flavor = "multi_thread")]
async fn clients_speak_tls_to_holdfast() {
    let certs = Certs::new();
    let redis = RedisServer::start();
    let config = format!(
        "[server.tls]\ncert = \"{}\"\nkey = \"{}\"\n{}",
        certs.path("cert.pem").display(),
        certs.path("key.pem").display(),
        one_backend(&redis.url(), "tls_clients", "")
    );
    let proxy = Proxy::start(&config).await;
    let mut conn = tls_connect(&proxy.addr, &certs.path("ca.pem")).await;
    assert_eq!(tls_command(&mut conn, &["PING"]).await, b"+PONG\r\n");
    assert_eq!(
        tls_command(&mut conn, &["SET", "k", "over-tls"]).await,
        b"+OK\r\n"
    );
    assert_eq!(redis.cmd(&["GET", "k"]), "$8\r\nover-tls\r\n");

    // A clear-text client gets no Redis service: the handshake fails and it is closed.
    let mut plain = proxy.connect().await;
    plain.send(&encode_str(&["GET", "k"])).await;
    let outcome = plain.try_read_reply(Duration::from_secs(15)).await;
    assert!(
        matches!(outcome, Err(ref e) if e.is_disconnect()),
        "{outcome:?}"
    );
    proxy.stop().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn holdfast_speaks_tls_to_a_rediss_backend() {
    let certs = Certs::new();
    // The clear-text port stays for the test's own checks; holdfast uses the TLS one.
    let (redis, tls_port) = tls_redis(&certs);
    let ca = certs.path("ca.pem").display().to_string();
    let config = one_backend(&format!("rediss://127.0.0.1:{tls_port}"), "tls_backend", "").replace(
        "pool_size = 2",
        &format!("pool_size = 2\ntls_ca = \"{ca}\""),
    );
    let proxy = Proxy::start(&config).await;
    let mut conn = proxy.connect().await;
    assert_eq!(conn.command(&["SET", "k", "to-rediss"]).await, b"+OK\r\n");
    assert_eq!(conn.command(&["GET", "k"]).await, b"$9\r\nto-rediss\r\n");
    assert_eq!(redis.cmd(&["GET", "k"]), "$9\r\nto-rediss\r\n");
    proxy.stop().await;
}

#[test]
fn bad_tls_files_name_the_key() {
    let dir = tempfile::tempdir().unwrap();
    let empty = dir.path().join("empty.pem");
    std::fs::write(&empty, "").unwrap();
    let text = format!(
        "[server.tls]\ncert = \"{0}\"\nkey = \"{0}\"\n[backends.m]\nkind = \"redis\"\nurl = \"redis://127.0.0.1:1\"\n[[namespaces]]\nname = \"d\"\nbackend = \"m\"\n",
        empty.display()
    );
    let message = holdfast::config::Config::from_toml(&text)
        .unwrap_err()
        .to_string();
    assert!(
        message.contains("server.tls") && message.contains("no certificate"),
        "{message}"
    );
    let text = format!(
        "[backends.m]\nkind = \"redis\"\nurl = \"rediss://127.0.0.1:1\"\ntls_ca = \"{}\"\n[[namespaces]]\nname = \"d\"\nbackend = \"m\"\n",
        empty.display()
    );
    let message = holdfast::config::Config::from_toml(&text)
        .unwrap_err()
        .to_string();
    assert!(message.contains("backends.m.tls_ca"), "{message}");
}

/// A short retry schedule, so a connection that cannot be made answers within seconds.
const QUICK: &str = "[defaults]\nreply_mode = \"fast\"\nacquire_timeout = \"2s\"\n[defaults.retry]\nmax_attempts = 5\nmin_delay = \"200ms\"\nmax_delay = \"1s\"\njitter = 0.0\n";

/// Without `tls_ca`, a `rediss://` backend is verified against the system's trust store
/// (here the environment's `SSL_CERT_FILE` holding the test's CA, as a managed Redis's CA
/// would be in the image's store); a store without that CA refuses the server.
#[tokio::test(flavor = "multi_thread")]
async fn a_rediss_backend_is_verified_against_the_system_store() {
    let certs = Certs::new();
    let stranger = Certs::new();
    let (redis, tls_port) = tls_redis(&certs);
    let body = format!(
        "{QUICK}[backends.main]\nkind = \"redis\"\nurl = \"rediss://127.0.0.1:{tls_port}\"\n[[namespaces]]\nname = \"n\"\nbackend = \"main\"\n"
    );
    let trusted = Spawned::start(&body, &[("SSL_CERT_FILE", &certs.path("ca.pem"))]);
    let mut conn = trusted.connect().await;
    assert_eq!(conn.command(&["SET", "k", "verified"]).await, b"+OK\r\n");
    assert_eq!(redis.cmd(&["GET", "k"]), "$8\r\nverified\r\n");

    let untrusted = Spawned::start(&body, &[("SSL_CERT_FILE", &stranger.path("ca.pem"))]);
    let mut conn = untrusted.connect().await;
    let reply = String::from_utf8_lossy(&conn.command(&["SET", "k", "spoofed"]).await).into_owned();
    assert!(reply.starts_with("-UNAVAILABLE not applied"), "{reply}");
    assert_eq!(redis.cmd(&["GET", "k"]), "$8\r\nverified\r\n");
}

/// A password that needs encoding in a URL.
const PG_PASSWORD: &str = "p+a&s%s#w@o/r: d";

/// A PostgreSQL that takes `app` only over TLS with a password, and that password's file.
fn secure_postgres(certs: &Certs) -> Option<(support::postgres::PgServer, tempfile::TempDir)> {
    if !support::postgres::available() {
        eprintln!("skipping: no PostgreSQL (tests/run installs it)");
        return None;
    }
    let server = support::postgres::PgServer::start_secure(
        &certs.path("cert.pem"),
        &certs.path("key.pem"),
        PG_PASSWORD,
    );
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("pg-password"), format!("{PG_PASSWORD}\n")).unwrap();
    Some((server, dir))
}

fn pg_body(port: u16, query: &str, password_file: Option<&Path>) -> String {
    let file = password_file.map_or(String::new(), |p| {
        format!("password_file = \"{}\"\n", p.display())
    });
    format!(
        "{QUICK}[backends.pg]\nkind = \"postgres\"\nurl = \"postgres://app@127.0.0.1:{port}/holdfast{query}\"\n{file}[[namespaces]]\nname = \"pg_tls\"\nbackend = \"pg\"\n"
    )
}

/// `sslmode=require` (what a managed PostgreSQL asks for) reaches a server that takes only
/// TLS, logged in with the password from `password_file`; without that file, or without TLS,
/// nothing is applied.
#[tokio::test(flavor = "multi_thread")]
async fn postgres_over_tls_with_a_password_file() {
    let certs = Certs::new();
    let Some((server, secrets)) = secure_postgres(&certs) else {
        return;
    };
    let password = secrets.path().join("pg-password");
    let port = server.port();
    let proxy = Proxy::start(&pg_body(port, "?sslmode=require", Some(&password))).await;
    let mut conn = proxy.connect().await;
    assert_eq!(conn.command(&["SET", "k", "over-tls"]).await, b"+OK\r\n");
    assert_eq!(conn.command(&["GET", "k"]).await, b"$8\r\nover-tls\r\n");
    let encrypted = server.psql_db(
        "holdfast",
        "SELECT count(*) FROM pg_stat_ssl JOIN pg_stat_activity USING (pid) WHERE ssl AND usename = 'app'",
    );
    assert_ne!(
        encrypted.trim(),
        "0",
        "holdfast's sessions are not encrypted"
    );
    proxy.stop().await;

    // Refused logins: an error, the write not applied (a refused password is not retried).
    for (key, body) in [
        ("no-password", pg_body(port, "?sslmode=require", None)),
        ("no-tls", pg_body(port, "?sslmode=disable", Some(&password))),
    ] {
        let proxy = Proxy::start(&body).await;
        let mut conn = proxy.connect().await;
        let reply = String::from_utf8_lossy(&conn.command(&["SET", key, "x"]).await).into_owned();
        assert!(reply.starts_with('-'), "{key}: {reply}");
        proxy.stop().await;
    }
    let proxy = Proxy::start(&pg_body(port, "?sslmode=require", Some(&password))).await;
    let mut conn = proxy.connect().await;
    assert_eq!(
        conn.command(&["EXISTS", "no-password", "no-tls"]).await,
        b":0\r\n"
    );
    proxy.stop().await;
}

/// `sslmode=verify-full` checks the server's certificate and name: against `sslrootcert`,
/// or against the system's store; a store without the server's CA refuses it.
#[tokio::test(flavor = "multi_thread")]
async fn postgres_verify_full_checks_the_certificate() {
    let certs = Certs::new();
    let stranger = Certs::new();
    let Some((server, secrets)) = secure_postgres(&certs) else {
        return;
    };
    let password = secrets.path().join("pg-password");
    let port = server.port();
    let rootcert = format!(
        "?sslmode=verify-full&sslrootcert={}",
        certs.path("ca.pem").display()
    );
    let proxy = Proxy::start(&pg_body(port, &rootcert, Some(&password))).await;
    let mut conn = proxy.connect().await;
    assert_eq!(conn.command(&["SET", "k", "rootcert"]).await, b"+OK\r\n");
    proxy.stop().await;

    let body = pg_body(port, "?sslmode=verify-full", Some(&password));
    let system = Spawned::start(&body, &[("SSL_CERT_FILE", &certs.path("ca.pem"))]);
    let mut conn = system.connect().await;
    assert_eq!(conn.command(&["SET", "k", "system"]).await, b"+OK\r\n");
    assert_eq!(conn.command(&["GET", "k"]).await, b"$6\r\nsystem\r\n");

    let untrusted = Spawned::start(&body, &[("SSL_CERT_FILE", &stranger.path("ca.pem"))]);
    let mut conn = untrusted.connect().await;
    let reply = String::from_utf8_lossy(&conn.command(&["SET", "k", "spoofed"]).await).into_owned();
    assert!(reply.starts_with("-UNAVAILABLE not applied"), "{reply}");
}
