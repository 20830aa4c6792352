//! Cluster mode: the agent probes the pods bound to one node, for nodes where nothing else
//! probes (virtual-kubelet nodes, custom runtimes, edge agents). Container states come from
//! the pod status the node's runtime publishes; the agent adds `started` / `ready` and the
//! Ready, ContainersReady and Initialized conditions, and writes them through the syncer.
//! Exec probes run through the API server's `pods/exec`; events are core/v1 Events, counted
//! like the kubelet's (what `kubectl describe pod` shows).

use std::collections::{HashMap, HashSet};
use std::path::PathBuf;
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex, RwLock};
use std::time::Duration;

use actix::prelude::*;
use futures::future::BoxFuture;
use k8s_openapi::api::core::v1::{Event as CoreEvent, EventSource, ObjectReference, Pod};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, Time};
use kube::api::{Api, AttachParams, DeleteParams, Patch, PatchParams, PostParams};
use kube::runtime::WatchStreamExt;
use kube::runtime::watcher::{self, Event as WatchEvent};
use probelet_actors::Pipeline;
use probelet_actors::container::ContainerId;
use probelet_actors::contracts::{
    CommandRunner, EventRecorder, EventType, ExecError, ExecOutput, MAX_EXEC_OUTPUT,
};
use probelet_actors::prober::{ProbeKind, ProbeResult};
use probelet_actors::results::ProbeResultChanged;
use probelet_actors::status::generate_kubelet_conditions;
use probelet_actors::sync::rate::RateLimiter;
use probelet_actors::sync::syncer::{
    ApiPodDeleted, ApiPodObserved, Flush, StatusSyncer, SyncerConfig, start_syncer,
};
use tokio::io::AsyncReadExt;

use crate::agent::{AgentError, Common, wait_for_signal};
use crate::cli::{LivenessAction, RunArgs};
use crate::host::events::EventLog;

/// The User-Agent of every request (kube sends none by default).
pub fn user_agent() -> String {
    format!("probelet/{}", env!("CARGO_PKG_VERSION"))
}

/// Builds the API client from a kubeconfig file, or the in-cluster configuration.
pub async fn client(kubeconfig: Option<PathBuf>) -> Result<kube::Client, AgentError> {
    let err = |e: &dyn std::fmt::Display| AgentError::Cluster(e.to_string());
    let mut config = match kubeconfig {
        Some(path) => {
            let kc = kube::config::Kubeconfig::read_from(&path)
                .map_err(|e| err(&format!("{}: {e}", path.display())))?;
            kube::Config::from_custom_kubeconfig(kc, &kube::config::KubeConfigOptions::default())
                .await
                .map_err(|e| err(&e))?
        }
        None => kube::Config::incluster().map_err(|e| err(&e))?,
    };
    if let Ok(value) = http::HeaderValue::from_str(&user_agent()) {
        config.headers.push((http::header::USER_AGENT, value));
    }
    kube::Client::try_from(config).map_err(|e| err(&e))
}

/// Cluster mode until SIGTERM; then stop probing and flush pending status writes.
pub async fn run_cluster(args: &RunArgs, kubeconfig: Option<PathBuf>) -> Result<(), AgentError> {
    let client = client(kubeconfig).await?;
    let common = Common::new()?;
    let limiter = RateLimiter::new(args.qps, args.burst);
    let exec = ExecRunner::new(client.clone(), limiter.clone());
    let recorder = CoreEventRecorder::new(
        client.clone(),
        limiter.clone(),
        args.node_name.clone(),
        common.events.clone(),
    );
    let pipeline = common.pipeline_with(Arc::new(exec.clone()), Arc::new(recorder));
    let mut config = SyncerConfig::new(
        client.clone(),
        Arc::new(common.pods.clone()),
        pipeline.status_manager.clone(),
        common.clock.clone(),
    );
    config.limiter = limiter.clone();
    let syncer = start_syncer(config);
    let (addr, stop_server, server) = common.serve(args.listen, pipeline.clone()).await?;
    println!(
        "probelet {}: cluster mode, node {}; http://{addr}/pods, /metrics",
        env!("CARGO_PKG_VERSION"),
        args.node_name
    );

    let host = ClusterHost {
        client: client.clone(),
        pipeline: pipeline.clone(),
        pods: common.pods.clone(),
        exec,
        syncer: syncer.clone(),
        limiter,
        liveness_action: args.liveness_action,
        ready: common.ready.clone(),
        known: HashSet::new(),
    };
    let watch = pod_watch(client, &args.node_name, args.pod_selector.as_deref());
    let host = ClusterHost::create(move |ctx| {
        ctx.add_stream(watch);
        host
    });
    pipeline.subscribe_results(host.clone().recipient());

    wait_for_signal().await;
    println!("probelet: shutting down, flushing status writes");
    for pod in common.pods.pods() {
        pipeline.remove_pod(pod);
    }
    let _ = tokio::time::timeout(Duration::from_secs(10), syncer.send(Flush)).await;
    let _ = stop_server.send(());
    let _ = server.await;
    Ok(())
}

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

// === the host actor ===

/// Feeds the engine from the watch and acts on probe results.
pub struct ClusterHost {
    pub client: kube::Client,
    pub pipeline: Pipeline,
    pub pods: probelet_actors::contracts::PodRegistry,
    pub exec: ExecRunner,
    pub syncer: Addr<StatusSyncer>,
    pub limiter: RateLimiter,
    pub liveness_action: LivenessAction,
    pub ready: Arc<std::sync::atomic::AtomicBool>,
    /// UIDs seen during the current initial list.
    pub known: HashSet<String>,
}

impl ClusterHost {
    fn apply(&mut self, pod: Pod, ctx: &mut Context<Self>) {
        let Some(uid) = pod.metadata.uid.clone() else { return };
        let pod = Arc::new(pod);
        self.syncer.do_send(ApiPodObserved(pod.clone()));
        self.pods.upsert(pod.clone());
        self.exec.learn(&pod);
        self.known.insert(uid);
        self.sync(pod, ctx);
    }

    fn delete(&mut self, pod: Pod) {
        let Some(uid) = pod.metadata.uid.clone() else { return };
        let pod = Arc::new(pod);
        self.pipeline.remove_pod(pod.clone());
        self.pods.remove(&uid);
        self.exec.forget(&pod);
        self.known.remove(&uid);
        self.syncer.do_send(ApiPodDeleted {
            namespace: pod.metadata.namespace.clone().unwrap_or_default(),
            name: pod.metadata.name.clone().unwrap_or_default(),
        });
        self.pipeline.remove_orphaned_statuses(
            self.pods.pods().iter().filter_map(|p| p.metadata.uid.clone()).collect(),
        );
    }

    /// The status half of the kubelet's `SyncPod`, with the runtime's container states taken
    /// from the API status.
    fn sync(&mut self, pod: Arc<Pod>, ctx: &mut Context<Self>) {
        let pipeline = self.pipeline.clone();
        let deleting = pod.metadata.deletion_timestamp.is_some();
        // Unlike the kubelet, which first syncs a pod before its containers run, the agent
        // meets pods whose containers already run: the workers must exist before the first
        // UpdatePodStatus, or a container with a readiness probe would be reported ready
        // before it was probed.
        if !deleting {
            self.pipeline.add_pod(pod.clone());
        }
        let fut = async move {
            let status = pod.status.clone().unwrap_or_default();
            let Ok(mut status) = pipeline.update_pod_status(pod.clone(), status).await else { return };
            generate_kubelet_conditions(&pod, &mut status);
            pipeline.set_pod_status(pod.clone(), status);
            if deleting {
                // Readiness goes on through termination; liveness and startup stop.
                pipeline.stop_liveness_and_startup(pod);
            }
        };
        ctx.spawn(fut.into_actor(self));
    }

    fn liveness_failed(&mut self, change: &ProbeResultChanged, ctx: &mut Context<Self>) {
        let Some(pod) =
            self.pods.pods().into_iter().find(|p| p.metadata.uid.as_deref() == Some(&change.pod_uid))
        else {
            return;
        };
        tracing::warn!(pod = pod.metadata.name.as_deref().unwrap_or_default(), container_id = %change.container_id, probe_kind = %change.kind, "Container failed its probe");
        if self.liveness_action != LivenessAction::DeletePod {
            return;
        }
        let api: Api<Pod> =
            Api::namespaced(self.client.clone(), pod.metadata.namespace.as_deref().unwrap_or("default"));
        let name = pod.metadata.name.clone().unwrap_or_default();
        let limiter = self.limiter.clone();
        let uid = change.pod_uid.clone();
        let fut = async move {
            limiter.acquire().await;
            let params = DeleteParams {
                preconditions: Some(kube::api::Preconditions { uid: Some(uid), resource_version: None }),
                ..Default::default()
            };
            if let Err(err) = api.delete(&name, &params).await {
                tracing::error!(pod = %name, error = %err, "Failed to delete the pod after its liveness probe failed");
            }
        };
        ctx.spawn(fut.into_actor(self));
    }
}

impl Actor for ClusterHost {
    type Context = Context<Self>;
}

impl StreamHandler<Result<WatchEvent<Pod>, watcher::Error>> for ClusterHost {
    fn handle(&mut self, event: Result<WatchEvent<Pod>, watcher::Error>, ctx: &mut Context<Self>) {
        match event {
            Ok(WatchEvent::Apply(pod) | WatchEvent::InitApply(pod)) => self.apply(pod, ctx),
            Ok(WatchEvent::Delete(pod)) => self.delete(pod),
            Ok(WatchEvent::Init) => self.known.clear(),
            Ok(WatchEvent::InitDone) => {
                // Pods gone while the watch was down: stop probing them.
                let gone: Vec<Arc<Pod>> = self
                    .pods
                    .pods()
                    .into_iter()
                    .filter(|p| p.metadata.uid.as_ref().is_some_and(|u| !self.known.contains(u)))
                    .collect();
                for pod in gone {
                    self.delete((*pod).clone());
                }
                self.pipeline.cleanup_pods(self.known.clone());
                self.ready.store(true, Ordering::SeqCst);
            }
            Err(err) => tracing::warn!(error = %err, "Pod watch failed; retrying with back-off"),
        }
    }

    fn finished(&mut self, _ctx: &mut Context<Self>) {
        // The watcher never ends on its own; if it does, keep the actor (and probing) alive.
        tracing::error!("Pod watch ended");
    }
}

impl Handler<ProbeResultChanged> for ClusterHost {
    type Result = ();

    fn handle(&mut self, msg: ProbeResultChanged, ctx: &mut Context<Self>) {
        if msg.result == ProbeResult::Failure && matches!(msg.kind, ProbeKind::Liveness | ProbeKind::Startup)
        {
            self.liveness_failed(&msg, ctx);
        }
        if msg.kind != ProbeKind::Liveness
            && let Some(pod) =
                self.pods.pods().into_iter().find(|p| p.metadata.uid.as_deref() == Some(&msg.pod_uid))
        {
            self.sync(pod, ctx);
        }
    }
}

// === exec probes through pods/exec ===

/// Namespace, pod name and container name.
type ContainerPlace = (String, String, String);

/// An event's identity for aggregation: object UID, field path, type, reason, message.
type EventKey = (String, String, String, String, String);

/// Runs exec probes through the API server's `pods/exec` (websocket).
#[derive(Clone)]
pub struct ExecRunner {
    client: kube::Client,
    limiter: RateLimiter,
    /// Which pod and container a container ID belongs to.
    containers: Arc<RwLock<HashMap<String, ContainerPlace>>>,
}

impl ExecRunner {
    pub fn new(client: kube::Client, limiter: RateLimiter) -> Self {
        ExecRunner { client, limiter, containers: Arc::default() }
    }

    /// Records the container IDs of a pod's status.
    pub fn learn(&self, pod: &Pod) {
        let (ns, name) = (
            pod.metadata.namespace.clone().unwrap_or_default(),
            pod.metadata.name.clone().unwrap_or_default(),
        );
        let Ok(mut map) = self.containers.write() else { return };
        let status = pod.status.clone().unwrap_or_default();
        for cs in
            status.container_statuses.iter().flatten().chain(status.init_container_statuses.iter().flatten())
        {
            if let Some(id) = cs.container_id.clone().filter(|id| !id.is_empty()) {
                map.insert(id, (ns.clone(), name.clone(), cs.name.clone()));
            }
        }
    }

    pub fn forget(&self, pod: &Pod) {
        let name = pod.metadata.name.clone().unwrap_or_default();
        let ns = pod.metadata.namespace.clone().unwrap_or_default();
        if let Ok(mut map) = self.containers.write() {
            map.retain(|_, (n, p, _)| !(n == &ns && p == &name));
        }
    }
}

impl CommandRunner for ExecRunner {
    fn run_in_container(
        &self,
        container_id: &ContainerId,
        cmd: &[String],
        timeout: Duration,
    ) -> BoxFuture<'static, Result<ExecOutput, ExecError>> {
        let target = self.containers.read().ok().and_then(|m| m.get(&container_id.to_string()).cloned());
        let (client, limiter, cmd, id) =
            (self.client.clone(), self.limiter.clone(), cmd.to_vec(), container_id.to_string());
        Box::pin(async move {
            let Some((namespace, pod, container)) = target else {
                return Err(ExecError::Runtime(format!("container {id} is not known to the agent")));
            };
            limiter.acquire().await;
            let api: Api<Pod> = Api::namespaced(client, &namespace);
            let params = AttachParams::default().container(container).stdout(true).stderr(true).stdin(false);
            let run = async {
                let mut process =
                    api.exec(&pod, cmd, &params).await.map_err(|e| ExecError::Runtime(e.to_string()))?;
                let mut output = Vec::new();
                let mut stdout = process.stdout();
                let mut stderr = process.stderr();
                let status = process.take_status();
                let mut buf = Vec::new();
                if let Some(out) = stdout.as_mut() {
                    let _ = out.read_to_end(&mut buf).await;
                    output.extend_from_slice(&buf);
                }
                buf.clear();
                if let Some(err) = stderr.as_mut() {
                    let _ = err.read_to_end(&mut buf).await;
                    output.extend_from_slice(&buf);
                }
                output.truncate(MAX_EXEC_OUTPUT);
                let status = match status {
                    Some(status) => status.await,
                    None => None,
                };
                Ok(ExecOutput { output, exit_code: exit_code(status.as_ref()) })
            };
            match tokio::time::timeout(timeout, run).await {
                Ok(result) => result,
                Err(_) => Err(ExecError::Timeout { output: Vec::new() }),
            }
        })
    }
}

/// The exit code of an exec from its final Status: 0 on Success, else the `ExitCode` cause.
fn exit_code(status: Option<&k8s_openapi::apimachinery::pkg::apis::meta::v1::Status>) -> i32 {
    let Some(status) = status else { return 0 };
    if status.status.as_deref() == Some("Success") {
        return 0;
    }
    status
        .details
        .as_ref()
        .and_then(|d| d.causes.as_ref())
        .and_then(|causes| causes.iter().find(|c| c.reason.as_deref() == Some("ExitCode")))
        .and_then(|c| c.message.as_deref())
        .and_then(|m| m.parse().ok())
        .unwrap_or(1)
}

// === events ===

/// Writes core/v1 Events like the kubelet's recorder: one Event per (object, type, reason,
/// message), its `count` and `lastTimestamp` bumped on repeats, so `kubectl describe pod`
/// shows `(x5 over 2m)`. (kube-rs's events.k8s.io Recorder groups by reason only and drops a
/// changed message, so it is not used.) Every event also goes to the local log.
#[derive(Clone)]
pub struct CoreEventRecorder {
    client: kube::Client,
    limiter: RateLimiter,
    node: String,
    local: EventLog,
    /// Event names already written, with their counts.
    written: Arc<Mutex<HashMap<EventKey, (String, i32)>>>,
}

impl CoreEventRecorder {
    pub fn new(client: kube::Client, limiter: RateLimiter, node: String, local: EventLog) -> Self {
        CoreEventRecorder { client, limiter, node, local, written: Arc::default() }
    }
}

impl EventRecorder for CoreEventRecorder {
    fn record(&self, object: &ObjectReference, event_type: EventType, reason: &str, message: &str) {
        self.local.record(object, event_type, reason, message);
        let namespace = object.namespace.clone().unwrap_or_else(|| "default".to_owned());
        let key = (
            object.uid.clone().unwrap_or_default(),
            object.field_path.clone().unwrap_or_default(),
            event_type.as_str().to_owned(),
            reason.to_owned(),
            message.to_owned(),
        );
        let previous = self.written.lock().ok().and_then(|mut w| {
            let entry = w.get_mut(&key)?;
            entry.1 += 1;
            Some(entry.clone())
        });
        let now = Time(k8s_openapi::jiff::Timestamp::now());
        let api: Api<CoreEvent> = Api::namespaced(self.client.clone(), &namespace);
        let limiter = self.limiter.clone();
        let written = self.written.clone();
        let event = CoreEvent {
            metadata: ObjectMeta {
                name: Some(format!(
                    "{}.{:x}",
                    object.name.as_deref().unwrap_or("pod"),
                    k8s_openapi::jiff::Timestamp::now().as_nanosecond()
                )),
                namespace: Some(namespace),
                ..Default::default()
            },
            involved_object: object.clone(),
            reason: Some(reason.to_owned()),
            message: Some(message.to_owned()),
            type_: Some(event_type.as_str().to_owned()),
            count: Some(1),
            first_timestamp: Some(now.clone()),
            last_timestamp: Some(now.clone()),
            source: Some(EventSource {
                component: Some("probelet".to_owned()),
                host: Some(self.node.clone()),
            }),
            reporting_component: Some("probelet".to_owned()),
            reporting_instance: Some(self.node.clone()),
            ..Default::default()
        };
        let Ok(runtime) = tokio::runtime::Handle::try_current() else { return };
        runtime.spawn(async move {
            limiter.acquire().await;
            let result = match previous {
                Some((name, count)) => {
                    let patch = serde_json::json!({ "count": count, "lastTimestamp": now });
                    api.patch(&name, &PatchParams::default(), &Patch::Merge(patch)).await.map(|_| ())
                }
                None => {
                    let name = event.metadata.name.clone().unwrap_or_default();
                    let created = api.create(&PostParams::default(), &event).await.map(|_| ());
                    if created.is_ok()
                        && let Ok(mut w) = written.lock()
                    {
                        w.insert(key, (name, 1));
                    }
                    created
                }
            };
            if let Err(err) = result {
                tracing::warn!(error = %err, "Failed to write an event");
            }
        });
    }
}
