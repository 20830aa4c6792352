//! Whether a container that exited, or that a probe killed, is started again: the pod's
//! `restartPolicy`, and under the `ContainerRestartRules` gate (KEP-5307, beta and on by default
//! in v1.35) the container's own `restartPolicy` and `restartPolicyRules` (upstream
//! `podutil.ContainerShouldRestart`, and the restart decision of `computePodActions`). The probe
//! worker's stop rule, the status manager's transition check, the standalone runtime and its
//! kill messages all ask here (where each one does: docs/prober.md §3.10).
//!
//! Under `RestartAllContainersOnContainerExits` (KEP-5532, alpha in v1.35) a rule's action may
//! also be `RestartAllContainers`: the exit restarts the whole pod in place. Whether a pod is
//! restarting all its containers (upstream `ShouldAllContainersRestart`), whether the restart
//! has removed every container (`AllContainersRestartCleanedUp`) and whether a pod can restart
//! at all that way (`AllContainersCouldRestart`) are decided here too (docs/prober.md §3.11).

use k8s_openapi::api::core::v1::{Container, ContainerRestartRule, PodSpec};

/// The API's `restartPolicy` values (pod level, and container level under the gate).
pub const ALWAYS: &str = "Always";
/// Restart only after a non-zero exit.
pub const ON_FAILURE: &str = "OnFailure";
/// Never restart.
pub const NEVER: &str = "Never";
/// A rule's action that restarts the container that exited.
pub const ACTION_RESTART: &str = "Restart";
/// A rule's action that restarts every container of the pod in place (KEP-5532, under
/// `RestartAllContainersOnContainerExits`).
pub const ACTION_RESTART_ALL_CONTAINERS: &str = "RestartAllContainers";
/// The pod condition that is True while a pod restarts all its containers (upstream
/// `v1.AllContainersRestarting`).
pub const CONDITION_ALL_CONTAINERS_RESTARTING: &str = "AllContainersRestarting";

/// A restart policy, pod level or container level.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Policy {
    /// Restarted whatever the exit code.
    Always,
    /// Restarted after a non-zero exit.
    OnFailure,
    /// Never restarted.
    Never,
}

impl Policy {
    /// The pod's policy; unset or a value the API would refuse reads as `Always`, the API's
    /// default (upstream's `switch` falls through to `true`).
    pub fn of_pod(spec: &PodSpec) -> Policy {
        match spec.restart_policy.as_deref() {
            Some(ON_FAILURE) => Policy::OnFailure,
            Some(NEVER) => Policy::Never,
            _ => Policy::Always,
        }
    }

    /// The container's own policy, if it sets one the API knows.
    pub fn of_container(container: &Container) -> Option<Policy> {
        match container.restart_policy.as_deref()? {
            ALWAYS => Some(Policy::Always),
            ON_FAILURE => Some(Policy::OnFailure),
            NEVER => Some(Policy::Never),
            _ => None,
        }
    }

    /// Whether a container that exited with `exit_code` is restarted.
    pub fn restarts(self, exit_code: i32) -> bool {
        match self {
            Policy::Always => true,
            Policy::OnFailure => exit_code != 0,
            Policy::Never => false,
        }
    }
}

/// Upstream `ContainerShouldRestart` (`ContainerRestartRules` on): the container's rules in
/// order, the first that matches `exit_code` deciding when its action is `Restart`; then the
/// container's own policy; then the pod's. Rules are read only when the container sets a policy
/// of its own, as upstream reads them (the API requires one beside them).
pub fn container_should_restart(container: &Container, pod: &PodSpec, exit_code: i32) -> bool {
    if container.restart_policy.is_some() {
        if matching_rule(container.restart_policy_rules.as_deref().unwrap_or_default(), exit_code)
            .is_some_and(|rule| rule.action == ACTION_RESTART)
        {
            return true;
        }
        if let Some(policy) = Policy::of_container(container) {
            return policy.restarts(exit_code);
        }
    }
    Policy::of_pod(pod).restarts(exit_code)
}

/// Whether a running container a failed liveness or startup probe kills is started again
/// (upstream `computePodActions`): unless the pod's policy is `Never`, or, with
/// `container_rules` (the gate), the container's own policy when it has one is `Never`. The
/// exit-code rules are not read: the container has not exited when this is decided (they still
/// apply to its exit, [`container_should_restart`]).
pub fn restarts_after_probe_kill(container: &Container, pod: &PodSpec, container_rules: bool) -> bool {
    match Policy::of_container(container).filter(|_| container_rules) {
        Some(own) => own != Policy::Never,
        None => Policy::of_pod(pod) != Policy::Never,
    }
}

/// Whether the container's first rule matching `exit_code` restarts every container of the pod
/// (action `RestartAllContainers`). Read whatever the container's own policy: the API server
/// accepts rules only beside one.
pub fn restarts_all_containers(container: &Container, exit_code: i32) -> bool {
    matching_rule(container.restart_policy_rules.as_deref().unwrap_or_default(), exit_code)
        .is_some_and(|rule| rule.action == ACTION_RESTART_ALL_CONTAINERS)
}

/// Upstream `podutil.AllContainersCouldRestart`: some init or regular container has a rule
/// with the `RestartAllContainers` action. Only such a pod has an `AllContainersRestarting`
/// condition, and only its containers may leave the terminated state whatever their policy.
pub fn all_containers_could_restart(spec: &PodSpec) -> bool {
    spec.init_containers.iter().flatten().chain(&spec.containers).any(|c| {
        c.restart_policy_rules.iter().flatten().any(|rule| rule.action == ACTION_RESTART_ALL_CONTAINERS)
    })
}

/// One container as the runtime has it, for [`should_all_containers_restart`] and
/// [`all_containers_restart_cleaned_up`]: present (not removed) and, if it has exited, with
/// which code.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct InRuntime<'a> {
    /// The container's name in the spec.
    pub name: &'a str,
    /// Its exit code, when its latest instance has exited; `None` while it is created or runs.
    pub exited_with: Option<i32>,
}

/// Upstream `ShouldAllContainersRestart`: the pod is restarting all its containers if its
/// last status (`api`, the status manager's) has the `AllContainersRestarting` condition True,
/// or if some init or regular container exited with a code its rules answer with
/// `RestartAllContainers`: as the runtime has it (`runtime`, when known), or as `api` shows it
/// terminated. `api` is the terminated exit code by container name (the caller reads its
/// status however it keeps it), and whether the condition is True.
pub fn should_all_containers_restart(
    spec: &PodSpec,
    runtime: Option<&[InRuntime<'_>]>,
    api_condition_true: bool,
    api_terminated: impl Fn(&str) -> Option<i32>,
) -> bool {
    if api_condition_true {
        return true;
    }
    spec.init_containers.iter().flatten().chain(&spec.containers).any(|c| {
        let by_runtime = runtime
            .and_then(|r| r.iter().find(|x| x.name == c.name))
            .and_then(|x| x.exited_with)
            .is_some_and(|code| restarts_all_containers(c, code));
        by_runtime || api_terminated(&c.name).is_some_and(|code| restarts_all_containers(c, code))
    })
}

/// Upstream `AllContainersRestartCleanedUp`: the runtime has none of the pod's init or
/// regular containers any more (all were removed), so the pod may start again from its first
/// init container.
pub fn all_containers_restart_cleaned_up(spec: &PodSpec, runtime: &[InRuntime<'_>]) -> bool {
    !spec
        .init_containers
        .iter()
        .flatten()
        .chain(&spec.containers)
        .any(|c| runtime.iter().any(|x| x.name == c.name))
}

/// One container a restart of all containers removes (upstream `containerToRemoveInfo`), as
/// [`containers_to_remove`] orders them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ToRemove<'a> {
    /// The container's name in the spec.
    pub name: &'a str,
    /// Its exit code, when it has exited; `None` while it is created or runs.
    pub exited_with: Option<i32>,
    /// It still runs: it is killed, and waited for, before it is removed.
    pub kill: bool,
}

/// Upstream `computePodActions` for a pod restarting all its containers: the order in which
/// its `SyncPod` kills and removes them, one after another (docs/prober.md §3.11). First the
/// containers that did not set the restart off — the regular containers, then the init
/// containers (sidecars among them), each in spec order, and each name's instances in the order
/// `runtime` lists them (newest first) — then those that did: instances that exited with a code
/// their container's rules answer with `RestartAllContainers`. Only a running instance is
/// killed; one that has exited is only removed.
pub fn containers_to_remove<'a>(spec: &PodSpec, runtime: &[InRuntime<'a>]) -> Vec<ToRemove<'a>> {
    let (mut targets, mut sources) = (Vec::new(), Vec::new());
    for container in spec.containers.iter().chain(spec.init_containers.iter().flatten()) {
        for instance in runtime.iter().filter(|x| x.name == container.name) {
            let remove = ToRemove {
                name: instance.name,
                exited_with: instance.exited_with,
                kill: instance.exited_with.is_none(),
            };
            match instance.exited_with {
                Some(code) if restarts_all_containers(container, code) => sources.push(remove),
                _ => targets.push(remove),
            }
        }
    }
    targets.extend(sources);
    targets
}

/// The first rule whose exit codes match (`In` the values, or `NotIn` them); a rule with no
/// exit codes or an operator the API does not know matches nothing.
fn matching_rule(rules: &[ContainerRestartRule], exit_code: i32) -> Option<&ContainerRestartRule> {
    rules.iter().find(|rule| {
        let Some(codes) = &rule.exit_codes else { return false };
        let listed = codes.values.iter().flatten().any(|v| *v == exit_code);
        match codes.operator.as_str() {
            "In" => listed,
            "NotIn" => !listed,
            _ => false,
        }
    })
}

/// Containers with restart policies of their own, for the tests of every module that asks here.
#[cfg(test)]
pub(crate) mod test_containers {
    use k8s_openapi::api::core::v1::{Container, ContainerRestartRule, ContainerRestartRuleOnExitCodes};

    /// Container `name` with its own `policy` (if any) and, when `restart_on` is not empty, one
    /// rule restarting it on those exit codes.
    pub(crate) fn with_own_policy(name: &str, policy: Option<&str>, restart_on: &[i32]) -> Container {
        Container {
            name: name.into(),
            restart_policy: policy.map(Into::into),
            restart_policy_rules: (!restart_on.is_empty()).then(|| {
                vec![ContainerRestartRule {
                    action: super::ACTION_RESTART.into(),
                    exit_codes: Some(ContainerRestartRuleOnExitCodes {
                        operator: "In".into(),
                        values: Some(restart_on.to_vec()),
                    }),
                }]
            }),
            ..Default::default()
        }
    }
}

#[cfg(test)]
mod tests {
    use k8s_openapi::api::core::v1::ContainerRestartRuleOnExitCodes;

    use super::*;

    fn pod(policy: Option<&str>) -> PodSpec {
        PodSpec { restart_policy: policy.map(Into::into), ..Default::default() }
    }

    fn rule(operator: &str, values: &[i32]) -> ContainerRestartRule {
        ContainerRestartRule {
            action: ACTION_RESTART.into(),
            exit_codes: Some(ContainerRestartRuleOnExitCodes {
                operator: operator.into(),
                values: Some(values.to_vec()),
            }),
        }
    }

    fn container(policy: Option<&str>, rules: Vec<ContainerRestartRule>) -> Container {
        Container {
            name: "c".into(),
            restart_policy: policy.map(Into::into),
            restart_policy_rules: (!rules.is_empty()).then_some(rules),
            ..Default::default()
        }
    }

    /// The rules first, then the container's policy, then the pod's.
    #[test]
    fn container_should_restart_follows_rules_then_container_then_pod() {
        let cases: Vec<(&str, Container, PodSpec, i32, bool)> = vec![
            ("pod Always", container(None, vec![]), pod(Some(ALWAYS)), 0, true),
            ("pod unset is Always", container(None, vec![]), pod(None), 0, true),
            ("pod OnFailure, exit 0", container(None, vec![]), pod(Some(ON_FAILURE)), 0, false),
            ("pod OnFailure, exit 1", container(None, vec![]), pod(Some(ON_FAILURE)), 1, true),
            ("pod Never", container(None, vec![]), pod(Some(NEVER)), 1, false),
            ("container Always beats pod Never", container(Some(ALWAYS), vec![]), pod(Some(NEVER)), 0, true),
            ("container Never beats pod Always", container(Some(NEVER), vec![]), pod(Some(ALWAYS)), 1, false),
            ("container OnFailure, exit 0", container(Some(ON_FAILURE), vec![]), pod(Some(ALWAYS)), 0, false),
            ("container OnFailure, exit 2", container(Some(ON_FAILURE), vec![]), pod(Some(NEVER)), 2, true),
            ("rule In matches", container(Some(NEVER), vec![rule("In", &[42])]), pod(Some(NEVER)), 42, true),
            ("rule In misses", container(Some(NEVER), vec![rule("In", &[42])]), pod(Some(ALWAYS)), 1, false),
            (
                "rule NotIn matches",
                container(Some(NEVER), vec![rule("NotIn", &[0])]),
                pod(Some(NEVER)),
                3,
                true,
            ),
            (
                "rule NotIn misses",
                container(Some(NEVER), vec![rule("NotIn", &[0])]),
                pod(Some(NEVER)),
                0,
                false,
            ),
            (
                "second rule matches",
                container(Some(NEVER), vec![rule("In", &[1]), rule("In", &[7])]),
                pod(Some(NEVER)),
                7,
                true,
            ),
            (
                "unknown operator matches nothing",
                container(Some(NEVER), vec![rule("Is", &[1])]),
                pod(None),
                1,
                false,
            ),
            (
                "rules without a container policy are not read",
                container(None, vec![rule("In", &[5])]),
                pod(Some(NEVER)),
                5,
                false,
            ),
            (
                "unknown container policy falls to the pod's",
                container(Some("Sometimes"), vec![]),
                pod(Some(NEVER)),
                1,
                false,
            ),
        ];
        for (name, c, spec, code, want) in cases {
            assert_eq!(container_should_restart(&c, &spec, code), want, "{name}");
        }
    }

    #[test]
    fn a_rule_with_another_action_falls_back_to_the_policy() {
        let mut other = rule("In", &[1]);
        other.action = "Stop".into();
        let c = container(Some(ALWAYS), vec![other]);
        assert!(container_should_restart(&c, &pod(Some(NEVER)), 1));
        let c = container(Some(NEVER), vec![c.restart_policy_rules.unwrap()[0].clone()]);
        assert!(!container_should_restart(&c, &pod(Some(ALWAYS)), 1));
    }

    #[test]
    fn a_probe_kill_restarts_by_the_containers_own_policy_under_the_gate() {
        let (never, always) = (pod(Some(NEVER)), pod(None));
        assert!(restarts_after_probe_kill(&container(Some(ON_FAILURE), vec![]), &never, true));
        assert!(!restarts_after_probe_kill(&container(Some(NEVER), vec![rule("In", &[137])]), &always, true));
        assert!(restarts_after_probe_kill(&container(Some(NEVER), vec![]), &always, false));
        assert!(!restarts_after_probe_kill(&container(Some(ALWAYS), vec![]), &never, false));
        assert!(!restarts_after_probe_kill(&container(None, vec![]), &never, true));
    }

    fn rule_all(operator: &str, values: &[i32]) -> ContainerRestartRule {
        ContainerRestartRule { action: ACTION_RESTART_ALL_CONTAINERS.into(), ..rule(operator, values) }
    }

    /// A pod whose `trigger` restarts everything on exit 42, beside a plain `app` and an init
    /// container.
    fn restart_all_pod() -> PodSpec {
        PodSpec {
            restart_policy: Some(NEVER.into()),
            init_containers: Some(vec![Container { name: "init".into(), ..Default::default() }]),
            containers: vec![
                Container { name: "app".into(), ..container(None, vec![]) },
                Container {
                    name: "trigger".into(),
                    ..container(Some(NEVER), vec![rule("In", &[1]), rule_all("In", &[42])])
                },
            ],
            ..Default::default()
        }
    }

    #[test]
    fn the_first_matching_rule_decides_whether_all_containers_restart() {
        let c = container(Some(NEVER), vec![rule("In", &[1]), rule_all("NotIn", &[0, 1])]);
        assert!(restarts_all_containers(&c, 42));
        assert!(!restarts_all_containers(&c, 1), "the first matching rule restarts only the container");
        assert!(!restarts_all_containers(&c, 0), "no rule matches");
        // A RestartAllContainers rule does not restart the container on its own account.
        assert!(!container_should_restart(&c, &pod(Some(NEVER)), 42));
    }

    #[test]
    fn only_a_pod_with_a_restart_all_rule_could_restart_all_containers() {
        assert!(all_containers_could_restart(&restart_all_pod()));
        let mut spec = restart_all_pod();
        spec.containers[1].restart_policy_rules = Some(vec![rule("In", &[42])]);
        assert!(!all_containers_could_restart(&spec));
        // An init container's rule counts too (a sidecar's under the gate).
        spec.init_containers = Some(vec![container(Some(NEVER), vec![rule_all("In", &[3])])]);
        assert!(all_containers_could_restart(&spec));
    }

    #[test]
    fn all_containers_restart_by_the_runtime_by_the_status_or_by_the_condition() {
        let spec = restart_all_pod();
        let none = |_: &str| None;
        let exited = |code| {
            [
                InRuntime { name: "app", exited_with: None },
                InRuntime { name: "trigger", exited_with: Some(code) },
            ]
        };
        assert!(should_all_containers_restart(&spec, Some(&exited(42)), false, none));
        assert!(!should_all_containers_restart(&spec, Some(&exited(1)), false, none));
        assert!(!should_all_containers_restart(&spec, Some(&[]), false, none));
        assert!(should_all_containers_restart(&spec, None, true, none), "the condition alone says so");
        let terminated = |code| move |name: &str| (name == "trigger").then_some(code);
        assert!(should_all_containers_restart(&spec, None, false, terminated(42)));
        assert!(!should_all_containers_restart(&spec, None, false, terminated(7)));
        // A container the spec does not have decides nothing.
        let stranger = [InRuntime { name: "other", exited_with: Some(42) }];
        assert!(!should_all_containers_restart(&spec, Some(&stranger), false, none));
    }

    /// Upstream `TestComputePodActionsForRestartAllContainers` (`kuberuntime_manager_test.go`,
    /// KEP-5532), its cases that remove containers, with upstream's fixtures: `foo1`–`foo3`
    /// regular, `init1`–`init3` plain init containers that have completed, `restartable-init-1`–
    /// `3` running sidecars, a `RestartAllContainers` rule on exit code 1. Each expected entry is
    /// (name, exit code if exited, killed). The cases "pod not marked" and "all containers
    /// removed, start …" are about when the restart runs and what starts after it: the runtime's
    /// tests (`tests/runtime.rs`) cover them.
    #[test]
    fn compute_pod_actions_for_restart_all_containers() {
        let plain = |name: &str| Container { name: name.into(), ..Default::default() };
        let sidecar = |name: &str| Container { name: name.into(), ..container(Some(ALWAYS), vec![]) };
        let source = |name: &str, policy: &str| Container {
            name: name.into(),
            ..container(Some(policy), vec![rule_all("In", &[1])])
        };
        let regular = || vec![plain("foo1"), plain("foo2"), plain("foo3")];
        let sidecars = || {
            Some(vec![
                sidecar("restartable-init-1"),
                sidecar("restartable-init-2"),
                sidecar("restartable-init-3"),
            ])
        };
        let run = |name| InRuntime { name, exited_with: None };
        let exit = |name, code| InRuntime { name, exited_with: Some(code) };
        type Case = (&'static str, PodSpec, Vec<InRuntime<'static>>, Vec<(&'static str, Option<i32>, bool)>);
        let cases: Vec<Case> = vec![
            (
                "pod marked for RestartAllContainers",
                PodSpec { containers: regular(), ..Default::default() },
                vec![run("foo1"), run("foo2"), run("foo3")],
                vec![("foo1", None, true), ("foo2", None, true), ("foo3", None, true)],
            ),
            (
                "pod marked for RestartAllContainers with init containers",
                PodSpec {
                    containers: regular(),
                    init_containers: Some(vec![plain("init1"), plain("init2"), plain("init3")]),
                    ..Default::default()
                },
                vec![exit("init1", 0), exit("init2", 0), exit("init3", 0)],
                vec![("init1", Some(0), false), ("init2", Some(0), false), ("init3", Some(0), false)],
            ),
            (
                "pod marked for RestartAllContainers with restartable init containers",
                PodSpec { containers: regular(), init_containers: sidecars(), ..Default::default() },
                vec![run("restartable-init-1"), run("restartable-init-2"), run("restartable-init-3")],
                vec![
                    ("restartable-init-1", None, true),
                    ("restartable-init-2", None, true),
                    ("restartable-init-3", None, true),
                ],
            ),
            (
                "init container exit triggers RestartAllContainers",
                PodSpec {
                    containers: regular(),
                    init_containers: Some(vec![plain("init1"), sidecar("init2"), source("init3", NEVER)]),
                    ..Default::default()
                },
                vec![exit("init1", 0), run("init2"), exit("init3", 1)],
                vec![("init1", Some(0), false), ("init2", None, true), ("init3", Some(1), false)],
            ),
            (
                "sidecar container exit triggers RestartAllContainres",
                PodSpec {
                    containers: regular(),
                    init_containers: Some(vec![
                        sidecar("restartable-init-1"),
                        sidecar("restartable-init-2"),
                        source("restartable-init-3", ALWAYS),
                    ]),
                    ..Default::default()
                },
                vec![
                    run("restartable-init-1"),
                    run("restartable-init-2"),
                    exit("restartable-init-3", 1),
                    run("foo1"),
                ],
                vec![
                    ("foo1", None, true),
                    ("restartable-init-1", None, true),
                    ("restartable-init-2", None, true),
                    ("restartable-init-3", Some(1), false),
                ],
            ),
            (
                "regular container exit triggers RestartAllContainers",
                PodSpec {
                    containers: vec![plain("foo1"), plain("foo2"), source("foo3", NEVER)],
                    init_containers: sidecars(),
                    ..Default::default()
                },
                vec![
                    run("restartable-init-1"),
                    run("restartable-init-2"),
                    run("restartable-init-3"),
                    run("foo1"),
                    run("foo2"),
                    exit("foo3", 1),
                ],
                vec![
                    ("foo1", None, true),
                    ("foo2", None, true),
                    ("restartable-init-1", None, true),
                    ("restartable-init-2", None, true),
                    ("restartable-init-3", None, true),
                    ("foo3", Some(1), false),
                ],
            ),
            (
                // Each name's instances newest first, as upstream sorts them by creation time.
                "removes past terminated statuses",
                PodSpec {
                    restart_policy: Some(ALWAYS.into()),
                    containers: vec![plain("foo1"), plain("foo2"), source("foo3", ALWAYS)],
                    ..Default::default()
                },
                vec![
                    run("foo1"),
                    run("foo2"),
                    exit("foo3", 1),
                    exit("foo1", 99),
                    exit("foo2", 99),
                    exit("foo3", 99),
                ],
                vec![
                    ("foo1", None, true),
                    ("foo1", Some(99), false),
                    ("foo2", None, true),
                    ("foo2", Some(99), false),
                    ("foo3", Some(99), false),
                    ("foo3", Some(1), false),
                ],
            ),
        ];
        for (desc, spec, runtime, expected) in cases {
            let got: Vec<_> = containers_to_remove(&spec, &runtime)
                .into_iter()
                .map(|r| (r.name, r.exited_with, r.kill))
                .collect();
            assert_eq!(got, expected, "{desc}");
        }
    }

    #[test]
    fn the_restart_is_cleaned_up_once_the_runtime_has_none_of_the_pods_containers() {
        let spec = restart_all_pod();
        assert!(all_containers_restart_cleaned_up(&spec, &[]));
        assert!(all_containers_restart_cleaned_up(&spec, &[InRuntime { name: "other", exited_with: None }]));
        assert!(!all_containers_restart_cleaned_up(
            &spec,
            &[InRuntime { name: "init", exited_with: Some(0) }]
        ));
    }
}
