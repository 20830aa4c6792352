//! An HTTPS server on 127.0.0.1 that speaks only HTTP/2: its TLS picks ALPN `h2` and nothing
//! else, so a client that does not offer `h2` is refused in the handshake
//! (`no_application_protocol`). Built on the `h2` crate's server so that it can record each
//! request's pseudo-headers and fields as they arrived, and answer with a reset stream; and
//! `RawH2Server`, which writes its frames by hand for what that server will not send.

use std::net::SocketAddr;
use std::sync::{Arc, Mutex};

use bytes::Bytes;
use tokio::net::TcpListener;
use tokio::task::{JoinHandle, JoinSet};

use crate::http_server::self_signed_acceptor;

/// One request as the server saw it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct H2Request {
    /// The server's own address, for handlers that redirect to themselves.
    pub local_addr: SocketAddr,
    /// `:method`.
    pub method: String,
    /// `:scheme`.
    pub scheme: String,
    /// `:authority`.
    pub authority: String,
    /// `:path`.
    pub path: String,
    /// The regular fields, in arrival order (names lower-case, as HTTP/2 carries them).
    pub headers: Vec<(String, String)>,
}

/// What the server answers.
#[derive(Debug, Clone)]
pub enum H2Reply {
    /// A status, fields and a body.
    Answer { status: u16, headers: Vec<(String, String)>, body: Vec<u8> },
    /// A reset of the request's stream with this HTTP/2 error code, before any answer.
    Reset(u32),
    /// No answer at all, the stream kept open while the connection lasts.
    Silent,
}

impl H2Reply {
    /// `status` with `body`.
    pub fn status(status: u16, body: impl Into<Vec<u8>>) -> H2Reply {
        H2Reply::Answer { status, headers: Vec::new(), body: body.into() }
    }

    /// 200 with `body`.
    pub fn ok(body: impl Into<Vec<u8>>) -> H2Reply {
        H2Reply::status(200, body)
    }

    /// A redirect to `location`, without a body.
    pub fn redirect(status: u16, location: &str) -> H2Reply {
        H2Reply::status(status, Vec::new()).with_header("location", location)
    }

    /// Adds a field to an answer.
    pub fn with_header(mut self, name: &str, value: &str) -> H2Reply {
        if let H2Reply::Answer { headers, .. } = &mut self {
            headers.push((name.to_owned(), value.to_owned()));
        }
        self
    }
}

type Handler = Arc<dyn Fn(&H2Request) -> H2Reply + Send + Sync>;

/// A running server; dropping it stops it and every connection it holds.
pub struct H2Server {
    pub addr: SocketAddr,
    requests: Arc<Mutex<Vec<H2Request>>>,
    task: JoinHandle<()>,
}

impl H2Server {
    /// An HTTPS server accepting only `h2`, with a fresh self-signed certificate for 127.0.0.1
    /// and localhost, answering every request with `handler`.
    pub async fn start(handler: impl Fn(&H2Request) -> H2Reply + Send + Sync + 'static) -> H2Server {
        let handler: Handler = Arc::new(handler);
        let acceptor = self_signed_acceptor(&[b"h2"]);
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind 127.0.0.1:0");
        let addr = listener.local_addr().expect("local addr");
        let requests = Arc::new(Mutex::new(Vec::new()));
        let recorded = requests.clone();
        let task = tokio::spawn(async move {
            // Dropped with the accept task, which aborts every connection task.
            let mut connections = JoinSet::new();
            loop {
                let Ok((stream, _)) = listener.accept().await else { continue };
                let (acceptor, handler, recorded) = (acceptor.clone(), handler.clone(), recorded.clone());
                connections.spawn(async move {
                    let Ok(stream) = acceptor.accept(stream).await else { return };
                    let Ok(mut conn) = h2::server::handshake(stream).await else { return };
                    // Accepting drives the connection, which also sends the answers' data.
                    let mut unanswered = Vec::new();
                    while let Some(Ok((request, respond))) = conn.accept().await {
                        unanswered.extend(answer(addr, request, respond, &*handler, &recorded));
                    }
                });
            }
        });
        H2Server { addr, requests, task }
    }

    pub fn port(&self) -> u16 {
        self.addr.port()
    }

    /// `https://127.0.0.1:<port><path>`.
    pub fn url(&self, path: &str) -> String {
        format!("https://{}{path}", self.addr)
    }

    /// The requests seen so far, in arrival order.
    pub fn requests(&self) -> Vec<H2Request> {
        self.requests.lock().expect("requests lock").clone()
    }
}

impl Drop for H2Server {
    fn drop(&mut self) {
        self.task.abort();
    }
}

fn answer(
    local_addr: SocketAddr,
    request: http::Request<h2::RecvStream>,
    mut respond: h2::server::SendResponse<Bytes>,
    handler: &(dyn Fn(&H2Request) -> H2Reply + Send + Sync),
    recorded: &Mutex<Vec<H2Request>>,
) -> Option<h2::server::SendResponse<Bytes>> {
    let text = |v: &http::HeaderValue| String::from_utf8_lossy(v.as_bytes()).into_owned();
    let seen = H2Request {
        local_addr,
        method: request.method().to_string(),
        scheme: request.uri().scheme_str().unwrap_or_default().to_owned(),
        authority: request.uri().authority().map(|a| a.to_string()).unwrap_or_default(),
        path: request.uri().path_and_query().map(|p| p.to_string()).unwrap_or_default(),
        headers: request.headers().iter().map(|(n, v)| (n.as_str().to_owned(), text(v))).collect(),
    };
    let reply = handler(&seen);
    recorded.lock().expect("requests lock").push(seen);
    match reply {
        H2Reply::Silent => return Some(respond),
        H2Reply::Reset(code) => respond.send_reset(h2::Reason::from(code)),
        H2Reply::Answer { status, headers, body } => {
            let mut response = http::Response::builder().status(status);
            for (name, value) in &headers {
                response = response.header(name, value);
            }
            let response = response.body(()).expect("a response");
            let Ok(mut send) = respond.send_response(response, body.is_empty()) else { return None };
            if !body.is_empty() {
                let _ = send.send_data(Bytes::from(body), true);
            }
        }
    }
    None
}

/// What the raw HTTP/2 server does once a connection's request has ended (its HEADERS carried
/// END_STREAM), for answers the `h2` crate's server will not make (a GOAWAY that leaves the
/// stream out).
#[derive(Debug, Clone)]
pub enum RawAct {
    /// Answers 200 with this body.
    Answer(&'static str),
    /// Resets the stream with this HTTP/2 error code.
    Reset(u32),
    /// Sends GOAWAY with this last stream id and error code.
    GoAway { last: u32, code: u32 },
}

/// An HTTPS server on 127.0.0.1 (ALPN `h2` only) that writes HTTP/2 frame by frame: each
/// connection, in the order they come, does what the script says to its request, and a
/// connection past the script does `then`. Dropping it stops it and every connection it holds.
pub struct RawH2Server {
    pub addr: SocketAddr,
    connections: Arc<std::sync::atomic::AtomicUsize>,
    task: JoinHandle<()>,
}

impl RawH2Server {
    pub async fn start(script: Vec<RawAct>, then: RawAct) -> RawH2Server {
        use std::sync::atomic::{AtomicUsize, Ordering};
        let acceptor = self_signed_acceptor(&[b"h2"]);
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind 127.0.0.1:0");
        let addr = listener.local_addr().expect("local addr");
        let connections = Arc::new(AtomicUsize::new(0));
        let counted = connections.clone();
        let task = tokio::spawn(async move {
            let mut open = JoinSet::new();
            loop {
                let Ok((stream, _)) = listener.accept().await else { continue };
                let index = counted.fetch_add(1, Ordering::SeqCst);
                let act = script.get(index).cloned().unwrap_or_else(|| then.clone());
                let acceptor = acceptor.clone();
                open.spawn(async move {
                    let Ok(stream) = acceptor.accept(stream).await else { return };
                    raw_connection(stream, act).await;
                });
            }
        });
        RawH2Server { addr, connections, task }
    }

    pub fn port(&self) -> u16 {
        self.addr.port()
    }

    /// `https://127.0.0.1:<port><path>`.
    pub fn url(&self, path: &str) -> String {
        format!("https://{}{path}", self.addr)
    }

    /// The connections accepted so far.
    pub fn connections(&self) -> usize {
        self.connections.load(std::sync::atomic::Ordering::SeqCst)
    }
}

impl Drop for RawH2Server {
    fn drop(&mut self) {
        self.task.abort();
    }
}

async fn raw_connection<S: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin>(mut stream: S, act: RawAct) {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    if stream.read_exact(&mut [0u8; 24]).await.is_err() {
        return;
    }
    let _ = stream.write_all(&raw_frame(0x4, 0, 0, &[])).await;
    loop {
        let mut header = [0u8; 9];
        if stream.read_exact(&mut header).await.is_err() {
            return;
        }
        let len = usize::from(header[0]) << 16 | usize::from(header[1]) << 8 | usize::from(header[2]);
        let (kind, flags) = (header[3], header[4]);
        let stream_id = u32::from_be_bytes([header[5] & 0x7f, header[6], header[7], header[8]]);
        if stream.read_exact(&mut vec![0u8; len]).await.is_err() {
            return;
        }
        let bytes = match (kind, &act) {
            // SETTINGS: acknowledged.
            (0x4, _) if flags & 0x1 == 0 => raw_frame(0x4, 0x1, 0, &[]),
            // HEADERS that end the request.
            (0x1, RawAct::Answer(body)) if flags & 0x1 != 0 => {
                // `:status: 200`, the static table's entry 8.
                let mut bytes = raw_frame(0x1, 0x4, stream_id, &[0x88]);
                bytes.extend(raw_frame(0x0, 0x1, stream_id, body.as_bytes()));
                bytes
            }
            (0x1, RawAct::Reset(code)) if flags & 0x1 != 0 => {
                raw_frame(0x3, 0, stream_id, &code.to_be_bytes())
            }
            (0x1, RawAct::GoAway { last, code }) if flags & 0x1 != 0 => {
                let mut payload = last.to_be_bytes().to_vec();
                payload.extend(code.to_be_bytes());
                raw_frame(0x7, 0, 0, &payload)
            }
            _ => continue,
        };
        if stream.write_all(&bytes).await.is_err() {
            return;
        }
    }
}

/// An HTTP/2 frame.
fn raw_frame(kind: u8, flags: u8, stream_id: u32, payload: &[u8]) -> Vec<u8> {
    let len = u32::try_from(payload.len()).expect("a small payload").to_be_bytes();
    let mut bytes = vec![len[1], len[2], len[3], kind, flags];
    bytes.extend(stream_id.to_be_bytes());
    bytes.extend(payload);
    bytes
}
