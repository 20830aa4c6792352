//! A container's output, forwarded into the agent's log line by line within a byte budget, and
//! read no faster than a bounded rate: a container that writes without pause costs the agent a
//! bounded share of a core, not a whole one (docs/reliability.md, "A container that writes
//! without pause").

use std::time::Duration;

use tokio::io::{AsyncRead, AsyncReadExt};
use tokio::time::Instant;

/// Longer output lines are logged in pieces of this size, so a process printing without
/// newlines cannot grow the agent's memory.
const MAX_LOG_LINE: usize = 16 * 1024;

/// Output logged per second and container stream, in bytes. The kubelet's container logs go to
/// files of their own (10 MiB, 5 rotated); here they go to the agent's log, so a container
/// printing as fast as it can (1.3 GB in 12 s) would fill that log and take the agent's CPU.
/// Beyond this rate lines are read and dropped, and how many is logged once a second.
pub(super) const LOG_BYTES_PER_SECOND: u64 = 64 * 1024;

/// What a logged line costs beyond its own bytes: the record around it (time, level, target,
/// pod and container), so that empty lines are not free.
pub(super) const LOG_LINE_COST: u64 = 128;

/// Output read per second and container stream, in bytes, at most (after a first second's
/// worth at once). Beyond it the agent stops reading until the rate allows another
/// [`READ_CHUNK`], and the container blocks on a write once its pipe is full, as under Docker's
/// default (`blocking`) log mode. Reading flat out cost the agent a whole core for one `yes`;
/// at this rate it costs what a container logging 100 lines a second does, under 1 % of a core
/// (docs/reliability.md, "A container that writes without pause", says why this design). Sixteen
/// times what is logged, so a container that merely writes more than can be logged is not
/// slowed down: its lines beyond [`LOG_BYTES_PER_SECOND`] are dropped and counted, as before.
pub(super) const READ_BYTES_PER_SECOND: u64 = 1024 * 1024;

/// The most one read takes; reading paused by the rate resumes once this much is allowed, so a
/// container writing flat out wakes the agent about 64 times a second per stream.
const READ_CHUNK: usize = 16 * 1024;

/// Logs a process's output line by line as it comes: a container writing at any rate up to
/// [`READ_BYTES_PER_SECOND`] never finds its pipe full.
pub(super) async fn forward_output(pipe: impl AsyncRead + Unpin, pod: String, container: String) {
    forward(pipe, |output| match output {
        Output::Line(line) => log_line(&pod, &container, line),
        Output::Dropped(lines) => log_dropped(&pod, &container, lines),
    })
    .await;
}

/// What a stream's bytes come to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Output<'a> {
    /// A line (or a piece of a long one) to log, its newline included.
    Line(&'a [u8]),
    /// How many lines were dropped since the last count.
    Dropped(u64),
}

/// Reads `pipe` to its end at most at [`READ_BYTES_PER_SECOND`], cut into lines for `out`.
async fn forward(mut pipe: impl AsyncRead + Unpin, mut out: impl FnMut(Output<'_>)) {
    let start = Instant::now();
    let mut lines = Lines::new(MAX_LOG_LINE, start);
    let mut pace = Bucket::full(READ_BYTES_PER_SECOND, READ_BYTES_PER_SECOND, start);
    // Filled by reads without being zeroed first: a quiet container touches only what it writes.
    let mut chunk = Vec::with_capacity(READ_CHUNK);
    loop {
        let chunk_size = READ_CHUNK as u64;
        if pace.available(Instant::now()) < chunk_size {
            tokio::time::sleep_until(pace.when_available(chunk_size)).await;
            continue;
        }
        chunk.clear();
        match (&mut pipe).take(chunk_size).read_buf(&mut chunk).await {
            Ok(0) | Err(_) => break,
            Ok(read) => {
                pace.spend(read as u64);
                lines.take(&chunk, Instant::now(), &mut out);
            }
        }
    }
    lines.finish(Instant::now(), &mut out);
}

/// A stream cut into lines of at most `max` bytes (a longer one in pieces), each logged if the
/// [`LogBudget`] admits it and counted as dropped if not.
#[derive(Debug)]
struct Lines {
    max: usize,
    /// The line read so far, shorter than `max` and without its newline yet.
    line: Vec<u8>,
    budget: LogBudget,
}

impl Lines {
    fn new(max: usize, now: Instant) -> Self {
        Lines { max, line: Vec::new(), budget: LogBudget::new(now) }
    }

    /// `bytes`, read at `now`: each line that ends in them goes to `out` or is counted, and the
    /// count since the last one is told (at most once a second).
    fn take(&mut self, mut bytes: &[u8], now: Instant, out: &mut impl FnMut(Output<'_>)) {
        while !bytes.is_empty() {
            if self.line.is_empty() && self.budget.exhausted(now) {
                // Nothing refills within one `now`: every line that ends in these bytes would be
                // dropped, so they are counted without being cut out one by one (a `yes` is a
                // line every two bytes).
                let (ended, unfinished) = count_lines(bytes, self.max);
                self.budget.drop_lines(ended);
                self.line.extend_from_slice(unfinished);
                break;
            }
            let room = (self.max - self.line.len()).min(bytes.len());
            let (taken, ends) = match bytes[..room].iter().position(|&b| b == b'\n') {
                Some(at) => (at + 1, true),
                None => (room, self.line.len() + room == self.max),
            };
            self.line.extend_from_slice(&bytes[..taken]);
            bytes = &bytes[taken..];
            if ends {
                self.emit(now, out);
            }
        }
        if let Some(dropped) = self.budget.report(now) {
            out(Output::Dropped(dropped));
        }
    }

    /// The end of the stream: the unfinished last line, and the count not told yet.
    fn finish(&mut self, now: Instant, out: &mut impl FnMut(Output<'_>)) {
        if !self.line.is_empty() {
            self.emit(now, out);
        }
        if let Some(dropped) = self.budget.report_all() {
            out(Output::Dropped(dropped));
        }
    }

    fn emit(&mut self, now: Instant, out: &mut impl FnMut(Output<'_>)) {
        if self.budget.admit(self.line.len(), now) {
            out(Output::Line(&self.line));
        }
        self.line.clear();
    }
}

/// How many lines end in `bytes` when they are cut as [`Lines::take`] cuts them from an empty
/// line (at each newline, and after every `max` bytes without one), and the bytes of the
/// unfinished last one (fewer than `max`).
fn count_lines(bytes: &[u8], max: usize) -> (u64, &[u8]) {
    let mut ended = 0u64;
    let mut start = 0;
    for (at, _) in bytes.iter().enumerate().filter(|(_, b)| **b == b'\n') {
        ended += (at + 1 - start).div_ceil(max) as u64;
        start = at + 1;
    }
    let tail = &bytes[start..];
    let whole = tail.len() / max;
    (ended + whole as u64, &tail[whole * max..])
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

/// `rate` bytes a second, up to `capacity` held at once, credited continuously.
#[derive(Debug)]
struct Bucket {
    rate: u64,
    capacity: u64,
    allowance: u64,
    /// Up to when the time has been credited.
    refilled: Instant,
}

impl Bucket {
    fn full(rate: u64, capacity: u64, now: Instant) -> Self {
        Bucket { rate, capacity, allowance: capacity, refilled: now }
    }

    /// Credits the whole bytes the time since the last refill is worth.
    fn refill(&mut self, now: Instant) {
        let nanos = now.saturating_duration_since(self.refilled).as_nanos();
        let rate = u128::from(self.rate);
        let refill = nanos.saturating_mul(rate) / 1_000_000_000;
        if refill > 0 {
            let refill_bytes = u64::try_from(refill).unwrap_or(u64::MAX);
            self.allowance = self.allowance.saturating_add(refill_bytes).min(self.capacity);
            // Forward by the time the whole bytes credited took (rounded up, never past now),
            // not to now: the fraction of a byte left over is kept for the next refill.
            let credited = (refill * 1_000_000_000).div_ceil(rate);
            self.refilled += Duration::from_nanos(u64::try_from(credited).unwrap_or(u64::MAX));
        }
    }

    /// What may be spent at `now`.
    fn available(&mut self, now: Instant) -> u64 {
        self.refill(now);
        self.allowance
    }

    /// Spends `bytes` if that much is left at `now`.
    fn take(&mut self, bytes: u64, now: Instant) -> bool {
        if bytes <= self.available(now) {
            self.allowance -= bytes;
            return true;
        }
        false
    }

    /// Spends `bytes`, or all there is.
    fn spend(&mut self, bytes: u64) {
        self.allowance = self.allowance.saturating_sub(bytes);
    }

    /// The first time `bytes` (at most the capacity) are available, as of the last refill.
    fn when_available(&self, bytes: u64) -> Instant {
        let missing = bytes.min(self.capacity).saturating_sub(self.allowance);
        let nanos = (u128::from(missing) * 1_000_000_000).div_ceil(u128::from(self.rate));
        self.refilled + Duration::from_nanos(u64::try_from(nanos).unwrap_or(u64::MAX))
    }
}

/// A stream's [`LOG_BYTES_PER_SECOND`]: a bucket of that many bytes, refilled continuously, and
/// the lines it did not admit.
#[derive(Debug)]
struct LogBudget {
    bucket: Bucket,
    dropped: u64,
    reported: Instant,
}

impl LogBudget {
    fn new(now: Instant) -> Self {
        LogBudget {
            bucket: Bucket::full(LOG_BYTES_PER_SECOND, LOG_BYTES_PER_SECOND, now),
            dropped: 0,
            reported: now,
        }
    }

    /// Whether a line of `len` bytes is logged now; one that is not is counted. A line costs
    /// its bytes and [`LOG_LINE_COST`] more: each is a whole record in the log.
    fn admit(&mut self, len: usize, now: Instant) -> bool {
        let cost = (len as u64).saturating_add(LOG_LINE_COST);
        if self.bucket.take(cost, now) {
            return true;
        }
        self.dropped += 1;
        false
    }

    /// Whether not even the shortest line (one byte) would be admitted at `now`.
    fn exhausted(&mut self, now: Instant) -> bool {
        self.bucket.available(now) < 1 + LOG_LINE_COST
    }

    /// Counts `lines` not admitted.
    fn drop_lines(&mut self, lines: u64) {
        self.dropped += lines;
    }

    /// The lines dropped since the last report, at most once a second.
    fn report(&mut self, now: Instant) -> Option<u64> {
        if self.dropped == 0 || now.saturating_duration_since(self.reported) < Duration::from_secs(1) {
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
    use proptest::prelude::*;
    use tokio::io::AsyncWriteExt;

    /// A container printing flat out gets its rate's worth of lines logged, the rest counted
    /// and told once a second; a quiet one loses nothing.
    #[test]
    fn output_beyond_the_rate_is_counted_not_logged() {
        let start = Instant::now();
        let mut budget = LogBudget::new(start);
        let line = 1024 - LOG_LINE_COST as usize;
        let logged = (0..1000).filter(|_| budget.admit(line, start)).count() as u64;
        assert_eq!(logged, LOG_BYTES_PER_SECOND / 1024, "a second's worth at once, records included");
        assert_eq!(budget.report(start), None, "told at most once a second");
        let later = start + Duration::from_millis(1500);
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
            let now = start + Duration::from_micros(step * 20);
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
            let now = start + Duration::from_secs(second);
            assert!((0..10).all(|_| quiet.admit(100, now)), "10 short lines a second all logged");
        }
        assert_eq!(quiet.report_all(), None);
    }

    /// What [`forward`] gave, owned.
    #[derive(Debug, Clone, PartialEq, Eq)]
    enum Seen {
        Line(Vec<u8>),
        Dropped(u64),
    }

    impl Seen {
        fn of(output: Output<'_>) -> Seen {
            match output {
                Output::Line(line) => Seen::Line(line.to_vec()),
                Output::Dropped(lines) => Seen::Dropped(lines),
            }
        }
    }

    fn dropped(seen: &[(Instant, Seen)]) -> u64 {
        seen.iter().map(|(_, s)| if let Seen::Dropped(n) = s { *n } else { 0 }).sum()
    }

    fn logged(seen: &[(Instant, Seen)]) -> Vec<&[u8]> {
        seen.iter()
            .filter_map(|(_, s)| if let Seen::Line(l) = s { Some(l.as_slice()) } else { None })
            .collect()
    }

    /// [`forward`] on the reading end of a 64 KiB pipe whose writing end `write` gets; what it
    /// gave and when, and when the stream ended.
    async fn forwarded<F>(write: impl FnOnce(tokio::io::DuplexStream) -> F) -> (Vec<(Instant, Seen)>, Instant)
    where
        F: std::future::Future<Output = ()> + Send + 'static,
    {
        let (writer, reader) = tokio::io::duplex(64 * 1024);
        let writing = tokio::spawn(write(writer));
        let mut seen = Vec::new();
        forward(reader, |output| seen.push((Instant::now(), Seen::of(output)))).await;
        writing.await.expect("the writer finishes");
        (seen, Instant::now())
    }

    /// A container writing `yes` flat out is read at [`READ_BYTES_PER_SECOND`], not faster: its
    /// pipe stays full and it waits (here the writer task), so reading it costs the agent a
    /// bounded rate. Its lines beyond the log budget are counted, told at most once a second,
    /// and once it stops flooding, reading goes on at once and its next line is logged.
    #[tokio::test(start_paused = true)]
    async fn a_flooding_stream_is_read_at_a_bounded_rate_and_what_is_not_logged_is_counted() {
        const FLOOD: usize = 8 * 1024 * 1024;
        let start = Instant::now();
        let (seen, end) = forwarded(|mut pipe| async move {
            let block = b"y\n".repeat(8 * 1024);
            for _ in 0..FLOOD / block.len() {
                pipe.write_all(&block).await.expect("read to the end");
            }
            tokio::time::sleep(Duration::from_secs(3)).await;
            pipe.write_all(b"after the flood\n").await.expect("read to the end");
        })
        .await;

        // Reading the flood took as long as the rate says: all but the first second's worth at
        // the rate, and not a chunk's time longer (the reader does not stall).
        let flood_read = seen.iter().map(|(at, _)| *at).filter(|at| *at < end).max().expect("output");
        let at_rate = Duration::from_secs_f64(
            (FLOOD as u64 - READ_BYTES_PER_SECOND) as f64 / READ_BYTES_PER_SECOND as f64,
        );
        let took = flood_read - start;
        assert!(took + Duration::from_millis(20) >= at_rate, "read in {took:?}, at the rate {at_rate:?}");

        let lines = logged(&seen);
        let (last, flood) = lines.split_last().expect("lines logged");
        assert_eq!(*last, b"after the flood\n", "the line after the flood is logged");
        assert!(flood.iter().all(|l| *l == b"y\n"), "lines logged whole");
        assert_eq!(flood.len() as u64 + dropped(&seen), (FLOOD / 2) as u64, "each line logged or counted");
        // The log budget: its first second and the rate over the time it took, records included.
        let seconds = (end - start).as_secs() + 1;
        assert!(
            (lines.len() as u64) * (2 + LOG_LINE_COST) <= LOG_BYTES_PER_SECOND * (seconds + 1),
            "{} lines logged in {seconds} s",
            lines.len()
        );
        // Told once a second at most, the first time a second after the start.
        let reports: Vec<Instant> =
            seen.iter().filter(|(_, s)| matches!(s, Seen::Dropped(_))).map(|(at, _)| *at).collect();
        assert!(reports.len() >= 2, "{reports:?}");
        assert!(reports[0] - start >= Duration::from_secs(1));
        for pair in reports.windows(2) {
            assert!(pair[1] - pair[0] >= Duration::from_secs(1), "{reports:?}");
        }
        // The count before the line after the flood: it was told when that line came, at the
        // latest.
        let last_report = seen.iter().rposition(|(_, s)| matches!(s, Seen::Dropped(_))).expect("a report");
        let after = seen.iter().rposition(|(_, s)| matches!(s, Seen::Line(_))).expect("a line");
        assert!(last_report < after, "every drop told by the time the flood is over");
    }

    /// A container writing a line every 10 ms, or 512 KiB a second (more than is logged, less
    /// than is read), never waits on its pipe; the first has every line logged, in order, the
    /// second has its lines beyond the budget counted.
    #[tokio::test(start_paused = true)]
    async fn a_stream_below_the_read_rate_never_waits_and_is_logged_as_before() {
        for (line_len, every, lines) in
            [(60usize, Duration::from_millis(10), 1_000usize), (512, Duration::from_millis(1), 5_000)]
        {
            let (seen, _) = forwarded(move |mut pipe| async move {
                for i in 0..lines {
                    let mut line = format!("{i:08} ").into_bytes();
                    line.resize(line_len - 1, b'.');
                    line.push(b'\n');
                    let before = Instant::now();
                    pipe.write_all(&line).await.expect("read to the end");
                    assert_eq!(Instant::now(), before, "line {i} of {line_len} bytes waited for room");
                    tokio::time::sleep(every).await;
                }
            })
            .await;
            let got = logged(&seen);
            assert!(got.iter().all(|l| l.len() == line_len), "whole lines");
            assert!(got.windows(2).all(|w| w[0] < w[1]), "in order");
            assert_eq!(got.len() as u64 + dropped(&seen), lines as u64);
            if line_len == 60 {
                assert_eq!(got.len(), lines, "a normal container's output is all logged");
            } else {
                assert!(dropped(&seen) > 0, "512 KiB/s is more than is logged");
            }
        }
    }

    /// Output without newlines (`cat /dev/zero`) is cut into [`MAX_LOG_LINE`] pieces, logged or
    /// counted like lines, and read at the bounded rate too.
    #[tokio::test(start_paused = true)]
    async fn output_without_newlines_is_cut_into_pieces_and_read_at_the_bounded_rate() {
        const FLOOD: usize = 4 * 1024 * 1024;
        let start = Instant::now();
        let (seen, end) = forwarded(|mut pipe| async move {
            let block = vec![0u8; 64 * 1024];
            for _ in 0..FLOOD / block.len() {
                pipe.write_all(&block).await.expect("read to the end");
            }
        })
        .await;
        let pieces = logged(&seen);
        assert!(!pieces.is_empty() && pieces.iter().all(|p| p.len() == MAX_LOG_LINE));
        assert_eq!(pieces.len() as u64 + dropped(&seen), (FLOOD / MAX_LOG_LINE) as u64);
        let at_rate = (FLOOD as u64 - READ_BYTES_PER_SECOND) / READ_BYTES_PER_SECOND;
        assert!((end - start).as_secs() + 1 >= at_rate, "read in {:?}", end - start);
    }

    /// The lines of `chunks` (bytes, and how long after the previous chunk they are read) cut
    /// and admitted one at a time: what [`Lines`] must give, counting in bulk or not.
    fn one_line_at_a_time(chunks: &[(Vec<u8>, u64)], max: usize) -> (Vec<Vec<u8>>, u64) {
        let mut now = Instant::now();
        let mut budget = LogBudget::new(now);
        let (mut logged, mut line) = (Vec::new(), Vec::new());
        for (bytes, after_ms) in chunks {
            now += Duration::from_millis(*after_ms);
            for &byte in bytes {
                line.push(byte);
                if byte == b'\n' || line.len() == max {
                    if budget.admit(line.len(), now) {
                        logged.push(line.clone());
                    }
                    line.clear();
                }
            }
        }
        if !line.is_empty() && budget.admit(line.len(), now) {
            logged.push(line);
        }
        (logged, budget.report_all().unwrap_or(0))
    }

    proptest! {
        #![proptest_config(ProptestConfig { cases: 64, ..ProptestConfig::default() })]

        /// Counting the lines of an exhausted budget in bulk drops exactly the lines that
        /// admitting them one by one would, and logs the same lines.
        #[test]
        fn counting_in_bulk_is_cutting_one_line_at_a_time(
            chunks in proptest::collection::vec(
                (proptest::collection::vec(prop_oneof![4 => Just(b'y'), 1 => Just(b'\n')], 0..2_000), 0u64..300),
                0..16,
            ),
            max in 1usize..12,
        ) {
            let (want_logged, want_dropped) = one_line_at_a_time(&chunks, max);
            let mut now = Instant::now();
            let mut lines = Lines::new(max, now);
            let mut seen = Vec::new();
            for (bytes, after_ms) in &chunks {
                now += Duration::from_millis(*after_ms);
                lines.take(bytes, now, &mut |o| seen.push((now, Seen::of(o))));
            }
            lines.finish(now, &mut |o| seen.push((now, Seen::of(o))));
            prop_assert_eq!(logged(&seen), want_logged.iter().map(Vec::as_slice).collect::<Vec<_>>());
            prop_assert_eq!(dropped(&seen), want_dropped);
        }
    }

    #[test]
    fn lines_are_counted_as_they_are_cut() {
        assert_eq!(count_lines(b"", 4), (0, &b""[..]));
        assert_eq!(count_lines(b"y\ny\n", 4), (2, &b""[..]));
        assert_eq!(count_lines(b"abcd\n", 4), (2, &b""[..]), "four bytes, then the newline alone");
        assert_eq!(count_lines(b"abc\nabcdefghij", 4), (3, &b"ij"[..]));
        assert_eq!(count_lines(b"abcdefgh", 4), (2, &b""[..]));
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

    /// The bucket's next chunk is due when its bytes have been credited, not earlier.
    #[test]
    fn a_bucket_says_when_it_has_enough() {
        let start = Instant::now();
        let mut bucket = Bucket::full(1000, 1000, start);
        bucket.spend(1000);
        let due = bucket.when_available(10);
        assert_eq!(due - start, Duration::from_millis(10));
        assert_eq!(bucket.available(due - Duration::from_nanos(1)), 9);
        assert_eq!(bucket.available(due), 10);
        assert_eq!(bucket.when_available(5000) - start, Duration::from_secs(1), "never more than it holds");
    }
}
