//! The standalone agent's process runtime with real short-lived processes: start and states,
//! restart policies and crash-loop back-off, kills with grace periods, pod termination order,
//! init containers and sidecars (held back until started, stopped once the pod completes),
//! environment and working directory, start failures, and exec probes through the shared runner. Waits go through `RuntimeChanged` notifications, bounded.
// Helpers may panic: a panic there fails the test that called it.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::HashSet;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use actix::prelude::*;
use k8s_openapi::api::core::v1::{
    Container, ContainerStateTerminated, ContainerStatus, EnvVar, EnvVarSource, ExecAction,
    ObjectFieldSelector, ObjectReference, Pod, PodSpec, Probe,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use k8s_openapi::jiff::Timestamp;
use probelet::clock::TokioClock;
use probelet::container::ContainerId;
use probelet::contracts::{CommandRunner, EventRecorder, EventType, MemoryRecorder};
use probelet::host::events::EventLog;
use probelet::host::phase::{has_any_regular_container_started, pod_phase};
use probelet::host::runtime::{
    ContainerGroups, FdBudget, ForgetPod, GetRuntimeStatus, KILL_WAIT, KillContainer, KillPod,
    ProcessRuntime, RuntimeChanged, RuntimePodStatus, STARTS_PER_TURN, Signaller, SubscribeRuntime, SyncPod,
};
use probelet::local_runner::LocalCommandRunner;
use probelet::process::{Signal, signal_group};
use tokio::sync::mpsc;
use tokio::time::Instant;

/// The longest any test waits for one state.
const WAIT: Duration = Duration::from_secs(10);
const SHORT_BACKOFF: Duration = Duration::from_millis(200);
const MAX_BACKOFF: Duration = Duration::from_secs(2);

// === fixtures ===

/// Forwards runtime notifications into a channel the test awaits.
struct Forward(mpsc::UnboundedSender<String>);

impl Actor for Forward {
    type Context = Context<Self>;
}

impl Handler<RuntimeChanged> for Forward {
    type Result = ();

    fn handle(&mut self, msg: RuntimeChanged, _: &mut Context<Self>) {
        let _ = self.0.send(msg.pod_uid.into());
    }
}

struct Harness {
    runtime: Addr<ProcessRuntime>,
    recorder: MemoryRecorder,
    runner: LocalCommandRunner,
    changes: mpsc::UnboundedReceiver<String>,
}

impl Harness {
    fn new() -> Self {
        Self::with_backoff(SHORT_BACKOFF, MAX_BACKOFF)
    }

    /// A harness whose runtime runs containers under the agent binary's shim.
    fn shimmed() -> Self {
        Self::build(|runtime| runtime.with_shim(env!("CARGO_BIN_EXE_probelet")))
    }

    fn with_backoff(initial: Duration, max: Duration) -> Self {
        Self::build(|runtime| runtime.with_backoff(initial, max))
    }

    /// A harness whose runtime `configure` adjusts before it starts.
    fn build(configure: impl FnOnce(ProcessRuntime) -> ProcessRuntime) -> Self {
        let recorder = MemoryRecorder::new();
        Self::recording(recorder.clone(), Arc::new(recorder), configure)
    }

    /// A harness whose events go to `log` too, the agent's `/events` (which folds repeats).
    fn with_event_log(log: EventLog, configure: impl FnOnce(ProcessRuntime) -> ProcessRuntime) -> Self {
        let recorder = MemoryRecorder::new();
        Self::recording(recorder.clone(), Arc::new(Both(recorder, log)), configure)
    }

    /// A harness whose runtime records into `sink`, which `recorder` (read by the assertions)
    /// sees every event of.
    fn recording(
        recorder: MemoryRecorder,
        sink: Arc<dyn EventRecorder>,
        configure: impl FnOnce(ProcessRuntime) -> ProcessRuntime,
    ) -> Self {
        let runner = LocalCommandRunner::new();
        let runtime = configure(
            ProcessRuntime::new(runner.clone(), sink, Arc::new(TokioClock::new()))
                .with_backoff(SHORT_BACKOFF, MAX_BACKOFF),
        )
        .start();
        let (tx, changes) = mpsc::unbounded_channel();
        runtime.do_send(SubscribeRuntime(Forward(tx).start().recipient()));
        Harness { runtime, recorder, runner, changes }
    }

    async fn sync(&self, pod: &Pod) {
        self.runtime.send(SyncPod::new(Arc::new(pod.clone()))).await.unwrap();
    }

    /// A sync telling the runtime which container IDs the status says have started.
    async fn sync_started(&self, pod: &Pod, started: &[&str]) {
        let started: HashSet<String> = started.iter().map(|s| s.to_string()).collect();
        self.runtime
            .send(SyncPod { pod: Arc::new(pod.clone()), started, kubelet_sync: false })
            .await
            .unwrap();
    }

    /// A sync the kubelet would run `SyncPod` for that the runtime cannot see itself (a probe's
    /// result changed, a pod update), as the host sends it.
    async fn kubelet_sync(&self, pod: &Pod) {
        let sync = SyncPod { kubelet_sync: true, ..SyncPod::new(Arc::new(pod.clone())) };
        self.runtime.send(sync).await.unwrap();
    }

    async fn status(&self, uid: &str) -> Option<RuntimePodStatus> {
        self.runtime.send(GetRuntimeStatus(uid.into())).await.unwrap()
    }

    /// The pod's status once `done` holds, checked now and after every change notification.
    async fn wait_for(
        &mut self,
        uid: &str,
        what: &str,
        done: impl Fn(&RuntimePodStatus) -> bool,
    ) -> RuntimePodStatus {
        let deadline = Instant::now() + WAIT;
        loop {
            let status = self.status(uid).await;
            if let Some(status) = status.as_ref().filter(|s| done(s)) {
                return status.clone();
            }
            match tokio::time::timeout_at(deadline, self.changes.recv()).await {
                Ok(Some(_)) => {}
                _ => panic!("timed out waiting for {what}; last status: {status:#?}"),
            }
        }
    }

    async fn kill_pod(&self, uid: &str, grace: Duration) {
        self.runtime.send(KillPod { pod_uid: uid.into(), grace }).await.unwrap();
    }

    /// Events about one container, rendered `"<type> <reason> <message>"`.
    fn events_for(&self, container: &str) -> Vec<String> {
        let suffix = format!("{{{container}}}");
        self.recorder
            .events()
            .iter()
            .filter(|e| e.object.field_path.as_deref().is_some_and(|p| p.ends_with(&suffix)))
            .map(|e| e.render())
            .collect()
    }
}

/// Records into the harness's recorder and the agent's event log alike.
struct Both(MemoryRecorder, EventLog);

impl EventRecorder for Both {
    fn record(&self, object: &ObjectReference, event_type: EventType, reason: &str, message: &str) {
        self.0.record(object, event_type, reason, message);
        self.1.record(object, event_type, reason, message);
    }
}

fn pod(name: &str, restart_policy: &str) -> Pod {
    Pod {
        metadata: ObjectMeta {
            name: Some(name.into()),
            namespace: Some("default".into()),
            uid: Some(format!("uid-{name}")),
            ..Default::default()
        },
        spec: Some(PodSpec { restart_policy: Some(restart_policy.into()), ..Default::default() }),
        status: None,
    }
}

fn uid(pod: &Pod) -> String {
    pod.metadata.uid.clone().unwrap()
}

fn container(name: &str, argv: &[&str]) -> Container {
    Container {
        name: name.into(),
        image: Some("local".into()),
        command: Some(argv.iter().map(|s| s.to_string()).collect()),
        ..Default::default()
    }
}

fn sh(name: &str, script: &str) -> Container {
    container(name, &["sh", "-c", script])
}

fn with_env(mut c: Container, vars: &[(&str, &str)]) -> Container {
    let env = c.env.get_or_insert_with(Vec::new);
    env.extend(vars.iter().map(|(n, v)| EnvVar {
        name: n.to_string(),
        value: Some(v.to_string()),
        ..Default::default()
    }));
    c
}

fn with_containers(mut pod: Pod, containers: Vec<Container>) -> Pod {
    pod.spec.as_mut().unwrap().containers = containers;
    pod
}

fn with_init(mut pod: Pod, init: Vec<Container>) -> Pod {
    pod.spec.as_mut().unwrap().init_containers = Some(init);
    pod
}

fn sidecar(mut c: Container) -> Container {
    c.restart_policy = Some("Always".into());
    c
}

fn with_startup_probe(mut c: Container) -> Container {
    c.startup_probe =
        Some(Probe { exec: Some(ExecAction { command: Some(vec!["true".into()]) }), ..Default::default() });
    c
}

/// A fresh empty directory under the system temp dir.
fn temp_dir(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("probelet-runtime-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir.canonicalize().unwrap()
}

/// Polls for a file a process writes once it is set up (bounded).
async fn wait_for_file(path: &Path) {
    let deadline = Instant::now() + WAIT;
    while !path.exists() {
        assert!(Instant::now() < deadline, "timed out waiting for {path:?}");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

fn named<'a>(statuses: &'a [ContainerStatus], name: &str) -> &'a ContainerStatus {
    statuses.iter().find(|s| s.name == name).unwrap_or_else(|| panic!("no status for {name}"))
}

fn running(s: &ContainerStatus) -> bool {
    s.state.as_ref().is_some_and(|st| st.running.is_some())
}

fn terminated(s: &ContainerStatus) -> Option<&ContainerStateTerminated> {
    s.state.as_ref().and_then(|st| st.terminated.as_ref())
}

fn last_terminated(s: &ContainerStatus) -> Option<&ContainerStateTerminated> {
    s.last_state.as_ref().and_then(|st| st.terminated.as_ref())
}

fn waiting(s: &ContainerStatus) -> Option<(&str, Option<&str>)> {
    let w = s.state.as_ref()?.waiting.as_ref()?;
    Some((w.reason.as_deref().unwrap_or_default(), w.message.as_deref()))
}

fn app(status: &RuntimePodStatus) -> &ContainerStatus {
    named(&status.containers, "app")
}

// === start and state ===

#[actix::test]
async fn a_started_container_is_running_with_a_fresh_id() {
    let mut h = Harness::new();
    let pod = with_containers(pod("run", "Always"), vec![sh("app", "echo hi; echo oops >&2; sleep 30")]);
    let id = uid(&pod);
    assert_eq!(h.status(&id).await, None, "unknown before the first sync");

    h.sync(&pod).await;
    let status = h.wait_for(&id, "app running", |s| running(app(s))).await;
    let app = app(&status);
    let container_id = app.container_id.clone().unwrap();
    let hex = container_id.strip_prefix("probelet://").unwrap();
    assert_eq!(hex.len(), 16, "{container_id}");
    assert!(hex.chars().all(|c| c.is_ascii_hexdigit()), "{container_id}");
    assert_eq!(app.image, "local");
    assert_eq!(app.image_id, "");
    assert_eq!(app.restart_count, 0);
    assert!(!app.ready);
    assert_eq!(app.started, None);
    assert!(app.state.as_ref().unwrap().running.as_ref().unwrap().started_at.is_some());
    assert_eq!(app.last_state, Some(Default::default()));
    assert_eq!(
        h.events_for("app"),
        ["Normal Created Created container: app", "Normal Started Started container app"]
    );

    // Syncing again changes nothing.
    h.sync(&pod).await;
    let again = h.status(&id).await.unwrap();
    assert_eq!(app.container_id, again.containers[0].container_id);
    assert_eq!(h.events_for("app").len(), 2);

    h.kill_pod(&id, Duration::from_secs(5)).await;
}

#[actix::test]
async fn exit_zero_with_always_restarts() {
    let mut h = Harness::new();
    let pod = with_containers(pod("always", "Always"), vec![container("app", &["true"])]);
    let id = uid(&pod);
    h.sync(&pod).await;
    let status = h.wait_for(&id, "a restart", |s| app(s).restart_count >= 1).await;
    let last = last_terminated(app(&status)).expect("lastState terminated");
    assert_eq!(last.exit_code, 0);
    assert_eq!(last.reason.as_deref(), Some("Completed"));
    assert_eq!(last.signal, None);
    assert!(last.started_at.is_some() && last.finished_at.is_some());
    assert!(last.container_id.as_deref().unwrap().starts_with("probelet://"));
    h.kill_pod(&id, Duration::from_secs(5)).await;
}

#[actix::test]
async fn on_failure_keeps_a_completed_container_and_restarts_a_failed_one() {
    let mut h = Harness::new();
    let pod = with_containers(
        pod("onfailure", "OnFailure"),
        vec![container("ok", &["true"]), container("bad", &["false"])],
    );
    let id = uid(&pod);
    h.sync(&pod).await;
    let status = h
        .wait_for(&id, "ok completed and bad restarted", |s| {
            terminated(named(&s.containers, "ok")).is_some() && named(&s.containers, "bad").restart_count >= 1
        })
        .await;
    let ok = named(&status.containers, "ok");
    assert_eq!(terminated(ok).unwrap().reason.as_deref(), Some("Completed"));
    assert_eq!(ok.restart_count, 0);
    assert_eq!(h.events_for("ok").iter().filter(|e| e.contains("Started")).count(), 1);
    let bad = named(&status.containers, "bad");
    let last = last_terminated(bad).unwrap();
    assert_eq!((last.exit_code, last.reason.as_deref()), (1, Some("Error")));
    h.kill_pod(&id, Duration::from_secs(5)).await;
}

#[actix::test]
async fn never_keeps_the_terminated_state() {
    let mut h = Harness::new();
    let pod = with_containers(pod("never", "Never"), vec![container("app", &["false"])]);
    let id = uid(&pod);
    h.sync(&pod).await;
    let status = h.wait_for(&id, "app terminated", |s| terminated(app(s)).is_some()).await;
    let app = app(&status);
    let state = terminated(app).unwrap();
    assert_eq!((state.exit_code, state.reason.as_deref()), (1, Some("Error")));
    assert_eq!(state.container_id, app.container_id);
    assert_eq!(app.restart_count, 0);
    assert_eq!(app.last_state, Some(Default::default()));

    // A later sync does not start it again.
    h.sync(&pod).await;
    assert_eq!(h.status(&id).await.unwrap(), status);
}

/// `ContainerRestartRules` (on by default, as in v1.35): a container's own restart policy
/// decides, in either direction, whatever the pod's says.
#[actix::test]
async fn a_containers_own_restart_policy_wins_over_the_pods() {
    let mut h = Harness::new();
    let own = |mut c: Container, policy: &str| {
        c.restart_policy = Some(policy.into());
        c
    };
    let first = with_containers(
        pod("own", "Never"),
        vec![own(container("again", &["true"]), "Always"), own(container("retry", &["false"]), "OnFailure")],
    );
    let id = uid(&first);
    h.sync(&first).await;
    h.wait_for(&id, "both restarted in a Never pod", |s| {
        named(&s.containers, "again").restart_count >= 1 && named(&s.containers, "retry").restart_count >= 1
    })
    .await;
    h.kill_pod(&id, Duration::from_secs(5)).await;

    let second =
        with_containers(pod("own-never", "Always"), vec![own(container("once", &["false"]), "Never")]);
    let id = uid(&second);
    h.sync(&second).await;
    let status = h.wait_for(&id, "once terminated", |s| terminated(app_named(s, "once")).is_some()).await;
    h.sync(&second).await;
    assert_eq!(h.status(&id).await.unwrap(), status, "not started again in an Always pod");
    assert_eq!(app_named(&status, "once").restart_count, 0);
}

/// Restart rules on exit codes: exit 3 restarts a `Never` container, exit 4 does not.
#[actix::test]
async fn a_restart_rule_restarts_on_the_exit_codes_it_names() {
    let mut h = Harness::new();
    let ruled = |name: &str, script: &str| {
        let mut c = sh(name, script);
        c.restart_policy = Some("Never".into());
        c.restart_policy_rules = serde_json::from_value(
            serde_json::json!([{"action": "Restart", "exitCodes": {"operator": "In", "values": [3]}}]),
        )
        .unwrap();
        c
    };
    let pod =
        with_containers(pod("rules", "Always"), vec![ruled("three", "exit 3"), ruled("four", "exit 4")]);
    let id = uid(&pod);
    h.sync(&pod).await;
    let status = h
        .wait_for(&id, "three restarted, four terminated", |s| {
            named(&s.containers, "three").restart_count >= 1
                && terminated(named(&s.containers, "four")).is_some()
        })
        .await;
    assert_eq!(named(&status.containers, "four").restart_count, 0);
    h.kill_pod(&id, Duration::from_secs(5)).await;
}

/// With `ContainerRestartRules` off only the pod's policy counts.
#[actix::test]
async fn without_container_restart_rules_the_pods_policy_decides() {
    let gates =
        probelet::FeatureGates::default().with(probelet::Feature::ContainerRestartRules, false).unwrap();
    let mut h = Harness::build(|runtime| runtime.with_feature_gates(&gates));
    let mut once = container("once", &["true"]);
    once.restart_policy = Some("Never".into());
    let pod = with_containers(pod("own-off", "Always"), vec![once]);
    let id = uid(&pod);
    h.sync(&pod).await;
    h.wait_for(&id, "restarted as the pod's Always says", |s| app_named(s, "once").restart_count >= 1).await;
    h.kill_pod(&id, Duration::from_secs(5)).await;
}

/// The runtime with `RestartAllContainersOnContainerExits` on.
fn restart_all_harness() -> Harness {
    restart_all_harness_with(|runtime| runtime)
}

/// The runtime with `RestartAllContainersOnContainerExits` on, which `configure` adjusts.
fn restart_all_harness_with(configure: impl FnOnce(ProcessRuntime) -> ProcessRuntime) -> Harness {
    let gates = probelet::FeatureGates::default()
        .with(probelet::Feature::RestartAllContainersOnContainerExits, true)
        .unwrap();
    Harness::build(|runtime| configure(runtime.with_feature_gates(&gates)))
}

/// `c` with a rule answering exit code 42 with `RestartAllContainers`.
fn restarting_all_on_42(mut c: Container) -> Container {
    c.restart_policy_rules = serde_json::from_value(
        serde_json::json!([{"action": "RestartAllContainers", "exitCodes": {"operator": "In", "values": [42]}}]),
    )
    .unwrap();
    c
}

/// A pod `Never` with an init container that notes each of its runs, a plain `app`, and a
/// `trigger` that exits 42 the first time — answered by a `RestartAllContainers` rule — and
/// then runs.
fn restart_all_pod(dir: &Path) -> Pod {
    let runs = dir.join("init-runs");
    let marker = dir.join("triggered");
    let mut trigger = restarting_all_on_42(sh(
        "trigger",
        &format!("if [ -e {m} ]; then exec sleep 1000; else touch {m}; exit 42; fi", m = marker.display()),
    ));
    trigger.restart_policy = Some("Never".into());
    let pod = with_containers(pod("restart-all", "Never"), vec![sh("app", "exec sleep 1000"), trigger]);
    with_init(pod, vec![sh("init", &format!("echo run >> {}", runs.display()))])
}

/// `RestartAllContainersOnContainerExits`: the trigger's exit kills every other container
/// (`Killing` with upstream's message), removes them all, runs the init container again and
/// starts every container afresh; each container that had run counts one restart and shows the
/// removal as its last state.
#[actix::test]
async fn a_restart_all_containers_rule_restarts_the_whole_pod_in_place() {
    let mut h = restart_all_harness();
    let dir = temp_dir("restart-all");
    let pod = restart_all_pod(&dir);
    let id = uid(&pod);
    h.sync(&pod).await;
    let first = h.wait_for(&id, "app running", |s| running(app(s))).await;
    let first_app = app(&first).container_id.clone();
    let status = h
        .wait_for(&id, "everything restarted", |s| {
            let (app, trigger) = (app(s), named(&s.containers, "trigger"));
            running(app) && running(trigger) && app.restart_count == 1 && trigger.restart_count == 1
        })
        .await;
    assert_ne!(app(&status).container_id, first_app, "a new instance of app");
    let init = named(&status.init_containers, "init");
    assert_eq!(terminated(init).map(|t| t.exit_code), Some(0));
    assert_eq!(init.restart_count, 1, "the init container ran again");
    assert_eq!(std::fs::read_to_string(dir.join("init-runs")).unwrap(), "run\nrun\n");
    for name in ["app", "trigger"] {
        let last = last_terminated(named(&status.containers, name)).expect("a last state");
        assert_eq!(
            (last.exit_code, last.reason.as_deref(), last.message.as_deref()),
            (
                137,
                Some("RestartingAllContainers"),
                Some("The container is removed because RestartAllContainers in place")
            ),
            "{name}"
        );
    }
    assert_eq!(status.in_runtime.len(), 3, "{:?}", status.in_runtime);
    assert!(h.events_for("app").contains(&"Normal Killing killing".to_owned()), "{:?}", h.events_for("app"));
    assert!(!h.events_for("trigger").iter().any(|e| e.contains("Killing")), "the trigger had exited");
    h.kill_pod(&id, Duration::from_secs(5)).await;
    let _ = std::fs::remove_dir_all(&dir);
}

/// A pod `Never` with a plain init container, a sidecar `side`, and regular `slow` (ignores
/// TERM: its kill takes the grace period), `quick` (exits half a second after TERM) and
/// `trigger`, which exits 42 — answered by `RestartAllContainers` — once `slow` and `quick`
/// run, and then runs. Each of the others notes the TERM it gets in `dir/terms`.
fn ordered_restart_pod(dir: &Path) -> Pod {
    let term = |name: &str, then: &str| {
        format!(
            "trap 'echo {name} >> {log}{then}' TERM; touch {ready}; while true; do sleep 0.1; done",
            log = dir.join("terms").display(),
            ready = dir.join(format!("{name}-ready")).display()
        )
    };
    let mut trigger = restarting_all_on_42(sh(
        "trigger",
        &format!(
            "if [ -e {m} ]; then exec sleep 1000; fi; \
             while [ ! -e {d}/slow-ready ] || [ ! -e {d}/quick-ready ]; do sleep 0.05; done; touch {m}; exit 42",
            m = dir.join("triggered").display(),
            d = dir.display()
        ),
    ));
    trigger.restart_policy = Some("Never".into());
    with_init(
        with_containers(
            pod("restart-all-order", "Never"),
            vec![sh("slow", &term("slow", "")), sh("quick", &term("quick", "; sleep 0.5; exit 0")), trigger],
        ),
        vec![sh("init", "true"), sidecar(sh("side", &term("side", "; exit 0")))],
    )
}

/// Waits, reading the pod's status as a host reads it (often: the restart begins once the
/// host has read the exit), until `container` has had its `Killing` event.
async fn wait_for_killing(h: &Harness, uid: &str, container: &str) {
    let deadline = Instant::now() + WAIT;
    while !h.events_for(container).contains(&"Normal Killing killing".to_owned()) {
        assert!(Instant::now() < deadline, "{container} was never killed: {:?}", h.recorder.rendered());
        h.status(uid).await;
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

/// Upstream's `SyncPod` kills and removes the containers of a pod restarting all of them one
/// after another, in `computePodActions`' order: the regular containers, then the init
/// containers (a sidecar here), in spec order; the container that set the restart off had
/// exited and is only removed (docs/prober.md §3.11). `slow` ignores TERM and takes the whole
/// grace period: `quick` is not signalled, nor its `Killing` event sent, before `slow` is gone.
#[actix::test]
async fn a_restart_of_all_containers_kills_them_one_after_another_regular_first() {
    let mut h = restart_all_harness();
    let dir = temp_dir("restart-all-order");
    let pod = ordered_restart_pod(&dir);
    let id = uid(&pod);
    h.sync(&pod).await;
    h.wait_for(&id, "trigger exited", |s| terminated(named(&s.containers, "trigger")).is_some()).await;
    wait_for_killing(&h, &id, "slow").await;
    let killed = |name: &str| h.events_for(name).iter().any(|e| e.contains("Killing"));
    assert!(!killed("quick") && !killed("side"), "killed while slow still ran: {:?}", h.recorder.rendered());
    h.wait_for(&id, "everything restarted", |s| {
        ["slow", "quick", "trigger"].iter().all(|n| {
            let c = named(&s.containers, n);
            running(c) && c.restart_count == 1
        })
    })
    .await;
    let order: Vec<String> = h
        .recorder
        .events()
        .iter()
        .filter(|e| e.reason == "Killing")
        .filter_map(|e| e.object.field_path.as_deref()?.split(['{', '}']).nth(1).map(str::to_owned))
        .collect();
    assert_eq!(order, ["slow", "quick", "side"], "Killing events, in order");
    let terms = std::fs::read_to_string(dir.join("terms")).unwrap();
    assert_eq!(terms, "slow\nquick\nside\n", "the order TERM reached them");
    h.kill_pod(&id, Duration::from_secs(5)).await;
    let _ = std::fs::remove_dir_all(&dir);
}

/// A pod `Never` whose regular `first` and `second` ignore TERM (each kill takes the whole
/// grace period) and whose `trigger` exits 42 — answered by `RestartAllContainers` — once both
/// run, and then runs.
fn two_stubborn_restart_pod(dir: &Path, name: &str) -> Pod {
    let stubborn = |c: &str| {
        sh(
            c,
            &format!(
                "trap '' TERM; touch {}; while true; do sleep 0.1; done",
                dir.join(format!("{c}-ready")).display()
            ),
        )
    };
    let mut trigger = restarting_all_on_42(sh(
        "trigger",
        &format!(
            "if [ -e {m} ]; then exec sleep 1000; fi; \
             while [ ! -e {d}/first-ready ] || [ ! -e {d}/second-ready ]; do sleep 0.05; done; touch {m}; exit 42",
            m = dir.join("triggered").display(),
            d = dir.display()
        ),
    ));
    trigger.restart_policy = Some("Never".into());
    with_containers(pod(name, "Never"), vec![stubborn("first"), stubborn("second"), trigger])
}

/// A liveness failure of a container that the restart of all containers has not killed yet is
/// not a kill of its own: upstream's pod sync that restarts all containers takes that branch of
/// `computePodActions` alone (the probe's result is never read in it, and is keyed by the old
/// container ID after it), so the container is killed in its turn, with the restart's `killing`
/// and 2 s, not the probe's message and grace period (30 s here, which held the whole restart).
#[actix::test]
async fn a_probe_kill_during_a_restart_of_all_containers_is_the_restarts_kill() {
    let mut h = restart_all_harness();
    let dir = temp_dir("restart-all-probe-kill");
    let pod = two_stubborn_restart_pod(&dir, "restart-all-probe-kill");
    let id = uid(&pod);
    h.sync(&pod).await;
    let seen =
        h.wait_for(&id, "trigger exited", |s| terminated(named(&s.containers, "trigger")).is_some()).await;
    wait_for_killing(&h, &id, "first").await;
    let second_id = named(&seen.containers, "second").container_id.clone().unwrap();
    h.runtime
        .send(KillContainer {
            pod_uid: id.as_str().into(),
            container: "second".into(),
            container_id: Some(ContainerId::parse(&second_id)),
            message: "Container second failed liveness probe, will be restarted".into(),
            grace: Duration::from_secs(30),
            restart: true,
        })
        .await
        .unwrap();
    h.wait_for(&id, "everything restarted", |s| {
        ["first", "second", "trigger"].iter().all(|n| {
            let c = named(&s.containers, n);
            running(c) && c.restart_count == 1
        })
    })
    .await;
    assert_eq!(
        h.events_for("second").iter().filter(|e| e.contains("Killing")).collect::<Vec<_>>(),
        ["Normal Killing killing"]
    );
    h.kill_pod(&id, Duration::from_secs(5)).await;
    let _ = std::fs::remove_dir_all(&dir);
}

/// The agent stopped while a restart of all containers kills them one after another (its
/// `KillPod`): every container stops within the pod's grace period, none starts again, nothing
/// is removed (the stopped containers show terminated), and the restart's kill in flight is
/// only waited for.
#[actix::test]
async fn a_pod_killed_during_a_restart_of_all_containers_stops_and_restarts_nothing() {
    let mut h = restart_all_harness();
    let dir = temp_dir("restart-all-kill-pod");
    let pod = two_stubborn_restart_pod(&dir, "restart-all-kill-pod");
    let id = uid(&pod);
    h.sync(&pod).await;
    h.wait_for(&id, "trigger exited", |s| terminated(named(&s.containers, "trigger")).is_some()).await;
    wait_for_killing(&h, &id, "first").await;
    let began = Instant::now();
    h.kill_pod(&id, Duration::from_secs(1)).await;
    assert!(began.elapsed() < Duration::from_secs(5), "KillPod took {:?}", began.elapsed());
    // Whatever a late timer would start, it starts within this.
    tokio::time::sleep(Duration::from_millis(1500)).await;
    let status = h.status(&id).await.unwrap();
    for name in ["first", "second", "trigger"] {
        let c = named(&status.containers, name);
        assert!(terminated(c).is_some(), "{name}: {c:#?}");
        assert_eq!(c.restart_count, 0, "{name}");
    }
    assert!(status.in_runtime.iter().all(|(_, code)| code.is_some()), "{:?}", status.in_runtime);
    let killings = |name: &str| -> Vec<String> {
        h.events_for(name).into_iter().filter(|e| e.contains("Killing")).collect()
    };
    assert_eq!(killings("first"), ["Normal Killing killing"], "the kill in flight, once");
    assert_eq!(killings("second"), ["Normal Killing Stopping container second"]);
    assert_eq!(killings("trigger"), Vec::<String>::new());
    let _ = std::fs::remove_dir_all(&dir);
}

/// A container killed by a restart of all containers whose own rule answers that kill's exit
/// code (143, `NotIn [0]`) with `RestartAllContainers` does not set a second restart off: its
/// exit is removed with it, as upstream removes every container before it reads the runtime
/// again.
#[actix::test]
async fn a_kill_by_the_restart_matching_a_restart_all_rule_does_not_restart_all_again() {
    let mut h = restart_all_harness();
    let dir = temp_dir("restart-all-again");
    let mut pod = restart_all_pod(&dir);
    let app_spec = &mut pod.spec.as_mut().unwrap().containers[0];
    app_spec.restart_policy_rules = serde_json::from_value(
        serde_json::json!([{"action": "RestartAllContainers", "exitCodes": {"operator": "NotIn", "values": [0]}}]),
    )
    .unwrap();
    let id = uid(&pod);
    h.sync(&pod).await;
    let restarted = h
        .wait_for(&id, "everything restarted", |s| {
            ["app", "trigger"].iter().all(|n| {
                let c = named(&s.containers, n);
                running(c) && c.restart_count == 1
            })
        })
        .await;
    // Past the pace of restarts (a second), reading the status as a host does.
    let until = Instant::now() + Duration::from_millis(2500);
    while Instant::now() < until {
        h.status(&id).await;
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let later = h.status(&id).await.unwrap();
    assert_eq!(app(&later).container_id, app(&restarted).container_id, "{later:#?}");
    assert_eq!(std::fs::read_to_string(dir.join("init-runs")).unwrap(), "run\nrun\n");
    h.kill_pod(&id, Duration::from_secs(5)).await;
    let _ = std::fs::remove_dir_all(&dir);
}

/// While its containers are killed a pod restarting all of them shows the status read when
/// the restart began: upstream generates no status in the sync that kills and removes them.
/// Read after `slow` was killed (its `quick` is being killed), `slow` still shows running.
#[actix::test]
async fn while_all_containers_are_killed_the_status_stays_the_one_read_when_the_restart_began() {
    let mut h = restart_all_harness();
    let dir = temp_dir("restart-all-frozen");
    let pod = ordered_restart_pod(&dir);
    let id = uid(&pod);
    h.sync(&pod).await;
    let seen =
        h.wait_for(&id, "trigger exited", |s| terminated(named(&s.containers, "trigger")).is_some()).await;
    // `quick` is killed once `slow` has gone; it takes half a second to exit.
    wait_for_killing(&h, &id, "quick").await;
    let during = h.status(&id).await.unwrap();
    assert_eq!(during, seen, "the status while the containers are killed");
    assert!(running(named(&during.containers, "slow")), "{during:#?}");
    h.kill_pod(&id, Duration::from_secs(5)).await;
    let _ = std::fs::remove_dir_all(&dir);
}

/// Upstream's first status after the removal (`convertToAPIContainerStatuses`, the pod
/// restarting all its containers, each missing from the runtime) builds a container whose last
/// status was not waiting from that status: waiting `RestartingAllContainers`, and for one that
/// status showed terminated (here the `trigger`) still its container ID. The status after that
/// builds it from this waiting one: the default waiting reason, no ID, the count and last state
/// kept — `app` waits `PodInitializing` while the init container runs again.
#[actix::test]
async fn only_the_first_status_after_the_removal_shows_restarting_all_containers() {
    let mut h = restart_all_harness();
    let dir = temp_dir("restart-all-first");
    let release = dir.join("release");
    let pod = restart_all_pod(&dir);
    let init = sh(
        "init",
        &format!(
            "if [ -e {m} ]; then while [ ! -e {r} ]; do sleep 0.05; done; fi",
            m = dir.join("triggered").display(),
            r = release.display()
        ),
    );
    let pod = with_init(pod, vec![init]);
    let id = uid(&pod);
    h.sync(&pod).await;
    let exited =
        h.wait_for(&id, "trigger exited", |s| terminated(named(&s.containers, "trigger")).is_some()).await;
    let trigger_id = named(&exited.containers, "trigger").container_id.clone();
    assert!(trigger_id.is_some());
    let removed = h
        .wait_for(&id, "the containers removed", |s| {
            waiting(app(s)).is_some_and(|(reason, _)| reason == "RestartingAllContainers")
        })
        .await;
    let trigger = named(&removed.containers, "trigger");
    assert_eq!(waiting(trigger).map(|(r, _)| r), Some("RestartingAllContainers"));
    assert_eq!(trigger.container_id, trigger_id, "the terminated instance's ID, one status long");
    assert_eq!(app(&removed).container_id, None, "app ran: its status had no terminated instance");
    let next = h.wait_for(&id, "init running again", |s| running(named(&s.init_containers, "init"))).await;
    for name in ["app", "trigger"] {
        let c = named(&next.containers, name);
        assert_eq!(waiting(c), Some(("PodInitializing", None)), "{name}: {c:#?}");
        assert_eq!(c.container_id, None, "{name}");
        assert_eq!(c.restart_count, 1, "{name}");
        assert_eq!(
            last_terminated(c).and_then(|t| t.reason.as_deref()),
            Some("RestartingAllContainers"),
            "{name}"
        );
    }
    std::fs::write(&release, "").unwrap();
    h.wait_for(&id, "app running again", |s| running(app(s))).await;
    h.kill_pod(&id, Duration::from_secs(5)).await;
    let _ = std::fs::remove_dir_all(&dir);
}

/// A container waiting in crash-loop back-off when the restart began keeps its count and last
/// state, and waits with the default reason: upstream reads the removal of a container whose
/// last status was waiting as no restart of it. (The runtime drops its back-off timer when the
/// restart begins; the last status, not the timer, decides.)
#[actix::test]
async fn a_container_in_back_off_when_all_restart_keeps_its_count() {
    let mut h = restart_all_harness_with(|runtime| {
        runtime.with_backoff(Duration::from_secs(10), Duration::from_secs(300))
    });
    let dir = temp_dir("restart-all-backoff");
    let runs = dir.join("crash-runs");
    let mut crash = sh("crash", &format!("echo run >> {}; exit 1", runs.display()));
    crash.restart_policy = Some("Always".into());
    let mut trigger = restarting_all_on_42(sh(
        "trigger",
        &format!(
            "if [ -e {m} ]; then exec sleep 1000; fi; \
             while [ \"$(wc -l < {r} 2>/dev/null)\" -lt 2 ]; do sleep 0.05; done; sleep 0.3; touch {m}; exit 42",
            m = dir.join("triggered").display(),
            r = runs.display()
        ),
    ));
    trigger.restart_policy = Some("Never".into());
    let pod = with_containers(pod("restart-all-backoff", "Never"), vec![crash, trigger]);
    let id = uid(&pod);
    h.sync(&pod).await;
    let seen = h
        .wait_for(&id, "crash in back-off, trigger exited", |s| {
            terminated(named(&s.containers, "trigger")).is_some()
                && waiting(named(&s.containers, "crash")).is_some_and(|(r, _)| r == "CrashLoopBackOff")
        })
        .await;
    assert_eq!(named(&seen.containers, "crash").restart_count, 1);
    let removed = h
        .wait_for(&id, "the containers removed", |s| {
            waiting(named(&s.containers, "trigger")).is_some_and(|(r, _)| r == "RestartingAllContainers")
        })
        .await;
    let crash = named(&removed.containers, "crash");
    assert_eq!(waiting(crash), Some(("ContainerCreating", None)), "{crash:#?}");
    assert_eq!(crash.restart_count, 1, "no restart counted for a container that waited");
    assert_eq!(last_terminated(crash).map(|t| t.exit_code), Some(1), "its own last exit");
    h.kill_pod(&id, Duration::from_secs(5)).await;
    let _ = std::fs::remove_dir_all(&dir);
}

/// An init container that always exits by a `RestartAllContainers` rule restarts the pod again
/// and again, as upstream does (no back-off), but a second apart at most, the pace of upstream's
/// container-state poll: probelet sees each exit at once, and restarted the pod as fast as
/// processes start (dozens of times a second, each with its events and status).
#[actix::test]
async fn a_pod_that_restarts_all_its_containers_at_every_run_restarts_a_second_apart() {
    let h = restart_all_harness();
    let dir = temp_dir("restart-all-loop");
    let runs = dir.join("init-runs");
    let init = restarting_all_on_42(sh("init", &format!("echo run >> {}; exit 42", runs.display())));
    let pod = with_init(
        with_containers(pod("restart-all-loop", "Always"), vec![sh("app", "exec sleep 1000")]),
        vec![init],
    );
    let id = uid(&pod);
    let count = || std::fs::read_to_string(&runs).map(|s| s.lines().count()).unwrap_or(0);
    h.sync(&pod).await;
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    // The restart begins once the host has read the exit: read the status as a host does, often.
    while count() < 2 {
        assert!(tokio::time::Instant::now() < deadline, "the pod restarted: {} runs", count());
        h.status(&id).await;
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    // From the second run on, each run is a restart of all containers: at most one a second.
    let second = tokio::time::Instant::now();
    while second.elapsed() < Duration::from_secs(3) {
        h.status(&id).await;
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    let runs_in_3s = count() - 2;
    let elapsed = second.elapsed().as_secs_f64();
    assert!(runs_in_3s as f64 <= elapsed.ceil(), "{runs_in_3s} restarts of all containers in {elapsed:.1} s");
    h.kill_pod(&id, Duration::from_secs(5)).await;
    let _ = std::fs::remove_dir_all(&dir);
}

/// With the gate off the rule's action restarts nothing: the trigger stays terminated (its
/// own policy is `Never`), the others run on.
#[actix::test]
async fn without_its_gate_a_restart_all_containers_rule_restarts_nothing() {
    let mut h = Harness::new();
    let dir = temp_dir("restart-all-off");
    let pod = restart_all_pod(&dir);
    let id = uid(&pod);
    h.sync(&pod).await;
    let status = h
        .wait_for(&id, "trigger terminated", |s| terminated(named(&s.containers, "trigger")).is_some())
        .await;
    assert_eq!(terminated(named(&status.containers, "trigger")).map(|t| t.exit_code), Some(42));
    // Give a wrong restart the time to show.
    tokio::time::sleep(Duration::from_millis(300)).await;
    let status = h.status(&id).await.unwrap();
    assert!(running(app(&status)) && app(&status).restart_count == 0, "{status:#?}");
    assert_eq!(std::fs::read_to_string(dir.join("init-runs")).unwrap(), "run\n");
    h.kill_pod(&id, Duration::from_secs(5)).await;
    let _ = std::fs::remove_dir_all(&dir);
}

fn app_named<'a>(status: &'a RuntimePodStatus, name: &str) -> &'a ContainerStatus {
    named(&status.containers, name)
}

// === back-off ===

#[actix::test]
async fn a_crashing_container_backs_off() {
    let mut h = Harness::new();
    let pod = with_containers(pod("crash", "Always"), vec![container("app", &["false"])]);
    let id = uid(&pod);
    h.sync(&pod).await;

    // The first exit restarts at once; the second waits the initial back-off.
    let status = h
        .wait_for(&id, "CrashLoopBackOff", |s| waiting(app(s)).is_some_and(|(r, _)| r == "CrashLoopBackOff"))
        .await;
    let app_status = app(&status);
    assert_eq!(
        waiting(app_status).unwrap().1,
        Some("back-off 200ms restarting failed container=app pod=crash_default(uid-crash)")
    );
    assert_eq!(app_status.restart_count, 1);
    let last = last_terminated(app_status).unwrap();
    assert_eq!((last.exit_code, last.reason.as_deref()), (1, Some("Error")));
    assert_eq!(last.container_id, app_status.container_id, "the exited instance's ID");
    assert!(
        h.events_for("app").contains(
            &"Warning BackOff Back-off restarting failed container app in pod crash_default(uid-crash)"
                .to_owned()
        )
    );

    // The back-off doubles.
    let started = Instant::now();
    let status = h
        .wait_for(&id, "a doubled back-off", |s| {
            waiting(app(s)).is_some_and(|(_, m)| m.is_some_and(|m| m.starts_with("back-off 400ms ")))
        })
        .await;
    assert!(started.elapsed() >= SHORT_BACKOFF, "restarted only after the first back-off");
    assert_eq!(app(&status).restart_count, 2);
    h.kill_pod(&id, Duration::from_secs(5)).await;
}

// === kills ===

#[actix::test]
async fn kill_container_sends_term_then_kill_after_the_grace_period_and_restarts() {
    kill_after_the_grace_period(Harness::new(), "kill").await;
}

/// Under the shim the kill after the grace period is SIGUSR1 to the shim, which SIGKILLs the
/// command: the status reads exactly as without it.
#[actix::test]
async fn under_the_shim_a_kill_after_the_grace_period_reads_the_same() {
    kill_after_the_grace_period(Harness::shimmed(), "kill-shim").await;
}

async fn kill_after_the_grace_period(mut h: Harness, name: &str) {
    let dir = temp_dir(name);
    let ready = dir.join("ready");
    let script = format!("trap '' TERM; touch {}; sleep 30", ready.display());
    let pod = with_containers(pod("kill", "Always"), vec![sh("app", &script)]);
    let id = uid(&pod);
    h.sync(&pod).await;
    let first = h.wait_for(&id, "app running", |s| running(app(s))).await;
    let first_id = app(&first).container_id.clone();
    wait_for_file(&ready).await;

    let grace = Duration::from_millis(500);
    let asked = Instant::now();
    h.runtime.do_send(KillContainer {
        pod_uid: id.clone().into(),
        container: "app".into(),
        container_id: None,
        message: "Container app failed liveness probe, will be restarted".into(),
        grace,
        restart: true,
    });
    let status = h.wait_for(&id, "a restart after the kill", |s| app(s).restart_count >= 1).await;
    assert!(asked.elapsed() >= grace, "SIGKILL came only after the grace period");
    let last = last_terminated(app(&status)).unwrap();
    assert_eq!((last.exit_code, last.signal, last.reason.as_deref()), (137, None, Some("Error")));
    assert_eq!(last.container_id, first_id);
    assert_ne!(app(&status).container_id, first_id, "a new instance");
    assert!(running(app(&status)));
    assert!(
        h.events_for("app")
            .contains(&"Normal Killing Container app failed liveness probe, will be restarted".to_owned())
    );
    h.kill_pod(&id, Duration::from_millis(100)).await;
    let _ = std::fs::remove_dir_all(&dir);
}

/// A container that dies of a SIGKILL the runtime did not send, while the kernel's OOM kill
/// count went up, reads `OOMKilled` (exit code 137), as upstream's does; with the count
/// unchanged the same death reads `Error`, and so does the runtime's own SIGKILL after a grace
/// period, count or not. Under the shim, as the agent runs containers, and without it. The
/// count is read from a file in `/proc/vmstat`'s format the test writes.
#[actix::test]
async fn a_container_killed_as_the_oom_kill_count_rose_reads_oom_killed() {
    for (name, shimmed, count_rises, by_runtime, reason) in [
        ("oom", false, true, false, "OOMKilled"),
        ("oom-shim", true, true, false, "OOMKilled"),
        ("kill-9", true, false, false, "Error"),
        ("runtime-kill", true, true, true, "Error"),
    ] {
        let dir = temp_dir(name);
        let vmstat = dir.join("vmstat");
        std::fs::write(&vmstat, "pgfault 100\noom_kill 4\n").unwrap();
        let count = vmstat.clone();
        let mut h = Harness::build(|runtime| {
            let runtime = runtime.with_oom_kill_count(count);
            if shimmed { runtime.with_shim(env!("CARGO_BIN_EXE_probelet")) } else { runtime }
        });
        let pidfile = dir.join("pid");
        // `$$` is a container command's escape for a `$`.
        let script = format!("trap '' TERM; echo $$$$ > {}; exec sleep 30", pidfile.display());
        let pod = with_containers(pod(name, "Never"), vec![sh("app", &script)]);
        let id = uid(&pod);
        h.sync(&pod).await;
        h.wait_for(&id, "app running", |s| running(app(s))).await;
        wait_for_file(&pidfile).await;
        let deadline = Instant::now() + WAIT;
        let pid = loop {
            let text = std::fs::read_to_string(&pidfile).unwrap();
            if let Ok(pid) = text.trim().parse::<i32>() {
                break pid;
            }
            assert!(Instant::now() < deadline, "no PID in {text:?}");
            tokio::time::sleep(Duration::from_millis(10)).await;
        };
        if count_rises {
            std::fs::write(&vmstat, "pgfault 100\noom_kill 5\n").unwrap();
        }
        if by_runtime {
            h.runtime.do_send(KillContainer {
                pod_uid: id.clone().into(),
                container: "app".into(),
                container_id: None,
                message: "Stopping container app".into(),
                grace: Duration::from_millis(200),
                restart: false,
            });
        } else {
            let killed =
                std::process::Command::new("kill").args(["-KILL", &pid.to_string()]).status().unwrap();
            assert!(killed.success());
        }
        let status = h.wait_for(&id, "app terminated", |s| terminated(app(s)).is_some()).await;
        let state = terminated(app(&status)).unwrap();
        assert_eq!(
            (state.exit_code, state.signal, state.reason.as_deref()),
            (137, None, Some(reason)),
            "{name}"
        );
        let _ = std::fs::remove_dir_all(&dir);
    }
}

/// A kill for one instance (a failed liveness probe's container ID) stops that instance and
/// never the next one of the same name: a failure reported after its container was replaced is
/// not the new instance's.
#[actix::test]
async fn a_kill_for_an_instance_stops_only_that_instance() {
    let mut h = Harness::new();
    let pod = with_containers(pod("instance", "Always"), vec![container("app", &["sleep", "30"])]);
    let id = uid(&pod);
    h.sync(&pod).await;
    let first = h.wait_for(&id, "app running", |s| running(app(s))).await;
    let first_id = ContainerId::parse(app(&first).container_id.as_deref().unwrap());
    let kill = |container_id: &ContainerId| KillContainer {
        pod_uid: id.clone().into(),
        container: "app".into(),
        container_id: Some(container_id.clone()),
        message: "Container app failed liveness probe, will be restarted".into(),
        grace: Duration::from_millis(100),
        restart: true,
    };
    h.runtime.do_send(kill(&first_id));
    let second = h.wait_for(&id, "a new instance", |s| app(s).restart_count == 1 && running(app(s))).await;
    let second_id = ContainerId::parse(app(&second).container_id.as_deref().unwrap());
    assert_ne!(second_id, first_id);

    // The first instance's kill again (a late report): the second instance runs on.
    h.runtime.send(kill(&first_id)).await.unwrap();
    let status = h.status(&id).await.unwrap();
    assert!(running(app(&status)), "still running");
    assert_eq!(
        (app(&status).restart_count, app(&status).container_id.as_deref()),
        (1, Some(&*second_id.to_string()))
    );
    assert_eq!(h.events_for("app").iter().filter(|e| e.contains("Killing")).count(), 1, "one kill only");
    h.kill_pod(&id, Duration::from_millis(100)).await;
}

#[actix::test]
async fn kill_container_stops_a_term_respecting_process_within_the_grace_period() {
    term_within_the_grace_period(Harness::new()).await;
}

#[actix::test]
async fn under_the_shim_a_term_respecting_process_reads_the_same() {
    term_within_the_grace_period(Harness::shimmed()).await;
}

async fn term_within_the_grace_period(mut h: Harness) {
    let pod = with_containers(pod("term", "Never"), vec![container("app", &["sleep", "30"])]);
    let id = uid(&pod);
    h.sync(&pod).await;
    h.wait_for(&id, "app running", |s| running(app(s))).await;

    let asked = Instant::now();
    h.runtime.do_send(KillContainer {
        pod_uid: id.clone().into(),
        container: "app".into(),
        container_id: None,
        message: "Container app failed startup probe".into(),
        grace: Duration::from_secs(30),
        restart: false,
    });
    let status = h.wait_for(&id, "app terminated", |s| terminated(app(s)).is_some()).await;
    assert!(asked.elapsed() < Duration::from_secs(10), "TERM ended it, not KILL after 30 s");
    let state = terminated(app(&status)).unwrap();
    assert_eq!((state.exit_code, state.signal), (143, None));
    assert_eq!(app(&status).restart_count, 0, "Never: no restart");
    assert!(h.events_for("app").contains(&"Normal Killing Container app failed startup probe".to_owned()));
}

/// Under paused time: `since` + `deadline` is now, to the timer's millisecond.
fn assert_at_deadline(since: Instant, deadline: Duration, what: &str) {
    let elapsed = since.elapsed();
    assert!(elapsed >= deadline && elapsed < deadline + Duration::from_millis(5), "{what}: {elapsed:?}");
}

/// A kill that cannot be delivered (here: every signal fails, as `kill(2)` does without
/// permission) ends each stop at its deadline, leaves the container reported running, and a
/// later kill signals again instead of waiting for the first one forever.
#[actix::test]
async fn a_kill_that_cannot_be_delivered_does_not_hang_the_stop() {
    tokio::time::pause();
    let sent: Arc<std::sync::Mutex<Vec<(u32, Signal)>>> = Arc::default();
    let log = sent.clone();
    let signaller = Signaller::new(move |pgid, signal| {
        log.lock().unwrap().push((pgid, signal));
        Err(std::io::Error::from(std::io::ErrorKind::PermissionDenied))
    });
    let mut h = Harness::build(|runtime| runtime.with_signaller(signaller));
    let _cleanup = KillGroups(sent.clone());
    let pod = with_containers(pod("undying", "Always"), vec![container("app", &["sleep", "1000"])]);
    let id = uid(&pod);
    h.sync(&pod).await;
    h.wait_for(&id, "app running", |s| running(app(s))).await;

    let grace = Duration::from_secs(30);
    let asked = Instant::now();
    h.kill_pod(&id, grace).await;
    assert_at_deadline(asked, grace + KILL_WAIT, "the stop ended at its deadline");
    assert!(running(app(&h.status(&id).await.unwrap())), "a failed kill is not a stopped container");
    let signals: Vec<Signal> = sent.lock().unwrap().iter().map(|(_, s)| *s).collect();
    assert_eq!(signals, [Signal::Term, Signal::Kill]);

    // Past its deadline the first kill has failed: the next one signals again, and ends too.
    let again = Instant::now();
    h.kill_pod(&id, grace).await;
    assert_at_deadline(again, grace + KILL_WAIT, "the second kill ended at its own deadline");
    let signals: Vec<Signal> = sent.lock().unwrap().iter().map(|(_, s)| *s).collect();
    assert_eq!(signals, [Signal::Term, Signal::Kill, Signal::Term, Signal::Kill]);

    // A kill asked while another is under way waits for it, never past its deadline.
    let during = h.runtime.send(KillPod { pod_uid: id.clone().into(), grace });
    let overlapping = h.runtime.send(KillPod { pod_uid: id.clone().into(), grace });
    let started = Instant::now();
    let (first, second) = futures::join!(during, overlapping);
    first.unwrap();
    second.unwrap();
    assert_at_deadline(
        started,
        grace + KILL_WAIT,
        "the overlapping kill waited for the first one's deadline",
    );
    assert_eq!(sent.lock().unwrap().len(), 6, "only the first of two overlapping kills signals");
}

/// A sidecar stopped after the regular containers gets what is left of the pod's grace period
/// (upstream's `waitForTurn`), at least 2 s, not a whole grace period of its own. Under paused
/// time with kills that fail, each stop lasts until its deadline: the app's ends at grace + the
/// kill wait, so the sidecar is left the 2 s floor.
#[actix::test]
async fn a_sidecar_stopped_last_gets_what_is_left_of_the_grace_period() {
    tokio::time::pause();
    let sent: Arc<std::sync::Mutex<Vec<(u32, Signal)>>> = Arc::default();
    let times: Arc<std::sync::Mutex<Vec<(Instant, Signal)>>> = Arc::default();
    let (log, at) = (sent.clone(), times.clone());
    let signaller = Signaller::new(move |pgid, signal| {
        log.lock().unwrap().push((pgid, signal));
        at.lock().unwrap().push((Instant::now(), signal));
        Err(std::io::Error::from(std::io::ErrorKind::PermissionDenied))
    });
    let mut h = Harness::build(|runtime| runtime.with_signaller(signaller));
    let _cleanup = KillGroups(sent.clone());
    let pod = with_init(
        with_containers(pod("sidecar-grace", "Always"), vec![container("app", &["sleep", "1000"])]),
        vec![sidecar(container("side", &["sleep", "1000"]))],
    );
    let id = uid(&pod);
    h.sync(&pod).await;
    h.wait_for(&id, "everything running", |s| s.init_containers.iter().chain(&s.containers).all(running))
        .await;

    let grace = Duration::from_secs(30);
    h.kill_pod(&id, grace).await;
    let times = times.lock().unwrap().clone();
    let signals: Vec<Signal> = times.iter().map(|(_, s)| *s).collect();
    assert_eq!(signals, [Signal::Term, Signal::Kill, Signal::Term, Signal::Kill], "app, then side");
    // To the timer's millisecond.
    let about = |elapsed: Duration, want: Duration, what: &str| {
        assert!(elapsed >= want && elapsed < want + Duration::from_millis(5), "{what}: {elapsed:?}");
    };
    about(times[1].0 - times[0].0, grace, "the app gets the whole grace period");
    about(times[2].0 - times[0].0, grace + KILL_WAIT, "the sidecar's turn comes at the app's deadline");
    about(times[3].0 - times[2].0, Duration::from_secs(2), "the sidecar gets the 2 s floor");
}

/// Really kills, when dropped (also when an assertion failed), every group a failing signaller
/// was asked to signal; dropped before the runtime, while the groups' leaders are unreaped.
struct KillGroups(Arc<std::sync::Mutex<Vec<(u32, Signal)>>>);

impl Drop for KillGroups {
    fn drop(&mut self) {
        let sent = self.0.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        for &(pgid, _) in sent.iter() {
            let _ = signal_group(pgid, Signal::Kill);
        }
    }
}

#[actix::test]
async fn kill_pod_stops_regular_containers_then_sidecars_in_reverse_and_restarts_nothing() {
    let mut h = Harness::new();
    let dir = temp_dir("killpod");
    let log = dir.join("log");
    let log_text = log.display().to_string();
    let dir_text = dir.display().to_string();
    let stopping = |name: &str| {
        let script = format!(
            "trap 'echo {name} >> \"$LOG\"; exit 0' TERM; touch \"$DIR/{name}.ready\"; sleep 30 & wait"
        );
        with_env(sh(name, &script), &[("LOG", &log_text), ("DIR", &dir_text)])
    };
    let pod = with_init(
        with_containers(pod("killpod", "Always"), vec![stopping("app1"), stopping("app2")]),
        vec![sidecar(stopping("side1")), sidecar(stopping("side2"))],
    );
    let id = uid(&pod);
    h.sync(&pod).await;
    h.wait_for(&id, "everything running", |s| s.init_containers.iter().chain(&s.containers).all(running))
        .await;
    for name in ["app1", "app2", "side1", "side2"] {
        wait_for_file(&dir.join(format!("{name}.ready"))).await;
    }

    tokio::time::timeout(WAIT, h.kill_pod(&id, Duration::from_secs(5))).await.expect("KillPod resolves");
    let status = h.status(&id).await.unwrap();
    for s in status.init_containers.iter().chain(&status.containers) {
        let state = terminated(s).unwrap_or_else(|| panic!("{} terminated: {s:?}", s.name));
        assert_eq!((state.exit_code, state.reason.as_deref()), (0, Some("Completed")), "{}", s.name);
        assert_eq!(s.restart_count, 0, "{}", s.name);
    }
    let order = std::fs::read_to_string(&log).unwrap();
    let order: Vec<&str> = order.lines().collect();
    assert_eq!(order.len(), 4, "{order:?}");
    assert!(order[..2].contains(&"app1") && order[..2].contains(&"app2"), "{order:?}");
    assert_eq!(order[2..], ["side2", "side1"], "sidecars last, in reverse order");
    for name in ["app1", "app2", "side1", "side2"] {
        assert!(h.events_for(name).contains(&format!("Normal Killing Stopping container {name}")), "{name}");
    }

    // A terminating pod is not started again.
    h.sync(&pod).await;
    assert_eq!(h.status(&id).await.unwrap(), status);
    h.runtime.send(ForgetPod(id.clone().into())).await.unwrap();
    assert_eq!(h.status(&id).await, None);
    let _ = std::fs::remove_dir_all(&dir);
}

// === init containers and sidecars ===

#[actix::test]
async fn init_containers_run_in_order_before_regular_containers() {
    let mut h = Harness::new();
    let dir = temp_dir("init");
    let log = dir.join("log").display().to_string();
    let step = |name: &str| with_env(sh(name, &format!("echo {name} >> \"$LOG\"")), &[("LOG", &log)]);
    let pod = with_init(
        with_containers(pod("init", "Never"), vec![step("app")]),
        vec![step("init1"), step("init2")],
    );
    let id = uid(&pod);
    h.sync(&pod).await;
    let status = h.wait_for(&id, "app terminated", |s| terminated(app(s)).is_some()).await;
    assert_eq!(std::fs::read_to_string(dir.join("log")).unwrap(), "init1\ninit2\napp\n");
    for name in ["init1", "init2"] {
        let state = terminated(named(&status.init_containers, name)).unwrap();
        assert_eq!(state.reason.as_deref(), Some("Completed"), "{name}");
    }
    let _ = std::fs::remove_dir_all(&dir);
}

#[actix::test]
async fn a_failed_init_container_blocks_the_pod_under_never() {
    let mut h = Harness::new();
    let pod = with_init(
        with_containers(pod("initfail", "Never"), vec![container("app", &["true"])]),
        vec![container("init", &["false"]), container("init2", &["true"])],
    );
    let id = uid(&pod);
    h.sync(&pod).await;
    let status =
        h.wait_for(&id, "init terminated", |s| terminated(named(&s.init_containers, "init")).is_some()).await;
    assert_eq!(terminated(named(&status.init_containers, "init")).unwrap().exit_code, 1);
    assert_eq!(waiting(named(&status.init_containers, "init2")), Some(("PodInitializing", None)));
    assert_eq!(waiting(app(&status)), Some(("PodInitializing", None)));
    h.sync(&pod).await;
    assert_eq!(h.status(&id).await.unwrap(), status, "nothing starts later either");
    assert!(h.events_for("app").is_empty());
    assert!(h.events_for("init2").is_empty());
}

#[actix::test]
async fn a_failing_init_container_is_retried_with_back_off_and_blocks_the_rest() {
    let mut h = Harness::new();
    let pod = with_init(
        with_containers(pod("initloop", "Always"), vec![container("app", &["true"])]),
        vec![container("init", &["false"])],
    );
    let id = uid(&pod);
    h.sync(&pod).await;
    let status = h
        .wait_for(&id, "init backing off", |s| {
            waiting(named(&s.init_containers, "init")).is_some_and(|(r, _)| r == "CrashLoopBackOff")
        })
        .await;
    assert!(named(&status.init_containers, "init").restart_count >= 1);
    assert_eq!(waiting(app(&status)), Some(("PodInitializing", None)));
    assert!(h.events_for("app").is_empty());
    h.kill_pod(&id, Duration::from_secs(1)).await;
}

#[actix::test]
async fn sidecars_start_before_the_next_init_container_and_keep_running() {
    let mut h = Harness::new();
    let pod = with_init(
        with_containers(pod("sidecar", "Never"), vec![container("app", &["sleep", "30"])]),
        vec![
            sidecar(container("side", &["sleep", "30"])),
            sidecar(container("flappy", &["true"])),
            container("init", &["true"]),
        ],
    );
    let id = uid(&pod);
    h.sync(&pod).await;
    let status = h
        .wait_for(&id, "app running and flappy restarted", |s| {
            running(app(s)) && named(&s.init_containers, "flappy").restart_count >= 2
        })
        .await;
    let side = named(&status.init_containers, "side");
    assert!(running(side), "{side:?}");
    assert_eq!(side.restart_count, 0);
    assert_eq!(
        terminated(named(&status.init_containers, "init")).unwrap().reason.as_deref(),
        Some("Completed")
    );
    // The sidecar exits 0 and is restarted although the pod's policy is Never.
    let flappy = named(&status.init_containers, "flappy");
    assert_eq!(last_terminated(flappy).unwrap().reason.as_deref(), Some("Completed"));
    h.kill_pod(&id, Duration::from_secs(5)).await;
}

/// A sidecar backing off when the pod's last init container completes records `BackOff` once
/// at that sync, as at every other: the sync that initializes the pod goes over its sidecars
/// once. Two syncs after the init container's exit: its own, and the app's start's.
#[actix::test]
async fn a_sidecar_backing_off_as_the_pod_initializes_records_one_back_off_per_sync() {
    let mut h = Harness::with_backoff(Duration::from_secs(10), Duration::from_secs(20));
    let pod = with_init(
        with_containers(pod("init-flap", "Never"), vec![container("app", &["sleep", "30"])]),
        vec![sidecar(container("flap", &["true"])), container("init", &["sleep", "2"])],
    );
    let id = uid(&pod);
    h.sync(&pod).await;
    h.wait_for(&id, "flap backing off, init running", |s| {
        waiting(named(&s.init_containers, "flap")).is_some_and(|(r, _)| r == "CrashLoopBackOff")
            && running(named(&s.init_containers, "init"))
    })
    .await;
    // What is still on its way.
    tokio::time::sleep(Duration::from_millis(300)).await;
    let back_offs =
        |h: &Harness| h.events_for("flap").iter().filter(|e| e.starts_with("Warning BackOff")).count();
    let before = back_offs(&h);
    h.wait_for(&id, "app running", |s| running(app(s))).await;
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(back_offs(&h) - before, 2, "{:?}", h.events_for("flap"));
    h.kill_pod(&id, Duration::from_secs(5)).await;
}

#[actix::test]
async fn a_sidecar_with_a_startup_probe_holds_back_the_rest_until_reported_started() {
    let mut h = Harness::new();
    let pod = with_init(
        with_containers(pod("startup", "Always"), vec![container("app", &["sleep", "30"])]),
        vec![sidecar(with_startup_probe(container("side", &["sleep", "30"]))), container("init", &["true"])],
    );
    let id = uid(&pod);
    h.sync(&pod).await;
    let status = h.wait_for(&id, "side running", |s| running(named(&s.init_containers, "side"))).await;
    let side_id = named(&status.init_containers, "side").container_id.clone().unwrap();

    // Each sync decides at once (starting a process is synchronous), so what has not started
    // after it was held back. Not reported started, or only an older instance: held back.
    h.sync(&pod).await;
    h.sync_started(&pod, &["probelet://0000000000000000"]).await;
    let status = h.status(&id).await.unwrap();
    assert_eq!(waiting(named(&status.init_containers, "init")), Some(("PodInitializing", None)));
    assert_eq!(waiting(app(&status)), Some(("PodInitializing", None)));
    assert!(h.events_for("init").is_empty() && h.events_for("app").is_empty());

    // Reported started: the init container runs, then the regular container.
    h.sync_started(&pod, &[&side_id]).await;
    let status = h
        .wait_for(&id, "init completed and app running", |s| {
            terminated(named(&s.init_containers, "init")).is_some() && running(app(s))
        })
        .await;
    let side = named(&status.init_containers, "side");
    assert_eq!((side.container_id.as_deref(), side.restart_count), (Some(side_id.as_str()), 0));

    // Started once is enough: a later sync that does not name it holds nothing back.
    h.sync(&pod).await;
    assert!(running(app(&h.status(&id).await.unwrap())));
    h.kill_pod(&id, Duration::from_secs(5)).await;
}

#[actix::test]
async fn a_sidecar_without_a_startup_probe_lets_the_rest_start_once_it_runs() {
    let mut h = Harness::new();
    let pod = with_init(
        with_containers(pod("nostartup", "Always"), vec![container("app", &["sleep", "30"])]),
        vec![sidecar(container("side", &["sleep", "30"]))],
    );
    let id = uid(&pod);
    h.sync(&pod).await;
    h.wait_for(&id, "side and app running", |s| {
        running(named(&s.init_containers, "side")) && running(app(s))
    })
    .await;
    h.kill_pod(&id, Duration::from_secs(5)).await;
}

#[actix::test]
async fn a_completed_pod_stops_its_sidecars_and_succeeds() {
    let mut h = Harness::new();
    let pod = with_init(
        with_containers(pod("completed", "Never"), vec![container("app", &["true"])]),
        vec![sidecar(container("side", &["sleep", "30"]))],
    );
    let id = uid(&pod);
    h.sync(&pod).await;
    let status = h
        .wait_for(&id, "app completed and side stopped", |s| {
            terminated(app(s)).is_some() && terminated(named(&s.init_containers, "side")).is_some()
        })
        .await;
    let side = named(&status.init_containers, "side");
    assert_eq!(terminated(side).unwrap().exit_code, 143, "stopped with SIGTERM");
    assert_eq!(side.restart_count, 0, "not restarted although a sidecar");
    assert!(h.events_for("side").contains(&"Normal Killing Stopping container side".to_owned()));
    let spec = pod.spec.as_ref().unwrap();
    assert!(has_any_regular_container_started(spec, &status.containers));
    assert_eq!(pod_phase(spec, &status.init_containers, &status.containers, true, true), "Succeeded");

    // Nothing starts again.
    h.sync(&pod).await;
    assert_eq!(h.status(&id).await.unwrap(), status);
}

#[actix::test]
async fn a_failed_init_container_under_never_stops_the_sidecars() {
    let mut h = Harness::new();
    let pod = with_init(
        with_containers(pod("initfail-sidecar", "Never"), vec![container("app", &["true"])]),
        vec![sidecar(container("side", &["sleep", "30"])), container("init", &["false"])],
    );
    let id = uid(&pod);
    h.sync(&pod).await;
    let status =
        h.wait_for(&id, "side stopped", |s| terminated(named(&s.init_containers, "side")).is_some()).await;
    assert_eq!(terminated(named(&status.init_containers, "init")).unwrap().exit_code, 1);
    assert_eq!(waiting(app(&status)), Some(("PodInitializing", None)));
    let spec = pod.spec.as_ref().unwrap();
    assert_eq!(pod_phase(spec, &status.init_containers, &status.containers, false, true), "Failed");
}

// === environment, working directory, exec ===

#[actix::test]
async fn env_and_working_dir_reach_the_process() {
    let mut h = Harness::new();
    let dir = temp_dir("env");
    let mut app = with_env(
        sh("app", r#"echo "$FOO $BAR ${NODE-unset}" > out; pwd >> out; echo $(FOO) >> out"#),
        &[("FOO", "foo"), ("BAR", "$(FOO)-bar")],
    );
    app.env.as_mut().unwrap().push(EnvVar {
        name: "NODE".into(),
        value_from: Some(EnvVarSource {
            field_ref: Some(ObjectFieldSelector { field_path: "spec.nodeName".into(), ..Default::default() }),
            ..Default::default()
        }),
        ..Default::default()
    });
    app.working_dir = Some(dir.display().to_string());
    let pod = with_containers(pod("env", "Never"), vec![app]);
    let id = uid(&pod);
    h.sync(&pod).await;
    let status = h.wait_for(&id, "app terminated", |s| terminated(self::app(s)).is_some()).await;
    assert_eq!(terminated(self::app(&status)).unwrap().exit_code, 0);
    let out = std::fs::read_to_string(dir.join("out")).unwrap();
    assert_eq!(out, format!("foo foo-bar unset\n{}\nfoo\n", dir.display()));
    let _ = std::fs::remove_dir_all(&dir);
}

#[actix::test]
async fn exec_through_the_shared_runner_sees_the_containers_env_and_dir() {
    let mut h = Harness::new();
    let dir = temp_dir("exec");
    let mut app = with_env(container("app", &["sleep", "30"]), &[("FOO", "from-container")]);
    app.working_dir = Some(dir.display().to_string());
    let pod = with_containers(pod("exec", "Always"), vec![app]);
    let id = uid(&pod);
    h.sync(&pod).await;
    let status = h.wait_for(&id, "app running", |s| running(self::app(s))).await;
    let container_id = ContainerId::parse(self::app(&status).container_id.as_deref().unwrap());

    let cmd = ["sh", "-c", "echo \"${FOO-unset}\"; pwd"].map(String::from);
    let out = h.runner.run_in_container(&container_id, &cmd, Duration::from_secs(5)).await.unwrap();
    assert_eq!(out.exit_code, 0);
    assert_eq!(String::from_utf8_lossy(&out.output), format!("from-container\n{}\n", dir.display()));

    // Once the container has exited, its settings are gone.
    h.kill_pod(&id, Duration::from_secs(5)).await;
    let out = h.runner.run_in_container(&container_id, &cmd, Duration::from_secs(5)).await.unwrap();
    assert!(String::from_utf8_lossy(&out.output).starts_with("unset\n"), "{out:?}");
    let _ = std::fs::remove_dir_all(&dir);
}

#[actix::test]
async fn the_probelet_command_runs_the_agents_own_executable() {
    let mut h = Harness::new();
    // Here the agent's executable is this test binary, which lists its tests and exits 0.
    let pod = with_containers(pod("self", "Never"), vec![container("app", &["probelet", "--list"])]);
    let id = uid(&pod);
    h.sync(&pod).await;
    let status = h.wait_for(&id, "app terminated", |s| terminated(app(s)).is_some()).await;
    assert_eq!(terminated(app(&status)).unwrap().reason.as_deref(), Some("Completed"));
}

// === start failures ===

const NO_SUCH: &str = "probelet-no-such-executable";

/// What containerd reports for a command that cannot start: `NO_SUCH`'s error in its words.
fn start_error(program: &str) -> String {
    format!(
        "failed to create containerd task: failed to create shim task: OCI runtime create failed: runc create \
         failed: unable to start container process: error during container init: exec: \"{program}\": \
         executable file not found in $PATH: unknown"
    )
}

/// containerd's `StartError` instance: exit code 128, the error, never started.
fn assert_start_error(state: &ContainerStateTerminated, message: &str) {
    assert_eq!(state.exit_code, 128);
    assert_eq!(state.reason.as_deref(), Some("StartError"));
    assert_eq!(state.message.as_deref(), Some(message));
    let started_at = state.started_at.as_ref().unwrap();
    assert_eq!(started_at.0.as_second(), 0, "a zero start time, as the kubelet shows it");
    assert!(state.finished_at.is_some());
}

#[actix::test]
async fn an_unknown_executable_fails_with_start_error_and_crash_loops_with_back_off() {
    // No process ever runs, so time can be paused: the kubelet's own back-off, 10 s doubling.
    tokio::time::pause();
    let mut h = Harness::with_backoff(Duration::from_secs(10), Duration::from_secs(300));
    let pod = with_containers(pod("missing", "Always"), vec![container("app", &[NO_SUCH, "x"])]);
    let id = uid(&pod);
    let begin = Instant::now();
    h.sync(&pod).await;
    let message = start_error(NO_SUCH);
    let status = h.wait_for(&id, "RunContainerError", |s| waiting(app(s)).is_some()).await;
    assert_eq!(waiting(app(&status)), Some(("RunContainerError", Some(message.as_str()))));
    let first_id = app(&status).container_id.clone();
    assert!(first_id.is_some(), "the created container has an ID");
    assert_eq!(app(&status).restart_count, 0);
    assert_start_error(last_terminated(app(&status)).unwrap(), &message);
    assert_eq!(last_terminated(app(&status)).unwrap().container_id, first_id);

    let failures =
        |h: &Harness| h.events_for("app").iter().filter(|e| e.starts_with("Warning Failed")).count();
    // Tried at once, again at once (no back-off yet), then after 10 s and 20 s more.
    for (attempts, at) in [(2, 0), (3, 10), (4, 30)] {
        let deadline = Instant::now() + Duration::from_secs(600);
        while failures(&h) < attempts {
            tokio::time::timeout_at(deadline, h.changes.recv()).await.expect("another attempt").unwrap();
        }
        assert_eq!(begin.elapsed().as_secs(), at, "attempt {attempts}");
    }
    let events = h.events_for("app");
    assert_eq!(events[0], "Normal Created Created container: app");
    assert_eq!(events[1], format!("Warning Failed Error: {message}"));
    assert!(
        events.contains(
            &"Warning BackOff Back-off restarting failed container app in pod missing_default(uid-missing)"
                .to_owned()
        )
    );
    assert!(!events.iter().any(|e| e.contains("Started")));
    // Four failed starts: three restarts, backing off 40 s before the fifth.
    let status = h
        .wait_for(&id, "CrashLoopBackOff", |s| waiting(app(s)).is_some_and(|w| w.0 == "CrashLoopBackOff"))
        .await;
    assert_eq!(
        waiting(app(&status)),
        Some((
            "CrashLoopBackOff",
            Some("back-off 40s restarting failed container=app pod=missing_default(uid-missing)")
        ))
    );
    assert_eq!(app(&status).restart_count, 3);
    assert_start_error(last_terminated(app(&status)).unwrap(), &message);
    assert_ne!(app(&status).container_id, first_id, "each try is a new container");
}

/// A container at the kubelet's longest back-off, 5 min (its own 10 s doubling to 300 s, paused
/// time; a command that does not exist, so nothing runs): the wait is cut at each resync (1 min),
/// as the kubelet's pod worker requeues a sync that backed off no later than its resync
/// interval, and each cut records `BackOff` again, at 0, 1, 2, 3 and 4 min of the wait, with the
/// status unchanged (`CrashLoopBackOff`, `back-off 5m0s …`, the same restart count); the next
/// try is at the wait's end, 5 min after the failure, neither a cut earlier nor later. The
/// shorter waits are cut the same way (80 s at 60 s, 160 s at 60 and 120 s). `/events` folds
/// the repeats into one event whose count is their number. Before, one `BackOff` per wait
/// (docs/reliability.md, "A `BackOff` at each resync of a long wait").
#[actix::test]
async fn a_back_off_longer_than_the_resync_interval_records_back_off_at_each_resync() {
    tokio::time::pause();
    let log = EventLog::new(Arc::new(TokioClock::starting_at(Timestamp::UNIX_EPOCH)), "node-a");
    let mut h = Harness::with_event_log(log.clone(), |runtime| {
        runtime.with_backoff(Duration::from_secs(10), Duration::from_secs(300))
    });
    let pod = with_containers(pod("resync", "Always"), vec![container("app", &[NO_SUCH, "x"])]);
    let id = uid(&pod);
    let begin = Instant::now();
    h.sync(&pod).await;
    let failed = format!("Warning Failed Error: {}", start_error(NO_SUCH));
    let backing_off =
        "Warning BackOff Back-off restarting failed container app in pod resync_default(uid-resync)";
    let five_minutes = (
        "CrashLoopBackOff",
        Some("back-off 5m0s restarting failed container=app pod=resync_default(uid-resync)"),
    );
    let deadline = begin + Duration::from_secs(1200);
    // Events by reason; another text would show in full.
    let short = |e: &String| match e.as_str() {
        e if e == failed => "Failed".to_owned(),
        e if e == backing_off => "BackOff".to_owned(),
        e => e.to_owned(),
    };
    let (mut events, mut seen, mut cuts_seen) = (Vec::new(), 0, 0);
    // Until the try at the end of the first 5-minute wait, the eighth.
    while events.iter().filter(|(_, e)| e == "Failed").count() < 8 {
        let at = begin.elapsed().as_secs();
        let all = h.events_for("app");
        events.extend(all[seen..].iter().filter(|e| !e.contains("Created")).map(|e| (at, short(e))));
        seen = all.len();
        // At each cut of the 5-minute wait (the try at 310 s shows its error until the wait
        // begins in the next turn).
        if (311..610).contains(&at) {
            let status = h.status(&id).await.unwrap();
            assert_eq!(waiting(app(&status)), Some(five_minutes), "at {at} s");
            assert_eq!(app(&status).restart_count, 6, "at {at} s");
            cuts_seen += 1;
        }
        if events.iter().filter(|(_, e)| e == "Failed").count() < 8 {
            tokio::time::timeout_at(deadline, h.changes.recv()).await.expect("another try").unwrap();
        }
    }
    assert!(cuts_seen >= 4, "the status was read at each cut: {cuts_seen}");
    let last_try = events.iter().rposition(|(_, e)| e == "Failed").unwrap();
    events.truncate(last_try + 1);
    let (f, b) = ("Failed", "BackOff");
    let expected: Vec<(u64, String)> = [
        (0, f),
        (0, f),
        (0, b),
        (10, f),
        (10, b),
        (30, f),
        (30, b),
        // 80 s: cut at 60 s.
        (70, f),
        (70, b),
        (130, b),
        // 160 s: cut at 60 and 120 s.
        (150, f),
        (150, b),
        (210, b),
        (270, b),
        // 300 s: cut at each minute.
        (310, f),
        (310, b),
        (370, b),
        (430, b),
        (490, b),
        (550, b),
        (610, f),
    ]
    .into_iter()
    .map(|(at, e)| (at, e.to_owned()))
    .collect();
    assert_eq!(events, expected);
    // `/events`: one event, counted.
    let backoffs = h.events_for("app").iter().filter(|e| *e == backing_off).count();
    let folded: Vec<_> = log.recent().into_iter().filter(|e| e.reason == "BackOff").collect();
    assert_eq!(folded.len(), 1, "{folded:#?}");
    assert_eq!(folded[0].count as usize, backoffs);
    assert_eq!(folded[0].first_timestamp, "1970-01-01T00:00:00Z");
    h.kill_pod(&id, Duration::from_secs(5)).await;
}

/// A pod of several containers counts its `BackOff`s as the kubelet does: every sync of the pod
/// runs `doBackOff` for each container it would start, so any sync (another container's failed
/// start, a container's start, a pod update, the requeue) records `BackOff` for every container
/// still backing off, and the pod's one requeue is for the earliest back-off's end, at most a
/// minute after the latest sync. `a` and `b` fail to start (nothing runs, paused time; the
/// kubelet's 10 s back-off doubling, to 80 s here), `b` added 5 s in by a sync the kubelet
/// runs (a pod update: the runtime takes the spec each sync gives, a device to put the two
/// back-offs out of step); `c` (it runs) added at 100 s by a sync of the host's own, whose
/// start syncs the pod. The table is docs/reliability.md's, derived from the kubelet's rules
/// ("A `BackOff` at each resync of a long wait"). Before, each container recorded `BackOff`
/// only at its own failures and its own cuts: `a` at 0, 10, 30, 70, 130 s, `b` at 5, 15, 35,
/// 75, 135 s.
#[actix::test]
async fn every_sync_of_a_pod_records_back_off_for_each_of_its_containers_backing_off() {
    tokio::time::pause();
    let log = EventLog::new(Arc::new(TokioClock::starting_at(Timestamp::UNIX_EPOCH)), "node-a");
    let h = Harness::with_event_log(log.clone(), |runtime| {
        runtime.with_backoff(Duration::from_secs(10), Duration::from_secs(80))
    });
    let a = container("a", &[NO_SUCH, "x"]);
    let b = container("b", &[NO_SUCH, "x"]);
    let c = container("c", &["sleep", "600"]);
    let first = with_containers(pod("pair", "Always"), vec![a.clone()]);
    let with_b = with_containers(pod("pair", "Always"), vec![a.clone(), b.clone()]);
    let with_c = with_containers(pod("pair", "Always"), vec![a, b, c]);
    let id = uid(&first);
    let begin = Instant::now();
    h.sync(&first).await;
    let count = |h: &Harness, name: &str, what: &str| {
        h.events_for(name).iter().filter(|e| e.starts_with(what)).count()
    };
    // By second: `BackOff`s of `a` and `b`, then the tries (`Failed`) of `a` and `b` and the
    // starts of `c` in that second.
    let mut rows: Vec<(u64, [usize; 5])> = Vec::new();
    let mut before = [0; 5];
    for at in 0..=160u64 {
        tokio::time::sleep_until(begin + Duration::from_secs(at)).await;
        match at {
            5 => h.kubelet_sync(&with_b).await,
            100 => h.sync(&with_c).await,
            _ => {}
        }
        // Whatever happens at this second has happened half a second later.
        tokio::time::sleep_until(begin + Duration::from_millis(at * 1000 + 500)).await;
        let now = [
            count(&h, "a", "Warning BackOff"),
            count(&h, "b", "Warning BackOff"),
            count(&h, "a", "Warning Failed"),
            count(&h, "b", "Warning Failed"),
            count(&h, "c", "Normal Started"),
        ];
        let new: Vec<usize> = now.iter().zip(before).map(|(n, b)| n - b).collect();
        if new.iter().any(|n| *n > 0) {
            rows.push((at, new.try_into().unwrap()));
        }
        before = now;
        if at == 100 {
            // The start's sync changed no status: `a` and `b` still wait, each its own back-off.
            let status = h.status(&id).await.unwrap();
            for (container, back_off, restarts) in
                [(&status.containers[0], "1m20s", 4), (&status.containers[1], "1m20s", 4)]
            {
                let message = format!(
                    "back-off {back_off} restarting failed container={} pod=pair_default(uid-pair)",
                    container.name
                );
                assert_eq!(
                    waiting(container),
                    Some(("CrashLoopBackOff", Some(message.as_str()))),
                    "at 100 s"
                );
                assert_eq!(container.restart_count, restarts, "{} at 100 s", container.name);
            }
        }
    }
    let expected: Vec<(u64, [usize; 5])> = vec![
        //     BackOff  Failed  Started
        //      a  b    a  b    c
        (0, [1, 0, 2, 0, 0]),
        // The update's sync; `b`'s failed start's sync, its second's.
        (5, [3, 1, 0, 2, 0]),
        // `a`'s try, at its requeue (the earliest end), then its failure's sync.
        (10, [1, 2, 1, 0, 0]),
        (15, [2, 1, 0, 1, 0]),
        (30, [1, 2, 1, 0, 0]),
        (35, [2, 1, 0, 1, 0]),
        (70, [1, 2, 1, 0, 0]),
        (75, [2, 1, 0, 1, 0]),
        // `c`'s start syncs the pod, and the requeue counts from it: not at 135 s (a minute
        // after 75 s) but at 150 s, `a`'s end.
        (100, [1, 1, 0, 0, 1]),
        (150, [1, 2, 1, 0, 0]),
        (155, [2, 1, 0, 1, 0]),
    ];
    assert_eq!(rows, expected);
    // `/events`: one event per container, counted.
    let folded: Vec<_> = log.recent().into_iter().filter(|e| e.reason == "BackOff").collect();
    assert_eq!(folded.len(), 2, "{folded:#?}");
    for (event, name) in folded.iter().zip(["a", "b"]) {
        assert_eq!(event.count as usize, count(&h, name, "Warning BackOff"), "{name}");
    }
    tokio::time::resume();
    h.kill_pod(&id, Duration::from_secs(5)).await;
}

/// A pod killed (the agent's stop) or forgotten in the middle of a long back-off's cut wait
/// leaves no timer: no `BackOff` or try comes after, and a pod of the same UID synced again
/// starts afresh rather than being found backing off by the old timer.
#[actix::test]
async fn a_pod_stopped_during_a_cut_back_off_wait_hears_nothing_more_from_it() {
    tokio::time::pause();
    let mut h = Harness::with_backoff(Duration::from_secs(100), Duration::from_secs(300));
    let pod = with_containers(pod("cut-stop", "Always"), vec![container("app", &[NO_SUCH, "x"])]);
    let id = uid(&pod);
    h.sync(&pod).await;
    h.wait_for(&id, "backing off", |s| waiting(app(s)).is_some_and(|(r, _)| r == "CrashLoopBackOff")).await;
    // Into the wait's second piece (cut at 60 s).
    tokio::time::sleep(Duration::from_secs(70)).await;
    let before = h.events_for("app").len();
    assert_eq!(h.events_for("app").iter().filter(|e| e.contains("BackOff")).count(), 2);
    let began = Instant::now();
    h.kill_pod(&id, Duration::from_secs(5)).await;
    assert_eq!(began.elapsed(), Duration::ZERO, "KillPod waited on the back-off timer");
    h.runtime.send(ForgetPod(id.as_str().into())).await.unwrap();
    tokio::time::sleep(Duration::from_secs(400)).await;
    assert_eq!(h.events_for("app").len(), before, "{:?}", h.events_for("app"));
    // The same UID again: a fresh pod, tried at once.
    h.sync(&pod).await;
    tokio::time::sleep(Duration::from_secs(1)).await;
    let again = &h.events_for("app")[before..];
    assert!(again.iter().any(|e| e.starts_with("Warning Failed")), "{again:?}");
    h.kill_pod(&id, Duration::from_secs(5)).await;
}

#[actix::test]
async fn an_unknown_executable_under_never_ends_with_start_error() {
    unknown_executable_under_never(Harness::new()).await;
}

/// The shim reports the failed start: the same `Failed` event and `StartError`, no `Started`.
#[actix::test]
async fn under_the_shim_an_unknown_executable_reads_the_same() {
    let h = unknown_executable_under_never(Harness::shimmed()).await;
    let events = h.events_for("app");
    assert_eq!(
        events,
        [
            "Normal Created Created container: app".to_owned(),
            format!("Warning Failed Error: {}", start_error(NO_SUCH))
        ]
    );
}

async fn unknown_executable_under_never(mut h: Harness) -> Harness {
    let pod = with_containers(pod("cannot", "Never"), vec![container("app", &[NO_SUCH])]);
    let id = uid(&pod);
    h.sync(&pod).await;
    let status = h.wait_for(&id, "app terminated", |s| terminated(app(s)).is_some()).await;
    assert_start_error(terminated(app(&status)).unwrap(), &start_error(NO_SUCH));
    assert_eq!(app(&status).restart_count, 0);
    h
}

// === under the shim ===

/// A fake shim in `dir`: a container whose command names `probelet-slow-start` gets a shim
/// that reports nothing for a second and exits (a start that fails late, its report never
/// read); every other container runs under the agent's own shim.
fn slow_start_shim(dir: &Path) -> PathBuf {
    use std::os::unix::fs::PermissionsExt;
    let path = dir.join("shim");
    let script = format!(
        "#!/bin/sh\ncase \"$*\" in *probelet-slow-start*) sleep 1; exit 1;; esac\nexec '{}' \"$@\"\n",
        env!("CARGO_BIN_EXE_probelet")
    );
    std::fs::write(&path, script).unwrap();
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).unwrap();
    path
}

/// The sync a container's exit owes waits for the starts of its pod under way, and a start
/// that fails for good (its container not to be restarted) ends that wait as one to be retried
/// does: a container that restarts (its own policy `Always`, in a `Never` pod) and exits while
/// its neighbour's start is under way is restarted once that start has failed. Before, the
/// failed start of a container not to be restarted asked for no sync, the exit's sync was owed
/// for good, and the container stayed exited.
#[actix::test]
async fn an_exit_during_a_start_that_fails_for_good_still_syncs_the_pod() {
    let dir = temp_dir("slow-start-never");
    let shim = slow_start_shim(&dir);
    let mut h = Harness::build(|runtime| runtime.with_shim(&shim));
    let mut crash = container("crash", &["sh", "-c", "exit 1"]);
    crash.restart_policy = Some("Always".into());
    let pod =
        with_containers(pod("slow-never", "Never"), vec![crash, container("slow", &["probelet-slow-start"])]);
    let id = uid(&pod);
    h.sync(&pod).await;
    h.wait_for(&id, "slow's start failed", |s| terminated(app_named(s, "slow")).is_some()).await;
    h.wait_for(&id, "crash restarted", |s| app_named(s, "crash").restart_count >= 1).await;
    h.kill_pod(&id, Duration::from_secs(5)).await;
    let _ = std::fs::remove_dir_all(&dir);
}

/// Twenty containers that cannot start, under the shim, whose reports of the failed starts come
/// back one by one: the syncs their failures ask for wait for the batch's last report, so the
/// pod is synced once per batch, as the kubelet sees a batch's outcomes in one relist, and each
/// container records one `BackOff` for the wait that follows its second failure. A sync per
/// report recorded `BackOff` for every container already backing off at each: about ten each
/// (docs/reliability.md, "A `BackOff` at each resync of a long wait").
#[actix::test]
async fn under_the_shim_a_batch_of_failed_starts_syncs_the_pod_once() {
    let mut h = Harness::build(|runtime| {
        runtime
            .with_shim(env!("CARGO_BIN_EXE_probelet"))
            .with_backoff(Duration::from_secs(100), Duration::from_secs(300))
    });
    let names: Vec<String> = (0..20).map(|i| format!("c{i:02}")).collect();
    let containers = names.iter().map(|name| container(name, &[NO_SUCH, "x"])).collect();
    let pod = with_containers(pod("batch", "Always"), containers);
    let id = uid(&pod);
    h.sync(&pod).await;
    h.wait_for(&id, "every container backing off", |s| {
        s.containers.iter().all(|c| waiting(c).is_some_and(|(reason, _)| reason == "CrashLoopBackOff"))
    })
    .await;
    // What is still on its way.
    tokio::time::sleep(Duration::from_millis(200)).await;
    for name in &names {
        let events = h.events_for(name);
        let tries = events.iter().filter(|e| e.starts_with("Warning Failed")).count();
        let backoffs = events.iter().filter(|e| e.starts_with("Warning BackOff")).count();
        assert_eq!(tries, 2, "{name}: {events:?}");
        // One, or two when a batch of starts was split over turns of the runtime (a loaded
        // machine) and its halves' reports came apart.
        assert!((1..=2).contains(&backoffs), "{name}: {backoffs} BackOff: {events:?}");
    }
    h.kill_pod(&id, Duration::from_secs(5)).await;
}

/// A container whose main process exits leaving a daemon (double-forked into a session of its
/// own): the daemon is killed when the container exits, as a PID namespace would be, and the
/// container's exit code is its main process's.
#[actix::test]
async fn under_the_shim_a_daemon_dies_when_its_container_exits() {
    let mut h = Harness::shimmed();
    let dir = temp_dir("daemon");
    let pidfile = dir.join("daemon.pid");
    let script = format!(
        "(setsid sh -c 'echo $$$$ > {p}.tmp; mv {p}.tmp {p}; exec sleep 7361' </dev/null >/dev/null 2>&1 &); \
         while [ ! -s {p} ]; do sleep 0.01; done; exit 3",
        p = pidfile.display()
    );
    let pod = with_containers(pod("daemon", "Never"), vec![sh("app", &script)]);
    let id = uid(&pod);
    h.sync(&pod).await;
    let status = h.wait_for(&id, "app terminated", |s| terminated(app(s)).is_some()).await;
    let state = terminated(app(&status)).unwrap();
    assert_eq!((state.exit_code, state.signal, state.reason.as_deref()), (3, None, Some("Error")));
    let pid: u32 = std::fs::read_to_string(&pidfile).unwrap().trim().parse().unwrap();
    wait_until_gone(pid, "the daemon outlived its container").await;
    let _ = std::fs::remove_dir_all(&dir);
}

/// A container that kills its own shim (`kill -9 $PPID`) after a process of it left the group:
/// that process carries the shim's mark and is killed before the container's exit is reported,
/// so a restart never runs beside it, and an agent that died at that moment would have left
/// the record for the next to kill it by (before, only the orphan sweep, up to a second later,
/// ended it, and nothing at all did here, where no sweep runs).
#[actix::test]
async fn under_the_shim_what_left_the_group_dies_before_the_exit_of_a_container_that_killed_its_shim() {
    let mut h = Harness::shimmed();
    let dir = temp_dir("shim-killed");
    let pidfile = dir.join("escaped.pid");
    let script = format!(
        "(setsid sh -c 'echo $$$$ > {p}.tmp; mv {p}.tmp {p}; exec sleep 7363' </dev/null >/dev/null 2>&1 &); \
         while [ ! -s {p} ]; do sleep 0.01; done; kill -9 $PPID; sleep 7364",
        p = pidfile.display()
    );
    let pod = with_containers(pod("shim-killed", "Never"), vec![sh("app", &script)]);
    let id = uid(&pod);
    h.sync(&pod).await;
    h.wait_for(&id, "app terminated", |s| terminated(app(s)).is_some()).await;
    let escaped: u32 = std::fs::read_to_string(&pidfile).unwrap().trim().parse().unwrap();
    let stat = std::fs::read_to_string(format!("/proc/{escaped}/stat")).unwrap_or_default();
    let live = stat.rsplit_once(')').is_some_and(|(_, rest)| !rest.trim_start().starts_with('Z'));
    assert!(!live, "the process that left the group still ran when the exit was reported: {stat}");
    let _ = std::fs::remove_dir_all(&dir);
}

/// Waits (at most [`WAIT`]) until process `pid` has ended (a zombie has: nobody here reaps what
/// init inherits).
async fn wait_until_gone(pid: u32, what: &str) {
    let deadline = Instant::now() + WAIT;
    while std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .is_ok_and(|stat| stat.rsplit_once(')').is_some_and(|(_, rest)| !rest.trim_start().starts_with('Z')))
    {
        assert!(Instant::now() < deadline, "{what}: process {pid} still runs");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

/// A container that floods its shim with SIGUSR1 (which would merge with and drown the agent's
/// own) is still killed whole when its grace period ends: the agent asks on the shim's control
/// socket too, so the process that left the group dies with it, not only what the group's
/// SIGKILL reaches a second later.
#[actix::test]
async fn under_the_shim_a_container_cannot_drown_its_kill() {
    let mut h = Harness::shimmed();
    let dir = temp_dir("drown");
    let pidfile = dir.join("escaped.pid");
    let script = format!(
        "trap '' TERM; (setsid sh -c 'echo $$$$ > {p}.tmp; mv {p}.tmp {p}; exec sleep 7362' </dev/null >/dev/null 2>&1 &); \
         while [ ! -s {p} ]; do sleep 0.01; done; while :; do kill -USR1 $PPID 2>/dev/null; done",
        p = pidfile.display()
    );
    let pod = with_containers(pod("drown", "Never"), vec![sh("app", &script)]);
    let id = uid(&pod);
    h.sync(&pod).await;
    h.wait_for(&id, "app running", |s| running(app(s))).await;
    wait_for_file(&pidfile).await;
    let escaped: u32 = std::fs::read_to_string(&pidfile).unwrap().trim().parse().unwrap();
    h.kill_pod(&id, Duration::from_millis(200)).await;
    let status = h.status(&id).await.unwrap();
    let state = terminated(app(&status)).expect("stopped");
    assert_eq!((state.exit_code, state.signal), (137, None), "killed by the shim's SIGKILL");
    wait_until_gone(escaped, "the process that left the group outlived its container").await;
    let _ = std::fs::remove_dir_all(&dir);
}

/// A stand-in for the agent's shim whose report is late: it ignores the signals a stop sends
/// (as the real shim handles them), writes its PID (the shim's) to `trapped` in `dir`, sleeps
/// `delay`, then becomes the real shim.
fn slow_shim(dir: &Path, delay: &str) -> PathBuf {
    use std::os::unix::fs::PermissionsExt as _;
    let path = dir.join("slow-shim");
    let script = format!(
        "#!/bin/sh\ntrap '' TERM USR1\necho $$ > {trapped}.tmp\nmv {trapped}.tmp {trapped}\nsleep {delay}\nshift 3\nexec {} container-shim --wait-for-go -- \"$@\"\n",
        env!("CARGO_BIN_EXE_probelet"),
        trapped = dir.join("trapped").display(),
    );
    std::fs::write(&path, script).unwrap();
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).unwrap();
    path
}

/// Whether some process's command line is `cmdline` (NUL-separated, as /proc has it).
fn procs_with_cmdline(cmdline: &str) -> bool {
    std::fs::read_dir("/proc")
        .unwrap()
        .flatten()
        .any(|entry| std::fs::read(entry.path().join("cmdline")).is_ok_and(|c| c == cmdline.as_bytes()))
}

/// Waits (bounded) until the process whose PID `pidfile` holds has exited, if it ever started.
async fn wait_gone(pidfile: &Path) {
    let Ok(pid) = std::fs::read_to_string(pidfile) else { return };
    let stat = format!("/proc/{}/stat", pid.trim());
    let deadline = Instant::now() + WAIT;
    while std::fs::read_to_string(&stat)
        .is_ok_and(|stat| stat.rsplit_once(')').is_some_and(|(_, rest)| !rest.trim_start().starts_with('Z')))
    {
        assert!(Instant::now() < deadline, "process {} outlived its container", pid.trim());
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

/// The shim's report is read off the runtime's thread: while it is late the runtime answers,
/// and shows the container created, not yet started; then running, with `Started`.
#[actix::test]
async fn a_late_shim_report_does_not_hold_the_runtime() {
    let dir = temp_dir("late-report");
    let shim = slow_shim(&dir, "1");
    let mut h = Harness::build(|runtime| runtime.with_shim(&shim));
    let pod = with_containers(pod("late", "Never"), vec![container("app", &["sleep", "1000"])]);
    let id = uid(&pod);
    h.sync(&pod).await;
    let status = h.status(&id).await.unwrap();
    assert_eq!(waiting(app(&status)), Some(("ContainerCreating", None)), "{status:#?}");
    assert!(app(&status).container_id.is_some(), "a created container has its ID");
    assert_eq!(h.events_for("app"), ["Normal Created Created container: app"]);

    let status = h.wait_for(&id, "app running", |s| running(app(s))).await;
    assert_eq!(app(&status).restart_count, 0);
    assert_eq!(h.events_for("app")[1..], ["Normal Started Started container app"]);
    h.kill_pod(&id, Duration::from_millis(100)).await;
    let _ = std::fs::remove_dir_all(&dir);
}

/// A pod forgotten while its container starts: once the shim reports, the container is killed
/// with everything it started; nothing is left running.
#[actix::test]
async fn a_container_whose_pod_was_forgotten_while_it_started_is_killed() {
    let dir = temp_dir("forgotten-starting");
    let shim = slow_shim(&dir, "0.5");
    let h = Harness::build(|runtime| runtime.with_shim(&shim));
    let pod = with_containers(pod("forgotten", "Never"), vec![container("app", &["sleep", "7377"])]);
    let id = uid(&pod);
    h.sync(&pod).await;
    let shim_pid = dir.join("trapped");
    wait_for_file(&shim_pid).await;
    h.runtime.send(ForgetPod(id.clone().into())).await.unwrap();
    // The slow shim ignored the kill and starts the program: the report has it killed, and the
    // shim, a subreaper, exits only once everything it started is gone.
    wait_gone(&shim_pid).await;
    assert!(!procs_with_cmdline("sleep\x007377\x00"), "the container outlived its forgotten pod");
    let _ = std::fs::remove_dir_all(&dir);
}

/// A shim that never reports (here: it starts the program and hangs): after the report's
/// wait the start fails, and the whole group is killed, the program too, not only the shim.
#[actix::test]
async fn a_shim_that_never_reports_has_its_whole_group_killed() {
    use std::os::unix::fs::PermissionsExt as _;
    let dir = temp_dir("silent-shim");
    let shim = dir.join("silent-shim");
    std::fs::write(&shim, "#!/bin/sh\nsleep 7390 &\nexec sleep 60\n").unwrap();
    std::fs::set_permissions(&shim, std::fs::Permissions::from_mode(0o755)).unwrap();
    let mut h = Harness::build(|runtime| runtime.with_shim(&shim));
    let pod = with_containers(pod("silent", "Never"), vec![container("app", &["true"])]);
    let id = uid(&pod);
    h.sync(&pod).await;
    let deadline = Instant::now() + WAIT;
    while !procs_with_cmdline("sleep\x007390\x00") {
        assert!(Instant::now() < deadline, "the silent shim's program started");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let status = h.wait_for(&id, "the start failed", |s| terminated(app(s)).is_some()).await;
    assert_eq!(terminated(app(&status)).unwrap().reason.as_deref(), Some("StartError"));
    let deadline = Instant::now() + WAIT;
    while procs_with_cmdline("sleep\x007390\x00") {
        assert!(Instant::now() < deadline, "the program outlived its failed start");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let _ = std::fs::remove_dir_all(&dir);
}

/// A pod killed while its container starts: the kill ends (here with the group's SIGKILL, the
/// shim ignoring the rest) and the container is not running.
#[actix::test]
async fn a_pod_killed_while_its_container_starts_stops() {
    let dir = temp_dir("killed-starting");
    let shim = slow_shim(&dir, "30");
    let h = Harness::build(|runtime| runtime.with_shim(&shim));
    let pod = with_containers(pod("killed", "Always"), vec![container("app", &["sleep", "7378"])]);
    let id = uid(&pod);
    h.sync(&pod).await;
    tokio::time::timeout(WAIT, h.kill_pod(&id, Duration::from_millis(100))).await.expect("the kill ends");
    let status = h.status(&id).await.unwrap();
    assert!(!running(app(&status)), "{status:#?}");
    let _ = std::fs::remove_dir_all(&dir);
}

/// A pod of more containers than a turn may start: the sync's turn starts its share (at most
/// `STARTS_PER_TURN`, fewer past `START_TURN_TIME`), the rest start in the next turns (other
/// tasks on the thread run in between), and all run.
#[actix::test]
async fn a_crowded_pod_starts_its_containers_over_several_turns() {
    let mut h = Harness::new();
    let count = 3 * STARTS_PER_TURN + 1;
    let containers = (0..count).map(|i| container(&format!("c{i}"), &["sleep", "1000"])).collect();
    let pod = with_containers(pod("crowd", "Never"), containers);
    let id = uid(&pod);
    // Both queued before the actor runs: the status is read right after the sync's turn.
    let sync = h.runtime.send(SyncPod::new(Arc::new(pod.clone())));
    let status = h.runtime.send(GetRuntimeStatus(id.clone().into()));
    sync.await.unwrap();
    let status = status.await.unwrap().unwrap();
    let running_now = status.containers.iter().filter(|c| running(c)).count();
    // At most a turn's share (fewer if the turn ran out of time first), never all of them.
    assert!((1..=STARTS_PER_TURN).contains(&running_now), "{running_now} started in the sync's turn");
    h.wait_for(&id, "all running", |s| s.containers.iter().all(running)).await;
    h.kill_pod(&id, Duration::from_millis(100)).await;
}

/// After a forced shutdown has killed every container, a start still under way (the runtime's
/// thread was busy) runs nothing: it fails, and the agent can exit leaving nothing behind.
#[actix::test]
async fn nothing_starts_after_every_container_was_killed() {
    for shimmed in [false, true] {
        let groups = ContainerGroups::new();
        let with = groups.clone();
        let mut h = Harness::build(move |runtime| {
            let runtime = runtime.with_groups(with);
            if shimmed { runtime.with_shim(env!("CARGO_BIN_EXE_probelet")) } else { runtime }
        });
        groups.kill_all();
        let pod = with_containers(pod("late", "Never"), vec![container("app", &["sleep", "7379"])]);
        let id = uid(&pod);
        h.sync(&pod).await;
        let status = h.wait_for(&id, "app not started", |s| terminated(app(s)).is_some()).await;
        let state = terminated(app(&status)).unwrap();
        assert_eq!(state.reason.as_deref(), Some("StartError"), "shimmed {shimmed}: {state:?}");
        assert!(!h.events_for("app").iter().any(|e| e.contains("Started")), "shimmed {shimmed}");
        // The child was killed before it could exec (without the shim) or before the go byte.
        let deadline = Instant::now() + WAIT;
        while procs_with_cmdline("sleep\x007379\x00") {
            assert!(Instant::now() < deadline, "shimmed {shimmed}: the container runs");
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    }
}

/// Under `OnFailure` a container a failed probe killed is restarted even when it exits 0 on
/// SIGTERM, as upstream's `computePodActions` restarts it: it does not count as completed.
#[actix::test]
async fn a_container_a_probe_killed_restarts_under_on_failure_whatever_its_exit_code() {
    let mut h = Harness::new();
    let dir = temp_dir("on-failure");
    let (app_container, trapped) = exits_0_on_term(&dir, "trapped");
    let pod = with_containers(pod("on-failure", "OnFailure"), vec![app_container]);
    let id = uid(&pod);
    h.sync(&pod).await;
    h.wait_for(&id, "app running", |s| running(app(s))).await;
    wait_for_file(&trapped).await;
    h.kill_for_liveness(&id);
    let status = h.wait_for(&id, "app restarted", |s| app(s).restart_count == 1 && running(app(s))).await;
    let last = last_terminated(app(&status)).unwrap();
    assert_eq!((last.exit_code, last.reason.as_deref()), (0, Some("Completed")));
    h.kill_pod(&id, Duration::from_millis(100)).await;
    let _ = std::fs::remove_dir_all(&dir);
}

/// Container `app`: exits 0 on SIGTERM, after touching `<dir>/<marker>` once its trap is set.
fn exits_0_on_term(dir: &Path, marker: &str) -> (Container, PathBuf) {
    let trapped = dir.join(marker);
    let script = format!("trap 'exit 0' TERM; touch {}; while true; do sleep 0.05; done", trapped.display());
    (sh("app", &script), trapped)
}

impl Harness {
    /// What the host sends for a failed liveness probe of container `app`: kill it and restart
    /// it as its policy allows.
    fn kill_for_liveness(&self, pod_uid: &str) {
        self.runtime.do_send(KillContainer {
            pod_uid: pod_uid.into(),
            container: "app".into(),
            container_id: None,
            message: "Container app failed liveness probe".into(),
            grace: Duration::from_secs(5),
            restart: true,
        });
    }
}

/// `ContainerRestartRules`: a container whose own policy is `OnFailure`, in a `Never` pod, is
/// restarted after a probe's kill whatever its exit code; one whose own policy is `Never`, in an
/// `Always` pod, is not.
#[actix::test]
async fn a_probe_kill_restarts_by_the_containers_own_policy() {
    let mut h = Harness::new();
    let dir = temp_dir("own-kill");
    for (name, pod_policy, own, restarted) in
        [("kill-on-failure", "Never", "OnFailure", true), ("kill-never", "Always", "Never", false)]
    {
        let (mut app_container, trapped) = exits_0_on_term(&dir, name);
        app_container.restart_policy = Some(own.into());
        let pod = with_containers(pod(name, pod_policy), vec![app_container]);
        let id = uid(&pod);
        h.sync(&pod).await;
        h.wait_for(&id, "app running", |s| running(app(s))).await;
        wait_for_file(&trapped).await;
        h.kill_for_liveness(&id);
        let status = if restarted {
            h.wait_for(&id, "app restarted", |s| app(s).restart_count == 1 && running(app(s))).await
        } else {
            let status = h.wait_for(&id, "app terminated", |s| terminated(app(s)).is_some()).await;
            h.sync(&pod).await;
            assert_eq!(h.status(&id).await.unwrap(), status, "{name}: not started again");
            status
        };
        assert_eq!(app(&status).restart_count, i32::from(restarted), "{name}");
        h.kill_pod(&id, Duration::from_millis(100)).await;
    }
    let _ = std::fs::remove_dir_all(&dir);
}

// === the file-descriptor budget ===

/// A budget of 74 descriptors (64 kept back, 5 per container) allows 2 containers, 1 per pod:
/// the pod's second container is held back with one Warning, and starts once the first one's
/// share is free.
#[actix::test]
async fn a_start_the_fd_budget_refuses_is_held_back_until_there_is_room() {
    let mut h = Harness::build(|runtime| runtime.with_fd_budget(FdBudget::new(74, 0)));
    let pod = with_containers(
        pod("budget", "Never"),
        vec![container("c0", &["sleep", "1000"]), container("c1", &["sleep", "1000"])],
    );
    let id = uid(&pod);
    h.sync(&pod).await;
    let status = h.wait_for(&id, "c0 running", |s| running(named(&s.containers, "c0"))).await;
    assert_eq!(waiting(named(&status.containers, "c1")).map(|w| w.0), Some("ContainerCreating"));
    let held_back = "Warning OutOfFileDescriptors Container c1 not started: the pod already runs 1 \
                     containers, half of the 2 the agent's 74 file descriptors allow";
    // Synced again (the kubelet does every few seconds): still held back, still one event.
    h.sync(&pod).await;
    h.sync(&pod).await;
    assert_eq!(h.events_for("c1"), [held_back]);

    h.runtime.do_send(KillContainer {
        pod_uid: id.clone().into(),
        container: "c0".into(),
        container_id: None,
        message: "Stopping container c0".into(),
        grace: Duration::from_millis(100),
        restart: false,
    });
    let status = h.wait_for(&id, "c1 running once c0 is gone", |s| running(named(&s.containers, "c1"))).await;
    assert!(terminated(named(&status.containers, "c0")).is_some());
    assert_eq!(
        h.events_for("c1")[1..],
        ["Normal Created Created container: c1", "Normal Started Started container c1"]
    );
    h.kill_pod(&id, Duration::from_millis(100)).await;
}

/// A container whose crash-loop back-off is over but whose start the descriptor budget
/// refuses is no longer said backing off: its status is the failed start's, as it was before
/// every sync recorded `BackOff`, not `CrashLoopBackOff` for as long as the budget holds it
/// back. A budget of 69 descriptors allows one container in all.
#[actix::test]
async fn a_container_held_back_after_its_back_off_is_not_said_backing_off() {
    let mut h = Harness::build(|runtime| {
        runtime
            .with_fd_budget(FdBudget::new(69, 0))
            .with_backoff(Duration::from_secs(1), Duration::from_secs(2))
    });
    let held = with_containers(pod("held", "Always"), vec![container("app", &[NO_SUCH, "x"])]);
    let held_id = uid(&held);
    h.sync(&held).await;
    h.wait_for(&held_id, "app backing off", |s| {
        waiting(app(s)).is_some_and(|(reason, _)| reason == "CrashLoopBackOff")
    })
    .await;
    let hog = with_containers(pod("hog", "Always"), vec![container("hog", &["sleep", "1000"])]);
    let hog_id = uid(&hog);
    h.sync(&hog).await;
    h.wait_for(&hog_id, "hog running", |s| running(app_named(s, "hog"))).await;
    // Past the back-off's end (1 s), tried and held back.
    tokio::time::sleep(Duration::from_millis(1500)).await;
    let events = h.events_for("app");
    assert!(events.iter().any(|e| e.starts_with("Warning OutOfFileDescriptors")), "{events:?}");
    let status = h.status(&held_id).await.unwrap();
    assert_eq!(waiting(app(&status)).map(|w| w.0), Some("RunContainerError"), "{status:#?}");
    h.kill_pod(&held_id, Duration::from_millis(100)).await;
    h.kill_pod(&hog_id, Duration::from_millis(100)).await;
}

/// A harness whose groups are recorded in `dir`, with `containers/` made a file so that no
/// record can be written; its runtime runs containers under the shim if `shimmed`, as the
/// agent's does, or without it, as an embedding host's may.
fn harness_with_unwritable_records(dir: &Path, shimmed: bool) -> Harness {
    let (groups, _) = ContainerGroups::open(dir).unwrap();
    let containers = dir.join("containers");
    std::fs::remove_dir(&containers).unwrap();
    std::fs::write(&containers, "not a folder").unwrap();
    Harness::build(move |runtime| {
        let runtime = runtime.with_groups(groups);
        if shimmed { runtime.with_shim(env!("CARGO_BIN_EXE_probelet")) } else { runtime }
    })
}

/// Syncs pod `name` (`Never`, one container `app` running `argv`) on `h`, whose records cannot
/// be written, and waits for its start to be refused: its UID and that status.
async fn refused_start(h: &mut Harness, name: &str, argv: &[&str]) -> (String, RuntimePodStatus) {
    let pod = with_containers(pod(name, "Never"), vec![container("app", argv)]);
    let id = uid(&pod);
    h.sync(&pod).await;
    let status = h
        .wait_for(&id, "CreateContainerConfigError", |s| {
            waiting(app(s)).is_some_and(|(r, _)| r == "CreateContainerConfigError")
        })
        .await;
    (id, status)
}

/// Upstream's startContainer records `Created` only after CreateContainer succeeded: a
/// generateContainerConfig failure gives one `Failed` event, nothing else. Before, `Created`
/// came first (a review's finding).
#[actix::test]
async fn a_container_whose_record_is_refused_is_failed_without_being_created() {
    failed_without_being_created(true).await;
}

/// The same without the shim. Before, the container started: `Created`, `Started`.
#[actix::test]
async fn without_the_shim_a_container_whose_record_is_refused_is_failed_without_being_created() {
    failed_without_being_created(false).await;
}

async fn failed_without_being_created(shimmed: bool) {
    let dir = temp_dir(&format!("created-without-record-{shimmed}"));
    let mut h = harness_with_unwritable_records(&dir, shimmed);
    refused_start(&mut h, "cfg", &["sleep", "30"]).await;
    let events = h.events_for("app");
    let _ = std::fs::remove_dir_all(&dir);
    assert!(!events.is_empty() && events.iter().all(|e| !e.contains("Created")), "{events:#?}");
}

/// The same failure retried gives the same event and status message, as upstream's would for
/// the same error: the records' folder is named, not the record (the shim's PID, new at each
/// retry). Before, each retry was a new text: a new status, and a new event pushing the pod's
/// others out of `/events` (a review's finding).
#[actix::test]
async fn a_record_refused_again_says_the_same_message_at_each_retry() {
    same_message_at_each_retry(true).await;
}

/// The same without the shim, retried as under it. Before, the container started.
#[actix::test]
async fn without_the_shim_a_record_refused_again_says_the_same_message_at_each_retry() {
    same_message_at_each_retry(false).await;
}

async fn same_message_at_each_retry(shimmed: bool) {
    let dir = temp_dir(&format!("same-message-{shimmed}"));
    let mut h = harness_with_unwritable_records(&dir, shimmed);
    let (id, first) = refused_start(&mut h, "cfg2", &["sleep", "30"]).await;
    let first = waiting(app(&first)).unwrap().1.unwrap().to_owned();
    let deadline = Instant::now() + WAIT;
    let mut failed;
    loop {
        failed =
            h.events_for("app").into_iter().filter(|e| e.starts_with("Warning Failed")).collect::<Vec<_>>();
        if failed.len() >= 2 || Instant::now() >= deadline {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let last = h.status(&id).await.unwrap();
    let last = waiting(app(&last)).unwrap().1.unwrap().to_owned();
    let _ = std::fs::remove_dir_all(&dir);
    assert_eq!(first, last, "status message changes at every retry");
    assert!(
        failed.len() >= 2 && failed.windows(2).all(|w| w[0] == w[1]),
        "same event each retry: {failed:#?}"
    );
}

/// A container in crash-loop back-off whose restarts are refused (its records' folder made a
/// file by its one run): each try fails with `CreateContainerConfigError` and no restart
/// counted; a retry that finds it still backing off shows `CrashLoopBackOff` with the back-off
/// until the next try, as upstream's reason cache holds the last sync's outcome. Tries at 0, 10,
/// 20, 40 and 80 s after the crash (each a back-off step, as `doBackOff` takes before
/// `startContainer`), `BackOff` at the retries 10 s after the last two. Before, the status read
/// `CreateContainerConfigError` throughout (docs/reliability.md, "The agent's own disk").
#[actix::test]
async fn a_record_refused_in_crash_loop_back_off_alternates_with_the_back_off() {
    let dir = temp_dir("refused-in-back-off");
    let (groups, _) = ContainerGroups::open(&dir).unwrap();
    let mut h = Harness::build(|runtime| {
        runtime
            .with_shim(env!("CARGO_BIN_EXE_probelet"))
            .with_groups(groups)
            .with_backoff(Duration::from_secs(10), Duration::from_secs(300))
    });
    let script = format!("rm -rf '{0}/containers' && echo x > '{0}/containers'; exit 1", dir.display());
    let pod = with_containers(pod("cl", "Always"), vec![sh("app", &script)]);
    let id = uid(&pod);
    h.sync(&pod).await;
    // The crash restarts at once (no back-off yet), and that start is refused.
    let status = h
        .wait_for(&id, "the restart refused", |s| {
            waiting(app(s)).is_some_and(|(r, _)| r == "CreateContainerConfigError")
        })
        .await;
    let refused = waiting(app(&status)).unwrap().1.unwrap().to_owned();
    // Nothing runs from here on: the kubelet's own seconds, paused.
    tokio::time::pause();
    let begin = Instant::now();
    let deadline = begin + Duration::from_secs(600);
    let (mut trace, mut events, mut seen) = (Vec::new(), Vec::new(), 0);
    loop {
        let at = begin.elapsed().as_secs_f64().round() as u64;
        let status = h.status(&id).await.unwrap();
        let (reason, message) = waiting(app(&status)).expect("waiting");
        let now = (reason.to_owned(), message.unwrap_or_default().to_owned());
        if trace.last().is_none_or(|(_, last)| *last != now) {
            trace.push((at, now));
        }
        assert_eq!(app(&status).restart_count, 0, "a refused start counts no restart");
        assert_eq!(last_terminated(app(&status)).map(|t| t.exit_code), Some(1), "the crash");
        let all = h.events_for("app");
        events.extend(all[seen..].iter().map(|e| (at, e.clone())));
        seen = all.len();
        if events.iter().filter(|(_, e)| e.starts_with("Warning Failed")).count() >= 5 {
            break;
        }
        tokio::time::timeout_at(deadline, h.changes.recv()).await.expect("another try").unwrap();
    }
    let _ = std::fs::remove_dir_all(&dir);
    let config_error = ("CreateContainerConfigError".to_owned(), refused.clone());
    let back_off = |d: &str| {
        (
            "CrashLoopBackOff".to_owned(),
            format!("back-off {d} restarting failed container=app pod=cl_default(uid-cl)"),
        )
    };
    assert_eq!(
        trace,
        [
            (0, config_error.clone()),
            (30, back_off("40s")),
            (40, config_error.clone()),
            (50, back_off("1m20s")),
            (80, config_error),
        ]
    );
    let failed = format!("Warning Failed Error: {refused}");
    let backing_off =
        "Warning BackOff Back-off restarting failed container app in pod cl_default(uid-cl)".to_owned();
    let after_the_run: Vec<_> =
        events.into_iter().skip_while(|(_, e)| !e.contains("Started")).skip(1).collect();
    assert_eq!(
        after_the_run,
        [
            (0, failed.clone()),
            (10, failed.clone()),
            (20, failed.clone()),
            (30, backing_off.clone()),
            (40, failed.clone()),
            (50, backing_off),
            (80, failed),
        ]
    );
}

/// Without the shim (a runtime an embedding host built without it) the program runs from its
/// spawn, before its record can be written: a record refused kills it, and the start fails as
/// under the shim (`CreateContainerConfigError` naming the records' folder, `Warning Failed`
/// alone, no restart counted, no last state). Before, it ran unrecorded with an ERROR logged:
/// after a crash the next agent could not know it, and it ran beside its next copy. (The
/// retries and their message are checked without the shim above.)
#[actix::test]
async fn without_the_shim_a_container_whose_record_is_refused_does_not_run() {
    let dir = temp_dir("refused-without-shim");
    let mut h = harness_with_unwritable_records(&dir, false);
    let (_, status) = refused_start(&mut h, "unshimmed", &["sleep", "7386"]).await;
    let events = h.events_for("app");
    let containers = dir.join("containers");
    let _ = std::fs::remove_dir_all(&dir);
    let app = app(&status);
    let (_, message) = waiting(app).unwrap();
    let expected = format!("cannot record the container in the state directory: {}: ", containers.display());
    assert!(message.is_some_and(|m| m.starts_with(&expected)), "{message:?}");
    assert_eq!(app.restart_count, 0);
    assert_eq!(last_terminated(app), None);
    // One per try (tried again every 200 ms here).
    let failed = format!("Warning Failed Error: {}", message.unwrap());
    assert!(!events.is_empty() && events.iter().all(|e| *e == failed), "{events:#?}");
    let deadline = Instant::now() + WAIT;
    while procs_with_cmdline("sleep\x007386\x00") {
        assert!(Instant::now() < deadline, "the container runs unrecorded");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}
