//! `Engine::sync_pod`'s guards for what a host may hand it by mistake: a late or stale runtime
//! status after the pod finished (the terminal phase stays, as the kubelet's
//! `generateAPIPodStatus` keeps it), a pod without a UID and one with two containers of one name
//! (refused), and an engine started outside an actix system; under
//! RestartAllContainersOnContainerExits, `Initialized` staying True once it was. Paused tokio
//! time. The terminal phase kept is logged with upstream's line for whose phase it was.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use probelet_test_support as support;

use std::sync::Arc;

use k8s_openapi::api::core::v1::{Pod, PodStatus};
use k8s_openapi::jiff::Timestamp;
use probelet::clock::TokioClock;
use probelet::contracts::PodRegistry;
use probelet::prober::ProbeKind;
use probelet::{Engine, Feature, FeatureGates, SyncPodError};
use support::kubelet::{advance, epoch};
use support::log::CapturedLog;
use support::pods::{probe, running, terminated, test_pod, waiting};

fn start() -> (Engine, PodRegistry) {
    let pods = PodRegistry::new();
    let engine =
        Engine::builder(Arc::new(pods.clone())).clock(Arc::new(TokioClock::starting_at(epoch()))).start();
    (engine, pods)
}

fn runtime(phase: &str, reason: Option<&str>) -> PodStatus {
    let container = match phase {
        "Running" => running("app", "containerd://app-1", epoch()),
        _ => terminated("app", "containerd://app-1", 1),
    };
    PodStatus {
        phase: Some(phase.into()),
        reason: reason.map(Into::into),
        container_statuses: Some(vec![container]),
        ..Default::default()
    }
}

#[actix::test]
async fn a_running_status_after_the_pod_failed_keeps_the_terminal_phase() {
    tokio::time::pause();
    let (engine, pods) = start();
    let pod =
        test_pod("done").container("app").with_probe("app", ProbeKind::Readiness, probe(1, 1, 1)).build();
    pods.upsert(pod.clone());
    engine.sync_pod(pod.clone(), runtime("Running", None)).await.unwrap();
    let failed = engine.sync_pod(pod.clone(), runtime("Failed", Some("DeadlineExceeded"))).await.unwrap();
    assert_eq!(failed.phase.as_deref(), Some("Failed"));

    // A stale report of the container still running.
    let log = CapturedLog::default();
    let guard = log.capture_at(tracing::Level::TRACE);
    let late = engine.sync_pod(pod.clone(), runtime("Running", None)).await.unwrap();
    drop(guard);
    assert_eq!((late.phase.as_deref(), late.reason.as_deref()), (Some("Failed"), Some("DeadlineExceeded")));
    // Upstream's line, at trace (verbosity 4), with its keys.
    assert_eq!(
        log.lines_with("phase was terminal"),
        [
            r#"TRACE Status manager phase was terminal, updating phase to match pod="default/done" phase="Failed""#
        ]
    );
    let ready = late.conditions.iter().flatten().find(|c| c.type_ == "Ready").unwrap();
    assert_eq!((ready.status.as_str(), ready.reason.as_deref()), ("False", Some("PodFailed")));
    advance(std::time::Duration::from_secs(5)).await;
    let workers = engine.pipeline().workers().await.unwrap();
    assert!(workers.is_empty(), "a finished pod is probed no more: {workers:?}");
}

#[actix::test]
async fn a_terminal_phase_on_the_api_servers_copy_stays_too() {
    tokio::time::pause();
    let (engine, pods) = start();
    let mut pod = Arc::unwrap_or_clone(test_pod("api-done").container("app").build());
    pod.status = Some(PodStatus { phase: Some("Succeeded".into()), ..Default::default() });
    let pod = Arc::new(pod);
    pods.upsert(pod.clone());
    let log = CapturedLog::default();
    let guard = log.capture_at(tracing::Level::TRACE);
    let stored = engine.sync_pod(pod.clone(), runtime("Running", None)).await.unwrap();
    drop(guard);
    assert_eq!(stored.phase.as_deref(), Some("Succeeded"));
    // The API server's phase was kept: upstream's line for that says so.
    assert_eq!(
        log.lines_with("phase was terminal"),
        [r#"TRACE API phase was terminal, updating phase to match pod="default/api-done" phase="Succeeded""#]
    );
}

#[actix::test]
async fn a_pod_without_a_uid_is_refused() {
    tokio::time::pause();
    let (engine, _pods) = start();
    let mut pod: Pod = Arc::unwrap_or_clone(test_pod("nouid").container("app").build());
    pod.metadata.uid = None;
    let err = engine.sync_pod(Arc::new(pod), runtime("Running", None)).await.unwrap_err();
    assert!(matches!(err, SyncPodError::NoUid { ref name, .. } if name == "nouid"), "{err:?}");
    assert_eq!(
        err.to_string(),
        "pod default/nouid has no metadata.uid: the engine keeps statuses and probes by pod UID"
    );
}

#[actix::test]
async fn a_pod_with_two_containers_of_one_name_is_refused() {
    tokio::time::pause();
    let (engine, pods) = start();
    let pod = test_pod("twins").init_container("app").container("app").build();
    pods.upsert(pod.clone());
    let err = engine.sync_pod(pod, runtime("Running", None)).await.unwrap_err();
    assert_eq!(err.to_string(), "pod default/twins: more than one container is named \"app\"");
}

/// Started outside an actix system (a host on `#[tokio::main]`), the engine says what it needs
/// rather than tokio's words about a `LocalSet`.
#[test]
#[should_panic(expected = "must be called inside an actix System")]
fn starting_outside_an_actix_system_says_so() {
    let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    runtime.block_on(async {
        let _ = Engine::builder(Arc::new(PodRegistry::new())).start();
    });
}

fn initialized(status: &PodStatus) -> (String, Option<String>) {
    let c = status.conditions.iter().flatten().find(|c| c.type_ == "Initialized").unwrap();
    (c.status.clone(), c.reason.clone())
}

/// The engine's sync generates `Initialized` as the standalone host does: under
/// RestartAllContainersOnContainerExits a pod whose last status had it True keeps it True when
/// its init containers go back to waiting (a restart of all containers), as upstream's
/// `GeneratePodInitializedCondition` reads the gate and the old status. Gate off: False again.
#[actix::test]
async fn under_restart_all_containers_initialized_stays_true_once_it_was() {
    tokio::time::pause();
    for (gate, expected) in [(true, ("True", None)), (false, ("False", Some("ContainersNotInitialized")))] {
        let pods = PodRegistry::new();
        let gates =
            FeatureGates::default().with(Feature::RestartAllContainersOnContainerExits, gate).unwrap();
        let engine = Engine::builder(Arc::new(pods.clone()))
            .clock(Arc::new(TokioClock::starting_at(epoch())))
            .feature_gates(gates)
            .start();
        let pod = test_pod("again").init_container("init").container("app").build();
        pods.upsert(pod.clone());
        let first = PodStatus {
            phase: Some("Running".into()),
            init_container_statuses: Some(vec![terminated("init", "containerd://init-1", 0)]),
            container_statuses: Some(vec![running("app", "containerd://app-1", epoch())]),
            ..Default::default()
        };
        let stored = engine.sync_pod(pod.clone(), first).await.unwrap();
        assert_eq!(initialized(&stored), ("True".into(), None), "gate {gate}");

        // Every container removed, the init container waiting to run again.
        let again = PodStatus {
            phase: Some("Pending".into()),
            init_container_statuses: Some(vec![waiting("init")]),
            container_statuses: Some(vec![waiting("app")]),
            ..Default::default()
        };
        let stored = engine.sync_pod(pod.clone(), again).await.unwrap();
        let (status, reason) = expected;
        assert_eq!(initialized(&stored), (status.into(), reason.map(Into::into)), "gate {gate}");
    }
}

/// A host that hands the engine a status carrying `started` over by container name (the API
/// server's copy, as a runtime that keeps the fields it does not own writes it): the `started`
/// of the container the previous status shows stays, so a container started before an agent
/// restart is not probed again; a replacement's inherited `started: true` is dropped, so its
/// liveness and readiness wait for its own startup probe, as the kubelet's since
/// kubernetes#141342.
#[actix::test]
async fn a_replacement_container_does_not_inherit_its_predecessors_started() {
    tokio::time::pause();
    let (engine, pods) = start();
    let with_started = |name: &str, id: &str, since: Timestamp| {
        let mut status = running(name, id, since);
        status.started = Some(true);
        status.ready = true;
        status
    };
    let api_status = |app| PodStatus {
        phase: Some("Running".into()),
        container_statuses: Some(vec![app]),
        ..Default::default()
    };
    let spec = test_pod("replaced")
        .container("app")
        .with_probe("app", ProbeKind::Startup, probe(10, 1, 1000))
        .with_probe("app", ProbeKind::Liveness, probe(10, 1, 3))
        .build();
    let started = |status: &PodStatus| status.container_statuses.as_ref().unwrap()[0].started;

    // Started long before the agent: what the API server says stands.
    let before = epoch() - std::time::Duration::from_secs(60);
    let mut pod = Arc::unwrap_or_clone(spec.clone());
    pod.status = Some(api_status(with_started("app", "containerd://app-1", before)));
    let pod = Arc::new(pod);
    pods.upsert(pod.clone());
    let stored = engine.sync_pod(pod.clone(), pod.status.clone().unwrap()).await.unwrap();
    assert_eq!(started(&stored), Some(true), "the same container keeps its started");

    // Replaced: the runtime wrote the new ID and kept `started` by name.
    let mut pod = Arc::unwrap_or_clone(spec);
    let after = epoch() + std::time::Duration::from_secs(1);
    pod.status = Some(api_status(with_started("app", "containerd://app-2", after)));
    let pod = Arc::new(pod);
    pods.upsert(pod.clone());
    let stored = engine.sync_pod(pod.clone(), pod.status.clone().unwrap()).await.unwrap();
    assert_eq!(started(&stored), Some(false), "{stored:#?}");
    let ready = stored.conditions.iter().flatten().find(|c| c.type_ == "Ready").unwrap();
    assert_eq!(ready.status, "False");

    // Synced again, still handed `started: true`: what was stored for this container stands.
    let stored = engine.sync_pod(pod.clone(), pod.status.clone().unwrap()).await.unwrap();
    assert_eq!(started(&stored), Some(false));
}

/// A host whose runtime status says nothing of `started` (the README's embedding host, whose
/// engine adds it), restarted: nothing is stored, and the API server's copy of the pod says
/// its running container, started long before, is `started: true`. The kubelet carries
/// `started` over from the previous status (the API server's after a restart) for the same
/// container ID whatever the runtime says, so the container stays started and its startup
/// probe is not run again; a replacement (another ID) still is not started.
#[actix::test]
async fn a_container_started_before_a_host_restart_stays_started_when_the_runtime_omits_started() {
    tokio::time::pause();
    let (engine, pods) = start();
    let spec = test_pod("kept")
        .container("app")
        .with_probe("app", ProbeKind::Startup, probe(10, 1, 1000))
        .with_probe("app", ProbeKind::Liveness, probe(10, 1, 3))
        .build();
    let before = epoch() - std::time::Duration::from_secs(60);
    let mut api = running("app", "containerd://app-1", before);
    api.started = Some(true);
    api.ready = true;
    let mut pod = Arc::unwrap_or_clone(spec);
    pod.status = Some(PodStatus {
        phase: Some("Running".into()),
        container_statuses: Some(vec![api]),
        ..Default::default()
    });
    let pod = Arc::new(pod);
    pods.upsert(pod.clone());
    let runtime = |id: &str| PodStatus {
        phase: Some("Running".into()),
        container_statuses: Some(vec![running("app", id, before)]),
        ..Default::default()
    };
    let started = |status: &PodStatus| status.container_statuses.as_ref().unwrap()[0].started;

    let stored = engine.sync_pod(pod.clone(), runtime("containerd://app-1")).await.unwrap();
    assert_eq!(started(&stored), Some(true), "{stored:#?}");
    let stored = engine.sync_pod(pod.clone(), runtime("containerd://app-1")).await.unwrap();
    assert_eq!(started(&stored), Some(true), "synced again: {stored:#?}");

    let stored = engine.sync_pod(pod.clone(), runtime("containerd://app-2")).await.unwrap();
    assert_eq!(started(&stored), Some(false), "a replacement: {stored:#?}");
}
