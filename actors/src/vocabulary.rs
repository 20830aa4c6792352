//! The probe vocabulary every part of the engine speaks: which probe (`ProbeKind`), what an
//! executor concluded (`ProbeOutcome`, upstream `probe.Result`), what the results cache holds
//! (`ProbeResult`, upstream `results.Result`), why a probe could not run (`ProbeError`) and
//! which worker it is (`ProbeKey`, its pod by `PodUid`). A leaf: it imports no other module of
//! the engine, so the prober, the results cache and the host contracts all use it without
//! importing each other.

use std::borrow::Borrow;
use std::fmt;
use std::sync::Arc;

use serde::{Deserialize, Serialize};

/// Which of a container's three probes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum ProbeKind {
    /// The liveness probe: on failure the container is killed and restarted (upstream `liveness`).
    Liveness,
    /// The readiness probe: decides the container's `ready` flag and the pod's Ready condition.
    Readiness,
    /// The startup probe: until it succeeds, liveness and readiness probes do not run.
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
pub enum ProbeOutcome {
    /// The probe passed.
    Success,
    /// Logically a success, with extra information worth an event (an unfollowed redirect).
    Warning,
    /// The probe ran and failed (a non-zero exit, an HTTP status outside 200–399, a refused
    /// connection, …).
    Failure,
    /// The probe could not tell (upstream `probe.Unknown`); without an error it counts as a
    /// failure.
    Unknown,
}

impl ProbeOutcome {
    /// The lower-case text upstream prints for a `probe.Result` ("success", "warning", "failure",
    /// "unknown").
    pub fn as_str(self) -> &'static str {
        match self {
            ProbeOutcome::Success => "success",
            ProbeOutcome::Warning => "warning",
            ProbeOutcome::Failure => "failure",
            ProbeOutcome::Unknown => "unknown",
        }
    }
}

impl fmt::Display for ProbeOutcome {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// The former name of [`ProbeOutcome`], kept so hosts that import it still build.
#[deprecated(note = "renamed to `ProbeOutcome`")]
pub type Outcome = ProbeOutcome;

/// What the results cache holds for a container (upstream `results.Result`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum ProbeResult {
    /// No result yet (upstream `results.Unknown`): a startup probe's initial value for a new
    /// container (readiness starts at Failure, liveness at Success).
    Unknown,
    /// The zero value, as in upstream's int encoding (Success = 0): a worker's `last_result`
    /// starts here, so the first Success counts as a run of one.
    #[default]
    Success,
    /// Failed (upstream `results.Failure`): `failureThreshold` failures in a row, a container that
    /// is not running, or a readiness probe's initial value.
    Failure,
}

impl ProbeResult {
    /// The text upstream's `results.Result.String()` prints: "Success", "Failure", "UNKNOWN".
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
    /// A numeric port outside 1–65535 (the probe's port or a named port's number).
    #[error("invalid port number: {0}")]
    InvalidPort(i64),
    /// A named port that no container port of the container declares.
    #[error("port \"{0}\" not found")]
    PortNotFound(String),
    /// The probe spec sets none of `exec`, `httpGet`, `tcpSocket`, `grpc`.
    #[error("missing probe handler for {pod}:{container}")]
    MissingHandler {
        /// The pod as upstream's `format.Pod` prints it: `name_namespace(uid)`.
        pod: String,
        /// The container whose probe has no handler.
        container: String,
    },
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
    pub fn outcome(&self) -> ProbeOutcome {
        match self {
            ProbeError::BodyRead(_) => ProbeOutcome::Failure,
            _ => ProbeOutcome::Unknown,
        }
    }
}

/// A pod's UID (`metadata.uid`): the key the engine and its hosts file a pod under. A type of
/// its own so a UID cannot be passed where a name or a container ID belongs; it borrows as a
/// `str`, so maps keyed by it are looked up with a `&str`, and serializes as the bare string.
/// The text is shared: a clone (the prober manager's key, the worker's, its metric labels, the
/// pod's status view all hold one) is a reference count, not a copy (docs/memory.md).
#[derive(Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Default)]
pub struct PodUid(Arc<str>);

impl Serialize for PodUid {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_str(&self.0)
    }
}

impl<'de> Deserialize<'de> for PodUid {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        String::deserialize(deserializer).map(PodUid::from)
    }
}

impl PodUid {
    /// The UID as text.
    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// The UID of a pod, if it has one (a pod the API server has not stored has none).
    pub fn of(pod: &k8s_openapi::api::core::v1::Pod) -> Option<PodUid> {
        pod.metadata.uid.as_deref().map(PodUid::from)
    }

    /// The shared text, for a holder that keeps it as an `Arc<str>` (a metric label value).
    pub fn shared(&self) -> Arc<str> {
        self.0.clone()
    }
}

// Debug output as the bare string's (`"0f3c"`): log lines and messages that print a key or a
// message with `?` read as they did when the UID was a `String`.
impl fmt::Debug for PodUid {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(&self.0, f)
    }
}

impl fmt::Display for PodUid {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl From<String> for PodUid {
    fn from(uid: String) -> Self {
        PodUid(uid.into())
    }
}

impl From<&String> for PodUid {
    fn from(uid: &String) -> Self {
        PodUid(uid.as_str().into())
    }
}

impl From<&str> for PodUid {
    fn from(uid: &str) -> Self {
        PodUid(uid.into())
    }
}

impl From<PodUid> for String {
    fn from(uid: PodUid) -> Self {
        uid.0.as_ref().to_owned()
    }
}

impl AsRef<str> for PodUid {
    fn as_ref(&self) -> &str {
        &self.0
    }
}

// A UID is read as text everywhere (log fields, label values, API paths): deref to `str`
// keeps those reads plain while only a `PodUid` can stand where a UID is expected.
impl std::ops::Deref for PodUid {
    type Target = str;

    fn deref(&self) -> &str {
        &self.0
    }
}

impl Borrow<str> for PodUid {
    fn borrow(&self) -> &str {
        &self.0
    }
}

impl PartialEq<str> for PodUid {
    fn eq(&self, other: &str) -> bool {
        &*self.0 == other
    }
}

impl PartialEq<&str> for PodUid {
    fn eq(&self, other: &&str) -> bool {
        &*self.0 == *other
    }
}

impl PartialEq<String> for PodUid {
    fn eq(&self, other: &String) -> bool {
        *self.0 == **other
    }
}

/// Identifies a worker: pod UID, container name, probe kind.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ProbeKey {
    /// The UID of the pod the probed container belongs to.
    pub pod_uid: PodUid,
    /// The container's name within the pod spec.
    pub container_name: Arc<str>,
    /// Which of the container's probes this worker runs.
    pub kind: ProbeKind,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_pod_uid_clone_shares_its_text() {
        let uid = PodUid::from("0f3c-uid");
        let copy = uid.clone();
        assert_eq!(uid.as_str().as_ptr(), copy.as_str().as_ptr());
        assert!(Arc::ptr_eq(&uid.shared(), &copy.shared()));
        assert_eq!(String::from(copy), "0f3c-uid");
    }

    #[test]
    fn a_pod_uid_is_looked_up_by_str_and_serialized_as_the_bare_string() {
        use std::collections::{BTreeSet, HashMap};

        let uid = PodUid::from("0f3c");
        let by_uid: HashMap<PodUid, u8> = HashMap::from([(uid.clone(), 1)]);
        assert_eq!(by_uid.get("0f3c"), Some(&1));
        let ordered: BTreeSet<PodUid> = ["b", "a"].into_iter().map(PodUid::from).collect();
        assert!(ordered.contains("a"));
        assert_eq!(ordered.into_iter().map(String::from).collect::<Vec<_>>(), ["a", "b"]);

        assert_eq!(uid.to_string(), "0f3c");
        assert_eq!(format!("{uid:?}"), r#""0f3c""#);
        assert_eq!(uid, "0f3c");
        assert_eq!(serde_json::to_string(&uid).unwrap(), r#""0f3c""#);
        assert_eq!(serde_json::from_str::<PodUid>(r#""0f3c""#).unwrap(), uid);

        let mut pod = k8s_openapi::api::core::v1::Pod::default();
        assert_eq!(PodUid::of(&pod), None);
        pod.metadata.uid = Some("0f3c".into());
        assert_eq!(PodUid::of(&pod), Some(uid));
    }

    #[test]
    #[allow(deprecated)]
    fn the_former_outcome_name_still_names_the_probe_outcome() {
        let outcome: Outcome = ProbeOutcome::Warning;
        assert_eq!(outcome, Outcome::Warning);
        assert_eq!(outcome.as_str(), "warning");
    }
}
