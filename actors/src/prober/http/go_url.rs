//! The parts of Go's `net/url` that decide what a probe requests: `Parse`, `String`,
//! `Hostname`, `Port` and `ResolveReference`. Paths and fragments are kept in their escaped
//! form (`EscapedPath`, `EscapedFragment`); userinfo is dropped.

use std::fmt;

use crate::gofmt::go_quote;

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
        url.fragment =
            escaped_form(fragment, Mode::Fragment).map_err(|e| format!("parse {}: {e}", go_quote(raw)))?;
        Ok(url)
    }

    /// Upstream's fallback for a path Go cannot parse: `url.URL{Path: path}`.
    pub fn with_raw_path(path: &str) -> GoUrl {
        GoUrl { path: escape(path.as_bytes(), Mode::Path), ..GoUrl::default() }
    }

    /// Go's `URL.Hostname()`: the host without port and brackets.
    pub fn hostname(&self) -> &str {
        split_host_port(&self.host).0
    }

    /// Go's `URL.Port()`: the digits after the host, possibly empty.
    #[cfg(test)]
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
pub(super) fn split_host_port(host_port: &str) -> (&str, &str) {
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
            let (hi, lo) =
                match (bytes.get(i + 1).and_then(|&h| unhex(h)), bytes.get(i + 2).and_then(|&l| unhex(l))) {
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
            assert_eq!((url.hostname(), url.port()), (host, port), "case {raw}");
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
