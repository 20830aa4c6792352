//! The node's pods from the API server: a list, then a watch, re-listed after a failure;
//! whether the API server is reachable, as the watch sees it; and what each event asks of a host
//! that consumes the watch as an actor stream ([`PodWatchState`], shared by the cluster host and
//! the readiness-gate host).
//!
//! Upstream counterpart: the kubelet's pod informer (client-go's reflector). Like the
//! reflector, the watch asks the server to end it after a randomised timeout and accepts
//! bookmarks, so a connection never sits idle for ever; unlike it, the re-list back-off is
//! capped at [`RELIST_BACKOFF_MAX`] (the reflector's grows to 30 s): after an outage, a pod
//! created when the server returns is seen within about two seconds of the return, whatever the
//! outage's length. (A real API server that gets SIGTERM refuses new connections at once but
//! keeps an open watch silent until its 60 s shutdown timeout; it cannot be back before that,
//! so the silent watch has ended by the time it returns.) A watch that ends early without an
//! error (a proxy closing the stream) is no error to kube's watcher, which opens the next one at
//! once; [`WatchPacingLayer`] spaces such watches out as the reflector does (its "very short
//! watch" back-off), where thousands a second went out before.

use std::collections::{HashMap, HashSet};
use std::time::Duration;

use kube::api::Api;
use kube::runtime::WatchStreamExt;
use kube::runtime::watcher::{self, Event as WatchEvent};
use probelet_actors::capacity::ShrinkAfterRemoval;
use probelet_actors::sync::api_pod::ApiPod;
use probelet_actors::sync::rules::{RETRY_AFTER_MAX, retry_after};
use probelet_actors::vocabulary::PodUid;

use super::backoff::Backoff;

/// The first wait before re-listing after a failure.
pub const RELIST_BACKOFF_INITIAL: Duration = Duration::from_millis(500);
/// The longest wait between re-list attempts (jittered within its upper half).
pub const RELIST_BACKOFF_MAX: Duration = Duration::from_secs(1);
/// The back-off starts over once the watch has gone this long without a failure.
pub const RELIST_BACKOFF_RESET: Duration = Duration::from_secs(10);
/// The watch's `timeoutSeconds` is drawn from this range. The reflector draws from 5–10 min;
/// kube's watcher gives up on a watch silent for its timeout and 5 s more; the range stays below
/// the 300 s of kube's older client read timeout.
pub const WATCH_TIMEOUT_SECONDS: std::ops::RangeInclusive<u32> = 145..=290;

/// A watch request comes at once if the previous one began at least this long ago; otherwise
/// the previous one ended early (a proxy that closes the stream, a server that ends it at once)
/// and this one waits ([`WatchPacing`]).
pub const SHORT_WATCH: Duration = Duration::from_secs(10);
/// How long the pod watch goes on asking from a version the server answers "Too large resource
/// version" before it lists again (the pod watch's `RelistOnExpiredWatch`).
pub const TOO_LARGE_RELIST_AFTER: Duration = Duration::from_secs(10);
/// The first wait between two watch requests that follow each other quickly.
pub const WATCH_SPACING_INITIAL: Duration = Duration::from_secs(1);
/// The longest wait between two watch requests that follow each other quickly.
pub const WATCH_SPACING_MAX: Duration = Duration::from_secs(8);

/// Spaces out watch requests that follow each other quickly. kube's watcher opens the next
/// watch at once when one ends without an error, and only errors back off: a stream that a
/// proxy or a sick server ends right after its headers made it send thousands of watch
/// requests a second (and log a warning for each). client-go's reflector treats a watch that
/// ended within a second with no event as an error and backs off; this waits 1 s, doubling to
/// 8 s, before a watch that comes within [`SHORT_WATCH`] of the previous one's start, so a
/// watch that lasts its normal minutes is never held back. Pure: the caller gives the time.
#[derive(Debug, Clone)]
pub struct WatchPacing {
    last_start: Option<tokio::time::Instant>,
    spacing: Duration,
}

impl Default for WatchPacing {
    fn default() -> Self {
        WatchPacing { last_start: None, spacing: WATCH_SPACING_INITIAL }
    }
}

impl WatchPacing {
    /// How long a watch request asked for `now` waits; it is then taken as started.
    pub fn next_delay(&mut self, now: tokio::time::Instant) -> Duration {
        let delay = match self.last_start {
            Some(last) if now.saturating_duration_since(last) < SHORT_WATCH => {
                let wait = (last + self.spacing).saturating_duration_since(now);
                self.spacing = (self.spacing * 2).min(WATCH_SPACING_MAX);
                wait
            }
            _ => {
                self.spacing = WATCH_SPACING_INITIAL;
                Duration::ZERO
            }
        };
        self.last_start = Some(now + delay);
        delay
    }

    /// The watch asked for at `started` got no stream (no answer, a server error, a 429): it
    /// was no watch that ended early, and the watcher's own back-off paces such failures, so it
    /// does not count against the next one. (It did: during an outage every failed connect doubled the
    /// spacing, and a pod created while the server was away was seen up to 8 s after its
    /// return.)
    pub fn failed(&mut self, started: tokio::time::Instant) {
        if self.last_start == Some(started) {
            self.last_start = None;
            self.spacing = WATCH_SPACING_INITIAL;
        }
    }
}

/// A tower layer for the API client that paces its watch requests ([`WatchPacing`]); every other
/// request passes untouched.
#[derive(Debug, Clone, Default)]
pub struct WatchPacingLayer(std::sync::Arc<std::sync::Mutex<WatchPacing>>);

impl<S> tower::Layer<S> for WatchPacingLayer {
    type Service = PacedWatches<S>;

    fn layer(&self, inner: S) -> PacedWatches<S> {
        PacedWatches { inner, pacing: self.0.clone() }
    }
}

/// The service of [`WatchPacingLayer`].
#[derive(Debug, Clone)]
pub struct PacedWatches<S> {
    inner: S,
    pacing: std::sync::Arc<std::sync::Mutex<WatchPacing>>,
}

impl<S, B, RB> tower::Service<http::Request<B>> for PacedWatches<S>
where
    S: tower::Service<http::Request<B>, Response = http::Response<RB>>,
    S::Future: Send + 'static,
{
    type Response = S::Response;
    type Error = S::Error;
    type Future = futures::future::BoxFuture<'static, Result<S::Response, S::Error>>;

    fn poll_ready(&mut self, cx: &mut std::task::Context<'_>) -> std::task::Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, request: http::Request<B>) -> Self::Future {
        let watch = is_watch(request.uri()).then(|| {
            let now = tokio::time::Instant::now();
            let mut pacing = self.pacing.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
            let delay = pacing.next_delay(now);
            (now + delay, delay)
        });
        let pacing = self.pacing.clone();
        // The client's future does nothing until polled: the request goes out after the wait.
        let response = self.inner.call(request);
        Box::pin(async move {
            if let Some((_, delay)) = watch
                && !delay.is_zero()
            {
                tracing::debug!(?delay, "The previous pod watch ended early; waiting before the next");
                tokio::time::sleep(delay).await;
            }
            let response = response.await;
            // No answer, or a server error or throttling answer: the watcher backs off on its
            // own. Not a 410: the watch is then rebuilt afresh (a list, then a watch) without
            // the watcher's back-off, and only this pacing keeps that from a tight loop.
            if let Some((started, _)) = watch
                && response.as_ref().map_or(true, |r| {
                    r.status().is_server_error() || r.status() == http::StatusCode::TOO_MANY_REQUESTS
                })
            {
                pacing.lock().unwrap_or_else(std::sync::PoisonError::into_inner).failed(started);
            }
            response
        })
    }
}

/// Whether the request is a watch (`?watch=true`, or `1`, as kube and client-go send it).
pub(crate) fn is_watch(uri: &http::Uri) -> bool {
    uri.query().is_some_and(|query| query.split('&').any(|pair| pair == "watch=true" || pair == "watch=1"))
}

/// The node's pods, as watcher events, each pod with the server's JSON kept for the syncer's
/// merge base (fields newer than the agent's types survive its writes).
pub fn pod_watch(
    client: kube::Client,
    node_name: &str,
    selector: Option<&str>,
) -> impl futures::Stream<Item = Result<WatchEvent<ApiPod>, watcher::Error>> + 'static {
    let timeout = rand::random_range(WATCH_TIMEOUT_SECONDS);
    // Bookmarks are on by default.
    let mut config =
        watcher::Config::default().fields(&format!("spec.nodeName={node_name}")).timeout(timeout);
    if let Some(selector) = selector {
        config = config.labels(selector);
    }
    let make = move || {
        let backoff = Backoff::new(RELIST_BACKOFF_INITIAL, RELIST_BACKOFF_MAX)
            .jittered()
            .reset_after(RELIST_BACKOFF_RESET);
        watcher::watcher(Api::<ApiPod>::all(client.clone()), config.clone()).backoff(backoff)
    };
    RelistOnExpiredWatch { inner: Box::pin(make()), make, pause: None, too_large_since: None }
}

/// The watcher, made afresh (so that it lists again) when a watch request itself is answered
/// 410 Gone. kube's watcher lists again after a 410 that comes as an ERROR event in the stream
/// (what a real API server sends), but after a 410 answer to the watch request (a proxy, an
/// aggregated server) it keeps the expired version and watches from it again, forever: pods
/// created meanwhile were never seen. The next watch is paced ([`WatchPacingLayer`]), so a
/// server that answers every watch so does not make it list in a loop.
///
/// And it lists again when the server has answered "Too large resource version" to every watch
/// from the same version for [`TOO_LARGE_RELIST_AFTER`] (docs/sync.md §7.2): kube's watcher
/// would ask from that version for good, which after an etcd restored without
/// `--bump-revision` means the agent never sees a pod change again. A watch cache that only lags
/// (no progress notifications from an older etcd) catches up meanwhile, so it does not make the
/// agent list in a loop; kube's back-off paces the watches in between.
///
/// It also waits out what a throttling answer's `Retry-After` asks (at most
/// [`RETRY_AFTER_MAX`]) before the watcher tries again. The pod watch's client has no retry of
/// kube's: that retry slept a `Retry-After: 3600` out inside the list request, and the agent saw
/// no pod for an hour, said nothing and answered `/readyz` ok.
///
/// And it lists again after a line of the watch stream it cannot read as an event, which
/// kube's watcher skips, losing the event (`is_unreadable`).
struct RelistOnExpiredWatch<S, F> {
    inner: std::pin::Pin<Box<S>>,
    make: F,
    pause: Option<std::pin::Pin<Box<tokio::time::Sleep>>>,
    /// When the current run of "Too large resource version" answers began.
    too_large_since: Option<tokio::time::Instant>,
}

impl<S, F> futures::Stream for RelistOnExpiredWatch<S, F>
where
    S: futures::Stream<Item = Result<WatchEvent<ApiPod>, watcher::Error>>,
    F: Fn() -> S + Unpin,
{
    type Item = S::Item;

    fn poll_next(
        self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Option<Self::Item>> {
        let this = self.get_mut();
        if let Some(pause) = &mut this.pause {
            futures::ready!(pause.as_mut().poll(cx));
            this.pause = None;
        }
        let item = futures::ready!(this.inner.as_mut().poll_next(cx));
        if let Some(Err(watcher::Error::WatchStartFailed(kube::Error::Api(status)))) = &item
            && status.code == 410
        {
            tracing::debug!("The pod watch's version expired; listing again");
            this.inner = Box::pin((this.make)());
        }
        if let Some(Err(error)) = &item
            && is_unreadable(error)
        {
            tracing::warn!(error = %error, "The pod watch received an event it cannot read; listing again");
            this.inner = Box::pin((this.make)());
        }
        match &item {
            Some(Err(error)) if is_too_large(error) => {
                let now = tokio::time::Instant::now();
                let since = *this.too_large_since.get_or_insert(now);
                if now.saturating_duration_since(since) >= TOO_LARGE_RELIST_AFTER {
                    tracing::warn!(
                        error = %error,
                        "The API server has not reached the pod watch's resourceVersion for 10s (an etcd restored from a backup?); listing again"
                    );
                    this.too_large_since = None;
                    this.inner = Box::pin((this.make)());
                }
            }
            // A failure of another kind says nothing of the version; an event says the
            // server reached it (or a list began afresh).
            Some(Err(_)) => {}
            _ => this.too_large_since = None,
        }
        if let Some(Err(error)) = &item
            && let Some(asked) = asked_wait(error)
        {
            let wait = asked.min(RETRY_AFTER_MAX);
            tracing::info!(
                asked = asked.as_secs(),
                waiting = wait.as_secs(),
                "The API server asked the pod watch to wait before it tries again"
            );
            this.pause = Some(Box::pin(tokio::time::sleep(wait)));
        }
        std::task::Poll::Ready(item)
    }
}

/// Whether the API server answers the watch: one log line when it is lost, one when it is
/// back, however many requests fail in between.
#[derive(Debug, Default)]
pub struct ApiReachability {
    lost: bool,
}

/// What a watch event says about the API server.
#[derive(Debug, PartialEq, Eq)]
pub enum Reachability {
    /// The first failure after the server answered.
    Lost,
    /// The first answer after a failure.
    Back,
    Unchanged,
}

impl ApiReachability {
    pub fn on_event<K>(&mut self, event: &Result<WatchEvent<K>, watcher::Error>) -> Reachability {
        match event {
            // Emitted when a re-list starts, before any request: no answer yet.
            Ok(WatchEvent::Init) => Reachability::Unchanged,
            Ok(_) if self.lost => {
                self.lost = false;
                Reachability::Back
            }
            Ok(_) => Reachability::Unchanged,
            // The server answered: the watch's version is too old (a compaction, or a restart
            // emptied the watch cache). The watcher lists again; nothing is lost.
            Err(err) if is_expired(err) => Reachability::Unchanged,
            // An ERROR event (or an event of a type the client does not know, which kube reads
            // as one) came on a watch the server is serving: it answers, and the watcher lists
            // again. Not an outage to log as one.
            Err(watcher::Error::WatchError(_)) => Reachability::Unchanged,
            // An event kube cannot read as one (a type it does not know) comes as a `Status`
            // it makes up, with no code: the server sent it, so it answers (and the pod watch
            // lists again, `is_unreadable`).
            Err(watcher::Error::WatchFailed(kube::Error::Api(status))) if status.code == 0 => {
                Reachability::Unchanged
            }
            // Throttled: the server answered and asked the watch to wait (said at info where
            // the wait is taken). The watch's client has no retry of kube's, which used to
            // absorb these, so each would otherwise read as the server lost and back.
            Err(
                watcher::Error::InitialListFailed(kube::Error::Api(status))
                | watcher::Error::WatchStartFailed(kube::Error::Api(status))
                | watcher::Error::WatchFailed(kube::Error::Api(status)),
            ) if status.code == 429 => Reachability::Unchanged,
            // A line of the stream that is no JSON: the server (or a proxy) sent it.
            Err(watcher::Error::WatchFailed(kube::Error::SerdeError(_))) => Reachability::Unchanged,
            Err(_) if !self.lost => {
                self.lost = true;
                Reachability::Lost
            }
            Err(_) => Reachability::Unchanged,
        }
    }
}

/// What a host consuming [`pod_watch`] as an actor stream keeps of the watch itself: whether
/// the API server answers (the lost/back log lines) and the UIDs the current list has shown.
/// Both hosts hand each event to [`PodWatchState::on_event`] and act on the step it returns.
#[derive(Debug, Default)]
pub struct PodWatchState {
    api: ApiReachability,
    /// UIDs seen since the current (re-)list began.
    listed: HashSet<PodUid>,
    /// Pods the typed structs cannot read, with the resourceVersion last said so: each version
    /// is logged once, not again at every list.
    undecodable: HashMap<PodUid, Option<String>>,
}

/// Where a copy of a pod came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Seen {
    /// A (re-)list. Its copy may be older than one seen before, which an event of the watch's
    /// cannot: resourceVersions set back by an etcd restored from a backup, or a list answered
    /// just before the agent's own write (docs/sync.md §7.4).
    Listed,
    /// An event of the watch after the list.
    Watched,
}

/// What a watch event asks of the host.
#[derive(Debug)]
pub enum PodWatchStep {
    /// A pod was added or changed, by a list or by the watch after it.
    Apply(ApiPod, Seen),
    /// The watch saw a pod deleted.
    Delete(ApiPod),
    /// A (re-)list is complete: these UIDs are the node's pods, and any other pod the host holds
    /// went while the watch was down.
    Listed(HashSet<PodUid>),
}

impl PodWatchState {
    /// Logs what the event says about the API server and returns what the host must do, if
    /// anything (the start of a list, a failed request: nothing).
    pub fn on_event(&mut self, event: Result<WatchEvent<ApiPod>, watcher::Error>) -> Option<PodWatchStep> {
        match self.api.on_event(&event) {
            Reachability::Lost => tracing::warn!(
                error = %event.as_ref().err().map(|e| with_causes(e)).unwrap_or_default(),
                "Lost the API server: the pod watch failed; listing again every second until it answers"
            ),
            Reachability::Back => {
                tracing::info!("The API server is back: the pod watch lists the node's pods again")
            }
            Reachability::Unchanged => {}
        }
        match event {
            Ok(WatchEvent::Apply(pod)) => self.applied(pod, Seen::Watched),
            Ok(WatchEvent::InitApply(pod)) => self.applied(pod, Seen::Listed),
            Ok(WatchEvent::Delete(pod)) => {
                if let Some(uid) = pod.pod.metadata.uid.as_deref() {
                    self.listed.remove(uid);
                    self.listed.shrink_after_removal();
                    self.undecodable.remove(uid);
                }
                Some(PodWatchStep::Delete(pod))
            }
            Ok(WatchEvent::Init) => {
                self.listed.clear();
                self.listed.shrink_after_removal();
                None
            }
            Ok(WatchEvent::InitDone) => {
                // Pods gone while the watch was down leave no note behind.
                let listed = &self.listed;
                self.undecodable.retain(|uid, _| listed.contains(uid));
                self.undecodable.shrink_after_removal();
                Some(PodWatchStep::Listed(self.listed.clone()))
            }
            Err(err) => {
                tracing::debug!(error = %err, "Pod watch failed; retrying with back-off");
                None
            }
        }
    }

    /// A pod added or changed: listed (so not taken for deleted), and applied unless its copy
    /// cannot be read.
    fn applied(&mut self, pod: ApiPod, seen: Seen) -> Option<PodWatchStep> {
        let uid = PodUid::of(&pod.pod);
        if let Some(uid) = &uid {
            self.listed.insert(uid.clone());
        }
        // Listed (so not taken for deleted), but not applied: the host keeps what it had of
        // the pod, if anything, until a version it can read.
        if let Some(why) = pod.undecodable() {
            let version = pod.pod.metadata.resource_version.clone();
            let key = uid.unwrap_or_default();
            if self.undecodable.get(&key) != Some(&version) {
                tracing::warn!(pod = %probelet_actors::format::pod_ref(&pod.pod), pod_uid = %key, error = %why, "Cannot read the pod; skipping it until it changes");
                self.undecodable.insert(key, version);
            }
            return None;
        }
        if let Some(uid) = uid {
            self.undecodable.remove(&uid);
        }
        Some(PodWatchStep::Apply(pod, seen))
    }
}

/// An error's text with the text of each of its causes that it does not already say. kube's
/// own text of a failed connect stops at `ServiceError: client error (Connect)`: the reason (a
/// certificate that names another host or has expired, a refused connection) is only in its
/// causes, and the one line that says the API server is lost said nothing of why (a hostile
/// test), where client-go's says `x509: certificate is valid for …`.
pub(crate) fn with_causes(error: &dyn std::error::Error) -> String {
    let mut text = error.to_string();
    let mut source = error.source();
    while let Some(cause) = source {
        let said = cause.to_string();
        if !text.contains(&said) {
            text.push_str(": ");
            text.push_str(&said);
        }
        source = cause.source();
    }
    text
}

/// For a host's `StreamHandler::finished`. The watcher never ends on its own; if it does, the
/// host keeps running (and probing) on what it last saw, rather than stopping as actix would.
pub fn pod_watch_ended() {
    tracing::error!("Pod watch ended");
}

/// The `Retry-After` of a throttling or failing answer to the watch's list or watch request.
fn asked_wait(err: &watcher::Error) -> Option<Duration> {
    match err {
        watcher::Error::InitialListFailed(e)
        | watcher::Error::WatchStartFailed(e)
        | watcher::Error::WatchFailed(e) => retry_after(e),
        _ => None,
    }
}

/// A line of the watch stream kube could not read as an event: no JSON (a proxy that garbles
/// the stream), or JSON of another shape (an event type it does not know), which kube reads as
/// a `Status` with no code. kube reads on past it, so the event is lost: a pod created then was
/// never seen until it changed again (a hostile test). client-go ends the watch on such a line
/// and watches again from the last version it read, which sends the event again; kube's watcher
/// cannot be asked that, so the pod watch lists again (RelistOnExpiredWatch).
fn is_unreadable(err: &watcher::Error) -> bool {
    match err {
        watcher::Error::WatchFailed(kube::Error::SerdeError(_)) => true,
        watcher::Error::WatchFailed(kube::Error::Api(status)) => status.code == 0,
        _ => false,
    }
}

/// 504 "Too large resource version": the server has not reached the version the watch starts
/// from (docs/sync.md §7.2). kube's watcher asks again from that same version, for good: after an
/// etcd restored without `--bump-revision` the agent would never see a pod change again.
/// client-go's reflector lists again instead, and so does the pod watch. Known by the status
/// cause, or, from a server that sends none, by the code and the message (as client-go's
/// `isTooLargeResourceVersionError`).
fn is_too_large(err: &watcher::Error) -> bool {
    let status = match err {
        watcher::Error::WatchError(status) => status.as_ref(),
        // Not a list's: kube's watcher lists with no resourceVersion (a quorum read), which no
        // server finds too large.
        watcher::Error::WatchStartFailed(kube::Error::Api(status))
        | watcher::Error::WatchFailed(kube::Error::Api(status)) => status.as_ref(),
        _ => return false,
    };
    let by_cause = status
        .details
        .as_ref()
        .is_some_and(|details| details.causes.iter().any(|cause| cause.reason == "ResourceVersionTooLarge"));
    by_cause || (status.code == 504 && status.message.contains("Too large resource version"))
}

/// 410 Gone / Expired, as an ERROR event of the watch or as the answer to its request.
fn is_expired(err: &watcher::Error) -> bool {
    match err {
        watcher::Error::WatchError(status) => status.code == 410,
        watcher::Error::WatchStartFailed(kube::Error::Api(status))
        | watcher::Error::WatchFailed(kube::Error::Api(status))
        | watcher::Error::InitialListFailed(kube::Error::Api(status)) => status.code == 410,
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::Pod;
    use kube::core::Status;

    fn refused() -> Result<WatchEvent<Pod>, watcher::Error> {
        let io = std::io::Error::new(std::io::ErrorKind::ConnectionRefused, "refused");
        Err(watcher::Error::InitialListFailed(kube::Error::Service(Box::new(io))))
    }

    fn expired() -> Result<WatchEvent<Pod>, watcher::Error> {
        Err(watcher::Error::WatchError(
            Status::failure("too old resource version: 5 (7)", "Expired").with_code(410).boxed(),
        ))
    }

    /// An ERROR event on a live watch (here the empty one kube makes of an event type it does
    /// not know) is the server answering, not the server lost.
    #[test]
    fn an_error_event_on_a_live_watch_is_no_outage() {
        let mut api = ApiReachability::default();
        let unknown: Result<WatchEvent<Pod>, _> =
            Err(watcher::Error::WatchError(Status::failure("", "").with_code(0).boxed()));
        assert_eq!(api.on_event(&unknown), Reachability::Unchanged);
        // What kube 5 makes of an event type it does not know, found by a hostile test: the
        // watch failed with an empty `Status`. Before, logged as the API server lost.
        let unreadable: Result<WatchEvent<Pod>, _> =
            Err(watcher::Error::WatchFailed(kube::Error::Api(Status::failure("", "").with_code(0).boxed())));
        assert_eq!(api.on_event(&unreadable), Reachability::Unchanged);
        // A throttled list: the server answered (found by review once the watch's client lost
        // kube's retry, which had absorbed these).
        let throttled: Result<WatchEvent<Pod>, _> = Err(watcher::Error::InitialListFailed(kube::Error::Api(
            Status::failure("Too many requests", "TooManyRequests").with_code(429).boxed(),
        )));
        assert_eq!(api.on_event(&throttled), Reachability::Unchanged);
        assert_eq!(api.on_event(&refused()), Reachability::Lost, "a refused connection still is");
    }

    /// A throttling answer's `Retry-After` is waited out before the watcher tries again, at
    /// most [`RETRY_AFTER_MAX`]: the watch's client has no retry of kube's, which slept a
    /// `Retry-After: 3600` out inside the list, and the agent saw no pod for an hour.
    #[tokio::test(start_paused = true)]
    async fn a_retry_after_is_waited_out_up_to_its_cap() {
        use futures::StreamExt as _;
        let throttled = |seconds: u32| -> Result<WatchEvent<ApiPod>, watcher::Error> {
            let status: Status = serde_json::from_value(serde_json::json!({
                "status": "Failure", "message": "Too many requests", "reason": "TooManyRequests",
                "code": 429, "details": {"retryAfterSeconds": seconds},
            }))
            .unwrap();
            Err(watcher::Error::InitialListFailed(kube::Error::Api(status.boxed())))
        };
        let items = vec![throttled(3600), Ok(WatchEvent::Init), throttled(2), Ok(WatchEvent::Init)];
        let make = || futures::stream::iter(Vec::new());
        let mut watch = RelistOnExpiredWatch {
            inner: Box::pin(futures::stream::iter(items)),
            make,
            pause: None,
            too_large_since: None,
        };
        let start = tokio::time::Instant::now();
        assert!(watch.next().await.is_some_and(|e| e.is_err()));
        assert!(matches!(watch.next().await, Some(Ok(WatchEvent::Init))));
        assert_eq!(start.elapsed(), RETRY_AFTER_MAX, "3600 s asked, the cap waited");
        assert!(watch.next().await.is_some_and(|e| e.is_err()));
        assert!(matches!(watch.next().await, Some(Ok(WatchEvent::Init))));
        assert_eq!(start.elapsed(), RETRY_AFTER_MAX + Duration::from_secs(2), "2 s asked, 2 s waited");
    }

    /// A watch from a version the server has not reached (an etcd restored without
    /// `--bump-revision`) lists again once that version has been refused for
    /// [`TOO_LARGE_RELIST_AFTER`]; kube's watcher would ask from it for good. A refusal that
    /// ends sooner (a lagging cache catching up) lists nothing, and other errors neither start
    /// nor end a run of refusals.
    #[tokio::test(start_paused = true)]
    async fn a_version_refused_as_too_large_for_10_s_lists_again() {
        use futures::StreamExt as _;
        let too_large = |cause: bool| -> Result<WatchEvent<ApiPod>, watcher::Error> {
            let mut status = serde_json::json!({
                "status": "Failure", "message": "Timeout: Too large resource version: 9, current: 4",
                "reason": "Timeout", "code": 504,
            });
            if cause {
                status["details"] = serde_json::json!({"causes": [{"reason": "ResourceVersionTooLarge"}]});
            }
            Err(watcher::Error::WatchError(serde_json::from_value::<Status>(status).unwrap().boxed()))
        };
        let other = || -> Result<WatchEvent<ApiPod>, watcher::Error> {
            Err(watcher::Error::WatchError(
                Status::failure("internal", "InternalError").with_code(500).boxed(),
            ))
        };
        for cause in [true, false] {
            let made = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
            let counted = made.clone();
            let make = move || {
                counted.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                let (listing, list) = futures::channel::mpsc::unbounded();
                listing.unbounded_send(Ok(WatchEvent::Init)).unwrap();
                list
            };
            let (tx, rx) = futures::channel::mpsc::unbounded();
            let mut watch =
                RelistOnExpiredWatch { inner: Box::pin(rx), make, pause: None, too_large_since: None };
            let lists = || made.load(std::sync::atomic::Ordering::SeqCst);
            let mut step = async |item, wait: u64| {
                tokio::time::advance(Duration::from_secs(wait)).await;
                tx.unbounded_send(item).unwrap();
                watch.next().await
            };
            // Refused for 9 s, then the cache caught up: no list.
            step(too_large(cause), 0).await;
            step(other(), 4).await;
            step(too_large(cause), 5).await;
            step(Ok(WatchEvent::Apply(ApiPod::from(k8s_openapi::api::core::v1::Pod::default()))), 1).await;
            assert_eq!(lists(), 0, "a lag that ended lists nothing");
            // Refused from the same version for 10 s: a new watcher, which lists.
            step(too_large(cause), 0).await;
            step(too_large(cause), 5).await;
            assert_eq!(lists(), 0, "5 s");
            step(too_large(cause), 5).await;
            assert_eq!(lists(), 1, "10 s: listed again");
            assert!(matches!(watch.next().await, Some(Ok(WatchEvent::Init))));
        }
    }

    /// A line of the watch stream that kube cannot read as an event (no JSON, or JSON of another
    /// shape) makes the pod watch list again, said at warning, and is no outage: kube's watcher
    /// reads on past it, and the event it was is lost.
    #[tokio::test]
    async fn an_event_that_cannot_be_read_lists_again() {
        use futures::StreamExt as _;
        let garbage = || -> Result<WatchEvent<ApiPod>, watcher::Error> {
            let error = serde_json::from_str::<serde_json::Value>("x\"type\":").unwrap_err();
            Err(watcher::Error::WatchFailed(kube::Error::SerdeError(error)))
        };
        let other_shape = || -> Result<WatchEvent<ApiPod>, watcher::Error> {
            Err(watcher::Error::WatchFailed(kube::Error::Api(Status::failure("", "").with_code(0).boxed())))
        };
        let made = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let counted = made.clone();
        let make = move || {
            counted.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
            futures::stream::iter(vec![Ok(WatchEvent::Init)])
        };
        for (unreadable, lists) in [(garbage(), 1), (other_shape(), 2)] {
            let items = vec![unreadable, Ok(WatchEvent::Apply(ApiPod::from(Pod::default())))];
            let mut watch = RelistOnExpiredWatch {
                inner: Box::pin(futures::stream::iter(items)),
                make: make.clone(),
                pause: None,
                too_large_since: None,
            };
            let error = watch.next().await.expect("an item");
            assert_eq!(ApiReachability::default().on_event(&error), Reachability::Unchanged);
            assert_eq!(made.load(std::sync::atomic::Ordering::SeqCst), lists);
            assert!(matches!(watch.next().await, Some(Ok(WatchEvent::Init))), "a list, not the next event");
        }
        let refused =
            watcher::Error::WatchFailed(kube::Error::Service(Box::new(std::io::Error::other("reset"))));
        assert!(!is_unreadable(&refused));
    }

    /// The line that says the API server is lost names the reason, which kube's text of a failed
    /// connect leaves to its causes; a cause already said is not said twice.
    #[test]
    fn an_error_is_said_with_its_causes() {
        #[derive(Debug, thiserror::Error)]
        #[error("client error (Connect)")]
        struct Connect(#[source] std::io::Error);
        let io = std::io::Error::new(std::io::ErrorKind::InvalidData, "invalid peer certificate: Expired");
        let error = watcher::Error::InitialListFailed(kube::Error::Service(Box::new(Connect(io))));
        assert_eq!(
            with_causes(&error),
            "failed to perform initial object list: ServiceError: client error (Connect): invalid peer certificate: Expired"
        );
    }

    #[test]
    fn one_lost_and_one_back_per_outage() {
        let mut api = ApiReachability::default();
        let outage = [
            (Ok(WatchEvent::Apply(Pod::default())), Reachability::Unchanged),
            (refused(), Reachability::Lost),
            (Ok(WatchEvent::Init), Reachability::Unchanged),
            (refused(), Reachability::Unchanged),
            (Ok(WatchEvent::Init), Reachability::Unchanged),
            (refused(), Reachability::Unchanged),
            (expired(), Reachability::Unchanged),
            (Ok(WatchEvent::Init), Reachability::Unchanged),
            (Ok(WatchEvent::InitApply(Pod::default())), Reachability::Back),
            (Ok(WatchEvent::InitDone), Reachability::Unchanged),
        ];
        for (i, (event, want)) in outage.into_iter().enumerate() {
            assert_eq!(api.on_event(&event), want, "event {i}");
        }
    }

    fn pod(uid: Option<&str>) -> ApiPod {
        let mut pod = Pod::default();
        pod.metadata.uid = uid.map(String::from);
        ApiPod::from_typed(pod)
    }

    fn listed(step: Option<PodWatchStep>) -> Vec<PodUid> {
        match step {
            Some(PodWatchStep::Listed(uids)) => {
                let mut uids: Vec<PodUid> = uids.into_iter().collect();
                uids.sort();
                uids
            }
            other => panic!("not a completed list: {other:?}"),
        }
    }

    #[test]
    fn a_completed_list_names_the_pods_seen_since_it_began() {
        let mut watch = PodWatchState::default();
        assert!(watch.on_event(Ok(WatchEvent::Init)).is_none());
        assert!(matches!(
            watch.on_event(Ok(WatchEvent::InitApply(pod(Some("a"))))),
            Some(PodWatchStep::Apply(..))
        ));
        assert!(matches!(
            watch.on_event(Ok(WatchEvent::InitApply(pod(None)))),
            Some(PodWatchStep::Apply(..))
        ));
        watch.on_event(Ok(WatchEvent::InitApply(pod(Some("b")))));
        assert_eq!(listed(watch.on_event(Ok(WatchEvent::InitDone))), ["a", "b"]);

        // After the list: a new pod, a deleted one, then a failure and a re-list that no longer
        // shows "a" nor "c".
        watch.on_event(Ok(WatchEvent::Apply(pod(Some("c")))));
        assert!(matches!(
            watch.on_event(Ok(WatchEvent::Delete(pod(Some("a"))))),
            Some(PodWatchStep::Delete(_))
        ));
        assert!(watch.on_event(refused_api_pod()).is_none());
        assert!(watch.on_event(Ok(WatchEvent::Init)).is_none());
        watch.on_event(Ok(WatchEvent::InitApply(pod(Some("b")))));
        assert_eq!(listed(watch.on_event(Ok(WatchEvent::InitDone))), ["b"]);
    }

    /// A pod the structs cannot read is listed (so the host does not take it for deleted) but
    /// not applied; once a version of it reads, it is applied.
    #[test]
    fn a_pod_that_cannot_be_read_is_listed_but_not_applied() {
        let odd = |rv: &str, restarts: serde_json::Value| {
            ApiPod::from_json_lenient(serde_json::json!({
                "metadata": {"name": "odd", "namespace": "default", "uid": "o", "resourceVersion": rv},
                "status": {"containerStatuses": [{"name": "app", "ready": false, "restartCount": restarts,
                                                  "image": "i", "imageID": ""}]},
            }))
        };
        let mut watch = PodWatchState::default();
        watch.on_event(Ok(WatchEvent::Init));
        assert!(watch.on_event(Ok(WatchEvent::InitApply(odd("1", serde_json::json!("x"))))).is_none());
        watch.on_event(Ok(WatchEvent::InitApply(pod(Some("a")))));
        assert_eq!(listed(watch.on_event(Ok(WatchEvent::InitDone))), ["a", "o"]);
        assert!(watch.on_event(Ok(WatchEvent::Apply(odd("2", serde_json::json!("y"))))).is_none());
        assert!(matches!(
            watch.on_event(Ok(WatchEvent::Apply(odd("3", serde_json::json!(0))))),
            Some(PodWatchStep::Apply(..))
        ));
    }

    /// An event whose resourceVersion is older than the one before it, with no list between,
    /// is applied as a watched copy, as client-go's reflector applies it: the watch's order is
    /// the server's word (docs/sync.md §7.4). The syncer keeps the newer copy as its merge base.
    #[test]
    fn an_event_older_than_the_one_before_it_is_applied() {
        let at = |rv: &str| {
            let mut pod = Pod::default();
            pod.metadata.uid = Some("a".into());
            pod.metadata.resource_version = Some(rv.into());
            ApiPod::from_typed(pod)
        };
        let mut watch = PodWatchState::default();
        watch.on_event(Ok(WatchEvent::Init));
        watch.on_event(Ok(WatchEvent::InitDone));
        for rv in ["9", "8"] {
            match watch.on_event(Ok(WatchEvent::Apply(at(rv)))) {
                Some(PodWatchStep::Apply(pod, Seen::Watched)) => {
                    assert_eq!(pod.pod.metadata.resource_version.as_deref(), Some(rv));
                }
                other => panic!("version {rv}: {other:?}"),
            }
        }
    }

    #[test]
    fn a_deleted_pod_leaves_the_list() {
        let mut watch = PodWatchState::default();
        watch.on_event(Ok(WatchEvent::Init));
        watch.on_event(Ok(WatchEvent::InitApply(pod(Some("a")))));
        watch.on_event(Ok(WatchEvent::Delete(pod(Some("a")))));
        assert!(listed(watch.on_event(Ok(WatchEvent::InitDone))).is_empty());
    }

    fn refused_api_pod() -> Result<WatchEvent<ApiPod>, watcher::Error> {
        let io = std::io::Error::new(std::io::ErrorKind::ConnectionRefused, "refused");
        Err(watcher::Error::InitialListFailed(kube::Error::Service(Box::new(io))))
    }

    #[test]
    fn an_expired_watch_is_no_outage() {
        let mut api = ApiReachability::default();
        assert_eq!(api.on_event(&expired()), Reachability::Unchanged);
        assert_eq!(api.on_event(&Ok(WatchEvent::<Pod>::InitDone)), Reachability::Unchanged);
    }

    /// Watches that follow each other within [`SHORT_WATCH`] wait 1 s, then 2, 4 and 8 s at
    /// most; a watch that began long enough ago lets the next one go at once, and starts over.
    #[test]
    fn watches_that_end_early_are_spaced_out() {
        let t0 = tokio::time::Instant::now();
        let at = |ms: u64| t0 + Duration::from_millis(ms);
        let mut pacing = WatchPacing::default();
        assert_eq!(pacing.next_delay(at(0)), Duration::ZERO);
        // Each watch ends at once: asked 10 ms after its start.
        assert_eq!(pacing.next_delay(at(10)), Duration::from_millis(990));
        assert_eq!(pacing.next_delay(at(1_010)), Duration::from_millis(1_990));
        assert_eq!(pacing.next_delay(at(3_010)), Duration::from_millis(3_990));
        assert_eq!(pacing.next_delay(at(7_010)), Duration::from_millis(7_990));
        assert_eq!(pacing.next_delay(at(15_010)), Duration::from_millis(7_990), "8 s at most");
        // A watch that lasted its minutes: the next one goes at once, and the spacing restarts.
        assert_eq!(pacing.next_delay(at(200_000)), Duration::ZERO);
        assert_eq!(pacing.next_delay(at(200_010)), Duration::from_millis(990));
    }

    /// A watch request that got no stream (a refused connect, an error status) is no watch that
    /// ended early: the next one is not held back for it, nor the spacing doubled.
    #[test]
    fn a_watch_that_failed_does_not_count_against_the_next() {
        let t0 = tokio::time::Instant::now();
        let at = |ms: u64| t0 + Duration::from_millis(ms);
        let mut pacing = WatchPacing::default();
        assert_eq!(pacing.next_delay(at(0)), Duration::ZERO);
        pacing.failed(at(0));
        assert_eq!(pacing.next_delay(at(800)), Duration::ZERO, "after a failed connect");
        pacing.failed(at(800));
        assert_eq!(pacing.next_delay(at(1_600)), Duration::ZERO);
        // One that streamed and ended at once still spaces the next, from 1 s.
        assert_eq!(pacing.next_delay(at(1_610)), Duration::from_millis(990));
        // A failure of an older request does not undo a newer start.
        pacing.failed(at(1_600));
        assert_eq!(pacing.next_delay(at(2_700)), Duration::from_millis(1_900));
    }

    #[test]
    fn only_watch_requests_are_paced() {
        let uri = |s: &str| s.parse::<http::Uri>().unwrap();
        assert!(is_watch(&uri("/api/v1/pods?fieldSelector=spec.nodeName%3Dn&watch=true&timeoutSeconds=200")));
        assert!(is_watch(&uri("/api/v1/pods?watch=1")));
        assert!(!is_watch(&uri("/api/v1/pods?fieldSelector=spec.nodeName%3Dn&limit=500")));
        assert!(!is_watch(&uri("/api/v1/namespaces/d/pods/p/status")));
        assert!(!is_watch(&uri("/api/v1/pods?watchful=true")));
    }
}
