//! One pod's sync state, in one place (upstream: the status manager's `podStatuses` entry with
//! `apiStatusVersions`, plus the retry state the kubelet keeps in its work queue): the latest
//! status, the version written, the back-offs, the conflict floor, the rejected version. The
//! transitions are pure ([`PodSync::on_update`], [`PodSync::on_outcome`]): the syncer actor
//! keeps the queue, the request budget and the timers, and asks these what to do.
//!
//! A pod has a `PodSync` exactly as long as the syncer holds a status for it: dropping the entry
//! drops every piece of its state at once.

use std::time::Duration;

use tokio::time::Instant;

use super::job::{JobResult, WriteOutcome};
use super::rate::jittered_backoff;
use super::rules::RETRY_AFTER_MAX;
use crate::status::manager::VersionedPodStatus;

/// A pod's place in a retry back-off.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Retry {
    /// Consecutive failures (or conflicts).
    pub count: u32,
    /// No write before this.
    pub not_before: Instant,
}

/// The back-off settings a transition needs (from the syncer's configuration).
#[derive(Debug, Clone, Copy)]
pub struct Backoffs {
    pub failure_initial: Duration,
    pub failure_max: Duration,
    pub conflict_initial: Duration,
    pub conflict_max: Duration,
}

/// A version the server rejected as invalid (422) and when it is sent again: at the next full
/// reconcile after the first rejection, as the kubelet retries at its next batch, then after
/// twice as many reconciles each time, up to [`MAX_RECONCILES_SKIPPED`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Rejected {
    pub version: u64,
    /// Rejections of this version in a row.
    pub count: u32,
    /// Full reconciles still to pass before it is sent again.
    pub reconciles_left: u32,
}

/// The most full reconciles a rejected version waits: 5 minutes at the default 10 s period.
pub const MAX_RECONCILES_SKIPPED: u32 = 29;

/// The reconciles skipped after the `count`-th rejection in a row: 0, 1, 3, 7, 15, then 29.
pub fn reconciles_to_skip(count: u32) -> u32 {
    ((1u32 << count.saturating_sub(1).min(5)) - 1).min(MAX_RECONCILES_SKIPPED)
}

/// The version written to an API pod.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Written {
    /// The API pod UID (a static pod's mirror pod).
    pub api_uid: String,
    pub version: u64,
}

/// What becomes of the pod's merge base after a write.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MergeBase {
    /// Keep the copy the write returned (unless a newer one arrived meanwhile).
    Remember,
    /// The copy is stale or the pod gone: the next write GETs.
    Drop,
    /// Leave the copy held: it is newer than the one the write conflicted with.
    Keep,
}

/// Upstream's merge-base choice after a write: what the syncer does with the API copy it holds.
/// `held` is the resourceVersion of the copy held now, `merged_into` the one the write used.
pub fn merge_base_after(outcome: &WriteOutcome, held: Option<u64>, merged_into: Option<u64>) -> MergeBase {
    match outcome {
        WriteOutcome::Updated | WriteOutcome::Unchanged => MergeBase::Remember,
        WriteOutcome::Conflict if newer_copy_held(held, merged_into) => MergeBase::Keep,
        WriteOutcome::Recreated | WriteOutcome::Deleted => MergeBase::Drop,
        WriteOutcome::NotFound
        | WriteOutcome::Invalid(_)
        | WriteOutcome::Conflict
        | WriteOutcome::Failed(_)
        | WriteOutcome::DeleteFailed(_) => MergeBase::Drop,
    }
}

/// A conflict whose pod was seen newer meanwhile (a watch event during the write) is merged
/// again into that copy at once.
fn newer_copy_held(held: Option<u64>, merged_into: Option<u64>) -> bool {
    matches!((held, merged_into), (Some(held), Some(failed)) if held > failed)
}

/// What the actor does after [`PodSync::on_outcome`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Settled {
    /// The wait of the back-off the outcome started (failures or conflicts), for the log.
    pub retry_in: Option<Duration>,
    /// The status reached the server: when its oldest unwritten change happened, on tokio's
    /// clock (a latency, which no step of the wall clock may stretch or make negative).
    pub synced_since: Option<Instant>,
    /// Conflicts in a row, when there are enough of them to tell an operator
    /// ([`conflicts_worth_reporting`]).
    pub conflicts_to_report: Option<u32>,
}

/// How many conflicts in a row make a pod worth a line at info, and again at each further such
/// count: 5 conflicts take about 0.75 s of back-off, so a pod that the server keeps answering
/// 409 is reported within a second or so, then about every 50 s at the longest back-off (10 s),
/// where every conflict at debug would say nothing at the default level and every one at info
/// would flood it.
pub const CONFLICTS_REPORTED_EVERY: u32 = 5;

/// Whether the `count`-th conflict in a row is told at info (see [`CONFLICTS_REPORTED_EVERY`]).
pub fn conflicts_worth_reporting(count: u32) -> bool {
    count > 0 && count.is_multiple_of(CONFLICTS_REPORTED_EVERY)
}

/// How many conflicts in a row make a readiness-only write send the owned conditions alone
/// first (docs/sync.md §7.5). One conflict is ordinary (the runtime wrote between our read and
/// our write) and is merged again at once; two come in a burst of runtime writes as a container
/// starts, and the second waits only 50 ms. By the third the runtime writes the pod faster than
/// a PATCH's round trip, and every write under the precondition may keep conflicting. Earlier
/// would cost the consistency the precondition buys (for a while the Ready condition says
/// other than the containers' `ready` flags) for races that end on their own; later delays the
/// Ready condition that EndpointSlices follow, by one more round trip and back-off each.
pub const CONDITIONS_ALONE_AFTER: u32 = 3;

/// Whether, after `conflicts_in_a_row`, a write sends the owned conditions alone before the
/// container statuses (see [`CONDITIONS_ALONE_AFTER`]).
pub fn conditions_go_alone(conflicts_in_a_row: u32) -> bool {
    conflicts_in_a_row >= CONDITIONS_ALONE_AFTER
}

/// One pod's sync state, by source pod UID.
#[derive(Debug, Clone)]
pub struct PodSync {
    /// The latest status (the status manager's, as of the last update or reconcile).
    pub status: VersionedPodStatus,
    /// The update count at the pod's latest update, so a reconcile can tell the updates that
    /// arrived after it asked for the list. `None` for a status known only from a list.
    pub update_seq: Option<u64>,
    /// When the oldest unwritten change happened, on tokio's clock (for the latency histogram;
    /// upstream times it with Go's monotonic reading).
    pub unsynced_since: Option<Instant>,
    /// A newer version arrived, or a retry is due, while the pod was being written.
    pub dirty: bool,
    /// Failure back-off.
    pub retry: Option<Retry>,
    /// Conflict back-off: ended by a new version or a newer watch copy.
    pub conflict: Option<Retry>,
    /// Writes in a row the server answered 409, whether or not a newer copy was at hand to
    /// merge into at once (which ends the back-off, not the streak): what is reported.
    pub conflicts_in_a_row: u32,
    /// The resourceVersion of the merge base a write last conflicted with: until a newer copy
    /// is seen, a watch event no newer than this is not a merge base.
    pub floor: Option<u64>,
    /// The version the server rejected as invalid, sent again only by a full reconcile.
    pub rejected: Option<Rejected>,
    /// The version last written (upstream `apiStatusVersions`).
    pub written: Option<Written>,
}

impl PodSync {
    /// A pod first known from a reconcile's list.
    pub fn listed(status: VersionedPodStatus) -> PodSync {
        PodSync {
            status,
            update_seq: None,
            unsynced_since: None,
            dirty: false,
            retry: None,
            conflict: None,
            conflicts_in_a_row: 0,
            floor: None,
            rejected: None,
            written: None,
        }
    }

    /// A new status from the status manager, the `seq`-th update received. Returns whether it
    /// ended a conflict back-off: a new version is merged again from a fresh GET at once,
    /// however often the last one conflicted.
    pub fn on_update(&mut self, status: VersionedPodStatus, seq: u64, now: Instant) -> bool {
        self.status = status;
        self.update_seq = Some(seq);
        self.unsynced_since.get_or_insert(now);
        self.conflict.take().is_some()
    }

    /// A watch copy newer than the floor arrived: whether `resource_version` may be a merge
    /// base. A copy newer than the floor lifts it.
    pub fn admits_copy(&mut self, resource_version: Option<u64>) -> bool {
        let Some(floor) = self.floor else { return true };
        if resource_version.is_some_and(|version| version <= floor) {
            return false;
        }
        self.floor = None;
        true
    }

    /// At a full reconcile: whether the latest version may be sent (counts the reconcile for a
    /// version the server rejected). A version not rejected always may.
    pub fn rejection_passed(&mut self) -> bool {
        match &mut self.rejected {
            Some(rejected) if rejected.version == self.status.version => {
                let passed = rejected.reconciles_left == 0;
                rejected.reconciles_left = rejected.reconciles_left.saturating_sub(1);
                passed
            }
            _ => true,
        }
    }

    /// Whether the next write sends the owned conditions alone first, without the
    /// resourceVersion precondition ([`conditions_go_alone`]): the conflicts go on, and the
    /// conditions merge by type, so they can land on their own.
    pub fn conditions_go_alone(&self) -> bool {
        conditions_go_alone(self.conflicts_in_a_row)
    }

    /// When the pod's back-offs (failures and conflicts) end, if it is in one.
    pub fn not_before(&self) -> Option<Instant> {
        self.retry.map(|r| r.not_before).max(self.conflict.map(|r| r.not_before))
    }

    /// The version written to `api_uid`, if that is the API pod written last.
    pub fn written_to(&self, api_uid: &str) -> Option<u64> {
        self.written.as_ref().filter(|w| w.api_uid == api_uid).map(|w| w.version)
    }

    /// A write ended with `result`. `held` is the resourceVersion of the copy held now; `now`
    /// is when back-offs start. Recreated and Deleted need no transition: the actor drops the
    /// pod.
    pub fn on_outcome(
        &mut self,
        result: &JobResult,
        held: Option<u64>,
        now: Instant,
        backoffs: &Backoffs,
    ) -> Settled {
        let (outcome, version, merged_into, uid) =
            (&result.outcome, result.version, result.base_version, result.uid.as_str());
        let api_uid = result.api_uid.as_deref();
        let mut settled = Settled::default();
        let write =
            |api_uid: Option<&str>| api_uid.map(|api_uid| Written { api_uid: api_uid.to_owned(), version });
        match outcome {
            WriteOutcome::Updated | WriteOutcome::Unchanged => {
                self.retry = None;
                self.conflict = None;
                self.conflicts_in_a_row = 0;
                self.floor = None;
                self.rejected = None;
                if let Some(written) = write(api_uid) {
                    self.written = Some(written);
                }
                let since = self.unsynced_since.take();
                if matches!(outcome, WriteOutcome::Updated) {
                    settled.synced_since = since;
                }
            }
            WriteOutcome::NotFound => {
                self.retry = None;
                self.conflict = None;
                self.conflicts_in_a_row = 0;
                self.floor = None;
            }
            WriteOutcome::Invalid(_) => {
                self.retry = None;
                self.conflict = None;
                self.conflicts_in_a_row = 0;
                // Not sent again at once, nor for a watch event: a reconcile sends it when its
                // wait is over (the cause may lie in the API copy, which can change), and a
                // new version goes at once.
                let count = self.rejected.filter(|r| r.version == version).map_or(1, |r| r.count + 1);
                self.rejected = Some(Rejected { version, count, reconciles_left: reconciles_to_skip(count) });
            }
            WriteOutcome::Recreated | WriteOutcome::Deleted => {}
            WriteOutcome::Conflict => {
                // The server answered: the failures before are over, only the copy was stale.
                self.retry = None;
                // Counted either way: a runtime that writes the pod more often than a PATCH
                // takes keeps a newer copy at hand at every answer, and its writes kept a
                // pod's readiness from landing for good, never reported.
                self.conflicts_in_a_row = self.conflicts_in_a_row.saturating_add(1);
                settled.conflicts_to_report =
                    Some(self.conflicts_in_a_row).filter(|&n| conflicts_worth_reporting(n));
                if newer_copy_held(held, merged_into) {
                    self.conflict = None;
                } else {
                    if let Some(failed) = merged_into {
                        self.floor = Some(self.floor.map_or(failed, |floor| floor.max(failed)));
                    }
                    let next = next_conflict(self.conflict, now, backoffs, uid);
                    settled.retry_in = Some(next.not_before - now);
                    self.conflict = Some(next);
                }
                self.dirty = true;
            }
            WriteOutcome::Failed(_) | WriteOutcome::DeleteFailed(_) => {
                // A failure between two conflicts breaks the run the report counts.
                self.conflicts_in_a_row = 0;
                if matches!(outcome, WriteOutcome::DeleteFailed(_))
                    && let Some(written) = write(api_uid)
                {
                    self.written = Some(written);
                }
                let failure = (backoffs.failure_initial, backoffs.failure_max);
                let next = next_failure(self.retry, now, failure, result.retry_after, uid);
                settled.retry_in = Some(next.not_before - now);
                self.retry = Some(next);
                self.dirty = true;
            }
        }
        settled
    }
}

/// The failure back-off after one more failure: doubled per failure up to the maximum, made up
/// to a quarter shorter by the pod's UID (the pods of a node, and the nodes of a cluster, that
/// lost the API server together do not all come back to it in the same instant), and at least
/// the wait the server asked for with the failure (its `Retry-After`), up to
/// [`RETRY_AFTER_MAX`].
pub fn next_failure(
    previous: Option<Retry>,
    now: Instant,
    (initial, max): (Duration, Duration),
    retry_after: Option<Duration>,
    uid: &str,
) -> Retry {
    let count = previous.map_or(1, |r| r.count + 1);
    let asked = retry_after.map_or(Duration::ZERO, |wait| wait.min(RETRY_AFTER_MAX));
    let wait = jittered_backoff(initial, max, count, uid).max(asked);
    Retry { count, not_before: now + wait }
}

/// The conflict back-off after one more conflict: the first is retried at once from a fresh
/// GET; a pod that keeps changing under the writes waits a little, then longer, up to the
/// maximum (jittered by its UID): a newer copy or a new version ends the wait at once, so the
/// longer waits fall only on a pod whose server keeps refusing with nothing new to merge into.
pub fn next_conflict(previous: Option<Retry>, now: Instant, backoffs: &Backoffs, uid: &str) -> Retry {
    let count = previous.map_or(1, |r| r.count + 1);
    let wait = match count {
        1 => Duration::ZERO,
        n => jittered_backoff(backoffs.conflict_initial, backoffs.conflict_max, n - 1, uid),
    };
    Retry { count, not_before: now + wait }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)] // a panic is the failure report
mod tests {
    use super::*;
    use crate::status::stored::StoredStatus;

    const BACKOFFS: Backoffs = Backoffs {
        failure_initial: Duration::from_millis(500),
        failure_max: Duration::from_secs(2),
        conflict_initial: Duration::from_millis(50),
        conflict_max: Duration::from_secs(10),
    };

    fn status(version: u64) -> VersionedPodStatus {
        VersionedPodStatus {
            version,
            pod_name: "web".into(),
            pod_namespace: "default".into(),
            at: None,
            pod_is_finished: false,
            status: StoredStatus::default(),
        }
    }

    fn result(outcome: WriteOutcome, version: u64, merged_into: Option<u64>) -> JobResult {
        JobResult {
            uid: "u".into(),
            namespace: "default".into(),
            name: "web".into(),
            version,
            outcome,
            api_uid: Some("api-u".into()),
            fresh: None,
            base_version: merged_into,
            retry_after: None,
            conditions_written: false,
            recreated_as: None,
        }
    }

    /// `seconds` after one instant the tests share.
    fn at(seconds: u64) -> Instant {
        static BASE: std::sync::OnceLock<Instant> = std::sync::OnceLock::new();
        *BASE.get_or_init(Instant::now) + Duration::from_secs(seconds)
    }

    #[test]
    fn an_update_keeps_the_oldest_unwritten_change_and_ends_a_conflict_back_off() {
        let now = Instant::now();
        let mut pod = PodSync::listed(status(1));
        assert!(!pod.on_update(status(2), 1, at(10)));
        pod.conflict = Some(Retry { count: 2, not_before: now + Duration::from_secs(1) });
        assert!(pod.on_update(status(3), 2, at(20)), "a new version ends the conflict wait");
        assert_eq!((pod.status.version, pod.update_seq, pod.unsynced_since), (3, Some(2), Some(at(10))));
        assert_eq!(pod.conflict, None);
    }

    #[test]
    fn failures_back_off_exponentially_and_a_success_ends_it() {
        let now = Instant::now();
        let mut pod = PodSync::listed(status(1));
        pod.on_update(status(1), 1, at(10));
        let failed = result(WriteOutcome::Failed("patch: 500".into()), 1, Some(7));
        let waits: Vec<_> =
            (0..4).map(|_| pod.on_outcome(&failed, None, now, &BACKOFFS).retry_in.unwrap()).collect();
        // Doubled up to the maximum, each made up to a quarter shorter by the pod's UID.
        for (wait, full) in waits.iter().zip([500, 1000, 2000, 2000].map(Duration::from_millis)) {
            assert!(*wait <= full && *wait >= full * 3 / 4, "{waits:?}");
        }
        assert!(waits[1] > waits[0] && waits[2] > waits[1], "{waits:?}");
        assert!(pod.dirty, "written again (after the back-off)");
        assert_eq!(pod.not_before(), Some(now + waits[3]));
        assert_eq!(pod.written, None, "a failed patch wrote nothing");

        let settled = pod.on_outcome(&result(WriteOutcome::Updated, 1, Some(7)), None, now, &BACKOFFS);
        assert_eq!(
            settled,
            Settled { retry_in: None, synced_since: Some(at(10)), conflicts_to_report: None }
        );
        assert_eq!((pod.retry, pod.not_before(), pod.unsynced_since), (None, None, None));
        assert_eq!(pod.written_to("api-u"), Some(1));
        assert_eq!(pod.written_to("another-mirror"), None, "a version is of the API pod it went to");
    }

    /// A failure whose answer says when to come back (429 or 5xx with `Retry-After`) waits at
    /// least that long, and never more than a minute; the doubling goes on underneath.
    #[test]
    fn a_failure_waits_at_least_what_the_server_asked_for() {
        let now = Instant::now();
        let mut pod = PodSync::listed(status(1));
        pod.on_update(status(1), 1, at(10));
        let mut failed = result(WriteOutcome::Failed("patch: 429".into()), 1, Some(7));
        let mut wait = |asked: Option<u64>| {
            failed.retry_after = asked.map(Duration::from_secs);
            pod.on_outcome(&failed, None, now, &BACKOFFS).retry_in.unwrap()
        };
        assert_eq!(wait(Some(1)), Duration::from_secs(1), "asked for more than the back-off's 0.5 s");
        let second = wait(None);
        assert!(
            second < Duration::from_secs(1) && second >= Duration::from_millis(750),
            "doubled underneath"
        );
        let third = wait(Some(1));
        assert!(third > Duration::from_secs(1), "the back-off ({third:?}) is longer than asked");
        assert_eq!(wait(Some(3600)), RETRY_AFTER_MAX, "an hour is cut to a minute");
    }

    /// Pods that fail together (the API server went away) do not all come back in the same
    /// instant: each pod's wait is cut by up to a quarter, by its UID, the same in every run.
    #[test]
    fn pods_that_fail_together_come_back_apart() {
        let now = Instant::now();
        let waits: Vec<Duration> = (0..20)
            .map(|i| {
                let mut pod = PodSync::listed(status(1));
                pod.on_update(status(1), 1, at(10));
                let mut failed = result(WriteOutcome::Failed("patch: 503".into()), 1, Some(7));
                failed.uid = format!("uid-{i}").into();
                pod.on_outcome(&failed, None, now, &BACKOFFS);
                pod.on_outcome(&failed, None, now, &BACKOFFS).retry_in.unwrap()
            })
            .collect();
        let mut apart = waits.clone();
        apart.sort();
        apart.dedup();
        assert!(apart.len() >= 15, "twenty pods, {} distinct waits: {waits:?}", apart.len());
        assert!(waits.iter().all(|w| *w <= Duration::from_secs(1) && *w >= Duration::from_millis(750)));
    }

    #[test]
    fn an_unchanged_write_records_no_latency() {
        let mut pod = PodSync::listed(status(1));
        pod.on_update(status(1), 1, at(10));
        let settled =
            pod.on_outcome(&result(WriteOutcome::Unchanged, 1, None), None, Instant::now(), &BACKOFFS);
        assert_eq!((settled.synced_since, pod.unsynced_since), (None, None));
    }

    #[test]
    fn conflicts_retry_at_once_then_briefly_and_raise_the_floor() {
        let now = Instant::now();
        let mut pod = PodSync::listed(status(1));
        let first = pod.on_outcome(&result(WriteOutcome::Conflict, 1, Some(7)), None, now, &BACKOFFS);
        assert_eq!(first.retry_in, Some(Duration::ZERO), "the first conflict is retried at once");
        assert_eq!(pod.floor, Some(7));
        let second = pod.on_outcome(&result(WriteOutcome::Conflict, 1, Some(5)), None, now, &BACKOFFS);
        let wait = second.retry_in.unwrap();
        assert!(wait <= Duration::from_millis(50) && wait >= Duration::from_millis(37), "{wait:?}");
        assert_eq!(pod.floor, Some(7), "the floor never goes down");
        assert!(!pod.admits_copy(Some(7)), "a copy no newer than the floor is no merge base");
        assert!(pod.admits_copy(Some(8)));
        assert_eq!(pod.floor, None, "a newer copy lifts the floor");

        // A newer copy arrived during the write: merged into it at once, no floor.
        let settled = pod.on_outcome(&result(WriteOutcome::Conflict, 1, Some(8)), Some(9), now, &BACKOFFS);
        assert_eq!((settled.retry_in, pod.conflict, pod.floor), (None, None, None));
        assert!(pod.dirty);
    }

    /// A server that answers 409 to every write with nothing newer to merge into: the waits
    /// double up to the 10 s maximum (not a GET and a PATCH a second for good), and every fifth
    /// conflict in a row is reported; a write that lands ends the count.
    #[test]
    fn conflicts_that_never_end_wait_up_to_the_maximum_and_every_fifth_is_reported() {
        let now = Instant::now();
        let mut pod = PodSync::listed(status(1));
        let conflict = result(WriteOutcome::Conflict, 1, Some(7));
        let (mut waits, mut reported) = (Vec::new(), Vec::new());
        for n in 1..=20 {
            let settled = pod.on_outcome(&conflict, None, now, &BACKOFFS);
            waits.push(settled.retry_in.unwrap());
            if let Some(count) = settled.conflicts_to_report {
                assert_eq!(count, n);
                reported.push(n);
            }
        }
        assert_eq!(reported, [5, 10, 15, 20]);
        assert_eq!(waits[0], Duration::ZERO);
        assert!(waits.windows(2).all(|w| w[1] >= w[0].mul_f64(0.75)), "{waits:?}");
        assert!(
            waits[9..].iter().all(|&w| w <= Duration::from_secs(10) && w >= Duration::from_millis(7500)),
            "{waits:?}"
        );
        let first_ten: Duration = waits[..10].iter().sum();
        assert!(
            first_ten < Duration::from_secs(20),
            "the first ten conflicts are not slowed much: {first_ten:?}"
        );

        pod.on_outcome(&result(WriteOutcome::Updated, 1, Some(8)), None, now, &BACKOFFS);
        let settled = pod.on_outcome(&conflict, None, now, &BACKOFFS);
        assert_eq!(
            (settled.retry_in, settled.conflicts_to_report),
            (Some(Duration::ZERO), None),
            "counted afresh"
        );
    }

    /// Conflicts each answered while a newer copy was already held (a runtime that writes the
    /// pod faster than a PATCH's round trip): merged again at once, without back-off, and still
    /// every fifth in a row is reported. Before, the held copy reset the count, and 202
    /// conflicts in a row were never reported at the default level.
    #[test]
    fn conflicts_merged_again_at_once_are_still_counted_and_reported() {
        let now = Instant::now();
        let mut pod = PodSync::listed(status(1));
        let mut reported = Vec::new();
        for n in 1..=10u64 {
            let conflict = result(WriteOutcome::Conflict, 1, Some(n));
            let settled = pod.on_outcome(&conflict, Some(n + 1), now, &BACKOFFS);
            assert_eq!(settled.retry_in, None, "merged again at once into the newer copy");
            reported.extend(settled.conflicts_to_report);
        }
        assert_eq!(reported, [5, 10]);
        pod.on_outcome(&result(WriteOutcome::Updated, 1, Some(20)), None, now, &BACKOFFS);
        assert_eq!(pod.conflicts_in_a_row, 0, "a write that lands ends the streak");
    }

    /// A pod whose writes keep conflicting sends its conditions alone from the third conflict in
    /// a row on, whether the conflicts wait out a back-off or are merged again at once, and a
    /// new version does not end that; a write that lands, or a failure, does.
    #[test]
    fn the_conditions_go_alone_from_the_third_conflict_in_a_row_until_a_write_lands() {
        let now = Instant::now();
        let mut pod = PodSync::listed(status(1));
        let mut alone = Vec::new();
        for n in 1..=5u64 {
            alone.push(pod.conditions_go_alone());
            // Odd ones wait out the back-off, even ones merge at once into a newer copy held.
            let held = (n % 2 == 0).then_some(n + 1);
            pod.on_outcome(&result(WriteOutcome::Conflict, 1, Some(n)), held, now, &BACKOFFS);
        }
        assert_eq!(alone, [false, false, false, true, true], "before each of five writes");
        pod.on_update(status(2), 1, at(10));
        assert!(pod.conditions_go_alone(), "a new version goes on conflicting as the last did");

        pod.on_outcome(&result(WriteOutcome::Updated, 2, Some(9)), None, now, &BACKOFFS);
        assert!(!pod.conditions_go_alone(), "the containers landed: the state is as before");

        for n in 10..13 {
            pod.on_outcome(&result(WriteOutcome::Conflict, 2, Some(n)), None, now, &BACKOFFS);
        }
        assert!(pod.conditions_go_alone());
        pod.on_outcome(&result(WriteOutcome::Failed("patch: 503".into()), 2, Some(13)), None, now, &BACKOFFS);
        assert!(!pod.conditions_go_alone(), "a failure breaks the run of conflicts");
        assert!(
            conditions_go_alone(CONDITIONS_ALONE_AFTER) && !conditions_go_alone(CONDITIONS_ALONE_AFTER - 1)
        );
    }

    #[test]
    fn a_rejected_version_waits_for_reconciles_that_double_until_a_write_lands() {
        let mut pod = PodSync::listed(status(4));
        let invalid = result(WriteOutcome::Invalid("422".into()), 4, None);
        let mut reconciles = Vec::new();
        for _ in 0..8 {
            pod.on_outcome(&invalid, None, Instant::now(), &BACKOFFS);
            assert_eq!((pod.written_to("api-u"), pod.dirty, pod.retry), (None, false, None));
            // The reconcile that sends it again is the n-th one.
            let n = (1..).find(|_| pod.rejection_passed()).unwrap();
            reconciles.push(n);
        }
        assert_eq!(reconciles, [1, 2, 4, 8, 16, 30, 30, 30], "10 s doubling to 5 min at a 10 s period");
        assert_eq!(pod.rejected.map(|r| r.count), Some(8));

        pod.on_update(status(5), 1, at(10));
        assert!(pod.rejection_passed(), "a new version is not held back");
        pod.on_outcome(
            &result(WriteOutcome::Invalid("422".into()), 5, None),
            None,
            Instant::now(),
            &BACKOFFS,
        );
        assert_eq!(pod.rejected.map(|r| (r.version, r.count)), Some((5, 1)), "counted afresh");
        pod.on_outcome(&result(WriteOutcome::Updated, 5, None), None, Instant::now(), &BACKOFFS);
        assert_eq!(pod.rejected, None);
    }

    #[test]
    fn the_merge_base_after_each_outcome() {
        let cases = [
            (WriteOutcome::Updated, None, MergeBase::Remember),
            (WriteOutcome::Unchanged, None, MergeBase::Remember),
            (WriteOutcome::NotFound, None, MergeBase::Drop),
            (WriteOutcome::Recreated, None, MergeBase::Drop),
            (WriteOutcome::Invalid("x".into()), None, MergeBase::Drop),
            (WriteOutcome::Deleted, None, MergeBase::Drop),
            (WriteOutcome::Failed("x".into()), None, MergeBase::Drop),
            (WriteOutcome::DeleteFailed("x".into()), None, MergeBase::Drop),
            (WriteOutcome::Conflict, Some(7), MergeBase::Drop),
            (WriteOutcome::Conflict, Some(9), MergeBase::Keep),
        ];
        for (outcome, held, want) in cases {
            assert_eq!(merge_base_after(&outcome, held, Some(7)), want, "{outcome:?} holding {held:?}");
        }
        assert_eq!(merge_base_after(&WriteOutcome::Conflict, Some(9), None), MergeBase::Drop);
    }
}
