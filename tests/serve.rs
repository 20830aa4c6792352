//! The agent's HTTP endpoints, served on 127.0.0.1 from a real pipeline.

// The real binary runs on real time: its tests read the real clocks too.
#![allow(clippy::disallowed_methods)]
// Helpers here may panic: a panic fails the test that called them.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use probelet_test_support as support;

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use probelet::contracts::{EventRecorder, EventType, ProbeObserver, ProbeRecord};
use probelet::host::events::EventLog;
use probelet::host::history::ProbeHistory;
use probelet::metrics::PrometheusRegistry;
use probelet::prober::{ProbeKind, ProbeResult, container_reference};
use probelet::serve::{
    Heartbeat, Limits, ServeState, WHOLE_NODE_ANSWERS, router_for_loopback, serve, serve_router,
    serve_router_on_own_thread, serve_router_with_tls, tls,
};
use support::kubelet::Harness;
use support::pods::{probe, running, test_pod, waiting};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

async fn get(addr: std::net::SocketAddr, path: &str) -> (u16, String) {
    let (code, _, body) = get_as(addr, path, &format!("Host: {addr}\r\n")).await;
    (code, body)
}

/// A GET with `host_lines` (`Host: …\r\n`, or none); the status, the head and the body.
async fn get_as(addr: std::net::SocketAddr, path: &str, host_lines: &str) -> (u16, String, String) {
    let mut stream = tokio::net::TcpStream::connect(addr).await.unwrap();
    stream
        .write_all(format!("GET {path} HTTP/1.1\r\n{host_lines}Connection: close\r\n\r\n").as_bytes())
        .await
        .unwrap();
    let mut response = String::new();
    stream.read_to_string(&mut response).await.unwrap();
    let code = response[9..12].parse().unwrap();
    let (head, body) = response.split_once("\r\n\r\n").unwrap_or((&response, ""));
    (code, head.to_ascii_lowercase(), body.to_owned())
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
    let events = EventLog::new(clock, "node-a");
    let ready = Arc::new(AtomicBool::new(false));
    history.observe(ProbeRecord {
        pod_uid: pod.metadata.uid.clone().unwrap().into(),
        namespace: "default".into(),
        pod: "served".into(),
        container: "app".into(),
        kind: ProbeKind::Readiness,
        result: Ok(ProbeResult::Failure),
        output: "HTTP probe failed with statuscode: 503".into(),
        duration: Duration::from_millis(3),
        waited: Duration::ZERO,
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
        heartbeat: Heartbeat::default(),
    };
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let loopback_state = state.clone();
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
    // A v1.EventList whose items are core/v1 Events with what the kubelet's recorder sets:
    // what reads `kubectl get events -o json` reads it.
    assert_eq!((events["apiVersion"].as_str(), events["kind"].as_str()), (Some("v1"), Some("EventList")));
    let list: k8s_openapi::List<k8s_openapi::api::core::v1::Event> = serde_json::from_str(&body).unwrap();
    let event = &list.items[0];
    let uid = pod.metadata.uid.clone();
    let involved = &event.involved_object;
    assert_eq!(
        (involved.api_version.as_deref(), involved.kind.as_deref(), involved.namespace.as_deref()),
        (Some("v1"), Some("Pod"), Some("default"))
    );
    assert_eq!((involved.name.as_deref(), &involved.uid), (Some("served"), &uid));
    let name = event.metadata.name.as_deref().unwrap();
    assert!(
        name.strip_prefix("served.").is_some_and(|nanos| u128::from_str_radix(nanos, 16).is_ok()),
        "the pod's name and the time in hexadecimal nanoseconds, as client-go names it: {name}"
    );
    assert_eq!(event.metadata.namespace.as_deref(), Some("default"));
    assert_eq!((event.type_.as_deref(), event.count), (Some("Warning"), Some(1)));
    assert!(event.first_timestamp.is_some() && event.last_timestamp.is_some());
    let source = event.source.as_ref().unwrap();
    assert_eq!((source.component.as_deref(), source.host.as_deref()), (Some("probelet"), Some("node-a")));
    assert_eq!(
        (event.reporting_component.as_deref(), event.reporting_instance.as_deref()),
        (Some("probelet"), Some("node-a"))
    );

    let (code, body) = get(addr, "/metrics").await;
    assert_eq!(code, 200);
    assert!(body.contains("# TYPE probelet_probe_workers gauge"), "{body}");

    // Pod data is neither cached nor sniffed, a 404 naming what was asked for included.
    for path in ["/pods", "/events", "/pods/default/served/probes", "/pods/%3Cscript%3E/x/probes"] {
        let (_, head, _) = get_as(addr, path, &format!("Host: {addr}\r\n")).await;
        assert!(head.contains("cache-control: no-store"), "{path}: {head}");
        assert!(head.contains("x-content-type-options: nosniff"), "{path}: {head}");
    }

    // On loopback without authentication, a DNS name that a web page could re-point at
    // 127.0.0.1 is refused; this host's own names are served.
    let loopback = Served::start(router_for_loopback(loopback_state), Limits::default()).await;
    let local = loopback.addr;
    let port = local.port();
    for (host, want) in [
        (format!("Host: attacker.example:{port}\r\n"), 403),
        (format!("Host: localhost.attacker.example:{port}\r\n"), 403),
        (format!("Host: 127.0.0.1:{port}\r\nHost: attacker.example\r\n"), 403),
        (format!("Host: 127.0.0.1:{port}\r\n"), 200),
        (format!("Host: localhost:{port}\r\n"), 200),
        (format!("Host: [::1]:{port}\r\n"), 200),
    ] {
        let (code, head, body) = get_as(local, "/pods", &host).await;
        assert_eq!(code, want, "{host:?}: {body}");
        // The refusal too: its text names what was asked for.
        assert!(head.contains("cache-control: no-store"), "{host:?}: {head}");
        assert!(head.contains("x-content-type-options: nosniff"), "{host:?}: {head}");
    }
    loopback.stop().await;

    let _ = stop.send(());
    server.await.unwrap().unwrap();
}

/// A connection that sent the start of a request head and then went quiet.
async fn slow_client(addr: std::net::SocketAddr) -> tokio::net::TcpStream {
    let mut stream = tokio::net::TcpStream::connect(addr).await.unwrap();
    stream.write_all(b"GET /healthz HTTP/1.1\r\nHost: slow\r\nX-Slow: ").await.unwrap();
    stream
}

/// Reads until the server closes the connection; the time it took, or `None` when it stayed open.
async fn closed_within(stream: &mut tokio::net::TcpStream, limit: Duration) -> Option<Duration> {
    let started = std::time::Instant::now();
    let mut buf = [0u8; 1024];
    tokio::time::timeout(limit, async {
        loop {
            match stream.read(&mut buf).await {
                Ok(0) | Err(_) => break,
                Ok(_) => {}
            }
        }
    })
    .await
    .ok()
    .map(|()| started.elapsed())
}

/// A listener on 127.0.0.1 serving `app` with `limits`, until [`Served::stop`].
struct Served {
    addr: std::net::SocketAddr,
    stop: tokio::sync::oneshot::Sender<()>,
    server: tokio::task::JoinHandle<std::io::Result<()>>,
}

impl Served {
    async fn start(app: axum::Router, limits: Limits) -> Served {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        let server = tokio::spawn(serve_router(listener, app, limits, async move {
            let _ = stopped.await;
        }));
        Served { addr, stop, server }
    }

    /// Stops accepting and waits (at most 5 s) for the server to end.
    async fn stop(self) {
        let _ = self.stop.send(());
        tokio::time::timeout(Duration::from_secs(5), self.server)
            .await
            .expect("the server ends")
            .unwrap()
            .unwrap();
    }
}

fn health_router() -> axum::Router {
    axum::Router::new().route("/healthz", axum::routing::get(|| async { "ok" }))
}

/// Over TLS a client that never finishes its handshake is closed after the header timeout, as
/// one that never sends its request head, and the others are served meanwhile.
#[tokio::test]
async fn a_tls_client_that_never_shakes_hands_is_closed_after_the_header_timeout() {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let limits = Limits { header_read_timeout: Duration::from_millis(500), max_connections: 64 };
    let acceptor = tls::self_signed("node-a").unwrap();
    let server =
        tokio::spawn(serve_router_with_tls(listener, health_router(), limits, Some(acceptor), async move {
            let _ = stopped.await;
        }));

    let mut silent = tokio::net::TcpStream::connect(addr).await.unwrap();
    let (code, body) = support::agent::get(&format!("https://{addr}"), "/healthz", None).await;
    assert_eq!((code, body.as_str()), (200, "ok"), "served over TLS beside the silent client");
    let took = closed_within(&mut silent, Duration::from_secs(5)).await;
    assert!(took.is_some_and(|t| t < Duration::from_secs(3)), "the silent client was closed: {took:?}");

    let _ = stop.send(());
    tokio::time::timeout(Duration::from_secs(5), server).await.unwrap().unwrap().unwrap();
}

// Wall-clock time with short configured timeouts: hyper's header timer runs against real sockets,
// which paused tokio time would advance past while the kernel still holds the bytes.
#[tokio::test]
async fn slow_clients_are_closed_after_the_header_timeout() {
    let served = Served::start(
        health_router(),
        Limits { header_read_timeout: Duration::from_millis(500), max_connections: 64 },
    )
    .await;
    let addr = served.addr;

    let mut slow = Vec::new();
    for _ in 0..20 {
        slow.push(slow_client(addr).await);
    }
    let (code, body) = tokio::time::timeout(Duration::from_secs(2), get(addr, "/healthz")).await.unwrap();
    assert_eq!((code, body.as_str()), (200, "ok"), "/healthz answers beside the slow clients");
    for stream in &mut slow {
        let took = closed_within(stream, Duration::from_secs(5)).await;
        assert!(took.is_some(), "a slow client was kept past the header timeout");
    }
    // A kept-alive connection that sends nothing more is closed after the same time.
    let mut idle = tokio::net::TcpStream::connect(addr).await.unwrap();
    idle.write_all(b"GET /healthz HTTP/1.1\r\nHost: idle\r\n\r\n").await.unwrap();
    let mut first = [0u8; 17];
    idle.read_exact(&mut first).await.unwrap();
    assert_eq!(&first, b"HTTP/1.1 200 OK\r\n");
    assert!(
        closed_within(&mut idle, Duration::from_secs(5)).await.is_some(),
        "idle keep-alive connection kept"
    );

    served.stop().await;
}

#[tokio::test]
async fn at_the_connection_cap_the_oldest_idle_client_makes_room() {
    // A header timeout far beyond the test: only the cap can close these.
    let served = Served::start(
        health_router(),
        Limits { header_read_timeout: Duration::from_secs(600), max_connections: 8 },
    )
    .await;
    let addr = served.addr;

    let mut slow = Vec::new();
    for _ in 0..40 {
        slow.push(slow_client(addr).await);
    }
    for _ in 0..5 {
        let (code, _) = tokio::time::timeout(Duration::from_secs(2), get(addr, "/healthz")).await.unwrap();
        assert_eq!(code, 200, "/healthz answers while slow clients fill the cap");
    }
    // The first 33 (and then the 7 newest beside the health checks) made room; at most 8 stay.
    let mut open = 0;
    for stream in &mut slow {
        if closed_within(stream, Duration::from_millis(200)).await.is_none() {
            open += 1;
        }
    }
    assert!(open <= 8, "{open} slow clients kept with a cap of 8");
    assert!(closed_within(&mut slow[0], Duration::from_millis(10)).await.is_some(), "the oldest went first");

    // Shutting down does not wait for clients that never finish their request head.
    served.stop().await;
}

/// Sends a whole request and reads the whole answer; the status line and the body.
async fn exchange(mut stream: tokio::net::TcpStream, path: &str) -> (String, String) {
    stream
        .write_all(format!("GET {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n").as_bytes())
        .await
        .unwrap();
    let mut response = Vec::new();
    let _ = stream.read_to_end(&mut response).await;
    let response = String::from_utf8_lossy(&response).into_owned();
    let (head, body) = response.split_once("\r\n\r\n").unwrap_or((&response, ""));
    (head.lines().next().unwrap_or_default().to_owned(), body.to_owned())
}

/// At the cap, a connection whose request has arrived but has not been read yet is not taken
/// for an idle one: it is answered, and the next client waits its turn. (Closing "the oldest
/// connection not serving a request" closed such connections unanswered.)
#[tokio::test]
async fn at_the_connection_cap_a_request_that_arrived_is_answered() {
    let served = Served::start(
        health_router(),
        Limits { header_read_timeout: Duration::from_secs(600), max_connections: 1 },
    )
    .await;
    let addr = served.addr;
    let mut clients = tokio::task::JoinSet::new();
    for _ in 0..200 {
        let stream = tokio::net::TcpStream::connect(addr).await.unwrap();
        clients.spawn(exchange(stream, "/healthz"));
    }
    let mut unanswered = 0;
    while let Some(answer) = clients.join_next().await {
        if answer.unwrap() != ("HTTP/1.1 200 OK".to_owned(), "ok".to_owned()) {
            unanswered += 1;
        }
    }
    assert_eq!(unanswered, 0, "every client sent a whole request and got its answer");
    served.stop().await;
}

/// At the cap, a connection whose answer is still being sent is not closed to make room: the
/// handler has returned, but the body has not all gone out.
#[tokio::test]
async fn at_the_connection_cap_an_answer_being_sent_is_not_cut() {
    let (release, released) = tokio::sync::oneshot::channel::<()>();
    let released = Arc::new(tokio::sync::Mutex::new(Some(released)));
    let app = health_router().route(
        "/slow",
        axum::routing::get(move || {
            let released = released.clone();
            async move {
                let rest = async move {
                    if let Some(released) = released.lock().await.take() {
                        let _ = released.await;
                    }
                    Ok::<_, std::io::Error>(bytes::Bytes::from_static(b" second half"))
                };
                let first = futures::stream::once(async {
                    Ok::<_, std::io::Error>(bytes::Bytes::from_static(b"first half"))
                });
                let chunks = futures::StreamExt::chain(first, futures::stream::once(rest));
                axum::body::Body::from_stream(chunks)
            }
        }),
    );
    let served =
        Served::start(app, Limits { header_read_timeout: Duration::from_secs(600), max_connections: 1 })
            .await;
    let addr = served.addr;

    let mut slow = tokio::net::TcpStream::connect(addr).await.unwrap();
    slow.write_all(b"GET /slow HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n").await.unwrap();
    let mut seen = Vec::new();
    while !String::from_utf8_lossy(&seen).contains("first half") {
        let mut buf = [0u8; 1024];
        let n = slow.read(&mut buf).await.unwrap();
        assert!(n > 0, "closed before the first half: {}", String::from_utf8_lossy(&seen));
        seen.extend_from_slice(&buf[..n]);
    }
    // The next client arrives while the answer is half sent; it waits for its turn.
    let next = tokio::spawn(exchange(tokio::net::TcpStream::connect(addr).await.unwrap(), "/healthz"));
    // Longer than a quiet connection is spared for: only being busy keeps this one open.
    tokio::time::sleep(Duration::from_millis(400)).await;
    let _ = release.send(());
    let mut rest = Vec::new();
    let _ = slow.read_to_end(&mut rest).await;
    seen.extend_from_slice(&rest);
    let seen = String::from_utf8_lossy(&seen);
    assert!(seen.contains("first half\r\n") && seen.ends_with(" second half\r\n0\r\n\r\n"), "{seen}");
    assert_eq!(next.await.unwrap(), ("HTTP/1.1 200 OK".to_owned(), "ok".to_owned()));
    served.stop().await;
}

/// The serving state of `h`'s engine with fresh history and events, ready, and `heartbeat`.
fn fresh_state(h: &Harness, heartbeat: Heartbeat) -> ServeState {
    let clock: probelet::clock::SharedClock = Arc::new(probelet::clock::TokioClock::new());
    ServeState {
        registry: PrometheusRegistry::global().unwrap(),
        pipeline: h.pipeline.clone(),
        pods: h.pods.clone(),
        history: ProbeHistory::new(clock.clone()),
        events: EventLog::new(clock, "node-a"),
        ready: Arc::new(AtomicBool::new(true)),
        heartbeat,
    }
}

/// A harness holding one pod whose `/pods` answer is bigger than the socket buffers can hold,
/// its serving state, and that size.
/// Serves `state`'s router on a thread of its own, as the agent does, on a free loopback port:
/// its address, the switch that stops it, and the server's end.
fn serve_on_own_thread(
    state: ServeState,
) -> (std::net::SocketAddr, tokio::sync::oneshot::Sender<()>, tokio::task::JoinHandle<std::io::Result<()>>) {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let server = serve_router_on_own_thread(
        listener,
        probelet::serve::router(state),
        Limits::default(),
        None,
        async move { drop(stopped.await) },
    )
    .unwrap();
    (addr, stop, server)
}

fn with_a_big_pod() -> (Harness, ServeState, usize) {
    let h = Harness::start();
    let mut pod = (*test_pod("big").container("app").build()).clone();
    // Bigger than the server's send buffer can grow to, so that an unread answer stays unsent.
    let big = answer_bigger_than_socket_buffers();
    pod.metadata.annotations = Some([("big".to_owned(), "x".repeat(big))].into());
    h.pods.upsert(Arc::new(pod));
    let state = fresh_state(&h, Heartbeat::default());
    (h, state, big)
}

/// Twice the largest TCP send buffer this machine allows (at least 8 MiB).
fn answer_bigger_than_socket_buffers() -> usize {
    let wmem = std::fs::read_to_string("/proc/sys/net/ipv4/tcp_wmem").unwrap_or_default();
    let largest = wmem.split_whitespace().nth(2).and_then(|v| v.parse::<usize>().ok()).unwrap_or(0);
    (2 * largest).max(8 << 20)
}

/// Whether `stream` has bytes to read within `wait`.
/// The agent serves from a thread of its own: `/healthz` answers while the main thread (the
/// actors' thread, here the test's) is busy. (That it fails once the main thread has been
/// quiet for a minute: `serve::tests::healthz_fails_once_the_main_thread_has_been_quiet_for_a_minute`.)
#[actix::test]
async fn healthz_answers_while_the_main_thread_is_busy() {
    let h = Harness::start();
    let heartbeat = Heartbeat::new();
    let state = fresh_state(&h, heartbeat.clone());
    let (addr, stop, server) = serve_on_own_thread(state);
    assert_eq!(get(addr, "/healthz").await, (200, "ok".to_owned()));

    // A client on another thread asks while this thread is blocked.
    let asked = std::thread::spawn(move || {
        use std::io::{Read, Write};
        let mut stream = std::net::TcpStream::connect(addr).unwrap();
        stream.set_read_timeout(Some(Duration::from_secs(1))).unwrap();
        stream.write_all(b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n").unwrap();
        let mut answer = String::new();
        stream.read_to_string(&mut answer).map(|_| answer)
    });
    std::thread::sleep(Duration::from_secs(2));
    let answer = asked.join().unwrap().expect("answered within 1 s while the main thread slept 2 s");
    assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");

    let _ = stop.send(());
    server.await.unwrap().unwrap();
}

/// `/pods` and the status page are answered from the statuses the status manager published,
/// without a message to it: they answer, with the pod's stored status, while the actors' thread
/// (here the test's) is blocked, as it is while thousands of containers start
/// (docs/reliability.md, "`/pods` while thousands of containers start").
#[actix::test]
async fn pods_and_the_status_page_answer_while_the_actors_thread_is_busy() {
    let h = Harness::start();
    let pod =
        test_pod("served").container("app").with_probe("app", ProbeKind::Readiness, probe(10, 1, 3)).build();
    h.sync(&pod, vec![waiting("app")]).await;
    h.sync(&pod, vec![running("app", "x://1", support::kubelet::epoch())]).await;
    let state = fresh_state(&h, Heartbeat::new());
    let (addr, stop, server) = serve_on_own_thread(state);

    for (path, want) in [("/pods", "\"containerID\":\"x://1\""), ("/", "class=\"state-running\"")] {
        let (answered, answer) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            use std::io::{Read, Write};
            let mut stream = std::net::TcpStream::connect(addr).unwrap();
            let request = format!("GET {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n");
            stream.write_all(request.as_bytes()).unwrap();
            let mut text = String::new();
            let _ = answered.send(stream.read_to_string(&mut text).map(|_| text));
        });
        // This thread runs the actors: blocked until the answer has come, it cannot serve a
        // message to the status manager meanwhile. (Without an answer it gives up after 30 s.)
        let text = answer
            .recv_timeout(Duration::from_secs(30))
            .unwrap_or_else(|_| panic!("{path}: no answer while the actors' thread was blocked"))
            .unwrap();
        assert!(text.starts_with("HTTP/1.1 200"), "{path}: {text}");
        assert!(text.contains(want), "{path}: the stored status is served: {text}");
    }

    let _ = stop.send(());
    server.await.unwrap().unwrap();
}

async fn has_data(stream: &tokio::net::TcpStream, wait: Duration) -> bool {
    let mut byte = [0u8; 1];
    matches!(tokio::time::timeout(wait, stream.peek(&mut byte)).await, Ok(Ok(n)) if n > 0)
}

/// Answers that hold every pod are built a few at a time, and a client that stops reading one
/// is dropped once it has left it unread for the header timeout: slow readers of a big `/pods`
/// can neither hold the agent's memory nor its connections, and `/healthz` answers meanwhile.
#[actix::test]
async fn readers_of_the_whole_node_are_few_at_once_and_must_keep_reading() {
    let (_h, state, big) = with_a_big_pod();
    let served = Served::start(
        probelet::serve::router(state),
        Limits { header_read_timeout: Duration::from_secs(5), max_connections: 64 },
    )
    .await;
    let addr = served.addr;

    let mut readers = Vec::new();
    for _ in 0..=WHOLE_NODE_ANSWERS {
        // A small receive window, so that the answer cannot all sit in this side's buffers.
        let socket = tokio::net::TcpSocket::new_v4().unwrap();
        socket.set_recv_buffer_size(4096).unwrap();
        let mut stream = socket.connect(addr).await.unwrap();
        stream.write_all(format!("GET /pods HTTP/1.1\r\nHost: {addr}\r\n\r\n").as_bytes()).await.unwrap();
        readers.push(stream);
        // In order, so that the last one is the one that waits.
        if readers.len() <= WHOLE_NODE_ANSWERS {
            assert!(has_data(readers.last().unwrap(), Duration::from_secs(20)).await, "answered");
        }
    }
    let waiting = readers.last().unwrap();
    assert!(!has_data(waiting, Duration::from_millis(300)).await, "the fifth waits for one of the four");
    assert_eq!(get(addr, "/healthz").await, (200, "ok".into()), "/healthz answers meanwhile");
    // The four stop reading: they are dropped after the header timeout, and the fifth is answered.
    assert!(has_data(waiting, Duration::from_secs(20)).await, "answered once the first four were dropped");
    let mut first = Vec::new();
    let _ = readers[0].read_to_end(&mut first).await;
    assert!(first.len() < big, "the answer left unread was cut: {} bytes", first.len());

    drop(readers);
    served.stop().await;
}

/// At the cap, clients waiting for a turn to read the whole node hold nothing but a place: they
/// are closed for room like idle ones, and `/healthz` is answered (it once waited for minutes
/// behind 300 clients that asked for a big `/pods` and never read).
#[actix::test]
async fn at_the_cap_clients_waiting_for_a_whole_node_answer_make_room() {
    let (_h, state, _) = with_a_big_pod();
    let cap = 2 * WHOLE_NODE_ANSWERS;
    let served = Served::start(
        probelet::serve::router(state),
        // Stalled answers are not dropped during the test.
        Limits { header_read_timeout: Duration::from_secs(60), max_connections: cap },
    )
    .await;
    let addr = served.addr;
    let mut clients = Vec::new();
    for i in 0..cap {
        let socket = tokio::net::TcpSocket::new_v4().unwrap();
        socket.set_recv_buffer_size(4096).unwrap();
        let mut stream = socket.connect(addr).await.unwrap();
        stream.write_all(format!("GET /pods HTTP/1.1\r\nHost: {addr}\r\n\r\n").as_bytes()).await.unwrap();
        if i < WHOLE_NODE_ANSWERS {
            assert!(has_data(&stream, Duration::from_secs(20)).await, "answered");
        }
        clients.push(stream);
    }
    // Every place is taken: four writing answers nobody reads, four waiting for a turn.
    let answer = tokio::time::timeout(Duration::from_secs(5), get(addr, "/healthz")).await;
    assert_eq!(answer.expect("/healthz answered at the cap"), (200, "ok".into()));
    drop(clients);
    served.stop().await;
}

/// At the cap, a client trickling its request head a byte at a time is as idle as one that
/// sends nothing: reading its bytes does not spare it, and the next client is served.
#[tokio::test]
async fn at_the_connection_cap_a_trickling_client_makes_room() {
    let served = Served::start(
        health_router(),
        Limits { header_read_timeout: Duration::from_secs(600), max_connections: 1 },
    )
    .await;
    let addr = served.addr;
    let mut trickling = tokio::net::TcpStream::connect(addr).await.unwrap();
    let trickle = tokio::spawn(async move {
        for byte in b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Slow: ".iter().cycle().take(400) {
            if trickling.write_all(&[*byte]).await.is_err() {
                return;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    });
    let next = exchange(tokio::net::TcpStream::connect(addr).await.unwrap(), "/healthz");
    let answer =
        tokio::time::timeout(Duration::from_secs(10), next).await.expect("served beside the trickle");
    assert_eq!(answer, ("HTTP/1.1 200 OK".to_owned(), "ok".to_owned()));
    trickle.abort();
    served.stop().await;
}
