//! Who may read the agent's private endpoints. `/healthz` and `/readyz` are open; `/pods`,
//! `/pods/{namespace}/{name}/probes`, `/events` and the status page `/` carry every pod spec on
//! the node (environment values included) and exec probe output, and `/metrics` names every
//! probed pod and container, so with webhook authorization they need a bearer token the API
//! server vouches for (over TLS: [`crate::serve::tls`]), checked the way the
//! kubelet guards its authenticated port (upstream `pkg/kubelet/server/auth.go` and `server.go`'s
//! auth filter, with the webhook token authenticator and authorizer of `k8s.io/apiserver`):
//!
//! 1. `Authorization: Bearer <token>` is sent to the API server as a `TokenReview`; no token, or
//!    one the server does not authenticate, is `401 Unauthorized`.
//! 2. The request is mapped to attributes on the node object: verb from the HTTP method, resource
//!    `nodes`, name the node's, and subresource `pods` for `/pods/...` (the fine-grained
//!    authorization of KEP-2862) with `proxy` as the fallback, `metrics` for `/metrics` (as the
//!    kubelet asks for its own), `proxy` for everything else (the status page `/` included: it
//!    shows `/events` beside the pods).
//!    Each is asked as a `SubjectAccessReview` in turn; the first allowed wins, none is
//!    `403 Forbidden`.
//!
//! Answers are cached like the kubelet's defaults: token reviews for 2 minutes, allowed
//! decisions for 5 minutes, denied ones for 30 seconds. Errors are not cached. Tokens the API
//! server authenticated and tokens it did not are cached apart, so that a flood of made-up
//! tokens cannot push the real ones out. Every review the agent sends waits for the review
//! rate limiter (`--qps`/`--burst`, a bucket of its own so that reviews asked for by clients
//! never delay status writes): the kubelet sends its reviews through its rate-limited client,
//! and an unauthenticated client must not be able to make the agent flood the API server.
//! A review gets [`REVIEW_TIMEOUT`] for its answer; a request waiting for its reviews leaves its
//! connection idle for the listener's cap; a `401` or `429` closes the connection
//! (docs/security.md, "Connections"). Requests asking the same at once share one review, and a
//! review once sent is finished and cached whether or not its requests are still there.

use std::collections::HashMap;
use std::future::Future;
use std::hash::BuildHasher;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::extract::{Request, State};
use axum::http::{Method, StatusCode, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use futures::future::{BoxFuture, FutureExt, Shared, WeakShared};
use k8s_openapi::api::authentication::v1::{TokenReview, TokenReviewSpec, UserInfo};
use k8s_openapi::api::authorization::v1::{ResourceAttributes, SubjectAccessReview, SubjectAccessReviewSpec};
use kube::api::{Api, PostParams};
use probelet_actors::sync::rate::RateLimiter;
use tokio::time::Instant;

/// Paths served to anyone, whatever the authorization mode: what a liveness or readiness probe
/// of the agent itself asks for, without a token.
pub const PUBLIC_PATHS: [&str; 2] = ["/healthz", "/readyz"];

/// How long a token review is trusted (the kubelet's `authentication.webhook.cacheTTL`).
pub const AUTHENTICATION_CACHE_TTL: Duration = Duration::from_secs(120);
/// How long an allowed decision is trusted (`authorization.webhook.cacheAuthorizedTTL`).
pub const AUTHORIZED_CACHE_TTL: Duration = Duration::from_secs(300);
/// How long a denied decision is trusted (`authorization.webhook.cacheUnauthorizedTTL`).
pub const UNAUTHORIZED_CACHE_TTL: Duration = Duration::from_secs(30);
/// Entries per cache; a full cache drops its expired entries, then everything.
const CACHE_CAPACITY: usize = 4096;

/// Whether `path` is `prefix` or below it (upstream `isSubpath`).
pub fn is_subpath(path: &str, prefix: &str) -> bool {
    let prefix = prefix.trim_end_matches('/');
    path == prefix || (path.starts_with(prefix) && path.as_bytes().get(prefix.len()) == Some(&b'/'))
}

/// Whether `path` is served without authentication.
pub fn is_public(path: &str) -> bool {
    PUBLIC_PATHS.iter().any(|p| is_subpath(path, p))
}

/// One question about a request, asked of the node object.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NodeAttributes {
    pub verb: &'static str,
    pub subresource: &'static str,
    pub node: String,
}

impl NodeAttributes {
    /// As a `SubjectAccessReview`'s `resourceAttributes` (empty group left out, as Go's
    /// `omitempty` does).
    pub fn resource_attributes(&self) -> ResourceAttributes {
        ResourceAttributes {
            verb: Some(self.verb.to_owned()),
            version: Some("v1".to_owned()),
            resource: Some("nodes".to_owned()),
            subresource: Some(self.subresource.to_owned()),
            name: Some(self.node.clone()),
            ..ResourceAttributes::default()
        }
    }
}

/// The attributes the kubelet asks for a request, in order (upstream `GetRequestAttributes`
/// with fine-grained authorization on): the specific subresource first, then `proxy`.
pub fn request_attributes(method: &Method, path: &str, node: &str) -> Vec<NodeAttributes> {
    let verb = match *method {
        Method::POST => "create",
        Method::GET => "get",
        Method::PUT => "update",
        Method::PATCH => "patch",
        Method::DELETE => "delete",
        _ => "",
    };
    let mut subresources = Vec::with_capacity(2);
    if is_subpath(path, "/pods") || is_subpath(path, "/runningpods") {
        subresources.push("pods");
    } else if is_subpath(path, "/healthz") {
        subresources.push("healthz");
    }
    subresources.push(if is_subpath(path, "/stats") {
        "stats"
    } else if is_subpath(path, "/metrics") {
        "metrics"
    } else if is_subpath(path, "/logs") {
        "log"
    } else {
        "proxy"
    });
    subresources
        .into_iter()
        .map(|subresource| NodeAttributes { verb, subresource, node: node.to_owned() })
        .collect()
}

/// The bearer token of a request, if it carries a non-empty one (upstream `bearertoken`).
pub fn bearer_token(headers: &axum::http::HeaderMap) -> Option<&str> {
    let value = headers.get(header::AUTHORIZATION)?.to_str().ok()?.trim();
    let mut parts = value.splitn(3, ' ');
    let scheme = parts.next()?;
    let token = parts.next()?;
    (scheme.eq_ignore_ascii_case("bearer") && !token.is_empty()).then_some(token)
}

/// A map whose entries expire, bounded in size.
struct TtlCache<V> {
    entries: Mutex<HashMap<u64, (Instant, V)>>,
    /// Keys are hashed with a per-process random key, so no token is kept in memory.
    hasher: std::collections::hash_map::RandomState,
}

impl<V: Clone> TtlCache<V> {
    fn new() -> Self {
        TtlCache { entries: Mutex::new(HashMap::new()), hasher: Default::default() }
    }

    fn key(&self, key: &str) -> u64 {
        self.hasher.hash_one(key)
    }

    fn get(&self, key: &str) -> Option<V> {
        let key = self.key(key);
        let entries = self.entries.lock().unwrap_or_else(|e| e.into_inner());
        entries.get(&key).filter(|(expires, _)| *expires > Instant::now()).map(|(_, v)| v.clone())
    }

    fn insert(&self, key: &str, value: V, ttl: Duration) {
        let key = self.key(key);
        let now = Instant::now();
        let mut entries = self.entries.lock().unwrap_or_else(|e| e.into_inner());
        if entries.len() >= CACHE_CAPACITY {
            entries.retain(|_, (expires, _)| *expires > now);
            if entries.len() >= CACHE_CAPACITY {
                entries.clear();
            }
        }
        entries.insert(key, (now + ttl, value));
    }
}

/// Asks the API server who a token is and what they may do, with the kubelet's caching.
/// Cheap to clone: clones share their caches and the reviews in flight.
#[derive(Clone)]
pub struct Reviewer {
    inner: Arc<Inner>,
}

struct Inner {
    client: kube::Client,
    node: String,
    /// Paces the reviews sent.
    limiter: RateLimiter,
    /// Tokens the API server authenticated, and their users.
    tokens: TtlCache<UserInfo>,
    /// Tokens it did not.
    unknown_tokens: TtlCache<()>,
    decisions: TtlCache<bool>,
    /// Token reviews in flight, by the token's hash.
    token_reviews: Arc<InFlight<Option<UserInfo>>>,
    /// Access reviews in flight, by the spec's hash.
    access_reviews: Arc<InFlight<bool>>,
}

impl Reviewer {
    /// Sends its reviews through `client`, each once `limiter` lets it.
    pub fn new(client: kube::Client, node: impl Into<String>, limiter: RateLimiter) -> Reviewer {
        Reviewer {
            inner: Arc::new(Inner {
                client,
                node: node.into(),
                limiter,
                tokens: TtlCache::new(),
                unknown_tokens: TtlCache::new(),
                decisions: TtlCache::new(),
                token_reviews: Arc::new(InFlight::new()),
                access_reviews: Arc::new(InFlight::new()),
            }),
        }
    }

    /// The user a token belongs to; `None` when the API server does not authenticate it.
    /// Sends `POST /apis/authentication.k8s.io/v1/tokenreviews`, once for any number of
    /// requests that bring the same token at the same time.
    pub async fn authenticate(&self, token: &str) -> Result<Option<UserInfo>, ReviewError> {
        let inner = &self.inner;
        if let Some(user) = inner.tokens.get(token) {
            return Ok(Some(user));
        }
        if inner.unknown_tokens.get(token).is_some() {
            return Ok(None);
        }
        let key = inner.tokens.key(token);
        let token = token.to_owned();
        let reviewer = Arc::clone(inner);
        inner
            .token_reviews
            .join(key, move || {
                let review = async move {
                    let user = reviewer.review_token(&token).await?;
                    match &user {
                        Some(user) => reviewer.tokens.insert(&token, user.clone(), AUTHENTICATION_CACHE_TTL),
                        None => reviewer.unknown_tokens.insert(&token, (), AUTHENTICATION_CACHE_TTL),
                    }
                    Ok(user)
                };
                (inner.turn(), review.boxed())
            })
            .await
    }

    /// Whether `user` may do `attributes`. Sends
    /// `POST /apis/authorization.k8s.io/v1/subjectaccessreviews`, once for any number of
    /// requests that ask the same at the same time.
    pub async fn authorize(&self, user: &UserInfo, attributes: &NodeAttributes) -> Result<bool, ReviewError> {
        let inner = &self.inner;
        let spec = SubjectAccessReviewSpec {
            user: user.username.clone(),
            uid: user.uid.clone(),
            groups: user.groups.clone(),
            extra: user.extra.clone(),
            resource_attributes: Some(attributes.resource_attributes()),
            ..SubjectAccessReviewSpec::default()
        };
        // The upstream cache keys on the whole review spec.
        let key = serde_json::to_string(&spec).unwrap_or_default();
        if let Some(allowed) = inner.decisions.get(&key) {
            return Ok(allowed);
        }
        let hash = inner.decisions.key(&key);
        let reviewer = Arc::clone(inner);
        inner
            .access_reviews
            .join(hash, move || {
                let review = async move {
                    let review = SubjectAccessReview { spec, ..SubjectAccessReview::default() };
                    let answer = bounded(
                        Api::<SubjectAccessReview>::all(reviewer.client.clone())
                            .create(&PostParams::default(), &review),
                    )
                    .await?;
                    let allowed = answer.status.is_some_and(|s| s.allowed);
                    let ttl = if allowed { AUTHORIZED_CACHE_TTL } else { UNAUTHORIZED_CACHE_TTL };
                    reviewer.decisions.insert(&key, allowed, ttl);
                    Ok(allowed)
                };
                (inner.turn(), review.boxed())
            })
            .await
    }

    /// The node the attributes name.
    pub fn node(&self) -> &str {
        &self.inner.node
    }
}

impl Inner {
    /// The rate limiter's turn to send a review, waited for at most [`REVIEW_WAIT`]; `false`
    /// when it is further away. Dropped while it waits, it gives the turn back.
    fn turn(self: &Arc<Self>) -> BoxFuture<'static, bool> {
        let inner = Arc::clone(self);
        async move { inner.limiter.acquire_within(REVIEW_WAIT).await }.boxed()
    }

    /// `POST tokenreviews`. The answer is read as JSON first: the kubelet (Go) reads a user's
    /// `extra` value `null` as no values, which k8s-openapi's types refuse, and a token the
    /// API server authenticated must not be turned away over it.
    async fn review_token(&self, token: &str) -> Result<Option<UserInfo>, ReviewError> {
        let review = TokenReview {
            spec: TokenReviewSpec { token: Some(token.to_owned()), audiences: None },
            ..TokenReview::default()
        };
        let body = serde_json::to_vec(&review)
            .map_err(|e| ReviewError::Api(Arc::new(kube::Error::SerdeError(e))))?;
        let request = kube::core::Request::new("/apis/authentication.k8s.io/v1/tokenreviews")
            .create(&PostParams::default(), body)
            .map_err(|e| ReviewError::Api(Arc::new(kube::Error::BuildRequest(e))))?;
        let mut answer: serde_json::Value = bounded(self.client.request(request)).await?;
        token_review_user(&mut answer)
    }
}

/// The authenticated user of a `TokenReview` answer, or `None` when it is not authenticated.
/// An `extra` value of `null` is read as no values, as Go reads it.
fn token_review_user(answer: &mut serde_json::Value) -> Result<Option<UserInfo>, ReviewError> {
    if let Some(extra) = answer.pointer_mut("/status/user/extra").and_then(|e| e.as_object_mut()) {
        for value in extra.values_mut() {
            if value.is_null() {
                *value = serde_json::Value::Array(Vec::new());
            }
        }
    }
    let review: TokenReview = serde_json::from_value(answer.take())
        .map_err(|e| ReviewError::Api(Arc::new(kube::Error::SerdeError(e))))?;
    Ok(review.status.filter(|s| s.authenticated == Some(true)).and_then(|s| s.user))
}

/// A review's answer, to come.
type Review<V> = BoxFuture<'static, Result<V, ReviewError>>;

/// A review in flight.
struct Flight<V> {
    /// Its number, so that the end of one review never takes a later one off the list.
    id: u64,
    /// While it waits for the rate limiter's turn: weak, so that a review whose requests have
    /// all hung up is dropped, and its turn given back.
    waiting: WeakShared<Review<V>>,
    /// Once sent: its answer, held until the review ends, so that a request that comes (or
    /// comes back) meanwhile waits for it instead of sending another.
    sent: Option<Shared<Review<V>>>,
}

/// Reviews in flight, one per key (client-go's cached token authenticator's singleflight):
/// requests that ask the same thing at the same time wait for one review and share its
/// answer, so a burst of requests with a new token sends one TokenReview, not one each.
///
/// A review belongs to its requests while it waits for the rate limiter's turn: if they all
/// hang up, the turn goes back. Once it has its turn it is sent from a task of its own and runs
/// to its end whether or not its requests are still there; its answer is cached, and until
/// then a request for the same is given the one in flight (as client-go's authenticator no
/// longer cancels a review with the request that started it): a client closed for room while
/// it waited, or that gave up and came back, neither starts over nor takes another turn.
struct InFlight<V> {
    next: AtomicU64,
    reviews: Mutex<HashMap<u64, Flight<V>>>,
}

impl<V: Clone + Send + Sync + 'static> InFlight<V> {
    fn new() -> Self {
        InFlight { next: AtomicU64::new(0), reviews: Mutex::new(HashMap::new()) }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<u64, Flight<V>>> {
        self.reviews.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The answer of the review in flight for `key`, or of a new one: `start` gives its turn
    /// and the review itself, sent once the turn is had.
    async fn join(
        self: &Arc<Self>,
        key: u64,
        start: impl FnOnce() -> (BoxFuture<'static, bool>, Review<V>),
    ) -> Result<V, ReviewError> {
        let review = {
            let mut reviews = self.lock();
            let found = reviews.get(&key).and_then(|f| f.sent.clone().or_else(|| f.waiting.upgrade()));
            match found {
                Some(review) => review,
                None => {
                    let id = self.next.fetch_add(1, Ordering::Relaxed);
                    let (turn, review) = start();
                    let review = self.clone().flight(key, id, turn, review).boxed().shared();
                    if let Some(waiting) = review.downgrade() {
                        reviews.insert(key, Flight { id, waiting, sent: None });
                    }
                    review
                }
            }
        };
        review.await
    }

    /// Review `id` for `key`: its turn, then `review` in a task that takes it off the list
    /// when it ends.
    async fn flight(
        self: Arc<Self>,
        key: u64,
        id: u64,
        turn: BoxFuture<'static, bool>,
        review: Review<V>,
    ) -> Result<V, ReviewError> {
        let waiting = Waiting { flights: Arc::clone(&self), key, id, armed: true };
        if !turn.await {
            return Err(ReviewError::Busy);
        }
        let flights = Arc::clone(&self);
        let task = tokio::spawn(async move {
            let answer = review.await;
            flights.land(key, id);
            answer
        });
        let sent = async move {
            // Only when the runtime shuts down (a panic in the review would be a bug).
            task.await.unwrap_or_else(|err| Err(ReviewError::Lost(err.to_string())))
        }
        .boxed()
        .shared();
        waiting.sent(sent.clone());
        sent.await
    }

    /// Takes review `id` off the list, not a later one for the same key.
    fn land(&self, key: u64, id: u64) {
        let mut reviews = self.lock();
        if reviews.get(&key).is_some_and(|f| f.id == id) {
            reviews.remove(&key);
        }
    }
}

/// A review waiting for its turn: taken off the list if it is dropped (every request that
/// asked for it hung up) before it was sent.
struct Waiting<V: Clone + Send + Sync + 'static> {
    flights: Arc<InFlight<V>>,
    key: u64,
    id: u64,
    armed: bool,
}

impl<V: Clone + Send + Sync + 'static> Waiting<V> {
    /// The review was sent: its answer stays on the list until the review's task ends.
    fn sent(mut self, answer: Shared<Review<V>>) {
        self.armed = false;
        if let Some(flight) = self.flights.lock().get_mut(&self.key).filter(|f| f.id == self.id) {
            flight.sent = Some(answer);
        }
    }
}

impl<V: Clone + Send + Sync + 'static> Drop for Waiting<V> {
    fn drop(&mut self) {
        if self.armed {
            self.flights.land(self.key, self.id);
        }
    }
}

/// The longest a request waits for its turn to be reviewed; past it, the client is told to try
/// again (429). Clients that hang up while waiting give their turn back.
pub const REVIEW_WAIT: Duration = Duration::from_secs(5);

/// The longest a review may take once sent: an API server that stalls its answers must not hold
/// the requests (and their connections) that wait for them for good. client-go's webhook
/// authenticator and authorizer give a review 30 s; the agent's clients are waiting on the
/// other side, and a scraper's own timeout is shorter.
pub const REVIEW_TIMEOUT: Duration = Duration::from_secs(10);

/// A review, or [`ReviewError::Timeout`] after [`REVIEW_TIMEOUT`].
async fn bounded<T>(review: impl Future<Output = kube::Result<T>>) -> Result<T, ReviewError> {
    match tokio::time::timeout(REVIEW_TIMEOUT, review).await {
        Ok(answer) => answer.map_err(|e| ReviewError::Api(Arc::new(e))),
        Err(_) => Err(ReviewError::Timeout),
    }
}

/// Why a review could not be had. Clone, as every request waiting for a review shares its
/// answer.
#[derive(Clone, Debug, thiserror::Error)]
pub enum ReviewError {
    /// The review rate limiter has no turn within [`REVIEW_WAIT`].
    #[error("too many reviews pending")]
    Busy,
    /// The API server did not answer within [`REVIEW_TIMEOUT`].
    #[error("the API server did not answer the review within {}s", REVIEW_TIMEOUT.as_secs())]
    Timeout,
    /// The API server could not be asked, or its answer could not be read.
    #[error(transparent)]
    Api(Arc<kube::Error>),
    /// The review's task ended without an answer (the runtime shutting down).
    #[error("the review was lost: {0}")]
    Lost(String),
}

/// More requests need reviews than the rate limiter lets through: try again shortly.
fn too_many_requests() -> Response {
    let mut response =
        plain(StatusCode::TOO_MANY_REQUESTS, "Too many requests, please try again later.\n".into());
    response.headers_mut().insert(header::RETRY_AFTER, header::HeaderValue::from_static("1"));
    closing(response)
}

/// `401 Unauthorized`, and the connection closed after it.
fn unauthorized() -> Response {
    closing(plain(StatusCode::UNAUTHORIZED, "Unauthorized".into()))
}

/// The answer with `Connection: close`: a client that is not let in (401, 403, an authorization
/// error) or must come back later (429) gives its connection back, where the kubelet keeps it
/// alive. The agent's
/// connections are capped (`--http-max-connections`), and clients without a valid token kept
/// alive and asking again every 150 ms are never idle long enough to be closed for room: 300 of
/// them kept `/healthz` from answering (docs/security.md, "Connections").
fn closing(mut response: Response) -> Response {
    response.headers_mut().insert(header::CONNECTION, header::HeaderValue::from_static("close"));
    response
}

fn plain(code: StatusCode, body: String) -> Response {
    (code, [(header::CONTENT_TYPE, "text/plain; charset=utf-8")], body).into_response()
}

/// The middleware: public paths pass, the rest is authenticated and authorized.
pub async fn guard(State(reviewer): State<Reviewer>, request: Request, next: Next) -> Response {
    let path = request.uri().path().to_owned();
    if is_public(&path) {
        return next.run(request).await;
    }
    let Some(token) = bearer_token(request.headers()) else {
        return unauthorized();
    };
    // While it waits for its reviews (a turn of the rate limiter, then the API server's answer)
    // the request holds nothing but its connection, which at the cap may be closed for room
    // like an idle one: clients with made-up tokens, each waiting up to 5 s for a turn, held
    // every connection and kept `/healthz` out.
    let waiting = crate::serve::Waiting::of(&request);
    let user = match reviewer.authenticate(token).await {
        Ok(Some(user)) => user,
        Ok(None) => return unauthorized(),
        Err(ReviewError::Busy) => return too_many_requests(),
        Err(err) => {
            tracing::error!(error = %err, "Unable to authenticate the request due to an error");
            return unauthorized();
        }
    };
    let name = user.username.clone().unwrap_or_default();
    let attributes = request_attributes(request.method(), &path, reviewer.node());
    for attrs in &attributes {
        match reviewer.authorize(&user, attrs).await {
            Ok(true) => {
                drop(waiting);
                return next.run(request).await;
            }
            Ok(false) => {}
            Err(ReviewError::Busy) => return too_many_requests(),
            Err(err) => {
                tracing::error!(
                    error = %err, user = %name, verb = attrs.verb, resource = "nodes",
                    subresource = attrs.subresource, "Authorization error"
                );
                return closing(plain(
                    StatusCode::INTERNAL_SERVER_ERROR,
                    format!(
                        "Authorization error (user={name}, verb={}, resource=nodes, subresource={})",
                        attrs.verb, attrs.subresource
                    ),
                ));
            }
        }
    }
    let verb = attributes.first().map(|a| a.verb).unwrap_or_default();
    let subresources: Vec<&str> = attributes.iter().map(|a| a.subresource).collect();
    tracing::debug!(user = %name, verb, resource = "nodes", subresources = ?subresources, "Forbidden");
    closing(plain(
        StatusCode::FORBIDDEN,
        format!(
            "Forbidden (user={name}, verb={verb}, resource=nodes, subresource(s)=[{}])\n",
            subresources.join(" ")
        ),
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kubelet_attribute_mapping() {
        let subs = |method: Method, path: &str| -> Vec<&'static str> {
            request_attributes(&method, path, "node-a").iter().map(|a| a.subresource).collect()
        };
        assert_eq!(subs(Method::GET, "/pods"), ["pods", "proxy"]);
        assert_eq!(subs(Method::GET, "/pods/default/web/probes"), ["pods", "proxy"]);
        assert_eq!(subs(Method::GET, "/podsx"), ["proxy"], "a subpath, not a prefix");
        assert_eq!(subs(Method::GET, "/events"), ["proxy"]);
        assert_eq!(subs(Method::GET, "/"), ["proxy"], "the status page shows the events too");
        assert_eq!(subs(Method::GET, "/metrics"), ["metrics"]);
        assert_eq!(subs(Method::GET, "/healthz"), ["healthz", "proxy"]);
        let a = &request_attributes(&Method::POST, "/pods", "node-a")[0];
        assert_eq!((a.verb, a.node.as_str()), ("create", "node-a"));
        assert_eq!(request_attributes(&Method::HEAD, "/pods", "n")[0].verb, "");
        let ra = serde_json::to_value(a.resource_attributes()).unwrap();
        assert_eq!(
            ra,
            serde_json::json!({"verb": "create", "version": "v1", "resource": "nodes", "subresource": "pods", "name": "node-a"})
        );
    }

    #[test]
    fn public_paths_and_bearer_tokens() {
        assert!(is_public("/healthz") && is_public("/readyz"));
        assert!(!is_public("/pods") && !is_public("/events") && !is_public("/healthzx"));
        assert!(!is_public("/metrics"), "the kubelet guards its /metrics too (nodes/metrics)");
        assert!(!is_public("/"), "the status page shows what /pods and /events show");
        let headers = |v: &str| {
            let mut h = axum::http::HeaderMap::new();
            h.insert(header::AUTHORIZATION, v.parse().unwrap());
            h
        };
        assert_eq!(bearer_token(&headers("Bearer abc")), Some("abc"));
        assert_eq!(bearer_token(&headers("bearer abc")), Some("abc"));
        assert_eq!(bearer_token(&headers("Bearer ")), None);
        assert_eq!(bearer_token(&headers("Basic abc")), None);
        assert_eq!(bearer_token(&axum::http::HeaderMap::new()), None);
    }

    #[tokio::test(start_paused = true)]
    async fn cache_entries_expire() {
        let cache = TtlCache::new();
        cache.insert("a", true, Duration::from_secs(30));
        assert_eq!(cache.get("a"), Some(true));
        assert_eq!(cache.get("b"), None);
        tokio::time::advance(Duration::from_secs(31)).await;
        assert_eq!(cache.get("a"), None, "expired");
        for i in 0..CACHE_CAPACITY + 10 {
            cache.insert(&i.to_string(), false, Duration::from_secs(30));
        }
        assert!(cache.entries.lock().unwrap().len() <= CACHE_CAPACITY, "bounded");
    }

    /// Made-up tokens fill a cache of their own: the authenticated ones stay cached however
    /// many arrive, so a flood cannot make the agent review every real client again.
    #[tokio::test]
    async fn a_flood_of_unknown_tokens_keeps_the_known_ones_cached() {
        // Never reached: every answer below must come from the caches.
        let config = kube::Config::new("http://127.0.0.1:1".parse().unwrap());
        let reviewer =
            Reviewer::new(kube::Client::try_from(config).unwrap(), "node-a", RateLimiter::new(0.0, 1));
        let alice = UserInfo { username: Some("alice".into()), ..Default::default() };
        reviewer.inner.tokens.insert("real", alice.clone(), AUTHENTICATION_CACHE_TTL);
        for i in 0..CACHE_CAPACITY + 10 {
            reviewer.inner.unknown_tokens.insert(&format!("made-up-{i}"), (), AUTHENTICATION_CACHE_TTL);
        }
        assert_eq!(reviewer.authenticate("real").await.unwrap(), Some(alice));
        assert_eq!(reviewer.authenticate(&format!("made-up-{CACHE_CAPACITY}")).await.unwrap(), None);
    }
}
