//! The API server's copies of pods as the syncer tracks them: watch events ([`ApiPodObserved`],
//! [`ApiPodDeleted`]) and the rule that only a copy no older than the one held becomes a pod's
//! merge base.

use std::sync::Arc;

use actix::prelude::*;

use super::StatusSyncer;
use crate::capacity::ShrinkAfterRemoval;
use crate::sync::api_pod::ApiPod;
use crate::sync::rules::{is_newer_or_same, resource_version, source_uid};

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

/// The API server's copy of a pod from a (re-)list of the host's watch (kube's
/// `WatchEvent::InitApply`), where [`ApiPodObserved`] is for the events of the watch after it.
///
/// A listed copy can be *older* than the one held, which a watch event cannot: an etcd restored
/// from a backup without `--bump-revision` sets every resourceVersion back (and the agent's watch
/// lists again, docs/sync.md §7.2); a list answered just before the agent's own PATCH, whose
/// answer was handled first, is behind too (and a host's list may come from a cache). The syncer
/// cannot tell which, so it trusts neither copy: it drops the one held and writes the pod at once
/// from a fresh GET, a quorum read (docs/sync.md §7.4). Otherwise it is a watch event like any
/// other. An older listed copy the structs cannot read drops the one held all the same. Without it the copy held, numbered higher, stayed the merge base until the restored
/// server's counter passed it, and the pod's status stayed what the backup said.
#[derive(Debug, Clone, Message)]
#[rtype(result = "()")]
pub struct ApiPodListed(pub Arc<ApiPod>);

/// A pod is gone from the API server.
#[derive(Debug, Clone, Message)]
#[rtype(result = "()")]
pub struct ApiPodDeleted {
    /// The deleted pod's namespace.
    pub namespace: String,
    /// The deleted pod's name; its merge base is dropped, so the next write GETs.
    pub name: String,
    /// The deleted pod's UID, where known: a copy held of another pod of the same name (made
    /// again since, and seen first by a re-list) is kept.
    pub uid: Option<String>,
}

impl StatusSyncer {
    /// Keeps `pod` as the merge base of its name unless the copy held is newer; returns whether
    /// it was kept.
    pub(super) fn remember(&mut self, key: (String, String), pod: Arc<ApiPod>) -> bool {
        let newer = self.api_pods.get(&key).is_none_or(|old| is_newer_or_same(&pod.pod, &old.pod));
        if newer {
            self.api_pods.insert(key, pod);
        }
        newer
    }
}

impl Handler<ApiPodObserved> for StatusSyncer {
    type Result = ();

    fn handle(&mut self, msg: ApiPodObserved, ctx: &mut Self::Context) {
        self.observe(msg.0, ctx);
    }
}

impl Handler<ApiPodListed> for StatusSyncer {
    type Result = ();

    fn handle(&mut self, msg: ApiPodListed, ctx: &mut Self::Context) {
        let pod = msg.0;
        let key = key_of(&pod);
        // By its metadata, which a copy the structs cannot read has too.
        let went_back = self.api_pods.get(&key).is_some_and(|held| !is_newer_or_same(&pod.pod, &held.pod));
        if !went_back {
            self.observe(pod, ctx);
            return;
        }
        let uid = source_uid(self.config.pods.as_ref(), &pod.pod);
        tracing::debug!(
            pod_uid = %uid,
            pod = %crate::format::pod_key(&key.0, &key.1),
            listed = ?resource_version(&pod.pod),
            held = ?self.api_pods.get(&key).and_then(|held| resource_version(&held.pod)),
            "A list gave an older copy of the pod than the one held; reading it again before the next write"
        );
        if self.api_pods.remove(&key).is_some() {
            self.api_pods.shrink_after_removal();
        }
        if let Some(held) = self.pods.get_mut(&uid) {
            // A conflict's floor is of the same, untrusted numbering.
            held.floor = None;
            self.end_conflict_backoff(&uid, ctx);
            self.enqueue(&uid, ctx);
        }
    }
}

fn key_of(pod: &ApiPod) -> (String, String) {
    (
        pod.pod.metadata.namespace.clone().unwrap_or_default(),
        pod.pod.metadata.name.clone().unwrap_or_default(),
    )
}

impl StatusSyncer {
    /// A copy of the pod from the API server: the merge base of the next write, unless the copy
    /// held is newer or a conflict's floor says it is stale.
    fn observe(&mut self, pod: Arc<ApiPod>, ctx: &mut Context<Self>) {
        if pod.undecodable().is_some() {
            // Its typed view is its metadata alone: no merge base.
            return;
        }
        let key = key_of(&pod);
        let uid = source_uid(self.config.pods.as_ref(), &pod.pod);
        if let Some(held) = self.pods.get_mut(&uid)
            && !held.admits_copy(resource_version(&pod.pod))
        {
            tracing::trace!(pod_uid = %uid, pod = %crate::format::pod_key(&key.0, &key.1), "Watch event no newer than the copy a write conflicted with; not a merge base");
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
        let key = (msg.namespace, msg.name);
        let another_pod = |held: &Arc<ApiPod>| {
            msg.uid.as_deref().is_some_and(|uid| held.pod.metadata.uid.as_deref().is_some_and(|u| u != uid))
        };
        if self.api_pods.get(&key).is_some_and(another_pod) {
            return;
        }
        if self.api_pods.remove(&key).is_some() {
            self.api_pods.shrink_after_removal();
        }
    }
}
