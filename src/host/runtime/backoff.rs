//! The crash-loop back-off of one container.

use std::time::Duration;

use tokio::time::Instant;

/// One container's crash-loop back-off: upstream `flowcontrol.Backoff` for one key, without
/// jitter (the kubelet uses none). The back-off grows each time the container is started after
/// an exit and starts over when the container ran longer than twice the maximum since its last
/// start (the kubelet's "ran for 10 minutes").
#[derive(Debug, Clone)]
pub(super) struct Backoff {
    initial: Duration,
    max: Duration,
    entry: Option<BackoffEntry>,
}

#[derive(Debug, Clone, Copy)]
struct BackoffEntry {
    backoff: Duration,
    last_update: Instant,
}

impl Backoff {
    pub(super) fn new(initial: Duration, max: Duration) -> Self {
        Backoff { initial, max, entry: None }
    }

    /// The back-off in force, once there is one.
    pub(super) fn current(&self) -> Option<Duration> {
        self.entry.map(|e| e.backoff)
    }

    /// Upstream `IsInBackOffSince`: how long the container must still wait after an exit at
    /// `event`, or `None` if it may start now.
    pub(super) fn remaining_since(&self, event: Instant, now: Instant) -> Option<Duration> {
        let entry = self.entry?;
        if self.has_expired(event, entry.last_update) {
            return None;
        }
        let elapsed = now.saturating_duration_since(event);
        (elapsed < entry.backoff).then(|| entry.backoff - elapsed)
    }

    /// Upstream `Next`: the container starts now after an exit at `event`; the next back-off
    /// doubles, or starts over if the entry has expired.
    pub(super) fn next(&mut self, event: Instant, now: Instant) {
        let backoff = match self.entry {
            Some(entry) if !self.has_expired(event, entry.last_update) => {
                entry.backoff.saturating_mul(2).min(self.max)
            }
            _ => self.initial,
        };
        self.entry = Some(BackoffEntry { backoff, last_update: now });
    }

    pub(super) fn has_expired(&self, event: Instant, last_update: Instant) -> bool {
        event.saturating_duration_since(last_update) > self.max.saturating_mul(2)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MS: Duration = Duration::from_millis(1);

    #[test]
    fn backoff_first_restart_is_immediate_then_doubles_to_the_max() {
        let start = Instant::now();
        let mut backoff = Backoff::new(10 * MS, 40 * MS);
        // No entry yet: the first exit restarts at once.
        assert_eq!(backoff.remaining_since(start, start), None);
        backoff.next(start, start);
        assert_eq!(backoff.current(), Some(10 * MS));
        let exit = start + 5 * MS;
        assert_eq!(backoff.remaining_since(exit, exit), Some(10 * MS));
        assert_eq!(backoff.remaining_since(exit, exit + 4 * MS), Some(6 * MS));
        assert_eq!(backoff.remaining_since(exit, exit + 10 * MS), None);
        backoff.next(exit, exit + 10 * MS);
        assert_eq!(backoff.current(), Some(20 * MS));
        let now = exit + 10 * MS;
        backoff.next(now, now);
        assert_eq!(backoff.current(), Some(40 * MS));
        backoff.next(now, now);
        assert_eq!(backoff.current(), Some(40 * MS), "capped at the max");
    }

    #[test]
    fn backoff_starts_over_after_a_long_run() {
        let start = Instant::now();
        let mut backoff = Backoff::new(10 * MS, 40 * MS);
        backoff.next(start, start);
        backoff.next(start, start);
        assert_eq!(backoff.current(), Some(20 * MS));
        // Ran 81 ms (> 2 × max) since the last start.
        let exit = start + 81 * MS;
        assert_eq!(backoff.remaining_since(exit, exit), None);
        backoff.next(exit, exit);
        assert_eq!(backoff.current(), Some(10 * MS));
        // Exactly 2 × max is not expired.
        let exit = exit + 80 * MS;
        assert_eq!(backoff.remaining_since(exit, exit), Some(10 * MS));
    }
}
