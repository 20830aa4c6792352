//! Whether a container that died of SIGKILL was killed by the kernel's OOM killer, so that its
//! terminated state says `OOMKilled` as upstream's does (docs/reliability.md, "No process to
//! spare", memory).
//!
//! Upstream, containerd learns of an OOM kill from the container's own cgroup. Here the
//! containers share the agent's cgroup, so the runtime reads the kernel's count of OOM kills
//! instead (`oom_kill` in `/proc/vmstat`, node-wide; or a cgroup's `memory.events`, which has
//! the same line, for a host that gives its containers one) once a second while it has pods,
//! and at a container's death by a SIGKILL the agent did not send. A kill counted since the
//! newest reading taken at least a second before the death (one to two seconds back, more if
//! the runtime's thread was held up) and not yet put down to another container is put down to
//! this one: the OOM killer's SIGKILL reaches the agent within milliseconds, through the shim.
//!
//! Upstream says `OOMKilled` whenever the container's cgroup saw an OOM kill, even while the
//! kubelet was stopping it; here a death the runtime caused itself (a liveness kill, a stop
//! past its grace period) stays `Error`, since the count is the node's and the kill is known
//! to be the runtime's. A container whose shell stays its main process reads `Error` when the
//! OOM killer kills a child (exit code 137 without a signal), where upstream says `OOMKilled`. What it
//! cannot tell: a container killed with `kill -9` by hand in the same second as the kernel
//! OOM-killed some other process on the node reads `OOMKilled` too. A counter that cannot be
//! read (no `/proc`, a kernel before 4.13) leaves every such death `Error`, as before.

use std::collections::VecDeque;
use std::path::{Path, PathBuf};
use std::time::Duration;

use tokio::time::Instant;

/// The kernel's count of OOM kills since boot, for the whole node.
pub(super) const VMSTAT: &str = "/proc/vmstat";

/// How often the count is read while the runtime has pods.
pub(super) const READING_EVERY: Duration = Duration::from_secs(1);

/// A death is compared with the newest reading at least this much older than it: older than
/// the kill, which comes milliseconds before its death reaches the runtime, whenever in the
/// second between two readings it came.
const WINDOW: Duration = Duration::from_secs(1);

/// Readings kept: enough to find one a window back however late a reading came.
const KEPT: usize = 4;

/// The kernel's OOM kill count, read once a second, and the kills already put down to a
/// container.
#[derive(Debug)]
pub(super) struct OomKills {
    source: PathBuf,
    /// The last few readings and when they were taken, oldest first; the first is the
    /// runtime's start.
    readings: VecDeque<(Instant, Option<u64>)>,
    /// Kills up to this count have been put down to a container.
    attributed: u64,
}

impl OomKills {
    /// Reads the count from `source` (`key value` lines, one of them `oom_kill N`), now and at
    /// each [`OomKills::read`].
    pub(super) fn new(source: impl Into<PathBuf>) -> Self {
        let source = source.into();
        let now = read_count(&source);
        OomKills { source, readings: VecDeque::from([(Instant::now(), now)]), attributed: 0 }
    }

    /// The reading of the second.
    pub(super) fn read(&mut self) {
        let count = read_count(&self.source);
        self.record(Instant::now(), count);
    }

    fn record(&mut self, at: Instant, count: Option<u64>) {
        if self.readings.len() == KEPT {
            self.readings.pop_front();
        }
        self.readings.push_back((at, count));
    }

    /// Whether a container that has just died of a SIGKILL the agent did not send was
    /// OOM-killed: a kill counted since the newest reading a window back that no other death
    /// took.
    pub(super) fn killed_by_oom(&mut self) -> bool {
        let now = read_count(&self.source);
        self.attribute(Instant::now(), now)
    }

    fn attribute(&mut self, at: Instant, now: Option<u64>) -> bool {
        let Some(now) = now else { return false };
        // A count that went down was reset (a cgroup made again): what was put down before
        // does not hold it back.
        if now < self.attributed {
            self.attributed = 0;
        }
        let before = at.checked_sub(WINDOW);
        let base = self
            .readings
            .iter()
            .rev()
            .find(|(taken, _)| before.is_some_and(|before| *taken <= before))
            .or(self.readings.front())
            .and_then(|(_, count)| *count);
        let Some(base) = base else { return false };
        let base = base.max(self.attributed);
        if now > base {
            self.attributed = base + 1;
            return true;
        }
        false
    }
}

/// The `oom_kill` count in `source`, if it can be read.
fn read_count(source: &Path) -> Option<u64> {
    parse_oom_kill(&std::fs::read_to_string(source).ok()?)
}

/// The value of the `oom_kill` line of `/proc/vmstat` or a cgroup's `memory.events`.
fn parse_oom_kill(text: &str) -> Option<u64> {
    text.lines().find_map(|line| line.strip_prefix("oom_kill ")?.trim().parse().ok())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_count_is_read_from_vmstat_and_memory_events() {
        assert_eq!(parse_oom_kill("pgfault 12\noom_kill 3\nnr_dirty 1\n"), Some(3));
        assert_eq!(parse_oom_kill("low 0\nhigh 0\nmax 2\noom 2\noom_kill 1\noom_group_kill 0\n"), Some(1));
        assert_eq!(parse_oom_kill("oom_kill_extra 9\n"), None, "another key");
        assert_eq!(parse_oom_kill("pgfault 12\n"), None, "a kernel without the count");
        assert_eq!(parse_oom_kill("oom_kill many\n"), None);
    }

    /// The count at `from` when the runtime started, at `start`.
    fn counting(from: u64, start: Instant) -> OomKills {
        OomKills { source: PathBuf::new(), readings: VecDeque::from([(start, Some(from))]), attributed: 0 }
    }

    /// A death is put down to the OOM killer only when a kill was counted since a reading a
    /// second or more before it that no other death took.
    #[test]
    fn each_kill_counted_is_put_down_to_one_death() {
        let start = Instant::now();
        let mut kills = counting(5, start);
        let at = start + Duration::from_millis(1500);
        assert!(!kills.attribute(at, Some(5)), "no kill counted: a SIGKILL from elsewhere");
        assert!(kills.attribute(at, Some(6)));
        assert!(!kills.attribute(at, Some(6)), "that kill is taken");
        // Two at once: two deaths.
        assert!(kills.attribute(at, Some(8)));
        assert!(kills.attribute(at, Some(8)));
        assert!(!kills.attribute(at, Some(8)));
        assert!(!kills.attribute(at, None), "a count that cannot be read: Error, as before");
    }

    /// A kill counted before the newest reading a second back is old: it was some other
    /// process's. One counted just before a reading is not: the reading is too recent.
    #[test]
    fn the_base_is_the_newest_reading_a_second_before_the_death() {
        let start = Instant::now();
        let mut kills = counting(5, start);
        kills.record(start + Duration::from_secs(1), Some(7));
        kills.record(start + Duration::from_secs(2), Some(7));
        let at = start + Duration::from_millis(3500);
        assert!(!kills.attribute(at, Some(7)), "the two kills before second 2 were others'");
        // A kill just before a reading, its death handled just after it.
        kills.record(start + Duration::from_secs(3), Some(8));
        assert!(kills.attribute(start + Duration::from_millis(3010), Some(8)));
    }

    /// A reading that came late (the runtime's thread held up) still leaves the window where
    /// it was: the base is a reading from before the kill.
    #[test]
    fn a_late_reading_does_not_hide_a_kill() {
        let start = Instant::now();
        let mut kills = counting(5, start);
        // Held up for 3 s; the kill came during it, and the reading after it saw it.
        kills.record(start + Duration::from_secs(4), Some(6));
        assert!(kills.attribute(start + Duration::from_millis(4010), Some(6)));
    }

    /// A count that went down (a cgroup made again) starts over.
    #[test]
    fn a_count_that_went_down_starts_over() {
        let start = Instant::now();
        let mut kills = counting(50, start);
        let at = start + Duration::from_secs(2);
        assert!(kills.attribute(at, Some(51)));
        kills.record(start + Duration::from_secs(3), Some(0));
        let later = start + Duration::from_secs(5);
        assert!(kills.attribute(later, Some(1)), "the first kill of the new count");
    }

    #[test]
    fn a_source_that_cannot_be_read_attributes_nothing() {
        let mut kills = OomKills::new("/nonexistent/vmstat");
        kills.read();
        assert!(!kills.killed_by_oom());
    }
}
