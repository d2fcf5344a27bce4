//! Where a backend's servers are and how each is reached: the addresses, TLS and password
//! of its configuration, and the servers its clients' own connections go to ([`Servers`]).

use super::cluster::Topology;
use super::dial::Addr;
use super::dial::{Target, Tls};
use super::sentinel::Watch;
use super::{BackendError, Proto};
use crate::config::host_port;
use std::sync::Arc;
use std::time::Duration;

/// Where a backend's clients' own connections go.
pub enum Servers {
    /// One server.
    Fixed(Addr),
    /// The primary the sentinels name.
    Sentinel(Arc<Watch>),
    /// Every primary of a Cluster.
    Cluster(Arc<Topology>),
}

impl Servers {
    /// The servers wanted now, with the Sentinel generation of each.
    pub(super) fn wanted(&self) -> Vec<(Addr, Option<u64>)> {
        match self {
            Servers::Fixed(addr) => vec![(addr.clone(), None)],
            Servers::Sentinel(watch) => watch
                .usable_now()
                .map(|(addr, generation)| vec![(addr, Some(generation))])
                .unwrap_or_default(),
            Servers::Cluster(topology) => topology
                .map()
                .primaries
                .iter()
                .map(|addr| (addr.clone(), None))
                .collect(),
        }
    }

    /// Whether a link dialled ahead must be checked for its role: a server named by
    /// Sentinel or a Cluster's map may have become a replica since.
    pub(super) fn check_roles(&self) -> bool {
        !matches!(self, Servers::Fixed(_))
    }
}

/// A backend's TLS: None unless asked for (`rediss://`, `tls = true`, or a `tls_ca`); then
/// the trust roots of `tls_ca`, or the system's.
pub(super) fn tls_of(
    name: &str,
    wanted: bool,
    ca: Option<&std::path::Path>,
) -> Result<Option<Tls>, BackendError> {
    if !wanted && ca.is_none() {
        return Ok(None);
    }
    let config = match ca {
        Some(ca) => {
            crate::tls::client_config(ca).map_err(|e| (format!("backends.{name}.tls_ca"), e))
        }
        None => crate::tls::system_config().map_err(|e| (format!("backends.{name}"), e)),
    };
    config
        .map(|config| Some(Tls::new(config)))
        .map_err(|(key, e)| BackendError::Unsupported {
            what: format!("{key}: {e}"),
        })
}

/// The `host:port` addresses under `backends.NAME.FIELD`.
pub(super) fn addresses(
    name: &str,
    field: &str,
    addrs: &[String],
) -> Result<Vec<Addr>, BackendError> {
    addrs
        .iter()
        .map(|addr| {
            host_port(addr).ok_or_else(|| BackendError::Unsupported {
                what: format!("backends.{name}.{field}: `{addr}` is not host:port"),
            })
        })
        .collect()
}

/// The target of a backend whose servers are found at each dial (the primary Sentinel
/// names, a Cluster's nodes): no address of its own.
pub(super) fn found_at_each_dial(
    name: &str,
    password_file: Option<&std::path::Path>,
    (tls, tls_ca): (bool, Option<&std::path::Path>),
    timeouts: (Duration, Duration),
) -> Result<Target, BackendError> {
    let password = match password_file {
        Some(path) => Some(password_from(name, path)?),
        None => None,
    };
    let tls = tls_of(name, tls, tls_ca)?;
    Ok(Target::new((String::new(), 0), Proto::Resp2, timeouts)
        .with_auth(None, password)
        .with_tls(tls))
}

/// The password in `backends.NAME.password_file`.
pub(super) fn password_from(name: &str, path: &std::path::Path) -> Result<String, BackendError> {
    let key = format!("backends.{name}.password_file");
    crate::config::read_secret(&key, path).map_err(|e| BackendError::Unsupported {
        what: e.to_string(),
    })
}
