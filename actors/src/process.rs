//! Signalling local process groups without `unsafe`: the one place that stops a local command
//! together with everything it started, for the exec probes' [`crate::local_runner`] and the
//! standalone host's process runtime. Upstream has no counterpart of its own: a container
//! runtime kills a container's PID namespace (runc's `kill`), which a process group stands in
//! for here.
//!
//! Signals go out as direct `kill(2)` calls through `rustix`: they need no file descriptor and
//! no new process, so they still work when the agent has run out of both, which is exactly when
//! containers must be stopped.
//!
//! [`Signal::KillTree`] (SIGUSR1) goes to a group's leader only: the container shim
//! ([`crate::shim`]), which kills the processes that left the group as well.
//!
//! A recycled ID is never signalled: a group's ID stays taken while any process of the group
//! lives, and a group whose members are all gone is only signalled while its leader is still
//! unreaped. [`exited`] tells that the leader exited without reaping it, so callers kill what
//! it left behind first and reap it afterwards: through a pidfd, or, where none can be had (a
//! kernel older than 5.3, no descriptor left), by `waitid(WNOWAIT)` after each SIGCHLD
//! (`docs/reliability.md`, "A container's group is never killed by a reaped leader's ID").

use std::fs;
use std::io;
use std::time::Duration;

use rustix::io::Errno;
use rustix::process::{
    Pid, PidfdFlags, WaitId, WaitIdOptions, getpid, kill_process_group, pidfd_open, waitid,
};
use tokio::io::Interest;
use tokio::io::unix::AsyncFd;
use tokio::signal::unix::{SignalKind, signal};

/// The signals sent to a process group.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Signal {
    /// SIGTERM: asks the processes to stop.
    Term,
    /// SIGKILL: stops them at once.
    Kill,
    /// SIGUSR1, sent to a group's leader only ([`signal_leader`]): a container shim
    /// ([`crate::shim`]) SIGKILLs everything it started, including processes that left the
    /// group, and exits; a plain process dies of it (its default action).
    KillTree,
}

impl Signal {
    /// The name without the `SIG` prefix, as `kill -l` prints it.
    pub fn name(self) -> &'static str {
        match self {
            Signal::Term => "TERM",
            Signal::Kill => "KILL",
            Signal::KillTree => "USR1",
        }
    }

    fn raw(self) -> rustix::process::Signal {
        match self {
            Signal::Term => rustix::process::Signal::TERM,
            Signal::Kill => rustix::process::Signal::KILL,
            Signal::KillTree => rustix::process::Signal::USR1,
        }
    }
}

/// Whether a signal found anyone to deliver to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Delivery {
    /// At least one process of the group was signalled.
    Sent,
    /// The group has no process left: whatever was to be stopped is gone.
    Gone,
}

/// Sends `signal` to every process of group `pgid`. An error (no permission, or an ID that
/// cannot name a group, such as 0, which would be the agent's own) means nothing was
/// signalled: the processes may still run.
pub fn signal_group(pgid: u32, signal: Signal) -> io::Result<Delivery> {
    let pid = group_pid(pgid)?;
    match kill_process_group(pid, signal.raw()) {
        Ok(()) => Ok(Delivery::Sent),
        Err(Errno::SRCH) => Ok(Delivery::Gone),
        Err(e) => Err(e.into()),
    }
}

/// Sends `signal` to the leader of group `pgid` only (its PID). The caller must know the leader
/// is not reaped yet (its child, whose exit it has not seen) or check its start time, so that
/// the PID cannot name another process.
pub fn signal_leader(pgid: u32, signal: Signal) -> io::Result<Delivery> {
    let pid = group_pid(pgid)?;
    match rustix::process::kill_process(pid, signal.raw()) {
        Ok(()) => Ok(Delivery::Sent),
        Err(Errno::SRCH) => Ok(Delivery::Gone),
        Err(e) => Err(e.into()),
    }
}

/// What a container's group gets: [`Signal::KillTree`] goes to the leader (the shim) alone,
/// any other signal to the whole group.
pub fn signal_container(pgid: u32, signal: Signal) -> io::Result<Delivery> {
    match signal {
        Signal::KillTree => signal_leader(pgid, signal),
        Signal::Term | Signal::Kill => signal_group(pgid, signal),
    }
}

/// Sends `signal` to process `pid`, but only if it is still the process that started at
/// `start` (its [`start_time`]): for a process that is not the agent's child, whose PID may be
/// given to another process at any moment. The process is pinned by a pidfd before its start
/// time is checked, so the signal cannot reach a process that took the PID after the check;
/// where no pidfd can be had (an old kernel, no file descriptor left), it is checked and
/// signalled by PID, a window of microseconds.
pub fn signal_process(pid: u32, start: u64, signal: Signal) -> io::Result<Delivery> {
    let raw = group_pid(pid)?;
    let pidfd = pidfd_open(raw, PidfdFlags::empty());
    match start_time(pid) {
        Ok(now) if now == start => {}
        Ok(_) => return Ok(Delivery::Gone),
        Err(error) if error.kind() == io::ErrorKind::NotFound => return Ok(Delivery::Gone),
        Err(error) => return Err(error),
    }
    let sent = match &pidfd {
        Ok(pidfd) => rustix::process::pidfd_send_signal(pidfd, signal.raw()),
        Err(_) => rustix::process::kill_process(raw, signal.raw()),
    };
    match sent {
        Ok(()) => Ok(Delivery::Sent),
        Err(Errno::SRCH) => Ok(Delivery::Gone),
        Err(e) => Err(e.into()),
    }
}

/// [`signal_group`], logging a failure instead of returning it: for the paths that have no
/// one to report to (a guard being dropped, a command that already ended).
pub fn signal_group_logged(pgid: u32, signal: Signal) {
    if let Err(error) = signal_group(pgid, signal) {
        tracing::error!(pgid, signal = signal.name(), %error, "cannot signal a process group");
    }
}

/// Resolves once process `pid` (a child of the agent) has exited, leaving it unreaped so that
/// its ID, and so its group's, cannot be given to another process meanwhile: through a pidfd,
/// or [`exited_without_pidfd`] where none can be had. An error (`pid` is no child of the
/// agent's left to wait for: reaped by someone else) means the exit cannot be seen without
/// reaping: the caller must not signal the group by its ID after reaping.
pub async fn exited(pid: u32) -> io::Result<()> {
    let raw = group_pid(pid)?;
    // A pidfd becomes readable when its process exits; reading it is never needed. Tokio
    // deprecated the safe constructor because a generic `T` could change the fd it returns;
    // an `OwnedFd` moved into the `AsyncFd` cannot, which is the case its replacement (`unsafe`,
    // forbidden here) is for.
    #[allow(deprecated)]
    let watched = pidfd_open(raw, PidfdFlags::NONBLOCK)
        .map_err(io::Error::from)
        .and_then(|pidfd| AsyncFd::with_interest(pidfd, Interest::READABLE));
    match watched {
        Ok(pidfd) => {
            let _ready = pidfd.readable().await?;
            Ok(())
        }
        Err(error) => {
            tracing::debug!(pid, %error, "no pidfd for a child, watching for its exit on SIGCHLD");
            exited_without_pidfd(pid).await
        }
    }
}

/// How often [`exited_without_pidfd`] looks where SIGCHLD cannot be listened to.
const EXIT_POLL: Duration = Duration::from_millis(50);

/// [`exited`] without a pidfd: `waitid(P_PID, pid, WEXITED | WNOHANG | WNOWAIT)`, which sees the
/// exit and leaves the child to be reaped, after each SIGCHLD (every 50 ms, `EXIT_POLL`, if
/// SIGCHLD cannot be listened to). Each SIGCHLD costs one system call per child watched so, as
/// tokio's own reaper costs where it has no pidfd either.
pub async fn exited_without_pidfd(pid: u32) -> io::Result<()> {
    let raw = group_pid(pid)?;
    // Listening before the first look: a SIGCHLD that comes after the look is not missed.
    let mut sigchld = signal(SignalKind::child()).ok();
    loop {
        if waitid(WaitId::Pid(raw), WaitIdOptions::EXITED | WaitIdOptions::NOHANG | WaitIdOptions::NOWAIT)?
            .is_some()
        {
            return Ok(());
        }
        match sigchld.as_mut() {
            Some(sigchld_stream) => {
                if sigchld_stream.recv().await.is_none() {
                    // The runtime's signal driver is gone: looked for on a ticker.
                    sigchld = None;
                }
            }
            None => tokio::time::sleep(EXIT_POLL).await,
        }
    }
}

fn group_pid(pgid: u32) -> io::Result<Pid> {
    i32::try_from(pgid).ok().and_then(Pid::from_raw).filter(|pid| pid.as_raw_pid() > 1).ok_or_else(|| {
        io::Error::new(io::ErrorKind::InvalidInput, format!("{pgid} is not a process group to signal"))
    })
}

/// This process's direct children (any of its threads'): `/proc/self/task/*/children`, or a scan of every process's
/// parent where the kernel lacks that file.
pub fn children() -> Vec<Pid> {
    listed_children("/proc/self/task").unwrap_or_else(|_| children_by_scan())
}

/// Process `pid`'s direct children (any of its threads'), as [`children`] lists this process's.
/// Nothing tells whether `pid` was still the same process while it was read: the caller checks
/// its start time before and after (a process gone meanwhile leaves its children to another
/// parent, and its PID may be another process's by then).
pub fn children_of(pid: Pid) -> Vec<Pid> {
    let raw = pid.as_raw_pid();
    listed_children(&format!("/proc/{raw}/task")).unwrap_or_else(|_| children_by_scan_of(raw))
}

fn listed_children(tasks: &str) -> io::Result<Vec<Pid>> {
    let mut pids = Vec::new();
    for task in fs::read_dir(tasks)? {
        let text = fs::read_to_string(task?.path().join("children"))?;
        pids.extend(text.split_whitespace().filter_map(|p| p.parse::<i32>().ok()).filter_map(Pid::from_raw));
    }
    Ok(pids)
}

/// Field 22 of `/proc/<pid>/stat`: when process `pid` started, in clock ticks since boot. With
/// the PID, it names one process: a PID is reused, a PID and a start time are not.
pub fn start_time(pid: u32) -> io::Result<u64> {
    let stat = fs::read_to_string(format!("/proc/{pid}/stat"))?;
    parse_start_time(&stat).ok_or_else(unexpected_stat)
}

/// `pid (comm) state ppid …`: comm may hold spaces and parentheses, so fields are counted from
/// the last `)`; the state is field 3, the start time field 22.
pub fn parse_start_time(stat: &str) -> Option<u64> {
    let (_, rest) = stat.rsplit_once(')')?;
    rest.split_whitespace().nth(22 - 3)?.parse().ok()
}

/// What `/proc/<pid>/stat` says of a process, as far as telling it apart goes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ProcessStat {
    /// Exited, not reaped yet (state `Z`).
    pub zombie: bool,
    /// The parent's PID.
    pub ppid: i32,
    /// The process group's ID.
    pub pgid: i32,
    /// [`start_time`].
    pub start: u64,
}

impl ProcessStat {
    /// Process `pid` as `/proc` shows it now; `NotFound` once it is reaped.
    pub fn read(pid: Pid) -> io::Result<ProcessStat> {
        let stat = fs::read_to_string(format!("/proc/{}/stat", pid.as_raw_pid()))?;
        Self::parse(&stat).ok_or_else(unexpected_stat)
    }

    /// [`ProcessStat::read`] for a PID as the kernel's interfaces give it (`InvalidInput` for
    /// one no process can have).
    pub fn of(pid: u32) -> io::Result<ProcessStat> {
        let pid = i32::try_from(pid).ok().and_then(Pid::from_raw).ok_or_else(|| {
            io::Error::new(io::ErrorKind::InvalidInput, format!("{pid} is not a process ID"))
        })?;
        Self::read(pid)
    }

    /// Parses a `/proc/<pid>/stat` line (see [`parse_start_time`]).
    pub fn parse(stat: &str) -> Option<ProcessStat> {
        let (_, rest) = stat.rsplit_once(')')?;
        let mut fields = rest.split_whitespace();
        let zombie = fields.next()? == "Z";
        let ppid = fields.next()?.parse().ok()?;
        let pgid = fields.next()?.parse().ok()?;
        Some(ProcessStat { zombie, ppid, pgid, start: parse_start_time(stat)? })
    }
}

fn unexpected_stat() -> io::Error {
    io::Error::new(io::ErrorKind::InvalidData, "unexpected /proc stat format")
}

pub(crate) fn children_by_scan() -> Vec<Pid> {
    children_by_scan_of(getpid().as_raw_pid())
}

fn children_by_scan_of(parent: i32) -> Vec<Pid> {
    let Ok(entries) = fs::read_dir("/proc") else { return Vec::new() };
    entries
        .filter_map(|e| e.ok()?.file_name().to_str()?.parse::<i32>().ok())
        .filter_map(Pid::from_raw)
        .filter(|&pid| ProcessStat::read(pid).is_ok_and(|stat| stat.ppid == parent))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lists_its_own_children_both_ways() {
        let mut child = std::process::Command::new("sleep").arg("30").spawn().unwrap();
        let pid = Pid::from_raw(child.id() as i32).unwrap();
        assert!(children().contains(&pid));
        assert!(children_by_scan().contains(&pid));
        child.kill().unwrap();
        child.wait().unwrap();
    }

    /// A child's own children, read from its `/proc` entry or by a scan.
    #[test]
    fn lists_another_processs_children_both_ways() {
        let mut shell = std::process::Command::new("sh")
            .args(["-c", "sleep 30 & echo $!; wait"])
            .stdout(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        let mut line = String::new();
        std::io::BufRead::read_line(&mut std::io::BufReader::new(shell.stdout.take().unwrap()), &mut line)
            .unwrap();
        let sleep = Pid::from_raw(line.trim().parse().unwrap()).unwrap();
        let pid = Pid::from_raw(shell.id() as i32).unwrap();
        assert_eq!(children_of(pid), [sleep]);
        assert_eq!(children_by_scan_of(pid.as_raw_pid()), [sleep]);
        let _ = rustix::process::kill_process(sleep, rustix::process::Signal::KILL);
        shell.wait().unwrap();
    }
    use rustix::process::{Resource, Rlimit, getrlimit, setrlimit};
    use std::os::unix::process::CommandExt as _;
    use std::process::{Command, Stdio};
    use std::time::Duration;

    #[test]
    fn reads_the_start_time_past_a_tricky_command_name() {
        let stat = "4242 (a) b (c)) S 1 4242 4242 0 -1 4194304 100 0 0 0 1 2 0 0 20 0 1 0 987654 1000 50";
        assert_eq!(parse_start_time(stat), Some(987654));
        assert_eq!(parse_start_time("4242 (x) S 1"), None);
        let own = start_time(std::process::id()).unwrap();
        assert!(own > 0);
    }

    #[test]
    fn stat_lines_with_odd_names_parse() {
        let tail = "1 42 42 0 -1 4194560 0 0 0 0 0 0 0 0 20 0 1 0 123456 2256896 160";
        let stat = |zombie| Some(ProcessStat { zombie, ppid: 1, pgid: 42, start: 123456 });
        assert_eq!(ProcessStat::parse(&format!("42 (sleep) S {tail}")), stat(false));
        assert_eq!(ProcessStat::parse(&format!("42 (a) (b) Z {tail}")), stat(true));
        assert_eq!(ProcessStat::parse(&format!("42 () R {tail}")), stat(false));
        assert_eq!(ProcessStat::parse("42 (sleep) S 1"), None);
        assert_eq!(ProcessStat::parse("garbage"), None);
    }

    #[test]
    fn this_process_is_read_as_it_is_and_a_reaped_one_is_not_found() {
        let me = ProcessStat::read(getpid()).expect("own stat");
        assert_eq!(me.ppid, rustix::process::getppid().map_or(0, Pid::as_raw_pid));
        assert_eq!(me.pgid, rustix::process::getpgrp().as_raw_pid());
        assert!(me.start > 0);
        assert!(!me.zombie);
        let mut child = std::process::Command::new("true").spawn().expect("spawn");
        let pid = Pid::from_raw(child.id() as i32).expect("PID");
        child.wait().expect("reap");
        assert_eq!(ProcessStat::read(pid).map_err(|e| e.kind()), Err(io::ErrorKind::NotFound));
    }

    /// A process is signalled by PID only while it is the one that started at the given time.
    #[test]
    fn a_process_is_signalled_only_with_its_own_start_time() {
        let mut child = Command::new("sleep").arg("1000").spawn().expect("spawn");
        let pid = child.id();
        let start = start_time(pid).expect("start time");
        assert_eq!(signal_process(pid, start + 1, Signal::Kill).expect("signal"), Delivery::Gone);
        assert!(child.try_wait().expect("try_wait").is_none(), "another start time: not signalled");
        assert_eq!(signal_process(pid, start, Signal::Kill).expect("signal"), Delivery::Sent);
        let status = child.wait().expect("reap");
        assert_eq!(std::os::unix::process::ExitStatusExt::signal(&status), Some(9));
        assert_eq!(signal_process(pid, start, Signal::Kill).expect("signal"), Delivery::Gone);
    }

    #[test]
    fn refuses_ids_that_are_not_a_child_group() {
        for pgid in [0, 1, u32::MAX] {
            assert!(signal_group(pgid, Signal::Kill).is_err(), "{pgid}");
        }
    }

    /// The child half of [`signals_when_no_process_or_fd_can_be_made`]: lower the limits so
    /// that nothing can be spawned or opened, then stop a group started before.
    const CHILD_ENV: &str = "PROBELET_TEST_SIGNAL_UNDER_LIMITS";

    #[test]
    fn signals_when_no_process_or_fd_can_be_made() {
        if std::env::var_os(CHILD_ENV).is_some() {
            let mut sleeper = Command::new("sleep")
                .arg("1000")
                .stdin(Stdio::null())
                .process_group(0)
                .spawn()
                .expect("spawn sleep");
            let pgid = sleeper.id();
            // No fd above 2 can be opened and no process can be forked any more.
            for (resource, limit) in [(Resource::Nofile, 3), (Resource::Nproc, 0)] {
                let hard = getrlimit(resource).maximum;
                setrlimit(resource, Rlimit { current: Some(limit), maximum: hard }).expect("lower the limit");
            }
            let spawn = Command::new("true").stdin(Stdio::null()).stdout(Stdio::null()).spawn();
            assert!(spawn.is_err(), "spawning must be impossible under the lowered limits");
            assert_eq!(signal_group(pgid, Signal::Kill).expect("signal"), Delivery::Sent);
            let status = sleeper.wait().expect("wait");
            assert_eq!(std::os::unix::process::ExitStatusExt::signal(&status), Some(9));
            assert_eq!(signal_group(pgid, Signal::Kill).expect("signal"), Delivery::Gone);
            return;
        }
        let exe = std::env::current_exe().expect("test binary");
        let output = Command::new(exe)
            .args([
                "process::tests::signals_when_no_process_or_fd_can_be_made",
                "--exact",
                "--test-threads=1",
            ])
            .env(CHILD_ENV, "1")
            .output()
            .expect("run the test binary as a child");
        assert!(
            output.status.success(),
            "child failed: {}\n{}",
            String::from_utf8_lossy(&output.stdout),
            String::from_utf8_lossy(&output.stderr)
        );
        assert!(String::from_utf8_lossy(&output.stdout).contains("1 passed"), "the child ran the test");
    }

    #[tokio::test]
    async fn exited_resolves_before_the_leader_is_reaped() {
        let mut child = tokio::process::Command::new("sh")
            .args(["-c", "sleep 1000 & exit 3"])
            .stdin(Stdio::null())
            .process_group(0)
            .spawn()
            .expect("spawn");
        let pgid = child.id().expect("pid");
        tokio::time::timeout(Duration::from_secs(10), exited(pgid)).await.expect("exit seen").expect("pidfd");
        // The leader is a zombie holding the group's ID; its background sleep is still there.
        assert_eq!(signal_group(pgid, Signal::Kill).expect("signal"), Delivery::Sent);
        let status = child.wait().await.expect("reap");
        assert_eq!(status.code(), Some(3));
    }

    /// Without a pidfd the exit is seen by `waitid(WNOWAIT)` after SIGCHLD, the leader left
    /// unreaped: it still holds the group's ID, and the group (its background `sleep`) is
    /// SIGKILLed by it. Then the reap gives the exit status, which the look did not take.
    #[tokio::test]
    async fn exited_without_a_pidfd_resolves_before_the_leader_is_reaped() {
        let mut child = tokio::process::Command::new("sh")
            .args(["-c", "sleep 1000 & exit 5"])
            .stdin(Stdio::null())
            .process_group(0)
            .spawn()
            .expect("spawn");
        let pgid = child.id().expect("pid");
        tokio::time::timeout(Duration::from_secs(10), exited_without_pidfd(pgid))
            .await
            .expect("exit seen")
            .expect("waitid");
        let leader = ProcessStat::of(pgid).expect("the leader is still there");
        assert!(leader.zombie, "exited, not reaped");
        assert_eq!(signal_group(pgid, Signal::Kill).expect("signal"), Delivery::Sent);
        let status = child.wait().await.expect("reap");
        assert_eq!(status.code(), Some(5));
    }
}
