//! gRPC health probes (docs/prober.md §4.8) against real servers on 127.0.0.1: tonic-health in each
//! state, a scripted `Health` implementation, a server without the health service, raw TCP servers
//! that never speak HTTP/2, and closed ports. Every output is asserted byte for byte.

use probelet_test_support as support;

use std::future::Future;
use std::time::Duration;

use probelet::prober::grpc::probe;
use probelet::prober::{ProbeOutcome, Probed};
use support::grpc_server::{self, Reply};
use tokio::time::Instant;
use tonic::Code;
use tonic_health::ServingStatus;

/// A timeout the probe is meant to hit.
const SHORT: Duration = Duration::from_millis(300);
/// A timeout the probe is not meant to hit.
const LONG: Duration = Duration::from_secs(5);

/// Bounds a test's wall time.
async fn bounded<T>(fut: impl Future<Output = T>) -> T {
    tokio::time::timeout(Duration::from_secs(10), fut).await.expect("test took too long")
}

fn failure(output: impl Into<String>) -> Probed {
    Probed::new(ProbeOutcome::Failure, output)
}

#[tokio::test]
async fn tonic_health_states() {
    bounded(async {
        let server = grpc_server::health(&[
            ("serving", ServingStatus::Serving),
            ("not-serving", ServingStatus::NotServing),
            ("unknown", ServingStatus::Unknown),
        ])
        .await;
        let cases: &[(&str, Probed)] = &[
            ("", Probed::new(ProbeOutcome::Success, "service healthy")),
            ("serving", Probed::new(ProbeOutcome::Success, "service healthy")),
            ("not-serving", failure(r#"service unhealthy (responded with "NOT_SERVING")"#)),
            ("unknown", failure(r#"service unhealthy (responded with "UNKNOWN")"#)),
            // tonic-health (like grpc-go's health server) answers an unregistered name with
            // NOT_FOUND rather than SERVICE_UNKNOWN, which only Watch uses.
            (
                "unregistered",
                failure("error: health rpc probe failed: rpc error: code = NotFound desc = service not registered"),
            ),
        ];
        for (service, want) in cases {
            let got = probe("127.0.0.1", server.port(), service, LONG).await;
            assert_eq!(&got, want, "service {service:?}");
        }
    })
    .await;
}

#[tokio::test]
async fn scripted_statuses_and_errors() {
    bounded(async {
        let cases: &[(&str, Reply, Probed)] = &[
            (
                "SERVICE_UNKNOWN",
                Reply::Status(3),
                failure(r#"service unhealthy (responded with "SERVICE_UNKNOWN")"#),
            ),
            ("unknown enum number", Reply::Status(7), failure(r#"service unhealthy (responded with "7")"#)),
            ("SERVING", Reply::Status(1), Probed::new(ProbeOutcome::Success, "service healthy")),
            (
                "Internal",
                Reply::Error(Code::Internal, "boom".into()),
                failure("error: health rpc probe failed: rpc error: code = Internal desc = boom"),
            ),
            (
                "Unimplemented with a message",
                Reply::Error(Code::Unimplemented, "not here".into()),
                failure(
                    "error: this server does not implement the grpc health protocol \
                     (grpc.health.v1.Health): not here",
                ),
            ),
            (
                "DeadlineExceeded from the server",
                Reply::Error(Code::DeadlineExceeded, "too slow".into()),
                failure("timeout: health rpc did not complete within 5s"),
            ),
        ];
        for (name, reply, want) in cases {
            let (server, _) = grpc_server::scripted(reply.clone()).await;
            let got = probe("127.0.0.1", server.port(), "svc", LONG).await;
            assert_eq!(&got, want, "case {name}");
        }
    })
    .await;
}

#[tokio::test]
async fn sends_user_agent_service_and_grpc_timeout() {
    bounded(async {
        let (server, seen) = grpc_server::scripted(Reply::Status(1)).await;
        let got = probe("127.0.0.1", server.port(), "svc", LONG).await;
        assert_eq!(got, Probed::new(ProbeOutcome::Success, "service healthy"));
        let seen = seen.lock().expect("lock").clone();
        assert_eq!(seen.len(), 1);
        let ua = seen[0].get("user-agent").and_then(|v| v.to_str().ok()).unwrap_or_default();
        // tonic appends its own token as grpc-go does (`kube-probe/1.35 grpc-go/1.x`).
        assert!(ua.starts_with("kube-probe/1.35 "), "user-agent {ua:?}");
        assert!(seen[0].get("grpc-timeout").is_some(), "no grpc-timeout in {:?}", seen[0]);
    })
    .await;
}

#[tokio::test]
async fn server_without_health_service_is_unimplemented() {
    bounded(async {
        let server = grpc_server::without_health().await;
        let got = probe("127.0.0.1", server.port(), "", LONG).await;
        // tonic's fallback answers Unimplemented with an empty message.
        let want = "error: this server does not implement the grpc health protocol (grpc.health.v1.Health): ";
        assert_eq!(got, failure(want));
    })
    .await;
}

/// The handler never answers: the deadline hits during the call. The 1 s timeout shows the
/// formatting of whole seconds.
#[tokio::test]
async fn check_that_never_returns_times_out_in_the_rpc() {
    bounded(async {
        let (server, _) = grpc_server::scripted(Reply::Hang).await;
        let started = Instant::now();
        let got = probe("127.0.0.1", server.port(), "", Duration::from_secs(1)).await;
        assert_eq!(got, failure("timeout: health rpc did not complete within 1s"));
        assert!(started.elapsed() >= Duration::from_secs(1), "returned after {:?}", started.elapsed());
    })
    .await;
}

/// TCP is accepted but no HTTP/2 SETTINGS ever arrives: grpc-go's blocking dial never becomes
/// READY, so this is a dial timeout, not an RPC timeout.
#[tokio::test]
async fn tcp_server_that_never_speaks_is_a_dial_timeout() {
    bounded(async {
        let server = grpc_server::silent_tcp().await;
        let got = probe("127.0.0.1", server.port(), "", SHORT).await;
        let want = format!(
            "timeout: failed to connect service \"127.0.0.1:{}\" within 300ms: context deadline exceeded",
            server.port()
        );
        assert_eq!(got, failure(want));
    })
    .await;
}

/// An HTTP/1 server answers and closes: the connection never becomes READY and is retried
/// until the deadline, as grpc-go does.
#[tokio::test]
async fn http1_server_is_a_dial_timeout() {
    bounded(async {
        let server = grpc_server::http1_tcp().await;
        let got = probe("127.0.0.1", server.port(), "", SHORT).await;
        let want = format!(
            "timeout: failed to connect service \"127.0.0.1:{}\" within 300ms: context deadline exceeded",
            server.port()
        );
        assert_eq!(got, failure(want));
    })
    .await;
}

/// grpc-go's blocking dial retries a refused connection until the deadline, so a closed port is
/// a dial timeout (upstream's test: `":32"` → `timeout: failed to connect service ":32" within
/// 1s: context deadline exceeded`), not `error: failed to connect service at …`.
#[tokio::test]
async fn closed_port_is_a_dial_timeout() {
    bounded(async {
        let port = grpc_server::closed_port().await;
        let started = Instant::now();
        let got = probe("127.0.0.1", port, "", SHORT).await;
        let want = format!(
            "timeout: failed to connect service \"127.0.0.1:{port}\" within 300ms: context deadline exceeded"
        );
        assert_eq!(got, failure(want));
        assert!(started.elapsed() >= SHORT, "returned after {:?}", started.elapsed());
    })
    .await;
}

/// Upstream's own example: an empty host dials the local system and shows as `":port"`.
#[tokio::test]
async fn empty_host_matches_upstream_example() {
    bounded(async {
        let port = grpc_server::closed_port().await;
        let got = probe("", port, "", SHORT).await;
        let want =
            format!("timeout: failed to connect service \":{port}\" within 300ms: context deadline exceeded");
        assert_eq!(got, failure(want));
    })
    .await;
}

/// A server that appears during the dial is found by the retry.
#[tokio::test]
async fn server_starting_late_is_reached_by_the_retry() {
    bounded(async {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let port = listener.local_addr().expect("addr").port();
        let probing = tokio::spawn(async move { probe("127.0.0.1", port, "", Duration::from_secs(3)).await });
        // The first attempt fails (the connection closes before any HTTP/2), seen here as it
        // happens; only then does the server take the port.
        let (first, _) = listener.accept().await.expect("the probe's first attempt");
        drop(first);
        drop(listener);
        let server = grpc_server::health_on(port).await;
        let got = probing.await.expect("probe task");
        assert_eq!(got, Probed::new(ProbeOutcome::Success, "service healthy"));
        drop(server);
    })
    .await;
}

/// A host that cannot form a URI is the "other dial error"; nothing is dialled.
#[tokio::test]
async fn invalid_host_is_a_dial_error() {
    bounded(async {
        let got = probe("bad host", 80, "", SHORT).await;
        assert_eq!(
            got,
            failure(
                "error: failed to connect service at \"bad host:80\": invalid URI: invalid uri character"
            )
        );
    })
    .await;
}

/// An HTTP/2 server that is not gRPC: every request gets `status` with `headers` and an empty
/// body (what a proxy or a plain web server on the probed port answers).
async fn h2_answering(status: u16, headers: &'static [(&'static str, &'static str)]) -> u16 {
    h2_scripted(Answer { status, headers, message: b"", trailers: None, reset: None }).await
}

/// An HTTP status, the headers that come with it, and the probe's output.
type HeaderCase = (u16, &'static [(&'static str, &'static str)], &'static str);

/// grpc-go refuses an answer on its headers before it reads a message when its content type is
/// not gRPC's, whatever `grpc-status` says: with its HTTP status, 200 included (the code from
/// gRPC's table: 404 is Unimplemented, 503 Unavailable).
#[tokio::test]
async fn answers_grpc_go_refuses_on_their_headers() {
    bounded(async {
        let cases: [HeaderCase; 5] = [
            (
                404,
                &[("content-type", "text/plain")],
                "error: this server does not implement the grpc health protocol (grpc.health.v1.Health): \
                 unexpected HTTP status code received from server: 404 (Not Found); \
                 transport: received unexpected content-type \"text/plain\"",
            ),
            (
                500,
                &[("content-type", "application/grpcx"), ("grpc-status", "0")],
                "error: health rpc probe failed: rpc error: code = Unknown desc = \
                 unexpected HTTP status code received from server: 500 (Internal Server Error); \
                 transport: received unexpected content-type \"application/grpcx\"",
            ),
            (
                503,
                &[("content-type", "text/html"), ("grpc-status", "0")],
                "error: health rpc probe failed: rpc error: code = Unavailable desc = \
                 unexpected HTTP status code received from server: 503 (Service Unavailable); \
                 transport: received unexpected content-type \"text/html\"",
            ),
            (
                // tonic checks an encoding it does not know before the status it is given.
                200,
                &[("content-type", "text/html"), ("grpc-encoding", "br")],
                "error: health rpc probe failed: rpc error: code = Unknown desc = \
                 unexpected HTTP status code received from server: 200 (OK); \
                 transport: received unexpected content-type \"text/html\"",
            ),
            (
                200,
                &[("grpc-status", "0")],
                "error: health rpc probe failed: rpc error: code = Unknown desc = \
                 unexpected HTTP status code received from server: 200 (OK); \
                 malformed header: missing HTTP content-type",
            ),
        ];
        for (status, headers, want) in cases {
            let port = h2_answering(status, headers).await;
            let got = probe("127.0.0.1", port, "", LONG).await;
            assert_eq!(got, failure(want), "HTTP {status} {headers:?}");
        }
    })
    .await;
}

/// The health service's answer SERVING, framed as gRPC sends a message.
const SERVING: &[u8] = &[0, 0, 0, 0, 2, 0x08, 0x01];

/// What a scripted HTTP/2 server answers: its status, headers, message and trailers (`None`:
/// the stream ends after the message), or a reset of the stream with an HTTP/2 error code
/// after the headers. With no message, trailers or reset, the headers end the stream (a
/// trailers-only answer).
struct Answer {
    status: u16,
    headers: &'static [(&'static str, &'static str)],
    message: &'static [u8],
    trailers: Option<&'static [(&'static str, &'static str)]>,
    reset: Option<h2::Reason>,
}

/// A gRPC answer with `headers` beside gRPC's content type, SERVING, and `trailers`.
fn grpc_answer(
    headers: &'static [(&'static str, &'static str)],
    trailers: Option<&'static [(&'static str, &'static str)]>,
) -> Answer {
    Answer { status: 200, headers, message: SERVING, trailers, reset: None }
}

/// An HTTP/2 server that gives every request `answer`.
async fn h2_scripted(answer: Answer) -> u16 {
    use bytes::Bytes;
    use http_body_util::{BodyExt, Empty, StreamBody};
    use hyper::body::Frame;
    use hyper_util::rt::{TokioExecutor, TokioIo};
    let answer = std::sync::Arc::new(answer);
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("a port");
    let port = listener.local_addr().expect("bound").port();
    tokio::spawn(async move {
        while let Ok((stream, _)) = listener.accept().await {
            let answer = answer.clone();
            let service = hyper::service::service_fn(move |_request| {
                let answer = answer.clone();
                async move {
                    let mut frames: Vec<Result<Frame<Bytes>, h2::Error>> = Vec::new();
                    if !answer.message.is_empty() {
                        frames.push(Ok(Frame::data(Bytes::from_static(answer.message))));
                    }
                    if let Some(reason) = answer.reset {
                        frames.push(Err(h2::Error::from(reason)));
                    } else if let Some(trailers) = answer.trailers {
                        let mut map = http::HeaderMap::new();
                        for (name, value) in trailers {
                            map.append(*name, http::HeaderValue::from_static(value));
                        }
                        frames.push(Ok(Frame::trailers(map)));
                    }
                    let mut response = http::Response::builder().status(answer.status);
                    for (name, value) in answer.headers {
                        response = response.header(*name, *value);
                    }
                    // A body known to be empty: hyper ends the stream on the headers.
                    if frames.is_empty() {
                        return response.body(Empty::<Bytes>::new().map_err(|never| match never {}).boxed());
                    }
                    response.body(StreamBody::new(futures::stream::iter(frames)).boxed())
                }
            });
            tokio::spawn(
                hyper_util::server::conn::auto::Builder::new(TokioExecutor::new())
                    .http2_only()
                    .serve_connection(TokioIo::new(stream), service)
                    .into_owned(),
            );
        }
    });
    port
}

const GRPC: (&str, &str) = ("content-type", "application/grpc");

/// Answers with gRPC's content type as grpc-go (v1.76 and later, as kubelet v1.36 links) reads
/// them: whatever the HTTP status; refusing a `-bin` value that is not base64 (a malformed
/// `grpc-status-details-bin` made tonic panic, so the probe never failed) or a `grpc-status`
/// that is not a number; trailers without a status, or none at all.
#[tokio::test]
async fn answers_with_grpcs_content_type_are_read_as_grpc_go_reads_them() {
    bounded(async {
        let cases: Vec<(&str, Answer, Probed)> = vec![
            (
                "HTTP 500 with gRPC's content type and a SERVING answer",
                Answer { status: 500, ..grpc_answer(&[GRPC], Some(&[("grpc-status", "0")])) },
                Probed::new(ProbeOutcome::Success, "service healthy"),
            ),
            (
                "HTTP 503 trailers-only from a proxy",
                Answer {
                    status: 503,
                    headers: &[GRPC, ("grpc-status", "14"), ("grpc-message", "no healthy upstream")],
                    message: b"",
                    trailers: None,
                    reset: None,
                },
                failure("error: health rpc probe failed: rpc error: code = Unavailable desc = no healthy upstream"),
            ),
            (
                "a status detail that is not base64, in the trailers",
                grpc_answer(&[GRPC], Some(&[("grpc-status", "5"), ("grpc-status-details-bin", "!!!")])),
                failure(
                    "error: health rpc probe failed: rpc error: code = Internal desc = \
                     transport: malformed grpc-status-details-bin: illegal base64 data at input byte 0",
                ),
            ),
            (
                "a status detail that is not base64, trailers-only",
                Answer {
                    headers: &[GRPC, ("grpc-status", "5"), ("grpc-status-details-bin", "AAAA!AAA")],
                    message: b"",
                    ..grpc_answer(&[], None)
                },
                failure(
                    "error: health rpc probe failed: rpc error: code = Internal desc = \
                     transport: malformed grpc-status-details-bin: illegal base64 data at input byte 4",
                ),
            ),
            (
                "a status detail Go reads and tonic's base64 refuses (bits left over)",
                grpc_answer(&[GRPC], Some(&[("grpc-status", "0"), ("grpc-status-details-bin", "AB")])),
                Probed::new(ProbeOutcome::Success, "service healthy"),
            ),
            (
                "metadata of its own that is not base64, on a SERVING answer",
                grpc_answer(&[GRPC, ("x-trace-bin", "A")], Some(&[("grpc-status", "0")])),
                failure(
                    "error: health rpc probe failed: rpc error: code = Internal desc = \
                     transport: malformed x-trace-bin: illegal base64 data at input byte 0",
                ),
            ),
            (
                "a grpc-status that is not a number",
                grpc_answer(&[GRPC], Some(&[("grpc-status", "abc")])),
                failure(
                    "error: health rpc probe failed: rpc error: code = Unknown desc = \
                     transport: malformed grpc-status: strconv.ParseInt: parsing \"abc\": invalid syntax",
                ),
            ),
            (
                "a grpc-status Go reads with its sign",
                grpc_answer(&[GRPC], Some(&[("grpc-status", "+5"), ("grpc-message", "gone")])),
                failure("error: health rpc probe failed: rpc error: code = NotFound desc = gone"),
            ),
            (
                "trailers without a grpc-status",
                grpc_answer(&[GRPC], Some(&[("grpc-message", "")])),
                failure("error: health rpc probe failed: rpc error: code = Unknown desc = "),
            ),
            (
                "no trailers at all",
                grpc_answer(&[GRPC], None),
                failure(
                    "error: health rpc probe failed: rpc error: code = Internal desc = \
                     server closed the stream without sending trailers",
                ),
            ),
            (
                "the stream reset with FLOW_CONTROL_ERROR",
                Answer { reset: Some(h2::Reason::FLOW_CONTROL_ERROR), ..grpc_answer(&[GRPC], None) },
                failure(
                    "error: health rpc probe failed: rpc error: code = ResourceExhausted desc = \
                     stream terminated by RST_STREAM with error code: FLOW_CONTROL_ERROR",
                ),
            ),
            (
                "the stream reset with INTERNAL_ERROR",
                Answer { reset: Some(h2::Reason::INTERNAL_ERROR), ..grpc_answer(&[GRPC], None) },
                failure(
                    "error: health rpc probe failed: rpc error: code = Internal desc = \
                     stream terminated by RST_STREAM with error code: INTERNAL_ERROR",
                ),
            ),
            (
                "a grpc-status in headers that do not end the stream, then trailers saying otherwise",
                grpc_answer(&[GRPC, ("grpc-status", "0")], Some(&[("grpc-status", "13")])),
                failure("error: health rpc probe failed: rpc error: code = Internal desc = "),
            ),
            (
                "a grpc-status in headers that do not end the stream, and no trailers",
                grpc_answer(&[GRPC, ("grpc-status", "0")], None),
                failure(
                    "error: health rpc probe failed: rpc error: code = Internal desc = \
                     server closed the stream without sending trailers",
                ),
            ),
            (
                "a failing grpc-status in headers that do not end the stream, then an OK",
                grpc_answer(&[GRPC, ("grpc-status", "14")], Some(&[("grpc-status", "0")])),
                Probed::new(ProbeOutcome::Success, "service healthy"),
            ),
            (
                "a trailers-only answer without grpc-status",
                Answer { headers: &[GRPC], message: b"", ..grpc_answer(&[], None) },
                failure("error: health rpc probe failed: rpc error: code = Unknown desc = "),
            ),
            (
                "a 20 KB header on a SERVING answer (h2's default limit is 16 KiB)",
                grpc_answer(with_a_big_header(), Some(&[("grpc-status", "0")])),
                Probed::new(ProbeOutcome::Success, "service healthy"),
            ),
        ];
        for (case, answer, want) in cases {
            let port = h2_scripted(answer).await;
            let got = probe("127.0.0.1", port, "", LONG).await;
            assert_eq!(got, want, "{case}");
        }
    })
    .await;
}

/// Headers of gRPC's content type and one header of 20,000 bytes (leaked: the scripted server
/// holds `'static` headers).
fn with_a_big_header() -> &'static [(&'static str, &'static str)] {
    let big: &'static str = Box::leak("x".repeat(20_000).into_boxed_str());
    Box::leak(vec![GRPC, ("x-big", big)].into_boxed_slice())
}

/// SERVING as a gzipped gRPC message (compressed flag set): gzip of `08 01`.
const SERVING_GZIP: &[u8] = &[
    1, 0, 0, 0, 22, 0x1f, 0x8b, 0x08, 0x00, 0x00, 0x00, 0x00, 0x00, 0x02, 0x03, 0xe3, 0x60, 0x04, 0x00, 0x61,
    0xa8, 0x07, 0xfe, 0x02, 0x00, 0x00, 0x00,
];

/// The kubelet's grpc-go has gzip registered: it offers it (`grpc-accept-encoding: gzip`, no
/// `identity`) and reads an answer the server gzips.
#[tokio::test]
async fn gzipped_answers_are_read_and_gzip_is_offered_as_grpc_go_offers_it() {
    bounded(async {
        let answer = Answer {
            status: 200,
            headers: &[GRPC, ("grpc-encoding", "gzip")],
            message: SERVING_GZIP,
            trailers: Some(&[("grpc-status", "0")]),
            reset: None,
        };
        let port = h2_scripted(answer).await;
        let got = probe("127.0.0.1", port, "", LONG).await;
        assert_eq!(got, Probed::new(ProbeOutcome::Success, "service healthy"));

        let (server, seen) = grpc_server::scripted(Reply::Status(1)).await;
        probe("127.0.0.1", server.port(), "svc", LONG).await;
        let seen = seen.lock().expect("lock").clone();
        let offered = seen[0].get("grpc-accept-encoding").and_then(|v| v.to_str().ok());
        assert_eq!(offered, Some("gzip"));
    })
    .await;
}

/// grpc-go reads `grpc-encoding` only when a message arrives compressed (`checkRecvPayload`): an
/// answer naming an encoding it has no decompressor for is read while its messages are not
/// compressed, and a compressed one fails Internal with grpc-go's words, as do a compressed
/// message without an encoding, a flag that is neither 0 nor 1, and a length over its 4 MiB
/// limit. tonic refused the first on its header, Unimplemented, so that the probe reported a
/// server without the health protocol.
#[tokio::test]
async fn messages_are_checked_against_grpc_encoding_as_grpc_go_checks_them() {
    bounded(async {
        const PREFIX: &str = "error: health rpc probe failed: rpc error: code = ";
        let ok = Some(&[("grpc-status", "0")][..]);
        let cases: Vec<(&str, Answer, Probed)> = vec![
            (
                "an encoding grpc-go lacks, on an uncompressed message",
                grpc_answer(&[GRPC, ("grpc-encoding", "br")], ok),
                Probed::new(ProbeOutcome::Success, "service healthy"),
            ),
            (
                "an encoding grpc-go lacks, on a compressed message",
                Answer { message: SERVING_GZIP, ..grpc_answer(&[GRPC, ("grpc-encoding", "br")], ok) },
                failure(format!(
                    "{PREFIX}Internal desc = grpc: Decompressor is not installed for grpc-encoding \"br\""
                )),
            ),
            (
                "an encoding grpc-go lacks, on a trailers-only answer",
                Answer {
                    headers: &[GRPC, ("grpc-encoding", "br"), ("grpc-status", "5"), ("grpc-message", "gone")],
                    message: b"",
                    ..grpc_answer(&[], None)
                },
                failure(format!("{PREFIX}NotFound desc = gone")),
            ),
            (
                "a compressed message without an encoding",
                Answer { message: SERVING_GZIP, ..grpc_answer(&[GRPC], ok) },
                failure(format!("{PREFIX}Internal desc = grpc: compressed flag set with identity or empty encoding")),
            ),
            (
                "a compressed message under identity",
                Answer { message: SERVING_GZIP, ..grpc_answer(&[GRPC, ("grpc-encoding", "identity")], ok) },
                failure(format!("{PREFIX}Internal desc = grpc: compressed flag set with identity or empty encoding")),
            ),
            (
                "a flag that is neither 0 nor 1",
                Answer { message: &[2, 0, 0, 0, 2, 0x08, 0x01], ..grpc_answer(&[GRPC], ok) },
                failure(format!("{PREFIX}Internal desc = grpc: received unexpected payload format 2")),
            ),
            (
                "a length over grpc-go's limit, announced",
                Answer { message: &[0, 0, 0x40, 0, 1], ..grpc_answer(&[GRPC], ok) },
                failure(format!(
                    "{PREFIX}ResourceExhausted desc = grpc: received message larger than max (4194305 vs. 4194304)"
                )),
            ),
        ];
        for (case, answer, want) in cases {
            let port = h2_scripted(answer).await;
            let got = probe("127.0.0.1", port, "", LONG).await;
            assert_eq!(got, want, "{case}");
        }
    })
    .await;
}

/// One thing a raw HTTP/2 server does once a request has ended (its stream's END_STREAM).
#[derive(Debug, Clone, Copy)]
enum Act {
    /// Answers SERVING: headers, the message, trailers with `grpc-status: 0`.
    Serve,
    /// Resets the stream with REFUSED_STREAM.
    Refuse,
    /// Sends GOAWAY with this last stream id, NO_ERROR and this debug data.
    GoAway(u32, &'static [u8]),
    /// Sends an answer's headers (200, gRPC's content type) and nothing else.
    Headers,
    /// Sends four bytes of a frame header.
    PartialFrame,
    /// Closes the connection's write side (FIN); the server reads on until the client closes, so
    /// that nothing the client still sends is answered with a TCP reset.
    CloseWrite,
    /// Waits.
    Sleep(Duration),
}

/// What a raw HTTP/2 server does: for each connection, in the order they come, what it does
/// with each request on it (a request past its list, or a connection past the script, is
/// served SERVING; an empty list leaves the request unanswered).
type Script = &'static [&'static [&'static [Act]]];

/// An HTTP/2 server written frame by frame, for what a library server will not do when asked
/// (a GOAWAY that leaves the first stream out, a refused stream, a connection closed mid-call).
/// It accepts `max_connections` connections, then closes its port. Returns the port and a count
/// of the connections accepted.
async fn raw_h2(
    script: Script,
    max_connections: usize,
) -> (u16, std::sync::Arc<std::sync::atomic::AtomicUsize>) {
    raw_h2_opening(Opening::Settings, script, max_connections).await
}

/// How the raw HTTP/2 server opens each connection.
#[derive(Debug, Clone, Copy)]
enum Opening {
    /// Its SETTINGS, then an acknowledgement of the client's.
    Settings,
    /// An acknowledgement of the client's SETTINGS, then its own.
    AckFirst,
    /// An acknowledgement of the client's SETTINGS and no SETTINGS of its own.
    AckOnly,
}

/// [`raw_h2`], opening each connection as `opening` says.
async fn raw_h2_opening(
    opening: Opening,
    script: Script,
    max_connections: usize,
) -> (u16, std::sync::Arc<std::sync::atomic::AtomicUsize>) {
    use std::sync::atomic::{AtomicUsize, Ordering};
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("a port");
    let port = listener.local_addr().expect("bound").port();
    let accepted = std::sync::Arc::new(AtomicUsize::new(0));
    let count = accepted.clone();
    tokio::spawn(async move {
        for index in 0..max_connections {
            let Ok((stream, _)) = listener.accept().await else { return };
            count.fetch_add(1, Ordering::SeqCst);
            let requests = script.get(index).copied().unwrap_or(&[]);
            tokio::spawn(raw_h2_connection(stream, opening, requests));
        }
    });
    (port, accepted)
}

async fn raw_h2_connection(
    mut stream: tokio::net::TcpStream,
    opening: Opening,
    requests: &'static [&'static [Act]],
) {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut preface = [0u8; 24];
    if stream.read_exact(&mut preface).await.is_err() {
        return;
    }
    if !matches!(opening, Opening::Settings) {
        // The client's SETTINGS follows its preface: acknowledged before anything else.
        let mut header = [0u8; 9];
        if stream.read_exact(&mut header).await.is_err() {
            return;
        }
        let len = usize::from(header[0]) << 16 | usize::from(header[1]) << 8 | usize::from(header[2]);
        if stream.read_exact(&mut vec![0u8; len]).await.is_err() {
            return;
        }
        let _ = stream.write_all(&frame(0x4, 0x1, 0, &[])).await;
    }
    // Writes fail once the write side is closed; the server only reads on then.
    if !matches!(opening, Opening::AckOnly) {
        let _ = stream.write_all(&frame(0x4, 0, 0, &[])).await;
    }
    let mut answered = 0;
    loop {
        let mut header = [0u8; 9];
        if stream.read_exact(&mut header).await.is_err() {
            return;
        }
        let len = usize::from(header[0]) << 16 | usize::from(header[1]) << 8 | usize::from(header[2]);
        let (kind, flags) = (header[3], header[4]);
        let stream_id = u32::from_be_bytes([header[5] & 0x7f, header[6], header[7], header[8]]);
        let mut payload = vec![0u8; len];
        if stream.read_exact(&mut payload).await.is_err() {
            return;
        }
        match kind {
            // SETTINGS: acknowledged.
            0x4 if flags & 0x1 == 0 => {
                let _ = stream.write_all(&frame(0x4, 0x1, 0, &[])).await;
            }
            // HEADERS or DATA that end the request.
            0x0 | 0x1 if flags & 0x1 != 0 => {
                let acts = requests.get(answered).copied().unwrap_or(&[Act::Serve]);
                answered += 1;
                for act in acts {
                    let bytes = match *act {
                        Act::Serve => {
                            let mut bytes = frame(0x1, 0x4, stream_id, &response_headers());
                            bytes.extend(frame(0x0, 0, stream_id, SERVING));
                            bytes.extend(frame(0x1, 0x5, stream_id, &hpack_literal("grpc-status", "0")));
                            bytes
                        }
                        Act::Refuse => frame(0x3, 0, stream_id, &7u32.to_be_bytes()),
                        Act::GoAway(last, debug) => {
                            let mut payload = last.to_be_bytes().to_vec();
                            payload.extend(0u32.to_be_bytes());
                            payload.extend(debug);
                            frame(0x7, 0, 0, &payload)
                        }
                        Act::Headers => frame(0x1, 0x4, stream_id, &response_headers()),
                        Act::PartialFrame => vec![0, 0, 7, 0],
                        Act::CloseWrite => {
                            let _ = stream.shutdown().await;
                            continue;
                        }
                        Act::Sleep(pause) => {
                            tokio::time::sleep(pause).await;
                            continue;
                        }
                    };
                    let _ = stream.write_all(&bytes).await;
                }
            }
            _ => {}
        }
    }
}

/// An HTTP/2 frame.
fn frame(kind: u8, flags: u8, stream_id: u32, payload: &[u8]) -> Vec<u8> {
    let len = u32::try_from(payload.len()).expect("a small payload").to_be_bytes();
    let mut bytes = vec![len[1], len[2], len[3], kind, flags];
    bytes.extend(stream_id.to_be_bytes());
    bytes.extend(payload);
    bytes
}

/// `:status: 200` (the static table's entry 8) and gRPC's content type.
fn response_headers() -> Vec<u8> {
    let mut block = vec![0x88];
    block.extend(hpack_literal("content-type", "application/grpc"));
    block
}

/// An HPACK literal header field without indexing, with a new name, neither string Huffman-coded.
fn hpack_literal(name: &str, value: &str) -> Vec<u8> {
    let mut field = vec![0x00];
    for text in [name, value] {
        field.push(u8::try_from(text.len()).expect("a short string"));
        field.extend(text.as_bytes());
    }
    field
}

/// grpc-go takes any SETTINGS frame first as the server's preface (`readServerPreface`), an
/// acknowledgement of its own SETTINGS included: the connection is READY and the call goes on,
/// whether the server's own SETTINGS follows or not. The probe took an acknowledgement first
/// for a server that is not HTTP/2, and dialled again until its deadline.
#[tokio::test]
async fn a_settings_acknowledgement_first_is_a_server_preface() {
    bounded(async {
        for opening in [Opening::AckFirst, Opening::AckOnly] {
            let (port, accepted) = raw_h2_opening(opening, &[], 10).await;
            let got = probe("127.0.0.1", port, "", LONG).await;
            assert_eq!(got, Probed::new(ProbeOutcome::Success, "service healthy"), "{opening:?}");
            assert_eq!(accepted.load(std::sync::atomic::Ordering::SeqCst), 1, "{opening:?}");
        }
    })
    .await;
}

/// grpc-go retries a call the server never processed once, transparently (its first attempt
/// only): after a GOAWAY that leaves the call's stream out, on a new connection; after
/// REFUSED_STREAM, on the same one unless a GOAWAY came first (its transport then takes no new
/// stream, and a new connection carries the retry). A second refusal fails as grpc-go words it.
#[tokio::test]
async fn calls_the_server_did_not_process_are_retried_once() {
    bounded(async {
        let serving = || Probed::new(ProbeOutcome::Success, "service healthy");
        let cases: Vec<(&str, Script, Probed, usize)> = vec![
            ("a GOAWAY leaving the first stream out", &[&[&[Act::GoAway(0, b"")]]], serving(), 2),
            ("REFUSED_STREAM, then SERVING on the same connection", &[&[&[Act::Refuse]]], serving(), 1),
            (
                "REFUSED_STREAM after a GOAWAY that kept the stream: the connection is draining",
                &[&[&[Act::GoAway(1, b""), Act::Refuse]]],
                serving(),
                2,
            ),
            (
                "REFUSED_STREAM twice",
                &[&[&[Act::Refuse], &[Act::Refuse]]],
                failure(
                    "error: health rpc probe failed: rpc error: code = Unavailable desc = \
                     stream terminated by RST_STREAM with error code: REFUSED_STREAM",
                ),
                1,
            ),
            (
                "a GOAWAY on both connections",
                &[&[&[Act::GoAway(0, b"")]], &[&[Act::GoAway(0, b"")]]],
                failure(
                    "error: health rpc probe failed: rpc error: code = Unavailable desc = \
                     the stream is rejected because server is draining the connection",
                ),
                2,
            ),
            (
                "REFUSED_STREAM, then a GOAWAY: the one retry is spent",
                &[&[&[Act::Refuse], &[Act::GoAway(1, b"")]]],
                failure(
                    "error: health rpc probe failed: rpc error: code = Unavailable desc = \
                     the stream is rejected because server is draining the connection",
                ),
                1,
            ),
        ];
        for (case, script, want, connections) in cases {
            let (port, accepted) = raw_h2(script, 10).await;
            let got = probe("127.0.0.1", port, "", LONG).await;
            assert_eq!(got, want, "{case}");
            assert_eq!(accepted.load(std::sync::atomic::Ordering::SeqCst), connections, "{case}");
        }
    })
    .await;
}

/// The new connection of a retried call is one dial: refused, the call fails Unavailable with
/// the connection error, as grpc-go's pick_first reports it to a call that does not wait for
/// ready.
#[tokio::test]
async fn retry_whose_new_connection_is_refused_fails_with_the_dial_error() {
    bounded(async {
        let (port, _) = raw_h2(&[&[&[Act::GoAway(0, b"")]]], 1).await;
        let got = probe("127.0.0.1", port, "", LONG).await;
        let want = format!(
            "error: health rpc probe failed: rpc error: code = Unavailable desc = connection error: desc = \
             \"transport: Error while dialing: dial tcp 127.0.0.1:{port}: connect: connection refused\""
        );
        assert_eq!(got, failure(want));
    })
    .await;
}

/// The retry shares the probe's one deadline: a GOAWAY after 300 ms of a 500 ms probe leaves
/// the call on the new connection 200 ms, not a timeout of its own.
#[tokio::test]
async fn retry_shares_the_probes_deadline() {
    bounded(async {
        const SCRIPT: Script = &[&[&[Act::Sleep(Duration::from_millis(300)), Act::GoAway(0, b"")]], &[&[]]];
        let (port, accepted) = raw_h2(SCRIPT, 10).await;
        let started = Instant::now();
        let got = probe("127.0.0.1", port, "", Duration::from_millis(500)).await;
        let took = started.elapsed();
        assert_eq!(got, failure("timeout: health rpc did not complete within 500ms"));
        assert_eq!(accepted.load(std::sync::atomic::Ordering::SeqCst), 2, "the call was retried");
        assert!(took >= Duration::from_millis(500) && took < Duration::from_millis(750), "took {took:?}");
    })
    .await;
}

/// A connection that closes in the middle of the call: grpc-go's reader ends with `error
/// reading from server: <the framer's error>` (Unavailable); after a GOAWAY that kept the call's
/// stream, the transport's closing words name that GOAWAY.
#[tokio::test]
async fn connection_closed_mid_call_is_worded_as_grpc_go_words_it() {
    bounded(async {
        const PREFIX: &str = "error: health rpc probe failed: rpc error: code = Unavailable desc = ";
        let cases: [(&str, Script, String); 5] = [
            (
                "closed after the answer's headers",
                &[&[&[Act::Headers, Act::CloseWrite]]],
                format!("{PREFIX}error reading from server: EOF"),
            ),
            (
                "closed before any answer",
                &[&[&[Act::CloseWrite]]],
                format!("{PREFIX}error reading from server: EOF"),
            ),
            (
                "closed in the middle of a frame header",
                &[&[&[Act::Headers, Act::PartialFrame, Act::CloseWrite]]],
                format!("{PREFIX}error reading from server: unexpected EOF"),
            ),
            (
                "closed after a GOAWAY that kept the stream",
                &[&[&[Act::GoAway(1, b""), Act::Headers, Act::CloseWrite]]],
                format!(
                    "{PREFIX}closing transport due to: connection error: desc = \
                     \"error reading from server: EOF\", received prior goaway: code: NO_ERROR"
                ),
            ),
            (
                "closed after a GOAWAY with debug data",
                &[&[&[Act::GoAway(1, b"bye \"now\"\xff"), Act::CloseWrite]]],
                format!(
                    "{PREFIX}closing transport due to: connection error: desc = \
                     \"error reading from server: EOF\", received prior goaway: code: NO_ERROR, \
                     debug data: \"bye \\\"now\\\"\\xff\""
                ),
            ),
        ];
        for (case, script, want) in cases {
            let (port, _) = raw_h2(script, 10).await;
            let got = probe("127.0.0.1", port, "", LONG).await;
            assert_eq!(got, failure(want), "{case}");
        }
    })
    .await;
}
