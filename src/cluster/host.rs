//! The cluster host: feeds the engine from the pod watch and acts on probe results (the
//! status half of the kubelet's `SyncPod`, and the liveness kill as a pod DELETE).

use std::collections::HashSet;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use actix::prelude::*;
use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, DeleteParams};
use kube::runtime::watcher::{self, Event as WatchEvent};
use probelet_actors::Pipeline;
use probelet_actors::capacity::ShrinkAfterRemoval;
use probelet_actors::container::ContainerId;
use probelet_actors::contracts::{EventRecorder, EventType, PodLookup};
use probelet_actors::features::Feature;
use probelet_actors::metrics as names;
use probelet_actors::prober::timing::{EVENT_INVALID_PROBE_TIMING, PROBE_TIMING_ANNOTATION, probe_timings};
use probelet_actors::prober::update_status::{
    keep_started_and_ready_once_finished, keep_started_only_for_the_same_container,
    keep_started_while_terminating,
};
use probelet_actors::prober::{ProbeKind, ProbeResult, pod_reference};
use probelet_actors::results::ProbeResultChanged;
use probelet_actors::status::generate::keep_initialized_once_initialized;
use probelet_actors::status::generate::{PHASE_FAILED, PHASE_SUCCEEDED};
use probelet_actors::status::generate_kubelet_conditions;
use probelet_actors::sync::api_pod::ApiPod;
use probelet_actors::sync::rate::RateLimiter;
use probelet_actors::sync::rules::{RETRY_AFTER_MAX, retry_after};
use probelet_actors::sync::syncer::{ApiPodDeleted, ApiPodListed, ApiPodObserved, Reconcile, StatusSyncer};
use probelet_actors::vocabulary::PodUid;

use super::backoff::Backoff;
use super::changes::{OwnedField, only_owned_fields_changed, owned_fields_turned_off};
use super::exec::ExecRunner;
use super::watch::{PodWatchState, PodWatchStep, Seen, pod_watch_ended};
use crate::cli::LivenessAction;
use crate::host::history::ProbeHistory;
use crate::host::phase::kill_grace_period;

/// Stop: no more watch events, syncs or liveness actions (the agent's shutdown, before it
/// stops the pods' probes: a sync after that would find no workers and write every running
/// container ready).
#[derive(Debug, Clone, Copy, Message)]
#[rtype(result = "()")]
pub struct StopHost;

/// Feeds the engine from the watch and acts on probe results.
pub struct ClusterHost {
    /// For the liveness DELETE, which has a back-off of its own: the client without kube's
    /// retry ([`super::Clients`]).
    pub writes: kube::Client,
    pub pipeline: Pipeline,
    pub pods: probelet_actors::contracts::PodRegistry,
    /// The probe history `/probes` serves; a deleted pod's runs are forgotten.
    pub history: ProbeHistory,
    pub exec: ExecRunner,
    pub syncer: Addr<StatusSyncer>,
    pub limiter: RateLimiter,
    pub liveness_action: LivenessAction,
    pub ready: Arc<std::sync::atomic::AtomicBool>,
    /// UIDs of pods a liveness DELETE is in flight or backing off for (one retry loop per pod),
    /// or has deleted: kept until the watch reports the pod gone.
    pub deleting: HashSet<PodUid>,
    /// The watch's own bookkeeping: the lost/back log lines, the UIDs the current list showed.
    pub watch: PodWatchState,
    /// Where the Warning about an invalid probe timing annotation goes.
    pub recorder: Arc<dyn EventRecorder>,
    /// Pods whose status is being generated, and whether another sync was asked for meanwhile.
    pub syncs: SyncsInFlight,
    /// The node whose pods this agent probes: a pod bound elsewhere is never probed nor written,
    /// even if the watch (a server or proxy that ignores the field selector) sends it.
    pub node_name: String,
}

/// Whether `pod` is bound to `node`.
fn bound_to(pod: &Pod, node: &str) -> bool {
    pod.spec.as_ref().and_then(|s| s.node_name.as_deref()) == Some(node)
}

/// Per pod, at most one status generation at a time: a sync asked for while one runs is done
/// once, when it ends, with the pod as it is then. A pod of thousands of containers gets a probe
/// result (and so a sync) from each of them in a burst; one generation each, all at once, was
/// quadratic in the pod's size, held the agent's thread for a minute and more, and its memory
/// grew by gigabytes.
#[derive(Debug, Default)]
pub struct SyncsInFlight {
    running: HashSet<PodUid>,
    again: HashSet<PodUid>,
}

impl SyncsInFlight {
    /// Whether a sync of `uid` may begin now; if not, it is owed when the running one ends.
    fn begin(&mut self, uid: &PodUid) -> bool {
        if self.running.contains(uid) {
            self.again.insert(uid.clone());
            return false;
        }
        self.running.insert(uid.clone());
        true
    }

    /// The sync of `uid` ended: whether another is owed.
    fn end(&mut self, uid: &PodUid) -> bool {
        self.running.remove(uid);
        self.running.shrink_after_removal();
        let again = self.again.remove(uid);
        self.again.shrink_after_removal();
        again
    }
}

impl ClusterHost {
    fn apply(&mut self, observed: ApiPod, seen: Seen, ctx: &mut Context<Self>) {
        let Some(uid) = PodUid::of(&observed.pod) else { return };
        if !bound_to(&observed.pod, &self.node_name) {
            tracing::debug!(pod = %probelet_actors::format::pod_ref(&observed.pod), node = %self.node_name, "The watch sent a pod bound to another node; ignoring it");
            if self.pods.pod_by_uid(&uid).is_some() {
                self.delete(observed.pod);
            }
            return;
        }
        let pod = Arc::new(observed.pod.clone());
        let previous = self.pods.pod_by_uid(&uid);
        match seen {
            Seen::Listed => self.syncer.do_send(ApiPodListed(Arc::new(observed))),
            Seen::Watched => self.syncer.do_send(ApiPodObserved(Arc::new(observed))),
        }
        self.pods.upsert(pod.clone());
        self.exec.learn(&pod);
        if let Some(message) = invalid_timing(previous.as_deref(), &pod) {
            tracing::warn!(pod = %probelet_actors::format::pod_ref(&pod), pod_uid = %uid, error = %message, "Invalid probe timing annotation");
            self.recorder.record(
                &pod_reference(&pod),
                EventType::Warning,
                EVENT_INVALID_PROBE_TIMING,
                &message,
            );
        }
        let Some(previous) = previous else {
            self.sync(pod, ctx);
            return;
        };
        // The echo of the agent's own write, or a writer that touched only the agent's fields.
        let only_owned = only_owned_fields_changed(&previous, &pod);
        let turned_off = owned_fields_turned_off(&previous, &pod);
        if !only_owned {
            // The runtime's write (container states) or a spec, metadata or foreign condition
            // change: what a sync is for.
            self.sync(pod.clone(), ctx);
        }
        if turned_off.is_empty() {
            if only_owned {
                tracing::trace!(
                    pod = %probelet_actors::format::pod_ref(&pod),
                    "Pod update changed only the fields the agent writes; not syncing"
                );
            }
            return;
        }
        // A flag the agent wrote true is false now: its own write (a failed probe), or another
        // writer's reset, which the agent's own view of its probes tells apart.
        let pipeline = self.pipeline.clone();
        let fut = async move { pipeline.pod_status(&uid).await.ok().flatten() };
        ctx.spawn(fut.into_actor(self).map(move |desired, act, _ctx| {
            let Some(desired) = desired else { return };
            let resets = runtime_resets(&desired, &turned_off);
            for field in &resets {
                metrics::counter!(names::PROBELET_RUNTIME_RESETS_TOTAL, "field" => field.as_str())
                    .increment(1);
            }
            if !resets.is_empty() {
                tracing::debug!(
                    pod = %probelet_actors::format::pod_ref(&pod),
                    resets = resets.len(),
                    "Another writer reset the container readiness the agent wrote; writing it again"
                );
                // With nothing but the flags changed, the status the agent wants is the one it
                // had, so no new version is written: the syncer's reconcile (upstream
                // `needsReconcile`) writes it again now rather than at its next period. (Along
                // with the runtime's other changes, the sync above writes a new version.)
                if only_owned {
                    act.syncer.do_send(Reconcile);
                }
            }
        }));
    }

    fn delete(&mut self, pod: Pod) {
        let Some(uid) = PodUid::of(&pod) else { return };
        let pod = Arc::new(pod);
        self.pipeline.remove_pod(pod.clone());
        // The registry first: the history drops runs of pods the registry no longer knows.
        self.pods.remove(&uid);
        self.history.remove_pod(&uid);
        self.exec.forget(&pod);
        self.deleting.remove(&uid);
        self.deleting.shrink_after_removal();
        self.syncer.do_send(ApiPodDeleted {
            namespace: pod.metadata.namespace.clone().unwrap_or_default(),
            name: pod.metadata.name.clone().unwrap_or_default(),
            uid: pod.metadata.uid.clone(),
        });
        self.pipeline
            .remove_orphaned_statuses(self.pods.pods().iter().filter_map(|p| PodUid::of(p)).collect());
    }

    /// The status half of the kubelet's `SyncPod`, with the runtime's container states taken
    /// from the API status.
    fn sync(&mut self, pod: Arc<Pod>, ctx: &mut Context<Self>) {
        let Some(uid) = PodUid::of(&pod) else { return };
        if !self.syncs.begin(&uid) {
            return;
        }
        let deleting = pod.metadata.deletion_timestamp.is_some();
        if is_terminal(&pod) {
            // The kubelet never runs SyncPod for a finished pod: workers added here would stop
            // at their first probe. Stop any left from before the pod finished.
            self.pipeline.remove_pod(pod.clone());
        } else if !deleting {
            // Unlike the kubelet, which first syncs a pod before its containers run, the agent
            // meets pods whose containers already run: the workers must exist before the first
            // UpdatePodStatus, or a container with a readiness probe would be reported ready
            // before it was probed. Under MutableContainerProbes a pod update from the watch
            // that changed its probes is applied in place (docs/prober.md §3.9).
            if self.pipeline.feature_gates.enabled(Feature::MutableContainerProbes) {
                self.pipeline.reconcile_pod(pod.clone());
            } else {
                self.pipeline.add_pod(pod.clone());
            }
        }
        let pipeline = self.pipeline.clone();
        let restart_all_gate =
            self.pipeline.feature_gates.enabled(Feature::RestartAllContainersOnContainerExits);
        let fut = {
            let (pod, uid) = (pod.clone(), uid.clone());
            async move {
                // Upstream's `oldPodStatus`: the status manager's copy, else the API server's,
                // read before this status is stored. Under RestartAllContainersOnContainerExits
                // `Initialized` stays True once it was (docs/prober.md §3.11).
                let stored = pipeline
                    .versioned_status(&uid)
                    .await
                    .ok()
                    .flatten()
                    .and_then(|v| v.status.decode_logged());
                let old = restart_all_gate.then(|| stored.clone().or_else(|| pod.status.clone())).flatten();
                let mut status = pod.status.clone().unwrap_or_default();
                // The runtime may keep `started` by name when it replaces a container: it
                // stands only for the container the agent's last status shows, else the API
                // server's (after an agent restart), as the kubelet's since kubernetes#141342.
                keep_started_only_for_the_same_container(
                    &mut status,
                    stored.as_ref().or(pod.status.as_ref()),
                );
                let mut status = pipeline.update_pod_status(pod.clone(), status).await.ok()?;
                if is_terminal(&pod) {
                    // Its probes stopped at its first finished sync while its containers may
                    // still be killed: `started` and `ready` stay what they were (after an
                    // agent restart, what the API server's copy says).
                    keep_started_and_ready_once_finished(
                        &pod,
                        &mut status,
                        stored.as_ref().or(pod.status.as_ref()),
                    );
                } else if deleting {
                    // Liveness and startup have stopped: `started` stays what it was.
                    keep_started_while_terminating(&pod, &mut status, stored.as_ref());
                }
                Some((status, old))
            }
        };
        ctx.spawn(fut.into_actor(self).map(move |status, act, ctx| {
            if act.syncs.end(&uid)
                && let Some(latest) = act.pods.pod_by_uid(&uid)
            {
                // Asked for while this one ran: once more, after this status is stored (the
                // message below goes first).
                ctx.notify(SyncAgain(latest));
            }
            let Some((mut status, old)) = status else { return };
            // Deleted while the status was computed: a write now would re-create the status the
            // delete just removed, and the syncer would then GET the gone pod every reconcile.
            if act.pods.pod_by_uid(&uid).is_none() {
                return;
            }
            generate_kubelet_conditions(&pod, &mut status);
            if restart_all_gate && let Some(conditions) = status.conditions.as_mut() {
                keep_initialized_once_initialized(conditions, old.as_ref());
            }
            if !deleting && !is_terminal(&pod) {
                // ContainerLifecycleProber: the containers the runtime reports started or
                // stopped start or stop their probes (nothing with the gate off).
                act.pipeline.sync_container_probes(&pod, &status);
            }
            act.pipeline.set_pod_status(pod.clone(), status);
            if deleting {
                // Readiness goes on through termination; liveness and startup stop.
                act.pipeline.stop_liveness_and_startup(pod);
            }
        }));
    }

    /// A liveness or startup probe failed: with `--liveness-action delete-pod`, delete the pod
    /// as the kubelet would kill the container (`computePodActions`) — only when that container
    /// runs. The result may be about an instance that has exited or been replaced since, and
    /// such a container must not cost the pod. (Workers no longer write a liveness or startup
    /// Failure for a container that is not running: docs/prober.md §9.)
    fn liveness_failed(&mut self, change: &ProbeResultChanged, ctx: &mut Context<Self>) {
        let Some(pod) = self.pods.pod_by_uid(&change.pod_uid) else { return };
        let pod_name = pod.metadata.name.clone().unwrap_or_default();
        // The pod as every log line names it; the name alone is the DELETE's.
        let pod_label = probelet_actors::format::pod_ref(&pod);
        let Some(container) = running_container(&pod, &change.container_id) else {
            tracing::debug!(pod = %pod_label, container_id = %change.container_id, probe_kind = %change.kind, "Probe failure of a container that is not running; nothing to kill");
            return;
        };
        tracing::info!(pod = %pod_label, container = %container, container_id = %change.container_id, probe_kind = %change.kind, "Container failed its probe");
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
            preconditions: Some(kube::api::Preconditions {
                uid: Some(uid.to_string()),
                resource_version: None,
            }),
            ..Default::default()
        };
        let api: Api<Pod> =
            Api::namespaced(self.writes.clone(), pod.metadata.namespace.as_deref().unwrap_or("default"));
        let (limiter, pods, container_id) =
            (self.limiter.clone(), self.pods.clone(), change.container_id.clone());
        // The kubelet re-reads the liveness result on every pod sync and kills again until the
        // container is gone; the worker here is on hold after its Failure and reports nothing
        // new, so a failed DELETE must be retried here or never.
        // Resolves to whether the pod is gone or being deleted.
        let fut = async move {
            let mut backoff = Backoff::new(DELETE_BACKOFF_INITIAL, DELETE_BACKOFF_MAX);
            loop {
                limiter.acquire().await;
                let mut asked = Duration::ZERO;
                let err = match tokio::time::timeout(DELETE_TIMEOUT, api.delete(&pod_name, &params)).await {
                    Ok(Ok(_)) => return true,
                    Ok(Err(err)) => match delete_failure(&err) {
                        DeleteFailure::Settled => {
                            tracing::debug!(pod = %pod_label, error = %err, "Pod already gone or replaced; nothing to delete");
                            return true;
                        }
                        DeleteFailure::Permanent => {
                            tracing::error!(pod = %pod_label, error = %err, "Failed to delete the pod after its liveness probe failed");
                            return false;
                        }
                        DeleteFailure::Transient => {
                            // At least as long as a throttling server asked (its Retry-After).
                            asked =
                                retry_after(&err).map_or(Duration::ZERO, |wait| wait.min(RETRY_AFTER_MAX));
                            err.to_string()
                        }
                    },
                    Err(_) => format!("no answer within {}s", DELETE_TIMEOUT.as_secs()),
                };
                let wait = backoff.next_delay().max(asked);
                tracing::info!(pod = %pod_label, error = %err, retry_in = ?wait, "Failed to delete the pod after its liveness probe failed; retrying");
                tokio::time::sleep(wait).await;
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
/// One DELETE attempt's bound (the client's own gives up only on 30 s of silence, `cluster::bounded`).
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

/// The flags turned off that the agent's own status still has true: resets by another writer.
fn runtime_resets(
    desired: &k8s_openapi::api::core::v1::PodStatus,
    turned_off: &[(String, OwnedField)],
) -> Vec<OwnedField> {
    let statuses: Vec<_> = desired
        .container_statuses
        .iter()
        .flatten()
        .chain(desired.init_container_statuses.iter().flatten())
        .collect();
    turned_off
        .iter()
        .filter(|(id, field)| {
            statuses.iter().any(|cs| {
                cs.container_id.as_deref() == Some(id.as_str())
                    && match field {
                        OwnedField::Ready => cs.ready,
                        OwnedField::Started => cs.started == Some(true),
                    }
            })
        })
        .map(|(_, field)| *field)
        .collect()
}

/// Whether the pod's phase is Succeeded or Failed.
/// The Warning's message when the pod's probe timing annotation is invalid and new (a pod not
/// seen before, or an annotation that changed): the engine then probes with the seconds
/// fields (docs/probe-timing.md). A pod is not rejected in cluster mode: the API server has
/// admitted it and its containers run, so it is probed the kubelet's way rather than not at all.
fn invalid_timing(previous: Option<&Pod>, pod: &Pod) -> Option<String> {
    let annotation = |p: &Pod| p.metadata.annotations.as_ref()?.get(PROBE_TIMING_ANNOTATION).cloned();
    let value = annotation(pod)?;
    if previous.is_some_and(|p| annotation(p).as_ref() == Some(&value)) {
        return None;
    }
    let err = probe_timings(pod).err()?;
    Some(format!("{err}; probing with the probes' seconds fields"))
}

fn is_terminal(pod: &Pod) -> bool {
    matches!(pod.status.as_ref().and_then(|s| s.phase.as_deref()), Some(PHASE_SUCCEEDED | PHASE_FAILED))
}

/// The name of the container with this ID, if the pod's status shows it running.
fn running_container(pod: &Pod, id: &ContainerId) -> Option<String> {
    probelet_actors::container::running_status(pod.status.as_ref()?, id).map(|c| c.name.clone())
}

impl Actor for ClusterHost {
    type Context = Context<Self>;
}

impl StreamHandler<Result<WatchEvent<ApiPod>, watcher::Error>> for ClusterHost {
    fn handle(&mut self, event: Result<WatchEvent<ApiPod>, watcher::Error>, ctx: &mut Context<Self>) {
        match self.watch.on_event(event) {
            Some(PodWatchStep::Apply(pod, seen)) => self.apply(pod, seen, ctx),
            Some(PodWatchStep::Delete(pod)) => self.delete(pod.pod),
            Some(PodWatchStep::Listed(listed)) => {
                // Pods gone while the watch was down: stop probing them.
                let gone: Vec<Arc<Pod>> = self
                    .pods
                    .pods()
                    .into_iter()
                    .filter(|p| p.metadata.uid.as_deref().is_some_and(|u| !listed.contains(u)))
                    .collect();
                for pod in gone {
                    self.delete((*pod).clone());
                }
                self.pipeline.cleanup_pods(listed);
                self.ready.store(true, Ordering::SeqCst);
            }
            None => {}
        }
    }

    fn finished(&mut self, _ctx: &mut Context<Self>) {
        pod_watch_ended();
    }
}

/// A sync owed to a pod whose sync was running when it was asked for.
#[derive(Debug, Message)]
#[rtype(result = "()")]
struct SyncAgain(Arc<Pod>);

impl Handler<SyncAgain> for ClusterHost {
    type Result = ();

    fn handle(&mut self, SyncAgain(pod): SyncAgain, ctx: &mut Context<Self>) {
        self.sync(pod, ctx);
    }
}

impl Handler<StopHost> for ClusterHost {
    type Result = ();

    fn handle(&mut self, _msg: StopHost, ctx: &mut Context<Self>) {
        ctx.stop();
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

    #[test]
    fn only_pods_bound_to_the_node_are_the_agents() {
        let on = |node: Option<&str>| Pod {
            spec: Some(k8s_openapi::api::core::v1::PodSpec {
                node_name: node.map(Into::into),
                ..Default::default()
            }),
            ..Default::default()
        };
        assert!(bound_to(&on(Some("n1")), "n1"));
        assert!(!bound_to(&on(Some("n2")), "n1"));
        assert!(!bound_to(&on(None), "n1"), "not scheduled yet");
        assert!(!bound_to(&Pod::default(), "n1"));
    }

    /// One sync of a pod at a time: those asked for meanwhile come down to one, owed when it
    /// ends; other pods are not held back.
    #[test]
    fn syncs_asked_for_while_one_runs_come_down_to_one() {
        let mut syncs = SyncsInFlight::default();
        let (a, b) = (PodUid::from("a"), PodUid::from("b"));
        assert!(syncs.begin(&a));
        assert!(!syncs.begin(&a));
        assert!(!syncs.begin(&a));
        assert!(syncs.begin(&b), "another pod is not held back");
        assert!(syncs.end(&a), "one more sync of a is owed");
        assert!(syncs.begin(&a));
        assert!(!syncs.end(&a), "nothing asked for meanwhile");
        assert!(!syncs.end(&b));
    }

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

    #[test]
    fn an_invalid_timing_annotation_is_reported_once_per_value() {
        let with = |value: &str| {
            let mut pod = pod("Running");
            pod.metadata.annotations = Some([(PROBE_TIMING_ANNOTATION.to_owned(), value.to_owned())].into());
            pod
        };
        let bad = with(r#"{"nope": {}}"#);
        let message = invalid_timing(None, &bad).unwrap();
        assert_eq!(
            message,
            "annotation probelet.dev/probe-timing: nope: the pod has no container or sidecar named \"nope\"; \
             probing with the probes' seconds fields"
        );
        assert_eq!(invalid_timing(Some(&bad), &bad), None, "the same value again: already reported");
        let other = with(r#"{"other": {}}"#);
        assert!(invalid_timing(Some(&bad), &other).is_some(), "a changed value is reported");
        assert_eq!(invalid_timing(None, &pod("Running")), None, "no annotation");
        assert_eq!(invalid_timing(None, &with("{}")), None, "a valid annotation");
    }
}
