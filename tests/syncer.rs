//! The status syncer against the fake API server (docs/sync.md §5.10, docs/status-manager.md §5.12,
//! §5.14; docs/sync.md §7's StatusSyncer): the requests it sends in each situation the kubelet's
//! status tests cover, adapted to our merge base (the watch cache or the last PATCH response
//! instead of a GET before every PATCH), then back-off, deletion, static pods, reconcile, random
//! faults and scale.
//!
//! Paused time throughout: the syncer's client calls the fake in-process (no socket), so the
//! clock moves only when every task waits on a timer; tests wait with `Flush` or polls of the
//! fake, and back-offs and paces are measured exactly on the paused clock. The metrics are
//! checked in `tests/syncer_metrics.rs`, a binary of its own, so that no other test moves the
//! global counters under it.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use probelet_test_support as support;

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::time::Instant;

use http::Method;
use k8s_openapi::api::core::v1::{ContainerStatus, Pod, PodCondition, PodStatus};
use kube::api::{Api, DeleteParams, Patch, PatchParams};
use probelet::container::ContainerId;
use probelet::status::equality::ConditionOwnership;
use probelet::status::generate::POD_INITIALIZED;
use probelet::status::generate_kubelet_conditions;
use probelet::status::manager::{DeletePodStatus, SetContainerReadiness};
use probelet::status::{CONTAINERS_READY, POD_READY};
use probelet_actors::sync::api_pod::ApiPod;
use probelet_actors::sync::rate::{RateLimiter, jittered_backoff};
use probelet_actors::sync::syncer::{
    ApiPodDeleted, ApiPodListed, ApiPodObserved, Flush, GetSyncerStats, GetWrittenVersion,
    MIRROR_POD_ANNOTATION, OwnedFields, Reconcile, StatusSyncer, SyncerConfig, SyncerStats,
};
use serde_json::{Value, json};
use support::apiserver::{Fault, FaultKind, FaultMatcher, FaultTimes};
use support::log::CapturedLog;
use support::pods::{running, terminated, test_pod, waiting};
use support::syncer::{
    NS, SyncTest, bound, bounded, condition_status, container, eventually, owned_conditions, pod_path,
    readiness, status_of, status_path, with_uid,
};

const LIMIT: Duration = Duration::from_secs(30);
const FEATURE: &str = "example.com/feature";
const GATE: &str = "example.com/gate";

fn uid(pod: &Pod) -> String {
    pod.metadata.uid.clone().unwrap_or_default()
}

/// What the results cache sends when a readiness probe result changes.
fn set_ready(pod: &Pod, container: &str, ready: bool) -> SetContainerReadiness {
    SetContainerReadiness {
        pod_uid: uid(pod).into(),
        container_id: ContainerId::parse(&format!("cri://{container}")),
        ready,
    }
}

fn condition(type_: &str, status: &str) -> PodCondition {
    PodCondition { type_: type_.into(), status: status.into(), ..Default::default() }
}

/// A status PATCH from someone other than the syncer (a controller, a user).
async fn patch_by_someone_else(t: &SyncTest, name: &str, patch: Value) {
    let api: Api<Pod> = Api::namespaced(t.fake.in_process_client(), NS);
    api.patch_status(name, &PatchParams::default(), &Patch::Strategic(&patch)).await.unwrap();
}

/// A mirror pod for `static_pod`: its name, its own UID and the mirror annotation.
fn mirror_of(static_pod: &Pod, mirror_uid: &str) -> Pod {
    let mut mirror = with_uid(static_pod, mirror_uid);
    mirror.metadata.annotations =
        Some(BTreeMap::from([(MIRROR_POD_ANNOTATION.to_owned(), "hash-1".to_owned())]));
    mirror
}

fn api_status(pod: &Pod) -> PodStatus {
    pod.status.clone().unwrap_or_default()
}

// === the GET before the first write (docs/sync.md §5.10 syncPod steps 1–2) ===

#[actix::test]
async fn a_pod_missing_from_the_api_is_looked_up_not_patched_and_kept() {
    bounded(LIMIT, async {
        let t = SyncTest::start().await;
        let syncer = t.syncer().await;
        let pod = bound(test_pod("ghost").container("app"));
        t.pods.add(&pod);
        t.set_status(&pod, status_of(&pod, "Running", vec![container("app", false)])).await;
        t.flush(&syncer).await;

        assert_eq!(t.summary(), [(Method::GET, pod_path("ghost"), Some(404))]);
        assert!(t.cached(&uid(&pod)).await.is_some(), "the status manager keeps the entry");
        assert_eq!(syncer.send(GetWrittenVersion(uid(&pod))).await.unwrap(), None, "nothing written");
    })
    .await;
}

#[actix::test]
async fn a_pod_of_that_name_with_another_uid_drops_the_status() {
    bounded(LIMIT, async {
        let t = SyncTest::start().await;
        let syncer = t.syncer().await;
        let pod = bound(test_pod("web").container("app"));
        t.pods.add(&pod);
        t.fake.insert_pod(with_uid(&pod, "uid-web-2"));
        t.set_status(&pod, status_of(&pod, "Running", vec![container("app", true)])).await;
        t.flush(&syncer).await;

        assert_eq!(t.summary(), [(Method::GET, pod_path("web"), Some(200))], "no PATCH");
        assert_eq!(t.cached(&uid(&pod)).await, None, "the status of the old pod is dropped");
        assert_eq!(api_status(&t.api("web")), PodStatus::default(), "the new pod is untouched");
    })
    .await;
}

/// The lines upstream's `syncPod` logs: "Status for pod updated successfully" (verbosity 3:
/// debug) for a write that changed the pod, and for a failure the request that failed, "Failed
/// to get status for pod" for a GET (info), each with klog's keys in upstream's order
/// (`pod`, `statusVersion`, `status`; `podUID`, `pod`, `err`). Before, a written status was not
/// logged and every failure read "Failed to update status for pod"; then the keys were the
/// engine's (`pod_uid`, `version`, `error`, the pod's name without its namespace). The syncer
/// handles outcomes on the test's thread, where the log is captured.
#[actix::test]
async fn a_written_status_and_a_failed_get_are_logged_with_upstreams_lines() {
    bounded(LIMIT, async {
        let log = CapturedLog::default();
        let _guard = log.capture_at(tracing::Level::DEBUG);
        let logged = |text: &str| log.lines_with(text);

        let t = SyncTest::start().await;
        let syncer = t.syncer().await;
        let pod = bound(test_pod("web").container("app"));
        t.pods.add(&pod);
        t.fake.insert_pod((*pod).clone());
        t.set_status(&pod, status_of(&pod, "Running", vec![container("app", true)])).await;
        t.flush(&syncer).await;
        let written = logged("Status for pod updated successfully");
        assert_eq!(written.len(), 1, "{written:?}");
        assert!(written[0].starts_with("DEBUG"), "{written:?}");
        // klog's keys in upstream's order, the status as klog writes a struct (its JSON).
        let (_, fields) = written[0].split_once("Status for pod updated successfully ").unwrap();
        let (before, json) = fields.split_once(" status=").unwrap();
        assert_eq!(before, r#"pod="default/web" statusVersion=1"#, "{written:?}");
        let status: serde_json::Value = serde_json::from_str(json).unwrap();
        assert_eq!(status["phase"], "Running", "{written:?}");

        let other = bound(test_pod("db").container("app"));
        t.pods.add(&other);
        t.fake.insert_pod((*other).clone());
        t.fake.inject(Fault {
            matcher: FaultMatcher::MethodPath(Method::GET, pod_path("db")),
            kind: FaultKind::Status { code: 500, retry_after: None },
            times: FaultTimes::Times(1),
        });
        t.set_status(&other, status_of(&other, "Running", vec![container("app", true)])).await;
        eventually(Duration::from_secs(5), "the GET failed", || t.count(&Method::GET) >= 1).await;
        t.flush(&syncer).await;
        let failed = logged("Failed to get status for pod");
        assert!(!failed.is_empty() && failed.iter().all(|l| l.starts_with("INFO")), "{failed:?}");
        // Upstream's keys first, in its order; the wait until the next try is probelet's own.
        assert!(
            failed.iter().all(|l| l
                .contains(r#"Failed to get status for pod podUID="uid-db" pod="default/db" err="get: "#)
                && l.contains(" retry_in=")),
            "{failed:?}"
        );
        assert!(logged("Failed to update status for pod").is_empty(), "a failed GET is no failed update");
    })
    .await;
}

/// Our merge base is a cache, and a cache can be behind: a watch copy of the pod's previous
/// incarnation must not be taken for "the pod was recreated" while the API already holds ours.
#[actix::test]
async fn a_stale_watch_copy_of_a_previous_pod_is_checked_with_a_get() {
    bounded(LIMIT, async {
        let t = SyncTest::start().await;
        let syncer = t.syncer().await;
        let pod = bound(test_pod("web").container("app"));
        t.pods.add(&pod);
        let previous = t.fake.insert_pod(with_uid(&pod, "uid-web-previous"));
        syncer.send(ApiPodObserved::of(Arc::new(previous))).await.unwrap();
        // Deleted and created again; the watch has not said so yet.
        t.fake.insert_pod((*pod).clone());
        t.fake.clear_requests();

        t.set_status(&pod, status_of(&pod, "Running", vec![container("app", true)])).await;
        t.flush(&syncer).await;

        assert_eq!(
            t.summary(),
            [(Method::GET, pod_path("web"), Some(200)), (Method::PATCH, status_path("web"), Some(200))]
        );
        assert!(t.cached(&uid(&pod)).await.is_some(), "the status of the live pod is kept");
        assert_eq!(readiness(&api_status(&t.api("web"))), [("app".to_owned(), true)]);
    })
    .await;
}

/// An etcd restored from a backup without `--bump-revision` sets the pod's resourceVersion back
/// below the copy the syncer holds (its own PATCH's answer). A watch event that old is stale and
/// ignored; the same copy from a list makes the syncer read the pod again and write it at once.
#[actix::test]
async fn a_listed_copy_older_than_the_one_held_is_read_again_and_written() {
    bounded(LIMIT, async {
        let t = SyncTest::start().await;
        let syncer = t.syncer().await;
        let pod = bound(test_pod("web").container("app"));
        t.pods.add(&pod);
        t.fake.insert_pod((*pod).clone());
        let backup = t.fake.backup();
        t.set_status(&pod, status_of(&pod, "Running", vec![container("app", true)])).await;
        t.flush(&syncer).await;
        assert_eq!(readiness(&api_status(&t.api("web"))), [("app".to_owned(), true)]);

        t.fake.restore(backup);
        t.fake.clear_requests();
        let restored = Arc::new(t.api("web"));
        assert_eq!(api_status(&restored), PodStatus::default(), "the backup's status");
        syncer.send(ApiPodObserved::of(restored.clone())).await.unwrap();
        t.flush(&syncer).await;
        assert_eq!(t.summary(), [], "an older watch event is stale");

        syncer.send(ApiPodListed(Arc::new(restored.as_ref().clone().into()))).await.unwrap();
        t.flush(&syncer).await;
        assert_eq!(
            t.summary(),
            [(Method::GET, pod_path("web"), Some(200)), (Method::PATCH, status_path("web"), Some(200))]
        );
        assert_eq!(readiness(&api_status(&t.api("web"))), [("app".to_owned(), true)]);
    })
    .await;
}

// === the patch (docs/sync.md §5.10 step 4, docs/status-manager.md §5.12) ===

#[actix::test]
async fn an_api_status_equal_to_the_merged_one_sends_no_patch() {
    bounded(LIMIT, async {
        let t = SyncTest::start().await;
        let pod = bound(test_pod("web").container("app"));
        t.pods.add(&pod);
        // The API already holds exactly the status manager's status.
        let stored = t.set_status(&pod, status_of(&pod, "Running", vec![container("app", true)])).await;
        let mut on_api = (*pod).clone();
        on_api.status = Some(stored.status.decode().unwrap());
        t.fake.insert_pod(on_api);
        t.fake.clear_requests();

        // Cold: the syncer has no copy of the pod, so it GETs, and the patch is empty.
        let cold = t.syncer().await;
        cold.send(Reconcile).await.unwrap();
        t.flush(&cold).await;
        assert_eq!(t.summary(), [(Method::GET, pod_path("web"), Some(200))]);
        assert_eq!(cold.send(GetWrittenVersion(uid(&pod))).await.unwrap(), Some(stored.version));

        // Warm: a syncer that saw the watch event sends nothing at all.
        t.fake.clear_requests();
        let warm = t.syncer().await;
        warm.send(ApiPodObserved::of(Arc::new(t.api("web")))).await.unwrap();
        warm.send(Reconcile).await.unwrap();
        t.flush(&warm).await;
        assert_eq!(t.summary(), []);
        assert_eq!(warm.send(GetWrittenVersion(uid(&pod))).await.unwrap(), Some(stored.version));
    })
    .await;
}

#[actix::test]
async fn updates_that_arrive_together_are_one_patch_with_the_last_state() {
    bounded(LIMIT, async {
        let t = SyncTest::start().await;
        let syncer = t.syncer().await;
        let pod = bound(test_pod("web").container("a").container("b").container("c"));
        t.pods.add(&pod);
        t.fake.insert_pod((*pod).clone());
        let none_ready = vec![container("a", false), container("b", false), container("c", false)];
        t.set_status(&pod, status_of(&pod, "Running", none_ready)).await;
        t.flush(&syncer).await;
        assert_eq!(t.count(&Method::PATCH), 1);
        t.fake.clear_requests();

        for name in ["a", "b", "c"] {
            t.pipeline.status_manager.do_send(set_ready(&pod, name, true));
        }
        t.flush(&syncer).await;

        assert_eq!(t.summary(), [(Method::PATCH, status_path("web"), Some(200))], "one write");
        let body = t.requests_of(&Method::PATCH)[0].body.clone().unwrap();
        let sent: Vec<(&str, bool)> = body["status"]["containerStatuses"]
            .as_array()
            .unwrap()
            .iter()
            .map(|c| (c["name"].as_str().unwrap(), c["ready"].as_bool().unwrap()))
            .collect();
        assert_eq!(sent, [("a", true), ("b", true), ("c", true)], "the last state");
        let api = api_status(&t.api("web"));
        let cached = t.cached(&uid(&pod)).await.unwrap();
        assert_eq!(readiness(&api), readiness(&cached));
        assert_eq!(owned_conditions(&api), owned_conditions(&cached));
        assert_eq!(condition_status(&api, POD_READY).as_deref(), Some("True"));
    })
    .await;
}

#[actix::test]
async fn the_patch_is_a_strategic_merge_with_the_uid_that_keeps_foreign_conditions() {
    bounded(LIMIT, async {
        let t = SyncTest::start().await;
        let syncer = t.syncer().await;
        let foreign = PodStatus {
            conditions: Some(vec![condition(FEATURE, "True"), condition(GATE, "True")]),
            ..Default::default()
        };
        let pod = bound(test_pod("web").container("app").readiness_gate(GATE).with_status(foreign));
        t.pods.add(&pod);
        t.fake.insert_pod((*pod).clone());
        t.set_status(&pod, status_of(&pod, "Running", vec![container("app", false)])).await;
        t.flush(&syncer).await;

        let patches = t.requests_of(&Method::PATCH);
        assert_eq!(patches.len(), 1);
        let patch = &patches[0];
        assert_eq!(patch.path, status_path("web"));
        assert_eq!(patch.content_type.as_deref(), Some("application/strategic-merge-patch+json"));
        let body = patch.body.clone().unwrap();
        assert_eq!(body["metadata"]["uid"], json!(uid(&pod)), "the UID precondition");
        let order: Vec<&str> = body["status"]["$setElementOrder/conditions"]
            .as_array()
            .expect("$setElementOrder/conditions")
            .iter()
            .map(|c| c["type"].as_str().unwrap())
            .collect();
        assert_eq!(
            order,
            [FEATURE, GATE, "Initialized", "Ready", "ContainersReady", "PodScheduled"],
            "foreign conditions first, in place"
        );
        assert!(body["status"].get("$setElementOrder/containerStatuses").is_none(), "atomic list");
        let stored = api_status(&t.api("web"));
        assert_eq!(condition_status(&stored, FEATURE).as_deref(), Some("True"));
        assert_eq!(condition_status(&stored, GATE).as_deref(), Some("True"));

        // Someone else turns their feature off; our next write leaves it off.
        patch_by_someone_else(
            &t,
            "web",
            json!({"status": {"conditions": [{"type": FEATURE, "status": "False"}]}}),
        )
        .await;
        t.pipeline.status_manager.do_send(set_ready(&pod, "app", true));
        t.flush(&syncer).await;
        let stored = api_status(&t.api("web"));
        assert_eq!(condition_status(&stored, POD_READY).as_deref(), Some("True"), "our write landed");
        assert_eq!(condition_status(&stored, FEATURE).as_deref(), Some("False"), "theirs survived");
        assert_eq!(condition_status(&stored, GATE).as_deref(), Some("True"));
    })
    .await;
}

// === the merge base (docs/sync.md §7.4: GET only without a copy or after an error) ===

/// A pod deleted and made again under its name, the new one seen first (a watch's re-list):
/// the old pod's deletion, told with its UID, keeps the new pod's copy, so the new pod's write
/// needs no GET. A deletion of the pod held still drops it.
#[actix::test]
async fn the_deletion_of_a_pod_made_again_under_its_name_keeps_the_new_pods_copy() {
    bounded(LIMIT, async {
        let t = SyncTest::start().await;
        let syncer = t.syncer().await;
        let pod = bound(test_pod("web").container("app"));
        t.pods.add(&pod);
        let api = t.fake.insert_pod((*pod).clone());
        let uid = api.metadata.uid.clone().expect("a UID");
        syncer.send(ApiPodObserved::of(Arc::new(api))).await.unwrap();
        let older = ApiPodDeleted {
            namespace: "default".into(),
            name: "web".into(),
            uid: Some("an-older-web".into()),
        };
        syncer.send(older).await.unwrap();
        t.set_status(&pod, status_of(&pod, "Running", vec![container("app", false)])).await;
        t.flush(&syncer).await;
        assert_eq!(t.summary(), [(Method::PATCH, status_path("web"), Some(200))], "no GET");

        t.fake.clear_requests();
        syncer
            .send(ApiPodDeleted { namespace: "default".into(), name: "web".into(), uid: Some(uid) })
            .await
            .unwrap();
        t.pipeline.status_manager.do_send(set_ready(&pod, "app", true));
        t.flush(&syncer).await;
        assert_eq!(
            t.summary(),
            [(Method::GET, pod_path("web"), Some(200)), (Method::PATCH, status_path("web"), Some(200))],
            "the copy of the deleted pod is gone"
        );
    })
    .await;
}

#[actix::test]
async fn a_warm_watch_cache_saves_the_get_until_a_patch_fails() {
    bounded(LIMIT, async {
        let t = SyncTest::start().await;
        let syncer = t.syncer().await;
        let pod = bound(test_pod("web").container("app"));
        t.pods.add(&pod);
        let api = t.fake.insert_pod((*pod).clone());
        syncer.send(ApiPodObserved::of(Arc::new(api))).await.unwrap();
        t.set_status(&pod, status_of(&pod, "Running", vec![container("app", false)])).await;
        t.flush(&syncer).await;
        assert_eq!(t.summary(), [(Method::PATCH, status_path("web"), Some(200))], "no GET");

        // The last PATCH response is the next merge base.
        t.fake.clear_requests();
        t.pipeline.status_manager.do_send(set_ready(&pod, "app", true));
        t.flush(&syncer).await;
        assert_eq!(t.summary(), [(Method::PATCH, status_path("web"), Some(200))]);

        // After a failed PATCH the copy is suspect: the retry GETs first.
        t.fake.clear_requests();
        t.fake.inject(Fault {
            matcher: FaultMatcher::MethodPath(Method::PATCH, status_path("web")),
            kind: FaultKind::status(500),
            times: FaultTimes::Times(1),
        });
        t.pipeline.status_manager.do_send(set_ready(&pod, "app", false));
        t.flush(&syncer).await;
        assert_eq!(
            t.summary(),
            [
                (Method::PATCH, status_path("web"), Some(500)),
                (Method::GET, pod_path("web"), Some(200)),
                (Method::PATCH, status_path("web"), Some(200)),
            ]
        );
        assert_eq!(condition_status(&api_status(&t.api("web")), POD_READY).as_deref(), Some("False"));
    })
    .await;
}

// === errors (docs/sync.md §7.2) ===

#[actix::test]
async fn a_pod_recreated_between_get_and_patch_is_dropped_without_retry() {
    bounded(LIMIT, async {
        let t = SyncTest::start().await;
        let syncer = t.syncer().await;
        let pod = bound(test_pod("web").container("app"));
        t.pods.add(&pod);
        t.fake.insert_pod((*pod).clone());
        // Hold the PATCH long enough to recreate the pod under it.
        t.fake.inject(Fault {
            matcher: FaultMatcher::MethodPath(Method::PATCH, status_path("web")),
            kind: FaultKind::Delay(Duration::from_millis(300)),
            times: FaultTimes::Times(1),
        });
        t.set_status(&pod, status_of(&pod, "Running", vec![container("app", true)])).await;
        eventually(Duration::from_secs(5), "the PATCH reached the fake", || t.count(&Method::PATCH) == 1)
            .await;
        t.fake.insert_pod(with_uid(&pod, "uid-web-2"));
        t.flush(&syncer).await;

        assert_eq!(
            t.summary(),
            [
                (Method::GET, pod_path("web"), Some(200)),
                (Method::PATCH, status_path("web"), Some(422)),
                (Method::GET, pod_path("web"), Some(200)),
            ],
            "the 422 on metadata.uid confirmed with a GET"
        );
        assert_eq!(t.cached(&uid(&pod)).await, None, "the status of the old pod is dropped");
        syncer.send(Reconcile).await.unwrap();
        t.flush(&syncer).await;
        assert_eq!(t.fake.requests().len(), 3, "not retried");
        assert_eq!(api_status(&t.api("web")), PodStatus::default(), "the new pod is untouched");
    })
    .await;
}

/// The 422 the real server gives a patch whose `metadata.uid` is not the pod's (fixture 9 of
/// `pod-status-patches.json`): the cause names `metadata.uid`, twice.
fn uid_mismatch(name: &str, wrong_uid: &str) -> Value {
    let cause = json!({"reason": "FieldValueInvalid", "field": "metadata.uid",
                       "message": format!("Invalid value: \"{wrong_uid}\": field is immutable")});
    json!({"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
           "message": format!("Pod \"{name}\" is invalid: metadata.uid: Invalid value: \"{wrong_uid}\": field is immutable"),
           "reason": "Invalid", "details": {"name": name, "kind": "Pod", "causes": [cause.clone(), cause]},
           "code": 422})
}

/// A 422 whose cause names `metadata.uid` while the server's pod is ours (a webhook, a cause
/// stated wrongly) is confirmed with a GET and, the UID being the same, taken as an ordinary
/// 422: the status is kept, and the next full reconcile writes it.
#[actix::test]
async fn a_422_naming_the_uid_of_a_pod_not_recreated_keeps_the_status() {
    bounded(LIMIT, async {
        let t = SyncTest::start().await;
        let syncer = t.syncer().await;
        let pod = bound(test_pod("web").container("app"));
        t.pods.add(&pod);
        let on_api = t.fake.insert_pod((*pod).clone());
        syncer.send(ApiPodObserved::of(Arc::new(on_api))).await.unwrap();
        t.fake.inject(Fault {
            matcher: FaultMatcher::MethodPath(Method::PATCH, status_path("web")),
            kind: FaultKind::Body { code: 422, body: uid_mismatch("web", &uid(&pod)) },
            times: FaultTimes::Times(1),
        });
        t.set_status(&pod, status_of(&pod, "Running", vec![container("app", true)])).await;
        t.flush(&syncer).await;
        assert_eq!(
            t.summary(),
            [(Method::PATCH, status_path("web"), Some(422)), (Method::GET, pod_path("web"), Some(200))],
            "confirmed with one GET"
        );
        assert!(t.cached(&uid(&pod)).await.is_some(), "the same pod: its status is kept");
        assert_eq!(condition_status(&api_status(&t.api("web")), POD_READY), None);

        t.fake.clear_requests();
        syncer.send(Reconcile).await.unwrap();
        t.flush(&syncer).await;
        assert_eq!(t.count(&Method::PATCH), 1, "written by the next reconcile: {:?}", t.summary());
        assert_eq!(condition_status(&api_status(&t.api("web")), POD_READY).as_deref(), Some("True"));
        assert_eq!(syncer.send(GetWrittenVersion(uid(&pod))).await.unwrap(), Some(1));
    })
    .await;
}

/// The GET that confirms a 422 naming `metadata.uid` fails (500): the write is a failure, kept
/// and retried on the failure back-off, not dropped as a recreated pod's.
#[actix::test]
async fn a_failed_get_confirming_a_422_on_the_uid_is_retried_and_the_status_lands() {
    bounded(LIMIT, async {
        let t = SyncTest::start().await;
        let syncer = t.syncer().await;
        let pod = bound(test_pod("web").container("app"));
        t.pods.add(&pod);
        let on_api = t.fake.insert_pod((*pod).clone());
        syncer.send(ApiPodObserved::of(Arc::new(on_api))).await.unwrap();
        t.fake.inject(Fault {
            matcher: FaultMatcher::MethodPath(Method::PATCH, status_path("web")),
            kind: FaultKind::Body { code: 422, body: uid_mismatch("web", &uid(&pod)) },
            times: FaultTimes::Times(1),
        });
        t.fake.inject(Fault {
            matcher: FaultMatcher::MethodPath(Method::GET, pod_path("web")),
            kind: FaultKind::status(500),
            times: FaultTimes::Times(1),
        });
        t.set_status(&pod, status_of(&pod, "Running", vec![container("app", true)])).await;
        t.flush(&syncer).await;
        let summary = t.summary();
        assert_eq!(
            summary[..2],
            [(Method::PATCH, status_path("web"), Some(422)), (Method::GET, pod_path("web"), Some(500))],
            "{summary:?}"
        );
        assert!(t.cached(&uid(&pod)).await.is_some(), "not taken for a recreated pod");
        assert_eq!(
            condition_status(&api_status(&t.api("web")), POD_READY).as_deref(),
            Some("True"),
            "{summary:?}"
        );
        assert_eq!(syncer.send(GetWrittenVersion(uid(&pod))).await.unwrap(), Some(1));
    })
    .await;
}

/// A PATCH the server never answers (or answers after an hour: kube's own retry sleeps out a
/// 429's `Retry-After`) fails after the request timeout and is retried with the back-off, so
/// one silent request cannot hold the pod's status, nor a write slot, for good.
#[actix::test]
async fn a_request_without_an_answer_times_out_and_the_write_is_retried() {
    bounded(LIMIT, async {
        let t = SyncTest::start().await;
        let syncer = t
            .syncer_with(|config| {
                config.request_timeout = Duration::from_millis(300);
                config.concurrency = 1;
            })
            .await;
        let pod = bound(test_pod("web").container("app"));
        t.pods.add(&pod);
        t.fake.insert_pod((*pod).clone());
        t.fake.inject(Fault {
            matcher: FaultMatcher::MethodPath(Method::PATCH, status_path("web")),
            kind: FaultKind::Delay(Duration::from_secs(3600)),
            times: FaultTimes::Times(1),
        });
        t.set_status(&pod, status_of(&pod, "Running", vec![container("app", true)])).await;
        t.flush(&syncer).await;
        assert_eq!(condition_status(&api_status(&t.api("web")), POD_READY).as_deref(), Some("True"));
        assert_eq!(t.count(&Method::PATCH), 2, "the silent PATCH, then the retry: {:?}", t.summary());
    })
    .await;
}

/// A 422 is not retried in a loop, nor for watch events, but it is not given up either, as
/// the kubelet retries it at each batch: full reconciles send it again after 1, 2, 4, … of
/// them (docs/sync.md §7.5). A new version goes at once.
#[actix::test]
async fn a_patch_the_server_rejects_as_invalid_is_retried_by_reconciles_that_double() {
    bounded(LIMIT, async {
        let t = SyncTest::start().await;
        let syncer = t.syncer().await;
        let pod = bound(test_pod("web").container("app"));
        t.pods.add(&pod);
        t.fake.insert_pod((*pod).clone());
        let mut bad = status_of(&pod, "Running", vec![container("app", true)]);
        bad.pod_ip = Some("not-an-ip".into());
        bad.pod_ips = Some(vec![k8s_openapi::api::core::v1::PodIP { ip: "not-an-ip".into() }]);
        t.set_status(&pod, bad).await;
        t.flush(&syncer).await;
        assert_eq!(
            t.summary(),
            [(Method::GET, pod_path("web"), Some(200)), (Method::PATCH, status_path("web"), Some(422))]
        );
        assert!(t.cached(&uid(&pod)).await.is_some(), "an invalid status is not a deleted pod");

        let mut sent_at = Vec::new();
        for round in 1..=8 {
            t.fake.clear_requests();
            syncer.send(ApiPodObserved::of(Arc::new(t.api("web")))).await.unwrap();
            t.flush(&syncer).await;
            assert_eq!(t.count(&Method::PATCH), 0, "a watch event sends nothing");
            syncer.send(Reconcile).await.unwrap();
            t.flush(&syncer).await;
            match t.count(&Method::PATCH) {
                0 => {}
                1 => sent_at.push(round),
                n => panic!("{n} patches in one reconcile: {:?}", t.summary()),
            }
        }
        assert_eq!(sent_at, [1, 3, 7], "sent again by the 1st reconcile, then after 2, then after 4");

        // A new version is written at once.
        t.fake.clear_requests();
        t.set_status(&pod, status_of(&pod, "Running", vec![container("app", true)])).await;
        t.flush(&syncer).await;
        assert_eq!(t.count(&Method::PATCH), 1);
        assert_eq!(t.requests_of(&Method::PATCH)[0].code, Some(200));
    })
    .await;
}

/// A version rejected once, for a cause that then goes away (say one in the server's copy),
/// reaches the server at the next full reconcile without any new version: a status is never
/// lost to one 422.
#[actix::test]
async fn a_version_rejected_once_lands_at_the_next_reconcile() {
    bounded(LIMIT, async {
        let t = SyncTest::start().await;
        let syncer = t.syncer().await;
        let pod = bound(test_pod("web").container("app"));
        t.pods.add(&pod);
        t.fake.insert_pod((*pod).clone());
        t.fake.inject(Fault {
            matcher: FaultMatcher::MethodPath(Method::PATCH, status_path("web")),
            kind: FaultKind::status(422),
            times: FaultTimes::Times(1),
        });
        t.set_status(&pod, status_of(&pod, "Running", vec![container("app", true)])).await;
        t.flush(&syncer).await;
        assert_eq!(t.requests_of(&Method::PATCH)[0].code, Some(422));
        assert_eq!(condition_status(&api_status(&t.api("web")), POD_READY), None);

        syncer.send(Reconcile).await.unwrap();
        t.flush(&syncer).await;
        assert_eq!(condition_status(&api_status(&t.api("web")), POD_READY).as_deref(), Some("True"));
        assert_eq!(t.count(&Method::PATCH), 2, "{:?}", t.summary());
    })
    .await;
}

#[actix::test]
async fn failed_writes_back_off_exponentially_until_they_succeed() {
    bounded(LIMIT, async {
        let t = SyncTest::start().await;
        let initial = Duration::from_millis(50);
        let syncer = t
            .syncer_with(|c| {
                c.backoff_initial = initial;
                c.backoff_max = Duration::from_secs(2);
            })
            .await;
        let (pod, arrivals) = web_with_failing_patches(&t, &syncer, 500, 3).await;
        t.set_status(&pod, status_of(&pod, "Running", vec![container("app", true)])).await;
        t.flush(&syncer).await;

        let (get, patch) = (pod_path("web"), status_path("web"));
        assert_eq!(
            t.summary(),
            [
                (Method::PATCH, patch.clone(), Some(500)),
                (Method::GET, get.clone(), Some(200)),
                (Method::PATCH, patch.clone(), Some(500)),
                (Method::GET, get.clone(), Some(200)),
                (Method::PATCH, patch.clone(), Some(500)),
                (Method::GET, get, Some(200)),
                (Method::PATCH, patch, Some(200)),
            ],
            "four attempts, the last one succeeds"
        );
        let arrivals = arrivals.lock().unwrap().clone();
        assert_eq!(arrivals.len(), 4);
        let gaps: Vec<Duration> = arrivals.windows(2).map(|w| w[1] - w[0]).collect();
        // On the paused clock each gap is the back-off itself (50, 100, 200 ms) made up to a
        // quarter shorter by the pod's UID, to the timer's millisecond.
        for (i, gap) in gaps.iter().enumerate() {
            let want = initial * 2u32.pow(i as u32);
            assert!(
                *gap >= want * 3 / 4 && *gap <= want + Duration::from_millis(2),
                "gap {i} is {gap:?}, the back-off is {want:?}"
            );
        }
        assert!(gaps[1] > gaps[0] && gaps[2] > gaps[1], "doubled: {gaps:?}");
        let cached = t.cached(&uid(&pod)).await.unwrap();
        assert_eq!(owned_conditions(&api_status(&t.api("web"))), owned_conditions(&cached));
    })
    .await;
}

/// A write throttled with a 429 that says when to come back (`Retry-After`, which the API server
/// also puts in the answer's `Status`) is sent again no sooner than that, as client-go waits it
/// out, where the back-off alone would send it after 50 ms; and then it lands.
#[actix::test]
async fn a_throttled_write_waits_as_long_as_the_server_asked() {
    bounded(LIMIT, async {
        let t = SyncTest::start().await;
        let syncer = t
            .syncer_with(|c| {
                c.backoff_initial = Duration::from_millis(50);
                c.backoff_max = Duration::from_secs(2);
            })
            .await;
        let (pod, arrivals) = web_with_faulty_patches(&t, &syncer, FaultKind::too_many_requests(3), 1).await;
        t.set_status(&pod, status_of(&pod, "Running", vec![container("app", true)])).await;
        t.flush(&syncer).await;

        let arrivals = arrivals.lock().unwrap().clone();
        assert_eq!(arrivals.len(), 2, "throttled once, then written");
        let gap = arrivals[1] - arrivals[0];
        assert!(on_the_tick(gap, Duration::from_secs(3)), "the retry after {gap:?}, asked for 3 s");
        let cached = t.cached(&uid(&pod)).await.unwrap();
        assert_eq!(owned_conditions(&api_status(&t.api("web"))), owned_conditions(&cached));
    })
    .await;
}

/// Whether a wait measured on the paused clock is `want`: a timer fires on the first millisecond
/// tick at or after its deadline, and the wait itself may start a tick after the request it
/// follows arrived (the answer is handled when the runtime next turns, and which tick that is
/// depends on the order its tasks run in): so up to 2 ms more. (With 1 ms, the conflict test
/// below failed in most runs on a loaded machine, a conflict of 185.8 ms measuring 187.)
fn on_the_tick(measured: Duration, want: Duration) -> bool {
    measured >= want && measured <= want + Duration::from_millis(2)
}

/// Pod `web` bound, on the server and seen by the syncer, whose next `n` status PATCHes are
/// answered `code`; with the times the PATCHes arrive.
async fn web_with_failing_patches(
    t: &SyncTest,
    syncer: &actix::Addr<StatusSyncer>,
    code: u16,
    n: u32,
) -> (Arc<Pod>, Arc<Mutex<Vec<Instant>>>) {
    web_with_faulty_patches(t, syncer, FaultKind::status(code), n).await
}

/// [`web_with_failing_patches`] with the answer given as a fault.
async fn web_with_faulty_patches(
    t: &SyncTest,
    syncer: &actix::Addr<StatusSyncer>,
    kind: FaultKind,
    n: u32,
) -> (Arc<Pod>, Arc<Mutex<Vec<Instant>>>) {
    let pod = bound(test_pod("web").container("app"));
    t.pods.add(&pod);
    let api = t.fake.insert_pod((*pod).clone());
    syncer.send(ApiPodObserved::of(Arc::new(api))).await.unwrap();
    let arrivals = patch_arrivals(t);
    t.fake.inject(Fault {
        matcher: FaultMatcher::MethodPath(Method::PATCH, status_path("web")),
        kind,
        times: FaultTimes::Times(n),
    });
    (pod, arrivals)
}

/// The arrival time (on the paused clock) of each PATCH.
fn patch_arrivals(t: &SyncTest) -> Arc<Mutex<Vec<Instant>>> {
    t.fake.arrivals(Method::PATCH, |_| true)
}

// === deletion (docs/sync.md §5.10 step 9, canBeDeleted) ===

#[actix::test]
async fn a_finished_terminating_pod_is_deleted_with_grace_zero_and_its_uid() {
    bounded(LIMIT, async {
        let t = SyncTest::start().await;
        let syncer = t.syncer().await;
        let pod = bound(test_pod("job").container("app").restart_policy("Never"));
        t.pods.add(&pod);
        t.fake.insert_pod((*pod).clone());
        t.set_status(&pod, status_of(&pod, "Running", vec![container("app", true)])).await;
        t.flush(&syncer).await;

        // A user deletes the pod: it stays, terminating, until the kubelet is done with it.
        let client: Api<Pod> = Api::namespaced(t.fake.in_process_client(), NS);
        client.delete("job", &DeleteParams::default()).await.unwrap();
        let terminating = Arc::new(t.api("job"));
        assert!(terminating.metadata.deletion_timestamp.is_some());
        syncer.send(ApiPodObserved::of(terminating.clone())).await.unwrap();
        t.pods.add(&terminating);
        t.fake.clear_requests();

        // Still running: the forced status is synced, nothing deleted.
        t.set_status(&terminating, status_of(&terminating, "Running", vec![container("app", true)])).await;
        t.flush(&syncer).await;
        assert_eq!(t.count(&Method::DELETE), 0, "not while running");

        // The container exited: the terminal phase is written, still no DELETE before
        // TerminatePod.
        let exited = vec![terminated("app", "cri://app", 0)];
        t.set_status(&terminating, status_of(&terminating, "Succeeded", exited)).await;
        t.flush(&syncer).await;
        syncer.send(Reconcile).await.unwrap();
        t.flush(&syncer).await;
        assert_eq!(api_status(&t.api("job")).phase.as_deref(), Some("Succeeded"));
        assert_eq!(t.count(&Method::DELETE), 0, "not before TerminatePod");
        assert!(t.cached(&uid(&pod)).await.is_some());

        t.pipeline.terminate_pod(terminating.clone());
        t.flush(&syncer).await;
        let deletes = t.requests_of(&Method::DELETE);
        assert_eq!(deletes.len(), 1, "{:?}", t.summary());
        assert_eq!((deletes[0].path.as_str(), deletes[0].code), (pod_path("job").as_str(), Some(200)));
        let body = deletes[0].body.clone().unwrap();
        assert_eq!(body["gracePeriodSeconds"], json!(0));
        assert_eq!(body["preconditions"]["uid"], json!(uid(&pod)));
        assert!(t.fake.pod(NS, "job").is_none(), "gone from the API");
        assert_eq!(t.cached(&uid(&pod)).await, None, "and from the status manager");
    })
    .await;
}

#[actix::test]
async fn a_mirror_pod_is_never_deleted() {
    bounded(LIMIT, async {
        let t = SyncTest::start().await;
        let syncer = t.syncer().await;
        let static_pod = bound(test_pod("etcd-node-a").container("etcd").restart_policy("Never"));
        t.pods.add_static(&static_pod, Some("mirror-etcd"));
        t.fake.insert_pod(mirror_of(&static_pod, "mirror-etcd"));
        t.set_status(&static_pod, status_of(&static_pod, "Running", vec![container("etcd", true)])).await;
        t.flush(&syncer).await;
        assert_eq!(t.count(&Method::PATCH), 1);

        let client: Api<Pod> = Api::namespaced(t.fake.in_process_client(), NS);
        client.delete("etcd-node-a", &DeleteParams::default()).await.unwrap();
        syncer.send(ApiPodObserved::of(Arc::new(t.api("etcd-node-a")))).await.unwrap();
        t.fake.clear_requests();

        let exited = vec![terminated("etcd", "cri://etcd", 0)];
        t.set_status(&static_pod, status_of(&static_pod, "Succeeded", exited)).await;
        t.pipeline.terminate_pod(static_pod.clone());
        t.flush(&syncer).await;
        syncer.send(Reconcile).await.unwrap();
        t.flush(&syncer).await;

        let mirror = t.api("etcd-node-a");
        assert_eq!(api_status(&mirror).phase.as_deref(), Some("Succeeded"), "the status was written");
        assert!(mirror.metadata.deletion_timestamp.is_some());
        assert_eq!(t.count(&Method::DELETE), 0, "a mirror pod is never deleted: {:?}", t.summary());
    })
    .await;
}

/// A mirror pod deleted and recreated for the same static pod while the syncer's PATCH was on
/// its way: the PATCH carries the old mirror's UID and gets a 422 on `metadata.uid`; the
/// confirming GET shows a pod that is still ours (the host knows the new mirror), under a new
/// UID. It is written from a fresh copy on the failure back-off, not left for a whole
/// reconcile as an invalid write (review).
#[actix::test]
async fn a_mirror_pod_recreated_under_a_patch_is_written_again_soon() {
    bounded(LIMIT, async {
        let t = SyncTest::start().await;
        let syncer = t.syncer().await;
        let static_pod = bound(test_pod("etcd-node-a").container("etcd"));
        t.pods.add_static(&static_pod, Some("mirror-1"));
        let on_api = t.fake.insert_pod(mirror_of(&static_pod, "mirror-1"));
        syncer.send(ApiPodObserved::of(Arc::new(on_api))).await.unwrap();
        // Hold the PATCH long enough to recreate the mirror pod under it.
        t.fake.inject(Fault {
            matcher: FaultMatcher::MethodPath(Method::PATCH, status_path("etcd-node-a")),
            kind: FaultKind::Delay(Duration::from_millis(300)),
            times: FaultTimes::Times(1),
        });
        t.set_status(&static_pod, status_of(&static_pod, "Running", vec![container("etcd", true)])).await;
        eventually(Duration::from_secs(5), "the PATCH reached the fake", || t.count(&Method::PATCH) == 1)
            .await;
        t.fake.insert_pod(mirror_of(&static_pod, "mirror-2"));
        t.pods.set_mirror(&uid(&static_pod), Some("mirror-2"));
        t.flush(&syncer).await;

        let summary = t.summary();
        assert_eq!(
            summary[..2],
            [
                (Method::PATCH, status_path("etcd-node-a"), Some(422)),
                (Method::GET, pod_path("etcd-node-a"), Some(200))
            ],
            "{summary:?}"
        );
        let mirror = t.api("etcd-node-a");
        assert_eq!(mirror.metadata.uid.as_deref(), Some("mirror-2"));
        assert_eq!(condition_status(&api_status(&mirror), POD_READY).as_deref(), Some("True"), "{summary:?}");
    })
    .await;
}

// === static pods (docs/status-manager.md §5.14) ===

#[actix::test]
async fn a_static_pods_status_goes_to_its_mirror_pod_once_one_exists() {
    bounded(LIMIT, async {
        let t = SyncTest::start().await;
        let syncer = t.syncer().await;
        let static_pod = bound(test_pod("kube-proxy-node-a").container("proxy"));
        t.pods.add_static(&static_pod, None);
        let stored = t
            .set_status(&static_pod, status_of(&static_pod, "Running", vec![container("proxy", true)]))
            .await;
        t.flush(&syncer).await;
        syncer.send(Reconcile).await.unwrap();
        t.flush(&syncer).await;
        assert_eq!(t.summary(), [], "skipped while there is no mirror pod");

        t.fake.insert_pod(mirror_of(&static_pod, "mirror-proxy"));
        t.pods.set_mirror(&uid(&static_pod), Some("mirror-proxy"));
        syncer.send(Reconcile).await.unwrap();
        t.flush(&syncer).await;

        assert_eq!(
            t.summary(),
            [
                (Method::GET, pod_path("kube-proxy-node-a"), Some(200)),
                (Method::PATCH, status_path("kube-proxy-node-a"), Some(200)),
            ]
        );
        let body = t.requests_of(&Method::PATCH)[0].body.clone().unwrap();
        assert_eq!(body["metadata"]["uid"], json!("mirror-proxy"), "the mirror pod's UID");
        let written = syncer.send(GetWrittenVersion("mirror-proxy".into())).await.unwrap();
        assert_eq!(written, Some(stored.version), "versions are recorded under the mirror UID");
        let api = api_status(&t.api("kube-proxy-node-a"));
        assert_eq!(owned_conditions(&api), owned_conditions(&stored.status.decode().unwrap()));
        assert_eq!(readiness(&api), [("proxy".to_owned(), true)]);
        assert!(t.cached("mirror-proxy").await.is_some(), "readable through the mirror UID");
    })
    .await;
}

// === reconcile (docs/sync.md §5.10 needsReconcile) ===

#[actix::test]
async fn drift_in_kubelet_owned_fields_is_rewritten_within_a_reconcile_period() {
    bounded(LIMIT, async {
        let t = SyncTest::start().await;
        let period = Duration::from_millis(500);
        let syncer = t.syncer_with(|c| c.reconcile_period = period).await;
        let foreign = PodStatus { conditions: Some(vec![condition(FEATURE, "True")]), ..Default::default() };
        let pod = bound(test_pod("web").container("app").with_status(foreign));
        t.pods.add(&pod);
        t.fake.insert_pod((*pod).clone());
        t.set_status(&pod, status_of(&pod, "Running", vec![container("app", true)])).await;
        t.flush(&syncer).await;
        assert_eq!(condition_status(&api_status(&t.api("web")), POD_READY).as_deref(), Some("True"));

        // Someone flips Ready; the watch tells the syncer.
        patch_by_someone_else(
            &t,
            "web",
            json!({"status": {"conditions": [{"type": POD_READY, "status": "False"}]}}),
        )
        .await;
        syncer.send(ApiPodObserved::of(Arc::new(t.api("web")))).await.unwrap();
        t.fake.clear_requests();
        eventually(period + Duration::from_millis(300), "Ready written back within a period", || {
            condition_status(&api_status(&t.api("web")), POD_READY).as_deref() == Some("True")
        })
        .await;
        assert_eq!(t.summary(), [(Method::PATCH, status_path("web"), Some(200))]);

        // A change to a condition the kubelet does not own is left alone.
        patch_by_someone_else(
            &t,
            "web",
            json!({"status": {"conditions": [{"type": FEATURE, "status": "False"}]}}),
        )
        .await;
        syncer.send(ApiPodObserved::of(Arc::new(t.api("web")))).await.unwrap();
        t.fake.clear_requests();
        syncer.send(Reconcile).await.unwrap();
        t.flush(&syncer).await;
        assert_eq!(t.summary(), [], "nothing to reconcile");
        assert_eq!(condition_status(&api_status(&t.api("web")), FEATURE).as_deref(), Some("False"));
    })
    .await;
}

#[actix::test]
async fn a_quantity_the_api_server_stores_in_its_canonical_text_is_no_drift() {
    bounded(LIMIT, async {
        let t = SyncTest::start().await;
        let syncer = t.syncer().await;
        let pod = bound(test_pod("sized").container("app"));
        t.pods.add(&pod);
        t.fake.insert_pod((*pod).clone());
        let cpu = |text: &str| {
            Some(BTreeMap::from([(
                "cpu".to_owned(),
                k8s_openapi::apimachinery::pkg::api::resource::Quantity(text.into()),
            )]))
        };
        let app = ContainerStatus { allocated_resources: cpu("1000m"), ..container("app", true) };
        t.set_status(&pod, status_of(&pod, "Running", vec![app])).await;
        t.flush(&syncer).await;

        // The API server keeps quantities in their canonical text: 1000m reads back as 1.
        let mut statuses = api_status(&t.api("sized")).container_statuses.unwrap();
        statuses[0].allocated_resources = cpu("1");
        patch_by_someone_else(&t, "sized", json!({"status": {"containerStatuses": statuses}})).await;
        let read_back = api_status(&t.api("sized")).container_statuses.unwrap();
        assert_eq!(read_back[0].allocated_resources, cpu("1"));
        syncer.send(ApiPodObserved::of(Arc::new(t.api("sized")))).await.unwrap();
        t.fake.clear_requests();
        syncer.send(Reconcile).await.unwrap();
        t.flush(&syncer).await;
        assert_eq!(t.summary(), [], "the same value: nothing to write");
    })
    .await;
}

// === readiness only (cluster mode: the node's runtime writes everything else) ===

fn readiness_only(config: &mut SyncerConfig) {
    config.owned_fields = OwnedFields::ReadinessOnly;
}

/// A running container as a runtime publishes it: an ID and a state, no readiness of its own.
fn published(name: &str, id: &str) -> ContainerStatus {
    ContainerStatus { container_id: Some(id.into()), ready: false, started: None, ..container(name, false) }
}

/// (name, containerID, ready, started) of the regular containers, sorted by name.
fn flags(status: &PodStatus) -> Vec<(String, String, bool, Option<bool>)> {
    let mut out: Vec<_> = status
        .container_statuses
        .iter()
        .flatten()
        .map(|c| (c.name.clone(), c.container_id.clone().unwrap_or_default(), c.ready, c.started))
        .collect();
    out.sort();
    out
}

fn flag(name: &str, id: &str, ready: bool, started: Option<bool>) -> (String, String, bool, Option<bool>) {
    (name.into(), id.into(), ready, started)
}

/// The runtime's status PATCH: the fields it owns, `containerStatuses` whole (an atomic list).
async fn runtime_writes(t: &SyncTest, name: &str, status: Value) {
    patch_by_someone_else(t, name, json!({ "status": status })).await;
}

fn patched_status_keys(body: &Value) -> Vec<String> {
    let mut keys: Vec<String> = body["status"].as_object().unwrap().keys().cloned().collect();
    keys.sort();
    keys
}

/// The status keys a readiness-only patch may carry.
const READINESS_KEYS: [&str; 4] =
    ["$setElementOrder/conditions", "conditions", "containerStatuses", "initContainerStatuses"];

#[actix::test]
async fn readiness_only_patches_readiness_and_never_undoes_the_runtime() {
    bounded(LIMIT, async {
        let t = SyncTest::start().await;
        let syncer = t.syncer_with(readiness_only).await;
        let published_status = PodStatus {
            phase: Some("Pending".into()),
            container_statuses: Some(vec![published("a", "cri://a"), published("b", "cri://b")]),
            ..Default::default()
        };
        let pod = bound(test_pod("web").container("a").container("b").with_status(published_status));
        t.pods.add(&pod);
        let on_api = t.fake.insert_pod((*pod).clone());
        syncer.send(ApiPodObserved::of(Arc::new(on_api.clone()))).await.unwrap();

        // Our status comes from an older view: its phase, pod IP and start time are not the API's.
        let ours = status_of(&pod, "Running", vec![container("a", true), container("b", false)]);
        let stored = t.set_status(&pod, ours).await;
        let stored_status = stored.status.decode().unwrap();
        assert!(stored_status.start_time.is_some() && stored_status.pod_ip.is_some());
        t.flush(&syncer).await;
        assert_eq!(t.summary(), [(Method::PATCH, status_path("web"), Some(200))]);
        let body = t.requests_of(&Method::PATCH)[0].body.clone().unwrap();
        assert_eq!(body["metadata"]["uid"], json!(uid(&pod)));
        assert_eq!(
            body["metadata"]["resourceVersion"],
            json!(on_api.metadata.resource_version.clone().unwrap()),
            "the merge base's version is a precondition"
        );
        let keys = patched_status_keys(&body);
        assert!(
            keys.iter().all(|k| READINESS_KEYS.contains(&k.as_str())),
            "only readiness is sent: {keys:?}"
        );
        let api = api_status(&t.api("web"));
        assert_eq!((api.phase.as_deref(), &api.pod_ip, &api.start_time), (Some("Pending"), &None, &None));
        assert_eq!(
            flags(&api),
            [flag("a", "cri://a", true, Some(true)), flag("b", "cri://b", false, Some(true))]
        );
        assert_eq!(owned_conditions(&api), owned_conditions(&stored.status.decode().unwrap()));

        // The runtime moves on: the pod runs with an IP, and b exits. The watch has not told the
        // syncer yet, so its merge base (the last PATCH response) is stale.
        let mut containers = api.container_statuses.clone().unwrap();
        let b = containers.iter_mut().find(|c| c.name == "b").unwrap();
        b.state = terminated("b", "cri://b", 0).state;
        runtime_writes(
            &t,
            "web",
            json!({"phase": "Running", "podIP": "10.9.9.9", "podIPs": [{"ip": "10.9.9.9"}],
                   "containerStatuses": containers}),
        )
        .await;
        t.fake.clear_requests();

        // A readiness change, merged into the stale copy: refused, merged again into a fresh one.
        t.pipeline.status_manager.do_send(set_ready(&pod, "a", false));
        t.flush(&syncer).await;
        assert_eq!(
            t.summary(),
            [
                (Method::PATCH, status_path("web"), Some(409)),
                (Method::GET, pod_path("web"), Some(200)),
                (Method::PATCH, status_path("web"), Some(200)),
            ]
        );
        let api = api_status(&t.api("web"));
        assert_eq!((api.phase.as_deref(), api.pod_ip.as_deref()), (Some("Running"), Some("10.9.9.9")));
        let b = api.container_statuses.iter().flatten().find(|c| c.name == "b").unwrap();
        assert!(b.state.as_ref().unwrap().terminated.is_some(), "the runtime's exit stays: {b:?}");
        assert_eq!(
            flags(&api),
            [flag("a", "cri://a", false, Some(true)), flag("b", "cri://b", false, Some(true))]
        );
        assert_eq!(condition_status(&api, CONTAINERS_READY).as_deref(), Some("False"));

        // The runtime restarts a under a new ID; the watch says so. Our readiness is of the old
        // container: the new one is left alone, only our conditions are written.
        let mut containers = api.container_statuses.clone().unwrap();
        let a = containers.iter_mut().find(|c| c.name == "a").unwrap();
        *a = ContainerStatus { restart_count: 1, ..published("a", "cri://a-2") };
        runtime_writes(&t, "web", json!({"containerStatuses": containers})).await;
        syncer.send(ApiPodObserved::of(Arc::new(t.api("web")))).await.unwrap();
        t.fake.clear_requests();
        t.pipeline.status_manager.do_send(set_ready(&pod, "a", true));
        t.flush(&syncer).await;
        assert_eq!(t.summary(), [(Method::PATCH, status_path("web"), Some(200))]);
        let body = t.requests_of(&Method::PATCH)[0].body.clone().unwrap();
        assert!(body["status"].get("containerStatuses").is_none(), "containers untouched: {body}");
        assert!(body["metadata"].get("resourceVersion").is_none(), "conditions need no precondition: {body}");
        let api = api_status(&t.api("web"));
        assert_eq!(
            flags(&api),
            [flag("a", "cri://a-2", false, None), flag("b", "cri://b", false, Some(true))],
            "the restarted container keeps the runtime's values"
        );
        let cached = t.cached(&uid(&pod)).await.unwrap();
        assert_eq!(owned_conditions(&api), owned_conditions(&cached));
    })
    .await;
}

#[actix::test]
async fn readiness_only_reconciles_drift_in_readiness_and_nothing_else() {
    bounded(LIMIT, async {
        let t = SyncTest::start().await;
        let syncer = t.syncer_with(readiness_only).await;
        let published_status = PodStatus {
            phase: Some("Running".into()),
            container_statuses: Some(vec![published("a", "cri://a")]),
            ..Default::default()
        };
        let pod = bound(test_pod("web").container("a").with_status(published_status));
        t.pods.add(&pod);
        t.fake.insert_pod((*pod).clone());
        t.set_status(&pod, status_of(&pod, "Running", vec![container("a", true)])).await;
        t.flush(&syncer).await;
        assert_eq!(condition_status(&api_status(&t.api("web")), POD_READY).as_deref(), Some("True"));

        // The runtime changes what it owns, and the watch tells the syncer: not drift.
        let mut containers = api_status(&t.api("web")).container_statuses.unwrap();
        containers[0].image_id = "sha256:abc".into();
        containers[0].state = running("a", "cri://a", epoch_plus(5)).state;
        runtime_writes(
            &t,
            "web",
            json!({"phase": "Pending", "podIP": "10.9.9.9", "podIPs": [{"ip": "10.9.9.9"}],
                   "containerStatuses": containers}),
        )
        .await;
        let runtime_view = api_status(&t.api("web"));
        syncer.send(ApiPodObserved::of(Arc::new(t.api("web")))).await.unwrap();
        t.fake.clear_requests();
        syncer.send(Reconcile).await.unwrap();
        t.flush(&syncer).await;
        assert_eq!(t.summary(), [], "nothing of ours drifted");
        assert_eq!(api_status(&t.api("web")), runtime_view);

        // Someone flips a's readiness: that is ours, and is written back, with the runtime's
        // fields as they are.
        let mut containers = runtime_view.container_statuses.clone().unwrap();
        containers[0].ready = false;
        runtime_writes(&t, "web", json!({"containerStatuses": containers})).await;
        syncer.send(ApiPodObserved::of(Arc::new(t.api("web")))).await.unwrap();
        t.fake.clear_requests();
        syncer.send(Reconcile).await.unwrap();
        t.flush(&syncer).await;
        assert_eq!(t.summary(), [(Method::PATCH, status_path("web"), Some(200))]);
        let api = api_status(&t.api("web"));
        assert_eq!(flags(&api), [flag("a", "cri://a", true, Some(true))]);
        assert_eq!(api, runtime_view, "everything else as the runtime left it");
    })
    .await;
}

/// A pod as a runtime published it: running with container a (`cri://a`), not ready.
fn published_pod(name: &str) -> Arc<Pod> {
    let published_status = PodStatus {
        phase: Some("Running".into()),
        container_statuses: Some(vec![published("a", "cri://a")]),
        ..Default::default()
    };
    bound(test_pod(name).container("a").with_status(published_status))
}

/// The next `n` status PATCHes of pod `name` are answered 409 Conflict.
fn conflicts(t: &SyncTest, name: &str, n: u32) {
    t.fake.inject(Fault {
        matcher: FaultMatcher::MethodPath(Method::PATCH, status_path(name)),
        kind: FaultKind::status(409),
        times: FaultTimes::Times(n),
    });
}

/// A pod that keeps changing under the writes: conflicts back off on a clock of their own, short
/// (50 ms doubling, up to 10 s), not the failure back-off, and the status lands.
#[actix::test]
async fn repeated_conflicts_back_off_briefly_and_the_status_lands() {
    bounded(LIMIT, async {
        let t = SyncTest::start().await;
        let syncer = t
            .syncer_with(|c| {
                readiness_only(c);
                // A failure back-off long enough to show if conflicts used it.
                c.backoff_initial = Duration::from_secs(30);
                c.backoff_max = Duration::from_secs(60);
            })
            .await;
        let pod = published_pod("web");
        t.pods.add(&pod);
        let on_api = t.fake.insert_pod((*pod).clone());
        syncer.send(ApiPodObserved::of(Arc::new(on_api))).await.unwrap();
        let arrivals = patch_arrivals(&t);
        conflicts(&t, "web", 3);

        let start = Instant::now();
        t.set_status(&pod, status_of(&pod, "Running", vec![container("a", true)])).await;
        t.flush(&syncer).await;
        let took = start.elapsed();

        let (get, patch) = (pod_path("web"), status_path("web"));
        assert_eq!(
            t.summary(),
            [
                (Method::PATCH, patch.clone(), Some(409)),
                (Method::GET, get.clone(), Some(200)),
                (Method::PATCH, patch.clone(), Some(409)),
                (Method::GET, get.clone(), Some(200)),
                (Method::PATCH, patch.clone(), Some(409)),
                (Method::GET, get, Some(200)),
                // After three conflicts in a row, the conditions alone, then the containers.
                (Method::PATCH, patch.clone(), Some(200)),
                (Method::PATCH, patch, Some(200)),
            ],
            "each conflict merged again from a fresh GET"
        );
        // The first conflict retried at once, then the two jittered waits; the 30 s failure
        // back-off never.
        let waits = [1, 2]
            .map(|n| jittered_backoff(Duration::from_millis(50), Duration::from_secs(10), n, &uid(&pod)));
        assert!(
            took >= waits[0] + waits[1] && took <= waits[0] + waits[1] + Duration::from_millis(2),
            "the status landed after {took:?}; the conflict waits are {waits:?}"
        );
        for (n, request) in t.requests_of(&Method::PATCH).into_iter().enumerate() {
            let body = request.body.unwrap();
            assert_eq!(
                body["metadata"]["resourceVersion"].is_string(),
                n != 3,
                "containers under a precondition, the conditions alone without: {body}"
            );
        }
        let arrivals = arrivals.lock().unwrap().clone();
        let mut gaps: Vec<Duration> = arrivals.windows(2).map(|w| w[1] - w[0]).collect();
        assert_eq!(gaps.len(), 4);
        assert_eq!(gaps.pop(), Some(Duration::ZERO), "the containers right after the conditions");
        // The first conflict is retried at once, then 50 ms and 100 ms, each up to a quarter
        // shorter (by the pod's UID: the same in every run).
        assert_eq!(gaps[0], Duration::ZERO, "the first conflict is retried at once: {gaps:?}");
        assert!(on_the_tick(gaps[1], waits[0]), "the second conflict waits {:?}: {gaps:?}", waits[0]);
        assert!(on_the_tick(gaps[2], waits[1]), "the third waits {:?}: {gaps:?}", waits[1]);
        assert!(waits[0] >= Duration::from_millis(37) && waits[1] >= Duration::from_millis(75), "{waits:?}");
        let api = api_status(&t.api("web"));
        assert_eq!(flags(&api), [flag("a", "cri://a", true, Some(true))]);
        assert_eq!(
            stats(&syncer).await,
            SyncerStats { statuses: 1, written: 1, merge_bases: 1, update_seqs: 1, ..SyncerStats::default() },
            "no back-off or floor left once written"
        );
    })
    .await;
}

/// A server that keeps answering 409 with nothing newer to merge into (no watch event, no new
/// status): the waits double up to the 10 s maximum rather than a GET and a PATCH a second for
/// good, and the status lands once the server takes it. (From the third conflict on, each write
/// sends the conditions alone first, refused here too; the write that lands sends them, then
/// the containers.)
#[actix::test]
async fn conflicts_that_go_on_wait_up_to_ten_seconds_and_the_status_still_lands() {
    bounded(Duration::from_secs(120), async {
        let t = SyncTest::start().await;
        let syncer = t.syncer_with(readiness_only).await;
        let pod = published_pod("web");
        t.pods.add(&pod);
        let on_api = t.fake.insert_pod((*pod).clone());
        syncer.send(ApiPodObserved::of(Arc::new(on_api))).await.unwrap();
        let arrivals = patch_arrivals(&t);
        conflicts(&t, "web", 12);

        t.set_status(&pod, status_of(&pod, "Running", vec![container("a", true)])).await;
        // About 43 s of back-off on the paused clock: more than one flush waits for.
        support::syncer::eventually(Duration::from_secs(90), "the status landed after 12 conflicts", || {
            arrivals.lock().unwrap().len() == 14
        })
        .await;
        t.flush(&syncer).await;

        let arrivals = arrivals.lock().unwrap().clone();
        let mut gaps: Vec<Duration> = arrivals.windows(2).map(|w| w[1] - w[0]).collect();
        assert_eq!(gaps.len(), 13, "12 conflicts, then the write that lands in two: {gaps:?}");
        assert_eq!(gaps.pop(), Some(Duration::ZERO), "the containers right after the conditions");
        for (n, gap) in gaps.iter().enumerate().skip(1) {
            let want =
                jittered_backoff(Duration::from_millis(50), Duration::from_secs(10), n as u32, &uid(&pod));
            assert!(on_the_tick(*gap, want), "conflict {} waits {want:?}: {gaps:?}", n + 1);
        }
        let longest = gaps.iter().max().copied().unwrap_or_default();
        assert!(
            longest > Duration::from_secs(5) && longest <= Duration::from_secs(10) + Duration::from_millis(2),
            "the waits reach the maximum and stay under it: {gaps:?}"
        );
        let api = api_status(&t.api("web"));
        assert_eq!(flags(&api), [flag("a", "cri://a", true, Some(true))]);
    })
    .await;
}

/// A conflict back-off waits for a fresher copy to merge into: a new status version (merged from
/// a fresh GET) or a newer watch copy ends it at once; a watch copy no newer than the one that
/// conflicted is not taken as a merge base.
#[actix::test]
async fn a_new_version_or_a_newer_copy_ends_a_conflict_back_off() {
    bounded(LIMIT, async {
        let t = SyncTest::start().await;
        let syncer = t
            .syncer_with(|c| {
                readiness_only(c);
                // Long enough that only what ends the back-off early lets a write through.
                c.conflict_backoff_initial = Duration::from_secs(20);
                c.conflict_backoff_max = Duration::from_secs(20);
            })
            .await;
        let pod = published_pod("web");
        t.pods.add(&pod);
        let stale = Arc::new(t.fake.insert_pod((*pod).clone()));
        syncer.send(ApiPodObserved::of(stale.clone())).await.unwrap();
        let (get, patch) = (pod_path("web"), status_path("web"));
        let in_conflict_back_off =
            |s: &SyncerStats| s.conflicting == 1 && s.backing_off == 1 && s.in_flight == 0;

        conflicts(&t, "web", 2);
        t.set_status(&pod, status_of(&pod, "Running", vec![container("a", true)])).await;
        stats_until(&syncer, "two conflicts, then the back-off", in_conflict_back_off).await;
        assert_eq!(
            t.summary(),
            [
                (Method::PATCH, patch.clone(), Some(409)),
                (Method::GET, get.clone(), Some(200)),
                (Method::PATCH, patch.clone(), Some(409)),
            ]
        );
        let now = stats(&syncer).await;
        assert_eq!(
            (now.merge_bases, now.floors),
            (0, 1),
            "the conflicting copy is dropped, its version kept"
        );

        // The watch delivers the copy that conflicted (late): not a merge base, the wait goes on.
        syncer.send(ApiPodObserved::of(stale.clone())).await.unwrap();
        let now = stats(&syncer).await;
        assert!(in_conflict_back_off(&now) && now.merge_bases == 0, "{now:?}");

        // A readiness change: a new version, merged from a fresh GET at once.
        t.fake.clear_requests();
        let start = Instant::now();
        t.pipeline.status_manager.do_send(set_ready(&pod, "a", false));
        t.flush(&syncer).await;
        assert_eq!(start.elapsed(), Duration::ZERO, "written at once, no timer waited for");
        assert_eq!(
            t.summary(),
            [(Method::GET, get.clone(), Some(200)), (Method::PATCH, patch.clone(), Some(200))]
        );
        assert_eq!(flags(&api_status(&t.api("web"))), [flag("a", "cri://a", false, Some(true))]);

        // Conflicts again; this time the runtime writes and the watch brings its copy, newer than
        // the one that conflicted: merged into at once, with no GET.
        conflicts(&t, "web", 2);
        t.fake.clear_requests();
        t.pipeline.status_manager.do_send(set_ready(&pod, "a", true));
        stats_until(&syncer, "two conflicts, then the back-off", in_conflict_back_off).await;
        assert_eq!(t.summary().len(), 3, "{:?}", t.summary());
        runtime_writes(&t, "web", json!({"podIP": "10.9.9.9", "podIPs": [{"ip": "10.9.9.9"}]})).await;
        t.fake.clear_requests();
        let start = Instant::now();
        syncer.send(ApiPodObserved::of(Arc::new(t.api("web")))).await.unwrap();
        t.flush(&syncer).await;
        assert_eq!(start.elapsed(), Duration::ZERO, "written at once, no timer waited for");
        assert_eq!(t.summary(), [(Method::PATCH, patch, Some(200))]);
        let api = api_status(&t.api("web"));
        assert_eq!(flags(&api), [flag("a", "cri://a", true, Some(true))]);
        assert_eq!(api.pod_ip.as_deref(), Some("10.9.9.9"), "the runtime's write stays");
        let now = stats(&syncer).await;
        assert_eq!((now.conflicting, now.floors, now.backing_off), (0, 0, 0), "{now:?}");
    })
    .await;
}

/// Conditions merge by type: a patch of conditions alone cannot undo another writer's change and
/// goes without a resourceVersion, so a stale merge base costs no conflict.
#[actix::test]
async fn a_conditions_only_patch_carries_no_resource_version() {
    bounded(LIMIT, async {
        let t = SyncTest::start().await;
        let syncer = t.syncer_with(readiness_only).await;
        // The runtime published a ready container (its readiness as ours will be).
        let published_status = PodStatus {
            phase: Some("Running".into()),
            container_statuses: Some(vec![container("a", true)]),
            ..Default::default()
        };
        let pod = bound(test_pod("web").container("a").with_status(published_status));
        t.pods.add(&pod);
        let on_api = t.fake.insert_pod((*pod).clone());
        syncer.send(ApiPodObserved::of(Arc::new(on_api))).await.unwrap();
        // The runtime writes after the copy the syncer holds.
        runtime_writes(&t, "web", json!({"podIP": "10.9.9.9", "podIPs": [{"ip": "10.9.9.9"}]})).await;
        t.fake.clear_requests();

        let stored = t.set_status(&pod, status_of(&pod, "Running", vec![container("a", true)])).await;
        t.flush(&syncer).await;
        assert_eq!(t.summary(), [(Method::PATCH, status_path("web"), Some(200))], "no conflict");
        let body = t.requests_of(&Method::PATCH)[0].body.clone().unwrap();
        assert_eq!(patched_status_keys(&body), ["conditions"], "{body}");
        assert_eq!(body["metadata"], json!({"uid": uid(&pod)}), "the UID only: {body}");
        let api = api_status(&t.api("web"));
        assert_eq!(owned_conditions(&api), owned_conditions(&stored.status.decode().unwrap()));
        assert_eq!(api.pod_ip.as_deref(), Some("10.9.9.9"), "the runtime's write stays");
    })
    .await;
}

/// A runtime that writes the pod before each of the syncer's PATCHes lands keeps every write
/// of the container statuses (under the resourceVersion precondition) conflicting. From the
/// third conflict in a row the owned conditions go alone first, without the precondition, and
/// land: the pod's Ready condition is on the server while the container flags are still
/// retried, each under the precondition, until one lands. The runtime's writes stay.
#[actix::test]
async fn the_conditions_land_alone_while_the_runtime_keeps_every_write_conflicting() {
    bounded(LIMIT, async {
        let t = SyncTest::start().await;
        let syncer = t.syncer_with(readiness_only).await;
        let pod = published_pod("web");
        t.pods.add(&pod);
        let on_api = t.fake.insert_pod((*pod).clone());
        syncer.send(ApiPodObserved::of(Arc::new(on_api))).await.unwrap();
        // The runtime writes the pod before each of the next 8 status PATCHes.
        t.fake.inject(Fault {
            matcher: FaultMatcher::MethodPath(Method::PATCH, status_path("web")),
            kind: FaultKind::Touch,
            times: FaultTimes::Times(8),
        });

        let stored = t.set_status(&pod, status_of(&pod, "Running", vec![container("a", true)])).await;
        let ready = |t: &SyncTest| condition_status(&api_status(&t.api("web")), POD_READY);
        eventually(Duration::from_secs(20), "the Ready condition landed", || {
            ready(&t).as_deref() == Some("True")
        })
        .await;
        let api = api_status(&t.api("web"));
        assert_eq!(flags(&api), [flag("a", "cri://a", false, None)], "the containers not yet");
        assert!(stats(&syncer).await.conflicting == 1, "the conflicts go on: {:?}", t.summary());
        t.flush(&syncer).await;

        let (get, patch) = (pod_path("web"), status_path("web"));
        let conflict_and_get =
            || [(Method::PATCH, patch.clone(), Some(409)), (Method::GET, get.clone(), Some(200))];
        let mut want = Vec::new();
        (0..3).for_each(|_| want.extend(conflict_and_get()));
        want.push((Method::PATCH, patch.clone(), Some(200)));
        (0..4).for_each(|_| want.extend(conflict_and_get()));
        want.push((Method::PATCH, patch.clone(), Some(200)));
        assert_eq!(t.summary(), want, "three conflicts, the conditions alone, then the containers");

        let bodies: Vec<Value> = t.requests_of(&Method::PATCH).into_iter().map(|r| r.body.unwrap()).collect();
        let alone = &bodies[3];
        assert_eq!(alone["metadata"], json!({"uid": uid(&pod)}), "no precondition: {alone}");
        assert_eq!(patched_status_keys(alone), ["conditions"], "the conditions only: {alone}");
        for (n, body) in bodies.iter().enumerate().filter(|(n, _)| *n != 3) {
            assert!(
                body["metadata"]["resourceVersion"].is_string(),
                "write {n} under the precondition: {body}"
            );
            assert_eq!(
                patched_status_keys(body).contains(&"conditions".to_owned()),
                n < 3,
                "write {n}: {body}"
            );
        }

        let on_api = t.api("web");
        let api = api_status(&on_api);
        assert_eq!(flags(&api), [flag("a", "cri://a", true, Some(true))]);
        assert_eq!(owned_conditions(&api), owned_conditions(&stored.status.decode().unwrap()));
        let touched = on_api.metadata.annotations.unwrap_or_default();
        assert!(touched.contains_key("fake.probelet.test/touched"), "the runtime's writes stay");
        let now = stats(&syncer).await;
        assert_eq!((now.conflicting, now.floors, now.backing_off), (0, 0, 0), "as before: {now:?}");
    })
    .await;
}

/// The runtime finishes the pod (phase Succeeded) between the merge base and the conditions
/// written alone: they land Ready=True on a finished pod, and the rest, under the precondition,
/// keeps conflicting. The copy that write returned still wants other conditions (Ready must be
/// False on a finished pod, kubernetes#108594): they go alone once more, at once.
#[actix::test]
async fn conditions_written_alone_onto_a_pod_finished_meanwhile_are_written_again_at_once() {
    bounded(LIMIT, async {
        let t = SyncTest::start().await;
        let syncer = t.syncer_with(readiness_only).await;
        let pod = published_pod("web");
        t.pods.add(&pod);
        let on_api = t.fake.insert_pod((*pod).clone());
        syncer.send(ApiPodObserved::of(Arc::new(on_api))).await.unwrap();
        let patch = |kind: FaultKind, times: u32| Fault {
            matcher: FaultMatcher::MethodPath(Method::PATCH, status_path("web")),
            kind,
            times: FaultTimes::Times(times),
        };
        t.fake.inject(patch(FaultKind::Touch, 3));
        t.fake.inject(patch(FaultKind::Finish("Succeeded".into()), 1));
        t.fake.inject(patch(FaultKind::Touch, 20));

        t.set_status(&pod, status_of(&pod, "Running", vec![container("a", true)])).await;
        let ready = |t: &SyncTest| condition_status(&api_status(&t.api("web")), POD_READY);
        eventually(Duration::from_secs(20), "the conditions written alone", || {
            t.requests_of(&Method::PATCH).len() >= 5
        })
        .await;
        let bodies: Vec<Value> = t.requests_of(&Method::PATCH).into_iter().map(|r| r.body.unwrap()).collect();
        let (first, again) = (&bodies[3], &bodies[4]);
        assert_eq!(first["metadata"], json!({"uid": uid(&pod)}), "alone: {first}");
        assert_eq!(again["metadata"], json!({"uid": uid(&pod)}), "alone again, at once: {again}");
        assert_eq!(patched_status_keys(again), ["$setElementOrder/conditions", "conditions"], "{again}");
        assert_eq!(api_status(&t.api("web")).phase.as_deref(), Some("Succeeded"));
        assert_eq!(ready(&t).as_deref(), Some("False"), "not Ready on a finished pod: {:?}", t.summary());
    })
    .await;
}

fn epoch_plus(seconds: i64) -> k8s_openapi::jiff::Timestamp {
    support::kubelet::epoch() + k8s_openapi::jiff::SignedDuration::from_secs(seconds)
}

// === a pod terminated during init (could the containers run?) ===

/// TerminatePod leaves regular containers waiting when the pod never initialized
/// (docs/status-manager.md §5.7): they do not run, so they must not hold the terminal phase, and
/// with it the deletion, back.
#[actix::test]
async fn a_pod_terminated_during_init_reaches_its_terminal_phase_and_is_deleted() {
    bounded(LIMIT, async {
        let t = SyncTest::start().await;
        let syncer = t.syncer().await;
        let pod = bound(test_pod("job").init_container("setup").container("app").restart_policy("Never"));
        t.pods.add(&pod);
        t.fake.insert_pod((*pod).clone());
        let mut initializing = PodStatus {
            phase: Some("Pending".into()),
            init_container_statuses: Some(vec![ContainerStatus {
                image: "registry.k8s.io/pause:3.10".into(),
                ..running("setup", "cri://setup", support::kubelet::epoch())
            }]),
            container_statuses: Some(vec![ContainerStatus {
                image: "registry.k8s.io/pause:3.10".into(),
                ..waiting("app")
            }]),
            ..Default::default()
        };
        generate_kubelet_conditions(&pod, &mut initializing);
        t.set_status(&pod, initializing).await;
        t.flush(&syncer).await;
        assert_eq!(api_status(&t.api("job")).phase.as_deref(), Some("Pending"));

        let client: Api<Pod> = Api::namespaced(t.fake.in_process_client(), NS);
        client.delete("job", &DeleteParams::default()).await.unwrap();
        let terminating = Arc::new(t.api("job"));
        syncer.send(ApiPodObserved::of(terminating.clone())).await.unwrap();
        t.pods.add(&terminating);
        t.fake.clear_requests();

        t.pipeline.terminate_pod(terminating.clone());
        t.flush(&syncer).await;
        let patches = t.requests_of(&Method::PATCH);
        assert_eq!(patches.len(), 1, "{:?}", t.summary());
        let body = patches[0].body.clone().unwrap();
        assert_eq!(body["status"]["phase"], json!("Failed"), "the terminal phase is not held back");
        assert!(body["status"].get("containerStatuses").is_none(), "app is unchanged, still waiting: {body}");
        let setup = &body["status"]["initContainerStatuses"][0];
        assert_eq!(setup["state"]["terminated"]["reason"], json!("ContainerStatusUnknown"), "{setup}");
        assert_eq!(
            t.summary().last().cloned(),
            Some((Method::DELETE, pod_path("job"), Some(200))),
            "deleted once terminal: {:?}",
            t.summary()
        );
        assert!(t.fake.pod(NS, "job").is_none());
        assert_eq!(t.cached(&uid(&pod)).await, None);
    })
    .await;
}

// === per-pod state ===

async fn stats(syncer: &actix::Addr<StatusSyncer>) -> SyncerStats {
    syncer.send(GetSyncerStats).await.unwrap()
}

/// Polls the syncer's stats until `check` holds.
async fn stats_until(syncer: &actix::Addr<StatusSyncer>, what: &str, check: impl Fn(&SyncerStats) -> bool) {
    let waited = tokio::time::timeout(Duration::from_secs(10), async {
        loop {
            let now = stats(syncer).await;
            if check(&now) {
                return;
            }
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    })
    .await;
    assert!(waited.is_ok(), "{what}: {:?}", stats(syncer).await);
}

/// Pods whose writes never succeeded (gone from the API, or the API failing) leave nothing
/// behind once the status manager forgets them: the next reconcile drops their state.
#[actix::test]
async fn the_state_of_pods_without_a_status_is_dropped_by_the_reconcile() {
    bounded(LIMIT, async {
        let t = SyncTest::start().await;
        let syncer = t.syncer().await;
        let ghost = bound(test_pod("ghost").container("app"));
        let flaky = bound(test_pod("flaky").container("app"));
        let known = bound(test_pod("known").container("app"));
        let stranger = bound(test_pod("stranger").container("app"));
        for pod in [&ghost, &flaky, &known] {
            t.pods.add(pod);
        }
        t.fake.insert_pod((*flaky).clone());
        for path in [pod_path("flaky"), status_path("flaky")] {
            for method in [Method::GET, Method::PATCH] {
                t.fake.inject(Fault {
                    matcher: FaultMatcher::MethodPath(method, path.clone()),
                    kind: FaultKind::status(500),
                    times: FaultTimes::Always,
                });
            }
        }
        // Watch events: a pod the host knows that has no status yet, and one it does not know.
        syncer.send(ApiPodObserved::of(Arc::new(t.fake.insert_pod((*known).clone())))).await.unwrap();
        syncer.send(ApiPodObserved::of(Arc::new(t.fake.insert_pod((*stranger).clone())))).await.unwrap();

        t.set_status(&ghost, status_of(&ghost, "Running", vec![container("app", true)])).await;
        t.set_status(&flaky, status_of(&flaky, "Running", vec![container("app", true)])).await;
        t.pipeline.statuses().await.unwrap();
        stats_until(&syncer, "the ghost was looked up and the flaky pod is backing off", |s| {
            s.unsynced == 2 && s.retrying == 1 && s.statuses == 2
        })
        .await;
        assert_eq!(t.fake.requests().iter().filter(|r| r.path == pod_path("ghost")).count(), 1);

        for pod in [&ghost, &flaky] {
            t.pipeline.status_manager.do_send(DeletePodStatus(uid(pod).into()));
        }
        syncer.send(Reconcile).await.unwrap();
        // Flush resolves only once no write is queued, in flight or waiting out a back-off.
        t.flush(&syncer).await;
        assert_eq!(
            stats(&syncer).await,
            SyncerStats { merge_bases: 1, ..SyncerStats::default() },
            "only the merge base of the pod the host knows is left"
        );
        let before = t.fake.requests().len();
        syncer.send(Reconcile).await.unwrap();
        t.flush(&syncer).await;
        assert_eq!(t.fake.requests().len(), before, "the forgotten pods are not written any more");
    })
    .await;
}

/// A pod waiting out a back-off (failures or conflicts, 30 s here) whose status the status
/// manager forgot: the reconcile stops its timer, so a flush (shutdown) does not wait for it.
#[actix::test]
async fn a_flush_does_not_wait_for_the_back_off_of_a_pod_without_a_status() {
    bounded(LIMIT, async {
        for (case, code) in [("failure back-off", 500), ("conflict back-off", 409)] {
            let t = SyncTest::start().await;
            let syncer = t
                .syncer_with(|c| {
                    readiness_only(c);
                    c.backoff_initial = Duration::from_secs(30);
                    c.backoff_max = Duration::from_secs(60);
                    c.conflict_backoff_initial = Duration::from_secs(30);
                    c.conflict_backoff_max = Duration::from_secs(60);
                })
                .await;
            let pod = published_pod("web");
            t.pods.add(&pod);
            syncer.send(ApiPodObserved::of(Arc::new(t.fake.insert_pod((*pod).clone())))).await.unwrap();
            t.fake.inject(Fault {
                matcher: FaultMatcher::MethodPath(Method::PATCH, status_path("web")),
                kind: FaultKind::status(code),
                times: FaultTimes::Always,
            });
            t.set_status(&pod, status_of(&pod, "Running", vec![container("a", true)])).await;
            stats_until(&syncer, case, |s| s.backing_off == 1 && s.in_flight == 0).await;

            t.pipeline.status_manager.do_send(DeletePodStatus(uid(&pod).into()));
            syncer.send(Reconcile).await.unwrap();
            let start = Instant::now();
            let flushed = tokio::time::timeout(Duration::from_secs(2), syncer.send(Flush)).await;
            assert!(flushed.is_ok(), "case {case}: the flush waited for a dropped pod's back-off");
            assert_eq!(start.elapsed(), Duration::ZERO, "case {case}: the flush waited for a timer");
            assert_eq!(stats(&syncer).await, SyncerStats::default(), "case {case}: nothing left");
            let before = t.fake.requests().len();
            syncer.send(Reconcile).await.unwrap();
            t.flush(&syncer).await;
            assert_eq!(t.fake.requests().len(), before, "case {case}: the dropped pod is not written");
        }
    })
    .await;
}

// === faults and scale ===

const FAULTY_PODS: usize = 50;

/// 30 % of all requests answered 500, at random.
fn random_500s(seed: u64) -> Fault {
    Fault {
        matcher: FaultMatcher::Any,
        kind: FaultKind::status(500),
        times: FaultTimes::Probability { p: 0.3, seed },
    }
}

fn faulty_pods() -> Vec<Arc<Pod>> {
    (0..FAULTY_PODS).map(|i| bound(test_pod(&format!("f-{i}")).container("a").container("b"))).collect()
}

/// Asserts that the API holds the status manager's status of every pod.
async fn assert_api_matches(t: &SyncTest, pods: &[Arc<Pod>]) {
    for pod in pods {
        let name = pod.metadata.name.clone().unwrap();
        let api = api_status(&t.api(&name));
        let cached = t.cached(&uid(pod)).await.unwrap();
        assert_eq!(owned_conditions(&api), owned_conditions(&cached), "conditions of {name}");
        assert_eq!(readiness(&api), readiness(&cached), "readiness of {name}");
    }
}

/// The first status of each of the pods, written through `fault` (if any) one pod at a time;
/// returns the number of requests it took.
///
/// One at a time makes the count a function of the seed alone: every write is a GET, then a
/// PATCH if the GET succeeded, and each request takes the next draw of the fake's generator,
/// so the number of requests until every pod succeeded does not depend on timing.
async fn first_statuses(fault: Option<Fault>) -> usize {
    let t = SyncTest::start().await;
    let syncer = t
        .syncer_with(|c| {
            c.concurrency = 1;
            c.backoff_initial = Duration::from_millis(2);
            c.backoff_max = Duration::from_millis(20);
        })
        .await;
    if let Some(fault) = fault {
        t.fake.inject(fault);
    }
    let pods = faulty_pods();
    for (i, pod) in pods.iter().enumerate() {
        t.pods.add(pod);
        t.fake.insert_pod((**pod).clone());
        let containers = vec![container("a", i % 2 == 0), container("b", i % 3 == 0)];
        t.pipeline.set_pod_status(pod.clone(), status_of(pod, "Running", containers));
    }
    t.flush(&syncer).await;
    assert_api_matches(&t, &pods).await;
    t.fake.requests().len()
}

#[actix::test]
async fn under_random_faults_a_sync_costs_at_most_twice_the_requests() {
    bounded(Duration::from_secs(60), async {
        let clean = first_statuses(None).await;
        assert_eq!(clean, 2 * FAULTY_PODS, "a GET and a PATCH per pod");
        let faulty = first_statuses(Some(random_500s(20_240_601))).await;
        assert!(faulty > clean, "the faults cost retries ({faulty} vs {clean})");
        assert!(faulty <= 2 * clean, "{faulty} requests under faults, {clean} without");
    })
    .await;
}

/// Writes from all sides at once: first statuses, then readiness changes sent while the first
/// writes may still be failing and backing off, 16 pods at a time. Every pod ends with its
/// status; the cost stays in proportion (each failed write costs a GET and a PATCH more, so a
/// warm write under 30 % faults costs about 2× on average: the bound here only catches storms).
async fn all_at_once(fault: Option<Fault>) -> usize {
    let t = SyncTest::start().await;
    let syncer = t
        .syncer_with(|c| {
            c.backoff_initial = Duration::from_millis(5);
            c.backoff_max = Duration::from_millis(50);
        })
        .await;
    if let Some(fault) = fault {
        t.fake.inject(fault);
    }
    let pods = faulty_pods();
    for pod in &pods {
        t.pods.add(pod);
        t.fake.insert_pod((**pod).clone());
        let containers = vec![container("a", false), container("b", false)];
        t.pipeline.set_pod_status(pod.clone(), status_of(pod, "Running", containers));
    }
    t.flush(&syncer).await;
    for (i, pod) in pods.iter().enumerate() {
        t.pipeline.status_manager.do_send(set_ready(pod, "a", true));
        if i % 2 == 0 {
            t.pipeline.status_manager.do_send(set_ready(pod, "b", true));
        }
    }
    t.flush(&syncer).await;
    assert_api_matches(&t, &pods).await;
    t.fake.requests().len()
}

#[actix::test]
async fn under_random_faults_every_pod_ends_with_its_status() {
    bounded(Duration::from_secs(60), async {
        let clean = all_at_once(None).await;
        assert_eq!(clean, 3 * FAULTY_PODS, "a GET and a PATCH, then a PATCH from the cached copy");
        let faulty = all_at_once(Some(random_500s(7))).await;
        assert!(faulty > clean, "the faults cost retries ({faulty} vs {clean})");
        assert!(faulty <= 3 * clean, "{faulty} requests under faults, {clean} without");
    })
    .await;
}

#[actix::test]
async fn a_thousand_pods_turning_ready_are_a_thousand_paced_patches() {
    bounded(Duration::from_secs(50), async {
        const PODS: usize = 1000;
        let (qps, burst) = (500.0, 100);
        let t = SyncTest::start().await;
        let pods: Vec<Arc<Pod>> =
            (0..PODS).map(|i| bound(test_pod(&format!("s-{i}")).container("app"))).collect();
        let mut observed = Vec::with_capacity(PODS);
        for pod in &pods {
            t.pods.add(pod);
            observed.push(Arc::new(t.fake.insert_pod((**pod).clone())));
            t.pipeline.set_pod_status(pod.clone(), status_of(pod, "Running", vec![container("app", false)]));
        }
        t.pipeline.statuses().await.unwrap();
        // Started after the first statuses, with the watch cache warm for every pod.
        let syncer = t.syncer_with(|c| c.limiter = RateLimiter::new(qps, burst)).await;
        for pod in observed {
            syncer.do_send(ApiPodObserved::of(pod));
        }
        syncer.send(Flush).await.unwrap();
        t.fake.clear_requests();

        let start = Instant::now();
        for pod in &pods {
            t.pipeline.status_manager.do_send(set_ready(pod, "app", true));
        }
        t.flush(&syncer).await;
        let took = start.elapsed();

        assert_eq!(t.count(&Method::PATCH), PODS);
        assert_eq!(t.count(&Method::GET), 0);
        assert_eq!(t.fake.requests().len(), PODS);
        assert!(t.fake.requests().iter().all(|r| r.code == Some(200)));
        let paced = Duration::from_secs_f64((PODS - burst as usize) as f64 / qps);
        assert!(took + Duration::from_millis(50) >= paced, "{took:?} for {PODS} patches, budget {paced:?}");
        for pod in &pods {
            let name = pod.metadata.name.clone().unwrap();
            let ready = condition_status(&api_status(&t.api(&name)), POD_READY);
            assert_eq!(ready.as_deref(), Some("True"), "{name}");
        }
    })
    .await;
}

// === fields newer than the agent's types (cluster mode on a newer API server) ===

/// The image volume digest a v1.36 runtime publishes, a field k8s-openapi's v1_35 structs lack.
const IMAGE_REF_PATH: &str = "/status/containerStatuses/0/volumeMounts/0/volumeStatus/image/imageRef";
const IMAGE_REF: &str =
    "quay.io/crio/artifact@sha256:1111111111111111111111111111111111111111111111111111111111111111";

/// The runtime publishes container a with an image volume's digest (a JSON merge patch, as a
/// runtime writes); many readiness flips later, under cluster mode's ownership, the digest is
/// still there after every write, each flip is one PATCH and no GET is needed.
#[actix::test]
async fn a_field_the_agent_does_not_know_survives_every_readiness_write() {
    bounded(LIMIT, async {
        let t = SyncTest::start().await;
        let syncer = t
            .syncer_with(|config| {
                readiness_only(config);
                config.ownership = ConditionOwnership::new(
                    [POD_READY, CONTAINERS_READY, POD_INITIALIZED],
                    Vec::<String>::new(),
                );
            })
            .await;
        let pod = published_pod("web");
        t.pods.add(&pod);
        t.fake.insert_pod((*pod).clone());
        let runtime: Api<Pod> = Api::namespaced(t.fake.in_process_client(), NS);
        let published = json!({"status": {"containerStatuses": [{
            "name": "a", "containerID": "cri://a", "ready": false, "restartCount": 0,
            "image": "registry.k8s.io/pause:3.10", "imageID": "",
            "state": {"running": {"startedAt": "2025-01-01T00:01:00Z"}},
            "volumeMounts": [{"name": "data", "mountPath": "/data", "readOnly": true,
                              "volumeStatus": {"image": {"imageRef": IMAGE_REF}}}],
        }]}});
        runtime.patch_status("web", &PatchParams::default(), &Patch::Merge(&published)).await.unwrap();
        let on_api = t.fake.pod_json(NS, "web").unwrap();
        assert_eq!(on_api.pointer(IMAGE_REF_PATH), Some(&json!(IMAGE_REF)), "the fake keeps the field");
        let watched = |json: Value| ApiPodObserved(Arc::new(ApiPod::from_json(json).unwrap()));
        syncer.send(watched(on_api)).await.unwrap();
        t.fake.clear_requests();

        t.set_status(&pod, status_of(&pod, "Running", vec![container("a", true)])).await;
        t.flush(&syncer).await;
        let mut ready = true;
        for flip in 0..20 {
            let stored = t.fake.pod_json(NS, "web").unwrap();
            assert_eq!(
                stored.pointer(IMAGE_REF_PATH),
                Some(&json!(IMAGE_REF)),
                "after write {flip}: {stored}"
            );
            assert_eq!(stored.pointer("/status/containerStatuses/0/ready"), Some(&json!(ready)));
            assert_eq!(
                t.summary(),
                [(Method::PATCH, status_path("web"), Some(200))],
                "write {flip}: one PATCH, no GET"
            );
            let body = t.requests_of(&Method::PATCH)[0].body.clone().unwrap();
            assert_eq!(body.pointer(IMAGE_REF_PATH), Some(&json!(IMAGE_REF)), "resent as it is: {body}");
            t.fake.clear_requests();
            // Every other write, the watch's echo of the last one comes before the next flip.
            if flip % 2 == 1 {
                syncer.send(watched(stored)).await.unwrap();
            }
            ready = !ready;
            t.pipeline.status_manager.do_send(set_ready(&pod, "a", ready));
            t.flush(&syncer).await;
        }
        let api = api_status(&t.api("web"));
        assert_eq!(flags(&api), [flag("a", "cri://a", ready, Some(true))]);

        // The runtime writes again (keeping ready and started) and the watch has not told the
        // syncer: the next write conflicts, and the copy it GETs keeps the field too.
        let mut rewritten = t.fake.pod_json(NS, "web").unwrap()["status"]["containerStatuses"].clone();
        rewritten[0]["restartCount"] = json!(0);
        rewritten[0]["imageID"] = json!("registry.k8s.io/pause@sha256:0000");
        runtime
            .patch_status(
                "web",
                &PatchParams::default(),
                &Patch::Merge(&json!({"status": {"containerStatuses": rewritten}})),
            )
            .await
            .unwrap();
        t.fake.clear_requests();
        t.pipeline.status_manager.do_send(set_ready(&pod, "a", !ready));
        t.flush(&syncer).await;
        assert_eq!(
            t.summary(),
            [
                (Method::PATCH, status_path("web"), Some(409)),
                (Method::GET, pod_path("web"), Some(200)),
                (Method::PATCH, status_path("web"), Some(200)),
            ]
        );
        let stored = t.fake.pod_json(NS, "web").unwrap();
        assert_eq!(stored.pointer(IMAGE_REF_PATH), Some(&json!(IMAGE_REF)), "{stored}");
        assert_eq!(
            stored.pointer("/status/containerStatuses/0/imageID"),
            Some(&json!("registry.k8s.io/pause@sha256:0000")),
            "the runtime's write stays"
        );
        assert_eq!(stored.pointer("/status/containerStatuses/0/ready"), Some(&json!(!ready)));
    })
    .await;
}

/// The cluster host's pod watch delivers each pod with the server's JSON, so the merge base the
/// syncer gets from it has the fields the typed structs lack.
#[actix::test]
async fn the_pod_watch_delivers_the_servers_json() {
    use futures::StreamExt;
    use kube::runtime::watcher::Event;
    bounded(LIMIT, async {
        let t = SyncTest::start().await;
        let pod = published_pod("web");
        t.fake.insert_pod((*pod).clone());
        let runtime: Api<Pod> = Api::namespaced(t.fake.in_process_client(), NS);
        let published = json!({"status": {"containerStatuses": [{
            "name": "a", "containerID": "cri://a", "ready": false, "restartCount": 0,
            "image": "registry.k8s.io/pause:3.10", "imageID": "",
            "volumeMounts": [{"name": "data", "mountPath": "/data",
                              "volumeStatus": {"image": {"imageRef": IMAGE_REF}}}],
        }]}});
        runtime.patch_status("web", &PatchParams::default(), &Patch::Merge(&published)).await.unwrap();
        let watch = probelet::cluster::pod_watch(t.fake.in_process_client(), support::syncer::NODE, None);
        let mut watch = std::pin::pin!(watch);
        let seen = loop {
            match watch.next().await.expect("the watch goes on").unwrap() {
                Event::InitApply(pod) | Event::Apply(pod) => break pod,
                _ => continue,
            }
        };
        assert_eq!(seen.pod.metadata.name.as_deref(), Some("web"));
        assert_eq!(seen.json().pointer(IMAGE_REF_PATH), Some(&json!(IMAGE_REF)));
        let stored = t.fake.pod_json(NS, "web").unwrap();
        // List items carry no kind and apiVersion; the rest is the object as the server has it.
        assert_eq!(seen.json()["status"], stored["status"]);
        assert_eq!(seen.json()["metadata"], stored["metadata"]);
    })
    .await;
}

/// The failure back-off's default stops at 10 s, the kubelet's batch period: the kubelet retries
/// a failed write at its next batch, so after an outage a pod's owed status lands within 10 s of
/// the server's return, not up to a minute later (a hostile test saw 23–24 s after a 40 s
/// outage).
#[actix::test]
async fn failures_back_off_at_most_the_kubelets_batch_period_by_default() {
    bounded(Duration::from_secs(300), async {
        let t = SyncTest::start().await;
        // The defaults, where the other tests shorten the back-off.
        let syncer = t
            .syncer_with(|c| {
                c.backoff_initial = probelet::sync::syncer::FAILURE_BACKOFF_INITIAL;
                c.backoff_max = probelet::sync::syncer::FAILURE_BACKOFF_MAX;
            })
            .await;
        let (pod, arrivals) = web_with_failing_patches(&t, &syncer, 503, 10).await;
        t.set_status(&pod, status_of(&pod, "Running", vec![container("app", true)])).await;
        // Ten failures wait at most 65.5 s in all (0.5 s doubling to 10 s, each cut by up to a
        // quarter), on the paused clock.
        tokio::time::sleep(Duration::from_secs(80)).await;
        t.flush(&syncer).await;

        let arrivals = arrivals.lock().unwrap().clone();
        assert_eq!(arrivals.len(), 11, "ten failures, then the write");
        let gaps: Vec<Duration> = arrivals.windows(2).map(|w| w[1] - w[0]).collect();
        assert!(gaps.iter().all(|g| *g <= Duration::from_millis(10_010)), "{gaps:?}");
        assert!(gaps[6..].iter().all(|g| *g >= Duration::from_millis(7_500)), "doubled up to 10 s: {gaps:?}");
    })
    .await;
}

/// `pod`'s JSON on the server with a field the structs cannot read.
fn unreadable(t: &SyncTest, pod: &Pod) -> Value {
    let mut odd = serde_json::to_value(t.fake.insert_pod(pod.clone())).unwrap();
    odd["status"]["containerStatuses"] = json!([{"name": "app", "ready": false, "restartCount": "x",
                                                "image": "i", "imageID": ""}]);
    odd
}

/// A pod the client's structs cannot read is not written: the GET that would be the merge base
/// fails the write, which backs off and lands once the pod reads again. Its UID still counts: a
/// pod recreated under the name is recreated, however it reads.
#[actix::test]
async fn a_pod_that_cannot_be_read_is_not_written_until_it_can() {
    bounded(LIMIT, async {
        let t = SyncTest::start().await;
        let syncer = t.syncer().await;
        let pod = bound(test_pod("web").container("app"));
        t.pods.add(&pod);
        let odd = unreadable(&t, &pod);
        t.fake.insert_pod_json_as_is(odd);
        t.set_status(&pod, status_of(&pod, "Running", vec![container("app", true)])).await;
        support::syncer::eventually(Duration::from_secs(5), "a GET", || t.count(&Method::GET) >= 1).await;
        assert_eq!(
            t.count(&Method::PATCH),
            0,
            "nothing merged into a pod that cannot be read: {:?}",
            t.summary()
        );

        t.fake.insert_pod((*pod).clone());
        t.flush(&syncer).await;
        assert_eq!(t.count(&Method::PATCH), 1, "{:?}", t.summary());
        assert_eq!(condition_status(&api_status(&t.api("web")), POD_READY).as_deref(), Some("True"));
    })
    .await;
}

/// A PATCH answered with a pod that cannot be read was written, but that answer is no merge
/// base, and the copy held before the write is older than it: the next write GETs. A PATCH
/// answered 200 with something that is not a pod (a `Status`) failed, and is sent again.
#[actix::test]
async fn an_unreadable_answer_to_a_patch_is_no_merge_base() {
    bounded(LIMIT, async {
        let t = SyncTest::start().await;
        let syncer = t.syncer().await;
        let pod = bound(test_pod("web").container("app"));
        t.pods.add(&pod);
        let api = t.fake.insert_pod((*pod).clone());
        syncer.send(ApiPodObserved::of(Arc::new(api))).await.unwrap();
        let odd = unreadable(&t, &pod);
        t.fake.inject(Fault {
            matcher: FaultMatcher::MethodPath(Method::PATCH, status_path("web")),
            kind: FaultKind::Body { code: 200, body: odd },
            times: FaultTimes::Times(1),
        });
        t.set_status(&pod, status_of(&pod, "Running", vec![container("app", true)])).await;
        t.flush(&syncer).await;
        t.set_status(&pod, status_of(&pod, "Running", vec![container("app", false)])).await;
        t.flush(&syncer).await;
        let (get, patch) = (pod_path("web"), status_path("web"));
        assert_eq!(
            t.summary(),
            [
                (Method::PATCH, patch.clone(), Some(200)),
                (Method::GET, get, Some(200)),
                (Method::PATCH, patch.clone(), Some(200))
            ],
            "the second write merged into a fresh GET"
        );

        let status = json!({"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Success"});
        t.fake.inject(Fault {
            matcher: FaultMatcher::MethodPath(Method::PATCH, status_path("web")),
            kind: FaultKind::Body { code: 200, body: status },
            times: FaultTimes::Times(1),
        });
        t.set_status(&pod, status_of(&pod, "Running", vec![container("app", true)])).await;
        t.flush(&syncer).await;
        assert_eq!(
            condition_status(&api_status(&t.api("web")), POD_READY).as_deref(),
            Some("True"),
            "sent again"
        );
        let patches: Vec<_> = t.summary().into_iter().filter(|(m, _, _)| *m == Method::PATCH).collect();
        assert_eq!(patches.len(), 4, "{patches:?}");
    })
    .await;
}

/// `probelet_status_sync_duration_seconds` times a write on tokio's clock, as upstream times it
/// with Go's monotonic reading: a step of the node's wall clock while a status waits to be
/// written is no latency. Timed on the wall clock, an NTP step of an hour recorded a write of an
/// hour (and fired the status-write latency alert).
#[actix::test]
async fn a_step_of_the_wall_clock_is_no_status_sync_latency() {
    use probelet::clock::SteppingClock;
    use probelet::k8s_openapi::jiff::SignedDuration;
    use probelet_actors::metrics::PrometheusRegistry;

    // A thread-local recorder: the histogram has no pod label, and the other tests of this
    // binary record into the global one in parallel. The syncer runs on this thread.
    let registry = PrometheusRegistry::new();
    let _local = metrics::set_default_local_recorder(&registry);
    bounded(LIMIT, async {
        let t = SyncTest::start().await;
        let clock = Arc::new(SteppingClock::starting_at(support::kubelet::epoch()));
        let syncer = t.syncer_with(|config| config.clock = clock.clone()).await;
        let pod = bound(test_pod("stepped").container("app"));
        t.pods.add(&pod);
        t.fake.insert_pod((*pod).clone());
        t.fake.inject(Fault {
            matcher: FaultMatcher::MethodPath(Method::PATCH, status_path("stepped")),
            kind: FaultKind::Delay(Duration::from_secs(2)),
            times: FaultTimes::Times(1),
        });
        t.set_status(&pod, status_of(&pod, "Running", vec![container("app", true)])).await;
        eventually(Duration::from_secs(5), "the PATCH reached the fake", || t.count(&Method::PATCH) == 1)
            .await;
        clock.step(SignedDuration::from_hours(1));
        t.flush(&syncer).await;
        let text = registry.render();
        let value = |name: &str| -> f64 {
            text.lines()
                .find_map(|line| {
                    line.strip_prefix(name)?.strip_prefix(' ').map(|v| v.trim().parse().unwrap())
                })
                .unwrap_or_else(|| panic!("no {name} in\n{text}"))
        };
        assert_eq!(value("probelet_status_sync_duration_seconds_count"), 1.0);
        let seconds = value("probelet_status_sync_duration_seconds_sum");
        assert!((2.0..10.0).contains(&seconds), "the write took {seconds} s");
    })
    .await;
}

/// A GET of the merge base answered 200 with something that is not a pod (a `Status`, or no
/// object at all) says nothing of the pod: the write failed and is sent again, the status
/// kept. Read as a pod without a UID, it was taken for a pod recreated under the name, and the
/// status manager dropped the pod's status.
#[actix::test]
async fn a_get_answered_with_no_pod_is_a_failed_write_not_a_recreation() {
    bounded(LIMIT, async {
        for body in
            [json!({"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Success"}), json!({})]
        {
            let t = SyncTest::start().await;
            let syncer = t.syncer().await;
            let pod = bound(test_pod("web").container("app"));
            t.pods.add(&pod);
            t.fake.insert_pod((*pod).clone());
            t.fake.inject(Fault {
                matcher: FaultMatcher::MethodPath(Method::GET, pod_path("web")),
                kind: FaultKind::Body { code: 200, body: body.clone() },
                times: FaultTimes::Times(1),
            });
            t.set_status(&pod, status_of(&pod, "Running", vec![container("app", true)])).await;
            t.flush(&syncer).await;
            assert_eq!(
                condition_status(&api_status(&t.api("web")), POD_READY).as_deref(),
                Some("True"),
                "written after the failed GET ({body}): {:?}",
                t.summary()
            );
        }
    })
    .await;
}

/// A PATCH answered 404 while the pod is still on the server (a proxy's or an aggregation
/// layer's answer) is a failed write, confirmed by a GET and sent again on the failure back-off:
/// upstream logs it as any failed patch and writes it at its next sync. It was taken for a
/// pod gone, said at debug alone, and the status waited for a reconcile.
#[actix::test]
async fn a_patch_answered_not_found_for_a_pod_still_there_is_sent_again() {
    bounded(LIMIT, async {
        let t = SyncTest::start().await;
        let syncer = t.syncer().await;
        let pod = bound(test_pod("web").container("app"));
        t.pods.add(&pod);
        t.fake.insert_pod((*pod).clone());
        t.fake.inject(Fault {
            matcher: FaultMatcher::MethodPath(Method::PATCH, status_path("web")),
            kind: FaultKind::status(404),
            times: FaultTimes::Times(1),
        });
        t.set_status(&pod, status_of(&pod, "Running", vec![container("app", true)])).await;
        t.flush(&syncer).await;
        assert_eq!(
            condition_status(&api_status(&t.api("web")), POD_READY).as_deref(),
            Some("True"),
            "sent again: {:?}",
            t.summary()
        );
        let (get, patch) = (pod_path("web"), status_path("web"));
        assert_eq!(
            t.summary()[..3],
            [
                (Method::GET, get.clone(), Some(200)),
                (Method::PATCH, patch.clone(), Some(404)),
                (Method::GET, get, Some(200))
            ],
            "the 404 confirmed by a GET"
        );
    })
    .await;
}
