//! The checks and fix-ups `updateStatusInternal` applies to a status before storing it: the
//! illegal-transition check, `lastTransitionTime` of the kubelet's conditions and the pod's
//! `startTime` (docs/status-manager.md §5.8 steps 2–4). Upstream: `checkContainerStateTransition`,
//! `updateLastTransitionTime` and the start-time block in `pkg/kubelet/status/status_manager.go`.
//!
//! Time is never read here: callers pass `now` from their injected clock.

use k8s_openapi::api::core::v1::{Container, ContainerStatus, PodSpec, PodStatus};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use k8s_openapi::jiff::Timestamp;

use super::equality::{
    ALL_CONTAINERS_RESTARTING, CONTAINERS_READY, DISRUPTION_TARGET, POD_INITIALIZED, POD_READY,
    POD_READY_TO_START_CONTAINERS, POD_SCHEDULED,
};
use super::generate::is_restartable_init_container;
use crate::features::{Feature, FeatureGates};
use crate::restart::{all_containers_could_restart, container_should_restart};

/// `v1.RestartPolicyAlways`: also what an unset pod restart policy means (API defaulting).
pub const RESTART_POLICY_ALWAYS: &str = "Always";
/// `v1.RestartPolicyOnFailure`.
pub const RESTART_POLICY_ON_FAILURE: &str = "OnFailure";

/// The conditions whose `lastTransitionTime` the status manager maintains, in upstream's order,
/// then `AllContainersRestarting` (present only under `RestartAllContainersOnContainerExits`).
pub const LAST_TRANSITION_TIME_CONDITIONS: [&str; 7] = [
    CONTAINERS_READY,
    POD_READY,
    POD_INITIALIZED,
    POD_READY_TO_START_CONTAINERS,
    POD_SCHEDULED,
    DISRUPTION_TARGET,
    ALL_CONTAINERS_RESTARTING,
];

/// Go's zero `time.Time` (0001-01-01T00:00:00Z): upstream treats a start time equal to it as unset.
const GO_ZERO_TIME: Timestamp = Timestamp::constant(-62_135_596_800, 0);

/// Why a status update was refused (upstream returns these from `checkContainerStateTransition`;
/// the caller logs "Status update on pod aborted" and keeps the previous status).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TransitionError {
    /// A regular container went from terminated back to waiting or running.
    #[error("terminated container {0} attempted illegal transition to non-terminated state")]
    Container(String),
    /// A regular (non-restartable) init container went from terminated back to non-terminated.
    #[error("terminated init container {0} attempted illegal transition to non-terminated state")]
    InitContainer(String),
    /// The old init container statuses do not line up with the spec's init containers by index.
    #[error("found mismatch between pod spec and status, container: {0}")]
    SpecStatusMismatch(String),
}

/// [`check_container_state_transition`] under the feature gates in force: with
/// `RestartAllContainersOnContainerExits`, a pod that could restart all its containers
/// (`restart::all_containers_could_restart`) lets every container leave the terminated state
/// (upstream's allowance at the top of `checkContainerStateTransition`): a restart of the whole
/// pod brings back containers whatever their own policy says.
pub fn check_container_state_transition_under(
    old: &PodStatus,
    new: &PodStatus,
    spec: &PodSpec,
    gates: &FeatureGates,
) -> Result<(), TransitionError> {
    if gates.enabled(Feature::RestartAllContainersOnContainerExits) && all_containers_could_restart(spec) {
        return Ok(());
    }
    check_container_state_transition(old, new, spec, gates.enabled(Feature::ContainerRestartRules))
}

/// Upstream `checkContainerStateTransition`: no container may leave the terminated state unless
/// the pod restarts it. Restart policy `Always` (or unset, which the API defaults to `Always`)
/// allows everything; `OnFailure` lets a container that exited non-zero run again; restartable
/// init containers are always allowed to restart. With `container_restart_rules` (the
/// `ContainerRestartRules` gate) a regular container that its own policy or rules restart for
/// its exit code may run again too, and so may an init container (`restart::container_should_restart`;
/// docs/prober.md §3.10).
pub fn check_container_state_transition(
    old: &PodStatus,
    new: &PodStatus,
    spec: &PodSpec,
    container_restart_rules: bool,
) -> Result<(), TransitionError> {
    let restart_policy = spec.restart_policy.as_deref().unwrap_or(RESTART_POLICY_ALWAYS);
    if restart_policy == RESTART_POLICY_ALWAYS {
        return Ok(());
    }
    let on_failure = restart_policy == RESTART_POLICY_ON_FAILURE;

    let new_regular = new.container_statuses.as_deref().unwrap_or_default();
    // Under the gate, a container its own policy or rules restart for that exit code. Asked
    // only of a container seen running again (rare), so the search by name costs nothing
    // otherwise.
    let restarts_on_its_own = |status: &ContainerStatus, specs: &[Container]| {
        container_restart_rules
            && terminated_exit_code(status).is_some_and(|code| {
                specs
                    .iter()
                    .find(|c| c.name == status.name)
                    .is_some_and(|c| container_should_restart(c, spec, code))
            })
    };
    for old_status in old.container_statuses.iter().flatten() {
        if must_stay_terminated(old_status, on_failure)
            && let Some(restarted) = find_restarted(new_regular, &old_status.name)
            && !restarts_on_its_own(old_status, &spec.containers)
        {
            return Err(TransitionError::Container(restarted.name.clone()));
        }
    }

    let init_specs = spec.init_containers.as_deref().unwrap_or_default();
    let old_init = old.init_container_statuses.as_deref().unwrap_or_default();
    let new_init = new.init_container_statuses.as_deref().unwrap_or_default();
    for (i, old_status) in old_init.iter().enumerate() {
        let Some(init_spec) = get_container_by_index(init_specs, old_init, i) else {
            return Err(TransitionError::SpecStatusMismatch(old_status.name.clone()));
        };
        if is_restartable_init_container(init_spec) {
            continue;
        }
        if must_stay_terminated(old_status, on_failure)
            && let Some(restarted) = find_restarted(new_init, &old_status.name)
            && !restarts_on_its_own(old_status, std::slice::from_ref(init_spec))
        {
            return Err(TransitionError::InitContainer(restarted.name.clone()));
        }
    }
    Ok(())
}

/// A terminated container must stay terminated, except a failed one under `OnFailure`.
fn must_stay_terminated(status: &ContainerStatus, on_failure: bool) -> bool {
    match terminated_exit_code(status) {
        None => false,
        Some(code) => code == 0 || !on_failure,
    }
}

fn terminated_exit_code(status: &ContainerStatus) -> Option<i32> {
    status.state.as_ref()?.terminated.as_ref().map(|t| t.exit_code)
}

/// The first new status of that name that is not terminated (upstream scans them all in order).
fn find_restarted<'a>(statuses: &'a [ContainerStatus], name: &str) -> Option<&'a ContainerStatus> {
    statuses.iter().find(|s| s.name == name && terminated_exit_code(s).is_none())
}

/// Upstream `kubeutil.GetContainerByIndex`: the spec container at `index`, if the status at the
/// same index carries its name.
pub(crate) fn get_container_by_index<'a>(
    containers: &'a [Container],
    statuses: &[ContainerStatus],
    index: usize,
) -> Option<&'a Container> {
    let container = containers.get(index)?;
    (statuses.get(index)?.name == container.name).then_some(container)
}

/// Upstream's six `updateLastTransitionTime` calls in `updateStatusInternal`: each of
/// [`LAST_TRANSITION_TIME_CONDITIONS`] present in `new` keeps the old condition's time when the
/// old status has it with the same `status`, and gets `now` otherwise. `old` is `None` when there
/// is no previous status at all.
pub fn update_last_transition_times(old: Option<&PodStatus>, new: &mut PodStatus, now: Time) {
    for condition_type in LAST_TRANSITION_TIME_CONDITIONS {
        update_last_transition_time(old, new, condition_type, &now);
    }
}

/// Upstream `updateLastTransitionTime` for one condition type. Only the first condition of that
/// type is touched (upstream's `GetPodCondition` returns the first); an absent one is left alone.
pub fn update_last_transition_time(
    old: Option<&PodStatus>,
    new: &mut PodStatus,
    condition_type: &str,
    now: &Time,
) {
    let Some(condition) = new.conditions.iter_mut().flatten().find(|c| c.type_ == condition_type) else {
        return;
    };
    let old_condition = old.and_then(|o| o.conditions.iter().flatten().find(|c| c.type_ == condition_type));
    condition.last_transition_time = match old_condition {
        // Upstream copies the old time as is, even when it is unset.
        Some(oc) if oc.status == condition.status => oc.last_transition_time.clone(),
        _ => Some(now.clone()),
    };
}

/// `updateStatusInternal` step 4: the start time never changes once set; a status without one
/// gets `now`. An unset time and Go's zero time count as "none".
pub fn update_start_time(old: Option<&PodStatus>, new: &mut PodStatus, now: Time) {
    if let Some(start) = old.and_then(|o| o.start_time.as_ref()).filter(|t| !is_zero_time(t)) {
        new.start_time = Some(start.clone());
    } else if new.start_time.as_ref().is_none_or(is_zero_time) {
        new.start_time = Some(now);
    }
}

/// Go's `metav1.Time.IsZero` for a set time.
pub(crate) fn is_zero_time(t: &Time) -> bool {
    t.0 == GO_ZERO_TIME
}

#[cfg(test)]
#[allow(clippy::unwrap_used)] // a panic is the failure report
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::{
        ContainerState, ContainerStateRunning, ContainerStateTerminated, ContainerStateWaiting, PodCondition,
    };

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

    fn terminated(name: &str, exit_code: i32) -> ContainerStatus {
        ContainerStatus {
            name: name.into(),
            state: Some(ContainerState {
                terminated: Some(ContainerStateTerminated { exit_code, ..Default::default() }),
                ..Default::default()
            }),
            ..Default::default()
        }
    }

    fn container(name: &str) -> Container {
        Container { name: name.into(), ..Default::default() }
    }

    fn sidecar(name: &str) -> Container {
        Container { restart_policy: Some("Always".into()), ..container(name) }
    }

    fn spec(policy: Option<&str>, init: Vec<Container>, regular: &[&str]) -> PodSpec {
        PodSpec {
            restart_policy: policy.map(Into::into),
            init_containers: Some(init),
            containers: regular.iter().map(|n| container(n)).collect(),
            ..Default::default()
        }
    }

    fn status(init: Vec<ContainerStatus>, regular: Vec<ContainerStatus>) -> PodStatus {
        PodStatus {
            init_container_statuses: Some(init),
            container_statuses: Some(regular),
            ..Default::default()
        }
    }

    #[test]
    fn container_state_transitions() {
        struct Case {
            name: &'static str,
            spec: PodSpec,
            old: PodStatus,
            new: PodStatus,
            want: Result<(), TransitionError>,
        }
        let cases = vec![
            Case {
                name: "Always allows terminated to running",
                spec: spec(Some("Always"), vec![container("i")], &["c"]),
                old: status(vec![terminated("i", 0)], vec![terminated("c", 0)]),
                new: status(vec![running("i")], vec![running("c")]),
                want: Ok(()),
            },
            Case {
                name: "unset policy means Always",
                spec: spec(None, vec![], &["c"]),
                old: status(vec![], vec![terminated("c", 0)]),
                new: status(vec![], vec![running("c")]),
                want: Ok(()),
            },
            Case {
                name: "Never rejects regular terminated to running",
                spec: spec(Some("Never"), vec![], &["c"]),
                old: status(vec![], vec![terminated("c", 1)]),
                new: status(vec![], vec![running("c")]),
                want: Err(TransitionError::Container("c".into())),
            },
            Case {
                name: "Never rejects regular terminated to waiting",
                spec: spec(Some("Never"), vec![], &["c"]),
                old: status(vec![], vec![terminated("c", 0)]),
                new: status(vec![], vec![waiting("c")]),
                want: Err(TransitionError::Container("c".into())),
            },
            Case {
                name: "Never allows terminated to terminated",
                spec: spec(Some("Never"), vec![], &["c"]),
                old: status(vec![], vec![terminated("c", 0)]),
                new: status(vec![], vec![terminated("c", 2)]),
                want: Ok(()),
            },
            Case {
                name: "Never allows running to terminated",
                spec: spec(Some("Never"), vec![], &["c"]),
                old: status(vec![], vec![running("c")]),
                new: status(vec![], vec![terminated("c", 0)]),
                want: Ok(()),
            },
            Case {
                name: "Never allows a container missing from the new status",
                spec: spec(Some("Never"), vec![], &["c"]),
                old: status(vec![], vec![terminated("c", 0)]),
                new: status(vec![], vec![running("other")]),
                want: Ok(()),
            },
            Case {
                name: "Never rejects init terminated to running",
                spec: spec(Some("Never"), vec![container("i")], &["c"]),
                old: status(vec![terminated("i", 0)], vec![waiting("c")]),
                new: status(vec![running("i")], vec![waiting("c")]),
                want: Err(TransitionError::InitContainer("i".into())),
            },
            Case {
                name: "OnFailure allows a non-zero exit to restart",
                spec: spec(Some("OnFailure"), vec![container("i")], &["c"]),
                old: status(vec![terminated("i", 1)], vec![terminated("c", 3)]),
                new: status(vec![running("i")], vec![running("c")]),
                want: Ok(()),
            },
            Case {
                name: "OnFailure rejects a zero exit restarting",
                spec: spec(Some("OnFailure"), vec![], &["c"]),
                old: status(vec![], vec![terminated("c", 0)]),
                new: status(vec![], vec![running("c")]),
                want: Err(TransitionError::Container("c".into())),
            },
            Case {
                name: "OnFailure rejects an init zero exit restarting",
                spec: spec(Some("OnFailure"), vec![container("i")], &[]),
                old: status(vec![terminated("i", 0)], vec![]),
                new: status(vec![waiting("i")], vec![]),
                want: Err(TransitionError::InitContainer("i".into())),
            },
            Case {
                name: "restartable init container skipped",
                spec: spec(Some("Never"), vec![sidecar("s"), container("i")], &["c"]),
                old: status(vec![terminated("s", 0), terminated("i", 0)], vec![running("c")]),
                new: status(vec![running("s"), terminated("i", 0)], vec![running("c")]),
                want: Ok(()),
            },
            Case {
                name: "init status out of spec order is a mismatch",
                spec: spec(Some("Never"), vec![container("a"), container("b")], &[]),
                old: status(vec![waiting("b"), waiting("a")], vec![]),
                new: status(vec![waiting("b"), waiting("a")], vec![]),
                want: Err(TransitionError::SpecStatusMismatch("b".into())),
            },
            Case {
                name: "more init statuses than spec is a mismatch",
                spec: spec(Some("Never"), vec![container("a")], &[]),
                old: status(vec![waiting("a"), waiting("x")], vec![]),
                new: status(vec![], vec![]),
                want: Err(TransitionError::SpecStatusMismatch("x".into())),
            },
        ];
        for case in cases {
            let got = check_container_state_transition(&case.old, &case.new, &case.spec, false);
            assert_eq!(got, case.want, "case: {}", case.name);
        }
    }

    /// `ContainerRestartRules`: a container its own policy or rules restart for its exit code
    /// may leave the terminated state in a `Never` or `OnFailure` pod; one they do not restart
    /// may not, and with the gate off only the pod's policy counts.
    #[test]
    fn container_restart_rules_let_a_container_restarted_by_its_own_policy_run_again() {
        use crate::restart::test_containers::with_own_policy;
        let own =
            |name: &str, policy: &str, restart_on: &[i32]| with_own_policy(name, Some(policy), restart_on);
        let pod = |policy: &str, init: Vec<Container>, regular: Vec<Container>| PodSpec {
            restart_policy: Some(policy.into()),
            init_containers: Some(init),
            containers: regular,
            ..Default::default()
        };
        let cases = [
            ("own Always in Never", pod("Never", vec![], vec![own("c", "Always", &[])]), 0, true),
            ("own OnFailure, exit 0", pod("Never", vec![], vec![own("c", "OnFailure", &[])]), 0, false),
            ("own OnFailure, exit 1", pod("Never", vec![], vec![own("c", "OnFailure", &[])]), 1, true),
            ("own Never, rule matches", pod("OnFailure", vec![], vec![own("c", "Never", &[7])]), 7, true),
            (
                "own Never, rule misses, exit 0",
                pod("OnFailure", vec![], vec![own("c", "Never", &[7])]),
                0,
                false,
            ),
        ];
        for (name, spec, code, allowed) in cases {
            let old = status(vec![], vec![terminated("c", code)]);
            let new = status(vec![], vec![running("c")]);
            let want = if allowed { Ok(()) } else { Err(TransitionError::Container("c".into())) };
            assert_eq!(check_container_state_transition(&old, &new, &spec, true), want, "{name}");
            assert_eq!(
                check_container_state_transition(&old, &new, &spec, false),
                if code != 0 && spec.restart_policy.as_deref() == Some("OnFailure") {
                    Ok(())
                } else {
                    Err(TransitionError::Container("c".into()))
                },
                "{name}, gate off"
            );
        }
        let spec = pod("Never", vec![own("i", "OnFailure", &[])], vec![container("c")]);
        let old = status(vec![terminated("i", 3)], vec![waiting("c")]);
        let new = status(vec![running("i")], vec![waiting("c")]);
        assert_eq!(check_container_state_transition(&old, &new, &spec, true), Ok(()), "init, own OnFailure");
        assert_eq!(
            check_container_state_transition(&old, &new, &spec, false),
            Err(TransitionError::InitContainer("i".into())),
            "init, gate off"
        );
    }

    /// `RestartAllContainersOnContainerExits`: in a pod with a `RestartAllContainers` rule every
    /// container may leave the terminated state, whatever its own policy; without the gate, or
    /// in a pod without such a rule, the check is the one above.
    #[test]
    fn a_pod_that_restarts_all_its_containers_lets_them_all_run_again() {
        use crate::restart::ACTION_RESTART_ALL_CONTAINERS;
        use crate::restart::test_containers::with_own_policy;
        let mut trigger = with_own_policy("trigger", Some("Never"), &[42]);
        if let Some(rules) = trigger.restart_policy_rules.as_mut() {
            rules[0].action = ACTION_RESTART_ALL_CONTAINERS.into();
        }
        let spec = PodSpec {
            restart_policy: Some("Never".into()),
            init_containers: Some(vec![container("init")]),
            containers: vec![container("app"), trigger],
            ..Default::default()
        };
        let old =
            status(vec![terminated("init", 0)], vec![terminated("app", 137), terminated("trigger", 42)]);
        let new = status(vec![waiting("init")], vec![waiting("app"), waiting("trigger")]);
        let on = FeatureGates::default()
            .with(Feature::RestartAllContainersOnContainerExits, true)
            .expect("the gate is implemented");
        assert_eq!(check_container_state_transition_under(&old, &new, &spec, &on), Ok(()));
        assert_eq!(
            check_container_state_transition_under(&old, &new, &spec, &FeatureGates::default()),
            Err(TransitionError::Container("app".into())),
            "gate off"
        );
        let mut plain = spec.clone();
        plain.containers[1].restart_policy_rules = None;
        assert_eq!(
            check_container_state_transition_under(&old, &new, &plain, &on),
            Err(TransitionError::Container("app".into())),
            "no RestartAllContainers rule"
        );
    }

    #[test]
    fn transition_error_texts() {
        let cases = [
            (
                "regular",
                TransitionError::Container("web".into()),
                "terminated container web attempted illegal transition to non-terminated state",
            ),
            (
                "init",
                TransitionError::InitContainer("setup".into()),
                "terminated init container setup attempted illegal transition to non-terminated state",
            ),
            (
                "mismatch",
                TransitionError::SpecStatusMismatch("x".into()),
                "found mismatch between pod spec and status, container: x",
            ),
        ];
        for (name, err, want) in cases {
            assert_eq!(err.to_string(), want, "case: {name}");
        }
    }

    fn at(second: i64) -> Time {
        Time(Timestamp::constant(second, 0))
    }

    fn cond(t: &str, status: &str, ltt: Option<Time>) -> PodCondition {
        PodCondition {
            type_: t.into(),
            status: status.into(),
            last_transition_time: ltt,
            ..Default::default()
        }
    }

    fn with_conditions(conditions: Vec<PodCondition>) -> PodStatus {
        PodStatus { conditions: Some(conditions), ..Default::default() }
    }

    fn ltt_of(status: &PodStatus, t: &str) -> Option<Time> {
        status.conditions.iter().flatten().find(|c| c.type_ == t).and_then(|c| c.last_transition_time.clone())
    }

    #[test]
    fn last_transition_times() {
        let now = at(1000);
        struct Case {
            name: &'static str,
            old: Option<PodStatus>,
            new: Vec<PodCondition>,
            want: Vec<(&'static str, Option<Time>)>,
        }
        let cases = vec![
            Case {
                name: "kept when status is the same",
                old: Some(with_conditions(vec![cond("Ready", "True", Some(at(10)))])),
                new: vec![cond("Ready", "True", Some(at(500)))],
                want: vec![("Ready", Some(at(10)))],
            },
            Case {
                name: "old unset time copied when status is the same",
                old: Some(with_conditions(vec![cond("Ready", "True", None)])),
                new: vec![cond("Ready", "True", Some(at(500)))],
                want: vec![("Ready", None)],
            },
            Case {
                name: "now when status flips",
                old: Some(with_conditions(vec![cond("ContainersReady", "True", Some(at(10)))])),
                new: vec![cond("ContainersReady", "False", Some(at(10)))],
                want: vec![("ContainersReady", Some(at(1000)))],
            },
            Case {
                name: "now when newly present",
                old: Some(with_conditions(vec![])),
                new: vec![cond("Initialized", "True", None)],
                want: vec![("Initialized", Some(at(1000)))],
            },
            Case {
                name: "now when there is no old status",
                old: None,
                new: vec![cond("PodScheduled", "True", Some(at(3)))],
                want: vec![("PodScheduled", Some(at(1000)))],
            },
            Case {
                name: "all six maintained types",
                old: None,
                new: LAST_TRANSITION_TIME_CONDITIONS.iter().map(|t| cond(t, "True", None)).collect(),
                want: LAST_TRANSITION_TIME_CONDITIONS.iter().map(|t| (*t, Some(at(1000)))).collect(),
            },
            Case {
                name: "foreign condition untouched",
                old: None,
                new: vec![cond("example.com/gate", "True", Some(at(7)))],
                want: vec![("example.com/gate", Some(at(7)))],
            },
            Case {
                name: "absent condition untouched",
                old: Some(with_conditions(vec![cond("Ready", "True", Some(at(10)))])),
                new: vec![],
                want: vec![],
            },
        ];
        for case in cases {
            let mut new = with_conditions(case.new);
            update_last_transition_times(case.old.as_ref(), &mut new, now.clone());
            for (t, want) in &case.want {
                assert_eq!(ltt_of(&new, t), *want, "case: {} ({t})", case.name);
            }
            assert_eq!(
                new.conditions.as_ref().map_or(0, Vec::len),
                case.want.len(),
                "case: {} (no condition added)",
                case.name
            );
        }
    }

    #[test]
    fn start_time() {
        let now = at(1000);
        let zero = Some(Time(GO_ZERO_TIME));
        let cases = vec![
            ("old kept over new", Some(at(5)), Some(at(9)), Some(at(5))),
            ("old kept over none", Some(at(5)), None, Some(at(5))),
            ("no old keeps new", None, Some(at(9)), Some(at(9))),
            ("zero old keeps new", zero.clone(), Some(at(9)), Some(at(9))),
            ("neither set gets now", None, None, Some(at(1000))),
            ("zero new gets now", None, zero.clone(), Some(at(1000))),
        ];
        for (name, old_start, new_start, want) in cases {
            let old = PodStatus { start_time: old_start, ..Default::default() };
            let mut new = PodStatus { start_time: new_start.clone(), ..Default::default() };
            update_start_time(Some(&old), &mut new, now.clone());
            assert_eq!(new.start_time, want, "case: {name}");

            let mut new = PodStatus { start_time: new_start.clone(), ..Default::default() };
            update_start_time(None, &mut new, now.clone());
            let want_without_old =
                Some(new_start.filter(|t| !is_zero_time(t)).unwrap_or_else(|| now.clone()));
            assert_eq!(new.start_time, want_without_old, "case: {name} (no old status)");
        }
    }
}
