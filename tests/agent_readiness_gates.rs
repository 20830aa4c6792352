//! End to end: the real `probelet` binary in readiness-gate mode (`--readiness-gates`) against
//! the fake API server, beside a kubelet whose status the test seeds. Only the
//! `probelet.dev/ready` condition of gated pods is ever written; the kubelet's container
//! statuses and conditions and a foreign condition survive byte for byte; pods without the gate
//! cause no request at all.

// The real binary runs on real time: its tests read the real clocks too.
#![allow(clippy::disallowed_methods)]
// Helpers here may panic: a panic fails the test that called them.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use probelet_test_support as support;

use std::collections::{BTreeMap, BTreeSet};
use std::process::Stdio;
use std::sync::atomic::Ordering;
use std::time::Duration;

use k8s_openapi::api::core::v1::{
    Container, ContainerState, ContainerStateRunning, ContainerStateWaiting, ContainerStatus, Pod,
    PodCondition, PodReadinessGate, PodSpec, PodStatus,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, Time};
use k8s_openapi::jiff::Timestamp;
use serde_json::{Value, json};
use support::apiserver::{FakeApiServer, RecordedRequest};

const GATE: &str = "probelet.dev/ready";
const ANNOTATION: &str = "probelet.dev/readiness-probes";

fn at(s: &str) -> Option<Time> {
    Some(Time(s.parse::<Timestamp>().unwrap()))
}

fn kubelet_condition(type_: &str, status: &str, since: &str) -> PodCondition {
    PodCondition {
        type_: type_.into(),
        status: status.into(),
        last_transition_time: at(since),
        ..Default::default()
    }
}

/// A pod as a kubelet has written it: running, its own probes passed, Ready held back only by
/// the gate; plus a foreign condition another controller owns.
fn pod(name: &str, node: &str, gated: bool, probes: Option<String>) -> Pod {
    let mut ready = kubelet_condition("Ready", "False", "2026-01-01T00:00:05Z");
    ready.reason = Some("ReadinessGatesNotReady".into());
    ready.message = Some(format!("corresponding condition of pod readiness gate \"{GATE}\" does not exist."));
    let mut foreign = kubelet_condition("example.com/feature", "True", "2026-01-01T00:00:01Z");
    foreign.reason = Some("FeatureOn".into());
    foreign.message = Some("switched on".into());
    Pod {
        metadata: ObjectMeta {
            name: Some(name.into()),
            namespace: Some("default".into()),
            annotations: probes.map(|p| BTreeMap::from([(ANNOTATION.to_owned(), p)])),
            ..Default::default()
        },
        spec: Some(PodSpec {
            node_name: Some(node.into()),
            containers: vec![Container {
                name: "app".into(),
                image: Some("app:1".into()),
                ..Default::default()
            }],
            readiness_gates: gated.then(|| vec![PodReadinessGate { condition_type: GATE.into() }]),
            ..Default::default()
        }),
        status: Some(PodStatus {
            phase: Some("Running".into()),
            pod_ip: Some("127.0.0.1".into()),
            host_ip: Some("127.0.0.1".into()),
            start_time: at("2026-01-01T00:00:00Z"),
            conditions: Some(vec![
                kubelet_condition("PodReadyToStartContainers", "True", "2026-01-01T00:00:03Z"),
                kubelet_condition("Initialized", "True", "2026-01-01T00:00:03Z"),
                ready,
                kubelet_condition("ContainersReady", "True", "2026-01-01T00:00:05Z"),
                kubelet_condition("PodScheduled", "True", "2026-01-01T00:00:00Z"),
                foreign,
            ]),
            container_statuses: Some(vec![ContainerStatus {
                name: "app".into(),
                image: "app:1".into(),
                image_id: "docker.io/library/app@sha256:0123".into(),
                container_id: Some(format!("containerd://{name}-app")),
                ready: true,
                started: Some(true),
                restart_count: 2,
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

/// The annotation for one HTTP gate probe on `port`.
/// `pod` with its container started a minute before now.
fn started_a_minute_ago(mut pod: Pod) -> Pod {
    let app = &mut pod.status.as_mut().unwrap().container_statuses.as_mut().unwrap()[0];
    let started = Timestamp::now() - k8s_openapi::jiff::SignedDuration::from_secs(60);
    app.state.as_mut().unwrap().running.as_mut().unwrap().started_at = Some(Time(started));
    pod
}

fn http_probe(port: u16) -> String {
    json!([{
        "name": "backend",
        "probe": {"httpGet": {"path": "/healthz", "port": port}, "periodSeconds": 1, "failureThreshold": 1}
    }])
    .to_string()
}

fn start_agent(fake: &FakeApiServer, name: &str) -> (tokio::process::Child, support::agent::TempFile) {
    start_agent_with(fake, name, &[], Stdio::null)
}

fn start_agent_with(
    fake: &FakeApiServer,
    name: &str,
    extra: &[&str],
    stdout: fn() -> Stdio,
) -> (tokio::process::Child, support::agent::TempFile) {
    let extra = [&["--readiness-gates"], extra].concat();
    support::agent::spawn_cluster_agent(
        env!("CARGO_BIN_EXE_probelet"),
        &fake.url(),
        name,
        &extra,
        stdout(),
        Stdio::null(),
    )
}

fn gate_condition(pod: &Value) -> Option<Value> {
    pod["status"]["conditions"].as_array()?.iter().find(|c| c["type"] == GATE).cloned()
}

/// Waits (bounded) until the fake's copy of the pod has a gate condition that satisfies `pred`.
async fn wait_for_gate(fake: &FakeApiServer, name: &str, what: &str, pred: impl Fn(&Value) -> bool) -> Value {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    loop {
        if let Some(condition) = fake.pod_json("default", name).as_ref().and_then(gate_condition)
            && pred(&condition)
        {
            return condition;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "{name}: {what} within 30 s; pod: {:?}",
            fake.pod_json("default", name).map(|p| p["status"]["conditions"].clone())
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// The requests that wrote to pods (events aside).
fn pod_writes(fake: &FakeApiServer) -> Vec<RecordedRequest> {
    fake.requests()
        .into_iter()
        .filter(|r| r.method != http::Method::GET && r.path.contains("/pods"))
        .collect()
}

async fn stop(mut agent: tokio::process::Child, kubeconfig: support::agent::TempFile) {
    support::agent::stop(&mut agent, Duration::from_secs(20)).await;
    let _ = std::fs::remove_file(&kubeconfig);
}

#[tokio::test]
async fn only_the_gate_condition_is_written_and_it_follows_the_probe() {
    let (port, healthy) = support::health::toggled_health_server().await;
    let fake = FakeApiServer::start().await;
    fake.insert_pod(pod("gated", "node-a", true, Some(http_probe(port))));
    // Annotated but not gated, and gated on another node: neither is the agent's business.
    fake.insert_pod(pod("ungated", "node-a", false, Some(http_probe(port))));
    fake.insert_pod(pod("elsewhere", "node-b", true, Some(http_probe(port))));
    let before = fake.pod_json("default", "gated").unwrap();
    let ungated_before = fake.pod_json("default", "ungated").unwrap();

    let (agent, kubeconfig) = start_agent(&fake, "gates");
    let ready = wait_for_gate(&fake, "gated", "True", |c| c["status"] == "True").await;
    assert_eq!(ready["reason"], "ReadinessProbesSucceeded");
    assert_eq!(ready["message"], "1 of 1 readiness probes succeeded");

    healthy.store(false, Ordering::SeqCst);
    let failed = wait_for_gate(&fake, "gated", "False", |c| c["status"] == "False").await;
    assert_eq!(failed["reason"], "ReadinessProbesFailed");
    assert_eq!(failed["message"], "readiness probes with unready status: [backend]");

    // Into the next second: transition times are in whole seconds.
    tokio::time::sleep(Duration::from_millis(1100)).await;
    healthy.store(true, Ordering::SeqCst);
    let again = wait_for_gate(&fake, "gated", "True again", |c| c["status"] == "True").await;
    assert_ne!(again["lastTransitionTime"], failed["lastTransitionTime"], "moved with the status");
    // Three more periods: a steady condition is not written again.
    tokio::time::sleep(Duration::from_secs(3)).await;
    stop(agent, kubeconfig).await;

    // Every write is a server-side apply of the gate condition alone, as the probelet manager.
    let writes = pod_writes(&fake);
    assert!(writes.len() >= 2, "{writes:?}");
    let uid = before["metadata"]["uid"].clone();
    let mut conditions = Vec::new();
    for w in &writes {
        assert_eq!(
            (w.method.as_str(), w.path.as_str()),
            ("PATCH", "/api/v1/namespaces/default/pods/gated/status")
        );
        assert_eq!(w.content_type.as_deref(), Some("application/apply-patch+yaml"), "{w:?}");
        assert_eq!((w.param("fieldManager"), w.param("force")), (Some("probelet"), Some("true")), "{w:?}");
        let body = w.body.clone().unwrap();
        let condition = body["status"]["conditions"][0].clone();
        let want = json!({
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": "gated", "uid": uid},
            "status": {"conditions": [condition.clone()]},
        });
        assert_eq!(body, want, "only status.conditions[type={GATE}]");
        assert_eq!(condition["type"], GATE);
        let keys: Vec<&str> = condition.as_object().unwrap().keys().map(String::as_str).collect();
        assert_eq!(keys, ["lastTransitionTime", "message", "reason", "status", "type"], "{condition}");
        conditions.push(condition);
    }
    // No write repeats the one before it; the transition time moves exactly with the status.
    for pair in conditions.windows(2) {
        let (a, b) = (&pair[0], &pair[1]);
        let same = |k: &str| a[k] == b[k];
        assert!(!(same("status") && same("reason") && same("message")), "written twice: {a} {b}");
        // (Times are in whole seconds: two transitions may share one.)
        if same("status") {
            assert!(same("lastTransitionTime"), "kept while the status stays: {a} -> {b}");
        } else {
            assert!(a["lastTransitionTime"].as_str() <= b["lastTransitionTime"].as_str(), "{a} -> {b}");
        }
    }
    let statuses: Vec<&str> = conditions.iter().map(|c| c["status"].as_str().unwrap()).collect();
    assert!(statuses.ends_with(&["True", "False", "True"]), "{statuses:?}");

    // The kubelet's container statuses and conditions, and the foreign one, byte for byte.
    let after = fake.pod_json("default", "gated").unwrap();
    assert_eq!(after["status"]["containerStatuses"], before["status"]["containerStatuses"]);
    let others = |pod: &Value| -> Vec<Value> {
        pod["status"]["conditions"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|c| c["type"] != GATE)
            .cloned()
            .collect()
    };
    assert_eq!(others(&after), others(&before));
    for field in ["phase", "podIP", "hostIP", "startTime", "qosClass"] {
        assert_eq!(after["status"][field], before["status"][field], "{field}");
    }
    assert_eq!(after["spec"], before["spec"]);
    assert_eq!(after["metadata"]["annotations"], before["metadata"]["annotations"]);

    // Pods without the gate, or of another node: no request names them, not even a GET.
    let named: Vec<_> = fake
        .requests()
        .into_iter()
        .filter(|r| r.path.contains("/pods/ungated") || r.path.contains("/pods/elsewhere"))
        .collect();
    assert!(named.is_empty(), "{named:?}");
    assert_eq!(fake.pod_json("default", "ungated").unwrap(), ungated_before);
    assert!(gate_condition(&fake.pod_json("default", "elsewhere").unwrap()).is_none());
}

#[tokio::test]
async fn unusable_probes_and_stopped_containers_turn_the_condition_false_with_the_reason() {
    let (port, _healthy) = support::health::toggled_health_server().await;
    let fake = FakeApiServer::start().await;
    let bad = json!([{"name": "backend", "probe": {"httpGet": {"port": port}, "periodSeconds": "ten"}}]);
    fake.insert_pod(pod("bad", "node-a", true, Some(bad.to_string())));
    let exec = json!([{"name": "script", "probe": {"exec": {"command": ["true"]}}}]);
    fake.insert_pod(pod("exec", "node-a", true, Some(exec.to_string())));
    fake.insert_pod(pod("missing", "node-a", true, None));
    let mut waiting = pod("waiting", "node-a", true, Some(http_probe(port)));
    let app = &mut waiting.status.as_mut().unwrap().container_statuses.as_mut().unwrap()[0];
    app.ready = false;
    app.state = Some(ContainerState {
        waiting: Some(ContainerStateWaiting { reason: Some("CrashLoopBackOff".into()), message: None }),
        ..Default::default()
    });
    fake.insert_pod(waiting);
    // `--probe-host-policy pod-ip`: a probe that names another host fails.
    let elsewhere = json!([{
        "name": "backend",
        "probe": {"httpGet": {"host": "localhost", "path": "/healthz", "port": port}, "periodSeconds": 1}
    }]);
    fake.insert_pod(pod("other-host", "node-a", true, Some(elsewhere.to_string())));

    let (agent, kubeconfig) =
        start_agent_with(&fake, "gates-invalid", &["--probe-host-policy", "pod-ip"], Stdio::null);
    let cases = [
        (
            "bad",
            "InvalidReadinessProbes",
            "annotation probelet.dev/readiness-probes: [0].probe.periodSeconds: invalid type: string \"ten\", expected i32 at line 1 column ",
        ),
        (
            "exec",
            "InvalidReadinessProbes",
            "annotation probelet.dev/readiness-probes: [0].probe.exec: exec probes are not offered in readiness-gate mode unless the agent runs with --readiness-gate-exec (which needs pods/exec)",
        ),
        ("missing", "InvalidReadinessProbes", "annotation probelet.dev/readiness-probes is missing"),
        ("waiting", "ContainersNotRunning", "containers not running: [app]"),
        ("other-host", "ReadinessProbesFailed", "readiness probes with unready status: [backend]"),
    ];
    let mut messages = BTreeMap::new();
    for (name, reason, message) in cases {
        let condition = wait_for_gate(&fake, name, reason, |c| c["reason"] == reason).await;
        assert_eq!(condition["status"], "False", "{name}");
        let got = condition["message"].as_str().unwrap().to_owned();
        // The column of a JSON error depends on the port's digits.
        assert!(got.starts_with(message) && got.len() <= message.len() + 3, "{name}: {got}");
        messages.insert(name, got);
    }
    // Each unusable annotation is a Warning event on its pod, with the same text.
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    for (name, reason, _) in cases.iter().filter(|c| c.1 == "InvalidReadinessProbes") {
        let message = &messages[name];
        loop {
            let found = fake.events().iter().any(|e| {
                e["involvedObject"]["name"] == *name
                    && e["type"] == "Warning"
                    && e["reason"] == *reason
                    && e["message"] == message.as_str()
            });
            if found {
                break;
            }
            assert!(tokio::time::Instant::now() < deadline, "{name}: a Warning event: {:?}", fake.events());
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }
    stop(agent, kubeconfig).await;
    // One write per pod: the verdicts do not change.
    for (name, _, _) in cases {
        let writes =
            pod_writes(&fake).into_iter().filter(|r| r.path.contains(&format!("/pods/{name}/"))).count();
        assert_eq!(writes, 1, "{name}");
    }
}

/// The (group, resource, verb) grants of the ClusterRoles in a deploy file, by role name.
fn cluster_role_grants(file: &str) -> BTreeMap<String, BTreeSet<(String, String, String)>> {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join(file);
    let docs: Vec<Value> = serde_saphyr::from_multiple(&std::fs::read_to_string(path).unwrap()).unwrap();
    let mut roles = BTreeMap::new();
    for doc in docs.into_iter().filter(|d| d["kind"] == "ClusterRole") {
        let role: k8s_openapi::api::rbac::v1::ClusterRole = serde_json::from_value(doc).unwrap();
        let mut grants = BTreeSet::new();
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
fn requested(requests: &[RecordedRequest]) -> BTreeSet<(String, String, String)> {
    requests.iter().flat_map(|r| r.authorization()).map(|a| (a.group, a.resource, a.verb)).collect()
}

/// Exec gate probes with `--readiness-gate-exec`, through `pods/exec` in the container they
/// name; and one run through every request path of the mode (watch, condition writes, events
/// and their repeats, exec, token reviews) compared with deploy/readiness-gates/: the roles
/// grant exactly what the agent requested, and the exec role exactly what exec probes need.
#[tokio::test]
async fn exec_gate_probes_and_rbac_grants_exactly_what_the_mode_requests() {
    let fake = FakeApiServer::start().await;
    fake.on_exec(|_, pod, _, _| {
        support::apiserver::exec::ExecReply::exit(if pod == "failing" { 1 } else { 0 })
    });
    let mut two = pod("exec", "node-a", true, None);
    two.spec.as_mut().unwrap().containers.push(Container { name: "sidecar".into(), ..Default::default() });
    let statuses = two.status.as_mut().unwrap().container_statuses.as_mut().unwrap();
    let mut sidecar = statuses[0].clone();
    sidecar.name = "sidecar".into();
    sidecar.container_id = Some("containerd://exec-sidecar".into());
    statuses.push(sidecar);
    let probes = json!([
        {"name": "default", "probe": {"exec": {"command": ["check", "app"]}, "periodSeconds": 1}},
        {"name": "named", "container": "sidecar", "probe": {"exec": {"command": ["check", "sidecar"]}, "periodSeconds": 1}},
    ]);
    two.metadata.annotations = Some(BTreeMap::from([(ANNOTATION.to_owned(), probes.to_string())]));
    fake.insert_pod(two);
    let failing = json!([{"name": "script", "probe": {"exec": {"command": ["false"]}, "periodSeconds": 1, "failureThreshold": 1}}]);
    fake.insert_pod(pod("failing", "node-a", true, Some(failing.to_string())));
    fake.insert_pod(pod("invalid", "node-a", true, Some("[]".into())));
    {
        use support::apiserver::reviews::{DEFAULT_AUDIENCE, service_account_user};
        let mut reviews = fake.reviews();
        let user = service_account_user("monitoring", "reader", "uid-r", "jti-r");
        reviews.add_token("reader-token", user, &[DEFAULT_AUDIENCE]);
        let reader = "system:serviceaccount:monitoring:reader";
        reviews.allow(reader, "get", "nodes", "pods", "pods-readers", "pods-reader");
    }
    let (mut agent, kubeconfig) = start_agent_with(
        &fake,
        "gates-exec",
        &["--readiness-gate-exec", "--authorization-mode", "webhook"],
        Stdio::piped,
    );
    let mut lines =
        tokio::io::AsyncBufReadExt::lines(tokio::io::BufReader::new(agent.stdout.take().unwrap()));
    let addr = support::agent::banner_addr(&mut lines).await;
    let (code, _) = support::agent::get(&addr, "/pods", Some("reader-token")).await;
    assert_eq!(code, 200, "the reader's token is accepted");

    let ready = wait_for_gate(&fake, "exec", "True", |c| c["status"] == "True").await;
    assert_eq!(ready["message"], "2 of 2 readiness probes succeeded");
    let failed = wait_for_gate(&fake, "failing", "False", |c| c["reason"] == "ReadinessProbesFailed").await;
    assert_eq!(failed["message"], "readiness probes with unready status: [script]");
    wait_for_gate(&fake, "invalid", "False", |c| c["reason"] == "InvalidReadinessProbes").await;
    // The failing probe's Unhealthy event repeats: created, then patched.
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    while !fake
        .events()
        .iter()
        .any(|e| e["involvedObject"]["name"] == "failing" && e["count"].as_i64() >= Some(2))
    {
        assert!(tokio::time::Instant::now() < deadline, "a repeated Unhealthy event: {:?}", fake.events());
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    stop(agent, kubeconfig).await;

    let sessions = fake.exec_sessions();
    let ran = |container: &str, arg: &str| {
        sessions.iter().any(|s| s.pod == "exec" && s.container == container && s.command == ["check", arg])
    };
    assert!(ran("app", "app"), "no container named: the pod's first");
    assert!(ran("sidecar", "sidecar"), "the named container");

    let requests = fake.requests();
    let forbidden: Vec<_> = requests.iter().filter(|r| r.code == Some(403)).collect();
    assert!(forbidden.is_empty(), "{forbidden:?}");
    let mut roles = cluster_role_grants("deploy/readiness-gates/rbac.yaml");
    roles.extend(cluster_role_grants("deploy/readiness-gates/rbac-exec.yaml"));
    let granted: BTreeSet<_> = roles.values().flatten().cloned().collect();
    assert_eq!(granted, requested(&requests), "the ClusterRoles grant exactly what the agent requested");
    let exec: Vec<_> = requests.iter().filter(|r| r.path.ends_with("/exec")).cloned().collect();
    assert_eq!(roles["probelet-readiness-gates-exec"], requested(&exec));
}

/// After a restart the agent writes nothing while its probes agree with the condition already
/// there: no False while they have not run yet, no rewrite of the same verdict.
#[tokio::test]
async fn a_restarted_agent_does_not_rewrite_an_unchanged_condition() {
    let (port, _healthy) = support::health::toggled_health_server().await;
    let fake = FakeApiServer::start().await;
    // Started well before the agent: the probes' state is inherited rather than reset.
    fake.insert_pod(started_a_minute_ago(pod("steady", "node-a", true, Some(http_probe(port)))));

    let (agent, kubeconfig) = start_agent(&fake, "gates-restart");
    let first = wait_for_gate(&fake, "steady", "True", |c| c["status"] == "True").await;
    stop(agent, kubeconfig).await;
    let writes = pod_writes(&fake).len();
    let seen = fake.requests().len();

    let (agent, kubeconfig) = start_agent(&fake, "gates-restart-2");
    // Until the watch has listed and a few periods have passed.
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    while !fake.requests().iter().skip(seen).any(RecordedRequest::is_watch) {
        assert!(tokio::time::Instant::now() < deadline, "a watch within 30 s");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    tokio::time::sleep(Duration::from_secs(4)).await;
    stop(agent, kubeconfig).await;
    assert_eq!(pod_writes(&fake).len(), writes, "{:?}", pod_writes(&fake));
    assert_eq!(gate_condition(&fake.pod_json("default", "steady").unwrap()), Some(first));
}

/// Another writer drops the condition (a JSON merge patch of `conditions` without it, as in
/// the recorded case 22): the agent sees it in the watch and writes it again.
#[tokio::test]
async fn a_condition_another_writer_removed_is_written_again() {
    let (port, _healthy) = support::health::toggled_health_server().await;
    let fake = FakeApiServer::start().await;
    fake.insert_pod(pod("dropped", "node-a", true, Some(http_probe(port))));
    let (agent, kubeconfig) = start_agent(&fake, "gates-dropped");
    wait_for_gate(&fake, "dropped", "True", |c| c["status"] == "True").await;

    let others: Vec<Value> = fake.pod_json("default", "dropped").unwrap()["status"]["conditions"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|c| c["type"] != GATE)
        .cloned()
        .collect();
    let api: kube::Api<Pod> = kube::Api::namespaced(fake.client(), "default");
    let patch = json!({"status": {"conditions": others}});
    let writes = pod_writes(&fake).len();
    let patched = api
        .patch_status("dropped", &kube::api::PatchParams::default(), &kube::api::Patch::Merge(&patch))
        .await
        .unwrap();
    // (Checked in the answer: the agent may have written it back before a GET.)
    assert!(gate_condition(&serde_json::to_value(&patched).unwrap()).is_none(), "removed");

    let back = wait_for_gate(&fake, "dropped", "True again", |c| c["status"] == "True").await;
    assert_eq!(back["reason"], "ReadinessProbesSucceeded");
    stop(agent, kubeconfig).await;
    let rewrites: Vec<_> = pod_writes(&fake).into_iter().skip(writes + 1).collect();
    assert_eq!(rewrites.len(), 1, "one apply puts it back: {rewrites:?}");
    assert_eq!(rewrites[0].content_type.as_deref(), Some("application/apply-patch+yaml"));
}

/// The API server's etcd is restored from a backup taken before the condition was written,
/// without `--bump-revision`: the pod's resourceVersion goes back below the one the agent's
/// write produced. The agent's watch (asking from a version the server has not reached) lists
/// again, and the listed copy, older than the write, says the condition is gone: it is written
/// again. Before, the watch asked again from the same version for good, and the condition
/// written stood for the server's until the restored counter passed the write's version.
#[tokio::test]
async fn a_condition_an_etcd_restore_took_away_is_written_again() {
    let (port, _healthy) = support::health::toggled_health_server().await;
    let fake = FakeApiServer::start().await;
    fake.insert_pod(pod("restored", "node-a", true, Some(http_probe(port))));
    let backup = fake.backup();
    let (agent, kubeconfig) = start_agent(&fake, "gates-restored");
    wait_for_gate(&fake, "restored", "True", |c| c["status"] == "True").await;

    fake.restore(backup);
    assert!(gate_condition(&fake.pod_json("default", "restored").unwrap()).is_none(), "restored");
    let restored = tokio::time::Instant::now();
    let back = wait_for_gate(&fake, "restored", "True again", |c| c["status"] == "True").await;
    assert_eq!(back["reason"], "ReadinessProbesSucceeded");
    let took = restored.elapsed();
    // The watch lists again once its version has been refused for 10 s.
    assert!(took < Duration::from_secs(28), "written again {took:?} after the restore");
    stop(agent, kubeconfig).await;
}

/// A kubelet that tracks pod generations writes `observedGeneration`: the gate condition
/// carries the pod's generation too.
#[tokio::test]
async fn the_condition_observes_the_generation_where_the_kubelet_does() {
    let (port, _healthy) = support::health::toggled_health_server().await;
    let fake = FakeApiServer::start().await;
    let mut tracked = pod("tracked", "node-a", true, Some(http_probe(port)));
    tracked.status.as_mut().unwrap().observed_generation = Some(1);
    let generation = fake.insert_pod(tracked).metadata.generation.unwrap();
    let (agent, kubeconfig) = start_agent(&fake, "gates-generation");
    let ready = wait_for_gate(&fake, "tracked", "True", |c| c["status"] == "True").await;
    assert_eq!(ready["observedGeneration"], generation, "{ready}");
    stop(agent, kubeconfig).await;
}

/// A probe changed in the annotation is a new probe: the condition written for the old one is
/// not kept while the new one has no result, so a new probe that has not run yet (here held
/// back by its initial delay) turns the gate False. (It stayed True on the old probe's success,
/// for good when the new probe could only error.)
#[tokio::test]
async fn a_changed_probe_does_not_inherit_the_old_probes_success() {
    let (port, _healthy) = support::health::toggled_health_server().await;
    let fake = FakeApiServer::start().await;
    // Started well before the agent, so that a new probe's worker starts without a result (a
    // container that has just started is seeded with a Failure, which would say False anyway).
    fake.insert_pod(started_a_minute_ago(pod("changed", "node-a", true, Some(http_probe(port)))));
    let (agent, kubeconfig) = start_agent(&fake, "gates-changed");
    wait_for_gate(&fake, "changed", "True", |c| c["status"] == "True").await;

    let mut changed = fake.pod("default", "changed").unwrap();
    let later = json!([{
        "name": "backend",
        "probe": {"httpGet": {"path": "/healthz", "port": port}, "periodSeconds": 1, "initialDelaySeconds": 600}
    }]);
    changed.metadata.annotations = Some(BTreeMap::from([(ANNOTATION.to_owned(), later.to_string())]));
    fake.insert_pod(changed);
    let failed = wait_for_gate(&fake, "changed", "False", |c| c["status"] == "False").await;
    assert_eq!(failed["reason"], "ReadinessProbesFailed");
    stop(agent, kubeconfig).await;
}

/// Probes changed while the agent was down are not known as changed when it starts again: the
/// condition written for the old ones is kept only while the new ones may still be waiting for
/// their first run. A new probe that only errors (a request that cannot be built: no result, ever)
/// turns the gate False once that window is over, instead of leaving it True for good.
#[tokio::test]
async fn a_probe_changed_while_the_agent_was_down_keeps_the_old_verdict_only_for_a_while() {
    let (port, _healthy) = support::health::toggled_health_server().await;
    let fake = FakeApiServer::start().await;
    fake.insert_pod(started_a_minute_ago(pod("offline", "node-a", true, Some(http_probe(port)))));
    let (agent, kubeconfig) = start_agent(&fake, "gates-offline");
    wait_for_gate(&fake, "offline", "True", |c| c["status"] == "True").await;
    stop(agent, kubeconfig).await;

    let mut changed = fake.pod("default", "offline").unwrap();
    let erroring = json!([{
        "name": "backend",
        "probe": {
            // A path that leaves the URL no host (`foo:bar` is an opaque URL): the request
            // cannot be built, and the probe errors.
            "httpGet": {"path": "foo:bar", "port": port},
            "periodSeconds": 1, "timeoutSeconds": 1
        }
    }]);
    changed.metadata.annotations = Some(BTreeMap::from([(ANNOTATION.to_owned(), erroring.to_string())]));
    fake.insert_pod(changed);
    let (agent, kubeconfig) = start_agent(&fake, "gates-offline-2");
    // The window: 0 s initial delay, 1 s period, 1 s timeout and 10 s; then the next write.
    let failed = wait_for_gate(&fake, "offline", "False", |c| c["status"] == "False").await;
    assert_eq!(failed["reason"], "ReadinessProbesFailed");
    assert_eq!(failed["message"], "readiness probes with unready status: [backend]");
    stop(agent, kubeconfig).await;
}

/// The fake's status PATCHes of pod `name`, by arrival time; the next `n` answered `kind`.
fn failing_gate_writes(
    fake: &FakeApiServer,
    name: &str,
    kind: support::apiserver::FaultKind,
    n: u32,
) -> std::sync::Arc<std::sync::Mutex<Vec<tokio::time::Instant>>> {
    use support::apiserver::{Fault, FaultMatcher, FaultTimes};
    let path = format!("/api/v1/namespaces/default/pods/{name}/status");
    let arrivals = fake.arrivals(http::Method::PATCH, {
        let path = path.clone();
        move |p| p == path
    });
    fake.inject(Fault {
        matcher: FaultMatcher::MethodPath(http::Method::PATCH, path),
        kind,
        times: FaultTimes::Times(n),
    });
    arrivals
}

/// A failed condition write is made again on the syncer's back-off (0.5 s, then 1 s, each cut
/// by up to a quarter), not only at the next reconcile ten seconds on.
#[tokio::test]
async fn a_failed_condition_write_is_retried_on_its_back_off() {
    let (port, _healthy) = support::health::toggled_health_server().await;
    let fake = FakeApiServer::start().await;
    fake.insert_pod(pod("retried", "node-a", true, Some(http_probe(port))));
    let fault = support::apiserver::FaultKind::Status { code: 500, retry_after: None };
    let arrivals = failing_gate_writes(&fake, "retried", fault, 2);
    let (agent, kubeconfig) = start_agent(&fake, "gates-retried");
    wait_for_gate(&fake, "retried", "True", |c| c["status"] == "True").await;
    stop(agent, kubeconfig).await;
    let arrivals = arrivals.lock().unwrap().clone();
    assert!(arrivals.len() >= 3, "two failures, then the write: {arrivals:?}");
    let (first, second) = (arrivals[1] - arrivals[0], arrivals[2] - arrivals[1]);
    assert!(first >= Duration::from_millis(375) && first < Duration::from_secs(3), "{first:?}");
    assert!(second >= Duration::from_millis(750) && second < Duration::from_secs(4), "{second:?}");
}

/// A write throttled with `Retry-After` (API Priority and Fairness's plain-text 429) is not made
/// again sooner, even when the probe's result changes meanwhile, which before wrote at once.
#[tokio::test]
async fn a_throttled_condition_write_waits_as_asked_whatever_changes() {
    let (port, healthy) = support::health::toggled_health_server().await;
    let fake = FakeApiServer::start().await;
    fake.insert_pod(pod("throttled", "node-a", true, Some(http_probe(port))));
    let arrivals = failing_gate_writes(&fake, "throttled", support::apiserver::FaultKind::throttled(5), 1);
    let (agent, kubeconfig) = start_agent(&fake, "gates-throttled");
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    while arrivals.lock().unwrap().is_empty() {
        assert!(tokio::time::Instant::now() < deadline, "no condition write within 30 s");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    // The probe fails from now on (failureThreshold 1, period 1 s): a change within 2 s.
    healthy.store(false, Ordering::SeqCst);
    wait_for_gate(&fake, "throttled", "False", |c| c["status"] == "False").await;
    stop(agent, kubeconfig).await;
    let arrivals = arrivals.lock().unwrap().clone();
    assert!(arrivals.len() >= 2, "{arrivals:?}");
    let gap = arrivals[1] - arrivals[0];
    assert!(gap >= Duration::from_secs(5), "the next write came {gap:?} after the 429 asked for 5 s");
}
