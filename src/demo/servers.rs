//! The demo target's servers, each following the published health: HTTP (`/healthz` and
//! friends, `/redirect`), the TCP listener that is open only while healthy, and
//! `grpc.health.v1` with `--delay` in front of it.

use std::io;
use std::net::SocketAddr;
use std::time::Duration;

use axum::Router;
use axum::extract::State;
use axum::http::{StatusCode, header};
use axum::response::IntoResponse;
use axum::routing::get;
use tokio::net::TcpListener;
use tokio::sync::watch;
use tokio::time::sleep;
use tonic::transport::Server;
use tonic::transport::server::TcpIncoming;
use tonic::{Request, Response, Status};
use tonic_health::ServingStatus;
use tonic_health::pb::health_server::{Health, HealthServer};
use tonic_health::pb::{HealthCheckRequest, HealthCheckResponse};
use tonic_health::server::{HealthReporter, HealthService, WatchStream};

use super::{ACCEPT_BACKOFF, REBIND_BACKOFF, stopped};

// === HTTP ===

#[derive(Clone)]
pub(super) struct HttpState {
    pub(super) health: watch::Receiver<bool>,
    pub(super) delay: Option<Duration>,
}

pub(super) async fn serve_http(listener: TcpListener, state: HttpState, mut stop: watch::Receiver<bool>) {
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
pub(super) async fn serve_tcp(
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
pub(super) struct DelayedHealth {
    pub(super) inner: HealthService,
    pub(super) delay: Option<Duration>,
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

pub(super) async fn serve_grpc(
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

pub(super) async fn follow_grpc(
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

pub(super) async fn report_grpc(reporter: &HealthReporter, names: &[String], healthy: bool) {
    let status = if healthy { ServingStatus::Serving } else { ServingStatus::NotServing };
    for name in names {
        reporter.set_service_status(name, status).await;
    }
}
