//! The process-wide retry budget: tower's `TpsBudget` (a sliding window of deposits), so that
//! every held request of one outage cannot hammer a sick backend at once.

use crate::config::BudgetConfig;
use tower::retry::budget::{Budget as _, TpsBudget};

/// Shared by every namespace through an `Arc`.
pub struct RetryBudget {
    /// The window of deposits and withdrawals.
    inner: TpsBudget,
}

impl RetryBudget {
    /// A budget per `config`.
    pub fn new(config: &BudgetConfig) -> RetryBudget {
        RetryBudget {
            inner: TpsBudget::new(config.ttl, config.min_per_second, config.ratio),
        }
    }

    /// Records a first attempt: each request earns `ratio` retries for everyone.
    pub fn deposit(&self) {
        self.inner.deposit();
    }

    /// Takes one retry from the budget; false when it is empty.
    pub fn withdraw(&self) -> bool {
        self.inner.withdraw()
    }
}
