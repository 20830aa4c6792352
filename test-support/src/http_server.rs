//! HTTP/1.1 servers on 127.0.0.1 for the HTTP probe tests, plain or TLS (a self-signed
//! certificate generated at start with rcgen). The server is hand-written rather than hyper so it
//! can record each request head exactly as it arrived — header names in their case and order —
//! and misbehave on purpose: never answer, close early, cut a body short.

use std::net::SocketAddr;
use std::sync::{Arc, Mutex};

use rustls::ServerConfig;
use rustls::pki_types::{PrivateKeyDer, PrivatePkcs8KeyDer};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::net::TcpListener;
use tokio::task::{JoinHandle, JoinSet};
use tokio_rustls::TlsAcceptor;

/// A request head larger than this is answered with 431.
const MAX_HEAD: usize = 1024 * 1024;

/// One request head as the server saw it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RecordedRequest {
    /// The server's own address, for handlers that redirect to themselves.
    pub local_addr: SocketAddr,
    /// `GET /path?q HTTP/1.1`.
    pub request_line: String,
    /// The request-target (`/path?q`).
    pub target: String,
    /// Header lines in arrival order, names as sent.
    pub headers: Vec<(String, String)>,
}

impl RecordedRequest {
    /// The first value of a header, name matched case-insensitively.
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers.iter().find(|(n, _)| n.eq_ignore_ascii_case(name)).map(|(_, v)| v.as_str())
    }

    /// All values of a header, in order.
    pub fn header_values(&self, name: &str) -> Vec<&str> {
        self.headers.iter().filter(|(n, _)| n.eq_ignore_ascii_case(name)).map(|(_, v)| v.as_str()).collect()
    }

    /// The header lines as `(name, value)` string slices, for whole-list comparisons.
    pub fn header_pairs(&self) -> Vec<(&str, &str)> {
        self.headers.iter().map(|(n, v)| (n.as_str(), v.as_str())).collect()
    }

    /// The target without its query.
    pub fn path(&self) -> &str {
        self.target.split_once('?').map_or(self.target.as_str(), |(path, _)| path)
    }
}

/// How the server answers one request.
#[derive(Debug, Clone)]
pub enum Reply {
    /// A complete response; `Content-Length` and `Connection: close` are added.
    Respond { status: u16, headers: Vec<(String, String)>, body: Vec<u8> },
    /// Never answer; the connection stays open until the server is dropped.
    Hang,
    /// Close the connection without answering.
    Close,
    /// Announce `declared` body bytes, send `body` (fewer), then hang or close.
    Partial { status: u16, declared: usize, body: Vec<u8>, then_hang: bool },
    /// Exactly these bytes, each piece written and flushed on its own, then close.
    Raw(Vec<Vec<u8>>),
    /// Exactly these bytes, then nothing more: the connection stays open.
    RawThenHang(Vec<u8>),
}

impl Reply {
    pub fn ok(body: impl Into<Vec<u8>>) -> Reply {
        Reply::status(200, body)
    }

    pub fn status(status: u16, body: impl Into<Vec<u8>>) -> Reply {
        Reply::Respond { status, headers: Vec::new(), body: body.into() }
    }

    /// A redirect with a Location and a small body.
    pub fn redirect(status: u16, location: &str) -> Reply {
        Reply::status(status, format!("see {location}")).with_header("Location", location)
    }

    pub fn with_header(mut self, name: &str, value: &str) -> Reply {
        if let Reply::Respond { headers, .. } = &mut self {
            headers.push((name.to_owned(), value.to_owned()));
        }
        self
    }
}

type Handler = Arc<dyn Fn(&RecordedRequest) -> Reply + Send + Sync>;

/// A running server; dropping it stops it and every connection it holds.
pub struct HttpServer {
    pub addr: SocketAddr,
    scheme: &'static str,
    requests: Arc<Mutex<Vec<RecordedRequest>>>,
    task: JoinHandle<()>,
}

impl HttpServer {
    /// A plain-HTTP server answering every request with `handler`.
    pub async fn plain(handler: impl Fn(&RecordedRequest) -> Reply + Send + Sync + 'static) -> HttpServer {
        HttpServer::start(None, Arc::new(handler)).await
    }

    /// An HTTPS server with a fresh self-signed certificate for 127.0.0.1 and localhost.
    pub async fn tls(handler: impl Fn(&RecordedRequest) -> Reply + Send + Sync + 'static) -> HttpServer {
        HttpServer::start(Some(self_signed_acceptor(&[])), Arc::new(handler)).await
    }

    /// An HTTPS server that picks ALPN `http/1.1` from a client's offer (and refuses a client
    /// that offers protocols but not that one), as an HTTP/1.1-only server such as Go's with
    /// HTTP/2 off does.
    pub async fn tls_http1_alpn(
        handler: impl Fn(&RecordedRequest) -> Reply + Send + Sync + 'static,
    ) -> HttpServer {
        HttpServer::start(Some(self_signed_acceptor(&[b"http/1.1"])), Arc::new(handler)).await
    }

    async fn start(tls: Option<TlsAcceptor>, handler: Handler) -> HttpServer {
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind 127.0.0.1:0");
        let addr = listener.local_addr().expect("local addr");
        let scheme = if tls.is_some() { "https" } else { "http" };
        let requests = Arc::new(Mutex::new(Vec::new()));
        let recorded = requests.clone();
        let task = tokio::spawn(async move {
            // Dropped with the accept task, which aborts every connection task.
            let mut connections = JoinSet::new();
            loop {
                let Ok((stream, _)) = listener.accept().await else { continue };
                let (tls, handler, recorded) = (tls.clone(), handler.clone(), recorded.clone());
                connections.spawn(async move {
                    match tls {
                        None => serve_connection(stream, addr, &*handler, &recorded).await,
                        Some(acceptor) => {
                            if let Ok(stream) = acceptor.accept(stream).await {
                                serve_connection(stream, addr, &*handler, &recorded).await;
                            }
                        }
                    }
                });
                // Reap finished connections so the set does not grow without bound.
                while connections.try_join_next().is_some() {}
            }
        });
        HttpServer { addr, scheme, requests, task }
    }

    pub fn port(&self) -> u16 {
        self.addr.port()
    }

    /// `http(s)://127.0.0.1:<port><path>`.
    pub fn url(&self, path: &str) -> String {
        format!("{}://{}{path}", self.scheme, self.addr)
    }

    /// The requests seen so far, in arrival order.
    pub fn requests(&self) -> Vec<RecordedRequest> {
        self.requests.lock().expect("requests lock").clone()
    }
}

impl Drop for HttpServer {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// Serves one request on a connection, then closes it (the probe asks for `Connection: close`).
async fn serve_connection<S>(
    mut stream: S,
    local_addr: SocketAddr,
    handler: &(dyn Fn(&RecordedRequest) -> Reply + Send + Sync),
    recorded: &Mutex<Vec<RecordedRequest>>,
) where
    S: AsyncRead + AsyncWrite + Unpin,
{
    let Some(head) = read_head(&mut stream).await else {
        let refusal = format!("{}Content-Length: 0\r\nConnection: close\r\n\r\n", status_line(431));
        let _ = stream.write_all(refusal.as_bytes()).await;
        let _ = stream.shutdown().await;
        return;
    };
    let Some(request) = parse_head(&head, local_addr) else { return };
    recorded.lock().expect("requests lock").push(request.clone());
    match handler(&request) {
        Reply::Respond { status, headers, body } => {
            // 1xx, 204 and 304 have no body and no Content-Length.
            let bodiless = status < 200 || status == 204 || status == 304;
            let mut out = status_line(status);
            for (name, value) in &headers {
                out.push_str(&format!("{name}: {value}\r\n"));
            }
            if !bodiless {
                out.push_str(&format!("Content-Length: {}\r\n", body.len()));
            }
            out.push_str("Connection: close\r\n\r\n");
            let _ = stream.write_all(out.as_bytes()).await;
            if !bodiless {
                let _ = stream.write_all(&body).await;
            }
            let _ = stream.shutdown().await;
        }
        Reply::Hang => std::future::pending::<()>().await,
        Reply::RawThenHang(bytes) => {
            let _ = stream.write_all(&bytes).await;
            let _ = stream.flush().await;
            std::future::pending::<()>().await;
        }
        Reply::Raw(pieces) => {
            for piece in pieces {
                let _ = stream.write_all(&piece).await;
                let _ = stream.flush().await;
                tokio::task::yield_now().await;
            }
            let _ = stream.shutdown().await;
        }
        Reply::Close => {
            let _ = stream.shutdown().await;
        }
        Reply::Partial { status, declared, body, then_hang } => {
            let head =
                format!("{}Content-Length: {declared}\r\nConnection: close\r\n\r\n", status_line(status));
            let _ = stream.write_all(head.as_bytes()).await;
            let _ = stream.write_all(&body).await;
            let _ = stream.flush().await;
            if then_hang {
                std::future::pending::<()>().await;
            }
            let _ = stream.shutdown().await;
        }
    }
}

fn status_line(status: u16) -> String {
    let reason =
        http::StatusCode::from_u16(status).ok().and_then(|s| s.canonical_reason()).unwrap_or("Other");
    format!("HTTP/1.1 {status} {reason}\r\n")
}

/// Reads up to the blank line ending the head; `None` if it is larger than [`MAX_HEAD`].
async fn read_head<S: AsyncRead + Unpin>(stream: &mut S) -> Option<Vec<u8>> {
    let mut head = Vec::new();
    let mut chunk = [0u8; 8192];
    loop {
        if let Some(end) = head.windows(4).position(|w| w == b"\r\n\r\n") {
            head.truncate(end);
            return Some(head);
        }
        if head.len() > MAX_HEAD {
            return None;
        }
        match stream.read(&mut chunk).await {
            Ok(0) | Err(_) => return Some(head),
            Ok(n) => head.extend_from_slice(&chunk[..n]),
        }
    }
}

fn parse_head(head: &[u8], local_addr: SocketAddr) -> Option<RecordedRequest> {
    let text = String::from_utf8_lossy(head);
    let mut lines = text.split("\r\n");
    let request_line = lines.next()?.to_owned();
    let target = request_line.split(' ').nth(1)?.to_owned();
    let headers = lines
        .filter_map(|line| line.split_once(':'))
        .map(|(name, value)| (name.to_owned(), value.trim_matches([' ', '\t']).to_owned()))
        .collect();
    Some(RecordedRequest { local_addr, request_line, target, headers })
}

/// A TLS acceptor with a fresh self-signed certificate for 127.0.0.1 and localhost, picking
/// from `alpn` (none: no ALPN at all).
pub(crate) fn self_signed_acceptor(alpn: &[&[u8]]) -> TlsAcceptor {
    let key = rcgen::generate_simple_self_signed(vec!["127.0.0.1".to_owned(), "localhost".to_owned()])
        .expect("self-signed certificate");
    let cert = key.cert.der().clone();
    let private = PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(key.signing_key.serialize_der()));
    let config = ServerConfig::builder_with_provider(Arc::new(rustls::crypto::ring::default_provider()))
        .with_safe_default_protocol_versions()
        .expect("protocol versions")
        .with_no_client_auth()
        .with_single_cert(vec![cert], private)
        .expect("server certificate");
    let mut config = config;
    config.alpn_protocols = alpn.iter().map(|p| p.to_vec()).collect();
    TlsAcceptor::from(Arc::new(config))
}
