//! The annotation a pod lists its gate probes in, read and validated like a manifest field:
//! every error names the annotation and the JSON path of the value it is about
//! (`annotation probelet.dev/readiness-probes: [0].probe.periodSeconds: must be greater than or
//! equal to 1`). What the value holds and which rules apply: docs/readiness-gates.md.

use std::collections::HashSet;
use std::fmt;

use k8s_openapi::api::core::v1::{PodSpec, Probe};
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use probelet_actors::prober::ProbeKind;
use probelet_actors::prober::timing::ProbeTiming;
use serde::Deserialize;

use crate::host::manifests::{HTTP_HEADER_NAME, PORT_RANGE, is_http_header_name, port_name};
use probelet_actors::gofmt::go_quote;

/// The annotation that lists a pod's gate probes.
pub const READINESS_PROBES_ANNOTATION: &str = "probelet.dev/readiness-probes";

/// One probe of the annotation: an object, not a bare probe, so that keys beside `probe` (its
/// timing) have a place.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct GateProbe {
    /// Names the probe in condition messages and events; unique in the pod, a DNS label.
    pub name: String,
    /// The container an exec probe runs in (default: the pod's first container). Network
    /// probes target the pod IP and need no container.
    #[serde(default)]
    pub container: Option<String>,
    /// A core/v1 Probe: `httpGet`, `tcpSocket`, `grpc` or `exec`, with the usual seconds fields.
    pub probe: Probe,
    /// Millisecond timing and a start interval, as the `probelet.dev/probe-timing` annotation
    /// gives them for a pod's own readiness probes (docs/probe-timing.md).
    #[serde(default)]
    pub timing: Option<ProbeTiming>,
}

/// Why the annotation cannot be used.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AnnotationError {
    /// The JSON path of the value the error is about (`[0].probe.periodSeconds`); empty for the
    /// annotation as a whole.
    pub path: String,
    /// What is wrong with it.
    pub message: String,
}

impl fmt::Display for AnnotationError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.path.is_empty() || self.path == "." {
            write!(f, "annotation {READINESS_PROBES_ANNOTATION}: {}", self.message)
        } else {
            write!(f, "annotation {READINESS_PROBES_ANNOTATION}: {}: {}", self.path, self.message)
        }
    }
}

impl std::error::Error for AnnotationError {}

fn error(path: impl Into<String>, message: impl Into<String>) -> AnnotationError {
    AnnotationError { path: bounded(&path.into()), message: bounded(&message.into()) }
}

/// The most bytes of an error's path or message: both quote what the pod's author wrote (a
/// name, an unknown key), and they go into the pod's condition, an event and the log.
const MAX_ERROR_TEXT: usize = 512;

/// `text` with its control characters escaped (an ESC or a newline in a condition message would
/// reach `kubectl describe` as it is) and cut to [`MAX_ERROR_TEXT`] bytes, marked with `…`.
fn bounded(text: &str) -> String {
    let mut out = String::with_capacity(text.len().min(MAX_ERROR_TEXT + 4));
    for c in text.chars() {
        let piece: std::borrow::Cow<'_, str> = if c.is_control() || is_invisible_control(c) {
            c.escape_default().to_string().into()
        } else {
            c.encode_utf8(&mut [0; 4]).to_owned().into()
        };
        if out.len() + piece.len() > MAX_ERROR_TEXT {
            out.push('…');
            break;
        }
        out.push_str(&piece);
    }
    out
}

/// Characters that change how a terminal shows the text around them without being control
/// characters: bidirectional overrides and isolates (a name that reads backwards) and the
/// Unicode line and paragraph separators.
fn is_invisible_control(c: char) -> bool {
    matches!(c, '\u{200e}' | '\u{200f}' | '\u{202a}'..='\u{202e}' | '\u{2066}'..='\u{2069}' | '\u{2028}' | '\u{2029}')
}

/// Reads the annotation's value against the pod's spec. `exec_allowed`: the agent may run exec
/// probes (`--readiness-gate-exec`, which needs `pods/exec`).
pub fn parse_gate_probes(
    value: &str,
    spec: &PodSpec,
    exec_allowed: bool,
) -> Result<Vec<GateProbe>, AnnotationError> {
    // Each entry, probe and timing an object: serde's derive would also take a struct written
    // as an array of its fields in order, which the documentation never promised.
    if let Ok(serde_json::Value::Array(entries)) = serde_json::from_str::<serde_json::Value>(value) {
        for (i, entry) in entries.iter().enumerate() {
            if !entry.is_object() {
                return Err(error(format!("[{i}]"), "must be an object with \"name\" and \"probe\""));
            }
            for field in ["probe", "timing"] {
                if entry.get(field).is_some_and(|v| !v.is_object() && !v.is_null()) {
                    return Err(error(format!("[{i}].{field}"), "must be an object"));
                }
            }
        }
    }
    let probes: Vec<GateProbe> =
        serde_path_to_error::deserialize(&mut serde_json::Deserializer::from_str(value)).map_err(|e| {
            let path = e.path().to_string();
            error(path, e.into_inner().to_string())
        })?;
    let ports: Vec<&str> = spec
        .containers
        .iter()
        .flat_map(|c| c.ports.iter().flatten())
        .filter_map(|p| p.name.as_deref())
        .collect();
    if probes.is_empty() {
        return Err(error("", "must list at least one probe"));
    }
    let mut names = HashSet::new();
    for (i, entry) in probes.iter().enumerate() {
        let at = |field: &str| format!("[{i}].{field}");
        if let Some(why) = dns_label_error(&entry.name) {
            return Err(error(at("name"), why));
        }
        if !names.insert(entry.name.as_str()) {
            return Err(error(at("name"), format!("Duplicate value: {}", go_quote(&entry.name))));
        }
        if let Some(container) = &entry.container
            && !spec.containers.iter().any(|c| &c.name == container)
        {
            return Err(error(at("container"), format!("no container {} in the pod", go_quote(container))));
        }
        validate_probe(&entry.probe, exec_allowed, &ports, &|field| at(&format!("probe.{field}")))?;
        if let Some(timing) = &entry.timing {
            timing.validate(ProbeKind::Readiness, &at("timing")).map_err(|e| error(e.path, e.reason))?;
        }
    }
    Ok(probes)
}

/// The API server's rules for a readiness probe, in the same words where it has them.
fn validate_probe(
    probe: &Probe,
    exec_allowed: bool,
    ports: &[&str],
    at: &dyn Fn(&str) -> String,
) -> Result<(), AnnotationError> {
    let handlers =
        [probe.exec.is_some(), probe.http_get.is_some(), probe.tcp_socket.is_some(), probe.grpc.is_some()];
    match handlers.iter().filter(|h| **h).count() {
        0 => return Err(error(at("").trim_end_matches('.'), "must specify a handler type")),
        1 => {}
        _ => return Err(error(at("").trim_end_matches('.'), "may not specify more than 1 handler type")),
    }
    if let Some(exec) = &probe.exec {
        if !exec_allowed {
            return Err(error(
                at("exec"),
                "exec probes are not offered in readiness-gate mode unless the agent runs with \
                 --readiness-gate-exec (which needs pods/exec)",
            ));
        }
        if exec.command.as_ref().is_none_or(Vec::is_empty) {
            return Err(error(at("exec.command"), "Required value"));
        }
    }
    if let Some(http) = &probe.http_get {
        port_error(&http.port, ports).map_or(Ok(()), |why| Err(error(at("httpGet.port"), why)))?;
        match http.scheme.as_deref() {
            None | Some("" | "HTTP" | "HTTPS") => {}
            Some(other) => {
                return Err(error(
                    at("httpGet.scheme"),
                    format!("Unsupported value: {}: supported values: \"HTTP\", \"HTTPS\"", go_quote(other)),
                ));
            }
        }
        for header in http.http_headers.iter().flatten() {
            if !is_http_header_name(&header.name) {
                return Err(error(
                    at("httpGet.httpHeaders"),
                    format!("Invalid value: {}: {HTTP_HEADER_NAME}", go_quote(&header.name)),
                ));
            }
            if header.value.contains(['\r', '\n']) {
                return Err(error(
                    at("httpGet.httpHeaders"),
                    format!(
                        "Invalid value: {}: a header value may not hold a line break",
                        go_quote(&header.value)
                    ),
                ));
            }
        }
    }
    if let Some(tcp) = &probe.tcp_socket {
        port_error(&tcp.port, ports).map_or(Ok(()), |why| Err(error(at("tcpSocket.port"), why)))?;
    }
    if let Some(grpc) = &probe.grpc
        && !(1..=65535).contains(&grpc.port)
    {
        return Err(error(at("grpc.port"), format!("Invalid value: {}: {PORT_RANGE}", grpc.port)));
    }
    if probe.initial_delay_seconds.is_some_and(|v| v < 0) {
        return Err(error(at("initialDelaySeconds"), "must be greater than or equal to 0"));
    }
    for (field, value) in [
        ("timeoutSeconds", probe.timeout_seconds),
        ("periodSeconds", probe.period_seconds),
        ("successThreshold", probe.success_threshold),
        ("failureThreshold", probe.failure_threshold),
    ] {
        if value.is_some_and(|v| v < 1) {
            return Err(error(at(field), "must be greater than or equal to 1"));
        }
    }
    if probe.termination_grace_period_seconds.is_some() {
        return Err(error(at("terminationGracePeriodSeconds"), "must not be set for readinessProbes"));
    }
    Ok(())
}

/// Upstream `ValidatePortNumOrName`, and a name must be one of the pod's container ports (a
/// probe on another would only ever error).
fn port_error(port: &IntOrString, ports: &[&str]) -> Option<String> {
    match port {
        IntOrString::Int(p) if !(1..=65535).contains(p) => Some(format!("Invalid value: {p}: {PORT_RANGE}")),
        IntOrString::Int(_) => None,
        IntOrString::String(name) => match port_name(name).first() {
            Some(why) => Some(format!("Invalid value: {}: {why}", go_quote(name))),
            None if !ports.contains(&name.as_str()) => Some(format!(
                "Invalid value: {}: must be the name of one of the pod's container ports",
                go_quote(name)
            )),
            None => None,
        },
    }
}

/// Why `name` is not a DNS-1123 label, the rule for container names.
fn dns_label_error(name: &str) -> Option<String> {
    let valid = !name.is_empty()
        && name.len() <= 63
        && name.bytes().all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
        && !name.starts_with('-')
        && !name.ends_with('-');
    (!valid).then(|| {
        format!(
            "Invalid value: {}: a lowercase RFC 1123 label must consist of lower case alphanumeric \
             characters or '-', and must start and end with an alphanumeric character",
            go_quote(name)
        )
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::Container;

    fn spec() -> PodSpec {
        let db = k8s_openapi::api::core::v1::ContainerPort {
            name: Some("db".into()),
            container_port: 5432,
            ..Default::default()
        };
        PodSpec {
            containers: vec![Container { name: "app".into(), ports: Some(vec![db]), ..Default::default() }],
            ..Default::default()
        }
    }

    /// The API server's rules where a probe in a pod spec has them, and what it cannot check
    /// for an annotation: a named port must be one of the pod's, an entry an object.
    #[test]
    fn what_the_api_server_would_refuse_is_refused() {
        let one = |probe: &str| format!(r#"[{{"name": "x", "probe": {probe}}}]"#);
        let cases = [
            (
                one(r#"{"httpGet": {"port": 80, "scheme": "gopher"}}"#),
                "[0].probe.httpGet.scheme",
                "Unsupported value: \"gopher\": supported values: \"HTTP\", \"HTTPS\"",
            ),
            (
                one(r#"{"httpGet": {"port": 80, "httpHeaders": [{"name": "X Bad", "value": "v"}]}}"#),
                "[0].probe.httpGet.httpHeaders",
                "Invalid value: \"X Bad\": a valid HTTP header",
            ),
            (
                one(r#"{"httpGet": {"port": 80, "httpHeaders": [{"name": "X-Ok", "value": "a\r\nb: c"}]}}"#),
                "[0].probe.httpGet.httpHeaders",
                "Invalid value: \"a\\r\\nb: c\": a header value may not hold a line break",
            ),
            (
                one(r#"{"tcpSocket": {"port": "HTTP!*/ "}}"#),
                "[0].probe.tcpSocket.port",
                "Invalid value: \"HTTP!*/ \": must contain only alpha-numeric",
            ),
            (
                one(r#"{"httpGet": {"port": "nope"}}"#),
                "[0].probe.httpGet.port",
                "Invalid value: \"nope\": must be the name of one of the pod's container ports",
            ),
            (
                r#"[["pos", null, {"tcpSocket": {"port": 80}}]]"#.to_owned(),
                "[0]",
                "must be an object with \"name\" and \"probe\"",
            ),
            (
                r#"[{"name": "x", "probe": {"tcpSocket": {"port": 80}}, "timing": [250]}]"#.to_owned(),
                "[0].timing",
                "must be an object",
            ),
        ];
        for (value, path, message) in cases {
            let err = parse_gate_probes(&value, &spec(), false).unwrap_err();
            assert_eq!(err.path, path, "{value}");
            assert!(err.message.starts_with(message), "{value}: {}", err.message);
        }
    }

    #[test]
    fn a_valid_annotation() {
        let value = r#"[
            {"name": "backend", "probe": {"httpGet": {"path": "/ready", "port": 8080}, "periodSeconds": 2}},
            {"name": "db", "probe": {"tcpSocket": {"port": "db"}}},
            {"name": "grpc", "probe": {"grpc": {"port": 9090, "service": "x"}, "failureThreshold": 1}},
            {"name": "script", "container": "app", "probe": {"exec": {"command": ["true"]}}}
        ]"#;
        let probes = parse_gate_probes(value, &spec(), true).unwrap();
        let names: Vec<_> = probes.iter().map(|p| p.name.as_str()).collect();
        assert_eq!(names, ["backend", "db", "grpc", "script"]);
        assert_eq!(probes[0].probe.period_seconds, Some(2));
        assert_eq!(probes[3].container.as_deref(), Some("app"));
    }

    /// What the pod's author wrote is quoted in errors, which go into the pod's condition, an
    /// event and the log: cut short, and with control characters escaped.
    #[test]
    fn errors_quote_the_author_s_text_short_and_escaped() {
        let long =
            format!(r#"[{{"name": "{}", "probe": {{"tcpSocket": {{"port": 80}}}}}}]"#, "a".repeat(200_000));
        let err = parse_gate_probes(&long, &spec(), false).unwrap_err();
        assert!(err.to_string().len() < 1200, "{} bytes", err.to_string().len());
        assert!(err.message.ends_with('…'), "{}", err.message);

        let odd = r#"[{"name": "x", "probe": {"tcpSocket": {"port": 80}}, "\u001b[31mRED\nINFO fake": 1}]"#;
        let err = parse_gate_probes(odd, &spec(), false).unwrap_err().to_string();
        assert!(!err.contains('\u{1b}') && !err.contains('\n'), "{err:?}");
        assert!(err.contains("\\u{1b}[31mRED\\nINFO fake"), "{err:?}");

        let backwards = r#"[{"name": "x", "probe": {"tcpSocket": {"port": 80}}, "a\u202eb\u2028c": 1}]"#;
        let err = parse_gate_probes(backwards, &spec(), false).unwrap_err().to_string();
        assert!(!err.contains('\u{202e}') && !err.contains('\u{2028}'), "{err:?}");
        assert!(err.contains("a\\u{202e}b\\u{2028}c"), "{err:?}");
    }

    #[test]
    fn errors_name_the_annotation_and_the_path() {
        let cases = [
            (
                "not JSON",
                "[",
                "annotation probelet.dev/readiness-probes: EOF while parsing a list at line 1 column 1",
            ),
            (
                "not a list",
                r#"{"name": "x"}"#,
                "annotation probelet.dev/readiness-probes: invalid type: map, expected a sequence at line 1 column 0",
            ),
            ("empty", "[]", "annotation probelet.dev/readiness-probes: must list at least one probe"),
            (
                "a wrong type",
                r#"[{"name": "a", "probe": {"httpGet": {"port": 80}, "periodSeconds": "ten"}}]"#,
                "annotation probelet.dev/readiness-probes: [0].probe.periodSeconds: invalid type: string \"ten\", expected i32 at line 1 column 72",
            ),
            (
                "an unknown key",
                r#"[{"name": "a", "probe": {"httpGet": {"port": 80}}, "timeout": 3}]"#,
                "annotation probelet.dev/readiness-probes: [0].timeout: unknown field `timeout`, expected one of `name`, `container`, `probe`, `timing` at line 1 column 60",
            ),
            (
                "no name",
                r#"[{"probe": {"httpGet": {"port": 80}}}]"#,
                "annotation probelet.dev/readiness-probes: [0]: missing field `name` at line 1 column 37",
            ),
            (
                "a bad name",
                r#"[{"name": "Back_end", "probe": {"httpGet": {"port": 80}}}]"#,
                "annotation probelet.dev/readiness-probes: [0].name: Invalid value: \"Back_end\": a lowercase RFC 1123 label must consist of lower case alphanumeric characters or '-', and must start and end with an alphanumeric character",
            ),
            (
                "a duplicate name",
                r#"[{"name": "a", "probe": {"httpGet": {"port": 80}}}, {"name": "a", "probe": {"tcpSocket": {"port": 80}}}]"#,
                "annotation probelet.dev/readiness-probes: [1].name: Duplicate value: \"a\"",
            ),
            (
                "no handler",
                r#"[{"name": "a", "probe": {"periodSeconds": 1}}]"#,
                "annotation probelet.dev/readiness-probes: [0].probe: must specify a handler type",
            ),
            (
                "two handlers",
                r#"[{"name": "a", "probe": {"httpGet": {"port": 80}, "tcpSocket": {"port": 80}}}]"#,
                "annotation probelet.dev/readiness-probes: [0].probe: may not specify more than 1 handler type",
            ),
            (
                "a port out of range",
                r#"[{"name": "a", "probe": {"tcpSocket": {"port": 70000}}}]"#,
                "annotation probelet.dev/readiness-probes: [0].probe.tcpSocket.port: Invalid value: 70000: must be between 1 and 65535, inclusive",
            ),
            (
                "a zero period",
                r#"[{"name": "a", "probe": {"httpGet": {"port": 80}, "periodSeconds": 0}}]"#,
                "annotation probelet.dev/readiness-probes: [0].probe.periodSeconds: must be greater than or equal to 1",
            ),
            (
                "a negative initial delay",
                r#"[{"name": "a", "probe": {"grpc": {"port": 80}, "initialDelaySeconds": -1}}]"#,
                "annotation probelet.dev/readiness-probes: [0].probe.initialDelaySeconds: must be greater than or equal to 0",
            ),
            (
                "a grace period",
                r#"[{"name": "a", "probe": {"grpc": {"port": 80}, "terminationGracePeriodSeconds": 5}}]"#,
                "annotation probelet.dev/readiness-probes: [0].probe.terminationGracePeriodSeconds: must not be set for readinessProbes",
            ),
            (
                "an unknown container",
                r#"[{"name": "a", "container": "web", "probe": {"exec": {"command": ["true"]}}}]"#,
                "annotation probelet.dev/readiness-probes: [0].container: no container \"web\" in the pod",
            ),
        ];
        let wrong: Vec<String> = cases
            .iter()
            .filter_map(|(case, value, want)| {
                let got = parse_gate_probes(value, &spec(), true).map(|_| ()).map_err(|e| e.to_string());
                (got != Err((*want).to_owned())).then(|| format!("case {case}: got {got:?}"))
            })
            .collect();
        assert!(wrong.is_empty(), "{wrong:#?}");
    }

    #[test]
    fn timing_is_read_and_validated_like_the_probe_timing_annotation() {
        let value = r#"[{"name": "fast", "probe": {"httpGet": {"port": 8080}},
            "timing": {"periodMs": 250, "startIntervalMs": 100}}]"#;
        let probes = parse_gate_probes(value, &spec(), false).unwrap();
        let timing = probes[0].timing.expect("a timing");
        assert_eq!((timing.period_ms, timing.start_interval_ms), (Some(250), Some(100)));
        let too_fast =
            r#"[{"name": "fast", "probe": {"httpGet": {"port": 8080}}, "timing": {"periodMs": 20}}]"#;
        assert_eq!(
            parse_gate_probes(too_fast, &spec(), false).unwrap_err().to_string(),
            "annotation probelet.dev/readiness-probes: [0].timing.periodMs: 20 is below the floor of 100 ms"
        );
        let unknown =
            r#"[{"name": "fast", "probe": {"httpGet": {"port": 8080}}, "timing": {"periodSeconds": 1}}]"#;
        let err = parse_gate_probes(unknown, &spec(), false).unwrap_err();
        assert_eq!(err.path, "[0].timing.periodSeconds", "{err}");
    }

    #[test]
    fn exec_needs_the_exec_flag() {
        let value = r#"[{"name": "script", "probe": {"exec": {"command": ["true"]}}}]"#;
        let err = parse_gate_probes(value, &spec(), false).unwrap_err();
        assert_eq!(err.path, "[0].probe.exec");
        assert!(err.message.contains("--readiness-gate-exec"), "{err}");
        assert!(parse_gate_probes(value, &spec(), true).is_ok());
        let empty = r#"[{"name": "script", "probe": {"exec": {}}}]"#;
        assert_eq!(parse_gate_probes(empty, &spec(), true).unwrap_err().path, "[0].probe.exec.command");
    }
}
