//! The probe timing annotation (`probelet.dev/probe-timing`, docs/probe-timing.md) through the
//! whole pipeline under paused time with a scripted prober: millisecond periods, the readiness
//! start interval, millisecond initial delays and timeouts, and an invalid annotation falling
//! back to the seconds fields. One test runs the real prober against a loopback server that
//! never answers, on real time, to show the millisecond timeout reaches the executor.

// Test helpers may panic: a panic there is a failed assertion.
#![allow(clippy::unwrap_used)]

use probelet::status::probe_status::PodProbeStatus;
use probelet_test_support as support;

use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::core::v1::{Container, HTTPGetAction, PodStatus, Probe};
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use probelet::container::ContainerId;
use probelet::contracts::MemoryRecorder;
use probelet::local_runner::LocalCommandRunner;
use probelet::prober::timing::PROBE_TIMING_ANNOTATION;
use probelet::prober::{ProbeKind, ProbeResult, Prober};
use probelet::status::POD_READY;
use support::kubelet::{Harness, aged_harness, run_for, settle, wall};
use support::pods::{probe, running, test_pod};
use support::scripted::Step;
use tokio::time::Instant;

use ProbeKind::{Liveness, Readiness};
use ProbeResult::{Failure, Success};

fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}

/// `got` is `want`, give or take the millisecond tokio rounds timer deadlines up by.
#[track_caller]
fn assert_near(got: Duration, want: Duration, what: &str) {
    let diff = got.abs_diff(want);
    assert!(diff <= ms(2), "{what}: got {got:?}, want {want:?}");
}

/// The instants at which (container, kind) was probed, relative to `from`.
fn probe_times(h: &Harness, container: &str, kind: ProbeKind, from: Instant) -> Vec<Duration> {
    h.prober.calls_of(container, kind).iter().map(|c| c.at.saturating_duration_since(from)).collect()
}

#[actix::test]
async fn a_250_ms_readiness_period_probes_four_times_a_second() {
    let (h, t0) = aged_harness().await;
    let pod = test_pod("quarter")
        .container("app")
        .with_probe("app", Readiness, probe(10, 1, 3))
        .annotation(PROBE_TIMING_ANNOTATION, r#"{"app": {"readiness": {"periodMs": 250}}}"#)
        .build();
    let start = Instant::now();
    h.sync(&pod, vec![running("app", "cri://1", wall(t0))]).await;
    settle().await;
    run_for(ms(2100)).await;
    let times = probe_times(&h, "app", Readiness, start);
    assert_eq!(times.len(), 9, "0, 250, …, 2000 ms: {times:?}");
    for (i, t) in times.iter().enumerate() {
        assert_near(*t, ms(250 * i as u64), "fixed-rate schedule at 250 ms");
    }
    let in_first_second = times.iter().filter(|t| **t < ms(1000)).count();
    assert_eq!(in_first_second, 4, "{times:?}");
}

#[actix::test]
async fn start_interval_makes_a_container_ready_within_one_interval_then_probes_at_the_period() {
    let (h, t0) = aged_harness().await;
    // Two containers that turn healthy at t = 1.35 s: probes before then fail.
    let fast = "fast";
    let kubelet = "kubelet";
    let pod = test_pod("start-interval")
        .container(fast)
        .container(kubelet)
        .with_probe(fast, Readiness, probe(10, 1, 3))
        .with_probe(kubelet, Readiness, probe(10, 1, 3))
        .annotation(PROBE_TIMING_ANNOTATION, r#"{"fast": {"readiness": {"startIntervalMs": 100}}}"#)
        .build();
    // 0.0 … 1.3 s fail (14 probes), 1.4 s succeeds, and every later probe fails: a later failure
    // does not bring the start interval back.
    h.prober.then(fast, Readiness, std::iter::repeat_n(Step::Return(Failure), 14));
    h.prober.then(fast, Readiness, [Step::Return(Success)]);
    h.prober.always(fast, Readiness, Step::Return(Failure));
    // With the kubelet's semantics the probe at 0 s fails and the next is at 10 s.
    h.prober.then(kubelet, Readiness, [Step::Return(Failure)]);
    h.prober.always(kubelet, Readiness, Step::Return(Success));

    let start = Instant::now();
    let containers = vec![running(fast, "cri://fast", wall(t0)), running(kubelet, "cri://kubelet", wall(t0))];
    h.sync(&pod, containers).await;
    settle().await;

    run_for(ms(1350)).await;
    assert!(!h.container(&pod, fast).await.ready, "not ready before the first success");
    run_for(ms(100)).await; // t = 1.45 s
    assert!(h.container(&pod, fast).await.ready, "ready by 1.4 s");
    assert!(!h.container(&pod, kubelet).await.ready, "the kubelet's way waits for the 10 s probe");

    run_for(ms(23_500)).await; // t = 24.95 s
    let times = probe_times(&h, fast, Readiness, start);
    let want: Vec<Duration> = (0..15).map(|i| ms(100 * i)).chain([ms(11_400), ms(21_400)]).collect();
    assert_eq!(times.len(), want.len(), "{times:?}");
    for (got, want) in times.iter().zip(&want) {
        assert_near(*got, *want, "start interval, then the period from the first success");
    }
    assert!(h.container(&pod, kubelet).await.ready, "the kubelet's way: ready at 10 s");
    let kubelet_times = probe_times(&h, kubelet, Readiness, start);
    assert_eq!(kubelet_times.len(), 3, "{kubelet_times:?}");
    assert_near(kubelet_times[1], ms(10_000), "kubelet's second probe");
    assert_eq!(h.condition(&pod, POD_READY).await.status, "True");
}

#[actix::test]
async fn a_new_container_starts_the_start_interval_over() {
    let (h, t0) = aged_harness().await;
    let pod = test_pod("restart")
        .container("app")
        .with_probe("app", Readiness, probe(10, 1, 3))
        .annotation(PROBE_TIMING_ANNOTATION, r#"{"app": {"readiness": {"startIntervalMs": 100}}}"#)
        .build();
    h.prober.then("app", Readiness, [Step::Return(Success)]);
    h.prober.always("app", Readiness, Step::Return(Failure));
    h.sync(&pod, vec![running("app", "cri://1", wall(t0))]).await;
    settle().await;
    run_for(ms(1050)).await;
    assert_eq!(h.prober.calls_of("app", Readiness).len(), 1, "ready at once: on to the 10 s period");

    let restarted = Instant::now();
    h.sync(&pod, vec![running("app", "cri://2", wall(t0))]).await;
    settle().await;
    run_for(ms(1050)).await;
    let calls = h.prober.calls_of("app", Readiness);
    let new: Vec<Duration> = calls
        .iter()
        .filter(|c| c.container_id == ContainerId::parse("cri://2"))
        .map(|c| c.at.saturating_duration_since(restarted))
        .collect();
    assert_near(new[0], Duration::ZERO, "the new container is probed at once");
    let times = new;
    assert!(times.len() >= 10, "the new container is probed every 100 ms until ready: {times:?}");
    for pair in times.windows(2) {
        assert_near(pair[1] - pair[0], ms(100), "start interval");
    }
}

#[actix::test]
async fn initial_delay_in_milliseconds_holds_the_first_probe() {
    let (h, t0) = aged_harness().await;
    let pod = test_pod("delay")
        .container("app")
        .with_probe("app", Readiness, probe(10, 1, 3))
        .annotation(
            PROBE_TIMING_ANNOTATION,
            r#"{"app": {"readiness": {"periodMs": 250, "initialDelayMs": 600}}}"#,
        )
        .build();
    let start = Instant::now();
    h.sync(&pod, vec![running("app", "cri://1", wall(t0))]).await;
    settle().await;
    run_for(ms(1100)).await;
    let times = probe_times(&h, "app", Readiness, start);
    assert_eq!(times.len(), 2, "skipped at 0, 250 and 500 ms: {times:?}");
    assert_near(times[0], ms(750), "first probe after 600 ms");
}

#[actix::test]
async fn timeout_in_milliseconds_reaches_the_prober() {
    let (h, t0) = aged_harness().await;
    let pod = test_pod("timeout")
        .container("app")
        .container("plain")
        .with_probe("app", Liveness, probe(10, 1, 3))
        .with_probe("plain", Liveness, probe(10, 1, 3))
        .annotation(PROBE_TIMING_ANNOTATION, r#"{"app": {"liveness": {"timeoutMs": 150}}}"#)
        .build();
    h.sync(&pod, vec![running("app", "cri://1", wall(t0)), running("plain", "cri://2", wall(t0))]).await;
    settle().await;
    assert_eq!(h.prober.calls_of("app", Liveness)[0].timeout, ms(150));
    assert_eq!(h.prober.calls_of("plain", Liveness)[0].timeout, Duration::from_secs(1), "timeoutSeconds");
}

#[actix::test]
async fn an_invalid_annotation_probes_with_the_seconds_fields() {
    let (h, t0) = aged_harness().await;
    let pod = test_pod("invalid")
        .container("app")
        .with_probe("app", Readiness, probe(10, 1, 3))
        // Below the floor: the whole annotation is ignored by the engine (the host reports it).
        .annotation(PROBE_TIMING_ANNOTATION, r#"{"app": {"readiness": {"periodMs": 50}}}"#)
        .build();
    let start = Instant::now();
    h.sync(&pod, vec![running("app", "cri://1", wall(t0))]).await;
    settle().await;
    run_for(ms(15_000)).await;
    let times = probe_times(&h, "app", Readiness, start);
    assert_eq!(times.len(), 2, "{times:?}");
    assert_near(times[1], Duration::from_secs(10), "periodSeconds");
}

/// Real time: the real prober's HTTP probe against a loopback server that accepts and never
/// answers gives up after the millisecond timeout, not after `timeoutSeconds`.
#[actix::test]
async fn the_real_prober_times_out_after_the_millisecond_timeout() {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    let server = tokio::spawn(async move {
        let mut held = Vec::new();
        while let Ok((socket, _)) = listener.accept().await {
            held.push(socket);
        }
    });
    let container = Container {
        name: "app".into(),
        readiness_probe: Some(Probe {
            http_get: Some(HTTPGetAction {
                port: IntOrString::Int(i32::from(port)),
                path: Some("/".into()),
                ..Default::default()
            }),
            timeout_seconds: Some(5),
            ..Default::default()
        }),
        ..Default::default()
    };
    let pod = test_pod("real").build();
    let status = PodProbeStatus::from(&PodStatus { pod_ip: Some("127.0.0.1".into()), ..Default::default() });
    let prober = Prober::new(Arc::new(LocalCommandRunner::default()), Arc::new(MemoryRecorder::new()));
    let begun = Instant::now();
    let result = prober
        .probe_timed(Readiness, &pod, &status, &container, &ContainerId::parse("cri://1"), ms(100))
        .await;
    let took = begun.elapsed();
    server.abort();
    assert_eq!(result.unwrap(), Failure);
    assert!(took >= ms(100) && took < Duration::from_secs(2), "took {took:?}; timeoutSeconds is 5 s");
}
