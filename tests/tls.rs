//! TLS on the client listener and to a `rediss://` backend, with certificates made for the
//! test (rcgen) and a real redis-server speaking TLS.

mod support;

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;
use support::resp::frame_len;
use support::*;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::time::timeout;

/// A CA and a certificate it signed for 127.0.0.1 and localhost, as PEM files.
struct Certs {
    dir: tempfile::TempDir,
}

impl Certs {
    fn new() -> Certs {
        let dir = tempfile::tempdir().unwrap();
        let ca_key = rcgen::KeyPair::generate().unwrap();
        let mut ca_params = rcgen::CertificateParams::new(Vec::<String>::new()).unwrap();
        ca_params.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
        let ca = ca_params.self_signed(&ca_key).unwrap();
        let key = rcgen::KeyPair::generate().unwrap();
        let params =
            rcgen::CertificateParams::new(vec!["127.0.0.1".to_string(), "localhost".to_string()])
                .unwrap();
        let cert = params.signed_by(&key, &ca, &ca_key).unwrap();
        std::fs::write(dir.path().join("ca.pem"), ca.pem()).unwrap();
        std::fs::write(dir.path().join("cert.pem"), cert.pem()).unwrap();
        std::fs::write(dir.path().join("key.pem"), key.serialize_pem()).unwrap();
        Certs { dir }
    }

    fn path(&self, name: &str) -> PathBuf {
        self.dir.path().join(name)
    }
}

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
    let tls_port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
        .to_string();
    let cert = certs.path("cert.pem").display().to_string();
    let key = certs.path("key.pem").display().to_string();
    let ca = certs.path("ca.pem").display().to_string();
    // The clear-text port stays for the test's own checks; holdfast uses the TLS one.
    let redis = RedisServer::start_with(&[
        "--tls-port",
        &tls_port,
        "--tls-cert-file",
        &cert,
        "--tls-key-file",
        &key,
        "--tls-ca-cert-file",
        &ca,
        "--tls-auth-clients",
        "no",
    ]);
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
