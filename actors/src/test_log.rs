//! The log lines a test's own thread writes, each as its level and message, so unit tests can
//! assert upstream's klog lines and the levels they map to (docs/architecture.md, "Log lines").

use std::sync::{Arc, Mutex};

use tracing::field::{Field, Visit};
use tracing::{Event, Level, Subscriber};
use tracing_subscriber::layer::{Context, Layer, SubscriberExt};

/// The lines logged on this thread while the guard [`Captured::start`] returned lives.
#[derive(Clone, Default)]
pub(crate) struct Captured(Arc<Mutex<Vec<(Level, String)>>>);

impl Captured {
    /// Captures every level on this thread until the guard is dropped.
    pub(crate) fn start() -> (Self, tracing::subscriber::DefaultGuard) {
        let captured = Captured::default();
        let subscriber = tracing_subscriber::registry().with(captured.clone());
        (captured, tracing::subscriber::set_default(subscriber))
    }

    /// The levels of the lines whose message is `message`, in order.
    pub(crate) fn levels_of(&self, message: &str) -> Vec<Level> {
        let lines = self.0.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        lines.iter().filter(|(_, m)| m == message).map(|(level, _)| *level).collect()
    }

    /// Every message captured, in order.
    pub(crate) fn messages(&self) -> Vec<String> {
        let lines = self.0.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        lines.iter().map(|(_, m)| m.clone()).collect()
    }
}

impl<S: Subscriber> Layer<S> for Captured {
    fn on_event(&self, event: &Event<'_>, _ctx: Context<'_, S>) {
        let mut message = Message::default();
        event.record(&mut message);
        let mut lines = self.0.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        lines.push((*event.metadata().level(), message.0));
    }
}

/// Reads an event's `message` field.
#[derive(Default)]
struct Message(String);

impl Visit for Message {
    fn record_debug(&mut self, field: &Field, value: &dyn std::fmt::Debug) {
        if field.name() == "message" {
            self.0 = format!("{value:?}");
        }
    }

    fn record_str(&mut self, field: &Field, value: &str) {
        if field.name() == "message" {
            value.clone_into(&mut self.0);
        }
    }
}
