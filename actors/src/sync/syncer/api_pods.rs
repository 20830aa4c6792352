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
        let pod = msg.0;
        if pod.undecodable().is_some() {
            // Its typed view is its metadata alone: no merge base.
            return;
        }
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
