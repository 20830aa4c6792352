//! The probe host policy against real servers on loopback: the pod IP is 127.0.0.1, "another
//! host" is 127.0.0.2 (a different loopback address) or `localhost` by name.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use k8s_openapi::api::core::v1::{Container, HTTPGetAction, Pod, PodStatus, Probe, TCPSocketAction};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use probelet::container::ContainerId;
use probelet::contracts::MemoryRecorder;
use probelet::local_runner::LocalCommandRunner;
use probelet::prober::{ProbeHostPolicy, ProbeKind, ProbeResult, Prober};
use probelet::status::probe_status::PodProbeStatus;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpListener;

const POD_IP: &str = "127.0.0.1";

/// An HTTP server on `ip` that answers every request with `response`, counting connections.
async fn server(
    ip: &str,
    response: impl Fn(u16) -> String + Send + Sync + 'static,
) -> (u16, Arc<AtomicUsize>) {
    let listener = TcpListener::bind((ip, 0)).await.unwrap();
    let port = listener.local_addr().unwrap().port();
    let connections = Arc::new(AtomicUsize::new(0));
    let counted = connections.clone();
    let response = Arc::new(response);
    tokio::spawn(async move {
        while let Ok((mut stream, _)) = listener.accept().await {
            counted.fetch_add(1, Ordering::SeqCst);
            let response = response.clone();
            tokio::spawn(async move {
                let mut buf = vec![0u8; 4096];
                let _ = stream.read(&mut buf).await;
                let _ = stream.write_all(response(port).as_bytes()).await;
                let _ = stream.shutdown().await;
            });
        }
    });
    (port, connections)
}

/// Waits (bounded) until `counter` reaches `expected`: the server counts a connection when it
/// accepts it, which can be after the probe's connect returned.
async fn accepted(counter: &AtomicUsize, expected: usize) -> usize {
    let _ = tokio::time::timeout(Duration::from_secs(5), async {
        while counter.load(Ordering::SeqCst) < expected {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    })
    .await;
    counter.load(Ordering::SeqCst)
}

fn ok(_: u16) -> String {
    "HTTP/1.1 200 OK\r\nContent-Length: 2\r\nConnection: close\r\n\r\nok".to_owned()
}

fn pod_with(probe: Probe) -> (Pod, Container) {
    let container = Container { name: "app".into(), readiness_probe: Some(probe), ..Default::default() };
    let pod = Pod {
        metadata: ObjectMeta {
            name: Some("web".into()),
            namespace: Some("default".into()),
            uid: Some("uid-web".into()),
            ..Default::default()
        },
        ..Default::default()
    };
    (pod, container)
}

fn http_probe(host: Option<&str>, port: u16) -> Probe {
    Probe {
        http_get: Some(HTTPGetAction {
            host: host.map(str::to_owned),
            port: IntOrString::Int(i32::from(port)),
            path: Some("/healthz".into()),
            ..Default::default()
        }),
        timeout_seconds: Some(2),
        ..Default::default()
    }
}

fn tcp_probe(host: Option<&str>, port: u16) -> Probe {
    Probe {
        tcp_socket: Some(TCPSocketAction {
            host: host.map(str::to_owned),
            port: IntOrString::Int(i32::from(port)),
        }),
        timeout_seconds: Some(2),
        ..Default::default()
    }
}

/// Runs the readiness probe under `policy`; the result and the events' messages.
async fn run(policy: ProbeHostPolicy, probe: Probe) -> (ProbeResult, Vec<String>) {
    run_on(policy, probe, Some(POD_IP)).await
}

/// [`run`] for a pod whose IP is `pod_ip`.
async fn run_on(policy: ProbeHostPolicy, probe: Probe, pod_ip: Option<&str>) -> (ProbeResult, Vec<String>) {
    let recorder = MemoryRecorder::new();
    let prober =
        Prober::new(Arc::new(LocalCommandRunner::new()), Arc::new(recorder.clone())).with_host_policy(policy);
    let (pod, container) = pod_with(probe);
    let status = PodProbeStatus::from(&PodStatus { pod_ip: pod_ip.map(Into::into), ..Default::default() });
    let result = tokio::time::timeout(
        Duration::from_secs(10),
        prober.probe(ProbeKind::Readiness, &pod, &status, &container, &ContainerId::parse("local://1")),
    )
    .await
    .unwrap()
    .unwrap();
    (result, recorder.events().into_iter().map(|e| e.message).collect())
}

#[tokio::test]
async fn by_default_a_probe_reaches_the_host_it_names() {
    let (port, connections) = server("127.0.0.2", ok).await;
    assert_eq!(run(ProbeHostPolicy::Any, http_probe(Some("127.0.0.2"), port)).await.0, ProbeResult::Success);
    assert_eq!(run(ProbeHostPolicy::Any, tcp_probe(Some("127.0.0.2"), port)).await.0, ProbeResult::Success);
    assert_eq!(accepted(&connections, 2).await, 2);
}

#[tokio::test]
async fn pod_ip_policy_fails_probes_naming_another_host_without_connecting() {
    let (port, connections) = server("127.0.0.2", ok).await;
    let (result, events) = run(ProbeHostPolicy::PodIp, http_probe(Some("127.0.0.2"), port)).await;
    assert_eq!(result, ProbeResult::Failure);
    assert_eq!(
        events,
        [
            "Readiness probe failed: httpGet.host \"127.0.0.2\" is not allowed: the probe host policy only lets \
          probes connect to the pod IP \"127.0.0.1\""
        ]
    );
    let (result, events) = run(ProbeHostPolicy::PodIp, tcp_probe(Some("localhost"), port)).await;
    assert_eq!(result, ProbeResult::Failure);
    assert!(
        events[0].starts_with("Readiness probe failed: tcpSocket.host \"localhost\" is not allowed"),
        "{events:?}"
    );
    // One allowed probe afterwards: had the refused ones connected, they would be counted first.
    assert_eq!(run(ProbeHostPolicy::Any, tcp_probe(Some("127.0.0.2"), port)).await.0, ProbeResult::Success);
    assert_eq!(accepted(&connections, 1).await, 1, "no connection to another host");

    // The pod's own IP, implied or written out, is probed as usual.
    let (own, own_connections) = server(POD_IP, ok).await;
    assert_eq!(run(ProbeHostPolicy::PodIp, http_probe(None, own)).await.0, ProbeResult::Success);
    assert_eq!(run(ProbeHostPolicy::PodIp, http_probe(Some(POD_IP), own)).await.0, ProbeResult::Success);
    assert_eq!(run(ProbeHostPolicy::PodIp, tcp_probe(None, own)).await.0, ProbeResult::Success);
    assert_eq!(accepted(&own_connections, 3).await, 3);
}

/// A pod without an IP: an unset host would be the agent's own loopback (Go's empty host),
/// which only the kubelet's policy dials.
#[tokio::test]
async fn pod_ip_policy_refuses_a_pod_without_an_ip() {
    let (port, connections) = server(POD_IP, ok).await;
    for ip in [None, Some("")] {
        let (result, events) = run_on(ProbeHostPolicy::PodIp, tcp_probe(None, port), ip).await;
        assert_eq!(result, ProbeResult::Failure, "{ip:?}");
        assert_eq!(
            events,
            [
                "Readiness probe failed: the pod has no IP: the probe host policy only lets probes connect to the pod IP"
            ]
        );
    }
    assert_eq!(accepted(&connections, 0).await, 0, "nothing dialled");
    assert_eq!(run_on(ProbeHostPolicy::Any, tcp_probe(None, port), None).await.0, ProbeResult::Success);
}

#[tokio::test]
async fn redirects_stay_on_the_pod_ip_under_either_policy() {
    let (other, other_connections) = server("127.0.0.2", ok).await;
    let (same_host, same_host_connections) = server(POD_IP, ok).await;
    // To another host: not followed (a success with a warning, as the kubelet's).
    let (to_other, _) = server(POD_IP, move |_| {
        format!("HTTP/1.1 302 Found\r\nLocation: http://127.0.0.2:{other}/\r\nContent-Length: 0\r\n\r\n")
    })
    .await;
    // To another port of the same host: followed.
    let (to_port, _) = server(POD_IP, move |_| {
        format!("HTTP/1.1 302 Found\r\nLocation: http://127.0.0.1:{same_host}/\r\nContent-Length: 0\r\n\r\n")
    })
    .await;
    for policy in [ProbeHostPolicy::Any, ProbeHostPolicy::PodIp] {
        let (result, events) = run(policy, http_probe(None, to_other)).await;
        assert_eq!(result, ProbeResult::Success);
        assert_eq!(events, ["Readiness probe warning: Probe terminated redirects, Response body: "]);
        let (result, events) = run(policy, http_probe(None, to_port)).await;
        assert_eq!((result, events.len()), (ProbeResult::Success, 0));
    }
    assert_eq!(accepted(&same_host_connections, 2).await, 2, "followed to the same host's other port");
    assert_eq!(other_connections.load(Ordering::SeqCst), 0, "never followed to another host");
}
