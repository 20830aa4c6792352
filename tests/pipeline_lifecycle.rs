//! `ContainerLifecycleProber` (docs/prober.md, "Container-lifecycle probing") through the
//! pipeline, under paused time with a scripted prober: workers `AddPod` creates but does not
//! start, `StartContainerProbes` / `StopContainerProbes`, the startup probe's success starting
//! readiness and liveness, and crash-restarts that replace a container's workers. Each test is
//! named after the upstream `prober_manager_test.go` test it ports; upstream's on/off variants
//! are two tests here. Also `ChangeContainerStatusOnKubeletRestart` end to end through the
//! pipeline.

// Test helpers may panic: a panic there is a failed assertion.
#![allow(clippy::unwrap_used)]

use probelet_test_support as support;

use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::core::v1::{Container, Pod, PodCondition, PodStatus};
use probelet::container::ContainerId;
use probelet::prober::manager::WorkerInfo;
use probelet::prober::{ProbeKind, ProbeResult};
use probelet::status::POD_READY;
use probelet::{Feature, FeatureGates};
use support::kubelet::{Harness, advance, settle, wall};
use support::pods::{PodBuilder, probe, running, test_pod};
use support::scripted::{ScriptedProber, Step};

use ProbeKind::{Liveness, Readiness, Startup};
use ProbeResult::Success;

fn gates(lifecycle: bool) -> FeatureGates {
    FeatureGates::default().with(Feature::ContainerLifecycleProber, lifecycle).unwrap()
}

async fn harness(lifecycle: bool) -> (Harness, tokio::time::Instant) {
    tokio::time::pause();
    let t0 = tokio::time::Instant::now();
    let h = Harness::start_gated(ScriptedProber::new(), gates(lifecycle));
    h.worker_count().await;
    // Older than one period: workers start without jitter.
    advance(Duration::from_secs(11)).await;
    (h, t0)
}

fn container_of(pod: &Pod, name: &str) -> Arc<Container> {
    let spec = pod.spec.as_ref().unwrap();
    Arc::new(spec.containers.iter().find(|c| c.name == name).cloned().unwrap())
}

fn id(s: &str) -> ContainerId {
    ContainerId::parse(s)
}

fn start(h: &Harness, pod: &Arc<Pod>, container: &str, container_id: &str) {
    h.pipeline.start_container_probes(
        pod.clone(),
        container_of(pod, container),
        id(container_id),
        Some("10.0.0.1".into()),
        None,
    );
}

async fn worker(h: &Harness, pod: &Arc<Pod>, container: &str, kind: ProbeKind) -> Option<WorkerInfo> {
    let uid = pod.metadata.uid.clone().unwrap();
    h.pipeline
        .list_workers()
        .await
        .unwrap()
        .into_iter()
        .find(|w| w.key.pod_uid == uid && *w.key.container_name == *container && w.key.kind == kind)
}

async fn running_worker(h: &Harness, pod: &Arc<Pod>, container: &str, kind: ProbeKind) -> WorkerInfo {
    let w = worker(h, pod, container, kind).await;
    let w = w.unwrap_or_else(|| panic!("no {kind} worker for {container}"));
    assert!(w.running, "{kind} worker of {container} is running: {w:?}");
    w
}

fn start_probe_pod() -> Arc<Pod> {
    test_pod("start_probe_pod")
        .container("with_startup")
        .with_probe("with_startup", Startup, probe(1, 1, 3))
        .with_probe("with_startup", Readiness, probe(1, 1, 3))
        .with_probe("with_startup", Liveness, probe(1, 1, 3))
        .container("without_startup")
        .with_probe("without_startup", Readiness, probe(1, 1, 3))
        .with_probe("without_startup", Liveness, probe(1, 1, 3))
        .build()
}

// === TestStartContainerProbes ===

#[actix::test]
async fn test_start_container_probes_feature_enabled() {
    let (h, _) = harness(true).await;
    let pod = start_probe_pod();
    h.pipeline.add_pod(pod.clone());
    settle().await;
    let all = h.pipeline.list_workers().await.unwrap();
    assert_eq!(all.len(), 5, "AddPod creates every worker: {all:?}");
    assert!(all.iter().all(|w| !w.running), "and starts none: {all:?}");

    // A container with a startup probe: only the startup worker starts.
    start(&h, &pod, "with_startup", "docker://cid1");
    settle().await;
    let startup = running_worker(&h, &pod, "with_startup", Startup).await;
    assert_eq!(startup.container_id, Some(id("docker://cid1")));
    for kind in [Readiness, Liveness] {
        let w = worker(&h, &pod, "with_startup", kind).await.unwrap();
        assert!(!w.running, "{kind} waits for the startup probe: {w:?}");
    }

    // Without one: readiness and liveness start.
    start(&h, &pod, "without_startup", "docker://cid2");
    settle().await;
    let readiness = running_worker(&h, &pod, "without_startup", Readiness).await;
    let liveness = running_worker(&h, &pod, "without_startup", Liveness).await;
    assert_eq!(readiness.container_id, Some(id("docker://cid2")));

    // Idempotent: the same instance keeps its workers.
    start(&h, &pod, "without_startup", "docker://cid2");
    settle().await;
    assert_eq!(running_worker(&h, &pod, "without_startup", Readiness).await, readiness);
    assert_eq!(running_worker(&h, &pod, "without_startup", Liveness).await, liveness);
}

#[actix::test]
async fn test_start_container_probes_feature_disabled() {
    let (h, _) = harness(false).await;
    let pod = start_probe_pod();
    h.pipeline.add_pod(pod.clone());
    settle().await;
    let before = h.pipeline.list_workers().await.unwrap();
    assert_eq!(before.len(), 5);
    assert!(before.iter().all(|w| w.running && w.container_id.is_none()), "AddPod starts them: {before:?}");
    start(&h, &pod, "with_startup", "docker://cid1");
    start(&h, &pod, "without_startup", "docker://cid2");
    settle().await;
    assert_eq!(h.pipeline.list_workers().await.unwrap(), before, "StartContainerProbes is a no-op");
}

// === TestStopContainerProbes ===

fn stop_probe_pod() -> Arc<Pod> {
    test_pod("stop_probe_pod")
        .container("container1")
        .with_probe("container1", Readiness, probe(1, 1, 3))
        .container("container2")
        .with_probe("container2", Readiness, probe(1, 1, 3))
        .build()
}

async fn stop_container_probes(lifecycle: bool) {
    let (h, _) = harness(lifecycle).await;
    let pod = stop_probe_pod();
    h.pipeline.add_pod(pod.clone());
    start(&h, &pod, "container1", "docker://cid1");
    start(&h, &pod, "container2", "docker://cid2");
    settle().await;
    running_worker(&h, &pod, "container1", Readiness).await;

    h.pipeline.stop_container_probes(&pod.metadata.uid.clone().unwrap(), "container1");
    h.wait_workers(1).await;
    assert!(worker(&h, &pod, "container1", Readiness).await.is_none(), "container1's worker exited");
    running_worker(&h, &pod, "container2", Readiness).await;
}

#[actix::test]
async fn test_stop_container_probes_feature_enabled() {
    stop_container_probes(true).await;
}

#[actix::test]
async fn test_stop_container_probes_feature_disabled() {
    stop_container_probes(false).await;
}

// === TestStartContainerProbesCrashRestart ===

#[actix::test]
async fn test_start_container_probes_crash_restart() {
    let (h, _) = harness(true).await;
    let pod = test_pod("crash_restart_pod")
        .container("container1")
        .with_probe("container1", Liveness, probe(1, 1, 3))
        .build();
    h.pipeline.add_pod(pod.clone());
    start(&h, &pod, "container1", "docker://cid-old");
    settle().await;
    let old = running_worker(&h, &pod, "container1", Liveness).await;
    assert_eq!(old.container_id, Some(id("docker://cid-old")));

    // The next instance, without a StopContainerProbes in between.
    start(&h, &pod, "container1", "docker://cid-new");
    settle().await;
    let new = running_worker(&h, &pod, "container1", Liveness).await;
    assert!(new.worker_id > old.worker_id, "a fresh worker for the new instance: {new:?}");
    assert_eq!(new.container_id, Some(id("docker://cid-new")));

    // The stale worker has exited by now, and its exit left the replacement alone.
    advance(Duration::from_secs(3)).await;
    assert_eq!(h.worker_count().await, 1);
    assert_eq!(running_worker(&h, &pod, "container1", Liveness).await, new);
}

// === TestStartContainerProbesCrashRestartWithStartupProbe ===

#[actix::test]
async fn test_start_container_probes_crash_restart_with_startup_probe() {
    let (h, t0) = harness(true).await;
    let pod = test_pod("crash_restart_startup_pod")
        .container("container1")
        .with_probe("container1", Startup, probe(1, 1, 3))
        .with_probe("container1", Liveness, probe(1, 1, 3))
        .build();
    h.prober.always("container1", Startup, Step::Return(Success));
    h.prober.always("container1", Liveness, Step::Return(Success));

    // The first instance runs; its startup probe succeeds and starts liveness.
    h.sync(&pod, vec![running("container1", "docker://cid-old", wall(t0))]).await;
    start(&h, &pod, "container1", "docker://cid-old");
    advance(Duration::from_secs(1)).await;
    let old_liveness = running_worker(&h, &pod, "container1", Liveness).await;
    assert_eq!(old_liveness.container_id, Some(id("docker://cid-old")));

    // Crash-restart reported only by the next start.
    start(&h, &pod, "container1", "docker://cid-new");
    settle().await;
    let waiting = worker(&h, &pod, "container1", Liveness).await.unwrap();
    assert!(!waiting.running, "liveness of the new instance waits for its startup probe: {waiting:?}");
    assert!(waiting.worker_id > old_liveness.worker_id);

    // The stale liveness worker exits; the new instance's entry survives it.
    advance(Duration::from_secs(2)).await;
    assert_eq!(worker(&h, &pod, "container1", Liveness).await.map(|w| w.worker_id), Some(waiting.worker_id));

    // The new instance shows up in the status; its startup probe succeeds and starts liveness.
    h.sync(&pod, vec![running("container1", "docker://cid-new", wall(t0))]).await;
    advance(Duration::from_secs(2)).await;
    let new_liveness = running_worker(&h, &pod, "container1", Liveness).await;
    assert!(new_liveness.worker_id > waiting.worker_id, "a fresh worker: {new_liveness:?}");
    assert_eq!(new_liveness.container_id, Some(id("docker://cid-new")));
    let probed: Vec<_> =
        h.prober.calls_of("container1", Liveness).into_iter().map(|c| c.container_id).collect();
    assert!(probed.contains(&id("docker://cid-new")), "the new instance is probed: {probed:?}");
}

// === TestUnstartedWorkerStopAndStart ===

#[actix::test]
async fn test_unstarted_worker_stop_and_start() {
    let (h, _) = harness(true).await;
    let pod = test_pod("unstarted_stop_pod")
        .container("container1")
        .with_probe("container1", Liveness, probe(1, 1, 3))
        .build();
    h.pipeline.add_pod(pod.clone());
    settle().await;
    let placeholder = worker(&h, &pod, "container1", Liveness).await.expect("a worker after AddPod");
    assert!(!placeholder.running, "not running before StartContainerProbes");

    h.pipeline.stop_container_probes(&pod.metadata.uid.clone().unwrap(), "container1");
    settle().await;
    assert!(worker(&h, &pod, "container1", Liveness).await.is_none(), "an unstarted worker goes at once");

    start(&h, &pod, "container1", "docker://cid-fresh");
    settle().await;
    let active = running_worker(&h, &pod, "container1", Liveness).await;
    assert!(active.worker_id > placeholder.worker_id, "a fresh worker, not the placeholder");
    assert_eq!(active.container_id, Some(id("docker://cid-fresh")));
    assert_eq!(h.worker_count().await, 1);
}

// === behaviour the upstream tests imply ===

#[actix::test]
async fn a_started_container_is_probed_and_becomes_ready_without_a_manual_trigger() {
    let (h, t0) = harness(true).await;
    let pod = test_pod("ready").container("app").with_probe("app", Readiness, probe(10, 1, 3)).build();
    h.prober.always("app", Readiness, Step::Return(Success));
    h.pipeline.add_pod(pod.clone());
    settle().await;
    h.sync(&pod, vec![running("app", "docker://a", wall(t0))]).await;
    advance(Duration::from_secs(15)).await;
    assert!(h.prober.calls().is_empty(), "nothing probes before the container is reported started");
    assert!(!h.container(&pod, "app").await.ready);

    start(&h, &pod, "app", "docker://a");
    settle().await;
    assert_eq!(h.prober.calls_of("app", Readiness).len(), 1, "the first probe runs at once");
    h.resync(&pod).await;
    assert!(h.container(&pod, "app").await.ready);
}

#[actix::test]
async fn a_container_already_reported_started_starts_readiness_and_liveness_at_once() {
    // After an agent restart the status keeps `started: true`: the startup probe never runs
    // again, so its worker must still hand over to readiness and liveness.
    let (h, t0) = harness(true).await;
    let pod = test_pod("kept")
        .container("app")
        .with_probe("app", Startup, probe(10, 1, 3))
        .with_probe("app", Readiness, probe(10, 1, 3))
        .with_probe("app", Liveness, probe(10, 1, 3))
        .build();
    h.pipeline.add_pod(pod.clone());
    settle().await;
    let before_restart = wall(t0) - k8s_openapi::jiff::SignedDuration::from_secs(60);
    let mut cs = running("app", "docker://kept", before_restart);
    cs.started = Some(true);
    h.sync(&pod, vec![cs]).await;
    start(&h, &pod, "app", "docker://kept");
    settle().await;
    assert!(h.prober.calls_of("app", Startup).is_empty(), "a started container is not startup-probed");
    running_worker(&h, &pod, "app", Readiness).await;
    running_worker(&h, &pod, "app", Liveness).await;
}

#[actix::test]
async fn sync_container_probes_starts_running_containers_and_stops_exited_ones() {
    let (h, t0) = harness(true).await;
    let pod = test_pod("synced")
        .container("up")
        .with_probe("up", Liveness, probe(10, 1, 3))
        .container("down")
        .with_probe("down", Liveness, probe(10, 1, 3))
        .build();
    h.pipeline.add_pod(pod.clone());
    let status = PodStatus {
        pod_ip: Some("10.0.0.2".into()),
        container_statuses: Some(vec![
            running("up", "docker://up", wall(t0)),
            support::pods::terminated("down", "docker://down", 1),
        ]),
        ..Default::default()
    };
    h.pipeline.sync_container_probes(&pod, &status);
    settle().await;
    assert_eq!(running_worker(&h, &pod, "up", Liveness).await.container_id, Some(id("docker://up")));
    assert!(worker(&h, &pod, "down", Liveness).await.is_none(), "the exited container's worker went");
}

// === a start for a pod the manager does not know ===

/// A host's container event racing the pod's deletion: `StartContainerProbes` after
/// `RemovePod` (or after `CleanupPods` dropped the pod) makes no worker, so nothing probes
/// the deleted pod until the next `CleanupPods`.
#[actix::test]
async fn a_start_after_the_pod_was_removed_makes_no_worker() {
    let (h, t0) = harness(true).await;
    let removed = test_pod("removed").container("app").with_probe("app", Liveness, probe(1, 1, 3)).build();
    let cleaned = test_pod("cleaned").container("app").with_probe("app", Readiness, probe(1, 1, 3)).build();
    let kept = test_pod("kept").container("app").with_probe("app", Readiness, probe(1, 1, 3)).build();
    for pod in [&removed, &cleaned, &kept] {
        let cid = format!("docker://{}", pod.metadata.name.as_deref().unwrap());
        h.sync(pod, vec![running("app", &cid, wall(t0))]).await;
        start(&h, pod, "app", &cid);
    }
    h.wait_workers(3).await;
    advance(Duration::from_secs(1)).await;
    assert!(h.prober.calls().iter().any(|c| c.container_id == id("docker://removed")), "probed while known");

    h.pipeline.remove_pod(removed.clone());
    h.pipeline.cleanup_pods([kept.metadata.uid.as_deref().unwrap().into()].into_iter().collect());
    h.wait_workers(1).await;
    // The deleted pods' containers are reported started again, by the instance they ran or a new one.
    start(&h, &removed, "app", "docker://removed");
    start(&h, &cleaned, "app", "docker://cleaned-again");
    settle().await;
    let before = h.prober.calls().len();
    advance(Duration::from_secs(5)).await;
    assert!(worker(&h, &removed, "app", Liveness).await.is_none(), "no worker for the removed pod");
    assert!(worker(&h, &cleaned, "app", Readiness).await.is_none(), "no worker for the cleaned-up pod");
    assert_eq!(h.worker_count().await, 1, "only the kept pod's worker");
    let deleted: Vec<_> =
        h.prober.calls().into_iter().skip(before).filter(|c| c.container_id != id("docker://kept")).collect();
    assert!(deleted.is_empty(), "nothing probes a deleted pod: {deleted:?}");

    // A pod added again is the host's to probe again.
    h.pipeline.add_pod(removed.clone());
    start(&h, &removed, "app", "docker://removed");
    settle().await;
    running_worker(&h, &removed, "app", Liveness).await;
}

/// A pod no `AddPod` has added (here one `AddPod` refused, two of its containers sharing a
/// name) gets no worker from a start either.
#[actix::test]
async fn a_start_for_a_pod_never_added_makes_no_worker() {
    let (h, _) = harness(true).await;
    let pod = test_pod("twice")
        .container("app")
        .with_probe("app", Readiness, probe(1, 1, 3))
        .container("app")
        .build();
    h.pipeline.add_pod(pod.clone());
    start(&h, &pod, "app", "docker://twice");
    let never = test_pod("never").container("app").with_probe("app", Readiness, probe(1, 1, 3)).build();
    start(&h, &never, "app", "docker://never");
    settle().await;
    advance(Duration::from_secs(3)).await;
    assert_eq!(h.worker_count().await, 0, "{:?}", h.pipeline.list_workers().await.unwrap());
    assert!(h.prober.calls().is_empty(), "{:?}", h.prober.calls());
}

/// A start sent before the `AddPod` that introduces its pod (a host out of the kubelet's order)
/// is dropped: `AddPod`'s worker waits, not running and never probing, until the next start of
/// the instance, which runs it (what `Pipeline::start_container_probes` tells a host).
#[actix::test]
async fn a_start_before_the_add_is_dropped_and_the_next_start_runs_the_worker() {
    let (h, _) = harness(true).await;
    let pod = test_pod("early").container("app").with_probe("app", Readiness, probe(1, 1, 3)).build();
    start(&h, &pod, "app", "docker://early");
    h.pipeline.add_pod(pod.clone());
    settle().await;
    advance(Duration::from_secs(3)).await;
    let waiting = worker(&h, &pod, "app", Readiness).await.expect("AddPod's worker");
    assert!(!waiting.running, "{waiting:?}");
    assert!(h.prober.calls().is_empty(), "{:?}", h.prober.calls());

    start(&h, &pod, "app", "docker://early");
    settle().await;
    let running = running_worker(&h, &pod, "app", Readiness).await;
    assert_eq!(running.container_id, Some(id("docker://early")), "{running:?}");
}

// === ChangeContainerStatusOnKubeletRestart ===

/// A container that ran a minute before the agent started, with a readiness probe and the API
/// reporting the pod Ready: the first status after the restart.
async fn ready_after_agent_restart(change_status: bool) -> bool {
    tokio::time::pause();
    let t0 = tokio::time::Instant::now();
    let gates =
        FeatureGates::default().with(Feature::ChangeContainerStatusOnKubeletRestart, change_status).unwrap();
    let h = Harness::start_gated(ScriptedProber::new(), gates);
    h.worker_count().await;
    let old = wall(t0) - k8s_openapi::jiff::SignedDuration::from_secs(60);
    let api = PodStatus {
        conditions: Some(vec![PodCondition {
            type_: POD_READY.into(),
            status: "True".into(),
            ..Default::default()
        }]),
        container_statuses: Some(vec![running("app", "docker://old", old)]),
        ..Default::default()
    };
    let pod: PodBuilder =
        test_pod("restarted").container("app").with_probe("app", Readiness, probe(10, 1, 3));
    let pod = pod.with_status(api).build();
    h.pipeline.add_pod(pod.clone());
    settle().await;
    let mut cs = running("app", "docker://old", old);
    cs.ready = true;
    h.sync(&pod, vec![cs]).await;
    h.container(&pod, "app").await.ready
}

#[actix::test]
async fn change_container_status_on_kubelet_restart_off_keeps_readiness() {
    assert!(ready_after_agent_restart(false).await, "KEP-4781: the container stays ready");
}

#[actix::test]
async fn change_container_status_on_kubelet_restart_on_resets_readiness() {
    assert!(!ready_after_agent_restart(true).await, "older kubelets: not ready until probed");
}
