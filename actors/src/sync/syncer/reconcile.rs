//! The syncer's full reconcile (upstream `syncBatch(true)`: `needsUpdate` and `needsReconcile`):
//! takes the status manager's list, drops the state of pods it no longer has, and queues the pods
//! that are behind, deletable or drifted.

use std::collections::{HashMap, HashSet};

use actix::prelude::*;
use k8s_openapi::api::core::v1::Pod;

use super::{OwnedFields, StatusSyncer};
use crate::capacity::ShrinkAfterRemoval;
use crate::status::equality::is_pod_status_equal_for;
use crate::status::manager::{ListStatuses, VersionedPodStatus, observed_generation};
use crate::status::merge::merge_readiness_only;
use crate::status::normalize::normalize_status;
use crate::sync::pod_sync::PodSync;
use crate::sync::rules::{can_be_deleted, go_zero_values, merge_listed};
use crate::vocabulary::PodUid;

/// Run a full reconcile now (as the periodic timer does).
#[derive(Debug, Clone, Copy, Message)]
#[rtype(result = "()")]
pub struct Reconcile;
impl StatusSyncer {
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
        self.pods.shrink_after_removal();
        for (uid, pod) in &mut self.pods {
            if let Some(status) = merged.remove(uid) {
                pod.status = status;
            }
        }
        for (uid, status) in merged {
            self.pods.insert(uid, PodSync::listed(status));
        }
        self.prune(ctx);
        let held_back: HashSet<PodUid> = self
            .pods
            .iter_mut()
            .filter_map(|(uid, pod)| (!pod.rejection_passed()).then(|| uid.clone()))
            .collect();
        let mut queue = Vec::new();
        for (uid, pod) in &self.pods {
            let status = &pod.status;
            let Some(api_uid) = self.api_uid(uid) else { continue };
            if held_back.contains(uid) {
                continue;
            }
            let key = (status.pod_namespace.clone(), status.pod_name.clone());
            let api_pod = self.api_pods.get(&key);
            let behind = pod.written_to(&api_uid).is_none_or(|v| v < status.version);
            let deletable = api_pod.is_some_and(|p| can_be_deleted(&p.pod, status));
            if behind || deletable {
                queue.push(uid.clone());
            } else if let Some(api_pod) = api_pod
                && self.drifted(&api_pod.pod, status)
            {
                tracing::debug!(
                    pod = crate::format::pod_key(&status.pod_namespace, &status.pod_name),
                    "Pod status is inconsistent with cached status for pod, a reconciliation should be triggered"
                );
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
        self.api_pods.shrink_after_removal();
    }

    /// The API copy differs from ours in fields this writer owns.
    fn drifted(&self, pod: &Pod, status: &VersionedPodStatus) -> bool {
        let mut api = go_zero_values(pod.status.clone().unwrap_or_default());
        normalize_status(pod, &mut api);
        let Some(ours) = status.status.decode_logged().map(go_zero_values) else { return false };
        let target = match self.config.owned_fields {
            OwnedFields::Kubelet => ours,
            // The write's own projection: only what the write would change is drift.
            OwnedFields::ReadinessOnly => go_zero_values(merge_readiness_only(
                &api,
                &ours,
                self.config.clock.now_time(),
                observed_generation(pod),
                &self.config.ownership,
            )),
        };
        !is_pod_status_equal_for(&api, &target, &self.config.ownership)
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
