//! The fake API server's watch against the recording of a real kube-apiserver
//! (`tests/fixtures/apiserver/more-cases.json`): case 21a (`timeoutSeconds` ends a watch with a
//! clean EOF; bookmarks with `allowWatchBookmarks`, none on a quiet watch) and 21b (a stopped
//! server refuses new connections, keeps an open watch silent and then ends it cleanly; once
//! restarted, a watch from the last version seen gets a single ERROR event, 410 Expired).
//! Real time, on 127.0.0.1: the timings are the server's.

// Helpers here may panic: a panic fails the test that called them.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use probelet_test_support as support;

use std::time::Duration;

use http_body_util::BodyExt;
use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, ListParams, Patch, PatchParams, PostParams};
use serde_json::{Value, json};
use support::apiserver::FakeApiServer;
use tokio::time::Instant;

/// A step of a recorded case.
fn recorded_step(case: &str, label: &str) -> Value {
    let path =
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/apiserver/more-cases.json");
    let all: Value = serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap();
    let cases = all.as_array().cloned().or_else(|| all["cases"].as_array().cloned()).unwrap();
    let case = cases.into_iter().find(|c| c["name"] == case).unwrap();
    case["steps"].as_array().unwrap().iter().find(|s| s["label"] == label).unwrap().clone()
}

/// Resource versions as the recording writes them.
fn normalised(mut object: Value) -> Value {
    if object["metadata"]["resourceVersion"].is_string() {
        object["metadata"]["resourceVersion"] = json!("RV");
    }
    if let Some(message) = object["message"].as_str() {
        let rv = |s: &str| {
            if s.chars().all(|c| c.is_ascii_digit()) && !s.is_empty() {
                "RV".to_owned()
            } else {
                s.to_owned()
            }
        };
        let words: Vec<String> = message
            .split(' ')
            .map(|w| match w.strip_prefix('(').and_then(|w| w.strip_suffix(')')) {
                Some(inner) => format!("({})", rv(inner)),
                None => rv(w),
            })
            .collect();
        object["message"] = json!(words.join(" "));
    }
    object
}

/// What a watch delivered: events with their arrival time, and how and when it ended.
#[derive(Debug)]
struct Watched {
    events: Vec<(Duration, Value)>,
    /// `true`: a clean end of the chunked stream; `false`: the connection broke.
    clean_eof: bool,
    ended: Duration,
}

impl Watched {
    fn types(&self) -> Vec<&str> {
        self.events.iter().map(|(_, e)| e["type"].as_str().unwrap()).collect()
    }
}

/// Opens a watch and reads it to its end, forwarding each event as it arrives.
async fn watch(
    client: kube::Client,
    path: String,
    seen: tokio::sync::mpsc::UnboundedSender<Value>,
) -> Watched {
    let started = Instant::now();
    let request = http::Request::get(path).body(kube::client::Body::empty()).unwrap();
    let response = client.send(request).await.unwrap();
    assert_eq!(response.status(), 200);
    let mut body = response.into_body();
    let (mut events, mut buffer) = (Vec::new(), Vec::new());
    let clean_eof = loop {
        match body.frame().await {
            None => break true,
            Some(Err(_)) => break false,
            Some(Ok(frame)) => {
                let Ok(data) = frame.into_data() else { continue };
                buffer.extend_from_slice(&data);
                while let Some(end) = buffer.iter().position(|b| *b == b'\n') {
                    let line: Vec<u8> = buffer.drain(..=end).collect();
                    let event: Value = serde_json::from_slice(&line).unwrap();
                    let _ = seen.send(event.clone());
                    events.push((started.elapsed(), event));
                }
            }
        }
    };
    Watched { events, clean_eof, ended: started.elapsed() }
}

fn pod(name: &str, node: &str) -> Pod {
    serde_json::from_value(json!({
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "labels": {"app": "fx"}},
        "spec": {"containers": [{"name": "app", "image": "registry.k8s.io/pause:3.10"}], "nodeName": node},
    }))
    .unwrap()
}

async fn mark_running(api: &Api<Pod>, name: &str) {
    let patch = json!({"status": {"phase": "Running"}});
    api.patch_status(name, &PatchParams::default(), &Patch::Strategic(patch)).await.unwrap();
}

fn around(at: Duration, secs: f64) -> bool {
    (at.as_secs_f64() - secs).abs() <= 0.6
}

#[tokio::test]
async fn case_21a_a_watch_ends_at_its_timeout_with_bookmarks_only_when_something_changed() {
    let fake = FakeApiServer::start().await;
    let client = fake.client();
    let api: Api<Pod> = Api::namespaced(client.clone(), "fx");
    let list = api.list(&ListParams::default().fields("spec.nodeName=node-a")).await.unwrap();
    let rv = list.metadata.resource_version.unwrap();
    let path = |node: &str, rv: &str| {
        format!(
            "/api/v1/namespaces/fx/pods?watch=1&fieldSelector=spec.nodeName%3D{node}&allowWatchBookmarks=true&resourceVersion={rv}&timeoutSeconds=5"
        )
    };
    let (seen, _) = tokio::sync::mpsc::unbounded_channel();
    let watching = tokio::spawn(watch(client.clone(), path("node-a", &rv), seen.clone()));
    tokio::time::sleep(Duration::from_secs(1)).await;
    api.create(&PostParams::default(), &pod("w21", "node-a")).await.unwrap();
    tokio::time::sleep(Duration::from_secs(1)).await;
    mark_running(&api, "w21").await;
    let watched = watching.await.unwrap();

    let recorded = recorded_step("21a-watch-timeout-and-bookmarks", "watch");
    // The recording got two bookmarks (3.0 and 4.0 s), an earlier run one (3.5 s): the fake
    // sends one, at 3.0 s.
    assert_eq!(watched.types(), ["ADDED", "MODIFIED", "BOOKMARK"], "{watched:?}");
    let (at, bookmark) = &watched.events[2];
    assert!(around(*at, 3.0), "the bookmark at {at:?}");
    assert_eq!(normalised(bookmark["object"].clone()), recorded["response"]["events"][2]["object"]);
    assert!(watched.clean_eof && around(watched.ended, 5.0), "a clean EOF at 5 s: {watched:?}");

    // A quiet watch (no matching pods, no writes) from the last version seen: nothing at all.
    let last = watched.events[2].1["object"]["metadata"]["resourceVersion"].as_str().unwrap().to_owned();
    let quiet = watch(client, path("node-b", &last), seen).await;
    let recorded = recorded_step("21a-watch-timeout-and-bookmarks", "watch-quiet-node-b");
    assert_eq!(quiet.events.len(), recorded["response"]["events"].as_array().unwrap().len());
    assert!(quiet.clean_eof && around(quiet.ended, 5.0), "a clean EOF at 5 s: {quiet:?}");
}

#[tokio::test]
async fn case_21b_a_stopped_server_keeps_a_watch_silent_and_after_its_restart_the_watch_has_expired() {
    let fake = FakeApiServer::start().await;
    let client = fake.client();
    let api: Api<Pod> = Api::namespaced(client.clone(), "fx");
    let rv = api.list(&ListParams::default()).await.unwrap().metadata.resource_version.unwrap();
    let (seen, mut arrivals) = tokio::sync::mpsc::unbounded_channel();
    let path = format!("/api/v1/namespaces/fx/pods?watch=1&resourceVersion={rv}");
    let watching = tokio::spawn(watch(client.clone(), path, seen.clone()));
    api.create(&PostParams::default(), &pod("r1", "node-a")).await.unwrap();
    mark_running(&api, "r1").await;
    for _ in 0..2 {
        tokio::time::timeout(Duration::from_secs(10), arrivals.recv()).await.unwrap().unwrap();
    }

    // The real server's shutdown timeout is 60 s; 2 s here.
    let stopped = Instant::now();
    fake.stop(Duration::from_secs(2)).await;
    let fresh: Api<Pod> = Api::namespaced(fake.client(), "fx");
    let refused = fresh.list(&ListParams::default()).await.unwrap_err();
    assert!(!matches!(refused, kube::Error::Api(_)), "no answer, the connection is refused: {refused:?}");
    let watched = watching.await.unwrap();
    let recorded = recorded_step("21b-watch-server-restart", "watch-until-sigterm");
    let recorded_types: Vec<&str> =
        recorded["response"]["event_types"].as_array().unwrap().iter().map(|t| t.as_str().unwrap()).collect();
    assert_eq!(watched.types(), recorded_types, "nothing after the stop: no ERROR, no bookmark");
    assert!(watched.clean_eof, "the silent watch ends with a clean EOF: {watched:?}");
    let silent = stopped.elapsed();
    assert!(around(silent, 2.0), "after the shutdown timeout: {silent:?}");

    fake.restart().await;
    let last = watched.events[1].1["object"]["metadata"]["resourceVersion"].as_str().unwrap().to_owned();
    let path = format!("/api/v1/namespaces/fx/pods?watch=1&resourceVersion={last}&timeoutSeconds=3");
    let expired = watch(client.clone(), path, seen).await;
    let recorded = recorded_step("21b-watch-server-restart", "watch-from-last-seen-rv-after-restart");
    assert_eq!(expired.types(), ["ERROR"], "{expired:?}");
    assert_eq!(
        normalised(expired.events[0].1["object"].clone()),
        recorded["response"]["events"][0]["object"]
    );
    assert!(expired.clean_eof && expired.ended < Duration::from_secs(1), "ends after the ERROR: {expired:?}");

    api.create(&PostParams::default(), &pod("r2", "node-a")).await.unwrap();
    let names: Vec<String> = api
        .list(&ListParams::default())
        .await
        .unwrap()
        .items
        .into_iter()
        .map(|p| p.metadata.name.unwrap())
        .collect();
    assert_eq!(names, ["r1", "r2"], "the store survived the restart");
}

/// Serves `/api/v1/pods` on 127.0.0.1 with `answer` (given the request's query, as the agent's
/// watcher sends it), runs the agent's pod watch against it for `secs` seconds, and returns the
/// errors it yielded, as text.
async fn watch_against(
    answer: impl Fn(&str) -> axum::response::Response + Clone + Send + Sync + 'static,
    secs: u64,
) -> Vec<String> {
    watched_against(answer, secs).await.into_iter().filter_map(Result::err).collect()
}

/// As [`watch_against`], with every item the pod watch yielded: a pod applied or deleted as
/// `Apply name rv`, `InitApply name rv` or `Delete name rv` (the list's start and end left
/// out), an error as its text.
async fn watched_against(
    answer: impl Fn(&str) -> axum::response::Response + Clone + Send + Sync + 'static,
    secs: u64,
) -> Vec<Result<String, String>> {
    use axum::extract::RawQuery;
    use futures::StreamExt as _;
    use kube::runtime::watcher::Event;

    let handler = move |RawQuery(query): RawQuery| {
        let answer = answer.clone();
        async move { answer(&query.unwrap_or_default()) }
    };
    let app = axum::Router::new().route("/api/v1/pods", axum::routing::get(handler));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });

    let client = probelet::cluster::client_from_config(kube::Config::new(url.parse().unwrap())).unwrap();
    let mut stream = Box::pin(probelet::cluster::pod_watch(client, "n1", None));
    let mut items = Vec::new();
    let _ = tokio::time::timeout(Duration::from_secs(secs), async {
        while let Some(item) = stream.next().await {
            let said = |what: &str, pod: &probelet_actors::sync::api_pod::ApiPod| {
                let meta = &pod.pod.metadata;
                let name = meta.name.as_deref().unwrap_or_default();
                Ok(format!("{what} {name} {}", meta.resource_version.as_deref().unwrap_or_default()))
            };
            match item {
                Ok(Event::Apply(pod)) => items.push(said("Apply", &pod)),
                Ok(Event::InitApply(pod)) => items.push(said("InitApply", &pod)),
                Ok(Event::Delete(pod)) => items.push(said("Delete", &pod)),
                Ok(Event::Init | Event::InitDone) => {}
                Err(error) => items.push(Err(error.to_string())),
            }
        }
    })
    .await;
    items
}

fn is_watch(query: &str) -> bool {
    query.split('&').any(|pair| pair == "watch=true")
}

/// An empty pod list at resourceVersion 7.
fn empty_list() -> axum::response::Response {
    use axum::response::IntoResponse as _;
    axum::Json(
        json!({"kind": "PodList", "apiVersion": "v1", "metadata": {"resourceVersion": "7"}, "items": []}),
    )
    .into_response()
}

/// A server (or a proxy before it) that ends every watch right after its headers: the agent's
/// pod watch opens the next one after a wait that grows (1 s, 2 s, ...), not at once. Without
/// the pacing kube's watcher sent thousands of watch requests a second.
#[tokio::test]
async fn watches_that_end_at_once_are_spaced_out() {
    use std::sync::Arc;
    use std::sync::atomic::{AtomicUsize, Ordering};

    let watches = Arc::new(AtomicUsize::new(0));
    let counted = watches.clone();
    let answer = move |query: &str| {
        if !is_watch(query) {
            return empty_list();
        }
        counted.fetch_add(1, Ordering::SeqCst);
        // A 200 whose body ends at once: a watch that ended cleanly, with no event.
        axum::response::Response::builder()
            .header("content-type", "application/json")
            .body(axum::body::Body::empty())
            .unwrap()
    };
    watch_against(answer, 4).await;
    // Starts at 0, 1 and 3 s (then 7 s): 3 in 4 s.
    let count = watches.load(Ordering::SeqCst);
    assert!((2..=4).contains(&count), "{count} watch requests in 4 s");
}

/// A server that answers the watch request itself with 410 Gone (a proxy or an aggregated
/// server; the real one sends an ERROR event instead): the pod watch lists again, so pods
/// created meanwhile are seen. kube's watcher alone kept the expired version and watched from it
/// again forever, never listing.
#[tokio::test]
async fn a_watch_answered_410_lists_again() {
    use std::sync::Arc;
    use std::sync::atomic::{AtomicUsize, Ordering};

    use axum::response::IntoResponse as _;

    let lists = Arc::new(AtomicUsize::new(0));
    let counted = lists.clone();
    let answer = move |query: &str| {
        if is_watch(query) {
            let status = json!({"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
                "message": "too old resource version: 7 (9)", "reason": "Expired", "code": 410});
            return (axum::http::StatusCode::GONE, axum::Json(status)).into_response();
        }
        counted.fetch_add(1, Ordering::SeqCst);
        empty_list()
    };
    watch_against(answer, 4).await;
    let count = lists.load(Ordering::SeqCst);
    assert!(count >= 2, "{count} lists in 4 s: the expired watch never listed again");
    // Paced (1 s, then 2 s between watches): a list after each. Unpaced it was thousands.
    assert!(count <= 6, "{count} lists in 4 s: an expired watch must not list in a loop");
}

/// A body of `head`, then `x` without end, 64 KiB a millisecond at most (a test that fails must
/// not take the machine's memory with it).
fn endless(head: &'static str) -> axum::response::Response {
    static CHUNK: [u8; 64 * 1024] = [b'x'; 64 * 1024];
    let rest = futures::stream::unfold((), |()| async {
        tokio::time::sleep(Duration::from_millis(1)).await;
        Some((Ok::<_, std::convert::Infallible>(bytes::Bytes::from_static(&CHUNK)), ()))
    });
    let head = futures::stream::once(async move { Ok(bytes::Bytes::from_static(head.as_bytes())) });
    axum::response::Response::builder()
        .header("content-type", "application/json")
        .body(axum::body::Body::from_stream(futures::StreamExt::chain(head, rest)))
        .unwrap()
}

/// Counts the lists of a server; `answer` gets the list's number (from 1) or 0 for a watch.
fn counting(
    answer: impl Fn(usize) -> axum::response::Response + Clone + Send + Sync + 'static,
) -> (
    impl Fn(&str) -> axum::response::Response + Clone + Send + Sync + 'static,
    std::sync::Arc<std::sync::atomic::AtomicUsize>,
) {
    use std::sync::atomic::Ordering;
    let lists = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let counted = lists.clone();
    let handler = move |query: &str| {
        if is_watch(query) {
            return answer(0);
        }
        answer(counted.fetch_add(1, Ordering::SeqCst) + 1)
    };
    (handler, lists)
}

/// A watch event that never ends (a line streamed without its newline, as a broken proxy or a
/// hostile server sends it): refused once past 16 MiB in client-go's words, and the pod watch
/// lists again. kube reads a watch line with no bound: the agent held every byte of it, 64 MiB a
/// second here, until the node killed it, and saw no pod meanwhile.
#[tokio::test]
async fn a_watch_event_without_end_is_refused_past_16_mib_and_listed_again() {
    let (answer, lists) = counting(|n| {
        if n == 0 { endless(r#"{"type":"ADDED","object":{"metadata":{"name":""#) } else { empty_list() }
    });
    let errors = watch_against(answer, 4).await;
    assert!(
        errors.iter().any(|e| e.contains("object to decode was longer than maximum allowed size")),
        "{errors:?}"
    );
    let lists = lists.load(std::sync::atomic::Ordering::SeqCst);
    assert!(lists >= 2, "{lists} lists: the watch was never given up");
}

/// A watch event whose JSON ends before its line does (`{"type":"ADDED","object":{…` and a
/// newline: a proxy that cut it), on a watch that then stays open: the pod watch lists again, so
/// the pod the event was about is seen. kube skips such a line without a word (it takes it for
/// the end of a stream cut off), and the event was lost until the pod changed again.
#[tokio::test]
async fn a_watch_event_cut_short_is_not_lost() {
    use futures::StreamExt as _;
    let (answer, lists) = counting(|n| {
        if n > 0 {
            return empty_list();
        }
        let cut =
            "{\"type\":\"ADDED\",\"object\":{\"kind\":\"Pod\",\"metadata\":{\"name\":\"p\",\"uid\":\"u\"\n";
        let rest =
            futures::stream::once(async move { Ok::<_, std::convert::Infallible>(bytes::Bytes::from(cut)) })
                .chain(futures::stream::pending());
        axum::response::Response::builder()
            .header("content-type", "application/json")
            .body(axum::body::Body::from_stream(rest))
            .unwrap()
    });
    let errors = watch_against(answer, 3).await;
    assert!(errors.iter().any(|e| e.contains("a watch event ends before its JSON does")), "{errors:?}");
    let lists = lists.load(std::sync::atomic::Ordering::SeqCst);
    assert!(lists >= 2, "{lists} lists: the event was skipped and the watch read on");
}

/// A pod list answered without end: refused once past 64 MiB, and listed again. kube reads a
/// list whole before it decodes it, with no bound: the agent held it all (64 MiB a second here)
/// until the node killed it.
#[tokio::test]
async fn a_pod_list_without_end_is_refused_past_64_mib_and_listed_again() {
    let (answer, lists) = counting(|n| {
        if n == 1 { endless(r#"{"kind":"PodList","apiVersion":"v1","items":["#) } else { empty_list() }
    });
    let errors = watch_against(answer, 6).await;
    assert!(
        errors.iter().any(|e| e.contains("the API server's answer is longer than 67108864 bytes")),
        "{errors:?}"
    );
    let lists = lists.load(std::sync::atomic::Ordering::SeqCst);
    assert!(lists >= 2, "{lists} lists: the endless one was never given up");
}

/// A pod list answered with a redirect (301 and 307) to another address: the agent's client
/// does not follow it (no connection is made there), and the pod watch fails and lists again
/// at the configured server. Only 127.0.0.1 traffic: the redirect names a listener on
/// 127.0.0.2 that counts its connections.
#[tokio::test]
async fn a_redirect_elsewhere_is_not_followed() {
    use std::sync::atomic::{AtomicUsize, Ordering};
    let elsewhere = tokio::net::TcpListener::bind("127.0.0.2:0").await.unwrap();
    let location = format!("http://{}/api/v1/pods", elsewhere.local_addr().unwrap());
    let connections = std::sync::Arc::new(AtomicUsize::new(0));
    let counted = connections.clone();
    tokio::spawn(async move {
        while let Ok((_socket, _)) = elsewhere.accept().await {
            counted.fetch_add(1, Ordering::SeqCst);
        }
    });
    for code in [301, 307] {
        let location = location.clone();
        let (answer, lists) = counting(move |_| {
            axum::response::Response::builder()
                .status(code)
                .header("location", &location)
                .body(axum::body::Body::empty())
                .unwrap()
        });
        let errors = watch_against(answer, 2).await;
        assert!(!errors.is_empty(), "{code}: a redirect is no list");
        assert!(lists.load(Ordering::SeqCst) >= 2, "{code}: listed again at the configured server");
    }
    assert_eq!(connections.load(Ordering::SeqCst), 0, "nothing sent to the redirect's address");
}

/// A watch whose events' resourceVersion goes back mid-watch (9, then 8 for the same pod, with
/// no list between): the pod watch hands both on in the order the server sent them, lists
/// nothing again, and the next watch asks from the last version it was sent (8), as client-go's
/// reflector does: it compares no versions within a watch and keeps the last one it saw. The
/// API server sends a watch's events in order and versions are opaque to a client, so an older
/// one is the server's word on the pod; a check that dropped it would leave the pod as it was
/// for as long as the server's versions stay below the one held (docs/sync.md §7.4).
#[tokio::test]
async fn a_watch_whose_versions_go_back_is_applied_in_order_and_resumed_from_the_last() {
    use std::sync::{Arc, Mutex};

    fn event(kind: &str, rv: &str) -> String {
        let pod = json!({"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": "p", "namespace": "d", "uid": "u", "resourceVersion": rv},
            "spec": {"nodeName": "n1", "containers": [{"name": "app", "image": "i"}]}});
        format!("{}\n", json!({"type": kind, "object": pod}))
    }
    // The resourceVersion each request asked from, by kind.
    let asked: Arc<Mutex<Vec<String>>> = Arc::default();
    let noted = asked.clone();
    let answer = move |query: &str| {
        let from = query.split('&').find_map(|pair| pair.strip_prefix("resourceVersion=")).unwrap_or("");
        let watch = is_watch(query);
        let mut noted = noted.lock().unwrap();
        noted.push(format!("{} {from}", if watch { "watch" } else { "list" }));
        let watches = noted.iter().filter(|n| n.starts_with("watch")).count();
        drop(noted);
        if !watch {
            return empty_list();
        }
        let body = if watches == 1 {
            // Both events, then the stream's end: the watcher watches again.
            axum::body::Body::from(event("ADDED", "9") + &event("MODIFIED", "8"))
        } else {
            let open = futures::stream::pending::<Result<bytes::Bytes, std::convert::Infallible>>();
            axum::body::Body::from_stream(open)
        };
        axum::response::Response::builder().header("content-type", "application/json").body(body).unwrap()
    };
    let items = watched_against(answer, 3).await;
    assert_eq!(items, [Ok("Apply p 9".to_owned()), Ok("Apply p 8".to_owned())], "in the server's order");
    let asked = asked.lock().unwrap().clone();
    assert_eq!(asked, ["list ", "watch 7", "watch 8"], "no list again; the next watch from the last version");
}
