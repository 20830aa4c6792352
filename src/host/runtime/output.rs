//! A container's output, forwarded into the agent's log line by line, within a byte budget.

use tokio::io::{AsyncBufReadExt, AsyncRead, BufReader};

/// Longer output lines are logged in pieces of this size, so a process printing without
/// newlines cannot grow the agent's memory.
const MAX_LOG_LINE: usize = 16 * 1024;

/// Logs a process's output line by line as it comes, so the pipe never fills up.
pub(super) async fn forward_output(pipe: impl AsyncRead + Unpin, pod: String, container: String) {
    let mut reader = BufReader::with_capacity(MAX_LOG_LINE, pipe);
    let mut line = Vec::new();
    let mut budget = LogBudget::new(tokio::time::Instant::now());
    let mut log = |line: &[u8]| {
        let now = tokio::time::Instant::now();
        if budget.admit(line.len(), now) {
            log_line(&pod, &container, line);
        }
        if let Some(dropped) = budget.report(now) {
            log_dropped(&pod, &container, dropped);
        }
    };
    loop {
        let (taken, complete) = match reader.fill_buf().await {
            Ok(buf) if !buf.is_empty() => {
                let (taken, complete) = match buf.iter().position(|&b| b == b'\n') {
                    Some(at) => (at + 1, true),
                    None => (buf.len(), false),
                };
                line.extend_from_slice(&buf[..taken]);
                (taken, complete)
            }
            _ => break,
        };
        reader.consume(taken);
        if complete || line.len() >= MAX_LOG_LINE {
            log(&line);
            line.clear();
        }
    }
    if !line.is_empty() {
        log(&line);
    }
    if let Some(dropped) = budget.report_all() {
        log_dropped(&pod, &container, dropped);
    }
}

/// The target of the records below: the module they came from before they moved here, so that
/// the log's lines read as before and its filters (`RUST_LOG=probelet::host::runtime::launch=warn`)
/// still apply.
const LOG_TARGET: &str = "probelet::host::runtime::launch";

fn log_dropped(pod: &str, container: &str, lines: u64) {
    tracing::warn!(
        target: LOG_TARGET,
        pod,
        container,
        lines,
        "container output over {} KiB/s: lines not logged",
        LOG_BYTES_PER_SECOND / 1024
    );
}

/// Output logged per second and container stream, in bytes. The kubelet's container logs go to
/// files of their own (10 MiB, 5 rotated); here they go to the agent's log, so a container
/// printing as fast as it can (1.3 GB in 12 s) would fill that log and take the agent's CPU.
/// Beyond this rate lines are read and dropped, and how many is logged once a second.
pub(super) const LOG_BYTES_PER_SECOND: u64 = 64 * 1024;

/// What a logged line costs beyond its own bytes: the record around it (time, level, target,
/// pod and container), so that empty lines are not free.
pub(super) const LOG_LINE_COST: u64 = 128;

/// A stream's [`LOG_BYTES_PER_SECOND`]: a bucket of that many bytes, refilled continuously.
#[derive(Debug)]
struct LogBudget {
    allowance: u64,
    refilled: tokio::time::Instant,
    dropped: u64,
    reported: tokio::time::Instant,
}

impl LogBudget {
    fn new(now: tokio::time::Instant) -> Self {
        LogBudget { allowance: LOG_BYTES_PER_SECOND, refilled: now, dropped: 0, reported: now }
    }

    /// Whether a line of `len` bytes is logged now; one that is not is counted. A line costs
    /// its bytes and [`LOG_LINE_COST`] more: each is a whole record in the log.
    fn admit(&mut self, len: usize, now: tokio::time::Instant) -> bool {
        let nanos = now.saturating_duration_since(self.refilled).as_nanos();
        let rate = u128::from(LOG_BYTES_PER_SECOND);
        let refill = nanos.saturating_mul(rate) / 1_000_000_000;
        if refill > 0 {
            let refill_bytes = u64::try_from(refill).unwrap_or(u64::MAX);
            self.allowance = self.allowance.saturating_add(refill_bytes).min(LOG_BYTES_PER_SECOND);
            // Forward by the time the whole bytes credited took (rounded up, never past now),
            // not to now: the fraction of a byte left over is kept for the next refill.
            let credited = (refill * 1_000_000_000).div_ceil(rate);
            self.refilled += std::time::Duration::from_nanos(u64::try_from(credited).unwrap_or(u64::MAX));
        }
        let len = (len as u64).saturating_add(LOG_LINE_COST);
        if len <= self.allowance {
            self.allowance -= len;
            return true;
        }
        self.dropped += 1;
        false
    }

    /// The lines dropped since the last report, at most once a second.
    fn report(&mut self, now: tokio::time::Instant) -> Option<u64> {
        if self.dropped == 0
            || now.saturating_duration_since(self.reported) < std::time::Duration::from_secs(1)
        {
            return None;
        }
        self.reported = now;
        self.report_all()
    }

    /// The lines dropped since the last report, whenever: at the end of the stream.
    fn report_all(&mut self) -> Option<u64> {
        (self.dropped > 0).then(|| std::mem::take(&mut self.dropped))
    }
}

pub(super) fn log_line(pod: &str, container: &str, line: &[u8]) {
    let text = String::from_utf8_lossy(line);
    let text = text.strip_suffix('\n').unwrap_or(&text);
    let text = text.strip_suffix('\r').unwrap_or(text);
    tracing::info!(target: LOG_TARGET, pod, container, "{text}");
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A container printing flat out gets its rate's worth of lines logged, the rest counted
    /// and told once a second; a quiet one loses nothing.
    #[test]
    fn output_beyond_the_rate_is_counted_not_logged() {
        let start = tokio::time::Instant::now();
        let mut budget = LogBudget::new(start);
        let line = 1024 - LOG_LINE_COST as usize;
        let logged = (0..1000).filter(|_| budget.admit(line, start)).count() as u64;
        assert_eq!(logged, LOG_BYTES_PER_SECOND / 1024, "a second's worth at once, records included");
        assert_eq!(budget.report(start), None, "told at most once a second");
        let later = start + std::time::Duration::from_millis(1500);
        assert!(budget.admit(line, later), "refilled meanwhile");
        assert_eq!(budget.report(later), Some(1000 - logged));
        assert_eq!(budget.report_all(), None);

        // Empty lines cost their records: no more of them than records fit.
        let mut empty = LogBudget::new(start);
        let logged = (0..10_000).filter(|_| empty.admit(1, start)).count() as u64;
        assert_eq!(logged, LOG_BYTES_PER_SECOND / (1 + LOG_LINE_COST));

        // Lines 20 µs apart get the whole rate over 10 s, fractions of a byte included: the
        // first second's bucket and ten seconds of refill, less at most one line.
        let mut steady = LogBudget::new(start);
        let mut bytes = 0u64;
        for step in 0..500_000u64 {
            let now = start + std::time::Duration::from_micros(step * 20);
            if steady.admit(100, now) {
                bytes += 100 + LOG_LINE_COST;
            }
        }
        let most = LOG_BYTES_PER_SECOND * 11;
        assert!(
            bytes <= most && bytes + 2 * (100 + LOG_LINE_COST) >= most,
            "{bytes} of {most} bytes in 10 s"
        );

        let mut quiet = LogBudget::new(start);
        for second in 0..100 {
            let now = start + std::time::Duration::from_secs(second);
            assert!((0..10).all(|_| quiet.admit(100, now)), "10 short lines a second all logged");
        }
        assert_eq!(quiet.report_all(), None);
    }

    /// The records read as they did before the forwarding moved to this module: the same
    /// target, level, text and fields.
    #[test]
    fn records_keep_their_target_level_and_text() {
        #[derive(Clone, Default)]
        struct Captured(std::sync::Arc<std::sync::Mutex<Vec<u8>>>);
        impl std::io::Write for Captured {
            fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
                self.0.lock().expect("not poisoned").extend_from_slice(bytes);
                Ok(bytes.len())
            }
            fn flush(&mut self) -> std::io::Result<()> {
                Ok(())
            }
        }
        let captured = Captured::default();
        let writer = captured.clone();
        let subscriber = tracing_subscriber::fmt()
            .with_writer(move || writer.clone())
            .with_ansi(false)
            .without_time()
            .finish();
        tracing::subscriber::with_default(subscriber, || {
            log_line("web_default(1)", "app", b"hello\r\n");
            log_dropped("web_default(1)", "app", 7);
        });
        let text = String::from_utf8(captured.0.lock().expect("not poisoned").clone()).expect("utf-8");
        assert_eq!(
            text,
            " INFO probelet::host::runtime::launch: hello pod=\"web_default(1)\" container=\"app\"\n \
             WARN probelet::host::runtime::launch: container output over 64 KiB/s: lines not logged \
             pod=\"web_default(1)\" container=\"app\" lines=7\n"
        );
    }
}
