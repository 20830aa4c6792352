//! What the standalone agent prints: one readable line per status transition of a pod — its
//! phase, its Ready condition (with reason and message), and each container's state,
//! `started`, `ready` and restarts.

use k8s_openapi::api::core::v1::{ContainerStatus, PodStatus};
use probelet_actors::status::POD_READY;

/// The parts of a pod status worth printing.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Summary {
    pub phase: String,
    /// `True`, or `False (Reason: message)`.
    pub ready: String,
    pub containers: Vec<ContainerSummary>,
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
        let ready = status
            .conditions
            .iter()
            .flatten()
            .find(|c| c.type_ == POD_READY)
            .map(|c| {
                if c.status == "True" {
                    "True".to_owned()
                } else {
                    let reason = c.reason.as_deref().unwrap_or_default();
                    match c.message.as_deref().filter(|m| !m.is_empty()) {
                        Some(message) => format!("{} ({reason}: {message})", c.status),
                        None if !reason.is_empty() => format!("{} ({reason})", c.status),
                        None => c.status.clone(),
                    }
                }
            })
            .unwrap_or_else(|| "Unknown".to_owned());
        let containers = status
            .init_container_statuses
            .iter()
            .flatten()
            .chain(status.container_statuses.iter().flatten())
            .map(ContainerSummary::of)
            .collect();
        Summary { phase: status.phase.clone().unwrap_or_default(), ready, containers }
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
    lines
}

#[cfg(test)]
mod tests {
    use super::*;

    fn summary(ready: &str, state: &str, started: bool, ready_c: bool, restarts: i32) -> Summary {
        Summary {
            phase: "Running".into(),
            ready: ready.into(),
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
}
