//! What a container leaves running when its shim is killed. The container shim kills everything
//! a container started (`docs/reliability.md`, "What leaves a container's process group"), but
//! a container runs as the agent's user and can kill its own shim (`kill -9 $PPID`). The agent
//! then SIGKILLs the container's process group, and a process that had left the group (`setsid`,
//! a double-forked daemon) used to run on with parent PID 1.
//!
//! So the standalone agent is a child subreaper too ([`OrphanReaper::adopt_orphans`]): an orphan
//! of a dead shim re-parents to the agent instead of init, and this module kills and reaps it. A
//! container's runtime upstream kills the container's cgroup, whatever the container killed;
//! a local process has no cgroup, and the agent's children stand in for it here.
//!
//! **Which children are orphans.** Every one the agent did not spawn itself. The agent starts
//! its processes (shims) through [`probelet_actors::spawned`], which records each by PID and
//! start time and lets no one see a child before it is recorded; a child the record does not
//! know is an orphan, whatever it runs (a container can start the agent's own binary, so an
//! executable proves nothing). It is SIGKILLed and reaped. A spawned child, alive or its zombie,
//! is left alone: the runtime waits for it. The children the agent already had when it became a
//! subreaper (started by a script that then `exec`ed the agent) are never killed, only reaped
//! once they end. Every decision is made on a settled record ([`spawned::settled`]) and on what
//! `/proc` shows of the child right then: still the agent's child, with the same start time. No
//! one but this module reaps a child the agent did not spawn, so its PID names it until then.
//!
//! Whatever else re-parents to the agent is taken for a container's: what those inherited children
//! leave behind when they daemonize, and, for an agent that runs as its container's PID 1, what an
//! `exec` session into that container leaves running in the background (as PID 1 it never reaped
//! those before, either).
//!
//! **When.** After each SIGCHLD (a shim, or an orphan, ended), at most once per [`SETTLE`] (exec
//! probes end shims all the time), every [`SWEEP_PERIOD`] in any case, and once more when the agent
//! stops. A sweep reads one `/proc/<pid>/stat` per child. It goes round until a round finds nothing
//! to do (a round that killed or reaped is followed by another: killing an orphan re-parents that
//! orphan's own children to the agent), for at most 1 s; what is left waits for the next sweep.
//! The forced exit's sweep does not wait for one that is running. Each sweep forgets the reaped
//! children from the record.

use std::collections::{HashMap, HashSet};
use std::fs;
use std::io;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError, TryLockError};
use std::time::{Duration, Instant};

use probelet_actors::process::{children, parse_start_time};
use probelet_actors::spawned;
use rustix::process::{Pid, Signal, WaitOptions, getpid, kill_process, set_child_subreaper, waitpid};

/// The shortest time between two sweeps started by SIGCHLD.
pub const SETTLE: Duration = Duration::from_secs(1);
/// How often the agent sweeps when no child ended.
pub const SWEEP_PERIOD: Duration = Duration::from_secs(5);
/// How long one sweep may go on; what it has not finished, the next one does.
const SWEEP_BUDGET: Duration = Duration::from_secs(1);
/// The pause between two rounds of a sweep (a round lists the children once).
const ROUND_PAUSE: Duration = Duration::from_millis(5);

/// What to do with one child.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Verdict {
    /// Left alone.
    Ours,
    Kill,
    /// SIGKILL (a zombie whose other threads still run is not reapable until they die), then
    /// reap.
    Reap,
}

/// What the agent knows of a child besides what `/proc` shows.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Known {
    /// Nothing: an orphan.
    Unknown,
    /// Spawned by the agent ([`spawned`]).
    Spawned,
    /// SIGKILLed by a sweep, not reaped yet.
    Killed,
    /// A child the agent had before it became a subreaper (a process its parent started before
    /// `exec`ing the agent): never killed; reaped once it ends, as nothing else waits for it.
    Inherited,
}

fn judge(zombie: bool, known: Known) -> Verdict {
    match (known, zombie) {
        // The runtime waits for it, zombie or not: reaping it here would take its exit status.
        (Known::Spawned, _) | (Known::Inherited, false) => Verdict::Ours,
        (Known::Unknown | Known::Killed | Known::Inherited, true) => Verdict::Reap,
        (Known::Unknown | Known::Killed, false) => Verdict::Kill,
    }
}

/// One `/proc/<pid>/stat` line: `pid (comm) state ppid ...`, fields counted from the last `)`
/// (a name may hold either parenthesis).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Stat {
    zombie: bool,
    ppid: i32,
    start: u64,
}

fn parse_stat(stat: &str) -> Option<Stat> {
    let (_, rest) = stat.rsplit_once(')')?;
    let mut fields = rest.split_whitespace();
    let zombie = fields.next()? == "Z";
    let ppid = fields.next()?.parse().ok()?;
    Some(Stat { zombie, ppid, start: parse_start_time(stat)? })
}

fn read_stat(pid: Pid) -> Option<Stat> {
    parse_stat(&fs::read_to_string(format!("/proc/{}/stat", pid.as_raw_pid())).ok()?)
}

/// Kills and reaps the orphans of dead shims; see the module doc.
#[derive(Debug)]
pub struct OrphanReaper {
    /// What one sweep leaves the next; locked for a whole sweep, so sweeps take turns.
    memory: Mutex<Memory>,
}

#[derive(Debug, Default)]
struct Memory {
    /// The children the agent had before it became a subreaper and has not reaped yet.
    inherited: HashSet<Pid>,
    /// Killed, not reaped yet (by PID and start time).
    killed: HashMap<Pid, u64>,
}

impl OrphanReaper {
    /// Makes the agent a child subreaper and records the children it spawns from now on
    /// ([`spawned::record_spawned_children`]). Call before the agent spawns anything.
    pub fn adopt_orphans() -> io::Result<Self> {
        set_child_subreaper(Some(getpid()))?;
        spawned::record_spawned_children();
        let memory = Memory { inherited: children().into_iter().collect(), ..Memory::default() };
        Ok(Self { memory: Mutex::new(memory) })
    }

    /// Sweeps after each SIGCHLD (at most once a second) and every 5 s, on the blocking pool,
    /// for the agent's whole life; only every 5 s when SIGCHLD cannot be listened to (no file
    /// descriptor left). Call from within the agent's runtime.
    pub fn start(self: Arc<Self>) {
        let mut ended = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::child())
            .inspect_err(|error| {
                tracing::warn!(%error, "cannot watch for ended children: orphans are looked for every 5s only");
            })
            .ok();
        tokio::spawn(async move {
            let mut period = tokio::time::interval(SWEEP_PERIOD);
            loop {
                tokio::select! {
                    Some(()) = async { ended.as_mut()?.recv().await } => {}
                    _ = period.tick() => {}
                }
                let reaper = self.clone();
                // A panic is the blocking task's; the next sweep tries again.
                let _ = tokio::task::spawn_blocking(move || reaper.sweep()).await;
                tokio::time::sleep(SETTLE).await;
            }
        });
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
        let Memory { inherited, killed } = &mut *memory;
        let me = getpid().as_raw_pid();
        let deadline = Instant::now() + SWEEP_BUDGET;
        let mut count = 0;
        loop {
            let mut acted = false;
            for pid in children() {
                let Some(stat) = read_stat(pid) else { continue };
                // Without waiting on spawns: almost every child is a shim, known at once.
                if stat.ppid != me || spawned::is_spawned(pid, stat.start) {
                    continue;
                }
                // Decided with no spawn under way, on what the child is now.
                let settled = spawned::settled();
                let Some(now) = read_stat(pid).filter(|now| now.ppid == me && now.start == stat.start) else {
                    continue;
                };
                let known = if settled.is_spawned(pid, now.start) {
                    Known::Spawned
                } else if killed.get(&pid) == Some(&now.start) {
                    Known::Killed
                } else if inherited.contains(&pid) {
                    Known::Inherited
                } else {
                    Known::Unknown
                };
                match judge(now.zombie, known) {
                    Verdict::Ours => {}
                    Verdict::Kill => {
                        acted = true;
                        if kill_process(pid, Signal::KILL).is_ok() && killed.insert(pid, now.start).is_none()
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
            // A round that did something is followed by one more: a killed orphan's own
            // children re-parent to the agent as it dies.
            if (!acted && killed.is_empty()) || Instant::now() >= deadline {
                break;
            }
            std::thread::sleep(ROUND_PAUSE);
        }
        // Listed while no spawn is under way, so a child spawned a moment ago is kept.
        let settled = spawned::settled();
        settled.forget_all_but(&children());
        drop(settled);
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

    #[test]
    fn a_child_the_agent_did_not_spawn_is_killed_and_reaped() {
        // Whatever it runs, the agent's own binary included: nothing but the record tells.
        assert_eq!(judge(false, Known::Unknown), Verdict::Kill);
        assert_eq!(judge(true, Known::Unknown), Verdict::Reap);
        // Killed by an earlier round and still dying: killed again (uncounted), reaped once gone.
        assert_eq!(judge(false, Known::Killed), Verdict::Kill);
        assert_eq!(judge(true, Known::Killed), Verdict::Reap);
    }

    #[test]
    fn a_spawned_child_is_left_alone_even_as_a_zombie() {
        // The runtime waits for it: reaping it here would take its exit status.
        assert_eq!(judge(false, Known::Spawned), Verdict::Ours);
        assert_eq!(judge(true, Known::Spawned), Verdict::Ours);
    }

    #[test]
    fn a_child_the_agent_inherited_is_never_killed_and_reaped_once_it_ends() {
        assert_eq!(judge(false, Known::Inherited), Verdict::Ours);
        assert_eq!(judge(true, Known::Inherited), Verdict::Reap);
    }

    #[test]
    fn stat_lines_with_odd_names_parse() {
        let tail = "1 42 42 0 -1 4194560 0 0 0 0 0 0 0 0 20 0 1 0 123456 2256896 160";
        let stat = |zombie| Some(Stat { zombie, ppid: 1, start: 123456 });
        assert_eq!(parse_stat(&format!("42 (sleep) S {tail}")), stat(false));
        assert_eq!(parse_stat(&format!("42 (a) (b) Z {tail}")), stat(true));
        assert_eq!(parse_stat(&format!("42 () R {tail}")), stat(false));
        assert_eq!(parse_stat("42 (sleep) S 1"), None);
        assert_eq!(parse_stat("garbage"), None);
    }

    #[test]
    fn this_process_is_read_as_it_is() {
        let me = read_stat(getpid()).expect("own stat");
        assert_eq!(me.ppid, rustix::process::getppid().map_or(0, Pid::as_raw_pid));
        assert!(me.start > 0);
        assert!(!me.zombie);
    }
}
