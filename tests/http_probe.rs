//! HTTP GET probes (docs/prober.md §4.6) against real servers on 127.0.0.1: plain and TLS,
//! recording the raw request heads they receive. Covers the outcome mapping, the exact headers
//! sent, the kubelet's redirect policy, the body cap, timeouts and transport errors.

use probelet::status::probe_status::PodProbeStatus;
use probelet_test_support as support;

use std::future::Future;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use k8s_openapi::api::core::v1::{
    Container, ContainerPort, HTTPGetAction, HTTPHeader, Pod, PodSpec, PodStatus, Probe,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use probelet::container::ContainerId;
use probelet::contracts::MemoryRecorder;
use probelet::local_runner::LocalCommandRunner;
use probelet::prober::http::{HttpProbeRequest, HttpProber, MAX_RESPONSE_BODY_BYTES};
use probelet::prober::{
    KUBE_PROBE_USER_AGENT, PodContainer, ProbeError, ProbeKind, ProbeMemo, ProbeOutcome, ProbeResult,
    ProbeRunner, Probed, Prober,
};
use support::h2_server::{H2Reply, H2Server, RawAct, RawH2Server};
use support::http_server::{HttpServer, RecordedRequest, Reply};
use tokio::io::AsyncWriteExt;
use tokio::net::TcpListener;
use tokio::time::Instant;

/// A timeout the probe is meant to hit.
const SHORT: Duration = Duration::from_millis(300);
/// A timeout the probe is not meant to hit.
const LONG: Duration = Duration::from_secs(5);
/// How far past its timeout a timed-out probe may return.
const SLACK: Duration = Duration::from_secs(2);

/// Bounds a test's wall time.
async fn bounded<T>(fut: impl Future<Output = T>) -> T {
    tokio::time::timeout(Duration::from_secs(20), fut).await.expect("test took too long")
}

fn get(port: u16, path: &str) -> HTTPGetAction {
    HTTPGetAction {
        port: IntOrString::Int(i32::from(port)),
        path: Some(path.to_owned()),
        ..Default::default()
    }
}

fn with_headers(mut action: HTTPGetAction, headers: &[(&str, &str)]) -> HTTPGetAction {
    action.http_headers = Some(
        headers
            .iter()
            .map(|(name, value)| HTTPHeader { name: (*name).into(), value: (*value).into() })
            .collect(),
    );
    action
}

/// Builds the request for a pod whose IP is 127.0.0.1.
fn request(action: &HTTPGetAction) -> HttpProbeRequest {
    HttpProbeRequest::new(action, &Container::default(), "127.0.0.1").expect("valid probe spec")
}

async fn probe(action: &HTTPGetAction) -> Result<Probed, ProbeError> {
    HttpProber::new().probe(&request(action), LONG).await
}

fn success(body: &str) -> Result<Probed, ProbeError> {
    Ok(Probed::new(ProbeOutcome::Success, body))
}

fn failure(output: &str) -> Result<Probed, ProbeError> {
    Ok(Probed::new(ProbeOutcome::Failure, output))
}

fn warning(body: &str) -> Result<Probed, ProbeError> {
    Ok(Probed::new(ProbeOutcome::Warning, format!("Probe terminated redirects, Response body: {body}")))
}

// === outcomes ===

#[tokio::test]
async fn status_codes_map_to_outcomes() {
    bounded(async {
        let cases: [(u16, &str, Result<Probed, ProbeError>); 7] = [
            (200, "ok body", success("ok body")),
            (201, "created", success("created")),
            (204, "", success("")),
            (299, "edge", success("edge")),
            (400, "bad", failure("HTTP probe failed with statuscode: 400")),
            (404, "missing", failure("HTTP probe failed with statuscode: 404")),
            (500, "secret stack trace", failure("HTTP probe failed with statuscode: 500")),
        ];
        for (status, body, want) in cases {
            let body = body.to_owned();
            let server = HttpServer::plain(move |_| Reply::status(status, body.clone())).await;
            assert_eq!(probe(&get(server.port(), "/healthz")).await, want, "case {status}");
        }
    })
    .await;
}

#[tokio::test]
async fn body_is_capped_at_ten_kib() {
    bounded(async {
        let body: Vec<u8> = (0..20_000u32).map(|i| b'a' + (i % 26) as u8).collect();
        let want = String::from_utf8(body[..MAX_RESPONSE_BODY_BYTES].to_vec()).expect("ascii");
        let server = HttpServer::plain(move |_| Reply::ok(body.clone())).await;
        let got = probe(&get(server.port(), "/")).await.expect("probe");
        assert_eq!(MAX_RESPONSE_BODY_BYTES, 10240);
        assert_eq!(got, Probed::new(ProbeOutcome::Success, want));
    })
    .await;
}

#[tokio::test]
async fn named_port_is_resolved_from_the_container() {
    bounded(async {
        let server = HttpServer::plain(|_| Reply::ok("named")).await;
        let container = Container {
            ports: Some(vec![ContainerPort {
                name: Some("http-probe".into()),
                container_port: i32::from(server.port()),
                ..Default::default()
            }]),
            ..Default::default()
        };
        let action = HTTPGetAction { port: IntOrString::String("http-probe".into()), ..get(0, "/ready") };
        let request = HttpProbeRequest::new(&action, &container, "127.0.0.1").expect("named port");
        assert_eq!(request.url(), server.url("/ready"));
        assert_eq!(HttpProber::new().probe(&request, LONG).await, success("named"));
    })
    .await;
}

#[tokio::test]
async fn https_with_a_self_signed_certificate_succeeds() {
    bounded(async {
        let server = HttpServer::tls(|_| Reply::ok("secure")).await;
        let action = HTTPGetAction { scheme: Some("HTTPS".into()), ..get(server.port(), "/tls") };
        assert_eq!(request(&action).url(), server.url("/tls"));
        assert_eq!(probe(&action).await, success("secure"));
        let seen = server.requests();
        assert_eq!(seen.len(), 1);
        assert_eq!(seen[0].request_line, "GET /tls HTTP/1.1");
    })
    .await;
}

// === headers on the wire ===

#[tokio::test]
async fn default_headers_are_exactly_host_user_agent_accept_connection() {
    bounded(async {
        let server = HttpServer::plain(|_| Reply::ok("")).await;
        assert_eq!(probe(&get(server.port(), "/healthz")).await, success(""));
        let seen = server.requests();
        let host = format!("127.0.0.1:{}", server.port());
        assert_eq!(seen[0].request_line, "GET /healthz HTTP/1.1");
        assert_eq!(
            seen[0].header_pairs(),
            [
                ("Host", host.as_str()),
                ("User-Agent", KUBE_PROBE_USER_AGENT),
                ("Accept", "*/*"),
                ("Connection", "close")
            ]
        );
        assert_eq!(KUBE_PROBE_USER_AGENT, "kube-probe/1.35");
    })
    .await;
}

/// A case name, the supplied headers, the header lines expected after `Host`.
type HeaderCase = (&'static str, Vec<(&'static str, &'static str)>, Vec<(&'static str, &'static str)>);

#[tokio::test]
async fn supplied_headers_override_or_remove_the_defaults() {
    bounded(async {
        let cases: Vec<HeaderCase> = vec![
            (
                "custom user agent",
                vec![("user-agent", "my-prober/2")],
                vec![("User-Agent", "my-prober/2"), ("Accept", "*/*"), ("Connection", "close")],
            ),
            (
                "empty user agent removes it",
                vec![("User-Agent", "")],
                vec![("Accept", "*/*"), ("Connection", "close")],
            ),
            (
                "empty accept removes it",
                vec![("Accept", "")],
                vec![("User-Agent", KUBE_PROBE_USER_AGENT), ("Connection", "close")],
            ),
            (
                "custom accept",
                vec![("accept", "application/json")],
                vec![
                    ("User-Agent", KUBE_PROBE_USER_AGENT),
                    ("Accept", "application/json"),
                    ("Connection", "close"),
                ],
            ),
            (
                "repeated names accumulate, canonicalised",
                vec![("x-custom", "one"), ("X-CUSTOM", "two"), ("fOO-bAR", "baz")],
                vec![
                    ("User-Agent", KUBE_PROBE_USER_AGENT),
                    ("Accept", "*/*"),
                    ("Foo-Bar", "baz"),
                    ("X-Custom", "one"),
                    ("X-Custom", "two"),
                    ("Connection", "close"),
                ],
            ),
            (
                "accept-encoding only when supplied, even empty",
                vec![("Accept-Encoding", "")],
                vec![
                    ("User-Agent", KUBE_PROBE_USER_AGENT),
                    ("Accept", "*/*"),
                    ("Accept-Encoding", ""),
                    ("Connection", "close"),
                ],
            ),
        ];
        for (name, supplied, want) in cases {
            let server = HttpServer::plain(|_| Reply::ok("")).await;
            let action = with_headers(get(server.port(), "/"), &supplied);
            assert_eq!(probe(&action).await, success(""), "case {name}");
            let seen = server.requests();
            let host = format!("127.0.0.1:{}", server.port());
            let mut expected = vec![("Host", host.as_str())];
            expected.extend(want);
            assert_eq!(seen[0].header_pairs(), expected, "case {name}");
        }
    })
    .await;
}

#[tokio::test]
async fn host_header_sets_the_virtual_host() {
    bounded(async {
        let server = HttpServer::plain(|req| {
            if req.header("Host") == Some("www.example.com") {
                Reply::ok("vhost")
            } else {
                Reply::status(400, "")
            }
        })
        .await;
        let action = with_headers(get(server.port(), "/"), &[("HOST", "www.example.com")]);
        assert_eq!(probe(&action).await, success("vhost"));
        assert_eq!(server.requests()[0].header_values("Host"), ["www.example.com"], "one Host line only");
    })
    .await;
}

#[tokio::test]
async fn huge_header_value_is_sent() {
    bounded(async {
        let server =
            HttpServer::plain(|req| Reply::ok(req.header("X-Big").map_or(0, str::len).to_string())).await;
        let big = "v".repeat(64 * 1024);
        let action = with_headers(get(server.port(), "/"), &[("X-Big", &big)]);
        assert_eq!(probe(&action).await, success("65536"));
    })
    .await;
}

#[tokio::test]
async fn query_is_sent_and_fragment_is_not() {
    bounded(async {
        let server = HttpServer::plain(|_| Reply::ok("")).await;
        for (path, target) in
            [("/healthz?x=1#frag", "/healthz?x=1"), ("?foo", "/?foo"), ("/a b", "/a%20b"), ("", "/")]
        {
            assert_eq!(probe(&get(server.port(), path)).await, success(""), "case {path:?}");
            let seen = server.requests();
            let last = seen.last().expect("a request");
            assert_eq!(last.target, target, "case {path:?}");
        }
    })
    .await;
}

// === redirects ===

#[tokio::test]
async fn redirect_to_the_same_host_on_another_port_is_followed() {
    bounded(async {
        let target = HttpServer::plain(|_| Reply::ok("arrived")).await;
        let location = target.url("/final");
        let origin = HttpServer::plain(move |_| Reply::redirect(302, &location)).await;
        assert_eq!(probe(&get(origin.port(), "/start")).await, success("arrived"));
        let seen = target.requests();
        assert_eq!(seen.len(), 1);
        assert_eq!(seen[0].target, "/final");
        assert_eq!(seen[0].header("Host"), Some(format!("127.0.0.1:{}", target.port()).as_str()));
        assert_eq!(seen[0].header("Referer"), Some(origin.url("/start").as_str()), "Go sets Referer");
        assert_eq!(seen[0].header("User-Agent"), Some(KUBE_PROBE_USER_AGENT), "headers are copied");
    })
    .await;
}

#[tokio::test]
async fn every_redirect_status_is_followed() {
    bounded(async {
        for status in [301, 302, 303, 307, 308] {
            let server = HttpServer::plain(move |req| {
                if req.path() == "/from" {
                    Reply::redirect(status, "/to")
                } else {
                    Reply::ok(req.path().to_owned())
                }
            })
            .await;
            assert_eq!(probe(&get(server.port(), "/from")).await, success("/to"), "case {status}");
        }
    })
    .await;
}

#[tokio::test]
async fn relative_locations_resolve_against_the_request() {
    bounded(async {
        let server = HttpServer::plain(|req| match req.target.as_str() {
            "/a/b?q=1" => Reply::redirect(302, "c"),
            "/a/c" => Reply::redirect(302, "../d?z"),
            _ => Reply::ok(req.target.clone()),
        })
        .await;
        assert_eq!(probe(&get(server.port(), "/a/b?q=1")).await, success("/d?z"));
    })
    .await;
}

#[tokio::test]
async fn redirect_to_another_hostname_is_a_warning_with_the_body() {
    bounded(async {
        // localhost and 127.0.0.1 reach the same server, but the hostnames differ: not followed.
        let server = HttpServer::plain(|req| {
            let location = format!("http://localhost:{}/elsewhere", req.local_addr.port());
            Reply::status(302, "moved away").with_header("Location", &location)
        })
        .await;
        assert_eq!(probe(&get(server.port(), "/")).await, warning("moved away"));
        assert_eq!(server.requests().len(), 1);
    })
    .await;
}

#[tokio::test]
async fn redirects_that_are_not_followed_are_warnings() {
    bounded(async {
        let cases = [
            ("302 without Location", Reply::status(302, "nowhere")),
            ("302 with empty Location", Reply::status(302, "empty").with_header("Location", "")),
            ("300 is not a redirect to follow", Reply::redirect(300, "/other")),
            ("304", Reply::status(304, "")),
        ];
        for (name, reply) in cases {
            let body = match &reply {
                Reply::Respond { status: 304, .. } => String::new(),
                Reply::Respond { body, .. } => String::from_utf8(body.clone()).expect("utf-8"),
                _ => unreachable!(),
            };
            let server = HttpServer::plain(move |_| reply.clone()).await;
            assert_eq!(probe(&get(server.port(), "/")).await, warning(&body), "case {name}");
            assert_eq!(server.requests().len(), 1, "case {name}");
        }
    })
    .await;
}

#[tokio::test]
async fn ten_redirects_fail() {
    bounded(async {
        let server = HttpServer::plain(|_| Reply::redirect(302, "/loop")).await;
        let got = probe(&get(server.port(), "/loop")).await;
        assert_eq!(got, failure("Get \"/loop\": stopped after 10 redirects"));
        assert_eq!(server.requests().len(), 10);
    })
    .await;
}

#[tokio::test]
async fn nine_redirects_are_followed() {
    bounded(async {
        let hops = Arc::new(AtomicUsize::new(0));
        let counter = hops.clone();
        let server = HttpServer::plain(move |_| {
            if counter.fetch_add(1, Ordering::SeqCst) < 9 {
                Reply::redirect(307, "/next")
            } else {
                Reply::ok("done")
            }
        })
        .await;
        assert_eq!(probe(&get(server.port(), "/")).await, success("done"));
        assert_eq!(hops.load(Ordering::SeqCst), 10);
    })
    .await;
}

#[tokio::test]
async fn host_header_survives_a_relative_redirect() {
    bounded(async {
        let server = HttpServer::plain(|req| match (req.path(), req.header("Host")) {
            ("/redirect", _) => Reply::redirect(302, "/success"),
            ("/success", Some("www.success.com")) => Reply::ok("success"),
            _ => Reply::status(400, ""),
        })
        .await;
        let action = with_headers(get(server.port(), "/redirect"), &[("Host", "www.success.com")]);
        assert_eq!(probe(&action).await, success("success"));
        let hosts: Vec<String> =
            server.requests().iter().map(|r| r.header("Host").unwrap_or_default().to_owned()).collect();
        assert_eq!(hosts, ["www.success.com", "www.success.com"]);
    })
    .await;
}

#[tokio::test]
async fn host_header_is_replaced_by_an_absolute_redirect() {
    bounded(async {
        // Go keeps a custom Host only through relative Locations (golang issue 22233).
        let server = HttpServer::plain(|req| match req.path() {
            "/redirect" => Reply::redirect(302, &format!("http://127.0.0.1:{}/next", req.local_addr.port())),
            _ => Reply::ok(req.header("Host").unwrap_or_default().to_owned()),
        })
        .await;
        let action = with_headers(get(server.port(), "/redirect"), &[("Host", "www.example.com")]);
        assert_eq!(probe(&action).await, success(&format!("127.0.0.1:{}", server.port())));
    })
    .await;
}

#[tokio::test]
async fn https_to_http_redirect_on_the_same_host_is_followed_without_referer() {
    bounded(async {
        let plain = HttpServer::plain(|_| Reply::ok("downgraded")).await;
        let location = plain.url("/plain");
        let secure = HttpServer::tls(move |_| Reply::redirect(301, &location)).await;
        let action = HTTPGetAction { scheme: Some("HTTPS".into()), ..get(secure.port(), "/secure") };
        assert_eq!(probe(&action).await, success("downgraded"));
        let seen = plain.requests();
        assert_eq!(seen.len(), 1);
        assert_eq!(seen[0].header("Referer"), None);
    })
    .await;
}

#[tokio::test]
async fn http_to_https_redirect_on_the_same_host_is_followed() {
    bounded(async {
        let secure = HttpServer::tls(|_| Reply::ok("upgraded")).await;
        let location = secure.url("/secure");
        let plain = HttpServer::plain(move |_| Reply::redirect(308, &location)).await;
        assert_eq!(probe(&get(plain.port(), "/")).await, success("upgraded"));
        assert_eq!(secure.requests()[0].header("Referer"), Some(plain.url("/").as_str()));
    })
    .await;
}

// === transport errors, timeouts, body errors ===

/// Hosts that Go's URL keeps but that are no DNS names fail their lookup, a probe failure as in
/// the kubelet (not a request that cannot be built, whose result would be thrown away). `127.1`
/// is 127.0.0.1 to the system resolver, where the server below would have answered.
#[tokio::test]
async fn a_host_that_is_no_dns_name_fails_the_probe_without_a_connection() {
    bounded(async {
        let server = HttpServer::plain(|_| Reply::ok("reached")).await;
        let port = server.port();
        let cases = [
            ("127.1", format!("http://127.1:{port}/x"), "127.1"),
            ("a!b", format!("http://a!b:{port}/x"), "a!b"),
            ("bücher.example", format!("http://b%C3%BCcher.example:{port}/x"), "bücher.example"),
            // Not a valid Host header either (Go would send it empty, once connected): its
            // lookup fails first.
            ("a\"b", format!("http://a\\\"b:{port}/x"), "a\"b"),
        ];
        for (host, url, looked_up) in cases {
            let action = HTTPGetAction { host: Some(host.to_owned()), ..get(port, "/x") };
            let want = format!("Get \"{url}\": dial tcp: lookup {looked_up}: no such host");
            assert_eq!(probe(&action).await, failure(&want), "host {host:?}");
        }
        assert!(server.requests().is_empty(), "no probe reached the server");
    })
    .await;
}

#[tokio::test]
async fn connection_refused_fails_with_the_dial_error() {
    bounded(async {
        let port = {
            let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
            listener.local_addr().expect("addr").port()
        };
        let want = format!(
            "Get \"http://127.0.0.1:{port}/x\": dial tcp 127.0.0.1:{port}: connect: connection refused"
        );
        assert_eq!(probe(&get(port, "/x")).await, failure(&want));
    })
    .await;
}

#[tokio::test]
async fn server_that_never_answers_fails_within_the_timeout() {
    bounded(async {
        let server = HttpServer::plain(|_| Reply::Hang).await;
        let started = Instant::now();
        let got = HttpProber::new().probe(&request(&get(server.port(), "/slow")), SHORT).await;
        let elapsed = started.elapsed();
        let url = server.url("/slow");
        let want = format!(
            "Get \"{url}\": context deadline exceeded (Client.Timeout exceeded while awaiting headers)"
        );
        assert_eq!(got, failure(&want));
        assert!(elapsed >= SHORT && elapsed < SHORT + SLACK, "took {elapsed:?}");
        assert_eq!(server.requests().len(), 1, "the request did reach the server");
    })
    .await;
}

#[tokio::test]
async fn timeout_covers_the_redirect_chain() {
    bounded(async {
        let server =
            HttpServer::plain(
                |req| if req.path() == "/" { Reply::redirect(302, "/hang") } else { Reply::Hang },
            )
            .await;
        let started = Instant::now();
        let got = HttpProber::new().probe(&request(&get(server.port(), "/")), SHORT).await;
        let want = format!(
            "Get \"{}\": context deadline exceeded (Client.Timeout exceeded while awaiting headers)",
            server.url("/hang")
        );
        assert_eq!(got, failure(&want));
        assert!(started.elapsed() < SHORT + SLACK);
    })
    .await;
}

/// Go reads up to 2 KiB of a followed redirect's body before the next request: a small body
/// that stalls holds the probe until its timeout, and the next request then finds its time
/// gone. A big one is not read at all.
#[tokio::test]
async fn a_redirect_whose_small_body_stalls_times_out() {
    bounded(async {
        let stalled = |declared: usize| {
            Reply::RawThenHang(
                format!("HTTP/1.1 302 Found\r\nLocation: /ok\r\nContent-Length: {declared}\r\n\r\nsome")
                    .into_bytes(),
            )
        };
        let server =
            HttpServer::plain(move |req| if req.path() == "/ok" { Reply::ok("ok") } else { stalled(100) })
                .await;
        let started = Instant::now();
        let got = HttpProber::new().probe(&request(&get(server.port(), "/")), SHORT).await;
        let want = format!(
            "Get \"{}\": context deadline exceeded (Client.Timeout exceeded while awaiting headers)",
            server.url("/ok")
        );
        assert_eq!(got, failure(&want));
        assert!(started.elapsed() < SHORT + SLACK);

        let big =
            HttpServer::plain(move |req| if req.path() == "/ok" { Reply::ok("ok") } else { stalled(4096) })
                .await;
        let got = HttpProber::new().probe(&request(&get(big.port(), "/")), SHORT).await;
        assert_eq!(got, success("ok"), "a body over 2 KiB is left unread");
    })
    .await;
}

#[tokio::test]
async fn body_that_stalls_is_a_body_read_error_at_the_timeout() {
    bounded(async {
        let server = HttpServer::plain(|_| Reply::Partial {
            status: 200,
            declared: 100,
            body: b"partial".to_vec(),
            then_hang: true,
        })
        .await;
        let started = Instant::now();
        let got = HttpProber::new().probe(&request(&get(server.port(), "/")), SHORT).await;
        assert_eq!(
            got,
            Err(ProbeError::BodyRead(
                "context deadline exceeded (Client.Timeout or context cancellation while reading body)"
                    .into()
            ))
        );
        assert!(started.elapsed() < SHORT + SLACK);
    })
    .await;
}

#[tokio::test]
async fn body_cut_short_is_a_body_read_error() {
    bounded(async {
        let server = HttpServer::plain(|_| Reply::Partial {
            status: 200,
            declared: 100,
            body: b"partial".to_vec(),
            then_hang: false,
        })
        .await;
        let got = probe(&get(server.port(), "/")).await;
        assert_eq!(got, Err(ProbeError::BodyRead("unexpected EOF".into())));
        assert_eq!(got.map_err(|e| e.outcome()), Err(ProbeOutcome::Failure));
    })
    .await;
}

#[tokio::test]
async fn body_cut_short_after_the_cap_is_not_an_error() {
    bounded(async {
        let body = vec![b'x'; MAX_RESPONSE_BODY_BYTES + 10];
        let server = HttpServer::plain(move |_| Reply::Partial {
            status: 200,
            declared: 50_000,
            body: body.clone(),
            then_hang: true,
        })
        .await;
        let got = HttpProber::new().probe(&request(&get(server.port(), "/")), LONG).await;
        assert_eq!(got, success(&"x".repeat(MAX_RESPONSE_BODY_BYTES)));
    })
    .await;
}

#[tokio::test]
async fn connection_closed_without_a_response_fails() {
    bounded(async {
        let server = HttpServer::plain(|_| Reply::Close).await;
        let want = format!("Get \"{}\": EOF", server.url("/"));
        assert_eq!(probe(&get(server.port(), "/")).await, failure(&want));
    })
    .await;
}

#[tokio::test]
async fn https_to_a_plain_http_server_fails_like_go() {
    bounded(async {
        // Answers anything, even a TLS ClientHello, with a plain HTTP 400 (as Go's server does).
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let port = listener.local_addr().expect("addr").port();
        let server = tokio::spawn(async move {
            while let Ok((mut stream, _)) = listener.accept().await {
                let _ = stream.write_all(b"HTTP/1.1 400 Bad Request\r\nConnection: close\r\n\r\n").await;
            }
        });
        let action = HTTPGetAction { scheme: Some("https".into()), ..get(port, "/") };
        let want =
            format!("Get \"https://127.0.0.1:{port}/\": http: server gave HTTP response to HTTPS client");
        assert_eq!(probe(&action).await, failure(&want));
        server.abort();
    })
    .await;
}

#[tokio::test]
async fn unsupported_scheme_fails_like_go() {
    bounded(async {
        let action = HTTPGetAction { scheme: Some("FTP".into()), ..get(21, "/file") };
        assert_eq!(
            probe(&action).await,
            failure("Get \"ftp://127.0.0.1:21/file\": unsupported protocol scheme \"ftp\"")
        );
    })
    .await;
}

#[tokio::test]
async fn one_prober_serves_many_probes_concurrently() {
    bounded(async {
        let server = HttpServer::plain(|req: &RecordedRequest| Reply::ok(req.path().to_owned())).await;
        let prober = HttpProber::default();
        let probes = (0..8).map(|i| {
            let prober = prober.clone();
            let request = request(&get(server.port(), &format!("/p{i}")));
            async move { prober.probe(&request, LONG).await }
        });
        let results = futures::future::join_all(probes).await;
        for (i, got) in results.into_iter().enumerate() {
            assert_eq!(got, success(&format!("/p{i}")), "probe {i}");
        }
    })
    .await;
}

// === through the prober, with the request a worker keeps ===

/// A pod at 127.0.0.1 whose one container has `action` as its readiness probe.
fn pod_probing(action: &HTTPGetAction) -> (Arc<Pod>, Arc<PodProbeStatus>) {
    let container = Container {
        name: "app".into(),
        readiness_probe: Some(Probe { http_get: Some(action.clone()), ..Default::default() }),
        ..Default::default()
    };
    let pod = Pod {
        metadata: ObjectMeta { name: Some("web".into()), uid: Some("uid-web".into()), ..Default::default() },
        spec: Some(PodSpec { containers: vec![container], ..Default::default() }),
        ..Default::default()
    };
    let status = PodStatus { pod_ip: Some("127.0.0.1".into()), ..Default::default() };
    (Arc::new(pod), Arc::new(PodProbeStatus::from(&status)))
}

/// Three probes through one memo, as a worker runs them.
async fn probe_three_times(action: &HTTPGetAction) -> Vec<Result<ProbeResult, ProbeError>> {
    let prober = Prober::new(Arc::new(LocalCommandRunner::new()), Arc::new(MemoryRecorder::new()));
    let (pod, status) = pod_probing(action);
    let container = PodContainer::find(&pod, "app").expect("the container");
    let memo = ProbeMemo::default();
    let mut results = Vec::new();
    for _ in 0..3 {
        let id = ContainerId::new("probelet", "abc");
        let probe = prober.probe_with_memo(
            ProbeKind::Readiness,
            pod.clone(),
            status.clone(),
            container.clone(),
            id,
            LONG,
            memo.clone(),
        );
        results.push(probe.await.result);
    }
    results
}

#[tokio::test]
async fn a_kept_request_sends_the_same_bytes_as_a_fresh_one() {
    bounded(async {
        let server = HttpServer::plain(|_| Reply::ok("fine")).await;
        let action =
            with_headers(get(server.port(), "/ready?x=1"), &[("X-Custom", " a "), ("Accept", "text/plain")]);
        assert_eq!(probe(&action).await, success("fine"));
        let fresh = server.requests();
        assert_eq!(probe_three_times(&action).await, vec![Ok(ProbeResult::Success); 3]);
        let kept = server.requests();
        assert_eq!(kept.len(), 4, "{kept:?}");
        for request in &kept[1..] {
            assert_eq!(
                (&request.request_line, &request.headers),
                (&fresh[0].request_line, &fresh[0].headers)
            );
        }
    })
    .await;
}

#[tokio::test]
async fn a_kept_request_still_follows_redirects_with_the_whole_request() {
    bounded(async {
        let server = HttpServer::plain(|req| match req.target.as_str() {
            "/start" => Reply::redirect(302, "/next"),
            _ => Reply::ok("arrived"),
        })
        .await;
        let action =
            with_headers(get(server.port(), "/start"), &[("Host", "www.example.com"), ("X-Keep", "1")]);
        assert_eq!(probe_three_times(&action).await, vec![Ok(ProbeResult::Success); 3]);
        let seen = server.requests();
        assert_eq!(seen.len(), 6, "{seen:?}");
        for pair in seen.chunks(2) {
            assert_eq!(pair[0].target, "/start");
            assert_eq!(pair[1].target, "/next");
            // The custom Host survives the relative redirect, the Referer is the first URL,
            // the supplied headers are copied: the whole request, built again for the hop.
            assert_eq!(pair[1].header("Host"), Some("www.example.com"));
            assert_eq!(
                pair[1].header("Referer"),
                Some(format!("http://127.0.0.1:{}/start", server.port()).as_str())
            );
            assert_eq!(pair[1].header("X-Keep"), Some("1"));
        }
    })
    .await;
}

#[tokio::test]
async fn a_header_name_hyper_cannot_carry_fails_the_probe_as_goes_transport_would() {
    bounded(async {
        let server = HttpServer::plain(|_| Reply::ok("never")).await;
        let name = "X".repeat(70_000);
        let action = with_headers(get(server.port(), "/"), &[(name.as_str(), "1")]);
        let got = probe(&action).await.expect("a failure, not an error");
        assert_eq!(got.outcome, ProbeOutcome::Failure);
        assert!(
            got.output.starts_with("Get \"http://127.0.0.1:"),
            "{}",
            &got.output[..80.min(got.output.len())]
        );
        assert!(
            got.output.contains("net/http: invalid header field name"),
            "{}",
            &got.output[..120.min(got.output.len())]
        );
        assert_eq!(probe_three_times(&action).await, vec![Ok(ProbeResult::Failure); 3]);
        assert!(server.requests().is_empty());
    })
    .await;
}

/// Headers the API server lets through but Go's transport refuses to send (a value with a line
/// break, a name with a space): upstream's `client.Do` fails before it dials, and the probe
/// fails with `Get "<url>": <transport's text>`, so a liveness probe restarts the container.
/// Before, probelet called them errors: each result was discarded, and a liveness probe never
/// failed.
#[tokio::test]
async fn headers_go_refuses_to_send_fail_the_probe_without_a_request() {
    bounded(async {
        let server = HttpServer::plain(|_| Reply::ok("never")).await;
        let url = format!("http://127.0.0.1:{}/", server.port());
        let cases: [(&[(&str, &str)], String); 2] = [
            (&[("X-Bad", "a\nb")], "net/http: invalid header field value for \"X-Bad\"".to_owned()),
            (&[("X Foo", "1")], "net/http: invalid header field name \"X Foo\"".to_owned()),
        ];
        for (headers, text) in cases {
            let action = with_headers(get(server.port(), "/"), headers);
            let recorder = Arc::new(MemoryRecorder::new());
            let prober = Prober::new(Arc::new(LocalCommandRunner::new()), recorder.clone());
            let (pod, status) = pod_probing(&action);
            let container = PodContainer::find(&pod, "app").expect("the container");
            let id = ContainerId::new("probelet", "abc");
            let run = prober.probe_with_memo(
                ProbeKind::Readiness,
                pod,
                status,
                container,
                id,
                LONG,
                ProbeMemo::default(),
            );
            assert_eq!(run.await.result, Ok(ProbeResult::Failure), "{text}");
            let want = format!("Readiness probe failed: Get \"{url}\": {text}");
            assert!(
                recorder.rendered().iter().any(|e| e.contains(&want)),
                "{want}: {:?}",
                recorder.rendered()
            );
            assert_eq!(probe_three_times(&action).await, vec![Ok(ProbeResult::Failure); 3], "{text}");
        }
        assert!(server.requests().is_empty(), "nothing was sent");
    })
    .await;
}

/// A `Host` Go would not write (`a b` given in `httpHeaders`, or a URL host such as `a"b`'s) is
/// sent empty, as Go's `Request.write` does since Go 1.21 (go.dev/issue/61431) for a request
/// not sent through a proxy: the server answers, and the probe reads its answer. Before,
/// probelet failed (or errored) such a probe with `http: invalid Host header`, Go 1.20.6's
/// text.
#[tokio::test]
async fn a_host_go_would_not_write_is_sent_empty() {
    bounded(async {
        let server = HttpServer::plain(|_| Reply::ok("answered")).await;
        let action = with_headers(get(server.port(), "/"), &[("Host", "a b")]);
        assert_eq!(probe(&action).await, success("answered"));
        assert_eq!(probe_three_times(&action).await, vec![Ok(ProbeResult::Success); 3]);
        let requests = server.requests();
        assert_eq!(requests.len(), 4);
        assert!(requests.iter().all(|r| r.header("Host") == Some("")), "{:?}", requests[0]);
    })
    .await;
}

// === answers read as Go's client reads them ===

/// A server that answers every request with exactly `bytes` (each piece flushed on its own).
async fn raw_server(pieces: &[&[u8]]) -> HttpServer {
    let pieces: Vec<Vec<u8>> = pieces.iter().map(|p| p.to_vec()).collect();
    HttpServer::plain(move |_| Reply::Raw(pieces.clone())).await
}

/// What the probe makes of `pieces` as the answer.
async fn probe_answer(pieces: &[&[u8]]) -> (HttpServer, Result<Probed, ProbeError>) {
    let server = raw_server(pieces).await;
    let got = probe(&get(server.port(), "/")).await;
    (server, got)
}

/// `Get "<url>": <text>` for the server's root.
fn failed_get(server: &HttpServer, text: &str) -> Result<Probed, ProbeError> {
    failure(&format!("Get \"{}\": {text}", server.url("/")))
}

#[tokio::test]
async fn a_chunked_body_is_decoded() {
    bounded(async {
        let (_, got) = probe_answer(&[
            b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n",
            b"5\r\nhello\r\n",
            b"7;ext=1\r\n, world\r\n",
            b"0\r\nX-Trailer: t\r\n\r\n",
        ])
        .await;
        assert_eq!(got, success("hello, world"));
    })
    .await;
}

#[tokio::test]
async fn a_chunked_body_is_capped_at_ten_kib() {
    bounded(async {
        let chunk = format!("1000\r\n{}\r\n", "y".repeat(0x1000));
        let mut answer = b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n".to_vec();
        for _ in 0..4 {
            answer.extend_from_slice(chunk.as_bytes());
        }
        // No last chunk: the probe stops at the cap and never reads further.
        let (_, got) = probe_answer(&[&answer]).await;
        assert_eq!(got, success(&"y".repeat(MAX_RESPONSE_BODY_BYTES)));
    })
    .await;
}

#[tokio::test]
async fn a_chunked_body_cut_short_is_a_body_read_error() {
    bounded(async {
        let (_, got) =
            probe_answer(&[b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n", b"a\r\nabc"]).await;
        assert_eq!(got, Err(ProbeError::BodyRead("unexpected EOF".into())));
        let (_, got) =
            probe_answer(&[b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n", b"zz\r\nabc"]).await;
        assert_eq!(got, Err(ProbeError::BodyRead("invalid byte in chunk length".into())));
        // The last chunk must be followed by the trailer's end, as Go reads it.
        let (_, got) =
            probe_answer(&[b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n", b"2\r\nok\r\n0\r\n"])
                .await;
        assert_eq!(got, Err(ProbeError::BodyRead("http: unexpected EOF reading trailer".into())));
        // A bare LF inside a chunk line (Go since CVE-2025-22871) is not the line's end.
        let (_, got) = probe_answer(&[
            b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n",
            b"5;x\nhello\r\nworld\r\n0\r\n\r\n",
        ])
        .await;
        assert_eq!(got, Err(ProbeError::BodyRead("chunked line ends with bare LF".into())));
    })
    .await;
}

#[tokio::test]
async fn a_body_without_length_runs_until_the_server_closes() {
    bounded(async {
        let (_, got) = probe_answer(&[b"HTTP/1.1 200 OK\r\n\r\n", b"all of ", b"this"]).await;
        assert_eq!(got, success("all of this"));
        // HTTP/1.0 answers' Transfer-Encoding is ignored, as Go ignores it.
        let (_, got) =
            probe_answer(&[b"HTTP/1.0 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n", b"5\r\nraw"]).await;
        assert_eq!(got, success("5\r\nraw"));
    })
    .await;
}

#[tokio::test]
async fn informational_answers_are_skipped() {
    bounded(async {
        let (_, got) = probe_answer(&[
            b"HTTP/1.1 100 Continue\r\n\r\n",
            b"HTTP/1.1 103 Early Hints\r\nLink: </a>\r\n\r\n",
            b"HTTP/1.1 204 No Content\r\n\r\n",
        ])
        .await;
        assert_eq!(got, success(""));
        // Any number of them (Go since 1.24), as long as all the heads together stay within
        // the head limit.
        let many = b"HTTP/1.1 100 Continue\r\n\r\n".repeat(20);
        let (_, got) = probe_answer(&[&many, b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok"]).await;
        assert_eq!(got, success("ok"));
        let hint = format!("HTTP/1.1 103 Early Hints\r\nLink: <{}>\r\n\r\n", "a".repeat(100_000));
        let hints = hint.repeat(5);
        let (server, got) =
            probe_answer(&[hints.as_bytes(), b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok"]).await;
        assert_eq!(
            got,
            failed_get(&server, "net/http: server response headers exceeded 417792 bytes; aborted")
        );
    })
    .await;
}

#[tokio::test]
async fn a_malformed_answer_fails_with_gos_text() {
    bounded(async {
        let (server, got) = probe_answer(&[b"SSH-2.0-OpenSSH_9.6\r\n"]).await;
        assert_eq!(
            got,
            failed_get(
                &server,
                "net/http: HTTP/1.x transport connection broken: malformed HTTP response \"SSH-2.0-OpenSSH_9.6\""
            )
        );
        // An empty line first is an empty status line to Go, not one to skip.
        let (server, got) = probe_answer(&[b"\r\nHTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n"]).await;
        assert_eq!(
            got,
            failed_get(&server, "net/http: HTTP/1.x transport connection broken: malformed HTTP response \"\"")
        );
        let (server, got) = probe_answer(&[b"HTTP/1.1 200 OK\r\nContent-Length: 12x\r\n\r\n"]).await;
        assert_eq!(
            got,
            failed_get(&server, "net/http: HTTP/1.x transport connection broken: bad Content-Length \"12x\"")
        );
        let (server, got) =
            probe_answer(&[b"HTTP/1.1 200 OK\r\nContent-Length: 1\r\nContent-Length: 2\r\n\r\nab"]).await;
        assert_eq!(
            got,
            failed_get(
                &server,
                "net/http: HTTP/1.x transport connection broken: http: message cannot contain multiple \
                 Content-Length headers; got [\"1\" \"2\"]"
            )
        );
        let (server, got) = probe_answer(&[b"HTTP/1.1 200 OK\r\nTransfer-Encoding: gzip\r\n\r\n"]).await;
        assert_eq!(
            got,
            failed_get(
                &server,
                "net/http: HTTP/1.x transport connection broken: unsupported transfer encoding: \"gzip\""
            )
        );
        let (server, got) = probe_answer(&[b"HTTP/1.1 200 OK\r\nContent-Le"]).await;
        assert_eq!(got, failed_get(&server, "unexpected EOF"));
    })
    .await;
}

#[tokio::test]
async fn many_headers_are_read_and_a_huge_head_is_refused() {
    bounded(async {
        // More than hyper's 100: Go sets no limit on the count, only on the head's size.
        let mut head = b"HTTP/1.1 200 OK\r\n".to_vec();
        for i in 0..300 {
            head.extend_from_slice(format!("X-H{i}: {i}\r\n").as_bytes());
        }
        head.extend_from_slice(b"Content-Length: 2\r\n\r\nok");
        let (_, got) = probe_answer(&[&head]).await;
        assert_eq!(got, success("ok"));

        let mut huge = b"HTTP/1.1 200 OK\r\n".to_vec();
        for _ in 0..64 {
            huge.extend_from_slice(format!("X-Big: {}\r\n", "v".repeat(8000)).as_bytes());
        }
        huge.extend_from_slice(b"\r\n");
        let (server, got) = probe_answer(&[&huge]).await;
        assert_eq!(
            got,
            failed_get(&server, "net/http: server response headers exceeded 417792 bytes; aborted")
        );
    })
    .await;
}

#[tokio::test]
async fn an_answer_split_anywhere_reads_the_same() {
    bounded(async {
        let answer: &[u8] = b"HTTP/1.1 302 Found\r\nLocation: http://elsewhere.example/\r\n\
                              Transfer-Encoding: chunked\r\n\r\n4\r\nmove\r\n0\r\n\r\n";
        let bytes: Vec<&[u8]> = answer.chunks(1).collect();
        let (_, got) = probe_answer(&bytes).await;
        assert_eq!(got, warning("move"));
    })
    .await;
}

// === how the probe drives its connection ===

/// Notes the wakes a future gives itself while it is being polled: a task woken during its
/// own poll is scheduled again as soon as the poll ends, and on a multi-thread runtime that
/// can wake a parked thread to run it.
struct SelfWakes {
    polling: std::sync::atomic::AtomicBool,
    woken: std::sync::atomic::AtomicBool,
    task: std::sync::Mutex<Option<std::task::Waker>>,
}

impl std::task::Wake for SelfWakes {
    fn wake(self: Arc<Self>) {
        self.wake_by_ref();
    }

    fn wake_by_ref(self: &Arc<Self>) {
        if self.polling.load(Ordering::SeqCst) {
            self.woken.store(true, Ordering::SeqCst);
        }
        if let Some(task) = self.task.lock().expect("not poisoned").as_ref() {
            task.wake_by_ref();
        }
    }
}

/// The request is written in the poll that finds the connection made, so nothing wakes the
/// probe before its request is sent. With hyper's client connection, polling the connection
/// first and then waiting for it to say it was ready made the probe wake itself before its
/// request was even written: one more trip through the scheduler per probe, and on the
/// workers' runtime often a parked thread woken for it (docs/benchmarks.md, "Handing the
/// request over"). The probe's own exchange writes at once; this keeps it so.
#[tokio::test]
async fn the_probe_does_not_wake_itself_before_its_request_is_sent() {
    bounded(async {
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let port = listener.local_addr().expect("addr").port();
        let received = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let server = tokio::spawn({
            let received = received.clone();
            async move {
                let (mut stream, _) = listener.accept().await.expect("accept");
                let mut head = Vec::new();
                let mut buf = [0u8; 1024];
                while !head.windows(4).any(|w| w == b"\r\n\r\n") {
                    let n = tokio::io::AsyncReadExt::read(&mut stream, &mut buf).await.expect("read");
                    assert!(n > 0, "the connection closed before the request's head");
                    head.extend_from_slice(&buf[..n]);
                }
                received.store(true, Ordering::SeqCst);
                let answer = b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\nConnection: close\r\n\r\nok";
                stream.write_all(answer).await.expect("write");
                stream.shutdown().await.expect("shutdown");
            }
        });

        let wakes = Arc::new(SelfWakes {
            polling: false.into(),
            woken: false.into(),
            task: std::sync::Mutex::new(None),
        });
        let waker = std::task::Waker::from(wakes.clone());
        let prober = HttpProber::new();
        let request = request(&get(port, "/"));
        let mut probe = std::pin::pin!(prober.probe(&request, LONG));
        let mut woken_before_sent = 0;
        let probed = std::future::poll_fn(|cx| {
            *wakes.task.lock().expect("not poisoned") = Some(cx.waker().clone());
            let sent = received.load(Ordering::SeqCst);
            wakes.woken.store(false, Ordering::SeqCst);
            wakes.polling.store(true, Ordering::SeqCst);
            let polled = probe.as_mut().poll(&mut std::task::Context::from_waker(&waker));
            wakes.polling.store(false, Ordering::SeqCst);
            if polled.is_pending() && !sent && wakes.woken.load(Ordering::SeqCst) {
                woken_before_sent += 1;
            }
            polled
        })
        .await;
        server.await.expect("server");
        assert_eq!(probed, success("ok"));
        assert_eq!(woken_before_sent, 0, "polls that woke the probe before its request was sent");
    })
    .await;
}

// === HTTP/2 over TLS (docs/http-probe.md, "HTTP/2 over TLS") ===

fn https(port: u16, path: &str) -> HTTPGetAction {
    HTTPGetAction { scheme: Some("HTTPS".into()), ..get(port, path) }
}

/// A TLS server that accepts only `h2` answers the probe, which offers ALPN `h2, http/1.1` as
/// the kubelet's transport does; the request is the HTTP/1.1 one as Go's HTTP/2 transport
/// sends it: `:authority` from the Host, lower-case names, no `Connection`.
#[tokio::test]
async fn an_h2_only_server_is_probed_over_http2() {
    bounded(async {
        let server = H2Server::start(|_| H2Reply::ok("over h2")).await;
        assert_eq!(probe(&https(server.port(), "/healthz?x=1")).await, success("over h2"));
        let action = with_headers(https(server.port(), "/v"), &[("Host", "app.local"), ("x-custom", "a")]);
        assert_eq!(probe(&action).await, success("over h2"));
        let seen = server.requests();
        assert_eq!(seen.len(), 2);
        let (first, second) = (&seen[0], &seen[1]);
        assert_eq!(first.method, "GET");
        assert_eq!(first.scheme, "https");
        assert_eq!(first.authority, format!("127.0.0.1:{}", server.port()));
        assert_eq!(first.path, "/healthz?x=1");
        let fields = |pairs: &[(&str, &str)]| -> Vec<(String, String)> {
            pairs.iter().map(|(n, v)| ((*n).to_owned(), (*v).to_owned())).collect()
        };
        assert_eq!(first.headers, fields(&[("user-agent", KUBE_PROBE_USER_AGENT), ("accept", "*/*")]));
        assert_eq!(second.authority, "app.local");
        assert_eq!(
            second.headers,
            fields(&[("user-agent", KUBE_PROBE_USER_AGENT), ("accept", "*/*"), ("x-custom", "a")])
        );
    })
    .await;
}

#[tokio::test]
async fn an_h2_answer_maps_to_outcomes_as_http1_does() {
    bounded(async {
        let server = H2Server::start(|request| match request.path.as_str() {
            "/fail" => H2Reply::status(500, "secret stack trace"),
            "/elsewhere" => {
                H2Reply::redirect(302, "http://example.invalid/x").with_header("content-length", "0")
            }
            _ => H2Reply::status(204, ""),
        })
        .await;
        assert_eq!(
            probe(&https(server.port(), "/fail")).await,
            failure("HTTP probe failed with statuscode: 500")
        );
        assert_eq!(probe(&https(server.port(), "/empty")).await, success(""));
        assert_eq!(probe(&https(server.port(), "/elsewhere")).await, warning(""));
    })
    .await;
}

/// Redirects follow the same rules over HTTP/2, each hop on a connection of its own that
/// negotiates its protocol anew: here from the HTTP/2 server to itself, then to an HTTP/1.1
/// server on the same host.
#[tokio::test]
async fn h2_redirects_are_followed_and_each_hop_picks_its_protocol() {
    bounded(async {
        let h1 = HttpServer::tls(|_| Reply::ok("landed on h1")).await;
        let last = h1.url("/end");
        let server = H2Server::start(move |request| match request.path.as_str() {
            "/start" => H2Reply::redirect(301, "/middle"),
            _ => H2Reply::redirect(307, &last),
        })
        .await;
        assert_eq!(probe(&https(server.port(), "/start")).await, success("landed on h1"));
        let seen = server.requests();
        assert_eq!(seen.iter().map(|r| r.path.as_str()).collect::<Vec<_>>(), ["/start", "/middle"]);
        let referer = seen[1].headers.iter().find(|(n, _)| n == "referer").map(|(_, v)| v.clone());
        assert_eq!(referer, Some(server.url("/start")));
        let landed = h1.requests();
        assert_eq!(landed[0].request_line, "GET /end HTTP/1.1");
        assert_eq!(
            landed[0].headers.iter().find(|(n, _)| n == "Referer").map(|(_, v)| v.clone()),
            Some(server.url("/middle"))
        );
    })
    .await;
}

#[tokio::test]
async fn an_h2_body_is_capped_at_ten_kib() {
    bounded(async {
        // More than the stream's first flow-control window (64 KiB) too.
        let body: Vec<u8> = (0..100_000u32).map(|i| b'a' + (i % 26) as u8).collect();
        let want = String::from_utf8(body[..MAX_RESPONSE_BODY_BYTES].to_vec()).expect("ascii");
        let server = H2Server::start(move |_| H2Reply::ok(body.clone())).await;
        assert_eq!(probe(&https(server.port(), "/")).await, success(&want));
    })
    .await;
}

/// A stream the server resets fails the probe with Go's HTTP/2 text for it.
#[tokio::test]
async fn a_reset_h2_stream_fails_with_gos_text() {
    bounded(async {
        let server = H2Server::start(|_| H2Reply::Reset(2)).await;
        let want = format!(
            "Get \"{}\": stream error: stream ID 1; INTERNAL_ERROR; received from peer",
            server.url("/")
        );
        assert_eq!(probe(&https(server.port(), "/")).await, failure(&want));
    })
    .await;
}

/// Go's transport sends a request again, on a new connection, when the HTTP/2 server says it
/// did not process it (`canRetryError`): a stream reset with REFUSED_STREAM, or with
/// PROTOCOL_ERROR, by the server, and a GOAWAY with NO_ERROR that leaves the stream out. The
/// probe's GET has no body, so Go always may; it goes on until an answer or its timeout.
#[tokio::test]
async fn an_h2_request_the_server_did_not_process_is_sent_again_on_a_new_connection() {
    bounded(async {
        let cases: Vec<(&str, Vec<RawAct>, usize)> = vec![
            ("REFUSED_STREAM", vec![RawAct::Reset(7)], 2),
            ("PROTOCOL_ERROR from the server", vec![RawAct::Reset(1)], 2),
            (
                "a GOAWAY with NO_ERROR that leaves the stream out",
                vec![RawAct::GoAway { last: 0, code: 0 }],
                2,
            ),
            ("refused three times", vec![RawAct::Reset(7); 3], 4),
        ];
        for (case, script, connections) in cases {
            let server = RawH2Server::start(script, RawAct::Answer("sent again")).await;
            assert_eq!(probe(&https(server.port(), "/")).await, success("sent again"), "{case}");
            assert_eq!(server.connections(), connections, "{case}");
        }
    })
    .await;
}

/// What Go's transport does not send again fails the probe with Go's words: another reset, a
/// GOAWAY with an error code that leaves a connection's first stream out; and a server that
/// refuses every request holds the probe until its timeout, with Go's text for it.
#[tokio::test]
async fn h2_failures_go_does_not_retry_fail_the_probe() {
    bounded(async {
        let cases: Vec<(&str, RawAct, &str)> = vec![
            (
                "INTERNAL_ERROR",
                RawAct::Reset(2),
                "stream error: stream ID 1; INTERNAL_ERROR; received from peer",
            ),
            (
                "a GOAWAY with PROTOCOL_ERROR that leaves the stream out",
                RawAct::GoAway { last: 0, code: 1 },
                "http2: Transport received GOAWAY from server ErrCode:PROTOCOL_ERROR",
            ),
        ];
        for (case, act, error) in cases {
            let server = RawH2Server::start(Vec::new(), act).await;
            let want = format!("Get \"{}\": {error}", server.url("/"));
            assert_eq!(probe(&https(server.port(), "/")).await, failure(&want), "{case}");
            assert_eq!(server.connections(), 1, "{case}");
        }

        let server = RawH2Server::start(Vec::new(), RawAct::Reset(7)).await;
        let start = Instant::now();
        let got = HttpProber::new().probe(&request(&https(server.port(), "/")), SHORT).await;
        let took = start.elapsed();
        let want = format!(
            "Get \"{}\": context deadline exceeded (Client.Timeout exceeded while awaiting headers)",
            server.url("/")
        );
        assert_eq!(got, failure(&want));
        assert!(took >= SHORT && took < SHORT + SLACK, "took {took:?}");
        let connections = server.connections();
        assert!(connections > 1, "sent again: {connections} connections");
    })
    .await;
}

/// The HTTP/1.1 path's head limit holds for an HTTP/2 answer's head too (Go's own limit is
/// 10 MiB, over HTTP/1.1 as over HTTP/2).
#[tokio::test]
async fn an_h2_head_over_the_limit_fails() {
    bounded(async {
        let server = H2Server::start(|request| {
            let size = if request.path == "/big" { 420_000 } else { 400_000 };
            H2Reply::ok("").with_header("x-big", &"b".repeat(size))
        })
        .await;
        assert_eq!(probe(&https(server.port(), "/fits")).await, success(""));
        let want = format!("Get \"{}\": stream error: stream ID 1; PROTOCOL_ERROR", server.url("/big"));
        assert_eq!(probe(&https(server.port(), "/big")).await, failure(&want));
    })
    .await;
}

#[tokio::test]
async fn an_h2_server_that_never_answers_fails_within_the_timeout() {
    bounded(async {
        let server = H2Server::start(|_| H2Reply::Silent).await;
        let start = Instant::now();
        let got = HttpProber::new().probe(&request(&https(server.port(), "/slow")), SHORT).await;
        let want = format!(
            "Get \"{}\": context deadline exceeded (Client.Timeout exceeded while awaiting headers)",
            server.url("/slow")
        );
        assert_eq!(got, failure(&want));
        assert!(start.elapsed() < SHORT + SLACK);
    })
    .await;
}

/// A server that picks `http/1.1` from the offer is answered in HTTP/1.1, as before.
#[tokio::test]
async fn a_server_that_picks_http1_is_probed_over_http1() {
    bounded(async {
        let server = HttpServer::tls_http1_alpn(|_| Reply::ok("h1")).await;
        assert_eq!(probe(&https(server.port(), "/h1")).await, success("h1"));
        assert_eq!(server.requests()[0].request_line, "GET /h1 HTTP/1.1");
    })
    .await;
}

/// With HTTP/2 off (the kubelet with `DISABLE_HTTP2` set) no protocol is offered: a server
/// that speaks only HTTP/2 gets an HTTP/1.1 request it cannot read, and the probe fails
/// without an answer (a server that requires ALPN refuses the handshake instead).
#[tokio::test]
async fn with_http2_off_an_h2_only_server_fails_the_probe() {
    bounded(async {
        let server = H2Server::start(|_| H2Reply::ok("unreached")).await;
        let got = HttpProber::with_http2(false).probe(&request(&https(server.port(), "/")), LONG).await;
        let output = got.expect("a probe result");
        assert_eq!(output.outcome, ProbeOutcome::Failure, "{}", output.output);
        assert!(output.output.starts_with(&format!("Get \"{}\": ", server.url("/"))), "{}", output.output);
        assert!(server.requests().is_empty());
    })
    .await;
}
