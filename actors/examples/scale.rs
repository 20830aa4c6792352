//! The scale harness: N pods × 3 probes (startup, readiness, liveness) through the whole
//! engine with an instant prober, on real time, for a fixed run; prints probes per second
//! and the engine's CPU time per probe. Loopback-free: no network at all.
//!
//! `cargo run --release -p probelet-actors --example scale -- 1000 20`
//! (pods, seconds; periods are 1 s, so 1,000 pods ask for 2,000 probes/s once started).

// A load run on real time: it times itself on the real clock.
#![allow(clippy::disallowed_methods)]

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use futures::future::BoxFuture;
use k8s_openapi::api::core::v1::{
    Container, ContainerState, ContainerStateRunning, ContainerStatus, ExecAction, Pod, PodSpec, PodStatus,
    Probe,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, Time};
use k8s_openapi::jiff::Timestamp;
use probelet_actors::container::ContainerId;
use probelet_actors::contracts::{LogRecorder, PodRegistry};
use probelet_actors::local_runner::LocalCommandRunner;
use probelet_actors::prober::{PodContainer, ProbeError, ProbeKind, ProbeResult, ProbeRunner};
use probelet_actors::status::generate_kubelet_conditions;
use probelet_actors::status::probe_status::PodProbeStatus;
use probelet_actors::{Pipeline, PipelineConfig};

/// Answers every probe with Success at once and counts it.
struct Instant0(Arc<AtomicU64>);

impl ProbeRunner for Instant0 {
    fn probe(
        &self,
        _kind: ProbeKind,
        _pod: Arc<Pod>,
        _status: Arc<PodProbeStatus>,
        _container: PodContainer,
        _id: ContainerId,
    ) -> BoxFuture<'static, Result<ProbeResult, ProbeError>> {
        self.0.fetch_add(1, Ordering::Relaxed);
        Box::pin(async { Ok(ProbeResult::Success) })
    }
}

fn pod(i: usize) -> Pod {
    let probe = Probe {
        exec: Some(ExecAction { command: Some(vec!["true".into()]) }),
        period_seconds: Some(1),
        ..Default::default()
    };
    Pod {
        metadata: ObjectMeta {
            name: Some(format!("pod-{i}")),
            namespace: Some("default".into()),
            uid: Some(format!("uid-{i}")),
            ..Default::default()
        },
        spec: Some(PodSpec {
            containers: vec![Container {
                name: "app".into(),
                startup_probe: Some(probe.clone()),
                readiness_probe: Some(probe.clone()),
                liveness_probe: Some(probe),
                ..Default::default()
            }],
            ..Default::default()
        }),
        status: None,
    }
}

fn running(i: usize) -> PodStatus {
    PodStatus {
        phase: Some("Running".into()),
        pod_ip: Some("127.0.0.1".into()),
        container_statuses: Some(vec![ContainerStatus {
            name: "app".into(),
            container_id: Some(format!("bench://{i}")),
            state: Some(ContainerState {
                running: Some(ContainerStateRunning { started_at: Some(Time(Timestamp::now())) }),
                ..Default::default()
            }),
            ..Default::default()
        }]),
        ..Default::default()
    }
}

/// This process's user + system CPU time, from /proc/self/stat (Linux).
fn cpu_time() -> Duration {
    let stat = std::fs::read_to_string("/proc/self/stat").unwrap_or_default();
    let fields: Vec<&str> =
        stat.rsplit_once(')').map(|(_, rest)| rest.split_whitespace().collect()).unwrap_or_default();
    let ticks = |i: usize| fields.get(i).and_then(|v| v.parse::<u64>().ok()).unwrap_or(0);
    // utime and stime are fields 14 and 15 of the whole line, 12 and 13 after the name.
    Duration::from_millis((ticks(11) + ticks(12)) * 10)
}

fn main() {
    let mut args = std::env::args().skip(1);
    let pods: usize = args.next().and_then(|a| a.parse().ok()).unwrap_or(1000);
    let seconds: u64 = args.next().and_then(|a| a.parse().ok()).unwrap_or(20);
    let system = actix::System::new();
    system.block_on(async move {
        let count = Arc::new(AtomicU64::new(0));
        let registry = PodRegistry::new();
        let mut config = PipelineConfig::new(
            Arc::new(LocalCommandRunner::new()),
            Arc::new(LogRecorder),
            Arc::new(registry.clone()),
        );
        config.prober = Some(Arc::new(Instant0(count.clone())));
        config.worker_threads = std::thread::available_parallelism().map(|n| n.get()).unwrap_or(1);
        let pipeline = Pipeline::start(config);

        let started = Instant::now();
        let all: Vec<Arc<Pod>> = (0..pods).map(|i| Arc::new(pod(i))).collect();
        for (i, pod) in all.iter().enumerate() {
            registry.upsert(pod.clone());
            sync(&pipeline, pod, running(i)).await;
        }
        println!("{pods} pods added in {:?}", started.elapsed());
        // Resync every second so startup and readiness results reach the status.
        let (cpu0, probes0, t0) = (cpu_time(), count.load(Ordering::Relaxed), Instant::now());
        for _ in 0..seconds {
            tokio::time::sleep(Duration::from_secs(1)).await;
            for (i, pod) in all.iter().enumerate() {
                sync(&pipeline, pod, running_with(&pipeline, i).await).await;
            }
        }
        let elapsed = t0.elapsed().as_secs_f64();
        let probes = count.load(Ordering::Relaxed) - probes0;
        let cpu = (cpu_time() - cpu0).as_secs_f64();
        let ready = ready_count(&pipeline, pods).await;
        println!(
            "{probes} probes in {elapsed:.1} s: {:.0} probes/s; engine CPU {cpu:.2} s ({:.1} µs per probe, incl. {} pod syncs/s); {ready}/{pods} pods Ready",
            probes as f64 / elapsed,
            cpu * 1e6 / probes.max(1) as f64,
            pods
        );
        actix::System::current().stop();
    });
}

async fn sync(pipeline: &Pipeline, pod: &Arc<Pod>, status: PodStatus) {
    let Ok(mut status) = pipeline.update_pod_status(pod.clone(), status).await else { return };
    generate_kubelet_conditions(pod, &mut status);
    pipeline.set_pod_status(pod.clone(), status);
    pipeline.add_pod(pod.clone());
}

/// The runtime view stays the same; keep the container's original start time.
async fn running_with(pipeline: &Pipeline, i: usize) -> PodStatus {
    let mut status = running(i);
    if let Ok(Some(cached)) = pipeline.pod_status(&format!("uid-{i}")).await
        && let Some(cs) = cached.container_statuses.as_ref().and_then(|c| c.first())
        && let Some(ours) = status.container_statuses.as_mut().and_then(|c| c.first_mut())
    {
        ours.state = cs.state.clone();
    }
    status
}

async fn ready_count(pipeline: &Pipeline, pods: usize) -> usize {
    let mut ready = 0;
    for i in 0..pods {
        if let Ok(Some(status)) = pipeline.pod_status(&format!("uid-{i}")).await
            && status.conditions.iter().flatten().any(|c| c.type_ == "Ready" && c.status == "True")
        {
            ready += 1;
        }
    }
    ready
}
