//! The prober manager's `ReconcilePod` (`MutableContainerProbes`, KEP-6318): a running pod's
//! probe changes applied to its workers in place (docs/prober.md §3.9). What changed is worked
//! out by the pure [`crate::prober::reconcile`]; this file applies it to the actor's workers.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;

use actix::prelude::*;
use k8s_openapi::api::core::v1::{Container, Pod, PodStatus};

use crate::container::ContainerId;
use crate::contracts::EventType;
use crate::features::Feature;
use crate::prober::reconcile::{
    EVENT_CONTAINER_PROBE_CHANGED, ProbeChange, UpdateEffect, change_message, is_mirror, is_static_or_mirror,
    probe_change,
};
use crate::prober::timing::{EffectiveTiming, probe_timings};
use crate::prober::worker::{ProbeKey, Reconfigure};
use crate::prober::{PodContainer, ProbeKind, container_reference};
use crate::status::generate::{PHASE_FAILED, PHASE_SUCCEEDED};
use crate::vocabulary::PodUid;

use super::{ProberManager, probed_containers};

// === messages ===

/// The pod's spec as it is now (upstream `ReconcilePod`, `MutableContainerProbes` only; a
/// no-op otherwise): probes added, changed or removed since its workers were created are
/// applied in place, each with a `Normal ContainerProbeChanged` event, and a pod the manager
/// does not know yet gets its workers as with [`AddPod`](super::AddPod). Static and mirror pods only get
/// [`AddPod`](super::AddPod)'s treatment; a pod being deleted or finished gets none, as upstream's
/// (docs/prober.md §3.9).
#[derive(Debug, Clone, Message)]
#[rtype(result = "()")]
pub struct ReconcilePod(pub Arc<Pod>);

// === the handler ===

impl Handler<ReconcilePod> for ProberManager {
    type Result = ();

    fn handle(&mut self, msg: ReconcilePod, ctx: &mut Self::Context) {
        let pod = msg.0;
        let Some(uid) = PodUid::of(&pod) else {
            self.add_pod(pod, ctx, None);
            return;
        };
        // Before any in-place change: such a pod's workers are keyed by a name two containers
        // share (the API server refuses it, and never lets an update make one).
        if super::refused_for_a_duplicate_name(&pod, &uid) {
            return;
        }
        let gated = self.feature_gates.enabled(Feature::MutableContainerProbes);
        if gated && self.deleting_or_finished(&pod, &uid) {
            // Upstream's ReconcilePod changes no worker of such a pod, and starts none: a pod
            // first seen being deleted gets no probes (its readiness worker is AddPod's only).
            tracing::trace!(pod_uid = %uid, "Pod is being deleted or has finished; its probes are not reconciled");
            return;
        }
        let previous = self.known_pods.get(&uid).cloned();
        let in_place = gated && previous.is_some() && !self.excluded(&pod);
        if !in_place {
            self.add_pod(pod, ctx, None);
            return;
        }
        let containers: HashMap<String, PodContainer> =
            probed_containers(&pod).into_iter().map(|c| (c.name.clone(), c)).collect();
        // An invalid timing annotation is the host's to report, as in spawn_worker.
        let timings = probe_timings(&pod).unwrap_or_default();
        let keys: Vec<ProbeKey> =
            self.pod_workers(&uid).filter(|(_, e)| !e.stopping).map(|(k, _)| k.clone()).collect();
        for key in keys {
            let Some(entry) = self.workers.get(&key) else { continue };
            let old_probe = key.kind.probe_of(&entry.container);
            let old_timings = probe_timings(entry.container.pod()).unwrap_or_default();
            let old = old_probe
                .map(|p| (p, EffectiveTiming::new(p, old_timings.get(&key.container_name, key.kind))));
            let container = containers.get(&*key.container_name);
            let new_probe = container.and_then(|c| key.kind.probe_of(c));
            let new =
                new_probe.map(|p| (p, EffectiveTiming::new(p, timings.get(&key.container_name, key.kind))));
            let Some(change) = probe_change(old, new) else { continue };
            let event_container = container.cloned().unwrap_or_else(|| entry.container.clone());
            match (&change, container, new) {
                (ProbeChange::Updated(fields), Some(container), Some((probe, timing))) => {
                    let effect = UpdateEffect::of(fields);
                    self.reconfigure(&key, container, probe, timing, effect);
                }
                _ => {
                    // Removed: the worker goes now, so a status generated from here on sees
                    // no worker, and UpdatePodStatus ignores its cached result until the
                    // manager removes it on the worker's exit.
                    self.retire(&key);
                }
            }
            self.record_change(&pod, &event_container, key.kind, &change);
        }
        self.add_pod(pod, ctx, previous);
    }
}

impl ProberManager {
    /// Applies an updated probe to the key's worker and keeps the new spec for restarts.
    fn reconfigure(
        &mut self,
        key: &ProbeKey,
        container: &PodContainer,
        probe: &k8s_openapi::api::core::v1::Probe,
        timing: EffectiveTiming,
        effect: UpdateEffect,
    ) {
        let mut spec = self.worker_spec(key, container, probe);
        spec.initial_delay = timing.initial_delay;
        let Some(entry) = self.workers.get_mut(key) else { return };
        entry.container = container.clone();
        if let Some(addr) = &entry.addr {
            addr.reconfigure(Reconfigure {
                container: container.clone(),
                spec,
                period: timing.period,
                start_interval: timing.start_interval.filter(|_| key.kind == ProbeKind::Readiness),
                timeout: timing.timeout,
                effect,
            });
        }
    }

    /// Under `ContainerLifecycleProber`, a probe added in place to a running container starts
    /// at once when its instance is past the point where it would have been started: a startup
    /// probe always, readiness and liveness when the container has no startup probe or its
    /// startup probe has succeeded. The next `StartContainerProbes` would start the first two
    /// cases too, but nothing would start the last one (`StartupSucceeded` has come already).
    pub(super) fn start_added(&mut self, ctx: &mut Context<Self>, key: &ProbeKey, container: &Container) {
        let binding = self
            .pod_workers(&key.pod_uid)
            .filter(|(k, e)| k.container_name == key.container_name && e.addr.is_some() && !e.stopping)
            .find_map(|(_, e)| e.binding.clone());
        // No running sibling: the container does not run yet, StartContainerProbes starts it.
        let Some(binding) = binding else { return };
        let start = match key.kind {
            ProbeKind::Startup => true,
            ProbeKind::Readiness | ProbeKind::Liveness => {
                container.startup_probe.is_none()
                    || self.config.results_view.get(ProbeKind::Startup, &binding.container_id)
                        == Some(crate::prober::ProbeResult::Success)
            }
        };
        if start {
            self.start_bound(ctx, key.clone(), &binding);
        }
    }

    /// The pod is being deleted, or its phase is terminal in its spec's status or in the
    /// status manager's cache (upstream `ReconcilePod`'s early return).
    fn deleting_or_finished(&self, pod: &Pod, uid: &PodUid) -> bool {
        let terminal = |phase: Option<&str>| matches!(phase, Some(PHASE_SUCCEEDED | PHASE_FAILED));
        pod.metadata.deletion_timestamp.is_some()
            || terminal(pod.status.as_ref().and_then(|s| s.phase.as_deref()))
            || self.config.views.probe_status(uid).is_some_and(|s| s.finished.is_some())
    }

    /// Static and mirror pods keep their probes until they are replaced (KEP-6318); a host's
    /// own static pods can be let in.
    fn excluded(&self, pod: &Pod) -> bool {
        if self.static_pods_in_place { is_mirror(pod) } else { is_static_or_mirror(pod) }
    }

    pub(super) fn record_change(
        &self,
        pod: &Pod,
        container: &Container,
        kind: ProbeKind,
        change: &ProbeChange,
    ) {
        let message = change_message(&container.name, kind, change);
        tracing::info!(pod = %crate::format::pod_ref(pod), container = %container.name, probe_kind = %kind, "{message}");
        if let Some(recorder) = &self.recorder {
            let object = container_reference(pod, container);
            recorder.record(&object, EventType::Normal, EVENT_CONTAINER_PROBE_CHANGED, &message);
        }
    }
}

/// The result keys of `status` whose probe the pod's spec no longer has and no worker runs.
pub(super) fn removed_probe_results(
    pod: &Arc<Pod>,
    status: &PodStatus,
    workers: &HashSet<(Arc<str>, ProbeKind)>,
) -> HashSet<(ProbeKind, ContainerId)> {
    let containers: HashMap<String, PodContainer> =
        probed_containers(pod).into_iter().map(|c| (c.name.clone(), c)).collect();
    let statuses =
        status.container_statuses.iter().flatten().chain(status.init_container_statuses.iter().flatten());
    let mut removed = HashSet::new();
    for cs in statuses {
        let Some(id) = cs.container_id.as_deref().filter(|id| !id.is_empty()) else { continue };
        for kind in ProbeKind::ADD_ORDER {
            let configured = containers.get(&cs.name).is_some_and(|c| kind.probe_of(c).is_some());
            if !configured && !workers.iter().any(|(n, k)| **n == *cs.name && *k == kind) {
                removed.insert((kind, ContainerId::parse(id)));
            }
        }
    }
    removed
}
