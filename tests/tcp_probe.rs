//! TCP socket probes (docs/prober.md §4.7) against listeners on 127.0.0.1: open, closed, and one
//! whose accept queue is full, plus the linger-0 close the probe dialer chose
//! (`docs/tcp-linger.md`).

use std::future::Future;
use std::time::Duration;

use probelet::prober::tcp::probe;
use probelet::prober::{ProbeOutcome, Probed};
use tokio::io::AsyncReadExt;
use tokio::net::{TcpListener, TcpSocket, TcpStream};

/// A timeout the probe is meant to hit.
const SHORT: Duration = Duration::from_millis(200);
/// A timeout the probe is not meant to hit.
const LONG: Duration = Duration::from_secs(5);

/// Bounds a test's wall time.
async fn bounded<T>(fut: impl Future<Output = T>) -> T {
    tokio::time::timeout(Duration::from_secs(10), fut).await.expect("test took too long")
}

#[tokio::test]
async fn listening_port_succeeds_with_empty_output() {
    bounded(async {
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let port = listener.local_addr().expect("addr").port();
        assert_eq!(probe("127.0.0.1", port, LONG).await, Probed::new(ProbeOutcome::Success, ""));
    })
    .await;
}

#[tokio::test]
async fn closed_port_fails_with_go_dial_error() {
    bounded(async {
        let port = {
            let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
            listener.local_addr().expect("addr").port()
        };
        let want = format!("dial tcp 127.0.0.1:{port}: connect: connection refused");
        assert_eq!(probe("127.0.0.1", port, LONG).await, Probed::new(ProbeOutcome::Failure, want));
    })
    .await;
}

/// Go's resolver fails a name that is not a DNS name at once; the system resolver would read
/// `127.1` as 127.0.0.1 and connect.
#[tokio::test]
async fn a_host_that_is_no_dns_name_is_not_found() {
    bounded(async {
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let port = listener.local_addr().expect("addr").port();
        for host in ["127.1", "0x7f.1", "a!b"] {
            let want = format!("dial tcp: lookup {host}: no such host");
            assert_eq!(probe(host, port, LONG).await, Probed::new(ProbeOutcome::Failure, want));
        }
    })
    .await;
}

/// With a backlog of 0 Linux queues one connection; once the queue is full further SYNs are
/// dropped, so a connect hangs until the probe's timeout.
#[tokio::test]
async fn full_accept_queue_times_out_with_go_text() {
    bounded(async {
        let socket = TcpSocket::new_v4().expect("socket");
        socket.bind("127.0.0.1:0".parse().expect("addr")).expect("bind");
        let listener = socket.listen(0).expect("listen");
        let addr = listener.local_addr().expect("addr");
        // Fill the queue: connect until one attempt hangs (it is the first unqueued one).
        let mut fillers: Vec<TcpStream> = Vec::new();
        let mut full = false;
        for _ in 0..8 {
            match tokio::time::timeout(SHORT, TcpStream::connect(addr)).await {
                Ok(stream) => fillers.push(stream.expect("filler connect")),
                Err(_) => {
                    full = true;
                    break;
                }
            }
        }
        assert!(full, "accept queue never filled after {} connections", fillers.len());

        let started = tokio::time::Instant::now();
        let got = probe("127.0.0.1", addr.port(), SHORT).await;
        let want = format!("dial tcp 127.0.0.1:{}: i/o timeout", addr.port());
        assert_eq!(got, Probed::new(ProbeOutcome::Failure, want));
        assert!(started.elapsed() >= SHORT, "gave up after {:?}", started.elapsed());
        drop(listener);
    })
    .await;
}

/// The dialer sets linger 0, so the probe's close is an RST: the server reads a reset, not EOF,
/// and the prober keeps no TIME_WAIT socket.
#[tokio::test]
async fn probe_closes_with_reset() {
    bounded(async {
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let port = listener.local_addr().expect("addr").port();
        assert_eq!(probe("127.0.0.1", port, LONG).await.outcome, ProbeOutcome::Success);
        let (mut accepted, _) = listener.accept().await.expect("accept");
        let mut buf = [0u8; 1];
        let read = accepted.read(&mut buf).await;
        let err = read.expect_err("an RST, not EOF");
        assert_eq!(err.kind(), std::io::ErrorKind::ConnectionReset, "{err}");
    })
    .await;
}

/// Go's dialer treats a zero timeout as none.
#[tokio::test]
async fn zero_timeout_means_no_timeout() {
    bounded(async {
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let port = listener.local_addr().expect("addr").port();
        assert_eq!(probe("127.0.0.1", port, Duration::ZERO).await, Probed::new(ProbeOutcome::Success, ""));
    })
    .await;
}
