//! `UpdatePodStatus`'s decisions (upstream `prober_manager.go` `UpdatePodStatus`,
//! `isContainerStarted`), as a pure function over what the prober manager knows: which
//! workers exist for the pod and what the results caches hold for its containers.

use std::collections::{HashMap, HashSet};

use k8s_openapi::api::core::v1::{Container, ContainerStatus, Pod, PodStatus};
use k8s_openapi::jiff::Timestamp;

use super::do_probe::started_before_manager;
use super::{ProbeKind, ProbeResult};
use crate::container::ContainerId;
use crate::status::{POD_READY, is_restartable_init_container};

/// What the prober knows about one pod when its status is being generated.
#[derive(Debug, Clone, Default)]
pub struct ProbeView {
    /// (container name, kind) of every worker of the pod, stopping ones included.
    pub workers: HashSet<(String, ProbeKind)>,
    /// Cached results by (kind, container ID).
    pub results: HashMap<(ProbeKind, ContainerId), ProbeResult>,
    /// When the prober manager started (wall clock).
    pub manager_start: Timestamp,
}

impl ProbeView {
    fn result(&self, kind: ProbeKind, id: &ContainerId) -> Option<ProbeResult> {
        self.results.get(&(kind, id.clone())).copied()
    }

    fn has_worker(&self, name: &str, kind: ProbeKind) -> bool {
        self.workers.contains(&(name.to_owned(), kind))
    }
}

/// The (kind, container ID) pairs whose cached results [`update_pod_status`] reads.
pub fn result_keys(status: &PodStatus) -> Vec<(ProbeKind, ContainerId)> {
    let mut keys = Vec::new();
    for cs in
        status.container_statuses.iter().flatten().chain(status.init_container_statuses.iter().flatten())
    {
        let id = container_id(cs);
        keys.push((ProbeKind::Startup, id.clone()));
        keys.push((ProbeKind::Readiness, id));
    }
    keys
}

/// Sets `started` and `ready` on a status being generated. Returns the names of containers
/// whose readiness worker should probe now (no result yet: upstream's manual trigger).
pub fn update_pod_status(pod: &Pod, status: &mut PodStatus, view: &ProbeView) -> Vec<String> {
    let spec = pod.spec.clone().unwrap_or_default();
    let api_ready = pod
        .status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .and_then(|c| c.iter().find(|c| c.type_ == POD_READY))
        .is_some_and(|c| c.status == "True");
    let api_statuses = pod.status.as_ref().and_then(|s| s.container_statuses.as_deref()).unwrap_or_default();
    let api_init_statuses =
        pod.status.as_ref().and_then(|s| s.init_container_statuses.as_deref()).unwrap_or_default();
    let mut triggers = Vec::new();

    for cs in status.container_statuses.iter_mut().flatten() {
        let started = is_container_started(cs, view);
        cs.started = Some(started);
        if !started {
            continue;
        }
        let container = spec.containers.iter().find(|c| c.name == cs.name);
        cs.ready = readiness(cs, container, view, api_ready, api_statuses, &mut triggers);
    }

    let init_containers = spec.init_containers.as_deref().unwrap_or_default();
    for (i, cs) in status.init_container_statuses.iter_mut().flatten().enumerate() {
        let started = is_container_started(cs, view);
        cs.started = Some(started);
        let Some(container) = init_containers.get(i).filter(|c| c.name == cs.name) else {
            tracing::error!(container = %cs.name, "Pod spec and status mismatch for init container; skipping");
            continue;
        };
        if !is_restartable_init_container(container) {
            if cs.state.as_ref().and_then(|s| s.terminated.as_ref()).is_some_and(|t| t.exit_code == 0) {
                cs.ready = true;
            }
            continue;
        }
        if !started {
            continue;
        }
        cs.ready = readiness(cs, Some(container), view, api_ready, api_init_statuses, &mut triggers);
    }
    triggers
}

/// Upstream `isContainerStarted`.
fn is_container_started(cs: &ContainerStatus, view: &ProbeView) -> bool {
    if !is_running(cs) {
        return false;
    }
    if let Some(result) = view.result(ProbeKind::Startup, &container_id(cs)) {
        return result == ProbeResult::Success;
    }
    // Already started before (kept across an agent restart).
    if cs.started == Some(true) {
        return true;
    }
    !view.has_worker(&cs.name, ProbeKind::Startup)
}

fn readiness(
    cs: &ContainerStatus,
    container: Option<&Container>,
    view: &ProbeView,
    api_ready: bool,
    api_statuses: &[ContainerStatus],
    triggers: &mut Vec<String>,
) -> bool {
    if !is_running(cs) {
        return false;
    }
    let id = container_id(cs);
    let cached = view.result(ProbeKind::Readiness, &id);
    if cached == Some(ProbeResult::Success) {
        return true;
    }
    let mut ready = if view.has_worker(&cs.name, ProbeKind::Readiness) {
        triggers.push(cs.name.clone());
        false
    } else {
        true
    };
    if started_before_manager(cs, view.manager_start) {
        let inheritable = can_inherit_probe_state(cs, api_statuses);
        if !ready && cached.is_none() && inheritable {
            ready = true;
        }
        let has_probe = container.is_some_and(|c| c.readiness_probe.is_some());
        if has_probe && (!api_ready || !inheritable) {
            ready = false;
        }
    }
    ready
}

/// Upstream `canInheritProbeState`: not when the API status names a different container ID
/// for this container (it was replaced while the API server could not be told).
fn can_inherit_probe_state(cs: &ContainerStatus, api_statuses: &[ContainerStatus]) -> bool {
    let runtime_id = cs.container_id.as_deref().unwrap_or_default();
    if runtime_id.is_empty() {
        return true;
    }
    api_statuses.iter().find(|s| s.name == cs.name).is_none_or(|api| {
        let api_id = api.container_id.as_deref().unwrap_or_default();
        api_id.is_empty() || api_id == runtime_id
    })
}

fn is_running(cs: &ContainerStatus) -> bool {
    cs.state.as_ref().is_some_and(|s| s.running.is_some())
}

fn container_id(cs: &ContainerStatus) -> ContainerId {
    ContainerId::parse(cs.container_id.as_deref().unwrap_or_default())
}
