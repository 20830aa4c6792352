//! Injected network executors (docs/prober.md §4): the real prober with fake HTTP, TCP and gRPC
//! executors, as upstream's `prober_test.go` swaps them. Everything around the executor stays
//! real: the handler choice, the named port's resolution, the pod IP as the default host, the
//! outcome mapping, `Unhealthy` events and container readiness. Paused tokio time.
// The helpers below panic on purpose: a panic fails the test that called them.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use probelet_test_support as support;

use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures::future::BoxFuture;
use k8s_openapi::api::core::v1::{
    Container, ContainerPort, GRPCAction, HTTPGetAction, Pod, PodSpec, PodStatus, Probe, TCPSocketAction,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use probelet::Engine;
use probelet::contracts::{MemoryRecorder, PodRegistry};
use probelet::prober::Probed;
use probelet::prober::executors::{Executors, GrpcExecutor, HttpExecutor, TcpExecutor};
use probelet::prober::http::HttpProbeRequest;
use probelet::prober::{ProbeError, ProbeOutcome};
use support::kubelet::run_for;
use support::pods::running;

/// Every call an executor got, as text.
#[derive(Default, Clone)]
struct Calls(Arc<Mutex<Vec<String>>>);

impl Calls {
    fn push(&self, call: String) {
        self.0.lock().unwrap().push(call);
    }
    fn all(&self) -> Vec<String> {
        self.0.lock().unwrap().clone()
    }
}

struct FailingHttp(Calls);
impl HttpExecutor for FailingHttp {
    fn probe<'a>(
        &'a self,
        request: &'a HttpProbeRequest,
        timeout: Duration,
    ) -> BoxFuture<'a, Result<Probed, ProbeError>> {
        self.0.push(format!("http {} {timeout:?}", request.url()));
        Box::pin(async { Ok(Probed::new(ProbeOutcome::Failure, "HTTP probe failed with statuscode: 503")) })
    }
}

struct PassingTcp(Calls);
impl TcpExecutor for PassingTcp {
    fn probe<'a>(&'a self, host: &'a str, port: u16, timeout: Duration) -> BoxFuture<'a, Probed> {
        self.0.push(format!("tcp {host}:{port} {timeout:?}"));
        Box::pin(async { Probed::new(ProbeOutcome::Success, "") })
    }
}

struct PassingGrpc(Calls);
impl GrpcExecutor for PassingGrpc {
    fn probe<'a>(
        &'a self,
        host: &'a str,
        port: u16,
        service: &'a str,
        timeout: Duration,
    ) -> BoxFuture<'a, Probed> {
        self.0.push(format!("grpc {host}:{port} service={service} {timeout:?}"));
        Box::pin(async { Probed::new(ProbeOutcome::Success, "") })
    }
}

fn readiness(probe: Probe) -> Option<Probe> {
    Some(Probe { period_seconds: Some(10), timeout_seconds: Some(2), ..probe })
}

fn pod() -> Arc<Pod> {
    let web = Container {
        name: "web".into(),
        ports: Some(vec![ContainerPort {
            name: Some("http".into()),
            container_port: 8080,
            ..Default::default()
        }]),
        readiness_probe: readiness(Probe {
            http_get: Some(HTTPGetAction {
                path: Some("/healthz".into()),
                port: IntOrString::String("http".into()),
                ..Default::default()
            }),
            ..Default::default()
        }),
        ..Default::default()
    };
    let db = Container {
        name: "db".into(),
        readiness_probe: readiness(Probe {
            tcp_socket: Some(TCPSocketAction { port: IntOrString::Int(5432), host: None }),
            ..Default::default()
        }),
        ..Default::default()
    };
    let api = Container {
        name: "api".into(),
        readiness_probe: readiness(Probe {
            grpc: Some(GRPCAction { port: 50051, service: Some("api.v1".into()) }),
            ..Default::default()
        }),
        ..Default::default()
    };
    Arc::new(Pod {
        metadata: ObjectMeta {
            name: Some("shop".into()),
            namespace: Some("default".into()),
            uid: Some("uid-shop".into()),
            ..Default::default()
        },
        spec: Some(PodSpec { containers: vec![web, db, api], ..Default::default() }),
        status: None,
    })
}

/// The pod running at 10.1.2.3 with these of its containers running (`containerd://<name>`).
fn running_at_pod_ip(containers: &[&str]) -> PodStatus {
    let started = k8s_openapi::jiff::Timestamp::UNIX_EPOCH;
    PodStatus {
        phase: Some("Running".into()),
        pod_ip: Some("10.1.2.3".into()),
        container_statuses: Some(
            containers.iter().map(|name| running(name, &format!("containerd://{name}"), started)).collect(),
        ),
        ..Default::default()
    }
}

#[actix::test]
async fn injected_executors_run_in_place_of_the_real_ones() {
    tokio::time::pause();
    let calls = Calls::default();
    let recorder = MemoryRecorder::new();
    let pods = PodRegistry::new();
    let engine = Engine::builder(Arc::new(pods.clone()))
        .recorder(Arc::new(recorder.clone()))
        .executors(Executors {
            http: Some(Arc::new(FailingHttp(calls.clone()))),
            tcp: Some(Arc::new(PassingTcp(calls.clone()))),
            grpc: Some(Arc::new(PassingGrpc(calls.clone()))),
        })
        .start();
    let pod = pod();
    pods.upsert(pod.clone());
    engine.sync_pod(pod.clone(), running_at_pod_ip(&["web", "db", "api"])).await.unwrap();
    // The first probes run within one period (the start-up jitter).
    run_for(Duration::from_millis(10_500)).await;

    let mut seen = calls.all();
    seen.sort();
    seen.dedup();
    assert_eq!(
        seen,
        [
            "grpc 10.1.2.3:50051 service=api.v1 2s",
            "http http://10.1.2.3:8080/healthz 2s",
            "tcp 10.1.2.3:5432 2s",
        ],
        "the named port resolved, the pod IP as host, the probe's timeout"
    );
    // The prober's own mapping and events around the fake's answer.
    assert!(
        recorder
            .rendered()
            .iter()
            .any(|e| e == "Warning Unhealthy Readiness probe failed: HTTP probe failed with statuscode: 503"),
        "{:?}",
        recorder.rendered()
    );
    let stored = engine.pipeline().pod_status("uid-shop").await.unwrap().unwrap();
    let ready: Vec<(String, bool)> =
        stored.container_statuses.iter().flatten().map(|c| (c.name.clone(), c.ready)).collect();
    for (name, expected) in [("web", false), ("db", true), ("api", true)] {
        assert!(ready.contains(&(name.to_owned(), expected)), "{name} ready={expected}: {ready:?}");
    }
}

/// A TCP executor that never answers, and counts its calls.
struct HangingTcp(Calls);
impl TcpExecutor for HangingTcp {
    fn probe<'a>(&'a self, host: &'a str, port: u16, _timeout: Duration) -> BoxFuture<'a, Probed> {
        self.0.push(format!("tcp {host}:{port}"));
        Box::pin(futures::future::pending())
    }
}

/// An injected executor that never answers does not hold its worker for good: 2 minutes past
/// the probe's timeout, as a command runner is, the probe is given up on (an error: its result
/// discarded) and the next probe runs.
#[actix::test]
async fn an_injected_executor_that_never_answers_is_given_up_on() {
    tokio::time::pause();
    let calls = Calls::default();
    let pods = PodRegistry::new();
    let engine = Engine::builder(Arc::new(pods.clone()))
        .executors(Executors { tcp: Some(Arc::new(HangingTcp(calls.clone()))), ..Default::default() })
        .start();
    let pod = pod();
    pods.upsert(pod.clone());
    engine.sync_pod(pod, running_at_pod_ip(&["db"])).await.unwrap();
    // The first probe within a period (the start-up jitter), given up on 2 s + 120 s later.
    run_for(Duration::from_secs(10)).await;
    assert_eq!(calls.all().len(), 1, "{:?}", calls.all());
    run_for(Duration::from_secs(125)).await;
    assert_eq!(calls.all().len(), 2, "the next probe ran: {:?}", calls.all());
}
