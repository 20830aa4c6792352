//! Upstream's status manager unit tests (`pkg/kubelet/status/status_manager_test.go`) that
//! probelet's own tests did not already pin case for case, ported with upstream's fixtures:
//! the start time a new status inherits from the pod (through the status manager actor, under
//! paused time), and `TerminatePod`'s rewrite (docs/status-manager.md §5.7), through the actor
//! where upstream's test depends on the cached status and as the pure
//! [`terminate_status`] where it only tables the rewrite, and `mergePodStatus` as the pure
//! [`merge_pod_status`]. docs/upstream-tests.md maps every upstream test.

// Test helpers may panic: a panic there is a failed assertion.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use probelet_test_support as support;

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::core::v1::{
    ContainerState, ContainerStateRunning, ContainerStateTerminated, ContainerStateWaiting, ContainerStatus,
    Pod, PodCondition, PodStatus,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use probelet::Pipeline;
use probelet::status::merge::merge_pod_status;
use probelet::status::terminate::{
    CONTAINER_STATUS_UNKNOWN_EXIT_CODE, CONTAINER_STATUS_UNKNOWN_MESSAGE, CONTAINER_STATUS_UNKNOWN_REASON,
    terminate_status,
};
use support::kubelet::{Harness, epoch};
use support::pods::{PodBuilder, test_pod};

// === helpers ===

/// Every query is bounded: a lost answer fails the test instead of hanging it.
async fn ask<T>(fut: impl Future<Output = T>) -> T {
    tokio::time::timeout(Duration::from_secs(60), fut).await.expect("the actor answered")
}

async fn cached(p: &Pipeline, pod: &Pod) -> Arc<PodStatus> {
    let uid = pod.metadata.uid.clone().unwrap_or_default();
    ask(p.pod_status(&uid)).await.unwrap().expect("a cached status")
}

/// Go's zero `ContainerState{}`: a status that names the container and nothing else.
fn no_state(name: &str) -> ContainerStatus {
    ContainerStatus { name: name.into(), state: Some(ContainerState::default()), ..Default::default() }
}

fn waiting_state(reason: Option<&str>) -> ContainerState {
    ContainerState {
        waiting: Some(ContainerStateWaiting { reason: reason.map(Into::into), ..Default::default() }),
        ..Default::default()
    }
}

fn running_state() -> ContainerState {
    ContainerState { running: Some(ContainerStateRunning::default()), ..Default::default() }
}

fn exited_state(reason: Option<&str>, exit_code: i32) -> ContainerState {
    ContainerState {
        terminated: Some(ContainerStateTerminated {
            reason: reason.map(Into::into),
            exit_code,
            ..Default::default()
        }),
        ..Default::default()
    }
}

fn with_state(name: &str, state: ContainerState) -> ContainerStatus {
    ContainerStatus { name: name.into(), state: Some(state), ..Default::default() }
}

/// The state `TerminatePod` gives a container it cannot account for.
fn unknown_state() -> ContainerState {
    ContainerState {
        terminated: Some(ContainerStateTerminated {
            reason: Some(CONTAINER_STATUS_UNKNOWN_REASON.into()),
            message: Some(CONTAINER_STATUS_UNKNOWN_MESSAGE.into()),
            exit_code: CONTAINER_STATUS_UNKNOWN_EXIT_CODE,
            ..Default::default()
        }),
        ..Default::default()
    }
}

fn states(statuses: &Option<Vec<ContainerStatus>>) -> Vec<(String, Option<ContainerState>)> {
    statuses.iter().flatten().map(|c| (c.name.clone(), c.state.clone())).collect()
}

/// Upstream's `getTestPod()` with three init and three regular containers, as its
/// `TerminatePod` tests use it.
fn three_and_three() -> PodBuilder {
    test_pod("foo")
        .init_container("init-test-1")
        .init_container("init-test-2")
        .init_container("init-test-3")
        .container("test-1")
        .container("test-2")
        .container("test-3")
}

/// The pod as the kubelet last saw it in upstream's `TerminatePod` tests: still Running, its
/// containers running and its init containers exited 0 (a stale copy; the first init status
/// even names a regular container).
fn stale_running_status() -> PodStatus {
    PodStatus {
        phase: Some("Running".into()),
        message: Some("stale".into()),
        init_container_statuses: Some(vec![
            no_state("test-1"),
            with_state("init-test-2", exited_state(Some("InitTest"), 0)),
            with_state("init-test-3", exited_state(Some("InitTest"), 0)),
        ]),
        container_statuses: Some(vec![
            with_state("test-1", running_state()),
            with_state("test-2", running_state()),
            with_state("test-3", running_state()),
        ]),
        ..Default::default()
    }
}

// === SetPodStatus ===

/// Upstream's `TestNewStatusPreservesPodStartTime` (status_manager_test.go): the first status
/// stored for a pod whose own status has a start time keeps that start time, rather than
/// taking the time it was stored (docs/status-manager.md §5.8: with no cached status, the old
/// status is the mirror pod's, else the pod's own).
#[actix::test]
async fn a_new_status_keeps_the_pods_start_time() {
    tokio::time::pause();
    let h = Harness::start();
    let start_time = Time(epoch() - Duration::from_secs(60));
    let pod =
        test_pod("foo").with_status(PodStatus { start_time: Some(start_time.clone()), ..Default::default() });
    let pod = pod.build();

    h.pipeline.set_pod_status(pod.clone(), PodStatus { message: Some("1234".into()), ..Default::default() });

    assert_eq!(cached(&h.pipeline, &pod).await.start_time, Some(start_time));
}

// === TerminatePod ===

/// Upstream's `TestTerminatePod` (status_manager_test.go): `TerminatePod` rewrites the cached
/// status, not the stale copy it is handed: a container without a state gets the unknown
/// termination, one that exited keeps its exit, and the cached phase and message stay.
#[actix::test]
async fn terminate_pod_rewrites_the_cached_status_not_the_stale_pod() {
    tokio::time::pause();
    let h = Harness::start();
    let first = PodStatus {
        phase: Some("Failed".into()),
        message: Some("first".into()),
        init_container_statuses: Some(vec![
            no_state("init-test-1"),
            with_state("init-test-2", exited_state(Some("InitTest"), 0)),
            with_state("init-test-3", exited_state(Some("InitTest"), 3)),
        ]),
        container_statuses: Some(vec![
            no_state("test-1"),
            with_state("test-2", exited_state(Some("Test"), 2)),
            with_state("test-3", exited_state(Some("Test"), 0)),
        ]),
        ..Default::default()
    };
    h.pipeline.set_pod_status(three_and_three().build(), first);

    let stale = three_and_three().with_status(stale_running_status()).build();
    h.pipeline.terminate_pod(stale.clone());

    let got = cached(&h.pipeline, &stale).await;
    let s = |name: &str, state: ContainerState| (name.to_owned(), Some(state));
    assert_eq!(
        states(&got.init_container_statuses),
        [
            s("init-test-1", unknown_state()),
            s("init-test-2", exited_state(Some("InitTest"), 0)),
            s("init-test-3", exited_state(Some("InitTest"), 3)),
        ]
    );
    assert_eq!(
        states(&got.container_statuses),
        [
            s("test-1", unknown_state()),
            s("test-2", exited_state(Some("Test"), 2)),
            s("test-3", exited_state(Some("Test"), 0)),
        ]
    );
    assert_eq!(got.phase.as_deref(), Some("Failed"), "the cached phase is kept");
    assert_eq!(got.message.as_deref(), Some("first"), "the cached message is kept");
}

/// Upstream's `TestTerminatePodWaiting` (status_manager_test.go): an init container still
/// waiting after the last one that started keeps its waiting state; a waiting regular container
/// of an initialized pod gets the unknown termination.
#[actix::test]
async fn terminate_pod_keeps_init_containers_waiting_after_the_last_started() {
    tokio::time::pause();
    let h = Harness::start();
    let first = PodStatus {
        phase: Some("Failed".into()),
        message: Some("first".into()),
        init_container_statuses: Some(vec![
            no_state("init-test-1"),
            with_state("init-test-2", exited_state(Some("InitTest"), 0)),
            with_state("init-test-3", waiting_state(Some("InitTest"))),
        ]),
        container_statuses: Some(vec![
            no_state("test-1"),
            with_state("test-2", exited_state(Some("Test"), 2)),
            with_state("test-3", waiting_state(Some("Test"))),
        ]),
        ..Default::default()
    };
    h.pipeline.set_pod_status(three_and_three().build(), first);

    let stale = three_and_three().with_status(stale_running_status()).build();
    h.pipeline.terminate_pod(stale.clone());

    let got = cached(&h.pipeline, &stale).await;
    let s = |name: &str, state: ContainerState| (name.to_owned(), Some(state));
    assert_eq!(
        states(&got.init_container_statuses),
        [
            s("init-test-1", unknown_state()),
            s("init-test-2", exited_state(Some("InitTest"), 0)),
            s("init-test-3", waiting_state(Some("InitTest"))),
        ]
    );
    assert_eq!(
        states(&got.container_statuses),
        [
            s("test-1", unknown_state()),
            s("test-2", exited_state(Some("Test"), 2)),
            s("test-3", unknown_state())
        ]
    );
    assert_eq!(got.phase.as_deref(), Some("Failed"));
    assert_eq!(got.message.as_deref(), Some("first"));
}

/// A container state in upstream's `TestTerminatePod_DefaultUnknownStatus` table.
#[derive(Clone, Copy, Debug, PartialEq)]
enum S {
    Waiting,
    Running,
    Exited(i32),
    /// Waiting, after a termination with this exit code.
    WaitingAfter(i32),
    /// No state at all (Go's zero `ContainerState{}`), after a termination with this exit code.
    NoneAfter(i32),
    /// The unknown termination `TerminatePod` writes.
    Unknown,
}

fn status_of(name: &str, s: S) -> ContainerStatus {
    let last = |code| Some(exited_state(None, code));
    let (state, last_state) = match s {
        S::Waiting => (waiting_state(None), None),
        S::Running => (running_state(), None),
        S::Exited(code) => (exited_state(None, code), None),
        S::WaitingAfter(code) => (waiting_state(None), last(code)),
        S::NoneAfter(code) => (ContainerState::default(), last(code)),
        S::Unknown => unreachable!("only ever expected"),
    };
    ContainerStatus { name: name.into(), state: Some(state), last_state, ..Default::default() }
}

fn observe(status: &ContainerStatus) -> S {
    let state = status.state.clone().unwrap_or_default();
    if state == unknown_state() {
        return S::Unknown;
    }
    if let Some(t) = &state.terminated {
        return S::Exited(t.exit_code);
    }
    if state.running.is_some() {
        return S::Running;
    }
    let last = status.last_state.as_ref().and_then(|s| s.terminated.as_ref()).map(|t| t.exit_code);
    match (state.waiting.is_some(), last) {
        (true, None) => S::Waiting,
        (true, Some(code)) => S::WaitingAfter(code),
        (false, Some(code)) => S::NoneAfter(code),
        (false, None) => panic!("a status without state: {status:?}"),
    }
}

/// Upstream's `newPod(initContainers, containers, …)`: init containers `init-<i>` and regular
/// containers `<i>`, restart policy Never, with these phase and container states.
fn uninitialized_pod(phase: &str, init: &[S], regular: &[S]) -> Pod {
    let mut builder = test_pod("foo").restart_policy("Never");
    for i in 0..init.len() {
        builder = builder.init_container(&format!("init-{i}"));
    }
    for i in 0..regular.len() {
        builder = builder.container(&i.to_string());
    }
    let status = PodStatus {
        phase: Some(phase.into()),
        start_time: Some(Time(epoch())),
        init_container_statuses: Some(
            init.iter().enumerate().map(|(i, s)| status_of(&format!("init-{i}"), *s)).collect(),
        ),
        container_statuses: Some(
            regular.iter().enumerate().map(|(i, s)| status_of(&i.to_string(), *s)).collect(),
        ),
        ..Default::default()
    };
    Arc::unwrap_or_clone(builder.with_status(status).build())
}

/// Upstream's `TestTerminatePod_DefaultUnknownStatus` (status_manager_test.go), case by case:
/// which containers `TerminatePod` marks terminated with an unknown outcome, depending on the
/// evidence that the pod got past its init containers. Upstream's first three cases compare
/// the status, or (its second and third) assert nothing at all; they are checked here for what
/// `TerminatePod` does to them: the phase becomes Failed and a terminated container is kept.
#[test]
fn terminate_pod_defaults_unknown_status() {
    use S::{Exited, NoneAfter, Running, Unknown, Waiting, WaitingAfter};
    // (case, phase, init states, regular states, want init, want regular)
    let cases = vec![
        ("failed pod without statuses", "Failed", vec![], vec![], vec![], vec![]),
        ("running pod without statuses", "Running", vec![], vec![], vec![], vec![]),
        ("running pod, container exited 2", "Running", vec![], vec![Exited(2)], vec![], vec![Exited(2)]),
        ("last termination state set", "Running", vec![], vec![WaitingAfter(2)], vec![], vec![Unknown]),
        ("no previous state", "Running", vec![], vec![Waiting], vec![], vec![Unknown]),
        (
            "uninitialized pod defaults the first init container",
            "Pending",
            vec![Waiting],
            vec![Waiting],
            vec![Unknown],
            vec![Waiting],
        ),
        (
            "uninitialized pod defaults only the first init container",
            "Pending",
            vec![Waiting, Waiting],
            vec![Waiting],
            vec![Unknown, Waiting],
            vec![Waiting],
        ),
        (
            "uninitialized pod defaults gaps",
            "Pending",
            vec![Waiting, Waiting, Exited(1), Waiting],
            vec![Waiting],
            vec![Unknown, Unknown, Exited(1), Waiting],
            vec![Waiting],
        ),
        (
            "failed last container is uninitialized",
            "Pending",
            vec![Waiting, Waiting, Exited(1)],
            vec![Waiting],
            vec![Unknown, Unknown, Exited(1)],
            vec![Waiting],
        ),
        (
            "successful last container is initialized",
            "Running",
            vec![Waiting, Waiting, Exited(0)],
            vec![Waiting],
            vec![Unknown, Unknown, Exited(0)],
            vec![Unknown],
        ),
        (
            "successful last previous container is initialized, and container state is overwritten",
            "Running",
            vec![Waiting, Waiting, WaitingAfter(0)],
            vec![Waiting],
            vec![Unknown, Unknown, Unknown],
            vec![Unknown],
        ),
        (
            "running container proves initialization",
            "Running",
            vec![Waiting],
            vec![Running],
            vec![Unknown],
            vec![Unknown],
        ),
        (
            "evidence of terminated container proves initialization",
            "Running",
            vec![Waiting],
            vec![Exited(0)],
            vec![Unknown],
            vec![Exited(0)],
        ),
        (
            "evidence of previously terminated container proves initialization",
            "Running",
            vec![Waiting],
            vec![NoneAfter(0)],
            vec![Unknown],
            vec![Unknown],
        ),
    ];
    for (name, phase, init, regular, want_init, want_regular) in cases {
        let pod = uninitialized_pod(phase, &init, &regular);

        let got = terminate_status(&pod, pod.status.as_ref().unwrap(), false);

        let got_init: Vec<S> = got.init_container_statuses.iter().flatten().map(observe).collect();
        let got_regular: Vec<S> = got.container_statuses.iter().flatten().map(observe).collect();
        assert_eq!(got_init, want_init, "case: {name} (init containers)");
        assert_eq!(got_regular, want_regular, "case: {name} (regular containers)");
        assert_eq!(got.phase.as_deref(), Some("Failed"), "case: {name} (phase)");
        // A container's previous termination is never rewritten.
        let last_states = |s: &PodStatus| -> Vec<_> {
            s.init_container_statuses
                .iter()
                .flatten()
                .chain(s.container_statuses.iter().flatten())
                .map(|c| c.last_state.clone())
                .collect()
        };
        assert_eq!(
            last_states(&got),
            last_states(pod.status.as_ref().unwrap()),
            "case: {name} (last states)"
        );
    }
}

/// Upstream's `TestTerminatePod_EnsurePodPhaseIsTerminal` (status_manager_test.go): whatever
/// phase the pod had, `TerminatePod` leaves it Succeeded or Failed; only Succeeded stays
/// Succeeded, a phase the API does not define included.
#[test]
fn terminate_pod_ensures_a_terminal_phase() {
    let cases = [
        ("Pending pod", "Pending", "Failed"),
        ("Running pod", "Running", "Failed"),
        ("Succeeded pod", "Succeeded", "Succeeded"),
        ("Failed pod", "Failed", "Failed"),
        ("Unknown pod", "Unknown", "Failed"),
        ("Unknown phase pod", "SomeUnknownPhase", "Failed"),
    ];
    for (name, phase, want) in cases {
        let status = PodStatus { phase: Some(phase.into()), ..Default::default() };
        let pod = Arc::unwrap_or_clone(test_pod("foo").with_status(status.clone()).build());

        let got = terminate_status(&pod, &status, false);

        assert_eq!(got, PodStatus { phase: Some(want.into()), ..Default::default() }, "case: {name}");
    }
}

// === mergePodStatus ===

/// Upstream's `getPodStatus()` in its merge test: Running, Ready and PodScheduled True.
fn merge_base() -> PodStatus {
    PodStatus {
        phase: Some("Running".into()),
        conditions: Some(vec![condition("Ready", "True", None), condition("PodScheduled", "True", None)]),
        message: Some("Message".into()),
        ..Default::default()
    }
}

fn condition(type_: &str, status: &str, reason: Option<&str>) -> PodCondition {
    PodCondition {
        type_: type_.into(),
        status: status.into(),
        reason: reason.map(Into::into),
        ..Default::default()
    }
}

/// `merge_base()` with `conditions` appended, the phase, reason and message changed when given.
fn edited(
    conditions: &[PodCondition],
    phase: Option<&str>,
    reason_message: Option<(&str, &str)>,
) -> PodStatus {
    let mut status = merge_base();
    status.conditions.as_mut().unwrap().extend_from_slice(conditions);
    if let Some(phase) = phase {
        status.phase = Some(phase.into());
    }
    if let Some((reason, message)) = reason_message {
        status.reason = Some(reason.into());
        status.message = Some(message.into());
    }
    status
}

/// The conditions as upstream's `conditionsEqual` compares them: by type, status and reason,
/// in any order.
fn condition_set(status: &PodStatus) -> Vec<(String, String, Option<String>)> {
    let mut set: Vec<_> = status
        .conditions
        .iter()
        .flatten()
        .map(|c| (c.type_.clone(), c.status.clone(), c.reason.clone()))
        .collect();
    set.sort();
    set
}

/// Upstream's `TestMergePodStatus` (status_manager_test.go), case by case: the merge of the
/// status manager's status into the API server's copy keeps foreign conditions from the API,
/// sends `DisruptionTarget` only on a transition to a terminal phase with no container left
/// running, holds back such a transition while containers could run, and forces Ready and
/// ContainersReady False with `PodFailed` in a terminal phase (docs/status-manager.md §5.12).
#[test]
fn merge_pod_status_cases() {
    let dt = |status: &str, reason: &str| condition("DisruptionTarget", status, Some(reason));
    let feature = |status: &str| condition("example.com/feature", status, None);
    let failed_ready = [
        condition("Ready", "False", Some("PodFailed")),
        condition("ContainersReady", "False", Some("PodFailed")),
        condition("PodScheduled", "True", None),
    ];
    let with = |status: PodStatus, conditions: &[PodCondition]| PodStatus {
        conditions: Some(conditions.to_vec()),
        ..status
    };
    let running_ready = [condition("Ready", "True", None), condition("PodScheduled", "True", None)];
    // (case, could have running containers, API status, new status, want)
    let cases = vec![
        ("no change", false, merge_base(), merge_base(), merge_base()),
        (
            "add DisruptionTarget condition when transitioning into failed phase",
            false,
            merge_base(),
            edited(&[dt("True", "TerminationByKubelet")], Some("Failed"), None),
            with(
                PodStatus { phase: Some("Failed".into()), ..merge_base() },
                &[&failed_ready[..], &[dt("True", "TerminationByKubelet")]].concat(),
            ),
        ),
        (
            "don't add DisruptionTarget condition when transitioning into failed phase, but there might still be running containers",
            true,
            merge_base(),
            edited(&[dt("True", "TerminationByKubelet")], Some("Failed"), None),
            merge_base(),
        ),
        (
            "preserve DisruptionTarget condition",
            false,
            edited(&[dt("True", "TerminationByKubelet")], None, None),
            merge_base(),
            with(merge_base(), &[&running_ready[..], &[dt("True", "TerminationByKubelet")]].concat()),
        ),
        (
            "override DisruptionTarget condition",
            false,
            edited(&[dt("True", "EvictedByEvictionAPI")], None, None),
            edited(&[dt("True", "TerminationByKubelet")], Some("Failed"), None),
            with(
                PodStatus { phase: Some("Failed".into()), ..merge_base() },
                &[&failed_ready[..], &[dt("True", "TerminationByKubelet")]].concat(),
            ),
        ),
        (
            "don't override DisruptionTarget condition when remaining in running phase",
            false,
            edited(&[dt("True", "EvictedByEvictionAPI")], None, None),
            edited(&[dt("True", "TerminationByKubelet")], None, None),
            with(merge_base(), &[&running_ready[..], &[dt("True", "EvictedByEvictionAPI")]].concat()),
        ),
        (
            "don't override DisruptionTarget condition when transitioning to failed phase but there might still be running containers",
            true,
            edited(&[dt("True", "EvictedByEvictionAPI")], None, None),
            edited(&[dt("True", "TerminationByKubelet")], Some("Failed"), None),
            with(merge_base(), &[&running_ready[..], &[dt("True", "EvictedByEvictionAPI")]].concat()),
        ),
        (
            "readiness changes",
            false,
            merge_base(),
            with(merge_base(), &[condition("Ready", "False", None), condition("PodScheduled", "True", None)]),
            with(merge_base(), &[condition("Ready", "False", None), condition("PodScheduled", "True", None)]),
        ),
        (
            "additional pod condition",
            false,
            edited(&[feature("True")], None, None),
            merge_base(),
            with(merge_base(), &[&running_ready[..], &[feature("True")]].concat()),
        ),
        (
            "additional pod condition and readiness changes",
            false,
            edited(&[feature("True")], None, None),
            with(merge_base(), &[condition("Ready", "False", None), condition("PodScheduled", "True", None)]),
            with(
                merge_base(),
                &[
                    condition("Ready", "False", None),
                    condition("PodScheduled", "True", None),
                    feature("True"),
                ],
            ),
        ),
        (
            "additional pod condition changes",
            false,
            edited(&[feature("True")], None, None),
            edited(&[feature("False")], None, None),
            with(merge_base(), &[&running_ready[..], &[feature("True")]].concat()),
        ),
        (
            "phase is transitioning to failed and no containers running",
            false,
            edited(&[], Some("Running"), Some(("Unknown", "Message"))),
            edited(&[], Some("Failed"), Some(("Evicted", "Was Evicted"))),
            with(
                PodStatus {
                    phase: Some("Failed".into()),
                    reason: Some("Evicted".into()),
                    message: Some("Was Evicted".into()),
                    ..merge_base()
                },
                &failed_ready,
            ),
        ),
        (
            "phase is transitioning to failed and containers running",
            true,
            edited(&[], Some("Running"), Some(("Unknown", "Message"))),
            edited(&[], Some("Failed"), Some(("Evicted", "Was Evicted"))),
            with(PodStatus { reason: Some("Unknown".into()), ..merge_base() }, &running_ready),
        ),
    ];
    for (name, could_have_running, api, new, want) in cases {
        let got = merge_pod_status(&api, &new, could_have_running, Time(epoch()), None);

        assert_eq!(condition_set(&got), condition_set(&want), "case: {name} (conditions)");
        let without_conditions = |s: &PodStatus| PodStatus { conditions: None, ..s.clone() };
        assert_eq!(without_conditions(&got), without_conditions(&want), "case: {name} (the rest)");
    }
}
