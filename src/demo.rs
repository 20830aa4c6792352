//! `probelet demo-target`: a scriptable probe target for the example pods and for trying probes
//! by hand. It has no upstream counterpart; it plays the part the Kubernetes e2e tests give to
//! `agnhost` (`netexec`, `liveness`, `grpc-health-checking`).
//!
//! Health is a pure function of the time since start ([`healthy_at`]): healthy after
//! `--start-after`, flipping every `--flip-every`, unhealthy for good from `--fail-after`. One
//! clock task wakes at each boundary (`next_transition`) and publishes the new health on a
//! `watch` channel; every endpoint follows it:
//! - HTTP: `/healthz`, `/readyz`, `/livez` and `/` answer 200 `ok` or 503 `unhealthy`;
//!   `/redirect` answers 302 to `/healthz`;
//! - TCP: the listener is open while healthy and closed (connections refused) while not;
//! - gRPC: `grpc.health.v1.Health` reports SERVING or NOT_SERVING for `""` and every
//!   `--grpc-service`;
//! - a health file exists exactly while healthy (the exec probe is `test -f FILE`).
//!
//! Servers bind only the addresses given; port 0 picks a free port, and [`DemoHandle`] reports
//! the bound addresses.

use std::io;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

use axum::Router;
use axum::extract::State;
use axum::http::{StatusCode, header};
use axum::response::IntoResponse;
use axum::routing::get;
use tokio::net::TcpListener;
use tokio::sync::watch;
use tokio::task::JoinSet;
use tokio::time::{Instant, sleep, sleep_until, timeout_at};
use tonic::transport::Server;
use tonic::transport::server::TcpIncoming;
use tonic::{Request, Response, Status};
use tonic_health::ServingStatus;
use tonic_health::pb::health_server::{Health, HealthServer};
use tonic_health::pb::{HealthCheckRequest, HealthCheckResponse};
use tonic_health::server::{HealthReporter, HealthService, WatchStream};

/// How long [`DemoHandle::shutdown`] lets servers finish in-flight requests. gRPC `Watch`
/// streams never finish on their own, so this is also the longest a shutdown takes.
const SHUTDOWN_GRACE: Duration = Duration::from_millis(500);

/// Back-off before retrying to reopen the TCP listener when its port is taken meanwhile.
const REBIND_BACKOFF: Duration = Duration::from_millis(200);

/// Back-off after a failed `accept` (e.g. out of file descriptors), so it does not spin.
const ACCEPT_BACKOFF: Duration = Duration::from_millis(50);

/// The `demo-target` command line.
#[derive(Debug, Clone, clap::Args)]
pub struct DemoArgs {
    /// Serve HTTP on this address (GET /healthz, /readyz, /livez, / — 200 "ok" while healthy, 503
    /// "unhealthy" otherwise; /redirect → 302 to /healthz)
    #[arg(long, env = "DEMO_HTTP")]
    pub http: Option<SocketAddr>,

    /// Accept TCP connections on this address while healthy (close the listener while
    /// unhealthy, reopen it when healthy again)
    #[arg(long, env = "DEMO_TCP")]
    pub tcp: Option<SocketAddr>,

    /// Serve grpc.health.v1 on this address: SERVING while healthy, NOT_SERVING otherwise
    /// (service "" and every --grpc-service name)
    #[arg(long, env = "DEMO_GRPC")]
    pub grpc: Option<SocketAddr>,

    /// A gRPC service name to report besides "" (repeatable)
    #[arg(long = "grpc-service", value_name = "NAME")]
    pub grpc_service: Vec<String>,

    /// Healthy for this long after start, then unhealthy for good (e.g. 30s)
    #[arg(long, value_name = "DURATION", value_parser = parse_duration)]
    pub fail_after: Option<Duration>,

    /// Flip between healthy and unhealthy every DURATION, counted from when the target first
    /// becomes healthy (0 = never)
    #[arg(long, value_name = "DURATION", value_parser = parse_duration)]
    pub flip_every: Option<Duration>,

    /// Unhealthy for this long after start (slow start), then healthy — for startup probes
    #[arg(long, value_name = "DURATION", value_parser = parse_duration)]
    pub start_after: Option<Duration>,

    /// Delay every HTTP and gRPC response by this long
    #[arg(long, value_name = "DURATION", value_parser = parse_duration)]
    pub delay: Option<Duration>,

    /// Exit with --exit-code this long after start
    #[arg(long, value_name = "DURATION", value_parser = parse_duration)]
    pub exit_after: Option<Duration>,

    /// The exit code for --exit-after
    #[arg(long, default_value_t = 1)]
    pub exit_code: i32,

    /// Create this file while healthy and remove it while unhealthy (`test -f FILE` is then the
    /// exec probe)
    #[arg(long, value_name = "FILE")]
    pub health_file: Option<PathBuf>,
}

impl Default for DemoArgs {
    /// No servers, always healthy, runs forever: the command line with no flags.
    fn default() -> Self {
        Self {
            http: None,
            tcp: None,
            grpc: None,
            grpc_service: Vec::new(),
            fail_after: None,
            flip_every: None,
            start_after: None,
            delay: None,
            exit_after: None,
            exit_code: 1,
            health_file: None,
        }
    }
}

/// Why the demo target could not start.
#[derive(Debug, thiserror::Error)]
pub enum DemoError {
    /// A listener could not be bound.
    #[error("cannot listen for {what} on {addr}: {source}")]
    Bind {
        /// `HTTP`, `TCP` or `gRPC`.
        what: &'static str,
        addr: SocketAddr,
        #[source]
        source: io::Error,
    },
    /// The health file could not be created or removed.
    #[error("cannot update the health file {}: {source}", path.display())]
    HealthFile {
        path: PathBuf,
        #[source]
        source: io::Error,
    },
    /// The SIGTERM/SIGINT handler could not be installed.
    #[error("cannot install the signal handler: {0}")]
    Signal(#[source] io::Error),
}

// === health as a function of time ===

/// Is the target healthy `elapsed` after start under these args?
///
/// Unhealthy before `--start-after`; from then on healthy, or alternating healthy/unhealthy
/// every `--flip-every` (starting healthy); unhealthy for good from `--fail-after`. All
/// intervals are half-open: at exactly `start_after` it is healthy, at exactly `fail_after` not.
pub fn healthy_at(args: &DemoArgs, elapsed: Duration) -> bool {
    let base = args.start_after.unwrap_or(Duration::ZERO);
    let Some(since_up) = elapsed.checked_sub(base) else {
        return false;
    };
    if args.fail_after.is_some_and(|fail| elapsed >= fail) {
        return false;
    }
    match flip_period(args) {
        Some(period) => (since_up.as_nanos() / period.as_nanos()).is_multiple_of(2),
        None => true,
    }
}

/// The first instant after `elapsed` at which [`healthy_at`] may change, or `None` when it
/// never changes again. A boundary may turn out not to change anything (a flip that lands
/// after `--fail-after`); the clock then just sleeps again.
fn next_transition(args: &DemoArgs, elapsed: Duration) -> Option<Duration> {
    if args.fail_after.is_some_and(|fail| elapsed >= fail) {
        return None;
    }
    let base = args.start_after.unwrap_or(Duration::ZERO);
    let flip = flip_period(args).and_then(|period| {
        let since_up = elapsed.checked_sub(base)?;
        let next = (since_up.as_nanos() / period.as_nanos() + 1).checked_mul(period.as_nanos())?;
        let next = base.checked_add(Duration::from_nanos(u64::try_from(next).ok()?))?;
        Some(next)
    });
    [args.start_after, args.fail_after, flip].into_iter().flatten().filter(|&at| at > elapsed).min()
}

/// `--flip-every`, unless absent or zero (zero means no flipping rather than a division by it).
fn flip_period(args: &DemoArgs) -> Option<Duration> {
    args.flip_every.filter(|period| !period.is_zero())
}

// === durations ===

/// Parses a duration the way Go's `time.ParseDuration` does (`500ms`, `30s`, `2m`, `1h30m`,
/// `1.5s`; units `ns`, `us`/`µs`, `ms`, `s`, `m`, `h`; a bare `0`), except that negative
/// durations are rejected. Errors use Go's texts.
pub fn parse_duration(s: &str) -> Result<Duration, String> {
    let invalid = || format!("time: invalid duration {s:?}");
    let (negative, mut rest) = match s.as_bytes().first() {
        Some(b'-') => (true, &s[1..]),
        Some(b'+') => (false, &s[1..]),
        _ => (false, s),
    };
    if rest == "0" {
        return Ok(Duration::ZERO);
    }
    if rest.is_empty() {
        return Err(invalid());
    }
    let mut total: u128 = 0;
    while !rest.is_empty() {
        let int_len = rest.bytes().take_while(u8::is_ascii_digit).count();
        let (int_digits, after_int) = rest.split_at(int_len);
        let (frac_digits, after_number) = match after_int.strip_prefix('.') {
            Some(after_dot) => {
                let frac_len = after_dot.bytes().take_while(u8::is_ascii_digit).count();
                after_dot.split_at(frac_len)
            }
            None => ("", after_int),
        };
        if int_digits.is_empty() && frac_digits.is_empty() {
            return Err(invalid());
        }
        let unit_len =
            after_number.find(|c: char| c == '.' || c.is_ascii_digit()).unwrap_or(after_number.len());
        let (unit, after_unit) = after_number.split_at(unit_len);
        if unit.is_empty() {
            return Err(format!("time: missing unit in duration {s:?}"));
        }
        let unit_nanos: u128 = match unit {
            "ns" => 1,
            "us" | "µs" | "μs" => 1_000,
            "ms" => 1_000_000,
            "s" => 1_000_000_000,
            "m" => 60 * 1_000_000_000,
            "h" => 60 * 60 * 1_000_000_000,
            _ => return Err(format!("time: unknown unit {unit:?} in duration {s:?}")),
        };
        let int: u128 = if int_digits.is_empty() { 0 } else { int_digits.parse().map_err(|_| invalid())? };
        // Digits past the nineteenth cannot change a nanosecond count of this size; dropping
        // them keeps the arithmetic in range, as Go does.
        let (mut frac, mut scale) = (0u128, 1u128);
        for digit in frac_digits.bytes().take(19) {
            frac = frac * 10 + u128::from(digit - b'0');
            scale *= 10;
        }
        let component = int
            .checked_mul(unit_nanos)
            .and_then(|nanos| nanos.checked_add(frac * unit_nanos / scale))
            .ok_or_else(invalid)?;
        total = total.checked_add(component).ok_or_else(invalid)?;
        // Go's limit: a duration is an i64 count of nanoseconds.
        if total > i64::MAX as u128 {
            return Err(invalid());
        }
        rest = after_unit;
    }
    if negative && total != 0 {
        return Err(format!("invalid duration {s:?}: must not be negative"));
    }
    u64::try_from(total).map(Duration::from_nanos).map_err(|_| invalid())
}

// === the running target ===

/// A started demo target. Dropping it stops the servers at once and removes the health file;
/// [`DemoHandle::shutdown`] lets in-flight requests finish first.
#[derive(Debug)]
pub struct DemoHandle {
    /// The bound HTTP address (`--http` with port 0 resolved).
    pub http_addr: Option<SocketAddr>,
    /// The bound TCP address (`--tcp` with port 0 resolved); the same port is reopened after
    /// an unhealthy spell.
    pub tcp_addr: Option<SocketAddr>,
    /// The bound gRPC address (`--grpc` with port 0 resolved).
    pub grpc_addr: Option<SocketAddr>,
    /// When the target started: the origin of [`healthy_at`]'s `elapsed`.
    started: Instant,
    /// The current health, as published by the clock task.
    health: watch::Receiver<bool>,
    /// Set to `true` to stop every task; dropping it stops them too.
    stop: watch::Sender<bool>,
    /// The clock and the servers.
    tasks: JoinSet<()>,
    /// `--health-file`, removed on shutdown: a stopped target is not healthy.
    health_file: Option<PathBuf>,
}

impl DemoHandle {
    /// When the target started.
    pub fn started(&self) -> Instant {
        self.started
    }

    /// Whether the target is healthy now.
    pub fn is_healthy(&self) -> bool {
        *self.health.borrow()
    }

    /// A receiver that sees every health change.
    pub fn health(&self) -> watch::Receiver<bool> {
        self.health.clone()
    }

    /// Stops the servers, giving in-flight requests a short grace, and removes the health file.
    pub async fn shutdown(mut self) {
        let _ = self.stop.send(true);
        let deadline = Instant::now() + SHUTDOWN_GRACE;
        while let Ok(Some(_)) = timeout_at(deadline, self.tasks.join_next()).await {}
        // Drop aborts whatever is left and removes the health file.
    }
}

impl Drop for DemoHandle {
    fn drop(&mut self) {
        let _ = self.stop.send(true);
        self.tasks.abort_all();
        if let Some(path) = &self.health_file
            && let Err(e) = remove_health_file(path)
        {
            tracing::warn!(path = %path.display(), error = %e, "cannot remove the health file");
        }
    }
}

/// Binds the requested listeners, sets the initial health, and starts the servers and the
/// health clock.
pub async fn start(args: DemoArgs) -> Result<DemoHandle, DemoError> {
    let started = Instant::now();
    let healthy = healthy_at(&args, Duration::ZERO);

    let http = match args.http {
        Some(addr) => Some(bind("HTTP", addr).await?),
        None => None,
    };
    // Bound even when starting unhealthy: it checks the address and resolves port 0, so the
    // listener can later reopen on the same port.
    let tcp = match args.tcp {
        Some(addr) => Some(bind("TCP", addr).await?),
        None => None,
    };
    let grpc = match args.grpc {
        Some(addr) => Some(bind("gRPC", addr).await?),
        None => None,
    };
    if let Some(path) = &args.health_file {
        sync_health_file(path, healthy)
            .map_err(|source| DemoError::HealthFile { path: path.clone(), source })?;
    }

    let (health_tx, health) = watch::channel(healthy);
    let (stop, _) = watch::channel(false);
    let mut tasks = JoinSet::new();
    let mut handle = DemoHandle {
        http_addr: None,
        tcp_addr: None,
        grpc_addr: None,
        started,
        health: health.clone(),
        stop,
        tasks: JoinSet::new(),
        health_file: args.health_file.clone(),
    };

    if let Some((listener, addr)) = http {
        tracing::info!(%addr, "serving HTTP");
        handle.http_addr = Some(addr);
        let state = HttpState { health: health.clone(), delay: args.delay };
        tasks.spawn(serve_http(listener, state, handle.stop.subscribe()));
    }
    if let Some((listener, addr)) = tcp {
        tracing::info!(%addr, "accepting TCP connections while healthy");
        handle.tcp_addr = Some(addr);
        let listener = healthy.then_some(listener);
        tasks.spawn(serve_tcp(addr, listener, health.clone(), handle.stop.subscribe()));
    }
    if let Some((listener, addr)) = grpc {
        tracing::info!(%addr, services = ?args.grpc_service, "serving grpc.health.v1");
        handle.grpc_addr = Some(addr);
        let reporter = HealthReporter::new();
        let names: Vec<String> =
            std::iter::once(String::new()).chain(args.grpc_service.iter().cloned()).collect();
        report_grpc(&reporter, &names, healthy).await;
        let service = HealthServer::new(DelayedHealth {
            inner: HealthService::from_health_reporter(reporter.clone()),
            delay: args.delay,
        });
        tasks.spawn(serve_grpc(listener, service, handle.stop.subscribe()));
        tasks.spawn(follow_grpc(reporter, names, health.clone(), handle.stop.subscribe()));
    }
    tracing::info!(healthy, "demo target started");
    tasks.spawn(run_clock(args, started, health_tx, handle.stop.subscribe()));
    handle.tasks = tasks;
    Ok(handle)
}

/// Runs the demo target until `--exit-after` (returning `--exit-code`) or until SIGTERM/SIGINT
/// (returning 0).
pub async fn run(args: DemoArgs) -> Result<i32, DemoError> {
    // Installed before anything else so an early SIGTERM is not the default (fatal) one.
    let terminated = termination_signal()?;
    let exit_after = args.exit_after;
    let exit_code = args.exit_code;
    let handle = start(args).await?;
    let exit = async {
        match exit_after {
            Some(after) => sleep_until(handle.started() + after).await,
            None => std::future::pending().await,
        }
    };
    let code = tokio::select! {
        () = exit => {
            tracing::info!(code = exit_code, "exiting as --exit-after says");
            exit_code
        }
        signal = terminated => {
            tracing::info!(signal, "shutting down");
            0
        }
    };
    handle.shutdown().await;
    Ok(code)
}

/// A future that resolves with the signal's name on SIGTERM or SIGINT.
#[cfg(unix)]
fn termination_signal() -> Result<impl Future<Output = &'static str>, DemoError> {
    use tokio::signal::unix::{SignalKind, signal};
    let mut term = signal(SignalKind::terminate()).map_err(DemoError::Signal)?;
    let mut int = signal(SignalKind::interrupt()).map_err(DemoError::Signal)?;
    Ok(async move {
        tokio::select! {
            _ = term.recv() => "SIGTERM",
            _ = int.recv() => "SIGINT",
        }
    })
}

/// A future that resolves on Ctrl-C.
#[cfg(not(unix))]
fn termination_signal() -> Result<impl Future<Output = &'static str>, DemoError> {
    Ok(async {
        let _ = tokio::signal::ctrl_c().await;
        "Ctrl-C"
    })
}

async fn bind(what: &'static str, addr: SocketAddr) -> Result<(TcpListener, SocketAddr), DemoError> {
    let bound = async {
        let listener = TcpListener::bind(addr).await?;
        let local = listener.local_addr()?;
        Ok((listener, local))
    };
    bound.await.map_err(|source| DemoError::Bind { what, addr, source })
}

/// Resolves when the handle asks to stop or is gone.
async fn stopped(stop: &mut watch::Receiver<bool>) {
    let _ = stop.wait_for(|stop| *stop).await;
}

// === the health clock ===

/// Publishes [`healthy_at`] at every boundary and keeps the health file in step.
async fn run_clock(
    args: DemoArgs,
    started: Instant,
    health: watch::Sender<bool>,
    mut stop: watch::Receiver<bool>,
) {
    loop {
        // The actual elapsed time, not the boundary slept to: after a stall this skips
        // straight to the current state.
        let elapsed = started.elapsed();
        let healthy = healthy_at(&args, elapsed);
        if healthy != *health.borrow() {
            tracing::info!(
                healthy,
                elapsed_ms = elapsed.as_millis(),
                "{}",
                if healthy { "now healthy" } else { "now unhealthy" }
            );
            if let Some(path) = &args.health_file
                && let Err(e) = sync_health_file(path, healthy)
            {
                tracing::warn!(path = %path.display(), error = %e, "cannot update the health file");
            }
            health.send_replace(healthy);
        }
        let Some(next) = next_transition(&args, elapsed) else {
            // Health is final; the sender stays alive so followers keep their state.
            stopped(&mut stop).await;
            break;
        };
        tokio::select! {
            () = sleep_until(started + next) => {}
            () = stopped(&mut stop) => break,
        }
    }
    if let Some(path) = &args.health_file
        && let Err(e) = remove_health_file(path)
    {
        tracing::warn!(path = %path.display(), error = %e, "cannot remove the health file");
    }
}

/// Creates (healthy) or removes (unhealthy) the health file. The write is a few bytes to a
/// local file, done inline so creations and removals stay in order.
fn sync_health_file(path: &Path, healthy: bool) -> io::Result<()> {
    if healthy { std::fs::write(path, b"ok\n") } else { remove_health_file(path) }
}

fn remove_health_file(path: &Path) -> io::Result<()> {
    match std::fs::remove_file(path) {
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(()),
        other => other,
    }
}

// === HTTP ===

#[derive(Clone)]
struct HttpState {
    health: watch::Receiver<bool>,
    delay: Option<Duration>,
}

async fn serve_http(listener: TcpListener, state: HttpState, mut stop: watch::Receiver<bool>) {
    let router = Router::new()
        .route("/", get(health_page))
        .route("/healthz", get(health_page))
        .route("/readyz", get(health_page))
        .route("/livez", get(health_page))
        .route("/redirect", get(redirect))
        .with_state(state);
    let served =
        axum::serve(listener, router).with_graceful_shutdown(async move { stopped(&mut stop).await });
    if let Err(e) = served.await {
        tracing::error!(error = %e, "HTTP server failed");
    }
}

async fn health_page(State(state): State<HttpState>) -> (StatusCode, &'static str) {
    delay(state.delay).await;
    if *state.health.borrow() {
        (StatusCode::OK, "ok")
    } else {
        (StatusCode::SERVICE_UNAVAILABLE, "unhealthy")
    }
}

async fn redirect(State(state): State<HttpState>) -> impl IntoResponse {
    delay(state.delay).await;
    // 302 exactly (axum's `Redirect` helpers answer 303, 307 or 308).
    (StatusCode::FOUND, [(header::LOCATION, "/healthz")])
}

async fn delay(delay: Option<Duration>) {
    if let Some(delay) = delay {
        sleep(delay).await;
    }
}

// === TCP ===

/// Accepts (and at once closes) connections while healthy; drops the listener while unhealthy
/// so connections are refused, and rebinds `addr` when healthy again.
async fn serve_tcp(
    addr: SocketAddr,
    mut listener: Option<TcpListener>,
    mut health: watch::Receiver<bool>,
    mut stop: watch::Receiver<bool>,
) {
    loop {
        let healthy = *health.borrow_and_update();
        let mut rebind_failed = false;
        if healthy && listener.is_none() {
            match TcpListener::bind(addr).await {
                Ok(reopened) => {
                    tracing::info!(%addr, "TCP listener reopened");
                    listener = Some(reopened);
                }
                Err(e) => {
                    tracing::warn!(%addr, error = %e, "cannot reopen the TCP listener, retrying");
                    rebind_failed = true;
                }
            }
        } else if !healthy && listener.take().is_some() {
            tracing::info!(%addr, "TCP listener closed");
        }
        tokio::select! {
            () = stopped(&mut stop) => return,
            changed = health.changed() => {
                if changed.is_err() {
                    return;
                }
            }
            accepted = accept(listener.as_ref()) => {
                // The probe only needs the handshake; dropping the stream closes it.
                if let Err(e) = accepted {
                    tracing::warn!(%addr, error = %e, "TCP accept failed");
                    sleep(ACCEPT_BACKOFF).await;
                }
            }
            () = sleep(REBIND_BACKOFF), if rebind_failed => {}
        }
    }
}

async fn accept(listener: Option<&TcpListener>) -> io::Result<()> {
    match listener {
        Some(listener) => listener.accept().await.map(drop),
        None => std::future::pending().await,
    }
}

// === gRPC ===

/// tonic-health's service with `--delay` in front of every call.
struct DelayedHealth {
    inner: HealthService,
    delay: Option<Duration>,
}

#[tonic::async_trait]
impl Health for DelayedHealth {
    async fn check(
        &self,
        request: Request<HealthCheckRequest>,
    ) -> Result<Response<HealthCheckResponse>, Status> {
        delay(self.delay).await;
        self.inner.check(request).await
    }

    type WatchStream = WatchStream;

    async fn watch(
        &self,
        request: Request<HealthCheckRequest>,
    ) -> Result<Response<Self::WatchStream>, Status> {
        delay(self.delay).await;
        self.inner.watch(request).await
    }
}

async fn serve_grpc(
    listener: TcpListener,
    service: HealthServer<DelayedHealth>,
    mut stop: watch::Receiver<bool>,
) {
    let served = Server::builder()
        .add_service(service)
        .serve_with_incoming_shutdown(TcpIncoming::from(listener), async move { stopped(&mut stop).await });
    if let Err(e) = served.await {
        tracing::error!(error = %e, "gRPC server failed");
    }
}

async fn follow_grpc(
    reporter: HealthReporter,
    names: Vec<String>,
    mut health: watch::Receiver<bool>,
    mut stop: watch::Receiver<bool>,
) {
    loop {
        tokio::select! {
            () = stopped(&mut stop) => return,
            changed = health.changed() => {
                if changed.is_err() {
                    return;
                }
            }
        }
        let healthy = *health.borrow_and_update();
        report_grpc(&reporter, &names, healthy).await;
    }
}

async fn report_grpc(reporter: &HealthReporter, names: &[String], healthy: bool) {
    let status = if healthy { ServingStatus::Serving } else { ServingStatus::NotServing };
    for name in names {
        reporter.set_service_status(name, status).await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ms(n: u64) -> Duration {
        Duration::from_millis(n)
    }

    #[test]
    fn next_transition_lands_on_every_boundary() {
        let args = DemoArgs {
            start_after: Some(ms(100)),
            flip_every: Some(ms(50)),
            fail_after: Some(ms(260)),
            ..DemoArgs::default()
        };
        let mut at = Duration::ZERO;
        let mut boundaries = Vec::new();
        while let Some(next) = next_transition(&args, at) {
            assert!(next > at, "boundary {next:?} after {at:?}");
            boundaries.push(next);
            at = next;
        }
        assert_eq!(boundaries, [100, 150, 200, 250, 260].map(ms));
    }

    #[test]
    fn next_transition_is_none_when_health_is_final() {
        assert_eq!(next_transition(&DemoArgs::default(), ms(5)), None, "no script");
        let failing = DemoArgs { fail_after: Some(ms(10)), ..DemoArgs::default() };
        assert_eq!(next_transition(&failing, ms(3)), Some(ms(10)), "before failing");
        assert_eq!(next_transition(&failing, ms(10)), None, "failed");
        let starting = DemoArgs { start_after: Some(ms(10)), ..DemoArgs::default() };
        assert_eq!(next_transition(&starting, ms(10)), None, "started");
        let zero_flip = DemoArgs { flip_every: Some(Duration::ZERO), ..DemoArgs::default() };
        assert_eq!(next_transition(&zero_flip, ms(10)), None, "flip 0 never flips");
    }

    #[test]
    fn health_only_changes_at_boundaries() {
        let args = DemoArgs {
            start_after: Some(ms(30)),
            flip_every: Some(ms(20)),
            fail_after: Some(ms(170)),
            ..DemoArgs::default()
        };
        for step in 0..200u64 {
            let at = ms(step);
            let next = next_transition(&args, at);
            let later = ms(step + 1);
            if next.is_none_or(|next| later < next) {
                assert_eq!(
                    healthy_at(&args, at),
                    healthy_at(&args, later),
                    "no boundary between {at:?} and {later:?}"
                );
            }
        }
    }
}
