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
//!
//! This file starts and stops the target and runs its health clock; the command line and the
//! health script are in `script`, the HTTP, TCP and gRPC servers in `servers`.

use std::io;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

use tokio::net::TcpListener;
use tokio::sync::watch;
use tokio::task::JoinSet;
use tokio::time::{Instant, sleep_until, timeout_at};
use tonic_health::pb::health_server::HealthServer;
use tonic_health::server::{HealthReporter, HealthService};

/// How long [`DemoHandle::shutdown`] lets servers finish in-flight requests. gRPC `Watch`
/// streams never finish on their own, so this is also the longest a shutdown takes.
const SHUTDOWN_GRACE: Duration = Duration::from_millis(500);

/// Back-off before retrying to reopen the TCP listener when its port is taken meanwhile.
const REBIND_BACKOFF: Duration = Duration::from_millis(200);

/// Back-off after a failed `accept` (e.g. out of file descriptors), so it does not spin.
const ACCEPT_BACKOFF: Duration = Duration::from_millis(50);

mod script;
mod servers;

use script::next_transition;
pub use script::{DemoArgs, healthy_at, parse_duration};
use servers::{DelayedHealth, HttpState, follow_grpc, report_grpc, serve_grpc, serve_http, serve_tcp};

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
