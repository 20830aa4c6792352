//! The pod the engine probes for a gated pod: the same identity (name, namespace, UID), one
//! container per gate probe with that probe as its readiness probe, and a status in which those
//! containers run exactly while every container of the real pod runs. The engine's probe
//! workers, results cache and status manager then treat gate probes as they treat any
//! readiness probe: period, thresholds, initial delay (counted from when the last of the pod's
//! containers started), timeouts, events and metrics, all unchanged.

use k8s_openapi::api::core::v1::{
    Container, ContainerPort, ContainerState, ContainerStateRunning, ContainerStateWaiting, ContainerStatus,
    Pod, PodSpec, PodStatus,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

use probelet_actors::fnv::fnv1a64;
use probelet_actors::prober::timing::PROBE_TIMING_ANNOTATION;

use super::annotation::GateProbe;
use super::condition::REASON_CONTAINERS_NOT_RUNNING;

/// The runtime part of a gate container's ID (`probelet-gate://…`).
pub const GATE_RUNTIME: &str = "probelet-gate";

/// The names of the pod's containers that do not run (all of them when it has no status).
pub fn containers_not_running(pod: &Pod) -> Vec<String> {
    let statuses = pod.status.as_ref().and_then(|s| s.container_statuses.as_deref()).unwrap_or_default();
    pod.spec
        .iter()
        .flat_map(|s| &s.containers)
        .filter(|c| {
            !statuses
                .iter()
                .any(|cs| cs.name == c.name && cs.state.as_ref().is_some_and(|s| s.running.is_some()))
        })
        .map(|c| c.name.clone())
        .collect()
}

/// The derived pod: the real pod's identity, one container per gate probe. Each container
/// carries every port the pod's containers declare, so a named port resolves as it would in
/// the pod.
pub fn derived_pod(pod: &Pod, probes: &[GateProbe]) -> Pod {
    let spec = pod.spec.clone().unwrap_or_default();
    let ports: Vec<ContainerPort> =
        spec.containers.iter().flat_map(|c| c.ports.iter().flatten()).cloned().collect();
    Pod {
        metadata: ObjectMeta {
            name: pod.metadata.name.clone(),
            namespace: pod.metadata.namespace.clone(),
            uid: pod.metadata.uid.clone(),
            generation: pod.metadata.generation,
            deletion_timestamp: pod.metadata.deletion_timestamp.clone(),
            annotations: timing_annotation(probes),
            ..Default::default()
        },
        spec: Some(PodSpec {
            containers: probes
                .iter()
                .map(|p| Container {
                    name: p.name.clone(),
                    ports: (!ports.is_empty()).then(|| ports.clone()),
                    readiness_probe: Some(p.probe.clone()),
                    ..Default::default()
                })
                .collect(),
            node_name: spec.node_name.clone(),
            restart_policy: spec.restart_policy.clone(),
            ..Default::default()
        }),
        // No status: the engine then never inherits readiness from it.
        status: None,
    }
}

/// The gate probes' timings as the engine reads them, the `probelet.dev/probe-timing`
/// annotation of the derived pod (each gate probe is its container's readiness probe); none when
/// no gate probe has a timing.
fn timing_annotation(probes: &[GateProbe]) -> Option<std::collections::BTreeMap<String, String>> {
    let timings: serde_json::Map<String, serde_json::Value> = probes
        .iter()
        .filter_map(|p| Some((p.name.clone(), serde_json::json!({ "readiness": p.timing? }))))
        .collect();
    if timings.is_empty() {
        return None;
    }
    let value = serde_json::Value::Object(timings).to_string();
    Some([(PROBE_TIMING_ANNOTATION.to_owned(), value)].into())
}

/// The derived pod's status: its containers run (since the last of the real containers
/// started) when every real container runs, and wait otherwise. A gate container's ID changes
/// whenever a real container's does, so a restarted container starts its gate probes afresh,
/// as a restarted container's own probes do.
pub fn derived_status(pod: &Pod, probes: &[GateProbe]) -> PodStatus {
    let real = pod.status.clone().unwrap_or_default();
    let statuses = real.container_statuses.as_deref().unwrap_or_default();
    let running = containers_not_running(pod).is_empty();
    let started_at = statuses
        .iter()
        .filter_map(|cs| cs.state.as_ref()?.running.as_ref()?.started_at.clone())
        .max_by_key(|t| t.0);
    let mut ids: Vec<&str> = statuses.iter().filter_map(|cs| cs.container_id.as_deref()).collect();
    ids.sort_unstable();
    let generation = fnv1a64(ids.join(",").as_bytes());
    let uid = pod.metadata.uid.as_deref().unwrap_or_default();
    let state = if running {
        ContainerState { running: Some(ContainerStateRunning { started_at }), ..Default::default() }
    } else {
        ContainerState {
            waiting: Some(ContainerStateWaiting {
                reason: Some(REASON_CONTAINERS_NOT_RUNNING.to_owned()),
                message: None,
            }),
            ..Default::default()
        }
    };
    PodStatus {
        phase: real.phase.clone(),
        pod_ip: real.pod_ip.clone(),
        pod_ips: real.pod_ips.clone(),
        host_ip: real.host_ip.clone(),
        start_time: real.start_time.clone(),
        container_statuses: Some(
            probes
                .iter()
                .map(|p| ContainerStatus {
                    name: p.name.clone(),
                    container_id: Some(gate_container_id(uid, &p.name, generation ^ probe_hash(p))),
                    state: Some(state.clone()),
                    ..Default::default()
                })
                .collect(),
        ),
        ..Default::default()
    }
}

/// A hash of a gate probe's spec, timing and container (an exec probe moved to another
/// container is another probe): a changed probe is a new gate container, so that no result of
/// the old probe counts for it (an errored new probe would otherwise keep the old one's
/// Success for good).
fn probe_hash(probe: &GateProbe) -> u64 {
    let text = serde_json::to_string(&(&probe.probe, &probe.timing, &probe.container)).unwrap_or_default();
    fnv1a64(text.as_bytes())
}

/// A gate container's ID: unique per pod, probe (its name, spec and timing) and set of real
/// container IDs.
pub fn gate_container_id(uid: &str, name: &str, generation: u64) -> String {
    format!("{GATE_RUNTIME}://{uid}/{name}/{generation:016x}")
}

/// The pod to teach the exec runner with: each exec gate probe's container ID, under the name
/// of the real container it runs in (`container`, or the pod's first).
pub fn exec_targets(pod: &Pod, probes: &[GateProbe], status: &PodStatus) -> Pod {
    let first =
        pod.spec.as_ref().and_then(|s| s.containers.first()).map(|c| c.name.clone()).unwrap_or_default();
    let statuses = probes
        .iter()
        .filter(|p| p.probe.exec.is_some())
        .filter_map(|p| {
            let id =
                status.container_statuses.iter().flatten().find(|cs| cs.name == p.name)?.container_id.clone();
            Some(ContainerStatus {
                name: p.container.clone().unwrap_or_else(|| first.clone()),
                container_id: id,
                ..Default::default()
            })
        })
        .collect();
    Pod {
        metadata: pod.metadata.clone(),
        spec: None,
        status: Some(PodStatus { container_statuses: Some(statuses), ..Default::default() }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::{HTTPGetAction, Probe};
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
    use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
    use k8s_openapi::jiff::Timestamp;

    fn running(name: &str, id: &str, since: &str) -> ContainerStatus {
        ContainerStatus {
            name: name.into(),
            container_id: Some(id.into()),
            state: Some(ContainerState {
                running: Some(ContainerStateRunning {
                    started_at: Some(Time(since.parse::<Timestamp>().unwrap())),
                }),
                ..Default::default()
            }),
            ..Default::default()
        }
    }

    fn pod(statuses: Vec<ContainerStatus>) -> Pod {
        let container = |name: &str, port: i32| Container {
            name: name.into(),
            ports: Some(vec![ContainerPort {
                name: Some(format!("{name}-port")),
                container_port: port,
                ..Default::default()
            }]),
            ..Default::default()
        };
        Pod {
            metadata: ObjectMeta {
                name: Some("web".into()),
                namespace: Some("ns".into()),
                uid: Some("u1".into()),
                ..Default::default()
            },
            spec: Some(PodSpec {
                containers: vec![container("app", 8080), container("proxy", 9901)],
                ..Default::default()
            }),
            status: Some(PodStatus {
                phase: Some("Running".into()),
                pod_ip: Some("10.0.0.7".into()),
                container_statuses: Some(statuses),
                ..Default::default()
            }),
        }
    }

    fn probes() -> Vec<GateProbe> {
        let http = Probe {
            http_get: Some(HTTPGetAction {
                port: IntOrString::String("app-port".into()),
                ..Default::default()
            }),
            ..Default::default()
        };
        vec![GateProbe { name: "backend".into(), container: None, probe: http, timing: None }]
    }

    #[test]
    fn the_derived_pod_has_one_container_per_probe_with_the_pods_ports() {
        let derived = derived_pod(&pod(vec![]), &probes());
        assert_eq!(derived.metadata.uid.as_deref(), Some("u1"));
        let spec = derived.spec.unwrap();
        assert_eq!(spec.containers.len(), 1);
        assert_eq!(spec.containers[0].name, "backend");
        assert!(spec.containers[0].readiness_probe.is_some());
        let ports: Vec<_> = spec.containers[0].ports.iter().flatten().map(|p| p.container_port).collect();
        assert_eq!(ports, [8080, 9901]);
        assert!(derived.status.is_none());
    }

    #[test]
    fn gate_probe_timings_reach_the_engine_through_the_derived_pod() {
        use probelet_actors::prober::ProbeKind;
        use probelet_actors::prober::timing::{ProbeTiming, probe_timings};
        let plain = derived_pod(&pod(vec![]), &probes());
        assert!(plain.metadata.annotations.is_none(), "no timing, no annotation");
        let mut timed = probes();
        let timing = ProbeTiming { period_ms: Some(250), start_interval_ms: Some(100), ..Default::default() };
        timed[0].timing = Some(timing);
        let derived = derived_pod(&pod(vec![]), &timed);
        let timings = probe_timings(&derived).expect("the engine accepts it");
        assert_eq!(timings.get(&timed[0].name, ProbeKind::Readiness), Some(&timing));
        assert_eq!(timings.get(&timed[0].name, ProbeKind::Liveness), None);
    }

    #[test]
    fn gate_containers_run_while_every_container_runs() {
        let both = pod(vec![
            running("app", "containerd://a1", "2026-01-01T00:00:05Z"),
            running("proxy", "containerd://p1", "2026-01-01T00:00:09Z"),
        ]);
        let status = derived_status(&both, &probes());
        let cs = &status.container_statuses.as_ref().unwrap()[0];
        let since = cs.state.as_ref().unwrap().running.as_ref().unwrap().started_at.clone().unwrap();
        assert_eq!(since.0.to_string(), "2026-01-01T00:00:09Z", "from the last container's start");
        assert_eq!(status.pod_ip.as_deref(), Some("10.0.0.7"));
        assert!(cs.container_id.as_deref().unwrap().starts_with("probelet-gate://u1/backend/"));

        let one = pod(vec![running("app", "containerd://a1", "2026-01-01T00:00:05Z")]);
        assert_eq!(containers_not_running(&one), ["proxy"]);
        let status = derived_status(&one, &probes());
        let cs = &status.container_statuses.as_ref().unwrap()[0];
        assert!(cs.state.as_ref().unwrap().waiting.is_some());
    }

    #[test]
    fn a_restarted_container_gives_new_gate_container_ids() {
        let id = |p: &Pod| derived_status(p, &probes()).container_statuses.unwrap()[0].container_id.clone();
        let before = pod(vec![
            running("app", "containerd://a1", "2026-01-01T00:00:05Z"),
            running("proxy", "containerd://p1", "2026-01-01T00:00:05Z"),
        ]);
        let again = pod(vec![
            running("proxy", "containerd://p1", "2026-01-01T00:00:05Z"),
            running("app", "containerd://a1", "2026-01-01T00:00:05Z"),
        ]);
        let after = pod(vec![
            running("app", "containerd://a2", "2026-01-01T00:01:05Z"),
            running("proxy", "containerd://p1", "2026-01-01T00:00:05Z"),
        ]);
        assert_eq!(id(&before), id(&again), "the order of the statuses does not matter");
        assert_ne!(id(&before), id(&after));
    }

    /// A probe whose spec, timing or container changed is another gate container: no result of
    /// the old one counts for it.
    #[test]
    fn a_changed_probe_gives_a_new_gate_container_id() {
        let running_pod = pod(vec![
            running("app", "containerd://a1", "2026-01-01T00:00:05Z"),
            running("proxy", "containerd://p1", "2026-01-01T00:00:05Z"),
        ]);
        let id = |probes: &[GateProbe]| {
            derived_status(&running_pod, probes).container_statuses.unwrap()[0].container_id.clone()
        };
        let base = probes();
        let mut moved = probes();
        moved[0].container = Some("proxy".into());
        let mut slower = probes();
        slower[0].probe.period_seconds = Some(30);
        let mut timed = probes();
        timed[0].timing =
            Some(probelet_actors::prober::timing::ProbeTiming { period_ms: Some(250), ..Default::default() });
        assert_eq!(id(&base), id(&probes()), "the same probe keeps its ID");
        for (what, changed) in [("container", moved), ("spec", slower), ("timing", timed)] {
            assert_ne!(id(&base), id(&changed), "{what}");
        }
    }

    #[test]
    fn exec_probes_run_in_their_container() {
        let mut probes = probes();
        let exec = Probe {
            exec: Some(k8s_openapi::api::core::v1::ExecAction { command: Some(vec!["true".into()]) }),
            ..Default::default()
        };
        probes.push(GateProbe {
            name: "script".into(),
            container: Some("proxy".into()),
            probe: exec.clone(),
            timing: None,
        });
        probes.push(GateProbe { name: "default".into(), container: None, probe: exec, timing: None });
        let pod = pod(vec![running("app", "containerd://a1", "2026-01-01T00:00:05Z")]);
        let status = derived_status(&pod, &probes);
        let targets = exec_targets(&pod, &probes, &status);
        let got: Vec<_> = targets
            .status
            .unwrap()
            .container_statuses
            .unwrap()
            .into_iter()
            .map(|cs| (cs.name, cs.container_id.unwrap().split('/').nth(3).unwrap_or_default().to_owned()))
            .collect();
        assert_eq!(
            got,
            [("proxy".to_owned(), "script".to_owned()), ("app".to_owned(), "default".to_owned())]
        );
    }
}
