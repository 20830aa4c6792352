//! How the agent's text log writes an event's message and fields: one event, one line,
//! whatever a pod put in them.
//!
//! Probe output, response bodies and event messages come from the pods, and they reach the log
//! (`Readiness probe failed: <body>` at `-v`, an exec probe's output at debug). tracing's
//! default field formatter writes a message and a `%`-field as they are, so a newline in a
//! probe's output started a new line that a reader or a log shipper took for one of the
//! agent's own (a forged `WARN` line, say). The kubelet's klog quotes such values; here every
//! control character is written as its escape (`\n`, `\u{1b}`), the rest as tracing writes it.
//! The JSON format escapes them already.

use std::fmt;

pub mod queue;

use tracing::field::{Field, Visit};
use tracing_subscriber::field::RecordFields;
use tracing_subscriber::fmt::FormatFields;
use tracing_subscriber::fmt::format::Writer;

/// The text log's field formatter: tracing's layout (the message first, then `name=value`
/// separated by spaces, names in italics on a terminal), with control characters escaped.
pub fn escaped_fields() -> EscapedFields {
    EscapedFields
}

/// See [`escaped_fields`].
#[derive(Debug, Clone, Copy, Default)]
pub struct EscapedFields;

impl<'w> FormatFields<'w> for EscapedFields {
    fn format_fields<R: RecordFields>(&self, writer: Writer<'w>, fields: R) -> fmt::Result {
        let mut visitor = Visitor { writer, first: true, result: Ok(()) };
        fields.record(&mut visitor);
        visitor.result
    }
}

struct Visitor<'w> {
    writer: Writer<'w>,
    /// Nothing written yet: no separator before the next field.
    first: bool,
    result: fmt::Result,
}

impl Visit for Visitor<'_> {
    fn record_debug(&mut self, field: &Field, value: &dyn fmt::Debug) {
        if self.result.is_err() {
            return;
        }
        self.result = self.write_field(field, value);
    }
}

impl Visitor<'_> {
    fn write_field(&mut self, field: &Field, value: &dyn fmt::Debug) -> fmt::Result {
        let name = field.name();
        // Records that came through the `log` crate carry their origin as `log.*` fields,
        // which tracing's own formatter leaves out (it shows them as the event's target).
        if name.starts_with("log.") {
            return Ok(());
        }
        if !std::mem::take(&mut self.first) {
            self.writer.write_char(' ')?;
        }
        if name != "message" {
            let name = name.strip_prefix("r#").unwrap_or(name);
            if self.writer.has_ansi_escapes() {
                write!(self.writer, "\x1b[3m{name}\x1b[0m\x1b[2m=\x1b[0m")?;
            } else {
                write!(self.writer, "{name}=")?;
            }
        }
        // Written into a string that returns its `Debug` error, not `format!`, which panics on
        // one: a field whose `Debug` fails is its error, as tracing's own formatter has it.
        let mut text = String::new();
        fmt::Write::write_fmt(&mut text, format_args!("{value:?}"))?;
        write_escaped(&mut self.writer, &text)
    }
}

/// Whether a character could end a line or drive a terminal: the control characters, and the
/// Unicode line and paragraph separators some viewers break lines at.
fn needs_escape(c: char) -> bool {
    c.is_control() || matches!(c, '\u{2028}' | '\u{2029}')
}

/// `text` with each control character and line separator as its Rust escape (`\n`, `\u{1b}`),
/// for a line of its own that a name from a user (a manifest's file name) cannot break or
/// recolour.
pub fn escape_controls(text: &str) -> std::borrow::Cow<'_, str> {
    if !text.contains(needs_escape) {
        return std::borrow::Cow::Borrowed(text);
    }
    let mut escaped = String::with_capacity(text.len() + 8);
    let _ = write_escaped(&mut escaped, text);
    std::borrow::Cow::Owned(escaped)
}

/// Writes `text` with each character that [`needs_escape`] as its Rust escape.
fn write_escaped(writer: &mut impl fmt::Write, text: &str) -> fmt::Result {
    let mut rest = text;
    while let Some(at) = rest.find(needs_escape) {
        writer.write_str(&rest[..at])?;
        let c = rest[at..].chars().next().unwrap_or_default();
        write!(writer, "{}", c.escape_default())?;
        rest = &rest[at + c.len_utf8()..];
    }
    writer.write_str(rest)
}

#[cfg(test)]
mod tests {
    use std::io;
    use std::sync::{Arc, Mutex};

    use super::*;

    /// A writer the test reads back.
    #[derive(Clone, Default)]
    struct Captured(Arc<Mutex<Vec<u8>>>);

    impl io::Write for Captured {
        fn write(&mut self, bytes: &[u8]) -> io::Result<usize> {
            self.0.lock().map_err(|_| io::Error::other("poisoned"))?.extend_from_slice(bytes);
            Ok(bytes.len())
        }
        fn flush(&mut self) -> io::Result<()> {
            Ok(())
        }
    }

    fn logged(ansi: bool, event: impl FnOnce()) -> String {
        let captured = Captured::default();
        let writer = captured.clone();
        let subscriber = tracing_subscriber::fmt()
            .with_writer(move || writer.clone())
            .with_ansi(ansi)
            .without_time()
            .with_target(false)
            .with_level(false)
            .fmt_fields(escaped_fields())
            .finish();
        probelet_actors::test_util::keep_call_sites_interested();
        tracing::subscriber::with_default(subscriber, event);
        let bytes = captured.0.lock().expect("not poisoned").clone();
        String::from_utf8(bytes).expect("utf-8")
    }

    /// A probe's output that holds a line of its own does not become a line of the log.
    #[test]
    fn a_newline_in_a_message_or_field_stays_on_the_line() {
        let forged = "x\n2099-01-01T00:00:00.000000Z  WARN probelet::agent: FORGED LINE";
        let line = logged(false, || {
            tracing::warn!(pod = "default/web", output = %forged, "Readiness probe failed: {forged}");
        });
        assert_eq!(line.matches('\n').count(), 1, "{line:?}");
        assert_eq!(
            line,
            "Readiness probe failed: x\\n2099-01-01T00:00:00.000000Z  WARN probelet::agent: FORGED LINE \
             pod=\"default/web\" output=x\\n2099-01-01T00:00:00.000000Z  WARN probelet::agent: FORGED LINE\n"
        );
    }

    /// Terminal escapes in a pod's text are written as text, on a terminal too, while the
    /// field names keep tracing's italics there.
    #[test]
    fn escape_sequences_are_written_as_text() {
        let line = logged(true, || tracing::info!(reason = %"\x1b[31mred\x1b[0m\r", "tab\there"));
        assert!(line.contains("tab\\there"), "{line:?}");
        assert!(line.contains("\x1b[3mreason\x1b[0m\x1b[2m=\x1b[0m\\u{1b}[31mred\\u{1b}[0m\\r"), "{line:?}");
    }

    /// Records from the `log` crate have their `log.*` fields left out without a trace: no
    /// separator is written for them.
    #[test]
    fn left_out_fields_leave_no_spaces() {
        let line = logged(false, || tracing::info!(log.target = "rustls", log.line = 7, pod = "a", "hello"));
        assert_eq!(line, "hello pod=\"a\"\n");
        let line = logged(false, || tracing::info!(pod = "a", log.file = "x.rs", "hello"));
        assert_eq!(line, "hello pod=\"a\"\n");
    }

    /// A field whose `Debug` fails is that line's formatting error, as with tracing's own
    /// formatter, not a panic of the thread that logs (`format!` panics on it).
    #[test]
    fn a_field_that_cannot_be_written_is_no_panic() {
        struct Failing;
        impl fmt::Debug for Failing {
            fn fmt(&self, _: &mut fmt::Formatter<'_>) -> fmt::Result {
                Err(fmt::Error)
            }
        }
        let line = logged(false, || tracing::info!(field = ?Failing, "hello"));
        assert!(!line.contains("field="), "{line:?}");
    }

    #[test]
    fn escaping_keeps_other_text_as_it_is() {
        let mut out = String::new();
        write_escaped(&mut out, "Get \"http://a/é\": EOF\u{7f}\u{85}\u{2028}").expect("written");
        assert_eq!(out, "Get \"http://a/é\": EOF\\u{7f}\\u{85}\\u{2028}");
    }
}
