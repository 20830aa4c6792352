//! Which containers of a pod started or stopped, as `ContainerLifecycleProber` wants to be told
//! (upstream: the kubelet's runtime manager calls `StartContainerProbes` after starting a
//! container and `StopContainerProbes` after killing one). Hosts that learn container states
//! from a status rather than from their own runtime calls derive the calls from each status
//! they generate: [`container_changes`] does that, a pure function of the pod and the status.

use std::sync::Arc;

use k8s_openapi::api::core::v1::{Container, ContainerStatus, Pod, PodStatus};
use k8s_openapi::jiff::Timestamp;

use crate::container::ContainerId;
use crate::status::is_restartable_init_container;

/// What happened to one probed container.
#[derive(Debug, Clone, PartialEq)]
pub enum ContainerChange {
    /// The container runs this instance: start (or keep) its probes.
    Started {
        /// The container's spec.
        container: Arc<Container>,
        /// The running instance.
        container_id: ContainerId,
        /// When it started, if the status says.
        started_at: Option<Timestamp>,
    },
    /// The container has a status and does not run (it exited, or waits to be restarted): stop
    /// its probes.
    Stopped {
        /// The container's name.
        container: String,
    },
}

/// The changes for every regular container and sidecar of the pod that has a probe, in spec
/// order (sidecars after regular containers, as `AddPod` visits them). A container the status
/// does not list yet gets none.
pub fn container_changes(pod: &Pod, status: &PodStatus) -> Vec<ContainerChange> {
    let Some(spec) = pod.spec.as_ref() else { return Vec::new() };
    let sidecars = spec.init_containers.iter().flatten().filter(|c| is_restartable_init_container(c));
    let regular = status.container_statuses.as_deref().unwrap_or_default();
    let init = status.init_container_statuses.as_deref().unwrap_or_default();
    let probed = |c: &&Container| {
        c.startup_probe.is_some() || c.readiness_probe.is_some() || c.liveness_probe.is_some()
    };
    let mut changes = Vec::new();
    let containers = spec.containers.iter().map(|c| (c, regular)).chain(sidecars.map(|c| (c, init)));
    for (container, statuses) in containers.filter(|(c, _)| probed(c)) {
        let Some(cs) = statuses.iter().find(|s| s.name == container.name) else { continue };
        changes.push(change_of(container, cs));
    }
    changes
}

fn change_of(container: &Container, cs: &ContainerStatus) -> ContainerChange {
    let running = cs.state.as_ref().and_then(|s| s.running.as_ref());
    let id = cs.container_id.as_deref().unwrap_or_default();
    match running {
        Some(running) if !id.is_empty() => ContainerChange::Started {
            container: Arc::new(container.clone()),
            container_id: ContainerId::parse(id),
            started_at: running.started_at.as_ref().map(|t| t.0),
        },
        _ => ContainerChange::Stopped { container: container.name.clone() },
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::{
        ContainerState, ContainerStateRunning, ContainerStateTerminated, ContainerStateWaiting, PodSpec,
        Probe,
    };
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;

    fn container(name: &str, probe: bool) -> Container {
        Container { name: name.into(), readiness_probe: probe.then(Probe::default), ..Default::default() }
    }

    fn status(name: &str, id: &str, state: ContainerState) -> ContainerStatus {
        ContainerStatus {
            name: name.into(),
            container_id: Some(id.into()),
            state: Some(state),
            ..Default::default()
        }
    }

    fn running(at: i64) -> ContainerState {
        let at = Timestamp::from_second(at).unwrap();
        ContainerState {
            running: Some(ContainerStateRunning { started_at: Some(Time(at)) }),
            ..Default::default()
        }
    }

    #[test]
    fn running_probed_containers_started_others_stopped_unprobed_and_unlisted_skipped() {
        let mut sidecar = container("side", true);
        sidecar.restart_policy = Some("Always".into());
        let pod = Pod {
            spec: Some(PodSpec {
                containers: vec![
                    container("a", true),
                    container("b", true),
                    container("plain", false),
                    container("later", true),
                ],
                init_containers: Some(vec![container("init", true), sidecar.clone()]),
                ..Default::default()
            }),
            ..Default::default()
        };
        let waiting =
            ContainerState { waiting: Some(ContainerStateWaiting::default()), ..Default::default() };
        let exited =
            ContainerState { terminated: Some(ContainerStateTerminated::default()), ..Default::default() };
        let st = PodStatus {
            container_statuses: Some(vec![
                status("a", "x://a", running(100)),
                status("b", "x://b", exited),
                status("plain", "x://p", running(100)),
            ]),
            init_container_statuses: Some(vec![
                status("init", "x://i", running(100)),
                status("side", "", waiting),
            ]),
            ..Default::default()
        };
        assert_eq!(
            container_changes(&pod, &st),
            vec![
                ContainerChange::Started {
                    container: Arc::new(container("a", true)),
                    container_id: ContainerId::parse("x://a"),
                    started_at: Some(Timestamp::from_second(100).unwrap()),
                },
                ContainerChange::Stopped { container: "b".into() },
                ContainerChange::Stopped { container: "side".into() },
            ]
        );
    }
}
