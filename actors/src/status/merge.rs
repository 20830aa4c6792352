//! The merge of the status manager's status into the API server's copy, just before a PATCH
//! (docs/status-manager.md §5.12). Upstream: `mergePodStatus` in
//! `pkg/kubelet/status/status_manager.go`, with `podutil.UpdatePodCondition` and
//! `statusutil.ReplaceOrAppendPodCondition`.
//!
//! Fields the writer does not own come from the API copy: foreign conditions,
//! `resourceClaimStatuses` and `extendedResourceClaimStatus`. Which conditions are owned is a
//! parameter ([`ConditionOwnership`]); [`merge_pod_status`] uses the kubelet's set.
//!
//! [`merge_readiness_only`] is the merge of a writer that owns only readiness (cluster mode,
//! where the node's runtime writes phase, IPs and container states): the API copy with `ready`,
//! `started` and the owned conditions laid over it. It has no upstream counterpart.

use k8s_openapi::api::core::v1::{ContainerStatus, PodCondition, PodStatus};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;

use super::equality::{CONTAINERS_READY, ConditionOwnership, POD_READY, get_pod_condition};
use super::generate::{PHASE_FAILED, PHASE_SUCCEEDED, POD_COMPLETED, POD_FAILED};

const CONDITION_TRUE: &str = "True";
const CONDITION_FALSE: &str = "False";

/// Upstream `podutil.IsPodPhaseTerminal`: Failed or Succeeded.
pub fn is_terminal_phase(phase: Option<&str>) -> bool {
    matches!(phase, Some(PHASE_FAILED | PHASE_SUCCEEDED))
}

/// Upstream `mergePodStatus` with the kubelet's condition ownership. See [`merge_pod_status_for`].
pub fn merge_pod_status(
    api: &PodStatus,
    new: &PodStatus,
    could_have_running_containers: bool,
    now: Time,
    generation: Option<i64>,
) -> PodStatus {
    merge_pod_status_for(
        api,
        new,
        could_have_running_containers,
        now,
        generation,
        &ConditionOwnership::KUBELET,
    )
}

/// Upstream `mergePodStatus`: the status to send, given the API server's copy (`api`), the
/// status manager's (`new`) and whether any container of the pod could still be running.
///
/// 1. Conditions: the API's conditions that are not owned (foreign ones and an existing shared
///    `DisruptionTarget`), in API order, then the owned ones from `new`. A shared condition from
///    `new` is sent only when the pod is transitioning to a terminal phase with nothing left
///    running: then its `lastTransitionTime` is recomputed against the API copy (the one set
///    when it was stored is stale by then) and it replaces the API's one or is appended.
///    Upstream writes this rule for `DisruptionTarget`, the only shared type; we apply it to
///    every shared type of the ownership.
/// 2. `resourceClaimStatuses` and `extendedResourceClaimStatus` come from the API copy.
/// 3. A transition to a terminal phase is held back (API phase, reason and message kept) while
///    containers could still be running.
/// 4. With a terminal phase, a True `Ready` or `ContainersReady` forces both to False with
///    reason `PodFailed`/`PodCompleted` and no message (kubernetes#108594), each through
///    upstream's `UpdatePodCondition` (time kept if the status did not change, `now` otherwise).
///    Like every condition the kubelet generates, they carry `observedGeneration`: `generation`,
///    the API pod's `metadata.generation` (`None` for none or 0). A writer that does not own
///    one of them leaves that one alone.
pub fn merge_pod_status_for(
    api: &PodStatus,
    new: &PodStatus,
    could_have_running_containers: bool,
    now: Time,
    generation: Option<i64>,
    ownership: &ConditionOwnership,
) -> PodStatus {
    let mut merged = new.clone();
    let new_conditions = merged.conditions.take().unwrap_or_default();

    let mut conditions: Vec<PodCondition> =
        api.conditions.iter().flatten().filter(|c| !ownership.owns(&c.type_)).cloned().collect();

    let transitioning_to_terminal =
        !is_terminal_phase(api.phase.as_deref()) && is_terminal_phase(new.phase.as_deref());

    for c in &new_conditions {
        if ownership.owns(&c.type_) {
            conditions.push(c.clone());
        } else if ownership.shares(&c.type_) && transitioning_to_terminal && !could_have_running_containers {
            // Upstream refreshes and sends the first condition of the type, whichever copy the
            // loop is at.
            let Some(first) = get_pod_condition(Some(&new_conditions), &c.type_) else { continue };
            let mut refreshed = first.clone();
            refreshed.last_transition_time = match get_pod_condition(api.conditions.as_deref(), &c.type_) {
                Some(old) if old.status == refreshed.status => old.last_transition_time.clone(),
                _ => Some(now.clone()),
            };
            replace_or_append_condition(&mut conditions, refreshed);
        }
    }
    merged.conditions = (!conditions.is_empty()).then_some(conditions);

    merged.resource_claim_statuses.clone_from(&api.resource_claim_statuses);
    merged.extended_resource_claim_status.clone_from(&api.extended_resource_claim_status);

    if transitioning_to_terminal && could_have_running_containers {
        merged.phase.clone_from(&api.phase);
        merged.reason.clone_from(&api.reason);
        merged.message.clone_from(&api.message);
    }

    force_not_ready_when_terminal(&mut merged, &now, generation, ownership);
    merged
}

/// The merge of a writer that owns only readiness ([`merge_pod_status_for`] is the kubelet's):
/// the API copy (`api`), with from the status manager's status (`new`) only
///
/// * `ready` and `started` of each init and regular container status that `new` has under the
///   same name **and** the same non-empty `containerID`. A container the API shows with another
///   ID (restarted since `new` was computed) or without one is left as the API has it: our
///   readiness belongs to the container we probed.
/// * the owned conditions of `new`, each in the place of the API's condition of its type
///   (appended when the API has none); an owned condition `new` lacks is removed, as in the
///   kubelet's merge. Conditions the writer does not own, shared ones included, stay as the API
///   has them: this writer never decides the phase, so it never sends a shared condition.
/// * With a terminal API phase, a True `Ready` or `ContainersReady` is forced to False as in
///   [`merge_pod_status_for`] step 4 (kubernetes#108594), with `observedGeneration`
///   `generation`.
///
/// Phase, reason, message, IPs, `startTime`, container states, IDs, images, restart counts,
/// ephemeral containers and everything else come from the API copy, so a write can never undo
/// what the runtime published, however old `new` is.
pub fn merge_readiness_only(
    api: &PodStatus,
    new: &PodStatus,
    now: Time,
    generation: Option<i64>,
    ownership: &ConditionOwnership,
) -> PodStatus {
    let mut merged = api.clone();
    overlay_readiness(merged.init_container_statuses.as_deref_mut(), new.init_container_statuses.as_deref());
    overlay_readiness(merged.container_statuses.as_deref_mut(), new.container_statuses.as_deref());

    let ours = |type_: &str| new.conditions.iter().flatten().find(|c| c.type_ == type_);
    let mut conditions: Vec<PodCondition> = Vec::new();
    for c in api.conditions.iter().flatten() {
        if !ownership.owns(&c.type_) {
            conditions.push(c.clone());
        } else if let Some(mine) = ours(&c.type_)
            && !conditions.iter().any(|placed| placed.type_ == c.type_)
        {
            conditions.push(mine.clone());
        }
    }
    for c in new.conditions.iter().flatten() {
        if ownership.owns(&c.type_) && !conditions.iter().any(|placed| placed.type_ == c.type_) {
            conditions.push(c.clone());
        }
    }
    if conditions.as_slice() != api.conditions.as_deref().unwrap_or_default() {
        merged.conditions = (!conditions.is_empty()).then_some(conditions);
    }

    force_not_ready_when_terminal(&mut merged, &now, generation, ownership);
    merged
}

/// Copies `ready` and `started` from `ours` into the statuses of `api` with the same name and the
/// same non-empty container ID.
fn overlay_readiness(api: Option<&mut [ContainerStatus]>, ours: Option<&[ContainerStatus]>) {
    let (Some(api), Some(ours)) = (api, ours) else { return };
    for status in api {
        let Some(id) = status.container_id.as_deref().filter(|id| !id.is_empty()) else { continue };
        if let Some(mine) =
            ours.iter().find(|o| o.name == status.name && o.container_id.as_deref() == Some(id))
        {
            status.ready = mine.ready;
            status.started = mine.started;
        }
    }
}

/// Step 4 of [`merge_pod_status_for`]: never a terminal phase with a True `Ready` or
/// `ContainersReady` (kubernetes#108594). A writer that does not own one of them leaves it alone.
/// Upstream generates the two (`generate*ConditionForTerminalPhase`) with the pod's generation.
fn force_not_ready_when_terminal(
    merged: &mut PodStatus,
    now: &Time,
    generation: Option<i64>,
    ownership: &ConditionOwnership,
) {
    if is_terminal_phase(merged.phase.as_deref())
        && (is_condition_true(merged, POD_READY) || is_condition_true(merged, CONTAINERS_READY))
    {
        let reason = if merged.phase.as_deref() == Some(PHASE_FAILED) { POD_FAILED } else { POD_COMPLETED };
        for condition_type in [CONTAINERS_READY, POD_READY] {
            if ownership.owns(condition_type) {
                let condition = PodCondition {
                    type_: condition_type.to_owned(),
                    status: CONDITION_FALSE.to_owned(),
                    reason: Some(reason.to_owned()),
                    observed_generation: generation,
                    ..Default::default()
                };
                update_pod_condition(merged, condition, now);
            }
        }
    }
}

fn is_condition_true(status: &PodStatus, condition_type: &str) -> bool {
    get_pod_condition(status.conditions.as_deref(), condition_type)
        .is_some_and(|c| c.status == CONDITION_TRUE)
}

/// Upstream `statusutil.ReplaceOrAppendPodCondition`: replaces the first condition of the same
/// type, or appends.
fn replace_or_append_condition(conditions: &mut Vec<PodCondition>, condition: PodCondition) {
    match conditions.iter_mut().find(|c| c.type_ == condition.type_) {
        Some(existing) => *existing = condition,
        None => conditions.push(condition),
    }
}

/// Upstream `podutil.UpdatePodCondition`: sets the condition (replacing the first of its type, or
/// appending), with `lastTransitionTime` kept from the existing one when the status is the same
/// and `now` otherwise.
fn update_pod_condition(status: &mut PodStatus, mut condition: PodCondition, now: &Time) {
    let conditions = status.conditions.get_or_insert_with(Vec::new);
    match conditions.iter_mut().find(|c| c.type_ == condition.type_) {
        Some(existing) => {
            condition.last_transition_time = if existing.status == condition.status {
                existing.last_transition_time.clone()
            } else {
                Some(now.clone())
            };
            *existing = condition;
        }
        None => {
            condition.last_transition_time = Some(now.clone());
            conditions.push(condition);
        }
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)] // a panic is the failure report
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::{PodExtendedResourceClaimStatus, PodResourceClaimStatus};
    use k8s_openapi::jiff::Timestamp;

    fn at(second: i64) -> Time {
        Time(Timestamp::constant(second, 0))
    }

    const NOW: i64 = 1000;

    fn cond(t: &str, status: &str, ltt: i64) -> PodCondition {
        PodCondition {
            type_: t.into(),
            status: status.into(),
            last_transition_time: Some(at(ltt)),
            ..Default::default()
        }
    }

    fn with_reason(mut c: PodCondition, reason: &str, message: &str) -> PodCondition {
        c.reason = Some(reason.into());
        c.message = Some(message.into());
        c
    }

    fn status(phase: &str, conditions: Vec<PodCondition>) -> PodStatus {
        PodStatus { phase: Some(phase.into()), conditions: Some(conditions), ..Default::default() }
    }

    /// (type, status, reason, lastTransitionTime seconds) in order.
    fn summary(s: &PodStatus) -> Vec<(String, String, Option<String>, Option<i64>)> {
        s.conditions
            .iter()
            .flatten()
            .map(|c| {
                (
                    c.type_.clone(),
                    c.status.clone(),
                    c.reason.clone(),
                    c.last_transition_time.as_ref().map(|t| t.0.as_second()),
                )
            })
            .collect()
    }

    fn row(
        t: &str,
        status: &str,
        reason: Option<&str>,
        ltt: i64,
    ) -> (String, String, Option<String>, Option<i64>) {
        (t.into(), status.into(), reason.map(Into::into), Some(ltt))
    }

    #[test]
    fn terminal_phases() {
        let cases = [
            ("failed", Some("Failed"), true),
            ("succeeded", Some("Succeeded"), true),
            ("running", Some("Running"), false),
            ("pending", Some("Pending"), false),
            ("unknown", Some("Unknown"), false),
            ("unset", None, false),
        ];
        for (name, phase, want) in cases {
            assert_eq!(is_terminal_phase(phase), want, "case: {name}");
        }
    }

    #[test]
    fn merge_conditions_and_phase() {
        struct Case {
            name: &'static str,
            api: PodStatus,
            new: PodStatus,
            could_run: bool,
            want: Vec<(String, String, Option<String>, Option<i64>)>,
            want_phase: &'static str,
        }
        let cases = vec![
            Case {
                name: "foreign conditions kept first in API order, owned from new",
                api: status(
                    "Running",
                    vec![
                        cond("Ready", "False", 1),
                        cond("example.com/a", "True", 2),
                        cond("PodScheduled", "True", 3),
                        cond("example.com/b", "False", 4),
                    ],
                ),
                new: status(
                    "Running",
                    vec![
                        cond("PodScheduled", "True", 3),
                        cond("Ready", "True", 50),
                        cond("example.com/a", "False", 60),
                    ],
                ),
                could_run: true,
                want: vec![
                    row("example.com/a", "True", None, 2),
                    row("example.com/b", "False", None, 4),
                    row("PodScheduled", "True", None, 3),
                    row("Ready", "True", None, 50),
                ],
                want_phase: "Running",
            },
            Case {
                name: "owned condition only in API is dropped",
                api: status("Running", vec![cond("PodResizePending", "True", 1)]),
                new: status("Running", vec![]),
                could_run: true,
                want: vec![],
                want_phase: "Running",
            },
            Case {
                name: "DisruptionTarget in API kept when new has none",
                api: status("Running", vec![cond("DisruptionTarget", "True", 5)]),
                new: status("Running", vec![cond("Ready", "True", 6)]),
                could_run: true,
                want: vec![row("DisruptionTarget", "True", None, 5), row("Ready", "True", None, 6)],
                want_phase: "Running",
            },
            Case {
                name: "DisruptionTarget from new not sent while not terminal",
                api: status("Running", vec![]),
                new: status("Running", vec![cond("DisruptionTarget", "True", 7)]),
                could_run: false,
                want: vec![],
                want_phase: "Running",
            },
            Case {
                name: "DisruptionTarget from new not sent while containers could run",
                api: status("Running", vec![cond("DisruptionTarget", "False", 5)]),
                new: status("Failed", vec![cond("DisruptionTarget", "True", 7)]),
                could_run: true,
                want: vec![row("DisruptionTarget", "False", None, 5)],
                want_phase: "Running",
            },
            Case {
                name: "DisruptionTarget appended on terminal transition with LTT now",
                api: status("Running", vec![cond("example.com/a", "True", 1)]),
                new: status("Failed", vec![cond("DisruptionTarget", "True", 7)]),
                could_run: false,
                want: vec![row("example.com/a", "True", None, 1), row("DisruptionTarget", "True", None, NOW)],
                want_phase: "Failed",
            },
            Case {
                name: "DisruptionTarget replaced in place, LTT kept when status same",
                api: status(
                    "Running",
                    vec![
                        with_reason(cond("DisruptionTarget", "True", 5), "EvictionByEvictionAPI", "old"),
                        cond("example.com/a", "True", 1),
                    ],
                ),
                new: status(
                    "Failed",
                    vec![with_reason(cond("DisruptionTarget", "True", 7), "TerminationByKubelet", "new")],
                ),
                could_run: false,
                want: vec![
                    row("DisruptionTarget", "True", Some("TerminationByKubelet"), 5),
                    row("example.com/a", "True", None, 1),
                ],
                want_phase: "Failed",
            },
            Case {
                name: "DisruptionTarget replaced, LTT now when status flips",
                api: status("Pending", vec![cond("DisruptionTarget", "False", 5)]),
                new: status("Succeeded", vec![cond("DisruptionTarget", "True", 7)]),
                could_run: false,
                want: vec![row("DisruptionTarget", "True", None, NOW)],
                want_phase: "Succeeded",
            },
            Case {
                name: "DisruptionTarget not resent when API is already terminal",
                api: status("Failed", vec![cond("DisruptionTarget", "False", 5)]),
                new: status("Failed", vec![cond("DisruptionTarget", "True", 7)]),
                could_run: false,
                want: vec![row("DisruptionTarget", "False", None, 5)],
                want_phase: "Failed",
            },
            Case {
                name: "terminal phase held back while containers could run",
                api: status("Running", vec![cond("Ready", "True", 1)]),
                new: status("Succeeded", vec![cond("Ready", "True", 1)]),
                could_run: true,
                want: vec![row("Ready", "True", None, 1)],
                want_phase: "Running",
            },
            Case {
                name: "terminal Failed forces Ready and ContainersReady False with PodFailed",
                api: status("Running", vec![cond("Ready", "True", 1), cond("ContainersReady", "True", 1)]),
                new: status("Failed", vec![cond("Ready", "True", 1), cond("ContainersReady", "True", 1)]),
                could_run: false,
                want: vec![
                    row("Ready", "False", Some("PodFailed"), NOW),
                    row("ContainersReady", "False", Some("PodFailed"), NOW),
                ],
                want_phase: "Failed",
            },
            Case {
                name: "terminal Succeeded forces PodCompleted, missing one appended",
                api: status("Succeeded", vec![]),
                new: status("Succeeded", vec![cond("Ready", "True", 1)]),
                could_run: true,
                want: vec![
                    row("Ready", "False", Some("PodCompleted"), NOW),
                    row("ContainersReady", "False", Some("PodCompleted"), NOW),
                ],
                want_phase: "Succeeded",
            },
            Case {
                name: "terminal with ContainersReady True and Ready False keeps Ready's time",
                api: status("Failed", vec![]),
                new: status("Failed", vec![cond("Ready", "False", 3), cond("ContainersReady", "True", 4)]),
                could_run: false,
                want: vec![
                    row("Ready", "False", Some("PodFailed"), 3),
                    row("ContainersReady", "False", Some("PodFailed"), NOW),
                ],
                want_phase: "Failed",
            },
            Case {
                name: "terminal with both not True left alone",
                api: status("Failed", vec![]),
                new: status(
                    "Failed",
                    vec![with_reason(cond("Ready", "False", 3), "ContainersNotReady", "m")],
                ),
                could_run: false,
                want: vec![row("Ready", "False", Some("ContainersNotReady"), 3)],
                want_phase: "Failed",
            },
        ];
        for case in cases {
            let got = merge_pod_status(&case.api, &case.new, case.could_run, at(NOW), None);
            assert_eq!(summary(&got), case.want, "case: {}", case.name);
            assert_eq!(got.phase.as_deref(), Some(case.want_phase), "case: {} (phase)", case.name);
        }
    }

    #[test]
    fn forced_ready_has_no_message() {
        let api = status("Running", vec![]);
        let new = status("Failed", vec![with_reason(cond("Ready", "True", 1), "R", "some message")]);
        let got = merge_pod_status(&api, &new, false, at(NOW), None);
        let ready = get_pod_condition(got.conditions.as_deref(), "Ready").unwrap();
        assert_eq!(ready.message, None, "case: message cleared");
        assert_eq!(ready.reason.as_deref(), Some("PodFailed"), "case: reason");
    }

    #[test]
    fn forced_conditions_carry_the_pods_generation() {
        let ready = PodCondition { observed_generation: Some(3), ..cond("Ready", "True", 1) };
        let containers_ready =
            PodCondition { observed_generation: Some(3), ..cond("ContainersReady", "True", 1) };
        let api = status("Running", vec![ready.clone(), containers_ready.clone()]);
        let new = status("Failed", vec![ready, containers_ready]);
        let merged = [
            ("kubelet", merge_pod_status(&api, &new, false, at(NOW), Some(4))),
            ("readiness only", {
                let api = PodStatus { phase: Some("Failed".into()), ..api.clone() };
                merge_readiness_only(&api, &new, at(NOW), Some(4), &ConditionOwnership::KUBELET)
            }),
        ];
        for (name, got) in merged {
            for type_ in ["Ready", "ContainersReady"] {
                let c = get_pod_condition(got.conditions.as_deref(), type_).expect("condition");
                assert_eq!(c.status, "False", "{name}: {type_} forced False");
                assert_eq!(c.observed_generation, Some(4), "{name}: {type_} carries the pod's generation");
            }
        }
        let unset = merge_pod_status(&api, &new, false, at(NOW), None);
        let c = get_pod_condition(unset.conditions.as_deref(), "Ready").expect("Ready");
        assert_eq!(c.observed_generation, None, "no generation: the field is omitted");
    }

    #[test]
    fn held_back_phase_keeps_api_reason_and_message() {
        let api = PodStatus {
            phase: Some("Running".into()),
            reason: Some("api-reason".into()),
            message: Some("api-message".into()),
            ..Default::default()
        };
        let new = PodStatus {
            phase: Some("Failed".into()),
            reason: Some("Evicted".into()),
            message: Some("The node was low on memory".into()),
            ..Default::default()
        };
        let cases = [
            ("containers could run", true, ("Running", "api-reason", "api-message")),
            ("nothing running", false, ("Failed", "Evicted", "The node was low on memory")),
        ];
        for (name, could_run, (phase, reason, message)) in cases {
            let got = merge_pod_status(&api, &new, could_run, at(NOW), None);
            assert_eq!(got.phase.as_deref(), Some(phase), "case: {name} (phase)");
            assert_eq!(got.reason.as_deref(), Some(reason), "case: {name} (reason)");
            assert_eq!(got.message.as_deref(), Some(message), "case: {name} (message)");
        }
    }

    #[test]
    fn claim_statuses_come_from_api() {
        let claims = |n: &str| {
            Some(vec![PodResourceClaimStatus { name: n.into(), resource_claim_name: Some(format!("{n}-x")) }])
        };
        let extended = |n: &str| {
            Some(PodExtendedResourceClaimStatus { resource_claim_name: n.into(), ..Default::default() })
        };
        let cases = [
            ("API has them, new has none", claims("api"), extended("api"), None, None),
            ("both have them", claims("api"), extended("api"), claims("new"), extended("new")),
            ("API has none", None, None, claims("new"), extended("new")),
        ];
        for (name, api_claims, api_ext, new_claims, new_ext) in cases {
            let api = PodStatus {
                resource_claim_statuses: api_claims.clone(),
                extended_resource_claim_status: api_ext.clone(),
                ..Default::default()
            };
            let new = PodStatus {
                resource_claim_statuses: new_claims,
                extended_resource_claim_status: new_ext,
                ..Default::default()
            };
            let got = merge_pod_status(&api, &new, false, at(NOW), None);
            assert_eq!(got.resource_claim_statuses, api_claims, "case: {name} (resourceClaimStatuses)");
            assert_eq!(
                got.extended_resource_claim_status, api_ext,
                "case: {name} (extendedResourceClaimStatus)"
            );
        }
    }

    #[test]
    fn custom_ownership() {
        let gate = ConditionOwnership::new(["example.com/gate"], Vec::<String>::new());
        let api = status("Running", vec![cond("Ready", "True", 1), cond("example.com/gate", "False", 2)]);
        let new = status("Running", vec![cond("Ready", "False", 9), cond("example.com/gate", "True", 9)]);
        let got = merge_pod_status_for(&api, &new, true, at(NOW), None, &gate);
        assert_eq!(
            summary(&got),
            vec![row("Ready", "True", None, 1), row("example.com/gate", "True", None, 9)],
            "case: only the gate comes from new"
        );

        let api = status("Running", vec![cond("Ready", "True", 1)]);
        let new = status("Failed", vec![cond("example.com/gate", "True", 9)]);
        let got = merge_pod_status_for(&api, &new, false, at(NOW), None, &gate);
        assert_eq!(
            summary(&got),
            vec![row("Ready", "True", None, 1), row("example.com/gate", "True", None, 9)],
            "case: terminal phase does not touch an unowned Ready"
        );
    }

    fn container(name: &str, id: Option<&str>, ready: bool, started: Option<bool>) -> ContainerStatus {
        ContainerStatus {
            name: name.into(),
            container_id: id.map(Into::into),
            ready,
            started,
            image: format!("{name}:1"),
            restart_count: 3,
            ..Default::default()
        }
    }

    /// (name, ready, started) in order.
    fn flags(list: &Option<Vec<ContainerStatus>>) -> Vec<(String, bool, Option<bool>)> {
        list.iter().flatten().map(|c| (c.name.clone(), c.ready, c.started)).collect()
    }

    #[test]
    fn readiness_only_overlays_ready_and_started_of_the_same_container() {
        let api = PodStatus {
            phase: Some("Running".into()),
            pod_ip: Some("10.0.0.9".into()),
            init_container_statuses: Some(vec![container("sidecar", Some("cri://s1"), false, Some(false))]),
            container_statuses: Some(vec![
                container("same", Some("cri://a1"), false, Some(false)),
                container("restarted", Some("cri://b2"), false, Some(false)),
                container("no-id", None, false, None),
                container("empty-id", Some(""), false, None),
                container("only-api", Some("cri://d1"), true, Some(true)),
            ]),
            ..Default::default()
        };
        let new = PodStatus {
            phase: Some("Pending".into()),
            pod_ip: None,
            init_container_statuses: Some(vec![container("sidecar", Some("cri://s1"), true, Some(true))]),
            container_statuses: Some(vec![
                container("same", Some("cri://a1"), true, Some(true)),
                container("restarted", Some("cri://b1"), true, Some(true)),
                container("no-id", None, true, Some(true)),
                container("empty-id", Some(""), true, Some(true)),
                container("only-ours", Some("cri://e1"), true, Some(true)),
            ]),
            ..Default::default()
        };
        let got = merge_readiness_only(&api, &new, at(NOW), None, &ConditionOwnership::KUBELET);
        let row = |n: &str, r: bool, s: Option<bool>| (n.to_owned(), r, s);
        assert_eq!(flags(&got.init_container_statuses), [row("sidecar", true, Some(true))], "case: init");
        assert_eq!(
            flags(&got.container_statuses),
            [
                row("same", true, Some(true)),
                row("restarted", false, Some(false)),
                row("no-id", false, None),
                row("empty-id", false, None),
                row("only-api", true, Some(true)),
            ],
            "case: matched by name and ID only"
        );
        let mut expected = api.clone();
        expected.init_container_statuses.clone_from(&got.init_container_statuses);
        expected.container_statuses.clone_from(&got.container_statuses);
        assert_eq!(got, expected, "case: nothing else moves (phase, IP, images, restart counts)");
    }

    #[test]
    fn readiness_only_conditions() {
        struct Case {
            name: &'static str,
            api: PodStatus,
            new: PodStatus,
            want: Vec<(String, String, Option<String>, Option<i64>)>,
            want_phase: &'static str,
        }
        let cases = vec![
            Case {
                name: "owned replaced in place, foreign kept, owned only in new appended",
                api: status(
                    "Running",
                    vec![cond("example.com/a", "True", 1), cond("Ready", "False", 2), cond("b", "False", 3)],
                ),
                new: status(
                    "Pending",
                    vec![cond("ContainersReady", "True", 9), cond("Ready", "True", 9), cond("b", "True", 9)],
                ),
                want: vec![
                    row("example.com/a", "True", None, 1),
                    row("Ready", "True", None, 9),
                    row("b", "False", None, 3),
                    row("ContainersReady", "True", None, 9),
                ],
                want_phase: "Running",
            },
            Case {
                name: "owned condition only in API is dropped",
                api: status("Running", vec![cond("Initialized", "True", 1), cond("x", "True", 1)]),
                new: status("Running", vec![]),
                want: vec![row("x", "True", None, 1)],
                want_phase: "Running",
            },
            Case {
                name: "shared condition never sent, the API's kept",
                api: status("Running", vec![cond("DisruptionTarget", "False", 1)]),
                new: status("Failed", vec![cond("DisruptionTarget", "True", 9)]),
                want: vec![row("DisruptionTarget", "False", None, 1)],
                want_phase: "Running",
            },
            Case {
                name: "terminal API phase forces Ready False",
                api: status("Succeeded", vec![cond("Ready", "True", 1)]),
                new: status("Running", vec![cond("Ready", "True", 1), cond("ContainersReady", "True", 1)]),
                want: vec![
                    row("Ready", "False", Some("PodCompleted"), NOW),
                    row("ContainersReady", "False", Some("PodCompleted"), NOW),
                ],
                want_phase: "Succeeded",
            },
            Case {
                name: "a terminal phase of ours is not sent",
                api: status("Running", vec![cond("Ready", "True", 1)]),
                new: status("Failed", vec![cond("Ready", "True", 1)]),
                want: vec![row("Ready", "True", None, 1)],
                want_phase: "Running",
            },
        ];
        for case in cases {
            let got = merge_readiness_only(&case.api, &case.new, at(NOW), None, &ConditionOwnership::KUBELET);
            assert_eq!(summary(&got), case.want, "case: {}", case.name);
            assert_eq!(got.phase.as_deref(), Some(case.want_phase), "case: {} (phase)", case.name);
        }
    }

    #[test]
    fn readiness_only_without_owned_conditions_keeps_the_api_list_as_is() {
        let api = PodStatus { conditions: Some(vec![]), ..Default::default() };
        let got =
            merge_readiness_only(&api, &PodStatus::default(), at(NOW), None, &ConditionOwnership::KUBELET);
        assert_eq!(got, api, "case: an empty list stays an empty list");
        let gate = ConditionOwnership::new(["example.com/gate"], Vec::<String>::new());
        let api = status("Running", vec![cond("Ready", "True", 1)]);
        let new = status("Running", vec![cond("Ready", "False", 9), cond("example.com/gate", "True", 9)]);
        let got = merge_readiness_only(&api, &new, at(NOW), None, &gate);
        assert_eq!(
            summary(&got),
            vec![row("Ready", "True", None, 1), row("example.com/gate", "True", None, 9)],
            "case: custom ownership"
        );
    }
}
