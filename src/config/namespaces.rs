//! `[defaults]` and `[[namespaces]]`: which keys and channels each namespace claims, its
//! backend, reply mode and retry policy.

use super::backends::BackendConfig;
use super::retry::{check_acquire, check_retry, RetryConfig, RetryOverride, TOKEN_TTL};
use super::{invalid, ConfigError};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::collections::HashSet;
use std::time::Duration;

/// How a namespace answers IdempotentEffect and NonIdempotent commands after a retry.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ReplyMode {
    /// Retry per the idempotence class; a retried reply may under-count.
    Fast,
    /// Settle existence with a read before dispatching.
    Settled,
    /// Exactly-once replies through a per-request token.
    Exact,
}

impl ReplyMode {
    /// As the configuration spells it (`fast`, `settled`, `exact`).
    pub fn spelling(self) -> &'static str {
        match self {
            ReplyMode::Fast => "fast",
            ReplyMode::Settled => "settled",
            ReplyMode::Exact => "exact",
        }
    }
}

/// `[defaults]`: every namespace inherits these.
#[derive(Clone, Debug, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Defaults {
    /// fast | settled | exact.
    pub reply_mode: ReplyMode,
    /// Longest one attempt may wait for a backend connection.
    #[serde(with = "humantime_serde")]
    pub acquire_timeout: Duration,
    /// Backoff between attempts.
    pub retry: RetryConfig,
    /// Redis backends: a write is acknowledged only once this many replicas have it
    /// (`WAIT`), so a failover cannot lose it. 0: as Redis acknowledges.
    #[serde(default)]
    pub min_replicas_ack: u32,
    /// How long `WAIT` may take before the write counts as Transient (applied on the
    /// primary, not known to be on enough replicas).
    #[serde(default = "default_replicas_ack_timeout", with = "humantime_serde")]
    pub replicas_ack_timeout: Duration,
}

fn default_replicas_ack_timeout() -> Duration {
    Duration::from_secs(1)
}

impl Default for Defaults {
    fn default() -> Self {
        Defaults {
            reply_mode: ReplyMode::Settled,
            acquire_timeout: Duration::from_secs(5),
            retry: RetryConfig::default(),
            min_replicas_ack: 0,
            replicas_ack_timeout: default_replicas_ack_timeout(),
        }
    }
}

/// `[[namespaces]]`
#[derive(Clone, Debug, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct NamespaceConfig {
    /// Used in metrics and errors.
    pub name: String,
    /// Key prefixes; none makes this the catch-all.
    #[serde(default)]
    pub prefixes: Vec<String>,
    /// Pub/Sub channel prefixes: a channel's longest matching prefix picks the namespace
    /// whose backend carries it; the catch-all takes every other channel.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub channels: Vec<String>,
    /// A key of `[backends]`.
    pub backend: String,
    /// Overrides `[defaults] reply_mode`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reply_mode: Option<ReplyMode>,
    /// Overrides `[defaults] acquire_timeout`.
    #[serde(
        default,
        with = "humantime_serde",
        skip_serializing_if = "Option::is_none"
    )]
    pub acquire_timeout: Option<Duration>,
    /// Overrides keys of `[defaults.retry]`.
    #[serde(default)]
    pub retry: RetryOverride,
    /// Overrides `[defaults] min_replicas_ack`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub min_replicas_ack: Option<u32>,
    /// Overrides `[defaults] replicas_ack_timeout`.
    #[serde(
        default,
        with = "humantime_serde",
        skip_serializing_if = "Option::is_none"
    )]
    pub replicas_ack_timeout: Option<Duration>,
    /// Lets a user limited to some namespaces run scripts and functions (`EVAL`, `FCALL`,
    /// ...) whose keys route here. A script may touch any key, so this trusts the scripts,
    /// or a Redis ACL user of the backend's that confines them (docs/operating.md, "Namespaces and
    /// users"). Users that may reach every namespace run scripts regardless.
    #[serde(default)]
    pub allow_scripts: bool,
    /// How long a script may run on a SQL backend before it is stopped and rolled back
    /// (default 5 s). Redis backends keep their own `busy-reply-threshold`.
    #[serde(
        default,
        with = "humantime_serde",
        skip_serializing_if = "Option::is_none"
    )]
    pub script_time_limit: Option<Duration>,
    /// A second backend the namespace's writes are replayed on, and its reads compared
    /// with, while the namespace is moved there (docs/moving.md).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mirror: Option<MirrorConfig>,
}

/// `[namespaces.mirror]`: where a namespace's writes are replayed once its backend applied
/// them, the client answered from its backend alone.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct MirrorConfig {
    /// A key of `[backends]`, not the namespace's own backend.
    pub backend: String,
    /// Replay writes (default true); false only compares reads.
    #[serde(default = "yes")]
    pub writes: bool,
    /// `off`, or `compare`: each read is sent to the mirror too and a differing reply
    /// counted and logged.
    #[serde(default)]
    pub reads: MirrorReads,
    /// Most requests waiting for the mirror; past it, a write's keys are marked to be
    /// copied again and the namespace's mirror is behind.
    #[serde(default = "default_mirror_queue")]
    pub queue: usize,
}

fn yes() -> bool {
    true
}

fn default_mirror_queue() -> usize {
    100_000
}

/// What a mirror does with a namespace's reads.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum MirrorReads {
    /// Not sent.
    #[default]
    Off,
    /// Sent to the mirror too, after the client's reply, and the two replies compared.
    Compare,
}

/// A script's limit when its namespace sets none.
pub const SCRIPT_TIME_LIMIT: Duration = Duration::from_secs(5);

/// A namespace's policy after `[defaults]` is applied.
#[derive(Clone, Debug, PartialEq)]
pub struct EffectivePolicy {
    /// fast | settled | exact.
    pub reply_mode: ReplyMode,
    /// Per-attempt wait for a backend connection.
    pub acquire_timeout: Duration,
    /// Backoff.
    pub retry: RetryConfig,
    /// Replicas a write must reach before it is acknowledged, and how long to wait for them
    /// (None: acknowledged as the backend acknowledges it).
    pub replicas: Option<(u32, Duration)>,
}

impl NamespaceConfig {
    /// This namespace's policy with `[defaults]` filled in.
    pub fn effective(&self, defaults: &Defaults) -> EffectivePolicy {
        EffectivePolicy {
            reply_mode: self.reply_mode.unwrap_or(defaults.reply_mode),
            acquire_timeout: self.acquire_timeout.unwrap_or(defaults.acquire_timeout),
            retry: defaults.retry.overridden(&self.retry),
            replicas: match self.min_replicas_ack.unwrap_or(defaults.min_replicas_ack) {
                0 => None,
                n => Some((
                    n,
                    self.replicas_ack_timeout
                        .unwrap_or(defaults.replicas_ack_timeout),
                )),
            },
        }
    }
}

/// Claims `list` (the key prefixes or the channel prefixes at `key`) for namespace `name`:
/// none may be empty (`empty` says why) or claimed by another namespace already.
fn claim<'a>(
    (key, what): (&str, &str),
    list: &'a [String],
    (claimed, name): (&mut BTreeMap<&'a str, &'a str>, &'a str),
    empty: &str,
) -> Result<(), ConfigError> {
    for prefix in list {
        if prefix.is_empty() {
            return Err(invalid(key, empty));
        }
        if let Some(other) = claimed.insert(prefix, name) {
            return Err(invalid(
                key,
                format!("{what} `{prefix}` is claimed by `{other}` too"),
            ));
        }
    }
    Ok(())
}

/// Checks `[[namespaces]]`: names, backends, prefixes and each one's policy. Returns the
/// names, and the catch-all's when there is one.
pub(super) fn check<'a>(
    namespaces: &'a [NamespaceConfig],
    defaults: &Defaults,
    backends: &BTreeMap<String, BackendConfig>,
) -> Result<(HashSet<&'a str>, Option<&'a str>), ConfigError> {
    if namespaces.is_empty() {
        return Err(invalid("namespaces", "at least one namespace is required"));
    }
    let mut catch_all = None;
    let mut names = HashSet::new();
    let mut prefixes: BTreeMap<&str, &str> = BTreeMap::new();
    let mut channels: BTreeMap<&str, &str> = BTreeMap::new();
    for (i, ns) in namespaces.iter().enumerate() {
        let key = format!("namespaces[{i}]");
        if ns.name.is_empty() {
            return Err(invalid(format!("{key}.name"), "must not be empty"));
        }
        if !names.insert(ns.name.as_str()) {
            return Err(invalid(
                format!("{key}.name"),
                format!("`{}` is used by two namespaces", ns.name),
            ));
        }
        if !backends.contains_key(&ns.backend) {
            return Err(invalid(
                format!("{key}.backend"),
                format!("no backend named `{}` in [backends]", ns.backend),
            ));
        }
        if ns.prefixes.is_empty() {
            if let Some(other) = catch_all.replace(ns.name.as_str()) {
                return Err(invalid(
                        format!("{key}.prefixes"),
                        format!("`{other}` and `{}` both have no prefixes; only one namespace may be the catch-all", ns.name),
                    ));
            }
        }
        claim(
            (&format!("{key}.prefixes"), "prefix"),
            &ns.prefixes,
            (&mut prefixes, &ns.name),
            "an empty prefix; leave `prefixes` out for the catch-all",
        )?;
        claim(
            (&format!("{key}.channels"), "channel prefix"),
            &ns.channels,
            (&mut channels, &ns.name),
            "an empty prefix; the catch-all takes every channel no prefix claims",
        )?;
        if let Some(mirror) = &ns.mirror {
            check_mirror(&format!("{key}.mirror"), mirror, &ns.backend, backends)?;
        }
        let policy = ns.effective(defaults);
        check_retry(&format!("{key}.retry"), &policy.retry)?;
        check_acquire(&format!("{key}.acquire_timeout"), policy.acquire_timeout)?;
        check_fits(&key, &policy)?;
        if policy.reply_mode == ReplyMode::Exact {
            check_token_outlives_retries(&key, ns, &policy, backends)?;
        }
    }
    Ok((names, catch_all))
}

fn check_mirror(
    key: &str,
    mirror: &MirrorConfig,
    own: &str,
    backends: &BTreeMap<String, BackendConfig>,
) -> Result<(), ConfigError> {
    if !backends.contains_key(&mirror.backend) {
        return Err(invalid(
            format!("{key}.backend"),
            format!("no backend named `{}` in [backends]", mirror.backend),
        ));
    }
    if mirror.backend == own {
        return Err(invalid(
            format!("{key}.backend"),
            "is the namespace's own backend; a mirror is another one",
        ));
    }
    if mirror.queue == 0 {
        return Err(invalid(format!("{key}.queue"), "must be at least 1"));
    }
    Ok(())
}

/// A namespace that retries must be able to outlast one blackholed attempt: an acquire
/// timeout longer than the whole backoff schedule would spend the budget on a single wait.
fn check_fits(key: &str, policy: &EffectivePolicy) -> Result<(), ConfigError> {
    let backoff = &policy.retry;
    if backoff.check().is_err() {
        return Ok(());
    }
    let schedule = backoff.total_before_jitter();
    if backoff.max_attempts > 1 && policy.acquire_timeout > schedule {
        return Err(invalid(
            format!("{key}.acquire_timeout"),
            format!(
                "{:?} is longer than the whole retry schedule ({:?} over {} attempts): one blackholed attempt would use up the budget; lower acquire_timeout or raise the retry delays",
                policy.acquire_timeout, schedule, backoff.max_attempts
            ),
        ));
    }
    Ok(())
}

/// Exact mode: a retry must find its token, so the token must be kept longer than the
/// longest a request can be retried after its first dispatch applied it. That is every delay
/// with its jitter at the upper bound, plus every attempt's longest wait: the connection
/// (`acquire_timeout`), the reply (the backend's response bound), and `WAIT` for replicas.
/// A retry after the token expired would apply the command again (an `INCR` twice).
fn check_token_outlives_retries(
    key: &str,
    ns: &NamespaceConfig,
    policy: &EffectivePolicy,
    backends: &BTreeMap<String, BackendConfig>,
) -> Result<(), ConfigError> {
    let backoff = &policy.retry;
    if backoff.check().is_err() {
        return Ok(());
    }
    let (response, response_what) = match backends.get(&ns.backend) {
        // The script's EVALSHA, then the EVAL after NOSCRIPT (src/backend/redis/send.rs).
        Some(BackendConfig::Redis(r)) => (r.response_timeout * 2, "2 × response_timeout"),
        Some(BackendConfig::Sentinel(r)) => (r.response_timeout * 2, "2 × response_timeout"),
        Some(BackendConfig::Cluster(r)) => (r.response_timeout * 2, "2 × response_timeout"),
        // The deadline on the command's whole transaction (src/backend/sql/engine/deadline.rs).
        Some(BackendConfig::Postgres(p)) => (p.response_timeout, "response_timeout"),
        Some(BackendConfig::Sqlite(s)) => (s.response_timeout, "response_timeout"),
        None => (Duration::ZERO, "no response bound"),
    };
    // `WAIT`'s own timeout, and the second its reply may take (src/backend/redis/send.rs).
    let replicas = policy
        .replicas
        .map_or(Duration::ZERO, |(_, wait)| wait + Duration::from_secs(1));
    let per_attempt = policy.acquire_timeout + response + replicas;
    let delays = backoff.total_at_most();
    let worst = delays + per_attempt * backoff.max_attempts;
    let ttl = TOKEN_TTL;
    if worst <= ttl {
        return Ok(());
    }
    // Name the key the schedule comes from: the namespace's own, or the default it inherits.
    let attempts_key = if ns.retry.max_attempts.is_some() {
        format!("{key}.retry.max_attempts")
    } else {
        "defaults.retry.max_attempts".to_string()
    };
    Err(invalid(
        attempts_key,
        format!(
            "namespace `{}` is in exact reply mode, whose tokens are kept {}s, but a request may be retried for up to {}s after its first dispatch ({} attempts, delays up to {}s with jitter at its bound, each attempt up to {}s: acquire_timeout {}s + {response_what} of backends.{} {}s{}); a retry after its token expired would apply the command again: lower max_attempts, max_delay or the timeouts",
            ns.name,
            ttl.as_secs(),
            worst.as_secs_f64().ceil(),
            backoff.max_attempts,
            delays.as_secs_f64().ceil(),
            per_attempt.as_secs_f64(),
            policy.acquire_timeout.as_secs_f64(),
            ns.backend,
            response.as_secs_f64(),
            if replicas.is_zero() {
                String::new()
            } else {
                format!(" + replicas_ack_timeout and 1s for WAIT {}s", replicas.as_secs_f64())
            },
        ),
    ))
}
