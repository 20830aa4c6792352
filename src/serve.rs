//! The agent's HTTP endpoints: `/` (the status page, [`page`]), `/metrics` (Prometheus text),
//! `/healthz`, `/readyz` (ready once the pod source has synced), `/pods` (a `v1.PodList` with current statuses, like the
//! kubelet's read-only `/pods`), `/pods/{namespace}/{name}/probes` (each probe's last
//! results) and `/events` (recent events).
//!
//! The listener is hardened against slow and idle clients: a request head must arrive within
//! [`Limits::header_read_timeout`] (hyper starts that timer again whenever a kept-alive
//! connection waits for its next request, so it is also the idle timeout), and at most
//! [`Limits::max_connections`] connections are open at once. When the cap is reached, the
//! oldest idle connection (serving and writing nothing, and quiet for 200 ms since its accept,
//! whatever bytes it sends: a slow client; or at once once it has had an answer: one kept
//! alive) is closed to make room, so `/healthz` keeps answering while slow clients hold the listener. A connection whose
//! answer is still going out, or that has just connected or just been answered, is not closed
//! for room; while none is idle, new ones wait in the kernel's backlog. Who may read which endpoint is
//! [`crate::auth`]'s business.

use std::collections::BTreeMap;
use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::Router;
use axum::extract::{Path, State};
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::service::TowerToHyperService;
use k8s_openapi::api::core::v1::Pod;
use probelet_actors::Pipeline;
use probelet_actors::contracts::{PodLookup as _, PodRegistry};
use probelet_actors::metrics::PrometheusRegistry;
use serde_json::json;
use tokio::sync::{Semaphore, oneshot, watch};
use tokio::time::Instant;
use tokio_rustls::TlsAcceptor;
use tokio_util::either::Either;
use tower::ServiceExt as _;

use crate::auth::{Reviewer, guard};
use crate::host::events::EventLog;
use crate::host::history::ProbeHistory;

pub mod page;
pub mod tls;

/// What the endpoints read.
#[derive(Clone)]
pub struct ServeState {
    pub registry: Arc<PrometheusRegistry>,
    pub pipeline: Pipeline,
    pub pods: PodRegistry,
    pub history: ProbeHistory,
    pub events: EventLog,
    /// The pod source has delivered its first full set.
    pub ready: Arc<AtomicBool>,
    /// When the agent's main thread last ran: `/healthz` fails once it has been quiet for
    /// [`MAIN_THREAD_STALL`].
    pub heartbeat: Heartbeat,
}

/// How long the agent's main thread (its actors: the container runtime, the status manager,
/// the pod source) may go without running before `/healthz` fails. The listener answers from
/// a thread of its own, so a busy main thread (thousands of containers starting) does not
/// make the agent look dead; one stuck for a minute does, and a liveness probe restarts it.
/// The kubelet's own `/healthz` fails when its sync loop has not run for 5 minutes; a minute
/// is enough for the longest burst measured here (docs/reliability.md, "Thousands of starts
/// at once").
pub const MAIN_THREAD_STALL: Duration = Duration::from_secs(60);

/// When the main thread last ran, beaten by a task on it ([`Heartbeat::keep_beating`]) and
/// read from the listener's thread.
#[derive(Clone, Debug)]
pub struct Heartbeat {
    origin: std::time::Instant,
    /// Milliseconds from `origin` to the last beat.
    last: Arc<AtomicU64>,
}

impl Default for Heartbeat {
    fn default() -> Self {
        Heartbeat::new()
    }
}

impl Heartbeat {
    /// A heartbeat that beat just now.
    // The real clock on purpose: the beat and its reader run on two threads with runtimes of
    // their own, and a paused test clock on one of them must not look like a stall.
    #[allow(clippy::disallowed_methods)]
    pub fn new() -> Self {
        Heartbeat { origin: std::time::Instant::now(), last: Arc::new(AtomicU64::new(0)) }
    }

    pub fn beat(&self) {
        let now = u64::try_from(self.origin.elapsed().as_millis()).unwrap_or(u64::MAX);
        self.last.store(now, Ordering::Relaxed);
    }

    /// Time since the last beat.
    pub fn silence(&self) -> Duration {
        let last = Duration::from_millis(self.last.load(Ordering::Relaxed));
        self.origin.elapsed().saturating_sub(last)
    }

    /// Beats once a second from a task on the current runtime (call it on the main thread),
    /// for as long as that runtime runs.
    pub fn keep_beating(&self) -> tokio::task::JoinHandle<()> {
        let heartbeat = self.clone();
        tokio::spawn(async move {
            let mut ticks = tokio::time::interval(Duration::from_secs(1));
            loop {
                ticks.tick().await;
                heartbeat.beat();
            }
        })
    }
}

/// The router with every endpoint open, for embedding or tests.
pub fn router(state: ServeState) -> Router {
    routes(state)
}

/// The router with the private endpoints behind the API server's token and access reviews.
pub fn router_with_reviews(state: ServeState, reviewer: Reviewer) -> Router {
    // The headers once more around the guard: its refusals are answers too.
    routes(state)
        .layer(axum::middleware::from_fn_with_state(reviewer, guard))
        .layer(axum::middleware::map_response(private_headers))
}

/// The router for a listener on loopback without authentication: every endpoint is open to
/// this host's users, but only under a name no one else can point at it. A web page the user
/// opens can make the browser send requests to 127.0.0.1 under a DNS name of its own that it
/// re-points there (DNS rebinding) and read the answers as its own origin's; refusing every
/// `Host` but `localhost` and IP addresses ends that (docs/security.md).
pub fn router_for_loopback(state: ServeState) -> Router {
    routes(state)
        .layer(axum::middleware::from_fn(loopback_host_only))
        .layer(axum::middleware::map_response(private_headers))
}

/// The health listener's router: `/healthz` and `/readyz`, open to anyone as on the main
/// listener, and nothing else (`404`).
pub fn health_router(state: ServeState) -> Router {
    Router::new()
        .route("/healthz", get(healthz))
        .route("/readyz", get(readyz))
        .with_state(state)
        .layer(axum::middleware::map_response(private_headers))
}

fn routes(state: ServeState) -> Router {
    // The answers that hold every pod: each is built whole in memory and kept until the client
    // has read it, so only a few at once (docs/security.md, "Slow and idle clients").
    let whole_node = Router::new()
        .route("/", get(status_page))
        .route("/pods", get(pods))
        .route("/events", get(events))
        .route_layer(axum::middleware::from_fn_with_state(
            Arc::new(Semaphore::new(WHOLE_NODE_ANSWERS)),
            one_of_few,
        ));
    Router::new()
        .route("/metrics", get(metrics))
        .route("/healthz", get(healthz))
        .route("/readyz", get(readyz))
        .route("/pods/{namespace}/{name}/probes", get(probes))
        .merge(whole_node)
        .with_state(state)
        .layer(axum::middleware::map_response(private_headers))
}

/// Answers holding every pod of the node that are built or sent at once; more wait.
pub const WHOLE_NODE_ANSWERS: usize = 4;

/// Waits for one of `permits`, and holds it until the answer has been sent (or dropped).
async fn one_of_few(
    State(permits): State<Arc<Semaphore>>,
    request: axum::extract::Request,
    next: axum::middleware::Next,
) -> Response {
    // While it waits, its connection holds nothing but a place: at the cap it may be closed
    // for room like an idle one, or clients queued here would keep `/healthz` out.
    let queued = request.extensions().get::<Connection>().map(|c| Queued::new(c.0.clone()));
    let Ok(permit) = permits.acquire_owned().await else {
        return StatusCode::SERVICE_UNAVAILABLE.into_response();
    };
    drop(queued);
    next.run(request).await.map(|body| axum::body::Body::new(Holding::new(body, permit)))
}

/// Every answer is about this node now and holds pod data: not to be cached, and not to be
/// read as anything but its declared type (a 404's text names what was asked for).
async fn private_headers(mut response: Response) -> Response {
    let headers = response.headers_mut();
    headers.entry(header::CACHE_CONTROL).or_insert(header::HeaderValue::from_static("no-store"));
    headers.entry(header::X_CONTENT_TYPE_OPTIONS).or_insert(header::HeaderValue::from_static("nosniff"));
    response
}

/// Refuses a request whose `Host` is a DNS name other than `localhost` (see
/// [`router_for_loopback`]), or that has more than one.
async fn loopback_host_only(request: axum::extract::Request, next: axum::middleware::Next) -> Response {
    let mut hosts = request.headers().get_all(header::HOST).iter();
    let allowed = match (hosts.next(), hosts.next()) {
        // HTTP/1.0 needs none, and a browser always sends one.
        (None, _) => true,
        (Some(host), None) => host.to_str().is_ok_and(host_may_be_served),
        (Some(_), Some(_)) => false,
    };
    if allowed {
        next.run(request).await
    } else {
        (
            StatusCode::FORBIDDEN,
            "Invalid Host header: on a loopback listener only localhost and IP addresses are served\n",
        )
            .into_response()
    }
}

/// Whether a `Host` value (`name[:port]`) names this host in a way DNS cannot re-point: an IP
/// address, `localhost`, or a name under `.localhost` (which resolvers keep on loopback).
pub fn host_may_be_served(host: &str) -> bool {
    let name = match host.strip_prefix('[') {
        Some(bracketed) => match bracketed.split_once(']') {
            Some((v6, rest)) if rest.is_empty() || port_only(rest) => {
                return v6.parse::<std::net::Ipv6Addr>().is_ok();
            }
            _ => return false,
        },
        None => match host.rsplit_once(':') {
            Some((name, port)) if port.bytes().all(|b| b.is_ascii_digit()) => name,
            Some(_) => return false,
            None => host,
        },
    };
    let name = name.strip_suffix('.').unwrap_or(name).to_ascii_lowercase();
    name.parse::<std::net::Ipv4Addr>().is_ok() || name == "localhost" || name.ends_with(".localhost")
}

fn port_only(rest: &str) -> bool {
    rest.strip_prefix(':').is_some_and(|port| port.bytes().all(|b| b.is_ascii_digit()))
}

/// Serves with the default [`Limits`] until `shutdown` resolves.
pub async fn serve(
    listener: tokio::net::TcpListener,
    state: ServeState,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    serve_router(listener, router(state), Limits::default(), shutdown).await
}

/// How long and how many clients the listener keeps.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    /// Time a client has to send a whole request head, counted from the connection's start and
    /// again from the end of each response (the keep-alive idle timeout); also the longest a
    /// client may leave its answer unread before the connection is closed.
    pub header_read_timeout: Duration,
    /// Connections open at once.
    pub max_connections: usize,
}

impl Default for Limits {
    fn default() -> Self {
        Limits { header_read_timeout: Duration::from_secs(10), max_connections: 256 }
    }
}

/// [`serve_router`] on a thread of its own, with a runtime of its own, so that `/healthz`,
/// `/readyz` and `/metrics` answer at once while the agent's main thread is busy (the other
/// endpoints ask its actors, and wait for them). Returns a task on the current runtime that
/// ends with the server, with its result.
pub fn serve_router_on_own_thread(
    listener: std::net::TcpListener,
    app: Router,
    limits: Limits,
    tls: Option<TlsAcceptor>,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> std::io::Result<tokio::task::JoinHandle<std::io::Result<()>>> {
    listener.set_nonblocking(true)?;
    let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build()?;
    let (done, result) = oneshot::channel();
    std::thread::Builder::new().name("http".to_owned()).spawn(move || {
        let served = runtime.block_on(async move {
            let listener = tokio::net::TcpListener::from_std(listener)?;
            serve_router_with_tls(listener, app, limits, tls, shutdown).await
        });
        let _ = done.send(served);
    })?;
    Ok(tokio::spawn(async move {
        result.await.unwrap_or_else(|_| Err(std::io::Error::other("the HTTP thread ended without a result")))
    }))
}

/// Serves `app` with `limits` until `shutdown` resolves; then stops accepting, lets requests in
/// progress finish and closes idle connections.
pub async fn serve_router(
    listener: tokio::net::TcpListener,
    app: Router,
    limits: Limits,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    serve_router_with_tls(listener, app, limits, None, shutdown).await
}

/// [`serve_router`], over TLS when `tls` is given ([`tls`]): each connection's handshake must
/// finish within the header timeout, and counts as the connection's activity like any read
/// or write.
pub async fn serve_router_with_tls(
    listener: tokio::net::TcpListener,
    app: Router,
    limits: Limits,
    tls: Option<TlsAcceptor>,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    let max = limits.max_connections.max(1);
    let permits = Arc::new(Semaphore::new(max));
    let open = Arc::new(OpenConnections::new());
    let (stop_tx, stop_rx) = watch::channel(false);
    // A client has as long to read more of an answer as it has to send a request head.
    let stall_limit = limits.header_read_timeout;
    let mut builder = hyper::server::conn::http1::Builder::new();
    builder.timer(TokioTimer::new()).header_read_timeout(limits.header_read_timeout);
    let mut conns = tokio::task::JoinSet::new();
    // Told once per kind of error until a connection is accepted again, not ten times a second.
    let mut accept_failing: Option<std::io::ErrorKind> = None;
    tokio::pin!(shutdown);
    loop {
        let (stream, _) = tokio::select! {
            _ = &mut shutdown => break,
            accepted = listener.accept() => match accepted {
                Ok(accepted) => {
                    if accept_failing.take().is_some() {
                        tracing::info!("HTTP listener accepts connections again");
                    }
                    accepted
                }
                Err(err) => {
                    // EMFILE and friends: the connections held here are capped, so the rest of
                    // the process ran out. Back off briefly instead of spinning on accept.
                    if accept_failing.replace(err.kind()) != Some(err.kind()) {
                        tracing::warn!(error = %err, "HTTP listener cannot accept a connection");
                    }
                    tokio::time::sleep(Duration::from_millis(100)).await;
                    continue;
                }
            },
            Some(_) = conns.join_next(), if !conns.is_empty() => continue,
        };
        // At the cap: the oldest idle connection (see [`OpenConnections::evict_oldest_idle`])
        // makes room. While none is idle, new clients queue in the backlog; a connection that
        // goes idle without closing (kept alive) is seen at the next look.
        let permit = loop {
            if let Ok(permit) = permits.clone().try_acquire_owned() {
                break Some(permit);
            }
            // An evicted connection's permit comes back when its task ends.
            let look_again = match open.evict_oldest_idle(Instant::now()) {
                Eviction::Evicted => None,
                Eviction::NotBefore(at) => Some(at),
                Eviction::NoneIdle => Some(Instant::now() + IDLE),
            };
            tokio::select! {
                _ = &mut shutdown => break None,
                permit = permits.clone().acquire_owned() => break permit.ok(),
                _ = tokio::time::sleep_until(look_again.unwrap_or_else(Instant::now)), if look_again.is_some() => {}
            }
        };
        let Some(permit) = permit else { break };
        let (id, state, evicted) = open.insert();
        let open = open.clone();
        let app = app.clone();
        let builder = builder.clone();
        let mut stop = stop_rx.clone();
        let serving = state.clone();
        let tls = tls.clone();
        let handshake_limit = limits.header_read_timeout;
        conns.spawn(async move {
            let request_state = state.clone();
            let service = tower::service_fn(move |mut req: axum::extract::Request<hyper::body::Incoming>| {
                let guard = BusyGuard::new(request_state.clone());
                req.extensions_mut().insert(Connection(request_state.clone()));
                let app = app.clone();
                async move {
                    // Busy until the body has been handed over (or dropped), not only until
                    // the handler returns: closing the connection mid-body would cut the answer.
                    let response = app.oneshot(req.map(axum::body::Body::new)).await;
                    response.map(|r| r.map(|body| axum::body::Body::new(Holding::new(body, guard))))
                }
            });
            let stream = Watched { io: stream, state, stall_limit, stalled: None };
            tokio::pin!(evicted);
            let stream = match tls {
                None => Either::Left(stream),
                Some(tls) => {
                    // A client that never finishes its handshake is one that never sends its
                    // request head: the same limit, the same eviction, the same stop.
                    let handshake = tokio::time::timeout(handshake_limit, accept_tls(tls, stream));
                    let accepted = tokio::select! {
                        accepted = handshake => accepted.ok().flatten(),
                        _ = &mut evicted => None,
                        _ = async { stop.wait_for(|stop| *stop).await.map(|_| ()) } => None,
                    };
                    match accepted {
                        Some(stream) => Either::Right(stream),
                        None => {
                            open.remove(id);
                            drop(permit);
                            return;
                        }
                    }
                }
            };
            let conn = builder.serve_connection(TokioIo::new(stream), TowerToHyperService::new(service));
            tokio::pin!(conn);
            tokio::select! {
                _ = conn.as_mut() => {}
                _ = &mut evicted => {}
                _ = async { stop.wait_for(|stop| *stop).await.map(|_| ()) } => {
                    // A request in progress finishes; a client still sending its head (or idle)
                    // is not waited for.
                    if serving.busy.load(Ordering::SeqCst) > 0 {
                        conn.as_mut().graceful_shutdown();
                        let _ = conn.await;
                    }
                }
            }
            open.remove(id);
            drop(permit);
        });
    }
    let _ = stop_tx.send(true);
    drop(listener);
    while conns.join_next().await.is_some() {}
    Ok(())
}

/// The TLS handshake of a connection; `None` for a plain HTTP request, which is answered as
/// Go's servers (the kubelet's among them) answer one on an HTTPS port: a 400 that says so, so
/// that a scraper still on `http://` is told why.
async fn accept_tls(
    tls: TlsAcceptor,
    mut stream: Watched,
) -> Option<tokio_rustls::server::TlsStream<Watched>> {
    use tokio::io::AsyncWriteExt as _;
    let mut first = [0u8; 1];
    // A TLS record starts with its content type, a handshake's 0x16; an HTTP request with a
    // method's capital letter.
    if stream.io.peek(&mut first).await.ok()? == 1 && first[0].is_ascii_uppercase() {
        let _ = stream.write_all(PLAIN_HTTP_ON_TLS).await;
        let _ = stream.shutdown().await;
        return None;
    }
    tls.accept(stream).await.ok()
}

/// Go's `net/http` answer to plain HTTP on a TLS port, byte for byte.
const PLAIN_HTTP_ON_TLS: &[u8] =
    b"HTTP/1.0 400 Bad Request\r\n\r\nClient sent an HTTP request to an HTTPS server.\n";

/// How long a connection must have been quiet to be closed for room: serving nothing, writing
/// nothing, and no request started, since it was accepted or last wrote. A client that just
/// connected has its request on the way. Reads do not count: a slow client trickling its head
/// a byte at a time is closed as soon as one that sends nothing.
const IDLE: Duration = Duration::from_millis(200);

/// What the listener knows of one connection, shared by its task and [`OpenConnections`].
struct ConnState {
    /// Requests being served, counted until their response body is handed over.
    busy: AtomicUsize,
    /// Of those, the ones still waiting for a turn to build a whole-node answer: they hold
    /// nothing yet.
    queued: AtomicUsize,
    /// A write waits for the client to read: the answer is still going out.
    writing: AtomicBool,
    /// An answer has been handed over on it: between requests, it is a kept-alive client's.
    answered: AtomicBool,
    /// Milliseconds from `since` to the connection's accept, its last request start or its last
    /// write that moved bytes.
    active: AtomicU64,
    since: Instant,
}

impl ConnState {
    fn new(since: Instant) -> Self {
        let state = ConnState {
            busy: AtomicUsize::new(0),
            queued: AtomicUsize::new(0),
            writing: AtomicBool::new(false),
            answered: AtomicBool::new(false),
            active: AtomicU64::new(0),
            since,
        };
        state.moved();
        state
    }

    fn moved(&self) {
        let millis = u64::try_from(Instant::now().saturating_duration_since(self.since).as_millis());
        self.active.store(millis.unwrap_or(u64::MAX), Ordering::SeqCst);
    }

    /// When the connection is (or was) idle from; `None` while it serves or writes. A request
    /// that only waits for its turn ([`Queued`]) does not count as served. A connection that has
    /// had an answer and serves nothing now is idle at once: its client has what it asked for,
    /// and kept-alive clients asking for `/healthz` every 150 ms were otherwise never idle for
    /// [`IDLE`], so 300 of them held every connection (a review's finding). [`IDLE`]'s grace is
    /// for a connection whose first request may still be in its socket, unread.
    fn idle_from(&self) -> Option<Instant> {
        let waiting = self.busy.load(Ordering::SeqCst) == self.queued.load(Ordering::SeqCst);
        if !waiting || self.writing.load(Ordering::SeqCst) {
            return None;
        }
        let last = self.since + Duration::from_millis(self.active.load(Ordering::SeqCst));
        let answered_and_done = self.answered.load(Ordering::SeqCst) && self.busy.load(Ordering::SeqCst) == 0;
        Some(if answered_and_done { last } else { last + IDLE })
    }
}

/// The connections the listener holds, oldest first.
struct OpenConnections {
    inner: Mutex<(u64, BTreeMap<u64, Tracked>)>,
    /// What every connection's [`ConnState::active`] counts from.
    since: Instant,
}

struct Tracked {
    state: Arc<ConnState>,
    evict: oneshot::Sender<()>,
}

/// What [`OpenConnections::evict_oldest_idle`] did.
#[derive(Debug, PartialEq, Eq)]
enum Eviction {
    Evicted,
    /// No connection is idle yet; the first one will be then.
    NotBefore(Instant),
    /// Every connection is serving a request or writing its answer.
    NoneIdle,
}

impl OpenConnections {
    fn new() -> Self {
        OpenConnections { inner: Mutex::new((0, BTreeMap::new())), since: Instant::now() }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, (u64, BTreeMap<u64, Tracked>)> {
        self.inner.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn insert(&self) -> (u64, Arc<ConnState>, oneshot::Receiver<()>) {
        let (evict, evicted) = oneshot::channel();
        let state = Arc::new(ConnState::new(self.since));
        let mut guard = self.lock();
        let (next, map) = &mut *guard;
        let id = *next;
        *next += 1;
        map.insert(id, Tracked { state: state.clone(), evict });
        (id, state, evicted)
    }

    fn remove(&self, id: u64) {
        self.lock().1.remove(&id);
    }

    /// Closes the oldest connection that has been idle (see [`IDLE`]) at `now`.
    fn evict_oldest_idle(&self, now: Instant) -> Eviction {
        let mut guard = self.lock();
        let map = &mut guard.1;
        let mut earliest: Option<Instant> = None;
        let mut chosen = None;
        for (id, tracked) in map.iter() {
            let Some(idle_from) = tracked.state.idle_from() else { continue };
            if idle_from <= now {
                chosen = Some(*id);
                break;
            }
            earliest = Some(earliest.map_or(idle_from, |e| e.min(idle_from)));
        }
        let Some(tracked) = chosen.and_then(|id| map.remove(&id)) else {
            return earliest.map_or(Eviction::NoneIdle, Eviction::NotBefore);
        };
        tracing::debug!("HTTP listener at its connection cap: closing the oldest idle connection");
        let _ = tracked.evict.send(());
        Eviction::Evicted
    }
}

/// A connection's socket: notes in its [`ConnState`] when a write moves bytes or waits for the
/// client, and ends a write that has made no progress for `stall_limit`: a client that stops
/// reading its answer would otherwise hold the answer, its memory and its connection for as
/// long as it likes.
struct Watched {
    io: tokio::net::TcpStream,
    state: Arc<ConnState>,
    stall_limit: Duration,
    /// Since when a write has been waiting for the client to read.
    stalled: Option<Pin<Box<tokio::time::Sleep>>>,
}

impl Watched {
    /// A write's outcome, after the stall check: a write still waiting once the limit has
    /// passed fails, and hyper closes the connection.
    fn written(
        &mut self,
        cx: &mut std::task::Context<'_>,
        polled: std::task::Poll<std::io::Result<usize>>,
    ) -> std::task::Poll<std::io::Result<usize>> {
        if polled.is_ready() {
            self.stalled = None;
            self.state.writing.store(false, Ordering::SeqCst);
            self.state.moved();
            return polled;
        }
        self.state.writing.store(true, Ordering::SeqCst);
        let limit = self.stall_limit;
        let stalled = self.stalled.get_or_insert_with(|| Box::pin(tokio::time::sleep(limit)));
        if stalled.as_mut().poll(cx).is_ready() {
            return std::task::Poll::Ready(Err(std::io::Error::new(
                std::io::ErrorKind::TimedOut,
                "the client stopped reading its answer",
            )));
        }
        std::task::Poll::Pending
    }
}

impl tokio::io::AsyncRead for Watched {
    fn poll_read(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
        buf: &mut tokio::io::ReadBuf<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        std::pin::Pin::new(&mut self.io).poll_read(cx, buf)
    }
}

impl tokio::io::AsyncWrite for Watched {
    fn poll_write(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
        buf: &[u8],
    ) -> std::task::Poll<std::io::Result<usize>> {
        let polled = std::pin::Pin::new(&mut self.io).poll_write(cx, buf);
        self.written(cx, polled)
    }

    fn poll_write_vectored(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
        bufs: &[std::io::IoSlice<'_>],
    ) -> std::task::Poll<std::io::Result<usize>> {
        let polled = std::pin::Pin::new(&mut self.io).poll_write_vectored(cx, bufs);
        self.written(cx, polled)
    }

    fn is_write_vectored(&self) -> bool {
        self.io.is_write_vectored()
    }

    fn poll_flush(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        std::pin::Pin::new(&mut self.io).poll_flush(cx)
    }

    fn poll_shutdown(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        std::pin::Pin::new(&mut self.io).poll_shutdown(cx)
    }
}

/// A response body holding `T` (a connection's [`BusyGuard`], a permit) until it has been
/// handed over or dropped. Handed to hyper in copied pieces of at most [`PIECE`] bytes: hyper
/// takes more only while what it queues stays under its buffer limit (about 400 KiB), so the
/// body ends (and `T` goes) when all but that much has gone out, not when a handler's one big
/// buffer has been taken, and that buffer is freed then. The rest is the connection's own
/// business: a pending write keeps it from being closed for room ([`ConnState::writing`]).
struct Holding<T> {
    body: axum::body::Body,
    /// What is left of the last data frame.
    rest: bytes::Bytes,
    _held: T,
}

/// The largest piece of a [`Holding`] body handed to hyper at once.
const PIECE: usize = 64 * 1024;

impl<T> Holding<T> {
    fn new(body: axum::body::Body, held: T) -> Self {
        Holding { body, rest: bytes::Bytes::new(), _held: held }
    }
}

impl<T: Unpin> http_body::Body for Holding<T> {
    type Data = bytes::Bytes;
    type Error = axum::Error;

    fn poll_frame(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Option<Result<http_body::Frame<Self::Data>, Self::Error>>> {
        use std::task::Poll;
        if self.rest.is_empty() {
            match std::pin::Pin::new(&mut self.body).poll_frame(cx) {
                Poll::Ready(Some(Ok(frame))) => match frame.into_data() {
                    Ok(data) => self.rest = data,
                    Err(trailers) => return Poll::Ready(Some(Ok(trailers))),
                },
                other => return other,
            }
        }
        // A copy, not a slice of the whole: the pieces hyper still holds once the body has
        // ended must not keep the whole answer's buffer alive.
        let piece = self.rest.len().min(PIECE);
        let piece = bytes::Bytes::copy_from_slice(&self.rest[..piece]);
        bytes::Buf::advance(&mut self.rest, piece.len());
        Poll::Ready(Some(Ok(http_body::Frame::data(piece))))
    }

    fn is_end_stream(&self) -> bool {
        self.rest.is_empty() && self.body.is_end_stream()
    }

    fn size_hint(&self) -> http_body::SizeHint {
        let inner = self.body.size_hint();
        let rest = self.rest.len() as u64;
        let mut hint = http_body::SizeHint::new();
        hint.set_lower(inner.lower() + rest);
        if let Some(upper) = inner.upper() {
            hint.set_upper(upper + rest);
        }
        hint
    }
}

/// Counts a request in progress on its connection until dropped; a request starting is
/// activity.
/// The connection a request came on, for the layers that need to tell it what they do.
#[derive(Clone)]
struct Connection(Arc<ConnState>);

/// A request waiting for a whole-node answer's turn ([`one_of_few`]), counted while it waits.
struct Queued(Arc<ConnState>);

/// A request that waits for something outside the connection (its reviews, [`crate::auth`]):
/// while this lives, its connection counts as idle and may be closed for room at the cap.
pub struct Waiting {
    _queued: Option<Queued>,
}

impl Waiting {
    /// Marks `request`'s connection as waiting (nothing, for a request not served by
    /// [`serve_router`]).
    pub fn of<B>(request: &axum::http::Request<B>) -> Waiting {
        Waiting { _queued: request.extensions().get::<Connection>().map(|c| Queued::new(c.0.clone())) }
    }
}

impl Queued {
    fn new(state: Arc<ConnState>) -> Queued {
        state.queued.fetch_add(1, Ordering::SeqCst);
        state.moved();
        Queued(state)
    }
}

impl Drop for Queued {
    fn drop(&mut self) {
        self.0.queued.fetch_sub(1, Ordering::SeqCst);
        self.0.moved();
    }
}

struct BusyGuard(Arc<ConnState>);

impl BusyGuard {
    fn new(state: Arc<ConnState>) -> BusyGuard {
        state.busy.fetch_add(1, Ordering::SeqCst);
        state.moved();
        BusyGuard(state)
    }
}

impl Drop for BusyGuard {
    fn drop(&mut self) {
        self.0.answered.store(true, Ordering::SeqCst);
        self.0.busy.fetch_sub(1, Ordering::SeqCst);
        // Answered now: quiet from here on.
        self.0.moved();
    }
}

async fn metrics(State(state): State<ServeState>) -> Response {
    ([(header::CONTENT_TYPE, "text/plain; version=0.0.4; charset=utf-8")], state.registry.render())
        .into_response()
}

async fn healthz(State(state): State<ServeState>) -> Response {
    health_answer(state.heartbeat.silence())
}

/// `/healthz`'s answer after the main thread has been quiet for `silence`.
fn health_answer(silence: Duration) -> Response {
    if silence < MAIN_THREAD_STALL {
        "ok".into_response()
    } else {
        let text = format!("the agent's main thread has not run for {}s\n", silence.as_secs());
        (StatusCode::INTERNAL_SERVER_ERROR, text).into_response()
    }
}

async fn readyz(State(state): State<ServeState>) -> Response {
    if state.ready.load(Ordering::SeqCst) {
        "ok".into_response()
    } else {
        (StatusCode::SERVICE_UNAVAILABLE, "pod source not synced yet").into_response()
    }
}

/// The pods with the status manager's latest published status in place of their own, read
/// from the pods' views without a message to the status manager. The actors' thread can be busy
/// for seconds (thousands of containers starting), and one round trip per pod through it held
/// `/pods` for 14 s in such a burst (docs/reliability.md, "`/pods` while thousands of containers
/// start"). A probe result the status manager has queued but not applied yet
/// (docs/status-manager.md §9) shows from the next answer on.
fn with_statuses(state: &ServeState) -> Vec<Pod> {
    let mut pods = state.pods.pods();
    pods.sort_by_key(|p| (p.metadata.namespace.clone(), p.metadata.name.clone()));
    let mut out = Vec::with_capacity(pods.len());
    for pod in pods {
        let mut pod = (*pod).clone();
        let uid = pod.metadata.uid.clone().unwrap_or_default();
        // As the status manager reads a mirror pod: by its static pod's UID.
        let uid = state.pods.static_uid_for_mirror(&uid).unwrap_or(uid);
        if let Some(status) = state.pipeline.published_status(&uid) {
            pod.status = Some(Arc::unwrap_or_clone(status));
        }
        out.push(pod);
    }
    out
}

/// The status page: the same data as `/pods`, the probes' runs and `/events`, as HTML.
async fn status_page(State(state): State<ServeState>) -> Response {
    let pods: Vec<page::PodPage> = with_statuses(&state)
        .into_iter()
        .map(|pod| {
            let probes = state.history.pod(pod.metadata.uid.as_deref().unwrap_or_default());
            page::PodPage { pod, probes }
        })
        .collect();
    let events = state.events.recent();
    let nonce = page::nonce();
    page::response(&page::Page { pods: &pods, events: &events, now: state.events.now(), nonce: &nonce })
}

async fn pods(State(state): State<ServeState>) -> Response {
    /// A `v1.PodList`, written straight from the pods: a `json!` value was a second copy of
    /// every pod per request.
    #[derive(serde::Serialize)]
    struct PodList<'a> {
        #[serde(rename = "apiVersion")]
        api_version: &'static str,
        items: &'a [Pod],
        kind: &'static str,
        metadata: serde_json::Map<String, serde_json::Value>,
    }
    let items = with_statuses(&state);
    axum::Json(PodList {
        api_version: "v1",
        items: &items,
        kind: "PodList",
        metadata: serde_json::Map::new(),
    })
    .into_response()
}

async fn probes(
    State(state): State<ServeState>,
    Path((namespace, name)): Path<(String, String)>,
) -> Response {
    let found = state.pods.pods().into_iter().find(|p| {
        p.metadata.namespace.as_deref().unwrap_or("default") == namespace
            && p.metadata.name.as_deref() == Some(&name)
    });
    let Some(pod) = found else {
        return (StatusCode::NOT_FOUND, format!("pod {namespace}/{name} not found")).into_response();
    };
    let uid = pod.metadata.uid.clone().unwrap_or_default();
    axum::Json(json!({
        "namespace": namespace,
        "name": name,
        "uid": uid,
        "probes": state.history.pod(&uid),
    }))
    .into_response()
}

async fn events(State(state): State<ServeState>) -> Response {
    // A v1.EventList, as `/pods` is a v1.PodList.
    axum::Json(json!({
        "apiVersion": "v1",
        "kind": "EventList",
        "metadata": {},
        "items": state.events.recent(),
    }))
    .into_response()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn healthz_fails_once_the_main_thread_has_been_quiet_for_a_minute() {
        assert_eq!(health_answer(Duration::ZERO).status(), StatusCode::OK);
        assert_eq!(health_answer(MAIN_THREAD_STALL - Duration::from_millis(1)).status(), StatusCode::OK);
        assert_eq!(health_answer(MAIN_THREAD_STALL).status(), StatusCode::INTERNAL_SERVER_ERROR);
        let heartbeat = Heartbeat::new();
        assert!(heartbeat.silence() < Duration::from_secs(5));
    }

    #[test]
    fn only_names_dns_cannot_repoint_are_served_on_loopback() {
        for host in [
            "127.0.0.1",
            "127.0.0.1:9898",
            "10.0.0.5:80",
            "[::1]",
            "[::1]:9898",
            "localhost",
            "LocalHost:9898",
            "localhost.",
            "app.localhost:1",
        ] {
            assert!(host_may_be_served(host), "{host}");
        }
        for host in [
            "attacker.example",
            "attacker.example:9898",
            "localhost.attacker.example",
            "[::1]x",
            "[evil]:1",
            "127.0.0.1:x",
            "",
            "::1",
        ] {
            assert!(!host_may_be_served(host), "{host}");
        }
    }
}
