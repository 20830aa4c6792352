//! One HTTP/2 round trip, on a TLS connection whose server picked `h2` from the probe's ALPN
//! offer (`h2, http/1.1`, as the kubelet's transport offers: docs/http-probe.md, "HTTP/2 over
//! TLS"). The request is the one the HTTP/1.1 path writes, translated as Go's HTTP/2 transport
//! translates a request (`httpcommon.EncodeHeaders`): `Host` becomes `:authority`, names are
//! lower-cased, connection-specific headers are dropped (`Connection: close` among them), a
//! `Cookie` is split at its semicolons. The answer is read with the HTTP/1.1 path's limits: a
//! head of at most [`MAX_HEAD_BYTES`] (sent to the server as `SETTINGS_MAX_HEADER_LIST_SIZE`),
//! at most the caller's cap of the body.
//!
//! The `h2` crate speaks the protocol (already in the tree under tonic); its connection is
//! driven by the probe's own task while the probe waits for the answer and reads its body, so
//! nothing is spawned here either. Failures read as Go's HTTP/2 transport words them (`stream
//! error: stream ID 1; INTERNAL_ERROR; received from peer`), and say whether Go's transport
//! would send the request again on a new connection (the server did not process it), which the
//! caller then does.

use std::borrow::Cow;
use std::future::{Future, poll_fn};
use std::pin::{Pin, pin};

use bytes::Bytes;
use h2::RecvStream;
use h2::client::Connection;
use http::header::{HeaderName, HeaderValue};
use http::{Method, Request, Uri};
use tokio::io::{AsyncRead, AsyncWrite};

use super::errors::go_io_text;
use super::wire::MAX_HEAD_BYTES;
use crate::gofmt::go_quote;

/// The one stream a probe's connection carries (a new connection per request, as the
/// kubelet's transport with keep-alive off makes): Go's error texts name it.
const STREAM_ID: u32 = 1;

/// The answer's head, with its body still to be read and the connection that carries it.
pub(super) struct Response<T> {
    /// The status code.
    pub(super) status: u16,
    /// The first `location` value, kept only for a redirect status (301, 302, 303, 307, 308).
    pub(super) location: Option<String>,
    /// Go's `Response.ContentLength`: one parsable `content-length`, else 0 for a head that
    /// ended the stream, else -1 (unknown).
    content_length: i64,
    body: RecvStream,
    conn: Driver<T>,
}

/// The connection's own future, polled beside whatever the probe waits for, until it ends.
struct Driver<T> {
    conn: Option<Pin<Box<Connection<T, Bytes>>>>,
}

impl<T: AsyncRead + AsyncWrite + Unpin> Driver<T> {
    /// Runs `work` while driving the connection (which reads the frames `work` waits for). A
    /// connection that ends fails the streams it carried, so `work` ends too.
    async fn drive<F: Future>(&mut self, work: F) -> F::Output {
        let mut work = pin!(work);
        poll_fn(|cx| {
            if let Some(conn) = self.conn.as_mut()
                && conn.as_mut().poll(cx).is_ready()
            {
                self.conn = None;
            }
            work.as_mut().poll(cx)
        })
        .await
    }
}

/// Why a round trip failed: Go's words for it (without the `Get "<url>": ` that the caller
/// adds), and whether Go's transport sends the request again on a new connection because the
/// server said it did not process it (the probe's GET has no body, so Go always may).
#[derive(Debug)]
pub(super) struct Failure {
    pub(super) text: String,
    pub(super) unprocessed: bool,
}

impl From<String> for Failure {
    fn from(text: String) -> Self {
        Failure { text, unprocessed: false }
    }
}

impl Failure {
    /// An h2 error before the answer's head, as Go's transport takes it (`canRetryError`):
    /// the server did not process the request when it reset the stream with `REFUSED_STREAM`,
    /// or with `PROTOCOL_ERROR` (Go retries that one too, golang/go#47635); when a GOAWAY left
    /// the stream out with `NO_ERROR` (for a connection's first stream Go takes another code as
    /// the server's word that a new connection would fare no better); and when a GOAWAY came
    /// before the request was sent (`sent` false), whatever its code, as the connection then
    /// takes no new request.
    fn of(error: &h2::Error, sent: bool) -> Failure {
        let reason = error.reason();
        let unprocessed = if error.is_reset() {
            reason == Some(h2::Reason::REFUSED_STREAM)
                || (error.is_remote() && reason == Some(h2::Reason::PROTOCOL_ERROR))
        } else {
            error.is_go_away() && error.is_remote() && (!sent || reason == Some(h2::Reason::NO_ERROR))
        };
        Failure { text: h2_error_text(error), unprocessed }
    }
}

/// Sends `head` (the request head the HTTP/1.1 path would write) as an HTTP/2 request on `io`
/// and reads the answer's head.
pub(super) async fn round_trip<T>(io: T, head: &[u8]) -> Result<Response<T>, Failure>
where
    T: AsyncRead + AsyncWrite + Unpin,
{
    let request = h2_request(head)?;
    let (send, conn) = h2::client::Builder::new()
        .max_header_list_size(u32::try_from(MAX_HEAD_BYTES).unwrap_or(u32::MAX))
        .enable_push(false)
        .handshake::<T, Bytes>(io)
        .await
        .map_err(|e| h2_error_text(&e))?;
    let mut conn = Driver { conn: Some(Box::pin(conn)) };
    let answer = conn
        .drive(async move {
            let mut send = send.ready().await.map_err(|e| Failure::of(&e, false))?;
            let (response, _) = send.send_request(request, true).map_err(|e| Failure::of(&e, false))?;
            response.await.map_err(|e| Failure::of(&e, true))
        })
        .await?;
    let status = answer.status().as_u16();
    let location = matches!(status, 301 | 302 | 303 | 307 | 308)
        .then(|| answer.headers().get(http::header::LOCATION))
        .flatten()
        .map(|value| String::from_utf8_lossy(value.as_bytes()).into_owned());
    let (head, body) = answer.into_parts();
    let mut lengths = head.headers.get_all(http::header::CONTENT_LENGTH).iter();
    let content_length = match (lengths.next(), lengths.next()) {
        (Some(one), None) => std::str::from_utf8(one.as_bytes())
            .ok()
            .filter(|v| !v.is_empty() && v.bytes().all(|b| b.is_ascii_digit()))
            .and_then(|v| v.parse::<i64>().ok())
            .unwrap_or(-1),
        (None, _) if body.is_end_stream() => 0,
        _ => -1,
    };
    Ok(Response { status, location, content_length, body, conn })
}

impl<T: AsyncRead + AsyncWrite + Unpin> Response<T> {
    /// Whether Go's client reads some of this body before it follows the redirect it carries:
    /// when its length is unknown or at most 2 KiB.
    pub(super) fn body_is_slurped(&self) -> bool {
        self.content_length <= 2 << 10
    }

    /// Reads the body up to `cap` bytes and no further (upstream `ReadAtMost`); dropping the
    /// stream past the cap resets it and closes the connection.
    pub(super) async fn read_body(self, cap: usize) -> Result<Vec<u8>, String> {
        let Response { mut body, mut conn, .. } = self;
        conn.drive(async move {
            let mut read = Vec::new();
            while read.len() < cap {
                match body.data().await {
                    None => break,
                    Some(Ok(chunk)) => {
                        // Gives the window back, so that a server sending more than one
                        // window's worth is not held up before the cap.
                        let _ = body.flow_control().release_capacity(chunk.len());
                        let take = chunk.len().min(cap - read.len());
                        read.extend_from_slice(&chunk[..take]);
                    }
                    Some(Err(e)) => return Err(h2_error_text(&e)),
                }
            }
            Ok(read)
        })
        .await
    }
}

/// The HTTP/2 request Go's transport makes of the request the HTTP/1.1 path writes (`head`:
/// request line, headers in Go's order and canonical case, blank line), as
/// `httpcommon.EncodeHeaders` does: its checks of `Upgrade` and `Connection` first, then the
/// host, which becomes `:authority`; `host`, `connection`, `proxy-connection`, `upgrade` and
/// `keep-alive` are not sent, and a `cookie` goes as one field per cookie.
fn h2_request(head: &[u8]) -> Result<Request<()>, String> {
    let lines = head.iter().filter(|b| **b == b'\n').count();
    let mut fields = vec![httparse::EMPTY_HEADER; lines];
    let mut parsed = httparse::Request::new(&mut fields);
    // The head is ours, written by `build_request`: it always reads back.
    if !matches!(parsed.parse(head), Ok(httparse::Status::Complete(_))) {
        return Err("net/http: the request head cannot be sent over HTTP/2".to_owned());
    }
    let path = parsed.path.unwrap_or("/");
    let value = |v: &[u8]| String::from_utf8_lossy(v).into_owned();
    let headers: &[httparse::Header<'_>] = parsed.headers;
    let named = |name: &'static str| headers.iter().filter(move |h| h.name.eq_ignore_ascii_case(name));
    let upgrade: Vec<String> = named("Upgrade").map(|h| value(h.value)).collect();
    if upgrade.first().is_some_and(|v| !v.is_empty() && v != "chunked") {
        return Err(format!("http2: invalid Upgrade request header: {}", go_quote_list(&upgrade)));
    }
    // The HTTP/1.1 head ends its `Connection` lines with the transport's `close` unless a
    // supplied one already asks to close; that one is not part of the request's headers.
    let mut connection: Vec<String> = named("Connection").map(|h| value(h.value)).collect();
    let asks_close = |v: &String| v.split(',').any(|t| t.trim().eq_ignore_ascii_case("close"));
    if connection.last().is_some_and(|v| v == "close")
        && !connection[..connection.len() - 1].iter().any(asks_close)
    {
        connection.pop();
    }
    let allowed =
        |v: &String| v.is_empty() || v.eq_ignore_ascii_case("close") || v.eq_ignore_ascii_case("keep-alive");
    if connection.len() > 1 || connection.first().is_some_and(|v| !allowed(v)) {
        return Err(format!("http2: invalid Connection request header: {}", go_quote_list(&connection)));
    }
    // An empty Host is one Go's HTTP/1.1 writer would not write (docs/http-probe.md); its
    // HTTP/2 transport refuses it instead.
    let host = named("Host").next().map(|h| h.value).unwrap_or_default();
    let uri = match std::str::from_utf8(host) {
        Ok(host) if !host.is_empty() => {
            Uri::builder().scheme("https").authority(host).path_and_query(path).build().ok()
        }
        _ => None,
    };
    let Some(uri) = uri else { return Err("http2: invalid Host header".to_owned()) };
    let mut request = Request::builder().method(Method::GET).uri(uri);
    let skipped = ["Host", "Connection", "Proxy-Connection", "Upgrade", "Keep-Alive"];
    for field in headers.iter().filter(|h| !skipped.iter().any(|s| h.name.eq_ignore_ascii_case(s))) {
        // Checked when the head was built: both are valid.
        let Ok(name) = HeaderName::from_bytes(field.name.as_bytes()) else { continue };
        if name == http::header::COOKIE {
            for cookie in go_cookie_fields(field.value) {
                if let Ok(cookie) = HeaderValue::from_bytes(cookie) {
                    request = request.header(name.clone(), cookie);
                }
            }
            continue;
        }
        if let Ok(value) = HeaderValue::from_bytes(field.value) {
            request = request.header(name, value);
        }
    }
    request.body(()).map_err(|e| format!("net/http: {e}"))
}

/// Go's split of a `Cookie` value into HTTP/2 fields: at each `;`, with the spaces after it
/// dropped; an empty last piece is not sent.
fn go_cookie_fields(mut value: &[u8]) -> Vec<&[u8]> {
    let mut fields = Vec::new();
    while let Some(semi) = value.iter().position(|b| *b == b';') {
        fields.push(&value[..semi]);
        let rest = &value[semi + 1..];
        value = &rest[rest.iter().take_while(|b| **b == b' ').count()..];
    }
    if !value.is_empty() {
        fields.push(value);
    }
    fields
}

/// Go's `%q` of a `[]string`: `["a" "b"]`.
fn go_quote_list(values: &[String]) -> String {
    let quoted: Vec<String> = values.iter().map(|v| go_quote(v)).collect();
    format!("[{}]", quoted.join(" "))
}

/// An HTTP/2 failure in the words of Go's transport: a reset from the server is
/// `stream error: stream ID 1; CODE; received from peer`, one the client made (an answer it
/// refuses) the same without the cause Go would name, a GOAWAY that refuses the stream
/// `http2: Transport received GOAWAY from server ErrCode:CODE`, a connection the server closed
/// `unexpected EOF`, other I/O errors the OS's text as Go prints it.
pub(super) fn h2_error_text(error: &h2::Error) -> String {
    if let Some(io) = error.get_io() {
        return match io.kind() {
            std::io::ErrorKind::UnexpectedEof => "unexpected EOF".to_owned(),
            _ => go_io_text(io),
        };
    }
    let code = error.reason().map_or(Cow::Borrowed("NO_ERROR"), |r| go_error_code(u32::from(r)));
    match (error.is_reset(), error.is_go_away(), error.is_remote()) {
        (true, _, true) => format!("stream error: stream ID {STREAM_ID}; {code}; received from peer"),
        (true, _, false) => format!("stream error: stream ID {STREAM_ID}; {code}"),
        (_, true, true) => format!("http2: Transport received GOAWAY from server ErrCode:{code}"),
        (_, true, false) => format!("connection error: {code}"),
        _ => error.to_string(),
    }
}

/// Go's `http2.ErrCode` as it prints.
fn go_error_code(code: u32) -> Cow<'static, str> {
    let name = match code {
        0x0 => "NO_ERROR",
        0x1 => "PROTOCOL_ERROR",
        0x2 => "INTERNAL_ERROR",
        0x3 => "FLOW_CONTROL_ERROR",
        0x4 => "SETTINGS_TIMEOUT",
        0x5 => "STREAM_CLOSED",
        0x6 => "FRAME_SIZE_ERROR",
        0x7 => "REFUSED_STREAM",
        0x8 => "CANCEL",
        0x9 => "COMPRESSION_ERROR",
        0xa => "CONNECT_ERROR",
        0xb => "ENHANCE_YOUR_CALM",
        0xc => "INADEQUATE_SECURITY",
        0xd => "HTTP_1_1_REQUIRED",
        other => return Cow::Owned(format!("unknown error code 0x{other:x}")),
    };
    Cow::Borrowed(name)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fields(request: &Request<()>) -> Vec<(String, String)> {
        request
            .headers()
            .iter()
            .map(|(n, v)| (n.as_str().to_owned(), String::from_utf8_lossy(v.as_bytes()).into_owned()))
            .collect()
    }

    /// What the HTTP/1.1 head carries, as Go's HTTP/2 transport sends it: `Host` as
    /// `:authority`, names lower-cased, no `Connection`, a cookie field per cookie.
    #[test]
    fn the_request_is_the_one_go_sends_over_http2() {
        let head = b"GET /healthz?x=1 HTTP/1.1\r\nHost: app.local:8443\r\nUser-Agent: kube-probe/1.35\r\n\
            Accept: */*\r\nCookie: a=1; b=2;  c=3\r\nX-Custom: v\r\nConnection: close\r\n\r\n";
        let request = h2_request(head).expect("a request");
        assert_eq!(request.uri().to_string(), "https://app.local:8443/healthz?x=1");
        assert_eq!(
            fields(&request),
            [
                ("user-agent", "kube-probe/1.35"),
                ("accept", "*/*"),
                ("cookie", "a=1"),
                ("cookie", "b=2"),
                ("cookie", "c=3"),
                ("x-custom", "v"),
            ]
            .map(|(n, v)| (n.to_owned(), v.to_owned()))
        );
    }

    /// Go's HTTP/2 transport refuses what its HTTP/1.1 writer sends: a `Connection` other than
    /// `close` or `keep-alive`, an `Upgrade`, a Host it would not write (sent empty over
    /// HTTP/1.1).
    #[test]
    fn connection_upgrade_and_host_are_checked_as_go_checks_them() {
        let with = |extra: &str| format!("GET / HTTP/1.1\r\nHost: a\r\n{extra}\r\n");
        let refused = |extra: &str| h2_request(with(extra).as_bytes()).err();
        assert_eq!(refused("Connection: keep-alive\r\nConnection: close\r\n"), None);
        assert_eq!(refused("Connection: close\r\n"), None);
        assert_eq!(
            refused("Connection: upgrade\r\nConnection: close\r\n").as_deref(),
            Some("http2: invalid Connection request header: [\"upgrade\"]")
        );
        assert_eq!(
            refused("Upgrade: websocket\r\nConnection: close\r\n").as_deref(),
            Some("http2: invalid Upgrade request header: [\"websocket\"]")
        );
        let empty_host = h2_request(b"GET / HTTP/1.1\r\nHost: \r\nConnection: close\r\n\r\n").err();
        assert_eq!(empty_host.as_deref(), Some("http2: invalid Host header"));
    }

    #[test]
    fn cookies_split_as_go_splits_them() {
        assert_eq!(go_cookie_fields(b"a=1;b=2; c=3;"), [&b"a=1"[..], b"b=2", b"c=3"]);
        assert_eq!(go_cookie_fields(b"a=1"), [&b"a=1"[..]]);
        assert!(go_cookie_fields(b"").is_empty());
    }

    #[test]
    fn error_codes_print_as_go_prints_them() {
        assert_eq!(go_error_code(2), "INTERNAL_ERROR");
        assert_eq!(go_error_code(0x1f), "unknown error code 0x1f");
    }
}
