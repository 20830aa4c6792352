//! End to end: `examples/embed_host.rs`, the virtual-kubelet-shaped host that embeds the engine
//! through `Engine::builder`, run as a real process against the fake API server. Its pods get
//! probed, and the status the engine writes is the kubelet's: phase, container statuses with
//! `ready`, and Ready following the readiness probe both ways; a failing liveness probe makes the
//! host restart the container.

// The example runs on real time: this test reads the real clock too.
#![allow(clippy::disallowed_methods)]
// Helpers here may panic: a panic fails the test that called them.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use probelet_test_support as support;

use std::path::PathBuf;
use std::process::Stdio;
use std::time::Duration;

use k8s_openapi::api::core::v1::{Container, Pod, PodSpec, Probe, TCPSocketAction};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use support::apiserver::FakeApiServer;
use tokio::net::TcpListener;
use tokio::process::Command;

/// `target/debug/examples/embed_host`, which `cargo test` builds with the tests.
fn example_binary() -> PathBuf {
    let deps = std::env::current_exe().unwrap();
    let profile = deps.parent().unwrap().parent().unwrap();
    let binary = profile.join("examples").join("embed_host");
    assert!(binary.exists(), "{} (cargo test builds the examples)", binary.display());
    binary
}

fn tcp_probe(port: u16) -> Probe {
    Probe {
        tcp_socket: Some(TCPSocketAction { port: IntOrString::Int(i32::from(port)), host: None }),
        period_seconds: Some(1),
        failure_threshold: Some(1),
        ..Default::default()
    }
}

fn pod(name: &str, node: &str, readiness: Probe, liveness: Option<Probe>) -> Pod {
    Pod {
        metadata: ObjectMeta {
            name: Some(name.into()),
            namespace: Some("default".into()),
            ..Default::default()
        },
        spec: Some(PodSpec {
            node_name: Some(node.into()),
            containers: vec![Container {
                name: "app".into(),
                image: Some("app:1".into()),
                readiness_probe: Some(readiness),
                liveness_probe: liveness,
                ..Default::default()
            }],
            ..Default::default()
        }),
        status: None,
    }
}

fn ready(pod: &Pod) -> Option<bool> {
    let status = pod.status.as_ref()?;
    let condition = status.conditions.as_ref()?.iter().find(|c| c.type_ == "Ready")?;
    let container = status.container_statuses.as_ref()?.first()?;
    assert_eq!(container.ready, condition.status == "True", "container ready and Ready agree: {status:?}");
    Some(condition.status == "True")
}

use support::agent::wait_for_pod as wait_for;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_embedded_engine_writes_the_kubelets_status_and_follows_the_probes() {
    let fake = FakeApiServer::start().await;
    let target = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = target.local_addr().unwrap().port();
    // The target accepts and drops connections; a TCP probe needs no more.
    let serving = tokio::spawn(async move {
        loop {
            let _ = target.accept().await;
        }
    });
    // A closed port: liveness fails, the host restarts the container.
    let closed = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let closed_port = closed.local_addr().unwrap().port();
    drop(closed);
    fake.insert_pod(pod("web", "virtual-1", tcp_probe(port), None));
    fake.insert_pod(pod("crashing", "virtual-1", tcp_probe(port), Some(tcp_probe(closed_port))));
    fake.insert_pod(pod("elsewhere", "other-node", tcp_probe(port), None));

    let kubeconfig = support::agent::kubeconfig_for(&fake.url(), "embed");
    let mut host = Command::new(example_binary())
        .args(["--node", "virtual-1"])
        .env("KUBECONFIG", &kubeconfig)
        .stdout(Stdio::null())
        .kill_on_drop(true)
        .spawn()
        .unwrap();

    // The engine wrote the kubelet's status: the runtime's phase and containers, and Ready
    // once the readiness probe succeeded.
    let web = wait_for(&fake, "web", "Ready=True", |p| ready(p) == Some(true)).await;
    let status = web.status.unwrap();
    assert_eq!(status.phase.as_deref(), Some("Running"));
    let container = &status.container_statuses.unwrap()[0];
    assert_eq!(container.started, Some(true));
    let kinds: Vec<_> = status.conditions.unwrap().into_iter().map(|c| (c.type_, c.status)).collect();
    for kind in ["Initialized", "ContainersReady", "Ready"] {
        assert!(kinds.contains(&(kind.to_owned(), "True".to_owned())), "{kind} True in {kinds:?}");
    }

    // A failing liveness probe: the host restarts the container, and the engine writes it.
    wait_for(&fake, "crashing", "a restart", |p| {
        p.status.as_ref().and_then(|s| s.container_statuses.as_ref()).is_some_and(|c| c[0].restart_count >= 1)
    })
    .await;

    // The readiness target goes away: Ready follows.
    serving.abort();
    let _ = serving.await;
    wait_for(&fake, "web", "Ready=False", |p| ready(p) == Some(false)).await;

    // A pod of another node is never written.
    let elsewhere = fake.pod("default", "elsewhere").unwrap();
    assert!(elsewhere.status.and_then(|s| s.conditions).is_none(), "other node's pod untouched");

    // SIGTERM: the host flushes and exits cleanly.
    let pid = rustix::process::Pid::from_raw(host.id().unwrap() as i32).unwrap();
    rustix::process::kill_process(pid, rustix::process::Signal::TERM).unwrap();
    let exit = tokio::time::timeout(Duration::from_secs(15), host.wait()).await.unwrap().unwrap();
    assert!(exit.success(), "{exit:?}");
    let _ = std::fs::remove_file(kubeconfig);
}
