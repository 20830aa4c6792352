//! Cluster mode: the agent probes the pods bound to one node, for nodes where nothing else
//! probes (virtual-kubelet nodes, custom runtimes, edge agents). Container states come from
//! the pod status the node's runtime publishes; the agent adds `started` / `ready` and the
//! Ready, ContainersReady and Initialized conditions, and writes them through the syncer.
//! Exec probes run through the API server's `pods/exec`; events are core/v1 Events, counted
//! like the kubelet's (what `kubectl describe pod` shows).

use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};
use std::hash::Hash;
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, RwLock};
use std::time::Duration;

use actix::prelude::*;
use futures::future::BoxFuture;
use k8s_openapi::api::core::v1::{Event as CoreEvent, EventSource, ObjectReference, Pod};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, Status, Time};
use kube::api::{Api, AttachParams, DeleteParams, Patch, PatchParams, PostParams};
use kube::runtime::WatchStreamExt;
use kube::runtime::watcher::{self, Event as WatchEvent};
use probelet_actors::Pipeline;
use probelet_actors::container::ContainerId;
use probelet_actors::contracts::{
    CommandRunner, EventRecorder, EventType, ExecError, ExecOutput, MAX_EXEC_OUTPUT, PodLookup,
};
use probelet_actors::gofmt::go_quote;
use probelet_actors::prober::{ProbeKind, ProbeResult};
use probelet_actors::results::ProbeResultChanged;
use probelet_actors::status::equality::ConditionOwnership;
use probelet_actors::status::generate::{PHASE_FAILED, PHASE_SUCCEEDED};
use probelet_actors::status::generate_kubelet_conditions;
use probelet_actors::status::{CONTAINERS_READY, POD_INITIALIZED, POD_READY};
use probelet_actors::sync::api_pod::ApiPod;
use probelet_actors::sync::rate::RateLimiter;
use probelet_actors::sync::syncer::{
    ApiPodDeleted, ApiPodObserved, Flush, OwnedFields, StatusSyncer, SyncerConfig, start_syncer,
};
use tokio::io::AsyncReadExt;
use tokio::sync::mpsc;
use tokio::time::Instant;

use crate::agent::{AgentError, Common, wait_for_signal};
use crate::cli::{LivenessAction, RunArgs};
use crate::host::events::EventLog;
use crate::host::history::ProbeHistory;
use crate::host::phase::kill_grace_period;

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
    let mut common = Common::new()?;
    common.probe_host_policy = args.probe_host_policy.into();
    let limiter = RateLimiter::new(args.qps, args.burst);
    let exec = ExecRunner::new(client.clone(), limiter.clone());
    let recorder = CoreEventRecorder::new(
        client.clone(),
        RateLimiter::new(EVENT_QPS, EVENT_BURST),
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
    // The node's runtime owns phase, IPs and container states; the agent writes only
    // readiness: ready/started and the conditions it generates from them.
    config.owned_fields = OwnedFields::ReadinessOnly;
    config.ownership =
        ConditionOwnership::new([POD_READY, CONTAINERS_READY, POD_INITIALIZED], Vec::<String>::new());
    let syncer = start_syncer(config);
    let (addr, stop_server, server) = common.serve(args, pipeline.clone(), Some(client.clone())).await?;
    println!(
        "probelet {}: cluster mode, node {}; http://{addr}/pods, /metrics",
        env!("CARGO_PKG_VERSION"),
        args.node_name
    );

    let host = ClusterHost {
        client: client.clone(),
        pipeline: pipeline.clone(),
        pods: common.pods.clone(),
        history: common.history.clone(),
        exec,
        syncer: syncer.clone(),
        limiter,
        liveness_action: args.liveness_action,
        ready: common.ready.clone(),
        known: HashSet::new(),
        deleting: HashSet::new(),
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

/// The node's pods, as watcher events (with kube's default back-off, CRATES.md trap 13), each
/// pod with the server's JSON kept for the syncer's merge base.
pub fn pod_watch(
    client: kube::Client,
    node_name: &str,
    selector: Option<&str>,
) -> impl futures::Stream<Item = Result<WatchEvent<ApiPod>, watcher::Error>> + 'static {
    let mut config = watcher::Config::default().fields(&format!("spec.nodeName={node_name}"));
    if let Some(selector) = selector {
        config = config.labels(selector);
    }
    watcher::watcher(Api::<ApiPod>::all(client), config).default_backoff()
}

// === the host actor ===

/// Feeds the engine from the watch and acts on probe results.
pub struct ClusterHost {
    pub client: kube::Client,
    pub pipeline: Pipeline,
    pub pods: probelet_actors::contracts::PodRegistry,
    /// The probe history `/probes` serves; a deleted pod's runs are forgotten.
    pub history: ProbeHistory,
    pub exec: ExecRunner,
    pub syncer: Addr<StatusSyncer>,
    pub limiter: RateLimiter,
    pub liveness_action: LivenessAction,
    pub ready: Arc<std::sync::atomic::AtomicBool>,
    /// UIDs seen during the current initial list.
    pub known: HashSet<String>,
    /// UIDs of pods a liveness DELETE is in flight or backing off for (one retry loop per pod),
    /// or has deleted: kept until the watch reports the pod gone.
    pub deleting: HashSet<String>,
}

impl ClusterHost {
    fn apply(&mut self, observed: ApiPod, ctx: &mut Context<Self>) {
        let Some(uid) = observed.pod.metadata.uid.clone() else { return };
        let pod = Arc::new(observed.pod.clone());
        self.syncer.do_send(ApiPodObserved(Arc::new(observed)));
        self.pods.upsert(pod.clone());
        self.exec.learn(&pod);
        self.known.insert(uid);
        self.sync(pod, ctx);
    }

    fn delete(&mut self, pod: Pod) {
        let Some(uid) = pod.metadata.uid.clone() else { return };
        let pod = Arc::new(pod);
        self.pipeline.remove_pod(pod.clone());
        // The registry first: the history drops runs of pods the registry no longer knows.
        self.pods.remove(&uid);
        self.history.remove_pod(&uid);
        self.exec.forget(&pod);
        self.known.remove(&uid);
        self.deleting.remove(&uid);
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
        let Some(uid) = pod.metadata.uid.clone() else { return };
        let deleting = pod.metadata.deletion_timestamp.is_some();
        if is_terminal(&pod) {
            // The kubelet never runs SyncPod for a finished pod: workers added here would stop
            // at their first probe. Stop any left from before the pod finished.
            self.pipeline.remove_pod(pod.clone());
        } else if !deleting {
            // Unlike the kubelet, which first syncs a pod before its containers run, the agent
            // meets pods whose containers already run: the workers must exist before the first
            // UpdatePodStatus, or a container with a readiness probe would be reported ready
            // before it was probed.
            self.pipeline.add_pod(pod.clone());
        }
        let pipeline = self.pipeline.clone();
        let fut = {
            let pod = pod.clone();
            async move {
                let status = pod.status.clone().unwrap_or_default();
                pipeline.update_pod_status(pod, status).await.ok()
            }
        };
        ctx.spawn(fut.into_actor(self).map(move |status, act, _ctx| {
            let Some(mut status) = status else { return };
            // Deleted while the status was computed: a write now would re-create the status the
            // delete just removed, and the syncer would then GET the gone pod every reconcile.
            if act.pods.pod_by_uid(&uid).is_none() {
                return;
            }
            generate_kubelet_conditions(&pod, &mut status);
            act.pipeline.set_pod_status(pod.clone(), status);
            if deleting {
                // Readiness goes on through termination; liveness and startup stop.
                act.pipeline.stop_liveness_and_startup(pod);
            }
        }));
    }

    /// A liveness or startup probe failed: with `--liveness-action delete-pod`, delete the pod
    /// as the kubelet would kill the container (`computePodActions`) — only when that container
    /// runs. Every worker writes Failure for a container that is not running, so a container
    /// that merely exited or has not started yet must not cost the pod.
    fn liveness_failed(&mut self, change: &ProbeResultChanged, ctx: &mut Context<Self>) {
        let Some(pod) = self.pods.pod_by_uid(&change.pod_uid) else { return };
        let pod_name = pod.metadata.name.clone().unwrap_or_default();
        let Some(container) = running_container(&pod, &change.container_id) else {
            tracing::debug!(pod = %pod_name, container_id = %change.container_id, probe_kind = %change.kind, "Probe failure of a container that is not running; nothing to kill");
            return;
        };
        tracing::warn!(pod = %pod_name, container = %container, container_id = %change.container_id, probe_kind = %change.kind, "Container failed its probe");
        if self.liveness_action != LivenessAction::DeletePod || pod.metadata.deletion_timestamp.is_some() {
            return;
        }
        let uid = change.pod_uid.clone();
        if !self.deleting.insert(uid.clone()) {
            return;
        }
        let grace = kill_grace_period(&pod, &container, Some(change.kind));
        let params = DeleteParams {
            grace_period_seconds: Some(u32::try_from(grace.as_secs()).unwrap_or(u32::MAX)),
            preconditions: Some(kube::api::Preconditions { uid: Some(uid.clone()), resource_version: None }),
            ..Default::default()
        };
        let api: Api<Pod> =
            Api::namespaced(self.client.clone(), pod.metadata.namespace.as_deref().unwrap_or("default"));
        let (limiter, pods, container_id) =
            (self.limiter.clone(), self.pods.clone(), change.container_id.clone());
        // The kubelet re-reads the liveness result on every pod sync and kills again until the
        // container is gone; the worker here is on hold after its Failure and reports nothing
        // new, so a failed DELETE must be retried here or never.
        // Resolves to whether the pod is gone or being deleted.
        let fut = async move {
            let mut backoff = DELETE_BACKOFF_INITIAL;
            loop {
                limiter.acquire().await;
                let err = match tokio::time::timeout(DELETE_TIMEOUT, api.delete(&pod_name, &params)).await {
                    Ok(Ok(_)) => return true,
                    Ok(Err(err)) => match delete_failure(&err) {
                        DeleteFailure::Settled => {
                            tracing::debug!(pod = %pod_name, error = %err, "Pod already gone or replaced; nothing to delete");
                            return true;
                        }
                        DeleteFailure::Permanent => {
                            tracing::error!(pod = %pod_name, error = %err, "Failed to delete the pod after its liveness probe failed");
                            return false;
                        }
                        DeleteFailure::Transient => err.to_string(),
                    },
                    Err(_) => format!("no answer within {}s", DELETE_TIMEOUT.as_secs()),
                };
                tracing::warn!(pod = %pod_name, error = %err, retry_in = ?backoff, "Failed to delete the pod after its liveness probe failed; retrying");
                tokio::time::sleep(backoff).await;
                backoff = (backoff * 2).min(DELETE_BACKOFF_MAX);
                // The watch shows what the failed attempt cannot: the pod is gone, someone else
                // is deleting it, or the failed container is no longer the one running.
                let Some(current) = pods.pod_by_uid(&uid) else { return true };
                if current.metadata.deletion_timestamp.is_some() {
                    return true;
                }
                if running_container(&current, &container_id).is_none() {
                    return false;
                }
            }
        };
        let uid = change.pod_uid.clone();
        ctx.spawn(fut.into_actor(self).map(move |going, act, _ctx| {
            // A pod on its way out needs no second DELETE for another container's failure
            // before the watch catches up; otherwise a later failure may try again.
            if !going {
                act.deleting.remove(&uid);
            }
        }));
    }
}

/// The first wait after a failed liveness DELETE; it doubles up to [`DELETE_BACKOFF_MAX`].
const DELETE_BACKOFF_INITIAL: Duration = Duration::from_secs(1);
const DELETE_BACKOFF_MAX: Duration = Duration::from_secs(30);
/// One DELETE attempt's bound (kube's own read timeout is 295 s).
const DELETE_TIMEOUT: Duration = Duration::from_secs(30);

/// What a failed liveness DELETE means for the retry loop.
#[derive(Debug, PartialEq, Eq)]
enum DeleteFailure {
    /// 404: the pod is gone; 409: its UID precondition failed, so this pod is gone too.
    Settled,
    /// 429, 5xx, or no HTTP answer at all (connection, TLS, timeout): try again.
    Transient,
    /// Any other answer (400, 403, 422…): the same request would fail the same way.
    Permanent,
}

fn delete_failure(err: &kube::Error) -> DeleteFailure {
    match err {
        kube::Error::Api(status) => match status.code {
            404 | 409 => DeleteFailure::Settled,
            429 | 500..=599 => DeleteFailure::Transient,
            _ => DeleteFailure::Permanent,
        },
        _ => DeleteFailure::Transient,
    }
}

/// Whether the pod's phase is Succeeded or Failed.
fn is_terminal(pod: &Pod) -> bool {
    matches!(pod.status.as_ref().and_then(|s| s.phase.as_deref()), Some(PHASE_SUCCEEDED | PHASE_FAILED))
}

/// The name of the container with this ID, if the pod's status shows it running.
fn running_container(pod: &Pod, id: &ContainerId) -> Option<String> {
    let id = id.to_string();
    let status = pod.status.as_ref()?;
    status
        .container_statuses
        .iter()
        .flatten()
        .chain(status.init_container_statuses.iter().flatten())
        .find(|c| {
            c.container_id.as_deref() == Some(id.as_str())
                && c.state.as_ref().is_some_and(|s| s.running.is_some())
        })
        .map(|c| c.name.clone())
}

impl Actor for ClusterHost {
    type Context = Context<Self>;
}

impl StreamHandler<Result<WatchEvent<ApiPod>, watcher::Error>> for ClusterHost {
    fn handle(&mut self, event: Result<WatchEvent<ApiPod>, watcher::Error>, ctx: &mut Context<Self>) {
        match event {
            Ok(WatchEvent::Apply(pod) | WatchEvent::InitApply(pod)) => self.apply(pod, ctx),
            Ok(WatchEvent::Delete(pod)) => self.delete(pod.pod),
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
            && let Some(pod) = self.pods.pod_by_uid(&msg.pod_uid)
        {
            self.sync(pod, ctx);
        }
    }
}

#[cfg(test)]
mod host_tests {
    use super::*;
    use k8s_openapi::api::core::v1::{
        ContainerState, ContainerStateRunning, ContainerStateTerminated, ContainerStateWaiting,
        ContainerStatus, PodStatus,
    };

    fn status(name: &str, id: &str, state: ContainerState) -> ContainerStatus {
        ContainerStatus {
            name: name.into(),
            container_id: Some(id.into()),
            state: Some(state),
            ..Default::default()
        }
    }

    fn pod(phase: &str) -> Pod {
        let running =
            ContainerState { running: Some(ContainerStateRunning::default()), ..Default::default() };
        let waiting =
            ContainerState { waiting: Some(ContainerStateWaiting::default()), ..Default::default() };
        let exited = ContainerState {
            terminated: Some(ContainerStateTerminated { exit_code: 1, ..Default::default() }),
            ..Default::default()
        };
        Pod {
            status: Some(PodStatus {
                phase: Some(phase.into()),
                container_statuses: Some(vec![
                    status("app", "containerd://app", running.clone()),
                    status("waiting", "containerd://waiting", waiting),
                    status("exited", "containerd://exited", exited),
                ]),
                init_container_statuses: Some(vec![status("sidecar", "containerd://sidecar", running)]),
                ..Default::default()
            }),
            ..Default::default()
        }
    }

    #[test]
    fn only_running_containers_are_killed() {
        let pod = pod("Running");
        let cases = [
            ("containerd://app", Some("app")),
            ("containerd://sidecar", Some("sidecar")),
            ("containerd://waiting", None),
            ("containerd://exited", None),
            ("containerd://restarted", None),
        ];
        for (id, want) in cases {
            let got = running_container(&pod, &ContainerId::parse(id));
            assert_eq!(got.as_deref(), want, "{id}");
        }
        assert_eq!(running_container(&Pod::default(), &ContainerId::parse("containerd://app")), None);
    }

    #[test]
    fn failed_deletes_are_retried_only_when_transient() {
        let api = |code: u16| kube::Error::Api(kube::core::Status::failure("x", "y").with_code(code).boxed());
        for (code, want) in [
            (404, DeleteFailure::Settled),
            (409, DeleteFailure::Settled),
            (429, DeleteFailure::Transient),
            (500, DeleteFailure::Transient),
            (503, DeleteFailure::Transient),
            (504, DeleteFailure::Transient),
            (400, DeleteFailure::Permanent),
            (403, DeleteFailure::Permanent),
            (422, DeleteFailure::Permanent),
        ] {
            assert_eq!(delete_failure(&api(code)), want, "{code}");
        }
        let io = std::io::Error::new(std::io::ErrorKind::ConnectionReset, "reset");
        assert_eq!(delete_failure(&kube::Error::Service(Box::new(io))), DeleteFailure::Transient);
    }

    #[test]
    fn terminal_phases() {
        for (phase, want) in [("Succeeded", true), ("Failed", true), ("Running", false), ("Pending", false)] {
            assert_eq!(is_terminal(&pod(phase)), want, "{phase}");
        }
        assert!(!is_terminal(&Pod::default()));
    }
}

// === exec probes through pods/exec ===

/// Namespace, pod name and container name.
type ContainerPlace = (String, String, String);

/// Runs exec probes through the API server's `pods/exec` (websocket, kube's `v5`/`v4`
/// channel protocols). The kubelet runs them with the CRI's `ExecSync`, which hands back
/// stdout, stderr and the exit code; here the same come from the stream's channels and its
/// final `Status`.
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

    /// Records the container IDs of a pod's status, replacing what an earlier status said (a
    /// restarted container's old ID would otherwise stay for the pod's lifetime).
    pub fn learn(&self, pod: &Pod) {
        let (ns, name) = (
            pod.metadata.namespace.clone().unwrap_or_default(),
            pod.metadata.name.clone().unwrap_or_default(),
        );
        let Ok(mut map) = self.containers.write() else { return };
        map.retain(|_, (n, p, _)| !(n == &ns && p == &name));
        let Some(status) = pod.status.as_ref() else { return };
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
                return Err(ExecError::Runtime(format!(
                    "container {id} is not in the status of any pod the agent watches"
                )));
            };
            limiter.acquire().await;
            let api: Api<Pod> = Api::namespaced(client, &namespace);
            let params =
                AttachParams::default().container(container.clone()).stdout(true).stderr(true).stdin(false);
            let (mut stdout, mut stderr) = (Capture::default(), Capture::default());
            let run = exec_stream(&api, &pod, cmd, &params, &mut stdout, &mut stderr);
            let result = tokio::time::timeout(timeout, run).await;
            // Upstream `RunInContainer`: stdout, then stderr, then the prober's 10 KiB cap.
            let mut output = stdout.bytes;
            output.extend_from_slice(&stderr.bytes);
            output.truncate(MAX_EXEC_OUTPUT);
            let failed = |why: String| {
                ExecError::Runtime(format!(
                    "exec in container {container} of pod {namespace}/{pod} failed: {why}"
                ))
            };
            match result {
                Err(_) => Err(ExecError::Timeout { output }),
                Ok(Err(why)) => Err(failed(why)),
                Ok(Ok(status)) => match exit_code(&status) {
                    Ok(exit_code) => Ok(ExecOutput { output, exit_code }),
                    Err(why) => Err(failed(why)),
                },
            }
        })
    }
}

/// Up to [`MAX_EXEC_OUTPUT`] bytes of one stream; the rest is read and dropped, so a chatty
/// command neither grows memory nor stalls the stream.
#[derive(Default)]
struct Capture {
    bytes: Vec<u8>,
}

impl Capture {
    fn push(&mut self, data: &[u8]) {
        let room = MAX_EXEC_OUTPUT.saturating_sub(self.bytes.len());
        self.bytes.extend_from_slice(&data[..data.len().min(room)]);
    }
}

async fn drain(reader: Option<&mut (impl tokio::io::AsyncRead + Unpin)>, capture: &mut Capture) {
    let Some(reader) = reader else { return };
    let mut chunk = vec![0u8; 8 * 1024];
    while let Ok(n) = reader.read(&mut chunk).await {
        if n == 0 {
            break;
        }
        capture.push(&chunk[..n]);
    }
}

/// Opens the exec stream, reads stdout and stderr into the captures (they keep what came
/// before a timeout) and returns the final `Status`.
async fn exec_stream(
    api: &Api<Pod>,
    pod: &str,
    cmd: Vec<String>,
    params: &AttachParams,
    stdout: &mut Capture,
    stderr: &mut Capture,
) -> Result<Status, String> {
    let mut process = api.exec(pod, cmd, params).await.map_err(|e| connect_error(&e))?;
    let Some(status) = process.take_status() else {
        return Err("the exec stream has no status channel".to_owned());
    };
    let (mut out, mut err) = (process.stdout(), process.stderr());
    let status = {
        // Both streams at once: kube's buffers hold 1 KiB each, and a stream left unread
        // stalls the other. A stream only ends once the status came or the connection
        // ended; the latter may leave the pipes open, so the status future decides.
        let drained = async {
            tokio::join!(drain(out.as_mut(), stdout), drain(err.as_mut(), stderr));
        };
        tokio::pin!(drained, status);
        tokio::select! {
            () = &mut drained => status.await,
            status = &mut status => match status {
                Some(status) => {
                    drained.await;
                    Some(status)
                }
                None => None,
            },
        }
    };
    match status {
        Some(status) => Ok(status),
        None => Err(match process.join().await {
            Err(e) => e.to_string(),
            Ok(()) => "the stream ended without the command's exit status".to_owned(),
        }),
    }
}

/// An API error's message (`pods "web" not found`) rather than kube's debug dump of it.
fn connect_error(err: &kube::Error) -> String {
    match err {
        kube::Error::Api(status) if !status.message.is_empty() => status.message.clone(),
        kube::Error::Api(status) => match http::StatusCode::from_u16(status.code) {
            Ok(code) => format!("the API server answered {code}"),
            Err(_) => format!("the API server answered {}", status.code),
        },
        other => other.to_string(),
    }
}

/// The command's exit code from the stream's final `Status`, decoded as client-go's
/// `errorDecoderV4` does (its error texts too): `Success` is 0, a `NonZeroExitCode` failure
/// carries the code in its `ExitCode` cause, and any other failure means the command did not
/// run (the runtime's message).
fn exit_code(status: &Status) -> Result<i32, String> {
    match status.status.as_deref() {
        Some("Success") => Ok(0),
        Some("Failure") if status.reason.as_deref() == Some("NonZeroExitCode") => {
            let Some(details) = &status.details else {
                return Err("error stream protocol error: details must be set".to_owned());
            };
            let cause = details
                .causes
                .iter()
                .flatten()
                .find(|c| c.reason.as_deref() == Some("ExitCode"))
                .ok_or_else(|| "error stream protocol error: no ExitCode cause given".to_owned())?;
            let message = cause.message.as_deref().unwrap_or_default();
            message
                .bytes()
                .all(|b| b.is_ascii_digit())
                .then(|| message.parse::<u8>().ok())
                .flatten()
                .map(i32::from)
                .ok_or_else(|| {
                    format!("error stream protocol error: invalid exit code value {}", go_quote(message))
                })
        }
        Some("Failure") => Err(match status.message.as_deref() {
            Some(m) if !m.is_empty() => m.to_owned(),
            _ => status.reason.clone().unwrap_or_else(|| "unknown error".to_owned()),
        }),
        _ => Err("error stream protocol error: unknown error".to_owned()),
    }
}

#[cfg(test)]
mod exec_tests {
    use super::*;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::{StatusCause, StatusDetails};

    fn failure(reason: &str, causes: Option<Vec<(&str, &str)>>, message: &str) -> Status {
        Status {
            status: Some("Failure".into()),
            reason: Some(reason.into()),
            message: Some(message.into()),
            details: causes.map(|cs| StatusDetails {
                causes: Some(
                    cs.into_iter()
                        .map(|(r, m)| StatusCause {
                            reason: Some(r.into()),
                            message: Some(m.into()),
                            ..Default::default()
                        })
                        .collect(),
                ),
                ..Default::default()
            }),
            ..Default::default()
        }
    }

    #[test]
    fn exit_codes_from_status() {
        let success = Status { status: Some("Success".into()), ..Default::default() };
        assert_eq!(exit_code(&success), Ok(0));
        let cases: &[(Status, Result<i32, &str>)] = &[
            (failure("NonZeroExitCode", Some(vec![("ExitCode", "3")]), ""), Ok(3)),
            (failure("NonZeroExitCode", Some(vec![("Other", "9"), ("ExitCode", "255")]), ""), Ok(255)),
            (
                failure("NonZeroExitCode", Some(vec![("ExitCode", "256")]), ""),
                Err("error stream protocol error: invalid exit code value \"256\""),
            ),
            (
                failure("NonZeroExitCode", Some(vec![("ExitCode", "+1")]), ""),
                Err("error stream protocol error: invalid exit code value \"+1\""),
            ),
            (
                failure("NonZeroExitCode", Some(vec![]), ""),
                Err("error stream protocol error: no ExitCode cause given"),
            ),
            (failure("NonZeroExitCode", None, ""), Err("error stream protocol error: details must be set")),
            (
                failure("InternalError", None, "Internal error occurred: no such file"),
                Err("Internal error occurred: no such file"),
            ),
            (failure("InternalError", None, ""), Err("InternalError")),
            (Status::default(), Err("error stream protocol error: unknown error")),
        ];
        for (status, want) in cases {
            assert_eq!(exit_code(status), want.map_err(str::to_owned), "{status:?}");
        }
    }

    #[test]
    fn capture_keeps_the_first_bytes() {
        let mut c = Capture::default();
        c.push(&[b'a'; 6000]);
        c.push(&[b'b'; 6000]);
        c.push(b"c");
        assert_eq!(c.bytes.len(), MAX_EXEC_OUTPUT);
        assert_eq!(c.bytes[MAX_EXEC_OUTPUT - 1], b'b');
    }
}

// === events ===

/// Keys the correlator keeps, per cache (client-go's `maxLruCacheEntries`).
pub const EVENT_CACHE_SIZE: usize = 4096;
/// Events a source may send about one object at once (client-go's `defaultSpamBurst`).
pub const SPAM_BURST: u32 = 25;
/// One more event about an object is allowed per this period (`defaultSpamQPS` = 1/300).
pub const SPAM_REFILL_PERIOD: Duration = Duration::from_secs(300);
/// Distinct messages of one reason about one object before they are combined
/// (`defaultAggregateMaxEvents`).
pub const AGGREGATE_MAX_EVENTS: usize = 10;
/// How long a group of similar events stays open (`defaultAggregateIntervalInSeconds`).
pub const AGGREGATE_INTERVAL: Duration = Duration::from_secs(600);
/// The message prefix of a combined event (`EventAggregatorByReasonMessageFunc`).
pub const AGGREGATE_MESSAGE_PREFIX: &str = "(combined from similar events): ";
/// Event writes waiting for the API server; more are dropped (the broadcaster's
/// `maxQueuedEvents`).
pub const MAX_PENDING_EVENTS: usize = 1000;
/// The event client's own budget: the kubelet's `--event-qps` and `--event-burst` defaults.
/// Separate from the status budget, so a burst of probe failures never delays status writes.
pub const EVENT_QPS: f64 = 50.0;
pub const EVENT_BURST: u32 = 100;

/// The object an event is about, as client-go's spam key names it.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
struct ObjectKey {
    kind: String,
    namespace: String,
    name: String,
    uid: String,
    api_version: String,
}

impl ObjectKey {
    fn of(object: &ObjectReference) -> Self {
        let s = |v: &Option<String>| v.clone().unwrap_or_default();
        ObjectKey {
            kind: s(&object.kind),
            namespace: s(&object.namespace),
            name: s(&object.name),
            uid: s(&object.uid),
            api_version: s(&object.api_version),
        }
    }
}

/// Events that differ only in their message: object, type and reason
/// (`EventAggregatorByReasonFunc`; the source is the same for every event of this agent).
type AggregateKey = (ObjectKey, String, String);

/// What the correlator counts occurrences under.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
enum CountKey {
    /// One event: object, field path, type, reason, message (`getEventKey`).
    Event(ObjectKey, String, String, String, String),
    /// The combined event of an aggregate group.
    Aggregate(AggregateKey),
}

/// A map that forgets its least recently used entry beyond `capacity` (groupcache's
/// `lru.Cache`, which client-go's correlator uses).
struct Lru<K, V> {
    capacity: usize,
    entries: HashMap<K, (V, u64)>,
    /// Last use → key; the first entry is the least recently used.
    order: BTreeMap<u64, K>,
    tick: u64,
}

impl<K: Clone + Eq + Hash, V> Lru<K, V> {
    fn new(capacity: usize) -> Self {
        Lru { capacity: capacity.max(1), entries: HashMap::new(), order: BTreeMap::new(), tick: 0 }
    }

    /// The value, marked most recently used.
    fn get_mut(&mut self, key: &K) -> Option<&mut V> {
        self.tick += 1;
        let (value, used) = self.entries.get_mut(key)?;
        self.order.remove(used);
        *used = self.tick;
        self.order.insert(self.tick, key.clone());
        Some(value)
    }

    /// Adds or replaces an entry as the most recently used, forgetting the least recently
    /// used one when full.
    fn insert(&mut self, key: K, value: V) {
        self.tick += 1;
        if let Some((_, used)) = self.entries.insert(key.clone(), (value, self.tick)) {
            self.order.remove(&used);
        }
        self.order.insert(self.tick, key);
        while self.entries.len() > self.capacity {
            let Some((_, oldest)) = self.order.pop_first() else { break };
            self.entries.remove(&oldest);
        }
    }

    #[cfg(test)]
    fn len(&self) -> usize {
        self.entries.len()
    }
}

/// A token bucket that refuses rather than waits (client-go's `TryAccept`): [`SPAM_BURST`]
/// tokens, one more per [`SPAM_REFILL_PERIOD`].
struct SpamBucket {
    tokens: f64,
    last: Instant,
}

impl SpamBucket {
    fn full(now: Instant) -> Self {
        SpamBucket { tokens: f64::from(SPAM_BURST), last: now }
    }

    fn try_accept(&mut self, now: Instant) -> bool {
        let elapsed = now.saturating_duration_since(self.last).as_secs_f64();
        self.tokens = (self.tokens + elapsed / SPAM_REFILL_PERIOD.as_secs_f64()).min(f64::from(SPAM_BURST));
        self.last = now.max(self.last);
        if self.tokens >= 1.0 {
            self.tokens -= 1.0;
            true
        } else {
            false
        }
    }
}

/// The messages seen of one aggregate group.
struct AggregateRecord {
    messages: BTreeSet<String>,
    last: Instant,
}

/// What was written (or is being written) for one count key.
#[derive(Clone)]
struct Observation {
    name: String,
    count: i32,
    first_timestamp: Time,
}

/// One event to write, after correlation.
#[derive(Debug, Clone, PartialEq)]
pub struct CorrelatedEvent {
    /// The Event's name: new, or that of the Event the earlier occurrences went to.
    pub name: String,
    pub message: String,
    pub count: i32,
    pub first_timestamp: Time,
    /// A repeat: patch `count`, `lastTimestamp` and `message` of the existing Event (and create
    /// it again if it is gone).
    pub update_existing: bool,
}

/// client-go's `EventCorrelator`: combines similar events, counts repeats into one Event and
/// drops events about an object beyond its spam budget. Every cache is an LRU of
/// [`EVENT_CACHE_SIZE`] keys, so memory stays bounded however many pods come and go.
pub struct EventCorrelator {
    aggregates: Lru<AggregateKey, AggregateRecord>,
    counts: Lru<CountKey, Observation>,
    spam: Lru<ObjectKey, SpamBucket>,
}

impl Default for EventCorrelator {
    fn default() -> Self {
        EventCorrelator {
            aggregates: Lru::new(EVENT_CACHE_SIZE),
            counts: Lru::new(EVENT_CACHE_SIZE),
            spam: Lru::new(EVENT_CACHE_SIZE),
        }
    }
}

impl EventCorrelator {
    /// `EventCorrelate`: aggregate, count, then filter. The count is kept even for a dropped
    /// occurrence, so the next one written carries the true total. `None`: drop this one.
    pub fn correlate(
        &mut self,
        object: &ObjectReference,
        event_type: &str,
        reason: &str,
        message: &str,
        now: Instant,
        now_time: &Time,
    ) -> Option<CorrelatedEvent> {
        let object_key = ObjectKey::of(object);
        let (message, key) = self.aggregate(object, &object_key, event_type, reason, message, now);
        let fresh_name =
            format!("{}.{:x}", object.name.as_deref().unwrap_or_default(), now_time.0.as_nanosecond());
        let event = match self.counts.get_mut(&key) {
            Some(seen) => {
                seen.count = seen.count.saturating_add(1);
                CorrelatedEvent {
                    name: seen.name.clone(),
                    message,
                    count: seen.count,
                    first_timestamp: seen.first_timestamp.clone(),
                    update_existing: true,
                }
            }
            None => {
                let observation =
                    Observation { name: fresh_name, count: 1, first_timestamp: now_time.clone() };
                let event = CorrelatedEvent {
                    name: observation.name.clone(),
                    message,
                    count: 1,
                    first_timestamp: now_time.clone(),
                    update_existing: false,
                };
                self.counts.insert(key, observation);
                event
            }
        };
        let accepted = match self.spam.get_mut(&object_key) {
            Some(bucket) => bucket.try_accept(now),
            None => {
                let mut bucket = SpamBucket::full(now);
                let accepted = bucket.try_accept(now);
                self.spam.insert(object_key, bucket);
                accepted
            }
        };
        accepted.then_some(event)
    }

    /// `EventAggregate`: the message and count key, combined once [`AGGREGATE_MAX_EVENTS`]
    /// distinct messages of one reason came within [`AGGREGATE_INTERVAL`] of each other.
    fn aggregate(
        &mut self,
        object: &ObjectReference,
        object_key: &ObjectKey,
        event_type: &str,
        reason: &str,
        message: &str,
        now: Instant,
    ) -> (String, CountKey) {
        let group: AggregateKey = (object_key.clone(), event_type.to_owned(), reason.to_owned());
        let event_key = CountKey::Event(
            object_key.clone(),
            object.field_path.clone().unwrap_or_default(),
            event_type.to_owned(),
            reason.to_owned(),
            message.to_owned(),
        );
        // A group quiet for longer than the interval starts over.
        let mut messages = match self.aggregates.get_mut(&group) {
            Some(record) if now.saturating_duration_since(record.last) <= AGGREGATE_INTERVAL => {
                std::mem::take(&mut record.messages)
            }
            _ => BTreeSet::new(),
        };
        messages.insert(message.to_owned());
        let combine = messages.len() >= AGGREGATE_MAX_EVENTS;
        if combine {
            // Keep the set below the limit, so every further new message is combined too.
            messages.pop_first();
        }
        self.aggregates.insert(group.clone(), AggregateRecord { messages, last: now });
        if combine {
            (format!("{AGGREGATE_MESSAGE_PREFIX}{message}"), CountKey::Aggregate(group))
        } else {
            (message.to_owned(), event_key)
        }
    }
}

/// An Event write waiting for the writer task.
struct PendingEvent {
    event: CoreEvent,
    update_existing: bool,
}

/// Writes core/v1 Events like the kubelet's recorder (client-go `tools/record`): one Event per
/// (object, type, reason, message), its `count` and `lastTimestamp` bumped on repeats, so
/// `kubectl describe pod` shows `(x5 over 2m)`; similar events combined and spam dropped by
/// the [`EventCorrelator`]. (kube-rs's events.k8s.io Recorder groups by reason only and drops
/// a changed message, so it is not used.) Every event also goes to the local log.
///
/// One task writes the events in order, with its own request budget, like the broadcaster's
/// sink goroutine; at most [`MAX_PENDING_EVENTS`] wait, more are dropped and counted.
#[derive(Clone)]
pub struct CoreEventRecorder {
    node: String,
    local: EventLog,
    correlator: Arc<Mutex<EventCorrelator>>,
    queue: mpsc::Sender<PendingEvent>,
    /// Events dropped because the queue was full.
    dropped: Arc<AtomicU64>,
}

impl CoreEventRecorder {
    /// Starts the writer task on the current tokio runtime; without one, events go to the
    /// local log only.
    pub fn new(client: kube::Client, limiter: RateLimiter, node: String, local: EventLog) -> Self {
        let (queue, pending) = mpsc::channel(MAX_PENDING_EVENTS);
        match tokio::runtime::Handle::try_current() {
            Ok(runtime) => {
                runtime.spawn(write_events(client, limiter, pending));
            }
            Err(_) => tracing::error!("No tokio runtime: events are not written to the API server"),
        }
        CoreEventRecorder { node, local, correlator: Arc::default(), queue, dropped: Arc::default() }
    }

    /// Events dropped so far because too many writes were pending.
    pub fn dropped(&self) -> u64 {
        self.dropped.load(Ordering::Relaxed)
    }
}

impl EventRecorder for CoreEventRecorder {
    fn record(&self, object: &ObjectReference, event_type: EventType, reason: &str, message: &str) {
        self.local.record(object, event_type, reason, message);
        let now = Time(k8s_openapi::jiff::Timestamp::now());
        let correlated = match self.correlator.lock() {
            Ok(mut correlator) => {
                correlator.correlate(object, event_type.as_str(), reason, message, Instant::now(), &now)
            }
            Err(_) => return,
        };
        let Some(correlated) = correlated else {
            tracing::debug!(
                pod = object.name.as_deref().unwrap_or_default(),
                reason,
                "Event dropped: too many events about this object"
            );
            return;
        };
        let event = CoreEvent {
            metadata: ObjectMeta {
                name: Some(correlated.name),
                namespace: Some(object.namespace.clone().unwrap_or_else(|| "default".to_owned())),
                ..Default::default()
            },
            involved_object: object.clone(),
            reason: Some(reason.to_owned()),
            message: Some(correlated.message),
            type_: Some(event_type.as_str().to_owned()),
            count: Some(correlated.count),
            first_timestamp: Some(correlated.first_timestamp),
            last_timestamp: Some(now),
            source: Some(EventSource {
                component: Some("probelet".to_owned()),
                host: Some(self.node.clone()),
            }),
            reporting_component: Some("probelet".to_owned()),
            reporting_instance: Some(self.node.clone()),
            ..Default::default()
        };
        let pending = PendingEvent { event, update_existing: correlated.update_existing };
        if let Err(mpsc::error::TrySendError::Full(_)) = self.queue.try_send(pending) {
            let dropped = self.dropped.fetch_add(1, Ordering::Relaxed) + 1;
            tracing::debug!(dropped, "Event dropped: too many event writes pending");
        }
    }
}

/// The writer task: one event at a time, until every recorder is gone.
async fn write_events(client: kube::Client, limiter: RateLimiter, mut pending: mpsc::Receiver<PendingEvent>) {
    while let Some(next) = pending.recv().await {
        if let Err(err) = write_event(&client, &limiter, next).await {
            tracing::warn!(error = %err, "Failed to write an event");
        }
    }
}

/// client-go's `recordEvent`: patch a repeat, and create the Event when it is new or the
/// repeat's Event is gone (the API server removes Events after their TTL, an hour by default).
async fn write_event(
    client: &kube::Client,
    limiter: &RateLimiter,
    pending: PendingEvent,
) -> Result<(), kube::Error> {
    let PendingEvent { event, update_existing } = pending;
    let namespace = event.metadata.namespace.clone().unwrap_or_default();
    let name = event.metadata.name.clone().unwrap_or_default();
    let api: Api<CoreEvent> = Api::namespaced(client.clone(), &namespace);
    if update_existing {
        limiter.acquire().await;
        let patch = serde_json::json!({
            "count": event.count,
            "lastTimestamp": event.last_timestamp,
            "message": event.message,
        });
        match api.patch(&name, &PatchParams::default(), &Patch::Merge(patch)).await {
            Ok(_) => return Ok(()),
            Err(kube::Error::Api(status)) if status.code == 404 => {}
            Err(err) => return Err(err),
        }
    }
    limiter.acquire().await;
    api.create(&PostParams::default(), &event).await.map(|_| ())
}

#[cfg(test)]
mod event_tests {
    use super::*;

    fn object(name: &str, container: &str) -> ObjectReference {
        ObjectReference {
            kind: Some("Pod".into()),
            api_version: Some("v1".into()),
            namespace: Some("default".into()),
            name: Some(name.into()),
            uid: Some(format!("uid-{name}")),
            field_path: Some(format!("spec.containers{{{container}}}")),
            ..Default::default()
        }
    }

    fn time(nanos: i128) -> Time {
        Time(k8s_openapi::jiff::Timestamp::from_nanosecond(nanos).unwrap())
    }

    #[test]
    fn lru_forgets_the_least_recently_used() {
        let mut lru = Lru::new(3);
        for k in ["a", "b", "c"] {
            lru.insert(k, 0);
        }
        *lru.get_mut(&"a").unwrap() += 1;
        lru.insert("d", 0);
        assert!(lru.get_mut(&"b").is_none(), "b was least recently used");
        assert_eq!(lru.get_mut(&"a").copied(), Some(1));
        lru.insert("c", 5);
        lru.insert("e", 0);
        assert!(lru.get_mut(&"d").is_none(), "d was least recently used");
        assert_eq!(lru.len(), 3);
        assert_eq!(lru.get_mut(&"c").copied(), Some(5));
    }

    #[test]
    fn repeats_count_into_one_event() {
        let mut c = EventCorrelator::default();
        let now = Instant::now();
        let obj = object("web", "app");
        let first = c.correlate(&obj, "Warning", "Unhealthy", "boom", now, &time(1_000)).unwrap();
        assert_eq!(first.name, "web.3e8");
        assert_eq!((first.count, first.update_existing), (1, false));
        let second = c.correlate(&obj, "Warning", "Unhealthy", "boom", now, &time(2_000)).unwrap();
        assert_eq!(second.name, first.name, "a repeat goes to the same Event");
        assert_eq!((second.count, second.update_existing), (2, true));
        assert_eq!(second.first_timestamp, time(1_000));
        let other = c.correlate(&obj, "Warning", "Unhealthy", "other", now, &time(3_000)).unwrap();
        assert_eq!((other.name.as_str(), other.count, other.update_existing), ("web.bb8", 1, false));
        let other_container =
            c.correlate(&object("web", "side"), "Warning", "Unhealthy", "boom", now, &time(4_000)).unwrap();
        assert_eq!(other_container.count, 1, "the field path is part of the key");
    }

    #[test]
    fn spam_filter_allows_a_burst_then_one_per_period_per_object() {
        let mut c = EventCorrelator::default();
        let start = Instant::now();
        let obj = object("web", "app");
        let written = (0..30)
            .filter(|i| c.correlate(&obj, "Warning", "Unhealthy", "boom", start, &time(*i)).is_some())
            .count();
        assert_eq!(written, SPAM_BURST as usize, "the burst, then nothing");
        // Another object has its own budget.
        assert!(
            c.correlate(&object("db", "app"), "Warning", "Unhealthy", "boom", start, &time(31)).is_some()
        );
        let later = start + SPAM_REFILL_PERIOD;
        let repeat = c.correlate(&obj, "Warning", "Unhealthy", "boom", later, &time(32)).unwrap();
        assert_eq!(repeat.count, 31, "dropped occurrences still count");
        assert!(
            c.correlate(&obj, "Warning", "Unhealthy", "boom", later, &time(33)).is_none(),
            "one per period"
        );
    }

    #[test]
    fn similar_messages_are_combined_after_ten() {
        let mut c = EventCorrelator::default();
        let now = Instant::now();
        let obj = object("web", "app");
        for i in 0..(AGGREGATE_MAX_EVENTS - 1) {
            let e =
                c.correlate(&obj, "Warning", "Unhealthy", &format!("m{i}"), now, &time(i as i128)).unwrap();
            assert_eq!(e.message, format!("m{i}"));
        }
        let combined = c.correlate(&obj, "Warning", "Unhealthy", "m9", now, &time(100)).unwrap();
        assert_eq!(combined.message, "(combined from similar events): m9");
        assert_eq!((combined.count, combined.update_existing), (1, false));
        let next = c.correlate(&obj, "Warning", "Unhealthy", "m10", now, &time(200)).unwrap();
        assert_eq!(next.message, "(combined from similar events): m10");
        assert_eq!((next.name, next.count, next.update_existing), (combined.name, 2, true));
        // After the interval, the group starts over.
        let later = now + AGGREGATE_INTERVAL + Duration::from_secs(1);
        let fresh = c.correlate(&obj, "Warning", "Unhealthy", "m11", later, &time(300)).unwrap();
        assert_eq!(fresh.message, "m11");
    }

    #[test]
    fn caches_stay_bounded() {
        let mut c = EventCorrelator::default();
        let now = Instant::now();
        for i in 0..(EVENT_CACHE_SIZE + 100) {
            let obj = object(&format!("pod-{i}"), "app");
            c.correlate(&obj, "Warning", "Unhealthy", "boom", now, &time(i as i128));
        }
        assert_eq!(c.counts.len(), EVENT_CACHE_SIZE);
        assert_eq!(c.spam.len(), EVENT_CACHE_SIZE);
        assert_eq!(c.aggregates.len(), EVENT_CACHE_SIZE);
        // The oldest pod's count was forgotten: its next event is a new Event.
        let again =
            c.correlate(&object("pod-0", "app"), "Warning", "Unhealthy", "boom", now, &time(1)).unwrap();
        assert!(!again.update_existing);
    }
}
