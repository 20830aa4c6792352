//! The standalone agent's event sink: the recent events are kept, aggregated like the kubelet's
//! event recorder (same object, reason and message → count bumped), for `/events`, and logged.
//!
//! Every event logs at debug, whatever its type, as the kubelet logs its events at `V(3)`: a
//! Warning event (a probe failure, a back-off) is the pod owner's to act on, not the agent
//! operator's, and the standalone console already prints one line per status transition
//! (`Ready=False`, `waiting (CrashLoopBackOff)`, the kill after a failed liveness probe), so each
//! thing is told once. `-v` or `RUST_LOG` shows them; `/events` keeps them with their counts.

use std::collections::VecDeque;
use std::sync::{Arc, Mutex};

use k8s_openapi::api::core::v1::ObjectReference;
use probelet_actors::clock::SharedClock;
use probelet_actors::contracts::{EventRecorder, EventType};
use serde::Serialize;

use super::history::format_time;

/// Events kept.
pub const EVENTS_KEPT: usize = 500;

/// One event as `/events` shows it (core/v1 Event field names).
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct RecentEvent {
    pub involved_object: ObjectReference,
    #[serde(rename = "type")]
    pub type_: String,
    pub reason: String,
    pub message: String,
    pub count: u32,
    pub first_timestamp: String,
    pub last_timestamp: String,
}

/// Logs and keeps events. Cheap to clone.
#[derive(Clone)]
pub struct EventLog {
    events: Arc<Mutex<VecDeque<RecentEvent>>>,
    clock: SharedClock,
}

impl EventLog {
    pub fn new(clock: SharedClock) -> Self {
        EventLog { events: Arc::default(), clock }
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
        let pod = format!(
            "{}/{}",
            object.namespace.as_deref().unwrap_or_default(),
            object.name.as_deref().unwrap_or_default()
        );
        let field = object.field_path.as_deref().unwrap_or_default();
        let now = format_time(self.clock.now());
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
        if events.len() == EVENTS_KEPT {
            events.pop_front();
        }
        events.push_back(RecentEvent {
            involved_object: object.clone(),
            type_: event_type.as_str().to_owned(),
            reason: reason.to_owned(),
            message: message.to_owned(),
            count: 1,
            first_timestamp: now.clone(),
            last_timestamp: now,
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::jiff::Timestamp;
    use probelet_actors::clock::TokioClock;

    #[tokio::test]
    async fn aggregates_identical_events() {
        let log = EventLog::new(Arc::new(TokioClock::starting_at(Timestamp::UNIX_EPOCH)));
        let object = ObjectReference { name: Some("p".into()), ..Default::default() };
        log.record(&object, EventType::Warning, "Unhealthy", "Readiness probe failed: x");
        log.record(&object, EventType::Warning, "Unhealthy", "Readiness probe failed: x");
        log.record(&object, EventType::Warning, "Unhealthy", "Readiness probe failed: y");
        let events = log.recent();
        assert_eq!(events.len(), 2);
        assert_eq!(events[0].count, 2);
        assert_eq!(events[1].message, "Readiness probe failed: y");
    }
}
