//! The prober manager's container-lifecycle messages (`ContainerLifecycleProber`, upstream
//! `StartContainerProbes` / `StopContainerProbes`): workers started and stopped per container
//! instance (docs/prober.md §3.7).

use std::sync::Arc;

use actix::prelude::*;
use k8s_openapi::api::core::v1::{Container, Pod};
use k8s_openapi::jiff::Timestamp;

use crate::container::ContainerId;
use crate::prober::do_probe::ContainerBinding;
use crate::prober::worker::{ProbeKey, StartupSucceeded};
use crate::prober::{PodContainer, ProbeKind};
use crate::vocabulary::PodUid;

use super::ProberManager;

// === messages ===

/// A container started (upstream `StartContainerProbes`, `ContainerLifecycleProber` only; a
/// no-op otherwise): start its startup worker, or its readiness and liveness workers when it
/// has no startup probe, for this container instance. Idempotent for one instance; a new
/// container ID replaces the workers of the previous instance (a restart the host did not
/// report with [`StopContainerProbes`]). Nothing for a pod the manager does not know: one no
/// `AddPod` (or `ReconcilePod`) has added, or one `RemovePod` / `CleanupPods` has dropped since.
#[derive(Debug, Clone, Message)]
#[rtype(result = "()")]
pub struct StartContainerProbes {
    /// The container's pod.
    pub pod: Arc<Pod>,
    /// The container's spec (a regular container or a sidecar).
    pub container: Arc<Container>,
    /// The instance that started.
    pub container_id: ContainerId,
    /// The pod's IP, probed when the pod status has none yet.
    pub pod_ip: Option<String>,
    /// When the instance started; the initial delay counts from it when the status has no time.
    pub started_at: Option<Timestamp>,
}

/// A container stopped or exited (upstream `StopContainerProbes`): stop its workers; one not
/// started yet is dropped at once.
#[derive(Debug, Clone, Message)]
#[rtype(result = "()")]
pub struct StopContainerProbes {
    /// The container's pod UID.
    pub pod_uid: PodUid,
    /// The container's name.
    pub container: String,
}

// === the handlers ===

impl Handler<StartContainerProbes> for ProberManager {
    type Result = ();

    fn handle(&mut self, msg: StartContainerProbes, ctx: &mut Self::Context) {
        if !self.lifecycle() {
            return;
        }
        let Some(uid) = PodUid::of(&msg.pod) else { return };
        if !self.known_pods.contains_key(&uid) {
            // Removed (a host's container event racing the pod's deletion), refused (two
            // containers of one name) or never added: workers made now would probe a pod
            // nobody syncs until the next CleanupPods. Upstream's ensureWorkersLocked makes
            // them; it logs nothing here, so neither do we above debug.
            tracing::debug!(
                pod = %crate::format::pod_ref(&msg.pod),
                pod_uid = %uid,
                container = msg.container.name.as_str(),
                "Pod is not known to the prober manager; not starting its container's probes"
            );
            return;
        }
        let name: Arc<str> = msg.container.name.as_str().into();
        let key = |kind| ProbeKey { pod_uid: uid.clone(), container_name: name.clone(), kind };
        // Workers of a previous instance (a restart nobody reported with a stop) go.
        for kind in ProbeKind::ADD_ORDER {
            let stale = self.workers.get(&key(kind)).is_some_and(|e| {
                !e.stopping && e.binding.as_ref().is_some_and(|b| b.container_id != msg.container_id)
            });
            if stale {
                self.retire(&key(kind));
            }
        }
        let container = PodContainer::in_pod_or_own(&msg.pod, msg.container.clone());
        for kind in ProbeKind::ADD_ORDER {
            let missing = self.workers.get(&key(kind)).is_none_or(|e| e.stopping);
            if kind.probe_of(&container).is_some() && missing {
                self.add_unstarted(key(kind), container.clone());
            }
        }
        let binding = ContainerBinding {
            container_id: msg.container_id,
            pod_ip: msg.pod_ip.filter(|ip| !ip.is_empty()),
            started_at: msg.started_at,
        };
        if msg.container.startup_probe.is_some() {
            // Readiness and liveness wait for the startup probe (StartupSucceeded).
            self.start_bound(ctx, key(ProbeKind::Startup), &binding);
        } else {
            self.start_readiness_and_liveness(ctx, &uid, &name, &binding);
        }
    }
}

impl Handler<StopContainerProbes> for ProberManager {
    type Result = ();

    fn handle(&mut self, msg: StopContainerProbes, _ctx: &mut Self::Context) {
        self.stop_pod_where(&msg.pod_uid, |k| *k.container_name == *msg.container);
    }
}

impl Handler<StartupSucceeded> for ProberManager {
    type Result = ();

    fn handle(&mut self, msg: StartupSucceeded, ctx: &mut Self::Context) {
        let Some(entry) = self.workers.get(&msg.key).filter(|e| e.id == msg.worker_id && !e.stopping) else {
            return; // replaced or stopped since: its container is not the current one
        };
        let Some(binding) = entry.binding.clone().filter(|b| b.container_id == msg.container_id) else {
            return;
        };
        self.start_readiness_and_liveness(ctx, &msg.key.pod_uid, &msg.key.container_name, &binding);
    }
}
