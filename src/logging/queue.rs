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
use std::sync::OnceLock;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc::{self, SyncSender, TrySendError};
use std::time::Duration;

/// Lines held for a stream that does not take them, at most: about 1 MiB of log lines.
pub const QUEUED_LINES: usize = 4096;

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

/// One stream's queue and its writer thread.
struct Queue {
    sender: SyncSender<Vec<u8>>,
    /// Lines given to the queue so far (written, dropped or still queued).
    given: AtomicU64,
    /// Lines done with so far: written (or failed to be), or dropped.
    done: AtomicU64,
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
        let (sender, receiver) = mpsc::sync_channel::<Vec<u8>>(QUEUED_LINES);
        let spawned = std::thread::Builder::new()
            .name(format!("{}-writer", name(stream)))
            .spawn(move || write_lines(stream, receiver));
        if spawned.is_ok() {
            let queue = Queue {
                sender,
                given: AtomicU64::new(0),
                done: AtomicU64::new(0),
                dropped: AtomicU64::new(0),
            };
            let _ = slot(stream).set(queue);
        }
    }
}

fn name(stream: Stream) -> &'static str {
    match stream {
        Stream::Stdout => "stdout",
        Stream::Stderr => "stderr",
    }
}

/// The writer thread of `stream`: each line as it comes, then what was dropped meanwhile.
fn write_lines(stream: Stream, receiver: mpsc::Receiver<Vec<u8>>) {
    while let Ok(line) = receiver.recv() {
        write_in_place(stream, &line);
        let Some(queue) = slot(stream).get() else { continue };
        queue.done.fetch_add(1, Ordering::SeqCst);
        let dropped = queue.dropped.swap(0, Ordering::SeqCst);
        if dropped > 0 {
            // Told on the stream that lost them, once it takes lines again; a log line goes
            // through the log's own format (text or JSON), queued like any other.
            match stream {
                Stream::Stderr => {
                    tracing::warn!(dropped, "log lines dropped: standard error was not being read")
                }
                Stream::Stdout => crate::host::console::say(format_args!(
                    "probelet: {dropped} console line(s) dropped: standard output was not being read"
                )),
            }
        }
    }
}

fn write_in_place(stream: Stream, bytes: &[u8]) {
    // A failed write (a closed terminal's EIO, a reader gone) drops the line.
    let _ = match stream {
        Stream::Stdout => io::stdout().lock().write_all(bytes),
        Stream::Stderr => io::stderr().lock().write_all(bytes),
    };
}

/// Writes `bytes` (whole lines) to `stream` through its queue, or in place before [`start`].
/// Never waits for the stream: a full queue drops the line and counts it.
pub fn write(stream: Stream, bytes: &[u8]) {
    let Some(queue) = slot(stream).get() else {
        write_in_place(stream, bytes);
        return;
    };
    queue.given.fetch_add(1, Ordering::SeqCst);
    match queue.sender.try_send(bytes.to_vec()) {
        Ok(()) => {}
        Err(TrySendError::Full(_)) => {
            queue.dropped.fetch_add(1, Ordering::SeqCst);
            queue.done.fetch_add(1, Ordering::SeqCst);
        }
        Err(TrySendError::Disconnected(_)) => {
            write_in_place(stream, bytes);
            queue.done.fetch_add(1, Ordering::SeqCst);
        }
    }
}

/// Waits, at most `deadline`, for the lines both streams were given before this call to be
/// written: an agent about to exit says its last lines, but a stream nobody reads does not keep
/// it from exiting. Lines given meanwhile (other threads go on until the exit) are not waited
/// for, so the wait is only as long as the writes it owes: a forced stop's last line out, the
/// agent exits before its main thread can start anything more.
pub fn flush(deadline: Duration) {
    let owed: Vec<(&Queue, u64)> = [Stream::Stdout, Stream::Stderr]
        .iter()
        .filter_map(|stream| slot(*stream).get())
        .map(|queue| (queue, queue.given.load(Ordering::SeqCst)))
        .collect();
    let step = Duration::from_micros(200);
    let mut waited = Duration::ZERO;
    while owed.iter().any(|(queue, given)| queue.done.load(Ordering::SeqCst) < *given) && waited < deadline {
        std::thread::sleep(step);
        waited += step;
    }
}

/// Flushes both streams (at most [`FLUSH_DEADLINE`]) and exits with `code`.
pub fn exit(code: i32) -> ! {
    flush(FLUSH_DEADLINE);
    std::process::exit(code)
}

/// The log's writer for tracing's fmt layer: each event is one `write` of its whole line.
#[derive(Clone, Copy, Debug, Default)]
pub struct QueuedStderr;

impl io::Write for QueuedStderr {
    fn write(&mut self, bytes: &[u8]) -> io::Result<usize> {
        write(Stream::Stderr, bytes);
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
