//! What the syncer can be asked about its state (tests, debugging): the version written for an
//! API pod ([`GetWrittenVersion`]) and the sizes of its per-pod state ([`GetSyncerStats`]).

use actix::prelude::*;

use super::StatusSyncer;
use crate::sync::pod_sync::PodSync;

/// The version last written for an API pod UID (upstream `apiStatusVersions`).
#[derive(Debug, Clone, Message)]
#[rtype(result = "Option<u64>")]
pub struct GetWrittenVersion(pub String);

/// Sizes of the syncer's per-pod state (tests, debugging): every map is bounded by the pods
/// that have a status.
#[derive(Debug, Clone, Copy, Message)]
#[rtype(result = "SyncerStats")]
pub struct GetSyncerStats;

/// The answer to [`GetSyncerStats`]: the number of pods in each piece of per-pod state.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct SyncerStats {
    /// Statuses held (the status manager's, as of the last update or reconcile).
    pub statuses: usize,
    /// Versions written, by API pod UID.
    pub written: usize,
    /// Merge bases (API copies), by namespace/name.
    pub merge_bases: usize,
    /// Pods with an unwritten change (latency histogram starts).
    pub unsynced: usize,
    /// Pods in retry back-off after failures.
    pub retrying: usize,
    /// Pods in conflict back-off (409s in a row).
    pub conflicting: usize,
    /// Pods whose merge base was dropped by a conflict, with its resourceVersion as a floor.
    pub floors: usize,
    /// Pods whose latest version the server rejected as invalid.
    pub rejected: usize,
    /// Update sequence numbers held.
    pub update_seqs: usize,
    /// Pods waiting for a write slot.
    pub queued: usize,
    /// Pods being written now.
    pub in_flight: usize,
    /// Pods with a back-off timer running.
    pub backing_off: usize,
}

impl Handler<GetSyncerStats> for StatusSyncer {
    type Result = MessageResult<GetSyncerStats>;

    fn handle(&mut self, _msg: GetSyncerStats, _ctx: &mut Self::Context) -> Self::Result {
        let count = |has: fn(&PodSync) -> bool| self.pods.values().filter(|pod| has(pod)).count();
        MessageResult(SyncerStats {
            statuses: self.pods.len(),
            written: count(|pod| pod.written.is_some()),
            merge_bases: self.api_pods.len(),
            unsynced: count(|pod| pod.unsynced_since.is_some()),
            retrying: count(|pod| pod.retry.is_some()),
            conflicting: count(|pod| pod.conflict.is_some()),
            floors: count(|pod| pod.floor.is_some()),
            rejected: count(|pod| pod.rejected.is_some()),
            update_seqs: count(|pod| pod.update_seq.is_some()),
            queued: self.queue.len(),
            in_flight: self.in_flight.len(),
            backing_off: self.backing_off.len(),
        })
    }
}

impl Handler<GetWrittenVersion> for StatusSyncer {
    type Result = Option<u64>;

    fn handle(&mut self, msg: GetWrittenVersion, _ctx: &mut Self::Context) -> Self::Result {
        self.pods.values().find_map(|pod| pod.written_to(&msg.0))
    }
}
