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

    /// The wall-clock time at `instant` of tokio's clock, for a clock that derives the one
    /// from the other; `None` (the default) for one that does not, whose caller reads
    /// [`Clock::now`]. A probe worker that has just read tokio's clock asks this first, to
    /// read the time once a probe rather than twice (docs/benchmarks.md, "Fewer clock reads
    /// and inbox polls a probe").
    fn at(&self, instant: tokio::time::Instant) -> Option<Timestamp> {
        let _ = instant;
        None
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
        self.wall_at(tokio::time::Instant::now())
    }

    fn at(&self, instant: tokio::time::Instant) -> Option<Timestamp> {
        Some(self.wall_at(instant))
    }
}

impl TokioClock {
    fn wall_at(&self, instant: tokio::time::Instant) -> Timestamp {
        let elapsed = instant.saturating_duration_since(self.base_instant);
        let elapsed = SignedDuration::try_from(elapsed).unwrap_or(SignedDuration::MAX);
        self.base_wall.checked_add(elapsed).unwrap_or(Timestamp::MAX)
    }
}

/// A shared clock.
pub type SharedClock = Arc<dyn Clock>;

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    #[tokio::test(start_paused = true)]
    async fn the_wall_time_at_an_instant_is_the_time_now_read_then() {
        let start = Timestamp::from_second(1_700_000_000).expect("a timestamp");
        let clock = TokioClock::starting_at(start);
        let then = tokio::time::Instant::now();
        tokio::time::advance(Duration::from_millis(2_500)).await;
        assert_eq!(clock.at(then), Some(start));
        assert_eq!(clock.at(tokio::time::Instant::now()), Some(clock.now()));
        assert_eq!(clock.now(), start.checked_add(SignedDuration::from_millis(2_500)).expect("in range"));
    }

    #[test]
    fn a_clock_that_is_not_tokio_s_leaves_the_caller_to_read_it() {
        struct Fixed;
        impl Clock for Fixed {
            fn now(&self) -> Timestamp {
                Timestamp::UNIX_EPOCH
            }
        }
        assert_eq!(Fixed.at(tokio::time::Instant::now()), None);
    }
}
