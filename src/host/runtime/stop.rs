//! Stopping a container's process: SIGTERM, SIGKILL after the grace period, and the guard that
//! kills the group when the runtime goes away. Every wait here has a deadline: a signal that
//! cannot be delivered leaves the container running (and reported so), never a stop that hangs.
//!
//! A group is signalled only while its leader is unreaped, so that its ID cannot name another
//! process's group: its exit is seen through a pidfd, or without one (a kernel older than 5.3,
//! no descriptor left) by `waitid(WNOWAIT)` after each SIGCHLD
//! ([`crate::process::exited`]), its group SIGKILLed and unlisted, and only then the leader
//! reaped. Every other signal goes only to a listed group ([`Signaller::send`]). A leader whose
//! exit cannot be seen before the reap is reaped, and its group is not signalled at all
//! (`docs/reliability.md`, "A container's group is never killed by a reaped leader's ID").
//!
//! A container under the shim ([`crate::shim`]) is killed by asking the shim first (SIGUSR1):
//! only the shim reaches the processes that left the group. A SIGKILL to the group would kill
//! the shim before it could, so it comes only as a backstop, after [`TREE_KILL_WAIT`].

use std::fmt;
use std::io;
use std::process::ExitStatus;
use std::sync::Arc;
use std::time::Duration;

use tokio::process::Child;
use tokio::sync::watch;
use tokio::time::Instant;

use crate::process::{Delivery, Signal, exited as leader_exited, signal_container};
use crate::shim::TREE_KILL_WAIT;

use super::groups::ContainerGroups;
use super::leftovers::kill_marked_now;

/// How long to wait for a SIGKILLed container to be reaped before giving up on it.
pub const KILL_WAIT: Duration = Duration::from_secs(10);

/// Sends signals to process groups: [`signal_container`] ([`Signal::KillTree`] to the leader,
/// the others to the group), or a stand-in that tests use to make a kill fail.
#[derive(Clone)]
pub struct Signaller(Arc<dyn Fn(u32, Signal) -> io::Result<Delivery> + Send + Sync>);

impl Signaller {
    /// A signaller calling `send` instead of `kill(2)`.
    pub fn new(send: impl Fn(u32, Signal) -> io::Result<Delivery> + Send + Sync + 'static) -> Self {
        Signaller(Arc::new(send))
    }

    /// Sends `signal` to group `pgid` while `groups` lists it, logging a failure: whether the
    /// container stopped is told by its exit being recorded, never by the signal. A group is
    /// unlisted before its leader is reaped, under the lock this looks under: a listed group's
    /// ID is still the container's, an unlisted one's may be another process's (a stop that
    /// comes while the runtime reaps the leader and looks for what its shim left).
    pub(super) fn send(&self, groups: &ContainerGroups, pgid: u32, signal: Signal) {
        if let Some(Err(error)) = groups.signal_listed(pgid, |pgid| (self.0)(pgid, signal)) {
            tracing::error!(pgid, signal = signal.name(), %error, "cannot signal a container's process group");
        }
    }

    /// Asks the shim leading `pgid` to kill its tree: on its control socket when `groups`
    /// keeps one (the container can drown a SIGUSR1 with its own, never that), and by
    /// [`Signal::KillTree`].
    pub(super) fn kill_tree(&self, groups: &ContainerGroups, pgid: u32) {
        groups.ask_to_kill_tree(pgid);
        self.send(groups, pgid, Signal::KillTree);
    }
}

impl Default for Signaller {
    fn default() -> Self {
        Signaller::new(signal_container)
    }
}

impl fmt::Debug for Signaller {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("Signaller")
    }
}

/// The container's process. Until its exit is seen, dropping it (the agent shutting down)
/// kills the whole group.
pub(super) struct ProcessGuard {
    pub(super) child: Child,
    /// The group to kill; the child's PID, as it leads its own group.
    pub(super) pgid: Option<u32>,
    pub(super) signaller: Signaller,
    /// Where the group is listed while it may run.
    pub(super) groups: ContainerGroups,
    /// Whether the child is the container shim, which kills the container's whole tree.
    pub(super) shimmed: bool,
}

impl ProcessGuard {
    /// Waits for the process to exit, then kills what it left in its group: a container's
    /// processes end with its main process.
    pub(super) async fn wait(self) -> io::Result<ExitStatus> {
        self.wait_with(leader_exited).await
    }

    /// [`Self::wait`], the leader's exit seen by `leader_exited` (tests stand in for the
    /// pidfd).
    async fn wait_with<F>(mut self, leader_exited: impl FnOnce(u32) -> F) -> io::Result<ExitStatus>
    where
        F: Future<Output = io::Result<()>>,
    {
        let Some(pgid) = self.pgid else { return self.child.wait().await };
        // The group is killed, and no longer listed, while the leader is unreaped: its ID
        // cannot be reused yet, and once reaped nothing signals it. A guard dropped from then
        // on (the agent stopping) asks nothing of the leader either. The exit is seen without
        // reaping through a pidfd, or `waitid(WNOWAIT)` where there is none.
        let exited = leader_exited(pgid).await;
        self.pgid = None;
        let mark = match exited {
            Ok(()) => {
                self.signaller.send(&self.groups, pgid, Signal::Kill);
                self.groups.unlist(pgid)
            }
            Err(error) => {
                // Its exit can no longer be seen without reaping it (reaped by someone else?):
                // after the reap its ID may be another process's, whose group a SIGKILL by
                // that ID would kill. What it left in its group runs on, said so.
                tracing::warn!(pgid, %error, "cannot see a container's exit before it is reaped; what it left in its process group is not killed");
                self.groups.unlist(pgid)
            }
        };
        let status = self.child.wait().await;
        // A shim that was killed (by its own container, by the OOM killer) did not kill what
        // left the group; those processes carry its mark. They are killed before the record
        // goes, so that an agent that dies meanwhile leaves the record, and the next agent
        // kills them by it; and before the exit is reported, so that a restart never runs
        // beside them (a crash-torture test by a helper: both happened when the orphan sweep,
        // up to a second later, was all that killed them). A shim that killed its whole tree
        // said so before it ended, and is not looked after: the look reads every process's
        // environment, and one for each of 1,500 containers stopped at once (their shims die
        // of the containers' SIGTERM, mirrored) kept the agent busy past its shutdown deadline.
        if self.shimmed
            && let Some(mark) = mark
        {
            let killed = kill_marked_off_thread(pgid, mark).await;
            if killed > 0 {
                tracing::warn!(
                    pgid,
                    killed,
                    "killed processes a container left running after its container shim was killed"
                );
            }
        }
        self.groups.forget_record(pgid);
        status
    }

    fn kill_group(&mut self) {
        if let Some(pgid) = self.pgid.take() {
            self.signaller.send(&self.groups, pgid, Signal::Kill);
            self.groups.remove(pgid);
        }
    }
}

/// [`kill_marked_now`] on a thread of its own, the runtime's thread left free while it reads
/// every process's environment; here, if no thread can be made (a node out of threads).
async fn kill_marked_off_thread(pgid: u32, mark: String) -> usize {
    let (done, result) = tokio::sync::oneshot::channel();
    let for_thread = mark.clone();
    let spawned = std::thread::Builder::new().name("kill-marked".into()).spawn(move || {
        let _ = done.send(kill_marked_now(pgid, &for_thread));
    });
    match spawned {
        Ok(_) => result.await.unwrap_or(0),
        Err(error) => {
            tracing::debug!(%error, "no thread to look for a container's marked processes on; looking here");
            kill_marked_now(pgid, &mark)
        }
    }
}

impl Drop for ProcessGuard {
    fn drop(&mut self) {
        // A shim is only asked: a SIGKILL to its group would kill it before it killed what left
        // the group. Its record stays, so if it cannot finish, the next agent kills the rest.
        if self.shimmed
            && let Some(pgid) = self.pgid.take()
        {
            self.signaller.kill_tree(&self.groups, pgid);
            return;
        }
        self.kill_group();
    }
}

/// How long a stop with this grace period may take at most: the grace period, then
/// [`KILL_WAIT`] for the SIGKILLed process to be reaped.
pub fn stop_deadline(grace: Duration) -> Duration {
    grace.saturating_add(KILL_WAIT)
}

/// SIGTERM to the group, SIGKILL once `grace` has passed without the exit being recorded (for a
/// shimmed container: SIGUSR1 to the shim first, and the SIGKILL [`TREE_KILL_WAIT`] later if it
/// has not exited by then). Returns whether the exit was recorded: `false` (a signal that could
/// not be delivered, a process that would not die) means the container still runs.
pub(super) async fn stop_process(
    signaller: Signaller,
    groups: ContainerGroups,
    pgid: Option<u32>,
    shimmed: bool,
    grace: Duration,
    exited: watch::Receiver<bool>,
) -> bool {
    if *exited.borrow() {
        return true;
    }
    if let Some(pgid) = pgid {
        signaller.send(&groups, pgid, Signal::Term);
    }
    let mut exited = exited;
    if tokio::time::timeout(grace, exited.wait_for(|e| *e)).await.is_ok() {
        return true;
    }
    let deadline = Instant::now() + KILL_WAIT;
    if let Some(pgid) = pgid {
        if shimmed {
            tracing::info!(pgid, ?grace, "container did not stop within its grace period, killing it");
            signaller.kill_tree(&groups, pgid);
            if tokio::time::timeout(TREE_KILL_WAIT, exited.wait_for(|e| *e)).await.is_ok() {
                return true;
            }
        } else {
            tracing::info!(pgid, ?grace, "container did not stop within its grace period, sending SIGKILL");
        }
        signaller.send(&groups, pgid, Signal::Kill);
    }
    wait_exited(exited, deadline).await
}

/// Waits for the exit to be recorded until `deadline`; whether it was.
pub(super) async fn wait_exited(mut exited: watch::Receiver<bool>, deadline: Instant) -> bool {
    match tokio::time::timeout_at(deadline, exited.wait_for(|e| *e)).await {
        Ok(Ok(_)) => true,
        // The runtime is gone, and its guards killed the processes as they dropped.
        Ok(Err(_)) => true,
        Err(_) => {
            tracing::warn!("killed container has not exited yet");
            false
        }
    }
}

#[cfg(test)]
mod tests {
    use std::process::Stdio;
    use std::sync::Mutex;

    use crate::process::{ProcessStat, exited_without_pidfd, signal_group};

    use super::*;

    /// Each signal the signaller sent, with whether the group's leader was still unreaped (a
    /// zombie holding the group's ID) when it went out; the signal is sent for real.
    type Seen = Arc<Mutex<Vec<(Signal, bool)>>>;

    /// A guard over `sh -c script` leading a group of its own, with a signaller that records
    /// what it sends ([`Seen`]); the guard, the group and the record.
    fn guard_over(script: &str) -> (ProcessGuard, u32, Seen) {
        let child = tokio::process::Command::new("sh")
            .args(["-c", script])
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .process_group(0)
            .spawn()
            .unwrap();
        let pgid = child.id().unwrap();
        let seen = Seen::default();
        let log = seen.clone();
        let signaller = Signaller::new(move |pgid, signal| {
            let unreaped = ProcessStat::of(pgid).is_ok_and(|stat| stat.zombie);
            log.lock().unwrap().push((signal, unreaped));
            signal_container(pgid, signal)
        });
        let groups = ContainerGroups::default();
        let owner = super::super::groups::GroupOwner { pod: "default/p".into(), container: "c".into() };
        groups.add(pgid, owner).unwrap();
        let guard = ProcessGuard { child, pgid: Some(pgid), signaller, groups, shimmed: false };
        (guard, pgid, seen)
    }

    /// The live processes of group `pgid`.
    fn members(pgid: u32) -> usize {
        let Ok(entries) = std::fs::read_dir("/proc") else { return 0 };
        entries
            .filter_map(|e| e.ok()?.file_name().to_str()?.parse::<u32>().ok())
            .filter(|&pid| {
                ProcessStat::of(pid).is_ok_and(|stat| !stat.zombie && u32::try_from(stat.pgid) == Ok(pgid))
            })
            .count()
    }

    /// Without a pidfd (a kernel older than 5.3, no descriptor left) the leader's exit is
    /// still seen before it is reaped, and what it left in its group (here a `sleep`) is
    /// SIGKILLed while the unreaped leader holds the group's ID. Before, the leader was reaped
    /// first and the group SIGKILLed by an ID that was free by then: had every member ended,
    /// a stranger's group under the reused ID would have been killed.
    #[tokio::test]
    async fn without_a_pidfd_the_group_is_killed_before_its_leader_is_reaped() {
        let (guard, pgid, seen) = guard_over("sleep 3718 & exit 3");
        let status = tokio::time::timeout(Duration::from_secs(10), guard.wait_with(exited_without_pidfd))
            .await
            .expect("the exit is seen")
            .expect("the status");
        assert_eq!(status.code(), Some(3));
        assert_eq!(*seen.lock().unwrap(), [(Signal::Kill, true)], "SIGKILLed while the leader was unreaped");
        // SIGKILLed: it goes as soon as its new parent reaps it.
        for _ in 0..500 {
            if members(pgid) == 0 {
                return;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        panic!("the group's sleep still runs");
    }

    /// A leader whose exit cannot be seen before it is reaped (here: no way at all) is reaped,
    /// and its group is not signalled after: its ID may be another's by then. Before, the
    /// group was SIGKILLed by that ID after the reap.
    #[tokio::test]
    async fn a_group_whose_leader_could_only_be_reaped_is_not_signalled_by_its_id() {
        let (guard, pgid, seen) = guard_over("sleep 3719 & exit 4");
        let cannot = |_| async { Err(io::Error::other("no child to wait for")) };
        let status = tokio::time::timeout(Duration::from_secs(10), guard.wait_with(cannot))
            .await
            .expect("reaped")
            .expect("the status");
        assert_eq!(status.code(), Some(4));
        assert_eq!(*seen.lock().unwrap(), [], "a group signalled after its leader was reaped");
        // The `sleep` left behind still holds the ID: its group is this test's to end.
        assert_eq!(members(pgid), 1);
        let _ = signal_group(pgid, Signal::Kill);
    }

    /// A stop that comes once the runtime has unlisted the group (its leader exited, and is
    /// being reaped, or the runtime looks for what its shim left after reaping it) sends
    /// nothing: the ID may be another process's by then. A listed group gets SIGTERM and,
    /// after the grace period, SIGKILL. Before, an unlisted group got both as well, by an ID
    /// that was free.
    #[tokio::test(start_paused = true)]
    async fn a_stop_signals_a_group_only_while_it_is_listed() {
        let seen = Arc::new(Mutex::new(Vec::new()));
        let log = seen.clone();
        // Nothing is signalled for real: the IDs are above any PID Linux gives (2^22).
        let signaller = Signaller::new(move |pgid, signal| {
            log.lock().unwrap().push((pgid, signal));
            Ok(Delivery::Sent)
        });
        let (listed, unlisted) = (4_194_401, 4_194_403);
        let groups = ContainerGroups::default();
        let owner = super::super::groups::GroupOwner { pod: "default/p".into(), container: "c".into() };
        groups.add(listed, owner).unwrap();
        let (_running, exited) = watch::channel(false);
        let grace = Duration::from_secs(1);
        let stop =
            |pgid| stop_process(signaller.clone(), groups.clone(), Some(pgid), false, grace, exited.clone());
        assert!(!stop(unlisted).await, "nothing seen to exit");
        assert_eq!(*seen.lock().unwrap(), [], "an unlisted group was signalled");
        assert!(!stop(listed).await);
        assert_eq!(*seen.lock().unwrap(), [(listed, Signal::Term), (listed, Signal::Kill)]);
    }
}
