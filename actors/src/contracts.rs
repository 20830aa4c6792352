//! The traits a host implements so the engine can reach the container runtime and the event
//! stream (upstream `ContainerCommandRunner` and `record.EventRecorder`), with the simple
//! implementations the engine ships: a tracing-log recorder and an in-memory one for tests.

use std::borrow::Cow;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures::future::BoxFuture;
use k8s_openapi::api::core::v1::{ObjectReference, Pod};

use crate::capacity::ShrinkAfterRemoval;
use crate::container::ContainerId;
use crate::vocabulary::PodUid;

/// Combined stdout and stderr of an exec probe is capped at this many bytes (upstream 10 KiB).
pub const MAX_EXEC_OUTPUT: usize = 10 * 1024;

/// What a command run in a container ended with.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ExecOutput {
    /// Combined stdout and stderr, at most [`MAX_EXEC_OUTPUT`] bytes.
    pub output: Vec<u8>,
    /// The exit code; a process killed by a signal reports 128 + signal, as a shell would.
    pub exit_code: i32,
}

/// Why a command could not be run to completion.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ExecError {
    /// The command ran past its timeout and was killed; what it printed until then.
    #[error("command timed out")]
    Timeout {
        /// Combined stdout and stderr up to the kill, at most [`MAX_EXEC_OUTPUT`] bytes.
        output: Vec<u8>,
    },
    /// The runtime could not run the command (no such container, no such executable, …).
    #[error("{0}")]
    Runtime(String),
}

/// Runs a command inside a container (upstream `ContainerCommandRunner.RunInContainer`).
///
/// The future must honour `timeout` itself (kill the command and return
/// [`ExecError::Timeout`]) and must kill the command when dropped, so a cancelled probe leaves
/// nothing running. One that has not answered 2 minutes after `timeout` is dropped and the
/// probe counted a timeout, as the kubelet's CRI client gives up on `ExecSync`
/// ([`crate::prober::exec::RUNTIME_REQUEST_TIMEOUT`]).
pub trait CommandRunner: Send + Sync + 'static {
    /// Runs `cmd` (program and arguments, not through a shell) in the container `container_id`.
    fn run_in_container(
        &self,
        container_id: &ContainerId,
        cmd: &[String],
        timeout: Duration,
    ) -> BoxFuture<'static, Result<ExecOutput, ExecError>>;
}

/// Event type: `Normal` or `Warning`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum EventType {
    /// An event about normal operation.
    Normal,
    /// An event about a problem (upstream uses it for every probe event: `Unhealthy`,
    /// `ProbeWarning`, …).
    Warning,
}

impl EventType {
    /// The text the Event object's `type` field carries: "Normal" or "Warning".
    pub fn as_str(self) -> &'static str {
        match self {
            EventType::Normal => "Normal",
            EventType::Warning => "Warning",
        }
    }
}

/// Records an event about an object (upstream `record.EventRecorder.Event`). Must not block.
pub trait EventRecorder: Send + Sync + 'static {
    /// Records one event about `object` with this `reason` (upstream's CamelCase reason, e.g.
    /// `Unhealthy`) and `message`.
    fn record(&self, object: &ObjectReference, event_type: EventType, reason: &str, message: &str);
}

/// One recorded event, as the in-memory recorder keeps it.
#[derive(Debug, Clone, PartialEq)]
pub struct RecordedEvent {
    /// The object the event is about (for probe events: the pod, with `fieldPath` naming the
    /// container).
    pub object: ObjectReference,
    /// Normal or Warning.
    pub event_type: EventType,
    /// The CamelCase reason, e.g. `Unhealthy`.
    pub reason: String,
    /// The human-readable message, e.g. "Liveness probe failed: …".
    pub message: String,
}

impl RecordedEvent {
    /// The fake recorder's rendering upstream: `"<type> <reason> <message>"`.
    pub fn render(&self) -> String {
        format!("{} {} {}", self.event_type.as_str(), self.reason, self.message)
    }
}

/// Keeps every event in memory (tests, the standalone agent's `/events`).
#[derive(Debug, Clone, Default)]
pub struct MemoryRecorder {
    events: Arc<Mutex<Vec<RecordedEvent>>>,
}

impl MemoryRecorder {
    /// An empty recorder.
    pub fn new() -> Self {
        Self::default()
    }

    /// A copy of every event recorded so far.
    pub fn events(&self) -> Vec<RecordedEvent> {
        self.events.lock().map(|e| e.clone()).unwrap_or_default()
    }

    /// Every event rendered as upstream's fake recorder does.
    pub fn rendered(&self) -> Vec<String> {
        self.events().iter().map(RecordedEvent::render).collect()
    }
}

impl EventRecorder for MemoryRecorder {
    fn record(&self, object: &ObjectReference, event_type: EventType, reason: &str, message: &str) {
        if let Ok(mut events) = self.events.lock() {
            events.push(RecordedEvent {
                object: object.clone(),
                event_type,
                reason: reason.to_owned(),
                message: message.to_owned(),
            });
        }
    }
}

/// Writes events to the log (standalone mode without an event sink).
#[derive(Debug, Clone, Copy, Default)]
pub struct LogRecorder;

impl EventRecorder for LogRecorder {
    fn record(&self, object: &ObjectReference, event_type: EventType, reason: &str, message: &str) {
        tracing::info!(
            pod = crate::format::pod_key(
                object.namespace.as_deref().unwrap_or_default(),
                object.name.as_deref().unwrap_or_default()
            ),
            field_path = object.field_path.as_deref().unwrap_or(""),
            event_type = event_type.as_str(),
            reason,
            "{message}"
        );
    }
}

/// One probe run, as a host's observer sees it (the agent keeps the last few per probe). The
/// text borrows from the pod and the probe's answer (an error's text is formatted): the engine
/// makes no copy of it for an observer that does not keep it (a probe at a time, every period,
/// for every worker); [`ProbeRecord::into_owned`] makes one that does.
#[derive(Debug, Clone, PartialEq)]
pub struct ProbeRecord<'a> {
    /// The UID of the probed pod.
    pub pod_uid: Cow<'a, str>,
    /// The pod's namespace.
    pub namespace: Cow<'a, str>,
    /// The pod's name.
    pub pod: Cow<'a, str>,
    /// The probed container's name.
    pub container: Cow<'a, str>,
    /// Which of the container's probes ran.
    pub kind: crate::vocabulary::ProbeKind,
    /// The cache result, or the error that made the probe's result discarded.
    pub result: Result<crate::vocabulary::ProbeResult, String>,
    /// What the executor said (its output or the error text), uncut.
    pub output: Cow<'a, str>,
    /// How long the run took, all attempts included (an errored probe is tried up to 3 times),
    /// from the moment it had its probe slot.
    pub duration: Duration,
    /// How long the probe waited for a probe slot before it ran: zero unless the pipeline had
    /// as many probes in flight as it allows (docs/prober.md §1.2, "Probe slots").
    pub waited: Duration,
}

impl ProbeRecord<'_> {
    /// The record with its text copied, to keep.
    pub fn into_owned(self) -> ProbeRecord<'static> {
        let own = |text: Cow<'_, str>| Cow::Owned(text.into_owned());
        ProbeRecord {
            pod_uid: own(self.pod_uid),
            namespace: own(self.namespace),
            pod: own(self.pod),
            container: own(self.container),
            kind: self.kind,
            result: self.result,
            output: own(self.output),
            duration: self.duration,
            waited: self.waited,
        }
    }
}

/// Told about every probe run; must not block.
pub trait ProbeObserver: Send + Sync + 'static {
    /// Called once per probe run, after the result is known.
    fn observe(&self, record: ProbeRecord<'_>);
}

/// The host's pod manager, as the engine needs it: pods by UID and static/mirror translation
/// (upstream `pod.Manager` / the status manager's `podManager`).
pub trait PodLookup: Send + Sync + 'static {
    /// The pod with this UID, if the host knows it.
    fn pod_by_uid(&self, uid: &str) -> Option<Arc<Pod>>;

    /// For a mirror pod's UID, the UID of its static pod.
    fn static_uid_for_mirror(&self, _mirror_uid: &str) -> Option<String> {
        None
    }

    /// For a static pod's UID, the UID of its mirror pod, if one exists.
    fn mirror_uid_for_static(&self, _static_uid: &str) -> Option<String> {
        None
    }

    /// Whether this UID belongs to a static pod (its status is written to the mirror pod).
    fn is_static(&self, _uid: &str) -> bool {
        false
    }
}

/// An in-memory pod registry: the simplest [`PodLookup`], for hosts and tests.
#[derive(Debug, Default, Clone)]
pub struct PodRegistry {
    pods: Arc<std::sync::RwLock<std::collections::HashMap<PodUid, Arc<Pod>>>>,
}

impl PodRegistry {
    /// An empty registry.
    pub fn new() -> Self {
        Self::default()
    }

    /// Adds or replaces a pod (keyed by its UID; a pod without a UID is ignored).
    pub fn upsert(&self, pod: Arc<Pod>) {
        if let (Some(uid), Ok(mut pods)) = (PodUid::of(&pod), self.pods.write()) {
            pods.insert(uid, pod);
        }
    }

    /// Removes the pod with this UID and returns it, if it was there.
    pub fn remove(&self, uid: &str) -> Option<Arc<Pod>> {
        let mut pods = self.pods.write().ok()?;
        let removed = pods.remove(uid);
        pods.shrink_after_removal();
        removed
    }

    /// A snapshot of every pod the registry holds, in no particular order.
    pub fn pods(&self) -> Vec<Arc<Pod>> {
        self.pods.read().map(|p| p.values().cloned().collect()).unwrap_or_default()
    }
}

impl PodLookup for PodRegistry {
    fn pod_by_uid(&self, uid: &str) -> Option<Arc<Pod>> {
        self.pods.read().ok().and_then(|p| p.get(uid).cloned())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// An event written to the log names its pod as every line does, `namespace/name`, in one
    /// field (before, the name and the namespace were two).
    #[test]
    fn the_log_recorder_names_the_pod_as_every_line_does() {
        let object = ObjectReference {
            namespace: Some("default".into()),
            name: Some("web".into()),
            field_path: Some("spec.containers{app}".into()),
            ..Default::default()
        };
        let (log, _guard) = crate::test_log::Captured::start();
        LogRecorder.record(&object, EventType::Warning, "Unhealthy", "Readiness probe failed: x");
        assert_eq!(
            log.fields_of("Readiness probe failed: x"),
            [
                r#"pod="default/web" field_path="spec.containers{app}" event_type="Warning" reason="Unhealthy""#
            ]
        );
    }
}
