//! Stopping a container's process: SIGTERM, SIGKILL after the grace period, and the guard that
//! kills the group when the runtime goes away. Every wait here has a deadline: a signal that
//! cannot be delivered leaves the container running (and reported so), never a stop that hangs.
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

    /// Sends `signal`, logging a failure: whether the container stopped is told by its exit
    /// being recorded, never by the signal.
    pub(super) fn send(&self, pgid: u32, signal: Signal) {
        if let Err(error) = (self.0)(pgid, signal) {
            tracing::error!(pgid, signal = signal.name(), %error, "cannot signal a container's process group");
        }
    }

    /// Asks the shim leading `pgid` to kill its tree: on its control socket when `groups`
    /// keeps one (the container can drown a SIGUSR1 with its own, never that), and by
    /// [`Signal::KillTree`].
    pub(super) fn kill_tree(&self, groups: &ContainerGroups, pgid: u32) {
        groups.ask_to_kill_tree(pgid);
        self.send(pgid, Signal::KillTree);
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
    pub(super) async fn wait(mut self) -> io::Result<ExitStatus> {
        let Some(pgid) = self.pgid else { return self.child.wait().await };
        // The group is killed, and no longer listed, while the leader is unreaped: its ID
        // cannot be reused yet, and once reaped nothing signals it. A guard dropped from then
        // on (the agent stopping) asks nothing of the leader either.
        let (status, mark) = match leader_exited(pgid).await {
            Ok(()) => {
                self.pgid = None;
                self.signaller.send(pgid, Signal::Kill);
                let mark = self.groups.unlist(pgid);
                (self.child.wait().await, mark)
            }
            Err(error) => {
                tracing::debug!(pgid, %error, "no pidfd for the container, killing its group after reaping it");
                let status = self.child.wait().await;
                self.pgid = None;
                self.signaller.send(pgid, Signal::Kill);
                (status, self.groups.unlist(pgid))
            }
        };
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
            self.signaller.send(pgid, Signal::Kill);
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
        signaller.send(pgid, Signal::Term);
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
        signaller.send(pgid, Signal::Kill);
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
