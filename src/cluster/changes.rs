//! What a pod update from the watch changed, compared with the copy seen before it: whether it
//! changed anything but the fields the agent writes (the echo of the agent's own status write
//! changes nothing else), and which `ready` / `started` the node's runtime reset.
//!
//! Upstream counterpart: the kubelet's pod config source (`pkg/kubelet/config/config.go`,
//! `checkAndUpdatePod`) turns an update that changes only a pod's status into a RECONCILE,
//! which syncs the pod only when its readiness needs reconciling (readiness gates,
//! `NeedToReconcilePodReadiness`); so its own status writes never sync a pod, and never trigger
//! the immediate readiness probe `UpdatePodStatus` asks for. In cluster mode the status is the
//! runtime's too: its container-state writes are what a sync is for, the echo of the agent's own
//! write is not.

use k8s_openapi::api::core::v1::{ContainerStatus, Pod};
use probelet_actors::status::{CONTAINERS_READY, POD_INITIALIZED, POD_READY};

/// The conditions the agent writes in cluster mode.
pub const OWNED_CONDITIONS: [&str; 3] = [POD_READY, CONTAINERS_READY, POD_INITIALIZED];

/// The pod without what the agent writes (`ready`, `started`, its conditions) and without what
/// every write changes (`resourceVersion`, `managedFields`).
fn without_owned_fields(pod: &Pod) -> Pod {
    let mut pod = pod.clone();
    pod.metadata.resource_version = None;
    pod.metadata.managed_fields = None;
    if let Some(status) = pod.status.as_mut() {
        for cs in status
            .container_statuses
            .iter_mut()
            .flatten()
            .chain(status.init_container_statuses.iter_mut().flatten())
        {
            cs.ready = false;
            cs.started = None;
        }
        if let Some(conditions) = status.conditions.as_mut() {
            conditions.retain(|c| !OWNED_CONDITIONS.contains(&c.type_.as_str()));
        }
    }
    pod
}

/// Whether `current` differs from `previous` only in the fields the agent writes: the echo of
/// its own status write (or a runtime that touched only those), which needs no sync.
pub fn only_owned_fields_changed(previous: &Pod, current: &Pod) -> bool {
    previous.metadata.uid == current.metadata.uid
        && without_owned_fields(previous) == without_owned_fields(current)
}

/// A field of a container status the agent owns.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OwnedField {
    Ready,
    Started,
}

impl OwnedField {
    pub fn as_str(self) -> &'static str {
        match self {
            OwnedField::Ready => "ready",
            OwnedField::Started => "started",
        }
    }
}

/// Container statuses (by container ID) whose `ready` or `started` was true in `previous` and is
/// not in `current`, for the same container: a reset by whoever wrote `current`. The agent's
/// own writes turn them false too (a failed probe), so the caller checks them against what the
/// agent's probes say.
pub fn owned_fields_turned_off(previous: &Pod, current: &Pod) -> Vec<(String, OwnedField)> {
    let statuses = |pod: &Pod| -> Vec<ContainerStatus> {
        let Some(status) = pod.status.as_ref() else { return Vec::new() };
        status
            .container_statuses
            .iter()
            .flatten()
            .chain(status.init_container_statuses.iter().flatten())
            .cloned()
            .collect()
    };
    if previous.metadata.uid != current.metadata.uid {
        return Vec::new();
    }
    let before = statuses(previous);
    let mut turned_off = Vec::new();
    for now in statuses(current) {
        let Some(id) = now.container_id.clone().filter(|id| !id.is_empty()) else { continue };
        let Some(then) = before.iter().find(|c| c.name == now.name && c.container_id.as_deref() == Some(&id))
        else {
            continue;
        };
        if then.ready && !now.ready {
            turned_off.push((id.clone(), OwnedField::Ready));
        }
        if then.started == Some(true) && now.started != Some(true) {
            turned_off.push((id, OwnedField::Started));
        }
    }
    turned_off
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::{PodCondition, PodStatus};
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

    fn pod(ready: bool, started: Option<bool>, id: &str) -> Pod {
        Pod {
            metadata: ObjectMeta {
                uid: Some("u1".into()),
                resource_version: Some("1".into()),
                ..Default::default()
            },
            status: Some(PodStatus {
                phase: Some("Running".into()),
                conditions: Some(vec![
                    PodCondition { type_: POD_READY.into(), status: "False".into(), ..Default::default() },
                    PodCondition {
                        type_: "example.com/gate".into(),
                        status: "False".into(),
                        ..Default::default()
                    },
                ]),
                container_statuses: Some(vec![ContainerStatus {
                    name: "app".into(),
                    container_id: Some(id.into()),
                    ready,
                    started,
                    ..Default::default()
                }]),
                ..Default::default()
            }),
            ..Default::default()
        }
    }

    #[test]
    fn the_echo_of_the_agents_write_changes_only_owned_fields() {
        let before = pod(false, Some(false), "containerd://a");
        let mut echo = pod(true, Some(true), "containerd://a");
        echo.metadata.resource_version = Some("2".into());
        echo.status.as_mut().unwrap().conditions.as_mut().unwrap()[0].status = "True".into();
        assert!(only_owned_fields_changed(&before, &echo));
        assert!(only_owned_fields_changed(&before, &before));
    }

    #[test]
    fn runtime_and_foreign_changes_are_not_echoes() {
        let before = pod(false, Some(false), "containerd://a");
        let restarted = pod(false, Some(false), "containerd://b");
        assert!(!only_owned_fields_changed(&before, &restarted), "a new container ID");
        let mut gate = before.clone();
        gate.status.as_mut().unwrap().conditions.as_mut().unwrap()[1].status = "True".into();
        assert!(!only_owned_fields_changed(&before, &gate), "a readiness gate's condition");
        let mut phase = before.clone();
        phase.status.as_mut().unwrap().phase = Some("Succeeded".into());
        assert!(!only_owned_fields_changed(&before, &phase));
        let mut deleting = before.clone();
        deleting.metadata.deletion_timestamp = Some(k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(
            k8s_openapi::jiff::Timestamp::UNIX_EPOCH,
        ));
        assert!(!only_owned_fields_changed(&before, &deleting));
        let mut other = before.clone();
        other.metadata.uid = Some("u2".into());
        assert!(!only_owned_fields_changed(&before, &other), "another pod under the name");
    }

    #[test]
    fn resets_of_the_same_container_are_found() {
        let ready = pod(true, Some(true), "containerd://a");
        assert_eq!(
            owned_fields_turned_off(&ready, &pod(false, None, "containerd://a")),
            [
                ("containerd://a".to_owned(), OwnedField::Ready),
                ("containerd://a".to_owned(), OwnedField::Started)
            ]
        );
        assert_eq!(
            owned_fields_turned_off(&ready, &pod(false, Some(true), "containerd://a")),
            [("containerd://a".to_owned(), OwnedField::Ready)]
        );
        assert!(owned_fields_turned_off(&ready, &ready).is_empty());
        assert!(
            owned_fields_turned_off(&ready, &pod(false, None, "containerd://b")).is_empty(),
            "a restarted container starts over"
        );
        assert!(owned_fields_turned_off(&pod(false, Some(false), "containerd://a"), &ready).is_empty());
    }
}
