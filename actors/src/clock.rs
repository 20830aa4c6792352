//! The one way the engine reads wall-clock time. Timestamps that reach pod status
//! (`lastTransitionTime`, `startTime`) and comparisons with `startedAt` go through a [`Clock`],
//! so tests under paused tokio time see a wall clock that moves with `tokio::time::advance`.

use std::sync::Arc;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use k8s_openapi::jiff::{SignedDuration, Timestamp};

/// A source of wall-clock time.
pub trait Clock: Send + Sync + 'static {
    /// The current wall-clock time.
    fn now(&self) -> Timestamp;

    /// The current time as the API's `metav1.Time`, for status timestamps.
    fn now_time(&self) -> Time {
        Time(self.now())
    }
}

/// Wall-clock time derived from tokio's clock: the system time when created, advanced by
/// tokio's monotonic `Instant` since. Under paused tokio time it advances only with the test.
#[derive(Debug, Clone, Copy)]
pub struct TokioClock {
    base_wall: Timestamp,
    base_instant: tokio::time::Instant,
}

impl TokioClock {
    /// A clock that reads the system time now and advances with tokio time from here.
    pub fn new() -> Self {
        // The one wall-clock read: every other reading of the time goes through a clock.
        #[allow(clippy::disallowed_methods)]
        let now = Timestamp::now();
        Self::starting_at(now)
    }

    /// A clock that reads `at` now (tests pin the wall clock to a known value).
    pub fn starting_at(at: Timestamp) -> Self {
        TokioClock { base_wall: at, base_instant: tokio::time::Instant::now() }
    }
}

impl Default for TokioClock {
    fn default() -> Self {
        Self::new()
    }
}

impl Clock for TokioClock {
    fn now(&self) -> Timestamp {
        let elapsed = tokio::time::Instant::now().saturating_duration_since(self.base_instant);
        let elapsed = SignedDuration::try_from(elapsed).unwrap_or(SignedDuration::MAX);
        self.base_wall.checked_add(elapsed).unwrap_or(Timestamp::MAX)
    }
}

/// A shared clock.
pub type SharedClock = Arc<dyn Clock>;
