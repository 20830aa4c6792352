//! The readiness-gate host: feeds the engine a derived pod per gated pod from the pod watch,
//! turns the gate probes' results into the gate condition, and writes that condition alone.

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use actix::prelude::*;
use k8s_openapi::api::core::v1::{Pod, PodCondition};
use kube::api::{Api, Patch, PatchParams};
use kube::runtime::watcher::{self, Event as WatchEvent};
use probelet_actors::Pipeline;
use probelet_actors::capacity::ShrinkAfterRemoval;
use probelet_actors::clock::SharedClock;
use probelet_actors::container::ContainerId;
use probelet_actors::contracts::{EventRecorder, EventType, PodRegistry};
use probelet_actors::prober::{ProbeKind, ProbeResult, pod_reference};
use probelet_actors::results::ProbeResultChanged;
use probelet_actors::status::generate::{PHASE_FAILED, PHASE_SUCCEEDED};
use probelet_actors::sync::api_pod::ApiPod;
use probelet_actors::sync::rate::RateLimiter;
use probelet_actors::sync::rules::retry_after;
use probelet_actors::sync::syncer::{FAILURE_BACKOFF_INITIAL, FAILURE_BACKOFF_MAX};
use probelet_actors::sync::{Retry, next_failure};
use probelet_actors::vocabulary::PodUid;

use super::annotation::{GateProbe, READINESS_PROBES_ANNOTATION, parse_gate_probes};
use super::condition::{
    FIELD_MANAGER, GATE_CONDITION, REASON_INVALID_PROBES, Verdict, apply_body, current_condition, desired,
    next_condition, observed_generation,
};
use super::derived::{containers_not_running, derived_pod, derived_status, exec_targets};
use crate::cluster::exec::ExecRunner;
use crate::cluster::watch::{PodWatchState, PodWatchStep, Seen, pod_watch_ended};

/// How often every gated pod's condition is compared with what it should say, so a write that
/// failed is made again (the status manager's reconcile period).
pub const RECONCILE_PERIOD: Duration = Duration::from_secs(10);

/// One write's bound (the client's own gives up only on 30 s of silence, `cluster::bounded`).
const WRITE_TIMEOUT: Duration = Duration::from_secs(30);

/// Feeds the engine from the watch and writes the gate condition.
pub struct GateHost {
    /// For the condition's write: the client without kube's retry ([`crate::cluster::Clients`]);
    /// a failed write is made again when its back-off is over ([`GatedPod`]'s `retry`).
    pub writes: kube::Client,
    pub pipeline: Pipeline,
    /// The derived pods, which the engine looks pods up in.
    pub pods: PodRegistry,
    /// Exec gate probes through `pods/exec`; `None` when they are not offered.
    pub exec: Option<ExecRunner>,
    /// Where the warning about an unusable annotation goes.
    pub recorder: Arc<dyn EventRecorder>,
    /// The budget of the condition writes (`--qps`/`--burst`).
    pub limiter: RateLimiter,
    pub clock: SharedClock,
    pub ready: Arc<AtomicBool>,
    /// The watch's own bookkeeping: the lost/back log lines, the UIDs the current list showed.
    pub watch: PodWatchState,
    /// The pods with the gate, by UID.
    pub gated: HashMap<PodUid, GatedPod>,
}

/// What an evaluation of a gated pod leads to ([`GatedPod::next_step`]).
#[derive(Debug, PartialEq)]
enum Step {
    /// Nothing to write now.
    Done,
    /// A write, once the failure back-off is over at this instant.
    Wait(tokio::time::Instant),
    /// The condition's write, now.
    Write,
}

/// Everything the host keeps about one gated pod.
pub struct GatedPod {
    /// The API server's latest copy.
    pod: Arc<Pod>,
    /// The annotation value the probes were read from; `None` until read once.
    annotation: Option<Option<String>>,
    /// The probes, or why the annotation cannot be used.
    probes: Result<Vec<GateProbe>, String>,
    /// The pod the engine probes, while the probes are valid.
    derived: Option<Arc<Pod>>,
    /// Each gate probe's name and container ID in the derived status.
    gate_ids: Vec<(String, ContainerId)>,
    /// The last condition written, with the resourceVersion the write produced.
    written: Option<(PodCondition, Option<u64>)>,
    /// A write is in flight; `again` when the verdict may have changed since it started.
    writing: bool,
    again: bool,
    /// The pod's probes changed since this agent first probed it: a probe without a result
    /// then is a new probe that has not succeeded, not one waiting for its first run after an
    /// agent restart, and the condition written for the old probes is not kept for it.
    probes_changed: bool,
    /// Until when a probe without a result may keep the condition already written: long enough
    /// for every probe's first run after an agent restart ([`pending_window`]), and no longer,
    /// so that probes that changed while the agent was down, or that only error, cannot keep
    /// an old verdict for good. `None` until the probes were first read.
    pending_until: Option<tokio::time::Instant>,
    /// The failure back-off of the condition's write: failures in a row, and no write before
    /// `not_before` (at least what a 429's or 5xx's `Retry-After` asked).
    retry: Option<Retry>,
    /// The timer that evaluates the pod again when the back-off is over.
    retry_timer: Option<SpawnHandle>,
}

impl GatedPod {
    fn new(pod: Arc<Pod>) -> Self {
        GatedPod {
            pod,
            annotation: None,
            probes: Ok(Vec::new()),
            derived: None,
            gate_ids: Vec::new(),
            written: None,
            writing: false,
            again: false,
            probes_changed: false,
            pending_until: None,
            retry: None,
            retry_timer: None,
        }
    }

    /// What comes of an evaluation that wants the condition written (`wants_write`) or finds
    /// it already says the verdict. Nothing to write means the failures before are over
    /// (another write landed, or the verdict came back to what was written): the next failure
    /// backs off from the start. A write in flight is followed by another evaluation. After a
    /// failed write the next waits for its back-off, whatever asks for it (a probe's change,
    /// the reconcile): a server that answered 429 with `Retry-After` is not written to sooner,
    /// and a failing one not at every change.
    fn next_step(&mut self, wants_write: bool, now: tokio::time::Instant) -> Step {
        if !wants_write {
            if !self.writing {
                self.retry = None;
            }
            return Step::Done;
        }
        if self.writing {
            self.again = true;
            return Step::Done;
        }
        match self.retry.filter(|retry| retry.not_before > now) {
            Some(retry) => Step::Wait(retry.not_before),
            None => Step::Write,
        }
    }

    /// A copy from a (re-)list older than the version the last write produced: the
    /// resourceVersions went back (an etcd restored from a backup) or the list was answered
    /// just before the write (docs/sync.md §7.4). The condition written says nothing of what the server
    /// holds any more; the listed copy's does. Without this the written condition was taken as
    /// the server's until the restored counter passed the write's version, and a condition the
    /// restore took away was not written again.
    fn listed(&mut self, pod: &Pod) {
        if let (Some((_, Some(written))), Some(seen)) = (&self.written, resource_version(pod))
            && seen < *written
        {
            self.written = None;
        }
    }

    /// The condition as it stands: the one written last, unless the watch has shown a newer
    /// version of the pod since (someone else may have changed or removed it).
    fn base(&self) -> Option<&PodCondition> {
        let seen = resource_version(&self.pod);
        match &self.written {
            Some((condition, Some(written))) if seen.is_none_or(|seen| seen <= *written) => Some(condition),
            _ => current_condition(&self.pod),
        }
    }
}

/// How long after the agent first reads a pod's probes a probe may go without a result before
/// it counts as not ready: its initial delay, a period (the worker's start-up jitter) and its
/// timeout, the longest of the pod's probes, and 10 s for the watch and the engine to start.
pub fn pending_window(probes: &[GateProbe]) -> Duration {
    let seconds = |value: Option<i32>, default: i32| u64::try_from(value.unwrap_or(default)).unwrap_or(0);
    let longest = probes
        .iter()
        .map(|p| {
            seconds(p.probe.initial_delay_seconds, 0)
                .saturating_add(seconds(p.probe.period_seconds, 10))
                .saturating_add(seconds(p.probe.timeout_seconds, 1))
        })
        .max()
        .unwrap_or(0);
    Duration::from_secs(longest.saturating_add(10))
}

fn resource_version(pod: &Pod) -> Option<u64> {
    pod.metadata.resource_version.as_deref()?.parse().ok()
}

/// Whether the pod lists the gate condition in `spec.readinessGates`.
pub fn has_gate(pod: &Pod) -> bool {
    pod.spec
        .as_ref()
        .and_then(|s| s.readiness_gates.as_ref())
        .is_some_and(|gates| gates.iter().any(|g| g.condition_type == GATE_CONDITION))
}

fn is_terminal(pod: &Pod) -> bool {
    matches!(pod.status.as_ref().and_then(|s| s.phase.as_deref()), Some(PHASE_SUCCEEDED | PHASE_FAILED))
}

impl GateHost {
    fn apply(&mut self, observed: ApiPod, seen: Seen, ctx: &mut Context<Self>) {
        let pod = Arc::new(observed.pod);
        let Some(uid) = PodUid::of(&pod) else { return };
        if !has_gate(&pod) || is_terminal(&pod) {
            // Never gated, or finished: nothing to probe, nothing to write.
            self.forget(&uid, ctx);
            return;
        }
        let exec_allowed = self.exec.is_some();
        let entry = self.gated.entry(uid.clone()).or_insert_with(|| GatedPod::new(pod.clone()));
        if seen == Seen::Listed {
            entry.listed(&pod);
        }
        entry.pod = pod.clone();
        let annotation =
            pod.metadata.annotations.as_ref().and_then(|a| a.get(READINESS_PROBES_ANNOTATION)).cloned();
        if entry.annotation.as_ref() != Some(&annotation) {
            let spec = pod.spec.clone().unwrap_or_default();
            entry.probes = match &annotation {
                None => Err(format!("annotation {READINESS_PROBES_ANNOTATION} is missing")),
                Some(value) => parse_gate_probes(value, &spec, exec_allowed).map_err(|e| e.to_string()),
            };
            entry.annotation = Some(annotation);
            if let Err(why) = &entry.probes {
                tracing::warn!(pod = %probelet_actors::format::pod_ref(&pod), pod_uid = %uid, "{why}");
                self.recorder.record(&pod_reference(&pod), EventType::Warning, REASON_INVALID_PROBES, why);
            }
        }
        self.sync(&uid, ctx);
    }

    /// Hands the engine the derived pod and its status (the kubelet's `SyncPod`, for the gate
    /// containers), then re-evaluates the condition.
    fn sync(&mut self, uid: &str, ctx: &mut Context<Self>) {
        let Some(entry) = self.gated.get_mut(uid) else { return };
        let probes = match &entry.probes {
            Ok(probes) => probes.clone(),
            Err(_) => {
                if let Some(derived) = entry.derived.take() {
                    self.pipeline.remove_pod(derived);
                    self.pods.remove(uid);
                }
                entry.gate_ids.clear();
                self.evaluate(uid, ctx);
                return;
            }
        };
        if entry.pending_until.is_none() {
            let window = pending_window(&probes);
            entry.pending_until = Some(tokio::time::Instant::now() + window);
            let uid = PodUid::from(uid);
            // The verdict may change when the window closes with nothing else happening.
            ctx.run_later(window, move |act, ctx| act.evaluate(&uid, ctx));
        }
        let derived = Arc::new(derived_pod(&entry.pod, &probes));
        if let Some(old) = entry.derived.as_ref().filter(|old| {
            old.spec != derived.spec || old.metadata.annotations != derived.metadata.annotations
        }) {
            // Other probes: their workers go, the new ones start from scratch (their gate
            // containers' IDs change with them, so no result of an old probe counts).
            self.pipeline.remove_pod(old.clone());
            entry.probes_changed = true;
        }
        let status = derived_status(&entry.pod, &probes);
        entry.gate_ids = status
            .container_statuses
            .iter()
            .flatten()
            .map(|cs| (cs.name.clone(), ContainerId::parse(cs.container_id.as_deref().unwrap_or_default())))
            .collect();
        entry.derived = Some(derived.clone());
        if let Some(exec) = &self.exec {
            exec.learn(&exec_targets(&entry.pod, &probes, &status));
        }
        self.pods.upsert(derived.clone());
        self.pipeline.add_pod(derived.clone());
        let pipeline = self.pipeline.clone();
        let fut = {
            let derived = derived.clone();
            async move { pipeline.update_pod_status(derived, status).await.ok() }
        };
        let uid = PodUid::from(uid);
        ctx.spawn(fut.into_actor(self).map(move |status, act, ctx| {
            // Gone while the status was computed: storing it now would keep a status nobody
            // removes.
            let Some(entry) = act.gated.get(&uid) else { return };
            if let Some(status) = status
                && entry.derived.as_ref().is_some_and(|d| Arc::ptr_eq(d, &derived))
            {
                act.pipeline.set_pod_status(derived, status);
            }
            act.evaluate(&uid, ctx);
        }));
    }

    /// What the condition should say now, written if it says something else.
    fn evaluate(&mut self, uid: &str, ctx: &mut Context<Self>) {
        let Some(entry) = self.gated.get_mut(uid) else { return };
        let verdict = match &entry.probes {
            Err(why) => Verdict::Invalid(why.clone()),
            Ok(probes) => {
                let not_running = containers_not_running(&entry.pod);
                if !not_running.is_empty() {
                    Verdict::ContainersNotRunning { containers: not_running }
                } else {
                    // By probe, so a probe without a gate container yet counts as not run.
                    let results: Vec<_> = probes
                        .iter()
                        .map(|p| {
                            let id =
                                entry.gate_ids.iter().find(|(name, _)| *name == p.name).map(|(_, id)| id);
                            (
                                &p.name,
                                id.and_then(|id| self.pipeline.results_view.get(ProbeKind::Readiness, id)),
                            )
                        })
                        .collect();
                    let unready: Vec<String> = results
                        .iter()
                        .filter(|(_, r)| *r != Some(ProbeResult::Success))
                        .map(|(name, _)| (*name).clone())
                        .collect();
                    if unready.is_empty() {
                        Verdict::Ready { probes: probes.len() }
                    } else {
                        // Pending: nothing has failed, some have not run since the agent
                        // started (not since the probes changed: see `probes_changed`).
                        let pending = !entry.probes_changed
                            && entry.pending_until.is_some_and(|until| tokio::time::Instant::now() < until)
                            && results.iter().any(|(_, r)| r.is_none())
                            && results.iter().all(|(_, r)| matches!(r, None | Some(ProbeResult::Success)));
                        Verdict::NotReady { unready, pending }
                    }
                }
            }
        };
        let base = entry.base();
        let condition = desired(&verdict, base).and_then(|desired| {
            next_condition(base, &desired, observed_generation(&entry.pod), self.clock.now_time())
        });
        let now = tokio::time::Instant::now();
        let condition = match (entry.next_step(condition.is_some(), now), condition) {
            (Step::Write, Some(condition)) => condition,
            (Step::Wait(until), _) => {
                if entry.retry_timer.is_none() {
                    let uid = PodUid::from(uid);
                    entry.retry_timer = Some(ctx.run_later(until - now, move |act, ctx| {
                        if let Some(entry) = act.gated.get_mut(&uid) {
                            entry.retry_timer = None;
                        }
                        act.evaluate(&uid, ctx);
                    }));
                }
                return;
            }
            _ => return,
        };
        entry.writing = true;
        let pod = entry.pod.clone();
        let (name, namespace) = (
            pod.metadata.name.clone().unwrap_or_default(),
            pod.metadata.namespace.clone().unwrap_or_else(|| "default".into()),
        );
        let body = apply_body(&name, uid, &condition);
        let api: Api<Pod> = Api::namespaced(self.writes.clone(), &namespace);
        let limiter = self.limiter.clone();
        let fut = async move {
            limiter.acquire().await;
            let params = PatchParams::apply(FIELD_MANAGER).force();
            match tokio::time::timeout(WRITE_TIMEOUT, api.patch_status(&name, &params, &Patch::Apply(&body)))
                .await
            {
                Ok(Ok(pod)) => Ok(resource_version(&pod)),
                Ok(Err(err)) => Err((err.to_string(), retry_after(&err))),
                Err(_) => Err((format!("no answer within {}s", WRITE_TIMEOUT.as_secs()), None)),
            }
        };
        let uid = PodUid::from(uid);
        ctx.spawn(fut.into_actor(self).map(move |result, act, ctx| {
            let Some(entry) = act.gated.get_mut(&uid) else { return };
            entry.writing = false;
            let pod_name = probelet_actors::format::pod_ref(&entry.pod);
            match result {
                Ok(version) => {
                    tracing::debug!(pod = %pod_name, pod_uid = %uid, status = %condition.status, reason = ?condition.reason, "Wrote the readiness gate condition");
                    entry.written = Some((condition, version));
                    entry.retry = None;
                }
                // Retried when the back-off is over (the syncer's: 0.5 s doubling to 10 s,
                // jittered by the UID, at least the `Retry-After`). A pod that is gone or was
                // recreated (404; 422 on the UID) leaves through the watch.
                Err((error, retry_after)) => {
                    tracing::warn!(pod = %pod_name, pod_uid = %uid, %error, "Failed to write the readiness gate condition");
                    let backoff = (FAILURE_BACKOFF_INITIAL, FAILURE_BACKOFF_MAX);
                    let now = tokio::time::Instant::now();
                    entry.retry = Some(next_failure(entry.retry, now, backoff, retry_after, &uid));
                    entry.again = true;
                }
            }
            if std::mem::take(&mut entry.again) {
                act.evaluate(&uid, ctx);
            }
        }));
    }

    /// Stops probing a pod that is gone, finished or no longer gated.
    fn forget(&mut self, uid: &str, ctx: &mut Context<Self>) {
        let Some(entry) = self.gated.remove(uid) else { return };
        if let Some(timer) = entry.retry_timer {
            ctx.cancel_future(timer);
        }
        self.gated.shrink_after_removal();
        if let Some(derived) = entry.derived {
            self.pipeline.remove_pod(derived);
        }
        self.pods.remove(uid);
        if let Some(exec) = &self.exec {
            exec.forget(&entry.pod);
        }
        self.pipeline.remove_orphaned_statuses(self.gated.keys().cloned().collect());
    }
}

impl Actor for GateHost {
    type Context = Context<Self>;

    fn started(&mut self, ctx: &mut Context<Self>) {
        ctx.run_interval(RECONCILE_PERIOD, |act, ctx| {
            let uids: Vec<PodUid> = act.gated.keys().cloned().collect();
            for uid in uids {
                act.evaluate(&uid, ctx);
            }
        });
    }
}

impl StreamHandler<Result<WatchEvent<ApiPod>, watcher::Error>> for GateHost {
    fn handle(&mut self, event: Result<WatchEvent<ApiPod>, watcher::Error>, ctx: &mut Context<Self>) {
        match self.watch.on_event(event) {
            Some(PodWatchStep::Apply(pod, seen)) => self.apply(pod, seen, ctx),
            Some(PodWatchStep::Delete(pod)) => {
                if let Some(uid) = pod.pod.metadata.uid.as_deref() {
                    self.forget(uid, ctx);
                }
            }
            Some(PodWatchStep::Listed(listed)) => {
                let gone: Vec<PodUid> = self.gated.keys().filter(|u| !listed.contains(*u)).cloned().collect();
                for uid in gone {
                    self.forget(&uid, ctx);
                }
                self.pipeline.cleanup_pods(self.gated.keys().cloned().collect());
                self.ready.store(true, Ordering::SeqCst);
            }
            None => {}
        }
    }

    fn finished(&mut self, _ctx: &mut Context<Self>) {
        pod_watch_ended();
    }
}

impl Handler<ProbeResultChanged> for GateHost {
    type Result = ();

    fn handle(&mut self, msg: ProbeResultChanged, ctx: &mut Context<Self>) {
        if msg.kind == ProbeKind::Readiness && self.gated.contains_key(&msg.pod_uid) {
            self.evaluate(&msg.pod_uid, ctx);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::{PodReadinessGate, PodSpec, PodStatus};

    #[test]
    fn the_gate_is_opted_into_by_its_condition_type() {
        let with = |types: &[&str]| Pod {
            spec: Some(PodSpec {
                readiness_gates: Some(
                    types.iter().map(|t| PodReadinessGate { condition_type: (*t).into() }).collect(),
                ),
                ..Default::default()
            }),
            ..Default::default()
        };
        assert!(has_gate(&with(&["example.com/x", "probelet.dev/ready"])));
        assert!(!has_gate(&with(&["example.com/x"])));
        assert!(!has_gate(&Pod::default()));
    }

    #[test]
    fn a_failed_write_waits_its_back_off_until_the_verdict_comes_back_to_what_was_written() {
        let mut entry = GatedPod::new(Arc::new(Pod::default()));
        let now = tokio::time::Instant::now();
        assert_eq!(entry.next_step(true, now), Step::Write);
        let backoff = (FAILURE_BACKOFF_INITIAL, FAILURE_BACKOFF_MAX);
        let failed = next_failure(None, now, backoff, None, "uid");
        entry.retry = Some(failed);
        assert_eq!(entry.next_step(true, now), Step::Wait(failed.not_before), "within the back-off");
        assert_eq!(entry.next_step(true, failed.not_before), Step::Write, "once it is over");
        // While a write is in flight, the condition already saying the verdict ends nothing:
        // that write may fail too.
        entry.writing = true;
        assert_eq!(entry.next_step(false, now), Step::Done);
        assert_eq!(entry.retry, Some(failed));
        assert_eq!(entry.next_step(true, now), Step::Done);
        assert!(entry.again, "evaluated again when the write in flight ends");
        entry.writing = false;
        // The verdict came back to what was written: the failures are over, and the next
        // change is written at once, its failure backing off from the start.
        assert_eq!(entry.next_step(false, now), Step::Done);
        assert_eq!(entry.retry, None);
        assert_eq!(entry.next_step(true, now), Step::Write);
        assert_eq!(next_failure(entry.retry, now, backoff, None, "uid").count, 1);
    }

    #[test]
    fn the_written_condition_is_the_base_until_the_watch_shows_a_newer_pod() {
        let condition = |status: &str| PodCondition {
            type_: GATE_CONDITION.into(),
            status: status.into(),
            ..Default::default()
        };
        let pod = |rv: &str, status: &str| {
            let mut pod = Pod {
                status: Some(PodStatus { conditions: Some(vec![condition(status)]), ..Default::default() }),
                ..Default::default()
            };
            pod.metadata.resource_version = Some(rv.into());
            Arc::new(pod)
        };
        let mut entry = GatedPod::new(pod("5", "False"));
        assert_eq!(entry.base().map(|c| c.status.as_str()), Some("False"), "nothing written: the API's");
        entry.written = Some((condition("True"), Some(7)));
        assert_eq!(entry.base().map(|c| c.status.as_str()), Some("True"), "an older watch event");
        entry.pod = pod("7", "True");
        assert_eq!(entry.base().map(|c| c.status.as_str()), Some("True"));
        entry.pod = pod("9", "False");
        assert_eq!(entry.base().map(|c| c.status.as_str()), Some("False"), "changed by someone else since");
    }
}
