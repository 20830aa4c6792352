//! Starting the whole engine and driving it: [`Pipeline::start`] wires a host's command
//! runner, event recorder and pod lookup into the results cache, status manager and prober
//! manager; the methods are the seed's `prober.Manager` and `status.Manager` interfaces in
//! Rust case, for hosts that would rather call functions than send messages.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;

use actix::prelude::*;
use k8s_openapi::api::core::v1::{Container, Pod, PodStatus};
use k8s_openapi::jiff::Timestamp;

use crate::clock::{SharedClock, SystemClock};
use crate::container::ContainerId;
use crate::contracts::{CommandRunner, EventRecorder, PodLookup, ProbeObserver};
use crate::features::{Feature, FeatureGates};
use crate::prober::do_probe::WorkerState;
use crate::prober::executors::Executors;
use crate::prober::lifecycle::{ContainerChange, container_changes};
use crate::prober::manager::{
    AddPod, CleanupPods, GetWorkerState, GetWorkers, ListWorkers, ManagerConfig, ProberManager, ReconcilePod,
    RemovePod, StartContainerProbes, StopContainerProbes, StopLivenessAndStartup, UpdatePodStatus,
    WorkerInfo,
};
use crate::prober::worker::ProbeKey;
use crate::prober::{DEFAULT_MAX_PROBES_IN_FLIGHT, ProbeHostPolicy, ProbeRunner, ProbeSlots, Prober};
use crate::results::{ProbeResultChanged, ResultsCache, ResultsView, SubscribeResults};
use crate::status::manager::{
    ClearPodResizeCondition, GetPodResizeConditions, GetPodStatus, GetVersionedStatus, ListStatuses,
    PodStatusUpdated, RemoveOrphanedStatuses, ResizeCondition, SetPodResizeCondition, SetPodStatus,
    StatusManager, SubscribeStatus, TerminatePod, VersionedPodStatus,
};
use crate::status::resize::PodResizeConditions;
use crate::status::views::StatusViews;
use crate::vocabulary::PodUid;

/// An actor of the pipeline did not answer (it stopped, or the system is shutting down).
#[derive(Debug, Clone, thiserror::Error)]
#[error("the {actor} is not running: {source}")]
pub struct PipelineError {
    /// Which actor did not answer: "prober manager" or "status manager".
    pub actor: &'static str,
    /// Why actix could not deliver the message or its answer.
    #[source]
    pub source: MailboxError,
}

/// What a host provides.
pub struct PipelineConfig {
    /// Runs exec probes in containers.
    pub runner: Arc<dyn CommandRunner>,
    /// Receives `Unhealthy` and `ProbeWarning` events.
    pub recorder: Arc<dyn EventRecorder>,
    /// The host's pods (upstream the kubelet's pod manager). It must hold a pod from before
    /// the pod's first [`Pipeline::add_pod`] or [`Pipeline::set_pod_status`] until it is
    /// removed: a probe result for a pod it lacks is dropped as a deleted pod's is (logged at
    /// trace, `Pod has been deleted, no need to update readiness`, upstream's verbosity 4), so
    /// the pod's status does not follow its probes; only its next status set, which reads the
    /// results cache, shows them.
    pub pods: Arc<dyn PodLookup>,
    /// Wall clock; defaults to the node's ([`SystemClock`]). Tests under paused tokio time give
    /// a [`crate::clock::TokioClock`].
    pub clock: Option<SharedClock>,
    /// How many threads the probe workers run on: a work-stealing runtime of its own, so any
    /// of them runs any worker; 0 keeps them on the caller's runtime (tests under paused time
    /// need that).
    pub worker_threads: usize,
    /// Replaces the real prober (tests script results with it). None of the real prober's
    /// settings below applies to it (its slots, host policy, observer, executors, runner): to
    /// add to the real prober rather than replace it, use [`PipelineConfig::wrap_prober`].
    pub prober: Option<Arc<dyn ProbeRunner>>,
    /// Wraps the real prober, made with every setting of this config, in a runner of the
    /// host's (ignored when [`PipelineConfig::prober`] replaces it). How a wrapper forwards
    /// what the worker asks of it: [`ProbeRunner`]'s documentation, "Wrapping the real prober".
    pub wrap_prober: Option<WrapProber>,
    /// Seed for the start-up jitter.
    pub jitter_seed: Option<u64>,
    /// Told about every probe run by the real prober.
    pub observer: Option<Arc<dyn ProbeObserver>>,
    /// Which hosts the real prober's `httpGet` and `tcpSocket` probes may connect to; the
    /// kubelet's behaviour ([`ProbeHostPolicy::Any`]) by default.
    pub probe_host_policy: ProbeHostPolicy,
    /// Network executors the real prober uses in place of its own (none by default).
    pub executors: Executors,
    /// The kubelet feature gates in force; the kubelet's defaults unless set.
    pub feature_gates: FeatureGates,
    /// The host is the static pods' own source (the standalone agent's manifests folder): under
    /// `MutableContainerProbes` their probe changes are applied in place like an API server
    /// pod's. False (the kubelet's rule): a static pod's probes change only by replacing it.
    pub static_pods_in_place: bool,
    /// Upstream's start-up jitter: a worker created while the engine is younger than its
    /// probe's period first waits a random part of the period (true unless set). A measurement
    /// that adds pods to an engine just started, as to one up for long, turns it off.
    pub start_up_jitter: bool,
    /// At most this many probes of the real prober run at once; a probe due while all are
    /// running waits for one to end, and its timeout starts when it runs (docs/prober.md §1.2,
    /// "Probe slots"); exec probes have a pool of the same size of their own.
    /// [`DEFAULT_MAX_PROBES_IN_FLIGHT`] unless set; `None` (or 0) lets every due probe run at
    /// once, as the kubelet does. A [`PipelineConfig::prober`] of the host's own is not
    /// bounded (it can wrap its futures in a [`ProbeSlots`] itself); one that wraps the real
    /// prober through [`PipelineConfig::wrap_prober`] is.
    pub max_probes_in_flight: Option<usize>,
    /// The exec probes' own pool, when it should be smaller than `max_probes_in_flight`: a
    /// local exec probe holds about four of the process's file descriptors while it runs, so
    /// the agent sizes this pool by its descriptor limit. `None`: the same size.
    pub max_exec_probes_in_flight: Option<usize>,
}

/// What [`PipelineConfig::wrap_prober`] holds: given the real prober as the config makes it,
/// the runner the workers use.
pub type WrapProber = Box<dyn FnOnce(Prober) -> Arc<dyn ProbeRunner> + Send>;

impl PipelineConfig {
    /// A config with the kubelet's defaults (and probelet's bound on probes in flight): the real
    /// prober, any probe host allowed, the node's wall clock, workers on the caller's runtime.
    pub fn new(
        runner: Arc<dyn CommandRunner>,
        recorder: Arc<dyn EventRecorder>,
        pods: Arc<dyn PodLookup>,
    ) -> Self {
        PipelineConfig {
            runner,
            recorder,
            pods,
            clock: None,
            worker_threads: 0,
            prober: None,
            wrap_prober: None,
            jitter_seed: None,
            observer: None,
            probe_host_policy: ProbeHostPolicy::Any,
            executors: Executors::default(),
            feature_gates: FeatureGates::default(),
            static_pods_in_place: false,
            start_up_jitter: true,
            max_probes_in_flight: Some(DEFAULT_MAX_PROBES_IN_FLIGHT),
            max_exec_probes_in_flight: None,
        }
    }
}

/// The running engine: addresses of its actors, and the host-facing API.
#[derive(Clone)]
pub struct Pipeline {
    /// The prober manager: send it the [`crate::prober::manager`] messages directly, or use the
    /// methods below.
    pub prober_manager: Addr<ProberManager>,
    /// The results cache: probe results by kind and container ID.
    pub results: Addr<ResultsCache>,
    /// What the results cache stores, readable at once.
    pub results_view: ResultsView,
    /// The status manager: send it the [`crate::status::manager`] messages directly, or use the
    /// methods below.
    pub status_manager: Addr<StatusManager>,
    /// Each pod's latest stored status, as a watch channel per pod (what the probe workers read).
    pub views: StatusViews,
    /// The feature gates the engine was started with.
    pub feature_gates: FeatureGates,
    /// The wall clock the engine stamps statuses with (`startTime`, transition times): a host
    /// that measures from those stamps (the standalone host's active deadline) reads this one.
    pub clock: SharedClock,
    /// Where the engine records its events; a host records its own pod events here too, so
    /// that they are kept and served with the engine's.
    pub recorder: Arc<dyn EventRecorder>,
    /// Kept so the workers' runtime lives as long as the pipeline, and ends the probing when
    /// the last copy is dropped.
    _workers: Arc<WorkerRuntime>,
}

impl Pipeline {
    /// Starts the results cache, status manager and prober manager on the current arbiter.
    ///
    /// # Panics
    ///
    /// Outside an actix system (`actix::System::new().block_on`, `#[actix::main]`,
    /// `#[actix::test]`), saying so: the actors need its arbiter, and tokio's own panic there
    /// ("`spawn_local` called from outside of a `task::LocalSet`") does not name actix.
    pub fn start(config: PipelineConfig) -> Pipeline {
        assert!(
            actix::System::try_current().is_some(),
            "probelet's Pipeline::start (and Engine's start) must be called inside an actix System: \
             actix::System::new().block_on(..), #[actix::main] or #[actix::test]"
        );
        let clock = config.clock.unwrap_or_else(|| Arc::new(SystemClock));
        let views = StatusViews::new();
        let status_manager = StatusManager::new(views.clone(), config.pods.clone(), clock.clone())
            .with_feature_gates(config.feature_gates)
            .start();
        let results = ResultsCache::new(
            Some(status_manager.clone().recipient()),
            Some(status_manager.clone().recipient()),
        );
        let results_view = results.view();
        let results = results.start();
        let observer = config.observer.clone();
        let prober: Arc<dyn ProbeRunner> = config.prober.unwrap_or_else(|| {
            let mut prober = Prober::new(config.runner.clone(), config.recorder.clone())
                .with_host_policy(config.probe_host_policy)
                .with_executors(config.executors);
            // 0 is no limit, as the agent's flag says (a pool of no slots would run nothing).
            if let Some(limit) = config.max_probes_in_flight.filter(|n| *n > 0) {
                prober = prober.with_slots(ProbeSlots::new(limit));
            }
            if let Some(limit) = config.max_exec_probes_in_flight.filter(|n| *n > 0) {
                prober = prober.with_exec_slots(ProbeSlots::new(limit));
            }
            let prober = match observer {
                Some(observer) => prober.with_observer(observer),
                None => prober,
            };
            match config.wrap_prober {
                Some(wrap) => wrap(prober),
                None => Arc::new(prober),
            }
        });
        let mut workers = WorkerRuntime::start(config.worker_threads);
        let manager = ProberManager::new(ManagerConfig {
            prober,
            results: results.clone().into(),
            results_view: results_view.clone(),
            views: views.clone(),
            clock: clock.clone(),
            runtime: workers.handle(),
            jitter_seed: config.jitter_seed,
        })
        .with_feature_gates(config.feature_gates)
        .with_recorder(config.recorder.clone())
        .with_static_pods_in_place(config.static_pods_in_place)
        .with_start_up_jitter(config.start_up_jitter)
        .start();
        workers.manager = Some(manager.clone());
        Pipeline {
            prober_manager: manager,
            results,
            results_view,
            status_manager,
            views,
            feature_gates: config.feature_gates,
            clock,
            recorder: config.recorder,
            _workers: Arc::new(workers),
        }
    }

    // --- the prober manager ---

    /// Starts a worker for every probe of the pod's containers that has none (upstream `AddPod`):
    /// call it when the pod is added or updated.
    ///
    /// A pod the engine cannot probe as written gets no worker at all, and a warn log says why
    /// (the call returns nothing: it is a message to the prober manager): one without
    /// `metadata.uid` (`Pod without a UID; not probing it`), and one two of whose containers
    /// share a name, init containers and sidecars included (`Pod has more than one container
    /// of this name; not probing it`, with the pod, its UID and the name), which the API server
    /// refuses (`spec.containers[1].name: Duplicate value: "app"`): workers are keyed by
    /// container name, so the second container's probes would otherwise be taken for the
    /// first's, or dropped. [`Pipeline::reconcile_pod`] refuses them too. An embedder can check
    /// first with [`duplicate_container_name`](crate::prober::pod_container::duplicate_container_name);
    /// [`Pipeline::workers`] shows no worker for such a pod.
    pub fn add_pod(&self, pod: Arc<Pod>) {
        self.prober_manager.do_send(AddPod(pod));
    }

    /// The pod's spec as it is now (upstream `ReconcilePod`): under `MutableContainerProbes`,
    /// probes added, changed or removed since its workers were created are applied in place
    /// (with a `Normal ContainerProbeChanged` event each); otherwise, and for static and mirror
    /// pods, it is [`Pipeline::add_pod`]. Call it in place of `add_pod` when the pod is added
    /// or updated.
    pub fn reconcile_pod(&self, pod: Arc<Pod>) {
        self.prober_manager.do_send(ReconcilePod(pod));
    }

    /// Stops every probe worker of the pod (upstream `RemovePod`): call it when the pod is deleted.
    pub fn remove_pod(&self, pod: Arc<Pod>) {
        self.prober_manager.do_send(RemovePod(pod));
    }

    /// Stops the pod's liveness and startup workers and keeps its readiness worker (upstream
    /// `StopLivenessAndStartup`): call it when graceful termination begins.
    pub fn stop_liveness_and_startup(&self, pod: Arc<Pod>) {
        self.prober_manager.do_send(StopLivenessAndStartup(pod));
    }

    /// A container instance started (upstream `StartContainerProbes`): under
    /// `ContainerLifecycleProber`, start its startup worker, or its readiness and liveness
    /// workers when it has no startup probe; a no-op with the gate off, and for a pod not added
    /// (or removed since). Idempotent.
    ///
    /// Send it after [`Pipeline::add_pod`] (or [`Pipeline::reconcile_pod`]) of the pod, as the
    /// kubelet's `SyncPod` adds a pod to its prober before it starts the pod's containers: a
    /// start sent before is dropped (logged at debug), and the workers `add_pod` then makes
    /// wait, neither started nor ready, for the next start of that instance
    /// ([`Pipeline::sync_container_probes`], called after each pod sync, sends it again).
    pub fn start_container_probes(
        &self,
        pod: Arc<Pod>,
        container: Arc<Container>,
        container_id: ContainerId,
        pod_ip: Option<String>,
        started_at: Option<Timestamp>,
    ) {
        self.prober_manager.do_send(StartContainerProbes {
            pod,
            container,
            container_id,
            pod_ip,
            started_at,
        });
    }

    /// A container stopped or exited (upstream `StopContainerProbes`): stop its workers.
    pub fn stop_container_probes(&self, pod_uid: &str, container: &str) {
        self.prober_manager
            .do_send(StopContainerProbes { pod_uid: pod_uid.into(), container: container.to_owned() });
    }

    /// Under `ContainerLifecycleProber`, tells the prober manager which of the pod's probed
    /// containers run and which do not, as `status` (just generated) shows them: a start for
    /// each running instance, a stop for each container that is not running. Hosts that learn
    /// container states from statuses call it after every status they generate; with the gate
    /// off it does nothing.
    pub fn sync_container_probes(&self, pod: &Arc<Pod>, status: &PodStatus) {
        if !self.feature_gates.enabled(Feature::ContainerLifecycleProber) {
            return;
        }
        let uid = pod.metadata.uid.clone().unwrap_or_default();
        for change in container_changes(pod, status) {
            match change {
                ContainerChange::Started { container, container_id, started_at } => self
                    .start_container_probes(
                        pod.clone(),
                        container,
                        container_id,
                        status.pod_ip.clone(),
                        started_at,
                    ),
                ContainerChange::Stopped { container } => self.stop_container_probes(&uid, &container),
            }
        }
    }

    /// Stops the workers of every pod whose UID is not in `desired` (upstream `CleanupPods`).
    pub fn cleanup_pods(&self, desired: HashSet<PodUid>) {
        self.prober_manager.do_send(CleanupPods(desired));
    }

    /// Sets `started` and `ready` on a status being generated.
    pub async fn update_pod_status(
        &self,
        pod: Arc<Pod>,
        status: PodStatus,
    ) -> Result<PodStatus, PipelineError> {
        self.prober_manager
            .send(UpdatePodStatus { pod, status })
            .await
            .map_err(|source| PipelineError { actor: "prober manager", source })
    }

    /// The state of the running worker for `key` (container ID, on-hold, result run, last
    /// result), as upstream's tests read it from a worker; `None` without a running worker.
    pub async fn worker_state(&self, key: ProbeKey) -> Result<Option<WorkerState>, PipelineError> {
        self.prober_manager
            .send(GetWorkerState(key))
            .await
            .map_err(|source| PipelineError { actor: "prober manager", source })
    }

    /// The keys of the probe workers that exist now, stopping ones included.
    pub async fn workers(&self) -> Result<Vec<ProbeKey>, PipelineError> {
        self.prober_manager
            .send(GetWorkers)
            .await
            .map_err(|source| PipelineError { actor: "prober manager", source })
    }

    /// Every worker the prober manager holds, started or not, with the container instance each
    /// was started for.
    pub async fn list_workers(&self) -> Result<Vec<WorkerInfo>, PipelineError> {
        self.prober_manager
            .send(ListWorkers)
            .await
            .map_err(|source| PipelineError { actor: "prober manager", source })
    }

    /// Every probe result change goes to `recipient` too (the host kills containers whose
    /// liveness or startup probe failed).
    pub fn subscribe_results(&self, recipient: Recipient<ProbeResultChanged>) {
        self.results.do_send(SubscribeResults(recipient));
    }

    // --- the status manager ---

    /// Stores a freshly generated status for the pod (upstream `SetPodStatus`). Pass it through
    /// [`Pipeline::update_pod_status`] first, so `started` and `ready` reflect the probes.
    ///
    /// It is sent, not awaited: a [`StatusViews`] subscription read at once may still show the
    /// status before it. A host that waits on the view for a container (ready, say) matches
    /// the container's ID too, so that the old instance's `ready` does not answer for the new
    /// one; [`Pipeline::pod_status`] asks the status manager and answers after the store.
    /// A pod without a UID is skipped with a warning (`Pod without a UID; not storing its
    /// status`), as [`Pipeline::add_pod`] skips it.
    pub fn set_pod_status(&self, pod: Arc<Pod>, status: PodStatus) {
        self.status_manager.do_send(SetPodStatus { pod, status });
    }

    /// Makes every container and the phase terminal before the pod is deleted (upstream
    /// `TerminatePod`).
    pub fn terminate_pod(&self, pod: Arc<Pod>) {
        self.status_manager.do_send(TerminatePod(pod));
    }

    /// Forgets the status of every pod whose UID is not in `keep` (upstream
    /// `RemoveOrphanedStatuses`).
    pub fn remove_orphaned_statuses(&self, keep: HashSet<PodUid>) {
        self.status_manager.do_send(RemoveOrphanedStatuses(keep));
    }

    /// The cached status of the pod with this UID or mirror pod UID (upstream `GetPodStatus`),
    /// decoded from the stored copy (a new one each call); `None` also for a stored status that
    /// does not decode (logged as an error; `StoredStatus::decode` says when).
    pub async fn pod_status(&self, uid: &str) -> Result<Option<Arc<PodStatus>>, PipelineError> {
        let stored = self
            .status_manager
            .send(GetPodStatus(uid.into()))
            .await
            .map_err(|source| PipelineError { actor: "status manager", source })?;
        Ok(stored.and_then(|s| s.decode_logged()).map(Arc::new))
    }

    /// The status the status manager last published for the pod with this UID (not a mirror
    /// pod's: map it with [`PodLookup::static_uid_for_mirror`] first), decoded, read at once
    /// from the pod's view ([`StatusViews::published`]) without a message to the status
    /// manager: for readers that must not wait for a busy actor thread, such as the agent's
    /// `/pods`. Unlike [`Pipeline::pod_status`] it does not apply the probe results the status
    /// manager has queued for its next pass (docs/status-manager.md §9): those show once the
    /// pass has run.
    pub fn published_status(&self, uid: &str) -> Option<Arc<PodStatus>> {
        self.views.published(uid).and_then(|p| p.status.decode_logged()).map(Arc::new)
    }

    /// The cached entry of the pod with this UID or mirror pod UID, version included.
    pub async fn versioned_status(&self, uid: &str) -> Result<Option<VersionedPodStatus>, PipelineError> {
        self.status_manager
            .send(GetVersionedStatus(uid.into()))
            .await
            .map_err(|source| PipelineError { actor: "status manager", source })
    }

    /// Every cached entry, by pod UID.
    pub async fn statuses(&self) -> Result<HashMap<PodUid, VersionedPodStatus>, PipelineError> {
        self.status_manager
            .send(ListStatuses)
            .await
            .map_err(|source| PipelineError { actor: "status manager", source })
    }

    /// Every stored status update goes to `recipient` (the syncer).
    pub fn subscribe_status(&self, recipient: Recipient<PodStatusUpdated>) {
        self.status_manager.do_send(SubscribeStatus(recipient));
    }

    /// Sets the pod's `PodResizePending` or `PodResizeInProgress` condition (upstream
    /// `SetPodResizePendingCondition` / `SetPodResizeInProgressCondition`): the host decides
    /// resizes, the next status it generates carries the condition.
    pub fn set_pod_resize_condition(
        &self,
        pod_uid: &str,
        condition: ResizeCondition,
        reason: &str,
        message: &str,
        observed_generation: i64,
    ) {
        self.status_manager.do_send(SetPodResizeCondition {
            pod_uid: pod_uid.into(),
            condition,
            reason: reason.to_owned(),
            message: message.to_owned(),
            observed_generation,
        });
    }

    /// Clears one of the pod's resize conditions; whether it was set (upstream
    /// `ClearPodResizePendingCondition` / `ClearPodResizeInProgressCondition`).
    pub async fn clear_pod_resize_condition(
        &self,
        pod_uid: &str,
        condition: ResizeCondition,
    ) -> Result<bool, PipelineError> {
        self.status_manager
            .send(ClearPodResizeCondition { pod_uid: pod_uid.into(), condition })
            .await
            .map_err(|source| PipelineError { actor: "status manager", source })
    }

    /// The pod's resize conditions (upstream `GetPodResizeConditions`).
    pub async fn pod_resize_conditions(&self, pod_uid: &str) -> Result<PodResizeConditions, PipelineError> {
        self.status_manager
            .send(GetPodResizeConditions(pod_uid.into()))
            .await
            .map_err(|source| PipelineError { actor: "status manager", source })
    }
}

/// The work-stealing runtime the probe workers run on as tasks (docs/architecture.md, "Threads
/// and time"). None when the pipeline was started with no worker threads, or when the threads
/// could not be made (the node out of processes): the workers then run on the caller's runtime,
/// slower but probing.
struct WorkerRuntime {
    runtime: Option<tokio::runtime::Runtime>,
    /// Told to stop every worker when the last pipeline is dropped and the workers run on the
    /// caller's runtime, which goes on: else they would probe on, unreachable, for good.
    manager: Option<Addr<ProberManager>>,
}

impl WorkerRuntime {
    fn start(threads: usize) -> Self {
        if threads == 0 {
            return WorkerRuntime { runtime: None, manager: None };
        }
        let mut builder = tokio::runtime::Builder::new_multi_thread();
        builder.worker_threads(threads).thread_name("probe-worker").enable_all();
        // tokio's builder panics ("OS can't spawn worker thread") rather than answer an error
        // when it cannot make even its first thread (a pids limit reached): one thread made and
        // ended here first tells, and the builder's panic is caught for the race in which the
        // last free one went meanwhile.
        let built = std::thread::Builder::new()
            .name("probe-worker".to_owned())
            .spawn(|| {})
            .map(|thread| {
                let _ = thread.join();
            })
            .and_then(|()| {
                std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| builder.build()))
                    .unwrap_or_else(|_| Err(std::io::Error::other("the runtime's threads could not be made")))
            });
        let runtime = match built {
            Ok(runtime) => Some(runtime),
            Err(error) => {
                tracing::error!(%error, threads, "Could not start the probe workers' threads; running the workers on the caller's thread");
                None
            }
        };
        WorkerRuntime { runtime, manager: None }
    }

    fn handle(&self) -> Option<tokio::runtime::Handle> {
        self.runtime.as_ref().map(|runtime| runtime.handle().clone())
    }
}

/// The last pipeline is usually dropped inside the host's runtime, where waiting for the
/// workers' threads is not allowed: they are told to stop and left to end, each worker's task
/// dropped with them (an exec probe's child is killed on its drop). Workers on the caller's
/// runtime are stopped by the manager, as `CleanupPods` with no pod left stops them, and each
/// cancels its probe in flight.
impl Drop for WorkerRuntime {
    fn drop(&mut self) {
        match self.runtime.take() {
            Some(runtime) => runtime.shutdown_background(),
            None => {
                if let Some(manager) = self.manager.take() {
                    manager.do_send(CleanupPods(HashSet::new()));
                }
            }
        }
    }
}
