//! The agent's standard output and error, written by a thread of their own so that a reader
//! that stops reading never stops the agent.
//!
//! Every log line and console line used to be written where it was made, with the stream's
//! lock held: a pipe whose reader stalled (a `| tee` stopped, a log shipper or journald stuck)
//! filled after 64 KiB and the next write blocked the agent's main thread for good. Probes
//! stopped, statuses froze while `/healthz` still answered `ok`, and SIGTERM (twice) did not stop
//! the agent, whose signal thread waited for the same lock to log that it was stopping: only
//! SIGKILL ended it, leaving its containers running. The kubelet's klog writes standard error
//! in place too, and blocks the same way; here a line that finds the queue full is dropped and
//! counted instead, and the count is said once the stream takes lines again
//! (docs/reliability.md, "A log reader that stops reading").

use std::io::{self, Write as _};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::mpsc::{self, SyncSender, TrySendError};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

/// Lines held for a stream that does not take them, at most.
pub const QUEUED_LINES: usize = 4096;

/// Bytes held for a stream that does not take them, at most: a container's output line is
/// logged up to 16 KiB (more once escaped), so 4,096 of them alone could hold hundreds of MiB.
pub const QUEUED_BYTES: usize = 1024 * 1024;

/// Lines that may be queued past a full queue's [`QUEUED_LINES`] and [`QUEUED_BYTES`] by
/// [`write_reserved`]: a panic's text, the agent's last error, a forced stop's line.
pub const RESERVED_LINES: usize = 16;

/// How long an exiting agent waits for what it queued to be written.
pub const FLUSH_DEADLINE: Duration = Duration::from_secs(2);

/// Which of the process's streams a queue writes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Stream {
    /// Standard output: the console lines.
    Stdout,
    /// Standard error: the log.
    Stderr,
}

/// One stream's queue; its writer thread holds the other end.
struct Queue {
    /// The sender and the lines it queued so far, counted under the lock they are queued
    /// under, so that the count is their order in the queue. Only `try_send` runs under it,
    /// which never waits.
    sender: Mutex<(SyncSender<Vec<u8>>, u64)>,
    counts: Arc<Counts>,
    /// Lines held at most, but for [`RESERVED_LINES`] more of [`write_reserved`]'s.
    max_lines: usize,
    /// Bytes held at most, but for [`write_reserved`]'s.
    max_bytes: usize,
    /// The writer thread: a line it queues itself (its own panic's text) would never come out.
    writer: std::thread::ThreadId,
}

/// What a queue and its writer thread both keep count of.
#[derive(Default)]
struct Counts {
    /// Lines the writer is done with (written, or failed to be, and the dropped count said
    /// after them), in queue order. A dropped line never entered the queue and is not counted:
    /// an exit waits for queued lines only.
    written: AtomicU64,
    /// Lines the stream has taken (or failed to), counted before the writer reads
    /// [`Counts::dropped`] after them: a producer that drops a line once every queued line is
    /// taken wakes the writer to say its count (see [`Queue::dropped_one`]).
    taken: AtomicU64,
    /// Bytes queued and not written yet.
    bytes: AtomicUsize,
    /// Lines dropped since the count was last said.
    dropped: AtomicU64,
}

static STDOUT: OnceLock<Queue> = OnceLock::new();
static STDERR: OnceLock<Queue> = OnceLock::new();

fn slot(stream: Stream) -> &'static OnceLock<Queue> {
    match stream {
        Stream::Stdout => &STDOUT,
        Stream::Stderr => &STDERR,
    }
}

/// Starts the writer threads of both streams. Until then (and in a process that never calls
/// it, a test or a host of the library), lines are written in place. A thread that cannot be
/// made leaves its stream written in place, as before.
pub fn start() {
    for stream in [Stream::Stdout, Stream::Stderr] {
        if let Ok(queue) = spawn_stream(stream, QUEUED_LINES, move |line| write_in_place(stream, line)) {
            let _ = slot(stream).set(queue);
        }
    }
}

/// The queue of `stream` as [`start`] makes it, of `lines` lines, written by `sink`.
fn spawn_stream(stream: Stream, lines: usize, sink: impl FnMut(&[u8]) + Send + 'static) -> io::Result<Queue> {
    Queue::spawn(name(stream), lines, QUEUED_BYTES, sink, move |dropped| dropped_notice(stream, dropped))
}

fn name(stream: Stream) -> &'static str {
    match stream {
        Stream::Stdout => "stdout",
        Stream::Stderr => "stderr",
    }
}

/// What the stream that lost `dropped` lines says of them, once it takes lines again: on
/// standard error a log line in the log's own format (text or JSON), on standard output a
/// console line. Its writer thread writes it itself, never queued: queued, it was dropped in
/// its turn by the queue full of the lines it counted. Empty if the log leaves out warnings.
fn dropped_notice(stream: Stream, dropped: u64) -> Vec<u8> {
    match stream {
        Stream::Stderr => {
            captured(|| tracing::warn!(dropped, "log lines dropped: standard error was not being read"))
        }
        Stream::Stdout => {
            format!("probelet: {dropped} console line(s) dropped: standard output was not being read\n")
                .into_bytes()
        }
    }
}

thread_local! {
    /// On a queue's writer thread, whether it has panicked before; `None` on other threads.
    static WRITER_PANICKED: std::cell::Cell<Option<bool>> = const { std::cell::Cell::new(None) };

    /// Where [`QueuedStderr`] writes on this thread, while [`captured`] runs.
    static CAPTURED: std::cell::RefCell<Option<Vec<u8>>> = const { std::cell::RefCell::new(None) };
}

/// What the log writes while `log` runs on this thread, kept rather than queued.
fn captured(log: impl FnOnce()) -> Vec<u8> {
    /// Stops the capture, a panic of `log` too.
    struct Stop;
    impl Drop for Stop {
        fn drop(&mut self) {
            CAPTURED.with(|captured| captured.replace(None));
        }
    }
    CAPTURED.with(|captured| captured.replace(Some(Vec::new())));
    let stop = Stop;
    log();
    let kept = CAPTURED.with(|captured| captured.replace(None));
    drop(stop);
    kept.unwrap_or_default()
}

fn write_in_place(stream: Stream, bytes: &[u8]) {
    // A failed write (a closed terminal's EIO, a reader gone) drops the line.
    let _ = match stream {
        Stream::Stdout => io::stdout().lock().write_all(bytes),
        Stream::Stderr => io::stderr().lock().write_all(bytes),
    };
}

/// Runs `write`, a writer thread's write, and goes on past a panic of it: the writer thread
/// ended with it, so every line it had queued was lost, each exit waited the whole
/// [`FLUSH_DEADLINE`] for lines that would never be written, and later lines were written in
/// place, where a stalled reader blocks the agent again. Its text is said by the panic hook
/// (in place on the writer's own stream, see [`say_panic`]), so the bug is not hidden; what
/// the line was for is lost, as a line the stream fails to take is.
fn shielded(write: impl FnOnce()) {
    if let Err(panic) = std::panic::catch_unwind(std::panic::AssertUnwindSafe(write)) {
        // A payload whose own drop panics would end the thread after all; that one is kept.
        if let Err(again) = std::panic::catch_unwind(std::panic::AssertUnwindSafe(move || drop(panic))) {
            std::mem::forget(again);
        }
    }
}

impl Queue {
    /// A queue of at most `lines` lines and `max_bytes` bytes (and [`RESERVED_LINES`] more
    /// lines of [`write_reserved`]'s), and its thread `<name>-writer`, which gives each line to
    /// `sink` as it comes, and right after it what `notice` says of the lines dropped meanwhile
    /// (nothing if it says nothing).
    fn spawn(
        name: &str,
        lines: usize,
        max_bytes: usize,
        mut sink: impl FnMut(&[u8]) + Send + 'static,
        notice: impl Fn(u64) -> Vec<u8> + Send + 'static,
    ) -> io::Result<Queue> {
        let (sender, receiver) = mpsc::sync_channel::<Vec<u8>>(lines + RESERVED_LINES);
        let counts = Arc::new(Counts::default());
        let shared = Arc::clone(&counts);
        let writer = std::thread::Builder::new().name(format!("{name}-writer")).spawn(move || {
            WRITER_PANICKED.with(|panicked| panicked.set(Some(false)));
            while let Ok(line) = receiver.recv() {
                // An empty line is a producer's wake-up, for the count alone.
                if !line.is_empty() {
                    // A panic loses its line, not the writer (docs/reliability.md, "A log
                    // reader that stops reading").
                    shielded(|| sink(&line));
                }
                shared.bytes.fetch_sub(line.len(), Ordering::SeqCst);
                // Before the count is read: a producer that drops a line after that read finds
                // every queued line taken (or another to come), and wakes this thread for it.
                shared.taken.fetch_add(1, Ordering::SeqCst);
                let dropped = shared.dropped.swap(0, Ordering::SeqCst);
                if dropped > 0 {
                    // Written here, as soon as the stream took a line: queued, the notice
                    // was dropped in its turn by the queue full of the lines it counts.
                    shielded(|| {
                        let notice = notice(dropped);
                        if !notice.is_empty() {
                            sink(&notice);
                        }
                    });
                }
                // After the notice, so that an exit waiting for this line waits for it too.
                shared.written.fetch_add(1, Ordering::SeqCst);
            }
        })?;
        let writer = writer.thread().id();
        Ok(Queue { sender: Mutex::new((sender, 0)), counts, max_lines: lines, max_bytes, writer })
    }

    /// Queues `bytes`, or drops and counts them if the queue is full (of lines or of bytes).
    /// False if the writer is gone.
    fn write(&self, bytes: &[u8]) -> bool {
        self.queue(bytes, false)
    }

    /// Queues `bytes` as [`Queue::write`] does, but into the [`RESERVED_LINES`] past a queue
    /// full of other lines.
    fn write_reserved(&self, bytes: &[u8]) -> bool {
        self.queue(bytes, true)
    }

    fn queue(&self, bytes: &[u8], reserved: bool) -> bool {
        // Poisoned only by a panic in `try_send`; the count is still right.
        let mut sender = self.sender.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
        // A line longer than the whole budget still goes into an empty queue.
        let held = self.counts.bytes.load(Ordering::SeqCst);
        // Counted rather than left to the channel's capacity: the line being written is out
        // of the channel but still the queue's, and a reader only that slow must find the
        // reserve the same.
        let in_queue = sender.1.saturating_sub(self.written());
        let full = if reserved {
            in_queue >= (self.max_lines + RESERVED_LINES) as u64
        } else {
            (held > 0 && held + bytes.len() > self.max_bytes) || in_queue >= self.max_lines as u64
        };
        if full {
            self.dropped_one(&mut sender);
            return true;
        }
        self.counts.bytes.fetch_add(bytes.len(), Ordering::SeqCst);
        match sender.0.try_send(bytes.to_vec()) {
            Ok(()) => {
                sender.1 += 1;
                true
            }
            Err(TrySendError::Full(_)) => {
                self.counts.bytes.fetch_sub(bytes.len(), Ordering::SeqCst);
                self.dropped_one(&mut sender);
                true
            }
            Err(TrySendError::Disconnected(_)) => {
                self.counts.bytes.fetch_sub(bytes.len(), Ordering::SeqCst);
                false
            }
        }
    }

    /// Counts a dropped line, and makes sure the writer will say the count. The writer says it
    /// after the next line it takes; the counts that found the queue full were read a moment
    /// before, and the writer may have taken the queue's last line and read the count in
    /// between (likeliest with lines of over half the byte budget, each dropped while the one
    /// before it is written): if it was the last line for a while, nothing came after to say
    /// this one. Then an empty line is queued, a wake-up the writer writes nothing for but the
    /// count. Never waits: the queue is empty then, or another line is to come.
    fn dropped_one(&self, sender: &mut (SyncSender<Vec<u8>>, u64)) {
        self.counts.dropped.fetch_add(1, Ordering::SeqCst);
        // Read after the count: a line taken later is followed by a read of the count that sees
        // this drop. Counted as queued, so that an exit waits for the count as for a line.
        if self.counts.taken.load(Ordering::SeqCst) >= sender.1 && sender.0.try_send(Vec::new()).is_ok() {
            sender.1 += 1;
        }
    }

    /// The lines queued so far: the writer has written them all once it has written this many.
    fn queued(&self) -> u64 {
        self.sender.lock().unwrap_or_else(|poisoned| poisoned.into_inner()).1
    }

    fn written(&self) -> u64 {
        self.counts.written.load(Ordering::SeqCst)
    }
}

/// Writes `bytes` (whole lines) to `stream` through its queue, or in place before [`start`].
/// Never waits for the stream: a full queue drops the line and counts it.
pub fn write(stream: Stream, bytes: &[u8]) {
    match slot(stream).get() {
        Some(queue) if queue.write(bytes) => {}
        _ => write_in_place(stream, bytes),
    }
}

/// [`write()`] for a line an operator must not lose to a queue full of others, the agent's last
/// words (its fatal error, a forced stop's line): it goes into the [`RESERVED_LINES`] kept past
/// a full queue, so that a reader that is only slow, and reads within the exit's
/// [`FLUSH_DEADLINE`], gets it. It never waits either: with the reserve used too, it is dropped.
pub fn write_reserved(stream: Stream, bytes: &[u8]) {
    match slot(stream).get() {
        Some(queue) if queue.write_reserved(bytes) => {}
        _ => write_in_place(stream, bytes),
    }
}

/// Waits, at most `deadline`, for the lines both streams had queued before this call to be
/// written: an agent about to exit says its last lines, but a stream nobody reads does not keep
/// it from exiting. Lines queued meanwhile (other threads go on until the exit) are not waited
/// for, so the wait is only as long as the writes it owes: a forced stop's last line out, the
/// agent exits before its main thread can start anything more. A writer thread does not wait for
/// its own stream, which it would wait the whole deadline for: it waits for the other's only.
pub fn flush(deadline: Duration) {
    let me = std::thread::current().id();
    let owed: Vec<(&Queue, u64)> = [Stream::Stdout, Stream::Stderr]
        .iter()
        .filter_map(|stream| slot(*stream).get())
        .filter(|queue| queue.writer != me)
        .map(|queue| (queue, queue.queued()))
        .collect();
    if !wait_for(&owed, deadline) {
        say_console_lost(&owed);
    }
}

/// How long an exit waits for [`say_console_lost`]'s line past its own deadline: standard error
/// has taken what it owed by then, so it is read and takes the line at once.
const CONSOLE_LOST_DEADLINE: Duration = Duration::from_millis(100);

/// Says on standard error, once an exit's wait for standard output has run out, how many console
/// lines the exit leaves unwritten: queued, or dropped and not yet said (the count that would
/// have followed the next line the stream took). An orderly stop's console lines with standard
/// output stalled were lost unseen: its exit 0 and its log said nothing of them. Only where
/// standard error took what it owed in that wait, so the line can come out, and never in the
/// panic hook, where the log's subscriber may be what panicked.
fn say_console_lost(owed: &[(&Queue, u64)]) {
    let of = |stream: Stream, queue: &Queue| slot(stream).get().is_some_and(|its| std::ptr::eq(its, queue));
    let stdout = owed.iter().find(|(queue, queued)| of(Stream::Stdout, queue) && queue.written() < *queued);
    let stderr = owed.iter().find(|(queue, queued)| of(Stream::Stderr, queue) && queue.written() >= *queued);
    let (Some(&(stdout, _)), Some(&(stderr, _))) = (stdout, stderr) else {
        return;
    };
    if std::thread::panicking() {
        return;
    }
    let dropped =
        stdout.queued().saturating_sub(stdout.written()) + stdout.counts.dropped.load(Ordering::SeqCst);
    let line =
        captured(|| tracing::warn!(dropped, "console lines dropped: standard output was not being read"));
    if line.is_empty() || !stderr.write_reserved(&line) {
        return;
    }
    wait_for(&[(stderr, stderr.queued())], CONSOLE_LOST_DEADLINE);
}

/// Whether every line `owed` was written within `deadline`.
fn wait_for(owed: &[(&Queue, u64)], deadline: Duration) -> bool {
    wait_on(owed, deadline, wall_clock, std::thread::sleep)
}

/// The exit's clock. The real one on purpose: an exit is on any thread, in a runtime or none,
/// and a test's paused tokio clock must not hold its deadline off.
#[allow(clippy::disallowed_methods)]
fn wall_clock() -> std::time::Instant {
    std::time::Instant::now()
}

/// [`wait_for`] on the clock `now`, sleeping with `sleep`; whether every line `owed` was
/// written. One deadline for every stream, read on the clock: a wait counted in the sleeps it
/// asked for lasted longer than its deadline by all they overran (the timer's slack, a machine
/// busy with containers), several times the 2 s on a loaded one.
fn wait_on(
    owed: &[(&Queue, u64)],
    deadline: Duration,
    now: impl Fn() -> std::time::Instant,
    mut sleep: impl FnMut(Duration),
) -> bool {
    let step = Duration::from_micros(200);
    let since = now();
    loop {
        if owed.iter().all(|(queue, queued)| queue.written() >= *queued) {
            return true;
        }
        if now().saturating_duration_since(since) >= deadline {
            return false;
        }
        sleep(step);
    }
}

/// Flushes both streams (at most [`FLUSH_DEADLINE`]) and exits with `code`.
pub fn exit(code: i32) -> ! {
    flush(FLUSH_DEADLINE);
    std::process::exit(code)
}

/// Says panics through the standard error queue too. The default hook writes standard error in
/// place: with its reader stalled, a panicking thread waited on it for good (a probe's thread,
/// whose panic the worker catches to keep the previous result, never came back; the runtime's
/// other work on it stalled too). The text is the default's, and a backtrace as `RUST_BACKTRACE`
/// asks. The hook never waits for the stream, not even on the main thread, where tokio catches
/// a task's panic and the agent goes on: a panic that ends the process is waited for by
/// [`flushed_on_panic`].
///
/// A panic that cannot unwind aborts the process right after the hook, so its text, and the
/// texts queued before it, are waited for as an exit waits: a panic in a destructor while a
/// panic unwinds, one out of a function that cannot unwind (core says them in the words of
/// `aborts_after_the_hook`).
pub fn queue_panics() {
    std::panic::set_hook(Box::new(|info| {
        let aborts = aborts_after_the_hook(info.payload_as_str());
        say_panic(slot(Stream::Stderr).get(), &panic_text(info), aborts, |text| {
            write_in_place(Stream::Stderr, text)
        });
        if aborts {
            flush(FLUSH_DEADLINE);
        }
    }));
}

/// Whether a panic's message is one of core's panics that cannot unwind, after whose hook the
/// process aborts (`core::panicking::panic_in_cleanup`, `panic_cannot_unwind`). std tells a
/// hook whether a panic can unwind only on nightly (`PanicHookInfo::can_unwind`).
fn aborts_after_the_hook(message: Option<&str>) -> bool {
    matches!(message, Some("panic in a destructor during cleanup" | "panic in a function that cannot unwind"))
}

/// Runs `main` (the agent's main thread): a panic that leaves it ends the process, so its
/// text, and what was queued before, are waited for as an exit waits ([`FLUSH_DEADLINE`]); then
/// the panic goes on.
pub fn flushed_on_panic<T>(main: impl FnOnce() -> T) -> T {
    on_panic_of(main, || flush(FLUSH_DEADLINE))
}

/// Runs `main`; if it panics, `then`, and the panic goes on.
fn on_panic_of<T>(main: impl FnOnce() -> T, then: impl FnOnce()) -> T {
    match std::panic::catch_unwind(std::panic::AssertUnwindSafe(main)) {
        Ok(value) => value,
        Err(panic) => {
            then();
            std::panic::resume_unwind(panic)
        }
    }
}

/// Writes a panic's text through `queue`, or with `in_place` without one, and for a panic of
/// the queue's own writer thread: queued, that text would wait for the thread that is ending.
/// Queued as last words, in the reserve past a full queue, but for a writer thread's panics
/// after its first that do not abort the process: a writer that panics at each line it writes
/// (standard output's, whose panics are said on standard error) used the whole reserve within
/// as many lines, and the agent's own last words after them were dropped. Those are queued as
/// any line, and counted if dropped.
fn say_panic(queue: Option<&Queue>, text: &str, aborts: bool, in_place: impl FnOnce(&[u8])) {
    let again = WRITER_PANICKED
        .try_with(|panicked| {
            let before = panicked.get();
            if before.is_some() {
                panicked.set(Some(true));
            }
            before == Some(true)
        })
        .unwrap_or(false);
    let queued = match queue {
        Some(queue) if queue.writer != std::thread::current().id() => {
            if again && !aborts {
                queue.write(text.as_bytes())
            } else {
                queue.write_reserved(text.as_bytes())
            }
        }
        _ => false,
    };
    if !queued {
        in_place(text.as_bytes());
    }
}

/// What the default hook says of a panic: the thread's name and OS ID, where, the message, and
/// a backtrace as `RUST_BACKTRACE` asks, or the note that says how, at the process's first
/// panic only (as std's own hook: its note is said once).
fn panic_text(info: &std::panic::PanicHookInfo<'_>) -> String {
    use std::backtrace::{Backtrace, BacktraceStatus};
    static FIRST_PANIC: AtomicBool = AtomicBool::new(true);
    let thread = std::thread::current();
    let backtrace = Backtrace::capture();
    let backtrace = match backtrace.status() {
        BacktraceStatus::Captured => Some(backtrace.to_string()),
        _ => None,
    };
    said_of_a_panic(&Panicked {
        thread: thread.name().unwrap_or("<unnamed>"),
        thread_id: rustix::thread::gettid().as_raw_nonzero().get(),
        location: info.location().map(ToString::to_string).unwrap_or_default(),
        message: info.payload_as_str().unwrap_or("Box<dyn Any>"),
        backtrace,
        first: FIRST_PANIC.swap(false, Ordering::Relaxed),
    })
}

/// What [`said_of_a_panic`] says.
struct Panicked<'a> {
    thread: &'a str,
    thread_id: i32,
    location: String,
    message: &'a str,
    backtrace: Option<String>,
    /// The process's first panic, the only one whose text has the note on backtraces.
    first: bool,
}

/// The default hook's words (Rust 1.95): `thread 'main' (4242) panicked at src/main.rs:1:5:`.
fn said_of_a_panic(panic: &Panicked<'_>) -> String {
    let Panicked { thread, thread_id, location, message, .. } = panic;
    let mut text = format!("\nthread '{thread}' ({thread_id}) panicked at {location}:\n{message}\n");
    match &panic.backtrace {
        Some(backtrace) => text.push_str(&format!("stack backtrace:\n{backtrace}\n")),
        None if panic.first => {
            text.push_str("note: run with `RUST_BACKTRACE=1` environment variable to display a backtrace\n")
        }
        None => {}
    }
    text
}

/// The log's writer for tracing's fmt layer: each event is one `write` of its whole line.
#[derive(Clone, Copy, Debug, Default)]
pub struct QueuedStderr;

impl io::Write for QueuedStderr {
    fn write(&mut self, bytes: &[u8]) -> io::Result<usize> {
        // `try_with`: a thread-local destructor that logs after `CAPTURED` is gone is queued
        // as any line, not a panic.
        let kept = CAPTURED
            .try_with(|captured| match captured.try_borrow_mut().as_deref_mut() {
                Ok(Some(kept)) => {
                    kept.extend_from_slice(bytes);
                    true
                }
                _ => false,
            })
            .unwrap_or(false);
        if !kept {
            write(Stream::Stderr, bytes);
        }
        Ok(bytes.len())
    }

    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

impl<'a> tracing_subscriber::fmt::MakeWriter<'a> for QueuedStderr {
    type Writer = QueuedStderr;

    fn make_writer(&'a self) -> Self::Writer {
        QueuedStderr
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::mpsc::{Receiver, Sender};

    /// A queue whose writer holds each line until told to go on (a stream nobody reads), and
    /// what it wrote and was told dropped.
    fn stalled_queue(
        lines: usize,
        max_bytes: usize,
    ) -> (Queue, Sender<()>, Receiver<Vec<u8>>, Receiver<u64>) {
        let (go_on, gate) = mpsc::channel::<()>();
        let (written, wrote) = mpsc::channel();
        let (dropped, told) = mpsc::channel();
        let queue = Queue::spawn(
            "test",
            lines,
            max_bytes,
            move |line| {
                let _ = gate.recv();
                let _ = written.send(line.to_vec());
            },
            move |count| {
                let _ = dropped.send(count);
                Vec::new()
            },
        )
        .unwrap();
        (queue, go_on, wrote, told)
    }

    #[test]
    fn an_exit_waits_for_its_own_line_though_later_lines_are_dropped() {
        let (queue, go_on, wrote, _told) = stalled_queue(2, QUEUED_BYTES);
        assert!(queue.write(b"shutdown forced\n"));
        let owed = [(&queue, queue.queued())];
        // Other threads go on logging while the exit waits; the full queue drops their lines.
        for _ in 0..10 {
            assert!(queue.write(b"later\n"));
        }
        let release = std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(200));
            for _ in 0..20 {
                let _ = go_on.send(());
            }
        });
        wait_for(&owed, Duration::from_secs(10));
        assert_eq!(
            wrote.try_recv().ok(),
            Some(b"shutdown forced\n".to_vec()),
            "the exit's own line is written before it"
        );
        release.join().unwrap();
    }

    /// An exit's wait ends at its deadline on the clock, with both streams stalled: one
    /// deadline for both, and not counted in the sleeps it asked for, each of which takes the
    /// (fake) clock five times as long here, as a busy machine does. Counted in sleeps, the
    /// 2 s were 10 s.
    #[test]
    fn an_exit_waits_for_both_streams_until_one_deadline_on_the_clock() {
        let (stdout, stdout_go_on, _, _) = stalled_queue(2, QUEUED_BYTES);
        let (stderr, stderr_go_on, _, _) = stalled_queue(2, QUEUED_BYTES);
        assert!(stdout.write(b"never taken\n"));
        assert!(stderr.write(b"never taken\n"));
        let owed = [(&stdout, stdout.queued()), (&stderr, stderr.queued())];
        let since = wall_clock();
        let clock = std::cell::Cell::new(since);
        let overrun = |asked: Duration| clock.set(clock.get() + asked * 5);
        assert!(!wait_on(&owed, FLUSH_DEADLINE, || clock.get(), overrun), "nothing was written");
        let waited = clock.get() - since;
        assert!(
            FLUSH_DEADLINE <= waited && waited <= FLUSH_DEADLINE + Duration::from_millis(1),
            "{waited:?}"
        );
        drop((stdout_go_on, stderr_go_on));
    }

    /// The agent's last words (its fatal error, a panic's text, a forced stop's line) go into
    /// the reserve past a queue full of other lines, where they were dropped with them: a reader
    /// that is only slow gets them. The reserve is bounded too.
    #[test]
    fn last_words_are_queued_past_a_full_queue_and_the_reserve_is_bounded() {
        let (queue, go_on, wrote, told) = stalled_queue(2, 16);
        for _ in 0..5 {
            assert!(queue.write(b"busy\n"));
        }
        assert!(queue.write_reserved(b"Error: the last words, longer than the byte budget\n"));
        for _ in 0..RESERVED_LINES + 3 {
            assert!(queue.write_reserved(b"more\n"));
        }
        for _ in 0..RESERVED_LINES + 10 {
            let _ = go_on.send(());
        }
        let mut lines = Vec::new();
        while let Ok(line) = wrote.recv_timeout(Duration::from_secs(60)) {
            lines.push(String::from_utf8(line).unwrap());
            if lines.len() == 2 + RESERVED_LINES {
                break;
            }
        }
        assert_eq!(&lines[..3], ["busy\n", "busy\n", "Error: the last words, longer than the byte budget\n"]);
        assert_eq!(lines.len(), 2 + RESERVED_LINES, "the reserve holds {RESERVED_LINES} lines: {lines:?}");
        // Three plain lines dropped by the full queue, four reserved ones past the reserve.
        assert_eq!(told.recv_timeout(Duration::from_secs(60)), Ok(3 + 4));
    }

    #[test]
    fn a_queue_holds_at_most_its_bytes() {
        let (queue, go_on, wrote, told) = stalled_queue(100, 10);
        for line in [&b"first\n"[..], b"second\n", b"third\n"] {
            assert!(queue.write(line));
        }
        go_on.send(()).unwrap();
        assert_eq!(wrote.recv().unwrap(), b"first\n");
        assert_eq!(told.recv().unwrap(), 2);
        // A line longer than the whole budget still goes into an empty queue.
        let long = vec![b'x'; 100];
        assert!(queue.write(&long));
        go_on.send(()).unwrap();
        assert_eq!(wrote.recv().unwrap(), long);
    }

    /// A line dropped by a producer that read the counts while the writer was still at the
    /// queue's last line, and counted it once the writer had taken that line and read the count
    /// (a line of over half the byte budget dropped as the one before it is written, the last
    /// the agent logs), is said: the count waited for a line that never came.
    #[test]
    fn a_line_dropped_as_the_writer_takes_the_last_line_is_said() {
        let (queue, go_on, wrote, told) = stalled_queue(2, QUEUED_BYTES);
        assert!(queue.write(b"last\n"));
        go_on.send(()).unwrap();
        assert!(wait_for(&[(&queue, queue.queued())], Duration::from_secs(60)), "the line was written");
        assert_eq!(wrote.try_recv().ok(), Some(b"last\n".to_vec()));
        // The producer that found the queue full a moment ago counts its line only now.
        queue.dropped_one(&mut queue.sender.lock().unwrap());
        assert!(wait_for(&[(&queue, queue.queued())], Duration::from_secs(60)), "the count was said");
        assert_eq!(told.try_recv(), Ok(1), "the count of the line dropped last");
        assert!(wrote.try_recv().is_err(), "the wake-up is no line of the stream's");
    }

    type Hook = Box<dyn Fn(&std::panic::PanicHookInfo<'_>) + Sync + Send + 'static>;

    /// Swaps the process's panic hook, one test at a time.
    static HOOK: Mutex<()> = Mutex::new(());

    /// Runs `run` with the panics of threads named `thread` given to `ours`; other threads'
    /// panics (other tests') still go to the hook they had, which is put back afterwards.
    fn with_panics_of<T>(
        thread: &'static str,
        ours: impl Fn(&std::panic::PanicHookInfo<'_>) + Sync + Send + 'static,
        run: impl FnOnce() -> T,
    ) -> T {
        let _one = HOOK.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
        let previous: Arc<Hook> = Arc::new(std::panic::take_hook());
        let theirs = Arc::clone(&previous);
        std::panic::set_hook(Box::new(move |info| {
            if std::thread::current().name() == Some(thread) {
                ours(info);
            } else {
                theirs(info);
            }
        }));
        let ran = run();
        drop(std::panic::take_hook());
        std::panic::set_hook(Box::new(move |info| previous(info)));
        ran
    }

    /// A panic's text goes through the queue, so a stalled reader does not hold the panicking
    /// thread: the thread ends while the stream takes nothing, and its text comes out once the
    /// stream is read. (Before, the default hook wrote standard error in place.)
    #[test]
    fn a_panic_is_said_through_the_queue_without_waiting_for_the_stream() {
        let (queue, go_on, wrote, _told) = stalled_queue(16, QUEUED_BYTES);
        let queue = Arc::new(queue);
        let ours = Arc::clone(&queue);
        let say = move |info: &std::panic::PanicHookInfo<'_>| {
            say_panic(Some(&ours), &panic_text(info), false, |_| {});
        };
        let (own_id, its_id) = mpsc::channel();
        let ended = with_panics_of("panics-here", say, || {
            std::thread::Builder::new()
                .name("panics-here".into())
                .spawn(move || {
                    let _ = own_id.send(rustix::thread::gettid().as_raw_nonzero().get());
                    panic!("boom {}", 7)
                })
                .unwrap()
                .join()
        });
        assert!(ended.is_err(), "the thread panicked and ended, its stream still stalled");
        go_on.send(()).unwrap();
        let queued = wrote.recv_timeout(Duration::from_secs(60)).expect("the panic's text was queued");
        let text = String::from_utf8(queued).unwrap();
        let id = its_id.recv().unwrap();
        let said = format!("\nthread 'panics-here' ({id}) panicked at src/logging/queue.rs:");
        assert!(text.starts_with(&said), "the panicking thread's name and OS ID, as std says them: {text}");
        assert!(text.contains(":\nboom 7\n"), "{text}");
    }

    /// A panic of the queue's own writer thread is written in place: queued, it would wait for
    /// the thread that is ending, and never come out.
    #[test]
    fn a_panic_of_the_writer_thread_is_written_in_place() {
        let queue = Queue::spawn("panicky", 16, QUEUED_BYTES, |_| panic!("the writer broke"), |_| Vec::new())
            .unwrap();
        let queue = Arc::new(queue);
        let (in_place, wrote) = mpsc::channel::<Vec<u8>>();
        let in_place = Mutex::new(in_place);
        let ours = Arc::clone(&queue);
        let say = move |info: &std::panic::PanicHookInfo<'_>| {
            say_panic(Some(&ours), &panic_text(info), false, |text| {
                let _ = in_place.lock().unwrap_or_else(|poisoned| poisoned.into_inner()).send(text.to_vec());
            });
        };
        let text = with_panics_of("panicky-writer", say, || {
            assert!(queue.write(b"the line that breaks it\n"));
            wrote.recv_timeout(Duration::from_secs(60))
        });
        let text = String::from_utf8(text.expect("the writer's panic was written in place")).unwrap();
        assert!(text.starts_with("\nthread 'panicky-writer' ("), "{text}");
        assert!(text.contains(") panicked at src/logging/queue.rs:"), "{text}");
        assert!(text.contains(":\nthe writer broke\n"), "{text}");
    }

    /// A writer that panics at each line (standard output's, whose panics are said on standard
    /// error) says its first panic in standard error's reserve for last words, the others as any
    /// line: with standard error's queue full, its panics used the whole reserve within 16
    /// lines, and the agent's last words after them were dropped.
    #[test]
    fn a_writer_panicking_at_each_line_leaves_the_reserve_to_last_words() {
        let (stderr, go_on, wrote, told) = stalled_queue(2, QUEUED_BYTES);
        for _ in 0..2 {
            assert!(stderr.write(b"busy\n"));
        }
        let stderr = Arc::new(stderr);
        let ours = Arc::clone(&stderr);
        let say = move |info: &std::panic::PanicHookInfo<'_>| {
            say_panic(Some(&ours), &panic_text(info), false, |_| {});
        };
        let broken =
            Queue::spawn("broken", 100, QUEUED_BYTES, |_| panic!("the stdout writer broke"), |_| Vec::new())
                .unwrap();
        with_panics_of("broken-writer", say, || {
            for _ in 0..RESERVED_LINES + 4 {
                assert!(broken.write(b"breaks\n"));
            }
            assert!(wait_for(&[(&broken, broken.queued())], Duration::from_secs(60)), "every line broke it");
        });
        assert!(stderr.write_reserved(b"Error: the last words\n"));
        let owed = [(&*stderr, stderr.queued())];
        drop(go_on);
        assert!(wait_for(&owed, Duration::from_secs(60)), "standard error was read");
        let lines: Vec<String> = wrote.try_iter().map(|line| String::from_utf8(line).unwrap()).collect();
        let starts: Vec<String> = lines.iter().map(|line| line.chars().take(40).collect()).collect();
        assert_eq!(lines.len(), 4, "{starts:?}");
        assert_eq!(&lines[..2], ["busy\n", "busy\n"]);
        assert!(lines[2].contains(":\nthe stdout writer broke\n"), "the first panic is said: {starts:?}");
        assert_eq!(lines[3], "Error: the last words\n");
        assert_eq!(told.try_recv(), Ok(RESERVED_LINES as u64 + 3), "the later panics dropped, counted");
    }

    /// The note on backtraces is said at the process's first panic only, as std's own hook
    /// says it; a captured backtrace is said at every panic.
    #[test]
    fn the_backtrace_note_is_said_once_and_a_backtrace_each_time() {
        let panic = |first, backtrace: Option<&str>| Panicked {
            thread: "main",
            thread_id: 4242,
            location: "src/main.rs:1:5".into(),
            message: "boom",
            backtrace: backtrace.map(String::from),
            first,
        };
        assert_eq!(
            said_of_a_panic(&panic(true, None)),
            "\nthread 'main' (4242) panicked at src/main.rs:1:5:\nboom\n\
             note: run with `RUST_BACKTRACE=1` environment variable to display a backtrace\n"
        );
        assert_eq!(
            said_of_a_panic(&panic(false, None)),
            "\nthread 'main' (4242) panicked at src/main.rs:1:5:\nboom\n"
        );
        assert_eq!(
            said_of_a_panic(&panic(false, Some("   0: main"))),
            "\nthread 'main' (4242) panicked at src/main.rs:1:5:\nboom\nstack backtrace:\n   0: main\n"
        );
    }

    /// The main thread's wait for a panic's text is where the panic leaves it, not in the hook
    /// (tokio catches a task's panic on the main thread and the agent goes on): once, after the
    /// panic, which then goes on with its payload; never without one.
    #[test]
    fn a_panic_that_leaves_main_is_waited_for_once_and_goes_on() {
        let waited = std::cell::Cell::new(0);
        assert_eq!(on_panic_of(|| 7, || waited.set(waited.get() + 1)), 7);
        assert_eq!(waited.get(), 0, "no panic, no wait");
        let ended = with_panics_of(
            "leaves-main",
            |_| {},
            || {
                std::thread::Builder::new()
                    .name("leaves-main".into())
                    .spawn(|| {
                        let waited = std::cell::Cell::new(0);
                        let went_on = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                            on_panic_of(|| -> () { panic!("boom") }, || waited.set(waited.get() + 1))
                        }));
                        (
                            waited.get(),
                            went_on.err().and_then(|p| p.downcast_ref::<&str>().map(|s| s.to_string())),
                        )
                    })
                    .unwrap()
                    .join()
                    .unwrap()
            },
        );
        assert_eq!(ended, (1, Some("boom".to_owned())));
    }

    /// Panics when dropped: while a panic unwinds, that aborts the process.
    struct PanicsOnDrop;

    impl Drop for PanicsOnDrop {
        fn drop(&mut self) {
            panic!("the destructor's panic");
        }
    }

    /// A standard error queue whose every line takes the stream 100 ms.
    fn slow_stderr() -> Queue {
        let slow = |line: &[u8]| {
            std::thread::sleep(Duration::from_millis(100));
            write_in_place(Stream::Stderr, line);
        };
        Queue::spawn("stderr", QUEUED_LINES, QUEUED_BYTES, slow, |_| Vec::new()).unwrap()
    }

    /// Runs `test` of this test binary again in a child process, with `child` set, and gives
    /// its output once it has ended.
    fn child_output(test: &str, child: &str) -> std::process::Output {
        std::process::Command::new(std::env::current_exe().unwrap())
            .args(["--exact", test, "--nocapture", "--test-threads=1"])
            .env(child, "1")
            .output()
            .unwrap()
    }

    /// Runs `test` of this test binary again in a child process, with `child` set, and gives
    /// its standard error once it has aborted.
    fn aborted_child_stderr(test: &str, child: &str) -> String {
        let output = child_output(test, child);
        let text = String::from_utf8_lossy(&output.stderr).into_owned();
        assert!(!output.status.success(), "the child aborted: {text}");
        text
    }

    /// Set for the run of this test binary that
    /// [`a_panic_that_aborts_on_a_writer_thread_is_written_before_the_abort`] starts.
    const ABORTING_WRITER_CHILD: &str = "PROBELET_TEST_ABORTING_WRITER_CHILD";

    /// A panic that aborts on standard output's writer thread is said through standard error's
    /// queue, which the abort waits for, though each line takes that stream 100 ms; it waits
    /// for its own stream no more (it would wait the whole deadline for itself). Run in a child
    /// process (this test binary again), which aborts.
    #[test]
    fn a_panic_that_aborts_on_a_writer_thread_is_written_before_the_abort() {
        if std::env::var_os(ABORTING_WRITER_CHILD).is_some() {
            assert!(STDERR.set(slow_stderr()).is_ok(), "the child's own queue");
            let breaks = |_: &[u8]| {
                let _armed = PanicsOnDrop;
                panic!("the stdout writer's panic");
            };
            let stdout = Queue::spawn("stdout", QUEUED_LINES, QUEUED_BYTES, breaks, |_| Vec::new()).unwrap();
            assert!(STDOUT.set(stdout).is_ok(), "the child's own queue");
            queue_panics();
            write(Stream::Stdout, b"the line that breaks it\n");
            // The abort ends the process.
            loop {
                std::thread::park();
            }
        }
        let text = aborted_child_stderr(
            "logging::queue::tests::a_panic_that_aborts_on_a_writer_thread_is_written_before_the_abort",
            ABORTING_WRITER_CHILD,
        );
        assert!(text.contains("thread 'stdout-writer' ("), "{text}");
        assert!(text.contains(":\nthe stdout writer's panic\n"), "{text}");
        assert!(text.contains(":\nthe destructor's panic\n"), "{text}");
    }

    /// Set for the run of this test binary that
    /// [`a_panic_that_aborts_is_written_before_the_abort`] starts.
    const ABORTING_CHILD: &str = "PROBELET_TEST_ABORTING_PANIC_CHILD";

    /// A panic in a destructor while a panic unwinds aborts the process right after the hook:
    /// the queued texts (the first panic's, the destructor's) are written before it, within the
    /// exit's deadline, though each line takes the stream 100 ms. Run in a child process (this
    /// test binary again), which aborts.
    #[test]
    fn a_panic_that_aborts_is_written_before_the_abort() {
        if std::env::var_os(ABORTING_CHILD).is_some() {
            assert!(STDERR.set(slow_stderr()).is_ok(), "the child's own queue");
            queue_panics();
            let _armed = PanicsOnDrop;
            panic!("the first panic");
        }
        let text = aborted_child_stderr(
            "logging::queue::tests::a_panic_that_aborts_is_written_before_the_abort",
            ABORTING_CHILD,
        );
        assert!(text.contains(":\nthe first panic\n"), "{text}");
        assert!(text.contains(":\nthe destructor's panic\n"), "{text}");
    }

    /// Set for the run of this test binary that
    /// [`the_dropped_count_is_said_past_last_words_in_a_full_queue`] starts.
    const DROPPED_CHILD: &str = "PROBELET_TEST_DROPPED_COUNT_CHILD";

    /// Both streams' queues full (two lines here), the agent's last words in the reserve past
    /// them, and more lines dropped while its exit waits: each stream says how many it dropped,
    /// in its own words, before the exit. The count was a line like any other, dropped in its
    /// turn by the full queue: a reader learnt of one line lost, after the last words or never.
    /// Run in a child process (this test binary again), which has queues of its own.
    #[test]
    fn the_dropped_count_is_said_past_last_words_in_a_full_queue() {
        if std::env::var_os(DROPPED_CHILD).is_some() {
            let mut gates = Vec::new();
            for stream in [Stream::Stdout, Stream::Stderr] {
                let (go_on, gate) = mpsc::channel::<()>();
                let stalled = move |line: &[u8]| {
                    let _ = gate.recv();
                    write_in_place(stream, line);
                };
                assert!(
                    slot(stream).set(spawn_stream(stream, 2, stalled).unwrap()).is_ok(),
                    "the child's own"
                );
                gates.push(go_on);
            }
            let log =
                tracing_subscriber::fmt().with_writer(QueuedStderr).with_ansi(false).without_time().finish();
            tracing::subscriber::set_global_default(log).unwrap();
            for stream in [Stream::Stdout, Stream::Stderr] {
                for _ in 0..5 {
                    write(stream, b"busy\n");
                }
                write_reserved(stream, b"last words\n");
                // Other threads' lines, while the exit waits.
                for _ in 0..4 {
                    write(stream, b"later\n");
                }
            }
            drop(gates);
            exit(0);
        }
        let output = child_output(
            "logging::queue::tests::the_dropped_count_is_said_past_last_words_in_a_full_queue",
            DROPPED_CHILD,
        );
        let stdout = String::from_utf8_lossy(&output.stdout);
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert!(output.status.success(), "{stdout}\n{stderr}");
        assert!(
            stdout.contains(
                "busy\nprobelet: 7 console line(s) dropped: standard output was not being read\nbusy\nlast words\n"
            ),
            "{stdout}"
        );
        assert!(
            stderr.contains(" WARN probelet::logging::queue: log lines dropped: standard error was not being read dropped=7\nbusy\nlast words\n"),
            "{stderr}"
        );
        assert!(!stdout.contains("later") && !stderr.contains("later"), "{stdout}\n{stderr}");
    }

    /// Set for the run of this test binary that
    /// [`an_exit_says_on_standard_error_the_console_lines_it_leaves_unwritten`] starts.
    const CONSOLE_LOST_CHILD: &str = "PROBELET_TEST_CONSOLE_LOST_CHILD";

    /// Standard output stalled (a queue of two lines here), its exit's wait runs out: standard
    /// error says how many console lines the exit leaves, the one being written, the one queued
    /// and the one dropped. An orderly stop's console lines were lost without a word. Run in a
    /// child process (this test binary again), which has queues of its own.
    #[test]
    fn an_exit_says_on_standard_error_the_console_lines_it_leaves_unwritten() {
        if std::env::var_os(CONSOLE_LOST_CHILD).is_some() {
            let (_stalled, gate) = mpsc::channel::<()>();
            let stalled = move |line: &[u8]| {
                let _ = gate.recv();
                write_in_place(Stream::Stdout, line);
            };
            assert!(STDOUT.set(spawn_stream(Stream::Stdout, 2, stalled).unwrap()).is_ok(), "the child's own");
            let stderr =
                spawn_stream(Stream::Stderr, QUEUED_LINES, |line| write_in_place(Stream::Stderr, line));
            assert!(STDERR.set(stderr.unwrap()).is_ok(), "the child's own");
            let log =
                tracing_subscriber::fmt().with_writer(QueuedStderr).with_ansi(false).without_time().finish();
            tracing::subscriber::set_global_default(log).unwrap();
            for line in ["stopping\n", "stopped web\n", "stopped\n"] {
                write(Stream::Stdout, line.as_bytes());
            }
            write(Stream::Stderr, b"the log goes on\n");
            flush(Duration::from_millis(100));
            std::process::exit(0);
        }
        let output = child_output(
            "logging::queue::tests::an_exit_says_on_standard_error_the_console_lines_it_leaves_unwritten",
            CONSOLE_LOST_CHILD,
        );
        let stdout = String::from_utf8_lossy(&output.stdout);
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert!(output.status.success(), "{stdout}\n{stderr}");
        assert!(!stdout.contains("stopped"), "{stdout}");
        assert!(
            stderr.contains(
                "the log goes on\n WARN probelet::logging::queue: console lines dropped: standard output was not being read dropped=3\n"
            ),
            "{stderr}"
        );
    }

    /// A write that panics, or a dropped lines' notice that does (a formatting bug), loses its
    /// line but not the writer: the lines before and after are written, and an exit waits for
    /// them, not for a thread that has ended. Before, the writer thread ended: every line
    /// queued was lost with it, and each exit waited the whole deadline.
    #[test]
    fn a_writer_goes_on_past_a_panic_of_its_own() {
        let (go_on, gate) = mpsc::channel::<()>();
        let (written, wrote) = mpsc::channel::<Vec<u8>>();
        let breaks = move |line: &[u8]| {
            let _ = gate.recv();
            assert_ne!(line, b"breaks\n", "the write broke");
            let _ = written.send(line.to_vec());
        };
        let queue = Queue::spawn("goes-on", 2, QUEUED_BYTES, breaks, |_| panic!("the notice broke")).unwrap();
        with_panics_of(
            "goes-on-writer",
            |_| {},
            || {
                assert!(queue.write(b"one\n"));
                assert!(queue.write(b"breaks\n"));
                assert!(queue.write(b"dropped\n"));
                let owed = [(&queue, queue.queued())];
                drop(go_on);
                wait_for(&owed, Duration::from_secs(10));
                assert_eq!(queue.written(), 2, "both lines done, the broken one too");
                assert!(queue.write(b"two\n"), "the writer is still there");
            },
        );
        assert_eq!(wrote.recv_timeout(Duration::from_secs(60)).ok(), Some(b"one\n".to_vec()));
        assert_eq!(wrote.recv_timeout(Duration::from_secs(60)).ok(), Some(b"two\n".to_vec()));
    }
}
