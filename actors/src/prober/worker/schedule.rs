//! A worker's fixed-rate schedule: one tokio `Interval` polled as a future of the worker, rather
//! than a timer re-armed at every tick (docs/dependencies.md §7).

use std::pin::Pin;
use std::task::{Context as TaskContext, Poll};
use std::time::Duration;

use actix::prelude::*;
use tokio::time::{Instant, Interval, MissedTickBehavior};

use super::ProbeWorker;

/// A worker's fixed-rate schedule as a future of the worker: ticks at `from + k·interval`, and
/// a tick missed because the thread was busy collapses into one late tick, the grid kept (Go's
/// ticker; tokio's `MissedTickBehavior::Skip`). It ends once the worker has started a newer
/// schedule.
pub(super) struct Ticks {
    interval: Interval,
    generation: u32,
}

impl Ticks {
    pub(super) fn new(from: Instant, interval: Duration, generation: u32) -> Self {
        // Never zero (tokio panics on it): the period and start interval are validated well above.
        let interval = interval.max(Duration::from_millis(1));
        let mut ticks = tokio::time::interval_at(from + interval, interval);
        ticks.set_missed_tick_behavior(MissedTickBehavior::Skip);
        Ticks { interval: ticks, generation }
    }
}

impl ActorFuture<ProbeWorker> for Ticks {
    type Output = ();

    fn poll(
        self: Pin<&mut Self>,
        act: &mut ProbeWorker,
        ctx: &mut Context<ProbeWorker>,
        task: &mut TaskContext<'_>,
    ) -> Poll<()> {
        let this = self.get_mut();
        loop {
            if act.schedule != this.generation || !ctx.state().alive() {
                return Poll::Ready(());
            }
            let Poll::Ready(due) = this.interval.poll_tick(task) else { return Poll::Pending };
            act.on_tick(due, ctx);
        }
    }
}
