//! Probe slots (docs/prober.md §1.2, "Probe slots"): the real prober runs at most
//! `max_probes_in_flight` probes at once; a probe due while every slot is taken waits for one,
//! and its timeout starts when it has it; a stopped worker's waiting or running probe gives its
//! slot back. Injected TCP executors that take a set time, under paused tokio time.
// The helpers below panic on purpose: a panic fails the test that called them.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use probelet_test_support as support;

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures::future::BoxFuture;
use k8s_openapi::api::core::v1::{ExecAction, Pod, PodStatus, Probe, TCPSocketAction};
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use probelet::container::ContainerId;
use probelet::contracts::{CommandRunner, ExecError, ExecOutput, PodRegistry, ProbeObserver, ProbeRecord};
use probelet::metrics::PrometheusRegistry;
use probelet::prober::executors::{Executors, TcpExecutor};
use probelet::prober::{
    PodContainer, PreparedProbe, ProbeError, ProbeKind, ProbeMemo, ProbeOutcome, ProbeResult, ProbeRun,
    ProbeRunner, Probed, Prober,
};
use probelet::status::probe_status::PodProbeStatus;
use probelet::{Engine, EngineBuilder};
use support::kubelet::{run_for, settle};
use support::pods::{running, test_pod};

/// A TCP executor that takes `takes` (failing if that is past its timeout, as a real dial
/// would) and counts the probes running in it.
struct SlowTcp {
    takes: Duration,
    running: AtomicUsize,
    most: AtomicUsize,
    /// When each call began, by host.
    calls: Mutex<Vec<(String, tokio::time::Instant)>>,
}

impl SlowTcp {
    fn new(takes: Duration) -> Arc<Self> {
        Arc::new(SlowTcp {
            takes,
            running: AtomicUsize::new(0),
            most: AtomicUsize::new(0),
            calls: Mutex::default(),
        })
    }
}

impl TcpExecutor for SlowTcp {
    fn probe<'a>(&'a self, host: &'a str, _port: u16, timeout: Duration) -> BoxFuture<'a, Probed> {
        Box::pin(async move {
            self.calls.lock().unwrap().push((host.to_owned(), tokio::time::Instant::now()));
            let now = self.running.fetch_add(1, Ordering::SeqCst) + 1;
            self.most.fetch_max(now, Ordering::SeqCst);
            let answer = match tokio::time::timeout(timeout, tokio::time::sleep(self.takes)).await {
                Ok(()) => Probed::new(ProbeOutcome::Success, ""),
                Err(_) => Probed::new(ProbeOutcome::Failure, "dial tcp: i/o timeout"),
            };
            self.running.fetch_sub(1, Ordering::SeqCst);
            answer
        })
    }
}

#[derive(Default, Clone)]
struct Records(Arc<Mutex<Vec<ProbeRecord<'static>>>>);

impl ProbeObserver for Records {
    fn observe(&self, record: ProbeRecord<'_>) {
        self.0.lock().unwrap().push(record.into_owned());
    }
}

impl Records {
    fn all(&self) -> Vec<ProbeRecord<'static>> {
        self.0.lock().unwrap().clone()
    }
}

/// Pod `name` with one container whose readiness probe dials TCP with a 1 s timeout, every
/// 10 s; [`status`] gives pod `i` the IP `10.0.<i / 256>.<i % 256>` (the probe's host).
fn pod(name: &str) -> Arc<Pod> {
    pod_every(name, 10)
}

/// [`pod`] probed every `period` seconds.
fn pod_every(name: &str, period: i32) -> Arc<Pod> {
    let probe = Probe {
        tcp_socket: Some(TCPSocketAction { port: IntOrString::Int(80), host: None }),
        period_seconds: Some(period),
        timeout_seconds: Some(1),
        ..Default::default()
    };
    test_pod(name).container("app").with_probe("app", ProbeKind::Readiness, probe).build()
}

fn status(i: usize, name: &str) -> PodStatus {
    PodStatus {
        phase: Some("Running".into()),
        pod_ip: Some(format!("10.0.{}.{}", i / 256, i % 256)),
        container_statuses: Some(vec![running(
            "app",
            &format!("containerd://{name}"),
            k8s_openapi::jiff::Timestamp::UNIX_EPOCH,
        )]),
        ..Default::default()
    }
}

struct Setup {
    engine: Engine,
    pods: PodRegistry,
    tcp: Arc<SlowTcp>,
    records: Records,
}

/// An engine whose TCP probes take `takes`, with `limit` slots, aged past its start-up
/// jitter so that new pods probe at once.
async fn start(limit: Option<usize>, takes: Duration) -> Setup {
    start_with(takes, |builder| builder.max_probes_in_flight(limit)).await
}

/// [`start`] with the builder's slots left as `adjust` leaves them.
async fn start_with(takes: Duration, adjust: impl FnOnce(EngineBuilder) -> EngineBuilder) -> Setup {
    tokio::time::pause();
    let pods = PodRegistry::new();
    let tcp = SlowTcp::new(takes);
    let records = Records::default();
    let builder: EngineBuilder = Engine::builder(Arc::new(pods.clone()))
        .executors(Executors { tcp: Some(tcp.clone()), ..Default::default() })
        .observer(Arc::new(records.clone()));
    let engine = adjust(builder).start();
    run_for(Duration::from_secs(11)).await;
    Setup { engine, pods, tcp, records }
}

impl Setup {
    async fn add(&self, i: usize, name: &str) -> Arc<Pod> {
        self.add_pod(i, pod(name)).await
    }

    /// Pod `pod` as pod `i` (its IP).
    async fn add_pod(&self, i: usize, pod: Arc<Pod>) -> Arc<Pod> {
        let name = pod.metadata.name.clone().unwrap();
        self.pods.upsert(pod.clone());
        self.engine.sync_pod(pod.clone(), status(i, &name)).await.unwrap();
        pod
    }

    /// When the probes of host `host` began, since `t0`.
    fn calls_to(&self, host: &str, t0: tokio::time::Instant) -> Vec<Duration> {
        let calls = self.tcp.calls.lock().unwrap();
        calls.iter().filter(|(h, _)| h == host).map(|(_, at)| at.duration_since(t0)).collect()
    }

    async fn ready(&self, pod: &Pod) -> bool {
        let uid = pod.metadata.uid.as_deref().unwrap();
        let stored = self.engine.pipeline().pod_status(uid).await.unwrap().unwrap();
        stored.container_statuses.iter().flatten().all(|c| c.ready)
    }
}

fn delayed(registry: &PrometheusRegistry) -> u64 {
    registry
        .render()
        .lines()
        .find(|l| l.starts_with("probelet_probes_delayed_total "))
        .and_then(|l| l.rsplit(' ').next()?.parse().ok())
        .unwrap_or(0)
}

#[actix::test]
async fn at_most_the_limit_runs_and_a_probe_that_waited_is_timed_from_its_slot() {
    // A thread-local recorder: the manager and workers run on this thread.
    let registry = PrometheusRegistry::new();
    let _local = metrics::set_default_local_recorder(&registry);
    let setup = start(Some(2), Duration::from_millis(900)).await;
    let mut pods = Vec::new();
    for i in 0..6 {
        pods.push(setup.add(i, &format!("p{i}")).await);
    }
    run_for(Duration::from_secs(3)).await;

    assert_eq!(setup.tcp.most.load(Ordering::SeqCst), 2, "never more than the limit at once");
    let records = setup.records.all();
    assert_eq!(records.len(), 6, "each pod probed once");
    assert!(records.iter().all(|r| r.result == Ok(ProbeResult::Success)), "{records:?}");
    // To the nearest 100 ms: tokio's timers fire on a millisecond tick, a little after their
    // deadline.
    let mut waited: Vec<u128> = records.iter().map(|r| (r.waited.as_millis() + 50) / 100 * 100).collect();
    waited.sort_unstable();
    assert_eq!(records.iter().filter(|r| r.waited.is_zero()).count(), 2, "a free slot is no wait");
    // Two at once, 900 ms each: the last two waited 1.8 s, past their 1 s timeout, and still
    // passed, because the timeout starts with the slot.
    assert_eq!(waited, [0, 0, 900, 900, 1800, 1800]);
    assert!(
        records.iter().all(|r| r.duration.abs_diff(Duration::from_millis(900)) < Duration::from_millis(5)),
        "a probe's duration does not include its wait: {records:?}"
    );
    for pod in &pods {
        assert!(setup.ready(pod).await, "every container Ready");
    }
    assert_eq!(delayed(&registry), 4, "probelet_probes_delayed_total counts the four that waited");
}

#[actix::test]
async fn without_a_limit_every_due_probe_runs_at_once() {
    let setup = start(None, Duration::from_millis(900)).await;
    for i in 0..6 {
        setup.add(i, &format!("p{i}")).await;
    }
    run_for(Duration::from_secs(3)).await;
    // The control for the test above: the same six probes, all at once.
    assert_eq!(setup.tcp.most.load(Ordering::SeqCst), 6);
}

#[actix::test]
async fn a_removed_pods_probe_gives_its_slot_back_at_once() {
    // One slot; the first pod's probe takes 800 ms, the second pod's waits for the slot.
    let setup = start(Some(1), Duration::from_millis(800)).await;
    let first = setup.add(1, "first").await;
    setup.add(2, "second").await;
    run_for(Duration::from_millis(100)).await;
    let hosts = |setup: &Setup| -> Vec<String> {
        setup.tcp.calls.lock().unwrap().iter().map(|(host, _)| host.clone()).collect()
    };
    assert_eq!(hosts(&setup), ["10.0.0.1"], "the second pod waits for the slot");
    let removed_at = tokio::time::Instant::now();
    setup.pods.remove(first.metadata.uid.as_deref().unwrap());
    setup.engine.pipeline().remove_pod(first.clone());
    settle().await;
    run_for(Duration::from_millis(1)).await;
    let calls = setup.tcp.calls.lock().unwrap().clone();
    assert_eq!(calls.len(), 2, "{calls:?}");
    assert_eq!(calls[1].0, "10.0.0.2");
    assert!(
        calls[1].1.duration_since(removed_at) < Duration::from_millis(10),
        "the second pod's probe ran when the first pod's worker stopped, not when its probe would have ended"
    );
}

#[actix::test]
async fn the_default_limit_is_1024() {
    let setup = start_with(Duration::from_millis(900), |builder| builder).await;
    for i in 0..1_100 {
        setup.add(i, &format!("p{i}")).await;
    }
    run_for(Duration::from_secs(2)).await;
    assert_eq!(setup.tcp.most.load(Ordering::SeqCst), probelet::prober::DEFAULT_MAX_PROBES_IN_FLIGHT);
    assert_eq!(probelet::prober::DEFAULT_MAX_PROBES_IN_FLIGHT, 1024);
    assert!(setup.records.all().iter().all(|r| r.result == Ok(ProbeResult::Success)));
}

/// The real prober wrapped as the trait's documentation says ("Wrapping the real prober"):
/// every entry point forwarded, the prepared probe wrapped too, each run counted.
struct Counting {
    inner: Prober,
    runs: Arc<AtomicUsize>,
}

struct CountingPrepared {
    inner: Arc<dyn PreparedProbe>,
    runs: Arc<AtomicUsize>,
}

impl ProbeRunner for Counting {
    fn probe(
        &self,
        kind: ProbeKind,
        pod: Arc<Pod>,
        status: Arc<PodProbeStatus>,
        container: PodContainer,
        container_id: ContainerId,
    ) -> BoxFuture<'static, Result<ProbeResult, ProbeError>> {
        self.runs.fetch_add(1, Ordering::SeqCst);
        ProbeRunner::probe(&self.inner, kind, pod, status, container, container_id)
    }

    fn probe_with_memo(
        &self,
        kind: ProbeKind,
        pod: Arc<Pod>,
        status: Arc<PodProbeStatus>,
        container: PodContainer,
        container_id: ContainerId,
        timeout: Duration,
        memo: ProbeMemo,
    ) -> BoxFuture<'static, ProbeRun> {
        self.runs.fetch_add(1, Ordering::SeqCst);
        self.inner.probe_with_memo(kind, pod, status, container, container_id, timeout, memo)
    }

    fn prepare(
        &self,
        kind: ProbeKind,
        container: &PodContainer,
        status: &PodProbeStatus,
        container_id: &ContainerId,
        timeout: Duration,
    ) -> Option<Arc<dyn PreparedProbe>> {
        let inner = self.inner.prepare(kind, container, status, container_id, timeout)?;
        Some(Arc::new(CountingPrepared { inner, runs: self.runs.clone() }))
    }
}

impl PreparedProbe for CountingPrepared {
    fn run(self: Arc<Self>, status: Arc<PodProbeStatus>) -> BoxFuture<'static, ProbeRun> {
        self.runs.fetch_add(1, Ordering::SeqCst);
        self.inner.clone().run(status)
    }
}

/// A host's wrapper around the real prober (`EngineBuilder::wrap_prober`) sees every probe, and
/// the prober it wraps keeps the builder's settings: here its two probe slots.
#[actix::test]
async fn a_wrapped_prober_keeps_its_slots_and_sees_every_probe() {
    let runs = Arc::new(AtomicUsize::new(0));
    let counted = runs.clone();
    let setup = start_with(Duration::from_millis(900), move |builder| {
        builder
            .max_probes_in_flight(Some(2))
            .wrap_prober(move |prober| Arc::new(Counting { inner: prober, runs: counted }))
    })
    .await;
    for i in 0..6 {
        setup.add(i, &format!("p{i}")).await;
    }
    run_for(Duration::from_secs(3)).await;
    assert_eq!(setup.tcp.most.load(Ordering::SeqCst), 2, "never more than the builder's limit at once");
    assert_eq!(setup.records.all().len(), 6, "each pod probed once, told to the builder's observer");
    assert_eq!(runs.load(Ordering::SeqCst), 6, "and each probe ran through the wrapper");
}

/// An exec runner whose commands take `takes` (5 s: within their 10 s timeout), counting the
/// commands started.
struct SlowExec {
    takes: Duration,
    started: Arc<AtomicUsize>,
}

impl SlowExec {
    fn taking(takes: Duration) -> SlowExec {
        SlowExec { takes, started: Arc::new(AtomicUsize::new(0)) }
    }
}

impl CommandRunner for SlowExec {
    fn run_in_container(
        &self,
        _container_id: &ContainerId,
        _cmd: &[String],
        _timeout: Duration,
    ) -> BoxFuture<'static, Result<ExecOutput, ExecError>> {
        self.started.fetch_add(1, Ordering::SeqCst);
        let takes = self.takes;
        Box::pin(async move {
            tokio::time::sleep(takes).await;
            Ok(ExecOutput { output: Vec::new(), exit_code: 0 })
        })
    }
}

/// An exec readiness probe (`check`) every 10 s with a 10 s timeout: [`SlowExec`] holds it 5 s.
fn exec_probe() -> Probe {
    Probe {
        exec: Some(ExecAction { command: Some(vec!["check".into()]) }),
        period_seconds: Some(10),
        timeout_seconds: Some(10),
        ..Default::default()
    }
}

#[actix::test]
async fn exec_probes_have_slots_of_their_own() {
    // One slot each: the exec probe holding its slot for 5 s (as a cluster exec probe waiting
    // on its pods/exec budget would) does not hold the TCP probe back.
    let setup = start_with(Duration::from_millis(10), |builder| {
        builder.max_probes_in_flight(Some(1)).runner(Arc::new(SlowExec::taking(Duration::from_secs(5))))
    })
    .await;
    let exec = exec_probe();
    let pod = test_pod("exec").container("app").with_probe("app", ProbeKind::Readiness, exec).build();
    setup.pods.upsert(pod.clone());
    setup.engine.sync_pod(pod, status(1, "exec")).await.unwrap();
    run_for(Duration::from_millis(100)).await;
    let net = setup.add(2, "net").await;
    run_for(Duration::from_millis(100)).await;
    assert_eq!(
        setup.tcp.calls.lock().unwrap().len(),
        1,
        "the TCP probe ran while the exec probe held its slot"
    );
    assert!(setup.ready(&net).await);
    let records = setup.records.all();
    assert_eq!(records.len(), 1, "the exec probe is still running: {records:?}");
    assert!(records[0].waited.is_zero(), "{records:?}");
    run_for(Duration::from_secs(5)).await;
    assert_eq!(setup.records.all().len(), 2, "then the exec probe finished");
}

/// The exec pool can be smaller than the others (the agent sizes it by its descriptor limit):
/// with one exec slot, a second exec probe waits for the first, while other probes do not.
#[actix::test]
async fn the_exec_pool_can_be_smaller() {
    let setup = start_with(Duration::from_millis(10), |builder| {
        builder
            .max_probes_in_flight(Some(10))
            .max_exec_probes_in_flight(Some(1))
            .runner(Arc::new(SlowExec::taking(Duration::from_secs(5))))
    })
    .await;
    let exec = exec_probe();
    for (i, name) in ["exec-a", "exec-b"].into_iter().enumerate() {
        let pod =
            test_pod(name).container("app").with_probe("app", ProbeKind::Readiness, exec.clone()).build();
        setup.pods.upsert(pod.clone());
        setup.engine.sync_pod(pod, status(i + 1, name)).await.unwrap();
    }
    let net = setup.add(3, "net").await;
    run_for(Duration::from_millis(100)).await;
    assert!(setup.ready(&net).await, "the TCP probe did not wait");
    run_for(Duration::from_millis(5_000)).await;
    let exec_records: Vec<_> = setup.records.all().into_iter().filter(|r| r.pod != "net").collect();
    assert_eq!(exec_records.len(), 1, "one exec probe at a time: {exec_records:?}");
    run_for(Duration::from_millis(5_000)).await;
    let exec_records: Vec<_> = setup.records.all().into_iter().filter(|r| r.pod != "net").collect();
    assert_eq!(exec_records.len(), 2, "then the other: {exec_records:?}");
    assert!(exec_records.iter().any(|r| !r.waited.is_zero()), "{exec_records:?}");
}

#[actix::test]
async fn a_tick_due_while_the_probe_waited_for_its_slot_is_dropped() {
    // One slot and probes of 300 ms: four pods probed every 10 s hold it for 1.2 s, so the
    // first probe of a fifth pod, probed every second, waits past its tick at 1 s.
    let setup = start(Some(1), Duration::from_millis(300)).await;
    let t0 = tokio::time::Instant::now();
    for i in 0..4 {
        setup.add(i, &format!("p{i}")).await;
    }
    setup.add_pod(4, pod_every("fast", 1)).await;
    run_for(Duration::from_millis(3_100)).await;

    let began: Vec<u128> =
        setup.calls_to("10.0.0.4", t0).iter().map(|d| (d.as_millis() + 50) / 100 * 100).collect();
    // Go's ticker would hand the worker the tick of 1 s when its probe returned at 1.5 s, and it
    // would probe again at once, off its schedule; but the probe that began at 1.2 s was that
    // tick's probe already. The next one is on the schedule, at 2 s.
    assert_eq!(began, [1_200, 2_000, 3_000], "the fast pod's probes");
}

#[actix::test]
async fn a_tick_due_while_the_probe_ran_still_runs_at_once() {
    // The control, as upstream: one slot and probes of 900 ms; a pod probed every 10 s holds
    // the slot until 0.9 s, so the fast pod's first probe begins at 0.9 s, before its tick at
    // 1 s, and runs past it. That tick came while the probe ran, so it runs when the probe
    // returns, at 1.8 s; the tick of 2 s comes while that one runs, and so on.
    let setup = start(Some(1), Duration::from_millis(900)).await;
    let t0 = tokio::time::Instant::now();
    setup.add(0, "slow").await;
    setup.add_pod(1, pod_every("fast", 1)).await;
    run_for(Duration::from_millis(2_000)).await;
    let began: Vec<u128> =
        setup.calls_to("10.0.0.1", t0).iter().map(|d| (d.as_millis() + 50) / 100 * 100).collect();
    assert_eq!(began, [900, 1_800], "the fast pod's probes");
}

/// A probe with a long timeout that hangs gives its slot back after the lease (10 s) and runs
/// on without it: it cannot keep every other pod's probes waiting for its whole timeout.
#[actix::test]
async fn a_probe_that_hangs_for_a_long_timeout_gives_its_slot_back_after_the_lease() {
    // Every dial takes an hour: the hanging pod's (timeout an hour) holds on; the victim's
    // (timeout 1 s) fails after its second, once it has a slot.
    let setup = start(Some(1), Duration::from_secs(3600)).await;
    let t0 = tokio::time::Instant::now();
    let probe = Probe {
        tcp_socket: Some(TCPSocketAction { port: IntOrString::Int(80), host: None }),
        period_seconds: Some(10),
        timeout_seconds: Some(3600),
        ..Default::default()
    };
    let hanging = test_pod("hanging").container("app").with_probe("app", ProbeKind::Readiness, probe).build();
    setup.add_pod(0, hanging).await;
    settle().await;
    setup.add(1, "victim").await;
    run_for(Duration::from_secs(5)).await;
    assert!(setup.calls_to("10.0.0.1", t0).is_empty(), "the victim waits while the lease lasts");
    run_for(Duration::from_secs(7)).await;
    let victim = setup.calls_to("10.0.0.1", t0);
    assert_eq!(victim.len(), 1, "the victim probed once the lease was over: {victim:?}");
    assert!(victim[0] >= Duration::from_secs(10) && victim[0] < Duration::from_secs(11), "{victim:?}");
    assert_eq!(setup.tcp.running.load(Ordering::SeqCst), 1, "the hanging probe runs on, without its slot");
}

/// Exec probes keep their slot past the lease: the exec pool is sized by what each one holds
/// while it runs (a local command's descriptors), which a hanging one holds just the same.
#[actix::test]
async fn an_exec_probe_keeps_its_slot_past_the_lease() {
    // Commands that hang for a day.
    let runner = SlowExec::taking(Duration::from_secs(86_400));
    let started = runner.started.clone();
    let setup = start_with(Duration::from_millis(10), |builder| {
        builder.max_probes_in_flight(Some(10)).max_exec_probes_in_flight(Some(1)).runner(Arc::new(runner))
    })
    .await;
    let exec = Probe { timeout_seconds: Some(3600), ..exec_probe() };
    for i in 0..5 {
        let name = format!("exec-{i}");
        let pod =
            test_pod(&name).container("app").with_probe("app", ProbeKind::Readiness, exec.clone()).build();
        setup.pods.upsert(pod.clone());
        setup.engine.sync_pod(pod, status(i + 1, &name)).await.unwrap();
    }
    run_for(Duration::from_secs(45)).await;
    assert_eq!(started.load(Ordering::SeqCst), 1, "one exec probe at a time, lease or not");
}
