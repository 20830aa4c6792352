//! The one way the engine reads wall-clock time. Timestamps that reach pod status
//! (`lastTransitionTime`, `startTime`, `startedAt`) and comparisons with them (a probe's
//! `initialDelaySeconds` against `startedAt`, a restart's grace against the agent's start, a
//! pod's `activeDeadlineSeconds`) go through a [`Clock`].
//!
//! Two clocks:
//!
//! - [`SystemClock`], what the agent runs on and the engine's default: it reads the node's wall
//!   clock at every reading, as the kubelet reads `time.Now()`. A step of the node's clock (NTP
//!   correcting it at boot on a device without a real-time clock, a VM's clock set after it
//!   started) and a suspend (during which tokio's monotonic clock stands still) show in the
//!   next reading. What the engine reads for what, and what a step does:
//!   docs/reliability.md, "The node's clock: steps and suspend".
//! - [`TokioClock`], for tests under paused tokio time: a wall clock that starts at a given time
//!   and moves with `tokio::time::advance` only. It is never right for a real node: it reads the
//!   system's time once, and a step or a suspend after that leaves every later reading off by it
//!   for good.
//!
//! Durations that only time the agent's own work (back-off, timers, the start-up jitter's age,
//! a status write's latency) are not wall-clock differences: they use tokio's monotonic
//! `Instant`, which no step moves.
//!
//! **Cost.** A probe worker reads the time once a probe ([`Clock::at`]; docs/benchmarks.md,
//! "Fewer clock reads and inbox polls a probe"). [`SystemClock`] cannot derive the wall time
//! from the tokio instant the worker has just read (that would take its offset from one
//! reading, and miss every step since), so it answers `None` there and the worker reads the
//! wall clock itself: one more `clock_gettime(CLOCK_REALTIME)` a probe, served by the vDSO
//! without a system call, about 20–30 ns.

use std::sync::Arc;
use std::sync::atomic::{AtomicI64, Ordering};

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

/// The node's wall clock, read afresh at every [`Clock::now`]: what the agent runs on, and the
/// engine's clock when its host gives none.
#[derive(Debug, Clone, Copy, Default)]
pub struct SystemClock;

impl Clock for SystemClock {
    fn now(&self) -> Timestamp {
        // The one read of the system's wall clock: everything else reads it through a clock.
        #[allow(clippy::disallowed_methods)]
        Timestamp::now()
    }

    // `at` stays `None`: a wall time derived from a tokio instant would miss a step since.
}

/// Wall-clock time derived from tokio's clock, for tests under paused tokio time: a given
/// wall time when created, advanced by tokio's monotonic `Instant` since, so it moves only
/// with the test (`tokio::time::advance`). Not for a real node: it follows neither a step of
/// the node's clock nor a suspend ([`SystemClock`] does).
#[derive(Debug, Clone, Copy)]
pub struct TokioClock {
    base_wall: Timestamp,
    base_instant: tokio::time::Instant,
}

impl TokioClock {
    /// A clock that reads the system time now and advances with tokio time from here (a test
    /// that wants real-looking timestamps but a clock it drives).
    pub fn new() -> Self {
        Self::starting_at(SystemClock.now())
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

/// A [`TokioClock`] whose wall time can be stepped, as NTP steps a node's clock, for tests of
/// what a step does: its readings are the tokio clock's plus every [`SteppingClock::step`] so
/// far (a step back makes them go back). Shared through an `Arc`; `step` takes `&self`.
#[derive(Debug)]
pub struct SteppingClock {
    base: TokioClock,
    /// The sum of the steps, in nanoseconds.
    offset: AtomicI64,
}

impl SteppingClock {
    /// A clock that reads `at` now and moves with tokio time, until stepped.
    pub fn starting_at(at: Timestamp) -> Self {
        SteppingClock { base: TokioClock::starting_at(at), offset: AtomicI64::new(0) }
    }

    /// Steps the wall clock by `by` (negative: back), as `date -s` or an NTP step would.
    pub fn step(&self, by: SignedDuration) {
        let nanos =
            i64::try_from(by.as_nanos()).unwrap_or(if by.is_negative() { i64::MIN } else { i64::MAX });
        let _ =
            self.offset.fetch_update(Ordering::Relaxed, Ordering::Relaxed, |o| Some(o.saturating_add(nanos)));
    }

    fn shifted(&self, wall: Timestamp) -> Timestamp {
        let offset = SignedDuration::from_nanos(self.offset.load(Ordering::Relaxed));
        wall.checked_add(offset).unwrap_or(if offset.is_negative() { Timestamp::MIN } else { Timestamp::MAX })
    }
}

impl Clock for SteppingClock {
    fn now(&self) -> Timestamp {
        self.shifted(self.base.now())
    }

    fn at(&self, instant: tokio::time::Instant) -> Option<Timestamp> {
        self.base.at(instant).map(|wall| self.shifted(wall))
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

    /// The agent's clock is the node's: under paused tokio time advanced by an hour it still
    /// reads the real time, so it cannot be derived from tokio's clock (a clock that was, read
    /// the system time once at start and followed no step of it after).
    #[tokio::test(start_paused = true)]
    async fn the_system_clock_reads_the_node_s_clock_not_tokio_s() {
        let tokio_clock = TokioClock::new();
        let before = SystemClock.now();
        tokio::time::advance(Duration::from_secs(3_600)).await;
        let read = SystemClock.now();
        #[allow(clippy::disallowed_methods)]
        let real = Timestamp::now();
        assert!(before <= read && read <= real, "{before} <= {read} <= {real}");
        assert!(
            read.duration_since(before) < SignedDuration::from_secs(600),
            "an hour of tokio time moved it"
        );
        assert!(
            tokio_clock.now().duration_since(real) > SignedDuration::from_secs(3_000),
            "tokio's clock did move"
        );
        assert_eq!(SystemClock.at(tokio::time::Instant::now()), None, "the worker reads it itself");
    }

    #[tokio::test(start_paused = true)]
    async fn a_stepping_clock_moves_with_tokio_time_and_its_steps() {
        let start = Timestamp::from_second(1_700_000_000).expect("a timestamp");
        let clock = SteppingClock::starting_at(start);
        let then = tokio::time::Instant::now();
        tokio::time::advance(Duration::from_secs(10)).await;
        clock.step(SignedDuration::from_hours(-1));
        let expected = start.checked_add(SignedDuration::from_secs(10 - 3_600)).expect("in range");
        assert_eq!(clock.now(), expected);
        assert_eq!(clock.at(then), Some(start.checked_sub(SignedDuration::from_hours(1)).expect("in range")));
        clock.step(SignedDuration::from_hours(2));
        assert_eq!(clock.now(), expected.checked_add(SignedDuration::from_hours(2)).expect("in range"));
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
