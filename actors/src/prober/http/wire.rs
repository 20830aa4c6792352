//! One HTTP/1.1 round trip on a connection of its own: write the request's bytes, read the
//! answer's head, then at most [`super::MAX_RESPONSE_BODY_BYTES`] of its body; dropping the
//! [`Response`] closes the connection. This is all a probe asks of HTTP (one GET, `Connection:
//! close`, no request body, no keep-alive), and the framing rules are Go's `net/http`
//! (`transfer.go`, `ReadResponse`), which is what the kubelet's probes get.
//!
//! Written by hand, with `httparse` for the head, rather than with hyper's client connection:
//! hyper gives every connection two 8 KiB buffers (one for the request head, one to read
//! into) and its dispatch channel's first block, about 24 KiB for a request of about 150 bytes
//! and an answer usually smaller. A burst of first probes keeps up to a thousand connections
//! in flight at once, and the allocator keeps those pages for seconds after (docs/memory.md,
//! "The burst of first probes"). Here a connection holds one buffer that starts at
//! [`FIRST_READ`] bytes and grows only for a larger answer, and nothing is spawned or sent
//! over a channel: the probe's own task reads and writes.

use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};

use super::errors::go_io_text;
use crate::gofmt::go_quote;

/// The first read's buffer. A probe's answer (status line, a few headers, a short body)
/// usually fits; a larger one doubles it.
const FIRST_READ: usize = 1024;

/// The largest response head read: hyper's default limit, which HTTP probes had before this
/// module (docs/http-probe.md, "Response head limit"). Go allows 10 MiB, but a thousand probes
/// in flight at 10 MiB each is more memory than a node should give to hostile answers.
pub(crate) const MAX_HEAD_BYTES: usize = 8192 + 4096 * 100;

/// The most headers one head may have. Go sets no count, only the size limit; 1,024 keeps the
/// parser's table for a hostile head of tiny lines at 32 KiB, where the size limit alone would
/// let it reach 4 MiB (hyper allowed 100).
const MAX_HEADERS: usize = 1024;

/// Go's `maxLineLength` for a chunk-size line (with its extension).
const MAX_CHUNK_LINE: usize = 4096;

/// The most trailer bytes after a chunked body that are looked through for their end (Go
/// peeks its reader's buffer, 4 KiB, for it).
const MAX_TRAILER: usize = 4096;

/// Go's `io.ErrUnexpectedEOF`: the stream ended inside a head or a body.
const UNEXPECTED_EOF: &str = "unexpected EOF";

/// Go's prefix for a head it cannot parse.
const BROKEN: &str = "net/http: HTTP/1.x transport connection broken: ";

/// The answer's head as the probe needs it, with the connection positioned at its body.
pub(super) struct Response<T> {
    /// The status code.
    pub(super) status: u16,
    /// The first `Location` value, kept only for a redirect status (301, 302, 303, 307, 308).
    pub(super) location: Option<String>,
    framing: Framing,
    conn: Conn<T>,
}

/// How the body is delimited (Go's `transferReader`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Framing {
    /// 1xx, 204 and 304 answers carry none.
    Empty,
    /// `Content-Length`.
    Length(u64),
    /// `Transfer-Encoding: chunked` (which wins over a `Content-Length`).
    Chunked,
    /// Neither: the body runs until the server closes the connection.
    UntilClose,
}

/// The connection and what has been read from it but not yet used (`buf[at..]`).
struct Conn<T> {
    io: T,
    buf: Vec<u8>,
    at: usize,
}

/// Writes `request` (a whole request head) on `io` and reads the answer's head. Errors are
/// Go-like texts, without the `Get "<url>": ` that the caller adds.
pub(super) async fn round_trip<T>(mut io: T, request: &[u8]) -> Result<Response<T>, String>
where
    T: AsyncRead + AsyncWrite + Unpin,
{
    io.write_all(request).await.map_err(|e| go_io_text(&e))?;
    // A TLS stream holds what it was given until flushed; a TCP stream's flush does nothing.
    io.flush().await.map_err(|e| go_io_text(&e))?;
    let mut conn = Conn { io, buf: Vec::new(), at: 0 };
    // Informational heads count against the head limit together with the final one (Go
    // since 1.24; before, it gave up after five of them).
    let mut budget = MAX_HEAD_BYTES;
    loop {
        let head = conn.read_head(budget).await?;
        // Go skips informational answers, except 101 (Switching Protocols), which is final.
        if (100..200).contains(&head.status) && head.status != 101 {
            budget -= head.len;
            continue;
        }
        return Ok(Response { status: head.status, location: head.location, framing: head.framing, conn });
    }
}

impl<T> Response<T> {
    /// Whether Go's client reads some of this body before it follows the redirect it carries:
    /// when its length is unknown (`ContentLength == -1`) or at most 2 KiB.
    pub(super) fn body_is_slurped(&self) -> bool {
        match self.framing {
            Framing::Length(length) => length <= 2 << 10,
            Framing::Empty | Framing::UntilClose | Framing::Chunked => true,
        }
    }
}

impl<T: AsyncRead + Unpin> Response<T> {
    /// Reads the body up to `cap` bytes, and no further: what lies beyond the cap is never
    /// read (upstream `ReadAtMost`, whose limit is not an error). A body cut short before the
    /// cap is `unexpected EOF`, as Go reads it.
    pub(super) async fn read_body(mut self, cap: usize) -> Result<Vec<u8>, String> {
        match self.framing {
            Framing::Empty => Ok(Vec::new()),
            Framing::Length(length) => {
                let want = usize::try_from(length).unwrap_or(usize::MAX).min(cap);
                self.conn.want(want, UNEXPECTED_EOF).await?;
                Ok(self.conn.unread()[..want].to_vec())
            }
            Framing::UntilClose => {
                while self.conn.unread().len() < cap {
                    if self.conn.fill().await? == 0 {
                        break;
                    }
                }
                let unread = self.conn.unread();
                Ok(unread[..unread.len().min(cap)].to_vec())
            }
            Framing::Chunked => self.conn.read_chunked(cap).await,
        }
    }
}

/// A parsed response head.
#[derive(Debug, PartialEq, Eq)]
struct Head {
    /// Its length in bytes, the blank line included.
    len: usize,
    status: u16,
    location: Option<String>,
    framing: Framing,
}

impl<T: AsyncRead + Unpin> Conn<T> {
    /// The bytes read and not yet used.
    fn unread(&self) -> &[u8] {
        self.buf.get(self.at..).unwrap_or_default()
    }

    /// Reads more from the connection, after what is unread. `Ok(0)` at the end of the stream.
    async fn fill(&mut self) -> Result<usize, String> {
        if self.at > 0 {
            self.buf.drain(..self.at);
            self.at = 0;
        }
        if self.buf.len() == self.buf.capacity() {
            self.buf.reserve(self.buf.capacity().max(FIRST_READ));
        }
        self.io.read_buf(&mut self.buf).await.map_err(|e| go_io_text(&e))
    }

    /// Reads until a whole head of at most `limit` bytes has arrived, and consumes it.
    async fn read_head(&mut self, limit: usize) -> Result<Head, String> {
        let too_large =
            || format!("net/http: server response headers exceeded {MAX_HEAD_BYTES} bytes; aborted");
        // The head is parsed only when its status line has just arrived (to refuse a
        // malformed one at once, as Go does) and when an empty line arrives (it may be
        // complete), not after every read: a head sent a byte at a time is not parsed once
        // per byte. `scanned` counts the unread bytes already looked at.
        let mut scanned: usize = 0;
        let mut status_line = false;
        loop {
            let unread = self.unread();
            let fresh = &unread[scanned.saturating_sub(2)..];
            let ended = fresh.windows(2).any(|w| w == b"\n\n") || fresh.windows(3).any(|w| w == b"\n\r\n");
            let status_line_arrived = !status_line && unread[scanned..].contains(&b'\n');
            status_line |= status_line_arrived;
            scanned = unread.len();
            if (ended || status_line_arrived)
                && let Some(head) = parse_head(unread)?
            {
                if head.len > limit {
                    return Err(too_large());
                }
                self.at += head.len;
                return Ok(head);
            }
            if scanned >= limit {
                return Err(too_large());
            }
            let had = self.unread().len();
            if self.fill().await? == 0 {
                // Nothing at all is Go's `EOF`; a head cut short is `unexpected EOF`.
                return Err(if had == 0 { "EOF" } else { UNEXPECTED_EOF }.to_owned());
            }
        }
    }

    /// Reads until at least `n` bytes are unread; `Err(eof)` if the stream ends first.
    async fn want(&mut self, n: usize, eof: &str) -> Result<(), String> {
        while self.unread().len() < n {
            if self.fill().await? == 0 {
                return Err(eof.to_owned());
            }
        }
        Ok(())
    }

    /// Waits until a whole chunk-size line (up to its LF) is unread, and gives its length with
    /// the LF; Go's `header line too long` once a line has gone past [`MAX_CHUNK_LINE`].
    async fn chunk_line(&mut self) -> Result<usize, String> {
        let mut scanned = 0;
        loop {
            if let Some(lf) = self.unread()[scanned..].iter().position(|b| *b == b'\n') {
                return Ok(scanned + lf + 1);
            }
            scanned = self.unread().len();
            if scanned >= MAX_CHUNK_LINE + 2 {
                return Err("header line too long".to_owned());
            }
            self.want(scanned + 1, UNEXPECTED_EOF).await?;
        }
    }

    /// A chunked body up to `cap` decoded bytes (Go's `chunkedReader`, then its trailer check
    /// once the last chunk has come before the cap).
    async fn read_chunked(&mut self, cap: usize) -> Result<Vec<u8>, String> {
        let mut body = Vec::new();
        // Go's guard against chunk lines and extensions that carry next to no data: 16 bytes
        // of overhead a chunk are free, and twice the chunk's data.
        let mut excess: u64 = 0;
        loop {
            let len = self.chunk_line().await?;
            let size = chunk_size(&self.unread()[..len]).map_err(str::to_owned)?;
            self.at += len;
            excess = (excess + len as u64).saturating_sub(16 + size.saturating_mul(2));
            if excess > 16 * 1024 {
                return Err("chunked encoding contains too much non-data".to_owned());
            }
            if size == 0 {
                self.read_trailer().await?;
                return Ok(body);
            }
            let mut left = usize::try_from(size).unwrap_or(usize::MAX);
            while left > 0 {
                if body.len() >= cap {
                    return Ok(body);
                }
                self.want(1, UNEXPECTED_EOF).await?;
                let take = self.unread().len().min(left).min(cap - body.len());
                body.extend_from_slice(&self.unread()[..take]);
                self.at += take;
                left -= take;
            }
            if body.len() >= cap {
                return Ok(body);
            }
            self.want(2, UNEXPECTED_EOF).await?;
            if &self.unread()[..2] != b"\r\n" {
                return Err("malformed chunked encoding".to_owned());
            }
            self.at += 2;
        }
    }

    /// Go's `body.readTrailer`: after the last chunk, a CRLF, or trailer lines whose blank
    /// line ends within 4 KiB (the trailers themselves are not used).
    async fn read_trailer(&mut self) -> Result<(), String> {
        self.want(2, "http: unexpected EOF reading trailer").await?;
        if self.unread().starts_with(b"\r\n") {
            self.at += 2;
            return Ok(());
        }
        let mut scanned: usize = 0;
        loop {
            let unread = self.unread();
            let upto = unread.len().min(MAX_TRAILER);
            if unread[scanned.saturating_sub(3)..upto].windows(4).any(|w| w == b"\r\n\r\n") {
                return Ok(());
            }
            scanned = upto;
            if upto >= MAX_TRAILER || self.fill().await? == 0 {
                return Err("http: suspiciously long trailer after chunked body".to_owned());
            }
        }
    }
}

/// Go's `readChunkLine`, `removeChunkExtension` and `parseHexUint`: the line ends with CRLF
/// and has no other CR, trailing spaces and tabs go, so does an extension (from `;`), and what
/// is left is 1 to 16 hex digits.
fn chunk_size(line: &[u8]) -> Result<u64, &'static str> {
    let line = match line.iter().position(|b| *b == b'\r') {
        None => return Err("chunked line ends with bare LF"),
        Some(cr) if cr + 2 != line.len() => return Err("invalid CR in chunked line"),
        Some(cr) => &line[..cr],
    };
    if line.len() >= MAX_CHUNK_LINE {
        return Err("header line too long");
    }
    let end = line.iter().rposition(|b| !b" \t\r\n".contains(b)).map_or(0, |i| i + 1);
    let line = &line[..end];
    let digits = line.iter().position(|b| *b == b';').map_or(line, |semi| &line[..semi]);
    if digits.is_empty() {
        return Err("empty hex number for chunk length");
    }
    let mut size: u64 = 0;
    for (i, b) in digits.iter().enumerate() {
        let digit = match b {
            b'0'..=b'9' => b - b'0',
            b'a'..=b'f' => b - b'a' + 10,
            b'A'..=b'F' => b - b'A' + 10,
            _ => return Err("invalid byte in chunk length"),
        };
        if i == 16 {
            return Err("http chunk length too large");
        }
        size = size << 4 | u64::from(digit);
    }
    Ok(size)
}

/// Parses a response head from the start of `bytes`: `Ok(None)` while it is incomplete.
/// Synchronous, so that the header array lives on the stack and not in the probe's future.
fn parse_head(bytes: &[u8]) -> Result<Option<Head>, String> {
    // httparse skips empty lines before the status line; Go reads the first line as the
    // status line, and an empty one is malformed.
    if bytes.first().is_some_and(|b| matches!(b, b'\r' | b'\n')) {
        return Err(malformed(bytes, httparse::Error::Status));
    }
    let mut headers = [httparse::EMPTY_HEADER; 64];
    let parsed = match parse_head_with(bytes, &mut headers) {
        // More room, as much as the lines there are (up to the head's end), within
        // [`MAX_HEADERS`].
        Err(httparse::Error::TooManyHeaders) => {
            let head = bytes.windows(3).position(|w| w == b"\n\r\n").map_or(bytes, |end| &bytes[..end + 1]);
            let lines = head.iter().filter(|b| **b == b'\n').count();
            let mut headers = vec![httparse::EMPTY_HEADER; lines.min(MAX_HEADERS)];
            parse_head_with(bytes, &mut headers)
        }
        parsed => parsed,
    };
    match parsed {
        Ok(Some(head)) => head.map(Some),
        Ok(None) => Ok(None),
        Err(e) => Err(malformed(bytes, e)),
    }
}

/// [`parse_head`] with room for `headers.len()` headers. The inner `Err` is a head that
/// parses but whose body framing Go rejects.
fn parse_head_with<'b>(
    bytes: &'b [u8],
    headers: &mut [httparse::Header<'b>],
) -> Result<Option<Result<Head, String>>, httparse::Error> {
    let mut response = httparse::Response::new(headers);
    // Go takes the status after the first space and trims the spaces before it.
    let mut config = httparse::ParserConfig::default();
    config.allow_multiple_spaces_in_response_status_delimiters(true);
    let httparse::Status::Complete(len) = config.parse_response(&mut response, bytes)? else {
        return Ok(None);
    };
    let status = response.code.unwrap_or_default();
    let http_1_1 = response.version == Some(1);
    let headers = &*response.headers;
    let location = match status {
        301 | 302 | 303 | 307 | 308 => headers
            .iter()
            .find(|h| h.name.eq_ignore_ascii_case("Location"))
            .map(|h| String::from_utf8_lossy(h.value).into_owned()),
        _ => None,
    };
    Ok(Some(framing(status, http_1_1, headers).map(|framing| Head { len, status, location, framing })))
}

/// Go's rules for a response body (`transfer.go`, in its order): an HTTP/1.1 answer's one
/// `Transfer-Encoding` must be `chunked` (HTTP/1.0's is ignored); `Content-Length` values
/// must agree; then 1xx, 204 and 304 have none; then chunked; then `Content-Length`, which
/// must be a decimal below 2^63 and not empty; else the body runs until the connection closes.
fn framing(status: u16, http_1_1: bool, headers: &[httparse::Header<'_>]) -> Result<Framing, String> {
    // No allocation unless the answer is refused: this runs for every probe.
    let values = |name: &'static str| {
        headers
            .iter()
            .filter(move |h| h.name.eq_ignore_ascii_case(name))
            .map(|h| String::from_utf8_lossy(h.value))
    };
    let all = |name: &'static str| values(name).map(|v| go_quote(&v)).collect::<Vec<_>>().join(" ");
    let mut codings = values("Transfer-Encoding");
    let chunked = match (codings.next(), codings.next()) {
        _ if !http_1_1 => false,
        (None, _) => false,
        (Some(one), None) if one.eq_ignore_ascii_case("chunked") => true,
        (Some(one), None) => {
            return Err(format!("{BROKEN}unsupported transfer encoding: {}", go_quote(&one)));
        }
        (Some(_), Some(_)) => {
            return Err(format!("{BROKEN}too many transfer encodings: [{}]", all("Transfer-Encoding")));
        }
    };
    let first = values("Content-Length").next();
    let first = first.as_deref().map(trim_value);
    if let Some(first) = first
        && values("Content-Length").skip(1).any(|l| trim_value(&l) != first)
    {
        return Err(format!(
            "{BROKEN}http: message cannot contain multiple Content-Length headers; got [{}]",
            all("Content-Length")
        ));
    }
    if (100..200).contains(&status) || status == 204 || status == 304 {
        return Ok(Framing::Empty);
    }
    if chunked {
        return Ok(Framing::Chunked);
    }
    let Some(first) = first else { return Ok(Framing::UntilClose) };
    if first.is_empty() {
        return Err(format!("{BROKEN}invalid empty Content-Length \"\""));
    }
    // Go's `strconv.ParseUint(cl, 10, 63)`: decimal digits only, no sign, below 2^63.
    match first.parse::<u64>() {
        Ok(length) if first.bytes().all(|b| b.is_ascii_digit()) && length < 1 << 63 => {
            Ok(Framing::Length(length))
        }
        _ => Err(format!("{BROKEN}bad Content-Length {}", go_quote(first))),
    }
}

/// Go's `textproto.TrimString` as `Content-Length` values are compared and read: spaces and
/// tabs at either end.
fn trim_value(value: &str) -> &str {
    value.trim_matches([' ', '\t'])
}

/// Go-like text for a head httparse rejects.
fn malformed(bytes: &[u8], error: httparse::Error) -> String {
    let line_end = bytes.iter().position(|b| *b == b'\n').unwrap_or(bytes.len());
    let first = &bytes[..line_end];
    let first = first.strip_suffix(b"\r").unwrap_or(first);
    match error {
        httparse::Error::Version | httparse::Error::Status | httparse::Error::Token => {
            status_line_error(first)
        }
        other => format!("{BROKEN}malformed MIME header: {other}"),
    }
}

/// What Go's `ReadResponse` says of a status line httparse refuses, from its checks in their
/// order (docs/http-probe.md, "Error texts"): no space at all, then a status code that is not
/// three characters of a non-negative integer, then a protocol that is not `HTTP/X.Y`.
fn status_line_error(line: &[u8]) -> String {
    let quote = |bytes: &[u8]| go_quote(&String::from_utf8_lossy(bytes));
    let Some(space) = line.iter().position(|b| *b == b' ') else {
        return format!("{BROKEN}malformed HTTP response {}", quote(line));
    };
    let (proto, status) = (&line[..space], &line[space + 1..]);
    let status = &status[status.iter().take_while(|b| **b == b' ').count()..];
    let code = status.split(|b| *b == b' ').next().unwrap_or_default();
    if code.len() != 3 || !go_atoi_non_negative(code) {
        return format!("{BROKEN}malformed HTTP status code {}", quote(code));
    }
    if !go_http_version(proto) {
        return format!("{BROKEN}malformed HTTP version {}", quote(proto));
    }
    // A line Go reads but httparse does not (a reason phrase with control bytes, say).
    format!("{BROKEN}malformed HTTP response {}", quote(line))
}

/// Whether Go's `strconv.Atoi` reads `digits` as an integer of at least 0: an optional sign,
/// then decimal digits.
fn go_atoi_non_negative(digits: &[u8]) -> bool {
    let (negative, unsigned) = match digits.split_first() {
        Some((b'-', rest)) => (true, rest),
        Some((b'+', rest)) => (false, rest),
        _ => (false, digits),
    };
    !unsigned.is_empty()
        && unsigned.iter().all(u8::is_ascii_digit)
        && !(negative && unsigned.iter().any(|b| *b != b'0'))
}

/// Go's `http.ParseHTTPVersion`: `HTTP/` and one digit, a dot and one digit.
fn go_http_version(proto: &[u8]) -> bool {
    matches!(proto, [b'H', b'T', b'T', b'P', b'/', major, b'.', minor] if major.is_ascii_digit() && minor.is_ascii_digit())
}

#[cfg(test)]
mod tests {
    use std::io;
    use std::pin::Pin;
    use std::task::{Context, Poll};

    use tokio::io::ReadBuf;

    use super::*;

    /// A connection whose answer arrives `step` bytes per read, and which keeps what it is sent.
    struct Scripted {
        answer: Vec<u8>,
        at: usize,
        step: usize,
        sent: Vec<u8>,
    }

    impl Scripted {
        fn new(answer: &[u8], step: usize) -> Self {
            Scripted { answer: answer.to_vec(), at: 0, step, sent: Vec::new() }
        }
    }

    impl AsyncRead for Scripted {
        fn poll_read(
            self: Pin<&mut Self>,
            _: &mut Context<'_>,
            buf: &mut ReadBuf<'_>,
        ) -> Poll<io::Result<()>> {
            let this = self.get_mut();
            let n = this.step.min(this.answer.len() - this.at).min(buf.remaining());
            buf.put_slice(&this.answer[this.at..this.at + n]);
            this.at += n;
            Poll::Ready(Ok(()))
        }
    }

    impl AsyncWrite for Scripted {
        fn poll_write(self: Pin<&mut Self>, _: &mut Context<'_>, buf: &[u8]) -> Poll<io::Result<usize>> {
            self.get_mut().sent.extend_from_slice(buf);
            Poll::Ready(Ok(buf.len()))
        }

        fn poll_flush(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<io::Result<()>> {
            Poll::Ready(Ok(()))
        }

        fn poll_shutdown(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<io::Result<()>> {
            Poll::Ready(Ok(()))
        }
    }

    async fn answer(bytes: &[u8], step: usize) -> Result<(u16, Option<String>, Vec<u8>), String> {
        let response = round_trip(Scripted::new(bytes, step), b"GET / HTTP/1.1\r\n\r\n").await?;
        let (status, location) = (response.status, response.location.clone());
        Ok((status, location, response.read_body(10 * 1024).await?))
    }

    /// What a probe in flight holds for its connection: one buffer of [`FIRST_READ`] bytes for
    /// an answer that fits, where hyper's connection held two of 8 KiB and a channel block
    /// (docs/memory.md, "The burst of first probes").
    #[tokio::test]
    async fn a_small_answer_is_read_into_one_small_buffer() {
        let io = Scripted::new(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\nConnection: close\r\n\r\nok", 4096);
        let response = round_trip(io, b"GET /healthz HTTP/1.1\r\nHost: a\r\n\r\n").await.expect("an answer");
        assert_eq!(response.conn.io.sent, b"GET /healthz HTTP/1.1\r\nHost: a\r\n\r\n");
        assert_eq!((response.status, response.framing), (200, Framing::Length(2)));
        assert_eq!(response.conn.buf.capacity(), FIRST_READ);
        let held = std::mem::size_of_val(&response) - std::mem::size_of::<Scripted>();
        assert!(held <= 128, "a response holds {held} bytes beside its connection");
    }

    /// An answer that arrives a byte at a time reads as the same answer arriving at once.
    #[tokio::test]
    async fn an_answer_reads_the_same_however_it_is_split() {
        let answers: [&[u8]; 4] = [
            b"HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 301 Moved\r\nlocation: /next\r\nContent-Length: 4\r\n\r\nmove",
            b"HTTP/1.1 200 OK\r\ntransfer-encoding: Chunked\r\n\r\n3;x=y\r\nabc\r\n2\r\nde\r\n0\r\n\r\n",
            b"HTTP/1.0 200 OK\n\nuntil close",
            b"HTTP/1.1 204 No Content\r\nContent-Length: 10\r\n\r\n",
        ];
        let wanted = [
            (301, Some("/next".to_owned()), b"move".to_vec()),
            (200, None, b"abcde".to_vec()),
            (200, None, b"until close".to_vec()),
            (204, None, Vec::new()),
        ];
        for (bytes, want) in answers.iter().zip(wanted) {
            for step in [1, 2, 3, 7, 4096] {
                assert_eq!(answer(bytes, step).await, Ok(want.clone()), "{step} bytes per read");
            }
        }
    }

    #[tokio::test]
    async fn a_cut_answer_is_eof_or_unexpected_eof() {
        assert_eq!(answer(b"", 1).await, Err("EOF".to_owned()));
        assert_eq!(answer(b"HTTP/1.1 200 OK\r\n", 1).await, Err("unexpected EOF".to_owned()));
        assert_eq!(
            answer(b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nab", 1).await,
            Err("unexpected EOF".to_owned())
        );
    }

    /// A malformed status line is refused when it arrives, not when the head would end: a
    /// server speaking another protocol is reported at once, as Go's client reports it.
    #[tokio::test]
    async fn a_malformed_status_line_is_refused_before_the_head_ends() {
        let got = answer(b"SSH-2.0-OpenSSH_9.6\r\nmore of the banner", 1).await;
        assert_eq!(got, Err(format!("{BROKEN}malformed HTTP response \"SSH-2.0-OpenSSH_9.6\"")),);
    }

    /// A status line with a space but a bad code or protocol is named as Go's `ReadResponse`
    /// names it, the code checked before the protocol.
    #[tokio::test]
    async fn a_bad_status_code_or_version_reads_as_go_says() {
        let cases: [(&[u8], &str); 8] = [
            (b"HTTP/1.1 1000 X\r\n\r\n", "malformed HTTP status code \"1000\""),
            (b"HTTP/1.1 20 OK\r\n\r\n", "malformed HTTP status code \"20\""),
            (b"HTTP/1.1 2x0 OK\r\n\r\n", "malformed HTTP status code \"2x0\""),
            (b"HTTP/1.1 -12 OK\r\n\r\n", "malformed HTTP status code \"-12\""),
            (b"HTTP/1.1  \r\n\r\n", "malformed HTTP status code \"\""),
            (b"HTTP/x.1 200 OK\r\n\r\n", "malformed HTTP version \"HTTP/x.1\""),
            (b"FTP 200 OK\r\n\r\n", "malformed HTTP version \"FTP\""),
            (b"HTTP/1.1\r\n\r\n", "malformed HTTP response \"HTTP/1.1\""),
        ];
        for (answer_bytes, text) in cases {
            let got = answer(answer_bytes, 1).await;
            assert_eq!(got, Err(format!("{BROKEN}{text}")), "{}", String::from_utf8_lossy(answer_bytes));
        }
    }

    #[test]
    fn go_reads_signed_status_codes_and_one_digit_versions() {
        assert!(go_atoi_non_negative(b"+12") && go_atoi_non_negative(b"-00") && go_atoi_non_negative(b"200"));
        assert!(
            !go_atoi_non_negative(b"-12") && !go_atoi_non_negative(b"+") && !go_atoi_non_negative(b"1 2")
        );
        assert!(go_http_version(b"HTTP/1.1") && go_http_version(b"HTTP/2.0"));
        assert!(
            !go_http_version(b"HTTP/1.10") && !go_http_version(b"http/1.1") && !go_http_version(b"HTTP/1,1")
        );
    }

    #[test]
    fn framing_follows_go() {
        use Framing::{Chunked, Empty, Length, UntilClose};
        let refused = |text: &str| Err(format!("{BROKEN}{text}"));
        let cases: [(&str, Result<Framing, String>); 14] = [
            ("200 OK\r\n", Ok(UntilClose)),
            ("200 OK\r\nContent-Length: 7\r\nContent-Length: 7\r\n", Ok(Length(7))),
            ("200 OK\r\nContent-Length: 9223372036854775807\r\n", Ok(Length((1 << 63) - 1))),
            ("200 OK\r\nContent-Length: 7\r\nTransfer-Encoding: chunked\r\n", Ok(Chunked)),
            ("304 Not Modified\r\nContent-Length: 7\r\n", Ok(Empty)),
            // Go takes the status after the first space, however many follow it.
            (" 200 OK\r\nContent-Length: 1\r\n", Ok(Length(1))),
            ("200 OK\r\nContent-Length: \r\n", refused("invalid empty Content-Length \"\"")),
            ("200 OK\r\nContent-Length: +7\r\n", refused("bad Content-Length \"+7\"")),
            (
                "200 OK\r\nContent-Length: 9223372036854775808\r\n",
                refused("bad Content-Length \"9223372036854775808\""),
            ),
            (
                "200 OK\r\nTransfer-Encoding: chunked\r\nTransfer-Encoding: chunked\r\n",
                refused("too many transfer encodings: [\"chunked\" \"chunked\"]"),
            ),
            // Go checks the coding and the lengths before it looks at the status.
            (
                "204 No Content\r\nTransfer-Encoding: gzip\r\n",
                refused("unsupported transfer encoding: \"gzip\""),
            ),
            (
                "304 Not Modified\r\nContent-Length: 1\r\nContent-Length: 2\r\n",
                refused("http: message cannot contain multiple Content-Length headers; got [\"1\" \"2\"]"),
            ),
            ("404 Not Found\r\nTransfer-Encoding: chunked\r\n", Ok(Chunked)),
            ("101 Switching Protocols\r\n", Ok(Empty)),
        ];
        for (head, want) in cases {
            let text = format!("HTTP/1.1 {head}\r\n");
            let got = parse_head(text.as_bytes()).map(|h| h.map(|h| h.framing));
            assert_eq!(got, want.map(Some), "{head:?}");
        }
        // HTTP/1.0's Transfer-Encoding is ignored.
        let got = parse_head(b"HTTP/1.0 204 No Content\r\nTransfer-Encoding: gzip\r\n\r\n");
        assert_eq!(got.map(|h| h.map(|h| h.framing)), Ok(Some(Empty)));
        assert_eq!(parse_head(b"HTTP/1.1 200 OK\r\nContent-Len"), Ok(None));
    }

    #[test]
    fn chunk_lines_follow_go() {
        assert_eq!(chunk_size(b"1a\r\n"), Ok(26));
        assert_eq!(chunk_size(b"1A;name=value \t\r\n"), Ok(26));
        assert_eq!(chunk_size(b"5 \t\r\n"), Ok(5));
        assert_eq!(chunk_size(b"ffffffffffffffff\r\n"), Ok(u64::MAX));
        assert_eq!(chunk_size(b"1ffffffffffffffff\r\n"), Err("http chunk length too large"));
        assert_eq!(chunk_size(b"\r\n"), Err("empty hex number for chunk length"));
        assert_eq!(chunk_size(b";x\r\n"), Err("empty hex number for chunk length"));
        assert_eq!(chunk_size(b"2 ;x\r\n"), Err("invalid byte in chunk length"));
        assert_eq!(chunk_size(b"-1\r\n"), Err("invalid byte in chunk length"));
        assert_eq!(chunk_size(b"5\n"), Err("chunked line ends with bare LF"));
        assert_eq!(chunk_size(b"5\r;x\r\n"), Err("invalid CR in chunked line"));
    }

    #[tokio::test]
    async fn a_chunked_body_ends_with_its_trailer() {
        let chunked =
            |rest: &str| format!("HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n2\r\nok\r\n{rest}");
        for step in [1, 4096] {
            let ok = Ok((200, None, b"ok".to_vec()));
            assert_eq!(answer(chunked("0\r\n\r\n").as_bytes(), step).await, ok);
            assert_eq!(answer(chunked("0\r\nX-T: 1\r\nX-U: 2\r\n\r\n").as_bytes(), step).await, ok);
            assert_eq!(
                answer(chunked("0\r\n\r").as_bytes(), step).await,
                Err("http: unexpected EOF reading trailer".to_owned())
            );
            assert_eq!(
                answer(chunked("0\r\nX-T: 1\r\n").as_bytes(), step).await,
                Err("http: suspiciously long trailer after chunked body".to_owned())
            );
            let long = format!("0\r\nX-T: {}\r\n\r\n", "t".repeat(5000));
            assert_eq!(
                answer(chunked(&long).as_bytes(), step).await,
                Err("http: suspiciously long trailer after chunked body".to_owned())
            );
        }
    }

    /// Chunks that carry next to no data for their lines (here a 4 KiB extension a byte) are
    /// refused once the overhead passes 16 KiB, as Go refuses them.
    #[tokio::test]
    async fn chunks_of_almost_no_data_are_refused() {
        let mut bytes = b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n".to_vec();
        for _ in 0..8 {
            bytes.extend_from_slice(format!("1;{}\r\nx\r\n", "e".repeat(4000)).as_bytes());
        }
        bytes.extend_from_slice(b"0\r\n\r\n");
        assert_eq!(answer(&bytes, 4096).await, Err("chunked encoding contains too much non-data".to_owned()));
    }

    /// A head of many tiny lines gets a header table of at most [`MAX_HEADERS`] entries.
    #[test]
    fn the_header_table_is_bounded() {
        let head = |n: usize| format!("HTTP/1.1 200 OK\r\n{}Content-Length: 0\r\n\r\n", "a:b\r\n".repeat(n));
        assert_eq!(parse_head(head(MAX_HEADERS - 1).as_bytes()).map(|h| h.map(|h| h.status)), Ok(Some(200)));
        assert_eq!(
            parse_head(head(50_000).as_bytes()).map(|h| h.map(|h| h.status)),
            Err(format!("{BROKEN}malformed MIME header: too many headers"))
        );
    }
}
