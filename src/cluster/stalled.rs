//! Gives up an API answer that stops coming: no response headers for [`HEADERS_WAIT_MAX`], or
//! (but for a watch, whose stream may rightly stay quiet for minutes) no byte of the body for
//! [`ANSWER_SILENCE_MAX`].
//!
//! kube's client sets no read timeout by default (kube 5: "watch streams are protected by a
//! watcher-level idle timeout instead"), and its watcher bounds only the events of an open watch:
//! a pod list answered with its headers and half a body, then nothing (a stalled server, a proxy,
//! a connection whose peer went away without a reset), was waited for for ever, and the agent
//! never saw a pod again nor said anything (a hostile test). client-go's connections to an API
//! server are HTTP/2 with a health check that drops a connection silent for 30 s and unanswered
//! to a ping for 15 s more; this is the same order of wait for a client that speaks HTTP/1.1,
//! once an answer has begun. Before its headers, a live API server may rightly take up to its
//! own request timeout (`--request-timeout`, 60 s by default: a list of an overloaded server),
//! then answers 504 itself; client-go waits for it, so the wait for headers is longer than that.
//! A request that upgrades its connection (`pods/exec`) is left alone: the exec probe bounds it.
//! A failed answer is a transport error to the caller: the pod watch lists again on its
//! back-off, a status write is retried on the syncer's.

use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::Bytes;
use http::{Request, Response};
use http_body::{Body, Frame, SizeHint};

/// The longest an answer's body may be silent between two of its parts.
pub const ANSWER_SILENCE_MAX: Duration = Duration::from_secs(30);

/// The longest the headers of an answer may take: the API server's default request timeout
/// (60 s), after which a live server answers 504 itself, and 15 s more (client-go's ping
/// timeout), so that a slow but live server is never given up before it gives up itself.
pub const HEADERS_WAIT_MAX: Duration = Duration::from_secs(75);

type BoxError = Box<dyn std::error::Error + Send + Sync>;

/// The error an answer that stopped coming ends in.
#[derive(Debug, thiserror::Error)]
pub enum Stalled {
    #[error("the API server sent no answer for {0:?}")]
    NoHeaders(Duration),
    #[error("the API server's answer stopped for {0:?} before its end")]
    BodyStalled(Duration),
}

/// The layer for [`kube::client::ClientBuilder::with_layer`].
#[derive(Debug, Clone, Copy)]
pub struct StalledAnswerLayer {
    headers: Duration,
    body: Duration,
}

impl Default for StalledAnswerLayer {
    fn default() -> Self {
        StalledAnswerLayer { headers: HEADERS_WAIT_MAX, body: ANSWER_SILENCE_MAX }
    }
}

impl<S> tower::Layer<S> for StalledAnswerLayer {
    type Service = StalledAnswers<S>;

    fn layer(&self, inner: S) -> StalledAnswers<S> {
        StalledAnswers { inner, headers: self.headers, body: self.body }
    }
}

/// The service of [`StalledAnswerLayer`].
#[derive(Debug, Clone)]
pub struct StalledAnswers<S> {
    inner: S,
    headers: Duration,
    body: Duration,
}

impl<S, B, RB> tower::Service<Request<B>> for StalledAnswers<S>
where
    S: tower::Service<Request<B>, Response = Response<RB>>,
    S::Future: Send + 'static,
    S::Error: Into<BoxError>,
    RB: Body<Data = Bytes> + Send + Unpin + 'static,
    RB::Error: Into<BoxError>,
{
    type Response = Response<SilenceBounded<RB>>;
    type Error = BoxError;
    type Future = Pin<Box<dyn Future<Output = Result<Self::Response, BoxError>> + Send>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), BoxError>> {
        self.inner.poll_ready(cx).map_err(Into::into)
    }

    fn call(&mut self, request: Request<B>) -> Self::Future {
        let upgrade = request.headers().contains_key(http::header::UPGRADE);
        let watch = super::watch::is_watch(request.uri());
        let (headers, body) = (self.headers, self.body);
        let response = self.inner.call(request);
        Box::pin(async move {
            if upgrade {
                return response
                    .await
                    .map(|r| r.map(|body| SilenceBounded::new(body, None)))
                    .map_err(Into::into);
            }
            let response = match tokio::time::timeout(headers, response).await {
                Ok(response) => response.map_err(Into::into)?,
                Err(_) => return Err(Stalled::NoHeaders(headers).into()),
            };
            let body_limit = (!watch).then_some(body);
            Ok(response.map(|body| SilenceBounded::new(body, body_limit)))
        })
    }
}

/// A body that fails once no part of it came for its limit (none: never).
pub struct SilenceBounded<B> {
    inner: B,
    limit: Option<Duration>,
    quiet_since: Option<Pin<Box<tokio::time::Sleep>>>,
}

impl<B> SilenceBounded<B> {
    fn new(inner: B, limit: Option<Duration>) -> Self {
        let quiet_since = limit.map(|limit| Box::pin(tokio::time::sleep(limit)));
        SilenceBounded { inner, limit, quiet_since }
    }
}

impl<B> Body for SilenceBounded<B>
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
        match Pin::new(&mut this.inner).poll_frame(cx) {
            Poll::Ready(frame) => {
                if let (Some(limit), Some(sleep)) = (this.limit, this.quiet_since.as_mut()) {
                    sleep.as_mut().reset(tokio::time::Instant::now() + limit);
                }
                Poll::Ready(frame.map(|f| f.map_err(Into::into)))
            }
            Poll::Pending => {
                if let (Some(limit), Some(sleep)) = (this.limit, this.quiet_since.as_mut())
                    && sleep.as_mut().poll(cx).is_ready()
                {
                    return Poll::Ready(Some(Err(Stalled::BodyStalled(limit).into())));
                }
                Poll::Pending
            }
        }
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use http_body_util::{BodyExt as _, StreamBody};
    use tower::{Layer as _, Service as _, ServiceExt as _};

    type TestBody = http_body_util::combinators::UnsyncBoxBody<Bytes, std::convert::Infallible>;

    /// A body that sends `head`, then nothing for ever.
    fn stalling(head: &'static [u8]) -> TestBody {
        let parts = futures::stream::once(async move { Ok(Frame::data(Bytes::from_static(head))) })
            .chain(futures::stream::pending());
        http_body_util::BodyExt::boxed_unsync(StreamBody::new(parts))
    }

    use futures::StreamExt as _;

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
        service: &mut StalledAnswers<
            impl tower::Service<
                Request<()>,
                Response = Response<TestBody>,
                Error = std::convert::Infallible,
                Future: Send + 'static,
            >,
        >,
        uri: &str,
        upgrade: bool,
    ) -> Result<Response<SilenceBounded<TestBody>>, BoxError> {
        let mut request = Request::builder().uri(uri);
        if upgrade {
            request = request.header(http::header::UPGRADE, "websocket");
        }
        service.ready().await?;
        service.call(request.body(()).expect("a request")).await
    }

    #[tokio::test(start_paused = true)]
    async fn an_answer_without_headers_is_given_up_after_the_limit() {
        let mut service = StalledAnswerLayer::default().layer(server(Duration::from_secs(3600)));
        let started = tokio::time::Instant::now();
        let err = call(&mut service, "/api/v1/pods", false).await.err().expect("given up");
        assert_eq!(started.elapsed(), HEADERS_WAIT_MAX);
        assert_eq!(err.to_string(), "the API server sent no answer for 75s");
        // A watch's headers are bounded too.
        let err = call(&mut service, "/api/v1/pods?watch=true", false).await.err().expect("given up");
        assert!(err.is::<Stalled>());
    }

    /// A live API server may take its whole request timeout (60 s by default) before it answers,
    /// a list of an overloaded server; it is waited for, as client-go waits.
    #[tokio::test(start_paused = true)]
    async fn headers_within_the_api_servers_own_timeout_are_waited_for() {
        let mut service = StalledAnswerLayer::default().layer(server(Duration::from_secs(61)));
        let answer = call(&mut service, "/api/v1/pods", false).await;
        assert!(answer.is_ok(), "headers after 61 s are an answer: {:?}", answer.err());
    }

    #[tokio::test(start_paused = true)]
    async fn a_body_that_stops_fails_after_the_limit_but_a_watch_or_an_upgrade_does_not() {
        let mut service = StalledAnswerLayer::default().layer(server(Duration::from_secs(1)));
        let mut body =
            call(&mut service, "/api/v1/pods?limit=500", false).await.expect("headers").into_body();
        let first = body.frame().await.expect("a part").expect("data");
        assert_eq!(first.into_data().expect("data"), "{\"kind\":");
        let started = tokio::time::Instant::now();
        let err = body.frame().await.expect("an end").expect_err("given up");
        assert_eq!(started.elapsed(), ANSWER_SILENCE_MAX);
        assert_eq!(err.to_string(), "the API server's answer stopped for 30s before its end");

        for (uri, upgrade) in [("/api/v1/pods?watch=true", false), ("/api/v1/namespaces/d/pods/p/exec", true)]
        {
            let mut body = call(&mut service, uri, upgrade).await.expect("headers").into_body();
            body.frame().await.expect("a part").expect("data");
            let quiet = tokio::time::timeout(Duration::from_secs(3600), body.frame()).await;
            assert!(quiet.is_err(), "{uri}: left to its own bound");
        }
    }

    /// Each part of the body starts the limit again: a long answer that keeps coming is read whole.
    #[tokio::test(start_paused = true)]
    async fn a_slow_body_that_keeps_coming_is_read_whole() {
        let parts = futures::stream::iter(0..5).then(|i| async move {
            tokio::time::sleep(ANSWER_SILENCE_MAX - Duration::from_secs(1)).await;
            Ok::<_, std::convert::Infallible>(Frame::data(Bytes::from(format!("{i}"))))
        });
        let body: TestBody = http_body_util::BodyExt::boxed_unsync(StreamBody::new(parts));
        let mut bounded = SilenceBounded::new(body, Some(ANSWER_SILENCE_MAX));
        let mut read = Vec::new();
        while let Some(frame) = bounded.frame().await {
            read.extend_from_slice(&frame.expect("no stall").into_data().expect("data"));
        }
        assert_eq!(read, b"01234");
    }
}
