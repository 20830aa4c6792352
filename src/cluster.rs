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
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, Status, Time};
use kube::api::{Api, AttachParams, DeleteParams, Patch, PatchParams, PostParams};
use kube::runtime::WatchStreamExt;
use kube::runtime::watcher::{self, Event as WatchEvent};
use probelet_actors::Pipeline;
use probelet_actors::container::ContainerId;
use probelet_actors::contracts::{
    CommandRunner, EventRecorder, EventType, ExecError, ExecOutput, MAX_EXEC_OUTPUT,
};
use probelet_actors::gofmt::go_quote;
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
