//! Pod resize conditions through the engine (docs/status-manager.md, "Resize conditions"): the
//! host sets `PodResizePending` / `PodResizeInProgress` on the status manager, every status
//! `Engine::sync_pod` generates carries them (after the foreign conditions, before the generated
//! ones, each with the generation it was set for), clearing removes them, a terminal pod's are
//! cleared, and `RemoveOrphanedStatuses` forgets them. Paused tokio time.
// The helpers below panic on purpose: a panic fails the test that called them.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use probelet_test_support as support;

use std::collections::HashSet;
use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::core::v1::{Container, Pod, PodCondition, PodStatus};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use probelet::Engine;
use probelet::clock::TokioClock;
use probelet::contracts::PodRegistry;
use probelet::status::manager::ResizeCondition;
use probelet::status::resize::{POD_REASON_DEFERRED, POD_REASON_INFEASIBLE};
use support::kubelet::{advance, epoch};
use support::pods::{running, terminated, test_pod};

fn pod() -> Arc<Pod> {
    let mut pod = Arc::unwrap_or_clone(test_pod("resizing").build());
    pod.metadata.generation = Some(3);
    pod.spec.as_mut().unwrap().containers = vec![Container { name: "app".into(), ..Default::default() }];
    // A condition some other controller set: it comes first, as it is.
    pod.status = Some(PodStatus {
        conditions: Some(vec![PodCondition {
            type_: "example.com/gate".into(),
            status: "True".into(),
            ..Default::default()
        }]),
        ..Default::default()
    });
    Arc::new(pod)
}

fn runtime(phase: &str) -> PodStatus {
    let container = match phase {
        "Running" => running("app", "containerd://app-1", epoch()),
        _ => terminated("app", "containerd://app-1", 0),
    };
    PodStatus { phase: Some(phase.into()), container_statuses: Some(vec![container]), ..Default::default() }
}

fn types(status: &PodStatus) -> Vec<String> {
    status.conditions.iter().flatten().map(|c| c.type_.clone()).collect()
}

fn find<'a>(status: &'a PodStatus, type_: &str) -> Option<&'a PodCondition> {
    status.conditions.iter().flatten().find(|c| c.type_ == type_)
}

fn start() -> (Engine, Arc<Pod>) {
    let pods = PodRegistry::new();
    let engine =
        Engine::builder(Arc::new(pods.clone())).clock(Arc::new(TokioClock::starting_at(epoch()))).start();
    let pod = pod();
    pods.upsert(pod.clone());
    (engine, pod)
}

async fn stored(engine: &Engine) -> Arc<PodStatus> {
    tokio::time::timeout(Duration::from_secs(60), engine.pipeline().pod_status("uid-resizing"))
        .await
        .unwrap()
        .unwrap()
        .expect("a stored status")
}

#[actix::test]
async fn resize_conditions_go_into_every_generated_status_until_cleared() {
    tokio::time::pause();
    let (engine, pod) = start();
    let p = engine.pipeline();
    p.set_pod_resize_condition("uid-resizing", ResizeCondition::Pending, POD_REASON_DEFERRED, "no room", 2);
    p.set_pod_resize_condition("uid-resizing", ResizeCondition::InProgress, "", "", 3);
    engine.sync_pod(pod.clone(), runtime("Running")).await.unwrap();
    let status = stored(&engine).await;
    assert_eq!(
        types(&status),
        [
            "example.com/gate",
            "PodResizePending",
            "PodResizeInProgress",
            "Initialized",
            "Ready",
            "ContainersReady",
            "PodScheduled"
        ]
    );
    let pending = find(&status, "PodResizePending").unwrap();
    assert_eq!(pending.status, "True");
    assert_eq!(pending.reason.as_deref(), Some(POD_REASON_DEFERRED));
    assert_eq!(pending.message.as_deref(), Some("no room"));
    assert_eq!(pending.observed_generation, Some(2), "the generation of the resize it describes");
    assert_eq!(pending.last_transition_time, Some(Time(epoch())));
    // The generated conditions carry the pod's generation.
    assert_eq!(find(&status, "Ready").unwrap().observed_generation, Some(3));

    // The same reason later: the transition time is kept; a new reason moves it.
    advance(Duration::from_secs(5)).await;
    p.set_pod_resize_condition(
        "uid-resizing",
        ResizeCondition::Pending,
        POD_REASON_DEFERRED,
        "still no room",
        3,
    );
    engine.sync_pod(pod.clone(), runtime("Running")).await.unwrap();
    let pending = find(&*stored(&engine).await, "PodResizePending").cloned().unwrap();
    assert_eq!(pending.last_transition_time, Some(Time(epoch())));
    assert_eq!(pending.message.as_deref(), Some("still no room"));
    p.set_pod_resize_condition("uid-resizing", ResizeCondition::Pending, POD_REASON_INFEASIBLE, "never", 3);
    engine.sync_pod(pod.clone(), runtime("Running")).await.unwrap();
    let pending = find(&*stored(&engine).await, "PodResizePending").cloned().unwrap();
    assert_ne!(pending.last_transition_time, Some(Time(epoch())));

    // Cleared when the resize is done: gone from the next status, which also shows the
    // container's new resources. (Clearing alone is no change to upstream's equality check,
    // docs/status-manager.md §8.28; a finished resize always changes the resources.)
    assert!(p.clear_pod_resize_condition("uid-resizing", ResizeCondition::InProgress).await.unwrap());
    assert!(!p.clear_pod_resize_condition("uid-resizing", ResizeCondition::InProgress).await.unwrap());
    let mut resized = runtime("Running");
    resized.container_statuses.as_mut().unwrap()[0].allocated_resources =
        Some([("cpu".to_owned(), Quantity("500m".into()))].into());
    engine.sync_pod(pod.clone(), resized).await.unwrap();
    let status = stored(&engine).await;
    assert!(find(&status, "PodResizeInProgress").is_none(), "{:?}", types(&status));
    assert!(find(&status, "PodResizePending").is_some());
}

#[actix::test]
async fn a_terminal_pods_resize_conditions_are_cleared() {
    tokio::time::pause();
    let (engine, pod) = start();
    let p = engine.pipeline();
    p.set_pod_resize_condition("uid-resizing", ResizeCondition::Pending, POD_REASON_DEFERRED, "", 2);
    engine.sync_pod(pod.clone(), runtime("Succeeded")).await.unwrap();
    assert!(find(&*stored(&engine).await, "PodResizePending").is_none());
    assert!(p.pod_resize_conditions("uid-resizing").await.unwrap().is_empty());
}

#[actix::test]
async fn orphaned_pods_lose_their_resize_conditions() {
    tokio::time::pause();
    let (engine, _pod) = start();
    let p = engine.pipeline();
    // Set before the pod ever had a status (an admission decision comes first).
    p.set_pod_resize_condition("uid-resizing", ResizeCondition::Pending, POD_REASON_DEFERRED, "", 2);
    p.set_pod_resize_condition("uid-other", ResizeCondition::Pending, POD_REASON_DEFERRED, "", 2);
    p.remove_orphaned_statuses(HashSet::from(["uid-resizing".into()]));
    assert_eq!(p.pod_resize_conditions("uid-resizing").await.unwrap().list().len(), 1);
    assert!(p.pod_resize_conditions("uid-other").await.unwrap().is_empty());
}
