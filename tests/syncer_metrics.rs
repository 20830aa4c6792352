//! The status syncer's metrics: `probelet_api_requests_total{verb,code}` and
//! `probelet_status_syncs_total{outcome}` move with what the syncer does against the fake API
//! server.
//!
//! A binary of its own with a single test: the counters are process-global and carry no pod
//! label, so no other test may record while this one compares before and after.

// A deletion timestamp is a wall-clock date (the test runs on the paused clock otherwise).
#![allow(clippy::disallowed_methods)]
#![allow(clippy::unwrap_used, clippy::expect_used)]

use probelet_test_support as support;

use std::sync::Arc;
use std::time::Duration;

use http::Method;
use k8s_openapi::api::core::v1::{ContainerStatus, PodIP, PodStatus};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use k8s_openapi::jiff::Timestamp;
use probelet_actors::metrics::{
    PROBELET_API_REQUESTS_TOTAL, PROBELET_STATUS_SYNCS_TOTAL, PrometheusRegistry,
};
use probelet_actors::sync::syncer::{ApiPodObserved, OwnedFields};
use support::apiserver::{Fault, FaultKind, FaultMatcher, FaultTimes};
use support::pods::{terminated, test_pod};
use support::syncer::{SyncTest, bound, bounded, container, status_of, status_path, with_uid};

/// The value of one series in a Prometheus text render, 0 when absent. `labels` in the order
/// the render sorts them (by name).
fn sample(text: &str, name: &str, labels: &[(&str, &str)]) -> f64 {
    let labels: Vec<String> = labels.iter().map(|(k, v)| format!("{k}=\"{v}\"")).collect();
    let series = format!("{name}{{{}}} ", labels.join(","));
    text.lines()
        .find_map(|line| line.strip_prefix(series.as_str()))
        .map_or(0.0, |value| value.trim().parse().unwrap())
}

fn requests(text: &str, verb: &str, code: &str) -> f64 {
    sample(text, PROBELET_API_REQUESTS_TOTAL, &[("code", code), ("verb", verb)])
}

fn syncs(text: &str, outcome: &str) -> f64 {
    sample(text, PROBELET_STATUS_SYNCS_TOTAL, &[("outcome", outcome)])
}

#[actix::test]
async fn api_requests_and_sync_outcomes_are_counted() {
    let registry = PrometheusRegistry::global().unwrap();
    bounded(Duration::from_secs(30), async {
        let t = SyncTest::start().await;
        let syncer = t.syncer().await;
        let before = registry.render();

        // Written: a GET, then a PATCH.
        let ok = bound(test_pod("m-ok").container("app"));
        t.pods.add(&ok);
        t.fake.insert_pod((*ok).clone());
        t.set_status(&ok, status_of(&ok, "Running", vec![container("app", true)])).await;
        t.flush(&syncer).await;

        // Unchanged: a forced new version (the pod is being deleted) equal to what is written.
        let mut deleting = (*ok).clone();
        deleting.metadata.deletion_timestamp = Some(Time(Timestamp::UNIX_EPOCH));
        let deleting = Arc::new(deleting);
        t.set_status(&deleting, status_of(&deleting, "Running", vec![container("app", true)])).await;
        t.flush(&syncer).await;

        // Not found: a GET answered 404.
        let missing = bound(test_pod("m-missing").container("app"));
        t.pods.add(&missing);
        t.set_status(&missing, status_of(&missing, "Running", vec![container("app", true)])).await;
        t.flush(&syncer).await;

        // Invalid: the PATCH answered 422.
        let bad = bound(test_pod("m-bad").container("app"));
        t.pods.add(&bad);
        t.fake.insert_pod((*bad).clone());
        let mut invalid = status_of(&bad, "Running", vec![container("app", true)]);
        invalid.pod_ip = Some("not-an-ip".into());
        invalid.pod_ips = Some(vec![PodIP { ip: "not-an-ip".into() }]);
        t.set_status(&bad, invalid).await;
        t.flush(&syncer).await;

        // An error, then written: the PATCH from the watch copy answered 500, the retry GETs.
        let flaky = bound(test_pod("m-flaky").container("app"));
        t.pods.add(&flaky);
        let on_api = t.fake.insert_pod((*flaky).clone());
        syncer.send(ApiPodObserved::of(Arc::new(on_api))).await.unwrap();
        t.fake.inject(Fault {
            matcher: FaultMatcher::MethodPath(Method::PATCH, status_path("m-flaky")),
            kind: FaultKind::status(500),
            times: FaultTimes::Times(1),
        });
        t.set_status(&flaky, status_of(&flaky, "Running", vec![container("app", true)])).await;
        t.flush(&syncer).await;

        // Recreated: the API's pod of that name has another UID.
        let moved = bound(test_pod("m-moved").container("app"));
        t.pods.add(&moved);
        t.fake.insert_pod(with_uid(&moved, "uid-m-moved-2"));
        t.set_status(&moved, status_of(&moved, "Running", vec![container("app", true)])).await;
        t.flush(&syncer).await;

        // Deleted: a terminating pod, finished; written (GET, PATCH), then deleted.
        let mut done = (*bound(test_pod("m-done").container("app").restart_policy("Never"))).clone();
        done.metadata.deletion_timestamp = Some(Time(Timestamp::now()));
        done.metadata.deletion_grace_period_seconds = Some(30);
        let done = Arc::new(done);
        t.pods.add(&done);
        t.fake.insert_pod((*done).clone());
        let exited = vec![terminated("app", "cri://app", 0)];
        t.set_status(&done, status_of(&done, "Succeeded", exited)).await;
        t.flush(&syncer).await;
        t.pipeline.terminate_pod(done.clone());
        t.flush(&syncer).await;
        assert!(t.fake.pod("default", "m-done").is_none(), "deleted");

        let after = registry.render();
        let moved_by = |f: &dyn Fn(&str) -> f64| f(&after) - f(&before);
        let got_requests: Vec<((&str, &str), f64)> = [
            ("get", "200"),
            ("get", "404"),
            ("patch", "200"),
            ("patch", "422"),
            ("patch", "500"),
            ("delete", "200"),
        ]
        .into_iter()
        .map(|(verb, code)| ((verb, code), moved_by(&|text| requests(text, verb, code))))
        .collect();
        assert_eq!(
            got_requests,
            [
                (("get", "200"), 5.0),
                (("get", "404"), 1.0),
                (("patch", "200"), 3.0),
                (("patch", "422"), 1.0),
                (("patch", "500"), 1.0),
                (("delete", "200"), 1.0),
            ],
            "the requests the fake saw: {:?}",
            t.summary()
        );
        let outcomes = ["updated", "unchanged", "not_found", "invalid", "error", "recreated", "deleted"];
        let got_syncs: Vec<(&str, f64)> =
            outcomes.into_iter().map(|o| (o, moved_by(&|text| syncs(text, o)))).collect();
        assert_eq!(
            got_syncs,
            [
                ("updated", 3.0),
                ("unchanged", 1.0),
                ("not_found", 1.0),
                ("invalid", 1.0),
                ("error", 1.0),
                ("recreated", 1.0),
                ("deleted", 1.0),
            ]
        );
        assert_eq!(t.fake.requests().len(), 12, "every request counted once");

        // Readiness only, beside a runtime that writes the pod before each of the next four
        // status PATCHes: three conflicts, then the conditions alone (a write of their own,
        // updated), then the containers (updated).
        let t = SyncTest::start().await;
        let syncer = t.syncer_with(|c| c.owned_fields = OwnedFields::ReadinessOnly).await;
        let published = PodStatus {
            phase: Some("Running".into()),
            container_statuses: Some(vec![ContainerStatus {
                container_id: Some("cri://app".into()),
                started: None,
                ..container("app", false)
            }]),
            ..Default::default()
        };
        let raced = bound(test_pod("m-raced").container("app").with_status(published));
        t.pods.add(&raced);
        let on_api = t.fake.insert_pod((*raced).clone());
        syncer.send(ApiPodObserved::of(Arc::new(on_api))).await.unwrap();
        t.fake.inject(Fault {
            matcher: FaultMatcher::MethodPath(Method::PATCH, status_path("m-raced")),
            kind: FaultKind::Touch,
            times: FaultTimes::Times(4),
        });
        let before = registry.render();
        t.set_status(&raced, status_of(&raced, "Running", vec![container("app", true)])).await;
        t.flush(&syncer).await;
        let after = registry.render();
        let moved_by = |f: &dyn Fn(&str) -> f64| f(&after) - f(&before);
        let got: Vec<(&str, f64)> =
            ["updated", "conflict"].into_iter().map(|o| (o, moved_by(&|text| syncs(text, o)))).collect();
        assert_eq!(got, [("updated", 2.0), ("conflict", 3.0)], "{:?}", t.summary());
        assert_eq!(moved_by(&|text| requests(text, "patch", "409")), 3.0);
        assert_eq!(moved_by(&|text| requests(text, "patch", "200")), 2.0);
    })
    .await;
}
