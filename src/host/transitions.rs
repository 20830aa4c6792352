//! What the standalone agent prints: one readable line per status transition of a pod — its
//! phase, its Ready condition (with reason and message), its `AllContainersRestarting`
//! condition when it has one, and each container's state, `started`, `ready` and restarts.

use k8s_openapi::api::core::v1::{ContainerStatus, PodCondition, PodStatus};
use probelet_actors::status::POD_READY;
use probelet_actors::status::equality::ALL_CONTAINERS_RESTARTING;

/// The parts of a pod status worth printing.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Summary {
    pub phase: String,
    /// `True`, or `False (Reason: message)`.
    pub ready: String,
    /// The `AllContainersRestarting` condition as `ready` is written (with its reason and
    /// message when True too), if the status has one.
    pub all_containers_restarting: Option<String>,
    pub containers: Vec<ContainerSummary>,
}

/// A condition as a line says it: its status, then `(Reason: message)` or `(Reason)` when it
/// has them; a True one only `True` unless `details_when_true`.
fn condition_text(c: &PodCondition, details_when_true: bool) -> String {
    if c.status == "True" && !details_when_true {
        return "True".to_owned();
    }
    let reason = c.reason.as_deref().unwrap_or_default();
    match c.message.as_deref().filter(|m| !m.is_empty()) {
        Some(message) => format!("{} ({reason}: {message})", c.status),
        None if !reason.is_empty() => format!("{} ({reason})", c.status),
        None => c.status.clone(),
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ContainerSummary {
    pub name: String,
    /// `running`, `waiting (Reason)` or `terminated (Reason, exit code N)`.
    pub state: String,
    pub started: bool,
    pub ready: bool,
    pub restart_count: i32,
}

impl Summary {
    pub fn of(status: &PodStatus) -> Summary {
        let condition = |type_: &str| status.conditions.iter().flatten().find(|c| c.type_ == type_);
        let ready =
            condition(POD_READY).map(|c| condition_text(c, false)).unwrap_or_else(|| "Unknown".to_owned());
        let all_containers_restarting = condition(ALL_CONTAINERS_RESTARTING).map(|c| condition_text(c, true));
        let containers = status
            .init_container_statuses
            .iter()
            .flatten()
            .chain(status.container_statuses.iter().flatten())
            .map(ContainerSummary::of)
            .collect();
        Summary {
            phase: status.phase.clone().unwrap_or_default(),
            ready,
            all_containers_restarting,
            containers,
        }
    }
}

impl ContainerSummary {
    fn of(status: &ContainerStatus) -> ContainerSummary {
        let state = status.state.clone().unwrap_or_default();
        let state = if state.running.is_some() {
            "running".to_owned()
        } else if let Some(t) = state.terminated {
            format!("terminated ({}, exit code {})", t.reason.unwrap_or_default(), t.exit_code)
        } else if let Some(w) = state.waiting {
            format!("waiting ({})", w.reason.unwrap_or_default())
        } else {
            "unknown".to_owned()
        };
        ContainerSummary {
            name: status.name.clone(),
            state,
            started: status.started == Some(true),
            ready: status.ready,
            restart_count: status.restart_count,
        }
    }
}

/// The lines that describe going from `old` (nothing printed yet: `None`) to `new`.
pub fn describe_changes(old: Option<&Summary>, new: &Summary) -> Vec<String> {
    let mut lines = Vec::new();
    if old.is_none_or(|o| o.phase != new.phase) {
        lines.push(format!("phase {}", new.phase));
    }
    for c in &new.containers {
        let before = old.and_then(|o| o.containers.iter().find(|p| p.name == c.name));
        if before.is_none_or(|b| b.restart_count != c.restart_count) && c.restart_count > 0 {
            lines.push(format!("container {} restarted (restart count {})", c.name, c.restart_count));
        }
        if before.is_none_or(|b| b.state != c.state) {
            lines.push(format!("container {} {}", c.name, c.state));
        }
        if before.map_or(c.started, |b| b.started != c.started) {
            lines.push(format!("container {} {}", c.name, if c.started { "started" } else { "not started" }));
        }
        if before.map_or(c.ready, |b| b.ready != c.ready) {
            lines.push(format!("container {} {}", c.name, if c.ready { "ready" } else { "not ready" }));
        }
    }
    if old.is_none_or(|o| o.ready != new.ready) {
        lines.push(format!("Ready={}", new.ready));
    }
    if let Some(restarting) = &new.all_containers_restarting
        && old.is_none_or(|o| o.all_containers_restarting.as_ref() != Some(restarting))
    {
        lines.push(format!("{ALL_CONTAINERS_RESTARTING}={restarting}"));
    }
    lines
}

#[cfg(test)]
mod tests {
    use super::*;

    fn summary(ready: &str, state: &str, started: bool, ready_c: bool, restarts: i32) -> Summary {
        Summary {
            phase: "Running".into(),
            ready: ready.into(),
            all_containers_restarting: None,
            containers: vec![ContainerSummary {
                name: "app".into(),
                state: state.into(),
                started,
                ready: ready_c,
                restart_count: restarts,
            }],
        }
    }

    #[test]
    fn first_summary_prints_what_is_set() {
        let lines =
            describe_changes(None, &summary("False (ContainersNotReady: x)", "running", false, false, 0));
        assert_eq!(lines, ["phase Running", "container app running", "Ready=False (ContainersNotReady: x)"]);
    }

    #[test]
    fn prints_only_changes() {
        let a = summary("False (ContainersNotReady: x)", "running", true, false, 0);
        let b = summary("True", "running", true, true, 0);
        assert_eq!(describe_changes(Some(&a), &b), ["container app ready", "Ready=True"]);
        assert!(describe_changes(Some(&b), &b).is_empty());
        let c = summary("True", "running", true, true, 1);
        assert_eq!(describe_changes(Some(&b), &c), ["container app restarted (restart count 1)"]);
    }

    /// The `AllContainersRestarting` condition is printed when it changes, with its reason and
    /// message when True; a pod without it prints nothing about it.
    #[test]
    fn prints_all_containers_restarting_when_it_changes() {
        let status = |condition: Option<(&str, Option<&str>, Option<&str>)>| PodStatus {
            phase: Some("Running".into()),
            conditions: condition.map(|(status, reason, message)| {
                vec![PodCondition {
                    type_: "AllContainersRestarting".into(),
                    status: status.into(),
                    reason: reason.map(Into::into),
                    message: message.map(Into::into),
                    ..Default::default()
                }]
            }),
            ..Default::default()
        };
        let off = Summary::of(&status(Some(("False", None, None))));
        let on = Summary::of(&status(Some((
            "True",
            Some("RestartAllContainersStarted"),
            Some("container exited with restart policy rule"),
        ))));
        assert_eq!(
            describe_changes(Some(&off), &on),
            [
                "AllContainersRestarting=True (RestartAllContainersStarted: container exited with restart policy rule)"
            ]
        );
        assert_eq!(describe_changes(Some(&on), &off), ["AllContainersRestarting=False"]);
        assert!(describe_changes(Some(&on), &on).is_empty());
        let without = Summary::of(&status(None));
        assert_eq!(describe_changes(None, &without), ["phase Running", "Ready=Unknown"]);
    }
}
