//! Running the agent: wiring the engine, the host and the HTTP endpoints for standalone mode
//! (and, through [`crate::cluster`], cluster mode), then waiting for SIGTERM or SIGINT and
//! shutting down in order: stop probing, stop containers with their grace periods, flush.
//!
//! Shutdown always ends: a standalone agent gives its containers the largest grace period of
//! its pods plus [`SHUTDOWN_MARGIN`], then SIGKILLs whatever still runs and exits; a second
//! SIGTERM or SIGINT does the same at once. Signals are watched on a thread of their own, so
//! this holds even while the agent's main thread is saturated.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::AtomicBool;
use std::time::Duration;

use probelet_actors::clock::{SharedClock, TokioClock};
use probelet_actors::contracts::{CommandRunner, EventRecorder, PodRegistry};
use probelet_actors::local_runner::LocalCommandRunner;
use probelet_actors::metrics::{MetricsError, PrometheusRegistry};
use probelet_actors::prober::{DEFAULT_MAX_PROBES_IN_FLIGHT, ProbeHostPolicy};
use probelet_actors::{FeatureGates, Pipeline, PipelineConfig};
use tokio::sync::oneshot;

use crate::auth::Reviewer;
use crate::cli::AuthorizationMode;
use crate::cli::RunArgs;
use crate::host::events::EventLog;
use crate::host::history::ProbeHistory;
use crate::host::kubelet::{KubeletConfig, Shutdown, StandaloneKubelet, start_kubelet};
use crate::host::runtime::{ContainerGroups, FdBudget, ProcessRuntime, StateDirError, raise_nofile_limit};
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
    #[error("{0} (choose another with --state-dir)")]
    StateDir(#[from] StateDirError),
    #[error("cannot watch for signals: {0}")]
    SignalWatcher(std::io::Error),
}

/// The state directory's name in the manifests folder when `--state-dir` is not given (hidden,
/// so the folder's scan skips it).
pub const DEFAULT_STATE_DIR: &str = ".probelet-state";

/// What a shutdown may take beyond the largest grace period before everything is SIGKILLed.
pub const SHUTDOWN_MARGIN: Duration = Duration::from_secs(5);
/// The agent's own executable, as the processes it spawns resolve it.
const SELF_EXE: &str = "/proc/self/exe";

/// `--max-probes-in-flight` as the engine takes it: 0 is no limit.
pub fn max_probes_in_flight(args: &RunArgs) -> Option<usize> {
    Some(args.max_probes_in_flight).filter(|n| *n > 0)
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
    /// The kubelet feature gates (`--feature-gates`).
    pub feature_gates: FeatureGates,
    /// The bound on probes in flight (`--max-probes-in-flight`); `None` for none.
    pub max_probes_in_flight: Option<usize>,
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
            feature_gates: FeatureGates::default(),
            max_probes_in_flight: Some(DEFAULT_MAX_PROBES_IN_FLIGHT),
        })
    }

    /// Takes the options every mode shares from the command line, and logs the warnings the
    /// kubelet logs for the feature gates set.
    pub fn configure(&mut self, args: &RunArgs) {
        self.probe_host_policy = args.probe_host_policy.into();
        self.feature_gates = args.feature_gates.gates;
        self.max_probes_in_flight = max_probes_in_flight(args);
        for warning in &args.feature_gates.warnings {
            tracing::warn!("{warning}");
        }
    }

    /// The engine, with probe workers on one thread per core, any of which runs any worker.
    /// The manifests folder is the pods' own source: their probe changes are applied in place
    /// under `MutableContainerProbes`, though they carry the static pods' annotations.
    pub fn pipeline(&self, runner: Arc<dyn CommandRunner>) -> Pipeline {
        let mut config = self.pipeline_config(runner, Arc::new(self.events.clone()));
        config.static_pods_in_place = true;
        Pipeline::start(config)
    }

    /// The engine with another event sink.
    pub fn pipeline_with(
        &self,
        runner: Arc<dyn CommandRunner>,
        recorder: Arc<dyn EventRecorder>,
    ) -> Pipeline {
        Pipeline::start(self.pipeline_config(runner, recorder))
    }

    fn pipeline_config(
        &self,
        runner: Arc<dyn CommandRunner>,
        recorder: Arc<dyn EventRecorder>,
    ) -> PipelineConfig {
        let mut config = PipelineConfig::new(runner, recorder, Arc::new(self.pods.clone()));
        config.clock = Some(self.clock.clone());
        config.worker_threads = std::thread::available_parallelism().map(|n| n.get()).unwrap_or(1);
        config.observer = Some(Arc::new(self.history.clone()));
        config.probe_host_policy = self.probe_host_policy;
        config.feature_gates = self.feature_gates;
        config.max_probes_in_flight = self.max_probes_in_flight;
        config
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
    // Containers hold the agent's descriptors: use all the hard limit allows, then budget it.
    match raise_nofile_limit() {
        Ok(limit) => tracing::debug!(?limit, "RLIMIT_NOFILE raised to the hard limit"),
        Err(error) => tracing::warn!(%error, "cannot raise RLIMIT_NOFILE to the hard limit"),
    }
    let mut common = Common::new()?;
    common.configure(args);
    // Containers and exec probes run under the agent's own `container-shim`, so that whatever
    // they start ends with them. `/proc/self/exe` is the running image even if the file was
    // replaced since (an upgrade, a rebuild), as the shim must speak this agent's protocol.
    let shim = std::path::PathBuf::from(SELF_EXE);
    let runner = LocalCommandRunner::new().with_shim(shim.clone());
    let pipeline = common.pipeline(Arc::new(runner.clone()));
    let state_dir = args.state_dir.clone().unwrap_or_else(|| manifests.join(DEFAULT_STATE_DIR));
    let (groups, leftovers) = ContainerGroups::open(&state_dir)?;
    // Watched from now on: a SIGTERM during startup stops the agent in order too.
    let mut terminating = watch_shutdown_signals(groups.clone())?;
    let budget = FdBudget::of_this_process();
    tracing::info!(containers = budget.max_containers(), "file descriptor budget");
    if leftovers > 0 {
        println!(
            "probelet: killed {leftovers} container process group(s) a previous agent left running ({})",
            state_dir.display()
        );
    }
    let runtime = actix::Actor::start(
        ProcessRuntime::new(runner, Arc::new(common.events.clone()), common.clock.clone())
            .with_groups(groups.clone())
            .with_fd_budget(budget)
            .with_shim(shim),
    );
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

    let _ = terminating.wait_for(|stage| *stage != ShutdownStage::Running).await;
    println!(
        "probelet: shutting down, stopping containers (at most {}s)",
        groups.largest_grace_period().saturating_add(SHUTDOWN_MARGIN).as_secs()
    );
    let _ = kubelet.send(Shutdown).await;
    let _ = stop_server.send(());
    let _ = server.await;
    if *terminating.borrow() == ShutdownStage::Forced {
        // The containers stopped because the watcher killed them; it ends the process (exit 1).
        std::future::pending::<()>().await;
    }
    Ok(())
}

/// Where the shutdown is, as the signal watcher tells the main thread.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum ShutdownStage {
    Running,
    /// The first signal came: shut down in order.
    Stopping,
    /// The deadline passed or a second signal came: the watcher kills everything and exits.
    Forced,
}

/// Watches SIGTERM and SIGINT on a thread of its own, with its own tokio runtime, so that
/// neither a saturated main thread nor a stuck actor can keep the agent from stopping. The
/// first signal moves the returned stage to `Stopping` (the main thread then shuts down in
/// order); the second one, or the largest grace period plus [`SHUTDOWN_MARGIN`] after the
/// first, moves it to `Forced`, SIGKILLs every container group and exits 1.
fn watch_shutdown_signals(
    groups: ContainerGroups,
) -> Result<tokio::sync::watch::Receiver<ShutdownStage>, AgentError> {
    let (stage, terminating) = tokio::sync::watch::channel(ShutdownStage::Running);
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(AgentError::SignalWatcher)?;
    // Listening before the thread runs: no signal between now and then takes the default action.
    let mut signals = {
        let _watcher_runtime = runtime.enter();
        Signals::new()
    };
    std::thread::Builder::new()
        .name("probelet-signals".to_owned())
        .spawn(move || {
            runtime.block_on(async move {
                signals.recv().await;
                stage.send_replace(ShutdownStage::Stopping);
                let deadline = groups.largest_grace_period().saturating_add(SHUTDOWN_MARGIN);
                tokio::select! {
                    () = tokio::time::sleep(deadline) => {
                        tracing::warn!(?deadline, "containers did not stop within the shutdown deadline, killing them");
                    }
                    () = signals.recv() => tracing::warn!("second signal, killing every container"),
                }
                // Told first, so that the main thread, seeing its containers gone, does not exit 0.
                stage.send_replace(ShutdownStage::Forced);
                let killed = groups.kill_all();
                println!("probelet: shutdown forced, {killed} container process group(s) killed");
                std::process::exit(1);
            })
        })
        .map_err(AgentError::SignalWatcher)?;
    Ok(terminating)
}

/// Resolves on SIGTERM or SIGINT.
pub async fn wait_for_signal() {
    Signals::new().recv().await;
}

/// SIGTERM and SIGINT, listened for once for the agent's whole life, so that a second signal
/// during shutdown is seen.
pub struct Signals {
    terminate: Option<tokio::signal::unix::Signal>,
    interrupt: Option<tokio::signal::unix::Signal>,
}

impl Signals {
    pub fn new() -> Self {
        let listen =
            |kind: tokio::signal::unix::SignalKind, name: &str| match tokio::signal::unix::signal(kind) {
                Ok(signal) => Some(signal),
                Err(err) => {
                    tracing::error!(error = %err, "Cannot listen for {name}");
                    None
                }
            };
        Signals {
            terminate: listen(tokio::signal::unix::SignalKind::terminate(), "SIGTERM"),
            interrupt: listen(tokio::signal::unix::SignalKind::interrupt(), "SIGINT"),
        }
    }

    /// Resolves on the next SIGTERM or SIGINT.
    pub async fn recv(&mut self) {
        async fn next(signal: &mut Option<tokio::signal::unix::Signal>) {
            match signal {
                Some(signal) => {
                    signal.recv().await;
                }
                None => std::future::pending().await,
            }
        }
        tokio::select! {
            () = next(&mut self.terminate) => {}
            () = next(&mut self.interrupt) => {}
        }
    }
}

impl Default for Signals {
    fn default() -> Self {
        Self::new()
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
