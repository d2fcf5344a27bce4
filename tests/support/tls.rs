//! TLS for the tests: a CA and a certificate made for the test (rcgen), and a redis-server
//! that speaks TLS beside its clear-text port.
#![allow(dead_code)]

use super::{free_port, RedisServer};
use std::path::PathBuf;

/// A CA and a certificate it signed for 127.0.0.1 and localhost, as PEM files.
pub struct Certs {
    dir: tempfile::TempDir,
}

impl Certs {
    pub fn new() -> Certs {
        let dir = tempfile::tempdir().unwrap();
        let ca_key = rcgen::KeyPair::generate().unwrap();
        let mut ca_params = rcgen::CertificateParams::new(Vec::<String>::new()).unwrap();
        ca_params.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
        // Names of their own: with rcgen's default name on both, OpenSSL (a redis-server
        // verifying another: a sentinel, a cluster node) takes the leaf for self-signed.
        ca_params
            .distinguished_name
            .push(rcgen::DnType::CommonName, "holdfast test CA");
        let ca = ca_params.self_signed(&ca_key).unwrap();
        let key = rcgen::KeyPair::generate().unwrap();
        let mut params =
            rcgen::CertificateParams::new(vec!["127.0.0.1".to_string(), "localhost".to_string()])
                .unwrap();
        params
            .distinguished_name
            .push(rcgen::DnType::CommonName, "127.0.0.1");
        let cert = params.signed_by(&key, &ca, &ca_key).unwrap();
        std::fs::write(dir.path().join("ca.pem"), ca.pem()).unwrap();
        std::fs::write(dir.path().join("cert.pem"), cert.pem()).unwrap();
        std::fs::write(dir.path().join("key.pem"), key.serialize_pem()).unwrap();
        Certs { dir }
    }

    pub fn path(&self, name: &str) -> PathBuf {
        self.dir.path().join(name)
    }
}

/// A redis-server speaking TLS with `certs`' certificate on its TLS port (returned), and
/// clear text on its own port.
pub fn tls_redis(certs: &Certs) -> (RedisServer, u16) {
    tls_redis_with(certs, &[])
}

/// The arguments that make a redis-server (or a sentinel, in its file) speak TLS on
/// `tls_port` with `certs`' certificate, to its clients, replicas and cluster bus.
pub fn tls_args(certs: &Certs, tls_port: u16) -> Vec<String> {
    let path = |name: &str| certs.path(name).display().to_string();
    [
        "--tls-port".to_string(),
        tls_port.to_string(),
        "--tls-cert-file".to_string(),
        path("cert.pem"),
        "--tls-key-file".to_string(),
        path("key.pem"),
        "--tls-ca-cert-file".to_string(),
        path("ca.pem"),
        "--tls-auth-clients".to_string(),
        "no".to_string(),
        "--tls-replication".to_string(),
        "yes".to_string(),
    ]
    .to_vec()
}

/// The same settings as lines of a configuration file (a sentinel's).
pub fn tls_conf(certs: &Certs, tls_port: u16) -> String {
    tls_args(certs, tls_port)
        .chunks(2)
        .map(|pair| format!("{} {}\n", pair[0].trim_start_matches("--"), pair[1]))
        .collect()
}

/// A redis-server as [`tls_redis`] makes it, with more arguments.
pub fn tls_redis_with(certs: &Certs, extra: &[&str]) -> (RedisServer, u16) {
    let tls_port = free_port();
    let cert = certs.path("cert.pem").display().to_string();
    let key = certs.path("key.pem").display().to_string();
    let ca = certs.path("ca.pem").display().to_string();
    let port = tls_port.to_string();
    let mut args = vec![
        "--tls-port",
        &port,
        "--tls-cert-file",
        &cert,
        "--tls-key-file",
        &key,
        "--tls-ca-cert-file",
        &ca,
        "--tls-auth-clients",
        "no",
    ];
    args.extend_from_slice(extra);
    (RedisServer::start_with(&args), tls_port)
}
