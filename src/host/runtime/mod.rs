//! The standalone agent's container runtime: every container of a pod is a local process. It
//! owns starting containers in the kubelet's order (init containers one after another, sidecars
//! kept running — the next container waits until a sidecar's startup probe has succeeded, as the
//! host reports it — then the regular containers), restarting them per the pod's restart policy
//! with the kubelet's crash-loop back-off, killing them (SIGTERM, then SIGKILL after the grace
//! period; the sidecars of a pod whose regular containers are all done for good, last first,
//! each with what is left of the grace period but at least 2 s, as upstream's `waitForTurn`),
//! and the container statuses the kubelet would build from the runtime's view. A container a
//! failed probe killed starts again whatever its exit code, unless the policy is `Never`. Under
//! `RestartAllContainersOnContainerExits` an exit a container's `RestartAllContainers` rule
//! matches restarts the whole pod in place: every container killed (2 s), then removed, then
//! the pod started again from its first init container (docs/prober.md §3.11).
//!
//! Upstream counterpart: the kubelet's `kuberuntime` manager over a CRI runtime —
//! `computePodActions` / `SyncPod` / `doBackOff` (`kuberuntime_manager.go`), `startContainer` /
//! `killContainer` (`kuberuntime_container.go`), `convertToAPIContainerStatuses`
//! (`kubelet_pods.go`), with the event texts of `pkg/kubelet/events`. What a process cannot be
//! is left out: no images, volumes, sandboxes, resources or lifecycle hooks.
//!
//! A container process runs in its own process group, so that killing the container kills
//! everything it started, as a container's PID namespace would; [`crate::process`] sends the
//! signals. With a shim ([`ProcessRuntime::with_shim`]; the agent always sets it) the group's
//! leader is the agent binary's `container-shim` ([`crate::shim`]), the parent of everything the
//! container starts: it kills even what left the group when the container's main process exits
//! or when it is killed (SIGUSR1 after the grace period, before the group's SIGKILL), and the
//! container is recorded in the state directory before it runs anything (the start barrier). A
//! container that cannot start is reported as containerd reports it (`StartError`, exit code
//! 128, restarts counted), with or without the shim.
//!
//! The files: `actor` (the actor and its messages: what starts, restarts, stops), with
//! `actor/start` (starting a container, recording its exit); `state` (a pod's containers, the
//! restart rules, the statuses); `backoff` (the crash-loop back-off); `launch` (argv,
//! environment, spawning, start errors); `output` (a container's output into the agent's log);
//! `stop` (SIGTERM/SIGKILL with deadlines);
//! `groups` (the running process groups, recorded in the state directory so a restarted agent
//! kills what a crashed one left); `orphans` (what a container whose shim was killed left
//! running); `budget` (how many containers the agent's file descriptors allow). What happens when things fail is in `docs/reliability.md`.

mod actor;
mod backoff;
mod budget;
mod groups;
mod launch;
mod leftovers;
mod oom;
mod orphans;
mod output;
mod state;
mod stop;

use std::time::Duration;

pub use budget::{
    FDS_PER_CONTAINER, FDS_PER_EXEC_PROBE, FdBudget, HEALTH_MAX_CONNECTIONS, MIN_RESERVE, Refusal,
    connection_cap, exec_probe_cap, listener_caps, nofile_limit, raise_nofile_limit,
};
pub(crate) use groups::HeldByAnotherAgent;
pub use groups::{ContainerGroups, GroupOwner, StateDirError, StateWriteError};
pub use leftovers::{RUNNING_PODS, pods_that_ran};
pub use orphans::OrphanReaper;
pub use stop::{KILL_WAIT, Signaller, stop_deadline};

pub use actor::{
    ForgetPod, GetRuntimeStatus, KillContainer, KillPod, ProcessRuntime, RuntimeChanged, RuntimePodStatus,
    SubscribeRuntime, SyncPod,
};

/// At most this many containers start in one turn of the runtime actor; a sync that would
/// start more starts the rest in the next turns (a spawn holds the actor's thread until the
/// child has exec'd).
pub const STARTS_PER_TURN: usize = 32;

/// A turn of the runtime actor starts no more containers once this long has passed since its
/// first start (measured on tokio's clock: under paused time only [`STARTS_PER_TURN`] counts).
pub const START_TURN_TIME: Duration = Duration::from_millis(20);

/// The runtime type in container IDs: `probelet://<16 hex digits>`.
pub const RUNTIME_NAME: &str = "probelet";
/// A container whose `command[0]` is this runs the agent's own executable, so examples can run
/// `probelet demo-target`.
pub const SELF_COMMAND: &str = "probelet";
/// The kubelet's initial crash-loop back-off (`backOffPeriod`).
pub const DEFAULT_INITIAL_BACKOFF: Duration = Duration::from_secs(10);
/// The kubelet's longest crash-loop back-off (`MaxContainerBackOff`).
pub const DEFAULT_MAX_BACKOFF: Duration = Duration::from_secs(300);
/// The kubelet's resync interval (`--sync-frequency`): the standalone host syncs a pod again
/// this long after its last sync (plus jitter). A sync of a pod that finds a container in
/// crash-loop back-off is followed by the next at the earliest back-off's end, but never later
/// than this, as the kubelet's pod worker requeues such a sync; each records `BackOff` again for
/// every container still backing off (docs/reliability.md, "A `BackOff` at each resync of a
/// long wait").
pub const RESYNC_INTERVAL: Duration = Duration::from_secs(60);

/// Waiting reason of a container whose restart is being held back.
pub const REASON_CRASH_LOOP_BACK_OFF: &str = "CrashLoopBackOff";
/// Waiting reason of a container that could not be started.
pub const REASON_RUN_CONTAINER_ERROR: &str = "RunContainerError";
/// Waiting reason of a container the agent could not create, before anything ran (upstream
/// `ErrCreateContainerConfig`, which the kubelet gives its own failures before the runtime is
/// asked, such as its log directory it cannot make): here, its record in the state directory.
pub const REASON_CREATE_CONTAINER_CONFIG_ERROR: &str = "CreateContainerConfigError";
/// Waiting reason of a container not started yet, in a pod with init containers.
pub const REASON_POD_INITIALIZING: &str = "PodInitializing";
/// Waiting reason of a container not started yet, in a pod without init containers.
pub const REASON_CONTAINER_CREATING: &str = "ContainerCreating";
/// Terminated reason of a container that exited 0.
pub const REASON_COMPLETED: &str = "Completed";
/// Terminated reason of a container that exited non-zero or was killed.
pub const REASON_ERROR: &str = "Error";
/// Terminated reason of a container the kernel's OOM killer killed (containerd's).
pub const REASON_OOM_KILLED: &str = "OOMKilled";
/// Terminated reason of a container that could not be started (containerd's).
pub const REASON_START_ERROR: &str = "StartError";
/// Waiting reason, and last terminated reason, of a container a restart of all the pod's
/// containers removed (upstream `convertToAPIContainerStatuses`, KEP-5532).
pub const REASON_RESTARTING_ALL_CONTAINERS: &str = "RestartingAllContainers";
/// Their message.
pub const MESSAGE_RESTARTING_ALL_CONTAINERS: &str =
    "The container is removed because RestartAllContainers in place";
/// Their last state's exit code (upstream writes 137, as for a container it lost track of).
pub const EXIT_CODE_RESTARTING_ALL_CONTAINERS: i32 = 137;
/// The `Killing` event's message for a container a restart of all containers kills.
pub const MESSAGE_KILLING_FOR_RESTART_ALL: &str = "killing";

/// Event reasons (upstream `pkg/kubelet/events`).
pub const EVENT_CREATED: &str = "Created";
pub const EVENT_STARTED: &str = "Started";
pub const EVENT_FAILED: &str = "Failed";
pub const EVENT_KILLING: &str = "Killing";
pub const EVENT_BACK_OFF: &str = "BackOff";
/// A container start held back by the agent's file-descriptor budget (no upstream counterpart:
/// named like the kubelet's admission reasons, `OutOfcpu`, `OutOfmemory`).
pub const EVENT_OUT_OF_FILE_DESCRIPTORS: &str = "OutOfFileDescriptors";
