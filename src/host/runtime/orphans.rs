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
//! once they end. Every decision is made on a settled record ([`spawned::settled_within`]) and
//! on what `/proc` shows of the child right then: still the agent's child, with the same start
//! time. No one but this module reaps a child the agent did not spawn, so its PID names it until
//! then.
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
//! orphan's own children to the agent), for about 1 s at most (the prune may wait 50 ms more);
//! what is left waits for the next sweep.
//! A decision waits for the spawns under way only within that budget, and the forced exit's sweep
//! waits for nothing: neither for a sweep that is running nor for a spawn. A spawn that hangs
//! (an `exec` on a hung mount) holds every decision and the prune off for as long as it hangs;
//! the sweep says so, once a minute at most. Each sweep forgets the
//! children that are gone from the record ([`spawned::Settled::forget_reaped`]).

use std::collections::{HashMap, HashSet};
use std::io;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError, TryLockError};
use std::time::{Duration, Instant};

use probelet_actors::process::{ProcessStat, children};
use probelet_actors::spawned;
use rustix::process::{Pid, Signal, WaitOptions, getpid, kill_process, set_child_subreaper, waitpid};

/// The shortest time between two sweeps started by SIGCHLD.
pub const SETTLE: Duration = Duration::from_secs(1);
/// How often the agent sweeps when no child ended.
pub const SWEEP_PERIOD: Duration = Duration::from_secs(5);
/// How long one sweep may go on; what it has not finished, the next one does.
const SWEEP_BUDGET: Duration = Duration::from_secs(1);
/// How long the prune at the end of a sweep may wait for the spawns under way, even when the
/// sweep used its budget up.
const PRUNE_WAIT: Duration = Duration::from_millis(50);
/// How often a sweep held off by a spawn that does not end says so, at most.
const STALL_TOLD_EVERY: Duration = Duration::from_secs(60);
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

/// Whether a sweep says that a spawn held it off: one that waits for spawns (not the forced exit's)
/// and left a child undecided or the record unpruned, unless it was said less than a minute ago.
fn stall_to_tell(patient: bool, undecided: usize, pruned: bool, told: Option<Instant>, now: Instant) -> bool {
    patient
        && (undecided > 0 || !pruned)
        && told.is_none_or(|told| now.saturating_duration_since(told) >= STALL_TOLD_EVERY)
}

/// Runs `f` on a thread of its own and resolves when it ends (`None` if it panicked). Unlike
/// tokio's `spawn_blocking`, which panics when it needs a new thread and the system cannot make
/// one (a pids cgroup or RLIMIT_NPROC full) while none of its pool is alive, that is an error
/// here. The panic ended every sweep for the agent's life when it hit the sweeps' task.
fn on_own_thread<R: Send + 'static>(
    name: &str,
    f: impl FnOnce() -> R + Send + 'static,
) -> io::Result<impl Future<Output = Option<R>>> {
    let (done, result) = tokio::sync::oneshot::channel();
    std::thread::Builder::new().name(name.to_owned()).spawn(move || {
        let _ = done.send(f());
    })?;
    Ok(async move { result.await.ok() })
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
    /// When a sweep last said that a spawn kept it from deciding (said at most once a minute).
    stalled_told: Option<Instant>,
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

    /// Sweeps after each SIGCHLD (at most once a second) and every 5 s, each on a thread of its own,
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
            // Said once per run of sweeps that could not start, not every second.
            let mut cannot_sweep_told = false;
            loop {
                tokio::select! {
                    Some(()) = async { ended.as_mut()?.recv().await } => {}
                    _ = period.tick() => {}
                }
                let reaper = self.clone();
                // A panic is the sweep thread's; the next sweep tries again. So is a thread that
                // cannot be made: the next sweep tries again too.
                match on_own_thread("orphan-sweep", move || reaper.sweep()) {
                    Ok(swept) => {
                        swept.await;
                        cannot_sweep_told = false;
                    }
                    Err(error) => {
                        if !cannot_sweep_told {
                            tracing::warn!(%error, "cannot start a thread to look for orphans; retrying");
                        }
                        cannot_sweep_told = true;
                    }
                }
                tokio::time::sleep(SETTLE).await;
            }
        });
    }

    /// Kills every orphan and reaps it, round after round until a round finds nothing to do
    /// (or for 1 s at most; the next sweep goes on); returns how many were killed. Blocks for
    /// as long as that takes, and while another sweep runs.
    pub fn sweep(&self) -> usize {
        self.sweep_with(self.memory.lock().unwrap_or_else(PoisonError::into_inner), true)
    }

    /// [`Self::sweep`], unless another sweep is running, and leaving what it cannot decide
    /// without waiting for a spawn under way: for a path that must not wait (the forced exit).
    pub fn sweep_unless_busy(&self) -> usize {
        match self.memory.try_lock() {
            Ok(memory) => self.sweep_with(memory, false),
            Err(TryLockError::Poisoned(poisoned)) => self.sweep_with(poisoned.into_inner(), false),
            Err(TryLockError::WouldBlock) => 0,
        }
    }

    // Real time: a sweep runs on a blocking thread (or at exit) against real processes, never
    // under a test's paused clock.
    #[allow(clippy::disallowed_methods)]
    fn sweep_with(&self, mut memory: MutexGuard<'_, Memory>, patient: bool) -> usize {
        let Memory { inherited, killed, stalled_told } = &mut *memory;
        let me = getpid().as_raw_pid();
        let deadline = Instant::now() + SWEEP_BUDGET;
        // How long a decision may wait for the spawns under way (never, on the forced exit).
        let wait =
            || if patient { deadline.saturating_duration_since(Instant::now()) } else { Duration::ZERO };
        let mut count = 0;
        // Of the last round: what an earlier round left may have been decided since.
        let mut undecided;
        loop {
            let mut acted = false;
            undecided = 0;
            for pid in children() {
                let Ok(stat) = ProcessStat::read(pid) else { continue };
                // Without waiting on spawns: almost every child is a shim, known at once.
                if stat.ppid != me || spawned::is_spawned(pid, stat.start) {
                    continue;
                }
                // Decided with no spawn under way, on what the child is now; or left for the
                // next sweep.
                let Some(settled) = spawned::settled_within(wait()) else {
                    undecided += 1;
                    continue;
                };
                let Ok(now) = ProcessStat::read(pid) else { continue };
                if now.ppid != me || now.start != stat.start {
                    continue;
                }
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
        let prune_wait = if patient { wait().max(PRUNE_WAIT) } else { Duration::ZERO };
        let pruned = spawned::settled_within(prune_wait).map(|settled| settled.forget_reaped(&children()));
        // A spawn that hangs (an `exec` on a hung mount) holds every decision off while it does.
        if stall_to_tell(patient, undecided, pruned.is_some(), *stalled_told, Instant::now()) {
            *stalled_told = Some(Instant::now());
            tracing::warn!(
                undecided,
                "a process spawn that does not end keeps the orphan sweep from deciding; retrying"
            );
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
    // std's clock: the rule is given instants, no clock is read but to make some.
    #[allow(clippy::disallowed_methods)]
    fn a_sweep_held_off_by_a_spawn_says_so_once_a_minute() {
        let now = Instant::now();
        let a_minute_ago = now.checked_sub(STALL_TOLD_EVERY);
        assert!(stall_to_tell(true, 1, true, None, now));
        assert!(stall_to_tell(true, 0, false, None, now), "the prune was held off");
        assert!(!stall_to_tell(true, 0, true, None, now), "nothing was held off");
        assert!(!stall_to_tell(false, 3, false, None, now), "the forced exit never waits anyway");
        assert!(!stall_to_tell(true, 1, true, Some(now), now), "said just now");
        assert_eq!(stall_to_tell(true, 1, true, a_minute_ago, now), a_minute_ago.is_some());
    }

    #[test]
    fn a_child_the_agent_inherited_is_never_killed_and_reaped_once_it_ends() {
        assert_eq!(judge(false, Known::Inherited), Verdict::Ours);
        assert_eq!(judge(true, Known::Inherited), Verdict::Reap);
    }
}
