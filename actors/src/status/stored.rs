//! A pod status as the engine keeps it between updates: its JSON, shared.
//!
//! The status manager keeps every pod's latest status, as the kubelet's does, but not in
//! k8s-openapi's types: those hold every optional field inline (a `ContainerStatus` is 752
//! bytes before its strings, a `PodCondition` 160), so a one-container pod's status took about
//! 2.1 KB, half of what an idle pod cost the engine. Its JSON is about 1 KB. The status is
//! decoded where it is read whole, which happens when it changes, when the syncer writes it
//! and when a host asks for it; probe workers, which read it on every probe, read the
//! [`super::probe_status::PodProbeStatus`] published beside it instead (docs/memory.md, "The
//! status at rest").
//!
//! Cloning a `StoredStatus` shares the text: the status manager, the pod's view and the
//! syncer hold one copy between them.

use std::fmt;
use std::sync::Arc;

use k8s_openapi::api::core::v1::PodStatus;

/// A stored status that does not decode. Only a status with a time its JSON cannot carry back
/// does that (a year before 0, written with a minus sign, which RFC 3339 and the API server
/// refuse),
/// and nothing the kubelet or a runtime reports has one; the readers treat it as no status
/// rather than an empty one, which they would write back.
#[derive(Debug, thiserror::Error)]
#[error("the stored pod status does not decode: {0}")]
pub struct UndecodableStatus(#[from] serde_json::Error);

/// A pod status, kept as its JSON. Two are equal when their JSON is.
#[derive(Clone, PartialEq, Eq)]
pub struct StoredStatus(Arc<str>);

impl StoredStatus {
    /// Keeps `status`. Stored statuses are normalised first (times to the second, as the API
    /// server keeps them), so decoding gives back what was stored.
    pub fn new(status: &PodStatus) -> Self {
        match serde_json::to_string(status) {
            Ok(json) => StoredStatus(json.into()),
            // Cannot happen with k8s-openapi's types (no map with keys that are not strings);
            // said loudly rather than stored wrong.
            Err(err) => {
                tracing::error!(error = %err, "Pod status could not be encoded; storing an empty one");
                StoredStatus(Arc::from("{}"))
            }
        }
    }

    /// The status, decoded.
    pub fn decode(&self) -> Result<PodStatus, UndecodableStatus> {
        Ok(serde_json::from_str(&self.0)?)
    }

    /// The status, decoded, or `None` (logged as an error) if it does not decode: for readers
    /// that would otherwise build on an empty status.
    pub fn decode_logged(&self) -> Option<PodStatus> {
        self.decode().map_err(|err| tracing::error!(error = %err, "Stored pod status not readable")).ok()
    }

    /// Whether `other` is this copy (a clone of it), not only an equal one.
    pub fn same_copy(&self, other: &StoredStatus) -> bool {
        Arc::ptr_eq(&self.0, &other.0)
    }

    /// The status as JSON, as the API server would show it.
    pub fn json(&self) -> &str {
        &self.0
    }
}

impl From<&PodStatus> for StoredStatus {
    fn from(status: &PodStatus) -> Self {
        StoredStatus::new(status)
    }
}

impl From<PodStatus> for StoredStatus {
    fn from(status: PodStatus) -> Self {
        StoredStatus::new(&status)
    }
}

impl Default for StoredStatus {
    /// An empty status (`{}`).
    fn default() -> Self {
        StoredStatus(Arc::from("{}"))
    }
}

impl fmt::Debug for StoredStatus {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_tuple("StoredStatus").field(&&*self.0).finish()
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)] // a panic is the failure report
mod tests {
    use super::*;
    use crate::status::normalize::normalize_status;
    use k8s_openapi::api::core::v1::{
        ContainerState, ContainerStateRunning, ContainerStateTerminated, ContainerStatus, Pod, PodCondition,
        PodIP,
    };
    use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
    use k8s_openapi::jiff::Timestamp;

    fn at(seconds: i64, nanos: i32) -> Option<Time> {
        Some(Time(Timestamp::new(1_700_000_000 + seconds, nanos).unwrap()))
    }

    /// A status with the fields the kubelet writes, times with fractions of a second.
    fn full() -> PodStatus {
        let container = ContainerStatus {
            name: "app".into(),
            container_id: Some("containerd://0123abcd".into()),
            image: "registry.example/app:1".into(),
            image_id: "sha256:beef".into(),
            ready: true,
            started: Some(true),
            restart_count: 2,
            allocated_resources: Some([("cpu".to_owned(), Quantity("250m".into()))].into()),
            state: Some(ContainerState {
                running: Some(ContainerStateRunning { started_at: at(5, 250_000_000) }),
                ..Default::default()
            }),
            last_state: Some(ContainerState {
                terminated: Some(ContainerStateTerminated {
                    exit_code: 137,
                    reason: Some("Error".into()),
                    message: Some("killed".into()),
                    started_at: at(1, 1),
                    finished_at: at(4, 999_999_999),
                    ..Default::default()
                }),
                ..Default::default()
            }),
            ..Default::default()
        };
        PodStatus {
            phase: Some("Running".into()),
            pod_ip: Some("10.0.0.7".into()),
            pod_ips: Some(vec![PodIP { ip: "10.0.0.7".into() }]),
            start_time: at(0, 500),
            observed_generation: Some(3),
            conditions: Some(vec![PodCondition {
                type_: "Ready".into(),
                status: "True".into(),
                last_transition_time: at(6, 7),
                observed_generation: Some(3),
                ..Default::default()
            }]),
            container_statuses: Some(vec![container.clone()]),
            init_container_statuses: Some(vec![ContainerStatus { name: "init".into(), ..container }]),
            ..Default::default()
        }
    }

    #[test]
    fn a_normalised_status_decodes_to_what_was_stored() {
        let mut status = full();
        normalize_status(&Pod::default(), &mut status);
        assert_eq!(StoredStatus::new(&status).decode().unwrap(), status);
        // Empty lists and strings stay what they were, not absent.
        let empty =
            PodStatus { conditions: Some(vec![]), message: Some(String::new()), ..Default::default() };
        assert_eq!(StoredStatus::new(&empty).decode().unwrap(), empty);
        assert_eq!(StoredStatus::default().decode().unwrap(), PodStatus::default());
    }

    #[test]
    fn a_time_before_year_zero_does_not_decode_and_says_so() {
        let status = PodStatus {
            start_time: Some(Time(Timestamp::from_second(-62_200_000_000).unwrap())),
            ..Default::default()
        };
        let stored = StoredStatus::new(&status);
        assert!(stored.json().contains("\"startTime\":\"-"), "{}", stored.json());
        assert!(stored.decode().is_err());
        assert_eq!(stored.decode_logged(), None);
    }

    #[test]
    fn clones_share_the_text_and_equal_statuses_are_equal() {
        let stored = StoredStatus::new(&full());
        let clone = stored.clone();
        assert!(stored.same_copy(&clone));
        assert_eq!(StoredStatus::new(&full()), stored);
        assert!(!StoredStatus::new(&full()).same_copy(&stored));
        assert_ne!(StoredStatus::new(&PodStatus::default()), stored);
    }

    #[test]
    fn it_is_smaller_than_the_status_it_keeps() {
        let mut status = full();
        normalize_status(&Pod::default(), &mut status);
        let json = StoredStatus::new(&status).json().len();
        let inline = size_of::<PodStatus>() + 2 * size_of::<ContainerStatus>() + size_of::<PodCondition>();
        assert!(json < inline, "{json} bytes of JSON, {inline} bytes inline before any string");
    }
}
