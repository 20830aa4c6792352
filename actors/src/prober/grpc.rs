//! gRPC health probes (upstream `pkg/probe/grpc`): `grpc.health.v1.Health/Check` over plaintext
//! HTTP/2, one deadline for dial and call. Every outcome is a [`Probed`], never an error.
//!
//! Upstream dials with `grpc.WithBlock()`, so the dial only ends when the connection is READY,
//! i.e. the server's HTTP/2 SETTINGS frame has arrived, and failed attempts (refused, closed, not
//! HTTP/2) are retried with backoff until the deadline; the result is then
//! `timeout: failed to connect service … context deadline exceeded`. tonic's handshake does not
//! wait for the server, so the stream is wrapped to notice the server's first frame, and the
//! retry loop is ours. A refused connection is therefore a dial *timeout*, as in upstream's own
//! test (`timeout: failed to connect service ":32" within 1s: context deadline exceeded`); the
//! "other dial error" output is left for a target that cannot be dialled at all (a host that
//! cannot form a URI).

use std::io;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

use hyper_util::rt::TokioIo;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::TcpStream;
use tokio::sync::oneshot;
use tokio::time::{Instant, sleep_until, timeout_at};
use tonic::Code;
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
    let Ok(channel) = timeout_at(deadline, connect(&endpoint, host, port, deadline)).await else {
        return failure(format!(
            "timeout: failed to connect service {addr:?} within {}: context deadline exceeded",
            go_duration(timeout)
        ));
    };
    check(channel, service, deadline, timeout).await
}

/// The channel's endpoint: `http://host:port` (host bracketed if IPv6) with the probe's user
/// agent. The URI only supplies `:authority`; the connection itself comes from [`tcp::dial`].
fn endpoint(host: &str, port: u16) -> Result<Endpoint, tonic::transport::Error> {
    let host = if host.is_empty() { LOCAL_SYSTEM_HOST } else { host };
    Endpoint::from_shared(format!("http://{}", tcp::join_host_port(host, port)))?
        .user_agent(KUBE_PROBE_USER_AGENT)
}

/// Dials until a connection is READY (the server sent its SETTINGS frame), retrying failed
/// attempts with backoff. Only the caller's deadline ends it.
async fn connect(endpoint: &Endpoint, host: &str, port: u16, deadline: Instant) -> Channel {
    let mut backoff = BACKOFF_BASE;
    loop {
        match attempt(endpoint, host, port, deadline).await {
            Ok(channel) => return channel,
            Err(e) => tracing::debug!(host, port, error = %e, "gRPC probe connection attempt failed"),
        }
        sleep_until(Instant::now() + backoff).await;
        backoff = backoff.mul_f64(BACKOFF_MULTIPLIER).min(BACKOFF_MAX);
    }
}

/// Why one connection attempt did not become READY (only logged, as upstream).
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
}

async fn attempt(
    endpoint: &Endpoint,
    host: &str,
    port: u16,
    deadline: Instant,
) -> Result<Channel, AttemptError> {
    let stream = tcp::dial(host, port, deadline).await?;
    let (preface_tx, preface_rx) = oneshot::channel();
    let io = TokioIo::new(PrefaceWatch::new(stream, preface_tx));
    let channel = endpoint
        .connect_with_connector(Preconnected(Some(io)))
        .await
        .map_err(|e| AttemptError::Handshake(error_chain(&e)))?;
    // The connection task spawned by tonic reads the socket; the watch reports what came first.
    match preface_rx.await {
        Ok(Preface::Settings) => Ok(channel),
        Ok(Preface::NotHttp2) => Err(AttemptError::NotHttp2),
        Ok(Preface::Closed) | Err(_) => Err(AttemptError::Closed),
    }
}

/// Calls `Health/Check` and maps the answer to upstream's outputs.
async fn check(channel: Channel, service: &str, deadline: Instant, timeout: Duration) -> Probed {
    let mut client = HealthClient::new(GoHeaderChecks(channel));
    let mut request = tonic::Request::new(HealthCheckRequest { service: service.to_owned() });
    // Go sends the context's remaining time as `grpc-timeout`.
    request.set_timeout(deadline.saturating_duration_since(Instant::now()));
    let rpc_timeout =
        || failure(format!("timeout: health rpc did not complete within {}", go_duration(timeout)));
    let response = match timeout_at(deadline, client.check(request)).await {
        Err(_) => return rpc_timeout(),
        Ok(Err(status)) => {
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
        }
        Ok(Ok(response)) => response.into_inner(),
    };
    if response.status == ServingStatus::Serving as i32 {
        Probed::new(ProbeOutcome::Success, "service healthy")
    } else {
        failure(format!("service unhealthy (responded with {:?})", status_name(response.status)))
    }
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

    fn call(&mut self, request: http::Request<tonic::body::Body>) -> Self::Future {
        futures::FutureExt::map(self.0.call(request), with_go_header_checks as fn(_) -> _)
    }
}

/// A response that grpc-go would refuse on its headers carries that refusal as its
/// `grpc-status`, which tonic then reports before it reads any message.
fn with_go_header_checks(response: ChannelResponse) -> ChannelResponse {
    let mut response = response?;
    let refused = go_header_status(response.status(), response.headers().get(http::header::CONTENT_TYPE));
    if let Some(status) = refused {
        response.headers_mut().remove("grpc-status");
        response.headers_mut().remove("grpc-message");
        if status.add_header(response.headers_mut()).is_err() {
            tracing::debug!(%status, "cannot carry a gRPC status in headers");
        }
    }
    Ok(response)
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

/// What grpc-go's client transport (`operateHeaders`) makes of a response's first headers: an
/// HTTP status other than 200, or a content type that is not `application/grpc` (alone, or
/// followed by `+` or `;`), ends the call. The code comes from the HTTP status by gRPC's table
/// (Unknown for a status it does not list, 200 included), the message joins what was wrong
/// with `; `.
fn go_header_status(
    status: http::StatusCode,
    content_type: Option<&http::HeaderValue>,
) -> Option<tonic::Status> {
    let http_status_error = (status != http::StatusCode::OK).then(|| {
        format!(
            "unexpected HTTP status code received from server: {} ({})",
            status.as_u16(),
            go_status_text(status)
        )
    });
    let content_type_error = match content_type {
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
    if content_type_error.is_none() && http_status_error.is_none() {
        return None;
    }
    let code = match status.as_u16() {
        400 => Code::Internal,
        401 => Code::Unauthenticated,
        403 => Code::PermissionDenied,
        404 => Code::Unimplemented,
        429 | 502 | 503 | 504 => Code::Unavailable,
        _ => Code::Unknown,
    };
    let message =
        [http_status_error, content_type_error].into_iter().flatten().collect::<Vec<_>>().join("; ");
    Some(tonic::Status::new(code, message))
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

/// HTTP/2 frame header length, frame type SETTINGS, and its ACK flag.
const FRAME_HEADER_LEN: usize = 9;
const FRAME_TYPE_SETTINGS: u8 = 0x4;
const FLAG_ACK: u8 = 0x1;

/// A TCP stream that reports, once, whether the server's first frame header is a SETTINGS frame.
struct PrefaceWatch {
    inner: TcpStream,
    header: [u8; FRAME_HEADER_LEN],
    header_len: usize,
    report: Option<oneshot::Sender<Preface>>,
}

impl PrefaceWatch {
    fn new(inner: TcpStream, report: oneshot::Sender<Preface>) -> Self {
        PrefaceWatch { inner, header: [0; FRAME_HEADER_LEN], header_len: 0, report: Some(report) }
    }

    /// Looks at newly read bytes (`None`: a read error) until the first frame header is complete.
    fn observe(&mut self, read: Option<&[u8]>) {
        if self.report.is_none() {
            return;
        }
        let verdict = match read {
            None | Some([]) => Some(Preface::Closed),
            Some(bytes) => {
                let n = bytes.len().min(FRAME_HEADER_LEN - self.header_len);
                self.header[self.header_len..self.header_len + n].copy_from_slice(&bytes[..n]);
                self.header_len += n;
                (self.header_len == FRAME_HEADER_LEN).then(|| preface_of(&self.header))
            }
        };
        if let Some(verdict) = verdict
            && let Some(report) = self.report.take()
        {
            let _ = report.send(verdict);
        }
    }
}

fn preface_of(header: &[u8; FRAME_HEADER_LEN]) -> Preface {
    if header[3] == FRAME_TYPE_SETTINGS && header[4] & FLAG_ACK == 0 {
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
            Poll::Ready(Ok(())) if had_room => this.observe(Some(&buf.filled()[before..])),
            Poll::Ready(Ok(())) => {}
            Poll::Ready(Err(_)) => this.observe(None),
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

    #[test]
    fn preface_needs_a_settings_frame() {
        // SETTINGS, length 0, no flags, stream 0.
        assert_eq!(preface_of(&[0, 0, 0, 4, 0, 0, 0, 0, 0]), Preface::Settings);
        // SETTINGS ACK is not a server preface.
        assert_eq!(preface_of(&[0, 0, 0, 4, 1, 0, 0, 0, 0]), Preface::NotHttp2);
        assert_eq!(preface_of(b"HTTP/1.1 "), Preface::NotHttp2);
    }
}
