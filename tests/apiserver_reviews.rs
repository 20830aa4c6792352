//! Replays the TokenReview and SubjectAccessReview steps recorded from a real kube-apiserver
//! (`tests/fixtures/apiserver/more-cases.json`, cases 20a and 20b) against the fake API server
//! and compares each answer with the recorded one. The fake has no ServiceAccounts or RBAC
//! objects: the recorded token is configured as valid, and the recorded ClusterRoleBinding
//! becomes a grant at the step that created it. The step where the ServiceAccount itself tries
//! to create a TokenReview (403: the requester is not authorized) is out of the fake's scope.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use probelet_test_support as support;

use std::net::SocketAddr;

use http::Request;
use http_body_util::{BodyExt, Full};
use hyper_util::rt::TokioIo;
use serde_json::Value;
use support::apiserver::FakeApiServer;

const NAMESPACE: &str = "fx-more-reviews";
const TOKEN: &str = "eyJhbGciOiJSUzI1NiJ9.fake-sa-token.sig";

fn case(name: &str) -> Value {
    let path = format!("{}/tests/fixtures/apiserver/more-cases.json", env!("CARGO_MANIFEST_DIR"));
    let all: Value = serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap();
    let found = all["cases"].as_array().unwrap().iter().find(|c| c["name"] == name).cloned();
    substitute(&found.unwrap_or_else(|| panic!("case {name} not in the fixture")))
}

/// The recording's placeholders as concrete values (whole words only).
fn substitute(v: &Value) -> Value {
    const PLACEHOLDERS: [(&str, &str); 4] = [
        ("SA-TOKEN", TOKEN),
        ("UID-1", "6f1c7e0a-2b9e-4d1c-9a57-3f6f1b0c2d11"),
        ("UID-2", "0b7d3c2e-5a41-4f8e-8c3d-9e2a1f4b6c22"),
        ("NS", NAMESPACE),
    ];
    match v {
        Value::String(s) => {
            let mut out = s.clone();
            for (from, to) in PLACEHOLDERS {
                out = replace_word(&out, from, to);
            }
            Value::String(out)
        }
        Value::Array(a) => Value::Array(a.iter().map(substitute).collect()),
        Value::Object(m) => Value::Object(m.iter().map(|(k, v)| (k.clone(), substitute(v))).collect()),
        other => other.clone(),
    }
}

fn replace_word(s: &str, from: &str, to: &str) -> String {
    let word = |c: Option<char>| c.is_some_and(|c| c.is_ascii_alphanumeric() || c == '_');
    let mut out = String::new();
    let mut rest = s;
    while let Some(i) = rest.find(from) {
        let before = if i > 0 { rest[..i].chars().last() } else { out.chars().last() };
        let after = rest[i + from.len()..].chars().next();
        out.push_str(&rest[..i]);
        out.push_str(if word(before) || word(after) { from } else { to });
        rest = &rest[i + from.len()..];
    }
    out.push_str(rest);
    out
}

async fn post(addr: SocketAddr, path: &str, body: &Value) -> (u16, Value) {
    let stream = tokio::net::TcpStream::connect(addr).await.unwrap();
    let (mut sender, conn) = hyper::client::conn::http1::handshake(TokioIo::new(stream)).await.unwrap();
    tokio::spawn(conn);
    let request = Request::post(path)
        .header("host", addr.to_string())
        .header("content-type", "application/json")
        .body(Full::new(bytes::Bytes::from(body.to_string())))
        .unwrap();
    let response = sender.send_request(request).await.unwrap();
    let code = response.status().as_u16();
    let bytes = response.into_body().collect().await.unwrap().to_bytes();
    (code, serde_json::from_slice(&bytes).unwrap())
}

/// Sends a recorded step and compares code and body; mismatches are collected.
async fn replay(fake: &FakeApiServer, step: &Value, mismatches: &mut Vec<String>) {
    let label = step["label"].as_str().unwrap();
    let request = &step["request"];
    let (code, body) = post(fake.addr(), request["path"].as_str().unwrap(), &request["body"]).await;
    let expected_code = step["response"]["code"].as_u64().unwrap() as u16;
    let expected = if step["response"]["body"].is_null() {
        &step["response"]["error"]
    } else {
        &step["response"]["body"]
    };
    if code != expected_code {
        mismatches.push(format!("{label}: code {code}, recorded {expected_code}"));
    }
    if &body != expected {
        mismatches.push(format!("{label}:\n  got      {body}\n  recorded {expected}"));
    }
}

#[tokio::test]
async fn token_reviews_replay_as_recorded() {
    let case = case("20a-tokenreview");
    let steps = case["steps"].as_array().unwrap();
    let valid = steps.iter().find(|s| s["label"] == "review-valid-sa-token").unwrap();
    let status = &valid["response"]["body"]["status"];
    let audiences: Vec<&str> =
        status["audiences"].as_array().unwrap().iter().map(|a| a.as_str().unwrap()).collect();
    let fake = FakeApiServer::start().await;
    fake.reviews().add_token(TOKEN, status["user"].clone(), &audiences);

    let mut mismatches = Vec::new();
    let mut replayed = 0;
    for step in steps {
        let path = step["request"]["path"].as_str().unwrap();
        if !path.ends_with("/tokenreviews") || step["label"] == "review-as-serviceaccount-forbidden" {
            continue;
        }
        replay(&fake, step, &mut mismatches).await;
        replayed += 1;
    }
    assert_eq!(replayed, 4, "valid, garbage, empty and wrong-audience reviews");
    assert!(mismatches.is_empty(), "{}", mismatches.join("\n"));
}

#[tokio::test]
async fn subject_access_reviews_replay_as_recorded() {
    let case = case("20b-subjectaccessreview");
    let steps = case["steps"].as_array().unwrap();
    let fake = FakeApiServer::start().await;
    let mut mismatches = Vec::new();
    let mut role = None;
    let mut replayed = 0;
    for step in steps {
        let body = &step["request"]["body"];
        match step["label"].as_str().unwrap() {
            "create-clusterrole" => role = Some(body.clone()),
            "create-clusterrolebinding" => {
                // The binding takes effect at once, as recorded: its grants from now on.
                let role = role.as_ref().expect("the role is created first");
                let subject = &body["subjects"][0];
                assert_eq!(subject["kind"], "ServiceAccount");
                let user = format!(
                    "system:serviceaccount:{}:{}",
                    subject["namespace"].as_str().unwrap(),
                    subject["name"].as_str().unwrap()
                );
                for rule in role["rules"].as_array().unwrap() {
                    for resource in rule["resources"].as_array().unwrap() {
                        let (resource, sub) = resource
                            .as_str()
                            .unwrap()
                            .split_once('/')
                            .unwrap_or((resource.as_str().unwrap(), ""));
                        for verb in rule["verbs"].as_array().unwrap() {
                            fake.reviews().allow(
                                &user,
                                verb.as_str().unwrap(),
                                resource,
                                sub,
                                body["metadata"]["name"].as_str().unwrap(),
                                body["roleRef"]["name"].as_str().unwrap(),
                            );
                        }
                    }
                }
            }
            _ => {
                replay(&fake, step, &mut mismatches).await;
                replayed += 1;
            }
        }
    }
    assert_eq!(replayed, 10, "five questions before the binding and five after");
    assert!(mismatches.is_empty(), "{}", mismatches.join("\n"));
}

/// The agent's reviews wait for its rate limiter: clients with made-up tokens cannot make it
/// send the API server more than its budget, and a request whose turn is further away than
/// the longest wait is refused at once (the client is told to try again) instead of queueing.
#[tokio::test]
async fn reviews_wait_for_the_rate_limiter() {
    use probelet::auth::{ReviewError, Reviewer};
    use probelet::sync::rate::RateLimiter;

    let fake = FakeApiServer::start().await;
    // Two at once, then one every 1,000 s: far past the longest wait.
    let reviewer = Reviewer::new(fake.client(), "node-a", RateLimiter::new(0.001, 2));
    let mut asked = tokio::task::JoinSet::new();
    for i in 0..10 {
        let reviewer = reviewer.clone();
        asked.spawn(async move { reviewer.authenticate(&format!("made-up-{i}")).await });
    }
    let (mut unknown, mut busy) = (0, 0);
    while let Some(answer) = asked.join_next().await {
        match answer.expect("not panicked") {
            Ok(None) => unknown += 1,
            Err(ReviewError::Busy) => busy += 1,
            other => panic!("unexpected {other:?}"),
        }
    }
    assert_eq!((unknown, busy), (2, 8));
    let reviews = fake.requests().into_iter().filter(|r| r.path.ends_with("/tokenreviews")).count();
    assert_eq!(reviews, 2);
}

/// A review the API server never answers fails after `REVIEW_TIMEOUT` (a request waiting for
/// it would otherwise hold its connection for good). Paused time, the fake in process.
#[tokio::test(start_paused = true)]
async fn a_review_the_server_never_answers_fails_after_ten_seconds() {
    use probelet::auth::{REVIEW_TIMEOUT, ReviewError, Reviewer};
    use probelet::sync::rate::RateLimiter;
    use support::apiserver::{Fault, FaultKind, FaultMatcher, FaultTimes};

    let fake = FakeApiServer::start().await;
    fake.inject(Fault {
        matcher: FaultMatcher::PathSuffix("/tokenreviews".into()),
        kind: FaultKind::Delay(std::time::Duration::from_secs(3600)),
        times: FaultTimes::Always,
    });
    let reviewer = Reviewer::new(fake.in_process_client(), "node-a", RateLimiter::new(50.0, 100));
    let started = tokio::time::Instant::now();
    let answer = reviewer.authenticate("made-up").await;
    assert!(matches!(answer, Err(ReviewError::Timeout)), "{answer:?}");
    assert_eq!(started.elapsed(), REVIEW_TIMEOUT);
}

/// A fake whose token reviews take `delay` to answer, a reviewer on it, and its review count.
fn slow_reviews(fake: &FakeApiServer, suffix: &str, delay: std::time::Duration) {
    use support::apiserver::{Fault, FaultKind, FaultMatcher, FaultTimes};
    fake.inject(Fault {
        matcher: FaultMatcher::PathSuffix(suffix.into()),
        kind: FaultKind::Delay(delay),
        times: FaultTimes::Always,
    });
}

fn sent(fake: &FakeApiServer, suffix: &str) -> usize {
    fake.requests().into_iter().filter(|r| r.path.ends_with(suffix)).count()
}

/// Requests that bring the same new token at the same time share one TokenReview, and the same
/// question one SubjectAccessReview (upstream's singleflight): a burst of a scraper's requests
/// does not send the API server one review each.
#[tokio::test(start_paused = true)]
async fn requests_asking_the_same_at_once_share_one_review() {
    use probelet::auth::{NodeAttributes, Reviewer};
    use probelet::sync::rate::RateLimiter;
    use support::apiserver::reviews::{DEFAULT_AUDIENCE, service_account_user};

    let fake = FakeApiServer::start().await;
    let user = service_account_user("monitoring", "scraper", "uid-1", "jti-1");
    fake.reviews().add_token(TOKEN, user, &[DEFAULT_AUDIENCE]);
    fake.reviews().allow(
        "system:serviceaccount:monitoring:scraper",
        "get",
        "nodes",
        "metrics",
        "scrape",
        "node-metrics",
    );
    slow_reviews(&fake, "/tokenreviews", std::time::Duration::from_secs(2));
    slow_reviews(&fake, "/subjectaccessreviews", std::time::Duration::from_secs(2));
    let reviewer = Reviewer::new(fake.in_process_client(), "node-a", RateLimiter::new(50.0, 100));

    let mut asked = tokio::task::JoinSet::new();
    for _ in 0..20 {
        let reviewer = reviewer.clone();
        asked.spawn(async move {
            let user = reviewer.authenticate(TOKEN).await.unwrap().expect("authenticated");
            let attributes = NodeAttributes { verb: "get", subresource: "metrics", node: "node-a".into() };
            reviewer.authorize(&user, &attributes).await.unwrap()
        });
    }
    let allowed = asked.join_all().await;
    assert_eq!(allowed, vec![true; 20]);
    assert_eq!(sent(&fake, "/tokenreviews"), 1, "one token review for twenty requests");
    assert_eq!(sent(&fake, "/subjectaccessreviews"), 1, "one access review for twenty requests");
}

/// A review already sent runs to its end and is cached though the request that asked for it
/// has gone (a connection closed for room while it waited, a client that gave up): the client
/// that comes back finds the answer instead of sending the review again. A request that goes
/// while its review still waits for the rate limiter gives the turn back.
#[tokio::test(start_paused = true)]
async fn a_review_outlives_the_request_that_asked_for_it_once_sent() {
    use std::time::Duration;

    use probelet::auth::Reviewer;
    use probelet::sync::rate::RateLimiter;
    use tokio::time::{Instant, sleep};

    let fake = FakeApiServer::start().await;
    slow_reviews(&fake, "/tokenreviews", Duration::from_secs(3));
    // One at once, then one a second.
    let reviewer = Reviewer::new(fake.in_process_client(), "node-a", RateLimiter::new(1.0, 1));

    let asking = tokio::spawn({
        let reviewer = reviewer.clone();
        async move { reviewer.authenticate("made-up").await }
    });
    // Sleeping (not `advance`) lets every task run before the paused clock moves.
    sleep(Duration::from_secs(1)).await;
    assert_eq!(sent(&fake, "/tokenreviews"), 1);
    asking.abort();
    // Back while the review is still out: given the one in flight, not a second review.
    let started = Instant::now();
    assert_eq!(reviewer.authenticate("made-up").await.unwrap(), None);
    assert_eq!(started.elapsed(), Duration::from_secs(2), "the review sent at 0 s, answered at 3 s");
    sleep(Duration::from_secs(1)).await;
    let started = Instant::now();
    assert_eq!(reviewer.authenticate("made-up").await.unwrap(), None);
    assert_eq!(started.elapsed(), Duration::ZERO, "answered from the cache");
    assert_eq!(sent(&fake, "/tokenreviews"), 1, "not sent again");

    // Gone before it was answered, and no one back for it: it is still answered and cached.
    let asking = tokio::spawn({
        let reviewer = reviewer.clone();
        async move { reviewer.authenticate("made-up-too").await }
    });
    sleep(Duration::from_secs(1)).await;
    asking.abort();
    sleep(Duration::from_secs(3)).await;
    let started = Instant::now();
    assert_eq!(reviewer.authenticate("made-up-too").await.unwrap(), None);
    assert_eq!(started.elapsed(), Duration::ZERO, "answered from the cache");
    assert_eq!(sent(&fake, "/tokenreviews"), 2, "each token reviewed once");
    sleep(Duration::from_secs(1)).await;

    // The bucket is full again (one token). "first" takes it; "second" waits for the next,
    // then hangs up; "third" gets the turn "second" gave back, a second later, not two.
    let first = reviewer.clone();
    let first = tokio::spawn(async move { first.authenticate("first").await });
    tokio::task::yield_now().await;
    let second = tokio::spawn({
        let reviewer = reviewer.clone();
        async move { reviewer.authenticate("second").await }
    });
    sleep(Duration::from_millis(500)).await;
    second.abort();
    let _ = second.await;
    let started = Instant::now();
    assert_eq!(reviewer.authenticate("third").await.unwrap(), None);
    // Its turn half a second on, then the fake's three seconds.
    assert_eq!(started.elapsed(), Duration::from_millis(3500));
    assert_eq!(first.await.unwrap().unwrap(), None);
    let paths: Vec<_> = fake.requests().into_iter().filter(|r| r.path.ends_with("/tokenreviews")).collect();
    assert_eq!(
        paths.len(),
        4,
        "made-up, made-up-too, first and third; the one whose request went was never sent"
    );
}

/// A TokenReview answer whose user has an `extra` value `null` is an authenticated user with
/// no values for that key, as the kubelet (Go) reads it, not an error that turns the client
/// away.
#[tokio::test(start_paused = true)]
async fn a_user_extra_value_of_null_is_read_as_none() {
    use probelet::auth::Reviewer;
    use probelet::sync::rate::RateLimiter;
    use support::apiserver::reviews::DEFAULT_AUDIENCE;

    let fake = FakeApiServer::start().await;
    let user = serde_json::json!({"username": "bob", "extra": {"scopes": null, "team": ["a"]}});
    fake.reviews().add_token(TOKEN, user, &[DEFAULT_AUDIENCE]);
    let reviewer = Reviewer::new(fake.in_process_client(), "node-a", RateLimiter::new(50.0, 100));
    let user = reviewer.authenticate(TOKEN).await.unwrap().expect("authenticated");
    assert_eq!(user.username.as_deref(), Some("bob"));
    let extra = user.extra.expect("extra kept");
    assert_eq!(extra.get("scopes"), Some(&Vec::new()));
    assert_eq!(extra.get("team"), Some(&vec!["a".to_owned()]));
}
