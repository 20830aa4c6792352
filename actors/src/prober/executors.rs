//! The network executors a host or a test can put in place of the real ones, as upstream's
//! `prober_test.go` swaps the prober's `http`, `tcp` and `grpc` fields for fakes (the command
//! runner is already the host's: [`crate::contracts::CommandRunner`]). Everything around an
//! executor stays real: the handler choice, port resolution, the host policy, retries, the
//! outcome mapping, events and metrics (docs/prober.md §4).
//!
//! The real executors are called directly, without boxing; an injected one costs one boxed
//! future per probe.

use std::sync::Arc;
use std::time::Duration;

use futures::future::BoxFuture;

use super::Probed;
use super::http::HttpProbeRequest;
use crate::vocabulary::ProbeError;

/// Runs `httpGet` probes (upstream `httpprobe.Prober`). The request is built and checked
/// already; an `Err` is a failed body read, which the prober retries as any probe error.
pub trait HttpExecutor: Send + Sync + 'static {
    /// Sends the request and judges the response, all within `timeout`.
    fn probe<'a>(
        &'a self,
        request: &'a HttpProbeRequest,
        timeout: Duration,
    ) -> BoxFuture<'a, Result<Probed, ProbeError>>;
}

/// Runs `tcpSocket` probes (upstream `tcpprobe.Prober`).
pub trait TcpExecutor: Send + Sync + 'static {
    /// Connects to `host:port` within `timeout`.
    fn probe<'a>(&'a self, host: &'a str, port: u16, timeout: Duration) -> BoxFuture<'a, Probed>;
}

/// Runs `grpc` probes (upstream `grpcprobe.Prober`).
pub trait GrpcExecutor: Send + Sync + 'static {
    /// Asks `host:port`'s health service about `service` within `timeout`.
    fn probe<'a>(
        &'a self,
        host: &'a str,
        port: u16,
        service: &'a str,
        timeout: Duration,
    ) -> BoxFuture<'a, Probed>;
}

/// The executors a [`super::Prober`] uses in place of the real ones; `None` is the real one.
#[derive(Clone, Default)]
pub struct Executors {
    /// For `httpGet` probes.
    pub http: Option<Arc<dyn HttpExecutor>>,
    /// For `tcpSocket` probes.
    pub tcp: Option<Arc<dyn TcpExecutor>>,
    /// For `grpc` probes.
    pub grpc: Option<Arc<dyn GrpcExecutor>>,
}

impl std::fmt::Debug for Executors {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Executors")
            .field("http", &self.http.as_ref().map(|_| "injected"))
            .field("tcp", &self.tcp.as_ref().map(|_| "injected"))
            .field("grpc", &self.grpc.as_ref().map(|_| "injected"))
            .finish()
    }
}
