//! The status syncer actor (upstream: the status manager's `syncBatch` / `syncPod`): writes the
//! status manager's pod statuses to the API server.
//!
//! Per pod only the latest version is written; different pods are written concurrently (up to
//! `concurrency`), and every request takes a token from the shared [`RateLimiter`]. The write
//! is the kubelet's: `mergePodStatus`, then a two-way strategic merge patch of `status` with
//! `metadata.uid` as a precondition, nothing sent when it is empty. The merge base is the
//! freshest pod this actor has seen (a watch event or its last PATCH response), kept as the
//! server's JSON ([`ApiPod`]) so that a write never drops a field the typed structs lack; it GETs
//! only when it has none, when the copy is of another pod (a watch behind a recreation), or after a
//! failure. A write that GETs takes the PATCH's token together with the GET's, so that other
//! senders queueing on the shared limiter cannot widen the window between the two. Failures are
//! retried with per-pod exponential back-off; a status the server rejects as invalid (422) is
//! sent again by a full reconcile, after 1, 2, 4, … up to 30 of them, or at once when it changes. A full reconcile every `reconcile_period` rewrites any drift of the
//! fields this writer owns. A finished pod with a deletion timestamp and a terminal API phase is
//! deleted with grace 0 and a UID precondition; a mirror pod never is. Each pod's state
//! (versions, back-offs, latency starts) is one `PodSync`, dropped with the pod's status by the
//! reconcile once the status manager no longer has it, together with its back-off timer, so
//! that `Flush` never waits for such a pod. The actor keeps the queue, the request budget, the
//! timers and the merge bases; the write itself is `SyncJob` (`job`), the pure rules are in
//! [`rules`](super::rules).
//!
//! This file holds the actor, its queue and its timers. Beside it: the settings (`config`), the
//! API copies it tracks (`api_pods`), the full reconcile (`reconcile`) and what it can be asked
//! about its state (`stats`).
//!
//! Which status fields the syncer writes is a parameter, [`OwnedFields`]:
//! * [`OwnedFields::Kubelet`] (the default, upstream's behaviour): the status manager's status
//!   is the truth for everything but foreign conditions and claim statuses (`mergePodStatus`,
//!   [`merge_pod_status_for`](crate::status::merge::merge_pod_status_for)), and a reconcile
//!   rewrites drift in any of it.
//! * [`OwnedFields::ReadinessOnly`] (cluster mode, where the node's runtime writes phase, IPs
//!   and container states): the patch is built from the API copy with only `ready`/`started` of
//!   the containers the status manager knows under the same container ID and the owned
//!   conditions laid over it ([`merge_readiness_only`]); a reconcile sees drift only in those.
//!   The container status lists it resends are the server's own items with only `ready` and
//!   `started` changed (`rules::readiness_only_sides`).
//!   As the container status lists are atomic, sent whole, a patch that carries one also carries
//!   the copy's `metadata.resourceVersion` as a precondition: when the runtime wrote after the
//!   copy was taken, the server answers 409 Conflict and the write is merged again from a fresh
//!   copy, so a stale copy never undoes the runtime's writes. (Conditions merge by type, so a
//!   conditions-only patch needs no precondition and is sent without one; from the third
//!   conflict in a row the owned conditions are sent alone that way first, so the Ready
//!   condition lands while the container statuses are still retried: docs/sync.md §7.5.)
//!
//! Conflicts have a back-off of their own, separate from the failure back-off: the first is
//! retried at once from a fresh GET, further ones after a jittered wait that starts short
//! ([`SyncerConfig::conflict_backoff_initial`], at most [`SyncerConfig::conflict_backoff_max`]);
//! every fifth in a row is logged at info.
//! It ends early when what it waits for comes: a new status version, or a watch copy newer than
//! the one that conflicted. The conflicting copy's resourceVersion is kept as a floor until then,
//! so that a watch event that is older still is not taken as the next merge base.
//!
//! [`RateLimiter`]: super::rate::RateLimiter
//! [`merge_readiness_only`]: crate::status::merge::merge_readiness_only

use std::collections::{HashMap, HashSet, VecDeque};
use std::sync::Arc;

use actix::prelude::*;
use tokio::sync::oneshot;

use super::api_pod::ApiPod;
use super::job::{FAILED_GET_LINE, JobResult, SyncJob, WriteOutcome};
use super::pod_sync::{MergeBase, PodSync, merge_base_after};
use super::rules::resource_version;
pub use super::rules::{MIRROR_POD_ANNOTATION, can_be_deleted, could_have_running_containers, is_mirror_pod};
use crate::capacity::ShrinkAfterRemoval;
use crate::format::pod_key;
use crate::metrics as names;
use crate::status::manager::{DeletePodStatus, PodStatusUpdated, SubscribeStatus};
use crate::vocabulary::PodUid;

mod api_pods;
mod config;
mod reconcile;
mod stats;

pub use api_pods::{ApiPodDeleted, ApiPodListed, ApiPodObserved};
pub use config::{FAILURE_BACKOFF_INITIAL, FAILURE_BACKOFF_MAX, OwnedFields, StatusSource, SyncerConfig};
pub use reconcile::Reconcile;
pub use stats::{GetSyncerStats, GetWrittenVersion, SyncerStats};

// === messages ===

/// Resolves once nothing is queued, waiting out a back-off or being written (graceful shutdown,
/// tests).
#[derive(Debug, Clone, Copy, Message)]
#[rtype(result = "()")]
pub struct Flush;

/// Start queued writes (scheduled after the mailbox drains).
#[derive(Debug, Clone, Copy, Message)]
#[rtype(result = "()")]
struct Pump;

// === the actor ===

/// The status syncer actor (upstream: the status manager's sync loop). Start it with
/// [`start_syncer`], which also subscribes it to the status manager; the agent's standalone mode
/// runs none.
pub struct StatusSyncer {
    config: SyncerConfig,
    /// Each pod's sync state, by source UID: one entry per pod with a status.
    pods: HashMap<PodUid, PodSync>,
    /// Merge bases: the freshest API copy of each pod, by namespace/name. Kept apart from
    /// [`PodSync`]: a watch event often comes before the pod's first status.
    api_pods: HashMap<(String, String), Arc<ApiPod>>,
    queue: VecDeque<PodUid>,
    queued: HashSet<PodUid>,
    in_flight: HashSet<PodUid>,
    /// Pods with a timer running to enqueue them when their back-off ends, and the timer (to
    /// cancel when the back-off ends early or the pod is dropped).
    backing_off: HashMap<PodUid, SpawnHandle>,
    /// Counts status updates received (each pod's latest is its [`PodSync::update_seq`]).
    seq: u64,
    flushes: Vec<oneshot::Sender<()>>,
    /// A pump is scheduled for after the mailbox drains, so updates that arrived together
    /// are coalesced into one write.
    pump_scheduled: bool,
    /// Whether the host is gone ([`StopWhenHostGone`]), asked at each reconcile tick.
    host_gone: Option<Box<dyn Fn() -> bool + Send>>,
}

impl StatusSyncer {
    /// A syncer that has written nothing yet. Started this way it hears of no update until it is
    /// subscribed: [`start_syncer`] does both.
    pub fn new(config: SyncerConfig) -> Self {
        StatusSyncer {
            config,
            pods: HashMap::new(),
            api_pods: HashMap::new(),
            queue: VecDeque::new(),
            queued: HashSet::new(),
            in_flight: HashSet::new(),
            backing_off: HashMap::new(),
            seq: 0,
            flushes: Vec::new(),
            pump_scheduled: false,
            host_gone: None,
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
            if let Some(pod) = self.pods.get_mut(uid) {
                pod.dirty = true;
            }
            return;
        }
        if self.queued.insert(uid.into()) {
            self.queue.push_back(uid.into());
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
            if let Some(not_before) = self.pods.get(&uid).and_then(PodSync::not_before)
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
        self.queued.shrink_after_removal();
        for (uid, wait) in deferred {
            let key = uid.clone();
            let timer = ctx.run_later(wait, move |act, ctx| {
                act.backing_off.remove(&key);
                act.backing_off.shrink_after_removal();
                act.enqueue(&key, ctx);
            });
            self.backing_off.insert(uid, timer);
        }
        self.resolve_flushes();
    }

    /// Stops the pod's back-off timer, if one runs.
    fn cancel_timer(&mut self, uid: &str, ctx: &mut Context<Self>) {
        if let Some(timer) = self.backing_off.remove(uid) {
            ctx.cancel_future(timer);
            self.backing_off.shrink_after_removal();
        }
    }

    /// Ends the pod's conflict back-off (what it waited for came) and writes it again unless a
    /// failure back-off still holds it.
    fn end_conflict_backoff(&mut self, uid: &str, ctx: &mut Context<Self>) {
        if self.pods.get_mut(uid).and_then(|pod| pod.conflict.take()).is_some() {
            self.cancel_timer(uid, ctx);
            self.enqueue(uid, ctx);
        }
    }

    fn start(&mut self, uid: PodUid, ctx: &mut Context<Self>) {
        let Some((status, conditions_alone)) =
            self.pods.get(&uid).map(|pod| (pod.status.clone(), pod.conditions_go_alone()))
        else {
            return;
        };
        if self.config.pods.is_static(&uid) && self.api_uid(&uid).is_none() {
            tracing::trace!(
                podUID = uid.as_str(),
                pod = pod_key(&status.pod_namespace, &status.pod_name),
                "Static pod does not have a corresponding mirror pod; skipping"
            );
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
            request_timeout: self.config.request_timeout,
            conditions_alone,
        };
        self.in_flight.insert(uid);
        ctx.spawn(job.run().into_actor(self).map(|result, act, ctx| act.finish(result, ctx)));
    }

    fn finish(&mut self, result: JobResult, ctx: &mut Context<Self>) {
        let uid = result.uid.clone();
        self.in_flight.remove(&uid);
        let key = (result.namespace.clone(), result.name.clone());
        if result.conditions_written {
            // A write of its own, that landed: the conditions alone, before the rest.
            metrics::counter!(names::PROBELET_STATUS_SYNCS_TOTAL, "outcome" => WriteOutcome::Updated.label())
                .increment(1);
        }
        metrics::counter!(names::PROBELET_STATUS_SYNCS_TOTAL, "outcome" => result.outcome.label())
            .increment(1);
        let held = self.api_pods.get(&key).and_then(|pod| resource_version(&pod.pod));
        let backoffs = self.config.backoffs();
        let settled = self
            .pods
            .get_mut(&uid)
            .map(|pod| pod.on_outcome(&result, held, tokio::time::Instant::now(), &backoffs))
            .unwrap_or_default();
        match merge_base_after(&result.outcome, held, result.base_version) {
            MergeBase::Remember => match result.fresh.clone() {
                // A watch event that arrived during the write may be newer still.
                Some(pod) => {
                    self.remember(key.clone(), pod);
                }
                // Written, but the answer could not be read (docs/sync.md, "A pod that cannot be
                // read"): the copy held is older than the write, so it goes, and the next write
                // GETs.
                None => {
                    if self.api_pods.remove(&key).is_some() {
                        self.api_pods.shrink_after_removal();
                    }
                }
            },
            MergeBase::Drop => {
                if self.api_pods.remove(&key).is_some() {
                    self.api_pods.shrink_after_removal();
                }
            }
            MergeBase::Keep => {}
        }
        // The pod as upstream's sync lines name it (klog's `KRef`), built only for a line logged.
        let pod = || pod_key(&result.namespace, &result.name);
        match &result.outcome {
            WriteOutcome::Updated | WriteOutcome::Unchanged => {
                if result.outcome == WriteOutcome::Updated {
                    // Upstream logs the status it merged; here the status the server answered
                    // with, which is that status as written (none when the answer could not be
                    // read).
                    match result.fresh.as_ref().and_then(|fresh| fresh.status_json()) {
                        Some(status) => tracing::debug!(
                            pod = pod(), statusVersion = result.version, status = %status,
                            "Status for pod updated successfully"
                        ),
                        None => tracing::debug!(
                            pod = pod(),
                            statusVersion = result.version,
                            "Status for pod updated successfully"
                        ),
                    }
                }
                if let Some(since) = settled.synced_since {
                    let seconds = since.elapsed().as_secs_f64();
                    metrics::histogram!(names::PROBELET_STATUS_SYNC_DURATION_SECONDS).record(seconds);
                }
            }
            WriteOutcome::NotFound => {
                tracing::debug!(podUID = uid.as_str(), pod = pod(), "Pod does not exist on the server");
            }
            WriteOutcome::Recreated => {
                tracing::debug!(
                    pod = pod(),
                    oldPodUID = uid.as_str(),
                    podUID = result.recreated_as.as_deref().unwrap_or_default(),
                    "Pod was deleted and then recreated, skipping status update"
                );
                self.forget(&uid, &key, ctx);
                self.config.status_manager.delete.do_send(DeletePodStatus(uid.clone()));
            }
            WriteOutcome::Invalid(message) => {
                // Upstream's line for any failed patch; the wait is in full reconciles.
                let reconciles =
                    self.pods.get(&uid).and_then(|pod| pod.rejected).map_or(1, |r| r.reconciles_left + 1);
                let retry_in = self.config.reconcile_period * reconciles;
                tracing::info!(pod = pod(), err = message.as_str(), retry_in = ?retry_in, "Failed to update status for pod");
            }
            WriteOutcome::Deleted => {
                tracing::debug!(pod = pod(), "Pod fully terminated and removed from etcd");
                self.forget(&uid, &key, ctx);
                self.config.status_manager.delete.do_send(DeletePodStatus(uid.clone()));
            }
            WriteOutcome::Conflict => match (settled.conflicts_to_report, settled.retry_in) {
                // Upstream's line for any failed patch: a pod the server keeps refusing is an
                // operator's business, and at debug alone it would go unseen. Counted whether
                // the next write waits or merges at once into a newer copy already at hand.
                (Some(count), wait) => {
                    let error = format!(
                        "409 Conflict on {count} writes in a row: the pod changed since each copy the status was merged into"
                    );
                    let retry_in = wait.unwrap_or_default();
                    tracing::info!(pod = pod(), err = error.as_str(), retry_in = ?retry_in, "Failed to update status for pod");
                }
                (None, None) => {
                    tracing::debug!(pod_uid = %uid, pod = %pod(), "The pod changed since the copy the status was merged into; merging again into the newer copy seen meanwhile");
                }
                (None, Some(wait)) => {
                    tracing::debug!(pod_uid = %uid, pod = %pod(), retry_in = ?wait, "The pod changed since the copy the status was merged into; merging again");
                }
            },
            WriteOutcome::Failed(message) | WriteOutcome::DeleteFailed(message) => {
                let retry_in = settled.retry_in.unwrap_or_default();
                let line = result.outcome.failure_line();
                // Upstream's failed GET names the pod's UID too; its failed PATCH and DELETE
                // do not.
                if line == FAILED_GET_LINE {
                    tracing::info!(podUID = uid.as_str(), pod = pod(), err = message.as_str(), retry_in = ?retry_in, "{line}");
                } else {
                    tracing::info!(pod = pod(), err = message.as_str(), retry_in = ?retry_in, "{line}");
                }
            }
        }
        let dirty = match self.pods.get_mut(&uid) {
            Some(pod) => std::mem::take(&mut pod.dirty),
            None => {
                // A reconcile dropped the pod while it was being written: nothing will write it
                // again, so nothing may wait for it.
                self.cancel_timer(&uid, ctx);
                false
            }
        };
        if dirty {
            self.enqueue(&uid, ctx);
        } else {
            self.pump(ctx);
        }
    }

    fn forget(&mut self, uid: &str, key: &(String, String), ctx: &mut Context<Self>) {
        self.pods.remove(uid);
        self.cancel_timer(uid, ctx);
        self.api_pods.remove(key);
        self.pods.shrink_after_removal();
        self.api_pods.shrink_after_removal();
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
        ctx.run_interval(period, |act, ctx| {
            if act.host_gone.as_ref().is_some_and(|gone| gone()) {
                ctx.stop();
            } else {
                ctx.notify(Reconcile);
            }
        });
    }
}

impl Handler<PodStatusUpdated> for StatusSyncer {
    type Result = ();

    fn handle(&mut self, msg: PodStatusUpdated, ctx: &mut Self::Context) {
        let uid = msg.pod_uid;
        self.seq += 1;
        let now = tokio::time::Instant::now();
        let conflict_ended = match self.pods.get_mut(&uid) {
            Some(pod) => pod.on_update(msg.status, self.seq, now),
            None => {
                let mut pod = PodSync::listed(msg.status.clone());
                pod.on_update(msg.status, self.seq, now);
                self.pods.insert(uid.clone(), pod);
                false
            }
        };
        if conflict_ended {
            self.cancel_timer(&uid, ctx);
        }
        self.enqueue(&uid, ctx);
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

/// Tells the syncer how to know its host is gone: at each reconcile tick (every
/// `reconcile_period`) it asks, and stops once the answer is yes, writes in flight abandoned and
/// what is owed unwritten (a host sends [`Flush`] first to have it written). The syncer and the
/// status manager hold each other's addresses and its reconcile timer runs for good, so nothing
/// else stops them: an `Engine` dropped by its host left both running, a reconcile every 10 s
/// and owed writes still sent (a hostile test). The `Engine` asks whether its prober manager is
/// gone, which it is once neither the engine nor any clone of its pipeline is held.
#[derive(Message)]
#[rtype(result = "()")]
pub struct StopWhenHostGone(pub Box<dyn Fn() -> bool + Send>);

impl Handler<StopWhenHostGone> for StatusSyncer {
    type Result = ();

    fn handle(&mut self, msg: StopWhenHostGone, _ctx: &mut Self::Context) {
        self.host_gone = Some(msg.0);
    }
}

/// Starts a syncer and subscribes it to the status manager.
pub fn start_syncer(config: SyncerConfig) -> Addr<StatusSyncer> {
    let subscribe = config.status_manager.subscribe.clone();
    let syncer = StatusSyncer::new(config).start();
    subscribe.do_send(SubscribeStatus(syncer.clone().recipient()));
    syncer
}
