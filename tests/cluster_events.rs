//! Cluster mode's core/v1 event recorder against the fake API server: repeats are counted
//! into one Event, an Event the server removed (its TTL) is created again, and a full write
//! queue drops events instead of piling up writes.

// Helpers here may panic: a panic fails the test that called them.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use probelet_test_support as support;

use std::sync::Arc;
use std::time::Duration;

use http::Method;
use k8s_openapi::api::core::v1::{Event, ObjectReference};
use kube::api::{Api, DeleteParams};
use probelet::clock::TokioClock;
use probelet::cluster::{CoreEventRecorder, MAX_PENDING_EVENTS};
use probelet::contracts::{EventRecorder, EventType};
use probelet::host::events::EventLog;
use probelet_actors::sync::rate::RateLimiter;
use serde_json::Value;
use support::apiserver::{FakeApiServer, Fault, FaultKind, FaultMatcher, FaultTimes, RecordedRequest};

fn container(pod: &str) -> ObjectReference {
    ObjectReference {
        kind: Some("Pod".into()),
        api_version: Some("v1".into()),
        namespace: Some("default".into()),
        name: Some(pod.into()),
        uid: Some(format!("uid-{pod}")),
        field_path: Some("spec.containers{app}".into()),
        ..Default::default()
    }
}

fn recorder(fake: &FakeApiServer) -> CoreEventRecorder {
    let local = EventLog::new(Arc::new(TokioClock::new()), "node-a");
    // No request budget: the tests are about what is written, not when.
    CoreEventRecorder::new(fake.client(), RateLimiter::new(0.0, 1), "node-a".into(), local)
}

fn event_writes(fake: &FakeApiServer) -> Vec<RecordedRequest> {
    fake.requests().into_iter().filter(|r| r.path.contains("/events") && r.method != Method::GET).collect()
}

/// Waits (bounded) until the fake holds an event satisfying `pred`.
async fn wait_for_event(fake: &FakeApiServer, what: &str, pred: impl Fn(&Value) -> bool) -> Value {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    loop {
        if let Some(event) = fake.events().into_iter().find(|e| pred(e)) {
            return event;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "{what} within 10 s; events: {:?}; writes: {:?}",
            fake.events(),
            event_writes(fake)
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

#[tokio::test]
async fn repeats_are_counted_and_a_removed_event_is_created_again() {
    let fake = FakeApiServer::start().await;
    let recorder = recorder(&fake);
    let web = container("web");

    recorder.record(&web, EventType::Warning, "Unhealthy", "Liveness probe failed: boom");
    let first = wait_for_event(&fake, "the first event", |e| e["count"] == 1).await;
    let name = first["metadata"]["name"].as_str().unwrap().to_owned();
    assert!(name.starts_with("web."), "{name}");
    assert_eq!(first["involvedObject"]["fieldPath"], "spec.containers{app}");
    assert_eq!(first["source"]["host"], "node-a");

    recorder.record(&web, EventType::Warning, "Unhealthy", "Liveness probe failed: boom");
    let second = wait_for_event(&fake, "count 2", |e| e["count"] == 2).await;
    assert_eq!(second["metadata"]["name"], name.as_str(), "the repeat went to the same Event");
    assert_eq!(second["firstTimestamp"], first["firstTimestamp"]);
    let methods: Vec<Method> = event_writes(&fake).into_iter().map(|r| r.method).collect();
    assert_eq!(methods, [Method::POST, Method::PATCH]);

    // The API server removes Events after their TTL; the next repeat must not PATCH in vain.
    let events: Api<Event> = Api::namespaced(fake.client(), "default");
    events.delete(&name, &DeleteParams::default()).await.unwrap();
    assert!(fake.events().is_empty());
    fake.clear_requests();
    recorder.record(&web, EventType::Warning, "Unhealthy", "Liveness probe failed: boom");
    let again = wait_for_event(&fake, "the Event created again", |e| e["count"] == 3).await;
    assert_eq!(again["metadata"]["name"], name.as_str());
    assert_eq!(again["message"], "Liveness probe failed: boom");
    let writes: Vec<(Method, Option<u16>)> =
        event_writes(&fake).into_iter().map(|r| (r.method, r.code)).collect();
    assert_eq!(writes, [(Method::PATCH, Some(404)), (Method::POST, Some(201))]);

    // Another message is another Event.
    recorder.record(&web, EventType::Warning, "Unhealthy", "Liveness probe failed: other");
    let other =
        wait_for_event(&fake, "a second Event", |e| e["message"] == "Liveness probe failed: other").await;
    assert_eq!(other["count"], 1);
    assert_ne!(other["metadata"]["name"], name.as_str());
    assert_eq!(recorder.dropped(), 0);
}

#[tokio::test]
async fn the_spam_filter_bounds_events_about_one_pod() {
    let fake = FakeApiServer::start().await;
    let recorder = recorder(&fake);
    let web = container("web");
    for i in 0..40 {
        recorder.record(&web, EventType::Warning, "Unhealthy", &format!("Readiness probe failed: {i}"));
    }
    // A different pod still gets its events through.
    recorder.record(&container("db"), EventType::Warning, "Unhealthy", "Readiness probe failed: db");
    wait_for_event(&fake, "the other pod's event", |e| e["involvedObject"]["name"] == "db").await;
    // The writer goes in order: everything before the db event is written by now.
    let about_web = event_writes(&fake).len() - 1;
    assert_eq!(about_web, 25, "a burst of 25 writes about one pod, then the filter drops");
}

#[tokio::test]
async fn a_full_write_queue_drops_events() {
    let fake = FakeApiServer::start().await;
    fake.inject(Fault {
        matcher: FaultMatcher::Method(Method::POST),
        kind: FaultKind::Delay(Duration::from_secs(5)),
        times: FaultTimes::Always,
    });
    let recorder = recorder(&fake);
    // Different pods, so the spam filter lets every one through. The writer task shares this
    // current-thread runtime and does not run during the loop: the queue fills exactly.
    for i in 0..(MAX_PENDING_EVENTS + 50) {
        recorder.record(&container(&format!("pod-{i}")), EventType::Warning, "Unhealthy", "boom");
    }
    assert_eq!(recorder.dropped(), 50);
}
