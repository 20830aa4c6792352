//! The prober manager actor (upstream `pkg/kubelet/prober/prober_manager.go`), the supervisor
//! of the probe workers: it creates them for a pod's containers (`AddPod`), stops them
//! (`RemovePod`, `CleanupPods`, `StopLivenessAndStartup`), sets `started` / `ready` on a status
//! being generated (`UpdatePodStatus`) and restarts a worker that died abnormally. Under the
//! `ContainerLifecycleProber` gate `AddPod` only creates workers, and `StartContainerProbes` /
//! `StopContainerProbes` start and stop them per container instance (docs/prober.md §3.7);
//! `ChangeContainerStatusOnKubeletRestart` turns the agent-restart preservation off (§3.8).
//! Under `MutableContainerProbes`, `ReconcilePod` applies a running pod's probe changes to its
//! workers in place (upstream `ReconcilePod`, KEP-6318; §3.9), with what changed worked out by
//! [`super::reconcile`].
//!
//! This file holds the actor and its core messages; `lifecycle.rs` the lifecycle messages,
//! `in_place.rs` `ReconcilePod`, `queries.rs` what a host can ask about the workers.
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
use std::sync::{Arc, Weak};
use std::time::Duration;

use actix::prelude::*;
use k8s_openapi::api::core::v1::{Pod, PodStatus, Probe};
use k8s_openapi::jiff::Timestamp;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

use super::do_probe::{AfterExit, ContainerBinding, WorkerSpec, WorkerState};
use super::pod_container::duplicate_container_name;
use super::probe_metrics::ProbeLabels;
use super::reconcile::ProbeChange;
use super::timing::{EffectiveTiming, probe_timings};
use super::update_status::{ProbeView, result_keys, update_pod_status};
use super::worker::{ProbeKey, ProbeWorker, WorkerConfig, WorkerExited, WorkerHandle, WorkerPeers};
use super::{PodContainer, ProbeKind, ProbeRunner};
use crate::capacity::ShrinkAfterRemoval;
use crate::clock::SharedClock;
use crate::container::ContainerId;
use crate::contracts::EventRecorder;
use crate::features::{Feature, FeatureGates};
use crate::metrics as names;
use crate::results::{RemoveResult, ResultsSink, ResultsView};
use crate::status::is_restartable_init_container;
use crate::status::views::StatusViews;
use crate::vocabulary::PodUid;

mod in_place;
mod lifecycle;
mod queries;

pub use in_place::ReconcilePod;
use in_place::removed_probe_results;
pub use lifecycle::{StartContainerProbes, StopContainerProbes};
pub use queries::{GetWorkerState, GetWorkers, ListWorkers, WorkerInfo};

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
pub struct CleanupPods(pub HashSet<PodUid>);

/// Set `started` and `ready` on a status being generated for the pod.
#[derive(Debug, Clone, Message)]
#[rtype(result = "PodStatus")]
pub struct UpdatePodStatus {
    /// The pod the status is for (its spec and its status on the API server).
    pub pod: Arc<Pod>,
    /// The status being generated; returned with `started` and `ready` set from the probe results.
    pub status: PodStatus,
}

// === the actor ===

/// Everything the manager needs to create workers.
pub struct ManagerConfig {
    /// Runs the probes (normally [`super::Prober`]); every worker shares it.
    pub prober: Arc<dyn ProbeRunner>,
    /// The results cache the workers write to.
    pub results: ResultsSink,
    /// What `results` stores, read by `UpdatePodStatus` without a round trip.
    pub results_view: ResultsView,
    /// Where workers get a view of their pod's latest status.
    pub views: StatusViews,
    /// The wall clock: the manager's start time, and the workers' initial delays.
    pub clock: SharedClock,
    /// The runtime the workers run on as tasks (a work-stealing one, so any of its threads
    /// runs any worker); `None` runs them on the manager's own (the paused-time tests').
    pub runtime: Option<tokio::runtime::Handle>,
    /// Seed for the start-up jitter; `None` seeds from the OS.
    pub jitter_seed: Option<u64>,
}

struct WorkerEntry {
    /// `None`: created by `AddPod` under `ContainerLifecycleProber`, not started yet.
    addr: Option<WorkerHandle>,
    id: u64,
    /// Told to stop; no longer blocks a new worker for the key.
    stopping: bool,
    /// Abnormal deaths so far, for the restart back-off.
    restarts: u32,
    /// The container, read through its pod (no copy of its spec); the pod is this entry's.
    container: PodContainer,
    /// The container instance it was started for (`StartContainerProbes`). Boxed: only
    /// `ContainerLifecycleProber` sets it, and inline it would make every worker's entry in the
    /// map about 70 bytes larger.
    binding: Option<Box<ContainerBinding>>,
}

/// How a worker starts: fresh, resumed or restarted, and for which container instance.
struct WorkerStart {
    state: WorkerState,
    /// Abnormal deaths of its predecessors, for the restart back-off.
    restarts: u32,
    binding: Option<ContainerBinding>,
}

/// The prober manager actor (upstream `prober.Manager`): start it through
/// [`crate::Pipeline::start`] and send it the messages above.
pub struct ProberManager {
    config: ManagerConfig,
    /// What every worker shares (the prober, `config.results`, this manager's recipient): one
    /// copy, made when a worker starts and none is alive (it needs this manager's address).
    /// Held weakly: the workers keep it, and a strong copy here would keep a recipient of this
    /// manager, and so the manager itself, alive with no worker and no host left.
    peers: Weak<WorkerPeers>,
    /// When the manager started on the wall clock: a container that started before it (by its
    /// `startedAt`, a wall time) ran before the agent restarted.
    start: Timestamp,
    /// When the manager started on tokio's clock: the start-up jitter lasts while the manager
    /// is younger than a period, an age no step of the wall clock may change (upstream times
    /// it with Go's monotonic reading).
    started: tokio::time::Instant,
    /// Workers by key; ordered so that a pod's workers are one range.
    workers: BTreeMap<ProbeKey, WorkerEntry>,
    next_id: u64,
    rng: StdRng,
    /// The kubelet feature gates in force (see [`ProberManager::with_feature_gates`]).
    feature_gates: FeatureGates,
    /// Where `ContainerProbeChanged` events go (see [`ProberManager::with_recorder`]).
    recorder: Option<Arc<dyn EventRecorder>>,
    /// The last spec `AddPod` or `ReconcilePod` saw of each pod no `RemovePod` / `CleanupPods`
    /// has dropped: a probe `ReconcilePod` finds that this spec lacks is an added probe (an
    /// event); a pod not here is at its first sync, and gets no workers from
    /// `StartContainerProbes`.
    known_pods: HashMap<PodUid, Arc<Pod>>,
    /// Static pods get in-place probe changes too (see [`ProberManager::with_static_pods_in_place`]).
    static_pods_in_place: bool,
    /// Whether workers created while the manager is young wait a start-up jitter (see
    /// [`ProberManager::with_start_up_jitter`]).
    start_up_jitter: bool,
}

impl ProberManager {
    /// A manager with no workers; its start time is `config.clock`'s now (for the agent-restart
    /// grace) and tokio's (for the start-up jitter).
    pub fn new(config: ManagerConfig) -> Self {
        let rng = match config.jitter_seed {
            Some(seed) => StdRng::seed_from_u64(seed),
            None => StdRng::from_os_rng(),
        };
        let start = config.clock.now();
        ProberManager {
            peers: Weak::new(),
            config,
            start,
            started: tokio::time::Instant::now(),
            workers: BTreeMap::new(),
            next_id: 0,
            rng,
            feature_gates: FeatureGates::default(),
            recorder: None,
            known_pods: HashMap::new(),
            static_pods_in_place: false,
            start_up_jitter: true,
        }
    }

    /// Whether a worker created while the manager is younger than its probe's period first
    /// waits a random part of the period (upstream's start-up jitter, true by default). A
    /// measurement that adds pods to an engine just started, as they would be added to one up
    /// for long, turns it off: the jitter's age is tokio's, which no clock given can move.
    pub fn with_start_up_jitter(mut self, jitter: bool) -> Self {
        self.start_up_jitter = jitter;
        self
    }

    /// With `in_place`, `ReconcilePod` applies a static pod's probe changes in place (a host
    /// that is the static pods' own source, like the standalone agent); mirror pods stay
    /// excluded. Off by default, as the kubelet.
    pub fn with_static_pods_in_place(mut self, in_place: bool) -> Self {
        self.static_pods_in_place = in_place;
        self
    }

    /// The manager records `ContainerProbeChanged` events (`MutableContainerProbes`) with
    /// `recorder`; without one it records none.
    pub fn with_recorder(mut self, recorder: Arc<dyn EventRecorder>) -> Self {
        self.recorder = Some(recorder);
        self
    }

    /// The manager under these feature gates instead of the kubelet's defaults.
    pub fn with_feature_gates(mut self, feature_gates: FeatureGates) -> Self {
        self.feature_gates = feature_gates;
        self
    }

    /// When the manager started.
    pub fn start(&self) -> Timestamp {
        self.start
    }

    fn pod_workers(&self, pod_uid: &str) -> impl Iterator<Item = (&ProbeKey, &WorkerEntry)> {
        let from =
            ProbeKey { pod_uid: pod_uid.into(), container_name: Arc::from(""), kind: ProbeKind::Liveness };
        self.workers
            .range((Bound::Included(from), Bound::Unbounded))
            .take_while(move |(k, _)| k.pod_uid == pod_uid)
    }

    fn spawn_worker(
        &mut self,
        ctx: &mut Context<Self>,
        key: ProbeKey,
        container: PodContainer,
        how: WorkerStart,
    ) {
        let WorkerStart { state, restarts, binding } = how;
        let pod = container.pod();
        let Some(probe) = key.kind.probe_of(&container).cloned() else { return };
        // An invalid timing annotation is the host's to report; the probe then runs with its
        // seconds fields.
        let timings = probe_timings(pod).unwrap_or_default();
        let timing = EffectiveTiming::new(&probe, timings.get(&key.container_name, key.kind));
        let mut spec = self.worker_spec(&key, &container, &probe);
        spec.initial_delay = timing.initial_delay;
        spec.bound = binding.clone().map(Box::new);
        let on_started =
            (key.kind == ProbeKind::Startup && binding.is_some()).then(|| ctx.address().recipient());
        let start_interval = timing.start_interval.filter(|_| key.kind == ProbeKind::Readiness);
        let jitter = self.jitter(start_interval.unwrap_or(timing.period));
        self.next_id += 1;
        let id = self.next_id;
        let config = WorkerConfig {
            key: key.clone(),
            worker_id: id,
            container: container.clone(),
            spec,
            state,
            period: timing.period,
            start_interval,
            timeout: timing.timeout,
            jitter,
            status: self.config.views.subscribe(&key.pod_uid),
            peers: self.peers(ctx),
            on_started,
        };
        let addr = ProbeWorker::spawn(config, self.config.runtime.as_ref());
        tracing::debug!(pod_uid = %key.pod_uid, container = %key.container_name, probe_kind = %key.kind, "Probe worker started");
        let binding = binding.map(Box::new);
        let entry = WorkerEntry { addr: Some(addr), id, stopping: false, restarts, container, binding };
        self.insert(key, entry);
    }

    /// What a worker for `key` captures of its pod, container and probe, under the gates in
    /// force: whether it keeps container state across an agent restart, and whether the
    /// container runs again once it has terminated (`ContainerRestartRules`; with
    /// `RestartAllContainersOnContainerExits` also when the whole pod restarts).
    pub(super) fn worker_spec(&self, key: &ProbeKey, container: &PodContainer, probe: &Probe) -> WorkerSpec {
        let pod = container.pod();
        let is_sidecar = is_sidecar(pod, &container.name);
        let mut spec = WorkerSpec::new(key, pod, probe, is_sidecar, self.start);
        spec.keep_state_across_restart =
            !self.feature_gates.enabled(Feature::ChangeContainerStatusOnKubeletRestart);
        if self.feature_gates.enabled(Feature::ContainerRestartRules) {
            spec.after_exit = if self.feature_gates.enabled(Feature::RestartAllContainersOnContainerExits) {
                AfterExit::AskTheContainerAndThePod
            } else {
                AfterExit::AskTheContainer
            };
        }
        // Upstream's manager makes every worker its newer kind under the gate, static pods'
        // too (only their in-place changes are excluded).
        spec.mutable = self.feature_gates.enabled(Feature::MutableContainerProbes);
        spec
    }

    /// A worker `AddPod` creates under `ContainerLifecycleProber`: known (so the container is
    /// not ready or started before it is probed), not probing until `StartContainerProbes`.
    fn add_unstarted(&mut self, key: ProbeKey, container: PodContainer) {
        self.next_id += 1;
        let entry = WorkerEntry {
            addr: None,
            id: self.next_id,
            stopping: false,
            restarts: 0,
            container,
            binding: None,
        };
        tracing::trace!(pod_uid = %key.pod_uid, container = %key.container_name, probe_kind = %key.kind, "Probe worker created, not started");
        self.insert(key, entry);
    }

    fn insert(&mut self, key: ProbeKey, entry: WorkerEntry) {
        let kind = key.kind;
        if self.workers.insert(key, entry).is_none() {
            workers_gauge(kind).increment(1.0);
        }
    }

    /// Drops the key's entry; a started worker is told to stop, and its exit finds the key
    /// taken or free (see [`Self::left_by_replaced`]).
    fn retire(&mut self, key: &ProbeKey) {
        let Some(entry) = self.workers.remove(key) else { return };
        workers_gauge(key.kind).decrement(1.0);
        if let Some(addr) = entry.addr.filter(|_| !entry.stopping) {
            addr.stop();
        }
    }

    /// Upstream `startWorkerLocked`: start the key's worker for this container instance unless
    /// it already probes it. Nothing when the container has no probe of this kind.
    fn start_bound(&mut self, ctx: &mut Context<Self>, key: ProbeKey, binding: &ContainerBinding) {
        let Some(entry) = self.workers.get(&key) else { return };
        let running = entry.addr.is_some() && !entry.stopping;
        if running && entry.binding.as_ref().is_some_and(|b| b.container_id == binding.container_id) {
            return;
        }
        if running && let Some(addr) = &entry.addr {
            addr.stop();
        }
        let container = entry.container.clone();
        let how = WorkerStart { state: WorkerState::new(), restarts: 0, binding: Some(binding.clone()) };
        self.spawn_worker(ctx, key, container, how);
    }

    fn start_readiness_and_liveness(
        &mut self,
        ctx: &mut Context<Self>,
        uid: &str,
        name: &str,
        binding: &ContainerBinding,
    ) {
        for kind in [ProbeKind::Readiness, ProbeKind::Liveness] {
            let key = ProbeKey { pod_uid: uid.into(), container_name: name.into(), kind };
            self.start_bound(ctx, key, binding);
        }
    }

    fn lifecycle(&self) -> bool {
        self.feature_gates.enabled(Feature::ContainerLifecycleProber)
    }

    /// Upstream: sleep a random part of the period, but only while the manager is younger than
    /// one period (spreads probes after an agent restart).
    fn jitter(&mut self, period: Duration) -> Duration {
        let young = self.start_up_jitter && self.started.elapsed() < period;
        if young { period.mul_f64(self.rng.random::<f64>()) } else { Duration::ZERO }
    }

    /// Stops the matching workers; one not started yet is dropped at once (upstream deletes
    /// a worker that is not running), a started one stays until it exits. A scan of every
    /// worker: for one pod's, [`ProberManager::stop_pod_where`].
    fn stop_where(&mut self, mut pred: impl FnMut(&ProbeKey) -> bool) {
        let keys: Vec<ProbeKey> =
            self.workers.iter().filter(|(k, e)| !e.stopping && pred(k)).map(|(k, _)| k.clone()).collect();
        self.stop_keys(keys);
    }

    /// [`ProberManager::stop_where`] among one pod's workers only: a range of the ordered map,
    /// so removing n pods one by one costs n·log n, not n² (the overload run in
    /// docs/benchmarks.md spent most of the manager's thread in that scan).
    fn stop_pod_where(&mut self, pod_uid: &str, mut pred: impl FnMut(&ProbeKey) -> bool) {
        let keys: Vec<ProbeKey> = self
            .pod_workers(pod_uid)
            .filter(|(k, e)| !e.stopping && pred(k))
            .map(|(k, _)| k.clone())
            .collect();
        self.stop_keys(keys);
    }

    fn stop_keys(&mut self, keys: Vec<ProbeKey>) {
        let mut unstarted = Vec::new();
        for key in keys {
            let Some(entry) = self.workers.get_mut(&key) else { continue };
            match &entry.addr {
                Some(addr) => {
                    entry.stopping = true;
                    addr.stop();
                }
                None => unstarted.push(key),
            }
        }
        for key in unstarted {
            self.retire(&key);
        }
    }
}

impl Actor for ProberManager {
    type Context = Context<Self>;

    fn stopped(&mut self, _ctx: &mut Self::Context) {
        for addr in self.workers.values().filter_map(|e| e.addr.as_ref()) {
            addr.stop();
        }
    }
}

impl Handler<AddPod> for ProberManager {
    type Result = ();

    fn handle(&mut self, msg: AddPod, ctx: &mut Self::Context) {
        self.add_pod(msg.0, ctx, None);
    }
}

impl ProberManager {
    /// `AddPod`: a worker for every probe without one. With `previous` (the spec a reconciled
    /// pod had before), each probe that spec lacks is an added probe: an event says so. A
    /// worker that exited by itself is recreated silently, as `AddPod` always does.
    fn add_pod(&mut self, pod: Arc<Pod>, ctx: &mut Context<Self>, previous: Option<Arc<Pod>>) {
        let Some(uid) = PodUid::of(&pod) else {
            tracing::warn!(pod = %crate::format::pod_ref(&pod), "Pod without a UID; not probing it");
            return;
        };
        if refused_for_a_duplicate_name(&pod, &uid) {
            return;
        }
        self.known_pods.insert(uid.clone(), pod.clone());
        let before: Option<HashMap<String, PodContainer>> =
            previous.map(|p| probed_containers(&p).into_iter().map(|c| (c.name.clone(), c)).collect());
        for container in probed_containers(&pod) {
            for kind in ProbeKind::ADD_ORDER {
                if kind.probe_of(&container).is_none() {
                    continue;
                }
                let key =
                    ProbeKey { pod_uid: uid.clone(), container_name: container.name.as_str().into(), kind };
                let state = match self.workers.get(&key) {
                    Some(entry) if !entry.stopping => {
                        tracing::trace!(
                            pod = crate::format::pod_ref(&pod),
                            containerName = container.name.as_str(),
                            "{kind} probe already exists for container"
                        );
                        continue;
                    }
                    // The stopping worker's cache entry stays: the replacement takes it over.
                    Some(_) => WorkerState::resumed(),
                    None => WorkerState::new(),
                };
                let added = before
                    .as_ref()
                    .is_some_and(|b| b.get(&container.name).is_none_or(|c| kind.probe_of(c).is_none()));
                if added {
                    self.record_change(&pod, &container, kind, &ProbeChange::Added);
                }
                if self.lifecycle() {
                    self.add_unstarted(key.clone(), container.clone());
                    if added {
                        self.start_added(ctx, &key, &container);
                    }
                } else {
                    let how = WorkerStart { state, restarts: 0, binding: None };
                    self.spawn_worker(ctx, key, container.clone(), how);
                }
            }
        }
    }
}

/// A pod two of whose containers share a name is not probed at all (the API server refuses it:
/// `Duplicate value`): workers are keyed by container name, so the second container's probes
/// would be taken for the first's, or dropped. Logged at warn with the pod and the name, as a
/// pod without a UID is; whether it is refused.
pub(super) fn refused_for_a_duplicate_name(pod: &Pod, uid: &PodUid) -> bool {
    let Some(container) = duplicate_container_name(pod) else { return false };
    tracing::warn!(
        pod = %crate::format::pod_ref(pod),
        pod_uid = %uid,
        container,
        "Pod has more than one container of this name; not probing it"
    );
    true
}

impl Handler<RemovePod> for ProberManager {
    type Result = ();

    fn handle(&mut self, msg: RemovePod, _ctx: &mut Self::Context) {
        let Some(uid) = PodUid::of(&msg.0) else { return };
        if self.known_pods.remove(&uid).is_some() {
            self.known_pods.shrink_after_removal();
        }
        self.stop_pod_where(&uid, |_| true);
    }
}

impl Handler<StopLivenessAndStartup> for ProberManager {
    type Result = ();

    fn handle(&mut self, msg: StopLivenessAndStartup, _ctx: &mut Self::Context) {
        let Some(uid) = PodUid::of(&msg.0) else { return };
        self.stop_pod_where(&uid, |k| matches!(k.kind, ProbeKind::Liveness | ProbeKind::Startup));
    }
}

impl Handler<CleanupPods> for ProberManager {
    type Result = ();

    fn handle(&mut self, msg: CleanupPods, _ctx: &mut Self::Context) {
        self.known_pods.retain(|uid, _| msg.0.contains(uid));
        self.known_pods.shrink_after_removal();
        self.stop_where(|k| !msg.0.contains(&k.pod_uid));
    }
}

impl Handler<UpdatePodStatus> for ProberManager {
    type Result = MessageResult<UpdatePodStatus>;

    fn handle(&mut self, msg: UpdatePodStatus, _ctx: &mut Self::Context) -> Self::Result {
        let uid = PodUid::of(&msg.pod).unwrap_or_default();
        let workers: HashSet<(Arc<str>, ProbeKind)> =
            self.pod_workers(&uid).map(|(k, _)| (k.container_name.clone(), k.kind)).collect();
        let keys = result_keys(&msg.status);
        let answer = self.config.results_view.get_many(&keys);
        let mut results: HashMap<_, _> =
            keys.into_iter().zip(answer).filter_map(|(key, result)| result.map(|r| (key, r))).collect();
        if self.feature_gates.enabled(Feature::MutableContainerProbes) {
            // A probe removed in place counts as never configured, whatever its worker left
            // in the cache before it exited.
            let removed = removed_probe_results(&msg.pod, &msg.status, &workers);
            results.retain(|key, _| !removed.contains(key));
        }
        let change_status_on_restart =
            self.feature_gates.enabled(Feature::ChangeContainerStatusOnKubeletRestart);
        let view = ProbeView { workers, results, manager_start: self.start, change_status_on_restart };
        let mut status = msg.status;
        let triggers = update_pod_status(&msg.pod, &mut status, &view);
        // A lifecycle worker starts with its container and probes at once: no manual trigger
        // (upstream skips it under ContainerLifecycleProber).
        for name in triggers.into_iter().filter(|_| !self.lifecycle()) {
            let key =
                ProbeKey { pod_uid: uid.clone(), container_name: name.into(), kind: ProbeKind::Readiness };
            if let Some(addr) = self.workers.get(&key).and_then(|e| e.addr.as_ref())
                && !addr.trigger()
            {
                tracing::debug!(probe = key.kind.as_str(), "Failed to trigger a manual run");
            }
        }
        MessageResult(status)
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
            self.release(&msg.key, msg.container_id, &msg.pod);
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
            let (container, binding) = (entry.container.clone(), entry.binding.as_deref().cloned());
            let state = msg.state.unwrap_or_else(WorkerState::resumed);
            act.spawn_worker(ctx, msg.key, container, WorkerStart { state, restarts, binding });
        });
    }
}

impl ProberManager {
    fn peers(&mut self, ctx: &Context<Self>) -> Arc<WorkerPeers> {
        if let Some(peers) = self.peers.upgrade() {
            return peers;
        }
        let peers = Arc::new(WorkerPeers {
            prober: self.config.prober.clone(),
            results: self.config.results.clone(),
            results_view: self.config.results_view.clone(),
            manager: ctx.address().recipient(),
            clock: self.config.clock.clone(),
        });
        self.peers = Arc::downgrade(&peers);
        peers
    }

    /// A dead worker that will not be restarted: deregister it and clean up after it.
    fn discard_dead(&mut self, msg: &WorkerExited) {
        let key = &msg.key;
        if self.workers.remove(key).is_none() {
            return;
        }
        workers_gauge(key.kind).decrement(1.0);
        self.release(key, msg.container_id.clone(), &msg.pod);
        tracing::debug!(pod_uid = %key.pod_uid, container = %key.container_name, probe_kind = %key.kind, "Dead probe worker discarded");
    }

    /// What a worker that was replaced leaves behind. A newer worker (ids only grow) owns the
    /// key's series and decides about the cache entry; with none left (the replacement has
    /// exited too), nobody owns either.
    fn left_by_replaced(&self, msg: &WorkerExited) {
        match self.workers.get(&msg.key).and_then(|e| e.addr.as_ref()) {
            Some(newer) => {
                if let Some(container_id) = msg.container_id.clone() {
                    newer.predecessor_exited(container_id);
                }
            }
            // No newer worker, or one not started yet (it writes its container's entry afresh
            // when it starts): nobody takes over the entry or the series.
            None => self.release(&msg.key, msg.container_id.clone(), &msg.pod),
        }
    }

    /// What an exited worker leaves when no newer worker has its key: its container's cached
    /// result and its metric series (upstream's worker removes both on exit).
    fn release(&self, key: &ProbeKey, container_id: Option<ContainerId>, pod: &Pod) {
        if let Some(container_id) = container_id {
            self.config.results.remove.do_send(RemoveResult { kind: key.kind, container_id });
        }
        ProbeLabels::new(key, pod).forget();
    }
}

// === helpers ===

/// One second, doubling per abnormal death, at most [`MAX_RESTART_BACKOFF`].
pub fn restart_backoff(restarts: u32) -> Duration {
    let secs = 1u64.checked_shl(restarts.saturating_sub(1)).unwrap_or(u64::MAX);
    Duration::from_secs(secs).min(MAX_RESTART_BACKOFF)
}

/// The pod's containers that can have probe workers: its regular containers and sidecars.
/// The containers a pod's probes can be in (its containers and restartable init containers), read
/// through the pod itself: no copy of a container's spec.
fn probed_containers(pod: &Arc<Pod>) -> Vec<PodContainer> {
    PodContainer::all(pod).filter(|c| !c.is_init() || is_restartable_init_container(c)).collect()
}

fn is_sidecar(pod: &Pod, name: &str) -> bool {
    super::do_probe::is_sidecar_of(pod, name)
}

fn workers_gauge(kind: ProbeKind) -> metrics::Gauge {
    metrics::gauge!(names::PROBELET_PROBE_WORKERS, "probe_type" => kind.as_str())
}

#[cfg(test)]
mod tests {
    /// docs/memory.md: the prober manager keeps one entry per worker, in a `BTreeMap` whose
    /// nodes are about half full, so every inline byte counts one and a half times; what only
    /// `ContainerLifecycleProber` uses stays behind a box.
    #[test]
    fn a_worker_entry_stays_small() {
        let size = std::mem::size_of::<super::WorkerEntry>();
        assert!(size <= 72, "WorkerEntry is {size} bytes");
    }
}
