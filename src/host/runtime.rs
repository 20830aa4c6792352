//! The standalone agent's container runtime: every container of a pod is a local process. It
//! owns starting containers in the kubelet's order (init containers one after another, sidecars
//! kept running — the next container waits until a sidecar's startup probe has succeeded, as the
//! host reports it — then the regular containers), restarting them per the pod's restart policy
//! with the kubelet's crash-loop back-off, killing them (SIGTERM, then SIGKILL after the grace
//! period; the sidecars of a pod whose regular containers are all done for good), and the
//! container statuses the kubelet would build from the runtime's view.
//!
//! Upstream counterpart: the kubelet's `kuberuntime` manager over a CRI runtime —
//! `computePodActions` / `SyncPod` / `doBackOff` (`kuberuntime_manager.go`), `startContainer` /
//! `killContainer` (`kuberuntime_container.go`), `convertToAPIContainerStatuses`
//! (`kubelet_pods.go`), with the event texts of `pkg/kubelet/events`. What a process cannot be
//! is left out: no images, volumes, sandboxes, resources or lifecycle hooks.
//!
//! A container process runs in its own process group, so that killing the container kills
//! everything it started, as a container's PID namespace would; [`crate::process`] sends the
//! signals.

use std::collections::hash_map::RandomState;
use std::collections::{HashMap, HashSet};
use std::hash::{BuildHasher, Hasher};
use std::io;
use std::os::unix::process::ExitStatusExt;
use std::path::{Path, PathBuf};
use std::process::{ExitStatus, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use actix::prelude::*;
use futures::FutureExt as _;
use futures::future::{LocalBoxFuture, join_all};
use k8s_openapi::api::core::v1::{
    Container, ContainerState, ContainerStateRunning, ContainerStateTerminated, ContainerStateWaiting,
    ContainerStatus, Pod,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use k8s_openapi::jiff::Timestamp;
use probelet_actors::gofmt::go_quote;
use tokio::io::{AsyncBufReadExt, AsyncRead, BufReader};
use tokio::process::{Child, Command};
use tokio::sync::watch;
use tokio::time::Instant;

use crate::clock::SharedClock;
use crate::container::ContainerId;
use crate::contracts::{EventRecorder, EventType};
use crate::local_runner::{LocalCommandRunner, LocalContainer};
use crate::prober::exec::expand;
use crate::prober::grpc::go_duration;
use crate::prober::{container_reference, pod_name};
use crate::process::{Signal, signal_group, signal_group_blocking};

use super::phase::kill_grace_period;

/// The runtime type in container IDs: `probelet://<16 hex digits>`.
pub const RUNTIME_NAME: &str = "probelet";
/// A container whose `command[0]` is this runs the agent's own executable, so examples can run
/// `probelet demo-target`.
pub const SELF_COMMAND: &str = "probelet";
/// The kubelet's initial crash-loop back-off (`backOffPeriod`).
pub const DEFAULT_INITIAL_BACKOFF: Duration = Duration::from_secs(10);
/// The kubelet's longest crash-loop back-off (`MaxContainerBackOff`).
pub const DEFAULT_MAX_BACKOFF: Duration = Duration::from_secs(300);

/// Waiting reason of a container whose restart is being held back.
pub const REASON_CRASH_LOOP_BACK_OFF: &str = "CrashLoopBackOff";
/// Waiting reason of a container that could not be started.
pub const REASON_RUN_CONTAINER_ERROR: &str = "RunContainerError";
/// Waiting reason of a container not started yet, in a pod with init containers.
pub const REASON_POD_INITIALIZING: &str = "PodInitializing";
/// Waiting reason of a container not started yet, in a pod without init containers.
pub const REASON_CONTAINER_CREATING: &str = "ContainerCreating";
/// Terminated reason of a container that exited 0.
pub const REASON_COMPLETED: &str = "Completed";
/// Terminated reason of a container that exited non-zero or was killed.
pub const REASON_ERROR: &str = "Error";
/// Terminated reason of a container that could not be started and will not be retried.
pub const REASON_CONTAINER_CANNOT_RUN: &str = "ContainerCannotRun";

/// Event reasons (upstream `pkg/kubelet/events`).
pub const EVENT_CREATED: &str = "Created";
pub const EVENT_STARTED: &str = "Started";
pub const EVENT_FAILED: &str = "Failed";
pub const EVENT_KILLING: &str = "Killing";
pub const EVENT_BACK_OFF: &str = "BackOff";

/// The exit code a runtime reports for a container it could not start.
const CANNOT_RUN_EXIT_CODE: i32 = 128;
/// How long to wait for a SIGKILLed container to be reaped before giving up on it.
const KILL_WAIT: Duration = Duration::from_secs(10);
/// Longer output lines are logged in pieces of this size, so a process printing without
/// newlines cannot grow the agent's memory.
const MAX_LOG_LINE: usize = 16 * 1024;

// === messages ===

/// Make the pod's containers match its spec: init containers in order, then the regular
/// containers, restarting exited ones per the restart policy. Idempotent; sent on every pod sync.
#[derive(Debug, Clone, Message)]
#[rtype(result = "()")]
pub struct SyncPod {
    pub pod: Arc<Pod>,
    /// IDs (`probelet://…`) of the containers whose status, as the status manager has it, says
    /// `started: true`. A sidecar with a startup probe lets the next container start only once
    /// its running instance is in here (upstream waits for the startup result `Success`).
    pub started: HashSet<String>,
}

impl SyncPod {
    /// A sync that knows of no started container.
    pub fn new(pod: Arc<Pod>) -> Self {
        SyncPod { pod, started: HashSet::new() }
    }
}

/// Kill one container (SIGTERM to its process group, SIGKILL after `grace`) with a `Killing`
/// event carrying `message`. Its exit then goes through the restart policy like any other.
#[derive(Debug, Clone, Message)]
#[rtype(result = "()")]
pub struct KillContainer {
    pub pod_uid: String,
    pub container: String,
    pub message: String,
    pub grace: Duration,
}

/// Stop every container of the pod, each with `grace` (regular and init containers first, then
/// sidecars in reverse order), and never start any again. Resolves when all have exited.
#[derive(Debug, Clone, Message)]
#[rtype(result = "()")]
pub struct KillPod {
    pub pod_uid: String,
    pub grace: Duration,
}

/// Forget a pod whose containers are all stopped (a container still running is SIGKILLed).
#[derive(Debug, Clone, Message)]
#[rtype(result = "()")]
pub struct RemovePod(pub String);

/// The runtime's view of a pod's containers, as the kubelet would build container statuses.
#[derive(Debug, Clone, Message)]
#[rtype(result = "Option<RuntimePodStatus>")]
pub struct GetRuntimeStatus(pub String);

/// Container statuses in spec order. `ready` is false and `started` unset: the engine sets them.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct RuntimePodStatus {
    pub init_containers: Vec<ContainerStatus>,
    pub containers: Vec<ContainerStatus>,
}

/// Some container of the pod changed state (started, exited, back-off began or ended).
#[derive(Debug, Clone, Message)]
#[rtype(result = "()")]
pub struct RuntimeChanged {
    pub pod_uid: String,
}

/// Be told [`RuntimeChanged`] from now on.
#[derive(Message)]
#[rtype(result = "()")]
pub struct SubscribeRuntime(pub Recipient<RuntimeChanged>);

// === the actor ===

/// Runs pods' containers as local processes.
pub struct ProcessRuntime {
    /// Where started containers are registered, so exec probes run with their env and directory.
    runner: LocalCommandRunner,
    recorder: Arc<dyn EventRecorder>,
    /// Timestamps in container states.
    clock: SharedClock,
    /// First crash-loop back-off; doubles per restart up to `max_backoff`.
    initial_backoff: Duration,
    max_backoff: Duration,
    /// By pod UID.
    pods: HashMap<String, PodRuntime>,
    subscribers: Vec<Recipient<RuntimeChanged>>,
}

/// One pod's containers.
struct PodRuntime {
    /// The latest pod given by `SyncPod`.
    pod: Arc<Pod>,
    /// The started containers the latest `SyncPod` named.
    started: HashSet<String>,
    /// By container name (names are unique across init and regular containers).
    containers: HashMap<String, Slot>,
    /// Every init container has completed (or, for a sidecar, has started): regular containers
    /// may run. Never goes back.
    initialized: bool,
    /// An init container failed under restart policy `Never`: nothing more starts.
    init_failed: bool,
    /// `KillPod` was asked, or the pod has completed: nothing starts or restarts any more.
    terminating: bool,
}

/// One container of a pod, across its restarts.
struct Slot {
    /// Instances started so far; the restart count is one less.
    started: i32,
    current: Current,
    /// The terminated state of the instance before the current one (the status's `lastState`).
    last_terminated: Option<ContainerStateTerminated>,
    /// When the last instance exited or the last start failed: back-off is measured from here.
    last_event: Option<Instant>,
    backoff: Backoff,
    /// A pending restart (back-off) or retry; while set the container is not started.
    timer: Option<SpawnHandle>,
    /// A sidecar that has counted as started once: it let the next container start, and it
    /// never holds the pod's initialization back again.
    initialized: bool,
}

enum Current {
    NotStarted,
    Running(Running),
    Exited {
        id: ContainerId,
        terminated: ContainerStateTerminated,
    },
    /// The last start failed and will be retried; `id` is the previous instance's, if any.
    StartFailed {
        id: Option<ContainerId>,
        message: String,
    },
}

struct Running {
    id: ContainerId,
    /// The process group, led by the container's process.
    pgid: Option<u32>,
    started_at: Time,
    /// Set to true once the exit has been recorded; kills wait on it.
    exited: watch::Sender<bool>,
    /// A kill is under way.
    killing: bool,
}

/// What a container is to its pod.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Role {
    /// A regular init container: must exit 0 before the next one starts.
    Init,
    /// An init container with `restartPolicy: Always`: started, then kept running.
    Sidecar,
    Regular,
}

/// The pod's `restartPolicy` (`Always` when unset).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum RestartPolicy {
    Always,
    OnFailure,
    Never,
}

// === impl ProcessRuntime ===

impl ProcessRuntime {
    /// A runtime with the kubelet's back-off (10 s doubling to 300 s).
    pub fn new(runner: LocalCommandRunner, recorder: Arc<dyn EventRecorder>, clock: SharedClock) -> Self {
        ProcessRuntime {
            runner,
            recorder,
            clock,
            initial_backoff: DEFAULT_INITIAL_BACKOFF,
            max_backoff: DEFAULT_MAX_BACKOFF,
            pods: HashMap::new(),
            subscribers: Vec::new(),
        }
    }

    /// Replaces the crash-loop back-off (tests use milliseconds). A `max` below `initial` is
    /// raised to it.
    pub fn with_backoff(mut self, initial: Duration, max: Duration) -> Self {
        self.initial_backoff = initial;
        self.max_backoff = max.max(initial);
        self
    }

    fn notify(&mut self, pod_uid: &str) {
        self.subscribers.retain(|s| s.connected());
        for subscriber in &self.subscribers {
            subscriber.do_send(RuntimeChanged { pod_uid: pod_uid.to_owned() });
        }
    }

    fn record(&self, pod: &Pod, container: &Container, event_type: EventType, reason: &str, message: &str) {
        self.recorder.record(&container_reference(pod, container), event_type, reason, message);
    }

    /// Wall-clock now at the API's precision (seconds).
    fn now_time(&self) -> Time {
        let now = self.clock.now();
        Time(Timestamp::from_second(now.as_second()).unwrap_or(now))
    }

    fn slot_mut(&mut self, pod_uid: &str, name: &str) -> Option<&mut Slot> {
        self.pods.get_mut(pod_uid)?.containers.get_mut(name)
    }

    /// Upstream `computeInitContainerActions` for a sidecar: it is initialized once it runs and
    /// its startup probe, if it has one, has succeeded — then the next container may start. It
    /// stays initialized (upstream goes on from the last started init container).
    fn sidecar_initialized(&mut self, pod_uid: &str, container: &Container) -> bool {
        let Some(PodRuntime { started, containers, .. }) = self.pods.get_mut(pod_uid) else { return false };
        let Some(slot) = containers.get_mut(&container.name) else { return false };
        if !slot.initialized
            && let Current::Running(running) = &slot.current
        {
            slot.initialized = container.startup_probe.is_none() || started.contains(&running.id.to_string());
        }
        slot.initialized
    }

    fn is_running(&self, pod_uid: &str, name: &str) -> bool {
        self.pods
            .get(pod_uid)
            .and_then(|p| p.containers.get(name))
            .is_some_and(|s| matches!(s.current, Current::Running(_)))
    }

    /// The kubelet's `computePodActions` + `SyncPod`, reduced to starting what should run.
    fn reconcile(&mut self, pod_uid: &str, ctx: &mut Context<Self>) {
        let Some(state) = self.pods.get(pod_uid) else { return };
        if state.terminating || state.init_failed {
            return;
        }
        let pod = state.pod.clone();
        let Some(spec) = pod.spec.as_ref() else { return };
        let policy = RestartPolicy::of(&pod);
        let init_containers = spec.init_containers.as_deref().unwrap_or_default();

        if !state.initialized {
            for container in init_containers {
                let role = Role::of_init(container);
                if role == Role::Sidecar {
                    if !self.is_running(pod_uid, &container.name) {
                        self.try_start(pod_uid, container, role, ctx);
                    }
                    if self.sidecar_initialized(pod_uid, container) {
                        continue;
                    }
                    return;
                }
                match self.outcome(pod_uid, &container.name) {
                    Outcome::ExitedWith(0) => continue,
                    Outcome::Running => return,
                    Outcome::ExitedWith(_) | Outcome::StartFailed if policy == RestartPolicy::Never => {
                        tracing::info!(pod = %pod_name(&pod), container = %container.name, "init container failed and the pod's restart policy is Never");
                        if let Some(state) = self.pods.get_mut(pod_uid) {
                            state.init_failed = true;
                        }
                        // Upstream kills the pod: the sidecars started so far stop too.
                        self.complete(pod_uid, ctx);
                        return;
                    }
                    Outcome::ExitedWith(_) | Outcome::StartFailed | Outcome::NotStarted => {
                        self.try_start(pod_uid, container, role, ctx);
                        return;
                    }
                }
            }
            if let Some(state) = self.pods.get_mut(pod_uid) {
                state.initialized = true;
            }
        }

        for container in init_containers.iter().filter(|c| Role::of_init(c) == Role::Sidecar) {
            if !self.is_running(pod_uid, &container.name) {
                self.try_start(pod_uid, container, Role::Sidecar, ctx);
            }
        }
        for container in &spec.containers {
            let start = match self.outcome(pod_uid, &container.name) {
                Outcome::NotStarted | Outcome::StartFailed => true,
                Outcome::Running => false,
                Outcome::ExitedWith(code) => should_restart(Role::Regular, policy, code),
            };
            if start {
                self.try_start(pod_uid, container, Role::Regular, ctx);
            }
        }
        // Upstream `computePodActions`: an initialized pod with no regular container to keep
        // running or to start is killed, so that its sidecars do not keep it alive.
        let completed = !spec.containers.is_empty()
            && spec.containers.iter().all(|c| {
                matches!(self.outcome(pod_uid, &c.name),
                    Outcome::ExitedWith(code) if !should_restart(Role::Regular, policy, code))
            });
        if completed {
            self.complete(pod_uid, ctx);
        }
    }

    /// The pod will run nothing more (it completed, or an init container failed under `Never`):
    /// no restarts from now on, and its sidecars are stopped, last first.
    fn complete(&mut self, pod_uid: &str, ctx: &mut Context<Self>) {
        let Some(state) = self.pods.get_mut(pod_uid) else { return };
        if state.terminating {
            return;
        }
        state.terminating = true;
        for slot in state.containers.values_mut() {
            if let Some(timer) = slot.timer.take() {
                ctx.cancel_future(timer);
            }
        }
        let pod = state.pod.clone();
        let sidecars: Vec<String> = pod
            .spec
            .iter()
            .flat_map(|s| s.init_containers.iter().flatten())
            .filter(|c| Role::of_init(c) == Role::Sidecar && self.is_running(pod_uid, &c.name))
            .map(|c| c.name.clone())
            .collect();
        if sidecars.is_empty() {
            return;
        }
        tracing::info!(pod = %pod_name(&pod), "no regular container will run any more, stopping the sidecars");
        let grace = kill_grace_period(&pod, "", None);
        let stop = self.stop_sidecars(pod_uid.to_owned(), sidecars, grace);
        ctx.spawn(stop);
    }

    fn outcome(&self, pod_uid: &str, name: &str) -> Outcome {
        match self.pods.get(pod_uid).and_then(|p| p.containers.get(name)).map(|s| &s.current) {
            None | Some(Current::NotStarted) => Outcome::NotStarted,
            Some(Current::Running(_)) => Outcome::Running,
            Some(Current::Exited { terminated, .. }) => Outcome::ExitedWith(terminated.exit_code),
            Some(Current::StartFailed { .. }) => Outcome::StartFailed,
        }
    }

    /// Starts the container unless a restart is pending or it is backing off (upstream
    /// `doBackOff`: in back-off since the last exit → wait, with a `BackOff` event; otherwise
    /// the back-off grows and the container starts now).
    fn try_start(&mut self, pod_uid: &str, container: &Container, role: Role, ctx: &mut Context<Self>) {
        let (initial, max) = (self.initial_backoff, self.max_backoff);
        let Some(state) = self.pods.get_mut(pod_uid) else { return };
        let pod = state.pod.clone();
        let slot = state.containers.entry(container.name.clone()).or_insert_with(|| Slot::new(initial, max));
        if slot.timer.is_some() || matches!(slot.current, Current::Running(_)) {
            return;
        }
        if let Some(event) = slot.last_event {
            let now = Instant::now();
            if let Some(remaining) = slot.backoff.remaining_since(event, now) {
                let message = format!(
                    "Back-off restarting failed container {} in pod {}",
                    container.name,
                    pod_name(&pod)
                );
                tracing::debug!(pod = %pod_name(&pod), container = %container.name, ?remaining, "container is backing off");
                self.schedule_retry(pod_uid, &container.name, remaining, ctx);
                self.record(&pod, container, EventType::Warning, EVENT_BACK_OFF, &message);
                self.notify(pod_uid);
                return;
            }
            slot.backoff.next(event, now);
        }
        self.start_container(pod_uid, &pod, container, role, ctx);
    }

    fn schedule_retry(&mut self, pod_uid: &str, name: &str, delay: Duration, ctx: &mut Context<Self>) {
        let (uid, container) = (pod_uid.to_owned(), name.to_owned());
        let handle = ctx.run_later(delay, move |act, ctx| {
            if let Some(slot) = act.slot_mut(&uid, &container) {
                slot.timer = None;
            }
            act.reconcile(&uid, ctx);
        });
        if let Some(slot) = self.slot_mut(pod_uid, name) {
            slot.timer = Some(handle);
        }
    }

    /// Upstream `startContainer`: `Created`, then `Started` or `Failed`.
    fn start_container(
        &mut self,
        pod_uid: &str,
        pod: &Arc<Pod>,
        container: &Container,
        role: Role,
        ctx: &mut Context<Self>,
    ) {
        let launch = Launch::of(container);
        for name in &launch.skipped {
            tracing::warn!(pod = %pod_name(pod), container = %container.name, env = %name, "env valueFrom is not supported by the local runtime, variable not set");
        }
        if container.env_from.as_ref().is_some_and(|e| !e.is_empty()) {
            tracing::warn!(pod = %pod_name(pod), container = %container.name, "envFrom is not supported by the local runtime, ignored");
        }
        let id = new_container_id();
        self.record(
            pod,
            container,
            EventType::Normal,
            EVENT_CREATED,
            &format!("Created container: {}", container.name),
        );
        match launch.spawn() {
            Ok(child) => self.container_started(pod_uid, pod, container, id, launch, child, ctx),
            Err(message) => {
                tracing::warn!(pod = %pod_name(pod), container = %container.name, error = %message, "cannot start container");
                self.record(pod, container, EventType::Warning, EVENT_FAILED, &format!("Error: {message}"));
                let retry = should_restart(role, RestartPolicy::of(pod), CANNOT_RUN_EXIT_CODE);
                let finished_at = self.now_time();
                let Some(slot) = self.slot_mut(pod_uid, &container.name) else { return };
                slot.last_event = Some(Instant::now());
                let previous = match std::mem::replace(&mut slot.current, Current::NotStarted) {
                    Current::Exited { id, terminated } => {
                        slot.last_terminated = Some(terminated);
                        Some(id)
                    }
                    Current::StartFailed { id, .. } => id,
                    Current::NotStarted | Current::Running(_) => None,
                };
                if retry {
                    slot.current = Current::StartFailed { id: previous, message };
                    // Through the timer, not recursively: the back-off decides when.
                    self.schedule_retry(pod_uid, &container.name, Duration::ZERO, ctx);
                } else {
                    // What a CRI runtime reports for a created container that could not run.
                    slot.started += 1;
                    slot.current = Current::Exited {
                        terminated: ContainerStateTerminated {
                            exit_code: CANNOT_RUN_EXIT_CODE,
                            reason: Some(REASON_CONTAINER_CANNOT_RUN.to_owned()),
                            message: Some(message),
                            finished_at: Some(finished_at),
                            container_id: Some(id.to_string()),
                            ..Default::default()
                        },
                        id,
                    };
                }
                self.notify(pod_uid);
            }
        }
    }

    #[allow(clippy::too_many_arguments)]
    fn container_started(
        &mut self,
        pod_uid: &str,
        pod: &Arc<Pod>,
        container: &Container,
        id: ContainerId,
        launch: Launch,
        mut child: Child,
        ctx: &mut Context<Self>,
    ) {
        let pgid = child.id();
        let pod_label = pod_name(pod);
        if let Some(stdout) = child.stdout.take() {
            tokio::spawn(forward_output(stdout, pod_label.clone(), container.name.clone()));
        }
        if let Some(stderr) = child.stderr.take() {
            tokio::spawn(forward_output(stderr, pod_label.clone(), container.name.clone()));
        }
        self.runner.register(
            id.clone(),
            LocalContainer { working_dir: launch.working_dir.clone(), env: launch.env.clone() },
        );
        let started_at = self.now_time();
        let Some(slot) = self.slot_mut(pod_uid, &container.name) else { return };
        if let Current::Exited { terminated, .. } = std::mem::replace(&mut slot.current, Current::NotStarted)
        {
            slot.last_terminated = Some(terminated);
        }
        slot.started += 1;
        slot.current = Current::Running(Running {
            id: id.clone(),
            pgid,
            started_at,
            exited: watch::channel(false).0,
            killing: false,
        });
        tracing::info!(pod = %pod_label, container = %container.name, container_id = %id, ?pgid, "container started");
        self.record(
            pod,
            container,
            EventType::Normal,
            EVENT_STARTED,
            &format!("Started container {}", container.name),
        );

        let (uid, name) = (pod_uid.to_owned(), container.name.clone());
        let guard = ProcessGuard { child, pgid };
        ctx.spawn(
            guard
                .wait()
                .into_actor(self)
                .map(move |status, act, ctx| act.container_exited(&uid, &name, &id, status, ctx)),
        );
        self.notify(pod_uid);
    }

    fn container_exited(
        &mut self,
        pod_uid: &str,
        name: &str,
        id: &ContainerId,
        status: io::Result<ExitStatus>,
        ctx: &mut Context<Self>,
    ) {
        self.runner.unregister(id);
        let finished_at = self.now_time();
        let Some(slot) = self.slot_mut(pod_uid, name) else { return };
        let Current::Running(running) = std::mem::replace(&mut slot.current, Current::NotStarted) else {
            return;
        };
        let (exit_code, signal, message) = match status {
            Ok(status) => (exit_code(status), status.signal(), None),
            Err(e) => (-1, None, Some(format!("cannot wait for the container's process: {e}"))),
        };
        tracing::info!(pod_uid, container = %name, container_id = %id, exit_code, ?signal, "container exited");
        slot.current = Current::Exited {
            id: running.id.clone(),
            terminated: ContainerStateTerminated {
                exit_code,
                signal,
                reason: Some(if exit_code == 0 { REASON_COMPLETED } else { REASON_ERROR }.to_owned()),
                message,
                started_at: Some(running.started_at.clone()),
                finished_at: Some(finished_at),
                container_id: Some(running.id.to_string()),
            },
        };
        slot.last_event = Some(Instant::now());
        running.exited.send_replace(true);
        self.notify(pod_uid);
        self.reconcile(pod_uid, ctx);
    }

    /// Upstream `killContainer`: the `Killing` event, then TERM and KILL after the grace period.
    /// `None` when the container is not running; a container already being killed is only
    /// waited for.
    fn begin_stop(
        &mut self,
        pod_uid: &str,
        name: &str,
        message: Option<&str>,
        grace: Duration,
    ) -> Option<LocalBoxFuture<'static, ()>> {
        let state = self.pods.get_mut(pod_uid)?;
        let pod = state.pod.clone();
        let Current::Running(running) = &mut state.containers.get_mut(name)?.current else { return None };
        let exited = running.exited.subscribe();
        if running.killing {
            return Some(wait_exited(exited, None).boxed_local());
        }
        running.killing = true;
        let pgid = running.pgid;
        let message = message.map_or_else(|| format!("Stopping container {name}"), str::to_owned);
        if let Some(container) = find_container(&pod, name) {
            self.record(&pod, container, EventType::Normal, EVENT_KILLING, &message);
        }
        tracing::info!(pod = %pod_name(&pod), container = %name, ?grace, "killing container");
        Some(stop_process(pgid, grace, exited).boxed_local())
    }

    /// Stops the named sidecars one after another, last first.
    fn stop_sidecars(
        &mut self,
        pod_uid: String,
        mut names: Vec<String>,
        grace: Duration,
    ) -> ResponseActFuture<Self, ()> {
        let Some(name) = names.pop() else { return Box::pin(actix::fut::ready(())) };
        let stop = self.begin_stop(&pod_uid, &name, None, grace);
        Box::pin(
            async move {
                if let Some(stop) = stop {
                    stop.await;
                }
            }
            .into_actor(self)
            .then(move |(), act, _| act.stop_sidecars(pod_uid, names, grace)),
        )
    }

    fn pod_status(state: &PodRuntime) -> RuntimePodStatus {
        let Some(spec) = state.pod.spec.as_ref() else { return RuntimePodStatus::default() };
        let init_containers = spec.init_containers.as_deref().unwrap_or_default();
        // As `convertToAPIContainerStatuses`: with init containers every container not created
        // yet is `PodInitializing`.
        let default_reason =
            if init_containers.is_empty() { REASON_CONTAINER_CREATING } else { REASON_POD_INITIALIZING };
        let status =
            |c: &Container| container_status(&state.pod, c, state.containers.get(&c.name), default_reason);
        RuntimePodStatus {
            init_containers: init_containers.iter().map(status).collect(),
            containers: spec.containers.iter().map(status).collect(),
        }
    }
}

/// What became of a container's latest instance, as the start decisions need it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Outcome {
    NotStarted,
    Running,
    ExitedWith(i32),
    StartFailed,
}

impl Actor for ProcessRuntime {
    type Context = Context<Self>;
}

impl Handler<SyncPod> for ProcessRuntime {
    type Result = ();

    fn handle(&mut self, SyncPod { pod, started }: SyncPod, ctx: &mut Context<Self>) {
        let Some(uid) = pod.metadata.uid.clone() else {
            tracing::warn!(
                pod = pod.metadata.name.as_deref().unwrap_or_default(),
                "pod without a UID, not started"
            );
            return;
        };
        let state = self.pods.entry(uid.clone()).or_insert_with(|| PodRuntime::new(pod.clone()));
        state.pod = pod;
        state.started = started;
        self.reconcile(&uid, ctx);
    }
}

impl Handler<KillContainer> for ProcessRuntime {
    type Result = ();

    fn handle(&mut self, msg: KillContainer, ctx: &mut Context<Self>) {
        match self.begin_stop(&msg.pod_uid, &msg.container, Some(&msg.message), msg.grace) {
            Some(stop) => {
                ctx.spawn(stop.into_actor(self));
            }
            None => {
                tracing::debug!(pod_uid = %msg.pod_uid, container = %msg.container, "kill asked for a container that is not running")
            }
        }
    }
}

impl Handler<KillPod> for ProcessRuntime {
    type Result = ResponseActFuture<Self, ()>;

    fn handle(&mut self, KillPod { pod_uid, grace }: KillPod, ctx: &mut Context<Self>) -> Self::Result {
        let Some(state) = self.pods.get_mut(&pod_uid) else { return Box::pin(actix::fut::ready(())) };
        state.terminating = true;
        for slot in state.containers.values_mut() {
            if let Some(timer) = slot.timer.take() {
                ctx.cancel_future(timer);
            }
        }
        let pod = state.pod.clone();
        let (init_containers, containers) = pod
            .spec
            .as_ref()
            .map(|s| (s.init_containers.as_deref().unwrap_or_default(), s.containers.as_slice()))
            .unwrap_or_default();
        let sidecars: Vec<String> = init_containers
            .iter()
            .filter(|c| Role::of_init(c) == Role::Sidecar)
            .map(|c| c.name.clone())
            .collect();
        let first: Vec<_> = init_containers
            .iter()
            .filter(|c| Role::of_init(c) == Role::Init)
            .chain(containers)
            .filter_map(|c| self.begin_stop(&pod_uid, &c.name, None, grace))
            .collect();
        self.notify(&pod_uid);
        Box::pin(
            join_all(first)
                .into_actor(self)
                .then(move |_, act, _| act.stop_sidecars(pod_uid, sidecars, grace)),
        )
    }
}

impl Handler<RemovePod> for ProcessRuntime {
    type Result = ();

    fn handle(&mut self, RemovePod(pod_uid): RemovePod, ctx: &mut Context<Self>) {
        let Some(state) = self.pods.remove(&pod_uid) else { return };
        for (name, slot) in state.containers {
            if let Some(timer) = slot.timer {
                ctx.cancel_future(timer);
            }
            if let Current::Running(running) = slot.current {
                tracing::warn!(pod_uid, container = %name, "removing a pod whose container still runs, killing it");
                if let Some(pgid) = running.pgid {
                    ctx.spawn(signal_group(pgid, Signal::Kill).into_actor(self));
                }
            }
        }
    }
}

impl Handler<GetRuntimeStatus> for ProcessRuntime {
    type Result = Option<RuntimePodStatus>;

    fn handle(&mut self, GetRuntimeStatus(pod_uid): GetRuntimeStatus, _: &mut Context<Self>) -> Self::Result {
        self.pods.get(&pod_uid).map(Self::pod_status)
    }
}

impl Handler<SubscribeRuntime> for ProcessRuntime {
    type Result = ();

    fn handle(&mut self, SubscribeRuntime(recipient): SubscribeRuntime, _: &mut Context<Self>) {
        self.subscribers.push(recipient);
    }
}

// === impl PodRuntime, Slot, Role, RestartPolicy ===

impl PodRuntime {
    fn new(pod: Arc<Pod>) -> Self {
        PodRuntime {
            pod,
            started: HashSet::new(),
            containers: HashMap::new(),
            initialized: false,
            init_failed: false,
            terminating: false,
        }
    }
}

impl Slot {
    fn new(initial_backoff: Duration, max_backoff: Duration) -> Self {
        Slot {
            started: 0,
            current: Current::NotStarted,
            last_terminated: None,
            last_event: None,
            backoff: Backoff::new(initial_backoff, max_backoff),
            timer: None,
            initialized: false,
        }
    }
}

impl Role {
    fn of_init(container: &Container) -> Role {
        if crate::status::is_restartable_init_container(container) { Role::Sidecar } else { Role::Init }
    }
}

impl RestartPolicy {
    fn of(pod: &Pod) -> Self {
        match pod.spec.as_ref().and_then(|s| s.restart_policy.as_deref()) {
            Some("OnFailure") => RestartPolicy::OnFailure,
            Some("Never") => RestartPolicy::Never,
            _ => RestartPolicy::Always,
        }
    }
}

/// Whether a container that ended with `exit_code` starts again (upstream
/// `ShouldContainerBeRestarted` and the init-container rules): sidecars always; an init
/// container only after a failure and unless the policy is `Never`; a regular container per
/// the policy.
fn should_restart(role: Role, policy: RestartPolicy, exit_code: i32) -> bool {
    match (role, policy) {
        (Role::Sidecar, _) => true,
        (Role::Init, RestartPolicy::Never) => false,
        (Role::Init, _) => exit_code != 0,
        (Role::Regular, RestartPolicy::Always) => true,
        (Role::Regular, RestartPolicy::OnFailure) => exit_code != 0,
        (Role::Regular, RestartPolicy::Never) => false,
    }
}

fn find_container<'a>(pod: &'a Pod, name: &str) -> Option<&'a Container> {
    let spec = pod.spec.as_ref()?;
    spec.init_containers.iter().flatten().chain(&spec.containers).find(|c| c.name == name)
}

/// One container's status as the kubelet builds it from the runtime's view.
fn container_status(
    pod: &Pod,
    container: &Container,
    slot: Option<&Slot>,
    default_reason: &str,
) -> ContainerStatus {
    let mut status = ContainerStatus {
        name: container.name.clone(),
        image: container.image.clone().unwrap_or_default(),
        image_id: String::new(),
        ready: false,
        started: None,
        state: Some(waiting(default_reason, None)),
        last_state: Some(ContainerState::default()),
        ..Default::default()
    };
    let Some(slot) = slot else { return status };
    status.restart_count = (slot.started - 1).max(0);
    let last_terminated = || terminated_state(slot.last_terminated.clone());
    match &slot.current {
        Current::NotStarted => {}
        Current::Running(running) => {
            status.container_id = Some(running.id.to_string());
            status.state = Some(ContainerState {
                running: Some(ContainerStateRunning { started_at: Some(running.started_at.clone()) }),
                ..Default::default()
            });
            status.last_state = Some(last_terminated());
        }
        Current::Exited { id, terminated } => {
            status.container_id = Some(id.to_string());
            match (slot.timer.is_some(), slot.backoff.current()) {
                (true, Some(backoff)) => {
                    let message = format!(
                        "back-off {} restarting failed container={} pod={}",
                        go_duration(backoff),
                        container.name,
                        pod_name(pod)
                    );
                    status.state = Some(waiting(REASON_CRASH_LOOP_BACK_OFF, Some(message)));
                    status.last_state = Some(terminated_state(Some(terminated.clone())));
                }
                _ => {
                    status.state = Some(terminated_state(Some(terminated.clone())));
                    status.last_state = Some(last_terminated());
                }
            }
        }
        Current::StartFailed { id, message } => {
            status.container_id = id.as_ref().map(ToString::to_string);
            status.state = Some(waiting(REASON_RUN_CONTAINER_ERROR, Some(message.clone())));
            status.last_state = Some(last_terminated());
        }
    }
    status
}

fn waiting(reason: &str, message: Option<String>) -> ContainerState {
    ContainerState {
        waiting: Some(ContainerStateWaiting { reason: Some(reason.to_owned()), message }),
        ..Default::default()
    }
}

fn terminated_state(terminated: Option<ContainerStateTerminated>) -> ContainerState {
    ContainerState { terminated, ..Default::default() }
}

// === back-off ===

/// One container's crash-loop back-off: upstream `flowcontrol.Backoff` for one key, without
/// jitter (the kubelet uses none). The back-off grows each time the container is started after
/// an exit and starts over when the container ran longer than twice the maximum since its last
/// start (the kubelet's "ran for 10 minutes").
#[derive(Debug, Clone)]
struct Backoff {
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
    fn new(initial: Duration, max: Duration) -> Self {
        Backoff { initial, max, entry: None }
    }

    /// The back-off in force, once there is one.
    fn current(&self) -> Option<Duration> {
        self.entry.map(|e| e.backoff)
    }

    /// Upstream `IsInBackOffSince`: how long the container must still wait after an exit at
    /// `event`, or `None` if it may start now.
    fn remaining_since(&self, event: Instant, now: Instant) -> Option<Duration> {
        let entry = self.entry?;
        if self.has_expired(event, entry.last_update) {
            return None;
        }
        let elapsed = now.saturating_duration_since(event);
        (elapsed < entry.backoff).then(|| entry.backoff - elapsed)
    }

    /// Upstream `Next`: the container starts now after an exit at `event`; the next back-off
    /// doubles, or starts over if the entry has expired.
    fn next(&mut self, event: Instant, now: Instant) {
        let backoff = match self.entry {
            Some(entry) if !self.has_expired(event, entry.last_update) => {
                entry.backoff.saturating_mul(2).min(self.max)
            }
            _ => self.initial,
        };
        self.entry = Some(BackoffEntry { backoff, last_update: now });
    }

    fn has_expired(&self, event: Instant, last_update: Instant) -> bool {
        event.saturating_duration_since(last_update) > self.max.saturating_mul(2)
    }
}

// === launching a process ===

/// What a container's process is started with.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Launch {
    argv: Vec<String>,
    env: Vec<(String, String)>,
    working_dir: Option<PathBuf>,
    /// Variables left out because they come from `valueFrom`.
    skipped: Vec<String>,
}

impl Launch {
    /// Upstream `makeEnvironmentVariables` (literal values, each expanded against the ones
    /// before it) and `ExpandContainerCommandAndArgs`. With no image there is no entrypoint:
    /// the process is `command` followed by `args`.
    fn of(container: &Container) -> Self {
        let mut env: Vec<(String, String)> = Vec::new();
        let mut skipped = Vec::new();
        for var in container.env.iter().flatten() {
            if var.value_from.is_some() {
                skipped.push(var.name.clone());
                continue;
            }
            let value = expand(var.value.as_deref().unwrap_or_default(), |name| lookup(&env, name));
            env.push((var.name.clone(), value));
        }
        let argv = container
            .command
            .iter()
            .flatten()
            .chain(container.args.iter().flatten())
            .map(|arg| expand(arg, |name| lookup(&env, name)))
            .collect();
        let working_dir = container.working_dir.as_deref().filter(|d| !d.is_empty()).map(PathBuf::from);
        Launch { argv, env, working_dir, skipped }
    }

    /// Spawns the process in its own group; the error is the text the status and event show.
    fn spawn(&self) -> Result<Child, String> {
        let Some((program, args)) = self.argv.split_first() else {
            return Err("no command specified".to_owned());
        };
        let executable = if program == SELF_COMMAND {
            std::env::current_exe().map_err(|e| format!("exec: {}: {e}", go_quote(program)))?
        } else {
            PathBuf::from(program)
        };
        let mut command = Command::new(&executable);
        command
            .args(args)
            .envs(self.env.iter().map(|(name, value)| (name, value)))
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .kill_on_drop(true)
            .process_group(0);
        if let Some(dir) = &self.working_dir {
            // Checked first: spawn reports a missing directory as a missing executable.
            check_working_dir(dir)?;
            command.current_dir(dir);
        }
        command.spawn().map_err(|e| spawn_error_text(program, &e))
    }
}

/// The last value of `name` defined so far (a later definition overrides an earlier one).
fn lookup<'a>(env: &'a [(String, String)], name: &str) -> Option<&'a str> {
    env.iter().rev().find(|(n, _)| n == name).map(|(_, v)| v.as_str())
}

fn check_working_dir(dir: &Path) -> Result<(), String> {
    let problem = match std::fs::metadata(dir) {
        Ok(meta) if meta.is_dir() => return Ok(()),
        Ok(_) => "not a directory".to_owned(),
        Err(e) if e.kind() == io::ErrorKind::NotFound => "no such file or directory".to_owned(),
        Err(e) => e.to_string(),
    };
    Err(format!("chdir to cwd ({}) set in config.json failed: {problem}", go_quote(&dir.to_string_lossy())))
}

/// The start error as a runtime reports it (runc's `exec: "<name>": …` wording).
fn spawn_error_text(program: &str, e: &io::Error) -> String {
    let quoted = go_quote(program);
    match e.kind() {
        io::ErrorKind::NotFound if !program.contains('/') => {
            format!("exec: {quoted}: executable file not found in $PATH")
        }
        io::ErrorKind::NotFound => format!("exec: {quoted}: stat {program}: no such file or directory"),
        io::ErrorKind::PermissionDenied => format!("exec: {quoted}: permission denied"),
        _ => format!("exec: {quoted}: {e}"),
    }
}

/// A fresh `probelet://<16 hex digits>` container ID.
fn new_container_id() -> ContainerId {
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    // `RandomState` is seeded randomly, so IDs differ across agent runs as well.
    let mut hasher = RandomState::new().build_hasher();
    hasher.write_u64(COUNTER.fetch_add(1, Ordering::Relaxed));
    hasher.write_u32(std::process::id());
    ContainerId::new(RUNTIME_NAME, format!("{:016x}", hasher.finish()))
}

/// The exit code as a shell reports it: 128 + the signal for a killed process.
fn exit_code(status: ExitStatus) -> i32 {
    status.code().or_else(|| status.signal().map(|signal| 128 + signal)).unwrap_or(-1)
}

/// Logs a process's output line by line as it comes, so the pipe never fills up.
async fn forward_output(pipe: impl AsyncRead + Unpin, pod: String, container: String) {
    let mut reader = BufReader::with_capacity(MAX_LOG_LINE, pipe);
    let mut line = Vec::new();
    loop {
        let (taken, complete) = match reader.fill_buf().await {
            Ok(buf) if !buf.is_empty() => {
                let (taken, complete) = match buf.iter().position(|&b| b == b'\n') {
                    Some(at) => (at + 1, true),
                    None => (buf.len(), false),
                };
                line.extend_from_slice(&buf[..taken]);
                (taken, complete)
            }
            _ => break,
        };
        reader.consume(taken);
        if complete || line.len() >= MAX_LOG_LINE {
            log_line(&pod, &container, &line);
            line.clear();
        }
    }
    if !line.is_empty() {
        log_line(&pod, &container, &line);
    }
}

fn log_line(pod: &str, container: &str, line: &[u8]) {
    let text = String::from_utf8_lossy(line);
    let text = text.strip_suffix('\n').unwrap_or(&text);
    let text = text.strip_suffix('\r').unwrap_or(text);
    tracing::info!(pod, container, "{text}");
}

// === stopping a process ===

/// The container's process. Until its exit is seen, dropping it (the agent shutting down)
/// kills the whole group.
struct ProcessGuard {
    child: Child,
    /// The group to kill; the child's PID, as it leads its own group.
    pgid: Option<u32>,
}

impl ProcessGuard {
    /// Waits for the process to exit, then kills what it left in its group: a container's
    /// processes end with its main process.
    async fn wait(mut self) -> io::Result<ExitStatus> {
        let status = self.child.wait().await;
        if let Some(pgid) = self.pgid.take() {
            signal_group(pgid, Signal::Kill).await;
        }
        status
    }
}

impl Drop for ProcessGuard {
    fn drop(&mut self) {
        if let Some(pgid) = self.pgid.take() {
            signal_group_blocking(pgid, Signal::Kill);
        }
    }
}

/// SIGTERM to the group, SIGKILL once `grace` has passed without the exit being recorded.
async fn stop_process(pgid: Option<u32>, grace: Duration, exited: watch::Receiver<bool>) {
    if *exited.borrow() {
        return;
    }
    if let Some(pgid) = pgid {
        signal_group(pgid, Signal::Term).await;
    }
    let mut exited = exited;
    if tokio::time::timeout(grace, exited.wait_for(|e| *e)).await.is_ok() {
        return;
    }
    if let Some(pgid) = pgid {
        tracing::info!(pgid, ?grace, "container did not stop within its grace period, sending SIGKILL");
        signal_group(pgid, Signal::Kill).await;
    }
    wait_exited(exited, Some(KILL_WAIT)).await;
}

async fn wait_exited(mut exited: watch::Receiver<bool>, bound: Option<Duration>) {
    let wait = exited.wait_for(|e| *e);
    match bound {
        Some(bound) => {
            if tokio::time::timeout(bound, wait).await.is_err() {
                tracing::warn!(?bound, "killed container has not exited yet");
            }
        }
        // An error means the runtime is gone, and the process with it.
        None => {
            let _ = wait.await;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::{EnvVar, EnvVarSource, ObjectFieldSelector};

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

    #[test]
    fn restart_rules_follow_the_kubelet() {
        use RestartPolicy::*;
        let cases = [
            (Role::Regular, Always, 0, true),
            (Role::Regular, Always, 1, true),
            (Role::Regular, OnFailure, 0, false),
            (Role::Regular, OnFailure, 1, true),
            (Role::Regular, Never, 1, false),
            (Role::Init, Always, 1, true),
            (Role::Init, OnFailure, 1, true),
            (Role::Init, Never, 1, false),
            (Role::Init, Always, 0, false),
            (Role::Sidecar, Never, 0, true),
            (Role::Sidecar, Never, 1, true),
        ];
        for (role, policy, code, want) in cases {
            assert_eq!(should_restart(role, policy, code), want, "{role:?} {policy:?} exit {code}");
        }
    }

    #[test]
    fn expands_like_upstream() {
        let env = vec![("A".to_owned(), "a".to_owned()), ("B".to_owned(), "b".to_owned())];
        let cases = [
            ("$(A)", "a"),
            ("x$(A)y$(B)z", "xaybz"),
            ("$(MISSING)", "$(MISSING)"),
            ("$$(A)", "$(A)"),
            ("$$", "$"),
            ("$", "$"),
            ("a$", "a$"),
            ("$A", "$A"),
            ("$(A", "$(A"),
            ("$()", "$()"),
            ("$é$(A)", "$éa"),
            ("no refs", "no refs"),
        ];
        for (input, want) in cases {
            assert_eq!(expand(input, |name| lookup(&env, name)), want, "{input:?}");
        }
    }

    #[test]
    fn launch_uses_literal_env_expanded_in_order() {
        let var = |name: &str, value: &str| EnvVar {
            name: name.into(),
            value: Some(value.into()),
            ..Default::default()
        };
        let container = Container {
            name: "app".into(),
            command: Some(vec!["sh".into(), "-c".into()]),
            args: Some(vec!["echo $(FOO) $(LATER) $HOME".into()]),
            env: Some(vec![
                var("FOO", "foo"),
                var("BAR", "$(FOO)-bar-$(LATER)"),
                EnvVar {
                    name: "NODE".into(),
                    value_from: Some(EnvVarSource {
                        field_ref: Some(ObjectFieldSelector {
                            field_path: "spec.nodeName".into(),
                            ..Default::default()
                        }),
                        ..Default::default()
                    }),
                    ..Default::default()
                },
                var("LATER", "later"),
            ]),
            working_dir: Some("/tmp".into()),
            ..Default::default()
        };
        let launch = Launch::of(&container);
        assert_eq!(launch.argv, ["sh", "-c", "echo foo later $HOME"]);
        assert_eq!(
            launch.env,
            [("FOO", "foo"), ("BAR", "foo-bar-$(LATER)"), ("LATER", "later")]
                .map(|(n, v)| (n.to_owned(), v.to_owned()))
        );
        assert_eq!(launch.skipped, ["NODE"]);
        assert_eq!(launch.working_dir, Some(PathBuf::from("/tmp")));
    }

    #[test]
    fn start_errors_read_like_runc() {
        let not_found = io::Error::from(io::ErrorKind::NotFound);
        assert_eq!(
            spawn_error_text("nope", &not_found),
            r#"exec: "nope": executable file not found in $PATH"#
        );
        assert_eq!(
            spawn_error_text("/x/nope", &not_found),
            r#"exec: "/x/nope": stat /x/nope: no such file or directory"#
        );
        let denied = io::Error::from(io::ErrorKind::PermissionDenied);
        assert_eq!(spawn_error_text("/etc/passwd", &denied), r#"exec: "/etc/passwd": permission denied"#);
        assert_eq!(
            check_working_dir(Path::new("/no/such/dir")),
            Err(r#"chdir to cwd ("/no/such/dir") set in config.json failed: no such file or directory"#
                .to_owned())
        );
        assert_eq!(Launch::of(&Container::default()).spawn().err().as_deref(), Some("no command specified"));
    }

    #[test]
    fn container_ids_are_fresh_and_typed() {
        let (a, b) = (new_container_id(), new_container_id());
        assert_ne!(a, b);
        assert_eq!(a.runtime, "probelet");
        assert_eq!(a.id.len(), 16);
        assert!(a.id.chars().all(|c| c.is_ascii_hexdigit()));
    }

    #[test]
    fn reports_signals_as_a_shell_does() {
        assert_eq!(exit_code(ExitStatus::from_raw(3 << 8)), 3);
        assert_eq!(exit_code(ExitStatus::from_raw(9)), 137);
        assert_eq!(exit_code(ExitStatus::from_raw(15)), 143);
    }

    #[test]
    fn unstarted_containers_wait_with_the_default_reason() {
        let pod = Pod::default();
        let container = Container { name: "app".into(), image: Some("img".into()), ..Default::default() };
        let status = container_status(&pod, &container, None, REASON_POD_INITIALIZING);
        assert_eq!(status.name, "app");
        assert_eq!(status.image, "img");
        assert_eq!(status.restart_count, 0);
        assert_eq!(status.container_id, None);
        assert_eq!(status.state, Some(waiting(REASON_POD_INITIALIZING, None)));
        assert_eq!(status.last_state, Some(ContainerState::default()));
        assert!(!status.ready);
        assert_eq!(status.started, None);
    }
}
