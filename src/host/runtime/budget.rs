//! The file-descriptor budget of the local runtime: how many containers may run at once so
//! that the agent keeps enough descriptors for its listener, its API client and the probes.
//! A running container holds [`FDS_PER_CONTAINER`] of the agent's descriptors (its stdout and
//! stderr pipes, two pidfds: tokio's reaper and ours, and the shim's control socket); a start that would eat into the
//! reserve is refused and retried later, and no pod may hold more than half of the budget, so
//! one pod with thousands of containers cannot starve the others.
//!
//! The kubelet has no counterpart: a CRI runtime holds a container's descriptors in its own
//! shim process, not in the kubelet.

use std::collections::HashMap;

use probelet_actors::capacity::ShrinkAfterRemoval;
use probelet_actors::vocabulary::PodUid;
use rustix::process::{Resource, Rlimit, getrlimit, setrlimit};

/// Descriptors the agent holds per running container.
pub const FDS_PER_CONTAINER: u64 = 5;
/// The smallest reserve kept for everything but containers.
pub const MIN_RESERVE: u64 = 64;

/// The descriptors kept back from containers out of `limit`: a tenth, at least [`MIN_RESERVE`].
pub fn reserve_for(limit: u64) -> u64 {
    (limit / 10).max(MIN_RESERVE)
}

/// The HTTP listener's connection cap under a descriptor `limit`: `configured`, but no more
/// than a quarter of the reserve (the rest is for probes, the API client and spawning), and
/// at least 4. With the default 256 and the soft limit raised to a usual hard limit (a million)
/// nothing changes; under 128 descriptors it is 16, where 256 idle clients would take every
/// descriptor from the probes.
pub fn connection_cap(configured: usize, limit: u64) -> usize {
    listener_caps(configured, false, limit).0
}

/// The most connections the health listener (`--healthz-listen`) keeps: a kubelet's probes, an
/// operator's `curl`.
pub const HEALTH_MAX_CONNECTIONS: usize = 16;

/// The connection caps of the main listener and of the health listener (0 without one) under a
/// descriptor `limit`: both within the quarter of the reserve that [`connection_cap`] gives the
/// main listener alone, so that a health listener takes no descriptor the probes, the API
/// client and spawning are kept. The health listener gets [`HEALTH_MAX_CONNECTIONS`], at most
/// a quarter of that share (4 under the smallest reserve); the main listener `configured`, at
/// most the rest.
pub fn listener_caps(configured: usize, health: bool, limit: u64) -> (usize, usize) {
    let share = usize::try_from(reserve_for(limit) / 4).unwrap_or(usize::MAX).max(4);
    let health = if health { HEALTH_MAX_CONNECTIONS.min(share / 4).max(1) } else { 0 };
    (configured.min(share - health).max(1), health)
}

/// Descriptors a local exec probe holds while it runs: its stdout and stderr pipes, the shim's
/// control socket and a pidfd.
pub const FDS_PER_EXEC_PROBE: u64 = 4;

/// Local exec probes in flight under a descriptor `limit`: half of the reserve, at
/// [`FDS_PER_EXEC_PROBE`] each, at least 1 (8 under a limit of 128, where 30 exec probes at
/// once once took every descriptor and failed with `Too many open files`); `configured` (the
/// pool of every probe) when that is smaller.
pub fn exec_probe_cap(configured: Option<usize>, limit: u64) -> usize {
    let share = usize::try_from(reserve_for(limit) / 2 / FDS_PER_EXEC_PROBE).unwrap_or(usize::MAX).max(1);
    configured.map_or(share, |configured| configured.min(share))
}

/// Why a container may not start now.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Refusal {
    pub message: String,
}

/// Containers running against the budget, by pod.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FdBudget {
    /// The soft RLIMIT_NOFILE.
    limit: u64,
    /// Descriptors kept for the listener, the API client, probes and spawning.
    reserve: u64,
    /// Containers that may run at once, and at once in one pod.
    max_containers: u64,
    max_per_pod: u64,
    running: u64,
    by_pod: HashMap<PodUid, u64>,
}

impl FdBudget {
    /// No limit: for hosts that do not care (and tests).
    pub fn unlimited() -> Self {
        FdBudget {
            limit: u64::MAX,
            reserve: 0,
            max_containers: u64::MAX,
            max_per_pod: u64::MAX,
            running: 0,
            by_pod: HashMap::new(),
        }
    }

    /// A budget for `limit` descriptors of which `baseline` are open already: a tenth of the
    /// limit (at least [`MIN_RESERVE`]) is kept back.
    pub fn new(limit: u64, baseline: u64) -> Self {
        let reserve = reserve_for(limit);
        let max_containers = limit.saturating_sub(baseline).saturating_sub(reserve) / FDS_PER_CONTAINER;
        FdBudget {
            limit,
            reserve,
            max_containers,
            max_per_pod: (max_containers / 2).max(1).min(max_containers),
            running: 0,
            by_pod: HashMap::new(),
        }
    }

    /// The budget of this process: its soft RLIMIT_NOFILE (see [`raise_nofile_limit`]) and the
    /// descriptors open now.
    pub fn of_this_process() -> Self {
        let limit = getrlimit(Resource::Nofile).current.unwrap_or(u64::MAX);
        let baseline = std::fs::read_dir("/proc/self/fd").map(|d| d.count() as u64).unwrap_or(0);
        FdBudget::new(limit, baseline)
    }

    /// Takes a running container's share for `pod_uid`, or says why not.
    pub fn try_start(&mut self, pod_uid: &str) -> Result<(), Refusal> {
        let in_pod = self.by_pod.get(pod_uid).copied().unwrap_or(0);
        if self.running >= self.max_containers {
            return Err(Refusal {
                message: format!(
                    "{} containers already run, the most the agent's {} file descriptors allow while keeping {} for probes and the API",
                    self.running, self.limit, self.reserve
                ),
            });
        }
        if in_pod >= self.max_per_pod {
            return Err(Refusal {
                message: format!(
                    "the pod already runs {in_pod} containers, half of the {} the agent's {} file descriptors allow",
                    self.max_containers, self.limit
                ),
            });
        }
        self.running += 1;
        *self.by_pod.entry(pod_uid.into()).or_default() += 1;
        Ok(())
    }

    /// Gives a container's share back (it exited, or its start failed).
    pub fn release(&mut self, pod_uid: &str) {
        if let Some(count) = self.by_pod.get_mut(pod_uid) {
            *count = count.saturating_sub(1);
            if *count == 0 {
                self.by_pod.remove(pod_uid);
                self.by_pod.shrink_after_removal();
            }
            self.running = self.running.saturating_sub(1);
        }
    }

    /// Containers running against the budget.
    pub fn running(&self) -> u64 {
        self.running
    }

    pub fn max_containers(&self) -> u64 {
        self.max_containers
    }

    /// What to tell the operator when the limit leaves no room for a single container: every
    /// start would be refused, and the pods would only say so in their events.
    pub fn no_room_warning(&self) -> Option<String> {
        if self.max_containers > 0 || self.limit == u64::MAX {
            return None;
        }
        Some(format!(
            "RLIMIT_NOFILE is {}: after the descriptors open now and the {} kept for probes and \
             the API, no container can start (each holds {FDS_PER_CONTAINER}); raise the limit \
             (ulimit -n, LimitNOFILE=)",
            self.limit, self.reserve
        ))
    }
}

/// The soft RLIMIT_NOFILE in force (`None`: unlimited).
pub fn nofile_limit() -> Option<u64> {
    getrlimit(Resource::Nofile).current
}

/// Raises the soft RLIMIT_NOFILE to the hard limit (the default soft limit, often 1024, is far
/// below what a node agent needs); returns the soft limit in force afterwards.
pub fn raise_nofile_limit() -> std::io::Result<Option<u64>> {
    let Rlimit { current, maximum } = getrlimit(Resource::Nofile);
    if current != maximum {
        setrlimit(Resource::Nofile, Rlimit { current: maximum, maximum })?;
    }
    Ok(getrlimit(Resource::Nofile).current)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn exec_probes_in_flight_keep_to_half_of_the_reserve() {
        assert_eq!(exec_probe_cap(Some(1024), 128), 8);
        assert_eq!(exec_probe_cap(None, 128), 8, "bounded even when other probes are not");
        assert_eq!(exec_probe_cap(Some(1024), 1 << 20), 1024);
        assert_eq!(exec_probe_cap(Some(2), 128), 2);
        assert_eq!(exec_probe_cap(None, u64::MAX), usize::try_from(u64::MAX / 80).unwrap_or(usize::MAX));
    }

    #[test]
    fn a_health_listener_shares_the_connections_quarter() {
        // 128 descriptors: a reserve of 64, 16 for connections, 4 of them the health listener's.
        assert_eq!(listener_caps(256, true, 128), (12, 4));
        assert_eq!(listener_caps(256, false, 128), (16, 0));
        // A usual hard limit: both as configured.
        assert_eq!(listener_caps(256, true, 1 << 20), (256, HEALTH_MAX_CONNECTIONS));
        assert_eq!(listener_caps(2, true, 128), (2, 4), "a lower cap is kept");
    }

    #[test]
    fn the_connection_cap_keeps_to_a_quarter_of_the_reserve() {
        assert_eq!(connection_cap(256, 128), 16);
        assert_eq!(connection_cap(256, 1024), 25);
        assert_eq!(connection_cap(256, 1 << 20), 256);
        assert_eq!(connection_cap(256, u64::MAX), 256);
        assert_eq!(connection_cap(2, 128), 2, "a lower cap is kept");
        assert_eq!(connection_cap(256, 1), 16, "the reserve's floor");
    }

    #[test]
    fn keeps_a_reserve_and_half_the_budget_per_pod() {
        // 256 descriptors, 32 open: 64 kept back, 160 left for 32 containers, 16 per pod.
        let mut budget = FdBudget::new(256, 32);
        assert_eq!((budget.max_containers(), budget.max_per_pod), (32, 16));
        for _ in 0..16 {
            budget.try_start("big").unwrap();
        }
        let refused = budget.try_start("big").unwrap_err();
        assert!(refused.message.contains("the pod already runs 16 containers"), "{refused:?}");
        for _ in 0..16 {
            budget.try_start("other").unwrap();
        }
        let refused = budget.try_start("third").unwrap_err();
        assert!(refused.message.contains("32 containers already run"), "{refused:?}");
        budget.release("big");
        budget.try_start("third").unwrap();
        assert_eq!(budget.running(), 32);
        budget.release("nobody");
        assert_eq!(budget.running(), 32, "releasing what was never taken changes nothing");
    }

    /// A limit too small for any container says so at start, not only in each pod's events.
    #[test]
    fn a_limit_with_no_room_for_a_container_is_told() {
        let budget = FdBudget::new(64, 10);
        assert_eq!(budget.max_containers(), 0);
        let warning = budget.no_room_warning().expect("a warning");
        assert!(warning.starts_with("RLIMIT_NOFILE is 64: "), "{warning}");
        assert_eq!(FdBudget::new(256, 32).no_room_warning(), None);
        assert_eq!(FdBudget::unlimited().no_room_warning(), None);
    }

    #[test]
    fn a_large_limit_keeps_a_tenth() {
        let budget = FdBudget::new(1_048_576, 100);
        assert_eq!(budget.reserve, 104_857);
        assert_eq!(budget.max_containers(), (1_048_576 - 100 - 104_857) / FDS_PER_CONTAINER);
    }

    #[test]
    fn a_limit_below_the_reserve_runs_nothing() {
        let mut budget = FdBudget::new(60, 20);
        assert_eq!(budget.max_containers(), 0);
        assert!(budget.try_start("pod").is_err());
    }
}
