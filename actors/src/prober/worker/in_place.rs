//! A worker's `Reconfigure` (`MutableContainerProbes`): the new probe spec taken in place, as
//! docs/prober.md §3.9 says, keeping or resetting the worker's counts and schedule.

use std::time::Duration;

use tokio::time::Instant;

use crate::prober::PodContainer;
use crate::prober::do_probe::WorkerSpec;
use crate::prober::reconcile::UpdateEffect;

use super::{Phase, ProbeWorker};

// === the message ===

/// The pod's probe spec changed in place (`MutableContainerProbes`, sent by the prober
/// manager's `ReconcilePod`): the worker takes the new spec and applies `effect` as
/// docs/prober.md §3.9 says. Only the fields the effect names change how the worker runs;
/// the rest of the new spec is kept for later (a restarted worker, a probe-triggered kill).
#[derive(Debug, Clone)]
pub struct Reconfigure {
    /// The container holding the new probe, read through the pod as it is now.
    pub container: PodContainer,
    /// What the worker captures from the new probe spec (thresholds, initial delay).
    pub spec: WorkerSpec,
    /// The new period.
    pub period: Duration,
    /// The new readiness start interval, if any.
    pub start_interval: Option<Duration>,
    /// The new timeout.
    pub timeout: Duration,
    /// What the change does to the worker.
    pub effect: UpdateEffect,
}

// === its handling ===

impl ProbeWorker {
    pub(super) fn reconfigure(&mut self, msg: Reconfigure) {
        let effect = msg.effect;
        self.container = msg.container;
        // Prepared again at the next probe, with a new memo: a probe still in flight keeps (and
        // may fill) the old one.
        self.prepared = None;
        self.spec.success_threshold = msg.spec.success_threshold;
        self.spec.failure_threshold = msg.spec.failure_threshold;
        let mut delay_now = false;
        if effect.initial_delay {
            let delay = (msg.spec.initial_delay_seconds, msg.spec.initial_delay);
            let current = self.state.container_id.as_ref().map(|id| &*id.id);
            if current.is_some() && self.probed.as_deref() == current {
                // The current container was probed: its first probe is behind it.
                self.pending_initial_delay = Some(Box::new(delay));
            } else {
                self.pending_initial_delay = None;
                (self.spec.initial_delay_seconds, self.spec.initial_delay) = delay;
                delay_now = true;
            }
        }
        if effect.reset_count {
            // The published result stays; the run of equal results starts over, so that the
            // new thresholds count only results that come from now on.
            self.state.result_run = 0;
        }
        self.timeout = msg.timeout;
        let interval = self.interval();
        self.period = msg.period;
        self.start_interval = msg.start_interval;
        if self.ticks.is_none() {
            // Still in the start-up jitter, drawn from the old period: the first probe runs
            // with the new spec, at once for a new handler (as after the jitter), and no later
            // than one new interval from now for a shorter one.
            self.shorten_jitter(effect.restart, self.interval() != interval);
            return;
        }
        if effect.restart {
            // The attempt in flight was started under the replaced configuration: dropping it
            // cancels it, so its result is never applied (upstream `IsResultCurrent`).
            self.in_flight = None;
            self.tick_pending = None;
            self.schedule_from(Instant::now());
            self.run_probe();
            return;
        }
        if delay_now && self.in_flight.is_none() {
            // The first probe is due when the new delay ends (at once if it has), as upstream's
            // newer worker reschedules it: the checks say how much of it is left. Before the
            // container's first probe this holds whatever else changed (upstream's
            // `nextRunLocked`): a new period as well does not put the first probe a period on.
            self.tick_pending = None;
            self.schedule_from(Instant::now());
            self.run_probe();
        } else if self.interval() != interval {
            // The next probe is due one new interval after the last completion; if that is
            // past, it runs at once (after the probe in flight, unless that one is still
            // waiting for its probe slot: then it is the probe due now).
            let now = Instant::now();
            let last = self.last_completed.unwrap_or(now);
            if last + self.interval() > now {
                // A new grid from the last completion: its first tick is the one due.
                self.schedule_from(last);
            } else if self.in_flight.is_some() {
                self.schedule_from(now);
                self.tick_pending = Some(now);
            } else {
                self.schedule_from(now);
                self.run_probe();
            }
        }
    }

    /// A reconfiguration during the start-up jitter: a `restart` ends it now (the first probe
    /// runs), a changed interval caps what is left of it at one new interval.
    fn shorten_jitter(&mut self, restart: bool, interval_changed: bool) {
        if restart {
            if matches!(self.phase, Phase::Starting(_) | Phase::Waiting(_)) {
                self.phase = Phase::Running;
                self.begin();
            }
            return;
        }
        if !interval_changed {
            return;
        }
        let cap = self.interval();
        match &mut self.phase {
            Phase::Starting(jitter) => *jitter = (*jitter).min(cap),
            Phase::Waiting(sleep) => {
                let deadline = Instant::now() + cap;
                if sleep.deadline() > deadline {
                    sleep.as_mut().reset(deadline);
                }
            }
            Phase::Running | Phase::Done => {}
        }
    }
}
