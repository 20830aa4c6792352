//! Whether a container that exited, or that a probe killed, is started again: the pod's
//! `restartPolicy`, and under the `ContainerRestartRules` gate (KEP-5307, beta and on by default
//! in v1.35) the container's own `restartPolicy` and `restartPolicyRules` (upstream
//! `podutil.ContainerShouldRestart`, and the restart decision of `computePodActions`). The probe
//! worker's stop rule, the status manager's transition check, the standalone runtime and its
//! kill messages all ask here (where each one does: docs/prober.md §3.10).

use k8s_openapi::api::core::v1::{Container, ContainerRestartRule, PodSpec};

/// The API's `restartPolicy` values (pod level, and container level under the gate).
pub const ALWAYS: &str = "Always";
/// Restart only after a non-zero exit.
pub const ON_FAILURE: &str = "OnFailure";
/// Never restart.
pub const NEVER: &str = "Never";
/// The one action a restart rule has in v1.35.
pub const ACTION_RESTART: &str = "Restart";

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
}
