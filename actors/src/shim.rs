//! The container shim: a small parent process between the agent and each local command, so that
//! stopping a container (or the end of an exec probe) stops everything the command started,
//! including processes that left its process group (`setsid`, a double-forked daemon). It owns
//! both sides of the protocol: [`run`], the shim's own `main` (the agent binary's hidden
//! `probelet container-shim [--wait-for-go] -- PROGRAM ARGS...`), and the helpers the agent's
//! runtime and [`crate::local_runner`] use to start it and read its report.
//!
//! Upstream a container runtime kills a container's whole PID namespace (cgroup) when its main
//! process exits or when it is killed; containerd keeps a shim per container for that and for
//! the exit status. This shim plays that part for a local process:
//!
//! - It is a child subreaper (`PR_SET_CHILD_SUBREAPER`): every orphaned descendant re-parents to
//!   it, never to init, so every process the command started is a child of the shim or of one of
//!   its descendants, whatever group or session it moved to.
//! - It runs PROGRAM in its own process group (the agent spawns the shim as a group leader), with
//!   standard input from `/dev/null` and the shim's standard output and error, environment and
//!   working directory. A recorded container's PROGRAM also gets [`MARK_ENV`], so that what it
//!   starts is known as the container's even after the shim itself was killed.
//! - It survives SIGTERM (the agent's graceful stop signals the whole group; PROGRAM gets it
//!   directly, or from the shim when PROGRAM left the group, as a runtime signals a
//!   container's main process). Other signals that would kill or stop it (a container's
//!   `kill -HUP 0`, the hang-up of an orphaned group) are caught and dropped: a container
//!   runtime's shim stands outside the container's group and never gets them. SIGUSR1
//!   ([`crate::process::Signal::KillTree`]) from an agent tells it to kill everything now: from
//!   its parent, or from any process that is not one of its own descendants (the next agent,
//!   after a crash). The same signal from inside the container (`kill -USR1 0` signals the whole
//!   group, and a program with a SIGUSR1 handler, such as nginx reopening its logs, lives
//!   through it) is dropped like the others: the sender, read from the signal's `siginfo`, is
//!   then a descendant of the shim, which is a subreaper, whatever group or session it is in.
//! - When PROGRAM exits, or on SIGUSR1, it SIGKILLs every remaining descendant and reaps them,
//!   then ends as PROGRAM ended: the same exit code, or killed by the same signal (re-raised
//!   after an `exec` of itself with `--raise-signal`, which resets the caught signal handlers to
//!   their defaults), so the agent reports exit code 143 and signal 15 for a SIGTERMed container
//!   exactly as without the shim.
//!
//! **The start barrier** (`--wait-for-go`): the agent records the shim's process group and start
//! time in its state directory *before* anything runs, then writes one byte on the shim's
//! standard input. The shim reads until that byte or end of file; end of file without the byte
//! means the agent died before it recorded the container, and the shim exits at once with
//! [`NO_GO_EXIT_CODE`] without running anything. So an agent killed at any moment of a start
//! leaves either nothing running or a recorded group the next agent kills.
//!
//! **The report**: when its standard input is a socket, the shim writes one line on it once it
//! has tried to start PROGRAM: `started`, or `failed <errno> <message>`; the agent turns the
//! latter into the start error it reported before the shim existed (`executable file not found
//! in $PATH`, ...). The shim then exits with [`START_FAILED_EXIT_CODE`]. After `started` the
//! socket stays open: the byte [`KILL_TREE`] on it is the agent's order to kill the tree, as
//! its SIGUSR1 is, but one the container cannot drown ([`ask_to_kill_tree`]).
//!
//! The shim uses no actix and no logging: only a current-thread tokio runtime for its signals,
//! `wait` (any child: `wait4(-1)`) through rustix for reaping (never `tokio::process`, whose reaper
//! would race it), and `/proc` to list its children when the command left any.

use std::ffi::OsString;
use std::io::{self, Read, Write};
use std::os::fd::AsFd;
use std::os::unix::net::UnixStream;
use std::os::unix::process::CommandExt as _;
use std::path::Path;
use std::process::Stdio;
use std::time::Duration;

use futures::StreamExt as _;
use rustix::io::Errno;
use rustix::process::{Pid, Signal, WaitOptions, WaitStatus, getpid, kill_process, wait};
use signal_hook::iterator::exfiltrator::WithOrigin;
use signal_hook::low_level::siginfo::{Cause, Sent};
use signal_hook_tokio::SignalsInfo;
use tokio::signal::unix::{SignalKind, signal};

use crate::gofmt::{go_errno_text, go_quote};
use crate::process::{ProcessStat, children};

/// The hidden subcommand of the agent binary that runs the shim.
pub const SUBCOMMAND: &str = "container-shim";
/// The flag that makes the shim wait for the go byte on its standard input.
pub const WAIT_FOR_GO: &str = "--wait-for-go";
/// The flag that ties the shim to the process that started it (an exec probe's): once that
/// process is no longer its parent, the shim kills the command and everything it started.
pub const PARENT: &str = "--parent";
/// How often a shim tied to its parent looks whether the parent is still there.
const PARENT_CHECK: Duration = Duration::from_secs(1);
/// The flag of the shim's re-exec of itself that dies of a signal (internal).
pub const RAISE_SIGNAL: &str = "--raise-signal";
/// The shim's exit code when its standard input closed before the go byte: nothing ran.
pub const NO_GO_EXIT_CODE: i32 = 121;
/// The shim's exit code when PROGRAM could not be started (a shell's "command not found").
pub const START_FAILED_EXIT_CODE: i32 = 127;
/// The go byte.
pub const GO: u8 = b'g';
/// The environment variable a recorded container's shim (`--wait-for-go`) sets for PROGRAM, and
/// so for everything PROGRAM starts that keeps its environment: [`mark`] of the shim. A process
/// that left the container's group (`setsid`, a double-forked daemon) is still known by it as
/// the container's, after both the agent and the shim died; the next agent kills what carries
/// the mark of a record it finds (`docs/reliability.md`, "The agent's crash never leaves two
/// copies of a container").
pub const MARK_ENV: &str = "PROBELET_CONTAINER_MARK";

/// The mark of the container whose shim is process `pgid`, started at `start` (its
/// [`crate::process::start_time`]): the pair names one process group of one boot.
pub fn mark(pgid: u32, start: u64) -> String {
    format!("{pgid}:{start}")
}

/// The group ID and start time a [`mark`] names; `None` for a text that is no mark.
pub fn parse_mark(mark: &str) -> Option<(u32, u64)> {
    let (pgid, start) = mark.split_once(':')?;
    Some((pgid.parse().ok()?, start.parse().ok()?))
}
/// The byte the agent writes on the control socket to ask the shim to kill its tree, as
/// SIGUSR1 asks: a container can drown a signal (it merges with the container's own SIGUSR1s,
/// and a flood of them lost the agent's 18 times in 20), not this socket, which no process of
/// the container holds or can open through `/proc`, and which the shim, not dumpable, keeps from
/// a container that would copy it (`pidfd_getfd`) unless that container may ptrace as root.
pub const KILL_TREE: u8 = b'k';

/// The byte the shim writes on the control socket once it has killed its whole tree, right
/// before it ends: nothing the container started runs any more. A shim that was killed never
/// writes it, and then the agent looks for what carries its mark (`docs/reliability.md`).
pub const TREE_KILLED: u8 = b'd';

/// Whether the shim at the other end of `control` said it killed its whole tree
/// ([`TREE_KILLED`]); read once its process has ended. Never blocks.
pub fn said_tree_killed(control: &impl AsFd) -> bool {
    let mut byte = [0u8];
    matches!(
        rustix::net::recv(control, &mut byte, rustix::net::RecvFlags::DONTWAIT),
        Ok((1, _)) if byte[0] == TREE_KILLED
    )
}

/// Asks the shim at the other end of `control` (kept from [`Report::read`]) to kill its tree.
/// Never blocks; `false` when the request could not be written (the shim has ended, or a
/// request is already waiting unread). Never raises SIGPIPE.
pub fn ask_to_kill_tree(control: &impl AsFd) -> bool {
    use rustix::net::SendFlags;
    rustix::net::send(control, &[KILL_TREE], SendFlags::NOSIGNAL | SendFlags::DONTWAIT).is_ok()
}

/// How long a shim asked to kill its tree (SIGUSR1) is given before its group is SIGKILLed as
/// a backstop (which would kill the shim itself): it needs milliseconds.
pub const TREE_KILL_WAIT: Duration = Duration::from_secs(1);

/// At most this many processes are reaped while killing the tree. Every round reaps one process
/// that has ended, or else SIGKILLs all the shim's live children and then reaps one process, so
/// each round ends a process; a SIGKILLed process cannot fork again, and a grandchild still
/// running re-parents to the shim when its parent dies and is killed in a later round. The tree is therefore gone after as many rounds
/// as it has processes, unless something keeps forking faster than it is killed (a fork bomb
/// outside the group): the bound stops the shim then, and the agent's SIGKILL to the group
/// ends the rest of the group.
const MAX_REAPS: usize = 100_000;

/// The arguments that run `PROGRAM ARGS...` under the shim (after the shim's own path); with
/// `parent`, the shim ends everything once that process is not its parent any more.
pub fn shim_args(wait_for_go: bool, parent: Option<u32>, program: &Path, args: &[String]) -> Vec<OsString> {
    let mut argv = vec![OsString::from(SUBCOMMAND)];
    if wait_for_go {
        argv.push(WAIT_FOR_GO.into());
    }
    if let Some(parent) = parent {
        argv.push(PARENT.into());
        argv.push(parent.to_string().into());
    }
    argv.push("--".into());
    argv.push(program.as_os_str().to_owned());
    argv.extend(args.iter().map(OsString::from));
    argv
}

/// The start error of `program` as runc words it (`exec: "<name>": executable file not found
/// in $PATH`): the core of what containerd reports for a container or an exec that could not
/// start.
pub fn runc_start_error(program: &str, e: &io::Error) -> String {
    let quoted = go_quote(program);
    match e.kind() {
        io::ErrorKind::NotFound if !program.contains('/') => {
            format!("exec: {quoted}: executable file not found in $PATH")
        }
        io::ErrorKind::NotFound => format!("exec: {quoted}: stat {program}: no such file or directory"),
        io::ErrorKind::PermissionDenied => format!("exec: {quoted}: permission denied"),
        // In Go's words, as runc prints it: `resource temporarily unavailable` when no process
        // could be forked, not Rust's `Resource temporarily unavailable (os error 11)`.
        _ => format!("exec: {quoted}: {}", go_errno_text(e)),
    }
}

/// The longest report line read: a report is a word and an error's text.
const REPORT_MAX: u64 = 4096;

/// What the shim reported about starting PROGRAM.
#[derive(Debug)]
pub enum Report {
    /// PROGRAM runs.
    Started,
    /// PROGRAM could not be started: the error `spawn` returned.
    Failed(io::Error),
}

impl Report {
    fn line(result: Result<(), &io::Error>) -> String {
        match result {
            Ok(()) => "started\n".to_owned(),
            Err(e) => {
                let message = e.to_string().replace('\n', " ");
                format!("failed {} {message}\n", e.raw_os_error().unwrap_or(-1))
            }
        }
    }

    /// Parses a report line; `None` for anything else (the shim died before reporting).
    pub fn parse(line: &str) -> Option<Report> {
        let line = line.trim_end_matches('\n');
        if line == "started" {
            return Some(Report::Started);
        }
        let (errno, message) = line.strip_prefix("failed ")?.split_once(' ')?;
        let errno: i32 = errno.parse().ok()?;
        // The same error `spawn` returned in the shim: its kind and text are what the start
        // error shows.
        Some(Report::Failed(if errno > 0 {
            io::Error::from_raw_os_error(errno)
        } else {
            io::Error::other(message)
        }))
    }

    /// Reads the report from the agent's end of the shim's standard input, up to `wait`, on
    /// the runtime's reactor with no thread of its own: a burst of thousands of container
    /// starts waits for their reports without a thread each (or a queue behind a pool of
    /// them), and a system that can make no thread (its pids cgroup full) cannot fail a start
    /// that way. After `wait`, the error a read's timeout gives (`EAGAIN`). Call from within a
    /// tokio runtime. With the report, the socket back: keep it to ask the shim to kill its
    /// tree ([`ask_to_kill_tree`]) while PROGRAM runs.
    pub async fn read(control: UnixStream, wait: Duration) -> io::Result<(Report, UnixStream)> {
        match tokio::time::timeout(wait, Report::receive(control)).await {
            Ok(read) => read,
            Err(_) => Err(io::Error::from_raw_os_error(Errno::AGAIN.raw_os_error())),
        }
    }

    /// [`Report::read`] without a wait of its own.
    pub async fn receive(control: UnixStream) -> io::Result<(Report, UnixStream)> {
        use tokio::io::{AsyncBufReadExt as _, AsyncReadExt as _};
        control.set_nonblocking(true)?;
        let control = tokio::net::UnixStream::from_std(control)?;
        let mut line = String::new();
        // A byte at a time: what follows the report on the socket ([`TREE_KILLED`], from a
        // command that has ended already) stays there for [`said_tree_killed`], where a
        // buffered read would take it and drop it with the buffer.
        let mut reader = tokio::io::BufReader::with_capacity(1, control).take(REPORT_MAX);
        reader.read_line(&mut line).await?;
        let report = Report::from_line(&line)?;
        // Only a plain descriptor is kept (nothing registered with the reactor).
        let control = reader.into_inner().into_inner().into_std()?;
        Ok((report, control))
    }

    fn from_line(line: &str) -> io::Result<Report> {
        Report::parse(line).ok_or_else(|| {
            io::Error::new(
                io::ErrorKind::UnexpectedEof,
                "the container shim exited before starting the process",
            )
        })
    }
}

/// The shim's `main`: runs `command` as described in the module doc and returns the exit code
/// (or does not return: it dies of PROGRAM's signal). With `parent`, it kills everything and
/// ends once that process is no longer its parent: an exec probe's processes must not outlive
/// an agent that was killed (nothing else would end them; a container's are recorded and
/// killed by the next agent instead).
pub fn run(wait_for_go: bool, parent: Option<u32>, command: &[OsString]) -> i32 {
    let Some((program, args)) = command.split_first() else {
        eprintln!("container-shim: no command given");
        return START_FAILED_EXIT_CODE;
    };
    // Any non-zero argument makes this process a subreaper.
    if let Err(error) = rustix::process::set_child_subreaper(Some(getpid())) {
        eprintln!("container-shim: cannot become a child subreaper, orphans will escape: {error}");
    }
    // Not dumpable: a process of the container running as the same user cannot ptrace the
    // shim, nor take a copy of its control socket (`pidfd_getfd`) and read the agent's kill
    // request off it before the shim does (a hostile test did, with a SIGUSR1 flood beside it,
    // and only the orphan sweep ended its tree). PROGRAM is dumpable again after its `exec`.
    // A container with CAP_SYS_PTRACE still can; it can only delay its own end that way.
    let _ = rustix::process::set_dumpable_behavior(rustix::process::DumpableBehavior::NotDumpable);
    let runtime = match tokio::runtime::Builder::new_current_thread().enable_all().build() {
        Ok(runtime) => runtime,
        Err(error) => {
            eprintln!("container-shim: cannot start: {error}");
            return START_FAILED_EXIT_CODE;
        }
    };
    let _entered = runtime.enter();
    // Handlers first: from here on the group's SIGTERM cannot kill the shim, and no SIGCHLD of
    // PROGRAM can be missed.
    let signals = (
        signal(SignalKind::terminate()),
        signal(SignalKind::child()),
        SignalsInfo::<WithOrigin>::new([Signal::USR1.as_raw()]),
    );
    let (Ok(mut term), Ok(mut child), Ok(mut kill)) = signals else {
        eprintln!("container-shim: cannot handle signals");
        return START_FAILED_EXIT_CODE;
    };
    // The shim shares PROGRAM's process group, where a container runtime's shim stands outside
    // it: a signal the container sends its own group (`kill -HUP 0`), or the hang-up the kernel
    // sends an orphaned group, reaches the shim too and must not kill or stop it. Caught and
    // dropped; PROGRAM got it directly, and a caught signal is back to its default in PROGRAM
    // after `exec`.
    let _ignored: Vec<_> =
        IGNORED_SIGNALS.iter().filter_map(|s| signal(SignalKind::from_raw(s.as_raw())).ok()).collect();
    let mut control = control_socket();
    // The agent that started the shim: what a SIGUSR1's sender is judged by. It is the one
    // named (an exec probe's), or the one that made the control socket (a container's: the
    // kernel keeps the maker of a socket pair as each end's peer, so it is known even if the
    // agent died before the shim got this far), or the parent.
    let agent = parent
        .and_then(|pid| Pid::from_raw(i32::try_from(pid).ok()?))
        // Only under the agent's start barrier, where the agent made the pair in this PID
        // namespace: a peer in another one reads as PID 0, which rustix cannot hold.
        .or_else(|| {
            Some(rustix::net::sockopt::socket_peercred(control.as_ref().filter(|_| wait_for_go)?).ok()?.pid)
        })
        .or_else(rustix::process::getppid);
    if wait_for_go && !go_received() {
        return NO_GO_EXIT_CODE;
    }
    let orphaned = move || {
        parent
            .is_some_and(|parent| u32::try_from(Pid::as_raw(rustix::process::getppid())).ok() != Some(parent))
    };
    if orphaned() {
        // The agent is gone already: run nothing.
        return NO_GO_EXIT_CODE;
    }
    let mut command = std::process::Command::new(program);
    command.args(args).stdin(Stdio::null());
    if wait_for_go {
        let me = getpid().as_raw_pid().unsigned_abs();
        if let Ok(start) = crate::process::start_time(me) {
            command.env(MARK_ENV, mark(me, start));
        }
    }
    let spawned = command.spawn();
    let report = Report::line(spawned.as_ref().map(drop));
    let reported = control.as_mut().is_some_and(|c| c.write_all(report.as_bytes()).is_ok());
    // Kept once it carried the report: the agent's request to kill the tree comes on it too
    // ([`KILL_TREE`]). PROGRAM's standard input is `/dev/null` and this duplicate is
    // close-on-exec, so no process of the container holds it.
    let control = control
        .filter(|_| reported && spawned.is_ok())
        .and_then(|c| c.set_nonblocking(true).ok().map(|()| c))
        .and_then(|c| tokio::net::UnixStream::from_std(c).ok());
    let pid = match spawned {
        // Reaped by `waitpid` below; std's `Child` neither kills nor waits when dropped.
        Ok(spawned) => spawned.id(),
        Err(error) => {
            if !reported {
                eprintln!("container-shim: cannot start {}: {error}", program.to_string_lossy());
            }
            return START_FAILED_EXIT_CODE;
        }
    };
    let Some(pid) = i32::try_from(pid).ok().and_then(Pid::from_raw) else {
        return START_FAILED_EXIT_CODE;
    };
    let (status, control) = runtime.block_on(async {
        let mut parent_check = tokio::time::interval(PARENT_CHECK);
        let mut control = control;
        let status = loop {
            if let Some(status) = reap_exited(pid) {
                break Some(status);
            }
            // Read at every turn, not only when the reactor reports the socket readable: a
            // flood of the container's SIGUSR1s keeps the loop turning and could leave that
            // report late by seconds (a direct read is one system call).
            match control.as_ref().map(kill_request_now) {
                Some(Some(Asked::KillTree)) => break None,
                Some(Some(Asked::Closed)) => control = None,
                _ => {}
            }
            tokio::select! {
                _ = child.recv() => {}
                // PROGRAM got the group's SIGTERM too, unless it left the group (`setsid`,
                // `timeout`): a runtime signals the container's main process, so it is sent on
                // to PROGRAM then (once: a second SIGTERM means "now" to some programs).
                _ = term.recv() => {
                    if rustix::process::getpgid(Some(pid)).is_ok_and(|group| group != rustix::process::getpgrp()) {
                        let _ = kill_process(pid, Signal::TERM);
                    }
                }
                // A stream of signals never ends; were it to, nothing could ask for the kill
                // any more but the group's SIGKILL, which needs no handler.
                Some(origin) = kill.next() => {
                    let asker = Asker {
                        sender: origin.process.and_then(|p| Pid::from_raw(p.pid)),
                        // kill(2), tgkill(2) and pidfd_send_signal(2) without a siginfo: the
                        // kernel wrote the sender; sigqueue(3) lets the sender write it.
                        by_the_kernels_word: matches!(origin.cause, Cause::Sent(Sent::User | Sent::TKill)),
                    };
                    // The shim's own start is read only now: a signal is rare, a shim is started
                    // for every exec probe.
                    let me = Shim {
                        pid: getpid(),
                        parent: agent,
                        start: crate::process::start_time(getpid().as_raw_pid().unsigned_abs()).ok(),
                    };
                    if asked_by_an_agent(asker, &me, rustix::process::getppid(), lookup) {
                        break None;
                    }
                }
                asked = kill_request(control.as_ref()), if control.is_some() => match asked {
                    Asked::KillTree => break None,
                    // The agent closed its end (it no longer asks here, or it died): from now
                    // on only SIGUSR1 asks.
                    Asked::Closed => control = None,
                    Asked::Nothing => {}
                },
                _ = parent_check.tick(), if parent.is_some() => {
                    if orphaned() {
                        break None;
                    }
                }
            }
        };
        (status, control)
    });
    let (status, whole_tree) = kill_tree(pid, status);
    if whole_tree && let Some(control) = &control {
        use rustix::net::SendFlags;
        let _ = rustix::net::send(control, &[TREE_KILLED], SendFlags::NOSIGNAL | SendFlags::DONTWAIT);
    }
    match status {
        Some(status) => end_as(status),
        None => {
            eprintln!("container-shim: the command's exit status was lost");
            128 + Signal::KILL.as_raw()
        }
    }
}

/// What came on the control socket.
enum Asked {
    KillTree,
    Closed,
    Nothing,
}

/// Waits for the agent's next byte on the control socket.
async fn kill_request(control: Option<&tokio::net::UnixStream>) -> Asked {
    let Some(control) = control else { return std::future::pending().await };
    if control.readable().await.is_err() {
        return Asked::Closed;
    }
    let mut byte = [0u8; 1];
    match control.try_read(&mut byte) {
        Ok(read) => asked(read, byte[0]),
        Err(e) if e.kind() == io::ErrorKind::WouldBlock || e.kind() == io::ErrorKind::Interrupted => {
            Asked::Nothing
        }
        Err(_) => Asked::Closed,
    }
}

/// The agent's byte on the control socket if one is there now, read directly (not through the
/// reactor); `None` when there is none.
fn kill_request_now(control: &tokio::net::UnixStream) -> Option<Asked> {
    let mut byte = [0u8; 1];
    match rustix::net::recv(control, &mut byte, rustix::net::RecvFlags::DONTWAIT) {
        Ok((read, _)) => Some(asked(read, byte[0])),
        Err(Errno::AGAIN | Errno::INTR) => None,
        Err(_) => Some(Asked::Closed),
    }
}

/// What `read` bytes (the first `byte`) on the control socket ask.
fn asked(read: usize, byte: u8) -> Asked {
    match read {
        0 => Asked::Closed,
        _ if byte == KILL_TREE => Asked::KillTree,
        _ => Asked::Nothing,
    }
}

/// The shim, as a SIGUSR1's sender is judged against it.
struct Shim {
    pid: Pid,
    /// Its parent when it started: the agent that started it.
    parent: Option<Pid>,
    /// When it started ([`crate::process::start_time`]), if `/proc` says.
    start: Option<u64>,
}

/// Who sent a SIGUSR1.
#[derive(Debug, Clone, Copy)]
struct Asker {
    sender: Option<Pid>,
    /// The sender's PID is the kernel's word (`kill`, `tgkill`), not the sender's own
    /// (`sigqueue`).
    by_the_kernels_word: bool,
}

/// Whether a SIGUSR1 is an agent's request to kill the tree.
///
/// While the agent that started the shim is still its parent, only that agent's is. Once the
/// shim is orphaned (the agent died), any sender that is not the shim's descendant is the next
/// agent: the container's processes are all its descendants (it is a subreaper), and a walk up
/// the sender's parents tells them apart, ending at the first process older than the shim (a
/// descendant cannot be; so the walk seldom reads far, and never a process hidden from it
/// above the agent). A sender that has exited by the time the shim looks is taken for one of
/// the container's short-lived commands (`/bin/kill -USR1 0`): an agent waits a second for the
/// shim before its backstop, the group's SIGKILL. Not heard either: a signal with no sender
/// (the kernel's), and one whose sender the kernel did not write (`sigqueue`).
///
/// The PID in a signal is the sender's as its own PID namespace numbers it: a container that
/// signals from a PID namespace of its own shows a PID of that namespace. While the agent
/// lives, such a signal is heard only if that number is the agent's PID; once the shim is
/// orphaned, a number that names an older process here is taken for a stranger's. Neither can
/// harm more than the container itself.
fn asked_by_an_agent(
    asker: Asker,
    shim: &Shim,
    parent_now: Option<Pid>,
    lookup: impl Fn(Pid) -> Lookup,
) -> bool {
    let Some(sender) = asker.sender.filter(|_| asker.by_the_kernels_word) else { return false };
    if parent_now == shim.parent {
        return Some(sender) == shim.parent;
    }
    // A chain of parents is as long as the deepest process tree, far under this; a loop (a
    // PID reused while walking) ends here too.
    let mut process = sender;
    for _ in 0..MAX_ANCESTRY {
        if process == shim.pid {
            return false;
        }
        match lookup(process) {
            Lookup::Gone => return false,
            Lookup::Is { start, .. } if shim.start.is_some_and(|shim| start < shim) => return true,
            Lookup::Is { parent: None, .. } => return true,
            Lookup::Is { parent: Some(up), .. } => process = up,
        }
    }
    false
}

/// At most this many parents are walked to tell whether a sender is the shim's descendant.
const MAX_ANCESTRY: usize = 4096;

/// A process, as far as telling the shim's descendants apart goes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Lookup {
    /// Its parent (`None`: PPID 0, init or a process whose parent is outside this PID
    /// namespace) and when it started.
    Is { parent: Option<Pid>, start: u64 },
    /// Reaped, or `/proc` cannot say.
    Gone,
}

/// `pid` as `/proc` shows it.
fn lookup(pid: Pid) -> Lookup {
    match ProcessStat::read(pid) {
        Ok(stat) => Lookup::Is { parent: Pid::from_raw(stat.ppid), start: stat.start },
        Err(_) => Lookup::Gone,
    }
}

/// The signals that would kill or stop the shim by default and that it does not use (it uses
/// SIGTERM, SIGCHLD and SIGUSR1; SIGKILL and SIGSTOP cannot be caught, and the faults SIGSEGV,
/// SIGBUS, SIGILL and SIGFPE are its own).
const IGNORED_SIGNALS: [Signal; 15] = [
    Signal::HUP,
    Signal::INT,
    Signal::QUIT,
    Signal::USR2,
    Signal::PIPE,
    Signal::ALARM,
    Signal::VTALARM,
    Signal::PROF,
    Signal::IO,
    Signal::POWER,
    Signal::XCPU,
    Signal::XFSZ,
    Signal::TSTP,
    Signal::TTIN,
    Signal::TTOU,
];

/// The re-exec'd shim's `main`: dies of `signal` (its handler is the default again after
/// `exec`). Returns only if the signal did not kill it (one whose default is to be ignored).
pub fn raise(signal: i32) -> i32 {
    if let Some(sig) = Signal::from_named_raw(signal) {
        let _ = kill_process(getpid(), sig);
        // A signal sent to oneself is delivered before `kill` returns to a single thread, as the
        // shim is; were there another, it could take the signal a moment later.
        std::thread::sleep(Duration::from_millis(100));
    }
    128 + signal
}

/// A writable duplicate of standard input when it is a socket (the agent's control channel).
fn control_socket() -> Option<UnixStream> {
    let fd = io::stdin().as_fd().try_clone_to_owned().ok()?;
    let socket = UnixStream::from(fd);
    // Not a socket (a terminal, `/dev/null`): no one to report to.
    socket.peer_addr().ok()?;
    Some(socket)
}

/// Reads standard input until the go byte or end of file.
fn go_received() -> bool {
    let mut byte = [0u8; 1];
    loop {
        match io::stdin().lock().read(&mut byte) {
            Ok(0) => return false,
            Ok(_) => return byte[0] == GO,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(_) => return false,
        }
    }
}

/// Reaps every child that has exited (orphans that ended as well as PROGRAM); PROGRAM's status
/// once it is among them.
fn reap_exited(program: Pid) -> Option<WaitStatus> {
    let mut found = None;
    loop {
        // `wait` is wait4(-1), any child; `waitpid(None)` would be wait4(0), only the children
        // still in the shim's process group, and a `setsid` one would be neither reaped nor waited for.
        match wait(WaitOptions::NOHANG) {
            Ok(Some((pid, status))) if pid == program => found = Some(status),
            Ok(Some(_)) => {}
            Err(Errno::INTR) => {}
            // None exited yet, or no child left at all.
            Ok(None) | Err(_) => return found,
        }
    }
}

/// SIGKILLs every descendant and reaps until none is left (see [`MAX_REAPS`]); PROGRAM's
/// status, `status` if it was reaped already, and whether every descendant is gone.
fn kill_tree(program: Pid, mut status: Option<WaitStatus>) -> (Option<WaitStatus>, bool) {
    for _ in 0..MAX_REAPS {
        // What has ended already is reaped first. No child at all means no descendant: an
        // orphan is the shim's child (it is a subreaper) before its parent can be reaped, and a
        // child still exiting is a child until it is. So the usual end, a command that left
        // nothing, reads no `/proc` (docs/benchmarks.md, "The container shim's start-up").
        match wait(WaitOptions::NOHANG) {
            Ok(Some((pid, exited))) => {
                if pid == program {
                    status = Some(exited);
                }
                continue;
            }
            Err(Errno::INTR) => continue,
            Ok(None) => {}
            // ECHILD: every descendant is gone.
            Err(_) => return (status, true),
        }
        // Our own children, unreaped: their PIDs cannot have been reused, so killing by PID is
        // safe. Killing a zombie does nothing.
        for pid in children() {
            let _ = kill_process(pid, Signal::KILL);
        }
        match wait(WaitOptions::empty()) {
            Ok(Some((pid, exited))) if pid == program => status = Some(exited),
            Ok(_) | Err(Errno::INTR) => {}
            // ECHILD: every descendant is gone.
            Err(_) => return (status, true),
        }
    }
    (status, false)
}

/// Ends the shim as PROGRAM ended: its exit code, or death by its signal.
fn end_as(status: WaitStatus) -> i32 {
    if let Some(code) = status.exit_status() {
        return code;
    }
    let Some(signal) = status.terminating_signal() else { return 128 };
    if signal == Signal::KILL.as_raw() {
        let _ = kill_process(getpid(), Signal::KILL);
    } else {
        // The shim handles SIGTERM (and SIGUSR1), so raising it here would be caught: `exec`
        // resets caught signals to their defaults, and the fresh image raises it.
        let error = std::process::Command::new("/proc/self/exe")
            .arg(SUBCOMMAND)
            .arg(RAISE_SIGNAL)
            .arg(signal.to_string())
            .exec();
        eprintln!("container-shim: cannot re-exec to die of signal {signal}: {error}");
    }
    128 + signal
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pid(raw: i32) -> Pid {
        Pid::from_raw(raw).unwrap()
    }

    #[test]
    fn a_mark_reads_back_and_nothing_else_reads_as_one() {
        assert_eq!(parse_mark(&mark(4242, 987_654)), Some((4242, 987_654)));
        for text in ["", "4242", "4242:", ":1", "a:1", "1:b", "1:2:3", "-1:2"] {
            assert_eq!(parse_mark(text), None, "{text:?}");
        }
    }

    /// A process tree, each with its start time: init 1 (0) → agent 100 (10) → shim 200 (20) →
    /// sh 300 (30) → kill 400 (40); a daemon 500 (35) that left the container's session,
    /// re-parented to the shim; a later agent 600 (50) under init; 700 (60) under a parent
    /// outside the PID namespace.
    fn tree(p: Pid) -> Lookup {
        let is = |parent: i32, start: u64| Lookup::Is { parent: Pid::from_raw(parent), start };
        match p.as_raw_pid() {
            1 => is(0, 0),
            100 => is(1, 10),
            200 => is(100, 20),
            300 => is(200, 30),
            400 => is(300, 40),
            500 => is(200, 35),
            600 => is(1, 50),
            700 => is(0, 60),
            _ => Lookup::Gone,
        }
    }

    fn shim() -> Shim {
        Shim { pid: pid(200), parent: Some(pid(100)), start: Some(20) }
    }

    fn kill(sender: i32) -> Asker {
        Asker { sender: Some(pid(sender)), by_the_kernels_word: true }
    }

    #[test]
    fn while_the_agent_lives_only_its_kill_request_is_heard() {
        let alive = Some(pid(100));
        let asked = |asker: Asker| asked_by_an_agent(asker, &shim(), alive, tree);
        assert!(asked(kill(100)), "the agent");
        assert!(!asked(kill(600)), "another process");
        assert!(!asked(kill(300)), "the container's shell (`kill -USR1 0`)");
        assert!(!asked(kill(1)), "a PID 1: the container signalling from a PID namespace of its own");
        assert!(!asked(Asker { by_the_kernels_word: false, ..kill(100) }), "sigqueue: the sender's own word");
        assert!(!asked(Asker { sender: None, by_the_kernels_word: true }), "the kernel");
        // The agent is heard without a look at /proc.
        assert!(asked_by_an_agent(kill(100), &shim(), alive, |_| Lookup::Gone));
    }

    #[test]
    fn once_orphaned_any_sender_but_a_descendant_is_heard() {
        let orphaned = Some(pid(1));
        let asked = |asker: Asker| asked_by_an_agent(asker, &shim(), orphaned, tree);
        assert!(asked(kill(600)), "the next agent");
        assert!(asked(kill(700)), "a process whose parent is outside the namespace");
        assert!(!asked(kill(300)), "the container's shell");
        assert!(!asked(kill(400)), "a command of the container");
        assert!(!asked(kill(500)), "a daemon that left the container's session");
        assert!(!asked(kill(999)), "a sender gone before it was looked at");
        assert!(!asked(Asker { by_the_kernels_word: false, ..kill(600) }));
        // The walk ends at the first process older than the shim: the next agent is heard
        // though its parents above cannot be read (`hidepid`).
        let hidden = |p: Pid| {
            if p.as_raw_pid() == 600 { Lookup::Is { parent: Some(pid(1)), start: 50 } } else { Lookup::Gone }
        };
        assert!(!asked_by_an_agent(kill(600), &shim(), orphaned, hidden), "its parent cannot be read");
        let older = |p: Pid| {
            if p.as_raw_pid() == 600 { Lookup::Is { parent: Some(pid(1)), start: 5 } } else { Lookup::Gone }
        };
        assert!(asked_by_an_agent(kill(600), &shim(), orphaned, older), "older than the shim");
    }

    #[test]
    fn a_loop_of_parents_ends() {
        let looped =
            |p: Pid| Lookup::Is { parent: Some(pid(if p.as_raw_pid() == 10 { 11 } else { 10 })), start: 99 };
        assert!(!asked_by_an_agent(kill(10), &shim(), Some(pid(1)), looped));
    }

    #[test]
    fn reports_round_trip() {
        assert!(matches!(Report::parse("started\n"), Some(Report::Started)));
        let line = Report::line(Err(&io::Error::from_raw_os_error(2)));
        let Some(Report::Failed(e)) = Report::parse(&line) else { panic!("{line}") };
        assert_eq!(e.kind(), io::ErrorKind::NotFound);
        assert_eq!(e.to_string(), io::Error::from_raw_os_error(2).to_string());
        let line = Report::line(Err(&io::Error::new(io::ErrorKind::InvalidInput, "nul byte\nfound")));
        let Some(Report::Failed(e)) = Report::parse(&line) else { panic!("{line}") };
        assert_eq!(e.to_string(), "nul byte found");
        assert!(Report::parse("").is_none());
        assert!(Report::parse("garbage").is_none());
    }

    /// The report is read as the reactor reports the socket readable, not by a blocking read
    /// (docs/reliability.md, "No process to spare"); a shim that closes its end without a
    /// report, and one that never writes, fail the read, the latter once `wait` has passed.
    #[tokio::test(start_paused = true)]
    async fn a_report_is_read_on_the_reactor_and_a_late_one_times_out() {
        let wait = Duration::from_secs(5);
        let (agent, mut shim) = UnixStream::pair().expect("a socket pair");
        shim.write_all(b"started\n").expect("the report written");
        let read = Report::read(agent, wait).await;
        assert!(matches!(read, Ok((Report::Started, _))), "{read:?}");

        let (agent, shim) = UnixStream::pair().expect("a socket pair");
        drop(shim);
        let read = Report::read(agent, wait).await;
        assert_eq!(read.expect_err("no report").kind(), io::ErrorKind::UnexpectedEof);

        let (agent, _silent) = UnixStream::pair().expect("a socket pair");
        let start = tokio::time::Instant::now();
        let read = Report::read(agent, wait).await;
        assert_eq!(read.expect_err("no report").raw_os_error(), Some(Errno::AGAIN.raw_os_error()));
        assert_eq!(start.elapsed(), wait, "failed when the wait was over, not before");
    }
}
