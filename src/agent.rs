//! Running the agent: wiring the engine, the host and the HTTP endpoints for standalone mode
//! (and, through [`crate::cluster`], cluster mode), then waiting for SIGTERM, SIGINT or SIGHUP
//! and shutting down in order: stop probing, stop containers with their grace periods, flush.
//!
//! Shutdown always ends: a standalone agent gives its containers the largest grace period of
//! its pods plus [`SHUTDOWN_MARGIN`], then SIGKILLs whatever still runs and exits; a second
//! signal does the same at once. Signals are watched on a thread of their own, so
//! this holds even while the agent's main thread is saturated.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::AtomicBool;
use std::time::Duration;

use probelet_actors::clock::{SharedClock, SystemClock};
use probelet_actors::contracts::{CommandRunner, EventRecorder, PodRegistry};
use probelet_actors::local_runner::LocalCommandRunner;
use probelet_actors::metrics::{MetricsError, PrometheusRegistry};
use probelet_actors::prober::{DEFAULT_MAX_PROBES_IN_FLIGHT, ProbeHostPolicy};
use probelet_actors::{FeatureGates, Pipeline, PipelineConfig};
use tokio::sync::oneshot;

use crate::auth::Reviewer;
use crate::cli::AuthorizationMode;
use crate::cli::RunArgs;
use crate::host::console::{say, say_last};
use crate::host::events::EventLog;
use crate::host::history::ProbeHistory;
use crate::host::is_shortage;
use crate::host::kubelet::{KubeletConfig, Shutdown, StandaloneKubelet, start_kubelet};
use crate::host::runtime::{
    ContainerGroups, FdBudget, HeldByAnotherAgent, OrphanReaper, ProcessRuntime, RESYNC_INTERVAL,
    StateDirError, pods_that_ran,
};
use crate::serve::tls::{self, CertFiles, TlsError};
use crate::serve::{
    Heartbeat, Limits, ServeState, health_router, router, router_for_loopback, router_with_reviews,
    serve_router_on_own_thread,
};
use probelet_actors::sync::rate::RateLimiter;

/// Why the agent could not run.
#[derive(Debug, thiserror::Error)]
pub enum AgentError {
    #[error("metrics: {0}")]
    Metrics(#[from] MetricsError),
    #[error("cannot listen on {addr}: {source}")]
    Listen { addr: SocketAddr, source: std::io::Error },
    #[error(
        "--healthz-listen {0} is the address of --listen: give the health listener an address of its own"
    )]
    HealthzIsListen(SocketAddr),
    #[error("manifests folder {}: {why}", path.display())]
    NoManifests { path: PathBuf, why: String },
    #[error("cluster: {0}")]
    Cluster(String),
    #[error("--authorization-mode webhook needs cluster mode (an API server to ask)")]
    WebhookWithoutCluster,
    /// Names the flag and the file itself.
    #[error(transparent)]
    Tls(#[from] TlsError),
    #[error("{0}{hint}", hint = state_dir_hint(.0))]
    StateDir(#[from] StateDirError),
    #[error(
        "manifests folder {0}: served by another running agent (one agent per folder: two would run every container twice)"
    )]
    ManifestsInUse(PathBuf),
    #[error("cannot watch for signals: {0}")]
    SignalWatcher(#[source] std::io::Error),
    #[error("manifests folder {}: cannot claim it for this agent: {source}", folder.display())]
    Claim { folder: PathBuf, source: std::io::Error },
    #[error("{0} stopped unexpectedly (a bug: the panic is in the log)")]
    Internal(&'static str),
}

/// Another `--state-dir` is a way out of a state directory that cannot be used (once what its
/// records name no longer runs: a helper's crash test followed the plain advice after a crash
/// and ran each container twice), but not of
/// one whose records are a running agent's (there it would run that agent's containers twice),
/// nor of a process or node out of descriptors or memory (every directory would fail alike:
/// [`shortage_hint`] says what helps).
fn state_dir_hint(error: &StateDirError) -> &'static str {
    match error {
        StateDirError::RecordsOfRunningAgent { .. } => "",
        StateDirError::Io { source, .. } if is_shortage(source) => "",
        // Its records are not read from another directory: what a dead agent left running
        // there would run beside this agent's copies.
        _ => {
            " (repair it, or choose another with --state-dir once nothing its containers/ records still runs)"
        }
    }
}

/// What an operator can do about a shortage of descriptors (`EMFILE`, `ENFILE`) found
/// anywhere in an error's chain of sources; empty for any other error (a shortage of memory
/// has no one setting to point at). Said once, where the agent
/// prints why it could not run.
pub fn shortage_hint(error: &(dyn std::error::Error + 'static)) -> &'static str {
    let mut cause = Some(error);
    while let Some(error) = cause {
        if let Some(io) = error.downcast_ref::<std::io::Error>() {
            return match rustix::io::Errno::from_io_error(io) {
                Some(rustix::io::Errno::MFILE) => {
                    " (the agent is out of file descriptors: raise its open-files limit, ulimit -n or LimitNOFILE=)"
                }
                Some(rustix::io::Errno::NFILE) => {
                    " (the node's table of open files is full: see fs.file-max and fs.file-nr)"
                }
                _ => "",
            };
        }
        cause = error.source();
    }
    ""
}

/// The state directory's name in the manifests folder when `--state-dir` is not given (hidden,
/// so the folder's scan skips it).
pub const DEFAULT_STATE_DIR: &str = ".probelet-state";

/// What a shutdown may take beyond the largest grace period before everything is SIGKILLed.
pub const SHUTDOWN_MARGIN: Duration = Duration::from_secs(5);
/// The agent's own executable, as the processes it spawns resolve it.
const SELF_EXE: &str = "/proc/self/exe";
/// The review rate limiter's budget: `--qps`/`--burst`, except that a `--qps` of no limit (zero,
/// negative, NaN or infinite, which status writes accept) is the default 50/100 here. Reviews
/// are what a client without a token can make the agent send; a flood of made-up tokens sent
/// 8,900 TokenReviews in 8 s with no limit. (client-go, the kubelet's, turns a QPS of 0 into
/// its default of 5.)
pub fn review_budget(qps: f64, burst: u32) -> (f64, u32) {
    if qps.is_finite() && qps > 0.0 { (qps, burst) } else { (DEFAULT_QPS, DEFAULT_BURST) }
}

/// `--qps`'s and `--burst`'s defaults.
const DEFAULT_QPS: f64 = 50.0;
const DEFAULT_BURST: u32 = 100;

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
    /// What the modes share, for an agent on node `node` (its events say so).
    pub fn new(node: &str) -> Result<Common, AgentError> {
        let registry = PrometheusRegistry::global()?;
        let clock: SharedClock = Arc::new(SystemClock);
        let pods = PodRegistry::new();
        Ok(Common {
            registry,
            events: EventLog::new(clock.clone(), node),
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
        // Local exec probes hold the agent's descriptors while they run.
        let nofile =
            rustix::process::getrlimit(rustix::process::Resource::Nofile).current.unwrap_or(u64::MAX);
        config.max_exec_probes_in_flight =
            Some(crate::host::runtime::exec_probe_cap(config.max_probes_in_flight, nofile));
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
    ) -> Result<(BaseUrl, oneshot::Sender<()>, tokio::task::JoinHandle<std::io::Result<()>>), AgentError>
    {
        let listen = args.listen;
        if let Some(health) = args.healthz_listen.filter(|h| crate::cli::healthz_is_listen(*h, listen)) {
            return Err(AgentError::HealthzIsListen(health));
        }
        let reviewed = reviewed_by(args.authorization_mode, &listen, api)?;
        let tls = match (&args.tls_cert_file, &args.tls_private_key_file) {
            (Some(cert), Some(key)) => {
                Some(tls::from_files(CertFiles { cert: cert.clone(), key: key.clone() })?)
            }
            _ if reviewed.is_some() => {
                // The kubelet's own answer to a missing --tls-cert-file: bearer tokens are not
                // to cross the network in the clear.
                let acceptor = tls::self_signed(&args.node_name)?;
                tracing::info!(
                    node = %args.node_name,
                    "Serving HTTPS with a self-signed certificate made at start (no --tls-cert-file given)"
                );
                Some(acceptor)
            }
            _ => None,
        };
        let listener = std::net::TcpListener::bind(listen)
            .map_err(|source| AgentError::Listen { addr: listen, source })?;
        let addr = listener.local_addr().map_err(|source| AgentError::Listen { addr: listen, source })?;
        let state = ServeState {
            registry: self.registry.clone(),
            pipeline,
            pods: self.pods.clone(),
            history: self.history.clone(),
            events: self.events.clone(),
            ready: self.ready.clone(),
            heartbeat: Heartbeat::new(),
        };
        // Beaten by the main thread, which this runs on.
        state.heartbeat.keep_beating();
        let (stop, stopped) = oneshot::channel::<()>();
        let configured = args.http_max_connections as usize;
        let nofile =
            rustix::process::getrlimit(rustix::process::Resource::Nofile).current.unwrap_or(u64::MAX);
        let (max_connections, health_connections) =
            crate::host::runtime::listener_caps(configured, args.healthz_listen.is_some(), nofile);
        if max_connections < configured {
            tracing::info!(
                max_connections,
                configured,
                nofile,
                "HTTP connections capped below --http-max-connections by the file descriptor limit"
            );
        }
        let limits =
            Limits { header_read_timeout: Duration::from_secs(args.http_header_timeout), max_connections };
        let node = args.node_name.clone();
        let review_budget = review_budget(args.qps, args.burst);
        let app = move |state| match reviewed {
            Some(client) => {
                // A bucket of its own: reviews that clients ask for never delay status writes.
                let limiter = RateLimiter::new(review_budget.0, review_budget.1);
                router_with_reviews(state, Reviewer::new(client, node, limiter))
            }
            None => {
                if let Some(warning) = exposure_warning(&addr) {
                    tracing::warn!(address = %addr, "{warning}");
                    router(state)
                } else {
                    router_for_loopback(state)
                }
            }
        };
        // Both listeners stop with the one signal.
        let stopped = futures::FutureExt::shared(stopped);
        let health = match args.healthz_listen {
            Some(listen) => {
                let limits = Limits { max_connections: health_connections, ..limits };
                Some(serve_health(listen, &state, limits, stopped.clone())?)
            }
            None => None,
        };
        let base = BaseUrl {
            scheme: if tls.is_some() { "https" } else { "http" },
            addr,
            health: health.as_ref().map(|(addr, _)| *addr),
        };
        let server =
            serve_router_on_own_thread(listener, app(state), limits, tls, async move { drop(stopped.await) })
                .map_err(|source| AgentError::Listen { addr, source })?;
        let server = match health {
            None => server,
            Some((_, health)) => tokio::spawn(async move {
                let (main, health) = futures::future::join(server, health).await;
                main.map_err(std::io::Error::other)??;
                health.map_err(std::io::Error::other)?
            }),
        };
        Ok((base, stop, server))
    }
}

/// Where the agent's endpoints are served: `http://` or `https://` and the bound address, and
/// the health listener's address when there is one.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BaseUrl {
    pub scheme: &'static str,
    pub addr: SocketAddr,
    pub health: Option<SocketAddr>,
}

impl BaseUrl {
    /// The start line's mention of the health listener: `; health http://ADDR/healthz`, or
    /// nothing.
    pub fn health_note(&self) -> String {
        self.health.map(|addr| format!("; health http://{addr}/healthz")).unwrap_or_default()
    }
}

impl std::fmt::Display for BaseUrl {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}://{}", self.scheme, self.addr)
    }
}

/// The health listener (`--healthz-listen`): `/healthz` and `/readyz` alone, plain HTTP, on a
/// thread and with connections of its own, as the kubelet serves its healthz on a port of its
/// own. The main listener's clients, however many and however they behave, take nothing from
/// it: before, 600 clients reconnecting as fast as they were closed made 7 of 10 two-second
/// health checks fail on the main listener (docs/security.md, "Connections"). Its connections
/// (`limits`) come out of the main listener's share of the descriptors
/// ([`crate::host::runtime::listener_caps`]). Its bound address, and the task that ends with it.
fn serve_health(
    listen: SocketAddr,
    state: &ServeState,
    limits: Limits,
    stopped: impl std::future::Future + Send + 'static,
) -> Result<(SocketAddr, tokio::task::JoinHandle<std::io::Result<()>>), AgentError> {
    let listener =
        std::net::TcpListener::bind(listen).map_err(|source| AgentError::Listen { addr: listen, source })?;
    let addr = listener.local_addr().map_err(|source| AgentError::Listen { addr: listen, source })?;
    let server =
        serve_router_on_own_thread(listener, health_router(state.clone()), limits, None, async move {
            drop(stopped.await);
        })
        .map_err(|source| AgentError::Listen { addr, source })?;
    Ok((addr, server))
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
        (AuthorizationMode::Auto, Some(api)) if !listen.ip().to_canonical().is_loopback() => Ok(Some(api)),
        _ => Ok(None),
    }
}

/// The warning for a listener that serves the private endpoints without authentication, if
/// anyone beyond this host can reach it.
pub fn exposure_warning(addr: &SocketAddr) -> Option<&'static str> {
    (!addr.ip().to_canonical().is_loopback()).then_some(
        "The HTTP listener is not on loopback and serves /pods (pod specs, environment values included), \
         /pods/{namespace}/{name}/probes (exec probe output), /events, /metrics and the status page / \
         without authentication",
    )
}

/// One agent per manifests folder, whatever its state directory: two would start every
/// container twice. The claim is two abstract Unix sockets: one named after the folder's
/// canonical path and the agent's mount namespace (the same path in two containers is two
/// folders), one after the folder's device, inode and birth time (the same folder under another
/// path, a bind mount). The kernel releases them when the agent dies, however it dies, and
/// deleting and re-creating the folder (its state directory and that directory's lock with it)
/// does not release the first.
///
/// Abstract sockets have no permissions, so anyone can take a name first. A taken name counts
/// as another agent only when its holder listens and runs as this agent's user; a squatter
/// (another user, or a socket that does not listen) is warned about and ignored. Abstract
/// sockets belong to a network namespace: agents in two that share one folder are told apart
/// only by the state directory's lock.
fn claim_folder(manifests: &Path) -> Result<Vec<std::os::unix::net::UnixListener>, AgentError> {
    use std::os::unix::fs::MetadataExt;
    let canonical = std::fs::canonicalize(manifests).unwrap_or_else(|_| manifests.to_owned());
    let mount_namespace = std::fs::read_link("/proc/self/ns/mnt").unwrap_or_default();
    let mut names = vec![folder_claim_name(&canonical, &mount_namespace)];
    if let Ok(folder) = std::fs::metadata(&canonical) {
        // With its birth time where the file system keeps one: an inode number is reused once
        // its folder is deleted, and a new folder must not read as an old agent's.
        let born = folder.created().ok().and_then(|t| t.duration_since(std::time::UNIX_EPOCH).ok());
        names.push(folder_inode_claim_name(folder.dev(), folder.ino(), born));
    }
    let mut claims = Vec::with_capacity(names.len());
    for name in &names {
        claims.extend(claim_name(name, &canonical)?);
    }
    Ok(claims)
}

/// Takes the abstract socket `name` for `canonical`; `Err` if another agent of this user holds
/// it or the socket cannot be made (no descriptor left, say), `None` if a stranger holds it
/// (see [`claim_folder`]).
fn claim_name(name: &str, canonical: &Path) -> Result<Option<std::os::unix::net::UnixListener>, AgentError> {
    use std::os::linux::net::SocketAddrExt;
    let addr = match std::os::unix::net::SocketAddr::from_abstract_name(name.as_bytes()) {
        Ok(addr) => addr,
        Err(error) => {
            tracing::warn!(%error, folder = %canonical.display(), "cannot claim the manifests folder");
            return Ok(None);
        }
    };
    let bind = || std::os::unix::net::UnixListener::bind_addr(&addr);
    match bind() {
        Ok(listener) => Ok(Some(listener)),
        Err(e) if e.kind() == std::io::ErrorKind::AddrInUse => {
            let holder = std::os::unix::net::UnixStream::connect_addr(&addr).and_then(|stream| {
                rustix::net::sockopt::socket_peercred(&stream).map_err(std::io::Error::from)
            });
            match holder {
                Ok(holder) if holder.uid == rustix::process::getuid() => {
                    // Another agent of this user, or one that is stopping: its name is free
                    // within the wait. Only the bind is tried again: each connect would stay
                    // queued on a listener that never accepts.
                    let mut held = HeldByAnotherAgent::new();
                    while held.wait() {
                        match bind() {
                            Ok(listener) => return Ok(Some(listener)),
                            Err(e) if e.kind() == std::io::ErrorKind::AddrInUse => {}
                            Err(source) => return claim_failed(source, canonical),
                        }
                    }
                    Err(AgentError::ManifestsInUse(canonical.to_owned()))
                }
                Ok(holder) => {
                    tracing::warn!(folder = %canonical.display(), holder_uid = holder.uid.as_raw(), holder_pid = holder.pid.as_raw_nonzero().get(), "the manifests folder's claim is held by another user's process; going on without it");
                    Ok(None)
                }
                Err(error) => {
                    tracing::warn!(folder = %canonical.display(), %error, "the manifests folder's claim is held by a socket that does not answer; going on without it");
                    Ok(None)
                }
            }
        }
        Err(source) => claim_failed(source, canonical),
    }
}

/// What a claim that cannot be made at all means.
fn claim_failed(
    source: std::io::Error,
    canonical: &Path,
) -> Result<Option<std::os::unix::net::UnixListener>, AgentError> {
    match source {
        // Out of descriptors or memory: without the claim a second agent on the folder with
        // another state directory would start every container again, so this is no place to
        // go on. A socket the system does not allow at all (a unit's `RestrictAddressFamilies`,
        // an LSM) is no passing shortage: the state directory's lock guards the common case.
        source if is_shortage(&source) => Err(AgentError::Claim { folder: canonical.to_owned(), source }),
        error => {
            tracing::warn!(%error, folder = %canonical.display(), "cannot claim the manifests folder; a second agent on it with a state directory of its own would not be refused");
            Ok(None)
        }
    }
}

/// The abstract socket name that claims the folder with this device and inode number (and
/// birth time, where known), whatever path reaches it.
pub fn folder_inode_claim_name(device: u64, inode: u64, born: Option<Duration>) -> String {
    let born = born.map_or(0, |t| t.as_nanos());
    format!("probelet-manifests-inode-{device:x}-{inode:x}-{born:x}")
}

/// The abstract socket name that claims `folder` (canonical) in `mount_namespace`.
pub fn folder_claim_name(folder: &Path, mount_namespace: &Path) -> String {
    let mut hash = probelet_actors::fnv::Fnv1a64::new();
    hash.write(mount_namespace.as_os_str().as_encoded_bytes());
    hash.write(b"\0");
    hash.write(folder.as_os_str().as_encoded_bytes());
    format!("probelet-manifests-{:016x}", hash.finish())
}

/// Why `path` is no folder to read manifests from: missing, a symlink loop, or a file.
fn not_a_folder(path: &Path) -> String {
    match std::fs::metadata(path) {
        Err(error) if error.kind() == std::io::ErrorKind::NotFound => "no such folder".to_owned(),
        Err(error) => error.to_string(),
        Ok(_) => "not a directory".to_owned(),
    }
}

/// Standalone mode: pods from `manifests`, containers as local processes.
pub async fn run_standalone(args: &RunArgs, manifests_as_given: PathBuf) -> Result<(), AgentError> {
    if !manifests_as_given.is_dir() {
        let why = not_a_folder(&manifests_as_given);
        return Err(AgentError::NoManifests { path: manifests_as_given, why });
    }
    // Resolved once, and used for everything: the claim, the container records and every scan.
    // Were the scans to follow a symlink swapped later, this agent would run another folder's
    // pods, claimed by another agent, and a container would run twice (docs/reliability.md).
    let manifests = std::fs::canonicalize(&manifests_as_given)
        .map_err(|e| AgentError::NoManifests { path: manifests_as_given.clone(), why: e.to_string() })?;
    // Before the claim and the sweep of what a dead agent left: a SIGTERM from here on waits
    // for the sweep's end, and then stops the agent in order.
    let listening = ShutdownSignals::listen()?;
    let _claim = claim_folder(&manifests)?;
    let mut common = Common::new(&args.node_name)?;
    common.configure(args);
    // Containers and exec probes run under the agent's own `container-shim`, so that whatever
    // they start ends with them. `/proc/self/exe` is the running image even if the file was
    // replaced since (an upgrade, a rebuild), as the shim must speak this agent's protocol.
    let shim = std::path::PathBuf::from(SELF_EXE);
    let runner = LocalCommandRunner::new().with_shim(shim.clone());
    let pipeline = common.pipeline(Arc::new(runner.clone()));
    let state_dir = args.state_dir.clone().unwrap_or_else(|| manifests.join(DEFAULT_STATE_DIR));
    // Read before the sweep removes the records.
    let ran_before = pods_that_ran(&state_dir);
    let (groups, leftovers) = ContainerGroups::open(&state_dir)?;
    // A container can kill its own shim: what it left running then re-parents to the agent,
    // which kills it (docs/reliability.md).
    let orphans = match OrphanReaper::adopt_orphans() {
        Ok(reaper) => Some(Arc::new(reaper)),
        Err(error) => {
            tracing::warn!(%error, "cannot become a child subreaper: what a container whose shim was killed started may outlive it");
            None
        }
    };
    // What a forced stop kills, from now on: a SIGTERM during startup stops the agent in order
    // too, and a second one forces the stop from here.
    let mut terminating = watch_shutdown_signals(listening, groups.clone(), orphans.clone())?;
    if let Some(orphans) = &orphans {
        orphans.clone().start();
    }
    let budget = FdBudget::of_this_process();
    tracing::info!(containers = budget.max_containers(), "file descriptor budget");
    if let Some(warning) = budget.no_room_warning() {
        tracing::warn!("{warning}");
    }
    if leftovers > 0 {
        say(format_args!(
            "probelet: killed {leftovers} container process group(s) a previous agent left running ({})",
            crate::logging::escape_controls(&state_dir.display().to_string())
        ));
    }
    if *terminating.borrow() == ShutdownStage::Forced {
        // A second request to stop came during start-up: the watcher, handed the groups, ends
        // the process (exit 1). Nothing is started meanwhile.
        std::future::pending::<()>().await;
    }
    let runtime = actix::Actor::start(
        ProcessRuntime::new(runner, Arc::new(common.events.clone()), common.clock.clone())
            .with_groups(groups.clone())
            .with_fd_budget(budget)
            .with_shim(shim)
            .with_feature_gates(&pipeline.feature_gates),
    );
    let (base, stop_server, server) = common.serve(args, pipeline.clone(), None).await?;
    say(format_args!(
        "probelet {}: standalone on {}, node {}; {base}/pods, /metrics{}",
        env!("CARGO_PKG_VERSION"),
        crate::logging::escape_controls(&manifests.display().to_string()),
        crate::logging::escape_controls(&args.node_name),
        base.health_note()
    ));
    let runtime_alive = runtime.clone();
    let kubelet = start_kubelet(StandaloneKubelet::new(
        KubeletConfig {
            manifests_as_given: (manifests_as_given != manifests).then_some(manifests_as_given),
            manifests,
            node_name: args.node_name.clone(),
            ran_before,
            groups: groups.clone(),
            rescan_period: Duration::from_secs(2),
            // The runtime's: the kubelet's pod worker requeues a synced pod and one in
            // back-off by its one `resyncInterval`.
            resync_period: RESYNC_INTERVAL,
            housekeeping_period: Duration::from_secs(2),
        },
        pipeline,
        runtime,
        common.pods.clone(),
        common.history.clone(),
        common.ready.clone(),
    ));

    let kubelet_alive = kubelet.clone();
    let runtime_alive = move || runtime_alive.connected();
    let kubelet_alive = move || kubelet_alive.connected();
    let parts: [(&'static str, &dyn Fn() -> bool); 2] =
        [("the container runtime", &runtime_alive), ("the pod source", &kubelet_alive)];
    tokio::select! {
        _ = terminating.wait_for(|stage| *stage != ShutdownStage::Running) => {}
        part = first_gone(&parts) => {
            // A panic (logged above it) stopped an actor: the agent would go on serving
            // statuses nothing updates, and containers nothing stops. Better to end it all,
            // so that whatever restarts the agent starts afresh (docs/reliability.md).
            tracing::error!(part, "an internal part of the agent stopped; killing every container and exiting");
            let killed = groups.kill_all();
            sweep(orphans.as_deref());
            say(format_args!("probelet: {part} stopped unexpectedly, {killed} container process group(s) killed"));
            return Err(AgentError::Internal(part));
        }
    }
    say(format_args!(
        "probelet: shutting down, stopping containers (at most {}s)",
        groups.largest_grace_period().saturating_add(SHUTDOWN_MARGIN).as_secs()
    ));
    let _ = kubelet.send(Shutdown).await;
    let _ = stop_server.send(());
    let _ = server.await;
    sweep(orphans.as_deref());
    if *terminating.borrow() == ShutdownStage::Forced {
        // The containers stopped because the watcher killed them; it ends the process (exit 1).
        std::future::pending::<()>().await;
    }
    Ok(())
}

/// A last look for what a container whose shim was killed left running, as the agent stops
/// (its orphans would re-parent to init once the agent is gone).
fn sweep(orphans: Option<&OrphanReaper>) {
    if let Some(orphans) = orphans {
        orphans.sweep();
    }
}

/// Waits until one of `parts` is no longer alive (an actor whose handler panicked is gone);
/// returns its name. Looks once a second.
async fn first_gone(parts: &[(&'static str, &dyn Fn() -> bool)]) -> &'static str {
    let mut ticks = tokio::time::interval(Duration::from_secs(1));
    loop {
        ticks.tick().await;
        if let Some((name, _)) = parts.iter().find(|(_, alive)| !alive()) {
            return name;
        }
    }
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

/// SIGTERM, SIGINT and SIGHUP listened for from before the agent touches its state directory,
/// and watched from then on by a thread of their own, with its own tokio runtime, so that
/// neither a saturated main thread nor a stuck actor can keep the agent from stopping: a signal
/// from then on is kept for the watcher, instead of taking its default action. Without it a
/// SIGTERM during the sweep of what a dead agent left (1,500 containers take a while) ended the
/// agent at once, the rest still running. Watched as they come, two signals during start-up are
/// two: they were one while nothing watched them before the sweep's end (the signals of a kind
/// that come before they are watched are told once), so a second one did not force the stop.
struct ShutdownSignals {
    /// Where the shutdown is, as the watcher tells it.
    stage: tokio::sync::watch::Receiver<ShutdownStage>,
    /// What a forced stop kills, given to the watcher by [`watch_shutdown_signals`] once the
    /// sweep of what a dead agent left is over; dropped unsent when the agent does not start.
    handoff: oneshot::Sender<ForcedStopKills>,
}

/// The container groups and the orphan reaper a forced stop kills and sweeps.
type ForcedStopKills = (ContainerGroups, Option<Arc<OrphanReaper>>);

impl ShutdownSignals {
    fn listen() -> Result<ShutdownSignals, AgentError> {
        let (stage, terminating) = tokio::sync::watch::channel(ShutdownStage::Running);
        let (handoff, handed) = oneshot::channel();
        spawn_signal_watcher(move |signals| watch_signals(signals, stage, handed))?;
        Ok(ShutdownSignals { stage: terminating, handoff })
    }
}

/// Listens for the signals that stop the agent from now on, and runs `watch` on them on a
/// thread and a runtime of its own: the agent's threads may all be busy (or blocked, as during
/// a credential plugin's run) when a signal comes.
fn spawn_signal_watcher<W, F>(watch: W) -> Result<(), AgentError>
where
    W: FnOnce(Signals) -> F + Send + 'static,
    F: std::future::Future<Output = ()>,
{
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(AgentError::SignalWatcher)?;
    let signals = {
        let _watcher_runtime = runtime.enter();
        Signals::new()
    };
    std::thread::Builder::new()
        .name("probelet-signals".to_owned())
        .spawn(move || runtime.block_on(watch(signals)))
        .map_err(AgentError::SignalWatcher)?;
    Ok(())
}

/// The watcher's thread. The first signal moves the stage to `Stopping` (the main thread then
/// shuts down in order, once started); the second one, or the largest grace period plus
/// [`SHUTDOWN_MARGIN`] after the first, moves it to `Forced`, SIGKILLs every container group and
/// exits 1. Nothing is forced before the groups are handed over: a second signal during
/// start-up forces the stop once the sweep of what a dead agent left is over, never in its
/// middle, which would leave the rest of the dead agent's containers running.
async fn watch_signals(
    signals: Signals,
    stage: tokio::sync::watch::Sender<ShutdownStage>,
    handed: oneshot::Receiver<ForcedStopKills>,
) {
    let mut requests = ShutdownRequests::new(signals);
    let deadline =
        |(groups, _): &ForcedStopKills| groups.largest_grace_period().saturating_add(SHUTDOWN_MARGIN);
    // The agent did not start: it ends with its own error.
    let Some(((groups, orphans), why)) = until_forced(&mut requests, &stage, handed, deadline).await else {
        return;
    };
    match why {
        Forced::SecondRequest => tracing::warn!("second signal, killing every container"),
        Forced::Deadline(deadline) => {
            tracing::warn!(?deadline, "containers did not stop within the shutdown deadline, killing them")
        }
    }
    // Told first, so that the main thread, seeing its containers gone, does not exit 0.
    stage.send_replace(ShutdownStage::Forced);
    let killed = groups.kill_all();
    // Never waits for a sweep that is running: a second signal always ends the agent.
    if let Some(orphans) = &orphans {
        orphans.sweep_unless_busy();
    }
    say_last(format_args!("probelet: shutdown forced, {killed} container process group(s) killed"));
    crate::logging::queue::exit(1);
}

/// Why the stop is forced.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Forced {
    /// A second request to stop came.
    SecondRequest,
    /// The containers did not stop within this long after the first request.
    Deadline(Duration),
}

/// The watcher's decisions, apart from what it then kills: waits for the first request to stop
/// (stage `Stopping`), then for what is handed over to kill, then for a second request or the
/// deadline `deadline_of` reads from what was handed, counted from the hand-over. A second
/// request before the hand-over is told at once (stage `Forced`) and forces the stop as soon as
/// the hand-over comes. `None` when nothing is
/// handed over: the agent did not start.
async fn until_forced<S: SignalSource, T>(
    requests: &mut ShutdownRequests<S>,
    stage: &tokio::sync::watch::Sender<ShutdownStage>,
    mut handed: oneshot::Receiver<T>,
    deadline_of: impl Fn(&T) -> Duration,
) -> Option<(T, Forced)> {
    requests.next().await;
    stage.send_replace(ShutdownStage::Stopping);
    let mut second = false;
    let handed = loop {
        tokio::select! {
            handed = &mut handed => break handed.ok()?,
            () = requests.next(), if !second => {
                second = true;
                // Told at once, so that the main thread, handing over when start-up is done,
                // starts nothing: the hand-over and this thread's kill after it would otherwise
                // race the start of the pods (under load the pods were started first).
                stage.send_replace(ShutdownStage::Forced);
            }
        }
    };
    if second {
        return Some((handed, Forced::SecondRequest));
    }
    let deadline = deadline_of(&handed);
    tokio::select! {
        () = tokio::time::sleep(deadline) => Some((handed, Forced::Deadline(deadline))),
        () = requests.next() => Some((handed, Forced::SecondRequest)),
    }
}

/// How close to a request's first signal another one is the same request. `timeout(1)` sends
/// its signal to the agent and then to its own process group, the agent included: two SIGTERMs
/// microseconds apart, for one request to stop. When the watcher read the first before the
/// second landed, the second forced the stop (every container SIGKILLed, exit 1) where one
/// graceful stop was asked for. A person's second Ctrl-C comes later than this.
const SAME_REQUEST: Duration = Duration::from_millis(100);

/// Where signals come from: [`Signals`], or a test's own.
trait SignalSource {
    /// Resolves on the next signal.
    fn recv(&mut self) -> impl std::future::Future<Output = ()> + Send;
}

impl SignalSource for Signals {
    fn recv(&mut self) -> impl std::future::Future<Output = ()> + Send {
        Signals::recv(self)
    }
}

/// Requests to stop: signals, those within [`SAME_REQUEST`] of a request's first signal counted
/// in it.
struct ShutdownRequests<S> {
    signals: S,
    /// When the last request began.
    began: Option<tokio::time::Instant>,
}

impl<S: SignalSource> ShutdownRequests<S> {
    fn new(signals: S) -> Self {
        ShutdownRequests { signals, began: None }
    }

    /// Resolves on the next signal that is not part of the request before.
    async fn next(&mut self) {
        loop {
            self.signals.recv().await;
            let now = tokio::time::Instant::now();
            if self.began.is_some_and(|began| now.duration_since(began) < SAME_REQUEST) {
                tracing::debug!(
                    "a signal within {SAME_REQUEST:?} of the request's first, taken as part of it"
                );
                continue;
            }
            self.began = Some(now);
            return;
        }
    }
}

/// Hands the watcher of [`ShutdownSignals`] what a forced stop kills, and returns where the
/// shutdown is: `Stopping` from the first signal (one that came before included), `Forced` from
/// the second or the deadline.
fn watch_shutdown_signals(
    listening: ShutdownSignals,
    groups: ContainerGroups,
    orphans: Option<Arc<OrphanReaper>>,
) -> Result<tokio::sync::watch::Receiver<ShutdownStage>, AgentError> {
    listening.handoff.send((groups, orphans)).map_err(|_| AgentError::Internal("the signal watcher"))?;
    Ok(listening.stage)
}

/// The cluster modes' signals, listened for from the very start of `run`, before anything
/// that can wait: a kubeconfig's credential plugin (kube runs it while it builds the client,
/// blocking the main thread; `aws eks get-token` with no network waits its own timeouts), and
/// everything after. Watched on a thread of their own, so that a blocked main thread cannot
/// keep the agent from ending. Before, they were listened for only once the agent had started:
/// a SIGTERM during start-up took its default action, the agent died of it (exit 143) and left
/// the plugin running (docs/reliability.md, "A signal during a cluster agent's start-up").
///
/// A request to stop during start-up ends the agent at once, exit 0: nothing is probed or owed
/// yet; a credential plugin it is waiting for is ended too ([`end_own_children`]). From
/// [`ClusterSignals::stop_on_signal`] on, the first request stops the agent in order and a
/// second one ends it at once (exit 1), saying `forced`. These modes run no containers.
pub(crate) struct ClusterSignals {
    /// Told that start-up is over, with the lines the watcher says on a request to stop;
    /// dropped unsent when the agent does not start.
    started: oneshot::Sender<StopLines>,
    /// Resolves on the first request to stop once started (or if the watcher is gone).
    stop: oneshot::Receiver<()>,
}

/// What the watcher says on a second request to stop.
struct StopLines {
    forced: &'static str,
}

/// Set by the signal watcher when a request to stop comes during a cluster agent's start-up,
/// before it ends the agent's children and exits 0 ([`stopping_during_start_up`]).
static STOPPING_DURING_START_UP: AtomicBool = AtomicBool::new(false);

/// Whether a cluster agent is being stopped during its start-up: its signal watcher ends it
/// (exit 0) in a moment, and a start-up error meanwhile is that stop's doing (the credential
/// plugin it ended), not one to report.
pub fn stopping_during_start_up() -> bool {
    STOPPING_DURING_START_UP.load(std::sync::atomic::Ordering::SeqCst)
}

/// The line said when a request to stop comes during a cluster agent's start-up.
const STOPPED_DURING_START_UP: &str = "probelet: stopped during start-up, nothing was running yet";

impl ClusterSignals {
    pub(crate) fn listen() -> Result<ClusterSignals, AgentError> {
        let (started, starting) = oneshot::channel();
        let (stopping, stop) = oneshot::channel();
        spawn_signal_watcher(move |signals| watch_cluster_signals(signals, starting, stopping))?;
        Ok(ClusterSignals { started, stop })
    }

    /// Start-up is over: waits for a request to stop, says `stopping`, then runs `shutdown`; a
    /// second request meanwhile ends the agent at once (exit 1), saying `forced`.
    pub(crate) async fn stop_on_signal(
        self,
        stopping: &str,
        shutdown: impl std::future::Future<Output = ()>,
        forced: &'static str,
    ) {
        let ClusterSignals { started, stop } = self;
        if started.send(StopLines { forced }).is_err() || stop.await.is_err() {
            // The watcher is gone (a bug: its panic is in the log): nothing could stop the
            // agent but SIGKILL, which would leave the owed writes unflushed.
            tracing::error!("the signal watcher stopped; shutting down");
        }
        say(format_args!("{stopping}"));
        shutdown.await;
    }
}

/// The cluster modes' watcher thread (see [`ClusterSignals`]).
async fn watch_cluster_signals(
    signals: Signals,
    starting: oneshot::Receiver<StopLines>,
    stopping: oneshot::Sender<()>,
) {
    let mut requests = ShutdownRequests::new(signals);
    let lines = tokio::select! {
        // A start-up that ends as the signal comes has started: it stops in order.
        biased;
        started = starting => match started {
            Ok(lines) => lines,
            // The agent did not start: it ends with its own error.
            Err(_) => return,
        },
        () = requests.next() => {
            // Before the children are ended: start-up fails as they end (a credential plugin
            // killed is an error of kube's), and the main thread must not report that failure
            // and exit 1 before this thread exits 0.
            STOPPING_DURING_START_UP.store(true, std::sync::atomic::Ordering::SeqCst);
            let ended = end_own_children();
            tracing::info!(ended, "a request to stop during start-up");
            say_last(format_args!("{STOPPED_DURING_START_UP}"));
            crate::logging::queue::exit(0);
        }
    };
    requests.next().await;
    let _ = stopping.send(());
    requests.next().await;
    tracing::warn!("second signal, exiting without waiting for the shutdown");
    say_last(format_args!("{}", lines.forced));
    crate::logging::queue::exit(1);
}

/// SIGTERMs the agent's own child processes and everything they started, and returns how
/// many: during a cluster agent's start-up the only child is a kubeconfig's credential plugin
/// kube is waiting for, which would otherwise outlive the agent, and a plugin that is a shell
/// running its program as a child (`sh -c 'aws eks get-token …'`, no `exec`) would leave that
/// program running once the shell is gone (docs/reliability.md, "A signal during a cluster
/// agent's start-up").
///
/// The whole tree is listed before anything is signalled ([`own_descendants`]): a process's
/// children are read while it runs, so none is handed to another parent unseen. Parents are
/// then signalled before their children, so that a shell cannot start its next command on its
/// child's end. Each process is signalled through a pidfd pinned before its start time is
/// checked, so a PID reused meanwhile is never signalled.
fn end_own_children() -> usize {
    use probelet_actors::process::{Delivery, Signal, signal_process};
    own_descendants()
        .into_iter()
        .filter(|&(pid, start)| match signal_process(pid, start, Signal::Term) {
            Ok(Delivery::Sent) => true,
            Ok(_) => false,
            Err(error) => {
                tracing::warn!(pid, %error, "cannot end a child process of the agent");
                false
            }
        })
        .count()
}

/// The most processes [`own_descendants`] lists: a plugin that forks without end cannot keep
/// the agent from exiting.
const MAX_DESCENDANTS: usize = 1024;

/// The agent's children and their descendants, parents first, each with its start time.
/// Each is checked to be its parent's child (its parent PID, read after the parent was listed),
/// and a parent's list of children is kept only if the parent is still the same process once
/// it is read (its start time again: gone, its children may be another's and its PID too).
fn own_descendants() -> Vec<(u32, u64)> {
    use probelet_actors::process::{ProcessStat, children, children_of};
    let me = i32::try_from(std::process::id()).unwrap_or_default();
    let mut found = Vec::new();
    let mut next: std::collections::VecDeque<_> = children().into_iter().map(|pid| (pid, me)).collect();
    while let Some((pid, parent)) = next.pop_front() {
        if found.len() >= MAX_DESCENDANTS {
            break;
        }
        let Ok(raw) = u32::try_from(pid.as_raw_pid()) else { continue };
        let Ok(stat) = ProcessStat::read(pid) else { continue };
        if stat.ppid != parent || stat.zombie || found.iter().any(|&(seen, _)| seen == raw) {
            continue;
        }
        found.push((raw, stat.start));
        let listed = children_of(pid);
        if ProcessStat::read(pid).is_ok_and(|now| now.start == stat.start && !now.zombie) {
            next.extend(listed.into_iter().map(|child| (child, pid.as_raw_pid())));
        }
    }
    found
}

/// SIGTERM, SIGINT and SIGHUP, listened for once for the agent's whole life, so that a second
/// signal during shutdown is seen. SIGHUP (the terminal or SSH session that started the agent
/// closed) stops it as SIGTERM does: its default action would end the agent at once and leave
/// every container running until the next agent on the folder killed them.
pub struct Signals {
    terminate: Option<tokio::signal::unix::Signal>,
    interrupt: Option<tokio::signal::unix::Signal>,
    hangup: Option<tokio::signal::unix::Signal>,
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
            hangup: listen(tokio::signal::unix::SignalKind::hangup(), "SIGHUP"),
        }
    }

    /// Resolves on the next SIGTERM, SIGINT or SIGHUP.
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
            () = next(&mut self.hangup) => {}
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

    /// Signals from a test: each message is one.
    struct TestSignals(tokio::sync::mpsc::UnboundedReceiver<()>);

    impl SignalSource for TestSignals {
        async fn recv(&mut self) {
            if self.0.recv().await.is_none() {
                std::future::pending::<()>().await;
            }
        }
    }

    /// The watcher's decisions on a test's signals, handed a grace of 30 s: the signal sender,
    /// the stage, the hand-over and the decision's task.
    #[allow(clippy::type_complexity)]
    fn watcher() -> (
        tokio::sync::mpsc::UnboundedSender<()>,
        tokio::sync::watch::Receiver<ShutdownStage>,
        oneshot::Sender<Duration>,
        tokio::task::JoinHandle<Option<(Duration, Forced)>>,
    ) {
        let (send, signals) = tokio::sync::mpsc::unbounded_channel();
        let (stage, watched) = tokio::sync::watch::channel(ShutdownStage::Running);
        let (hand, handed) = oneshot::channel();
        let decided = tokio::spawn(async move {
            let mut requests = ShutdownRequests::new(TestSignals(signals));
            until_forced(&mut requests, &stage, handed, |grace: &Duration| *grace).await
        });
        (send, watched, hand, decided)
    }

    /// `timeout(1)` signals the agent, then its own group, the agent in it: two SIGTERMs
    /// microseconds apart are one request to stop, in order, not a second one that forces the
    /// stop (seen in the README's `cargo run` under `timeout`: every container SIGKILLed, exit
    /// 1). A signal later than [`SAME_REQUEST`] is a second request, and forces it.
    #[tokio::test(start_paused = true)]
    async fn two_signals_microseconds_apart_are_one_request_to_stop() {
        let (signal, mut stage, hand, decided) = watcher();
        signal.send(()).unwrap();
        stage.wait_for(|stage| *stage == ShutdownStage::Stopping).await.unwrap();
        tokio::time::advance(Duration::from_micros(50)).await;
        signal.send(()).unwrap();
        tokio::task::yield_now().await;
        hand.send(Duration::from_secs(30)).unwrap();
        tokio::time::advance(Duration::from_secs(10)).await;
        assert!(!decided.is_finished(), "the stop goes on in order");
        assert_eq!(*stage.borrow(), ShutdownStage::Stopping);

        signal.send(()).unwrap();
        let (grace, why) = decided.await.unwrap().expect("forced");
        assert_eq!((grace, why), (Duration::from_secs(30), Forced::SecondRequest));
    }

    /// Past [`SAME_REQUEST`], a second signal (a person's second Ctrl-C) forces the stop, at
    /// once once the groups are handed over; with no second one, the deadline does.
    #[tokio::test(start_paused = true)]
    async fn a_signal_later_than_the_same_request_forces_the_stop() {
        let (signal, mut stage, hand, decided) = watcher();
        signal.send(()).unwrap();
        stage.wait_for(|stage| *stage == ShutdownStage::Stopping).await.unwrap();
        tokio::time::advance(SAME_REQUEST + Duration::from_millis(1)).await;
        signal.send(()).unwrap();
        tokio::task::yield_now().await;
        hand.send(Duration::from_secs(30)).unwrap();
        assert_eq!(decided.await.unwrap(), Some((Duration::from_secs(30), Forced::SecondRequest)));

        let (signal, mut stage, hand, decided) = watcher();
        signal.send(()).unwrap();
        stage.wait_for(|stage| *stage == ShutdownStage::Stopping).await.unwrap();
        hand.send(Duration::from_secs(30)).unwrap();
        let started = tokio::time::Instant::now();
        assert_eq!(
            decided.await.unwrap(),
            Some((Duration::from_secs(30), Forced::Deadline(Duration::from_secs(30))))
        );
        assert_eq!(started.elapsed(), Duration::from_secs(30));
    }

    /// A second request before the hand-over is told at once, before anything is handed over:
    /// the main thread, handing over when start-up is done, then starts nothing.
    #[tokio::test(start_paused = true)]
    async fn a_second_request_before_the_hand_over_is_told_at_once() {
        let (signal, mut stage, hand, decided) = watcher();
        signal.send(()).unwrap();
        stage.wait_for(|stage| *stage == ShutdownStage::Stopping).await.unwrap();
        tokio::time::advance(SAME_REQUEST + Duration::from_millis(1)).await;
        signal.send(()).unwrap();
        let told = tokio::time::timeout(
            Duration::from_secs(1),
            stage.wait_for(|stage| *stage == ShutdownStage::Forced),
        );
        told.await.expect("told before the hand-over").unwrap();
        assert!(!decided.is_finished(), "nothing forced before the hand-over");
        hand.send(Duration::from_secs(30)).unwrap();
        assert_eq!(decided.await.unwrap(), Some((Duration::from_secs(30), Forced::SecondRequest)));
    }

    /// An agent that did not start hands nothing over: the watcher forces nothing.
    #[tokio::test(start_paused = true)]
    async fn nothing_is_forced_when_nothing_is_handed_over() {
        let (signal, mut stage, hand, decided) = watcher();
        signal.send(()).unwrap();
        stage.wait_for(|stage| *stage == ShutdownStage::Stopping).await.unwrap();
        drop(hand);
        assert_eq!(decided.await.unwrap(), None);
    }

    /// The claim of an agent that is stopping (here: let go 300 ms later) is waited for, as
    /// the state directory's lock is: a killed agent holds its abstract socket until its exit
    /// has closed its descriptors. Before, the next agent started then was refused as "served
    /// by another running agent" (once in 60 rounds of a helper's crash test).
    #[test]
    fn a_claim_let_go_within_the_wait_is_taken() {
        use std::os::linux::net::SocketAddrExt;
        let name = format!("probelet-test-claim-{}", std::process::id());
        let addr = std::os::unix::net::SocketAddr::from_abstract_name(name.as_bytes()).unwrap();
        let held = std::os::unix::net::UnixListener::bind_addr(&addr).unwrap();
        let holder = std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(300));
            drop(held);
        });
        let claim = claim_name(&name, Path::new("/folder"));
        assert!(matches!(claim, Ok(Some(_))), "taken once let go");
        holder.join().unwrap();
    }

    /// A `--manifests` path that is no folder says why: before, a missing path and a symlink
    /// loop were both `not a directory`.
    #[test]
    fn a_manifests_path_that_is_no_folder_says_why() {
        let base = std::env::temp_dir().join(format!("probelet-not-a-folder-{}", std::process::id()));
        std::fs::create_dir_all(&base).unwrap();
        let file = base.join("file");
        std::fs::write(&file, "x").unwrap();
        let looped = base.join("loop");
        let _ = std::os::unix::fs::symlink(&looped, &looped);
        assert_eq!(not_a_folder(&base.join("missing")), "no such folder");
        assert_eq!(not_a_folder(&file), "not a directory");
        assert!(not_a_folder(&looped).contains("symbolic links"), "{}", not_a_folder(&looped));
        let _ = std::fs::remove_dir_all(&base);
    }

    /// Reviews always have a limit, though `--qps` may lift the status writes' own.
    #[test]
    fn reviews_keep_a_budget_when_qps_means_no_limit() {
        assert_eq!(review_budget(20.0, 40), (20.0, 40));
        for unlimited in [0.0, -1.0, f64::NAN, f64::INFINITY] {
            assert_eq!(review_budget(unlimited, 7), (50.0, 100), "{unlimited}");
        }
    }

    /// A state directory that fails for want of descriptors is no reason to choose another:
    /// the hint says what helps instead. Other failures keep the `--state-dir` advice.
    #[test]
    fn a_shortage_is_named_as_one_and_not_blamed_on_the_state_directory() {
        let io = |errno: rustix::io::Errno| {
            AgentError::StateDir(StateDirError::Io {
                path: PathBuf::from("/s/lock"),
                source: std::io::Error::from_raw_os_error(errno.raw_os_error()),
            })
        };
        let emfile = io(rustix::io::Errno::MFILE);
        assert!(!emfile.to_string().contains("--state-dir"), "{emfile}");
        assert!(shortage_hint(&emfile).contains("raise its open-files limit"));
        let enfile = io(rustix::io::Errno::NFILE);
        assert!(shortage_hint(&enfile).contains("fs.file-max"));
        let denied = io(rustix::io::Errno::ACCESS);
        assert!(
            denied.to_string().ends_with(
                "(repair it, or choose another with --state-dir once nothing its containers/ records still runs)"
            ),
            "{denied}"
        );
        assert_eq!(shortage_hint(&denied), "");
    }

    /// An actor whose handler panics.
    struct Fragile;
    impl actix::Actor for Fragile {
        type Context = actix::Context<Self>;
    }
    #[derive(actix::Message)]
    #[rtype(result = "()")]
    struct Break;
    impl actix::Handler<Break> for Fragile {
        type Result = ();
        #[allow(clippy::panic)]
        fn handle(&mut self, _: Break, _: &mut Self::Context) {
            panic!("a bug");
        }
    }

    /// An actor stopped by a panic is seen gone, and named: the agent then stops everything
    /// rather than serve what nothing updates any more.
    #[actix::test]
    async fn an_actor_stopped_by_a_panic_is_noticed() {
        tokio::time::pause();
        let fragile = actix::Actor::start(Fragile);
        let healthy = actix::Actor::start(Fragile);
        let (fragile_alive, healthy_alive) = (fragile.clone(), healthy.clone());
        let fragile_alive = move || fragile_alive.connected();
        let healthy_alive = move || healthy_alive.connected();
        let parts: [(&'static str, &dyn Fn() -> bool); 2] =
            [("healthy", &healthy_alive), ("fragile", &fragile_alive)];
        let watch = first_gone(&parts);
        tokio::pin!(watch);
        assert!(tokio::time::timeout(Duration::from_secs(3), &mut watch).await.is_err(), "both alive");
        fragile.do_send(Break);
        assert_eq!(tokio::time::timeout(Duration::from_secs(10), watch).await, Ok("fragile"));
    }

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
        let mapped = "[::ffff:127.0.0.1]:9898".parse().unwrap();
        assert_eq!(exposure_warning(&mapped), None, "an IPv4-mapped loopback address is loopback");
        assert_eq!(reviewed(AuthorizationMode::Auto, &mapped, Some(client())), Ok(false));
        assert!(
            exposure_warning(&any)
                .is_some_and(|w| w.contains("/pods") && w.contains("without authentication"))
        );
        assert!(exposure_warning(&v6_any).is_some());
    }
}
