//! One probe iteration's decisions (upstream `worker.doProbe`), as plain state and functions
//! that tests drive without an actor or a timer. The [`super::worker::ProbeWorker`] task
//! calls [`WorkerState::before_probe`] (as `checks`, with its container already found in the
//! pod's probe status), runs the probe when told to, then
//! [`WorkerState::after_probe`], and applies the cache operations both return.

use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::core::v1::{Pod, PodSpec, Probe};
use k8s_openapi::jiff::{SignedDuration, Timestamp};

use super::{PodContainer, ProbeKind, ProbeResult};
use crate::container::ContainerId;
use crate::format::pod_ref;
use crate::restart::{Policy, container_should_restart};
use crate::status::is_restartable_init_container;
use crate::status::probe_status::{ContainerRunState, PodProbeStatus, ProbedContainer};
use crate::vocabulary::ProbeKey;

/// Containers that started this long before the prober manager are treated as running across
/// an agent restart (upstream: 10 s before the kubelet started).
pub const RESTART_GRACE: SignedDuration = SignedDuration::from_secs(10);

/// What a worker captured at creation and never refreshes (upstream: the pod object, the
/// container spec and the probe spec captured by `newWorker`).
#[derive(Debug, Clone)]
pub struct WorkerSpec {
    /// Which of the container's probes the worker runs.
    pub kind: ProbeKind,
    /// The probed container's name, to find its status in the pod status.
    pub container_name: Arc<str>,
    /// The container is a restartable init container (a sidecar).
    pub is_sidecar: bool,
    /// The captured pod already had a deletion timestamp.
    pub pod_deleting: bool,
    /// Whether the worker goes on once its container has terminated.
    pub after_exit: AfterExit,
    /// The probe's `initialDelaySeconds` (0 when unset): no probe before the container has run
    /// this long.
    pub initial_delay_seconds: i64,
    /// The timing annotation's `initialDelayMs`, when set: replaces `initial_delay_seconds`
    /// and is compared in whole milliseconds rather than whole seconds.
    pub initial_delay: Option<Duration>,
    /// The probe's `successThreshold` (default 1): successes in a row that make the result Success.
    pub success_threshold: u32,
    /// The probe's `failureThreshold` (default 3): failures in a row that make the result Failure.
    pub failure_threshold: u32,
    /// When the prober manager started (wall clock).
    pub manager_start: Timestamp,
    /// The container instance a worker started by `StartContainerProbes` probes
    /// (`ContainerLifecycleProber`); `None` for a worker that follows whatever container the
    /// status shows. Boxed, as only that gate sets it (docs/memory.md: a worker's bytes).
    pub bound: Option<Box<ContainerBinding>>,
    /// Keep the state of containers that ran before the agent started instead of writing the
    /// initial value (KEP-4781); false under `ChangeContainerStatusOnKubeletRestart`.
    pub keep_state_across_restart: bool,
    /// The worker is `MutableContainerProbes`' (upstream's newer worker, docs/prober.md §3.9):
    /// a new container instance starts its run of results over, the first probe comes as soon
    /// as the initial delay ends, and each probe is due one period after the last one ended.
    pub mutable: bool,
}

/// Whether a worker goes on once its container has terminated: only if the container will run
/// again (docs/prober.md §1.3 step 7). One byte: a worker stays small (docs/memory.md), and the
/// rules, when they decide, are read from the container the worker captured.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AfterExit {
    /// The container runs again: keep probing.
    KeepProbing,
    /// It never runs again: stop.
    Stop,
    /// `ContainerRestartRules`: the container's own policy and rules, with the exit code the
    /// status shows, decide (`restart::container_should_restart`).
    AskTheContainer,
    /// `ContainerRestartRules` and `RestartAllContainersOnContainerExits`: as
    /// [`AfterExit::AskTheContainer`], or the whole pod is restarting all its containers
    /// (upstream `ShouldAllContainersRestart` on the status, with no runtime view).
    AskTheContainerAndThePod,
}

impl AfterExit {
    /// The kubelet's rule without `ContainerRestartRules`: stop once the container has
    /// terminated if the pod's policy is `Never` and it is not a sidecar, whatever the exit
    /// code (`OnFailure` keeps the worker even after a zero exit).
    pub fn baseline(pod: &PodSpec, is_sidecar: bool) -> AfterExit {
        if Policy::of_pod(pod) == Policy::Never && !is_sidecar {
            AfterExit::Stop
        } else {
            AfterExit::KeepProbing
        }
    }

    /// Whether the worker goes on after `captured` exited with `exit_code`, `status` being the
    /// pod's status the worker read.
    fn keeps_probing(self, captured: &PodContainer, exit_code: i32, status: &PodProbeStatus) -> bool {
        let spec = || crate::status::spec_of(captured.pod());
        match self {
            AfterExit::KeepProbing => true,
            AfterExit::Stop => false,
            AfterExit::AskTheContainer => container_should_restart(captured, &spec(), exit_code),
            AfterExit::AskTheContainerAndThePod => {
                container_should_restart(captured, &spec(), exit_code)
                    || status.all_containers_restart(&spec())
            }
        }
    }
}

/// The container instance a lifecycle-started worker probes, as `StartContainerProbes` gave it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ContainerBinding {
    /// The container instance.
    pub container_id: ContainerId,
    /// The pod's IP when the container started, used when the status has none.
    pub pod_ip: Option<String>,
    /// When the container started, used for the initial delay when the status has no time.
    pub started_at: Option<Timestamp>,
}

impl WorkerSpec {
    /// Captures what the worker `key` needs from the pod and its probe spec (the container's
    /// name is the key's, shared). Thresholds below one are taken as one, the smallest the API
    /// server accepts.
    pub fn new(key: &ProbeKey, pod: &Pod, probe: &Probe, is_sidecar: bool, manager_start: Timestamp) -> Self {
        let threshold =
            |v: Option<i32>, default: u32| v.map_or(default, |v| u32::try_from(v).unwrap_or(0).max(1));
        WorkerSpec {
            kind: key.kind,
            container_name: key.container_name.clone(),
            is_sidecar,
            pod_deleting: pod.metadata.deletion_timestamp.is_some(),
            after_exit: AfterExit::baseline(&crate::status::spec_of(pod), is_sidecar),
            initial_delay_seconds: i64::from(probe.initial_delay_seconds.unwrap_or(0)),
            initial_delay: None,
            success_threshold: threshold(probe.success_threshold, 1),
            failure_threshold: threshold(probe.failure_threshold, 3),
            manager_start,
            bound: None,
            keep_state_across_restart: true,
            mutable: false,
        }
    }

    /// The value a new container ID starts with in the results cache.
    pub fn initial_value(&self) -> ProbeResult {
        match self.kind {
            ProbeKind::Readiness => ProbeResult::Failure,
            ProbeKind::Liveness => ProbeResult::Success,
            ProbeKind::Startup => ProbeResult::Unknown,
        }
    }
}

/// A change the worker makes to its results cache.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CacheOp {
    /// Store this result for the container, replacing any.
    Set(ContainerId, ProbeResult),
    /// Set only if the cache has no entry for the container (a resumed worker's seed: the
    /// entry its predecessor left is kept, a container nobody seeded gets the initial value).
    Seed(ContainerId, ProbeResult),
    /// Drop the container's entry (its container is gone or the worker exits).
    Remove(ContainerId),
}

/// What to do after the pre-probe checks.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Next {
    /// Exit the worker.
    Stop,
    /// Keep going without probing this time.
    Skip,
    /// Run the probe against this container.
    Probe(ContainerId),
}

/// [`Next`] inside the crate: [`Step::Probe`] probes the container the checks were given.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Step {
    Stop,
    Skip,
    /// Skipped: the container's initial delay has this much left.
    Early(Duration),
    Probe,
}

/// The mutable state of a worker (upstream `worker` fields).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct WorkerState {
    /// The container ID last seen; its cache entry is removed when it changes or on exit.
    pub container_id: Option<ContainerId>,
    /// The last probe result, threshold counting only; survives container restarts.
    pub last_result: ProbeResult,
    /// How many times in a row `last_result` came back.
    pub result_run: u32,
    /// Stop probing until a new container ID appears.
    pub on_hold: bool,
    /// This worker replaces another (one that died, or one still stopping): the first
    /// container it sees is seeded only where the cache has no entry, since the predecessor's
    /// entry is still there and still right.
    pub resumed: bool,
    /// The readiness result became Success for `container_id` (a readiness start interval
    /// ends there, and a new container ID starts it over).
    pub readiness_succeeded: bool,
}

impl WorkerState {
    /// A fresh worker's state.
    pub fn new() -> Self {
        Self::default()
    }

    /// A worker replacing one that died abnormally.
    pub fn resumed() -> Self {
        WorkerState { resumed: true, ..Self::default() }
    }

    /// Steps 2–10 of `doProbe`: everything before running the probe.
    pub fn before_probe(
        &mut self,
        spec: &WorkerSpec,
        captured: &PodContainer,
        status: Option<&PodProbeStatus>,
        now: Timestamp,
        ops: &mut Vec<CacheOp>,
    ) -> Next {
        let container = status.and_then(|s| s.container(&spec.container_name));
        match self.checks(spec, captured, status, container, now, ops) {
            Step::Stop => Next::Stop,
            Step::Skip | Step::Early(_) => Next::Skip,
            Step::Probe => match container {
                Some(container) => Next::Probe(container.id.clone()),
                None => Next::Skip,
            },
        }
    }

    /// [`WorkerState::before_probe`] with the container's status already found in `status`
    /// (`None`: it is not there; the worker remembers where it was, docs/benchmarks.md),
    /// answering [`Step::Probe`] for "probe `container`": the worker probes the ID the status
    /// holds, and takes a copy of it only when it must (a copy writes both of the ID's
    /// reference counts, at every probe; docs/benchmarks.md, "A probe prepared once per
    /// status").
    pub(crate) fn checks(
        &mut self,
        spec: &WorkerSpec,
        captured: &PodContainer,
        status: Option<&PodProbeStatus>,
        container: Option<&ProbedContainer>,
        now: Timestamp,
        ops: &mut Vec<CacheOp>,
    ) -> Step {
        debug_assert!(
            container.is_none_or(|c| status.is_some_and(|s| s.containers.iter().any(|x| std::ptr::eq(x, c)))),
            "the container must be one of the status's"
        );
        // The pod as upstream's worker lines name it, built only for a line that is logged.
        let pod = || pod_ref(captured.pod());
        let Some(status) = status else {
            tracing::debug!(pod = pod(), "No status for pod");
            return Step::Skip;
        };
        if let Some(phase) = status.finished {
            tracing::debug!(pod = pod(), phase, "Pod is terminated, exiting probe worker");
            return Step::Stop;
        }
        let Some(container) = container else {
            tracing::debug!(
                pod = pod(),
                containerName = &*spec.container_name,
                "Probe target container not found"
            );
            return Step::Skip;
        };
        let container_id = &container.id;
        // A worker bound to a container instance waits for the status to show it (it may still
        // show the previous instance) and never probes another.
        if spec.bound.as_ref().is_some_and(|b| b.container_id != *container_id) {
            tracing::trace!(
                pod = pod(),
                container = &*spec.container_name,
                probe_kind = spec.kind.as_str(),
                "Status does not show the probed container instance yet"
            );
            return Step::Skip;
        }

        if self.container_id.as_ref() != Some(container_id) {
            if let Some(old) = self.container_id.take() {
                ops.push(CacheOp::Remove(old));
            }
            let resumed = std::mem::take(&mut self.resumed);
            let kept_across_restart = spec.keep_state_across_restart
                && started_before_manager(container.running_since(), spec.manager_start);
            if !kept_across_restart {
                let seed = if resumed { CacheOp::Seed } else { CacheOp::Set };
                ops.push(seed(container_id.clone(), spec.initial_value()));
            } else if spec.kind == ProbeKind::Startup && spec.is_sidecar && container.started == Some(true) {
                // A sidecar that ran before the agent started and was reported started must
                // count as started at once, or the pod never initialises (upstream #136910).
                // Upstream writes this Success before the initial value, which overwrites it
                // unless the initial value is skipped: so only a container kept across the
                // restart keeps it, and never with ChangeContainerStatusOnKubeletRestart.
                ops.push(CacheOp::Set(container_id.clone(), ProbeResult::Success));
            }
            self.container_id = Some(container_id.clone());
            self.on_hold = false;
            self.readiness_succeeded = false;
            if spec.mutable {
                // Upstream's newer worker resets its run for each container instance; the older
                // one carries it over (§8.18).
                self.last_result = ProbeResult::Unknown;
                self.result_run = 0;
            }
        }

        if self.on_hold {
            return Step::Skip;
        }

        let ContainerRunState::Running { started_at } = container.state else {
            tracing::debug!(
                pod = pod(),
                containerName = &*spec.container_name,
                "Non-running container probed"
            );
            // Upstream writes Failure here for every kind. Only readiness is written: a liveness
            // or startup Failure for an instance that does not run yet (created, not started)
            // would stay in the cache once it runs, so its first real failure would be no
            // change, no host would hear of it, and the worker would hold with its container
            // never restarted (docs/prober.md §9, §8.21).
            if spec.kind == ProbeKind::Readiness {
                ops.push(CacheOp::Set(container_id.clone(), ProbeResult::Failure));
            }
            return match container.state {
                ContainerRunState::Terminated { exit_code }
                    if !spec.after_exit.keeps_probing(captured, exit_code, status) =>
                {
                    Step::Stop
                }
                _ => Step::Skip,
            };
        };

        if spec.pod_deleting && matches!(spec.kind, ProbeKind::Liveness | ProbeKind::Startup) {
            tracing::debug!(
                probeType = spec.kind.as_str(),
                pod = pod(),
                containerName = &*spec.container_name,
                "Pod deletion requested, setting probe result to success"
            );
            if spec.kind == ProbeKind::Startup {
                tracing::info!(
                    pod = pod(),
                    containerName = &*spec.container_name,
                    "Pod deletion requested before container has fully started"
                );
            }
            ops.push(CacheOp::Set(container_id.clone(), ProbeResult::Success));
            return Step::Stop;
        }

        let started_at = started_at.or_else(|| spec.bound.as_ref().and_then(|b| b.started_at));
        if let Some(started_at) = started_at {
            let since = now.duration_since(started_at);
            let early = match spec.initial_delay {
                Some(delay) => since.as_millis() < i128::try_from(delay.as_millis()).unwrap_or(i128::MAX),
                None => since.as_secs() < spec.initial_delay_seconds,
            };
            if early {
                let delay = spec.initial_delay.unwrap_or_else(|| {
                    Duration::from_secs(u64::try_from(spec.initial_delay_seconds).unwrap_or_default())
                });
                // A `startedAt` ahead of the clock (another clock's, or a node's set back)
                // leaves the delay plus that much: the delay ends counted from it, and a worker
                // that waits for less only wakes to find itself still early (docs/prober.md §3.9).
                let ran = since.unsigned_abs();
                let left =
                    if since.is_negative() { delay.saturating_add(ran) } else { delay.saturating_sub(ran) };
                return Step::Early(left);
            }
        }

        let started = container.started == Some(true);
        match (spec.kind, started) {
            (ProbeKind::Startup, true) => Step::Skip,
            (ProbeKind::Liveness | ProbeKind::Readiness, false) => Step::Skip,
            _ => Step::Probe,
        }
    }

    /// Steps 13–16 of `doProbe`: threshold accounting and the hold rule for a probe that
    /// returned a result (errored probes never get here).
    pub fn after_probe(&mut self, spec: &WorkerSpec, result: ProbeResult, ops: &mut Vec<CacheOp>) {
        if result == self.last_result {
            self.result_run = self.result_run.saturating_add(1);
        } else {
            self.last_result = result;
            self.result_run = 1;
        }
        let below = match result {
            ProbeResult::Failure => self.result_run < spec.failure_threshold,
            ProbeResult::Success => self.result_run < spec.success_threshold,
            ProbeResult::Unknown => false,
        };
        if below {
            return;
        }
        let Some(container_id) = self.container_id.clone() else { return };
        ops.push(CacheOp::Set(container_id, result));
        if spec.kind == ProbeKind::Readiness && result == ProbeResult::Success {
            self.readiness_succeeded = true;
        }
        if (spec.kind == ProbeKind::Liveness && result == ProbeResult::Failure)
            || spec.kind == ProbeKind::Startup
        {
            self.on_hold = true;
            self.result_run = 0;
        }
    }
}

/// Whether a running container started more than [`RESTART_GRACE`] before the manager: its
/// state from before an agent restart is kept rather than reset to the initial value.
/// `running_since` is when the container's running state says it started.
pub fn started_before_manager(running_since: Option<Timestamp>, manager_start: Timestamp) -> bool {
    running_since.is_some_and(|t| t > Timestamp::UNIX_EPOCH && t < manager_start - RESTART_GRACE)
}

/// Whether this container of the pod is a sidecar (restartable init container).
pub fn is_sidecar_of(pod: &Pod, container_name: &str) -> bool {
    pod.spec.as_ref().is_some_and(|s| {
        s.init_containers
            .iter()
            .flatten()
            .any(|c| c.name == container_name && is_restartable_init_container(c))
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::restart::test_containers::with_own_policy;
    use k8s_openapi::api::core::v1::{
        Container, ContainerState, ContainerStateRunning, ContainerStateTerminated, ContainerStateWaiting,
        ContainerStatus, PodSpec, PodStatus,
    };
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, Time};

    fn t(secs: i64) -> Timestamp {
        Timestamp::from_second(1_700_000_000 + secs).unwrap()
    }

    fn spec(kind: ProbeKind) -> WorkerSpec {
        WorkerSpec {
            kind,
            container_name: "c".into(),
            is_sidecar: false,
            pod_deleting: false,
            after_exit: AfterExit::KeepProbing,
            initial_delay_seconds: 0,
            initial_delay: None,
            success_threshold: 1,
            failure_threshold: 3,
            manager_start: t(0),
            bound: None,
            keep_state_across_restart: true,
            mutable: false,
        }
    }

    fn running(id: &str, started_at: i64, started: Option<bool>) -> PodStatus {
        PodStatus {
            phase: Some("Running".into()),
            container_statuses: Some(vec![ContainerStatus {
                name: "c".into(),
                container_id: Some(id.into()),
                started,
                state: Some(ContainerState {
                    running: Some(ContainerStateRunning { started_at: Some(Time(t(started_at))) }),
                    ..Default::default()
                }),
                ..Default::default()
            }]),
            ..Default::default()
        }
    }

    /// The pod and container a test worker captured: container `c`, no policy of its own.
    fn captured() -> PodContainer {
        captured_from(Container { name: "c".into(), ..Default::default() }, PodSpec::default())
    }

    fn captured_from(container: Container, spec: PodSpec) -> PodContainer {
        let pod = Arc::new(Pod {
            metadata: ObjectMeta {
                name: Some("web".into()),
                namespace: Some("default".into()),
                ..Default::default()
            },
            spec: Some(PodSpec { containers: vec![container], ..spec }),
            ..Default::default()
        });
        PodContainer::find(&pod, "c").unwrap()
    }

    fn with_state(mut status: PodStatus, state: ContainerState) -> PodStatus {
        if let Some(cs) = status.container_statuses.as_mut().and_then(|v| v.first_mut()) {
            cs.state = Some(state);
        }
        status
    }

    impl WorkerState {
        /// [`WorkerState::before_probe`] on a whole status, read as the status manager
        /// publishes it to workers.
        fn before(
            &mut self,
            spec: &WorkerSpec,
            status: Option<&PodStatus>,
            now: Timestamp,
            ops: &mut Vec<CacheOp>,
        ) -> Next {
            let status = status.map(PodProbeStatus::from);
            self.before_probe(spec, &captured(), status.as_ref(), now, ops)
        }
    }

    fn id(s: &str) -> ContainerId {
        ContainerId::parse(s)
    }

    #[test]
    fn initial_values_per_kind() {
        let cases = [
            (ProbeKind::Readiness, ProbeResult::Failure),
            (ProbeKind::Liveness, ProbeResult::Success),
            (ProbeKind::Startup, ProbeResult::Unknown),
        ];
        for (kind, want) in cases {
            let mut state = WorkerState::new();
            let mut ops = vec![];
            let started = if kind == ProbeKind::Startup { None } else { Some(true) };
            let next = state.before(&spec(kind), Some(&running("x://1", 5, started)), t(10), &mut ops);
            assert_eq!(ops, vec![CacheOp::Set(id("x://1"), want)], "{kind}");
            assert_eq!(next, Next::Probe(id("x://1")), "{kind}");
        }
    }

    #[test]
    fn no_status_or_container_skips_without_stopping() {
        let mut state = WorkerState::new();
        let mut ops = vec![];
        assert_eq!(state.before(&spec(ProbeKind::Readiness), None, t(1), &mut ops), Next::Skip);
        let empty_id = running("", 0, Some(true));
        assert_eq!(state.before(&spec(ProbeKind::Readiness), Some(&empty_id), t(1), &mut ops), Next::Skip);
        assert!(ops.is_empty());
    }

    #[test]
    fn terminal_phase_stops() {
        for phase in ["Failed", "Succeeded"] {
            let mut status = running("x://1", 0, Some(true));
            status.phase = Some(phase.into());
            let mut ops = vec![];
            assert_eq!(
                WorkerState::new().before(&spec(ProbeKind::Readiness), Some(&status), t(1), &mut ops),
                Next::Stop
            );
            assert!(ops.is_empty(), "{phase}: nothing written");
        }
    }

    /// The checks before a probe log upstream's `doProbe` lines, at debug as its verbosity 3
    /// maps, with its keys in its order (docs/architecture.md, "Log lines"). Before, "Pod is
    /// terminated, exiting probe worker", "Non-running container probed" and "Pod deletion
    /// requested, setting probe result to success" were not logged, and the other two were at
    /// trace; then all five carried the engine's `container` and `probe_kind` and no pod.
    #[test]
    fn the_checks_log_upstreams_lines_at_debug() {
        let terminal = PodStatus { phase: Some("Succeeded".into()), ..running("x://1", 0, Some(true)) };
        let waiting = with_state(
            running("x://1", 0, Some(true)),
            ContainerState { waiting: Some(ContainerStateWaiting::default()), ..Default::default() },
        );
        let no_container = running("", 0, Some(true));
        let deleting = WorkerSpec { pod_deleting: true, ..spec(ProbeKind::Liveness) };
        let cases = [
            ("no status", spec(ProbeKind::Readiness), None, "No status for pod", r#"pod="default/web""#),
            (
                "terminal pod",
                spec(ProbeKind::Readiness),
                Some(&terminal),
                "Pod is terminated, exiting probe worker",
                r#"pod="default/web" phase="Succeeded""#,
            ),
            (
                "no container",
                spec(ProbeKind::Readiness),
                Some(&no_container),
                "Probe target container not found",
                r#"pod="default/web" containerName="c""#,
            ),
            (
                "not running",
                spec(ProbeKind::Readiness),
                Some(&waiting),
                "Non-running container probed",
                r#"pod="default/web" containerName="c""#,
            ),
            (
                "pod deleting",
                deleting,
                Some(&running("x://1", 0, Some(true))),
                "Pod deletion requested, setting probe result to success",
                r#"probeType="Liveness" pod="default/web" containerName="c""#,
            ),
        ];
        for (name, spec, status, line, fields) in cases {
            let (log, _guard) = crate::test_log::Captured::start();
            WorkerState::new().before(&spec, status, t(10), &mut vec![]);
            assert_eq!(log.levels_of(line), [tracing::Level::DEBUG], "case {name}: {:?}", log.messages());
            assert_eq!(log.fields_of(line), [fields], "case {name}");
        }
    }

    /// A startup probe of a pod being deleted also logs upstream's info line, with its keys.
    #[test]
    fn a_startup_probe_of_a_deleted_pod_logs_upstreams_info_line() {
        let deleting = WorkerSpec { pod_deleting: true, ..spec(ProbeKind::Startup) };
        let (log, _guard) = crate::test_log::Captured::start();
        WorkerState::new().before(&deleting, Some(&running("x://1", 0, Some(false))), t(10), &mut vec![]);
        let line = "Pod deletion requested before container has fully started";
        assert_eq!(log.levels_of(line), [tracing::Level::INFO]);
        assert_eq!(log.fields_of(line), [r#"pod="default/web" containerName="c""#]);
    }

    #[test]
    fn container_change_removes_old_entry_and_lifts_hold() {
        let mut state = WorkerState { container_id: Some(id("x://1")), on_hold: true, ..Default::default() };
        let mut ops = vec![];
        let next =
            state.before(&spec(ProbeKind::Liveness), Some(&running("x://2", 5, Some(true))), t(10), &mut ops);
        assert_eq!(ops, vec![CacheOp::Remove(id("x://1")), CacheOp::Set(id("x://2"), ProbeResult::Success)]);
        assert_eq!(next, Next::Probe(id("x://2")));
        assert!(!state.on_hold);
    }

    #[test]
    fn hold_skips_until_new_container() {
        let mut state = WorkerState { container_id: Some(id("x://1")), on_hold: true, ..Default::default() };
        let mut ops = vec![];
        assert_eq!(
            state.before(&spec(ProbeKind::Liveness), Some(&running("x://1", 0, Some(true))), t(10), &mut ops),
            Next::Skip
        );
        assert!(ops.is_empty());
    }

    #[test]
    fn not_running_writes_failure_and_stops_only_when_it_will_not_restart() {
        let waiting =
            ContainerState { waiting: Some(ContainerStateWaiting::default()), ..Default::default() };
        let terminated =
            ContainerState { terminated: Some(ContainerStateTerminated::default()), ..Default::default() };
        let pod_never = PodSpec { restart_policy: Some("Never".into()), ..Default::default() };
        let never =
            WorkerSpec { after_exit: AfterExit::baseline(&pod_never, false), ..spec(ProbeKind::Liveness) };
        let never_sidecar = WorkerSpec {
            is_sidecar: true,
            after_exit: AfterExit::baseline(&pod_never, true),
            ..spec(ProbeKind::Liveness)
        };
        let cases = [
            ("waiting, Never", never.clone(), waiting.clone(), Next::Skip),
            ("terminated, Always", spec(ProbeKind::Liveness), terminated.clone(), Next::Skip),
            ("terminated, Never", never, terminated.clone(), Next::Stop),
            ("terminated sidecar, Never", never_sidecar, terminated, Next::Skip),
        ];
        for (name, spec, container_state, want) in cases {
            let mut state = WorkerState { container_id: Some(id("x://1")), ..Default::default() };
            let mut ops = vec![];
            let status = with_state(running("x://1", 0, Some(true)), container_state.clone());
            assert_eq!(state.before(&spec, Some(&status), t(10), &mut ops), want, "{name}");
            assert_eq!(ops, vec![], "{name}: a liveness worker writes nothing (docs/prober.md §9)");
            let readiness = WorkerSpec { kind: ProbeKind::Readiness, ..spec };
            let mut state = WorkerState { container_id: Some(id("x://1")), ..Default::default() };
            assert_eq!(state.before(&readiness, Some(&status), t(10), &mut ops), want, "{name}, readiness");
            assert_eq!(ops, vec![CacheOp::Set(id("x://1"), ProbeResult::Failure)], "{name}, readiness");
        }
    }

    /// A liveness or startup worker that sees its container created but not yet running writes
    /// nothing, so that the container's first real failure, once it runs, is a change the host
    /// hears of (and kills for). With upstream's Failure for the waiting instance, the failure
    /// was Failure after Failure: no change, no kill, and the worker held for ever.
    #[test]
    fn a_failure_after_the_container_starts_is_a_change_for_liveness_and_startup() {
        let waiting =
            ContainerState { waiting: Some(ContainerStateWaiting::default()), ..Default::default() };
        for kind in [ProbeKind::Liveness, ProbeKind::Startup] {
            let spec = WorkerSpec { failure_threshold: 1, ..spec(kind) };
            let mut state = WorkerState::new();
            let mut ops = vec![];
            let started = if kind == ProbeKind::Startup { None } else { Some(true) };
            let created = with_state(running("x://1", 0, started), waiting.clone());
            assert_eq!(state.before(&spec, Some(&created), t(1), &mut ops), Next::Skip, "{kind}");
            assert_eq!(ops, vec![CacheOp::Set(id("x://1"), spec.initial_value())], "{kind}: the seed only");
            let mut stored = spec.initial_value();
            let mut changes = vec![];
            let mut apply = |ops: &mut Vec<CacheOp>| {
                for op in ops.drain(..) {
                    if let CacheOp::Set(_, result) = op
                        && result != stored
                    {
                        stored = result;
                        changes.push(result);
                    }
                }
            };
            apply(&mut ops);
            assert_eq!(
                state.before(&spec, Some(&running("x://1", 0, started)), t(12), &mut ops),
                Next::Probe(id("x://1"))
            );
            state.after_probe(&spec, ProbeResult::Failure, &mut ops);
            apply(&mut ops);
            assert_eq!(changes, vec![ProbeResult::Failure], "{kind}: the real failure is a change");
            assert!(state.on_hold, "{kind}: and the worker holds until the container is replaced");
        }
    }

    /// `ContainerRestartRules`: the container's own policy and rules, with the exit code the
    /// status shows, decide whether the worker outlives its terminated container (upstream
    /// `doProbe`, "Abort if the container will not be restarted").
    #[test]
    fn under_container_restart_rules_the_exit_code_decides_whether_the_worker_stops() {
        let pod = |policy: &str| PodSpec { restart_policy: Some(policy.into()), ..Default::default() };
        let container = |policy, restart_on: &[i32]| with_own_policy("c", policy, restart_on);
        let cases = [
            ("container Always in a Never pod", container(Some("Always"), &[]), pod("Never"), 0, Next::Skip),
            ("container Never in an Always pod", container(Some("Never"), &[]), pod("Always"), 1, Next::Stop),
            ("container OnFailure, exit 0", container(Some("OnFailure"), &[]), pod("Always"), 0, Next::Stop),
            ("container OnFailure, exit 3", container(Some("OnFailure"), &[]), pod("Never"), 3, Next::Skip),
            ("rule matches exit 42", container(Some("Never"), &[42]), pod("Never"), 42, Next::Skip),
            ("rule misses exit 1", container(Some("Never"), &[42]), pod("Never"), 1, Next::Stop),
            (
                "no container policy, pod OnFailure, exit 0",
                container(None, &[]),
                pod("OnFailure"),
                0,
                Next::Stop,
            ),
            ("no container policy, pod Never", container(None, &[]), pod("Never"), 1, Next::Stop),
        ];
        for (name, c, pod_spec, exit_code, want) in cases {
            let spec = WorkerSpec { after_exit: AfterExit::AskTheContainer, ..spec(ProbeKind::Readiness) };
            let terminated = ContainerState {
                terminated: Some(ContainerStateTerminated { exit_code, ..Default::default() }),
                ..Default::default()
            };
            let mut state = WorkerState { container_id: Some(id("x://1")), ..Default::default() };
            let mut ops = vec![];
            let status = PodProbeStatus::from(&with_state(running("x://1", 0, Some(true)), terminated));
            let captured = captured_from(c, pod_spec);
            assert_eq!(state.before_probe(&spec, &captured, Some(&status), t(10), &mut ops), want, "{name}");
            assert_eq!(ops, vec![CacheOp::Set(id("x://1"), ProbeResult::Failure)], "{name}");
        }
    }

    /// `RestartAllContainersOnContainerExits` (upstream `doProbe`: `containerShouldRestart ||
    /// allContainersRestarting`): a terminated container that would not run again by its own
    /// rules keeps its worker while the pod restarts all its containers — another container's
    /// status shows an exit its rules answer with `RestartAllContainers`, or the pod's
    /// `AllContainersRestarting` condition is True.
    #[test]
    fn a_worker_outlives_its_container_while_the_pod_restarts_all_containers() {
        use crate::restart::ACTION_RESTART_ALL_CONTAINERS;
        use k8s_openapi::api::core::v1::PodCondition;
        let mut trigger = with_own_policy("trigger", Some("Never"), &[42]);
        if let Some(rules) = trigger.restart_policy_rules.as_mut() {
            rules[0].action = ACTION_RESTART_ALL_CONTAINERS.into();
        }
        let pod = Arc::new(Pod {
            spec: Some(PodSpec {
                restart_policy: Some("Never".into()),
                containers: vec![with_own_policy("c", Some("Never"), &[]), trigger],
                ..Default::default()
            }),
            ..Default::default()
        });
        let captured = PodContainer::find(&pod, "c").expect("c is in the pod");
        let terminated = |name: &str, exit_code| ContainerStatus {
            name: name.into(),
            container_id: Some(format!("x://{name}")),
            state: Some(ContainerState {
                terminated: Some(ContainerStateTerminated { exit_code, ..Default::default() }),
                ..Default::default()
            }),
            ..Default::default()
        };
        let status = |trigger_exit: i32, condition: bool| PodStatus {
            phase: Some("Running".into()),
            container_statuses: Some(vec![terminated("c", 137), terminated("trigger", trigger_exit)]),
            conditions: condition.then(|| {
                vec![PodCondition {
                    type_: "AllContainersRestarting".into(),
                    status: "True".into(),
                    ..Default::default()
                }]
            }),
            ..Default::default()
        };
        let cases = [
            ("the trigger exited by its rule", status(42, false), Next::Skip, Next::Stop),
            ("the condition is True", status(1, true), Next::Skip, Next::Stop),
            ("nothing restarts", status(1, false), Next::Stop, Next::Stop),
        ];
        for (name, pod_status, with_gate, without) in cases {
            for (after_exit, want) in
                [(AfterExit::AskTheContainerAndThePod, with_gate), (AfterExit::AskTheContainer, without)]
            {
                let spec = WorkerSpec { after_exit, ..spec(ProbeKind::Readiness) };
                let mut state = WorkerState { container_id: Some(id("x://c")), ..Default::default() };
                let mut ops = vec![];
                let status = PodProbeStatus::from(&pod_status);
                assert_eq!(
                    state.before_probe(&spec, &captured, Some(&status), t(10), &mut ops),
                    want,
                    "{name}, {after_exit:?}"
                );
            }
        }
    }

    #[test]
    fn deleting_pod_quiets_liveness_and_startup_but_not_readiness() {
        for (kind, want) in [(ProbeKind::Liveness, Next::Stop), (ProbeKind::Startup, Next::Stop)] {
            let spec = WorkerSpec { pod_deleting: true, ..spec(kind) };
            let mut state = WorkerState { container_id: Some(id("x://1")), ..Default::default() };
            let mut ops = vec![];
            assert_eq!(
                state.before(&spec, Some(&running("x://1", 0, None)), t(10), &mut ops),
                want,
                "{kind}"
            );
            assert_eq!(ops, vec![CacheOp::Set(id("x://1"), ProbeResult::Success)], "{kind}");
        }
        let spec = WorkerSpec { pod_deleting: true, ..spec(ProbeKind::Readiness) };
        let mut state = WorkerState { container_id: Some(id("x://1")), ..Default::default() };
        let mut ops = vec![];
        assert_eq!(
            state.before(&spec, Some(&running("x://1", 0, Some(true))), t(10), &mut ops),
            Next::Probe(id("x://1"))
        );
    }

    #[test]
    fn initial_delay_counts_whole_seconds_since_started_at() {
        let spec = WorkerSpec { initial_delay_seconds: 10, ..spec(ProbeKind::Readiness) };
        let status = running("x://1", 100, Some(true));
        let mut state = WorkerState { container_id: Some(id("x://1")), ..Default::default() };
        let mut ops = vec![];
        assert_eq!(state.before(&spec, Some(&status), t(109), &mut ops), Next::Skip);
        let just_under = t(109) + SignedDuration::from_millis(999);
        assert_eq!(state.before(&spec, Some(&status), just_under, &mut ops), Next::Skip);
        assert_eq!(state.before(&spec, Some(&status), t(110), &mut ops), Next::Probe(id("x://1")));
        let negative = WorkerSpec { initial_delay_seconds: -5, ..spec };
        assert_eq!(state.before(&negative, Some(&status), t(100), &mut ops), Next::Probe(id("x://1")));
    }

    #[test]
    fn initial_delay_in_milliseconds_replaces_the_seconds() {
        let spec = WorkerSpec {
            initial_delay_seconds: 10,
            initial_delay: Some(Duration::from_millis(1500)),
            ..spec(ProbeKind::Readiness)
        };
        let status = running("x://1", 100, Some(true));
        let mut state = WorkerState { container_id: Some(id("x://1")), ..Default::default() };
        let mut ops = vec![];
        let at = |ms| t(100) + SignedDuration::from_millis(ms);
        assert_eq!(state.before(&spec, Some(&status), at(1499), &mut ops), Next::Skip);
        assert_eq!(state.before(&spec, Some(&status), at(1500), &mut ops), Next::Probe(id("x://1")));
    }

    #[test]
    fn readiness_success_is_remembered_until_the_container_changes() {
        let readiness = WorkerSpec { success_threshold: 2, ..spec(ProbeKind::Readiness) };
        let mut state = WorkerState::new();
        let mut ops = vec![];
        state.before(&readiness, Some(&running("x://1", 0, Some(true))), t(10), &mut ops);
        state.after_probe(&readiness, ProbeResult::Success, &mut ops);
        assert!(!state.readiness_succeeded, "below the success threshold");
        state.after_probe(&readiness, ProbeResult::Success, &mut ops);
        assert!(state.readiness_succeeded);
        state.after_probe(&readiness, ProbeResult::Failure, &mut ops);
        assert!(state.readiness_succeeded, "a later failure does not start over");
        state.before(&readiness, Some(&running("x://2", 0, Some(true))), t(20), &mut ops);
        assert!(!state.readiness_succeeded, "a new container starts over");

        let liveness = spec(ProbeKind::Liveness);
        let mut state = WorkerState { container_id: Some(id("x://1")), ..Default::default() };
        state.after_probe(&liveness, ProbeResult::Success, &mut ops);
        assert!(!state.readiness_succeeded, "readiness only");
    }

    #[test]
    fn startup_gating() {
        let cases = [
            (ProbeKind::Startup, None, true),
            (ProbeKind::Startup, Some(false), true),
            (ProbeKind::Startup, Some(true), false),
            (ProbeKind::Liveness, None, false),
            (ProbeKind::Readiness, Some(false), false),
            (ProbeKind::Readiness, Some(true), true),
            (ProbeKind::Liveness, Some(true), true),
        ];
        for (kind, started, probes) in cases {
            let mut state = WorkerState { container_id: Some(id("x://1")), ..Default::default() };
            let mut ops = vec![];
            let next = state.before(&spec(kind), Some(&running("x://1", 0, started)), t(10), &mut ops);
            assert_eq!(next == Next::Probe(id("x://1")), probes, "{kind} started={started:?}");
        }
    }

    #[test]
    fn agent_restart_keeps_state_of_old_containers() {
        // Started 11 s before the manager: no seed. Started 9 s before: seeded.
        let mut ops = vec![];
        WorkerState::new().before(
            &spec(ProbeKind::Readiness),
            Some(&running("x://1", -11, Some(true))),
            t(0),
            &mut ops,
        );
        assert!(ops.is_empty(), "old container not reseeded: {ops:?}");
        WorkerState::new().before(
            &spec(ProbeKind::Readiness),
            Some(&running("x://1", -9, Some(true))),
            t(0),
            &mut ops,
        );
        assert_eq!(ops, vec![CacheOp::Set(id("x://1"), ProbeResult::Failure)]);
    }

    #[test]
    fn change_container_status_on_kubelet_restart_always_writes_the_initial_value() {
        let spec = WorkerSpec { keep_state_across_restart: false, ..spec(ProbeKind::Readiness) };
        let mut ops = vec![];
        WorkerState::new().before(&spec, Some(&running("x://1", -60, Some(true))), t(0), &mut ops);
        assert_eq!(ops, vec![CacheOp::Set(id("x://1"), ProbeResult::Failure)], "old container reset");
    }

    fn binding(container: &str, started_at: Option<i64>) -> Option<Box<ContainerBinding>> {
        Some(Box::new(ContainerBinding {
            container_id: id(container),
            pod_ip: None,
            started_at: started_at.map(t),
        }))
    }

    #[test]
    fn bound_worker_probes_only_its_container_instance() {
        let spec = WorkerSpec { bound: binding("x://2", None), ..spec(ProbeKind::Liveness) };
        let mut state = WorkerState::new();
        let mut ops = vec![];
        let next = state.before(&spec, Some(&running("x://1", 5, Some(true))), t(10), &mut ops);
        assert_eq!(next, Next::Skip, "the status still shows the previous instance");
        assert!(ops.is_empty(), "nothing written for another instance: {ops:?}");
        assert_eq!(state.container_id, None);
        let next = state.before(&spec, Some(&running("x://2", 5, Some(true))), t(10), &mut ops);
        assert_eq!(next, Next::Probe(id("x://2")));
        assert_eq!(ops, vec![CacheOp::Set(id("x://2"), ProbeResult::Success)]);
    }

    #[test]
    fn bound_start_time_counts_when_the_status_has_none() {
        let spec = WorkerSpec {
            initial_delay_seconds: 10,
            bound: binding("x://1", Some(100)),
            ..spec(ProbeKind::Readiness)
        };
        let mut status = running("x://1", 0, Some(true));
        if let Some(cs) = status.container_statuses.as_mut().and_then(|v| v.first_mut()) {
            cs.state = Some(ContainerState {
                running: Some(ContainerStateRunning { started_at: None }),
                ..Default::default()
            });
        }
        let mut state = WorkerState { container_id: Some(id("x://1")), ..Default::default() };
        let mut ops = vec![];
        assert_eq!(state.before(&spec, Some(&status), t(109), &mut ops), Next::Skip);
        assert_eq!(state.before(&spec, Some(&status), t(110), &mut ops), Next::Probe(id("x://1")));
    }

    #[test]
    fn resumed_worker_seeds_only_where_nothing_is_cached() {
        let mut state = WorkerState::resumed();
        let mut ops = vec![];
        state.before(&spec(ProbeKind::Readiness), Some(&running("x://1", 5, Some(true))), t(10), &mut ops);
        assert_eq!(ops, vec![CacheOp::Seed(id("x://1"), ProbeResult::Failure)]);
        ops.clear();
        state.before(&spec(ProbeKind::Readiness), Some(&running("x://2", 5, Some(true))), t(10), &mut ops);
        assert_eq!(ops, vec![CacheOp::Remove(id("x://1")), CacheOp::Set(id("x://2"), ProbeResult::Failure)]);
    }

    #[test]
    fn sidecar_already_started_is_seeded_success_only_when_kept_across_the_restart() {
        use ProbeResult::{Success, Unknown};
        // (case, started at, keep state across restart (gate off), ops)
        let cases = [
            ("ran before the agent started", -20, true, vec![CacheOp::Set(id("x://1"), Success)]),
            ("started within 10 s of the agent", -5, true, vec![CacheOp::Set(id("x://1"), Unknown)]),
            ("started after the agent", 5, true, vec![CacheOp::Set(id("x://1"), Unknown)]),
            ("ChangeContainerStatusOnKubeletRestart", -20, false, vec![CacheOp::Set(id("x://1"), Unknown)]),
        ];
        for (case, started_at, keep, want) in cases {
            let spec =
                WorkerSpec { is_sidecar: true, keep_state_across_restart: keep, ..spec(ProbeKind::Startup) };
            let mut status = running("x://1", started_at, Some(true));
            status.init_container_statuses = status.container_statuses.take();
            let mut ops = vec![];
            WorkerState::new().before(&spec, Some(&status), t(10), &mut ops);
            assert_eq!(ops, want, "case: {case}");
        }
    }

    fn run(state: &mut WorkerState, spec: &WorkerSpec, results: &[ProbeResult]) -> Vec<CacheOp> {
        let mut ops = vec![];
        for r in results {
            state.after_probe(spec, *r, &mut ops);
        }
        ops
    }

    #[test]
    fn thresholds() {
        use ProbeResult::{Failure as F, Success as S};
        let readiness =
            WorkerSpec { success_threshold: 2, failure_threshold: 3, ..spec(ProbeKind::Readiness) };
        let mut state = WorkerState { container_id: Some(id("x://1")), ..Default::default() };
        assert!(run(&mut state, &readiness, &[S]).is_empty(), "one success below 2");
        assert_eq!(run(&mut state, &readiness, &[S]), vec![CacheOp::Set(id("x://1"), S)]);
        assert!(run(&mut state, &readiness, &[F, F]).is_empty(), "two failures below 3");
        assert_eq!(run(&mut state, &readiness, &[F]), vec![CacheOp::Set(id("x://1"), F)]);
        assert_eq!(
            run(&mut state, &readiness, &[F]),
            vec![CacheOp::Set(id("x://1"), F)],
            "still written at 4"
        );
        assert!(!state.on_hold, "readiness never holds");
        assert!(run(&mut state, &readiness, &[S, F, S]).is_empty(), "alternating never reaches 2");
    }

    #[test]
    fn first_success_counts_as_one_from_zero_value() {
        let mut state = WorkerState { container_id: Some(id("x://1")), ..Default::default() };
        assert_eq!(run(&mut state, &spec(ProbeKind::Readiness), &[ProbeResult::Success]).len(), 1);
        assert_eq!(state.result_run, 1);
    }

    #[test]
    fn liveness_failure_and_startup_decisions_hold() {
        use ProbeResult::{Failure as F, Success as S};
        let mut state = WorkerState { container_id: Some(id("x://1")), ..Default::default() };
        let liveness = spec(ProbeKind::Liveness);
        run(&mut state, &liveness, &[S]);
        assert!(!state.on_hold, "liveness success does not hold");
        assert_eq!(run(&mut state, &liveness, &[F, F, F]), vec![CacheOp::Set(id("x://1"), F)]);
        assert!(state.on_hold);
        assert_eq!(state.result_run, 0);

        for result in [S, F] {
            let startup = WorkerSpec { failure_threshold: 1, ..spec(ProbeKind::Startup) };
            let mut state = WorkerState { container_id: Some(id("x://1")), ..Default::default() };
            run(&mut state, &startup, &[result]);
            assert!(state.on_hold, "startup holds after {result}");
        }
    }

    #[test]
    fn run_survives_container_change() {
        let readiness = WorkerSpec { failure_threshold: 2, ..spec(ProbeKind::Readiness) };
        let mut state = WorkerState { container_id: Some(id("x://1")), ..Default::default() };
        run(&mut state, &readiness, &[ProbeResult::Failure]);
        let mut ops = vec![];
        state.before(&readiness, Some(&running("x://2", 0, Some(true))), t(10), &mut ops);
        assert_eq!(state.result_run, 1);
        assert_eq!(
            run(&mut state, &readiness, &[ProbeResult::Failure]),
            vec![CacheOp::Set(id("x://2"), ProbeResult::Failure)]
        );
    }
}
