//! TLS, off by default: the client listener's acceptor (`[server.tls]`) and the trust roots
//! for Redis backends spoken to over TLS (`tls_ca`, or the system's). rustls with the ring provider; certificates and keys
//! are PEM files.

use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use std::path::Path;
use std::sync::Arc;

/// A certificate, key or trust root that cannot be used.
#[derive(Debug, thiserror::Error)]
pub enum TlsError {
    /// A PEM file could not be read or holds nothing usable.
    #[error("{path}: {what}")]
    File {
        /// The file.
        path: String,
        /// What is wrong with it.
        what: String,
    },
    /// rustls refused the combination.
    #[error("TLS: {0}")]
    Rustls(#[from] rustls::Error),
}

fn provider() -> Arc<rustls::crypto::CryptoProvider> {
    Arc::new(rustls::crypto::ring::default_provider())
}

fn file_error(path: &Path, what: impl ToString) -> TlsError {
    TlsError::File {
        path: path.display().to_string(),
        what: what.to_string(),
    }
}

fn certificates(path: &Path) -> Result<Vec<CertificateDer<'static>>, TlsError> {
    let certs = CertificateDer::pem_file_iter(path)
        .map_err(|e| file_error(path, e))?
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| file_error(path, e))?;
    if certs.is_empty() {
        return Err(file_error(path, "no certificate in the file"));
    }
    Ok(certs)
}

/// The acceptor for the client listener.
///
/// # Errors
/// [`TlsError`] naming the file at fault.
pub fn acceptor(cert: &Path, key: &Path) -> Result<tokio_rustls::TlsAcceptor, TlsError> {
    let chain = certificates(cert)?;
    let key = PrivateKeyDer::from_pem_file(key).map_err(|e| file_error(key, e))?;
    let config = rustls::ServerConfig::builder_with_provider(provider())
        .with_safe_default_protocol_versions()?
        .with_no_client_auth()
        .with_single_cert(chain, key)?;
    Ok(tokio_rustls::TlsAcceptor::from(Arc::new(config)))
}

/// A client configuration trusting the certificates in `ca`.
///
/// # Errors
/// [`TlsError`] naming the file at fault.
pub fn client_config(ca: &Path) -> Result<rustls::ClientConfig, TlsError> {
    let mut roots = rustls::RootCertStore::empty();
    for cert in certificates(ca)? {
        roots.add(cert).map_err(|e| file_error(ca, e))?;
    }
    Ok(rustls::ClientConfig::builder_with_provider(provider())
        .with_safe_default_protocol_versions()?
        .with_root_certificates(roots)
        .with_no_client_auth())
}

/// A client configuration trusting the system's certificate store (what a `rediss://`
/// backend without `tls_ca` is verified with).
///
/// # Errors
/// [`TlsError`] when the store holds no usable certificate.
pub fn system_config() -> Result<rustls::ClientConfig, TlsError> {
    let found = rustls_native_certs::load_native_certs();
    let mut roots = rustls::RootCertStore::empty();
    let (added, _) = roots.add_parsable_certificates(found.certs);
    if added == 0 {
        let why = found
            .errors
            .first()
            .map_or_else(|| "no certificate found".to_string(), ToString::to_string);
        return Err(TlsError::File {
            path: "the system's certificate store".to_string(),
            what: why,
        });
    }
    Ok(rustls::ClientConfig::builder_with_provider(provider())
        .with_safe_default_protocol_versions()?
        .with_root_certificates(roots)
        .with_no_client_auth())
}
