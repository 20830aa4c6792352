//! The back-off of cluster mode's retry loops (the pod watch's re-list, a failed liveness
//! DELETE): doubling from an initial wait up to a cap, optionally jittered.
//!
//! Upstream counterpart: client-go's `wait.Backoff` / the reflector's back-off manager. The
//! kubelet's reflector backs off up to 30 s; the pod watch here is capped at 1 s instead, so a
//! pod created when the API server returns is seen within about two seconds of its return
//! (see [`super::watch`]).

use std::time::Duration;

use tokio::time::Instant;

/// Doubling waits from `initial` up to `max`.
#[derive(Debug, Clone)]
pub struct Backoff {
    initial: Duration,
    max: Duration,
    /// Each wait is drawn from its upper half ("equal jitter"), so waits never exceed `max`.
    jitter: bool,
    /// A reset is ignored until the last wait is this old: a watcher reports success (an
    /// `Init` marker) before its first request even ran.
    reset_after: Duration,
    current: Option<Duration>,
    last: Option<Instant>,
}

impl Backoff {
    pub fn new(initial: Duration, max: Duration) -> Self {
        Backoff { initial, max, jitter: false, reset_after: Duration::ZERO, current: None, last: None }
    }

    /// Waits drawn from the upper half of each step, so that many agents restarted together
    /// do not retry in step.
    #[must_use]
    pub fn jittered(mut self) -> Self {
        self.jitter = true;
        self
    }

    /// Ignore resets that come sooner than `quiet` after the last wait.
    #[must_use]
    pub fn reset_after(mut self, quiet: Duration) -> Self {
        self.reset_after = quiet;
        self
    }

    /// The next wait: `initial`, then twice the last, at most `max`.
    pub fn next_delay(&mut self) -> Duration {
        let step = match self.current {
            None => self.initial,
            Some(last) => last.saturating_mul(2).min(self.max),
        };
        self.current = Some(step);
        self.last = Some(Instant::now());
        if self.jitter { step.mul_f64(0.5 + rand::random::<f64>() / 2.0) } else { step }
    }

    /// Starts over from `initial` (unless the last wait is younger than `reset_after`).
    pub fn reset(&mut self) {
        if self.last.is_none_or(|last| last.elapsed() >= self.reset_after) {
            self.current = None;
        }
    }
}

impl Iterator for Backoff {
    type Item = Duration;

    fn next(&mut self) -> Option<Duration> {
        Some(self.next_delay())
    }
}

impl kube::runtime::utils::Backoff for Backoff {
    fn reset(&mut self) {
        Backoff::reset(self);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn doubles_up_to_the_cap() {
        let mut b = Backoff::new(Duration::from_secs(1), Duration::from_secs(30));
        let waits: Vec<u64> = (0..7).map(|_| b.next_delay().as_secs()).collect();
        assert_eq!(waits, [1, 2, 4, 8, 16, 30, 30]);
        b.reset();
        assert_eq!(b.next_delay(), Duration::from_secs(1));
    }

    #[test]
    fn jitter_stays_within_the_upper_half_and_the_cap() {
        let mut b = Backoff::new(Duration::from_millis(500), Duration::from_secs(1)).jittered();
        let first = b.next_delay();
        assert!((Duration::from_millis(250)..=Duration::from_millis(500)).contains(&first), "{first:?}");
        for _ in 0..100 {
            let wait = b.next_delay();
            assert!((Duration::from_millis(500)..=Duration::from_secs(1)).contains(&wait), "{wait:?}");
        }
    }

    #[tokio::test(start_paused = true)]
    async fn resets_right_after_a_wait_are_ignored() {
        let mut b = Backoff::new(Duration::from_millis(250), Duration::from_secs(1))
            .reset_after(Duration::from_secs(5));
        b.next_delay();
        b.next_delay();
        b.reset();
        assert_eq!(b.next_delay(), Duration::from_secs(1), "a reset 0 s after the last wait is ignored");
        tokio::time::advance(Duration::from_secs(5)).await;
        b.reset();
        assert_eq!(b.next_delay(), Duration::from_millis(250), "five quiet seconds start over");
    }
}
