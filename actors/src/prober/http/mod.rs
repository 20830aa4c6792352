//! HTTP GET probes (upstream `pkg/probe/http`: `request.go` builds the request, `http.go` sends
//! it with the kubelet's client settings and maps the answer to a result).
//!
//! [`HttpProbeRequest::new`] is pure: it turns a probe's `httpGet` into the URL, header list and
//! virtual host that upstream's `NewRequestForHTTPGetAction` builds. [`HttpProber::probe`] sends
//! it over a fresh connection per request (keep-alive off, no proxy, no compression, TLS without
//! certificate verification), follows redirects by hand the way the kubelet's
//! `RedirectChecker(false)` lets Go's client follow them, and maps the answer as `DoHTTPProbe`.
//!
//! Probe paths are URL references that the kubelet hands to Go's `net/url`, and what reaches the
//! server is whatever Go's parser and `URL.String()` make of them; the `go_url` module below
//! ports the parts of `net/url` that decide that. Transport errors become probe output that
//! users read in events, so their texts imitate Go's
//! (`Get "<url>": dial tcp …: connect: connection refused`). Connections come from the probe
//! dialer shared with the TCP probe ([`super::tcp::dial`]). Decisions: `docs/http-probe.md`.
//!
//! The parts, one job each: `request` builds the request (pure), `go_url` is the port of Go's
//! `net/url` it needs, `errors` writes transport failures in Go's words, `tls` is the
//! certificate-blind client configuration, `wire` is one HTTP/1.1 round trip on a connection,
//! `http2` one HTTP/2 round trip on a TLS connection whose server picked `h2`; this file dials,
//! sends the request and follows redirects.

mod errors;
mod go_url;
mod http2;
mod request;
mod tls;
pub(crate) mod wire;

use std::borrow::Cow;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use rustls::ClientConfig;
use rustls::pki_types::ServerName;
use tokio::net::TcpStream;
use tokio::time::{Instant, timeout_at};
use tokio_util::either::Either;

pub(crate) use self::errors::transport_error;
use self::errors::{go_io_text, tls_error_text};
use self::go_url::{GoUrl, split_host_port};
use self::http2::Failure;
pub(crate) use self::request::FirstRequest;
pub use self::request::{HttpProbeRequest, send_refusal};
use self::request::{build_request, first_value, referer_for, wire_headers};
pub use self::tls::insecure_tls_config;
use self::tls::probe_tls_config;
use super::tcp::{deadline_after, dial};
use super::{ProbeError, ProbeOutcome, Probed};
use crate::gofmt::go_quote;

/// Upstream `maxRespBodyLength`: the most of a response body a probe reads (10 KiB).
pub const MAX_RESPONSE_BODY_BYTES: usize = 10 * 1024;

/// Redirects the kubelet follows before giving up (Go's client default).
pub const MAX_REDIRECTS: usize = 10;

/// How much of a followed redirect's body Go's client reads before the next request, when the
/// body is no longer than this or of unknown length (net/http's `maxBodySlurpSize`).
const MAX_BODY_SLURP: usize = 2 << 10;

/// Output prefix of a 3xx answer (a warning); the body follows.
pub const REDIRECT_WARNING_PREFIX: &str = "Probe terminated redirects, Response body: ";

/// Output prefix of a non-2xx/3xx answer; the code follows. Upstream keeps the body out of it
/// (issue 99425), and so do we.
pub const FAILED_STATUS_PREFIX: &str = "HTTP probe failed with statuscode: ";

/// The error Go's client reports when the redirect limit is hit.
pub const TOO_MANY_REDIRECTS: &str = "stopped after 10 redirects";

/// Go's text when `Client.Timeout` expires before the response head arrived.
const HEADERS_TIMEOUT: &str = "context deadline exceeded (Client.Timeout exceeded while awaiting headers)";

/// What Go appends to a dial error that its client timeout caused.
const CLIENT_TIMEOUT_NOTE: &str = " (Client.Timeout exceeded while awaiting headers)";

/// Go's text when `Client.Timeout` expires while the body is being read.
const BODY_TIMEOUT: &str =
    "context deadline exceeded (Client.Timeout or context cancellation while reading body)";

// === impl HttpProber ===

/// Sends HTTP probes. Holds the TLS client configuration (certificate verification off, ring
/// provider, ALPN `h2, http/1.1` unless HTTP/2 is off); cheap to clone, build once and share.
#[derive(Debug, Clone)]
pub struct HttpProber {
    /// The TLS client settings, or why they could not be built (then HTTPS probes fail).
    tls: Result<Arc<ClientConfig>, String>,
}

/// The environment variable with which apimachinery's `SetTransportDefaults` leaves HTTP/2 off
/// the kubelet's probe transport: any non-empty value.
pub const DISABLE_HTTP2_ENV: &str = "DISABLE_HTTP2";

impl Default for HttpProber {
    fn default() -> Self {
        HttpProber::new()
    }
}

/// One response whose body is still to be read, on its connection (dropping it closes the
/// socket): HTTP/1.1, or HTTP/2 when a TLS server picked `h2` (boxed: it is large, and rare).
enum Exchange {
    H1(wire::Response<Stream>),
    H2(Box<http2::Response<TlsStream>>),
}

impl Exchange {
    fn status(&self) -> u16 {
        match self {
            Exchange::H1(response) => response.status,
            Exchange::H2(response) => response.status,
        }
    }

    fn take_location(&mut self) -> Option<String> {
        match self {
            Exchange::H1(response) => response.location.take(),
            Exchange::H2(response) => response.location.take(),
        }
    }

    fn body_is_slurped(&self) -> bool {
        match self {
            Exchange::H1(response) => response.body_is_slurped(),
            Exchange::H2(response) => response.body_is_slurped(),
        }
    }

    async fn read_body(self, cap: usize) -> Result<Vec<u8>, String> {
        match self {
            Exchange::H1(response) => response.read_body(cap).await,
            Exchange::H2(response) => Box::pin(response.read_body(cap)).await,
        }
    }
}

impl HttpProber {
    /// An HTTP prober that, as upstream, does not verify the server's certificate, and offers
    /// HTTP/2 over TLS unless `DISABLE_HTTP2` is set to a non-empty value, as the kubelet's
    /// transport reads it at start (docs/http-probe.md, "HTTP/2 over TLS").
    pub fn new() -> Self {
        HttpProber::with_http2(http2_allowed(std::env::var_os(DISABLE_HTTP2_ENV)))
    }

    /// An HTTP prober whose HTTPS probes offer ALPN `h2, http/1.1` (`http2`), or no protocol
    /// at all, so that the server answers in HTTP/1.1 (the kubelet with `DISABLE_HTTP2`).
    pub fn with_http2(http2: bool) -> Self {
        HttpProber { tls: probe_tls_config(http2) }
    }

    /// Runs the probe (upstream `DoHTTPProbe` with the kubelet's client): connect, redirects,
    /// headers and body all within `timeout`. A transport error or timeout is a failure whose
    /// output is the error text; only a failed body read is an `Err`. Must run inside a Tokio
    /// runtime. The probe's own task reads and writes its connection: nothing is spawned.
    pub async fn probe(&self, request: &HttpProbeRequest, timeout: Duration) -> Result<Probed, ProbeError> {
        let start = match request.first() {
            Some(first) => Start::Kept(first),
            None => Start::Whole(request),
        };
        self.probe_from(start, || Ok(Cow::Borrowed(request)), timeout).await
    }

    /// [`HttpProber::probe`] from where the first round trip comes from (what a worker keeps
    /// between its probes, or the whole request), and how to build the whole request should the
    /// answer be a redirect.
    pub(crate) async fn probe_from<'r>(
        &self,
        start: Start<'_>,
        whole: impl FnOnce() -> Result<Cow<'r, HttpProbeRequest>, ProbeError>,
        timeout: Duration,
    ) -> Result<Probed, ProbeError> {
        // Zero means no timeout, as for Go's `http.Client` (the API server never lets it be 0).
        let deadline = deadline_after(if timeout.is_zero() { Duration::MAX } else { timeout });
        let exchange = match self.follow_redirects(start, whole, deadline).await {
            Ok(exchange) => exchange,
            Err(output) => return Ok(Probed::new(ProbeOutcome::Failure, output)),
        };
        let status = exchange.status();
        let body = match timeout_at(deadline, exchange.read_body(MAX_RESPONSE_BODY_BYTES)).await {
            Ok(body) => body.map_err(ProbeError::BodyRead)?,
            Err(_) => return Err(ProbeError::BodyRead(BODY_TIMEOUT.to_owned())),
        };
        let body = String::from_utf8_lossy(&body);
        Ok(match status {
            200..=299 => Probed::new(ProbeOutcome::Success, body),
            300..=399 => Probed::new(ProbeOutcome::Warning, format!("{REDIRECT_WARNING_PREFIX}{body}")),
            _ => Probed::new(ProbeOutcome::Failure, format!("{FAILED_STATUS_PREFIX}{status}")),
        })
    }

    /// Go's `Client.do` loop with the kubelet's redirect checker: follow 301/302/303/307/308
    /// with a Location while the hostname stays the original one, at most 10 requests. Errors
    /// come back as the full output text (`Get "<url>": <error>`). The first round trip sends
    /// `first`; only a redirect needs the whole request, which `whole` gives.
    async fn follow_redirects<'r>(
        &self,
        start: Start<'_>,
        whole: impl FnOnce() -> Result<Cow<'r, HttpProbeRequest>, ProbeError>,
        deadline: Instant,
    ) -> Result<Exchange, String> {
        let (url_text, sent_first) = match start {
            Start::Kept(first) => {
                let sent = self.round_trip(first.scheme(), first.host(), Wire::First(first), deadline).await;
                (Cow::Borrowed(first.url()), sent)
            }
            Start::Whole(request) => {
                let wire =
                    Wire::Hop(&request.url, wire_headers(&request.headers, request.host_header(), None));
                let sent = self.round_trip(&request.url.scheme, &request.url.host, wire, deadline).await;
                (Cow::Owned(request.url.to_string()), sent)
            }
        };
        let mut exchange = match sent_first {
            Ok(exchange) => exchange,
            Err(error) => return Err(transport_error(&url_text, &error)),
        };
        let Some(mut location) = redirect_location(&mut exchange) else { return Ok(exchange) };
        // Built from the same spec, container and pod IP as the first request: it cannot fail.
        let request = whole().map_err(|e| transport_error(&url_text, &e.to_string()))?;
        let original_hostname = request.url.hostname();
        let mut hop: Option<Hop> = None;
        let mut sent = 1;
        loop {
            let (url, virtual_host) = match &hop {
                None => (&request.url, request.virtual_host.as_deref()),
                Some(hop) => (&hop.url, hop.virtual_host.as_deref()),
            };
            let target = match GoUrl::parse(&location) {
                Ok(target) => target,
                Err(e) => {
                    let error = format!("failed to parse Location header {}: {e}", go_quote(&location));
                    return Err(transport_error(&url.to_string(), &error));
                }
            };
            let next = url.resolve(&target);
            // Go keeps a custom Host only through relative redirects (issue 22233).
            let next_virtual_host =
                virtual_host.filter(|h| *h != url.host && target.scheme.is_empty()).map(str::to_owned);
            let next_referer = referer_for(url, &next, first_value(&request.headers, "Referer"));
            if next.hostname() != original_hostname {
                return Ok(exchange);
            }
            // Go reads up to 2 KiB of a followed redirect's body first (`maxBodySlurpSize`, so
            // that a small one does not spoil the connection), within the probe's timeout: a
            // redirect whose small body stalls holds the probe until then.
            if exchange.body_is_slurped() {
                let _ = timeout_at(deadline, exchange.read_body(MAX_BODY_SLURP)).await;
            } else {
                drop(exchange);
            }
            if sent >= MAX_REDIRECTS {
                return Err(transport_error(&location, TOO_MANY_REDIRECTS));
            }
            let next = Hop { url: next, virtual_host: next_virtual_host, referer: next_referer };
            if Instant::now() >= deadline {
                // Go's next request finds its context expired before it dials.
                return Err(transport_error(&next.url.to_string(), HEADERS_TIMEOUT));
            }
            let host = next.virtual_host.as_deref().unwrap_or(&next.url.host);
            let wire = Wire::Hop(&next.url, wire_headers(&request.headers, host, next.referer.as_deref()));
            exchange = match self.round_trip(&next.url.scheme, &next.url.host, wire, deadline).await {
                Ok(exchange) => exchange,
                Err(error) => return Err(transport_error(&next.url.to_string(), &error)),
            };
            sent += 1;
            hop = Some(next);
            match redirect_location(&mut exchange) {
                Some(next_location) => location = next_location,
                None => return Ok(exchange),
            }
        }
    }

    /// One request on a new connection; errors are Go-like texts without the `Get "<url>"`.
    async fn round_trip(
        &self,
        scheme: &str,
        host: &str,
        wire: Wire<'_>,
        deadline: Instant,
    ) -> Result<Exchange, String> {
        let tls = match scheme {
            "http" => None,
            "https" => Some(self.tls.clone()?),
            other => return Err(format!("unsupported protocol scheme {}", go_quote(other))),
        };
        if host.is_empty() {
            return Err("http: no Host in request URL".to_owned());
        }
        let (hostname, port) = split_host_port(host);
        let port = match port {
            "" if tls.is_some() => 443,
            "" => 80,
            port => port.parse::<u16>().map_err(|_| format!("dial tcp: address {port}: invalid port"))?,
        };
        let wire = match wire {
            Wire::First(first) => first.request(),
            Wire::Hop(url, headers) => build_request(url, &headers)?,
        };
        // Go's transport sends a request an HTTP/2 server did not process again, on a new
        // connection that negotiates its protocol anew, for as long as its context lasts; a
        // GET without a body is always safe to send again (docs/http-probe.md).
        loop {
            let stream = match dial(hostname, port, deadline).await {
                Ok(stream) => stream,
                // Go adds the client's note to errors caused by its timeout.
                Err(e) if Instant::now() >= deadline => return Err(format!("{e}{CLIENT_TIMEOUT_NOTE}")),
                Err(e) => return Err(e.to_string()),
            };
            let handshake_and_send = async {
                match &tls {
                    None => wire::round_trip(Either::Left(stream), &wire)
                        .await
                        .map(Exchange::H1)
                        .map_err(Failure::from),
                    // Boxed: inline, the TLS handshake's state would be part of every plain
                    // probe's future too, and a probe's future is held for as long as it is in
                    // flight.
                    Some(config) => {
                        Box::pin(tls_exchange(config.clone(), hostname, stream, wire.clone())).await
                    }
                }
            };
            match timeout_at(deadline, handshake_and_send).await {
                Ok(Err(Failure { text, unprocessed: true })) => {
                    tracing::debug!(
                        host,
                        error = %text,
                        "HTTP probe sends a request the server did not process again"
                    );
                    // Go's next attempt finds its context done before it dials.
                    if Instant::now() >= deadline {
                        return Err(HEADERS_TIMEOUT.to_owned());
                    }
                }
                Ok(result) => return result.map_err(|failure| failure.text),
                Err(_) => return Err(HEADERS_TIMEOUT.to_owned()),
            }
        }
    }
}

/// Whether HTTPS probes offer HTTP/2, given `DISABLE_HTTP2`'s value: apimachinery leaves
/// HTTP/2 off for any non-empty value.
fn http2_allowed(disable_http2: Option<std::ffi::OsString>) -> bool {
    disable_http2.is_none_or(|value| value.is_empty())
}

/// Where a redirect leads: the next round trip's URL, virtual host and Referer.
struct Hop {
    url: GoUrl,
    virtual_host: Option<String>,
    referer: Option<String>,
}

/// Where a probe's first round trip comes from: the kept first request, or (for a request that
/// cannot be written, which then fails as Go's transport fails) the whole request.
pub(crate) enum Start<'a> {
    /// The first request a worker kept.
    Kept(&'a FirstRequest),
    /// The whole request, built for this probe.
    Whole(&'a HttpProbeRequest),
}

/// What one round trip sends: the request's first one, or a redirect's URL and headers.
enum Wire<'a> {
    First(&'a FirstRequest),
    Hop(&'a GoUrl, Vec<(String, String)>),
}

/// The Location a 301/302/303/307/308 answer redirects to, when it has a non-empty one.
fn redirect_location(exchange: &mut Exchange) -> Option<String> {
    exchange.take_location().filter(|l| !l.is_empty())
}

/// [`wire::round_trip`] over TLS, verification off as upstream's; [`http2::round_trip`] when
/// the server picked `h2` from the probe's ALPN offer.
async fn tls_exchange(
    config: Arc<ClientConfig>,
    hostname: &str,
    stream: TcpStream,
    request: Bytes,
) -> Result<Exchange, Failure> {
    // Host names rustls cannot carry as SNI (`my_host`) go without SNI, as an IP address does.
    let name = match (ServerName::try_from(hostname.to_owned()), stream.peer_addr()) {
        (Ok(name), _) => name,
        (Err(_), Ok(peer)) => ServerName::from(peer.ip()),
        (Err(_), Err(e)) => return Err(go_io_text(&e).into()),
    };
    let tls_stream = tokio_rustls::TlsConnector::from(config)
        .connect(name, stream)
        .await
        .map_err(|e| tls_error_text(&e))?;
    let tls_stream = Box::new(tls_stream);
    if tls_stream.get_ref().1.alpn_protocol() == Some(b"h2") {
        return http2::round_trip(tls_stream, &request).await.map(|r| Exchange::H2(Box::new(r)));
    }
    wire::round_trip(Either::Right(tls_stream), &request).await.map(Exchange::H1).map_err(Failure::from)
}

/// A probe's TLS session, boxed: it is large, and a plain probe in flight holds a [`Stream`].
type TlsStream = Box<tokio_rustls::client::TlsStream<TcpStream>>;

/// A probe's connection, plain or TLS.
type Stream = Either<TcpStream, TlsStream>;

#[cfg(test)]
mod tests {
    use k8s_openapi::api::core::v1::{Container, HTTPGetAction};
    use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;

    use super::*;

    /// `DISABLE_HTTP2` turns HTTP/2 off with any non-empty value, as in apimachinery's
    /// `SetTransportDefaults`; unset or empty leaves it on.
    #[test]
    fn disable_http2_is_read_as_apimachinery_reads_it() {
        assert!(http2_allowed(None));
        assert!(http2_allowed(Some("".into())));
        assert!(!http2_allowed(Some("true".into())));
        assert!(!http2_allowed(Some("0".into())));
    }

    /// A probe in flight holds its whole future: a plain HTTP probe's must not carry the TLS
    /// handshake's state too (in a release build 4,968 bytes with it, 3,648 without, and 2,296
    /// since the exchange is the probe's own rather than hyper's), since a burst keeps a
    /// thousand of them in flight (docs/memory.md, "The burst of first probes").
    #[test]
    fn a_plain_http_probe_carries_no_tls_state() {
        let action = HTTPGetAction { port: IntOrString::Int(8080), ..Default::default() };
        let request = HttpProbeRequest::new(&action, &Container::default(), "127.0.0.1").expect("a request");
        let prober = HttpProber::new();
        let in_flight = prober.probe(&request, Duration::from_secs(1));
        let size = std::mem::size_of_val(&in_flight);
        assert!(size <= 3072, "an HTTP probe's future is {size} bytes");
    }
}
