//! The standalone agent's event sink: the recent events are kept, aggregated like the kubelet's
//! event recorder (same object, reason and message → count bumped), for `/events`, and logged.
//! One object (a pod) keeps at most [`EVENTS_KEPT_PER_OBJECT`] of them: a pod whose probe
//! fails with a new message every 100 ms replaces its own oldest events, not every other pod's.
//!
//! Every event logs at debug, whatever its type, as the kubelet logs its events at `V(3)`: a
//! Warning event (a probe failure, a back-off) is the pod owner's to act on, not the agent
//! operator's, and the standalone console already prints one line per status transition
//! (`Ready=False`, `waiting (CrashLoopBackOff)`, the kill after a failed liveness probe), so each
//! thing is told once. `-v` or `RUST_LOG` shows them; `/events` keeps them with their counts.

use std::collections::VecDeque;
use std::sync::{Arc, Mutex};

use k8s_openapi::api::core::v1::{EventSource, ObjectReference};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use k8s_openapi::jiff::Timestamp;
use probelet_actors::clock::SharedClock;
use probelet_actors::contracts::{EventRecorder, EventType};
use serde::Serialize;

use super::history::format_time;

/// Events kept.
pub const EVENTS_KEPT: usize = 500;
/// Events kept about one object (the same involved object, whatever the field path).
pub const EVENTS_KEPT_PER_OBJECT: usize = 100;

/// Who the agent's events say recorded them (`source.component`, `reportingComponent`), in
/// either mode: the agent is not the node's kubelet (README, deviations).
pub const EVENT_COMPONENT: &str = "probelet";

/// The name of a new Event about `object` first seen at `now`, as client-go's recorder names
/// it: the object's name, a dot, the time in nanoseconds since the epoch in hexadecimal.
pub fn event_name(object: &ObjectReference, now: Timestamp) -> String {
    format!("{}.{:x}", object.name.as_deref().unwrap_or_default(), now.as_nanosecond())
}

/// One event as `/events` shows it: a core/v1 Event, with the fields the kubelet's recorder
/// sets (docs/status-page.md, "/events"), so that what reads `kubectl get events -o json`
/// reads it too.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct RecentEvent {
    /// Its name ([`event_name`]) and namespace (the object's, `default` when it has none).
    pub metadata: ObjectMeta,
    pub involved_object: ObjectReference,
    #[serde(rename = "type")]
    pub type_: String,
    pub reason: String,
    pub message: String,
    pub count: u32,
    pub first_timestamp: String,
    pub last_timestamp: String,
    /// [`EVENT_COMPONENT`] on the agent's node.
    pub source: EventSource,
    pub reporting_component: String,
    /// The node.
    pub reporting_instance: String,
}

/// Logs and keeps events. Cheap to clone.
#[derive(Clone)]
pub struct EventLog {
    events: Arc<Mutex<VecDeque<RecentEvent>>>,
    clock: SharedClock,
    /// The node the events are recorded on.
    node: Arc<str>,
}

impl EventLog {
    /// A log of events recorded on node `node`.
    pub fn new(clock: SharedClock, node: &str) -> Self {
        EventLog { events: Arc::default(), clock, node: node.into() }
    }

    /// The wall-clock time on this log's clock (event timestamps read it).
    pub fn now(&self) -> k8s_openapi::jiff::Timestamp {
        self.clock.now()
    }

    /// The kept events, oldest first.
    pub fn recent(&self) -> Vec<RecentEvent> {
        self.events.lock().map(|e| e.iter().cloned().collect()).unwrap_or_default()
    }
}

impl EventRecorder for EventLog {
    fn record(&self, object: &ObjectReference, event_type: EventType, reason: &str, message: &str) {
        let pod = probelet_actors::format::pod_key(
            object.namespace.as_deref().unwrap_or_default(),
            object.name.as_deref().unwrap_or_default(),
        );
        let field = object.field_path.as_deref().unwrap_or_default();
        let now_time = self.clock.now();
        let now = format_time(now_time);
        let Ok(mut events) = self.events.lock() else { return };
        let same = |e: &&mut RecentEvent| {
            e.involved_object == *object
                && e.reason == reason
                && e.message == message
                && e.type_ == event_type.as_str()
        };
        tracing::debug!(pod, field_path = field, event_type = event_type.as_str(), reason, "{message}");
        if let Some(existing) = events.iter_mut().rev().find(same) {
            existing.count += 1;
            existing.last_timestamp = now;
            return;
        }
        let same_object = |e: &RecentEvent| {
            e.involved_object.namespace == object.namespace
                && e.involved_object.name == object.name
                && e.involved_object.uid == object.uid
        };
        if events.iter().filter(|e| same_object(e)).count() >= EVENTS_KEPT_PER_OBJECT {
            if let Some(oldest) = events.iter().position(same_object) {
                events.remove(oldest);
            }
        } else if events.len() == EVENTS_KEPT {
            events.pop_front();
        }
        events.push_back(RecentEvent {
            metadata: ObjectMeta {
                name: Some(event_name(object, now_time)),
                namespace: Some(object.namespace.clone().unwrap_or_else(|| "default".to_owned())),
                ..Default::default()
            },
            involved_object: object.clone(),
            type_: event_type.as_str().to_owned(),
            reason: reason.to_owned(),
            message: message.to_owned(),
            count: 1,
            first_timestamp: now.clone(),
            last_timestamp: now,
            source: EventSource {
                component: Some(EVENT_COMPONENT.to_owned()),
                host: Some(self.node.to_string()),
            },
            reporting_component: EVENT_COMPONENT.to_owned(),
            reporting_instance: self.node.to_string(),
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use probelet_actors::clock::TokioClock;

    #[tokio::test]
    async fn aggregates_identical_events() {
        let log = EventLog::new(Arc::new(TokioClock::starting_at(Timestamp::UNIX_EPOCH)), "node-a");
        let object = ObjectReference { name: Some("p".into()), ..Default::default() };
        log.record(&object, EventType::Warning, "Unhealthy", "Readiness probe failed: x");
        log.record(&object, EventType::Warning, "Unhealthy", "Readiness probe failed: x");
        log.record(&object, EventType::Warning, "Unhealthy", "Readiness probe failed: y");
        let events = log.recent();
        assert_eq!(events.len(), 2);
        assert_eq!(events[0].count, 2);
        assert_eq!(events[1].message, "Readiness probe failed: y");
    }

    /// A pod whose probe fails with a new message every time replaces its own oldest events,
    /// not the other pods'.
    #[tokio::test]
    async fn a_noisy_pod_does_not_push_the_others_out() {
        let log = EventLog::new(Arc::new(TokioClock::starting_at(Timestamp::UNIX_EPOCH)), "node-a");
        let pod = |name: &str| ObjectReference {
            name: Some(name.into()),
            namespace: Some("default".into()),
            uid: Some(format!("uid-{name}")),
            field_path: Some("spec.containers{app}".into()),
            ..Default::default()
        };
        log.record(&pod("victim"), EventType::Normal, "Started", "Started container app");
        for i in 0..EVENTS_KEPT * 2 {
            log.record(
                &pod("noisy"),
                EventType::Warning,
                "Unhealthy",
                &format!("Readiness probe failed: {i}"),
            );
        }
        let events = log.recent();
        assert_eq!(events[0].involved_object.name.as_deref(), Some("victim"), "kept");
        let noisy: Vec<_> =
            events.iter().filter(|e| e.involved_object.name.as_deref() == Some("noisy")).collect();
        assert_eq!(noisy.len(), EVENTS_KEPT_PER_OBJECT);
        let last = format!("Readiness probe failed: {}", EVENTS_KEPT * 2 - 1);
        assert_eq!(noisy.last().map(|e| e.message.as_str()), Some(last.as_str()), "the newest are kept");
    }
}
