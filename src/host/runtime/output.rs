//! A container's output, forwarded into the agent's log line by line within a byte budget, and
//! read no faster than a bounded rate: a container that writes without pause costs the agent a
//! bounded share of a core, not a whole one (docs/reliability.md, "A container that writes
//! without pause").
//!
//! Two rates bound the reading: each stream's own ([`READ_BYTES_PER_SECOND`]), and the node's,
//! shared by every stream of every container of a runtime ([`NODE_READ_BYTES_PER_SECOND`], a
//! [`NodeReadBudget`]), so that many flooding containers together cost what one rate allows,
//! not a multiple of it. A stream reads a chunk only once both allow it.
//!
//! The node's budget pays for what is logged as well as for what is read: each record a stream
//! logs is charged as its line's bytes and [`LOG_LINE_COST`] more, as the stream's own log
//! budget counts it. With many floods the records had come to cost more than the reading (200
//! containers running `yes`: 11 % of a core for the records, 4.6 % for the reading), and each
//! flood added its own log budget's worth; charged to the node, a flood that logged waits that
//! much longer for its next turn, so the node's total stays bounded however many flood. The
//! node's budget only delays; lines are dropped (and counted) only by a stream's own log budget.
//!
//! The node's budget is shared fairly by taking turns rather than racing for tokens: a stream
//! reads first and then pays for what it read, by placing its bytes at the end of the node's
//! queue (a virtual clock that runs ahead of the real one by what has been read beyond the
//! rate); it reads next when the queue has been paid off up to its bytes. Each stream thus has
//! at most one charge in the queue, and waits at most for one charge of each stream reading at
//! the time: a chunk and the records logged of it, which the stream's log budget holds to what
//! it gained since its last turn, a second's worth at most. With `N` streams flooding, a turn
//! comes within `C = N × READ_CHUNK / (NODE_READ_BYTES_PER_SECOND − N × LOG_BYTES_PER_SECOND)`
//! while that is under a second (2.3 ms a stream at 20 floods, with 16 KiB, 8 MiB/s and
//! 64 KiB/s; a second at about 100), and within
//! `N × (READ_CHUNK + LOG_BYTES_PER_SECOND) / NODE_READ_BYTES_PER_SECOND` (10 ms a stream) however
//! many flood, however long; over any time `T` the node reads and logs at most
//! `T × NODE_READ_BYTES_PER_SECOND`, plus the first second's burst, plus one charge per stream.
//! Tokens raced for would go to whichever task the timer woke first, with no bound on how often
//! one stream loses (tried in the tests below: some floods got thirteen times what others did,
//! and a quiet container waited so long that its lines came in a burst beyond its log budget
//! and were dropped).
//!
//! A quiet stream pays after its read too: blocked on its pipe, it reads a line as soon as it
//! is written, unless it is still waiting for the turn its previous read took, which is the
//! longest a line waits (about half a turn on average when lines come faster than turns). It is
//! charged its few bytes, not a chunk, so it costs the floods next to nothing. Letting it wait
//! only a share of the turn, in proportion to what it read, would let its lines through at
//! once, but a stream could then read again before what it read was paid for, and the bound
//! above would no longer hold by construction.
//!
//! The queue is an [`Instant`] behind a std mutex, held for a few arithmetic operations and
//! never across an await.

use std::sync::{Arc, Mutex, PoisonError};
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

/// Output read and logged per second by all the streams of a runtime together, at most (after a
/// first second's worth at once, and a chunk and its records per stream; a logged line counts
/// as its bytes and [`LOG_LINE_COST`]): up to seven streams flooding at once each get their own
/// rate, more share this one. Reading at this rate cost the agent 4–5 % of a
/// core whether 20, 100 or 200 containers ran `yes` (their lines not logged), where each had
/// cost 0.3–0.4 % at its own rate. A normal container writes a few KiB a second; at this rate
/// 64 streams could each write as much as is logged ([`LOG_BYTES_PER_SECOND`], read and logged
/// both charged) without being slowed (docs/reliability.md, "A container that writes without
/// pause").
pub(super) const NODE_READ_BYTES_PER_SECOND: u64 = 8 * 1024 * 1024;

/// The most one read takes; reading paused by the rate resumes once this much is allowed, so a
/// container writing flat out wakes the agent about 64 times a second per stream.
const READ_CHUNK: usize = 16 * 1024;

/// The read rate shared by every output stream of a runtime (the module's doc says how it is
/// shared): one per [`super::ProcessRuntime`], a clone handed to each stream's forwarder.
#[derive(Debug, Clone)]
pub(super) struct NodeReadBudget(Arc<Mutex<ReadQueue>>);

/// The node's queue of bytes read: when what has been read so far is paid for at the rate.
#[derive(Debug)]
struct ReadQueue {
    rate: u64,
    /// How far the queue may run ahead of the real clock before a stream has to wait: the
    /// burst, one second's worth.
    burst: Duration,
    /// When every byte charged so far has been paid for at `rate` (a virtual clock; in the
    /// past when the node reads below its rate).
    paid_until: Instant,
}

impl NodeReadBudget {
    /// [`NODE_READ_BYTES_PER_SECOND`], the first second's worth at once.
    pub(super) fn new() -> Self {
        NodeReadBudget::with_rate(NODE_READ_BYTES_PER_SECOND, Instant::now())
    }

    /// `rate` bytes a second from `now` on, the first second's worth at once.
    fn with_rate(rate: u64, now: Instant) -> Self {
        let queue = ReadQueue { rate, burst: Duration::from_secs(1), paid_until: now };
        NodeReadBudget(Arc::new(Mutex::new(queue)))
    }

    /// Charges `bytes` a stream read at `now`, at the end of the queue; returns when that stream
    /// may read again: once the queue is paid off up to its bytes, less the burst.
    fn charge(&self, bytes: u64, now: Instant) -> Instant {
        // The queue is one instant, valid whatever a panicking holder left.
        let mut queue = self.0.lock().unwrap_or_else(PoisonError::into_inner);
        // Rounded up: the node never reads more than its rate, even by a fraction of a byte.
        let nanos = (u128::from(bytes) * 1_000_000_000).div_ceil(u128::from(queue.rate));
        let cost = Duration::from_nanos(u64::try_from(nanos).unwrap_or(u64::MAX));
        // Time the node spent below its rate is not saved up beyond the burst.
        queue.paid_until = queue.paid_until.max(now) + cost;
        now + queue.paid_until.saturating_duration_since(now).saturating_sub(queue.burst)
    }
}

/// Logs a process's output line by line as it comes: a container writing at any rate up to
/// [`READ_BYTES_PER_SECOND`] never finds its pipe full while the `node`'s budget has room.
pub(super) async fn forward_output(
    pipe: impl AsyncRead + Unpin,
    node: NodeReadBudget,
    pod: String,
    container: String,
) {
    forward(pipe, &node, |output| match output {
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

/// Reads `pipe` to its end at most at [`READ_BYTES_PER_SECOND`] and within the `node`'s
/// budget, cut into lines for `out`.
async fn forward(mut pipe: impl AsyncRead + Unpin, node: &NodeReadBudget, mut out: impl FnMut(Output<'_>)) {
    let start = Instant::now();
    let mut lines = Lines::new(MAX_LOG_LINE, start);
    let mut pace = Bucket::full(READ_BYTES_PER_SECOND, READ_BYTES_PER_SECOND, start);
    // When the node's budget lets this stream read again.
    let mut turn = start;
    // Filled by reads without being zeroed first: a quiet container touches only what it writes.
    let mut chunk = Vec::with_capacity(READ_CHUNK);
    loop {
        let chunk_size = READ_CHUNK as u64;
        let now = Instant::now();
        if pace.available(now) < chunk_size {
            tokio::time::sleep_until(pace.when_available(chunk_size)).await;
            continue;
        }
        if turn > now {
            tokio::time::sleep_until(turn).await;
            continue;
        }
        chunk.clear();
        match (&mut pipe).take(chunk_size).read_buf(&mut chunk).await {
            Ok(0) | Err(_) => break,
            Ok(read) => {
                let now = Instant::now();
                pace.spend(read as u64);
                lines.take(&chunk, now, &mut out);
                // The node pays for the records logged as for the bytes read: with many floods
                // the records cost the agent more than the reading (docs/reliability.md).
                let logged = lines.budget.take_logged();
                turn = node.charge((read as u64).saturating_add(logged), now);
            }
        }
    }
    let now = Instant::now();
    lines.finish(now, &mut out);
    // The last records are paid for too, though this stream will not read again: the others
    // wait for them.
    let logged = lines.budget.take_logged();
    if logged > 0 {
        node.charge(logged, now);
    }
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

/// A stream's [`LOG_BYTES_PER_SECOND`]: a bucket of that many bytes, refilled continuously, the
/// lines it did not admit, and what the lines it admitted cost since the node was last charged.
#[derive(Debug)]
struct LogBudget {
    bucket: Bucket,
    dropped: u64,
    reported: Instant,
    logged: u64,
}

impl LogBudget {
    fn new(now: Instant) -> Self {
        LogBudget {
            bucket: Bucket::full(LOG_BYTES_PER_SECOND, LOG_BYTES_PER_SECOND, now),
            dropped: 0,
            reported: now,
            logged: 0,
        }
    }

    /// Whether a line of `len` bytes is logged now; one that is not is counted. A line costs
    /// its bytes and [`LOG_LINE_COST`] more: each is a whole record in the log.
    fn admit(&mut self, len: usize, now: Instant) -> bool {
        let cost = (len as u64).saturating_add(LOG_LINE_COST);
        if self.bucket.take(cost, now) {
            self.logged = self.logged.saturating_add(cost);
            return true;
        }
        self.dropped += 1;
        false
    }

    /// Whether not even the shortest line (one byte) would be admitted at `now`.
    fn exhausted(&mut self, now: Instant) -> bool {
        self.bucket.available(now) < 1 + LOG_LINE_COST
    }

    /// What the lines admitted since the last call cost, records included.
    fn take_logged(&mut self) -> u64 {
        std::mem::take(&mut self.logged)
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

    /// The lines dropped since the last report, whenever: at the end of the stream. The
    /// report is a record too, and costs as one.
    fn report_all(&mut self) -> Option<u64> {
        let dropped = (self.dropped > 0).then(|| std::mem::take(&mut self.dropped))?;
        self.logged = self.logged.saturating_add(LOG_LINE_COST);
        Some(dropped)
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

    /// What a stream's budget tells the node it logged: each line admitted with its record, each
    /// count of lines not logged as a record, nothing for a line dropped, and each only once.
    #[test]
    fn the_node_is_charged_for_every_record_logged() {
        let start = Instant::now();
        let mut budget = LogBudget::new(start);
        assert!(budget.admit(100, start) && budget.admit(20, start));
        assert_eq!(budget.take_logged(), 120 + 2 * LOG_LINE_COST);
        assert_eq!(budget.take_logged(), 0, "charged once");
        while budget.admit(1000, start) {}
        budget.take_logged();
        assert!(!budget.admit(1000, start), "dropped");
        assert_eq!(budget.take_logged(), 0, "a dropped line costs nothing");
        assert_eq!(budget.report(start + Duration::from_secs(1)), Some(2));
        assert_eq!(budget.take_logged(), LOG_LINE_COST, "the count is a record");
    }

    /// A stream's unfinished last line, logged at its end, is paid for like any other.
    #[tokio::test(start_paused = true)]
    async fn the_last_line_of_a_stream_is_charged_to_the_node() {
        let start = Instant::now();
        let node = NodeReadBudget::with_rate(1000, start);
        forward(&b"abc"[..], &node, |_| {}).await;
        // Its 3 bytes read and its record (3 + 128) are in the queue before a second's worth.
        let after = node.charge(1000, start);
        assert_eq!(after - start, Duration::from_millis(3 + 3 + LOG_LINE_COST));
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

    fn logged_lines(seen: &[(Instant, Seen)]) -> u64 {
        logged(seen).len() as u64
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
        forward(reader, &NodeReadBudget::new(), |output| seen.push((Instant::now(), Seen::of(output)))).await;
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
        probelet_actors::test_util::keep_call_sites_interested();
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

    /// The reading end of a pipe, noting each read: when, and how many bytes.
    struct Counted<R> {
        inner: R,
        reads: Vec<(Instant, usize)>,
    }

    impl<R: AsyncRead + Unpin> AsyncRead for Counted<R> {
        fn poll_read(
            self: std::pin::Pin<&mut Self>,
            cx: &mut std::task::Context<'_>,
            buf: &mut tokio::io::ReadBuf<'_>,
        ) -> std::task::Poll<std::io::Result<()>> {
            let this = self.get_mut();
            let before = buf.filled().len();
            let polled = std::pin::Pin::new(&mut this.inner).poll_read(cx, buf);
            if polled.is_ready() && buf.filled().len() > before {
                this.reads.push((Instant::now(), buf.filled().len() - before));
            }
            polled
        }
    }

    /// One stream of [`shared`]: its reads, what [`forward`] gave and when, and how many bytes
    /// its writer wrote.
    struct Stream {
        reads: Vec<(Instant, usize)>,
        seen: Vec<(Instant, Seen)>,
        written: u64,
    }

    impl Stream {
        /// Bytes read before `until`.
        fn read_before(&self, until: Instant) -> u64 {
            self.reads.iter().filter(|(at, _)| *at < until).map(|(_, n)| *n as u64).sum()
        }

        /// Bytes read in `[from, until)`.
        fn read_between(&self, from: Instant, until: Instant) -> u64 {
            self.read_before(until) - self.read_before(from)
        }

        /// What the records logged before `until` cost: each line's bytes and its record, and
        /// each count of lines not logged.
        fn logged_before(&self, until: Instant) -> u64 {
            let records = self.seen.iter().filter(|(at, _)| *at < until);
            records
                .map(|(_, s)| match s {
                    Seen::Line(l) => l.len() as u64 + LOG_LINE_COST,
                    Seen::Dropped(_) => LOG_LINE_COST,
                })
                .sum()
        }

        /// What the node was charged for this stream before `until`: what it read and logged.
        fn charged_before(&self, until: Instant) -> u64 {
            self.read_before(until) + self.logged_before(until)
        }
    }

    /// [`forward`] on `count` pipes of 64 KiB at once, each in a task of its own as a container's
    /// streams are, all sharing `node`; `write(i, pipe)` writes stream `i` and says how many
    /// bytes it wrote. Every stream is read to its end.
    async fn shared<F>(
        node: &NodeReadBudget,
        count: usize,
        write: impl Fn(usize, DuplexStream) -> F,
    ) -> Vec<Stream>
    where
        F: std::future::Future<Output = u64> + Send + 'static,
    {
        let mut tasks = Vec::new();
        for i in 0..count {
            let (writer, reader) = tokio::io::duplex(64 * 1024);
            let writing = tokio::spawn(write(i, writer));
            let node = node.clone();
            let reading = tokio::spawn(async move {
                let mut pipe = Counted { inner: reader, reads: Vec::new() };
                let mut seen = Vec::new();
                forward(&mut pipe, &node, |output| seen.push((Instant::now(), Seen::of(output)))).await;
                (pipe.reads, seen)
            });
            tasks.push((writing, reading));
        }
        let mut streams = Vec::new();
        for (writing, reading) in tasks {
            let (reads, seen) = reading.await.expect("the reader finishes");
            let written = writing.await.expect("the writer finishes");
            streams.push(Stream { reads, seen, written });
        }
        streams
    }

    use tokio::io::DuplexStream;

    /// `yes` into `pipe` until `until`; how many bytes it wrote.
    async fn yes_until(mut pipe: DuplexStream, until: Instant) -> u64 {
        let block = b"y\n".repeat(4 * 1024);
        let mut written = 0;
        while Instant::now() < until {
            pipe.write_all(&block).await.expect("read to the end");
            written += block.len() as u64;
        }
        written
    }

    /// `count` containers writing `yes` flat out for `time`, sharing one node budget: their
    /// streams, and when they started.
    async fn floods(count: usize, time: Duration) -> (Vec<Stream>, Instant) {
        let node = NodeReadBudget::new();
        let start = Instant::now();
        (shared(&node, count, |_, pipe| yes_until(pipe, start + time)).await, start)
    }

    /// A quiet container: a numbered line every `every` until `until`, each written at once (its
    /// pipe never full); how many bytes it wrote.
    async fn lines_until(mut pipe: DuplexStream, every: Duration, until: Instant) -> u64 {
        let mut written = 0;
        for i in 0.. {
            if Instant::now() >= until {
                break;
            }
            let line = format!("quiet {i:06}\n");
            let before = Instant::now();
            pipe.write_all(line.as_bytes()).await.expect("read to the end");
            assert_eq!(Instant::now(), before, "quiet line {i} waited for room");
            written += line.len() as u64;
            tokio::time::sleep(every).await;
        }
        written
    }

    /// The most the node reads and logs in `time` from `streams` streams: the rate over that
    /// time, its first second's burst, and a charge per stream (read and logged before being
    /// paid for: a chunk, and at most a log budget's worth of records).
    fn node_bound(time: Duration, streams: usize) -> u64 {
        let over_time = u128::from(NODE_READ_BYTES_PER_SECOND) * time.as_nanos() / 1_000_000_000;
        let charge = READ_CHUNK as u64 + LOG_BYTES_PER_SECOND;
        u64::try_from(over_time).expect("small") + NODE_READ_BYTES_PER_SECOND + streams as u64 * charge
    }

    /// How long a stream may wait for its turn while `streams` streams (fewer than 128) flood:
    /// a charge of each at the node's rate, where a charge is a chunk and what the stream's log
    /// budget gained during the last turn (`C = N × (chunk + log rate × C) / node rate`), and
    /// the timer's millisecond.
    fn turn_bound(streams: usize) -> Duration {
        let streams = streams as u64;
        assert!(
            streams * LOG_BYTES_PER_SECOND < NODE_READ_BYTES_PER_SECOND,
            "the formula holds below 128 streams"
        );
        let nanos = (streams * READ_CHUNK as u64 * 1_000_000_000)
            .div_ceil(NODE_READ_BYTES_PER_SECOND - streams * LOG_BYTES_PER_SECOND);
        // A log budget holds a second's worth at most: no charge is more than a chunk and that.
        let most = (streams * (READ_CHUNK as u64 + LOG_BYTES_PER_SECOND) * 1_000_000_000)
            .div_ceil(NODE_READ_BYTES_PER_SECOND);
        Duration::from_nanos(nanos.min(most)) + Duration::from_millis(1)
    }

    /// Twenty containers writing `yes` flat out for 5 s are read and logged at the node's rate
    /// together, not at twenty times a stream's: the rate over the time, its burst and a charge
    /// each, no more, and not much less (the budget is not left unused). Each stream stays within
    /// its own rate, gets a fair share of the node's, and has every line logged or counted.
    #[tokio::test(start_paused = true)]
    async fn many_flooding_streams_are_read_at_the_node_rate_together() {
        const STREAMS: usize = 20;
        const FLOOD: Duration = Duration::from_secs(5);
        let (streams, start) = floods(STREAMS, FLOOD).await;

        let end = start + FLOOD;
        let total: u64 = streams.iter().map(|s| s.charged_before(end)).sum();
        let most = node_bound(FLOOD, STREAMS);
        let least = NODE_READ_BYTES_PER_SECOND * FLOOD.as_secs();
        assert!(
            total <= most,
            "{total} bytes read and logged in {FLOOD:?} from {STREAMS} floods, at most {most}"
        );
        assert!(
            total >= least,
            "{total} bytes read and logged in {FLOOD:?}: the node's rate left unused ({least})"
        );
        let own = READ_BYTES_PER_SECOND * (FLOOD.as_secs() + 1);
        for (i, stream) in streams.iter().enumerate() {
            let read = stream.read_before(end);
            assert!(read <= own, "stream {i} read {read} bytes, beyond its own rate ({own})");
            let charged = stream.charged_before(end);
            assert!(
                charged * STREAMS as u64 * 10 >= total * 8,
                "stream {i} was charged {charged} of {total} bytes: unfair"
            );
            let lines = logged(&stream.seen).len() as u64 + dropped(&stream.seen);
            assert_eq!(lines, stream.written / 2, "stream {i}: each line logged or counted");
        }
    }

    /// A hundred containers each writing a 200-byte line every millisecond (20 MB a second
    /// together, each far below its own rate) are held to the node's rate too, though each read
    /// is paid for only after it: the rate over the time, its burst and a chunk per stream.
    #[tokio::test(start_paused = true)]
    async fn many_streams_writing_short_lines_fast_are_held_to_the_node_rate() {
        const STREAMS: usize = 100;
        const WRITING: Duration = Duration::from_secs(3);
        let node = NodeReadBudget::new();
        let start = Instant::now();
        let streams = shared(&node, STREAMS, |_, mut pipe| async move {
            let line = [b"x".repeat(199), b"\n".to_vec()].concat();
            let mut written = 0;
            while Instant::now() < start + WRITING {
                pipe.write_all(&line).await.expect("read to the end");
                written += line.len() as u64;
                tokio::time::sleep(Duration::from_millis(1)).await;
            }
            written
        })
        .await;
        let total: u64 = streams.iter().map(|s| s.charged_before(start + WRITING)).sum();
        let most = node_bound(WRITING, STREAMS);
        assert!(
            total <= most,
            "{total} bytes read and logged in {WRITING:?} from {STREAMS} streams, at most {most}"
        );
        assert!(
            total >= NODE_READ_BYTES_PER_SECOND * WRITING.as_secs(),
            "{total} bytes: the node's rate left unused"
        );
        for (i, stream) in streams.iter().enumerate() {
            let lines = logged(&stream.seen).len() as u64 + dropped(&stream.seen);
            assert_eq!(lines, stream.written / 200, "stream {i}: each line logged or counted");
        }
    }

    /// A hundred containers writing `yes` flat out: what they log is held to the node's rate
    /// with what they read, not a log budget's worth for each (which alone would be 6.25 MiB a
    /// second, where the node's rate is 8 for both); each gets a fair share of the records, and
    /// every line is logged or counted.
    #[tokio::test(start_paused = true)]
    async fn the_records_of_many_floods_are_held_to_the_node_rate() {
        const STREAMS: usize = 100;
        const FLOOD: Duration = Duration::from_secs(4);
        let (streams, start) = floods(STREAMS, FLOOD).await;

        let end = start + FLOOD;
        let logged: u64 = streams.iter().map(|s| s.logged_before(end)).sum();
        let total: u64 = streams.iter().map(|s| s.charged_before(end)).sum();
        let most = node_bound(FLOOD, STREAMS);
        assert!(
            total <= most,
            "{total} bytes read and logged in {FLOOD:?} from {STREAMS} floods, at most {most}"
        );
        assert!(logged > 0, "the floods' lines are logged, within the budget");
        for (i, stream) in streams.iter().enumerate() {
            let own = stream.logged_before(end);
            assert!(own * STREAMS as u64 * 2 >= logged, "stream {i} logged {own} of {logged} bytes: unfair");
            let lines = logged_lines(&stream.seen) + dropped(&stream.seen);
            assert_eq!(lines, stream.written / 2, "stream {i}: each line logged or counted");
        }
    }

    /// Four floods together are below the node's rate: each is read at its own rate, neither
    /// faster nor slowed by the others.
    #[tokio::test(start_paused = true)]
    async fn a_few_flooding_streams_each_keep_their_own_rate() {
        const STREAMS: usize = 4;
        const FLOOD: Duration = Duration::from_secs(5);
        let (streams, start) = floods(STREAMS, FLOOD).await;
        for (i, stream) in streams.iter().enumerate() {
            // After its first second's worth at once.
            let read = stream.read_between(start + Duration::from_secs(1), start + FLOOD);
            let at_rate = READ_BYTES_PER_SECOND * (FLOOD.as_secs() - 1);
            assert!(
                read <= at_rate + READ_CHUNK as u64 && read + 2 * READ_CHUNK as u64 >= at_rate,
                "stream {i} read {read} bytes in {:?}, its own rate {at_rate}",
                FLOOD - Duration::from_secs(1)
            );
        }
    }

    /// While twenty containers flood, a quiet one writing a line every 10 ms has each logged
    /// within one turn of the node's budget (a charge of each stream, 50 ms), in order, none
    /// dropped, and never finds its pipe full; the floods are held to the node's rate meanwhile.
    #[tokio::test(start_paused = true)]
    async fn a_quiet_stream_gets_its_lines_through_while_many_flood() {
        const FLOODS: usize = 20;
        const FLOOD: Duration = Duration::from_secs(5);
        const EVERY: Duration = Duration::from_millis(10);
        let node = NodeReadBudget::new();
        let start = Instant::now();
        let streams = shared(&node, FLOODS + 1, |i, pipe| async move {
            match i {
                0 => lines_until(pipe, EVERY, start + FLOOD).await,
                _ => yes_until(pipe, start + FLOOD).await,
            }
        })
        .await;

        let total: u64 = streams.iter().map(|s| s.charged_before(start + FLOOD)).sum();
        let most = node_bound(FLOOD, FLOODS + 1);
        assert!(total <= most, "{total} bytes read and logged in {FLOOD:?}, at most {most}");
        let quiet = &streams[0];
        assert_eq!(dropped(&quiet.seen), 0);
        let lines: Vec<(Instant, &[u8])> = quiet
            .seen
            .iter()
            .filter_map(|(at, s)| if let Seen::Line(l) = s { Some((*at, l.as_slice())) } else { None })
            .collect();
        let expected = FLOOD.as_millis() / EVERY.as_millis();
        assert_eq!(lines.len() as u128, expected, "every quiet line logged");
        let bound = turn_bound(FLOODS + 1);
        let mut slowest = Duration::ZERO;
        for (i, (at, line)) in lines.iter().enumerate() {
            assert_eq!(*line, format!("quiet {i:06}\n").as_bytes(), "in order");
            let written = start + EVERY * i as u32;
            slowest = slowest.max(*at - written);
        }
        assert!(slowest <= bound, "a quiet line waited {slowest:?}, more than a turn ({bound:?})");
    }

    /// Once the floods stop, the node's budget is whole again at once: the one flood left is
    /// read at its own rate, and a quiet line is logged the moment it is written.
    #[tokio::test(start_paused = true)]
    async fn reading_goes_back_to_each_streams_own_rate_once_the_floods_stop() {
        const FLOODS: usize = 20;
        const FLOOD: Duration = Duration::from_secs(3);
        const LONGER: Duration = Duration::from_secs(8);
        const EVERY: Duration = Duration::from_millis(100);
        let node = NodeReadBudget::new();
        let start = Instant::now();
        let streams = shared(&node, FLOODS + 1, |i, pipe| async move {
            match i {
                0 => lines_until(pipe, EVERY, start + LONGER).await,
                1 => yes_until(pipe, start + LONGER).await,
                _ => yes_until(pipe, start + FLOOD).await,
            }
        })
        .await;

        let during: u64 = streams.iter().map(|s| s.charged_before(start + FLOOD)).sum();
        let most = node_bound(FLOOD, FLOODS + 1);
        assert!(during <= most, "{during} bytes read and logged in {FLOOD:?}, at most {most}");
        // The one left: its share of the node's rate during the flood, its own rate after (from
        // a second on, once its pipe's backlog is gone).
        let left = &streams[1];
        let shared_share = left.read_between(start + Duration::from_secs(1), start + FLOOD);
        assert!(shared_share < READ_BYTES_PER_SECOND, "{shared_share} bytes read in 2 s of the flood");
        let after = left.read_between(start + FLOOD + Duration::from_secs(1), start + LONGER);
        let at_rate = READ_BYTES_PER_SECOND * (LONGER - FLOOD).as_secs().saturating_sub(1);
        assert!(
            after <= at_rate + READ_CHUNK as u64 && after + 2 * READ_CHUNK as u64 >= at_rate,
            "{after} bytes read after the flood, its rate {at_rate}"
        );
        // The quiet lines written once the floods are over: logged when written.
        let over = start + FLOOD + EVERY;
        for (at, seen) in &streams[0].seen {
            let Seen::Line(line) = seen else { continue };
            let text = std::str::from_utf8(line).expect("text");
            let i: u32 = text.trim_start_matches("quiet ").trim_end().parse().expect("numbered");
            let written = start + EVERY * i;
            if written >= over {
                assert_eq!(*at, written, "line {i} logged {:?} after it was written", *at - written);
            }
        }
        assert_eq!(
            logged(&streams[0].seen).len() as u128,
            LONGER.as_millis() / EVERY.as_millis(),
            "every quiet line logged"
        );
    }

    /// The node's queue: a stream reads again once the bytes charged before its own, and its
    /// own, are paid for at the rate, less the burst; time below the rate is not saved up.
    #[test]
    fn the_node_budget_is_a_queue_paid_off_at_its_rate() {
        let start = Instant::now();
        let node = NodeReadBudget::with_rate(1000, start);
        // The first second's worth at once: no wait.
        assert_eq!(node.charge(600, start), start);
        assert_eq!(node.charge(400, start), start);
        // Beyond it, each waits for what was read before it and its own.
        assert_eq!(node.charge(10, start), start + Duration::from_millis(10));
        assert_eq!(node.charge(20, start), start + Duration::from_millis(30));
        // A fraction of a nanosecond is charged whole.
        assert_eq!(node.charge(1, start) - start, Duration::from_nanos(31_000_000));
        // Ten idle seconds give back the burst, not ten seconds' worth.
        let later = start + Duration::from_secs(11);
        assert_eq!(node.charge(1000, later), later);
        assert_eq!(node.charge(100, later), later + Duration::from_millis(100));
    }
}
