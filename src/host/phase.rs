//! The pod phase and kill decisions of the kubelet's pod sync, as pure functions
//! (upstream `kubelet_pods.go` `getPhase`, `kuberuntime_container.go` kill grace).

use std::time::Duration;

use super::runtime::REASON_RESTARTING_ALL_CONTAINERS;
use k8s_openapi::api::core::v1::{ContainerStatus, Pod, PodSpec};
use probelet_actors::prober::ProbeKind;
use probelet_actors::restart::{container_should_restart, restarts_after_probe_kill};
use probelet_actors::status::by_name::ByName;
use probelet_actors::status::{
    PHASE_FAILED, PHASE_PENDING, PHASE_RUNNING, PHASE_SUCCEEDED, is_restartable_init_container,
};

/// The kubelet never kills with less than this (`minimumGracePeriodInSeconds`).
pub const MINIMUM_GRACE_PERIOD: Duration = Duration::from_secs(2);

/// The longest grace period: the largest whole number of seconds Go's `time.Duration` holds
/// (about 292 years). The API accepts any non-negative `int64`; the kubelet multiplies it by
/// `time.Second`, which wraps above this. Here a larger value is this long, which is as good as
/// forever, and every deadline computed from it stays representable.
pub const MAXIMUM_GRACE_PERIOD: Duration = Duration::from_secs(i64::MAX as u64 / 1_000_000_000);

/// Upstream `getPhase` (v1.35): the pod phase from its container statuses. With
/// `container_rules` (the `ContainerRestartRules` gate, on by default) whether a stopped
/// container counts as restarting is each container's own decision for its exit code
/// (`restart::container_should_restart`) instead of the pod's policy: the pod runs while any
/// stopped container will run again, and fails when an init container failed for good. `pod_has_initialized` is upstream's `HasAnyActiveRegularContainerStarted` (see
/// [`has_any_regular_container_started`]): once a regular container has run, a sidecar that is
/// not started (yet, or again) no longer holds the pod in `Pending`.
///
/// A running sidecar counts as running, so a pod whose regular containers have all completed
/// stays `Running` until its sidecars are stopped (the runtime then stops them, as upstream's
/// `computePodActions` kills such a pod). Upstream's `podIsTerminal` branch is left out: it
/// never applies to static pods, and every standalone pod is one (its source is a file).
pub fn pod_phase(
    spec: &PodSpec,
    init: &[ContainerStatus],
    containers: &[ContainerStatus],
    pod_has_initialized: bool,
    container_rules: bool,
) -> &'static str {
    pod_phase_restarting_all(spec, init, containers, pod_has_initialized, container_rules, false)
}

/// [`pod_phase`] of a pod that may be restarting all its containers
/// (`RestartAllContainersOnContainerExits`; `restarting_all`: upstream
/// `ShouldAllContainersRestart` says it is). While it is, every stopped container counts as
/// restarting, whatever its own rules say (this runtime shows the killed containers before it
/// removes them; upstream kills and removes in one sync). A container the restart removed waits
/// with its last state `terminated` 137, reason `RestartingAllContainers`: upstream's
/// `getPhase` reads that as an exit that will run again (the reason makes it restartable), so
/// a removed regular container counts as stopped and a removed init container as neither
/// pending nor failed for good. The pod is therefore `Running` once every container is removed,
/// `Pending` again while an init container runs (or a container that never ran waits), and
/// never `Failed` or `Succeeded` on the way, which would end it for good (docs/prober.md
/// §3.11).
pub fn pod_phase_restarting_all(
    spec: &PodSpec,
    init: &[ContainerStatus],
    containers: &[ContainerStatus],
    pod_has_initialized: bool,
    container_rules: bool,
    restarting_all: bool,
) -> &'static str {
    let policy = spec.restart_policy.as_deref().unwrap_or("Always");
    // Indexed once: a scan per container is quadratic in a pod's containers.
    let (init, containers) = (ByName::new(init), ByName::new(containers));
    let find = |list: &ByName<'_, ContainerStatus>, name: &str| list.get(name).map(Observed::of);

    let mut pending_regular_init = 0;
    let mut pending_sidecars = 0;
    let mut failed_initialization = 0;
    // Under the gate: stopped containers that will not run again.
    let mut failed_initialization_not_restartable = 0;
    let will_not_restart = |container, code| {
        container_rules && !restarting_all && !container_should_restart(container, spec, code)
    };
    for container in spec.init_containers.iter().flatten().filter(|c| !is_restartable_init_container(c)) {
        match find(&init, &container.name) {
            None | Some(Observed::Running | Observed::Unknown) => pending_regular_init += 1,
            Some(Observed::Terminated(code) | Observed::Waiting { last_exit: Some(code) }) if code != 0 => {
                failed_initialization += 1;
                if will_not_restart(container, code) {
                    failed_initialization_not_restartable += 1;
                }
            }
            Some(Observed::Terminated(_)) => {}
            Some(Observed::Waiting { last_exit: Some(_) }) => {}
            Some(Observed::Waiting { last_exit: None }) => pending_regular_init += 1,
            // Exit 137, restartable by its reason: counted, never failed for good.
            Some(Observed::Removed) => failed_initialization += 1,
        }
    }

    let (mut unknown, mut running, mut waiting, mut stopped, mut succeeded) = (0, 0, 0, 0, 0);
    let mut stopped_not_restartable = 0;
    for container in spec.init_containers.iter().flatten().filter(|c| is_restartable_init_container(c)) {
        let Some(status) = init.get(&container.name) else {
            unknown += 1;
            continue;
        };
        match Observed::of(status) {
            Observed::Running => {
                if status.started != Some(true) {
                    pending_sidecars += 1;
                }
                running += 1;
            }
            // A stopped, crash-looping or removed sidecar does not count towards the phase.
            Observed::Terminated(_) | Observed::Waiting { last_exit: Some(_) } | Observed::Removed => {}
            Observed::Waiting { last_exit: None } => {
                pending_sidecars += 1;
                waiting += 1;
            }
            Observed::Unknown => {
                pending_sidecars += 1;
                unknown += 1;
            }
        }
    }
    for container in &spec.containers {
        match find(&containers, &container.name) {
            None | Some(Observed::Unknown) => unknown += 1,
            Some(Observed::Running) => running += 1,
            Some(Observed::Terminated(code)) => {
                stopped += 1;
                if code == 0 {
                    succeeded += 1;
                }
                if will_not_restart(container, code) {
                    stopped_not_restartable += 1;
                }
            }
            // Upstream reads the last exit code here too, but this runtime shows a regular
            // container as waiting only when it will start it again: after a probe's kill, say,
            // that the container answered with exit 0 under `OnFailure`. Read by its exit code,
            // such a pod would be called Failed while it restarts, and its probes would stop for
            // good (docs/prober.md §3.10). No probe kills an init container.
            Some(Observed::Waiting { last_exit: Some(_) }) => stopped += 1,
            Some(Observed::Waiting { last_exit: None }) => waiting += 1,
            // Exit 137 (not a success), restartable by its reason.
            Some(Observed::Removed) => stopped += 1,
        }
    }

    if container_rules && failed_initialization_not_restartable > 0 {
        return PHASE_FAILED;
    }
    if !container_rules && failed_initialization > 0 && policy == "Never" {
        return PHASE_FAILED;
    }
    // Once a regular container has run, sidecars restarting or not started do not put the pod
    // back into Pending.
    if pending_regular_init > 0 || (pending_sidecars > 0 && !pod_has_initialized) || waiting > 0 {
        return PHASE_PENDING;
    }
    if running > 0 && unknown == 0 {
        return PHASE_RUNNING;
    }
    if running == 0 && stopped > 0 && unknown == 0 && container_rules {
        return if stopped != stopped_not_restartable {
            // Some stopped container runs again.
            PHASE_RUNNING
        } else if stopped == succeeded {
            PHASE_SUCCEEDED
        } else {
            PHASE_FAILED
        };
    }
    if running == 0 && stopped > 0 && unknown == 0 {
        return match policy {
            // Every container is being restarted.
            "Always" => PHASE_RUNNING,
            _ if stopped == succeeded => PHASE_SUCCEEDED,
            "Never" => PHASE_FAILED,
            // OnFailure: at least one failed and is being restarted.
            _ => PHASE_RUNNING,
        };
    }
    PHASE_PENDING
}

/// Upstream `HasAnyActiveRegularContainerStarted`: some regular container has been created, so
/// the pod has been initialized. A created container is one the runtime gave an ID.
pub fn has_any_regular_container_started(spec: &PodSpec, containers: &[ContainerStatus]) -> bool {
    containers.iter().any(|s| s.container_id.is_some() && spec.containers.iter().any(|c| c.name == s.name))
}

/// A container status's state as `getPhase` distinguishes it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Observed {
    Running,
    Terminated(i32),
    /// `last_exit`: the exit code of the previous instance, if there was one.
    Waiting {
        last_exit: Option<i32>,
    },
    /// Waiting, its last state the removal by a restart of all containers (reason
    /// `RestartingAllContainers`, exit 137): an exit that runs again whatever the rules say.
    Removed,
    /// No state set.
    Unknown,
}

impl Observed {
    fn of(status: &ContainerStatus) -> Observed {
        let state = status.state.as_ref();
        if state.is_some_and(|s| s.running.is_some()) {
            return Observed::Running;
        }
        if let Some(terminated) = state.and_then(|s| s.terminated.as_ref()) {
            return Observed::Terminated(terminated.exit_code);
        }
        if state.is_some_and(|s| s.waiting.is_some()) {
            let last = status.last_state.as_ref().and_then(|s| s.terminated.as_ref());
            // A container a restart of all containers removed (waiting for it, or being
            // created again): upstream tells it by the reason of its last state.
            if last.is_some_and(|t| t.reason.as_deref() == Some(REASON_RESTARTING_ALL_CONTAINERS)) {
                return Observed::Removed;
            }
            return Observed::Waiting { last_exit: last.map(|t| t.exit_code) };
        }
        Observed::Unknown
    }
}

/// Upstream's grace period for killing a container after its `kind` probe failed: the pod's
/// `deletionGracePeriodSeconds` if set; else the probe's own `terminationGracePeriodSeconds`
/// (liveness and startup only) when the pod sets one too, else the pod's; never below 2 s.
pub fn kill_grace_period(pod: &Pod, container: &str, kind: Option<ProbeKind>) -> Duration {
    let spec = pod.spec.clone().unwrap_or_default();
    let pod_grace = spec.termination_grace_period_seconds;
    let probe_grace = kind.and_then(|kind| {
        let c = spec
            .containers
            .iter()
            .chain(spec.init_containers.iter().flatten())
            .find(|c| c.name == container)?;
        kind.probe_of(c)?.termination_grace_period_seconds
    });
    let seconds = match (pod.metadata.deletion_grace_period_seconds, pod_grace, probe_grace) {
        (Some(deleting), _, _) => deleting,
        (None, Some(_), Some(probe)) if kind.is_some_and(|k| k != ProbeKind::Readiness) => probe,
        (None, Some(pod), _) => pod,
        (None, None, _) => 0,
    };
    Duration::from_secs(u64::try_from(seconds).unwrap_or(0)).clamp(MINIMUM_GRACE_PERIOD, MAXIMUM_GRACE_PERIOD)
}

/// The kill message for a failed liveness or startup probe: upstream `computePodActions` says
/// `Container c failed liveness probe`, with `, will be restarted` when it restarts the
/// container (`restart::restarts_after_probe_kill`: the pod's policy, or under
/// `ContainerRestartRules` the container's own); `computeInitContainerActions` says
/// `Init container c failed liveness probe` of a sidecar (which always restarts), with no suffix.
pub fn probe_kill_message(pod: &Pod, container: &str, kind: ProbeKind, container_rules: bool) -> String {
    let what = match kind {
        ProbeKind::Startup => "startup",
        _ => "liveness",
    };
    let spec = probelet_actors::status::spec_of(pod);
    if spec.init_containers.iter().flatten().any(|c| c.name == container && is_restartable_init_container(c))
    {
        return format!("Init container {container} failed {what} probe");
    }
    let base = format!("Container {container} failed {what} probe");
    let restarts = spec
        .containers
        .iter()
        .find(|c| c.name == container)
        .is_none_or(|c| restarts_after_probe_kill(c, &spec, container_rules));
    if restarts { format!("{base}, will be restarted") } else { base }
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::{
        Container, ContainerState, ContainerStateRunning, ContainerStateTerminated, ContainerStateWaiting,
        Probe,
    };
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

    /// A spec; init container names starting with `s` are sidecars.
    fn spec(policy: &str, init: &[&str], containers: &[&str]) -> PodSpec {
        let c = |n: &&str| Container { name: (*n).into(), ..Default::default() };
        let init = init
            .iter()
            .map(|n| Container { restart_policy: n.starts_with('s').then(|| "Always".to_owned()), ..c(n) });
        PodSpec {
            restart_policy: Some(policy.into()),
            init_containers: Some(init.collect()),
            containers: containers.iter().map(c).collect(),
            ..Default::default()
        }
    }

    fn running(name: &str) -> ContainerStatus {
        ContainerStatus {
            name: name.into(),
            state: Some(ContainerState {
                running: Some(ContainerStateRunning::default()),
                ..Default::default()
            }),
            ..Default::default()
        }
    }

    /// Running with `started: true`.
    fn started(name: &str) -> ContainerStatus {
        ContainerStatus { started: Some(true), ..running(name) }
    }

    fn waiting(name: &str) -> ContainerStatus {
        ContainerStatus {
            name: name.into(),
            state: Some(ContainerState {
                waiting: Some(ContainerStateWaiting::default()),
                ..Default::default()
            }),
            ..Default::default()
        }
    }

    fn exited(name: &str, code: i32) -> ContainerStatus {
        ContainerStatus {
            name: name.into(),
            state: Some(ContainerState {
                terminated: Some(ContainerStateTerminated { exit_code: code, ..Default::default() }),
                ..Default::default()
            }),
            ..Default::default()
        }
    }

    /// Waiting to be restarted after exiting with `code` (CrashLoopBackOff).
    fn crash_looping(name: &str, code: i32) -> ContainerStatus {
        ContainerStatus { last_state: exited(name, code).state, ..waiting(name) }
    }

    #[test]
    fn phases() {
        let (pending, running_, succeeded, failed) =
            (PHASE_PENDING, PHASE_RUNNING, PHASE_SUCCEEDED, PHASE_FAILED);
        // (case, spec, init statuses, regular statuses, pod has initialized, phase)
        let cases = [
            ("nothing started", spec("Always", &[], &["a"]), vec![], vec![], false, pending),
            ("waiting", spec("Always", &[], &["a"]), vec![], vec![waiting("a")], false, pending),
            ("running", spec("Always", &[], &["a"]), vec![], vec![running("a")], true, running_),
            ("one unknown", spec("Always", &[], &["a", "b"]), vec![], vec![running("a")], true, pending),
            (
                "no state",
                spec("Always", &[], &["a"]),
                vec![],
                vec![ContainerStatus::default()],
                false,
                pending,
            ),
            (
                "init running",
                spec("Always", &["i"], &["a"]),
                vec![running("i")],
                vec![waiting("a")],
                false,
                pending,
            ),
            (
                "init done",
                spec("Always", &["i"], &["a"]),
                vec![exited("i", 0)],
                vec![running("a")],
                true,
                running_,
            ),
            (
                "init failed, Never",
                spec("Never", &["i"], &["a"]),
                vec![exited("i", 1)],
                vec![waiting("a")],
                false,
                failed,
            ),
            (
                "init crash-looping, Never",
                spec("Never", &["i"], &["a"]),
                vec![crash_looping("i", 1)],
                vec![waiting("a")],
                false,
                failed,
            ),
            (
                "init failed, Always",
                spec("Always", &["i"], &["a"]),
                vec![exited("i", 1)],
                vec![waiting("a")],
                false,
                pending,
            ),
            (
                "init waiting after exit 0",
                spec("Always", &["i"], &["a"]),
                vec![crash_looping("i", 0)],
                vec![],
                false,
                pending,
            ),
            ("exited 0, Never", spec("Never", &[], &["a"]), vec![], vec![exited("a", 0)], true, succeeded),
            ("exited 1, Never", spec("Never", &[], &["a"]), vec![], vec![exited("a", 1)], true, failed),
            (
                "exited 1, OnFailure",
                spec("OnFailure", &[], &["a"]),
                vec![],
                vec![exited("a", 1)],
                true,
                running_,
            ),
            (
                "crash-looping, OnFailure",
                spec("OnFailure", &[], &["a"]),
                vec![],
                vec![crash_looping("a", 1)],
                true,
                running_,
            ),
            (
                "exited 0, OnFailure",
                spec("OnFailure", &[], &["a"]),
                vec![],
                vec![exited("a", 0)],
                true,
                succeeded,
            ),
            ("exited, Always", spec("Always", &[], &["a"]), vec![], vec![exited("a", 0)], true, running_),
            // Sidecars (upstream TestPodPhaseWithRestart*RestartableInitContainers).
            (
                "sidecar and regular running",
                spec("Always", &["s"], &["a"]),
                vec![started("s")],
                vec![running("a")],
                true,
                running_,
            ),
            (
                "sidecar running not started, regular running",
                spec("Always", &["s"], &["a"]),
                vec![running("s")],
                vec![running("a")],
                true,
                running_,
            ),
            (
                "sidecar running, regular waiting",
                spec("Always", &["s"], &["a"]),
                vec![running("s")],
                vec![waiting("a")],
                false,
                pending,
            ),
            (
                "sidecar started, regular waiting",
                spec("Always", &["s"], &["a"]),
                vec![started("s")],
                vec![waiting("a")],
                false,
                pending,
            ),
            (
                "sidecar running alone",
                spec("Always", &["s"], &["a"]),
                vec![running("s")],
                vec![],
                false,
                pending,
            ),
            (
                "sidecar crash-looping, regular running",
                spec("Always", &["s"], &["a"]),
                vec![crash_looping("s", 1)],
                vec![running("a")],
                true,
                running_,
            ),
            (
                "sidecar stopped, regular running",
                spec("Always", &["s"], &["a"]),
                vec![exited("s", 137)],
                vec![running("a")],
                true,
                running_,
            ),
            (
                "sidecar not created yet, regular running",
                spec("Always", &["s"], &["a"]),
                vec![waiting("s")],
                vec![running("a")],
                true,
                pending,
            ),
            (
                "sidecar status missing",
                spec("Always", &["s"], &["a"]),
                vec![],
                vec![running("a")],
                true,
                pending,
            ),
            (
                "regular init, sidecar and regular running",
                spec("Always", &["i", "s"], &["a"]),
                vec![running("i"), running("s")],
                vec![running("a")],
                true,
                pending,
            ),
            (
                "init done, sidecar running, regular crash-looping",
                spec("Always", &["i", "s"], &["a"]),
                vec![exited("i", 0), running("s")],
                vec![crash_looping("a", 1)],
                true,
                running_,
            ),
            // A running sidecar keeps a completed pod Running until the runtime stops it.
            (
                "sidecar running, regular exited 0, Never",
                spec("Never", &["s"], &["a"]),
                vec![started("s")],
                vec![exited("a", 0)],
                true,
                running_,
            ),
            (
                "sidecar stopped, regular exited 0, Never",
                spec("Never", &["s"], &["a"]),
                vec![exited("s", 143)],
                vec![exited("a", 0)],
                true,
                succeeded,
            ),
            (
                "sidecar stopped, regular exited 0, OnFailure",
                spec("OnFailure", &["s"], &["a"]),
                vec![exited("s", 0)],
                vec![exited("a", 0)],
                true,
                succeeded,
            ),
            (
                "sidecar crash-looping, regular exited 0, Never",
                spec("Never", &["s"], &["a"]),
                vec![crash_looping("s", 1)],
                vec![exited("a", 0)],
                true,
                succeeded,
            ),
            (
                "sidecar stopped, regular exited 1, Never",
                spec("Never", &["s"], &["a"]),
                vec![exited("s", 0)],
                vec![exited("a", 1)],
                true,
                failed,
            ),
        ];
        // No container here has a policy of its own: the gate changes none of these.
        for (name, spec, init, containers, initialized, want) in cases {
            for container_rules in [false, true] {
                assert_eq!(
                    pod_phase(&spec, &init, &containers, initialized, container_rules),
                    want,
                    "case {name}, gate {container_rules}"
                );
            }
        }
    }

    /// `ContainerRestartRules`: a stopped container its own policy restarts keeps the pod
    /// Running; one that will not run again lets a pod complete or fail whatever the pod's
    /// policy; an init container that failed for good fails the pod. Gate off, only the pod's
    /// policy counts.
    #[test]
    fn a_containers_own_policy_decides_the_phase_under_container_restart_rules() {
        let with_own = |mut spec: PodSpec, name: &str, policy: &str| {
            for c in spec.containers.iter_mut().chain(spec.init_containers.iter_mut().flatten()) {
                if c.name == name {
                    c.restart_policy = Some(policy.into());
                }
            }
            spec
        };
        let cases = [
            (
                "own Always in a Never pod, exited 0",
                with_own(spec("Never", &[], &["a", "b"]), "a", "Always"),
                vec![],
                vec![exited("a", 0), exited("b", 0)],
                (PHASE_RUNNING, PHASE_SUCCEEDED),
            ),
            (
                "own Never in an Always pod, exited 1",
                with_own(spec("Always", &[], &["a"]), "a", "Never"),
                vec![],
                vec![exited("a", 1)],
                (PHASE_FAILED, PHASE_RUNNING),
            ),
            (
                "own OnFailure in an Always pod, exited 0",
                with_own(spec("Always", &[], &["a"]), "a", "OnFailure"),
                vec![],
                vec![exited("a", 0)],
                (PHASE_SUCCEEDED, PHASE_RUNNING),
            ),
            (
                "own OnFailure, crash-looping after exit 2, Never pod",
                with_own(spec("Never", &[], &["a"]), "a", "OnFailure"),
                vec![],
                vec![crash_looping("a", 2)],
                (PHASE_RUNNING, PHASE_FAILED),
            ),
            (
                "a probe's kill answered with exit 0 under OnFailure, waiting to restart",
                spec("OnFailure", &[], &["a"]),
                vec![],
                vec![crash_looping("a", 0)],
                (PHASE_RUNNING, PHASE_RUNNING),
            ),
            (
                "init with own Never failed in an Always pod",
                with_own(spec("Always", &["i"], &["a"]), "i", "Never"),
                vec![exited("i", 1)],
                vec![waiting("a")],
                (PHASE_FAILED, PHASE_PENDING),
            ),
            (
                "init with own OnFailure failed in a Never pod",
                with_own(spec("Never", &["i"], &["a"]), "i", "OnFailure"),
                vec![exited("i", 1)],
                vec![waiting("a")],
                (PHASE_PENDING, PHASE_FAILED),
            ),
        ];
        for (name, spec, init, containers, (on, off)) in cases {
            assert_eq!(pod_phase(&spec, &init, &containers, true, true), on, "{name}, gate on");
            assert_eq!(pod_phase(&spec, &init, &containers, true, false), off, "{name}, gate off");
        }
    }

    #[test]
    fn a_created_regular_container_means_initialized() {
        let spec = spec("Always", &["s"], &["a"]);
        let with_id = |s: ContainerStatus| ContainerStatus { container_id: Some("probelet://1".into()), ..s };
        assert!(!has_any_regular_container_started(&spec, &[waiting("a")]));
        assert!(
            !has_any_regular_container_started(&spec, &[with_id(running("s"))]),
            "a sidecar is not regular"
        );
        assert!(has_any_regular_container_started(&spec, &[with_id(running("a"))]));
        assert!(has_any_regular_container_started(&spec, &[with_id(crash_looping("a", 1))]));
    }

    fn pod(pod_grace: Option<i64>, probe_grace: Option<i64>, deleting: Option<i64>, policy: &str) -> Pod {
        let probe = Probe { termination_grace_period_seconds: probe_grace, ..Default::default() };
        Pod {
            metadata: ObjectMeta { deletion_grace_period_seconds: deleting, ..Default::default() },
            spec: Some(PodSpec {
                restart_policy: Some(policy.into()),
                termination_grace_period_seconds: pod_grace,
                containers: vec![Container {
                    name: "app".into(),
                    liveness_probe: Some(probe.clone()),
                    startup_probe: Some(probe),
                    ..Default::default()
                }],
                ..Default::default()
            }),
            status: None,
        }
    }

    #[test]
    fn kill_grace() {
        let secs = Duration::from_secs;
        let cases = [
            ("pod value", pod(Some(30), None, None, "Always"), Some(ProbeKind::Liveness), secs(30)),
            ("probe value wins", pod(Some(30), Some(5), None, "Always"), Some(ProbeKind::Liveness), secs(5)),
            (
                "startup probe value",
                pod(Some(30), Some(7), None, "Always"),
                Some(ProbeKind::Startup),
                secs(7),
            ),
            (
                "probe larger than pod allowed",
                pod(Some(3), Some(60), None, "Always"),
                Some(ProbeKind::Liveness),
                secs(60),
            ),
            (
                "deletion grace wins",
                pod(Some(30), Some(5), Some(12), "Always"),
                Some(ProbeKind::Liveness),
                secs(12),
            ),
            (
                "nothing set: 2 s floor",
                pod(None, Some(9), None, "Always"),
                Some(ProbeKind::Liveness),
                secs(2),
            ),
            ("floor", pod(Some(0), None, None, "Always"), None, secs(2)),
            ("ceiling", pod(Some(i64::MAX), None, None, "Always"), None, MAXIMUM_GRACE_PERIOD),
            (
                "probe ceiling",
                pod(Some(1), Some(i64::MAX), None, "Always"),
                Some(ProbeKind::Liveness),
                MAXIMUM_GRACE_PERIOD,
            ),
        ];
        for (name, pod, kind, want) in cases {
            assert_eq!(kill_grace_period(&pod, "app", kind), want, "case {name}");
        }
    }

    #[test]
    fn kill_messages() {
        for gate in [false, true] {
            assert_eq!(
                probe_kill_message(&pod(None, None, None, "Always"), "app", ProbeKind::Liveness, gate),
                "Container app failed liveness probe, will be restarted"
            );
            assert_eq!(
                probe_kill_message(&pod(None, None, None, "Never"), "app", ProbeKind::Startup, gate),
                "Container app failed startup probe"
            );
            // A sidecar: computeInitContainerActions' words, whatever the pod's policy.
            let mut with_sidecar = pod(None, None, None, "Never");
            let sidecar = Container {
                name: "proxy".into(),
                restart_policy: Some("Always".into()),
                ..Default::default()
            };
            with_sidecar.spec.as_mut().unwrap().init_containers = Some(vec![sidecar]);
            assert_eq!(
                probe_kill_message(&with_sidecar, "proxy", ProbeKind::Liveness, gate),
                "Init container proxy failed liveness probe"
            );
            assert_eq!(
                probe_kill_message(&with_sidecar, "proxy", ProbeKind::Startup, gate),
                "Init container proxy failed startup probe"
            );
        }
    }

    /// `ContainerRestartRules`: the suffix follows the container's own policy, as the restart
    /// does.
    #[test]
    fn under_container_restart_rules_the_kill_message_follows_the_containers_own_policy() {
        let own = |pod_policy: &str, policy: &str| {
            let mut p = pod(None, None, None, pod_policy);
            p.spec.as_mut().unwrap().containers[0].restart_policy = Some(policy.into());
            p
        };
        assert_eq!(
            probe_kill_message(&own("Always", "Never"), "app", ProbeKind::Liveness, true),
            "Container app failed liveness probe"
        );
        assert_eq!(
            probe_kill_message(&own("Never", "Always"), "app", ProbeKind::Liveness, true),
            "Container app failed liveness probe, will be restarted"
        );
        assert_eq!(
            probe_kill_message(&own("Never", "Always"), "app", ProbeKind::Liveness, false),
            "Container app failed liveness probe"
        );
    }

    /// `RestartAllContainersOnContainerExits`: while the pod restarts all its containers, a
    /// stopped container counts as restarting whatever its rules say (the pod runs, it does not
    /// fail), and a container the restart removed counts, as upstream's `getPhase` reads it, as
    /// an exit (137) that runs again: the pod is `Running` once all are removed (not `Pending`,
    /// nor `Failed` by the 137 under `Never`), `Pending` again while the init container runs,
    /// `Pending` too while a container that never ran waits.
    #[test]
    fn a_pod_restarting_all_its_containers_neither_fails_nor_completes() {
        let spec = spec("Never", &["i"], &["a", "t"]);
        let removed = |name: &str| ContainerStatus {
            state: Some(ContainerState {
                waiting: Some(ContainerStateWaiting {
                    reason: Some("RestartingAllContainers".into()),
                    message: Some("The container is removed because RestartAllContainers in place".into()),
                }),
                ..Default::default()
            }),
            last_state: Some(ContainerState {
                terminated: Some(ContainerStateTerminated {
                    exit_code: 137,
                    reason: Some("RestartingAllContainers".into()),
                    ..Default::default()
                }),
                ..Default::default()
            }),
            ..waiting(name)
        };
        let (init, stopped) = (vec![exited("i", 0)], vec![exited("a", 137), exited("t", 42)]);
        assert_eq!(pod_phase_restarting_all(&spec, &init, &stopped, true, true, true), PHASE_RUNNING);
        assert_eq!(pod_phase_restarting_all(&spec, &init, &stopped, true, true, false), PHASE_FAILED);
        let (init, removed_all) = (vec![removed("i")], vec![removed("a"), removed("t")]);
        // Being created again, the init container waits with another reason and the same last
        // state.
        let mut creating = removed("i");
        if let Some(w) = creating.state.as_mut().and_then(|s| s.waiting.as_mut()) {
            w.reason = Some("ContainerCreating".into());
        }
        for init in [init, vec![creating]] {
            for restarting in [true, false] {
                assert_eq!(
                    pod_phase_restarting_all(&spec, &init, &removed_all, true, true, restarting),
                    PHASE_RUNNING,
                    "restarting: {restarting}, {init:?}"
                );
            }
        }
        // The init container runs again: the pod is initializing.
        let init_running = vec![ContainerStatus { last_state: removed("i").last_state, ..running("i") }];
        assert_eq!(
            pod_phase_restarting_all(&spec, &init_running, &removed_all, false, true, false),
            PHASE_PENDING
        );
        // A container that had never run (it was waiting, untouched by the removal) holds the
        // pod in Pending.
        let (init, never_ran) = (vec![removed("i")], vec![removed("a"), waiting("t")]);
        assert_eq!(pod_phase_restarting_all(&spec, &init, &never_ran, true, true, false), PHASE_PENDING);
    }
}
