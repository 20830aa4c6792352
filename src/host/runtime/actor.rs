//! The runtime actor and its messages: it decides what starts, restarts and stops, and keeps
//! each pod's [`PodRuntime`]; launching and stopping processes, the back-off and the status
//! conversion live in the sibling modules.

use std::collections::{HashMap, HashSet};
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use actix::prelude::*;
use futures::FutureExt as _;
use futures::future::{LocalBoxFuture, join_all};
use k8s_openapi::api::core::v1::{Container, ContainerStatus, Pod};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use k8s_openapi::jiff::Timestamp;
use tokio::time::Instant;

use crate::clock::SharedClock;
use crate::contracts::{EventRecorder, EventType};
use crate::local_runner::LocalCommandRunner;
use crate::prober::{container_reference, pod_name};
use crate::process::Signal;
use probelet_actors::capacity::ShrinkAfterRemoval;
use probelet_actors::container::ContainerId;
use probelet_actors::format::pod_ref;
use probelet_actors::{Feature, FeatureGates};

use super::super::phase::{MAXIMUM_GRACE_PERIOD, MINIMUM_GRACE_PERIOD, kill_grace_period};
use super::budget::FdBudget;
use super::groups::ContainerGroups;
use super::oom::{OomKills, READING_EVERY, VMSTAT};
use super::output::NodeReadBudget;
use super::state::{
    Current, InstanceOutcome, PodRuntime, RESTART_ALL_MIN_INTERVAL, RestartAll, RestartRules, Role, Slot,
    find_container, pod_status,
};
use super::stop::{Signaller, stop_deadline, stop_process, wait_exited};
use super::{
    DEFAULT_INITIAL_BACKOFF, DEFAULT_MAX_BACKOFF, EVENT_KILLING, MESSAGE_KILLING_FOR_RESTART_ALL,
    RESYNC_INTERVAL, START_TURN_TIME, STARTS_PER_TURN,
};
use probelet_actors::vocabulary::PodUid;

mod start;

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
    /// A sync of the pod the runtime cannot see happen, as the kubelet counts them: a probe's
    /// result changed (upstream `handleProbeSync`). Every container of the pod in crash-loop
    /// back-off records `BackOff` again, and the back-off's requeue counts from now. `false`:
    /// the host converging the pod after a change the runtime told it of, or at its own resync;
    /// the runtime counts the syncs of its own events (a container's exit, failed start or
    /// start, the requeue) itself, and passes over a container backing off
    /// (docs/reliability.md, "A `BackOff` at each resync of a long wait").
    pub kubelet_sync: bool,
}

impl SyncPod {
    /// A sync that knows of no started container, and is not one of the kubelet's own.
    pub fn new(pod: Arc<Pod>) -> Self {
        SyncPod { pod, started: HashSet::new(), kubelet_sync: false }
    }
}

/// Whether converging a pod is a sync of it as the kubelet counts them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Pass {
    /// A sync: upstream `SyncPod`, which runs `doBackOff` for every container it would start.
    /// Each one backing off records `BackOff`, and the pod's requeue is armed afresh for the
    /// earliest back-off's end, at most [`RESYNC_INTERVAL`] from now.
    Sync,
    /// Starts what may start and passes over a container backing off: no event, the requeue
    /// left as it is (armed only if none is).
    Quiet,
}

/// Kill one container (SIGTERM to its process group, SIGKILL after `grace`) with a `Killing`
/// event carrying `message`. Its exit then goes through the restart policy like any other,
/// unless `restart`.
#[derive(Debug, Clone, Message)]
#[rtype(result = "()")]
pub struct KillContainer {
    pub pod_uid: PodUid,
    pub container: String,
    /// Only this instance: a kill asked for one instance must not stop the next (a probe's
    /// failure reported after its container was already replaced). `None`: whichever runs.
    pub container_id: Option<ContainerId>,
    pub message: String,
    pub grace: Duration,
    /// Start it again once it has exited, whatever its exit code, unless its restart policy
    /// (the pod's, or under `ContainerRestartRules` its own) is `Never`: upstream
    /// `computePodActions` for a failed liveness or startup probe,
    /// so that under `OnFailure` a container that exits 0 on SIGTERM is restarted, not
    /// counted as completed.
    pub restart: bool,
}

/// Stop every container of the pod (regular and init containers first, with `grace`, then
/// sidecars in reverse order, each with what is left of `grace`, at least 2 s), and never start
/// any again. Resolves when all have exited.
#[derive(Debug, Clone, Message)]
#[rtype(result = "()")]
pub struct KillPod {
    pub pod_uid: PodUid,
    pub grace: Duration,
}

/// Forget a pod whose containers are all stopped (a container still running is SIGKILLed).
#[derive(Debug, Clone, Message)]
#[rtype(result = "()")]
pub struct ForgetPod(pub PodUid);

/// The runtime's view of a pod's containers, as the kubelet would build container statuses.
#[derive(Debug, Clone, Message)]
#[rtype(result = "Option<RuntimePodStatus>")]
pub struct GetRuntimeStatus(pub PodUid);

/// Container statuses in spec order. `ready` is false and `started` unset: the engine sets them.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct RuntimePodStatus {
    pub init_containers: Vec<ContainerStatus>,
    pub containers: Vec<ContainerStatus>,
    /// The containers the runtime has (neither removed nor never started), init containers
    /// first, each with its exit code if its latest instance has exited: what
    /// `AllContainersRestarting` is generated from (KEP-5532).
    pub in_runtime: Vec<(String, Option<i32>)>,
}

/// Some container of the pod changed state (started, exited, back-off began or ended).
#[derive(Debug, Clone, Message)]
#[rtype(result = "()")]
pub struct RuntimeChanged {
    pub pod_uid: PodUid,
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
    pods: HashMap<PodUid, PodRuntime>,
    subscribers: Vec<Recipient<RuntimeChanged>>,
    /// Pods changed since subscribers were last told.
    changed: HashSet<PodUid>,
    signaller: Signaller,
    /// How many containers may run at once, so that probes and the listener keep descriptors.
    budget: FdBudget,
    /// The groups of the running containers, for a forced shutdown.
    groups: ContainerGroups,
    /// The agent binary that runs each container under `container-shim`; `None`: containers
    /// are spawned directly (an embedder without the binary), and what leaves their process
    /// group is not killed with them.
    shim: Option<PathBuf>,
    /// Containers started in this turn of the thread and when the first one began (see
    /// `STARTS_PER_TURN`); `Some` once the first one has, and the next turn is then asked for.
    starts_this_turn: Option<(usize, Instant)>,
    /// Pods with starts this turn had no room for, to reconcile in the next turn.
    deferred: Vec<PodUid>,
    /// `ContainerRestartRules`: containers' own restart policies and rules count.
    container_restart_rules: bool,
    /// `RestartAllContainersOnContainerExits` (with `ContainerRestartRules`): an exit a
    /// container's rules answer with `RestartAllContainers` restarts the whole pod in place.
    restart_all_containers: bool,
    /// The read rate all the containers' output streams share, so that many flooding
    /// containers cost the agent no more than a few would.
    output_budget: NodeReadBudget,
    /// The kernel's OOM kill count, to tell an OOM-killed container from another SIGKILL.
    oom_kills: OomKills,
    /// Whether the next reading of the count is scheduled.
    oom_reading_due: bool,
}

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
            changed: HashSet::new(),
            signaller: Signaller::default(),
            budget: FdBudget::unlimited(),
            groups: ContainerGroups::new(),
            shim: None,
            starts_this_turn: None,
            deferred: Vec::new(),
            container_restart_rules: FeatureGates::default().enabled(Feature::ContainerRestartRules),
            restart_all_containers: false,
            output_budget: NodeReadBudget::new(),
            oom_kills: OomKills::new(VMSTAT),
            oom_reading_due: false,
        }
    }

    /// Reads the kernel's OOM kill count from `source` rather than `/proc/vmstat`: a file of
    /// `key value` lines with one `oom_kill N`, such as a cgroup v2 `memory.events` of a host
    /// that runs its containers in a cgroup of their own, where the count is theirs alone.
    /// A container that dies of a SIGKILL the runtime did not send, within a second or two of
    /// the count going up, reads `OOMKilled` (`oom.rs` says what it cannot tell).
    pub fn with_oom_kill_count(mut self, source: impl Into<PathBuf>) -> Self {
        self.oom_kills = OomKills::new(source);
        self
    }

    /// The runtime under these feature gates instead of the kubelet's defaults: under
    /// `ContainerRestartRules` a container's own restart policy and rules decide its restarts;
    /// with `RestartAllContainersOnContainerExits` too, a rule may restart the whole pod.
    pub fn with_feature_gates(mut self, gates: &FeatureGates) -> Self {
        self.container_restart_rules = gates.enabled(Feature::ContainerRestartRules);
        self.restart_all_containers =
            self.container_restart_rules && gates.enabled(Feature::RestartAllContainersOnContainerExits);
        self
    }

    /// Whether this turn of the thread has room for another start: fewer than
    /// `STARTS_PER_TURN`, begun less than `START_TURN_TIME` ago (a start's cost varies: a
    /// filesystem slow to create the state record, thousands of descriptors for the child to
    /// close). If not, the pod is reconciled in the next turn.
    fn turn_has_room(&mut self, pod_uid: &str) -> bool {
        if self.starts_this_turn.is_none_or(|(starts, since)| {
            starts < STARTS_PER_TURN && Instant::now().saturating_duration_since(since) < START_TURN_TIME
        }) {
            return true;
        }
        if !self.deferred.iter().any(|uid| uid.as_str() == pod_uid) {
            self.deferred.push(pod_uid.into());
        }
        false
    }

    /// Counts a start in this turn of the thread. The first one asks for the next turn, which
    /// resets the count and reconciles the deferred pods. It is awaited with `yield_now`, which
    /// lets every other task on the thread (the listener, the probes) run first; a zero timer
    /// would not, as tokio may fire it in the same poll.
    fn count_start(&mut self, ctx: &mut Context<Self>) {
        let starts = match &mut self.starts_this_turn {
            Some(starts) => starts,
            None => {
                ctx.spawn(actix::fut::wrap_future(tokio::task::yield_now()).map(
                    |(), act: &mut Self, ctx| {
                        act.starts_this_turn = None;
                        for uid in std::mem::take(&mut act.deferred) {
                            act.reconcile(&uid, Pass::Quiet, ctx);
                        }
                    },
                ));
                self.starts_this_turn.insert((0, Instant::now()))
            }
        };
        starts.0 += 1;
    }

    /// Runs every container under the container shim of the agent binary at `program`
    /// (`probelet container-shim`; the agent passes its own executable): a container's
    /// processes then end with it even when they left its process group, and a start is
    /// recorded in the state directory before anything runs.
    pub fn with_shim(mut self, program: impl Into<PathBuf>) -> Self {
        self.shim = Some(program.into());
        self
    }

    /// Replaces the crash-loop back-off (tests use milliseconds). A `max` below `initial` is
    /// raised to it.
    pub fn with_backoff(mut self, initial: Duration, max: Duration) -> Self {
        self.initial_backoff = initial;
        self.max_backoff = max.max(initial);
        self
    }

    /// Replaces how process groups are signalled (tests make kills fail with it).
    pub fn with_signaller(mut self, signaller: Signaller) -> Self {
        self.signaller = signaller;
        self
    }

    /// Limits how many containers run at once (the agent sizes it from its RLIMIT_NOFILE).
    pub fn with_fd_budget(mut self, budget: FdBudget) -> Self {
        self.budget = budget;
        self
    }

    /// Lists the running containers' groups in `groups` (the agent keeps a clone to kill them
    /// all on a forced shutdown). With a state directory, a container whose record is refused
    /// does not start, with the shim or without ([`ContainerGroups::add`]): without it, the
    /// program spawned is killed, its whole group, before any `Created`.
    pub fn with_groups(mut self, groups: ContainerGroups) -> Self {
        self.groups = groups;
        self
    }

    /// Tells subscribers the pod changed, once per turn of the actor however many of its
    /// containers changed: one sync starting a thousand containers is one [`RuntimeChanged`],
    /// so the host regenerates the pod's status once.
    fn notify(&mut self, pod_uid: &str, ctx: &mut Context<Self>) {
        if self.changed.is_empty() {
            ctx.run_later(Duration::ZERO, |act, _| act.flush_changes());
        }
        if !self.changed.contains(pod_uid) {
            self.changed.insert(pod_uid.into());
        }
    }

    fn flush_changes(&mut self) {
        self.subscribers.retain(|s| s.connected());
        for pod_uid in self.changed.drain() {
            for subscriber in &self.subscribers {
                subscriber.do_send(RuntimeChanged { pod_uid: pod_uid.clone() });
            }
        }
        self.changed.shrink_after_removal();
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
            .is_some_and(|s| matches!(s.current, Current::Running(_) | Current::Starting(_)))
    }

    /// A sync of the pod in the next turn, for a container's exit, failed start or start: the
    /// kubelet syncs a pod at each such change its runtime reports (PLEG), and its pod worker
    /// folds the changes that come while it is busy into one sync, as one turn's changes are
    /// one here. While a start of the pod is under way (its shim's report not read yet) the
    /// sync waits for it, and the last report of a batch of starts makes one sync: the
    /// kubelet sees a batch's outcomes in one relist of the runtime, and a sync per report
    /// would record `BackOff` for every container backing off at each, a pod of a thousand
    /// containers some half a million events at its start (docs/reliability.md, "A `BackOff`
    /// at each resync of a long wait").
    pub(super) fn sync_soon(&mut self, pod_uid: &str, ctx: &mut Context<Self>) {
        let Some(state) = self.pods.get_mut(pod_uid) else { return };
        state.sync_due = true;
        if state.starting() || std::mem::replace(&mut state.sync_scheduled, true) {
            return;
        }
        let uid = PodUid::from(pod_uid);
        ctx.run_later(Duration::ZERO, move |act, ctx| {
            // A pod forgotten meanwhile (or forgotten and synced afresh under its UID, which
            // owes no sync yet) is not this sync's.
            let Some(state) = act.pods.get_mut(&uid) else { return };
            state.sync_scheduled = false;
            // A start begun since waits for its report, which syncs the pod.
            if state.sync_due && !state.starting() {
                state.sync_due = false;
                act.reconcile(&uid, Pass::Sync, ctx);
            }
        });
    }

    /// The kubelet's `computePodActions` + `SyncPod`, reduced to starting what should run;
    /// under [`Pass::Sync`] with its `doBackOff` for every container backing off, and its pod
    /// worker's requeue for the earliest back-off's end (docs/reliability.md, "A `BackOff` at
    /// each resync of a long wait").
    fn reconcile(&mut self, pod_uid: &str, pass: Pass, ctx: &mut Context<Self>) {
        let Some(state) = self.pods.get(pod_uid) else { return };
        if state.terminating || state.init_failed || state.restart_all.is_some() {
            return;
        }
        // Upstream `computePodActions` under `RestartAllContainersOnContainerExits`: a
        // container that exited by a `RestartAllContainers` rule restarts the whole pod, before
        // any other decision (its own restart, the pod's completion, a failed init container).
        // It begins once the host has read the exit (`GetRuntimeStatus`), so that the status
        // it stores says the pod is restarting all its containers.
        if self.restart_all_containers && state.restart_all_due() {
            return;
        }
        if let Some(state) = self.pods.get_mut(pod_uid) {
            state.back_off_left = None;
        }
        self.start_what_should_run(pod_uid, pass, ctx);
        self.requeue(pod_uid, pass, ctx);
    }

    /// Upstream `completeWork` after a sync: a sync that found a container backing off is
    /// requeued for the earliest back-off's end, clamped to the resync interval, replacing
    /// the pod's earlier requeue (its work queue holds one entry per pod); one that found none
    /// leaves the pod to the host's resync. A [`Pass::Quiet`] keeps a pending requeue, and
    /// arms one only if none is pending, so that a container backing off always has a sync
    /// coming by its back-off's end.
    fn requeue(&mut self, pod_uid: &str, pass: Pass, ctx: &mut Context<Self>) {
        let Some(state) = self.pods.get_mut(pod_uid) else { return };
        let left = state.back_off_left.take();
        if state.terminating || (pass == Pass::Quiet && state.requeue.is_some()) {
            return;
        }
        if let Some(pending) = state.requeue.take() {
            ctx.cancel_future(pending);
        }
        let Some(left) = left else { return };
        let uid = PodUid::from(pod_uid);
        let requeue = ctx.run_later(left.min(RESYNC_INTERVAL), move |act, ctx| {
            if let Some(state) = act.pods.get_mut(&uid) {
                state.requeue = None;
            }
            act.reconcile(&uid, Pass::Sync, ctx);
        });
        if let Some(state) = self.pods.get_mut(pod_uid) {
            state.requeue = Some(requeue);
        }
    }

    /// The starting half of [`Self::reconcile`]: init containers in order, sidecars, then the
    /// regular containers.
    fn start_what_should_run(&mut self, pod_uid: &str, pass: Pass, ctx: &mut Context<Self>) {
        let Some(state) = self.pods.get(pod_uid) else { return };
        let pod = state.pod.clone();
        let Some(spec) = pod.spec.as_ref() else { return };
        let rules = RestartRules { spec, container_rules: self.container_restart_rules };
        let init_containers = spec.init_containers.as_deref().unwrap_or_default();

        // The pass that initializes the pod has gone over every sidecar in its init loop: a
        // second look would record `BackOff` twice for one backing off in one sync.
        let just_initialized = !state.initialized;
        if just_initialized {
            for container in init_containers {
                let role = Role::of_init(container);
                if role == Role::Sidecar {
                    if !self.is_running(pod_uid, &container.name) {
                        self.try_start(pod_uid, container, role, pass, ctx);
                    }
                    if self.sidecar_initialized(pod_uid, container) {
                        continue;
                    }
                    return;
                }
                let failed_with = match self.outcome(pod_uid, &container.name) {
                    InstanceOutcome::ExitedWith(0) => continue,
                    InstanceOutcome::Running => return,
                    InstanceOutcome::NotStarted => None,
                    InstanceOutcome::ExitedWith(code) => Some(code),
                    // A container that could not start reads as exit code 128, as the CRI's
                    // `StartError` does.
                    InstanceOutcome::StartFailed => Some(start::START_ERROR_EXIT_CODE),
                };
                if let Some(code) = failed_with
                    && !rules.after_exit(Role::Init, container, code)
                {
                    tracing::info!(pod = %pod_ref(&pod), container = %container.name, "init container failed and will not be restarted");
                    if let Some(state) = self.pods.get_mut(pod_uid) {
                        state.init_failed = true;
                    }
                    // Upstream kills the pod: the sidecars started so far stop too.
                    self.complete(pod_uid, ctx);
                    return;
                }
                self.try_start(pod_uid, container, role, pass, ctx);
                return;
            }
            if let Some(state) = self.pods.get_mut(pod_uid) {
                state.initialized = true;
            }
        }

        for container in
            init_containers.iter().filter(|c| !just_initialized && Role::of_init(c) == Role::Sidecar)
        {
            if !self.is_running(pod_uid, &container.name) {
                self.try_start(pod_uid, container, Role::Sidecar, pass, ctx);
            }
        }
        // A container a probe killed restarts whatever its exit code, unless its policy says never.
        let restarts = |act: &Self, container: &Container, code: i32| {
            rules.after_exit(Role::Regular, container, code)
                || (rules.after_probe_kill(container)
                    && act
                        .pods
                        .get(pod_uid)
                        .and_then(|p| p.containers.get(&container.name))
                        .is_some_and(|s| s.restart_owed))
        };
        for container in &spec.containers {
            let start = match self.outcome(pod_uid, &container.name) {
                InstanceOutcome::NotStarted | InstanceOutcome::StartFailed => true,
                InstanceOutcome::Running => false,
                InstanceOutcome::ExitedWith(code) => restarts(self, container, code),
            };
            if start {
                self.try_start(pod_uid, container, Role::Regular, pass, ctx);
            }
        }
        // Upstream `computePodActions`: an initialized pod with no regular container to keep
        // running or to start is killed, so that its sidecars do not keep it alive.
        let completed = !spec.containers.is_empty()
            && spec.containers.iter().all(|c| {
                matches!(self.outcome(pod_uid, &c.name),
                    InstanceOutcome::ExitedWith(code) if !restarts(self, c, code))
            });
        if completed {
            self.complete(pod_uid, ctx);
        }
    }

    /// Upstream `SyncPod` for a pod restarting all its containers: the running containers are
    /// killed one after another — the regular containers, then the init containers, in spec
    /// order — each with the `Killing` message `killing` and no grace period (the kubelet's 2 s
    /// minimum) and waited for before the next; then every container is removed and the pod
    /// starts again from its first init container, in the same sandbox. Nothing starts
    /// meanwhile (docs/prober.md §3.11).
    fn begin_restart_all(&mut self, pod_uid: &str, ctx: &mut Context<Self>) {
        let Some(state) = self.pods.get_mut(pod_uid) else { return };
        if state.terminating || state.restart_all != Some(RestartAll::Seen) {
            return;
        }
        for timer in state.take_timers() {
            ctx.cancel_future(timer);
        }
        state.restart_all = Some(RestartAll::Killing);
        state.restart_all_began = Some(tokio::time::Instant::now());
        tracing::info!(pod = %pod_ref(&state.pod), "a container exited by a RestartAllContainers rule, restarting all containers");
        self.notify(pod_uid, ctx);
        self.restart_all_step(pod_uid.into(), ctx);
    }

    /// Kills the next container that runs and waits for it, then the next, until nothing runs
    /// (a kill that failed is tried again): only then are the containers removed, so that no
    /// container ever has two instances.
    fn restart_all_step(&mut self, pod_uid: PodUid, ctx: &mut Context<Self>) {
        let Some(state) = self.pods.get(&pod_uid) else { return };
        // A pod being stopped for good is the termination's now; it removes nothing.
        if state.terminating || state.restart_all != Some(RestartAll::Killing) {
            return;
        }
        if let Some(name) = state.next_to_kill_for_restart_all()
            && let Some(stop) =
                self.begin_stop(&pod_uid, &name, Some(MESSAGE_KILLING_FOR_RESTART_ALL), MINIMUM_GRACE_PERIOD)
        {
            ctx.spawn(stop.into_actor(self).map(move |(), act, ctx| act.restart_all_step(pod_uid, ctx)));
            return;
        }
        let Some(state) = self.pods.get_mut(&pod_uid) else { return };
        for timer in state.remove_all() {
            ctx.cancel_future(timer);
        }
        tracing::info!(pod = %pod_ref(&state.pod), "all containers removed, starting the pod again");
        self.notify(&pod_uid, ctx);
    }

    /// The pod will run nothing more (it completed, or an init container failed under `Never`):
    /// no restarts from now on, and its sidecars are stopped, last first.
    fn complete(&mut self, pod_uid: &str, ctx: &mut Context<Self>) {
        let Some(state) = self.pods.get_mut(pod_uid) else { return };
        if state.terminating {
            return;
        }
        for timer in state.begin_terminating() {
            ctx.cancel_future(timer);
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
        tracing::info!(pod = %pod_ref(&pod), "no regular container will run any more, stopping the sidecars");
        let grace = kill_grace_period(&pod, "", None);
        let stop = self.stop_sidecars(pod_uid.into(), sidecars, grace, Instant::now());
        ctx.spawn(stop);
    }

    fn outcome(&self, pod_uid: &str, name: &str) -> InstanceOutcome {
        match self.pods.get(pod_uid).and_then(|p| p.containers.get(name)).map(|s| &s.current) {
            None | Some(Current::NotStarted | Current::Removed { .. }) => InstanceOutcome::NotStarted,
            // A start under way blocks what comes after it, as a running container does.
            Some(Current::Running(_) | Current::Starting(_)) => InstanceOutcome::Running,
            Some(Current::Exited { terminated, .. }) => InstanceOutcome::ExitedWith(terminated.exit_code),
            Some(Current::StartFailed { .. }) => InstanceOutcome::StartFailed,
        }
    }

    /// Upstream `killContainer`: the `Killing` event, then TERM and KILL after the grace period.
    /// `None` when the container is not running; a container already being killed is only
    /// waited for, until that kill's deadline. A kill past its deadline failed: the container
    /// still runs, so it is killed again.
    fn begin_stop(
        &mut self,
        pod_uid: &str,
        name: &str,
        message: Option<&str>,
        grace: Duration,
    ) -> Option<LocalBoxFuture<'static, ()>> {
        let state = self.pods.get_mut(pod_uid)?;
        let pod = state.pod.clone();
        let (Current::Running(running) | Current::Starting(running)) =
            &mut state.containers.get_mut(name)?.current
        else {
            return None;
        };
        let exited = running.exited.subscribe();
        let now = Instant::now();
        if let Some(deadline) = running.killing.filter(|deadline| *deadline > now) {
            return Some(wait_exited(exited, deadline).map(drop).boxed_local());
        }
        // Saturating: a host may ask for any grace period, and a deadline past the clock's
        // range is as good as none.
        running.killing = Some(now.checked_add(stop_deadline(grace)).unwrap_or(now + MAXIMUM_GRACE_PERIOD));
        let (pgid, shimmed) = (running.pgid, running.shimmed);
        let message = message.map_or_else(|| format!("Stopping container {name}"), str::to_owned);
        if let Some(container) = find_container(&pod, name) {
            self.record(&pod, container, EventType::Normal, EVENT_KILLING, &message);
        }
        tracing::debug!(pod = %pod_ref(&pod), container = %name, ?grace, "killing container");
        let (pod_label, name) = (pod_name(&pod), name.to_owned());
        let stop = stop_process(self.signaller.clone(), self.groups.clone(), pgid, shimmed, grace, exited);
        Some(
            async move {
                if !stop.await {
                    tracing::warn!(pod = %pod_label, container = %name, "container could not be stopped, it still runs");
                }
            }
            .boxed_local(),
        )
    }

    /// Stops the named sidecars one after another, last first. Each gets what is left of
    /// `grace` since the termination `began` (upstream's `waitForTurn`), never less than
    /// [`MINIMUM_GRACE_PERIOD`] (nor than `grace` itself, when it is shorter).
    fn stop_sidecars(
        &mut self,
        pod_uid: PodUid,
        mut names: Vec<String>,
        grace: Duration,
        began: Instant,
    ) -> ResponseActFuture<Self, ()> {
        let Some(name) = names.pop() else { return Box::pin(actix::fut::ready(())) };
        let left = grace.saturating_sub(began.elapsed()).max(grace.min(MINIMUM_GRACE_PERIOD));
        let stop = self.begin_stop(&pod_uid, &name, None, left);
        Box::pin(
            async move {
                if let Some(stop) = stop {
                    stop.await;
                }
            }
            .into_actor(self)
            .then(move |(), act, _| act.stop_sidecars(pod_uid, names, grace, began)),
        )
    }
}

impl Actor for ProcessRuntime {
    type Context = Context<Self>;
}

impl ProcessRuntime {
    /// Reads the kernel's OOM kill count every second while the runtime has pods, and not
    /// otherwise: a runtime whose addresses are all gone and that runs nothing then stops.
    fn read_oom_kills_while_pods(&mut self, ctx: &mut Context<Self>) {
        if self.oom_reading_due || self.pods.is_empty() {
            return;
        }
        self.oom_reading_due = true;
        ctx.run_later(READING_EVERY, |act, ctx| {
            act.oom_reading_due = false;
            act.oom_kills.read();
            act.read_oom_kills_while_pods(ctx);
        });
    }
}

impl Handler<SyncPod> for ProcessRuntime {
    type Result = ();

    fn handle(&mut self, SyncPod { pod, started, kubelet_sync }: SyncPod, ctx: &mut Context<Self>) {
        let Some(uid) = PodUid::of(&pod) else {
            tracing::warn!(
                pod = %pod_ref(&pod),
                "pod without a UID, not started"
            );
            return;
        };
        self.groups.note_grace_period(kill_grace_period(&pod, "", None));
        let state = self.pods.entry(uid.clone()).or_insert_with(|| PodRuntime::new(pod.clone()));
        state.pod = pod;
        state.started = started;
        self.read_oom_kills_while_pods(ctx);
        let pass = if kubelet_sync { Pass::Sync } else { Pass::Quiet };
        self.reconcile(&uid, pass, ctx);
    }
}

impl Handler<KillContainer> for ProcessRuntime {
    type Result = ();

    fn handle(&mut self, msg: KillContainer, ctx: &mut Context<Self>) {
        // Upstream's sync of a pod restarting all its containers kills them by that restart
        // alone, in its order and with its grace (docs/prober.md §3.11 step 2): a probe's
        // failure is not read in it, and after it names an instance that is gone.
        if let Some(state) = self.pods.get(&msg.pod_uid)
            && !state.terminating
            && matches!(state.restart_all, Some(RestartAll::Seen | RestartAll::Killing))
        {
            tracing::debug!(pod_uid = %msg.pod_uid, container = %msg.container, "kill asked for a container of a pod restarting all its containers: the restart kills it");
            return;
        }
        let Some(slot) = self.slot_mut(&msg.pod_uid, &msg.container) else { return };
        let (Current::Running(running) | Current::Starting(running)) = &slot.current else {
            tracing::debug!(pod_uid = %msg.pod_uid, container = %msg.container, "kill asked for a container that is not running");
            return;
        };
        if msg.container_id.as_ref().is_some_and(|id| *id != running.id) {
            tracing::debug!(pod_uid = %msg.pod_uid, container = %msg.container, "kill asked for an instance that is no longer running");
            return;
        }
        if msg.restart {
            slot.restart_owed = true;
        }
        // Running, as just checked: it has a stop.
        if let Some(stop) = self.begin_stop(&msg.pod_uid, &msg.container, Some(&msg.message), msg.grace) {
            ctx.spawn(stop.into_actor(self));
        }
    }
}

impl Handler<KillPod> for ProcessRuntime {
    type Result = ResponseActFuture<Self, ()>;

    fn handle(&mut self, KillPod { pod_uid, grace }: KillPod, ctx: &mut Context<Self>) -> Self::Result {
        let began = Instant::now();
        let Some(state) = self.pods.get_mut(&pod_uid) else { return Box::pin(actix::fut::ready(())) };
        for timer in state.begin_terminating() {
            ctx.cancel_future(timer);
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
        self.notify(&pod_uid, ctx);
        Box::pin(
            join_all(first)
                .into_actor(self)
                .then(move |_, act, _| act.stop_sidecars(pod_uid, sidecars, grace, began)),
        )
    }
}

impl Handler<ForgetPod> for ProcessRuntime {
    type Result = ();

    fn handle(&mut self, ForgetPod(pod_uid): ForgetPod, ctx: &mut Context<Self>) {
        let Some(state) = self.pods.remove(&pod_uid) else { return };
        self.pods.shrink_after_removal();
        for timer in state.held_back.into_iter().chain(state.requeue) {
            ctx.cancel_future(timer);
        }
        for (name, slot) in state.containers {
            if let Some(timer) = slot.timer {
                ctx.cancel_future(timer);
            }
            if let Current::Running(running) | Current::Starting(running) = slot.current {
                tracing::warn!(pod_uid = pod_uid.as_str(), container = %name, "removing a pod whose container still runs, killing it");
                if let Some(pgid) = running.pgid {
                    // A shim kills its whole tree, and its exit then the group (`ProcessGuard`);
                    // a SIGKILL to the group would kill the shim before it could.
                    if running.shimmed {
                        self.signaller.kill_tree(&self.groups, pgid);
                    } else {
                        self.signaller.send(&self.groups, pgid, Signal::Kill);
                    }
                }
            }
        }
    }
}

impl Handler<GetRuntimeStatus> for ProcessRuntime {
    type Result = Option<RuntimePodStatus>;

    fn handle(
        &mut self,
        GetRuntimeStatus(pod_uid): GetRuntimeStatus,
        ctx: &mut Context<Self>,
    ) -> Self::Result {
        let restart_all_containers = self.restart_all_containers;
        let state = self.pods.get_mut(&pod_uid)?;
        // While the containers are killed the host reads what it read when the restart began:
        // upstream generates no status between the one that says the pod is restarting all its
        // containers and the one after they are all removed.
        let status = match (&state.restart_all, &state.restart_all_seen) {
            (Some(RestartAll::Seen | RestartAll::Killing), Some(seen)) if !state.terminating => seen.clone(),
            _ => pod_status(state),
        };
        match state.restart_all {
            // The host has read the exit that restarts every container: the restart begins.
            None if restart_all_containers && !state.terminating && state.restart_all_due() => {
                state.restart_all = Some(RestartAll::Seen);
                state.restart_all_seen = Some(status.clone());
                let wait = state.restart_all_began.map_or(Duration::ZERO, |began| {
                    (began + RESTART_ALL_MIN_INTERVAL).saturating_duration_since(tokio::time::Instant::now())
                });
                ctx.run_later(wait, move |act, ctx| act.begin_restart_all(&pod_uid, ctx));
            }
            // The host has read the pod with every container removed: the status it stores
            // says the restart is cleaned up, and the pod may start again.
            Some(RestartAll::Removed) => {
                state.restart_all = None;
                ctx.run_later(Duration::ZERO, move |act, ctx| act.reconcile(&pod_uid, Pass::Sync, ctx));
            }
            _ => {}
        }
        Some(status)
    }
}

impl Handler<SubscribeRuntime> for ProcessRuntime {
    type Result = ();

    fn handle(&mut self, SubscribeRuntime(recipient): SubscribeRuntime, _: &mut Context<Self>) {
        self.subscribers.push(recipient);
    }
}
