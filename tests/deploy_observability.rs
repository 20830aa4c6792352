//! `deploy/`'s Grafana dashboard, Prometheus alert rules and kustomization, checked against the
//! real agent: every PromQL expression parses, and every metric, label and label value it names
//! is one the agent's own `/metrics` exported in a run (standalone with probes of every kind, and
//! cluster mode against the fake API server for the status-write metrics). Scrape-time labels
//! (`job`, `instance`, and `node` from the ServiceMonitor's relabeling) are checked against the
//! deployment instead.

// The real binary runs on real time: its tests read the real clocks too.
#![allow(clippy::disallowed_methods)]
// Helpers here may panic: a panic fails the test that called them.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use probelet_test_support as support;

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::time::Duration;

use k8s_openapi::api::core::v1::{
    Container, ContainerState, ContainerStateRunning, ContainerStatus, HTTPGetAction, Pod, PodSpec,
    PodStatus, Probe,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, Time};
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use k8s_openapi::jiff::Timestamp;
use probelet_actors::metrics::{LABEL_PROBE_TYPE, PROBELET_WORKER_RESTARTS_TOTAL};
use promql_parser::parser::{self, Expr, LabelModifier};
use serde_json::Value;
use support::apiserver::FakeApiServer;

fn repo_path(relative: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join(relative)
}

fn read(relative: &str) -> String {
    std::fs::read_to_string(repo_path(relative)).unwrap_or_else(|e| panic!("{relative}: {e}"))
}

fn yaml_documents(relative: &str) -> Vec<Value> {
    let docs: Vec<Value> =
        serde_saphyr::from_multiple(&read(relative)).unwrap_or_else(|e| panic!("{relative}: {e}"));
    docs.into_iter().filter(|doc| !doc.is_null()).collect()
}

fn dashboard() -> Value {
    serde_json::from_str(&read("deploy/grafana-dashboard.json")).expect("the dashboard is JSON")
}

// === what the agent exports ===

/// Series names of a scrape, each with its label names and the values seen for each.
#[derive(Debug, Default)]
struct Exported(BTreeMap<String, BTreeMap<String, BTreeSet<String>>>);

impl Exported {
    /// Adds the samples of a Prometheus text exposition.
    fn add(&mut self, text: &str) {
        for line in text.lines().filter(|l| !l.is_empty() && !l.starts_with('#')) {
            let name_end = line.find(['{', ' ']).unwrap_or(line.len());
            let labels = self.0.entry(line[..name_end].to_owned()).or_default();
            if line[name_end..].starts_with('{') {
                for (name, value) in parse_labels(&line[name_end + 1..]) {
                    labels.entry(name).or_default().insert(value);
                }
            }
        }
    }

    fn has(&self, series: &str) -> bool {
        self.0.contains_key(series)
    }
}

/// `a="x",b="y\"z"} 1` → the pairs, unescaped (text format 0.0.4).
fn parse_labels(mut rest: &str) -> Vec<(String, String)> {
    let mut pairs = Vec::new();
    while let Some((name, after)) = rest.split_once("=\"") {
        let mut value = String::new();
        let mut chars = after.char_indices();
        let end = loop {
            match chars.next() {
                Some((_, '\\')) => match chars.next() {
                    Some((_, 'n')) => value.push('\n'),
                    Some((_, c)) => value.push(c),
                    None => panic!("a dangling escape in {rest:?}"),
                },
                Some((i, '"')) => break i,
                Some((_, c)) => value.push(c),
                None => panic!("an unterminated label value in {rest:?}"),
            }
        };
        pairs.push((name.trim_start_matches(',').to_owned(), value));
        rest = &after[end + 1..];
        if rest.starts_with('}') {
            break;
        }
    }
    pairs
}

use support::agent::metrics as scrape;

/// Scrapes until every series in `want` is there (at most 60 s); returns the last scrape.
async fn scrape_until(addr: &str, want: &[&str]) -> String {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
    loop {
        let text = scrape(addr).await;
        let mut seen = Exported::default();
        seen.add(&text);
        let missing: Vec<_> = want.iter().filter(|series| !seen.has(series)).collect();
        if missing.is_empty() {
            return text;
        }
        assert!(tokio::time::Instant::now() < deadline, "not exported within 60 s: {missing:?}\n{text}");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

use support::agent::RunningAgent as Agent;

/// Starts the agent binary with `args` on a free loopback port.
async fn start_agent(args: &[&str]) -> Agent {
    Agent::start(env!("CARGO_BIN_EXE_probelet"), args).await
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port()
}

/// A pod with a probe of each handler and each probe type: the server's startup (HTTP),
/// readiness (gRPC) and liveness (TCP) probes succeed; the checker's exec readiness probe fails,
/// and its exec liveness probe names a program that does not exist, so it errors.
fn standalone_pod() -> String {
    let (http, tcp, grpc) = (free_port(), free_port(), free_port());
    format!(
        r#"apiVersion: v1
kind: Pod
metadata:
  name: observed
  namespace: observability
spec:
  terminationGracePeriodSeconds: 2
  containers:
  - name: server
    command: ["probelet", "demo-target", "--http", "127.0.0.1:{http}", "--tcp", "127.0.0.1:{tcp}", "--grpc", "127.0.0.1:{grpc}"]
    startupProbe:
      httpGet: {{path: /healthz, port: {http}}}
      periodSeconds: 1
      failureThreshold: 30
    readinessProbe:
      grpc: {{port: {grpc}}}
      periodSeconds: 1
    livenessProbe:
      tcpSocket: {{port: {tcp}}}
      periodSeconds: 1
  - name: checker
    command: ["sleep", "1000"]
    readinessProbe:
      exec: {{command: ["false"]}}
      periodSeconds: 1
    livenessProbe:
      exec: {{command: ["/nonexistent/probe"]}}
      periodSeconds: 1
"#
    )
}

/// What the standalone agent exports once every kind of probe has run and a probe has errored.
async fn standalone_exports() -> String {
    let dir = std::env::temp_dir().join(format!("probelet-observability-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(dir.join("observed.yaml"), standalone_pod()).unwrap();
    let agent = start_agent(&["run", "--manifests", dir.to_str().unwrap(), "--node-name", "e2e"]).await;
    let want = [
        "prober_probe_total",
        "prober_probe_duration_seconds_bucket",
        "prober_probe_duration_seconds_sum",
        "prober_probe_duration_seconds_count",
        "probelet_probe_workers",
        "probelet_probe_errors_total",
    ];
    // Until each probe type has both a success and (readiness) a failure counted.
    let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
    let text = loop {
        let text = scrape_until(&agent.addr, &want).await;
        let mut seen = Exported::default();
        seen.add(&text);
        let results = &seen.0["prober_probe_total"];
        let kinds = results.get(LABEL_PROBE_TYPE).cloned().unwrap_or_default();
        let outcomes = results.get("result").cloned().unwrap_or_default();
        if kinds.len() == 3 && outcomes.contains("failed") && outcomes.contains("successful") {
            break text;
        }
        assert!(tokio::time::Instant::now() < deadline, "probes of every type within 60 s:\n{text}");
        tokio::time::sleep(Duration::from_millis(200)).await;
    };
    agent.stop().await;
    let _ = std::fs::remove_dir_all(&dir);
    text
}

/// A pod bound to node-a with an HTTP readiness probe, as the node's runtime published it.
fn cluster_pod(port: u16) -> Pod {
    Pod {
        metadata: ObjectMeta {
            name: Some("observed".into()),
            namespace: Some("default".into()),
            ..Default::default()
        },
        spec: Some(PodSpec {
            node_name: Some("node-a".into()),
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
                    ..Default::default()
                }),
                ..Default::default()
            }],
            ..Default::default()
        }),
        status: Some(PodStatus {
            phase: Some("Running".into()),
            pod_ip: Some("127.0.0.1".into()),
            container_statuses: Some(vec![ContainerStatus {
                name: "app".into(),
                image: "app:1".into(),
                image_id: String::new(),
                container_id: Some("containerd://observed".into()),
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

/// What the cluster-mode agent exports once it has written a status, and once the runtime has
/// reset the readiness it wrote (which it counts and writes again).
async fn cluster_exports() -> String {
    let (port, _healthy) = support::health::toggled_health_server().await;
    let fake = FakeApiServer::start().await;
    fake.insert_pod(cluster_pod(port));
    let kubeconfig = support::agent::kubeconfig_for(&fake.url(), "observability");
    let agent =
        start_agent(&["run", "--kubeconfig", kubeconfig.to_str().unwrap(), "--node-name", "node-a"]).await;
    let ready = |pod: &Pod| {
        pod.status.as_ref().and_then(|s| s.container_statuses.as_ref()).is_some_and(|cs| cs[0].ready)
    };
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    while !fake.pod("default", "observed").is_some_and(|p| ready(&p)) {
        assert!(tokio::time::Instant::now() < deadline, "ready within 30 s");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    // A runtime that rewrites the container statuses from its own state, ready reset.
    let mut statuses = fake.pod("default", "observed").unwrap().status.unwrap().container_statuses.unwrap();
    statuses[0].ready = false;
    let api: kube::Api<Pod> = kube::Api::namespaced(fake.client(), "default");
    let patch = serde_json::json!({"status": {"containerStatuses": statuses}});
    api.patch_status("observed", &kube::api::PatchParams::default(), &kube::api::Patch::Merge(patch))
        .await
        .unwrap();
    let text = scrape_until(
        &agent.addr,
        &[
            "probelet_status_syncs_total",
            "probelet_api_requests_total",
            "probelet_status_sync_duration_seconds_bucket",
            "probelet_status_sync_duration_seconds_sum",
            "probelet_status_sync_duration_seconds_count",
            "probelet_runtime_resets_total",
        ],
    )
    .await;
    agent.stop().await;
    let _ = std::fs::remove_file(&kubeconfig);
    text
}

/// Metrics a black-box run cannot make the agent export, with the labels the engine gives them:
/// a worker restart needs a worker that died of a bug. The name is the library's own constant,
/// and `tests/pipeline_worker.rs` (`worker_that_dies_is_restarted_after_back_off`) shows the
/// engine exporting it with this label.
fn not_seen_in_a_run() -> Vec<(String, BTreeMap<String, BTreeSet<String>>)> {
    vec![(PROBELET_WORKER_RESTARTS_TOTAL.to_owned(), [(LABEL_PROBE_TYPE.to_owned(), BTreeSet::new())].into())]
}

// === PromQL ===

/// Grafana's own variables, replaced by what they stand for before parsing.
const GRAFANA_INTERVALS: [&str; 3] = ["$__rate_interval", "$__interval", "$__range"];

/// The dashboard variables an expression uses (`$name`, `${name}`), besides Grafana's own.
fn variables_in(expr: &str) -> BTreeSet<String> {
    let mut names = BTreeSet::new();
    for (at, _) in expr.match_indices('$') {
        let rest = expr[at + 1..].trim_start_matches('{');
        let name: String = rest.chars().take_while(|c| c.is_ascii_alphanumeric() || *c == '_').collect();
        if !name.starts_with("__") {
            names.insert(name);
        }
    }
    names
}

/// A dashboard expression as Prometheus receives it: intervals as `5m`, variables as a regex
/// that matches anything (they only appear in `=~` matchers).
fn substitute(expr: &str, variables: &BTreeSet<String>) -> String {
    let mut out = expr.to_owned();
    for interval in GRAFANA_INTERVALS {
        out = out.replace(interval, "5m");
    }
    for name in variables {
        out = out.replace(&format!("${{{name}}}"), ".*").replace(&format!("${name}"), ".*");
    }
    out
}

/// Where a name comes from: a metric (its series name) and the labels used with it.
#[derive(Debug, Default)]
struct Used {
    /// Series name → label name → the literal values an `=` matcher asks for.
    selectors: BTreeMap<String, BTreeMap<String, BTreeSet<String>>>,
    /// (grouping label, the series it groups), from `by`, `without`, `on`, `ignoring`,
    /// `group_left` and `group_right`.
    grouping: BTreeSet<(String, String)>,
}

/// Walks `expr`; returns the series names under it.
fn collect(expr: &Expr, used: &mut Used, at: &str) -> BTreeSet<String> {
    let group = |labels: &[String], series: &BTreeSet<String>, used: &mut Used| {
        for label in labels {
            for name in series {
                used.grouping.insert((label.clone(), name.clone()));
            }
        }
    };
    match expr {
        Expr::VectorSelector(vs) => {
            let name = vs.name.clone().unwrap_or_else(|| panic!("{at}: a selector without a metric name"));
            let labels = used.selectors.entry(name.clone()).or_default();
            for matcher in vs.matchers.matchers.iter().chain(vs.matchers.or_matchers.iter().flatten()) {
                let values = labels.entry(matcher.name.clone()).or_default();
                if matches!(matcher.op, promql_parser::label::MatchOp::Equal) {
                    values.insert(matcher.value.clone());
                }
            }
            [name].into()
        }
        Expr::MatrixSelector(ms) => collect(&Expr::VectorSelector(ms.vs.clone()), used, at),
        Expr::Aggregate(agg) => {
            let series = collect(&agg.expr, used, at);
            if let Some(param) = &agg.param {
                collect(param, used, at);
            }
            if let Some(LabelModifier::Include(labels) | LabelModifier::Exclude(labels)) = &agg.modifier {
                group(&labels.labels, &series, used);
            }
            series
        }
        Expr::Binary(binary) => {
            let mut series = collect(&binary.lhs, used, at);
            series.extend(collect(&binary.rhs, used, at));
            if let Some(modifier) = &binary.modifier {
                if let Some(matching) = &modifier.matching {
                    group(&matching.labels().labels, &series, used);
                }
                if let Some(labels) = modifier.card.labels() {
                    group(&labels.labels, &series, used);
                }
            }
            series
        }
        Expr::Call(call) => {
            let mut series = BTreeSet::new();
            for arg in &call.args.args {
                series.extend(collect(arg, used, at));
            }
            assert!(
                !["label_replace", "label_join"].contains(&call.func.name),
                "{at}: {} names labels in strings; check them by hand or extend this test",
                call.func.name
            );
            series
        }
        Expr::Paren(paren) => collect(&paren.expr, used, at),
        Expr::Unary(unary) => collect(&unary.expr, used, at),
        Expr::Subquery(sub) => collect(&sub.expr, used, at),
        Expr::NumberLiteral(_) | Expr::StringLiteral(_) => BTreeSet::new(),
        Expr::Extension(_) => panic!("{at}: the parser made an extension node"),
    }
}

fn parse(expr: &str, at: &str, used: &mut Used) {
    let parsed = parser::parse(expr).unwrap_or_else(|e| panic!("{at}: PromQL does not parse: {e}\n{expr}"));
    collect(&parsed, used, at);
}

/// Every PromQL expression of the dashboard (panel targets and variable queries), parsed into
/// `used`; also checks that each variable an expression uses is one the dashboard defines.
fn dashboard_expressions(dashboard: &Value, used: &mut Used) -> usize {
    let defined: BTreeSet<String> = dashboard["templating"]["list"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v["name"].as_str().unwrap().to_owned())
        .collect();
    let mut count = 0;
    let check_variables = |expr: &str, at: &str| {
        let variables = variables_in(expr);
        let unknown: Vec<_> = variables.difference(&defined).collect();
        assert!(unknown.is_empty(), "{at}: undefined variables {unknown:?}");
        variables
    };
    let mut panels: Vec<&Value> = dashboard["panels"].as_array().unwrap().iter().collect();
    while let Some(panel) = panels.pop() {
        panels.extend(panel["panels"].as_array().into_iter().flatten());
        for target in panel["targets"].as_array().into_iter().flatten() {
            let at = format!("panel {:?} target {}", panel["title"], target["refId"]);
            let expr = target["expr"].as_str().unwrap_or_else(|| panic!("{at}: no expr"));
            let variables = check_variables(expr, &at);
            parse(&substitute(expr, &variables), &at, used);
            count += 1;
        }
    }
    for variable in dashboard["templating"]["list"].as_array().unwrap() {
        if variable["type"] != "query" {
            continue;
        }
        let at = format!("variable {}", variable["name"]);
        let query = variable["query"]["query"].as_str().unwrap_or_else(|| panic!("{at}: no query"));
        assert_eq!(variable["definition"].as_str(), Some(query), "{at}: definition is the query");
        // label_values(SELECTOR, LABEL): the selector is PromQL, the label one of its series'.
        let inner = query
            .strip_prefix("label_values(")
            .and_then(|q| q.strip_suffix(')'))
            .unwrap_or_else(|| panic!("{at}: not label_values(…): {query}"));
        let (selector, label) = inner.rsplit_once(',').unwrap();
        let variables = check_variables(selector, &at);
        let parsed = parser::parse(&substitute(selector, &variables))
            .unwrap_or_else(|e| panic!("{at}: PromQL does not parse: {e}\n{selector}"));
        let series = collect(&parsed, used, &at);
        for name in series {
            used.grouping.insert((label.trim().to_owned(), name));
        }
        count += 1;
    }
    count
}

/// Every alert rule's expression, parsed into `used`.
fn rule_expressions(used: &mut Used) -> usize {
    let mut count = 0;
    for rule in alert_rules() {
        let at = format!("alert {}", rule["alert"]);
        parse(rule["expr"].as_str().unwrap(), &at, used);
        count += 1;
    }
    count
}

fn alert_rules() -> Vec<Value> {
    let docs = yaml_documents("deploy/prometheus-rule.yaml");
    let [rule] = docs.as_slice() else { panic!("one PrometheusRule") };
    rule["spec"]["groups"]
        .as_array()
        .unwrap()
        .iter()
        .flat_map(|group| group["rules"].as_array().unwrap().clone())
        .collect()
}

/// Labels Prometheus adds to every series of a target: `job` (the Service's name), `instance`,
/// and what the ServiceMonitor's relabelings write.
fn scrape_labels() -> BTreeSet<String> {
    let docs = yaml_documents("deploy/servicemonitor.yaml");
    let monitor = docs.iter().find(|doc| doc["kind"] == "ServiceMonitor").unwrap();
    let mut labels: BTreeSet<String> = ["job", "instance"].map(String::from).into();
    for endpoint in monitor["spec"]["endpoints"].as_array().unwrap() {
        for relabeling in endpoint["relabelings"].as_array().into_iter().flatten() {
            labels.insert(relabeling["targetLabel"].as_str().unwrap().to_owned());
        }
    }
    labels
}

/// The names `used` asks for that `exported` lacks, one line each.
fn unknown_names(used: &Used, exported: &Exported) -> Vec<String> {
    let scrape_labels = scrape_labels();
    let mut problems = Vec::new();
    for (series, labels) in &used.selectors {
        let Some(exported_labels) = exported.0.get(series) else {
            problems.push(format!("metric {series} is not exported"));
            continue;
        };
        for (label, values) in labels {
            if label == "__name__" || scrape_labels.contains(label) {
                continue;
            }
            let Some(exported_values) = exported_labels.get(label) else {
                problems.push(format!("{series} has no label {label}"));
                continue;
            };
            for value in values {
                if !exported_values.is_empty() && !exported_values.contains(value) {
                    problems.push(format!(
                        "{series}{{{label}={value:?}}}: exported values are {exported_values:?}"
                    ));
                }
            }
        }
    }
    for (label, series) in &used.grouping {
        let known = scrape_labels.contains(label)
            || exported.0.get(series).is_some_and(|labels| labels.contains_key(label));
        if exported.has(series) && !known {
            problems.push(format!("{series} has no label {label} to group by"));
        }
    }
    problems
}

/// The agent's exports from both modes, plus [`not_seen_in_a_run`].
async fn agent_exports() -> Exported {
    let mut exported = Exported::default();
    exported.add(&standalone_exports().await);
    exported.add(&cluster_exports().await);
    for (series, labels) in not_seen_in_a_run() {
        assert!(!exported.has(&series), "{series} was exported after all: drop it from not_seen_in_a_run");
        exported.0.insert(series, labels);
    }
    exported
}

#[tokio::test]
async fn dashboard_and_alerts_name_only_what_the_agent_exports() {
    let _ = rustls::crypto::ring::default_provider().install_default();
    let exported = agent_exports().await;
    let mut used = Used::default();
    let dashboard_count = dashboard_expressions(&dashboard(), &mut used);
    let rule_count = rule_expressions(&mut used);
    assert!(
        dashboard_count >= 15 && rule_count >= 6,
        "{dashboard_count} dashboard, {rule_count} rule expressions"
    );
    let problems = unknown_names(&used, &exported);
    assert!(problems.is_empty(), "names the agent does not export:\n{}", problems.join("\n"));

    // And the other way round: each metric the agent exports is on the dashboard.
    let families: BTreeSet<&str> = exported
        .0
        .keys()
        .map(|s| s.trim_end_matches("_bucket").trim_end_matches("_sum").trim_end_matches("_count"))
        .collect();
    let shown: BTreeSet<&str> = used
        .selectors
        .keys()
        .map(|s| s.trim_end_matches("_bucket").trim_end_matches("_sum").trim_end_matches("_count"))
        .collect();
    let missing: Vec<_> = families.difference(&shown).collect();
    assert!(missing.is_empty(), "exported but on neither the dashboard nor an alert: {missing:?}");
}

// === the files themselves ===

/// `Used` and `Exported` as a scrape line and the dashboard would give them, for the checker's
/// own tests below.
fn exported_from(text: &str) -> Exported {
    let mut exported = Exported::default();
    exported.add(text);
    exported
}

fn used_by(expr: &str) -> Used {
    let mut used = Used::default();
    parse(&substitute(expr, &variables_in(expr)), "test", &mut used);
    used
}

#[test]
fn the_checker_flags_unknown_metrics_labels_and_values() {
    let exported = exported_from(
        "# TYPE prober_probe_total counter\nprober_probe_total{namespace=\"a\\\"b\",probe_type=\"Readiness\",result=\"failed\"} 1\n",
    );
    assert_eq!(exported.0["prober_probe_total"]["namespace"], ["a\"b".to_owned()].into(), "escapes undone");
    let ok = used_by(
        r#"sum by (namespace, node) (rate(prober_probe_total{job=~"$job", result="failed"}[$__rate_interval]))"#,
    );
    assert_eq!(unknown_names(&ok, &exported), Vec::<String>::new());
    for (expr, problem) in [
        ("rate(prober_probes_total[5m])", "metric prober_probes_total is not exported"),
        (r#"prober_probe_total{pod_name="x"}"#, "prober_probe_total has no label pod_name"),
        (r#"prober_probe_total{probe_type="readiness"}"#, "prober_probe_total{probe_type=\"readiness\"}"),
        ("sum by (reason) (prober_probe_total)", "prober_probe_total has no label reason to group by"),
    ] {
        let problems = unknown_names(&used_by(expr), &exported);
        assert!(problems.iter().any(|p| p.starts_with(problem)), "{expr}: {problems:?}");
    }
}

#[test]
fn dashboard_is_a_current_grafana_dashboard_with_its_variables() {
    let dashboard = dashboard();
    assert_eq!(dashboard["schemaVersion"], 42, "Grafana's current dashboard schema");
    assert_eq!(dashboard["uid"], "probelet-overview");
    let variables = dashboard["templating"]["list"].as_array().unwrap();
    let names: Vec<&str> = variables.iter().map(|v| v["name"].as_str().unwrap()).collect();
    assert_eq!(names, ["datasource", "job", "node", "instance", "namespace"]);
    assert_eq!(
        (variables[0]["type"].as_str(), variables[0]["query"].as_str()),
        (Some("datasource"), Some("prometheus"))
    );

    let mut ids = BTreeSet::new();
    let mut kinds = BTreeMap::<String, usize>::new();
    for panel in dashboard["panels"].as_array().unwrap() {
        assert!(ids.insert(panel["id"].as_u64().unwrap()), "panel ids are unique: {}", panel["id"]);
        let kind = panel["type"].as_str().unwrap();
        *kinds.entry(kind.to_owned()).or_default() += 1;
        if kind == "row" {
            continue;
        }
        assert_eq!(
            panel["datasource"]["uid"], "${datasource}",
            "panel {:?} uses the variable",
            panel["title"]
        );
        for target in panel["targets"].as_array().unwrap() {
            assert_eq!(target["datasource"]["uid"], "${datasource}", "panel {:?}", panel["title"]);
        }
        let grid = &panel["gridPos"];
        let (x, w) = (grid["x"].as_u64().unwrap(), grid["w"].as_u64().unwrap());
        assert!(x + w <= 24, "panel {:?} fits the 24-column grid", panel["title"]);
    }
    let heatmap = dashboard["panels"].as_array().unwrap().iter().find(|p| p["type"] == "heatmap").unwrap();
    let target = &heatmap["targets"][0];
    assert_eq!(target["format"], "heatmap", "buckets as a heat map, not as series");
    assert!(target["expr"].as_str().unwrap().contains("prober_probe_duration_seconds_bucket"));
    assert!(target["expr"].as_str().unwrap().starts_with("sum by (le)"));
    assert_eq!(heatmap["options"]["calculate"], false, "Prometheus buckets, not Grafana's own");
    assert!(kinds["timeseries"] >= 10 && kinds["table"] == 1, "{kinds:?}");
}

#[test]
fn every_alert_has_for_severity_annotations_and_a_runbook() {
    let runbook = read("deploy/README.md");
    let rules = alert_rules();
    let mut names = BTreeSet::new();
    for rule in &rules {
        let name = rule["alert"].as_str().unwrap();
        assert!(names.insert(name), "{name}: alert names are unique");
        assert!(name.starts_with("Probelet"), "{name}");
        let r#for = rule["for"].as_str().unwrap_or_else(|| panic!("{name}: no `for`"));
        assert!(r#for.ends_with('m'), "{name}: for {for}");
        let severity = rule["labels"]["severity"].as_str();
        assert!(matches!(severity, Some("warning" | "critical")), "{name}: severity {severity:?}");
        for annotation in ["summary", "description"] {
            assert!(
                rule["annotations"][annotation].as_str().is_some_and(|s| !s.is_empty()),
                "{name}: {annotation}"
            );
        }
        assert!(
            rule["expr"].as_str().unwrap().contains(r#"job="probelet-metrics""#),
            "{name}: only the agents' series"
        );
        assert!(runbook.contains(&format!("### {name}\n")), "{name}: no runbook section in deploy/README.md");
    }
    // The job the rules select is the Service Prometheus scrapes.
    let docs = yaml_documents("deploy/servicemonitor.yaml");
    let service = docs.iter().find(|doc| doc["kind"] == "Service").unwrap();
    assert_eq!(service["metadata"]["name"], "probelet-metrics");
    let monitor = docs.iter().find(|doc| doc["kind"] == "ServiceMonitor").unwrap();
    let endpoint = &monitor["spec"]["endpoints"][0];
    assert_eq!(endpoint["honorLabels"], true, "the probed pod's namespace/pod/container labels are kept");
    assert_eq!(endpoint["relabelings"][0]["sourceLabels"][0], "__meta_kubernetes_pod_node_name");
    assert_eq!(rules.len(), 8);
}

/// `kubectl kustomize deploy/` when kubectl is installed: the whole deployment, with the
/// dashboard as a ConfigMap Grafana's sidecar picks up and without the optional delete role.
#[test]
fn kustomize_builds_the_whole_deployment() {
    let output =
        match std::process::Command::new("kubectl").arg("kustomize").arg(repo_path("deploy")).output() {
            Ok(output) => output,
            Err(e) => {
                println!("skipped: kubectl is not installed ({e})");
                return;
            }
        };
    assert!(output.status.success(), "kubectl kustomize: {}", String::from_utf8_lossy(&output.stderr));
    let docs: Vec<Value> = serde_saphyr::from_multiple(&String::from_utf8(output.stdout).unwrap()).unwrap();
    let objects: BTreeSet<(String, String)> = docs
        .iter()
        .map(|doc| {
            (doc["kind"].as_str().unwrap().to_owned(), doc["metadata"]["name"].as_str().unwrap().to_owned())
        })
        .collect();
    let want: BTreeSet<(String, String)> = [
        ("Namespace", "probelet-system"),
        ("ServiceAccount", "probelet"),
        ("ClusterRole", "probelet"),
        ("ClusterRoleBinding", "probelet"),
        ("DaemonSet", "probelet"),
        ("Service", "probelet-metrics"),
        ("ServiceMonitor", "probelet"),
        ("PrometheusRule", "probelet"),
        ("ConfigMap", "probelet-grafana-dashboard"),
    ]
    .into_iter()
    .map(|(kind, name)| (kind.to_owned(), name.to_owned()))
    .collect();
    assert_eq!(objects, want);
    let config_map = docs.iter().find(|doc| doc["kind"] == "ConfigMap").unwrap();
    assert_eq!(config_map["metadata"]["namespace"], "probelet-system");
    assert_eq!(config_map["metadata"]["labels"]["grafana_dashboard"], "1");
    let embedded: Value =
        serde_json::from_str(config_map["data"]["probelet.json"].as_str().unwrap()).unwrap();
    assert_eq!(embedded, dashboard(), "the ConfigMap carries the dashboard file unchanged");
}
