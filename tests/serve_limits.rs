//! End to end: the real agent binary with a lowered RLIMIT_NOFILE under a slow-client flood. The
//! listener's connection cap keeps it below the fd limit, `/healthz` keeps answering, and the
//! slow connections are closed after the header timeout.

// Helpers here may panic: a panic fails the test that called them.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use probelet_test_support as support;

use std::process::Stdio;
use std::time::Duration;

use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::net::TcpStream;
use tokio::process::Command;

const NOFILE: u32 = 256;
const SLOW_CLIENTS: usize = 600;

async fn healthz(addr: &str) -> Option<u16> {
    let attempt = async {
        let mut stream = TcpStream::connect(addr).await.ok()?;
        stream
            .write_all(b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n")
            .await
            .ok()?;
        let mut response = String::new();
        stream.read_to_string(&mut response).await.ok()?;
        response.get(9..12)?.parse().ok()
    };
    tokio::time::timeout(Duration::from_secs(2), attempt).await.ok().flatten()
}

fn open_fds(pid: u32) -> usize {
    std::fs::read_dir(format!("/proc/{pid}/fd")).map(|d| d.count()).unwrap_or(0)
}

fn rss_kb(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap_or(0)
}

#[tokio::test]
async fn a_slow_client_flood_under_a_low_fd_limit_leaves_healthz_answering() {
    let dir = std::env::temp_dir().join(format!("probelet-serve-limits-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    // `ulimit` in a shell lowers the limit for the agent alone, without unsafe code here.
    let mut child = Command::new("sh")
        .arg("-c")
        .arg(format!("ulimit -n {NOFILE} && exec \"$0\" \"$@\""))
        .arg(env!("CARGO_BIN_EXE_probelet"))
        .args(["run", "--manifests"])
        .arg(&dir)
        .args(["--listen", "127.0.0.1:0", "--http-max-connections", "64", "--http-header-timeout", "2"])
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    let pid = child.id().unwrap();
    let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
    let addr = support::agent::banner_addr(&mut lines).await;
    assert_eq!(healthz(&addr).await, Some(200));
    let (fds_before, rss_before) = (open_fds(pid), rss_kb(pid));

    let mut slow = Vec::new();
    for _ in 0..SLOW_CLIENTS {
        let mut stream = TcpStream::connect(&addr).await.unwrap();
        stream.write_all(b"GET /pods HTTP/1.1\r\nHost: slow\r\nX-Slow: ").await.unwrap();
        slow.push(stream);
    }
    let during = healthz(&addr).await;
    let (fds_during, rss_during) = (open_fds(pid), rss_kb(pid));
    eprintln!(
        "{SLOW_CLIENTS} slow clients, RLIMIT_NOFILE {NOFILE}: fds {fds_before} -> {fds_during}, \
         RSS {rss_before} -> {rss_during} kB, /healthz {during:?}"
    );
    assert_eq!(during, Some(200), "/healthz answers during the flood");
    assert!(fds_during < NOFILE as usize - 64, "the agent kept {fds_during} fds open");

    // Every slow connection is closed by the agent: made room for a newer one, or timed out.
    for stream in &mut slow {
        let mut buf = [0u8; 256];
        let closed = tokio::time::timeout(Duration::from_secs(10), async {
            loop {
                match stream.read(&mut buf).await {
                    Ok(0) | Err(_) => break,
                    Ok(_) => {}
                }
            }
        })
        .await;
        assert!(closed.is_ok(), "a slow connection outlived the header timeout");
    }
    assert_eq!(healthz(&addr).await, Some(200));
    let fds_after = open_fds(pid);
    eprintln!("after the flood: fds {fds_after}, RSS {} kB", rss_kb(pid));
    assert!(fds_after <= fds_before + 2, "fds back to {fds_after} (from {fds_before})");

    child.start_kill().unwrap();
    let _ = child.wait().await;
    let _ = std::fs::remove_dir_all(&dir);
}

/// Kept-alive clients that ask for `/healthz` again every 100 ms, twice as many as the cap,
/// are never quiet for 200 ms; a connection that has had its answer and serves nothing is
/// closed for room at once, so a new health check gets in.
#[tokio::test]
async fn kept_alive_clients_asking_without_pause_leave_room_for_a_health_check() {
    let dir = std::env::temp_dir().join(format!("probelet-serve-keepalive-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let manifests = dir.to_str().unwrap().to_owned();
    let agent = support::agent::RunningAgent::start(
        env!("CARGO_BIN_EXE_probelet"),
        &["run", "--manifests", &manifests, "--http-max-connections", "8"],
    )
    .await;
    let mut clients = Vec::new();
    for _ in 0..16 {
        let addr = agent.addr.clone();
        clients.push(tokio::spawn(async move {
            let Ok(mut stream) = TcpStream::connect(&addr).await else { return };
            let mut buf = vec![0u8; 4096];
            loop {
                if stream.write_all(b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n").await.is_err() {
                    return;
                }
                match stream.read(&mut buf).await {
                    Ok(0) | Err(_) => return,
                    Ok(_) => tokio::time::sleep(Duration::from_millis(100)).await,
                }
            }
        }));
    }
    tokio::time::sleep(Duration::from_millis(500)).await;
    for _ in 0..3 {
        assert_eq!(healthz(&agent.addr).await, Some(200), "a new health check got in");
    }
    for client in clients {
        client.abort();
    }
    agent.stop().await;
    let _ = std::fs::remove_dir_all(&dir);
}

/// `GET path` on the health listener (or any), `Connection: close`: status code and body.
async fn get(addr: &str, path: &str) -> Option<(u16, String)> {
    let attempt = async {
        let mut stream = TcpStream::connect(addr).await.ok()?;
        let request = format!("GET {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n");
        stream.write_all(request.as_bytes()).await.ok()?;
        let mut response = String::new();
        stream.read_to_string(&mut response).await.ok()?;
        let code = response.get(9..12)?.parse().ok()?;
        Some((code, response.split_once("\r\n\r\n").map(|(_, body)| body.to_owned()).unwrap_or_default()))
    };
    tokio::time::timeout(Duration::from_secs(2), attempt).await.ok().flatten()
}

/// `--healthz-listen` (the kubelet's healthz port): a listener of its own for `/healthz` and
/// `/readyz` alone, named in the start line. A flood of clients that reconnect to the main
/// listener as fast as they are closed, far beyond its cap, takes nothing from it: every health
/// check there answers in time. It serves nothing private.
#[tokio::test]
async fn the_health_listener_answers_through_a_reconnect_flood_on_the_main_one() {
    let dir = std::env::temp_dir().join(format!("probelet-serve-health-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let mut child = Command::new(env!("CARGO_BIN_EXE_probelet"))
        .args(["run", "--manifests", dir.to_str().unwrap(), "--listen", "127.0.0.1:0"])
        .args(["--healthz-listen", "127.0.0.1:0", "--http-max-connections", "8"])
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
    let banner = support::agent::banner_line(&mut lines).await;
    tokio::spawn(async move { while let Ok(Some(_)) = lines.next_line().await {} });
    let main = banner.split("http://").nth(1).and_then(|rest| rest.split('/').next()).unwrap().to_owned();
    let health = banner
        .split("; health http://")
        .nth(1)
        .and_then(|rest| rest.strip_suffix("/healthz"))
        .unwrap_or_else(|| panic!("no health listener in the start line: {banner}"))
        .to_owned();
    assert_ne!(main, health);

    assert_eq!(get(&health, "/healthz").await, Some((200, "ok".into())));
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    while get(&health, "/readyz").await.map(|(code, _)| code) != Some(200) {
        assert!(tokio::time::Instant::now() < deadline, "/readyz on the health listener");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    for private in ["/pods", "/metrics", "/events", "/"] {
        assert_eq!(get(&health, private).await.map(|(code, _)| code), Some(404), "{private}");
    }

    let flood: Vec<_> = (0..SLOW_CLIENTS)
        .map(|_| {
            let main = main.clone();
            tokio::spawn(async move {
                loop {
                    // Connect, say nothing, and come back as soon as the agent closes it.
                    if let Ok(mut stream) = TcpStream::connect(&main).await {
                        let mut buf = [0u8; 64];
                        let _ = stream.read(&mut buf).await;
                    } else {
                        tokio::time::sleep(Duration::from_millis(10)).await;
                    }
                }
            })
        })
        .collect();
    tokio::time::sleep(Duration::from_millis(500)).await;
    for _ in 0..10 {
        assert_eq!(healthz(&health).await, Some(200), "the health listener answered within 2 s");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    for client in flood {
        client.abort();
    }
    support::agent::stop(&mut child, Duration::from_secs(30)).await;
    let _ = std::fs::remove_dir_all(&dir);
}

/// The health listener on `--listen`'s own address is refused at start, named as such, not as
/// a port some other program holds: a usage error (exit 2), before anything runs.
#[tokio::test]
async fn a_health_listener_on_the_main_address_is_refused_by_name() {
    let dir = std::env::temp_dir().join(format!("probelet-serve-health-same-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let free = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().to_string();
    let output = Command::new(env!("CARGO_BIN_EXE_probelet"))
        .args(["run", "--manifests", dir.to_str().unwrap(), "--listen", &free, "--healthz-listen", &free])
        .output()
        .await
        .unwrap();
    let _ = std::fs::remove_dir_all(&dir);
    assert_eq!(output.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(stderr.contains(&format!("--healthz-listen {free} is the address of --listen")), "{stderr}");
}
