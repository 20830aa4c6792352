//! Measures how `SO_LINGER` on the probing side affects TIME_WAIT, for the choice recorded in
//! `docs/tcp-linger.md`.
//!
//! For each mode (no linger, linger 1 s as upstream's probe dialer, linger 0) it opens N
//! connections to its own listener on 127.0.0.1, closes each at once as a TCP probe does, and then
//! counts the sockets of that mode in TIME_WAIT by reading `/proc/net/tcp`. A fourth run uses
//! the probe itself (`tcp::probe`), to check the implemented choice. Each mode gets its own
//! listener so the counts do not mix. Loopback only; it stops by itself.
//!
//! Run: `cargo build --workspace --release --example linger && ./target/release/examples/linger 3000`

// A measurement of real sockets: it times them on the real clock.
#![allow(clippy::disallowed_methods)]

use std::collections::HashMap;
use std::io::Read;
use std::net::{Ipv4Addr, SocketAddr, TcpListener, TcpStream};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use probelet_actors::prober::{ProbeOutcome, tcp};
use socket2::{Domain, Protocol, Socket, Type};

/// Upper bound on connections per mode, so a typo cannot run for ever.
const MAX_CONNECTS: usize = 20_000;

#[derive(Debug, Clone, Copy)]
enum Mode {
    NoLinger,
    Linger1s,
    Linger0,
    /// The real probe: `probelet_actors::prober::tcp::probe` on a tokio runtime.
    TcpProbe,
}

impl Mode {
    fn linger(self) -> Option<Duration> {
        match self {
            Mode::NoLinger => None,
            Mode::Linger1s => Some(Duration::from_secs(1)),
            Mode::Linger0 | Mode::TcpProbe => Some(Duration::ZERO),
        }
    }

    fn name(self) -> &'static str {
        match self {
            Mode::NoLinger => "no SO_LINGER",
            Mode::Linger1s => "SO_LINGER on, 1 s",
            Mode::Linger0 => "SO_LINGER on, 0 s",
            Mode::TcpProbe => "tcp::probe",
        }
    }
}

/// What one mode produced.
struct Report {
    mode: Mode,
    port: u16,
    connects: usize,
    failed: usize,
    /// Connections the server's accept() returned, and how many of those read a reset.
    accepted: usize,
    reset: usize,
    /// Sockets of this mode by TCP state name, client side (remote port = listener port).
    client_states: HashMap<&'static str, usize>,
    /// Same for the accepted (server) side.
    server_states: HashMap<&'static str, usize>,
    /// Slowest single close() on the client side (not visible inside `tcp::probe`).
    max_close: Option<Duration>,
    elapsed: Duration,
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let connects = match std::env::args().nth(1) {
        Some(n) => n.parse::<usize>()?.min(MAX_CONNECTS),
        None => 3000,
    };
    println!("kernel: {}", std::fs::read_to_string("/proc/sys/kernel/osrelease")?.trim());
    println!("connects per mode: {connects}");
    for mode in [Mode::NoLinger, Mode::Linger1s, Mode::Linger0, Mode::TcpProbe] {
        let r = run(mode, connects)?;
        println!(
            "{:<18} port {:>5}: {} connects ({} failed) in {:?}, slowest close {}; \
             server accepted {} ({} read a reset)",
            r.mode.name(),
            r.port,
            r.connects,
            r.failed,
            r.elapsed,
            r.max_close.map_or("n/a".to_owned(), |d| format!("{d:?}")),
            r.accepted,
            r.reset
        );
        println!("    client side: {}", states(&r.client_states));
        println!("    server side: {}", states(&r.server_states));
    }
    Ok(())
}

fn states(m: &HashMap<&'static str, usize>) -> String {
    let mut v: Vec<_> = m.iter().map(|(k, n)| format!("{k}={n}")).collect();
    v.sort();
    if v.is_empty() { "none left".to_string() } else { v.join(" ") }
}

fn run(mode: Mode, connects: usize) -> Result<Report, Box<dyn std::error::Error>> {
    // A deep backlog so that a burst of connects is never dropped while the server is reading.
    let socket = Socket::new(Domain::IPV4, Type::STREAM, Some(Protocol::TCP))?;
    socket.bind(&SocketAddr::from((Ipv4Addr::LOCALHOST, 0)).into())?;
    socket.listen(4096)?;
    let listener: TcpListener = socket.into();
    let addr = listener.local_addr()?;
    // The server behaves like a typical service: accept, read to EOF (or reset), close. The
    // prober is therefore always the side that closes first. It polls so that it can stop once
    // the client is done: connections reset before accept() may never be returned by it.
    listener.set_nonblocking(true)?;
    let done = Arc::new(AtomicBool::new(false));
    let server = std::thread::spawn({
        let done = done.clone();
        move || {
            let (mut accepted, mut reset) = (0usize, 0usize);
            loop {
                match listener.accept() {
                    Ok((mut s, _)) => {
                        accepted += 1;
                        let _ = s.set_nonblocking(false);
                        let _ = s.set_read_timeout(Some(Duration::from_secs(2)));
                        let mut buf = [0u8; 64];
                        loop {
                            match s.read(&mut buf) {
                                Ok(n) if n > 0 => {}
                                Ok(_) => break,
                                Err(_) => {
                                    reset += 1;
                                    break;
                                }
                            }
                        }
                    }
                    Err(_) if done.load(Ordering::SeqCst) => break,
                    Err(_) => std::thread::sleep(Duration::from_micros(200)),
                }
            }
            (accepted, reset)
        }
    });

    let start = Instant::now();
    let mut failed = 0;
    let mut max_close = None;
    if let Mode::TcpProbe = mode {
        let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build()?;
        for _ in 0..connects {
            let probed = runtime.block_on(tcp::probe("127.0.0.1", addr.port(), Duration::from_secs(1)));
            if probed.outcome != ProbeOutcome::Success {
                failed += 1;
            }
        }
    } else {
        for _ in 0..connects {
            match connect(addr, mode.linger()) {
                Ok(stream) => {
                    let t = Instant::now();
                    drop(stream);
                    max_close = max_close.max(Some(t.elapsed()));
                }
                Err(_) => failed += 1,
            }
        }
    }
    let elapsed = start.elapsed();
    // Let the server drain what is still queued, then stop it.
    std::thread::sleep(Duration::from_millis(200));
    done.store(true, Ordering::SeqCst);
    let (accepted, reset) = server.join().unwrap_or_default();
    let (client_states, server_states) = count_states(addr.port())?;
    Ok(Report {
        mode,
        port: addr.port(),
        connects,
        failed,
        accepted,
        reset,
        client_states,
        server_states,
        max_close,
        elapsed,
    })
}

fn connect(addr: SocketAddr, linger: Option<Duration>) -> std::io::Result<TcpStream> {
    let socket = Socket::new(Domain::IPV4, Type::STREAM, Some(Protocol::TCP))?;
    if linger.is_some() {
        socket.set_linger(linger)?;
    }
    socket.connect_timeout(&addr.into(), Duration::from_secs(1))?;
    Ok(socket.into())
}

/// Sockets per TCP state name.
type StateCounts = HashMap<&'static str, usize>;

/// Counts IPv4 sockets by state whose local port (server side) or remote port (client side) is
/// `port`, from `/proc/net/tcp`.
fn count_states(port: u16) -> std::io::Result<(StateCounts, StateCounts)> {
    let table = std::fs::read_to_string("/proc/net/tcp")?;
    let (mut client, mut server) = (HashMap::new(), HashMap::new());
    for line in table.lines().skip(1) {
        let f: Vec<&str> = line.split_whitespace().collect();
        let (Some(local), Some(remote), Some(st)) = (f.get(1), f.get(2), f.get(3)) else { continue };
        let port_of = |a: &str| a.rsplit(':').next().and_then(|p| u16::from_str_radix(p, 16).ok());
        let state = state_name(st);
        if port_of(remote) == Some(port) {
            *client.entry(state).or_default() += 1;
        } else if port_of(local) == Some(port) && state != "LISTEN" {
            *server.entry(state).or_default() += 1;
        }
    }
    Ok((client, server))
}

fn state_name(hex: &str) -> &'static str {
    match hex {
        "01" => "ESTABLISHED",
        "02" => "SYN_SENT",
        "03" => "SYN_RECV",
        "04" => "FIN_WAIT1",
        "05" => "FIN_WAIT2",
        "06" => "TIME_WAIT",
        "07" => "CLOSE",
        "08" => "CLOSE_WAIT",
        "09" => "LAST_ACK",
        "0A" => "LISTEN",
        "0B" => "CLOSING",
        _ => "OTHER",
    }
}
