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
//! retried with per-pod exponential back-off; a status the server rejects as invalid is not sent
//! again until it changes. A full reconcile every `reconcile_period` rewrites any drift of the
//! fields this writer owns. A finished pod with a deletion timestamp and a terminal API phase is
//! deleted with grace 0 and a UID precondition; a mirror pod never is. Each pod's state
//! (versions, back-offs, latency starts) is one `PodSync`, dropped with the pod's status by the
//! reconcile once the status manager no longer has it, together with its back-off timer, so
//! that `Flush` never waits for such a pod. The actor keeps the queue, the request budget, the
//! timers and the merge bases; the write itself is `SyncJob` (`job`), the pure rules are in
//! [`rules`](super::rules).
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
use k8s_openapi::api::core::v1::Pod;
use tokio::sync::oneshot;

use super::api_pod::ApiPod;
use super::job::{JobResult, SyncJob, WriteOutcome};
use super::pod_sync::{Backoffs, MergeBase, PodSync, merge_base_after};
use super::rate::RateLimiter;
pub use super::rules::{MIRROR_POD_ANNOTATION, can_be_deleted, could_have_running_containers, is_mirror_pod};
use super::rules::{go_zero_values, is_newer_or_same, merge_listed, resource_version, source_uid};
use crate::clock::SharedClock;
use crate::contracts::PodLookup;
use crate::metrics as names;
use crate::status::equality::{ConditionOwnership, is_pod_status_equal_for};
use crate::status::manager::{
    DeletePodStatus, ListStatuses, PodStatusUpdated, StatusManager, SubscribeStatus, VersionedPodStatus,
};
use crate::status::merge::merge_readiness_only;
use crate::status::normalize::normalize_status;
use crate::vocabulary::PodUid;

// === messages ===

/// The API server's current copy of a pod, from a watch (fresh merge base), as the server's JSON
/// ([`ApiPod`]): fields the typed structs lack are resent as they are.
#[derive(Debug, Clone, Message)]
#[rtype(result = "()")]
pub struct ApiPodObserved(pub Arc<ApiPod>);

impl ApiPodObserved {
    /// A copy known only typed (its JSON is the typed one: fields the structs lack are not in it).
    pub fn of(pod: impl Into<ApiPod>) -> ApiPodObserved {
        ApiPodObserved(Arc::new(pod.into()))
    }
}

/// A pod is gone from the API server.
#[derive(Debug, Clone, Message)]
#[rtype(result = "()")]
pub struct ApiPodDeleted {
    /// The deleted pod's namespace.
    pub namespace: String,
    /// The deleted pod's name; its merge base is dropped, so the next write GETs.
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
    /// Pods waiting for a write slot.
    pub queued: usize,
    /// Pods being written now.
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

/// The status fields the syncer writes (docs/sync.md §7.3).
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
    /// The API server client the syncer GETs, PATCHes and deletes pods with.
    pub client: kube::Client,
    /// The host's pods: static pods are written to their mirror pods, looked up here.
    pub pods: Arc<dyn PodLookup>,
    /// The status manager the syncer follows.
    pub status_manager: StatusSource,
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
    /// The longest failure back-off.
    pub backoff_max: Duration,
    /// Conflict back-off (409 Conflict, ReadinessOnly's precondition): the wait after the second
    /// conflict in a row (the first is retried at once), doubled per conflict up to
    /// `conflict_backoff_max`, each made up to a quarter shorter by the pod's UID.
    pub conflict_backoff_initial: Duration,
    /// The longest conflict back-off.
    pub conflict_backoff_max: Duration,
    /// The condition types this writer owns.
    pub ownership: ConditionOwnership,
    /// The other status fields this writer owns.
    pub owned_fields: OwnedFields,
    /// The wall clock: times the merge stamps on conditions, and the status-update latency.
    pub clock: SharedClock,
}

impl SyncerConfig {
    /// The kubelet's settings: QPS 50, burst 100, reconcile every 10 s.
    pub fn new(
        client: kube::Client,
        pods: Arc<dyn PodLookup>,
        status_manager: impl Into<StatusSource>,
        clock: SharedClock,
    ) -> Self {
        SyncerConfig {
            client,
            pods,
            status_manager: status_manager.into(),
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

impl SyncerConfig {
    fn backoffs(&self) -> Backoffs {
        Backoffs {
            failure_initial: self.backoff_initial,
            failure_max: self.backoff_max,
            conflict_initial: self.conflict_backoff_initial,
            conflict_max: self.conflict_backoff_max,
        }
    }
}

/// The status manager as the syncer uses it: the messages it sends, not the actor, so that a
/// host or a test can stand in for it.
#[derive(Clone)]
pub struct StatusSource {
    /// Every status, for the reconcile.
    pub list: Recipient<ListStatuses>,
    /// Drops a pod's status (the pod was deleted, or recreated under its name).
    pub delete: Recipient<DeletePodStatus>,
    /// Subscribes the syncer to status updates.
    pub subscribe: Recipient<SubscribeStatus>,
}

impl From<Addr<StatusManager>> for StatusSource {
    fn from(manager: Addr<StatusManager>) -> Self {
        StatusSource {
            list: manager.clone().recipient(),
            delete: manager.clone().recipient(),
            subscribe: manager.recipient(),
        }
    }
}

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

    /// Stops the pod's back-off timer, if one runs.
    fn cancel_timer(&mut self, uid: &str, ctx: &mut Context<Self>) {
        if let Some(timer) = self.backing_off.remove(uid) {
            ctx.cancel_future(timer);
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
        let Some(status) = self.pods.get(&uid).map(|pod| pod.status.clone()) else { return };
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
        let held = self.api_pods.get(&key).and_then(|pod| resource_version(&pod.pod));
        let backoffs = self.config.backoffs();
        let settled = self
            .pods
            .get_mut(&uid)
            .map(|pod| pod.on_outcome(&result, held, tokio::time::Instant::now(), &backoffs))
            .unwrap_or_default();
        match merge_base_after(&result.outcome, held, result.base_version) {
            MergeBase::Remember => {
                if let Some(pod) = result.fresh.clone() {
                    // A watch event that arrived during the write may be newer still.
                    self.remember(key.clone(), pod);
                }
            }
            MergeBase::Drop => {
                self.api_pods.remove(&key);
            }
            MergeBase::Keep => {}
        }
        match &result.outcome {
            WriteOutcome::Updated | WriteOutcome::Unchanged => {
                if let Some(since) = settled.synced_since {
                    let seconds = self.config.clock.now().duration_since(since).as_secs_f64().max(0.0);
                    metrics::histogram!(names::PROBELET_STATUS_SYNC_DURATION_SECONDS).record(seconds);
                }
            }
            WriteOutcome::NotFound => {
                tracing::debug!(pod_uid = %uid, pod = %result.name, "Pod does not exist on the server");
            }
            WriteOutcome::Recreated => {
                tracing::info!(pod_uid = %uid, pod = %result.name, "Pod was deleted and then recreated, skipping status update");
                self.forget(&uid, &key, ctx);
                self.config.status_manager.delete.do_send(DeletePodStatus(uid.clone()));
            }
            WriteOutcome::Invalid(message) => {
                tracing::error!(pod_uid = %uid, pod = %result.name, namespace = %result.namespace, cause = %message, "The API server rejected the status patch as invalid; not retrying this version");
            }
            WriteOutcome::Deleted => {
                tracing::debug!(pod_uid = %uid, pod = %result.name, "Pod fully terminated and removed from etcd");
                self.forget(&uid, &key, ctx);
                self.config.status_manager.delete.do_send(DeletePodStatus(uid.clone()));
            }
            WriteOutcome::Conflict => match settled.retry_in {
                None => {
                    tracing::debug!(pod_uid = %uid, pod = %result.name, "The pod changed since the copy the status was merged into; merging again into the newer copy seen meanwhile");
                }
                Some(wait) => {
                    tracing::debug!(pod_uid = %uid, pod = %result.name, retry_in = ?wait, "The pod changed since the copy the status was merged into; merging again");
                }
            },
            WriteOutcome::Failed(message) | WriteOutcome::DeleteFailed(message) => {
                tracing::info!(pod_uid = %uid, pod = %result.name, error = %message, retry_in = ?settled.retry_in.unwrap_or_default(), "Failed to update status for pod");
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
    }

    /// Keeps `pod` as the merge base of its name unless the copy held is newer; returns whether
    /// it was kept.
    fn remember(&mut self, key: (String, String), pod: Arc<ApiPod>) -> bool {
        let newer = self.api_pods.get(&key).is_none_or(|old| is_newer_or_same(&pod.pod, &old.pod));
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
        statuses: HashMap<PodUid, VersionedPodStatus>,
        since: u64,
        ctx: &mut Context<Self>,
    ) {
        let arrived: HashSet<PodUid> = self
            .pods
            .iter()
            .filter(|(_, pod)| pod.update_seq.is_some_and(|seq| seq > since))
            .map(|(uid, _)| uid.clone())
            .collect();
        let held: HashMap<PodUid, VersionedPodStatus> =
            self.pods.iter().map(|(uid, pod)| (uid.clone(), pod.status.clone())).collect();
        let mut merged = merge_listed(held, statuses, &arrived);
        self.pods.retain(|uid, _| merged.contains_key(uid));
        for (uid, pod) in &mut self.pods {
            if let Some(status) = merged.remove(uid) {
                pod.status = status;
            }
        }
        for (uid, status) in merged {
            self.pods.insert(uid, PodSync::listed(status));
        }
        self.prune(ctx);
        let mut queue = Vec::new();
        for (uid, pod) in &self.pods {
            let status = &pod.status;
            let Some(api_uid) = self.api_uid(uid) else { continue };
            if pod.rejected == Some(status.version) {
                continue;
            }
            let key = (status.pod_namespace.clone(), status.pod_name.clone());
            let api_pod = self.api_pods.get(&key);
            let behind = pod.written_to(&api_uid).is_none_or(|v| v < status.version);
            let deletable = api_pod.is_some_and(|p| can_be_deleted(&p.pod, status.pod_is_finished));
            if behind || deletable {
                queue.push(uid.clone());
            } else if let Some(api_pod) = api_pod
                && self.drifted(&api_pod.pod, status)
            {
                tracing::info!(pod_uid = %uid, pod = %status.pod_name, "Pod status is inconsistent with cached status for pod, a reconciliation should be triggered");
                queue.push(uid.clone());
            }
        }
        for uid in queue {
            if let Some(pod) = self.pods.get_mut(&uid) {
                pod.written = None;
            }
            self.enqueue(&uid, ctx);
        }
        // Pruning may have ended the last back-off a flush waited for.
        self.resolve_flushes();
    }

    /// Stops the back-off timers of pods without a status (the status manager forgot them;
    /// their [`PodSync`] is gone): nothing will write them again, so nothing may wait for them.
    /// Drops versions written to an API pod that is no longer the pod's (a new mirror pod).
    /// Merge bases are kept for the pods the host knows: a watch event often comes before the
    /// pod's first status.
    fn prune(&mut self, ctx: &mut Context<Self>) {
        let stopped: Vec<PodUid> =
            self.backing_off.keys().filter(|uid| !self.pods.contains_key(*uid)).cloned().collect();
        for uid in stopped {
            self.cancel_timer(&uid, ctx);
        }
        let api_uids: HashMap<PodUid, Option<String>> =
            self.pods.keys().map(|uid| (uid.clone(), self.api_uid(uid))).collect();
        for (uid, pod) in &mut self.pods {
            let current = api_uids.get(uid).cloned().flatten();
            if pod.written.as_ref().is_some_and(|w| Some(&w.api_uid) != current.as_ref()) {
                pod.written = None;
            }
        }
        let names: HashSet<(&str, &str)> = self
            .pods
            .values()
            .map(|p| (p.status.pod_namespace.as_str(), p.status.pod_name.as_str()))
            .collect();
        let pods = &self.config.pods;
        self.api_pods.retain(|(namespace, name), pod| {
            if names.contains(&(namespace.as_str(), name.as_str())) {
                return true;
            }
            let api_uid = pod.pod.metadata.uid.as_deref().unwrap_or_default();
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
        let now = self.config.clock.now();
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

impl Handler<ApiPodObserved> for StatusSyncer {
    type Result = ();

    fn handle(&mut self, msg: ApiPodObserved, ctx: &mut Self::Context) {
        let pod = msg.0;
        let key = (
            pod.pod.metadata.namespace.clone().unwrap_or_default(),
            pod.pod.metadata.name.clone().unwrap_or_default(),
        );
        let uid = source_uid(self.config.pods.as_ref(), &pod.pod);
        if let Some(held) = self.pods.get_mut(&uid)
            && !held.admits_copy(resource_version(&pod.pod))
        {
            tracing::trace!(pod_uid = %uid, pod = %key.1, "Watch event no newer than the copy a write conflicted with; not a merge base");
            return;
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
        let list = self.config.status_manager.list.send(ListStatuses);
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

/// Starts a syncer and subscribes it to the status manager.
pub fn start_syncer(config: SyncerConfig) -> Addr<StatusSyncer> {
    let subscribe = config.status_manager.subscribe.clone();
    let syncer = StatusSyncer::new(config).start();
    subscribe.do_send(SubscribeStatus(syncer.clone().recipient()));
    syncer
}
