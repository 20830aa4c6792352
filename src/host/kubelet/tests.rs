//! The standalone kubelet with the local process runtime, under paused tokio time: a pod's
//! active deadline. Containers are real processes; their signals go to a recording signaller
//! that delivers none (a process that died meanwhile would race the paused clock), and the
//! groups are killed for real when the test ends.

use std::sync::Mutex;

use k8s_openapi::api::core::v1::ContainerStatus;
use probelet_actors::PipelineConfig;
use probelet_actors::clock::{SharedClock, TokioClock};
use probelet_actors::contracts::MemoryRecorder;
use probelet_actors::local_runner::LocalCommandRunner;
use probelet_actors::process::{Signal, signal_group};
use probelet_actors::status::views::StatusView;

use super::*;
use crate::host::runtime::Signaller;

/// Rescans, resyncs and housekeeping are this far apart: only the deadline's own timer can
/// fail a pod on time.
const RARELY: Duration = Duration::from_secs(3600);
/// The longest any test waits for one status (paused time: only a hang reaches it).
const WAIT: Duration = Duration::from_secs(600);

type Sent = Arc<Mutex<Vec<(u32, Signal, Instant)>>>;

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
        let dir = std::env::temp_dir().join(format!("probelet-kubelet-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).expect("a temp dir");
        std::fs::write(dir.join("pod.yaml"), manifest).expect("the manifest");
        let clock: SharedClock =
            Arc::new(TokioClock::starting_at(Timestamp::from_second(1_800_000_000).expect("a time")));
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
            Err(std::io::Error::from(std::io::ErrorKind::PermissionDenied))
        });
        let runtime = ProcessRuntime::new(runner, Arc::new(recorder.clone()), clock.clone())
            .with_signaller(signaller)
            .start();
        let kubelet = start_kubelet(StandaloneKubelet::new(
            KubeletConfig {
                manifests: dir.clone(),
                node_name: "node".into(),
                rescan_period: RARELY,
                resync_period: RARELY,
                housekeeping_period: RARELY,
            },
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
    let found = tokio::time::timeout(WAIT, view.wait_for(|s| s.as_deref().is_some_and(&done))).await;
    match found {
        Ok(Ok(Some(status))) => status,
        _ => panic!("no status with {what}; last: {:#?}", view.borrow()),
    }
}

fn phase(status: &PodStatus) -> &str {
    status.phase.as_deref().unwrap_or_default()
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
