//! What a container leaves running when its shim is killed. The container shim kills everything
//! a container started (`docs/reliability.md`, "What leaves a container's process group"), but
//! a container runs as the agent's user and can kill its own shim (`kill -9 $PPID`). The agent
//! then SIGKILLs the container's process group, and a process that had left the group (`setsid`,
//! a double-forked daemon) used to run on with parent PID 1.
//!
//! So the standalone agent is a child subreaper too ([`OrphanReaper::start`]): an orphan of a
//! dead shim re-parents to the agent instead of init, and this module kills and reaps it. A
//! container's runtime upstream kills the container's cgroup, whatever the container killed;
//! a local process has no cgroup, and the agent's children stand in for it here.
//!
//! **Which children are orphans.** The agent starts no process but its shims, each an image of its
//! own executable (`/proc/self/exe`, also between `fork` and `exec`). A live child running another
//! executable is an orphan: SIGKILLed (safe by PID: an unreaped child's PID cannot be reused) and
//! reaped. A zombie child is reaped only when it is one killed here or when its name (`comm`) is
//! one no child the agent started can have: a shim's zombie belongs to the runtime, which waits for
//! it (std's spawn even panics when a child that failed to `exec` was reaped by someone else). A
//! child has, before `exec`, the name of the agent's thread that forked it, and after it the shim's
//! (`exe`). An orphan that names itself like one of those and exits on its own stays a zombie,
//! where nothing runs. An orphan that runs the agent's own executable (a container whose command is
//! `probelet …`) is taken for a shim and left running. The children the agent already had when it
//! became a subreaper (started by a script that then `exec`ed the agent) are never killed, only
//! reaped once they end.
//!
//! Whatever else re-parents to the agent is taken for a container's: an agent that runs as its
//! container's PID 1 kills what an `exec` session into that container leaves running in the
//! background (as PID 1 it never reaped those before, either).
//!
//! **When.** After each SIGCHLD (a shim, or an orphan, ended), at most once per [`SETTLE`] (exec
//! probes end shims all the time), every [`SWEEP_PERIOD`] in any case, and once more when the agent
//! stops. A shim seen once is known by its PID and start time from then on, so a sweep reads one
//! `/proc/<pid>/stat` per shim. A sweep goes round until a round kills nothing and every process it
//! killed is reaped: killing an orphan re-parents that orphan's own children to the agent as well.

use std::collections::{BTreeSet, HashMap, HashSet};
use std::fs;
use std::io;
use std::os::unix::fs::MetadataExt as _;
use std::path::Path;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use probelet_actors::process::children;
use rustix::process::{Pid, Signal, WaitOptions, getpid, kill_process, set_child_subreaper, waitpid};

use super::groups::parse_start_time;

/// The shortest time between two sweeps started by SIGCHLD.
pub const SETTLE: Duration = Duration::from_secs(1);
/// How often the agent sweeps when no child ended.
pub const SWEEP_PERIOD: Duration = Duration::from_secs(5);
/// A sweep's rounds at most (a round lists the children once), [`ROUND_PAUSE`] apart.
const MAX_ROUNDS: usize = 1_000;
const ROUND_PAUSE: Duration = Duration::from_millis(5);
/// The kernel keeps a process name (`comm`) to 15 bytes.
const COMM_LEN: usize = 15;

/// An executable file, as `stat` names it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct FileId {
    dev: u64,
    ino: u64,
}

impl FileId {
    fn of(path: &str) -> io::Result<Self> {
        let meta = fs::metadata(path)?;
        Ok(Self { dev: meta.dev(), ino: meta.ino() })
    }
}

/// A child of the agent, as `/proc` shows it.
#[derive(Debug, Clone, PartialEq, Eq)]
struct ChildView {
    zombie: bool,
    comm: String,
    /// When it started, in clock ticks since boot (with the PID, which process this is).
    start: u64,
    /// `None` when it cannot be read (a zombie has none; a process that ended meanwhile), or
    /// was not ([`Known::Shim`]).
    exe: Option<FileId>,
}

/// What to do with one child.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Verdict {
    /// A shim (or not known yet): left alone.
    Ours,
    Kill,
    Reap,
}

/// How a sweep knows a child apart from what `/proc` shows.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Known {
    /// Nothing: judged by what `/proc` shows.
    Unknown,
    /// SIGKILLed by this sweep.
    KilledHere,
    /// A child the agent had before it became a subreaper (a process its parent started before
    /// `exec`ing the agent): never killed; reaped once it ends, as nothing else waits for it.
    Inherited,
    /// Seen running the agent's executable by an earlier sweep, with the same start time: a
    /// shim, alive or its zombie, whose executable need not be looked at again.
    Shim,
}

/// `agent_exe` is the agent's executable; `is_own_name` tells a name a child the agent started
/// can have (its threads' and the shim's), asked only about zombies nothing else tells apart.
fn judge(
    child: &ChildView,
    agent_exe: FileId,
    known: Known,
    is_own_name: impl FnOnce(&str) -> bool,
) -> Verdict {
    if child.zombie {
        let ours = known == Known::Shim || (known == Known::Unknown && is_own_name(&child.comm));
        return if ours { Verdict::Ours } else { Verdict::Reap };
    }
    match child.exe {
        _ if matches!(known, Known::Inherited | Known::Shim) => Verdict::Ours,
        Some(exe) if exe != agent_exe => Verdict::Kill,
        // The agent's executable; or unreadable, ended meanwhile: a zombie in the next round.
        _ => Verdict::Ours,
    }
}

/// `pid (comm) state ...`: the name between the first `(` and the last `)` (a name may hold
/// either), the state, and the start time.
fn parse_stat(stat: &str) -> Option<(String, char, u64)> {
    let (head, rest) = stat.rsplit_once(')')?;
    let (_, comm) = head.split_once('(')?;
    let state = rest.trim_start().chars().next()?;
    Some((comm.to_owned(), state, parse_start_time(stat)?))
}

/// Child `pid` as `/proc` shows it, with its executable unless `shims` knows it for a shim.
fn view(pid: Pid, shims: &HashMap<Pid, u64>) -> Option<(ChildView, bool)> {
    let stat = fs::read_to_string(format!("/proc/{}/stat", pid.as_raw_pid())).ok()?;
    let (comm, state, start) = parse_stat(&stat)?;
    let zombie = state == 'Z';
    let shim = shims.get(&pid) == Some(&start);
    let exe = if zombie || shim { None } else { FileId::of(&format!("/proc/{}/exe", pid.as_raw_pid())).ok() };
    Some((ChildView { zombie, comm, start, exe }, shim))
}

/// The name a process gets from `exec`ing `path`: its last component, cut to 15 bytes.
fn comm_of(path: &Path) -> String {
    let name = path.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
    let mut end = name.len().min(COMM_LEN);
    while !name.is_char_boundary(end) {
        end -= 1;
    }
    name[..end].to_owned()
}

/// Kills and reaps the orphans of dead shims; see the module doc.
#[derive(Debug)]
pub struct OrphanReaper {
    exe: FileId,
    shim_comm: String,
    /// What one sweep leaves the next; locked for a whole sweep, so sweeps take turns.
    memory: Mutex<Memory>,
}

#[derive(Debug, Default)]
struct Memory {
    /// The children the agent had before it became a subreaper and has not reaped yet.
    inherited: HashSet<Pid>,
    /// The shims the last sweep saw (alive, or their zombies), with their start times.
    shims: HashMap<Pid, u64>,
}

impl OrphanReaper {
    /// Makes the agent a child subreaper; `shim` is the path the agent starts its shims by.
    pub fn adopt_orphans(shim: &Path) -> io::Result<Self> {
        let exe = FileId::of("/proc/self/exe")?;
        set_child_subreaper(Some(getpid()))?;
        let memory = Memory { inherited: children().into_iter().collect(), shims: HashMap::new() };
        Ok(Self { exe, shim_comm: comm_of(shim), memory: Mutex::new(memory) })
    }

    /// Sweeps after each SIGCHLD (at most once a second) and every 5 s, on the blocking pool,
    /// for the agent's whole life. Call from within the agent's runtime.
    pub fn start(self: Arc<Self>) -> io::Result<()> {
        let mut ended = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::child())?;
        tokio::spawn(async move {
            let mut period = tokio::time::interval(SWEEP_PERIOD);
            loop {
                tokio::select! {
                    _ = ended.recv() => {}
                    _ = period.tick() => {}
                }
                let reaper = self.clone();
                // A panic is the blocking task's; the next sweep tries again.
                let _ = tokio::task::spawn_blocking(move || reaper.sweep()).await;
                tokio::time::sleep(SETTLE).await;
            }
        });
        Ok(())
    }

    /// The names a child the agent started can have: its threads' (before `exec`) and the shim's.
    fn own_names(&self) -> BTreeSet<String> {
        let mut comms: BTreeSet<String> = fs::read_dir("/proc/self/task")
            .into_iter()
            .flatten()
            .filter_map(|task| fs::read_to_string(task.ok()?.path().join("comm")).ok())
            .map(|comm| comm.trim_end_matches('\n').to_owned())
            .collect();
        comms.insert(self.shim_comm.clone());
        comms
    }

    /// Kills every orphan and reaps it, round after round until none is left (or 1,000 rounds);
    /// returns how many were killed. Blocks for as long as that takes.
    pub fn sweep(&self) -> usize {
        let mut memory = self.memory.lock().unwrap_or_else(PoisonError::into_inner);
        let Memory { inherited, shims } = &mut *memory;
        let mut killed: HashSet<Pid> = HashSet::new();
        let mut count = 0;
        for _ in 0..MAX_ROUNDS {
            // Read only when a zombie needs it, and again each round: a thread started meanwhile
            // names the children it forks.
            let mut names: Option<BTreeSet<String>> = None;
            let mut alive_shims = HashMap::new();
            let mut killed_now = false;
            for pid in children() {
                let Some((child, shim)) = view(pid, shims) else { continue };
                let known = if killed.contains(&pid) {
                    Known::KilledHere
                } else if inherited.contains(&pid) {
                    Known::Inherited
                } else if shim {
                    Known::Shim
                } else {
                    Known::Unknown
                };
                let is_own_name = |comm: &str| names.get_or_insert_with(|| self.own_names()).contains(comm);
                match judge(&child, self.exe, known, is_own_name) {
                    Verdict::Ours => {
                        if shim || child.exe == Some(self.exe) {
                            alive_shims.insert(pid, child.start);
                        }
                    }
                    Verdict::Kill => {
                        if kill_process(pid, Signal::KILL).is_ok() && killed.insert(pid) {
                            count += 1;
                            killed_now = true;
                        }
                    }
                    Verdict::Reap => {
                        // Reaped, its PID may name a new child: forgotten.
                        if let Ok(Some(_)) = waitpid(Some(pid), WaitOptions::NOHANG) {
                            killed.remove(&pid);
                            inherited.remove(&pid);
                        }
                    }
                }
            }
            *shims = alive_shims;
            if !killed_now && killed.is_empty() {
                break;
            }
            std::thread::sleep(ROUND_PAUSE);
        }
        if count > 0 {
            tracing::warn!(
                count,
                "killed processes a container left running after its container shim was killed"
            );
        }
        count
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const AGENT: FileId = FileId { dev: 1, ino: 10 };
    const OTHER: FileId = FileId { dev: 1, ino: 11 };

    fn own_name(comm: &str) -> bool {
        ["probelet", "exe", "actix-rt|system"].contains(&comm)
    }

    fn live(comm: &str, exe: Option<FileId>) -> ChildView {
        ChildView { zombie: false, comm: comm.to_owned(), start: 7, exe }
    }

    fn zombie(comm: &str) -> ChildView {
        ChildView { zombie: true, comm: comm.to_owned(), start: 7, exe: None }
    }

    #[test]
    fn a_live_child_running_another_executable_is_killed() {
        assert_eq!(judge(&live("sleep", Some(OTHER)), AGENT, Known::Unknown, own_name), Verdict::Kill);
        // Named like a shim, running something else: still an orphan.
        assert_eq!(judge(&live("exe", Some(OTHER)), AGENT, Known::Unknown, own_name), Verdict::Kill);
    }

    #[test]
    fn a_shim_is_left_alone_whatever_its_name() {
        assert_eq!(judge(&live("exe", Some(AGENT)), AGENT, Known::Unknown, own_name), Verdict::Ours);
        // Between fork and exec, named after the forking thread.
        assert_eq!(
            judge(&live("actix-rt|system", Some(AGENT)), AGENT, Known::Unknown, own_name),
            Verdict::Ours
        );
        // Unreadable: ended meanwhile, judged again as a zombie.
        assert_eq!(judge(&live("sleep", None), AGENT, Known::Unknown, own_name), Verdict::Ours);
    }

    #[test]
    fn only_zombies_no_shim_can_be_are_reaped() {
        assert_eq!(judge(&zombie("sleep"), AGENT, Known::Unknown, own_name), Verdict::Reap);
        // The runtime waits for a shim's zombie: reaping it here would take its exit status.
        assert_eq!(judge(&zombie("exe"), AGENT, Known::Unknown, own_name), Verdict::Ours);
        assert_eq!(judge(&zombie("actix-rt|system"), AGENT, Known::Unknown, own_name), Verdict::Ours);
        // Killed by this sweep: reaped whatever its name.
        assert_eq!(judge(&zombie("exe"), AGENT, Known::KilledHere, own_name), Verdict::Reap);
        // A shim seen alive before, whatever the name of its zombie.
        assert_eq!(judge(&zombie("renamed"), AGENT, Known::Shim, own_name), Verdict::Ours);
        assert_eq!(judge(&live("renamed", None), AGENT, Known::Shim, own_name), Verdict::Ours);
    }

    #[test]
    fn a_child_the_agent_inherited_is_never_killed_and_reaped_once_it_ends() {
        assert_eq!(judge(&live("tail", Some(OTHER)), AGENT, Known::Inherited, own_name), Verdict::Ours);
        assert_eq!(judge(&zombie("exe"), AGENT, Known::Inherited, own_name), Verdict::Reap);
    }

    #[test]
    fn stat_lines_with_odd_names_parse() {
        let tail = "1 42 42 0 -1 4194560 0 0 0 0 0 0 0 0 20 0 1 0 123456 2256896 160";
        assert_eq!(parse_stat(&format!("42 (sleep) S {tail}")), Some(("sleep".to_owned(), 'S', 123456)));
        assert_eq!(parse_stat(&format!("42 (a) (b) Z {tail}")), Some(("a) (b".to_owned(), 'Z', 123456)));
        assert_eq!(parse_stat(&format!("42 () R {tail}")), Some((String::new(), 'R', 123456)));
        assert_eq!(parse_stat("42 (sleep) S 1"), None);
        assert_eq!(parse_stat("garbage"), None);
    }

    #[test]
    fn a_shims_name_is_its_paths_last_component_cut_to_15_bytes() {
        assert_eq!(comm_of(Path::new("/proc/self/exe")), "exe");
        assert_eq!(comm_of(Path::new("/usr/bin/probelet-with-a-long-name")), "probelet-with-a");
        assert_eq!(comm_of(Path::new("/x/ééééééééé")), "ééééééé");
    }
}
