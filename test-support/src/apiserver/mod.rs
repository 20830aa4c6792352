//! A fake Kubernetes API server for tests: plain HTTP on 127.0.0.1, spoken to by an unchanged
//! `kube::Client`. It serves pods (CRUD, list, watch, `status`, `binding`, `exec`) and events
//! (core/v1 and events.k8s.io/v1) with the behaviour recorded from a real kube-apiserver v1.36.2
//! (`tests/fixtures/apiserver`, replayed by `tests/apiserver_fixtures.rs`): the same
//! patch semantics, validation, error `Status` bodies, resourceVersions and watch events.
//!
//! Tests can also look inside ([`FakeApiServer::pod`], [`FakeApiServer::requests`]), seed state
//! ([`FakeApiServer::insert_pod`]), inject faults ([`FakeApiServer::inject`]), and stop and
//! restart it on the same port with its store, as a SIGTERMed server would stop
//! ([`FakeApiServer::stop`], [`FakeApiServer::restart`]). [`RecordedRequest::authorization`]
//! says what the real server would have authorized each request as.
//!
//! Known gaps against the real server: no managedFields, no admission beyond the defaults a
//! plain cluster applies, no Namespace objects (any namespace exists), server-side apply without
//! field ownership or conflicts, and the spec-update error omits the upstream spec diff.

pub mod exec;
pub mod golang;
pub mod patch;
pub mod reviews;
pub mod schema;
pub mod selectors;
mod store;
mod validation;

pub use store::Backup;

use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use bytes::Bytes;
use futures::StreamExt;
use http::{HeaderValue, Method, Request, Response, StatusCode};
use http_body_util::{BodyExt, Full, StreamBody, combinators::BoxBody};
use hyper::body::{Frame, Incoming};
use hyper::service::service_fn;
use hyper_util::rt::TokioIo;
use k8s_openapi::api::core::v1::Pod;
use serde_json::Value;
use tokio::net::TcpListener;
use tokio::sync::watch;
use tokio::task::JoinHandle;

use self::store::{Api, Outcome, Reply, Req, SplitMix, Store, Sub};
use self::validation::{ApiError, Resource};

/// A request the fake received.
#[derive(Clone, Debug)]
pub struct RecordedRequest {
    pub method: Method,
    /// The path without the query.
    pub path: String,
    /// Decoded query parameters in order.
    pub query: Vec<(String, String)>,
    /// The media type without parameters.
    pub content_type: Option<String>,
    /// The body as JSON, or as a JSON string when it is not JSON; `None` when empty.
    pub body: Option<Value>,
    /// The status code answered; `None` when the connection was dropped without an answer.
    pub code: Option<u16>,
    /// The `Upgrade` header (`websocket` for `pods/exec`).
    pub upgrade: Option<String>,
}

/// What the API server authorizes a request as (its `RequestInfo`): API group, resource with
/// its subresource (`pods/status`), verb — the terms of an RBAC rule.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct ResourceAttributes {
    pub group: String,
    pub resource: String,
    pub verb: String,
}

impl RecordedRequest {
    pub fn param(&self, key: &str) -> Option<&str> {
        self.query.iter().find(|(k, _)| k == key).map(|(_, v)| v.as_str())
    }

    pub fn is_watch(&self) -> bool {
        self.param("watch").is_some_and(is_true)
    }

    /// The authorization checks the API server makes for this request, as
    /// `RequestInfoFactory.NewRequestInfo` resolves a resource path (empty for non-resource paths
    /// such as `/version`): GET is `get` with a name, `list` without, `watch` with `watch=true`;
    /// POST `create`, PUT `update`, PATCH `patch`, DELETE `delete` (`deletecollection` without a
    /// name). A websocket upgrade of `pods/exec`, `attach` or `portforward` is also checked for
    /// `create` (`AuthorizePodWebsocketUpgradeCreatePermission`, on by default since 1.31).
    pub fn authorization(&self) -> Vec<ResourceAttributes> {
        let segs: Vec<&str> = self.path.trim_matches('/').split('/').collect();
        let (group, rest) = match segs.as_slice() {
            ["api", _version, rest @ ..] => ("", rest),
            ["apis", group, _version, rest @ ..] => (*group, rest),
            _ => return Vec::new(),
        };
        let parts = match rest {
            ["namespaces", _ns, resource, more @ ..] => [&[*resource][..], more].concat(),
            other => other.to_vec(),
        };
        let (resource, name, subresource) = match parts.as_slice() {
            [resource] => (*resource, None, None),
            [resource, name] => (*resource, Some(*name), None),
            [resource, name, sub, ..] => (*resource, Some(*name), Some(*sub)),
            _ => return Vec::new(),
        };
        let verb = match self.method {
            Method::GET if self.is_watch() => "watch",
            Method::GET if name.is_some() => "get",
            Method::GET => "list",
            Method::POST => "create",
            Method::PUT => "update",
            Method::PATCH => "patch",
            Method::DELETE if name.is_some() => "delete",
            Method::DELETE => "deletecollection",
            _ => return Vec::new(),
        };
        let resource = match subresource {
            Some(sub) => format!("{resource}/{sub}"),
            None => resource.to_owned(),
        };
        let attributes = |verb: &str| ResourceAttributes {
            group: group.to_owned(),
            resource: resource.clone(),
            verb: verb.to_owned(),
        };
        let mut checks = vec![attributes(verb)];
        let websocket = self.upgrade.as_deref().is_some_and(|u| u.eq_ignore_ascii_case("websocket"));
        if websocket && matches!(subresource, Some("exec" | "attach" | "portforward")) && verb == "get" {
            checks.push(attributes("create"));
        }
        checks
    }
}

/// A predicate on a request's method and path.
pub(crate) type RequestPredicate = Arc<dyn Fn(&Method, &str) -> bool + Send + Sync>;

/// Which requests a fault applies to.
#[derive(Clone)]
pub enum FaultMatcher {
    Any,
    Method(Method),
    /// Method and exact path (no query).
    MethodPath(Method, String),
    /// Any method, path ending with this (e.g. `/status`).
    PathSuffix(String),
    Predicate(RequestPredicate),
}

impl FaultMatcher {
    fn matches(&self, method: &Method, path: &str) -> bool {
        match self {
            FaultMatcher::Any => true,
            FaultMatcher::Method(m) => m == method,
            FaultMatcher::MethodPath(m, p) => m == method && p == path,
            FaultMatcher::PathSuffix(s) => path.ends_with(s.as_str()),
            FaultMatcher::Predicate(f) => f(method, path),
        }
    }
}

/// What a fault does.
#[derive(Clone, Debug, PartialEq)]
pub enum FaultKind {
    /// Answer with this code and the Status body the real server sends for it (500
    /// InternalError, 409 Conflict, 429 TooManyRequests with `Retry-After`, 503, 504).
    Status { code: u16, retry_after: Option<u64> },
    /// Wait, then serve the request normally.
    Delay(Duration),
    /// Close the connection without an answer.
    DropConnection,
    /// Answer with this code and this JSON body, whatever the request (a body the client cannot
    /// read as what it asked for: a pod of another shape, a `Status` with a 200).
    Body { code: u16, body: Value },
    /// Another writer changes the pod the request names first (an annotation,
    /// `fake.probelet.test/touched`, set to the new resourceVersion: the version moves on and
    /// watches see a modification), then the request is served as usual: a write carrying a
    /// `metadata.resourceVersion` precondition read before it gets 409 Conflict, one without
    /// lands. A runtime that writes the pod more often than a status PATCH takes its round trip.
    Touch,
    /// As [`FaultKind::Touch`], and the other writer also sets the pod's `status.phase` to this:
    /// a runtime that finishes the pod between the client's read and its write.
    Finish(String),
    /// Serve the request as usual (a write is applied), send the answer's headers and the first
    /// `after` bytes of its body, then nothing more while the server runs: a server, or a
    /// connection, that stalls mid-answer.
    StallBody { after: usize },
    /// Serve the request as usual (a write is applied), then close the connection without an
    /// answer: a connection reset after the request was sent.
    ServeThenDrop,
    /// Answer with this code and this plain text, with `Retry-After` when given: what API
    /// Priority and Fairness answers when it throttles (`429`, `Too many requests, please try
    /// again later.`), or a proxy in front of the server (`503`).
    Text { code: u16, text: String, retry_after: Option<u64> },
}

impl FaultKind {
    pub fn status(code: u16) -> FaultKind {
        FaultKind::Status { code, retry_after: None }
    }

    pub fn too_many_requests(retry_after_secs: u64) -> FaultKind {
        FaultKind::Status { code: 429, retry_after: Some(retry_after_secs) }
    }

    /// API Priority and Fairness's `429`: plain text and a `Retry-After` header, no `Status`.
    pub fn throttled(retry_after_secs: u64) -> FaultKind {
        FaultKind::Text {
            code: 429,
            text: "Too many requests, please try again later.\n".into(),
            retry_after: Some(retry_after_secs),
        }
    }
}

/// How often a fault fires.
#[derive(Clone, Debug, PartialEq)]
pub enum FaultTimes {
    /// The next `n` matching requests.
    Times(u32),
    /// Each matching request with probability `p`, drawn from a generator seeded with `seed`.
    Probability {
        p: f64,
        seed: u64,
    },
    Always,
}

/// A fault to inject.
#[derive(Clone)]
pub struct Fault {
    pub matcher: FaultMatcher,
    pub kind: FaultKind,
    pub times: FaultTimes,
}

struct ActiveFault {
    fault: Fault,
    remaining: Option<u32>,
    rng: SplitMix,
}

impl ActiveFault {
    fn fires(&mut self, method: &Method, path: &str) -> bool {
        if !self.fault.matcher.matches(method, path) {
            return false;
        }
        match &self.fault.times {
            FaultTimes::Times(_) => match &mut self.remaining {
                Some(n) if *n > 0 => {
                    *n -= 1;
                    true
                }
                _ => false,
            },
            FaultTimes::Probability { p, .. } => self.rng.next_f64() < *p,
            FaultTimes::Always => true,
        }
    }
}

struct Shared {
    store: Mutex<Store>,
    requests: Mutex<Vec<RecordedRequest>>,
    faults: Mutex<Vec<ActiveFault>>,
    shutdown: watch::Receiver<bool>,
    exec: exec::ExecState,
    reviews: Mutex<reviews::Reviews>,
    /// The one bearer token the server accepts, when set ([`FakeApiServer::require_token`]).
    token: Mutex<Option<String>>,
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    // A panic while holding the lock fails the test that caused it; keep serving the others.
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// The fake API server. Dropping it stops it.
pub struct FakeApiServer {
    addr: SocketAddr,
    shared: Arc<Shared>,
    shutdown_tx: watch::Sender<bool>,
    /// Stops the current accept loop ([`FakeApiServer::stop`]).
    stop_tx: Mutex<watch::Sender<bool>>,
    accept: Mutex<Option<JoinHandle<()>>>,
}

impl FakeApiServer {
    /// Starts a fake on 127.0.0.1 with a free port.
    pub async fn start() -> FakeApiServer {
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind 127.0.0.1:0");
        let addr = listener.local_addr().expect("local addr");
        let (shutdown_tx, shutdown_rx) = watch::channel(false);
        let seed = golang::Instant::now().nanos as u64 ^ u64::from(addr.port()) << 32;
        let shared = Arc::new(Shared {
            store: Mutex::new(Store::new(seed)),
            requests: Mutex::new(Vec::new()),
            faults: Mutex::new(Vec::new()),
            shutdown: shutdown_rx.clone(),
            exec: exec::ExecState::default(),
            reviews: Mutex::default(),
            token: Mutex::default(),
        });
        let (stop_tx, stop_rx) = watch::channel(false);
        let accept = tokio::spawn(accept_loop(listener, shared.clone(), shutdown_rx, stop_rx));
        FakeApiServer {
            addr,
            shared,
            shutdown_tx,
            stop_tx: Mutex::new(stop_tx),
            accept: Mutex::new(Some(accept)),
        }
    }

    /// Stops the server as a SIGTERM stops a real one (case 21b of `more-cases.json`): new
    /// connections are refused at once, idle ones closed, requests in flight answered; an open
    /// watch stays open but silent for `silent_for` (the real server's shutdown timeout, 60 s),
    /// then ends with a clean EOF. The store is kept for [`FakeApiServer::restart`].
    pub async fn stop(&self, silent_for: Duration) {
        let _ = lock(&self.stop_tx).send(true);
        let handle = lock(&self.accept).take();
        if let Some(h) = handle {
            let _ = h.await;
        }
        let watches = lock(&self.shared.store).detach_watches();
        tokio::spawn(async move {
            tokio::time::sleep(silent_for).await;
            drop(watches);
        });
    }

    /// Starts the stopped server again on the same port with the same store. Its watch cache
    /// starts empty: a watch from a resourceVersion seen before the stop gets 200 and a single
    /// ERROR event, 410 Expired "too old resource version", and the client has to list again.
    pub async fn restart(&self) {
        let listener = TcpListener::bind(self.addr).await.expect("bind the fake's port again");
        lock(&self.shared.store).restarted();
        let (stop_tx, stop_rx) = watch::channel(false);
        *lock(&self.stop_tx) = stop_tx;
        let accept =
            tokio::spawn(accept_loop(listener, self.shared.clone(), self.shared.shutdown.clone(), stop_rx));
        *lock(&self.accept) = Some(accept);
    }

    /// From now on, only requests with `Authorization: Bearer <token>` are served; any other gets
    /// 401 Unauthorized, as from the authentication filter (a service account token rotated:
    /// the old one is refused). `None` serves every request again.
    pub fn require_token(&self, token: Option<&str>) {
        *lock(&self.shared.token) = token.map(str::to_owned);
    }

    /// The tokens TokenReview accepts and what SubjectAccessReview allows.
    pub fn reviews(&self) -> MutexGuard<'_, reviews::Reviews> {
        lock(&self.shared.reviews)
    }

    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// `http://127.0.0.1:PORT`.
    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// A `kube::Client` for this server (kube's defaults: it retries 429, 503 and 504).
    pub fn client(&self) -> kube::Client {
        self.client_with(|_| {})
    }

    /// A `kube::Client` that calls this server's handlers in-process, as a tower service (no
    /// socket, no kube retry layer): everything runs on the test's runtime and its timers, so a
    /// test under paused time controls the whole round trip. The same store, faults and request
    /// log as the TCP server; a dropped connection is a transport error. `pods/exec` needs the
    /// TCP server (it upgrades the connection).
    pub fn in_process_client(&self) -> kube::Client {
        let shared = self.shared.clone();
        let service = tower::service_fn(move |req: Request<kube::client::Body>| {
            let shared = shared.clone();
            async move { respond(shared, req, None).await }
        });
        kube::Client::new(service, "default")
    }

    /// A `kube::Client` for this server with its config adjusted first (e.g.
    /// `default_retry = false` to see 429/503/504 answers).
    pub fn client_with(&self, adjust: impl FnOnce(&mut kube::Config)) -> kube::Client {
        let _ = rustls::crypto::ring::default_provider().install_default();
        let mut config = kube::Config::new(self.url().parse().expect("fake URL"));
        adjust(&mut config);
        kube::Client::try_from(config).expect("kube client for the fake")
    }

    /// Stores a pod as it is (status included), filling in uid, creationTimestamp, generation and
    /// resourceVersion; namespace `default` when unset. Watches see ADDED (or MODIFIED).
    pub fn insert_pod(&self, pod: Pod) -> Pod {
        let v = serde_json::to_value(&pod).expect("pod to JSON");
        let stored = lock(&self.shared.store).insert(Api::Pods, &v).expect("insert_pod");
        serde_json::from_value(stored).expect("stored pod")
    }

    /// Stores a pod's JSON without decoding it against the schema (a field of another type
    /// than the client's structs expect, as an API server of another version may serve);
    /// returns it as stored.
    pub fn insert_pod_json_as_is(&self, pod: Value) -> Value {
        lock(&self.shared.store).insert_as_is(Api::Pods, pod).expect("insert_pod_json_as_is")
    }

    /// The stored pod, as a GET returns it.
    pub fn pod(&self, ns: &str, name: &str) -> Option<Pod> {
        self.pod_json(ns, name).and_then(|v| serde_json::from_value(v).ok())
    }

    /// The stored pod as JSON, exactly as a GET returns it.
    pub fn pod_json(&self, ns: &str, name: &str) -> Option<Value> {
        lock(&self.shared.store).pod(ns, name)
    }

    /// All stored pods.
    pub fn pods(&self) -> Vec<Pod> {
        lock(&self.shared.store)
            .all(Api::Pods)
            .into_iter()
            .filter_map(|v| serde_json::from_value(v).ok())
            .collect()
    }

    /// All stored events in their core/v1 form.
    pub fn events(&self) -> Vec<Value> {
        lock(&self.shared.store).all(Api::EventsCore)
    }

    /// The current (latest) resourceVersion.
    pub fn resource_version(&self) -> u64 {
        lock(&self.shared.store).rv
    }

    /// A snapshot of what the server stores, for [`FakeApiServer::restore`].
    pub fn backup(&self) -> Backup {
        lock(&self.shared.store).backup()
    }

    /// The server's etcd restored from `backup` without `--bump-revision` (resourceVersions go
    /// back to the backup's) and the server restarted on it: open watches end, and a watch from
    /// a version handed out since the backup gets one ERROR event, 504 "Too large resource
    /// version".
    pub fn restore(&self, backup: Backup) {
        lock(&self.shared.store).restore(backup);
    }

    /// Forgets the change history: watches from any earlier version get 410 Expired.
    pub fn compact(&self) {
        lock(&self.shared.store).compact();
    }

    /// The next `n` changes reach the open watches as lines that are no JSON (a proxy that
    /// garbles the stream); they are stored as usual.
    pub fn corrupt_watch_events(&self, n: u32) {
        lock(&self.shared.store).corrupt_watch_events(n);
    }

    /// Ends all open watch streams (clients see the stream close and re-watch).
    pub fn close_watches(&self) {
        lock(&self.shared.store).close_watches();
    }

    pub fn requests(&self) -> Vec<RecordedRequest> {
        lock(&self.shared.requests).clone()
    }

    pub fn clear_requests(&self) {
        lock(&self.shared.requests).clear();
    }

    /// When each request of `method` arrives, on tokio's clock (paused or not), for every path
    /// `path` accepts: a fault that never fires but sees every request. Injected before the
    /// faults it should see arrive at.
    pub fn arrivals(
        &self,
        method: Method,
        path: impl Fn(&str) -> bool + Send + Sync + 'static,
    ) -> Arc<Mutex<Vec<tokio::time::Instant>>> {
        let arrivals = Arc::new(Mutex::new(Vec::new()));
        let seen = arrivals.clone();
        self.inject(Fault {
            matcher: FaultMatcher::Predicate(Arc::new(move |m, p| {
                if *m == method && path(p) {
                    lock(&seen).push(tokio::time::Instant::now());
                }
                false
            })),
            kind: FaultKind::Delay(Duration::ZERO),
            times: FaultTimes::Always,
        });
        arrivals
    }

    pub fn inject(&self, fault: Fault) {
        let (remaining, seed) = match &fault.times {
            FaultTimes::Times(n) => (Some(*n), 0),
            FaultTimes::Probability { seed, .. } => (None, *seed),
            FaultTimes::Always => (None, 0),
        };
        lock(&self.shared.faults).push(ActiveFault { fault, remaining, rng: SplitMix(seed) });
    }

    /// Stops accepting, ends open connections and watches.
    pub async fn shutdown(&self) {
        let _ = self.shutdown_tx.send(true);
        lock(&self.shared.store).close_watches();
        let handle = lock(&self.accept).take();
        if let Some(h) = handle {
            let _ = h.await;
        }
    }
}

impl Drop for FakeApiServer {
    fn drop(&mut self) {
        let _ = self.shutdown_tx.send(true);
        if let Some(h) = lock(&self.accept).take() {
            h.abort();
        }
    }
}

async fn accept_loop(
    listener: TcpListener,
    shared: Arc<Shared>,
    mut shutdown: watch::Receiver<bool>,
    mut stop: watch::Receiver<bool>,
) {
    let mut conns = tokio::task::JoinSet::new();
    loop {
        tokio::select! {
            _ = shutdown.changed() => {
                conns.shutdown().await;
                return;
            }
            _ = stop.changed() => break,
            accepted = listener.accept() => {
                let Ok((stream, _)) = accepted else { continue };
                let shared = shared.clone();
                let mut stop = stop.clone();
                conns.spawn(async move {
                    let svc = service_fn(move |req| handle(shared.clone(), req));
                    let conn = hyper::server::conn::http1::Builder::new()
                        .serve_connection(TokioIo::new(stream), svc)
                        .with_upgrades();
                    tokio::pin!(conn);
                    tokio::select! {
                        _ = &mut conn => {}
                        // Go's `Server.Shutdown`: idle connections close, requests in flight
                        // (an open watch) go on until they end.
                        _ = stop.changed() => {
                            conn.as_mut().graceful_shutdown();
                            let _ = conn.await;
                        }
                    }
                });
            }
            Some(_) = conns.join_next(), if !conns.is_empty() => {}
        }
    }
    // Stopped: the listener goes (new connections are refused); the open connections finish
    // what they serve on their own.
    drop(listener);
    conns.detach_all();
}

/// Returned by the service to make hyper close the connection without an answer.
#[derive(Debug)]
struct DropConnection;

impl std::fmt::Display for DropConnection {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("connection dropped by the fake API server")
    }
}

impl std::error::Error for DropConnection {}

type Body = BoxBody<Bytes, Infallible>;

fn is_true(v: &str) -> bool {
    matches!(v, "1" | "t" | "T" | "true" | "TRUE" | "True")
}

/// Percent-decoding with `+` as space, like Go's `url.ParseQuery`.
fn unescape(s: &str) -> String {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        match b[i] {
            b'+' => out.push(b' '),
            b'%' if i + 2 < b.len() => {
                match u8::from_str_radix(std::str::from_utf8(&b[i + 1..i + 3]).unwrap_or("zz"), 16) {
                    Ok(x) => {
                        out.push(x);
                        i += 2;
                    }
                    Err(_) => out.push(b'%'),
                }
            }
            c => out.push(c),
        }
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

fn parse_query(q: &str) -> Vec<(String, String)> {
    q.split('&')
        .filter(|p| !p.is_empty())
        .map(|p| match p.split_once('=') {
            Some((k, v)) => (unescape(k), unescape(v)),
            None => (unescape(p), String::new()),
        })
        .collect()
}

async fn handle(shared: Arc<Shared>, mut req: Request<Incoming>) -> Result<Response<Body>, DropConnection> {
    // `pods/exec` upgrades the connection: claim the upgrade before the body is taken.
    let exec_upgrade = exec::claim(&mut req);
    respond(shared, req, exec_upgrade).await
}

/// Answers one request, over a connection or in-process ([`FakeApiServer::in_process_client`]):
/// records it, applies the faults, and routes it to the store.
async fn respond<B: hyper::body::Body>(
    shared: Arc<Shared>,
    req: Request<B>,
    exec_upgrade: Option<exec::ExecUpgrade>,
) -> Result<Response<Body>, DropConnection> {
    let upgrade = req.headers().get(http::header::UPGRADE).and_then(|v| v.to_str().ok()).map(str::to_owned);
    let refused = lock(&shared.token).as_ref().is_some_and(|token| {
        let sent = req.headers().get(http::header::AUTHORIZATION).and_then(|v| v.to_str().ok());
        sent != Some(format!("Bearer {token}").as_str())
    });
    let method = req.method().clone();
    let path = req.uri().path().to_string();
    let query = parse_query(req.uri().query().unwrap_or(""));
    let content_type = req
        .headers()
        .get(http::header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .map(|v| v.split(';').next().unwrap_or("").trim().to_ascii_lowercase());
    let body = match req.into_body().collect().await {
        Ok(c) => c.to_bytes(),
        Err(_) => return Err(DropConnection),
    };
    let recorded_body = if body.is_empty() {
        None
    } else {
        Some(
            serde_json::from_slice(&body)
                .unwrap_or_else(|_| Value::String(String::from_utf8_lossy(&body).into_owned())),
        )
    };
    let index = {
        let mut reqs = lock(&shared.requests);
        reqs.push(RecordedRequest {
            method: method.clone(),
            path: path.clone(),
            query: query.clone(),
            content_type: content_type.clone(),
            body: recorded_body,
            code: None,
            upgrade,
        });
        reqs.len() - 1
    };
    let record = |code: Option<u16>| {
        if let Some(r) = lock(&shared.requests).get_mut(index) {
            r.code = code;
        }
    };
    if refused {
        record(Some(401));
        return Ok(reply_response(Reply::error(&ApiError::unauthorized())));
    }

    let fault =
        lock(&shared.faults).iter_mut().find_map(|f| f.fires(&method, &path).then(|| f.fault.kind.clone()));
    let mut after_serving = None;
    match fault {
        Some(FaultKind::DropConnection) => return Err(DropConnection),
        Some(FaultKind::Delay(d)) => tokio::time::sleep(d).await,
        Some(FaultKind::Touch) => {
            if let Some((ns, name)) = pod_of(&path) {
                lock(&shared.store).touch_pod(ns, name, None);
            }
        }
        Some(FaultKind::Finish(phase)) => {
            if let Some((ns, name)) = pod_of(&path) {
                lock(&shared.store).touch_pod(ns, name, Some(&phase));
            }
        }
        Some(FaultKind::Status { code, retry_after }) => {
            let e = fault_error(code, retry_after, &path);
            record(Some(e.code));
            return Ok(reply_response(Reply::error(&e)));
        }
        Some(FaultKind::Body { code, body }) => {
            record(Some(code));
            let body = serde_json::to_vec(&body).unwrap_or_default();
            return Ok(reply_response(Reply { code, body, warnings: Vec::new(), retry_after: None }));
        }
        Some(FaultKind::Text { code, text, retry_after }) => {
            record(Some(code));
            let mut resp =
                reply_response(Reply { code, body: text.into_bytes(), warnings: Vec::new(), retry_after });
            resp.headers_mut()
                .insert(http::header::CONTENT_TYPE, HeaderValue::from_static("text/plain; charset=utf-8"));
            return Ok(resp);
        }
        Some(kind @ (FaultKind::StallBody { .. } | FaultKind::ServeThenDrop)) => after_serving = Some(kind),
        None => {}
    }

    if let Some(up) = exec_upgrade {
        let resp = exec::serve(&shared, &method, &query, up);
        record(Some(resp.status().as_u16()));
        return Ok(resp);
    }

    let store_req = Req { query: &query, content_type: content_type.as_deref().unwrap_or(""), body: &body };
    let timeout = store_req.param("timeoutSeconds").and_then(|t| t.parse::<u64>().ok());
    let outcome = route(&shared, &method, &path, &store_req);
    match (outcome, after_serving) {
        (Outcome::Reply(_) | Outcome::Drop, Some(FaultKind::ServeThenDrop)) => Err(DropConnection),
        (Outcome::Reply(r), Some(FaultKind::StallBody { after })) => {
            record(Some(r.code));
            Ok(stalled_response(r, after, shared.shutdown.clone()))
        }
        (Outcome::Reply(r), _) => {
            record(Some(r.code));
            Ok(reply_response(r))
        }
        (Outcome::Drop, _) => Err(DropConnection),
        (Outcome::Watch(w), _) => {
            record(Some(200));
            let bookmarks = store_req.param("allowWatchBookmarks").is_some_and(is_true);
            let bookmark = bookmarks.then(|| (shared.clone(), lock(&shared.store).rv));
            Ok(watch_response(w, timeout, shared.shutdown.clone(), bookmark))
        }
    }
}

/// The namespace and name of the pod a path names (`/api/v1/namespaces/{ns}/pods/{name}…`).
fn pod_of(path: &str) -> Option<(&str, &str)> {
    match path.trim_matches('/').split('/').collect::<Vec<_>>().as_slice() {
        ["api", "v1", "namespaces", ns, "pods", name, ..] => Some((*ns, *name)),
        _ => None,
    }
}

fn fault_error(code: u16, retry_after: Option<u64>, path: &str) -> ApiError {
    let name = path.split('/').skip_while(|s| *s != "pods" && *s != "events").nth(1).unwrap_or("");
    match code {
        409 => ApiError::modified(&Resource::PODS, name),
        429 => ApiError::too_many_requests(retry_after.unwrap_or(1)),
        500 => ApiError::internal_error("injected fault"),
        503 => ApiError::service_unavailable(),
        504 => ApiError {
            code: 504,
            reason: "Timeout",
            message: "Timeout: request did not complete within the allotted timeout".into(),
            details: Some(serde_json::json!({})),
            retry_after,
        },
        _ => ApiError { code, reason: "", message: "injected fault".into(), details: None, retry_after },
    }
}

fn reply_response(r: Reply) -> Response<Body> {
    let mut resp = Response::new(Full::new(Bytes::from(r.body)).boxed());
    *resp.status_mut() = StatusCode::from_u16(r.code).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    let h = resp.headers_mut();
    h.insert(http::header::CONTENT_TYPE, HeaderValue::from_static("application/json"));
    h.insert(http::header::CACHE_CONTROL, HeaderValue::from_static("no-cache, private"));
    for w in r.warnings {
        if let Ok(v) = HeaderValue::from_str(&format!("299 - {}", golang::quote(&w))) {
            h.append(http::header::WARNING, v);
        }
    }
    if let Some(s) = r.retry_after {
        h.insert(http::header::RETRY_AFTER, HeaderValue::from(s));
    }
    resp
}

/// `r` with only the first `after` bytes of its body sent; the rest never comes, and the body
/// ends (without the rest) when the server shuts down.
fn stalled_response(r: Reply, after: usize, mut shutdown: watch::Receiver<bool>) -> Response<Body> {
    let full = reply_response(r);
    let (parts, body) = full.into_parts();
    let head = futures::stream::once(async move {
        let bytes = body.collect().await.map(|c| c.to_bytes()).unwrap_or_default();
        bytes.slice(..after.min(bytes.len()))
    });
    let stall = futures::stream::once(async move {
        let _ = shutdown.wait_for(|stopped| *stopped).await;
        Bytes::new()
    });
    let stream = head.chain(stall).filter(|b| futures::future::ready(!b.is_empty()));
    let body = StreamBody::new(stream.map(|b| Ok::<_, Infallible>(Frame::data(b))));
    let mut resp = Response::from_parts(parts, BodyExt::boxed(body));
    // The length the full body had would let the client see the stall as a short body.
    resp.headers_mut().remove(http::header::CONTENT_LENGTH);
    resp
}

/// How long before a watch's timeout the fake sends its bookmark. The real server's bookmarks
/// are not deterministic (case 21a: at 3.0 and 4.0 s of a 5 s watch in one run, 3.5 s in
/// another); the fake sends one, at 3.0 s of 5.
const BOOKMARK_BEFORE_TIMEOUT: Duration = Duration::from_secs(2);

/// The watch stream: the initial events, then live ones until the store ends the watch, the
/// server shuts down or `timeoutSeconds` pass (a clean EOF). With `allowWatchBookmarks`
/// (`bookmark`: the store and its version when the watch began), one BOOKMARK before the
/// timeout, only if the store changed meanwhile (a quiet watch gets none, as in case 21a).
fn watch_response(
    w: store::WatchStart,
    timeout: Option<u64>,
    shutdown: watch::Receiver<bool>,
    bookmark: Option<(Arc<Shared>, u64)>,
) -> Response<Body> {
    struct State {
        api: Api,
        initial: std::collections::VecDeque<Bytes>,
        live: Option<tokio::sync::mpsc::UnboundedReceiver<Bytes>>,
        deadline: Option<tokio::time::Instant>,
        bookmark: Option<(Arc<Shared>, u64, tokio::time::Instant)>,
        shutdown: watch::Receiver<bool>,
    }
    let deadline = timeout.map(|t| tokio::time::Instant::now() + Duration::from_secs(t));
    let state = State {
        api: w.api,
        initial: w.initial.into(),
        live: w.live,
        deadline,
        bookmark: bookmark.zip(deadline).map(|((shared, rv), d)| (shared, rv, d - BOOKMARK_BEFORE_TIMEOUT)),
        shutdown,
    };
    let stream = futures::stream::unfold(state, |mut s| async move {
        if let Some(line) = s.initial.pop_front() {
            return Some((line, s));
        }
        let rx = s.live.as_mut()?;
        if *s.shutdown.borrow() {
            return None;
        }
        let deadline = s.deadline;
        let sleep = async move {
            match deadline {
                Some(d) => tokio::time::sleep_until(d).await,
                None => std::future::pending().await,
            }
        };
        let bookmark_at = s.bookmark.as_ref().map(|(_, _, at)| *at);
        let bookmark_due = async move {
            match bookmark_at {
                Some(at) => tokio::time::sleep_until(at).await,
                None => std::future::pending().await,
            }
        };
        let mut shutdown = s.shutdown.clone();
        tokio::select! {
            line = rx.recv() => line.map(|l| (l, s)),
            _ = bookmark_due => {
                let (shared, began, _) = s.bookmark.take()?;
                let store = lock(&shared.store);
                let line = (store.rv > began).then(|| store.bookmark_line(s.api));
                drop(store);
                // Nothing changed: no bookmark (the empty line is filtered out below).
                Some((line.unwrap_or_default(), s))
            }
            _ = sleep => None,
            _ = shutdown.changed() => None,
        }
    });
    let stream = stream.filter(|b| futures::future::ready(!b.is_empty()));
    let body = StreamBody::new(stream.map(|b| Ok::<_, Infallible>(Frame::data(b))));
    let mut resp = Response::new(BodyExt::boxed(body));
    resp.headers_mut().insert(http::header::CONTENT_TYPE, HeaderValue::from_static("application/json"));
    resp.headers_mut().insert(http::header::CACHE_CONTROL, HeaderValue::from_static("no-cache, private"));
    resp
}

/// Maps a path to the store operation.
fn route(shared: &Shared, method: &Method, path: &str, req: &Req) -> Outcome {
    let segs: Vec<&str> = path.trim_matches('/').split('/').collect();
    if segs == ["version"] && method == Method::GET {
        let v = serde_json::json!({"major": "1", "minor": "36", "gitVersion": "v1.36.2", "platform": "linux/amd64"});
        return Outcome::Reply(Reply {
            code: 200,
            body: v.to_string().into_bytes(),
            warnings: Vec::new(),
            retry_after: None,
        });
    }
    if let Some(outcome) = reviews::route(&lock(&shared.reviews), method, &segs, req) {
        return outcome;
    }
    let (api, rest): (Api, &[&str]) = match segs.as_slice() {
        ["api", "v1", rest @ ..] => match rest {
            ["pods"] | ["namespaces", _, "pods", ..] => (Api::Pods, rest),
            ["events"] | ["namespaces", _, "events", ..] => (Api::EventsCore, rest),
            _ => return ApiError::route_not_found().into(),
        },
        ["apis", "events.k8s.io", "v1", rest @ ..] => match rest {
            ["events"] | ["namespaces", _, "events", ..] => (Api::EventsV1, rest),
            _ => return ApiError::route_not_found().into(),
        },
        _ => return ApiError::route_not_found().into(),
    };
    let mut store = lock(&shared.store);
    let watch = req.param("watch").is_some_and(is_true);
    match rest {
        [_] => match *method {
            Method::GET if watch => store.watch(api, None, req),
            Method::GET => store.list(api, None, req),
            _ => ApiError::method_not_allowed().into(),
        },
        ["namespaces", ns, _] => match *method {
            Method::GET if watch => store.watch(api, Some(ns), req),
            Method::GET => store.list(api, Some(ns), req),
            Method::POST => store.create(api, ns, req),
            _ => ApiError::method_not_allowed().into(),
        },
        ["namespaces", ns, _, name] => match *method {
            Method::GET => store.get(api, ns, name, req),
            Method::PUT => store.update(api, Sub::Main, ns, name, req),
            Method::PATCH => store.patch(api, Sub::Main, ns, name, req),
            Method::DELETE => store.delete(api, ns, name, req),
            _ => ApiError::method_not_allowed().into(),
        },
        ["namespaces", ns, "pods", name, "status"] if api == Api::Pods => match *method {
            Method::GET => store.get(api, ns, name, req),
            Method::PUT => store.update(api, Sub::Status, ns, name, req),
            Method::PATCH => store.patch(api, Sub::Status, ns, name, req),
            _ => ApiError::method_not_allowed().into(),
        },
        ["namespaces", ns, "pods", name, "binding"] if api == Api::Pods => match *method {
            Method::POST => store.bind(ns, name, req),
            _ => ApiError::method_not_allowed().into(),
        },
        _ => ApiError::route_not_found().into(),
    }
}
