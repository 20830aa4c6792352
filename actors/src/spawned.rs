//! The record of the children this process spawned itself, so that they can be told apart from
//! the orphans that re-parent to it. The standalone agent is a child subreaper (its
//! `host::runtime::orphans` module, docs/reliability.md): every orphan of a process below it
//! becomes its child, and the orphans' executables say nothing about them (a container can run
//! the agent's own binary). A child is the agent's own if and only if it was started through
//! [`spawn`]: the record names it by PID and start time, since a PID is reused and the pair is
//! not.
//!
//! The record is kept only once [`record_spawned_children`] turned it on, by a host that prunes
//! it ([`Settled::forget_reaped`]); until then [`spawn`] is a plain spawn.
//!
//! **A child is never seen before it is recorded.** Between a fork and its record a child exists
//! that the record does not name. A spawn holds the record's gate shared from before the fork
//! until the child is recorded; a [`Settled`] holds it exclusively, so while one lives no spawn
//! is under way and every child spawned through [`spawn`] is in the record. It is only ever
//! tried for ([`settled_within`]), never waited for: a waiting writer would hold every new spawn
//! off behind one that hangs (an `exec` on a hung mount), and a forced exit must not wait at all.
//! Spawns wait for as long as a [`Settled`] lives: it is held only to decide about one process.
//!
//! **An entry is forgotten only on evidence** that its child is gone: `/proc/<pid>` not there
//! (reaped), or naming another process (another start time, another parent). A child that
//! cannot be read for another reason (no file descriptor left) stays recorded: forgetting a live
//! shim would have the next sweep kill it.

use std::collections::{BTreeMap, BTreeSet};
use std::io;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Mutex, MutexGuard, PoisonError, RwLock, RwLockWriteGuard, TryLockError};
use std::time::{Duration, Instant};

use rustix::process::{Pid, getpid};

use crate::process::{ProcessStat, start_time};

/// This process's record: a process has one set of children.
static RECORD: Record =
    Record { on: AtomicBool::new(false), gate: RwLock::new(()), children: Mutex::new(BTreeMap::new()) };

struct Record {
    on: AtomicBool,
    /// Shared by spawns under way, exclusive for [`Settled`].
    gate: RwLock<()>,
    /// PID → start time. `None`: not readable when the child was spawned (no file descriptor
    /// left), so the PID alone names it until it is forgotten.
    children: Mutex<BTreeMap<i32, Option<u64>>>,
}

impl Record {
    fn children(&self) -> MutexGuard<'_, BTreeMap<i32, Option<u64>>> {
        self.children.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn has(&self, pid: Pid, start: u64) -> bool {
        self.children().get(&pid.as_raw_pid()).is_some_and(|recorded| recorded.is_none_or(|s| s == start))
    }
}

/// Records every child spawned through [`spawn`] from now on. Call before spawning anything;
/// whoever calls it prunes the record ([`Settled::forget_reaped`]), or it grows by one entry
/// per child for the life of the process.
pub fn record_spawned_children() {
    RECORD.on.store(true, Ordering::SeqCst);
}

/// Spawns `command` and records the child (once [`record_spawned_children`] was called).
pub fn spawn(command: &mut tokio::process::Command) -> io::Result<tokio::process::Child> {
    spawn_with(|| command.spawn(), tokio::process::Child::id)
}

fn spawn_with<C>(
    spawn: impl FnOnce() -> io::Result<C>,
    pid: impl FnOnce(&C) -> Option<u32>,
) -> io::Result<C> {
    if !RECORD.on.load(Ordering::SeqCst) {
        return spawn();
    }
    let _gate = RECORD.gate.read().unwrap_or_else(PoisonError::into_inner);
    let child = spawn()?;
    if let Some(pid) = pid(&child).and_then(|pid| i32::try_from(pid).ok()) {
        // Not reaped yet (its handle is still here): the PID is the child's, zombie or not.
        let start = start_time(pid.unsigned_abs()).ok();
        RECORD.children().insert(pid, start);
    }
    Ok(child)
}

/// Whether child `pid`, started at `start`, was spawned through [`spawn`]. `true` is final;
/// `false` may be a spawn still under way: ask a [`Settled`] before acting on it.
pub fn is_spawned(pid: Pid, start: u64) -> bool {
    RECORD.has(pid, start)
}

/// A [`Settled`] record, if every spawn under way ends within `wait` (tried every millisecond;
/// `Duration::ZERO`: tried once).
// Real time: called on a blocking thread (or at exit) against real spawns, never under a test's
// paused clock.
#[allow(clippy::disallowed_methods)]
pub fn settled_within(wait: Duration) -> Option<Settled> {
    let deadline = Instant::now() + wait;
    loop {
        match RECORD.gate.try_write() {
            Ok(gate) => return Some(Settled { _gate: gate }),
            Err(TryLockError::Poisoned(poisoned)) => return Some(Settled { _gate: poisoned.into_inner() }),
            Err(TryLockError::WouldBlock) if Instant::now() >= deadline => return None,
            Err(TryLockError::WouldBlock) => std::thread::sleep(Duration::from_millis(1)),
        }
    }
}

/// While it lives, every child spawned through [`spawn`] is recorded: a child of this process
/// that [`Settled::is_spawned`] does not know is none it spawned.
pub struct Settled {
    _gate: RwLockWriteGuard<'static, ()>,
}

impl Settled {
    /// Whether child `pid`, started at `start`, was spawned through [`spawn`].
    pub fn is_spawned(&self, pid: Pid, start: u64) -> bool {
        RECORD.has(pid, start)
    }

    /// Forgets the recorded children that are gone, on evidence only (see the module doc).
    /// `children`, this process's children as listed while `self` lives, need no look: a child
    /// missing from the list (a list cut short by an error) is looked at on its own. A start
    /// time that could not be read at the spawn is filled in.
    pub fn forget_reaped(&self, children: &[Pid]) {
        let me = getpid().as_raw_pid();
        let listed: BTreeSet<i32> = children.iter().map(|child| child.as_raw_pid()).collect();
        RECORD.children().retain(|&pid, recorded| {
            if listed.contains(&pid) && recorded.is_some() {
                return true;
            }
            let Some(pid) = Pid::from_raw(pid) else { return false };
            match ProcessStat::read(pid) {
                Err(error) => error.kind() != io::ErrorKind::NotFound,
                Ok(now) if now.ppid != me || recorded.is_some_and(|start| start != now.start) => false,
                Ok(now) => {
                    *recorded = Some(now.start);
                    true
                }
            }
        });
    }
}

#[cfg(test)]
mod tests {
    use std::sync::mpsc;

    use rustix::process::{WaitId, WaitIdOptions, waitid};

    use super::*;
    use crate::process::children;

    fn sleeper() -> std::process::Command {
        let mut command = std::process::Command::new("sleep");
        command.arg("1000").stdin(std::process::Stdio::null());
        command
    }

    fn pid_of(child: &std::process::Child) -> Pid {
        Pid::from_raw(child.id() as i32).expect("a child's PID")
    }

    /// Other tests of this binary spawn too: a spawn hangs for no one, so this never fails.
    fn settled() -> Settled {
        settled_within(Duration::from_secs(10)).expect("no spawn under way for 10 s")
    }

    #[test]
    fn a_spawned_child_is_known_by_its_pid_and_start_time_until_reaped() {
        record_spawned_children();
        let mut child = spawn_with(|| sleeper().spawn(), |c| Some(c.id())).expect("spawn");
        let pid = pid_of(&child);
        let start = start_time(child.id()).expect("start time");
        assert!(is_spawned(pid, start));
        // The same PID started at another time is another process.
        assert!(!is_spawned(pid, start + 1));
        // A child not spawned through the record.
        let mut stranger = sleeper().spawn().expect("spawn");
        let stranger_start = start_time(stranger.id()).expect("start time");
        assert!(!settled().is_spawned(pid_of(&stranger), stranger_start));
        // Alive, whether listed or not (a listing cut short when no descriptor is left): kept.
        settled().forget_reaped(&children());
        settled().forget_reaped(&[]);
        assert!(is_spawned(pid, start));
        // Exited and not reaped: its zombie is still the spawner's to wait for.
        child.kill().expect("kill");
        waitid(WaitId::Pid(pid), WaitIdOptions::EXITED | WaitIdOptions::NOWAIT).expect("exited");
        settled().forget_reaped(&[]);
        assert!(is_spawned(pid, start));
        // Reaped: forgotten.
        child.wait().expect("reap");
        settled().forget_reaped(&children());
        assert!(!is_spawned(pid, start));
        stranger.kill().expect("kill");
        stranger.wait().expect("reap");
    }

    #[test]
    fn a_start_time_not_read_at_the_spawn_is_filled_in() {
        record_spawned_children();
        let mut child = sleeper().spawn().expect("spawn");
        let pid = pid_of(&child);
        let start = start_time(child.id()).expect("start time");
        // As a spawn records a child whose `/proc` entry it could not read.
        RECORD.children().insert(pid.as_raw_pid(), None);
        assert!(is_spawned(pid, start + 1), "the PID alone names it");
        settled().forget_reaped(&children());
        assert!(is_spawned(pid, start));
        assert!(!is_spawned(pid, start + 1), "known by its start time from the first prune on");
        child.kill().expect("kill");
        child.wait().expect("reap");
        settled().forget_reaped(&children());
        assert!(!is_spawned(pid, start));
    }

    #[test]
    fn no_settled_record_while_a_spawned_child_is_not_recorded_yet() {
        record_spawned_children();
        let (forked, paused) = mpsc::channel();
        let (resume, resumed) = mpsc::channel::<()>();
        let spawner = std::thread::spawn(move || {
            spawn_with(
                || {
                    let child = sleeper().spawn();
                    // Forked, not recorded yet: hold the spawn here until the test has looked.
                    let _ = forked.send(child.as_ref().map(|c| c.id()).ok());
                    let _ = resumed.recv();
                    child
                },
                |c| Some(c.id()),
            )
        });
        let pid = paused.recv().expect("spawned").expect("a PID");
        assert!(
            settled_within(Duration::ZERO).is_none(),
            "a spawn under way lets no one see a settled record"
        );
        resume.send(()).expect("resume");
        let mut child = spawner.join().expect("spawner").expect("spawn");
        let start = start_time(pid).expect("start time");
        assert!(settled().is_spawned(Pid::from_raw(pid as i32).expect("PID"), start));
        child.kill().expect("kill");
        child.wait().expect("reap");
    }
}
