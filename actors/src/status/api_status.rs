//! The condition part of the kubelet's `generateAPIPodStatus`: conditions owned by others are
//! carried over from the pod's API status, then Initialized, Ready, ContainersReady and
//! PodScheduled are generated from the container statuses (init and regular together, so
//! sidecars count). Hosts call this after `UpdatePodStatus` and before `SetPodStatus`.

use k8s_openapi::api::core::v1::{Pod, PodCondition, PodStatus};

use super::equality::{POD_SCHEDULED, is_kubelet_owned_condition};
use super::generate::{
    generate_containers_ready_condition, generate_pod_initialized_condition, generate_pod_ready_condition,
};

/// Replaces `status.conditions` with the kubelet's: foreign conditions from `pod.status`
/// first, in their order, then Initialized, Ready, ContainersReady and PodScheduled (True).
pub fn generate_kubelet_conditions(pod: &Pod, status: &mut PodStatus) {
    generate_kubelet_conditions_with_resize(pod, status, &[]);
}

/// [`generate_kubelet_conditions`] for a pod with resize conditions (the status manager's
/// [`crate::status::resize::PodResizeConditions::list`]): they go after the foreign ones and
/// before the generated ones, where upstream's `generateAPIPodStatus` appends them. A terminal
/// pod has none: its host clears them first.
pub fn generate_kubelet_conditions_with_resize(pod: &Pod, status: &mut PodStatus, resize: &[PodCondition]) {
    let spec = crate::status::spec_of(pod);
    let phase = status.phase.clone().unwrap_or_default();
    let all = super::generate::all_container_statuses(status);
    let mut conditions: Vec<PodCondition> = pod
        .status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .into_iter()
        .flatten()
        .filter(|c| !is_kubelet_owned_condition(&c.type_))
        .cloned()
        .collect();
    conditions.extend(resize.iter().cloned());
    conditions.push(generate_pod_initialized_condition(&spec, Some(&all), &phase));
    let ready = generate_pod_ready_condition(&spec, &conditions, Some(&all), &phase);
    conditions.push(ready);
    conditions.push(generate_containers_ready_condition(&spec, Some(&all), &phase));
    conditions.push(PodCondition {
        type_: POD_SCHEDULED.to_owned(),
        status: "True".to_owned(),
        ..Default::default()
    });
    status.conditions = Some(conditions);
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::{Container, ContainerStatus, PodReadinessGate, PodSpec};

    #[test]
    fn foreign_conditions_first_then_kubelet_ones() {
        let pod = Pod {
            spec: Some(PodSpec {
                containers: vec![Container { name: "c".into(), ..Default::default() }],
                readiness_gates: Some(vec![PodReadinessGate { condition_type: "example.com/gate".into() }]),
                ..Default::default()
            }),
            status: Some(PodStatus {
                conditions: Some(vec![
                    PodCondition { type_: "Ready".into(), status: "True".into(), ..Default::default() },
                    PodCondition {
                        type_: "example.com/gate".into(),
                        status: "False".into(),
                        ..Default::default()
                    },
                ]),
                ..Default::default()
            }),
            ..Default::default()
        };
        let mut status = PodStatus {
            phase: Some("Running".into()),
            container_statuses: Some(vec![ContainerStatus {
                name: "c".into(),
                ready: true,
                ..Default::default()
            }]),
            ..Default::default()
        };
        generate_kubelet_conditions(&pod, &mut status);
        let conditions = status.conditions.unwrap_or_default();
        let types: Vec<&str> = conditions.iter().map(|c| c.type_.as_str()).collect();
        assert_eq!(types, ["example.com/gate", "Initialized", "Ready", "ContainersReady", "PodScheduled"]);
        assert_eq!(conditions[2].status, "False", "the gate holds Ready back");
        assert_eq!(conditions[2].reason.as_deref(), Some("ReadinessGatesNotReady"));
        assert_eq!(conditions[3].status, "True");
    }
}
