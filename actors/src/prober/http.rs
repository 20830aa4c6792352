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

use std::fmt;
use std::io;
use std::net::Ipv6Addr;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http::header::{HeaderName, HeaderValue};
use http_body_util::{BodyExt, Empty};
use hyper::body::Incoming;
use hyper_util::rt::TokioIo;
use k8s_openapi::api::core::v1::{Container, HTTPGetAction, HTTPHeader};
use rustls::ClientConfig;
use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::crypto::CryptoProvider;
use rustls::pki_types::{CertificateDer, ServerName, UnixTime};
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::time::{Instant, timeout_at};

use self::go_url::GoUrl;
use super::port::resolve_container_port;
use super::tcp::{deadline_after, dial, join_host_port};
use super::{KUBE_PROBE_USER_AGENT, Outcome, ProbeError, Probed};
use crate::gofmt::go_quote;

/// Upstream `maxRespBodyLength`: the most of a response body a probe reads (10 KiB).
pub const MAX_RESPONSE_BODY_BYTES: usize = 10 * 1024;

/// Redirects the kubelet follows before giving up (Go's client default).
pub const MAX_REDIRECTS: usize = 10;

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

// === impl HttpProbeRequest ===

/// A request built from a probe spec; pure, no I/O (upstream `NewRequestForHTTPGetAction`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HttpProbeRequest {
    /// The target as Go's `http.NewRequest` leaves it after re-parsing `URL.String()`.
    url: GoUrl,
    /// `url` rendered by Go's `URL.String()`, for [`Self::url`] and error texts.
    url_text: String,
    /// Upstream's `req.Header`: the supplied headers with canonical names in spec order, then the
    /// default User-Agent and Accept when absent. As upstream, `Host` entries and an empty
    /// User-Agent stay in this list; [`wire_headers`] decides what is sent.
    headers: Vec<(String, String)>,
    /// Upstream's `req.Host`: the first supplied `Host` value when it is non-empty.
    virtual_host: Option<String>,
}

impl HttpProbeRequest {
    /// Builds the request: scheme lower-cased (default `http`), host from `action.host` or the
    /// pod IP, port resolved against the container, path parsed as a URL reference, headers
    /// canonicalised with the kubelet's defaults. Port errors keep their upstream texts; a
    /// header, host or path the request cannot carry is [`ProbeError::InvalidRequest`].
    pub fn new(action: &HTTPGetAction, container: &Container, pod_ip: &str) -> Result<Self, ProbeError> {
        let scheme = match action.scheme.as_deref() {
            Some(s) if !s.is_empty() => s.to_lowercase(),
            _ => "http".to_owned(),
        };
        let host = match action.host.as_deref() {
            Some(h) if !h.is_empty() => h,
            _ => pod_ip,
        };
        let port = resolve_container_port(&action.port, container)?;
        let url = format_url(&scheme, host, port, action.path.as_deref().unwrap_or(""))?;
        let headers = probe_headers(action.http_headers.as_deref().unwrap_or_default())?;
        let virtual_host = first_value(&headers, "Host").filter(|h| !h.is_empty()).map(str::to_owned);
        if virtual_host.as_deref().is_some_and(|h| !valid_host_header(h)) {
            return Err(ProbeError::InvalidRequest("http: invalid Host header".to_owned()));
        }
        request_target(&url).map_err(ProbeError::InvalidRequest)?;
        let url_text = url.to_string();
        Ok(HttpProbeRequest { url, url_text, headers, virtual_host })
    }

    /// The target URL as upstream renders it, e.g. `http://10.0.0.1:8080/healthz?x=1`.
    pub fn url(&self) -> &str {
        &self.url_text
    }

    /// Upstream's request header list, in order: supplied headers with canonical names (`Host`
    /// and an empty `User-Agent` included), then the default `User-Agent` and `Accept` if absent.
    pub fn headers(&self) -> &[(String, String)] {
        &self.headers
    }

    /// The `Host` header the first request carries: the supplied virtual host, else `host:port`.
    pub fn host_header(&self) -> &str {
        self.virtual_host.as_deref().unwrap_or(&self.url.host)
    }
}

/// Upstream `formatURL` followed by `http.NewRequest(url.String())`: the path is a URL
/// reference (kept verbatim as a path when Go cannot parse it), then scheme and `host:port` are
/// set, and the result is re-parsed as Go does.
fn format_url(scheme: &str, host: &str, port: u16, path: &str) -> Result<GoUrl, ProbeError> {
    if host.is_empty() {
        return Err(ProbeError::InvalidRequest(
            "no host to probe: httpGet.host and the pod IP are both empty".to_owned(),
        ));
    }
    if !usable_host(host) {
        return Err(ProbeError::InvalidRequest(format!(
            "invalid host {}: not an IP address or host name",
            go_quote(host)
        )));
    }
    let host_port = join_host_port(host, port);
    let mut url = GoUrl::parse(path).unwrap_or_else(|_| GoUrl::with_raw_path(path));
    url.scheme = scheme.to_owned();
    url.host = host_port.clone();
    let text = url.to_string();
    let url = GoUrl::parse(&text).map_err(ProbeError::InvalidRequest)?;
    if url.host.is_empty() {
        return Err(ProbeError::InvalidRequest(format!(
            "path {} cannot form a URL: http: no Host in request URL",
            go_quote(path)
        )));
    }
    if url.host != host_port {
        return Err(ProbeError::InvalidRequest(format!("invalid host {}", go_quote(host))));
    }
    Ok(url)
}

/// IP addresses and host names; anything else would change the URL's meaning or cannot be
/// dialled (`a/b`, `user@x`, `example.com:80`, spaces, …).
fn usable_host(host: &str) -> bool {
    if host.contains(':') {
        return host.parse::<Ipv6Addr>().is_ok();
    }
    !host.is_empty()
        && host.bytes().all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'.' | b'_' | b'~'))
}

/// Upstream `v1HeaderToHTTPHeader` plus the defaults of `newProbeRequest`.
fn probe_headers(supplied: &[HTTPHeader]) -> Result<Vec<(String, String)>, ProbeError> {
    let mut headers = Vec::with_capacity(supplied.len() + 2);
    for header in supplied {
        // Upstream's transport rejects these when sending; rejecting them here gives a clear
        // error instead of a failing probe.
        if !valid_header_name(&header.name) {
            return Err(ProbeError::InvalidRequest(format!(
                "net/http: invalid header field name {}",
                go_quote(&header.name)
            )));
        }
        let name = canonical_header_key(&header.name);
        if !valid_header_value(&header.value) {
            return Err(ProbeError::InvalidRequest(format!(
                "net/http: invalid header field value for {}",
                go_quote(&name)
            )));
        }
        headers.push((name, header.value.clone()));
    }
    if first_value(&headers, "User-Agent").is_none() {
        headers.push(("User-Agent".to_owned(), KUBE_PROBE_USER_AGENT.to_owned()));
    }
    match first_value(&headers, "Accept") {
        None => headers.push(("Accept".to_owned(), "*/*".to_owned())),
        // Go's `Header.Get` looks at the first value only, and `Del` drops them all.
        Some("") => headers.retain(|(name, _)| name != "Accept"),
        Some(_) => {}
    }
    Ok(headers)
}

/// Go's `Header.Get` on a list with canonical names.
fn first_value<'a>(headers: &'a [(String, String)], name: &str) -> Option<&'a str> {
    headers.iter().find(|(n, _)| n == name).map(|(_, v)| v.as_str())
}

/// Go's `textproto.CanonicalMIMEHeaderKey` for a valid token: upper-case the first letter and
/// every letter after a hyphen, lower-case the rest.
fn canonical_header_key(name: &str) -> String {
    let mut upper = true;
    name.chars()
        .map(|c| {
            let out = if upper { c.to_ascii_uppercase() } else { c.to_ascii_lowercase() };
            upper = c == '-';
            out
        })
        .collect()
}

/// Go's `httpguts.ValidHeaderFieldName`: a non-empty RFC 7230 token.
fn valid_header_name(name: &str) -> bool {
    !name.is_empty() && name.bytes().all(|b| b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&b))
}

/// Go's `httpguts.ValidHeaderFieldValue`: no control bytes except horizontal tab.
fn valid_header_value(value: &str) -> bool {
    value.bytes().all(|b| b == b'\t' || (b >= 0x20 && b != 0x7f))
}

/// Go's `httpguts.ValidHostHeader`.
fn valid_host_header(host: &str) -> bool {
    host.bytes().all(|b| b.is_ascii_alphanumeric() || b"!$%&()*+,-.:;=[']_~".contains(&b))
}

/// The request-target Go writes (`URL.RequestURI()`), as an `http::Uri`. Go writes the raw
/// query as it is; bytes that are not legal in a request line are percent-encoded here instead
/// of producing a malformed request.
fn request_target(url: &GoUrl) -> Result<http::Uri, String> {
    let mut target = String::with_capacity(url.path.len() + url.raw_query.len() + 2);
    if !url.path.starts_with('/') {
        target.push('/');
    }
    target.push_str(&url.path);
    if url.force_query || !url.raw_query.is_empty() {
        target.push('?');
        for c in url.raw_query.chars() {
            if c.is_ascii() && (c <= ' ' || matches!(c, '"' | '#' | '<' | '>' | '\x7f')) {
                target.push_str(&format!("%{:02X}", u32::from(c)));
            } else {
                target.push(c);
            }
        }
    }
    http::Uri::try_from(target).map_err(|e| format!("the URL cannot form a request target: {e}"))
}

/// The headers one request puts on the wire, in Go's order: `Host`, `User-Agent` (the first
/// value, unless empty), the other headers sorted by name (values in order), `Connection:
/// close`. Like Go's `Request.write`, values are trimmed, and `Host`, `Content-Length`,
/// `Transfer-Encoding` and `Trailer` from the list are not written. `referer` replaces any
/// supplied Referer (Go's redirect handling sets it).
fn wire_headers(headers: &[(String, String)], host: &str, referer: Option<&str>) -> Vec<(String, String)> {
    let mut wire = vec![("Host".to_owned(), host.to_owned())];
    if let Some(agent) = first_value(headers, "User-Agent").filter(|a| !a.is_empty()) {
        wire.push(("User-Agent".to_owned(), trim_value(agent).to_owned()));
    }
    let mut rest: Vec<(&str, &str)> = headers
        .iter()
        .filter(|(n, _)| {
            !matches!(n.as_str(), "Host" | "User-Agent" | "Content-Length" | "Transfer-Encoding" | "Trailer")
                && (referer.is_none() || n != "Referer")
        })
        .map(|(n, v)| (n.as_str(), v.as_str()))
        .collect();
    if let Some(referer) = referer {
        rest.push(("Referer", referer));
    }
    // Stable: values of one name keep their order.
    rest.sort_by(|a, b| a.0.cmp(b.0));
    wire.extend(rest.into_iter().map(|(n, v)| (n.to_owned(), trim_value(v).to_owned())));
    let asks_close = headers
        .iter()
        .filter(|(n, _)| n == "Connection")
        .any(|(_, v)| v.split(',').any(|t| t.trim().eq_ignore_ascii_case("close")));
    if !asks_close {
        wire.push(("Connection".to_owned(), "close".to_owned()));
    }
    wire
}

/// Go's `textproto.TrimString`.
fn trim_value(value: &str) -> &str {
    value.trim_matches([' ', '\t', '\r', '\n'])
}

/// Go's `refererForURL`: no Referer from https to http; a supplied one wins over the last URL.
fn referer_for(last: &GoUrl, next: &GoUrl, supplied: Option<&str>) -> Option<String> {
    if last.scheme == "https" && next.scheme == "http" {
        return None;
    }
    match supplied {
        Some(r) if !r.is_empty() => Some(r.to_owned()),
        _ => Some(last.to_string()),
    }
}

// === impl HttpProber ===

/// Sends HTTP probes. Holds the TLS client configuration (certificate verification off, ring
/// provider); cheap to clone, build once and share.
#[derive(Debug, Clone)]
pub struct HttpProber {
    /// The TLS client settings, or why they could not be built (then HTTPS probes fail).
    tls: Result<Arc<ClientConfig>, String>,
}

impl Default for HttpProber {
    fn default() -> Self {
        HttpProber::new()
    }
}

/// One response whose body is still to be read, with the task driving its connection.
struct Exchange {
    response: http::Response<Incoming>,
    /// Aborts the connection task when the body is no longer needed.
    _connection: ConnectionTask,
}

impl HttpProber {
    pub fn new() -> Self {
        HttpProber { tls: insecure_tls_config() }
    }

    /// Runs the probe (upstream `DoHTTPProbe` with the kubelet's client): connect, redirects,
    /// headers and body all within `timeout`. A transport error or timeout is a failure whose
    /// output is the error text; only a failed body read is an `Err`. Must run inside a Tokio
    /// runtime (each connection is driven by a spawned task).
    pub async fn probe(&self, request: &HttpProbeRequest, timeout: Duration) -> Result<Probed, ProbeError> {
        // Zero means no timeout, as for Go's `http.Client` (the API server never lets it be 0).
        let deadline = deadline_after(if timeout.is_zero() { Duration::MAX } else { timeout });
        let exchange = match self.follow_redirects(request, deadline).await {
            Ok(exchange) => exchange,
            Err(output) => return Ok(Probed::new(Outcome::Failure, output)),
        };
        let status = exchange.response.status().as_u16();
        let body = match timeout_at(deadline, read_body(exchange.response.into_body())).await {
            Ok(body) => body?,
            Err(_) => return Err(ProbeError::BodyRead(BODY_TIMEOUT.to_owned())),
        };
        let body = String::from_utf8_lossy(&body);
        Ok(match status {
            200..=299 => Probed::new(Outcome::Success, body),
            300..=399 => Probed::new(Outcome::Warning, format!("{REDIRECT_WARNING_PREFIX}{body}")),
            _ => Probed::new(Outcome::Failure, format!("{FAILED_STATUS_PREFIX}{status}")),
        })
    }

    /// Go's `Client.do` loop with the kubelet's redirect checker: follow 301/302/303/307/308
    /// with a Location while the hostname stays the original one, at most 10 requests. Errors
    /// come back as the full output text (`Get "<url>": <error>`).
    async fn follow_redirects(
        &self,
        request: &HttpProbeRequest,
        deadline: Instant,
    ) -> Result<Exchange, String> {
        let original_hostname = request.url.hostname();
        let mut url = request.url.clone();
        let mut virtual_host = request.virtual_host.clone();
        let mut referer: Option<String> = None;
        let mut sent = 0;
        loop {
            let host = virtual_host.as_deref().unwrap_or(&url.host);
            let wire = wire_headers(&request.headers, host, referer.as_deref());
            let exchange = match self.round_trip(&url, &wire, deadline).await {
                Ok(exchange) => exchange,
                Err(error) => return Err(transport_error(&url.to_string(), &error)),
            };
            sent += 1;
            if !matches!(exchange.response.status().as_u16(), 301 | 302 | 303 | 307 | 308) {
                return Ok(exchange);
            }
            let location = match exchange.response.headers().get(http::header::LOCATION) {
                Some(value) => String::from_utf8_lossy(value.as_bytes()).into_owned(),
                None => return Ok(exchange),
            };
            if location.is_empty() {
                return Ok(exchange);
            }
            let target = match GoUrl::parse(&location) {
                Ok(target) => target,
                Err(e) => {
                    let error = format!("failed to parse Location header {}: {e}", go_quote(&location));
                    return Err(transport_error(&url.to_string(), &error));
                }
            };
            let next = url.resolve(&target);
            // Go keeps a custom Host only through relative redirects (issue 22233).
            let next_virtual_host = virtual_host.filter(|h| *h != url.host && target.scheme.is_empty());
            let next_referer = referer_for(&url, &next, first_value(&request.headers, "Referer"));
            if next.hostname() != original_hostname {
                return Ok(exchange);
            }
            if sent >= MAX_REDIRECTS {
                return Err(transport_error(&location, TOO_MANY_REDIRECTS));
            }
            drop(exchange);
            url = next;
            virtual_host = next_virtual_host;
            referer = next_referer;
        }
    }

    /// One request on a new connection; errors are Go-like texts without the `Get "<url>"`.
    async fn round_trip(
        &self,
        url: &GoUrl,
        headers: &[(String, String)],
        deadline: Instant,
    ) -> Result<Exchange, String> {
        let tls = match url.scheme.as_str() {
            "http" => None,
            "https" => Some(self.tls.clone()?),
            other => return Err(format!("unsupported protocol scheme {}", go_quote(other))),
        };
        if url.host.is_empty() {
            return Err("http: no Host in request URL".to_owned());
        }
        if let Some((_, host)) = headers.iter().find(|(n, _)| n == "Host")
            && !valid_host_header(host)
        {
            return Err("http: invalid Host header".to_owned());
        }
        let hostname = url.hostname();
        let port = match url.port() {
            "" if tls.is_some() => 443,
            "" => 80,
            port => port.parse::<u16>().map_err(|_| format!("dial tcp: address {port}: invalid port"))?,
        };
        let wire = build_request(url, headers)?;
        let stream = match dial(&hostname, port, deadline).await {
            Ok(stream) => stream,
            // Go adds the client's note to errors caused by its timeout.
            Err(e) if Instant::now() >= deadline => return Err(format!("{e}{CLIENT_TIMEOUT_NOTE}")),
            Err(e) => return Err(e.to_string()),
        };
        let handshake_and_send = async {
            match tls {
                None => exchange(stream, wire).await,
                Some(config) => {
                    // Host names rustls cannot carry as SNI (`my_host`) go without SNI, as an
                    // IP address does; verification is off anyway.
                    let name = match (ServerName::try_from(hostname.clone()), stream.peer_addr()) {
                        (Ok(name), _) => name,
                        (Err(_), Ok(peer)) => ServerName::from(peer.ip()),
                        (Err(_), Err(e)) => return Err(go_io_text(&e)),
                    };
                    let tls_stream = tokio_rustls::TlsConnector::from(config)
                        .connect(name, stream)
                        .await
                        .map_err(|e| tls_error_text(&e))?;
                    exchange(tls_stream, wire).await
                }
            }
        };
        match timeout_at(deadline, handshake_and_send).await {
            Ok(result) => result,
            Err(_) => Err(HEADERS_TIMEOUT.to_owned()),
        }
    }
}

/// Go's `url.Error` text for a failed `client.Do`.
fn transport_error(url: &str, error: &str) -> String {
    format!("Get {}: {error}", go_quote(url))
}

/// The hyper request for one round trip: GET, origin-form target, the wire headers in order.
fn build_request(url: &GoUrl, headers: &[(String, String)]) -> Result<http::Request<Empty<Bytes>>, String> {
    let mut request = http::Request::new(Empty::new());
    *request.uri_mut() = request_target(url)?;
    let map = request.headers_mut();
    for (name, value) in headers {
        let name = HeaderName::from_bytes(name.as_bytes())
            .map_err(|_| format!("net/http: invalid header field name {}", go_quote(name)))?;
        let value = HeaderValue::from_bytes(value.as_bytes())
            .map_err(|_| format!("net/http: invalid header field value for {}", go_quote(name.as_str())))?;
        map.append(name, value);
    }
    Ok(request)
}

/// Sends `request` over `io` with HTTP/1.1 (header names in canonical case, as Go writes them).
async fn exchange<T>(io: T, request: http::Request<Empty<Bytes>>) -> Result<Exchange, String>
where
    T: AsyncRead + AsyncWrite + Send + Unpin + 'static,
{
    let (mut sender, connection) = hyper::client::conn::http1::Builder::new()
        .title_case_headers(true)
        .handshake(TokioIo::new(io))
        .await
        .map_err(|e| hyper_text(&e))?;
    let connection = ConnectionTask(tokio::spawn(async move {
        // Its errors also reach the pending request or the body, which report them.
        let _ = connection.await;
    }));
    sender.ready().await.map_err(|e| hyper_text(&e))?;
    let response = sender.send_request(request).await.map_err(|e| hyper_text(&e))?;
    Ok(Exchange { response, _connection: connection })
}

/// Reads at most [`MAX_RESPONSE_BODY_BYTES`]; reaching the cap is not an error (upstream
/// `ReadAtMost` with `ErrLimitReached` treated as non-fatal).
async fn read_body(mut body: Incoming) -> Result<Vec<u8>, ProbeError> {
    let mut out = Vec::new();
    while out.len() < MAX_RESPONSE_BODY_BYTES {
        match body.frame().await {
            None => break,
            Some(Err(e)) => return Err(ProbeError::BodyRead(body_error_text(&e))),
            Some(Ok(frame)) => {
                if let Ok(data) = frame.into_data() {
                    let room = MAX_RESPONSE_BODY_BYTES - out.len();
                    out.extend_from_slice(&data[..data.len().min(room)]);
                }
            }
        }
    }
    Ok(out)
}

/// Go-like text for a hyper error before the response head arrived.
fn hyper_text(error: &hyper::Error) -> String {
    if error.is_incomplete_message() {
        return "EOF".to_owned();
    }
    match io_source(error) {
        Some(io) => go_io_text(io),
        None => error_chain(error),
    }
}

/// Go-like text for a failed body read: a body shorter than announced is `unexpected EOF`.
fn body_error_text(error: &hyper::Error) -> String {
    match io_source(error) {
        Some(io) if io.kind() == io::ErrorKind::UnexpectedEof => "unexpected EOF".to_owned(),
        _ if error.is_incomplete_message() => "unexpected EOF".to_owned(),
        Some(io) => go_io_text(io),
        None => error_chain(error),
    }
}

/// The I/O error underneath a hyper error, if any.
fn io_source(error: &hyper::Error) -> Option<&io::Error> {
    let mut source = std::error::Error::source(error);
    while let Some(e) = source {
        if let Some(io) = e.downcast_ref::<io::Error>() {
            return Some(io);
        }
        source = e.source();
    }
    None
}

/// An error and its sources, `: `-separated (Go's wrapped-error style).
fn error_chain(error: &dyn std::error::Error) -> String {
    let mut text = error.to_string();
    let mut source = error.source();
    while let Some(e) = source {
        let part = e.to_string();
        if !text.ends_with(&part) {
            text.push_str(": ");
            text.push_str(&part);
        }
        source = e.source();
    }
    text
}

/// A failed TLS handshake; a server answering in plain HTTP gets Go's message for it.
fn tls_error_text(error: &io::Error) -> String {
    let plain_http = error.get_ref().and_then(|e| e.downcast_ref::<rustls::Error>()).is_some_and(|e| {
        matches!(e, rustls::Error::InvalidMessage(rustls::InvalidMessage::InvalidContentType))
    });
    if plain_http { "http: server gave HTTP response to HTTPS client".to_owned() } else { go_io_text(error) }
}

/// An OS error as Go prints it: `connection refused`, not `Connection refused (os error 111)`.
fn go_io_text(error: &io::Error) -> String {
    let text = error.to_string();
    let text = match text.rfind(" (os error ") {
        Some(i) if error.raw_os_error().is_some() => &text[..i],
        _ => text.as_str(),
    };
    let mut chars = text.chars();
    match chars.next() {
        Some(first) if error.raw_os_error().is_some() => first.to_lowercase().chain(chars).collect(),
        _ => text.to_owned(),
    }
}

/// The task driving one hyper connection; aborted (closing the socket) when dropped, so a
/// timed-out probe leaves nothing behind.
struct ConnectionTask(tokio::task::JoinHandle<()>);

impl Drop for ConnectionTask {
    fn drop(&mut self) {
        self.0.abort();
    }
}

// === TLS ===

/// Upstream's `tls.Config{InsecureSkipVerify: true}`: any certificate is accepted, but the
/// handshake signatures are still checked against it (as Go does).
fn insecure_tls_config() -> Result<Arc<ClientConfig>, String> {
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let config = ClientConfig::builder_with_provider(provider.clone())
        .with_safe_default_protocol_versions()
        .map_err(|e| format!("tls: {e}"))?
        .dangerous()
        .with_custom_certificate_verifier(Arc::new(SkipServerVerification(provider)))
        .with_no_client_auth();
    Ok(Arc::new(config))
}

struct SkipServerVerification(Arc<CryptoProvider>);

impl fmt::Debug for SkipServerVerification {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("SkipServerVerification")
    }
}

impl ServerCertVerifier for SkipServerVerification {
    fn verify_server_cert(
        &self,
        _end_entity: &CertificateDer<'_>,
        _intermediates: &[CertificateDer<'_>],
        _server_name: &ServerName<'_>,
        _ocsp_response: &[u8],
        _now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        Ok(ServerCertVerified::assertion())
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &rustls::DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls12_signature(message, cert, dss, &self.0.signature_verification_algorithms)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &rustls::DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls13_signature(message, cert, dss, &self.0.signature_verification_algorithms)
    }

    fn supported_verify_schemes(&self) -> Vec<rustls::SignatureScheme> {
        self.0.signature_verification_algorithms.supported_schemes()
    }
}

/// The parts of Go's `net/url` that decide what a probe requests: `Parse`, `String`,
/// `Hostname`, `Port` and `ResolveReference`. Paths and fragments are kept in their escaped
/// form (`EscapedPath`, `EscapedFragment`); userinfo is dropped.
mod go_url {
    use std::fmt;

    use super::go_quote;

    /// Go's `encoding` modes that matter here.
    #[derive(Debug, Clone, Copy, PartialEq, Eq)]
    enum Mode {
        Path,
        Host,
        Fragment,
    }

    #[derive(Debug, Clone, Default, PartialEq, Eq)]
    pub(super) struct GoUrl {
        /// Lower-cased.
        pub scheme: String,
        /// A rootless path after a scheme (`mailto:x`); such URLs have no host.
        pub opaque: String,
        /// Decoded `host` or `host:port`, IPv6 literals bracketed.
        pub host: String,
        /// `EscapedPath()`.
        pub path: String,
        /// A `?` with nothing after it.
        pub force_query: bool,
        pub raw_query: String,
        /// `EscapedFragment()`.
        pub fragment: String,
    }

    impl GoUrl {
        /// Go's `url.Parse`; the error is Go's text (`parse "<url>": …`).
        pub fn parse(raw: &str) -> Result<GoUrl, String> {
            let (main, fragment) = match raw.split_once('#') {
                Some((main, fragment)) => (main, fragment),
                None => (raw, ""),
            };
            let mut url = parse_main(main).map_err(|e| format!("parse {}: {e}", go_quote(main)))?;
            url.fragment = escaped_form(fragment, Mode::Fragment)
                .map_err(|e| format!("parse {}: {e}", go_quote(raw)))?;
            Ok(url)
        }

        /// Upstream's fallback for a path Go cannot parse: `url.URL{Path: path}`.
        pub fn with_raw_path(path: &str) -> GoUrl {
            GoUrl { path: escape(path.as_bytes(), Mode::Path), ..GoUrl::default() }
        }

        /// Go's `URL.Hostname()`: the host without port and brackets.
        pub fn hostname(&self) -> String {
            split_host_port(&self.host).0.to_owned()
        }

        /// Go's `URL.Port()`: the digits after the host, possibly empty.
        pub fn port(&self) -> &str {
            split_host_port(&self.host).1
        }

        /// Go's `URL.ResolveReference` (RFC 3986 §5.2, with Go's dot-segment handling).
        pub fn resolve(&self, reference: &GoUrl) -> GoUrl {
            let mut url = reference.clone();
            if reference.scheme.is_empty() {
                url.scheme = self.scheme.clone();
            }
            if !reference.scheme.is_empty() || !reference.host.is_empty() {
                url.path = resolve_path(&reference.path, "");
                return url;
            }
            if !reference.opaque.is_empty() {
                url.host.clear();
                url.path.clear();
                return url;
            }
            if reference.path.is_empty() && !reference.force_query && reference.raw_query.is_empty() {
                url.raw_query = self.raw_query.clone();
                url.force_query = self.force_query;
                if reference.fragment.is_empty() {
                    url.fragment = self.fragment.clone();
                }
            }
            url.host = self.host.clone();
            url.path = resolve_path(&self.path, &reference.path);
            url
        }
    }

    /// Go's `URL.String()`.
    impl fmt::Display for GoUrl {
        fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
            let mut out = String::new();
            if !self.scheme.is_empty() {
                out.push_str(&self.scheme);
                out.push(':');
            }
            if !self.opaque.is_empty() {
                out.push_str(&self.opaque);
            } else {
                if !self.scheme.is_empty() || !self.host.is_empty() {
                    if !self.host.is_empty() || !self.path.is_empty() {
                        out.push_str("//");
                    }
                    out.push_str(&escape(self.host.as_bytes(), Mode::Host));
                }
                if !self.path.is_empty() && !self.path.starts_with('/') && !self.host.is_empty() {
                    out.push('/');
                }
                if out.is_empty() {
                    // A relative path whose first segment has a colon would read as a scheme.
                    if let Some(i) = self.path.find(':')
                        && !self.path[..i].contains('/')
                    {
                        out.push_str("./");
                    }
                }
                out.push_str(&self.path);
            }
            if self.force_query || !self.raw_query.is_empty() {
                out.push('?');
                out.push_str(&self.raw_query);
            }
            if !self.fragment.is_empty() {
                out.push('#');
                out.push_str(&self.fragment);
            }
            f.write_str(&out)
        }
    }

    /// Go's `parse(rawURL, viaRequest=false)`: everything but the fragment.
    fn parse_main(raw: &str) -> Result<GoUrl, String> {
        if raw.bytes().any(|b| b < 0x20 || b == 0x7f) {
            return Err("net/url: invalid control character in URL".to_owned());
        }
        let mut url = GoUrl::default();
        if raw == "*" {
            url.path = "*".to_owned();
            return Ok(url);
        }
        let (scheme, mut rest) = get_scheme(raw)?;
        url.scheme = scheme.to_ascii_lowercase();
        if rest.ends_with('?') && rest.matches('?').count() == 1 {
            url.force_query = true;
            rest = &rest[..rest.len() - 1];
        } else if let Some((before, query)) = rest.split_once('?') {
            url.raw_query = query.to_owned();
            rest = before;
        }
        if !rest.starts_with('/') {
            if !url.scheme.is_empty() {
                url.opaque = rest.to_owned();
                return Ok(url);
            }
            let first_segment = rest.split_once('/').map_or(rest, |(segment, _)| segment);
            if first_segment.contains(':') {
                return Err("first path segment in URL cannot contain colon".to_owned());
            }
        }
        if (!url.scheme.is_empty() || !rest.starts_with("///")) && rest.starts_with("//") {
            let authority_and_path = &rest[2..];
            let (authority, path) = match authority_and_path.find('/') {
                Some(i) => authority_and_path.split_at(i),
                None => (authority_and_path, ""),
            };
            url.host = parse_authority(authority)?;
            rest = path;
        }
        url.path = escaped_form(rest, Mode::Path)?;
        Ok(url)
    }

    /// Go's `getScheme`.
    fn get_scheme(raw: &str) -> Result<(&str, &str), String> {
        for (i, b) in raw.bytes().enumerate() {
            match b {
                b'a'..=b'z' | b'A'..=b'Z' => {}
                b'0'..=b'9' | b'+' | b'-' | b'.' if i > 0 => {}
                b':' if i == 0 => return Err("missing protocol scheme".to_owned()),
                b':' => return Ok((&raw[..i], &raw[i + 1..])),
                _ => return Ok(("", raw)),
            }
        }
        Ok(("", raw))
    }

    /// Go's `parseAuthority`, keeping only the host.
    fn parse_authority(authority: &str) -> Result<String, String> {
        let (userinfo, host) = match authority.rfind('@') {
            Some(i) => (Some(&authority[..i]), &authority[i + 1..]),
            None => (None, authority),
        };
        let host = parse_host(host)?;
        if let Some(userinfo) = userinfo
            && !userinfo.chars().all(|c| c.is_ascii_alphanumeric() || "-._:~!$&'()*+,;=%@".contains(c))
        {
            return Err("net/url: invalid userinfo".to_owned());
        }
        Ok(host)
    }

    /// Go's `parseHost` (zones are decoded with the rest of the host).
    fn parse_host(host: &str) -> Result<String, String> {
        let colon_port = if host.starts_with('[') {
            match host.rfind(']') {
                Some(i) => &host[i + 1..],
                None => return Err("missing ']' in host".to_owned()),
            }
        } else {
            host.rfind(':').map_or("", |i| &host[i..])
        };
        if !valid_optional_port(colon_port) {
            return Err(format!("invalid port {} after host", go_quote(colon_port)));
        }
        let decoded = unescape(host, Mode::Host)?;
        Ok(String::from_utf8_lossy(&decoded).into_owned())
    }

    fn valid_optional_port(port: &str) -> bool {
        match port.strip_prefix(':') {
            Some(digits) => digits.bytes().all(|b| b.is_ascii_digit()),
            None => port.is_empty(),
        }
    }

    /// Go's `splitHostPort`.
    fn split_host_port(host_port: &str) -> (&str, &str) {
        let (mut host, port) = match host_port.rfind(':') {
            Some(i) if valid_optional_port(&host_port[i..]) => (&host_port[..i], &host_port[i + 1..]),
            _ => (host_port, ""),
        };
        if host.starts_with('[') && host.ends_with(']') && host.len() >= 2 {
            host = &host[1..host.len() - 1];
        }
        (host, port)
    }

    /// What Go's `EscapedPath`/`EscapedFragment` return after `setPath`/`setFragment` of `raw`:
    /// `raw` itself when it is validly encoded, else the decoded bytes re-escaped.
    fn escaped_form(raw: &str, mode: Mode) -> Result<String, String> {
        let decoded = unescape(raw, mode)?;
        if valid_encoded(raw, mode) { Ok(raw.to_owned()) } else { Ok(escape(&decoded, mode)) }
    }

    /// Go's `shouldEscape` for the modes used here.
    fn should_escape(c: u8, mode: Mode) -> bool {
        if c.is_ascii_alphanumeric() {
            return false;
        }
        if mode == Mode::Host
            && matches!(
                c,
                b'!' | b'$'
                    | b'&'
                    | b'\''
                    | b'('
                    | b')'
                    | b'*'
                    | b'+'
                    | b','
                    | b';'
                    | b'='
                    | b':'
                    | b'['
                    | b']'
                    | b'<'
                    | b'>'
                    | b'"'
            )
        {
            return false;
        }
        match c {
            b'-' | b'_' | b'.' | b'~' => return false,
            b'$' | b'&' | b'+' | b',' | b'/' | b':' | b';' | b'=' | b'?' | b'@' => match mode {
                Mode::Path => return c == b'?',
                Mode::Fragment => return false,
                Mode::Host => {}
            },
            _ => {}
        }
        if mode == Mode::Fragment && matches!(c, b'!' | b'(' | b')' | b'*') {
            return false;
        }
        true
    }

    /// Go's `validEncoded`.
    fn valid_encoded(s: &str, mode: Mode) -> bool {
        s.bytes().all(|b| {
            matches!(
                b,
                b'!' | b'$'
                    | b'&'
                    | b'\''
                    | b'('
                    | b')'
                    | b'*'
                    | b'+'
                    | b','
                    | b';'
                    | b'='
                    | b':'
                    | b'@'
                    | b'['
                    | b']'
                    | b'%'
            ) || !should_escape(b, mode)
        })
    }

    /// Go's `escape` (upper-case hex).
    fn escape(bytes: &[u8], mode: Mode) -> String {
        const HEX: &[u8; 16] = b"0123456789ABCDEF";
        let mut out = String::with_capacity(bytes.len());
        for &b in bytes {
            if should_escape(b, mode) {
                out.push('%');
                out.push(char::from(HEX[usize::from(b >> 4)]));
                out.push(char::from(HEX[usize::from(b & 15)]));
            } else {
                out.push(char::from(b));
            }
        }
        out
    }

    /// Go's `unescape`, with its error texts.
    fn unescape(s: &str, mode: Mode) -> Result<Vec<u8>, String> {
        let bytes = s.as_bytes();
        let mut out = Vec::with_capacity(bytes.len());
        let mut i = 0;
        while i < bytes.len() {
            let b = bytes[i];
            if b == b'%' {
                let (hi, lo) = match (
                    bytes.get(i + 1).and_then(|&h| unhex(h)),
                    bytes.get(i + 2).and_then(|&l| unhex(l)),
                ) {
                    (Some(hi), Some(lo)) => (hi, lo),
                    _ => {
                        let end = (i + 3).min(bytes.len());
                        let bad = String::from_utf8_lossy(&bytes[i..end]);
                        return Err(format!("invalid URL escape {}", go_quote(&bad)));
                    }
                };
                // In hosts, %-encoding is only for non-ASCII bytes, and %25 for IPv6 zones.
                if mode == Mode::Host && hi < 8 && &bytes[i..i + 3] != b"%25" {
                    let bad = String::from_utf8_lossy(&bytes[i..i + 3]);
                    return Err(format!("invalid URL escape {}", go_quote(&bad)));
                }
                out.push(hi << 4 | lo);
                i += 3;
            } else {
                if mode == Mode::Host && b < 0x80 && should_escape(b, mode) {
                    let bad = String::from_utf8_lossy(&bytes[i..i + 1]);
                    return Err(format!("invalid character {} in host name", go_quote(&bad)));
                }
                out.push(b);
                i += 1;
            }
        }
        Ok(out)
    }

    fn unhex(b: u8) -> Option<u8> {
        char::from(b).to_digit(16).and_then(|d| u8::try_from(d).ok())
    }

    /// Go's `resolvePath`: merge, then remove dot segments; the result starts with `/`.
    fn resolve_path(base: &str, reference: &str) -> String {
        let full = if reference.is_empty() {
            base.to_owned()
        } else if !reference.starts_with('/') {
            let keep = base.rfind('/').map_or(0, |i| i + 1);
            format!("{}{reference}", &base[..keep])
        } else {
            reference.to_owned()
        };
        if full.is_empty() {
            return String::new();
        }
        let mut dst = String::from("/");
        let mut first = true;
        let mut last = "";
        for elem in full.split('/') {
            last = elem;
            if elem == "." {
                first = false;
                continue;
            }
            if elem == ".." {
                let kept = dst[1..].rfind('/').map(|i| dst[1..1 + i].to_owned());
                dst = String::from("/");
                match kept {
                    Some(prefix) => dst.push_str(&prefix),
                    None => first = true,
                }
            } else {
                if !first {
                    dst.push('/');
                }
                dst.push_str(elem);
                first = false;
            }
        }
        if last == "." || last == ".." {
            dst.push('/');
        }
        if dst.len() > 1 && dst.as_bytes()[1] == b'/' {
            dst.remove(0);
        }
        dst
    }

    #[cfg(test)]
    mod tests {
        use super::*;

        #[test]
        fn parses_and_prints_like_go() {
            let cases = [
                ("", ""),
                ("/path", "/path"),
                ("?foo", "?foo"),
                ("/path?bar", "/path?bar"),
                ("/p#frag", "/p#frag"),
                ("/a b", "/a%20b"),
                ("/a'b;c=d@e:f", "/a'b;c=d@e:f"),
                ("/x?", "/x?"),
                ("http://Example.com:80/x?q#f", "http://Example.com:80/x?q#f"),
                ("HTTP://h/x", "http://h/x"),
                ("//h/x", "//h/x"),
                ("/%41", "/%41"),
                ("/é", "/%C3%A9"),
                ("/#a b", "/#a%20b"),
                ("x/y", "x/y"),
                ("*", "*"),
            ];
            for (raw, want) in cases {
                let url = GoUrl::parse(raw).unwrap_or_else(|e| panic!("case {raw:?}: {e}"));
                assert_eq!(url.to_string(), want, "case {raw:?}");
            }
        }

        #[test]
        fn parse_errors_match_go() {
            let cases = [
                ("%zz", "parse \"%zz\": invalid URL escape \"%zz\""),
                ("/a%2", "parse \"/a%2\": invalid URL escape \"%2\""),
                ("a:b/c", "ok: opaque"),
                ("1a:b", "parse \"1a:b\": first path segment in URL cannot contain colon"),
                (":x", "parse \":x\": missing protocol scheme"),
                ("/a\nb", "parse \"/a\\nb\": net/url: invalid control character in URL"),
                ("http://a b/", "parse \"http://a b/\": invalid character \" \" in host name"),
                ("http://h:8x/", "parse \"http://h:8x/\": invalid port \":8x\" after host"),
                ("http://[::1/", "parse \"http://[::1/\": missing ']' in host"),
            ];
            for (raw, want) in cases {
                match GoUrl::parse(raw) {
                    Ok(url) => assert_eq!(want, "ok: opaque", "case {raw:?} parsed as {url:?}"),
                    Err(e) => assert_eq!(e, want, "case {raw:?}"),
                }
            }
        }

        #[test]
        fn hostname_and_port() {
            let cases = [
                ("http://h:80/", "h", "80"),
                ("http://h/", "h", ""),
                ("http://[::1]:8080/", "::1", "8080"),
                ("http://[::1]/", "::1", ""),
            ];
            for (raw, host, port) in cases {
                let url = GoUrl::parse(raw).expect(raw);
                assert_eq!((url.hostname().as_str(), url.port()), (host, port), "case {raw}");
            }
        }

        #[test]
        fn resolves_references_like_go() {
            // RFC 3986 §5.4.1 normal examples, plus the redirect shapes probes meet.
            let base = GoUrl::parse("http://a/b/c/d;p?q").expect("base");
            let cases = [
                ("g", "http://a/b/c/g"),
                ("./g", "http://a/b/c/g"),
                ("g/", "http://a/b/c/g/"),
                ("/g", "http://a/g"),
                ("//g", "http://g"),
                ("?y", "http://a/b/c/d;p?y"),
                ("g?y", "http://a/b/c/g?y"),
                ("#s", "http://a/b/c/d;p?q#s"),
                ("", "http://a/b/c/d;p?q"),
                (".", "http://a/b/c/"),
                ("./", "http://a/b/c/"),
                ("..", "http://a/b/"),
                ("../g", "http://a/b/g"),
                ("../..", "http://a/"),
                ("../../../g", "http://a/g"),
                ("https://other:8443/x", "https://other:8443/x"),
                ("/p/../q", "http://a/q"),
            ];
            for (reference, want) in cases {
                let reference_url = GoUrl::parse(reference).expect(reference);
                assert_eq!(base.resolve(&reference_url).to_string(), want, "case {reference:?}");
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::ContainerPort;
    use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
    use proptest::prelude::*;

    fn container() -> Container {
        Container {
            name: "c".into(),
            ports: Some(vec![
                ContainerPort { name: Some("http".into()), container_port: 8080, ..Default::default() },
                ContainerPort { name: Some("huge".into()), container_port: 70000, ..Default::default() },
            ]),
            ..Default::default()
        }
    }

    fn action(scheme: &str, host: &str, port: i32, path: &str) -> HTTPGetAction {
        HTTPGetAction {
            scheme: Some(scheme.into()).filter(|s: &String| !s.is_empty()),
            host: Some(host.into()).filter(|h: &String| !h.is_empty()),
            port: IntOrString::Int(port),
            path: Some(path.into()),
            http_headers: None,
        }
    }

    fn with_headers(headers: &[(&str, &str)]) -> HTTPGetAction {
        HTTPGetAction {
            http_headers: Some(
                headers.iter().map(|(n, v)| HTTPHeader { name: (*n).into(), value: (*v).into() }).collect(),
            ),
            ..action("", "", 80, "/")
        }
    }

    fn build(action: &HTTPGetAction) -> Result<HttpProbeRequest, ProbeError> {
        HttpProbeRequest::new(action, &container(), "10.0.0.1")
    }

    fn pairs(request: &HttpProbeRequest) -> Vec<(&str, &str)> {
        request.headers().iter().map(|(n, v)| (n.as_str(), v.as_str())).collect()
    }

    #[test]
    fn urls_match_upstream_format_url() {
        let cases = [
            ("http", "localhost", 93, "", "http://localhost:93"),
            ("https", "localhost", 93, "/path", "https://localhost:93/path"),
            ("http", "localhost", 93, "?foo", "http://localhost:93?foo"),
            ("https", "localhost", 93, "/path?bar", "https://localhost:93/path?bar"),
            ("", "", 8080, "/healthz?x=1", "http://10.0.0.1:8080/healthz?x=1"),
            ("HTTPS", "", 443, "/", "https://10.0.0.1:443/"),
            ("http", "::1", 80, "/x", "http://[::1]:80/x"),
            ("http", "fd00::5", 8080, "", "http://[fd00::5]:8080"),
            ("http", "h", 80, "/p#frag", "http://h:80/p#frag"),
            ("http", "h", 80, "healthz", "http://h:80/healthz"),
            ("http", "h", 80, "/a b", "http://h:80/a%20b"),
            ("http", "h", 80, "%zz", "http://h:80/%25zz"),
            ("http", "h", 80, "1a:b", "http://h:80/1a:b"),
            ("http", "h", 80, "/a\nb?c", "http://h:80/a%0Ab%3Fc"),
            ("http", "h", 80, "http://evil.example/x?y", "http://h:80/x?y"),
            ("http", "h", 80, "//evil.example/x", "http://h:80/x"),
            ("http", "h", 80, "//user:pw@evil.example/x", "http://h:80/x"),
            ("ftp", "h", 21, "/f", "ftp://h:21/f"),
        ];
        for (scheme, host, port, path, want) in cases {
            let request =
                build(&action(scheme, host, port, path)).unwrap_or_else(|e| panic!("case {path:?}: {e}"));
            assert_eq!(request.url(), want, "case {scheme} {host} {port} {path:?}");
        }
    }

    #[test]
    fn request_target_drops_the_fragment_and_defaults_to_slash() {
        let cases = [
            ("", "/"),
            ("?foo", "/?foo"),
            ("/p?q#frag", "/p?q"),
            ("/x?", "/x?"),
            ("/p?a b<c>\"", "/p?a%20b%3Cc%3E%22"),
            ("/p?é", "/p?é"),
        ];
        for (path, want) in cases {
            let request = build(&action("http", "h", 80, path)).expect(path);
            let target = request_target(&request.url).expect(path);
            assert_eq!(target.to_string(), want, "case {path:?}");
        }
    }

    #[test]
    fn invalid_specs_are_clear_errors() {
        let invalid = |text: &str| ProbeError::InvalidRequest(text.to_owned());
        let cases: Vec<(&str, HTTPGetAction, &str, ProbeError)> = vec![
            ("port zero", action("http", "h", 0, "/"), "10.0.0.1", ProbeError::InvalidPort(0)),
            ("port too big", action("http", "h", 65536, "/"), "10.0.0.1", ProbeError::InvalidPort(65536)),
            (
                "unknown named port",
                HTTPGetAction { port: IntOrString::String("web".into()), ..action("", "", 1, "/") },
                "10.0.0.1",
                ProbeError::PortNotFound("web".into()),
            ),
            (
                "no host",
                action("http", "", 80, "/"),
                "",
                invalid("no host to probe: httpGet.host and the pod IP are both empty"),
            ),
            (
                "host with space",
                action("http", "a b", 80, "/"),
                "",
                invalid("invalid host \"a b\": not an IP address or host name"),
            ),
            (
                "host with port",
                action("http", "example.com:80", 80, "/"),
                "",
                invalid("invalid host \"example.com:80\": not an IP address or host name"),
            ),
            (
                "host with path",
                action("http", "a/b", 80, "/"),
                "",
                invalid("invalid host \"a/b\": not an IP address or host name"),
            ),
            (
                "opaque path",
                action("http", "h", 80, "foo:bar"),
                "",
                invalid("path \"foo:bar\" cannot form a URL: http: no Host in request URL"),
            ),
            (
                "bad scheme",
                action("ht tp", "h", 80, "/"),
                "",
                invalid("parse \"ht tp://h:80/\": first path segment in URL cannot contain colon"),
            ),
            (
                "header name with space",
                with_headers(&[("X Foo", "1")]),
                "10.0.0.1",
                invalid("net/http: invalid header field name \"X Foo\""),
            ),
            (
                "empty header name",
                with_headers(&[("", "1")]),
                "10.0.0.1",
                invalid("net/http: invalid header field name \"\""),
            ),
            (
                "header value with newline",
                with_headers(&[("x-foo", "a\r\nEvil: 1")]),
                "10.0.0.1",
                invalid("net/http: invalid header field value for \"X-Foo\""),
            ),
            (
                "bad Host header",
                with_headers(&[("Host", "a b")]),
                "10.0.0.1",
                invalid("http: invalid Host header"),
            ),
        ];
        for (name, action, pod_ip, want) in cases {
            assert_eq!(HttpProbeRequest::new(&action, &container(), pod_ip), Err(want), "case {name}");
        }
    }

    #[test]
    fn a_path_too_long_for_a_request_line_is_an_error() {
        let path = format!("/{}", "a".repeat(70_000));
        assert_eq!(
            build(&action("http", "h", 80, &path)),
            Err(ProbeError::InvalidRequest("the URL cannot form a request target: uri too long".to_owned()))
        );
    }

    #[test]
    fn named_port_resolves_against_the_container() {
        let spec = HTTPGetAction { port: IntOrString::String("http".into()), ..action("", "", 1, "/h") };
        assert_eq!(build(&spec).expect("named port").url(), "http://10.0.0.1:8080/h");
        let spec = HTTPGetAction { port: IntOrString::String("huge".into()), ..action("", "", 1, "/h") };
        assert_eq!(build(&spec), Err(ProbeError::InvalidPort(70000)));
    }

    #[test]
    fn header_names_are_canonicalised_like_go() {
        let cases = [
            ("HOST", "Host"),
            ("FOO-bAR", "Foo-Bar"),
            ("x-forwarded-for", "X-Forwarded-For"),
            ("foo_bar", "Foo_bar"),
            ("accept-ENCODING", "Accept-Encoding"),
            ("-a-", "-A-"),
            ("x1-2y", "X1-2y"),
        ];
        for (raw, want) in cases {
            assert_eq!(canonical_header_key(raw), want, "case {raw}");
        }
    }

    /// A case name, the supplied headers, the resulting header list.
    type HeaderCase = (&'static str, Vec<(&'static str, &'static str)>, Vec<(&'static str, &'static str)>);

    #[test]
    fn default_headers_and_overrides() {
        let cases: Vec<HeaderCase> = vec![
            ("defaults", vec![], vec![("User-Agent", KUBE_PROBE_USER_AGENT), ("Accept", "*/*")]),
            (
                "custom user agent and accept",
                vec![("user-agent", "me/1"), ("ACCEPT", "text/plain")],
                vec![("User-Agent", "me/1"), ("Accept", "text/plain")],
            ),
            (
                "empty user agent is kept (and not sent)",
                vec![("User-Agent", "")],
                vec![("User-Agent", ""), ("Accept", "*/*")],
            ),
            ("empty accept removes it", vec![("Accept", "")], vec![("User-Agent", KUBE_PROBE_USER_AGENT)]),
            (
                "a later accept does not save an empty first one",
                vec![("Accept", ""), ("accept", "x/y")],
                vec![("User-Agent", KUBE_PROBE_USER_AGENT)],
            ),
            (
                "repeated names accumulate in order",
                vec![("x-b", "1"), ("X-A", "2"), ("x-B", "3")],
                vec![
                    ("X-B", "1"),
                    ("X-A", "2"),
                    ("X-B", "3"),
                    ("User-Agent", KUBE_PROBE_USER_AGENT),
                    ("Accept", "*/*"),
                ],
            ),
        ];
        for (name, supplied, want) in cases {
            let request = build(&with_headers(&supplied)).unwrap_or_else(|e| panic!("case {name}: {e}"));
            assert_eq!(pairs(&request), want, "case {name}");
        }
    }

    #[test]
    fn host_header_sets_the_virtual_host() {
        let request = build(&with_headers(&[("host", "www.example.com"), ("Host", "second")])).expect("host");
        assert_eq!(request.host_header(), "www.example.com");
        let request = build(&with_headers(&[("Host", "")])).expect("empty host");
        assert_eq!(request.host_header(), "10.0.0.1:80");
        let request = build(&action("http", "::1", 8080, "/")).expect("ipv6");
        assert_eq!(request.host_header(), "[::1]:8080");
    }

    #[test]
    fn wire_headers_follow_go_request_write() {
        let headers: Vec<(String, String)> = [
            ("X-Z", " padded\t"),
            ("Host", "ignored-here"),
            ("Accept", "a"),
            ("Content-Length", "5"),
            ("X-A", "1"),
            ("User-Agent", "first"),
            ("User-Agent", "second"),
            ("X-Z", ""),
            ("Referer", "mine"),
        ]
        .iter()
        .map(|(n, v)| ((*n).to_owned(), (*v).to_owned()))
        .collect();
        let wire = wire_headers(&headers, "vhost", None);
        let want = [
            ("Host", "vhost"),
            ("User-Agent", "first"),
            ("Accept", "a"),
            ("Referer", "mine"),
            ("X-A", "1"),
            ("X-Z", "padded"),
            ("X-Z", ""),
            ("Connection", "close"),
        ];
        let got: Vec<(&str, &str)> = wire.iter().map(|(n, v)| (n.as_str(), v.as_str())).collect();
        assert_eq!(got, want);

        let wire = wire_headers(&headers, "vhost", Some("http://h:80/from"));
        let referers: Vec<&str> =
            wire.iter().filter(|(n, _)| n == "Referer").map(|(_, v)| v.as_str()).collect();
        assert_eq!(referers, ["http://h:80/from"]);

        let no_agent = [("User-Agent".to_owned(), String::new())];
        let wire = wire_headers(&no_agent, "h", None);
        assert!(!wire.iter().any(|(n, _)| n == "User-Agent"), "empty User-Agent is not sent: {wire:?}");

        let closing = [("Connection".to_owned(), "Close".to_owned())];
        let wire = wire_headers(&closing, "h", None);
        assert_eq!(wire.iter().filter(|(n, _)| n == "Connection").count(), 1, "{wire:?}");
    }

    #[test]
    fn referer_policy() {
        let https = GoUrl::parse("https://h:443/a").expect("https");
        let http = GoUrl::parse("http://h:80/b").expect("http");
        assert_eq!(referer_for(&https, &http, None), None, "https to http sends none");
        assert_eq!(referer_for(&http, &https, None).as_deref(), Some("http://h:80/b"));
        assert_eq!(referer_for(&http, &http, Some("mine")).as_deref(), Some("mine"));
        assert_eq!(referer_for(&http, &http, Some("")).as_deref(), Some("http://h:80/b"));
    }

    #[test]
    fn go_quote_escapes_like_percent_q() {
        assert_eq!(go_quote("a\"b\\c\n\x01é"), "\"a\\\"b\\\\c\\n\\x01é\"");
    }

    #[test]
    fn os_errors_read_like_go() {
        let refused = io::Error::from_raw_os_error(111);
        if refused.kind() == io::ErrorKind::ConnectionRefused {
            assert_eq!(go_io_text(&refused), "connection refused");
        }
        assert_eq!(go_io_text(&io::Error::other("Custom")), "Custom");
    }

    const POD_IP_PATTERN: &str = "[0-9a-f.:]{0,12}";

    fn header_strategy() -> impl Strategy<Value = HTTPHeader> {
        let name = prop_oneof![
            2 => Just("Host".to_owned()),
            2 => Just("user-agent".to_owned()),
            2 => Just("ACCEPT".to_owned()),
            6 => "[a-zA-Z0-9_-]{1,12}",
            1 => "[ -~]{0,8}",
            1 => any::<String>(),
        ];
        let value = prop_oneof![4 => "[ -~]{0,16}", 1 => any::<String>(), 2 => Just(String::new())];
        (name, value).prop_map(|(name, value)| HTTPHeader { name, value })
    }

    fn action_strategy() -> impl Strategy<Value = HTTPGetAction> {
        let port = prop_oneof![
            4 => (1i32..=65535).prop_map(IntOrString::Int),
            1 => any::<i32>().prop_map(IntOrString::Int),
            1 => prop_oneof![Just("http".to_owned()), Just("huge".to_owned()), "[a-z0-9]{0,6}"]
                .prop_map(IntOrString::String),
        ];
        let path = prop_oneof![
            "[/?#%a-zA-Z0-9:@ ._~!$&'()*+,;=\\[\\]<>\"-]{0,24}",
            "(https?:)?//[a-z.@:0-9]{0,10}/[a-z]{0,5}",
            any::<String>(),
        ];
        let host = prop_oneof![
            Just(None),
            Just(Some("example.com".to_owned())),
            Just(Some("::1".to_owned())),
            "[a-z0-9.:_\\[\\]%/@ -]{0,12}".prop_map(Some),
            any::<String>().prop_map(Some),
        ];
        let scheme = prop_oneof![
            2 => Just(None),
            4 => "(http|https|HTTP|HtTpS|ftp)".prop_map(Some),
            1 => "[ -~]{0,6}".prop_map(Some),
        ];
        let headers = proptest::option::of(proptest::collection::vec(header_strategy(), 0..5));
        (port, proptest::option::of(path), host, scheme, headers).prop_map(
            |(port, path, host, scheme, http_headers)| HTTPGetAction {
                host,
                http_headers,
                path,
                port,
                scheme,
            },
        )
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(1024))]

        #[test]
        fn request_building_never_panics_and_makes_parsable_urls(
            spec in action_strategy(),
            pod_ip in prop_oneof![Just("10.0.0.1".to_owned()), Just("fd00::1".to_owned()), POD_IP_PATTERN]
        ) {
            let Ok(request) = HttpProbeRequest::new(&spec, &container(), &pod_ip) else { return Ok(()) };
            let reparsed = GoUrl::parse(request.url());
            prop_assert!(reparsed.is_ok(), "{} does not parse: {:?}", request.url(), reparsed);
            let reparsed = reparsed.expect("checked");
            prop_assert_eq!(reparsed.to_string(), request.url());
            prop_assert!(!reparsed.hostname().is_empty());
            let target = request_target(&request.url);
            prop_assert!(target.is_ok(), "{}: {:?}", request.url(), target);
            let target = target.expect("checked");
            let absolute = format!("{}://{}{}", reparsed.scheme, reparsed.host, target);
            prop_assert!(http::Uri::try_from(absolute.as_str()).is_ok(), "{absolute}");
            let wire = wire_headers(request.headers(), request.host_header(), None);
            prop_assert!(build_request(&request.url, &wire).is_ok(), "{:?}", wire);
        }
    }
}
