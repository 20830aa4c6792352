//! The Prometheus registry: exact text of each metric kind, histogram buckets, forgetting series
//! by partial labels, escaping, the process-global recorder and concurrent recording.
//!
//! Tests in this binary run in parallel and share the global recorder: tests that use it pick
//! label values no other test uses and only look at their own lines of the render.

use std::sync::Arc;

use probelet_actors::metrics::{
    self, DEFAULT_BUCKETS, LABEL_CONTAINER, LABEL_NAMESPACE, LABEL_POD, LABEL_POD_UID, LABEL_PROBE_TYPE,
    LABEL_RESULT, MetricsError, PROBELET_PROBE_WORKERS, PROBER_PROBE_DURATION_SECONDS, PROBER_PROBE_TOTAL,
    PrometheusRegistry, RESULT_FAILED, RESULT_SUCCESSFUL, RESULT_UNKNOWN,
};

/// Runs `f` with `registry` as this thread's recorder.
fn with<T>(registry: &PrometheusRegistry, f: impl FnOnce() -> T) -> T {
    ::metrics::with_local_recorder(registry, f)
}

/// The render lines that mention `needle`.
fn lines_with(text: &str, needle: &str) -> Vec<String> {
    text.lines().filter(|l| l.contains(needle)).map(str::to_owned).collect()
}

fn probe_total(kind: &str, result: &str, pod_uid: &str) -> ::metrics::Counter {
    ::metrics::counter!(PROBER_PROBE_TOTAL,
        LABEL_PROBE_TYPE => kind.to_owned(),
        LABEL_RESULT => result.to_owned(),
        LABEL_CONTAINER => "app",
        LABEL_POD => "web",
        LABEL_NAMESPACE => "default",
        LABEL_POD_UID => pod_uid.to_owned())
}

#[test]
fn counter_renders_with_help_and_type() {
    let registry = PrometheusRegistry::new();
    with(&registry, || {
        metrics::describe();
        probe_total("Readiness", RESULT_SUCCESSFUL, "u1").increment(3);
        probe_total("Liveness", RESULT_FAILED, "u1").increment(1);
    });
    assert_eq!(
        registry.render(),
        "# HELP prober_probe_total [BETA] Cumulative number of a liveness, readiness or startup probe for a container by result.\n\
         # TYPE prober_probe_total counter\n\
         prober_probe_total{container=\"app\",namespace=\"default\",pod=\"web\",pod_uid=\"u1\",probe_type=\"Liveness\",result=\"failed\"} 1\n\
         prober_probe_total{container=\"app\",namespace=\"default\",pod=\"web\",pod_uid=\"u1\",probe_type=\"Readiness\",result=\"successful\"} 3\n"
    );
}

#[test]
fn counter_absolute_keeps_the_maximum() {
    let registry = PrometheusRegistry::new();
    with(&registry, || {
        let c = ::metrics::counter!("requests_total");
        c.absolute(10);
        c.absolute(7);
        c.increment(1);
    });
    assert_eq!(registry.render(), "# TYPE requests_total counter\nrequests_total 11\n");
}

#[test]
fn gauge_set_increment_decrement() {
    let registry = PrometheusRegistry::new();
    with(&registry, || {
        metrics::describe();
        let live = ::metrics::gauge!(PROBELET_PROBE_WORKERS, LABEL_PROBE_TYPE => "Liveness");
        live.set(5.0);
        live.increment(2.0);
        live.decrement(0.5);
        ::metrics::gauge!(PROBELET_PROBE_WORKERS, LABEL_PROBE_TYPE => "Startup").increment(1.0);
        ::metrics::gauge!(PROBELET_PROBE_WORKERS, LABEL_PROBE_TYPE => "Readiness").set(1e6);
    });
    assert_eq!(
        registry.render(),
        "# HELP probelet_probe_workers Number of running probe workers by probe type.\n\
         # TYPE probelet_probe_workers gauge\n\
         probelet_probe_workers{probe_type=\"Liveness\"} 6.5\n\
         probelet_probe_workers{probe_type=\"Readiness\"} 1e+06\n\
         probelet_probe_workers{probe_type=\"Startup\"} 1\n"
    );
}

#[test]
fn histogram_renders_cumulative_buckets_sum_and_count() {
    let registry = PrometheusRegistry::new();
    with(&registry, || {
        metrics::describe();
        let h = ::metrics::histogram!(PROBER_PROBE_DURATION_SECONDS, LABEL_PROBE_TYPE => "Readiness");
        for v in [0.003, 0.005, 0.02, 0.3, 0.3, 4.0, 12.0] {
            h.record(v);
        }
    });
    let l = "probe_type=\"Readiness\"";
    let want = format!(
        "# HELP prober_probe_duration_seconds [ALPHA] Duration in seconds for a probe response.\n\
         # TYPE prober_probe_duration_seconds histogram\n\
         prober_probe_duration_seconds_bucket{{{l},le=\"0.005\"}} 2\n\
         prober_probe_duration_seconds_bucket{{{l},le=\"0.01\"}} 2\n\
         prober_probe_duration_seconds_bucket{{{l},le=\"0.025\"}} 3\n\
         prober_probe_duration_seconds_bucket{{{l},le=\"0.05\"}} 3\n\
         prober_probe_duration_seconds_bucket{{{l},le=\"0.1\"}} 3\n\
         prober_probe_duration_seconds_bucket{{{l},le=\"0.25\"}} 3\n\
         prober_probe_duration_seconds_bucket{{{l},le=\"0.5\"}} 5\n\
         prober_probe_duration_seconds_bucket{{{l},le=\"1\"}} 5\n\
         prober_probe_duration_seconds_bucket{{{l},le=\"2.5\"}} 5\n\
         prober_probe_duration_seconds_bucket{{{l},le=\"5\"}} 6\n\
         prober_probe_duration_seconds_bucket{{{l},le=\"10\"}} 6\n\
         prober_probe_duration_seconds_bucket{{{l},le=\"+Inf\"}} 7\n\
         prober_probe_duration_seconds_sum{{{l}}} {}\n\
         prober_probe_duration_seconds_count{{{l}}} 7\n",
        0.003 + 0.005 + 0.02 + 0.3 + 0.3 + 4.0 + 12.0
    );
    assert_eq!(registry.render(), want);
}

#[test]
fn histogram_without_labels_and_with_custom_buckets() {
    let registry = PrometheusRegistry::new();
    registry.set_buckets("latency_seconds", &[0.5, 1.0, f64::INFINITY]).expect("valid buckets");
    with(&registry, || {
        ::metrics::histogram!("latency_seconds").record(0.75);
        ::metrics::histogram!("other_seconds").record(0.75);
    });
    let text = registry.render();
    assert!(
        text.starts_with(
            "# TYPE latency_seconds histogram\n\
             latency_seconds_bucket{le=\"0.5\"} 0\n\
             latency_seconds_bucket{le=\"1\"} 1\n\
             latency_seconds_bucket{le=\"+Inf\"} 1\n\
             latency_seconds_sum 0.75\n\
             latency_seconds_count 1\n\
             # TYPE other_seconds histogram\n"
        ),
        "{text}"
    );
    assert_eq!(lines_with(&text, "other_seconds_bucket").len(), DEFAULT_BUCKETS.len() + 1, "{text}");
}

#[test]
fn invalid_buckets_are_an_error() {
    let registry = PrometheusRegistry::new();
    let err = registry.set_buckets("h", &[1.0, 0.5]).expect_err("decreasing bounds");
    assert_eq!(
        err,
        MetricsError::InvalidBuckets {
            name: "h".to_owned(),
            reason: "bucket bounds must be strictly increasing"
        }
    );
    assert_eq!(
        err.to_string(),
        "invalid buckets for histogram \"h\": bucket bounds must be strictly increasing"
    );
}

#[test]
fn families_sort_by_name_and_kinds_mix() {
    let registry = PrometheusRegistry::new();
    with(&registry, || {
        ::metrics::gauge!("b_gauge").set(-2.0);
        ::metrics::counter!("a_total", "x" => "2").increment(1);
        ::metrics::counter!("a_total", "x" => "10").increment(1);
        ::metrics::histogram!("c_seconds").record(1.0);
    });
    let text = registry.render();
    let headers: Vec<_> = text.lines().filter(|l| l.starts_with('#')).collect();
    assert_eq!(headers, ["# TYPE a_total counter", "# TYPE b_gauge gauge", "# TYPE c_seconds histogram"]);
    // Label values compare as strings, like client_golang.
    assert_eq!(lines_with(&text, "a_total{"), ["a_total{x=\"10\"} 1", "a_total{x=\"2\"} 1"]);
    assert!(text.contains("\nb_gauge -2\n"), "{text}");
}

#[test]
fn forget_with_partial_labels_removes_only_matching_series() {
    let registry = PrometheusRegistry::new();
    with(&registry, || {
        for uid in ["keep", "drop"] {
            for result in [RESULT_SUCCESSFUL, RESULT_FAILED, RESULT_UNKNOWN] {
                probe_total("Readiness", result, uid).increment(1);
            }
            probe_total("Liveness", RESULT_SUCCESSFUL, uid).increment(1);
            ::metrics::histogram!(PROBER_PROBE_DURATION_SECONDS,
                LABEL_PROBE_TYPE => "Readiness", LABEL_POD => uid)
            .record(0.1);
        }
    });
    assert_eq!(lines_with(&registry.render(), "pod_uid=\"drop\"").len(), 4);

    let forgotten =
        registry.forget(PROBER_PROBE_TOTAL, &[(LABEL_PROBE_TYPE, "Readiness"), (LABEL_POD_UID, "drop")]);
    assert_eq!(forgotten, 3);
    let text = registry.render();
    assert_eq!(
        lines_with(&text, "pod_uid=\"drop\""),
        [
            "prober_probe_total{container=\"app\",namespace=\"default\",pod=\"web\",pod_uid=\"drop\",probe_type=\"Liveness\",result=\"successful\"} 1"
        ]
    );
    assert_eq!(lines_with(&text, "pod_uid=\"keep\"").len(), 4, "{text}");
    // Histograms of the other name are untouched by a counter's forget.
    assert_eq!(lines_with(&text, "_count{").len(), 2, "{text}");

    // A label value that matches no series forgets nothing; a wrong name neither.
    assert_eq!(registry.forget(PROBER_PROBE_TOTAL, &[(LABEL_POD_UID, "nobody")]), 0);
    assert_eq!(registry.forget("no_such_metric", &[]), 0);

    // Histograms go the same way; the family disappears with its last series.
    assert_eq!(registry.forget(PROBER_PROBE_DURATION_SECONDS, &[(LABEL_POD, "drop")]), 1);
    assert_eq!(registry.forget(PROBER_PROBE_DURATION_SECONDS, &[]), 1);
    assert!(!registry.render().contains(PROBER_PROBE_DURATION_SECONDS));
}

#[test]
fn forgotten_then_reincremented_series_starts_from_zero() {
    let registry = PrometheusRegistry::new();
    with(&registry, || {
        ::metrics::counter!("restarts_total", "w" => "1").increment(5);
        ::metrics::gauge!("workers", "w" => "1").set(5.0);
        ::metrics::histogram!("d_seconds", "w" => "1").record(5.0);
    });
    assert_eq!(registry.forget("restarts_total", &[("w", "1")]), 1);
    assert_eq!(registry.forget("workers", &[("w", "1")]), 1);
    assert_eq!(registry.forget("d_seconds", &[("w", "1")]), 1);
    assert_eq!(registry.render(), "");
    with(&registry, || {
        ::metrics::counter!("restarts_total", "w" => "1").increment(1);
        ::metrics::gauge!("workers", "w" => "1").increment(1.0);
        ::metrics::histogram!("d_seconds", "w" => "1").record(0.5);
    });
    let text = registry.render();
    assert_eq!(lines_with(&text, "restarts_total{"), ["restarts_total{w=\"1\"} 1"]);
    assert_eq!(lines_with(&text, "workers{"), ["workers{w=\"1\"} 1"]);
    assert_eq!(lines_with(&text, "d_seconds_sum"), ["d_seconds_sum{w=\"1\"} 0.5"]);
    assert_eq!(lines_with(&text, "d_seconds_count"), ["d_seconds_count{w=\"1\"} 1"]);
}

#[test]
fn label_values_are_escaped() {
    let registry = PrometheusRegistry::new();
    with(&registry, || {
        ::metrics::counter!("esc_total", "v" => "a\\b\"c\nd").increment(1);
        ::metrics::describe_counter!("esc_total", "line one\nback\\slash \"quoted\"");
    });
    assert_eq!(
        registry.render(),
        "# HELP esc_total line one\\nback\\\\slash \"quoted\"\n\
         # TYPE esc_total counter\n\
         esc_total{v=\"a\\\\b\\\"c\\nd\"} 1\n"
    );
}

#[test]
fn global_is_idempotent_and_describes() {
    let first = PrometheusRegistry::global().expect("install the global registry");
    let second = PrometheusRegistry::global().expect("install the global registry");
    assert!(Arc::ptr_eq(&first, &second));

    ::metrics::counter!(metrics::PROBELET_WORKER_RESTARTS_TOTAL, LABEL_PROBE_TYPE => "global-idempotent")
        .increment(2);
    let text = first.render();
    assert_eq!(
        lines_with(&text, "global-idempotent"),
        ["probelet_worker_restarts_total{probe_type=\"global-idempotent\"} 2"]
    );
    assert!(
        text.contains(
            "# HELP probelet_worker_restarts_total Probe workers restarted after they died abnormally.\n\
             # TYPE probelet_worker_restarts_total counter\n"
        ),
        "{text}"
    );
}

#[test]
fn forget_series_uses_the_global_registry() {
    let registry = PrometheusRegistry::global().expect("install the global registry");
    for result in [RESULT_SUCCESSFUL, RESULT_FAILED, RESULT_UNKNOWN] {
        probe_total("Startup", result, "forget-series-uid").increment(1);
    }
    probe_total("Startup", RESULT_FAILED, "forget-series-other").increment(1);
    assert_eq!(lines_with(&registry.render(), "forget-series-uid").len(), 3);

    metrics::forget_series(PROBER_PROBE_TOTAL, &[(LABEL_POD_UID, "forget-series-uid")]);
    let text = registry.render();
    assert!(lines_with(&text, "forget-series-uid").is_empty(), "{text}");
    assert_eq!(lines_with(&text, "forget-series-other").len(), 1, "{text}");
}

#[test]
fn concurrent_increments_add_up() {
    const THREADS: usize = 8;
    const PER_THREAD: u64 = 2_000;
    // Exactly representable observations, so the sum does not depend on the addition order.
    let registry = PrometheusRegistry::global().expect("install the global registry");
    std::thread::scope(|s| {
        for _ in 0..THREADS {
            s.spawn(|| {
                for i in 0..PER_THREAD {
                    ::metrics::counter!("concurrent_total", "test" => "concurrent").increment(1);
                    ::metrics::histogram!("concurrent_seconds", "test" => "concurrent")
                        .record(if i % 2 == 0 { 0.00390625 } else { 20.0 });
                }
            });
        }
    });
    let total = THREADS as u64 * PER_THREAD;
    let text = registry.render();
    assert_eq!(
        lines_with(&text, "concurrent_total{"),
        [format!("concurrent_total{{test=\"concurrent\"}} {total}")]
    );
    assert_eq!(
        lines_with(&text, "concurrent_seconds_count"),
        [format!("concurrent_seconds_count{{test=\"concurrent\"}} {total}")]
    );
    assert_eq!(
        lines_with(&text, "concurrent_seconds_bucket{test=\"concurrent\",le=\"0.005\"}"),
        [format!("concurrent_seconds_bucket{{test=\"concurrent\",le=\"0.005\"}} {}", total / 2)]
    );
    assert_eq!(
        lines_with(&text, "concurrent_seconds_sum"),
        ["concurrent_seconds_sum{test=\"concurrent\"} 160031.25"]
    );
}
