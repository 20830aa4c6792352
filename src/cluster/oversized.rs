//! Bounds what one API answer can make the agent hold, and keeps a watch event that is cut
//! short from being lost without a word.
//!
//! kube reads an answer whole before it decodes it, and a watch stream line by line with no
//! bound on a line, so a server (or a proxy) that sends a body without end, or a watch line
//! without its newline, grew the agent's memory until the node killed it; the silence bound
//! ([`super::stalled`]) never fired, as bytes kept coming (a hostile test). client-go refuses a
//! watch event longer than 16 MiB (`object to decode was longer than maximum allowed size`); so
//! does this layer, and it refuses an answer that is no watch past [`MAX_ANSWER_BYTES`], where
//! client-go sets no bound (docs/reliability.md, "An API server that sends without end").
//!
//! kube also skips, without a word, a watch line whose JSON ends before the line does (it takes
//! it for the last line of a stream cut off, which it cannot tell apart), so the event it was
//! is lost, and with it the pod it was about until the pod changes again. Such a line here
//! becomes a `Status` with no code, as does an event too long: kube hands it to the pod watch
//! as an event it cannot read, and the pod watch lists again (`cluster::watch`), said once at
//! warning. So does a watch line begun and then left unfinished, nothing more coming, for
//! [`ANSWER_SILENCE_MAX`]: an API server writes each event whole. A request that upgrades its
//! connection (`pods/exec`) is left alone.

use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::{Bytes, BytesMut};
use http::{Request, Response};
use http_body::{Body, Frame, SizeHint};

use super::stalled::ANSWER_SILENCE_MAX;

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

/// The error an answer past [`MAX_ANSWER_BYTES`] ends in.
#[derive(Debug, thiserror::Error)]
pub enum Oversized {
    #[error("the API server's answer is longer than {0} bytes")]
    Answer(usize),
}

/// The layer for [`kube::client::ClientBuilder::with_layer`].
#[derive(Debug, Clone, Copy)]
pub struct OversizedAnswerLayer {
    answer: usize,
    event: usize,
    stall: Duration,
}

impl Default for OversizedAnswerLayer {
    fn default() -> Self {
        OversizedAnswerLayer { answer: MAX_ANSWER_BYTES, event: MAX_EVENT_BYTES, stall: ANSWER_SILENCE_MAX }
    }
}

impl<S> tower::Layer<S> for OversizedAnswerLayer {
    type Service = OversizedAnswers<S>;

    fn layer(&self, inner: S) -> OversizedAnswers<S> {
        OversizedAnswers { inner, answer: self.answer, event: self.event, stall: self.stall }
    }
}

/// The service of [`OversizedAnswerLayer`].
#[derive(Debug, Clone)]
pub struct OversizedAnswers<S> {
    inner: S,
    answer: usize,
    event: usize,
    stall: Duration,
}

impl<S, B, RB> tower::Service<Request<B>> for OversizedAnswers<S>
where
    S: tower::Service<Request<B>, Response = Response<RB>>,
    S::Future: Send + 'static,
    S::Error: Into<BoxError>,
    RB: Body<Data = Bytes> + Send + Unpin + 'static,
    RB::Error: Into<BoxError>,
{
    type Response = Response<SizeBounded<RB>>;
    type Error = BoxError;
    type Future = Pin<Box<dyn Future<Output = Result<Self::Response, BoxError>> + Send>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), BoxError>> {
        self.inner.poll_ready(cx).map_err(Into::into)
    }

    fn call(&mut self, request: Request<B>) -> Self::Future {
        let bound = if request.headers().contains_key(http::header::UPGRADE) {
            Bound::None
        } else if super::watch::is_watch(request.uri()) {
            Bound::Lines(Lines::new(self.event, self.stall))
        } else {
            Bound::Whole { limit: self.answer, read: 0 }
        };
        let response = self.inner.call(request);
        Box::pin(async move {
            let response = response.await.map_err(Into::into)?;
            Ok(response.map(|inner| SizeBounded { inner, bound, ended: false }))
        })
    }
}

/// What [`SizeBounded`] holds its body to.
enum Bound {
    None,
    /// An answer read whole: at most `limit` bytes.
    Whole {
        limit: usize,
        read: usize,
    },
    /// A watch stream: lines of at most `limit` bytes, each a whole JSON value (or blank).
    Lines(Lines),
}

/// A body held to its bound: a watch line by line, any other answer whole (unbounded: an upgrade).
pub struct SizeBounded<B> {
    inner: B,
    bound: Bound,
    /// No more frames: the body ended, failed, or a watch was refused.
    ended: bool,
}

impl<B> Body for SizeBounded<B>
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
            if let Bound::Lines(lines) = &mut this.bound
                && let Some(refusal) = lines.refusal.take()
            {
                this.ended = true;
                return Poll::Ready(Some(Ok(Frame::data(refusal))));
            }
            if let Bound::Whole { limit, .. } = this.bound
                && this.inner.size_hint().lower() > limit as u64
            {
                // Said up front (a Content-Length past the bound): not read at all.
                this.ended = true;
                return Poll::Ready(Some(Err(Oversized::Answer(limit).into())));
            }
            let polled = match Pin::new(&mut this.inner).poll_frame(cx) {
                Poll::Ready(polled) => polled,
                Poll::Pending => {
                    if let Bound::Lines(lines) = &mut this.bound
                        && lines.stalled(cx)
                    {
                        this.ended = true;
                        let message = format!("a watch event stopped for {:?} before its end", lines.stall);
                        return Poll::Ready(Some(Ok(Frame::data(refusal(&message)))));
                    }
                    return Poll::Pending;
                }
            };
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
                Bound::Whole { limit, read } => {
                    *read = read.saturating_add(data.len());
                    if *read > *limit {
                        this.ended = true;
                        return Poll::Ready(Some(Err(Oversized::Answer(*limit).into())));
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
            Bound::None | Bound::Whole { .. } => self.inner.size_hint(),
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
    use http_body_util::{BodyExt, StreamBody};

    type TestBody = http_body_util::combinators::UnsyncBoxBody<Bytes, std::convert::Infallible>;

    fn body(parts: Vec<&'static [u8]>) -> TestBody {
        let frames = futures::stream::iter(parts.into_iter().map(|p| Ok(Frame::data(Bytes::from_static(p)))));
        BodyExt::boxed_unsync(StreamBody::new(frames))
    }

    fn lines(inner: TestBody, limit: usize) -> SizeBounded<TestBody> {
        SizeBounded { inner, bound: Bound::Lines(Lines::new(limit, ANSWER_SILENCE_MAX)), ended: false }
    }

    async fn read_all(mut body: SizeBounded<TestBody>) -> Result<Vec<u8>, BoxError> {
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
        use futures::StreamExt as _;
        let stalling = |head: &'static [u8]| -> TestBody {
            let parts = futures::stream::once(async move { Ok(Frame::data(Bytes::from_static(head))) })
                .chain(futures::stream::pending());
            BodyExt::boxed_unsync(StreamBody::new(parts))
        };
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
        let whole = |inner| SizeBounded { inner, bound: Bound::Whole { limit: 100, read: 0 }, ended: false };
        let endless = futures::stream::repeat_with(|| Ok(Frame::data(Bytes::from_static(b"xxxxxxxx"))));
        let error =
            read_all(whole(BodyExt::boxed_unsync(StreamBody::new(endless)))).await.expect_err("refused");
        assert_eq!(error.to_string(), "the API server's answer is longer than 100 bytes");
        let read = read_all(whole(body(vec![&[b'x'; 60], &[b'y'; 40]]))).await.expect("within");
        assert_eq!(read.len(), 100);
        // Said by its length: refused before a byte is read.
        let sized: TestBody = BodyExt::boxed_unsync(http_body_util::Full::new(Bytes::from_static(&[0; 101])));
        assert!(read_all(whole(sized)).await.is_err());
    }
}
