//! The options of an external kernel process.

use std::time::Duration;

/// How a live kernel is run.
#[derive(Clone, Copy, Debug)]
pub struct ExternalOptions {
    /// How long one reply may take.
    pub reply_timeout: Duration,
    /// The whole run's time: a request after it is spent ends the run (bounds the shrinking).
    pub budget: Duration,
    /// Polled while waiting for a reply: `true` stops the run at once (a signal arrived).
    pub stop: fn() -> bool,
}

impl ExternalOptions {
    /// The given reply timeout, a budget of ten minutes, no stop.
    pub fn with_timeout(reply_timeout: Duration) -> Self {
        ExternalOptions { reply_timeout, budget: Duration::from_secs(600), stop: || false }
    }
}
