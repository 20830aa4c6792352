//! Condition generators: Ready, ContainersReady and Initialized from the pod spec and its
//! container statuses. Upstream: `pkg/kubelet/status/generate.go`. Pure functions.
//!
//! `container_statuses: None` is upstream's `nil` ("statuses unknown"); `Some(&[])` is an
//! empty list, which is not the same thing.

use crate::gofmt::go_quote;
use crate::restart::{
    CONDITION_ALL_CONTAINERS_RESTARTING, InRuntime, all_containers_restart_cleaned_up,
    should_all_containers_restart,
};
use crate::status::by_name::ByName;
use k8s_openapi::api::core::v1::{Container, ContainerStatus, Pod, PodCondition, PodSpec, PodStatus};

/// Reason: all container statuses are unknown (a nil list).
pub const UNKNOWN_CONTAINER_STATUSES: &str = "UnknownContainerStatuses";
/// Reason: all relevant containers succeeded.
pub const POD_COMPLETED: &str = "PodCompleted";
/// Reason: the pod failed, containers are considered failed.
pub const POD_FAILED: &str = "PodFailed";
/// Reason: one or more containers are not ready.
pub const CONTAINERS_NOT_READY: &str = "ContainersNotReady";
/// Reason: one or more init containers have not completed.
pub const CONTAINERS_NOT_INITIALIZED: &str = "ContainersNotInitialized";
/// Reason: one or more readiness gates are not True.
pub const READINESS_GATES_NOT_READY: &str = "ReadinessGatesNotReady";

/// Reason of a True `AllContainersRestarting` (upstream `RestartAllContainersStarted`).
pub const RESTART_ALL_CONTAINERS_STARTED: &str = "RestartAllContainersStarted";
/// Message of a True `AllContainersRestarting`.
pub const RESTART_ALL_CONTAINERS_MESSAGE: &str = "container exited with restart policy rule";

/// Condition type `Ready`.
pub const POD_READY: &str = "Ready";
/// Condition type `ContainersReady`.
pub const CONTAINERS_READY: &str = "ContainersReady";
/// Condition type `Initialized`.
pub const POD_INITIALIZED: &str = "Initialized";

/// Pod phases as the API spells them.
pub const PHASE_PENDING: &str = "Pending";
/// Phase `Running`.
pub const PHASE_RUNNING: &str = "Running";
/// Phase `Succeeded`: every container terminated in success and none will restart.
pub const PHASE_SUCCEEDED: &str = "Succeeded";
/// Phase `Failed`: every container terminated and at least one terminated in failure.
pub const PHASE_FAILED: &str = "Failed";

const TRUE: &str = "True";
const FALSE: &str = "False";

/// Init then regular container statuses: the list the kubelet passes to the generators, so
/// that sidecars count.
pub fn all_container_statuses(status: &k8s_openapi::api::core::v1::PodStatus) -> Vec<ContainerStatus> {
    status
        .init_container_statuses
        .iter()
        .flatten()
        .chain(status.container_statuses.iter().flatten())
        .cloned()
        .collect()
}

/// Whether an init container is a sidecar (`restartPolicy: Always`).
pub fn is_restartable_init_container(container: &Container) -> bool {
    container.restart_policy.as_deref() == Some("Always")
}

/// Upstream `GenerateContainersReadyCondition`.
pub fn generate_containers_ready_condition(
    spec: &PodSpec,
    container_statuses: Option<&[ContainerStatus]>,
    pod_phase: &str,
) -> PodCondition {
    let Some(statuses) = container_statuses else {
        return condition(CONTAINERS_READY, FALSE, Some(UNKNOWN_CONTAINER_STATUSES), None);
    };
    let mut unknown = Vec::new();
    let mut unready = Vec::new();
    let statuses = ByName::new(statuses);
    let sidecars = spec.init_containers.iter().flatten().filter(|c| is_restartable_init_container(c));
    for container in sidecars.chain(spec.containers.iter()) {
        match statuses.get(&container.name) {
            Some(status) if !status.ready => unready.push(container.name.as_str()),
            Some(_) => {}
            None => unknown.push(container.name.as_str()),
        }
    }

    if (pod_phase == PHASE_SUCCEEDED && unknown.is_empty()) || pod_phase == PHASE_FAILED {
        return terminal_phase_condition(CONTAINERS_READY, pod_phase);
    }

    let mut messages = Vec::new();
    if !unknown.is_empty() {
        messages.push(format!("containers with unknown status: {}", go_string_slice(&unknown)));
    }
    if !unready.is_empty() {
        messages.push(format!("containers with unready status: {}", go_string_slice(&unready)));
    }
    if messages.is_empty() {
        condition(CONTAINERS_READY, TRUE, None, None)
    } else {
        condition(CONTAINERS_READY, FALSE, Some(CONTAINERS_NOT_READY), Some(messages.join(", ")))
    }
}

/// Upstream `GeneratePodReadyCondition`. The status manager passes init + regular statuses so
/// that sidecars count.
pub fn generate_pod_ready_condition(
    spec: &PodSpec,
    conditions: &[PodCondition],
    container_statuses: Option<&[ContainerStatus]>,
    pod_phase: &str,
) -> PodCondition {
    let containers_ready = generate_containers_ready_condition(spec, container_statuses, pod_phase);
    if containers_ready.status != TRUE {
        return PodCondition { type_: POD_READY.to_owned(), ..containers_ready };
    }

    let mut messages = Vec::new();
    for gate in spec.readiness_gates.iter().flatten() {
        match conditions.iter().find(|c| c.type_ == gate.condition_type) {
            None => messages.push(format!(
                "corresponding condition of pod readiness gate {} does not exist.",
                go_quote(&gate.condition_type)
            )),
            Some(c) if c.status != TRUE => messages.push(format!(
                "the status of pod readiness gate {} is not \"True\", but {}",
                go_quote(&gate.condition_type),
                c.status
            )),
            Some(_) => {}
        }
    }
    if messages.is_empty() {
        condition(POD_READY, TRUE, None, None)
    } else {
        condition(POD_READY, FALSE, Some(READINESS_GATES_NOT_READY), Some(messages.join(", ")))
    }
}

/// Upstream `GeneratePodInitializedCondition`. The kubelet passes init + regular statuses.
pub fn generate_pod_initialized_condition(
    spec: &PodSpec,
    container_statuses: Option<&[ContainerStatus]>,
    pod_phase: &str,
) -> PodCondition {
    let init_containers = spec.init_containers.as_deref().unwrap_or_default();
    if container_statuses.is_none() && !init_containers.is_empty() {
        return condition(POD_INITIALIZED, FALSE, Some(UNKNOWN_CONTAINER_STATUSES), None);
    }
    let statuses = container_statuses.unwrap_or_default();

    let mut unknown = Vec::new();
    let mut incomplete = Vec::new();
    let by_name = ByName::new(statuses);
    for container in init_containers {
        match by_name.get(&container.name) {
            None => unknown.push(container.name.as_str()),
            Some(status) if !is_init_container_initialized(container, status) => {
                incomplete.push(container.name.as_str())
            }
            Some(_) => {}
        }
    }

    if pod_phase == PHASE_SUCCEEDED && unknown.is_empty() {
        return condition(POD_INITIALIZED, TRUE, Some(POD_COMPLETED), None);
    }
    // A started regular container means the pod initialised before; sidecars restarting since
    // then must not flip Initialized back.
    if has_any_regular_container_started(spec, statuses) {
        return condition(POD_INITIALIZED, TRUE, None, None);
    }

    let mut messages = Vec::new();
    if !unknown.is_empty() {
        messages.push(format!("containers with unknown status: {}", go_string_slice(&unknown)));
    }
    if !incomplete.is_empty() {
        messages.push(format!("containers with incomplete status: {}", go_string_slice(&incomplete)));
    }
    if messages.is_empty() {
        condition(POD_INITIALIZED, TRUE, None, None)
    } else {
        condition(POD_INITIALIZED, FALSE, Some(CONTAINERS_NOT_INITIALIZED), Some(messages.join(", ")))
    }
}

/// Upstream `GeneratePodInitializedCondition` under `RestartAllContainersOnContainerExits`: a
/// pod once initialized stays so. A restart of all containers brings the init containers back
/// from completed to waiting, which would read `Initialized` False (`ContainersNotInitialized`);
/// with the gate on, the kubelet keeps it True when the last status (`old`) had it True. Only
/// that reason is overridden (not `UnknownContainerStatuses`), as upstream's check sits in the
/// branch that reports incomplete or unknown init containers. The caller applies it under the
/// gate, for any pod (upstream reads the gate alone, not the pod's rules).
pub fn keep_initialized_once_initialized(conditions: &mut [PodCondition], old: Option<&PodStatus>) {
    let was_initialized = old
        .and_then(|s| s.conditions.as_deref())
        .into_iter()
        .flatten()
        .any(|c| c.type_ == POD_INITIALIZED && c.status == TRUE);
    if !was_initialized {
        return;
    }
    for c in conditions.iter_mut().filter(|c| {
        c.type_ == POD_INITIALIZED
            && c.status == FALSE
            && c.reason.as_deref() == Some(CONTAINERS_NOT_INITIALIZED)
    }) {
        c.status = TRUE.to_owned();
        c.reason = None;
        c.message = None;
    }
}

/// Upstream `NeedToReconcilePodReadiness`: whether the pod's Ready condition in its own status
/// disagrees (status or message) with what its readiness gates and containers say now.
pub fn need_to_reconcile_pod_readiness(pod: &Pod) -> bool {
    let Some(spec) = pod.spec.as_ref() else { return false };
    if spec.readiness_gates.as_ref().is_none_or(Vec::is_empty) {
        return false;
    }
    let status = pod.status.clone().unwrap_or_default();
    let conditions = status.conditions.as_deref().unwrap_or_default();
    let expected = generate_pod_ready_condition(
        spec,
        conditions,
        status.container_statuses.as_deref(),
        status.phase.as_deref().unwrap_or_default(),
    );
    conditions.iter().find(|c| c.type_ == POD_READY).is_some_and(|current| {
        current.status != expected.status
            || current.message.as_deref().unwrap_or_default()
                != expected.message.as_deref().unwrap_or_default()
    })
}

/// Ready / ContainersReady for a terminal phase: False, reason PodFailed or PodCompleted.
pub fn terminal_phase_condition(condition_type: &str, pod_phase: &str) -> PodCondition {
    let reason = if pod_phase == PHASE_FAILED { POD_FAILED } else { POD_COMPLETED };
    condition(condition_type, FALSE, Some(reason), None)
}

/// Upstream `ShouldAllContainersRestart` with the runtime's containers and the pod's last
/// status (`old`, the status manager's): its `AllContainersRestarting` condition is True, or
/// a container, as the runtime has it or as `old` shows it terminated, exited with a code its
/// rules answer with `RestartAllContainers` (`restart::should_all_containers_restart`).
pub fn all_containers_restarting(spec: &PodSpec, runtime: &[InRuntime<'_>], old: Option<&PodStatus>) -> bool {
    let condition_true = old
        .and_then(|s| s.conditions.as_deref())
        .into_iter()
        .flatten()
        .any(|c| c.type_ == CONDITION_ALL_CONTAINERS_RESTARTING && c.status == TRUE);
    let terminated = |name: &str| {
        old.into_iter()
            .flat_map(|s| {
                s.init_container_statuses.iter().flatten().chain(s.container_statuses.iter().flatten())
            })
            .find(|s| s.name == name)
            .and_then(|s| s.state.as_ref()?.terminated.as_ref())
            .map(|t| t.exit_code)
    };
    should_all_containers_restart(spec, Some(runtime), condition_true, terminated)
}

/// Upstream `GenerateAllContainersRestartingCondition` (KEP-5532): `False` with reason
/// `PodCompleted` or `PodFailed` in a terminal phase; `True`, reason
/// `RestartAllContainersStarted`, message `container exited with restart policy rule`, while
/// the pod restarts all its containers (`restart::should_all_containers_restart`, from the
/// runtime's containers and the last status `old`) and the runtime still has some of them;
/// `False` otherwise, and as soon as every container has been removed. The kubelet adds it only
/// for a pod that could restart that way, under the gate (the caller decides).
pub fn generate_all_containers_restarting_condition(
    spec: &PodSpec,
    runtime: &[InRuntime<'_>],
    old: Option<&PodStatus>,
    phase: &str,
) -> PodCondition {
    match phase {
        PHASE_SUCCEEDED => {
            return condition(CONDITION_ALL_CONTAINERS_RESTARTING, FALSE, Some(POD_COMPLETED), None);
        }
        PHASE_FAILED => return condition(CONDITION_ALL_CONTAINERS_RESTARTING, FALSE, Some(POD_FAILED), None),
        _ => {}
    }
    if !all_containers_restarting(spec, runtime, old) || all_containers_restart_cleaned_up(spec, runtime) {
        return condition(CONDITION_ALL_CONTAINERS_RESTARTING, FALSE, None, None);
    }
    condition(
        CONDITION_ALL_CONTAINERS_RESTARTING,
        TRUE,
        Some(RESTART_ALL_CONTAINERS_STARTED),
        Some(RESTART_ALL_CONTAINERS_MESSAGE.to_owned()),
    )
}

/// Upstream `kubecontainer.HasAnyRegularContainerStarted`: a regular container's status is
/// running or terminated.
pub fn has_any_regular_container_started(spec: &PodSpec, statuses: &[ContainerStatus]) -> bool {
    statuses.iter().any(|status| {
        spec.containers.iter().any(|c| c.name == status.name)
            && status.state.as_ref().is_some_and(|s| s.running.is_some() || s.terminated.is_some())
    })
}

fn is_init_container_initialized(container: &Container, status: &ContainerStatus) -> bool {
    if is_restartable_init_container(container) { status.started == Some(true) } else { status.ready }
}

fn condition(type_: &str, status: &str, reason: Option<&str>, message: Option<String>) -> PodCondition {
    PodCondition {
        type_: type_.to_owned(),
        status: status.to_owned(),
        reason: reason.map(str::to_owned),
        message,
        ..Default::default()
    }
}

/// Go's `%s` of a `[]string`: `[a b]`.
fn go_string_slice(names: &[&str]) -> String {
    format!("[{}]", names.join(" "))
}

#[cfg(test)]
#[allow(clippy::type_complexity, reason = "case tables are tuples")]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::{
        ContainerRestartRule, ContainerRestartRuleOnExitCodes, ContainerState, ContainerStateRunning,
        ContainerStateTerminated, PodReadinessGate, PodStatus,
    };

    fn container(name: &str) -> Container {
        Container { name: name.into(), ..Default::default() }
    }

    fn sidecar(name: &str) -> Container {
        Container { name: name.into(), restart_policy: Some("Always".into()), ..Default::default() }
    }

    fn spec(init: Vec<Container>, containers: Vec<Container>) -> PodSpec {
        PodSpec { init_containers: Some(init), containers, ..Default::default() }
    }

    fn ready(name: &str) -> ContainerStatus {
        ContainerStatus { name: name.into(), ready: true, ..Default::default() }
    }

    fn unready(name: &str) -> ContainerStatus {
        ContainerStatus { name: name.into(), ready: false, ..Default::default() }
    }

    fn running(mut s: ContainerStatus) -> ContainerStatus {
        s.state =
            Some(ContainerState { running: Some(ContainerStateRunning::default()), ..Default::default() });
        s
    }

    fn started(mut s: ContainerStatus, started: bool) -> ContainerStatus {
        s.started = Some(started);
        s
    }

    fn cond(type_: &str, status: &str, reason: Option<&str>, message: Option<&str>) -> PodCondition {
        condition(type_, status, reason, message.map(str::to_owned))
    }

    fn gate(t: &str) -> PodReadinessGate {
        PodReadinessGate { condition_type: t.into() }
    }

    #[test]
    fn containers_ready_table() {
        let one = spec(vec![], vec![container("1234")]);
        let two = spec(vec![], vec![container("1234"), container("5678")]);
        let with_sidecar = spec(vec![sidecar("s"), container("init")], vec![container("1234")]);
        let cases: Vec<(&str, PodSpec, Option<Vec<ContainerStatus>>, &str, PodCondition)> = vec![
            (
                "nil statuses",
                one.clone(),
                None,
                PHASE_RUNNING,
                cond(CONTAINERS_READY, FALSE, Some(UNKNOWN_CONTAINER_STATUSES), None),
            ),
            (
                "empty spec, empty statuses",
                spec(vec![], vec![]),
                Some(vec![]),
                PHASE_RUNNING,
                cond(CONTAINERS_READY, TRUE, None, None),
            ),
            (
                "status missing",
                one.clone(),
                Some(vec![]),
                PHASE_RUNNING,
                cond(
                    CONTAINERS_READY,
                    FALSE,
                    Some(CONTAINERS_NOT_READY),
                    Some("containers with unknown status: [1234]"),
                ),
            ),
            (
                "all ready",
                two.clone(),
                Some(vec![ready("1234"), ready("5678")]),
                PHASE_RUNNING,
                cond(CONTAINERS_READY, TRUE, None, None),
            ),
            (
                "one unknown, one ready",
                two.clone(),
                Some(vec![ready("1234")]),
                PHASE_RUNNING,
                cond(
                    CONTAINERS_READY,
                    FALSE,
                    Some(CONTAINERS_NOT_READY),
                    Some("containers with unknown status: [5678]"),
                ),
            ),
            (
                "unknown and unready",
                spec(vec![], vec![container("a"), container("b"), container("c")]),
                Some(vec![unready("a")]),
                PHASE_RUNNING,
                cond(
                    CONTAINERS_READY,
                    FALSE,
                    Some(CONTAINERS_NOT_READY),
                    Some("containers with unknown status: [b c], containers with unready status: [a]"),
                ),
            ),
            (
                "succeeded with all known",
                one.clone(),
                Some(vec![unready("1234")]),
                PHASE_SUCCEEDED,
                cond(CONTAINERS_READY, FALSE, Some(POD_COMPLETED), None),
            ),
            (
                "succeeded with unknown is not completed",
                two.clone(),
                Some(vec![unready("1234")]),
                PHASE_SUCCEEDED,
                cond(
                    CONTAINERS_READY,
                    FALSE,
                    Some(CONTAINERS_NOT_READY),
                    Some("containers with unknown status: [5678], containers with unready status: [1234]"),
                ),
            ),
            (
                "failed",
                two.clone(),
                Some(vec![ready("1234"), ready("5678")]),
                PHASE_FAILED,
                cond(CONTAINERS_READY, FALSE, Some(POD_FAILED), None),
            ),
            (
                "unready sidecar counts, plain init container does not",
                with_sidecar.clone(),
                Some(vec![unready("s"), ready("1234")]),
                PHASE_RUNNING,
                cond(
                    CONTAINERS_READY,
                    FALSE,
                    Some(CONTAINERS_NOT_READY),
                    Some("containers with unready status: [s]"),
                ),
            ),
            (
                "sidecar listed before regular containers",
                with_sidecar,
                Some(vec![unready("1234")]),
                PHASE_RUNNING,
                cond(
                    CONTAINERS_READY,
                    FALSE,
                    Some(CONTAINERS_NOT_READY),
                    Some("containers with unknown status: [s], containers with unready status: [1234]"),
                ),
            ),
        ];
        for (name, spec, statuses, phase, want) in cases {
            let got = generate_containers_ready_condition(&spec, statuses.as_deref(), phase);
            assert_eq!(got, want, "case {name}");
        }
    }

    #[test]
    fn pod_ready_table() {
        let one = spec(vec![], vec![container("1234")]);
        let gated = |gates: &[&str]| PodSpec {
            readiness_gates: Some(gates.iter().map(|g| gate(g)).collect()),
            ..one.clone()
        };
        let ok = Some(vec![ready("1234")]);
        let cases: Vec<(&str, PodSpec, Vec<PodCondition>, Option<Vec<ContainerStatus>>, &str, PodCondition)> = vec![
            (
                "nil statuses",
                one.clone(),
                vec![],
                None,
                PHASE_RUNNING,
                cond(POD_READY, FALSE, Some(UNKNOWN_CONTAINER_STATUSES), None),
            ),
            ("ready", one.clone(), vec![], ok.clone(), PHASE_RUNNING, cond(POD_READY, TRUE, None, None)),
            (
                "containers not ready carries reason and message",
                one.clone(),
                vec![],
                Some(vec![unready("1234")]),
                PHASE_RUNNING,
                cond(
                    POD_READY,
                    FALSE,
                    Some(CONTAINERS_NOT_READY),
                    Some("containers with unready status: [1234]"),
                ),
            ),
            (
                "gate missing",
                gated(&["example.com/gate"]),
                vec![],
                ok.clone(),
                PHASE_RUNNING,
                cond(
                    POD_READY,
                    FALSE,
                    Some(READINESS_GATES_NOT_READY),
                    Some(
                        "corresponding condition of pod readiness gate \"example.com/gate\" does not exist.",
                    ),
                ),
            ),
            (
                "gate false and gate unknown",
                gated(&["a", "b", "c"]),
                vec![
                    cond("a", FALSE, None, None),
                    cond("b", "Unknown", None, None),
                    cond("c", TRUE, None, None),
                ],
                ok.clone(),
                PHASE_RUNNING,
                cond(
                    POD_READY,
                    FALSE,
                    Some(READINESS_GATES_NOT_READY),
                    Some(
                        "the status of pod readiness gate \"a\" is not \"True\", but False, the status of pod readiness gate \"b\" is not \"True\", but Unknown",
                    ),
                ),
            ),
            (
                "gates true",
                gated(&["a"]),
                vec![cond("a", TRUE, None, None)],
                ok.clone(),
                PHASE_RUNNING,
                cond(POD_READY, TRUE, None, None),
            ),
            (
                "failed phase",
                gated(&["a"]),
                vec![],
                ok.clone(),
                PHASE_FAILED,
                cond(POD_READY, FALSE, Some(POD_FAILED), None),
            ),
            (
                "succeeded phase",
                one.clone(),
                vec![],
                ok,
                PHASE_SUCCEEDED,
                cond(POD_READY, FALSE, Some(POD_COMPLETED), None),
            ),
        ];
        for (name, spec, conditions, statuses, phase, want) in cases {
            let got = generate_pod_ready_condition(&spec, &conditions, statuses.as_deref(), phase);
            assert_eq!(got, want, "case {name}");
        }
    }

    #[test]
    fn pod_initialized_table() {
        let no_init = spec(vec![], vec![container("c")]);
        let init = spec(vec![container("i1"), container("i2")], vec![container("c")]);
        let with_sidecar = spec(vec![sidecar("s")], vec![container("c")]);
        let terminated = |name: &str| ContainerStatus {
            name: name.into(),
            state: Some(ContainerState {
                terminated: Some(ContainerStateTerminated::default()),
                ..Default::default()
            }),
            ..Default::default()
        };
        let cases: Vec<(&str, PodSpec, Option<Vec<ContainerStatus>>, &str, PodCondition)> = vec![
            (
                "no init containers, nil statuses",
                no_init.clone(),
                None,
                PHASE_PENDING,
                cond(POD_INITIALIZED, TRUE, None, None),
            ),
            (
                "no init containers, empty statuses",
                no_init,
                Some(vec![]),
                PHASE_PENDING,
                cond(POD_INITIALIZED, TRUE, None, None),
            ),
            (
                "nil statuses",
                init.clone(),
                None,
                PHASE_PENDING,
                cond(POD_INITIALIZED, FALSE, Some(UNKNOWN_CONTAINER_STATUSES), None),
            ),
            (
                "all init done",
                init.clone(),
                Some(vec![ready("i1"), ready("i2")]),
                PHASE_PENDING,
                cond(POD_INITIALIZED, TRUE, None, None),
            ),
            (
                "unknown and incomplete",
                init.clone(),
                Some(vec![unready("i2")]),
                PHASE_PENDING,
                cond(
                    POD_INITIALIZED,
                    FALSE,
                    Some(CONTAINERS_NOT_INITIALIZED),
                    Some("containers with unknown status: [i1], containers with incomplete status: [i2]"),
                ),
            ),
            (
                "succeeded with all known",
                init.clone(),
                Some(vec![unready("i1"), unready("i2")]),
                PHASE_SUCCEEDED,
                cond(POD_INITIALIZED, TRUE, Some(POD_COMPLETED), None),
            ),
            (
                "regular container started after init",
                init.clone(),
                Some(vec![unready("i1"), unready("i2"), running(ready("c"))]),
                PHASE_RUNNING,
                cond(POD_INITIALIZED, TRUE, None, None),
            ),
            (
                "regular container terminated counts as started",
                init.clone(),
                Some(vec![unready("i1"), unready("i2"), terminated("c")]),
                PHASE_RUNNING,
                cond(POD_INITIALIZED, TRUE, None, None),
            ),
            (
                "sidecar not started",
                with_sidecar.clone(),
                Some(vec![started(running(ready("s")), false)]),
                PHASE_PENDING,
                cond(
                    POD_INITIALIZED,
                    FALSE,
                    Some(CONTAINERS_NOT_INITIALIZED),
                    Some("containers with incomplete status: [s]"),
                ),
            ),
            (
                "sidecar started, even unready",
                with_sidecar.clone(),
                Some(vec![started(running(unready("s")), true)]),
                PHASE_PENDING,
                cond(POD_INITIALIZED, TRUE, None, None),
            ),
            (
                "sidecar restarting after regular container ran",
                with_sidecar,
                Some(vec![started(unready("s"), false), running(ready("c"))]),
                PHASE_RUNNING,
                cond(POD_INITIALIZED, TRUE, None, None),
            ),
        ];
        for (name, spec, statuses, phase, want) in cases {
            let got = generate_pod_initialized_condition(&spec, statuses.as_deref(), phase);
            assert_eq!(got, want, "case {name}");
        }
    }

    #[test]
    fn need_to_reconcile_pod_readiness_table() {
        let pod = |gates: Vec<&str>, conditions: Vec<PodCondition>| Pod {
            spec: Some(PodSpec {
                containers: vec![container("c")],
                readiness_gates: Some(gates.into_iter().map(gate).collect()),
                ..Default::default()
            }),
            status: Some(PodStatus {
                phase: Some(PHASE_RUNNING.into()),
                conditions: Some(conditions),
                container_statuses: Some(vec![ready("c")]),
                ..Default::default()
            }),
            ..Default::default()
        };
        let cases = vec![
            ("no gates", pod(vec![], vec![cond(POD_READY, FALSE, None, None)]), false),
            ("no ready condition", pod(vec!["g"], vec![cond("g", TRUE, None, None)]), false),
            (
                "ready matches",
                pod(vec!["g"], vec![cond("g", TRUE, None, None), cond(POD_READY, TRUE, None, None)]),
                false,
            ),
            (
                "gate flipped true",
                pod(vec!["g"], vec![cond("g", TRUE, None, None), cond(POD_READY, FALSE, None, None)]),
                true,
            ),
            (
                "gate flipped false",
                pod(vec!["g"], vec![cond("g", FALSE, None, None), cond(POD_READY, TRUE, None, None)]),
                true,
            ),
            (
                "message differs",
                pod(
                    vec!["g"],
                    vec![
                        cond("g", FALSE, None, None),
                        cond(POD_READY, FALSE, Some(READINESS_GATES_NOT_READY), Some("stale")),
                    ],
                ),
                true,
            ),
            (
                "status and message agree",
                pod(
                    vec!["g"],
                    vec![
                        cond("g", FALSE, None, None),
                        cond(
                            POD_READY,
                            FALSE,
                            Some("Other"),
                            Some("the status of pod readiness gate \"g\" is not \"True\", but False"),
                        ),
                    ],
                ),
                false,
            ),
        ];
        for (name, pod, want) in cases {
            assert_eq!(need_to_reconcile_pod_readiness(&pod), want, "case {name}");
        }
    }

    #[test]
    fn go_formatting() {
        assert_eq!(go_string_slice(&["a", "b"]), "[a b]");
        assert_eq!(go_string_slice(&["1234"]), "[1234]");
        assert_eq!(go_quote("a\"b"), "\"a\\\"b\"");
    }

    /// `RestartAllContainersOnContainerExits`: an init container waiting again after a restart
    /// of all containers leaves `Initialized` True when the last status had it True, and only
    /// then; an unknown-statuses False and a never-initialized pod are untouched.
    #[test]
    fn initialized_stays_true_once_the_pod_was_initialized() {
        let spec = PodSpec {
            init_containers: Some(vec![container("init")]),
            containers: vec![container("app")],
            ..Default::default()
        };
        let waiting_again = vec![unready("init"), unready("app")];
        let generated =
            || vec![generate_pod_initialized_condition(&spec, Some(&waiting_again), PHASE_PENDING)];
        let old = |initialized: &str| PodStatus {
            conditions: Some(vec![PodCondition {
                type_: POD_INITIALIZED.into(),
                status: initialized.into(),
                ..Default::default()
            }]),
            ..Default::default()
        };
        let mut conditions = generated();
        assert_eq!(conditions[0].reason.as_deref(), Some(CONTAINERS_NOT_INITIALIZED));
        keep_initialized_once_initialized(&mut conditions, Some(&old(TRUE)));
        assert_eq!(
            (
                conditions[0].status.as_str(),
                conditions[0].reason.as_deref(),
                conditions[0].message.as_deref()
            ),
            (TRUE, None, None)
        );
        for previous in [Some(old(FALSE)), None] {
            let mut conditions = generated();
            keep_initialized_once_initialized(&mut conditions, previous.as_ref());
            assert_eq!(conditions[0].status, FALSE, "{previous:?}");
        }
        let mut unknown = vec![generate_pod_initialized_condition(&spec, None, PHASE_PENDING)];
        keep_initialized_once_initialized(&mut unknown, Some(&old(TRUE)));
        assert_eq!(unknown[0].reason.as_deref(), Some(UNKNOWN_CONTAINER_STATUSES));
    }

    /// Upstream `TestGenerateAllContainersRestartingCondition`, case by case.
    #[test]
    fn all_containers_restarting_follows_the_runtime_and_the_last_status() {
        let trigger = Container {
            name: "trigger".into(),
            restart_policy: Some("Never".into()),
            restart_policy_rules: Some(vec![ContainerRestartRule {
                action: "RestartAllContainers".into(),
                exit_codes: Some(ContainerRestartRuleOnExitCodes {
                    operator: "In".into(),
                    values: Some(vec![42]),
                }),
            }]),
            ..Default::default()
        };
        let spec = PodSpec { containers: vec![container("container1"), trigger], ..Default::default() };
        let old_true = PodStatus {
            conditions: Some(vec![PodCondition {
                type_: "AllContainersRestarting".into(),
                status: "True".into(),
                ..Default::default()
            }]),
            ..Default::default()
        };
        let running = InRuntime { name: "container", exited_with: None };
        let exited = |name, code| InRuntime { name, exited_with: Some(code) };
        let want_true =
            ("True", Some("RestartAllContainersStarted"), Some("container exited with restart policy rule"));
        let cases: Vec<(
            &str,
            Vec<InRuntime<'_>>,
            Option<&PodStatus>,
            &str,
            (&str, Option<&str>, Option<&str>),
        )> = vec![
            ("pod pending", vec![], None, PHASE_PENDING, ("False", None, None)),
            ("pod failed", vec![], None, PHASE_FAILED, ("False", Some("PodFailed"), None)),
            ("pod succeeded", vec![], None, PHASE_SUCCEEDED, ("False", Some("PodCompleted"), None)),
            (
                "a container triggers the rule",
                vec![running, exited("trigger", 42)],
                None,
                PHASE_RUNNING,
                want_true,
            ),
            (
                "cleaning up",
                vec![exited("container", 0), exited("trigger", 42)],
                Some(&old_true),
                PHASE_RUNNING,
                want_true,
            ),
            ("cleaned up", vec![], Some(&old_true), PHASE_PENDING, ("False", None, None)),
            ("another exit code", vec![exited("trigger", 1)], None, PHASE_RUNNING, ("False", None, None)),
        ];
        for (name, runtime, old, phase, (status, reason, message)) in cases {
            let got = generate_all_containers_restarting_condition(&spec, &runtime, old, phase);
            assert_eq!(got.type_, "AllContainersRestarting", "{name}");
            assert_eq!(
                (got.status.as_str(), got.reason.as_deref(), got.message.as_deref()),
                (status, reason, message),
                "{name}"
            );
        }
    }
}
