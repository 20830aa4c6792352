//! A status syncer against the fake API server, for the syncer tests: the host's pods (static
//! pods and their mirrors included), a pipeline whose status manager the syncer follows, the
//! fake, and builders for API pods and statuses.
//!
//! Paused time throughout: the syncer's kube client calls the fake in-process
//! ([`FakeApiServer::in_process_client`]), so a test's clock is the runtime's, and waits are
//! `Flush` round trips or polls that advance it, never wall-clock sleeps.

use std::collections::HashMap;
use std::future::Future;
use std::sync::{Arc, RwLock};
use std::time::Duration;

use actix::Addr;
use http::Method;
use k8s_openapi::api::core::v1::{ContainerStatus, Pod, PodIP, PodStatus};
use probelet::Pipeline;
use probelet::clock::TokioClock;
use probelet::contracts::{PodLookup, PodRegistry};
use probelet::status::equality::is_kubelet_owned_condition;
use probelet::status::generate_kubelet_conditions;
use probelet::status::manager::VersionedPodStatus;
use probelet_actors::sync::rate::RateLimiter;
use probelet_actors::sync::syncer::{Flush, StatusSyncer, SyncerConfig, start_syncer};

use super::apiserver::{FakeApiServer, RecordedRequest};
use super::kubelet::{epoch, start_pipeline};
use super::pods::{PodBuilder, running};

pub const NS: &str = "default";
pub const NODE: &str = "node-a";
pub const POD_IP: &str = "10.1.2.3";

/// Bounds a test's time (on the paused clock: a test that waits for something that never comes
/// fails at once, when only this timer is left).
pub async fn bounded<F: Future>(limit: Duration, f: F) -> F::Output {
    tokio::time::timeout(limit, f).await.expect("the test finished in time")
}

/// Polls `check` every few milliseconds until it holds; panics with `what` after `limit`.
pub async fn eventually(limit: Duration, what: &str, mut check: impl FnMut() -> bool) {
    let waited = tokio::time::timeout(limit, async {
        while !check() {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    })
    .await;
    assert!(waited.is_ok(), "{what} did not happen within {limit:?}");
}

/// Pauses the runtime's clock, once per test (a test may start several [`SyncTest`]s): the
/// syncer's client calls the fake in-process, so nothing waits on a socket and the clock moves
/// only when every task waits on a timer. Each test runs on a thread of its own with a runtime of
/// its own, so a thread-local flag says whether this test's clock is paused already.
fn pause_once() {
    thread_local!(static PAUSED: std::cell::Cell<bool> = const { std::cell::Cell::new(false) });
    if !PAUSED.replace(true) {
        tokio::time::pause();
    }
}

/// The host's pods, with static pods and their mirror pods (changeable while a test runs).
#[derive(Clone, Default)]
pub struct TestPods {
    pub registry: PodRegistry,
    /// Static pod UID → its mirror pod's UID, `None` while no mirror exists.
    statics: Arc<RwLock<HashMap<String, Option<String>>>>,
}

impl TestPods {
    pub fn add(&self, pod: &Arc<Pod>) {
        self.registry.upsert(pod.clone());
    }

    /// A static pod, with its mirror pod's UID if one exists.
    pub fn add_static(&self, pod: &Arc<Pod>, mirror_uid: Option<&str>) {
        self.registry.upsert(pod.clone());
        let uid = pod.metadata.uid.clone().unwrap_or_default();
        self.statics.write().unwrap().insert(uid, mirror_uid.map(str::to_owned));
    }

    pub fn set_mirror(&self, static_uid: &str, mirror_uid: Option<&str>) {
        self.statics.write().unwrap().insert(static_uid.to_owned(), mirror_uid.map(str::to_owned));
    }
}

impl PodLookup for TestPods {
    fn pod_by_uid(&self, uid: &str) -> Option<Arc<Pod>> {
        self.registry.pod_by_uid(uid)
    }

    fn static_uid_for_mirror(&self, mirror_uid: &str) -> Option<String> {
        let statics = self.statics.read().unwrap();
        statics.iter().find(|(_, m)| m.as_deref() == Some(mirror_uid)).map(|(s, _)| s.clone())
    }

    fn mirror_uid_for_static(&self, static_uid: &str) -> Option<String> {
        self.statics.read().unwrap().get(static_uid).cloned().flatten()
    }

    fn is_static(&self, uid: &str) -> bool {
        self.statics.read().unwrap().contains_key(uid)
    }
}

/// A fake API server, the host's pods and a pipeline (status manager) to sync from.
pub struct SyncTest {
    pub fake: FakeApiServer,
    pub pods: TestPods,
    pub pipeline: Pipeline,
}

impl SyncTest {
    /// Must run inside an actix system.
    pub async fn start() -> SyncTest {
        pause_once();
        let fake = FakeApiServer::start().await;
        let pods = TestPods::default();
        let pipeline = start_pipeline(Arc::new(pods.clone()));
        SyncTest { fake, pods, pipeline }
    }

    /// Test settings: a kube client that does not retry on its own, no request budget, short
    /// back-off, and a reconcile period long enough that only the test triggers reconciles.
    pub fn config(&self) -> SyncerConfig {
        let client = self.fake.in_process_client();
        let mut config = SyncerConfig::new(
            client,
            Arc::new(self.pods.clone()),
            self.pipeline.status_manager.clone(),
            Arc::new(TokioClock::starting_at(epoch())),
        );
        config.limiter = RateLimiter::new(0.0, 1);
        config.reconcile_period = Duration::from_secs(3600);
        config.backoff_initial = Duration::from_millis(20);
        config.backoff_max = Duration::from_millis(200);
        config
    }

    /// Starts a syncer with [`SyncTest::config`] adjusted by `adjust`, subscribed before this
    /// returns.
    pub async fn syncer_with(&self, adjust: impl FnOnce(&mut SyncerConfig)) -> Addr<StatusSyncer> {
        let mut config = self.config();
        adjust(&mut config);
        let syncer = start_syncer(config);
        // The subscription is a message to the status manager: a round trip puts it in place.
        self.pipeline.statuses().await.unwrap();
        syncer
    }

    pub async fn syncer(&self) -> Addr<StatusSyncer> {
        self.syncer_with(|_| {}).await
    }

    /// Stores a status through the status manager (`SetPodStatus`) and returns the entry.
    pub async fn set_status(&self, pod: &Arc<Pod>, status: PodStatus) -> VersionedPodStatus {
        self.pipeline.set_pod_status(pod.clone(), status);
        let uid = pod.metadata.uid.clone().unwrap_or_default();
        self.pipeline.versioned_status(&uid).await.unwrap().expect("the status was stored")
    }

    /// Waits until the syncer has nothing queued, in back-off or in flight, after everything the
    /// status manager was told so far reached it.
    pub async fn flush(&self, syncer: &Addr<StatusSyncer>) {
        // The status manager publishes while it handles a message: one round trip to it puts
        // every update it owes the syncer in the syncer's mailbox, ahead of the Flush.
        self.pipeline.statuses().await.unwrap();
        tokio::time::timeout(Duration::from_secs(20), syncer.send(Flush))
            .await
            .expect("the syncer flushed within 20 s")
            .unwrap();
    }

    /// The status manager's status of `uid`, if it has one.
    pub async fn cached(&self, uid: &str) -> Option<Arc<PodStatus>> {
        self.pipeline.pod_status(uid).await.unwrap()
    }

    /// The fake's copy of pod `name`.
    pub fn api(&self, name: &str) -> Pod {
        self.fake.pod(NS, name).unwrap_or_else(|| panic!("the API has pod {name}"))
    }

    /// The requests the fake received, as (method, path, code).
    pub fn summary(&self) -> Vec<(Method, String, Option<u16>)> {
        summarize(&self.fake.requests())
    }

    pub fn count(&self, method: &Method) -> usize {
        self.fake.requests().iter().filter(|r| r.method == *method).count()
    }

    pub fn requests_of(&self, method: &Method) -> Vec<RecordedRequest> {
        self.fake.requests().into_iter().filter(|r| r.method == *method).collect()
    }
}

pub(crate) fn summarize(requests: &[RecordedRequest]) -> Vec<(Method, String, Option<u16>)> {
    requests.iter().map(|r| (r.method.clone(), r.path.clone(), r.code)).collect()
}

pub fn pod_path(name: &str) -> String {
    format!("/api/v1/namespaces/{NS}/pods/{name}")
}

pub fn status_path(name: &str) -> String {
    format!("/api/v1/namespaces/{NS}/pods/{name}/status")
}

/// A pod as the API server holds it: bound to [`NODE`], an image per container, 30 s grace.
pub fn bound(builder: PodBuilder) -> Arc<Pod> {
    let mut pod = (*builder.build()).clone();
    let spec = pod.spec.get_or_insert_with(Default::default);
    spec.node_name = Some(NODE.into());
    spec.termination_grace_period_seconds = Some(30);
    for c in spec.containers.iter_mut().chain(spec.init_containers.iter_mut().flatten()) {
        c.image = Some("registry.k8s.io/pause:3.10".into());
    }
    Arc::new(pod)
}

/// The same pod under another UID (deleted and created again under its name).
pub fn with_uid(pod: &Pod, uid: &str) -> Pod {
    let mut pod = pod.clone();
    pod.metadata.uid = Some(uid.into());
    pod
}

/// A running, started container with this readiness (container ID `cri://<name>`).
pub fn container(name: &str, ready: bool) -> ContainerStatus {
    ContainerStatus {
        ready,
        started: Some(true),
        image: "registry.k8s.io/pause:3.10".into(),
        image_id: String::new(),
        ..running(name, &format!("cri://{name}"), epoch())
    }
}

/// What the kubelet's pod sync generates: phase, pod IP, container statuses and the
/// kubelet's conditions (foreign conditions carried over from `pod.status`).
pub fn status_of(pod: &Pod, phase: &str, containers: Vec<ContainerStatus>) -> PodStatus {
    let mut status = PodStatus {
        phase: Some(phase.into()),
        pod_ip: Some(POD_IP.into()),
        pod_ips: Some(vec![PodIP { ip: POD_IP.into() }]),
        container_statuses: Some(containers),
        ..Default::default()
    };
    generate_kubelet_conditions(pod, &mut status);
    status
}

/// The kubelet-owned conditions as (type, status, reason, message), sorted by type.
pub fn owned_conditions(status: &PodStatus) -> Vec<(String, String, Option<String>, Option<String>)> {
    let mut out: Vec<_> = status
        .conditions
        .iter()
        .flatten()
        .filter(|c| is_kubelet_owned_condition(&c.type_))
        .map(|c| (c.type_.clone(), c.status.clone(), c.reason.clone(), c.message.clone()))
        .collect();
    out.sort();
    out
}

/// Container readiness as (name, ready), sorted by name.
pub fn readiness(status: &PodStatus) -> Vec<(String, bool)> {
    let mut out: Vec<_> =
        status.container_statuses.iter().flatten().map(|c| (c.name.clone(), c.ready)).collect();
    out.sort();
    out
}

/// The status of the condition `type_`, if present.
pub fn condition_status(status: &PodStatus, type_: &str) -> Option<String> {
    status.conditions.iter().flatten().find(|c| c.type_ == type_).map(|c| c.status.clone())
}
