//! The status manager: its actor ([`manager::StatusManager`]) and its pure logic — condition
//! generators, normalisation, kubelet-owned equality, state-transition checks, TerminatePod's
//! rewrite and the API merge. Upstream: `pkg/kubelet/status`.

pub mod api_status;
pub mod by_name;
mod container_changes;
pub mod equality;
pub mod generate;
pub mod manager;
pub mod merge;
pub mod normalize;
pub mod probe_status;
pub mod quantity;
pub mod resize;
pub mod stored;
pub mod terminate;
pub mod transition;
pub mod views;

pub use api_status::{generate_kubelet_conditions, generate_kubelet_conditions_with_resize};
pub use generate::*;

use std::borrow::Cow;

use k8s_openapi::api::core::v1::{Pod, PodSpec};

/// The pod's spec, borrowed; an empty one for a pod without one (the API server always sets
/// it). The status rules only read it, and a copy per status update or pod sync cost a deep
/// clone of every container spec.
pub fn spec_of(pod: &Pod) -> Cow<'_, PodSpec> {
    match &pod.spec {
        Some(spec) => Cow::Borrowed(spec),
        None => Cow::Owned(PodSpec::default()),
    }
}
