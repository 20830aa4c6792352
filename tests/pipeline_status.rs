//! The status manager actor through the pipeline (docs/status-manager.md §5.1–5.9, §5.11, §5.13,
//! §5.14): versions, the container-level setters, `lastTransitionTime` and `startTime`,
//! normalisation, illegal transitions, TerminatePod, removal and the per-pod views, static/mirror
//! pods, subscribers and snapshots. Paused tokio time throughout; statuses are stored with
//! `SetPodStatus` directly (no prober involved) and read back by asking the actor.
// The helpers below panic on purpose: a panic fails the test that called them.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use probelet_test_support as support;

use std::collections::{HashMap, HashSet};
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use actix::prelude::*;
use k8s_openapi::api::core::v1::{
    ContainerState, ContainerStateTerminated, ContainerStatus, Pod, PodCondition, PodStatus,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use k8s_openapi::jiff::Timestamp;
use probelet::Pipeline;
use probelet::container::ContainerId;
use probelet::contracts::{PodLookup, PodRegistry};
use probelet::status::manager::{
    DeletePodStatus, ListStatuses, PodStatusUpdated, SetContainerReadiness, SetContainerStartup,
    VersionedPodStatus,
};
use probelet::status::stored::StoredStatus;
use probelet::status::{CONTAINERS_READY, POD_READY};
use support::kubelet::{Harness, advance, epoch, start_pipeline};
use support::log::CapturedLog;
use support::pods::{running, terminated, test_pod, waiting};

// === helpers ===

/// Every query is bounded: a lost answer fails the test instead of hanging it (under paused
/// time the timeout's timer fires as soon as the runtime is idle).
async fn ask<T>(fut: impl Future<Output = T>) -> T {
    tokio::time::timeout(Duration::from_secs(60), fut).await.expect("the actor answered")
}

fn uid(pod: &Pod) -> String {
    pod.metadata.uid.clone().unwrap_or_default()
}

async fn versioned(p: &Pipeline, uid: &str) -> Option<VersionedPodStatus> {
    ask(p.versioned_status(uid)).await.unwrap()
}

async fn version(p: &Pipeline, uid: &str) -> Option<u64> {
    versioned(p, uid).await.map(|v| v.version)
}

/// The stored copy of the pod's status (shared, not decoded).
async fn stored(p: &Pipeline, uid: &str) -> StoredStatus {
    versioned(p, uid).await.expect("a cached status").status
}

async fn cached(p: &Pipeline, uid: &str) -> Arc<PodStatus> {
    ask(p.pod_status(uid)).await.unwrap().expect("a cached status")
}

fn status(phase: &str, containers: Vec<ContainerStatus>) -> PodStatus {
    PodStatus { phase: Some(phase.into()), container_statuses: Some(containers), ..Default::default() }
}

fn cond(type_: &str, status: &str) -> PodCondition {
    PodCondition { type_: type_.into(), status: status.into(), ..Default::default() }
}

fn cond_at(type_: &str, status: &str, at: Timestamp) -> PodCondition {
    PodCondition {
        last_transition_time: Some(Time(at)),
        last_probe_time: Some(Time(at)),
        ..cond(type_, status)
    }
}

fn with_ready(mut c: ContainerStatus, ready: bool) -> ContainerStatus {
    c.ready = ready;
    c
}

fn condition(status: &PodStatus, type_: &str) -> PodCondition {
    status.conditions.iter().flatten().find(|c| c.type_ == type_).cloned().expect("condition present")
}

fn container(status: &PodStatus, name: &str) -> ContainerStatus {
    status
        .container_statuses
        .iter()
        .flatten()
        .chain(status.init_container_statuses.iter().flatten())
        .find(|c| c.name == name)
        .cloned()
        .expect("container status present")
}

/// (status, reason, message) of a condition, the parts tests compare.
fn srm(c: &PodCondition) -> (&str, Option<&str>, Option<&str>) {
    (c.status.as_str(), c.reason.as_deref(), c.message.as_deref())
}

fn readiness(pod_uid: &str, id: &str, ready: bool) -> SetContainerReadiness {
    SetContainerReadiness { pod_uid: pod_uid.into(), container_id: ContainerId::parse(id), ready }
}

fn startup(pod_uid: &str, id: &str, started: bool) -> SetContainerStartup {
    SetContainerStartup { pod_uid: pod_uid.into(), container_id: ContainerId::parse(id), started }
}

fn at(secs: u64) -> Timestamp {
    epoch() + Duration::from_secs(secs)
}

/// Collects every `PodStatusUpdated` (the syncer's view).
#[derive(Default)]
struct Updates(Vec<PodStatusUpdated>);

impl Actor for Updates {
    type Context = Context<Self>;
}

impl Handler<PodStatusUpdated> for Updates {
    type Result = ();
    fn handle(&mut self, msg: PodStatusUpdated, _: &mut Context<Self>) {
        self.0.push(msg);
    }
}

#[derive(Message)]
#[rtype(result = "Vec<PodStatusUpdated>")]
struct Drain;

impl Handler<Drain> for Updates {
    type Result = MessageResult<Drain>;
    fn handle(&mut self, _: Drain, _: &mut Context<Self>) -> Self::Result {
        MessageResult(std::mem::take(&mut self.0))
    }
}

/// Subscribes a collector; the round-trip makes sure the subscription is in place.
async fn subscribe(p: &Pipeline) -> Addr<Updates> {
    let updates = Updates::default().start();
    p.subscribe_status(updates.clone().recipient());
    ask(p.statuses()).await.unwrap();
    updates
}

/// The versions a subscriber received since the last drain, after the status manager handled
/// everything sent before.
async fn received(p: &Pipeline, updates: &Addr<Updates>) -> Vec<(String, u64)> {
    ask(p.statuses()).await.unwrap();
    let drained = ask(updates.send(Drain)).await.unwrap();
    drained.into_iter().map(|u| (u.pod_uid.into(), u.status.version)).collect()
}

/// A host's pods with static pods and their mirrors.
#[derive(Clone, Default)]
struct StaticPods {
    registry: PodRegistry,
    static_uids: HashSet<String>,
    /// Mirror pod UID → static pod UID.
    mirrors: HashMap<String, String>,
}

impl PodLookup for StaticPods {
    fn pod_by_uid(&self, uid: &str) -> Option<Arc<Pod>> {
        self.registry.pod_by_uid(uid)
    }

    fn static_uid_for_mirror(&self, mirror_uid: &str) -> Option<String> {
        self.mirrors.get(mirror_uid).cloned()
    }

    fn mirror_uid_for_static(&self, static_uid: &str) -> Option<String> {
        self.mirrors.iter().find(|(_, s)| s.as_str() == static_uid).map(|(m, _)| m.clone())
    }

    fn is_static(&self, uid: &str) -> bool {
        self.static_uids.contains(uid)
    }
}

// === versions and equality (docs/status-manager.md §5.1, §5.4, §5.8 step 6–7, §5.9) ===

#[actix::test]
async fn versions_start_at_one_and_bump_per_stored_change() {
    tokio::time::pause();
    let h = Harness::start();
    let pod = test_pod("web").container("app").build();
    let u = uid(&pod);
    assert_eq!(version(&h.pipeline, &u).await, None, "nothing cached before the first status");

    h.pipeline.set_pod_status(pod.clone(), status("Pending", vec![waiting("app")]));
    let first = versioned(&h.pipeline, &u).await.unwrap();
    assert_eq!(first.version, 1);
    assert_eq!((first.pod_name.as_str(), first.pod_namespace.as_str()), ("web", "default"));
    assert!(!first.pod_is_finished);

    advance(Duration::from_secs(10)).await;
    h.pipeline.set_pod_status(pod.clone(), status("Running", vec![running("app", "cri://1", at(0))]));
    let second = versioned(&h.pipeline, &u).await.unwrap();
    assert_eq!(second.version, 2);
    assert_eq!(first.at, Some(epoch()));
    assert_eq!(second.at, first.at, "`at` is the first unsynced update's time, carried forward");
    h.pipeline.set_pod_status(
        pod.clone(),
        status("Running", vec![with_ready(running("app", "cri://1", at(0)), true)]),
    );
    assert_eq!(version(&h.pipeline, &u).await, Some(3));
    let all = ask(h.pipeline.statuses()).await.unwrap();
    assert_eq!(all.len(), 1);
    assert_eq!(all[u.as_str()].version, 3);
}

#[actix::test]
async fn an_identical_status_timestamps_aside_is_ignored() {
    tokio::time::pause();
    let h = Harness::start();
    let updates = subscribe(&h.pipeline).await;
    let pod = test_pod("web").container("app").build();
    let u = uid(&pod);
    let make = |t: Timestamp, started: Timestamp| PodStatus {
        conditions: Some(vec![cond_at(POD_READY, "True", t), cond_at(CONTAINERS_READY, "True", t)]),
        ..status("Running", vec![with_ready(running("app", "cri://1", started), true)])
    };
    h.pipeline.set_pod_status(pod.clone(), make(at(0), at(0)));
    let before = stored(&h.pipeline, &u).await;
    assert_eq!(received(&h.pipeline, &updates).await, [(u.clone(), 1)]);

    // Later condition timestamps and a sub-second start are no change to the kubelet.
    advance(Duration::from_secs(30)).await;
    h.pipeline.set_pod_status(pod.clone(), make(at(20), at(0)));
    h.pipeline.set_pod_status(pod.clone(), make(at(25), epoch() + Duration::from_millis(700)));
    assert_eq!(version(&h.pipeline, &u).await, Some(1), "no new version");
    assert!(received(&h.pipeline, &updates).await.is_empty(), "no update published");
    assert!(before.same_copy(&stored(&h.pipeline, &u).await), "the cached status is untouched");
}

/// Upstream `isPodStatusByKubeletEqual` replaces old's conditions by new's before the deep
/// comparison, so a condition owned by someone else never makes a difference: the update is
/// ignored and the cache keeps the old foreign condition.
#[actix::test]
async fn a_change_only_in_a_foreign_condition_is_ignored() {
    tokio::time::pause();
    let h = Harness::start();
    let updates = subscribe(&h.pipeline).await;
    let pod = test_pod("web").container("app").build();
    let u = uid(&pod);
    let make = |feature: &str| PodStatus {
        conditions: Some(vec![cond("example.com/feature", feature), cond(POD_READY, "True")]),
        ..status("Running", vec![with_ready(running("app", "cri://1", at(0)), true)])
    };
    h.pipeline.set_pod_status(pod.clone(), make("False"));
    assert_eq!(received(&h.pipeline, &updates).await, [(u.clone(), 1)]);

    h.pipeline.set_pod_status(pod.clone(), make("True"));
    assert_eq!(version(&h.pipeline, &u).await, Some(1), "a foreign condition is not the kubelet's change");
    assert!(received(&h.pipeline, &updates).await.is_empty());
    let kept = condition(&*cached(&h.pipeline, &u).await, "example.com/feature");
    assert_eq!(kept.status, "False", "the ignored update left the cache as it was");

    // A foreign condition appearing or disappearing is no change either.
    h.pipeline.set_pod_status(
        pod.clone(),
        PodStatus {
            conditions: Some(vec![cond(POD_READY, "True")]),
            ..status("Running", vec![with_ready(running("app", "cri://1", at(0)), true)])
        },
    );
    assert_eq!(version(&h.pipeline, &u).await, Some(1));

    // Nor, surprisingly, a kubelet-owned condition that disappears (docs/status-manager.md §8.28):
    // only the new status's conditions are checked.
    h.pipeline.set_pod_status(
        pod.clone(),
        PodStatus {
            conditions: None,
            ..status("Running", vec![with_ready(running("app", "cri://1", at(0)), true)])
        },
    );
    assert_eq!(version(&h.pipeline, &u).await, Some(1));

    // A kubelet-owned condition's reason does make a difference.
    h.pipeline.set_pod_status(
        pod.clone(),
        PodStatus {
            conditions: Some(vec![
                cond("example.com/feature", "True"),
                PodCondition { reason: Some("Other".into()), ..cond(POD_READY, "True") },
            ]),
            ..status("Running", vec![with_ready(running("app", "cri://1", at(0)), true)])
        },
    );
    assert_eq!(version(&h.pipeline, &u).await, Some(2));
    assert_eq!(condition(&*cached(&h.pipeline, &u).await, "example.com/feature").status, "True");
}

#[actix::test]
async fn a_pod_being_deleted_gets_a_new_version_even_when_identical() {
    tokio::time::pause();
    let h = Harness::start();
    let updates = subscribe(&h.pipeline).await;
    let pod = test_pod("web").container("app").build();
    let deleting = test_pod("web").container("app").deleting().build();
    let u = uid(&pod);
    let s = status("Running", vec![running("app", "cri://1", at(0))]);
    h.pipeline.set_pod_status(pod.clone(), s.clone());
    h.pipeline.set_pod_status(pod.clone(), s.clone());
    assert_eq!(version(&h.pipeline, &u).await, Some(1));

    h.pipeline.set_pod_status(deleting.clone(), s.clone());
    h.pipeline.set_pod_status(deleting.clone(), s.clone());
    assert_eq!(version(&h.pipeline, &u).await, Some(3), "forced: every SetPodStatus stores");
    assert_eq!(received(&h.pipeline, &updates).await, [(u.clone(), 1), (u.clone(), 2), (u.clone(), 3)]);
}

/// docs/status-manager.md §5.4 [1.33+]: the stored status says which generation of the pod it
/// reflects.
#[actix::test]
async fn set_pod_status_records_the_observed_generation() {
    tokio::time::pause();
    let h = Harness::start();
    let generation = |g: i64| {
        let mut pod = (*test_pod("web").container("a").build()).clone();
        pod.metadata.generation = Some(g);
        Arc::new(pod)
    };
    let u = uid(&generation(1));
    let s = PodStatus {
        observed_generation: Some(99),
        ..status("Running", vec![running("a", "cri://a", at(0))])
    };
    h.pipeline.set_pod_status(generation(3), s.clone());
    assert_eq!(cached(&h.pipeline, &u).await.observed_generation, Some(3), "the pod's, not the caller's");
    h.pipeline.set_pod_status(generation(3), s.clone());
    assert_eq!(version(&h.pipeline, &u).await, Some(1));
    h.pipeline.set_pod_status(generation(4), s.clone());
    assert_eq!(version(&h.pipeline, &u).await, Some(2), "a new generation observed is a change");
    assert_eq!(cached(&h.pipeline, &u).await.observed_generation, Some(4));

    // An older copy of the pod (or one without a generation) never lowers it: no new version, no
    // patch that would take it back.
    h.pipeline.set_pod_status(generation(2), s.clone());
    let mut without = (*generation(4)).clone();
    without.metadata.generation = None;
    h.pipeline.set_pod_status(Arc::new(without), s.clone());
    assert_eq!(version(&h.pipeline, &u).await, Some(2), "an older generation is no change");
    assert_eq!(cached(&h.pipeline, &u).await.observed_generation, Some(4));
}

// === SetContainerReadiness (docs/status-manager.md §5.5) ===
/// docs/status-manager.md §6.1 [1.34+]: the conditions the kubelet generates carry the pod's
/// generation, whatever the caller put there. The kubelet's other conditions keep theirs: a resize
/// condition describes the generation of its resize, DisruptionTarget that of its eviction. Foreign
/// ones are not touched.
#[actix::test]
async fn set_pod_status_stamps_generated_conditions_with_the_generation() {
    tokio::time::pause();
    let h = Harness::start();
    let generation = |g: Option<i64>| {
        let mut pod = (*gated_pod("web")).clone();
        pod.metadata.generation = g;
        Arc::new(pod)
    };
    let u = uid(&generation(None));
    let mut s = gated_status(Some("True"), true);
    let conditions = s.conditions.get_or_insert_with(Vec::new);
    conditions.push(cond("PodScheduled", "True"));
    conditions.push(cond("Initialized", "True"));
    conditions.push(cond("PodReadyToStartContainers", "True"));
    for c in conditions.iter_mut() {
        c.observed_generation = Some(99);
    }
    // Set for an earlier generation of the pod, and one left unset.
    conditions.push(PodCondition { observed_generation: Some(2), ..cond("PodResizePending", "True") });
    conditions.push(cond("PodResizeInProgress", "True"));
    conditions.push(PodCondition { observed_generation: Some(1), ..cond("DisruptionTarget", "True") });
    let generations = |s: &PodStatus| -> Vec<(String, Option<i64>)> {
        s.conditions.iter().flatten().map(|c| (c.type_.clone(), c.observed_generation)).collect()
    };
    let stamped = |generated: Option<i64>| -> Vec<(String, Option<i64>)> {
        vec![
            ("example.com/gate".into(), Some(99)),
            (POD_READY.into(), generated),
            (CONTAINERS_READY.into(), generated),
            ("PodScheduled".into(), generated),
            ("Initialized".into(), generated),
            ("PodReadyToStartContainers".into(), generated),
            ("PodResizePending".into(), Some(2)),
            ("PodResizeInProgress".into(), None),
            ("DisruptionTarget".into(), Some(1)),
        ]
    };

    h.pipeline.set_pod_status(generation(Some(5)), s.clone());
    let stored = cached(&h.pipeline, &u).await;
    assert_eq!(stored.observed_generation, Some(5));
    assert_eq!(generations(&stored), stamped(Some(5)));
    h.pipeline.set_pod_status(generation(Some(6)), s.clone());
    let stored = cached(&h.pipeline, &u).await;
    assert_eq!(stored.observed_generation, Some(6));
    assert_eq!(generations(&stored), stamped(Some(6)));
    // A pod copy without a generation (Go's zero is an omitted field) never lowers the one the
    // status reports (updateStatusInternal), and conditions that differ only in their
    // generation are no change: the stored status stays as it was.
    for none in [Some(0), None] {
        h.pipeline.set_pod_status(generation(none), s.clone());
        let stored = cached(&h.pipeline, &u).await;
        assert_eq!(stored.observed_generation, Some(6), "{none:?}");
        assert_eq!(generations(&stored), stamped(Some(6)), "{none:?}");
    }
    // A first status set from a pod without a generation has none, on the status and on the
    // generated conditions alike.
    let mut fresh = (*generation(None)).clone();
    fresh.metadata.uid = Some("uid-fresh".into());
    h.pipeline.set_pod_status(Arc::new(fresh), s.clone());
    let stored = cached(&h.pipeline, "uid-fresh").await;
    assert_eq!(stored.observed_generation, None);
    assert_eq!(generations(&stored), stamped(None));
}

#[actix::test]
async fn set_container_readiness_stamps_regenerated_conditions_with_the_generation() {
    tokio::time::pause();
    let h = Harness::start();
    let sm = &h.pipeline.status_manager;
    let mut web = (*gated_pod("web")).clone();
    web.metadata.generation = Some(5);
    let web = Arc::new(web);
    let u = uid(&web);
    h.pods.upsert(web.clone());
    // A status stored without conditions: the regenerated ones are appended.
    h.pipeline.set_pod_status(web.clone(), gated_status(Some("True"), false));
    assert_eq!(condition(&*cached(&h.pipeline, &u).await, "example.com/gate").observed_generation, None);

    // The pod moved on to generation 6 since (its spec changed); readiness uses the pod's
    // current generation, as upstream's generators read it from the pod manager's pod.
    let mut newer = (*web).clone();
    newer.metadata.generation = Some(6);
    h.pods.upsert(Arc::new(newer));
    sm.do_send(readiness(&u, "cri://a", true));
    let s = cached(&h.pipeline, &u).await;
    assert_eq!(version(&h.pipeline, &u).await, Some(2));
    assert_eq!(condition(&s, POD_READY).observed_generation, Some(6));
    assert_eq!(condition(&s, CONTAINERS_READY).observed_generation, Some(6));
    assert_eq!(condition(&s, "example.com/gate").observed_generation, None, "not the kubelet's");
    assert_eq!(s.observed_generation, Some(5), "the status itself is SetPodStatus's");

    let mut unset = (*web).clone();
    unset.metadata.generation = None;
    h.pods.upsert(Arc::new(unset));
    sm.do_send(readiness(&u, "cri://a", false));
    let s = cached(&h.pipeline, &u).await;
    assert_eq!(version(&h.pipeline, &u).await, Some(3));
    assert_eq!(condition(&s, POD_READY).observed_generation, None);
    assert_eq!(condition(&s, CONTAINERS_READY).observed_generation, None);
}

/// A burst of results for a large pod is applied in one pass: one new version, not one per
/// result (each costs an encode and a comparison of the whole status), with every result in
/// it, as if applied one after the other. A reader asking right after sees them all.
#[actix::test]
async fn a_burst_of_results_for_one_pod_is_one_version_with_all_of_them() {
    tokio::time::pause();
    let h = Harness::start();
    let updates = subscribe(&h.pipeline).await;
    let names: Vec<String> = (0..300).map(|i| format!("c{i}")).collect();
    let pod = names.iter().fold(test_pod("big"), |pod, name| pod.container(name)).build();
    let u = uid(&pod);
    h.pods.upsert(pod.clone());
    let containers = names.iter().map(|name| running(name, &format!("cri://{name}"), at(0))).collect();
    h.pipeline.set_pod_status(pod.clone(), status("Running", containers));
    let sm = &h.pipeline.status_manager;
    for name in &names {
        sm.do_send(startup(&u, &format!("cri://{name}"), true));
        sm.do_send(readiness(&u, &format!("cri://{name}"), true));
    }
    // One unknown container and one flip back and forth change nothing else.
    sm.do_send(readiness(&u, "cri://gone", true));
    sm.do_send(readiness(&u, "cri://c0", false));
    sm.do_send(readiness(&u, "cri://c0", true));

    let s = cached(&h.pipeline, &u).await;
    assert_eq!(version(&h.pipeline, &u).await, Some(2), "one version for 603 results");
    let statuses = s.container_statuses.as_ref().unwrap();
    assert!(statuses.iter().all(|c| c.ready && c.started == Some(true)));
    assert_eq!(srm(&condition(&s, POD_READY)), ("True", None, None));
    assert_eq!(srm(&condition(&s, CONTAINERS_READY)), ("True", None, None));
    let seen: Vec<u64> = ask(updates.send(Drain)).await.unwrap().iter().map(|u| u.status.version).collect();
    assert_eq!(seen, [1, 2]);
}

/// A pod with a sidecar `proxy`, containers `a` and `b`, and a readiness gate.
fn gated_pod(name: &str) -> Arc<Pod> {
    test_pod(name).sidecar("proxy").container("a").container("b").readiness_gate("example.com/gate").build()
}

fn gated_status(gate: Option<&str>, conditions: bool) -> PodStatus {
    let mut proxy = running("proxy", "cri://proxy", at(0));
    proxy.started = Some(true);
    let mut list = Vec::new();
    if let Some(gate) = gate {
        list.push(cond("example.com/gate", gate));
    }
    if conditions {
        list.push(cond(POD_READY, "False"));
        list.push(cond(CONTAINERS_READY, "False"));
    }
    PodStatus {
        init_container_statuses: Some(vec![proxy]),
        conditions: if list.is_empty() { None } else { Some(list) },
        ..status("Running", vec![running("a", "cri://a", at(0)), running("b", "cri://b", at(0))])
    }
}

/// The status manager's lines are upstream's, at the levels its verbosities map to and with
/// klog's keys in upstream's order (docs/architecture.md, "Log lines"): "Ignoring same status
/// for pod" (verbosity 3: debug, was trace; `pod`, `status`), "Pod has been deleted, no need
/// to update readiness" (4: trace, was debug; `podUID`), and at info "Container readiness
/// changed before pod has synced" and "Container readiness changed for unknown container"
/// (`pod`, `containerID`). Before, the keys were the engine's (`pod_uid`, `container_id`) and
/// the first line had no status. The actor runs on the test's thread, where the log is
/// captured.
#[actix::test]
async fn the_status_manager_logs_upstreams_lines_at_their_levels() {
    let log = CapturedLog::default();
    let _guard = log.capture_at(tracing::Level::TRACE);
    tokio::time::pause();
    let h = Harness::start();
    let sm = &h.pipeline.status_manager;

    let ghost = gated_pod("ghost");
    h.pipeline.set_pod_status(ghost.clone(), gated_status(Some("True"), true));
    h.pipeline.set_pod_status(ghost.clone(), gated_status(Some("True"), true));
    sm.do_send(readiness(&uid(&ghost), "cri://a", true));
    let fresh = gated_pod("fresh");
    h.pods.upsert(fresh.clone());
    sm.do_send(readiness(&uid(&fresh), "cri://a", true));
    let web = gated_pod("web");
    h.pods.upsert(web.clone());
    h.pipeline.set_pod_status(web.clone(), gated_status(Some("True"), true));
    sm.do_send(readiness(&uid(&web), "cri://nope", true));
    assert_eq!(version(&h.pipeline, &uid(&web)).await, Some(1));

    let level_of = |message: &str| -> Vec<String> {
        let lines = log.lines_with(message);
        lines.iter().map(|l| l.split_whitespace().next().unwrap_or_default().to_owned()).collect()
    };
    let cases = [
        ("Ignoring same status for pod", "DEBUG", r#"pod="default/ghost" status={"#),
        ("Pod has been deleted, no need to update readiness", "TRACE", r#"podUID="uid-ghost""#),
        (
            "Container readiness changed before pod has synced",
            "INFO",
            r#"pod="default/fresh" containerID="cri://a""#,
        ),
        (
            "Container readiness changed for unknown container",
            "INFO",
            r#"pod="default/web" containerID="cri://nope""#,
        ),
    ];
    for (message, level, fields) in cases {
        assert_eq!(level_of(message), [level], "{message}");
        // klog's keys, in upstream's order, right after the message: no other key before them.
        let line = log.lines_with(message).into_iter().next().unwrap_or_default();
        assert!(line.contains(&format!("{message} {fields}")), "{line}");
    }
    // The status is written as klog writes a struct, its JSON.
    let ignored = log.lines_with("Ignoring same status for pod").into_iter().next().unwrap_or_default();
    let json = ignored.split_once(" status=").map(|(_, json)| json.trim()).unwrap_or_default();
    let status: serde_json::Value = serde_json::from_str(json).unwrap();
    assert_eq!(status["phase"], "Running", "{ignored}");
}

#[actix::test]
async fn set_container_readiness_ignores_unknown_pods_unsynced_pods_and_unknown_containers() {
    tokio::time::pause();
    let h = Harness::start();
    let updates = subscribe(&h.pipeline).await;
    let sm = &h.pipeline.status_manager;

    // A cached status, but the pod lookup does not know the pod (deleted).
    let ghost = gated_pod("ghost");
    h.pipeline.set_pod_status(ghost.clone(), gated_status(Some("True"), true));
    sm.do_send(readiness(&uid(&ghost), "cri://a", true));
    assert_eq!(version(&h.pipeline, &uid(&ghost)).await, Some(1));
    assert!(!container(&*cached(&h.pipeline, &uid(&ghost)).await, "a").ready);

    // Known to the lookup, but no status cached yet.
    let fresh = gated_pod("fresh");
    h.pods.upsert(fresh.clone());
    sm.do_send(readiness(&uid(&fresh), "cri://a", true));
    assert_eq!(version(&h.pipeline, &uid(&fresh)).await, None, "no status is made up");

    // Known and cached, but no container has that ID.
    let web = gated_pod("web");
    h.pods.upsert(web.clone());
    h.pipeline.set_pod_status(web.clone(), gated_status(Some("True"), true));
    sm.do_send(readiness(&uid(&web), "cri://nope", true));
    sm.do_send(readiness(&uid(&web), "a", true));
    assert_eq!(version(&h.pipeline, &uid(&web)).await, Some(1));

    // Unchanged readiness.
    sm.do_send(readiness(&uid(&web), "cri://a", false));
    assert_eq!(version(&h.pipeline, &uid(&web)).await, Some(1));
    assert_eq!(received(&h.pipeline, &updates).await, [(uid(&ghost), 1), (uid(&web), 1)]);
}

#[actix::test]
async fn set_container_readiness_regenerates_ready_and_containers_ready() {
    tokio::time::pause();
    let h = Harness::start();
    let sm = &h.pipeline.status_manager;
    let web = gated_pod("web");
    let u = uid(&web);
    h.pods.upsert(web.clone());
    h.pipeline.set_pod_status(web.clone(), gated_status(Some("True"), true));

    sm.do_send(readiness(&u, "cri://a", true));
    let s = cached(&h.pipeline, &u).await;
    assert_eq!(version(&h.pipeline, &u).await, Some(2));
    assert!(container(&s, "a").ready);
    let unready = ("False", Some("ContainersNotReady"), Some("containers with unready status: [proxy b]"));
    assert_eq!(srm(&condition(&s, CONTAINERS_READY)), unready, "the sidecar counts, and comes first");
    assert_eq!(srm(&condition(&s, POD_READY)), unready);

    // The sidecar's readiness is found among the init container statuses.
    sm.do_send(readiness(&u, "cri://proxy", true));
    let s = cached(&h.pipeline, &u).await;
    assert!(container(&s, "proxy").ready);
    assert_eq!(
        condition(&s, CONTAINERS_READY).message.as_deref(),
        Some("containers with unready status: [b]")
    );

    sm.do_send(readiness(&u, "cri://b", true));
    let s = cached(&h.pipeline, &u).await;
    assert_eq!(version(&h.pipeline, &u).await, Some(4));
    assert_eq!(srm(&condition(&s, CONTAINERS_READY)), ("True", None, None));
    assert_eq!(srm(&condition(&s, POD_READY)), ("True", None, None), "the gate is True");
    let types: Vec<&str> = s.conditions.iter().flatten().map(|c| c.type_.as_str()).collect();
    assert_eq!(types, ["example.com/gate", POD_READY, CONTAINERS_READY], "replaced in place");

    // Back to unready.
    sm.do_send(readiness(&u, "cri://a", false));
    let s = cached(&h.pipeline, &u).await;
    assert_eq!(condition(&s, POD_READY).message.as_deref(), Some("containers with unready status: [a]"));
}

#[actix::test]
async fn set_container_readiness_respects_readiness_gates() {
    tokio::time::pause();
    let h = Harness::start();
    let sm = &h.pipeline.status_manager;
    let ready_but_b = |gate| {
        let mut s = gated_status(gate, true);
        for c in
            s.container_statuses.iter_mut().flatten().chain(s.init_container_statuses.iter_mut().flatten())
        {
            c.ready = c.name != "b";
        }
        s
    };
    let cases = [
        (
            "false-gate",
            Some("False"),
            r#"the status of pod readiness gate "example.com/gate" is not "True", but False"#,
        ),
        (
            "unknown-gate",
            Some("Unknown"),
            r#"the status of pod readiness gate "example.com/gate" is not "True", but Unknown"#,
        ),
        (
            "missing-gate",
            None,
            r#"corresponding condition of pod readiness gate "example.com/gate" does not exist."#,
        ),
    ];
    for (name, gate, message) in cases {
        let pod = gated_pod(name);
        h.pods.upsert(pod.clone());
        h.pipeline.set_pod_status(pod.clone(), ready_but_b(gate));
        sm.do_send(readiness(&uid(&pod), "cri://b", true));
        let s = cached(&h.pipeline, &uid(&pod)).await;
        assert_eq!(srm(&condition(&s, CONTAINERS_READY)), ("True", None, None), "{name}");
        assert_eq!(
            srm(&condition(&s, POD_READY)),
            ("False", Some("ReadinessGatesNotReady"), Some(message)),
            "{name}"
        );
    }
}

#[actix::test]
async fn set_container_readiness_appends_missing_conditions() {
    tokio::time::pause();
    let h = Harness::start();
    let pod = test_pod("web").container("a").build();
    let u = uid(&pod);
    h.pods.upsert(pod.clone());
    h.pipeline.set_pod_status(pod.clone(), status("Running", vec![running("a", "cri://a", at(0))]));
    assert!(cached(&h.pipeline, &u).await.conditions.is_none());

    h.pipeline.status_manager.do_send(readiness(&u, "cri://a", true));
    let s = cached(&h.pipeline, &u).await;
    let types: Vec<&str> = s.conditions.iter().flatten().map(|c| c.type_.as_str()).collect();
    assert_eq!(types, [POD_READY, CONTAINERS_READY]);
    assert_eq!(srm(&condition(&s, POD_READY)), ("True", None, None));
    assert_eq!(condition(&s, POD_READY).last_transition_time, Some(Time(epoch())));
}

// === SetContainerStartup (docs/status-manager.md §5.6) ===

#[actix::test]
async fn set_container_startup_guards_and_nil_to_false() {
    tokio::time::pause();
    let h = Harness::start();
    let sm = &h.pipeline.status_manager;

    let ghost = test_pod("ghost").container("a").build();
    h.pipeline.set_pod_status(ghost.clone(), status("Running", vec![running("a", "cri://a", at(0))]));
    sm.do_send(startup(&uid(&ghost), "cri://a", true));
    assert_eq!(version(&h.pipeline, &uid(&ghost)).await, Some(1), "pod unknown to the lookup");

    let fresh = test_pod("fresh").container("a").build();
    h.pods.upsert(fresh.clone());
    sm.do_send(startup(&uid(&fresh), "cri://a", true));
    assert_eq!(version(&h.pipeline, &uid(&fresh)).await, None, "no cached status");

    let web = test_pod("web").container("a").build();
    let u = uid(&web);
    h.pods.upsert(web.clone());
    h.pipeline.set_pod_status(web.clone(), status("Running", vec![running("a", "cri://a", at(0))]));
    sm.do_send(startup(&u, "cri://other", true));
    assert_eq!(version(&h.pipeline, &u).await, Some(1), "unknown container");
    assert_eq!(container(&*cached(&h.pipeline, &u).await, "a").started, None);

    sm.do_send(startup(&u, "cri://a", false));
    assert_eq!(version(&h.pipeline, &u).await, Some(2), "nil → false is a change");
    assert_eq!(container(&*cached(&h.pipeline, &u).await, "a").started, Some(false));
    sm.do_send(startup(&u, "cri://a", false));
    assert_eq!(version(&h.pipeline, &u).await, Some(2), "false → false is not");
    sm.do_send(startup(&u, "cri://a", true));
    assert_eq!(version(&h.pipeline, &u).await, Some(3));
    assert_eq!(container(&*cached(&h.pipeline, &u).await, "a").started, Some(true));
}

/// A container status without an ID (`""`, or none) is set by no startup or readiness result:
/// a result for an empty ID names no container, as upstream's status manager looks up
/// `ContainerID.String()` (`://` for an empty ID), which no status holds. Its prober never
/// probes such a container either
/// (`pipeline_worker::a_running_container_without_an_id_is_not_probed_nor_started_by_its_startup_probe`).
#[actix::test]
async fn a_result_for_an_empty_container_id_sets_no_container() {
    let log = CapturedLog::default();
    let _guard = log.capture_at(tracing::Level::INFO);
    tokio::time::pause();
    let h = Harness::start();
    let sm = &h.pipeline.status_manager;
    let pod = test_pod("no-ids").container("blank").container("none").build();
    let u = uid(&pod);
    h.pods.upsert(pod.clone());
    let mut none = running("none", "", at(0));
    none.container_id = None;
    h.pipeline.set_pod_status(pod.clone(), status("Running", vec![running("blank", "", at(0)), none]));
    sm.do_send(startup(&u, "", true));
    sm.do_send(readiness(&u, "", true));
    assert_eq!(version(&h.pipeline, &u).await, Some(1), "no container changed");
    let s = cached(&h.pipeline, &u).await;
    for name in ["blank", "none"] {
        assert_eq!((container(&s, name).started, container(&s, name).ready), (None, false), "{name}");
    }
    // Upstream names the ID as `ContainerID.String()` writes an empty one.
    for what in ["startup", "readiness"] {
        let line = format!(
            r#"Container {what} changed for unknown container pod="default/no-ids" containerID="://""#
        );
        assert_eq!(log.lines_with(&line).len(), 1, "{line}: {:?}", log.lines_with("unknown container"));
    }
}

#[actix::test]
async fn set_container_startup_does_not_regenerate_conditions() {
    tokio::time::pause();
    let h = Harness::start();
    let pod = test_pod("web").sidecar("proxy").container("a").build();
    let u = uid(&pod);
    h.pods.upsert(pod.clone());
    // Deliberately stale conditions: a regeneration would rewrite them.
    let stale = PodCondition { reason: Some("Stale".into()), ..cond(POD_READY, "True") };
    h.pipeline.set_pod_status(
        pod.clone(),
        PodStatus {
            init_container_statuses: Some(vec![running("proxy", "cri://proxy", at(0))]),
            conditions: Some(vec![stale.clone()]),
            ..status("Running", vec![running("a", "cri://a", at(0))])
        },
    );
    h.pipeline.status_manager.do_send(startup(&u, "cri://proxy", true));
    let s = cached(&h.pipeline, &u).await;
    assert_eq!(version(&h.pipeline, &u).await, Some(2));
    assert_eq!(container(&s, "proxy").started, Some(true), "init container statuses are searched too");
    let types: Vec<&str> = s.conditions.iter().flatten().map(|c| c.type_.as_str()).collect();
    assert_eq!(types, [POD_READY], "no ContainersReady appended");
    assert_eq!(srm(&condition(&s, POD_READY)), ("True", Some("Stale"), None));
}

// === lastTransitionTime and startTime (docs/status-manager.md §5.8 steps 3–4) ===

#[actix::test]
async fn last_transition_time_kept_while_unchanged_and_set_to_now_on_a_flip() {
    tokio::time::pause();
    let h = Harness::start();
    let pod = test_pod("web").container("a").build();
    let u = uid(&pod);
    h.pods.upsert(pod.clone());
    // The caller's lastTransitionTime is never trusted: the manager decides it.
    let bogus = Timestamp::from_second(1_000).unwrap();
    let make = |ready: &str, restarts: i32| {
        let mut a = running("a", "cri://a", at(0));
        a.restart_count = restarts;
        PodStatus {
            conditions: Some(vec![cond_at(POD_READY, ready, bogus), cond_at(CONTAINERS_READY, ready, bogus)]),
            ..status("Running", vec![a])
        }
    };
    h.pipeline.set_pod_status(pod.clone(), make("False", 0));
    let s = cached(&h.pipeline, &u).await;
    assert_eq!(condition(&s, POD_READY).last_transition_time, Some(Time(epoch())), "new condition: now");

    advance(Duration::from_secs(30)).await;
    h.pipeline.set_pod_status(pod.clone(), make("False", 1));
    let s = cached(&h.pipeline, &u).await;
    assert_eq!(version(&h.pipeline, &u).await, Some(2));
    assert_eq!(condition(&s, POD_READY).last_transition_time, Some(Time(epoch())), "same status: kept");
    assert_eq!(condition(&s, CONTAINERS_READY).last_transition_time, Some(Time(epoch())));

    advance(Duration::from_secs(30)).await;
    h.pipeline.set_pod_status(pod.clone(), make("True", 1));
    let s = cached(&h.pipeline, &u).await;
    assert_eq!(condition(&s, POD_READY).last_transition_time, Some(Time(at(60))), "flipped: now");
    assert_eq!(condition(&s, CONTAINERS_READY).last_transition_time, Some(Time(at(60))));

    // A flip made by a readiness result is stamped with the same clock.
    advance(Duration::from_secs(30)).await;
    let mut a = with_ready(running("a", "cri://a", at(0)), true);
    a.restart_count = 1;
    h.pipeline.set_pod_status(
        pod.clone(),
        PodStatus {
            conditions: Some(vec![cond(POD_READY, "True"), cond(CONTAINERS_READY, "True")]),
            ..status("Running", vec![a])
        },
    );
    advance(Duration::from_secs(30)).await;
    h.pipeline.status_manager.do_send(readiness(&u, "cri://a", false));
    let s = cached(&h.pipeline, &u).await;
    assert_eq!(condition(&s, POD_READY).status, "False");
    assert_eq!(condition(&s, POD_READY).last_transition_time, Some(Time(at(120))));
    assert_eq!(condition(&s, CONTAINERS_READY).last_transition_time, Some(Time(at(120))));
}

#[actix::test]
async fn start_time_is_set_once_and_kept() {
    tokio::time::pause();
    let h = Harness::start();
    let pod = test_pod("web").container("a").build();
    let u = uid(&pod);
    advance(Duration::from_secs(5)).await;
    h.pipeline.set_pod_status(pod.clone(), status("Pending", vec![waiting("a")]));
    assert_eq!(cached(&h.pipeline, &u).await.start_time, Some(Time(at(5))), "none given: now");

    advance(Duration::from_secs(30)).await;
    h.pipeline.set_pod_status(
        pod.clone(),
        PodStatus {
            start_time: Some(Time(at(100))),
            ..status("Running", vec![running("a", "cri://a", at(6))])
        },
    );
    let s = cached(&h.pipeline, &u).await;
    assert_eq!(version(&h.pipeline, &u).await, Some(2));
    assert_eq!(s.start_time, Some(Time(at(5))), "a later start time never replaces the first");

    // A start time given with the first status is kept (truncated to the second).
    let other = test_pod("other").container("a").build();
    h.pipeline.set_pod_status(
        other.clone(),
        PodStatus {
            start_time: Some(Time(epoch() + Duration::from_millis(2_900))),
            ..status("Pending", vec![waiting("a")])
        },
    );
    assert_eq!(cached(&h.pipeline, &uid(&other)).await.start_time, Some(Time(at(2))));
}

// === normalisation (docs/status-manager.md §5.11) ===

#[actix::test]
async fn stored_statuses_are_normalised() {
    tokio::time::pause();
    let h = Harness::start();
    // Four containers (init ones count): a 3072-byte budget per container.
    let pod = test_pod("web")
        .init_container("init-2")
        .init_container("init-1")
        .container("b")
        .container("a")
        .build();
    let u = uid(&pod);
    let half = Duration::from_millis(1_500);
    let mut b = running("b", "cri://b", epoch() + half);
    b.last_state = Some(ContainerState {
        terminated: Some(ContainerStateTerminated {
            exit_code: 1,
            message: Some("y".repeat(5_000)),
            started_at: Some(Time(epoch() + half)),
            finished_at: Some(Time(epoch() + Duration::from_millis(2_999))),
            ..Default::default()
        }),
        ..Default::default()
    });
    let mut a = terminated("a", "cri://a", 0);
    if let Some(t) = a.state.as_mut().and_then(|s| s.terminated.as_mut()) {
        t.message = Some("x".repeat(10_000));
    }
    let mut short = terminated("init-2", "cri://i2", 0);
    if let Some(t) = short.state.as_mut().and_then(|s| s.terminated.as_mut()) {
        t.message = Some("done".into());
    }
    let s = PodStatus {
        start_time: Some(Time(epoch() + Duration::from_millis(999))),
        conditions: Some(vec![cond_at(POD_READY, "False", epoch() + half)]),
        init_container_statuses: Some(vec![terminated("init-1", "cri://i1", 0), short]),
        ..status("Running", vec![b, a])
    };
    h.pipeline.set_pod_status(pod.clone(), s);
    let s = cached(&h.pipeline, &u).await;

    assert_eq!(s.start_time, Some(Time(epoch())));
    assert_eq!(condition(&s, POD_READY).last_probe_time, Some(Time(at(1))), "truncated, not rounded");
    let names: Vec<&str> = s.container_statuses.iter().flatten().map(|c| c.name.as_str()).collect();
    assert_eq!(names, ["a", "b"], "regular containers sorted by name");
    let names: Vec<&str> = s.init_container_statuses.iter().flatten().map(|c| c.name.as_str()).collect();
    assert_eq!(names, ["init-2", "init-1"], "init containers in spec order");

    let b = container(&s, "b");
    let started = b.state.as_ref().and_then(|s| s.running.as_ref()).and_then(|r| r.started_at.clone());
    assert_eq!(started, Some(Time(at(1))));
    let last = b.last_state.as_ref().and_then(|s| s.terminated.clone()).unwrap();
    assert_eq!(last.started_at, Some(Time(at(1))));
    assert_eq!(last.finished_at, Some(Time(at(2))));
    assert_eq!(last.message.as_deref().map(str::len), Some(3072), "last termination message cut");
    let a = container(&s, "a");
    let message = a.state.as_ref().and_then(|s| s.terminated.as_ref()).and_then(|t| t.message.clone());
    assert_eq!(message, Some("x".repeat(3072)), "termination message cut to 12 KiB / 4");
    let init = container(&s, "init-2");
    let message = init.state.as_ref().and_then(|s| s.terminated.as_ref()).and_then(|t| t.message.clone());
    assert_eq!(message.as_deref(), Some("done"), "short messages untouched");
}

// === illegal transitions (docs/status-manager.md §5.8 step 2) ===

#[actix::test]
async fn an_illegal_transition_rejects_the_whole_update() {
    tokio::time::pause();
    let h = Harness::start();
    let updates = subscribe(&h.pipeline).await;
    let pod = test_pod("web").restart_policy("Never").container("a").container("b").build();
    let u = uid(&pod);
    let done = status("Running", vec![terminated("a", "cri://a", 0), running("b", "cri://b", at(0))]);
    h.pipeline.set_pod_status(pod.clone(), done.clone());
    let before = stored(&h.pipeline, &u).await;
    assert_eq!(received(&h.pipeline, &updates).await, [(u.clone(), 1)]);

    // `a` runs again, and `b` changed too: nothing of it is stored.
    h.pipeline.set_pod_status(
        pod.clone(),
        status(
            "Running",
            vec![running("a", "cri://a2", at(1)), with_ready(running("b", "cri://b", at(0)), true)],
        ),
    );
    assert_eq!(version(&h.pipeline, &u).await, Some(1));
    assert!(before.same_copy(&stored(&h.pipeline, &u).await), "the previous status stays");
    assert!(received(&h.pipeline, &updates).await.is_empty());

    // Waiting again is just as illegal; a non-zero exit changes nothing under Never.
    h.pipeline
        .set_pod_status(pod.clone(), status("Running", vec![waiting("a"), running("b", "cri://b", at(0))]));
    assert_eq!(version(&h.pipeline, &u).await, Some(1));
    let failed = test_pod("failed").restart_policy("Never").container("a").build();
    h.pipeline.set_pod_status(failed.clone(), status("Running", vec![terminated("a", "cri://a", 1)]));
    h.pipeline.set_pod_status(failed.clone(), status("Running", vec![running("a", "cri://a2", at(1))]));
    assert_eq!(version(&h.pipeline, &uid(&failed)).await, Some(1));

    // The check also holds for the first status, against the pod's own status.
    let seen = test_pod("seen")
        .restart_policy("Never")
        .container("a")
        .with_status(status("Running", vec![terminated("a", "cri://a", 0)]))
        .build();
    h.pipeline.set_pod_status(seen.clone(), status("Running", vec![running("a", "cri://a2", at(1))]));
    assert_eq!(version(&h.pipeline, &uid(&seen)).await, None);
}

#[actix::test]
async fn a_terminated_init_container_cannot_run_again_under_never() {
    tokio::time::pause();
    let h = Harness::start();
    let pod = test_pod("web")
        .restart_policy("Never")
        .init_container("init")
        .sidecar("proxy")
        .container("a")
        .build();
    let u = uid(&pod);
    let init_done = |proxy: ContainerStatus| PodStatus {
        init_container_statuses: Some(vec![terminated("init", "cri://i", 0), proxy]),
        ..status("Running", vec![running("a", "cri://a", at(0))])
    };
    h.pipeline.set_pod_status(pod.clone(), init_done(terminated("proxy", "cri://p", 1)));
    // The sidecar may restart whatever the pod's policy.
    h.pipeline.set_pod_status(pod.clone(), init_done(running("proxy", "cri://p2", at(1))));
    assert_eq!(version(&h.pipeline, &u).await, Some(2));
    h.pipeline.set_pod_status(
        pod.clone(),
        PodStatus {
            init_container_statuses: Some(vec![
                running("init", "cri://i2", at(2)),
                running("proxy", "cri://p2", at(1)),
            ]),
            ..status("Running", vec![running("a", "cri://a", at(0))])
        },
    );
    assert_eq!(version(&h.pipeline, &u).await, Some(2), "the init container stays terminated");
}

#[actix::test]
async fn restart_policies_always_and_on_failure_allow_restarts() {
    tokio::time::pause();
    let h = Harness::start();
    let cases = [
        ("always-ok", Some("Always"), 0, true),
        ("always-failed", Some("Always"), 1, true),
        ("unset-ok", None, 0, true),
        ("on-failure-failed", Some("OnFailure"), 1, true),
        ("on-failure-ok", Some("OnFailure"), 0, false),
        ("never-failed", Some("Never"), 1, false),
    ];
    for (name, policy, exit_code, allowed) in cases {
        let mut builder = test_pod(name).container("a");
        if let Some(policy) = policy {
            builder = builder.restart_policy(policy);
        }
        let pod = builder.build();
        h.pipeline
            .set_pod_status(pod.clone(), status("Running", vec![terminated("a", "cri://a", exit_code)]));
        h.pipeline.set_pod_status(pod.clone(), status("Running", vec![running("a", "cri://a2", at(1))]));
        let expected = if allowed { 2 } else { 1 };
        assert_eq!(version(&h.pipeline, &uid(&pod)).await, Some(expected), "{name}");
        let a = container(&*cached(&h.pipeline, &uid(&pod)).await, "a");
        assert_eq!(a.state.as_ref().unwrap().running.is_some(), allowed, "{name}");
    }
}

// === TerminatePod (docs/status-manager.md §5.7) ===

fn unknown_termination() -> ContainerState {
    ContainerState {
        terminated: Some(ContainerStateTerminated {
            reason: Some("ContainerStatusUnknown".into()),
            message: Some("The container could not be located when the pod was terminated".into()),
            exit_code: 137,
            ..Default::default()
        }),
        ..Default::default()
    }
}

#[actix::test]
async fn terminate_pod_terminates_running_containers_and_fails_the_pod() {
    tokio::time::pause();
    let h = Harness::start();
    let updates = subscribe(&h.pipeline).await;
    let pod = test_pod("web").container("a").container("b").container("c").build();
    let u = uid(&pod);
    let mut b = terminated("b", "cri://b", 0);
    if let Some(t) = b.state.as_mut().and_then(|s| s.terminated.as_mut()) {
        t.reason = Some("Completed".into());
    }
    h.pipeline.set_pod_status(
        pod.clone(),
        status("Running", vec![running("a", "cri://a", at(0)), b.clone(), waiting("c")]),
    );
    h.pipeline.terminate_pod(pod.clone());
    let v = versioned(&h.pipeline, &u).await.unwrap();
    assert_eq!(v.version, 2);
    assert!(v.pod_is_finished);
    assert_eq!(v.status.decode().unwrap().phase.as_deref(), Some("Failed"));
    assert_eq!(container(&v.status.decode().unwrap(), "a").state, Some(unknown_termination()));
    assert_eq!(container(&v.status.decode().unwrap(), "b").state, b.state, "already terminated: untouched");
    assert_eq!(
        container(&v.status.decode().unwrap(), "c").state,
        Some(unknown_termination()),
        "waiting counts as missing"
    );
    assert_eq!(received(&h.pipeline, &updates).await, [(u.clone(), 1), (u.clone(), 2)]);

    // Forced: terminating again stores again.
    h.pipeline.terminate_pod(pod.clone());
    assert_eq!(version(&h.pipeline, &u).await, Some(3));

    // Finished is sticky.
    h.pipeline.set_pod_status(pod.clone(), status("Running", vec![running("a", "cri://a2", at(1))]));
    let v = versioned(&h.pipeline, &u).await.unwrap();
    assert_eq!(v.version, 4);
    assert!(v.pod_is_finished, "a later SetPodStatus cannot unfinish the pod");
}

#[actix::test]
async fn terminate_pod_without_a_cached_status_starts_from_the_pods_status() {
    tokio::time::pause();
    let h = Harness::start();
    let pod = test_pod("web").container("a").with_status(status("Pending", vec![waiting("a")])).build();
    h.pipeline.terminate_pod(pod.clone());
    let v = versioned(&h.pipeline, &uid(&pod)).await.unwrap();
    assert_eq!(v.version, 1);
    assert!(v.pod_is_finished);
    assert_eq!(v.status.decode().unwrap().phase.as_deref(), Some("Failed"), "Pending → Failed");
    assert_eq!(container(&v.status.decode().unwrap(), "a").state, Some(unknown_termination()));

    // A terminal phase is kept.
    let done = test_pod("done")
        .container("a")
        .with_status(status("Succeeded", vec![terminated("a", "cri://a", 0)]))
        .build();
    h.pipeline.terminate_pod(done.clone());
    assert_eq!(cached(&h.pipeline, &uid(&done)).await.phase.as_deref(), Some("Succeeded"));
}

#[actix::test]
async fn terminate_pod_before_initialization_keeps_regular_and_trailing_init_containers_waiting() {
    tokio::time::pause();
    let h = Harness::start();
    let s = PodStatus {
        init_container_statuses: Some(vec![
            running("init-1", "cri://i1", at(0)),
            waiting("init-2"),
            waiting("init-3"),
        ]),
        ..status("Pending", vec![waiting("a")])
    };
    // Initialization is judged from the pod object's status.
    let pod = test_pod("web")
        .init_container("init-1")
        .init_container("init-2")
        .init_container("init-3")
        .container("a")
        .with_status(s.clone())
        .build();
    h.pipeline.set_pod_status(pod.clone(), s);
    h.pipeline.terminate_pod(pod.clone());
    let s = cached(&h.pipeline, &uid(&pod)).await;
    assert_eq!(container(&s, "init-1").state, Some(unknown_termination()));
    assert!(container(&s, "init-2").state.unwrap().waiting.is_some());
    assert!(container(&s, "init-3").state.unwrap().waiting.is_some());
    assert!(container(&s, "a").state.unwrap().waiting.is_some(), "not initialized: regular stays waiting");
    assert_eq!(s.phase.as_deref(), Some("Failed"));
}

#[actix::test]
async fn terminate_pod_leaves_a_static_pods_phase() {
    tokio::time::pause();
    let pod = test_pod("etcd").container("a").build();
    let u = uid(&pod);
    let lookup = StaticPods { static_uids: HashSet::from([u.clone()]), ..Default::default() };
    lookup.registry.upsert(pod.clone());
    let p = start_pipeline(Arc::new(lookup));
    p.set_pod_status(pod.clone(), status("Running", vec![running("a", "cri://a", at(0))]));
    p.terminate_pod(pod.clone());
    let v = versioned(&p, &u).await.unwrap();
    assert_eq!(v.version, 2);
    assert!(v.pod_is_finished);
    assert_eq!(
        v.status.decode().unwrap().phase.as_deref(),
        Some("Running"),
        "static pods keep their phase (upstream #116484)"
    );
    assert_eq!(container(&v.status.decode().unwrap(), "a").state, Some(unknown_termination()));

    // Upstream applies "finished is sticky" to non-static pods only.
    p.set_pod_status(pod.clone(), status("Running", vec![running("a", "cri://a2", at(1))]));
    let v = versioned(&p, &u).await.unwrap();
    assert_eq!(v.version, 3);
    assert!(!v.pod_is_finished);
}

// === removal and views (docs/status-manager.md §5.13) ===

#[actix::test]
async fn remove_orphaned_statuses_removes_only_pods_not_in_the_set() {
    tokio::time::pause();
    let h = Harness::start();
    let pods: Vec<Arc<Pod>> = ["a", "b", "c"].map(|n| test_pod(n).container("app").build()).into();
    for pod in &pods {
        h.pipeline.set_pod_status(pod.clone(), status("Running", vec![running("app", "cri://1", at(0))]));
    }
    h.pipeline.remove_orphaned_statuses(HashSet::from([
        uid(&pods[0]).into(),
        uid(&pods[2]).into(),
        "uid-unknown".into(),
    ]));
    let all = ask(h.pipeline.statuses()).await.unwrap();
    let mut kept: Vec<&str> = all.keys().map(|u| u.as_str()).collect();
    kept.sort_unstable();
    assert_eq!(kept, ["uid-a", "uid-c"]);
    assert_eq!(version(&h.pipeline, "uid-b").await, None);

    h.pipeline.status_manager.do_send(DeletePodStatus(uid(&pods[0]).into()));
    assert_eq!(version(&h.pipeline, "uid-a").await, None);
    assert_eq!(version(&h.pipeline, "uid-c").await, Some(1));

    // A removed pod starts over at version 1.
    h.pipeline.set_pod_status(pods[0].clone(), status("Running", vec![running("app", "cri://2", at(0))]));
    assert_eq!(version(&h.pipeline, "uid-a").await, Some(1));
    assert_eq!(ask(h.pipeline.status_manager.send(ListStatuses)).await.unwrap().len(), 2);
}

#[actix::test]
async fn views_see_every_version_and_the_removal_and_do_not_leak() {
    tokio::time::pause();
    let h = Harness::start();
    let views = &h.pipeline.views;
    let a = test_pod("a").container("app").build();
    let b = test_pod("b").container("app").build();

    // A worker may hold a view before the pod has any status.
    let mut view_a = views.subscribe(&uid(&a));
    assert!(view_a.borrow().is_none());
    h.pipeline.set_pod_status(a.clone(), status("Running", vec![running("app", "cri://1", at(0))]));
    h.pipeline.set_pod_status(b.clone(), status("Running", vec![running("app", "cri://1", at(0))]));
    let current = stored(&h.pipeline, &uid(&a)).await;
    assert!(view_a.has_changed().unwrap());
    assert!(view_a.published().unwrap().status.same_copy(&current), "the same copy");
    assert_eq!(view_a.borrow_and_update().as_deref(), Some(&current.decode().unwrap()));
    let view_b = views.subscribe(&uid(&b));
    assert!(view_b.borrow().is_some(), "a late view sees the current status");
    assert_eq!(views.len(), 2);

    // Removal by RemoveOrphanedStatuses and by DeletePodStatus reaches the held views.
    h.pipeline.remove_orphaned_statuses(HashSet::from([uid(&b).into()]));
    ask(h.pipeline.statuses()).await.unwrap();
    assert!(view_a.has_changed().unwrap());
    assert!(view_a.borrow().is_none(), "the worker sees the removal");
    h.pipeline.status_manager.do_send(DeletePodStatus(uid(&b).into()));
    ask(h.pipeline.statuses()).await.unwrap();
    assert!(view_b.borrow().is_none());

    // A held view keeps working across a re-add.
    h.pipeline.set_pod_status(a.clone(), status("Running", vec![running("app", "cri://2", at(1))]));
    ask(h.pipeline.statuses()).await.unwrap();
    assert!(view_a.borrow().is_some());
    h.pipeline.status_manager.do_send(DeletePodStatus(uid(&a).into()));
    ask(h.pipeline.statuses()).await.unwrap();

    // Once the workers let go, nothing is left behind.
    drop(view_a);
    drop(view_b);
    assert_eq!(views.len(), 0, "views of removed pods are dropped with their last reader");

    // Nor for a view of a pod that never got a status.
    let never = views.subscribe("uid-never");
    assert_eq!(views.len(), 1);
    drop(never);
    assert_eq!(views.len(), 0);

    // A status nobody watches keeps its publisher until the status goes.
    h.pipeline.set_pod_status(b.clone(), status("Running", vec![running("app", "cri://2", at(1))]));
    ask(h.pipeline.statuses()).await.unwrap();
    assert_eq!(views.len(), 1);
    h.pipeline.remove_orphaned_statuses(HashSet::new());
    ask(h.pipeline.statuses()).await.unwrap();
    assert_eq!(views.len(), 0);
}

// === static and mirror pods (docs/status-manager.md §5.14) ===

#[actix::test]
async fn get_pod_status_by_a_mirror_pod_uid_returns_the_static_pods_status() {
    tokio::time::pause();
    let static_pod = test_pod("etcd").container("a").build();
    let lookup = StaticPods {
        static_uids: HashSet::from([uid(&static_pod)]),
        mirrors: HashMap::from([("uid-mirror".to_owned(), uid(&static_pod))]),
        ..Default::default()
    };
    lookup.registry.upsert(static_pod.clone());
    let p = start_pipeline(Arc::new(lookup));
    p.set_pod_status(static_pod.clone(), status("Running", vec![running("a", "cri://a", at(0))]));

    let by_static = stored(&p, &uid(&static_pod)).await;
    let by_mirror = stored(&p, "uid-mirror").await;
    assert!(by_static.same_copy(&by_mirror));
    assert_eq!(cached(&p, "uid-mirror").await.as_ref(), &by_static.decode().unwrap());
    assert_eq!(versioned(&p, "uid-mirror").await.map(|v| v.version), Some(1));
    let all = ask(p.statuses()).await.unwrap();
    assert_eq!(all.keys().collect::<Vec<_>>(), [&uid(&static_pod)], "cached under the static pod's UID");
    assert_eq!(ask(p.pod_status("uid-other")).await.unwrap(), None);
}

/// docs/status-manager.md §5.8 step 1: with nothing cached, a static pod's old status is its mirror
/// pod's.
#[actix::test]
async fn a_static_pods_first_status_is_compared_with_its_mirror_pod() {
    tokio::time::pause();
    let static_pod = test_pod("etcd").container("a").build();
    let mirror = test_pod("etcd-node")
        .container("a")
        .with_status(PodStatus {
            start_time: Some(Time(at(1))),
            conditions: Some(vec![cond_at(POD_READY, "True", at(2))]),
            ..status("Running", vec![])
        })
        .build();
    let lookup = StaticPods {
        static_uids: HashSet::from([uid(&static_pod)]),
        mirrors: HashMap::from([(uid(&mirror), uid(&static_pod))]),
        ..Default::default()
    };
    lookup.registry.upsert(static_pod.clone());
    lookup.registry.upsert(mirror.clone());
    let p = start_pipeline(Arc::new(lookup));
    advance(Duration::from_secs(10)).await;
    p.set_pod_status(
        static_pod.clone(),
        PodStatus {
            conditions: Some(vec![cond(POD_READY, "True")]),
            ..status("Running", vec![with_ready(running("a", "cri://a", at(0)), true)])
        },
    );
    let s = cached(&p, &uid(&static_pod)).await;
    assert_eq!(s.start_time, Some(Time(at(1))), "the mirror's start time is kept");
    assert_eq!(
        condition(&s, POD_READY).last_transition_time,
        Some(Time(at(2))),
        "unchanged since the mirror's"
    );
}

// === subscribers and snapshots ===

#[actix::test]
async fn a_subscriber_receives_every_stored_version_in_order() {
    tokio::time::pause();
    let h = Harness::start();
    let updates = subscribe(&h.pipeline).await;
    let pod = test_pod("web").container("a").build();
    let other = test_pod("other").container("a").build();
    let u = uid(&pod);
    h.pods.upsert(pod.clone());
    let s1 = status("Pending", vec![waiting("a")]);
    let s2 = status("Running", vec![running("a", "cri://a", at(0))]);
    h.pipeline.set_pod_status(pod.clone(), s1.clone());
    h.pipeline.set_pod_status(pod.clone(), s1.clone()); // ignored
    h.pipeline.set_pod_status(other.clone(), s1.clone());
    h.pipeline.set_pod_status(pod.clone(), s2.clone());
    h.pipeline.status_manager.do_send(readiness(&u, "cri://a", true));
    h.pipeline.status_manager.do_send(readiness(&u, "cri://a", true)); // unchanged
    h.pipeline.status_manager.do_send(startup(&u, "cri://a", true));
    h.pipeline.terminate_pod(pod.clone());

    ask(h.pipeline.statuses()).await.unwrap();
    let got = ask(updates.send(Drain)).await.unwrap();
    let seen: Vec<(&str, u64)> = got.iter().map(|u| (u.pod_uid.as_str(), u.status.version)).collect();
    assert_eq!(
        seen,
        [("uid-web", 1), ("uid-other", 1), ("uid-web", 2), ("uid-web", 3), ("uid-web", 4)],
        "ignored and unchanged updates publish nothing; the results queued together (readiness, \
         then startup) are one version"
    );
    // Each update carries the stored entry itself.
    let last = got.last().unwrap();
    let stored = versioned(&h.pipeline, &u).await.unwrap();
    assert_eq!(last.status, stored);
    assert!(last.status.status.same_copy(&stored.status));
    assert!(last.status.pod_is_finished);
}

#[actix::test]
async fn readers_share_the_stored_status_until_it_changes() {
    tokio::time::pause();
    let h = Harness::start();
    let pod = test_pod("web").container("a").build();
    let u = uid(&pod);
    let s = status("Running", vec![running("a", "cri://a", at(0))]);
    h.pipeline.set_pod_status(pod.clone(), s.clone());
    let first = versioned(&h.pipeline, &u).await.unwrap().status;
    let second = versioned(&h.pipeline, &u).await.unwrap().status;
    assert!(first.same_copy(&second), "no copy per read");
    assert_eq!(
        *cached(&h.pipeline, &u).await,
        first.decode().unwrap(),
        "the decoded status is the stored one"
    );
    let view = h.pipeline.views.subscribe(&u).published().unwrap();
    assert!(view.status.same_copy(&first), "the view shares it");

    h.pipeline.set_pod_status(pod.clone(), s.clone()); // ignored
    assert!(first.same_copy(&versioned(&h.pipeline, &u).await.unwrap().status));

    h.pipeline.set_pod_status(
        pod.clone(),
        status("Running", vec![with_ready(running("a", "cri://a", at(0)), true)]),
    );
    let third = versioned(&h.pipeline, &u).await.unwrap().status;
    assert!(!first.same_copy(&third), "a new version is a new copy");
    let probe = h.pipeline.views.subscribe(&u).probe_status().unwrap();
    assert!(probe.container("a").unwrap().running_since().is_some(), "what probes read of it");
    assert!(
        Arc::ptr_eq(&probe.container("a").unwrap().id.id, &view.probe.container("a").unwrap().id.id),
        "the container's ID is shared with the version before"
    );
    assert!(!first.decode().unwrap().container_statuses.unwrap()[0].ready, "old copies are never changed");
}

/// A status with a time its JSON cannot carry back (a year before 0) is stored but does not
/// decode: the container-level setters do not build on an empty status in its place, and the
/// host's next status replaces it.
#[actix::test]
async fn a_stored_status_that_does_not_decode_is_replaced_not_built_on() {
    tokio::time::pause();
    let h = Harness::start();
    let pod = test_pod("web").container("a").build();
    let u = uid(&pod);
    h.pods.upsert(pod.clone());
    let ancient = Time(Timestamp::from_second(-62_200_000_000).unwrap());
    let bad =
        PodStatus { start_time: Some(ancient), ..status("Running", vec![running("a", "cri://a", at(0))]) };
    h.pipeline.set_pod_status(pod.clone(), bad);
    assert_eq!(version(&h.pipeline, &u).await, Some(1));
    assert!(stored(&h.pipeline, &u).await.decode().is_err());
    assert!(ask(h.pipeline.pod_status(&u)).await.unwrap().is_none(), "no empty status for a host");

    h.pipeline.status_manager.do_send(readiness(&u, "cri://a", true));
    assert_eq!(version(&h.pipeline, &u).await, Some(1), "nothing built on an empty status");

    h.pipeline.set_pod_status(pod.clone(), status("Running", vec![running("a", "cri://a", at(0))]));
    assert_eq!(version(&h.pipeline, &u).await, Some(2));
    let good = cached(&h.pipeline, &u).await;
    assert_eq!(good.phase.as_deref(), Some("Running"));
    assert!(good.start_time.is_some());
    h.pipeline.status_manager.do_send(readiness(&u, "cri://a", true));
    assert_eq!(version(&h.pipeline, &u).await, Some(3), "the setters work on it again");
}
