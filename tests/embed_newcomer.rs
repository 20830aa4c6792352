//! A newcomer's host: the engine embedded from the README and the crate docs alone — a pod
//! with HTTP readiness and liveness probes against a server on 127.0.0.1, its status and
//! Ready condition followed as they change, a restart, the pod removed, the engine shut down —
//! then the calls such a host gets wrong: odd orders, pods the API server would refuse, a
//! shutdown with probes in flight, an engine dropped without one, several tasks at once.
//!
//! Real probes against a real server run on real time (network I/O and paused time do not
//! mix), every wait bounded and ended by what it waits for; the rest runs under paused time.

// A test's helpers may panic: the panic fails the test that called them.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use probelet_test_support as support;

use std::collections::HashSet;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::Duration;

use actix::prelude::*;
use k8s_openapi::api::core::v1::{
    Container, ContainerState, ContainerStateRunning, ContainerStateTerminated, ContainerStatus,
    HTTPGetAction, Pod, PodSpec, PodStatus, Probe,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, Time};
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use probelet::Engine;
use probelet::clock::TokioClock;
use probelet::contracts::{MemoryRecorder, PodRegistry};
use probelet::prober::ProbeRunner;
use probelet::results::ProbeResultChanged;
use probelet::vocabulary::{ProbeKind, ProbeResult};
use support::kubelet::{advance, epoch};
use support::pods::{probe, running, test_pod};
use support::scripted::{ScriptedProber, Step};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpListener;
use tokio::sync::mpsc;

/// How long a real-time wait may take before the test fails: far above any probe period here.
const BOUND: Duration = Duration::from_secs(20);

/// The container the host runs, as an HTTP server on 127.0.0.1: `/ready` and `/live` answer
/// 200 or 500 as the test sets them, or never (`hang`). It counts requests (whole request heads)
/// and the connections still open, so a test sees sockets an engine leaves behind.
#[derive(Default)]
struct Target {
    ready: AtomicBool,
    live: AtomicBool,
    hang: AtomicBool,
    requests: AtomicUsize,
    open: AtomicUsize,
}

impl Target {
    async fn start() -> (Arc<Target>, u16) {
        let target = Arc::new(Target { ready: true.into(), live: true.into(), ..Default::default() });
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = listener.local_addr().unwrap().port();
        let serving = target.clone();
        tokio::spawn(async move {
            while let Ok((conn, _)) = listener.accept().await {
                tokio::spawn(serving.clone().serve(conn));
            }
        });
        (target, port)
    }

    async fn serve(self: Arc<Self>, mut conn: tokio::net::TcpStream) {
        self.open.fetch_add(1, Ordering::SeqCst);
        let mut request = Vec::new();
        let mut buf = [0u8; 1024];
        while !request.windows(4).any(|w| w == b"\r\n\r\n") && request.len() < 16 * 1024 {
            match conn.read(&mut buf).await {
                Ok(0) | Err(_) => break,
                Ok(n) => request.extend_from_slice(&buf[..n]),
            }
        }
        // A connection the prober let go of before it sent a request (opened just before its
        // pod went, accepted after) is no request: counted, it made the check that nothing is
        // probed after the engine is dropped fail now and then.
        if request.windows(4).any(|w| w == b"\r\n\r\n") {
            self.requests.fetch_add(1, Ordering::SeqCst);
        }
        let path = String::from_utf8_lossy(&request).split(' ').nth(1).unwrap_or_default().to_owned();
        if self.hang.load(Ordering::SeqCst) {
            // Held until the prober lets go of it: the read ends at its close.
            while matches!(conn.read(&mut buf).await, Ok(n) if n > 0) {}
        } else {
            let healthy = match path.as_str() {
                "/ready" => self.ready.load(Ordering::SeqCst),
                "/live" => self.live.load(Ordering::SeqCst),
                _ => false,
            };
            let status = if healthy { "200 OK" } else { "500 Internal Server Error" };
            let reply = format!("HTTP/1.1 {status}\r\nContent-Length: 2\r\nConnection: close\r\n\r\nok");
            let _ = conn.write_all(reply.as_bytes()).await;
            let _ = conn.shutdown().await;
        }
        self.open.fetch_sub(1, Ordering::SeqCst);
    }

    fn requests(&self) -> usize {
        self.requests.load(Ordering::SeqCst)
    }

    fn open(&self) -> usize {
        self.open.load(Ordering::SeqCst)
    }
}

fn http_probe(port: i32, path: &str, timeout: i32) -> Probe {
    Probe {
        http_get: Some(HTTPGetAction {
            path: Some(path.into()),
            port: IntOrString::Int(port),
            host: Some("127.0.0.1".into()),
            ..Default::default()
        }),
        period_seconds: Some(1),
        timeout_seconds: Some(timeout),
        failure_threshold: Some(1),
        ..Default::default()
    }
}

/// The pod as the newcomer writes it, from the crate root's example: one container with an
/// HTTP readiness and liveness probe on `port`.
fn web_pod(uid: &str, port: i32) -> Arc<Pod> {
    Arc::new(Pod {
        metadata: ObjectMeta {
            name: Some(format!("web-{uid}")),
            namespace: Some("default".into()),
            uid: Some(uid.into()),
            ..Default::default()
        },
        spec: Some(PodSpec {
            containers: vec![Container {
                name: "app".into(),
                readiness_probe: Some(http_probe(port, "/ready", 1)),
                liveness_probe: Some(http_probe(port, "/live", 1)),
                ..Default::default()
            }],
            ..Default::default()
        }),
        status: None,
    })
}

/// What the host's runtime knows of `app`: running as `id`, restarted `restarts` times (the
/// last run ended with exit code 137, killed for its liveness probe).
fn runtime_status(id: &str, restarts: i32, started_at: Time) -> PodStatus {
    let last_state = (restarts > 0).then(|| ContainerState {
        terminated: Some(ContainerStateTerminated {
            exit_code: 137,
            reason: Some("Error".into()),
            ..Default::default()
        }),
        ..Default::default()
    });
    PodStatus {
        phase: Some("Running".into()),
        pod_ip: Some("127.0.0.1".into()),
        container_statuses: Some(vec![ContainerStatus {
            name: "app".into(),
            container_id: Some(id.into()),
            restart_count: restarts,
            last_state,
            state: Some(ContainerState {
                running: Some(ContainerStateRunning { started_at: Some(started_at) }),
                ..Default::default()
            }),
            ..Default::default()
        }]),
        ..Default::default()
    }
}

fn condition(status: &PodStatus, type_: &str) -> (String, Option<String>) {
    status
        .conditions
        .iter()
        .flatten()
        .find(|c| c.type_ == type_)
        .map(|c| (c.status.clone(), c.reason.clone()))
        .unwrap_or_default()
}

fn app(status: &PodStatus) -> &ContainerStatus {
    status.container_statuses.iter().flatten().find(|c| c.name == "app").unwrap()
}

/// The host's side of [`probelet::Pipeline::subscribe_results`]: an actor is the only way in,
/// so this one hands every change to a channel the host reads.
struct Results(mpsc::UnboundedSender<ProbeResultChanged>);

impl Actor for Results {
    type Context = Context<Self>;
}

impl Handler<ProbeResultChanged> for Results {
    type Result = ();

    fn handle(&mut self, change: ProbeResultChanged, _: &mut Context<Self>) {
        let _ = self.0.send(change);
    }
}

/// Waits (bounded) for the pod's stored status to satisfy `want`, on its view.
async fn wait_for_status(
    engine: &Engine,
    uid: &str,
    what: &str,
    want: impl Fn(&PodStatus) -> bool,
) -> Arc<PodStatus> {
    let mut view = engine.pipeline().views.subscribe(uid);
    let found = tokio::time::timeout(BOUND, view.wait_for(|s| s.as_deref().is_some_and(&want))).await;
    match found {
        Ok(Ok(Some(status))) => status,
        other => panic!("{what}: not within {BOUND:?} ({other:?})"),
    }
}

/// Waits (bounded) until `check` holds, looking every 50 ms of real time.
async fn eventually(what: &str, check: impl Fn() -> bool) {
    let waited = tokio::time::timeout(BOUND, async {
        while !check() {
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    })
    .await;
    assert!(waited.is_ok(), "{what}: not within {BOUND:?}");
}

fn ready_with(id: &'static str, want: &'static str) -> impl Fn(&PodStatus) -> bool {
    move |s| app(s).container_id.as_deref() == Some(id) && condition(s, "Ready").0 == want
}

/// The whole life of a pod in a newcomer's host: Ready once the readiness probe passes, not
/// Ready while it fails, a liveness failure told to the host, which restarts the container (a
/// new ID, one more restart) and syncs; the new instance is not ready until its own probe
/// passes. Then the pod is removed (twice, as a host that handles its delete event and its
/// next resync both does), its status forgotten, and the engine shut down: no request reaches
/// the container after, and no connection of the prober is left open.
#[actix::test]
async fn a_newcomers_host_from_the_first_probe_to_shutdown() {
    let (target, port) = Target::start().await;
    let registry = PodRegistry::new();
    let recorder = MemoryRecorder::new();
    let engine = Engine::builder(Arc::new(registry.clone())).recorder(Arc::new(recorder.clone())).start();
    let (tx, mut results) = mpsc::unbounded_channel();
    engine.pipeline().subscribe_results(Results(tx).start().recipient());

    let pod = web_pod("newcomer", i32::from(port));
    registry.upsert(pod.clone());
    let started_at = Time(engine.pipeline().clock.now());
    let first = engine.sync_pod(pod.clone(), runtime_status("newcomer://app-0", 0, started_at.clone())).await;
    let first = first.unwrap();
    assert_eq!(
        (app(&first).started, app(&first).ready, condition(&first, "Ready")),
        (Some(true), false, ("False".into(), Some("ContainersNotReady".into()))),
        "not probed yet: not ready"
    );

    wait_for_status(&engine, "newcomer", "Ready once probed", ready_with("newcomer://app-0", "True")).await;
    target.ready.store(false, Ordering::SeqCst);
    let unready = wait_for_status(
        &engine,
        "newcomer",
        "not Ready once failing",
        ready_with("newcomer://app-0", "False"),
    )
    .await;
    assert_eq!(condition(&unready, "ContainersReady").1.as_deref(), Some("ContainersNotReady"));
    target.ready.store(true, Ordering::SeqCst);
    wait_for_status(&engine, "newcomer", "Ready again", ready_with("newcomer://app-0", "True")).await;

    // The liveness probe fails: the host hears of it and restarts the container.
    target.live.store(false, Ordering::SeqCst);
    let failed = tokio::time::timeout(BOUND, async {
        while let Some(change) = results.recv().await {
            if change.kind == ProbeKind::Liveness && change.result == ProbeResult::Failure {
                return change;
            }
        }
        panic!("the results channel closed");
    })
    .await
    .expect("a liveness failure within the bound");
    assert_eq!(
        (failed.pod_uid.as_str(), failed.container_id.to_string().as_str()),
        ("newcomer", "newcomer://app-0")
    );
    target.live.store(true, Ordering::SeqCst);
    let restarted = runtime_status("newcomer://app-1", 1, Time(engine.pipeline().clock.now()));
    let after = engine.sync_pod(pod.clone(), restarted).await.unwrap();
    assert_eq!(
        (app(&after).restart_count, app(&after).ready, condition(&after, "Ready").0.as_str()),
        (1, false, "False"),
        "the new instance waits for its own readiness probe"
    );
    let ready = wait_for_status(
        &engine,
        "newcomer",
        "Ready after the restart",
        ready_with("newcomer://app-1", "True"),
    )
    .await;
    assert_eq!(app(&ready).restart_count, 1);
    // The failed instance's liveness is on hold until it is replaced, and the new one starts
    // from success: the host is told of no second failure to act on.
    let mut later = Vec::new();
    while let Ok(change) = results.try_recv() {
        later.push((change.kind, change.result, change.container_id.to_string()));
    }
    assert!(
        !later
            .iter()
            .any(|(kind, result, _)| (*kind, *result) == (ProbeKind::Liveness, ProbeResult::Failure)),
        "{later:?}"
    );
    let unhealthy = recorder.rendered();
    assert!(
        unhealthy
            .iter()
            .any(|e| e == "Warning Unhealthy Liveness probe failed: HTTP probe failed with statuscode: 500"),
        "{unhealthy:?}"
    );

    // The pod is deleted: removed twice, its status forgotten.
    engine.remove_pod(pod.clone());
    engine.remove_pod(pod.clone());
    registry.remove("newcomer");
    engine.pipeline().remove_orphaned_statuses(HashSet::new());
    assert_eq!(engine.pipeline().pod_status("newcomer").await.unwrap(), None);
    let workers = engine.pipeline().workers().await.unwrap();
    assert!(workers.is_empty(), "{workers:?}");

    // Shut down as the README says: flush (nothing to write without an API client), drop.
    engine.flush().await.unwrap();
    drop(engine);
    eventually("the prober's connections closed", || target.open() == 0).await;
    let seen = target.requests();
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert_eq!(target.requests(), seen, "a request after the engine was dropped");
}

/// The processes running exactly `argv`, by their command lines in `/proc`.
fn processes_running(argv: &[&str]) -> usize {
    let want: Vec<u8> = argv.iter().flat_map(|a| a.bytes().chain([0])).collect();
    let Ok(entries) = std::fs::read_dir("/proc") else { return 0 };
    entries.flatten().filter(|e| std::fs::read(e.path().join("cmdline")).is_ok_and(|c| c == want)).count()
}

/// A shutdown while probes hang in flight (timeouts longer than the period, on a server that
/// never answers and a command that never ends): once the host drops the engine, every
/// connection the prober held is closed and every command it ran is gone, with the workers on
/// the host's runtime and on threads of their own.
#[actix::test]
async fn a_shutdown_with_probes_in_flight_closes_their_connections_and_ends_their_commands() {
    for threads in [0, 2] {
        let (target, port) = Target::start().await;
        target.hang.store(true, Ordering::SeqCst);
        let registry = PodRegistry::new();
        let engine = Engine::builder(Arc::new(registry.clone())).worker_threads(threads).start();
        // A command line no other process has: `sleep` of a number of seconds unique to this run.
        let seconds = format!("{}.{threads}", 90_000 + std::process::id() % 10_000);
        let sleep = ["sleep", seconds.as_str()];
        let mut pod = (*web_pod("in-flight", i32::from(port))).clone();
        let spec = pod.spec.as_mut().unwrap();
        let mut exec = Container { name: "exec".into(), ..Default::default() };
        exec.readiness_probe = Some(Probe {
            exec: Some(k8s_openapi::api::core::v1::ExecAction {
                command: Some(sleep.iter().map(|a| (*a).to_owned()).collect()),
            }),
            period_seconds: Some(1),
            ..Default::default()
        });
        spec.containers.push(exec);
        for container in &mut spec.containers {
            for probe in container.readiness_probe.iter_mut().chain(container.liveness_probe.iter_mut()) {
                probe.timeout_seconds = Some(60);
            }
        }
        let pod = Arc::new(pod);
        registry.upsert(pod.clone());
        let mut status = runtime_status("newcomer://in-flight", 0, Time(engine.pipeline().clock.now()));
        let mut exec_status = app(&status).clone();
        exec_status.name = "exec".into();
        exec_status.container_id = Some("newcomer://in-flight-exec".into());
        status.container_statuses.as_mut().unwrap().push(exec_status);
        engine.sync_pod(pod.clone(), status).await.unwrap();
        eventually("both HTTP probes in flight", || target.open() == 2).await;
        eventually("the exec probe in flight", || processes_running(&sleep) == 1).await;
        engine.flush().await.unwrap();
        drop(engine);
        eventually(&format!("the hung probes' connections closed ({threads} threads)"), || {
            target.open() == 0
        })
        .await;
        eventually(&format!("the exec probe's command ended ({threads} threads)"), || {
            processes_running(&sleep) == 0
        })
        .await;
    }
}

/// An engine under paused time whose probes `prober` answers.
fn scripted_engine(prober: ScriptedProber) -> (Engine, PodRegistry) {
    let registry = PodRegistry::new();
    let engine = Engine::builder(Arc::new(registry.clone()))
        .clock(Arc::new(TokioClock::starting_at(epoch())))
        .wrap_prober(move |_| Arc::new(prober) as Arc<dyn ProbeRunner>)
        .start();
    (engine, registry)
}

/// A probe port the API server would refuse (0, 65536), through the real prober: each probe
/// errors, and an errored probe's result is discarded, as the kubelet discards it. The
/// container never reads ready, its liveness probe never fails (no restart of a container
/// whose probe cannot be run), and the event says why.
#[actix::test]
async fn a_probe_port_out_of_range_is_an_error_not_a_failure() {
    tokio::time::pause();
    for port in [0, 65_536] {
        let registry = PodRegistry::new();
        let recorder = MemoryRecorder::new();
        let engine = Engine::builder(Arc::new(registry.clone()))
            .clock(Arc::new(TokioClock::starting_at(epoch())))
            .recorder(Arc::new(recorder.clone()))
            .start();
        let (tx, mut results) = mpsc::unbounded_channel();
        engine.pipeline().subscribe_results(Results(tx).start().recipient());
        let uid = format!("port-{port}");
        let pod = web_pod(&uid, port);
        registry.upsert(pod.clone());
        let status = runtime_status("newcomer://port", 0, Time(epoch()));
        engine.sync_pod(pod.clone(), status.clone()).await.unwrap();
        for _ in 0..5 {
            advance(Duration::from_secs(1)).await;
            engine.sync_pod(pod.clone(), status.clone()).await.unwrap();
        }
        let now = engine.pipeline().pod_status(&uid).await.unwrap().unwrap();
        assert_eq!((app(&now).ready, condition(&now, "Ready").0.as_str()), (false, "False"), "port {port}");
        let mut changes = Vec::new();
        while let Ok(change) = results.try_recv() {
            changes.push((change.kind, change.result));
        }
        assert!(
            !changes.contains(&(ProbeKind::Liveness, ProbeResult::Failure)),
            "port {port}: a liveness failure for a probe that could not run: {changes:?}"
        );
        let events = recorder.rendered();
        for kind in ["Readiness", "Liveness"] {
            let said = format!(
                "Warning Unhealthy {kind} probe errored and resulted in unknown state: invalid port number: {port}"
            );
            assert!(events.contains(&said), "port {port}: {said:?} in {events:?}");
        }
    }
}

/// A pod with no containers, and one with no spec at all: `sync_pod` stores a status and starts
/// no worker, with the conditions the kubelet generates for a pod with no containers.
#[actix::test]
async fn a_pod_with_no_containers_or_no_spec_is_synced_without_workers() {
    tokio::time::pause();
    let (engine, registry) = scripted_engine(ScriptedProber::new());
    let empty = test_pod("empty").build();
    let mut no_spec = (*test_pod("no-spec").build()).clone();
    no_spec.spec = None;
    let no_spec = Arc::new(no_spec);
    let running_pod = PodStatus {
        phase: Some("Running".into()),
        container_statuses: Some(Vec::new()),
        ..Default::default()
    };
    for pod in [empty, no_spec] {
        registry.upsert(pod.clone());
        let status = engine.sync_pod(pod.clone(), running_pod.clone()).await.unwrap();
        let conditions: Vec<_> =
            ["Initialized", "ContainersReady", "Ready"].iter().map(|t| condition(&status, t).0).collect();
        assert_eq!(conditions, ["True", "True", "True"], "{:?}", pod.metadata.name);
    }
    assert!(engine.pipeline().workers().await.unwrap().is_empty());
}

/// `Pipeline::update_pod_status` for a pod the prober was never given (no `add_pod`): as
/// upstream's `UpdatePodStatus`, a running container whose readiness probe has no worker is
/// ready — the probe is not known to exist. `Engine::sync_pod` adds the pod first, so through it
/// the same container is not ready until probed. A host driving the pipeline by hand calls
/// `add_pod` before `update_pod_status` (README, "Embedding").
#[actix::test]
async fn update_pod_status_before_add_pod_calls_a_probed_container_ready() {
    tokio::time::pause();
    let (engine, registry) = scripted_engine(ScriptedProber::new());
    let pod =
        test_pod("unknown").container("app").with_probe("app", ProbeKind::Readiness, probe(1, 1, 1)).build();
    registry.upsert(pod.clone());
    let status = PodStatus {
        phase: Some("Running".into()),
        container_statuses: Some(vec![running("app", "containerd://u", epoch())]),
        ..Default::default()
    };
    let by_hand = engine.pipeline().update_pod_status(pod.clone(), status.clone()).await.unwrap();
    assert!(app(&by_hand).ready, "no worker: ready, as upstream");
    let synced = engine.sync_pod(pod.clone(), status).await.unwrap();
    assert!(!app(&synced).ready, "sync_pod adds the pod first: not ready until probed");
}

/// An engine dropped without `flush` while a host task waits on a pod's view: the view answers
/// that it is closed rather than waiting for good, and every actor of the engine stops (no
/// API client here; with one, `hostile_embed.rs` pins it).
#[actix::test]
async fn an_engine_dropped_without_shutdown_closes_its_views_and_stops() {
    tokio::time::pause();
    let prober = ScriptedProber::new();
    prober.always("app", ProbeKind::Readiness, Step::Return(ProbeResult::Failure));
    let (engine, registry) = scripted_engine(prober);
    let pod =
        test_pod("dropped").container("app").with_probe("app", ProbeKind::Readiness, probe(1, 1, 1)).build();
    registry.upsert(pod.clone());
    let status = PodStatus {
        phase: Some("Running".into()),
        container_statuses: Some(vec![running("app", "containerd://d", epoch())]),
        ..Default::default()
    };
    engine.sync_pod(pod, status).await.unwrap();
    let mut view = engine.pipeline().views.subscribe("uid-dropped");
    let waiter = actix::spawn(async move {
        view.wait_for(|s| s.as_deref().is_some_and(|s| condition(s, "Ready").0 == "True")).await.map(|_| ())
    });
    let (prober_manager, status_manager, results) = (
        engine.pipeline().prober_manager.downgrade(),
        engine.pipeline().status_manager.downgrade(),
        engine.pipeline().results.downgrade(),
    );
    advance(Duration::from_secs(3)).await;
    drop(engine);
    for _ in 0..15 {
        advance(Duration::from_secs(1)).await;
    }
    let alive =
        (prober_manager.upgrade().is_some(), status_manager.upgrade().is_some(), results.upgrade().is_some());
    assert_eq!(alive, (false, false, false), "(prober manager, status manager, results cache) alive");
    let waited = tokio::time::timeout(Duration::from_secs(1), waiter).await;
    assert!(matches!(waited, Ok(Ok(Err(_)))), "the host's wait on the view: {waited:?}");
}

/// Several host tasks at once: each adds its pod, syncs it again and again (the same UID added
/// many times over), restarts its container, and removes it twice, while another task calls
/// `update_pod_status` for pods nobody added. Each pod keeps one worker per probe while it is
/// there, and none is left once all are removed.
#[actix::test]
async fn several_host_tasks_at_once() {
    tokio::time::pause();
    let prober = ScriptedProber::new();
    prober.always("app", ProbeKind::Readiness, Step::Return(ProbeResult::Success));
    prober.always("app", ProbeKind::Liveness, Step::Return(ProbeResult::Success));
    let (engine, registry) = scripted_engine(prober);
    advance(Duration::from_secs(11)).await;
    let pod_of = |i: usize| {
        test_pod(&format!("many-{i}"))
            .container("app")
            .with_probe("app", ProbeKind::Readiness, probe(1, 1, 1))
            .with_probe("app", ProbeKind::Liveness, probe(1, 1, 1))
            .build()
    };
    let status_of = |i: usize, instance: usize| PodStatus {
        phase: Some("Running".into()),
        container_statuses: Some(vec![running("app", &format!("containerd://many-{i}-{instance}"), epoch())]),
        ..Default::default()
    };
    let n = 16;
    let hosts: Vec<_> = (0..n)
        .map(|i| {
            let (engine, registry, pod) = (engine.clone(), registry.clone(), pod_of(i));
            actix::spawn(async move {
                registry.upsert(pod.clone());
                let syncs = (0..4).map(|_| engine.sync_pod(pod.clone(), status_of(i, 0)));
                for synced in futures::future::join_all(syncs).await {
                    synced.unwrap();
                }
                tokio::time::sleep(Duration::from_secs(2)).await;
                engine.sync_pod(pod.clone(), status_of(i, 1)).await.unwrap()
            })
        })
        .collect();
    let strangers = {
        let engine = engine.clone();
        actix::spawn(async move {
            for i in 0..n {
                let stranger = pod_of(n + i);
                engine.pipeline().update_pod_status(stranger, status_of(n + i, 0)).await.unwrap();
            }
        })
    };
    for _ in 0..4 {
        advance(Duration::from_secs(1)).await;
    }
    strangers.await.unwrap();
    for host in hosts {
        let restarted = host.await.unwrap();
        assert_eq!(app(&restarted).container_id.as_deref().map(|id| id.ends_with("-1")), Some(true));
    }
    assert_eq!(engine.pipeline().workers().await.unwrap().len(), n * 2, "one worker per probe of each pod");
    advance(Duration::from_secs(2)).await;
    for i in 0..n {
        let status = engine.pipeline().pod_status(&format!("uid-many-{i}")).await.unwrap().unwrap();
        assert_eq!(condition(&status, "Ready").0, "True", "pod {i}, restarted and probed");
    }

    let removers: Vec<_> = (0..n)
        .flat_map(|i| [i, i])
        .map(|i| {
            let (engine, pod) = (engine.clone(), pod_of(i));
            actix::spawn(async move { engine.remove_pod(pod) })
        })
        .collect();
    for remover in removers {
        remover.await.unwrap();
    }
    advance(Duration::from_secs(1)).await;
    let workers = engine.pipeline().workers().await.unwrap();
    assert!(workers.is_empty(), "{workers:?}");
}

/// `target/debug/examples/embed_host`, which `cargo test` builds with the tests.
fn example_binary() -> std::path::PathBuf {
    let deps = std::env::current_exe().unwrap();
    let profile = deps.parent().unwrap().parent().unwrap();
    let binary = profile.join("examples").join("embed_host");
    assert!(binary.exists(), "{} (cargo test builds the examples)", binary.display());
    binary
}

/// The example host, copied by newcomers, syncs a pod when it changes, not at every listing
/// of its node's pods (each second): each sync probes an unready container's readiness at
/// once (`Engine::sync_pod`), so a failing readiness probe of `periodSeconds: 10` ran every
/// second. (The first probe waits for the start-up jitter, up to a period, as upstream's.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_example_host_probes_an_unready_container_at_its_period_not_at_each_listing() {
    let fake = support::apiserver::FakeApiServer::start().await;
    let (target, port) = Target::start().await;
    target.ready.store(false, Ordering::SeqCst);
    let mut pod = (*web_pod("example", i32::from(port))).clone();
    pod.metadata.uid = None;
    pod.metadata.name = Some("slow".into());
    let spec = pod.spec.as_mut().unwrap();
    spec.node_name = Some("virtual-slow".into());
    spec.containers[0].liveness_probe = None;
    for probe in spec.containers[0].readiness_probe.iter_mut() {
        probe.period_seconds = Some(10);
    }
    fake.insert_pod(pod);
    let kubeconfig = support::agent::kubeconfig_for(&fake.url(), "embed-newcomer");
    let mut host = tokio::process::Command::new(example_binary())
        .args(["--node", "virtual-slow"])
        .env("KUBECONFIG", &kubeconfig)
        .stdout(std::process::Stdio::null())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    support::agent::wait_for_pod(&fake, "slow", "a status written", |p| {
        p.status.as_ref().and_then(|s| s.conditions.as_ref()).is_some()
    })
    .await;
    eventually("the first readiness probe", || target.requests() >= 1).await;
    let first = target.requests();
    tokio::time::sleep(Duration::from_secs(5)).await;
    let probes = target.requests() - first;
    host.kill().await.unwrap();
    assert!(probes <= 1, "{probes} readiness probes in 5 s of a 10 s period");
}

/// Two syncs of one pod that overlap (two host tasks, each with its runtime report: the
/// container restarted between them): the status stored last stands, whichever report is the
/// newer. The engine cannot tell which runtime report is the newer; the host keeps one sync of
/// a pod at a time, as the kubelet's pod worker does (README, "Embedding").
#[actix::test]
async fn overlapping_syncs_of_one_pod_store_the_last_to_finish_not_the_newest() {
    tokio::time::pause();
    let (engine, registry) = scripted_engine(ScriptedProber::new());
    let pod = test_pod("overlap").container("app").build();
    registry.upsert(pod.clone());
    let report = |id: &str| PodStatus {
        phase: Some("Running".into()),
        container_statuses: Some(vec![running("app", id, epoch())]),
        ..Default::default()
    };
    let (newer, older) = futures::join!(
        engine.sync_pod(pod.clone(), report("containerd://app-1")),
        engine.sync_pod(pod.clone(), report("containerd://app-0")),
    );
    let id = |s: &PodStatus| app(s).container_id.clone().unwrap_or_default();
    assert_eq!(
        (id(&newer.unwrap()), id(&older.unwrap())),
        ("containerd://app-1".into(), "containerd://app-0".into())
    );
    let stored = engine.pipeline().pod_status("uid-overlap").await.unwrap().unwrap();
    assert_eq!(id(&stored), "containerd://app-0", "the older report, stored last, stands");
}

/// A host that forgets `registry.upsert`: the readiness probe's success is dropped as a deleted
/// pod's, so the stored status stays not Ready between syncs, and the next `sync_pod` reads
/// the result and makes it Ready (README, "Embedding").
#[actix::test]
async fn a_pod_missing_from_the_registry_follows_its_probes_only_at_its_syncs() {
    tokio::time::pause();
    let prober = ScriptedProber::new();
    prober.always("app", ProbeKind::Readiness, Step::Return(ProbeResult::Success));
    let (engine, _registry) = scripted_engine(prober.clone());
    advance(Duration::from_secs(11)).await;
    let pod =
        test_pod("unlisted").container("app").with_probe("app", ProbeKind::Readiness, probe(1, 1, 1)).build();
    let status = PodStatus {
        phase: Some("Running".into()),
        container_statuses: Some(vec![running("app", "containerd://unlisted", epoch())]),
        ..Default::default()
    };
    engine.sync_pod(pod.clone(), status.clone()).await.unwrap();
    advance(Duration::from_secs(3)).await;
    assert!(!prober.calls_of("app", ProbeKind::Readiness).is_empty(), "probed");
    let between = engine.pipeline().pod_status("uid-unlisted").await.unwrap().unwrap();
    assert_eq!(condition(&between, "Ready").0, "False", "between syncs");
    let synced = engine.sync_pod(pod, status).await.unwrap();
    assert_eq!(condition(&synced, "Ready").0, "True", "at the next sync");
}

/// A host whose own code runs on a multi-thread tokio runtime (`#[tokio::main]`) starts the
/// engine inside an actix System on a thread of its own and drives it from its tasks: the
/// engine is `Send` and `Sync`, `sync_pod`'s future is `Send`, and the calls from several tasks
/// on other threads add, sync and remove pods as from the System's own.
#[test]
fn the_engine_is_driven_from_a_multi_thread_runtime_beside_its_actix_system() {
    let (started, engine) = std::sync::mpsc::channel();
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let system = std::thread::spawn(move || {
        actix::System::new().block_on(async move {
            let registry = PodRegistry::new();
            let engine = Engine::builder(Arc::new(registry.clone())).start();
            started.send((engine, registry)).unwrap();
            let _ = stopped.await;
        });
    });
    let (engine, registry) = engine.recv().unwrap();
    let host = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap();
    host.block_on(async move {
        let tasks: Vec<_> = (0..8)
            .map(|i| {
                let (engine, registry) = (engine.clone(), registry.clone());
                tokio::spawn(async move {
                    // Port 1 of the loopback: nothing listens, and the probes fail.
                    let pod = web_pod(&format!("threaded-{i}"), 1);
                    registry.upsert(pod.clone());
                    let now = Time(engine.pipeline().clock.now());
                    let status = runtime_status(&format!("newcomer://threaded-{i}"), 0, now);
                    let synced = engine.sync_pod(pod.clone(), status).await.map(|s| app(&s).ready);
                    let workers = engine.pipeline().workers().await.unwrap().len();
                    engine.remove_pod(pod);
                    (synced.unwrap(), workers > 0)
                })
            })
            .collect();
        for task in tasks {
            let answered = tokio::time::timeout(BOUND, task).await.expect("bounded").unwrap();
            assert_eq!(answered, (false, true), "(ready, workers) as a task on another thread saw them");
        }
        eventually_async("every worker stopped", || {
            let engine = engine.clone();
            async move { engine.pipeline().workers().await.unwrap().is_empty() }
        })
        .await;
        drop(engine);
    });
    stop.send(()).unwrap();
    system.join().unwrap();
}

/// [`eventually`] for a check that asks the engine.
async fn eventually_async<F: std::future::Future<Output = bool>>(what: &str, check: impl Fn() -> F) {
    let waited = tokio::time::timeout(BOUND, async {
        while !check().await {
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    })
    .await;
    assert!(waited.is_ok(), "{what}: not within {BOUND:?}");
}
