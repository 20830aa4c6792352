//! The whole engine for a host in one call: [`Engine::builder`] starts the results cache, the
//! status manager and the prober manager ([`Pipeline`]) and, when the host hands it a
//! `kube::Client`, the status syncer that writes pod status to the API server. Without a client
//! the status manager is a local cache, as the kubelet's is when it has no API client
//! (docs/status-manager.md).
//!
//! [`Engine::sync_pod`] is the status half of the kubelet's `SyncPod`: the host calls it
//! whenever it has a fresh runtime status for a pod (its containers started, exited, restarted).
//! The probes' own changes need no call: readiness and startup reach the stored status through
//! the status manager, and liveness and startup failures reach whoever
//! [`Pipeline::subscribe_results`] names.
//!
//! No upstream counterpart: the kubelet wires these pieces by hand in `NewMainKubelet`.

use std::sync::Arc;

use actix::Addr;
use k8s_openapi::api::core::v1::{Pod, PodStatus};
use probelet_actors::clock::SharedClock;
use probelet_actors::contracts::{
    CommandRunner, EventRecorder, ExecError, LogRecorder, PodLookup, ProbeObserver,
};
use probelet_actors::features::{Feature, FeatureGates};
use probelet_actors::local_runner::LocalCommandRunner;
use probelet_actors::prober::ProbeHostPolicy;
use probelet_actors::prober::executors::Executors;
use probelet_actors::prober::pod_container::duplicate_container_name;
use probelet_actors::prober::update_status::{
    keep_started_and_ready_once_finished, keep_started_only_for_the_same_container,
    keep_started_while_terminating,
};
use probelet_actors::status::generate::keep_initialized_once_initialized;
use probelet_actors::status::manager::ResizeCondition;
use probelet_actors::status::{PHASE_FAILED, PHASE_SUCCEEDED, generate_kubelet_conditions_with_resize};
use probelet_actors::sync::api_pod::ApiPod;
use probelet_actors::sync::syncer::{
    ApiPodDeleted, ApiPodListed, ApiPodObserved, Flush, OwnedFields, StatusSyncer, StopWhenHostGone,
    SyncerConfig, start_syncer,
};
use probelet_actors::{Pipeline, PipelineConfig, PipelineError};

/// Why [`Engine::sync_pod`] stored nothing.
#[derive(Debug, Clone, thiserror::Error)]
pub enum SyncPodError {
    /// An actor of the engine did not answer.
    #[error(transparent)]
    Pipeline(#[from] PipelineError),
    /// The pod has no `metadata.uid`: the engine keeps every status and probe by UID, so two
    /// such pods would share one, and its probes could not run.
    #[error("pod {namespace}/{name} has no metadata.uid: the engine keeps statuses and probes by pod UID")]
    NoUid {
        /// The pod's namespace, as given.
        namespace: String,
        /// The pod's name, as given.
        name: String,
    },
    /// Two of the pod's containers (init, sidecar or regular) share a name, which the API server
    /// refuses (`Duplicate value`): the engine runs one worker per name, so one of them would go
    /// unprobed while its pod could read Ready.
    #[error("pod {namespace}/{name}: more than one container is named {container:?}")]
    DuplicateContainer {
        /// The pod's namespace, as given.
        namespace: String,
        /// The pod's name, as given.
        name: String,
        /// The name two containers share.
        container: String,
    },
}

fn is_terminal(phase: Option<&str>) -> bool {
    matches!(phase, Some(PHASE_SUCCEEDED | PHASE_FAILED))
}

/// A host's change to the syncer's settings, applied before it starts.
type SyncSettings = Box<dyn FnOnce(&mut SyncerConfig)>;

/// How [`EngineBuilder::start`] sets up the API sync.
struct ApiSync {
    client: kube::Client,
    owned_fields: OwnedFields,
}

/// What [`Engine::builder`] collects before [`EngineBuilder::start`]: every part but the pods
/// has the kubelet's default, but the command runner (see [`EngineBuilder::runner`]).
pub struct EngineBuilder {
    config: PipelineConfig,
    /// The host named the command runner: without it, an engine with an API client has none.
    runner_given: bool,
    api: Option<ApiSync>,
    sync_settings: Option<SyncSettings>,
}

impl EngineBuilder {
    /// Runs exec probes with `runner`. The default depends on where the pods come from:
    /// * without [`EngineBuilder::api`], [`LocalCommandRunner`]: the host's own pods, whose
    ///   containers are local processes (an edge agent's, the standalone agent's), run their
    ///   probe commands here;
    /// * with it, none: every exec probe errors ([`NO_COMMAND_RUNNER`]) and its result is
    ///   discarded, as the kubelet discards a probe its runtime cannot run. Those pods come from
    ///   the cluster, and running their commands on this machine would hand the machine to
    ///   whoever may create a pod on the node (docs/security.md, "Exec probes of an embedding
    ///   host"). A host whose containers do run here names [`LocalCommandRunner`] itself.
    pub fn runner(mut self, runner: Arc<dyn CommandRunner>) -> Self {
        self.config.runner = runner;
        self.runner_given = true;
        self
    }

    /// Wraps the real prober, made with every setting of this builder (its probe slots, host
    /// policy, observer, executors and runner), in a runner of the host's: `wrap` is given the
    /// prober and answers the runner the workers use. How a wrapper forwards what the worker
    /// asks of it: [`probelet_actors::prober::ProbeRunner`]'s documentation, "Wrapping the real
    /// prober".
    pub fn wrap_prober(
        mut self,
        wrap: impl FnOnce(probelet_actors::prober::Prober) -> Arc<dyn probelet_actors::prober::ProbeRunner>
        + Send
        + 'static,
    ) -> Self {
        self.config.wrap_prober = Some(Box::new(wrap));
        self
    }

    /// Sends `Unhealthy` and `ProbeWarning` events to `recorder` (default: [`LogRecorder`], the
    /// log).
    pub fn recorder(mut self, recorder: Arc<dyn EventRecorder>) -> Self {
        self.config.recorder = recorder;
        self
    }

    /// Reads the wall clock from `clock` (default: the node's, `SystemClock`; a test under
    /// paused tokio time gives a `TokioClock`).
    pub fn clock(mut self, clock: SharedClock) -> Self {
        self.config.clock = Some(clock);
        self
    }

    /// Tells `observer` about every probe run (its result, output and duration).
    pub fn observer(mut self, observer: Arc<dyn ProbeObserver>) -> Self {
        self.config.observer = Some(observer);
        self
    }

    /// Limits the hosts `httpGet` and `tcpSocket` probes may connect to (default: any, as the
    /// kubelet).
    pub fn probe_host_policy(mut self, policy: ProbeHostPolicy) -> Self {
        self.config.probe_host_policy = policy;
        self
    }

    /// Runs network probes with `executors` where they name one (a host with its own network
    /// path, tests); the real executors for the rest.
    pub fn executors(mut self, executors: Executors) -> Self {
        self.config.executors = executors;
        self
    }

    /// Sets the kubelet feature gates in force (default: the kubelet's defaults; see
    /// [`probelet_actors::features`]).
    pub fn feature_gates(mut self, gates: FeatureGates) -> Self {
        self.config.feature_gates = gates;
        self
    }

    /// Runs at most `limit` probes at once (`None`: every due probe at once, as the kubelet
    /// does). The default is [`probelet_actors::prober::DEFAULT_MAX_PROBES_IN_FLIGHT`]; a probe
    /// due while every slot is taken waits for one, and its timeout starts when it runs
    /// (docs/prober.md §1.2, "Probe slots").
    pub fn max_probes_in_flight(mut self, limit: Option<usize>) -> Self {
        self.config.max_probes_in_flight = limit;
        self
    }

    /// A smaller pool for exec probes ([`PipelineConfig::max_exec_probes_in_flight`]).
    pub fn max_exec_probes_in_flight(mut self, limit: Option<usize>) -> Self {
        self.config.max_exec_probes_in_flight = limit;
        self
    }

    /// Runs the probe workers on `threads` threads of their own, any of which runs any worker
    /// (default 0: on the caller's runtime).
    pub fn worker_threads(mut self, threads: usize) -> Self {
        self.config.worker_threads = threads;
        self
    }

    /// Writes pod status to the API server through `client`, owning `owned_fields`:
    /// [`OwnedFields::Kubelet`] for a host that stands in for the kubelet (a virtual-kubelet
    /// provider), [`OwnedFields::ReadinessOnly`] beside a runtime that writes the rest.
    pub fn api(mut self, client: kube::Client, owned_fields: OwnedFields) -> Self {
        self.api = Some(ApiSync { client, owned_fields });
        self
    }

    /// Changes the syncer's settings (rate limits, field manager, owned conditions, back-off)
    /// before it starts. Without [`EngineBuilder::api`] there is no syncer, and this does
    /// nothing.
    pub fn sync_settings(mut self, adjust: impl FnOnce(&mut SyncerConfig) + 'static) -> Self {
        self.sync_settings = Some(Box::new(adjust));
        self
    }

    /// Starts the engine on the current arbiter: call it inside an actix system.
    pub fn start(mut self) -> Engine {
        if self.api.is_some() && !self.runner_given {
            tracing::warn!(
                "No command runner for exec probes: this engine's pods come from the API server, so their exec probes error rather than run on this host ({NO_COMMAND_RUNNER})"
            );
            self.config.runner = Arc::new(NoCommandRunner);
        }
        let pods = self.config.pods.clone();
        let pipeline = Pipeline::start(self.config);
        let syncer = self.api.map(|api| {
            // The pipeline's: the one the statuses it writes were stamped with.
            let clock = pipeline.clock.clone();
            let mut config = SyncerConfig::new(api.client, pods, pipeline.status_manager.clone(), clock);
            config.owned_fields = api.owned_fields;
            if let Some(adjust) = self.sync_settings {
                adjust(&mut config);
            }
            start_syncer(config)
        });
        if let Some(syncer) = &syncer {
            // Once neither the engine nor a clone of its pipeline is held, nothing drives its
            // probes, and the syncer stops too (docs/sync.md §7.5).
            let prober = pipeline.prober_manager.downgrade();
            syncer.do_send(StopWhenHostGone(Box::new(move || prober.upgrade().is_none())));
        }
        Engine { pipeline, syncer }
    }
}

/// What an exec probe of an engine with an API client and no command runner errors with.
pub const NO_COMMAND_RUNNER: &str =
    "no command runner: the host embedding probelet named none for exec probes (EngineBuilder::runner)";

/// The command runner of an engine whose host named none and whose pods come from the API
/// server: every command errors, and runs nowhere.
struct NoCommandRunner;

impl CommandRunner for NoCommandRunner {
    fn run_in_container(
        &self,
        _container_id: &probelet_actors::container::ContainerId,
        _cmd: &[String],
        _timeout: std::time::Duration,
    ) -> futures::future::BoxFuture<'static, Result<probelet_actors::contracts::ExecOutput, ExecError>> {
        Box::pin(std::future::ready(Err(ExecError::Runtime(NO_COMMAND_RUNNER.to_owned()))))
    }
}

/// The running engine: the pipeline a host drives and, with an API client, the syncer that
/// writes what it computes.
#[derive(Clone)]
pub struct Engine {
    pipeline: Pipeline,
    syncer: Option<Addr<StatusSyncer>>,
}

impl Engine {
    /// A builder for an engine over the host's pods (`pods` answers lookups by UID and for
    /// mirror pods; [`probelet_actors::contracts::PodRegistry`] is a ready one). Put a pod in
    /// it before its first [`Engine::sync_pod`] and keep it there until the pod is removed: the
    /// probe results of a pod it lacks are dropped as a deleted pod's, and its status follows
    /// its probes only at its next [`Engine::sync_pod`]
    /// ([`probelet_actors::pipeline::PipelineConfig::pods`]).
    pub fn builder(pods: Arc<dyn PodLookup>) -> EngineBuilder {
        EngineBuilder {
            config: PipelineConfig::new(Arc::new(LocalCommandRunner::new()), Arc::new(LogRecorder), pods),
            runner_given: false,
            api: None,
            sync_settings: None,
        }
    }

    /// The pipeline: every message of the prober and status managers, for what
    /// [`Engine::sync_pod`] does not cover.
    pub fn pipeline(&self) -> &Pipeline {
        &self.pipeline
    }

    /// The syncer, when the engine writes to an API server.
    pub fn syncer(&self) -> Option<&Addr<StatusSyncer>> {
        self.syncer.as_ref()
    }

    /// The status half of the kubelet's `SyncPod`: makes sure the pod's probes run (or stops
    /// them once it is finished), sets `started` and `ready` on the runtime's status from the
    /// probe results, generates the kubelet's conditions (with the resize conditions set through
    /// [`Pipeline::set_pod_resize_condition`]; a finished pod's are cleared) and stores the result, which the
    /// syncer then writes. `runtime_status` is what the host's runtime knows: phase, IPs and
    /// container states. Its `conditions` are replaced: those the kubelet does not own (a
    /// readiness gate's, `DisruptionTarget`) are taken from the pod's own status, the API
    /// server's copy, as upstream's `generateAPIPodStatus` takes them; a host without an API
    /// server that sets a readiness gate's condition sets it in `pod.status`. Returns the status as the status manager stored it: with the
    /// generation it stamps, or, when it refused the update, the status it kept.
    ///
    /// A terminal phase stays: once the stored status (or the API server's copy the pod
    /// carries) says `Succeeded` or `Failed`, a runtime status with another phase (a late or
    /// stale report) keeps that phase, its reason and its message, as the kubelet's
    /// `generateAPIPodStatus` keeps it. A pod without `metadata.uid` is refused (every status
    /// and probe is kept by UID), and so is one with two containers of one name. While the pod
    /// terminates (`deletionTimestamp` set), its liveness and startup probes stop, and each
    /// running container keeps the `started` the stored status gives it: a container whose
    /// startup probe never passed does not turn started, or Ready, while it is killed. Once the
    /// pod is finished all its probes stop, and a container still running (being killed)
    /// keeps the `started` and `ready` the stored status gives it. A
    /// container instance (same ID) that the stored status, else the API server's copy, shows
    /// has that status's `started`, whether the runtime status carries one or not (a host that
    /// leaves `started` to the engine keeps it across its restart); a replacement carries
    /// neither `started` nor `ready` over, so it waits for its own startup probe
    /// (docs/prober.md §3.4).
    ///
    /// Call it when something changed (the runtime's state, a probe result the host was told
    /// of), as the kubelet syncs a pod, not on a timer: each call probes the readiness of every
    /// started container not yet ready at once (upstream's manual trigger in
    /// `UpdatePodStatus`), so a host that polls its runtime and syncs every 100 ms probes an
    /// unready container ten times a second, whatever its `periodSeconds`.
    pub async fn sync_pod(
        &self,
        pod: Arc<Pod>,
        mut runtime_status: PodStatus,
    ) -> Result<PodStatus, SyncPodError> {
        let Some(uid) = pod.metadata.uid.clone().filter(|uid| !uid.is_empty()) else {
            return Err(SyncPodError::NoUid {
                namespace: pod.metadata.namespace.clone().unwrap_or_default(),
                name: pod.metadata.name.clone().unwrap_or_default(),
            });
        };
        if let Some(container) = duplicate_container_name(&pod) {
            return Err(SyncPodError::DuplicateContainer {
                namespace: pod.metadata.namespace.clone().unwrap_or_default(),
                name: pod.metadata.name.clone().unwrap_or_default(),
                container: container.to_owned(),
            });
        }
        let deleting = pod.metadata.deletion_timestamp.is_some();
        let stored = self.pipeline.pod_status(&uid).await?;
        if !is_terminal(runtime_status.phase.as_deref()) {
            // Upstream's line says whose phase was terminal: the status manager's copy first.
            let finished = [
                (stored.as_deref(), "Status manager phase was terminal, updating phase to match"),
                (pod.status.as_ref(), "API phase was terminal, updating phase to match"),
            ]
            .into_iter()
            .find_map(|(status, line)| status.filter(|s| is_terminal(s.phase.as_deref())).map(|s| (s, line)));
            if let Some((finished, line)) = finished {
                tracing::trace!(
                    pod = probelet_actors::format::pod_ref(&pod),
                    phase = finished.phase.as_deref().unwrap_or_default(),
                    "{line}"
                );
                runtime_status.phase = finished.phase.clone();
                runtime_status.reason = finished.reason.clone();
                runtime_status.message = finished.message.clone();
            }
        }
        let terminal = is_terminal(runtime_status.phase.as_deref());
        // Upstream's `oldPodStatus` (the status manager's copy, else the API server's), read
        // before this status is stored: under RestartAllContainersOnContainerExits `Initialized`
        // stays True once it was (docs/prober.md §3.11).
        let restart_all_gate =
            self.pipeline.feature_gates.enabled(Feature::RestartAllContainersOnContainerExits);
        let old =
            restart_all_gate.then(|| stored.clone().or_else(|| pod.status.clone().map(Arc::new))).flatten();
        if terminal {
            // A finished pod is probed no more: upstream never runs SyncPod for it again.
            self.pipeline.remove_pod(pod.clone());
        } else if !deleting {
            // The workers exist before the first UpdatePodStatus, so a container with a readiness
            // probe is not reported ready before it was probed (docs/prober.md). Under
            // MutableContainerProbes the pod's probe changes are applied in place as well.
            if self.pipeline.feature_gates.enabled(Feature::MutableContainerProbes) {
                self.pipeline.reconcile_pod(pod.clone());
            } else {
                self.pipeline.add_pod(pod.clone());
            }
        }
        // A `started` handed over by container name stands only for the container the previous
        // status shows (kubernetes#141342): a replacement waits for its own startup probe.
        keep_started_only_for_the_same_container(
            &mut runtime_status,
            stored.as_deref().or(pod.status.as_ref()),
        );
        let mut status = self.pipeline.update_pod_status(pod.clone(), runtime_status).await?;
        if terminal {
            // Its workers are gone (removed above, or at an earlier finished sync) while some
            // containers may still run: what the stored status (else the API server's copy)
            // says of them stands, as no probe will say more (docs/prober.md §3.6).
            keep_started_and_ready_once_finished(
                &pod,
                &mut status,
                stored.as_deref().or(pod.status.as_ref()),
            );
        } else if deleting {
            // Liveness and startup stop at the first terminating sync: without their workers,
            // a later sync would call every running container started (and ready, without a
            // readiness probe). `started` stays what it was, as the kubelet generates the
            // status only before StopLivenessAndStartup and once the containers are dead
            // (docs/prober.md §3.6, §9). Before any stored status (the host's first sync of
            // the pod is a terminating one), the API server's copy says what was started.
            keep_started_while_terminating(&pod, &mut status, stored.as_deref().or(pod.status.as_ref()));
        }
        // Upstream `determinePodResizeStatus`: a terminal pod's resize is over.
        let resize = if terminal {
            for condition in [ResizeCondition::Pending, ResizeCondition::InProgress] {
                self.pipeline.clear_pod_resize_condition(&uid, condition).await?;
            }
            Vec::new()
        } else {
            self.pipeline.pod_resize_conditions(&uid).await?.list()
        };
        generate_kubelet_conditions_with_resize(&pod, &mut status, &resize);
        if restart_all_gate && let Some(conditions) = status.conditions.as_mut() {
            keep_initialized_once_initialized(conditions, old.as_deref());
        }
        if !terminal && !deleting {
            // ContainerLifecycleProber: the containers this status shows started or stopped
            // start or stop their probes (nothing with the gate off).
            self.pipeline.sync_container_probes(&pod, &status);
        }
        self.pipeline.set_pod_status(pod.clone(), status.clone());
        if deleting {
            // Readiness goes on through termination; liveness and startup stop.
            self.pipeline.stop_liveness_and_startup(pod);
        }
        // Read back, after the store (one mailbox, in order): the status manager stamps the
        // generation, and refuses what the kubelet's refuses (a terminated container of a
        // `Never` pod reported running again: `Status update on pod aborted`), keeping what it
        // had. The generated status would tell the host of a state nothing keeps.
        let stored = self.pipeline.pod_status(&uid).await?;
        Ok(stored.map_or(status, Arc::unwrap_or_clone))
    }

    /// The pod is gone from the host: stops its probes (upstream `RemovePod`). Its stored
    /// status goes at the next [`Pipeline::remove_orphaned_statuses`], as the kubelet's
    /// housekeeping drops it.
    pub fn remove_pod(&self, pod: Arc<Pod>) {
        self.pipeline.remove_pod(pod);
    }

    /// Hands the syncer the API server's current copy of a pod (from the host's watch or list):
    /// the merge base of the next write, so the syncer need not GET it. Without an API client
    /// this does nothing.
    pub fn api_pod_observed(&self, pod: impl Into<ApiPod>) {
        if let Some(syncer) = &self.syncer {
            syncer.do_send(ApiPodObserved(Arc::new(pod.into())));
        }
    }

    /// Hands the syncer a copy of a pod from the host's (re-)list, where
    /// [`api_pod_observed`](Self::api_pod_observed) is for the watch's events after it: a listed
    /// copy older than the one held (an etcd restored from a backup sets resourceVersions back;
    /// a list from a cache may be behind) makes the syncer read the pod again and write it at once, where a watch
    /// event that old would be ignored as stale (docs/sync.md §7.4). Without an API client this
    /// does nothing.
    pub fn api_pod_listed(&self, pod: impl Into<ApiPod>) {
        if let Some(syncer) = &self.syncer {
            syncer.do_send(ApiPodListed(Arc::new(pod.into())));
        }
    }

    /// The API server no longer has the pod (the host's watch saw it deleted). With its UID, a
    /// copy of a pod made again under the same name since is kept.
    pub fn api_pod_deleted(&self, namespace: &str, name: &str, uid: Option<&str>) {
        if let Some(syncer) = &self.syncer {
            syncer.do_send(ApiPodDeleted {
                namespace: namespace.to_owned(),
                name: name.to_owned(),
                uid: uid.map(str::to_owned),
            });
        }
    }

    /// Waits until every stored status is written (or given up on, as a version the API
    /// server rejected with 422 is): call it before the host exits. Returns at
    /// once without an API client. A write that fails for a reason that may pass (the server
    /// unreachable, a 5xx, a 429) is retried with back-off and waited for, for as long as it
    /// goes on failing: bound the wait, as the agent bounds it to 10 s on SIGTERM
    /// (`tokio::time::timeout(Duration::from_secs(10), engine.flush())`), or a shutdown while
    /// the API server is down never ends.
    pub async fn flush(&self) -> Result<(), PipelineError> {
        match &self.syncer {
            Some(syncer) => {
                syncer.send(Flush).await.map_err(|source| PipelineError { actor: "status syncer", source })
            }
            None => Ok(()),
        }
    }
}
