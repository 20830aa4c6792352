//! The agent's HTTP endpoints, served on 127.0.0.1 from a real pipeline.

// Helpers here may panic: a panic fails the test that called them.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use probelet::contracts::{EventRecorder, EventType, ProbeObserver, ProbeRecord};
use probelet::host::events::EventLog;
use probelet::host::history::ProbeHistory;
use probelet::metrics::PrometheusRegistry;
use probelet::prober::{ProbeKind, ProbeResult, container_reference};
use probelet::serve::{ServeState, serve};
use support::kubelet::Harness;
use support::pods::{probe, running, test_pod, waiting};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

async fn get(addr: std::net::SocketAddr, path: &str) -> (u16, String) {
    let mut stream = tokio::net::TcpStream::connect(addr).await.unwrap();
    stream
        .write_all(format!("GET {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n").as_bytes())
        .await
        .unwrap();
    let mut response = String::new();
    stream.read_to_string(&mut response).await.unwrap();
    let code = response[9..12].parse().unwrap();
    let body = response.split_once("\r\n\r\n").map(|(_, b)| b.to_owned()).unwrap_or_default();
    (code, body)
}

#[actix::test]
async fn endpoints_answer_from_the_pipeline() {
    let registry = PrometheusRegistry::global().unwrap();
    let h = Harness::start();
    let pod =
        test_pod("served").container("app").with_probe("app", ProbeKind::Readiness, probe(10, 1, 3)).build();
    h.sync(&pod, vec![waiting("app")]).await;
    h.sync(&pod, vec![running("app", "x://1", support::kubelet::epoch())]).await;

    let clock: probelet::clock::SharedClock = Arc::new(probelet::clock::TokioClock::new());
    let history = ProbeHistory::new(clock.clone());
    let events = EventLog::new(clock);
    let ready = Arc::new(AtomicBool::new(false));
    history.observe(ProbeRecord {
        pod_uid: pod.metadata.uid.clone().unwrap(),
        namespace: "default".into(),
        pod: "served".into(),
        container: "app".into(),
        kind: ProbeKind::Readiness,
        result: Ok(ProbeResult::Failure),
        output: "HTTP probe failed with statuscode: 503".into(),
        duration: Duration::from_millis(3),
    });
    let container = pod.spec.as_ref().unwrap().containers[0].clone();
    events.record(
        &container_reference(&pod, &container),
        EventType::Warning,
        "Unhealthy",
        "Readiness probe failed: x",
    );

    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let state = ServeState {
        registry,
        pipeline: h.pipeline.clone(),
        pods: h.pods.clone(),
        history,
        events,
        ready: ready.clone(),
    };
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let server = tokio::spawn(serve(listener, state, async move {
        let _ = stopped.await;
    }));

    assert_eq!(get(addr, "/healthz").await, (200, "ok".into()));
    assert_eq!(get(addr, "/readyz").await.0, 503, "not ready before the pod source synced");
    ready.store(true, Ordering::SeqCst);
    assert_eq!(get(addr, "/readyz").await.0, 200);

    let (code, body) = get(addr, "/pods").await;
    assert_eq!(code, 200);
    let list: serde_json::Value = serde_json::from_str(&body).unwrap();
    assert_eq!(list["kind"], "PodList");
    let item = &list["items"][0];
    assert_eq!(item["metadata"]["name"], "served");
    let conditions = item["status"]["conditions"].as_array().unwrap();
    assert!(conditions.iter().any(|c| c["type"] == "Ready"), "the cached status is served: {item}");

    let (code, body) = get(addr, "/pods/default/served/probes").await;
    assert_eq!(code, 200);
    let probes: serde_json::Value = serde_json::from_str(&body).unwrap();
    assert_eq!(probes["probes"][0]["probe_type"], "Readiness");
    assert_eq!(probes["probes"][0]["results"][0]["result"], "Failure");
    assert_eq!(probes["probes"][0]["results"][0]["output"], "HTTP probe failed with statuscode: 503");
    assert_eq!(get(addr, "/pods/default/missing/probes").await.0, 404);

    let (_, body) = get(addr, "/events").await;
    let events: serde_json::Value = serde_json::from_str(&body).unwrap();
    assert_eq!(events["items"][0]["reason"], "Unhealthy");
    assert_eq!(events["items"][0]["involvedObject"]["fieldPath"], "spec.containers{app}");

    let (code, body) = get(addr, "/metrics").await;
    assert_eq!(code, 200);
    assert!(body.contains("# TYPE probelet_probe_workers gauge"), "{body}");

    let _ = stop.send(());
    server.await.unwrap().unwrap();
}
