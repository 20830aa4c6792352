//! Lock-free per-pod views of the status manager's latest snapshot. The status manager
//! publishes every stored version here; probe workers hold a `watch::Receiver` and read the
//! current `Arc<PodStatus>` on every probe without a message round-trip.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use k8s_openapi::api::core::v1::PodStatus;
use tokio::sync::watch;

/// The latest cached status of one pod, `None` while the status manager has none.
pub type StatusView = watch::Receiver<Option<Arc<PodStatus>>>;

type Publisher = watch::Sender<Option<Arc<PodStatus>>>;

/// The registry of per-pod views, shared by the status manager (publisher) and the prober
/// manager (hands receivers to workers). The mutex guards only the map, never an await.
#[derive(Debug, Clone, Default)]
pub struct StatusViews {
    senders: Arc<Mutex<HashMap<String, Publisher>>>,
}

impl StatusViews {
    pub fn new() -> Self {
        Self::default()
    }

    /// A view of the pod's status; sees every later publish.
    pub fn subscribe(&self, pod_uid: &str) -> StatusView {
        match self.senders.lock() {
            Ok(mut senders) => {
                senders.entry(pod_uid.to_owned()).or_insert_with(|| watch::channel(None).0).subscribe()
            }
            // A poisoned map only means a panic elsewhere; a detached view still works.
            Err(_) => watch::channel(None).1,
        }
    }

    /// Publishes a pod's new snapshot (or its removal).
    pub fn publish(&self, pod_uid: &str, status: Option<Arc<PodStatus>>) {
        let Ok(mut senders) = self.senders.lock() else { return };
        match status {
            Some(status) => {
                senders
                    .entry(pod_uid.to_owned())
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

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}
