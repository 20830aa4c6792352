//! TCP socket probes (upstream `pkg/probe/tcp`) and the probe dialer the gRPC probe shares
//! (upstream `probe.ProbeDialer`).
//!
//! A TCP probe succeeds when a connection to `host:port` is established within the timeout; the
//! connection is closed at once. Failures carry Go's `net.OpError` text
//! (`dial tcp 10.0.0.1:80: connect: connection refused`, `dial tcp 10.0.0.1:80: i/o timeout`).
//!
//! Upstream's dialer sets `SO_LINGER` to 1 s hoping to skip TIME_WAIT; measured on Linux it does
//! not (the close is a normal FIN handshake) and it makes `close()` block. This dialer sets linger
//! 0 instead: the close is an RST and leaves no TIME_WAIT. The figures are in
//! `docs/tcp-linger.md`.
//!
//! A host *name* is resolved on a thread of its own, one lookup per name in flight shared by
//! every probe asking for it meanwhile, as Go's resolver shares one (the `lookup` module;
//! docs/http-probe.md, "Lookups").

use std::io;
use std::net::{IpAddr, Ipv6Addr, SocketAddr};
use std::time::Duration;

use tokio::net::{TcpSocket, TcpStream};
use tokio::time::{Instant, timeout_at};

use self::lookup::resolve;
use super::{ProbeOutcome, Probed};

mod lookup;

/// Where a dial to an empty host goes: Go dials "the local system" for `":80"`.
pub(crate) const LOCAL_SYSTEM_HOST: &str = "127.0.0.1";

/// Probes `host:port` by connecting within `timeout` and closing at once. A zero timeout means
/// none, as for Go's `net.Dialer` (the API server defaults `timeoutSeconds` to 1, so it does not
/// arise from a pod spec); the kernel's own connect timeout still ends the dial.
pub async fn probe(host: &str, port: u16, timeout: Duration) -> Probed {
    // A TCP probe writes nothing, so TCP_NODELAY would only cost a system call.
    probed(dial_with(host, port, probe_deadline(timeout), false).await)
}

/// [`probe`] of an address already parsed (a pod IP): the same dial, without parsing.
pub async fn probe_addr(addr: SocketAddr, timeout: Duration) -> Probed {
    probed(attempt(addr, false, probe_deadline(timeout), false).await)
}

/// A probe's deadline: `timeout` from now, or none for a zero timeout.
fn probe_deadline(timeout: Duration) -> Instant {
    deadline_after(if timeout.is_zero() { Duration::MAX } else { timeout })
}

/// What a probe's dial says.
fn probed(dialled: Result<TcpStream, DialError>) -> Probed {
    match dialled {
        // Dropping the stream closes it; with linger 0 that cannot fail or block.
        Ok(_stream) => Probed::new(ProbeOutcome::Success, ""),
        Err(e) => {
            tracing::debug!(error = %e, "TCP probe failed");
            Probed::new(ProbeOutcome::Failure, e.to_string())
        }
    }
}

/// A failed dial, displayed as Go's `net.OpError` for a `tcp` dial.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum DialError {
    /// The host name could not be resolved (or resolving hit the deadline: reason `i/o timeout`).
    #[error("dial tcp: lookup {host}: {reason}")]
    Lookup {
        /// The host name as the probe gave it.
        host: String,
        /// Why the lookup failed, as Go words it (`no such host`, `i/o timeout`, …).
        reason: String,
    },
    /// A socket call failed (`op` is `connect` or `socket`).
    #[error("dial tcp {addr}: {op}: {reason}")]
    Op {
        /// The address dialled as Go shows it: `ip:port`, `[ip]:port` for IPv6, `:port` for an
        /// empty host.
        addr: String,
        /// The socket call that failed: `connect` or `socket`.
        op: &'static str,
        /// The OS error as Go prints it (`connection refused`, …).
        reason: String,
    },
    /// The deadline passed while connecting.
    #[error("dial tcp {addr}: i/o timeout")]
    Timeout {
        /// The address being dialled when the deadline passed, shown as in `Op`.
        addr: String,
    },
    /// No address to dial (Go's `errMissingAddress`).
    #[error("dial tcp: missing address")]
    MissingAddress,
}

/// Connects to `host:port` before `deadline` the way upstream's probe dialer does, with linger 0.
///
/// An empty host means the local system, as in Go (`":80"`). A name resolving to several
/// addresses is dialled as Go's dialer does it (docs/prober.md §4.7); pod IPs are literals, so
/// this matters only for a probe's `host`.
pub async fn dial(host: &str, port: u16, deadline: Instant) -> Result<TcpStream, DialError> {
    // Go's dialer sets TCP_NODELAY on every TCP connection. Without it a gRPC probe's small
    // writes wait for the peer's delayed ACK (about 40 ms each).
    dial_with(host, port, deadline, true).await
}

/// [`dial`], setting TCP_NODELAY only when `nodelay`.
async fn dial_with(host: &str, port: u16, deadline: Instant, nodelay: bool) -> Result<TcpStream, DialError> {
    let lookup_host = if host.is_empty() { LOCAL_SYSTEM_HOST } else { host };
    // An IP address (a pod IP) needs no resolver: dial it without building an address list.
    if let Ok(ip) = lookup_host.parse::<IpAddr>() {
        return attempt(SocketAddr::new(ip, port), host.is_empty(), deadline, nodelay).await;
    }
    // Go's resolver answers a name that is not a DNS name without asking anyone. The system
    // resolver would read `127.1`, `1234` or `0x7f.1` as IPv4 addresses and could query `a!b`;
    // Go looks up `0x7f.1` as a name, which no DNS has.
    if (!is_domain_name(lookup_host) && !is_scoped_ipv6(lookup_host)) || is_inet_aton_address(lookup_host) {
        return Err(DialError::Lookup { host: host.to_owned(), reason: "no such host".to_owned() });
    }
    let addrs: Vec<SocketAddr> = match timeout_at(deadline, resolve(lookup_host, port)).await {
        Err(_) => return Err(DialError::Lookup { host: host.to_owned(), reason: "i/o timeout".to_owned() }),
        Ok(Err(reason)) => return Err(DialError::Lookup { host: host.to_owned(), reason }),
        Ok(Ok(addrs)) => addrs,
    };
    if addrs.is_empty() {
        return Err(DialError::Lookup { host: host.to_owned(), reason: "no such host".to_owned() });
    }
    // Boxed: a host name is rare, and its dial's state would otherwise sit in every probe's
    // future (docs/memory.md, "The burst of first probes").
    Box::pin(dial_addrs(&addrs, deadline, nodelay)).await
}

/// How long Go's dialer gives the first address family before it dials the other one too
/// (`net.Dialer.FallbackDelay`'s default).
const FALLBACK_DELAY: Duration = Duration::from_millis(300);

/// The least time Go's dialer gives one address of several, while the deadline allows
/// (`saneMinimum` in `net.partialDeadline`).
const MIN_ATTEMPT: Duration = Duration::from_secs(2);

/// Dials the addresses a name resolved to, in the resolver's order, as Go's `net.Dialer` does
/// for `tcp` ("Happy Eyeballs"): the addresses of the first one's family are the primaries, the
/// others the fallbacks ([`by_family`]), raced by [`dial_parallel`].
async fn dial_addrs(addrs: &[SocketAddr], deadline: Instant, nodelay: bool) -> Result<TcpStream, DialError> {
    let (primaries, fallbacks) = by_family(addrs);
    dial_parallel(&primaries, &fallbacks, deadline, nodelay).await
}

/// Go's `addrList.partition(isIPv4)`: the first address and those of its family, then the rest.
fn by_family(addrs: &[SocketAddr]) -> (Vec<SocketAddr>, Vec<SocketAddr>) {
    let first_is_v4 = addrs.first().is_some_and(SocketAddr::is_ipv4);
    addrs.iter().partition(|a| a.is_ipv4() == first_is_v4)
}

/// Go's `dialParallel`: the fallbacks are dialled too once the primaries have had
/// [`FALLBACK_DELAY`], or at once when they have all failed; the first connection made wins,
/// and when both fail the primaries' error is the answer. Each list is dialled by
/// [`dial_serial`].
async fn dial_parallel(
    primaries: &[SocketAddr],
    fallbacks: &[SocketAddr],
    deadline: Instant,
    nodelay: bool,
) -> Result<TcpStream, DialError> {
    if fallbacks.is_empty() {
        return dial_serial(primaries, deadline, nodelay).await;
    }
    let (primary_failed, start_fallbacks) = tokio::sync::oneshot::channel::<()>();
    let primary = std::pin::pin!(async {
        let dialled = dial_serial(primaries, deadline, nodelay).await;
        if dialled.is_err() {
            let _ = primary_failed.send(());
        }
        dialled
    });
    let fallback = std::pin::pin!(async {
        tokio::select! {
            () = tokio::time::sleep(FALLBACK_DELAY) => {}
            _ = start_fallbacks => {}
        }
        dial_serial(fallbacks, deadline, nodelay).await
    });
    match futures::future::select(primary, fallback).await {
        futures::future::Either::Left((Ok(stream), _)) | futures::future::Either::Right((Ok(stream), _)) => {
            Ok(stream)
        }
        futures::future::Either::Left((Err(primary_error), fallback)) => {
            fallback.await.map_err(|_| primary_error)
        }
        futures::future::Either::Right((Err(_), primary)) => primary.await,
    }
}

/// Go's `dialSerial`: each address in turn, each with its share of what is left of the
/// deadline ([`partial_deadline`]), so that one that never answers leaves time for the next.
/// The answer is the first connection made, or else the first address's error; when the
/// deadline has passed before an address is tried, that address's `i/o timeout`.
async fn dial_serial(addrs: &[SocketAddr], deadline: Instant, nodelay: bool) -> Result<TcpStream, DialError> {
    let mut first_error = None;
    for (i, &addr) in addrs.iter().enumerate() {
        let Some(partial) = partial_deadline(Instant::now(), deadline, addrs.len() - i) else {
            return Err(DialError::Timeout { addr: addr.to_string() });
        };
        match attempt(addr, false, partial, nodelay).await {
            Ok(stream) => return Ok(stream),
            Err(failed) => {
                first_error.get_or_insert(failed);
            }
        }
    }
    Err(first_error.unwrap_or(DialError::MissingAddress))
}

/// Go's `partialDeadline`: the deadline for one of `remaining` addresses still to try, an equal
/// share of the time left but at least [`MIN_ATTEMPT`] (or all that is left, when less);
/// `None` when the deadline has passed.
fn partial_deadline(now: Instant, deadline: Instant, remaining: usize) -> Option<Instant> {
    let left = deadline.saturating_duration_since(now);
    if left.is_zero() {
        return None;
    }
    let share = left / u32::try_from(remaining.max(1)).unwrap_or(u32::MAX);
    let share = if share < MIN_ATTEMPT { left.min(MIN_ATTEMPT) } else { share };
    Some(now + share)
}

/// One connection attempt to `addr` before `deadline`; `empty_host` when the probe named no
/// host (the local system).
async fn attempt(
    addr: SocketAddr,
    empty_host: bool,
    deadline: Instant,
    nodelay: bool,
) -> Result<TcpStream, DialError> {
    // Go shows the address it dialled; for an empty host that is the bare `:port`.
    let shown = || if empty_host { format!(":{}", addr.port()) } else { addr.to_string() };
    match timeout_at(deadline, connect(addr, nodelay)).await {
        Err(_) => Err(DialError::Timeout { addr: shown() }),
        Ok(Ok(stream)) => Ok(stream),
        Ok(Err((op, e))) => Err(DialError::Op { addr: shown(), op, reason: errno_text(&e) }),
    }
}

/// One connection attempt; the error names the failing socket call as Go's `SyscallError` does.
async fn connect(addr: SocketAddr, nodelay: bool) -> Result<TcpStream, (&'static str, io::Error)> {
    let socket = if addr.is_ipv4() { TcpSocket::new_v4() } else { TcpSocket::new_v6() };
    let socket = socket.map_err(|e| ("socket", e))?;
    // RST on close: no TIME_WAIT left behind, and unlike linger 1 s the close never blocks.
    socket.set_zero_linger().map_err(|e| ("setsockopt", e))?;
    if nodelay {
        socket.set_nodelay(true).map_err(|e| ("setsockopt", e))?;
    }
    socket.connect(addr).await.map_err(|e| ("connect", e))
}

/// Go's `isDomainName` (`net/dnsclient.go`): letters, digits, `_` and `-` in labels of 1–63
/// bytes, at most 253 bytes (254 with a final dot), not all digits, no label starting or ending
/// with `-`.
fn is_domain_name(name: &str) -> bool {
    if name == "." {
        return true;
    }
    let bytes = name.as_bytes();
    let len = bytes.len();
    if len == 0 || len > 254 || (len == 254 && bytes[len - 1] != b'.') {
        return false;
    }
    let mut last = b'.';
    let mut non_numeric = false;
    let mut label_len = 0;
    for &c in bytes {
        match c {
            b'a'..=b'z' | b'A'..=b'Z' | b'_' => {
                non_numeric = true;
                label_len += 1;
            }
            b'0'..=b'9' => label_len += 1,
            b'-' => {
                if last == b'.' {
                    return false;
                }
                non_numeric = true;
                label_len += 1;
            }
            b'.' => {
                if last == b'.' || last == b'-' || label_len == 0 || label_len > 63 {
                    return false;
                }
                label_len = 0;
            }
            _ => return false,
        }
        last = c;
    }
    last != b'-' && label_len <= 63 && non_numeric
}

/// Whether [`dial`] would try to reach `host` (an IP address or a DNS name), rather than fail
/// its lookup at once.
#[cfg(test)]
pub(crate) fn is_dialable(host: &str) -> bool {
    host.is_empty()
        || host.parse::<IpAddr>().is_ok()
        || (is_domain_name(host) && !is_inet_aton_address(host))
        || is_scoped_ipv6(host)
}

/// A name C's `inet_aton` reads as an IPv4 address (`0x7f.1`, `0177.0.0.1`): one to four
/// parts, each decimal, octal or `0x` hex. The system resolver connects to such an address
/// without a lookup.
fn is_inet_aton_address(name: &str) -> bool {
    let name = name.strip_suffix('.').unwrap_or(name);
    let parts = name.split('.').count();
    (1..=4).contains(&parts)
        && name.split('.').all(|part| match part.strip_prefix("0x").or_else(|| part.strip_prefix("0X")) {
            Some(hex) => hex.bytes().all(|b| b.is_ascii_hexdigit()),
            None => !part.is_empty() && part.bytes().all(|b| b.is_ascii_digit()),
        })
}

/// An IPv6 literal with a zone (`fe80::1%eth0`), which Go dials without a lookup.
fn is_scoped_ipv6(host: &str) -> bool {
    host.split_once('%').is_some_and(|(ip, zone)| !zone.is_empty() && ip.parse::<Ipv6Addr>().is_ok())
}

/// Go's `net.JoinHostPort`: brackets a host that contains a colon (an IPv6 address).
pub fn join_host_port(host: &str, port: u16) -> String {
    if host.contains(':') { format!("[{host}]:{port}") } else { format!("{host}:{port}") }
}

/// `now + timeout`, saturating far in the future instead of overflowing on absurd timeouts.
pub fn deadline_after(timeout: Duration) -> Instant {
    let now = Instant::now();
    now.checked_add(timeout).unwrap_or_else(|| now + Duration::from_secs(100 * 365 * 24 * 3600))
}

/// An OS error as Go's errno text: Rust shows `Connection refused (os error 111)`, Go
/// `connection refused`.
fn errno_text(e: &io::Error) -> String {
    let text = e.to_string();
    let text = match e.raw_os_error() {
        Some(code) => text.strip_suffix(&format!(" (os error {code})")).unwrap_or(&text).to_owned(),
        None => text,
    };
    lower_first(&text)
}

/// A resolver error in Go's words where Go has them (`no such host`).
fn lookup_reason(e: &io::Error) -> String {
    let text = e.to_string();
    let text = text.strip_prefix("failed to lookup address information: ").unwrap_or(&text);
    if text.contains("not known") || text.contains("No address associated") {
        "no such host".to_owned()
    } else {
        lower_first(text)
    }
}

fn lower_first(s: &str) -> String {
    let mut chars = s.chars();
    match chars.next() {
        Some(c) => c.to_lowercase().chain(chars).collect(),
        None => String::new(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn dialled_connections_send_small_writes_at_once_like_go() {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = listener.local_addr().unwrap().port();
        let stream = dial("127.0.0.1", port, deadline_after(Duration::from_secs(5))).await.unwrap();
        assert!(stream.nodelay().unwrap(), "TCP_NODELAY, as Go's dialer sets it");
    }

    #[tokio::test]
    async fn a_literal_address_is_dialled_and_shown_as_go_shows_it() {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = listener.local_addr().unwrap().port();
        let deadline = deadline_after(Duration::from_secs(5));
        assert!(dial("127.0.0.1", port, deadline).await.is_ok());
        assert!(dial("", port, deadline).await.is_ok(), "an empty host is the local system");
        drop(listener);
        let refused = dial("127.0.0.1", port, deadline).await.unwrap_err();
        assert_eq!(refused.to_string(), format!("dial tcp 127.0.0.1:{port}: connect: connection refused"));
        let refused = dial("", port, deadline).await.unwrap_err();
        assert_eq!(refused.to_string(), format!("dial tcp :{port}: connect: connection refused"));
    }

    #[tokio::test]
    async fn a_parsed_address_is_probed_and_shown_as_the_text_would_be() {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let timeout = Duration::from_secs(5);
        assert_eq!(probe_addr(addr, timeout).await, probe("127.0.0.1", addr.port(), timeout).await);
        assert_eq!(probe_addr(addr, timeout).await.outcome, ProbeOutcome::Success);
        drop(listener);
        let refused = probe_addr(addr, timeout).await;
        assert_eq!(refused, probe("127.0.0.1", addr.port(), timeout).await);
        assert_eq!(
            refused.output,
            format!("dial tcp 127.0.0.1:{}: connect: connection refused", addr.port())
        );
        let v6 = SocketAddr::new(IpAddr::V6(Ipv6Addr::LOCALHOST), addr.port());
        let shown = probe_addr(v6, timeout).await.output;
        assert!(shown.starts_with(&format!("dial tcp [::1]:{}: ", addr.port())), "{shown}");
    }

    #[tokio::test]
    async fn a_tcp_probe_connection_skips_nodelay_since_it_writes_nothing() {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = listener.local_addr().unwrap().port();
        let deadline = deadline_after(Duration::from_secs(5));
        let stream = dial_with("127.0.0.1", port, deadline, false).await.unwrap();
        assert!(!stream.nodelay().unwrap());
    }

    /// An address on loopback that never answers a SYN: a listener with a backlog of 0 whose
    /// one queued connection is never accepted drops every further SYN. Keep the listener and
    /// the queued connection alive while the address is used.
    async fn silent_address() -> (SocketAddr, tokio::net::TcpListener, TcpStream) {
        let socket = TcpSocket::new_v4().unwrap();
        socket.bind(SocketAddr::from(([127, 0, 0, 1], 0))).unwrap();
        let addr = socket.local_addr().unwrap();
        let listener = socket.listen(0).unwrap();
        let queued = TcpStream::connect(addr).await.unwrap();
        (addr, listener, queued)
    }

    #[tokio::test]
    async fn the_fallbacks_are_dialled_while_the_primaries_do_not_answer() {
        let (silent, _listener, _queued) = silent_address().await;
        let open = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let open = open.local_addr().unwrap();
        // Go gives the primaries 300 ms, then dials the fallbacks too: the probe succeeds
        // within its 1 s, where dialling the silent address alone would time out.
        let deadline = deadline_after(Duration::from_secs(1));
        let stream =
            dial_parallel(&[silent], &[open], deadline, false).await.expect("connected to the fallback");
        assert_eq!(stream.peer_addr().unwrap(), open);
    }

    #[test]
    fn the_primaries_are_the_first_address_and_its_family() {
        let a = |text: &str| text.parse::<SocketAddr>().unwrap();
        let (v4, v4b, v6, v6b) = (a("10.0.0.1:80"), a("10.0.0.2:80"), a("[fd00::1]:80"), a("[fd00::2]:80"));
        assert_eq!(by_family(&[v6, v4, v6b, v4b]), (vec![v6, v6b], vec![v4, v4b]));
        assert_eq!(by_family(&[v4, v6, v4b]), (vec![v4, v4b], vec![v6]));
        assert_eq!(by_family(&[v4, v4b]), (vec![v4, v4b], vec![]));
        assert_eq!(by_family(&[]), (vec![], vec![]));
    }

    #[tokio::test]
    async fn an_address_that_does_not_answer_leaves_time_for_the_next() {
        let (silent, _listener, _queued) = silent_address().await;
        let open = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let open = open.local_addr().unwrap();
        // Two addresses and 3 s: the first gets 2 s (half, but at least 2 s), the second the
        // rest. Waiting the whole 3 s on the first would fail the probe.
        let deadline = deadline_after(Duration::from_secs(3));
        let stream = dial_addrs(&[silent, open], deadline, false).await.expect("connected to the second");
        assert_eq!(stream.peer_addr().unwrap(), open);
    }

    #[tokio::test]
    async fn the_first_error_is_the_answer_when_every_address_fails() {
        // An address nothing listens on (any more): connecting is refused.
        let refused = |at: &str| std::net::TcpListener::bind(at).unwrap().local_addr().unwrap();
        let (a, b) = (refused("127.0.0.1:0"), refused("127.0.0.1:0"));
        let deadline = deadline_after(Duration::from_secs(5));
        let error = dial_addrs(&[a, b], deadline, false).await.unwrap_err();
        assert_eq!(error.to_string(), format!("dial tcp {a}: connect: connection refused"));
        // Both the primaries and the fallbacks fail: the primaries' error.
        let error = dial_parallel(&[a], &[b], deadline, false).await.unwrap_err();
        assert_eq!(error.to_string(), format!("dial tcp {a}: connect: connection refused"));
        let error = dial_parallel(&[b], &[a], deadline, false).await.unwrap_err();
        assert_eq!(error.to_string(), format!("dial tcp {b}: connect: connection refused"));
        assert_eq!(
            dial_addrs(&[], deadline, false).await.unwrap_err().to_string(),
            "dial tcp: missing address"
        );
    }

    #[test]
    fn partial_deadline_shares_the_time_left_as_go_does() {
        let now = Instant::now();
        let at = |secs: f64| now + Duration::from_secs_f64(secs);
        // (time left, addresses remaining, share)
        let cases =
            [(10.0, 2, 5.0), (10.0, 4, 2.5), (10.0, 10, 2.0), (3.0, 2, 2.0), (1.0, 3, 1.0), (1.0, 1, 1.0)];
        for (left, remaining, share) in cases {
            assert_eq!(
                partial_deadline(now, at(left), remaining),
                Some(at(share)),
                "{left} s for {remaining}"
            );
        }
        assert_eq!(partial_deadline(now, now, 1), None, "no time left");
    }

    #[test]
    fn join_host_port_brackets_ipv6_only() {
        assert_eq!(join_host_port("10.0.0.1", 80), "10.0.0.1:80");
        assert_eq!(join_host_port("example.com", 443), "example.com:443");
        assert_eq!(join_host_port("::1", 8080), "[::1]:8080");
        assert_eq!(join_host_port("fe80::1%eth0", 1), "[fe80::1%eth0]:1");
        assert_eq!(join_host_port("", 32), ":32");
    }

    #[test]
    fn errno_text_is_go_style() {
        let e = io::Error::from_raw_os_error(111);
        assert_eq!(errno_text(&e), "connection refused");
        let e = io::Error::from_raw_os_error(113);
        assert_eq!(errno_text(&e), "no route to host");
        let e = io::Error::other("Something custom");
        assert_eq!(errno_text(&e), "something custom");
    }

    #[test]
    fn dial_error_texts_match_go() {
        let refused =
            DialError::Op { addr: "127.0.0.1:1".into(), op: "connect", reason: "connection refused".into() };
        assert_eq!(refused.to_string(), "dial tcp 127.0.0.1:1: connect: connection refused");
        let timeout = DialError::Timeout { addr: "[::1]:80".into() };
        assert_eq!(timeout.to_string(), "dial tcp [::1]:80: i/o timeout");
        let lookup = DialError::Lookup { host: "nope".into(), reason: "no such host".into() };
        assert_eq!(lookup.to_string(), "dial tcp: lookup nope: no such host");
    }

    #[test]
    fn lookup_reason_maps_unknown_names() {
        let e = io::Error::other("failed to lookup address information: Name or service not known");
        assert_eq!(lookup_reason(&e), "no such host");
        let e =
            io::Error::other("failed to lookup address information: Temporary failure in name resolution");
        assert_eq!(lookup_reason(&e), "temporary failure in name resolution");
    }

    #[test]
    fn domain_names_are_checked_as_go_checks_them() {
        for name in ["localhost", "a.b.c", "my-svc.ns.svc.cluster.local.", "_http._tcp.x", "a1", "x.", "."] {
            assert!(is_domain_name(name), "{name}");
        }
        let long_label = "a".repeat(64);
        let too_long = ["a"; 127].join(".") + "bc";
        for name in [
            "",
            "a!b",
            "a b",
            "127.1",
            "1234",
            "-a",
            "a-",
            "a-.b",
            "a..b",
            "a~b",
            "bücher.de",
            &long_label,
            &too_long,
        ] {
            assert!(!is_domain_name(name), "{name}");
        }
        assert!(is_domain_name(&"a".repeat(63)));
        assert!(is_scoped_ipv6("fe80::1%eth0"));
        for name in ["0x7f.1", "0X7F.0.0.1", "0x7f000001", "017700000001", "127.1."] {
            assert!(is_inet_aton_address(name), "{name}");
        }
        for name in ["0x7f.example", "a.1", "0xg.1", "1.2.3.4.5", "x", ""] {
            assert!(!is_inet_aton_address(name), "{name}");
        }
        assert!(!is_scoped_ipv6("fe80::1%") && !is_scoped_ipv6("a%b"));
    }

    #[tokio::test]
    async fn a_name_that_is_not_a_dns_name_is_not_found_without_a_lookup() {
        let deadline = deadline_after(Duration::from_secs(5));
        // `127.1` is 127.0.0.1 to the system resolver; Go does not read it as an address.
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = listener.local_addr().unwrap().port();
        for host in ["127.1", "a!b", "bücher.example", "2130706433"] {
            let error = dial(host, port, deadline).await.unwrap_err();
            assert_eq!(error.to_string(), format!("dial tcp: lookup {host}: no such host"));
        }
    }

    #[test]
    fn deadline_after_saturates() {
        let _ = deadline_after(Duration::MAX);
    }
}
