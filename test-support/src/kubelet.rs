//! The kubelet's side of the pipeline, reduced to what the tests need: a pipeline on paused
//! time with a scripted prober, and the pod sync that generates a status
//! (`UpdatePodStatus`, the conditions, `SetPodStatus`).

use std::sync::Arc;

use k8s_openapi::api::core::v1::{ContainerStatus, Pod, PodCondition, PodStatus};
use k8s_openapi::jiff::Timestamp;
use probelet::clock::TokioClock;
use probelet::contracts::{MemoryRecorder, PodRegistry};
use probelet::local_runner::LocalCommandRunner;
use probelet::status::generate_kubelet_conditions;
use probelet::{Pipeline, PipelineConfig};

use super::scripted::ScriptedProber;

/// The wall clock the tests start at.
pub fn epoch() -> Timestamp {
    Timestamp::from_second(1_800_000_000).unwrap()
}

/// The runtime's view of a pod: phase, init container statuses, regular container statuses.
type RuntimeView = (String, Vec<ContainerStatus>, Vec<ContainerStatus>);

pub struct Harness {
    /// The last runtime view each pod was synced with: (phase, init, regular statuses).
    runtime: std::sync::Mutex<std::collections::HashMap<String, RuntimeView>>,
    pub pipeline: Pipeline,
    pub pods: PodRegistry,
    pub prober: ScriptedProber,
    pub recorder: MemoryRecorder,
}

impl Harness {
    /// A pipeline whose wall clock starts at [`epoch`] and follows tokio's paused time.
    pub fn start() -> Harness {
        Self::start_with(ScriptedProber::new())
    }

    /// A pipeline with the real prober (executors against real servers), on real time.
    pub fn start_real() -> Harness {
        let mut h = Self::start_with(ScriptedProber::new());
        let pods = PodRegistry::new();
        let recorder = MemoryRecorder::new();
        let config = PipelineConfig::new(
            Arc::new(LocalCommandRunner::default()),
            Arc::new(recorder.clone()),
            Arc::new(pods.clone()),
        );
        h.pipeline = Pipeline::start(config);
        h.pods = pods;
        h.recorder = recorder;
        h
    }

    pub(crate) fn start_with(prober: ScriptedProber) -> Harness {
        Self::start_gated(prober, probelet::FeatureGates::default())
    }

    /// A pipeline on real time whose workers run on `threads` threads of their own, as the
    /// agent's do.
    pub fn start_threaded(prober: ScriptedProber, threads: usize) -> Harness {
        Self::start_configured(prober, |config| config.worker_threads = threads)
    }

    /// `Harness::start_with` with these feature gates.
    pub fn start_gated(prober: ScriptedProber, feature_gates: probelet::FeatureGates) -> Harness {
        Self::start_configured(prober, |config| {
            config.clock = Some(Arc::new(TokioClock::starting_at(epoch())));
            config.feature_gates = feature_gates;
        })
    }

    /// `Harness::start` on `clock` (a `SteppingClock`, to step the wall clock under the engine).
    pub fn start_clocked(clock: probelet::clock::SharedClock) -> Harness {
        Self::start_configured(ScriptedProber::new(), |config| config.clock = Some(clock))
    }

    /// A pipeline on `prober` with a fixed jitter seed, and whatever `configure` sets.
    fn start_configured(prober: ScriptedProber, configure: impl FnOnce(&mut PipelineConfig)) -> Harness {
        let pods = PodRegistry::new();
        let recorder = MemoryRecorder::new();
        let mut config = PipelineConfig::new(
            Arc::new(LocalCommandRunner::default()),
            Arc::new(recorder.clone()),
            Arc::new(pods.clone()),
        );
        config.prober = Some(Arc::new(prober.clone()));
        config.jitter_seed = Some(7);
        configure(&mut config);
        Harness { runtime: Default::default(), pipeline: Pipeline::start(config), pods, prober, recorder }
    }

    /// The kubelet's pod sync (`SyncPod`): register the pod, generate its status from the
    /// runtime's container statuses (`UpdatePodStatus`, conditions), store it, then `AddPod`.
    pub async fn sync(&self, pod: &Arc<Pod>, containers: Vec<ContainerStatus>) -> Arc<PodStatus> {
        self.sync_with(pod, "Running", vec![], containers).await
    }

    pub async fn sync_with(
        &self,
        pod: &Arc<Pod>,
        phase: &str,
        init: Vec<ContainerStatus>,
        containers: Vec<ContainerStatus>,
    ) -> Arc<PodStatus> {
        self.pods.upsert(pod.clone());
        self.runtime.lock().unwrap().insert(
            pod.metadata.uid.clone().unwrap_or_default(),
            (phase.into(), init.clone(), containers.clone()),
        );
        let status = PodStatus {
            phase: Some(phase.into()),
            pod_ip: Some("127.0.0.1".into()),
            init_container_statuses: if init.is_empty() { None } else { Some(init) },
            container_statuses: Some(containers),
            ..Default::default()
        };
        let mut status = self.pipeline.update_pod_status(pod.clone(), status).await.unwrap();
        generate_kubelet_conditions(pod, &mut status);
        self.pipeline.set_pod_status(pod.clone(), status);
        let stored = self.status(pod).await;
        self.pipeline.add_pod(pod.clone());
        stored
    }

    /// A probe result changed: the kubelet syncs the pod again with the runtime's last view
    /// (upstream `handleProbeSync`).
    pub async fn resync(&self, pod: &Arc<Pod>) -> Arc<PodStatus> {
        let uid = pod.metadata.uid.clone().unwrap_or_default();
        let (phase, init, containers) =
            self.runtime.lock().unwrap().get(&uid).cloned().expect("synced before");
        self.sync_with(pod, &phase, init, containers).await
    }

    /// The status manager's cached status (panics if none).
    pub async fn status(&self, pod: &Arc<Pod>) -> Arc<PodStatus> {
        let uid = pod.metadata.uid.clone().unwrap_or_default();
        self.pipeline.pod_status(&uid).await.unwrap().expect("a cached status")
    }

    /// The cached condition of this type.
    pub async fn condition(&self, pod: &Arc<Pod>, type_: &str) -> PodCondition {
        let status = self.status(pod).await;
        status.conditions.iter().flatten().find(|c| c.type_ == type_).cloned().expect("condition present")
    }

    pub async fn container(&self, pod: &Arc<Pod>, name: &str) -> ContainerStatus {
        let status = self.status(pod).await;
        status
            .container_statuses
            .iter()
            .flatten()
            .chain(status.init_container_statuses.iter().flatten())
            .find(|c| c.name == name)
            .cloned()
            .expect("container status present")
    }

    pub async fn worker_count(&self) -> usize {
        self.pipeline.workers().await.unwrap().len()
    }
}

/// Lets every actor run what is ready now (several turns of the runtime).
pub async fn settle() {
    for _ in 0..20 {
        tokio::task::yield_now().await;
    }
}

/// Slack added to every [`advance`]: tokio rounds timer deadlines up to the next millisecond,
/// so a test never stops exactly on a tick.
pub const SLACK: std::time::Duration = std::time::Duration::from_millis(5);

/// Moves paused time forward by `d` plus [`SLACK`], then lets the actors react.
pub async fn advance(d: std::time::Duration) {
    tokio::time::advance(d + SLACK).await;
    settle().await;
}

/// A pipeline like [`Harness::start`]'s (wall clock at [`epoch`] following paused tokio time,
/// a scripted prober that is never scripted) whose pods come from `pods`: tests that need
/// static or mirror pods bring their own [`probelet::contracts::PodLookup`].
pub fn start_pipeline(pods: Arc<dyn probelet::contracts::PodLookup>) -> Pipeline {
    let mut config =
        PipelineConfig::new(Arc::new(LocalCommandRunner::default()), Arc::new(MemoryRecorder::new()), pods);
    config.clock = Some(Arc::new(TokioClock::starting_at(epoch())));
    config.prober = Some(Arc::new(ScriptedProber::new()));
    config.jitter_seed = Some(7);
    Pipeline::start(config)
}

/// Lets paused time run for `d` by sleeping: the runtime auto-advances from one timer to the
/// next, so every timer fires at its own (millisecond-rounded) deadline, in order — what a test
/// needs to compare the instants at which probes started. Pick `d` so that it does not end
/// exactly on a tick.
pub async fn run_for(d: std::time::Duration) {
    tokio::time::sleep(d).await;
    settle().await;
}

/// Records every probe result change the results cache emits (the host's view).
#[derive(Default)]
pub struct ResultLog(Vec<probelet::results::ProbeResultChanged>);

impl actix::Actor for ResultLog {
    type Context = actix::Context<Self>;
}

impl actix::Handler<probelet::results::ProbeResultChanged> for ResultLog {
    type Result = ();

    fn handle(&mut self, msg: probelet::results::ProbeResultChanged, _: &mut actix::Context<Self>) {
        self.0.push(msg);
    }
}

/// Takes the changes recorded so far.
#[derive(actix::Message)]
#[rtype(result = "Vec<probelet::results::ProbeResultChanged>")]
pub struct DrainLog;

impl actix::Handler<DrainLog> for ResultLog {
    type Result = actix::MessageResult<DrainLog>;

    fn handle(&mut self, _: DrainLog, _: &mut actix::Context<Self>) -> Self::Result {
        actix::MessageResult(std::mem::take(&mut self.0))
    }
}

impl Harness {
    /// A [`ResultLog`] subscribed to the pipeline's results cache.
    pub fn result_log(&self) -> actix::Addr<ResultLog> {
        use actix::Actor;
        let log = ResultLog::default().start();
        self.pipeline.subscribe_results(log.clone().recipient());
        log
    }

    /// The results cache's entry for (kind, container ID).
    pub async fn result(
        &self,
        kind: probelet::prober::ProbeKind,
        id: &str,
    ) -> Option<probelet::prober::ProbeResult> {
        let key = (kind, probelet::container::ContainerId::parse(id));
        self.pipeline.results.send(probelet::results::GetResults(vec![key])).await.unwrap().pop().flatten()
    }

    /// Settles until the manager has `n` workers (stopped workers deregister asynchronously);
    /// panics with the count it saw if that does not happen.
    pub async fn wait_workers(&self, n: usize) {
        let mut seen = usize::MAX;
        for _ in 0..200 {
            seen = self.worker_count().await;
            if seen == n {
                return;
            }
            settle().await;
        }
        panic!("expected {n} workers, still {seen}");
    }
}

/// A started harness on paused time (one round trip done, so its actors have registered
/// their timers) and the instant its manager started at.
pub async fn started_harness() -> (Harness, tokio::time::Instant) {
    tokio::time::pause();
    let t0 = tokio::time::Instant::now();
    let h = Harness::start();
    h.worker_count().await;
    (h, t0)
}

/// A harness whose manager is older than one period (11 s): new workers start without jitter.
pub async fn aged_harness() -> (Harness, tokio::time::Instant) {
    let (h, t0) = started_harness().await;
    advance(std::time::Duration::from_secs(11)).await;
    (h, t0)
}

/// The harness's wall clock now: it reads [`epoch`] at `t0` and follows tokio time.
pub fn wall(t0: tokio::time::Instant) -> Timestamp {
    epoch() + (tokio::time::Instant::now() - t0)
}
