//! End to end: the agent binary in cluster mode against the fake API server, with its private
//! endpoints behind TokenReview and SubjectAccessReview like the kubelet's authenticated port.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use probelet_test_support as support;

use std::process::Stdio;

use support::apiserver::FakeApiServer;
use support::apiserver::reviews::{DEFAULT_AUDIENCE, service_account_user};
use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::process::Child;

const TOKENREVIEWS: &str = "/apis/authentication.k8s.io/v1/tokenreviews";
const SUBJECTACCESSREVIEWS: &str = "/apis/authorization.k8s.io/v1/subjectaccessreviews";

/// Starts the agent on a kubeconfig for the fake; returns it with its HTTP address.
async fn start_agent(
    fake: &FakeApiServer,
    name: &str,
    extra: &[&str],
) -> (Child, String, support::agent::TempFile) {
    let (mut agent, kubeconfig) = support::agent::spawn_cluster_agent(
        env!("CARGO_BIN_EXE_probelet"),
        &fake.url(),
        &format!("auth-{name}"),
        extra,
        Stdio::piped(),
        Stdio::null(),
    );
    let mut lines = BufReader::new(agent.stdout.take().unwrap()).lines();
    let addr = support::agent::banner_addr(&mut lines).await;
    (agent, addr, kubeconfig)
}

use support::agent::get;

fn reviews_sent(fake: &FakeApiServer) -> Vec<(String, serde_json::Value)> {
    fake.requests()
        .into_iter()
        .filter(|r| r.path == TOKENREVIEWS || r.path == SUBJECTACCESSREVIEWS)
        .map(|r| (r.path, r.body.unwrap_or_default()))
        .collect()
}

#[tokio::test]
async fn private_endpoints_need_a_reviewed_token() {
    let fake = FakeApiServer::start().await;
    let reader = "system:serviceaccount:monitoring:reader";
    {
        let mut reviews = fake.reviews();
        reviews.add_token(
            "reader-token",
            service_account_user("monitoring", "reader", "uid-r", "jti-r"),
            &[DEFAULT_AUDIENCE],
        );
        reviews.add_token(
            "other-token",
            service_account_user("monitoring", "other", "uid-o", "jti-o"),
            &[DEFAULT_AUDIENCE],
        );
        reviews.allow(reader, "get", "nodes", "pods", "probelet-pods-readers", "probelet-pods-reader");
        reviews.add_token(
            "proxy-token",
            service_account_user("monitoring", "proxy", "uid-p", "jti-p"),
            &[DEFAULT_AUDIENCE],
        );
        reviews.allow(
            "system:serviceaccount:monitoring:proxy",
            "get",
            "nodes",
            "proxy",
            "probelet-proxy-readers",
            "probelet-proxy-reader",
        );
        reviews.add_token(
            "prometheus-token",
            service_account_user("monitoring", "prometheus", "uid-m", "jti-m"),
            &[DEFAULT_AUDIENCE],
        );
        reviews.allow(
            "system:serviceaccount:monitoring:prometheus",
            "get",
            "nodes",
            "metrics",
            "probelet-metrics-readers",
            "probelet-metrics-reader",
        );
    }
    let (mut agent, addr, kubeconfig) =
        start_agent(&fake, "webhook", &["--authorization-mode", "webhook"]).await;
    // No --tls-cert-file: a self-signed certificate, as the kubelet makes, so that no token
    // crosses the network in the clear.
    assert!(addr.starts_with("https://"), "{addr}");

    assert_eq!(get(&addr, "/healthz", None).await, (200, "ok".into()));
    // Ready once the pod source has listed the node's pods, which may come after the banner
    // (a CI run caught it at 503 on a busy machine): open to anyone either way.
    let deadline = tokio::time::Instant::now() + std::time::Duration::from_secs(30);
    loop {
        let code = get(&addr, "/readyz", None).await.0;
        if code == 200 {
            break;
        }
        assert_eq!(code, 503, "/readyz is not ready yet or ready, never refused");
        assert!(tokio::time::Instant::now() < deadline, "/readyz never ready");
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
    // /metrics names every probed pod and container: nodes/metrics, as the kubelet's.
    assert_eq!(get(&addr, "/metrics", None).await, (401, "Unauthorized".into()));
    let (code, text) = get(&addr, "/metrics", Some("prometheus-token")).await;
    assert_eq!(code, 200, "{text}");
    assert!(text.contains("# TYPE"), "{text}");
    assert_eq!(get(&addr, "/pods", None).await, (401, "Unauthorized".into()));
    assert_eq!(get(&addr, "/pods", Some("garbage")).await, (401, "Unauthorized".into()));
    assert_eq!(
        get(&addr, "/pods", Some("other-token")).await,
        (
            403,
            "Forbidden (user=system:serviceaccount:monitoring:other, verb=get, resource=nodes, subresource(s)=[pods proxy])\n"
                .into()
        )
    );
    assert!(
        reviews_sent(&fake).iter().all(|(_, body)| body["spec"]["token"] != ""),
        "no empty token is sent"
    );

    fake.clear_requests();
    let (code, body) = get(&addr, "/pods", Some("reader-token")).await;
    assert_eq!(code, 200, "{body}");
    assert_eq!(serde_json::from_str::<serde_json::Value>(&body).unwrap()["kind"], "PodList");
    let sent = reviews_sent(&fake);
    assert_eq!(sent.len(), 2, "one TokenReview, one SubjectAccessReview: {sent:?}");
    assert_eq!(sent[0].0, TOKENREVIEWS);
    assert_eq!(sent[0].1["spec"], serde_json::json!({"token": "reader-token"}));
    assert_eq!(sent[1].0, SUBJECTACCESSREVIEWS);
    assert_eq!(sent[1].1["spec"]["user"], reader);
    assert_eq!(sent[1].1["spec"]["uid"], "uid-r");
    assert_eq!(
        sent[1].1["spec"]["resourceAttributes"],
        serde_json::json!({"verb": "get", "version": "v1", "resource": "nodes", "subresource": "pods", "name": "node-a"})
    );

    // Cached: the same token on the same endpoint asks nothing more.
    fake.clear_requests();
    assert_eq!(get(&addr, "/pods/default/none/probes", Some("reader-token")).await.0, 404);
    assert!(reviews_sent(&fake).is_empty(), "answered from the caches");
    // /metrics maps to nodes/metrics alone, which the reader is not granted either.
    assert_eq!(
        get(&addr, "/metrics", Some("reader-token")).await,
        (
            403,
            "Forbidden (user=system:serviceaccount:monitoring:reader, verb=get, resource=nodes, subresource(s)=[metrics])\n"
                .into()
        )
    );
    // /events maps to nodes/proxy, which the reader is not granted.
    assert_eq!(get(&addr, "/events", Some("reader-token")).await.0, 403);
    // So does the status page, which shows the events beside the pods.
    assert_eq!(get(&addr, "/", None).await, (401, "Unauthorized".into()));
    assert_eq!(
        get(&addr, "/", Some("reader-token")).await,
        (
            403,
            "Forbidden (user=system:serviceaccount:monitoring:reader, verb=get, resource=nodes, subresource(s)=[proxy])\n"
                .into()
        )
    );
    let (code, page) = get(&addr, "/", Some("proxy-token")).await;
    assert_eq!(code, 200, "{page}");
    assert!(page.starts_with("<!DOCTYPE html>"), "{page}");

    agent.start_kill().unwrap();
    let _ = agent.wait().await;
    let _ = std::fs::remove_file(&kubeconfig);
}

#[tokio::test]
async fn on_loopback_cluster_mode_serves_everything_without_reviews() {
    let fake = FakeApiServer::start().await;
    let (mut agent, addr, kubeconfig) = start_agent(&fake, "auto", &[]).await;
    assert_eq!(get(&addr, "/pods", None).await.0, 200);
    assert_eq!(get(&addr, "/events", None).await.0, 200);
    assert_eq!(get(&addr, "/", None).await.0, 200);
    assert!(reviews_sent(&fake).is_empty());
    agent.start_kill().unwrap();
    let _ = agent.wait().await;
    let _ = std::fs::remove_file(&kubeconfig);
}

/// Clients without a valid token cannot keep `/healthz` out (docs/security.md, "Connections"):
/// requests whose token reviews the API server never answers leave their connections idle for
/// the cap's purpose, so a health check gets in; a review gives up after 10 s; and a `401`
/// closes its connection.
#[tokio::test]
async fn clients_without_a_valid_token_cannot_keep_healthz_out() {
    use support::apiserver::{Fault, FaultKind, FaultMatcher, FaultTimes};
    use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};

    let fake = FakeApiServer::start().await;
    // The API server stalls every token review.
    fake.inject(Fault {
        matcher: FaultMatcher::PathSuffix("/tokenreviews".into()),
        kind: FaultKind::Delay(std::time::Duration::from_secs(600)),
        times: FaultTimes::Always,
    });
    let cap = 8;
    let (agent, addr, kubeconfig) = start_agent(
        &fake,
        "stalled",
        &["--authorization-mode", "webhook", "--http-max-connections", &cap.to_string()],
    )
    .await;
    let host = addr.strip_prefix("https://").unwrap().to_owned();
    // Twice the cap of clients, each asking for /pods with a made-up token and then waiting.
    let mut stalled = Vec::new();
    for i in 0..2 * cap {
        let host = host.clone();
        stalled.push(tokio::spawn(async move {
            let tcp = tokio::net::TcpStream::connect(&host).await.unwrap();
            let server = rustls::pki_types::ServerName::try_from("localhost").unwrap();
            let Ok(mut tls) = support::tls::trusting_client().connect(server, tcp).await else { return };
            let request =
                format!("GET /pods HTTP/1.1\r\nHost: {host}\r\nAuthorization: Bearer made-up-{i}\r\n\r\n");
            let _ = tls.write_all(request.as_bytes()).await;
            let mut answer = Vec::new();
            let _ = tls.read_to_end(&mut answer).await;
        }));
    }
    // Every slot taken by a request waiting for its review.
    tokio::time::sleep(std::time::Duration::from_millis(500)).await;
    for _ in 0..3 {
        let health =
            tokio::time::timeout(std::time::Duration::from_secs(2), get(&addr, "/healthz", None)).await;
        assert_eq!(health.ok(), Some((200, "ok".into())), "the health check got in");
    }

    // A 401 closes the connection: the client's next request on it gets nothing.
    let tcp = tokio::net::TcpStream::connect(&host).await.unwrap();
    let server = rustls::pki_types::ServerName::try_from("localhost").unwrap();
    let mut tls = support::tls::trusting_client().connect(server, tcp).await.unwrap();
    tls.write_all(format!("GET /pods HTTP/1.1\r\nHost: {host}\r\n\r\n").as_bytes()).await.unwrap();
    let mut answer = Vec::new();
    let read = tokio::time::timeout(std::time::Duration::from_secs(5), tls.read_to_end(&mut answer)).await;
    assert!(read.is_ok(), "the connection was closed after the 401");
    let answer = String::from_utf8_lossy(&answer);
    assert!(answer.starts_with("HTTP/1.1 401"), "{answer}");
    assert!(answer.to_ascii_lowercase().contains("connection: close"), "{answer}");

    for task in stalled {
        task.abort();
    }
    support::agent::kill(agent, &kubeconfig).await;
}

/// With `RUST_LOG` set to a level of its own, the agent still keeps kube's client from logging
/// an answer it cannot read whole: a TokenReview answer echoes the token it reviewed, and
/// `RUST_LOG=info` logged it at WARN (a hostile test's finding).
#[tokio::test]
async fn a_review_answer_the_client_cannot_read_is_not_logged_whole_under_rust_log() {
    use support::apiserver::{Fault, FaultKind, FaultMatcher, FaultTimes};

    const SECRET: &str = "SECRET-SA-TOKEN-4f9a";
    let fake = FakeApiServer::start().await;
    fake.inject(Fault {
        matcher: FaultMatcher::PathSuffix("/tokenreviews".into()),
        kind: FaultKind::Body {
            code: 201,
            body: serde_json::json!({
                "kind": "TokenReview", "apiVersion": "authentication.k8s.io/v1",
                "spec": {"token": SECRET},
                "status": {"authenticated": "yes"},
            }),
        },
        times: FaultTimes::Always,
    });
    let kubeconfig = support::agent::kubeconfig_for(&fake.url(), "auth-rust-log");
    let log = std::env::temp_dir().join(format!("probelet-auth-rust-log-{}", std::process::id()));
    let mut agent = tokio::process::Command::new(env!("CARGO_BIN_EXE_probelet"))
        .args(["run", "--kubeconfig"])
        .arg(&kubeconfig)
        .args(["--node-name", "node-a", "--listen", "127.0.0.1:0", "--authorization-mode", "webhook"])
        .env("RUST_LOG", "info")
        .stdout(Stdio::piped())
        .stderr(std::fs::File::create(&log).unwrap())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    let mut lines = BufReader::new(agent.stdout.take().unwrap()).lines();
    let addr = support::agent::banner_addr(&mut lines).await;
    assert_eq!(get(&addr, "/pods", Some(SECRET)).await, (401, "Unauthorized".into()));
    // The agent writes its log through a queue of its own thread, and the line may come after
    // the answer: waited for before the SIGKILL, which would lose what is still queued.
    let expected = "Unable to authenticate the request due to an error";
    let deadline = tokio::time::Instant::now() + std::time::Duration::from_secs(30);
    while !std::fs::read_to_string(&log).unwrap().contains(expected) && tokio::time::Instant::now() < deadline
    {
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
    support::agent::kill(agent, &kubeconfig).await;
    let logged = std::fs::read_to_string(&log).unwrap();
    let _ = std::fs::remove_file(&log);
    assert!(!logged.contains(SECRET), "the token is in the log:\n{logged}");
    assert!(logged.contains(expected), "{logged}");
}
