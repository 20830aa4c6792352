//! A pod's containers as the runtime tracks them, the kubelet's restart rules and the container
//! statuses built from them: plain data and functions, no actor.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;
use std::time::Duration;

use actix::SpawnHandle;
use k8s_openapi::api::core::v1::{
    Container, ContainerState, ContainerStateRunning, ContainerStateTerminated, ContainerStateWaiting,
    ContainerStatus, Pod, PodSpec,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use tokio::sync::watch;
use tokio::time::Instant;

use crate::container::ContainerId;
use crate::prober::grpc::go_duration;
use crate::prober::pod_name;
use probelet_actors::restart::{
    InRuntime, Policy, container_should_restart, containers_to_remove, restarts_after_probe_kill,
    restarts_all_containers,
};

use super::actor::RuntimePodStatus;
use super::backoff::Backoff;
use super::{
    EXIT_CODE_RESTARTING_ALL_CONTAINERS, MESSAGE_RESTARTING_ALL_CONTAINERS, REASON_CONTAINER_CREATING,
    REASON_CRASH_LOOP_BACK_OFF, REASON_CREATE_CONTAINER_CONFIG_ERROR, REASON_POD_INITIALIZING,
    REASON_RESTARTING_ALL_CONTAINERS, REASON_RUN_CONTAINER_ERROR,
};

/// One pod's containers.
pub(super) struct PodRuntime {
    /// The latest pod given by `SyncPod`.
    pub(super) pod: Arc<Pod>,
    /// The started containers the latest `SyncPod` named.
    pub(super) started: HashSet<String>,
    /// By container name (names are unique across init and regular containers).
    pub(super) containers: HashMap<String, Slot>,
    /// Every init container has completed (or, for a sidecar, has started): regular containers
    /// may run. Never goes back.
    pub(super) initialized: bool,
    /// An init container failed under restart policy `Never`: nothing more starts.
    pub(super) init_failed: bool,
    /// `KillPod` was asked, or the pod has completed: nothing starts or restarts any more.
    pub(super) terminating: bool,
    /// The retry of the starts the descriptor budget held back (one for the whole pod).
    pub(super) held_back: Option<SpawnHandle>,
    /// The next sync of a pod whose last sync found a container in crash-loop back-off: the
    /// kubelet's pod worker requeues such a sync for the earliest back-off's end, but never
    /// later than the resync interval, and one entry per pod, which each sync replaces
    /// (docs/reliability.md, "A `BackOff` at each resync of a long wait").
    pub(super) requeue: Option<SpawnHandle>,
    /// While the runtime converges the pod: the shortest wait left of its containers found
    /// backing off, what the requeue is armed with.
    pub(super) back_off_left: Option<Duration>,
    /// A sync of the pod is owed for a container's exit, failed start or start (the kubelet's
    /// pod lifecycle events): in the next turn, or once no start of the pod is under way.
    pub(super) sync_due: bool,
    /// The turn that runs the owed sync is asked for.
    pub(super) sync_scheduled: bool,
    /// A restart of all the pod's containers is under way (`RestartAllContainersOnContainerExits`):
    /// nothing starts until it is done.
    pub(super) restart_all: Option<RestartAll>,
    /// When the last restart of all the pod's containers began: the next begins
    /// [`RESTART_ALL_MIN_INTERVAL`] later at the earliest.
    pub(super) restart_all_began: Option<Instant>,
    /// The status the host read when it saw the exit that restarts every container: what the
    /// runtime shows until the containers are removed (upstream generates no status while its
    /// sync kills and removes them), and what the removal reads as each container's last status.
    pub(super) restart_all_seen: Option<RuntimePodStatus>,
}

/// The shortest time between the beginnings of two restarts of all a pod's containers. Upstream
/// has no back-off there, but its cycle is paced by the kubelet's container-state poll (PLEG,
/// a relist every second), which sees each exit; probelet sees an exit at once, and an init
/// container that always exits by its rule would otherwise restart the pod as fast as processes
/// start, with events, status writes and console lines at that rate (docs/prober.md §3.11).
pub(super) const RESTART_ALL_MIN_INTERVAL: Duration = Duration::from_secs(1);

/// Where a restart of all a pod's containers is (upstream: `AllContainersRestarting` True while
/// the kubelet kills and removes every container, False once the runtime has none, then the
/// pod's ordinary start).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum RestartAll {
    /// A container exited by a `RestartAllContainers` rule and the host has read that status:
    /// the kills begin (upstream generates the pod's status, `AllContainersRestarting` True,
    /// before its sync acts on the exit).
    Seen,
    /// The running containers are being killed.
    Killing,
    /// Every container is removed; the pod starts again from its first init container once
    /// the host has read the runtime's status in this state, so that the status it stores
    /// shows the restart cleaned up (`AllContainersRestarting` False) before anything runs.
    Removed,
}

/// One container of a pod, across its restarts.
pub(super) struct Slot {
    /// Instances started so far; the restart count is one less. A restart of all containers
    /// sets it to the count it shows (`Current::Removed`), which the next start then keeps.
    pub(super) started: i32,
    pub(super) current: Current,
    /// The terminated state of the instance before the current one (the status's `lastState`).
    pub(super) last_terminated: Option<ContainerStateTerminated>,
    /// When the last instance exited or the last start failed: back-off is measured from here.
    pub(super) last_event: Option<Instant>,
    pub(super) backoff: Backoff,
    /// A pending retry of a start the agent could not create (`create_error`); while set the
    /// container is not started.
    pub(super) timer: Option<SpawnHandle>,
    /// The last sync of the pod found it in crash-loop back-off: it waits for the back-off's
    /// end (the status says `CrashLoopBackOff`) until it starts again or the pod stops.
    pub(super) backing_off: bool,
    /// A sidecar that has counted as started once: it let the next container start, and it
    /// never holds the pod's initialization back again.
    pub(super) initialized: bool,
    /// The last start was held back by the descriptor budget (its event is sent once).
    pub(super) refused: bool,
    /// A probe killed the running instance: the next one starts whatever its exit code
    /// (see `KillContainer::restart`).
    pub(super) restart_owed: bool,
    /// The last start failed before anything ran, for a fault of the agent's own (its record
    /// could not be written: a full disk): the container shows this message, waiting with
    /// `CreateContainerConfigError`, until it starts or a retry finds it in crash-loop back-off
    /// (then it shows the back-off, as upstream's reason cache holds the last sync's outcome).
    /// Such a start is no instance: it counts no restart and uses no `restartPolicy: Never`
    /// container's one run.
    pub(super) create_error: Option<String>,
}

pub(super) enum Current {
    NotStarted,
    /// Spawned under the shim and recorded, the go byte sent, its report not read yet (a
    /// container runtime's "created"): nothing else starts it, a kill signals its group, and
    /// its status is still `ContainerCreating`.
    Starting(Running),
    Running(Running),
    Exited {
        id: ContainerId,
        terminated: ContainerStateTerminated,
    },
    /// The last start failed (the instance counts as started and exited with `StartError`)
    /// and will be retried.
    StartFailed {
        id: ContainerId,
        terminated: ContainerStateTerminated,
    },
    /// Removed by a restart of all the pod's containers: no instance in the runtime until it
    /// starts again. `restarted`: its status had run or ended (not waiting), so the restart
    /// counts for it — its last state says so and its restart count is one more, and the
    /// first status after the removal shows it waiting with reason `RestartingAllContainers`
    /// (upstream `convertToAPIContainerStatuses` for a pod restarting all containers: from the
    /// next status on, its last status is that waiting one, and it waits with the default
    /// reason); a container that was waiting (in back-off, say) keeps its count and last state,
    /// waiting with the default reason. `container_id`: the instance its status showed
    /// terminated, which upstream's first status after the removal still names.
    Removed {
        restarted: bool,
        container_id: Option<String>,
    },
}

impl Current {
    /// Whether an instance is starting or running.
    fn runs(&self) -> bool {
        matches!(self, Current::Starting(_) | Current::Running(_))
    }
}

pub(super) struct Running {
    pub(super) id: ContainerId,
    /// The process group, led by the container's process (or its shim).
    pub(super) pgid: Option<u32>,
    /// Whether the leader is the container shim, which kills the whole tree on SIGUSR1.
    pub(super) shimmed: bool,
    pub(super) started_at: Time,
    /// Set to true once the exit has been recorded; kills wait on it.
    pub(super) exited: watch::Sender<bool>,
    /// A kill is under way and should have ended by then; once past, the kill failed (the
    /// process still runs) and the next kill signals again.
    pub(super) killing: Option<Instant>,
}

/// What a container is to its pod.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Role {
    /// A regular init container: must exit 0 before the next one starts.
    Init,
    /// An init container with `restartPolicy: Always`: started, then kept running.
    Sidecar,
    Regular,
}

/// What became of a container's latest instance, as the start decisions need it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum InstanceOutcome {
    NotStarted,
    Running,
    ExitedWith(i32),
    StartFailed,
}

impl PodRuntime {
    pub(super) fn new(pod: Arc<Pod>) -> Self {
        PodRuntime {
            pod,
            started: HashSet::new(),
            containers: HashMap::new(),
            initialized: false,
            init_failed: false,
            terminating: false,
            held_back: None,
            requeue: None,
            back_off_left: None,
            sync_due: false,
            sync_scheduled: false,
            restart_all: None,
            restart_all_began: None,
            restart_all_seen: None,
        }
    }

    /// Whether a start of one of the pod's containers is under way (its report not read yet).
    pub(super) fn starting(&self) -> bool {
        self.containers.values().any(|slot| matches!(slot.current, Current::Starting(_)))
    }

    /// The pod's containers that the runtime has (not removed, started at least once), and
    /// with which code each exited if it has: what upstream reads of the runtime's pod status
    /// for `ShouldAllContainersRestart` and `AllContainersRestartCleanedUp`.
    pub(super) fn in_runtime(&self) -> Vec<InRuntime<'_>> {
        let Some(spec) = self.pod.spec.as_ref() else { return Vec::new() };
        spec.init_containers
            .iter()
            .flatten()
            .chain(&spec.containers)
            .filter_map(|c| {
                let exited_with = match &self.containers.get(&c.name)?.current {
                    Current::NotStarted | Current::Removed { .. } => return None,
                    Current::Starting(_) | Current::Running(_) => None,
                    Current::Exited { terminated, .. } | Current::StartFailed { terminated, .. } => {
                        Some(terminated.exit_code)
                    }
                };
                Some(InRuntime { name: &c.name, exited_with })
            })
            .collect()
    }

    /// Upstream `ShouldAllContainersRestart` on the runtime's view alone: some init or regular
    /// container's latest instance exited (or failed to start) with a code its rules answer
    /// with `RestartAllContainers`.
    pub(super) fn restart_all_due(&self) -> bool {
        let Some(spec) = self.pod.spec.as_ref() else { return false };
        spec.init_containers.iter().flatten().chain(&spec.containers).any(|c| {
            matches!(
                self.containers.get(&c.name).map(|s| &s.current),
                Some(Current::Exited { terminated, .. } | Current::StartFailed { terminated, .. })
                    if restarts_all_containers(c, terminated.exit_code)
            )
        })
    }

    /// The container a restart of all the pod's containers kills next: the first that runs in
    /// upstream's order (`containers_to_remove`: the regular containers, then the init
    /// containers, in spec order), for they are killed one after another; then any other that
    /// still runs (one the spec no longer names), so that nothing runs once they are removed.
    pub(super) fn next_to_kill_for_restart_all(&self) -> Option<String> {
        let in_order = self.pod.spec.as_ref().and_then(|spec| {
            containers_to_remove(spec, &self.in_runtime())
                .into_iter()
                .find(|c| c.kill)
                .map(|c| c.name.to_owned())
        });
        in_order.or_else(|| {
            self.containers.iter().filter(|(_, slot)| slot.current.runs()).map(|(name, _)| name.clone()).min()
        })
    }

    /// Removes every container from the runtime once none runs (upstream's `removeContainer` of
    /// each, for a pod restarting all its containers): each shows as
    /// [`Current::Removed`], and the pod starts over — not initialized, no back-off (upstream
    /// finds no exited instance to back off from), no sidecar counted as started. Hands back
    /// the pending timers for the actor to cancel.
    ///
    /// Whether the restart counts for a container is upstream's rule on the pod's last status,
    /// the one generated before the kills (`restart_all_seen`): its state there was not
    /// waiting. One shown terminated there keeps that instance's ID in the next status.
    pub(super) fn remove_all(&mut self) -> Vec<SpawnHandle> {
        let mut timers: Vec<SpawnHandle> =
            self.held_back.take().into_iter().chain(self.requeue.take()).collect();
        let seen = self.restart_all_seen.take();
        for (name, slot) in &mut self.containers {
            let seen = seen
                .as_ref()
                .and_then(|s| s.init_containers.iter().chain(&s.containers).find(|c| &c.name == name));
            let seen_state = seen.and_then(|c| c.state.as_ref());
            let container_id = seen
                .filter(|_| seen_state.is_some_and(|s| s.terminated.is_some()))
                .and_then(|c| c.container_id.clone());
            let in_back_off = std::mem::replace(&mut slot.backing_off, false);
            timers.extend(slot.timer.take());
            let ran = match std::mem::replace(&mut slot.current, Current::NotStarted) {
                Current::NotStarted => continue,
                // Removed by an earlier restart and not started since: it waited, so this
                // restart does not count for it; it keeps the count and last state it shows.
                Current::Removed { .. } => {
                    slot.current = Current::Removed { restarted: false, container_id: None };
                    continue;
                }
                // Not reached: every container has stopped before this. Shown as one that ran.
                Current::Starting(_) | Current::Running(_) => true,
                Current::Exited { terminated, .. } => {
                    slot.last_terminated = Some(terminated);
                    !in_back_off
                }
                Current::StartFailed { terminated, .. } => {
                    slot.last_terminated = Some(terminated);
                    false
                }
            };
            let restarted = seen_state.map_or(ran, |s| s.waiting.is_none());
            if restarted {
                slot.last_terminated = Some(ContainerStateTerminated {
                    exit_code: EXIT_CODE_RESTARTING_ALL_CONTAINERS,
                    reason: Some(REASON_RESTARTING_ALL_CONTAINERS.to_owned()),
                    message: Some(MESSAGE_RESTARTING_ALL_CONTAINERS.to_owned()),
                    ..Default::default()
                });
            } else {
                slot.started -= 1;
            }
            slot.current = Current::Removed { restarted, container_id };
            slot.last_event = None;
            slot.initialized = false;
            slot.refused = false;
            slot.restart_owed = false;
            slot.create_error = None;
        }
        self.initialized = false;
        self.init_failed = false;
        self.restart_all = Some(RestartAll::Removed);
        timers
    }

    /// Marks the pod terminating and hands back every pending start timer (the held-back
    /// retry, the back-off's requeue and each container's retry), for the actor to cancel:
    /// nothing starts after this, and no container waits for a back-off any more.
    pub(super) fn begin_terminating(&mut self) -> Vec<SpawnHandle> {
        self.terminating = true;
        self.restart_all_seen = None;
        for slot in self.containers.values_mut() {
            slot.backing_off = false;
        }
        self.take_timers()
    }

    /// Every pending start timer of the pod: the held-back retry, the back-off's requeue and
    /// each container's retry.
    pub(super) fn take_timers(&mut self) -> Vec<SpawnHandle> {
        self.held_back
            .take()
            .into_iter()
            .chain(self.requeue.take())
            .chain(self.containers.values_mut().filter_map(|s| s.timer.take()))
            .collect()
    }
}

impl Slot {
    pub(super) fn new(initial_backoff: Duration, max_backoff: Duration) -> Self {
        Slot {
            started: 0,
            current: Current::NotStarted,
            last_terminated: None,
            last_event: None,
            backoff: Backoff::new(initial_backoff, max_backoff),
            timer: None,
            backing_off: false,
            initialized: false,
            refused: false,
            restart_owed: false,
            create_error: None,
        }
    }
}

impl Role {
    pub(super) fn of_init(container: &Container) -> Role {
        if crate::status::is_restartable_init_container(container) { Role::Sidecar } else { Role::Init }
    }
}

/// The kubelet's restart rules for one pod: the pod's policy, and under the
/// `ContainerRestartRules` gate (`container_rules`) each container's own policy and rules.
#[derive(Debug, Clone, Copy)]
pub(super) struct RestartRules<'a> {
    pub(super) spec: &'a PodSpec,
    pub(super) container_rules: bool,
}

impl RestartRules<'_> {
    /// Whether a container that ended with `exit_code` starts again (upstream
    /// `ShouldContainerBeRestarted` and the init-container rules): sidecars always; an init
    /// container only after a failure; under the gate, what the container's own policy and
    /// rules say for the exit code (`restart::container_should_restart`); else an init
    /// container unless the pod's policy is `Never` and a regular container per the pod's
    /// policy.
    pub(super) fn after_exit(&self, role: Role, container: &Container, exit_code: i32) -> bool {
        match role {
            Role::Sidecar => true,
            Role::Init if exit_code == 0 => false,
            _ if self.container_rules => container_should_restart(container, self.spec, exit_code),
            Role::Init => Policy::of_pod(self.spec) != Policy::Never,
            Role::Regular => Policy::of_pod(self.spec).restarts(exit_code),
        }
    }

    /// Whether a container a failed liveness or startup probe killed starts again, whatever
    /// its exit code (`restart::restarts_after_probe_kill`); its exit-code rules still apply
    /// to the exit itself ([`RestartRules::after_exit`]).
    pub(super) fn after_probe_kill(&self, container: &Container) -> bool {
        restarts_after_probe_kill(container, self.spec, self.container_rules)
    }
}

pub(super) fn find_container<'a>(pod: &'a Pod, name: &str) -> Option<&'a Container> {
    let spec = pod.spec.as_ref()?;
    spec.init_containers.iter().flatten().chain(&spec.containers).find(|c| c.name == name)
}

/// One container's status as the kubelet builds it from the runtime's view.
///
/// `just_removed`: a restart of all the pod's containers has removed them and the host has not
/// read the pod since — the one status that shows a removed container as upstream's first
/// status after the removal does.
pub(super) fn container_status(
    pod: &Pod,
    container: &Container,
    slot: Option<&Slot>,
    default_reason: &str,
    just_removed: bool,
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
    // Upstream's reason cache after a failed `generateContainerConfig`: the error until a start
    // succeeds or a sync backs off (either clears it), with the latest instance, if any, as the
    // last state.
    if let Some(message) = slot.create_error.as_ref().filter(|_| !slot.current.runs()) {
        match &slot.current {
            Current::Exited { id, terminated } | Current::StartFailed { id, terminated } => {
                status.container_id = Some(id.to_string());
                status.last_state = Some(terminated_state(Some(terminated.clone())));
            }
            Current::Removed { .. } => {
                status.restart_count = slot.started.max(0);
                status.last_state = Some(last_terminated());
            }
            Current::NotStarted | Current::Starting(_) | Current::Running(_) => {}
        }
        status.state = Some(waiting(REASON_CREATE_CONTAINER_CONFIG_ERROR, Some(message.clone())));
        return status;
    }
    match &slot.current {
        Current::NotStarted => {}
        Current::Starting(starting) => {
            // Upstream shows a created container as waiting, with its ID.
            status.container_id = Some(starting.id.to_string());
            status.state = Some(waiting(REASON_CONTAINER_CREATING, None));
            status.last_state = Some(last_terminated());
        }
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
            match (slot.backing_off, slot.backoff.current()) {
                (true, Some(backoff)) => {
                    let message = back_off_message(backoff, container, pod);
                    status.state = Some(waiting(REASON_CRASH_LOOP_BACK_OFF, Some(message)));
                    status.last_state = Some(terminated_state(Some(terminated.clone())));
                }
                _ => {
                    status.state = Some(terminated_state(Some(terminated.clone())));
                    status.last_state = Some(last_terminated());
                }
            }
        }
        Current::Removed { restarted, container_id } => {
            // `started` is the count it shows (see `PodRuntime::remove_all`).
            status.restart_count = slot.started.max(0);
            if *restarted && just_removed {
                status.state = Some(waiting(
                    REASON_RESTARTING_ALL_CONTAINERS,
                    Some(MESSAGE_RESTARTING_ALL_CONTAINERS.to_owned()),
                ));
                status.container_id.clone_from(container_id);
            }
            status.last_state = Some(last_terminated());
        }
        Current::StartFailed { id, terminated } => {
            status.container_id = Some(id.to_string());
            // Upstream's reason cache: the failed start's error until the back-off begins, then
            // the back-off; the exited instance is the last state either way.
            status.state = Some(match (slot.backing_off, slot.backoff.current()) {
                (true, Some(backoff)) => {
                    waiting(REASON_CRASH_LOOP_BACK_OFF, Some(back_off_message(backoff, container, pod)))
                }
                _ => waiting(REASON_RUN_CONTAINER_ERROR, terminated.message.clone()),
            });
            status.last_state = Some(terminated_state(Some(terminated.clone())));
        }
    }
    status
}

/// Upstream's `ErrCrashLoopBackOff` message.
fn back_off_message(backoff: Duration, container: &Container, pod: &Pod) -> String {
    format!(
        "back-off {} restarting failed container={} pod={}",
        go_duration(backoff),
        container.name,
        pod_name(pod)
    )
}

pub(super) fn waiting(reason: &str, message: Option<String>) -> ContainerState {
    ContainerState {
        waiting: Some(ContainerStateWaiting { reason: Some(reason.to_owned()), message }),
        ..Default::default()
    }
}

pub(super) fn terminated_state(terminated: Option<ContainerStateTerminated>) -> ContainerState {
    ContainerState { terminated, ..Default::default() }
}

/// The statuses of a pod's containers, in spec order.
pub(super) fn pod_status(state: &PodRuntime) -> RuntimePodStatus {
    let Some(spec) = state.pod.spec.as_ref() else { return RuntimePodStatus::default() };
    let init_containers = spec.init_containers.as_deref().unwrap_or_default();
    // As `convertToAPIContainerStatuses`: with init containers every container not created
    // yet is `PodInitializing`.
    let default_reason =
        if init_containers.is_empty() { REASON_CONTAINER_CREATING } else { REASON_POD_INITIALIZING };
    let just_removed = state.restart_all == Some(RestartAll::Removed);
    let status = |c: &Container| {
        container_status(&state.pod, c, state.containers.get(&c.name), default_reason, just_removed)
    };
    RuntimePodStatus {
        init_containers: init_containers.iter().map(status).collect(),
        containers: spec.containers.iter().map(status).collect(),
        in_runtime: state.in_runtime().into_iter().map(|c| (c.name.to_owned(), c.exited_with)).collect(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn restart_rules_follow_the_kubelet() {
        let container = Container { name: "c".into(), ..Default::default() };
        let cases = [
            (Role::Regular, "Always", 0, true),
            (Role::Regular, "Always", 1, true),
            (Role::Regular, "OnFailure", 0, false),
            (Role::Regular, "OnFailure", 1, true),
            (Role::Regular, "Never", 1, false),
            (Role::Init, "Always", 1, true),
            (Role::Init, "OnFailure", 1, true),
            (Role::Init, "Never", 1, false),
            (Role::Init, "Always", 0, false),
            (Role::Sidecar, "Never", 0, true),
            (Role::Sidecar, "Never", 1, true),
        ];
        for container_rules in [false, true] {
            for (role, policy, code, want) in cases {
                let spec = PodSpec { restart_policy: Some(policy.into()), ..Default::default() };
                let rules = RestartRules { spec: &spec, container_rules };
                assert_eq!(
                    rules.after_exit(role, &container, code),
                    want,
                    "{role:?} {policy} exit {code}, gate {container_rules}"
                );
            }
        }
    }

    /// `ContainerRestartRules`: a container's own policy wins over the pod's, after an exit and
    /// after a probe's kill; with the gate off it is not read.
    #[test]
    fn a_containers_own_policy_decides_under_the_gate() {
        let own = |policy: &str| Container {
            name: "c".into(),
            restart_policy: Some(policy.into()),
            ..Default::default()
        };
        let never = PodSpec { restart_policy: Some("Never".into()), ..Default::default() };
        let always = PodSpec::default();
        let on = |spec| RestartRules { spec, container_rules: true };
        let off = |spec| RestartRules { spec, container_rules: false };
        assert!(on(&never).after_exit(Role::Regular, &own("Always"), 0));
        assert!(!off(&never).after_exit(Role::Regular, &own("Always"), 0));
        assert!(!on(&always).after_exit(Role::Regular, &own("Never"), 1));
        assert!(!on(&always).after_exit(Role::Regular, &own("OnFailure"), 0));
        assert!(on(&never).after_exit(Role::Init, &own("OnFailure"), 2));
        assert!(!on(&always).after_exit(Role::Init, &own("Never"), 2));
        assert!(on(&never).after_probe_kill(&own("OnFailure")));
        assert!(!on(&always).after_probe_kill(&own("Never")));
        assert!(off(&always).after_probe_kill(&own("Never")));
        assert!(!off(&never).after_probe_kill(&own("Always")));
    }

    #[test]
    fn unstarted_containers_wait_with_the_default_reason() {
        let pod = Pod::default();
        let container = Container { name: "app".into(), image: Some("img".into()), ..Default::default() };
        let status = container_status(&pod, &container, None, REASON_POD_INITIALIZING, false);
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
