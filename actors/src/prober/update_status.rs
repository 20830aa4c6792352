//! `UpdatePodStatus`'s decisions (upstream `prober_manager.go` `UpdatePodStatus`,
//! `isContainerStarted`), as a pure function over what the prober manager knows: which
//! workers exist for the pod and what the results caches hold for its containers.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;

use k8s_openapi::api::core::v1::{Container, ContainerStatus, Pod, PodStatus};
use k8s_openapi::jiff::Timestamp;

use super::do_probe::started_before_manager;
use super::{ProbeKind, ProbeResult};
use crate::container::ContainerId;
use crate::status::by_name::ByName;
use crate::status::{POD_READY, is_restartable_init_container};

/// What the prober knows about one pod when its status is being generated.
#[derive(Debug, Clone, Default)]
pub struct ProbeView {
    /// (container name, kind) of every worker of the pod, stopping ones included.
    pub workers: HashSet<(Arc<str>, ProbeKind)>,
    /// Cached results by (kind, container ID).
    pub results: HashMap<(ProbeKind, ContainerId), ProbeResult>,
    /// When the prober manager started (wall clock).
    pub manager_start: Timestamp,
    /// `ChangeContainerStatusOnKubeletRestart`: ignore what an agent restart would preserve
    /// (the container's `started`, the API's readiness) as kubelets before KEP-4781 did.
    pub change_status_on_restart: bool,
}

impl ProbeView {
    fn result(&self, kind: ProbeKind, id: &ContainerId) -> Option<ProbeResult> {
        self.results.get(&(kind, id.clone())).copied()
    }

    fn has_worker(&self, name: &str, kind: ProbeKind) -> bool {
        // A pod has a few workers: a scan, where a lookup would copy the name into a key. A pod
        // of thousands would make the scan per container quadratic: 1,500 containers cost
        // 2 million comparisons per status generated.
        if self.workers.len() <= SCAN_WORKERS_UP_TO {
            self.workers.iter().any(|(n, k)| **n == *name && *k == kind)
        } else {
            self.workers.contains(&(Arc::from(name), kind))
        }
    }
}

/// Workers of a pod up to which [`ProbeView::has_worker`] scans rather than looks up.
const SCAN_WORKERS_UP_TO: usize = 16;

/// The (kind, container ID) pairs whose cached results [`update_pod_status`] reads.
pub fn result_keys(status: &PodStatus) -> Vec<(ProbeKind, ContainerId)> {
    let mut keys = Vec::new();
    for cs in
        status.container_statuses.iter().flatten().chain(status.init_container_statuses.iter().flatten())
    {
        let id = container_id(cs);
        keys.push((ProbeKind::Startup, id.clone()));
        keys.push((ProbeKind::Readiness, id));
    }
    keys
}

/// Sets `started` and `ready` on a status being generated. Returns the names of containers
/// whose readiness worker should probe now: started, with a readiness worker, and not ready
/// per the cache (upstream's manual trigger).
pub fn update_pod_status(pod: &Pod, status: &mut PodStatus, view: &ProbeView) -> Vec<String> {
    let spec = crate::status::spec_of(pod);
    let api_ready = pod
        .status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .and_then(|c| c.iter().find(|c| c.type_ == POD_READY))
        .is_some_and(|c| c.status == "True");
    let api_statuses = pod.status.as_ref().and_then(|s| s.container_statuses.as_deref()).unwrap_or_default();
    let api_init_statuses =
        pod.status.as_ref().and_then(|s| s.init_container_statuses.as_deref()).unwrap_or_default();
    let mut triggers = Vec::new();
    let api_statuses = ByName::new(api_statuses);
    let containers = ByName::new(&spec.containers);

    for cs in status.container_statuses.iter_mut().flatten() {
        let started = is_container_started(cs, view);
        cs.started = Some(started);
        if !started {
            continue;
        }
        let container = containers.get(&cs.name);
        cs.ready = readiness(cs, container, view, api_ready, &api_statuses, &mut triggers);
    }

    let init_containers = spec.init_containers.as_deref().unwrap_or_default();
    let api_init_statuses = ByName::new(api_init_statuses);
    for (i, cs) in status.init_container_statuses.iter_mut().flatten().enumerate() {
        let started = is_container_started(cs, view);
        cs.started = Some(started);
        let Some(container) = init_containers.get(i).filter(|c| c.name == cs.name) else {
            tracing::trace!(
                pod = crate::format::pod_ref(pod),
                containerName = cs.name.as_str(),
                "Mismatch between pod spec and status, likely programmer error"
            );
            continue;
        };
        if !is_restartable_init_container(container) {
            if cs.state.as_ref().and_then(|s| s.terminated.as_ref()).is_some_and(|t| t.exit_code == 0) {
                cs.ready = true;
            }
            continue;
        }
        if !started {
            continue;
        }
        cs.ready = readiness(cs, Some(container), view, api_ready, &api_init_statuses, &mut triggers);
    }
    triggers
}

/// Upstream `isContainerStarted`.
fn is_container_started(cs: &ContainerStatus, view: &ProbeView) -> bool {
    if !is_running(cs) {
        return false;
    }
    if let Some(result) = view.result(ProbeKind::Startup, &container_id(cs)) {
        return result == ProbeResult::Success;
    }
    // Already started before (kept across an agent restart).
    if !view.change_status_on_restart && cs.started == Some(true) {
        return true;
    }
    !view.has_worker(&cs.name, ProbeKind::Startup)
}

fn readiness(
    cs: &ContainerStatus,
    container: Option<&Container>,
    view: &ProbeView,
    api_ready: bool,
    api_statuses: &ByName<'_, ContainerStatus>,
    triggers: &mut Vec<String>,
) -> bool {
    if !is_running(cs) {
        return false;
    }
    let id = container_id(cs);
    let cached = view.result(ProbeKind::Readiness, &id);
    if cached == Some(ProbeResult::Success) {
        return true;
    }
    let mut ready = if view.has_worker(&cs.name, ProbeKind::Readiness) {
        triggers.push(cs.name.clone());
        false
    } else {
        true
    };
    if !view.change_status_on_restart && started_before_manager(running_since(cs), view.manager_start) {
        let inheritable = can_inherit_probe_state(cs, api_statuses);
        if !ready && cached.is_none() && inheritable {
            ready = true;
        }
        let has_probe = container.is_some_and(|c| c.readiness_probe.is_some());
        if has_probe && (!api_ready || !inheritable) {
            ready = false;
        }
    }
    ready
}

/// Upstream `canInheritProbeState`: not when the API status names a different container ID
/// for this container (it was replaced while the API server could not be told).
fn can_inherit_probe_state(cs: &ContainerStatus, api_statuses: &ByName<'_, ContainerStatus>) -> bool {
    let runtime_id = cs.container_id.as_deref().unwrap_or_default();
    if runtime_id.is_empty() {
        return true;
    }
    api_statuses.get(&cs.name).is_none_or(|api| {
        let api_id = api.container_id.as_deref().unwrap_or_default();
        api_id.is_empty() || api_id == runtime_id
    })
}

fn is_running(cs: &ContainerStatus) -> bool {
    cs.state.as_ref().is_some_and(|s| s.running.is_some())
}

/// When the container's running state says it started.
fn running_since(cs: &ContainerStatus) -> Option<Timestamp> {
    cs.state.as_ref().and_then(|s| s.running.as_ref()).and_then(|r| r.started_at.as_ref()).map(|t| t.0)
}

fn container_id(cs: &ContainerStatus) -> ContainerId {
    ContainerId::parse(cs.container_id.as_deref().unwrap_or_default())
}

/// For a status generated while its pod terminates, after `StopLivenessAndStartup`: puts back
/// the `started` of each running container that `pod` gives a startup probe as `stored` (the
/// status manager's current status) has it for the same container ID, never started when it
/// is not there, and a container not started is not ready. A container without a startup
/// probe keeps what [`update_pod_status`] gave it: started once running, as the kubelet
/// calls it with or without workers.
///
/// Upstream calls `UpdatePodStatus` before `StopLivenessAndStartup` and again only once the
/// containers are dead (docs/prober.md §3.6). A host that regenerates in between (probelet's do,
/// on every container exit) would find no startup worker and call every running container
/// started, and ready when it has no readiness probe: a pod whose startup probe never succeeded
/// would turn Ready while it is being killed (docs/prober.md §9).
pub fn keep_started_while_terminating(pod: &Pod, status: &mut PodStatus, stored: Option<&PodStatus>) {
    with_previous_by_name(status, stored, |cs, stored| {
        // Without a startup probe, started once running, worker or none (upstream).
        if !is_running(cs) || !own_probes(pod, &cs.name).startup {
            return;
        }
        let started = stored
            .filter(|old| old.container_id.is_some() && old.container_id == cs.container_id)
            .is_some_and(|old| old.started == Some(true));
        cs.started = Some(started);
        if !started {
            cs.ready = false;
        }
    });
}

/// For a status generated once its pod is finished (`Succeeded` or `Failed`) while some of its
/// containers still run (killed after the pod's active deadline, or reported finished before
/// they stopped): puts back each running container's `started` (when `pod` gives it a startup
/// probe) and `ready` (a readiness probe) as `stored` (the status manager's current status) has
/// them for the same container ID, neither when it is not there. A container with no such
/// probe keeps what [`update_pod_status`] gave it, which is what the kubelet says of it with or
/// without workers (started once running; ready once started), and a container not started is
/// not ready.
///
/// A finished pod's probe workers are removed at its first finished sync, where upstream
/// removes them only once its containers are dead (`SyncTerminatingPod`, after the kill) and
/// generates no status in between (docs/prober.md §3.6, §9). Without a worker, every running container reads started,
/// and ready: a container whose startup probe never passed, or whose readiness probe fails,
/// would turn ready on a failed pod at the host's next sync.
pub fn keep_started_and_ready_once_finished(pod: &Pod, status: &mut PodStatus, stored: Option<&PodStatus>) {
    with_previous_by_name(status, stored, |cs, stored| {
        if !is_running(cs) {
            return;
        }
        let OwnProbes { startup, readiness } = own_probes(pod, &cs.name);
        let same = stored.filter(|old| old.container_id.is_some() && old.container_id == cs.container_id);
        if startup {
            cs.started = Some(same.is_some_and(|old| old.started == Some(true)));
        }
        let started = cs.started == Some(true);
        cs.ready = started && if readiness { same.is_some_and(|old| old.ready) } else { cs.ready };
    });
}

/// Which of the probes that decide `started` and `ready` the pod's spec gives a container.
struct OwnProbes {
    startup: bool,
    readiness: bool,
}

fn own_probes(pod: &Pod, name: &str) -> OwnProbes {
    let spec = pod.spec.as_ref();
    let containers = spec.map(|s| s.containers.as_slice()).unwrap_or_default();
    let init = spec.and_then(|s| s.init_containers.as_deref()).unwrap_or_default();
    containers.iter().chain(init).find(|c| c.name == name).map_or(
        OwnProbes { startup: false, readiness: false },
        |c| OwnProbes { startup: c.startup_probe.is_some(), readiness: c.readiness_probe.is_some() },
    )
}

/// Calls `each` with every container status of `status` and the one `previous` lists under its
/// name (init containers among init containers, regular among regular).
fn with_previous_by_name(
    status: &mut PodStatus,
    previous: Option<&PodStatus>,
    mut each: impl FnMut(&mut ContainerStatus, Option<&ContainerStatus>),
) {
    let previous_init =
        ByName::new(previous.and_then(|s| s.init_container_statuses.as_deref()).unwrap_or_default());
    let previous_regular =
        ByName::new(previous.and_then(|s| s.container_statuses.as_deref()).unwrap_or_default());
    let lists = [
        (&mut status.init_container_statuses, &previous_init),
        (&mut status.container_statuses, &previous_regular),
    ];
    for (statuses, previous) in lists {
        for cs in statuses.iter_mut().flatten() {
            let old = previous.get(&cs.name);
            each(cs, old);
        }
    }
}

/// For a status about to go through [`update_pod_status`], what it may carry over from the
/// container instances `previous` (the status manager's copy, else the API server's) shows: for
/// a container listed there with the same ID, `started` is `previous`'s, whether this status
/// carries one or not (the kubelet's generated status takes it from the previous one alone);
/// for any other (a replacement, an unlisted one, one without an ID) neither `started` nor
/// `ready` is carried over. A container whose carried `started` is then not true is not ready.
///
/// `update_pod_status` takes a `started: true` it is handed as the container having passed its
/// startup probe before an agent restart, and leaves the `ready` of a container not started as
/// it came. A status that carries them over by container name, as a runtime that keeps the
/// fields it does not own writes it, would hand a replacement container its predecessor's:
/// liveness and readiness would probe it before its startup probe passed, and the pod be Ready
/// meanwhile. The kubelet carries `started` over only for the same container ID
/// (kubernetes#141342) and generates `ready` afresh (docs/prober.md §3.4).
pub fn keep_started_only_for_the_same_container(status: &mut PodStatus, previous: Option<&PodStatus>) {
    with_previous_by_name(status, previous, |cs, previous| {
        let same = previous.filter(|old| {
            old.container_id.as_deref().is_some_and(|id| !id.is_empty())
                && old.container_id == cs.container_id
        });
        match same {
            None => {
                cs.started = None;
                cs.ready = false;
            }
            // The previous status's, whatever this one says: a host whose runtime says
            // nothing of `started` (the engine adds it), restarted with the API server's
            // copy saying started, would otherwise run the startup probe again.
            Some(old) => {
                cs.started = old.started;
                if cs.started != Some(true) {
                    cs.ready = false;
                }
            }
        }
    });
}

#[cfg(test)]
mod tests {
    use super::*;
    use ProbeKind::{Readiness, Startup};
    use ProbeResult::{Failure, Success, Unknown};
    use k8s_openapi::api::core::v1::{
        ContainerState, ContainerStateRunning, ContainerStateTerminated, ContainerStateWaiting, PodCondition,
        PodSpec, Probe,
    };
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, Time};

    /// Wall-clock seconds relative to the manager's start.
    fn t(rel: i64) -> Timestamp {
        Timestamp::from_second(1_800_000_000 + rel).unwrap()
    }

    fn running(name: &str, id: &str, started_at: i64) -> ContainerStatus {
        ContainerStatus {
            name: name.into(),
            container_id: Some(id.into()),
            state: Some(ContainerState {
                running: Some(ContainerStateRunning { started_at: Some(Time(t(started_at))) }),
                ..Default::default()
            }),
            ..Default::default()
        }
    }

    fn waiting(name: &str) -> ContainerStatus {
        ContainerStatus {
            name: name.into(),
            state: Some(ContainerState {
                waiting: Some(ContainerStateWaiting::default()),
                ..Default::default()
            }),
            ..Default::default()
        }
    }

    fn terminated(name: &str, id: &str, exit_code: i32) -> ContainerStatus {
        ContainerStatus {
            name: name.into(),
            container_id: Some(id.into()),
            state: Some(ContainerState {
                terminated: Some(ContainerStateTerminated { exit_code, ..Default::default() }),
                ..Default::default()
            }),
            ..Default::default()
        }
    }

    fn with(mut cs: ContainerStatus, started: Option<bool>, ready: bool) -> ContainerStatus {
        cs.started = started;
        cs.ready = ready;
        cs
    }

    fn container(name: &str, readiness_probe: bool) -> Container {
        Container {
            name: name.into(),
            readiness_probe: readiness_probe.then(Probe::default),
            ..Default::default()
        }
    }

    fn sidecar(name: &str) -> Container {
        Container { restart_policy: Some("Always".into()), ..container(name, true) }
    }

    /// The pod's API-side status: the Ready condition (if any) and the containers it lists.
    fn api(ready: Option<&str>, containers: Vec<ContainerStatus>, init: Vec<ContainerStatus>) -> PodStatus {
        PodStatus {
            conditions: ready.map(|s| {
                vec![PodCondition { type_: POD_READY.into(), status: s.into(), ..Default::default() }]
            }),
            container_statuses: Some(containers),
            init_container_statuses: Some(init),
            ..Default::default()
        }
    }

    fn pod(containers: Vec<Container>, init: Vec<Container>, api: Option<PodStatus>) -> Pod {
        Pod {
            metadata: ObjectMeta { uid: Some("uid".into()), ..Default::default() },
            spec: Some(PodSpec { containers, init_containers: Some(init), ..Default::default() }),
            status: api,
        }
    }

    fn view(workers: &[(&str, ProbeKind)], results: &[(ProbeKind, &str, ProbeResult)]) -> ProbeView {
        ProbeView {
            workers: workers.iter().map(|(n, k)| (Arc::from(*n), *k)).collect(),
            results: results.iter().map(|(k, id, r)| ((*k, ContainerId::parse(id)), *r)).collect(),
            manager_start: t(0),
            change_status_on_restart: false,
        }
    }

    #[test]
    fn has_worker_answers_the_same_by_scan_and_by_lookup() {
        for count in [1, SCAN_WORKERS_UP_TO + 1] {
            let names: Vec<String> = (0..count).map(|i| format!("c{i}")).collect();
            let workers: Vec<(&str, ProbeKind)> = names.iter().map(|n| (n.as_str(), Readiness)).collect();
            let view = view(&workers, &[]);
            assert!(view.has_worker("c0", Readiness), "{count} workers");
            assert!(!view.has_worker("c0", Startup), "{count} workers");
            assert!(!view.has_worker("nope", Readiness), "{count} workers");
        }
    }

    struct Case {
        name: &'static str,
        /// The container's spec has a readiness probe.
        probe: bool,
        cs: ContainerStatus,
        view: ProbeView,
        api: Option<PodStatus>,
        /// (started, ready) written.
        want: (Option<bool>, bool),
        triggered: bool,
    }

    const APP: &str = "app";
    const ID: &str = "cri://1";

    fn regular_cases() -> Vec<Case> {
        let ready_api = || Some(api(Some("True"), vec![running(APP, ID, -60)], vec![]));
        let r = &[(APP, Readiness)];
        vec![
            Case {
                name: "not running: not started, ready untouched",
                probe: true,
                cs: with(waiting(APP), None, true),
                view: view(r, &[]),
                api: None,
                want: (Some(false), true),
                triggered: false,
            },
            Case {
                name: "startup Success: started",
                probe: false,
                cs: running(APP, ID, 5),
                view: view(&[(APP, Startup)], &[(Startup, ID, Success)]),
                api: None,
                want: (Some(true), true),
                triggered: false,
            },
            Case {
                name: "startup Unknown: not started, ready untouched, no trigger",
                probe: true,
                cs: with(running(APP, ID, 5), None, true),
                view: view(&[(APP, Startup), (APP, Readiness)], &[(Startup, ID, Unknown)]),
                api: None,
                want: (Some(false), true),
                triggered: false,
            },
            Case {
                name: "startup Failure beats an incoming started=true",
                probe: false,
                cs: with(running(APP, ID, 5), Some(true), false),
                view: view(&[(APP, Startup)], &[(Startup, ID, Failure)]),
                api: None,
                want: (Some(false), false),
                triggered: false,
            },
            Case {
                name: "no startup result, incoming started=true: kept",
                probe: false,
                cs: with(running(APP, ID, 5), Some(true), false),
                view: view(&[(APP, Startup)], &[]),
                api: None,
                want: (Some(true), true),
                triggered: false,
            },
            Case {
                name: "startup worker without a result: not started",
                probe: false,
                cs: running(APP, ID, 5),
                view: view(&[(APP, Startup)], &[]),
                api: None,
                want: (Some(false), false),
                triggered: false,
            },
            Case {
                name: "no startup probe: started; no readiness probe: ready",
                probe: false,
                cs: running(APP, ID, 5),
                view: view(&[], &[]),
                api: None,
                want: (Some(true), true),
                triggered: false,
            },
            Case {
                name: "readiness Success: ready, no trigger",
                probe: true,
                cs: running(APP, ID, 5),
                view: view(r, &[(Readiness, ID, Success)]),
                api: None,
                want: (Some(true), true),
                triggered: false,
            },
            Case {
                name: "readiness Failure: not ready, triggered",
                probe: true,
                cs: with(running(APP, ID, 5), None, true),
                view: view(r, &[(Readiness, ID, Failure)]),
                api: None,
                want: (Some(true), false),
                triggered: true,
            },
            Case {
                name: "readiness worker without a result: not ready, triggered",
                probe: true,
                cs: running(APP, ID, 5),
                view: view(r, &[]),
                api: None,
                want: (Some(true), false),
                triggered: true,
            },
            Case {
                name: "another container's result does not count",
                probe: true,
                cs: running(APP, ID, 5),
                view: view(r, &[(Readiness, "cri://0", Success)]),
                api: None,
                want: (Some(true), false),
                triggered: true,
            },
            // Agent restart: the container started more than 10 s before the manager.
            Case {
                name: "old container, no result, API Ready: ready kept (still triggered)",
                probe: true,
                cs: running(APP, ID, -60),
                view: view(r, &[]),
                api: ready_api(),
                want: (Some(true), true),
                triggered: true,
            },
            Case {
                name: "old container, API Ready False: not ready",
                probe: true,
                cs: running(APP, ID, -60),
                view: view(r, &[]),
                api: Some(api(Some("False"), vec![running(APP, ID, -60)], vec![])),
                want: (Some(true), false),
                triggered: true,
            },
            Case {
                name: "old container, API without a Ready condition: not ready",
                probe: true,
                cs: running(APP, ID, -60),
                view: view(r, &[]),
                api: Some(api(None, vec![running(APP, ID, -60)], vec![])),
                want: (Some(true), false),
                triggered: true,
            },
            Case {
                name: "old container with a Failure result: not ready",
                probe: true,
                cs: running(APP, ID, -60),
                view: view(r, &[(Readiness, ID, Failure)]),
                api: ready_api(),
                want: (Some(true), false),
                triggered: true,
            },
            Case {
                name: "old container, API names another container ID: not ready",
                probe: true,
                cs: running(APP, ID, -60),
                view: view(r, &[]),
                api: Some(api(Some("True"), vec![running(APP, "cri://0", -60)], vec![])),
                want: (Some(true), false),
                triggered: true,
            },
            Case {
                name: "old container, API has an empty container ID: inherited",
                probe: true,
                cs: running(APP, ID, -60),
                view: view(r, &[]),
                api: Some(api(Some("True"), vec![running(APP, "", -60)], vec![])),
                want: (Some(true), true),
                triggered: true,
            },
            Case {
                name: "old container, API lists no containers: inherited",
                probe: true,
                cs: running(APP, ID, -60),
                view: view(r, &[]),
                api: Some(api(Some("True"), vec![], vec![])),
                want: (Some(true), true),
                triggered: true,
            },
            Case {
                name: "container started 9 s before the manager: not preserved",
                probe: true,
                cs: running(APP, ID, -9),
                view: view(r, &[]),
                api: Some(api(Some("True"), vec![running(APP, ID, -9)], vec![])),
                want: (Some(true), false),
                triggered: true,
            },
            Case {
                name: "old container without a readiness probe: ready whatever the API says",
                probe: false,
                cs: running(APP, ID, -60),
                view: view(&[], &[]),
                api: Some(api(Some("False"), vec![running(APP, ID, -60)], vec![])),
                want: (Some(true), true),
                triggered: false,
            },
        ]
    }

    #[test]
    fn regular_containers() {
        for case in regular_cases() {
            let pod = pod(vec![container(APP, case.probe)], vec![], case.api);
            let mut status = PodStatus { container_statuses: Some(vec![case.cs]), ..Default::default() };
            let triggers = update_pod_status(&pod, &mut status, &case.view);
            let cs = &status.container_statuses.unwrap()[0];
            assert_eq!((cs.started, cs.ready), case.want, "{}", case.name);
            let want_triggers: Vec<String> = if case.triggered { vec![APP.into()] } else { vec![] };
            assert_eq!(triggers, want_triggers, "{}", case.name);
        }
    }

    /// (name, init container spec, its status, view, API status, want (started, ready),
    /// triggered).
    type InitCase =
        (&'static str, Container, ContainerStatus, ProbeView, Option<PodStatus>, (Option<bool>, bool), bool);

    #[test]
    fn init_containers() {
        const SIDE: &str = "side";
        let r = &[(SIDE, Readiness)];
        let cases: Vec<InitCase> = vec![
            (
                "plain init exited 0: ready, not started",
                container(SIDE, false),
                terminated(SIDE, ID, 0),
                view(&[], &[]),
                None,
                (Some(false), true),
                false,
            ),
            (
                "plain init exited 1: ready untouched",
                container(SIDE, false),
                terminated(SIDE, ID, 1),
                view(&[], &[]),
                None,
                (Some(false), false),
                false,
            ),
            (
                "plain init running: started, ready untouched, never triggered",
                container(SIDE, true),
                running(SIDE, ID, 5),
                view(r, &[]),
                None,
                (Some(true), false),
                false,
            ),
            (
                "sidecar without a readiness worker: ready",
                sidecar(SIDE),
                running(SIDE, ID, 5),
                view(&[], &[]),
                None,
                (Some(true), true),
                false,
            ),
            (
                "sidecar readiness worker without a result: not ready, triggered",
                sidecar(SIDE),
                running(SIDE, ID, 5),
                view(r, &[]),
                None,
                (Some(true), false),
                true,
            ),
            (
                "sidecar readiness Success: ready",
                sidecar(SIDE),
                running(SIDE, ID, 5),
                view(r, &[(Readiness, ID, Success)]),
                None,
                (Some(true), true),
                false,
            ),
            (
                "sidecar not started: ready untouched, no trigger",
                sidecar(SIDE),
                with(running(SIDE, ID, 5), None, true),
                view(&[(SIDE, Startup), (SIDE, Readiness)], &[]),
                None,
                (Some(false), true),
                false,
            ),
            (
                "sidecar exited: not started, ready untouched",
                sidecar(SIDE),
                with(terminated(SIDE, ID, 0), None, true),
                view(r, &[]),
                None,
                (Some(false), true),
                false,
            ),
            (
                "old sidecar inherits readiness from the API's init container status",
                sidecar(SIDE),
                running(SIDE, ID, -60),
                view(r, &[]),
                Some(api(Some("True"), vec![], vec![running(SIDE, ID, -60)])),
                (Some(true), true),
                true,
            ),
            (
                "old sidecar replaced behind the API's back: not ready",
                sidecar(SIDE),
                running(SIDE, ID, -60),
                view(r, &[]),
                Some(api(Some("True"), vec![], vec![running(SIDE, "cri://0", -60)])),
                (Some(true), false),
                true,
            ),
            (
                "spec and status disagree: started set, ready untouched",
                sidecar("other"),
                with(running(SIDE, ID, 5), None, true),
                view(r, &[]),
                None,
                (Some(true), true),
                false,
            ),
        ];
        for (name, spec, cs, view, api, want, triggered) in cases {
            let pod = pod(vec![], vec![spec], api);
            let mut status = PodStatus { init_container_statuses: Some(vec![cs]), ..Default::default() };
            let triggers = update_pod_status(&pod, &mut status, &view);
            let cs = &status.init_container_statuses.unwrap()[0];
            assert_eq!((cs.started, cs.ready), want, "{name}");
            let want_triggers: Vec<String> = if triggered { vec![SIDE.into()] } else { vec![] };
            assert_eq!(triggers, want_triggers, "{name}");
        }
    }

    #[test]
    fn change_container_status_on_kubelet_restart_skips_the_preservation() {
        // Off (the default): an old container with no result inherits the API's readiness, and
        // a container reported started stays started. On: neither.
        let ready_api = Some(api(Some("True"), vec![running(APP, ID, -60)], vec![]));
        for (on, want_ready, want_started) in [(false, true, true), (true, false, false)] {
            let pod = pod(vec![container(APP, true)], vec![], ready_api.clone());
            let mut v = view(&[(APP, Readiness)], &[]);
            v.change_status_on_restart = on;
            let mut status =
                PodStatus { container_statuses: Some(vec![running(APP, ID, -60)]), ..Default::default() };
            update_pod_status(&pod, &mut status, &v);
            assert_eq!(status.container_statuses.unwrap()[0].ready, want_ready, "ready, gate on={on}");

            let mut v = view(&[(APP, Startup)], &[]);
            v.change_status_on_restart = on;
            let mut status = PodStatus {
                container_statuses: Some(vec![with(running(APP, ID, -60), Some(true), false)]),
                ..Default::default()
            };
            update_pod_status(&pod, &mut status, &v);
            assert_eq!(
                status.container_statuses.unwrap()[0].started,
                Some(want_started),
                "started, gate on={on}"
            );
        }
    }

    #[test]
    fn triggers_every_unready_probed_container_in_status_order() {
        let pod = pod(
            vec![container("a", true), container("b", true), container("c", true)],
            vec![sidecar("s"), container("i", true)],
            None,
        );
        let mut status = PodStatus {
            container_statuses: Some(vec![
                running("a", "x://a", 5),
                running("b", "x://b", 5),
                running("c", "x://c", 5),
            ]),
            init_container_statuses: Some(vec![running("s", "x://s", 5), terminated("i", "x://i", 0)]),
            ..Default::default()
        };
        let view = view(
            &[("a", Readiness), ("b", Readiness), ("s", Readiness)],
            &[(Readiness, "x://a", Failure), (Readiness, "x://b", Success)],
        );
        let triggers = update_pod_status(&pod, &mut status, &view);
        assert_eq!(triggers, ["a", "s"], "c has no worker, b is ready, i is a plain init container");
    }

    #[test]
    fn result_keys_cover_startup_and_readiness_of_every_container() {
        let status = PodStatus {
            container_statuses: Some(vec![running("a", "x://a", 0)]),
            init_container_statuses: Some(vec![running("s", "x://s", 0)]),
            ..Default::default()
        };
        let id = ContainerId::parse;
        assert_eq!(
            result_keys(&status),
            [
                (Startup, id("x://a")),
                (Readiness, id("x://a")),
                (Startup, id("x://s")),
                (Readiness, id("x://s"))
            ]
        );
    }

    /// Each container's name, `started` and `ready`, init containers first.
    fn started_and_ready(status: &PodStatus) -> Vec<(&str, Option<bool>, bool)> {
        let init = status.init_container_statuses.iter().flatten();
        init.chain(status.container_statuses.iter().flatten())
            .map(|c| (c.name.as_str(), c.started, c.ready))
            .collect()
    }

    /// While a pod terminates, a regeneration keeps `started` as the stored status has it: a
    /// container whose startup probe never succeeded stays not started and not ready, however
    /// its startup worker's absence reads; a started one keeps its computed readiness.
    /// A terminating pod's container without a startup probe is started once running, with no
    /// stored status to read it from (a host's first sync of a pod already being deleted): the
    /// kubelet calls it started with or without a startup worker. Only a container with a
    /// startup probe takes `started` from the stored status.
    #[test]
    fn a_terminating_pods_container_without_a_startup_probe_is_started_once_running() {
        let mut regenerated = PodStatus {
            container_statuses: Some(vec![
                running("plain", "probelet://1", 0),
                running("slow", "probelet://2", 0),
            ]),
            ..Default::default()
        };
        for cs in regenerated.container_statuses.iter_mut().flatten() {
            cs.started = Some(true);
            cs.ready = true;
        }
        let slow = Container { startup_probe: Some(Probe::default()), ..container("slow", false) };
        let terminating = pod(vec![container("plain", false), slow], vec![], None);
        keep_started_while_terminating(&terminating, &mut regenerated, None);
        let flags = started_and_ready(&regenerated);
        assert_eq!(flags, [("plain", Some(true), true), ("slow", Some(false), false)]);
    }

    #[test]
    fn a_terminating_pods_containers_keep_their_started() {
        let mut stored = PodStatus {
            container_statuses: Some(vec![
                running("slow", "probelet://1", 0),
                running("up", "probelet://2", 0),
            ]),
            ..Default::default()
        };
        stored.container_statuses.as_mut().unwrap()[0].started = Some(false);
        stored.container_statuses.as_mut().unwrap()[1].started = Some(true);
        // What UpdatePodStatus computes with no startup worker left: everything started, ready.
        let mut regenerated = PodStatus {
            container_statuses: Some(vec![
                running("slow", "probelet://1", 0),
                running("up", "probelet://2", 0),
                running("new-id", "probelet://9", 0),
                terminated("gone", "probelet://3", 0),
            ]),
            ..Default::default()
        };
        for cs in regenerated.container_statuses.iter_mut().flatten().take(3) {
            cs.started = Some(true);
            cs.ready = true;
        }
        let probed =
            |name: &str| Container { startup_probe: Some(Probe::default()), ..container(name, false) };
        let terminating = pod(["slow", "up", "new-id", "gone"].map(probed).to_vec(), vec![], None);
        keep_started_while_terminating(&terminating, &mut regenerated, Some(&stored));
        let flags = started_and_ready(&regenerated);
        assert_eq!(
            flags,
            [
                ("slow", Some(false), false),
                ("up", Some(true), true),
                ("new-id", Some(false), false),
                ("gone", None, false),
            ]
        );
    }

    /// Once a pod is finished, a regeneration keeps each running container's `started` and
    /// `ready` as the stored status has them for the same ID (a sidecar among the init
    /// containers too): no worker is left to say more, and its absence reads started and ready.
    #[test]
    fn a_finished_pods_running_containers_keep_their_started_and_ready() {
        let flagged = |mut cs: ContainerStatus, started: bool, ready: bool| {
            cs.started = Some(started);
            cs.ready = ready;
            cs
        };
        let stored = PodStatus {
            init_container_statuses: Some(vec![flagged(running("sidecar", "probelet://s", 0), true, false)]),
            container_statuses: Some(vec![
                flagged(running("slow", "probelet://1", 0), false, false),
                flagged(running("unready", "probelet://2", 0), true, false),
                flagged(running("ready", "probelet://3", 0), true, true),
                flagged(running("replaced", "probelet://4", 0), true, true),
            ]),
            ..Default::default()
        };
        // What UpdatePodStatus computes with no worker left: every running container started
        // and ready.
        let mut regenerated = PodStatus {
            init_container_statuses: Some(vec![flagged(running("sidecar", "probelet://s", 0), true, true)]),
            container_statuses: Some(vec![
                flagged(running("slow", "probelet://1", 0), true, true),
                flagged(running("unready", "probelet://2", 0), true, true),
                flagged(running("ready", "probelet://3", 0), true, true),
                flagged(running("replaced", "probelet://5", 0), true, true),
                flagged(terminated("gone", "probelet://6", 0), false, false),
            ]),
            ..Default::default()
        };
        let probed =
            |name: &str| Container { startup_probe: Some(Probe::default()), ..container(name, true) };
        let finished = pod(
            ["slow", "unready", "ready", "replaced", "gone"].map(probed).to_vec(),
            vec![Container { startup_probe: Some(Probe::default()), ..sidecar("sidecar") }],
            None,
        );
        keep_started_and_ready_once_finished(&finished, &mut regenerated, Some(&stored));
        let flags = started_and_ready(&regenerated);
        assert_eq!(
            flags,
            [
                ("sidecar", Some(true), false),
                ("slow", Some(false), false),
                ("unready", Some(true), false),
                ("ready", Some(true), true),
                ("replaced", Some(false), false),
                ("gone", Some(false), false),
            ]
        );
        let mut unknown = regenerated.clone();
        keep_started_and_ready_once_finished(&finished, &mut unknown, None);
        assert!(
            unknown.container_statuses.iter().flatten().all(|c| c.started == Some(false) && !c.ready),
            "without a previous status, nothing running is started or ready"
        );
    }

    /// Once a pod is finished, a running container the spec gives no startup probe stays
    /// started, and one with no readiness probe keeps the `ready` it was given once started:
    /// what the kubelet calls them with or without workers. Only a probe's verdict is taken from
    /// the stored status (none here: the host's first sync of the pod).
    #[test]
    fn a_finished_pods_probeless_containers_keep_what_the_kubelet_calls_them() {
        let flagged = |mut cs: ContainerStatus, started: bool, ready: bool| {
            cs.started = Some(started);
            cs.ready = ready;
            cs
        };
        let mut regenerated = PodStatus {
            container_statuses: Some(vec![
                flagged(running("plain", "probelet://1", 0), true, true),
                flagged(running("web", "probelet://2", 0), true, true),
                flagged(running("slow", "probelet://3", 0), true, true),
            ]),
            ..Default::default()
        };
        let finished = pod(
            vec![
                container("plain", false),
                container("web", true),
                Container { startup_probe: Some(Probe::default()), ..container("slow", false) },
            ],
            vec![],
            None,
        );
        keep_started_and_ready_once_finished(&finished, &mut regenerated, None);
        let flags = started_and_ready(&regenerated);
        assert_eq!(
            flags,
            [("plain", Some(true), true), ("web", Some(true), false), ("slow", Some(false), false)]
        );
    }

    /// A `started` the status carries stands only for the container instance the previous status
    /// shows, with the previous status's value; a replacement (another ID), a container the
    /// previous status does not list or lists without an ID carries neither `started` nor
    /// `ready` over; a container listed with the same ID and no `started` takes the previous
    /// status's `started` (and keeps its `ready` when that is true).
    #[test]
    fn started_is_carried_over_only_for_the_same_container() {
        let previous = PodStatus {
            container_statuses: Some(vec![
                with(running("same", "probelet://1", 0), Some(true), true),
                with(running("replaced", "probelet://2", 0), Some(true), true),
                with(running("not-yet", "probelet://3", 0), Some(false), false),
                with(waiting("no-id"), Some(true), false),
                with(running("unset", "probelet://7", 0), Some(true), true),
                with(running("unset-not-yet", "probelet://10", 0), Some(false), false),
            ]),
            init_container_statuses: Some(vec![with(
                running("sidecar", "probelet://4", 0),
                Some(true),
                true,
            )]),
            ..Default::default()
        };
        let mut status = PodStatus {
            container_statuses: Some(vec![
                with(running("same", "probelet://1", 0), Some(true), true),
                with(running("replaced", "probelet://9", 30), Some(true), true),
                with(running("not-yet", "probelet://3", 0), Some(true), true),
                with(running("no-id", "probelet://5", 30), Some(true), true),
                with(running("unlisted", "probelet://6", 30), None, true),
                with(running("unset", "probelet://7", 0), None, true),
                with(running("unset-not-yet", "probelet://10", 0), None, true),
            ]),
            init_container_statuses: Some(vec![with(
                running("sidecar", "probelet://8", 30),
                Some(true),
                true,
            )]),
            ..Default::default()
        };
        keep_started_only_for_the_same_container(&mut status, Some(&previous));
        let flags = |list: &Option<Vec<ContainerStatus>>| -> Vec<(String, Option<bool>, bool)> {
            list.iter().flatten().map(|c| (c.name.clone(), c.started, c.ready)).collect()
        };
        assert_eq!(
            flags(&status.container_statuses),
            [
                ("same".to_owned(), Some(true), true),
                ("replaced".to_owned(), None, false),
                ("not-yet".to_owned(), Some(false), false),
                ("no-id".to_owned(), None, false),
                ("unlisted".to_owned(), None, false),
                ("unset".to_owned(), Some(true), true),
                ("unset-not-yet".to_owned(), Some(false), false),
            ]
        );
        assert_eq!(flags(&status.init_container_statuses), [("sidecar".to_owned(), None, false)]);

        // No previous status at all: nothing to carry over.
        let mut alone = PodStatus {
            container_statuses: Some(vec![with(running("app", "probelet://1", 0), Some(true), true)]),
            ..Default::default()
        };
        keep_started_only_for_the_same_container(&mut alone, None);
        assert_eq!(flags(&alone.container_statuses), [("app".to_owned(), None, false)]);
    }

    /// An empty ID on both sides tells nothing of the instance: no `started` is carried over
    /// (a replacement reported without an ID would otherwise inherit it). Upstream compares
    /// the IDs alone, but its runtime never reports a running container without one.
    #[test]
    fn started_is_not_carried_over_between_containers_without_an_id() {
        let previous = PodStatus {
            container_statuses: Some(vec![with(running("app", "", 0), Some(true), true)]),
            ..Default::default()
        };
        let mut status = PodStatus {
            container_statuses: Some(vec![with(running("app", "", 30), Some(true), true)]),
            ..Default::default()
        };
        keep_started_only_for_the_same_container(&mut status, Some(&previous));
        let app = &status.container_statuses.as_ref().unwrap()[0];
        assert_eq!((app.started, app.ready), (None, false));
    }

    /// What the filter is for: a replacement handed its predecessor's `started: true` is not
    /// started while it has a startup worker and no startup result (liveness and readiness do
    /// not probe it); without the filter it was.
    #[test]
    fn a_replacement_container_is_not_started_by_its_predecessors_started() {
        let pod = Pod {
            spec: Some(PodSpec { containers: vec![container("app", false)], ..Default::default() }),
            ..Default::default()
        };
        let view = ProbeView {
            workers: HashSet::from([(Arc::from("app"), Startup)]),
            manager_start: t(0),
            ..Default::default()
        };
        let previous = PodStatus {
            container_statuses: Some(vec![with(running("app", "probelet://1", -60), Some(true), true)]),
            ..Default::default()
        };
        let mut status = PodStatus {
            container_statuses: Some(vec![with(running("app", "probelet://2", 30), Some(true), true)]),
            ..Default::default()
        };
        keep_started_only_for_the_same_container(&mut status, Some(&previous));
        update_pod_status(&pod, &mut status, &view);
        let app = &status.container_statuses.as_ref().unwrap()[0];
        assert_eq!((app.started, app.ready), (Some(false), false));
    }
}
