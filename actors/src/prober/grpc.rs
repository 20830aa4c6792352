//! gRPC health probes (upstream `pkg/probe/grpc`): `grpc.health.v1.Health/Check` over plaintext
//! HTTP/2, one deadline for dial and call. Every outcome is a [`Probed`], never an error.
//!
//! Upstream dials with `grpc.WithBlock()`, so the dial only ends when the connection is READY,
//! i.e. a SETTINGS frame from the server has arrived (its own, or an acknowledgement of the
//! client's), and failed attempts (refused, closed, not HTTP/2) are retried with backoff until
//! the deadline; the result is then
//! `timeout: failed to connect service … context deadline exceeded`. tonic's handshake does not
//! wait for the server, so the stream is wrapped to notice the server's first frame, and the
//! retry loop is ours. A refused connection is therefore a dial *timeout*, as in upstream's own
//! test (`timeout: failed to connect service ":32" within 1s: context deadline exceeded`); the
//! "other dial error" output is left for a target that cannot be dialled at all (a host that
//! cannot form a URI).

use std::borrow::Cow;
use std::io;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::task::{Context, Poll};
use std::time::Duration;

use hyper_util::rt::TokioIo;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::TcpStream;
use tokio::sync::oneshot;
use tokio::time::{Instant, sleep_until, timeout_at};
use tonic::Code;
use tonic::codec::CompressionEncoding;
use tonic::transport::{Channel, Endpoint};
use tonic_health::pb::HealthCheckRequest;
use tonic_health::pb::health_check_response::ServingStatus;
use tonic_health::pb::health_client::HealthClient;

use super::tcp::{self, LOCAL_SYSTEM_HOST};
use super::{KUBE_PROBE_USER_AGENT, ProbeOutcome, Probed};

/// grpc-go's default connection backoff (`backoff.DefaultConfig`, without its jitter: one probe
/// reconnecting to one address has no herd to spread).
const BACKOFF_BASE: Duration = Duration::from_secs(1);
const BACKOFF_MULTIPLIER: f64 = 1.6;
const BACKOFF_MAX: Duration = Duration::from_secs(120);

/// Probes the gRPC health service of `host:port` for `service` within `timeout`.
pub async fn probe(host: &str, port: u16, service: &str, timeout: Duration) -> Probed {
    let addr = tcp::join_host_port(host, port);
    let deadline = tcp::deadline_after(timeout);
    let endpoint = match endpoint(host, port) {
        Ok(endpoint) => endpoint,
        Err(e) => {
            return failure(format!("error: failed to connect service at {addr:?}: {}", error_chain(&e)));
        }
    };
    let Ok(Some(conn)) = timeout_at(deadline, connect(&endpoint, host, port, deadline)).await else {
        return failure(format!(
            "timeout: failed to connect service {addr:?} within {}: context deadline exceeded",
            go_duration(timeout)
        ));
    };
    let target = Target { endpoint: &endpoint, host, port };
    check(conn, &target, service, deadline, timeout).await
}

/// Where the probe dials: what a call retried on a new connection needs to dial again.
struct Target<'a> {
    endpoint: &'a Endpoint,
    host: &'a str,
    port: u16,
}

/// A READY connection: tonic's channel over it, and what its reader has seen.
struct Conn {
    channel: Channel,
    seen: ReadLog,
}

/// The channel's endpoint: `http://host:port` (host bracketed if IPv6) with the probe's user
/// agent. The URI only supplies `:authority`; the connection itself comes from [`tcp::dial`].
fn endpoint(host: &str, port: u16) -> Result<Endpoint, tonic::transport::Error> {
    let host = if host.is_empty() { LOCAL_SYSTEM_HOST } else { host };
    Ok(Endpoint::from_shared(format!("http://{}", tcp::join_host_port(host, port)))?
        .user_agent(KUBE_PROBE_USER_AGENT)?
        .http2_max_header_list_size(MAX_HEADER_LIST_SIZE))
}

/// The most an answer's headers, and its trailers, may hold: the HTTP probe's limit for a
/// response head (docs/http-probe.md). h2's default of 16 KiB failed answers grpc-go reads;
/// grpc-go's own 16 MiB, for each of the thousand probes that may be in flight, is more memory
/// than a node should give to hostile answers.
const MAX_HEADER_LIST_SIZE: u32 = super::http::wire::MAX_HEAD_BYTES as u32;

/// Dials until a connection is READY (the server sent its SETTINGS frame), retrying failed
/// attempts with backoff. Only the deadline ends it: `None` once it has passed.
async fn connect(endpoint: &Endpoint, host: &str, port: u16, deadline: Instant) -> Option<Conn> {
    let mut backoff = BACKOFF_BASE;
    loop {
        match attempt(endpoint, host, port, deadline).await {
            Ok(conn) => return Some(conn),
            Err(AttemptError::DeadlinePassed) => return None,
            Err(e) => tracing::debug!(host, port, error = %e, "gRPC probe connection attempt failed"),
        }
        sleep_until(Instant::now() + backoff).await;
        backoff = backoff.mul_f64(BACKOFF_MULTIPLIER).min(BACKOFF_MAX);
    }
}

/// Why one connection attempt did not become READY (only logged, as upstream, but for the
/// new connection of a retried call: see [`go_connection_error`]).
#[derive(Debug, thiserror::Error)]
enum AttemptError {
    #[error(transparent)]
    Dial(#[from] tcp::DialError),
    #[error("{0}")]
    Handshake(String),
    #[error("connection closed before the server preface")]
    Closed,
    #[error("the server's first frame is not SETTINGS: not HTTP/2")]
    NotHttp2,
    /// Not dialled: the probe's deadline had passed.
    #[error("context deadline exceeded")]
    DeadlinePassed,
}

async fn attempt(
    endpoint: &Endpoint,
    host: &str,
    port: u16,
    deadline: Instant,
) -> Result<Conn, AttemptError> {
    // Go's dialer does not dial with a context already done; tokio's timeout would poll the
    // dial once (and send its SYN) before it looked at the deadline.
    if Instant::now() >= deadline {
        return Err(AttemptError::DeadlinePassed);
    }
    let stream = tcp::dial(host, port, deadline).await?;
    let (preface_tx, preface_rx) = oneshot::channel();
    let seen = ReadLog::default();
    let io = TokioIo::new(PrefaceWatch::new(stream, preface_tx, seen.clone()));
    let channel = endpoint
        .connect_with_connector(Preconnected(Some(io)))
        .await
        .map_err(|e| AttemptError::Handshake(error_chain(&e)))?;
    // The connection task spawned by tonic reads the socket; the watch reports what came first.
    match preface_rx.await {
        Ok(Preface::Settings) => Ok(Conn { channel, seen }),
        Ok(Preface::NotHttp2) => Err(AttemptError::NotHttp2),
        Ok(Preface::Closed) | Err(_) => Err(AttemptError::Closed),
    }
}

/// grpc-go's words for the new connection of a retried call that did not become READY: the
/// call fails Unavailable with the connection error (`connection error: desc = "…"`), as its
/// pick_first balancer reports it. Only a dial error and a connection closed before the server
/// preface are worded exactly; grpc-go names what else went wrong after the framer's error.
fn go_connection_error(e: &AttemptError) -> tonic::Status {
    let desc = match e {
        AttemptError::Dial(dial) => format!("transport: Error while dialing: {dial}"),
        AttemptError::Closed => "error reading server preface: EOF".to_owned(),
        AttemptError::NotHttp2 | AttemptError::Handshake(_) | AttemptError::DeadlinePassed => {
            format!("error reading server preface: {e}")
        }
    };
    tonic::Status::unavailable(format!("connection error: desc = {}", crate::gofmt::go_quote(&desc)))
}

/// Why the server never processed a call, as grpc-go's transport marks a stream "unprocessed".
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Unprocessed {
    /// A GOAWAY whose last stream id is below the call's: the connection is going away.
    GoAway,
    /// The stream was reset with `REFUSED_STREAM`; the connection stays.
    Refused,
}

/// Whether the server said it never processed the call: a GOAWAY that left the call's stream
/// out, or a `REFUSED_STREAM` reset.
fn unprocessed(status: &tonic::Status) -> Option<Unprocessed> {
    let h2 = remote_h2_error(status)?;
    if h2.is_go_away() {
        return Some(Unprocessed::GoAway);
    }
    (h2.is_reset() && h2.reason() == Some(h2::Reason::REFUSED_STREAM)).then_some(Unprocessed::Refused)
}

/// The HTTP/2 error the server's frames caused, if a call's status comes from one.
fn remote_h2_error(status: &tonic::Status) -> Option<&h2::Error> {
    let mut source = std::error::Error::source(status);
    while let Some(error) = source {
        if let Some(h2) = error.downcast_ref::<h2::Error>() {
            return h2.is_remote().then_some(h2);
        }
        source = error.source();
    }
    None
}

/// Calls `Health/Check` and maps the answer to upstream's outputs.
///
/// A call the server never processed (a GOAWAY that left its stream out, a `REFUSED_STREAM`)
/// is retried once, as grpc-go retries it transparently on a call's first attempt: on a new
/// connection once the connection has received a GOAWAY (grpc-go's transport takes no new
/// stream then, and its balancer moves to a new connection), on the same one after a refusal
/// alone. The retry shares the probe's one deadline, and none starts once it has passed
/// (docs/prober.md §4.8).
async fn check(
    mut conn: Conn,
    target: &Target<'_>,
    service: &str,
    deadline: Instant,
    timeout: Duration,
) -> Probed {
    let rpc_timeout =
        || failure(format!("timeout: health rpc did not complete within {}", go_duration(timeout)));
    let mut first_attempt = true;
    let response = loop {
        let status = match timeout_at(deadline, call(&conn.channel, service, deadline)).await {
            Err(_) => return rpc_timeout(),
            Ok(Ok(response)) => break response,
            Ok(Err(status)) => status,
        };
        let retry = if first_attempt { unprocessed(&status) } else { None };
        let Some(why) = retry else {
            let status = go_transport_status(status, &conn.seen);
            return match status.code() {
                Code::Unimplemented => failure(format!(
                    "error: this server does not implement the grpc health protocol (grpc.health.v1.Health): {}",
                    status.message()
                )),
                Code::DeadlineExceeded => rpc_timeout(),
                // A server honouring `grpc-timeout` may answer after the deadline with another
                // code (tonic says Cancelled); Go's own context would have reported the deadline.
                _ if Instant::now() >= deadline => rpc_timeout(),
                _ => failure(format!("error: health rpc probe failed: {}", go_status_error(&status))),
            };
        };
        first_attempt = false;
        tracing::debug!(
            host = target.host,
            port = target.port,
            ?why,
            "gRPC probe retries a call the server did not process"
        );
        // A REFUSED_STREAM that follows a GOAWAY keeping the call's stream lands here too.
        let draining = why == Unprocessed::GoAway || conn.seen.lock().goaway.is_some();
        if draining {
            conn = match timeout_at(deadline, attempt(target.endpoint, target.host, target.port, deadline))
                .await
            {
                Err(_) | Ok(Err(AttemptError::DeadlinePassed)) => return rpc_timeout(),
                Ok(Ok(conn)) => conn,
                Ok(Err(e)) => {
                    tracing::debug!(error = %e, "gRPC probe's new connection failed");
                    let status = go_connection_error(&e);
                    return failure(format!("error: health rpc probe failed: {}", go_status_error(&status)));
                }
            };
        }
    };
    if response.status == ServingStatus::Serving as i32 {
        Probed::new(ProbeOutcome::Success, "service healthy")
    } else {
        failure(format!("service unhealthy (responded with {:?})", status_name(response.status)))
    }
}

/// One `Health/Check` call on `channel`, accepting gzip as grpc-go does with gzip registered.
async fn call(
    channel: &Channel,
    service: &str,
    deadline: Instant,
) -> Result<tonic_health::pb::HealthCheckResponse, tonic::Status> {
    // grpc-go starts no stream with a context already done (the call is DeadlineExceeded).
    // tonic would queue the request in its channel's buffer and fail the call with its own
    // zero `grpc-timeout` (Cancelled); whether the request reached the wire first would be up to
    // the buffer's worker, which on a multi-threaded runtime can run before the call is dropped.
    if Instant::now() >= deadline {
        return Err(tonic::Status::deadline_exceeded("context deadline exceeded"));
    }
    let mut client =
        HealthClient::new(GoHeaderChecks(channel.clone())).accept_compressed(CompressionEncoding::Gzip);
    let mut request = tonic::Request::new(HealthCheckRequest { service: service.to_owned() });
    // Go sends the context's remaining time as `grpc-timeout`.
    request.set_timeout(deadline.saturating_duration_since(Instant::now()));
    client.check(request).await.map(tonic::Response::into_inner)
}

fn failure(output: String) -> Probed {
    Probed::new(ProbeOutcome::Failure, output)
}

/// The channel, with grpc-go's checks of a response's headers: tonic reads a `grpc-status`
/// whatever the HTTP status and content type, and words a missing one its own way
/// ("grpc-status header missing, mapped from HTTP status code 404"), so a server that is not
/// gRPC (an HTTP/2 proxy's 404, say) read differently from what the kubelet reports.
#[derive(Debug, Clone)]
struct GoHeaderChecks(Channel);

type ChannelResponse = Result<http::Response<tonic::body::Body>, tonic::transport::Error>;

impl tonic::codegen::Service<http::Request<tonic::body::Body>> for GoHeaderChecks {
    type Response = http::Response<tonic::body::Body>;
    type Error = tonic::transport::Error;
    type Future = futures::future::Map<
        <Channel as tonic::codegen::Service<http::Request<tonic::body::Body>>>::Future,
        fn(ChannelResponse) -> ChannelResponse,
    >;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.0.poll_ready(cx)
    }

    fn call(&mut self, mut request: http::Request<tonic::body::Body>) -> Self::Future {
        // grpc-go offers the compressors registered with it, gzip in the kubelet, where tonic
        // adds `identity` to the list (`gzip,identity`).
        request.headers_mut().insert(GRPC_ACCEPT_ENCODING, http::HeaderValue::from_static("gzip"));
        futures::FutureExt::map(self.0.call(request), with_go_header_checks as fn(_) -> _)
    }
}

/// A response that grpc-go would refuse on its headers carries that refusal as its
/// `grpc-status`, which tonic then reports before it reads any message. The trailers of one it
/// accepts are checked the same way as they arrive ([`GoTrailerChecks`]).
fn with_go_header_checks(response: ChannelResponse) -> ChannelResponse {
    let (mut parts, body) = response?.into_parts();
    // Trailers-only: the headers ended the stream, and carry the status. grpc-go reads a status
    // only there or in trailers: one in headers that do not end the stream is not the call's
    // (tonic would take it for a trailers-only answer's).
    let trailers_only = http_body::Body::is_end_stream(&body);
    let encoding = message_encoding(&mut parts.headers);
    match go_header_refusal(parts.status, &parts.headers) {
        Some(status) => carry_status(&mut parts.headers, &status),
        None if trailers_only => settle_trailers(&mut parts.headers),
        None => {
            for name in [GRPC_STATUS, GRPC_MESSAGE, GRPC_STATUS_DETAILS] {
                parts.headers.remove(name);
            }
        }
    }
    let body = tonic::body::Body::new(GoTrailerChecks {
        inner: body,
        trailers_due: !trailers_only,
        encoding,
        framing: Framing::default(),
    });
    Ok(http::Response::from_parts(parts, body))
}

/// How an answer's messages may be compressed, by its `grpc-encoding` header. grpc-go looks
/// at the header only when a message arrives compressed; tonic refuses an encoding it does not
/// know on the header itself, before any message (and before a trailers-only status), so the
/// header of such an encoding is taken away from tonic and the messages are checked here.
#[derive(Debug, Clone, PartialEq, Eq)]
enum MessageEncoding {
    /// No `grpc-encoding`, or `identity`: no message may be compressed.
    Identity,
    /// gzip, which the kubelet's grpc-go has registered; tonic decompresses it.
    Gzip,
    /// An encoding grpc-go has no decompressor for, as the server named it.
    Unsupported(Vec<u8>),
}

/// The answer's `MessageEncoding`; the header of an unsupported one is removed.
fn message_encoding(headers: &mut http::HeaderMap) -> MessageEncoding {
    let encoding = match headers.get(GRPC_ENCODING).map(http::HeaderValue::as_bytes) {
        None | Some(b"identity") => MessageEncoding::Identity,
        Some(b"gzip") => MessageEncoding::Gzip,
        Some(other) => MessageEncoding::Unsupported(other.to_vec()),
    };
    if matches!(encoding, MessageEncoding::Unsupported(_)) {
        headers.remove(GRPC_ENCODING);
    }
    encoding
}

/// The largest message grpc-go's client receives by default (`defaultClientMaxReceiveMessageSize`,
/// 4 MiB), which is tonic's default too.
const MAX_RECEIVE_MESSAGE_BYTES: u32 = 4 << 20;

/// What grpc-go refuses in a message's prefix (its compressed flag and length), in its order:
/// a length over its limit when it reads the prefix (`recvMsg`), then, once the message is read,
/// a flag it cannot read under the answer's encoding (`checkRecvPayload`, with a client's codes).
/// The probe refuses both on the prefix: the outcome differs only for a server that stops
/// partway through a message it has announced.
fn go_message_refusal(flag: u8, len: u32, encoding: &MessageEncoding) -> Option<tonic::Status> {
    if len > MAX_RECEIVE_MESSAGE_BYTES {
        return Some(tonic::Status::resource_exhausted(format!(
            "grpc: received message larger than max ({len} vs. {MAX_RECEIVE_MESSAGE_BYTES})"
        )));
    }
    let refusal = match (flag, encoding) {
        (0, _) | (1, MessageEncoding::Gzip) => return None,
        (1, MessageEncoding::Identity) => {
            "grpc: compressed flag set with identity or empty encoding".to_owned()
        }
        (1, MessageEncoding::Unsupported(name)) => {
            format!("grpc: Decompressor is not installed for grpc-encoding {}", go_quote_bytes(name))
        }
        (other, _) => format!("grpc: received unexpected payload format {other}"),
    };
    Some(tonic::Status::internal(refusal))
}

/// Where an answer's bytes stand in gRPC's framing of messages: a prefix of five bytes (the
/// compressed flag, then the length, big-endian), then that many bytes.
#[derive(Debug, Default)]
struct Framing {
    prefix: [u8; MESSAGE_PREFIX_LEN],
    prefix_len: usize,
    payload_left: u64,
}

const MESSAGE_PREFIX_LEN: usize = 5;

impl Framing {
    /// Follows `data`; grpc-go's refusal of the first message prefix in it that grpc-go refuses.
    fn follow(&mut self, mut data: &[u8], encoding: &MessageEncoding) -> Option<tonic::Status> {
        while !data.is_empty() {
            if self.payload_left > 0 {
                let n = usize::try_from(self.payload_left).map_or(data.len(), |left| left.min(data.len()));
                self.payload_left -= n as u64;
                data = &data[n..];
                continue;
            }
            let n = data.len().min(MESSAGE_PREFIX_LEN - self.prefix_len);
            self.prefix[self.prefix_len..self.prefix_len + n].copy_from_slice(&data[..n]);
            self.prefix_len += n;
            data = &data[n..];
            if self.prefix_len == MESSAGE_PREFIX_LEN {
                self.prefix_len = 0;
                let [flag, l0, l1, l2, l3] = self.prefix;
                let len = u32::from_be_bytes([l0, l1, l2, l3]);
                if let Some(refusal) = go_message_refusal(flag, len, encoding) {
                    return Some(refusal);
                }
                self.payload_left = u64::from(len);
            }
        }
        None
    }
}

const GRPC_STATUS: &str = "grpc-status";
const GRPC_MESSAGE: &str = "grpc-message";
const GRPC_STATUS_DETAILS: &str = "grpc-status-details-bin";
const GRPC_ACCEPT_ENCODING: &str = "grpc-accept-encoding";
const GRPC_ENCODING: &str = "grpc-encoding";

/// What grpc-go's client transport (`operateHeaders`) refuses in an answer's first headers, in
/// its order: a `grpc-status` that is not a 32-bit integer; then, unless the content type is
/// gRPC's (`application/grpc` alone, or followed by `+` or `;`), the HTTP status, whatever it
/// is, joined with what is wrong with the content type (the code from gRPC's table of HTTP
/// statuses, Unknown for one it does not list, 200 included); then a `-bin` value that is not
/// base64. An answer with gRPC's content type is read whatever its HTTP status (grpc-go since
/// v1.76, which kubelet v1.36 links).
fn go_header_refusal(status: http::StatusCode, headers: &http::HeaderMap) -> Option<tonic::Status> {
    if let Some(refusal) = go_grpc_status_refusal(headers) {
        return Some(refusal);
    }
    let content_type_error = match headers.get(http::header::CONTENT_TYPE) {
        None => Some("malformed header: missing HTTP content-type".to_owned()),
        Some(value) => {
            let text = String::from_utf8_lossy(value.as_bytes());
            let grpc = text
                .strip_prefix("application/grpc")
                .is_some_and(|rest| rest.is_empty() || rest.starts_with('+') || rest.starts_with(';'));
            (!grpc).then(|| {
                format!("transport: received unexpected content-type {}", crate::gofmt::go_quote(&text))
            })
        }
    };
    if let Some(content_type_error) = content_type_error {
        let code = match status.as_u16() {
            400 => Code::Internal,
            401 => Code::Unauthenticated,
            403 => Code::PermissionDenied,
            404 => Code::Unimplemented,
            429 | 502 | 503 | 504 => Code::Unavailable,
            _ => Code::Unknown,
        };
        let message = format!(
            "unexpected HTTP status code received from server: {} ({}); {content_type_error}",
            status.as_u16(),
            go_status_text(status)
        );
        return Some(tonic::Status::new(code, message));
    }
    go_bin_refusal(headers)
}

/// What grpc-go refuses in an answer's trailers (or trailers-only headers): a `grpc-status`
/// that is not a 32-bit integer, then a `-bin` value that is not base64.
fn go_trailer_refusal(trailers: &http::HeaderMap) -> Option<tonic::Status> {
    go_grpc_status_refusal(trailers).or_else(|| go_bin_refusal(trailers))
}

/// grpc-go's `transport: malformed grpc-status: …` (Unknown) for a `grpc-status` that
/// `strconv.ParseInt(value, 10, 32)` refuses.
fn go_grpc_status_refusal(headers: &http::HeaderMap) -> Option<tonic::Status> {
    let value = headers.get(GRPC_STATUS)?;
    let why = go_parse_int32(value.as_bytes()).err()?;
    let quoted = crate::gofmt::go_quote(&String::from_utf8_lossy(value.as_bytes()));
    Some(tonic::Status::new(
        Code::Unknown,
        format!("transport: malformed grpc-status: strconv.ParseInt: parsing {quoted}: {why}"),
    ))
}

/// grpc-go's `transport: malformed <name>: illegal base64 data at input byte <n>` (Internal)
/// for a metadata value whose name ends in `-bin` and that is not base64 as grpc-go decodes it;
/// of several, the last, as grpc-go keeps the last.
fn go_bin_refusal(headers: &http::HeaderMap) -> Option<tonic::Status> {
    let mut refusal = None;
    for (name, value) in headers {
        if !name.as_str().ends_with("-bin") {
            continue;
        }
        if let Some(at) = go_bin_header_error(value.as_bytes()) {
            refusal = Some(tonic::Status::new(
                Code::Internal,
                format!("transport: malformed {name}: illegal base64 data at input byte {at}"),
            ));
        }
    }
    refusal
}

/// Headers or trailers grpc-go accepts, made ready for tonic: `grpc-status-details-bin` goes,
/// as the probe reads no details and tonic decodes it with a stricter base64 than grpc-go's,
/// panicking on what it refuses; a `grpc-status` grpc-go reads as one of the codes is written
/// as tonic reads it (`+5`, `05`).
fn settle_status_headers(headers: &mut http::HeaderMap) {
    headers.remove(GRPC_STATUS_DETAILS);
    let code = headers.get(GRPC_STATUS).and_then(|value| go_parse_int32(value.as_bytes()).ok());
    if let Some(code @ 0..=16) = code {
        headers.insert(GRPC_STATUS, http::HeaderValue::from(code));
    }
}

/// Trailers (or trailers-only headers) grpc-go accepts, made ready for tonic: without a
/// `grpc-status` they say Unknown, as grpc-go reads them.
fn settle_trailers(trailers: &mut http::HeaderMap) {
    if !trailers.contains_key(GRPC_STATUS) {
        trailers.insert(GRPC_STATUS, http::HeaderValue::from(Code::Unknown as i32));
    }
    settle_status_headers(trailers);
}

/// Replaces whatever status `headers` carry with `status`.
fn carry_status(headers: &mut http::HeaderMap, status: &tonic::Status) {
    // `grpc-encoding` too: tonic checks an encoding it does not know before the status.
    for name in [GRPC_STATUS, GRPC_MESSAGE, GRPC_STATUS_DETAILS, GRPC_ENCODING] {
        headers.remove(name);
    }
    if status.add_header(headers).is_err() {
        tracing::debug!(%status, "cannot carry a gRPC status in headers");
    }
}

/// Go's `strconv.ParseInt(text, 10, 32)`: the value, or the words of its error.
fn go_parse_int32(text: &[u8]) -> Result<i64, &'static str> {
    const SYNTAX: &str = "invalid syntax";
    const RANGE: &str = "value out of range";
    let (negative, digits) = match text {
        [b'+', rest @ ..] => (false, rest),
        [b'-', rest @ ..] => (true, rest),
        _ => (false, text),
    };
    if digits.is_empty() {
        return Err(SYNTAX);
    }
    let mut value: u64 = 0;
    for &c in digits {
        if !c.is_ascii_digit() {
            return Err(SYNTAX);
        }
        // Go stops as soon as the value passes 32 bits, before it looks at the bytes after it.
        value = value * 10 + u64::from(c - b'0');
        if value > u64::from(u32::MAX) {
            return Err(RANGE);
        }
    }
    let limit = if negative { 1u64 << 31 } else { (1u64 << 31) - 1 };
    if value > limit {
        return Err(RANGE);
    }
    let value = i64::try_from(value).map_err(|_| RANGE)?;
    Ok(if negative { -value } else { value })
}

/// Where Go's base64 decoding of a `-bin` value fails (grpc-go's `decodeBinHeader`: with
/// padding when the length is a multiple of four, without otherwise), as the offset of its
/// `CorruptInputError`; `None` when it decodes. Go skips CR and LF, and does not check the
/// bits a final group leaves over.
fn go_bin_header_error(src: &[u8]) -> Option<usize> {
    let padded = src.len().is_multiple_of(4);
    let is_newline = |c: u8| c == b'\n' || c == b'\r';
    let skip_newlines = |mut at: usize| {
        while at < src.len() && is_newline(src[at]) {
            at += 1;
        }
        at
    };
    let mut si = 0;
    while si < src.len() {
        // One group of four characters (Go's `decodeQuantum`).
        let mut j = 0;
        while j < 4 {
            if si == src.len() {
                if j == 1 || padded {
                    return Some(si - j);
                }
                return None;
            }
            let c = src[si];
            si += 1;
            if c.is_ascii_alphanumeric() || c == b'+' || c == b'/' {
                j += 1;
                continue;
            }
            if is_newline(c) {
                continue;
            }
            if !padded || c != b'=' || j < 2 {
                return Some(si - 1);
            }
            if j == 2 {
                // "==" is due: the first is read.
                si = skip_newlines(si);
                if si == src.len() {
                    return Some(src.len());
                }
                if src[si] != b'=' {
                    return Some(si - 1);
                }
                si += 1;
            }
            si = skip_newlines(si);
            return (si < src.len()).then_some(si);
        }
    }
    None
}

/// grpc-go's words for a call a stream reset or a GOAWAY from the server ended
/// (`handleRSTStream`, `handleGoAway`), or that ended with its connection (the reader's
/// `error reading from server: …`); tonic words the first two "h2 protocol error: …", gives a
/// reset's code by a table of its own, and says "transport error" or "h2 protocol error: …" of
/// a closed connection.
fn go_transport_status(status: tonic::Status, seen: &ReadLog) -> tonic::Status {
    if let Some(h2) = remote_h2_error(&status) {
        if h2.is_go_away() {
            return tonic::Status::unavailable(
                "the stream is rejected because server is draining the connection",
            );
        }
        if let (true, Some(reason)) = (h2.is_reset(), h2.reason()) {
            let (code, name) = go_reset_code(u32::from(reason));
            return tonic::Status::new(
                code,
                format!("stream terminated by RST_STREAM with error code: {name}"),
            );
        }
    }
    // A status the server sent has no source; one the transport made does.
    if std::error::Error::source(&status).is_some()
        && let Some(closed) = seen.closed_status()
    {
        return closed;
    }
    status
}

/// An HTTP/2 error code as grpc-go maps it to a gRPC code (`http2ErrConvTab`, Unknown for one
/// it does not list) and as Go's `http2.ErrCode` prints it.
fn go_reset_code(code: u32) -> (Code, Cow<'static, str>) {
    let (grpc, name) = match code {
        0x0 => (Code::Internal, "NO_ERROR"),
        0x1 => (Code::Internal, "PROTOCOL_ERROR"),
        0x2 => (Code::Internal, "INTERNAL_ERROR"),
        0x3 => (Code::ResourceExhausted, "FLOW_CONTROL_ERROR"),
        0x4 => (Code::Internal, "SETTINGS_TIMEOUT"),
        0x5 => (Code::Internal, "STREAM_CLOSED"),
        0x6 => (Code::Internal, "FRAME_SIZE_ERROR"),
        0x7 => (Code::Unavailable, "REFUSED_STREAM"),
        0x8 => (Code::Cancelled, "CANCEL"),
        0x9 => (Code::Internal, "COMPRESSION_ERROR"),
        0xa => (Code::Internal, "CONNECT_ERROR"),
        0xb => (Code::ResourceExhausted, "ENHANCE_YOUR_CALM"),
        0xc => (Code::PermissionDenied, "INADEQUATE_SECURITY"),
        0xd => (Code::Internal, "HTTP_1_1_REQUIRED"),
        other => return (Code::Unknown, Cow::Owned(format!("unknown error code 0x{other:x}"))),
    };
    (grpc, Cow::Borrowed(name))
}

// === impl GoTrailerChecks ===

/// An answer's body, whose trailers grpc-go's checks are applied to as they arrive: a
/// refusal replaces the status they carry; trailers without a `grpc-status` say Unknown, as
/// grpc-go reads them; and a stream that ends with none says grpc-go's `server closed the
/// stream without sending trailers` (Internal). Its messages' prefixes are checked as grpc-go
/// checks them (`go_message_refusal`): a refused one ends the body with grpc-go's status in
/// place of its data, which tonic then reports as the call's.
struct GoTrailerChecks {
    inner: tonic::body::Body,
    trailers_due: bool,
    encoding: MessageEncoding,
    framing: Framing,
}

impl http_body::Body for GoTrailerChecks {
    type Data = bytes::Bytes;
    type Error = tonic::Status;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<http_body::Frame<bytes::Bytes>, tonic::Status>>> {
        let this = self.get_mut();
        let frame = match std::task::ready!(Pin::new(&mut this.inner).poll_frame(cx)) {
            Some(Ok(frame)) => frame,
            None if std::mem::take(&mut this.trailers_due) => {
                let mut trailers = http::HeaderMap::new();
                let status = tonic::Status::internal("server closed the stream without sending trailers");
                carry_status(&mut trailers, &status);
                return Poll::Ready(Some(Ok(http_body::Frame::trailers(trailers))));
            }
            other => return Poll::Ready(other),
        };
        let frame = match frame.into_data() {
            Ok(data) => {
                if let Some(refusal) = this.framing.follow(&data, &this.encoding) {
                    this.trailers_due = false;
                    return Poll::Ready(Some(Err(refusal)));
                }
                return Poll::Ready(Some(Ok(http_body::Frame::data(data))));
            }
            Err(frame) => frame,
        };
        match frame.into_trailers() {
            Ok(mut trailers) => {
                this.trailers_due = false;
                match go_trailer_refusal(&trailers) {
                    Some(status) => carry_status(&mut trailers, &status),
                    None => settle_trailers(&mut trailers),
                }
                Poll::Ready(Some(Ok(http_body::Frame::trailers(trailers))))
            }
            Err(frame) => Poll::Ready(Some(Ok(frame))),
        }
    }

    fn is_end_stream(&self) -> bool {
        !self.trailers_due && self.inner.is_end_stream()
    }
}

/// Go's `http.StatusText`: the `http` crate's reason phrases, but for the four Go words
/// differently; empty for a code Go does not know.
fn go_status_text(status: http::StatusCode) -> &'static str {
    match status.as_u16() {
        203 => "Non-Authoritative Information",
        413 => "Request Entity Too Large",
        414 => "Request URI Too Long",
        416 => "Requested Range Not Satisfiable",
        _ => status.canonical_reason().unwrap_or_default(),
    }
}

/// The proto enum name of a serving status; an unknown number prints as itself, as protobuf-go's
/// `String()` does.
fn status_name(status: i32) -> String {
    match ServingStatus::try_from(status) {
        Ok(s) => s.as_str_name().to_owned(),
        Err(_) => status.to_string(),
    }
}

/// A status as grpc-go's `status.Error` prints it.
fn go_status_error(status: &tonic::Status) -> String {
    format!("rpc error: code = {} desc = {}", go_code_name(status.code()), status.message())
}

/// grpc-go's `codes.Code.String()` (note Go's spelling `Canceled`).
fn go_code_name(code: Code) -> &'static str {
    match code {
        Code::Ok => "OK",
        Code::Cancelled => "Canceled",
        Code::Unknown => "Unknown",
        Code::InvalidArgument => "InvalidArgument",
        Code::DeadlineExceeded => "DeadlineExceeded",
        Code::NotFound => "NotFound",
        Code::AlreadyExists => "AlreadyExists",
        Code::PermissionDenied => "PermissionDenied",
        Code::ResourceExhausted => "ResourceExhausted",
        Code::FailedPrecondition => "FailedPrecondition",
        Code::Aborted => "Aborted",
        Code::OutOfRange => "OutOfRange",
        Code::Unimplemented => "Unimplemented",
        Code::Internal => "Internal",
        Code::Unavailable => "Unavailable",
        Code::DataLoss => "DataLoss",
        Code::Unauthenticated => "Unauthenticated",
    }
}

/// An error and its sources joined with `: ` (tonic's transport error alone says only
/// "transport error").
fn error_chain(e: &dyn std::error::Error) -> String {
    let mut text = e.to_string();
    let mut source = e.source();
    while let Some(s) = source {
        text.push_str(": ");
        text.push_str(&s.to_string());
        source = s.source();
    }
    text
}

/// Go's `time.Duration.String()`: `0s`, `1ns`, `1.5µs`, `200ms`, `1s`, `1.5s`, `2m0s`, `1h0m0s`.
pub fn go_duration(d: Duration) -> String {
    let nanos = d.as_nanos();
    if nanos == 0 {
        return "0s".to_owned();
    }
    if nanos < 1_000_000_000 {
        let (unit, precision) = match nanos {
            n if n < 1_000 => ("ns", 0),
            n if n < 1_000_000 => ("µs", 3),
            _ => ("ms", 6),
        };
        return format!("{}{unit}", with_fraction(nanos, precision));
    }
    let seconds = with_fraction(nanos % 60_000_000_000, 9);
    let minutes_total = nanos / 60_000_000_000;
    let (hours, minutes) = (minutes_total / 60, minutes_total % 60);
    match (hours, minutes) {
        (0, 0) => format!("{seconds}s"),
        (0, m) => format!("{m}m{seconds}s"),
        (h, m) => format!("{h}h{m}m{seconds}s"),
    }
}

/// `v / 10^precision` with the fraction's trailing zeros (and a bare point) dropped, as Go's
/// `fmtFrac` + `fmtInt`.
fn with_fraction(v: u128, precision: u32) -> String {
    let scale = 10u128.pow(precision);
    let (int, frac) = (v / scale, v % scale);
    if frac == 0 {
        return int.to_string();
    }
    let digits = format!("{frac:0width$}", width = precision as usize);
    format!("{int}.{}", digits.trim_end_matches('0'))
}

// === impl Preconnected ===

/// A connector handing tonic the one connection this attempt dialled; a reconnect finds none.
struct Preconnected(Option<TokioIo<PrefaceWatch>>);

impl tonic::codegen::Service<http::Uri> for Preconnected {
    type Response = TokioIo<PrefaceWatch>;
    type Error = io::Error;
    type Future = std::future::Ready<Result<Self::Response, io::Error>>;

    fn poll_ready(&mut self, _cx: &mut Context<'_>) -> Poll<Result<(), io::Error>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, _uri: http::Uri) -> Self::Future {
        std::future::ready(
            self.0
                .take()
                .ok_or_else(|| io::Error::new(io::ErrorKind::NotConnected, "probe connection closed")),
        )
    }
}

// === impl PrefaceWatch ===

/// What the server sent first.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Preface {
    /// An HTTP/2 SETTINGS frame: the connection is READY in grpc-go's terms.
    Settings,
    /// Some other bytes (an HTTP/1 answer, a TLS alert, …).
    NotHttp2,
    /// EOF or a read error before a whole frame header.
    Closed,
}

/// HTTP/2 frame header length, frame types SETTINGS and GOAWAY, and SETTINGS' ACK flag.
const FRAME_HEADER_LEN: usize = 9;
const FRAME_TYPE_SETTINGS: u8 = 0x4;
const FRAME_TYPE_GOAWAY: u8 = 0x7;
const FLAG_ACK: u8 = 0x1;
/// One setting in a SETTINGS frame: an identifier of two bytes, a value of four.
const SETTING_LEN: usize = 6;
/// The largest frame h2 reads (its default SETTINGS_MAX_FRAME_SIZE), and grpc-go's framer
/// (`http2MaxFrameLen`): a longer GOAWAY is a connection error before anyone reads its debug
/// data, so it is not kept.
const MAX_FRAME_LEN: usize = 16_384;

/// What a connection's reader saw that grpc-go words a call's errors with, shared between the
/// connection (which writes it as it reads) and the probe.
#[derive(Debug, Clone, Default)]
struct ReadLog(Arc<Mutex<ReadSeen>>);

#[derive(Debug, Default)]
struct ReadSeen {
    /// The first GOAWAY's error code and debug data (grpc-go keeps the first one's).
    goaway: Option<(u32, Vec<u8>)>,
    /// How reading ended, as Go prints its framer's error: `EOF`, `unexpected EOF`, `read tcp
    /// 127.0.0.1:41000->127.0.0.1:50051: read: connection reset by peer`.
    ended: Option<String>,
}

impl ReadLog {
    fn lock(&self) -> MutexGuard<'_, ReadSeen> {
        self.0.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// grpc-go's status for a call whose connection stopped reading: `error reading from
    /// server: EOF` (Unavailable), or, once a GOAWAY came, the transport's closing words with
    /// that GOAWAY's code and debug data. `None` while the connection reads on.
    fn closed_status(&self) -> Option<tonic::Status> {
        let seen = self.lock();
        let desc = format!("error reading from server: {}", seen.ended.as_ref()?);
        let Some((code, debug)) = &seen.goaway else {
            return Some(tonic::Status::unavailable(desc));
        };
        let code = go_reset_code(*code).1;
        let goaway = if debug.is_empty() {
            format!("code: {code}")
        } else {
            format!("code: {code}, debug data: {}", go_quote_bytes(debug))
        };
        Some(tonic::Status::unavailable(format!(
            "closing transport due to: connection error: desc = {}, received prior goaway: {goaway}",
            crate::gofmt::go_quote(&desc)
        )))
    }
}

/// Go's `%q` of `string(bytes)`: as [`crate::gofmt::go_quote`], with each byte that is not
/// UTF-8 as `\xNN`.
fn go_quote_bytes(bytes: &[u8]) -> String {
    let mut out = String::from("\"");
    for chunk in bytes.utf8_chunks() {
        let quoted = crate::gofmt::go_quote(chunk.valid());
        out.push_str(&quoted[1..quoted.len() - 1]);
        for byte in chunk.invalid() {
            out.push_str(&format!("\\x{byte:02x}"));
        }
    }
    out.push('"');
    out
}

/// A TCP stream that reports, once, whether the server's first frame header is a SETTINGS
/// frame, and then follows the frames it reads (their headers only) to log the first GOAWAY
/// and how reading ended, where a frame ended or in the middle of one.
struct PrefaceWatch {
    inner: TcpStream,
    /// `ip:port` of both ends, as Go's read errors name them.
    ends: Option<(SocketAddr, SocketAddr)>,
    header: [u8; FRAME_HEADER_LEN],
    /// Bytes of the current frame's header read; `FRAME_HEADER_LEN` while in its payload.
    header_len: usize,
    payload_len: usize,
    payload_left: usize,
    /// The payload of the first GOAWAY, while it is read.
    goaway: Option<Vec<u8>>,
    report: Option<oneshot::Sender<Preface>>,
    seen: ReadLog,
}

impl PrefaceWatch {
    fn new(inner: TcpStream, report: oneshot::Sender<Preface>, seen: ReadLog) -> Self {
        let ends = inner.local_addr().ok().zip(inner.peer_addr().ok());
        PrefaceWatch {
            inner,
            ends,
            header: [0; FRAME_HEADER_LEN],
            header_len: 0,
            payload_len: 0,
            payload_left: 0,
            goaway: None,
            report: Some(report),
            seen,
        }
    }

    fn report(&mut self, preface: Preface) {
        if let Some(report) = self.report.take() {
            let _ = report.send(preface);
        }
    }

    /// Follows newly read bytes: frame headers, and the payload of the first GOAWAY.
    fn observe(&mut self, mut bytes: &[u8]) {
        while !bytes.is_empty() {
            if self.header_len < FRAME_HEADER_LEN {
                let n = bytes.len().min(FRAME_HEADER_LEN - self.header_len);
                self.header[self.header_len..self.header_len + n].copy_from_slice(&bytes[..n]);
                self.header_len += n;
                bytes = &bytes[n..];
                if self.header_len == FRAME_HEADER_LEN {
                    self.start_payload();
                }
                continue;
            }
            let n = bytes.len().min(self.payload_left);
            if let Some(payload) = &mut self.goaway {
                payload.extend_from_slice(&bytes[..n]);
            }
            self.payload_left -= n;
            bytes = &bytes[n..];
            if self.payload_left == 0 {
                self.end_frame();
            }
        }
    }

    /// A frame header is complete.
    fn start_payload(&mut self) {
        let preface = preface_of(&self.header);
        self.report(preface);
        let [l0, l1, l2, kind, _, s0, s1, s2, s3] = self.header;
        self.payload_len = usize::from(l0) << 16 | usize::from(l1) << 8 | usize::from(l2);
        self.payload_left = self.payload_len;
        let stream_zero = [s0 & 0x7f, s1, s2, s3] == [0; 4];
        // GOAWAY carries a last stream id and an error code before its debug data.
        if kind == FRAME_TYPE_GOAWAY
            && stream_zero
            && (8..=MAX_FRAME_LEN).contains(&self.payload_len)
            && self.seen.lock().goaway.is_none()
        {
            self.goaway = Some(Vec::with_capacity(self.payload_len));
        }
        if self.payload_left == 0 {
            self.end_frame();
        }
    }

    /// A frame's payload is complete.
    fn end_frame(&mut self) {
        self.header_len = 0;
        if let Some(payload) = self.goaway.take()
            && let Some((code, debug)) = payload.get(4..8).zip(payload.get(8..))
        {
            let code = u32::from_be_bytes([code[0], code[1], code[2], code[3]]);
            self.seen.lock().goaway.get_or_insert_with(|| (code, debug.to_vec()));
        }
    }

    /// Reading ended, with EOF (`None`) or an error.
    fn ended(&mut self, error: Option<&io::Error>) {
        self.report(Preface::Closed);
        // Go's framer reads a frame header, then its payload, each with `io.ReadFull`: EOF
        // before the first byte of either is `EOF`, after it `unexpected EOF`.
        let text = match error {
            None if self.header_len == 0 => "EOF".to_owned(),
            None if self.header_len == FRAME_HEADER_LEN && self.payload_left == self.payload_len => {
                "EOF".to_owned()
            }
            None => "unexpected EOF".to_owned(),
            // Go's `net.OpError` for a read on the connection.
            Some(e) => match (e.raw_os_error(), self.ends) {
                (Some(_), Some((local, remote))) => {
                    format!("read tcp {local}->{remote}: read: {}", crate::gofmt::go_errno_text(e))
                }
                _ => e.to_string(),
            },
        };
        self.seen.lock().ended.get_or_insert(text);
    }
}

/// What a server's first frame header says of its preface, as grpc-go reads it
/// (`readServerPreface`): any SETTINGS frame Go's framer reads is one, an acknowledgement of the
/// client's own SETTINGS included (grpc-go then simply waits for the server's settings, and the
/// connection is READY). Go's framer refuses a SETTINGS frame outside stream 0, one longer than
/// the 16 KiB grpc-go reads, an acknowledgement with a payload, and settings whose length is not
/// a multiple of six: then reading the preface fails.
fn preface_of(header: &[u8; FRAME_HEADER_LEN]) -> Preface {
    let [l0, l1, l2, kind, flags, s0, s1, s2, s3] = *header;
    let len = usize::from(l0) << 16 | usize::from(l1) << 8 | usize::from(l2);
    let stream_zero = [s0 & 0x7f, s1, s2, s3] == [0; 4];
    let readable = if flags & FLAG_ACK != 0 { len == 0 } else { len.is_multiple_of(SETTING_LEN) };
    if kind == FRAME_TYPE_SETTINGS && stream_zero && len <= MAX_FRAME_LEN && readable {
        Preface::Settings
    } else {
        Preface::NotHttp2
    }
}

impl AsyncRead for PrefaceWatch {
    fn poll_read(self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &mut ReadBuf<'_>) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        let before = buf.filled().len();
        // Reading nothing into a full buffer is not EOF.
        let had_room = buf.remaining() > 0;
        let poll = Pin::new(&mut this.inner).poll_read(cx, buf);
        match &poll {
            Poll::Ready(Ok(())) if !had_room => {}
            Poll::Ready(Ok(())) if buf.filled().len() == before => this.ended(None),
            Poll::Ready(Ok(())) => this.observe(&buf.filled()[before..]),
            Poll::Ready(Err(e)) => this.ended(Some(e)),
            Poll::Pending => {}
        }
        poll
    }
}

impl AsyncWrite for PrefaceWatch {
    fn poll_write(self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &[u8]) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.get_mut().inner).poll_write(cx, buf)
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.get_mut().inner).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().inner).poll_flush(cx)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().inner).poll_shutdown(cx)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn status_texts_are_gos() {
        let text = |code: u16| go_status_text(http::StatusCode::from_u16(code).expect("a status"));
        assert_eq!(text(404), "Not Found");
        assert_eq!(text(413), "Request Entity Too Large");
        assert_eq!(text(203), "Non-Authoritative Information");
        assert_eq!(text(414), "Request URI Too Long");
        assert_eq!(text(416), "Requested Range Not Satisfiable");
        assert_eq!(text(599), "");
    }

    #[test]
    fn go_duration_matches_go() {
        let cases: &[(Duration, &str)] = &[
            (Duration::ZERO, "0s"),
            (Duration::from_nanos(1), "1ns"),
            (Duration::from_nanos(999), "999ns"),
            (Duration::from_nanos(1_100), "1.1µs"),
            (Duration::from_micros(2_200), "2.2ms"),
            (Duration::from_millis(200), "200ms"),
            (Duration::from_millis(999), "999ms"),
            (Duration::from_secs(1), "1s"),
            (Duration::from_millis(1_500), "1.5s"),
            (Duration::from_secs(2), "2s"),
            (Duration::from_secs(59), "59s"),
            (Duration::from_secs(60), "1m0s"),
            (Duration::from_secs(90), "1m30s"),
            (Duration::from_secs(120), "2m0s"),
            (Duration::from_secs(3600), "1h0m0s"),
            (Duration::new(3723, 4), "1h2m3.000000004s"),
            (Duration::from_secs(100 * 3600), "100h0m0s"),
        ];
        for (d, want) in cases {
            assert_eq!(go_duration(*d), *want, "{d:?}");
        }
    }

    #[test]
    fn status_names_are_proto_enum_names() {
        assert_eq!(status_name(0), "UNKNOWN");
        assert_eq!(status_name(2), "NOT_SERVING");
        assert_eq!(status_name(3), "SERVICE_UNKNOWN");
        assert_eq!(status_name(7), "7");
    }

    #[test]
    fn status_errors_print_as_grpc_go() {
        let s = tonic::Status::new(Code::Cancelled, "Timeout expired");
        assert_eq!(go_status_error(&s), "rpc error: code = Canceled desc = Timeout expired");
        let s = tonic::Status::not_found("service not registered");
        assert_eq!(go_status_error(&s), "rpc error: code = NotFound desc = service not registered");
    }

    #[test]
    fn endpoint_brackets_ipv6_and_sets_user_agent() {
        let e = endpoint("::1", 50051).expect("valid endpoint");
        assert_eq!(e.uri().to_string(), "http://[::1]:50051/");
        let e = endpoint("10.1.2.3", 8080).expect("valid endpoint");
        assert_eq!(e.uri().to_string(), "http://10.1.2.3:8080/");
        let e = endpoint("", 32).expect("valid endpoint");
        assert_eq!(e.uri().to_string(), "http://127.0.0.1:32/");
        assert!(endpoint("bad host", 80).is_err());
    }

    /// Nothing is dialled once the deadline has passed, by the dial loop or by a retry's new
    /// connection: tokio's timeout polls the dial once before it looks at its deadline, and a
    /// dial's first poll sends its SYN.
    #[tokio::test]
    async fn nothing_is_dialled_once_the_deadline_has_passed() {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("bind 127.0.0.1:0");
        let port = listener.local_addr().expect("bound").port();
        let endpoint = endpoint("127.0.0.1", port).expect("an endpoint");
        let passed = Instant::now();
        // Bounded: a dialled connection would wait for a server preface that never comes.
        let attempted =
            tokio::time::timeout(Duration::from_secs(5), attempt(&endpoint, "127.0.0.1", port, passed))
                .await
                .ok();
        let refused = matches!(attempted, Some(Err(AttemptError::DeadlinePassed)));
        assert!(refused, "{:?}", attempted.map(|a| a.err()));
        let connected =
            tokio::time::timeout(Duration::from_secs(5), connect(&endpoint, "127.0.0.1", port, passed));
        assert!(connected.await.expect("the dial loop ends at its deadline").is_none());
        // The first connection the port accepts is this one: the probe dialled none.
        let control = TcpStream::connect(("127.0.0.1", port)).await.expect("a control connection");
        let (_, peer) = listener.accept().await.expect("accepted");
        assert_eq!(peer, control.local_addr().expect("its address"));
    }

    /// No call starts once the deadline has passed: it is DeadlineExceeded, as grpc-go's
    /// attempt finds its context done, and opens no stream (the next call with time left is
    /// the connection's first).
    #[tokio::test]
    async fn no_call_starts_once_the_deadline_has_passed() {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("bind 127.0.0.1:0");
        let port = listener.local_addr().expect("bound").port();
        let (opened, mut streams) = tokio::sync::mpsc::unbounded_channel();
        // An HTTP/2 server that never answers and reports each stream a HEADERS frame opens.
        let server = tokio::spawn(async move {
            let (mut stream, _) = listener.accept().await.expect("accepted");
            stream.read_exact(&mut [0u8; 24]).await.expect("the client preface");
            stream.write_all(&[0, 0, 0, 4, 0, 0, 0, 0, 0]).await.expect("SETTINGS written");
            loop {
                let mut header = [0u8; FRAME_HEADER_LEN];
                if stream.read_exact(&mut header).await.is_err() {
                    return;
                }
                let len = usize::from(header[0]) << 16 | usize::from(header[1]) << 8 | usize::from(header[2]);
                if stream.read_exact(&mut vec![0u8; len]).await.is_err() {
                    return;
                }
                if header[3] == 0x1 {
                    let _ =
                        opened.send(u32::from_be_bytes([header[5] & 0x7f, header[6], header[7], header[8]]));
                }
            }
        });
        let later = Instant::now() + Duration::from_secs(10);
        let conn = attempt(&endpoint("127.0.0.1", port).expect("an endpoint"), "127.0.0.1", port, later)
            .await
            .expect("a READY connection");
        let late = call(&conn.channel, "", Instant::now()).await;
        let channel = conn.channel.clone();
        let in_time = tokio::spawn(async move { call(&channel, "", later).await });
        assert_eq!(streams.recv().await, Some(1), "the call in time opens the first stream");
        assert_eq!(late.map_err(|status| status.code()).err(), Some(Code::DeadlineExceeded));
        in_time.abort();
        server.abort();
    }

    #[test]
    fn grpc_status_is_parsed_as_gos_parse_int_with_32_bits() {
        assert_eq!(go_parse_int32(b"0"), Ok(0));
        assert_eq!(go_parse_int32(b"+5"), Ok(5));
        assert_eq!(go_parse_int32(b"05"), Ok(5));
        assert_eq!(go_parse_int32(b"-2147483648"), Ok(-2_147_483_648));
        assert_eq!(go_parse_int32(b"2147483647"), Ok(2_147_483_647));
        assert_eq!(go_parse_int32(b"2147483648"), Err("value out of range"));
        assert_eq!(
            go_parse_int32(b"99999999999999999999x"),
            Err("value out of range"),
            "Go stops at the overflow"
        );
        assert_eq!(go_parse_int32(b"4294967296x"), Err("value out of range"), "past 32 bits, before the x");
        assert_eq!(go_parse_int32(b"4294967295x"), Err("invalid syntax"));
        for bad in [&b""[..], b"+", b"-", b"abc", b"1 ", b" 1", b"1_0", b"0x1"] {
            assert_eq!(go_parse_int32(bad), Err("invalid syntax"), "{bad:?}");
        }
    }

    #[test]
    fn bin_headers_fail_where_gos_base64_does() {
        // Unpadded when the length is not a multiple of four.
        for good in [&b""[..], b"AA", b"AAA", b"AB", b"AAAAAA", b"QUJD+/90"] {
            assert_eq!(go_bin_header_error(good), None, "{good:?}");
        }
        assert_eq!(go_bin_header_error(b"!!!"), Some(0));
        assert_eq!(go_bin_header_error(b"A"), Some(0), "a lone character");
        assert_eq!(go_bin_header_error(b"AAAAA"), Some(4));
        assert_eq!(go_bin_header_error(b"AA="), Some(2), "no padding without a multiple of four");
        // Padded when it is.
        for good in [&b"AA=="[..], b"AAA=", b"AAAAAA==", b"AAAA"] {
            assert_eq!(go_bin_header_error(good), None, "{good:?}");
        }
        assert_eq!(go_bin_header_error(b"AAAA!AAA"), Some(4));
        assert_eq!(go_bin_header_error(b"A==="), Some(1));
        assert_eq!(go_bin_header_error(b"AA=A"), Some(2));
        assert_eq!(go_bin_header_error(b"AAA=AAAA"), Some(4), "data after the padding");
        assert_eq!(go_bin_header_error(b"AAA\nA"), None, "line ends are skipped");
        assert_eq!(go_bin_header_error(b"AAAAAA\r\n"), Some(6), "but counted in the length");
    }

    #[test]
    fn resets_are_worded_and_coded_as_grpc_go_does() {
        assert_eq!(go_reset_code(0x0), (Code::Internal, Cow::Borrowed("NO_ERROR")));
        assert_eq!(go_reset_code(0x3), (Code::ResourceExhausted, Cow::Borrowed("FLOW_CONTROL_ERROR")));
        assert_eq!(go_reset_code(0x7), (Code::Unavailable, Cow::Borrowed("REFUSED_STREAM")));
        assert_eq!(go_reset_code(0x8), (Code::Cancelled, Cow::Borrowed("CANCEL")));
        assert_eq!(go_reset_code(0xd), (Code::Internal, Cow::Borrowed("HTTP_1_1_REQUIRED")));
        assert_eq!(go_reset_code(0x99), (Code::Unknown, Cow::Owned("unknown error code 0x99".into())));
    }

    #[test]
    fn accepted_status_headers_keep_nothing_tonic_would_misread() {
        let mut headers = http::HeaderMap::new();
        headers.insert(GRPC_STATUS, http::HeaderValue::from_static("+5"));
        headers.insert(GRPC_STATUS_DETAILS, http::HeaderValue::from_static("AB"));
        settle_status_headers(&mut headers);
        assert_eq!(headers.get(GRPC_STATUS).map(|v| v.as_bytes()), Some(&b"5"[..]));
        assert!(!headers.contains_key(GRPC_STATUS_DETAILS));
    }

    #[test]
    fn goaway_debug_data_is_quoted_as_gos_percent_q_of_a_string() {
        assert_eq!(go_quote_bytes(b"bye"), r#""bye""#);
        assert_eq!(go_quote_bytes(b"a\"b\n"), r#""a\"b\n""#);
        assert_eq!(go_quote_bytes(b"\xff\xfeok\xc3"), r#""\xff\xfeok\xc3""#);
        assert_eq!(go_quote_bytes("é".as_bytes()), r#""é""#);
    }

    #[test]
    fn preface_is_any_settings_frame_gos_framer_reads() {
        // SETTINGS, length 0, no flags, stream 0; and with one setting.
        assert_eq!(preface_of(&[0, 0, 0, 4, 0, 0, 0, 0, 0]), Preface::Settings);
        assert_eq!(preface_of(&[0, 0, 6, 4, 0, 0, 0, 0, 0]), Preface::Settings);
        // An acknowledgement of the client's SETTINGS is a SETTINGS frame too.
        assert_eq!(preface_of(&[0, 0, 0, 4, 1, 0, 0, 0, 0]), Preface::Settings);
        // What Go's framer refuses: an acknowledgement with a payload, a length that is not
        // whole settings, a stream other than 0, more than 16 KiB.
        assert_eq!(preface_of(&[0, 0, 6, 4, 1, 0, 0, 0, 0]), Preface::NotHttp2);
        assert_eq!(preface_of(&[0, 0, 5, 4, 0, 0, 0, 0, 0]), Preface::NotHttp2);
        assert_eq!(preface_of(&[0, 0, 0, 4, 0, 0, 0, 0, 1]), Preface::NotHttp2);
        assert_eq!(preface_of(&[0, 0x40, 0x02, 4, 0, 0, 0, 0, 0]), Preface::NotHttp2);
        assert_eq!(preface_of(b"HTTP/1.1 "), Preface::NotHttp2);
        // Another frame type (a PING) first.
        assert_eq!(preface_of(&[0, 0, 8, 6, 0, 0, 0, 0, 0]), Preface::NotHttp2);
    }
}
