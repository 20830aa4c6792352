//! `pods/exec` for the fake API server: the checks the real kube-apiserver makes before it
//! proxies an exec (`ExecLocation` in `pkg/registry/core/pod/strategy.go`), the websocket
//! handshake with the `channel.k8s.io` subprotocols (`wsstream` in k8s.io/apimachinery), and a
//! session that streams what a test's handler says the command printed, then the command's
//! final `metav1.Status` on channel 3, as the kubelet's (v4) or the API server's stream
//! translator (v5) writes it.
//!
//! Tests register one handler ([`FakeApiServer::on_exec`]) that answers every exec with an
//! [`ExecReply`]; without one, an exec ends with an `InternalError` status, as a command the
//! runtime could not start does.
//!
//! Known gaps: no SPDY, no stdin or tty (the frames a client sends are read and ignored), no
//! `v1`–`v3` or base64 subprotocols, and the frames are cut at 32 KiB (`io.Copy`'s buffer)
//! rather than wherever the container's writes fell.

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use futures::{SinkExt, StreamExt};
use http::{HeaderMap, HeaderValue, Method, Request, Response, StatusCode};
use http_body_util::{BodyExt, Empty};
use hyper::body::Incoming;
use hyper::upgrade::OnUpgrade;
use hyper_util::rt::TokioIo;
use serde_json::{Value, json};
use tokio::sync::watch;
use tokio_tungstenite::WebSocketStream;
use tokio_tungstenite::tungstenite::Message;
use tokio_tungstenite::tungstenite::handshake::derive_accept_key;
use tokio_tungstenite::tungstenite::protocol::Role;

use super::store::Reply;
use super::validation::{ApiError, Resource};
use super::{Body, FakeApiServer, Shared, lock, reply_response};

/// `v5.channel.k8s.io`: v4 plus the close signal (channel 255).
pub const V5: &str = "v5.channel.k8s.io";
/// `v4.channel.k8s.io`: stdin 0, stdout 1, stderr 2, the final `Status` as JSON on 3.
pub const V4: &str = "v4.channel.k8s.io";

const STDOUT: u8 = 1;
const STDERR: u8 = 2;
const STATUS: u8 = 3;
const CLOSE: u8 = 255;
/// `io.Copy`'s buffer: the most a frame carries.
const FRAME: usize = 32 * 1024;

/// What a command run through `pods/exec` does.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct ExecReply {
    pub stdout: Vec<u8>,
    pub stderr: Vec<u8>,
    pub exit_code: i32,
    /// How long the command runs after printing, before it exits.
    pub delay: Duration,
    /// The runtime could not run the command: the status is `InternalError` with
    /// `error executing command in container: <this>` instead of an exit code.
    pub error: Option<String>,
    /// The connection breaks after the output, before the status (an API server restart).
    pub hang_up: bool,
}

impl ExecReply {
    /// Exits with `code` having printed nothing.
    pub fn exit(code: i32) -> ExecReply {
        ExecReply { exit_code: code, ..ExecReply::default() }
    }

    pub fn stdout(mut self, out: impl Into<Vec<u8>>) -> ExecReply {
        self.stdout = out.into();
        self
    }

    pub fn stderr(mut self, err: impl Into<Vec<u8>>) -> ExecReply {
        self.stderr = err.into();
        self
    }

    pub fn delay(mut self, delay: Duration) -> ExecReply {
        self.delay = delay;
        self
    }
}

/// Answers an exec: `(namespace, pod, container, command)`.
pub(crate) type ExecHandler = Arc<dyn Fn(&str, &str, &str, &[String]) -> ExecReply + Send + Sync>;

/// How an exec session ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ExecEnd {
    /// The status frame was sent and the websocket closed.
    Completed,
    /// The client closed the connection (or it broke) before the command ended.
    ClientGone,
    /// [`ExecReply::hang_up`]: the fake broke the connection before the status.
    HungUp,
    /// The fake was shut down.
    Shutdown,
}

/// An exec that got past the checks and was upgraded.
#[derive(Clone, Debug, PartialEq)]
pub struct ExecSession {
    pub namespace: String,
    pub pod: String,
    pub container: String,
    pub command: Vec<String>,
    /// The negotiated subprotocol.
    pub protocol: String,
    pub stdin: bool,
    pub stdout: bool,
    pub stderr: bool,
    /// `None` while it runs.
    pub end: Option<ExecEnd>,
}

/// The exec half of the fake's state.
pub(super) struct ExecState {
    handler: std::sync::Mutex<Option<ExecHandler>>,
    /// Subprotocols the fake accepts.
    protocols: std::sync::Mutex<Vec<String>>,
    sessions: std::sync::Mutex<Vec<ExecSession>>,
    /// Bumped whenever a session ends.
    ended: watch::Sender<usize>,
}

impl Default for ExecState {
    fn default() -> Self {
        ExecState {
            handler: std::sync::Mutex::new(None),
            protocols: std::sync::Mutex::new(vec![V5.to_owned(), V4.to_owned()]),
            sessions: std::sync::Mutex::new(Vec::new()),
            ended: watch::channel(0).0,
        }
    }
}

impl FakeApiServer {
    /// Answers every later exec with `handler(namespace, pod, container, command)`.
    pub fn on_exec(
        &self,
        handler: impl Fn(&str, &str, &str, &[String]) -> ExecReply + Send + Sync + 'static,
    ) {
        *lock(&self.shared.exec.handler) = Some(Arc::new(handler));
    }

    /// The subprotocols the fake accepts (default v5 and v4); e.g. only v4, as servers before
    /// Kubernetes 1.30 did.
    pub fn set_exec_protocols(&self, protocols: &[&str]) {
        *lock(&self.shared.exec.protocols) = protocols.iter().map(|p| (*p).to_owned()).collect();
    }

    /// Every exec session so far, in the order they started.
    pub fn exec_sessions(&self) -> Vec<ExecSession> {
        lock(&self.shared.exec.sessions).clone()
    }

    /// Waits until at least `n` exec sessions have ended, then returns all sessions.
    pub async fn exec_sessions_ended(&self, n: usize) -> Vec<ExecSession> {
        let mut ended = self.shared.exec.ended.subscribe();
        let _ = ended.wait_for(|count| *count >= n).await;
        self.exec_sessions()
    }
}

/// An exec request's upgrade, claimed before the body is read.
pub(super) struct ExecUpgrade {
    namespace: String,
    pod: String,
    headers: HeaderMap,
    on_upgrade: OnUpgrade,
}

/// `Some` when the request is for `/api/v1/namespaces/{ns}/pods/{name}/exec`.
pub(super) fn claim(req: &mut Request<Incoming>) -> Option<ExecUpgrade> {
    let (namespace, pod) = match req.uri().path().trim_matches('/').split('/').collect::<Vec<_>>()[..] {
        ["api", "v1", "namespaces", ns, "pods", name, "exec"] => (ns.to_owned(), name.to_owned()),
        _ => return None,
    };
    let headers = req.headers().clone();
    Some(ExecUpgrade { namespace, pod, headers, on_upgrade: hyper::upgrade::on(req) })
}

/// Checks an exec as the API server does, then upgrades it and runs the session.
pub(super) fn serve(
    shared: &Arc<Shared>,
    method: &Method,
    query: &[(String, String)],
    up: ExecUpgrade,
) -> Response<Body> {
    match prepare(shared, method, query, &up) {
        Ok((session, accept)) => {
            let protocol = session.protocol.clone();
            let index = {
                let mut sessions = lock(&shared.exec.sessions);
                sessions.push(session.clone());
                sessions.len() - 1
            };
            tokio::spawn(run_session(shared.clone(), index, session, up.on_upgrade));
            switching_protocols(&accept, &protocol)
        }
        Err(refusal) => *refusal,
    }
}

/// The answer to an exec the fake refuses (boxed: a response is large).
type Refusal = Box<Response<Body>>;

fn error(e: &ApiError) -> Refusal {
    Box::new(reply_response(Reply::error(e)))
}

fn param<'a>(query: &'a [(String, String)], key: &str) -> Option<&'a str> {
    query.iter().find(|(k, _)| k == key).map(|(_, v)| v.as_str())
}

/// Go's `strconv.ParseBool`, as query parameters are decoded.
fn flag(query: &[(String, String)], key: &str) -> bool {
    param(query, key).is_some_and(super::is_true)
}

fn header(headers: &HeaderMap, name: http::header::HeaderName) -> Option<&str> {
    headers.get(name).and_then(|v| v.to_str().ok())
}

/// Validates the request; the session to run and the `Sec-WebSocket-Accept` value.
fn prepare(
    shared: &Shared,
    method: &Method,
    query: &[(String, String)],
    up: &ExecUpgrade,
) -> Result<(ExecSession, String), Refusal> {
    if method != Method::GET && method != Method::POST {
        return Err(error(&ApiError::method_not_allowed()));
    }
    let Some(pod) = lock(&shared.store).pod(&up.namespace, &up.pod) else {
        return Err(error(&ApiError::not_found(&Resource::PODS, &up.pod)));
    };
    let container = pick_container(&pod, &up.pod, param(query, "container").unwrap_or(""))
        .map_err(|m| error(&ApiError::bad_request(m)))?;
    if pod.pointer("/spec/nodeName").and_then(Value::as_str).unwrap_or("").is_empty() {
        return Err(error(&ApiError::bad_request(format!("pod {} does not have a host assigned", up.pod))));
    }

    // The proxy to the kubelet (upgrade required), then the kubelet's stream options.
    let h = &up.headers;
    let upgrade = header(h, http::header::UPGRADE).unwrap_or("");
    if upgrade.is_empty() {
        return Err(error(&ApiError::bad_request("Upgrade request required")));
    }
    if !upgrade.eq_ignore_ascii_case("websocket") {
        return Err(error(&ApiError::bad_request(format!(
            "the fake API server speaks websocket only, not {upgrade}"
        ))));
    }
    let (stdin, stdout, stderr) = (flag(query, "stdin"), flag(query, "stdout"), flag(query, "stderr"));
    if !stdin && !stdout && !stderr {
        return Err(error(&ApiError::bad_request("you must specify at least 1 of stdin, stdout, stderr")));
    }
    let key = header(h, http::header::SEC_WEBSOCKET_KEY).unwrap_or("");
    let connection_upgrade = header(h, http::header::CONNECTION)
        .is_some_and(|c| c.split(',').any(|t| t.trim().eq_ignore_ascii_case("upgrade")));
    if key.is_empty() || !connection_upgrade || header(h, http::header::SEC_WEBSOCKET_VERSION) != Some("13") {
        return Err(plain(StatusCode::BAD_REQUEST));
    }
    // The client's order wins (`wsstream.handshake`); no match is a bare 403.
    let offered: Vec<&str> = h
        .get_all(http::header::SEC_WEBSOCKET_PROTOCOL)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
        .map(str::trim)
        .collect();
    let supported = lock(&shared.exec.protocols).clone();
    let Some(protocol) = offered.iter().find(|p| supported.iter().any(|s| s == *p)) else {
        return Err(plain(StatusCode::FORBIDDEN));
    };

    let command = query.iter().filter(|(k, _)| k == "command").map(|(_, v)| v.clone()).collect();
    let session = ExecSession {
        namespace: up.namespace.clone(),
        pod: up.pod.clone(),
        container,
        command,
        protocol: (*protocol).to_owned(),
        stdin,
        stdout,
        stderr,
        end: None,
    };
    Ok((session, derive_accept_key(key.as_bytes())))
}

/// `streamLocation`'s container choice: the named one (regular, init or ephemeral), or the
/// only container when none is named.
fn pick_container(pod: &Value, pod_name: &str, requested: &str) -> Result<String, String> {
    let names = |list: &str| -> Vec<String> {
        pod.pointer(&format!("/spec/{list}"))
            .and_then(Value::as_array)
            .map(|cs| cs.iter().filter_map(|c| c["name"].as_str().map(str::to_owned)).collect())
            .unwrap_or_default()
    };
    let (containers, init) = (names("containers"), names("initContainers"));
    if requested.is_empty() {
        return match containers.as_slice() {
            [only] => Ok(only.clone()),
            [] => Err(format!("a container name must be specified for pod {pod_name}")),
            _ => {
                let mut message = format!(
                    "a container name must be specified for pod {pod_name}, choose one of: [{}]",
                    containers.join(" ")
                );
                if !init.is_empty() {
                    message.push_str(&format!(" or one of the init containers: [{}]", init.join(" ")));
                }
                Err(message)
            }
        };
    }
    let known = containers.iter().chain(&init).chain(&names("ephemeralContainers")).any(|c| c == requested);
    if known {
        Ok(requested.to_owned())
    } else {
        Err(format!("container {requested} is not valid for pod {pod_name}"))
    }
}

/// A response without a body, as Go's websocket server writes its handshake failures.
fn plain(code: StatusCode) -> Refusal {
    let mut resp = Response::new(Empty::new().boxed());
    *resp.status_mut() = code;
    Box::new(resp)
}

fn switching_protocols(accept: &str, protocol: &str) -> Response<Body> {
    let mut resp = Response::new(Empty::new().boxed());
    *resp.status_mut() = StatusCode::SWITCHING_PROTOCOLS;
    let h = resp.headers_mut();
    h.insert(http::header::UPGRADE, HeaderValue::from_static("websocket"));
    h.insert(http::header::CONNECTION, HeaderValue::from_static("Upgrade"));
    if let Ok(v) = HeaderValue::from_str(accept) {
        h.insert(http::header::SEC_WEBSOCKET_ACCEPT, v);
    }
    if let Ok(v) = HeaderValue::from_str(protocol) {
        h.insert(http::header::SEC_WEBSOCKET_PROTOCOL, v);
    }
    resp
}

/// The final `Status` the stream carries on channel 3 (metav1.Status as Go marshals it).
pub(crate) fn status_json(reply: &ExecReply) -> Value {
    if let Some(err) = &reply.error {
        let message = format!("error executing command in container: {err}");
        return json!({
            "metadata": {},
            "status": "Failure",
            "message": format!("Internal error occurred: {message}"),
            "reason": "InternalError",
            "details": {"causes": [{"message": message}]},
            "code": 500,
        });
    }
    if reply.exit_code == 0 {
        return json!({"metadata": {}, "status": "Success"});
    }
    let code = reply.exit_code;
    json!({
        "metadata": {},
        "status": "Failure",
        "message": format!("command terminated with non-zero exit code: command terminated with exit code {code}"),
        "reason": "NonZeroExitCode",
        "details": {"causes": [{"reason": "ExitCode", "message": code.to_string()}]},
    })
}

fn frame(channel: u8, data: &[u8]) -> Message {
    let mut bytes = Vec::with_capacity(data.len() + 1);
    bytes.push(channel);
    bytes.extend_from_slice(data);
    Message::Binary(Bytes::from(bytes))
}

async fn run_session(shared: Arc<Shared>, index: usize, session: ExecSession, on_upgrade: OnUpgrade) {
    let mut shutdown = shared.shutdown.clone();
    let end = match on_upgrade.await {
        Ok(upgraded) => {
            let ws = WebSocketStream::from_raw_socket(TokioIo::new(upgraded), Role::Server, None).await;
            tokio::select! {
                end = stream(&shared, &session, ws) => end,
                _ = shutdown.wait_for(|stop| *stop) => ExecEnd::Shutdown,
            }
        }
        Err(_) => ExecEnd::ClientGone,
    };
    if let Some(s) = lock(&shared.exec.sessions).get_mut(index) {
        s.end = Some(end);
    }
    shared.exec.ended.send_modify(|n| *n += 1);
}

async fn stream<S>(shared: &Shared, session: &ExecSession, mut ws: WebSocketStream<S>) -> ExecEnd
where
    S: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin,
{
    let handler = lock(&shared.exec.handler).clone();
    let reply = match handler {
        Some(h) => h(&session.namespace, &session.pod, &session.container, &session.command),
        None => ExecReply {
            error: Some("the fake API server has no exec handler".into()),
            ..ExecReply::default()
        },
    };
    let v5 = session.protocol == V5;
    // The kubelet's first write: an empty frame on the lowest writable channel, so the client
    // knows the stream is up.
    let first = if session.stdout {
        STDOUT
    } else if session.stderr {
        STDERR
    } else {
        STATUS
    };
    let mut frames = vec![frame(first, &[])];
    for (wanted, channel, data) in
        [(session.stdout, STDOUT, &reply.stdout), (session.stderr, STDERR, &reply.stderr)]
    {
        if wanted {
            frames.extend(data.chunks(FRAME).map(|chunk| frame(channel, chunk)));
            if v5 {
                frames.push(frame(CLOSE, &[channel]));
            }
        }
    }
    for f in frames {
        if ws.send(f).await.is_err() {
            return ExecEnd::ClientGone;
        }
    }

    // The command runs on; a client that hangs up (a probe timing out) ends the session.
    let sleep = tokio::time::sleep(reply.delay);
    tokio::pin!(sleep);
    loop {
        tokio::select! {
            _ = &mut sleep => break,
            msg = ws.next() => match msg {
                None | Some(Err(_)) | Some(Ok(Message::Close(_))) => return ExecEnd::ClientGone,
                // Pings are answered by the next read or write; stdin and its close are ignored.
                Some(Ok(_)) => {}
            },
        }
    }
    if reply.hang_up {
        return ExecEnd::HungUp;
    }
    let status = frame(STATUS, status_json(&reply).to_string().as_bytes());
    if ws.send(status).await.is_err() {
        return ExecEnd::ClientGone;
    }
    let _ = ws.close(None).await;
    ExecEnd::Completed
}
