//! An unchanged `kube::Client` against the fake API server: the calls the status syncer makes
//! (status patches with the UID precondition, deletes with preconditions), a `kube::runtime`
//! watcher on a field selector, lists, events, and the fake's test controls (seeding, request
//! recording, fault injection).

// The real binary runs on real time: its tests read the real clocks too.
#![allow(clippy::disallowed_methods)]
#![allow(clippy::unwrap_used, clippy::expect_used)]

use probelet_test_support as support;

use std::time::Duration;

use futures::StreamExt;
use k8s_openapi::api::core::v1::{ObjectReference, Pod};
use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams, PostParams, Preconditions};
use kube::runtime::WatchStreamExt;
use kube::runtime::events::{Event as RecorderEvent, EventType, Recorder, Reporter};
use kube::runtime::watcher::{self, Event, watcher};
use serde_json::json;
use support::apiserver::{FakeApiServer, Fault, FaultKind, FaultMatcher, FaultTimes};

const NS: &str = "default";
const WRONG_UID: &str = "11111111-2222-3333-4444-555555555555";

/// Every test's wall time is bounded.
async fn bounded<F: std::future::Future>(f: F) -> F::Output {
    tokio::time::timeout(Duration::from_secs(20), f).await.expect("test finished within 20 s")
}

fn pod(name: &str, node: Option<&str>) -> Pod {
    let mut spec = json!({"containers": [{"name": "app", "image": "registry.k8s.io/pause:3.10"}]});
    if let Some(n) = node {
        spec["nodeName"] = json!(n);
    }
    serde_json::from_value(json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": name, "labels": {"app": "fx"}},
        "spec": spec,
    }))
    .expect("pod")
}

fn api_error(e: kube::Error) -> Box<kube::core::Status> {
    match e {
        kube::Error::Api(s) => s,
        other => panic!("expected an API error, got {other:?}"),
    }
}

fn condition_types(p: &Pod) -> Vec<String> {
    p.status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .into_iter()
        .flatten()
        .map(|c| c.type_.clone())
        .collect()
}

#[tokio::test]
async fn patch_status_with_uid_precondition_applies_and_a_wrong_uid_is_422() {
    bounded(async {
        let fake = FakeApiServer::start().await;
        let pods: Api<Pod> = Api::namespaced(fake.client(), NS);
        let created = pods.create(&PostParams::default(), &pod("p1", Some("node-a"))).await.unwrap();
        let uid = created.metadata.uid.clone().unwrap();

        // What the kubelet's status manager sends: the uid as a precondition, $setElementOrder.
        let patch = json!({
            "metadata": {"uid": uid},
            "status": {
                "$setElementOrder/conditions": [{"type": "Ready"}, {"type": "ContainersReady"}],
                "conditions": [
                    {"type": "Ready", "status": "False", "lastTransitionTime": "2025-01-01T00:01:00Z", "reason": "ContainersNotReady"},
                    {"type": "ContainersReady", "status": "False", "lastTransitionTime": "2025-01-01T00:01:00Z"}
                ],
                "phase": "Running"
            }
        });
        let got = pods.patch_status("p1", &PatchParams::default(), &Patch::Strategic(&patch)).await.unwrap();
        assert_eq!(condition_types(&got), ["Ready", "ContainersReady"]);
        assert_eq!(got.status.as_ref().and_then(|s| s.phase.as_deref()), Some("Running"));
        assert_ne!(got.metadata.resource_version, created.metadata.resource_version);
        assert_eq!(fake.pod(NS, "p1").unwrap().status, got.status, "the fake stored what it answered");

        let wrong = json!({"metadata": {"uid": WRONG_UID}, "status": {"phase": "Failed"}});
        let s = api_error(pods.patch_status("p1", &PatchParams::default(), &Patch::Strategic(&wrong)).await.unwrap_err());
        assert_eq!((s.code, s.reason.as_str()), (422, "Invalid"));
        assert_eq!(
            s.message,
            format!("Pod \"p1\" is invalid: metadata.uid: Invalid value: \"{WRONG_UID}\": field is immutable")
        );
        let causes = s.details.unwrap().causes;
        assert_eq!(causes.len(), 2, "the real server lists the cause twice");
        assert!(causes.iter().all(|c| c.field == "metadata.uid" && c.reason == "FieldValueInvalid"));
        assert_eq!(
            fake.pod(NS, "p1").unwrap().status.unwrap().phase.as_deref(),
            Some("Running"),
            "a rejected patch changes nothing"
        );

        let patches: Vec<_> = fake.requests().into_iter().filter(|r| r.method == http::Method::PATCH).collect();
        assert_eq!(patches.len(), 2);
        assert!(patches.iter().all(|r| r.path == "/api/v1/namespaces/default/pods/p1/status"));
        assert!(patches.iter().all(|r| r.content_type.as_deref() == Some("application/strategic-merge-patch+json")));
        assert_eq!(patches.iter().map(|r| r.code).collect::<Vec<_>>(), [Some(200), Some(422)]);
        assert_eq!(patches[0].body.as_ref().unwrap()["metadata"]["uid"], json!(uid));
    })
    .await;
}

#[tokio::test]
async fn a_patch_that_changes_nothing_keeps_the_resource_version() {
    bounded(async {
        let fake = FakeApiServer::start().await;
        let pods: Api<Pod> = Api::namespaced(fake.client(), NS);
        pods.create(&PostParams::default(), &pod("p1", Some("node-a"))).await.unwrap();
        let patch = json!({"status": {"phase": "Running", "podIP": "10.0.0.1"}});
        let first =
            pods.patch_status("p1", &PatchParams::default(), &Patch::Strategic(&patch)).await.unwrap();
        let again =
            pods.patch_status("p1", &PatchParams::default(), &Patch::Strategic(&patch)).await.unwrap();
        assert_eq!(first.metadata.resource_version, again.metadata.resource_version);
        let ips: Vec<_> = again.status.unwrap().pod_ips.unwrap().into_iter().map(|p| p.ip).collect();
        assert_eq!(ips, ["10.0.0.1"], "podIP fills podIPs");
    })
    .await;
}

#[tokio::test]
async fn delete_with_preconditions() {
    bounded(async {
        let fake = FakeApiServer::start().await;
        let pods: Api<Pod> = Api::namespaced(fake.client(), NS);
        let created = pods.create(&PostParams::default(), &pod("p1", Some("node-a"))).await.unwrap();
        let uid = created.metadata.uid.clone().unwrap();
        let with_uid = |uid: &str| DeleteParams {
            grace_period_seconds: Some(0),
            preconditions: Some(Preconditions { uid: Some(uid.into()), resource_version: None }),
            ..Default::default()
        };

        let s = api_error(pods.delete("p1", &with_uid(WRONG_UID)).await.unwrap_err());
        assert_eq!((s.code, s.reason.as_str()), (409, "Conflict"));
        assert_eq!(
            s.message,
            format!(
                "Operation cannot be fulfilled on Pod \"p1\": the UID in the precondition ({WRONG_UID}) does not match the UID in record ({uid}). The object might have been deleted and then recreated"
            )
        );
        assert!(fake.pod(NS, "p1").is_some());

        let stale = DeleteParams {
            preconditions: Some(Preconditions { uid: None, resource_version: Some("1".into()) }),
            ..Default::default()
        };
        let s = api_error(pods.delete("p1", &stale).await.unwrap_err());
        assert_eq!(s.code, 409);

        let deleted = pods.delete("p1", &with_uid(&uid)).await.unwrap().left().expect("the pod comes back");
        assert!(deleted.metadata.deletion_timestamp.is_some());
        assert_eq!(deleted.metadata.deletion_grace_period_seconds, Some(0));
        assert_eq!(deleted.metadata.generation, Some(2), "setting a deletion timestamp bumps the generation");
        assert!(fake.pod(NS, "p1").is_none());
        assert_eq!(api_error(pods.get("p1").await.unwrap_err()).code, 404);
    })
    .await;
}

#[tokio::test]
async fn delete_without_options_is_graceful_for_a_bound_running_pod() {
    bounded(async {
        let fake = FakeApiServer::start().await;
        let pods: Api<Pod> = Api::namespaced(fake.client(), NS);
        pods.create(&PostParams::default(), &pod("bound", Some("node-a"))).await.unwrap();
        pods.create(&PostParams::default(), &pod("unbound", None)).await.unwrap();

        let p = pods.delete("bound", &DeleteParams::default()).await.unwrap().left().unwrap();
        assert_eq!(p.metadata.deletion_grace_period_seconds, Some(30));
        assert!(
            fake.pod(NS, "bound").unwrap().metadata.deletion_timestamp.is_some(),
            "the pod stays while terminating"
        );

        pods.delete("unbound", &DeleteParams::default()).await.unwrap();
        assert!(fake.pod(NS, "unbound").is_none(), "an unscheduled pod goes at once");
    })
    .await;
}

#[tokio::test]
async fn list_with_field_and_label_selectors() {
    bounded(async {
        let fake = FakeApiServer::start().await;
        let pods: Api<Pod> = Api::namespaced(fake.client(), NS);
        for (name, node) in
            [("a1", Some("node-a")), ("a2", Some("node-a")), ("b1", Some("node-b")), ("u1", None)]
        {
            pods.create(&PostParams::default(), &pod(name, node)).await.unwrap();
        }
        let names = |l: kube::core::ObjectList<Pod>| {
            l.items.into_iter().map(|p| p.metadata.name.unwrap()).collect::<Vec<_>>()
        };
        let on_a = pods.list(&ListParams::default().fields("spec.nodeName=node-a")).await.unwrap();
        assert_eq!(names(on_a), ["a1", "a2"]);
        let unscheduled = pods.list(&ListParams::default().fields("spec.nodeName=")).await.unwrap();
        assert_eq!(names(unscheduled), ["u1"]);
        let all: Api<Pod> = Api::all(fake.client());
        let across =
            all.list(&ListParams::default().fields("spec.nodeName=node-b").labels("app=fx")).await.unwrap();
        assert_eq!(names(across), ["b1"]);
        let paged = pods.list(&ListParams::default().limit(3)).await.unwrap();
        let token = paged.metadata.continue_.clone().expect("a continue token");
        assert_eq!(names(paged), ["a1", "a2", "b1"]);
        let rest = pods.list(&ListParams::default().limit(3).continue_token(&token)).await.unwrap();
        assert_eq!(names(rest), ["u1"]);
        let s = api_error(pods.list(&ListParams::default().fields("spec.bogus=x")).await.unwrap_err());
        assert_eq!((s.code, s.message.as_str()), (400, "field label not supported: spec.bogus"));
    })
    .await;
}

/// Reads watcher events until `done` says stop; errors (which the watcher recovers from) are
/// described in `errors`.
async fn collect_until_with_errors(
    stream: &mut (impl futures::Stream<Item = Result<Event<Pod>, watcher::Error>> + Unpin),
    mut done: impl FnMut(&Event<Pod>) -> bool,
    errors: &mut Vec<String>,
) -> Vec<Event<Pod>> {
    let mut out = Vec::new();
    while let Some(item) = stream.next().await {
        match item {
            Ok(ev) => {
                let stop = done(&ev);
                out.push(ev);
                if stop {
                    break;
                }
            }
            Err(e) => errors.push(e.to_string()),
        }
    }
    out
}

/// Reads watcher events until `done` says stop; any error fails the test.
async fn collect_until(
    stream: &mut (impl futures::Stream<Item = Result<Event<Pod>, watcher::Error>> + Unpin),
    done: impl FnMut(&Event<Pod>) -> bool,
) -> Vec<Event<Pod>> {
    let mut errors = Vec::new();
    let out = collect_until_with_errors(stream, done, &mut errors).await;
    assert!(errors.is_empty(), "watch errors: {errors:?}");
    out
}

fn describe(ev: &Event<Pod>) -> String {
    let (kind, p) = match ev {
        Event::Apply(p) => ("Apply", Some(p)),
        Event::Delete(p) => ("Delete", Some(p)),
        Event::InitApply(p) => ("InitApply", Some(p)),
        Event::Init => ("Init", None),
        Event::InitDone => ("InitDone", None),
    };
    match p {
        None => kind.to_string(),
        Some(p) => {
            let phase = p.status.as_ref().and_then(|s| s.phase.clone()).unwrap_or_default();
            let deleting = if p.metadata.deletion_timestamp.is_some() { " deleting" } else { "" };
            format!("{kind} {} {phase}{deleting}", p.metadata.name.clone().unwrap_or_default())
        }
    }
}

#[tokio::test]
async fn watcher_on_a_field_selector_sees_create_patch_and_delete() {
    bounded(async {
        let fake = FakeApiServer::start().await;
        let pods: Api<Pod> = Api::namespaced(fake.client(), NS);
        pods.create(&PostParams::default(), &pod("before", Some("node-a"))).await.unwrap();
        let config = watcher::Config::default().fields("spec.nodeName=node-a");
        let mut stream = watcher(pods.clone(), config).default_backoff().boxed();
        let init = collect_until(&mut stream, |e| matches!(e, Event::InitDone)).await;
        assert_eq!(
            init.iter().map(describe).collect::<Vec<_>>(),
            ["Init", "InitApply before Pending", "InitDone"]
        );

        pods.create(&PostParams::default(), &pod("w1", Some("node-a"))).await.unwrap();
        pods.create(&PostParams::default(), &pod("w2", Some("node-b"))).await.unwrap();
        let running = json!({"status": {"phase": "Running"}});
        pods.patch_status("w1", &PatchParams::default(), &Patch::Strategic(&running)).await.unwrap();
        pods.patch_status("w2", &PatchParams::default(), &Patch::Strategic(&running)).await.unwrap();
        pods.delete("w1", &DeleteParams { grace_period_seconds: Some(0), ..Default::default() })
            .await
            .unwrap();

        let seen = collect_until(&mut stream, |e| matches!(e, Event::Delete(_))).await;
        assert_eq!(
            seen.iter().map(describe).collect::<Vec<_>>(),
            [
                "Apply w1 Pending",
                "Apply w1 Running",
                "Apply w1 Running deleting",
                "Delete w1 Running deleting"
            ],
            "w2 on node-b is never seen; a grace-0 delete is an Apply with deletionTimestamp, then Delete"
        );
        let watches: Vec<_> = fake.requests().into_iter().filter(|r| r.is_watch()).collect();
        assert!(!watches.is_empty());
        assert!(watches.iter().all(|r| r.param("fieldSelector") == Some("spec.nodeName=node-a")));
    })
    .await;
}

#[tokio::test]
async fn watcher_relists_after_410_expired() {
    bounded(async {
        let fake = FakeApiServer::start().await;
        let pods: Api<Pod> = Api::namespaced(fake.client(), NS);
        let mut stream = watcher(pods.clone(), watcher::Config::default()).default_backoff().boxed();
        collect_until(&mut stream, |e| matches!(e, Event::InitDone)).await;

        // The history the watch would resume from is gone, and the open watch ends.
        pods.create(&PostParams::default(), &pod("p1", Some("node-a"))).await.unwrap();
        fake.compact();
        fake.close_watches();
        let mut errors = Vec::new();
        let seen =
            collect_until_with_errors(&mut stream, |e| matches!(e, Event::InitDone), &mut errors).await;
        let seen: Vec<_> = seen.iter().map(describe).collect();
        assert!(
            seen.ends_with(&["Init".into(), "InitApply p1 Pending".into(), "InitDone".into()]),
            "{seen:?}"
        );
        assert_eq!(errors.len(), 1, "{errors:?}");
        assert!(
            errors[0].contains("too old resource version"),
            "the watch was answered 410 Expired: {errors:?}"
        );
    })
    .await;
}

#[tokio::test]
async fn inserted_pods_are_served_as_stored() {
    bounded(async {
        let fake = FakeApiServer::start().await;
        let mut p = pod("seeded", Some("node-a"));
        p.metadata.namespace = Some("team".into());
        p.status = Some(serde_json::from_value(json!({"phase": "Running", "podIP": "10.1.2.3"})).unwrap());
        let stored = fake.insert_pod(p);
        assert!(stored.metadata.uid.is_some());
        assert!(stored.metadata.resource_version.is_some());
        let pods: Api<Pod> = Api::namespaced(fake.client(), "team");
        let got = pods.get("seeded").await.unwrap();
        assert_eq!(got.status.unwrap().pod_ip.as_deref(), Some("10.1.2.3"));
        assert_eq!(fake.pods().len(), 1);
    })
    .await;
}

#[tokio::test]
async fn injected_status_faults_answer_like_the_real_server() {
    bounded(async {
        let fake = FakeApiServer::start().await;
        let pods: Api<Pod> = Api::namespaced(fake.client(), NS);
        pods.create(&PostParams::default(), &pod("p1", Some("node-a"))).await.unwrap();
        fake.clear_requests();

        fake.inject(Fault {
            matcher: FaultMatcher::PathSuffix("/status".into()),
            kind: FaultKind::status(500),
            times: FaultTimes::Times(1),
        });
        let patch = Patch::Strategic(json!({"status": {"phase": "Running"}}));
        let s = api_error(pods.patch_status("p1", &PatchParams::default(), &patch).await.unwrap_err());
        assert_eq!((s.code, s.reason.as_str()), (500, "InternalError"));
        pods.patch_status("p1", &PatchParams::default(), &patch).await.unwrap();

        // kube retries 429 (honouring Retry-After); a client without retries sees the answer.
        fake.inject(Fault {
            matcher: FaultMatcher::MethodPath(http::Method::GET, "/api/v1/namespaces/default/pods/p1".into()),
            kind: FaultKind::too_many_requests(1),
            times: FaultTimes::Times(1),
        });
        pods.get("p1").await.unwrap();
        let no_retry: Api<Pod> = Api::namespaced(fake.client_with(|c| c.default_retry = false), NS);
        fake.inject(Fault {
            matcher: FaultMatcher::MethodPath(http::Method::GET, "/api/v1/namespaces/default/pods/p1".into()),
            kind: FaultKind::too_many_requests(7),
            times: FaultTimes::Times(1),
        });
        let s = api_error(no_retry.get("p1").await.unwrap_err());
        assert_eq!((s.code, s.reason.as_str()), (429, "TooManyRequests"));
        assert_eq!(s.details.unwrap().retry_after_seconds, 7);

        fake.inject(Fault {
            matcher: FaultMatcher::Any,
            kind: FaultKind::status(409),
            times: FaultTimes::Times(1),
        });
        let s = api_error(pods.patch_status("p1", &PatchParams::default(), &patch).await.unwrap_err());
        assert_eq!((s.code, s.reason.as_str()), (409, "Conflict"));

        fake.inject(Fault {
            matcher: FaultMatcher::Method(http::Method::GET),
            kind: FaultKind::DropConnection,
            times: FaultTimes::Times(1),
        });
        let e = pods.get("p1").await.unwrap_err();
        assert!(!matches!(e, kube::Error::Api(_)), "a dropped connection is a transport error: {e:?}");
        pods.get("p1").await.unwrap();

        fake.inject(Fault {
            matcher: FaultMatcher::Any,
            kind: FaultKind::Delay(Duration::from_millis(50)),
            times: FaultTimes::Times(1),
        });
        let started = std::time::Instant::now();
        pods.get("p1").await.unwrap();
        assert!(started.elapsed() >= Duration::from_millis(50));

        let codes: Vec<_> = fake.requests().into_iter().map(|r| r.code).collect();
        assert_eq!(
            codes,
            [Some(500), Some(200), Some(429), Some(200), Some(429), Some(409), None, Some(200), Some(200)],
            "every request is recorded with its answer"
        );
    })
    .await;
}

#[tokio::test]
async fn probabilistic_faults_are_reproducible_with_a_seed() {
    bounded(async {
        let mut patterns = Vec::new();
        for _ in 0..2 {
            let fake = FakeApiServer::start().await;
            let pods: Api<Pod> = Api::namespaced(fake.client(), NS);
            fake.inject(Fault {
                matcher: FaultMatcher::Method(http::Method::GET),
                kind: FaultKind::status(500),
                times: FaultTimes::Probability { p: 0.5, seed: 42 },
            });
            let mut pattern = Vec::new();
            for _ in 0..20 {
                pattern.push(pods.get("missing").await.map_err(|e| api_error(e).code).unwrap_err());
            }
            patterns.push(pattern);
        }
        assert_eq!(patterns[0], patterns[1], "the same seed gives the same faults");
        let faults = patterns[0].iter().filter(|c| **c == 500).count();
        assert!((4..=16).contains(&faults), "about half the requests fail: {faults}/20");
        assert!(patterns[0].iter().all(|c| *c == 500 || *c == 404));
    })
    .await;
}

#[tokio::test]
async fn recorder_events_are_readable_through_both_event_apis() {
    bounded(async {
        let fake = FakeApiServer::start().await;
        let client = fake.client();
        let pods: Api<Pod> = Api::namespaced(client.clone(), NS);
        let p = pods.create(&PostParams::default(), &pod("p1", Some("node-a"))).await.unwrap();
        let reference = ObjectReference {
            api_version: Some("v1".into()),
            kind: Some("Pod".into()),
            name: p.metadata.name.clone(),
            namespace: Some(NS.into()),
            uid: p.metadata.uid.clone(),
            field_path: Some("spec.containers{app}".into()),
            ..Default::default()
        };
        let recorder = Recorder::new(
            client.clone(),
            Reporter { controller: "probelet".into(), instance: Some("node-a".into()) },
        );
        let ev = RecorderEvent {
            type_: EventType::Warning,
            reason: "Unhealthy".into(),
            note: Some("Readiness probe failed: HTTP probe failed with statuscode: 503".into()),
            action: "Probe".into(),
            secondary: None,
        };
        recorder.publish(&ev, &reference).await.unwrap();
        recorder.publish(&ev, &reference).await.unwrap();

        let core: Api<k8s_openapi::api::core::v1::Event> = Api::namespaced(client.clone(), NS);
        let listed = core.list(&ListParams::default().fields("involvedObject.name=p1")).await.unwrap();
        assert_eq!(listed.items.len(), 1, "the recorder patches the series of one event");
        let e = &listed.items[0];
        assert_eq!(e.series.as_ref().and_then(|s| s.count), Some(2));
        assert_eq!(e.reporting_component.as_deref(), Some("probelet"));
        assert_eq!(e.count, None, "events.k8s.io events have no core count");
        assert_eq!(fake.events().len(), 1);
    })
    .await;
}

#[tokio::test]
async fn shutdown_ends_watches_and_refuses_new_connections() {
    bounded(async {
        let fake = FakeApiServer::start().await;
        let pods: Api<Pod> = Api::namespaced(fake.client(), NS);
        let wp = kube::api::WatchParams::default().timeout(290);
        let mut events = pods.watch(&wp, "0").await.unwrap().boxed();
        fake.shutdown().await;
        while let Some(Ok(_)) = events.next().await {}
        assert!(pods.get("anything").await.is_err(), "nothing answers after shutdown");
    })
    .await;
}

#[tokio::test]
async fn a_non_json_body_gets_the_go_decoder_message() {
    bounded(async {
        let fake = FakeApiServer::start().await;
        let pods: Api<Pod> = Api::namespaced(fake.client(), NS);
        pods.create(&PostParams::default(), &pod("p1", Some("node-a"))).await.unwrap();
        let req = http::Request::patch("/api/v1/namespaces/default/pods/p1/status")
            .header("content-type", "application/strategic-merge-patch+json")
            .body(b"{not json".to_vec())
            .unwrap();
        let s = api_error(fake.client().request::<Pod>(req).await.unwrap_err());
        assert_eq!((s.code, s.reason.as_str()), (400, "BadRequest"));
        assert_eq!(s.message, "invalid character 'n' looking for beginning of object key string");
    })
    .await;
}
