//! Running the agent: wiring the engine, the host and the HTTP endpoints for standalone mode
//! (and, through [`crate::cluster`], cluster mode), then waiting for SIGTERM or SIGINT and
//! shutting down in order: stop probing, stop containers with their grace periods, flush.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::AtomicBool;
use std::time::Duration;

use probelet_actors::clock::{SharedClock, TokioClock};
use probelet_actors::contracts::{CommandRunner, EventRecorder, PodRegistry};
use probelet_actors::local_runner::LocalCommandRunner;
use probelet_actors::metrics::{MetricsError, PrometheusRegistry};
use probelet_actors::prober::ProbeHostPolicy;
use probelet_actors::{Pipeline, PipelineConfig};
use tokio::sync::oneshot;

use crate::auth::Reviewer;
use crate::cli::AuthorizationMode;
use crate::cli::RunArgs;
use crate::host::events::EventLog;
use crate::host::history::ProbeHistory;
use crate::host::kubelet::{KubeletConfig, Shutdown, StandaloneKubelet, start_kubelet};
use crate::host::runtime::ProcessRuntime;
use crate::serve::{Limits, ServeState, router, router_with_reviews, serve_router};

/// Why the agent could not run.
#[derive(Debug, thiserror::Error)]
pub enum AgentError {
    #[error("metrics: {0}")]
    Metrics(#[from] MetricsError),
    #[error("cannot listen on {addr}: {source}")]
    Listen { addr: SocketAddr, source: std::io::Error },
    #[error("manifests folder {0}: not a directory")]
    NoManifests(PathBuf),
    #[error("cluster: {0}")]
    Cluster(String),
    #[error("--authorization-mode webhook needs cluster mode (an API server to ask)")]
    WebhookWithoutCluster,
}

/// What both modes share: the metrics registry, the clock, events and probe history.
pub struct Common {
    pub registry: Arc<PrometheusRegistry>,
    pub clock: SharedClock,
    pub events: EventLog,
    pub history: ProbeHistory,
    pub pods: PodRegistry,
    pub ready: Arc<AtomicBool>,
    /// Which hosts network probes may connect to (`--probe-host-policy`).
    pub probe_host_policy: ProbeHostPolicy,
}

impl Common {
    pub fn new() -> Result<Common, AgentError> {
        let registry = PrometheusRegistry::global()?;
        let clock: SharedClock = Arc::new(TokioClock::new());
        let pods = PodRegistry::new();
        Ok(Common {
            registry,
            events: EventLog::new(clock.clone()),
            // Only pods the host knows: a probe finishing after its pod's removal is dropped.
            history: ProbeHistory::with_pods(clock.clone(), Arc::new(pods.clone())),
            clock,
            pods,
            ready: Arc::new(AtomicBool::new(false)),
            probe_host_policy: ProbeHostPolicy::Any,
        })
    }

    /// The engine, with probe workers spread over one arbiter per core.
    pub fn pipeline(&self, runner: Arc<dyn CommandRunner>) -> Pipeline {
        self.pipeline_with(runner, Arc::new(self.events.clone()))
    }

    /// The engine with another event sink.
    pub fn pipeline_with(
        &self,
        runner: Arc<dyn CommandRunner>,
        recorder: Arc<dyn EventRecorder>,
    ) -> Pipeline {
        let mut config = PipelineConfig::new(runner, recorder, Arc::new(self.pods.clone()));
        config.clock = Some(self.clock.clone());
        config.worker_arbiters = std::thread::available_parallelism().map(|n| n.get()).unwrap_or(1);
        config.observer = Some(Arc::new(self.history.clone()));
        config.probe_host_policy = self.probe_host_policy;
        Pipeline::start(config)
    }

    /// Binds the HTTP endpoints and serves them until the returned sender fires. `api` is the
    /// cluster's client (cluster mode), which webhook authorization asks.
    pub async fn serve(
        &self,
        args: &RunArgs,
        pipeline: Pipeline,
        api: Option<kube::Client>,
    ) -> Result<(SocketAddr, oneshot::Sender<()>, tokio::task::JoinHandle<std::io::Result<()>>), AgentError>
    {
        let listen = args.listen;
        let reviewed = reviewed_by(args.authorization_mode, &listen, api)?;
        let listener = tokio::net::TcpListener::bind(listen)
            .await
            .map_err(|source| AgentError::Listen { addr: listen, source })?;
        let addr = listener.local_addr().map_err(|source| AgentError::Listen { addr: listen, source })?;
        let state = ServeState {
            registry: self.registry.clone(),
            pipeline,
            pods: self.pods.clone(),
            history: self.history.clone(),
            events: self.events.clone(),
            ready: self.ready.clone(),
        };
        let (stop, stopped) = oneshot::channel::<()>();
        let limits = Limits {
            header_read_timeout: Duration::from_secs(args.http_header_timeout),
            max_connections: args.http_max_connections as usize,
        };
        let app = match reviewed {
            Some(client) => {
                router_with_reviews(state, Arc::new(Reviewer::new(client, args.node_name.clone())))
            }
            None => {
                if let Some(warning) = exposure_warning(&addr) {
                    tracing::warn!(address = %addr, "{warning}");
                }
                router(state)
            }
        };
        let server = tokio::spawn(serve_router(listener, app, limits, async move {
            let _ = stopped.await;
        }));
        Ok((addr, stop, server))
    }
}

/// The API client that authorizes private endpoints, if `mode` and the address call for one:
/// `auto` guards a non-loopback listener in cluster mode only.
pub fn reviewed_by(
    mode: AuthorizationMode,
    listen: &SocketAddr,
    api: Option<kube::Client>,
) -> Result<Option<kube::Client>, AgentError> {
    match (mode, api) {
        (AuthorizationMode::Webhook, None) => Err(AgentError::WebhookWithoutCluster),
        (AuthorizationMode::Webhook, Some(api)) => Ok(Some(api)),
        (AuthorizationMode::Auto, Some(api)) if !listen.ip().is_loopback() => Ok(Some(api)),
        _ => Ok(None),
    }
}

/// The warning for a listener that serves the private endpoints without authentication, if
/// anyone beyond this host can reach it.
pub fn exposure_warning(addr: &SocketAddr) -> Option<&'static str> {
    (!addr.ip().is_loopback()).then_some(
        "The HTTP listener is not on loopback and serves /pods (pod specs, environment values included), \
         /pods/{namespace}/{name}/probes (exec probe output) and /events without authentication",
    )
}

/// Standalone mode: pods from `manifests`, containers as local processes.
pub async fn run_standalone(args: &RunArgs, manifests: PathBuf) -> Result<(), AgentError> {
    if !manifests.is_dir() {
        return Err(AgentError::NoManifests(manifests));
    }
    let mut common = Common::new()?;
    common.probe_host_policy = args.probe_host_policy.into();
    let runner = LocalCommandRunner::new();
    let pipeline = common.pipeline(Arc::new(runner.clone()));
    let runtime = actix::Actor::start(ProcessRuntime::new(
        runner,
        Arc::new(common.events.clone()),
        common.clock.clone(),
    ));
    let (addr, stop_server, server) = common.serve(args, pipeline.clone(), None).await?;
    println!(
        "probelet {}: standalone on {}, node {}; http://{addr}/pods, /metrics",
        env!("CARGO_PKG_VERSION"),
        manifests.display(),
        args.node_name
    );
    let kubelet = start_kubelet(StandaloneKubelet::new(
        KubeletConfig {
            manifests,
            node_name: args.node_name.clone(),
            rescan_period: Duration::from_secs(2),
            resync_period: Duration::from_secs(10),
        },
        pipeline,
        runtime,
        common.pods.clone(),
        common.history.clone(),
        common.ready.clone(),
    ));

    wait_for_signal().await;
    println!("probelet: shutting down, stopping containers");
    let _ = kubelet.send(Shutdown).await;
    let _ = stop_server.send(());
    let _ = server.await;
    Ok(())
}

/// Resolves on SIGTERM or SIGINT.
pub async fn wait_for_signal() {
    let terminate = async {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut signal) => {
                signal.recv().await;
            }
            Err(err) => {
                tracing::error!(error = %err, "Cannot listen for SIGTERM");
                std::future::pending::<()>().await;
            }
        }
    };
    tokio::select! {
        _ = terminate => {}
        _ = tokio::signal::ctrl_c() => {}
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn client() -> kube::Client {
        let _ = rustls::crypto::ring::default_provider().install_default();
        let config = kube::Config::new("http://127.0.0.1:1".parse().unwrap());
        kube::Client::try_from(config).unwrap()
    }

    #[tokio::test]
    async fn which_listeners_are_reviewed() {
        let loopback: SocketAddr = "127.0.0.1:9898".parse().unwrap();
        let any: SocketAddr = "0.0.0.0:9898".parse().unwrap();
        let v6_any: SocketAddr = "[::]:9898".parse().unwrap();
        let reviewed = |mode, listen: &SocketAddr, api: Option<kube::Client>| {
            reviewed_by(mode, listen, api).map(|c| c.is_some()).map_err(|e| e.to_string())
        };
        assert_eq!(reviewed(AuthorizationMode::Auto, &any, Some(client())), Ok(true));
        assert_eq!(reviewed(AuthorizationMode::Auto, &v6_any, Some(client())), Ok(true));
        assert_eq!(reviewed(AuthorizationMode::Auto, &loopback, Some(client())), Ok(false));
        assert_eq!(reviewed(AuthorizationMode::Auto, &any, None), Ok(false), "standalone stays open");
        assert_eq!(reviewed(AuthorizationMode::AlwaysAllow, &any, Some(client())), Ok(false));
        assert_eq!(reviewed(AuthorizationMode::Webhook, &loopback, Some(client())), Ok(true));
        assert!(
            reviewed(AuthorizationMode::Webhook, &loopback, None).is_err(),
            "webhook needs an API server"
        );
        assert_eq!(exposure_warning(&loopback), None);
        assert_eq!(exposure_warning(&"[::1]:9898".parse().unwrap()), None);
        assert!(
            exposure_warning(&any)
                .is_some_and(|w| w.contains("/pods") && w.contains("without authentication"))
        );
        assert!(exposure_warning(&v6_any).is_some());
    }
}
