//! The prober manager (docs/prober.md §3) and the results cache (docs/prober.md §2) through the
//! pipeline, under paused time with a scripted prober: which workers exist after AddPod / RemovePod
//! / StopLivenessAndStartup / CleanupPods, churn at scale, `UpdatePodStatus`'s agent-restart
//! readiness rules, the worker gauge, and lossless change emission.

// Test helpers may panic: a panic there is a failed assertion.
#![allow(clippy::unwrap_used)]

use probelet_test_support as support;

use std::collections::HashSet;
use std::sync::Arc;
use std::time::Duration;

use actix::prelude::*;
use k8s_openapi::api::core::v1::{Pod, PodCondition, PodStatus};
use probelet::container::ContainerId;
use probelet::metrics::PrometheusRegistry;
use probelet::prober::manager::{AddPod, CleanupPods, RemovePod};
use probelet::prober::worker::ProbeKey;
use probelet::prober::{ProbeKind, ProbeResult};
use probelet::results::{GetResults, RemoveResult, ResultsCache, SetResult, SubscribeResults};
use probelet::status::POD_READY;
use support::kubelet::{
    DrainLog, Harness, ResultLog, advance, aged_harness, epoch, run_for, settle, started_harness, wall,
};
use support::log::CapturedLog;
use support::pods::{PodBuilder, probe, running, test_pod};

use ProbeKind::{Liveness, Readiness, Startup};
use ProbeResult::{Failure, Success};

fn secs(n: u64) -> Duration {
    Duration::from_secs(n)
}

/// `container` with all three probes.
fn all_probes(pod: PodBuilder, container: &str) -> PodBuilder {
    pod.container(container)
        .with_probe(container, Startup, probe(10, 1, 3))
        .with_probe(container, Readiness, probe(10, 1, 3))
        .with_probe(container, Liveness, probe(10, 1, 3))
}

/// The workers as sorted (container, kind) pairs, for one pod.
async fn workers_of(h: &Harness, pod: &Arc<Pod>) -> Vec<(String, ProbeKind)> {
    let uid = pod.metadata.uid.clone().unwrap();
    let mut keys: Vec<_> = h
        .pipeline
        .workers()
        .await
        .unwrap()
        .into_iter()
        .filter(|k: &ProbeKey| k.pod_uid == uid)
        .map(|k| (k.container_name.to_string(), k.kind))
        .collect();
    keys.sort();
    keys
}

fn pairs(items: &[(&str, ProbeKind)]) -> Vec<(String, ProbeKind)> {
    let mut v: Vec<_> = items.iter().map(|(c, k)| ((*c).to_owned(), *k)).collect();
    v.sort();
    v
}

// === AddPod ===

#[actix::test]
async fn add_pod_twice_keeps_one_worker_per_probe() {
    let (h, t0) = aged_harness().await;
    let pod = test_pod("twice")
        .container("app")
        .with_probe("app", Readiness, probe(10, 1, 3))
        .with_probe("app", Liveness, probe(10, 1, 3))
        .build();
    h.pipeline.add_pod(pod.clone());
    h.pipeline.add_pod(pod.clone());
    h.wait_workers(2).await;
    // The sync adds the pod a third time.
    h.sync(&pod, vec![running("app", "cri://1", wall(t0))]).await;
    run_for(secs(25)).await;
    assert_eq!(h.worker_count().await, 2);
    // One schedule each: liveness at 10 and 20; readiness also at 0 (the sync's trigger).
    assert_eq!(h.prober.calls_of("app", Liveness).len(), 2, "no duplicate liveness probes");
    assert_eq!(h.prober.calls_of("app", Readiness).len(), 3, "no duplicate readiness probes");
}

/// A probe that already has a worker is logged as upstream's `AddPod` says it, naming the
/// probe type ("Readiness probe already exists for container", verbosity 8: trace), with its
/// keys (`pod`, `containerName`). Before, "Probe already exists for container".
#[actix::test]
async fn add_pod_of_an_existing_probe_logs_upstreams_line() {
    let log = CapturedLog::default();
    let _guard = log.capture_at(tracing::Level::TRACE);
    let (h, _) = started_harness().await;
    let pod = test_pod("again").container("app").with_probe("app", Readiness, probe(10, 1, 3)).build();
    h.pipeline.add_pod(pod.clone());
    h.wait_workers(1).await;
    h.pipeline.add_pod(pod);
    h.wait_workers(1).await;
    let lines = log.lines_with("probe already exists for container");
    assert_eq!(lines.len(), 1, "{lines:?}");
    assert!(
        lines[0].contains("TRACE")
            && lines[0].contains(
                r#"Readiness probe already exists for container pod="default/again" containerName="app""#
            ),
        "{lines:?}"
    );
}

#[actix::test]
async fn add_pod_continues_past_an_existing_worker() {
    let (h, _) = started_harness().await;
    let before = test_pod("grow").container("a").container("b").with_probe("a", Readiness, probe(10, 1, 3));
    h.pipeline.add_pod(before.clone().build());
    h.wait_workers(1).await;
    let after =
        before.with_probe("b", Readiness, probe(10, 1, 3)).with_probe("b", Liveness, probe(10, 1, 3)).build();
    h.pipeline.add_pod(after.clone());
    h.wait_workers(3).await;
    assert_eq!(workers_of(&h, &after).await, pairs(&[("a", Readiness), ("b", Readiness), ("b", Liveness)]));
}

#[actix::test]
async fn sidecars_get_workers_but_plain_init_containers_do_not() {
    let (h, _) = started_harness().await;
    let pod = test_pod("inits")
        .init_container("init")
        .sidecar("side")
        .container("app")
        .with_probe("init", Readiness, probe(10, 1, 3))
        .with_probe("side", Readiness, probe(10, 1, 3))
        .with_probe("side", Startup, probe(10, 1, 3))
        .with_probe("app", Liveness, probe(10, 1, 3))
        .build();
    h.pipeline.add_pod(pod.clone());
    settle().await;
    assert_eq!(
        workers_of(&h, &pod).await,
        pairs(&[("side", Readiness), ("side", Startup), ("app", Liveness)])
    );
}

#[actix::test]
async fn pod_without_probes_gets_no_workers() {
    let (h, _) = started_harness().await;
    let pod = test_pod("plain").container("app").build();
    h.pipeline.add_pod(pod);
    settle().await;
    assert_eq!(h.worker_count().await, 0);
}

// === stopping ===

#[actix::test]
async fn remove_pod_stops_all_of_its_workers() {
    let (h, _) = started_harness().await;
    let gone = all_probes(test_pod("gone"), "app")
        .sidecar("side")
        .with_probe("side", Readiness, probe(10, 1, 3))
        .build();
    let kept = all_probes(test_pod("kept"), "app").build();
    h.pipeline.add_pod(gone.clone());
    h.pipeline.add_pod(kept.clone());
    h.wait_workers(7).await;
    h.pipeline.remove_pod(gone.clone());
    h.wait_workers(3).await;
    assert!(workers_of(&h, &gone).await.is_empty());
    assert_eq!(workers_of(&h, &kept).await.len(), 3);
}

#[actix::test]
async fn stop_liveness_and_startup_leaves_readiness_running() {
    let (h, t0) = aged_harness().await;
    let pod = all_probes(test_pod("terminating"), "app")
        .sidecar("side")
        .with_probe("side", Liveness, probe(10, 1, 3))
        .with_probe("side", Readiness, probe(10, 1, 3))
        .build();
    h.pipeline.add_pod(pod.clone());
    h.wait_workers(5).await;
    h.pipeline.stop_liveness_and_startup(pod.clone());
    h.wait_workers(2).await;
    assert_eq!(workers_of(&h, &pod).await, pairs(&[("app", Readiness), ("side", Readiness)]));
    // Readiness keeps probing through termination (no more pod syncs, so no AddPod).
    let started = |mut s: k8s_openapi::api::core::v1::ContainerStatus| {
        s.started = Some(true);
        s
    };
    let status = PodStatus {
        phase: Some("Running".into()),
        init_container_statuses: Some(vec![started(running("side", "cri://s", wall(t0)))]),
        container_statuses: Some(vec![started(running("app", "cri://1", wall(t0)))]),
        ..Default::default()
    };
    h.pipeline.set_pod_status(pod.clone(), status);
    run_for(secs(25)).await;
    assert!(h.prober.calls_of("app", Readiness).len() >= 2);
    assert!(h.prober.calls_of("side", Readiness).len() >= 2);
    assert!(h.prober.calls_of("app", Liveness).is_empty());
    assert!(h.prober.calls_of("side", Liveness).is_empty());
}

#[actix::test]
async fn cleanup_pods_stops_only_pods_not_desired() {
    let (h, _) = started_harness().await;
    let pods: Vec<_> = ["p1", "p2", "p3"].iter().map(|n| all_probes(test_pod(n), "app").build()).collect();
    for pod in &pods {
        h.pipeline.add_pod(pod.clone());
    }
    h.wait_workers(9).await;
    let desired: HashSet<_> = ["uid-p1", "uid-p3", "uid-elsewhere"].map(Into::into).into();
    h.pipeline.cleanup_pods(desired.clone());
    h.pipeline.cleanup_pods(desired);
    h.wait_workers(6).await;
    assert!(workers_of(&h, &pods[1]).await.is_empty());
    assert_eq!(workers_of(&h, &pods[0]).await.len(), 3);
    assert_eq!(workers_of(&h, &pods[2]).await.len(), 3);
}

#[actix::test]
async fn removing_an_unknown_pod_is_a_no_op() {
    let (h, _) = started_harness().await;
    let known = all_probes(test_pod("known"), "app").build();
    h.pipeline.add_pod(known.clone());
    h.wait_workers(3).await;
    let unknown = all_probes(test_pod("unknown"), "app").build();
    h.pipeline.remove_pod(unknown.clone());
    h.pipeline.remove_pod(unknown);
    let mut no_uid = (*known).clone();
    no_uid.metadata.uid = None;
    h.pipeline.remove_pod(Arc::new(no_uid));
    settle().await;
    assert_eq!(h.worker_count().await, 3);
    h.pipeline.remove_pod(known.clone());
    h.pipeline.remove_pod(known);
    h.wait_workers(0).await;
}

// === scale ===

#[actix::test]
async fn cleanup_of_many_pods_repeated_ends_with_no_workers() {
    let (h, t0) = started_harness().await;
    let pods: Vec<_> = (0..100).map(|i| all_probes(test_pod(&format!("many-{i}")), "app").build()).collect();
    for pod in &pods {
        h.pipeline.add_pod(pod.clone());
    }
    h.wait_workers(300).await;
    // Some workers are probing (status stored), the others still in their jitter.
    for pod in pods.iter().take(50) {
        let mut app = running("app", "cri://1", wall(t0));
        app.started = Some(true);
        h.pipeline.set_pod_status(
            pod.clone(),
            PodStatus {
                phase: Some("Running".into()),
                container_statuses: Some(vec![app]),
                ..Default::default()
            },
        );
    }
    advance(secs(5)).await;
    for _ in 0..10 {
        h.pipeline.prober_manager.do_send(CleanupPods(HashSet::new()));
    }
    h.wait_workers(0).await;
    h.pipeline.cleanup_pods(HashSet::new());
    assert_eq!(h.worker_count().await, 0, "the manager still answers");
}

#[actix::test]
async fn add_and_remove_the_same_pod_a_thousand_times() {
    let (h, t0) = aged_harness().await;
    let pod = all_probes(test_pod("churn"), "app").build();
    h.sync(&pod, vec![running("app", "cri://1", wall(t0))]).await;
    settle().await;
    for _ in 0..1_000 {
        h.pipeline.prober_manager.do_send(AddPod(pod.clone()));
        h.pipeline.prober_manager.do_send(RemovePod(pod.clone()));
    }
    h.wait_workers(0).await;

    for _ in 0..1_000 {
        h.pipeline.prober_manager.do_send(RemovePod(pod.clone()));
        h.pipeline.prober_manager.do_send(AddPod(pod.clone()));
    }
    h.wait_workers(3).await;
    // Let every stopped worker finish exiting; the three live ones stay.
    run_for(secs(1)).await;
    assert_eq!(workers_of(&h, &pod).await, pairs(&[("app", Startup), ("app", Readiness), ("app", Liveness)]));
    for kind in [Startup, Readiness, Liveness] {
        assert!(
            h.result(kind, "cri://1").await.is_some(),
            "{kind}: stopped workers left the live one's result"
        );
    }
    // The survivors probe on one schedule each.
    let before = h.prober.calls_of("app", Liveness).len();
    run_for(secs(10)).await;
    assert_eq!(h.prober.calls_of("app", Liveness).len(), before + 1, "exactly one liveness worker probes");
}

// === replacing a stopping worker ===

/// The `prober_probe_total` / `prober_probe_duration_seconds` lines of one pod in the global
/// registry (workers forget their series there).
fn series_of(pod: &str) -> Vec<String> {
    let registry = PrometheusRegistry::global().unwrap();
    let needle = format!("pod=\"{pod}\"");
    registry.render().lines().filter(|l| l.contains(&needle)).map(str::to_owned).collect()
}

/// RemovePod immediately followed by AddPod: the second worker replaces the first while it is
/// still stopping.
fn remove_then_add(h: &Harness, pod: &Arc<Pod>) {
    h.pipeline.prober_manager.do_send(RemovePod(pod.clone()));
    h.pipeline.prober_manager.do_send(AddPod(pod.clone()));
}

#[actix::test]
async fn replacement_keeps_the_result_and_series_the_stopped_worker_leaves() {
    let (h, t0) = aged_harness().await;
    let _ = PrometheusRegistry::global().unwrap();
    let pod = test_pod("replaced").container("app").with_probe("app", Readiness, probe(10, 1, 3)).build();
    h.sync(&pod, vec![running("app", "cri://1", wall(t0))]).await;
    settle().await;
    assert_eq!(h.result(Readiness, "cri://1").await, Some(Success));
    assert!(!series_of("replaced").is_empty());

    remove_then_add(&h, &pod);
    // Well short of the replacement's next probe, which would write the entry again.
    run_for(secs(1)).await;
    assert_eq!(h.worker_count().await, 1);
    assert_eq!(h.result(Readiness, "cri://1").await, Some(Success), "the old worker's exit left it");
    assert!(!series_of("replaced").is_empty(), "the old worker's exit left the series");
    assert!(h.resync(&pod).await.container_statuses.as_ref().unwrap()[0].ready);

    // The normal case is unchanged: a worker that nobody replaced takes both with it.
    h.pipeline.remove_pod(pod.clone());
    h.wait_workers(0).await;
    settle().await;
    assert_eq!(h.result(Readiness, "cri://1").await, None);
    assert_eq!(series_of("replaced"), Vec::<String>::new());
}

#[actix::test]
async fn started_container_stays_started_across_a_startup_worker_replacement() {
    let (h, t0) = aged_harness().await;
    let _ = PrometheusRegistry::global().unwrap();
    let pod =
        test_pod("replaced-startup").container("app").with_probe("app", Startup, probe(10, 1, 3)).build();
    h.sync(&pod, vec![running("app", "cri://1", wall(t0))]).await;
    // The worker is created after the first status, which has the container started without a
    // startup worker: it seeds Unknown, and probes at its next tick.
    settle().await;
    h.resync(&pod).await;
    run_for(secs(10)).await;
    assert_eq!(h.resync(&pod).await.container_statuses.as_ref().unwrap()[0].started, Some(true));
    assert_eq!(h.prober.calls_of("app", Startup).len(), 1, "decided, now on hold");

    remove_then_add(&h, &pod);
    settle().await;
    assert_eq!(h.result(Startup, "cri://1").await, Some(Success), "not removed, not reseeded");
    assert_eq!(h.container(&pod, "app").await.started, Some(true));
    assert!(!series_of("replaced-startup").is_empty(), "the series are the new worker's");

    // The new worker never probes the started container, so nothing would write the entry again.
    run_for(secs(35)).await;
    assert_eq!(h.resync(&pod).await.container_statuses.as_ref().unwrap()[0].started, Some(true));
    assert_eq!(h.result(Startup, "cri://1").await, Some(Success));
    assert_eq!(h.prober.calls_of("app", Startup).len(), 1);
}

#[actix::test]
async fn replacement_on_a_new_container_drops_the_old_containers_entry() {
    let (h, t0) = aged_harness().await;
    let pod = test_pod("replaced-new").container("app").with_probe("app", Readiness, probe(10, 1, 3)).build();
    h.sync(&pod, vec![running("app", "cri://1", wall(t0))]).await;
    settle().await;
    assert_eq!(h.result(Readiness, "cri://1").await, Some(Success));
    // The container restarts; the old worker would see it only at its next tick.
    h.sync(&pod, vec![running("app", "cri://2", wall(t0))]).await;

    remove_then_add(&h, &pod);
    run_for(secs(1)).await;
    assert_eq!(h.result(Readiness, "cri://1").await, None, "the old container's entry is gone");
    assert_eq!(h.result(Readiness, "cri://2").await, Some(Success), "the new worker probed the new one");
    assert_eq!(h.prober.calls_of("app", Readiness).last().unwrap().container_id.to_string(), "cri://2");
}

#[actix::test]
async fn replacement_stopped_too_leaves_nothing_behind() {
    let (h, t0) = aged_harness().await;
    let _ = PrometheusRegistry::global().unwrap();
    let pod = all_probes(test_pod("replaced-gone"), "app").build();
    h.sync(&pod, vec![running("app", "cri://1", wall(t0))]).await;
    settle().await;
    assert!(!series_of("replaced-gone").is_empty());

    for _ in 0..3 {
        remove_then_add(&h, &pod);
    }
    h.pipeline.prober_manager.do_send(RemovePod(pod.clone()));
    h.wait_workers(0).await;
    run_for(secs(1)).await;
    for kind in [Startup, Readiness, Liveness] {
        assert_eq!(h.result(kind, "cri://1").await, None, "{kind}");
    }
    assert_eq!(series_of("replaced-gone"), Vec::<String>::new());
}

// === UpdatePodStatus: agent-restart readiness ===

/// A pod with a readiness probe on `app` whose API status says Ready = `api_ready` and lists
/// `app` with `api_id`.
fn restarted_agent_pod(name: &str, api_ready: &str, api_id: &str) -> Arc<Pod> {
    let api = PodStatus {
        conditions: Some(vec![PodCondition {
            type_: POD_READY.into(),
            status: api_ready.into(),
            ..Default::default()
        }]),
        container_statuses: Some(vec![running("app", api_id, epoch())]),
        ..Default::default()
    };
    test_pod(name).container("app").with_probe("app", Readiness, probe(10, 1, 3)).with_status(api).build()
}

/// `ready` of `app` from `UpdatePodStatus`, with a readiness worker and no readiness result,
/// for a container that started `started_before` the manager.
async fn ready_after_agent_restart(pod: Arc<Pod>, started_before: Duration) -> bool {
    let (h, _) = started_harness().await;
    h.pipeline.add_pod(pod.clone());
    h.wait_workers(1).await;
    let status = PodStatus {
        phase: Some("Running".into()),
        container_statuses: Some(vec![running("app", "cri://1", epoch() - started_before)]),
        ..Default::default()
    };
    let status = h.pipeline.update_pod_status(pod, status).await.unwrap();
    assert_eq!(h.result(Readiness, "cri://1").await, None, "no readiness result yet");
    let app = &status.container_statuses.unwrap()[0];
    assert_eq!(app.started, Some(true));
    app.ready
}

#[actix::test]
async fn agent_restart_keeps_readiness_while_the_api_says_ready() {
    let pod = restarted_agent_pod("kept-ready", "True", "cri://1");
    assert!(ready_after_agent_restart(pod, secs(60)).await);
}

#[actix::test]
async fn agent_restart_drops_readiness_when_the_api_pod_is_not_ready() {
    let pod = restarted_agent_pod("api-not-ready", "False", "cri://1");
    assert!(!ready_after_agent_restart(pod, secs(60)).await);
}

#[actix::test]
async fn agent_restart_drops_readiness_when_the_api_names_another_container() {
    let pod = restarted_agent_pod("replaced", "True", "cri://0");
    assert!(!ready_after_agent_restart(pod, secs(60)).await);
}

#[actix::test]
async fn agent_restart_does_not_keep_readiness_of_a_recent_container() {
    let pod = restarted_agent_pod("recent", "True", "cri://1");
    assert!(!ready_after_agent_restart(pod, secs(5)).await);
}

// === metrics ===

/// `probelet_probe_workers{probe_type="<kind>"}` in `registry`, 0 if absent.
fn workers_gauge(registry: &PrometheusRegistry, kind: &str) -> f64 {
    let prefix = format!("probelet_probe_workers{{probe_type=\"{kind}\"}} ");
    registry.render().lines().find_map(|l| l.strip_prefix(&prefix).map(|v| v.parse().unwrap())).unwrap_or(0.0)
}

#[actix::test]
async fn worker_gauge_follows_workers_by_type() {
    // A thread-local recorder: the gauge has no per-pod label, and other tests of this binary
    // record into the global one in parallel. The manager runs on this thread.
    let registry = PrometheusRegistry::new();
    let _local = metrics::set_default_local_recorder(&registry);
    let (h, _) = started_harness().await;
    let a = all_probes(test_pod("gauge-a"), "app").build();
    let b = test_pod("gauge-b").container("app").with_probe("app", Readiness, probe(10, 1, 3)).build();
    h.pipeline.add_pod(a.clone());
    h.pipeline.add_pod(b.clone());
    h.wait_workers(4).await;
    assert_eq!(workers_gauge(&registry, "Readiness"), 2.0);
    assert_eq!(workers_gauge(&registry, "Liveness"), 1.0);
    assert_eq!(workers_gauge(&registry, "Startup"), 1.0);

    h.pipeline.stop_liveness_and_startup(a.clone());
    h.wait_workers(2).await;
    assert_eq!(workers_gauge(&registry, "Readiness"), 2.0);
    assert_eq!(workers_gauge(&registry, "Liveness"), 0.0);
    assert_eq!(workers_gauge(&registry, "Startup"), 0.0);

    for _ in 0..10 {
        h.pipeline.prober_manager.do_send(RemovePod(b.clone()));
        h.pipeline.prober_manager.do_send(AddPod(b.clone()));
    }
    h.wait_workers(2).await;
    run_for(secs(1)).await;
    assert_eq!(workers_gauge(&registry, "Readiness"), 2.0, "churn leaves the gauge at the worker count");

    h.pipeline.cleanup_pods(HashSet::new());
    h.wait_workers(0).await;
    run_for(secs(1)).await;
    assert_eq!(workers_gauge(&registry, "Readiness"), 0.0);
}

// === the results cache ===

fn set(kind: ProbeKind, id: &str, result: ProbeResult) -> SetResult {
    SetResult { kind, container_id: ContainerId::parse(id), result, pod_uid: "uid-cache".into() }
}

#[actix::test]
async fn results_cache_emits_only_on_change() {
    let cache = ResultsCache::new(None, None).start();
    let log = ResultLog::default().start();
    cache.send(SubscribeResults(log.clone().recipient())).await.unwrap();
    for msg in [
        set(Readiness, "cri://1", Failure),
        set(Readiness, "cri://1", Failure),
        set(Readiness, "cri://1", Success),
        set(Readiness, "cri://1", Success),
        // Same container ID, another kind: its own entry.
        set(Liveness, "cri://1", Success),
        set(Liveness, "cri://1", Success),
    ] {
        cache.send(msg).await.unwrap();
    }
    let changes: Vec<_> = log.send(DrainLog).await.unwrap().into_iter().map(|c| (c.kind, c.result)).collect();
    assert_eq!(changes, [(Readiness, Failure), (Readiness, Success), (Liveness, Success)]);
}

#[actix::test]
async fn results_cache_remove_emits_nothing() {
    let cache = ResultsCache::new(None, None).start();
    let log = ResultLog::default().start();
    cache.send(SubscribeResults(log.clone().recipient())).await.unwrap();
    cache.send(set(Startup, "cri://1", Success)).await.unwrap();
    log.send(DrainLog).await.unwrap();
    cache.send(RemoveResult { kind: Startup, container_id: ContainerId::parse("cri://1") }).await.unwrap();
    let got = cache.send(GetResults(vec![(Startup, ContainerId::parse("cri://1"))])).await.unwrap();
    assert_eq!(got, [None]);
    assert!(log.send(DrainLog).await.unwrap().is_empty(), "a removal is not a change");
    // The same value again is new after the removal.
    cache.send(set(Startup, "cri://1", Success)).await.unwrap();
    assert_eq!(log.send(DrainLog).await.unwrap().len(), 1);
}

#[actix::test]
async fn results_cache_delivers_every_change_to_a_stalled_subscriber() {
    // The subscriber lives on an arbiter whose thread is blocked until the test releases it.
    let arbiter = Arbiter::new();
    let log = ResultLog::start_in_arbiter(&arbiter.handle(), |_| ResultLog::default());
    let (blocked_tx, blocked_rx) = tokio::sync::oneshot::channel();
    let (release_tx, release_rx) = std::sync::mpsc::channel::<()>();
    assert!(arbiter.spawn(async move {
        let _ = blocked_tx.send(());
        let _ = release_rx.recv();
    }));
    blocked_rx.await.unwrap();

    let cache = ResultsCache::new(None, None).start();
    cache.send(SubscribeResults(log.clone().recipient())).await.unwrap();
    let results: Vec<ProbeResult> = (0..1_000).map(|i| if i % 2 == 0 { Failure } else { Success }).collect();
    for r in &results {
        cache.do_send(set(Readiness, "cri://1", *r));
    }
    // The cache handled all of them while nobody drained the subscriber.
    let last = cache.send(GetResults(vec![(Readiness, ContainerId::parse("cri://1"))])).await.unwrap();
    assert_eq!(last, [Some(Success)]);

    release_tx.send(()).unwrap();
    let delivered: Vec<_> = log.send(DrainLog).await.unwrap().into_iter().map(|c| c.result).collect();
    assert_eq!(delivered, results, "every change, in order");
    arbiter.stop();
}

// === UpdatePodStatus reads the results without a round trip ===

/// A prober manager on its own, without a pipeline: a scripted prober, `cache` for results.
fn bare_manager(
    cache: probelet::results::ResultsSink,
    view: probelet::results::ResultsView,
) -> Addr<probelet::prober::manager::ProberManager> {
    use probelet::clock::TokioClock;
    use probelet::prober::manager::{ManagerConfig, ProberManager};
    use probelet::status::views::StatusViews;

    ProberManager::new(ManagerConfig {
        prober: Arc::new(support::scripted::ScriptedProber::new()),
        results: cache,
        results_view: view,
        views: StatusViews::new(),
        clock: Arc::new(TokioClock::new()),
        runtime: None,
        jitter_seed: Some(1),
    })
    .start()
}

#[actix::test]
async fn update_pod_status_reads_stored_results_even_when_the_cache_cannot_answer() {
    use probelet::prober::manager::{GetWorkers, UpdatePodStatus};

    // A cache that stored a readiness success, then stopped answering messages.
    let arbiter = Arbiter::new();
    let cache = ResultsCache::new(None, None);
    let view = cache.view();
    let cache = ResultsCache::start_in_arbiter(&arbiter.handle(), |_| cache);
    cache.send(set(Readiness, "cri://1", Success)).await.unwrap();
    arbiter.stop();
    arbiter.join().unwrap();
    assert!(!cache.connected(), "the cache is gone");

    let manager = bare_manager(cache.into(), view);
    let pod = test_pod("stored").container("app").with_probe("app", Readiness, probe(10, 1, 3)).build();
    manager.send(AddPod(pod.clone())).await.unwrap();
    assert_eq!(manager.send(GetWorkers).await.unwrap().len(), 1);
    let status = PodStatus {
        phase: Some("Running".into()),
        container_statuses: Some(vec![running("app", "cri://1", epoch())]),
        ..Default::default()
    };
    let status = manager.send(UpdatePodStatus { pod, status }).await.unwrap();
    let app = &status.container_statuses.unwrap()[0];
    assert!(app.ready, "the stored success is read, not lost to a mailbox error");
}

// === the manager's own lifetime ===

/// What the workers share holds a recipient of the manager: held by the manager itself, it
/// would keep the manager (and the results cache it sends to) alive after its last worker and
/// its host are gone.
#[actix::test]
async fn a_manager_whose_workers_and_host_are_gone_stops() {
    use probelet::prober::manager::GetWorkers;

    let cache = ResultsCache::new(None, None);
    let view = cache.view();
    let manager = bare_manager(cache.start().into(), view);
    let pod = test_pod("short").container("app").with_probe("app", Readiness, probe(10, 1, 3)).build();
    manager.send(AddPod(pod.clone())).await.unwrap();
    assert_eq!(manager.send(GetWorkers).await.unwrap().len(), 1);
    manager.send(RemovePod(pod)).await.unwrap();
    // The worker's exit notice reaches the manager after the worker stops.
    for _ in 0..100 {
        if manager.send(GetWorkers).await.unwrap().is_empty() {
            break;
        }
        tokio::task::yield_now().await;
    }
    assert!(manager.send(GetWorkers).await.unwrap().is_empty(), "the worker is gone");

    let weak = manager.downgrade();
    drop(manager);
    for _ in 0..100 {
        if weak.upgrade().is_none() {
            break;
        }
        tokio::task::yield_now().await;
    }
    assert!(weak.upgrade().is_none(), "nothing but the manager's own peers kept it alive");
}

// === invalid pods ===

/// `pod` with its container `from` renamed `to` (the builder names each container once).
fn renamed(pod: Arc<Pod>, from: &str, to: &str) -> Arc<Pod> {
    let mut pod = Arc::unwrap_or_clone(pod);
    let spec = pod.spec.as_mut().unwrap();
    for container in spec.containers.iter_mut().chain(spec.init_containers.iter_mut().flatten()) {
        if container.name == from {
            container.name = to.to_owned();
        }
    }
    Arc::new(pod)
}

/// Two containers of one name (regular ones, or a sidecar and a regular one: one name space),
/// which the API server refuses. Workers are keyed by container name: before, the first
/// container's readiness worker and the second's liveness worker both ran as `app`'s (the
/// liveness one probing the second container under the first's name), and a probe of the same
/// kind on both ran for the first only. Now `add_pod` and `reconcile_pod` start none for such
/// a pod, and a warn log names the pod and the name; the manager goes on with other pods.
#[actix::test]
async fn a_pod_with_two_containers_of_one_name_gets_no_workers() {
    let log = CapturedLog::default();
    let _guard = log.capture_at(tracing::Level::WARN);
    let (h, _) = started_harness().await;
    let regular = test_pod("twins")
        .container("app")
        .container("other")
        .with_probe("app", Readiness, probe(10, 1, 3))
        .with_probe("other", Liveness, probe(10, 1, 3))
        .build();
    let twins = renamed(regular, "other", "app");
    h.pipeline.add_pod(twins.clone());
    h.pipeline.reconcile_pod(twins.clone());
    let sidecar = test_pod("side-twins")
        .sidecar("proxy")
        .container("app")
        .with_probe("proxy", Startup, probe(10, 1, 3))
        .with_probe("app", Readiness, probe(10, 1, 3))
        .build();
    let side_twins = renamed(sidecar, "proxy", "app");
    h.pipeline.add_pod(side_twins.clone());
    settle().await;
    assert_eq!(workers_of(&h, &twins).await, pairs(&[]), "two regular containers named app");
    assert_eq!(workers_of(&h, &side_twins).await, pairs(&[]), "a sidecar and a container named app");
    let warned = log.lines_with("Pod has more than one container of this name; not probing it");
    assert_eq!(warned.len(), 3, "{warned:?}");
    assert!(warned[0].contains("WARN"), "{warned:?}");
    assert!(warned[0].contains("pod=default/twins") && warned[0].contains("container=\"app\""), "{warned:?}");
    assert!(warned[2].contains("pod=default/side-twins"), "{warned:?}");

    let fine = test_pod("fine").container("app").with_probe("app", Readiness, probe(10, 1, 3)).build();
    h.pipeline.add_pod(fine.clone());
    settle().await;
    assert_eq!(workers_of(&h, &fine).await, pairs(&[("app", Readiness)]));
}
