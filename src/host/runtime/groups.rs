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
//! A record is `containers/<pgid>` ([`super::leftovers::Record`]): the group leader's start time
//! (field 22 of `/proc/<pid>/stat`, in clock ticks since boot), the pod, the container and the
//! boot ID. While the agent runs, a thread writes its heartbeat beside the records every
//! [`HEARTBEAT_PERIOD`]. [`super::leftovers`] reads the records and the last heartbeat of an
//! agent that died.
//!
//! The leader is the container shim ([`crate::shim`]), recorded before it runs anything (the
//! start barrier), so a container can never run unrecorded. Killing a group means SIGUSR1 to
//! the leader first (the shim SIGKILLs its whole tree, including processes that left the group),
//! a short wait, then SIGKILL to the group as a backstop.

use std::collections::BTreeMap;
use std::fs::{self, File, TryLockError};
use std::io;
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use crate::process::{Delivery, ProcessStat, Signal, signal_group, signal_leader};

use crate::host::manifests::{LoadedPod, RanBefore};

use super::leftovers::{
    HEARTBEAT, HEARTBEAT_PERIOD, RUNNING_PODS, Record, boot_id, heartbeat_line, kill_leftovers, now_ticks,
    running_agent_of_records, running_pods_text,
};

use crate::shim::{TREE_KILL_WAIT, ask_to_kill_tree};

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
    #[error(
        "state directory {}: it records containers of the running agent {pid} (its lock lost with a deleted folder, say); stop that agent first: another agent here, or this one on another state directory, would run them twice",
        path.display()
    )]
    RecordsOfRunningAgent { path: PathBuf, pid: u32 },
    #[error(
        "state directory {}: a symbolic link, not a folder: the agent keeps its container records in a folder of its own there, and removes what it does not need",
        path.display()
    )]
    Symlink { path: PathBuf },
}

/// Why a file of the state directory was not written.
#[derive(Debug, thiserror::Error)]
pub enum StateWriteError {
    /// The directory at the state directory's path was replaced while this agent ran, and
    /// another agent holds it now: what is there is that agent's (`StateDir::follow`).
    #[error("{}: replaced while this agent ran and held by another agent now; restart this agent", dir.display())]
    HeldByAnotherAgent { dir: PathBuf },
    #[error(transparent)]
    Io(#[from] io::Error),
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
    /// Each running group, with its leader's start time as read when it was added (written
    /// again as it was, never read afresh: the leader may be reaped and its PID reused).
    by_pgid: BTreeMap<u32, Group>,
    /// Every group has been killed ([`ContainerGroups::kill_all`]): no more may be added, so
    /// that no container starts after the agent's last kill.
    closed: bool,
}

#[derive(Debug, Clone)]
struct Group {
    owner: GroupOwner,
    /// The record's text, when there is a state directory and the leader could be read.
    record: Option<String>,
    /// The leader's start time, when it could be read: with the group's ID, the mark its
    /// shim gives the container's processes ([`crate::shim::mark`]).
    start: Option<u64>,
    /// A shim's control socket, once it reported the start ([`ContainerGroups::keep_control`]).
    control: Option<Arc<UnixStream>>,
}

#[derive(Debug)]
struct StateDir {
    /// The state directory's path, as the next agent will look for it.
    dir: PathBuf,
    containers: PathBuf,
    /// This boot's ID, written in every record.
    boot: Option<String>,
    /// The locks held while this agent runs, so two agents never share (and kill) each other's
    /// records: the directory's at start, and each directory that has taken its place since
    /// ([`StateDir::follow`]), as long as it exists.
    locks: Mutex<Vec<File>>,
    /// Device and inode of the lock file of the directory the records were last written in.
    current: Mutex<Option<(u64, u64)>>,
    /// Another agent holds the directory the path names now: nothing is written there (its
    /// records and heartbeat are that agent's), and it was said once.
    lost: AtomicBool,
    /// The directory could not be made or locked again: said once while it lasts.
    failing: AtomicBool,
}

/// Device, inode and link count of a file.
fn file_identity(metadata: &fs::Metadata) -> (u64, u64, u64) {
    use std::os::unix::fs::MetadataExt as _;
    (metadata.dev(), metadata.ino(), metadata.nlink())
}

/// Locks `dir`'s lock file (made if need be) for this agent's life.
/// Locks `dir`'s `lock` file. With `wait_for_stopping`, one another agent holds is waited for
/// ([`HeldByAnotherAgent`]): at start, not when the running agent follows a moved directory.
fn take_lock(dir: &Path, wait_for_stopping: bool) -> Result<File, StateDirError> {
    let lock_path = dir.join("lock");
    let lock = File::options()
        .create(true)
        .truncate(false)
        .write(true)
        .open(&lock_path)
        .map_err(|source| StateDirError::Io { path: lock_path.clone(), source })?;
    let mut held = HeldByAnotherAgent::new();
    loop {
        match lock.try_lock() {
            Ok(()) => return Ok(lock),
            Err(TryLockError::WouldBlock) if wait_for_stopping && held.wait() => {}
            Err(TryLockError::WouldBlock) => return Err(StateDirError::InUse { path: dir.to_owned() }),
            Err(TryLockError::Error(source)) => return Err(StateDirError::Io { path: lock_path, source }),
        }
    }
}

/// The wait for what another agent of this user holds (the state directory's lock, the
/// manifests folder's claim), in case that agent is only stopping: a killed agent holds both
/// until its exit has closed its descriptors, which comes after it has gone from sight and,
/// under load, a moment after its kill (a helper's crash test had the next agent refused as
/// "served by another running agent" once in 60 rounds). A running agent holds them for good:
/// it is named after [`HeldByAnotherAgent::WAIT`].
pub(crate) struct HeldByAnotherAgent {
    deadline: std::time::Instant,
}

impl HeldByAnotherAgent {
    /// How long what another agent holds is waited for.
    pub(crate) const WAIT: Duration = Duration::from_secs(2);

    // Before any runtime exists (a blocking wait at start), so std's clock.
    #[allow(clippy::disallowed_methods)]
    pub(crate) fn new() -> Self {
        HeldByAnotherAgent { deadline: std::time::Instant::now() + Self::WAIT }
    }

    /// Sleeps a little and says whether to try again; false once the wait is over.
    #[allow(clippy::disallowed_methods)]
    pub(crate) fn wait(&mut self) -> bool {
        if std::time::Instant::now() >= self.deadline {
            return false;
        }
        std::thread::sleep(Duration::from_millis(20));
        true
    }
}

impl StateDir {
    /// Keeps the records where the next agent will look for them. The path's directory is
    /// this agent's while the lock file it holds is the one at `dir/lock` and `containers` is
    /// there. Otherwise (the directory deleted, replaced by another, a symlink on the way
    /// swapped, `containers` deleted) the directory the path names now is made if need be and
    /// locked (or its lock found among those held: a swap back), and every running group's
    /// record and the heartbeat are written there. The lock of a directory moved aside stays
    /// held, so that no agent takes the records left there for a crashed agent's; that of a
    /// deleted one is let go. Returns how many records were written again, `None` if nothing
    /// moved or nothing could be done.
    fn follow(&self, groups: &Mutex<Groups>) -> Option<usize> {
        let at_path =
            fs::metadata(self.dir.join("lock")).ok().map(|m| file_identity(&m)).map(|(d, i, _)| (d, i));
        let mut current = self.current.lock().unwrap_or_else(PoisonError::into_inner);
        let mut locks = self.locks.lock().unwrap_or_else(PoisonError::into_inner);
        // Deleted directories' locks go: nothing is left there to guard.
        locks.retain(|lock| lock.metadata().is_ok_and(|m| file_identity(&m).2 > 0));
        let held = |locks: &[File]| {
            at_path.is_some_and(|at| {
                locks
                    .iter()
                    .any(|l| l.metadata().is_ok_and(|m| (file_identity(&m).0, file_identity(&m).1) == at))
            })
        };
        if at_path.is_some() && at_path == *current && held(&locks) && self.containers.is_dir() {
            return None;
        }
        let said = |flag: &AtomicBool| flag.swap(true, Ordering::Relaxed);
        if let Err(error) = fs::create_dir_all(&self.containers) {
            if !said(&self.failing) {
                tracing::warn!(dir = %self.dir.display(), %error, "the state directory is gone and cannot be made again");
            }
            return None;
        }
        if !held(&locks) {
            match take_lock(&self.dir, false) {
                Ok(lock) => locks.push(lock),
                Err(error @ StateDirError::InUse { .. }) => {
                    if !said(&self.lost) {
                        tracing::error!(%error, "the state directory was replaced and another agent holds it now: this agent writes nothing there (container records, running pods) and starts no container (restart it); after its crash the containers running now would run twice");
                    }
                    return None;
                }
                Err(error) => {
                    if !said(&self.failing) {
                        tracing::warn!(%error, "the state directory was replaced and cannot be locked");
                    }
                    return None;
                }
            }
        }
        drop(locks);
        *current =
            fs::metadata(self.dir.join("lock")).ok().map(|m| file_identity(&m)).map(|(d, i, _)| (d, i));
        drop(current);
        self.lost.store(false, Ordering::Relaxed);
        self.failing.store(false, Ordering::Relaxed);
        // Under the groups' lock: a group added meanwhile is written by `add` after this, one
        // removed is not written again.
        let groups = groups.lock().unwrap_or_else(PoisonError::into_inner);
        let mut written = 0;
        for (&pgid, group) in &groups.by_pgid {
            let Some(record) = &group.record else { continue };
            match write_atomically(&self.containers, &pgid.to_string(), record) {
                Ok(()) => written += 1,
                Err(error) => tracing::warn!(pgid, %error, "cannot write a container's record again"),
            }
        }
        drop(groups);
        let _ = write_atomically(&self.dir, HEARTBEAT, &heartbeat_line(self.boot.as_deref(), now_ticks()));
        tracing::warn!(dir = %self.dir.display(), records = written, "the state directory was removed or replaced while the agent ran: its container records are written there again");
        Some(written)
    }

    /// Whether records and the heartbeat may be written at the path: not while another agent
    /// holds the directory there.
    fn writable(&self) -> bool {
        !self.lost.load(Ordering::Relaxed)
    }

    /// Writes `text` to `name` in `folder` (the state directory or its `containers`), whole or
    /// not at all, if the directory at the path is still this agent's: what another agent holds
    /// there (its records, its running pods' list) is that agent's, and it or the next agent
    /// after it trusts it. Every file of the state directory but the heartbeat is written here.
    fn write(&self, folder: &Path, name: &str, text: &str) -> Result<(), StateWriteError> {
        if !self.writable() {
            return Err(StateWriteError::HeldByAnotherAgent { dir: self.dir.clone() });
        }
        Ok(write_atomically(folder, name, text)?)
    }
}

/// How often the state directory's path is checked for another directory in its place (a
/// `stat`, no write).
const WATCH_PERIOD: Duration = Duration::from_secs(1);

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
        if fs::symlink_metadata(&containers).is_ok_and(|m| m.file_type().is_symlink()) {
            return Err(StateDirError::Symlink { path: containers });
        }
        fs::create_dir_all(&containers).map_err(io_error(&containers))?;
        let lock = take_lock(dir, true)?;
        let boot = boot_id();
        if let Some(pid) = running_agent_of_records(dir, boot.as_deref()) {
            return Err(StateDirError::RecordsOfRunningAgent { path: dir.to_owned(), pid });
        }
        let killed = kill_leftovers(dir, boot.as_deref()).map_err(io_error(&containers))?;
        let state = Arc::new(StateDir {
            dir: dir.to_owned(),
            containers,
            boot,
            current: Mutex::new(lock.metadata().ok().map(|m| file_identity(&m)).map(|(d, i, _)| (d, i))),
            locks: Mutex::new(vec![lock]),
            lost: AtomicBool::new(false),
            failing: AtomicBool::new(false),
        });
        let groups = ContainerGroups { state: Some(state.clone()), ..ContainerGroups::default() };
        beat(&state, &groups.groups);
        Ok((groups, killed))
    }

    /// A container's group started: listed, and recorded in the state directory. The error of
    /// a record that cannot be written is returned, naming the record's path (the group is
    /// listed all the same): the caller kills the group (a shim that has not run anything yet, or a
    /// program spawned without one) and fails the start. After [`Self::kill_all`]
    /// the group is neither listed nor recorded, and the error is
    /// [`io::ErrorKind::Interrupted`]: the caller kills it.
    pub fn add(&self, pgid: u32, owner: GroupOwner) -> io::Result<()> {
        // Under the lock, so that a group is either added before `kill_all` (which kills it)
        // or refused after it.
        let mut groups = self.lock();
        if groups.closed {
            return Err(io::Error::new(io::ErrorKind::Interrupted, "the agent is killing every container"));
        }
        let stat = ProcessStat::of(pgid);
        let start = stat.as_ref().ok().map(|stat| stat.start);
        let (record, written) = match &self.state {
            Some(state) => match stat {
                Ok(stat) => {
                    let text = Record {
                        start: stat.start,
                        pod: owner.pod.clone(),
                        container: owner.container.clone(),
                        boot: state.boot.clone(),
                    }
                    .line();
                    // The error names the records' folder, for the operator to find the disk,
                    // in Go's words as the kubelet's would be; not the record, whose name (the
                    // shim's PID) changes at every retry: one text, so that the container's
                    // waiting message and its `Failed` events stay the same while it lasts.
                    // Not into a directory another agent holds (its records are that agent's
                    // to sweep), and not unrecorded either: the next agent on this path would
                    // not know it, and it would run beside its next copy.
                    let written =
                        state.write(&state.containers, &pgid.to_string(), &text).map_err(
                            |error| match error {
                                StateWriteError::Io(error) => {
                                    let text = probelet_actors::gofmt::go_errno_text(&error);
                                    io::Error::new(
                                        error.kind(),
                                        format!("{}: {text}", state.containers.display()),
                                    )
                                }
                                held @ StateWriteError::HeldByAnotherAgent { .. } => {
                                    io::Error::other(held.to_string())
                                }
                            },
                        );
                    (Some(text), written)
                }
                Err(error) => (None, Err(error)),
            },
            None => (None, Ok(())),
        };
        groups.by_pgid.insert(pgid, Group { owner, record, start, control: None });
        written
    }

    /// The state directory the groups are recorded in, if any.
    pub fn state_dir(&self) -> Option<&Path> {
        self.state.as_deref().map(|state| state.dir.as_path())
    }

    /// Names the running `pods`, and the names `waiting` holds, in the state directory for the
    /// next agent ([`RUNNING_PODS`], `running_pods_text`), under the records' rule: the path
    /// is looked at first, and a directory found in its place is made this agent's as the
    /// heartbeat thread would a second later (`StateDir::follow`); while another agent
    /// holds it, nothing is written ([`StateWriteError::HeldByAnotherAgent`]): that agent, or
    /// the next one after it, decides by its own list which pod keeps a name. Nothing to do
    /// without a state directory.
    pub fn write_running_pods<'a>(
        &self,
        pods: impl Iterator<Item = &'a LoadedPod>,
        waiting: &RanBefore,
    ) -> Result<(), StateWriteError> {
        let Some(state) = &self.state else { return Ok(()) };
        state.follow(&self.groups);
        state.write(&state.dir, RUNNING_PODS, &running_pods_text(pods, waiting))
    }

    /// Keeps the control socket of the shim leading group `pgid` while the group is listed:
    /// the agent asks the shim to kill its tree there as well as by SIGUSR1, which the
    /// container can drown ([`probelet_actors::shim::KILL_TREE`]). One descriptor per
    /// running container ([`super::budget::FDS_PER_CONTAINER`]).
    pub fn keep_control(&self, pgid: u32, control: UnixStream) {
        if let Some(group) = self.lock().by_pgid.get_mut(&pgid) {
            group.control = Some(Arc::new(control));
        }
    }

    /// Asks the shim leading group `pgid` to kill its tree on its control socket; whether it
    /// had one to ask on.
    pub fn ask_to_kill_tree(&self, pgid: u32) -> bool {
        let control = self.lock().by_pgid.get(&pgid).and_then(|group| group.control.clone());
        control.is_some_and(|control| ask_to_kill_tree(&*control))
    }

    /// A container's group was killed after its leader exited; its ID may be reused from now on.
    pub fn remove(&self, pgid: u32) {
        self.unlist(pgid);
        self.forget_record(pgid);
    }

    /// No longer lists group `pgid` (its leader has exited and is about to be reaped: from
    /// then on its ID may name another process, which nothing here may signal), but keeps its
    /// record until [`Self::forget_record`]. Answers the mark of its leader's shim, if known,
    /// unless the shim said it killed its whole tree ([`crate::shim::TREE_KILLED`]): then
    /// nothing carries the mark any more.
    pub fn unlist(&self, pgid: u32) -> Option<String> {
        let group = self.lock().by_pgid.remove(&pgid)?;
        if group.control.as_deref().is_some_and(crate::shim::said_tree_killed) {
            return None;
        }
        group.start.map(|start| crate::shim::mark(pgid, start))
    }

    /// Removes the record of group `pgid`, once what it names is gone; not if a group of that
    /// ID has been listed since (a new shim took the ID: the record is its own now).
    pub fn forget_record(&self, pgid: u32) {
        // Under the groups' lock, which `add` writes records under.
        let groups = self.lock();
        if groups.by_pgid.contains_key(&pgid) {
            return;
        }
        if let Some(state) = self.state.as_ref().filter(|state| state.writable()) {
            let path = state.containers.join(pgid.to_string());
            if let Err(error) = fs::remove_file(&path)
                && error.kind() != io::ErrorKind::NotFound
            {
                tracing::warn!(path = %path.display(), %error, "cannot remove a container's record");
            }
        }
        drop(groups);
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
    /// were still running. Records stay: the next agent finds the groups gone. No group may be
    /// added afterwards.
    pub fn kill_all(&self) -> usize {
        self.kill_all_with(|| {})
    }

    /// [`Self::kill_all`], running `asked` once every shim has been asked on its control socket
    /// and before any signal: a test stands in there for a shim that ends at once.
    ///
    /// A shim asked on its control socket kills its tree and ends within a millisecond, and
    /// the runtime unlists its group and reaps it, often before the signals below go out. So
    /// what runs is read before anything is asked: a group that ran then is counted as killed,
    /// though its SIGUSR1 finds no one (the forced stop said "0 container process group(s)
    /// killed" of the container it had just killed). And a group is signalled only while it is
    /// listed, under the lock the runtime unlists it under: its leader is unreaped until then,
    /// so its ID names no other process. After the reap the ID is free, and a SIGKILL by it
    /// would reach the group of whatever took it (another agent's container, say):
    /// `docs/reliability.md`, "The forced stop's count, and the IDs it signals".
    fn kill_all_with(&self, asked: impl FnOnce()) -> usize {
        let (groups, controls) = {
            let mut groups = self.lock();
            groups.closed = true;
            let owners = groups
                .by_pgid
                .iter()
                .map(|(&pgid, group)| (pgid, (group.owner.clone(), leader_runs(pgid, group.start))))
                .collect::<BTreeMap<_, _>>();
            let controls: Vec<_> =
                groups.by_pgid.values().filter_map(|group| group.control.clone()).collect();
            (owners, controls)
        };
        for control in &controls {
            ask_to_kill_tree(&**control);
        }
        asked();
        let mut killed = 0;
        let mut sent = Vec::new();
        for (&pgid, (owner, _)) in &groups {
            match self.signal_listed(pgid, |pgid| signal_leader(pgid, Signal::KillTree)) {
                Some(Ok(Delivery::Sent)) => sent.push(pgid),
                Some(Ok(Delivery::Gone)) | None => {}
                Some(Err(error)) => {
                    tracing::error!(pgid, pod = %owner.pod, container = %owner.container, %error, "cannot kill container")
                }
            }
        }
        wait_for_leaders(&sent, TREE_KILL_WAIT);
        for (pgid, (owner, ran)) in groups {
            match self.signal_listed(pgid, |pgid| signal_group(pgid, Signal::Kill)) {
                Some(Ok(Delivery::Sent)) => {}
                // Ended (and unlisted) since the kill began: of the control socket's request,
                // if it ran then.
                Some(Ok(Delivery::Gone)) | None if !ran && !sent.contains(&pgid) => continue,
                Some(Ok(Delivery::Gone)) | None => {}
                Some(Err(error)) => {
                    tracing::error!(pgid, pod = %owner.pod, container = %owner.container, %error, "cannot kill container");
                    continue;
                }
            }
            killed += 1;
            tracing::warn!(pgid, pod = %owner.pod, container = %owner.container, "container killed");
        }
        killed
    }

    /// `send` to group `pgid` if it is still listed, under the lock; `None` once unlisted (its
    /// leader may be reaped, and its ID another process's).
    pub(super) fn signal_listed(
        &self,
        pgid: u32,
        send: impl FnOnce(u32) -> io::Result<Delivery>,
    ) -> Option<io::Result<Delivery>> {
        let groups = self.lock();
        groups.by_pgid.contains_key(&pgid).then(|| send(pgid))
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Groups> {
        self.groups.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

/// Writes the heartbeat now, then every [`HEARTBEAT_PERIOD`] on a thread of its own for as
/// long as `state` lives: a record's group was the container's at least until then
/// ([`super::leftovers`]). The same thread looks every [`WATCH_PERIOD`] for another directory
/// in the state directory's place ([`StateDir::follow`]).
fn beat(state: &Arc<StateDir>, groups: &Arc<Mutex<Groups>>) {
    let write = |state: &StateDir| {
        write_atomically(&state.dir, HEARTBEAT, &heartbeat_line(state.boot.as_deref(), now_ticks()))
    };
    if let Err(error) = write(state) {
        tracing::warn!(dir = %state.dir.display(), %error, "cannot write the state directory's heartbeat");
    }
    let weak = Arc::downgrade(state);
    let groups = Arc::downgrade(groups);
    let spawned = std::thread::Builder::new().name("heartbeat".into()).spawn(move || {
        let mut failing = false;
        let beats_per_write = (HEARTBEAT_PERIOD.as_secs() / WATCH_PERIOD.as_secs()).max(1);
        for tick in 1u64.. {
            std::thread::sleep(WATCH_PERIOD);
            let (Some(state), Some(groups)) = (weak.upgrade(), groups.upgrade()) else { return };
            if state.follow(&groups).is_some() || !tick.is_multiple_of(beats_per_write) || !state.writable() {
                continue;
            }
            // Said once while it lasts.
            match write(&state) {
                Ok(()) => failing = false,
                Err(error) if !failing => {
                    failing = true;
                    tracing::warn!(%error, "cannot write the state directory's heartbeat");
                }
                Err(_) => {}
            }
        }
    });
    if let Err(error) = spawned {
        tracing::warn!(%error, "cannot start the state directory's heartbeat; after a crash the next agent kills only what shows itself a container's");
    }
}

/// Waits (blocking, polling, at most `wait`) until none of `leaders` runs any more (gone, or a
/// zombie its parent has not reaped yet). Used where no runtime may be (the agent's start, its
/// forced shutdown on the signal thread).
pub(super) fn wait_for_leaders(leaders: &[u32], wait: Duration) {
    // Real processes on the wall clock, outside any runtime: std's clock.
    #[allow(clippy::disallowed_methods)]
    let deadline = Instant::now() + wait;
    #[allow(clippy::disallowed_methods)]
    while leaders.iter().any(|&pid| runs(pid)) && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(5));
    }
}

/// Whether the leader of listed group `pgid` runs: not a zombie, with the start time read when
/// it was listed (when it could be read).
fn leader_runs(pgid: u32, start: Option<u64>) -> bool {
    ProcessStat::of(pgid).is_ok_and(|stat| !stat.zombie && start.is_none_or(|start| stat.start == start))
}

/// Whether process `pid` runs: there, and not a zombie its parent has not reaped yet.
pub(super) fn runs(pid: u32) -> bool {
    ProcessStat::of(pid).is_ok_and(|stat| !stat.zombie)
}

/// Writes `text` to `dir/name` whole or not at all (a temporary file renamed over it).
fn write_atomically(dir: &Path, name: &str, text: &str) -> io::Result<()> {
    let tmp = dir.join(format!(".{name}.tmp"));
    let written = match fs::write(&tmp, text) {
        // The state directory was deleted under the agent (with its manifests folder, say):
        // made again, so that the containers started from now on are recorded, not refused.
        Err(error) if error.kind() == io::ErrorKind::NotFound => {
            tracing::warn!(dir = %dir.display(), "the state directory is gone; making it again");
            fs::create_dir_all(dir).and_then(|()| fs::write(&tmp, text))
        }
        written => written,
    }
    .and_then(|()| fs::rename(&tmp, dir.join(name)));
    // A write that failed (a full disk) leaves no temporary file behind: one per failed start
    // used the directory's inodes up until the next agent (a helper's hostile test).
    if written.is_err() {
        let _ = fs::remove_file(&tmp);
    }
    written
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The lock of an agent that is stopping (here: let go 300 ms later) is waited for: a
    /// killed agent holds it until its exit has closed its descriptors, a moment after it has
    /// gone from sight. Before, the next agent started then was refused as if another agent ran.
    #[test]
    fn a_lock_let_go_within_the_wait_is_taken() {
        let dir = std::env::temp_dir().join(format!("probelet-groups-stopping-{}", std::process::id()));
        fs::create_dir_all(&dir).unwrap();
        let held = File::options().create(true).truncate(false).write(true).open(dir.join("lock")).unwrap();
        held.try_lock().unwrap();
        let holder = std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(300));
            drop(held);
        });
        assert!(take_lock(&dir, true).is_ok(), "taken once let go");
        holder.join().unwrap();
        let _ = fs::remove_dir_all(&dir);
    }

    /// A record that cannot be put in place leaves no temporary file behind.
    #[test]
    fn a_failed_write_leaves_no_temporary_file() {
        let dir = std::env::temp_dir().join(format!("probelet-groups-tmp-{}", std::process::id()));
        // A directory, not empty, where the record would go: the rename fails.
        fs::create_dir_all(dir.join("42").join("inside")).unwrap();
        assert!(write_atomically(&dir, "42", "1 pod app -\n").is_err());
        assert!(!dir.join(".42.tmp").exists(), "the temporary file was left");
        let _ = fs::remove_dir_all(&dir);
    }

    /// A state directory deleted, or replaced by another, while the agent runs: the records
    /// of its running containers are written again where the next agent will look, and that
    /// directory is locked (a second agent on it is refused).
    #[test]
    fn the_records_follow_the_state_directorys_path() {
        let base = std::env::temp_dir().join(format!("probelet-groups-follow-{}", std::process::id()));
        let dir = base.join("state");
        let mut child = std::process::Command::new("sleep").arg("3711").spawn().unwrap();
        let pid = child.id();
        let (groups, _) = ContainerGroups::open(&dir).unwrap();
        let owner = GroupOwner { pod: "default/p".into(), container: "c".into() };
        groups.add(pid, owner).unwrap();
        let state = groups.state.clone().unwrap();
        let record = dir.join("containers").join(pid.to_string());
        let written = fs::read_to_string(&record).unwrap();
        assert_eq!(state.follow(&groups.groups), None, "nothing moved");

        fs::remove_dir_all(&dir).unwrap();
        assert_eq!(state.follow(&groups.groups), Some(1), "deleted: written again");
        assert_eq!(fs::read_to_string(&record).unwrap(), written);
        assert!(dir.join(HEARTBEAT).exists());
        assert!(
            matches!(ContainerGroups::open(&dir).map(|_| ()), Err(StateDirError::InUse { .. })),
            "locked"
        );

        // Moved aside and replaced by another folder (a deploy that swaps folders).
        fs::rename(&dir, base.join("old")).unwrap();
        fs::create_dir_all(dir.join("containers")).unwrap();
        assert_eq!(state.follow(&groups.groups), Some(1), "replaced: written in the new one");
        assert_eq!(fs::read_to_string(&record).unwrap(), written);
        assert!(
            matches!(ContainerGroups::open(&base.join("old")).map(|_| ()), Err(StateDirError::InUse { .. })),
            "the old one stays locked"
        );

        // Swapped back: its lock is already held, and the records are written there again
        // (a group started meanwhile is in the other one only).
        fs::remove_file(base.join("old/containers").join(pid.to_string())).unwrap();
        fs::rename(&dir, base.join("newer")).unwrap();
        fs::rename(base.join("old"), &dir).unwrap();
        assert_eq!(state.follow(&groups.groups), Some(1), "swapped back: written again");
        assert_eq!(fs::read_to_string(&record).unwrap(), written);
        assert_eq!(state.follow(&groups.groups), None);

        // A directory deleted by someone who makes it again at once, whatever its inode: the
        // lock at the path is not the one held.
        fs::remove_dir_all(&dir).unwrap();
        fs::create_dir_all(dir.join("containers")).unwrap();
        assert_eq!(state.follow(&groups.groups), Some(1), "made again: written again");
        assert_eq!(fs::read_to_string(&record).unwrap(), written);
        let _ = child.kill();
        let _ = child.wait();
        let _ = fs::remove_dir_all(&base);
    }

    /// Once another agent holds the directory that replaced this one's, a container can be
    /// recorded neither there (that agent's records) nor nowhere: its start is refused, naming
    /// the directory. (It started unrecorded, and ran beside its next copy after a crash.)
    #[test]
    fn no_group_is_recorded_nowhere_while_another_agent_holds_the_state_directory() {
        let base = std::env::temp_dir().join(format!("probelet-groups-lost-{}", std::process::id()));
        let dir = base.join("state");
        let child = Leader(std::process::Command::new("sleep").arg("3712").spawn().unwrap());
        let pid = child.0.id();
        let (groups, _) = ContainerGroups::open(&dir).unwrap();
        let state = groups.state.clone().unwrap();
        fs::remove_dir_all(&dir).unwrap();
        let (other, _) = ContainerGroups::open(&dir).unwrap();
        assert_eq!(state.follow(&groups.groups), None, "held by the other agent");
        let owner = GroupOwner { pod: "default/p".into(), container: "c".into() };
        let refused = groups.add(pid, owner);
        let _ = fs::remove_dir_all(&base);
        let refused = refused.expect_err("refused");
        assert!(refused.to_string().contains(&dir.display().to_string()), "{refused}");
        drop((other, child));
    }

    /// The running pods' list goes through the records' rule: while another agent holds the
    /// directory that replaced this one's, that agent's list is not overwritten (it, or the
    /// next agent after it, decides by its list which pod keeps a name), and the refusal names
    /// the directory; once that agent has let it go, the directory is this agent's again and
    /// the list is written there. Before, the list was written whoever held the directory.
    #[test]
    fn the_running_pods_list_is_not_written_where_another_agent_holds_the_state_directory() {
        let base = std::env::temp_dir().join(format!("probelet-groups-pods-held-{}", std::process::id()));
        let dir = base.join("state");
        let list = dir.join(RUNNING_PODS);
        let mut pod =
            LoadedPod { file: PathBuf::from("/m/web.yaml"), document: None, pod: Default::default() };
        pod.pod.metadata.uid = Some("uid-web".into());
        pod.pod.metadata.name = Some("web".into());
        pod.pod.metadata.namespace = Some("default".into());
        let write =
            |groups: &ContainerGroups| groups.write_running_pods([&pod].into_iter(), &RanBefore::default());
        let (groups, _) = ContainerGroups::open(&dir).unwrap();
        write(&groups).unwrap();
        let ours = fs::read_to_string(&list).unwrap();
        assert!(ours.starts_with("uid-web\tdefault\tweb\t"), "{ours:?}");

        fs::remove_dir_all(&dir).unwrap();
        let (other, _) = ContainerGroups::open(&dir).unwrap();
        fs::write(&list, "uid-other\n").unwrap();
        let refused = write(&groups);
        let theirs = fs::read_to_string(&list);
        let refused = refused.expect_err("refused while another agent holds it");
        assert!(matches!(refused, StateWriteError::HeldByAnotherAgent { .. }), "{refused}");
        assert!(refused.to_string().contains(&dir.display().to_string()), "{refused}");
        assert_eq!(theirs.unwrap(), "uid-other\n", "the other agent's list was overwritten");

        // Let go (that agent stopped): followed, and written. Its heartbeat thread may hold the
        // lock for a moment more, once a second: tried again for a bounded while.
        drop(other);
        let mut written = write(&groups);
        for _ in 0..100 {
            if written.is_ok() {
                break;
            }
            std::thread::sleep(Duration::from_millis(20));
            written = write(&groups);
        }
        let now = fs::read_to_string(&list);
        let _ = fs::remove_dir_all(&base);
        written.unwrap();
        assert_eq!(now.unwrap(), ours, "written once the directory is this agent's again");
    }

    /// A `containers` that is a symbolic link is refused: the agent removes what it does not
    /// need there, and would do so in whatever folder the link names.
    #[test]
    fn a_symlinked_records_folder_is_refused() {
        let dir = std::env::temp_dir().join(format!("probelet-groups-symlink-{}", std::process::id()));
        let elsewhere = dir.join("elsewhere");
        fs::create_dir_all(&elsewhere).unwrap();
        fs::write(elsewhere.join(".1.tmp"), "x").unwrap();
        std::os::unix::fs::symlink(&elsewhere, dir.join("containers")).unwrap();
        let refused = ContainerGroups::open(&dir).map(|_| ()).unwrap_err();
        assert!(matches!(refused, StateDirError::Symlink { .. }), "{refused}");
        assert!(elsewhere.join(".1.tmp").exists(), "nothing removed");
        let _ = fs::remove_dir_all(&dir);
    }

    /// A state directory deleted under the agent is made again by the next record.
    #[test]
    fn a_deleted_state_directory_is_made_again() {
        let dir = std::env::temp_dir().join(format!("probelet-groups-gone-{}", std::process::id()));
        let containers = dir.join("containers");
        fs::create_dir_all(&containers).unwrap();
        fs::remove_dir_all(&dir).unwrap();
        write_atomically(&containers, "4242", "1 pod c\n").unwrap();
        assert_eq!(fs::read_to_string(containers.join("4242")).unwrap(), "1 pod c\n");
        let _ = fs::remove_dir_all(&dir);
    }

    /// An agent on a state directory writes its heartbeat at once (and on, every 30 s): the
    /// next agent knows a record's group was the container's at least until then.
    #[test]
    fn the_state_directory_gets_a_heartbeat_at_once() {
        let dir = std::env::temp_dir().join(format!("probelet-groups-heartbeat-{}", std::process::id()));
        let _ = fs::remove_dir_all(&dir);
        let before = now_ticks();
        let (groups, _) = ContainerGroups::open(&dir).unwrap();
        let text = fs::read_to_string(dir.join(HEARTBEAT)).unwrap();
        let (boot, ticks) = text.trim().split_once(' ').unwrap();
        assert_eq!(Some(boot.to_owned()), boot_id());
        let ticks: u64 = ticks.parse().unwrap();
        assert!(before <= ticks && ticks <= now_ticks(), "{before} <= {ticks}");
        // The clock of process start times: this process started before the beat.
        assert!(crate::process::start_time(std::process::id()).unwrap() <= ticks);
        drop(groups);
        let _ = fs::remove_dir_all(&dir);
    }

    /// A child process, killed and reaped when dropped (a failed test included).
    struct Leader(std::process::Child);

    impl Drop for Leader {
        fn drop(&mut self) {
            let _ = self.0.kill();
            let _ = self.0.wait();
        }
    }

    /// A running group with a control socket whose other end the test holds, as a shim's;
    /// the leader (`sleep`, leading its own group) and that end.
    fn group_with_control(groups: &ContainerGroups, seconds: &str) -> (Leader, UnixStream) {
        use std::os::unix::process::CommandExt as _;
        let leader = std::process::Command::new("sleep").arg(seconds).process_group(0).spawn().unwrap();
        let owner = GroupOwner { pod: "default/p".into(), container: seconds.into() };
        groups.add(leader.id(), owner).unwrap();
        let (control, shim_end) = UnixStream::pair().unwrap();
        groups.keep_control(leader.id(), control);
        (Leader(leader), shim_end)
    }

    /// What the shim's end of the control socket got.
    fn request_on(shim_end: &UnixStream) -> u8 {
        use std::io::Read as _;
        let mut byte = [0u8];
        (&*shim_end).read_exact(&mut byte).unwrap();
        byte[0]
    }

    /// The forced stop asks each shim on its control socket first; the shim kills its tree and
    /// ends at once, and the runtime unlists its group and reaps it, often before the SIGUSR1
    /// that follows (here: before it, always). That group ran when the kill began, and is
    /// counted as killed. Before, its SIGUSR1 and SIGKILL found no one and the agent said
    /// "shutdown forced, 0 container process group(s) killed" of the container it had just
    /// killed (`agent_standalone::a_second_sigterm_ends_the_agent_promptly` failed 1 run in 30
    /// beside another test).
    #[test]
    fn a_group_whose_shim_ended_on_the_control_request_is_counted_as_killed() {
        let groups = ContainerGroups::default();
        let (mut leader, shim_end) = group_with_control(&groups, "3713");
        let pgid = leader.0.id();
        let killed = groups.kill_all_with(|| {
            assert_eq!(request_on(&shim_end), crate::shim::KILL_TREE, "asked on the control socket");
            // The shim ended, and the runtime unlisted and reaped it.
            leader.0.kill().unwrap();
            assert!(groups.unlist(pgid).is_some());
            leader.0.wait().unwrap();
        });
        assert_eq!(killed, 1);
    }

    /// A group unlisted while the forced stop runs (its shim ended, the runtime is reaping it)
    /// is signalled no more: once reaped, its ID may be given to another process, which may lead
    /// a group of its own (another agent's container). Here the leader, unlisted but left
    /// running, stands for that process: it is not signalled. Before, the SIGUSR1 and the
    /// SIGKILL went by the ID read when the stop began.
    #[test]
    fn a_group_unlisted_during_the_forced_stop_is_not_signalled() {
        use std::os::unix::process::ExitStatusExt as _;
        let groups = ContainerGroups::default();
        let (mut stranger, shim_end) = group_with_control(&groups, "3714");
        let (mut listed, listed_end) = group_with_control(&groups, "3715");
        let pgid = stranger.0.id();
        let killed = groups.kill_all_with(|| {
            assert_eq!(request_on(&shim_end), crate::shim::KILL_TREE);
            assert_eq!(request_on(&listed_end), crate::shim::KILL_TREE);
            assert!(groups.unlist(pgid).is_some());
        });
        assert!(stranger.0.try_wait().unwrap().is_none(), "the process under the unlisted ID was signalled");
        assert!(listed.0.wait().unwrap().signal().is_some(), "the listed group is killed");
        assert_eq!(killed, 2, "both ran when the kill began");
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
}
