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
//!
//! The leader is the container shim ([`crate::shim`]), recorded before it runs anything (the
//! start barrier), so a container can never run unrecorded. Killing a group means SIGUSR1 to
//! the leader first (the shim SIGKILLs its whole tree, including processes that left the group;
//! a record of an older agent, whose leader is the command itself, dies of SIGUSR1's default
//! action), a short wait, then SIGKILL to the group as a backstop.

use std::collections::BTreeMap;
use std::fs::{self, File, TryLockError};
use std::io;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use crate::process::{Delivery, ProcessStat, Signal, signal_group, signal_leader, start_time};

use crate::shim::TREE_KILL_WAIT;

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
    groups: Arc<Mutex<Groups>>,
    /// Where each group is recorded, with the lock held for the agent's life.
    state: Option<Arc<StateDir>>,
    /// The longest grace period of any pod run so far, in milliseconds: what a shutdown waits
    /// for at most before it kills every group.
    largest_grace_ms: Arc<AtomicU64>,
}

#[derive(Debug, Default)]
struct Groups {
    by_pgid: BTreeMap<u32, GroupOwner>,
    /// Every group has been killed ([`ContainerGroups::kill_all`]): no more may be added, so
    /// that no container starts after the agent's last kill.
    closed: bool,
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

    /// A container's group started: listed, and recorded in the state directory. The error of
    /// a record that cannot be written is returned (the group is listed all the same): the
    /// caller kills a shim that has not run anything yet, or logs it. After [`Self::kill_all`]
    /// the group is neither listed nor recorded, and the error is
    /// [`io::ErrorKind::Interrupted`]: the caller kills it.
    pub fn add(&self, pgid: u32, owner: GroupOwner) -> io::Result<()> {
        // Under the lock, so that a group is either added before `kill_all` (which kills it)
        // or refused after it.
        let mut groups = self.lock();
        if groups.closed {
            return Err(io::Error::new(io::ErrorKind::Interrupted, "the agent is killing every container"));
        }
        let record = match &self.state {
            Some(state) => start_time(pgid)
                .map(|start| format!("{start} {} {}\n", owner.pod, owner.container))
                .and_then(|text| write_atomically(&state.containers, pgid, &text)),
            None => Ok(()),
        };
        groups.by_pgid.insert(pgid, owner);
        record
    }

    /// A container's group was killed after its leader exited; its ID may be reused from now on.
    pub fn remove(&self, pgid: u32) {
        self.lock().by_pgid.remove(&pgid);
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

    /// Kills every group at once: SIGUSR1 to each leader (a shim kills its whole tree), up to
    /// [`TREE_KILL_WAIT`] for the leaders to end, then SIGKILL to each group. Returns how many
    /// were still there. Records stay: the next agent finds the groups gone. No group may be
    /// added afterwards.
    pub fn kill_all(&self) -> usize {
        let groups = {
            let mut groups = self.lock();
            groups.closed = true;
            groups.by_pgid.clone()
        };
        let mut killed = 0;
        let mut asked = Vec::new();
        for (&pgid, owner) in &groups {
            // The leaders are the agent's children, unreaped while listed: their PIDs are theirs.
            match signal_leader(pgid, Signal::KillTree) {
                Ok(Delivery::Sent) => asked.push(pgid),
                Ok(Delivery::Gone) => {}
                Err(error) => {
                    tracing::error!(pgid, pod = %owner.pod, container = %owner.container, %error, "cannot kill container")
                }
            }
        }
        wait_for_leaders(&asked, TREE_KILL_WAIT);
        for (pgid, owner) in groups {
            match signal_group(pgid, Signal::Kill) {
                Ok(Delivery::Sent) => {}
                Ok(Delivery::Gone) if !asked.contains(&pgid) => continue,
                Ok(Delivery::Gone) => {}
                Err(error) => {
                    tracing::error!(pgid, pod = %owner.pod, container = %owner.container, %error, "cannot kill container");
                    continue;
                }
            }
            killed += 1;
            tracing::warn!(pgid, pod = %owner.pod, container = %owner.container, "container killed");
        }
        killed
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Groups> {
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
    // First every leader that still runs is asked (SIGUSR1: a shim kills its tree), then each
    // group still ours is SIGKILLed as a backstop, then the records go.
    let mut ours = Vec::new();
    let mut records = Vec::new();
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
        let (pod, container) =
            (fields.next().unwrap_or("?").to_owned(), fields.next().unwrap_or("?").to_owned());
        let now = start_time(pgid).ok();
        if classify(recorded, now, group_alive(pgid)) == Leftover::Ours {
            let mut sent = false;
            // Only a leader with the recorded start time is signalled by PID.
            if now.is_some() {
                match signal_leader(pgid, Signal::KillTree) {
                    Ok(Delivery::Sent) => sent = true,
                    Ok(Delivery::Gone) => {}
                    Err(error) => {
                        tracing::error!(pgid, pod, container, %error, "cannot kill a container a previous agent left running")
                    }
                }
            }
            ours.push((pgid, recorded, pod, container, sent));
        }
        records.push(path);
    }
    let asked: Vec<u32> = ours.iter().filter(|o| o.4).map(|o| o.0).collect();
    wait_for_leaders(&asked, TREE_KILL_WAIT);
    let mut killed = Vec::new();
    for (pgid, recorded, pod, container, mut sent) in ours {
        // Classified again: a leader that ended may have been reaped and its PID reused.
        if classify(recorded, start_time(pgid).ok(), group_alive(pgid)) == Leftover::Ours {
            match signal_group(pgid, Signal::Kill) {
                Ok(Delivery::Sent) => sent = true,
                Ok(Delivery::Gone) => {}
                Err(error) => {
                    tracing::error!(pgid, pod, container, %error, "cannot kill a container a previous agent left running")
                }
            }
        }
        if sent {
            tracing::warn!(pgid, pod, container, "killed a container a previous agent left running");
            killed.push(pgid);
        }
    }
    for path in records {
        fs::remove_file(&path)?;
    }
    // They are not our children: their new parent reaps them. Wait until none runs, bounded;
    // this runs once at start, before anything else does, so blocking here holds nothing up.
    // Before any runtime exists (a blocking wait on real processes), so std's clock.
    #[allow(clippy::disallowed_methods)]
    let deadline = Instant::now() + LEFTOVER_WAIT;
    #[allow(clippy::disallowed_methods)]
    while killed.iter().any(|&pgid| runs(pgid)) && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(20));
    }
    Ok(killed.len())
}

/// Waits (blocking, polling, at most `wait`) until none of `leaders` runs any more (gone, or a
/// zombie its parent has not reaped yet). Used where no runtime may be (the agent's start, its
/// forced shutdown on the signal thread).
fn wait_for_leaders(leaders: &[u32], wait: Duration) {
    // Real processes on the wall clock, outside any runtime: std's clock.
    #[allow(clippy::disallowed_methods)]
    let deadline = Instant::now() + wait;
    #[allow(clippy::disallowed_methods)]
    while leaders.iter().any(|&pid| runs(pid)) && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(5));
    }
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

/// Whether process `pid` runs: there, and not a zombie its parent has not reaped yet.
fn runs(pid: u32) -> bool {
    i32::try_from(pid)
        .ok()
        .and_then(rustix::process::Pid::from_raw)
        .is_some_and(|pid| ProcessStat::read(pid).is_ok_and(|stat| !stat.zombie))
}

fn write_atomically(dir: &Path, pgid: u32, text: &str) -> io::Result<()> {
    let tmp = dir.join(format!(".{pgid}.tmp"));
    match fs::write(&tmp, text) {
        // The state directory was deleted under the agent (with its manifests folder, say):
        // made again, so that the containers started from now on are recorded, not refused.
        Err(error) if error.kind() == io::ErrorKind::NotFound => {
            tracing::warn!(dir = %dir.display(), "the state directory is gone; making it again");
            fs::create_dir_all(dir)?;
            fs::write(&tmp, text)?;
        }
        written => written?,
    }
    fs::rename(&tmp, dir.join(pgid.to_string()))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A state directory deleted under the agent is made again by the next record.
    #[test]
    fn a_deleted_state_directory_is_made_again() {
        let dir = std::env::temp_dir().join(format!("probelet-groups-gone-{}", std::process::id()));
        let containers = dir.join("containers");
        fs::create_dir_all(&containers).unwrap();
        fs::remove_dir_all(&dir).unwrap();
        write_atomically(&containers, 4242, "1 pod c\n").unwrap();
        assert_eq!(fs::read_to_string(containers.join("4242")).unwrap(), "1 pod c\n");
        let _ = fs::remove_dir_all(&dir);
    }

    /// Once every group has been killed, a group that starts later is refused, neither listed
    /// (a second kill would miss nothing) nor recorded.
    #[test]
    fn no_group_is_added_after_every_group_was_killed() {
        let dir = std::env::temp_dir().join(format!("probelet-groups-closed-{}", std::process::id()));
        let _ = fs::remove_dir_all(&dir);
        let (groups, _) = ContainerGroups::open(&dir).unwrap();
        assert_eq!(groups.kill_all(), 0);
        let owner = GroupOwner { pod: "p".into(), container: "c".into() };
        let own = std::process::id();
        let error = groups.add(own, owner).unwrap_err();
        assert_eq!(error.kind(), io::ErrorKind::Interrupted);
        assert!(groups.lock().by_pgid.is_empty());
        assert!(!dir.join("containers").join(own.to_string()).exists());
        drop(groups);
        let _ = fs::remove_dir_all(&dir);
    }

    /// A record an older agent wrote names the command itself as the leader, not a shim: the
    /// SIGUSR1 meant for a shim kills it (its default action), and the group's SIGKILL the rest.
    #[test]
    fn a_record_whose_leader_is_not_a_shim_is_still_killed() {
        use std::os::unix::process::{CommandExt as _, ExitStatusExt as _};
        let dir = std::env::temp_dir().join(format!("probelet-groups-old-record-{}", std::process::id()));
        let _ = fs::remove_dir_all(&dir);
        fs::create_dir_all(&dir).unwrap();
        let mut leader = std::process::Command::new("sh")
            .args(["-c", "sleep 7371 & wait"])
            .process_group(0)
            .spawn()
            .unwrap();
        let pgid = leader.id();
        let text = format!("{} default/old app\n", start_time(pgid).unwrap());
        write_atomically(&dir, pgid, &text).unwrap();
        assert_eq!(kill_leftovers(&dir).unwrap(), 1);
        let status = leader.wait().unwrap();
        assert_eq!(status.signal(), Some(10), "SIGUSR1 first: {status:?}");
        // What init has not reaped yet (a zombie) no longer runs. A SIGKILL takes effect when
        // the process is next scheduled: look until it has (at most 5 s).
        let running_in_group = || {
            fs::read_dir("/proc")
                .unwrap()
                .filter_map(|e| fs::read_to_string(e.ok()?.path().join("stat")).ok())
                .filter_map(|stat| {
                    let rest = stat.rsplit_once(')')?.1.split_whitespace().collect::<Vec<_>>();
                    (rest.get(2)?.parse::<u32>().ok()? == pgid && !matches!(*rest.first()?, "Z" | "X"))
                        .then_some(())
                })
                .count()
        };
        for _ in 0..500 {
            if running_in_group() == 0 {
                break;
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        assert_eq!(running_in_group(), 0, "the group's SIGKILL ended the rest");
        assert_eq!(fs::read_dir(&dir).unwrap().count(), 0, "the record is gone");
        let _ = fs::remove_dir_all(&dir);
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
