//! The record of the children this process spawned itself, so that they can be told apart from
//! the orphans that re-parent to it. The standalone agent is a child subreaper (its
//! `host::runtime::orphans` module, docs/reliability.md): every orphan of a process below it
//! becomes its child, and the orphans' executables say nothing about them (a container can run
//! the agent's own binary). A child is the agent's own if and only if it was started through
//! [`spawn`]: the record names it by PID and the latest start time it can have (the boot clock
//! read once the spawn returned, in the clock ticks `/proc/<pid>/stat` counts). A PID is reused,
//! but only once its child was reaped, after the spawn returned: any later holder of the PID
//! started later than that. Reading the clock needs no file descriptor, unlike reading the
//! child's own start time, so a spawn records its child even when none is left.
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
//! Spawns wait for as long as a [`Settled`] lives: it is held only to decide about one process,
//! and to prune.
//!
//! **An entry is forgotten only on evidence** that its child is gone: `/proc/<pid>` not there
//! (reaped), or naming another process (started later, another parent). A child that cannot be
//! read for another reason (no file descriptor left) stays recorded: forgetting a live shim would
//! have the next sweep kill it.

use std::collections::{BTreeMap, BTreeSet};
use std::io;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Mutex, MutexGuard, PoisonError, RwLock, RwLockWriteGuard, TryLockError};
use std::time::{Duration, Instant};

use rustix::process::{Pid, getpid};

use crate::process::ProcessStat;

/// This process's record: a process has one set of children.
static RECORD: Record =
    Record { on: AtomicBool::new(false), gate: RwLock::new(()), children: Mutex::new(BTreeMap::new()) };

struct Record {
    on: AtomicBool,
    /// Shared by spawns under way, exclusive for [`Settled`].
    gate: RwLock<()>,
    /// PID → the latest start time its child can have ([`ticks_since_boot`] once the spawn
    /// returned).
    children: Mutex<BTreeMap<i32, u64>>,
}

impl Record {
    fn children(&self) -> MutexGuard<'_, BTreeMap<i32, u64>> {
        self.children.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn has(&self, pid: Pid, start: u64) -> bool {
        self.children().get(&pid.as_raw_pid()).is_some_and(|&latest| start <= latest)
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
        // One tick more: whatever the two clocks' rounding, the child started no later.
        RECORD.children().insert(pid, ticks_since_boot() + 1);
    }
    Ok(child)
}

/// Now on the clock `/proc/<pid>/stat` gives start times by: clock ticks since boot
/// (`CLOCK_BOOTTIME`, which a time namespace offsets for both alike).
fn ticks_since_boot() -> u64 {
    let now = rustix::time::clock_gettime(rustix::time::ClockId::Boottime);
    let hz = rustix::param::clock_ticks_per_second();
    let (secs, nanos) = (u64::try_from(now.tv_sec).unwrap_or(0), u64::try_from(now.tv_nsec).unwrap_or(0));
    secs.saturating_mul(hz).saturating_add(nanos.saturating_mul(hz) / 1_000_000_000)
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
    /// missing from the list (a list cut short by an error) is looked at on its own.
    pub fn forget_reaped(&self, children: &[Pid]) {
        let me = getpid().as_raw_pid();
        let listed: BTreeSet<i32> = children.iter().map(|child| child.as_raw_pid()).collect();
        RECORD.children().retain(|&pid, &mut latest| {
            if listed.contains(&pid) {
                return true;
            }
            let Some(pid) = Pid::from_raw(pid) else { return false };
            match ProcessStat::read(pid) {
                Err(error) => error.kind() != io::ErrorKind::NotFound,
                Ok(now) => now.ppid == me && now.start <= latest,
            }
        });
    }
}

#[cfg(test)]
mod tests {
    use std::sync::mpsc;

    use rustix::process::{WaitId, WaitIdOptions, waitid};

    use super::*;
    use crate::process::{children, start_time};

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
        // The same PID, started after the spawn returned, is another process.
        assert!(!is_spawned(pid, u64::MAX));
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
    fn the_latest_start_time_recorded_is_on_the_clock_proc_counts_by() {
        record_spawned_children();
        let mut child = spawn_with(|| sleeper().spawn(), |c| Some(c.id())).expect("spawn");
        let start = start_time(child.id()).expect("start time");
        let latest = *RECORD.children().get(&pid_of(&child).as_raw_pid()).expect("recorded");
        // No earlier than the child started, and not a second later (the spawn took less).
        assert!(start <= latest, "started at {start}, recorded as at most {latest}");
        assert!(latest - start <= rustix::param::clock_ticks_per_second(), "{start} against {latest}");
        child.kill().expect("kill");
        child.wait().expect("reap");
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
