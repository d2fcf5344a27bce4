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

    pub fn path(&self, name: &str) -> PathBuf {
        self.dir.path().join(name)
    }
}

/// A redis-server speaking TLS with `certs`' certificate on its TLS port (returned), and
/// clear text on its own port.
pub fn tls_redis(certs: &Certs) -> (RedisServer, u16) {
    tls_redis_with(certs, &[])
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
