//! `probelet demo-target`: health as a function of time, duration parsing, the command line, and
//! real runs on 127.0.0.1 ephemeral ports (HTTP, TCP, gRPC health, health file).
// The helpers below panic on purpose: a panic fails the test that called them.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::future::Future;
use std::io::ErrorKind;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use clap::Parser;
use probelet::demo::{self, DemoArgs, DemoError, healthy_at, parse_duration};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::time::{Instant, timeout};
use tonic::Code;
use tonic::transport::Endpoint;
use tonic_health::pb::HealthCheckRequest;
use tonic_health::pb::health_check_response::ServingStatus;
use tonic_health::pb::health_client::HealthClient;

/// Every test's wall-time bound.
const TEST_BOUND: Duration = Duration::from_secs(20);
/// How long a poll waits for a state that the script says is due.
const POLL_BOUND: Duration = Duration::from_secs(8);
/// The pause between polling requests.
const POLL_PAUSE: Duration = Duration::from_millis(20);

fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}

fn loopback() -> Option<SocketAddr> {
    Some(SocketAddr::from(([127, 0, 0, 1], 0)))
}

async fn bounded<F: Future>(test: F) -> F::Output {
    timeout(TEST_BOUND, test).await.expect("test ran past its wall-time bound")
}

/// Calls `probe` until it returns `Some`, with a short pause between calls; panics after
/// [`POLL_BOUND`].
async fn eventually<T, F, Fut>(what: &str, mut probe: F) -> T
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Option<T>>,
{
    let deadline = Instant::now() + POLL_BOUND;
    loop {
        if let Some(value) = probe().await {
            return value;
        }
        assert!(Instant::now() < deadline, "{what}: not seen within {POLL_BOUND:?}");
        tokio::time::sleep(POLL_PAUSE).await;
    }
}

// === pure: health over time ===

#[test]
fn healthy_at_follows_the_script() {
    let d = DemoArgs::default;
    /// (case, args, [(elapsed ms, healthy)]).
    type Case = (&'static str, DemoArgs, Vec<(u64, bool)>);
    let cases: Vec<Case> = vec![
        ("no script: always healthy", d(), vec![(0, true), (1, true), (3_600_000, true)]),
        (
            "fail after 300ms",
            DemoArgs { fail_after: Some(ms(300)), ..d() },
            vec![(0, true), (299, true), (300, false), (301, false), (10_000, false)],
        ),
        (
            "fail after 0: never healthy",
            DemoArgs { fail_after: Some(Duration::ZERO), ..d() },
            vec![(0, false), (1, false)],
        ),
        (
            "start after 5s",
            DemoArgs { start_after: Some(ms(5000)), ..d() },
            vec![(0, false), (4999, false), (5000, true), (60_000, true)],
        ),
        (
            "flip every 100ms",
            DemoArgs { flip_every: Some(ms(100)), ..d() },
            vec![(0, true), (99, true), (100, false), (199, false), (200, true), (350, false), (401, true)],
        ),
        (
            "flip every 0: never flips",
            DemoArgs { flip_every: Some(Duration::ZERO), ..d() },
            vec![(0, true), (100, true)],
        ),
        (
            "flips count from start-after",
            DemoArgs { start_after: Some(ms(1000)), flip_every: Some(ms(100)), ..d() },
            vec![(0, false), (999, false), (1000, true), (1099, true), (1100, false), (1200, true)],
        ),
        (
            "start, then fail",
            DemoArgs { start_after: Some(ms(100)), fail_after: Some(ms(300)), ..d() },
            vec![(0, false), (100, true), (299, true), (300, false)],
        ),
        (
            "fail before start: never healthy",
            DemoArgs { start_after: Some(ms(300)), fail_after: Some(ms(100)), ..d() },
            vec![(0, false), (150, false), (300, false), (1000, false)],
        ),
        (
            "flip then fail for good",
            DemoArgs { flip_every: Some(ms(100)), fail_after: Some(ms(250)), ..d() },
            vec![(50, true), (150, false), (200, true), (249, true), (250, false), (400, false)],
        ),
        (
            "delay, exit and servers do not change health",
            DemoArgs { delay: Some(ms(10)), exit_after: Some(ms(10)), http: loopback(), ..d() },
            vec![(0, true), (20, true)],
        ),
    ];
    for (name, args, points) in cases {
        for (at, want) in points {
            assert_eq!(healthy_at(&args, ms(at)), want, "{name}: healthy at {at}ms");
        }
    }
}

// === pure: durations ===

#[test]
fn parse_duration_accepts_go_durations() {
    let cases = [
        ("0", Duration::ZERO),
        ("+0", Duration::ZERO),
        ("-0", Duration::ZERO),
        ("0s", Duration::ZERO),
        ("500ms", ms(500)),
        ("30s", Duration::from_secs(30)),
        ("2m", Duration::from_secs(120)),
        ("1h", Duration::from_secs(3600)),
        ("1h30m", Duration::from_secs(5400)),
        ("1m30s500ms", ms(90_500)),
        ("1.5s", ms(1500)),
        (".5s", ms(500)),
        ("5.s", Duration::from_secs(5)),
        ("+3s", Duration::from_secs(3)),
        ("250us", Duration::from_micros(250)),
        ("250µs", Duration::from_micros(250)),
        ("250μs", Duration::from_micros(250)),
        ("7ns", Duration::from_nanos(7)),
        ("0.000000001s", Duration::from_nanos(1)),
        ("1.0000000000000000000001s", Duration::from_secs(1)),
        ("2562047h", Duration::from_secs(2_562_047 * 3600)),
    ];
    for (input, want) in cases {
        assert_eq!(parse_duration(input), Ok(want), "{input:?}");
    }
}

#[test]
fn parse_duration_rejects_with_go_texts() {
    let cases = [
        ("", r#"time: invalid duration """#),
        ("s", r#"time: invalid duration "s""#),
        (".s", r#"time: invalid duration ".s""#),
        ("-", r#"time: invalid duration "-""#),
        ("30", r#"time: missing unit in duration "30""#),
        ("1s30", r#"time: missing unit in duration "1s30""#),
        ("5d", r#"time: unknown unit "d" in duration "5d""#),
        ("5 s", r#"time: unknown unit " s" in duration "5 s""#),
        ("1S", r#"time: unknown unit "S" in duration "1S""#),
        (" 5s", r#"time: invalid duration " 5s""#),
        ("1..5s", r#"time: missing unit in duration "1..5s""#),
        ("2562048h", r#"time: invalid duration "2562048h""#),
        (
            "99999999999999999999999999999999999999999h",
            r#"time: invalid duration "99999999999999999999999999999999999999999h""#,
        ),
        ("-1s", r#"invalid duration "-1s": must not be negative"#),
    ];
    for (input, want) in cases {
        assert_eq!(parse_duration(input), Err(want.to_string()), "{input:?}");
    }
}

// === the command line ===

#[derive(Debug, Parser)]
struct Cli {
    #[command(flatten)]
    demo: DemoArgs,
}

#[test]
fn command_line_flags() {
    let cli = Cli::try_parse_from([
        "demo-target",
        "--http",
        "127.0.0.1:18080",
        "--tcp",
        "127.0.0.1:18081",
        "--grpc",
        "127.0.0.1:18082",
        "--grpc-service",
        "a",
        "--grpc-service",
        "b",
        "--fail-after",
        "30s",
        "--flip-every",
        "2m",
        "--start-after",
        "500ms",
        "--delay",
        "10ms",
        "--exit-after",
        "1h",
        "--exit-code",
        "3",
        "--health-file",
        "/tmp/x",
    ])
    .unwrap();
    let a = cli.demo;
    assert_eq!(a.http, Some("127.0.0.1:18080".parse().unwrap()));
    assert_eq!(a.tcp, Some("127.0.0.1:18081".parse().unwrap()));
    assert_eq!(a.grpc, Some("127.0.0.1:18082".parse().unwrap()));
    assert_eq!(a.grpc_service, ["a", "b"]);
    assert_eq!(a.fail_after, Some(Duration::from_secs(30)));
    assert_eq!(a.flip_every, Some(Duration::from_secs(120)));
    assert_eq!(a.start_after, Some(ms(500)));
    assert_eq!(a.delay, Some(ms(10)));
    assert_eq!(a.exit_after, Some(Duration::from_secs(3600)));
    assert_eq!(a.exit_code, 3);
    assert_eq!(a.health_file, Some(PathBuf::from("/tmp/x")));

    let defaults = Cli::try_parse_from(["demo-target"]).unwrap().demo;
    assert_eq!(defaults.exit_code, 1, "default exit code");
    assert_eq!(defaults.exit_code, DemoArgs::default().exit_code, "Default matches the CLI default");

    let bad = Cli::try_parse_from(["demo-target", "--fail-after", "30"]).unwrap_err().to_string();
    assert!(bad.contains(r#"time: missing unit in duration "30""#), "{bad}");
}

// === real runs on 127.0.0.1 ===

/// `GET path` over a fresh connection: the status code, the `Location` header, the body.
async fn http_get(addr: SocketAddr, path: &str) -> (u16, Option<String>, String) {
    let mut stream = TcpStream::connect(addr).await.unwrap();
    let request = format!("GET {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n");
    stream.write_all(request.as_bytes()).await.unwrap();
    let mut raw = Vec::new();
    stream.read_to_end(&mut raw).await.unwrap();
    let raw = String::from_utf8(raw).unwrap();
    let (head, body) = raw.split_once("\r\n\r\n").unwrap();
    let mut lines = head.split("\r\n");
    let status = lines.next().unwrap().split(' ').nth(1).unwrap().parse().unwrap();
    let location = lines
        .filter_map(|line| line.split_once(": "))
        .find(|(name, _)| name.eq_ignore_ascii_case("location"))
        .map(|(_, value)| value.to_string());
    (status, location, body.to_string())
}

#[tokio::test]
async fn http_turns_from_200_to_503_after_fail_after() {
    bounded(async {
        let fail_after = ms(800);
        let target =
            demo::start(DemoArgs { http: loopback(), fail_after: Some(fail_after), ..DemoArgs::default() })
                .await
                .unwrap();
        let addr = target.http_addr.unwrap();
        assert_eq!(addr.ip().to_string(), "127.0.0.1");
        assert_ne!(addr.port(), 0, "port 0 resolved");
        assert!(target.tcp_addr.is_none() && target.grpc_addr.is_none(), "only the servers asked for");
        for path in ["/healthz", "/readyz", "/livez", "/"] {
            assert_eq!(http_get(addr, path).await, (200, None, "ok".to_string()), "{path} while healthy");
        }
        eventually("503 after fail-after", || async {
            let (status, _, body) = http_get(addr, "/healthz").await;
            (status == 503).then(|| assert_eq!(body, "unhealthy"))
        })
        .await;
        assert!(target.started().elapsed() >= fail_after, "not before fail-after");
        assert!(!target.is_healthy());
        for path in ["/readyz", "/livez", "/"] {
            assert_eq!(http_get(addr, path).await, (503, None, "unhealthy".to_string()), "{path} unhealthy");
        }
        assert_eq!(http_get(addr, "/nope").await.0, 404, "unknown path");
        target.shutdown().await;
    })
    .await;
}

#[tokio::test]
async fn http_slow_start_then_healthy() {
    bounded(async {
        let target =
            demo::start(DemoArgs { http: loopback(), start_after: Some(ms(800)), ..DemoArgs::default() })
                .await
                .unwrap();
        let addr = target.http_addr.unwrap();
        assert_eq!(http_get(addr, "/healthz").await.0, 503, "unhealthy during the slow start");
        eventually("200 after start-after", || async {
            (http_get(addr, "/healthz").await.0 == 200).then_some(())
        })
        .await;
        assert!(target.started().elapsed() >= ms(800), "not before start-after");
    })
    .await;
}

#[tokio::test]
async fn http_redirect_and_delay() {
    bounded(async {
        let delay = ms(200);
        let target = demo::start(DemoArgs { http: loopback(), delay: Some(delay), ..DemoArgs::default() })
            .await
            .unwrap();
        let addr = target.http_addr.unwrap();
        let asked = Instant::now();
        let (status, location, _) = http_get(addr, "/redirect").await;
        assert_eq!((status, location.as_deref()), (302, Some("/healthz")));
        assert!(asked.elapsed() >= delay, "redirect delayed");
        let asked = Instant::now();
        assert_eq!(http_get(addr, "/healthz").await.0, 200);
        assert!(asked.elapsed() >= delay, "health page delayed");
    })
    .await;
}

async fn grpc_check(addr: SocketAddr, service: &str) -> Result<i32, tonic::Status> {
    let channel = Endpoint::from_shared(format!("http://{addr}")).unwrap().connect().await.unwrap();
    let mut client = HealthClient::new(channel);
    let request = HealthCheckRequest { service: service.to_string() };
    client.check(request).await.map(|response| response.into_inner().status)
}

#[tokio::test]
async fn grpc_turns_from_serving_to_not_serving() {
    bounded(async {
        let target = demo::start(DemoArgs {
            grpc: loopback(),
            grpc_service: vec!["demo.Echo".to_string()],
            fail_after: Some(ms(800)),
            ..DemoArgs::default()
        })
        .await
        .unwrap();
        let addr = target.grpc_addr.unwrap();
        assert_ne!(addr.port(), 0);
        let serving = ServingStatus::Serving as i32;
        let not_serving = ServingStatus::NotServing as i32;
        assert_eq!(grpc_check(addr, "").await.unwrap(), serving, "overall while healthy");
        assert_eq!(grpc_check(addr, "demo.Echo").await.unwrap(), serving, "named while healthy");
        let unknown = grpc_check(addr, "other").await.unwrap_err();
        assert_eq!(unknown.code(), Code::NotFound, "unknown service: {unknown:?}");

        for service in ["", "demo.Echo"] {
            eventually("NOT_SERVING after fail-after", || async {
                (grpc_check(addr, service).await.unwrap() == not_serving).then_some(())
            })
            .await;
        }
        assert!(target.started().elapsed() >= ms(800), "not before fail-after");
        target.shutdown().await;
    })
    .await;
}

#[tokio::test]
async fn tcp_accepts_then_refuses_then_reopens() {
    bounded(async {
        let flip = ms(700);
        let target = demo::start(DemoArgs { tcp: loopback(), flip_every: Some(flip), ..DemoArgs::default() })
            .await
            .unwrap();
        let addr = target.tcp_addr.unwrap();
        assert_ne!(addr.port(), 0);
        TcpStream::connect(addr).await.expect("accepts while healthy");
        eventually("refused while unhealthy", || async {
            match TcpStream::connect(addr).await {
                // Reset: the handshake raced the listener's close; the next try is refused.
                Ok(_) => None,
                Err(e) if e.kind() == ErrorKind::ConnectionReset => None,
                Err(e) => {
                    assert_eq!(e.kind(), ErrorKind::ConnectionRefused, "{e}");
                    Some(())
                }
            }
        })
        .await;
        assert!(target.started().elapsed() >= flip, "not before the first flip");
        eventually("accepted again on the same port", || async { TcpStream::connect(addr).await.ok() }).await;
        assert!(target.started().elapsed() >= flip * 2, "not before the second flip");
    })
    .await;
}

#[tokio::test]
async fn tcp_starts_closed_during_a_slow_start() {
    bounded(async {
        let target =
            demo::start(DemoArgs { tcp: loopback(), start_after: Some(ms(600)), ..DemoArgs::default() })
                .await
                .unwrap();
        let addr = target.tcp_addr.unwrap();
        assert_ne!(addr.port(), 0, "the port is known even while closed");
        let refused = TcpStream::connect(addr).await.unwrap_err();
        assert_eq!(refused.kind(), ErrorKind::ConnectionRefused, "{refused}");
        eventually("accepted after start-after", || async { TcpStream::connect(addr).await.ok() }).await;
    })
    .await;
}

fn temp_health_file(test: &str) -> PathBuf {
    let path = std::env::temp_dir().join(format!("probelet-demo-test-{}-{test}", std::process::id()));
    let _ = std::fs::remove_file(&path);
    path
}

#[tokio::test]
async fn health_file_is_created_and_removed() {
    bounded(async {
        let path = temp_health_file("fail");
        let target = demo::start(DemoArgs {
            health_file: Some(path.clone()),
            fail_after: Some(ms(600)),
            ..DemoArgs::default()
        })
        .await
        .unwrap();
        assert!(path.exists(), "created at start while healthy");
        let mut health = target.health();
        eventually("removed when unhealthy", || async { (!path.exists()).then_some(()) }).await;
        health.wait_for(|healthy| !healthy).await.unwrap();
        target.shutdown().await;
    })
    .await;
}

#[tokio::test]
async fn health_file_appears_after_a_slow_start_and_goes_with_the_target() {
    bounded(async {
        let path = temp_health_file("slow");
        std::fs::write(&path, "stale").unwrap();
        let target = demo::start(DemoArgs {
            health_file: Some(path.clone()),
            start_after: Some(ms(500)),
            ..DemoArgs::default()
        })
        .await
        .unwrap();
        assert!(!path.exists(), "a stale file is removed while starting");
        eventually("created when healthy", || async { path.exists().then_some(()) }).await;
        target.shutdown().await;
        assert!(!path.exists(), "removed on shutdown");
    })
    .await;
}

/// Both `run` cases in one test: a SIGTERM reaches every `run` in this process, so a second
/// concurrent `run` would see it too.
#[tokio::test]
async fn run_exits_with_the_exit_code_after_exit_after_and_with_0_on_sigterm() {
    bounded(async {
        let path = temp_health_file("exit");
        let started = Instant::now();
        let args = DemoArgs {
            http: loopback(),
            tcp: loopback(),
            grpc: loopback(),
            health_file: Some(path.clone()),
            exit_after: Some(ms(300)),
            exit_code: 7,
            ..DemoArgs::default()
        };
        assert_eq!(demo::run(args).await.unwrap(), 7);
        assert!(started.elapsed() >= ms(300), "not before exit-after");
        assert!(!path.exists(), "health file removed on exit");

        let path = temp_health_file("sigterm");
        let args = DemoArgs { http: loopback(), health_file: Some(path.clone()), ..DemoArgs::default() };
        let running = tokio::spawn(demo::run(args));
        // The file appears once the target has started, after its signal handler is installed.
        eventually("the target started", || async { path.exists().then_some(()) }).await;
        let kill =
            std::process::Command::new("kill").arg("-TERM").arg(std::process::id().to_string()).status();
        assert!(kill.unwrap().success(), "kill -TERM");
        let code = timeout(Duration::from_secs(2), running).await.expect("exits promptly on SIGTERM");
        assert_eq!(code.unwrap().unwrap(), 0, "SIGTERM exits 0");
        assert!(!path.exists(), "health file removed on SIGTERM");
    })
    .await;
}

#[tokio::test]
async fn bind_errors_name_the_address() {
    bounded(async {
        let taken = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = taken.local_addr().unwrap();
        let path = temp_health_file("bind");
        let err = demo::start(DemoArgs {
            grpc: Some(addr),
            health_file: Some(path.clone()),
            ..DemoArgs::default()
        })
        .await
        .unwrap_err();
        assert!(matches!(err, DemoError::Bind { what: "gRPC", addr: a, .. } if a == addr), "{err:?}");
        let text = err.to_string();
        assert!(text.starts_with(&format!("cannot listen for gRPC on {addr}: ")), "{text}");
        assert!(!path.exists(), "no health file when start fails");
    })
    .await;
}

#[tokio::test]
async fn health_file_errors_name_the_path() {
    bounded(async {
        let path =
            std::env::temp_dir().join(format!("probelet-demo-test-{}-missing-dir/ready", std::process::id()));
        let err = demo::start(DemoArgs { health_file: Some(path.clone()), ..DemoArgs::default() })
            .await
            .unwrap_err();
        assert!(matches!(&err, DemoError::HealthFile { path: p, .. } if *p == path), "{err:?}");
        assert!(
            err.to_string().starts_with(&format!("cannot update the health file {}: ", path.display())),
            "{err}"
        );
    })
    .await;
}
