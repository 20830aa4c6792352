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
use probelet_actors::{Pipeline, PipelineConfig};
use tokio::sync::oneshot;

use crate::cli::RunArgs;
use crate::host::events::EventLog;
use crate::host::history::ProbeHistory;
use crate::host::kubelet::{KubeletConfig, Shutdown, StandaloneKubelet, start_kubelet};
use crate::host::runtime::ProcessRuntime;
use crate::serve::{Limits, ServeState, router, serve_router};

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
}

/// What both modes share: the metrics registry, the clock, events and probe history.
pub struct Common {
    pub registry: Arc<PrometheusRegistry>,
    pub clock: SharedClock,
    pub events: EventLog,
    pub history: ProbeHistory,
    pub pods: PodRegistry,
    pub ready: Arc<AtomicBool>,
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
        Pipeline::start(config)
    }

    /// Binds the HTTP endpoints and serves them until the returned sender fires.
    pub async fn serve(
        &self,
        args: &RunArgs,
        pipeline: Pipeline,
    ) -> Result<(SocketAddr, oneshot::Sender<()>, tokio::task::JoinHandle<std::io::Result<()>>), AgentError>
    {
        let listen = args.listen;
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
        let server = tokio::spawn(serve_router(listener, router(state), limits, async move {
            let _ = stopped.await;
        }));
        Ok((addr, stop, server))
    }
}

/// Standalone mode: pods from `manifests`, containers as local processes.
pub async fn run_standalone(args: &RunArgs, manifests: PathBuf) -> Result<(), AgentError> {
    if !manifests.is_dir() {
        return Err(AgentError::NoManifests(manifests));
    }
    let common = Common::new()?;
    let runner = LocalCommandRunner::new();
    let pipeline = common.pipeline(Arc::new(runner.clone()));
    let runtime = actix::Actor::start(ProcessRuntime::new(
        runner,
        Arc::new(common.events.clone()),
        common.clock.clone(),
    ));
    let (addr, stop_server, server) = common.serve(args, pipeline.clone()).await?;
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
