//! Stopping a container's process: SIGTERM, SIGKILL after the grace period, and the guard that
//! kills the group when the runtime goes away.

use std::io;
use std::process::ExitStatus;
use std::time::Duration;

use tokio::process::Child;
use tokio::sync::watch;

use crate::process::{Signal, exited as leader_exited, signal_group_logged};

/// How long to wait for a SIGKILLed container to be reaped before giving up on it.
const KILL_WAIT: Duration = Duration::from_secs(10);

/// The container's process. Until its exit is seen, dropping it (the agent shutting down)
/// kills the whole group.
pub(super) struct ProcessGuard {
    pub(super) child: Child,
    /// The group to kill; the child's PID, as it leads its own group.
    pub(super) pgid: Option<u32>,
}

impl ProcessGuard {
    /// Waits for the process to exit, then kills what it left in its group: a container's
    /// processes end with its main process.
    pub(super) async fn wait(mut self) -> io::Result<ExitStatus> {
        let Some(pgid) = self.pgid else { return self.child.wait().await };
        // Killed while the leader is unreaped, so that the group's ID cannot be reused yet.
        if let Err(error) = leader_exited(pgid).await {
            tracing::debug!(pgid, %error, "no pidfd for the container, killing its group after reaping it");
            let status = self.child.wait().await;
            self.pgid = None;
            signal_group_logged(pgid, Signal::Kill);
            return status;
        }
        self.pgid = None;
        signal_group_logged(pgid, Signal::Kill);
        self.child.wait().await
    }
}

impl Drop for ProcessGuard {
    fn drop(&mut self) {
        if let Some(pgid) = self.pgid.take() {
            signal_group_logged(pgid, Signal::Kill);
        }
    }
}

/// SIGTERM to the group, SIGKILL once `grace` has passed without the exit being recorded.
pub(super) async fn stop_process(pgid: Option<u32>, grace: Duration, exited: watch::Receiver<bool>) {
    if *exited.borrow() {
        return;
    }
    if let Some(pgid) = pgid {
        signal_group_logged(pgid, Signal::Term);
    }
    let mut exited = exited;
    if tokio::time::timeout(grace, exited.wait_for(|e| *e)).await.is_ok() {
        return;
    }
    if let Some(pgid) = pgid {
        tracing::info!(pgid, ?grace, "container did not stop within its grace period, sending SIGKILL");
        signal_group_logged(pgid, Signal::Kill);
    }
    wait_exited(exited, Some(KILL_WAIT)).await;
}

pub(super) async fn wait_exited(mut exited: watch::Receiver<bool>, bound: Option<Duration>) {
    let wait = exited.wait_for(|e| *e);
    match bound {
        Some(bound) => {
            if tokio::time::timeout(bound, wait).await.is_err() {
                tracing::warn!(?bound, "killed container has not exited yet");
            }
        }
        // An error means the runtime is gone, and the process with it.
        None => {
            let _ = wait.await;
        }
    }
}
