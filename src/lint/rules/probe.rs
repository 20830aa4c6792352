//! Probes as the kubelet runs them: the API server's defaults applied, named ports resolved, what
//! each probe checks ([`EffectiveProbe`]), and the `defaults` finding that says which values the
//! API server filled in.

use k8s_openapi::api::core::v1::{Container, Probe};
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use probelet_actors::gofmt::go_quote;
use probelet_actors::prober::ProbeKind;
use std::fmt::Write as _;

use super::{EffectiveProbe, probe_field};
use crate::host::manifests::{
    DEFAULT_HTTP_GET_PATH, DEFAULT_HTTP_GET_SCHEME, DEFAULT_PROBE_FAILURE_THRESHOLD,
    DEFAULT_PROBE_PERIOD_SECONDS, DEFAULT_PROBE_SUCCESS_THRESHOLD, DEFAULT_PROBE_TIMEOUT_SECONDS,
};

/// What a probe checks, with named ports resolved, for telling two probes' endpoints apart.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum Endpoint {
    Exec(Vec<String>),
    Http { scheme: String, host: Option<String>, port: Port, path: String, headers: Vec<(String, String)> },
    Tcp { host: Option<String>, port: Port },
    Grpc { port: i32, service: Option<String> },
    None,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum Port {
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
pub(super) fn effective_probe(
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

pub(super) fn describe(p: &EffectiveProbe) -> String {
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

#[cfg(test)]
mod tests {
    use crate::lint::rules::tests::*;
    use crate::lint::rules::{Severity, lint_pod_spec, rule};

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
}
