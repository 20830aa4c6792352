//! The standalone kubelet with the local process runtime, under paused tokio time: a pod's
//! active deadline, and the kill a failed liveness or startup result asks for (docs/reliability.md,
//! "A failed liveness probe always restarts its container, even on a loaded node"). Containers are
//! real processes; their signals go to a recording signaller that delivers none (a process
//! that died meanwhile would race the paused clock) unless a test needs a killed container to
//! exit, and the groups are killed for real when the test ends.

use std::sync::Mutex;

use k8s_openapi::api::core::v1::ContainerStatus;
use k8s_openapi::jiff::SignedDuration;
use probelet_actors::PipelineConfig;
use probelet_actors::clock::{SharedClock, SteppingClock, TokioClock};
use probelet_actors::container::ContainerId;
use probelet_actors::contracts::MemoryRecorder;
use probelet_actors::local_runner::LocalCommandRunner;
use probelet_actors::process::{Signal, signal_container, signal_group};
use probelet_actors::status::views::StatusView;

use super::*;
use crate::host::runtime::{ContainerGroups, Signaller};

/// Rescans, resyncs and housekeeping are this far apart: only the deadline's own timer can
/// fail a pod on time.
const RARELY: Duration = Duration::from_secs(3600);
/// The longest any test waits for one status (paused time: only a hang reaches it).
const WAIT: Duration = Duration::from_secs(600);
/// The longest a test waits for what follows a real process's exit (real time: a delivered
/// SIGTERM ends `sleep` at once, so only a hang, or a kill that never came, reaches it).
const REAL_WAIT: Duration = Duration::from_secs(60);

type Sent = Arc<Mutex<Vec<(u32, Signal, Instant)>>>;

/// What the runtime's signals do.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Signals {
    /// Recorded, never delivered: a container the runtime kills goes on running.
    Recorded,
    /// Recorded and delivered: a killed container exits, and its restart policy decides what
    /// follows. The exit is a real process's, which a test waits for in real time.
    Delivered,
}

struct Harness {
    kubelet: Addr<StandaloneKubelet>,
    pipeline: Pipeline,
    runtime: Addr<ProcessRuntime>,
    recorder: MemoryRecorder,
    /// Every signal the runtime sent, with when; none is delivered.
    sent: Sent,
    dir: PathBuf,
}

impl Harness {
    /// The kubelet on a folder holding `manifest`, with a wall clock on tokio time.
    fn start(name: &str, manifest: &str) -> Harness {
        Harness::start_with(name, manifest, Signals::Recorded)
    }

    /// [`Harness::start`], with the runtime's signals doing what `signals` says.
    fn start_with(name: &str, manifest: &str, signals: Signals) -> Harness {
        Harness::start_configured(name, manifest, signals, |_| {})
    }

    /// [`Harness::start_with`], the kubelet's configuration changed by `configure` before it
    /// starts.
    fn start_configured(
        name: &str,
        manifest: &str,
        signals: Signals,
        configure: impl FnOnce(&mut KubeletConfig),
    ) -> Harness {
        let clock = Arc::new(TokioClock::starting_at(Timestamp::from_second(1_800_000_000).expect("a time")));
        Harness::start_clocked(name, manifest, signals, clock, configure)
    }

    /// [`Harness::start_configured`] on `clock` (a `SteppingClock`, to step the node's clock).
    fn start_clocked(
        name: &str,
        manifest: &str,
        signals: Signals,
        clock: SharedClock,
        configure: impl FnOnce(&mut KubeletConfig),
    ) -> Harness {
        let dir = std::env::temp_dir().join(format!("probelet-kubelet-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).expect("a temp dir");
        std::fs::write(dir.join("pod.yaml"), manifest).expect("the manifest");
        let recorder = MemoryRecorder::new();
        let pods = PodRegistry::new();
        let runner = LocalCommandRunner::new();
        let mut config =
            PipelineConfig::new(Arc::new(runner.clone()), Arc::new(recorder.clone()), Arc::new(pods.clone()));
        config.clock = Some(clock.clone());
        let pipeline = Pipeline::start(config);
        let sent = Sent::default();
        let log = sent.clone();
        let signaller = Signaller::new(move |pgid, signal| {
            log.lock().expect("the signal log").push((pgid, signal, Instant::now()));
            match signals {
                Signals::Recorded => Err(std::io::Error::from(std::io::ErrorKind::PermissionDenied)),
                Signals::Delivered => signal_container(pgid, signal),
            }
        });
        let runtime = ProcessRuntime::new(runner, Arc::new(recorder.clone()), clock.clone())
            .with_signaller(signaller)
            .start();
        let mut kubelet_config = KubeletConfig {
            manifests: dir.clone(),
            manifests_as_given: None,
            node_name: "node".into(),
            ran_before: Default::default(),
            groups: ContainerGroups::new(),
            rescan_period: RARELY,
            resync_period: RARELY,
            housekeeping_period: RARELY,
        };
        configure(&mut kubelet_config);
        let kubelet = start_kubelet(StandaloneKubelet::new(
            kubelet_config,
            pipeline.clone(),
            runtime.clone(),
            pods,
            ProbeHistory::new(clock),
            Arc::default(),
        ));
        Harness { kubelet, pipeline, runtime, recorder, sent, dir }
    }

    /// The one pod of the folder and a view of its status.
    async fn pod(&self) -> (PodUid, StatusView) {
        let pods = self.kubelet.send(ListPods).await.expect("the kubelet answers");
        let uid = PodUid::of(&pods[0]).expect("a UID");
        let view = self.pipeline.views.subscribe(&uid);
        (uid, view)
    }

    fn signals(&self) -> Vec<(Signal, Instant)> {
        self.sent.lock().expect("the signal log").iter().map(|(_, signal, at)| (*signal, *at)).collect()
    }

    /// The events about the pod itself (no container's field path), rendered.
    fn pod_events(&self) -> Vec<String> {
        self.recorder.events().iter().filter(|e| e.object.field_path.is_none()).map(|e| e.render()).collect()
    }

    async fn app(&self, uid: &PodUid) -> ContainerStatus {
        let status = self.runtime.send(GetRuntimeStatus(uid.clone())).await.expect("the runtime answers");
        status.expect("the pod's containers").containers.remove(0)
    }

    /// The container named `name` as the runtime has it.
    async fn container(&self, uid: &PodUid, name: &str) -> ContainerStatus {
        let status = self.runtime.send(GetRuntimeStatus(uid.clone())).await.expect("the runtime answers");
        let containers = status.expect("the pod's containers").containers;
        containers.into_iter().find(|c| c.name == name).expect("the container")
    }

    /// How many container stops the runtime began (each sends SIGTERM to the container's group
    /// first; a container's own exit only SIGKILLs what it left there).
    fn terms(&self) -> usize {
        self.signals().iter().filter(|(signal, _)| *signal == Signal::Term).count()
    }

    /// The `Killing` events, each with the container it is about.
    fn killings(&self) -> Vec<String> {
        let events = self.recorder.events();
        let killings = events.iter().filter(|e| e.reason == "Killing");
        killings
            .map(|e| format!("{}: {}", e.object.field_path.as_deref().unwrap_or_default(), e.render()))
            .collect()
    }

    /// What the results cache tells the kubelet when a probe's result changes.
    fn probe_result(&self, uid: &PodUid, kind: ProbeKind, container_id: &str, result: ProbeResult) {
        let container_id = ContainerId::parse(container_id);
        self.kubelet.do_send(ProbeResultChanged { kind, container_id, result, pod_uid: uid.clone() });
    }
}

impl Drop for Harness {
    fn drop(&mut self) {
        for (pgid, _, _) in self.sent.lock().unwrap_or_else(std::sync::PoisonError::into_inner).iter() {
            let _ = signal_group(*pgid, Signal::Kill);
        }
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

async fn wait_for(view: &mut StatusView, what: &str, done: impl Fn(&PodStatus) -> bool) -> Arc<PodStatus> {
    wait_within(WAIT, view, what, done).await
}

/// [`wait_for`] for what follows a real process's exit, in real time: paused, the clock would
/// jump to the wait's timeout before the exit is seen. The clock is paused again after.
async fn wait_for_real(
    view: &mut StatusView,
    what: &str,
    done: impl Fn(&PodStatus) -> bool,
) -> Arc<PodStatus> {
    tokio::time::resume();
    let status = wait_within(REAL_WAIT, view, what, done).await;
    tokio::time::pause();
    status
}

async fn wait_within(
    limit: Duration,
    view: &mut StatusView,
    what: &str,
    done: impl Fn(&PodStatus) -> bool,
) -> Arc<PodStatus> {
    let found = tokio::time::timeout(limit, view.wait_for(|s| s.as_deref().is_some_and(&done))).await;
    match found {
        Ok(Ok(Some(status))) => status,
        _ => panic!("no status with {what}; last: {:#?}", view.borrow()),
    }
}

fn phase(status: &PodStatus) -> &str {
    status.phase.as_deref().unwrap_or_default()
}

/// The status of the container named `name`.
fn container_status<'a>(status: &'a PodStatus, name: &str) -> Option<&'a ContainerStatus> {
    status.container_statuses.iter().flatten().find(|c| c.name == name)
}

/// The ID of the container named `name`, if the status shows it running.
fn running_id<'a>(status: &'a PodStatus, name: &str) -> Option<&'a str> {
    container_status(status, name)
        .filter(|c| c.state.as_ref().is_some_and(|s| s.running.is_some()))
        .and_then(|c| c.container_id.as_deref())
}

/// Lets every task run until all wait: under paused time a sleep ends only once nothing else
/// can run, the clock then jumping to it.
async fn settle() {
    tokio::time::sleep(Duration::from_secs(1)).await;
}

/// `at` is the deadline, 5 s after the start, to the timer's millisecond.
fn assert_at_deadline(at: Duration, what: &str) {
    assert!(at >= Duration::from_secs(5) && at < Duration::from_millis(5_005), "{what} at {at:?}");
}

/// A name held for a file that ran it before the agent started leaves the state directory's
/// record once the hold ends (here: the file read empty at two scans in a row), though no pod
/// changed: the record was written at a change of the folder's pods only, so the next agent
/// would have held the file for a name its hold had given up.
#[actix::test]
async fn a_name_held_for_a_file_that_ran_before_leaves_the_record_when_its_hold_ends() {
    tokio::time::pause();
    let state =
        std::env::temp_dir().join(format!("probelet-kubelet-held-record-state-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&state);
    std::fs::create_dir_all(&state).expect("a state directory");
    let record = state.join(crate::host::runtime::RUNNING_PODS);
    let h = Harness::start_configured("held-record", "", Signals::Recorded, |config| {
        let file = config.manifests.join("pod.yaml");
        let line = format!("uid-web\tdefault\tweb\t{}\n", file.display());
        std::fs::write(&record, line).expect("the previous agent's record");
        config.ran_before = crate::host::runtime::pods_that_ran(&state);
        config.groups = ContainerGroups::open(&state).expect("the state directory").0;
    });
    // The first scan holds the file, caught empty; the second reads it empty again.
    settle().await;
    let held = std::fs::read_to_string(&record).expect("the record");
    h.kubelet.send(Rescan).await.expect("the kubelet answers");
    let after = std::fs::read_to_string(&record).expect("the record");
    let _ = std::fs::remove_dir_all(&state);
    assert!(held.contains("uid-web\tdefault\tweb\t"), "named while held: {held:?}");
    assert_eq!(after, "", "the hold ended");
}

const SLEEPER: &str = r#"apiVersion: v1
kind: Pod
metadata: {name: sleeper}
spec:
  containers:
  - name: app
    command: [sleep, "600"]
"#;

/// Once the state directory was replaced and another agent holds the new one, the running
/// pods' list is not written there: that agent's list stays as it wrote it, at each scan. The
/// list is owed meanwhile, and written at the first scan after the directory is this agent's
/// again (the other agent let it go), though no pod changed since. Before, the list was written
/// over the other agent's, whose next agent would decide by it which pod keeps a name.
#[actix::test]
async fn the_running_pods_list_waits_while_another_agent_holds_the_state_directory() {
    tokio::time::pause();
    let base = std::env::temp_dir().join(format!("probelet-kubelet-pods-held-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&base);
    let state = base.join("state");
    let list = state.join(crate::host::runtime::RUNNING_PODS);
    let (groups, _) = ContainerGroups::open(&state).expect("the state directory");
    let h = Harness::start_configured("pods-held", SLEEPER, Signals::Recorded, |config| {
        config.groups = groups.clone();
    });
    settle().await;
    let first = std::fs::read_to_string(&list).expect("the list");

    std::fs::remove_dir_all(&state).expect("removed");
    let (other, _) = ContainerGroups::open(&state).expect("taken by another agent");
    std::fs::write(&list, "uid-other\n").expect("the other agent's list");
    std::fs::write(h.dir.join("second.yaml"), SLEEPER.replace("sleeper", "second")).expect("a second pod");
    h.kubelet.send(Rescan).await.expect("the kubelet answers");
    let changed = std::fs::read_to_string(&list);
    h.kubelet.send(Rescan).await.expect("the kubelet answers");
    let owed = std::fs::read_to_string(&list);

    drop(other);
    // Its heartbeat thread may hold the lock a moment more, once a second: a bounded retry.
    let mut after = String::new();
    for _ in 0..100 {
        h.kubelet.send(Rescan).await.expect("the kubelet answers");
        after = std::fs::read_to_string(&list).unwrap_or_default();
        if after.contains("\tsecond\t") {
            break;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    let _ = std::fs::remove_dir_all(&base);
    assert!(first.contains("\tdefault\tsleeper\t"), "{first:?}");
    assert_eq!(changed.expect("the list"), "uid-other\n", "written over the other agent's list");
    assert_eq!(owed.expect("the list"), "uid-other\n", "written over it at the next scan");
    assert!(after.contains("\tdefault\tsleeper\t") && after.contains("\tdefault\tsecond\t"), "{after:?}");
}

const DEADLINE_POD: &str = r#"apiVersion: v1
kind: Pod
metadata: {name: deadline}
spec:
  activeDeadlineSeconds: 5
  terminationGracePeriodSeconds: 3
  containers:
  - name: app
    command: [sleep, "600"]
"#;

/// At `startTime` + `activeDeadlineSeconds`, not a resync later (resyncs are an hour apart
/// here), the pod fails with upstream's reason and message, the `DeadlineExceeded` event is
/// recorded once against the pod, and its container is killed with the pod's grace period
/// (TERM at the deadline, KILL 3 s later) and never started again, though its policy is
/// `Always`.
#[actix::test]
async fn a_pod_past_its_active_deadline_fails_and_its_containers_are_killed() {
    tokio::time::pause();
    let began = Instant::now();
    let h = Harness::start("deadline", DEADLINE_POD);
    let (uid, mut view) = h.pod().await;
    let running = wait_for(&mut view, "phase Running", |s| phase(s) == "Running").await;
    let epoch = Timestamp::from_second(1_800_000_000).expect("a time");
    assert_eq!(running.start_time.as_ref().map(|t| t.0), Some(epoch), "started at the clock's start");
    assert_eq!(running.reason, None);
    let id = h.app(&uid).await.container_id;

    let failed = wait_for(&mut view, "phase Failed", |s| phase(s) == "Failed").await;
    assert_at_deadline(began.elapsed(), "failed");
    assert_eq!(failed.reason.as_deref(), Some("DeadlineExceeded"));
    assert_eq!(
        failed.message.as_deref(),
        Some("Pod was active on the node longer than the specified deadline")
    );
    assert_eq!(
        h.pod_events(),
        ["Normal DeadlineExceeded Pod was active on the node longer than the specified deadline"]
    );

    // The kill runs its course (the signals are not delivered: it ends at its deadline), and
    // the pod is synced again meanwhile; an hour later nothing has restarted it.
    settle().await;
    tokio::time::sleep(RARELY * 2).await;
    let signals = h.signals();
    let kinds: Vec<Signal> = signals.iter().map(|(signal, _)| *signal).collect();
    assert_eq!(kinds, [Signal::Term, Signal::Kill], "one kill, never another start");
    assert_at_deadline(signals[0].1 - began, "TERM");
    let grace = signals[1].1 - signals[0].1;
    assert!(
        grace >= Duration::from_secs(3) && grace < Duration::from_millis(3_005),
        "KILL after the pod's grace period: {grace:?}"
    );
    let app = h.app(&uid).await;
    assert_eq!((app.container_id, app.restart_count), (id, 0), "the same instance, never restarted");
    let last = view.borrow().expect("a status");
    assert_eq!(
        (phase(&last), last.reason.as_deref()),
        ("Failed", Some("DeadlineExceeded")),
        "every later sync keeps it failed"
    );
    assert_eq!(h.pod_events().len(), 1, "the event is recorded once");
}

const TEN_MINUTE_DEADLINE_POD: &str = r#"apiVersion: v1
kind: Pod
metadata: {name: deadline}
spec:
  activeDeadlineSeconds: 600
  terminationGracePeriodSeconds: 3
  containers:
  - name: app
    command: [sleep, "6000"]
"#;

/// The node's wall clock stepped forward past a pod's active deadline (NTP correcting a clock
/// that booted behind, a resumed VM): the pod fails at the next housekeeping (every 2 s here
/// and in the agent; upstream's sync loop looks every second), as upstream measures the
/// deadline on the wall clock. Before, only the deadline's timer failed it, and that counts on
/// tokio's clock, which no step moves: ten minutes late here, a suspend's length late after a
/// resume.
#[actix::test]
async fn a_wall_clock_step_past_the_deadline_fails_the_pod_at_the_next_housekeeping() {
    tokio::time::pause();
    let epoch = Timestamp::from_second(1_800_000_000).expect("a time");
    let clock = Arc::new(SteppingClock::starting_at(epoch));
    let h = Harness::start_clocked(
        "deadline-step",
        TEN_MINUTE_DEADLINE_POD,
        Signals::Recorded,
        clock.clone(),
        |c| {
            c.housekeeping_period = Duration::from_secs(2);
        },
    );
    let (_, mut view) = h.pod().await;
    wait_for(&mut view, "phase Running", |s| phase(s) == "Running").await;
    settle().await;
    let stepped = Instant::now();
    clock.step(SignedDuration::from_hours(1));
    let failed = wait_for(&mut view, "phase Failed", |s| phase(s) == "Failed").await;
    assert!(
        stepped.elapsed() <= Duration::from_millis(2_100),
        "failed {:?} after the step",
        stepped.elapsed()
    );
    assert_eq!(failed.reason.as_deref(), Some("DeadlineExceeded"));
    assert_eq!(h.pod_events().len(), 1, "the event is recorded once");
}

/// The node's wall clock stepped back: the deadline counts on the wall clock, as upstream's,
/// so the pod runs until the wall clock reaches `startTime` + `activeDeadlineSeconds` again.
/// The timer armed before the step fires early and its sync, finding the pod not past its
/// deadline, arms the next one; nothing fails the pod early, nothing panics.
#[actix::test]
async fn a_wall_clock_step_back_defers_the_deadline_by_the_step() {
    tokio::time::pause();
    let began = Instant::now();
    let epoch = Timestamp::from_second(1_800_000_000).expect("a time");
    let clock = Arc::new(SteppingClock::starting_at(epoch));
    let h = Harness::start_clocked("deadline-back", DEADLINE_POD, Signals::Recorded, clock.clone(), |_| {});
    let (_, mut view) = h.pod().await;
    wait_for(&mut view, "phase Running", |s| phase(s) == "Running").await;
    clock.step(SignedDuration::from_secs(-60));
    let failed =
        wait_within(Duration::from_secs(600), &mut view, "phase Failed", |s| phase(s) == "Failed").await;
    let at = began.elapsed();
    assert!(at >= Duration::from_secs(65) && at < Duration::from_millis(65_005), "failed at {at:?}");
    assert_eq!(failed.reason.as_deref(), Some("DeadlineExceeded"));
}

/// A pod that completed before its deadline stays `Succeeded` once the deadline is past, and
/// is neither failed nor reported, even when it is synced after the deadline.
#[actix::test]
async fn a_pod_already_terminal_is_not_failed_by_its_deadline() {
    let h = Harness::start(
        "terminal",
        r#"apiVersion: v1
kind: Pod
metadata: {name: done}
spec:
  restartPolicy: Never
  activeDeadlineSeconds: 30
  containers:
  - name: app
    command: ["true"]
"#,
    );
    let (uid, mut view) = h.pod().await;
    // Real time until the process has exited: paused, the clock could jump past the deadline
    // before its exit is seen.
    wait_for(&mut view, "phase Succeeded", |s| phase(s) == "Succeeded").await;
    tokio::time::pause();
    tokio::time::advance(Duration::from_secs(31)).await;
    h.kubelet.do_send(RuntimeChanged { pod_uid: uid.clone() });
    settle().await;
    let last = view.borrow().expect("a status");
    assert_eq!((phase(&last), last.reason.as_deref()), ("Succeeded", None));
    assert!(h.pod_events().is_empty(), "{:?}", h.pod_events());
    // A container's exit SIGKILLs what it left in its group; nothing is stopped (TERM).
    assert!(h.signals().iter().all(|(signal, _)| *signal != Signal::Term), "{:?}", h.signals());
}

/// Three containers; the probe results are about `app`, the middle one both in the spec and
/// by name (the order of the status's container statuses), so that a lookup that took the
/// pod's first or last container would kill another. A grace period far longer than any paused
/// stretch of the tests: TERM is the only stop signal sent (a delivered one ends `sleep` at once).
const THREE_CONTAINERS: &str = r#"apiVersion: v1
kind: Pod
metadata: {name: probed}
spec:
  terminationGracePeriodSeconds: 30
  containers:
  - name: api
    command: [sleep, "600"]
  - name: app
    command: [sleep, "600"]
  - name: worker
    command: [sleep, "600"]
"#;

/// The containers other than `app`.
const OTHERS: [&str; 2] = ["api", "worker"];

/// `kind` failing for the running `app`: that instance is killed with the kubelet's `message`
/// (one `Killing` event, SIGTERM to its group only), and `restartPolicy: Always` starts it
/// again; the others are left alone.
async fn a_failure_kills_the_running_container_and_it_restarts(name: &str, kind: ProbeKind, message: &str) {
    tokio::time::pause();
    let h = Harness::start_with(name, THREE_CONTAINERS, Signals::Delivered);
    let (uid, mut view) = h.pod().await;
    let running = wait_for(&mut view, "every container running", |s| {
        ["app"].iter().chain(&OTHERS).all(|name| running_id(s, name).is_some())
    })
    .await;
    let app_id = running_id(&running, "app").expect("app runs").to_owned();
    let others: Vec<Option<String>> =
        OTHERS.iter().map(|name| running_id(&running, name).map(str::to_owned)).collect();

    h.probe_result(&uid, kind, &app_id, ProbeResult::Failure);
    settle().await;
    assert_eq!(h.killings(), [format!("spec.containers{{app}}: Normal Killing {message}")]);
    assert_eq!(h.terms(), 1, "one container stopped: {:?}", h.signals());

    let restarted =
        wait_for_real(&mut view, "app restarted", |s| running_id(s, "app").is_some_and(|id| id != app_id))
            .await;
    let app = container_status(&restarted, "app").expect("app's status");
    assert_eq!(app.restart_count, 1, "{app:#?}");
    for (name, id) in OTHERS.iter().zip(others) {
        let other = h.container(&uid, name).await;
        assert_eq!((other.container_id, other.restart_count), (id, 0), "{name} untouched");
    }
    assert_eq!(h.terms(), 1, "nothing else stopped: {:?}", h.signals());
}

#[actix::test]
async fn a_liveness_failure_kills_the_running_container_and_it_restarts() {
    a_failure_kills_the_running_container_and_it_restarts(
        "liveness-kill",
        ProbeKind::Liveness,
        "Container app failed liveness probe, will be restarted",
    )
    .await;
}

#[actix::test]
async fn a_startup_failure_kills_the_running_container_and_it_restarts() {
    a_failure_kills_the_running_container_and_it_restarts(
        "startup-kill",
        ProbeKind::Startup,
        "Container app failed startup probe, will be restarted",
    )
    .await;
}

/// Under `restartPolicy: Never` the kill says nothing of a restart, and the killed container
/// stays stopped through resyncs while the others run on.
#[actix::test]
async fn a_liveness_failure_under_restart_policy_never_stops_the_container_for_good() {
    tokio::time::pause();
    let manifest = THREE_CONTAINERS.replace("spec:\n", "spec:\n  restartPolicy: Never\n");
    let h = Harness::start_with("never", &manifest, Signals::Delivered);
    let (uid, mut view) = h.pod().await;
    let running = wait_for(&mut view, "app running", |s| running_id(s, "app").is_some()).await;
    let app_id = running_id(&running, "app").expect("app runs").to_owned();

    h.probe_result(&uid, ProbeKind::Liveness, &app_id, ProbeResult::Failure);
    settle().await;
    assert_eq!(h.killings(), ["spec.containers{app}: Normal Killing Container app failed liveness probe"]);

    let terminated = |s: &PodStatus| {
        container_status(s, "app").is_some_and(|c| c.state.as_ref().is_some_and(|s| s.terminated.is_some()))
    };
    wait_for_real(&mut view, "app terminated", terminated).await;
    tokio::time::sleep(RARELY * 2).await;
    let app = h.container(&uid, "app").await;
    assert!(app.state.as_ref().is_some_and(|s| s.terminated.is_some()), "{app:#?}");
    assert_eq!((app.container_id.as_deref(), app.restart_count), (Some(app_id.as_str()), 0));
    let last = view.borrow().expect("a status");
    assert!(OTHERS.iter().all(|name| running_id(&last, name).is_some()), "the others run on: {last:#?}");
    assert_eq!(h.terms(), 1, "{:?}", h.signals());
}

/// A failed result about an instance that no longer runs (the container was restarted since)
/// kills nothing: not once the status shows the new instance, nor while the status the
/// workers read still shows the old one running — it lags the runtime by a sync, and the kill
/// names the instance, so the runtime does not stop its successor.
#[actix::test]
async fn a_failure_about_an_instance_that_no_longer_runs_kills_nothing() {
    tokio::time::pause();
    let h = Harness::start_with("stale", THREE_CONTAINERS, Signals::Delivered);
    let (uid, mut view) = h.pod().await;
    let first = wait_for(&mut view, "app running", |s| running_id(s, "app").is_some()).await;
    let old_id = running_id(&first, "app").expect("app runs").to_owned();
    h.probe_result(&uid, ProbeKind::Liveness, &old_id, ProbeResult::Failure);
    settle().await;
    assert_eq!((h.terms(), h.killings().len()), (1, 1), "the first instance killed");
    let restarted =
        wait_for_real(&mut view, "app restarted", |s| running_id(s, "app").is_some_and(|id| id != old_id))
            .await;
    let new_id = running_id(&restarted, "app").expect("app runs").to_owned();

    // The status shows the new instance.
    for kind in [ProbeKind::Liveness, ProbeKind::Startup] {
        h.probe_result(&uid, kind, &old_id, ProbeResult::Failure);
    }
    settle().await;
    assert_eq!((h.terms(), h.killings().len()), (1, 1), "{:?}", h.killings());

    // The status still shows the old instance running: stored here by hand, as the sync that
    // follows a restart is asynchronous and nothing else syncs the pod until the next result.
    let pods = h.kubelet.send(ListPods).await.expect("the kubelet answers");
    h.pipeline.set_pod_status(pods[0].clone(), (*first).clone());
    wait_for(&mut view, "the old instance shown", |s| running_id(s, "app") == Some(old_id.as_str())).await;
    h.probe_result(&uid, ProbeKind::Liveness, &old_id, ProbeResult::Failure);
    settle().await;
    assert_eq!((h.terms(), h.killings().len()), (1, 1), "{:?}", h.killings());
    let app = h.container(&uid, "app").await;
    assert_eq!((app.container_id.as_deref(), app.restart_count), (Some(new_id.as_str()), 1));
    assert!(app.state.as_ref().is_some_and(|s| s.running.is_some()), "{app:#?}");
}

/// A failed result about a pod the kubelet does not run (even with the ID of a container the
/// kubelet does run), or about a container ID none of the pod's containers has, kills nothing, and
/// the kubelet goes on: it still answers, and still acts on a result it knows.
#[actix::test]
async fn a_failure_about_an_unknown_pod_or_container_kills_nothing() {
    tokio::time::pause();
    let h = Harness::start("unknown", THREE_CONTAINERS);
    let (uid, mut view) = h.pod().await;
    let running = wait_for(&mut view, "app running", |s| running_id(s, "app").is_some()).await;
    let app_id = running_id(&running, "app").expect("app runs").to_owned();
    let stranger = PodUid::from("00000000-0000-0000-0000-000000000000");
    for kind in [ProbeKind::Liveness, ProbeKind::Startup] {
        h.probe_result(&stranger, kind, &app_id, ProbeResult::Failure);
        h.probe_result(&uid, kind, "probelet://ffffffffffffffff", ProbeResult::Failure);
        h.probe_result(&uid, kind, "", ProbeResult::Failure);
    }
    settle().await;
    assert!(h.signals().is_empty(), "nothing stopped: {:?}", h.signals());
    assert!(h.killings().is_empty(), "{:?}", h.killings());
    let pods = h.kubelet.send(ListPods).await.expect("the kubelet still answers");
    assert_eq!(pods.len(), 1);

    h.probe_result(&uid, ProbeKind::Liveness, &app_id, ProbeResult::Failure);
    settle().await;
    assert_eq!(h.terms(), 1, "the known result kills");
}

/// Only a failed liveness or startup result kills: a success, an unknown result, or a failed
/// readiness result about the running container leaves it running.
#[actix::test]
async fn a_success_or_a_readiness_failure_kills_nothing() {
    tokio::time::pause();
    let h = Harness::start("no-kill", THREE_CONTAINERS);
    let (uid, mut view) = h.pod().await;
    let running = wait_for(&mut view, "app running", |s| running_id(s, "app").is_some()).await;
    let app_id = running_id(&running, "app").expect("app runs").to_owned();
    for (kind, result) in [
        (ProbeKind::Liveness, ProbeResult::Success),
        (ProbeKind::Liveness, ProbeResult::Unknown),
        (ProbeKind::Startup, ProbeResult::Success),
        (ProbeKind::Startup, ProbeResult::Unknown),
        (ProbeKind::Readiness, ProbeResult::Failure),
        (ProbeKind::Readiness, ProbeResult::Success),
        (ProbeKind::Readiness, ProbeResult::Unknown),
    ] {
        h.probe_result(&uid, kind, &app_id, result);
    }
    settle().await;
    assert!(h.signals().is_empty(), "nothing stopped: {:?}", h.signals());
    assert!(h.killings().is_empty(), "{:?}", h.killings());
    let app = h.container(&uid, "app").await;
    assert_eq!((app.container_id.as_deref(), app.restart_count), (Some(app_id.as_str()), 0));

    // The same container failing its liveness probe is killed: the results above reached a
    // kubelet that would have.
    h.probe_result(&uid, ProbeKind::Liveness, &app_id, ProbeResult::Failure);
    settle().await;
    assert_eq!(h.terms(), 1);
}

/// A probe's result changing while its container backs off (the worker marks a dead container's
/// liveness `Failure`, told here as the results cache tells it, at a chosen second: a real
/// worker's first probe comes at a random part of its period) syncs the pod, as the kubelet's
/// `handleProbeSync` does: one `BackOff` more, and the requeue counts from that sync. A container that cannot start (nothing runs,
/// paused time, the kubelet's 10 s back-off doubling): tries at 0, 0, 10, 30 and 70 s, then an
/// 80 s wait, whose requeue would cut it at 130 s; the failure at 80 s records `BackOff` and moves
/// the cut to 140 s; the try stays at 150 s, the back-off's end (docs/reliability.md, "A
/// `BackOff` at each resync of a long wait"). Before, no `BackOff` at 80 s, and the cut at 130 s.
#[actix::test]
async fn a_probe_result_change_during_a_back_off_records_back_off_and_moves_the_requeue() {
    tokio::time::pause();
    let manifest = r#"apiVersion: v1
kind: Pod
metadata: {name: probed}
spec:
  containers:
  - name: app
    command: [probelet-no-such-executable]
"#;
    let h = Harness::start("probe-sync", manifest);
    let begin = Instant::now();
    let (uid, _view) = h.pod().await;
    let backing_off =
        |h: &Harness| h.recorder.rendered().iter().filter(|e| e.starts_with("Warning BackOff")).count();
    let tries =
        |h: &Harness| h.recorder.rendered().iter().filter(|e| e.starts_with("Warning Failed")).count();
    // By second: the `BackOff`s and the tries in that second.
    let mut rows: Vec<(u64, usize, usize)> = Vec::new();
    let (mut backoffs_before, mut tries_before) = (0, 0);
    for at in 0..=150u64 {
        tokio::time::sleep_until(begin + Duration::from_secs(at)).await;
        if at == 80 {
            let app = h.app(&uid).await;
            let id = app.container_id.expect("the failed try's container");
            h.probe_result(&uid, ProbeKind::Liveness, &id, ProbeResult::Failure);
        }
        tokio::time::sleep_until(begin + Duration::from_millis(at * 1000 + 500)).await;
        let (backoffs, tried) = (backing_off(&h), tries(&h));
        if (backoffs, tried) != (backoffs_before, tries_before) {
            rows.push((at, backoffs - backoffs_before, tried - tries_before));
        }
        (backoffs_before, tries_before) = (backoffs, tried);
    }
    assert_eq!(
        rows,
        [(0, 1, 2), (10, 1, 1), (30, 1, 1), (70, 1, 1), (80, 1, 0), (140, 1, 0), (150, 1, 1)],
        "(second, BackOff, tries)"
    );
    assert!(h.signals().is_empty(), "nothing ran, nothing killed: {:?}", h.signals());
}

/// Scans a folder as the kubelet does ([`manifests::rescan`], then [`manifest_lines`]), keeping
/// what it keeps between scans.
struct Teller {
    dir: PathBuf,
    cache: manifests::ParseCache,
    snapshot: Snapshot,
    reported: HashSet<Told>,
}

impl Teller {
    fn new(name: &str) -> Teller {
        let dir = std::env::temp_dir().join(format!("probelet-kubelet-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).expect("a temp dir");
        Teller { dir, cache: Default::default(), snapshot: Default::default(), reported: HashSet::new() }
    }

    fn write(&self, file: &str, contents: &str) {
        std::fs::write(self.dir.join(file), contents).expect("the manifest");
    }

    /// The lines one scan tells.
    fn scan(&mut self) -> Vec<String> {
        let gates = probelet_actors::features::FeatureGates::default();
        let next = manifests::rescan(&self.dir, "node", &gates, &mut self.cache, &self.snapshot);
        let lines = manifest_lines(&mut self.reported, &next, &self.dir);
        self.snapshot = next;
        lines.into_iter().map(|(_, line)| line).collect()
    }
}

impl Drop for Teller {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// Two manifests: one the agent skips (an active deadline that is no number), one with a field a
/// container does not have (`workingDirr`).
fn broken_and_misspelled() -> (String, String) {
    let broken = SLEEPER
        .replace("sleeper", "broken")
        .replace("  containers:", "  activeDeadlineSeconds: soon\n  containers:");
    let typo =
        SLEEPER.replace("sleeper", "typo").replace("    command:", "    workingDirr: /tmp\n    command:");
    (broken, typo)
}

/// A file of several documents each refused gives no pod: each line says the file is skipped
/// (`manifest skipped: <file>: document 2: …`, the single document's words), where one of them
/// running says its document alone is skipped; it said "not the whole file" of a file skipped
/// whole.
#[test]
fn a_file_whose_every_document_is_refused_is_said_skipped_whole() {
    let mut teller = Teller::new("all-refused");
    let (broken, _) = broken_and_misspelled();
    let also_broken = broken.replace("name: broken", "name: broken-too");
    teller.write("both.yaml", &format!("{broken}---\n{also_broken}"));
    let lines = teller.scan();
    assert_eq!(lines.len(), 2, "{lines:?}");
    for (line, document) in lines.iter().zip(["document 1: ", "document 2: "]) {
        assert!(line.starts_with("manifest skipped: ") && line.contains(document), "{lines:?}");
    }
    teller.write("both.yaml", &format!("{SLEEPER}---\n{also_broken}"));
    let lines = teller.scan();
    assert!(
        lines.iter().any(|l| l.starts_with("manifest document skipped (not the whole file): ")
            && l.contains("document 2: ")),
        "{lines:?}"
    );
}

/// A manifest saved still broken, with the same error (a comment added), is told again, as the
/// kubelet logs it at each read of a changed file; an operator heard nothing before and could
/// take the edit for a fix. While its contents last it is told once, however many scans pass.
/// So is a field a Pod does not have.
#[test]
fn a_manifest_saved_still_broken_is_told_again_and_once_while_its_contents_last() {
    let mut teller = Teller::new("told-again");
    let (broken, typo) = broken_and_misspelled();
    teller.write("broken.yaml", &broken);
    teller.write("typo.yaml", &typo);
    let first = teller.scan();
    assert_eq!(first.len(), 2, "skipped, and the field ignored: {first:?}");
    assert!(first[0].starts_with("manifest skipped: ") && first[0].contains("broken.yaml"), "{first:?}");
    assert!(first[1].starts_with("manifest field ignored") && first[1].contains("typo.yaml"), "{first:?}");
    assert_eq!(teller.scan(), Vec::<String>::new(), "once while the contents last");
    assert_eq!(teller.scan(), Vec::<String>::new(), "once while the contents last");
    // Saved with a comment added at its end: the same line, told again, once; the other file's is not.
    teller.write("broken.yaml", &format!("{broken}# edited\n"));
    assert_eq!(teller.scan(), first[..1], "saved still broken");
    assert_eq!(teller.scan(), Vec::<String>::new(), "once while the new contents last");
    teller.write("typo.yaml", &format!("{typo}# edited\n"));
    assert_eq!(teller.scan(), first[1..], "saved with the field still misspelled");
    assert_eq!(teller.scan(), Vec::<String>::new(), "once while the new contents last");
}

/// A key written twice in a manifest's mapping (`image:` here) is read as the kubelet reads it,
/// the last value winning, where the file was skipped (`invalid YAML: duplicate mapping key`);
/// the agent says so, naming the key and where it is written again, once while the file's
/// contents last, and again when it is saved with the key still twice.
#[test]
fn a_key_written_twice_is_read_last_and_told_once_per_contents() {
    let mut teller = Teller::new("key-twice");
    let twice = SLEEPER.replace("    command:", "    image: first\n    image: second\n    command:");
    teller.write("twice.yaml", &twice);
    let said = format!(
        "manifest key written twice: {}: duplicate mapping key: image at line 8, column 5: the last value \
         is read, as the kubelet reads it",
        teller.dir.join("twice.yaml").display()
    );
    assert_eq!(teller.scan(), std::slice::from_ref(&said));
    let pods: Vec<_> = teller.snapshot.pods.values().collect();
    assert_eq!(pods.len(), 1, "{:?}", teller.snapshot.errors);
    let image = pods[0].pod.spec.as_ref().and_then(|spec| spec.containers[0].image.as_deref());
    assert_eq!(image, Some("second"));
    assert_eq!(teller.scan(), Vec::<String>::new(), "once while the contents last");
    teller.write("twice.yaml", &format!("{twice}# edited\n"));
    assert_eq!(teller.scan(), [said], "saved with the key still twice");
    assert_eq!(teller.scan(), Vec::<String>::new());
}

/// A running manifest caught half written is held while a writer changes it: its line is told
/// once per text, though the contents change at each scan (a slow writer is not told at every
/// scan); once the writer stops and it is still broken, it is told as skipped.
#[test]
fn a_held_manifest_is_told_once_while_its_writer_changes_it() {
    let mut teller = Teller::new("held-once");
    teller.write("pod.yaml", SLEEPER);
    assert_eq!(teller.scan(), Vec::<String>::new());
    assert_eq!(teller.snapshot.pods.len(), 1);
    // Caught without its spec, and then with more of its head written: the same error.
    let head = "apiVersion: v1\nkind: Pod\nmetadata: {name: sleeper}\n";
    teller.write("pod.yaml", head);
    let held = teller.scan();
    assert_eq!(held.len(), 1, "{held:?}");
    assert!(held[0].starts_with("manifest held: "), "{held:?}");
    teller.write("pod.yaml", &format!("{head}# being written\n"));
    assert_eq!(teller.scan(), Vec::<String>::new(), "held, told once while it is written");
    assert_eq!(teller.snapshot.pods.len(), 1, "still held");
    // The writer is done: the same contents again, the hold ends and the file is skipped.
    let skipped = teller.scan();
    assert_eq!(skipped.len(), 1, "{skipped:?}");
    assert!(skipped[0].starts_with("manifest skipped: "), "{skipped:?}");
    assert_eq!(teller.scan(), Vec::<String>::new());
}

/// A folder that cannot be listed for a scan (a symlink loop here, as a shortage of descriptors
/// does) reads no file: the files kept what they held, and what was told of them is not told
/// again once the folder reads again. Every skipped file and every ignored field was told again.
#[test]
fn a_folder_unreadable_for_a_scan_does_not_tell_its_unchanged_files_again() {
    let mut teller = Teller::new("folder-unreadable");
    let (broken, typo) = broken_and_misspelled();
    teller.write("broken.yaml", &broken);
    teller.write("typo.yaml", &typo);
    assert_eq!(teller.scan().len(), 2, "skipped, and the field ignored");
    let moved = teller.dir.with_extension("moved");
    std::fs::rename(&teller.dir, &moved).expect("the folder moved away");
    std::os::unix::fs::symlink(&teller.dir, &teller.dir).expect("a symlink loop");
    let unreadable = teller.scan();
    std::fs::remove_file(&teller.dir).expect("the loop removed");
    std::fs::rename(&moved, &teller.dir).expect("the folder back");
    assert_eq!(unreadable.len(), 1, "{unreadable:?}");
    assert!(unreadable[0].starts_with("manifests cannot be read"), "{unreadable:?}");
    assert_eq!(teller.scan(), Vec::<String>::new(), "the same contents: told once");
}

/// A file that cannot be opened for a scan (its pods kept) still holds what it held: what was
/// told of its contents is not told again when it reads the same.
#[test]
fn a_file_unreadable_for_a_scan_is_not_told_again_when_it_reads_the_same() {
    let file = PathBuf::from("/m/broken.yaml");
    let skipped = manifests::ManifestError { file: file.clone(), reason: "invalid Pod: soon".into() };
    let read = Snapshot { errors: vec![skipped.clone()], ..Snapshot::default() };
    let mut reported = HashSet::new();
    let folder = Path::new("/m");
    assert_eq!(manifest_lines(&mut reported, &read, folder).len(), 1);
    let cannot =
        manifests::ManifestError { file: file.clone(), reason: "cannot read: permission denied".into() };
    let unreadable = Snapshot {
        errors: vec![cannot],
        unreadable_files: BTreeMap::from([(file, std::io::ErrorKind::PermissionDenied)]),
        ..Snapshot::default()
    };
    assert_eq!(manifest_lines(&mut reported, &unreadable, folder).len(), 1, "cannot be read");
    assert_eq!(manifest_lines(&mut reported, &read, folder), vec![], "the same contents: told once");
}

const DEADLINE_PROBED_POD: &str = r#"apiVersion: v1
kind: Pod
metadata: {name: deadline-probed}
spec:
  activeDeadlineSeconds: 5
  terminationGracePeriodSeconds: 3
  containers:
  - name: app
    command: [sleep, "600"]
    readinessProbe:
      exec: {command: ["false"]}
      periodSeconds: 1
"#;

/// A pod failed by its active deadline is synced again while its container is killed (here
/// it ignores the TERM for the 3 s grace period, and resyncs come every second): its probes
/// stopped at the failing sync, and its running container, whose readiness probe never
/// passed, must not read ready for want of a worker. Before, every status after the first
/// failed one had it ready.
#[actix::test]
async fn a_pod_failed_by_its_deadline_keeps_an_unready_container_unready_while_it_is_killed() {
    tokio::time::pause();
    let h = Harness::start_configured("deadline-probed", DEADLINE_PROBED_POD, Signals::Recorded, |c| {
        c.resync_period = Duration::from_secs(1);
    });
    let (_, mut view) = h.pod().await;
    wait_for(&mut view, "phase Failed", |s| phase(s) == "Failed").await;
    let mut seen = Vec::new();
    for _ in 0..8 {
        tokio::time::sleep(Duration::from_millis(500)).await;
        let status = view.borrow().expect("a status");
        if let Some(app) = container_status(&status, "app").filter(|_| running_id(&status, "app").is_some()) {
            seen.push((phase(&status).to_owned(), app.ready));
        }
    }
    assert!(!seen.is_empty(), "no status while the container ran");
    assert!(seen.iter().all(|(_, ready)| !ready), "(phase, ready) of the running container: {seen:?}");
}
