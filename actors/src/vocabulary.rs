//! The probe vocabulary every part of the engine speaks: which probe (`ProbeKind`), what an
//! executor concluded (`Outcome`, upstream `probe.Result`), what the results cache holds
//! (`ProbeResult`, upstream `results.Result`), why a probe could not run (`ProbeError`) and
//! which worker it is (`ProbeKey`). A leaf: it imports no other module of the engine, so the
//! prober, the results cache and the host contracts all use it without importing each other.

use std::fmt;

/// Which of a container's three probes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum ProbeKind {
    Liveness,
    Readiness,
    Startup,
}

impl ProbeKind {
    /// All kinds, in the order upstream's AddPod creates workers.
    pub const ADD_ORDER: [ProbeKind; 3] = [ProbeKind::Startup, ProbeKind::Readiness, ProbeKind::Liveness];

    /// The display string used in events, logs and the `probe_type` metric label.
    pub fn as_str(self) -> &'static str {
        match self {
            ProbeKind::Liveness => "Liveness",
            ProbeKind::Readiness => "Readiness",
            ProbeKind::Startup => "Startup",
        }
    }

    /// The container's probe spec of this kind, if it has one.
    pub fn probe_of(
        self,
        container: &k8s_openapi::api::core::v1::Container,
    ) -> Option<&k8s_openapi::api::core::v1::Probe> {
        match self {
            ProbeKind::Liveness => container.liveness_probe.as_ref(),
            ProbeKind::Readiness => container.readiness_probe.as_ref(),
            ProbeKind::Startup => container.startup_probe.as_ref(),
        }
    }
}

impl fmt::Display for ProbeKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// What an executor concluded (upstream `probe.Result`): the string forms appear in events.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Outcome {
    Success,
    /// Logically a success, with extra information worth an event (an unfollowed redirect).
    Warning,
    Failure,
    Unknown,
}

impl Outcome {
    pub fn as_str(self) -> &'static str {
        match self {
            Outcome::Success => "success",
            Outcome::Warning => "warning",
            Outcome::Failure => "failure",
            Outcome::Unknown => "unknown",
        }
    }
}

impl fmt::Display for Outcome {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// What the results cache holds for a container (upstream `results.Result`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum ProbeResult {
    Unknown,
    /// The zero value, as in upstream's int encoding (Success = 0): a worker's `last_result`
    /// starts here, so the first Success counts as a run of one.
    #[default]
    Success,
    Failure,
}

impl ProbeResult {
    pub fn as_str(self) -> &'static str {
        match self {
            ProbeResult::Success => "Success",
            ProbeResult::Failure => "Failure",
            ProbeResult::Unknown => "UNKNOWN",
        }
    }

    /// Upstream `ToPrometheusType`: Success 0, Failure 1, Unknown -1.
    pub fn to_prometheus(self) -> f64 {
        match self {
            ProbeResult::Success => 0.0,
            ProbeResult::Failure => 1.0,
            ProbeResult::Unknown => -1.0,
        }
    }
}

impl fmt::Display for ProbeResult {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A probe that could not be run or completed. The dispatcher retries these and then discards
/// the result; the outcome says which state the event reports ("errored and resulted in …").
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ProbeError {
    #[error("invalid port number: {0}")]
    InvalidPort(i64),
    #[error("port \"{0}\" not found")]
    PortNotFound(String),
    #[error("intOrString had no kind: {0}")]
    PortKind(String),
    #[error("missing probe handler for {pod}:{container}")]
    MissingHandler { pod: String, container: String },
    #[error("unknown probe type: \"{0}\"")]
    UnknownProbeType(String),
    /// The probe spec cannot be turned into a request (bad header name, bad host, …).
    #[error("{0}")]
    InvalidRequest(String),
    /// The exec command is empty or references are malformed.
    #[error("{0}")]
    InvalidCommand(String),
    /// The container runtime could not run the command at all.
    #[error("{0}")]
    Runtime(String),
    /// The HTTP body could not be read (upstream: failure, empty output, the error).
    #[error("{0}")]
    BodyRead(String),
    /// A probe future panicked; the worker keeps its previous result.
    #[error("probe panicked: {0}")]
    Panicked(String),
}

impl ProbeError {
    /// The executor-level result that accompanies this error upstream.
    pub fn outcome(&self) -> Outcome {
        match self {
            ProbeError::BodyRead(_) | ProbeError::UnknownProbeType(_) => Outcome::Failure,
            _ => Outcome::Unknown,
        }
    }
}

/// Identifies a worker: pod UID, container name, probe kind.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ProbeKey {
    pub pod_uid: String,
    pub container_name: String,
    pub kind: ProbeKind,
}
