//! The YAML the repository ships: `deploy/` (cluster deployment) and `examples/pods/` (what the
//! standalone agent runs). Every file parses; kinds are as expected; typed objects survive a
//! round trip through k8s-openapi unchanged (so a misspelt field fails here, not in a cluster);
//! the examples keep the API server's probe validation rules, use distinct loopback ports, and
//! their `probelet demo-target` command lines parse and match their probes.
// The helpers below panic on purpose: a panic fails the test that called them.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::time::Duration;

use clap::Parser;
use k8s_openapi::api::apps::v1::DaemonSet;
use k8s_openapi::api::core::v1::{Container, Namespace, Pod, Probe, Service, ServiceAccount};
use k8s_openapi::api::rbac::v1::{ClusterRole, ClusterRoleBinding};
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use probelet::demo::DemoArgs;
use serde::Serialize;
use serde::de::DeserializeOwned;
use serde_json::Value;

fn repo_path(relative: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join(relative)
}

/// Every `*.yaml` in a folder, sorted.
fn yaml_files(folder: &str) -> Vec<PathBuf> {
    let mut files: Vec<PathBuf> = std::fs::read_dir(repo_path(folder))
        .unwrap()
        .map(|entry| entry.unwrap().path())
        .filter(|path| path.extension().is_some_and(|ext| ext == "yaml" || ext == "yml"))
        .collect();
    files.sort();
    files
}

fn file_name(path: &Path) -> String {
    path.file_name().unwrap().to_string_lossy().into_owned()
}

/// The documents of a (possibly multi-document) YAML file.
fn documents(path: &Path) -> Vec<Value> {
    let text = std::fs::read_to_string(path).unwrap();
    let docs: Vec<Value> = serde_saphyr::from_multiple(&text)
        .unwrap_or_else(|e| panic!("{}: not valid YAML: {e}", path.display()));
    docs.into_iter().filter(|doc| !doc.is_null()).collect()
}

fn kind(doc: &Value) -> &str {
    doc["kind"].as_str().unwrap_or_else(|| panic!("a document without kind: {doc}"))
}

/// Deserialises into `T` and checks that serialising gives the document back: k8s-openapi
/// ignores unknown fields, so a misspelt or misplaced one only shows as a difference here.
fn typed<T: DeserializeOwned + Serialize>(what: &str, doc: &Value) -> T {
    let object: T = serde_json::from_value(doc.clone()).unwrap_or_else(|e| panic!("{what}: {e}"));
    let back = serde_json::to_value(&object).unwrap();
    assert_eq!(&back, doc, "{what}: fields lost in a round trip through k8s-openapi (unknown or misplaced)");
    object
}

// === deploy/ ===

#[test]
fn deploy_files_have_the_expected_kinds() {
    let files: BTreeMap<String, Vec<String>> = yaml_files("deploy")
        .iter()
        .map(|path| (file_name(path), documents(path).iter().map(|doc| kind(doc).to_string()).collect()))
        .collect();
    let want: BTreeMap<String, Vec<String>> = [
        ("daemonset.yaml", vec!["DaemonSet"]),
        ("kustomization.yaml", vec!["Kustomization"]),
        ("prometheus-rule.yaml", vec!["PrometheusRule"]),
        (
            "rbac.yaml",
            vec![
                "Namespace",
                "ServiceAccount",
                "ClusterRole",
                "ClusterRoleBinding",
                "ClusterRole",
                "ClusterRoleBinding",
            ],
        ),
        ("servicemonitor.yaml", vec!["Service", "ServiceMonitor"]),
    ]
    .into_iter()
    .map(|(file, kinds)| (file.to_string(), kinds.into_iter().map(String::from).collect()))
    .collect();
    assert_eq!(files, want);
}

/// (apiGroup, resource, verb) triples a ClusterRole grants.
fn grants(role: &ClusterRole) -> BTreeSet<(String, String, String)> {
    let mut out = BTreeSet::new();
    for rule in role.rules.iter().flatten() {
        for group in rule.api_groups.iter().flatten() {
            for resource in rule.resources.iter().flatten() {
                for verb in &rule.verbs {
                    out.insert((group.clone(), resource.clone(), verb.clone()));
                }
            }
        }
    }
    out
}

#[test]
fn rbac_is_least_privilege_with_delete_apart() {
    let docs = documents(&repo_path("deploy/rbac.yaml"));
    let namespace: Namespace = typed("namespace", &docs[0]);
    assert_eq!(namespace.metadata.name.as_deref(), Some("probelet-system"));
    let account: ServiceAccount = typed("service account", &docs[1]);
    assert_eq!(account.metadata.name.as_deref(), Some("probelet"));
    assert_eq!(account.metadata.namespace.as_deref(), Some("probelet-system"));

    let roles: Vec<ClusterRole> =
        docs.iter().filter(|doc| kind(doc) == "ClusterRole").map(|doc| typed("cluster role", doc)).collect();
    let bindings: Vec<ClusterRoleBinding> = docs
        .iter()
        .filter(|doc| kind(doc) == "ClusterRoleBinding")
        .map(|doc| typed("cluster role binding", doc))
        .collect();

    // What the roles grant is checked against the requests the agent sends, in
    // `tests/agent_cluster.rs` (`rbac_grants_exactly_what_the_agent_requests`); here only the
    // split: deleting pods is the separate, optional role's and nothing else is.
    assert_eq!(roles.len(), 2);
    assert_eq!(roles[0].metadata.name.as_deref(), Some("probelet"));
    assert!(
        grants(&roles[0]).iter().all(|(_, _, verb)| verb != "delete"),
        "the agent's role deletes nothing"
    );
    assert_eq!(roles[1].metadata.name.as_deref(), Some("probelet-delete-pods"));
    let triple = |g: &str, r: &str, v: &str| (g.to_string(), r.to_string(), v.to_string());
    assert_eq!(grants(&roles[1]), [triple("", "pods", "delete")].into(), "the delete-pod role");

    for (binding, role) in bindings.iter().zip(&roles) {
        assert_eq!(binding.role_ref.kind, "ClusterRole");
        assert_eq!(Some(&binding.role_ref.name), role.metadata.name.as_ref(), "binding of the role");
        let subjects = binding.subjects.as_deref().unwrap();
        assert_eq!(subjects.len(), 1);
        assert_eq!(
            (subjects[0].kind.as_str(), subjects[0].name.as_str(), subjects[0].namespace.as_deref()),
            ("ServiceAccount", "probelet", Some("probelet-system"))
        );
    }
}

#[test]
fn daemonset_runs_the_agent_in_cluster_mode_locked_down() {
    let docs = documents(&repo_path("deploy/daemonset.yaml"));
    let ds: DaemonSet = typed("daemonset", &docs[0]);
    assert_eq!(ds.metadata.namespace.as_deref(), Some("probelet-system"));
    let spec = ds.spec.unwrap();
    let template = spec.template;
    assert_eq!(
        template.metadata.unwrap().labels,
        spec.selector.match_labels,
        "selector matches the template"
    );
    let pod = template.spec.unwrap();
    assert_eq!(pod.service_account_name.as_deref(), Some("probelet"));
    assert!(pod.node_selector.is_some(), "never every node: only nodes without a probing kubelet");
    assert_eq!(pod.security_context.unwrap().run_as_non_root, Some(true));

    let [agent] = pod.containers.as_slice() else { panic!("one container") };
    assert_eq!(agent.image.as_deref(), Some("probelet:latest"));
    let args = agent.args.as_deref().unwrap();
    assert_eq!(
        args,
        [
            "run",
            "--in-cluster",
            "--node-name",
            "$(NODE_NAME)",
            "--listen",
            "0.0.0.0:9898",
            "--healthz-listen",
            "0.0.0.0:9899"
        ]
    );
    assert!(!args.iter().any(|arg| arg.starts_with("--kubeconfig")), "in-cluster config");
    let node_name = agent.env.iter().flatten().find(|env| env.name == "NODE_NAME").unwrap();
    let field = node_name.value_from.as_ref().unwrap().field_ref.as_ref().unwrap();
    assert_eq!(field.field_path, "spec.nodeName", "NODE_NAME from the downward API");

    let ports = agent.ports.as_deref().unwrap();
    assert_eq!((ports[0].name.as_deref(), ports[0].container_port), (Some("metrics"), 9898));
    assert_eq!((ports[1].name.as_deref(), ports[1].container_port), (Some("healthz"), 9899));
    let path_of =
        |probe: &Option<Probe>| probe.as_ref().unwrap().http_get.as_ref().unwrap().path.clone().unwrap();
    assert_eq!(path_of(&agent.liveness_probe), "/healthz");
    assert_eq!(path_of(&agent.readiness_probe), "/readyz");
    // The health listener: plain HTTP, apart from the main listener's connections.
    for probe in [&agent.startup_probe, &agent.liveness_probe, &agent.readiness_probe] {
        let get = probe.as_ref().unwrap().http_get.as_ref().unwrap();
        assert_eq!(get.scheme.as_deref(), Some("HTTP"), "{get:?}");
        assert_eq!(get.port, IntOrString::String("healthz".into()), "{get:?}");
    }
    assert!(agent.resources.as_ref().unwrap().requests.as_ref().is_some_and(|r| r.contains_key("cpu")));
    let security = agent.security_context.as_ref().unwrap();
    assert_eq!(security.read_only_root_filesystem, Some(true));
    assert_eq!(security.run_as_non_root, Some(true));
    assert_eq!(security.allow_privilege_escalation, Some(false));
}

#[test]
fn service_monitor_scrapes_the_agents_metrics_port() {
    let docs = documents(&repo_path("deploy/servicemonitor.yaml"));
    let service: Service = typed("service", &docs[0]);
    let spec = service.spec.unwrap();
    let port = &spec.ports.as_deref().unwrap()[0];
    assert_eq!(port.name.as_deref(), Some("metrics"));
    assert_eq!(port.port, 9898);
    assert_eq!(
        port.target_port,
        Some(IntOrString::String("metrics".to_string())),
        "the DaemonSet's port name"
    );
    let labels = service.metadata.labels.unwrap();

    let monitor = &docs[1];
    assert_eq!(monitor["apiVersion"], "monitoring.coreos.com/v1");
    assert_eq!(monitor["metadata"]["namespace"], "probelet-system");
    for (key, value) in &labels {
        assert_eq!(
            monitor["spec"]["selector"]["matchLabels"][key],
            value.as_str(),
            "monitor selects the service"
        );
    }
    let endpoint = &monitor["spec"]["endpoints"][0];
    assert_eq!((endpoint["port"].as_str(), endpoint["path"].as_str()), (Some("metrics"), Some("/metrics")));
    // /metrics is guarded (nodes/metrics) and served over HTTPS with a self-signed certificate.
    assert_eq!(endpoint["scheme"], "https");
    assert_eq!(endpoint["bearerTokenFile"], "/var/run/secrets/kubernetes.io/serviceaccount/token");
    assert_eq!(endpoint["tlsConfig"]["insecureSkipVerify"], true);
}

#[test]
fn dockerfile_builds_locked_and_runs_non_root() {
    let text = std::fs::read_to_string(repo_path("deploy/Dockerfile")).unwrap();
    for needle in [
        "FROM rust:1.95 AS builder",
        "cargo build --release --locked",
        "FROM debian:bookworm-slim",
        "ca-certificates",
        "USER 65532:65532",
        r#"ENTRYPOINT ["probelet"]"#,
    ] {
        assert!(text.contains(needle), "Dockerfile lacks {needle:?}");
    }
    // The DaemonSet's runAsUser is the image's user.
    let ds = &documents(&repo_path("deploy/daemonset.yaml"))[0];
    assert_eq!(ds["spec"]["template"]["spec"]["securityContext"]["runAsUser"], 65532);
}

// === examples/pods/ ===

/// Every example pod as (file, pod).
fn example_pods() -> Vec<(String, Pod)> {
    let mut pods = Vec::new();
    for path in yaml_files("examples/pods") {
        let file = file_name(&path);
        for doc in documents(&path) {
            assert_eq!(kind(&doc), "Pod", "{file}: only pods");
            let pod: Pod = typed(&file, &doc);
            let name = pod.metadata.name.clone().unwrap();
            pods.push((format!("{file}/{name}"), pod));
        }
    }
    pods
}

/// Regular containers and init containers, each with whether it is a sidecar.
fn all_containers(pod: &Pod) -> Vec<(&Container, bool)> {
    let spec = pod.spec.as_ref().unwrap();
    let init =
        spec.init_containers.iter().flatten().map(|c| (c, c.restart_policy.as_deref() == Some("Always")));
    init.chain(spec.containers.iter().map(|c| (c, false))).collect()
}

fn probes(container: &Container) -> Vec<(&'static str, &Probe)> {
    [
        ("liveness", &container.liveness_probe),
        ("readiness", &container.readiness_probe),
        ("startup", &container.startup_probe),
    ]
    .into_iter()
    .filter_map(|(kind, probe)| probe.as_ref().map(|probe| (kind, probe)))
    .collect()
}

#[test]
fn examples_are_the_pods_the_readme_promises() {
    let names: Vec<String> = example_pods().into_iter().map(|(name, _)| name).collect();
    assert_eq!(
        names,
        [
            "exec.yaml/exec",
            "flaky-liveness.yaml/flaky-liveness",
            "readiness-gate.yaml/readiness-gate",
            "sidecar.yaml/sidecar",
            "start-interval.yaml/start-interval",
            "tcp-and-grpc.yaml/tcp-and-grpc",
            "two-pods.yaml/sleeper",
            "two-pods.yaml/redirect",
            "web.yaml/web",
        ]
    );
}

#[test]
fn example_probes_pass_api_validation() {
    for (pod_name, pod) in example_pods() {
        assert_eq!(pod.metadata.namespace.as_deref(), Some("default"), "{pod_name}");
        for (container, sidecar) in all_containers(&pod) {
            let at = format!("{pod_name}/{}", container.name);
            assert!(
                container.image.as_deref().is_some_and(|image| !image.is_empty()),
                "{at}: image is required"
            );
            assert!(is_dns_label(&container.name), "{at}: container name");
            for port in container.ports.iter().flatten() {
                if let Some(name) = &port.name {
                    assert!(
                        name.len() <= 15 && name.chars().any(|c| c.is_ascii_lowercase()),
                        "{at}: port {name}"
                    );
                }
            }
            let is_init =
                pod.spec.as_ref().unwrap().init_containers.iter().flatten().any(|c| c.name == container.name);
            if is_init && !sidecar {
                assert!(probes(container).is_empty(), "{at}: a regular init container cannot have probes");
            }
            for (kind, probe) in probes(container) {
                let at = format!("{at} {kind}");
                let handlers = [
                    probe.exec.is_some(),
                    probe.http_get.is_some(),
                    probe.tcp_socket.is_some(),
                    probe.grpc.is_some(),
                ];
                assert_eq!(handlers.iter().filter(|set| **set).count(), 1, "{at}: exactly one handler");
                if kind != "readiness" {
                    assert!(
                        probe.success_threshold.is_none_or(|n| n == 1),
                        "{at}: successThreshold must be 1"
                    );
                }
                if let Some(seconds) = probe.termination_grace_period_seconds {
                    assert_ne!(kind, "readiness", "{at}: probe-level grace only on liveness/startup");
                    assert!(seconds > 0, "{at}: grace must be positive");
                }
                for value in [probe.period_seconds, probe.timeout_seconds, probe.failure_threshold]
                    .into_iter()
                    .flatten()
                {
                    assert!(value >= 1, "{at}: timings are at least 1");
                }
                if let Some(http) = &probe.http_get {
                    assert!(http.host.is_none(), "{at}: the pod IP (127.0.0.1) is the host");
                }
            }
        }
        let spec = pod.spec.as_ref().unwrap();
        let conditions = pod.status.as_ref().and_then(|s| s.conditions.clone()).unwrap_or_default();
        for gate in spec.readiness_gates.iter().flatten() {
            let declared = conditions.iter().find(|c| c.type_ == gate.condition_type);
            assert_eq!(
                declared.map(|c| c.status.as_str()),
                Some("True"),
                "{pod_name}: gate {} declared True in the manifest",
                gate.condition_type
            );
        }
    }
}

fn is_dns_label(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= 63
        && name.chars().all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-')
        && !name.starts_with('-')
        && !name.ends_with('-')
}

#[derive(Debug, Parser)]
struct DemoCommand {
    #[command(flatten)]
    demo: DemoArgs,
}

/// `$(VAR)` expansion from the container's literal env, as the kubelet does for commands and
/// exec probes. Panics on a reference to an undefined variable.
fn expand(at: &str, container: &Container, arg: &str) -> String {
    let env: BTreeMap<&str, &str> = container
        .env
        .iter()
        .flatten()
        .filter_map(|var| var.value.as_deref().map(|value| (var.name.as_str(), value)))
        .collect();
    let mut out = arg.to_string();
    for (name, value) in &env {
        out = out.replace(&format!("$({name})"), value);
    }
    assert!(!out.contains("$("), "{at}: undefined variable in {arg:?}");
    out
}

/// The parsed `probelet demo-target …` command line of a container, if it runs one.
fn demo_args(at: &str, container: &Container) -> Option<DemoArgs> {
    let command: Vec<String> = container
        .command
        .iter()
        .flatten()
        .chain(container.args.iter().flatten())
        .map(|arg| expand(at, container, arg))
        .collect();
    if command.first().map(String::as_str) != Some("probelet") {
        return None;
    }
    assert_eq!(command.get(1).map(String::as_str), Some("demo-target"), "{at}: probelet runs demo-target");
    let parsed = DemoCommand::try_parse_from(&command[1..]).unwrap_or_else(|e| panic!("{at}: {e}"));
    Some(parsed.demo)
}

/// The number a probe port names: itself, or the container port of that name.
fn resolve_port(at: &str, container: &Container, port: &IntOrString) -> u16 {
    let number = match port {
        IntOrString::Int(number) => *number,
        IntOrString::String(name) => {
            let found = container.ports.iter().flatten().find(|p| p.name.as_deref() == Some(name.as_str()));
            found.unwrap_or_else(|| panic!("{at}: no container port named {name}")).container_port
        }
    };
    u16::try_from(number).unwrap()
}

#[test]
fn example_targets_listen_on_distinct_loopback_ports_their_probes_use() {
    let mut ports_in_use = BTreeMap::new();
    let mut health_files = BTreeSet::new();
    let mut targets = 0;
    for (pod_name, pod) in example_pods() {
        for (container, _) in all_containers(&pod) {
            let at = format!("{pod_name}/{}", container.name);
            for (kind, probe) in probes(container) {
                if let Some(exec) = &probe.exec {
                    for arg in exec.command.iter().flatten() {
                        expand(&format!("{at} {kind}"), container, arg);
                    }
                }
            }
            let Some(demo) = demo_args(&at, container) else { continue };
            targets += 1;
            for addr in [demo.http, demo.tcp, demo.grpc].into_iter().flatten() {
                assert_eq!(addr.ip().to_string(), "127.0.0.1", "{at}: loopback only");
                assert!((18080..=18099).contains(&addr.port()), "{at}: port {} in 18080-18099", addr.port());
                if let Some(other) = ports_in_use.insert(addr.port(), at.clone()) {
                    panic!("{at}: port {} already used by {other}", addr.port());
                }
            }
            for port in container.ports.iter().flatten() {
                let port = u16::try_from(port.container_port).unwrap();
                assert!(
                    [demo.http, demo.tcp, demo.grpc].into_iter().flatten().any(|addr| addr.port() == port),
                    "{at}: container port {port} is served"
                );
            }
            if let Some(path) = &demo.health_file {
                assert!(path.starts_with("/tmp/"), "{at}: health file under /tmp");
                assert!(health_files.insert(path.clone()), "{at}: health file {} shared", path.display());
            }

            for (kind, probe) in probes(container) {
                let at = format!("{at} {kind}");
                let served = |what: &str, addr: Option<std::net::SocketAddr>, port: u16| {
                    let addr = addr.unwrap_or_else(|| panic!("{at}: {what} probe but no --{what}"));
                    assert_eq!(addr.port(), port, "{at}: the {what} probe's port is the one served");
                };
                if let Some(http) = &probe.http_get {
                    served("http", demo.http, resolve_port(&at, container, &http.port));
                }
                if let Some(tcp) = &probe.tcp_socket {
                    served("tcp", demo.tcp, resolve_port(&at, container, &tcp.port));
                }
                if let Some(grpc) = &probe.grpc {
                    served("grpc", demo.grpc, u16::try_from(grpc.port).unwrap());
                    let service = grpc.service.clone().unwrap_or_default();
                    assert!(
                        service.is_empty() || demo.grpc_service.contains(&service),
                        "{at}: service {service} reported"
                    );
                }
                if let Some(exec) = &probe.exec {
                    let command: Vec<String> =
                        exec.command.iter().flatten().map(|arg| expand(&at, container, arg)).collect();
                    if command.first().map(String::as_str) == Some("test") {
                        let file = demo
                            .health_file
                            .as_ref()
                            .unwrap_or_else(|| panic!("{at}: test -f but no --health-file"));
                        assert_eq!(
                            command,
                            ["test", "-f", &file.to_string_lossy()],
                            "{at}: tests the health file"
                        );
                    }
                }
            }
        }
    }
    assert_eq!(targets, 9, "demo targets across the examples");
}

/// When a container's probes first pass at the latest, from its start: the slow start, one
/// startup period to notice it, then one readiness period (the first readiness probe may wait
/// a whole period).
fn ready_by(demo: &DemoArgs, container: &Container) -> Duration {
    let secs = |n: Option<i32>| Duration::from_secs(u64::try_from(n.unwrap_or(0)).unwrap());
    let start = demo.start_after.unwrap_or_default();
    let startup = container
        .startup_probe
        .as_ref()
        .map_or(Duration::ZERO, |p| secs(p.initial_delay_seconds) + secs(p.period_seconds.or(Some(10))));
    let readiness = container
        .readiness_probe
        .as_ref()
        .map_or(Duration::ZERO, |p| secs(p.initial_delay_seconds) + secs(p.period_seconds.or(Some(10))));
    start + startup + readiness
}

#[test]
fn examples_are_ready_within_15_seconds_except_the_flaky_one() {
    for (pod_name, pod) in example_pods() {
        let flaky = pod_name.ends_with("/flaky-liveness");
        // Sidecars start one after another before the regular containers, which start together.
        let mut sidecars_started = Duration::ZERO;
        let mut slowest = Duration::ZERO;
        for (container, sidecar) in all_containers(&pod) {
            let at = format!("{pod_name}/{}", container.name);
            let (ready, started) = match demo_args(&at, container) {
                Some(demo) => {
                    assert!(demo.flip_every.is_none() && demo.exit_after.is_none(), "{at}: stays ready");
                    assert_eq!(demo.fail_after.is_some(), flaky, "{at}: only the flaky pod fails");
                    let started = demo.start_after.unwrap_or_default()
                        + container.startup_probe.as_ref().map_or(Duration::ZERO, |p| {
                            Duration::from_secs(u64::try_from(p.period_seconds.unwrap_or(10)).unwrap())
                        });
                    (ready_by(&demo, container), started)
                }
                None => (ready_by(&DemoArgs::default(), container), Duration::ZERO),
            };
            slowest = slowest.max(sidecars_started + ready);
            if sidecar {
                sidecars_started += started;
            }
        }
        assert!(
            slowest <= Duration::from_secs(12),
            "{pod_name}: Ready by {slowest:?} at the latest (+ process start)"
        );
        if flaky {
            let container = &pod.spec.as_ref().unwrap().containers[0];
            let live = container.liveness_probe.as_ref().unwrap();
            assert_eq!((live.failure_threshold, live.period_seconds), (Some(2), Some(5)));
            assert!(live.termination_grace_period_seconds.is_some(), "the probe-level grace");
        }
    }
}

// === deploy/readiness-gates/ ===

#[test]
fn readiness_gate_deployment_is_its_own_least_privilege_variant() {
    let folder = "deploy/readiness-gates";
    let files: BTreeMap<String, Vec<String>> = yaml_files(folder)
        .iter()
        .map(|path| (file_name(path), documents(path).iter().map(|doc| kind(doc).to_string()).collect()))
        .collect();
    let want: BTreeMap<String, Vec<String>> = [
        ("daemonset.yaml", vec!["DaemonSet"]),
        ("example-pod.yaml", vec!["Pod"]),
        ("rbac.yaml", vec!["Namespace", "ServiceAccount", "ClusterRole", "ClusterRoleBinding"]),
        ("rbac-exec.yaml", vec!["ClusterRole", "ClusterRoleBinding"]),
    ]
    .into_iter()
    .map(|(file, kinds)| (file.to_string(), kinds.into_iter().map(String::from).collect()))
    .collect();
    assert_eq!(files, want);

    let role = |file: &str| -> ClusterRole {
        let docs = documents(&repo_path(&format!("{folder}/{file}")));
        typed(file, docs.iter().find(|d| kind(d) == "ClusterRole").unwrap())
    };
    let triple = |g: &str, r: &str, v: &str| (g.to_string(), r.to_string(), v.to_string());
    // What the roles grant is checked against the requests the agent sends in
    // tests/agent_readiness_gates.rs; here: no exec and no delete in the base role, nothing
    // but exec in the exec role.
    let base = grants(&role("rbac.yaml"));
    assert!(base.iter().all(|(_, r, v)| r != "pods/exec" && v != "delete" && v != "update"), "{base:?}");
    assert!(base.contains(&triple("", "pods/status", "patch")));
    let exec = grants(&role("rbac-exec.yaml"));
    assert_eq!(exec, [triple("", "pods/exec", "create"), triple("", "pods/exec", "get")].into());
    for file in ["rbac.yaml", "rbac-exec.yaml"] {
        let docs = documents(&repo_path(&format!("{folder}/{file}")));
        let binding: ClusterRoleBinding =
            typed(file, docs.iter().find(|d| kind(d) == "ClusterRoleBinding").unwrap());
        let subject = &binding.subjects.as_deref().unwrap()[0];
        assert_eq!(
            (subject.name.as_str(), subject.namespace.as_deref()),
            ("probelet-readiness-gates", Some("probelet-system")),
            "{file}"
        );
    }

    let docs = documents(&repo_path(&format!("{folder}/daemonset.yaml")));
    let ds: DaemonSet = typed("daemonset", &docs[0]);
    let pod = ds.spec.unwrap().template.spec.unwrap();
    assert_eq!(pod.service_account_name.as_deref(), Some("probelet-readiness-gates"));
    let args = pod.containers[0].args.as_deref().unwrap();
    assert_eq!(
        args,
        [
            "run",
            "--in-cluster",
            "--readiness-gates",
            "--node-name",
            "$(NODE_NAME)",
            "--probe-host-policy",
            "pod-ip",
            "--listen",
            "0.0.0.0:9898",
            "--healthz-listen",
            "0.0.0.0:9899"
        ]
    );
    let cli = probelet::cli::Cli::try_parse_from(
        std::iter::once("probelet").chain(args.iter().map(String::as_str)),
    );
    assert!(cli.is_ok(), "the agent accepts the DaemonSet's arguments: {:?}", cli.err());

    // The example pod opts in and its annotation is valid.
    let docs = documents(&repo_path(&format!("{folder}/example-pod.yaml")));
    let example: Pod = typed("example pod", &docs[0]);
    let spec = example.spec.clone().unwrap();
    assert_eq!(spec.readiness_gates.unwrap()[0].condition_type, probelet::cluster::gates::GATE_CONDITION);
    let annotation =
        &example.metadata.annotations.unwrap()[probelet::cluster::gates::READINESS_PROBES_ANNOTATION];
    let probes =
        probelet::cluster::gates::parse_gate_probes(annotation, &example.spec.unwrap(), false).unwrap();
    assert_eq!(probes.len(), 3);
}
