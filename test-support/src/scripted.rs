//! A scripted prober: tests say what each (container, kind) probe returns, in order, and read
//! back when each probe ran (tokio time) — no executor, no network.

use std::collections::{HashMap, VecDeque};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::time::Duration;

use futures::future::BoxFuture;
use k8s_openapi::api::core::v1::Pod;
use probelet::container::ContainerId;
use probelet::prober::{
    PodContainer, PreparedProbe, ProbeError, ProbeKind, ProbeResult, ProbeRun, ProbeRunner,
};
use probelet_actors::status::probe_status::PodProbeStatus;
use tokio::time::Instant;

/// What one probe call does.
#[derive(Debug, Clone)]
pub enum Step {
    Return(ProbeResult),
    Error,
    /// Takes this long, then returns.
    Slow(Duration, ProbeResult),
    /// Panics inside the probe future.
    PanicInFuture,
    /// Panics while building the future, in the worker's own handler.
    PanicInWorker,
    /// Holds the thread that polls the probe, as a thread that lost its CPU is held, until the
    /// hold is released; then returns Success.
    HoldThread(ThreadHold),
}

/// What [`Step::HoldThread`] waits on: released once, for every holder.
#[derive(Debug, Clone, Default)]
pub struct ThreadHold(Arc<(Mutex<bool>, Condvar)>);

impl ThreadHold {
    pub fn new() -> Self {
        Self::default()
    }

    /// Lets every held thread go, now and later.
    pub fn release(&self) {
        let (released, wake) = &*self.0;
        *released.lock().unwrap() = true;
        wake.notify_all();
    }

    /// Blocks this thread until released, or a minute at most, so that a failing test ends.
    fn hold(&self) {
        let (released, wake) = &*self.0;
        let guard = released.lock().unwrap();
        let _ = wake.wait_timeout_while(guard, Duration::from_secs(60), |released| !*released).unwrap();
    }
}

/// One recorded call.
#[derive(Debug, Clone)]
pub struct Call {
    pub pod_uid: String,
    pub container: String,
    pub kind: ProbeKind,
    pub container_id: ContainerId,
    pub at: Instant,
    /// The timeout the worker ran the probe with.
    pub timeout: Duration,
}

#[derive(Default)]
struct Script {
    queued: VecDeque<Step>,
    default: Option<Step>,
}

/// The scripted prober; cheap to clone, all clones share the script and the call log.
#[derive(Clone, Default)]
pub struct ScriptedProber {
    scripts: Arc<Mutex<HashMap<(String, ProbeKind), Script>>>,
    calls: Arc<Mutex<Vec<Call>>>,
    /// Set when an in-flight probe future was dropped before it finished.
    pub dropped: Arc<AtomicBool>,
    /// Counts the calls, for [`ScriptedProber::until`].
    counted: Arc<tokio::sync::watch::Sender<usize>>,
    /// How many probes the workers had prepared ([`ProbeRunner::prepare`]).
    prepares: Arc<AtomicUsize>,
    /// Prepares no probe, so the workers call `probe_with_memo` at every probe.
    unprepared: bool,
}

impl ScriptedProber {
    /// A prober that prepares its probes, as the real one does: each worker calls it once per
    /// published status and runs what it prepared at every probe of that status.
    pub fn new() -> Self {
        Self::default()
    }

    /// A prober that prepares nothing: the workers call it afresh at every probe.
    pub fn unprepared() -> Self {
        ScriptedProber { unprepared: true, ..Self::default() }
    }

    /// How many times a worker prepared a probe.
    pub fn prepares(&self) -> usize {
        self.prepares.load(Ordering::SeqCst)
    }

    /// Every later call of (container, kind) does `step`, after any queued steps.
    pub fn always(&self, container: &str, kind: ProbeKind, step: Step) {
        self.scripts.lock().unwrap().entry((container.into(), kind)).or_default().default = Some(step);
    }

    /// The next calls of (container, kind) do these steps, in order.
    pub fn then(&self, container: &str, kind: ProbeKind, steps: impl IntoIterator<Item = Step>) {
        self.scripts.lock().unwrap().entry((container.into(), kind)).or_default().queued.extend(steps);
    }

    /// Waits until the call log satisfies `done` (a test's own timeout bounds the wait).
    pub async fn until(&self, done: impl Fn(&[Call]) -> bool) {
        let mut count = self.counted.subscribe();
        let _ = count.wait_for(|_| done(&self.calls.lock().unwrap())).await;
    }

    pub fn calls(&self) -> Vec<Call> {
        self.calls.lock().unwrap().clone()
    }

    pub fn calls_of(&self, container: &str, kind: ProbeKind) -> Vec<Call> {
        self.calls().into_iter().filter(|c| c.container == container && c.kind == kind).collect()
    }

    fn next_step(&self, container: &str, kind: ProbeKind) -> Step {
        let mut scripts = self.scripts.lock().unwrap();
        let script = scripts.entry((container.into(), kind)).or_default();
        script
            .queued
            .pop_front()
            .or_else(|| script.default.clone())
            .unwrap_or(Step::Return(ProbeResult::Success))
    }
}

struct DropFlag {
    flag: Arc<AtomicBool>,
    done: bool,
}

impl Drop for DropFlag {
    fn drop(&mut self) {
        if !self.done {
            self.flag.store(true, Ordering::SeqCst);
        }
    }
}

impl ProbeRunner for ScriptedProber {
    fn probe(
        &self,
        kind: ProbeKind,
        pod: Arc<Pod>,
        status: Arc<PodProbeStatus>,
        container: PodContainer,
        container_id: ContainerId,
    ) -> BoxFuture<'static, Result<ProbeResult, ProbeError>> {
        let timeout =
            kind.probe_of(&container).map_or(Duration::from_secs(1), probelet::prober::probe_timeout);
        self.probe_with_timeout(kind, pod, status, container, container_id, timeout)
    }

    fn probe_with_timeout(
        &self,
        kind: ProbeKind,
        pod: Arc<Pod>,
        _status: Arc<PodProbeStatus>,
        container: PodContainer,
        container_id: ContainerId,
        timeout: Duration,
    ) -> BoxFuture<'static, Result<ProbeResult, ProbeError>> {
        self.calls.lock().unwrap().push(Call {
            pod_uid: pod.metadata.uid.clone().unwrap_or_default(),
            container: container.name.clone(),
            kind,
            container_id,
            at: Instant::now(),
            timeout,
        });
        self.counted.send_modify(|n| *n += 1);
        let step = self.next_step(&container.name, kind);
        if matches!(step, Step::PanicInWorker) {
            panic!("scripted panic in the worker");
        }
        let flag = self.dropped.clone();
        Box::pin(async move {
            let mut guard = DropFlag { flag, done: false };
            let result = match step {
                Step::Return(r) => Ok(r),
                Step::Error => Err(ProbeError::Runtime("scripted error".into())),
                Step::Slow(d, r) => {
                    tokio::time::sleep(d).await;
                    Ok(r)
                }
                Step::PanicInFuture => panic!("scripted panic in the probe"),
                Step::HoldThread(hold) => {
                    hold.hold();
                    Ok(ProbeResult::Success)
                }
                Step::PanicInWorker => unreachable!(),
            };
            guard.done = true;
            result
        })
    }

    fn prepare(
        &self,
        kind: ProbeKind,
        container: &PodContainer,
        _status: &PodProbeStatus,
        container_id: &ContainerId,
        timeout: Duration,
    ) -> Option<Arc<dyn PreparedProbe>> {
        if self.unprepared {
            return None;
        }
        self.prepares.fetch_add(1, Ordering::SeqCst);
        Some(Arc::new(Prepared {
            prober: self.clone(),
            kind,
            container: container.clone(),
            container_id: container_id.clone(),
            timeout,
        }))
    }
}

/// A scripted probe as a worker prepared it: each run is a call with what it was prepared
/// from, so a worker that ran a probe prepared from an older status or spec records the older
/// container ID or timeout.
struct Prepared {
    prober: ScriptedProber,
    kind: ProbeKind,
    container: PodContainer,
    container_id: ContainerId,
    timeout: Duration,
}

impl PreparedProbe for Prepared {
    fn run(self: Arc<Self>, status: Arc<PodProbeStatus>) -> BoxFuture<'static, ProbeRun> {
        let pod = self.container.pod().clone();
        let (container, id) = (self.container.clone(), self.container_id.clone());
        let probe = self.prober.probe_with_timeout(self.kind, pod, status, container, id, self.timeout);
        Box::pin(async move { ProbeRun { result: probe.await, waited: Duration::ZERO } })
    }
}
