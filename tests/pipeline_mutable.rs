//! `MutableContainerProbes` (KEP-6318, docs/prober.md §3.9) through the whole pipeline under
//! paused time with a scripted prober: one test per row of the KEP's table (period, initial
//! delay, threshold, handler, timeout, added, removed), the in-flight attempt of a replaced
//! handler, the event text, static and mirror pods, and the gate off.
//!
//! The kubelet's pod sync here is the harness's (`UpdatePodStatus`, conditions, `SetPodStatus`,
//! `AddPod`), preceded by `ReconcilePod` with the pod's new spec, as `Engine::sync_pod` does
//! under the gate.

// Test helpers may panic: a panic there is a failed assertion.
#![allow(clippy::unwrap_used)]

use probelet_test_support as support;

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use k8s_openapi::api::core::v1::{ExecAction, Pod, Probe};
use probelet::prober::worker::ProbeKey;
use probelet::prober::{ProbeKind, ProbeResult};
use probelet::{Feature, FeatureGates};
use support::kubelet::{Harness, advance, run_for, settle, wall};
use support::pods::{probe, running, test_pod};
use support::scripted::{ScriptedProber, Step};
use tokio::time::Instant;

use ProbeKind::{Liveness, Readiness, Startup};
use ProbeResult::{Failure, Success};

const ID: &str = "cri://1";

fn secs(n: u64) -> Duration {
    Duration::from_secs(n)
}

/// A harness with `MutableContainerProbes` set to `on`, aged past one period (no start-up
/// jitter), and the instant its wall clock started at.
async fn harness(on: bool) -> (Harness, Instant) {
    tokio::time::pause();
    let t0 = Instant::now();
    let gates = FeatureGates::default().with(Feature::MutableContainerProbes, on).unwrap();
    let h = Harness::start_gated(ScriptedProber::new(), gates);
    h.worker_count().await;
    advance(secs(11)).await;
    (h, t0)
}

/// The kubelet's sync of an updated pod: `ReconcilePod`, then the status sync.
async fn update(h: &Harness, pod: &Arc<Pod>, t0: Instant) {
    h.pipeline.reconcile_pod(pod.clone());
    settle().await;
    h.sync(pod, vec![running("app", ID, wall(t0) - secs(1))]).await;
    settle().await;
}

/// `got` is `want`, give or take the millisecond tokio rounds timer deadlines up by.
#[track_caller]
fn assert_near(got: Duration, want: Duration, what: &str) {
    let diff = got.abs_diff(want);
    assert!(diff <= Duration::from_millis(2), "{what}: got {got:?}, want {want:?}");
}

fn probe_times(h: &Harness, kind: ProbeKind, from: Instant) -> Vec<Duration> {
    h.prober.calls_of("app", kind).iter().map(|c| c.at.saturating_duration_since(from)).collect()
}

fn key(kind: ProbeKind, pod: &str) -> ProbeKey {
    ProbeKey { pod_uid: format!("uid-{pod}").into(), container_name: "app".into(), kind }
}

fn pod_with(name: &str, kind: ProbeKind, p: Probe) -> Arc<Pod> {
    test_pod(name).container("app").with_probe("app", kind, p).build()
}

fn changed_events(h: &Harness) -> Vec<String> {
    h.recorder.rendered().into_iter().filter(|e| e.contains("ContainerProbeChanged")).collect()
}

// === period ===

#[actix::test]
async fn period_change_keeps_the_count_and_runs_next_at_last_completion_plus_new_period() {
    let (h, t0) = harness(true).await;
    h.prober.always("app", Liveness, Step::Return(Failure));
    let pod = pod_with("period", Liveness, probe(10, 1, 3));
    let start = Instant::now();
    h.sync(&pod, vec![running("app", ID, wall(t0))]).await;
    run_for(secs(12)).await; // failures at 0 and 10: a run of 2
    assert_eq!(h.result(Liveness, ID).await, Some(Success));

    update(&h, &pod_with("period", Liveness, probe(5, 1, 3)), t0).await;
    run_for(secs(4)).await;
    let times = probe_times(&h, Liveness, start);
    assert_eq!(times.len(), 3, "{times:?}");
    assert_near(times[2], secs(15), "last completion (10 s) + the new period");
    // The run of 2 was kept: the third failure reaches the threshold.
    assert_eq!(h.result(Liveness, ID).await, Some(Failure));
    let state = h.pipeline.worker_state(key(Liveness, "period")).await.unwrap();
    assert!(state.is_some_and(|s| s.on_hold), "the liveness failure put the worker on hold");
}

#[actix::test]
async fn period_change_past_due_runs_at_once() {
    let (h, t0) = harness(true).await;
    let pod = pod_with("due", Readiness, probe(10, 1, 3));
    let start = Instant::now();
    h.sync(&pod, vec![running("app", ID, wall(t0))]).await;
    run_for(secs(7)).await;
    update(&h, &pod_with("due", Readiness, probe(3, 1, 3)), t0).await;
    settle().await;
    let times = probe_times(&h, Readiness, start);
    assert_eq!(times.len(), 2, "0 s + 3 s is past: the next probe runs at once: {times:?}");
    assert_near(times[1], secs(7), "at once");
    run_for(secs(4)).await;
    let times = probe_times(&h, Readiness, start);
    assert_near(times[2], secs(10), "then every new period");
    assert!(h.container(&pod, "app").await.ready, "the status was kept");
}

// === during the start-up jitter ===

/// A young manager: the first probe of a 300 s probe waits a random part of 300 s (seeded:
/// more than a few seconds here).
async fn young_harness() -> (Harness, Instant) {
    tokio::time::pause();
    let t0 = Instant::now();
    let gates = FeatureGates::default().with(Feature::MutableContainerProbes, true).unwrap();
    let h = Harness::start_gated(ScriptedProber::new(), gates);
    h.worker_count().await;
    (h, t0)
}

/// A new handler while the worker waits out its start-up jitter (drawn from the old period):
/// it probes at once, as after the jitter, rather than at the end of the old jitter.
#[actix::test]
async fn a_handler_change_during_the_start_up_jitter_probes_at_once() {
    let (h, t0) = young_harness().await;
    let pod = pod_with("jitter-handler", Readiness, probe(300, 1, 1));
    let start = Instant::now();
    h.sync(&pod, vec![running("app", ID, wall(t0))]).await;
    run_for(secs(3)).await;
    assert!(probe_times(&h, Readiness, start).is_empty(), "still in the jitter");
    let other =
        Probe { exec: Some(ExecAction { command: Some(vec!["/bin/ok".into()]) }), ..probe(300, 1, 1) };
    update(&h, &pod_with("jitter-handler", Readiness, other), t0).await;
    let times = probe_times(&h, Readiness, start);
    assert_eq!(times.len(), 1, "{times:?}");
    assert_near(times[0], secs(3), "at once");
}

/// A shorter period while the worker waits out its start-up jitter: the first probe comes
/// within one new period, not at the end of a jitter drawn from the old one.
#[actix::test]
async fn a_shorter_period_during_the_start_up_jitter_probes_within_the_new_period() {
    let (h, t0) = young_harness().await;
    let pod = pod_with("jitter-period", Readiness, probe(300, 1, 1));
    let start = Instant::now();
    h.sync(&pod, vec![running("app", ID, wall(t0))]).await;
    run_for(secs(3)).await;
    assert!(probe_times(&h, Readiness, start).is_empty(), "still in the jitter");
    update(&h, &pod_with("jitter-period", Readiness, probe(2, 1, 1)), t0).await;
    run_for(secs(2)).await;
    let times = probe_times(&h, Readiness, start);
    assert!(!times.is_empty(), "a probe within the new period");
    assert!(times[0] <= secs(5) + Duration::from_millis(2), "{times:?}");
}

/// A manual trigger while the worker waits out its start-up jitter (the next sync finds no
/// readiness result): upstream's newer worker makes the first probe due now, where the gate-off
/// worker keeps the trigger until after the first probe
/// (`pipeline_worker::a_trigger_during_the_jitter_probes_again_right_after_the_first_probe`).
#[actix::test]
async fn a_trigger_during_the_start_up_jitter_probes_at_once() {
    let (h, t0) = young_harness().await;
    let pod = pod_with("jitter-trigger", Readiness, probe(300, 1, 1));
    let start = Instant::now();
    h.sync(&pod, vec![running("app", ID, wall(t0))]).await;
    run_for(secs(3)).await;
    assert!(probe_times(&h, Readiness, start).is_empty(), "still in the jitter");
    h.sync(&pod, vec![running("app", ID, wall(t0))]).await;
    settle().await;
    let times = probe_times(&h, Readiness, start);
    assert_eq!(times.len(), 1, "{times:?}");
    assert_near(times[0], secs(3), "at once");
    run_for(secs(299)).await;
    assert_eq!(probe_times(&h, Readiness, start).len(), 1, "the next a period after it");
}

// === initial delay ===

#[actix::test]
async fn initial_delay_change_has_no_effect_once_the_container_was_probed() {
    let (h, t0) = harness(true).await;
    let pod = pod_with("delay-probed", Readiness, probe(10, 1, 3));
    let start = Instant::now();
    h.sync(&pod, vec![running("app", ID, wall(t0))]).await;
    settle().await;
    let delayed = Probe { initial_delay_seconds: Some(60), ..probe(10, 1, 3) };
    update(&h, &pod_with("delay-probed", Readiness, delayed), t0).await;
    run_for(secs(25)).await;
    assert_eq!(probe_times(&h, Readiness, start).len(), 3, "probes at 0, 10, 20 go on");
}

#[actix::test]
async fn initial_delay_change_applies_before_the_first_probe() {
    let (h, t0) = harness(true).await;
    let late = Probe { initial_delay_seconds: Some(30), ..probe(10, 1, 3) };
    let pod = pod_with("delay-first", Readiness, late);
    let start = Instant::now();
    let started = wall(t0);
    h.sync(&pod, vec![running("app", ID, started)]).await;
    settle().await;
    assert!(probe_times(&h, Readiness, start).is_empty(), "held back by the 30 s delay");
    let sooner = Probe { initial_delay_seconds: Some(5), ..probe(10, 1, 3) };
    let pod = pod_with("delay-first", Readiness, sooner);
    h.pipeline.reconcile_pod(pod.clone());
    settle().await;
    h.sync(&pod, vec![running("app", ID, started)]).await;
    run_for(secs(12)).await;
    let times = probe_times(&h, Readiness, start);
    assert_eq!(times.len(), 1, "{times:?}");
    // The delay counts on the pipeline's wall clock, a few paused milliseconds off the test's.
    assert!(times[0].abs_diff(secs(5)) < Duration::from_millis(20), "as the new 5 s delay ends: {times:?}");
}

/// A new period and a new initial delay together, before the first probe: the first probe
/// still comes as the new delay ends (upstream's `nextRunLocked`: the delay's end before the
/// first probe, whatever changed), not a new period on.
#[actix::test]
async fn a_period_and_initial_delay_change_before_the_first_probe_follows_the_delay() {
    let (h, t0) = harness(true).await;
    let late = Probe { initial_delay_seconds: Some(30), ..probe(10, 1, 3) };
    let pod = pod_with("delay-period", Liveness, late);
    let start = Instant::now();
    let started = wall(t0);
    h.sync(&pod, vec![running("app", ID, started)]).await;
    settle().await;
    assert!(probe_times(&h, Liveness, start).is_empty(), "held back by the 30 s delay");
    let sooner = Probe { initial_delay_seconds: Some(5), ..probe(20, 1, 3) };
    let pod = pod_with("delay-period", Liveness, sooner);
    h.pipeline.reconcile_pod(pod.clone());
    settle().await;
    h.sync(&pod, vec![running("app", ID, started)]).await;
    run_for(secs(12)).await;
    let times = probe_times(&h, Liveness, start);
    assert_eq!(times.len(), 1, "{times:?}");
    assert!(times[0].abs_diff(secs(5)) < Duration::from_millis(20), "as the new 5 s delay ends: {times:?}");
}

/// Upstream's newer worker re-arms its timer for the end of the initial delay; the older one
/// probes at the first tick past it.
async fn first_probe_after_a_delay(on: bool) -> Duration {
    let (h, t0) = harness(on).await;
    let delayed = Probe { initial_delay_seconds: Some(5), ..probe(10, 1, 3) };
    let pod = pod_with("delay-end", Readiness, delayed);
    let start = Instant::now();
    h.sync(&pod, vec![running("app", ID, wall(t0))]).await;
    run_for(secs(12)).await;
    let times = probe_times(&h, Readiness, start);
    assert_eq!(times.len(), 1, "gate {on}: {times:?}");
    times[0]
}

#[actix::test]
async fn the_first_probe_comes_as_the_initial_delay_ends() {
    let first = first_probe_after_a_delay(true).await;
    assert!(first.abs_diff(secs(5)) < Duration::from_millis(20), "{first:?}");
}

#[actix::test]
async fn gate_off_the_first_probe_comes_at_the_first_tick_past_the_initial_delay() {
    assert_near(first_probe_after_a_delay(false).await, secs(10), "the tick at 10 s");
}

// === thresholds ===

#[actix::test]
async fn threshold_change_resets_the_run_count_and_keeps_the_status() {
    let (h, t0) = harness(true).await;
    h.prober.always("app", Liveness, Step::Return(Failure));
    let pod = pod_with("threshold", Liveness, probe(10, 1, 3));
    h.sync(&pod, vec![running("app", ID, wall(t0))]).await;
    run_for(secs(12)).await; // failures at 0 and 10
    update(&h, &pod_with("threshold", Liveness, probe(10, 1, 2)), t0).await;
    assert_eq!(h.result(Liveness, ID).await, Some(Success), "the published result stays");
    let state = h.pipeline.worker_state(key(Liveness, "threshold")).await.unwrap().unwrap();
    assert_eq!(state.result_run, 0);
    run_for(secs(9)).await; // the failure at 20 is the first of the new run
    assert_eq!(h.result(Liveness, ID).await, Some(Success), "one failure is below the new threshold of 2");
    run_for(secs(10)).await; // and the one at 30 the second
    assert_eq!(h.result(Liveness, ID).await, Some(Failure));
}

/// Under the gate, `ReconcilePod` of a pod being deleted or finished starts no worker and
/// changes none (upstream's early return); without it, it is `AddPod`.
async fn workers_after_reconciling_a_deleting_pod(on: bool) -> usize {
    let (h, _t0) = harness(on).await;
    let pod = test_pod("deleting")
        .container("app")
        .with_probe("app", Readiness, probe(10, 1, 3))
        .deleting()
        .build();
    h.pipeline.reconcile_pod(pod);
    settle().await;
    h.pipeline.workers().await.unwrap().len()
}

#[actix::test]
async fn a_pod_being_deleted_is_not_reconciled() {
    assert_eq!(workers_after_reconciling_a_deleting_pod(true).await, 0);
}

#[actix::test]
async fn gate_off_a_pod_being_deleted_is_added() {
    assert_eq!(workers_after_reconciling_a_deleting_pod(false).await, 1);
}

// === the newer worker's schedule and runs ===

/// Upstream's worker under the gate schedules each probe a period after the last one ended
/// (its `feature_gate_test.go` pins 10 s + a 3 s probe = 13 s); the older worker keeps a
/// fixed-rate grid (10 s).
async fn probes_of_3_s_every_10_s(on: bool) -> Vec<Duration> {
    let (h, t0) = harness(on).await;
    h.prober.always("app", Readiness, Step::Slow(secs(3), Success));
    let pod = pod_with("completion", Readiness, probe(10, 1, 3));
    let start = Instant::now();
    h.sync(&pod, vec![running("app", ID, wall(t0))]).await;
    run_for(secs(29)).await;
    let times = probe_times(&h, Readiness, start);
    assert_eq!(times.len(), 3, "gate {on}: {times:?}");
    times.windows(2).map(|w| w[1] - w[0]).collect()
}

#[actix::test]
async fn each_probe_is_due_a_period_after_the_last_one_ended() {
    for apart in probes_of_3_s_every_10_s(true).await {
        assert_near(apart, secs(13), "10 s after the 3 s probe ended");
    }
}

#[actix::test]
async fn gate_off_probes_keep_a_fixed_rate() {
    for apart in probes_of_3_s_every_10_s(false).await {
        assert_near(apart, secs(10), "the grid");
    }
}

/// A restarted container starts its run of results over under the gate (upstream's newer
/// worker resets it when it observes a new container ID); the older worker carries it over.
async fn ready_after_two_successes_then_one_on_a_new_container(on: bool) -> bool {
    let (h, t0) = harness(on).await;
    let pod = pod_with("new-run", Readiness, probe(10, 3, 3));
    h.sync(&pod, vec![running("app", ID, wall(t0))]).await;
    run_for(secs(12)).await; // successes at 0 and 10: a run of 2, below 3
    assert!(!h.container(&pod, "app").await.ready, "gate {on}");
    // The new container has no readiness result: the sync triggers its first probe at once.
    h.sync(&pod, vec![running("app", "cri://2", wall(t0))]).await;
    settle().await;
    let on_new = h
        .prober
        .calls_of("app", Readiness)
        .iter()
        .filter(|c| c.container_id.to_string() == "cri://2")
        .count();
    assert_eq!(on_new, 1, "gate {on}: one success on the new container");
    h.resync(&pod).await;
    h.container(&pod, "app").await.ready
}

#[actix::test]
async fn a_new_container_starts_its_run_over() {
    assert!(!ready_after_two_successes_then_one_on_a_new_container(true).await, "a run of 1, below 3");
}

#[actix::test]
async fn gate_off_a_new_container_carries_the_run_over() {
    assert!(ready_after_two_successes_then_one_on_a_new_container(false).await, "a run of 3 (§8.18)");
}

/// The container restarts while its liveness probe (3 s) runs: under the gate the new
/// container's first probe comes as the old probe ends (upstream's newer worker makes it due
/// now); the older worker waits for its next tick, a period on.
async fn first_liveness_probe_of_a_container_replaced_mid_probe(on: bool) -> Duration {
    let (h, t0) = harness(on).await;
    h.prober.always("app", Liveness, Step::Slow(secs(3), Success));
    let pod = pod_with("replaced", Liveness, probe(10, 1, 3));
    let start = Instant::now();
    h.sync(&pod, vec![running("app", ID, wall(t0))]).await;
    run_for(secs(1)).await;
    h.sync(&pod, vec![running("app", "cri://2", wall(t0))]).await;
    run_for(secs(15)).await;
    let calls = h.prober.calls_of("app", Liveness);
    let new = calls.iter().find(|c| c.container_id.to_string() == "cri://2");
    new.map(|c| c.at.saturating_duration_since(start)).expect("the new container probed")
}

#[actix::test]
async fn a_container_replaced_mid_probe_is_probed_as_the_probe_ends() {
    assert_near(first_liveness_probe_of_a_container_replaced_mid_probe(true).await, secs(3), "at once");
}

#[actix::test]
async fn gate_off_a_container_replaced_mid_probe_waits_for_the_next_tick() {
    assert_near(first_liveness_probe_of_a_container_replaced_mid_probe(false).await, secs(10), "the grid");
}

// === handler and timeout ===

#[actix::test]
async fn handler_change_invalidates_the_in_flight_attempt_and_runs_the_new_probe_at_once() {
    let (h, t0) = harness(true).await;
    h.prober.then("app", Readiness, [Step::Return(Success), Step::Slow(secs(5), Failure)]);
    h.prober.always("app", Readiness, Step::Return(Success));
    let pod = pod_with("handler", Readiness, probe(10, 1, 1));
    let start = Instant::now();
    let log = h.result_log();
    h.sync(&pod, vec![running("app", ID, wall(t0))]).await;
    run_for(secs(12)).await; // the probe of 10 s is in flight until 15 s, and would fail
    let before = log.send(support::kubelet::DrainLog).await.unwrap();
    assert_eq!(before.last().map(|c| c.result), Some(Success), "{before:?}");
    let other = Probe { exec: Some(ExecAction { command: Some(vec!["/bin/ok".into()]) }), ..probe(10, 1, 1) };
    update(&h, &pod_with("handler", Readiness, other), t0).await;
    let times = probe_times(&h, Readiness, start);
    assert_eq!(times.len(), 3, "{times:?}");
    assert_near(times[2], secs(12), "the new handler runs at once");
    assert!(h.prober.dropped.load(Ordering::SeqCst), "the attempt in flight was cancelled");
    run_for(secs(6)).await; // past the moment the old attempt would have answered
    assert_eq!(h.result(Readiness, ID).await, Some(Success));
    let changes = log.send(support::kubelet::DrainLog).await.unwrap();
    assert!(
        changes.iter().all(|c| c.result != Failure),
        "the old attempt's failure was never applied: {changes:?}"
    );
    assert!(h.resync(&pod).await.container_statuses.clone().unwrap()[0].ready);
    run_for(secs(5)).await;
    let next = probe_times(&h, Readiness, start);
    assert_near(next[3], secs(22), "the schedule restarted from the new probe");
}

#[actix::test]
async fn timeout_change_resets_the_count_and_probes_at_once_with_the_new_timeout() {
    let (h, t0) = harness(true).await;
    h.prober.always("app", Liveness, Step::Return(Failure));
    let pod = pod_with("timeout", Liveness, probe(10, 1, 3));
    let start = Instant::now();
    h.sync(&pod, vec![running("app", ID, wall(t0))]).await;
    run_for(secs(12)).await; // failures at 0 and 10
    let longer = Probe { timeout_seconds: Some(4), ..probe(10, 1, 3) };
    update(&h, &pod_with("timeout", Liveness, longer), t0).await;
    let calls = h.prober.calls_of("app", Liveness);
    assert_eq!(calls.len(), 3);
    assert_near(calls[2].at - start, secs(12), "at once");
    assert_eq!(calls[2].timeout, secs(4));
    // Without the reset this third failure would have reached the threshold of 3.
    assert_eq!(h.result(Liveness, ID).await, Some(Success));
    let state = h.pipeline.worker_state(key(Liveness, "timeout")).await.unwrap().unwrap();
    assert_eq!(state.result_run, 1);
}

// === added and removed ===

#[actix::test]
async fn added_readiness_probe_starts_not_ready_and_added_liveness_starts_successful() {
    let (h, t0) = harness(true).await;
    h.prober.always("app", Readiness, Step::Slow(secs(30), Success));
    h.prober.always("app", Liveness, Step::Slow(secs(30), Failure));
    let pod = test_pod("added").container("app").build();
    h.sync(&pod, vec![running("app", ID, wall(t0))]).await;
    assert!(h.container(&pod, "app").await.ready, "no probe: ready");
    let pod = test_pod("added")
        .container("app")
        .with_probe("app", Readiness, probe(10, 1, 3))
        .with_probe("app", Liveness, probe(10, 1, 3))
        .build();
    update(&h, &pod, t0).await;
    assert_eq!(h.worker_count().await, 2);
    assert_eq!(h.result(Readiness, ID).await, Some(Failure), "readiness starts at Failure");
    assert_eq!(h.result(Liveness, ID).await, Some(Success), "liveness starts at Success");
    assert!(!h.resync(&pod).await.container_statuses.clone().unwrap()[0].ready);
}

#[actix::test]
async fn removed_readiness_probe_is_discarded_and_the_container_becomes_ready() {
    let (h, t0) = harness(true).await;
    h.prober.always("app", Readiness, Step::Return(Failure));
    let pod = pod_with("removed", Readiness, probe(10, 1, 1));
    h.sync(&pod, vec![running("app", ID, wall(t0))]).await;
    run_for(secs(1)).await;
    assert!(!h.resync(&pod).await.container_statuses.clone().unwrap()[0].ready);
    let pod = test_pod("removed").container("app").build();
    update(&h, &pod, t0).await;
    h.wait_workers(0).await;
    assert!(h.container(&pod, "app").await.ready, "as if it never had a readiness probe");
    assert_eq!(h.result(Readiness, ID).await, None, "its cached result is gone");
    let before = h.prober.calls_of("app", Readiness).len();
    run_for(secs(30)).await;
    assert_eq!(h.prober.calls_of("app", Readiness).len(), before, "probing stopped");
}

#[actix::test]
async fn removed_startup_probe_makes_the_container_started_at_once() {
    let (h, t0) = harness(true).await;
    h.prober.always("app", Startup, Step::Slow(secs(100), Failure));
    let pod = test_pod("unstarted")
        .container("app")
        .with_probe("app", Startup, probe(10, 1, 30))
        .with_probe("app", Readiness, probe(10, 1, 3))
        .build();
    h.sync(&pod, vec![running("app", ID, wall(t0))]).await;
    run_for(secs(1)).await;
    let cs = h.resync(&pod).await.container_statuses.clone().unwrap()[0].clone();
    assert_eq!(cs.started, Some(false));
    let pod = test_pod("unstarted").container("app").with_probe("app", Readiness, probe(10, 1, 3)).build();
    h.pipeline.reconcile_pod(pod.clone());
    settle().await;
    // The status generated right after the update, before the old worker's exit removed its
    // cached Unknown, already counts the container as started.
    let cs =
        h.sync(&pod, vec![running("app", ID, wall(t0) - secs(1))]).await.container_statuses.clone().unwrap();
    assert_eq!(cs[0].started, Some(true));
    settle().await;
    assert_eq!(h.result(Startup, ID).await, None);
    run_for(secs(11)).await;
    assert!(!h.prober.calls_of("app", Readiness).is_empty(), "readiness probing proceeds");
}

// === events ===

#[actix::test]
async fn container_probe_changed_events_name_the_container_probe_and_change() {
    let (h, t0) = harness(true).await;
    let pod = pod_with("events", Readiness, probe(10, 1, 3));
    h.sync(&pod, vec![running("app", ID, wall(t0))]).await;
    assert!(changed_events(&h).is_empty(), "the pod's first sync is no change");
    update(&h, &pod_with("events", Readiness, probe(5, 1, 7)), t0).await;
    let pod = test_pod("events")
        .container("app")
        .with_probe("app", Readiness, probe(5, 1, 7))
        .with_probe("app", Liveness, probe(10, 1, 3))
        .build();
    update(&h, &pod, t0).await;
    update(&h, &pod_with("events", Liveness, probe(10, 1, 3)), t0).await;
    update(&h, &pod_with("events", Liveness, probe(10, 1, 3)), t0).await;
    assert_eq!(
        changed_events(&h),
        [
            "Normal ContainerProbeChanged Readiness probe of container app updated: periodSeconds, failureThreshold",
            "Normal ContainerProbeChanged Liveness probe of container app added",
            "Normal ContainerProbeChanged Readiness probe of container app removed",
        ]
    );
    let event = h.recorder.events().into_iter().find(|e| e.reason == "ContainerProbeChanged").unwrap();
    assert_eq!(event.object.field_path.as_deref(), Some("spec.containers{app}"));
    assert_eq!(event.object.name.as_deref(), Some("events"));
}

// === exclusions ===

async fn assert_not_applied(h: &Harness, t0: Instant, pod: Arc<Pod>, updated: Arc<Pod>) {
    let start = Instant::now();
    h.sync(&pod, vec![running("app", ID, wall(t0))]).await;
    settle().await;
    update(h, &updated, t0).await;
    run_for(secs(25)).await;
    let times = probe_times(h, Readiness, start);
    assert_eq!(times.len(), 3, "{times:?}");
    assert_near(times[1], secs(10), "the old period goes on");
    assert!(changed_events(h).is_empty(), "{:?}", changed_events(h));
    let state = h.pipeline.worker_state(key(Readiness, pod.metadata.name.as_deref().unwrap())).await.unwrap();
    assert!(state.is_some(), "the worker keeps running");
}

#[actix::test]
async fn static_pods_are_excluded() {
    let (h, t0) = harness(true).await;
    let build = |period| {
        test_pod("static")
            .container("app")
            .with_probe("app", Readiness, probe(period, 1, 3))
            .annotation("kubernetes.io/config.source", "file")
            .build()
    };
    assert_not_applied(&h, t0, build(10), build(3)).await;
}

#[actix::test]
async fn mirror_pods_are_excluded() {
    let (h, t0) = harness(true).await;
    let build = |period| {
        test_pod("mirror")
            .container("app")
            .with_probe("app", Readiness, probe(period, 1, 3))
            .annotation("kubernetes.io/config.source", "api")
            .annotation("kubernetes.io/config.mirror", "abc123")
            .build()
    };
    assert_not_applied(&h, t0, build(10), build(3)).await;
}

#[actix::test]
async fn gate_off_applies_no_change() {
    let (h, t0) = harness(false).await;
    assert_not_applied(
        &h,
        t0,
        pod_with("off", Readiness, probe(10, 1, 3)),
        pod_with("off", Readiness, probe(3, 1, 3)),
    )
    .await;
}

#[actix::test]
async fn gate_off_keeps_a_removed_probe_running() {
    let (h, t0) = harness(false).await;
    let pod = pod_with("off-removed", Readiness, probe(10, 1, 3));
    h.sync(&pod, vec![running("app", ID, wall(t0))]).await;
    settle().await;
    update(&h, &test_pod("off-removed").container("app").build(), t0).await;
    run_for(secs(1)).await;
    assert_eq!(h.worker_count().await, 1, "the worker keeps the probe it was created with");
    assert!(changed_events(&h).is_empty());
}

#[actix::test]
async fn a_worker_that_stopped_by_itself_is_recreated_without_an_added_event() {
    let (h, _t0) = harness(true).await;
    let pod = test_pod("exited")
        .container("app")
        .with_probe("app", Readiness, probe(10, 1, 3))
        .restart_policy("Never")
        .build();
    h.sync(&pod, vec![support::pods::terminated("app", ID, 0)]).await;
    h.wait_workers(0).await; // a terminated container of a Never pod: the worker stops itself
    h.pipeline.reconcile_pod(pod.clone());
    settle().await;
    assert!(changed_events(&h).is_empty(), "the spec did not change: {:?}", changed_events(&h));
}

// === the engine ===

/// `Engine::sync_pod` reconciles under the gate (an event for the added probe) and adds
/// workers as before without it (no event). The containers wait, so nothing is probed.
#[actix::test]
async fn engine_sync_pod_reconciles_the_pods_probes_under_the_gate() {
    tokio::time::pause();
    for on in [true, false] {
        let pods = probelet::contracts::PodRegistry::new();
        let recorder = probelet::contracts::MemoryRecorder::new();
        let gates = FeatureGates::default().with(Feature::MutableContainerProbes, on).unwrap();
        let engine = probelet::Engine::builder(Arc::new(pods.clone()))
            .clock(Arc::new(probelet::clock::TokioClock::starting_at(support::kubelet::epoch())))
            .recorder(Arc::new(recorder.clone()))
            .feature_gates(gates)
            .start();
        let runtime = || k8s_openapi::api::core::v1::PodStatus {
            phase: Some("Pending".into()),
            container_statuses: Some(vec![support::pods::waiting("app")]),
            ..Default::default()
        };
        let pod = pod_with("engine", Readiness, probe(10, 1, 3));
        pods.upsert(pod.clone());
        engine.sync_pod(pod, runtime()).await.unwrap();
        let pod = test_pod("engine")
            .container("app")
            .with_probe("app", Readiness, probe(10, 1, 3))
            .with_probe("app", Liveness, probe(10, 1, 3))
            .build();
        pods.upsert(pod.clone());
        engine.sync_pod(pod, runtime()).await.unwrap();
        settle().await;
        assert_eq!(engine.pipeline().workers().await.unwrap().len(), 2, "gate {on}");
        let events: Vec<String> =
            recorder.rendered().into_iter().filter(|e| e.contains("ContainerProbeChanged")).collect();
        let want: Vec<String> = if on {
            vec!["Normal ContainerProbeChanged Liveness probe of container app added".into()]
        } else {
            Vec::new()
        };
        assert_eq!(events, want, "gate {on}");
    }
}

// === with ContainerLifecycleProber ===

/// Both gates: a readiness probe added to a container whose startup probe has already
/// succeeded starts at once (no `StartupSucceeded` will come again to start it).
#[actix::test]
async fn with_container_lifecycle_prober_an_added_probe_of_a_started_container_runs() {
    tokio::time::pause();
    let t0 = Instant::now();
    let gates = FeatureGates::default()
        .with(Feature::MutableContainerProbes, true)
        .and_then(|g| g.with(Feature::ContainerLifecycleProber, true))
        .unwrap();
    let h = Harness::start_gated(ScriptedProber::new(), gates);
    h.worker_count().await;
    advance(secs(11)).await;
    let pod = pod_with("both", Startup, probe(10, 1, 3));
    h.sync(&pod, vec![running("app", ID, wall(t0))]).await;
    let container = Arc::new(pod.spec.as_ref().unwrap().containers[0].clone());
    h.pipeline.start_container_probes(
        pod.clone(),
        container,
        probelet::container::ContainerId::parse(ID),
        None,
        None,
    );
    advance(secs(1)).await;
    assert_eq!(h.result(Startup, ID).await, Some(Success), "started");

    let pod = test_pod("both")
        .container("app")
        .with_probe("app", Startup, probe(10, 1, 3))
        .with_probe("app", Readiness, probe(10, 1, 3))
        .build();
    h.pipeline.reconcile_pod(pod.clone());
    settle().await;
    let workers = h.pipeline.list_workers().await.unwrap();
    let readiness = workers.iter().find(|w| w.key.kind == Readiness).expect("a readiness worker");
    assert!(readiness.running, "{readiness:?}");
    assert_eq!(readiness.container_id.as_ref().map(ToString::to_string).as_deref(), Some(ID));
    assert!(!h.prober.calls_of("app", Readiness).is_empty(), "and probes");
}

#[actix::test]
async fn a_removed_probes_in_flight_result_is_never_applied() {
    let (h, t0) = harness(true).await;
    h.prober.then("app", Readiness, [Step::Slow(secs(5), Success)]);
    let log = h.result_log();
    let pod = pod_with("removed-in-flight", Readiness, probe(10, 1, 1));
    h.sync(&pod, vec![running("app", ID, wall(t0))]).await;
    run_for(secs(1)).await; // the first probe is in flight until 5 s
    update(&h, &test_pod("removed-in-flight").container("app").build(), t0).await;
    run_for(secs(10)).await;
    assert!(h.prober.dropped.load(Ordering::SeqCst), "the attempt in flight was cancelled");
    let changes = log.send(support::kubelet::DrainLog).await.unwrap();
    assert!(changes.iter().all(|c| c.result != Success), "its success never reached the cache: {changes:?}");
    assert_eq!(h.result(Readiness, ID).await, None);
}

#[actix::test]
async fn an_in_place_update_leaves_no_reference_to_the_old_pod() {
    // docs/memory.md: the engine holds the host's pod, never a copy; after an in-place probe
    // update the worker and its metric labels hold the new one, so the old pod is freed.
    let (h, t0) = harness(true).await;
    let pod = pod_with("old", Readiness, probe(10, 1, 3));
    h.sync(&pod, vec![running("app", ID, wall(t0))]).await;
    run_for(secs(1)).await;
    let updated = pod_with("old", Readiness, probe(5, 1, 3));
    update(&h, &updated, t0).await;
    run_for(secs(6)).await;
    assert!(h.prober.calls_of("app", Readiness).len() >= 2, "probed again under the new spec");
    assert_eq!(Arc::strong_count(&pod), 1, "nothing holds the old pod");
}
