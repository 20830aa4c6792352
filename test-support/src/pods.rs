//! Pod and status builders for the pipeline tests.

use std::sync::Arc;

use k8s_openapi::api::core::v1::{
    Container, ContainerState, ContainerStateRunning, ContainerStateTerminated, ContainerStateWaiting,
    ContainerStatus, ExecAction, Pod, PodReadinessGate, PodSpec, Probe,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, Time};
use k8s_openapi::jiff::Timestamp;
use probelet::prober::ProbeKind;

/// A chainable pod under construction.
#[derive(Clone)]
pub struct PodBuilder {
    pod: Pod,
}

/// A pod named `name` (UID `uid-<name>`, namespace `default`) with no containers yet.
pub fn test_pod(name: &str) -> PodBuilder {
    PodBuilder {
        pod: Pod {
            metadata: ObjectMeta {
                name: Some(name.into()),
                namespace: Some("default".into()),
                uid: Some(format!("uid-{name}")),
                ..Default::default()
            },
            spec: Some(PodSpec::default()),
            status: None,
        },
    }
}

/// A probe with an exec handler (the scripted prober never runs it).
pub fn probe(period: i32, success: i32, failure: i32) -> Probe {
    Probe {
        exec: Some(ExecAction { command: Some(vec!["true".into()]) }),
        period_seconds: Some(period),
        success_threshold: Some(success),
        failure_threshold: Some(failure),
        timeout_seconds: Some(1),
        ..Default::default()
    }
}

impl PodBuilder {
    fn spec(&mut self) -> &mut PodSpec {
        self.pod.spec.get_or_insert_with(PodSpec::default)
    }

    pub fn uid(&self) -> String {
        self.pod.metadata.uid.clone().unwrap_or_default()
    }

    pub fn container(mut self, name: &str) -> Self {
        self.spec().containers.push(Container { name: name.into(), ..Default::default() });
        self
    }

    pub fn sidecar(mut self, name: &str) -> Self {
        self.spec().init_containers.get_or_insert_with(Vec::new).push(Container {
            name: name.into(),
            restart_policy: Some("Always".into()),
            ..Default::default()
        });
        self
    }

    pub fn init_container(mut self, name: &str) -> Self {
        self.spec()
            .init_containers
            .get_or_insert_with(Vec::new)
            .push(Container { name: name.into(), ..Default::default() });
        self
    }

    /// Sets regular container `name`'s own `restartPolicy` (`ContainerRestartRules`).
    pub fn container_restart_policy(mut self, name: &str, policy: &str) -> Self {
        let container = self.spec().containers.iter_mut().find(|c| c.name == name).expect("container exists");
        container.restart_policy = Some(policy.into());
        self
    }

    /// Gives container `name` (regular or init) a probe of `kind`.
    pub fn with_probe(mut self, name: &str, kind: ProbeKind, probe: Probe) -> Self {
        let spec = self.spec();
        let container = spec
            .containers
            .iter_mut()
            .chain(spec.init_containers.iter_mut().flatten())
            .find(|c| c.name == name)
            .expect("container exists");
        match kind {
            ProbeKind::Liveness => container.liveness_probe = Some(probe),
            ProbeKind::Readiness => container.readiness_probe = Some(probe),
            ProbeKind::Startup => container.startup_probe = Some(probe),
        }
        self
    }

    /// Sets the pod annotation `key` to `value`.
    pub fn annotation(mut self, key: &str, value: &str) -> Self {
        self.pod.metadata.annotations.get_or_insert_with(Default::default).insert(key.into(), value.into());
        self
    }

    pub fn readiness_gate(mut self, condition_type: &str) -> Self {
        self.spec()
            .readiness_gates
            .get_or_insert_with(Vec::new)
            .push(PodReadinessGate { condition_type: condition_type.into() });
        self
    }

    pub fn restart_policy(mut self, policy: &str) -> Self {
        self.spec().restart_policy = Some(policy.into());
        self
    }

    pub fn deleting(mut self) -> Self {
        self.pod.metadata.deletion_timestamp = Some(Time(Timestamp::UNIX_EPOCH));
        self
    }

    pub fn with_status(mut self, status: k8s_openapi::api::core::v1::PodStatus) -> Self {
        self.pod.status = Some(status);
        self
    }

    pub fn build(self) -> Arc<Pod> {
        Arc::new(self.pod)
    }
}

/// A running container status.
pub fn running(name: &str, id: &str, started_at: Timestamp) -> ContainerStatus {
    ContainerStatus {
        name: name.into(),
        container_id: Some(id.into()),
        state: Some(ContainerState {
            running: Some(ContainerStateRunning { started_at: Some(Time(started_at)) }),
            ..Default::default()
        }),
        ..Default::default()
    }
}

/// A waiting container status (no ID).
pub fn waiting(name: &str) -> ContainerStatus {
    ContainerStatus {
        name: name.into(),
        state: Some(ContainerState {
            waiting: Some(ContainerStateWaiting {
                reason: Some("ContainerCreating".into()),
                ..Default::default()
            }),
            ..Default::default()
        }),
        ..Default::default()
    }
}

/// A terminated container status.
pub fn terminated(name: &str, id: &str, exit_code: i32) -> ContainerStatus {
    ContainerStatus {
        name: name.into(),
        container_id: Some(id.into()),
        state: Some(ContainerState {
            terminated: Some(ContainerStateTerminated { exit_code, ..Default::default() }),
            ..Default::default()
        }),
        ..Default::default()
    }
}
