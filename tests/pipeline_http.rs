//! The real HTTP executor through the whole pipeline: a readiness probe against a server on
//! 127.0.0.1 flips the cached Ready condition both ways. Real time (network I/O and paused
//! time do not mix), waiting on status updates rather than sleeping.

// The real binary runs on real time: its tests read the real clocks too.
#![allow(clippy::disallowed_methods)]

use probelet_test_support as support;

use std::sync::atomic::Ordering;
use std::time::Duration;

use actix::prelude::*;
use k8s_openapi::api::core::v1::{HTTPGetAction, Probe};
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use k8s_openapi::jiff::Timestamp;
use probelet::prober::ProbeKind;
use probelet::status::POD_READY;
use probelet::status::manager::PodStatusUpdated;
use support::kubelet::Harness;
use support::pods::{running, test_pod, waiting};
use tokio::sync::mpsc;

/// Forwards every stored status version to a channel the test awaits.
struct Forward(mpsc::UnboundedSender<PodStatusUpdated>);

impl Actor for Forward {
    type Context = Context<Self>;
}

impl Handler<PodStatusUpdated> for Forward {
    type Result = ();
    fn handle(&mut self, msg: PodStatusUpdated, _: &mut Context<Self>) {
        let _ = self.0.send(msg);
    }
}

/// Waits (bounded) for a stored version whose Ready condition has this status.
async fn wait_for_ready(updates: &mut mpsc::UnboundedReceiver<PodStatusUpdated>, want: &str) {
    let found = tokio::time::timeout(Duration::from_secs(20), async {
        while let Some(update) = updates.recv().await {
            let Ok(status) = update.status.status.decode() else { return false };
            let ready = status.conditions.iter().flatten().find(|c| c.type_ == POD_READY).cloned();
            if ready.is_some_and(|c| c.status == want) {
                return true;
            }
        }
        false
    })
    .await;
    assert_eq!(found, Ok(true), "Ready={want} within 20 s");
}

#[actix::test]
async fn http_readiness_flips_ready_both_ways() {
    let (port, healthy) = support::health::toggled_health_server().await;

    let h = Harness::start_real();
    let (tx, mut updates) = mpsc::unbounded_channel();
    h.pipeline.subscribe_status(Forward(tx).start().recipient());
    let readiness = Probe {
        http_get: Some(HTTPGetAction {
            path: Some("/healthz".into()),
            port: IntOrString::Int(i32::from(port)),
            ..Default::default()
        }),
        period_seconds: Some(1),
        success_threshold: Some(1),
        failure_threshold: Some(1),
        timeout_seconds: Some(5),
        ..Default::default()
    };
    let pod = test_pod("http").container("app").with_probe("app", ProbeKind::Readiness, readiness).build();
    let container = running("app", "local://1", Timestamp::now());
    let mut started = container.clone();
    started.started = Some(true);

    // As in SyncPod: the first sync sees the container before it runs, then it runs.
    h.sync(&pod, vec![waiting("app")]).await;
    h.sync(&pod, vec![started.clone()]).await;
    wait_for_ready(&mut updates, "True").await;
    assert!(h.recorder.events().is_empty(), "no events while healthy");

    healthy.store(false, Ordering::SeqCst);
    wait_for_ready(&mut updates, "False").await;
    let ready = h.condition(&pod, POD_READY).await;
    assert_eq!(ready.message.as_deref(), Some("containers with unready status: [app]"));
    assert!(
        h.recorder
            .rendered()
            .iter()
            .any(|e| e == "Warning Unhealthy Readiness probe failed: HTTP probe failed with statuscode: 503"),
        "events: {:?}",
        h.recorder.rendered()
    );

    healthy.store(true, Ordering::SeqCst);
    wait_for_ready(&mut updates, "True").await;
}
