//! The HTTP probe's request, built without I/O: upstream `request.go`
//! (`NewRequestForHTTPGetAction`, `formatURL`, `v1HeaderToHTTPHeader`) and the parts of Go's
//! `Request.write` and redirect handling that decide what goes on the wire (header order and
//! case, `Host`, `Referer`).

use std::net::Ipv6Addr;
use std::sync::Arc;

use bytes::Bytes;
use http::header::{HeaderName, HeaderValue};
use k8s_openapi::api::core::v1::{Container, HTTPGetAction, HTTPHeader};

use super::go_url::GoUrl;
use crate::gofmt::go_quote;
use crate::prober::port::resolve_container_port;
use crate::prober::tcp::join_host_port;
use crate::prober::{KUBE_PROBE_USER_AGENT, ProbeError};

// === impl HttpProbeRequest ===

/// A request built from a probe spec; pure, no I/O (upstream `NewRequestForHTTPGetAction`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HttpProbeRequest {
    /// The target as Go's `http.NewRequest` leaves it after re-parsing `URL.String()`.
    pub(super) url: GoUrl,
    /// Upstream's `req.Header`: the supplied headers with canonical names in spec order, then the
    /// default User-Agent and Accept when absent. As upstream, `Host` entries and an empty
    /// User-Agent stay in this list; [`wire_headers`] decides what is sent.
    pub(super) headers: Vec<(String, String)>,
    /// Upstream's `req.Host`: the first supplied `Host` value when it is non-empty.
    pub(super) virtual_host: Option<String>,
    /// The first round trip's target and wire headers, built once: a worker keeps its request
    /// between probes ([`crate::prober::ProbeMemo`]), and every probe sends this.
    /// `None` when a header the spec passed cannot be written (a name over 64 KiB): then each
    /// probe builds its request and fails at send time with Go's text, as before it was kept.
    first: Option<FirstRequest>,
}

/// What a probe needs for a request's first round trip, and nothing more: the URL's scheme,
/// host and text (to dial, and for error texts), and the request itself as the bytes that go
/// on the wire, in one shared block that each probe writes as it is (a copy is a reference
/// count). This is what a worker keeps between its probes ([`crate::prober::ProbeMemo`]): about
/// 300 bytes, where the whole [`HttpProbeRequest`] is about 900 (docs/memory.md). A redirect
/// needs the rest, and the probe builds the whole request again for it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct FirstRequest {
    /// The URL's scheme, then its host (`host:port`), then its Go text, back to back; shared,
    /// so a probe's copy of the whole is two reference counts.
    url: Arc<str>,
    /// Where the scheme ends and the host ends in `url`.
    scheme_end: u32,
    host_end: u32,
    /// The request head as written: request line, headers, blank line.
    wire: Bytes,
}

impl FirstRequest {
    fn new(url: &GoUrl, wire: &[(String, String)]) -> Result<Self, String> {
        let wire = build_request(url, wire)?;
        let too_long = || "the URL is too long for a probe".to_owned();
        let scheme_end = u32::try_from(url.scheme.len()).map_err(|_| too_long())?;
        let host_end = u32::try_from(url.scheme.len() + url.host.len()).map_err(|_| too_long())?;
        let text = format!("{}{}{url}", url.scheme, url.host);
        Ok(FirstRequest { url: text.into(), scheme_end, host_end, wire })
    }

    /// The URL's scheme, lower-cased.
    pub(crate) fn scheme(&self) -> &str {
        self.url.get(..at(self.scheme_end)).unwrap_or_default()
    }

    /// The URL's `host` or `host:port`.
    pub(crate) fn host(&self) -> &str {
        self.url.get(at(self.scheme_end)..at(self.host_end)).unwrap_or_default()
    }

    /// The URL as Go's `URL.String()` writes it.
    pub(crate) fn url(&self) -> &str {
        self.url.get(at(self.host_end)..).unwrap_or_default()
    }

    /// The request head as it goes on the wire, sharing the kept bytes.
    pub(crate) fn request(&self) -> Bytes {
        self.wire.clone()
    }
}

/// An offset kept as `u32` (a URL is far shorter), back to an index.
fn at(offset: u32) -> usize {
    usize::try_from(offset).unwrap_or(usize::MAX)
}

impl HttpProbeRequest {
    /// Builds the request: scheme lower-cased (default `http`), host from `action.host` or the
    /// pod IP, port resolved against the container, path parsed as a URL reference, headers
    /// canonicalised with the kubelet's defaults. Port errors keep their upstream texts; a
    /// header, host or path the request cannot carry is [`ProbeError::InvalidRequest`].
    pub fn new(action: &HTTPGetAction, container: &Container, pod_ip: &str) -> Result<Self, ProbeError> {
        let url = target_url(action, container, pod_ip)?;
        let supplied = action.http_headers.as_deref().unwrap_or_default();
        if let Some(refusal) = send_refusal(supplied) {
            return Err(ProbeError::InvalidRequest(refusal));
        }
        let headers = probe_headers(supplied);
        let virtual_host = first_value(&headers, "Host").filter(|h| !h.is_empty()).map(str::to_owned);
        request_target(&url).map_err(ProbeError::InvalidRequest)?;
        let host = virtual_host.as_deref().unwrap_or(&url.host);
        let first = FirstRequest::new(&url, &wire_headers(&headers, host, None)).ok();
        Ok(HttpProbeRequest { url, headers, virtual_host, first })
    }

    /// The target URL of `action` as upstream renders it, without building the rest of the
    /// request (what a refused send names: [`send_refusal`]).
    pub fn url_of(action: &HTTPGetAction, container: &Container, pod_ip: &str) -> Result<String, ProbeError> {
        Ok(target_url(action, container, pod_ip)?.to_string())
    }

    /// The target URL as upstream renders it, e.g. `http://10.0.0.1:8080/healthz?x=1`.
    pub fn url(&self) -> String {
        self.url.to_string()
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

    /// The request head the first round trip writes (before any redirect): request line, and
    /// the wire headers in Go's order: what [`super::HttpProber::probe`] sends first, byte for
    /// byte. Built once with the request and shared by each probe; public for benchmarks and
    /// hosts that want to see it. `Err` carries Go's text for a header that cannot be written.
    pub fn first_request(&self) -> Result<Bytes, String> {
        match &self.first {
            Some(first) => Ok(first.request()),
            None => build_request(&self.url, &wire_headers(&self.headers, self.host_header(), None)),
        }
    }

    /// What a probe needs for the first round trip (what a worker keeps between its probes).
    /// `None` for a request that cannot be written (see the field).
    pub(crate) fn first(&self) -> Option<&FirstRequest> {
        self.first.as_ref()
    }
}

/// The probe's target: scheme lower-cased (default `http`), host from `action.host` or the pod
/// IP, port resolved against the container, path parsed as a URL reference.
fn target_url(action: &HTTPGetAction, container: &Container, pod_ip: &str) -> Result<GoUrl, ProbeError> {
    let scheme = match action.scheme.as_deref() {
        Some(s) if !s.is_empty() => s.to_lowercase(),
        _ => "http".to_owned(),
    };
    let host = action.host.as_deref().filter(|h| !h.is_empty()).unwrap_or(pod_ip);
    let port = resolve_container_port(&action.port, container)?;
    format_url(&scheme, host, port, action.path.as_deref().unwrap_or(""))
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

/// Whether `host` is left to Go's URL rules: everything but a colon outside an IPv6 literal
/// (`example.com:80`) and brackets, which Go's releases read differently. The rest either
/// makes a URL Go would make too (a name that is not a DNS name then fails its lookup, as in
/// Go: `a!b`, `bücher.de`) or fails Go's parse with Go's text (`a b`, `a/b`, `user@x`).
fn usable_host(host: &str) -> bool {
    if host.contains(':') {
        let ip = host.split_once('%').map_or(host, |(ip, _)| ip);
        return ip.parse::<Ipv6Addr>().is_ok();
    }
    !host.contains(['[', ']'])
}

/// What Go's transport says when it refuses to send the probe's `httpHeaders` (the API
/// server checks only the names' form): an invalid header name or value. Upstream's
/// `client.Do` then fails, and so does the probe, with `Get "<url>": ` and this text
/// (docs/http-probe.md, "Headers Go refuses to send"). `None` for headers it sends; an invalid
/// `Host` value among them is sent empty (docs/http-probe.md).
pub fn send_refusal(supplied: &[HTTPHeader]) -> Option<String> {
    for header in supplied {
        if !valid_header_name(&header.name) {
            return Some(format!("net/http: invalid header field name {}", go_quote(&header.name)));
        }
        if !valid_header_value(&header.value) {
            let name = canonical_header_key(&header.name);
            return Some(format!("net/http: invalid header field value for {}", go_quote(&name)));
        }
    }
    None
}

/// Upstream `v1HeaderToHTTPHeader` plus the defaults of `newProbeRequest`, for headers
/// [`send_refusal`] lets through.
fn probe_headers(supplied: &[HTTPHeader]) -> Vec<(String, String)> {
    let mut headers = Vec::with_capacity(supplied.len() + 2);
    for header in supplied {
        headers.push((canonical_header_key(&header.name), header.value.clone()));
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
    headers
}

/// Go's `Header.Get` on a list with canonical names.
pub(super) fn first_value<'a>(headers: &'a [(String, String)], name: &str) -> Option<&'a str> {
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
pub(super) fn valid_host_header(host: &str) -> bool {
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
pub(super) fn wire_headers(
    headers: &[(String, String)],
    host: &str,
    referer: Option<&str>,
) -> Vec<(String, String)> {
    // Go's `Request.write` (since Go 1.21, go.dev/issue/61431) sends an empty Host where the
    // one it would send is invalid (`a b`, `a"b`), rather than failing, unless through a proxy,
    // which a probe never uses: so does the probe (docs/http-probe.md).
    let host = if valid_host_header(host) { host } else { "" };
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
pub(super) fn referer_for(last: &GoUrl, next: &GoUrl, supplied: Option<&str>) -> Option<String> {
    if last.scheme == "https" && next.scheme == "http" {
        return None;
    }
    match supplied {
        Some(r) if !r.is_empty() => Some(r.to_owned()),
        _ => Some(last.to_string()),
    }
}

/// The request head for one round trip: `GET`, the origin-form target, the wire headers in
/// order with names in canonical case (as Go writes them), then the blank line. The `http`
/// crate's types check each piece first: a target over 65,534 bytes or a header name over
/// 64 KiB is refused with Go's text for an invalid header, before anything is sent.
pub(super) fn build_request(url: &GoUrl, headers: &[(String, String)]) -> Result<Bytes, String> {
    let target = request_target(url)?;
    let mut wire = Vec::with_capacity(128);
    wire.extend_from_slice(b"GET ");
    wire.extend_from_slice(target.to_string().as_bytes());
    wire.extend_from_slice(b" HTTP/1.1\r\n");
    for (name, value) in headers {
        let name = HeaderName::from_bytes(name.as_bytes())
            .map_err(|_| format!("net/http: invalid header field name {}", go_quote(name)))?;
        let value = HeaderValue::from_bytes(value.as_bytes())
            .map_err(|_| format!("net/http: invalid header field value for {}", go_quote(name.as_str())))?;
        title_case(&mut wire, name.as_str().as_bytes());
        wire.extend_from_slice(b": ");
        wire.extend_from_slice(value.as_bytes());
        wire.extend_from_slice(b"\r\n");
    }
    wire.extend_from_slice(b"\r\n");
    Ok(Bytes::from(wire))
}

/// A lower-case header name in canonical case: the first letter and each one after a hyphen
/// upper-cased (`x-custom-id` → `X-Custom-Id`), what Go's canonical keys look like on the wire.
fn title_case(wire: &mut Vec<u8>, name: &[u8]) {
    let mut upper = true;
    for &b in name {
        wire.push(if upper { b.to_ascii_uppercase() } else { b });
        upper = b == b'-';
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::prober::tcp;
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
            // Hosts Go's URL keeps: their lookup fails at probe time, as in Go.
            ("http", "a!b", 80, "/", "http://a!b:80/"),
            ("http", "a\"b<c>", 80, "/", "http://a\"b<c>:80/"),
            ("http", "a%b", 80, "/", "http://a%25b:80/"),
            ("http", "bücher.de", 80, "/", "http://b%C3%BCcher.de:80/"),
            ("http", "fe80::1%eth0", 80, "/", "http://[fe80::1%25eth0]:80/"),
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
                invalid("parse \"http://a%20b:80/\": invalid URL escape \"%20\""),
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
                invalid("parse \"http://a%2Fb:80/\": invalid URL escape \"%2F\""),
            ),
            (
                "host with userinfo",
                action("http", "user@x", 80, "/"),
                "",
                invalid("parse \"http://user%40x:80/\": invalid URL escape \"%40\""),
            ),
            (
                "host with a bracket",
                action("http", "a[b", 80, "/"),
                "",
                invalid("invalid host \"a[b\": not an IP address or host name"),
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
            let reparsed = GoUrl::parse(&request.url());
            prop_assert!(reparsed.is_ok(), "{} does not parse: {:?}", request.url(), reparsed);
            let reparsed = reparsed.expect("checked");
            prop_assert_eq!(reparsed.to_string(), request.url());
            prop_assert!(!reparsed.hostname().is_empty());
            let target = request_target(&request.url);
            prop_assert!(target.is_ok(), "{}: {:?}", request.url(), target);
            let target = target.expect("checked");
            // A host that is no DNS name (`a!b`) is only ever looked up, never sent.
            if tcp::is_dialable(reparsed.hostname()) {
                let absolute = format!("{}://{}{}", reparsed.scheme, reparsed.host, target);
                prop_assert!(http::Uri::try_from(absolute.as_str()).is_ok(), "{absolute}");
            }
            let wire = wire_headers(request.headers(), request.host_header(), None);
            let built = build_request(&request.url, &wire);
            prop_assert!(built.is_ok(), "{:?}", wire);
            let built = built.expect("checked");
            // The kept first request is the one built from the spec, byte for byte, and it
            // reads back as the request line and wire headers it was built from.
            let first = request.first().expect("kept");
            prop_assert_eq!(&first.request(), &built);
            let mut parsed_headers = vec![httparse::EMPTY_HEADER; wire.len() + 1];
            let mut parsed = httparse::Request::new(&mut parsed_headers);
            let complete = parsed.parse(&built);
            prop_assert_eq!(complete, Ok(httparse::Status::Complete(built.len())));
            let target = target.to_string();
            prop_assert_eq!((parsed.method, parsed.path), (Some("GET"), Some(target.as_str())));
            let sent: Vec<(String, &[u8])> = parsed.headers.iter().map(|h| (h.name.to_ascii_lowercase(), h.value)).collect();
            let meant: Vec<(String, &[u8])> = wire.iter().map(|(n, v)| (n.to_ascii_lowercase(), v.as_bytes())).collect();
            prop_assert_eq!(sent, meant);
            let url = request.url();
            prop_assert_eq!((first.scheme(), first.host(), first.url()), (reparsed.scheme.as_str(), reparsed.host.as_str(), url.as_str()));
        }
    }
}
