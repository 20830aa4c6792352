//! What tests that read log lines need from tracing, for every crate of the workspace (enabled by
//! the `test-util` feature; not part of the library's interface).
//!
//! tracing decides once per call site, for the whole process, whether anyone is interested in it,
//! and while at most one subscriber is registered it asks the subscriber of the thread that
//! reaches the call site first. A test that captures its own thread's lines (a thread-local
//! subscriber) runs beside tests with none: when one of those reaches a call site first, the site
//! is marked "never" and the capturing test sees nothing (a test of a log line that failed once
//! in a hundred full runs). [`keep_call_sites_interested`] registers two subscribers that are
//! interested in every call site and take no line, for the rest of the process: with more than
//! one registered, tracing asks all of them and gets "sometimes", so each line asks the
//! subscriber of the thread that logs it.

use std::sync::OnceLock;

use tracing::span::{Attributes, Id, Record};
use tracing::subscriber::Interest;
use tracing::{Dispatch, Event, Metadata, Subscriber};

/// Interested in every call site, enabled for none.
struct Anchor;

impl Subscriber for Anchor {
    fn register_callsite(&self, _: &'static Metadata<'static>) -> Interest {
        Interest::sometimes()
    }
    fn enabled(&self, _: &Metadata<'_>) -> bool {
        false
    }
    fn new_span(&self, _: &Attributes<'_>) -> Id {
        Id::from_u64(1)
    }
    fn record(&self, _: &Id, _: &Record<'_>) {}
    fn record_follows_from(&self, _: &Id, _: &Id) {}
    fn event(&self, _: &Event<'_>) {}
    fn enter(&self, _: &Id) {}
    fn exit(&self, _: &Id) {}
}

/// Call before a test sets a subscriber of its own thread (`set_default`, `with_default`). Two
/// anchors, not one: with one, a call site reached between its registration and the test's
/// subscriber's would still be decided by the thread that reached it.
pub fn keep_call_sites_interested() {
    static ANCHORS: OnceLock<[Dispatch; 2]> = OnceLock::new();
    ANCHORS.get_or_init(|| [Dispatch::new(Anchor), Dispatch::new(Anchor)]);
}

#[cfg(test)]
mod tests {
    fn logs_a_line() {
        tracing::info!("a line only this test logs");
    }

    /// A call site first reached on a thread without a subscriber is still logged on the
    /// capturing thread. Without the anchors (`Captured::start` registers them) this fails
    /// whenever the capture is the only subscriber registered at that moment: the other thread,
    /// reaching the site first, decides it for all.
    #[test]
    fn a_call_site_reached_first_elsewhere_is_still_captured() {
        let (captured, _guard) = crate::test_log::Captured::start();
        std::thread::spawn(logs_a_line).join().unwrap();
        logs_a_line();
        assert_eq!(captured.messages(), ["a line only this test logs"]);
    }
}
