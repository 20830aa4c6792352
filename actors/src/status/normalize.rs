//! Status normalisation before a status is stored or compared (docs/status-manager.md §5.11).
//! Upstream: `normalizeStatus` in `pkg/kubelet/status/status_manager.go`.
//!
//! The API server keeps timestamps to the second and the kubelet caps termination messages, so
//! a status fresh from the runtime and the same status read back from the API only compare
//! equal after both went through this.

use k8s_openapi::api::core::v1::{Container, ContainerState, ContainerStatus, Pod, PodStatus};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use k8s_openapi::jiff::Timestamp;

/// Upstream `kubecontainer.MaxPodTerminationMessageLogLength`: the termination-message budget of
/// a whole pod, split evenly between its containers.
pub const MAX_POD_TERMINATION_MESSAGE_LOG_LENGTH: usize = 12288;

/// Upstream `normalizeStatus`: caps termination messages at the per-container budget, truncates
/// timestamps to whole seconds and puts container statuses in a canonical order (regular and
/// ephemeral by name, init in spec order).
pub fn normalize_status(pod: &Pod, status: &mut PodStatus) {
    let spec = pod.spec.as_ref();
    let init_specs = spec.and_then(|s| s.init_containers.as_deref()).unwrap_or_default();
    let containers = spec.map_or(0, |s| {
        s.containers.len() + init_specs.len() + s.ephemeral_containers.as_ref().map_or(0, Vec::len)
    });
    let budget = MAX_POD_TERMINATION_MESSAGE_LOG_LENGTH
        .checked_div(containers)
        .unwrap_or(MAX_POD_TERMINATION_MESSAGE_LOG_LENGTH);

    truncate_to_second(&mut status.start_time);
    for condition in status.conditions.iter_mut().flatten() {
        truncate_to_second(&mut condition.last_probe_time);
        truncate_to_second(&mut condition.last_transition_time);
    }

    for list in [
        &mut status.container_statuses,
        &mut status.init_container_statuses,
        &mut status.ephemeral_container_statuses,
    ] {
        for container_status in list.iter_mut().flatten() {
            normalize_container_state(container_status.state.as_mut(), budget);
            normalize_container_state(container_status.last_state.as_mut(), budget);
        }
    }

    if let Some(statuses) = status.container_statuses.as_mut() {
        sort_by_name(statuses);
    }
    if let Some(statuses) = status.init_container_statuses.as_mut() {
        sort_init_container_statuses(init_specs, statuses);
    }
    if let Some(statuses) = status.ephemeral_container_statuses.as_mut() {
        sort_by_name(statuses);
    }
}

fn normalize_container_state(state: Option<&mut ContainerState>, budget: usize) {
    let Some(state) = state else { return };
    if let Some(running) = state.running.as_mut() {
        truncate_to_second(&mut running.started_at);
    }
    if let Some(terminated) = state.terminated.as_mut() {
        truncate_to_second(&mut terminated.started_at);
        truncate_to_second(&mut terminated.finished_at);
        if let Some(message) = terminated.message.as_mut() {
            truncate_message(message, budget);
        }
    }
}

/// Upstream cuts the message at exactly `budget` bytes, which can split a multi-byte UTF-8
/// character (Go strings tolerate that; the API then carries a replacement character). A Rust
/// `String` cannot hold half a character, so we cut at the last character boundary at or before
/// the budget: the result is up to 3 bytes shorter than upstream's for such messages.
fn truncate_message(message: &mut String, budget: usize) {
    if message.len() > budget {
        let end = message.floor_char_boundary(budget);
        message.truncate(end);
    }
}

/// Upstream `metav1.Time.Rfc3339Copy`: formatting drops the fraction, i.e. rounds towards the
/// past (also before 1970, where truncating towards zero would round up).
fn truncate_to_second(t: &mut Option<Time>) {
    let Some(t) = t else { return };
    let ts = t.0;
    let second = if ts.subsec_nanosecond() < 0 { ts.as_second() - 1 } else { ts.as_second() };
    // Only the earliest representable second can fail; keep such a time as it is.
    if let Ok(truncated) = Timestamp::new(second, 0) {
        t.0 = truncated;
    }
}

/// Upstream `sort.Sort(kubetypes.SortedContainerStatuses(...))`: by name, byte-wise.
fn sort_by_name(statuses: &mut [ContainerStatus]) {
    statuses.sort_by(|a, b| a.name.cmp(&b.name));
}

/// Upstream `kubetypes.SortInitContainerStatuses`: statuses in the order of the spec's init
/// containers. Statuses whose name is not in the spec go last in their original order; upstream
/// gets there by swapping, which can permute those leftovers (they are a programmer error anyway).
fn sort_init_container_statuses(init_specs: &[Container], statuses: &mut [ContainerStatus]) {
    let mut order = std::collections::HashMap::with_capacity(init_specs.len());
    for (i, c) in init_specs.iter().enumerate() {
        order.entry(c.name.as_str()).or_insert(i);
    }
    statuses.sort_by_key(|s| order.get(s.name.as_str()).copied().unwrap_or(usize::MAX));
}

#[cfg(test)]
#[allow(clippy::unwrap_used)] // a panic is the failure report
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::{
        ContainerStateRunning, ContainerStateTerminated, EphemeralContainer, PodCondition, PodSpec,
    };

    fn container(name: &str) -> Container {
        Container { name: name.into(), ..Default::default() }
    }

    fn pod(regular: &[&str], init: &[&str], ephemeral: &[&str]) -> Pod {
        Pod {
            spec: Some(PodSpec {
                containers: regular.iter().map(|n| container(n)).collect(),
                init_containers: Some(init.iter().map(|n| container(n)).collect()),
                ephemeral_containers: Some(
                    ephemeral
                        .iter()
                        .map(|n| EphemeralContainer { name: (*n).into(), ..Default::default() })
                        .collect(),
                ),
                ..Default::default()
            }),
            ..Default::default()
        }
    }

    fn status_named(name: &str) -> ContainerStatus {
        ContainerStatus { name: name.into(), ..Default::default() }
    }

    fn terminated_with(message: &str) -> Option<ContainerState> {
        Some(ContainerState {
            terminated: Some(ContainerStateTerminated {
                message: Some(message.into()),
                ..Default::default()
            }),
            ..Default::default()
        })
    }

    fn messages(statuses: &Option<Vec<ContainerStatus>>) -> Vec<(usize, usize)> {
        let len = |s: &Option<ContainerState>| {
            s.as_ref()
                .and_then(|s| s.terminated.as_ref())
                .and_then(|t| t.message.as_ref())
                .map_or(0, String::len)
        };
        statuses.iter().flatten().map(|c| (len(&c.state), len(&c.last_state))).collect()
    }

    #[test]
    fn termination_message_budget() {
        let long = "x".repeat(20_000);
        let cases = [
            ("one container", pod(&["a"], &[], &[]), 12288),
            ("two containers", pod(&["a", "b"], &[], &[]), 6144),
            ("three containers across kinds", pod(&["a"], &["i"], &["e"]), 4096),
            ("no containers in spec", pod(&[], &[], &[]), 12288),
            ("no spec at all", Pod::default(), 12288),
        ];
        for (name, pod, budget) in cases {
            let with_messages = |n: &str| ContainerStatus {
                state: terminated_with(&long),
                last_state: terminated_with(&long),
                ..status_named(n)
            };
            let mut status = PodStatus {
                container_statuses: Some(vec![with_messages("a")]),
                init_container_statuses: Some(vec![with_messages("i")]),
                ephemeral_container_statuses: Some(vec![with_messages("e")]),
                ..Default::default()
            };
            normalize_status(&pod, &mut status);
            for (list, statuses) in [
                ("regular", &status.container_statuses),
                ("init", &status.init_container_statuses),
                ("ephemeral", &status.ephemeral_container_statuses),
            ] {
                assert_eq!(messages(statuses), vec![(budget, budget)], "case: {name} ({list})");
            }
        }
    }

    #[test]
    fn short_messages_untouched() {
        let mut status = PodStatus {
            container_statuses: Some(vec![ContainerStatus {
                state: terminated_with("exit 1"),
                ..status_named("a")
            }]),
            ..Default::default()
        };
        normalize_status(&pod(&["a", "b", "c"], &[], &[]), &mut status);
        assert_eq!(messages(&status.container_statuses), vec![(6, 0)], "case: short message kept");
    }

    #[test]
    fn multibyte_message_truncated_on_char_boundary() {
        // Three containers: 4096 bytes each.
        let cases = [
            ("boundary falls inside a 2-byte char", format!("a{}", "é".repeat(3000)), 4095),
            ("boundary falls inside a 3-byte char", "€".repeat(2000), 4095),
            ("boundary falls inside a 4-byte char", format!("ab{}", "😀".repeat(2000)), 4094),
            ("ascii cut exactly", "z".repeat(5000), 4096),
        ];
        for (name, message, want_len) in cases {
            let mut status = PodStatus {
                container_statuses: Some(vec![ContainerStatus {
                    state: terminated_with(&message),
                    ..status_named("a")
                }]),
                ..Default::default()
            };
            normalize_status(&pod(&["a", "b", "c"], &[], &[]), &mut status);
            let got = status.container_statuses.as_ref().unwrap()[0]
                .state
                .as_ref()
                .unwrap()
                .terminated
                .as_ref()
                .unwrap()
                .message
                .clone()
                .unwrap();
            assert_eq!(got.len(), want_len, "case: {name}");
            assert!(message.starts_with(&got), "case: {name} (prefix)");
        }
    }

    fn t(second: i64, nanos: i32) -> Option<Time> {
        Some(Time(Timestamp::new(second, nanos).unwrap()))
    }

    #[test]
    fn timestamps_truncated_to_seconds() {
        let fine = || t(1_700_000_000, 987_654_321);
        let whole = t(1_700_000_000, 0);
        let state = || {
            Some(ContainerState {
                running: Some(ContainerStateRunning { started_at: fine() }),
                terminated: Some(ContainerStateTerminated {
                    started_at: fine(),
                    finished_at: fine(),
                    ..Default::default()
                }),
                ..Default::default()
            })
        };
        let cs = |n: &str| ContainerStatus { state: state(), last_state: state(), ..status_named(n) };
        let mut status = PodStatus {
            start_time: fine(),
            conditions: Some(vec![PodCondition {
                type_: "Ready".into(),
                status: "True".into(),
                last_probe_time: fine(),
                last_transition_time: fine(),
                ..Default::default()
            }]),
            container_statuses: Some(vec![cs("a")]),
            init_container_statuses: Some(vec![cs("i")]),
            ephemeral_container_statuses: Some(vec![cs("e")]),
            ..Default::default()
        };
        normalize_status(&pod(&["a"], &["i"], &["e"]), &mut status);

        assert_eq!(status.start_time, whole, "case: startTime");
        let c = &status.conditions.as_ref().unwrap()[0];
        assert_eq!(c.last_probe_time, whole, "case: condition lastProbeTime");
        assert_eq!(c.last_transition_time, whole, "case: condition lastTransitionTime");
        for (list, statuses) in [
            ("regular", &status.container_statuses),
            ("init", &status.init_container_statuses),
            ("ephemeral", &status.ephemeral_container_statuses),
        ] {
            let s = &statuses.as_ref().unwrap()[0];
            for (which, state) in [("state", &s.state), ("lastState", &s.last_state)] {
                let state = state.as_ref().unwrap();
                let term = state.terminated.as_ref().unwrap();
                let case = format!("{list} {which}");
                assert_eq!(
                    state.running.as_ref().unwrap().started_at,
                    whole,
                    "case: {case} running.startedAt"
                );
                assert_eq!(term.started_at, whole, "case: {case} terminated.startedAt");
                assert_eq!(term.finished_at, whole, "case: {case} terminated.finishedAt");
            }
        }
    }

    #[test]
    fn truncation_rounds_towards_the_past() {
        let cases = [
            ("whole second unchanged", t(5, 0), t(5, 0)),
            ("fraction dropped", t(5, 999_999_999), t(5, 0)),
            ("before the epoch rounds down", t(-5, -500_000_000), t(-6, 0)),
            ("unset stays unset", None, None),
        ];
        for (name, start, want) in cases {
            let mut status = PodStatus { start_time: start, ..Default::default() };
            normalize_status(&Pod::default(), &mut status);
            assert_eq!(status.start_time, want, "case: {name}");
        }
    }

    fn names(statuses: &Option<Vec<ContainerStatus>>) -> Vec<&str> {
        statuses.iter().flatten().map(|s| s.name.as_str()).collect()
    }

    #[test]
    fn sort_orders() {
        struct Case {
            name: &'static str,
            init_spec: &'static [&'static str],
            regular: &'static [&'static str],
            init: &'static [&'static str],
            ephemeral: &'static [&'static str],
            want_regular: &'static [&'static str],
            want_init: &'static [&'static str],
            want_ephemeral: &'static [&'static str],
        }
        let cases = [
            Case {
                name: "regular and ephemeral by name, init by spec",
                init_spec: &["zeta", "alpha", "mid"],
                regular: &["web", "app", "sidecar"],
                init: &["mid", "alpha", "zeta"],
                ephemeral: &["dbg2", "dbg1"],
                want_regular: &["app", "sidecar", "web"],
                want_init: &["zeta", "alpha", "mid"],
                want_ephemeral: &["dbg1", "dbg2"],
            },
            Case {
                name: "init statuses not in spec go last, stable",
                init_spec: &["b", "a"],
                regular: &[],
                init: &["y", "a", "x", "b"],
                ephemeral: &[],
                want_regular: &[],
                want_init: &["b", "a", "y", "x"],
                want_ephemeral: &[],
            },
            Case {
                name: "byte-wise name order",
                init_spec: &[],
                regular: &["b", "B", "a", "a-1"],
                init: &[],
                ephemeral: &[],
                want_regular: &["B", "a", "a-1", "b"],
                want_init: &[],
                want_ephemeral: &[],
            },
        ];
        for case in cases {
            let list = |names: &[&str]| Some(names.iter().map(|n| status_named(n)).collect::<Vec<_>>());
            let mut status = PodStatus {
                container_statuses: list(case.regular),
                init_container_statuses: list(case.init),
                ephemeral_container_statuses: list(case.ephemeral),
                ..Default::default()
            };
            normalize_status(&pod(&[], case.init_spec, &[]), &mut status);
            assert_eq!(names(&status.container_statuses), case.want_regular, "case: {} (regular)", case.name);
            assert_eq!(names(&status.init_container_statuses), case.want_init, "case: {} (init)", case.name);
            assert_eq!(
                names(&status.ephemeral_container_statuses),
                case.want_ephemeral,
                "case: {} (ephemeral)",
                case.name
            );
        }
    }
}
