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
//! executable (by the path `/proc/<pid>/exe` links to, read without touching that file's
//! filesystem) is an orphan, and so is one whose executable cannot be read at all (`PR_SET_DUMPABLE
//! 0`, a set-user-ID program) while the agent's own children can be. It is SIGKILLed and reaped. A
//! child is judged only if it is still the agent's child, with the same start time, after its
//! executable was read: a shim the runtime reaped meanwhile may have left its PID to a stranger. A
//! child that is not a shim is reaped by no one but this module, so its PID names it until then.
//!
//! A zombie child is reaped only when it is one killed here or when its name (`comm`) is one no
//! child the agent started can have: a shim's zombie belongs to the runtime, which waits for it
//! (std's spawn even panics when a child that failed to `exec` was reaped by someone else). A child
//! has, before `exec`, the name of the agent's thread that forked it, and after it the shim's
//! (`exe`). An orphan that names itself like one of those and exits on its own stays a zombie,
//! where nothing runs. An orphan that runs the agent's own executable is taken for a shim and left
//! running, its zombie never reaped; any container can start one (`/proc/$PPID/exe
//! container-shim -- …` before it kills its shim), so this is a way out, not only a corner case
//! (docs/reliability.md says what would close it). The children the agent already had when it
//! became a subreaper (started by a script that then `exec`ed the agent) are never killed, only
//! reaped once they end.
//!
//! Whatever else re-parents to the agent is taken for a container's: what those inherited children
//! leave behind when they daemonize, and, for an agent that runs as its container's PID 1, what an
//! `exec` session into that container leaves running in the background (as PID 1 it never reaped
//! those before, either).
//!
//! **When.** After each SIGCHLD (a shim, or an orphan, ended), at most once per [`SETTLE`] (exec
//! probes end shims all the time), every [`SWEEP_PERIOD`] in any case, and once more when the agent
//! stops. A shim seen once is known by its PID and start time from then on, so a sweep reads one
//! `/proc/<pid>/stat` per shim. A sweep goes round until a round finds nothing to do (a round that
//! killed or reaped is followed by another: killing an orphan re-parents that orphan's own children
//! to the agent), for at most 1 s; what is left waits for the next sweep. The forced exit's sweep
//! does not wait for one that is running.

use std::collections::{BTreeSet, HashMap, HashSet};
use std::fs;
use std::io;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError, TryLockError};
use std::time::{Duration, Instant};

use probelet_actors::process::children;
use rustix::process::{
    DumpableBehavior, Pid, Signal, WaitOptions, dumpable_behavior, getpid, kill_process, set_child_subreaper,
    waitpid,
};

use super::groups::parse_start_time;

/// The shortest time between two sweeps started by SIGCHLD.
pub const SETTLE: Duration = Duration::from_secs(1);
/// How often the agent sweeps when no child ended.
pub const SWEEP_PERIOD: Duration = Duration::from_secs(5);
/// How long one sweep may go on; what it has not finished, the next one does.
const SWEEP_BUDGET: Duration = Duration::from_secs(1);
/// The pause between two rounds of a sweep (a round lists the children once).
const ROUND_PAUSE: Duration = Duration::from_millis(5);
/// The kernel keeps a process name (`comm`) to 15 bytes.
const COMM_LEN: usize = 15;

/// What `/proc/<pid>/exe` says of a live child: the executable's path (a link the kernel
/// resolves without touching the file's filesystem, unlike `stat`, which a hung mount would
/// block).
#[derive(Debug, Clone, PartialEq, Eq)]
enum Exe {
    Is(PathBuf),
    /// Not ours to read (`EACCES`): a process that made itself undumpable, or a set-user-ID
    /// program.
    Hidden,
    /// Not known: a zombie has none; a process that ended meanwhile.
    Unknown,
}

/// A child of the agent, as `/proc` shows it.
#[derive(Debug, Clone, PartialEq, Eq)]
struct ChildView {
    zombie: bool,
    comm: String,
    /// When it started, in clock ticks since boot (with the PID, which process this is).
    start: u64,
    /// [`Exe::Unknown`] too when not read ([`Known::Shim`]).
    exe: Exe,
}

/// What to do with one child.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Verdict {
    /// A shim (or not known yet): left alone.
    Ours,
    Kill,
    /// SIGKILL (a zombie whose other threads still run is not reapable until they die), then
    /// reap.
    Reap,
}

/// How a sweep knows a child apart from what `/proc` shows.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Known {
    /// Nothing: judged by what `/proc` shows.
    Unknown,
    /// SIGKILLed by a sweep.
    Killed,
    /// A child the agent had before it became a subreaper (a process its parent started before
    /// `exec`ing the agent): never killed; reaped once it ends, as nothing else waits for it.
    Inherited,
    /// Seen running the agent's executable by an earlier sweep, with the same start time: a
    /// shim, alive or its zombie, whose executable need not be looked at again.
    Shim,
}

/// What the agent knows of itself for [`judge`].
#[derive(Debug, Clone, PartialEq, Eq)]
struct Agent {
    exe: PathBuf,
    /// Whether the agent's own children can be read (`/proc/<pid>/exe`): when they can, an
    /// unreadable child is none the agent started.
    dumpable: bool,
}

/// `is_own_name` tells a name a child the agent started can have (its threads' and the
/// shim's), asked only about zombies nothing else tells apart.
fn judge(child: &ChildView, agent: &Agent, known: Known, is_own_name: impl FnOnce(&str) -> bool) -> Verdict {
    if child.zombie {
        let ours = known == Known::Shim || (known == Known::Unknown && is_own_name(&child.comm));
        return if ours { Verdict::Ours } else { Verdict::Reap };
    }
    if matches!(known, Known::Inherited | Known::Shim) {
        return Verdict::Ours;
    }
    match &child.exe {
        Exe::Is(exe) if *exe != agent.exe => Verdict::Kill,
        Exe::Hidden if agent.dumpable => Verdict::Kill,
        // The agent's executable; or not known, ended meanwhile: a zombie in the next round.
        _ => Verdict::Ours,
    }
}

/// One `/proc/<pid>/stat` line: `pid (comm) state ppid ...`, the name between the first `(`
/// and the last `)` (a name may hold either).
#[derive(Debug, Clone, PartialEq, Eq)]
struct Stat {
    comm: String,
    state: char,
    ppid: i32,
    start: u64,
}

fn parse_stat(stat: &str) -> Option<Stat> {
    let (head, rest) = stat.rsplit_once(')')?;
    let (_, comm) = head.split_once('(')?;
    let mut fields = rest.split_whitespace();
    let state = fields.next()?.chars().next()?;
    let ppid = fields.next()?.parse().ok()?;
    Some(Stat { comm: comm.to_owned(), state, ppid, start: parse_start_time(stat)? })
}

fn read_stat(pid: Pid) -> Option<Stat> {
    parse_stat(&fs::read_to_string(format!("/proc/{}/stat", pid.as_raw_pid())).ok()?)
}

/// Child `pid` as `/proc` shows it, with its executable unless `shims` knows it for a shim;
/// `None` unless it is still the agent's child after its executable was read, with the same
/// start time: a shim the runtime reaped meanwhile may have left its PID to a stranger.
fn view(pid: Pid, shims: &HashMap<Pid, u64>) -> Option<(ChildView, bool)> {
    let me = getpid().as_raw_pid();
    let before = read_stat(pid)?;
    let zombie = before.state == 'Z';
    let shim = shims.get(&pid) == Some(&before.start);
    let exe = if zombie || shim {
        Exe::Unknown
    } else {
        match fs::read_link(format!("/proc/{}/exe", pid.as_raw_pid())) {
            Ok(exe) => Exe::Is(undeleted(exe)),
            Err(e) if e.kind() == io::ErrorKind::PermissionDenied => Exe::Hidden,
            Err(_) => Exe::Unknown,
        }
    };
    let after = read_stat(pid)?;
    if after.ppid != me || after.start != before.start {
        return None;
    }
    Some((ChildView { zombie, comm: before.comm, start: before.start, exe }, shim))
}

/// An executable's path without the ` (deleted)` the kernel adds once the file is gone: the
/// agent's binary replaced while it runs (an upgrade) is still the shims' binary, whichever of
/// the agent's and a shim's links was read first.
fn undeleted(path: PathBuf) -> PathBuf {
    use std::os::unix::ffi::OsStrExt as _;
    let bytes = path.as_os_str().as_bytes();
    match bytes.strip_suffix(b" (deleted)") {
        Some(kept) => PathBuf::from(std::ffi::OsStr::from_bytes(kept)),
        None => path,
    }
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
    agent: Agent,
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
    /// Killed, not reaped yet (by PID and start time).
    killed: HashMap<Pid, u64>,
}

impl OrphanReaper {
    /// Makes the agent a child subreaper; `shim` is the path the agent starts its shims by.
    pub fn adopt_orphans(shim: &Path) -> io::Result<Self> {
        let exe = undeleted(fs::read_link("/proc/self/exe")?);
        let dumpable = dumpable_behavior().is_ok_and(|d| d == DumpableBehavior::Dumpable);
        set_child_subreaper(Some(getpid()))?;
        let memory = Memory { inherited: children().into_iter().collect(), ..Memory::default() };
        Ok(Self { agent: Agent { exe, dumpable }, shim_comm: comm_of(shim), memory: Mutex::new(memory) })
    }

    /// Sweeps after each SIGCHLD (at most once a second) and every 5 s, on the blocking pool,
    /// for the agent's whole life. Call from within the agent's runtime. When it cannot, the
    /// agent stops being a subreaper: its orphans go to init again, which reaps them.
    pub fn start(self: Arc<Self>) -> io::Result<()> {
        let mut ended = match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::child()) {
            Ok(ended) => ended,
            Err(error) => {
                let _ = set_child_subreaper(None);
                return Err(error);
            }
        };
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

    /// Kills every orphan and reaps it, round after round until a round finds nothing to do
    /// (or for 1 s at most; the next sweep goes on); returns how many were killed. Blocks for
    /// as long as that takes, and while another sweep runs.
    pub fn sweep(&self) -> usize {
        self.sweep_with(self.memory.lock().unwrap_or_else(PoisonError::into_inner))
    }

    /// [`Self::sweep`], unless another sweep is running: for a path that must not wait (the
    /// forced exit).
    pub fn sweep_unless_busy(&self) -> usize {
        match self.memory.try_lock() {
            Ok(memory) => self.sweep_with(memory),
            Err(TryLockError::Poisoned(poisoned)) => self.sweep_with(poisoned.into_inner()),
            Err(TryLockError::WouldBlock) => 0,
        }
    }

    // Real time: a sweep runs on a blocking thread (or at exit) against real processes, never
    // under a test's paused clock.
    #[allow(clippy::disallowed_methods)]
    fn sweep_with(&self, mut memory: MutexGuard<'_, Memory>) -> usize {
        let Memory { inherited, shims, killed } = &mut *memory;
        let deadline = Instant::now() + SWEEP_BUDGET;
        let mut count = 0;
        loop {
            // Read only when a zombie needs it, and again each round: a thread started meanwhile
            // names the children it forks.
            let mut names: Option<BTreeSet<String>> = None;
            let mut seen_shims = HashMap::new();
            let mut acted = false;
            for pid in children() {
                let Some((child, shim)) = view(pid, shims) else { continue };
                let known = if killed.get(&pid) == Some(&child.start) {
                    Known::Killed
                } else if inherited.contains(&pid) {
                    Known::Inherited
                } else if shim {
                    Known::Shim
                } else {
                    Known::Unknown
                };
                let is_own_name = |comm: &str| names.get_or_insert_with(|| self.own_names()).contains(comm);
                match judge(&child, &self.agent, known, is_own_name) {
                    Verdict::Ours => {
                        if shim || child.exe == Exe::Is(self.agent.exe.clone()) {
                            seen_shims.insert(pid, child.start);
                        }
                    }
                    Verdict::Kill => {
                        acted = true;
                        // Still our child (checked after its executable was read), and no one
                        // else reaps a child that is not a shim: its PID names it until reaped.
                        if kill_process(pid, Signal::KILL).is_ok()
                            && killed.insert(pid, child.start).is_none()
                        {
                            count += 1;
                        }
                    }
                    Verdict::Reap => {
                        acted = true;
                        let _ = kill_process(pid, Signal::KILL);
                        // Reaped, its PID may name a new child: forgotten.
                        if let Ok(Some(_)) = waitpid(Some(pid), WaitOptions::NOHANG) {
                            killed.remove(&pid);
                            inherited.remove(&pid);
                        }
                    }
                }
            }
            *shims = seen_shims;
            // A round that did something is followed by one more: a killed orphan's own
            // children re-parent to the agent as it dies.
            if (!acted && killed.is_empty()) || Instant::now() >= deadline {
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

    fn agent() -> Agent {
        Agent { exe: PathBuf::from("/usr/bin/probelet"), dumpable: true }
    }

    fn is(path: &str) -> Exe {
        Exe::Is(PathBuf::from(path))
    }

    fn own_name(comm: &str) -> bool {
        ["probelet", "exe", "actix-rt|system"].contains(&comm)
    }

    fn live(comm: &str, exe: Exe) -> ChildView {
        ChildView { zombie: false, comm: comm.to_owned(), start: 7, exe }
    }

    fn zombie(comm: &str) -> ChildView {
        ChildView { zombie: true, comm: comm.to_owned(), start: 7, exe: Exe::Unknown }
    }

    #[test]
    fn a_live_child_running_another_executable_is_killed() {
        assert_eq!(
            judge(&live("sleep", is("/bin/sleep")), &agent(), Known::Unknown, own_name),
            Verdict::Kill
        );
        // Named like a shim, running something else: still an orphan.
        assert_eq!(judge(&live("exe", is("/bin/sleep")), &agent(), Known::Unknown, own_name), Verdict::Kill);
    }

    #[test]
    fn the_agents_binary_replaced_while_it_runs_is_still_the_shims() {
        let read = undeleted(PathBuf::from("/usr/bin/probelet (deleted)"));
        assert_eq!(read, PathBuf::from("/usr/bin/probelet"));
        assert_eq!(judge(&live("exe", Exe::Is(read)), &agent(), Known::Unknown, own_name), Verdict::Ours);
        assert_eq!(undeleted(PathBuf::from("/bin/sleep")), PathBuf::from("/bin/sleep"));
    }

    #[test]
    fn a_child_that_hides_its_executable_is_killed_when_shims_cannot() {
        // `PR_SET_DUMPABLE 0` (ssh-agent does it) or a set-user-ID program.
        assert_eq!(judge(&live("ssh-agent", Exe::Hidden), &agent(), Known::Unknown, own_name), Verdict::Kill);
        // An agent that is not dumpable itself cannot read its own shims either.
        let undumpable = Agent { dumpable: false, ..agent() };
        assert_eq!(judge(&live("exe", Exe::Hidden), &undumpable, Known::Unknown, own_name), Verdict::Ours);
    }

    #[test]
    fn a_shim_is_left_alone_whatever_its_name() {
        let shim = || is("/usr/bin/probelet");
        assert_eq!(judge(&live("exe", shim()), &agent(), Known::Unknown, own_name), Verdict::Ours);
        // Between fork and exec, named after the forking thread.
        assert_eq!(
            judge(&live("actix-rt|system", shim()), &agent(), Known::Unknown, own_name),
            Verdict::Ours
        );
        // Not known: ended meanwhile, judged again as a zombie.
        assert_eq!(judge(&live("sleep", Exe::Unknown), &agent(), Known::Unknown, own_name), Verdict::Ours);
    }

    #[test]
    fn only_zombies_no_shim_can_be_are_reaped() {
        assert_eq!(judge(&zombie("sleep"), &agent(), Known::Unknown, own_name), Verdict::Reap);
        // The runtime waits for a shim's zombie: reaping it here would take its exit status.
        assert_eq!(judge(&zombie("exe"), &agent(), Known::Unknown, own_name), Verdict::Ours);
        assert_eq!(judge(&zombie("actix-rt|system"), &agent(), Known::Unknown, own_name), Verdict::Ours);
        // Killed by a sweep: reaped whatever its name.
        assert_eq!(judge(&zombie("exe"), &agent(), Known::Killed, own_name), Verdict::Reap);
        // A shim seen before, whatever the name of its zombie.
        assert_eq!(judge(&zombie("renamed"), &agent(), Known::Shim, own_name), Verdict::Ours);
        assert_eq!(judge(&live("renamed", Exe::Unknown), &agent(), Known::Shim, own_name), Verdict::Ours);
    }

    #[test]
    fn a_child_the_agent_inherited_is_never_killed_and_reaped_once_it_ends() {
        assert_eq!(
            judge(&live("tail", is("/usr/bin/tail")), &agent(), Known::Inherited, own_name),
            Verdict::Ours
        );
        assert_eq!(judge(&zombie("exe"), &agent(), Known::Inherited, own_name), Verdict::Reap);
    }

    #[test]
    fn stat_lines_with_odd_names_parse() {
        let tail = "1 42 42 0 -1 4194560 0 0 0 0 0 0 0 0 20 0 1 0 123456 2256896 160";
        let stat = |comm: &str, state| Some(Stat { comm: comm.to_owned(), state, ppid: 1, start: 123456 });
        assert_eq!(parse_stat(&format!("42 (sleep) S {tail}")), stat("sleep", 'S'));
        assert_eq!(parse_stat(&format!("42 (a) (b) Z {tail}")), stat("a) (b", 'Z'));
        assert_eq!(parse_stat(&format!("42 () R {tail}")), stat("", 'R'));
        assert_eq!(parse_stat("42 (sleep) S 1"), None);
        assert_eq!(parse_stat("garbage"), None);
    }

    #[test]
    fn this_process_is_read_as_it_is() {
        let me = read_stat(getpid()).expect("own stat");
        assert_eq!(me.ppid, rustix::process::getppid().map_or(0, Pid::as_raw_pid));
        assert!(me.start > 0);
        // The main thread's state: running, or sleeping while the test threads run.
        assert!(matches!(me.state, 'R' | 'S'), "{me:?}");
    }

    #[test]
    fn a_shims_name_is_its_paths_last_component_cut_to_15_bytes() {
        assert_eq!(comm_of(Path::new("/proc/self/exe")), "exe");
        assert_eq!(comm_of(Path::new("/usr/bin/probelet-with-a-long-name")), "probelet-with-a");
        assert_eq!(comm_of(Path::new("/x/ééééééééé")), "ééééééé");
    }
}
