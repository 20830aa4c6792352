//! The syncer's settings: which status fields it writes ([`OwnedFields`]), its request budget,
//! concurrency and back-offs ([`SyncerConfig`]), and the status manager it follows
//! ([`StatusSource`]).

use std::sync::Arc;
use std::time::Duration;

use actix::prelude::*;

use crate::clock::SharedClock;
use crate::contracts::PodLookup;
use crate::status::equality::ConditionOwnership;
use crate::status::manager::{DeletePodStatus, ListStatuses, StatusManager, SubscribeStatus};
use crate::sync::pod_sync::Backoffs;
use crate::sync::rate::RateLimiter;

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

/// The failure back-off's first wait by default.
pub const FAILURE_BACKOFF_INITIAL: Duration = Duration::from_millis(500);

/// The failure back-off's longest wait by default: the kubelet's batch period. The kubelet
/// retries a failed write at its next batch, every 10 s; a longer back-off left a pod's owed
/// status unwritten for up to a minute after an outage ended (docs/sync.md §7.5).
pub const FAILURE_BACKOFF_MAX: Duration = Duration::from_secs(10);

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
    /// The longest conflict back-off: the kubelet's batch period (10 s), the longest a failed
    /// write waits there. A new version or a newer watch copy ends any wait at once, so only a
    /// server that keeps refusing with nothing new to merge into meets it.
    pub conflict_backoff_max: Duration,
    /// The condition types this writer owns.
    pub ownership: ConditionOwnership,
    /// The other status fields this writer owns.
    pub owned_fields: OwnedFields,
    /// The wall clock: times the merge stamps on conditions, and the status-update latency.
    pub clock: SharedClock,
    /// How long one request (GET, PATCH, DELETE) may go without its answer before the write
    /// fails and backs off; 30 s, as long as client-go's HTTP/2 health check takes at most to
    /// give up on a connection that went silent (30 s idle, then a 15 s ping).
    pub request_timeout: Duration,
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
            backoff_initial: FAILURE_BACKOFF_INITIAL,
            backoff_max: FAILURE_BACKOFF_MAX,
            conflict_backoff_initial: Duration::from_millis(50),
            conflict_backoff_max: Duration::from_secs(10),
            ownership: ConditionOwnership::KUBELET,
            owned_fields: OwnedFields::Kubelet,
            clock,
            request_timeout: Duration::from_secs(30),
        }
    }
}

impl SyncerConfig {
    pub(super) fn backoffs(&self) -> Backoffs {
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
