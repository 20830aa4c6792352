//! The syncer's pure rules (upstream: the helpers of the status manager's `syncPod`): which pod
//! may be deleted (`canBeDeleted`), Go's zero values, which API copy is the newer merge base, how
//! a reconcile list meets the statuses held, and the JSON a readiness-only write is computed from.

use std::collections::{HashMap, HashSet};

use k8s_openapi::api::core::v1::{ContainerState, ContainerStatus, Pod, PodStatus};
use serde_json::Value;

use super::api_pod::ApiPod;
use crate::contracts::PodLookup;
use crate::status::manager::VersionedPodStatus;
use crate::status::merge::is_terminal_phase;
use crate::vocabulary::PodUid;

/// The annotation that marks a mirror pod (the API copy of a static pod).
pub const MIRROR_POD_ANNOTATION: &str = "kubernetes.io/config.mirror";

/// The source pod UID an API copy belongs to (a mirror pod's static pod).
pub fn source_uid(pods: &dyn PodLookup, pod: &Pod) -> PodUid {
    let api_uid = PodUid::of(pod).unwrap_or_default();
    pods.static_uid_for_mirror(&api_uid).map(PodUid::from).unwrap_or(api_uid)
}

/// The statuses to write after a reconcile listed `listed`: per pod the newer version of the
/// list's and the one already held (updates keep arriving while the list is on its way); a pod
/// missing from the list is kept only if its update arrived after the list was asked for
/// (`arrived`), as the list may predate it; otherwise the status manager forgot it.
pub fn merge_listed(
    mut current: HashMap<PodUid, VersionedPodStatus>,
    listed: HashMap<PodUid, VersionedPodStatus>,
    arrived: &HashSet<PodUid>,
) -> HashMap<PodUid, VersionedPodStatus> {
    let mut merged: HashMap<PodUid, VersionedPodStatus> = HashMap::with_capacity(listed.len());
    for (uid, status) in listed {
        let keep = match current.remove(&uid) {
            Some(held) if held.version > status.version => held,
            _ => status,
        };
        merged.insert(uid, keep);
    }
    for (uid, held) in current {
        if arrived.contains(&uid) {
            merged.insert(uid, held);
        }
    }
    merged
}

/// The status as Go holds it: `state` and `lastState` of a container status are value structs
/// in Go, so an empty one is the same as none, and the API server always sends them (`{}`).
/// k8s-openapi keeps the difference; without this, every patch against an API copy would
/// resend the container statuses and every reconcile would see drift.
pub fn go_zero_values(mut status: PodStatus) -> PodStatus {
    fn clear(state: &mut Option<ContainerState>) {
        if state
            .as_ref()
            .is_some_and(|s| s.running.is_none() && s.terminated.is_none() && s.waiting.is_none())
        {
            *state = None;
        }
    }
    let lists: [&mut Option<Vec<ContainerStatus>>; 3] = [
        &mut status.init_container_statuses,
        &mut status.container_statuses,
        &mut status.ephemeral_container_statuses,
    ];
    for list in lists {
        for c in list.iter_mut().flatten() {
            clear(&mut c.state);
            clear(&mut c.last_state);
        }
    }
    status
}

/// Whether `pod` is at least as new as `old`. resourceVersions are etcd revisions, so
/// numerically comparable within one cluster; when either does not parse, the later arrival
/// wins.
pub fn is_newer_or_same(pod: &Pod, old: &Pod) -> bool {
    match (resource_version(pod), resource_version(old)) {
        (Some(new), Some(old)) => new >= old,
        _ => true,
    }
}

/// Upstream `canBeDeleted`: a pod with a deletion timestamp, not a mirror pod, whose API phase
/// is terminal, and that the kubelet finished (TerminatePod ran, `local.pod_is_finished`).
pub fn can_be_deleted(pod: &Pod, local: &VersionedPodStatus) -> bool {
    if pod.metadata.deletion_timestamp.is_none() || is_mirror_pod(pod) {
        return false;
    }
    let phase = pod.status.as_ref().and_then(|s| s.phase.as_deref());
    if !is_terminal_phase(phase) {
        // The local phase is read from the stored status only for a line that is logged.
        tracing::debug!(
            phase = phase.unwrap_or_default(),
            localPhase = local.status.decode_logged().and_then(|s| s.phase).unwrap_or_default(),
            pod = crate::format::pod_ref(pod),
            podUID = crate::format::pod_uid(pod),
            "Delaying pod deletion as the phase is non-terminal"
        );
        return false;
    }
    local.pod_is_finished
}

/// Whether the pod is a mirror pod (the API server's copy of a static pod): it has the
/// `kubernetes.io/config.mirror` annotation.
pub fn is_mirror_pod(pod: &Pod) -> bool {
    pod.metadata.annotations.as_ref().is_some_and(|a| a.contains_key(MIRROR_POD_ANNOTATION))
}

/// Whether any container of the pod may still run, which holds back a terminal phase (the merge keeps
/// the API phase meanwhile). Upstream `PodCouldHaveRunningContainers` asks the pod workers: true until the
/// pod's termination finished (all containers stopped), after which `TerminatePod` runs. We have
/// no pod workers, so:
/// * a finished pod (`TerminatePod` ran, `podIsFinished`) has none: upstream only gets there
///   once its worker stopped every container;
/// * otherwise a container that is running, or whose state is unknown (none, or empty), could
///   run. A waiting container does not run and so does not hold the phase back: `TerminatePod`
///   leaves regular containers waiting (`PodInitializing`) when the pod never initialized, and
///   counting them would keep such a pod from ever reaching its terminal phase and deletion.
pub fn could_have_running_containers(status: &PodStatus, finished: bool) -> bool {
    if finished {
        return false;
    }
    status.init_container_statuses.iter().flatten().chain(status.container_statuses.iter().flatten()).any(
        |c| {
            c.state
                .as_ref()
                .is_none_or(|s| s.running.is_some() || (s.terminated.is_none() && s.waiting.is_none()))
        },
    )
}

/// The status lists that are atomic: a patch carrying one replaces it whole.
pub const CONTAINER_STATUS_LISTS: [&str; 3] =
    ["containerStatuses", "initContainerStatuses", "ephemeralContainerStatuses"];

/// Whether a status patch replaces a container status list, and so could undo another writer's
/// change made after the merge base was read (conditions merge by type and cannot).
pub fn replaces_container_statuses(patch: &serde_json::Value) -> bool {
    patch
        .get("status")
        .and_then(|s| s.as_object())
        .is_some_and(|status| CONTAINER_STATUS_LISTS.iter().any(|list| status.contains_key(*list)))
}

/// Adds the merge base's resourceVersion to a status patch: the server then applies the patch
/// only to that version of the pod (409 Conflict otherwise).
pub fn with_resource_version(
    mut patch: serde_json::Value,
    resource_version: Option<&str>,
) -> serde_json::Value {
    if let (Some(version), Some(metadata)) = (
        resource_version.filter(|v| !v.is_empty()),
        patch.get_mut("metadata").and_then(|m| m.as_object_mut()),
    ) {
        metadata.insert("resourceVersion".to_owned(), serde_json::Value::String(version.to_owned()));
    }
    patch
}

/// The pod's `resourceVersion` as a number, if it parses as one.
pub fn resource_version(pod: &Pod) -> Option<u64> {
    pod.metadata.resource_version.as_deref().and_then(|v| v.parse().ok())
}

/// The two sides of a readiness-only write's patch, as JSON: the API copy's status and the merged
/// one. Both are the typed statuses, except the container status lists (atomic: a patch resends
/// them whole), which are the server's own items, on the merged side with only `ready` and
/// `started` taken from `merged`. So fields the typed structs lack are resent as the server has
/// them instead of being dropped. A list whose items do not line up with the merged one by name
/// (it cannot happen: the merge keeps the API's items) stays typed on both sides.
pub fn readiness_only_sides(
    base: &ApiPod,
    api: &PodStatus,
    merged: &PodStatus,
) -> Result<(Value, Value), serde_json::Error> {
    let mut api_side = serde_json::to_value(api)?;
    let mut merged_side = serde_json::to_value(merged)?;
    let raw_status = base.status_json();
    let lists: [(&str, Option<&Vec<ContainerStatus>>); 3] = [
        (CONTAINER_STATUS_LISTS[0], merged.container_statuses.as_ref()),
        (CONTAINER_STATUS_LISTS[1], merged.init_container_statuses.as_ref()),
        (CONTAINER_STATUS_LISTS[2], merged.ephemeral_container_statuses.as_ref()),
    ];
    for (list, ours) in lists {
        let Some(raw) = raw_status.and_then(|s| s.get(list)).and_then(Value::as_array) else { continue };
        let Some(ours) = ours else { continue };
        let Some(overlaid) = overlay_readiness_json(raw, ours) else { continue };
        if let (Some(a), Some(m)) = (api_side.as_object_mut(), merged_side.as_object_mut()) {
            a.insert(list.to_owned(), Value::Array(raw.clone()));
            m.insert(list.to_owned(), Value::Array(overlaid));
        }
    }
    Ok((api_side, merged_side))
}

/// The server's container status items with `ready` and `started` of the merged items at the
/// same place, or `None` when the two lists do not pair up by name.
fn overlay_readiness_json(raw: &[Value], merged: &[ContainerStatus]) -> Option<Vec<Value>> {
    if raw.len() != merged.len() {
        return None;
    }
    raw.iter()
        .zip(merged)
        .map(|(item, ours)| {
            let mut item = item.as_object()?.clone();
            if item.get("name").and_then(Value::as_str) != Some(ours.name.as_str()) {
                return None;
            }
            item.insert("ready".to_owned(), Value::Bool(ours.ready));
            match ours.started {
                Some(started) => item.insert("started".to_owned(), Value::Bool(started)),
                None => item.remove("started"),
            };
            Some(Value::Object(item))
        })
        .collect()
}

/// The wait a throttling or failing server asked for: a 429 or 5xx answer's `Retry-After`, which
/// the API server also puts in its `Status` as `details.retryAfterSeconds` (the only place kube's
/// error keeps it). client-go's REST client waits that long before it sends the request again;
/// the syncer waits at least that long before the pod's next write (docs/sync.md, "Queue,
/// budget, retries").
pub fn retry_after(err: &kube::Error) -> Option<std::time::Duration> {
    let kube::Error::Api(status) = err else { return None };
    if status.code != 429 && !(500..=599).contains(&status.code) {
        return None;
    }
    let seconds = status.details.as_ref()?.retry_after_seconds;
    (seconds > 0).then(|| std::time::Duration::from_secs(u64::from(seconds)))
}

/// The longest `Retry-After` a failed write waits for: the API server's own throttling asks for
/// seconds; a proxy's `Retry-After: 3600` must not hold a pod's status for an hour.
pub const RETRY_AFTER_MAX: std::time::Duration = std::time::Duration::from_secs(60);

#[cfg(test)]
#[allow(clippy::unwrap_used)] // a panic is the failure report
mod tests {
    use super::*;
    use crate::status::stored::StoredStatus;
    use k8s_openapi::api::core::v1::{ContainerState, ContainerStateTerminated, ContainerStatus};
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, Time};
    use k8s_openapi::jiff::Timestamp;
    use std::collections::BTreeMap;

    fn pod(deleting: bool, phase: &str, mirror: bool) -> Pod {
        Pod {
            metadata: ObjectMeta {
                deletion_timestamp: deleting.then_some(Time(Timestamp::UNIX_EPOCH)),
                annotations: mirror
                    .then(|| BTreeMap::from([(MIRROR_POD_ANNOTATION.to_owned(), "x".to_owned())])),
                ..Default::default()
            },
            spec: None,
            status: Some(PodStatus { phase: Some(phase.into()), ..Default::default() }),
        }
    }

    #[test]
    fn deletion_rules() {
        let cases = [
            ("no deletion timestamp", pod(false, "Failed", false), true, false),
            ("mirror pod", pod(true, "Failed", true), true, false),
            ("running phase", pod(true, "Running", false), true, false),
            ("not finished", pod(true, "Succeeded", false), false, false),
            ("finished terminal deleting", pod(true, "Succeeded", false), true, true),
            ("failed", pod(true, "Failed", false), true, true),
        ];
        for (name, pod, finished, want) in cases {
            assert_eq!(can_be_deleted(&pod, &local("Running", finished)), want, "case {name}");
        }
    }

    /// The kubelet's own status, as stored, in `phase`.
    fn local(phase: &str, finished: bool) -> VersionedPodStatus {
        VersionedPodStatus {
            version: 1,
            pod_name: "web".into(),
            pod_namespace: "default".into(),
            at: None,
            pod_is_finished: finished,
            status: StoredStatus::new(&PodStatus { phase: Some(phase.into()), ..Default::default() }),
        }
    }

    /// A deletion held back for the API phase logs upstream's line with its keys, the API's
    /// phase and the kubelet's own.
    #[test]
    fn a_deletion_held_back_logs_both_phases() {
        let mut held = pod(true, "Running", false);
        held.metadata.name = Some("web".into());
        held.metadata.namespace = Some("default".into());
        held.metadata.uid = Some("u1".into());
        let (log, _guard) = crate::test_log::Captured::start();
        assert!(!can_be_deleted(&held, &local("Failed", true)));
        assert_eq!(
            log.fields_of("Delaying pod deletion as the phase is non-terminal"),
            [r#"phase="Running" localPhase="Failed" pod="default/web" podUID="u1""#]
        );
    }

    fn versioned(version: u64) -> VersionedPodStatus {
        VersionedPodStatus {
            version,
            pod_name: "web".into(),
            pod_namespace: "default".into(),
            at: None,
            pod_is_finished: false,
            status: StoredStatus::default(),
        }
    }

    #[test]
    fn a_reconcile_list_never_rolls_a_pod_back() {
        let current = HashMap::from([
            (PodUid::from("newer-held"), versioned(5)),
            (PodUid::from("older-held"), versioned(2)),
            (PodUid::from("arrived-after-the-list"), versioned(1)),
            (PodUid::from("forgotten"), versioned(3)),
        ]);
        let listed = HashMap::from([
            (PodUid::from("newer-held"), versioned(4)),
            (PodUid::from("older-held"), versioned(3)),
            (PodUid::from("only-listed"), versioned(1)),
        ]);
        let arrived = HashSet::from([PodUid::from("arrived-after-the-list"), PodUid::from("newer-held")]);
        let merged = merge_listed(current, listed, &arrived);
        let mut got: Vec<(&str, u64)> = merged.iter().map(|(k, v)| (k.as_str(), v.version)).collect();
        got.sort();
        assert_eq!(
            got,
            [("arrived-after-the-list", 1), ("newer-held", 5), ("older-held", 3), ("only-listed", 1)],
            "a pod the status manager forgot is dropped unless its update came after the list"
        );
    }

    #[test]
    fn an_empty_container_state_is_no_state() {
        let running = ContainerState {
            running: Some(k8s_openapi::api::core::v1::ContainerStateRunning::default()),
            ..Default::default()
        };
        let status = |state: Option<ContainerState>, last: Option<ContainerState>| PodStatus {
            container_statuses: Some(vec![ContainerStatus {
                name: "a".into(),
                state,
                last_state: last,
                ..Default::default()
            }]),
            ..Default::default()
        };
        assert_eq!(
            go_zero_values(status(Some(running.clone()), Some(ContainerState::default()))),
            status(Some(running.clone()), None)
        );
        assert_eq!(go_zero_values(status(Some(ContainerState::default()), None)), status(None, None));
        let kept = status(Some(running.clone()), Some(running));
        assert_eq!(go_zero_values(kept.clone()), kept, "a state with content stays");
    }

    #[test]
    fn the_newer_resource_version_wins() {
        let at = |rv: Option<&str>| Pod {
            metadata: ObjectMeta { resource_version: rv.map(Into::into), ..Default::default() },
            ..Default::default()
        };
        assert!(is_newer_or_same(&at(Some("10")), &at(Some("9"))));
        assert!(is_newer_or_same(&at(Some("10")), &at(Some("10"))));
        assert!(!is_newer_or_same(&at(Some("9")), &at(Some("10"))), "numeric, not textual");
        assert!(is_newer_or_same(&at(Some("9")), &at(None)), "an unparsable one is replaced");
        assert!(is_newer_or_same(&at(None), &at(Some("9"))), "and replaces");
    }

    #[test]
    fn running_containers_hold_terminal_phase() {
        use k8s_openapi::api::core::v1::{ContainerStateRunning, ContainerStateWaiting};
        let with = |running: bool, waiting: bool, terminated: bool| ContainerState {
            running: running.then(ContainerStateRunning::default),
            waiting: waiting.then(ContainerStateWaiting::default),
            terminated: terminated.then(ContainerStateTerminated::default),
        };
        let c = |name: &str, state: Option<ContainerState>| ContainerStatus {
            name: name.into(),
            state,
            ..Default::default()
        };
        let regular =
            |list: Vec<ContainerStatus>| PodStatus { container_statuses: Some(list), ..Default::default() };
        let init = |list: Vec<ContainerStatus>| PodStatus {
            init_container_statuses: Some(list),
            ..Default::default()
        };
        let cases = [
            ("no containers", PodStatus::default(), false, false),
            ("all terminated", regular(vec![c("a", Some(with(false, false, true)))]), false, false),
            (
                "one running",
                regular(vec![c("a", Some(with(false, false, true))), c("b", Some(with(true, false, false)))]),
                false,
                true,
            ),
            ("no state", regular(vec![c("a", None)]), false, true),
            ("empty state", regular(vec![c("a", Some(ContainerState::default()))]), false, true),
            ("waiting", regular(vec![c("a", Some(with(false, true, false)))]), false, false),
            (
                "waiting after init was terminated",
                PodStatus {
                    init_container_statuses: Some(vec![c("i", Some(with(false, false, true)))]),
                    container_statuses: Some(vec![c("a", Some(with(false, true, false)))]),
                    ..Default::default()
                },
                false,
                false,
            ),
            ("init running", init(vec![c("i", Some(with(true, false, false)))]), false, true),
            (
                "finished, even with one running",
                regular(vec![c("a", Some(with(true, false, false)))]),
                true,
                false,
            ),
            ("finished, no state", regular(vec![c("a", None)]), true, false),
        ];
        for (name, status, finished, want) in cases {
            assert_eq!(could_have_running_containers(&status, finished), want, "case: {name}");
        }
    }

    #[test]
    fn the_resource_version_goes_into_the_patch_metadata() {
        let patch = serde_json::json!({"metadata": {"uid": "u"}, "status": {"phase": "Running"}});
        assert_eq!(
            with_resource_version(patch.clone(), Some("42")),
            serde_json::json!({"metadata": {"uid": "u", "resourceVersion": "42"}, "status": {"phase": "Running"}})
        );
        assert_eq!(with_resource_version(patch.clone(), None), patch, "no version, no precondition");
        assert_eq!(with_resource_version(patch.clone(), Some("")), patch);
    }

    #[test]
    fn only_a_patch_of_a_container_status_list_needs_the_resource_version() {
        let cases = [
            ("containers", serde_json::json!({"status": {"containerStatuses": []}}), true),
            ("init containers", serde_json::json!({"status": {"initContainerStatuses": []}}), true),
            ("ephemeral containers", serde_json::json!({"status": {"ephemeralContainerStatuses": []}}), true),
            (
                "conditions and containers",
                serde_json::json!({"status": {"conditions": [], "containerStatuses": []}}),
                true,
            ),
            (
                "conditions only",
                serde_json::json!({"status": {"$setElementOrder/conditions": [], "conditions": []}}),
                false,
            ),
            ("no status", serde_json::json!({"metadata": {"uid": "u"}}), false),
            ("a status that is no object", serde_json::json!({"status": null}), false),
        ];
        for (name, patch, want) in cases {
            assert_eq!(replaces_container_statuses(&patch), want, "case: {name}");
        }
    }

    #[test]
    fn a_readiness_only_write_resends_the_servers_container_items() {
        let raw = serde_json::json!({
            "metadata": {"name": "web", "uid": "u"},
            "status": {"phase": "Running", "containerStatuses": [{
                "name": "app", "ready": false, "restartCount": 0, "image": "i", "imageID": "",
                "containerID": "cri://app", "lastState": {}, "started": true,
                "volumeMounts": [{"name": "data", "mountPath": "/data",
                                  "volumeStatus": {"image": {"imageRef": "r@sha256:1"}}}],
            }]},
        });
        let base = ApiPod::from_json(raw.clone()).unwrap();
        let api = go_zero_values(base.pod.status.clone().unwrap());
        let mut merged = api.clone();
        merged.container_statuses.as_mut().unwrap()[0].ready = true;
        let (api_side, merged_side) = readiness_only_sides(&base, &api, &merged).unwrap();
        assert_eq!(api_side["containerStatuses"], raw["status"]["containerStatuses"], "the server's items");
        let mut want = raw["status"]["containerStatuses"].clone();
        want[0]["ready"] = serde_json::json!(true);
        assert_eq!(merged_side["containerStatuses"], want, "only ready changed, volumeStatus kept");
        assert_eq!(merged_side["phase"], "Running");

        merged.container_statuses.as_mut().unwrap()[0].started = None;
        let (_, merged_side) = readiness_only_sides(&base, &api, &merged).unwrap();
        assert!(
            merged_side["containerStatuses"][0].get("started").is_none(),
            "a cleared started is left out"
        );

        let mut renamed = merged.clone();
        renamed.container_statuses.as_mut().unwrap()[0].name = "other".into();
        let (api_side, merged_side) = readiness_only_sides(&base, &api, &renamed).unwrap();
        assert_eq!(api_side["containerStatuses"], serde_json::to_value(&api).unwrap()["containerStatuses"]);
        assert_eq!(merged_side["containerStatuses"][0]["name"], "other", "unpaired lists stay typed");
    }
}
