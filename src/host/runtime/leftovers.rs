//! What an agent that died left running, found from its container records and killed before
//! the next agent on the same state directory starts anything (`docs/reliability.md`, "The
//! agent's crash never leaves two copies of a container"). [`super::groups`] writes the
//! records; this module reads them, once, at start.
//!
//! A record is `containers/<pgid>`: one line of [`Record`]. What belongs to it:
//!
//! - **The leader** (the container shim), if the PID still names a process with the recorded
//!   start time: asked to kill its tree (SIGUSR1), then its group is SIGKILLed as a backstop.
//! - **A group whose leader is gone** (the shim was killed with the agent, `pkill -9 probelet`):
//!   its ID cannot be reused while members live, but it may already *be* a reused ID: the
//!   recorded container ended while no agent ran, another process took the PID and made a group
//!   of it (`setsid`), and its leader ended too (a daemon's double fork does exactly that). So a
//!   leaderless group is ours only if one of its members carries the container's mark
//!   ([`crate::shim::MARK_ENV`] with this record's [`crate::shim::mark`]), or if its members are
//!   in the recorded session (the dead agent's, which a group cannot leave but by leaving the
//!   session) and that session has no leader running, so that nothing but the dead agent's
//!   descendants can be in it. Otherwise it is left alone, and said so.
//! - **The processes that left the group** (`setsid`, a double-forked daemon) while the shim,
//!   which would have killed them, was killed too: every process that carries the record's
//!   mark, signalled through a pidfd after its start time was checked. A process that emptied
//!   its environment (`env -i`) and left the group cannot be told from a stranger, and runs on.
//!
//! A record of another boot (its boot ID differs) names nothing that runs. A record without a
//! boot ID or session is an older agent's: its leader is still recognised by its start time.

use std::collections::{BTreeMap, BTreeSet};
use std::fs;
use std::io;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use crate::process::{
    Delivery, ProcessStat, Signal, signal_group, signal_leader, signal_process, start_time,
};
use crate::shim::{MARK_ENV, TREE_KILL_WAIT, mark};

use super::groups::{runs, wait_for_leaders};

/// How long the next agent waits for the leftovers it SIGKILLed to disappear.
const LEFTOVER_WAIT: Duration = Duration::from_secs(5);

/// How many times the marked processes are looked for and killed: a marked process may fork
/// (marked children) until its SIGKILL lands, and those are found by the next look.
const MARK_ROUNDS: usize = 20;

/// What `containers/<pgid>` says: `<start> <pod> <container> <boot> <session>`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct Record {
    /// The leader's start time ([`start_time`]).
    pub start: u64,
    pub pod: String,
    pub container: String,
    /// The boot ID when the record was written (`/proc/sys/kernel/random/boot_id`).
    pub boot: Option<String>,
    /// The leader's session: the agent's.
    pub session: Option<u32>,
}

impl Record {
    pub fn line(&self) -> String {
        let boot = self.boot.as_deref().unwrap_or("-");
        let session = self.session.map_or_else(|| "-".to_owned(), |s| s.to_string());
        format!("{} {} {} {boot} {session}\n", self.start, self.pod, self.container)
    }

    /// `None` where even the start time cannot be read: such a record names nothing.
    pub fn parse(text: &str) -> Option<Record> {
        let mut fields = text.split_whitespace();
        let start = fields.next()?.parse().ok()?;
        let mut field = || fields.next().unwrap_or("?").to_owned();
        let (pod, container, boot, session) = (field(), field(), field(), field());
        Some(Record {
            start,
            pod,
            container,
            boot: Some(boot).filter(|b| !matches!(b.as_str(), "?" | "-")),
            session: session.parse().ok().filter(|&s| s > 0),
        })
    }
}

/// This boot's ID, to tell a record of this boot from one of an earlier boot.
pub(super) fn boot_id() -> Option<String> {
    let text = fs::read_to_string("/proc/sys/kernel/random/boot_id").ok()?;
    Some(text.trim().to_owned()).filter(|b| !b.is_empty() && !b.contains(char::is_whitespace))
}

/// A live process as `/proc` shows it.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Process {
    pid: u32,
    pgid: i32,
    session: i32,
    start: u64,
    /// The value of [`MARK_ENV`] it was started with, if readable.
    mark: Option<String>,
}

/// Every live (not zombie) process but this one.
fn processes() -> Vec<Process> {
    let me = std::process::id();
    let Ok(entries) = fs::read_dir("/proc") else { return Vec::new() };
    entries
        .filter_map(|e| e.ok()?.file_name().to_str()?.parse::<u32>().ok())
        .filter(|&pid| pid != me)
        .filter_map(|pid| {
            let stat = ProcessStat::read(rustix::process::Pid::from_raw(i32::try_from(pid).ok()?)?).ok()?;
            let mark = fs::read(format!("/proc/{pid}/environ")).ok().and_then(|env| mark_in(&env));
            (!stat.zombie).then_some(Process {
                pid,
                pgid: stat.pgid,
                session: stat.session,
                start: stat.start,
                mark,
            })
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

/// What a record's group looks like now, from one look at every process.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
struct GroupView {
    /// Some process is in the group.
    members: bool,
    /// One of them carries the record's mark.
    marked: bool,
    /// All of them are in the recorded session.
    in_session: bool,
    /// The recorded session's leader still runs: others than the dead agent's may be in it.
    session_led: bool,
}

impl GroupView {
    fn of(pgid: u32, record: &Record, processes: &[Process]) -> GroupView {
        let expected = mark(pgid, record.start);
        let members: Vec<&Process> =
            processes.iter().filter(|p| u32::try_from(p.pgid).ok() == Some(pgid)).collect();
        let session = record.session.and_then(|s| i32::try_from(s).ok());
        GroupView {
            members: !members.is_empty(),
            marked: members.iter().any(|p| p.mark.as_deref() == Some(expected.as_str())),
            in_session: session.is_some_and(|s| members.iter().all(|p| p.session == s)),
            session_led: session.is_some_and(|s| {
                processes.iter().any(|p| i32::try_from(p.pid).ok() == Some(s) && p.session == s)
            }),
        }
    }
}

/// What to do with a record's group.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Leftover {
    /// Its leader runs with the recorded start time: ask it, then SIGKILL the group.
    Leader,
    /// Its leader is gone, and its members are the container's: SIGKILL the group.
    Group,
    /// Nothing of the group runs, or what runs under its ID is not ours.
    NotOurs,
}

/// Pure: what a record's group is, from this boot's ID, the start time of whatever process
/// has the group's ID now, and what the group looks like.
fn classify(record: &Record, this_boot: Option<&str>, leader: Option<u64>, group: GroupView) -> Leftover {
    if let (Some(recorded), Some(now)) = (record.boot.as_deref(), this_boot)
        && recorded != now
    {
        return Leftover::NotOurs;
    }
    match leader {
        Some(now) if now == record.start => Leftover::Leader,
        // The ID names another process: our group is gone (an ID is not reused while a group
        // has it).
        Some(_) => Leftover::NotOurs,
        None if group.members && (group.marked || (group.in_session && !group.session_led)) => {
            Leftover::Group
        }
        None => Leftover::NotOurs,
    }
}

/// One record as read.
struct Found {
    pgid: u32,
    record: Record,
    /// Something of it was signalled.
    killed: bool,
}

/// Kills what every record in `containers` names that still runs, then removes the records.
/// Returns how many containers that was.
pub(super) fn kill_leftovers(containers: &Path) -> io::Result<usize> {
    let this_boot = boot_id();
    let mut found = Vec::new();
    let mut paths: Vec<PathBuf> = Vec::new();
    for entry in fs::read_dir(containers)? {
        let path = entry?.path();
        let Some(pgid) = path.file_name().and_then(|n| n.to_str()).and_then(|n| n.parse::<u32>().ok()) else {
            // A temporary file of a write the crash interrupted, or a stranger.
            let _ = fs::remove_file(&path);
            continue;
        };
        let record = fs::read_to_string(&path).ok().as_deref().and_then(Record::parse);
        paths.push(path);
        let Some(record) = record else { continue };
        let of_this_boot = match (record.boot.as_deref(), this_boot.as_deref()) {
            (Some(recorded), Some(now)) => recorded == now,
            _ => true,
        };
        if of_this_boot {
            found.push(Found { pgid, record, killed: false });
        }
    }
    if found.is_empty() {
        return remove(paths).map(|()| 0);
    }

    // The leaders first (a shim kills its whole tree), then every group still ours.
    let before = processes();
    let mut asked = Vec::new();
    for f in &mut found {
        let Found { pgid, record, .. } = &*f;
        let view = GroupView::of(*pgid, record, &before);
        match classify(record, this_boot.as_deref(), start_time(*pgid).ok(), view) {
            Leftover::Leader => match signal_leader(*pgid, Signal::KillTree) {
                Ok(Delivery::Sent) => {
                    f.killed = true;
                    asked.push(f.pgid);
                }
                Ok(Delivery::Gone) => {}
                Err(error) => failed(f, &error),
            },
            Leftover::Group => {}
            Leftover::NotOurs if view.members => tracing::warn!(
                pgid = *pgid,
                pod = record.pod,
                container = record.container,
                "a process group with a container record's ID runs, but nothing shows it is the container's: left alone"
            ),
            Leftover::NotOurs => {}
        }
    }
    wait_for_leaders(&asked, TREE_KILL_WAIT);
    let now = processes();
    for f in &mut found {
        // Classified again: a leader that ended may have been reaped and its PID reused.
        let view = GroupView::of(f.pgid, &f.record, &now);
        if classify(&f.record, this_boot.as_deref(), start_time(f.pgid).ok(), view) != Leftover::NotOurs {
            match signal_group(f.pgid, Signal::Kill) {
                Ok(Delivery::Sent) => f.killed = true,
                Ok(Delivery::Gone) => {}
                Err(error) => failed(f, &error),
            }
        }
    }

    // Then whatever left a group and carries a record's mark.
    let marks: BTreeMap<String, usize> =
        found.iter().enumerate().map(|(i, f)| (mark(f.pgid, f.record.start), i)).collect();
    let mut signalled: BTreeSet<(u32, u64)> = BTreeSet::new();
    for round in 0..MARK_ROUNDS {
        let current = if round == 0 { now.clone() } else { processes() };
        let mut any = false;
        for p in &current {
            let Some(&i) = p.mark.as_ref().and_then(|m| marks.get(m)) else { continue };
            // A process SIGKILLed already may take a moment to die: signalled once.
            if !signalled.insert((p.pid, p.start)) {
                continue;
            }
            match signal_process(p.pid, p.start, Signal::Kill) {
                Ok(Delivery::Sent) => {
                    any = true;
                    found[i].killed = true;
                }
                Ok(Delivery::Gone) => {}
                Err(error) => failed(&found[i], &error),
            }
        }
        if !any && round > 0 {
            break;
        }
    }

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
    #[allow(clippy::disallowed_methods)]
    let deadline = Instant::now() + LEFTOVER_WAIT;
    let pending = || {
        found.iter().any(|f| f.killed && runs(f.pgid))
            || signalled.iter().any(|&(pid, start)| start_time(pid).ok() == Some(start) && runs(pid))
    };
    #[allow(clippy::disallowed_methods)]
    while pending() && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(20));
    }
    Ok(found.iter().filter(|f| f.killed).count())
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

fn remove(paths: Vec<PathBuf>) -> io::Result<()> {
    for path in paths {
        fs::remove_file(&path)?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write as _;
    use std::os::unix::process::{CommandExt as _, ExitStatusExt as _};
    use std::process::{Command, Stdio};

    fn record(boot: Option<&str>, session: Option<u32>) -> Record {
        Record {
            start: 7,
            pod: "default/p".into(),
            container: "c".into(),
            boot: boot.map(str::to_owned),
            session,
        }
    }

    #[test]
    fn a_record_reads_back_and_an_older_agents_record_still_reads() {
        let written = record(Some("b00t"), Some(4242));
        assert_eq!(Record::parse(&written.line()), Some(written));
        let unknown = record(None, None);
        assert_eq!(unknown.line(), "7 default/p c - -\n");
        assert_eq!(Record::parse(&unknown.line()), Some(unknown.clone()));
        assert_eq!(Record::parse("7 default/p c\n"), Some(unknown), "three fields, as agents wrote before");
        assert_eq!(Record::parse("garbage default/p c"), None);
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
    /// unless a member carries the mark or sits in the dead agent's session, which no one leads.
    #[test]
    fn a_leaderless_group_is_ours_only_when_something_shows_it() {
        use Leftover::*;
        let ours = record(Some("b"), Some(100));
        let group =
            |members, marked, in_session, session_led| GroupView { members, marked, in_session, session_led };
        let nothing = GroupView::default();
        assert_eq!(classify(&ours, Some("b"), Some(7), nothing), Leader);
        assert_eq!(
            classify(&ours, Some("b"), Some(8), group(true, true, true, false)),
            NotOurs,
            "a recycled PID"
        );
        assert_eq!(
            classify(&ours, Some("b"), None, group(true, true, false, true)),
            Group,
            "a marked member"
        );
        assert_eq!(
            classify(&ours, Some("b"), None, group(true, false, true, false)),
            Group,
            "the dead agent's session"
        );
        assert_eq!(
            classify(&ours, Some("b"), None, group(true, false, true, true)),
            NotOurs,
            "a session someone still leads may hold strangers"
        );
        assert_eq!(
            classify(&ours, Some("b"), None, group(true, false, false, false)),
            NotOurs,
            "a stranger's group under a recycled ID"
        );
        assert_eq!(classify(&ours, Some("b"), None, nothing), NotOurs, "all gone");
        assert_eq!(classify(&ours, Some("other"), Some(7), nothing), NotOurs, "a record of an earlier boot");
        let older = record(None, None);
        assert_eq!(classify(&older, Some("b"), Some(7), nothing), Leader, "an older agent's record");
        assert_eq!(classify(&older, Some("b"), None, group(true, false, false, false)), NotOurs);
    }

    fn temp_dir(name: &str) -> PathBuf {
        let dir = std::env::temp_dir().join(format!("probelet-leftovers-{name}-{}", std::process::id()));
        let _ = fs::remove_dir_all(&dir);
        fs::create_dir_all(&dir).unwrap();
        dir
    }

    fn write_record(dir: &Path, pgid: u32, record: &Record) {
        fs::write(dir.join(pgid.to_string()), record.line()).unwrap();
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

    /// A record an older agent wrote names the command itself as the leader, not a shim: the
    /// SIGUSR1 meant for a shim kills it (its default action), and the group's SIGKILL the rest.
    #[test]
    fn a_record_whose_leader_is_not_a_shim_is_still_killed() {
        let dir = temp_dir("old-record");
        let mut leader = Command::new("sh")
            .args(["-c", "sleep 7371 & wait"])
            .process_group(0)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        let pgid = leader.id();
        fs::write(dir.join(pgid.to_string()), format!("{} default/old app\n", start_time(pgid).unwrap()))
            .unwrap();
        assert_eq!(kill_leftovers(&dir).unwrap(), 1);
        let status = leader.wait().unwrap();
        assert_eq!(status.signal(), Some(10), "SIGUSR1 first: {status:?}");
        eventually("the group's SIGKILL ended the rest", || sleeping("7371").is_empty());
        assert_eq!(fs::read_dir(&dir).unwrap().count(), 0, "the record is gone");
        let _ = fs::remove_dir_all(&dir);
    }

    /// The recorded container ended while no agent ran; its ID went to a daemon's first child,
    /// which made a session of it (`setsid`) and ended, leaving the daemon in a group without a
    /// leader. Nothing marks that group as the container's: it is left alone. Before, any
    /// leaderless group under a record's ID was SIGKILLed.
    #[test]
    fn a_strangers_group_under_a_recorded_id_is_left_alone() {
        let dir = temp_dir("stranger");
        // `setsid` (not a group leader here, so it does not fork) makes the session; its shell
        // leaves `sleep` behind in the group and ends.
        let mut stranger = Command::new("setsid")
            .args(["sh", "-c", "sleep 7376 & exit 0"])
            .stdin(Stdio::null())
            // A leftover must not hold the test's output open.
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        let pgid = stranger.id();
        stranger.wait().unwrap();
        eventually("the daemon runs", || sleeping("7376").len() == 1);
        let daemon = sleeping("7376")[0];
        let ours = rustix::process::getsid(None).unwrap().as_raw_pid().unsigned_abs();
        let recorded = Record { session: Some(ours), boot: boot_id(), ..record(None, None) };
        write_record(&dir, pgid, &recorded);
        assert_eq!(kill_leftovers(&dir).unwrap(), 0);
        assert_eq!(sleeping("7376"), vec![daemon], "the stranger still runs");
        assert_eq!(fs::read_dir(&dir).unwrap().count(), 0, "the record is gone");
        let _ = signal_group(pgid, Signal::Kill);
        let _ = fs::remove_dir_all(&dir);
    }

    /// The shim was killed with the agent. What the container left: its main process in the
    /// group without a leader, and a daemon that left the group (`setsid`). Both carry the mark,
    /// and the next agent kills both. Before, the daemon ran on.
    #[test]
    fn what_carries_a_records_mark_is_killed_in_the_group_or_out_of_it() {
        let dir = temp_dir("marked");
        // In a session of its own, so that only the mark tells the group is ours.
        let script = format!("read mark; export {MARK_ENV}=$mark; setsid sleep 7377 & sleep 7378 & exit 0");
        let mut leader = Command::new("setsid")
            .args(["sh", "-c", &script])
            .stdin(Stdio::piped())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        let pgid = leader.id();
        let start = start_time(pgid).unwrap();
        leader.stdin.take().unwrap().write_all(format!("{}\n", mark(pgid, start)).as_bytes()).unwrap();
        leader.wait().unwrap();
        eventually("both run", || sleeping("7377").len() == 1 && sleeping("7378").len() == 1);
        let ours = rustix::process::getsid(None).unwrap().as_raw_pid().unsigned_abs();
        let recorded = Record { start, session: Some(ours), boot: boot_id(), ..record(None, None) };
        write_record(&dir, pgid, &recorded);
        assert_eq!(kill_leftovers(&dir).unwrap(), 1);
        eventually("the group and the daemon that left it are gone", || {
            sleeping("7377").is_empty() && sleeping("7378").is_empty()
        });
        assert_eq!(fs::read_dir(&dir).unwrap().count(), 0, "the record is gone");
        let _ = fs::remove_dir_all(&dir);
    }
}
