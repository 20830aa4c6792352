//! Where an embedding host's exec probes run when it names no command runner: with an API
//! client its pods come from the cluster, and their commands must not run on the host's machine
//! (docs/security.md, "Exec probes of an embedding host"). Real time, against the fake API
//! server; every wait is bounded.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use probelet_test_support as support;

use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::core::v1::{Container, ExecAction, Pod, PodSpec, PodStatus, Probe};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use probelet::Engine;
use probelet::contracts::{PodRegistry, ProbeObserver, ProbeRecord};
use probelet::engine::NO_COMMAND_RUNNER;
use probelet::sync::syncer::OwnedFields;
use support::apiserver::FakeApiServer;
use support::pods::running;
use tokio::sync::mpsc;

/// Hands every probe record to the test.
struct Records(mpsc::UnboundedSender<ProbeRecord<'static>>);

impl ProbeObserver for Records {
    fn observe(&self, record: ProbeRecord<'_>) {
        let _ = self.0.send(record.into_owned());
    }
}

/// A pod whose readiness probe runs `command` every second.
fn pod_running(command: Vec<String>) -> Arc<Pod> {
    let app = Container {
        name: "app".into(),
        readiness_probe: Some(Probe {
            exec: Some(ExecAction { command: Some(command) }),
            period_seconds: Some(1),
            ..Default::default()
        }),
        ..Default::default()
    };
    Arc::new(Pod {
        metadata: ObjectMeta {
            name: Some("provider-pod".into()),
            namespace: Some("default".into()),
            uid: Some("uid-provider-pod".into()),
            ..Default::default()
        },
        spec: Some(PodSpec {
            containers: vec![app],
            node_name: Some("virtual".into()),
            ..Default::default()
        }),
        status: None,
    })
}

#[actix::test]
async fn with_an_api_client_and_no_runner_exec_probes_error_and_run_nothing_here() {
    let fake = FakeApiServer::start().await;
    let dir = tempfile_dir();
    let marker = dir.join("ran-here");
    let (tx, mut records) = mpsc::unbounded_channel();
    let pods = PodRegistry::new();
    let engine = Engine::builder(Arc::new(pods.clone()))
        .api(fake.client(), OwnedFields::Kubelet)
        .observer(Arc::new(Records(tx)))
        .start();
    let pod = pod_running(vec!["touch".into(), marker.display().to_string()]);
    pods.upsert(pod.clone());
    let started = k8s_openapi::jiff::Timestamp::UNIX_EPOCH;
    let status = PodStatus {
        phase: Some("Running".into()),
        container_statuses: Some(vec![running("app", "containerd://app-1", started)]),
        ..Default::default()
    };
    engine.sync_pod(pod, status).await.unwrap();

    let record = tokio::time::timeout(Duration::from_secs(10), records.recv())
        .await
        .expect("the readiness probe ran within 10 s")
        .expect("the engine is running");
    assert_eq!(record.result, Err(NO_COMMAND_RUNNER.to_owned()), "{record:?}");
    assert!(!marker.exists(), "the pod's command ran on this machine");
    let stored = engine.pipeline().pod_status("uid-provider-pod").await.unwrap().unwrap();
    let ready: Vec<bool> = stored.container_statuses.iter().flatten().map(|c| c.ready).collect();
    assert_eq!(ready, [false]);
    let _ = std::fs::remove_dir_all(&dir);
}

/// A fresh folder of this test's own.
fn tempfile_dir() -> std::path::PathBuf {
    let dir = std::env::temp_dir().join(format!("probelet-engine-exec-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    dir
}
