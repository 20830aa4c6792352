//! The status manager actor (upstream `pkg/kubelet/status.Manager`): the source of truth for
//! pod status. It keeps a versioned status per pod (keyed by the source pod's UID), applies
//! probe readiness and startup results, regenerates Ready / ContainersReady, stamps the status
//! and the conditions the kubelet generates with the pod's generation, rejects illegal
//! container state transitions, keeps `lastTransitionTime` and `startTime`, normalises, and
//! publishes every new version to per-pod views (read by probe workers) and to a subscriber
//! (the syncer). With no subscriber it is a local cache, as upstream with a nil API client.

use std::borrow::Cow;
use std::collections::{HashMap, HashSet};
use std::sync::Arc;

use actix::prelude::*;
use k8s_openapi::api::core::v1::{Pod, PodCondition, PodStatus};
use k8s_openapi::jiff::Timestamp;

use super::container_changes::{Applied, Change, ContainerChange, apply_changes, group_by_pod};
use super::equality::{POD_READY_TO_START_CONTAINERS, POD_SCHEDULED, is_pod_status_by_kubelet_equal};
use super::generate::{
    CONTAINERS_READY, POD_INITIALIZED, POD_READY, generate_containers_ready_condition,
    generate_pod_ready_condition,
};
use super::normalize::normalize_status;
use super::probe_status::PodProbeStatus;
use super::resize::PodResizeConditions;
use super::stored::StoredStatus;
use super::terminate::terminate_status;
use super::transition::{
    check_container_state_transition_under, update_last_transition_times, update_start_time,
};
use super::views::{Published, StatusViews};
use crate::capacity::ShrinkAfterRemoval;
use crate::clock::SharedClock;
use crate::container::ContainerId;
use crate::contracts::PodLookup;
use crate::features::FeatureGates;
pub use crate::format::pod_ref;
use crate::format::status_json;
use crate::vocabulary::PodUid;

// === messages ===

/// Store a freshly generated status for a pod (upstream `SetPodStatus`).
#[derive(Debug, Clone, Message)]
#[rtype(result = "()")]
pub struct SetPodStatus {
    /// The pod the status is for; its spec and generation are read, its UID keys the cache.
    pub pod: Arc<Pod>,
    /// The status the host generated (upstream `generateAPIPodStatus`'s result).
    pub status: PodStatus,
}

/// A readiness probe result changed (upstream `SetContainerReadiness`).
#[derive(Debug, Clone, PartialEq, Eq, Message)]
#[rtype(result = "()")]
pub struct SetContainerReadiness {
    /// The UID of the pod the container belongs to.
    pub pod_uid: PodUid,
    /// The container whose readiness changed.
    pub container_id: ContainerId,
    /// The new readiness; Ready and ContainersReady are regenerated from it.
    pub ready: bool,
}

/// A startup probe result changed (upstream `SetContainerStartup`).
#[derive(Debug, Clone, PartialEq, Eq, Message)]
#[rtype(result = "()")]
pub struct SetContainerStartup {
    /// The UID of the pod the container belongs to.
    pub pod_uid: PodUid,
    /// The container whose startup result changed.
    pub container_id: ContainerId,
    /// Whether the startup probe has succeeded; goes into the container status's `started`.
    pub started: bool,
}

/// Make every container and the phase terminal before the pod is deleted (upstream
/// `TerminatePod`).
#[derive(Debug, Clone, Message)]
#[rtype(result = "()")]
pub struct TerminatePod(pub Arc<Pod>);

/// Forget the status of every pod not in the set (upstream `RemoveOrphanedStatuses`).
#[derive(Debug, Clone, Message)]
#[rtype(result = "()")]
pub struct RemoveOrphanedStatuses(pub HashSet<PodUid>);

/// Forget one pod's status (the syncer, after deletion or recreation).
#[derive(Debug, Clone, Message)]
#[rtype(result = "()")]
pub struct DeletePodStatus(pub PodUid);

/// The cached status of a pod, by its UID or its mirror pod's UID (upstream `GetPodStatus`).
/// Answered stored: the asker decodes it, not the status manager.
#[derive(Debug, Clone, Message)]
#[rtype(result = "Option<StoredStatus>")]
pub struct GetPodStatus(pub PodUid);

/// The whole cached entry, version included.
#[derive(Debug, Clone, Message)]
#[rtype(result = "Option<VersionedPodStatus>")]
pub struct GetVersionedStatus(pub PodUid);

/// Every cached entry (the syncer's full reconcile, the agent's `/pods`).
#[derive(Debug, Clone, Message)]
#[rtype(result = "HashMap<PodUid, VersionedPodStatus>")]
pub struct ListStatuses;

/// Published after every stored update.
#[derive(Debug, Clone, Message)]
#[rtype(result = "()")]
pub struct PodStatusUpdated {
    /// The UID of the pod the status belongs to (the static pod's UID for a mirror pod).
    pub pod_uid: PodUid,
    /// The stored status and its version.
    pub status: VersionedPodStatus,
}

/// Subscribe to every stored update.
#[derive(Message)]
#[rtype(result = "()")]
pub struct SubscribeStatus(pub Recipient<PodStatusUpdated>);

/// Which resize condition a [`SetPodResizeCondition`] or [`ClearPodResizeCondition`] is about.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ResizeCondition {
    /// `PodResizePending`.
    Pending,
    /// `PodResizeInProgress`.
    InProgress,
}

/// Set one of the pod's resize conditions (upstream `SetPodResizePendingCondition` and
/// `SetPodResizeInProgressCondition`); the host's next generated status carries it.
#[derive(Debug, Clone, PartialEq, Eq, Message)]
#[rtype(result = "()")]
pub struct SetPodResizeCondition {
    /// The pod's UID.
    pub pod_uid: PodUid,
    /// Which condition.
    pub condition: ResizeCondition,
    /// The reason (`Deferred`, `Infeasible`, `Error`, or empty).
    pub reason: String,
    /// A message for people.
    pub message: String,
    /// The pod generation whose resize the condition describes.
    pub observed_generation: i64,
}

/// Clear one of the pod's resize conditions (upstream `ClearPodResizePendingCondition` and
/// `ClearPodResizeInProgressCondition`); answers whether it was set.
#[derive(Debug, Clone, PartialEq, Eq, Message)]
#[rtype(result = "bool")]
pub struct ClearPodResizeCondition {
    /// The pod's UID.
    pub pod_uid: PodUid,
    /// Which condition.
    pub condition: ResizeCondition,
}

/// The pod's resize conditions, pending first (upstream `GetPodResizeConditions`).
#[derive(Debug, Clone, Message)]
#[rtype(result = "PodResizeConditions")]
pub struct GetPodResizeConditions(pub PodUid);

// === the actor ===

/// A cached status with what the syncer needs (upstream `versionedPodStatus`).
#[derive(Debug, Clone, PartialEq)]
pub struct VersionedPodStatus {
    /// Monotonic per pod, 1 for the first stored status.
    pub version: u64,
    /// The pod's name, for the syncer's requests and logs.
    pub pod_name: String,
    /// The pod's namespace.
    pub pod_namespace: String,
    /// When the first not-yet-synced update was produced.
    pub at: Option<Timestamp>,
    /// TerminatePod ran; sticky.
    pub pod_is_finished: bool,
    /// The status as stored: probe results applied, conditions regenerated, normalised. Kept
    /// as its JSON ([`StoredStatus::decode`] for the status itself).
    pub status: StoredStatus,
}

/// The status cache and its publishers.
pub struct StatusManager {
    /// Cached statuses by source pod UID.
    statuses: HashMap<PodUid, VersionedPodStatus>,
    /// Views read by probe workers.
    views: StatusViews,
    /// The host's pods, for specs and static/mirror translation.
    pods: Arc<dyn PodLookup>,
    clock: SharedClock,
    /// Told about every stored update (the syncer).
    subscribers: Vec<Recipient<PodStatusUpdated>>,
    /// Resize conditions by pod UID. Apart from [`StatusManager::statuses`], as upstream keeps
    /// them: a resize can be decided before the pod's first status is stored.
    resize: HashMap<PodUid, PodResizeConditions>,
    /// Readiness and startup results not applied yet, in arrival order (`container_changes`).
    changes: Vec<ContainerChange>,
    /// An [`ApplyContainerChanges`] is on its way.
    apply_scheduled: bool,
    /// The kubelet feature gates in force (`ContainerRestartRules` and
    /// `RestartAllContainersOnContainerExits` change the transition check).
    feature_gates: FeatureGates,
}

/// Queued results held back at most this many: past it they are applied at once, so a
/// mailbox that never runs dry cannot hold them.
const MAX_QUEUED_CHANGES: usize = 1024;

/// Apply the queued readiness and startup results (sent by the status manager to itself).
#[derive(Message)]
#[rtype(result = "()")]
struct ApplyContainerChanges;

impl StatusManager {
    /// A status manager with no statuses and no subscriber; `views` receives every stored status.
    pub fn new(views: StatusViews, pods: Arc<dyn PodLookup>, clock: SharedClock) -> Self {
        StatusManager {
            statuses: HashMap::new(),
            views,
            pods,
            clock,
            subscribers: Vec::new(),
            resize: HashMap::new(),
            changes: Vec::new(),
            apply_scheduled: false,
            feature_gates: FeatureGates::default(),
        }
    }

    /// The status manager under these feature gates instead of the kubelet's defaults.
    pub fn with_feature_gates(mut self, feature_gates: FeatureGates) -> Self {
        self.feature_gates = feature_gates;
        self
    }

    /// Queues a result; it is applied when the mailbox runs dry, before the next message that
    /// reads or replaces a status, or at once past [`MAX_QUEUED_CHANGES`].
    fn queue_change(&mut self, change: ContainerChange, ctx: &mut Context<Self>) {
        self.changes.push(change);
        if self.changes.len() >= MAX_QUEUED_CHANGES {
            self.apply_queued_changes();
        } else if !self.apply_scheduled {
            self.apply_scheduled = true;
            ctx.notify(ApplyContainerChanges);
        }
    }

    /// Applies every queued result: per pod, one pass and at most one new version (upstream
    /// `SetContainerReadiness` / `SetContainerStartup`, one after the other).
    fn apply_queued_changes(&mut self) {
        if self.changes.is_empty() {
            return;
        }
        for (uid, changes) in group_by_pod(std::mem::take(&mut self.changes)) {
            self.apply_pod_changes(&uid, &changes);
        }
    }

    fn apply_pod_changes(&mut self, uid: &str, changes: &[ContainerChange]) {
        let Some(first) = changes.first() else { return };
        let Some((pod, mut status)) = self.pod_and_status(uid, first) else {
            // Upstream logs each result it drops; without a decode, as there is no status.
            for change in &changes[1..] {
                let _ = self.pod_and_status(uid, change);
            }
            return;
        };
        let applied = apply_changes(&mut status, changes);
        let mut readiness_changed = false;
        for (change, applied) in changes.iter().zip(&applied) {
            let (what, id) = (change.change.what(), &change.container_id);
            match applied {
                Applied::UnknownContainer => {
                    tracing::info!(
                        pod = pod_ref(&pod),
                        containerID = id.kubelet_string(),
                        "Container {what} changed for unknown container"
                    );
                }
                // Upstream's readiness line says which way it did not change; its startup
                // line does not.
                Applied::Unchanged => match change.change {
                    Change::Ready(ready) => {
                        tracing::trace!(
                            ready,
                            pod = pod_ref(&pod),
                            containerID = id.kubelet_string(),
                            "Container {what} unchanged"
                        );
                    }
                    Change::Started(_) => {
                        tracing::trace!(
                            pod = pod_ref(&pod),
                            containerID = id.kubelet_string(),
                            "Container {what} unchanged"
                        );
                    }
                },
                Applied::Changed => readiness_changed |= matches!(change.change, Change::Ready(_)),
            }
        }
        if readiness_changed {
            regenerate_readiness_conditions(&pod, &mut status);
        }
        if applied.contains(&Applied::Changed) {
            self.update_status_internal(&pod, status, false, false);
        }
    }

    /// Upstream `updateStatusInternal`; returns whether a new version was stored.
    fn update_status_internal(
        &mut self,
        pod: &Pod,
        mut status: PodStatus,
        force: bool,
        finished: bool,
    ) -> bool {
        // Kept by UID, as every table of the engine: pods without one would share one entry,
        // and the syncer could never write it (docs/status-manager.md).
        let Some(uid) = PodUid::of(pod) else {
            tracing::warn!(pod = pod_ref(pod), "Pod without a UID; not storing its status");
            return false;
        };
        let is_static = self.pods.is_static(&uid);
        let cached = self.statuses.get(&uid);
        let mut finished = finished;
        if let Some(cached) = cached
            && cached.pod_is_finished
            && !finished
            && !is_static
        {
            tracing::info!(
                pod = pod_ref(pod),
                "Got unexpected podIsFinished=false, while podIsFinished=true in status cache, programmer error."
            );
            finished = true;
        }
        // Decoded once: the base of the checks below and, unchanged, the equality's left side.
        // One that does not decode is replaced as if there were none (its version counts on).
        let cached_status = cached.and_then(|c| c.status.decode_logged());
        let old: Cow<'_, PodStatus> = match &cached_status {
            Some(status) => Cow::Borrowed(status),
            None => Cow::Owned(
                self.pods
                    .mirror_uid_for_static(&uid)
                    .and_then(|m| self.pods.pod_by_uid(&m))
                    .and_then(|m| m.status.clone())
                    .or_else(|| pod.status.clone())
                    .unwrap_or_default(),
            ),
        };
        let spec = super::spec_of(pod);
        if let Err(err) = check_container_state_transition_under(&old, &status, &spec, &self.feature_gates) {
            tracing::error!(err = err.to_string(), pod = pod_ref(pod), "Status update on pod aborted");
            return false;
        }
        let now = self.clock.now_time();
        update_last_transition_times(Some(&old), &mut status, now.clone());
        update_start_time(Some(&old), &mut status, now.clone());
        // A status set from an older copy of the pod (a lower generation, or none) keeps the
        // generation already reported: upstream's "prevent sending unnecessary patches".
        if old.observed_generation.unwrap_or(0) > status.observed_generation.unwrap_or(0) {
            status.observed_generation = old.observed_generation;
        }
        normalize_status(pod, &mut status);

        if let Some(cached) = &cached_status
            && !force
            && is_pod_status_by_kubelet_equal(cached, &status)
        {
            tracing::debug!(pod = pod_ref(pod), status = %status_json(&status), "Ignoring same status for pod");
            return false;
        }
        let entry = VersionedPodStatus {
            version: cached.map_or(1, |c| c.version + 1),
            pod_name: pod.metadata.name.clone().unwrap_or_default(),
            pod_namespace: pod.metadata.namespace.clone().unwrap_or_default(),
            at: cached.and_then(|c| c.at).or(Some(now.0)),
            pod_is_finished: finished,
            status: StoredStatus::new(&status),
        };
        let previous = self.views.probe_status(&uid);
        let probe = Arc::new(PodProbeStatus::of(&status, previous.as_deref()));
        self.views.publish(&uid, Some(Published { status: entry.status.clone(), probe }));
        self.subscribers.retain(|s| s.connected());
        for s in &self.subscribers {
            s.do_send(PodStatusUpdated { pod_uid: uid.clone(), status: entry.clone() });
        }
        self.statuses.insert(uid, entry);
        true
    }

    /// The pod and a copy of its cached status, for the container-level setters (`change`
    /// names what they set, and of which container, for upstream's lines).
    fn pod_and_status(&self, pod_uid: &str, change: &ContainerChange) -> Option<(Arc<Pod>, PodStatus)> {
        let what = change.change.what();
        let Some(pod) = self.pods.pod_by_uid(pod_uid) else {
            tracing::trace!(podUID = pod_uid, "Pod has been deleted, no need to update {what}");
            return None;
        };
        let Some(cached) = self.statuses.get(pod_uid) else {
            tracing::info!(
                pod = pod_ref(&pod),
                containerID = change.container_id.kubelet_string(),
                "Container {what} changed before pod has synced"
            );
            return None;
        };
        // Not built on an empty status, which would be stored and written back.
        Some((pod, cached.status.decode_logged()?))
    }

    fn remove(&mut self, uid: &str) {
        if self.resize.remove(uid).is_some() {
            self.resize.shrink_after_removal();
        }
        if self.statuses.remove(uid).is_some() {
            tracing::trace!(podUID = uid, "Removing pod from status map.");
            self.statuses.shrink_after_removal();
            self.views.publish(uid, None);
        }
    }
}

impl Actor for StatusManager {
    type Context = Context<Self>;
}

impl Handler<SetPodStatus> for StatusManager {
    type Result = ();

    fn handle(&mut self, msg: SetPodStatus, _ctx: &mut Self::Context) {
        self.apply_queued_changes();
        let mut status = msg.status;
        // The status reflects this generation of the spec (PodObservedGenerationTracking, on
        // by default since 1.34), and so does every condition generated from it.
        let generation = observed_generation(&msg.pod);
        status.observed_generation = generation;
        for condition in status.conditions.iter_mut().flatten() {
            if GENERATED_CONDITIONS.contains(&condition.type_.as_str()) {
                condition.observed_generation = generation;
            }
        }
        // A pod being deleted always gets a new version, so its deletion is driven forward.
        let force = msg.pod.metadata.deletion_timestamp.is_some();
        self.update_status_internal(&msg.pod, status, force, false);
    }
}

impl Handler<SetContainerReadiness> for StatusManager {
    type Result = ();

    fn handle(&mut self, msg: SetContainerReadiness, ctx: &mut Self::Context) {
        let SetContainerReadiness { pod_uid, container_id, ready } = msg;
        self.queue_change(ContainerChange { pod_uid, container_id, change: Change::Ready(ready) }, ctx);
    }
}

impl Handler<SetContainerStartup> for StatusManager {
    type Result = ();

    fn handle(&mut self, msg: SetContainerStartup, ctx: &mut Self::Context) {
        let SetContainerStartup { pod_uid, container_id, started } = msg;
        self.queue_change(ContainerChange { pod_uid, container_id, change: Change::Started(started) }, ctx);
    }
}

impl Handler<ApplyContainerChanges> for StatusManager {
    type Result = ();

    fn handle(&mut self, _msg: ApplyContainerChanges, _ctx: &mut Self::Context) {
        self.apply_scheduled = false;
        self.apply_queued_changes();
    }
}

impl Handler<TerminatePod> for StatusManager {
    type Result = ();

    fn handle(&mut self, msg: TerminatePod, _ctx: &mut Self::Context) {
        self.apply_queued_changes();
        let pod = msg.0;
        let uid = PodUid::of(&pod).unwrap_or_default();
        let base = match self.statuses.get(&uid).and_then(|cached| cached.status.decode_logged()) {
            Some(cached) => cached,
            None => pod.status.clone().unwrap_or_default(),
        };
        let status = terminate_status(&pod, &base, self.pods.is_static(&uid));
        self.update_status_internal(&pod, status, true, true);
    }
}

impl Handler<RemoveOrphanedStatuses> for StatusManager {
    type Result = ();

    fn handle(&mut self, msg: RemoveOrphanedStatuses, _ctx: &mut Self::Context) {
        self.apply_queued_changes();
        let orphans: Vec<PodUid> =
            self.statuses.keys().filter(|uid| !msg.0.contains(*uid)).cloned().collect();
        for uid in orphans {
            self.remove(&uid);
        }
        // Upstream drops resize conditions only with a status; those of a pod that never had
        // one would stay for ever.
        self.resize.retain(|uid, _| msg.0.contains(uid));
        self.resize.shrink_after_removal();
        self.views.prune();
    }
}

impl Handler<SetPodResizeCondition> for StatusManager {
    type Result = ();

    fn handle(&mut self, msg: SetPodResizeCondition, _ctx: &mut Self::Context) {
        let now = self.clock.now();
        let conditions = self.resize.entry(msg.pod_uid).or_default();
        match msg.condition {
            ResizeCondition::Pending => {
                conditions.set_pending(&msg.reason, &msg.message, msg.observed_generation, now)
            }
            ResizeCondition::InProgress => {
                conditions.set_in_progress(&msg.reason, &msg.message, msg.observed_generation, now)
            }
        }
    }
}

impl Handler<ClearPodResizeCondition> for StatusManager {
    type Result = bool;

    fn handle(&mut self, msg: ClearPodResizeCondition, _ctx: &mut Self::Context) -> bool {
        let Some(conditions) = self.resize.get_mut(&msg.pod_uid) else { return false };
        let cleared = match msg.condition {
            ResizeCondition::Pending => conditions.pending.take().is_some(),
            ResizeCondition::InProgress => conditions.clear_in_progress(),
        };
        if conditions.is_empty() {
            self.resize.remove(&msg.pod_uid);
            self.resize.shrink_after_removal();
        }
        cleared
    }
}

impl Handler<GetPodResizeConditions> for StatusManager {
    type Result = MessageResult<GetPodResizeConditions>;

    fn handle(&mut self, msg: GetPodResizeConditions, _ctx: &mut Self::Context) -> Self::Result {
        MessageResult(self.resize.get(&msg.0).cloned().unwrap_or_default())
    }
}

impl Handler<DeletePodStatus> for StatusManager {
    type Result = ();

    fn handle(&mut self, msg: DeletePodStatus, _ctx: &mut Self::Context) {
        self.apply_queued_changes();
        self.remove(&msg.0);
    }
}

impl Handler<GetPodStatus> for StatusManager {
    type Result = Option<StoredStatus>;

    fn handle(&mut self, msg: GetPodStatus, _ctx: &mut Self::Context) -> Self::Result {
        self.apply_queued_changes();
        let uid = self.pods.static_uid_for_mirror(&msg.0).map(PodUid::from).unwrap_or(msg.0);
        self.statuses.get(&uid).map(|s| s.status.clone())
    }
}

impl Handler<GetVersionedStatus> for StatusManager {
    type Result = Option<VersionedPodStatus>;

    fn handle(&mut self, msg: GetVersionedStatus, _ctx: &mut Self::Context) -> Self::Result {
        self.apply_queued_changes();
        let uid = self.pods.static_uid_for_mirror(&msg.0).map(PodUid::from).unwrap_or(msg.0);
        self.statuses.get(&uid).cloned()
    }
}

impl Handler<ListStatuses> for StatusManager {
    type Result = MessageResult<ListStatuses>;

    fn handle(&mut self, _msg: ListStatuses, _ctx: &mut Self::Context) -> Self::Result {
        self.apply_queued_changes();
        MessageResult(self.statuses.clone())
    }
}

impl Handler<SubscribeStatus> for StatusManager {
    type Result = ();

    fn handle(&mut self, msg: SubscribeStatus, _ctx: &mut Self::Context) {
        self.subscribers.push(msg.0);
    }
}

// === helpers ===

/// The conditions upstream's `generateAPIPodStatus` builds afresh on every sync, each with the
/// pod's generation (`GetPodObservedGenerationIfEnabledOnCondition`). The kubelet's other
/// conditions keep the generation they were set for: PodResizePending / PodResizeInProgress
/// carry the generation of the resize they describe, DisruptionTarget that of the eviction.
const GENERATED_CONDITIONS: [&str; 5] =
    [POD_INITIALIZED, POD_READY, CONTAINERS_READY, POD_SCHEDULED, POD_READY_TO_START_CONTAINERS];

/// The generation a status and its kubelet conditions were generated for; Go's zero
/// generation is an omitted field.
pub(crate) fn observed_generation(pod: &Pod) -> Option<i64> {
    pod.metadata.generation.filter(|g| *g != 0)
}

/// Upstream `SetContainerReadiness`'s tail: Ready and ContainersReady generated afresh from the
/// container statuses, with the pod's generation.
fn regenerate_readiness_conditions(pod: &Pod, status: &mut PodStatus) {
    let spec = super::spec_of(pod);
    let all = super::generate::all_container_statuses(status);
    let phase = status.phase.clone().unwrap_or_default();
    let conditions = status.conditions.clone().unwrap_or_default();
    let generation = observed_generation(pod);
    let ready = PodCondition {
        observed_generation: generation,
        ..generate_pod_ready_condition(&spec, &conditions, Some(&all), &phase)
    };
    let containers_ready = PodCondition {
        observed_generation: generation,
        ..generate_containers_ready_condition(&spec, Some(&all), &phase)
    };
    replace_or_append(status, POD_READY, ready);
    replace_or_append(status, CONTAINERS_READY, containers_ready);
}

/// Replaces the condition of its type in place, or appends it.
fn replace_or_append(status: &mut PodStatus, type_: &str, condition: PodCondition) {
    if let Some(existing) = status.conditions.iter_mut().flatten().find(|c| c.type_ == type_) {
        *existing = condition;
        return;
    }
    tracing::info!(conditionType = type_, status = %status_json(status), "PodStatus missing condition type");
    status.conditions.get_or_insert_with(Vec::new).push(condition);
}
