//! The bound on probes in flight (probelet's own; upstream runs every due probe at once, one
//! goroutine each). The real prober ([`super::Prober::with_slots`]; exec probes have a pool of
//! their own) takes one of a fixed number of slots before a probe's first try and gives it back
//! after its last, however the probe ends (a stopped worker drops its probe and the slot with
//! it), or, for a network probe whose timeout is longer than the slot's lease (`SLOT_LEASE`,
//! 10 s), once that lease is over. A probe that finds none free waits for one, in the order the
//! probes asked, and its timeout starts only once it has one: when the
//! node cannot keep up, probes start late instead of all running at once, each past its timeout
//! on starved threads, and failing (docs/prober.md §1.2, "Probe slots"; docs/benchmarks.md,
//! "Overload").
//!
//! The worker's schedule keeps at most one missed tick, so a worker waiting for a slot does not
//! pile probes up behind it: it probes once when the slot comes, then on its schedule (a tick
//! that came due while it waited is dropped: [`super::ProbeRun::waited`] tells the worker).

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use tokio::sync::{OwnedSemaphorePermit, Semaphore};
use tokio::time::Instant;

use crate::metrics as names;

/// The default limit: far above what a node's probes keep in flight when it keeps up (110 pods ×
/// 3 probes is 330 workers; a probe of a millisecond each second keeps under one in flight on
/// average), and low enough that the buffers of the probes in flight stay small (an HTTP probe
/// holds about 25 KB while it runs: 25 MB at the limit).
pub const DEFAULT_MAX_PROBES_IN_FLIGHT: usize = 1024;

/// How often, at most, the wait for a slot is logged.
const LOG_EVERY: Duration = Duration::from_secs(60);

/// The slots shared by a pipeline's workers. Cloning shares them.
#[derive(Debug, Clone)]
pub struct ProbeSlots {
    semaphore: Arc<Semaphore>,
    limit: usize,
    /// When the slots were made: `logged` counts from it.
    created: Instant,
    /// When a wait was last logged, in milliseconds since `created` ([`NEVER`] before the
    /// first): an atomic, since under overload every probe comes here.
    logged: Arc<AtomicU64>,
}

/// `logged` before the first log.
const NEVER: u64 = u64::MAX;

/// A slot held for one probe; given back when dropped.
#[derive(Debug)]
pub struct ProbeSlot {
    _permit: Option<OwnedSemaphorePermit>,
    waited: bool,
}

impl ProbeSlot {
    /// Whether the probe had to wait for this slot (none was free when it asked).
    pub fn waited(&self) -> bool {
        self.waited
    }
}

impl ProbeSlots {
    /// `limit` slots (at least one).
    pub fn new(limit: usize) -> Self {
        let limit = limit.clamp(1, Semaphore::MAX_PERMITS);
        // Exported at 0 from the start, so that a dashboard or an alert sees a node whose
        // probes never waited, rather than no series.
        metrics::counter!(names::PROBELET_PROBES_DELAYED_TOTAL).increment(0);
        ProbeSlots {
            semaphore: Arc::new(Semaphore::new(limit)),
            limit,
            created: Instant::now(),
            logged: Arc::new(AtomicU64::new(NEVER)),
        }
    }

    /// How many probes may run at once.
    pub fn limit(&self) -> usize {
        self.limit
    }

    /// How many slots are taken now.
    pub fn in_use(&self) -> usize {
        self.limit - self.semaphore.available_permits()
    }

    /// A slot, at once when one is free, else once one is given back (first come, first
    /// served). A probe that had to wait is counted in `probelet_probes_delayed_total`.
    pub async fn acquire(&self) -> ProbeSlot {
        if let Ok(permit) = self.semaphore.clone().try_acquire_owned() {
            return ProbeSlot { _permit: Some(permit), waited: false };
        }
        metrics::counter!(names::PROBELET_PROBES_DELAYED_TOTAL).increment(1);
        let _logged = self.log_wait();
        // The semaphore is never closed; if it were, the probe would run without a slot rather
        // than not at all.
        ProbeSlot { _permit: self.semaphore.clone().acquire_owned().await.ok(), waited: true }
    }

    /// Logs that probes wait, at most once per [`LOG_EVERY`]; says whether it did.
    fn log_wait(&self) -> bool {
        let now = u64::try_from(self.created.elapsed().as_millis()).unwrap_or(NEVER - 1);
        let last = self.logged.load(Ordering::Relaxed);
        let every = u64::try_from(LOG_EVERY.as_millis()).unwrap_or(u64::MAX);
        let due = last == NEVER || now.saturating_sub(last) >= every;
        // Of the probes that find the log due at once, the one that moves the time writes it.
        if !due || self.logged.compare_exchange(last, now, Ordering::Relaxed, Ordering::Relaxed).is_err() {
            return false;
        }
        tracing::warn!(
            limit = self.limit,
            "Every probe slot is in use: probes wait for one and start late (the node cannot keep up with its probes)"
        );
        true
    }
}

impl Default for ProbeSlots {
    fn default() -> Self {
        ProbeSlots::new(DEFAULT_MAX_PROBES_IN_FLIGHT)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Mutex;

    #[tokio::test(start_paused = true)]
    async fn a_probe_waits_for_a_slot_given_back() {
        let slots = ProbeSlots::new(2);
        let a = slots.acquire().await;
        let _b = slots.acquire().await;
        assert!(!a.waited());
        assert_eq!(slots.in_use(), 2);
        let waiting = {
            let slots = slots.clone();
            tokio::spawn(async move { slots.acquire().await })
        };
        tokio::task::yield_now().await;
        assert!(!waiting.is_finished(), "no slot is free");
        drop(a);
        let c = waiting.await.unwrap();
        assert!(c.waited());
        assert_eq!(slots.in_use(), 2);
    }

    #[tokio::test(start_paused = true)]
    async fn slots_are_handed_out_in_the_order_asked() {
        let slots = ProbeSlots::new(1);
        let held = slots.acquire().await;
        let order = Arc::new(Mutex::new(Vec::new()));
        let mut tasks = Vec::new();
        for i in 0..3 {
            let (slots, order) = (slots.clone(), order.clone());
            tasks.push(tokio::spawn(async move {
                let _slot = slots.acquire().await;
                order.lock().unwrap().push(i);
            }));
            tokio::task::yield_now().await;
        }
        drop(held);
        for task in tasks {
            task.await.unwrap();
        }
        assert_eq!(*order.lock().unwrap(), vec![0, 1, 2]);
        assert_eq!(slots.in_use(), 0);
    }

    #[tokio::test(start_paused = true)]
    async fn waiting_is_logged_at_most_once_a_minute() {
        let slots = ProbeSlots::new(1);
        assert!(slots.log_wait(), "the first wait");
        assert!(!slots.log_wait());
        tokio::time::advance(Duration::from_secs(59)).await;
        assert!(!slots.log_wait());
        tokio::time::advance(Duration::from_secs(1)).await;
        assert!(slots.log_wait(), "a minute later");
        assert!(!slots.log_wait());
    }

    #[test]
    fn a_limit_of_zero_is_one() {
        assert_eq!(ProbeSlots::new(0).limit(), 1);
    }
}
