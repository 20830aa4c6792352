//! End to end: the status page at `/` of the real `probelet` binary, rendered by headless
//! Chromium (Debian's `chromium` package; the test installs it when missing, as root). Checks
//! what a person sees: a Ready pod marked ready, a failing readiness probe's strip showing the
//! failure, a probe's hostile output shown as text, and the page's own refresh script allowed to
//! run; then the refresh itself, against a loopback server whose page changes (Chromium's
//! virtual time lets the script's timer fire without waiting for it).
//!
//! Waits by polling the agent's JSON endpoints (bounded), never on fixed sleeps.

// The real binary runs on real time: its tests read the real clocks too.
#![allow(clippy::disallowed_methods)]
// Helpers here may panic: a panic fails the test that called them.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use probelet_test_support as support;

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::{Duration, Instant};

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use axum::response::IntoResponse as _;
use probelet::serve::page::{self, Page, PodPage};
use probelet::serve::{Limits, serve_router};
use serde_json::Value;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::process::Command;

/// What the failing pod's probe prints: markup and a script that must stay text.
const HOSTILE: &str = r#"<b id=injected>hostile</b><script>document.title='pwned'</script>"#;

fn temp_dir(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("probelet-page-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// A pod with one `sleep` container and an exec readiness probe running `probe`.
fn pod(name: &str, probe: &str) -> String {
    format!(
        "apiVersion: v1\nkind: Pod\nmetadata: {{name: {name}}}\nspec:\n  terminationGracePeriodSeconds: 1\n  containers:\n  - name: app\n    command: [\"sh\", \"-c\", \"exec sleep 3600\"]\n    readinessProbe:\n      exec: {{command: {probe}}}\n      periodSeconds: 1\n"
    )
}

/// The `chromium` executable. A machine without it gets Debian's `chromium` package installed
/// here, once for all the tests of this file, where the test runs as root with `apt-get`: the
/// README's test command then needs nothing set up by hand. Elsewhere the test fails with the
/// command to run (the page test is never skipped).
fn chromium() -> PathBuf {
    static CHROMIUM: std::sync::OnceLock<Result<PathBuf, String>> = std::sync::OnceLock::new();
    let found = CHROMIUM.get_or_init(|| find_chromium().map_or_else(install_chromium, Ok));
    match found {
        Ok(path) => path.clone(),
        Err(why) => panic!(
            "chromium is not installed and could not be installed ({why}): the status page test renders \
             the page in headless Chromium. Install it with `apt-get install -y --no-install-recommends \
             chromium` (.ci/run does)"
        ),
    }
}

fn find_chromium() -> Option<PathBuf> {
    let path = std::env::var_os("PATH").unwrap_or_default();
    std::env::split_paths(&path).map(|dir| dir.join("chromium")).find(|p| p.is_file())
}

/// Installs Debian's `chromium` with `apt-get` (root only), then finds it.
fn install_chromium() -> Result<PathBuf, String> {
    let uid = std::process::Command::new("id").arg("-u").output().map_err(|e| format!("id -u: {e}"))?;
    if String::from_utf8_lossy(&uid.stdout).trim() != "0" {
        return Err("not root".to_owned());
    }
    eprintln!("status page test: installing Debian's chromium package (once)");
    let apt = |args: &[&str]| -> Result<(), String> {
        let out = std::process::Command::new("apt-get")
            .args(args)
            .env("DEBIAN_FRONTEND", "noninteractive")
            .output()
            .map_err(|e| format!("apt-get: {e}"))?;
        if out.status.success() {
            Ok(())
        } else {
            Err(format!(
                "apt-get {}: {}: {}",
                args[0],
                out.status,
                String::from_utf8_lossy(&out.stderr).trim()
            ))
        }
    };
    apt(&["update", "-qq"])?;
    apt(&["install", "-y", "-qq", "--no-install-recommends", "chromium"])?;
    find_chromium().ok_or_else(|| "apt-get installed no `chromium` on the PATH".to_owned())
}

/// Headless Chromium's DOM of `url` (a loopback URL) after its scripts ran, with a fresh
/// profile and nothing that talks to the network on its own; `extra` arguments before the URL.
async fn dump_dom(url: &str, extra: &[&str]) -> String {
    assert!(url.starts_with("http://127.0.0.1:"), "loopback only: {url}");
    // One profile per run: the tests of this file run Chromium at the same time.
    static RUNS: AtomicUsize = AtomicUsize::new(0);
    let profile = temp_dir(&format!("chromium-profile-{}", RUNS.fetch_add(1, Ordering::SeqCst)));
    let child = Command::new(chromium())
        .args([
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--disable-quic",
            "--no-first-run",
            "--disable-background-networking",
            "--disable-component-update",
            "--disable-sync",
        ])
        .arg(format!("--user-data-dir={}", profile.display()))
        .args(extra)
        .args(["--dump-dom", url])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    let output = tokio::time::timeout(Duration::from_secs(90), child.wait_with_output())
        .await
        .expect("chromium did not finish within 90 s")
        .unwrap();
    let _ = std::fs::remove_dir_all(&profile);
    let dom = String::from_utf8(output.stdout).unwrap();
    assert!(
        output.status.success() && dom.contains("</html>"),
        "chromium failed ({}): {}",
        output.status,
        String::from_utf8_lossy(&output.stderr)
    );
    dom
}

/// `GET path`: the status code, the response head and the body.
async fn get(addr: &str, path: &str) -> (u16, String, String) {
    let mut stream = tokio::net::TcpStream::connect(addr).await.unwrap();
    let request = format!("GET {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n");
    stream.write_all(request.as_bytes()).await.unwrap();
    let mut response = String::new();
    tokio::time::timeout(Duration::from_secs(10), stream.read_to_string(&mut response))
        .await
        .unwrap()
        .unwrap();
    let code = response[9..12].parse().unwrap();
    let (head, body) = response.split_once("\r\n\r\n").unwrap();
    (code, head.to_ascii_lowercase(), body.to_owned())
}

async fn get_json(addr: &str, path: &str) -> Value {
    let (code, _, body) = get(addr, path).await;
    assert_eq!(code, 200, "GET {path}: {body}");
    serde_json::from_str(&body).unwrap()
}

/// Polls until `done` holds for what the agent serves, at most 60 s.
async fn until(what: &str, mut done: impl AsyncFnMut() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(60);
    while !done().await {
        assert!(Instant::now() < deadline, "not within 60 s: {what}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

fn pod_ready(pods: &Value, name: &str) -> bool {
    pods["items"].as_array().unwrap().iter().any(|p| {
        p["metadata"]["name"] == name
            && p["status"]["conditions"]
                .as_array()
                .is_some_and(|c| c.iter().any(|c| c["type"] == "Ready" && c["status"] == "True"))
    })
}

/// The results the agent recorded for the pod's readiness probe.
async fn readiness_results(addr: &str, pod: &str) -> Vec<String> {
    let probes = get_json(addr, &format!("/pods/default/{pod}/probes")).await;
    probes["probes"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|p| p["probe_type"] == "Readiness")
        .flat_map(|p| {
            p["results"].as_array().unwrap().iter().map(|r| r["result"].as_str().unwrap().to_owned())
        })
        .collect()
}

/// The `<section>` of one pod in the DOM, from its opening tag to its end.
fn section<'a>(dom: &'a str, pod: &str) -> &'a str {
    let at =
        dom.find(&format!("data-pod=\"{pod}\"")).unwrap_or_else(|| panic!("no section for {pod}:\n{dom}"));
    let start = dom[..at].rfind("<section").unwrap();
    let end = dom[at..].find("</section>").unwrap() + at;
    &dom[start..end]
}

/// The agent on a folder of manifests, and the folder (removed once it stopped).
struct Agent {
    agent: support::agent::RunningAgent,
    addr: String,
    dir: PathBuf,
}

impl Agent {
    async fn start(dir: &Path) -> Agent {
        let args = ["run", "--manifests", dir.to_str().unwrap(), "--node-name", "page"];
        let agent = support::agent::RunningAgent::start(env!("CARGO_BIN_EXE_probelet"), &args).await;
        Agent { addr: agent.addr.clone(), agent, dir: dir.to_owned() }
    }

    async fn stop(self) {
        self.agent.stop().await;
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

#[tokio::test]
async fn chromium_shows_the_ready_pod_and_the_failing_probe() {
    // Fails before anything starts when chromium is missing.
    chromium();
    let dir = temp_dir("manifests");
    std::fs::write(dir.join("ready.yaml"), pod("ready", r#"["true"]"#)).unwrap();
    let failing = format!(r#"["sh", "-c", "echo \"{}\"; exit 1"]"#, HOSTILE.replace('"', "\\\""));
    std::fs::write(dir.join("failing.yaml"), pod("failing", &failing)).unwrap();
    let agent = Agent::start(&dir).await;
    let addr = agent.addr.clone();

    until("the ready pod is Ready", async || pod_ready(&get_json(&addr, "/pods").await, "ready")).await;
    until("both probes have run", async || {
        readiness_results(&addr, "ready").await.iter().any(|r| r == "Success")
            && readiness_results(&addr, "failing").await.iter().any(|r| r == "Failure")
    })
    .await;

    // The page itself: HTML, its private data kept out of caches, only its own script allowed.
    let (code, head, body) = get(&addr, "/").await;
    assert_eq!(code, 200, "{body}");
    assert!(head.contains("content-type: text/html; charset=utf-8"), "{head}");
    assert!(head.contains("cache-control: no-store"), "{head}");
    assert!(head.contains("content-security-policy: default-src 'none'; style-src 'nonce-"), "{head}");

    let dom = dump_dom(&format!("http://{addr}/"), &[]).await;

    let ready = section(&dom, "default/ready");
    assert!(ready.starts_with("<section class=\"pod ready\""), "{ready}");
    assert!(ready.contains("<span class=\"marker ready\">Ready</span>"), "{ready}");
    assert!(ready.contains("Ready=True"), "{ready}");
    assert!(ready.contains("<td class=\"yes\">✓ ready</td>"), "{ready}");
    assert!(ready.contains("class=\"run success\""), "{ready}");
    assert!(!ready.contains("class=\"run failure\""), "{ready}");

    let failing = section(&dom, "default/failing");
    assert!(failing.starts_with("<section class=\"pod not-ready\""), "{failing}");
    assert!(failing.contains("<span class=\"marker not-ready\">Not ready</span>"), "{failing}");
    assert!(failing.contains("<td class=\"no\">✗ not ready</td>"), "{failing}");
    let strip = &failing[failing.find("data-probe=\"Readiness\"").expect("the readiness strip")..];
    let cell = &strip[strip.find("<span class=\"run failure\" title=\"").expect("a failure cell")..];
    assert!(cell.contains(" · Failure · "), "its title tells the result: {cell}");
    assert!(strip.contains("<span class=\"latest failure\">Failure</span>"), "{strip}");

    // The probe's output, in the strip's titles and in the Unhealthy event, stays text.
    assert!(!dom.contains("id=\"injected\""), "the probe output became an element:\n{dom}");
    assert!(dom.contains("<title>probelet</title>"), "the probe output's script ran:\n{dom}");
    assert!(dom.contains("Readiness probe failed: &lt;b id=injected&gt;hostile&lt;/b&gt;"), "{dom}");

    // The refresh script ran under the page's Content-Security-Policy.
    assert!(dom.contains("<html lang=\"en\" data-refresh=\"2000\">"), "{}", &dom[..dom.len().min(300)]);
    assert!(dom.contains("<body>"), "not stale: {}", &dom[..dom.len().min(300)]);

    agent.stop().await;
}

/// A pod for a page, from its name and whether it is Ready.
fn page_pod(name: &str, ready: bool) -> PodPage {
    let status = if ready { "True" } else { "False" };
    let pod = serde_json::from_value(serde_json::json!({
        "metadata": {"name": name, "namespace": "default", "uid": name},
        "spec": {"containers": [{"name": "app"}]},
        "status": {"phase": "Running", "conditions": [{"type": "Ready", "status": status}]},
    }))
    .unwrap();
    PodPage { pod, probes: Vec::new() }
}

/// A loopback server whose `/` is the status page of `first` for its first request, then
/// `then(request number)`; returns its address and the number of requests it answered.
async fn changing_page(
    first: PodPage,
    then: impl Fn(usize) -> Option<PodPage> + Clone + Send + Sync + 'static,
) -> (String, Arc<AtomicUsize>, tokio::sync::oneshot::Sender<()>) {
    let served = Arc::new(AtomicUsize::new(0));
    let counter = served.clone();
    let app = axum::Router::new().route(
        "/",
        axum::routing::get(move || {
            let (first, then, counter) = (first.clone(), then.clone(), counter.clone());
            async move {
                let n = counter.fetch_add(1, Ordering::SeqCst);
                let pod = if n == 0 { Some(first) } else { then(n) };
                let Some(pod) = pod else {
                    return axum::http::StatusCode::SERVICE_UNAVAILABLE.into_response();
                };
                let nonce = page::nonce();
                page::response(&Page {
                    pods: &[pod],
                    events: &[],
                    now: k8s_openapi::jiff::Timestamp::now(),
                    nonce: &nonce,
                })
            }
        }),
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap().to_string();
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    tokio::spawn(serve_router(listener, app, Limits::default(), async move {
        let _ = stopped.await;
    }));
    (addr, served, stop)
}

#[tokio::test]
async fn the_page_swaps_in_what_the_agent_serves_next() {
    let (addr, served, _stop) =
        changing_page(page_pod("before", false), |_| Some(page_pod("after", true))).await;
    // 5 s of virtual time: the 2 s timer fires twice.
    let dom = dump_dom(&format!("http://{addr}/"), &["--virtual-time-budget=5000"]).await;
    assert!(served.load(Ordering::SeqCst) >= 2, "the page fetched itself again");
    assert!(!dom.contains("default/before"), "{dom}");
    let after = section(&dom, "default/after");
    assert!(after.contains("<span class=\"marker ready\">Ready</span>"), "{after}");
    assert!(dom.contains("<body>"), "not stale: {dom}");
    assert_eq!(dom.matches("<main id=\"status\">").count(), 1, "one main, swapped: {dom}");
}

#[tokio::test]
async fn a_page_whose_agent_stops_answering_says_so_and_keeps_the_last_data() {
    let (addr, served, _stop) = changing_page(page_pod("last-known", true), |_| None).await;
    let dom = dump_dom(&format!("http://{addr}/"), &["--virtual-time-budget=5000"]).await;
    assert!(served.load(Ordering::SeqCst) >= 2, "the page fetched itself again");
    assert!(dom.contains("<body class=\"stale\">"), "{dom}");
    assert!(dom.contains("The agent does not answer"), "{dom}");
    assert!(section(&dom, "default/last-known").contains("marker ready"), "{dom}");
}
