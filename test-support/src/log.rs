//! A log a test reads: tracing's fmt layer, as the agent writes its lines but without colours,
//! timestamps or targets, into memory. Tests of log lines copied from upstream assert the
//! message, level and keys (docs/architecture.md, "Log lines").

use std::io::Write;
use std::sync::{Arc, Mutex};

use tracing::subscriber::DefaultGuard;

/// What a log subscriber wrote, shared with the subscriber that writes it.
#[derive(Clone, Default)]
pub struct CapturedLog(Arc<Mutex<Vec<u8>>>);

impl Write for CapturedLog {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(buf);
        Ok(buf.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

impl CapturedLog {
    fn subscriber(&self, level: tracing::Level) -> impl tracing::Subscriber + Send + Sync + use<> {
        let writer = self.clone();
        tracing_subscriber::fmt()
            .with_max_level(level)
            .with_ansi(false)
            .without_time()
            .with_target(false)
            .with_writer(move || writer.clone())
            .finish()
    }

    /// Captures what this thread logs at `level` and above while the guard lives: an actor
    /// that runs on the test's thread (actix's `System` of the test) is captured too.
    pub fn capture_at(&self, level: tracing::Level) -> DefaultGuard {
        probelet_actors::test_util::keep_call_sites_interested();
        tracing::subscriber::set_default(self.subscriber(level))
    }

    /// Captures what every thread of the process logs at `level` and above, for lines logged on
    /// the engine's own threads. Once per test binary: give such a test a binary of its own.
    pub fn capture_globally_at(&self, level: tracing::Level) {
        tracing::subscriber::set_global_default(self.subscriber(level)).unwrap();
    }

    /// The lines that contain `text`, trimmed: `LEVEL message key=value…`.
    pub fn lines_with(&self, text: &str) -> Vec<String> {
        let all = String::from_utf8_lossy(&self.0.lock().unwrap()).into_owned();
        all.lines().filter(|l| l.contains(text)).map(|l| l.trim().to_owned()).collect()
    }
}
