//! The status rewrite of `TerminatePod` (docs/status-manager.md §5.7 steps 1–4): every container
//! that may still look alive is marked terminated with an unknown outcome, and the pod phase is
//! made terminal. Upstream: `TerminatePod`, `hasPodInitialized` and `initializedContainers` in
//! `pkg/kubelet/status/status_manager.go`.
//!
//! The caller chooses the base (cached status, else `pod.status`), logs upstream's
//! "Terminal running pod should have already been marked as failed, programmer error" when a
//! cached status was still Running, and stores the result with force and `podIsFinished`.

use k8s_openapi::api::core::v1::{ContainerState, ContainerStateTerminated, ContainerStatus, Pod, PodStatus};

use super::generate::{PHASE_FAILED, PHASE_SUCCEEDED, is_restartable_init_container};
use super::transition::get_container_by_index;

/// Upstream `kubecontainer.ContainerReasonStatusUnknown`.
pub const CONTAINER_STATUS_UNKNOWN_REASON: &str = "ContainerStatusUnknown";
/// The message of the terminated state TerminatePod gives a container it cannot account for.
pub const CONTAINER_STATUS_UNKNOWN_MESSAGE: &str =
    "The container could not be located when the pod was terminated";
/// The exit code of that state (as if killed by SIGKILL).
pub const CONTAINER_STATUS_UNKNOWN_EXIT_CODE: i32 = 137;

/// TerminatePod's rewrite of `base`: once the pod has initialized (judged from `pod.status`, as
/// upstream does), every regular container not terminated gets the ContainerStatusUnknown state;
/// init containers get it up to the last one with evidence of a start; the phase becomes Failed
/// unless already Succeeded or Failed. Static pods keep their phase (upstream TODO #116484).
pub fn terminate_status(pod: &Pod, base: &PodStatus, is_static: bool) -> PodStatus {
    let mut status = base.clone();

    if has_pod_initialized(pod) {
        for container_status in status.container_statuses.iter_mut().flatten() {
            mark_unknown_unless_terminated(container_status);
        }
    }

    if let Some(init_statuses) = status.init_container_statuses.as_mut() {
        let started = initialized_containers_len(init_statuses);
        for container_status in &mut init_statuses[..started] {
            mark_unknown_unless_terminated(container_status);
        }
    }

    if !is_static {
        match status.phase.as_deref() {
            Some(PHASE_SUCCEEDED | PHASE_FAILED) => {}
            // Pending and Running are expected; anything else is a programmer error upstream
            // (logged there), and ends Failed all the same.
            _ => status.phase = Some(PHASE_FAILED.to_owned()),
        }
    }
    status
}

/// Upstream `hasPodInitialized`, computed from `pod.status`: whether the pod has evidence of
/// having started its regular containers, so that their missing statuses mean failure.
pub fn has_pod_initialized(pod: &Pod) -> bool {
    let init_specs = pod.spec.as_ref().and_then(|s| s.init_containers.as_deref()).unwrap_or_default();
    if init_specs.is_empty() {
        return true;
    }
    let status = pod.status.as_ref();
    let regular = status.and_then(|s| s.container_statuses.as_deref()).unwrap_or_default();
    if regular.iter().any(|s| has_terminated_before(s) || !is_waiting(s)) {
        return true;
    }
    let init = status.and_then(|s| s.init_container_statuses.as_deref()).unwrap_or_default();
    let Some(last) = init.len().checked_sub(1) else {
        return false;
    };
    // A status that does not line up with the spec counts as "not initialized" (upstream logs
    // "Mismatch between pod spec and status, likely programmer error" at V4).
    let Some(init_spec) = get_container_by_index(init_specs, init, last) else {
        return false;
    };
    let last_status = &init[last];
    if is_restartable_init_container(init_spec) {
        let running = last_status.state.as_ref().is_some_and(|s| s.running.is_some());
        running && last_status.started == Some(true)
    } else {
        let exited_zero = |state: Option<&ContainerState>| {
            state.and_then(|s| s.terminated.as_ref()).is_some_and(|t| t.exit_code == 0)
        };
        exited_zero(last_status.last_state.as_ref()) || exited_zero(last_status.state.as_ref())
    }
}

/// Upstream `initializedContainers`: the length of the prefix of init statuses up to the last
/// one with evidence of a start (not waiting, or terminated before). With none, the first
/// status alone (so a pod that never started an init container still reports a failure).
fn initialized_containers_len(statuses: &[ContainerStatus]) -> usize {
    statuses
        .iter()
        .rposition(|s| !is_waiting(s) || has_terminated_before(s))
        .map_or(statuses.len().min(1), |last| last + 1)
}

/// Go's `State.Waiting != nil`: an absent state is not waiting.
fn is_waiting(status: &ContainerStatus) -> bool {
    status.state.as_ref().is_some_and(|s| s.waiting.is_some())
}

fn has_terminated_before(status: &ContainerStatus) -> bool {
    status.last_state.as_ref().is_some_and(|s| s.terminated.is_some())
}

/// Replaces the whole state (not just adds `terminated`), like upstream.
fn mark_unknown_unless_terminated(status: &mut ContainerStatus) {
    if status.state.as_ref().is_some_and(|s| s.terminated.is_some()) {
        return;
    }
    status.state = Some(ContainerState {
        terminated: Some(ContainerStateTerminated {
            reason: Some(CONTAINER_STATUS_UNKNOWN_REASON.to_owned()),
            message: Some(CONTAINER_STATUS_UNKNOWN_MESSAGE.to_owned()),
            exit_code: CONTAINER_STATUS_UNKNOWN_EXIT_CODE,
            ..Default::default()
        }),
        ..Default::default()
    });
}

#[cfg(test)]
#[allow(clippy::unwrap_used)] // a panic is the failure report
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::{Container, ContainerStateRunning, ContainerStateWaiting, PodSpec};

    #[derive(Clone, Copy, Debug, PartialEq)]
    enum S {
        Waiting,
        Running,
        Exited(i32),
        /// Waiting now, but terminated before with this exit code.
        WaitingAfter(i32),
        /// Running now, after a previous termination with this exit code.
        RunningAfter(i32),
        /// No state at all.
        Absent,
        Unknown,
    }

    fn cs(name: &str, s: S) -> ContainerStatus {
        let waiting =
            || ContainerState { waiting: Some(ContainerStateWaiting::default()), ..Default::default() };
        let running =
            || ContainerState { running: Some(ContainerStateRunning::default()), ..Default::default() };
        let exited = |code| ContainerState {
            terminated: Some(ContainerStateTerminated { exit_code: code, ..Default::default() }),
            ..Default::default()
        };
        let (state, last_state) = match s {
            S::Waiting => (Some(waiting()), None),
            S::Running => (Some(running()), None),
            S::Exited(code) => (Some(exited(code)), None),
            S::WaitingAfter(code) => (Some(waiting()), Some(exited(code))),
            S::RunningAfter(code) => (Some(running()), Some(exited(code))),
            S::Absent => (None, None),
            S::Unknown => unreachable!("only an expected value"),
        };
        ContainerStatus { name: name.into(), state, last_state, ..Default::default() }
    }

    /// What a status looks like after termination, as an `S` (Unknown = ContainerStatusUnknown).
    fn observe(status: &ContainerStatus) -> S {
        let state = status.state.as_ref();
        if let Some(t) = state.and_then(|s| s.terminated.as_ref()) {
            if t.reason.as_deref() == Some(CONTAINER_STATUS_UNKNOWN_REASON) {
                assert_eq!(t.message.as_deref(), Some(CONTAINER_STATUS_UNKNOWN_MESSAGE));
                assert_eq!(t.exit_code, 137);
                assert!(state.is_some_and(|s| s.waiting.is_none() && s.running.is_none()));
                return S::Unknown;
            }
            return S::Exited(t.exit_code);
        }
        let last = status.last_state.as_ref().and_then(|s| s.terminated.as_ref()).map(|t| t.exit_code);
        match (state, last) {
            (Some(s), Some(code)) if s.waiting.is_some() => S::WaitingAfter(code),
            (Some(s), Some(code)) if s.running.is_some() => S::RunningAfter(code),
            (Some(s), None) if s.waiting.is_some() => S::Waiting,
            (Some(s), None) if s.running.is_some() => S::Running,
            _ => S::Absent,
        }
    }

    fn pod(init: &[(&str, bool)], init_s: &[S], regular_s: &[S], phase: Option<&str>) -> Pod {
        let names = ["r0", "r1", "r2"];
        Pod {
            spec: Some(PodSpec {
                init_containers: Some(
                    init.iter()
                        .map(|(n, sidecar)| Container {
                            name: (*n).into(),
                            restart_policy: sidecar.then(|| "Always".into()),
                            ..Default::default()
                        })
                        .collect(),
                ),
                containers: regular_s
                    .iter()
                    .enumerate()
                    .map(|(i, _)| Container { name: names[i].into(), ..Default::default() })
                    .collect(),
                ..Default::default()
            }),
            status: Some(PodStatus {
                phase: phase.map(Into::into),
                init_container_statuses: Some(
                    init_s.iter().enumerate().map(|(i, s)| cs(init[i].0, *s)).collect(),
                ),
                container_statuses: Some(
                    regular_s.iter().enumerate().map(|(i, s)| cs(names[i], *s)).collect(),
                ),
                ..Default::default()
            }),
            ..Default::default()
        }
    }

    const INIT: &[(&str, bool)] = &[("i0", false), ("i1", false)];
    const SIDECAR_LAST: &[(&str, bool)] = &[("i0", false), ("side", true)];

    #[test]
    fn pod_initialized() {
        let started = |p: Pod| {
            let mut p = p;
            if let Some(st) = p.status.as_mut() {
                st.init_container_statuses.as_mut().unwrap()[1].started = Some(true);
            }
            p
        };
        let cases = [
            ("no init containers", pod(&[], &[], &[S::Waiting], None), true),
            ("no init containers, no status", Pod { status: None, ..pod(&[], &[], &[], None) }, true),
            ("regular container running", pod(INIT, &[S::Waiting, S::Waiting], &[S::Running], None), true),
            (
                "regular container without state",
                pod(INIT, &[S::Waiting, S::Waiting], &[S::Absent], None),
                true,
            ),
            (
                "regular container terminated before",
                pod(INIT, &[S::Waiting, S::Waiting], &[S::WaitingAfter(1)], None),
                true,
            ),
            ("all waiting", pod(INIT, &[S::Waiting, S::Waiting], &[S::Waiting], None), false),
            ("last init exited 0", pod(INIT, &[S::Exited(0), S::Exited(0)], &[S::Waiting], None), true),
            ("last init exited 1", pod(INIT, &[S::Exited(0), S::Exited(1)], &[S::Waiting], None), false),
            (
                "last init exited 0 before",
                pod(INIT, &[S::Exited(0), S::RunningAfter(0)], &[S::Waiting], None),
                true,
            ),
            // Upstream looks at the last *status*, not the last spec container.
            (
                "fewer statuses than spec, last status exited 0",
                pod(INIT, &[S::Exited(0)], &[S::Waiting], None),
                true,
            ),
            ("no init statuses", pod(INIT, &[], &[S::Waiting], None), false),
            ("no status at all", Pod { status: None, ..pod(INIT, &[], &[], None) }, false),
            (
                "sidecar last running and started",
                started(pod(SIDECAR_LAST, &[S::Exited(0), S::Running], &[S::Waiting], None)),
                true,
            ),
            (
                "sidecar last running, not started",
                pod(SIDECAR_LAST, &[S::Exited(0), S::Running], &[S::Waiting], None),
                false,
            ),
            (
                "sidecar last exited 0 does not count",
                pod(SIDECAR_LAST, &[S::Exited(0), S::Exited(0)], &[S::Waiting], None),
                false,
            ),
        ];
        for (name, pod, want) in cases {
            assert_eq!(has_pod_initialized(&pod), want, "case: {name}");
        }

        // Statuses that do not line up with the spec by index.
        let mut mismatch = pod(INIT, &[S::Exited(0), S::Exited(0)], &[S::Waiting], None);
        mismatch.status.as_mut().unwrap().init_container_statuses.as_mut().unwrap()[1].name = "other".into();
        assert!(!has_pod_initialized(&mismatch), "case: spec/status mismatch");
    }

    #[test]
    fn terminate_containers() {
        struct Case {
            name: &'static str,
            pod: Pod,
            want_init: Vec<S>,
            want_regular: Vec<S>,
        }
        let three = &[("i0", false), ("i1", false), ("i2", false)][..];
        let cases = vec![
            Case {
                name: "initialized: running becomes unknown, terminated kept",
                pod: pod(&[], &[], &[S::Running, S::Exited(3), S::Waiting], None),
                want_init: vec![],
                want_regular: vec![S::Unknown, S::Exited(3), S::Unknown],
            },
            Case {
                name: "initialized: container without state becomes unknown",
                pod: pod(&[], &[], &[S::Absent], None),
                want_init: vec![],
                want_regular: vec![S::Unknown],
            },
            Case {
                name: "not initialized: regular containers untouched",
                pod: pod(INIT, &[S::Exited(0), S::Running], &[S::Waiting, S::Waiting], None),
                want_init: vec![S::Exited(0), S::Unknown],
                want_regular: vec![S::Waiting, S::Waiting],
            },
            Case {
                name: "init prefix up to last started, trailing waiting kept",
                pod: pod(three, &[S::Exited(0), S::Running, S::Waiting], &[S::Waiting], None),
                want_init: vec![S::Exited(0), S::Unknown, S::Waiting],
                want_regular: vec![S::Waiting],
            },
            Case {
                name: "init waiting after a termination counts as started",
                pod: pod(three, &[S::Exited(0), S::WaitingAfter(1), S::Waiting], &[S::Waiting], None),
                want_init: vec![S::Exited(0), S::Unknown, S::Waiting],
                want_regular: vec![S::Waiting],
            },
            Case {
                name: "all init waiting: only the first",
                pod: pod(three, &[S::Waiting, S::Waiting, S::Waiting], &[S::Waiting], None),
                want_init: vec![S::Unknown, S::Waiting, S::Waiting],
                want_regular: vec![S::Waiting],
            },
            Case {
                name: "init waiting before a started one is marked too",
                pod: pod(three, &[S::Waiting, S::Running, S::Waiting], &[S::Waiting], None),
                want_init: vec![S::Unknown, S::Unknown, S::Waiting],
                want_regular: vec![S::Waiting],
            },
            Case {
                name: "initialized pod: all init and regular",
                pod: pod(INIT, &[S::Exited(0), S::Exited(0)], &[S::Running], None),
                want_init: vec![S::Exited(0), S::Exited(0)],
                want_regular: vec![S::Unknown],
            },
            Case {
                name: "initialized via sidecar: sidecar and regular",
                pod: {
                    let mut p = pod(SIDECAR_LAST, &[S::Exited(0), S::Running], &[S::Running], None);
                    p.status.as_mut().unwrap().init_container_statuses.as_mut().unwrap()[1].started =
                        Some(true);
                    p
                },
                want_init: vec![S::Exited(0), S::Unknown],
                want_regular: vec![S::Unknown],
            },
        ];
        for case in cases {
            let base = case.pod.status.clone().unwrap();
            let got = terminate_status(&case.pod, &base, false);
            let init: Vec<S> = got.init_container_statuses.iter().flatten().map(observe).collect();
            let regular: Vec<S> = got.container_statuses.iter().flatten().map(observe).collect();
            assert_eq!(init, case.want_init, "case: {} (init)", case.name);
            assert_eq!(regular, case.want_regular, "case: {} (regular)", case.name);
        }
    }

    #[test]
    fn initialized_judged_from_pod_status_not_base() {
        // The base (a cached status) shows a running regular container, but pod.status does not:
        // upstream decides from pod.status, so regular containers stay as the base has them.
        let pod = pod(INIT, &[S::Running, S::Waiting], &[S::Waiting], None);
        let mut base = pod.status.clone().unwrap();
        base.container_statuses = Some(vec![cs("r0", S::Running)]);
        let got = terminate_status(&pod, &base, false);
        let regular: Vec<S> = got.container_statuses.iter().flatten().map(observe).collect();
        assert_eq!(regular, vec![S::Running], "case: base running, pod.status waiting");
    }

    #[test]
    fn phases() {
        let cases = [
            ("pending becomes failed", Some("Pending"), false, Some("Failed")),
            ("running becomes failed", Some("Running"), false, Some("Failed")),
            ("unknown becomes failed", Some("Unknown"), false, Some("Failed")),
            ("unset becomes failed", None, false, Some("Failed")),
            ("succeeded kept", Some("Succeeded"), false, Some("Succeeded")),
            ("failed kept", Some("Failed"), false, Some("Failed")),
            ("static running kept", Some("Running"), true, Some("Running")),
            ("static pending kept", Some("Pending"), true, Some("Pending")),
            ("static unset kept", None, true, None),
        ];
        for (name, phase, is_static, want) in cases {
            let pod = pod(&[], &[], &[S::Running], phase);
            let got = terminate_status(&pod, pod.status.as_ref().unwrap(), is_static);
            assert_eq!(got.phase.as_deref(), want, "case: {name}");
        }
    }
}
