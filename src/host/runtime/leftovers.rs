//! What an agent that died left running, found from its container records and killed before
//! the next agent on the same state directory starts anything (`docs/reliability.md`, "The
//! agent's crash never leaves two copies of a container"). [`super::groups`] writes the
//! records and the heartbeat; this module reads them, once, at start.
//!
//! A record is `containers/<pgid>`: one line of [`Record`]. What belongs to it:
//!
//! - **The leader** (the container shim), if the PID still names a process with the recorded
//!   start time: asked to kill its tree (SIGUSR1, through a pidfd), then its group is SIGKILLed
//!   as a backstop. A leader that is a zombie its new parent has not reaped yet still holds the
//!   group's ID: the group is SIGKILLed.
//! - **A group whose leader is gone** (the shim was killed too): its ID cannot be reused while
//!   members live, but it may already *be* a reused ID. The recorded container ended while no
//!   agent ran, another process took the PID and made a group of it (`setsid`), and its leader
//!   ended too (a daemon's double fork does exactly that). So a leaderless group is the
//!   container's only if one of its members started before the dead agent's last heartbeat
//!   ([`HEARTBEAT`]: the ID was the container's until the agent died, so a process already in
//!   the group then is the container's, and so is the group), or carries the container's mark
//!   ([`crate::shim::MARK_ENV`] with this record's [`crate::shim::mark`]). Otherwise it is left
//!   alone, and said so. A record of an agent older than these rules (no boot ID) has neither:
//!   its leaderless group is killed while any member lives, as that agent's rule was.
//! - **The processes that left the group** (`setsid`, a double-forked daemon) while the shim,
//!   which would have killed them, was killed too: every process that carries the record's
//!   mark, signalled through a pidfd after its start time was checked (a group made of marked
//!   processes alone is SIGKILLed whole, so that forking cannot outrun the kill). A process
//!   that emptied its environment (`env -i`) and left the group cannot be told from a
//!   stranger's, and runs on.
//!
//! A record of another boot (its boot ID differs) names nothing that runs.
//!
//! **What a signal may reach.** Each signal goes to what a look at `/proc` showed, and none of
//! these processes is the agent's child: their IDs may be given to others at any moment.
//!
//! - A single process (a leader's SIGUSR1, a marked process's SIGKILL) is pinned by a pidfd
//!   before its start time is checked, and signalled through the pidfd
//!   ([`crate::process::signal_process`]): the signal cannot reach a process that took the PID
//!   after the check. Without a pidfd (a kernel older than 5.3, no descriptor left) it is
//!   checked and signalled by PID, microseconds apart.
//! - A group is signalled by its ID (`kill(2)`): the kernel signals a group through a pidfd
//!   only from Linux 6.9 on (`PIDFD_SIGNAL_PROCESS_GROUP`), a flag `rustix` 1.1 does not pass,
//!   and nothing else may make the call without `unsafe`. An ID is not given to another group
//!   while any process of the group is left, a zombie included, so right before the kill one
//!   of the processes the look saw in the group is read again: still there, with its start
//!   time, in the group ([`kill_group_still_seen`]). What is left: the whole group ending and
//!   being reaped, and its ID given to a new group's leader, between that read and the kill,
//!   microseconds. PIDs are handed out in turn up to `pid_max`, so that takes the counter
//!   coming round in that time (or a privileged process writing `ns_last_pid`).

use std::collections::{BTreeMap, BTreeSet};
use std::fs;
use std::io;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use crate::host::manifests::{LoadedPod, RanBefore};
use crate::process::{Delivery, ProcessStat, Signal, signal_group, signal_process};
use crate::shim::{MARK_ENV, SUBCOMMAND, TREE_KILL_WAIT, WAIT_FOR_GO, mark, parse_mark};

use super::groups::wait_for_leaders;

/// The file in the state directory where a running agent writes, every
/// [`HEARTBEAT_PERIOD`], the boot ID and the time ([`now_ticks`]): the next agent knows that
/// the dead one was alive then.
pub(super) const HEARTBEAT: &str = "heartbeat";

/// How often the heartbeat is written. A container that started within the last period before
/// the crash, whose shim died too and whose processes carry no mark, is left alone; a shorter
/// period would write the disk more often for that (an edge node's flash counts its writes).
pub(super) const HEARTBEAT_PERIOD: Duration = Duration::from_secs(30);

/// How long the next agent waits for the leftovers it SIGKILLed to disappear.
const LEFTOVER_WAIT: Duration = Duration::from_secs(5);

/// How many times the marked processes are looked for: a marked process may fork (marked
/// children) until its SIGKILL lands, and those are found by the next look.
const MARK_ROUNDS: usize = 200;

/// What `containers/<pgid>` says: `<start> <pod> <container> <boot>`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct Record {
    /// The leader's start time ([`crate::process::start_time`]).
    pub start: u64,
    pub pod: String,
    pub container: String,
    /// The boot ID when the record was written (`/proc/sys/kernel/random/boot_id`); `None` in a
    /// record of an older agent.
    pub boot: Option<String>,
}

impl Record {
    pub fn line(&self) -> String {
        let boot = self.boot.as_deref().unwrap_or("-");
        format!("{} {} {} {boot}\n", self.start, self.pod, self.container)
    }

    /// `None` for a text no agent wrote: every record since the first holds at least the start
    /// time, the pod and the container.
    pub fn parse(text: &str) -> Option<Record> {
        let mut fields = text.split_whitespace();
        let start = fields.next()?.parse().ok()?;
        let (pod, container) = (fields.next()?.to_owned(), fields.next()?.to_owned());
        let boot = fields.next().filter(|b| *b != "-").map(str::to_owned);
        Some(Record { start, pod, container, boot })
    }
}

/// This boot's ID, to tell a record of this boot from one of an earlier boot.
pub(super) fn boot_id() -> Option<String> {
    let text = fs::read_to_string("/proc/sys/kernel/random/boot_id").ok()?;
    Some(text.trim().to_owned()).filter(|b| !b.is_empty() && !b.contains(char::is_whitespace))
}

/// The time since boot in clock ticks, as process start times are counted (`/proc/<pid>/stat`
/// field 22 is boot-based: suspended time included).
pub(super) fn now_ticks() -> u64 {
    let now = rustix::time::clock_gettime(rustix::time::ClockId::Boottime);
    let hz = rustix::param::clock_ticks_per_second();
    let secs = u64::try_from(now.tv_sec).unwrap_or_default();
    let nanos = u64::try_from(now.tv_nsec).unwrap_or_default();
    secs.saturating_mul(hz).saturating_add(nanos.saturating_mul(hz) / 1_000_000_000)
}

/// The heartbeat's line.
pub(super) fn heartbeat_line(boot: Option<&str>, ticks: u64) -> String {
    format!("{} {ticks}\n", boot.unwrap_or("-"))
}

/// The last heartbeat the dead agent wrote in `state`, if of this boot.
fn last_heartbeat(state: &Path, this_boot: Option<&str>) -> Option<u64> {
    let text = read_head(&state.join(HEARTBEAT))?;
    let (boot, ticks) = text.trim().split_once(' ')?;
    (Some(boot) == this_boot).then(|| ticks.parse().ok()).flatten()
}

/// A live process as `/proc` shows it.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Process {
    pid: u32,
    pgid: i32,
    start: u64,
    /// The value of [`MARK_ENV`] it was started with, if readable.
    mark: Option<String>,
}

/// The most read of a record or the heartbeat: each is one line of a few hundred bytes at most
/// (a start time, a pod's and a container's names, a boot ID; a boot ID and a time).
const RECORD_MAX: u64 = 4096;

/// The file of the state directory that names the pods the agent runs, one a line: its UID,
/// then, tab-separated, its namespace, name and manifest file (a file whose path is not UTF-8
/// or holds a line break is left out: the UID alone is written), and in the same form each name
/// the agent holds for a file that ran it before the agent started. Written at each change of
/// the folder's pods or of those names (`running_pods_text`): after a graceful stop no
/// container record is left to say what ran. A line of a UID alone is read too (the first
/// agents wrote only those).
pub const RUNNING_PODS: &str = "pods";

/// The most read of [`RUNNING_PODS`]: a line is a UID, two names and a path.
const RUNNING_PODS_MAX: u64 = 16 << 20;

/// What the previous agent on the folder ran: the pods [`RUNNING_PODS`] names, with the file
/// each namespace/name ran from, and the UIDs the container records name (a crash can come
/// between a pod's start and the file's write). Read before `kill_leftovers` sweeps the
/// records. The next agent's first scan gives each such namespace/name back to the file that
/// ran it before file order does (docs/reliability.md, "A new manifest never displaces a
/// running pod").
pub fn pods_that_ran(state: &Path) -> RanBefore {
    let mut ran = RanBefore { uids: recorded_pod_uids(state), ..RanBefore::default() };
    if let Ok(text) = crate::host::manifests::read_regular_file(&state.join(RUNNING_PODS), RUNNING_PODS_MAX) {
        for line in text.lines() {
            let mut fields = line.splitn(4, '\t');
            let Some(uid) = fields.next().map(str::trim).filter(|uid| !uid.is_empty()) else { continue };
            ran.uids.insert(uid.to_owned());
            if let (Some(namespace), Some(name), Some(file)) = (fields.next(), fields.next(), fields.next())
                && !file.is_empty()
            {
                let full_name = (namespace.to_owned(), name.to_owned());
                ran.uid_by_name.insert(full_name.clone(), uid.to_owned());
                ran.files.insert(full_name, PathBuf::from(file));
            }
        }
    }
    ran
}

/// What [`RUNNING_PODS`] says: the running `pods`, then each name of `waiting` no running pod
/// has, as the previous agent's record named it. `waiting` is what the scan holds for a file
/// that ran before this agent started and is held now ([`Snapshot::ran_before`]): its pods do
/// not run, and without its line an agent started during the hold would not know the file had
/// run the name (docs/reliability.md, "A new manifest never displaces a running pod"). Written
/// by [`super::ContainerGroups::write_running_pods`].
///
/// [`Snapshot::ran_before`]: crate::host::manifests::Snapshot::ran_before
pub(super) fn running_pods_text<'a>(
    pods: impl Iterator<Item = &'a LoadedPod>,
    waiting: &RanBefore,
) -> String {
    let mut text = String::new();
    let mut running = std::collections::BTreeSet::new();
    for pod in pods {
        running.insert((pod.namespace().to_owned(), pod.name().to_owned()));
        text.push_str(pod.uid());
        if let Some(file) = pod.file.to_str().filter(|file| !file.contains(['\n', '\r'])) {
            text.push_str(&format!("\t{}\t{}\t{file}", pod.namespace(), pod.name()));
        }
        text.push('\n');
    }
    for (name, file) in waiting.files.iter().filter(|(name, _)| !running.contains(*name)) {
        // Read from a line of the record, which has a UID: a name without one came from no record.
        let Some(uid) = waiting.uid_by_name.get(name) else { continue };
        let Some(file) = file.to_str().filter(|file| !file.contains(['\n', '\r'])) else { continue };
        text.push_str(&format!("{uid}\t{}\t{}\t{file}\n", name.0, name.1));
    }
    text
}

/// The UIDs of the pods whose containers the state directory's records name (what a previous
/// agent ran, whatever became of it since). A record's pod is `name_namespace(uid)`, the
/// kubelet's `format.Pod`.
fn recorded_pod_uids(state: &Path) -> std::collections::BTreeSet<String> {
    let Ok(entries) = fs::read_dir(state.join("containers")) else { return Default::default() };
    entries
        .flatten()
        .filter(|entry| entry.file_type().is_ok_and(|t| t.is_file()))
        .filter(|entry| entry.file_name().to_str().is_some_and(|n| n.parse::<u32>().is_ok()))
        .filter_map(|entry| read_record(&entry.path()))
        .filter_map(|record| {
            let (_, rest) = record.pod.rsplit_once('(')?;
            rest.strip_suffix(')').filter(|uid| !uid.is_empty()).map(str::to_owned)
        })
        .collect()
}

/// The record in `path`, if the start of the file is one.
fn read_record(path: &Path) -> Option<Record> {
    Record::parse(&read_head(path)?)
}

/// The first [`RECORD_MAX`] bytes of the regular file at `path`: a file grown huge is not read
/// whole (a 2 GiB record cost 2.1 GB of memory and 7 s at every start, a 1 GiB heartbeat 1 GB
/// and 3 s), and a FIFO is not opened.
fn read_head(path: &Path) -> Option<String> {
    use std::io::Read as _;
    if !fs::metadata(path).ok()?.is_file() {
        return None;
    }
    let mut text = String::new();
    fs::File::open(path).ok()?.take(RECORD_MAX).read_to_string(&mut text).ok()?;
    Some(text)
}

/// Every live (not zombie) process but this one.
fn processes() -> Vec<Process> {
    let me = std::process::id();
    let Ok(entries) = fs::read_dir("/proc") else { return Vec::new() };
    entries
        .filter_map(|e| e.ok()?.file_name().to_str()?.parse::<u32>().ok())
        .filter(|&pid| pid != me)
        .filter_map(|pid| {
            let stat = ProcessStat::of(pid).ok()?;
            let mark = fs::read(format!("/proc/{pid}/environ")).ok().and_then(|env| mark_in(&env));
            (!stat.zombie).then_some(Process { pid, pgid: stat.pgid, start: stat.start, mark })
        })
        .collect()
}

/// The [`MARK_ENV`] value in a `/proc/<pid>/environ` (`NAME=value` entries, each ended by NUL).
fn mark_in(environ: &[u8]) -> Option<String> {
    let prefix = format!("{MARK_ENV}=");
    environ
        .split(|&b| b == 0)
        .find_map(|entry| entry.strip_prefix(prefix.as_bytes()))
        .and_then(|value| std::str::from_utf8(value).ok())
        .map(str::to_owned)
}

fn in_group(p: &Process, pgid: u32) -> bool {
    u32::try_from(p.pgid).ok() == Some(pgid)
}

/// What a record's group looks like now, from one look at every process.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
struct GroupView {
    /// Some live process is in the group.
    members: bool,
    /// One of them carries the record's mark.
    marked: bool,
    /// One of them started before the dead agent's last heartbeat.
    before_heartbeat: bool,
}

impl GroupView {
    fn of(pgid: u32, record: &Record, processes: &[Process], heartbeat: Option<u64>) -> GroupView {
        let expected = mark(pgid, record.start);
        let members = || processes.iter().filter(|p| in_group(p, pgid));
        GroupView {
            members: members().next().is_some(),
            marked: members().any(|p| p.mark.as_deref() == Some(expected.as_str())),
            before_heartbeat: heartbeat.is_some_and(|beat| members().any(|p| p.start < beat)),
        }
    }
}

/// The process that has a record's group ID as its PID now.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum LeaderNow {
    /// None: the leader is gone (reaped).
    Gone,
    /// A process with this start time runs.
    Running(u64),
    /// A zombie with this start time: it has ended, and holds the ID until it is reaped.
    Zombie(u64),
}

impl LeaderNow {
    fn of(pgid: u32) -> LeaderNow {
        match ProcessStat::of(pgid).ok() {
            None => LeaderNow::Gone,
            Some(stat) if stat.zombie => LeaderNow::Zombie(stat.start),
            Some(stat) => LeaderNow::Running(stat.start),
        }
    }
}

/// What to do with a record's group.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Leftover {
    /// Its leader runs with the recorded start time: ask it, then SIGKILL the group.
    Leader,
    /// The group is the container's and has live members: SIGKILL it.
    Group,
    /// Nothing of the group runs, or what runs under its ID is not ours.
    NotOurs,
}

/// Pure: what a record's group is, from this boot's ID, the process that has the group's ID
/// now, and what the group looks like.
fn classify(record: &Record, this_boot: Option<&str>, leader: LeaderNow, group: GroupView) -> Leftover {
    if let (Some(recorded), Some(now)) = (record.boot.as_deref(), this_boot)
        && recorded != now
    {
        return Leftover::NotOurs;
    }
    match leader {
        LeaderNow::Running(start) if start == record.start => Leftover::Leader,
        // The ended leader still holds the ID: the group is the container's.
        LeaderNow::Zombie(start) if start == record.start && group.members => Leftover::Group,
        // The ID names another process: our group is gone (an ID is not reused while a group
        // has it).
        LeaderNow::Running(_) | LeaderNow::Zombie(_) => Leftover::NotOurs,
        LeaderNow::Gone
            if group.members && (group.marked || group.before_heartbeat || record.boot.is_none()) =>
        {
            Leftover::Group
        }
        LeaderNow::Gone => Leftover::NotOurs,
    }
}

/// One record as read.
struct Found {
    pgid: u32,
    record: Record,
    /// Something of it was signalled.
    killed: bool,
}

/// Kills what every record in `state`'s `containers` names that still runs, then removes the
/// records. `this_boot` is [`boot_id`]. Returns how many containers that was.
/// The PID of another agent, running now, whose container a record of `state` names: the
/// record (of this boot) has a leader that runs with the recorded start time, whose parent is
/// a live `probelet run` of this agent's own program, not this agent. A crashed agent's shims
/// have a new parent (init, or a subreaper: a container shim too is this program, but not
/// `run`); a running agent's are its children. Such a state directory is in use, though its
/// lock may have been lost (the folder deleted and made again under that agent).
pub(super) fn running_agent_of_records(state: &Path, this_boot: Option<&str>) -> Option<u32> {
    let ours = program_of("self")?;
    let me = std::process::id();
    fs::read_dir(state.join("containers")).ok()?.flatten().find_map(|entry| {
        if !entry.file_type().is_ok_and(|t| t.is_file()) {
            return None;
        }
        let pgid = entry.file_name().to_str()?.parse::<u32>().ok()?;
        let record = read_record(&entry.path())?;
        if record.boot.is_some() && this_boot.is_some() && record.boot.as_deref() != this_boot {
            return None;
        }
        let leader = ProcessStat::of(pgid).ok().filter(|l| !l.zombie && l.start == record.start)?;
        let parent = u32::try_from(leader.ppid).ok().filter(|&p| p > 1 && p != me)?;
        let parent_start = ProcessStat::of(parent).ok()?.start;
        let is_agent = program_of(&parent.to_string()).as_ref() == Some(&ours) && runs_the_agent(parent);
        // The same process all along (not a PID reused between the reads).
        let same = ProcessStat::of(parent).is_ok_and(|p| p.start == parent_start && !p.zombie);
        (is_agent && same).then_some(parent)
    })
}

/// Whether process `pid`'s command line is `… run …`: the agent, not a container shim or
/// another subcommand of the same program.
fn runs_the_agent(pid: u32) -> bool {
    fs::read(format!("/proc/{pid}/cmdline"))
        .is_ok_and(|cmdline| cmdline.split(|&b| b == 0).nth(1) == Some(b"run"))
}

/// The program process `pid` (or `self`) runs, as its `exe` link names it, with the mark of a
/// file replaced since (an upgrade) taken off. `None` where it cannot be read (another user's).
fn program_of(pid: &str) -> Option<PathBuf> {
    let link = fs::read_link(format!("/proc/{pid}/exe")).ok()?;
    let text = link.to_str()?;
    Some(PathBuf::from(text.strip_suffix(" (deleted)").unwrap_or(text)))
}

pub(super) fn kill_leftovers(state: &Path, this_boot: Option<&str>) -> io::Result<usize> {
    let containers = state.join("containers");
    let this_boot = this_boot.map(str::to_owned);
    let heartbeat = last_heartbeat(state, this_boot.as_deref());
    let mut found = Vec::new();
    let mut paths: Vec<PathBuf> = Vec::new();
    let mut strangers = Vec::new();
    let mut damaged = Vec::new();
    for entry in fs::read_dir(&containers)? {
        let entry = entry?;
        let path = entry.path();
        let name = path.file_name().and_then(|n| n.to_str()).unwrap_or_default();
        // What is not a regular file is no record of ours (a folder, a symlink, a FIFO, whose
        // read would never end): left as it is.
        let regular = entry.file_type().is_ok_and(|t| t.is_file());
        let Some(pgid) = name.parse::<u32>().ok().filter(|_| regular) else {
            if regular && is_temporary(name) {
                // A write the crash interrupted.
                let _ = fs::remove_file(&path);
            } else {
                strangers.push(path);
            }
            continue;
        };
        let Some(record) = read_record(&path) else {
            damaged.push((pgid, path));
            continue;
        };
        paths.push(path);
        let of_this_boot = match (record.boot.as_deref(), this_boot.as_deref()) {
            (Some(recorded), Some(now)) => recorded == now,
            _ => true,
        };
        if of_this_boot {
            found.push(Found { pgid, record, killed: false });
        }
    }
    if !damaged.is_empty() {
        let now = processes();
        for (pgid, path) in damaged {
            let starts = damaged_record_starts(pgid, &now);
            if starts.is_empty() {
                strangers.push(path);
                continue;
            }
            tracing::warn!(
                path = %path.display(),
                "a container record is damaged: its group ID and the container marks that carry it still name what the dead agent ran, which is killed"
            );
            for start in starts {
                let record = Record {
                    start,
                    pod: UNKNOWN.to_owned(),
                    container: UNKNOWN.to_owned(),
                    boot: this_boot.clone(),
                };
                found.push(Found { pgid, record, killed: false });
            }
            paths.push(path);
        }
    }
    if let Some(first) = strangers.first() {
        tracing::warn!(
            path = %first.display(),
            count = strangers.len(),
            "the state directory holds files that are not container records; left alone"
        );
    }
    if found.is_empty() {
        return remove(paths).map(|()| 0);
    }

    // The leaders first (a shim kills its whole tree), then every group still ours.
    let before = processes();
    let mut asked = Vec::new();
    for f in &mut found {
        let view = GroupView::of(f.pgid, &f.record, &before, heartbeat);
        match classify(&f.record, this_boot.as_deref(), LeaderNow::of(f.pgid), view) {
            Leftover::Leader => match signal_process(f.pgid, f.record.start, Signal::KillTree) {
                Ok(Delivery::Sent) => {
                    f.killed = true;
                    asked.push(f.pgid);
                }
                Ok(Delivery::Gone) => {}
                Err(error) => failed(f, &error),
            },
            Leftover::Group => {}
            Leftover::NotOurs if view.members => tracing::warn!(
                pgid = f.pgid,
                pod = f.record.pod,
                container = f.record.container,
                "a process group with a container record's ID runs, but nothing shows it is the container's: left alone"
            ),
            Leftover::NotOurs => {}
        }
    }
    wait_for_leaders(&asked, TREE_KILL_WAIT);
    let now = processes();
    for f in &mut found {
        // Classified again: a leader that ended may have been reaped and its PID reused.
        let view = GroupView::of(f.pgid, &f.record, &now, heartbeat);
        if classify(&f.record, this_boot.as_deref(), LeaderNow::of(f.pgid), view) != Leftover::NotOurs
            && view.members
        {
            match kill_group_still_seen(f.pgid, &now) {
                Ok(Delivery::Sent) => f.killed = true,
                Ok(Delivery::Gone) => {}
                Err(error) => failed(f, &error),
            }
        }
    }

    // Then whatever left a group and carries a record's mark.
    let marks: BTreeMap<String, usize> =
        found.iter().enumerate().map(|(i, f)| (mark(f.pgid, f.record.start), i)).collect();
    let signalled = kill_marked(&marks, &mut found);

    for f in found.iter().filter(|f| f.killed) {
        tracing::warn!(
            pgid = f.pgid,
            pod = f.record.pod,
            container = f.record.container,
            "killed a container a previous agent left running"
        );
    }
    remove(paths)?;
    // They are not our children: their new parent reaps them. Wait until none runs, bounded;
    // this runs once at start, before anything else does, so blocking here holds nothing up.
    // Before any runtime exists (a blocking wait on real processes), so std's clock.
    let groups: BTreeSet<u32> = found.iter().filter(|f| f.killed).map(|f| f.pgid).collect();
    let pending = || {
        processes().iter().any(|p| {
            u32::try_from(p.pgid).is_ok_and(|g| groups.contains(&g) || signalled.contains(&g))
                || p.mark.as_ref().is_some_and(|m| marks.contains_key(m))
        })
    };
    #[allow(clippy::disallowed_methods)]
    let deadline = Instant::now() + LEFTOVER_WAIT;
    #[allow(clippy::disallowed_methods)]
    while pending() && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(20));
    }
    Ok(found.iter().filter(|f| f.killed).count())
}

/// The pod and container of a damaged record: its text is lost.
const UNKNOWN: &str = "(damaged record)";

/// The start times a record file named `pgid` whose text is no record's (damaged from outside:
/// an agent writes its records whole, through a rename) still names, from what runs now:
/// - the start of the process `pgid`, if it is a recorded container's shim of this program
///   (`container-shim --wait-for-go`) that leads its group and that no running agent owns;
/// - else each start in a container mark ([`mark`]) of group `pgid` that a live process
///   carries: marks are made only by this program's shims, one per group of one boot.
///
/// None: nothing shows that what runs under that ID is a container's, and the file is left
/// alone as a stranger's.
fn damaged_record_starts(pgid: u32, processes: &[Process]) -> Vec<u64> {
    if let Some(start) = orphaned_shim(pgid) {
        return vec![start];
    }
    // A mark whose shim still runs names a container that shim (another agent's, running:
    // `orphaned_shim` said so) still looks after: not ours to kill.
    let live_leader = ProcessStat::of(pgid).ok().filter(|leader| !leader.zombie).map(|leader| leader.start);
    let starts: BTreeSet<u64> = processes
        .iter()
        .filter_map(|p| parse_mark(p.mark.as_deref()?))
        .filter_map(|(group, start)| (group == pgid && live_leader != Some(start)).then_some(start))
        .collect();
    starts.into_iter().collect()
}

/// The start time of process `pid` if it is a recorded container's shim of this program that
/// leads its own group and whose parent is no running agent (`probelet run`) but this one.
fn orphaned_shim(pid: u32) -> Option<u64> {
    let stat = ProcessStat::of(pid).ok().filter(|s| !s.zombie && u32::try_from(s.pgid).ok() == Some(pid))?;
    if program_of(&pid.to_string())? != program_of("self")? {
        return None;
    }
    let cmdline = fs::read(format!("/proc/{pid}/cmdline")).ok()?;
    let mut args = cmdline.split(|&b| b == 0);
    if args.nth(1)? != SUBCOMMAND.as_bytes() || !args.any(|a| a == WAIT_FOR_GO.as_bytes()) {
        return None;
    }
    let parent = u32::try_from(stat.ppid).ok().filter(|&p| p > 1 && p != std::process::id());
    let owned = parent.is_some_and(|p| program_of(&p.to_string()) == program_of("self") && runs_the_agent(p));
    // Read again: the same process all along, not a PID reused between the reads.
    let same = ProcessStat::of(pid).is_ok_and(|s| !s.zombie && s.start == stat.start);
    (!owned && same).then_some(stat.start)
}

/// SIGKILLs every live process that carries one of `marks` (the index into `found` of the
/// record it names), looking again while any is seen: a marked process may have forked before
/// its SIGKILL landed. A group outside the records' whose every member carries the same mark
/// is SIGKILLed whole. Returns the groups so killed.
fn kill_marked(marks: &BTreeMap<String, usize>, found: &mut [Found]) -> BTreeSet<u32> {
    let pgids: Vec<u32> = found.iter().map(|f| f.pgid).collect();
    let outcome = signal_marked(
        marks,
        |i| pgids[i],
        |i, delivery| match delivery {
            Ok(Delivery::Sent) => found[i].killed = true,
            Ok(Delivery::Gone) => {}
            Err(error) => failed(&found[i], &error),
        },
    );
    if outcome.left > 0 {
        tracing::warn!(
            processes = outcome.left,
            "processes of containers a previous agent left running still run after every attempt to kill them"
        );
    }
    outcome.groups
}

/// SIGKILLs every live process that carries `mark`, as [`kill_marked`] does, but for the
/// container's own group, `pgid` (SIGKILLed already, its leader reaped: the ID may be another's
/// by now). For a running agent whose container's shim died without killing its tree: what
/// left the group carries the mark. Returns how many processes were signalled. Blocks (one
/// read of each process's environment a round).
pub(super) fn kill_marked_now(pgid: u32, mark: &str) -> usize {
    let marks = BTreeMap::from([(mark.to_owned(), 0)]);
    signal_marked(&marks, |_| pgid, |_, _| {}).processes
}

/// What [`signal_marked`] did.
struct MarkedOutcome {
    /// The groups SIGKILLed whole.
    groups: BTreeSet<u32>,
    /// How many processes were signalled.
    processes: usize,
    /// How many marked processes the last of [`MARK_ROUNDS`] rounds still saw (0 when a round
    /// saw none).
    left: usize,
}

/// The rounds of [`kill_marked`] and [`kill_marked_now`]: each lists the processes, SIGKILLs
/// every one that carries one of `marks` (its value is the index `own_group` and `delivered`
/// are given), once, and the group of one whose every member carries the same mark, but the
/// container's own group; until a round sees none.
fn signal_marked(
    marks: &BTreeMap<String, usize>,
    own_group: impl Fn(usize) -> u32,
    mut delivered: impl FnMut(usize, io::Result<Delivery>),
) -> MarkedOutcome {
    let mut signalled: BTreeSet<(u32, u64)> = BTreeSet::new();
    let mut groups: BTreeSet<u32> = BTreeSet::new();
    let mut left = 0;
    for round in 0..MARK_ROUNDS {
        let current = processes();
        let marked: Vec<(&Process, usize)> =
            current.iter().filter_map(|p| Some((p, *marks.get(p.mark.as_ref()?)?))).collect();
        if marked.is_empty() {
            break;
        }
        let mut new = false;
        for &(p, i) in &marked {
            let group = u32::try_from(p.pgid).ok().filter(|&g| g != own_group(i) && !groups.contains(&g));
            // Every member of its group carries this mark: the group is the container's.
            if let Some(g) = group
                && current.iter().filter(|q| in_group(q, g)).all(|q| q.mark == p.mark)
            {
                groups.insert(g);
                new = true;
                delivered(i, kill_group_still_seen(g, &current));
            }
            // A process SIGKILLed already may take a moment to die: signalled once.
            if !signalled.insert((p.pid, p.start)) {
                continue;
            }
            new = true;
            delivered(i, signal_process(p.pid, p.start, Signal::Kill));
        }
        if round + 1 == MARK_ROUNDS {
            left = marked.len();
        } else if !new {
            // Only processes whose SIGKILL has not landed yet: give it a moment.
            std::thread::sleep(Duration::from_millis(5));
        }
    }
    MarkedOutcome { groups, processes: signalled.len(), left }
}

/// SIGKILLs group `pgid` as a look at every process (`seen`) showed it, if it is still that
/// group: one of the processes then in it is there still (its PID, its start time), in it.
/// A group's ID is not given to another group while any process of it is left, so the ID
/// has named that group all along. Without this, the kill went by an ID read up to a whole
/// look at every process (and the other records' kills) before: time enough for the group to
/// end, and its ID to be taken. What is left is the moment between this read and the
/// `kill(2)`, as no system call signals a group by a pidfd through `rustix` (see the module
/// documentation).
fn kill_group_still_seen(pgid: u32, seen: &[Process]) -> io::Result<Delivery> {
    let still = seen.iter().filter(|p| in_group(p, pgid)).any(|p| {
        ProcessStat::of(p.pid)
            .is_ok_and(|now| now.start == p.start && u32::try_from(now.pgid).ok() == Some(pgid))
    });
    if !still {
        return Ok(Delivery::Gone);
    }
    signal_group(pgid, Signal::Kill)
}

fn failed(f: &Found, error: &io::Error) {
    tracing::error!(
        pgid = f.pgid,
        pod = f.record.pod,
        container = f.record.container,
        %error,
        "cannot kill a container a previous agent left running"
    );
}

/// Removes the records read, but for one already gone (removed meanwhile by whoever wrote it).
fn remove(paths: Vec<PathBuf>) -> io::Result<()> {
    for path in paths {
        match fs::remove_file(&path) {
            Err(error) if error.kind() != io::ErrorKind::NotFound => return Err(error),
            _ => {}
        }
    }
    Ok(())
}

/// Whether `name` is a temporary file of [`super::groups`]' atomic writes (`.<pgid>.tmp`).
fn is_temporary(name: &str) -> bool {
    name.strip_prefix('.')
        .and_then(|rest| rest.strip_suffix(".tmp"))
        .is_some_and(|pgid| !pgid.is_empty() && pgid.bytes().all(|b| b.is_ascii_digit()))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The pods the records name, by UID (`name_namespace(uid)`): records only, however many
    /// containers of one pod, and not what is no record (a damaged one, a stranger's file).
    #[test]
    fn the_records_name_the_pods_that_ran_by_uid() {
        let dir = std::env::temp_dir().join(format!("probelet-recorded-uids-{}", std::process::id()));
        let containers = dir.join("containers");
        fs::create_dir_all(&containers).unwrap();
        fs::write(containers.join("11"), "100 web_default(uid-web) app boot\n").unwrap();
        fs::write(containers.join("12"), "101 web_default(uid-web) sidecar boot\n").unwrap();
        fs::write(containers.join("13"), "102 api_shop(uid-api) app -\n").unwrap();
        fs::write(containers.join("14"), "damaged").unwrap();
        fs::write(containers.join("notes"), "100 x_y(uid-stranger) app -\n").unwrap();
        let uids = recorded_pod_uids(&dir);
        assert_eq!(uids, ["uid-api".to_owned(), "uid-web".to_owned()].into());
        // With the file that names the running pods (a graceful stop leaves no record), and the
        // file each ran from where its path can be written on a line.
        let pod = |uid: &str, name: &str, file: &str| {
            let mut pod = LoadedPod { file: PathBuf::from(file), document: None, pod: Default::default() };
            pod.pod.metadata.uid = Some(uid.into());
            pod.pod.metadata.name = Some(name.into());
            pod.pod.metadata.namespace = Some("shop".into());
            pod
        };
        let running = [pod("uid-idle", "idle", "/m/idle.yaml"), pod("uid-web", "web", "/m/web\n.yaml")];
        fs::write(dir.join(RUNNING_PODS), running_pods_text(running.iter(), &RanBefore::default())).unwrap();
        // A line of a UID alone, as the first agents wrote it.
        let text = fs::read_to_string(dir.join(RUNNING_PODS)).unwrap();
        fs::write(dir.join(RUNNING_PODS), format!("{text}uid-old\n")).unwrap();
        let all = pods_that_ran(&dir);
        fs::remove_dir_all(&dir).unwrap();
        assert_eq!(all.uids, ["uid-api", "uid-idle", "uid-old", "uid-web"].map(str::to_owned).into());
        let idle = (("shop".to_owned(), "idle".to_owned()), PathBuf::from("/m/idle.yaml"));
        assert_eq!(all.files, [idle].into());
        let idle = (("shop".to_owned(), "idle".to_owned()), "uid-idle".to_owned());
        assert_eq!(all.uid_by_name, [idle].into());
        assert_eq!(pods_that_ran(&dir), RanBefore::default(), "no state directory: none");
    }

    /// A name held for the file that ran it before the agent started (its pods not running,
    /// the file caught half written or unreadable) is written with the running pods, as the
    /// previous agent's record named it: an agent started during the hold holds the file too.
    /// It was left out, and a second restart during the hold lost the name to a newcomer. A
    /// name a running pod has now is written once, the running pod's.
    #[test]
    fn the_record_keeps_the_names_held_for_files_that_ran_before() {
        let dir = std::env::temp_dir().join(format!("probelet-held-names-{}", std::process::id()));
        fs::create_dir_all(&dir).unwrap();
        let mut api = LoadedPod { file: PathBuf::from("/m/c.yaml"), document: None, pod: Default::default() };
        api.pod.metadata.uid = Some("uid-api-now".into());
        api.pod.metadata.name = Some("api".into());
        api.pod.metadata.namespace = Some("shop".into());
        let name = |name: &str| ("shop".to_owned(), name.to_owned());
        let waiting = RanBefore {
            uids: ["uid-web".to_owned(), "uid-api-before".to_owned()].into(),
            files: [(name("web"), PathBuf::from("/m/a.yaml")), (name("api"), PathBuf::from("/m/b.yaml"))]
                .into(),
            uid_by_name: [(name("web"), "uid-web".to_owned()), (name("api"), "uid-api-before".to_owned())]
                .into(),
        };
        fs::write(dir.join(RUNNING_PODS), running_pods_text([api].iter(), &waiting)).unwrap();
        let next = pods_that_ran(&dir);
        fs::remove_dir_all(&dir).unwrap();
        assert_eq!(next.uids, ["uid-api-now".to_owned(), "uid-web".to_owned()].into());
        let files = [(name("api"), PathBuf::from("/m/c.yaml")), (name("web"), PathBuf::from("/m/a.yaml"))];
        assert_eq!(next.files, files.into());
        let uids = [(name("api"), "uid-api-now".to_owned()), (name("web"), "uid-web".to_owned())];
        assert_eq!(next.uid_by_name, uids.into());
    }

    /// Only the start of a record file is read: a file grown huge is not read whole.
    #[test]
    fn only_the_start_of_a_record_file_is_read() {
        let dir = std::env::temp_dir().join(format!("probelet-record-max-{}", std::process::id()));
        fs::create_dir_all(&dir).unwrap();
        let path = dir.join("7");
        fs::write(&path, format!("12{}345 pod app boot\n", " ".repeat(5_000))).unwrap();
        assert_eq!(read_record(&path), None, "the fields past the first 4 KiB are not read");
        fs::write(&path, "12345 pod app boot\n").unwrap();
        assert_eq!(read_record(&path).map(|r| r.start), Some(12_345));
        // The heartbeat likewise.
        let long_boot = "b".repeat(5_000);
        fs::write(dir.join(HEARTBEAT), format!("{long_boot} 77\n")).unwrap();
        assert_eq!(last_heartbeat(&dir, Some(&long_boot)), None, "the time past the first 4 KiB is not read");
        fs::write(dir.join(HEARTBEAT), "boot 77\n").unwrap();
        assert_eq!(last_heartbeat(&dir, Some("boot")), Some(77));
        let _ = fs::remove_dir_all(&dir);
    }
    use crate::process::start_time;
    use std::io::Write as _;
    use std::os::unix::process::{CommandExt as _, ExitStatusExt as _};
    use std::process::{Command, Stdio};

    fn record(boot: Option<&str>) -> Record {
        Record { start: 7, pod: "default/p".into(), container: "c".into(), boot: boot.map(str::to_owned) }
    }

    #[test]
    fn a_record_reads_back_and_an_older_agents_record_still_reads() {
        let written = record(Some("b00t"));
        assert_eq!(Record::parse(&written.line()), Some(written));
        let unknown = record(None);
        assert_eq!(unknown.line(), "7 default/p c -\n");
        assert_eq!(Record::parse(&unknown.line()), Some(unknown.clone()));
        assert_eq!(Record::parse("7 default/p c\n"), Some(unknown), "three fields, as agents wrote before");
        assert_eq!(Record::parse("garbage default/p c"), None);
        assert_eq!(Record::parse("42\n"), None, "a number alone is no record: a stranger's file");
        assert_eq!(Record::parse(""), None);
    }

    #[test]
    fn the_mark_is_found_among_the_environment_entries() {
        let environ = b"PATH=/bin\0PROBELET_CONTAINER_MARK=12:34\0X_PROBELET_CONTAINER_MARK=9:9\0";
        assert_eq!(mark_in(environ).as_deref(), Some("12:34"));
        assert_eq!(mark_in(b"X_PROBELET_CONTAINER_MARK=9:9\0PATH=/bin\0"), None, "a name must match whole");
        assert_eq!(mark_in(b""), None);
    }

    /// Only what shows itself as the container's is killed: a leaderless group is a recycled ID
    /// unless a member was in it while the dead agent lived, or carries the mark.
    #[test]
    fn a_leaderless_group_is_ours_only_when_something_shows_it() {
        use LeaderNow::*;
        use Leftover::*;
        let ours = record(Some("b"));
        let group = |members, marked, before_heartbeat| GroupView { members, marked, before_heartbeat };
        let nothing = GroupView::default();
        let b = Some("b");
        assert_eq!(classify(&ours, b, Running(7), nothing), Leader);
        assert_eq!(classify(&ours, b, Running(8), group(true, true, true)), NotOurs, "a recycled PID");
        assert_eq!(
            classify(&ours, b, Zombie(7), group(true, false, false)),
            Group,
            "an unreaped leader holds the ID"
        );
        assert_eq!(classify(&ours, b, Zombie(7), nothing), NotOurs, "nothing runs");
        assert_eq!(classify(&ours, b, Zombie(8), group(true, true, true)), NotOurs, "a recycled PID, ended");
        assert_eq!(classify(&ours, b, Gone, group(true, true, false)), Group, "a marked member");
        assert_eq!(
            classify(&ours, b, Gone, group(true, false, true)),
            Group,
            "a member from the agent's life"
        );
        assert_eq!(
            classify(&ours, b, Gone, group(true, false, false)),
            NotOurs,
            "a stranger's group under a recycled ID"
        );
        assert_eq!(classify(&ours, b, Gone, nothing), NotOurs, "all gone");
        assert_eq!(
            classify(&ours, Some("other"), Running(7), nothing),
            NotOurs,
            "a record of an earlier boot"
        );
        let older = record(None);
        assert_eq!(classify(&older, b, Running(7), nothing), Leader, "an older agent's record");
        assert_eq!(classify(&older, b, Gone, group(true, false, false)), Group, "the older agent's rule");
    }

    /// A state directory with an empty `containers`, removed when dropped (a failed test
    /// included: the hopper's script goes with it, which ends the hopping).
    struct StateDir(PathBuf);

    impl std::ops::Deref for StateDir {
        type Target = Path;
        fn deref(&self) -> &Path {
            &self.0
        }
    }

    impl Drop for StateDir {
        fn drop(&mut self) {
            let _ = fs::remove_dir_all(&self.0);
        }
    }

    fn state_dir(name: &str) -> StateDir {
        let dir = std::env::temp_dir().join(format!("probelet-leftovers-{name}-{}", std::process::id()));
        fs::create_dir_all(dir.join("containers")).unwrap();
        StateDir(dir)
    }

    fn write_record(dir: &Path, pgid: u32, record: &Record) {
        fs::write(dir.join("containers").join(pgid.to_string()), record.line()).unwrap();
    }

    fn write_heartbeat(dir: &Path, ticks: u64) {
        fs::write(dir.join(HEARTBEAT), heartbeat_line(boot_id().as_deref(), ticks)).unwrap();
    }

    fn records_left(dir: &Path) -> usize {
        fs::read_dir(dir.join("containers")).unwrap().count()
    }

    /// Only what the agent writes there is read and removed: an interrupted write's `.N.tmp`
    /// and records. A stranger's files (a `containers` folder that is not ours), a folder or
    /// FIFO with a record's name, and a numeric file that is no record are left as they are,
    /// and none stops the agent or makes it wait.
    #[test]
    fn only_records_and_interrupted_writes_are_read_and_removed() {
        let dir = state_dir("strangers");
        let containers = dir.join("containers");
        fs::write(containers.join(".4242.tmp"), "half a rec").unwrap();
        fs::write(containers.join("important.txt"), "precious\n").unwrap();
        fs::write(containers.join(".hidden"), "x").unwrap();
        fs::write(containers.join("42"), "42\n").unwrap();
        fs::create_dir(containers.join("77")).unwrap();
        let fifo = containers.join("88");
        rustix::fs::mknodat(
            rustix::fs::CWD,
            &fifo,
            rustix::fs::FileType::Fifo,
            rustix::fs::Mode::RUSR | rustix::fs::Mode::WUSR,
            0,
        )
        .unwrap();
        // A record of a process long gone.
        write_record(&dir, 999_999, &Record { boot: boot_id(), ..record(None) });

        assert_eq!(kill_leftovers(&dir, boot_id().as_deref()).unwrap(), 0);
        let mut left: Vec<String> = fs::read_dir(&containers)
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        left.sort();
        assert_eq!(left, [".hidden", "42", "77", "88", "important.txt"]);
        assert_eq!(fs::read_to_string(containers.join("important.txt")).unwrap(), "precious\n");
    }

    /// The live processes whose command line is `sleep <seconds>`.
    fn sleeping(seconds: &str) -> Vec<u32> {
        processes()
            .into_iter()
            .filter(|p| {
                let cmdline = fs::read(format!("/proc/{}/cmdline", p.pid)).unwrap_or_default();
                cmdline == format!("sleep\0{seconds}\0").as_bytes()
            })
            .map(|p| p.pid)
            .collect()
    }

    /// Polls (at most 5 s) until `f` holds.
    fn eventually(what: &str, f: impl Fn() -> bool) {
        for _ in 0..500 {
            if f() {
                return;
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        panic!("{what}");
    }

    /// `sh -c script` in a session and group of its own (`setsid` does not fork: the shell is
    /// not a group leader here), its output away from the test's (a leftover must not hold it
    /// open), its input piped.
    fn in_own_session(script: &str) -> std::process::Child {
        Command::new("setsid")
            .args(["sh", "-c", script])
            .stdin(Stdio::piped())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap()
    }

    /// [`in_own_session`] running `script` with the container mark of its own group (its
    /// leader's PID and start time) exported as a recorded container's shim would; the leader,
    /// its PID and its start time.
    fn marked_session(script: &str) -> (std::process::Child, u32, u64) {
        let mut leader = in_own_session(&format!("read mark; export {MARK_ENV}=$mark; {script}"));
        let pgid = leader.id();
        let start = start_time(pgid).unwrap();
        leader.stdin.take().unwrap().write_all(format!("{}\n", mark(pgid, start)).as_bytes()).unwrap();
        (leader, pgid, start)
    }

    /// A group seen in a look at every process, ended since and its ID taken by another group
    /// (here a stranger's session, the look made up to show an earlier process leading a group
    /// of that ID), is not SIGKILLed by the ID; the group as a look shows it now is. Before,
    /// the SIGKILL went by the ID alone, read up to a whole look before.
    #[test]
    fn a_group_that_ended_since_the_look_is_not_killed_under_its_id() {
        let mut stranger = in_own_session("sleep 7385");
        let pgid = stranger.id();
        eventually("the stranger leads its group", || {
            ProcessStat::of(pgid).is_ok_and(|stat| u32::try_from(stat.pgid).ok() == Some(pgid))
        });
        let start = start_time(pgid).unwrap();
        let earlier = Process { pid: pgid, pgid: i32::try_from(pgid).unwrap(), start: start + 1, mark: None };
        assert_eq!(kill_group_still_seen(pgid, &[earlier]).unwrap(), Delivery::Gone);
        assert!(stranger.try_wait().unwrap().is_none(), "the stranger's group was killed");
        assert_eq!(kill_group_still_seen(pgid, &processes()).unwrap(), Delivery::Sent);
        assert_eq!(stranger.wait().unwrap().signal(), Some(9));
    }

    /// A record an older agent wrote names the command itself as the leader, not a shim: the
    /// SIGUSR1 meant for a shim kills it (its default action), and the group's SIGKILL the rest.
    #[test]
    fn a_record_whose_leader_is_not_a_shim_is_still_killed() {
        let dir = state_dir("old-record");
        let mut leader = Command::new("sh")
            .args(["-c", "sleep 7371 & wait"])
            .process_group(0)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        let pgid = leader.id();
        let old = format!("{} default/old app\n", start_time(pgid).unwrap());
        fs::write(dir.join("containers").join(pgid.to_string()), old).unwrap();
        assert_eq!(kill_leftovers(&dir, boot_id().as_deref()).unwrap(), 1);
        let status = leader.wait().unwrap();
        assert_eq!(status.signal(), Some(10), "SIGUSR1 first: {status:?}");
        eventually("the group's SIGKILL ended the rest", || sleeping("7371").is_empty());
        assert_eq!(records_left(&dir), 0, "the record is gone");
    }

    /// The recorded container ended while no agent ran; its ID went to a daemon's first child,
    /// which made a session of it (`setsid`) and ended, leaving the daemon in a group without a
    /// leader. Nothing shows that group is the container's (its member started after the dead
    /// agent's last heartbeat, and carries no mark): it is left alone. Before, any leaderless
    /// group under a record's ID was SIGKILLed.
    #[test]
    fn a_strangers_group_under_a_recorded_id_is_left_alone() {
        let dir = state_dir("stranger");
        write_heartbeat(&dir, now_ticks());
        // Process start times count whole ticks: the stranger starts a tick after the beat.
        std::thread::sleep(Duration::from_millis(30));
        let mut stranger = in_own_session("sleep 7376 & exit 0");
        let pgid = stranger.id();
        stranger.wait().unwrap();
        eventually("the daemon runs", || sleeping("7376").len() == 1);
        let daemon = sleeping("7376")[0];
        write_record(&dir, pgid, &Record { boot: boot_id(), ..record(None) });
        assert_eq!(kill_leftovers(&dir, boot_id().as_deref()).unwrap(), 0);
        assert_eq!(sleeping("7376"), vec![daemon], "the stranger still runs");
        assert_eq!(records_left(&dir), 0, "the record is gone");
        let _ = signal_group(pgid, Signal::Kill);
    }

    /// The shim was killed with the agent, and the container's command emptied its environment
    /// (`env -i`): no mark. Its process was in the group before the dead agent's last
    /// heartbeat, so the group is the container's, and it is killed (found by a review: with the
    /// mark alone, it ran on beside the next agent's copy).
    #[test]
    fn a_group_member_from_the_dead_agents_life_shows_the_group_is_the_containers() {
        let dir = state_dir("heartbeat");
        let mut leader = in_own_session("env -i sleep 7379 & exit 0");
        let pgid = leader.id();
        let start = start_time(pgid).unwrap();
        leader.wait().unwrap();
        eventually("the container runs", || sleeping("7379").len() == 1);
        std::thread::sleep(Duration::from_millis(30));
        write_heartbeat(&dir, now_ticks());
        write_record(&dir, pgid, &Record { start, boot: boot_id(), ..record(None) });
        assert_eq!(kill_leftovers(&dir, boot_id().as_deref()).unwrap(), 1);
        eventually("the group is gone", || sleeping("7379").is_empty());
    }

    /// The shim was killed with the agent. What the container left: its main process in the
    /// group without a leader, and a daemon that left the group (`setsid`). Both carry the mark,
    /// and the next agent kills both. Before, the daemon ran on.
    #[test]
    fn what_carries_a_records_mark_is_killed_in_the_group_or_out_of_it() {
        let dir = state_dir("marked");
        // No heartbeat: only the mark tells the group is ours.
        let (mut leader, pgid, start) = marked_session("setsid sleep 7377 & sleep 7378 & exit 0");
        leader.wait().unwrap();
        eventually("both run", || sleeping("7377").len() == 1 && sleeping("7378").len() == 1);
        write_record(&dir, pgid, &Record { start, boot: boot_id(), ..record(None) });
        assert_eq!(kill_leftovers(&dir, boot_id().as_deref()).unwrap(), 1);
        eventually("the group and the daemon that left it are gone", || {
            sleeping("7377").is_empty() && sleeping("7378").is_empty()
        });
        assert_eq!(records_left(&dir), 0, "the record is gone");
    }

    /// A record damaged from outside (here: zeroed) still has its group's ID as its name. The
    /// shim was killed with the agent; what the container left carries marks of that ID, which
    /// give the start: the group and the daemon that left it are killed as the container's,
    /// and the record goes. Before, the record was left alone as a stranger's file, and what it
    /// named ran beside the next agent's copy. A numeric file that nothing running names (the
    /// first test's `42`) is still left alone.
    #[test]
    fn what_a_damaged_records_id_and_marks_name_is_killed() {
        let dir = state_dir("damaged");
        let (mut leader, pgid, _) = marked_session("setsid sleep 7380 & sleep 7381 & exit 0");
        leader.wait().unwrap();
        eventually("both run", || sleeping("7380").len() == 1 && sleeping("7381").len() == 1);
        fs::write(dir.join("containers").join(pgid.to_string()), [0u8; 64]).unwrap();
        assert_eq!(kill_leftovers(&dir, boot_id().as_deref()).unwrap(), 1);
        eventually("the group and the daemon that left it are gone", || {
            sleeping("7380").is_empty() && sleeping("7381").is_empty()
        });
        assert_eq!(records_left(&dir), 0, "the damaged record is gone");
    }

    /// A damaged record whose group's leader still runs with the start its marks name, and is
    /// no orphaned shim of this program (here: a process of the test's; in life, the shim of
    /// another running agent that took the dead one's PID): nothing is killed, and the file is
    /// left alone. Found by a review: the marks alone had made the sweep kill a running
    /// agent's container.
    #[test]
    fn a_damaged_record_does_not_kill_what_a_live_leader_still_runs() {
        let dir = state_dir("damaged-live");
        let (mut leader, pgid, _) = marked_session("setsid sleep 7382 & sleep 7383 & wait");
        eventually("both run", || sleeping("7382").len() == 1 && sleeping("7383").len() == 1);
        fs::write(dir.join("containers").join(pgid.to_string()), [0u8; 64]).unwrap();
        assert_eq!(kill_leftovers(&dir, boot_id().as_deref()).unwrap(), 0);
        assert_eq!((sleeping("7382").len(), sleeping("7383").len()), (1, 1), "all still run");
        assert!(leader.try_wait().unwrap().is_none(), "the leader still runs");
        assert_eq!(records_left(&dir), 1, "the file is left alone");
        let _ = signal_group(pgid, Signal::Kill);
        for pid in sleeping("7382") {
            let _ = Command::new("kill").args(["-KILL", &pid.to_string()]).status();
        }
        let _ = leader.wait();
    }

    /// A marked daemon that keeps starting its successor in a session of its own and ending is
    /// killed, successor and all. The look goes on while any marked process is seen, not only
    /// while the last look signalled one; but one that hops within a millisecond or two
    /// outruns any look through `/proc` (each copy is gone before a look has read it), so this
    /// one waits a second between hops.
    #[test]
    fn a_marked_process_that_keeps_forking_is_killed() {
        let dir = state_dir("hopper");
        let hop = dir.join("hop.sh");
        fs::write(&hop, "sleep 1\nsetsid sh \"$0\" </dev/null >/dev/null 2>&1 &\nexit 0\n").unwrap();
        let (mut leader, pgid, start) = marked_session(&format!("sh {} & exit 0", hop.display()));
        leader.wait().unwrap();
        let hopping = || processes().iter().any(|p| p.mark.as_deref() == Some(mark(pgid, start).as_str()));
        eventually("it runs", hopping);
        write_record(&dir, pgid, &Record { start, boot: boot_id(), ..record(None) });
        assert_eq!(kill_leftovers(&dir, boot_id().as_deref()).unwrap(), 1);
        eventually("every marked process is gone", || !hopping());
    }
}
