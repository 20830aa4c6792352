//! The node's pods from the API server: a list, then a watch, re-listed after a failure.

use k8s_openapi::api::core::v1::Pod;
use kube::api::Api;
use kube::runtime::WatchStreamExt;
use kube::runtime::watcher::{self, Event as WatchEvent};

/// The node's pods, as watcher events (with kube's default back-off, CRATES.md trap 13).
pub fn pod_watch(
    client: kube::Client,
    node_name: &str,
    selector: Option<&str>,
) -> impl futures::Stream<Item = Result<WatchEvent<Pod>, watcher::Error>> + 'static {
    let mut config = watcher::Config::default().fields(&format!("spec.nodeName={node_name}"));
    if let Some(selector) = selector {
        config = config.labels(selector);
    }
    watcher::watcher(Api::<Pod>::all(client), config).default_backoff()
}
