//! The retry schedule (`[defaults.retry]`, a namespace's `retry`), its checks and
//! arithmetic, the process-wide `[retry_budget]`, and exact mode's token lifetime.

use super::{invalid, ConfigError};
use serde::{Deserialize, Serialize};
use std::time::Duration;

/// `retry`: the per-request failover budget.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RetryConfig {
    /// Attempts in all, the first included.
    pub max_attempts: u32,
    /// Delay before the second attempt.
    #[serde(with = "humantime_serde")]
    pub min_delay: Duration,
    /// Each delay is the previous one times this.
    pub multiplier: f64,
    /// No delay is longer than this (before jitter).
    #[serde(with = "humantime_serde")]
    pub max_delay: Duration,
    /// Proportional jitter: each delay `d` is drawn uniformly from `[d, d·(1+jitter)]`, so
    /// held requests of one outage do not return in lock-step. 0 disables it.
    pub jitter: f64,
}

impl Default for RetryConfig {
    fn default() -> Self {
        RetryConfig {
            max_attempts: 15,
            min_delay: Duration::from_millis(200),
            multiplier: 2.0,
            max_delay: Duration::from_secs(10),
            jitter: 0.15,
        }
    }
}

/// A retry configuration that cannot produce a sane schedule.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum InvalidBackoff {
    /// `max_attempts` is 0 or absurdly large.
    #[error("must be between 1 and 1000")]
    MaxAttempts,
    /// `min_delay` is zero or above `max_delay`.
    #[error("must be above zero and at most max_delay")]
    MinDelay,
    /// `max_delay` over ten minutes.
    #[error("must be at most 600s")]
    MaxDelay,
    /// `multiplier` below 1 or not finite.
    #[error("must be a finite number between 1 and 100")]
    Multiplier,
    /// `jitter` outside `[0, 1]`.
    #[error("must be between 0 and 1")]
    Jitter,
}

impl InvalidBackoff {
    /// The configuration key at fault.
    pub fn key(&self) -> &'static str {
        match self {
            InvalidBackoff::MaxAttempts => "max_attempts",
            InvalidBackoff::MinDelay => "min_delay",
            InvalidBackoff::MaxDelay => "max_delay",
            InvalidBackoff::Multiplier => "multiplier",
            InvalidBackoff::Jitter => "jitter",
        }
    }
}

/// A namespace's partial override of `[defaults.retry]`.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RetryOverride {
    /// See [`RetryConfig::max_attempts`].
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_attempts: Option<u32>,
    /// See [`RetryConfig::min_delay`].
    #[serde(
        default,
        with = "humantime_serde",
        skip_serializing_if = "Option::is_none"
    )]
    pub min_delay: Option<Duration>,
    /// See [`RetryConfig::multiplier`].
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub multiplier: Option<f64>,
    /// See [`RetryConfig::max_delay`].
    #[serde(
        default,
        with = "humantime_serde",
        skip_serializing_if = "Option::is_none"
    )]
    pub max_delay: Option<Duration>,
    /// See [`RetryConfig::jitter`].
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub jitter: Option<f64>,
}

impl RetryConfig {
    /// Whether this configuration makes a sane schedule (the retry loop's `Backoff` is built
    /// only from one that does).
    ///
    /// # Errors
    /// [`InvalidBackoff`] naming the first bad key.
    pub fn check(&self) -> Result<(), InvalidBackoff> {
        if self.max_attempts == 0 || self.max_attempts > 1000 {
            return Err(InvalidBackoff::MaxAttempts);
        }
        if self.max_delay > Duration::from_secs(600) {
            return Err(InvalidBackoff::MaxDelay);
        }
        if self.min_delay.is_zero() || self.min_delay > self.max_delay {
            return Err(InvalidBackoff::MinDelay);
        }
        if !self.multiplier.is_finite() || !(1.0..=100.0).contains(&self.multiplier) {
            return Err(InvalidBackoff::Multiplier);
        }
        if !self.jitter.is_finite() || !(0.0..=1.0).contains(&self.jitter) {
            return Err(InvalidBackoff::Jitter);
        }
        Ok(())
    }

    /// The delay after attempt number `attempt` (1-based) failed, before jitter.
    pub fn base_delay(&self, attempt: u32) -> Duration {
        let exponent = attempt.saturating_sub(1).min(1000) as i32;
        let secs = self.min_delay.as_secs_f64() * self.multiplier.powi(exponent);
        let capped = secs.min(self.max_delay.as_secs_f64());
        Duration::from_secs_f64(capped)
    }

    /// Sum of the delays between all attempts, before jitter: how long a request is held at
    /// most, not counting the attempts themselves.
    pub fn total_before_jitter(&self) -> Duration {
        (1..self.max_attempts).map(|a| self.base_delay(a)).sum()
    }

    /// Sum of the delays between all attempts with every jitter draw at its upper bound: the
    /// longest the delays can hold a request.
    pub fn total_at_most(&self) -> Duration {
        self.total_before_jitter().mul_f64(1.0 + self.jitter)
    }

    pub(super) fn overridden(&self, o: &RetryOverride) -> RetryConfig {
        RetryConfig {
            max_attempts: o.max_attempts.unwrap_or(self.max_attempts),
            min_delay: o.min_delay.unwrap_or(self.min_delay),
            multiplier: o.multiplier.unwrap_or(self.multiplier),
            max_delay: o.max_delay.unwrap_or(self.max_delay),
            jitter: o.jitter.unwrap_or(self.jitter),
        }
    }
}

/// `[retry_budget]`: a process-wide cap on retries, in the spirit of tower's retry budget.
/// When it is empty a held request skips that dispatch and waits for its next backoff step
/// instead of hammering a sick backend; it fails only when its own attempts run out.
#[derive(Clone, Debug, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct BudgetConfig {
    /// Retries always allowed per second, whatever the request rate.
    pub min_per_second: u32,
    /// Retries allowed as a fraction of recent requests (0.2 = one retry per five requests).
    pub ratio: f32,
    /// How long a request counts toward `ratio`.
    #[serde(with = "humantime_serde")]
    pub ttl: Duration,
}

impl Default for BudgetConfig {
    fn default() -> Self {
        BudgetConfig {
            min_per_second: 100,
            ratio: 0.2,
            ttl: Duration::from_secs(10),
        }
    }
}

impl BudgetConfig {
    /// Checks `[retry_budget]`.
    pub(super) fn check(&self) -> Result<(), ConfigError> {
        if !(self.ratio >= 0.0 && self.ratio <= 1000.0) {
            return Err(invalid("retry_budget.ratio", "must be between 0 and 1000"));
        }
        if self.ttl < Duration::from_secs(1) || self.ttl > Duration::from_secs(60) {
            return Err(invalid("retry_budget.ttl", "must be between 1s and 60s"));
        }
        Ok(())
    }
}

pub(super) fn check_retry(key: &str, retry: &RetryConfig) -> Result<(), ConfigError> {
    retry
        .check()
        .map_err(|e| invalid(format!("{key}.{}", e.key()), e.to_string()))
}

/// How long exact mode keeps a recorded reply: longer than any retry budget holds a request
/// (`validate()` refuses a schedule that could outlast it).
pub const TOKEN_TTL: Duration = Duration::from_secs(15 * 60);

pub(super) fn check_acquire(key: &str, timeout: Duration) -> Result<(), ConfigError> {
    if timeout.is_zero() || timeout > Duration::from_secs(300) {
        return Err(invalid(key, "must be between 1ms and 300s"));
    }
    Ok(())
}
