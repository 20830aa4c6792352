//! A host that embeds probelet through [`probelet::Engine::builder`], in the shape of a
//! virtual-kubelet provider: it takes the pods the API server binds to its node, "runs" their
//! containers in a backend of its own (here a table of container states; a real provider would
//! start them on a cloud service), and leaves probing and the pod status to the engine, which
//! writes it to the API server as the kubelet would (`OwnedFields::Kubelet`).
//!
//! ```text
//! KUBECONFIG=~/.kube/config cargo run --example embed_host -- --node my-virtual-node
//! ```
//!
//! It lists its node's pods every second but syncs a pod with the engine only when the pod is
//! new, when what a sync reads of it changed, or a minute after its last sync, as the kubelet
//! syncs: each sync probes an unready container's readiness at once. When a liveness probe
//! fails, the provider restarts the container (a new container ID, one more restart), as the
//! kubelet's `computePodActions` would, and syncs the pod. On SIGINT/SIGTERM it flushes the
//! pending status writes and exits.

// The provider's backend stamps container start times with the real clock, as a runtime does.
#![allow(clippy::disallowed_methods)]

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use actix::prelude::*;
use anyhow::Context as _;
use k8s_openapi::api::core::v1::{ContainerState, ContainerStateRunning, ContainerStatus, Pod, PodStatus};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use k8s_openapi::jiff::Timestamp;
use kube::api::{Api, ApiResource, DynamicObject, ListParams};
use probelet::contracts::PodRegistry;
use probelet::results::ProbeResultChanged;
use probelet::status::equality::is_kubelet_owned_condition;
use probelet::sync::api_pod::ApiPod;
use probelet::sync::syncer::OwnedFields;
use probelet::vocabulary::PodUid;
use probelet::vocabulary::{ProbeKind, ProbeResult};
use probelet::{Engine, k8s_openapi};

/// How often the provider lists its node's pods (a real provider is told by its framework).
const RESYNC: Duration = Duration::from_secs(1);

/// How often a pod is synced when nothing changed, as the kubelet's `--sync-frequency`: each
/// sync probes an unready container's readiness at once, so a pod synced at every listing
/// would be probed every second whatever its `periodSeconds` (`Engine::sync_pod`).
const SYNC_FREQUENCY: Duration = Duration::from_secs(60);

/// One container as the provider's backend runs it.
#[derive(Debug, Clone)]
struct BackendContainer {
    id: String,
    started_at: Timestamp,
    restarts: i32,
}

/// A pod the provider runs: the API server's copy and its containers' states, by name.
struct ProviderPod {
    pod: Arc<Pod>,
    containers: HashMap<String, BackendContainer>,
    /// What the last sync read of the API server's copy, and when: a sync is due when that
    /// changes, or [`SYNC_FREQUENCY`] after the last.
    synced: Option<(Pod, Instant)>,
}

impl ProviderPod {
    fn start(pod: Arc<Pod>) -> ProviderPod {
        let uid = pod.metadata.uid.clone().unwrap_or_default();
        let containers = pod
            .spec
            .iter()
            .flat_map(|spec| &spec.containers)
            .map(|c| {
                let container = BackendContainer {
                    id: format!("embed://{uid}-{}-0", c.name),
                    started_at: Timestamp::now(),
                    restarts: 0,
                };
                (c.name.clone(), container)
            })
            .collect();
        ProviderPod { pod, containers, synced: None }
    }

    /// Whether the API server's copy asks for a sync: the pod is new, changed in what a sync
    /// reads, or was last synced [`SYNC_FREQUENCY`] ago. Marks it synced when it does.
    fn sync_due(&mut self) -> bool {
        let reads = what_a_sync_reads(&self.pod);
        let due = match &self.synced {
            Some((read, at)) => *read != reads || at.elapsed() >= SYNC_FREQUENCY,
            None => true,
        };
        if due {
            self.synced = Some((reads, Instant::now()));
        }
        due
    }

    /// What the backend knows of the pod: it runs, with these containers; probelet adds
    /// `ready`, `started` and the conditions.
    fn runtime_status(&self) -> PodStatus {
        let container_statuses = self
            .pod
            .spec
            .iter()
            .flat_map(|spec| &spec.containers)
            .filter_map(|spec| {
                let c = self.containers.get(&spec.name)?;
                Some(ContainerStatus {
                    name: spec.name.clone(),
                    image: spec.image.clone().unwrap_or_default(),
                    container_id: Some(c.id.clone()),
                    restart_count: c.restarts,
                    state: Some(ContainerState {
                        running: Some(ContainerStateRunning { started_at: Some(Time(c.started_at)) }),
                        ..Default::default()
                    }),
                    ..Default::default()
                })
            })
            .collect();
        PodStatus {
            phase: Some("Running".into()),
            // The backend's containers listen on the host's loopback.
            pod_ip: Some("127.0.0.1".into()),
            container_statuses: Some(container_statuses),
            start_time: self.pod.status.as_ref().and_then(|s| s.start_time.clone()),
            ..Default::default()
        }
    }
}

/// What `Engine::sync_pod` reads of the API server's copy of a pod: all of it but the
/// bookkeeping every write changes and the status the engine writes itself. Of the status it
/// reads only the conditions the kubelet does not own (a readiness gate's, `DisruptionTarget`)
/// and a terminal phase, which stays; comparing the whole copy would sync the pod again after
/// each of the engine's own writes.
fn what_a_sync_reads(pod: &Pod) -> Pod {
    let mut pod = pod.clone();
    pod.metadata.resource_version = None;
    pod.metadata.managed_fields = None;
    pod.status = pod.status.map(|status| {
        let terminal = matches!(status.phase.as_deref(), Some("Succeeded" | "Failed"));
        PodStatus {
            conditions: status
                .conditions
                .map(|c| c.into_iter().filter(|c| !is_kubelet_owned_condition(&c.type_)).collect()),
            phase: status.phase.filter(|_| terminal),
            ..Default::default()
        }
    });
    pod
}

/// The provider: its node's pods and their containers, and the engine.
struct Provider {
    client: kube::Client,
    node: String,
    engine: Engine,
    registry: PodRegistry,
    pods: HashMap<String, ProviderPod>,
}

impl Actor for Provider {
    type Context = Context<Self>;

    fn started(&mut self, ctx: &mut Context<Self>) {
        ctx.notify(Resync);
        ctx.run_interval(RESYNC, |_, ctx| ctx.notify(Resync));
    }
}

#[derive(Message)]
#[rtype(result = "()")]
struct Resync;

#[derive(Message)]
#[rtype(result = "()")]
struct Listed(Vec<ApiPod>);

impl Handler<Resync> for Provider {
    type Result = ();

    fn handle(&mut self, _: Resync, ctx: &mut Context<Self>) {
        let client = self.client.clone();
        let node = self.node.clone();
        let me = ctx.address();
        actix::spawn(async move {
            match list_node_pods(client, &node).await {
                Ok(pods) => me.do_send(Listed(pods)),
                Err(e) => eprintln!("embed_host: listing the pods of node {node}: {e:#}"),
            }
        });
    }
}

/// The node's pods as the API server has them, the server's JSON kept, so the engine's writes
/// keep fields this build's types do not know.
async fn list_node_pods(client: kube::Client, node: &str) -> anyhow::Result<Vec<ApiPod>> {
    let resource = ApiResource::erase::<Pod>(&());
    let api: Api<DynamicObject> = Api::all_with(client, &resource);
    let list = api.list(&ListParams::default().fields(&format!("spec.nodeName={node}"))).await?;
    list.items
        .into_iter()
        .map(|object| {
            let mut json = serde_json::to_value(&object)?;
            json["apiVersion"] = "v1".into();
            json["kind"] = "Pod".into();
            ApiPod::from_json(json).context("a pod the API server sent")
        })
        .collect()
}

impl Handler<Listed> for Provider {
    type Result = ();

    fn handle(&mut self, Listed(listed): Listed, ctx: &mut Context<Self>) {
        let mut seen = Vec::new();
        for observed in listed {
            let Some(uid) = observed.pod.metadata.uid.clone() else { continue };
            let pod = Arc::new(observed.pod.clone());
            self.engine.api_pod_observed(observed);
            self.registry.upsert(pod.clone());
            let entry = self.pods.entry(uid.clone()).or_insert_with(|| {
                println!("embed_host: starting {}", pod_name(&pod));
                ProviderPod::start(pod.clone())
            });
            entry.pod = pod;
            seen.push(uid.clone());
            if entry.sync_due() {
                self.sync(&uid, ctx);
            }
        }
        let gone: Vec<String> = self.pods.keys().filter(|uid| !seen.contains(uid)).cloned().collect();
        for uid in gone {
            if let Some(gone) = self.pods.remove(&uid) {
                println!("embed_host: {} is gone", pod_name(&gone.pod));
                self.engine.remove_pod(gone.pod);
                self.registry.remove(&uid);
            }
        }
        self.engine.pipeline().remove_orphaned_statuses(self.pods.keys().map(PodUid::from).collect());
    }
}

impl Handler<ProbeResultChanged> for Provider {
    type Result = ();

    /// A failed liveness probe restarts the container, as the kubelet would.
    fn handle(&mut self, change: ProbeResultChanged, ctx: &mut Context<Self>) {
        if change.kind != ProbeKind::Liveness || change.result != ProbeResult::Failure {
            return;
        }
        let Some(pod) = self.pods.get_mut(change.pod_uid.as_str()) else { return };
        let failed = change.container_id.to_string();
        // A result for a container already restarted matches no current ID.
        let Some((name, container)) = pod.containers.iter_mut().find(|(_, c)| c.id == failed) else { return };
        container.restarts += 1;
        container.started_at = Timestamp::now();
        container.id = format!("embed://{}-{name}-{}", change.pod_uid, container.restarts);
        println!("embed_host: restarting {name} of {}", pod_name(&pod.pod));
        let uid = change.pod_uid.clone();
        self.sync(&uid, ctx);
    }
}

impl Provider {
    /// Hands the engine the backend's view of the pod (the kubelet's `SyncPod`).
    fn sync(&self, uid: &str, ctx: &mut Context<Self>) {
        let Some(pod) = self.pods.get(uid) else { return };
        let engine = self.engine.clone();
        let (pod, status) = (pod.pod.clone(), pod.runtime_status());
        ctx.spawn(
            async move {
                if let Err(e) = engine.sync_pod(pod, status).await {
                    eprintln!("embed_host: {e}");
                }
            }
            .into_actor(self),
        );
    }
}

fn pod_name(pod: &Pod) -> String {
    format!(
        "{}/{}",
        pod.metadata.namespace.as_deref().unwrap_or_default(),
        pod.metadata.name.as_deref().unwrap_or_default()
    )
}

fn node_from_args() -> anyhow::Result<String> {
    let mut args = std::env::args().skip(1);
    while let Some(arg) = args.next() {
        if arg == "--node" {
            return args.next().context("--node needs a value");
        }
        if let Some(node) = arg.strip_prefix("--node=") {
            return Ok(node.to_owned());
        }
    }
    anyhow::bail!("usage: embed_host --node NODE (the API server comes from KUBECONFIG)")
}

#[actix::main]
async fn main() -> anyhow::Result<()> {
    let node = node_from_args()?;
    let client = kube::Client::try_default().await.context("a kube client from KUBECONFIG")?;
    let registry = PodRegistry::new();
    // No `.runner()`: this provider's containers do not run on this machine, so its pods' exec
    // probes error (and keep their containers not ready) rather than run here. A provider whose
    // backend can run a command in a container hands the engine a `CommandRunner` that does.
    let engine =
        Engine::builder(Arc::new(registry.clone())).api(client.clone(), OwnedFields::Kubelet).start();
    let provider =
        Provider { client, node: node.clone(), engine: engine.clone(), registry, pods: HashMap::new() }
            .start();
    engine.pipeline().subscribe_results(provider.recipient());
    println!("embed_host: serving node {node}");

    let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())?;
    tokio::select! {
        _ = tokio::signal::ctrl_c() => {}
        _ = term.recv() => {}
    }
    println!("embed_host: flushing status writes");
    tokio::time::timeout(Duration::from_secs(10), engine.flush()).await.ok();
    Ok(())
}
