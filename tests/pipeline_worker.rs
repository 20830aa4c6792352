//! Probe workers through the whole pipeline (docs/prober.md §1, §4.9), under paused time with a
//! scripted prober: the schedule, start-up jitter, manual trigger, initial delay, startup gating,
//! thresholds, stop rules, errors, panics, restarts, cancellation and metrics.
//!
//! The harness's manager starts at the test's first instant; most tests age it past one period
//! first (`aged`) so that new workers start without jitter. Probe start instants come from the
//! scripted prober's call log and are compared with a millisecond of slack (tokio rounds timer
//! deadlines up to the next millisecond).

// Test helpers may panic: a panic there is a failed assertion.
#![allow(clippy::unwrap_used)]

use probelet_test_support as support;

use std::sync::atomic::Ordering;
use std::time::Duration;

use k8s_openapi::api::core::v1::{ContainerStatus, PodStatus};
use probelet::FeatureGates;
use probelet::container::ContainerId;
use probelet::metrics::PrometheusRegistry;
use probelet::prober::{ProbeKind, ProbeResult};
use probelet::results::RemoveResult;
use probelet::status::POD_READY;
use support::kubelet::{DrainLog, Harness, advance, aged_harness, run_for, settle, started_harness, wall};
use support::pods::{probe, running, terminated, test_pod, waiting};
use support::scripted::{ScriptedProber, Step};
use tokio::time::Instant;

use ProbeKind::{Liveness, Readiness, Startup};
use ProbeResult::{Failure, Success, Unknown};

fn secs(n: u64) -> Duration {
    Duration::from_secs(n)
}

/// `got` is `want`, give or take the millisecond tokio rounds timer deadlines up by.
#[track_caller]
fn assert_near(got: Duration, want: Duration, what: &str) {
    let diff = got.abs_diff(want);
    assert!(diff <= Duration::from_millis(2), "{what}: got {got:?}, want {want:?}");
}

/// The instants at which (container, kind) was probed, relative to `from`.
fn probe_times(h: &Harness, container: &str, kind: ProbeKind, from: Instant) -> Vec<Duration> {
    h.prober.calls_of(container, kind).iter().map(|c| c.at.saturating_duration_since(from)).collect()
}

/// The `prober_probe_total` / `prober_probe_duration_seconds` lines of one pod in the global
/// registry's render.
fn metric_lines(registry: &PrometheusRegistry, pod: &str) -> Vec<String> {
    let needle = format!("pod=\"{pod}\"");
    registry.render().lines().filter(|l| l.contains(&needle)).map(str::to_owned).collect()
}

// === schedule ===

#[actix::test]
async fn first_probe_runs_at_once_then_every_period() {
    let (h, t0) = aged_harness().await;
    let pod = test_pod("sched").container("app").with_probe("app", Readiness, probe(10, 1, 3)).build();
    let start = Instant::now();
    h.sync(&pod, vec![running("app", "cri://1", wall(t0))]).await;
    settle().await;
    let first = probe_times(&h, "app", Readiness, start);
    assert_eq!(first.len(), 1, "the first probe does not wait for a tick");
    assert_near(first[0], Duration::ZERO, "first probe");

    run_for(secs(35)).await;
    let times = probe_times(&h, "app", Readiness, start);
    assert_eq!(times.len(), 4, "{times:?}");
    for (i, t) in times.iter().enumerate() {
        assert_near(*t, secs(10 * i as u64), "fixed-rate schedule");
    }
}

#[actix::test]
async fn slow_probe_keeps_starts_one_period_apart() {
    let (h, t0) = aged_harness().await;
    h.prober.always("app", Readiness, Step::Slow(secs(3), Success));
    let pod = test_pod("slow").container("app").with_probe("app", Readiness, probe(10, 1, 3)).build();
    let start = Instant::now();
    h.sync(&pod, vec![running("app", "cri://1", wall(t0))]).await;
    run_for(secs(25)).await;
    let times = probe_times(&h, "app", Readiness, start);
    assert_eq!(times.len(), 3, "{times:?}");
    assert_near(times[1] - times[0], secs(10), "fixed rate, not period + probe time");
    assert_near(times[2] - times[1], secs(10), "fixed rate, not period + probe time");
}

#[actix::test]
async fn probe_slower_than_period_runs_again_right_after_it_returns() {
    let (h, t0) = aged_harness().await;
    h.prober.then("app", Readiness, [Step::Slow(secs(25), Success)]);
    let pod = test_pod("slower").container("app").with_probe("app", Readiness, probe(10, 1, 3)).build();
    let start = Instant::now();
    h.sync(&pod, vec![running("app", "cri://1", wall(t0))]).await;
    run_for(secs(35)).await;
    // Ticks at 10 and 20 collapse into one pending tick, run when the probe returns at 25;
    // the schedule stays on its grid (30).
    let times = probe_times(&h, "app", Readiness, start);
    assert_eq!(times.len(), 3, "{times:?}");
    assert_near(times[1], secs(25), "the pending tick runs when the slow probe returns");
    assert_near(times[2], secs(30), "then the grid again");
}

#[actix::test]
async fn the_schedule_keeps_its_grid_for_hundreds_of_periods_and_collapses_missed_ticks() {
    let (h, t0) = aged_harness().await;
    // Probe 50 runs past two ticks; every other probe is instant.
    let mut steps: Vec<Step> = (0..50).map(|_| Step::Return(Success)).collect();
    steps.push(Step::Slow(Duration::from_millis(2_500), Success));
    h.prober.then("app", Readiness, steps);
    let pod = test_pod("grid").container("app").with_probe("app", Readiness, probe(1, 1, 3)).build();
    let start = Instant::now();
    h.sync(&pod, vec![running("app", "cri://1", wall(t0))]).await;
    run_for(Duration::from_millis(299_500)).await;
    let times = probe_times(&h, "app", Readiness, start);
    // 0..=50 on the grid; the ticks at 51 and 52 collapse into one run at 52.5 when probe 50
    // returns; then 53, 54, ... 299 on the same grid, without drift.
    assert_eq!(times.len(), 299, "{:?}", &times[45..60.min(times.len())]);
    for (i, t) in times.iter().enumerate() {
        let want = match i {
            0..=50 => Duration::from_secs(i as u64),
            51 => Duration::from_millis(52_500),
            _ => Duration::from_secs(i as u64 + 1),
        };
        assert_near(*t, want, &format!("probe {i}"));
    }
}

#[actix::test]
async fn a_result_removed_from_the_cache_behind_the_worker_is_stored_again_at_its_next_probe() {
    let (h, t0) = aged_harness().await;
    let pod = test_pod("gone").container("app").with_probe("app", Readiness, probe(10, 1, 3)).build();
    h.sync(&pod, vec![running("app", "cri://1", wall(t0))]).await;
    run_for(secs(25)).await;
    assert_eq!(h.result(Readiness, "cri://1").await, Some(Success));
    // The worker sends only what the cache does not show: it must notice the entry went.
    let remove = RemoveResult { kind: Readiness, container_id: ContainerId::parse("cri://1") };
    h.pipeline.results.send(remove).await.unwrap();
    assert_eq!(h.result(Readiness, "cri://1").await, None);
    run_for(secs(10)).await;
    assert_eq!(h.result(Readiness, "cri://1").await, Some(Success));
}

#[actix::test]
async fn young_manager_delays_the_first_probe_by_jitter() {
    let (h, t0) = started_harness().await;
    first_probe_waits_a_jitter(&h, "jitter", wall(t0)).await;
}

/// A pod `name` with a readiness probe of period 10 s, added with its container started at
/// `started`: its first probe comes after a jitter in (0, period), as a young manager's.
async fn first_probe_waits_a_jitter(
    h: &Harness,
    name: &str,
    started: probelet::k8s_openapi::jiff::Timestamp,
) {
    let pod = test_pod(name).container("app").with_probe("app", Readiness, probe(10, 1, 3)).build();
    let start = Instant::now();
    h.sync(&pod, vec![running("app", "cri://1", started)]).await;
    settle().await;
    assert!(h.prober.calls().is_empty(), "a young manager's worker waits before its first probe");
    run_for(secs(10)).await;
    let times = probe_times(h, "app", Readiness, start);
    assert_eq!(times.len(), 1, "{times:?}");
    assert!(times[0] > Duration::ZERO && times[0] < secs(10), "jitter in (0, period): {:?}", times[0]);
}

#[actix::test]
async fn a_trigger_during_the_jitter_probes_again_right_after_the_first_probe() {
    let (h, t0) = started_harness().await;
    let pod =
        test_pod("jitter-trigger").container("app").with_probe("app", Readiness, probe(10, 1, 3)).build();
    let start = Instant::now();
    h.sync(&pod, vec![running("app", "cri://1", wall(t0))]).await;
    // The next sync finds the worker (still in its jitter) and no readiness result: it triggers.
    h.sync(&pod, vec![running("app", "cri://1", wall(t0))]).await;
    settle().await;
    assert!(h.prober.calls().is_empty(), "the trigger does not cut the jitter short");
    run_for(secs(25)).await;
    let times = probe_times(&h, "app", Readiness, start);
    assert!(times.len() >= 3, "{times:?}");
    assert!(times[0] > Duration::ZERO && times[0] < secs(10), "jitter in (0, period): {:?}", times[0]);
    // Upstream keeps the trigger in its one-slot channel and reads it after the first probe.
    assert_near(times[1], times[0], "the kept trigger's probe, at once");
    assert_near(times[2], times[1] + secs(10), "the schedule restarted from the triggered probe");
}

#[actix::test]
async fn worker_created_after_the_manager_is_one_period_old_probes_at_once() {
    let (h, t0) = started_harness().await;
    advance(secs(10)).await;
    let pod = test_pod("nojitter").container("app").with_probe("app", Readiness, probe(10, 1, 3)).build();
    let start = Instant::now();
    h.sync(&pod, vec![running("app", "cri://1", wall(t0))]).await;
    settle().await;
    let times = probe_times(&h, "app", Readiness, start);
    assert_eq!(times.len(), 1, "no jitter once the manager is a period old");
    assert_near(times[0], Duration::ZERO, "first probe");
}

/// A harness on a wall clock the test steps, as NTP steps a node's.
async fn stepping_harness() -> (Harness, std::sync::Arc<probelet::clock::SteppingClock>) {
    tokio::time::pause();
    let clock = std::sync::Arc::new(probelet::clock::SteppingClock::starting_at(support::kubelet::epoch()));
    let h = Harness::start_clocked(clock.clone());
    h.worker_count().await;
    (h, clock)
}

/// The start-up jitter lasts while the manager is younger than a period by tokio's clock, as
/// upstream's by Go's monotonic one: the node's wall clock stepped an hour on right after the
/// start (NTP at boot) does not end it. On the wall clock, it ended the spreading at once.
#[actix::test]
async fn a_step_forward_of_the_wall_clock_does_not_end_the_start_up_jitter() {
    let (h, clock) = stepping_harness().await;
    clock.step(probelet::k8s_openapi::jiff::SignedDuration::from_hours(1));
    first_probe_waits_a_jitter(&h, "young", support::kubelet::epoch()).await;
}

/// ... nor does a step back make an old manager young again: on the wall clock, a step back of
/// a day had every new worker wait a jitter for a day.
#[actix::test]
async fn a_step_back_of_the_wall_clock_does_not_start_the_start_up_jitter_again() {
    let (h, clock) = stepping_harness().await;
    advance(secs(11)).await;
    clock.step(probelet::k8s_openapi::jiff::SignedDuration::from_hours(-2));
    // Started before the step (a container started after it would wait for the wall clock to
    // reach its `startedAt`, as upstream's initial-delay check does).
    let long_ago = support::kubelet::epoch()
        .checked_sub(probelet::k8s_openapi::jiff::SignedDuration::from_hours(24))
        .unwrap();
    let pod = test_pod("old").container("app").with_probe("app", Readiness, probe(10, 1, 3)).build();
    let start = Instant::now();
    h.sync(&pod, vec![running("app", "cri://1", long_ago)]).await;
    settle().await;
    let times = probe_times(&h, "app", Readiness, start);
    assert_eq!(times.len(), 1, "no jitter once the manager is a period old: {times:?}");
    assert_near(times[0], Duration::ZERO, "first probe");
}

#[actix::test]
async fn manual_trigger_probes_at_once_and_restarts_the_schedule() {
    let (h, t0) = aged_harness().await;
    let pod = test_pod("trigger").container("app").with_probe("app", Readiness, probe(10, 1, 3)).build();
    let added = Instant::now();
    // The worker starts before the container runs: nothing to probe, the schedule runs.
    h.sync(&pod, vec![waiting("app")]).await;
    settle().await;
    assert!(h.prober.calls().is_empty());

    run_for(secs(4)).await;
    // The container started: the sync's UpdatePodStatus finds no readiness result and
    // triggers the worker.
    let triggered = Instant::now();
    h.sync(&pod, vec![running("app", "cri://1", wall(t0))]).await;
    settle().await;
    let times = probe_times(&h, "app", Readiness, triggered);
    assert_eq!(times.len(), 1, "the trigger probes at once");
    assert_near(times[0], Duration::ZERO, "triggered probe");

    // The tick the worker was created with (added + 10) is gone.
    run_for(secs(8)).await;
    assert!(Instant::now() > added + secs(10));
    assert_eq!(h.prober.calls().len(), 1, "no probe on the old schedule");
    run_for(secs(3)).await;
    let times = probe_times(&h, "app", Readiness, triggered);
    assert_eq!(times.len(), 2, "{times:?}");
    assert_near(times[1], secs(10), "next periodic probe one period after the manual one");
}

// === initial delay and startup gating ===

#[actix::test]
async fn initial_delay_counts_from_started_at() {
    let (h, t0) = aged_harness().await;
    let mut p = probe(1, 1, 3);
    p.initial_delay_seconds = Some(15);
    let pod = test_pod("delay").container("app").with_probe("app", Readiness, p).build();
    // Started 5 s ago: the first probe is due 10 s from now.
    let started_at = wall(t0) - secs(5);
    let now = Instant::now();
    h.sync(&pod, vec![running("app", "cri://1", started_at)]).await;
    run_for(Duration::from_millis(9_500)).await;
    assert!(h.prober.calls().is_empty(), "no probe before startedAt + 15 s");
    run_for(secs(2)).await;
    let times = probe_times(&h, "app", Readiness, now);
    assert!(!times.is_empty(), "probed once the delay passed");
    assert!(times[0] >= secs(10), "first probe at {:?}", times[0]);
}

#[actix::test]
async fn liveness_and_readiness_wait_for_started() {
    let (h, t0) = aged_harness().await;
    h.prober.always("app", Startup, Step::Return(Failure));
    let pod = test_pod("gated")
        .container("app")
        .with_probe("app", Startup, probe(10, 1, 100))
        .with_probe("app", Readiness, probe(10, 1, 3))
        .with_probe("app", Liveness, probe(10, 1, 3))
        .build();
    h.sync(&pod, vec![waiting("app")]).await;
    h.sync(&pod, vec![running("app", "cri://1", wall(t0))]).await;
    run_for(secs(35)).await;
    assert!(h.prober.calls_of("app", Startup).len() >= 3, "startup probes while not started");
    assert!(h.prober.calls_of("app", Readiness).is_empty(), "readiness gated on started");
    assert!(h.prober.calls_of("app", Liveness).is_empty(), "liveness gated on started");
    assert_eq!(h.container(&pod, "app").await.started, Some(false));

    // Startup succeeds: the status manager marks the container started, and the other
    // workers probe at their next tick without another pod sync.
    h.prober.always("app", Startup, Step::Return(Success));
    run_for(secs(10)).await;
    assert_eq!(h.container(&pod, "app").await.started, Some(true));
    run_for(secs(10)).await;
    assert!(!h.prober.calls_of("app", Readiness).is_empty(), "readiness probes once started");
    assert!(!h.prober.calls_of("app", Liveness).is_empty(), "liveness probes once started");
}

/// A running container whose status has an empty ID is one not identified yet. As upstream's
/// worker (kubernetes#21781, "Probe target container not found"), no worker probes it, so with
/// a startup probe it is not started and its readiness and liveness wait; without one it is
/// started (`isContainerStarted`: no startup worker), and not ready while its readiness worker
/// has no result. Once its ID shows, it is probed and started as any container.
#[actix::test]
async fn a_running_container_without_an_id_is_not_probed_nor_started_by_its_startup_probe() {
    let (h, t0) = aged_harness().await;
    h.prober.always("app", Startup, Step::Return(Success));
    h.prober.always("plain", Readiness, Step::Return(Success));
    let pod = test_pod("no-id")
        .container("app")
        .with_probe("app", Startup, probe(10, 1, 3))
        .with_probe("app", Liveness, probe(10, 1, 3))
        .container("plain")
        .with_probe("plain", Readiness, probe(10, 1, 3))
        .build();
    let no_id = |name: &str| running(name, "", wall(t0));
    h.sync(&pod, vec![no_id("app"), no_id("plain")]).await;
    run_for(secs(35)).await;
    let status = h.sync(&pod, vec![no_id("app"), no_id("plain")]).await;
    assert!(h.prober.calls().is_empty(), "nothing probes a container without an ID: {:?}", h.prober.calls());
    let flags = |status: &PodStatus| -> Vec<(Option<bool>, bool)> {
        status.container_statuses.iter().flatten().map(|c| (c.started, c.ready)).collect()
    };
    assert_eq!(flags(&status), [(Some(false), false), (Some(true), false)]);

    h.sync(&pod, vec![running("app", "cri://app", wall(t0)), running("plain", "cri://plain", wall(t0))])
        .await;
    run_for(secs(15)).await;
    let status = h.resync(&pod).await;
    assert_eq!(flags(&status), [(Some(true), true), (Some(true), true)]);
}

#[actix::test]
async fn startup_worker_holds_after_its_decision() {
    let (h, t0) = aged_harness().await;
    h.prober.always("app", Startup, Step::Return(Failure));
    let pod = test_pod("startup-hold").container("app").with_probe("app", Startup, probe(10, 1, 2)).build();
    h.sync(&pod, vec![waiting("app")]).await;
    h.sync(&pod, vec![running("app", "cri://1", wall(t0))]).await;
    // The worker first sees the container at its next tick (10 s), fails twice (10, 20).
    run_for(secs(25)).await;
    assert_eq!(h.result(Startup, "cri://1").await, Some(Failure), "failure threshold reached");
    let decided = h.prober.calls_of("app", Startup).len();
    assert_eq!(decided, 2);
    run_for(secs(40)).await;
    assert_eq!(h.prober.calls_of("app", Startup).len(), decided, "no probe after the decision");

    // A new container lifts the hold.
    h.sync(&pod, vec![running("app", "cri://2", wall(t0))]).await;
    run_for(secs(10)).await;
    let calls = h.prober.calls_of("app", Startup);
    assert!(calls.len() > decided, "probing resumes for the new container");
    assert_eq!(calls.last().unwrap().container_id.to_string(), "cri://2");
}

#[actix::test]
async fn startup_worker_does_not_probe_a_started_container() {
    let (h, t0) = started_harness().await;
    // A container that started long before the agent and was reported started: nothing
    // is reseeded, the cached status keeps started=true, and the startup worker never probes.
    let pod = test_pod("already-started")
        .container("app")
        .with_probe("app", Startup, probe(10, 1, 3))
        .with_probe("app", Readiness, probe(10, 1, 3))
        .build();
    let mut app = running("app", "cri://1", wall(t0) - secs(60));
    app.started = Some(true);
    h.sync(&pod, vec![app.clone()]).await;
    h.sync(&pod, vec![app]).await;
    run_for(secs(45)).await;
    assert_eq!(h.container(&pod, "app").await.started, Some(true));
    assert!(!h.prober.calls_of("app", Readiness).is_empty(), "readiness probes");
    assert!(h.prober.calls_of("app", Startup).is_empty(), "startup never probes a started container");
}

// === thresholds ===

#[actix::test]
async fn readiness_thresholds_through_the_worker() {
    let (h, t0) = aged_harness().await;
    h.prober.then("app", Readiness, [Success, Success, Failure, Failure, Failure].map(Step::Return));
    h.prober.always("app", Readiness, Step::Return(Failure));
    let pod = test_pod("thresholds").container("app").with_probe("app", Readiness, probe(10, 2, 3)).build();
    h.sync(&pod, vec![running("app", "cri://1", wall(t0))]).await;
    settle().await;
    assert_eq!(h.result(Readiness, "cri://1").await, Some(Failure), "seed; one success is below 2");
    run_for(secs(5)).await;
    let mut seen = vec![];
    for _ in 0..4 {
        run_for(secs(10)).await;
        seen.push(h.result(Readiness, "cri://1").await.unwrap());
    }
    // S(2) → Success; F(1), F(2) below 3; F(3) → Failure.
    assert_eq!(seen, [Success, Success, Success, Failure]);
}

#[actix::test]
async fn liveness_failure_holds_until_a_new_container() {
    let (h, t0) = aged_harness().await;
    h.prober.always("app", Liveness, Step::Return(Failure));
    let pod = test_pod("liveness-hold").container("app").with_probe("app", Liveness, probe(10, 1, 2)).build();
    let log = h.result_log();
    h.sync(&pod, vec![running("app", "cri://1", wall(t0))]).await;
    run_for(secs(15)).await;
    assert_eq!(h.result(Liveness, "cri://1").await, Some(Failure));
    assert_eq!(h.prober.calls_of("app", Liveness).len(), 2);
    run_for(secs(40)).await;
    assert_eq!(h.prober.calls_of("app", Liveness).len(), 2, "held: no probes of the failed container");
    let changes = log.send(DrainLog).await.unwrap();
    let liveness: Vec<_> = changes.iter().filter(|c| c.kind == Liveness).map(|c| c.result).collect();
    assert_eq!(liveness, [Success, Failure], "seed, then one failure");

    h.prober.always("app", Liveness, Step::Return(Success));
    h.sync(&pod, vec![running("app", "cri://2", wall(t0))]).await;
    run_for(secs(10)).await;
    let calls = h.prober.calls_of("app", Liveness);
    assert_eq!(calls.len(), 3, "the new container is probed");
    assert_eq!(calls[2].container_id.to_string(), "cri://2");
    assert_eq!(h.result(Liveness, "cri://1").await, None, "the old container's entry is removed");
    assert_eq!(h.result(Liveness, "cri://2").await, Some(Success));
}

#[actix::test]
async fn success_run_carries_over_a_container_restart() {
    let (h, t0) = aged_harness().await;
    let pod = test_pod("carry").container("app").with_probe("app", Readiness, probe(10, 2, 3)).build();
    h.sync(&pod, vec![running("app", "cri://1", wall(t0))]).await;
    settle().await;
    assert_eq!(h.prober.calls().len(), 1);
    assert_eq!(h.result(Readiness, "cri://1").await, Some(Failure), "one success is below 2");

    // The container restarts; its runtime status is stored without a pod sync (which would
    // trigger a probe of the cached, old container).
    let mut status = (*h.status(&pod).await).clone();
    status.container_statuses = Some(vec![running("app", "cri://2", wall(t0))]);
    status.container_statuses.as_mut().unwrap()[0].started = Some(true);
    h.pipeline.set_pod_status(pod.clone(), status);
    run_for(secs(15)).await;
    let calls = h.prober.calls_of("app", Readiness);
    assert_eq!(calls.len(), 2);
    assert_eq!(calls[1].container_id.to_string(), "cri://2");
    assert_eq!(
        h.result(Readiness, "cri://2").await,
        Some(Success),
        "the run of successes counts the old container's success"
    );
}

/// A worker remembers where its container was in the pod's probe status and takes it from
/// there while the status is the same version (docs/benchmarks.md); a new status, where
/// another container comes before it or it is gone, is searched again.
#[actix::test]
async fn a_worker_finds_its_container_in_every_new_status_whatever_its_place() {
    let (h, t0) = aged_harness().await;
    let pod = test_pod("order")
        .container("db")
        .container("web")
        .with_probe("web", Readiness, probe(10, 1, 3))
        .build();
    // `db` has no container ID yet, so `web` is the only container its probes see.
    h.sync(&pod, vec![waiting("db"), running("web", "cri://w1", wall(t0))]).await;
    run_for(secs(15)).await;
    let calls = h.prober.calls_of("web", Readiness);
    assert_eq!(calls.len(), 2, "the first probe and one tick");
    assert!(calls.iter().all(|c| c.container_id.to_string() == "cri://w1"), "{calls:?}");

    // `db` starts and now comes first; `web` restarted meanwhile.
    let started = |name, id| ContainerStatus { started: Some(true), ..running(name, id, wall(t0)) };
    let mut status = (*h.status(&pod).await).clone();
    status.container_statuses = Some(vec![started("db", "cri://d1"), started("web", "cri://w2")]);
    h.pipeline.set_pod_status(pod.clone(), status.clone());
    run_for(secs(10)).await;
    let calls = h.prober.calls_of("web", Readiness);
    assert_eq!(calls.len(), 3);
    assert_eq!(
        calls[2].container_id.to_string(),
        "cri://w2",
        "web's container, not what is now in its place"
    );

    // A status that no longer shows `web`: nothing is probed.
    status.container_statuses = Some(vec![started("db", "cri://d1")]);
    h.pipeline.set_pod_status(pod.clone(), status);
    run_for(secs(30)).await;
    assert_eq!(h.prober.calls_of("web", Readiness).len(), 3, "no container to probe");
}

/// A worker prepares its probe once per published status and runs what it prepared at every
/// probe of that status (the real prober's `prepare`, docs/benchmarks.md "A probe prepared
/// once per status"); a new status is prepared again, so a restarted container is probed by
/// its new ID at once.
#[actix::test]
async fn a_probe_is_prepared_once_per_published_status() {
    let (h, t0) = aged_harness().await;
    let pod = test_pod("prep").container("app").with_probe("app", Liveness, probe(10, 1, 3)).build();
    h.sync(&pod, vec![running("app", "cri://1", wall(t0))]).await;
    run_for(secs(55)).await;
    let calls = h.prober.calls_of("app", Liveness);
    assert_eq!(calls.len(), 6, "the first probe and five ticks");
    assert_eq!(h.prober.prepares(), 1, "one status, one preparation");

    let mut status = (*h.status(&pod).await).clone();
    let restarted = ContainerStatus { started: Some(true), ..running("app", "cri://2", wall(t0)) };
    status.container_statuses = Some(vec![restarted]);
    h.pipeline.set_pod_status(pod.clone(), status);
    run_for(secs(30)).await;
    let calls = h.prober.calls_of("app", Liveness);
    assert_eq!(calls.len(), 9);
    assert_eq!(h.prober.prepares(), 2, "prepared again for the new status");
    let ids: Vec<_> = calls.iter().map(|c| c.container_id.to_string()).collect();
    assert_eq!(
        ids[5..],
        ["cri://1", "cri://2", "cri://2", "cri://2"],
        "the new container from its first probe"
    );
}

/// A runner that prepares nothing (the trait's default) is called afresh at every probe.
#[actix::test]
async fn a_runner_that_prepares_nothing_is_called_at_every_probe() {
    tokio::time::pause();
    let t0 = Instant::now();
    let h = Harness::start_gated(ScriptedProber::unprepared(), FeatureGates::default());
    h.worker_count().await;
    advance(secs(11)).await;
    let pod = test_pod("unprep").container("app").with_probe("app", Liveness, probe(10, 1, 3)).build();
    h.sync(&pod, vec![running("app", "cri://1", wall(t0))]).await;
    run_for(secs(25)).await;
    let mut status = (*h.status(&pod).await).clone();
    let restarted = ContainerStatus { started: Some(true), ..running("app", "cri://2", wall(t0)) };
    status.container_statuses = Some(vec![restarted]);
    h.pipeline.set_pod_status(pod.clone(), status);
    run_for(secs(20)).await;
    let ids: Vec<_> = h.prober.calls_of("app", Liveness).iter().map(|c| c.container_id.to_string()).collect();
    assert_eq!(ids, ["cri://1", "cri://1", "cri://1", "cri://2", "cri://2"]);
    assert_eq!(h.prober.prepares(), 0);
}

// === non-running containers and stop rules ===

/// Upstream writes Failure for a container that is not running from every worker; probelet
/// from the readiness worker only, the others keeping their initial values (docs/prober.md §9,
/// §8.21): a liveness or startup Failure for an instance not yet running would outlast its
/// start and hide its first real failure.
#[actix::test]
async fn non_running_container_writes_failure_for_readiness_only() {
    let (h, _) = aged_harness().await;
    let pod = test_pod("down")
        .container("app")
        .with_probe("app", Startup, probe(10, 1, 3))
        .with_probe("app", Readiness, probe(10, 1, 3))
        .with_probe("app", Liveness, probe(10, 1, 3))
        .build();
    let log = h.result_log();
    h.sync(&pod, vec![terminated("app", "cri://1", 1)]).await;
    settle().await;
    let want = [(Startup, Unknown), (Readiness, Failure), (Liveness, Success)];
    for (kind, result) in want {
        assert_eq!(h.result(kind, "cri://1").await, Some(result), "{kind}");
    }
    let changes = log.send(DrainLog).await.unwrap();
    assert!(
        !changes.iter().any(|c| c.kind != Readiness && c.result == Failure),
        "no liveness or startup Failure: {changes:?}"
    );
    assert!(h.prober.calls().is_empty(), "nothing probed");
    assert_eq!(h.worker_count().await, 3, "restartPolicy Always: workers keep going");
}

#[actix::test]
async fn terminal_pod_phase_stops_every_worker() {
    let (h, t0) = aged_harness().await;
    let pod = test_pod("finished")
        .container("app")
        .with_probe("app", Readiness, probe(10, 1, 3))
        .with_probe("app", Liveness, probe(10, 1, 3))
        .build();
    h.sync(&pod, vec![running("app", "cri://1", wall(t0))]).await;
    h.wait_workers(2).await;
    let status = PodStatus {
        phase: Some("Succeeded".into()),
        container_statuses: Some(vec![terminated("app", "cri://1", 0)]),
        ..Default::default()
    };
    h.pipeline.set_pod_status(pod.clone(), status);
    settle().await;
    assert_eq!(h.worker_count().await, 2, "workers notice at their next probe");
    run_for(secs(11)).await;
    h.wait_workers(0).await;
}

#[actix::test]
async fn terminated_container_with_restart_policy_never_stops_only_regular_workers() {
    let (h, t0) = aged_harness().await;
    let pod = test_pod("never")
        .restart_policy("Never")
        .sidecar("side")
        .container("app")
        .with_probe("side", Readiness, probe(10, 1, 3))
        .with_probe("app", Readiness, probe(10, 1, 3))
        .build();
    h.sync_with(
        &pod,
        "Running",
        vec![running("side", "cri://s", wall(t0))],
        vec![running("app", "cri://a", wall(t0))],
    )
    .await;
    h.wait_workers(2).await;
    h.sync_with(
        &pod,
        "Running",
        vec![terminated("side", "cri://s", 1)],
        vec![terminated("app", "cri://a", 1)],
    )
    .await;
    run_for(secs(11)).await;
    h.wait_workers(1).await;
    let left = h.pipeline.workers().await.unwrap();
    assert_eq!(&*left[0].container_name, "side", "the sidecar will be restarted: its worker stays");
    assert_eq!(h.result(Readiness, "cri://s").await, Some(Failure));
}

/// `ContainerRestartRules` (on by default, as in v1.35): a container's own `restartPolicy`
/// decides whether it runs again, so its worker outlives it in a `Never` pod and the restarted
/// instance is probed, not taken as ready for want of a worker; a container that will not run
/// again in an `Always` pod loses its workers.
#[actix::test]
async fn a_containers_own_restart_policy_decides_whether_its_worker_outlives_it() {
    let (h, t0) = aged_harness().await;
    let pod = test_pod("own-policy")
        .restart_policy("Never")
        .container("app")
        .container("job")
        .container_restart_policy("app", "Always")
        .container_restart_policy("job", "OnFailure")
        .with_probe("app", Readiness, probe(10, 1, 1))
        .with_probe("job", Readiness, probe(10, 1, 1))
        .build();
    h.sync(&pod, vec![running("app", "cri://a1", wall(t0)), running("job", "cri://j1", wall(t0))]).await;
    h.wait_workers(2).await;
    h.sync(&pod, vec![terminated("app", "cri://a1", 0), terminated("job", "cri://j1", 0)]).await;
    run_for(secs(11)).await;
    h.wait_workers(1).await;
    let left = h.pipeline.workers().await.unwrap();
    assert_eq!(&*left[0].container_name, "app", "app restarts after any exit; job not after a zero exit");

    h.prober.always("app", Readiness, Step::Return(Failure));
    let before = h.prober.calls_of("app", Readiness).len();
    let status =
        h.sync(&pod, vec![running("app", "cri://a2", wall(t0)), terminated("job", "cri://j1", 0)]).await;
    assert!(!status.container_statuses.as_ref().unwrap()[0].ready, "a restarted app is not ready unprobed");
    run_for(secs(11)).await;
    assert!(h.prober.calls_of("app", Readiness).len() > before, "the restarted instance is probed");
    assert_eq!(h.result(Readiness, "cri://a2").await, Some(Failure));

    let pod = test_pod("own-never")
        .container("app")
        .container_restart_policy("app", "Never")
        .with_probe("app", Readiness, probe(10, 1, 1))
        .with_probe("app", Liveness, probe(10, 1, 1))
        .build();
    h.sync(&pod, vec![running("app", "cri://n1", wall(t0))]).await;
    h.wait_workers(3).await;
    h.sync(&pod, vec![terminated("app", "cri://n1", 1)]).await;
    run_for(secs(11)).await;
    h.wait_workers(1).await;
}

/// With `ContainerRestartRules` off, the worker reads only the pod's policy, as before v1.35:
/// a container's own `Always` in a `Never` pod does not keep its worker.
#[actix::test]
async fn without_container_restart_rules_only_the_pods_policy_counts() {
    tokio::time::pause();
    let t0 = Instant::now();
    let gates =
        probelet::FeatureGates::default().with(probelet::Feature::ContainerRestartRules, false).unwrap();
    let h = Harness::start_gated(support::scripted::ScriptedProber::new(), gates);
    h.worker_count().await;
    advance(secs(11)).await;
    let pod = test_pod("own-policy-off")
        .restart_policy("Never")
        .container("app")
        .container_restart_policy("app", "Always")
        .with_probe("app", Readiness, probe(10, 1, 1))
        .build();
    h.sync(&pod, vec![running("app", "cri://a1", wall(t0))]).await;
    h.wait_workers(1).await;
    h.sync(&pod, vec![terminated("app", "cri://a1", 0)]).await;
    run_for(secs(11)).await;
    h.wait_workers(0).await;
}

#[actix::test]
async fn pod_deleted_before_add_quiets_liveness_and_startup_but_not_readiness() {
    let (h, t0) = aged_harness().await;
    let pod = test_pod("deleting")
        .deleting()
        .container("app")
        .with_probe("app", Startup, probe(10, 1, 3))
        .with_probe("app", Readiness, probe(10, 1, 3))
        .with_probe("app", Liveness, probe(10, 1, 3))
        .build();
    let log = h.result_log();
    h.sync(&pod, vec![waiting("app")]).await;
    h.wait_workers(3).await;
    h.sync(&pod, vec![running("app", "cri://1", wall(t0))]).await;
    run_for(secs(11)).await;
    h.wait_workers(1).await;
    assert_eq!(h.pipeline.workers().await.unwrap()[0].kind, Readiness);
    let changes = log.send(DrainLog).await.unwrap();
    let of = |kind| changes.iter().filter(|c| c.kind == kind).map(|c| c.result).collect::<Vec<_>>();
    assert_eq!(of(Startup), [Unknown, Success], "startup: seed, then Success at deletion");
    assert_eq!(of(Liveness), [Success], "liveness: Success (its seed too), never Failure");
    assert_eq!(h.result(Liveness, "cri://1").await, None, "removed when the worker stopped");
    assert!(h.prober.calls_of("app", Liveness).is_empty(), "liveness never probed");
    assert!(h.prober.calls_of("app", Startup).is_empty(), "startup never probed");
    // Startup wrote Success before it stopped: the container counts as started.
    assert_eq!(h.container(&pod, "app").await.started, Some(true));
    run_for(secs(20)).await;
    assert!(h.prober.calls_of("app", Readiness).len() >= 2, "readiness keeps probing during deletion");
}

// === errors and panics ===

#[actix::test]
async fn errored_probes_are_discarded() {
    let registry = PrometheusRegistry::global().unwrap();
    let (h, t0) = aged_harness().await;
    h.prober.always("app", Readiness, Step::Error);
    let pod = test_pod("errored-pod").container("app").with_probe("app", Readiness, probe(10, 1, 1)).build();
    h.sync(&pod, vec![waiting("app")]).await;
    h.sync(&pod, vec![running("app", "cri://1", wall(t0))]).await;
    run_for(secs(35)).await;
    h.resync(&pod).await;
    assert!(h.prober.calls_of("app", Readiness).len() >= 3);
    assert_eq!(h.result(Readiness, "cri://1").await, Some(Failure), "the seed stays");
    assert_eq!(h.condition(&pod, POD_READY).await.status, "False");
    assert!(metric_lines(&registry, "errored-pod").is_empty(), "no probe metric for errors");
}

#[actix::test]
async fn panic_in_probe_keeps_the_previous_result_and_probing_goes_on() {
    let (h, t0) = aged_harness().await;
    h.prober.then("app", Readiness, [Step::Return(Success), Step::PanicInFuture, Step::Return(Success)]);
    h.prober.always("app", Readiness, Step::Return(Failure));
    let pod = test_pod("panicky").container("app").with_probe("app", Readiness, probe(10, 1, 1)).build();
    let log = h.result_log();
    h.sync(&pod, vec![running("app", "cri://1", wall(t0))]).await;
    settle().await;
    assert_eq!(h.result(Readiness, "cri://1").await, Some(Success));
    run_for(secs(15)).await;
    assert_eq!(h.prober.calls().len(), 2, "the panicking probe ran");
    assert_eq!(h.result(Readiness, "cri://1").await, Some(Success), "previous result kept");
    run_for(secs(20)).await;
    assert_eq!(h.prober.calls().len(), 4, "the worker keeps probing");
    assert_eq!(h.result(Readiness, "cri://1").await, Some(Failure));
    let changes: Vec<_> = log.send(DrainLog).await.unwrap().into_iter().map(|c| c.result).collect();
    assert_eq!(changes, [Failure, Success, Failure], "seed, success, then the scripted failure");
}

#[actix::test]
async fn worker_that_dies_is_restarted_after_back_off() {
    // A thread-local recorder (the manager runs on this thread): the restart counter has only
    // a probe_type label, and other tests of this binary kill workers in parallel.
    let registry = PrometheusRegistry::new();
    let _local = metrics::set_default_local_recorder(&registry);
    let restarts = || {
        registry
            .render()
            .lines()
            .find(|l| l.starts_with("probelet_worker_restarts_total{probe_type=\"Readiness\"}"))
            .and_then(|l| l.rsplit(' ').next()?.parse::<u64>().ok())
            .unwrap_or(0)
    };
    let before = restarts();
    let (h, t0) = aged_harness().await;
    h.prober.then("app", Readiness, [Step::Return(Success), Step::PanicInWorker]);
    let pod = test_pod("dies").container("app").with_probe("app", Readiness, probe(10, 1, 1)).build();
    let log = h.result_log();
    let start = Instant::now();
    h.sync(&pod, vec![running("app", "cri://1", wall(t0))]).await;
    settle().await;
    h.resync(&pod).await;
    assert!(h.container(&pod, "app").await.ready);

    run_for(secs(15)).await;
    assert_eq!(restarts(), before + 1, "counted in probelet_worker_restarts_total");
    assert_eq!(h.worker_count().await, 1, "restarted");
    let times = probe_times(&h, "app", Readiness, start);
    assert_eq!(times.len(), 3, "{times:?}");
    assert_near(times[2], secs(11), "restarted one second after it died");
    assert!(h.container(&pod, "app").await.ready, "the cached status is kept");
    assert_eq!(h.result(Readiness, "cri://1").await, Some(Success), "the cached result is kept");
    let changes: Vec<_> = log.send(DrainLog).await.unwrap().into_iter().map(|c| c.result).collect();
    assert_eq!(changes, [Failure, Success], "no reseed after the restart");
    run_for(secs(10)).await;
    assert_eq!(h.prober.calls().len(), 4, "the new worker probes on its own schedule");
}

#[actix::test]
async fn restarted_worker_keeps_its_threshold_count() {
    let (h, t0) = aged_harness().await;
    h.prober.then("app", Readiness, [Step::Return(Success), Step::Return(Failure), Step::PanicInWorker]);
    h.prober.always("app", Readiness, Step::Return(Failure));
    let pod =
        test_pod("dies-counting").container("app").with_probe("app", Readiness, probe(10, 1, 2)).build();
    h.sync(&pod, vec![running("app", "cri://1", wall(t0))]).await;
    // Success (0), Failure (10: one of two), dies (20), restarted (21): the second failure.
    run_for(secs(22)).await;
    assert_eq!(h.prober.calls().len(), 4);
    assert_eq!(h.result(Readiness, "cri://1").await, Some(Failure), "the failure before the death counts");
}

#[actix::test]
async fn worker_removed_during_its_restart_back_off_is_gone() {
    let registry = PrometheusRegistry::global().unwrap();
    let (h, t0) = aged_harness().await;
    h.prober.then("app", Readiness, [Step::Return(Success), Step::PanicInWorker]);
    let pod = test_pod("dies-removed").container("app").with_probe("app", Readiness, probe(10, 1, 1)).build();
    h.sync(&pod, vec![running("app", "cri://1", wall(t0))]).await;
    run_for(Duration::from_millis(10_500)).await;
    assert_eq!(h.prober.calls().len(), 2, "died at 10, restart due at 11");
    assert!(!metric_lines(&registry, "dies-removed").is_empty());

    h.pipeline.remove_pod(pod.clone());
    run_for(secs(5)).await;
    h.wait_workers(0).await;
    assert_eq!(h.prober.calls().len(), 2, "not restarted");
    assert_eq!(h.result(Readiness, "cri://1").await, None, "its result is removed");
    assert!(metric_lines(&registry, "dies-removed").is_empty(), "its series are deleted");
}

// === stopping ===

#[actix::test]
async fn stopping_a_worker_cancels_its_probe_and_removes_its_result() {
    let (h, t0) = aged_harness().await;
    h.prober.then("app", Readiness, [Step::Return(Success), Step::Slow(secs(60), Success)]);
    let pod = test_pod("cancel").container("app").with_probe("app", Readiness, probe(10, 1, 1)).build();
    h.sync(&pod, vec![running("app", "cri://1", wall(t0))]).await;
    run_for(secs(15)).await;
    assert_eq!(h.prober.calls().len(), 2, "the slow probe is in flight");
    assert!(!h.prober.dropped.load(Ordering::SeqCst));
    assert_eq!(h.result(Readiness, "cri://1").await, Some(Success));

    h.pipeline.remove_pod(pod.clone());
    settle().await;
    assert!(h.prober.dropped.load(Ordering::SeqCst), "the in-flight probe was cancelled");
    assert_eq!(h.result(Readiness, "cri://1").await, None, "the container's result is removed");
    h.wait_workers(0).await;
}

// === metrics ===

#[actix::test]
async fn probe_metrics_count_results_and_vanish_with_the_worker() {
    let registry = PrometheusRegistry::global().unwrap();
    let (h, t0) = aged_harness().await;
    h.prober.then("app", Readiness, [Success, Success, Failure].map(Step::Return));
    h.prober.always("app", Readiness, Step::Error);
    let pod = test_pod("metrics-pod").container("app").with_probe("app", Readiness, probe(10, 1, 3)).build();
    h.sync(&pod, vec![running("app", "cri://1", wall(t0))]).await;
    run_for(secs(25)).await;
    let lines = metric_lines(&registry, "metrics-pod");
    let labels = "container=\"app\",namespace=\"default\",pod=\"metrics-pod\",pod_uid=\"uid-metrics-pod\",probe_type=\"Readiness\"";
    assert!(lines.contains(&format!("prober_probe_total{{{labels},result=\"successful\"}} 2")), "{lines:#?}");
    assert!(lines.contains(&format!("prober_probe_total{{{labels},result=\"failed\"}} 1")), "{lines:#?}");
    let duration = "container=\"app\",namespace=\"default\",pod=\"metrics-pod\",probe_type=\"Readiness\"";
    assert!(
        lines.contains(&format!("prober_probe_duration_seconds_count{{{duration}}} 2")),
        "failures observe no duration: {lines:#?}"
    );

    h.pipeline.remove_pod(pod.clone());
    h.wait_workers(0).await;
    assert_eq!(metric_lines(&registry, "metrics-pod"), Vec::<String>::new(), "series deleted on exit");
}

/// The worker-state query: what upstream's `TestResultRunOnLivenessCheckFailure` and
/// `TestOnHoldOnLivenessOrStartupCheckFailure` read from the worker's fields (`resultRun`,
/// `lastResult`, `onHold`, `containerID`), through `Pipeline::worker_state`.
#[actix::test]
async fn the_worker_state_query_shows_result_run_last_result_and_on_hold() {
    use probelet::prober::worker::ProbeKey;
    let (h, t0) = aged_harness().await;
    let pod = test_pod("state").container("app").with_probe("app", Liveness, probe(10, 1, 3)).build();
    let key = ProbeKey { pod_uid: "uid-state".into(), container_name: "app".into(), kind: Liveness };
    assert_eq!(h.pipeline.worker_state(key.clone()).await.unwrap(), None, "no worker yet");

    h.prober.always("app", Liveness, Step::Return(Success));
    h.sync(&pod, vec![running("app", "cri://1", wall(t0))]).await;
    settle().await;
    let state = h.pipeline.worker_state(key.clone()).await.unwrap().expect("a running worker");
    assert_eq!(state.container_id.as_ref().map(ToString::to_string).as_deref(), Some("cri://1"));
    assert_eq!((state.last_result, state.result_run, state.on_hold), (Success, 1, false));

    // Two failures: a run of two, below the threshold of three.
    h.prober.always("app", Liveness, Step::Return(Failure));
    run_for(secs(21)).await;
    let state = h.pipeline.worker_state(key.clone()).await.unwrap().unwrap();
    assert_eq!((state.last_result, state.result_run, state.on_hold), (Failure, 2, false));
    // The third reaches the threshold: Failure is set, the run starts over, and the worker
    // holds until a new container ID appears.
    run_for(secs(10)).await;
    let state = h.pipeline.worker_state(key.clone()).await.unwrap().unwrap();
    assert_eq!((state.last_result, state.result_run, state.on_hold), (Failure, 0, true));

    // A new container: no longer on hold.
    h.prober.always("app", Liveness, Step::Return(Success));
    h.sync(&pod, vec![running("app", "cri://2", wall(t0))]).await;
    run_for(secs(10)).await;
    let state = h.pipeline.worker_state(key.clone()).await.unwrap().unwrap();
    assert_eq!(state.container_id.as_ref().map(ToString::to_string).as_deref(), Some("cri://2"));
    assert!(!state.on_hold);

    h.pipeline.remove_pod(pod.clone());
    h.wait_workers(0).await;
    assert_eq!(h.pipeline.worker_state(key).await.unwrap(), None, "gone with its pod");
}

// === threads ===

/// docs/architecture.md, "Threads and time": a worker is a task any of the workers' threads
/// runs, so a thread held up (a probe that blocks it here; a CPU taken from under it on a
/// node) holds up no worker but the one it runs. With workers fixed to one thread each, as the
/// arbiters had them, about half of these pods would never probe again while it is held.
#[actix::test]
async fn a_worker_thread_held_up_holds_up_no_other_worker() {
    let prober = support::scripted::ScriptedProber::new();
    let hold = support::scripted::ThreadHold::new();
    prober.then("hold", Readiness, [Step::HoldThread(hold.clone())]);
    let h = Harness::start_threaded(prober, 2);
    let now = probelet::clock::Clock::now(&probelet::clock::TokioClock::new());

    let blocker = test_pod("blocker").container("hold").with_probe("hold", Readiness, probe(1, 1, 3)).build();
    h.sync(&blocker, vec![running("hold", "cri://hold", now)]).await;
    h.prober.until(|calls| calls.iter().any(|c| c.container == "hold")).await;

    let pods: Vec<_> = (0..8)
        .map(|i| {
            test_pod(&format!("free-{i}"))
                .container("app")
                .with_probe("app", Readiness, probe(1, 1, 3))
                .build()
        })
        .collect();
    for (i, pod) in pods.iter().enumerate() {
        h.sync(pod, vec![running("app", &format!("cri://app-{i}"), now)]).await;
    }
    let uids: Vec<String> = pods.iter().map(|p| p.metadata.uid.clone().unwrap()).collect();
    // Two probes each: the first (after the start-up jitter) and the one a period later.
    let every_pod_probed_twice = |calls: &[support::scripted::Call]| {
        uids.iter().all(|uid| calls.iter().filter(|c| c.pod_uid == *uid).count() >= 2)
    };
    let probed = tokio::time::timeout(secs(20), h.prober.until(every_pod_probed_twice)).await;
    let held = h.prober.calls_of("hold", Readiness).len();
    hold.release();
    assert!(probed.is_ok(), "some workers stopped probing while one thread was held: {:?}", h.prober.calls());
    assert_eq!(held, 1, "the held worker's probe was still running");
}

/// A pipeline dropped while its workers probe shuts their runtime down: the workers are
/// dropped mid-task, and the manager (which a host may keep) takes that as a stop, not a death
/// to restart from on a runtime that is gone.
#[actix::test]
async fn workers_dropped_with_their_pipeline_are_not_restarted() {
    let h = Harness::start_threaded(support::scripted::ScriptedProber::new(), 2);
    let now = probelet::clock::Clock::now(&probelet::clock::TokioClock::new());
    let pod = test_pod("dropped").container("app").with_probe("app", Readiness, probe(1, 1, 3)).build();
    h.sync(&pod, vec![running("app", "cri://app", now)]).await;
    h.prober.until(|calls| !calls.is_empty()).await;
    let manager = h.pipeline.prober_manager.clone();
    drop(h);

    // The workers are dropped on their runtime's own threads, which nothing here can await:
    // ask the manager until it has forgotten them (at once with the fix; never without it).
    let gone = async {
        loop {
            let workers = manager.send(probelet::prober::manager::GetWorkers).await.unwrap();
            if workers.is_empty() {
                return;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    };
    assert!(
        tokio::time::timeout(secs(10), gone).await.is_ok(),
        "the manager kept restarting the dropped worker"
    );
}

/// A host that reports a restarted container under its new ID at once (no terminated status
/// between, as `examples/embed_host.rs` does): the sync's trigger probes the cached, old
/// container, so the worker looks again at the status the sync stores and probes the new one at
/// once, rather than a full period later (README, "Deviations").
#[actix::test]
async fn a_container_replaced_under_a_new_id_is_probed_when_its_status_is_stored() {
    let (h, t0) = aged_harness().await;
    let pod = test_pod("swap").container("app").with_probe("app", Readiness, probe(10, 1, 3)).build();
    h.sync(&pod, vec![running("app", "cri://1", wall(t0))]).await;
    settle().await;
    assert_eq!(h.result(Readiness, "cri://1").await, Some(Success));

    h.sync(&pod, vec![running("app", "cri://2", wall(t0))]).await;
    run_for(secs(1)).await;
    let calls = h.prober.calls_of("app", Readiness);
    assert_eq!(calls.last().map(|c| c.container_id.to_string()).as_deref(), Some("cri://2"), "{calls:?}");
    assert_eq!(h.result(Readiness, "cri://2").await, Some(Success), "ready within a second, not a period");
    let ready = h.status(&pod).await.container_statuses.clone().unwrap()[0].ready;
    assert!(ready, "the stored status says so");
}
