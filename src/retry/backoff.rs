//! Exponential backoff with proportional jitter, built only from a [`RetryConfig`] that
//! passes [`RetryConfig::check`]. The schedule's arithmetic (each delay before jitter, the
//! totals) is `RetryConfig`'s, so that validation in `config` reads the same schedule; this
//! module draws the jitter.
//!
//! Written here rather than taken from a crate because the delay schedule is part of the
//! product's promise (docs/failures.md, "What happens when a backend fails": 92.6 s of backoff over 15
//! attempts with the defaults) and the jitter has to mean exactly what the configuration
//! documents: `[d, d·(1+jitter)]`.

use crate::config::RetryConfig;
use rand::Rng;
use std::time::Duration;

pub use crate::config::InvalidBackoff;

/// The delay schedule of one namespace.
#[derive(Debug, Clone, PartialEq)]
pub struct Backoff {
    /// Attempts in all, the first included.
    pub max_attempts: u32,
    /// The checked configuration the schedule is computed from.
    config: RetryConfig,
}

impl Backoff {
    /// Checks `config` and builds the schedule.
    ///
    /// # Errors
    /// [`InvalidBackoff`] naming the first bad key.
    pub fn new(config: &RetryConfig) -> Result<Backoff, InvalidBackoff> {
        config.check()?;
        Ok(Backoff {
            max_attempts: config.max_attempts,
            config: config.clone(),
        })
    }

    /// The delay after attempt number `attempt` (1-based) failed, before jitter.
    pub fn base_delay(&self, attempt: u32) -> Duration {
        self.config.base_delay(attempt)
    }

    /// The delay after attempt `attempt` failed, with jitter drawn from `rng`.
    pub fn delay(&self, attempt: u32, rng: &mut impl Rng) -> Duration {
        let base = self.base_delay(attempt);
        if self.config.jitter == 0.0 {
            return base;
        }
        let factor = 1.0 + rng.gen_range(0.0..=self.config.jitter);
        base.mul_f64(factor)
    }

    /// Sum of the delays between all attempts, before jitter: how long a request is held at
    /// most, not counting the attempts themselves.
    pub fn total_before_jitter(&self) -> Duration {
        self.config.total_before_jitter()
    }

    /// Sum of the delays between all attempts with every jitter draw at its upper bound: the
    /// longest the delays can hold a request.
    pub fn total_at_most(&self) -> Duration {
        self.config.total_at_most()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use rand::{rngs::StdRng, SeedableRng};

    #[test]
    fn defaults_hold_about_93_seconds() {
        let b = Backoff::new(&RetryConfig::default()).unwrap();
        let total = b.total_before_jitter().as_secs_f64();
        // 0.2+0.4+0.8+1.6+3.2+6.4 = 12.6, then 8 × 10 s capped = 92.6 s.
        assert!((total - 92.6).abs() < 0.01, "{total}");
        assert_eq!(b.base_delay(1), Duration::from_millis(200));
        assert_eq!(b.base_delay(7), Duration::from_secs(10));
    }

    #[test]
    fn each_bad_key_is_named() {
        let good = RetryConfig::default();
        let cases: Vec<(RetryConfig, &str)> = vec![
            (
                RetryConfig {
                    max_attempts: 0,
                    ..good.clone()
                },
                "max_attempts",
            ),
            (
                RetryConfig {
                    min_delay: Duration::ZERO,
                    ..good.clone()
                },
                "min_delay",
            ),
            (
                RetryConfig {
                    min_delay: Duration::from_secs(20),
                    ..good.clone()
                },
                "min_delay",
            ),
            (
                RetryConfig {
                    max_delay: Duration::from_secs(601),
                    ..good.clone()
                },
                "max_delay",
            ),
            (
                RetryConfig {
                    multiplier: 0.5,
                    ..good.clone()
                },
                "multiplier",
            ),
            (
                RetryConfig {
                    multiplier: f64::NAN,
                    ..good.clone()
                },
                "multiplier",
            ),
            (
                RetryConfig {
                    jitter: 1.5,
                    ..good.clone()
                },
                "jitter",
            ),
            (
                RetryConfig {
                    jitter: -0.1,
                    ..good.clone()
                },
                "jitter",
            ),
        ];
        for (config, key) in cases {
            assert_eq!(Backoff::new(&config).unwrap_err().key(), key, "{config:?}");
        }
    }

    proptest! {
        #[test]
        fn delays_stay_within_their_bounds(
            attempts in 1u32..50,
            min_ms in 1u64..5_000,
            extra_ms in 0u64..60_000,
            multiplier in 1.0f64..10.0,
            jitter in 0.0f64..=1.0,
            attempt in 1u32..60,
            seed in any::<u64>(),
        ) {
            let config = RetryConfig {
                max_attempts: attempts,
                min_delay: Duration::from_millis(min_ms),
                max_delay: Duration::from_millis(min_ms + extra_ms),
                multiplier,
                jitter,
            };
            let b = Backoff::new(&config).unwrap();
            let base = b.base_delay(attempt);
            prop_assert!(base >= config.min_delay.min(config.max_delay));
            prop_assert!(base <= config.max_delay);
            let d = b.delay(attempt, &mut StdRng::seed_from_u64(seed));
            prop_assert!(d >= base);
            prop_assert!(d <= base.mul_f64(1.0 + jitter) + Duration::from_nanos(1));
            // The schedule never shrinks.
            prop_assert!(b.base_delay(attempt + 1) >= base);
        }
    }
}
