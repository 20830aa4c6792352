//! Bounds every answer of the agent's API client: how long its headers may take, how long its
//! body may go silent, how much of it the agent may hold, and that a watch event cut short is
//! never lost without a word. One layer, one body wrapper: each answer is held to the bounds of
//! its kind (an answer read whole, a watch stream, or an upgraded connection, left alone).
//!
//! **An answer that stops coming.** No response headers for [`HEADERS_WAIT_MAX`], or (but for a
//! watch, whose stream may rightly stay quiet for minutes) no byte of the body for
//! [`ANSWER_SILENCE_MAX`], fails the request. kube's client sets no read timeout by default (kube
//! 5: "watch streams are protected by a watcher-level idle timeout instead"), and its watcher
//! bounds only the events of an open watch: a pod list answered with its headers and half a
//! body, then nothing (a stalled server, a proxy, a connection whose peer went away without a
//! reset), was waited for for ever, and the agent never saw a pod again nor said anything (a
//! hostile test). client-go's connections to an API server are HTTP/2 with a health check that
//! drops a connection silent for 30 s and unanswered to a ping for 15 s more; this is the same
//! order of wait for a client that speaks HTTP/1.1, once an answer has begun. Before its
//! headers, a live API server may rightly take up to its own request timeout
//! (`--request-timeout`, 60 s by default: a list of an overloaded server), then answers 504
//! itself; client-go waits for it, so the wait for headers is longer than that. A failed answer
//! is a transport error to the caller: the pod watch lists again on its back-off, a status write
//! is retried on the syncer's.
//!
//! **An answer that does not end.** kube reads an answer whole before it decodes it, and a watch
//! stream line by line with no bound on a line, so a server (or a proxy) that sends a body
//! without end, or a watch line without its newline, grew the agent's memory until the node
//! killed it; the silence bound never fired, as bytes kept coming (a hostile test). client-go
//! refuses a watch event longer than 16 MiB (`object to decode was longer than maximum allowed
//! size`); so does this layer, and it refuses an answer that is no watch past
//! [`MAX_ANSWER_BYTES`], where client-go sets no bound (docs/reliability.md, "An API server that
//! sends without end").
//!
//! **A watch event cut short.** kube skips, without a word, a watch line whose JSON ends before
//! the line does (it takes it for the last line of a stream cut off, which it cannot tell
//! apart), so the event it was is lost, and with it the pod it was about until the pod changes
//! again. Such a line here becomes a `Status` with no code, as does an event too long: kube
//! hands it to the pod watch as an event it cannot read, and the pod watch lists again
//! (`cluster::watch`), said once at warning. So does a watch line begun and then left
//! unfinished, nothing more coming, for [`ANSWER_SILENCE_MAX`]: an API server writes each event
//! whole.
//!
//! A request that upgrades its connection (`pods/exec`) is left alone: the exec probe bounds it.

use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::{Bytes, BytesMut};
use http::{Request, Response};
use http_body::{Body, Frame, SizeHint};

/// The longest an answer's body may be silent between two of its parts, and a watch line may
/// stay unfinished.
pub const ANSWER_SILENCE_MAX: Duration = Duration::from_secs(30);

/// The longest the headers of an answer may take: the API server's default request timeout
/// (60 s), after which a live server answers 504 itself, and 15 s more (client-go's ping
/// timeout), so that a slow but live server is never given up before it gives up itself.
pub const HEADERS_WAIT_MAX: Duration = Duration::from_secs(75);

/// The longest line of a watch stream, one event: client-go's streaming decoder's bound.
pub const MAX_EVENT_BYTES: usize = 16 * 1024 * 1024;

/// The longest answer that is no watch. The pod watch lists 500 pods a page, so a page at the
/// bound is pods of 128 KiB each on average, many times what a pod takes (a pod of several MB
/// still fits); decoded, an answer takes a few times its size, and the DaemonSet's memory limit
/// is 256 MiB: an answer past this would have the agent killed for it anyway.
pub const MAX_ANSWER_BYTES: usize = 64 * 1024 * 1024;

/// client-go's words for a watch event past [`MAX_EVENT_BYTES`] (`ErrObjectTooLarge`).
pub const OBJECT_TOO_LARGE: &str = "object to decode was longer than maximum allowed size";

type BoxError = Box<dyn std::error::Error + Send + Sync>;

/// The error an answer held to its bounds ends in.
#[derive(Debug, thiserror::Error)]
pub enum Unbounded {
    #[error("the API server sent no answer for {0:?}")]
    NoHeaders(Duration),
    #[error("the API server's answer stopped for {0:?} before its end")]
    BodyStalled(Duration),
    #[error("the API server's answer is longer than {0} bytes")]
    TooLong(usize),
}

/// The layer for [`kube::client::ClientBuilder::with_layer`].
#[derive(Debug, Clone, Copy)]
pub struct BoundedAnswerLayer {
    headers: Duration,
    silence: Duration,
    answer: usize,
    event: usize,
}

impl Default for BoundedAnswerLayer {
    fn default() -> Self {
        BoundedAnswerLayer {
            headers: HEADERS_WAIT_MAX,
            silence: ANSWER_SILENCE_MAX,
            answer: MAX_ANSWER_BYTES,
            event: MAX_EVENT_BYTES,
        }
    }
}

impl<S> tower::Layer<S> for BoundedAnswerLayer {
    type Service = BoundedAnswers<S>;

    fn layer(&self, inner: S) -> BoundedAnswers<S> {
        BoundedAnswers { inner, bounds: *self }
    }
}

/// The service of [`BoundedAnswerLayer`].
#[derive(Debug, Clone)]
pub struct BoundedAnswers<S> {
    inner: S,
    bounds: BoundedAnswerLayer,
}

impl<S, B, RB> tower::Service<Request<B>> for BoundedAnswers<S>
where
    S: tower::Service<Request<B>, Response = Response<RB>>,
    S::Future: Send + 'static,
    S::Error: Into<BoxError>,
    RB: Body<Data = Bytes> + Send + Unpin + 'static,
    RB::Error: Into<BoxError>,
{
    type Response = Response<BoundedBody<RB>>;
    type Error = BoxError;
    type Future = Pin<Box<dyn Future<Output = Result<Self::Response, BoxError>> + Send>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), BoxError>> {
        self.inner.poll_ready(cx).map_err(Into::into)
    }

    fn call(&mut self, request: Request<B>) -> Self::Future {
        let upgrade = request.headers().contains_key(http::header::UPGRADE);
        let watch = super::watch::is_watch(request.uri());
        let bounds = self.bounds;
        let response = self.inner.call(request);
        Box::pin(async move {
            if upgrade {
                let response = response.await.map_err(Into::into)?;
                return Ok(response.map(|inner| BoundedBody::new(inner, Bound::None)));
            }
            let response = match tokio::time::timeout(bounds.headers, response).await {
                Ok(response) => response.map_err(Into::into)?,
                Err(_) => return Err(Unbounded::NoHeaders(bounds.headers).into()),
            };
            // The silence is timed from the headers on: the sleep is made here.
            let bound = if watch {
                Bound::Lines(Lines::new(bounds.event, bounds.silence))
            } else {
                Bound::Whole(Whole::new(bounds.answer, bounds.silence))
            };
            Ok(response.map(|inner| BoundedBody::new(inner, bound)))
        })
    }
}

/// What [`BoundedBody`] holds its body to.
enum Bound {
    /// An upgraded connection: nothing.
    None,
    /// An answer read whole.
    Whole(Whole),
    /// A watch stream: lines of at most a bound each, each a whole JSON value (or blank).
    Lines(Lines),
}

/// An answer read whole: at most `limit` bytes, and never silent for `silence`.
struct Whole {
    limit: usize,
    read: usize,
    silence: Duration,
    /// Reset at each part of the body.
    quiet: Pin<Box<tokio::time::Sleep>>,
}

impl Whole {
    fn new(limit: usize, silence: Duration) -> Whole {
        Whole { limit, read: 0, silence, quiet: Box::pin(tokio::time::sleep(silence)) }
    }
}

/// A body held to its bounds: a watch line by line, any other answer whole and never silent
/// long, an upgrade as it comes.
pub struct BoundedBody<B> {
    inner: B,
    bound: Bound,
    /// No more frames: the body ended, failed, or a watch was refused.
    ended: bool,
}

impl<B> BoundedBody<B> {
    fn new(inner: B, bound: Bound) -> Self {
        BoundedBody { inner, bound, ended: false }
    }
}

impl<B> Body for BoundedBody<B>
where
    B: Body<Data = Bytes> + Unpin,
    B::Error: Into<BoxError>,
{
    type Data = Bytes;
    type Error = BoxError;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, BoxError>>> {
        let this = &mut *self;
        loop {
            if this.ended {
                return Poll::Ready(None);
            }
            match &mut this.bound {
                Bound::Lines(lines) => {
                    if let Some(refusal) = lines.refusal.take() {
                        this.ended = true;
                        return Poll::Ready(Some(Ok(Frame::data(refusal))));
                    }
                }
                Bound::Whole(whole) => {
                    if this.inner.size_hint().lower() > whole.limit as u64 {
                        // Said up front (a Content-Length past the bound): not read at all.
                        this.ended = true;
                        return Poll::Ready(Some(Err(Unbounded::TooLong(whole.limit).into())));
                    }
                }
                Bound::None => {}
            }
            let polled = match Pin::new(&mut this.inner).poll_frame(cx) {
                Poll::Ready(polled) => polled,
                Poll::Pending => {
                    let given_up = match &mut this.bound {
                        Bound::Whole(whole) => whole
                            .quiet
                            .as_mut()
                            .poll(cx)
                            .is_ready()
                            .then(|| Err(Unbounded::BodyStalled(whole.silence).into())),
                        Bound::Lines(lines) => lines.stalled(cx).then(|| {
                            let message =
                                format!("a watch event stopped for {:?} before its end", lines.stall);
                            Ok(Frame::data(refusal(&message)))
                        }),
                        Bound::None => None,
                    };
                    if given_up.is_some() {
                        this.ended = true;
                        return Poll::Ready(given_up);
                    }
                    return Poll::Pending;
                }
            };
            if let Bound::Whole(whole) = &mut this.bound {
                let silence = whole.silence;
                whole.quiet.as_mut().reset(tokio::time::Instant::now() + silence);
            }
            let frame = match polled {
                None => {
                    this.ended = true;
                    // What is left of a watch stream that stopped mid-line goes to kube as it
                    // came: kube takes it for a stream cut off, which it is.
                    return match &mut this.bound {
                        Bound::Lines(lines) if !lines.partial.is_empty() => {
                            Poll::Ready(Some(Ok(Frame::data(lines.partial.split().freeze()))))
                        }
                        _ => Poll::Ready(None),
                    };
                }
                Some(Err(error)) => {
                    this.ended = true;
                    return Poll::Ready(Some(Err(error.into())));
                }
                Some(Ok(frame)) => frame,
            };
            let data = match frame.into_data() {
                Ok(data) => data,
                Err(frame) => return Poll::Ready(Some(Ok(frame))),
            };
            match &mut this.bound {
                Bound::None => return Poll::Ready(Some(Ok(Frame::data(data)))),
                Bound::Whole(whole) => {
                    whole.read = whole.read.saturating_add(data.len());
                    if whole.read > whole.limit {
                        this.ended = true;
                        return Poll::Ready(Some(Err(Unbounded::TooLong(whole.limit).into())));
                    }
                    return Poll::Ready(Some(Ok(Frame::data(data))));
                }
                Bound::Lines(lines) => {
                    let whole = lines.push(data);
                    if !whole.is_empty() {
                        return Poll::Ready(Some(Ok(Frame::data(whole))));
                    }
                }
            }
        }
    }

    fn is_end_stream(&self) -> bool {
        self.ended
    }

    fn size_hint(&self) -> SizeHint {
        match self.bound {
            Bound::None | Bound::Whole(_) => self.inner.size_hint(),
            // Lines are held back and refusals replace them: nothing can be promised.
            Bound::Lines(_) => SizeHint::default(),
        }
    }
}

/// A watch stream's lines, passed on whole once each is known to be within the bound and no
/// JSON value cut short.
struct Lines {
    limit: usize,
    /// The longest a line may stay unfinished with nothing more coming.
    stall: Duration,
    /// Since when the line has stayed unfinished with nothing more coming.
    quiet: Option<Pin<Box<tokio::time::Sleep>>>,
    /// The start of the line still coming.
    partial: BytesMut,
    /// The line that refuses the stream, due once the whole lines before it are passed on: a
    /// `Status` (no code) that says why, which kube hands on as an event it cannot read.
    refusal: Option<Bytes>,
}

impl Lines {
    fn new(limit: usize, stall: Duration) -> Lines {
        Lines { limit, stall, quiet: None, partial: BytesMut::new(), refusal: None }
    }

    /// Whether the line begun has stayed unfinished, nothing more coming, for [`Lines::stall`].
    /// A watch may rightly stay silent for minutes between events, but an API server writes
    /// each event whole: half of one and then silence is a stream that stalled (kube's watcher
    /// would wait up to its timeout and 5 s more, almost five minutes, seeing no pod change).
    fn stalled(&mut self, cx: &mut Context<'_>) -> bool {
        if self.partial.is_empty() {
            self.quiet = None;
            return false;
        }
        let stall = self.stall;
        let quiet = self.quiet.get_or_insert_with(|| Box::pin(tokio::time::sleep(stall)));
        quiet.as_mut().poll(cx).is_ready()
    }

    /// The whole lines `data` completes, up to the first refused (then [`Lines::refusal`] is
    /// set, and nothing after it is kept).
    fn push(&mut self, mut data: Bytes) -> Bytes {
        self.quiet = None;
        let mut whole = BytesMut::new();
        while let Some(end) = data.iter().position(|&b| b == b'\n') {
            if self.partial.len() + end > self.limit {
                self.refuse(OBJECT_TOO_LARGE.to_owned());
                return whole.freeze();
            }
            let head = data.split_to(end + 1);
            self.partial.extend_from_slice(&head);
            let line = self.partial.split();
            if let Some(why) = cut_short(line.strip_suffix(b"\n").unwrap_or(&line)) {
                self.refuse(format!("a watch event ends before its JSON does: {why}"));
                return whole.freeze();
            }
            whole.extend_from_slice(&line);
        }
        if self.partial.len() + data.len() > self.limit {
            self.refuse(OBJECT_TOO_LARGE.to_owned());
        } else {
            self.partial.extend_from_slice(&data);
        }
        whole.freeze()
    }

    fn refuse(&mut self, message: String) {
        self.partial = BytesMut::new();
        self.refusal = Some(refusal(&message));
    }
}

/// Why a non-blank line's JSON ends before the line does, if it does: what kube skips silently.
fn cut_short(line: &[u8]) -> Option<serde_json::Error> {
    if line.trim_ascii().is_empty() {
        return None;
    }
    serde_json::from_slice::<serde::de::IgnoredAny>(line).err().filter(serde_json::Error::is_eof)
}

/// A watch line kube reads as a `Status` of no code, saying `message`.
fn refusal(message: &str) -> Bytes {
    let status = serde_json::json!({
        "kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure", "message": message,
    });
    let mut line = status.to_string().into_bytes();
    line.push(b'\n');
    Bytes::from(line)
}

#[cfg(test)]
mod tests {
    use super::*;
    use futures::StreamExt as _;
    use http_body_util::{BodyExt, StreamBody};
    use tower::{Layer as _, Service as _, ServiceExt as _};

    type TestBody = http_body_util::combinators::UnsyncBoxBody<Bytes, std::convert::Infallible>;

    fn body(parts: Vec<&'static [u8]>) -> TestBody {
        let frames = futures::stream::iter(parts.into_iter().map(|p| Ok(Frame::data(Bytes::from_static(p)))));
        BodyExt::boxed_unsync(StreamBody::new(frames))
    }

    /// A body that sends `head`, then nothing for ever.
    fn stalling(head: &'static [u8]) -> TestBody {
        let parts = futures::stream::once(async move { Ok(Frame::data(Bytes::from_static(head))) })
            .chain(futures::stream::pending());
        BodyExt::boxed_unsync(StreamBody::new(parts))
    }

    fn lines(inner: TestBody, limit: usize) -> BoundedBody<TestBody> {
        BoundedBody::new(inner, Bound::Lines(Lines::new(limit, ANSWER_SILENCE_MAX)))
    }

    fn whole(inner: TestBody, limit: usize) -> BoundedBody<TestBody> {
        BoundedBody::new(inner, Bound::Whole(Whole::new(limit, ANSWER_SILENCE_MAX)))
    }

    async fn read_all(mut body: BoundedBody<TestBody>) -> Result<Vec<u8>, BoxError> {
        let mut read = Vec::new();
        while let Some(frame) = body.frame().await {
            read.extend_from_slice(&frame?.into_data().unwrap_or_default());
        }
        Ok(read)
    }

    fn status_message(line: &[u8]) -> String {
        let status: kube::core::Status = serde_json::from_slice(line).expect("a Status");
        assert_eq!(status.code, 0, "no code: the pod watch reads it as an event it cannot read");
        status.message
    }

    /// A server whose answers come after `delay`, with a body that stalls after its first part.
    fn server(
        delay: Duration,
    ) -> impl tower::Service<
        Request<()>,
        Response = Response<TestBody>,
        Error = std::convert::Infallible,
        Future: Send + 'static,
    > + Clone {
        tower::service_fn(move |_request: Request<()>| async move {
            tokio::time::sleep(delay).await;
            Ok::<_, std::convert::Infallible>(Response::new(stalling(b"{\"kind\":")))
        })
    }

    async fn call(
        service: &mut BoundedAnswers<
            impl tower::Service<
                Request<()>,
                Response = Response<TestBody>,
                Error = std::convert::Infallible,
                Future: Send + 'static,
            >,
        >,
        uri: &str,
        upgrade: bool,
    ) -> Result<Response<BoundedBody<TestBody>>, BoxError> {
        let mut request = Request::builder().uri(uri);
        if upgrade {
            request = request.header(http::header::UPGRADE, "websocket");
        }
        service.ready().await?;
        service.call(request.body(()).expect("a request")).await
    }

    #[tokio::test(start_paused = true)]
    async fn an_answer_without_headers_is_given_up_after_the_limit() {
        let mut service = BoundedAnswerLayer::default().layer(server(Duration::from_secs(3600)));
        let started = tokio::time::Instant::now();
        let err = call(&mut service, "/api/v1/pods", false).await.err().expect("given up");
        assert_eq!(started.elapsed(), HEADERS_WAIT_MAX);
        assert_eq!(err.to_string(), "the API server sent no answer for 75s");
        // A watch's headers are bounded too.
        let err = call(&mut service, "/api/v1/pods?watch=true", false).await.err().expect("given up");
        assert!(matches!(err.downcast_ref::<Unbounded>(), Some(Unbounded::NoHeaders(_))));
    }

    /// A live API server may take its whole request timeout (60 s by default) before it answers,
    /// a list of an overloaded server; it is waited for, as client-go waits.
    #[tokio::test(start_paused = true)]
    async fn headers_within_the_api_servers_own_timeout_are_waited_for() {
        let mut service = BoundedAnswerLayer::default().layer(server(Duration::from_secs(61)));
        let answer = call(&mut service, "/api/v1/pods", false).await;
        assert!(answer.is_ok(), "headers after 61 s are an answer: {:?}", answer.err());
    }

    #[tokio::test(start_paused = true)]
    async fn a_body_that_stops_fails_after_the_limit_but_a_watch_or_an_upgrade_does_not() {
        let mut service = BoundedAnswerLayer::default().layer(server(Duration::from_secs(1)));
        let mut body =
            call(&mut service, "/api/v1/pods?limit=500", false).await.expect("headers").into_body();
        let first = body.frame().await.expect("a part").expect("data");
        assert_eq!(first.into_data().expect("data"), "{\"kind\":");
        let started = tokio::time::Instant::now();
        let err = body.frame().await.expect("an end").expect_err("given up");
        assert_eq!(started.elapsed(), ANSWER_SILENCE_MAX);
        assert_eq!(err.to_string(), "the API server's answer stopped for 30s before its end");

        // An upgrade is left to its caller's bound.
        let mut body =
            call(&mut service, "/api/v1/namespaces/d/pods/p/exec", true).await.expect("headers").into_body();
        body.frame().await.expect("a part").expect("data");
        let quiet = tokio::time::timeout(Duration::from_secs(3600), body.frame()).await;
        assert!(quiet.is_err(), "an upgrade: left to its own bound");
        // A watch is not failed for its silence: the event it left unfinished is refused as a
        // line of its stream (silent between whole lines, it is left alone: below).
        let mut body =
            call(&mut service, "/api/v1/pods?watch=true", false).await.expect("headers").into_body();
        let started = tokio::time::Instant::now();
        let refusal = body.frame().await.expect("a frame").expect("data").into_data().expect("data");
        assert_eq!(started.elapsed(), ANSWER_SILENCE_MAX);
        assert_eq!(status_message(&refusal), "a watch event stopped for 30s before its end");
    }

    /// Each part of the body starts the limit again: a long answer that keeps coming is read whole.
    #[tokio::test(start_paused = true)]
    async fn a_slow_body_that_keeps_coming_is_read_whole() {
        let parts = futures::stream::iter(0..5).then(|i| async move {
            tokio::time::sleep(ANSWER_SILENCE_MAX - Duration::from_secs(1)).await;
            Ok::<_, std::convert::Infallible>(Frame::data(Bytes::from(format!("{i}"))))
        });
        let body: TestBody = BodyExt::boxed_unsync(StreamBody::new(parts));
        let read = read_all(whole(body, MAX_ANSWER_BYTES)).await.expect("no stall");
        assert_eq!(read, b"01234");
    }

    /// Lines split anywhere across frames come out whole and unchanged; blank lines (kube skips
    /// them) and a last line cut off by the stream's end pass as they came.
    #[tokio::test]
    async fn whole_lines_pass_unchanged_whatever_the_frames() {
        let parts: Vec<&'static [u8]> =
            vec![b"{\"type\":\"ADD", b"ED\",\"object\":{}}\n\n{\"a\"", b":1}\n{\"type\":\"MOD"];
        let read = read_all(lines(body(parts), 1024)).await.expect("no error");
        assert_eq!(read, b"{\"type\":\"ADDED\",\"object\":{}}\n\n{\"a\":1}\n{\"type\":\"MOD");
    }

    /// A line whose JSON ends before the line does is refused, with what was wrong, and
    /// nothing after it is read.
    #[tokio::test]
    async fn a_line_whose_json_is_cut_short_is_refused() {
        let parts: Vec<&'static [u8]> = vec![
            b"{\"type\":\"ADDED\",\"object\":{}}\n{\"type\":\"ADDED\",\"object\":{\"metadata\":\n",
            b"{}\n",
        ];
        let read = read_all(lines(body(parts), 1024)).await.expect("no error");
        let (first, refusal) = read.split_at(read.iter().position(|&b| b == b'\n').expect("a line") + 1);
        assert_eq!(first, b"{\"type\":\"ADDED\",\"object\":{}}\n");
        assert!(refusal.ends_with(b"}\n") && refusal.iter().filter(|&&b| b == b'\n').count() == 1);
        assert_eq!(
            status_message(refusal),
            "a watch event ends before its JSON does: EOF while parsing a value at line 1 column 37"
        );
    }

    /// A line longer than the bound is refused in client-go's words as soon as it passes the
    /// bound, complete or not: a line without end is never held past it.
    #[tokio::test]
    async fn a_line_past_the_bound_is_refused_in_client_gos_words() {
        let endless = futures::stream::repeat_with(|| Ok(Frame::data(Bytes::from_static(b"xxxxxxxx"))));
        let endless: TestBody = BodyExt::boxed_unsync(StreamBody::new(endless));
        let read = read_all(lines(endless, 100)).await.expect("no error");
        assert_eq!(status_message(&read), OBJECT_TOO_LARGE);

        let read = read_all(lines(body(vec![b"{\"a\":\"0123456789\"}\n"]), 10)).await.expect("no error");
        assert_eq!(status_message(&read), OBJECT_TOO_LARGE);
        let read = read_all(lines(body(vec![b"{\"a\":\"01\"}\n"]), 10)).await.expect("no error");
        assert_eq!(read, b"{\"a\":\"01\"}\n", "10 bytes and its newline: within");
    }

    /// A line begun and then left unfinished, nothing more coming, is refused after the silence
    /// bound (30 s); a watch silent between whole lines is left to its own bound.
    #[tokio::test(start_paused = true)]
    async fn a_line_left_unfinished_is_refused_after_the_silence_bound() {
        let started = tokio::time::Instant::now();
        let mut half = lines(stalling(b"{\"type\":\"ADDED\",\"object\":{\"meta"), 1024);
        let refusal = half.frame().await.expect("a frame").expect("data").into_data().expect("data");
        assert_eq!(started.elapsed(), ANSWER_SILENCE_MAX);
        assert_eq!(status_message(&refusal), "a watch event stopped for 30s before its end");
        assert!(half.frame().await.is_none(), "nothing after the refusal");

        let mut whole = lines(stalling(b"{\"type\":\"BOOKMARK\",\"object\":{}}\n"), 1024);
        whole.frame().await.expect("the line").expect("data");
        let quiet = tokio::time::timeout(Duration::from_secs(3600), whole.frame()).await;
        assert!(quiet.is_err(), "silent between lines: left alone");
    }

    /// An answer that is no watch fails once it passes its bound, so one without end is never
    /// held whole; one within it is read whole.
    #[tokio::test]
    async fn an_answer_past_the_bound_fails() {
        let endless = futures::stream::repeat_with(|| Ok(Frame::data(Bytes::from_static(b"xxxxxxxx"))));
        let error =
            read_all(whole(BodyExt::boxed_unsync(StreamBody::new(endless)), 100)).await.expect_err("refused");
        assert_eq!(error.to_string(), "the API server's answer is longer than 100 bytes");
        let read = read_all(whole(body(vec![&[b'x'; 60], &[b'y'; 40]]), 100)).await.expect("within");
        assert_eq!(read.len(), 100);
        // Said by its length: refused before a byte is read.
        let sized: TestBody = BodyExt::boxed_unsync(http_body_util::Full::new(Bytes::from_static(&[0; 101])));
        assert!(read_all(whole(sized, 100)).await.is_err());
    }
}
