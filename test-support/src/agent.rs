//! Running the `probelet` binary in a test: starting it (in cluster mode on a kubeconfig for the
//! fake API server), its HTTP address from the start line it prints, plain `GET`s on its
//! listener (exact status code and body, an optional bearer token), its metrics, waiting for
//! what it writes, and stopping it (SIGTERM and exit 0, or a kill).

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;

use k8s_openapi::api::core::v1::Pod;
use tokio::io::{AsyncBufRead, AsyncBufReadExt, AsyncReadExt, AsyncWriteExt};
use tokio::process::{Child, Command};

use crate::apiserver::FakeApiServer;

/// The agent's start line (the first that names an `http://` or `https://` address), read from
/// its standard output within 60 s.
pub async fn banner_line(lines: &mut tokio::io::Lines<impl AsyncBufRead + Unpin>) -> String {
    tokio::time::timeout(Duration::from_secs(60), async {
        loop {
            let line = lines.next_line().await.unwrap().expect("agent exited before its banner");
            if line.contains("http://") || line.contains("https://") {
                return line;
            }
        }
    })
    .await
    .unwrap()
}

/// The `host:port` of the start line (`… http://ADDR/pods, /metrics`), read from the agent's
/// standard output within 60 s; `https://host:port` when the agent serves TLS, which [`get`]
/// then speaks.
pub async fn banner_addr(lines: &mut tokio::io::Lines<impl AsyncBufRead + Unpin>) -> String {
    let banner = banner_line(lines).await;
    let (scheme, start) = match banner.find("https://") {
        Some(at) => ("https://", at + "https://".len()),
        None => ("", banner.find("http://").unwrap() + "http://".len()),
    };
    format!("{scheme}{}", &banner[start..start + banner[start..].find('/').unwrap()])
}

/// `GET path` on a new connection, with `Authorization: Bearer <token>` when given: the status
/// code and the body. An `addr` of `https://host:port` is spoken to over TLS, trusting whatever
/// certificate the agent serves (its self-signed one, as a kubelet's scrapers do).
pub async fn get(addr: &str, path: &str, token: Option<&str>) -> (u16, String) {
    let auth = token.map(|t| format!("Authorization: Bearer {t}\r\n")).unwrap_or_default();
    let (tls, host) = match addr.strip_prefix("https://") {
        Some(host) => (true, host),
        None => (false, addr),
    };
    let request = format!("GET {path} HTTP/1.1\r\nHost: {host}\r\n{auth}Connection: close\r\n\r\n");
    let stream = tokio::net::TcpStream::connect(host).await.unwrap();
    let mut bytes = Vec::new();
    let read = async {
        if tls {
            let mut stream = crate::tls::trusting_client()
                .connect(rustls::pki_types::ServerName::try_from("localhost").unwrap(), stream)
                .await
                .unwrap();
            stream.write_all(request.as_bytes()).await.unwrap();
            // A server may close without TLS's close_notify once it has answered: what arrived
            // is the answer.
            let _ = stream.read_to_end(&mut bytes).await;
        } else {
            let mut stream = stream;
            stream.write_all(request.as_bytes()).await.unwrap();
            stream.read_to_end(&mut bytes).await.unwrap();
        }
    };
    tokio::time::timeout(Duration::from_secs(10), read).await.unwrap();
    let response = String::from_utf8_lossy(&bytes).into_owned();
    let code = response[9..12].parse().unwrap();
    let body = response.split_once("\r\n\r\n").map(|(_, b)| b.to_owned()).unwrap_or_default();
    (code, body)
}

/// A file a test wrote in the temporary folder, removed when dropped, so that a test that
/// fails (a panic before its own clean-up) leaves nothing behind. Used as its path.
#[derive(Debug)]
pub struct TempFile(PathBuf);

impl TempFile {
    /// Takes charge of the file at `path`.
    pub fn new(path: PathBuf) -> Self {
        Self(path)
    }
}

impl std::ops::Deref for TempFile {
    type Target = Path;

    fn deref(&self) -> &Path {
        &self.0
    }
}

impl AsRef<Path> for TempFile {
    fn as_ref(&self) -> &Path {
        &self.0
    }
}

impl AsRef<std::ffi::OsStr> for TempFile {
    fn as_ref(&self) -> &std::ffi::OsStr {
        self.0.as_os_str()
    }
}

impl Drop for TempFile {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0);
    }
}

/// Writes a kubeconfig for an API server at `url` (no credentials) to a temporary file named
/// after `name` and this process; removed when the returned file is dropped.
pub fn kubeconfig_for(url: &str, name: &str) -> TempFile {
    kubeconfig_with_user(url, name, "{}")
}

/// [`kubeconfig_for`] with `user` (YAML, in flow style or indented by four spaces) as the
/// user's credentials: an `exec` credential plugin, a token.
pub fn kubeconfig_with_user(url: &str, name: &str, user: &str) -> TempFile {
    let path = std::env::temp_dir().join(format!("probelet-kubeconfig-{name}-{}", std::process::id()));
    std::fs::write(
        &path,
        format!(
            "apiVersion: v1\nkind: Config\nclusters:\n- name: fake\n  cluster: {{server: \"{url}\"}}\nusers:\n- name: fake\n  user: {user}\ncontexts:\n- name: fake\n  context: {{cluster: fake, user: fake}}\ncurrent-context: fake\n"
        ),
    )
    .unwrap();
    TempFile(path)
}

/// Starts `probelet run` (the binary at `probelet`: a test's `env!("CARGO_BIN_EXE_probelet")`,
/// which only the root package's tests see) in cluster mode against the API server at `url`,
/// for node `node-a`, on a free loopback port, with `extra` arguments; returns it with the
/// kubeconfig written for it ([`kubeconfig_for`], removed when dropped). Killed when dropped.
pub fn spawn_cluster_agent(
    probelet: &str,
    url: &str,
    name: &str,
    extra: &[&str],
    stdout: Stdio,
    stderr: Stdio,
) -> (Child, TempFile) {
    let kubeconfig = kubeconfig_for(url, name);
    (spawn_cluster_agent_on(probelet, &kubeconfig, extra, stdout, stderr), kubeconfig)
}

/// [`spawn_cluster_agent`] on a kubeconfig of the test's own.
pub fn spawn_cluster_agent_on(
    probelet: &str,
    kubeconfig: &Path,
    extra: &[&str],
    stdout: Stdio,
    stderr: Stdio,
) -> Child {
    Command::new(probelet)
        .args(["run", "--kubeconfig"])
        .arg(kubeconfig)
        .args(["--node-name", "node-a", "--listen", "127.0.0.1:0"])
        .args(extra)
        .stdout(stdout)
        .stderr(stderr)
        .kill_on_drop(true)
        .spawn()
        .unwrap()
}

/// Sends SIGTERM to a running child.
pub fn sigterm(child: &Child) {
    if let Some(id) = child.id() {
        let _ = std::process::Command::new("kill").args(["-TERM", &id.to_string()]).status();
    }
}

/// SIGTERM, then waits up to `limit` for the child to exit, and asserts it exited 0 (the agent
/// stops its probes and containers, flushes and exits cleanly on SIGTERM).
pub async fn stop(child: &mut Child, limit: Duration) {
    sigterm(child);
    let status = tokio::time::timeout(limit, child.wait()).await.unwrap().unwrap();
    assert!(status.success(), "exit 0 on SIGTERM: {status:?}");
}

/// What a `Drop` of a test's agent does: SIGTERM and a bounded while (15 s) for it to stop its
/// containers, which the SIGKILL of `kill_on_drop` would leave running. Drop cannot await, so
/// this polls.
#[allow(clippy::disallowed_methods, reason = "a real process's exit, on the wall clock, outside any runtime")]
pub fn stop_on_drop(child: &mut Child) {
    sigterm(child);
    let deadline = std::time::Instant::now() + Duration::from_secs(15);
    while std::time::Instant::now() < deadline && matches!(child.try_wait(), Ok(None)) {
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// Kills a cluster-mode agent (nothing of it is asserted any more) and removes its kubeconfig.
pub async fn kill(mut child: Child, kubeconfig: &Path) {
    let _ = child.start_kill();
    let _ = child.wait().await;
    let _ = std::fs::remove_file(kubeconfig);
}

/// Waits (at most 30 s, polling) until the fake's copy of pod `default/name` satisfies `pred`;
/// returns it. `what` names the condition in the failure message.
pub async fn wait_for_pod(fake: &FakeApiServer, name: &str, what: &str, pred: impl Fn(&Pod) -> bool) -> Pod {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    loop {
        if let Some(pod) = fake.pod("default", name).filter(|p| pred(p)) {
            return pod;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "{name}: {what} within 30 s; pod: {:?}",
            fake.pod("default", name)
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Waits (at most 30 s) until the fake holds an event satisfying `pred` (events are written in
/// the background); returns it. `what` names it in the failure message.
pub async fn wait_for_event(
    fake: &FakeApiServer,
    what: &str,
    pred: impl Fn(&serde_json::Value) -> bool,
) -> serde_json::Value {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    loop {
        let events = fake.events();
        if let Some(event) = events.iter().find(|e| pred(e)) {
            return event.clone();
        }
        assert!(tokio::time::Instant::now() < deadline, "{what} within 30 s: {events:?}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// The agent's `/metrics` text (open without a token, as on the kubelet); asserts a 200.
pub async fn metrics(addr: &str) -> String {
    let (code, body) = get(addr, "/metrics", None).await;
    assert_eq!(code, 200, "/metrics: {body}");
    body
}

/// The value of one series (`name{labels}` exactly as exported) in the agent's `/metrics`; 0
/// when absent, as a counter that has not moved yet.
pub async fn series_value(addr: &str, series: &str) -> f64 {
    let text = metrics(addr).await;
    text.lines().find_map(|l| l.strip_prefix(series).and_then(|v| v.trim().parse().ok())).unwrap_or(0.0)
}

/// The sum of the series of metric `name` in the agent's `/metrics` whose labels include every
/// one of `labels` (each `key="value"` as exported); 0 when there is none.
pub async fn series_sum(addr: &str, name: &str, labels: &[&str]) -> f64 {
    let text = metrics(addr).await;
    text.lines()
        .filter_map(|l| l.strip_prefix(name)?.strip_prefix('{'))
        .filter_map(|l| l.split_once("} "))
        .filter(|(set, _)| labels.iter().all(|want| set.split(',').any(|label| label == *want)))
        .filter_map(|(_, value)| value.trim().parse::<f64>().ok())
        .sum()
}

/// A running agent binary (`probelet ARGS --listen 127.0.0.1:0`) and its HTTP address; its
/// output is read and dropped so a full pipe never blocks it. Dropped while running (a failed
/// test), it gets [`stop_on_drop`]'s bounded SIGTERM.
pub struct RunningAgent {
    /// The process.
    pub child: Child,
    /// The `host:port` of its listener.
    pub addr: String,
}

/// Runs `script` under `sh`, which must `exec` the agent (after a `ulimit`, say) with a
/// listener; returns it once the agent printed its start line, with the listener's address.
pub async fn start_under_shell(script: &str) -> (Child, String) {
    let mut command = Command::new("sh");
    command.args(["-c", script]);
    spawn_until_banner(command).await
}

/// Spawns `command` (the agent, or a shell that execs it) and waits for the agent's start line;
/// its further output is read and dropped.
async fn spawn_until_banner(mut command: Command) -> (Child, String) {
    let mut child = command.stdout(Stdio::piped()).stderr(Stdio::null()).kill_on_drop(true).spawn().unwrap();
    let mut lines = tokio::io::BufReader::new(child.stdout.take().unwrap()).lines();
    let addr = banner_addr(&mut lines).await;
    tokio::spawn(async move { while let Ok(Some(_)) = lines.next_line().await {} });
    (child, addr)
}

impl RunningAgent {
    /// Starts the binary at `probelet` (a test's `env!("CARGO_BIN_EXE_probelet")`) with `args`
    /// and waits for its start line.
    pub async fn start(probelet: &str, args: &[&str]) -> RunningAgent {
        let mut command = Command::new(probelet);
        command.args(args).args(["--listen", "127.0.0.1:0"]);
        let (child, addr) = spawn_until_banner(command).await;
        RunningAgent { child, addr }
    }

    /// SIGTERM, and exit 0 within 30 s (standalone mode stops its containers first).
    pub async fn stop(mut self) {
        stop(&mut self.child, Duration::from_secs(30)).await;
    }
}

impl Drop for RunningAgent {
    fn drop(&mut self) {
        stop_on_drop(&mut self.child);
    }
}
