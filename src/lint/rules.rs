//! The lint rules: pure functions from a pod spec (as written, before the API server's
//! defaulting) to findings and the timings the kubelet's probe workers give it. No I/O; every
//! rule and formula is explained in `docs/lint.md`, the worker behaviour they come from in
//! `docs/prober.md` §1.2–§1.3 and §3.4.
//!
//! Defaulting and validation are the agent's own ([`apply_defaults`],
//! [`validate_container_probes`]), so a value the standalone agent rejects is an error here with
//! the same message, and a default it fills in is the default reported here.

use std::collections::BTreeMap;
use std::fmt::Write as _;

use k8s_openapi::api::core::v1::{Container, Pod, PodSpec, Probe};
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use probelet_actors::gofmt::go_quote;
use probelet_actors::prober::ProbeKind;
use serde::Serialize;

use crate::host::manifests::{
    DEFAULT_HTTP_GET_PATH, DEFAULT_HTTP_GET_SCHEME, DEFAULT_PROBE_FAILURE_THRESHOLD,
    DEFAULT_PROBE_PERIOD_SECONDS, DEFAULT_PROBE_SUCCESS_THRESHOLD, DEFAULT_PROBE_TIMEOUT_SECONDS,
    DEFAULT_TERMINATION_GRACE_PERIOD_SECONDS, apply_defaults, validate_container_probes,
};

/// The annotation that tells the linter how long a container takes to start, in seconds: `"45"`
/// for every container of the pod, or `"web=45,proxy=5"` per container (both forms may be
/// mixed; a named entry wins). Read from the pod template, else from the object's own metadata
/// (which does not roll a Deployment out when it changes).
pub const START_SECONDS_ANNOTATION: &str = "lint.probelet.dev/start-seconds";

/// The kubelet's floor for the grace period of a kill (`minimumGracePeriodInSeconds`).
pub const MINIMUM_KILL_GRACE_SECONDS: i64 = 2;

/// Below this period an exec probe is reported for its cost (the API server's default period).
pub const EXEC_PERIOD_FLOOR_SECONDS: i32 = 10;

/// Rule identifiers, as they appear in the output.
pub mod rule {
    /// A value the API server (or, for a port name, the kubelet when it probes) rejects.
    pub const INVALID: &str = "invalid";
    /// The lint annotation cannot be read.
    pub const BAD_ANNOTATION: &str = "bad-annotation";
    /// What a probe is after the API server's defaulting.
    pub const DEFAULTS: &str = "defaults";
    /// Worst-case time to Ready after the container starts and after a kubelet restart.
    pub const TIME_TO_READY: &str = "time-to-ready";
    /// Worst-case time from a broken liveness endpoint to the container being killed.
    pub const LIVENESS_RESTART: &str = "liveness-restart";
    /// Liveness checks what readiness checks and gives up no later.
    pub const LIVENESS_LIKE_READINESS: &str = "liveness-like-readiness";
    /// A probe can kill the container before it has started.
    pub const KILLED_BEFORE_START: &str = "killed-before-start";
    /// `timeoutSeconds` is not below `periodSeconds`.
    pub const TIMEOUT_NOT_BELOW_PERIOD: &str = "timeout-not-below-period";
    /// An exec probe with a period under 10 s.
    pub const EXEC_SHORT_PERIOD: &str = "exec-short-period";
}

/// How bad a finding is. `error`: the API server would reject the pod, or the probe can never
/// work; `warning`: it works, and will hurt; `info`: what the kubelet will do.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Severity {
    Info,
    Warning,
    Error,
}

impl Severity {
    pub fn as_str(self) -> &'static str {
        match self {
            Severity::Info => "info",
            Severity::Warning => "warning",
            Severity::Error => "error",
        }
    }
}

/// One thing the linter has to say about a pod spec.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Finding {
    pub severity: Severity,
    /// One of [`rule`].
    pub rule: &'static str,
    /// The container it is about, if any.
    pub container: Option<String>,
    /// The probe it is about (`livenessProbe`, `readinessProbe`, `startupProbe`), if any.
    pub probe: Option<&'static str>,
    /// The field path it is about, from the top of the object (`spec.template.spec…`).
    pub field: Option<String>,
    pub message: String,
}

/// A probe as the kubelet runs it: the API server's defaults applied.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct EffectiveProbe {
    /// `livenessProbe`, `readinessProbe` or `startupProbe`.
    pub probe: &'static str,
    /// What it checks, for a person (`httpGet http://<pod IP>:8080/healthz`).
    pub handler: String,
    pub initial_delay_seconds: i32,
    pub timeout_seconds: i32,
    pub period_seconds: i32,
    pub success_threshold: i32,
    pub failure_threshold: i32,
    /// Liveness and startup: the grace period of the kill a failure causes, before the 2 s floor
    /// (the probe's own, else the pod's).
    pub termination_grace_period_seconds: Option<i64>,
    /// The fields the API server fills in, with their values (`timeoutSeconds: 1`).
    pub defaulted: Vec<String>,
    #[serde(skip)]
    kind: ProbeKind,
    #[serde(skip)]
    endpoint: Endpoint,
}

/// Computed timings of one container, in whole seconds. Each is a worst case, an upper bound
/// that a probe schedule can come arbitrarily close to; `docs/lint.md` gives the formulas.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct Timings {
    /// From the container's start to its `ready: true`, when the app answers from the start.
    pub ready_after_start_seconds: Option<i64>,
    /// From a kubelet restart to the kubelet's own readiness verdict on a running container
    /// that was started (its `started` kept, the kubelet's default).
    pub ready_after_kubelet_restart_seconds: Option<i64>,
    /// The same when the kubelet drops `started` on a restart (feature
    /// `ChangeContainerStatusOnKubeletRestart`), so the startup probe runs again first; only
    /// with a startup probe.
    pub ready_after_kubelet_restart_rerunning_startup_seconds: Option<i64>,
    /// The earliest time after start at which a probe can have the container killed for not
    /// answering: the startup probe's, or the liveness probe's when there is no startup probe.
    pub start_tolerance_seconds: Option<i64>,
    /// From a liveness endpoint breaking to the failure that kills the container.
    pub liveness_detection_seconds: Option<i64>,
    /// The grace period of that kill (the 2 s floor applied).
    pub liveness_kill_grace_seconds: Option<i64>,
    /// Detection plus grace: from the endpoint breaking to the container being gone.
    pub liveness_restart_seconds: Option<i64>,
}

/// One container the kubelet probes (a regular container or a sidecar).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ContainerReport {
    pub name: String,
    /// A sidecar (an init container with `restartPolicy: Always`).
    pub sidecar: bool,
    /// Its probes, in the order startup, readiness, liveness.
    pub probes: Vec<EffectiveProbe>,
    /// `None` when the container's probes have errors.
    pub timings: Option<Timings>,
}

/// Everything the rules say about one pod spec.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct PodLint {
    pub findings: Vec<Finding>,
    pub containers: Vec<ContainerReport>,
}

/// The start-time annotation where it was found: its field path and its value.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StartAnnotation {
    /// `metadata.annotations[lint.probelet.dev/start-seconds]` or the template's.
    pub field: String,
    pub value: String,
}

/// Lints a pod spec found at `spec_path` (`spec` for a Pod, `spec.template.spec` for a
/// Deployment, …). `spec` is the spec as written: defaults are applied here, so that the
/// findings can say which values came from them.
pub fn lint_pod_spec(spec: &PodSpec, spec_path: &str, start: Option<&StartAnnotation>) -> PodLint {
    let mut lint = PodLint::default();
    let defaulted = defaulted_spec(spec);
    let starts = match start.map(|a| parse_start_seconds(&a.value, spec).map_err(|e| (a, e))) {
        None => KnownStarts::default(),
        Some(Ok(starts)) => starts,
        Some(Err((annotation, reason))) => {
            lint.findings.push(Finding {
                severity: Severity::Error,
                rule: rule::BAD_ANNOTATION,
                container: None,
                probe: None,
                field: Some(annotation.field.clone()),
                message: format!(
                    "{}: Invalid value: {}: {reason}",
                    annotation.field,
                    go_quote(&annotation.value)
                ),
            });
            KnownStarts::default()
        }
    };
    let pod_grace =
        defaulted.termination_grace_period_seconds.unwrap_or(DEFAULT_TERMINATION_GRACE_PERIOD_SECONDS);
    let restart_policy = defaulted.restart_policy.clone().unwrap_or_default();
    let containers =
        spec.containers.iter().zip(&defaulted.containers).enumerate().map(|(i, c)| (false, i, c));
    let init = spec.init_containers.iter().flatten().zip(defaulted.init_containers.iter().flatten());
    for (is_init, i, (raw, container)) in containers.chain(init.enumerate().map(|(i, c)| (true, i, c))) {
        let path = format!("{spec_path}.{}[{i}]", if is_init { "initContainers" } else { "containers" });
        let errors = validate_container_probes(raw, is_init, &path);
        for error in &errors {
            lint.findings.push(invalid(container, &path, error));
        }
        let sidecar = is_init && container.restart_policy.as_deref() == Some("Always");
        if is_init && !sidecar {
            continue;
        }
        let probes: Vec<EffectiveProbe> = ProbeKind::ADD_ORDER
            .into_iter()
            .filter_map(|kind| {
                effective_probe(kind, raw, container, pod_grace, spec.termination_grace_period_seconds)
            })
            .collect();
        if probes.is_empty() {
            continue;
        }
        let timings = errors.is_empty().then(|| {
            let context = ContainerContext {
                container,
                path: &path,
                probes: &probes,
                known_start: starts.of(&container.name),
                start_annotation: start.map(|a| a.field.as_str()),
                // A sidecar is started again whatever the pod's policy.
                restart_policy: if sidecar { "Always" } else { &restart_policy },
            };
            context.rules(&mut lint.findings)
        });
        lint.containers.push(ContainerReport { name: container.name.clone(), sidecar, probes, timings });
    }
    lint
}

fn defaulted_spec(spec: &PodSpec) -> PodSpec {
    let mut pod = Pod { spec: Some(spec.clone()), ..Default::default() };
    apply_defaults(&mut pod);
    pod.spec.unwrap_or_default()
}

/// A validation error as a finding, attributed to the probe its field path names.
fn invalid(container: &Container, path: &str, error: &str) -> Finding {
    let field = error.split(": ").next().unwrap_or_default();
    let probe = ProbeKind::ADD_ORDER.into_iter().map(probe_field).find(|probe| {
        field.strip_prefix(path).and_then(|rest| rest.strip_prefix('.')).is_some_and(|rest| {
            rest.strip_prefix(probe).is_some_and(|after| after.is_empty() || after.starts_with('.'))
        })
    });
    Finding {
        severity: Severity::Error,
        rule: rule::INVALID,
        container: Some(container.name.clone()),
        probe,
        field: Some(field.to_owned()),
        message: error.to_owned(),
    }
}

/// The probe's field name in a container.
pub fn probe_field(kind: ProbeKind) -> &'static str {
    match kind {
        ProbeKind::Liveness => "livenessProbe",
        ProbeKind::Readiness => "readinessProbe",
        ProbeKind::Startup => "startupProbe",
    }
}

// === effective probes ===

/// What a probe checks, with named ports resolved, for telling two probes' endpoints apart.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Endpoint {
    Exec(Vec<String>),
    Http { scheme: String, host: Option<String>, port: Port, path: String, headers: Vec<(String, String)> },
    Tcp { host: Option<String>, port: Port },
    Grpc { port: i32, service: Option<String> },
    None,
}

#[derive(Debug, Clone, PartialEq, Eq)]
enum Port {
    Number(i32),
    /// A name that no port of the container has.
    Name(String),
}

fn resolve_port(port: &IntOrString, container: &Container) -> (Port, Option<String>) {
    match port {
        IntOrString::Int(number) => (Port::Number(*number), None),
        IntOrString::String(name) => {
            let found = container.ports.iter().flatten().find(|p| p.name.as_deref() == Some(name.as_str()));
            match found {
                Some(p) => (Port::Number(p.container_port), Some(name.clone())),
                None => (Port::Name(name.clone()), Some(name.clone())),
            }
        }
    }
}

impl std::fmt::Display for Port {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Port::Number(n) => write!(f, "{n}"),
            Port::Name(name) => f.write_str(&go_quote(name)),
        }
    }
}

/// `raw` is the container as written, `container` after defaulting.
fn effective_probe(
    kind: ProbeKind,
    raw: &Container,
    container: &Container,
    pod_grace: i64,
    raw_pod_grace: Option<i64>,
) -> Option<EffectiveProbe> {
    let probe = kind.probe_of(container)?;
    let raw_probe = kind.probe_of(raw)?;
    let mut defaulted = Vec::new();
    if raw_probe.initial_delay_seconds.is_none() {
        defaulted.push("initialDelaySeconds: 0".into());
    }
    let mut field = |name: &str, raw: Option<i32>, default: i32| match raw {
        None | Some(0) => {
            defaulted.push(format!("{name}: {default}"));
            default
        }
        Some(value) => value,
    };
    let timeout = field("timeoutSeconds", raw_probe.timeout_seconds, DEFAULT_PROBE_TIMEOUT_SECONDS);
    let period = field("periodSeconds", raw_probe.period_seconds, DEFAULT_PROBE_PERIOD_SECONDS);
    let success = field("successThreshold", raw_probe.success_threshold, DEFAULT_PROBE_SUCCESS_THRESHOLD);
    let failure = field("failureThreshold", raw_probe.failure_threshold, DEFAULT_PROBE_FAILURE_THRESHOLD);
    if let Some(http) = raw_probe.http_get.as_ref() {
        if http.path.as_deref().is_none_or(str::is_empty) {
            defaulted.push(format!("httpGet.path: {DEFAULT_HTTP_GET_PATH}"));
        }
        if http.scheme.as_deref().is_none_or(str::is_empty) {
            defaulted.push(format!("httpGet.scheme: {DEFAULT_HTTP_GET_SCHEME}"));
        }
    }
    let grace = match kind {
        ProbeKind::Readiness => None,
        _ => Some(match probe.termination_grace_period_seconds {
            Some(grace) => grace,
            None => {
                let whose = if raw_pod_grace.is_some() { "the pod's" } else { "the pod's default" };
                defaulted.push(format!("terminationGracePeriodSeconds: {pod_grace} ({whose})"));
                pod_grace
            }
        }),
    };
    let (endpoint, handler) = endpoint(probe, container);
    Some(EffectiveProbe {
        probe: probe_field(kind),
        handler,
        initial_delay_seconds: probe.initial_delay_seconds.unwrap_or(0),
        timeout_seconds: timeout,
        period_seconds: period,
        success_threshold: success,
        failure_threshold: failure,
        termination_grace_period_seconds: grace,
        defaulted,
        kind,
        endpoint,
    })
}

fn endpoint(probe: &Probe, container: &Container) -> (Endpoint, String) {
    let host = |h: Option<&String>| h.filter(|h| !h.is_empty()).cloned();
    let shown_host = |h: &Option<String>| h.clone().unwrap_or_else(|| "<pod IP>".into());
    let named = |name: Option<String>| name.map(|n| format!(" (port {})", go_quote(&n))).unwrap_or_default();
    if let Some(exec) = probe.exec.as_ref() {
        let command = exec.command.clone().unwrap_or_default();
        let shown = serde_json::to_string(&command).unwrap_or_default();
        return (Endpoint::Exec(command), format!("exec {shown}"));
    }
    if let Some(http) = probe.http_get.as_ref() {
        let scheme = http.scheme.clone().unwrap_or_else(|| DEFAULT_HTTP_GET_SCHEME.into());
        let path = http.path.clone().unwrap_or_else(|| DEFAULT_HTTP_GET_PATH.into());
        let host = host(http.host.as_ref());
        let (port, name) = resolve_port(&http.port, container);
        let mut headers: Vec<(String, String)> = http
            .http_headers
            .iter()
            .flatten()
            .map(|h| (h.name.to_ascii_lowercase(), h.value.clone()))
            .collect();
        headers.sort();
        let shown = format!(
            "httpGet {}://{}:{port}{path}{}",
            scheme.to_ascii_lowercase(),
            shown_host(&host),
            named(name)
        );
        return (Endpoint::Http { scheme, host, port, path, headers }, shown);
    }
    if let Some(tcp) = probe.tcp_socket.as_ref() {
        let host = host(tcp.host.as_ref());
        let (port, name) = resolve_port(&tcp.port, container);
        let shown = format!("tcpSocket {}:{port}{}", shown_host(&host), named(name));
        return (Endpoint::Tcp { host, port }, shown);
    }
    if let Some(grpc) = probe.grpc.as_ref() {
        let service = grpc.service.clone().filter(|s| !s.is_empty());
        let shown = match &service {
            Some(s) => format!("grpc <pod IP>:{} service {}", grpc.port, go_quote(s)),
            None => format!("grpc <pod IP>:{}", grpc.port),
        };
        return (Endpoint::Grpc { port: grpc.port, service }, shown);
    }
    (Endpoint::None, "no handler".into())
}

// === timings ===

/// The longest gap between the starts of two probes of a failing or slow endpoint: the period,
/// or the timeout when a probe outlasts the period (the ticker keeps one missed tick).
fn interval(p: &EffectiveProbe) -> i64 {
    i64::from(p.period_seconds.max(p.timeout_seconds))
}

/// From a moment the probe becomes able to count (its initial delay has passed and, for
/// liveness and readiness, the container has started) to `runs` results in a row, worst case:
/// the first probe starts less than a period later, the others at most an interval apart, and
/// the last one takes up to its timeout.
fn runs_after(p: &EffectiveProbe, runs: i32) -> i64 {
    let period = i64::from(p.period_seconds);
    let runs = i64::from(runs.max(1));
    period.saturating_add((runs - 1).saturating_mul(interval(p))).saturating_add(i64::from(p.timeout_seconds))
}

fn delay(p: &EffectiveProbe) -> i64 {
    i64::from(p.initial_delay_seconds.max(0))
}

/// The earliest moment after start the probe's `failureThreshold`-th failure can begin: probes
/// from the initial delay on, a period apart, each failing at once.
fn earliest_kill(p: &EffectiveProbe) -> i64 {
    delay(p)
        .saturating_add(i64::from(p.failure_threshold.max(1) - 1).saturating_mul(i64::from(p.period_seconds)))
}

/// A container's timings from its effective probes.
pub fn timings(probes: &[EffectiveProbe]) -> Timings {
    let of = |kind| probes.iter().find(|p| p.kind == kind);
    let (startup, readiness, liveness) =
        (of(ProbeKind::Startup), of(ProbeKind::Readiness), of(ProbeKind::Liveness));
    let started = startup.map_or(0, |s| delay(s).saturating_add(runs_after(s, s.success_threshold)));
    let started_again = startup.map_or(0, |s| runs_after(s, s.success_threshold));
    let ready = |started: i64, delay_counts: bool| match readiness {
        Some(r) => {
            let from = if delay_counts { started.max(delay(r)) } else { started };
            Some(from.saturating_add(runs_after(r, r.success_threshold)))
        }
        None => startup.map(|_| started),
    };
    let detection = liveness.map(|l| runs_after(l, l.failure_threshold));
    let grace =
        liveness.map(|l| l.termination_grace_period_seconds.unwrap_or(0).max(MINIMUM_KILL_GRACE_SECONDS));
    Timings {
        ready_after_start_seconds: ready(started, true),
        ready_after_kubelet_restart_seconds: ready(0, false),
        ready_after_kubelet_restart_rerunning_startup_seconds: startup.and(ready(started_again, false)),
        start_tolerance_seconds: startup.or(liveness).map(earliest_kill),
        liveness_detection_seconds: detection,
        liveness_kill_grace_seconds: grace,
        liveness_restart_seconds: detection.zip(grace).map(|(d, g)| d.saturating_add(g)),
    }
}

// === start-time annotation ===

#[derive(Debug, Clone, Default, PartialEq, Eq)]
struct KnownStarts {
    all: Option<i64>,
    by_container: BTreeMap<String, i64>,
}

impl KnownStarts {
    fn of(&self, container: &str) -> Option<i64> {
        self.by_container.get(container).copied().or(self.all)
    }
}

const START_SECONDS_FORMAT: &str =
    "must be a whole number of seconds, or container=seconds entries separated by commas";

fn parse_start_seconds(value: &str, spec: &PodSpec) -> Result<KnownStarts, String> {
    let mut starts = KnownStarts::default();
    let seconds =
        |s: &str| s.trim().parse::<u32>().map(i64::from).map_err(|_| START_SECONDS_FORMAT.to_owned());
    for entry in value.split(',') {
        match entry.split_once('=') {
            None => starts.all = Some(seconds(entry)?),
            Some((name, value)) => {
                let name = name.trim();
                let known = spec
                    .containers
                    .iter()
                    .chain(spec.init_containers.iter().flatten())
                    .any(|c| c.name == name);
                if !known {
                    return Err(format!("{} names no container of the pod", go_quote(name)));
                }
                starts.by_container.insert(name.to_owned(), seconds(value)?);
            }
        }
    }
    Ok(starts)
}

// === per-container rules ===

struct ContainerContext<'a> {
    container: &'a Container,
    path: &'a str,
    probes: &'a [EffectiveProbe],
    known_start: Option<i64>,
    start_annotation: Option<&'a str>,
    restart_policy: &'a str,
}

impl ContainerContext<'_> {
    fn probe(&self, kind: ProbeKind) -> Option<&EffectiveProbe> {
        self.probes.iter().find(|p| p.kind == kind)
    }

    fn finding(
        &self,
        severity: Severity,
        rule: &'static str,
        probe: Option<&EffectiveProbe>,
        field: Option<&str>,
        message: String,
    ) -> Finding {
        let field = match (probe, field) {
            (Some(p), Some(f)) => Some(format!("{}.{}.{f}", self.path, p.probe)),
            (Some(p), None) => Some(format!("{}.{}", self.path, p.probe)),
            (None, _) => Some(self.path.to_owned()),
        };
        Finding {
            severity,
            rule,
            container: Some(self.container.name.clone()),
            probe: probe.map(|p| p.probe),
            field,
            message,
        }
    }

    /// Runs every rule on a container whose probes are valid; returns its timings.
    fn rules(&self, findings: &mut Vec<Finding>) -> Timings {
        let timings = timings(self.probes);
        for probe in self.probes {
            findings.push(self.finding(Severity::Info, rule::DEFAULTS, Some(probe), None, describe(probe)));
            if probe.timeout_seconds >= probe.period_seconds {
                findings.push(self.finding(
                    Severity::Warning,
                    rule::TIMEOUT_NOT_BELOW_PERIOD,
                    Some(probe),
                    Some("timeoutSeconds"),
                    timeout_not_below_period(probe),
                ));
            }
            if matches!(probe.endpoint, Endpoint::Exec(_)) && probe.period_seconds < EXEC_PERIOD_FLOOR_SECONDS
            {
                findings.push(self.finding(
                    Severity::Warning,
                    rule::EXEC_SHORT_PERIOD,
                    Some(probe),
                    Some("periodSeconds"),
                    exec_short_period(probe),
                ));
            }
        }
        self.liveness_like_readiness(findings);
        self.killed_before_start(findings, &timings);
        self.timing_findings(findings, &timings);
        timings
    }

    fn liveness_like_readiness(&self, findings: &mut Vec<Finding>) {
        let (Some(l), Some(r)) = (self.probe(ProbeKind::Liveness), self.probe(ProbeKind::Readiness)) else {
            return;
        };
        if l.endpoint != r.endpoint || l.endpoint == Endpoint::None {
            return;
        }
        let window =
            |p: &EffectiveProbe| i64::from(p.failure_threshold).saturating_mul(i64::from(p.period_seconds));
        if window(l) > window(r) || l.timeout_seconds > r.timeout_seconds {
            return;
        }
        findings.push(self.finding(
            Severity::Warning,
            rule::LIVENESS_LIKE_READINESS,
            Some(l),
            None,
            format!(
                "livenessProbe checks the same endpoint as readinessProbe ({}) and gives up no later \
                 ({} failures {} s apart with a {} s timeout, against {} failures {} s apart with a {} s \
                 timeout): an app that is slow or overloaded fails both at once, and is restarted when it \
                 should only be taken out of its Services' endpoints. Give the liveness probe an endpoint \
                 that only checks the process itself, or more failures and a longer timeout than readiness",
                l.handler,
                l.failure_threshold,
                l.period_seconds,
                l.timeout_seconds,
                r.failure_threshold,
                r.period_seconds,
                r.timeout_seconds
            ),
        ));
    }

    fn killed_before_start(&self, findings: &mut Vec<Finding>, timings: &Timings) {
        let Some(tolerance) = timings.start_tolerance_seconds else { return };
        let annotation = self.start_annotation.unwrap_or(START_SECONDS_ANNOTATION);
        if let Some(s) = self.probe(ProbeKind::Startup) {
            let Some(start) = self.known_start.filter(|start| *start > tolerance) else { return };
            let needed = needed_failures(start, s);
            findings.push(self.finding(
                Severity::Warning,
                rule::KILLED_BEFORE_START,
                Some(s),
                Some("failureThreshold"),
                format!(
                    "the container takes {start} s to start ({annotation}), but its startupProbe can have it \
                     killed {tolerance} s after start (initialDelaySeconds {} + (failureThreshold {} - 1) × \
                     periodSeconds {}): it would be restarted before it ever answers. A failureThreshold of \
                     {needed} allows {start} s",
                    s.initial_delay_seconds, s.failure_threshold, s.period_seconds
                ),
            ));
            return;
        }
        let Some(l) = self.probe(ProbeKind::Liveness) else { return };
        let formula = format!(
            "initialDelaySeconds {} + (failureThreshold {} - 1) × periodSeconds {}",
            l.initial_delay_seconds, l.failure_threshold, l.period_seconds
        );
        let message = match self.known_start {
            Some(start) if start > tolerance => format!(
                "the container takes {start} s to start ({annotation}), but with no startupProbe its \
                 livenessProbe can have it killed {tolerance} s after start ({formula}): it would be \
                 restarted before it ever answers, over and over (CrashLoopBackOff). Add a startupProbe \
                 with the liveness probe's handler that allows {start} s (periodSeconds {} with \
                 failureThreshold {})",
                l.period_seconds,
                needed_failures(start, &EffectiveProbe { initial_delay_seconds: 0, ..l.clone() })
            ),
            None if l.initial_delay_seconds <= 0 => format!(
                "no startupProbe and initialDelaySeconds 0: the livenessProbe can have the container killed \
                 {tolerance} s after it starts ({formula}). A start that takes longer (a cold cache, \
                 migrations, a busy node) is killed every time and ends in CrashLoopBackOff. Add a \
                 startupProbe, which holds liveness off until the app has answered once, or say how long \
                 the container takes to start in the {START_SECONDS_ANNOTATION} annotation to check against it"
            ),
            _ => return,
        };
        findings.push(self.finding(Severity::Warning, rule::KILLED_BEFORE_START, Some(l), None, message));
    }

    fn timing_findings(&self, findings: &mut Vec<Finding>, timings: &Timings) {
        if let (Some(ready), Some(again)) =
            (timings.ready_after_start_seconds, timings.ready_after_kubelet_restart_seconds)
        {
            let mut message = format!("Ready at most {ready} s after the container starts");
            let startup = self.probe(ProbeKind::Startup);
            let readiness = self.probe(ProbeKind::Readiness);
            match (startup, readiness) {
                (Some(s), Some(r)) => {
                    let started = delay(s) + runs_after(s, s.success_threshold);
                    let _ = write!(
                        message,
                        " (the startupProbe succeeds by {started} s; readiness then needs {} probed every {} s)",
                        count(r.success_threshold, "success", "successes"),
                        r.period_seconds
                    );
                }
                (None, Some(r)) => {
                    let _ = write!(
                        message,
                        " (initialDelaySeconds {}, then {} probed every {} s, each taking up to {} s)",
                        r.initial_delay_seconds,
                        count(r.success_threshold, "success", "successes"),
                        r.period_seconds,
                        r.timeout_seconds
                    );
                }
                (Some(_), None) => {
                    message.push_str(" (no readinessProbe: Ready once the startupProbe succeeds)")
                }
                (None, None) => {}
            }
            let _ = write!(
                message,
                ", when the app answers from the start. After a kubelet restart, the kubelet has its own \
                 verdict on a running container within {again} s (probes start at a random point of their \
                 first period)"
            );
            if let Some(rerun) = timings.ready_after_kubelet_restart_rerunning_startup_seconds {
                let _ = write!(
                    message,
                    "; {rerun} s with ChangeContainerStatusOnKubeletRestart, which runs the startupProbe again first"
                );
            }
            findings.push(self.finding(Severity::Info, rule::TIME_TO_READY, None, None, message));
        }
        let (Some(l), Some(detection), Some(grace), Some(total)) = (
            self.probe(ProbeKind::Liveness),
            timings.liveness_detection_seconds,
            timings.liveness_kill_grace_seconds,
            timings.liveness_restart_seconds,
        ) else {
            return;
        };
        let whose = match l.termination_grace_period_seconds {
            Some(g) if g < MINIMUM_KILL_GRACE_SECONDS => "the kubelet's 2 s floor",
            _ if l.defaulted.iter().any(|d| d.starts_with("terminationGracePeriodSeconds")) => {
                "the pod's terminationGracePeriodSeconds; livenessProbe.terminationGracePeriodSeconds would override it for this kill"
            }
            _ => "livenessProbe.terminationGracePeriodSeconds",
        };
        let outcome = if self.restart_policy == "Never" {
            "kills the container (restartPolicy Never: it is not started again)"
        } else {
            "restarts the container"
        };
        findings.push(self.finding(
            Severity::Info,
            rule::LIVENESS_RESTART,
            Some(l),
            None,
            format!(
                "a failing livenessProbe {outcome} at most {total} s after its endpoint breaks: up to \
                 {detection} s to see {} in a row (probed every {} s, each failure taking up to {} s), \
                 then up to {grace} s for the container to stop ({whose})",
                count(l.failure_threshold, "failure", "failures"),
                l.period_seconds.max(l.timeout_seconds),
                l.timeout_seconds
            ),
        ));
    }
}

/// The `failureThreshold` with which `p` lets the container take `start` seconds to start.
fn needed_failures(start: i64, p: &EffectiveProbe) -> i64 {
    let period = i64::from(p.period_seconds.max(1));
    let after_delay = (start - delay(p)).max(0);
    (after_delay + period - 1) / period + 1
}

fn describe(p: &EffectiveProbe) -> String {
    let mut text = format!(
        "{}: initialDelaySeconds {}, periodSeconds {}, timeoutSeconds {}, successThreshold {}, failureThreshold {}",
        p.handler,
        p.initial_delay_seconds,
        p.period_seconds,
        p.timeout_seconds,
        p.success_threshold,
        p.failure_threshold
    );
    if let Some(grace) = p.termination_grace_period_seconds {
        let _ = write!(text, ", terminationGracePeriodSeconds {grace}");
    }
    if !p.defaulted.is_empty() {
        let _ = write!(text, "; filled in by the API server: {}", p.defaulted.join(", "));
    }
    text
}

fn timeout_not_below_period(p: &EffectiveProbe) -> String {
    let schedule = if p.timeout_seconds == p.period_seconds {
        "so a hung endpoint is probed back to back, with no pause between probes".to_owned()
    } else {
        format!(
            "so a hung endpoint is probed back to back, every {} s instead of every {} s",
            p.timeout_seconds, p.period_seconds
        )
    };
    format!(
        "timeoutSeconds {} is not below periodSeconds {}: a probe of a hung endpoint runs until its timeout, \
         and the next one starts as soon as it gives up (the kubelet's ticker keeps one missed tick), \
         {schedule}, and each failure takes {} s to be seen. Keep the timeout below the period",
        p.timeout_seconds, p.period_seconds, p.timeout_seconds
    )
}

/// `1 success`, `3 successes`.
fn count(n: i32, one: &str, many: &str) -> String {
    format!("{n} {}", if n == 1 { one } else { many })
}

fn exec_short_period(p: &EffectiveProbe) -> String {
    let per_minute = 60 / i64::from(p.period_seconds.max(1));
    format!(
        "an exec probe every {} s: each run is an exec into the container through the container runtime, \
         which starts new processes for it (the command itself inside the container's namespaces and \
         cgroup, and the runtime's own helpers); that is {per_minute} a minute for this probe alone, on every \
         replica. Short-period exec probes on many pods are a known source of node CPU load (kubernetes \
         #82440). Prefer httpGet, tcpSocket or grpc, or a period of {EXEC_PERIOD_FLOOR_SECONDS} s or more",
        p.period_seconds
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A pod spec from YAML.
    fn spec(yaml: &str) -> PodSpec {
        serde_saphyr::from_str(yaml).unwrap()
    }

    fn lint_yaml(yaml: &str) -> PodLint {
        lint_pod_spec(&spec(yaml), "spec", None)
    }

    fn lint_with_start(yaml: &str, start: &str) -> PodLint {
        let annotation = StartAnnotation {
            field: format!("metadata.annotations[{START_SECONDS_ANNOTATION}]"),
            value: start.into(),
        };
        lint_pod_spec(&spec(yaml), "spec", Some(&annotation))
    }

    fn with_rule<'a>(lint: &'a PodLint, rule: &str) -> Vec<&'a Finding> {
        lint.findings.iter().filter(|f| f.rule == rule).collect()
    }

    fn timings_of(lint: &PodLint, container: &str) -> Timings {
        lint.containers.iter().find(|c| c.name == container).and_then(|c| c.timings).unwrap()
    }

    /// One container `web` with port `http` 8080 and the given probes (YAML at the probe level).
    fn web(probes: &str) -> String {
        let probes: String = probes.lines().map(|l| format!("    {l}\n")).collect();
        format!(
            "containers:\n  - name: web\n    image: web:1\n    ports:\n      - name: http\n        containerPort: 8080\n{probes}"
        )
    }

    const HTTP_LIVENESS: &str = "livenessProbe:\n  httpGet: {path: /healthz, port: http}\n";
    const HTTP_READINESS: &str = "readinessProbe:\n  httpGet: {path: /healthz, port: http}\n";

    #[test]
    fn invalid_values_are_errors_with_the_api_servers_wording() {
        let cases = [
            (
                "negative period",
                "livenessProbe:\n  tcpSocket: {port: 8080}\n  periodSeconds: -1\n",
                "spec.containers[0].livenessProbe.periodSeconds: Invalid value: -1: must be greater than or equal to 0",
                Some("livenessProbe"),
            ),
            (
                "success threshold on liveness",
                "livenessProbe:\n  tcpSocket: {port: 8080}\n  successThreshold: 2\n",
                "spec.containers[0].livenessProbe.successThreshold: Invalid value: 2: must be 1",
                Some("livenessProbe"),
            ),
            (
                "success threshold on startup",
                "startupProbe:\n  tcpSocket: {port: 8080}\n  successThreshold: 3\n",
                "spec.containers[0].startupProbe.successThreshold: Invalid value: 3: must be 1",
                Some("startupProbe"),
            ),
            (
                "port name that names no port",
                "readinessProbe:\n  httpGet: {path: /, port: metrics}\n",
                "spec.containers[0].readinessProbe.httpGet.port: Invalid value: \"metrics\": must be the name of one of the container's ports",
                Some("readinessProbe"),
            ),
            (
                "grace period on readiness",
                "readinessProbe:\n  tcpSocket: {port: 8080}\n  terminationGracePeriodSeconds: 5\n",
                "spec.containers[0].readinessProbe.terminationGracePeriodSeconds: Invalid value: 5: must not be set for readinessProbes",
                Some("readinessProbe"),
            ),
            (
                "no handler",
                "livenessProbe:\n  periodSeconds: 5\n",
                "spec.containers[0].livenessProbe: Required value: must specify a handler type",
                Some("livenessProbe"),
            ),
        ];
        for (name, probes, message, probe) in cases {
            let lint = lint_yaml(&web(probes));
            let errors = with_rule(&lint, rule::INVALID);
            assert_eq!(errors.len(), 1, "case {name}: {:?}", lint.findings);
            assert_eq!(errors[0].severity, Severity::Error, "case {name}");
            assert_eq!(errors[0].message, message, "case {name}");
            assert_eq!(errors[0].probe, probe, "case {name}");
            assert_eq!(errors[0].container.as_deref(), Some("web"), "case {name}");
            assert_eq!(errors[0].field.as_deref(), message.split(": ").next(), "case {name}");
            assert_eq!(lint.containers[0].timings, None, "case {name}: no timings from invalid values");
        }
    }

    #[test]
    fn valid_probes_and_defaulted_zeroes_are_no_errors() {
        // A zero period is "unset" to the API server, which fills in 10; no command is needed.
        let lint = lint_yaml(&web("livenessProbe:\n  tcpSocket: {port: http}\n  periodSeconds: 0\n"));
        assert!(with_rule(&lint, rule::INVALID).is_empty(), "{:?}", lint.findings);
        assert_eq!(lint.containers[0].probes[0].period_seconds, 10);
        assert!(lint.containers[0].probes[0].defaulted.contains(&"periodSeconds: 10".to_owned()));
    }

    #[test]
    fn probes_of_plain_init_containers_are_errors_and_sidecars_are_linted() {
        let lint = lint_yaml(
            "initContainers:\n  - name: migrate\n    image: m\n    readinessProbe:\n      tcpSocket: {port: 1}\n  \
             - name: proxy\n    image: p\n    restartPolicy: Always\n    readinessProbe:\n      tcpSocket: {port: 1}\n\
             containers:\n  - name: app\n    image: a\n",
        );
        let errors = with_rule(&lint, rule::INVALID);
        assert_eq!(errors.len(), 1, "{:?}", lint.findings);
        assert_eq!(
            errors[0].message,
            "spec.initContainers[0].readinessProbe: Forbidden: may not be set for init containers without restartPolicy=Always"
        );
        let names: Vec<(&str, bool)> = lint.containers.iter().map(|c| (c.name.as_str(), c.sidecar)).collect();
        assert_eq!(names, vec![("proxy", true)]);
    }

    #[test]
    fn field_paths_start_at_the_objects_top() {
        let lint = lint_pod_spec(
            &spec(&web("livenessProbe:\n  tcpSocket: {port: 8080}\n  timeoutSeconds: -2\n")),
            "spec.template.spec",
            None,
        );
        let errors = with_rule(&lint, rule::INVALID);
        assert_eq!(
            errors[0].message,
            "spec.template.spec.containers[0].livenessProbe.timeoutSeconds: Invalid value: -2: must be greater than or equal to 0"
        );
        let lint = lint_pod_spec(&spec(&web(HTTP_READINESS)), "spec.jobTemplate.spec.template.spec", None);
        let defaults = with_rule(&lint, rule::DEFAULTS);
        assert_eq!(
            defaults[0].field.as_deref(),
            Some("spec.jobTemplate.spec.template.spec.containers[0].readinessProbe")
        );
    }

    #[test]
    fn defaults_say_what_the_api_server_fills_in() {
        let lint = lint_yaml(&web(HTTP_LIVENESS));
        let probe = &lint.containers[0].probes[0];
        assert_eq!(
            probe.defaulted,
            vec![
                "initialDelaySeconds: 0",
                "timeoutSeconds: 1",
                "periodSeconds: 10",
                "successThreshold: 1",
                "failureThreshold: 3",
                "httpGet.scheme: HTTP",
                "terminationGracePeriodSeconds: 30 (the pod's default)",
            ]
        );
        assert_eq!(probe.handler, "httpGet http://<pod IP>:8080/healthz (port \"http\")");
        let info = with_rule(&lint, rule::DEFAULTS);
        assert_eq!(info.len(), 1);
        assert_eq!(info[0].severity, Severity::Info);
        assert!(
            info[0].message.contains("filled in by the API server: initialDelaySeconds: 0"),
            "{}",
            info[0].message
        );

        // A container without probes: nothing to say.
        let quiet = lint_yaml("containers:\n  - name: plain\n    image: p\n");
        assert!(quiet.findings.is_empty() && quiet.containers.is_empty(), "{quiet:?}");

        // Everything written: nothing filled in.
        let lint = lint_pod_spec(
            &spec(&format!(
                "terminationGracePeriodSeconds: 20\n{}",
                web(
                    "livenessProbe:\n  httpGet: {path: /, port: 8080, scheme: HTTPS}\n  initialDelaySeconds: 1\n  \
                     timeoutSeconds: 2\n  periodSeconds: 5\n  successThreshold: 1\n  failureThreshold: 4\n  \
                     terminationGracePeriodSeconds: 7\n"
                )
            )),
            "spec",
            None,
        );
        let probe = &lint.containers[0].probes[0];
        assert!(probe.defaulted.is_empty(), "{:?}", probe.defaulted);
        assert_eq!(probe.termination_grace_period_seconds, Some(7));
        assert!(!with_rule(&lint, rule::DEFAULTS)[0].message.contains("filled in"));
        // The pod's own grace period, written, is not a default.
        let lint = lint_yaml(&format!("terminationGracePeriodSeconds: 20\n{}", web(HTTP_LIVENESS)));
        assert!(
            lint.containers[0].probes[0]
                .defaulted
                .contains(&"terminationGracePeriodSeconds: 20 (the pod's)".into())
        );
    }

    fn probe(
        kind: ProbeKind,
        delay: i32,
        period: i32,
        timeout: i32,
        success: i32,
        failure: i32,
    ) -> EffectiveProbe {
        EffectiveProbe {
            probe: probe_field(kind),
            handler: String::new(),
            initial_delay_seconds: delay,
            timeout_seconds: timeout,
            period_seconds: period,
            success_threshold: success,
            failure_threshold: failure,
            termination_grace_period_seconds: (kind != ProbeKind::Readiness).then_some(30),
            defaulted: Vec::new(),
            kind,
            endpoint: Endpoint::None,
        }
    }

    #[test]
    fn timings_follow_the_worker_loop() {
        use ProbeKind::{Liveness, Readiness, Startup};
        // (case, probes, ready after start, after a kubelet restart, start tolerance, liveness detection)
        type Case = (&'static str, Vec<EffectiveProbe>, Option<i64>, Option<i64>, Option<i64>, Option<i64>);
        let cases: Vec<Case> = vec![
            ("readiness defaults", vec![probe(Readiness, 0, 10, 1, 1, 3)], Some(11), Some(11), None, None),
            // 5 s delay, a tick just missed (< 10 s), two more successes 10 s apart, the last taking 1 s.
            ("delay and successes", vec![probe(Readiness, 5, 10, 1, 3, 3)], Some(36), Some(31), None, None),
            (
                "startup then readiness",
                vec![probe(Startup, 0, 1, 1, 1, 15), probe(Readiness, 0, 2, 1, 1, 3)],
                Some(5),
                Some(3),
                Some(14),
                None,
            ),
            (
                "readiness delay longer than the startup",
                vec![probe(Startup, 0, 10, 1, 1, 3), probe(Readiness, 30, 5, 1, 1, 3)],
                Some(36),
                Some(6),
                Some(20),
                None,
            ),
            (
                "slow probes space the runs",
                vec![probe(Readiness, 0, 2, 5, 2, 3)],
                Some(12),
                Some(12),
                None,
                None,
            ),
            ("startup alone", vec![probe(Startup, 5, 2, 1, 1, 10)], Some(8), Some(0), Some(23), None),
            ("liveness defaults", vec![probe(Liveness, 0, 10, 1, 1, 3)], None, None, Some(20), Some(31)),
            (
                "liveness timeout above period",
                vec![probe(Liveness, 0, 10, 15, 1, 3)],
                None,
                None,
                Some(20),
                Some(55),
            ),
        ];
        for (name, probes, ready, again, tolerance, detection) in cases {
            let t = timings(&probes);
            assert_eq!(t.ready_after_start_seconds, ready, "case {name}");
            assert_eq!(t.ready_after_kubelet_restart_seconds, again, "case {name}");
            assert_eq!(t.start_tolerance_seconds, tolerance, "case {name}");
            assert_eq!(t.liveness_detection_seconds, detection, "case {name}");
            assert_eq!(t.liveness_restart_seconds, detection.map(|d| d + 30), "case {name}");
        }
        // When the startup probe runs again after a restart: its own time first.
        let t = timings(&[probe(Startup, 0, 10, 1, 1, 3), probe(Readiness, 30, 5, 1, 1, 3)]);
        assert_eq!(t.ready_after_kubelet_restart_rerunning_startup_seconds, Some(11 + 6));
        let t = timings(&[probe(Startup, 5, 2, 1, 1, 10)]);
        assert_eq!(t.ready_after_kubelet_restart_rerunning_startup_seconds, Some(3));
        let t = timings(&[probe(Readiness, 0, 10, 1, 1, 3)]);
        assert_eq!(t.ready_after_kubelet_restart_rerunning_startup_seconds, None);
    }

    #[test]
    fn time_to_ready_is_told_for_containers_with_readiness_or_startup() {
        let lint =
            lint_yaml(&web("readinessProbe:\n  httpGet: {path: /, port: http}\n  initialDelaySeconds: 5\n"));
        let found = with_rule(&lint, rule::TIME_TO_READY);
        assert_eq!(found.len(), 1);
        assert_eq!(found[0].severity, Severity::Info);
        assert!(
            found[0].message.starts_with("Ready at most 16 s after the container starts"),
            "{}",
            found[0].message
        );
        assert!(found[0].message.contains("within 11 s"), "{}", found[0].message);
        // Liveness only: Ready when it runs, nothing to tell.
        let lint = lint_yaml(&web(HTTP_LIVENESS));
        assert!(with_rule(&lint, rule::TIME_TO_READY).is_empty());
        assert_eq!(timings_of(&lint, "web").ready_after_start_seconds, None);
    }

    #[test]
    fn liveness_restart_adds_the_grace_period_of_the_kill() {
        let cases = [
            (
                "pod default grace",
                "",
                HTTP_LIVENESS.to_owned(),
                61,
                "the pod's terminationGracePeriodSeconds",
            ),
            (
                "probe-level grace",
                "",
                format!("{HTTP_LIVENESS}  terminationGracePeriodSeconds: 5\n"),
                36,
                "(livenessProbe.terminationGracePeriodSeconds)",
            ),
            (
                "the 2 s floor",
                "terminationGracePeriodSeconds: 0\n",
                HTTP_LIVENESS.to_owned(),
                33,
                "the kubelet's 2 s floor",
            ),
            (
                "never restarted",
                "restartPolicy: Never\n",
                HTTP_LIVENESS.to_owned(),
                61,
                "restartPolicy Never",
            ),
        ];
        for (name, pod, probes, total, says) in cases {
            let lint = lint_yaml(&format!("{pod}{}", web(&probes)));
            let found = with_rule(&lint, rule::LIVENESS_RESTART);
            assert_eq!(found.len(), 1, "case {name}");
            assert!(
                found[0].message.contains(&format!("at most {total} s")),
                "case {name}: {}",
                found[0].message
            );
            assert!(found[0].message.contains(says), "case {name}: {}", found[0].message);
            assert_eq!(timings_of(&lint, "web").liveness_restart_seconds, Some(total), "case {name}");
        }
        let lint = lint_yaml(&web(HTTP_READINESS));
        assert!(with_rule(&lint, rule::LIVENESS_RESTART).is_empty(), "no liveness probe");
        // A sidecar is restarted even in a pod that restarts nothing.
        let lint = lint_yaml(
            "restartPolicy: Never\ninitContainers:\n  - name: proxy\n    image: p\n    restartPolicy: Always\n    \
             livenessProbe:\n      tcpSocket: {port: 1}\ncontainers:\n  - name: app\n    image: a\n",
        );
        let found = with_rule(&lint, rule::LIVENESS_RESTART);
        assert!(
            found[0].message.starts_with("a failing livenessProbe restarts the container"),
            "{}",
            found[0].message
        );
    }

    #[test]
    fn liveness_like_readiness() {
        let same_port_by_number = "readinessProbe:\n  httpGet: {path: /healthz, port: 8080}\n";
        let cases = [
            ("same endpoint, same thresholds", format!("{HTTP_LIVENESS}{HTTP_READINESS}"), true),
            ("a named port is the same port", format!("{HTTP_LIVENESS}{same_port_by_number}"), true),
            (
                "liveness gives up sooner",
                format!("{HTTP_LIVENESS}  failureThreshold: 1\n{HTTP_READINESS}"),
                true,
            ),
            (
                "other path",
                format!("{HTTP_LIVENESS}readinessProbe:\n  httpGet: {{path: /ready, port: http}}\n"),
                false,
            ),
            (
                "liveness more tolerant",
                format!("{HTTP_LIVENESS}  failureThreshold: 6\n{HTTP_READINESS}"),
                false,
            ),
            ("liveness waits longer", format!("{HTTP_LIVENESS}  timeoutSeconds: 5\n{HTTP_READINESS}"), false),
            (
                "tcp on the same port",
                "livenessProbe:\n  tcpSocket: {port: http}\nreadinessProbe:\n  tcpSocket: {port: 8080}\n"
                    .to_owned(),
                true,
            ),
        ];
        for (name, probes, fires) in cases {
            let lint = lint_yaml(&web(&probes));
            let found = with_rule(&lint, rule::LIVENESS_LIKE_READINESS);
            assert_eq!(found.len(), usize::from(fires), "case {name}: {:?}", lint.findings);
            if fires {
                assert_eq!(found[0].severity, Severity::Warning, "case {name}");
                assert_eq!(found[0].probe, Some("livenessProbe"), "case {name}");
            }
        }
    }

    #[test]
    fn killed_before_start() {
        let startup = "startupProbe:\n  httpGet: {path: /healthz, port: http}\n  failureThreshold: 30\n";
        let delayed = format!("{HTTP_LIVENESS}  initialDelaySeconds: 30\n");
        // (case, probes, annotation, fires on, says)
        type Case = (&'static str, String, Option<&'static str>, Option<&'static str>, &'static str);
        let cases: Vec<Case> = vec![
            (
                "no startup probe, no delay",
                HTTP_LIVENESS.into(),
                None,
                Some("livenessProbe"),
                "killed 20 s after",
            ),
            ("a delay and nothing known", delayed.clone(), None, None, ""),
            ("a startup probe", format!("{startup}{HTTP_LIVENESS}"), None, None, ""),
            ("known start within the delay", delayed.clone(), Some("45"), None, ""),
            ("known start beyond it", delayed, Some("web=60"), Some("livenessProbe"), "takes 60 s to start"),
            ("known start within liveness tolerance", HTTP_LIVENESS.into(), Some("15"), None, ""),
            (
                "known start beyond the startup budget",
                format!("{startup}{HTTP_LIVENESS}"),
                Some("400"),
                Some("startupProbe"),
                "A failureThreshold of 41 allows 400 s",
            ),
            (
                "known start within the startup budget",
                format!("{startup}{HTTP_LIVENESS}"),
                Some("250"),
                None,
                "",
            ),
        ];
        for (name, probes, start, fires, says) in cases {
            let lint = match start {
                Some(start) => lint_with_start(&web(&probes), start),
                None => lint_yaml(&web(&probes)),
            };
            let found = with_rule(&lint, rule::KILLED_BEFORE_START);
            assert_eq!(found.first().and_then(|f| f.probe), fires, "case {name}: {:?}", lint.findings);
            if let Some(f) = found.first() {
                assert_eq!(f.severity, Severity::Warning, "case {name}");
                assert!(f.message.contains(says), "case {name}: {}", f.message);
            }
        }
    }

    #[test]
    fn start_annotation() {
        let cases = [
            ("all containers", "30", true, Some(30)),
            ("by name", "web=45", true, Some(45)),
            ("mixed", "10, web = 45", true, Some(45)),
            ("not a number", "soon", false, None),
            ("negative", "-5", false, None),
            ("unknown container", "db=5", false, None),
        ];
        let spec = spec(&web(HTTP_LIVENESS));
        for (name, value, ok, web) in cases {
            let parsed = parse_start_seconds(value, &spec);
            assert_eq!(parsed.is_ok(), ok, "case {name}: {parsed:?}");
            assert_eq!(parsed.ok().and_then(|s| s.of("web")), web, "case {name}");
        }
        let lint = lint_with_start(&web(HTTP_LIVENESS), "db=5");
        let found = with_rule(&lint, rule::BAD_ANNOTATION);
        assert_eq!(found.len(), 1);
        assert_eq!(found[0].severity, Severity::Error);
        assert_eq!(
            found[0].message,
            "metadata.annotations[lint.probelet.dev/start-seconds]: Invalid value: \"db=5\": \"db\" names no container of the pod"
        );
        assert!(with_rule(&lint_with_start(&web(HTTP_LIVENESS), "web=5"), rule::BAD_ANNOTATION).is_empty());
    }

    #[test]
    fn timeout_not_below_period() {
        let cases = [
            ("equal", "  timeoutSeconds: 5\n  periodSeconds: 5\n", true),
            ("above", "  timeoutSeconds: 10\n  periodSeconds: 5\n", true),
            ("below", "  timeoutSeconds: 4\n  periodSeconds: 5\n", false),
            ("defaults", "", false),
        ];
        for (name, fields, fires) in cases {
            let lint = lint_yaml(&web(&format!("{HTTP_READINESS}{fields}")));
            let found = with_rule(&lint, rule::TIMEOUT_NOT_BELOW_PERIOD);
            assert_eq!(found.len(), usize::from(fires), "case {name}");
            if fires {
                assert_eq!(found[0].severity, Severity::Warning);
                assert_eq!(
                    found[0].field.as_deref(),
                    Some("spec.containers[0].readinessProbe.timeoutSeconds")
                );
            }
        }
    }

    #[test]
    fn exec_short_period() {
        let cases = [
            ("exec every 5 s", "readinessProbe:\n  exec: {command: [cat, /ok]}\n  periodSeconds: 5\n", true),
            (
                "exec every 10 s",
                "readinessProbe:\n  exec: {command: [cat, /ok]}\n  periodSeconds: 10\n",
                false,
            ),
            ("exec by default", "livenessProbe:\n  exec: {command: [cat, /ok]}\n", false),
            (
                "http every 2 s",
                "readinessProbe:\n  httpGet: {path: /, port: http}\n  periodSeconds: 2\n",
                false,
            ),
        ];
        for (name, probes, fires) in cases {
            let lint = lint_yaml(&web(probes));
            let found = with_rule(&lint, rule::EXEC_SHORT_PERIOD);
            assert_eq!(found.len(), usize::from(fires), "case {name}");
            if fires {
                assert_eq!(found[0].severity, Severity::Warning);
                assert!(found[0].message.contains("12 a minute"), "{}", found[0].message);
                assert!(found[0].message.contains("#82440"));
            }
        }
    }
}
