//! The process groups of the containers that run now, kept apart from the runtime actor so
//! that the agent can SIGKILL every container even when the actor cannot answer (a forced
//! shutdown), and, with a state directory, recorded on disk so that an agent that crashed
//! never runs a second copy of a container: the next agent kills what the crashed one left
//! before it starts anything.
//!
//! Upstream a crashed kubelet's containers keep running under the container runtime and the
//! restarted kubelet adopts them. A local process cannot be adopted (its exit status and output
//! pipes belonged to the dead agent), so it is killed instead and started afresh.
//!
//! A record is `containers/<pgid>`: the group leader's start time (field 22 of
//! `/proc/<pid>/stat`, in clock ticks since boot), the pod and the container. A leftover is only
//! killed if its leader still has that start time, so a recycled PID is never signalled; a
//! group whose leader is gone is killed while any member lives (its ID cannot be reused then).

use std::collections::BTreeMap;
use std::fs::{self, File, TryLockError};
use std::io;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use crate::process::{Delivery, Signal, signal_group};

/// How long the next agent waits for the leftovers it SIGKILLed to disappear.
const LEFTOVER_WAIT: Duration = Duration::from_secs(5);

/// Who a running process group is, for logs and records.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GroupOwner {
    pub pod: String,
    pub container: String,
}

/// Why the state directory cannot be used.
#[derive(Debug, thiserror::Error)]
pub enum StateDirError {
    #[error("state directory {}: {source}", path.display())]
    Io { path: PathBuf, source: io::Error },
    #[error("state directory {}: in use by another running agent", path.display())]
    InUse { path: PathBuf },
}

/// The live container process groups, shared by every clone.
#[derive(Debug, Clone, Default)]
pub struct ContainerGroups {
    groups: Arc<Mutex<BTreeMap<u32, GroupOwner>>>,
    /// Where each group is recorded, with the lock held for the agent's life.
    state: Option<Arc<StateDir>>,
    /// The longest grace period of any pod run so far, in milliseconds: what a shutdown waits
    /// for at most before it kills every group.
    largest_grace_ms: Arc<AtomicU64>,
}

#[derive(Debug)]
struct StateDir {
    containers: PathBuf,
    /// Locked while this agent runs, so two agents never share (and kill) each other's
    /// records.
    _lock: File,
}

impl ContainerGroups {
    /// Groups kept in memory only.
    pub fn new() -> Self {
        Self::default()
    }

    /// Groups recorded in `dir` (created if missing). First kills the containers a previous
    /// agent on `dir` left running; returns how many groups that was.
    pub fn open(dir: &Path) -> Result<(Self, usize), StateDirError> {
        let io_error = |path: &Path| {
            let path = path.to_owned();
            move |source| StateDirError::Io { path, source }
        };
        let containers = dir.join("containers");
        fs::create_dir_all(&containers).map_err(io_error(&containers))?;
        let lock_path = dir.join("lock");
        let lock = File::options()
            .create(true)
            .truncate(false)
            .write(true)
            .open(&lock_path)
            .map_err(io_error(&lock_path))?;
        match lock.try_lock() {
            Ok(()) => {}
            Err(TryLockError::WouldBlock) => return Err(StateDirError::InUse { path: dir.to_owned() }),
            Err(TryLockError::Error(source)) => return Err(StateDirError::Io { path: lock_path, source }),
        }
        let killed = kill_leftovers(&containers).map_err(io_error(&containers))?;
        let state = StateDir { containers, _lock: lock };
        let groups = ContainerGroups { state: Some(Arc::new(state)), ..ContainerGroups::default() };
        Ok((groups, killed))
    }

    /// A container's group started. A record that cannot be written is logged: that container
    /// would survive a crash of the agent.
    pub fn add(&self, pgid: u32, owner: GroupOwner) {
        if let Some(state) = &self.state {
            let record = start_time(pgid)
                .map(|start| format!("{start} {} {}\n", owner.pod, owner.container))
                .and_then(|text| write_atomically(&state.containers, pgid, &text));
            if let Err(error) = record {
                tracing::error!(pgid, pod = %owner.pod, container = %owner.container, %error, "cannot record the container in the state directory; it would outlive a crash of the agent");
            }
        }
        self.lock().insert(pgid, owner);
    }

    /// A container's group was killed after its leader exited; its ID may be reused from now on.
    pub fn remove(&self, pgid: u32) {
        self.lock().remove(&pgid);
        if let Some(state) = &self.state {
            let path = state.containers.join(pgid.to_string());
            if let Err(error) = fs::remove_file(&path)
                && error.kind() != io::ErrorKind::NotFound
            {
                tracing::warn!(path = %path.display(), %error, "cannot remove a container's record");
            }
        }
    }

    /// A pod with this grace period runs (or ran): shutdown gives at least that much.
    pub fn note_grace_period(&self, grace: Duration) {
        let ms = u64::try_from(grace.as_millis()).unwrap_or(u64::MAX);
        self.largest_grace_ms.fetch_max(ms, Ordering::Relaxed);
    }

    /// The longest grace period noted.
    pub fn largest_grace_period(&self) -> Duration {
        Duration::from_millis(self.largest_grace_ms.load(Ordering::Relaxed))
    }

    /// SIGKILLs every group at once; returns how many were still there. Records stay: the
    /// next agent finds the groups gone.
    pub fn kill_all(&self) -> usize {
        let groups = self.lock().clone();
        let mut killed = 0;
        for (pgid, owner) in groups {
            match signal_group(pgid, Signal::Kill) {
                Ok(Delivery::Sent) => {
                    killed += 1;
                    tracing::warn!(pgid, pod = %owner.pod, container = %owner.container, "container killed");
                }
                Ok(Delivery::Gone) => {}
                Err(error) => {
                    tracing::error!(pgid, pod = %owner.pod, container = %owner.container, %error, "cannot kill container")
                }
            }
        }
        killed
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, BTreeMap<u32, GroupOwner>> {
        self.groups.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

/// What a record says about a group now.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Leftover {
    /// Its leader still runs (same start time), or members run without it: ours, to kill.
    Ours,
    /// Nothing of it runs, or its ID now names another process: not ours to touch.
    NotOurs,
}

/// Kills the group of every record in `containers` that still runs, then removes the records.
fn kill_leftovers(containers: &Path) -> io::Result<usize> {
    let mut killed = Vec::new();
    for entry in fs::read_dir(containers)? {
        let path = entry?.path();
        let Some(pgid) = path.file_name().and_then(|n| n.to_str()).and_then(|n| n.parse::<u32>().ok()) else {
            // A temporary file of a write the crash interrupted, or a stranger.
            let _ = fs::remove_file(&path);
            continue;
        };
        let text = fs::read_to_string(&path).unwrap_or_default();
        let mut fields = text.split_whitespace();
        let recorded = fields.next().and_then(|s| s.parse::<u64>().ok());
        let (pod, container) = (fields.next().unwrap_or("?"), fields.next().unwrap_or("?"));
        if classify(recorded, start_time(pgid).ok(), group_alive(pgid)) == Leftover::Ours {
            match signal_group(pgid, Signal::Kill) {
                Ok(Delivery::Sent) => {
                    tracing::warn!(pgid, pod, container, "killed a container a previous agent left running");
                    killed.push(pgid);
                }
                Ok(Delivery::Gone) => {}
                Err(error) => {
                    tracing::error!(pgid, pod, container, %error, "cannot kill a container a previous agent left running")
                }
            }
        }
        fs::remove_file(&path)?;
    }
    // They are not our children: their new parent reaps them. Wait until none runs, bounded;
    // this runs once at start, before anything else does, so blocking here holds nothing up.
    // Before any runtime exists (a blocking wait on real processes), so std's clock.
    #[allow(clippy::disallowed_methods)]
    let deadline = Instant::now() + LEFTOVER_WAIT;
    #[allow(clippy::disallowed_methods)]
    while killed.iter().any(|&pgid| start_time(pgid).is_ok() && !is_zombie(pgid)) && Instant::now() < deadline
    {
        std::thread::sleep(Duration::from_millis(20));
    }
    Ok(killed.len())
}

/// Pure: whether a recorded group is still ours, from its recorded leader start time, the start
/// time of whatever process has the ID now, and whether the group has any member.
fn classify(recorded: Option<u64>, now: Option<u64>, group_alive: bool) -> Leftover {
    match (recorded, now) {
        (Some(recorded), Some(now)) if recorded == now => Leftover::Ours,
        // The ID names another process now (or the record is unreadable): never signal it.
        (_, Some(_)) | (None, _) => Leftover::NotOurs,
        // The leader is gone; while members live, the group's ID cannot have been reused.
        (Some(_), None) if group_alive => Leftover::Ours,
        (Some(_), None) => Leftover::NotOurs,
    }
}

fn group_alive(pgid: u32) -> bool {
    match i32::try_from(pgid).ok().and_then(rustix::process::Pid::from_raw) {
        Some(pid) => rustix::process::test_kill_process_group(pid).is_ok(),
        None => false,
    }
}

/// Field 22 of `/proc/<pid>/stat`: when the process started, in clock ticks since boot.
fn start_time(pid: u32) -> io::Result<u64> {
    let stat = fs::read_to_string(format!("/proc/{pid}/stat"))?;
    parse_start_time(&stat)
        .ok_or_else(|| io::Error::new(io::ErrorKind::InvalidData, "unexpected /proc stat format"))
}

fn is_zombie(pid: u32) -> bool {
    fs::read_to_string(format!("/proc/{pid}/stat"))
        .ok()
        .and_then(|stat| stat.rsplit_once(')').map(|(_, rest)| rest.trim_start().starts_with('Z')))
        .unwrap_or(false)
}

/// `pid (comm) state ppid …`: comm may hold spaces and parentheses, so fields are counted from
/// the last `)`; the state is field 3, the start time field 22.
fn parse_start_time(stat: &str) -> Option<u64> {
    let (_, rest) = stat.rsplit_once(')')?;
    rest.split_whitespace().nth(22 - 3)?.parse().ok()
}

fn write_atomically(dir: &Path, pgid: u32, text: &str) -> io::Result<()> {
    let tmp = dir.join(format!(".{pgid}.tmp"));
    fs::write(&tmp, text)?;
    fs::rename(&tmp, dir.join(pgid.to_string()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_the_start_time_past_a_tricky_command_name() {
        let stat = "4242 (a) b (c)) S 1 4242 4242 0 -1 4194304 100 0 0 0 1 2 0 0 20 0 1 0 987654 1000 50";
        assert_eq!(parse_start_time(stat), Some(987654));
        assert_eq!(parse_start_time("4242 (x) S 1"), None);
        let own = start_time(std::process::id()).unwrap();
        assert!(own > 0);
    }

    #[test]
    fn only_the_recorded_process_or_its_orphaned_group_is_ours() {
        use Leftover::*;
        assert_eq!(classify(Some(7), Some(7), true), Ours);
        assert_eq!(classify(Some(7), Some(8), true), NotOurs, "a recycled PID");
        assert_eq!(classify(Some(7), None, true), Ours, "members outlived the leader");
        assert_eq!(classify(Some(7), None, false), NotOurs, "all gone");
        assert_eq!(classify(None, Some(7), true), NotOurs, "an unreadable record");
    }
}
