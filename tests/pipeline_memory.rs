//! Memory (docs/memory.md), through the pipeline under paused time: a pod's prober manager
//! entries, workers and probes all read the one pod object the host handed in (no copy of the
//! pod or of a container's spec), and pods added and removed leave nothing behind: no worker,
//! no cached status, no status view, no cached result, and no reference to the pod.

// Test helpers may panic: a panic there is a failed assertion.
#![allow(clippy::unwrap_used)]

use probelet_test_support as support;

use std::collections::HashSet;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures::future::BoxFuture;
use k8s_openapi::api::core::v1::{Container, ContainerStatus, Pod, PodStatus};
use probelet::clock::TokioClock;
use probelet::container::ContainerId;
use probelet::contracts::{LogRecorder, PodRegistry};
use probelet::local_runner::LocalCommandRunner;
use probelet::prober::{PodContainer, ProbeError, ProbeKind, ProbeResult, ProbeRunner};
use probelet::status::generate_kubelet_conditions;
use probelet::status::probe_status::PodProbeStatus;
use probelet::{Pipeline, PipelineConfig};
use support::kubelet::{advance, epoch, settle};
use support::pods::{probe, running, test_pod};

use ProbeKind::{Liveness, Readiness};

/// One probe as the runner saw it: where its pod and its container live in memory.
#[derive(Debug, Clone)]
struct Seen {
    pod: usize,
    container: usize,
    name: String,
    kind: ProbeKind,
}

/// Answers Success at once and records the addresses of the pod and container each probe got.
#[derive(Default)]
struct Addresses(Mutex<Vec<Seen>>);

impl ProbeRunner for Addresses {
    fn probe(
        &self,
        kind: ProbeKind,
        pod: Arc<Pod>,
        _status: Arc<PodProbeStatus>,
        container: PodContainer,
        _container_id: ContainerId,
    ) -> BoxFuture<'static, Result<ProbeResult, ProbeError>> {
        self.0.lock().unwrap().push(Seen {
            pod: Arc::as_ptr(&pod) as usize,
            container: std::ptr::from_ref::<Container>(&container) as usize,
            name: container.name.clone(),
            kind,
        });
        Box::pin(async { Ok(ProbeResult::Success) })
    }
}

fn start(prober: Arc<Addresses>) -> (Pipeline, PodRegistry) {
    let pods = PodRegistry::new();
    let mut config = PipelineConfig::new(
        Arc::new(LocalCommandRunner::default()),
        Arc::new(LogRecorder),
        Arc::new(pods.clone()),
    );
    config.clock = Some(Arc::new(TokioClock::starting_at(epoch())));
    config.prober = Some(prober);
    config.jitter_seed = Some(7);
    (Pipeline::start(config), pods)
}

/// The host's pod sync: register, `UpdatePodStatus`, conditions, `SetPodStatus`, `AddPod`.
async fn sync(pipeline: &Pipeline, pods: &PodRegistry, pod: &Arc<Pod>, init: Vec<ContainerStatus>) {
    pods.upsert(pod.clone());
    let statuses = pod.spec.as_ref().unwrap().containers.iter();
    let status = PodStatus {
        phase: Some("Running".into()),
        pod_ip: Some("127.0.0.1".into()),
        container_statuses: Some(
            statuses.map(|c| running(&c.name, &format!("cri://{}", c.name), epoch())).collect(),
        ),
        init_container_statuses: (!init.is_empty()).then_some(init),
        ..Default::default()
    };
    let mut status = pipeline.update_pod_status(pod.clone(), status).await.unwrap();
    generate_kubelet_conditions(pod, &mut status);
    pipeline.set_pod_status(pod.clone(), status);
    pipeline.add_pod(pod.clone());
}

async fn wait_workers(pipeline: &Pipeline, n: usize) {
    for _ in 0..200 {
        if pipeline.workers().await.unwrap().len() == n {
            return;
        }
        settle().await;
    }
    panic!("expected {n} workers, have {}", pipeline.workers().await.unwrap().len());
}

/// The address of the container named `name` in the pod's own spec (regular or init).
fn spec_address(pod: &Pod, name: &str) -> usize {
    let spec = pod.spec.as_ref().unwrap();
    let container =
        spec.containers.iter().chain(spec.init_containers.iter().flatten()).find(|c| c.name == name);
    std::ptr::from_ref::<Container>(container.unwrap()) as usize
}

#[actix::test]
async fn every_probe_reads_the_hosts_own_pod_and_container_specs() {
    tokio::time::pause();
    let prober = Arc::new(Addresses::default());
    let (pipeline, pods) = start(prober.clone());
    // Past the start-up jitter: the workers probe when the sync shows their containers.
    advance(Duration::from_secs(11)).await;
    let pod = test_pod("shared")
        .container("app")
        .with_probe("app", Readiness, probe(10, 1, 3))
        .with_probe("app", Liveness, probe(10, 1, 3))
        .container("web")
        .with_probe("web", Readiness, probe(10, 1, 3))
        .sidecar("proxy")
        .with_probe("proxy", Readiness, probe(10, 1, 3))
        .build();
    sync(&pipeline, &pods, &pod, vec![running("proxy", "cri://proxy", epoch())]).await;
    wait_workers(&pipeline, 4).await;
    advance(Duration::from_secs(11)).await;

    let seen = prober.0.lock().unwrap().clone();
    for (name, kind) in [("app", Readiness), ("app", Liveness), ("web", Readiness), ("proxy", Readiness)] {
        let probes: Vec<&Seen> = seen.iter().filter(|s| s.name == name && s.kind == kind).collect();
        assert!(!probes.is_empty(), "{name} {kind}: never probed");
        for s in probes {
            assert_eq!(s.pod, Arc::as_ptr(&pod) as usize, "{name} {kind}: probed a copy of the pod");
            assert_eq!(
                s.container,
                spec_address(&pod, name),
                "{name} {kind}: probed a copy of the container"
            );
        }
    }
    // Every holder is a clone of the host's Arc: the registry's, the manager's entries and the
    // workers' (each through its container).
    assert!(Arc::strong_count(&pod) > 4, "the engine holds the host's pod: {}", Arc::strong_count(&pod));
}

#[actix::test]
async fn pods_added_and_removed_leave_nothing_behind() {
    tokio::time::pause();
    let (pipeline, pods) = start(Arc::new(Addresses::default()));
    advance(Duration::from_secs(11)).await;
    let mut removed = Vec::new();
    for round in 0..5 {
        let batch: Vec<Arc<Pod>> = (0..40)
            .map(|i| {
                test_pod(&format!("churn-{round}-{i}"))
                    .container("app")
                    .with_probe("app", Readiness, probe(1, 1, 3))
                    .with_probe("app", Liveness, probe(1, 1, 3))
                    .build()
            })
            .collect();
        for pod in &batch {
            sync(&pipeline, &pods, pod, vec![]).await;
        }
        wait_workers(&pipeline, 80).await;
        advance(Duration::from_secs(2)).await;
        assert!(!pipeline.results_view.is_empty(), "round {round}: the workers probed");
        // The host's removal path: stop the workers, forget the pod, drop orphaned statuses.
        for pod in &batch {
            pipeline.remove_pod(pod.clone());
            pods.remove(pod.metadata.uid.as_deref().unwrap());
        }
        pipeline.remove_orphaned_statuses(HashSet::new());
        wait_workers(&pipeline, 0).await;
        removed.extend(batch);
    }
    advance(Duration::from_secs(1)).await;

    assert!(pipeline.workers().await.unwrap().is_empty(), "workers left");
    assert!(pipeline.statuses().await.unwrap().is_empty(), "statuses left");
    assert!(pipeline.views.is_empty(), "status views left: {}", pipeline.views.len());
    assert!(pipeline.results_view.is_empty(), "cached results left: {}", pipeline.results_view.len());
    for pod in &removed {
        assert_eq!(
            Arc::strong_count(pod),
            1,
            "{}: still referenced after its removal",
            pod.metadata.name.as_deref().unwrap()
        );
    }
}
