//! The probe worker (upstream `pkg/kubelet/prober/worker.go`): one per pod × container × probe
//! kind. It probes on a fixed-rate schedule (first probe at once, start-up jitter only while the
//! manager is young), runs a manual trigger at once and restarts the schedule from it, applies
//! [`WorkerState`]'s decisions to the results cache, and reports its exit to the prober manager,
//! which removes the worker's cache entry and metric series unless a newer worker has taken its
//! key over (upstream's worker removes them itself; here a replacement can start before the
//! worker it replaces has exited).
//!
//! A worker is a `Send` task, not an actor: upstream's is a goroutine, which Go's scheduler moves
//! to whichever thread runs, and a task on a work-stealing tokio runtime is the same. An actor
//! would be fixed to one arbiter's thread, and while that thread waits for its CPU (steal, a
//! real-time thread) every worker on it waits too (docs/benchmarks.md, "Sharing the CPUs";
//! docs/architecture.md, "Threads and time"). The manager reaches the worker through a
//! [`WorkerHandle`]: a channel of the worker's own carrying what would be its messages (stop,
//! trigger, reconfigure, a predecessor's exit, a state query), taken in order. A probe runs as a
//! future the task owns: stopping the worker drops it (an exec child is killed when its future
//! is dropped), and a panic inside it is caught. A panic in the worker itself ends the task
//! with an unclean exit notice, and the manager restarts it from its state.
//!
//! Under `MutableContainerProbes` the manager sends [`Reconfigure`] when the pod's probe spec
//! changes; a change that restarts the worker drops the attempt in flight, so no result of an
//! attempt started under a replaced configuration is ever applied (upstream `IsResultCurrent`,
//! docs/prober.md §3.9); that message and its handling are in `in_place.rs`, the fixed-rate
//! schedule in `schedule.rs`.
//!
//! With the pod's probe timing annotation (our addition, docs/probe-timing.md) the period and
//! timeout can be in milliseconds, and a readiness start interval replaces the period until
//! the container's first readiness success; without it the worker is upstream's.

use std::future::Future;
use std::panic::AssertUnwindSafe;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context as TaskContext, Poll};
use std::time::Duration;

use actix::prelude::*;
use futures::channel::{mpsc, oneshot};
use futures::future::BoxFuture;
use futures::{FutureExt, StreamExt};
use k8s_openapi::api::core::v1::Pod;
use tokio::runtime::Handle;
use tokio::time::{Instant, Sleep};

use super::do_probe::{CacheOp, Step, WorkerSpec, WorkerState};
use super::probe_metrics as metrics;
use super::{PodContainer, PreparedProbe, ProbeMemo, ProbeResult, ProbeRun, ProbeRunner};
use crate::clock::SharedClock;
use crate::container::ContainerId;
use crate::results::{RemoveResult, ResultsSink, ResultsView, SeedResult, SetResult};
use crate::status::probe_status::{PodProbeStatus, ProbedContainer};
use crate::status::views::StatusView;
pub use crate::vocabulary::ProbeKey;

mod in_place;
mod schedule;

pub use in_place::Reconfigure;
use schedule::Ticks;

// === messages ===

/// The prober manager's hold on a running worker: what it tells the worker, in order. Dropping
/// every handle stops the worker, as a `Stop` does (its manager is gone).
#[derive(Debug, Clone)]
pub struct WorkerHandle {
    inbox: mpsc::UnboundedSender<Control>,
}

/// What a [`WorkerHandle`] sends its worker.
#[derive(Debug)]
enum Control {
    /// Stop the worker (upstream `worker.stop`); idempotent.
    Stop,
    /// Run a probe now and restart the schedule from it (upstream `manualTriggerCh`).
    Trigger,
    /// The pod's probe spec changed in place; boxed, as it is rare and large.
    Reconfigure(Box<Reconfigure>),
    /// See [`WorkerHandle::predecessor_exited`].
    PredecessorExited(ContainerId),
    /// The worker's state as it stands.
    GetState(oneshot::Sender<WorkerState>),
}

impl WorkerHandle {
    /// Stops the worker (upstream `worker.stop`): a probe in flight is cancelled. Idempotent.
    pub fn stop(&self) {
        let _ = self.inbox.unbounded_send(Control::Stop);
    }

    /// Runs a probe now and restarts the schedule from it (upstream `manualTriggerCh`); false
    /// when the worker is gone.
    pub fn trigger(&self) -> bool {
        self.inbox.unbounded_send(Control::Trigger).is_ok()
    }

    /// Applies a probe spec changed in place (`MutableContainerProbes`).
    pub fn reconfigure(&self, change: Reconfigure) {
        let _ = self.inbox.unbounded_send(Control::Reconfigure(Box::new(change)));
    }

    /// Tells a worker that replaced one which has now exited which container's cache entry the
    /// exited worker left behind: the entry is the new worker's if that is (or may still become)
    /// its container, and is removed if the new worker already has another.
    pub fn predecessor_exited(&self, container_id: ContainerId) {
        let _ = self.inbox.unbounded_send(Control::PredecessorExited(container_id));
    }

    /// The worker's state as it stands (what upstream's tests read from a worker's fields:
    /// `containerID`, `onHold`, `resultRun`, `lastResult`); `None` once the worker is gone.
    pub fn state(&self) -> impl Future<Output = Option<WorkerState>> + Send + use<> {
        let (reply, answer) = oneshot::channel();
        let sent = self.inbox.unbounded_send(Control::GetState(reply)).is_ok();
        async move {
            if !sent {
                return None;
            }
            answer.await.ok()
        }
    }
}

/// Sent to the manager when a worker is gone. `clean` is false when it died (a panic in the
/// worker) rather than stopped; a worker whose task was dropped running (its runtime shut
/// down) exits clean.
#[derive(Debug, Clone, Message)]
#[rtype(result = "()")]
pub struct WorkerExited {
    /// The exited worker's pod UID, container name and probe kind.
    pub key: ProbeKey,
    /// The manager's number for that worker, so a notice from a replaced worker is not taken for
    /// its successor's.
    pub worker_id: u64,
    /// The worker stopped (on a `Stop`, or by itself) rather than died.
    pub clean: bool,
    /// The container whose cache entry the worker owned when it exited, if known. The worker
    /// leaves the entry (and its metric series) to the manager, which alone knows whether a
    /// newer worker now owns them. The worker's last `SetResult` went out before this notice,
    /// so a `RemoveResult` the manager sends on receiving it reaches the cache after that.
    pub container_id: Option<ContainerId>,
    /// A dead worker's state, when known: its replacement resumes from it (same container,
    /// same threshold count, same hold), or the manager cleans up after it.
    pub state: Option<WorkerState>,
    /// The worker's pod as it last had it: its name and namespace label the worker's metric
    /// series, which the manager forgets.
    pub pod: Arc<Pod>,
}

/// Sent to the manager by a startup worker started by `StartContainerProbes`
/// (`ContainerLifecycleProber`) once its container has started (its probe succeeded, or the
/// status already reports it started): the manager then starts the container's readiness and
/// liveness workers. Sent at most once per worker.
#[derive(Debug, Clone, Message)]
#[rtype(result = "()")]
pub struct StartupSucceeded {
    /// The startup worker's pod UID, container name and kind.
    pub key: ProbeKey,
    /// The manager's number for that worker: a notice from a replaced worker is ignored.
    pub worker_id: u64,
    /// The container instance that started.
    pub container_id: ContainerId,
}

// === the worker ===

/// What every worker of a prober manager reaches and none owns: the prober, the results cache
/// and its view, the manager (for the exit notice) and the clock. Held once, behind one pointer
/// each worker keeps (upstream's worker reaches the same through its pointer to the manager),
/// not five pointers per worker (docs/memory.md).
pub struct WorkerPeers {
    /// Runs one probe of a kind against a container (normally [`super::Prober`]).
    pub prober: Arc<dyn ProbeRunner>,
    /// The results cache the workers write their results to.
    pub results: ResultsSink,
    /// What `results` stores: a result it already holds is not sent again.
    pub results_view: ResultsView,
    /// Where a worker's [`WorkerExited`] notice goes (the prober manager).
    pub manager: Recipient<WorkerExited>,
    /// The wall clock the initial delay is measured on (against the container's `startedAt`).
    pub clock: SharedClock,
}

/// Everything a worker is created with.
pub struct WorkerConfig {
    /// The pod UID, container name and probe kind this worker probes.
    pub key: ProbeKey,
    /// The manager's number for this worker, unique among the workers it started; echoed in
    /// [`WorkerExited`].
    pub worker_id: u64,
    /// The container spec holding the probe, read through the pod as it was when the worker
    /// was created (upstream's worker keeps the pod too; only an in-place probe change
    /// refreshes it).
    pub container: PodContainer,
    /// What the worker captured from the pod and probe spec: thresholds, initial delay, restart
    /// policy.
    pub spec: WorkerSpec,
    /// Where to start: [`WorkerState::new`] for a new worker, [`WorkerState::resumed`] when it
    /// replaces one still stopping, a dead predecessor's own state to resume from it.
    pub state: WorkerState,
    /// The probe's `periodSeconds` (10 s when unset or not positive), or the timing
    /// annotation's `periodMs`.
    pub period: Duration,
    /// Readiness only: the period until the container's first readiness success (the timing
    /// annotation's `startIntervalMs`); `None` probes at `period` throughout.
    pub start_interval: Option<Duration>,
    /// Each probe's timeout: `timeoutSeconds`, or the timing annotation's `timeoutMs`.
    pub timeout: Duration,
    /// Sleep this long before the first probe (start-up jitter).
    pub jitter: Duration,
    /// The pod's latest status as the status manager publishes it; read before every probe.
    pub status: StatusView,
    /// The prober, the results cache and the manager, shared by every worker.
    pub peers: Arc<WorkerPeers>,
    /// Where a lifecycle-started startup worker sends [`StartupSucceeded`]; `None` for others.
    pub on_started: Option<Recipient<StartupSucceeded>>,
}

/// The probe worker (upstream `worker`): probes one container with one of its probes until
/// stopped. Started by the prober manager; a host does not start one itself.
pub struct ProbeWorker {
    key: ProbeKey,
    /// What the manager tells this worker.
    inbox: mpsc::UnboundedReceiver<Control>,
    /// Starting, running, or stopped.
    phase: Phase,
    /// The probed container, and through it the worker's pod.
    container: PodContainer,
    spec: WorkerSpec,
    state: WorkerState,
    /// The probe period.
    period: Duration,
    /// The period until the container's first readiness success, if one is set.
    start_interval: Option<Duration>,
    /// Each probe's timeout.
    timeout: Duration,
    /// The pod's latest cached status, published by the status manager.
    status: StatusView,
    /// The prober, the results cache and the manager.
    peers: Arc<WorkerPeers>,
    /// The probe as the prober prepared it for the pod's status at the publish `found` was
    /// made at ([`ProbeRunner::prepare`]): made at the first probe after a new publish or a new
    /// probe spec, and run at every probe until then. It keeps the prober's memo (the HTTP
    /// request) between probes.
    prepared: Option<Arc<dyn PreparedProbe>>,
    /// The last result this worker sent to the cache, and for which container.
    last_sent: Option<(ContainerId, ProbeResult)>,
    /// The cache's change count ([`ResultsView::changes`]) when it last showed `last_sent`
    /// stored; [`NOT_SEEN`] since a send.
    results_seen: u64,
    /// The probe running now, if any, with when its iteration began (before any wait for a
    /// probe slot). Dropping it cancels the probe.
    in_flight: Option<InFlight>,
    /// The running fixed-rate schedule; `None` until the first probe. A restart replaces it.
    ticks: Option<Ticks>,
    /// The due time of a tick that arrived while a probe was running (at most one is kept, like
    /// Go's ticker); see [`ProbeWorker::run_pending`] for when it is dropped.
    tick_pending: Option<Instant>,
    /// A manual trigger arrived while a probe was running.
    trigger_pending: bool,
    /// A manual trigger found nothing to probe in the cached status: probe at the pod's next
    /// status instead (see [`ProbeWorker::run_triggered`]). Boxed with its flag.
    status_wait: Option<Box<StatusWait>>,
    /// The handles of the worker's metric series, looked up at its first probe.
    series: metrics::ProbeSeries,
    /// Tells the manager when the worker is gone, however it goes.
    exit: ExitNotice,
    /// Where [`StartupSucceeded`] goes; taken when sent. Boxed: few workers have one.
    on_started: Option<Box<Recipient<StartupSucceeded>>>,
    /// When the last probe completed (its result applied or not), for a new period.
    last_completed: Option<Instant>,
    /// The runtime's ID of the container the worker last started a probe against: a new
    /// initial delay does not apply to it. The ID alone, not the whole [`ContainerId`], keeps
    /// the worker in its size class (`size_tests`); two containers of one pod whose IDs differ
    /// only in their runtime type do not occur (one runtime runs a pod).
    probed: Option<Arc<str>>,
    /// A new initial delay (seconds, and the timing annotation's milliseconds) waiting for the
    /// next container, because the current one has been probed already.
    pending_initial_delay: Option<Box<(i64, Option<Duration>)>>,
    /// Where the container was in the pod's probe status, and at which publish.
    found: Found,
}

impl ProbeWorker {
    /// Starts a worker from its config as a task on `runtime` if one is given, on the current
    /// runtime otherwise (the paused-time tests' single thread): it probes once its start-up
    /// jitter has passed. Must be called inside a tokio runtime.
    pub fn spawn(config: WorkerConfig, runtime: Option<&Handle>) -> WorkerHandle {
        let (inbox, receiver) = mpsc::unbounded();
        let worker = ProbeWorker::new(config, receiver);
        // The task is never joined: the worker reports its own end (WorkerExited).
        match runtime {
            Some(runtime) => drop(runtime.spawn(worker)),
            None => drop(tokio::spawn(worker)),
        }
        WorkerHandle { inbox }
    }

    fn new(config: WorkerConfig, inbox: mpsc::UnboundedReceiver<Control>) -> Self {
        ProbeWorker {
            exit: ExitNotice { worker_id: config.worker_id, died: None },
            key: config.key,
            inbox,
            phase: Phase::Starting(config.jitter),
            container: config.container,
            spec: config.spec,
            state: config.state,
            period: config.period,
            start_interval: config.start_interval,
            timeout: config.timeout,
            status: config.status,
            peers: config.peers,
            prepared: None,
            last_sent: None,
            results_seen: NOT_SEEN,
            in_flight: None,
            ticks: None,
            tick_pending: None,
            trigger_pending: false,
            status_wait: None,
            series: metrics::ProbeSeries::default(),
            on_started: config.on_started.map(Box::new),
            last_completed: None,
            probed: None,
            pending_initial_delay: None,
            found: Found::NONE,
        }
    }

    /// One turn of the task: the start, then the manager's messages in order, then whatever
    /// came due (the jitter, the probe in flight, a status awaited, a tick), until nothing is
    /// ready. Everything is polled with the task's own waker, so any of them wakes the worker.
    fn turn(&mut self, task: &mut TaskContext<'_>) -> Poll<()> {
        // The inbox is polled until it is empty once a turn: once it has answered `Pending`, it
        // holds the task's waker, and a message that arrives later in the turn wakes the task
        // for another. Polling it again after each event of the turn (a tick, then the probe it
        // started, …) cost a few hundred instructions a probe (docs/benchmarks.md, "Fewer
        // clock reads and inbox polls a probe").
        let mut inbox_drained = false;
        loop {
            if matches!(self.phase, Phase::Done) {
                return Poll::Ready(());
            }
            if let Phase::Starting(jitter) = self.phase {
                // The timer is made here, on the thread that runs the worker, so it lives in
                // the runtime the worker runs on.
                if jitter.is_zero() {
                    self.phase = Phase::Running;
                    self.begin();
                } else {
                    self.phase = Phase::Waiting(Box::pin(tokio::time::sleep(jitter)));
                }
                continue;
            }
            if !inbox_drained {
                match self.inbox.poll_next_unpin(task) {
                    Poll::Ready(Some(message)) => {
                        self.receive(message);
                        continue;
                    }
                    // Every handle dropped: the manager is gone, and nobody would hear of a
                    // result.
                    Poll::Ready(None) => {
                        self.stop();
                        continue;
                    }
                    Poll::Pending => inbox_drained = true,
                }
            }
            if let Phase::Waiting(jitter) = &mut self.phase
                && jitter.as_mut().poll(task).is_ready()
            {
                self.phase = Phase::Running;
                self.begin();
                continue;
            }
            if let Some(in_flight) = &mut self.in_flight
                && let Poll::Ready(outcome) = in_flight.poll(task)
            {
                let started = in_flight.started;
                self.in_flight = None;
                self.probe_finished(outcome, started);
                continue;
            }
            if let Some(wait) = &mut self.status_wait
                && let Poll::Ready(status) = wait.changed.as_mut().poll(task)
            {
                let recheck = wait.recheck;
                self.status_wait = None;
                self.status_arrived(status, recheck);
                continue;
            }
            if let Some(ticks) = &mut self.ticks
                && let Poll::Ready(due) = ticks.poll_tick(task)
            {
                self.on_tick(due);
                continue;
            }
            return Poll::Pending;
        }
    }

    /// One message from the manager.
    fn receive(&mut self, message: Control) {
        match message {
            Control::Stop => self.stop(),
            Control::Trigger => self.trigger(),
            Control::Reconfigure(change) => self.reconfigure(*change),
            Control::PredecessorExited(container_id) => self.predecessor_exited(container_id),
            Control::GetState(reply) => {
                let _ = reply.send(self.state.clone());
            }
        }
    }

    /// Stops the worker; a probe in flight is dropped, which cancels it.
    fn stop(&mut self) {
        self.in_flight = None;
        self.phase = Phase::Done;
    }

    fn begin(&mut self) {
        if self.spec.bound.is_some() {
            // Started with its container (ContainerLifecycleProber): the status that shows the
            // container may not be published yet; probe as soon as it is, not a period later.
            // That is the triggered probe a trigger kept through the jitter asks for.
            self.trigger_pending = false;
            self.run_triggered(true);
            return;
        }
        self.schedule_from(Instant::now());
        if !self.run_probe()
            && !matches!(self.phase, Phase::Done)
            && std::mem::take(&mut self.trigger_pending)
        {
            // Nothing was probed, so no finished probe will run the kept trigger: run it now.
            self.run_triggered(true);
        }
    }

    /// (Re)starts the fixed-rate schedule: ticks at `from + k·interval` (k ≥ 1), on one tokio
    /// `Interval` that keeps its own deadlines, rather than a timer re-armed at every tick.
    fn schedule_from(&mut self, from: Instant) {
        self.ticks = Some(Ticks::new(from, self.interval()));
    }

    /// The time between ticks now: the start interval until the container's first readiness
    /// success, the period otherwise (docs/probe-timing.md).
    fn interval(&self) -> Duration {
        match self.start_interval {
            Some(start) if !self.state.readiness_succeeded => start,
            _ => self.period,
        }
    }

    /// The interval changed (the first readiness success, or a new container that starts the
    /// start interval over): the schedule restarts from the probe that changed it, so the
    /// next probe comes one new interval after it and a tick kept from the old interval is
    /// dropped.
    fn interval_changed(&mut self, before: Duration, from: Instant) {
        if self.interval() != before && self.ticks.is_some() {
            self.tick_pending = None;
            self.schedule_from(from);
        }
    }

    /// A tick of the schedule, due at `due`: probe, or remember it while a probe runs (one at
    /// most, as Go's ticker keeps one).
    fn on_tick(&mut self, due: Instant) {
        if self.in_flight.is_some() {
            self.tick_pending = Some(due);
        } else {
            self.run_probe();
        }
    }

    /// One iteration of upstream `doProbe`; returns whether a probe was started.
    fn run_probe(&mut self) -> bool {
        let started = Instant::now();
        let (status, version) = self.status.probe_status_versioned();
        let index = match self.found.at(version) {
            Some(index) => Some(index),
            None => {
                // A new publish: what was prepared from the last one may no longer hold.
                self.prepared = None;
                status.as_deref().and_then(|s| s.container_index(&self.spec.container_name))
            }
        };
        self.found = Found::new(version, index);
        let container = status.as_deref().zip(index).and_then(|(s, i)| s.containers.get(i));
        if self.pending_initial_delay.is_some()
            && self.shows_new_container(status.as_deref())
            && let Some((seconds, delay)) = self.pending_initial_delay.take().map(|d| *d)
        {
            self.spec.initial_delay_seconds = seconds;
            self.spec.initial_delay = delay;
        }
        let mut ops = Vec::new();
        let interval = self.interval();
        let clock = &self.peers.clock;
        let now = clock.at(started).unwrap_or_else(|| clock.now());
        let step =
            self.state.checks(&self.spec, &self.container, status.as_deref(), container, now, &mut ops);
        let reported_started = self.reports_started(container);
        self.announce_started(&ops, reported_started);
        self.apply(ops);
        self.interval_changed(interval, started);
        match step {
            Step::Stop => {
                tracing::debug!(pod_uid = %self.key.pod_uid, container = %self.key.container_name, probe_kind = %self.key.kind, "Probe worker stopping itself");
                self.stop();
                return false;
            }
            Step::Skip => return false,
            Step::Early(left) => {
                if self.spec.mutable {
                    // Upstream's newer worker probes as the delay ends, not at the tick after.
                    // The wait is at most one interval, as the older worker's ticker checked:
                    // the delay's end is a wall time (`startedAt` plus the delay) while the
                    // timer is monotonic, and a node clock stepped forward to a `startedAt`
                    // that was ahead of it (an edge node's NTP catching up) is seen within an
                    // interval, not after the whole gap measured before the step
                    // (docs/prober.md §3.9).
                    let wait = left.min(self.interval());
                    self.tick_pending = None;
                    self.ticks = Some(Ticks::first_at(started + wait, self.interval()));
                }
                return false;
            }
            Step::Probe => {}
        }
        // `Probe` is for the container found at `index` in `status`.
        let (Some(mut status), Some(index)) = (status, index) else { return false };
        if let Some(pod_ip) = self.spec.bound.as_ref().and_then(|b| b.pod_ip.as_deref())
            && !status.has_pod_ip()
        {
            // The pod IP the container started with, when the status has none yet.
            Arc::make_mut(&mut status).set_pod_ip(Some(pod_ip));
        }
        let Some(container_id) = status.containers.get(index).map(|c| &c.id) else { return false };
        // Kept as it is when it is the same text (most probes): a clone and the drop of the old
        // one would touch its reference count at every probe.
        if self.probed.as_ref().is_none_or(|probed| !Arc::ptr_eq(probed, &container_id.id)) {
            self.probed = Some(container_id.id.clone());
        }
        self.status_wait = None;
        if self.prepared.is_none() {
            self.prepared = self.peers.prober.prepare(
                self.key.kind,
                &self.container,
                &status,
                container_id,
                self.timeout,
            );
        }
        // Not caught: a prober that panics while building its future kills this worker, and
        // the manager restarts it (counted in probelet_worker_restarts_total).
        let probe = match &self.prepared {
            Some(prepared) => prepared.clone().run(status),
            None => {
                let container_id = container_id.clone();
                self.peers.prober.probe_with_memo(
                    self.key.kind,
                    self.container.pod().clone(),
                    status,
                    self.container.clone(),
                    container_id,
                    self.timeout,
                    ProbeMemo::unset(),
                )
            }
        };
        self.in_flight = Some(InFlight { probe, started });
        true
    }

    /// A probe started at `started` has finished (or panicked).
    fn probe_finished(&mut self, outcome: Finished, started: Instant) {
        let now = Instant::now();
        self.last_completed = Some(now);
        let interval = self.interval();
        // When the probe began, if it first waited for a probe slot.
        let waited = outcome.as_ref().map_or(Duration::ZERO, |run| run.waited);
        let began_after_wait = (!waited.is_zero()).then(|| started + waited);
        self.finish_probe(outcome, now.saturating_duration_since(started));
        self.interval_changed(interval, began_after_wait.unwrap_or(started));
        if self.spec.mutable && !matches!(self.phase, Phase::Done) {
            // Upstream's newer worker: the next probe is due a period after this one ended,
            // not on a fixed-rate grid (a tick kept meanwhile is dropped with the grid).
            self.tick_pending = None;
            self.schedule_from(now);
            if self.shows_new_container(self.status.probe_status().as_deref()) {
                // The container was replaced while it was probed: the result went to the old
                // container's ID, which the status no longer shows (upstream drops it), and the
                // next probe, the new container's, is due now rather than a period on
                // (docs/prober.md §3.9).
                self.tick_pending = Some(now);
            }
        }
        self.run_pending(began_after_wait);
    }

    /// A manual trigger: probe now and restart the schedule from now (upstream resets the
    /// ticker). The pod sync that asks for the trigger (`UpdatePodStatus`) stores the status it
    /// generates only afterwards, so the cached status may not show the container yet (it
    /// just started): then the probe runs when the pod's next status is published, and the
    /// schedule restarts from that probe. Without this, a new container's first readiness
    /// probe would always come a full period after it started.
    fn run_triggered(&mut self, wait_for_status: bool) {
        // Marked seen before reading, so a status published meanwhile is not missed.
        let mut view = self.status.clone();
        view.mark_seen();
        self.schedule_from(Instant::now());
        let probed = self.run_probe();
        // A trigger is for a container with no readiness result, usually a new one the cached
        // status does not show yet, so the probe just run may have gone to the old container
        // (a host that reports a restarted container under its new ID at once, with no
        // terminated status between). The worker would meet the new container only a full
        // period later: look again at the pod's next status, and probe at once if it shows a
        // new one. Within a start interval the next probe comes soon anyway; past it (and its
        // first success), the same holds as without one.
        let recheck = probed && (self.start_interval.is_none() || self.state.readiness_succeeded);
        if (probed && !recheck)
            || !wait_for_status
            || matches!(self.phase, Phase::Done)
            || self.status_wait.is_some()
        {
            return;
        }
        let changed = async move {
            if view.changed().await.is_err() {
                return None;
            }
            Some(view.probe_status())
        };
        self.status_wait = Some(Box::new(StatusWait { changed: changed.boxed(), recheck }));
    }

    /// The pod's next status came (`None`: its view closed) after a trigger that found nothing
    /// to probe, or probed what may have been the old container (`recheck`).
    fn status_arrived(&mut self, status: Option<Option<Arc<PodProbeStatus>>>, recheck: bool) {
        let Some(status) = status else { return };
        if recheck && !self.shows_new_container(status.as_deref()) {
            return;
        }
        if self.in_flight.is_some() {
            self.trigger_pending = true;
        } else {
            self.run_triggered(false);
        }
    }

    /// Applies a finished probe's outcome. Its duration `took` is measured from the
    /// iteration's start, as upstream's is, so a wait for a probe slot is in it (docs/prober.md
    /// §1.2).
    fn finish_probe(&mut self, outcome: Finished, took: Duration) {
        let result = match outcome.map(|run| run.result) {
            Err(panic) => {
                let message = panic_message(panic.as_ref());
                tracing::error!(pod_uid = %self.key.pod_uid, container = %self.key.container_name, probe_kind = %self.key.kind, panic = %message, "Probe panicked; keeping the previous result");
                metrics::probe_errored(self.key.kind);
                return;
            }
            Ok(Err(err)) => {
                tracing::debug!(pod_uid = %self.key.pod_uid, container = %self.key.container_name, probe_kind = %self.key.kind, error = %err, "Probe errored; result discarded");
                metrics::probe_errored(self.key.kind);
                return;
            }
            Ok(Ok(result)) => result,
        };
        let labels = metrics::ProbeLabels::new(&self.key, self.container.pod());
        self.series.observe(labels, result, took);
        let mut ops = Vec::new();
        self.state.after_probe(&self.spec, result, &mut ops);
        self.announce_started(&ops, false);
        self.apply(ops);
    }

    /// Whether the status reports this worker's bound container as started already (an agent
    /// restart, or a sidecar whose start was recorded before): its startup probe will not run.
    /// `container` is the worker's container as the status shows it, if it does.
    fn reports_started(&self, container: Option<&ProbedContainer>) -> bool {
        let Some(bound) = self.spec.bound.as_ref() else { return false };
        container.is_some_and(|cs| cs.started == Some(true) && cs.id == bound.container_id)
    }

    /// Tells the manager, once, that a lifecycle-started startup worker's container started.
    fn announce_started(&mut self, ops: &[CacheOp], reported_started: bool) {
        if self.on_started.is_none() {
            return;
        }
        let succeeded = ops.iter().find_map(|op| match op {
            CacheOp::Set(id, ProbeResult::Success) => Some(id.clone()),
            _ => None,
        });
        let container_id = match (succeeded, &self.spec.bound) {
            (Some(id), _) => id,
            (None, Some(bound)) if reported_started => bound.container_id.clone(),
            _ => return,
        };
        if let Some(recipient) = self.on_started.take() {
            recipient.do_send(StartupSucceeded {
                key: self.key.clone(),
                worker_id: self.exit.worker_id,
                container_id,
            });
        }
    }

    /// After a probe: a manual trigger that came meanwhile runs now, and so does a kept tick,
    /// as Go's ticker delivers the one it kept. When the probe first waited for a probe slot
    /// and began at `began_after_wait`, a tick that came due before that (while it waited) is
    /// dropped instead: the probe that just ran began after it, so it is that tick's probe, and
    /// probing again at once would only queue another late probe behind the slots the node is
    /// short of. Without a wait every kept tick runs, as upstream's does (docs/prober.md §1.2).
    fn run_pending(&mut self, began_after_wait: Option<Instant>) {
        if std::mem::take(&mut self.trigger_pending) {
            self.tick_pending = None;
            self.run_triggered(true);
        } else if let Some(due) = self.tick_pending.take() {
            if began_after_wait.is_none_or(|began| due > began) {
                self.run_probe();
            } else {
                tracing::trace!(pod_uid = %self.key.pod_uid, container = %self.key.container_name, probe_kind = %self.key.kind, "Tick due while the probe waited for a slot dropped");
            }
        }
    }

    fn apply(&mut self, ops: Vec<CacheOp>) {
        for op in ops {
            match op {
                CacheOp::Set(container_id, result) => {
                    // Most probes repeat the stored result; the cache would drop the message
                    // anyway. Skipping is safe only when the last message this worker queued
                    // carries the same result (so nothing older of ours is still to land) and the
                    // cache shows it (so nobody removed or replaced it since).
                    // The count of the cache's changes stands in for reading the entry: while
                    // it is the one at which the entry last showed our result, it still does.
                    let sent =
                        self.last_sent.as_ref().is_some_and(|(id, r)| *id == container_id && *r == result);
                    if sent {
                        if self.results_seen != NOT_SEEN
                            && self.peers.results_view.changes() == self.results_seen
                        {
                            continue;
                        }
                        let (stored, changes) =
                            self.peers.results_view.get_counted(self.key.kind, &container_id);
                        if stored == Some(result) {
                            self.results_seen = changes;
                            continue;
                        }
                    }
                    self.results_seen = NOT_SEEN;
                    self.last_sent = Some((container_id.clone(), result));
                    self.peers.results.set.do_send(SetResult {
                        kind: self.key.kind,
                        container_id,
                        result,
                        pod_uid: self.key.pod_uid.clone(),
                    });
                }
                CacheOp::Seed(container_id, result) => {
                    self.last_sent = None;
                    self.results_seen = NOT_SEEN;
                    self.peers.results.seed.do_send(SeedResult {
                        kind: self.key.kind,
                        container_id,
                        result,
                        pod_uid: self.key.pod_uid.clone(),
                    })
                }
                CacheOp::Remove(container_id) => {
                    self.last_sent = None;
                    self.results_seen = NOT_SEEN;
                    self.peers.results.remove.do_send(RemoveResult { kind: self.key.kind, container_id })
                }
            }
        }
    }

    /// Whether `status` shows this worker's container with another ID than the one it last saw.
    fn shows_new_container(&self, status: Option<&PodProbeStatus>) -> bool {
        let Some(container) = status.and_then(|s| s.container(&self.spec.container_name)) else {
            return false;
        };
        self.state.container_id.as_ref() != Some(&container.id)
    }

    /// The container ID this worker last saw, if any.
    pub fn container_id(&self) -> Option<&ContainerId> {
        self.state.container_id.as_ref()
    }
}

/// Where a worker's container was in its pod's probe status, and in which version of it (the
/// status view's publish count): while the count is the same the worker takes its container
/// from there without comparing names, which would read two more pieces of memory per probe
/// (docs/benchmarks.md). One word, the publish count above the index's 16 bits, to keep the
/// worker in its size class; a container past 65,535 in its pod is looked up every time.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Found(u64);

impl Found {
    const NONE: Found = Found(0);
    const INDEX_BITS: u32 = 16;

    fn new(version: u64, index: Option<usize>) -> Found {
        let (Some(index), Some(tag)) = (index, version.checked_add(1)) else { return Found::NONE };
        if index >> Self::INDEX_BITS != 0 || tag >> (64 - Self::INDEX_BITS) != 0 {
            return Found::NONE;
        }
        Found(tag << Self::INDEX_BITS | index as u64)
    }

    /// The index found at `version`, if this is it.
    fn at(self, version: u64) -> Option<usize> {
        let tag = version.checked_add(1)?;
        let index = usize::try_from(self.0 & ((1 << Self::INDEX_BITS) - 1)).ok()?;
        (self != Found::NONE && self.0 >> Self::INDEX_BITS == tag).then_some(index)
    }
}

/// A finished probe: its result, or the panic it raised.
type Finished = Result<ProbeRun, Box<dyn std::any::Any + Send>>;

/// The worker's task: a turn at each wake-up until the worker stops. A panic in the worker
/// itself (not in a probe, which is caught with the probe) ends the task here with an unclean
/// exit notice carrying the worker's state, and the manager restarts the worker from it.
impl Future for ProbeWorker {
    type Output = ();

    fn poll(self: Pin<&mut Self>, task: &mut TaskContext<'_>) -> Poll<()> {
        let worker = self.get_mut();
        if matches!(worker.phase, Phase::Done) {
            return Poll::Ready(());
        }
        match std::panic::catch_unwind(AssertUnwindSafe(|| worker.turn(task))) {
            Ok(Poll::Pending) => Poll::Pending,
            Ok(Poll::Ready(())) => {
                worker.stopped();
                Poll::Ready(())
            }
            Err(panic) => {
                tracing::error!(pod_uid = %worker.key.pod_uid, container = %worker.key.container_name, probe_kind = %worker.key.kind, panic = %panic_message(panic.as_ref()), "Probe worker panicked");
                // The worker died, it did not stop: leave the notice unclean so the manager
                // restarts it, and keep the cached result and metric series for the
                // replacement, which resumes from this state.
                worker.exit.died = Some(Box::new(worker.state.clone()));
                worker.stop();
                Poll::Ready(())
            }
        }
    }
}

impl ProbeWorker {
    /// The worker stopped (told to, or by itself, or its manager gone).
    fn stopped(&mut self) {
        // The manager removes the cache entry and the series on the notice; with the manager
        // gone (the system is shutting down) nobody else will.
        if !self.peers.manager.connected() {
            if let Some(container_id) = self.state.container_id.take() {
                self.peers.results.remove.do_send(RemoveResult { kind: self.key.kind, container_id });
            }
            metrics::ProbeLabels::new(&self.key, self.container.pod()).forget();
        }
    }

    /// See [`WorkerHandle::predecessor_exited`].
    fn predecessor_exited(&mut self, container_id: ContainerId) {
        match &self.state.container_id {
            Some(own) if *own == container_id => {}
            // Container IDs are not reused: the entry is stale.
            Some(_) => self.peers.results.remove.do_send(RemoveResult { kind: self.key.kind, container_id }),
            // Not seen a container yet: adopt the entry, so that it is kept if the container is
            // still the one running, and removed like any old container's when another appears.
            // A resumed worker skips reseeding the first container it sees because that entry
            // is still there; the adopted entry is that one, so a later container is seeded.
            None => {
                self.state.container_id = Some(container_id);
                self.state.resumed = false;
            }
        }
    }

    /// A manual trigger from the manager.
    fn trigger(&mut self) {
        if self.trigger_pending {
            // Upstream's trigger channel holds one; the manager's send finds it full and says
            // so at info (`UpdatePodStatus`). Here the worker keeps that one and says the same.
            tracing::info!(probe = self.key.kind.as_str(), "Failed to trigger a manual run");
            return;
        }
        if self.ticks.is_none() {
            if self.spec.mutable && matches!(self.phase, Phase::Starting(_) | Phase::Waiting(_)) {
                // Upstream's newer worker (`MutableContainerProbes`): the jitter is only the
                // first probe's due time, and a trigger makes it now (docs/prober.md §3.9).
                self.phase = Phase::Running;
                self.begin();
                return;
            }
            // Still in the start-up jitter. Upstream's one-slot trigger channel keeps the
            // trigger until the loop reads it, after the first probe: so the first probe is
            // followed at once by a triggered one, which restarts the schedule (docs/prober.md
            // §1.2).
            self.trigger_pending = true;
            return;
        }
        if self.in_flight.is_some() {
            self.trigger_pending = true;
            return;
        }
        self.run_triggered(true);
    }
}

/// Where a worker is in its life.
enum Phase {
    /// Not polled yet: begin after this start-up jitter.
    Starting(Duration),
    /// Waiting out the jitter (the timer is made at the first poll, on the worker's runtime).
    Waiting(Pin<Box<Sleep>>),
    /// The first probe (or the wait for the container's status) has begun.
    Running,
    /// Stopped (told to, by itself, or its manager gone): the task ends at its next turn.
    Done,
}

/// The probe a worker is running and when its iteration began. Polled as the runner boxed it,
/// its panic caught at each poll: wrapping it in a catching future would box it a second time
/// and copy it into that box, at every probe.
struct InFlight {
    probe: BoxFuture<'static, ProbeRun>,
    started: Instant,
}

impl InFlight {
    fn poll(&mut self, task: &mut TaskContext<'_>) -> Poll<Finished> {
        match std::panic::catch_unwind(AssertUnwindSafe(|| self.probe.as_mut().poll(task))) {
            Ok(Poll::Pending) => Poll::Pending,
            Ok(Poll::Ready(run)) => Poll::Ready(Ok(run)),
            Err(panic) => Poll::Ready(Err(panic)),
        }
    }
}

/// A wait for the pod's next status after a manual trigger (see
/// [`ProbeWorker::run_triggered`]).
struct StatusWait {
    /// The pod's next probe status; `None` when its view closed.
    changed: BoxFuture<'static, Option<Option<Arc<PodProbeStatus>>>>,
    /// Probe only if that status shows a new container.
    recheck: bool,
}

// === helpers ===

/// [`ProbeWorker`]'s `results_seen` before the cache has shown its last result.
const NOT_SEEN: u64 = u64::MAX;

/// What the [`WorkerExited`] notice says beyond the worker's key and pod, which it takes
/// from the worker itself (a copy of each here cost every idle worker a few hundred bytes).
struct ExitNotice {
    worker_id: u64,
    /// Set only when the worker died (a panic): its state, for its replacement. A worker that
    /// stopped, or whose task was dropped running, exits clean.
    died: Option<Box<WorkerState>>,
}

/// Sends [`WorkerExited`] when the worker is dropped: after it stopped (clean), after a panic
/// (not clean), or with its task still running because the workers' runtime shut down (its
/// pipeline dropped). That last is a stop, not a death: a worker restarted on a runtime that
/// is gone would be dropped at once, and the manager would restart it again and again.
impl Drop for ProbeWorker {
    fn drop(&mut self) {
        self.peers.manager.do_send(WorkerExited {
            key: self.key.clone(),
            worker_id: self.exit.worker_id,
            clean: self.exit.died.is_none(),
            // The container whose cache entry the worker owns when it goes.
            container_id: self.state.container_id.take(),
            state: self.exit.died.take().map(|s| *s),
            pod: self.container.pod().clone(),
        });
    }
}

fn panic_message(panic: &(dyn std::any::Any + Send)) -> String {
    if let Some(s) = panic.downcast_ref::<&str>() {
        (*s).to_owned()
    } else if let Some(s) = panic.downcast_ref::<String>() {
        s.clone()
    } else {
        "unknown panic".to_owned()
    }
}

#[cfg(test)]
mod found_tests {
    use super::Found;

    #[test]
    fn an_index_is_kept_for_its_version_only() {
        let found = Found::new(0, Some(0));
        assert_eq!((found.at(0), found.at(1)), (Some(0), None));
        let found = Found::new(41, Some(65_535));
        assert_eq!((found.at(41), found.at(40), found.at(42)), (Some(65_535), None, None));
        assert_eq!(Found::new(7, None).at(7), None, "not found is not kept");
        assert_eq!(Found::new(7, Some(65_536)), Found::NONE, "an index past 16 bits is looked up each time");
        assert_eq!(Found::new(1 << 48, Some(1)), Found::NONE, "a version past 48 bits too");
        assert_eq!(Found::new(u64::MAX, Some(1)), Found::NONE);
        assert_eq!(Found::NONE.at(u64::MAX), None);
    }
}

#[cfg(test)]
mod size_tests {
    /// docs/memory.md: every idle worker is its task, which holds the worker inline and which
    /// tokio sizes in multiples of 128 bytes; at 536 bytes or less the task is 640 bytes, one
    /// of jemalloc's size classes (the next is 768). What only a gate or a rare event uses (a
    /// lifecycle binding, an initial delay waiting for the next container, a dead worker's
    /// state for its replacement, a wait for the pod's next status) is boxed, and what every
    /// worker shares is behind one pointer.
    #[test]
    fn a_worker_stays_small() {
        let size = std::mem::size_of::<super::ProbeWorker>();
        assert!(size <= 536, "ProbeWorker is {size} bytes");
    }
}
