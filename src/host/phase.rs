//! The pod phase and kill decisions of the kubelet's pod sync, as pure functions
//! (upstream `kubelet_pods.go` `getPhase`, `kuberuntime_container.go` kill grace).

use std::time::Duration;

use k8s_openapi::api::core::v1::{ContainerStatus, Pod, PodSpec};
use probelet_actors::prober::ProbeKind;
use probelet_actors::status::{
    PHASE_FAILED, PHASE_PENDING, PHASE_RUNNING, PHASE_SUCCEEDED, is_restartable_init_container,
};

/// The kubelet never kills with less than this (`minimumGracePeriodInSeconds`).
pub const MINIMUM_GRACE_PERIOD: Duration = Duration::from_secs(2);

/// Upstream `getPhase`: the pod phase from its container statuses.
pub fn pod_phase(spec: &PodSpec, init: &[ContainerStatus], containers: &[ContainerStatus]) -> &'static str {
    let policy = spec.restart_policy.as_deref().unwrap_or("Always");
    let find = |list: &[ContainerStatus], name: &str| list.iter().find(|s| s.name == name).cloned();

    let mut pending_initialization = 0;
    let mut failed_initialization = 0;
    let mut sidecars_running = 0;
    for container in spec.init_containers.iter().flatten() {
        let Some(status) = find(init, &container.name) else {
            pending_initialization += 1;
            continue;
        };
        let state = status.state.clone().unwrap_or_default();
        if is_restartable_init_container(container) {
            if state.running.is_some() && status.started == Some(true) {
                sidecars_running += 1;
            } else {
                pending_initialization += 1;
            }
            continue;
        }
        if state.running.is_some() {
            pending_initialization += 1;
        } else if let Some(terminated) = &state.terminated {
            if terminated.exit_code != 0 {
                failed_initialization += 1;
            }
        } else {
            let last_failed = status
                .last_state
                .as_ref()
                .and_then(|s| s.terminated.as_ref())
                .is_some_and(|t| t.exit_code != 0);
            if last_failed {
                failed_initialization += 1;
            } else {
                pending_initialization += 1;
            }
        }
    }

    let (mut unknown, mut running, mut waiting, mut stopped, mut succeeded) = (0, 0, 0, 0, 0);
    for container in &spec.containers {
        let Some(status) = find(containers, &container.name) else {
            unknown += 1;
            continue;
        };
        let state = status.state.clone().unwrap_or_default();
        if state.running.is_some() {
            running += 1;
        } else if let Some(terminated) = &state.terminated {
            stopped += 1;
            if terminated.exit_code == 0 {
                succeeded += 1;
            }
        } else if status.last_state.as_ref().and_then(|s| s.terminated.as_ref()).is_some() {
            stopped += 1;
        } else {
            waiting += 1;
        }
    }

    if failed_initialization > 0 && policy == "Never" {
        return PHASE_FAILED;
    }
    if pending_initialization > 0 || (failed_initialization > 0 && running == 0) {
        return PHASE_PENDING;
    }
    if waiting > 0 {
        return PHASE_PENDING;
    }
    if running > 0 && unknown == 0 {
        return PHASE_RUNNING;
    }
    if running == 0 && stopped > 0 && unknown == 0 {
        // Sidecars still running do not keep a finished pod alive.
        let _ = sidecars_running;
        return match policy {
            "Always" => PHASE_RUNNING,
            _ if stopped == succeeded => PHASE_SUCCEEDED,
            "OnFailure" => PHASE_RUNNING,
            _ => PHASE_FAILED,
        };
    }
    PHASE_PENDING
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
    Duration::from_secs(u64::try_from(seconds).unwrap_or(0)).max(MINIMUM_GRACE_PERIOD)
}

/// The kill message for a failed liveness or startup probe, with `, will be restarted` when
/// the pod's restart policy restarts it.
pub fn probe_kill_message(pod: &Pod, container: &str, kind: ProbeKind) -> String {
    let what = match kind {
        ProbeKind::Startup => "startup",
        _ => "liveness",
    };
    let policy = pod.spec.as_ref().and_then(|s| s.restart_policy.as_deref()).unwrap_or("Always");
    let is_sidecar = pod.spec.as_ref().is_some_and(|s| {
        s.init_containers.iter().flatten().any(|c| c.name == container && is_restartable_init_container(c))
    });
    let restarts = policy != "Never" || is_sidecar;
    let base = format!("Container {container} failed {what} probe");
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

    fn spec(policy: &str, init: &[&str], containers: &[&str]) -> PodSpec {
        let c = |n: &&str| Container { name: (*n).into(), ..Default::default() };
        PodSpec {
            restart_policy: Some(policy.into()),
            init_containers: Some(init.iter().map(c).collect()),
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

    #[test]
    fn phases() {
        let cases = [
            ("nothing started", spec("Always", &[], &["a"]), vec![], vec![], PHASE_PENDING),
            ("waiting", spec("Always", &[], &["a"]), vec![], vec![waiting("a")], PHASE_PENDING),
            ("running", spec("Always", &[], &["a"]), vec![], vec![running("a")], PHASE_RUNNING),
            ("one unknown", spec("Always", &[], &["a", "b"]), vec![], vec![running("a")], PHASE_PENDING),
            (
                "init running",
                spec("Always", &["i"], &["a"]),
                vec![running("i")],
                vec![waiting("a")],
                PHASE_PENDING,
            ),
            (
                "init done",
                spec("Always", &["i"], &["a"]),
                vec![exited("i", 0)],
                vec![running("a")],
                PHASE_RUNNING,
            ),
            (
                "init failed, Never",
                spec("Never", &["i"], &["a"]),
                vec![exited("i", 1)],
                vec![waiting("a")],
                PHASE_FAILED,
            ),
            (
                "init failed, Always",
                spec("Always", &["i"], &["a"]),
                vec![exited("i", 1)],
                vec![waiting("a")],
                PHASE_PENDING,
            ),
            ("exited 0, Never", spec("Never", &[], &["a"]), vec![], vec![exited("a", 0)], PHASE_SUCCEEDED),
            ("exited 1, Never", spec("Never", &[], &["a"]), vec![], vec![exited("a", 1)], PHASE_FAILED),
            (
                "exited 1, OnFailure",
                spec("OnFailure", &[], &["a"]),
                vec![],
                vec![exited("a", 1)],
                PHASE_RUNNING,
            ),
            (
                "exited 0, OnFailure",
                spec("OnFailure", &[], &["a"]),
                vec![],
                vec![exited("a", 0)],
                PHASE_SUCCEEDED,
            ),
            ("exited, Always", spec("Always", &[], &["a"]), vec![], vec![exited("a", 0)], PHASE_RUNNING),
        ];
        for (name, spec, init, containers, want) in cases {
            assert_eq!(pod_phase(&spec, &init, &containers), want, "case {name}");
        }
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
        ];
        for (name, pod, kind, want) in cases {
            assert_eq!(kill_grace_period(&pod, "app", kind), want, "case {name}");
        }
    }

    #[test]
    fn kill_messages() {
        assert_eq!(
            probe_kill_message(&pod(None, None, None, "Always"), "app", ProbeKind::Liveness),
            "Container app failed liveness probe, will be restarted"
        );
        assert_eq!(
            probe_kill_message(&pod(None, None, None, "Never"), "app", ProbeKind::Startup),
            "Container app failed startup probe"
        );
    }
}
