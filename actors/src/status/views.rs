//! Lock-free per-pod views of the status manager's latest snapshot. The status manager
//! publishes every stored version here; probe workers hold a [`StatusView`] and read the
//! current `Arc<PodStatus>` on every probe without a message round-trip.
//!
//! A pod's publisher lives while its status is cached or someone reads it: removing the status
//! drops an unread publisher at once, and the last reader of a removed status drops it on its
//! way out, so the registry never outgrows the pods in use.

use std::collections::HashMap;
use std::ops::{Deref, DerefMut};
use std::sync::{Arc, Mutex, Weak};

use crate::vocabulary::PodUid;
use k8s_openapi::api::core::v1::PodStatus;
use tokio::sync::watch;

type Receiver = watch::Receiver<Option<Arc<PodStatus>>>;

type Publisher = watch::Sender<Option<Arc<PodStatus>>>;

type Senders = Mutex<HashMap<PodUid, Publisher>>;

/// The latest cached status of one pod, `None` while the status manager has none. Reads like
/// the `watch::Receiver` it wraps (`borrow`, `changed`, …).
#[derive(Debug, Clone)]
pub struct StatusView {
    receiver: Receiver,
    /// The pod and registry this view came from: the status manager cannot see readers go, so
    /// the last one to leave a removed status drops its publisher.
    origin: Option<(PodUid, Weak<Senders>)>,
}

impl StatusView {
    /// A view attached to no registry; it shows `status` forever.
    pub fn detached(status: Option<Arc<PodStatus>>) -> Self {
        StatusView { receiver: watch::channel(status).1, origin: None }
    }
}

impl Deref for StatusView {
    type Target = Receiver;

    fn deref(&self) -> &Receiver {
        &self.receiver
    }
}

impl DerefMut for StatusView {
    fn deref_mut(&mut self) -> &mut Receiver {
        &mut self.receiver
    }
}

impl Drop for StatusView {
    fn drop(&mut self) {
        let Some((pod_uid, senders)) = self.origin.take() else { return };
        let Some(senders) = senders.upgrade() else { return };
        let Ok(mut senders) = senders.lock() else { return };
        let Some(sender) = senders.get(&pod_uid) else { return };
        // This view's receiver still counts until the end of this function.
        let last_reader_of_removed = sender.receiver_count() <= 1 && sender.borrow().is_none();
        if last_reader_of_removed && self.receiver.same_channel(&sender.subscribe()) {
            senders.remove(&pod_uid);
        }
    }
}

/// The registry of per-pod views, shared by the status manager (publisher) and the prober
/// manager (hands receivers to workers). The mutex guards only the map, never an await.
#[derive(Debug, Clone, Default)]
pub struct StatusViews {
    senders: Arc<Senders>,
}

impl StatusViews {
    /// An empty registry.
    pub fn new() -> Self {
        Self::default()
    }

    /// A view of the pod's status; sees every later publish.
    pub fn subscribe(&self, pod_uid: &str) -> StatusView {
        let receiver = match self.senders.lock() {
            Ok(mut senders) => {
                senders.entry(pod_uid.into()).or_insert_with(|| watch::channel(None).0).subscribe()
            }
            // A poisoned map only means a panic elsewhere; a detached view still works.
            Err(_) => return StatusView::detached(None),
        };
        StatusView { receiver, origin: Some((pod_uid.into(), Arc::downgrade(&self.senders))) }
    }

    /// Publishes a pod's new snapshot (or its removal).
    pub fn publish(&self, pod_uid: &str, status: Option<Arc<PodStatus>>) {
        let Ok(mut senders) = self.senders.lock() else { return };
        match status {
            Some(status) => {
                senders
                    .entry(pod_uid.into())
                    .or_insert_with(|| watch::channel(None).0)
                    .send_replace(Some(status));
            }
            None => {
                if let Some(sender) = senders.get(pod_uid) {
                    sender.send_replace(None);
                    if sender.receiver_count() == 0 {
                        senders.remove(pod_uid);
                    }
                }
            }
        }
    }

    /// Drops views nobody reads any more and whose pod has no status.
    pub fn prune(&self) {
        if let Ok(mut senders) = self.senders.lock() {
            senders.retain(|_, s| s.receiver_count() > 0 || s.borrow().is_some());
        }
    }

    /// How many pods have a view (tests check for leaks).
    pub fn len(&self) -> usize {
        self.senders.lock().map(|s| s.len()).unwrap_or(0)
    }

    /// Whether no pod has a view.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)] // a panic is the failure report
mod tests {
    use super::*;

    fn snapshot() -> Option<Arc<PodStatus>> {
        Some(Arc::new(PodStatus::default()))
    }

    #[test]
    fn views_see_publishes_and_removal() {
        let views = StatusViews::new();
        let early = views.subscribe("a");
        assert!(early.borrow().is_none());
        views.publish("a", snapshot());
        let late = views.subscribe("a");
        assert!(early.borrow().is_some() && late.borrow().is_some());
        views.publish("a", None);
        assert!(early.borrow().is_none() && late.borrow().is_none());
        assert_eq!(views.len(), 1, "still read");
    }

    #[test]
    fn the_last_reader_of_a_removed_status_drops_its_publisher() {
        let views = StatusViews::new();
        let one = views.subscribe("a");
        let two = one.clone();
        views.publish("a", snapshot());
        views.publish("a", None);
        drop(one);
        assert_eq!(views.len(), 1, "another reader remains");
        drop(two);
        assert!(views.is_empty());
    }

    #[test]
    fn a_reader_leaving_a_cached_status_keeps_the_publisher() {
        let views = StatusViews::new();
        views.publish("a", snapshot());
        drop(views.subscribe("a"));
        assert_eq!(views.len(), 1, "the status is still cached");
        views.publish("a", None);
        assert!(views.is_empty(), "an unread publisher goes with its status");
    }

    #[test]
    fn a_view_of_a_pod_that_never_had_a_status_leaves_nothing_behind() {
        let views = StatusViews::new();
        drop(views.subscribe("a"));
        assert!(views.is_empty());
    }

    #[test]
    fn views_outliving_the_registry_still_read() {
        let views = StatusViews::new();
        views.publish("a", snapshot());
        let view = views.subscribe("a");
        drop(views);
        assert!(view.borrow().is_some());
        assert!(StatusView::detached(None).borrow().is_none());
    }
}
