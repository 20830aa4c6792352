//! Upstream's `UpdatePodStatus` unit tests (`pkg/kubelet/prober/prober_manager_test.go`), ported
//! case for case onto the pure [`update_pod_status`] (docs/prober.md §3.4): the workers and
//! cached results upstream plants in its manager become a [`ProbeView`]. The unit tests beside
//! `update_status.rs` cover the same rules by rule; these keep upstream's own fixtures so that a
//! reviewer can read one against the other. docs/upstream-tests.md maps every upstream test.

// Test helpers may panic: a panic there is a failed assertion.
#![allow(clippy::unwrap_used)]

use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::core::v1::{
    Container, ContainerState, ContainerStateRunning, ContainerStateTerminated, ContainerStatus, ExecAction,
    Pod, PodCondition, PodSpec, PodStatus, Probe,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, Time};
use k8s_openapi::jiff::Timestamp;
use probelet::container::ContainerId;
use probelet::prober::update_status::{ProbeView, update_pod_status};
use probelet::prober::{ProbeKind, ProbeResult};
use probelet::status::POD_READY;

use ProbeKind::{Liveness, Readiness, Startup};
use ProbeResult::{Failure, Success};

const TEST_POD_UID: &str = "pOd_UiD";

/// When the prober manager started.
fn manager_start() -> Timestamp {
    Timestamp::from_second(1_800_000_000).unwrap()
}

/// A container that started a minute before the agent restart's grace period (10 s before the
/// manager started): by its start time alone it survived the restart.
fn started_before_the_restart() -> Timestamp {
    manager_start() - Duration::from_secs(70)
}

/// Upstream's `defaultProbe` (an exec handler; nothing runs it here).
fn default_probe() -> Probe {
    Probe {
        exec: Some(ExecAction { command: Some(Vec::new()) }),
        timeout_seconds: Some(1),
        period_seconds: Some(1),
        success_threshold: Some(1),
        failure_threshold: Some(3),
        ..Default::default()
    }
}

/// A running container status; `started_at` `None` is Go's zero `StartedAt`.
fn running(name: &str, id: &str, started_at: Option<Timestamp>) -> ContainerStatus {
    ContainerStatus {
        name: name.into(),
        container_id: Some(id.into()),
        state: Some(ContainerState {
            running: Some(ContainerStateRunning { started_at: started_at.map(Time) }),
            ..Default::default()
        }),
        ..Default::default()
    }
}

/// Upstream's `ContainerStateTerminated{}`: exit code 0.
fn terminated(name: &str, id: &str) -> ContainerStatus {
    ContainerStatus {
        name: name.into(),
        container_id: Some(id.into()),
        state: Some(ContainerState {
            terminated: Some(ContainerStateTerminated::default()),
            ..Default::default()
        }),
        ..Default::default()
    }
}

fn named(name: &str) -> Container {
    Container { name: name.into(), ..Default::default() }
}

fn with_readiness_probe(name: &str) -> Container {
    Container { readiness_probe: Some(default_probe()), ..named(name) }
}

fn sidecar(name: &str) -> Container {
    Container { restart_policy: Some("Always".into()), ..named(name) }
}

fn pod(containers: Vec<Container>, init_containers: Vec<Container>, api_status: Option<PodStatus>) -> Pod {
    Pod {
        metadata: ObjectMeta { uid: Some(TEST_POD_UID.into()), ..Default::default() },
        spec: Some(PodSpec { containers, init_containers: Some(init_containers), ..Default::default() }),
        status: api_status,
    }
}

/// The pod as the API server last had it: its Ready condition and the container statuses it
/// lists (`None`: it lists none).
fn api_status(ready: &str, containers: Option<Vec<ContainerStatus>>) -> PodStatus {
    PodStatus {
        conditions: Some(vec![PodCondition {
            type_: POD_READY.into(),
            status: ready.into(),
            ..Default::default()
        }]),
        container_statuses: containers,
        ..Default::default()
    }
}

/// The API's copy of a container: its name, its ID (empty: none) and `ready: true`.
fn api_container(name: &str, id: &str) -> ContainerStatus {
    ContainerStatus {
        name: name.into(),
        container_id: (!id.is_empty()).then(|| id.into()),
        ready: true,
        ..Default::default()
    }
}

fn view(workers: &[(&str, ProbeKind)], results: &[(ProbeKind, &str, ProbeResult)]) -> ProbeView {
    ProbeView {
        workers: workers.iter().map(|(name, kind)| (Arc::from(*name), *kind)).collect(),
        results: results
            .iter()
            .map(|(kind, id, result)| ((*kind, ContainerId::parse(id)), *result))
            .collect(),
        manager_start: manager_start(),
        change_status_on_restart: false,
    }
}

fn readiness_of(status: &PodStatus) -> Vec<(String, bool)> {
    status.container_statuses.iter().flatten().map(|c| (c.name.clone(), c.ready)).collect()
}

/// Upstream's `TestUpdatePodStatus` (prober_manager_test.go): one running container per case
/// of the readiness rule, none of which started before the manager, and a terminated one
/// whose cached readiness Success must not count.
#[test]
fn update_pod_status_sets_each_containers_readiness() {
    let names = [
        "unprobed_container",
        "probed_container_ready",
        "probed_container_pending",
        "probed_container_unready",
        "not_started_container_no_readiness",
        "started_container_no_readiness",
        "terminated_container",
    ];
    let id = |name: &str| format!("test://{name}_id");
    let mut status = PodStatus {
        phase: Some("Running".into()),
        container_statuses: Some(
            names
                .iter()
                .map(|n| {
                    if *n == "terminated_container" {
                        terminated(n, &id(n))
                    } else {
                        running(n, &id(n), None)
                    }
                })
                .collect(),
        ),
        ..Default::default()
    };
    let (ready_id, unready_id) = (id("probed_container_ready"), id("probed_container_unready"));
    let (started_id, terminated_id) = (id("started_container_no_readiness"), id("terminated_container"));
    let view = view(
        &[
            ("unprobed_container", Liveness),
            ("probed_container_ready", Readiness),
            ("probed_container_pending", Readiness),
            ("probed_container_unready", Readiness),
            ("not_started_container_no_readiness", Startup),
            ("started_container_no_readiness", Startup),
            ("terminated_container", Readiness),
        ],
        &[
            (Readiness, ready_id.as_str(), Success),
            (Readiness, unready_id.as_str(), Failure),
            (Startup, started_id.as_str(), Success),
            (Readiness, terminated_id.as_str(), Success),
        ],
    );
    let pod = pod(names.iter().map(|n| named(n)).collect(), Vec::new(), None);

    update_pod_status(&pod, &mut status, &view);

    let want = [true, true, false, false, false, true, false];
    let want: Vec<(String, bool)> = names.iter().zip(want).map(|(n, r)| ((*n).to_owned(), r)).collect();
    assert_eq!(readiness_of(&status), want);
}

/// Upstream's `TestUpdatePodStatusWithInitContainers` (prober_manager_test.go): `started` and
/// `ready` of init containers, plain ones (ready once exited 0) and sidecars (ready by the
/// regular rules once started).
#[test]
fn update_pod_status_with_init_containers() {
    let not_started = running("not_started_container", "test://not_started_container_id", None);
    let started = running("started_container", "test://started_container_id", None);
    let exited = terminated("terminated_container", "test://terminated_container_id");
    let view = view(
        &[("not_started_container", Startup), ("started_container", Startup)],
        &[(Startup, "test://started_container_id", Success)],
    );
    // (case, sidecars, want started, want ready), in the order of the statuses.
    let cases = [
        ("init containers", false, [false, true, false], [false, false, true]),
        ("init container with Always restartPolicy", true, [false, true, false], [false, true, false]),
    ];
    for (name, sidecars, want_started, want_ready) in cases {
        let spec = |n: &str| if sidecars { sidecar(n) } else { named(n) };
        let pod = pod(
            Vec::new(),
            vec![spec("not_started_container"), spec("started_container"), spec("terminated_container")],
            None,
        );
        let mut status = PodStatus {
            phase: Some("Running".into()),
            init_container_statuses: Some(vec![not_started.clone(), started.clone(), exited.clone()]),
            ..Default::default()
        };

        update_pod_status(&pod, &mut status, &view);

        let init = status.init_container_statuses.unwrap();
        let got_started: Vec<bool> = init.iter().map(|c| c.started == Some(true)).collect();
        let got_ready: Vec<bool> = init.iter().map(|c| c.ready).collect();
        assert_eq!(got_started, want_started, "case: {name} (started)");
        assert_eq!(got_ready, want_ready, "case: {name} (ready)");
    }
}

/// Upstream's `TestUpdatePodStatusOnKubeletRestart` (prober_manager_test.go): a container the
/// runtime shows started before the restart keeps the readiness the API server has for it,
/// unless the API server knows another container under its name (it was replaced while the API
/// server could not be told), or `ChangeContainerStatusOnKubeletRestart` is on. On the first
/// sync after the restart no readiness worker exists yet.
#[test]
fn update_pod_status_on_agent_restart() {
    const NAME: &str = "test_container";
    const OLD_ID: &str = "test://old-container-id";
    const NEW_ID: &str = "test://new_container_id";
    // (case, gate on, the API's container ID, first sync, want ready)
    let cases = [
        ("feature is disabled, the container survived the kubelet restart", false, NEW_ID, false, true),
        (
            "feature is disabled, the container was replaced while the API server was unreachable",
            false,
            OLD_ID,
            false,
            false,
        ),
        (
            "feature is disabled, the container survived the kubelet restart, first sync",
            false,
            NEW_ID,
            true,
            true,
        ),
        (
            "feature is disabled, the container was replaced while the API server was unreachable, first sync",
            false,
            OLD_ID,
            true,
            false,
        ),
        ("feature is enabled, the container survived the kubelet restart", true, NEW_ID, false, false),
        (
            "feature is enabled, the container was replaced while the API server was unreachable",
            true,
            OLD_ID,
            false,
            false,
        ),
    ];
    for (name, gate_on, api_id, first_sync, want_ready) in cases {
        let workers: &[(&str, ProbeKind)] = if first_sync { &[] } else { &[(NAME, Readiness)] };
        let mut view = view(workers, &[]);
        view.change_status_on_restart = gate_on;
        let pod = pod(
            vec![with_readiness_probe(NAME)],
            Vec::new(),
            Some(api_status("True", Some(vec![api_container(NAME, api_id)]))),
        );
        let mut status = PodStatus {
            phase: Some("Running".into()),
            container_statuses: Some(vec![running(NAME, NEW_ID, Some(started_before_the_restart()))]),
            ..Default::default()
        };

        update_pod_status(&pod, &mut status, &view);

        assert_eq!(readiness_of(&status), [(NAME.to_owned(), want_ready)], "case: {name}");
    }
}

/// Upstream's `TestUpdatePodStatusOnKubeletRestartWithMultipleContainers`
/// (prober_manager_test.go): of two containers that look as if they survived the restart, the
/// one the API server knows under another ID does not inherit its readiness, the other does;
/// once the pod's Ready condition is False the survivor, still without a result of its own,
/// loses it too.
#[test]
fn update_pod_status_on_agent_restart_with_two_containers() {
    let survived = ("survived_container", "test://survived_container_id");
    let replaced =
        ("replaced_container", "test://replaced_container_old_id", "test://replaced_container_new_id");
    let view = view(&[(survived.0, Readiness), (replaced.0, Readiness)], &[]);
    let mut pod = pod(
        vec![with_readiness_probe(survived.0), with_readiness_probe(replaced.0)],
        Vec::new(),
        Some(api_status(
            "True",
            Some(vec![api_container(survived.0, survived.1), api_container(replaced.0, replaced.1)]),
        )),
    );
    let mut status = PodStatus {
        phase: Some("Running".into()),
        container_statuses: Some(vec![
            running(survived.0, survived.1, Some(started_before_the_restart())),
            running(replaced.0, replaced.2, Some(started_before_the_restart())),
        ]),
        ..Default::default()
    };

    update_pod_status(&pod, &mut status, &view);
    assert_eq!(
        readiness_of(&status),
        [(survived.0.to_owned(), true), (replaced.0.to_owned(), false)],
        "the replaced container does not inherit the old one's readiness"
    );

    // The replaced container's NotReady turned the pod's Ready condition False.
    pod.status.as_mut().unwrap().conditions.as_mut().unwrap()[0].status = "False".into();
    update_pod_status(&pod, &mut status, &view);
    assert_eq!(
        readiness_of(&status),
        [(survived.0.to_owned(), false), (replaced.0.to_owned(), false)],
        "once the pod is not Ready, no container keeps an inherited readiness"
    );
}

/// Upstream's `TestCanInheritProbeState` (prober_manager_test.go), seen through its only
/// consumer: a container that survived the restart, with a readiness worker but no result yet
/// and a pod the API server has Ready, is ready exactly when its probe state may be inherited.
#[test]
fn can_inherit_probe_state() {
    const NAME: &str = "test-container";
    const OLD_ID: &str = "test://old_container_id";
    const NEW_ID: &str = "test://new_container_id";
    // (case, the API's container statuses, the runtime's container ID, want inheritable)
    let cases = [
        ("no status from the API server is available", None, NEW_ID, true),
        ("the API server knows the same container", Some(vec![api_container(NAME, OLD_ID)]), OLD_ID, true),
        ("the container was replaced", Some(vec![api_container(NAME, OLD_ID)]), NEW_ID, false),
        (
            "the container is not in the API server status",
            Some(vec![api_container("other-container", OLD_ID)]),
            NEW_ID,
            true,
        ),
        ("the API server status has no container ID", Some(vec![api_container(NAME, "")]), NEW_ID, true),
        ("the runtime has no container ID", Some(vec![api_container(NAME, OLD_ID)]), "", true),
    ];
    for (name, api_containers, runtime_id, want) in cases {
        let view = view(&[(NAME, Readiness)], &[]);
        let pod = pod(vec![with_readiness_probe(NAME)], Vec::new(), Some(api_status("True", api_containers)));
        let mut status = PodStatus {
            phase: Some("Running".into()),
            container_statuses: Some(vec![running(NAME, runtime_id, Some(started_before_the_restart()))]),
            ..Default::default()
        };

        update_pod_status(&pod, &mut status, &view);

        assert_eq!(readiness_of(&status), [(NAME.to_owned(), want)], "case: {name}");
    }
}
