//! The log lines a test's own thread writes, each as its level, message and fields, so unit
//! tests can assert upstream's klog lines, the levels they map to and their keys
//! (docs/architecture.md, "Log lines").

use std::sync::{Arc, Mutex};

use tracing::field::{Field, Visit};
use tracing::{Event, Level, Subscriber};
use tracing_subscriber::layer::{Context, Layer, SubscriberExt};

/// One line: its level, its message, and its fields after the message as the agent's text log
/// writes them (`key=value`, a string value quoted).
#[derive(Clone)]
struct Line {
    level: Level,
    message: String,
    fields: Vec<String>,
}

/// The lines logged on this thread while the guard [`Captured::start`] returned lives.
#[derive(Clone, Default)]
pub(crate) struct Captured(Arc<Mutex<Vec<Line>>>);

impl Captured {
    /// Captures every level on this thread until the guard is dropped.
    pub(crate) fn start() -> (Self, tracing::subscriber::DefaultGuard) {
        crate::test_util::keep_call_sites_interested();
        let captured = Captured::default();
        let subscriber = tracing_subscriber::registry().with(captured.clone());
        (captured, tracing::subscriber::set_default(subscriber))
    }

    fn lines(&self) -> Vec<Line> {
        self.0.lock().unwrap_or_else(std::sync::PoisonError::into_inner).clone()
    }

    /// The levels of the lines whose message is `message`, in order.
    pub(crate) fn levels_of(&self, message: &str) -> Vec<Level> {
        self.lines().into_iter().filter(|l| l.message == message).map(|l| l.level).collect()
    }

    /// The fields of the lines whose message is `message`, in order, each line's joined as the
    /// text log writes them: `probeType="Readiness" pod="default/web"`.
    pub(crate) fn fields_of(&self, message: &str) -> Vec<String> {
        self.lines().into_iter().filter(|l| l.message == message).map(|l| l.fields.join(" ")).collect()
    }

    /// Every message captured, in order.
    pub(crate) fn messages(&self) -> Vec<String> {
        self.lines().into_iter().map(|l| l.message).collect()
    }
}

impl<S: Subscriber> Layer<S> for Captured {
    fn on_event(&self, event: &Event<'_>, _ctx: Context<'_, S>) {
        let mut line = Line { level: *event.metadata().level(), message: String::new(), fields: Vec::new() };
        event.record(&mut line);
        self.0.lock().unwrap_or_else(std::sync::PoisonError::into_inner).push(line);
    }
}

/// Reads an event's message and fields as tracing's text formatter writes them: a `&str` or
/// `String` value is written with `Debug`, quoted; a `%` value as it displays.
impl Visit for Line {
    fn record_debug(&mut self, field: &Field, value: &dyn std::fmt::Debug) {
        if field.name() == "message" {
            self.message = format!("{value:?}");
        } else {
            self.fields.push(format!("{}={value:?}", field.name()));
        }
    }

    fn record_str(&mut self, field: &Field, value: &str) {
        if field.name() == "message" {
            value.clone_into(&mut self.message);
        } else {
            self.fields.push(format!("{}={value:?}", field.name()));
        }
    }
}
