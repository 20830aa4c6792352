//! The status syncer actor (upstream: the status manager's `syncBatch` / `syncPod`): writes the
//! status manager's pod statuses to the API server.
//!
//! Per pod only the latest version is written; different pods are written concurrently (up to
//! `concurrency`), and every request takes a token from the shared [`RateLimiter`]. The write
//! is the kubelet's: `mergePodStatus`, then a two-way strategic merge patch of `status` with
//! `metadata.uid` as a precondition, nothing sent when it is empty. The merge base is the
//! freshest pod this actor has seen (a watch event or its last PATCH response); it GETs only
//! when it has none, when the copy is of another pod (a watch behind a recreation), or after a
//! failure. A write that GETs takes the PATCH's token together with the GET's, so that other
//! senders queueing on the shared limiter cannot widen the window between the two. Failures are
//! retried with per-pod exponential back-off; a status the server rejects as invalid is not sent
//! again until it changes. A full reconcile every `reconcile_period` rewrites any drift of the
//! fields this writer owns. A finished pod with a deletion timestamp and a terminal API phase is
//! deleted with grace 0 and a UID precondition; a mirror pod never is. Per-pod state (versions,
//! back-offs and their timers, merge bases, latency starts) is dropped by the reconcile once the
//! status manager no longer has the pod's status, so that `Flush` never waits for such a pod.
//!
//! Which status fields the syncer writes is a parameter, [`OwnedFields`]:
//! * [`OwnedFields::Kubelet`] (the default, upstream's behaviour): the status manager's status
//!   is the truth for everything but foreign conditions and claim statuses (`mergePodStatus`,
//!   [`merge_pod_status_for`]), and a reconcile rewrites drift in any of it.
//! * [`OwnedFields::ReadinessOnly`] (cluster mode, where the node's runtime writes phase, IPs
//!   and container states): the patch is built from the API copy with only `ready`/`started` of
//!   the containers the status manager knows under the same container ID and the owned
//!   conditions laid over it ([`merge_readiness_only`]); a reconcile sees drift only in those.
//!   As the container status lists are atomic, sent whole, a patch that carries one also carries
//!   the copy's `metadata.resourceVersion` as a precondition: when the runtime wrote after the
//!   copy was taken, the server answers 409 Conflict and the write is merged again from a fresh
//!   copy, so a stale copy never undoes the runtime's writes. (Conditions merge by type, so a
//!   conditions-only patch needs no precondition and is sent without one.)
//!
//! Conflicts have a back-off of their own, separate from the failure back-off: the first is
//! retried at once from a fresh GET, further ones after a short, jittered wait
//! ([`SyncerConfig::conflict_backoff_initial`], at most [`SyncerConfig::conflict_backoff_max`]).
//! It ends early when what it waits for comes: a new status version, or a watch copy newer than
//! the one that conflicted. The conflicting copy's resourceVersion is kept as a floor until then,
//! so that a watch event that is older still is not taken as the next merge base.

use std::collections::{HashMap, HashSet, VecDeque};
use std::sync::Arc;
use std::time::Duration;

use actix::prelude::*;
use k8s_openapi::api::core::v1::{ContainerState, ContainerStatus, Pod, PodStatus};
use k8s_openapi::jiff::Timestamp;
use kube::api::{Api, DeleteParams, Patch, PatchParams, Preconditions};
use tokio::sync::oneshot;

use super::patch::pod_status_patch;
use super::rate::{RateLimiter, SpareToken, backoff, jittered_backoff};
use crate::clock::SharedClock;
use crate::contracts::PodLookup;
use crate::metrics as names;
use crate::status::equality::{ConditionOwnership, is_pod_status_equal_for};
use crate::status::manager::{
    DeletePodStatus, ListStatuses, PodStatusUpdated, StatusManager, VersionedPodStatus,
};
use crate::status::merge::{is_terminal_phase, merge_pod_status_for, merge_readiness_only};
use crate::status::normalize::normalize_status;

/// The annotation that marks a mirror pod (the API copy of a static pod).
pub const MIRROR_POD_ANNOTATION: &str = "kubernetes.io/config.mirror";

// === messages ===

/// The API server's current copy of a pod, from a watch (fresh merge base).
#[derive(Debug, Clone, Message)]
#[rtype(result = "()")]
pub struct ApiPodObserved(pub Arc<Pod>);

/// A pod is gone from the API server.
#[derive(Debug, Clone, Message)]
#[rtype(result = "()")]
pub struct ApiPodDeleted {
    pub namespace: String,
    pub name: String,
}

/// Resolves once nothing is queued, waiting out a back-off or being written (graceful shutdown,
/// tests).
#[derive(Debug, Clone, Copy, Message)]
#[rtype(result = "()")]
pub struct Flush;

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
    pub queued: usize,
    pub in_flight: usize,
    /// Pods with a back-off timer running.
    pub backing_off: usize,
}

/// Start queued writes (scheduled after the mailbox drains).
#[derive(Debug, Clone, Copy, Message)]
#[rtype(result = "()")]
struct Pump;

/// Run a full reconcile now (as the periodic timer does).
#[derive(Debug, Clone, Copy, Message)]
#[rtype(result = "()")]
pub struct Reconcile;

// === the actor ===

/// The status fields the syncer writes (DESIGN.md "Who owns pod status in cluster mode").
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum OwnedFields {
    /// The kubelet's: the whole status but foreign conditions and claim statuses (upstream
    /// `mergePodStatus`).
    #[default]
    Kubelet,
    /// `ready` and `started` of init and regular containers matched by name and the same
    /// non-empty container ID, plus the owned conditions ([`SyncerConfig::ownership`]); the rest
    /// comes from the API copy, patched under a resourceVersion precondition.
    ReadinessOnly,
}

/// How the syncer writes.
pub struct SyncerConfig {
    pub client: kube::Client,
    pub pods: Arc<dyn PodLookup>,
    pub status_manager: Addr<StatusManager>,
    /// Shared by every request the agent sends.
    pub limiter: RateLimiter,
    /// Pods written at the same time.
    pub concurrency: usize,
    /// `PatchParams.field_manager`.
    pub field_manager: String,
    /// Full reconcile period (the kubelet's 10 s).
    pub reconcile_period: Duration,
    /// Failure back-off: the first wait, doubled per failure up to `backoff_max`.
    pub backoff_initial: Duration,
    pub backoff_max: Duration,
    /// Conflict back-off (409 Conflict, ReadinessOnly's precondition): the wait after the second
    /// conflict in a row (the first is retried at once), doubled per conflict up to
    /// `conflict_backoff_max`, each made up to a quarter shorter by the pod's UID.
    pub conflict_backoff_initial: Duration,
    pub conflict_backoff_max: Duration,
    /// The condition types this writer owns.
    pub ownership: ConditionOwnership,
    /// The other status fields this writer owns.
    pub owned_fields: OwnedFields,
    pub clock: SharedClock,
}

impl SyncerConfig {
    /// The kubelet's settings: QPS 50, burst 100, reconcile every 10 s.
    pub fn new(
        client: kube::Client,
        pods: Arc<dyn PodLookup>,
        status_manager: Addr<StatusManager>,
        clock: SharedClock,
    ) -> Self {
        SyncerConfig {
            client,
            pods,
            status_manager,
            limiter: RateLimiter::new(50.0, 100),
            concurrency: 16,
            field_manager: "probelet".to_owned(),
            reconcile_period: Duration::from_secs(10),
            backoff_initial: Duration::from_millis(500),
            backoff_max: Duration::from_secs(60),
            conflict_backoff_initial: Duration::from_millis(50),
            conflict_backoff_max: Duration::from_secs(1),
            ownership: ConditionOwnership::KUBELET,
            owned_fields: OwnedFields::Kubelet,
            clock,
        }
    }
}

/// A pod's place in a retry back-off.
#[derive(Debug, Clone, Copy)]
struct Retry {
    /// Consecutive failures (or conflicts).
    count: u32,
    not_before: tokio::time::Instant,
}

pub struct StatusSyncer {
    config: SyncerConfig,
    /// The latest status of every pod, by source UID.
    latest: HashMap<String, VersionedPodStatus>,
    /// Version last written, by API pod UID.
    written: HashMap<String, u64>,
    /// Merge bases: the freshest API copy of each pod, by namespace/name.
    api_pods: HashMap<(String, String), Arc<Pod>>,
    /// When the oldest unwritten change of each pod happened (for the latency histogram).
    unsynced_since: HashMap<String, Timestamp>,
    queue: VecDeque<String>,
    queued: HashSet<String>,
    in_flight: HashSet<String>,
    /// A newer version arrived while the pod was being written.
    dirty: HashSet<String>,
    /// Failure back-off, by source UID.
    retries: HashMap<String, Retry>,
    /// Conflict back-off, by source UID: ended by a new version or a newer watch copy.
    conflicts: HashMap<String, Retry>,
    /// The resourceVersion of the merge base a write last conflicted with, by source UID: until
    /// a newer copy is seen, a watch event no newer than this is not a merge base.
    floors: HashMap<String, u64>,
    /// Pods with a timer running to enqueue them when their back-off ends, and the timer (to
    /// cancel when the back-off ends early or the pod is dropped).
    backing_off: HashMap<String, SpawnHandle>,
    /// The version of each pod the server rejected as invalid: not sent again.
    rejected: HashMap<String, u64>,
    /// Counts status updates received; `update_seq` has the count at each pod's latest one, so
    /// a reconcile can tell the updates that arrived after it asked for the list.
    seq: u64,
    update_seq: HashMap<String, u64>,
    flushes: Vec<oneshot::Sender<()>>,
    /// A pump is scheduled for after the mailbox drains, so updates that arrived together
    /// are coalesced into one write.
    pump_scheduled: bool,
}

impl StatusSyncer {
    pub fn new(config: SyncerConfig) -> Self {
        StatusSyncer {
            config,
            latest: HashMap::new(),
            written: HashMap::new(),
            api_pods: HashMap::new(),
            unsynced_since: HashMap::new(),
            queue: VecDeque::new(),
            queued: HashSet::new(),
            in_flight: HashSet::new(),
            dirty: HashSet::new(),
            retries: HashMap::new(),
            conflicts: HashMap::new(),
            floors: HashMap::new(),
            backing_off: HashMap::new(),
            rejected: HashMap::new(),
            seq: 0,
            update_seq: HashMap::new(),
            flushes: Vec::new(),
            pump_scheduled: false,
        }
    }

    /// The API pod UID a source pod's status is written to (a static pod's mirror), or `None`
    /// when a static pod has no mirror pod yet.
    fn api_uid(&self, uid: &str) -> Option<String> {
        if self.config.pods.is_static(uid) {
            self.config.pods.mirror_uid_for_static(uid)
        } else {
            Some(uid.to_owned())
        }
    }

    fn enqueue(&mut self, uid: &str, ctx: &mut Context<Self>) {
        if self.in_flight.contains(uid) {
            self.dirty.insert(uid.to_owned());
            return;
        }
        if self.queued.insert(uid.to_owned()) {
            self.queue.push_back(uid.to_owned());
        }
        if !self.pump_scheduled {
            self.pump_scheduled = true;
            ctx.notify(Pump);
        }
    }

    /// Starts writes while there is room.
    fn pump(&mut self, ctx: &mut Context<Self>) {
        let now = tokio::time::Instant::now();
        let mut deferred = Vec::new();
        while self.in_flight.len() < self.config.concurrency.max(1) {
            let Some(uid) = self.queue.pop_front() else { break };
            self.queued.remove(&uid);
            if let Some(not_before) = self.not_before(&uid)
                && not_before > now
            {
                // One timer per pod: a pod already waiting is enqueued by the timer it has.
                if !self.backing_off.contains_key(&uid) {
                    deferred.push((uid, not_before - now));
                }
                continue;
            }
            self.start(uid, ctx);
        }
        for (uid, wait) in deferred {
            let key = uid.clone();
            let timer = ctx.run_later(wait, move |act, ctx| {
                act.backing_off.remove(&key);
                act.enqueue(&key, ctx);
            });
            self.backing_off.insert(uid, timer);
        }
        self.resolve_flushes();
    }

    /// When the pod's back-offs (failures and conflicts) end, if it is in one.
    fn not_before(&self, uid: &str) -> Option<tokio::time::Instant> {
        let failures = self.retries.get(uid).map(|r| r.not_before);
        let conflicts = self.conflicts.get(uid).map(|r| r.not_before);
        failures.max(conflicts)
    }

    /// Stops the pod's back-off timer, if one runs.
    fn cancel_timer(&mut self, uid: &str, ctx: &mut Context<Self>) {
        if let Some(timer) = self.backing_off.remove(uid) {
            ctx.cancel_future(timer);
        }
    }

    /// Ends the pod's conflict back-off (what it waited for came) and writes it again unless a
    /// failure back-off still holds it.
    fn end_conflict_backoff(&mut self, uid: &str, ctx: &mut Context<Self>) {
        if self.conflicts.remove(uid).is_some() {
            self.cancel_timer(uid, ctx);
            if self.latest.contains_key(uid) {
                self.enqueue(uid, ctx);
            }
        }
    }

    fn start(&mut self, uid: String, ctx: &mut Context<Self>) {
        let Some(status) = self.latest.get(&uid).cloned() else { return };
        if self.config.pods.is_static(&uid) && self.api_uid(&uid).is_none() {
            tracing::trace!(pod_uid = %uid, "Static pod does not have a corresponding mirror pod; skipping");
            return;
        }
        let key = (status.pod_namespace.clone(), status.pod_name.clone());
        let job = SyncJob {
            uid: uid.clone(),
            status,
            base: self.api_pods.get(&key).cloned(),
            client: self.config.client.clone(),
            limiter: self.config.limiter.clone(),
            field_manager: self.config.field_manager.clone(),
            ownership: self.config.ownership.clone(),
            owned_fields: self.config.owned_fields,
            pods: self.config.pods.clone(),
            now: self.config.clock.now_time(),
        };
        self.in_flight.insert(uid);
        ctx.spawn(job.run().into_actor(self).map(|result, act, ctx| act.finish(result, ctx)));
    }

    fn finish(&mut self, result: JobResult, ctx: &mut Context<Self>) {
        let uid = result.uid.clone();
        self.in_flight.remove(&uid);
        let key = (result.namespace.clone(), result.name.clone());
        metrics::counter!(names::PROBELET_STATUS_SYNCS_TOTAL, "outcome" => result.outcome.label())
            .increment(1);
        match &result.outcome {
            Outcome::Updated | Outcome::Unchanged => {
                self.retries.remove(&uid);
                self.conflicts.remove(&uid);
                self.floors.remove(&uid);
                self.rejected.remove(&uid);
                if let Some(api_uid) = &result.api_uid {
                    self.written.insert(api_uid.clone(), result.version);
                }
                if let Some(pod) = result.fresh {
                    // A watch event that arrived during the write may be newer still.
                    self.remember(key, pod);
                }
                if let Some(since) = self.unsynced_since.remove(&uid)
                    && matches!(result.outcome, Outcome::Updated)
                {
                    let seconds = self.config.clock.now().duration_since(since).as_secs_f64().max(0.0);
                    metrics::histogram!(names::PROBELET_STATUS_SYNC_DURATION_SECONDS).record(seconds);
                }
            }
            Outcome::NotFound => {
                tracing::debug!(pod_uid = %uid, pod = %result.name, "Pod does not exist on the server");
                self.retries.remove(&uid);
                self.conflicts.remove(&uid);
                self.floors.remove(&uid);
                self.api_pods.remove(&key);
            }
            Outcome::Recreated => {
                tracing::info!(pod_uid = %uid, pod = %result.name, "Pod was deleted and then recreated, skipping status update");
                self.forget(&uid, &key, ctx);
                self.config.status_manager.do_send(DeletePodStatus(uid.clone()));
            }
            Outcome::Invalid(message) => {
                tracing::error!(pod_uid = %uid, pod = %result.name, namespace = %result.namespace, cause = %message, "The API server rejected the status patch as invalid; not retrying this version");
                self.retries.remove(&uid);
                self.conflicts.remove(&uid);
                if let Some(api_uid) = &result.api_uid {
                    self.written.insert(api_uid.clone(), result.version);
                }
                // Remembered so that neither a reconcile nor the next watch event (the API copy
                // still differs from it) sends this version again: only a new one is sent.
                self.rejected.insert(uid.clone(), result.version);
                self.api_pods.remove(&key);
            }
            Outcome::Deleted => {
                tracing::debug!(pod_uid = %uid, pod = %result.name, "Pod fully terminated and removed from etcd");
                if let Some(api_uid) = &result.api_uid {
                    self.written.remove(api_uid);
                }
                self.forget(&uid, &key, ctx);
                self.config.status_manager.do_send(DeletePodStatus(uid.clone()));
            }
            Outcome::Conflict => {
                // The server answered: the failures before are over, only the copy was stale.
                self.retries.remove(&uid);
                let held = self.api_pods.get(&key).and_then(|pod| resource_version(pod));
                match result.base_version {
                    Some(failed) if held.is_some_and(|held| held > failed) => {
                        tracing::debug!(pod_uid = %uid, pod = %result.name, "The pod changed since the copy the status was merged into; merging again into the newer copy seen meanwhile");
                        self.conflicts.remove(&uid);
                    }
                    failed => {
                        self.api_pods.remove(&key);
                        if let Some(failed) = failed {
                            let floor = self.floors.entry(uid.clone()).or_insert(failed);
                            *floor = (*floor).max(failed);
                        }
                        // The first conflict is retried at once from a fresh GET; a pod that
                        // keeps changing under the writes waits a little, never long: a newer
                        // copy or a new version ends the wait.
                        let count = self.conflicts.get(&uid).map_or(1, |r| r.count + 1);
                        let wait = match count {
                            1 => Duration::ZERO,
                            n => jittered_backoff(
                                self.config.conflict_backoff_initial,
                                self.config.conflict_backoff_max,
                                n - 1,
                                &uid,
                            ),
                        };
                        tracing::debug!(pod_uid = %uid, pod = %result.name, retry_in = ?wait, "The pod changed since the copy the status was merged into; merging again");
                        self.conflicts.insert(
                            uid.clone(),
                            Retry { count, not_before: tokio::time::Instant::now() + wait },
                        );
                    }
                }
                self.dirty.insert(uid.clone());
            }
            Outcome::Failed(message) | Outcome::DeleteFailed(message) => {
                if matches!(result.outcome, Outcome::DeleteFailed(_))
                    && let Some(api_uid) = &result.api_uid
                {
                    self.written.insert(api_uid.clone(), result.version);
                }
                self.api_pods.remove(&key);
                let count = self.retries.get(&uid).map_or(1, |r| r.count + 1);
                let wait = backoff(self.config.backoff_initial, self.config.backoff_max, count);
                tracing::info!(pod_uid = %uid, pod = %result.name, error = %message, retry_in = ?wait, "Failed to update status for pod");
                self.retries
                    .insert(uid.clone(), Retry { count, not_before: tokio::time::Instant::now() + wait });
                self.dirty.insert(uid.clone());
            }
        }
        if !self.latest.contains_key(&uid) {
            // A reconcile dropped the pod while it was being written: nothing will write it
            // again, so nothing may wait for it.
            self.retries.remove(&uid);
            self.conflicts.remove(&uid);
            self.floors.remove(&uid);
            self.cancel_timer(&uid, ctx);
            self.unsynced_since.remove(&uid);
            self.dirty.remove(&uid);
        }
        if self.dirty.remove(&uid) {
            self.enqueue(&uid, ctx);
        } else {
            self.pump(ctx);
        }
    }

    fn forget(&mut self, uid: &str, key: &(String, String), ctx: &mut Context<Self>) {
        self.latest.remove(uid);
        self.unsynced_since.remove(uid);
        self.retries.remove(uid);
        self.conflicts.remove(uid);
        self.floors.remove(uid);
        self.cancel_timer(uid, ctx);
        self.rejected.remove(uid);
        self.update_seq.remove(uid);
        self.dirty.remove(uid);
        self.api_pods.remove(key);
    }

    /// Keeps `pod` as the merge base of its name unless the copy held is newer; returns whether
    /// it was kept.
    fn remember(&mut self, key: (String, String), pod: Arc<Pod>) -> bool {
        let newer = self.api_pods.get(&key).is_none_or(|old| is_newer_or_same(&pod, old));
        if newer {
            self.api_pods.insert(key, pod);
        }
        newer
    }

    /// Upstream `needsUpdate` and `needsReconcile`, over the statuses just listed. `since` is
    /// the update count when the list was asked for: updates received after it are newer than
    /// the list.
    fn reconcile(
        &mut self,
        statuses: HashMap<String, VersionedPodStatus>,
        since: u64,
        ctx: &mut Context<Self>,
    ) {
        let arrived: HashSet<String> =
            self.update_seq.iter().filter(|(_, seq)| **seq > since).map(|(uid, _)| uid.clone()).collect();
        self.latest = merge_listed(std::mem::take(&mut self.latest), statuses, &arrived);
        self.prune(ctx);
        let mut queue = Vec::new();
        for (uid, status) in &self.latest {
            let Some(api_uid) = self.api_uid(uid) else { continue };
            if self.rejected.get(uid) == Some(&status.version) {
                continue;
            }
            let key = (status.pod_namespace.clone(), status.pod_name.clone());
            let api_pod = self.api_pods.get(&key);
            let behind = self.written.get(&api_uid).is_none_or(|v| *v < status.version);
            let deletable = api_pod.is_some_and(|p| can_be_deleted(p, status.pod_is_finished));
            if behind || deletable {
                queue.push(uid.clone());
            } else if let Some(pod) = api_pod
                && self.drifted(pod, status)
            {
                tracing::info!(pod_uid = %uid, pod = %status.pod_name, "Pod status is inconsistent with cached status for pod, a reconciliation should be triggered");
                queue.push(uid.clone());
            }
        }
        for uid in queue {
            if let Some(api_uid) = self.api_uid(&uid) {
                self.written.remove(&api_uid);
            }
            self.enqueue(&uid, ctx);
        }
        // Pruning may have ended the last back-off a flush waited for.
        self.resolve_flushes();
    }

    /// Drops the per-pod state of pods without a status (the status manager forgot them), and
    /// stops their back-off timers: nothing will write them again, so nothing may wait for them.
    /// Merge bases are kept for the pods the host knows: a watch event often comes before the
    /// pod's first status.
    fn prune(&mut self, ctx: &mut Context<Self>) {
        let stopped: Vec<String> =
            self.backing_off.keys().filter(|uid| !self.latest.contains_key(*uid)).cloned().collect();
        for uid in stopped {
            self.cancel_timer(&uid, ctx);
        }
        let latest = &self.latest;
        self.update_seq.retain(|uid, _| latest.contains_key(uid));
        self.rejected.retain(|uid, _| latest.contains_key(uid));
        self.unsynced_since.retain(|uid, _| latest.contains_key(uid));
        self.retries.retain(|uid, _| latest.contains_key(uid));
        self.conflicts.retain(|uid, _| latest.contains_key(uid));
        self.floors.retain(|uid, _| latest.contains_key(uid));
        let in_flight = &self.in_flight;
        self.dirty.retain(|uid| latest.contains_key(uid) && in_flight.contains(uid));
        let api_uids: HashSet<String> = latest.keys().filter_map(|uid| self.api_uid(uid)).collect();
        self.written.retain(|uid, _| api_uids.contains(uid));
        let names: HashSet<(&str, &str)> =
            latest.values().map(|s| (s.pod_namespace.as_str(), s.pod_name.as_str())).collect();
        let pods = &self.config.pods;
        self.api_pods.retain(|(namespace, name), pod| {
            if names.contains(&(namespace.as_str(), name.as_str())) {
                return true;
            }
            let api_uid = pod.metadata.uid.as_deref().unwrap_or_default();
            let uid = pods.static_uid_for_mirror(api_uid).unwrap_or_else(|| api_uid.to_owned());
            pods.pod_by_uid(&uid).is_some()
        });
    }

    /// The API copy differs from ours in fields this writer owns.
    fn drifted(&self, pod: &Pod, status: &VersionedPodStatus) -> bool {
        let mut api = go_zero_values(pod.status.clone().unwrap_or_default());
        normalize_status(pod, &mut api);
        let ours = go_zero_values((*status.status).clone());
        let target = match self.config.owned_fields {
            OwnedFields::Kubelet => ours,
            // The write's own projection: only what the write would change is drift.
            OwnedFields::ReadinessOnly => go_zero_values(merge_readiness_only(
                &api,
                &ours,
                self.config.clock.now_time(),
                &self.config.ownership,
            )),
        };
        !is_pod_status_equal_for(&api, &target, &self.config.ownership)
    }

    fn resolve_flushes(&mut self) {
        if self.queue.is_empty()
            && self.in_flight.is_empty()
            && self.backing_off.is_empty()
            && !self.pump_scheduled
        {
            for flush in self.flushes.drain(..) {
                let _ = flush.send(());
            }
        }
    }
}

impl Actor for StatusSyncer {
    type Context = Context<Self>;

    fn started(&mut self, ctx: &mut Self::Context) {
        let period = self.config.reconcile_period;
        ctx.run_interval(period, |_, ctx| ctx.notify(Reconcile));
    }
}

impl Handler<PodStatusUpdated> for StatusSyncer {
    type Result = ();

    fn handle(&mut self, msg: PodStatusUpdated, ctx: &mut Self::Context) {
        let uid = msg.pod_uid;
        self.seq += 1;
        self.update_seq.insert(uid.clone(), self.seq);
        self.unsynced_since.entry(uid.clone()).or_insert_with(|| self.config.clock.now());
        self.latest.insert(uid.clone(), msg.status);
        // A new version is merged again from a fresh GET at once, however often the last one
        // conflicted.
        self.end_conflict_backoff(&uid, ctx);
        self.enqueue(&uid, ctx);
    }
}

impl Handler<ApiPodObserved> for StatusSyncer {
    type Result = ();

    fn handle(&mut self, msg: ApiPodObserved, ctx: &mut Self::Context) {
        let pod = msg.0;
        let key = (
            pod.metadata.namespace.clone().unwrap_or_default(),
            pod.metadata.name.clone().unwrap_or_default(),
        );
        let uid = source_uid(self.config.pods.as_ref(), &pod);
        if let Some(floor) = self.floors.get(&uid) {
            if resource_version(&pod).is_some_and(|version| version <= *floor) {
                tracing::trace!(pod_uid = %uid, pod = %key.1, "Watch event no newer than the copy a write conflicted with; not a merge base");
                return;
            }
            self.floors.remove(&uid);
        }
        // A fresher copy is what a conflicting write waits for.
        if self.remember(key, pod) {
            self.end_conflict_backoff(&uid, ctx);
        }
    }
}

impl Handler<ApiPodDeleted> for StatusSyncer {
    type Result = ();

    fn handle(&mut self, msg: ApiPodDeleted, _ctx: &mut Self::Context) {
        self.api_pods.remove(&(msg.namespace, msg.name));
    }
}

impl Handler<Reconcile> for StatusSyncer {
    type Result = ResponseActFuture<Self, ()>;

    fn handle(&mut self, _msg: Reconcile, _ctx: &mut Self::Context) -> Self::Result {
        let since = self.seq;
        let list = self.config.status_manager.send(ListStatuses);
        Box::pin(list.into_actor(self).map(move |statuses, act, ctx| match statuses {
            Ok(statuses) => act.reconcile(statuses, since, ctx),
            Err(err) => tracing::error!(error = %err, "Status manager did not answer the reconcile"),
        }))
    }
}

impl Handler<Pump> for StatusSyncer {
    type Result = ();

    fn handle(&mut self, _msg: Pump, ctx: &mut Self::Context) {
        self.pump_scheduled = false;
        self.pump(ctx);
    }
}

impl Handler<Flush> for StatusSyncer {
    type Result = ResponseFuture<()>;

    fn handle(&mut self, _msg: Flush, _ctx: &mut Self::Context) -> Self::Result {
        let (tx, rx) = oneshot::channel();
        self.flushes.push(tx);
        self.resolve_flushes();
        Box::pin(async move {
            let _ = rx.await;
        })
    }
}

impl Handler<GetSyncerStats> for StatusSyncer {
    type Result = MessageResult<GetSyncerStats>;

    fn handle(&mut self, _msg: GetSyncerStats, _ctx: &mut Self::Context) -> Self::Result {
        MessageResult(SyncerStats {
            statuses: self.latest.len(),
            written: self.written.len(),
            merge_bases: self.api_pods.len(),
            unsynced: self.unsynced_since.len(),
            retrying: self.retries.len(),
            conflicting: self.conflicts.len(),
            floors: self.floors.len(),
            rejected: self.rejected.len(),
            update_seqs: self.update_seq.len(),
            queued: self.queue.len(),
            in_flight: self.in_flight.len(),
            backing_off: self.backing_off.len(),
        })
    }
}

impl Handler<GetWrittenVersion> for StatusSyncer {
    type Result = Option<u64>;

    fn handle(&mut self, msg: GetWrittenVersion, _ctx: &mut Self::Context) -> Self::Result {
        self.written.get(&msg.0).copied()
    }
}

// === one pod's write ===

struct SyncJob {
    uid: String,
    status: VersionedPodStatus,
    base: Option<Arc<Pod>>,
    client: kube::Client,
    limiter: RateLimiter,
    field_manager: String,
    ownership: ConditionOwnership,
    owned_fields: OwnedFields,
    pods: Arc<dyn PodLookup>,
    now: k8s_openapi::apimachinery::pkg::apis::meta::v1::Time,
}

#[derive(Debug, Clone, PartialEq, Eq)]
enum Outcome {
    Updated,
    Unchanged,
    NotFound,
    Recreated,
    Invalid(String),
    /// The pod changed after the merge base was read (ReadinessOnly's resourceVersion
    /// precondition).
    Conflict,
    Deleted,
    Failed(String),
    DeleteFailed(String),
}

impl Outcome {
    fn label(&self) -> &'static str {
        match self {
            Outcome::Updated => "updated",
            Outcome::Unchanged => "unchanged",
            Outcome::NotFound => "not_found",
            Outcome::Recreated => "recreated",
            Outcome::Invalid(_) => "invalid",
            Outcome::Conflict => "conflict",
            Outcome::Deleted => "deleted",
            Outcome::Failed(_) | Outcome::DeleteFailed(_) => "error",
        }
    }
}

struct JobResult {
    uid: String,
    namespace: String,
    name: String,
    version: u64,
    outcome: Outcome,
    /// The API pod UID the status belongs to, once known.
    api_uid: Option<String>,
    /// The API's copy after this write, the next merge base.
    fresh: Option<Arc<Pod>>,
    /// The resourceVersion of the copy the status was merged into (for a conflict's floor).
    base_version: Option<u64>,
}

impl SyncJob {
    async fn run(self) -> JobResult {
        let mut result = JobResult {
            uid: self.uid.clone(),
            namespace: self.status.pod_namespace.clone(),
            name: self.status.pod_name.clone(),
            version: self.status.version,
            outcome: Outcome::Unchanged,
            api_uid: None,
            fresh: None,
            base_version: None,
        };
        let api: Api<Pod> = Api::namespaced(self.client.clone(), &result.namespace);
        // The token of the request after the GET (the PATCH, or a DELETE), taken with the GET's:
        // the limiter is shared by every request the agent sends, and queueing behind them
        // between the two would let the copy go stale. Given back when not needed.
        let mut spare: Option<SpareToken> = None;
        // A cached copy of another pod under this name is a watch that has not caught up with
        // a recreation yet: only the server can say whether our pod is gone.
        let base = match self.base.clone() {
            Some(base) if self.source_uid(&base) == self.uid => base,
            _ => {
                spare = Some(self.limiter.acquire_with_spare().await);
                let got = api.get(&result.name).await;
                record_request("get", &got);
                match got {
                    Ok(pod) => Arc::new(pod),
                    Err(err) if is_code(&err, 404) => {
                        result.outcome = Outcome::NotFound;
                        return result;
                    }
                    Err(err) => {
                        result.outcome = Outcome::Failed(format!("get: {err}"));
                        return result;
                    }
                }
            }
        };
        if self.source_uid(&base) != self.uid {
            result.outcome = Outcome::Recreated;
            return result;
        }
        let api_uid = base.metadata.uid.clone().unwrap_or_default();
        result.api_uid = Some(api_uid.clone());
        result.base_version = resource_version(&base);

        let api_status = go_zero_values(base.status.clone().unwrap_or_default());
        let merged = go_zero_values(match self.owned_fields {
            OwnedFields::Kubelet => merge_pod_status_for(
                &api_status,
                &self.status.status,
                could_have_running_containers(&self.status.status, self.status.pod_is_finished),
                self.now.clone(),
                &self.ownership,
            ),
            OwnedFields::ReadinessOnly => {
                merge_readiness_only(&api_status, &self.status.status, self.now.clone(), &self.ownership)
            }
        });
        let patch = match pod_status_patch(&api_uid, &api_status, &merged) {
            Ok(Some(body))
                if self.owned_fields == OwnedFields::ReadinessOnly && replaces_container_statuses(&body) =>
            {
                Some(with_resource_version(body, base.metadata.resource_version.as_deref()))
            }
            Ok(patch) => patch,
            Err(err) => {
                result.outcome = Outcome::Invalid(err.to_string());
                return result;
            }
        };
        let fresh = match patch {
            None => {
                tracing::trace!(pod_uid = %self.uid, pod = %result.name, "Status for pod is up-to-date");
                base
            }
            Some(body) => {
                self.take_token(spare.take()).await;
                let params =
                    PatchParams { field_manager: Some(self.field_manager.clone()), ..Default::default() };
                let patched = api.patch_status(&result.name, &params, &Patch::Strategic(body)).await;
                record_request("patch", &patched);
                match patched {
                    Ok(pod) => {
                        result.outcome = Outcome::Updated;
                        Arc::new(pod)
                    }
                    Err(err) if is_uid_mismatch(&err) => {
                        result.outcome = Outcome::Recreated;
                        return result;
                    }
                    Err(err) if is_code(&err, 404) => {
                        result.outcome = Outcome::NotFound;
                        return result;
                    }
                    Err(err) if is_code(&err, 409) => {
                        result.outcome = Outcome::Conflict;
                        return result;
                    }
                    Err(err) if is_code(&err, 422) => {
                        result.outcome = Outcome::Invalid(err.to_string());
                        return result;
                    }
                    Err(err) => {
                        result.outcome = Outcome::Failed(format!("patch: {err}"));
                        return result;
                    }
                }
            }
        };
        result.fresh = Some(fresh.clone());

        if can_be_deleted(&fresh, self.status.pod_is_finished) {
            self.take_token(spare.take()).await;
            let params = DeleteParams {
                grace_period_seconds: Some(0),
                preconditions: Some(Preconditions { uid: Some(api_uid), resource_version: None }),
                ..Default::default()
            };
            let deleted = api.delete(&result.name, &params).await;
            record_request("delete", &deleted);
            result.outcome = match deleted {
                Ok(_) => Outcome::Deleted,
                Err(err) if is_code(&err, 404) => Outcome::Deleted,
                Err(err) if is_code(&err, 409) => Outcome::Recreated,
                Err(err) => Outcome::DeleteFailed(format!("delete: {err}")),
            };
        }
        result
    }

    fn source_uid(&self, pod: &Pod) -> String {
        source_uid(self.pods.as_ref(), pod)
    }

    /// Spends the token taken ahead with the GET, or waits for one.
    async fn take_token(&self, spare: Option<SpareToken>) {
        match spare {
            Some(token) => token.spend(),
            None => self.limiter.acquire().await,
        }
    }
}

// === helpers ===

/// The source pod UID an API copy belongs to (a mirror pod's static pod).
fn source_uid(pods: &dyn PodLookup, pod: &Pod) -> String {
    let api_uid = pod.metadata.uid.clone().unwrap_or_default();
    pods.static_uid_for_mirror(&api_uid).unwrap_or(api_uid)
}

/// The statuses to write after a reconcile listed `listed`: per pod the newer version of the
/// list's and the one already held (updates keep arriving while the list is on its way); a pod
/// missing from the list is kept only if its update arrived after the list was asked for
/// (`arrived`), as the list may predate it; otherwise the status manager forgot it.
fn merge_listed(
    mut current: HashMap<String, VersionedPodStatus>,
    listed: HashMap<String, VersionedPodStatus>,
    arrived: &HashSet<String>,
) -> HashMap<String, VersionedPodStatus> {
    let mut merged: HashMap<String, VersionedPodStatus> = HashMap::with_capacity(listed.len());
    for (uid, status) in listed {
        let keep = match current.remove(&uid) {
            Some(held) if held.version > status.version => held,
            _ => status,
        };
        merged.insert(uid, keep);
    }
    for (uid, held) in current {
        if arrived.contains(&uid) {
            merged.insert(uid, held);
        }
    }
    merged
}

/// The status as Go holds it: `state` and `lastState` of a container status are value structs
/// in Go, so an empty one is the same as none, and the API server always sends them (`{}`).
/// k8s-openapi keeps the difference; without this, every patch against an API copy would
/// resend the container statuses and every reconcile would see drift.
fn go_zero_values(mut status: PodStatus) -> PodStatus {
    fn clear(state: &mut Option<ContainerState>) {
        if state
            .as_ref()
            .is_some_and(|s| s.running.is_none() && s.terminated.is_none() && s.waiting.is_none())
        {
            *state = None;
        }
    }
    let lists: [&mut Option<Vec<ContainerStatus>>; 3] = [
        &mut status.init_container_statuses,
        &mut status.container_statuses,
        &mut status.ephemeral_container_statuses,
    ];
    for list in lists {
        for c in list.iter_mut().flatten() {
            clear(&mut c.state);
            clear(&mut c.last_state);
        }
    }
    status
}

/// Whether `pod` is at least as new as `old`. resourceVersions are etcd revisions, so
/// numerically comparable within one cluster; when either does not parse, the later arrival
/// wins.
fn is_newer_or_same(pod: &Pod, old: &Pod) -> bool {
    match (resource_version(pod), resource_version(old)) {
        (Some(new), Some(old)) => new >= old,
        _ => true,
    }
}

/// Upstream `canBeDeleted`: a pod with a deletion timestamp, not a mirror pod, whose API phase
/// is terminal, and that the kubelet finished (TerminatePod ran).
pub fn can_be_deleted(pod: &Pod, finished: bool) -> bool {
    if pod.metadata.deletion_timestamp.is_none() || is_mirror_pod(pod) {
        return false;
    }
    let phase = pod.status.as_ref().and_then(|s| s.phase.as_deref());
    if !is_terminal_phase(phase) {
        tracing::trace!(
            pod = pod.metadata.name.as_deref().unwrap_or_default(),
            "Delaying pod deletion as the phase is non-terminal"
        );
        return false;
    }
    finished
}

pub fn is_mirror_pod(pod: &Pod) -> bool {
    pod.metadata.annotations.as_ref().is_some_and(|a| a.contains_key(MIRROR_POD_ANNOTATION))
}

/// Whether any container of the pod may still run, which holds back a terminal phase (spec
/// §5.12 step 3). Upstream `PodCouldHaveRunningContainers` asks the pod workers: true until the
/// pod's termination finished (all containers stopped), after which `TerminatePod` runs. We have
/// no pod workers, so:
/// * a finished pod (`TerminatePod` ran, `podIsFinished`) has none: upstream only gets there
///   once its worker stopped every container;
/// * otherwise a container that is running, or whose state is unknown (none, or empty), could
///   run. A waiting container does not run and so does not hold the phase back: `TerminatePod`
///   leaves regular containers waiting (`PodInitializing`) when the pod never initialized, and
///   counting them would keep such a pod from ever reaching its terminal phase and deletion.
pub fn could_have_running_containers(status: &PodStatus, finished: bool) -> bool {
    if finished {
        return false;
    }
    status.init_container_statuses.iter().flatten().chain(status.container_statuses.iter().flatten()).any(
        |c| {
            c.state
                .as_ref()
                .is_none_or(|s| s.running.is_some() || (s.terminated.is_none() && s.waiting.is_none()))
        },
    )
}

/// The status lists that are atomic: a patch carrying one replaces it whole.
const CONTAINER_STATUS_LISTS: [&str; 3] =
    ["containerStatuses", "initContainerStatuses", "ephemeralContainerStatuses"];

/// Whether a status patch replaces a container status list, and so could undo another writer's
/// change made after the merge base was read (conditions merge by type and cannot).
fn replaces_container_statuses(patch: &serde_json::Value) -> bool {
    patch
        .get("status")
        .and_then(|s| s.as_object())
        .is_some_and(|status| CONTAINER_STATUS_LISTS.iter().any(|list| status.contains_key(*list)))
}

/// Adds the merge base's resourceVersion to a status patch: the server then applies the patch
/// only to that version of the pod (409 Conflict otherwise).
fn with_resource_version(mut patch: serde_json::Value, resource_version: Option<&str>) -> serde_json::Value {
    if let (Some(version), Some(metadata)) = (
        resource_version.filter(|v| !v.is_empty()),
        patch.get_mut("metadata").and_then(|m| m.as_object_mut()),
    ) {
        metadata.insert("resourceVersion".to_owned(), serde_json::Value::String(version.to_owned()));
    }
    patch
}

fn resource_version(pod: &Pod) -> Option<u64> {
    pod.metadata.resource_version.as_deref().and_then(|v| v.parse().ok())
}

fn is_code(err: &kube::Error, code: u16) -> bool {
    matches!(err, kube::Error::Api(status) if status.code == code)
}

/// A PATCH whose `metadata.uid` does not match: the real server answers 422 Invalid with the
/// cause on field `metadata.uid` (the pod was deleted and recreated under the same name).
fn is_uid_mismatch(err: &kube::Error) -> bool {
    match err {
        kube::Error::Api(status) if status.code == 422 => {
            status.details.as_ref().is_some_and(|d| d.causes.iter().any(|c| c.field == "metadata.uid"))
        }
        _ => false,
    }
}

fn record_request<T>(verb: &'static str, result: &Result<T, kube::Error>) {
    let code = match result {
        Ok(_) => "200".to_owned(),
        Err(kube::Error::Api(status)) => status.code.to_string(),
        Err(_) => "0".to_owned(),
    };
    metrics::counter!(names::PROBELET_API_REQUESTS_TOTAL, "verb" => verb, "code" => code).increment(1);
}

/// Starts a syncer and subscribes it to the status manager.
pub fn start_syncer(config: SyncerConfig) -> Addr<StatusSyncer> {
    let status_manager = config.status_manager.clone();
    let syncer = StatusSyncer::new(config).start();
    status_manager.do_send(crate::status::manager::SubscribeStatus(syncer.clone().recipient()));
    syncer
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::{ContainerState, ContainerStateTerminated, ContainerStatus};
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, Time};
    use std::collections::BTreeMap;

    fn pod(deleting: bool, phase: &str, mirror: bool) -> Pod {
        Pod {
            metadata: ObjectMeta {
                deletion_timestamp: deleting.then_some(Time(Timestamp::UNIX_EPOCH)),
                annotations: mirror
                    .then(|| BTreeMap::from([(MIRROR_POD_ANNOTATION.to_owned(), "x".to_owned())])),
                ..Default::default()
            },
            spec: None,
            status: Some(PodStatus { phase: Some(phase.into()), ..Default::default() }),
        }
    }

    #[test]
    fn deletion_rules() {
        let cases = [
            ("no deletion timestamp", pod(false, "Failed", false), true, false),
            ("mirror pod", pod(true, "Failed", true), true, false),
            ("running phase", pod(true, "Running", false), true, false),
            ("not finished", pod(true, "Succeeded", false), false, false),
            ("finished terminal deleting", pod(true, "Succeeded", false), true, true),
            ("failed", pod(true, "Failed", false), true, true),
        ];
        for (name, pod, finished, want) in cases {
            assert_eq!(can_be_deleted(&pod, finished), want, "case {name}");
        }
    }

    fn versioned(version: u64) -> VersionedPodStatus {
        VersionedPodStatus {
            version,
            pod_name: "web".into(),
            pod_namespace: "default".into(),
            at: None,
            pod_is_finished: false,
            status: Arc::new(PodStatus::default()),
        }
    }

    #[test]
    fn a_reconcile_list_never_rolls_a_pod_back() {
        let current = HashMap::from([
            ("newer-held".to_owned(), versioned(5)),
            ("older-held".to_owned(), versioned(2)),
            ("arrived-after-the-list".to_owned(), versioned(1)),
            ("forgotten".to_owned(), versioned(3)),
        ]);
        let listed = HashMap::from([
            ("newer-held".to_owned(), versioned(4)),
            ("older-held".to_owned(), versioned(3)),
            ("only-listed".to_owned(), versioned(1)),
        ]);
        let arrived = HashSet::from(["arrived-after-the-list".to_owned(), "newer-held".to_owned()]);
        let merged = merge_listed(current, listed, &arrived);
        let mut got: Vec<(&str, u64)> = merged.iter().map(|(k, v)| (k.as_str(), v.version)).collect();
        got.sort();
        assert_eq!(
            got,
            [("arrived-after-the-list", 1), ("newer-held", 5), ("older-held", 3), ("only-listed", 1)],
            "a pod the status manager forgot is dropped unless its update came after the list"
        );
    }

    #[test]
    fn an_empty_container_state_is_no_state() {
        let running = ContainerState {
            running: Some(k8s_openapi::api::core::v1::ContainerStateRunning::default()),
            ..Default::default()
        };
        let status = |state: Option<ContainerState>, last: Option<ContainerState>| PodStatus {
            container_statuses: Some(vec![ContainerStatus {
                name: "a".into(),
                state,
                last_state: last,
                ..Default::default()
            }]),
            ..Default::default()
        };
        assert_eq!(
            go_zero_values(status(Some(running.clone()), Some(ContainerState::default()))),
            status(Some(running.clone()), None)
        );
        assert_eq!(go_zero_values(status(Some(ContainerState::default()), None)), status(None, None));
        let kept = status(Some(running.clone()), Some(running));
        assert_eq!(go_zero_values(kept.clone()), kept, "a state with content stays");
    }

    #[test]
    fn the_newer_resource_version_wins() {
        let at = |rv: Option<&str>| Pod {
            metadata: ObjectMeta { resource_version: rv.map(Into::into), ..Default::default() },
            ..Default::default()
        };
        assert!(is_newer_or_same(&at(Some("10")), &at(Some("9"))));
        assert!(is_newer_or_same(&at(Some("10")), &at(Some("10"))));
        assert!(!is_newer_or_same(&at(Some("9")), &at(Some("10"))), "numeric, not textual");
        assert!(is_newer_or_same(&at(Some("9")), &at(None)), "an unparsable one is replaced");
        assert!(is_newer_or_same(&at(None), &at(Some("9"))), "and replaces");
    }

    #[test]
    fn running_containers_hold_terminal_phase() {
        use k8s_openapi::api::core::v1::{ContainerStateRunning, ContainerStateWaiting};
        let with = |running: bool, waiting: bool, terminated: bool| ContainerState {
            running: running.then(ContainerStateRunning::default),
            waiting: waiting.then(ContainerStateWaiting::default),
            terminated: terminated.then(ContainerStateTerminated::default),
        };
        let c = |name: &str, state: Option<ContainerState>| ContainerStatus {
            name: name.into(),
            state,
            ..Default::default()
        };
        let regular =
            |list: Vec<ContainerStatus>| PodStatus { container_statuses: Some(list), ..Default::default() };
        let init = |list: Vec<ContainerStatus>| PodStatus {
            init_container_statuses: Some(list),
            ..Default::default()
        };
        let cases = [
            ("no containers", PodStatus::default(), false, false),
            ("all terminated", regular(vec![c("a", Some(with(false, false, true)))]), false, false),
            (
                "one running",
                regular(vec![c("a", Some(with(false, false, true))), c("b", Some(with(true, false, false)))]),
                false,
                true,
            ),
            ("no state", regular(vec![c("a", None)]), false, true),
            ("empty state", regular(vec![c("a", Some(ContainerState::default()))]), false, true),
            ("waiting", regular(vec![c("a", Some(with(false, true, false)))]), false, false),
            (
                "waiting after init was terminated",
                PodStatus {
                    init_container_statuses: Some(vec![c("i", Some(with(false, false, true)))]),
                    container_statuses: Some(vec![c("a", Some(with(false, true, false)))]),
                    ..Default::default()
                },
                false,
                false,
            ),
            ("init running", init(vec![c("i", Some(with(true, false, false)))]), false, true),
            (
                "finished, even with one running",
                regular(vec![c("a", Some(with(true, false, false)))]),
                true,
                false,
            ),
            ("finished, no state", regular(vec![c("a", None)]), true, false),
        ];
        for (name, status, finished, want) in cases {
            assert_eq!(could_have_running_containers(&status, finished), want, "case: {name}");
        }
    }

    #[test]
    fn the_resource_version_goes_into_the_patch_metadata() {
        let patch = serde_json::json!({"metadata": {"uid": "u"}, "status": {"phase": "Running"}});
        assert_eq!(
            with_resource_version(patch.clone(), Some("42")),
            serde_json::json!({"metadata": {"uid": "u", "resourceVersion": "42"}, "status": {"phase": "Running"}})
        );
        assert_eq!(with_resource_version(patch.clone(), None), patch, "no version, no precondition");
        assert_eq!(with_resource_version(patch.clone(), Some("")), patch);
    }

    #[test]
    fn only_a_patch_of_a_container_status_list_needs_the_resource_version() {
        let cases = [
            ("containers", serde_json::json!({"status": {"containerStatuses": []}}), true),
            ("init containers", serde_json::json!({"status": {"initContainerStatuses": []}}), true),
            ("ephemeral containers", serde_json::json!({"status": {"ephemeralContainerStatuses": []}}), true),
            (
                "conditions and containers",
                serde_json::json!({"status": {"conditions": [], "containerStatuses": []}}),
                true,
            ),
            (
                "conditions only",
                serde_json::json!({"status": {"$setElementOrder/conditions": [], "conditions": []}}),
                false,
            ),
            ("no status", serde_json::json!({"metadata": {"uid": "u"}}), false),
            ("a status that is no object", serde_json::json!({"status": null}), false),
        ];
        for (name, patch, want) in cases {
            assert_eq!(replaces_container_statuses(&patch), want, "case: {name}");
        }
    }
}
