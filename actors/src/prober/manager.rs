//! The prober manager actor (upstream `pkg/kubelet/prober/prober_manager.go`), the supervisor
//! of the probe workers: it creates them for a pod's containers (`AddPod`), stops them
//! (`RemovePod`, `CleanupPods`, `StopLivenessAndStartup`), sets `started` / `ready` on a status
//! being generated (`UpdatePodStatus`) and restarts a worker that died abnormally.
//!
//! Deliberate differences from upstream: `AddPod` continues past an existing worker (upstream's
//! newer fix), and a worker that was told to stop does not block a new worker for the same key
//! (upstream keeps it registered until it exits, so a quick RemovePod + AddPod could leave the
//! container unprobed until the next pod sync). The replacement takes over what the stopping
//! worker leaves: it does not reseed the cache entry of the container it finds first (like a
//! worker restarted after a death), and the manager, not the exiting worker, removes a worker's
//! cache entry and metric series on exit, and only when no newer worker has the key — otherwise
//! the old worker's cleanup could land after the new worker's writes and wipe them (a startup
//! worker on hold would never write again, leaving the container not started for good).

use std::collections::{BTreeMap, HashMap, HashSet};
use std::ops::Bound;
use std::sync::Arc;
use std::time::Duration;

use actix::prelude::*;
use k8s_openapi::api::core::v1::{Container, Pod, PodStatus};
use k8s_openapi::jiff::Timestamp;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

use super::do_probe::{WorkerSpec, WorkerState};
use super::probe_metrics::ProbeLabels;
use super::timing::{EffectiveTiming, probe_timings};
use super::update_status::{ProbeView, result_keys, update_pod_status};
use super::worker::{PredecessorExited, ProbeKey, ProbeWorker, Stop, Trigger, WorkerConfig, WorkerExited};
use super::{ProbeKind, ProbeRunner};
use crate::clock::SharedClock;
use crate::container::ContainerId;
use crate::metrics as names;
use crate::results::{RemoveResult, ResultsCache, ResultsView};
use crate::status::is_restartable_init_container;
use crate::status::views::StatusViews;

/// The longest a dead worker waits before it is restarted; the wait doubles from one second.
pub const MAX_RESTART_BACKOFF: Duration = Duration::from_secs(300);

// === messages ===

/// Create workers for every probe of the pod's containers and sidecars that has none.
#[derive(Debug, Clone, Message)]
#[rtype(result = "()")]
pub struct AddPod(pub Arc<Pod>);

/// Stop every worker of the pod.
#[derive(Debug, Clone, Message)]
#[rtype(result = "()")]
pub struct RemovePod(pub Arc<Pod>);

/// Stop the liveness and startup workers of the pod (graceful termination; readiness goes on).
#[derive(Debug, Clone, Message)]
#[rtype(result = "()")]
pub struct StopLivenessAndStartup(pub Arc<Pod>);

/// Stop every worker whose pod UID is not in the set.
#[derive(Debug, Clone, Message)]
#[rtype(result = "()")]
pub struct CleanupPods(pub HashSet<String>);

/// Set `started` and `ready` on a status being generated for the pod.
#[derive(Debug, Clone, Message)]
#[rtype(result = "PodStatus")]
pub struct UpdatePodStatus {
    /// The pod the status is for (its spec and its status on the API server).
    pub pod: Arc<Pod>,
    /// The status being generated; returned with `started` and `ready` set from the probe results.
    pub status: PodStatus,
}

/// The keys of the workers that exist now (stopping ones included).
#[derive(Debug, Clone, Copy, Message)]
#[rtype(result = "Vec<ProbeKey>")]
pub struct GetWorkers;

// === the actor ===

/// Everything the manager needs to create workers.
pub struct ManagerConfig {
    /// Runs the probes (normally [`super::Prober`]); every worker shares it.
    pub prober: Arc<dyn ProbeRunner>,
    /// The results cache the workers write to.
    pub results: Addr<ResultsCache>,
    /// What `results` stores, read by `UpdatePodStatus` without a round trip.
    pub results_view: ResultsView,
    /// Where workers get a view of their pod's latest status.
    pub views: StatusViews,
    /// The wall clock: the manager's start time, and the workers' initial delays.
    pub clock: SharedClock,
    /// Arbiters to spread workers over (by pod UID); empty runs them on the manager's own.
    pub arbiters: Vec<ArbiterHandle>,
    /// Seed for the start-up jitter; `None` seeds from the OS.
    pub jitter_seed: Option<u64>,
}

struct WorkerEntry {
    addr: Addr<ProbeWorker>,
    id: u64,
    /// Told to stop; no longer blocks a new worker for the key.
    stopping: bool,
    /// Abnormal deaths so far, for the restart back-off.
    restarts: u32,
    pod: Arc<Pod>,
    container: Arc<Container>,
}

/// The prober manager actor (upstream `prober.Manager`): start it through
/// [`crate::Pipeline::start`] and send it the messages above.
pub struct ProberManager {
    config: ManagerConfig,
    /// When the manager started (wall clock): jitter and agent-restart rules use it.
    start: Timestamp,
    /// Workers by key; ordered so that a pod's workers are one range.
    workers: BTreeMap<ProbeKey, WorkerEntry>,
    next_id: u64,
    rng: StdRng,
}

impl ProberManager {
    /// A manager with no workers; its start time (for the start-up jitter and the agent-restart
    /// grace) is `config.clock`'s now.
    pub fn new(config: ManagerConfig) -> Self {
        let rng = match config.jitter_seed {
            Some(seed) => StdRng::seed_from_u64(seed),
            None => StdRng::from_os_rng(),
        };
        let start = config.clock.now();
        ProberManager { config, start, workers: BTreeMap::new(), next_id: 0, rng }
    }

    /// When the manager started.
    pub fn start(&self) -> Timestamp {
        self.start
    }

    fn pod_workers(&self, pod_uid: &str) -> impl Iterator<Item = (&ProbeKey, &WorkerEntry)> {
        let from = ProbeKey {
            pod_uid: pod_uid.to_owned(),
            container_name: String::new(),
            kind: ProbeKind::Liveness,
        };
        self.workers
            .range((Bound::Included(from), Bound::Unbounded))
            .take_while(move |(k, _)| k.pod_uid == pod_uid)
    }

    fn spawn_worker(
        &mut self,
        ctx: &mut Context<Self>,
        key: ProbeKey,
        pod: Arc<Pod>,
        container: Arc<Container>,
        state: WorkerState,
        restarts: u32,
    ) {
        let Some(probe) = key.kind.probe_of(&container).cloned() else { return };
        let is_sidecar = is_sidecar(&pod, &container.name);
        // An invalid timing annotation is the host's to report; the probe then runs with its
        // seconds fields.
        let timings = probe_timings(&pod).unwrap_or_default();
        let timing = EffectiveTiming::new(&probe, timings.get(&key.container_name, key.kind));
        let mut spec = WorkerSpec::new(key.kind, &pod, &container, &probe, is_sidecar, self.start);
        spec.initial_delay = timing.initial_delay;
        let start_interval = timing.start_interval.filter(|_| key.kind == ProbeKind::Readiness);
        let jitter = self.jitter(start_interval.unwrap_or(timing.period));
        self.next_id += 1;
        let id = self.next_id;
        let config = WorkerConfig {
            key: key.clone(),
            worker_id: id,
            pod: pod.clone(),
            container: container.clone(),
            spec,
            state,
            period: timing.period,
            start_interval,
            timeout: timing.timeout,
            jitter,
            status: self.config.views.subscribe(&key.pod_uid),
            prober: self.config.prober.clone(),
            results: self.config.results.clone(),
            results_view: self.config.results_view.clone(),
            manager: ctx.address().recipient(),
            clock: self.config.clock.clone(),
        };
        let addr = match self.arbiter_for(&key.pod_uid) {
            Some(arbiter) => ProbeWorker::start_in_arbiter(&arbiter, move |_| ProbeWorker::new(config)),
            None => ProbeWorker::new(config).start(),
        };
        tracing::debug!(pod_uid = %key.pod_uid, container = %key.container_name, probe_kind = %key.kind, "Probe worker started");
        let replaced = self
            .workers
            .insert(key.clone(), WorkerEntry { addr, id, stopping: false, restarts, pod, container });
        if replaced.is_none() {
            workers_gauge(key.kind).increment(1.0);
        }
    }

    /// Upstream: sleep a random part of the period, but only while the manager is younger than
    /// one period (spreads probes after an agent restart).
    fn jitter(&mut self, period: Duration) -> Duration {
        let age = self.config.clock.now().duration_since(self.start);
        let young = age.as_secs_f64() < period.as_secs_f64();
        if young { period.mul_f64(self.rng.random::<f64>()) } else { Duration::ZERO }
    }

    fn arbiter_for(&self, pod_uid: &str) -> Option<ArbiterHandle> {
        if self.config.arbiters.is_empty() {
            return None;
        }
        let hash = pod_uid
            .bytes()
            .fold(0xcbf2_9ce4_8422_2325_u64, |h, b| (h ^ u64::from(b)).wrapping_mul(0x100_0000_01b3));
        let index = usize::try_from(hash % self.config.arbiters.len() as u64).unwrap_or(0);
        self.config.arbiters.get(index).cloned()
    }

    fn stop_where(&mut self, mut pred: impl FnMut(&ProbeKey) -> bool) {
        for (key, entry) in self.workers.iter_mut() {
            if !entry.stopping && pred(key) {
                entry.stopping = true;
                entry.addr.do_send(Stop);
            }
        }
    }
}

impl Actor for ProberManager {
    type Context = Context<Self>;

    fn stopped(&mut self, _ctx: &mut Self::Context) {
        for entry in self.workers.values() {
            entry.addr.do_send(Stop);
        }
    }
}

impl Handler<AddPod> for ProberManager {
    type Result = ();

    fn handle(&mut self, msg: AddPod, ctx: &mut Self::Context) {
        let pod = msg.0;
        let Some(uid) = pod.metadata.uid.clone() else {
            tracing::warn!(
                pod = pod.metadata.name.as_deref().unwrap_or_default(),
                "Pod without a UID; not probing it"
            );
            return;
        };
        let Some(spec) = pod.spec.as_ref() else { return };
        let sidecars = spec.init_containers.iter().flatten().filter(|c| is_restartable_init_container(c));
        let containers: Vec<Arc<Container>> =
            spec.containers.iter().chain(sidecars).cloned().map(Arc::new).collect();
        for container in containers {
            for kind in ProbeKind::ADD_ORDER {
                if kind.probe_of(&container).is_none() {
                    continue;
                }
                let key = ProbeKey { pod_uid: uid.clone(), container_name: container.name.clone(), kind };
                let state = match self.workers.get(&key) {
                    Some(entry) if !entry.stopping => {
                        tracing::trace!(pod_uid = %uid, container = %container.name, probe_kind = %kind, "Probe already exists for container");
                        continue;
                    }
                    // The stopping worker's cache entry stays: the replacement takes it over.
                    Some(_) => WorkerState::resumed(),
                    None => WorkerState::new(),
                };
                self.spawn_worker(ctx, key, pod.clone(), container.clone(), state, 0);
            }
        }
    }
}

impl Handler<RemovePod> for ProberManager {
    type Result = ();

    fn handle(&mut self, msg: RemovePod, _ctx: &mut Self::Context) {
        let Some(uid) = msg.0.metadata.uid.clone() else { return };
        self.stop_where(|k| k.pod_uid == uid);
    }
}

impl Handler<StopLivenessAndStartup> for ProberManager {
    type Result = ();

    fn handle(&mut self, msg: StopLivenessAndStartup, _ctx: &mut Self::Context) {
        let Some(uid) = msg.0.metadata.uid.clone() else { return };
        self.stop_where(|k| k.pod_uid == uid && matches!(k.kind, ProbeKind::Liveness | ProbeKind::Startup));
    }
}

impl Handler<CleanupPods> for ProberManager {
    type Result = ();

    fn handle(&mut self, msg: CleanupPods, _ctx: &mut Self::Context) {
        self.stop_where(|k| !msg.0.contains(&k.pod_uid));
    }
}

impl Handler<UpdatePodStatus> for ProberManager {
    type Result = MessageResult<UpdatePodStatus>;

    fn handle(&mut self, msg: UpdatePodStatus, _ctx: &mut Self::Context) -> Self::Result {
        let uid = msg.pod.metadata.uid.clone().unwrap_or_default();
        let workers: HashSet<(String, ProbeKind)> =
            self.pod_workers(&uid).map(|(k, _)| (k.container_name.clone(), k.kind)).collect();
        let keys = result_keys(&msg.status);
        let answer = self.config.results_view.get_many(&keys);
        let results: HashMap<_, _> =
            keys.into_iter().zip(answer).filter_map(|(key, result)| result.map(|r| (key, r))).collect();
        let view = ProbeView { workers, results, manager_start: self.start };
        let mut status = msg.status;
        for name in update_pod_status(&msg.pod, &mut status, &view) {
            let key = ProbeKey { pod_uid: uid.clone(), container_name: name, kind: ProbeKind::Readiness };
            if let Some(entry) = self.workers.get(&key)
                && entry.addr.try_send(Trigger).is_err()
            {
                tracing::debug!(pod_uid = %uid, container = %key.container_name, probe_kind = %key.kind, "Failed to trigger a manual run");
            }
        }
        MessageResult(status)
    }
}

impl Handler<GetWorkers> for ProberManager {
    type Result = MessageResult<GetWorkers>;

    fn handle(&mut self, _msg: GetWorkers, _ctx: &mut Self::Context) -> Self::Result {
        MessageResult(self.workers.keys().cloned().collect())
    }
}

impl Handler<WorkerExited> for ProberManager {
    type Result = ();

    fn handle(&mut self, msg: WorkerExited, ctx: &mut Self::Context) {
        let Some(entry) = self.workers.get(&msg.key).filter(|e| e.id == msg.worker_id) else {
            self.left_by_replaced(&msg);
            return;
        };
        if msg.clean {
            self.workers.remove(&msg.key);
            workers_gauge(msg.key.kind).decrement(1.0);
            self.release(msg.key.kind, msg.container_id, &msg.labels);
            tracing::debug!(pod_uid = %msg.key.pod_uid, container = %msg.key.container_name, probe_kind = %msg.key.kind, "Probe worker exited");
            return;
        }
        if entry.stopping {
            self.discard_dead(&msg);
            return;
        }
        let restarts = entry.restarts + 1;
        let delay = restart_backoff(restarts);
        tracing::error!(
            pod_uid = %msg.key.pod_uid, container = %msg.key.container_name, probe_kind = %msg.key.kind,
            restarts, delay_seconds = delay.as_secs(), "Probe worker died; restarting it"
        );
        metrics::counter!(names::PROBELET_WORKER_RESTARTS_TOTAL, "probe_type" => msg.key.kind.as_str())
            .increment(1);
        ctx.run_later(delay, move |act, ctx| {
            let Some(entry) = act.workers.get(&msg.key).filter(|e| e.id == msg.worker_id) else {
                act.left_by_replaced(&msg); // replaced by a new worker meanwhile
                return;
            };
            // Told to stop while it waited: nothing will deregister it but us.
            if entry.stopping {
                act.discard_dead(&msg);
                return;
            }
            let (pod, container) = (entry.pod.clone(), entry.container.clone());
            let state = msg.state.unwrap_or_else(WorkerState::resumed);
            act.spawn_worker(ctx, msg.key, pod, container, state, restarts);
        });
    }
}

impl ProberManager {
    /// A dead worker that will not be restarted: deregister it and clean up after it.
    fn discard_dead(&mut self, msg: &WorkerExited) {
        let key = &msg.key;
        if self.workers.remove(key).is_none() {
            return;
        }
        workers_gauge(key.kind).decrement(1.0);
        self.release(key.kind, msg.container_id.clone(), &msg.labels);
        tracing::debug!(pod_uid = %key.pod_uid, container = %key.container_name, probe_kind = %key.kind, "Dead probe worker discarded");
    }

    /// What a worker that was replaced leaves behind. A newer worker (ids only grow) owns the
    /// key's series and decides about the cache entry; with none left (the replacement has
    /// exited too), nobody owns either.
    fn left_by_replaced(&self, msg: &WorkerExited) {
        match self.workers.get(&msg.key) {
            Some(newer) => {
                if let Some(container_id) = msg.container_id.clone() {
                    newer.addr.do_send(PredecessorExited { container_id });
                }
            }
            None => self.release(msg.key.kind, msg.container_id.clone(), &msg.labels),
        }
    }

    /// What an exited worker leaves when no newer worker has its key: its container's cached
    /// result and its metric series (upstream's worker removes both on exit).
    fn release(&self, kind: ProbeKind, container_id: Option<ContainerId>, labels: &ProbeLabels) {
        if let Some(container_id) = container_id {
            self.config.results.do_send(RemoveResult { kind, container_id });
        }
        labels.forget();
    }
}

// === helpers ===

/// One second, doubling per abnormal death, at most [`MAX_RESTART_BACKOFF`].
pub fn restart_backoff(restarts: u32) -> Duration {
    let secs = 1u64.checked_shl(restarts.saturating_sub(1)).unwrap_or(u64::MAX);
    Duration::from_secs(secs).min(MAX_RESTART_BACKOFF)
}

fn is_sidecar(pod: &Pod, name: &str) -> bool {
    super::do_probe::is_sidecar_of(pod, name)
}

fn workers_gauge(kind: ProbeKind) -> metrics::Gauge {
    metrics::gauge!(names::PROBELET_PROBE_WORKERS, "probe_type" => kind.as_str())
}
