//! A hostile embedder: the library API (`Pipeline`, `Engine`) driven the way a buggy or unusual
//! host drives it — calls in odd orders, pods the API server would never admit, timings at the
//! edges of `i32`, a host that drops the engine or its actix system under the engine's feet.
//! Each test is bounded (paused time, or a real-time timeout).
#![allow(clippy::unwrap_used, clippy::expect_used)]

use probelet_test_support as support;

use std::collections::HashSet;
use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::core::v1::{ContainerStatus, PodStatus, Probe};
use probelet::Engine;
use probelet::clock::TokioClock;
use probelet::contracts::PodRegistry;
use probelet::prober::{ProbeKind, ProbeResult, ProbeRunner};
use support::kubelet::{advance, aged_harness, epoch};
use support::pods::{probe, running, test_pod};
use support::scripted::{ScriptedProber, Step};

use ProbeKind::{Liveness, Readiness, Startup};

fn engine_with(prober: ScriptedProber) -> (Engine, PodRegistry) {
    let pods = PodRegistry::new();
    let engine = Engine::builder(Arc::new(pods.clone()))
        .clock(Arc::new(TokioClock::starting_at(epoch())))
        .wrap_prober(move |_| Arc::new(prober) as Arc<dyn ProbeRunner>)
        .start();
    (engine, pods)
}

/// An engine under `MutableContainerProbes` on `clock`, probing with `prober`.
fn engine_under_mutable_probes(
    clock: Arc<dyn probelet::clock::Clock>,
    prober: ScriptedProber,
) -> (Engine, PodRegistry) {
    let pods = PodRegistry::new();
    let gates =
        probelet::FeatureGates::default().with(probelet::Feature::MutableContainerProbes, true).unwrap();
    let engine = Engine::builder(Arc::new(pods.clone()))
        .clock(clock)
        .feature_gates(gates)
        .wrap_prober(move |_| Arc::new(prober) as Arc<dyn ProbeRunner>)
        .start();
    (engine, pods)
}

fn runtime(containers: Vec<ContainerStatus>) -> PodStatus {
    PodStatus {
        phase: Some("Running".into()),
        pod_ip: Some("127.0.0.1".into()),
        container_statuses: Some(containers),
        ..Default::default()
    }
}

fn condition(status: &PodStatus, type_: &str) -> String {
    status
        .conditions
        .iter()
        .flatten()
        .find(|c| c.type_ == type_)
        .map(|c| c.status.clone())
        .unwrap_or_default()
}

fn container<'a>(status: &'a PodStatus, name: &str) -> &'a ContainerStatus {
    status.container_statuses.iter().flatten().find(|c| c.name == name).unwrap()
}

/// The host's second `sync_pod` of a terminating pod (its containers are still running, the
/// host regenerates on every runtime event): the startup worker was stopped by the first, so a
/// container whose startup probe never succeeded must stay not started and not ready, as the
/// kubelet never regenerates `started` from a missing worker while the pod terminates.
#[actix::test]
async fn a_terminating_pods_resync_keeps_an_unstarted_container_not_ready() {
    tokio::time::pause();
    let prober = ScriptedProber::new();
    prober.always("app", Startup, Step::Return(ProbeResult::Failure));
    let (engine, pods) = engine_with(prober.clone());
    advance(Duration::from_secs(11)).await;
    let pod = test_pod("slow-start").container("app").with_probe("app", Startup, probe(1, 1, 1000)).build();
    pods.upsert(pod.clone());
    let app = || vec![running("app", "containerd://app-1", epoch())];
    let first = engine.sync_pod(pod.clone(), runtime(app())).await.unwrap();
    assert_eq!(container(&first, "app").started, Some(false));
    advance(Duration::from_secs(3)).await;
    assert!(!prober.calls_of("app", Startup).is_empty(), "the startup probe ran");

    // The pod is deleted: the host syncs it, then again while its container still runs.
    let deleting = test_pod("slow-start")
        .container("app")
        .with_probe("app", Startup, probe(1, 1, 1000))
        .deleting()
        .build();
    pods.upsert(deleting.clone());
    let first = engine.sync_pod(deleting.clone(), runtime(app())).await.unwrap();
    assert_eq!(container(&first, "app").started, Some(false), "first terminating sync");
    advance(Duration::from_secs(2)).await;
    let again = engine.sync_pod(deleting.clone(), runtime(app())).await.unwrap();
    assert_eq!(
        (container(&again, "app").started, container(&again, "app").ready, condition(&again, "Ready")),
        (Some(false), false, "False".to_owned()),
        "a container whose startup probe never succeeded turned started and Ready while its pod terminates"
    );
}

/// `set_pod_status` and `update_pod_status` with container statuses the spec does not have,
/// two statuses of one name, and for a pod the prober never saw: no panic, and the status
/// manager still answers.
#[actix::test]
async fn statuses_that_do_not_match_the_spec_do_not_break_the_managers() {
    let (h, _t0) = aged_harness().await;
    let pod = test_pod("odd").container("app").with_probe("app", Readiness, probe(1, 1, 1)).build();
    h.pods.upsert(pod.clone());
    let statuses = vec![
        running("app", "containerd://a1", epoch()),
        running("app", "containerd://a2", epoch()),
        running("ghost", "containerd://g", epoch()),
    ];
    let status = PodStatus {
        init_container_statuses: Some(vec![running("nope", "containerd://n", epoch())]),
        ..runtime(statuses)
    };
    let updated = h.pipeline.update_pod_status(pod.clone(), status.clone()).await.unwrap();
    h.pipeline.set_pod_status(pod.clone(), updated.clone());
    h.pipeline.add_pod(pod.clone());
    advance(Duration::from_secs(3)).await;
    let stored = h.pipeline.pod_status("uid-odd").await.unwrap();
    assert!(stored.is_some(), "the status manager still answers");
    let updated = h.pipeline.update_pod_status(pod.clone(), status).await.unwrap();
    h.pipeline.set_pod_status(pod.clone(), updated);
    advance(Duration::from_secs(3)).await;
    assert!(h.pipeline.pod_status("uid-odd").await.unwrap().is_some());
    assert_eq!(h.worker_count().await, 1);
}

fn probe_with(period: i32, timeout: i32, delay: i32, success: i32, failure: i32) -> Probe {
    Probe {
        period_seconds: Some(period),
        timeout_seconds: Some(timeout),
        initial_delay_seconds: Some(delay),
        success_threshold: Some(success),
        failure_threshold: Some(failure),
        ..probe(1, 1, 1)
    }
}

/// Probes the API server would refuse (period 0 or negative, timeouts of `i32::MAX`, delays and
/// thresholds at both ends of `i32`): the workers neither panic nor spin.
#[actix::test]
async fn timings_at_the_edges_of_i32_neither_panic_nor_spin() {
    let (h, _t0) = aged_harness().await;
    let edges = [
        (0, 1, 0, 1, 1),
        (-5, -5, -5, -5, -5),
        (i32::MAX, i32::MAX, i32::MAX, i32::MAX, i32::MAX),
        (1, i32::MAX, 0, 1, 1),
        (i32::MIN, i32::MIN, i32::MIN, i32::MIN, i32::MIN),
        (1, 1, -1, 0, 0),
    ];
    let mut builder = test_pod("edges");
    for (i, (p, t, d, s, f)) in edges.into_iter().enumerate() {
        let name = format!("c{i}");
        builder = builder
            .container(&name)
            .with_probe(&name, Readiness, probe_with(p, t, d, s, f))
            .with_probe(&name, Liveness, probe_with(p, t, d, s, f))
            .with_probe(&name, Startup, probe_with(p, t, d, s, f));
    }
    let pod = builder.build();
    let statuses: Vec<_> =
        (0..edges.len()).map(|i| running(&format!("c{i}"), &format!("containerd://c{i}"), epoch())).collect();
    h.sync(&pod, statuses).await;
    for _ in 0..30 {
        advance(Duration::from_secs(1)).await;
        h.resync(&pod).await;
    }
    assert_eq!(h.worker_count().await, edges.len() * 3);
    let calls = h.prober.calls().len();
    assert!(calls < 2_000, "{calls} probes in 30 s of 18 workers");
}

/// RemovePod before AddPod, AddPod twice under one UID with different specs, CleanupPods with
/// an empty set while probes run: workers end when told, and no probe runs after.
#[actix::test]
async fn odd_orders_of_add_remove_and_cleanup() {
    let (h, _t0) = aged_harness().await;
    let pod = test_pod("order").container("app").with_probe("app", Readiness, probe(1, 1, 1)).build();
    h.pipeline.remove_pod(pod.clone());
    h.sync(&pod, vec![running("app", "containerd://a", epoch())]).await;
    h.wait_workers(1).await;
    // Same UID, another spec: a new container with a liveness probe.
    let other = test_pod("order")
        .container("app")
        .with_probe("app", Liveness, probe(1, 1, 1))
        .container("web")
        .with_probe("web", Readiness, probe(1, 1, 1))
        .build();
    h.pipeline.add_pod(other.clone());
    h.wait_workers(3).await;
    advance(Duration::from_secs(3)).await;
    h.pipeline.cleanup_pods(HashSet::new());
    h.wait_workers(0).await;
    let before = h.prober.calls().len();
    advance(Duration::from_secs(10)).await;
    assert_eq!(h.prober.calls().len(), before, "no probe after CleanupPods with no pod");
}

/// A pipeline kept by the host after its actix system is gone: calls answer an error or do
/// nothing, none hangs or panics.
#[test]
fn calls_after_the_system_stopped_neither_hang_nor_panic() {
    let system = actix::System::new();
    let (pipeline, pod) = system.block_on(async {
        let pods = PodRegistry::new();
        let pipeline = support::kubelet::start_pipeline(Arc::new(pods.clone()));
        let pod = test_pod("late").container("app").with_probe("app", Readiness, probe(1, 1, 1)).build();
        pods.upsert(pod.clone());
        pipeline.add_pod(pod.clone());
        (pipeline, pod)
    });
    drop(system);
    let again = actix::System::new();
    again.block_on(async move {
        let bounded = |f| tokio::time::timeout(Duration::from_secs(5), f);
        pipeline.add_pod(pod.clone());
        pipeline.set_pod_status(pod.clone(), PodStatus::default());
        pipeline.cleanup_pods(HashSet::new());
        let answer = bounded(pipeline.update_pod_status(pod.clone(), PodStatus::default())).await;
        assert!(matches!(answer, Ok(Err(_))), "{answer:?}");
        let answer = tokio::time::timeout(Duration::from_secs(5), pipeline.pod_status("uid-late")).await;
        assert!(matches!(answer, Ok(Err(_))), "{answer:?}");
        drop(pipeline);
    });
}

/// Thousands of containers in one pod: a status is generated and stored in bounded time.
#[actix::test]
async fn a_pod_of_thousands_of_probed_containers() {
    let (h, _t0) = aged_harness().await;
    let n = 3_000;
    let mut builder = test_pod("huge");
    for i in 0..n {
        let name = format!("c{i}");
        builder = builder.container(&name).with_probe(&name, Readiness, probe(10, 1, 1));
    }
    let pod = builder.build();
    let statuses: Vec<_> =
        (0..n).map(|i| running(&format!("c{i}"), &format!("containerd://c{i}"), epoch())).collect();
    // The real time the engine takes under paused tokio time: its CPU cost, not a wait.
    #[allow(clippy::disallowed_methods)]
    let started = std::time::Instant::now();
    h.sync(&pod, statuses).await;
    h.wait_workers(n).await;
    advance(Duration::from_secs(11)).await;
    let mut status = h.resync(&pod).await;
    for _ in 0..50 {
        if condition(&status, "Ready") == "True" {
            break;
        }
        advance(Duration::from_secs(1)).await;
        status = h.resync(&pod).await;
    }
    let ready = status.container_statuses.iter().flatten().filter(|c| c.ready).count();
    let elapsed = started.elapsed();
    assert_eq!(condition(&status, "Ready"), "True", "{ready} of {n} containers ready");
    assert!(elapsed < Duration::from_secs(20), "{elapsed:?}");
    h.pipeline.remove_pod(pod.clone());
    h.wait_workers(0).await;
}

/// The status of a pod whose lookup answers another pod under its UID (a host that reused a
/// UID, or answers stale): no panic.
#[actix::test]
async fn a_lookup_that_answers_another_pod() {
    let (h, _t0) = aged_harness().await;
    let pod = test_pod("swap").container("app").with_probe("app", Readiness, probe(1, 1, 1)).build();
    h.sync(&pod, vec![running("app", "containerd://a", epoch())]).await;
    let other = test_pod("swap").container("other").build();
    h.pods.upsert(other);
    advance(Duration::from_secs(5)).await;
    assert!(h.pipeline.pod_status("uid-swap").await.unwrap().is_some());
}

/// An engine that writes to `server`, with one pod of a readiness probe synced running.
async fn engine_writing_to(server: &support::apiserver::FakeApiServer, name: &str) -> Engine {
    let pods = PodRegistry::new();
    let engine = Engine::builder(Arc::new(pods.clone()))
        .clock(Arc::new(TokioClock::starting_at(epoch())))
        .wrap_prober(|_| Arc::new(ScriptedProber::new()) as Arc<dyn ProbeRunner>)
        .api(server.in_process_client(), probelet::sync::syncer::OwnedFields::Kubelet)
        .start();
    let pod = test_pod(name).container("app").with_probe("app", Readiness, probe(1, 1, 1)).build();
    pods.upsert(pod.clone());
    engine.sync_pod(pod, runtime(vec![running("app", "containerd://a", epoch())])).await.unwrap();
    engine
}

/// A host that drops its engine (leader election lost, a reload that builds a new one) must
/// get back everything the engine held: with an API client, its syncer, the status manager and
/// every cached status. The syncer's 10 s reconcile timer keeps the syncer alive for good, and
/// through its recipients the status manager with every status it holds.
#[actix::test]
async fn a_dropped_engine_with_an_api_client_leaves_nothing_running() {
    tokio::time::pause();
    let server = support::apiserver::FakeApiServer::start().await;
    let engine = engine_writing_to(&server, "gone").await;
    advance(Duration::from_secs(3)).await;
    let syncer = engine.syncer().unwrap().downgrade();
    let status_manager = engine.pipeline().status_manager.downgrade();
    let prober_manager = engine.pipeline().prober_manager.downgrade();
    drop(engine);
    for _ in 0..60 {
        advance(Duration::from_secs(1)).await;
    }
    assert!(prober_manager.upgrade().is_none(), "the prober manager stopped");
    assert!(
        (syncer.upgrade().is_none(), status_manager.upgrade().is_none()) == (true, true),
        "a minute after the host dropped the engine, its syncer (alive: {}) and status manager \
         (alive: {}) still run",
        syncer.upgrade().is_some(),
        status_manager.upgrade().is_some(),
    );
}

/// A host that keeps `engine.pipeline().clone()` (to subscribe, to read statuses) and drops the
/// engine keeps probing and storing statuses, and its syncer keeps running to write them: it stops only
/// once nothing drives the probes (a review found a first version that stopped it with the
/// engine's last clone, so that nothing was written any more, silently).
#[actix::test]
async fn a_kept_pipeline_clone_keeps_its_syncer_running() {
    tokio::time::pause();
    let server = support::apiserver::FakeApiServer::start().await;
    let engine = engine_writing_to(&server, "kept").await;
    let syncer = engine.syncer().unwrap().downgrade();
    let pipeline = engine.pipeline().clone();
    drop(engine);
    for _ in 0..60 {
        advance(Duration::from_secs(1)).await;
    }
    let alive = (
        pipeline.prober_manager.connected(),
        pipeline.status_manager.connected(),
        syncer.upgrade().is_some(),
    );
    assert_eq!(alive, (true, true, true), "(prober, status manager, syncer) alive with the pipeline kept");
}

fn http_probe(port: u16, path: &str, period: i32, timeout: i32) -> Probe {
    use k8s_openapi::api::core::v1::HTTPGetAction;
    use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
    Probe {
        http_get: Some(HTTPGetAction {
            path: Some(path.into()),
            port: IntOrString::Int(port.into()),
            ..Default::default()
        }),
        period_seconds: Some(period),
        timeout_seconds: Some(timeout),
        success_threshold: Some(1),
        failure_threshold: Some(1),
        ..Default::default()
    }
}

/// Real probes against a loopback server, a timeout longer than the period on a probe that
/// hangs: once the host removes the pod, or drops the engine (workers on threads of their own),
/// no request reaches the server any more.
#[actix::test]
async fn no_request_after_remove_pod_or_a_dropped_engine() {
    use support::http_server::{HttpServer, Reply};
    let server = HttpServer::plain(|r| if r.path() == "/hang" { Reply::Hang } else { Reply::ok("ok") }).await;
    for threads in [0, 2] {
        let pods = PodRegistry::new();
        let engine = Engine::builder(Arc::new(pods.clone())).worker_threads(threads).start();
        let pod = test_pod(&format!("real-{threads}"))
            .container("app")
            .with_probe("app", Readiness, http_probe(server.port(), "/ready", 1, 1))
            .with_probe("app", Liveness, http_probe(server.port(), "/hang", 1, 30))
            .build();
        pods.upsert(pod.clone());
        let now = engine.pipeline().clock.now();
        let status = runtime(vec![running("app", &format!("containerd://real-{threads}"), now)]);
        engine.sync_pod(pod.clone(), status.clone()).await.unwrap();
        tokio::time::sleep(Duration::from_millis(2_500)).await;
        engine.sync_pod(pod.clone(), status).await.unwrap();
        tokio::time::sleep(Duration::from_millis(1_500)).await;
        let seen = server.requests().len();
        assert!(seen >= 2, "{seen} requests");
        if threads == 0 {
            engine.remove_pod(pod.clone());
            tokio::time::sleep(Duration::from_millis(200)).await;
            assert!(engine.pipeline().workers().await.unwrap().is_empty());
        } else {
            drop(engine);
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
        let stopped = server.requests().len();
        tokio::time::sleep(Duration::from_secs(3)).await;
        assert_eq!(server.requests().len(), stopped, "probes went on ({threads} threads)");
    }
}

/// `Engine::sync_pod` says it "returns the status as stored". A runtime report the status
/// manager refuses (a `restartPolicy: Never` container that terminated, reported running again:
/// upstream's `checkContainerStateTransition`) is not stored, yet `sync_pod` answers `Ok` with it:
/// the host acts on (prints, compares, derives events from) a status nobody will write.
#[actix::test]
async fn sync_pod_answers_only_what_was_stored() {
    tokio::time::pause();
    let (engine, pods) = engine_with(ScriptedProber::new());
    let pod = test_pod("never").restart_policy("Never").container("app").build();
    pods.upsert(pod.clone());
    let done = PodStatus {
        phase: Some("Running".into()),
        container_statuses: Some(vec![support::pods::terminated("app", "containerd://app-1", 1)]),
        ..Default::default()
    };
    engine.sync_pod(pod.clone(), done).await.unwrap();
    let late = runtime(vec![running("app", "containerd://app-2", epoch())]);
    let answered = engine.sync_pod(pod.clone(), late).await;
    let stored = engine.pipeline().pod_status("uid-never").await.unwrap().unwrap();
    let state = |s: &PodStatus| container(s, "app").state.clone();
    match answered {
        Err(err) => eprintln!("refused: {err}"),
        Ok(answered) => assert_eq!(
            state(&answered),
            state(&stored),
            "sync_pod answered a running container; the status manager kept the terminated one"
        ),
    }
}

/// The engine's clock, counting its reads: a worker reads it at every turn, so the count
/// tells how often the workers woke.
struct CountingClock {
    clock: TokioClock,
    reads: std::sync::atomic::AtomicUsize,
}

impl probelet::clock::Clock for CountingClock {
    fn now(&self) -> probelet::k8s_openapi::jiff::Timestamp {
        self.reads.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        self.clock.now()
    }

    fn at(&self, instant: tokio::time::Instant) -> Option<probelet::k8s_openapi::jiff::Timestamp> {
        self.reads.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        self.clock.at(instant)
    }
}

/// A runtime whose `startedAt` is ahead of the engine's clock (a virtual-kubelet provider's API
/// on another clock, an edge node that booted with its clock behind): under
/// `MutableContainerProbes` the first probe waits for the initial delay to end counted from
/// `startedAt`, as upstream's newer worker sets its timer for it. With the default delay of 0
/// the worker woke every millisecond until then, each time to find it still early.
#[actix::test]
async fn a_container_started_ahead_of_the_clock_is_waited_for_not_polled() {
    use probelet::clock::Clock;
    use std::sync::atomic::Ordering::Relaxed;
    tokio::time::pause();
    let clock =
        Arc::new(CountingClock { clock: TokioClock::starting_at(epoch()), reads: Default::default() });
    let prober = ScriptedProber::new();
    prober.always("app", Readiness, Step::Return(ProbeResult::Success));
    let (engine, pods) = engine_under_mutable_probes(clock.clone(), prober.clone());
    advance(Duration::from_secs(11)).await;
    let pod = test_pod("ahead").container("app").with_probe("app", Readiness, probe(10, 1, 1)).build();
    pods.upsert(pod.clone());
    let ahead = clock.now() + Duration::from_secs(30);
    let start = tokio::time::Instant::now();
    engine.sync_pod(pod.clone(), runtime(vec![running("app", "containerd://ahead", ahead)])).await.unwrap();
    let before = clock.reads.load(Relaxed);
    tokio::time::sleep(Duration::from_secs(35)).await;
    let reads = clock.reads.load(Relaxed) - before;
    let first = prober.calls_of("app", Readiness).first().map(|c| c.at - start);
    assert!(reads < 20, "{reads} clock reads in 35 s of one worker with a 10 s period");
    let first = first.expect("probed once startedAt came");
    assert!(first.abs_diff(Duration::from_secs(30)) < Duration::from_millis(20), "first probe at {first:?}");
}

/// A `startedAt` an hour ahead because the node's clock is behind, and the node's clock then
/// stepped forward to it (NTP catching up on an edge node): the worker sees it within a
/// period and probes. It slept out the whole hour measured before the step, on tokio's
/// monotonic timer, and the container stayed unready for that hour.
#[actix::test]
async fn a_clock_stepped_forward_to_an_ahead_started_at_is_seen_within_a_period() {
    use probelet::clock::Clock;
    tokio::time::pause();
    let clock = Arc::new(probelet::clock::SteppingClock::starting_at(epoch()));
    let prober = ScriptedProber::new();
    prober.always("app", Readiness, Step::Return(ProbeResult::Success));
    let (engine, pods) = engine_under_mutable_probes(clock.clone(), prober.clone());
    advance(Duration::from_secs(11)).await;
    let pod = test_pod("stepped").container("app").with_probe("app", Readiness, probe(10, 1, 1)).build();
    pods.upsert(pod.clone());
    let ahead = clock.now() + Duration::from_secs(3600);
    let start = tokio::time::Instant::now();
    engine.sync_pod(pod.clone(), runtime(vec![running("app", "containerd://stepped", ahead)])).await.unwrap();
    tokio::time::sleep(Duration::from_secs(5)).await;
    clock.step(probelet::k8s_openapi::jiff::SignedDuration::from_secs(3600));
    tokio::time::sleep(Duration::from_secs(30)).await;
    let first = prober.calls_of("app", Readiness).first().map(|c| c.at - start);
    let first = first.expect("probed once the clock reached startedAt");
    assert!(first <= Duration::from_secs(16), "first probe at {first:?}");
}

/// A pod finished (`Failed`: its active deadline passed, say) while its containers still run,
/// synced again while they are killed: the engine stopped its probes at the first finished
/// sync, and a container whose startup probe never passed, or whose readiness probe fails, must
/// not turn started or ready for want of a worker. The kubelet keeps the workers until the
/// containers are dead and generates no status in between.
#[actix::test]
async fn a_finished_pods_resync_keeps_its_running_containers_not_ready() {
    tokio::time::pause();
    let prober = ScriptedProber::new();
    prober.always("app", Startup, Step::Return(ProbeResult::Failure));
    prober.always("web", Readiness, Step::Return(ProbeResult::Failure));
    prober.always("ok", Readiness, Step::Return(ProbeResult::Success));
    let (engine, pods) = engine_with(prober);
    advance(Duration::from_secs(11)).await;
    let pod = test_pod("deadline")
        .container("app")
        .with_probe("app", Startup, probe(1, 1, 100))
        .container("web")
        .with_probe("web", Readiness, probe(1, 1, 1))
        .container("ok")
        .with_probe("ok", Readiness, probe(1, 1, 1))
        .build();
    pods.upsert(pod.clone());
    let containers = vec![
        running("app", "containerd://app-1", epoch()),
        running("web", "containerd://web-1", epoch()),
        running("ok", "containerd://ok-1", epoch()),
    ];
    engine.sync_pod(pod.clone(), runtime(containers.clone())).await.unwrap();
    advance(Duration::from_secs(3)).await;
    engine.sync_pod(pod.clone(), runtime(containers.clone())).await.unwrap();
    let failed = PodStatus {
        phase: Some("Failed".into()),
        reason: Some("DeadlineExceeded".into()),
        ..runtime(containers)
    };
    let mut seen = Vec::new();
    for _ in 0..3 {
        let status = engine.sync_pod(pod.clone(), failed.clone()).await.unwrap();
        let of = |name| (container(&status, name).started, container(&status, name).ready);
        seen.push((of("app"), of("web"), of("ok")));
        advance(Duration::from_secs(1)).await;
    }
    let want = ((Some(false), false), (Some(true), false), (Some(true), true));
    assert_eq!(seen, vec![want; 3], "(started, ready) of app, web, ok at each sync of the failed pod");
}

/// A pod the engine first meets finished (an embedder restarted, its runtime reporting
/// `Failed` while the containers are still being killed), with no stored status and no API
/// status: a running container with no startup probe is started, and one with no probe at all
/// ready, as the kubelet always calls such a container; only what a probe would have said is
/// unknown (a readiness probe's container stays unready). Both were written not started.
#[actix::test]
async fn a_first_finished_sync_calls_a_probeless_running_container_started() {
    tokio::time::pause();
    let (engine, pods) = engine_with(ScriptedProber::new());
    advance(Duration::from_secs(11)).await;
    let pod = test_pod("met-finished")
        .container("plain")
        .container("web")
        .with_probe("web", Readiness, probe(1, 1, 1))
        .build();
    pods.upsert(pod.clone());
    let failed = PodStatus {
        phase: Some("Failed".into()),
        ..runtime(vec![
            running("plain", "containerd://plain-1", epoch()),
            running("web", "containerd://web-1", epoch()),
        ])
    };
    let status = engine.sync_pod(pod.clone(), failed).await.unwrap();
    let of = |name| (container(&status, name).started, container(&status, name).ready);
    assert_eq!((of("plain"), of("web")), ((Some(true), true), (Some(true), false)));
}

/// A host without an API server that sets its readiness gate's condition: in the runtime
/// status it is replaced with the kubelet's conditions and the pod waits for the gate; in the
/// pod's own status, where upstream's `generateAPIPodStatus` reads the conditions it does not
/// own, it opens the gate.
#[actix::test]
async fn a_readiness_gates_condition_is_read_from_the_pods_status_not_the_runtimes() {
    use k8s_openapi::api::core::v1::PodCondition;
    tokio::time::pause();
    let (engine, pods) = engine_with(ScriptedProber::new());
    let gate =
        || PodCondition { type_: "example.com/lb".into(), status: "True".into(), ..Default::default() };
    let pod = test_pod("gated").container("app").readiness_gate("example.com/lb").build();
    pods.upsert(pod.clone());
    let with_gate = PodStatus {
        conditions: Some(vec![gate()]),
        ..runtime(vec![running("app", "containerd://g", epoch())])
    };
    let status = engine.sync_pod(pod.clone(), with_gate.clone()).await.unwrap();
    let ready = |s: &PodStatus| s.conditions.iter().flatten().find(|c| c.type_ == "Ready").cloned().unwrap();
    assert_eq!(
        (ready(&status).status.as_str(), ready(&status).reason.as_deref()),
        ("False", Some("ReadinessGatesNotReady")),
        "{status:?}"
    );
    let gated = test_pod("gated")
        .container("app")
        .readiness_gate("example.com/lb")
        .with_status(PodStatus { conditions: Some(vec![gate()]), ..Default::default() })
        .build();
    pods.upsert(gated.clone());
    let status =
        engine.sync_pod(gated, runtime(vec![running("app", "containerd://g", epoch())])).await.unwrap();
    assert_eq!(ready(&status).status, "True", "{status:?}");
    assert_eq!(condition(&status, "example.com/lb"), "True", "the gate's condition is kept");
}

/// A host that stores statuses of pods it gave no UID (`set_pod_status`, `terminate_pod`): each
/// is refused with a warning, as `add_pod` refuses such a pod, where they were all kept under
/// the empty UID, each overwriting the last, and never written (the syncer checks the UID).
#[actix::test]
async fn statuses_of_pods_without_a_uid_are_refused_not_kept_under_an_empty_one() {
    tokio::time::pause();
    let log = support::log::CapturedLog::default();
    let _guard = log.capture_at(tracing::Level::WARN);
    let (engine, _pods) = engine_with(ScriptedProber::new());
    let without_uid = |name: &str| {
        let mut pod = (*test_pod(name).container("app").build()).clone();
        pod.metadata.uid = None;
        Arc::new(pod)
    };
    engine
        .pipeline()
        .set_pod_status(without_uid("a"), runtime(vec![running("app", "containerd://a", epoch())]));
    engine.pipeline().terminate_pod(without_uid("b"));
    assert_eq!(engine.pipeline().pod_status("").await.unwrap(), None, "nothing kept under the empty UID");
    assert_eq!(log.lines_with("Pod without a UID; not storing its status").len(), 2);
}
