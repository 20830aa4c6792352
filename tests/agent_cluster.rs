//! End to end: the real `probelet` binary in cluster mode against the fake API server. Pods
//! bound to the agent's node get readiness probed and their Ready condition patched; pods of
//! other nodes are untouched.

// The real binary runs on real time: its tests read the real clocks too.
#![allow(clippy::disallowed_methods)]
// Helpers here may panic: a panic fails the test that called them.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use probelet_test_support as support;

use std::process::Stdio;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use axum::Router;
use axum::http::StatusCode;
use axum::routing::get;
use k8s_openapi::api::core::v1::{
    Container, ContainerState, ContainerStateRunning, ContainerStateTerminated, ContainerStateWaiting,
    ContainerStatus, HTTPGetAction, Pod, PodCondition, PodSpec, PodStatus, Probe,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, Time};
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use k8s_openapi::jiff::Timestamp;
use support::apiserver::{FakeApiServer, Fault, FaultKind, FaultMatcher, FaultTimes};

fn pod(name: &str, node: &str, port: u16) -> Pod {
    Pod {
        metadata: ObjectMeta {
            name: Some(name.into()),
            namespace: Some("default".into()),
            ..Default::default()
        },
        spec: Some(PodSpec {
            node_name: Some(node.into()),
            containers: vec![Container {
                name: "app".into(),
                image: Some("app:1".into()),
                readiness_probe: Some(Probe {
                    http_get: Some(HTTPGetAction {
                        path: Some("/healthz".into()),
                        port: IntOrString::Int(i32::from(port)),
                        ..Default::default()
                    }),
                    period_seconds: Some(1),
                    timeout_seconds: Some(1),
                    success_threshold: Some(1),
                    failure_threshold: Some(1),
                    ..Default::default()
                }),
                ..Default::default()
            }],
            ..Default::default()
        }),
        // What the node's runtime (a virtual kubelet, say) published.
        status: Some(PodStatus {
            phase: Some("Running".into()),
            pod_ip: Some("127.0.0.1".into()),
            conditions: Some(vec![PodCondition {
                type_: "example.com/feature".into(),
                status: "True".into(),
                ..Default::default()
            }]),
            container_statuses: Some(vec![ContainerStatus {
                name: "app".into(),
                image: "app:1".into(),
                image_id: String::new(),
                container_id: Some(format!("containerd://{name}")),
                state: Some(ContainerState {
                    running: Some(ContainerStateRunning { started_at: Some(Time(Timestamp::now())) }),
                    ..Default::default()
                }),
                ..Default::default()
            }]),
            ..Default::default()
        }),
    }
}

fn condition(pod: &Pod, type_: &str) -> Option<PodCondition> {
    pod.status.as_ref()?.conditions.as_ref()?.iter().find(|c| c.type_ == type_).cloned()
}

/// Starts the agent binary on a kubeconfig for the fake, for node-a.
fn start_agent(
    fake: &FakeApiServer,
    name: &str,
    extra: &[&str],
) -> (tokio::process::Child, support::agent::TempFile) {
    start_agent_with(fake, name, extra, Stdio::null)
}

/// What the agent printed, stdout and stderr, line by line.
#[derive(Clone, Default)]
struct Output(Arc<std::sync::Mutex<Vec<String>>>);

impl Output {
    fn lines(&self) -> Vec<String> {
        self.0.lock().unwrap().clone()
    }

    fn with(&self, needle: &str) -> Vec<String> {
        self.lines().into_iter().filter(|l| l.contains(needle)).collect()
    }

    /// Waits (at most 5 s) for a line with `needle`: the agent may have exited before its last
    /// lines were read.
    async fn wait_for(&self, needle: &str) {
        let deadline = tokio::time::Instant::now() + Duration::from_secs(5);
        while self.with(needle).is_empty() {
            assert!(tokio::time::Instant::now() < deadline, "{needle:?} in {:?}", self.lines());
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    /// The agent's HTTP address, from its start line (`http://ADDR/pods`); `https://ADDR` when
    /// it serves TLS, as `support::agent::get` takes it.
    async fn addr(&self) -> String {
        let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
        loop {
            let found = self.lines().iter().find_map(|l| {
                if let Some(rest) = l.split("https://").nth(1) {
                    return Some(format!("https://{}", rest.split('/').next()?));
                }
                let rest = l.split("http://").nth(1)?;
                Some(rest.split('/').next()?.to_owned())
            });
            if let Some(addr) = found {
                return addr;
            }
            assert!(tokio::time::Instant::now() < deadline, "the start line within 30 s: {:?}", self.lines());
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }
}

/// [`start_agent`] with its output kept.
fn start_agent_logged(
    fake: &FakeApiServer,
    name: &str,
    extra: &[&str],
) -> (tokio::process::Child, support::agent::TempFile, Output) {
    let (mut agent, kubeconfig) = start_agent_with(fake, name, extra, Stdio::piped);
    let output = collect_output(&mut agent);
    (agent, kubeconfig, output)
}

/// What an agent started with piped output prints, kept as it comes.
fn collect_output(agent: &mut tokio::process::Child) -> Output {
    use tokio::io::{AsyncBufReadExt, BufReader};
    let output = Output::default();
    fn collect(reader: impl tokio::io::AsyncRead + Unpin + Send + 'static, output: Output) {
        tokio::spawn(async move {
            let mut lines = BufReader::new(reader).lines();
            while let Ok(Some(line)) = lines.next_line().await {
                output.0.lock().unwrap().push(line);
            }
        });
    }
    collect(agent.stdout.take().unwrap(), output.clone());
    collect(agent.stderr.take().unwrap(), output.clone());
    output
}

use support::agent::series_value as scrape;

fn start_agent_with(
    fake: &FakeApiServer,
    name: &str,
    extra: &[&str],
    output: fn() -> Stdio,
) -> (tokio::process::Child, support::agent::TempFile) {
    support::agent::spawn_cluster_agent(
        env!("CARGO_BIN_EXE_probelet"),
        &fake.url(),
        name,
        extra,
        output(),
        output(),
    )
}

use support::agent::{wait_for_event, wait_for_pod};

#[tokio::test]
async fn cluster_mode_patches_readiness_of_its_nodes_pods_only() {
    let (port, healthy) = support::health::toggled_health_server().await;

    let fake = FakeApiServer::start().await;
    fake.insert_pod(pod("mine", "node-a", port));
    fake.insert_pod(pod("theirs", "node-b", port));

    let (mut agent, kubeconfig) = start_agent(&fake, "readiness", &[]);

    wait_for_pod(&fake, "mine", "Ready=True", |p| condition(p, "Ready").is_some_and(|c| c.status == "True"))
        .await;
    let mine = fake.pod("default", "mine").unwrap();
    assert_eq!(condition(&mine, "ContainersReady").unwrap().status, "True");
    assert_eq!(condition(&mine, "example.com/feature").unwrap().status, "True", "foreign condition kept");
    let app = &mine.status.as_ref().unwrap().container_statuses.as_ref().unwrap()[0];
    assert!(app.ready);
    assert_eq!(app.started, Some(true));

    healthy.store(false, Ordering::SeqCst);
    wait_for_pod(&fake, "mine", "Ready=False", |p| {
        condition(p, "Ready").is_some_and(|c| c.status == "False")
    })
    .await;
    let ready = condition(&fake.pod("default", "mine").unwrap(), "Ready").unwrap();
    assert_eq!(ready.reason.as_deref(), Some("ContainersNotReady"));
    assert_eq!(ready.message.as_deref(), Some("containers with unready status: [app]"));

    let theirs = fake.pod("default", "theirs").unwrap();
    assert!(condition(&theirs, "Ready").is_none(), "the other node's pod is untouched: {theirs:?}");
    let touched_theirs =
        fake.requests().iter().any(|r| r.method != http::Method::GET && r.path.contains("/pods/theirs"));
    assert!(!touched_theirs, "no writes to the other node's pod");
    wait_for_event(&fake, "an Unhealthy event", |e| {
        e["reason"] == "Unhealthy"
            && e["message"].as_str().is_some_and(|m| {
                m.starts_with("Readiness probe failed: HTTP probe failed with statuscode: 503")
            })
    })
    .await;

    support::agent::stop(&mut agent, Duration::from_secs(20)).await;
    let _ = std::fs::remove_file(&kubeconfig);
}

#[tokio::test]
async fn liveness_action_delete_pod_deletes_a_pod_whose_liveness_fails() {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    let app = Router::new().route("/healthz", get(|| async { StatusCode::INTERNAL_SERVER_ERROR }));
    tokio::spawn(async move { axum::serve(listener, app).await });

    let fake = FakeApiServer::start().await;
    let mut failing = pod("failing", "node-a", port);
    let spec = failing.spec.as_mut().unwrap();
    spec.termination_grace_period_seconds = Some(30);
    let container = &mut spec.containers[0];
    container.liveness_probe = container.readiness_probe.take();
    // The probe-level grace period wins over the pod's for a liveness kill (docs/prober.md §1.7).
    container.liveness_probe.as_mut().unwrap().termination_grace_period_seconds = Some(7);
    let uid = fake.insert_pod(failing).metadata.uid.unwrap();

    let (agent, kubeconfig) = start_agent(&fake, "liveness", &["--liveness-action", "delete-pod"]);
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    let delete = loop {
        if let Some(delete) = fake.requests().into_iter().find(|r| r.method == http::Method::DELETE) {
            break delete;
        }
        assert!(tokio::time::Instant::now() < deadline, "a DELETE within 30 s: {:?}", fake.requests());
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    assert!(delete.path.ends_with("/pods/failing"), "{delete:?}");
    let body = delete.body.unwrap();
    assert_eq!(body["preconditions"]["uid"], uid.as_str(), "deleted with a UID precondition");
    assert_eq!(body["gracePeriodSeconds"], 7, "the probe's terminationGracePeriodSeconds: {body}");
    let gone = fake.pod("default", "failing").is_none_or(|p| p.metadata.deletion_timestamp.is_some());
    assert!(gone, "the pod is being deleted");

    support::agent::kill(agent, &kubeconfig).await;
}

#[tokio::test]
async fn liveness_action_delete_pod_retries_a_failed_delete() {
    let (port, probes) = counting_failing_server().await;

    let fake = FakeApiServer::start().await;
    let mut failing = pod("flaky", "node-a", port);
    let container = &mut failing.spec.as_mut().unwrap().containers[0];
    // Readiness (on the same failing target) goes on through termination, liveness stops: its
    // probes are the sign that the agent runs on while no more DELETEs come.
    container.liveness_probe = container.readiness_probe.clone();
    fake.insert_pod(failing);
    let path = "/api/v1/namespaces/default/pods/flaky";
    let arrivals = fake.arrivals(http::Method::DELETE, move |p| p == path);
    // The DELETE goes through the client without kube's retry: API Priority and Fairness's
    // 429 reaches the agent, which waits the 3 s it asks for (not its back-off's 1 s), then a
    // 500, after which it waits 2 s.
    fake.inject(Fault {
        matcher: FaultMatcher::MethodPath(http::Method::DELETE, path.into()),
        kind: FaultKind::throttled(3),
        times: FaultTimes::Times(1),
    });
    fake.inject(Fault {
        matcher: FaultMatcher::MethodPath(http::Method::DELETE, path.into()),
        kind: FaultKind::status(500),
        times: FaultTimes::Times(1),
    });

    let (agent, kubeconfig) = start_agent(&fake, "liveness-retry", &["--liveness-action", "delete-pod"]);
    let deletes = || -> Vec<Option<u16>> {
        fake.requests().into_iter().filter(|r| r.method == http::Method::DELETE).map(|r| r.code).collect()
    };
    wait_for_pod(&fake, "flaky", "being deleted", |p| p.metadata.deletion_timestamp.is_some()).await;
    assert_eq!(deletes(), [Some(429), Some(500), Some(200)]);
    let arrivals = arrivals.lock().unwrap().clone();
    let gaps: Vec<Duration> = arrivals.windows(2).map(|w| w[1] - w[0]).collect();
    assert!(gaps[0] >= Duration::from_secs(3), "the wait the 429 asked for: {gaps:?}");
    assert!(
        gaps[1] >= Duration::from_secs(2) && gaps[1] < Duration::from_secs(3),
        "the back-off's 2 s: {gaps:?}"
    );
    // Nothing more once the pod is being deleted: not the retry loop, not a second failure
    // report. Watched for longer than the next back-off step (4 s) would have been: six more
    // probes (the liveness probe's last one at most among them) are five readiness periods.
    let seen = probes.load(Ordering::SeqCst);
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    while probes.load(Ordering::SeqCst) < seen + 6 {
        assert_eq!(deletes().len(), 3, "exactly three DELETEs: {:?}", deletes());
        assert!(tokio::time::Instant::now() < deadline, "six more probes within 30 s");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert_eq!(deletes().len(), 3, "exactly three DELETEs: {:?}", deletes());

    support::agent::kill(agent, &kubeconfig).await;
}

/// A container status in the given state, for the runtime's published status.
fn container_status(name: &str, state: ContainerState) -> ContainerStatus {
    ContainerStatus {
        name: name.into(),
        image: format!("{name}:1"),
        image_id: String::new(),
        container_id: Some(format!("containerd://{name}")),
        state: Some(state),
        ..Default::default()
    }
}

#[tokio::test]
async fn liveness_action_delete_pod_ignores_containers_that_are_not_running() {
    // Liveness fails for everything: only the state of the containers keeps the pod alive.
    let failing = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let failing_port = failing.local_addr().unwrap().port();
    let app = Router::new().route("/healthz", get(|| async { StatusCode::INTERNAL_SERVER_ERROR }));
    tokio::spawn(async move { axum::serve(failing, app).await });
    // The running container's readiness probes, counted: they show the agent kept probing.
    let probes = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let counter = probes.clone();
    let healthy = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let healthy_port = healthy.local_addr().unwrap().port();
    let app = Router::new().route(
        "/healthz",
        get(move || {
            counter.fetch_add(1, Ordering::SeqCst);
            async { StatusCode::OK }
        }),
    );
    tokio::spawn(async move { axum::serve(healthy, app).await });

    let fake = FakeApiServer::start().await;
    let mut pod = pod("mixed", "node-a", healthy_port);
    let spec = pod.spec.as_mut().unwrap();
    let liveness = Probe {
        http_get: Some(HTTPGetAction {
            path: Some("/healthz".into()),
            port: IntOrString::Int(i32::from(failing_port)),
            ..Default::default()
        }),
        period_seconds: Some(1),
        failure_threshold: Some(1),
        ..Default::default()
    };
    for name in ["exited", "waiting"] {
        spec.containers.push(Container {
            name: name.into(),
            image: Some(format!("{name}:1")),
            liveness_probe: Some(liveness.clone()),
            ..Default::default()
        });
    }
    let statuses = pod.status.as_mut().unwrap().container_statuses.as_mut().unwrap();
    statuses.push(container_status(
        "exited",
        ContainerState {
            terminated: Some(ContainerStateTerminated { exit_code: 1, ..Default::default() }),
            ..Default::default()
        },
    ));
    statuses.push(container_status(
        "waiting",
        ContainerState {
            waiting: Some(ContainerStateWaiting { reason: Some("CrashLoopBackOff".into()), message: None }),
            ..Default::default()
        },
    ));
    fake.insert_pod(pod);

    let (agent, kubeconfig) = start_agent(&fake, "not-running", &["--liveness-action", "delete-pod"]);
    // Five readiness periods: the liveness workers of the other containers (same period) have
    // long had their chance to report them (they write no Failure for a container that is not
    // running, docs/prober.md §9; the host would not act on one either).
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    while probes.load(Ordering::SeqCst) < 5 {
        assert!(tokio::time::Instant::now() < deadline, "five readiness probes within 30 s");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    wait_for_pod(&fake, "mixed", "a status write", |p| condition(p, "ContainersReady").is_some()).await;
    let deletes: Vec<_> = fake.requests().into_iter().filter(|r| r.method == http::Method::DELETE).collect();
    assert!(deletes.is_empty(), "no DELETE for containers that are not running: {deletes:?}");
    let mixed = fake.pod("default", "mixed").unwrap();
    assert!(mixed.metadata.deletion_timestamp.is_none(), "the pod is not being deleted");

    support::agent::kill(agent, &kubeconfig).await;
}

/// A pod of `containers` containers, each with an exec readiness probe every second.
fn exec_pod(name: &str, containers: usize) -> Pod {
    let mut pod = pod(name, "node-a", 1);
    let spec = pod.spec.as_mut().unwrap();
    let statuses = pod.status.as_mut().unwrap().container_statuses.as_mut().unwrap();
    spec.containers.clear();
    statuses.clear();
    for i in 0..containers {
        let container = format!("exec-{i}");
        spec.containers.push(Container {
            name: container.clone(),
            image: Some("app:1".into()),
            readiness_probe: Some(Probe {
                exec: Some(k8s_openapi::api::core::v1::ExecAction { command: Some(vec!["true".into()]) }),
                period_seconds: Some(1),
                timeout_seconds: Some(1),
                ..Default::default()
            }),
            ..Default::default()
        });
        let mut status = container_status(&container, running_state());
        status.container_id = Some(format!("containerd://{name}-{container}"));
        statuses.push(status);
    }
    pod
}

fn running_state() -> ContainerState {
    ContainerState {
        running: Some(ContainerStateRunning { started_at: Some(Time(Timestamp::now())) }),
        ..Default::default()
    }
}

fn exec_requests(fake: &FakeApiServer) -> usize {
    fake.requests().iter().filter(|r| r.path.ends_with("/exec")).count()
}

#[tokio::test]
async fn exec_probes_do_not_hold_status_writes_back() {
    let (port, healthy) = support::health::toggled_health_server().await;
    healthy.store(false, Ordering::SeqCst);
    let fake = FakeApiServer::start().await;
    fake.on_exec(|_, _, _, _| support::apiserver::exec::ExecReply::exit(0));
    fake.insert_pod(pod("web", "node-a", port));
    // 20 exec probes a second against a budget of 2 a second: every worker waits for a token.
    fake.insert_pod(exec_pod("execs", 20));
    let budget = ["--qps", "2", "--burst", "2", "--exec-qps", "2", "--exec-burst", "1"];
    let (agent, kubeconfig) = start_agent(&fake, "exec-budget", &budget);
    wait_for_pod(&fake, "web", "Ready=False", |p| condition(p, "Ready").is_some_and(|c| c.status == "False"))
        .await;
    // Long enough for the exec queue to fill: sharing the status budget, a status write would
    // now wait behind ~20 reservations (10 s).
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    while exec_requests(&fake) < 10 {
        assert!(tokio::time::Instant::now() < deadline, "exec probes run within 30 s");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let (execs_before, started) = (exec_requests(&fake), tokio::time::Instant::now());
    healthy.store(true, Ordering::SeqCst);
    wait_for_pod(&fake, "web", "Ready=True", |p| condition(p, "Ready").is_some_and(|c| c.status == "True"))
        .await;
    let took = started.elapsed();
    // One probe period, then the PATCH: the status budget is the status writes' own.
    // (Sharing the status budget it took 11.5 s; the bound leaves room for a loaded machine.)
    assert!(took < Duration::from_secs(6), "Ready=True took {took:?} while exec probes were saturated");
    // And the exec probes were held to their own budget meanwhile (2/s, burst 1).
    let execs = exec_requests(&fake) - execs_before;
    let allowed = 2.0 * took.as_secs_f64() + 2.0;
    assert!((execs as f64) <= allowed, "{execs} execs in {took:?}: over the exec budget");

    support::agent::kill(agent, &kubeconfig).await;
}

/// Writes the pod's container statuses as the node's runtime does: the whole list, replaced.
async fn runtime_writes(fake: &FakeApiServer, name: &str, statuses: Vec<ContainerStatus>) {
    let api: kube::Api<Pod> = kube::Api::namespaced(fake.client(), "default");
    let patch = serde_json::json!({"status": {"containerStatuses": statuses}});
    api.patch_status(name, &kube::api::PatchParams::default(), &kube::api::Patch::Merge(patch))
        .await
        .unwrap();
}

fn app_status(pod: &Pod) -> ContainerStatus {
    pod.status.as_ref().unwrap().container_statuses.as_ref().unwrap()[0].clone()
}

#[tokio::test]
async fn a_runtime_that_resets_readiness_is_counted_and_overruled() {
    let (port, healthy) = support::health::toggled_health_server().await;
    let fake = FakeApiServer::start().await;
    fake.insert_pod(pod("fought", "node-a", port));
    let (agent, kubeconfig, output) = start_agent_logged(&fake, "fights", &[]);
    let addr = output.addr().await;
    let ready = |p: &Pod| app_status(p).ready && condition(p, "Ready").is_some_and(|c| c.status == "True");
    wait_for_pod(&fake, "fought", "ready", ready).await;
    assert_eq!(scrape(&addr, "probelet_runtime_resets_total{field=\"ready\"}").await, 0.0);

    for round in 1..=3 {
        // A runtime that rebuilds the container statuses from its own state: ready and started
        // reset, the rest as it was.
        let mut reset = app_status(&fake.pod("default", "fought").unwrap());
        reset.ready = false;
        reset.started = None;
        let written = tokio::time::Instant::now();
        runtime_writes(&fake, "fought", vec![reset]).await;
        wait_for_pod(&fake, "fought", "ready again", ready).await;
        // At once, not at the syncer's next reconcile period (10 s).
        let took = written.elapsed();
        // (At the reconcile period it is 10 s; the bound leaves room for a loaded machine.)
        assert!(took < Duration::from_secs(6), "round {round}: ready again after {took:?}");
        let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
        while scrape(&addr, "probelet_runtime_resets_total{field=\"ready\"}").await < f64::from(round) {
            assert!(tokio::time::Instant::now() < deadline, "reset {round} counted within 10 s");
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        assert_eq!(scrape(&addr, "probelet_runtime_resets_total{field=\"ready\"}").await, f64::from(round));
        assert_eq!(scrape(&addr, "probelet_runtime_resets_total{field=\"started\"}").await, f64::from(round));
    }
    // The agent's own writes (Ready=True, and now a failed probe's ready=false) are no fights.
    healthy.store(false, Ordering::SeqCst);
    wait_for_pod(&fake, "fought", "not ready", |p| !app_status(p).ready).await;
    // The echo of that write arrives within milliseconds; a later failed probe (one period on)
    // is the sign that it has, and that nothing was counted for it.
    let failed = || {
        support::agent::series_sum(
            &addr,
            "prober_probe_total",
            &["probe_type=\"Readiness\"", "result=\"failed\""],
        )
    };
    let failed_before = failed().await;
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    while failed().await <= failed_before {
        assert!(tokio::time::Instant::now() < deadline, "a later failed probe within 10 s");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert_eq!(scrape(&addr, "probelet_runtime_resets_total{field=\"ready\"}").await, 3.0);

    support::agent::kill(agent, &kubeconfig).await;
}

/// A runtime that writes the pod more often than a status PATCH takes (here: an annotation every
/// 50 ms, each PATCH served 300 ms late) makes every readiness write conflict, each merged again
/// at once into the newer copy the watch brought. Every fifth conflict in a row is said at info
/// (upstream's `Failed to update status for pod`). Before, the newer copy at hand reset the
/// count: 202 conflicts in a row in a hostile test, nothing above debug.
#[tokio::test]
async fn conflicts_with_a_fast_writing_runtime_are_reported() {
    let (port, healthy) = support::health::toggled_health_server().await;
    let fake = FakeApiServer::start().await;
    fake.insert_pod(pod("busy", "node-a", port));
    let (agent, kubeconfig, output) = start_agent_logged(&fake, "busy-runtime", &[]);
    let ready = |p: &Pod| app_status(p).ready;
    wait_for_pod(&fake, "busy", "ready", ready).await;

    fake.inject(Fault {
        matcher: FaultMatcher::MethodPath(
            http::Method::PATCH,
            "/api/v1/namespaces/default/pods/busy/status".into(),
        ),
        kind: FaultKind::Delay(Duration::from_millis(300)),
        times: FaultTimes::Always,
    });
    let writer = {
        let client = fake.client();
        tokio::spawn(async move {
            let api: kube::Api<Pod> = kube::Api::namespaced(client, "default");
            for i in 0u64.. {
                let patch = serde_json::json!({"metadata": {"annotations": {"runtime/tick": i.to_string()}}});
                let _ = api
                    .patch("busy", &kube::api::PatchParams::default(), &kube::api::Patch::Merge(patch))
                    .await;
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
        })
    };
    healthy.store(false, Ordering::SeqCst);
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    while output.with("409 Conflict on 5 writes in a row").is_empty() {
        assert!(tokio::time::Instant::now() < deadline, "never reported: {:#?}", output.lines());
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let said = output.with("409 Conflict on 5 writes in a row");
    assert!(said[0].contains(" INFO ") && said[0].contains("Failed to update status for pod"), "{said:?}");
    writer.abort();
    support::agent::kill(agent, &kubeconfig).await;
}

/// A runtime that writes the pod before each of the agent's status PATCHes lands (the fake's
/// `Touch`: the pod's resourceVersion moves on first) makes every write of the container's
/// `ready` flag, under the resourceVersion precondition, conflict. From the third conflict in a
/// row the agent writes the owned conditions alone, without the precondition: the Ready
/// condition, what EndpointSlices follow, lands while the flag's writes keep conflicting, and
/// the runtime's own condition stays. Before, 202 conflicts in a row and Ready never landed.
#[tokio::test]
async fn ready_lands_while_a_runtime_keeps_every_write_conflicting() {
    let (port, _healthy) = support::health::toggled_health_server().await;
    let fake = FakeApiServer::start().await;
    fake.insert_pod(pod("raced", "node-a", port));
    let path = "/api/v1/namespaces/default/pods/raced/status";
    fake.inject(Fault {
        matcher: FaultMatcher::MethodPath(http::Method::PATCH, path.into()),
        kind: FaultKind::Touch,
        times: FaultTimes::Always,
    });
    let (agent, kubeconfig) = start_agent(&fake, "raced", &[]);
    let conflicts = || {
        fake.requests()
            .iter()
            .filter(|r| r.method == http::Method::PATCH && r.path == path && r.code == Some(409))
            .count()
    };
    let on_api = wait_for_pod(&fake, "raced", "Ready=True", |p| {
        condition(p, "Ready").is_some_and(|c| c.status == "True")
    })
    .await;
    assert!(!app_status(&on_api).ready, "the container's flag has not landed: {on_api:?}");
    assert_eq!(
        condition(&on_api, "example.com/feature").map(|c| c.status).as_deref(),
        Some("True"),
        "the runtime's condition stays"
    );
    let at_ready = conflicts();
    assert!(at_ready >= 3, "Ready landed after {at_ready} conflicts");

    // The flag is still written under the precondition, and still conflicts; Ready stays.
    let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
    while conflicts() < at_ready + 2 {
        assert!(tokio::time::Instant::now() < deadline, "the conflicts go on: {} so far", conflicts());
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let on_api = fake.pod("default", "raced").unwrap();
    assert!(condition(&on_api, "Ready").is_some_and(|c| c.status == "True"), "{on_api:?}");
    assert!(!app_status(&on_api).ready, "{on_api:?}");
    support::agent::kill(agent, &kubeconfig).await;
}

/// The status writes go through a client without kube's own retry: a 503 reaches the syncer
/// (and its metrics), which sends the write again after its back-off (0.5 s, then 1 s; the
/// syncer's tests time it), every request counted against `--qps`. kube's retry had sent it
/// again within milliseconds, three requests in 20 ms, and no 503 was ever counted.
#[tokio::test]
async fn a_failed_status_write_is_the_syncers_to_retry_not_the_clients() {
    let (port, _healthy) = support::health::toggled_health_server().await;
    let fake = FakeApiServer::start().await;
    fake.insert_pod(pod("throttled", "node-a", port));
    fake.inject(Fault {
        matcher: FaultMatcher::MethodPath(
            http::Method::PATCH,
            "/api/v1/namespaces/default/pods/throttled/status".into(),
        ),
        kind: FaultKind::status(503),
        times: FaultTimes::Times(2),
    });
    let (agent, kubeconfig, output) = start_agent_logged(&fake, "throttled", &[]);
    let addr = output.addr().await;
    wait_for_pod(&fake, "throttled", "Ready=True", |p| {
        condition(p, "Ready").is_some_and(|c| c.status == "True")
    })
    .await;
    let codes: Vec<Option<u16>> = fake
        .requests()
        .iter()
        .filter(|r| r.method == http::Method::PATCH && r.path.ends_with("/pods/throttled/status"))
        .map(|r| r.code)
        .collect();
    assert_eq!(codes[..3], [Some(503), Some(503), Some(200)], "{codes:?}");
    let failed =
        support::agent::series_sum(&addr, "probelet_api_requests_total", &["verb=\"patch\"", "code=\"503\""])
            .await;
    assert_eq!(failed, 2.0, "each 503 reached the syncer");
    // Every client's request is counted as client-go counts a kubelet's, against the server's
    // host: the two 503s, and the pod list and watch, which the syncer's metric does not see.
    let host = format!("host=\"{}\"", fake.addr());
    let rest = "rest_client_requests_total";
    let patched = support::agent::series_sum(&addr, rest, &["method=\"PATCH\"", "code=\"503\"", &host]).await;
    assert_eq!(patched, 2.0, "each 503, counted by the client");
    let read = support::agent::series_sum(&addr, rest, &["method=\"GET\"", "code=\"200\"", &host]).await;
    assert!(read >= 2.0, "the list and the watch: {read}");
    support::agent::kill(agent, &kubeconfig).await;
}

/// API Priority and Fairness throttles with a plain-text `429` and a `Retry-After` header, no
/// `Status`: the agent's client keeps the wait in kube's error, and the syncer's next write of
/// the pod comes no sooner than asked (3 s), where its back-off alone would send it after 0.5 s.
#[tokio::test]
async fn a_write_throttled_by_priority_and_fairness_waits_as_asked() {
    let (port, _healthy) = support::health::toggled_health_server().await;
    let fake = FakeApiServer::start().await;
    fake.insert_pod(pod("fair", "node-a", port));
    let path = "/api/v1/namespaces/default/pods/fair/status";
    let arrivals = fake.arrivals(http::Method::PATCH, move |p| p == path);
    fake.inject(Fault {
        matcher: FaultMatcher::MethodPath(http::Method::PATCH, path.into()),
        kind: FaultKind::throttled(3),
        times: FaultTimes::Times(1),
    });
    let (agent, kubeconfig) = start_agent(&fake, "fair", &[]);
    wait_for_pod(&fake, "fair", "Ready=True", |p| condition(p, "Ready").is_some_and(|c| c.status == "True"))
        .await;
    let arrivals = arrivals.lock().unwrap().clone();
    assert!(arrivals.len() >= 2, "throttled, then written: {arrivals:?}");
    let gap = arrivals[1] - arrivals[0];
    assert!(gap >= Duration::from_secs(3), "the next write after {gap:?}, asked for 3 s");
    support::agent::kill(agent, &kubeconfig).await;
}

/// A health endpoint that always fails and counts its probes.
async fn counting_failing_server() -> (u16, Arc<std::sync::atomic::AtomicUsize>) {
    let probes = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let counter = probes.clone();
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    let app = Router::new().route(
        "/healthz",
        get(move || {
            counter.fetch_add(1, Ordering::SeqCst);
            async { StatusCode::SERVICE_UNAVAILABLE }
        }),
    );
    tokio::spawn(async move { axum::serve(listener, app).await });
    (port, probes)
}

/// The agent's status PATCHes of the pod (strategic merge; the test's runtime merge-patches).
fn patches(fake: &FakeApiServer, name: &str) -> usize {
    let path = format!("/pods/{name}/status");
    let agents = Some("application/strategic-merge-patch+json");
    fake.requests()
        .iter()
        .filter(|r| {
            r.method == http::Method::PATCH && r.path.ends_with(&path) && r.content_type.as_deref() == agents
        })
        .count()
}

/// Every PATCH of pod `name`'s status (namespace `default`) the fake has seen, whoever wrote it.
fn status_patches(fake: &FakeApiServer, name: &str) -> Vec<support::apiserver::RecordedRequest> {
    let path = format!("/api/v1/namespaces/default/pods/{name}/status");
    fake.requests().into_iter().filter(|r| r.method == http::Method::PATCH && r.path == path).collect()
}

/// Holds the next PATCH of pod `name`'s status for `delay`, as a slow API server would.
fn hold_next_status_patch(fake: &FakeApiServer, name: &str, delay: Duration) {
    fake.inject(Fault {
        matcher: FaultMatcher::MethodPath(
            http::Method::PATCH,
            format!("/api/v1/namespaces/default/pods/{name}/status"),
        ),
        kind: FaultKind::Delay(delay),
        times: FaultTimes::Times(1),
    });
}

/// The first PATCH of pod `name`'s status after the `before` first ones, once sent (20 s at most).
async fn next_status_patch(
    fake: &FakeApiServer,
    name: &str,
    before: usize,
    what: &str,
) -> support::apiserver::RecordedRequest {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
    loop {
        if let Some(patch) = status_patches(fake, name).into_iter().nth(before) {
            return patch;
        }
        assert!(tokio::time::Instant::now() < deadline, "{what} sent within 20 s");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

#[tokio::test]
async fn only_the_runtimes_writes_sync_a_pod_not_the_echo_of_the_agents_own() {
    let (port, probes) = counting_failing_server().await;
    let fake = FakeApiServer::start().await;
    let (agent, kubeconfig, output) = start_agent_logged(&fake, "echo", &[]);
    output.addr().await;
    // Past the start-up jitter window (one period), so the worker probes at once and then only
    // on its schedule or when a pod sync asks.
    tokio::time::sleep(Duration::from_millis(5500)).await;
    let mut unready = pod("unready", "node-a", port);
    let probe = unready.spec.as_mut().unwrap().containers[0].readiness_probe.as_mut().unwrap();
    probe.period_seconds = Some(5);
    fake.insert_pod(unready);
    wait_for_pod(&fake, "unready", "Ready=False", |p| {
        condition(p, "Ready").is_some_and(|c| c.status == "False") && app_status(p).started == Some(true)
    })
    .await;
    // The echo of that write has arrived (the watch is in order: a later pod's status written
    // shows it); the next scheduled probe is seconds away.
    let (marker_port, _marker_healthy) = support::health::toggled_health_server().await;
    let echo_arrived = |marker: String| {
        fake.insert_pod(pod(&marker, "node-a", marker_port));
        let fake = &fake;
        async move {
            wait_for_pod(fake, &marker, "Ready=True after the echo", |p| {
                condition(p, "Ready").is_some_and(|c| c.status == "True")
            })
            .await;
        }
    };
    echo_arrived("marker-0".into()).await;
    let settled = probes.load(Ordering::SeqCst);

    for round in 1..=3 {
        // The runtime rewrites the container status from its own state, `started` reset: a
        // sync (readiness still failing, so the one immediate probe UpdatePodStatus asks
        // for), and the agent's write of `started` again, whose echo must not sync.
        let mut status = app_status(&fake.pod("default", "unready").unwrap());
        status.image_id = format!("sha256:{round}");
        status.started = None;
        let own_writes = patches(&fake, "unready");
        runtime_writes(&fake, "unready", vec![status]).await;
        wait_for_pod(&fake, "unready", "started again", |p| app_status(p).started == Some(true)).await;
        assert_eq!(patches(&fake, "unready"), own_writes + 1, "round {round}: one write of the agent");
        echo_arrived(format!("marker-{round}")).await;
        assert_eq!(
            probes.load(Ordering::SeqCst),
            settled + round,
            "round {round}: one probe for the runtime's write, none for the echo of the agent's"
        );
    }

    support::agent::kill(agent, &kubeconfig).await;
}

/// `(apiGroup, resource, verb)` granted by the ClusterRoles of `deploy/rbac.yaml`, by role name.
fn cluster_role_grants()
-> std::collections::BTreeMap<String, std::collections::BTreeSet<(String, String, String)>> {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("deploy/rbac.yaml");
    let docs: Vec<serde_json::Value> =
        serde_saphyr::from_multiple(&std::fs::read_to_string(path).unwrap()).unwrap();
    let mut roles = std::collections::BTreeMap::new();
    for doc in docs.into_iter().filter(|d| d["kind"] == "ClusterRole") {
        let role: k8s_openapi::api::rbac::v1::ClusterRole = serde_json::from_value(doc).unwrap();
        let mut grants = std::collections::BTreeSet::new();
        for rule in role.rules.iter().flatten() {
            for group in rule.api_groups.iter().flatten() {
                for resource in rule.resources.iter().flatten() {
                    for verb in &rule.verbs {
                        grants.insert((group.clone(), resource.clone(), verb.clone()));
                    }
                }
            }
        }
        roles.insert(role.metadata.name.unwrap(), grants);
    }
    roles
}

/// The authorization checks of the requests the fake saw.
fn requested(
    requests: &[support::apiserver::RecordedRequest],
) -> std::collections::BTreeSet<(String, String, String)> {
    requests.iter().flat_map(|r| r.authorization()).map(|a| (a.group, a.resource, a.verb)).collect()
}

/// One run of the agent through every path that sends a request — watch, status writes, a
/// conflict's re-read, exec probes, events and their repeats, the liveness DELETE — and the
/// roles compared with what the API server would have authorized. A new request path (such as
/// reviewing the tokens of the agent's HTTP clients) joins by being exercised in this run.
#[tokio::test]
async fn rbac_grants_exactly_what_the_agent_requests() {
    let (port, _healthy) = support::health::toggled_health_server().await;
    let (failing_port, _probes) = counting_failing_server().await;
    let fake = FakeApiServer::start().await;
    fake.on_exec(|_, _, _, _| support::apiserver::exec::ExecReply::exit(0));
    fake.insert_pod(pod("ready", "node-a", port));
    // The first status write conflicts: the agent reads the pod again.
    fake.inject(Fault {
        matcher: FaultMatcher::MethodPath(
            http::Method::PATCH,
            "/api/v1/namespaces/default/pods/ready/status".into(),
        ),
        kind: FaultKind::status(409),
        times: FaultTimes::Times(1),
    });
    fake.insert_pod(exec_pod("exec", 1));
    // Readiness fails every second: an Unhealthy event, then its repeats.
    fake.insert_pod(pod("unready", "node-a", failing_port));
    let mut dying = pod("dying", "node-a", failing_port);
    let container = &mut dying.spec.as_mut().unwrap().containers[0];
    container.liveness_probe = container.readiness_probe.take();
    fake.insert_pod(dying);
    // A reader of the agent's private endpoints: its token is reviewed as the kubelet does.
    {
        use support::apiserver::reviews::{DEFAULT_AUDIENCE, service_account_user};
        let mut reviews = fake.reviews();
        let user = service_account_user("monitoring", "reader", "uid-r", "jti-r");
        reviews.add_token("reader-token", user, &[DEFAULT_AUDIENCE]);
        let reader = "system:serviceaccount:monitoring:reader";
        reviews.allow(reader, "get", "nodes", "pods", "pods-readers", "pods-reader");
    }
    let (agent, kubeconfig, output) = start_agent_logged(
        &fake,
        "rbac",
        &["--liveness-action", "delete-pod", "--authorization-mode", "webhook"],
    );
    let addr = output.addr().await;
    let (code, _) = support::agent::get(&addr, "/pods", Some("reader-token")).await;
    assert_eq!(code, 200, "the reader's token is accepted");

    let is_ready = |p: &Pod| condition(p, "Ready").is_some_and(|c| c.status == "True");
    wait_for_pod(&fake, "ready", "Ready=True", is_ready).await;
    wait_for_pod(&fake, "exec", "Ready=True", is_ready).await;
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    loop {
        let repeated = fake
            .events()
            .iter()
            .any(|e| e["involvedObject"]["name"] == "unready" && e["count"].as_i64() >= Some(2));
        let deleted = fake.pod("default", "dying").is_none_or(|p| p.metadata.deletion_timestamp.is_some());
        if repeated && deleted {
            break;
        }
        assert!(tokio::time::Instant::now() < deadline, "a repeated event and the DELETE within 30 s");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    support::agent::kill(agent, &kubeconfig).await;

    let requests = fake.requests();
    let forbidden: Vec<_> = requests.iter().filter(|r| r.code == Some(403)).collect();
    assert!(forbidden.is_empty(), "{forbidden:?}");
    let roles = cluster_role_grants();
    let granted: std::collections::BTreeSet<_> = roles.values().flatten().cloned().collect();
    assert_eq!(granted, requested(&requests), "the ClusterRoles grant exactly what the agent requested");
    // The optional role is what only --liveness-action delete-pod sends.
    let liveness_kill: Vec<_> =
        requests.iter().filter(|r| r.method == http::Method::DELETE).cloned().collect();
    assert_eq!(roles["probelet-delete-pods"], requested(&liveness_kill));
}

#[tokio::test]
async fn after_an_api_outage_a_new_pod_is_seen_at_once_and_the_log_says_lost_and_back() {
    let (port, _healthy) = support::health::toggled_health_server().await;
    let fake = FakeApiServer::start().await;
    fake.insert_pod(pod("before", "node-a", port));
    let (agent, kubeconfig, output) = start_agent_logged(&fake, "outage", &[]);
    let is_ready = |p: &Pod| condition(p, "Ready").is_some_and(|c| c.status == "True");
    wait_for_pod(&fake, "before", "Ready=True", is_ready).await;

    // The server stops as a real one does on SIGTERM: new connections refused, the open
    // watch silent (2 s here, 60 s on a real server), then a clean EOF; back 8 s after (kube's
    // default back-off, 0.8 s doubling to 30 s, would wait up to 6.4 s by then).
    fake.stop(Duration::from_secs(2)).await;
    tokio::time::sleep(Duration::from_secs(8)).await;
    fake.restart().await;
    let back = tokio::time::Instant::now();
    fake.insert_pod(pod("after", "node-a", port));
    wait_for_pod(&fake, "after", "Ready=True", is_ready).await;
    let took = back.elapsed();
    // 0.5–1.5 s when measured; kube's default back-off took 10.7 s. The bound leaves room for a
    // loaded machine.
    assert!(took < Duration::from_secs(4), "the new pod was probed and Ready {took:?} after the return");

    let lost = output.with("Lost the API server");
    let returned = output.with("The API server is back");
    assert_eq!((lost.len(), returned.len()), (1, 1), "one line each: {:#?}", output.lines());
    assert!(lost[0].contains(" WARN "), "{lost:?}");
    assert!(returned[0].contains(" INFO "), "{returned:?}");
    // An outage and a re-list are routine: the lost line is the only warning.
    let warnings: Vec<_> =
        output.lines().into_iter().filter(|l| l.contains(" WARN ") || l.contains(" ERROR ")).collect();
    assert_eq!(warnings, lost, "no other warnings or errors");

    support::agent::kill(agent, &kubeconfig).await;
}

/// The API server's etcd is restored from a backup taken before the agent wrote the pod's
/// status, without `--bump-revision`: resourceVersions go back below the ones the agent saw.
/// kube's watcher would ask again from its version, which the server answers 504 "Too large
/// resource version", for good; the agent lists again once that has lasted 10 s, and the listed copy,
/// older than the one it held, makes it read the pod and write its status again. Before, the
/// agent saw no change of any pod again and its merge base said the status was written.
#[tokio::test]
async fn after_an_etcd_restore_that_sets_versions_back_the_status_is_written_again() {
    let (port, _healthy) = support::health::toggled_health_server().await;
    let fake = FakeApiServer::start().await;
    fake.insert_pod(pod("restored", "node-a", port));
    let backup = fake.backup();
    let (agent, kubeconfig, output) = start_agent_logged(&fake, "etcd-restore", &[]);
    let is_ready = |p: &Pod| condition(p, "Ready").is_some_and(|c| c.status == "True");
    wait_for_pod(&fake, "restored", "Ready=True", is_ready).await;

    fake.restore(backup);
    assert!(!is_ready(&fake.pod("default", "restored").unwrap()), "the backup's status");
    let restored = tokio::time::Instant::now();
    wait_for_pod(&fake, "restored", "Ready=True again", is_ready).await;
    let took = restored.elapsed();
    // The watch asks from its version for 10 s (a lagging cache would catch up), then lists:
    // about 15 s with the watch pacing's 1, 2, 4, 8 s.
    assert!(took < Duration::from_secs(28), "written again {took:?} after the restore");
    // A pod made after the restore is seen too: the watch runs again.
    fake.insert_pod(pod("after", "node-a", port));
    wait_for_pod(&fake, "after", "Ready=True", is_ready).await;
    assert_eq!(
        output.with("has not reached the pod watch's resourceVersion").len(),
        1,
        "{:#?}",
        output.lines()
    );
    support::agent::kill(agent, &kubeconfig).await;
}

/// The pod list answered 429 with `Retry-After: 3600`: the watch has no retry of kube's (which
/// slept the hour out inside the request, the agent seeing no pod and saying nothing), so the
/// answer reaches it, and it says it waits what was asked, at most a minute
/// (`cluster::watch::tests::a_retry_after_is_waited_out_up_to_its_cap` times the wait).
#[tokio::test]
async fn a_pod_list_throttled_for_an_hour_is_waited_out_for_a_minute_and_said() {
    let fake = FakeApiServer::start().await;
    fake.inject(Fault {
        matcher: FaultMatcher::MethodPath(http::Method::GET, "/api/v1/pods".into()),
        kind: FaultKind::throttled(3600),
        times: FaultTimes::Times(1),
    });
    let (agent, kubeconfig, output) = start_agent_logged(&fake, "list-throttled", &[]);
    let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
    while output.with("asked the pod watch to wait").is_empty() {
        assert!(tokio::time::Instant::now() < deadline, "never said: {:#?}", output.lines());
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let said = output.with("asked the pod watch to wait");
    assert!(said[0].contains("asked=3600") && said[0].contains("waiting=60"), "{said:?}");
    assert!(
        output.with("Lost the API server").is_empty(),
        "a throttled list is no outage: {:#?}",
        output.lines()
    );
    support::agent::kill(agent, &kubeconfig).await;
}

#[tokio::test]
async fn container_restarts_and_pod_deletion_log_no_warnings() {
    let (port, healthy) = support::health::toggled_health_server().await;
    let fake = FakeApiServer::start().await;
    fake.insert_pod(pod("routine", "node-a", port));
    let (agent, kubeconfig, output) = start_agent_logged(&fake, "routine", &[]);
    let is_ready = |p: &Pod| condition(p, "Ready").is_some_and(|c| c.status == "True");
    wait_for_pod(&fake, "routine", "Ready=True", is_ready).await;

    for restart in 1..=3 {
        // A readiness failure, then the runtime restarts the container under a new ID while
        // the old container's results are still arriving.
        healthy.store(false, Ordering::SeqCst);
        wait_for_pod(&fake, "routine", "Ready=False", |p| !is_ready(p)).await;
        let mut status = app_status(&fake.pod("default", "routine").unwrap());
        status.container_id = Some(format!("containerd://routine-{restart}"));
        status.restart_count = restart;
        status.ready = false;
        status.state = Some(running_state());
        runtime_writes(&fake, "routine", vec![status]).await;
        healthy.store(true, Ordering::SeqCst);
        wait_for_pod(&fake, "routine", "Ready=True after the restart", is_ready).await;
    }
    let api: kube::Api<Pod> = kube::Api::namespaced(fake.client(), "default");
    api.delete("routine", &kube::api::DeleteParams::default().grace_period(0)).await.unwrap();
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    while fake.pod("default", "routine").is_some() {
        assert!(tokio::time::Instant::now() < deadline, "the pod is gone within 10 s");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    // The agent saw the deletion and stopped the workers: its workers gauge says so.
    let addr = output.addr().await;
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    while scrape(&addr, "probelet_probe_workers{probe_type=\"Readiness\"}").await != 0.0 {
        assert!(tokio::time::Instant::now() < deadline, "the readiness worker stopped within 10 s");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }

    let warnings: Vec<_> =
        output.lines().into_iter().filter(|l| l.contains(" WARN ") || l.contains(" ERROR ")).collect();
    assert!(warnings.is_empty(), "routine operation, no warnings: {warnings:#?}");

    support::agent::kill(agent, &kubeconfig).await;
}

/// With `--feature-gates=ContainerLifecycleProber=true` the probes follow the containers the
/// runtime reports: the pod goes Ready, and when the runtime reports a new instance of the
/// container (a restart), that instance is probed and made ready in its turn.
#[tokio::test]
async fn container_lifecycle_prober_probes_the_instances_the_runtime_reports() {
    let (port, _healthy) = support::health::toggled_health_server().await;
    let fake = FakeApiServer::start().await;
    fake.insert_pod(pod("cycled", "node-a", port));
    let (agent, kubeconfig) =
        start_agent(&fake, "lifecycle", &["--feature-gates=ContainerLifecycleProber=true"]);
    let ready = |p: &Pod| app_status(p).ready && condition(p, "Ready").is_some_and(|c| c.status == "True");
    wait_for_pod(&fake, "cycled", "ready", ready).await;

    let mut restarted = app_status(&fake.pod("default", "cycled").unwrap());
    restarted.container_id = Some("containerd://cycled-2".into());
    restarted.restart_count = 1;
    restarted.ready = false;
    restarted.started = Some(false);
    restarted.state = Some(ContainerState {
        running: Some(ContainerStateRunning { started_at: Some(Time(Timestamp::now())) }),
        ..Default::default()
    });
    runtime_writes(&fake, "cycled", vec![restarted]).await;
    wait_for_pod(&fake, "cycled", "the new instance ready", |p| {
        ready(p) && app_status(p).container_id.as_deref() == Some("containerd://cycled-2")
    })
    .await;

    support::agent::kill(agent, &kubeconfig).await;
}

#[tokio::test]
async fn an_invalid_probe_timing_annotation_gets_a_warning_and_the_pod_is_probed_anyway() {
    let (port, _healthy) = support::health::toggled_health_server().await;
    let fake = FakeApiServer::start().await;
    let mut bad = pod("bad-timing", "node-a", port);
    bad.metadata.annotations = Some(
        [("probelet.dev/probe-timing".to_owned(), r#"{"app": {"readiness": {"periodMs": 20}}}"#.to_owned())]
            .into(),
    );
    fake.insert_pod(bad);
    let (mut agent, kubeconfig) = start_agent(&fake, "bad-timing", &[]);

    wait_for_pod(&fake, "bad-timing", "Ready=True", |p| {
        condition(p, "Ready").is_some_and(|c| c.status == "True")
    })
    .await;
    let warning =
        wait_for_event(&fake, "an InvalidProbeTiming event", |e| e["reason"] == "InvalidProbeTiming").await;
    assert_eq!(warning["type"], "Warning");
    assert_eq!(warning["involvedObject"]["name"], "bad-timing");
    assert_eq!(
        warning["message"],
        "annotation probelet.dev/probe-timing: app.readiness.periodMs: 20 is below the floor of 100 ms; \
         probing with the probes' seconds fields"
    );

    let _ = agent.kill().await;
    let _ = std::fs::remove_file(&kubeconfig);
}

/// Replaces the pod's readiness probe in the fake's store (watches see MODIFIED): what an API
/// server with `MutableContainerProbes` on accepts from a user's update. The fake validates
/// updates as v1.35 does, which forbids it, so the store is written directly.
fn set_readiness_probe(fake: &FakeApiServer, name: &str, probe: Probe) {
    let mut pod = fake.pod("default", name).unwrap();
    pod.spec.as_mut().unwrap().containers[0].readiness_probe = Some(probe);
    fake.insert_pod(pod);
}

fn tcp_probe(port: u16) -> Probe {
    Probe {
        tcp_socket: Some(k8s_openapi::api::core::v1::TCPSocketAction {
            port: IntOrString::Int(i32::from(port)),
            ..Default::default()
        }),
        period_seconds: Some(1),
        timeout_seconds: Some(1),
        success_threshold: Some(1),
        failure_threshold: Some(1),
        ..Default::default()
    }
}

/// With `--feature-gates=MutableContainerProbes=true` a pod update from the watch that changes a
/// readiness probe (an HTTP check the server fails, replaced by a TCP check it passes) is applied
/// in place: the pod goes Ready, and a `ContainerProbeChanged` event is written.
#[tokio::test]
async fn mutable_container_probes_applies_a_probe_update_from_the_watch() {
    let (port, healthy) = support::health::toggled_health_server().await;
    healthy.store(false, Ordering::SeqCst);
    let fake = FakeApiServer::start().await;
    fake.insert_pod(pod("mutable", "node-a", port));
    let (mut agent, kubeconfig) =
        start_agent(&fake, "mutable", &["--feature-gates=MutableContainerProbes=true"]);
    wait_for_pod(&fake, "mutable", "Ready=False", |p| {
        condition(p, "Ready").is_some_and(|c| c.status == "False")
    })
    .await;

    set_readiness_probe(&fake, "mutable", tcp_probe(port));
    wait_for_pod(&fake, "mutable", "Ready=True", |p| {
        condition(p, "Ready").is_some_and(|c| c.status == "True")
    })
    .await;
    let event =
        wait_for_event(&fake, "a ContainerProbeChanged event", |e| e["reason"] == "ContainerProbeChanged")
            .await;
    assert_eq!(event["type"], "Normal");
    assert_eq!(event["message"], "Readiness probe of container app updated: handler");
    assert_eq!(event["involvedObject"]["fieldPath"], "spec.containers{app}");

    let _ = agent.kill().await;
    let _ = std::fs::remove_file(&kubeconfig);
}

/// A pod being deleted whose startup probe never succeeded: liveness and startup stop, and a
/// sync during the deletion does not write the container started (nor, with no readiness
/// probe, ready and the pod Ready), as the kubelet never regenerates the status of a pod it
/// is killing. Probelet's host syncs on every watch event, and found no startup worker.
#[tokio::test]
async fn a_deleting_pods_container_that_never_started_is_not_written_started() {
    let (port, healthy) = support::health::toggled_health_server().await;
    healthy.store(false, Ordering::SeqCst);
    let fake = FakeApiServer::start().await;
    let mut slow = pod("slow", "node-a", port);
    let app = &mut slow.spec.as_mut().unwrap().containers[0];
    app.startup_probe =
        app.readiness_probe.take().map(|probe| Probe { failure_threshold: Some(1000), ..probe });
    fake.insert_pod(slow);
    let (agent, kubeconfig) = start_agent(&fake, "never-started", &[]);
    let started = |p: &Pod| app_status(p).started;
    wait_for_pod(&fake, "slow", "app written not started", |p| started(p) == Some(false)).await;

    let api: kube::Api<Pod> = kube::Api::namespaced(fake.client(), "default");
    api.delete("slow", &kube::api::DeleteParams::default().grace_period(30)).await.unwrap();
    wait_for_pod(&fake, "slow", "being deleted", |p| p.metadata.deletion_timestamp.is_some()).await;
    // The runtime publishes something while the container is being stopped: a watch event,
    // and with it a sync of the pod.
    let mut status = app_status(&fake.pod("default", "slow").unwrap());
    status.image_id = "sha256:0123".into();
    runtime_writes(&fake, "slow", vec![status]).await;
    wait_for_pod(&fake, "slow", "the runtime's write", |p| app_status(p).image_id == "sha256:0123").await;
    // Without the fix the agent writes `started: true` within milliseconds of the event.
    let deadline = tokio::time::Instant::now() + Duration::from_secs(3);
    while tokio::time::Instant::now() < deadline {
        let pod = fake.pod("default", "slow").unwrap();
        assert_ne!(started(&pod), Some(true), "{:#?}", pod.status);
        assert!(condition(&pod, "Ready").is_none_or(|c| c.status != "True"), "{:#?}", pod.status);
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    support::agent::kill(agent, &kubeconfig).await;
}

/// A pod the runtime reports finished (`Failed`) while its container still runs (its active
/// deadline passed, the kill under way) and whose startup probe never succeeded: its probes
/// stop, and a sync meanwhile does not write the container started, nor ready. The kubelet
/// keeps the workers until the containers are dead and generates no status in between; the
/// agent, which had removed them at once, found no startup worker and wrote it started.
#[tokio::test]
async fn a_finished_pods_container_that_never_started_is_not_written_started() {
    let (port, healthy) = support::health::toggled_health_server().await;
    healthy.store(false, Ordering::SeqCst);
    let fake = FakeApiServer::start().await;
    let mut slow = pod("finished", "node-a", port);
    let app = &mut slow.spec.as_mut().unwrap().containers[0];
    app.startup_probe =
        app.readiness_probe.take().map(|probe| Probe { failure_threshold: Some(1000), ..probe });
    fake.insert_pod(slow);
    let (agent, kubeconfig) = start_agent(&fake, "finished-never-started", &[]);
    let started = |p: &Pod| app_status(p).started;
    wait_for_pod(&fake, "finished", "app written not started", |p| started(p) == Some(false)).await;

    // The runtime fails the pod, then writes again while the container is being stopped.
    let api: kube::Api<Pod> = kube::Api::namespaced(fake.client(), "default");
    let failed = serde_json::json!({"status": {"phase": "Failed", "reason": "DeadlineExceeded"}});
    api.patch_status("finished", &kube::api::PatchParams::default(), &kube::api::Patch::Merge(failed))
        .await
        .unwrap();
    wait_for_pod(&fake, "finished", "failed", |p| {
        p.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Failed")
    })
    .await;
    let mut status = app_status(&fake.pod("default", "finished").unwrap());
    status.image_id = "sha256:0123".into();
    runtime_writes(&fake, "finished", vec![status]).await;
    wait_for_pod(&fake, "finished", "the runtime's write", |p| app_status(p).image_id == "sha256:0123").await;
    let deadline = tokio::time::Instant::now() + Duration::from_secs(3);
    while tokio::time::Instant::now() < deadline {
        let pod = fake.pod("default", "finished").unwrap();
        let app = app_status(&pod);
        assert!(app.started != Some(true) && !app.ready, "{:#?}", pod.status);
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    support::agent::kill(agent, &kubeconfig).await;
}

/// A runtime that replaces a container and keeps `started` and `ready` by name (it rewrites only
/// the fields it owns): the replacement is written not started, and not ready, until its own
/// startup probe passes, as the kubelet carries `started` over only for the same container ID
/// (kubernetes#141342). Before, the inherited `started: true` stood: liveness and readiness
/// probed the new container at once and its startup probe never ran.
#[tokio::test]
async fn a_replaced_container_waits_for_its_own_startup_probe() {
    let (port, healthy) = support::health::toggled_health_server().await;
    let fake = FakeApiServer::start().await;
    let mut pod = pod("replaced", "node-a", port);
    let app = &mut pod.spec.as_mut().unwrap().containers[0];
    app.startup_probe =
        app.readiness_probe.take().map(|probe| Probe { failure_threshold: Some(1000), ..probe });
    fake.insert_pod(pod);
    let (agent, kubeconfig) = start_agent(&fake, "replaced", &[]);
    let ready = |p: &Pod| condition(p, "Ready").is_some_and(|c| c.status == "True");
    wait_for_pod(&fake, "replaced", "started and Ready", |p| app_status(p).started == Some(true) && ready(p))
        .await;

    healthy.store(false, Ordering::SeqCst);
    let mut replacement = app_status(&fake.pod("default", "replaced").unwrap());
    replacement.container_id = Some("containerd://replaced-2".into());
    replacement.restart_count = 1;
    replacement.state = Some(running_state());
    runtime_writes(&fake, "replaced", vec![replacement]).await;
    let written = wait_for_pod(&fake, "replaced", "the replacement written not started", |p| {
        let app = app_status(p);
        app.container_id.as_deref() == Some("containerd://replaced-2") && app.started == Some(false)
    })
    .await;
    assert!(!app_status(&written).ready && !ready(&written), "{:#?}", written.status);
    // And it stays so while its startup probe fails.
    let deadline = tokio::time::Instant::now() + Duration::from_secs(3);
    while tokio::time::Instant::now() < deadline {
        let pod = fake.pod("default", "replaced").unwrap();
        assert_ne!(app_status(&pod).started, Some(true), "{:#?}", pod.status);
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    support::agent::kill(agent, &kubeconfig).await;
}

/// A kubeconfig whose `tokenFile` ends in a newline (`echo TOKEN > file`): the token is sent
/// trimmed, as client-go sends it. kube kept the newline, and every request failed on the
/// client side ("invalid bearer token"), forever.
#[tokio::test]
async fn a_token_file_with_a_trailing_newline_is_read_as_client_go_reads_it() {
    let (port, _healthy) = support::health::toggled_health_server().await;
    let fake = FakeApiServer::start().await;
    fake.insert_pod(pod("tokened", "node-a", port));
    let dir = std::env::temp_dir().join(format!("probelet-token-e2e-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let token = dir.join("token");
    std::fs::write(&token, "token-one\n").unwrap();
    let kubeconfig = dir.join("kubeconfig");
    std::fs::write(
        &kubeconfig,
        format!(
            "apiVersion: v1\nkind: Config\nclusters:\n- name: fake\n  cluster: {{server: \"{}\"}}\nusers:\n- name: fake\n  user: {{tokenFile: \"{}\"}}\ncontexts:\n- name: fake\n  context: {{cluster: fake, user: fake}}\ncurrent-context: fake\n",
            fake.url(),
            token.display()
        ),
    )
    .unwrap();
    let mut agent = tokio::process::Command::new(env!("CARGO_BIN_EXE_probelet"))
        .args(["run", "--kubeconfig"])
        .arg(&kubeconfig)
        .args(["--node-name", "node-a", "--listen", "127.0.0.1:0"])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    wait_for_pod(&fake, "tokened", "Ready=True", |p| {
        condition(p, "Ready").is_some_and(|c| c.status == "True")
    })
    .await;
    support::agent::stop(&mut agent, Duration::from_secs(20)).await;
    let _ = std::fs::remove_dir_all(&dir);
}

/// A pod the client's structs cannot read (a field of another type than they expect) is skipped
/// with one warning that names it and the field: the node's other pods are listed, probed and
/// written as ever, where the whole list failed to decode, the watch listed again every second
/// and no new pod was ever probed.
#[tokio::test]
async fn a_pod_that_cannot_be_read_does_not_stop_the_others() {
    let (port, _healthy) = support::health::toggled_health_server().await;
    let fake = FakeApiServer::start().await;
    fake.insert_pod(pod("before", "node-a", port));
    let mut odd = serde_json::to_value(pod("odd", "node-a", port)).unwrap();
    odd["status"]["containerStatuses"][0]["restartCount"] = serde_json::json!("x");
    fake.insert_pod_json_as_is(odd);
    let (agent, kubeconfig, output) = start_agent_logged(&fake, "undecodable", &[]);
    let is_ready = |p: &Pod| condition(p, "Ready").is_some_and(|c| c.status == "True");
    wait_for_pod(&fake, "before", "Ready=True", is_ready).await;
    fake.insert_pod(pod("after", "node-a", port));
    wait_for_pod(&fake, "after", "Ready=True", is_ready).await;

    let skipped = output.with("Cannot read the pod");
    assert_eq!(skipped.len(), 1, "{:#?}", output.lines());
    assert!(skipped[0].contains("default/odd"), "{skipped:?}");
    assert!(skipped[0].contains("status.containerStatuses[0].restartCount"), "{skipped:?}");
    assert!(output.with("Lost the API server").is_empty(), "{:#?}", output.lines());
    let lists = fake
        .requests()
        .iter()
        .filter(|r| r.method == http::Method::GET && !r.is_watch() && r.path.ends_with("/pods"))
        .count();
    assert!(lists <= 2, "{lists} lists");
    let odd_writes = fake
        .requests()
        .iter()
        .filter(|r| r.method != http::Method::GET && r.path.contains("/pods/odd"))
        .count();
    assert_eq!(odd_writes, 0, "nothing written to the pod that cannot be read");
    support::agent::kill(agent, &kubeconfig).await;
}

/// `--in-cluster` outside a pod says which variable is missing and what to do, where kube says
/// only "environment variable not found".
#[tokio::test]
async fn in_cluster_outside_a_pod_says_what_is_missing() {
    let out = tokio::process::Command::new(env!("CARGO_BIN_EXE_probelet"))
        .args(["run", "--in-cluster", "--node-name", "n", "--listen", "127.0.0.1:0"])
        .env_remove("KUBERNETES_SERVICE_HOST")
        .env_remove("KUBERNETES_SERVICE_PORT")
        .output()
        .await
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(
        stderr.contains("--in-cluster outside a pod (KUBERNETES_SERVICE_HOST is not set): run it in a pod, or give --kubeconfig"),
        "{stderr}"
    );
}

/// Waits (at most `limit`, polling) until pod `name` satisfies `pred`.
async fn wait_for_pod_within(
    fake: &FakeApiServer,
    name: &str,
    what: &str,
    limit: Duration,
    pred: impl Fn(&Pod) -> bool,
) {
    let deadline = tokio::time::Instant::now() + limit;
    while !fake.pod("default", name).is_some_and(|p| pred(&p)) {
        assert!(
            tokio::time::Instant::now() < deadline,
            "{name}: {what} within {limit:?}: {:?}",
            fake.pod("default", name)
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// The pod list answered with its headers and the start of its body, then nothing more (a
/// server or a connection that stalls mid-answer): the agent gives it up after 30 s without a
/// byte and lists again, where kube's client, with no read timeout of its own, waited for ever
/// and the agent never saw a pod.
#[tokio::test]
async fn a_pod_list_that_stalls_mid_answer_is_given_up_and_listed_again() {
    let (port, _healthy) = support::health::toggled_health_server().await;
    let fake = FakeApiServer::start().await;
    fake.insert_pod(pod("listed", "node-a", port));
    fake.inject(Fault {
        matcher: FaultMatcher::MethodPath(http::Method::GET, "/api/v1/pods".into()),
        kind: FaultKind::StallBody { after: 64 },
        times: FaultTimes::Times(1),
    });
    let (agent, kubeconfig) = start_agent(&fake, "stalled-list", &[]);
    let is_ready = |p: &Pod| condition(p, "Ready").is_some_and(|c| c.status == "True");
    wait_for_pod_within(&fake, "listed", "Ready=True", Duration::from_secs(60), is_ready).await;
    let lists = fake.requests().iter().filter(|r| !r.is_watch() && r.path == "/api/v1/pods").count();
    assert_eq!(lists, 2, "the stalled list, then one more");
    support::agent::kill(agent, &kubeconfig).await;
}

/// A watch event that arrives as a line that is no JSON (a proxy that garbles the stream):
/// the agent lists again, so the pod it was about is seen. kube's client skips the line and
/// reads on, and the pod, created on the node, was never probed nor made Ready until it changed
/// again.
#[tokio::test]
async fn a_watch_event_that_is_no_json_is_not_lost() {
    let (port, _healthy) = support::health::toggled_health_server().await;
    let fake = FakeApiServer::start().await;
    fake.insert_pod(pod("first", "node-a", port));
    let (agent, kubeconfig, output) = start_agent_logged(&fake, "garbled", &[]);
    let is_ready = |p: &Pod| condition(p, "Ready").is_some_and(|c| c.status == "True");
    wait_for_pod(&fake, "first", "Ready=True", is_ready).await;
    fake.corrupt_watch_events(1);
    fake.insert_pod(pod("second", "node-a", port));
    wait_for_pod(&fake, "second", "Ready=True", is_ready).await;
    assert!(output.with("Lost the API server").is_empty(), "the server answered: {:#?}", output.lines());
    support::agent::kill(agent, &kubeconfig).await;
}

/// The status PATCH is applied, then its connection is reset before the answer (the agent
/// cannot know whether it landed): the write is retried, and the pod ends with exactly the
/// status the probes say, the runtime's fields untouched.
#[tokio::test]
async fn a_status_write_applied_whose_answer_is_lost_lands_exactly() {
    let (port, healthy) = support::health::toggled_health_server().await;
    let fake = FakeApiServer::start().await;
    fake.insert_pod(pod("reset", "node-a", port));
    let status_path = "/api/v1/namespaces/default/pods/reset/status";
    fake.inject(Fault {
        matcher: FaultMatcher::MethodPath(http::Method::PATCH, status_path.into()),
        kind: FaultKind::ServeThenDrop,
        times: FaultTimes::Times(1),
    });
    let (agent, kubeconfig) = start_agent(&fake, "reset-write", &[]);
    let is_ready = |p: &Pod| condition(p, "Ready").is_some_and(|c| c.status == "True") && app_status(p).ready;
    wait_for_pod(&fake, "reset", "Ready=True", is_ready).await;
    let patches = || status_patches(&fake, "reset").len();
    // The reset one (applied), and no more than one after it: the retry sees the status written.
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert!(patches() <= 2, "{} PATCHes", patches());
    // Readiness lost, the answer of that write lost too: it lands.
    fake.inject(Fault {
        matcher: FaultMatcher::MethodPath(http::Method::PATCH, status_path.into()),
        kind: FaultKind::ServeThenDrop,
        times: FaultTimes::Times(1),
    });
    healthy.store(false, Ordering::SeqCst);
    wait_for_pod(&fake, "reset", "Ready=False", |p| !is_ready(p)).await;
    tokio::time::sleep(Duration::from_secs(2)).await;
    let reset = fake.pod("default", "reset").unwrap();
    let ready = condition(&reset, "Ready").unwrap();
    assert_eq!((ready.status.as_str(), ready.reason.as_deref()), ("False", Some("ContainersNotReady")));
    assert!(!app_status(&reset).ready);
    assert_eq!(
        app_status(&reset).container_id.as_deref(),
        Some("containerd://reset"),
        "the runtime's fields"
    );
    assert_eq!(condition(&reset, "example.com/feature").unwrap().status, "True");
    support::agent::kill(agent, &kubeconfig).await;
}

/// The service-account token rotated on disk and the old one refused (401) from then on: the
/// agent reads the file again at the next request after the refusal, and the status the probes
/// then want lands within seconds, not at the next of the file's minute reads.
#[tokio::test]
async fn a_rotated_token_is_read_again_and_no_status_write_is_lost() {
    let (port, healthy) = support::health::toggled_health_server().await;
    let fake = FakeApiServer::start().await;
    fake.insert_pod(pod("rotated", "node-a", port));
    let dir = std::env::temp_dir().join(format!("probelet-token-rotation-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let token = dir.join("token");
    std::fs::write(&token, "token-one\n").unwrap();
    fake.require_token(Some("token-one"));
    let kubeconfig = dir.join("kubeconfig");
    std::fs::write(
        &kubeconfig,
        format!(
            "apiVersion: v1\nkind: Config\nclusters:\n- name: fake\n  cluster: {{server: \"{}\"}}\nusers:\n- name: fake\n  user: {{tokenFile: \"{}\"}}\ncontexts:\n- name: fake\n  context: {{cluster: fake, user: fake}}\ncurrent-context: fake\n",
            fake.url(),
            token.display()
        ),
    )
    .unwrap();
    let mut agent = tokio::process::Command::new(env!("CARGO_BIN_EXE_probelet"))
        .args(["run", "--kubeconfig"])
        .arg(&kubeconfig)
        .args(["--node-name", "node-a", "--listen", "127.0.0.1:0"])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    let is_ready = |p: &Pod| condition(p, "Ready").is_some_and(|c| c.status == "True");
    wait_for_pod(&fake, "rotated", "Ready=True", is_ready).await;

    // The kubelet rotates the projected token (atomically, a rename) and the old one is refused.
    let next = dir.join("token.next");
    std::fs::write(&next, "token-two\n").unwrap();
    std::fs::rename(&next, &token).unwrap();
    fake.require_token(Some("token-two"));
    healthy.store(false, Ordering::SeqCst);
    wait_for_pod_within(&fake, "rotated", "Ready=False", Duration::from_secs(10), |p| !is_ready(p)).await;
    let refused = fake.requests().iter().filter(|r| r.code == Some(401)).count();
    assert!(refused <= 2, "{refused} requests refused");
    // The watch goes on with the new token once it lists again: a pod created now is seen.
    fake.close_watches();
    healthy.store(true, Ordering::SeqCst);
    fake.insert_pod(pod("later", "node-a", port));
    wait_for_pod(&fake, "later", "Ready=True", is_ready).await;
    support::agent::stop(&mut agent, Duration::from_secs(20)).await;
    let _ = std::fs::remove_dir_all(&dir);
}

/// More pods on the node than one page of the list (kube's watcher asks 500 at a time), and the
/// continue token expired (410) between the pages: the watch lists again from the start and
/// every pod is seen and written, and the expiry is no outage in the log.
#[tokio::test]
async fn a_paged_list_whose_continue_token_expired_lists_again() {
    const PODS: usize = 520;
    let fake = FakeApiServer::start().await;
    for i in 0..PODS {
        let mut p = pod(&format!("p{i:03}"), "node-a", 1);
        p.spec.as_mut().unwrap().containers[0].readiness_probe = None;
        fake.insert_pod(p);
    }
    // Each list page served 1 s late: time to expire the token between the pages.
    fake.inject(Fault {
        matcher: FaultMatcher::MethodPath(http::Method::GET, "/api/v1/pods".into()),
        kind: FaultKind::Delay(Duration::from_secs(1)),
        times: FaultTimes::Times(2),
    });
    let (agent, kubeconfig, output) =
        start_agent_logged(&fake, "paged", &["--qps", "1000", "--burst", "1000"]);
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    while !fake.requests().iter().any(|r| r.param("continue").is_some()) {
        assert!(tokio::time::Instant::now() < deadline, "a second page asked for within 30 s");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    // Something changes, and the history is compacted: the first page's token is too old.
    fake.insert_pod(pod("elsewhere", "node-b", 1));
    fake.compact();

    let ready = |p: &Pod| condition(p, "Ready").is_some_and(|c| c.status == "True");
    let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
    loop {
        let done = fake.pods().iter().filter(|p| ready(p)).count();
        if done == PODS {
            break;
        }
        assert!(tokio::time::Instant::now() < deadline, "{done} of {PODS} pods Ready=True within 60 s");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let pages: Vec<(bool, Option<u16>)> = fake
        .requests()
        .iter()
        .filter(|r| !r.is_watch() && r.path == "/api/v1/pods")
        .map(|r| (r.param("continue").is_some(), r.code))
        .collect();
    assert_eq!(pages, [(false, Some(200)), (true, Some(410)), (false, Some(200)), (true, Some(200))]);
    assert!(output.with("Lost the API server").is_empty(), "{:#?}", output.lines());
    support::agent::kill(agent, &kubeconfig).await;
}

/// The agent SIGKILLed while its write of Ready=True is held by a slow API server; the
/// container then fails its probe, and a new agent starts, finds the pod not ready and has
/// nothing to write. The held write lands late (the server applied it after all; replayed here,
/// as the fake drops a request whose client went away): Ready goes back to False within the
/// reconcile period (10 s), and stays there.
#[tokio::test]
async fn a_write_of_a_killed_agent_that_lands_late_is_overruled() {
    let (port, healthy) = support::health::toggled_health_server().await;
    healthy.store(false, Ordering::SeqCst);
    let fake = FakeApiServer::start().await;
    fake.insert_pod(pod("handover", "node-a", port));
    let (first, kubeconfig) = start_agent(&fake, "killed-mid-write", &[]);
    let is_ready = |p: &Pod| condition(p, "Ready").is_some_and(|c| c.status == "True");
    let written_false = |p: &Pod| condition(p, "Ready").is_some_and(|c| c.status == "False");
    wait_for_pod(&fake, "handover", "Ready=False", written_false).await;

    hold_next_status_patch(&fake, "handover", Duration::from_secs(3600));
    let before = status_patches(&fake, "handover").len();
    healthy.store(true, Ordering::SeqCst);
    let held = next_status_patch(&fake, "handover", before, "the Ready=True write").await.body.unwrap();
    assert_eq!(
        held["status"]["conditions"].as_array().unwrap().iter().find(|c| c["type"] == "Ready").unwrap()["status"],
        "True",
        "{held}"
    );
    support::agent::kill(first, &kubeconfig).await;
    healthy.store(false, Ordering::SeqCst);
    let (second, kubeconfig, output) = start_agent_logged(&fake, "after-the-kill", &[]);
    let addr = output.addr().await;
    // The new agent probed the container (and found it failing) before the late write lands.
    let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
    let failed = async || {
        support::agent::series_sum(
            &addr,
            "prober_probe_total",
            &["probe_type=\"Readiness\"", "result=\"failed\""],
        )
        .await
    };
    while failed().await == 0.0 {
        assert!(tokio::time::Instant::now() < deadline, "a probe within 20 s");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    tokio::time::sleep(Duration::from_secs(1)).await;
    assert!(written_false(&fake.pod("default", "handover").unwrap()));

    let api: kube::Api<Pod> = kube::Api::namespaced(fake.client(), "default");
    let params = kube::api::PatchParams { field_manager: Some("probelet".into()), ..Default::default() };
    let landed = api.patch_status("handover", &params, &kube::api::Patch::Strategic(held)).await;
    assert!(landed.as_ref().is_ok_and(is_ready), "the late write landed: {landed:?}");
    wait_for_pod_within(&fake, "handover", "Ready=False again", Duration::from_secs(12), |p| !is_ready(p))
        .await;
    let deadline = tokio::time::Instant::now() + Duration::from_secs(3);
    while tokio::time::Instant::now() < deadline {
        let pod = fake.pod("default", "handover").unwrap();
        assert!(!is_ready(&pod) && !app_status(&pod).ready, "{:?}", pod.status);
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    support::agent::kill(second, &kubeconfig).await;
}

/// The pod deleted and created again under the same name (a new UID, a new container) while
/// the agent's write for the old one is held by a slow API server: the held write does not land
/// on the new pod (its UID is the patch's precondition), and the new pod gets its own status.
#[tokio::test]
async fn a_write_held_while_the_pod_is_recreated_does_not_land_on_the_new_pod() {
    let (port, healthy) = support::health::toggled_health_server().await;
    let fake = FakeApiServer::start().await;
    let old_uid = fake.insert_pod(pod("reborn", "node-a", port)).metadata.uid.unwrap();
    let (agent, kubeconfig) = start_agent(&fake, "recreated", &[]);
    let is_ready = |p: &Pod| condition(p, "Ready").is_some_and(|c| c.status == "True");
    wait_for_pod(&fake, "reborn", "Ready=True", is_ready).await;

    hold_next_status_patch(&fake, "reborn", Duration::from_secs(3));
    let before = status_patches(&fake, "reborn").len();
    healthy.store(false, Ordering::SeqCst);
    next_status_patch(&fake, "reborn", before, "the Ready=False write").await;
    let api: kube::Api<Pod> = kube::Api::namespaced(fake.client(), "default");
    api.delete("reborn", &kube::api::DeleteParams::default().grace_period(0)).await.unwrap();
    let mut again = pod("reborn", "node-a", port);
    again.status.as_mut().unwrap().container_statuses.as_mut().unwrap()[0].container_id =
        Some("containerd://reborn-2".into());
    healthy.store(true, Ordering::SeqCst);
    let new_uid = fake.insert_pod(again).metadata.uid.unwrap();
    assert_ne!(old_uid, new_uid);

    wait_for_pod(&fake, "reborn", "the new pod Ready=True", |p| {
        is_ready(p) && p.metadata.uid.as_deref() == Some(new_uid.as_str())
    })
    .await;
    tokio::time::sleep(Duration::from_secs(4)).await;
    let held = &status_patches(&fake, "reborn")[before];
    assert_eq!(held.body.as_ref().unwrap()["metadata"]["uid"], old_uid.as_str());
    // Refused on its stale resourceVersion (the server checks it before the UID's immutability).
    assert!(matches!(held.code, Some(409 | 422)), "the held write refused on the new pod: {held:?}");
    let reborn = fake.pod("default", "reborn").unwrap();
    assert!(is_ready(&reborn) && app_status(&reborn).ready, "{:?}", reborn.status);
    support::agent::kill(agent, &kubeconfig).await;
}

/// A pod whose JSON is a few MB (thousands of environment variables: an object near the size
/// etcd takes) arrives as one watch event line of that size, and is probed and written as any
/// other; its status writes stay small.
#[tokio::test]
async fn a_watch_event_of_several_mb_is_read() {
    let (port, _healthy) = support::health::toggled_health_server().await;
    let fake = FakeApiServer::start().await;
    let (agent, kubeconfig) = start_agent(&fake, "big-event", &[]);
    // The watch is open once the list has been answered.
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    while !fake.requests().iter().any(|r| r.is_watch()) {
        assert!(tokio::time::Instant::now() < deadline, "a watch within 30 s");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let mut big = pod("big", "node-a", port);
    big.spec.as_mut().unwrap().containers[0].env = Some(
        (0..25_000)
            .map(|i| k8s_openapi::api::core::v1::EnvVar {
                name: format!("VARIABLE_{i:05}"),
                value: Some("x".repeat(80)),
                ..Default::default()
            })
            .collect(),
    );
    let size = serde_json::to_vec(&big).unwrap().len();
    assert!(size > 2_500_000, "{size} bytes");
    fake.insert_pod(big);
    wait_for_pod(&fake, "big", "Ready=True", |p| condition(p, "Ready").is_some_and(|c| c.status == "True"))
        .await;
    let writes: Vec<usize> = fake
        .requests()
        .iter()
        .filter(|r| r.method == http::Method::PATCH && r.path.ends_with("/big/status"))
        .map(|r| r.body.as_ref().map_or(0, |b| b.to_string().len()))
        .collect();
    assert!(!writes.is_empty() && writes.iter().all(|&n| n < 4096), "{writes:?}");
    support::agent::kill(agent, &kubeconfig).await;
}

/// On SIGTERM the cluster agent waits for the status writes still owed (here one a slow API
/// server holds 2 s), then exits 0, the write landed; a second SIGTERM during that wait (one
/// held for good) ends the agent at once, exit 1, saying so (docs/sync.md, §7.5). Before, a
/// second signal did nothing: the agent waited out its 10 s.
#[tokio::test]
async fn a_sigterm_waits_for_an_owed_write_and_a_second_one_ends_the_wait() {
    let (port, healthy) = support::health::toggled_health_server().await;
    let fake = FakeApiServer::start().await;
    fake.insert_pod(pod("flushed", "node-a", port));
    let is_ready = |p: &Pod| condition(p, "Ready").is_some_and(|c| c.status == "True");
    // The pod written ready, then its Ready=False write sent and held `hold` by the server.
    let held_unready_write = async |hold: Duration| {
        healthy.store(true, Ordering::SeqCst);
        wait_for_pod(&fake, "flushed", "Ready=True", is_ready).await;
        hold_next_status_patch(&fake, "flushed", hold);
        let before = status_patches(&fake, "flushed").len();
        healthy.store(false, Ordering::SeqCst);
        next_status_patch(&fake, "flushed", before, "the Ready=False write").await;
    };

    let (mut agent, kubeconfig, output) = start_agent_logged(&fake, "flush", &[]);
    held_unready_write(Duration::from_secs(2)).await;
    support::agent::sigterm(&agent);
    let status = tokio::time::timeout(Duration::from_secs(10), agent.wait())
        .await
        .expect("the agent exits once the write is answered")
        .unwrap();
    assert_eq!(status.code(), Some(0), "{:?}", output.lines());
    assert!(!is_ready(&fake.pod("default", "flushed").unwrap()), "the owed write landed");
    assert!(output.with("shutdown forced").is_empty(), "{:?}", output.lines());
    let _ = std::fs::remove_file(&kubeconfig);

    let (mut agent, kubeconfig, output) = start_agent_logged(&fake, "forced", &[]);
    held_unready_write(Duration::from_secs(3600)).await;
    support::agent::sigterm(&agent);
    // Later than the 100 ms within which signals are one request.
    tokio::time::sleep(Duration::from_millis(500)).await;
    support::agent::sigterm(&agent);
    let status = tokio::time::timeout(Duration::from_secs(3), agent.wait())
        .await
        .expect("a second SIGTERM ends the agent at once")
        .unwrap();
    assert_eq!(status.code(), Some(1), "{:?}", output.lines());
    output.wait_for("probelet: shutdown forced, status writes still owed are not waited for").await;
    let _ = std::fs::remove_file(&kubeconfig);
}

/// A cluster agent whose kubeconfig's credential plugin is `sh -c SCRIPT` (the script made of
/// the path of a file it writes a PID to), against `fake`, SIGTERMed once that PID is written:
/// it exits 0 within 5 s, saying it stopped during start-up. Returns the PID written.
async fn sigterm_during_start_up(fake: &FakeApiServer, name: &str, script: impl Fn(&str) -> String) -> u32 {
    let dir = std::env::temp_dir().join(format!("probelet-{name}-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let pid_file = dir.join("plugin.pid");
    let plugin = format!(
        "\n    exec:\n      apiVersion: client.authentication.k8s.io/v1beta1\n      command: sh\n      \
         args: [\"-c\", \"{}\"]\n      interactiveMode: Never",
        script(&pid_file.display().to_string())
    );
    let kubeconfig = support::agent::kubeconfig_with_user(&fake.url(), name, &plugin);
    let mut agent = support::agent::spawn_cluster_agent_on(
        env!("CARGO_BIN_EXE_probelet"),
        &kubeconfig,
        &[],
        Stdio::piped(),
        Stdio::piped(),
    );
    let output = collect_output(&mut agent);
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    let pid = loop {
        if let Some(pid) = std::fs::read_to_string(&pid_file).ok().and_then(|p| p.trim().parse::<u32>().ok())
        {
            break pid;
        }
        assert!(tokio::time::Instant::now() < deadline, "the plugin runs: {:?}", output.lines());
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    support::agent::sigterm(&agent);
    let status = tokio::time::timeout(Duration::from_secs(5), agent.wait())
        .await
        .expect("a SIGTERM during start-up ends the agent at once")
        .unwrap();
    assert_eq!(status.code(), Some(0), "{status:?}: {:?}", output.lines());
    output.wait_for("probelet: stopped during start-up, nothing was running yet").await;
    let _ = std::fs::remove_dir_all(&dir);
    let _ = std::fs::remove_file(&kubeconfig);
    pid
}

/// Waits (at most 5 s) for process `pid` to be gone, or ended and not reaped yet by whatever it
/// was left to; SIGKILLs it and fails the test if it still runs then.
async fn assert_ends(pid: u32, what: &str) {
    let running = || {
        std::fs::read_to_string(format!("/proc/{pid}/stat")).is_ok_and(|stat| {
            stat.rsplit_once(')').is_some_and(|(_, rest)| !rest.trim_start().starts_with('Z'))
        })
    };
    let deadline = tokio::time::Instant::now() + Duration::from_secs(5);
    while running() {
        if tokio::time::Instant::now() >= deadline {
            let _ = std::process::Command::new("kill").args(["-KILL", &pid.to_string()]).status();
            panic!("{what} still runs");
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// A credential plugin that is a shell running its program as a child (`sh -c 'aws eks
/// get-token …'` without `exec`): a SIGTERM during start-up ends the program too, not only the
/// shell. Before, the agent ended its own children only, and the program, handed to another
/// parent once the shell was gone, ran on.
#[tokio::test]
async fn a_sigterm_during_start_up_ends_what_the_credential_plugin_started() {
    let fake = FakeApiServer::start().await;
    fake.stop(Duration::ZERO).await;
    let grandchild = sigterm_during_start_up(&fake, "start-up-sigterm-tree", |pid_file| {
        format!("sleep 300 & echo $! > {pid_file}; wait")
    })
    .await;
    assert_ends(grandchild, "the program the credential plugin started").await;
}

/// A DaemonSet pod deleted while its agent cannot reach the API server: the agent still ends
/// promptly and cleanly. During start-up (here a kubeconfig's credential plugin that hangs, as
/// `aws eks get-token` does without network; kube runs it while it builds the client) a
/// SIGTERM ends it at once, exit 0, saying so, and the plugin with it; before, the signals were
/// listened for only once started, and the agent died of the SIGTERM (exit 143), the plugin
/// left running. Once started, waiting for its first list, it stops in order, exit 0.
#[tokio::test]
async fn a_sigterm_during_start_up_with_the_api_server_unreachable_ends_the_agent_cleanly() {
    let fake = FakeApiServer::start().await;
    fake.stop(Duration::ZERO).await;
    let plugin_pid = sigterm_during_start_up(&fake, "start-up-sigterm", |pid_file| {
        format!("echo $$ > {pid_file}; exec sleep 600")
    })
    .await;
    assert_ends(plugin_pid, "the credential plugin").await;

    // Started, and waiting for its first list from the unreachable server.
    let (mut agent, kubeconfig, output) = start_agent_logged(&fake, "first-list-sigterm", &[]);
    output.addr().await;
    support::agent::sigterm(&agent);
    let status = tokio::time::timeout(Duration::from_secs(5), agent.wait())
        .await
        .expect("a SIGTERM while the first list fails ends the agent promptly")
        .unwrap();
    assert_eq!(status.code(), Some(0), "{:?}", output.lines());
    output.wait_for("probelet: shutting down, flushing status writes").await;
    let _ = std::fs::remove_file(&kubeconfig);
}

/// A `--pod-selector` the API server cannot parse is a usage error, exit 2 before the agent
/// sends any request, in the words of the API server's parser; before, every list and watch was
/// answered 400 and the agent retried them for as long as it ran, probing nothing. An empty
/// selector still means every pod.
#[tokio::test]
async fn a_bad_pod_selector_is_a_usage_error_before_anything_runs() {
    let (port, _healthy) = support::health::toggled_health_server().await;
    let fake = FakeApiServer::start().await;
    let cases = [
        ("app=web,,", "found ',', expected: identifier after ','"),
        ("app in (a", "unable to parse requirement: found '', expected: ',' or ')'"),
        ("a b", "unable to parse requirement: found 'b', expected: in, notin, =, ==, !=, gt, lt"),
        (
            "app=a/b",
            "unable to parse requirement: values[0][app]: Invalid value: \"a/b\": a valid label must be",
        ),
    ];
    for (selector, error) in cases {
        let (agent, kubeconfig) = support::agent::spawn_cluster_agent(
            env!("CARGO_BIN_EXE_probelet"),
            &fake.url(),
            "bad-pod-selector",
            &["--pod-selector", selector],
            Stdio::null(),
            Stdio::piped(),
        );
        let output = tokio::time::timeout(Duration::from_secs(10), agent.wait_with_output())
            .await
            .unwrap_or_else(|_| panic!("{selector:?}: the agent ran"))
            .unwrap();
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert_eq!(output.status.code(), Some(2), "{selector:?}: {stderr}");
        let expected = format!("error: invalid value '{selector}' for '--pod-selector <SELECTOR>': {error}");
        assert!(stderr.starts_with(&expected), "{selector:?}: {stderr}");
        assert!(!stderr.contains("acktrace"), "{selector:?}: {stderr}");
        assert!(fake.requests().is_empty(), "{selector:?}: no request before the usage error");
        let _ = std::fs::remove_file(&kubeconfig);
    }

    fake.insert_pod(pod("web-1", "node-a", port));
    let (agent, kubeconfig) = start_agent(&fake, "empty-pod-selector", &["--pod-selector", ""]);
    let ready = |p: &Pod| condition(p, "Ready").is_some_and(|c| c.status == "True");
    wait_for_pod(&fake, "web-1", "ready", ready).await;
    let selected = fake
        .requests()
        .into_iter()
        .filter(|r| r.path.ends_with("/pods"))
        .find(|r| r.query.iter().any(|(name, _)| name == "labelSelector"));
    assert!(selected.is_none(), "an empty selector asks for every pod: {selected:?}");
    let mut agent = agent;
    support::agent::stop(&mut agent, Duration::from_secs(20)).await;
    let _ = std::fs::remove_file(&kubeconfig);
}

/// Under `--feature-gates=RestartAllContainersOnContainerExits=true` the cluster host generates
/// `Initialized` as the standalone host does: once it was True, the init container going back
/// to waiting (the node's runtime restarting all containers) leaves it True, as upstream's
/// `GeneratePodInitializedCondition` reads the gate and the old status.
#[tokio::test]
async fn under_restart_all_containers_initialized_stays_true_when_init_containers_wait_again() {
    let (port, _healthy) = support::health::toggled_health_server().await;
    let fake = FakeApiServer::start().await;
    let mut initialized_pod = pod("again", "node-a", port);
    let init = Container { name: "init".into(), image: Some("init:1".into()), ..Default::default() };
    let spec = initialized_pod.spec.as_mut().unwrap();
    spec.init_containers = Some(vec![init]);
    spec.restart_policy = Some("Always".into());
    let done = container_status(
        "init",
        ContainerState {
            terminated: Some(ContainerStateTerminated { exit_code: 0, ..Default::default() }),
            ..Default::default()
        },
    );
    initialized_pod.status.as_mut().unwrap().init_container_statuses = Some(vec![done]);
    fake.insert_pod(initialized_pod);
    let (agent, kubeconfig) =
        start_agent(&fake, "restart-all", &["--feature-gates=RestartAllContainersOnContainerExits=true"]);
    let ready = |p: &Pod| condition(p, "Ready").is_some_and(|c| c.status == "True");
    let pod_now = wait_for_pod(&fake, "again", "ready", ready).await;
    assert_eq!(condition(&pod_now, "Initialized").map(|c| c.status), Some("True".into()));

    // The runtime removed every container: the init container and the app wait to run again.
    let waiting = || ContainerState {
        waiting: Some(ContainerStateWaiting {
            reason: Some("RestartingAllContainers".into()),
            ..Default::default()
        }),
        ..Default::default()
    };
    let api: kube::Api<Pod> = kube::Api::namespaced(fake.client(), "default");
    let patch = serde_json::json!({"status": {
        "phase": "Running",
        "initContainerStatuses": [container_status("init", waiting())],
        "containerStatuses": [container_status("app", waiting())],
    }});
    api.patch_status("again", &kube::api::PatchParams::default(), &kube::api::Patch::Merge(patch))
        .await
        .unwrap();
    let pod_now = wait_for_pod(&fake, "again", "not ready", |p| !ready(p)).await;
    let initialized = condition(&pod_now, "Initialized").unwrap();
    assert_eq!((initialized.status.as_str(), initialized.reason), ("True", None));

    support::agent::kill(agent, &kubeconfig).await;
}

/// A status write the server refuses at every PATCH while the pod stays (a broken admission
/// webhook or proxy): 409 Conflict, each re-read and merged again after a back-off that grows
/// to about a second, and 422 Invalid, tried again by the 10 s reconcile. The agent neither
/// spins on it nor floods its log (measured: 13 PATCHes and 2 lines in 8 s for the 409s, 2 and
/// 2 for the 422s). A PATCH answered 404 while the pod is still there (a proxy's, three in a
/// row) loses no status: each is confirmed by a GET, and the write lands by the reconcile.
#[tokio::test]
async fn a_status_write_refused_at_every_patch_neither_spins_nor_floods_the_log_nor_is_lost() {
    let is_ready = |p: &Pod| condition(p, "Ready").is_some_and(|c| c.status == "True");
    for (code, times) in
        [(409_u16, FaultTimes::Always), (422, FaultTimes::Always), (404, FaultTimes::Times(3))]
    {
        let (port, _healthy) = support::health::toggled_health_server().await;
        let fake = FakeApiServer::start().await;
        fake.insert_pod(pod("refused", "node-a", port));
        let path = "/api/v1/namespaces/default/pods/refused/status";
        let always = times == FaultTimes::Always;
        fake.inject(Fault {
            matcher: FaultMatcher::MethodPath(http::Method::PATCH, path.into()),
            kind: FaultKind::status(code),
            times,
        });
        let (agent, kubeconfig, output) = start_agent_logged(&fake, &format!("refused-{code}"), &[]);
        if always {
            tokio::time::sleep(Duration::from_secs(8)).await;
            let patches =
                fake.requests().iter().filter(|r| r.method == http::Method::PATCH && r.path == path).count();
            assert!((2..=30).contains(&patches), "{code}: {patches} PATCHes in 8 s");
            let said = output.with("Failed to update status for pod").len();
            assert!(said <= 6, "{code}: {said} lines in 8 s: {:#?}", output.lines());
        } else {
            wait_for_pod_within(
                &fake,
                "refused",
                "Ready=True after three 404s",
                Duration::from_secs(40),
                is_ready,
            )
            .await;
        }
        support::agent::kill(agent, &kubeconfig).await;
    }
}

/// A TLS server on 127.0.0.1 showing a certificate for `names` (valid until `not_after`) that
/// closes each connection once its handshake is done, and a kubeconfig that trusts that
/// certificate; returns the kubeconfig and the count of TCP connections it accepted.
async fn tls_api_server(
    name: &str,
    names: &[&str],
    not_after: Option<(i32, u8, u8)>,
) -> (std::path::PathBuf, Arc<std::sync::atomic::AtomicUsize>) {
    let _ = rustls::crypto::ring::default_provider().install_default();
    let mut params =
        rcgen::CertificateParams::new(names.iter().map(|n| (*n).to_owned()).collect::<Vec<_>>()).unwrap();
    if let Some((y, m, d)) = not_after {
        params.not_before = rcgen::date_time_ymd(y - 1, m, d);
        params.not_after = rcgen::date_time_ymd(y, m, d);
    }
    let key = rcgen::KeyPair::generate().unwrap();
    let cert = params.self_signed(&key).unwrap();
    let ca = std::env::temp_dir().join(format!("probelet-ca-{name}-{}.pem", std::process::id()));
    std::fs::write(&ca, cert.pem()).unwrap();
    let config = rustls::ServerConfig::builder()
        .with_no_client_auth()
        .with_single_cert(
            vec![cert.der().clone()],
            rustls::pki_types::PrivateKeyDer::Pkcs8(key.serialize_der().into()),
        )
        .unwrap();
    let acceptor = tokio_rustls::TlsAcceptor::from(Arc::new(config));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let accepted = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let counted = accepted.clone();
    tokio::spawn(async move {
        while let Ok((tcp, _)) = listener.accept().await {
            counted.fetch_add(1, Ordering::SeqCst);
            let acceptor = acceptor.clone();
            tokio::spawn(async move {
                // Dropped at once, without a close_notify.
                let _tls = acceptor.accept(tcp).await;
            });
        }
    });
    let kubeconfig = std::env::temp_dir().join(format!("probelet-kubeconfig-{name}-{}", std::process::id()));
    std::fs::write(
        &kubeconfig,
        format!(
            "apiVersion: v1\nkind: Config\nclusters:\n- name: c\n  cluster: {{server: \"https://{addr}\", certificate-authority: \"{}\"}}\nusers:\n- name: u\n  user: {{}}\ncontexts:\n- name: x\n  context: {{cluster: c, user: u}}\ncurrent-context: x\n",
            ca.display()
        ),
    )
    .unwrap();
    (kubeconfig, accepted)
}

/// An API server whose TLS certificate does not name the address the agent dials, one whose
/// certificate has expired, and one that closes each connection right after the handshake: the
/// agent keeps running, says `Lost the API server` once and nothing more at warning, and tries
/// again about once a second (measured: 9 or 10 connections in 6 s), neither spinning nor giving
/// up. The line names the reason: it said only `client error (Connect)`, kube's text, which
/// leaves the certificate's fault to its causes.
#[tokio::test]
async fn a_tls_server_it_cannot_use_is_lost_once_and_tried_again_each_second() {
    let cases = [
        (
            "tls-name",
            vec!["api.example.invalid"],
            None,
            &["certificate not valid for name \"127.0.0.1\""][..],
        ),
        ("tls-expired", vec!["127.0.0.1"], Some((2001, 1, 1)), &["expired"][..]),
        // The server's close comes as a FIN, or as a reset when the request it never read was
        // already in its buffer: either is the reason, and either is named.
        (
            "tls-closed",
            vec!["127.0.0.1"],
            None,
            &["peer closed connection without sending TLS close_notify", "Connection reset by peer"][..],
        ),
    ];
    for (name, names, not_after, reason) in cases {
        let (kubeconfig, accepted) = tls_api_server(name, &names, not_after).await;
        let mut agent = support::agent::spawn_cluster_agent_on(
            env!("CARGO_BIN_EXE_probelet"),
            &kubeconfig,
            &[],
            Stdio::piped(),
            Stdio::piped(),
        );
        let output = collect_output(&mut agent);
        tokio::time::sleep(Duration::from_secs(6)).await;
        assert!(agent.try_wait().unwrap().is_none(), "{name}: still running: {:#?}", output.lines());
        let lost = output.with("Lost the API server");
        assert_eq!(lost.len(), 1, "{name}: {:#?}", output.lines());
        assert!(reason.iter().any(|r| lost[0].contains(r)), "{name}: the reason: {}", lost[0]);
        let loud =
            output.lines().into_iter().filter(|l| l.contains(" WARN ") || l.contains(" ERROR ")).count();
        assert_eq!(loud, 1, "{name}: {:#?}", output.lines());
        let tries = accepted.load(Ordering::SeqCst);
        assert!((3..=20).contains(&tries), "{name}: {tries} connections in 6 s");
        support::agent::kill(agent, &kubeconfig).await;
        let _ = std::fs::remove_file(
            std::env::temp_dir().join(format!("probelet-ca-{name}-{}.pem", std::process::id())),
        );
    }
}
