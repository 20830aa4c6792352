//! A worker's fixed-rate schedule: one tokio `Interval` polled by the worker's task, rather than
//! a timer re-armed at every tick (docs/dependencies.md §7).

use std::task::{Context as TaskContext, Poll};
use std::time::Duration;

use tokio::time::{Instant, Interval, MissedTickBehavior};

/// A worker's fixed-rate schedule: ticks at `from + k·interval`, and a tick missed because the
/// worker was not run in time collapses into one late tick, the grid kept (Go's ticker; tokio's
/// `MissedTickBehavior::Skip`). A restart replaces it.
pub(super) struct Ticks {
    interval: Interval,
}

impl Ticks {
    /// Must be made on the runtime the worker runs on: the timer belongs to it.
    pub(super) fn new(from: Instant, interval: Duration) -> Self {
        // Never zero (tokio panics on it): the period and start interval are validated well above.
        Ticks::first_at(from + interval.max(Duration::from_millis(1)), interval)
    }

    /// A schedule whose first tick is at `first`, then every `interval`.
    pub(super) fn first_at(first: Instant, interval: Duration) -> Self {
        let interval = interval.max(Duration::from_millis(1));
        let mut ticks = tokio::time::interval_at(first, interval);
        ticks.set_missed_tick_behavior(MissedTickBehavior::Skip);
        Ticks { interval: ticks }
    }

    /// The due time of the next tick, once it has come.
    pub(super) fn poll_tick(&mut self, task: &mut TaskContext<'_>) -> Poll<Instant> {
        self.interval.poll_tick(task)
    }
}
