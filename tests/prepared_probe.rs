//! A probe the real prober prepared once per status ([`ProbeRunner::prepare`]) runs exactly what
//! [`ProbeRunner::probe_with_memo`] runs for the same arguments: the same result, output, event
//! and observer record, against real servers on 127.0.0.1 (docs/benchmarks.md, "A probe
//! prepared once per status").

use std::future::Future;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use k8s_openapi::api::core::v1::{
    Container, ContainerPort, HTTPGetAction, Pod, PodSpec, PodStatus, Probe, TCPSocketAction,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use probelet::container::ContainerId;
use probelet::contracts::{MemoryRecorder, ProbeObserver, ProbeRecord};
use probelet::local_runner::LocalCommandRunner;
use probelet::prober::{
    PodContainer, ProbeHostPolicy, ProbeKind, ProbeMemo, ProbeResult, ProbeRun, ProbeRunner, Prober,
};
use probelet::status::probe_status::PodProbeStatus;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpListener;

/// Keeps every record it is told of.
#[derive(Default)]
struct Records(Mutex<Vec<ProbeRecord<'static>>>);

impl ProbeObserver for Records {
    fn observe(&self, record: ProbeRecord<'_>) {
        self.0.lock().expect("not poisoned").push(record.into_owned());
    }
}

/// What one run left: its answer, the events recorded and the observer's record (its
/// duration zeroed: the one thing that differs between two runs).
#[derive(Debug, PartialEq)]
struct Left {
    run: ProbeRun,
    events: Vec<String>,
    record: Option<ProbeRecord<'static>>,
}

struct Setup {
    prober: Prober,
    recorder: MemoryRecorder,
    records: Arc<Records>,
    /// How many events earlier runs left.
    events_seen: Mutex<usize>,
}

impl Setup {
    fn new(observed: bool, policy: ProbeHostPolicy) -> Self {
        let recorder = MemoryRecorder::new();
        let records = Arc::new(Records::default());
        let mut prober = Prober::new(Arc::new(LocalCommandRunner::default()), Arc::new(recorder.clone()))
            .with_host_policy(policy);
        if observed {
            prober = prober.with_observer(records.clone());
        }
        Setup { prober, recorder, records, events_seen: Mutex::new(0) }
    }

    /// Takes what the last run left.
    fn left(&self, run: ProbeRun) -> Left {
        let mut seen = self.events_seen.lock().expect("not poisoned");
        let events = self.recorder.rendered().split_off(*seen);
        *seen += events.len();
        let record = self.records.0.lock().expect("not poisoned").pop().map(|mut r| {
            r.duration = Duration::ZERO;
            r
        });
        Left { run, events, record }
    }
}

/// A pod whose container `app` has `probe` as its liveness probe and a port named `web`.
fn pod(probe: Probe, pod_ip: &str, web: u16) -> (PodContainer, PodProbeStatus) {
    let port = ContainerPort { name: Some("web".into()), container_port: web.into(), ..Default::default() };
    let container = Container {
        name: "app".into(),
        ports: Some(vec![port]),
        liveness_probe: Some(probe),
        ..Default::default()
    };
    let pod = Arc::new(Pod {
        metadata: ObjectMeta {
            name: Some("web-0".into()),
            namespace: Some("shop".into()),
            uid: Some("4f1c-uid".into()),
            ..Default::default()
        },
        spec: Some(PodSpec { containers: vec![container], ..Default::default() }),
        status: None,
    });
    let status = PodStatus { pod_ip: Some(pod_ip.into()), ..Default::default() };
    let container = PodContainer::find(&pod, "app").expect("the container");
    (container, PodProbeStatus::of(&status, None))
}

fn tcp(port: IntOrString, host: Option<&str>) -> Probe {
    Probe { tcp_socket: Some(TCPSocketAction { port, host: host.map(Into::into) }), ..Default::default() }
}

/// Runs the probe twice prepared, then once through `probe_with_memo`, and checks all three
/// left the same; returns what they left.
async fn same_either_way(setup: &Setup, container: &PodContainer, status: PodProbeStatus) -> Left {
    let id = ContainerId::parse("containerd://abc");
    let status = Arc::new(status);
    let timeout = Duration::from_secs(2);
    let kind = ProbeKind::Liveness;
    let prepared =
        setup.prober.prepare(kind, container, &status, &id, timeout).expect("the real prober prepares");
    let first = setup.left(prepared.clone().run(status.clone()).await);
    let second = setup.left(prepared.run(status.clone()).await);
    let direct = setup.prober.probe_with_memo(
        kind,
        container.pod().clone(),
        status,
        container.clone(),
        id,
        timeout,
        ProbeMemo::default(),
    );
    let direct = setup.left(direct.await);
    assert_eq!(first, second, "a prepared probe runs the same every time");
    assert_eq!(first, direct, "a prepared probe runs what probe_with_memo runs");
    first
}

/// Bounds a test's wall time.
async fn bounded<T>(fut: impl Future<Output = T>) -> T {
    tokio::time::timeout(Duration::from_secs(20), fut).await.expect("test took too long")
}

#[tokio::test]
async fn a_prepared_tcp_probe_runs_as_the_dispatcher_does() {
    bounded(async {
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let open = listener.local_addr().expect("addr").port();
        let closed = {
            let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
            listener.local_addr().expect("addr").port()
        };
        let policies =
            [(true, ProbeHostPolicy::Any), (false, ProbeHostPolicy::Any), (true, ProbeHostPolicy::PodIp)];
        for (observed, policy) in policies {
            let setup = Setup::new(observed, policy);
            let refused = "connection refused";
            // The pod IP dialled directly (the prepared address), by number and by a port name;
            // a host of its own (refused by the `PodIp` policy unless it is the pod IP); an
            // empty host; no pod IP (the local host, as upstream); a pod IP that is no address
            // (dialled by name: one the resolver refuses at once, so no lookup leaves the
            // machine); a port name the container does not have.
            let cases = [
                (tcp(IntOrString::Int(open.into()), None), "127.0.0.1", None),
                (tcp(IntOrString::String("web".into()), None), "127.0.0.1", None),
                (tcp(IntOrString::Int(closed.into()), None), "127.0.0.1", Some(refused)),
                (tcp(IntOrString::Int(open.into()), Some("127.0.0.1")), "", None),
                (tcp(IntOrString::Int(open.into()), Some("127.0.0.1")), "127.0.0.1", None),
                (tcp(IntOrString::Int(closed.into()), Some("")), "127.0.0.1", Some(refused)),
                (tcp(IntOrString::Int(open.into()), None), "", None),
                (tcp(IntOrString::Int(open.into()), None), "a!b", Some("lookup a!b: no such host")),
                (tcp(IntOrString::String("nope".into()), None), "127.0.0.1", Some("nope")),
            ];
            for (probe, pod_ip, failure) in cases {
                let (container, status) = pod(probe.clone(), pod_ip, open);
                let left = same_either_way(&setup, &container, status).await;
                let what = format!("{probe:?} at {pod_ip:?} under {policy:?}");
                let host = probe.tcp_socket.as_ref().and_then(|t| t.host.as_deref()).unwrap_or_default();
                let failure = match policy {
                    ProbeHostPolicy::PodIp if !host.is_empty() && host != pod_ip => Some("is not allowed"),
                    // No pod IP: the agent's own loopback, which the policy refuses.
                    ProbeHostPolicy::PodIp if host.is_empty() && pod_ip.is_empty() => {
                        Some("the pod has no IP")
                    }
                    _ => failure,
                };
                match failure {
                    None => assert_eq!(left.run.result, Ok(ProbeResult::Success), "{what}"),
                    Some(text) => {
                        assert_ne!(left.run.result, Ok(ProbeResult::Success), "{what}");
                        assert!(left.events.iter().any(|e| e.contains(text)), "{what}: {:?}", left.events);
                    }
                }
                if observed {
                    let record = left.record.expect("the observer's record");
                    let names = (&*record.pod_uid, &*record.namespace, &*record.pod, &*record.container);
                    assert_eq!(names, ("4f1c-uid", "shop", "web-0", "app"), "{what}");
                } else {
                    assert_eq!(left.record, None, "{what}");
                }
            }
        }
        drop(listener);
    })
    .await;
}

/// An HTTP probe prepared once builds its request once (the memo it keeps) and sends the same
/// request at every run.
#[tokio::test]
async fn a_prepared_http_probe_sends_the_same_request_every_time() {
    bounded(async {
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let port = listener.local_addr().expect("addr").port();
        let requests = Arc::new(Mutex::new(Vec::new()));
        let seen = requests.clone();
        tokio::spawn(async move {
            loop {
                let Ok((mut stream, _)) = listener.accept().await else { return };
                let mut buf = vec![0; 4096];
                let n = stream.read(&mut buf).await.unwrap_or(0);
                seen.lock().expect("not poisoned").push(String::from_utf8_lossy(&buf[..n]).into_owned());
                let _ = stream.write_all(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok").await;
            }
        });
        let probe = Probe {
            http_get: Some(HTTPGetAction {
                port: IntOrString::Int(port.into()),
                path: Some("/healthz".into()),
                ..Default::default()
            }),
            ..Default::default()
        };
        let setup = Setup::new(true, ProbeHostPolicy::Any);
        let (container, status) = pod(probe, "127.0.0.1", port);
        let left = same_either_way(&setup, &container, status).await;
        assert_eq!(left.run.result, Ok(ProbeResult::Success));
        let requests = requests.lock().expect("not poisoned").clone();
        assert_eq!(requests.len(), 3);
        assert!(requests[0].starts_with("GET /healthz HTTP/1.1\r\n"), "{requests:?}");
        assert_eq!(requests[0], requests[1], "the prepared probe's two runs");
        assert_eq!(requests[0], requests[2], "and probe_with_memo's");
    })
    .await;
}
