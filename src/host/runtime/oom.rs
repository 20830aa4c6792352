//! Whether a container that died of SIGKILL was killed by the kernel's OOM killer, so that its
//! terminated state says `OOMKilled` as upstream's does (docs/reliability.md, "No process to
//! spare", memory).
//!
//! Upstream, containerd learns of an OOM kill from the container's own cgroup. Here the
//! containers share the agent's cgroup, so the runtime reads the kernel's count of OOM kills
//! instead (`oom_kill` in `/proc/vmstat`, node-wide; or a cgroup's `memory.events`, which has
//! the same line, for a host that gives its containers one) once a second, and at a container's
//! death by a SIGKILL the agent did not send. A kill counted since the reading before last (one
//! to two seconds back) and not yet put down to another container is put down to this one:
//! the OOM killer's SIGKILL reaches the agent within milliseconds, through the shim. What it
//! cannot tell: a container killed with `kill -9` by hand in the same second as the kernel
//! OOM-killed some other process on the node reads `OOMKilled` too. A counter that cannot be
//! read (no `/proc`, a kernel before 4.13) leaves every such death `Error`, as before.

use std::path::{Path, PathBuf};

/// The kernel's count of OOM kills since boot, for the whole node.
pub(super) const VMSTAT: &str = "/proc/vmstat";

/// The kernel's OOM kill count, read once a second, and the kills already put down to a
/// container.
#[derive(Debug)]
pub(super) struct OomKills {
    source: PathBuf,
    /// The count at the reading before last, and at the last one.
    older: Option<u64>,
    newer: Option<u64>,
    /// Kills up to this count have been put down to a container.
    attributed: u64,
}

impl OomKills {
    /// Reads the count from `source` (`key value` lines, one of them `oom_kill N`), now and at
    /// each [`OomKills::tick`].
    pub(super) fn new(source: impl Into<PathBuf>) -> Self {
        let source = source.into();
        let now = read_count(&source);
        OomKills { source, older: now, newer: now, attributed: 0 }
    }

    /// The reading of the second: the one before becomes the base a death is compared with.
    pub(super) fn tick(&mut self) {
        self.older = self.newer;
        self.newer = read_count(&self.source);
    }

    /// Whether a container that has just died of a SIGKILL the agent did not send was
    /// OOM-killed: a kill counted since the reading before last that no other death took.
    pub(super) fn killed_by_oom(&mut self) -> bool {
        let now = read_count(&self.source);
        self.attribute(now)
    }

    fn attribute(&mut self, now: Option<u64>) -> bool {
        let (Some(now), Some(base)) = (now, self.older.or(self.newer)) else { return false };
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

    fn counting(from: u64) -> OomKills {
        OomKills { source: PathBuf::new(), older: Some(from), newer: Some(from), attributed: 0 }
    }

    /// A death is put down to the OOM killer only when a kill was counted within the last one
    /// to two seconds that no other death took.
    #[test]
    fn each_kill_counted_is_put_down_to_one_death() {
        let mut kills = counting(5);
        assert!(!kills.attribute(Some(5)), "no kill counted: a SIGKILL from elsewhere");
        assert!(kills.attribute(Some(6)));
        assert!(!kills.attribute(Some(6)), "that kill is taken");
        // Two at once: two deaths.
        assert!(kills.attribute(Some(8)));
        assert!(kills.attribute(Some(8)));
        assert!(!kills.attribute(Some(8)));
        assert!(!kills.attribute(None), "a count that cannot be read: Error, as before");
    }

    /// A kill counted before the reading before last is old: it was some other process's.
    #[test]
    fn an_old_kill_is_not_put_down_to_a_later_death() {
        let mut kills = counting(5);
        kills.older = Some(5);
        kills.newer = Some(7);
        // Counted since the reading before last: still within the window.
        assert!(kills.attribute(Some(7)));
        // A second later both readings have moved past them.
        kills.older = Some(7);
        kills.newer = Some(7);
        assert!(!kills.attribute(Some(7)), "the other kill is out of the window");
    }

    #[test]
    fn a_source_that_cannot_be_read_attributes_nothing() {
        let mut kills = OomKills::new("/nonexistent/vmstat");
        kills.tick();
        assert!(!kills.killed_by_oom());
    }
}
