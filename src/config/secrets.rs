//! Secrets and the URLs that carry them: passwords read from files, URLs shown with every
//! password hidden, and the address parsers the backends dial with.

use super::{invalid, ConfigError};
use serde::Deserialize;
use std::path::Path;

/// Reads a secret from a file, without its trailing newline.
///
/// # Errors
/// [`ConfigError::Invalid`] naming `key` when the file cannot be read.
pub fn read_secret(key: &str, path: &Path) -> Result<String, ConfigError> {
    std::fs::read_to_string(path)
        .map(|text| text.trim_end_matches(['\r', '\n']).to_string())
        .map_err(|e| invalid(key, format!("cannot read {}: {e}", path.display())))
}

/// A backend URL as it may be shown: every password hidden. The userinfo ends at the
/// authority's last `@` (the WHATWG URL rule, so a password holding an unencoded `@`, as in
/// `redis://u:p@ss@host`, is hidden whole; a `?` or `#` in a password must be
/// percent-encoded, as in any URL), everything after its first `:` is the password; the
/// authority ends at the first `/` after it, so libpq's multi-host form
/// (`postgres://u:pw@h1:5432,h2:5433/db`) is one authority; and every query parameter named
/// `password` or `sslpassword` (in any case, percent-encoded or not) has its value hidden.
/// Not the `url` crate: it refuses the multi-host form, and would re-encode what it shows.
pub fn redact_url(url: &str) -> String {
    const HIDDEN: &str = "<redacted>";
    let Some(scheme_end) = url.find("://") else {
        return url.to_string();
    };
    let (head, rest) = url.split_at(scheme_end + 3);
    // Before the query: the last `@` there ends the userinfo (a `/` in a password is
    // hidden with it), and the authority runs to the first `/` after it.
    let before_query = rest.find(['?', '#']).unwrap_or(rest.len());
    let pre = &rest[..before_query];
    let authority_end = match pre.rfind('@') {
        Some(at) => pre[at..].find('/').map_or(pre.len(), |i| at + i),
        None => pre.find('/').unwrap_or(pre.len()),
    };
    let (authority, tail) = rest.split_at(authority_end);
    let authority = match authority.rfind('@') {
        Some(at) => {
            let (userinfo, host) = authority.split_at(at);
            match userinfo.split_once(':') {
                Some((user, _)) => format!("{user}:{HIDDEN}{host}"),
                None => authority.to_string(),
            }
        }
        None => authority.to_string(),
    };
    let (path, query_and_fragment) = match tail.find('?') {
        Some(q) => tail.split_at(q),
        None => (tail, ""),
    };
    let (query, fragment) = match query_and_fragment.find('#') {
        Some(f) => query_and_fragment.split_at(f),
        None => (query_and_fragment, ""),
    };
    let query = match query.strip_prefix('?') {
        Some(pairs) => {
            let shown: Vec<String> = pairs
                .split('&')
                .map(|pair| {
                    let (key, value) = pair.split_once('=').unwrap_or((pair, ""));
                    let name = percent_decoded(key).to_ascii_lowercase();
                    if matches!(name.as_str(), "password" | "sslpassword") && !value.is_empty() {
                        format!("{key}={HIDDEN}")
                    } else {
                        pair.to_string()
                    }
                })
                .collect();
            format!("?{}", shown.join("&"))
        }
        None => String::new(),
    };
    format!("{head}{authority}{path}{query}{fragment}")
}

/// `%XX` escapes (and `+`) of a query key decoded, for comparing it with a name.
fn percent_decoded(text: &str) -> String {
    let bytes = text.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        let hex = |b: u8| (b as char).to_digit(16);
        match bytes[i] {
            b'%' => {
                match (
                    bytes.get(i + 1).and_then(|b| hex(*b)),
                    bytes.get(i + 2).and_then(|b| hex(*b)),
                ) {
                    (Some(h), Some(l)) => {
                        out.push((h * 16 + l) as u8);
                        i += 3;
                        continue;
                    }
                    _ => out.push(b'%'),
                }
            }
            b'+' => out.push(b' '),
            b => out.push(b),
        }
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// `host:port` (an IPv6 host in brackets) as its two parts.
pub fn host_port(addr: &str) -> Option<(String, u16)> {
    let (host, port) = addr.rsplit_once(':')?;
    let host = host.trim_start_matches('[').trim_end_matches(']');
    if host.is_empty() {
        return None;
    }
    Some((host.to_string(), port.parse().ok()?))
}

/// A `redis://` or `rediss://` URL, read.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RedisUrl {
    /// `rediss://`: the connection speaks TLS.
    pub tls: bool,
    /// The server's host (an IPv6 address without its brackets).
    pub host: String,
    /// Its port (6379 when the URL gives none).
    pub port: u16,
    /// The ACL user, when the URL names one.
    pub username: Option<String>,
    /// The password, when the URL holds one.
    pub password: Option<String>,
    /// The database (`/3`), when the URL names one.
    pub database: Option<u8>,
}

/// Reads `redis://[[user]:password@]host[:port][/db]` (or `rediss://` for TLS); the user and
/// password percent-decoded. Query parameters are refused rather than ignored: every setting
/// of a backend is a key of its own.
///
/// # Errors
/// Which part of the URL is wrong; the text never holds the password.
pub fn parse_redis_url(text: &str) -> Result<RedisUrl, String> {
    let url = url::Url::parse(text).map_err(|e| format!("not a URL ({e})"))?;
    let tls = match url.scheme() {
        "redis" => false,
        "rediss" => true,
        _ => return Err("must start with redis:// (or rediss:// for TLS)".to_string()),
    };
    let host = match url.host() {
        Some(url::Host::Domain(name)) if !name.is_empty() => name.to_string(),
        Some(url::Host::Ipv4(ip)) => ip.to_string(),
        Some(url::Host::Ipv6(ip)) => ip.to_string(),
        _ => return Err("names no host".to_string()),
    };
    if url.query().is_some() || url.fragment().is_some() {
        return Err("query parameters are not read: set them as keys of the backend".to_string());
    }
    let decode = |part: &str| {
        percent_encoding::percent_decode_str(part)
            .decode_utf8()
            .map(|text| text.into_owned())
            .map_err(|_| "its user or password is not UTF-8 once decoded".to_string())
    };
    let username = match url.username() {
        "" => None,
        user => Some(decode(user)?),
    };
    let password = url.password().map(decode).transpose()?;
    let database = match url.path().trim_start_matches('/') {
        "" => None,
        db => Some(
            db.parse::<u8>()
                .map_err(|_| format!("the database `/{db}` is not a number from 0 to 255"))?,
        ),
    };
    Ok(RedisUrl {
        tls,
        host,
        port: url.port().unwrap_or(6379),
        username,
        password,
        database,
    })
}

/// libpq's multi-host URL (`postgres://u@h1:5432,h2:5433/db`) as one single-host URL per
/// host, in order.
///
/// # Errors
/// Which part of the URL is wrong.
pub fn postgres_hosts(url: &str) -> Result<Vec<String>, String> {
    let rest = url
        .strip_prefix("postgres://")
        .or_else(|| url.strip_prefix("postgresql://"))
        .ok_or("must start with postgres://")?;
    let authority_end = rest.find(['/', '?']).unwrap_or(rest.len());
    let (authority, tail) = rest.split_at(authority_end);
    let (userinfo, hosts) = match authority.rfind('@') {
        Some(at) => (&authority[..=at], &authority[at + 1..]),
        None => ("", authority),
    };
    // libpq's passphrase of an encrypted client key: the driver reads no encrypted key, and
    // would log the parameter it ignores, value and all.
    let tail = without_query_key(tail, "sslpassword");
    let mut out = Vec::new();
    for host in hosts.split(',') {
        if host.is_empty() {
            return Err("a host in the list is empty".to_string());
        }
        let single = format!("postgres://{userinfo}{host}{tail}");
        single
            .parse::<sqlx::postgres::PgConnectOptions>()
            .map_err(|e| format!("{host}: {e}"))?;
        out.push(single);
    }
    Ok(out)
}

/// A URL's path, query and fragment (`tail`) without the query parameters named `key`.
fn without_query_key(tail: &str, key: &str) -> String {
    let Some((path, rest)) = tail.split_once('?') else {
        return tail.to_string();
    };
    let (query, fragment) = match rest.find('#') {
        Some(at) => rest.split_at(at),
        None => (rest, ""),
    };
    let kept: Vec<&str> = query
        .split('&')
        .filter(|pair| pair.split('=').next() != Some(key))
        .collect();
    if kept.iter().all(|pair| pair.is_empty()) {
        return format!("{path}{fragment}");
    }
    format!("{path}?{}{fragment}", kept.join("&"))
}

/// `url` with `password` as its last query parameter, which PostgreSQL's URL parser applies
/// after the userinfo's password and any earlier `password=`: the one that counts.
pub fn with_password(url: &str, password: &str) -> String {
    let (base, fragment) = match url.find('#') {
        Some(at) => url.split_at(at),
        None => (url, ""),
    };
    let joiner = if !base.contains('?') {
        "?"
    } else if base.ends_with(['?', '&']) {
        ""
    } else {
        "&"
    };
    let mut encoded = String::with_capacity(password.len());
    for byte in password.bytes() {
        if byte.is_ascii_alphanumeric() || b"-._~".contains(&byte) {
            encoded.push(char::from(byte));
        } else {
            encoded.push_str(&format!("%{byte:02X}"));
        }
    }
    format!("{base}{joiner}password={encoded}{fragment}")
}

/// A password from the environment arrives parsed (`HOLDFAST_SERVER__REQUIREPASS=12345` is a
/// number to figment); any scalar is taken as its text.
pub(super) fn string_like<'de, D: serde::Deserializer<'de>>(
    d: D,
) -> Result<Option<String>, D::Error> {
    #[derive(Deserialize)]
    #[serde(untagged)]
    enum Scalar {
        Text(String),
        Signed(i64),
        Unsigned(u64),
        Float(f64),
        Bool(bool),
    }
    Ok(
        Option::<Scalar>::deserialize(d)?.map(|scalar| match scalar {
            Scalar::Text(text) => text,
            Scalar::Signed(n) => n.to_string(),
            Scalar::Unsigned(n) => n.to_string(),
            Scalar::Float(x) => x.to_string(),
            Scalar::Bool(b) => b.to_string(),
        }),
    )
}
