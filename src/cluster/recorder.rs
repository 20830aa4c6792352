//! Writes core/v1 Events like the kubelet's recorder.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use k8s_openapi::api::core::v1::{Event as CoreEvent, EventSource, ObjectReference};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, Time};
use kube::api::{Api, Patch, PatchParams, PostParams};
use probelet_actors::contracts::{EventRecorder, EventType};
use probelet_actors::sync::rate::RateLimiter;
use tokio::sync::mpsc;
use tokio::time::Instant;

use super::correlator::EventCorrelator;
use crate::host::events::{EVENT_COMPONENT, EventLog};

/// Event writes waiting for the API server; more are dropped (the broadcaster's
/// `maxQueuedEvents`).
pub const MAX_PENDING_EVENTS: usize = 1000;
/// The event client's own budget: the kubelet's `--event-qps` and `--event-burst` defaults.
/// Separate from the status budget, so a burst of probe failures never delays status writes.
pub const EVENT_QPS: f64 = 50.0;
pub const EVENT_BURST: u32 = 100;

/// An Event write waiting for the writer task.
struct PendingEvent {
    event: CoreEvent,
    update_existing: bool,
}

/// Writes core/v1 Events like the kubelet's recorder (client-go `tools/record`): one Event per
/// (object, type, reason, message), its `count` and `lastTimestamp` bumped on repeats, so
/// `kubectl describe pod` shows `(x5 over 2m)`; similar events combined and spam dropped by
/// the [`EventCorrelator`]. (kube-rs's events.k8s.io Recorder groups by reason only and drops
/// a changed message, so it is not used.) Every event also goes to the local log.
///
/// One task writes the events in order, with its own request budget, like the broadcaster's
/// sink goroutine; at most [`MAX_PENDING_EVENTS`] wait, more are dropped and counted.
#[derive(Clone)]
pub struct CoreEventRecorder {
    node: String,
    local: EventLog,
    correlator: Arc<Mutex<EventCorrelator>>,
    queue: mpsc::Sender<PendingEvent>,
    /// Events dropped because the queue was full.
    dropped: Arc<AtomicU64>,
}

impl CoreEventRecorder {
    /// Starts the writer task on the current tokio runtime; without one, events go to the
    /// local log only.
    pub fn new(client: kube::Client, limiter: RateLimiter, node: String, local: EventLog) -> Self {
        let (queue, pending) = mpsc::channel(MAX_PENDING_EVENTS);
        match tokio::runtime::Handle::try_current() {
            Ok(runtime) => {
                runtime.spawn(write_events(client, limiter, pending));
            }
            Err(_) => tracing::error!("No tokio runtime: events are not written to the API server"),
        }
        CoreEventRecorder { node, local, correlator: Arc::default(), queue, dropped: Arc::default() }
    }

    /// Events dropped so far because too many writes were pending.
    pub fn dropped(&self) -> u64 {
        self.dropped.load(Ordering::Relaxed)
    }
}

impl EventRecorder for CoreEventRecorder {
    fn record(&self, object: &ObjectReference, event_type: EventType, reason: &str, message: &str) {
        self.local.record(object, event_type, reason, message);
        let now = Time(self.local.now());
        let correlated = match self.correlator.lock() {
            Ok(mut correlator) => {
                correlator.correlate(object, event_type.as_str(), reason, message, Instant::now(), &now)
            }
            Err(_) => return,
        };
        let Some(correlated) = correlated else {
            tracing::debug!(
                pod = %probelet_actors::format::pod_key(
                    object.namespace.as_deref().unwrap_or_default(),
                    object.name.as_deref().unwrap_or_default()
                ),
                reason,
                "Event dropped: too many events about this object"
            );
            return;
        };
        let event = CoreEvent {
            metadata: ObjectMeta {
                name: Some(correlated.name),
                namespace: Some(object.namespace.clone().unwrap_or_else(|| "default".to_owned())),
                ..Default::default()
            },
            involved_object: object.clone(),
            reason: Some(reason.to_owned()),
            message: Some(correlated.message),
            type_: Some(event_type.as_str().to_owned()),
            count: Some(correlated.count),
            first_timestamp: Some(correlated.first_timestamp),
            last_timestamp: Some(now),
            source: Some(EventSource {
                component: Some(EVENT_COMPONENT.to_owned()),
                host: Some(self.node.clone()),
            }),
            reporting_component: Some(EVENT_COMPONENT.to_owned()),
            reporting_instance: Some(self.node.clone()),
            ..Default::default()
        };
        let pending = PendingEvent { event, update_existing: correlated.update_existing };
        if let Err(mpsc::error::TrySendError::Full(_)) = self.queue.try_send(pending) {
            let dropped = self.dropped.fetch_add(1, Ordering::Relaxed) + 1;
            tracing::debug!(dropped, "Event dropped: too many event writes pending");
        }
    }
}

/// The writer task: one event at a time, until every recorder is gone.
async fn write_events(client: kube::Client, limiter: RateLimiter, mut pending: mpsc::Receiver<PendingEvent>) {
    while let Some(next) = pending.recv().await {
        if let Err(err) = write_event(&client, &limiter, next).await {
            tracing::warn!(error = %err, "Failed to write an event");
        }
    }
}

/// client-go's `recordEvent`: patch a repeat, and create the Event when it is new or the
/// repeat's Event is gone (the API server removes Events after their TTL, an hour by default).
async fn write_event(
    client: &kube::Client,
    limiter: &RateLimiter,
    pending: PendingEvent,
) -> Result<(), kube::Error> {
    let PendingEvent { event, update_existing } = pending;
    let namespace = event.metadata.namespace.clone().unwrap_or_default();
    let name = event.metadata.name.clone().unwrap_or_default();
    let api: Api<CoreEvent> = Api::namespaced(client.clone(), &namespace);
    if update_existing {
        limiter.acquire().await;
        let patch = serde_json::json!({
            "count": event.count,
            "lastTimestamp": event.last_timestamp,
            "message": event.message,
        });
        match api.patch(&name, &PatchParams::default(), &Patch::Merge(patch)).await {
            Ok(_) => return Ok(()),
            Err(kube::Error::Api(status)) if status.code == 404 => {}
            Err(err) => return Err(err),
        }
    }
    limiter.acquire().await;
    api.create(&PostParams::default(), &event).await.map(|_| ())
}
