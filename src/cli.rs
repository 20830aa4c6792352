//! The command line: `probelet run` (the node agent, standalone or cluster mode),
//! `probelet lint` (what the kubelet will do with a manifest's probes),
//! `probelet demo-target` (a scriptable probe target for the examples) and the hidden
//! `probelet container-shim` (the parent of each local container). Every flag of `run` but
//! `-v` can also be set through the environment variable named in its help.

use std::net::SocketAddr;
use std::path::PathBuf;

use clap::{Args, Parser, Subcommand, ValueEnum};
use probelet_actors::features::{FeatureGateError, FeatureGates, ParsedFeatureGates};
use probelet_actors::prober::DEFAULT_MAX_PROBES_IN_FLIGHT;

use crate::cluster::label_selector::LabelSelector;
use crate::demo::DemoArgs;

/// The kubelet's probes and pod status — liveness, readiness and startup probes, the Ready,
/// ContainersReady and Initialized conditions — as a node agent.
#[derive(Debug, Parser)]
#[command(name = "probelet", version)]
pub struct Cli {
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Run the agent: standalone on a manifests folder, or against a cluster.
    Run(RunArgs),
    /// Report what the kubelet will do with the probes of Pod manifests and workload pod
    /// templates (defaults, worst-case timings) and where it will hurt. Exit code 1 when a
    /// finding is an error, 2 when a file cannot be read or parsed, else 0.
    Lint(LintArgs),
    /// Serve HTTP, TCP and gRPC health endpoints whose health follows a script (for examples).
    DemoTarget(DemoArgs),
    /// The agent's own parent process of each local container and exec probe (see
    /// `probelet::shim`): not for people to run.
    #[command(hide = true)]
    ContainerShim(ShimArgs),
}

/// The shim's command line on its own, parsed without the rest of the CLI: a shim starts for
/// every container and every exec probe, and building the whole command line (every flag of
/// `run`) cost it about 50 of its 490 page faults (docs/benchmarks.md, "The container shim's
/// start-up"). Its help reads as the subcommand's in the whole CLI.
#[derive(Debug, Parser)]
#[command(
    name = "probelet container-shim",
    bin_name = "probelet container-shim",
    about = "The agent's own parent process of each local container and exec probe (see `probelet::shim`): not for people to run.",
    long_about = None
)]
pub struct ShimCli {
    #[command(flatten)]
    pub args: ShimArgs,
}

impl ShimCli {
    /// The shim's arguments when `args` (the process's own, program name first) run the shim,
    /// parsed alone; `None` for any other subcommand, left to [`Cli`]. Errors exit as clap's do.
    pub fn parse_if_shim(args: impl IntoIterator<Item = std::ffi::OsString>) -> Option<ShimArgs> {
        let mut args = args.into_iter().skip(1).peekable();
        if args.peek().is_none_or(|first| first.as_os_str() != crate::shim::SUBCOMMAND) {
            return None;
        }
        // The subcommand's name stands where the program's name goes.
        Some(ShimCli::parse_from(args).args)
    }
}

/// `probelet container-shim [--wait-for-go] [--parent PID] -- PROGRAM ARGS...`.
#[derive(Debug, Clone, Args)]
pub struct ShimArgs {
    /// Run nothing until one byte arrives on standard input; exit at its end of file.
    #[arg(long)]
    pub wait_for_go: bool,

    /// Kill the command and everything it started once this process is no longer the shim's
    /// parent (an exec probe's shim, tied to its agent).
    #[arg(long, value_name = "PID")]
    pub parent: Option<u32>,

    /// Die of this signal (the shim's re-exec of itself, so that the signal's handler is the
    /// default again).
    #[arg(long, value_name = "SIGNAL")]
    pub raise_signal: Option<i32>,

    /// The program and its arguments.
    #[arg(last = true, value_name = "PROGRAM ARGS")]
    pub command: Vec<std::ffi::OsString>,
}

#[derive(Debug, Clone, Args)]
pub struct RunArgs {
    /// Standalone mode: run the pods whose manifests (YAML or JSON) are in DIR, like the
    /// kubelet's static pods, with containers as local processes. The folder is watched.
    #[arg(long, value_name = "DIR", env = "PROBELET_MANIFESTS", conflicts_with_all = ["kubeconfig", "in_cluster"])]
    pub manifests: Option<PathBuf>,

    /// Cluster mode with this kubeconfig file.
    #[arg(long, value_name = "PATH", env = "PROBELET_KUBECONFIG")]
    pub kubeconfig: Option<PathBuf>,

    /// Cluster mode with the pod's service account (in-cluster configuration).
    #[arg(long, env = "PROBELET_IN_CLUSTER")]
    pub in_cluster: bool,

    /// The node whose pods this agent probes (cluster mode), and the node name standalone pods
    /// are bound to.
    #[arg(long, env = "NODE_NAME", default_value = "localhost")]
    pub node_name: String,

    /// Cluster mode: only pods matching this label selector (e.g. `probelet.io/managed=true`),
    /// in kubectl's `-l` syntax; checked at start as the API server checks it. Empty: every pod.
    #[arg(long, value_name = "SELECTOR", env = "PROBELET_POD_SELECTOR", value_parser = LabelSelector::parse)]
    pub pod_selector: Option<LabelSelector>,

    /// Cluster mode: what a failed liveness probe does. The node's runtime restarts
    /// containers; `delete-pod` deletes the pod so its controller replaces it.
    #[arg(long, value_enum, env = "PROBELET_LIVENESS_ACTION", default_value_t = LivenessAction::None)]
    pub liveness_action: LivenessAction,

    /// Cluster mode beside a kubelet that runs the pods' own probes: probe only the extra
    /// probes of pods that opt in (readiness gate `probelet.dev/ready` and the annotation
    /// `probelet.dev/readiness-probes`) and write only that condition
    /// (docs/readiness-gates.md).
    #[arg(long, env = "PROBELET_READINESS_GATES", conflicts_with = "manifests")]
    pub readiness_gates: bool,

    /// Readiness-gate mode: offer exec gate probes, run through `pods/exec` (the RBAC must
    /// grant it; deploy/readiness-gates/rbac-exec.yaml). Without it, exec entries are rejected.
    #[arg(long, env = "PROBELET_READINESS_GATE_EXEC", requires = "readiness_gates")]
    pub readiness_gate_exec: bool,

    /// Address of the agent's HTTP endpoints: the status page at /, /pods,
    /// /pods/{namespace}/{name}/probes, /events, /metrics, /healthz and /readyz.
    #[arg(long, env = "PROBELET_LISTEN", default_value = "127.0.0.1:9898")]
    pub listen: SocketAddr,

    /// Address of a second listener that serves only /healthz and /readyz, over plain HTTP,
    /// with connections of its own (at most 16): the kubelet's --healthz-port. Point the
    /// agent's liveness and readiness probes here, and clients that hold every connection of
    /// --listen (or reconnect as fast as they are closed) cannot make them fail.
    #[arg(long, value_name = "ADDR", env = "PROBELET_HEALTHZ_LISTEN")]
    pub healthz_listen: Option<SocketAddr>,

    /// Connections the HTTP listener keeps open at once. At the cap, the oldest connection not
    /// serving a request is closed to make room.
    #[arg(long, env = "PROBELET_HTTP_MAX_CONNECTIONS", default_value_t = 256, value_parser = clap::value_parser!(u32).range(1..))]
    pub http_max_connections: u32,

    /// Seconds an HTTP client has to send a request head, from connecting and again after
    /// each response (the idle timeout of a kept-alive connection). At most a day: a deadline
    /// past what the clock can hold would fail every connection.
    #[arg(long, value_name = "SECONDS", env = "PROBELET_HTTP_HEADER_TIMEOUT", default_value_t = 10, value_parser = clap::value_parser!(u64).range(1..=86_400))]
    pub http_header_timeout: u64,

    /// Who may read /, /pods, /pods/{namespace}/{name}/probes, /events and /metrics. `webhook`
    /// asks the API server (TokenReview, then SubjectAccessReview on nodes/pods, nodes/metrics
    /// or nodes/proxy, like the kubelet's authenticated port), and serves HTTPS; `always-allow`
    /// serves them to anyone. `auto` is `webhook` in cluster mode on a non-loopback address and
    /// `always-allow` otherwise. /healthz and /readyz are always open.
    #[arg(long, value_enum, env = "PROBELET_AUTHORIZATION_MODE", default_value_t = AuthorizationMode::Auto)]
    pub authorization_mode: AuthorizationMode,

    /// PEM certificate (chain, leaf first) the HTTP endpoints serve over TLS, with
    /// --tls-private-key-file; read again when it changes. Without it, webhook authorization
    /// serves a self-signed certificate made at start, as the kubelet does, and otherwise the
    /// endpoints are plain HTTP.
    #[arg(long, value_name = "PATH", env = "PROBELET_TLS_CERT_FILE", requires = "tls_private_key_file")]
    pub tls_cert_file: Option<PathBuf>,

    /// PEM private key of --tls-cert-file.
    #[arg(long, value_name = "PATH", env = "PROBELET_TLS_PRIVATE_KEY_FILE", requires = "tls_cert_file")]
    pub tls_private_key_file: Option<PathBuf>,

    /// Which hosts httpGet and tcpSocket probes may connect to. `any` is the kubelet's
    /// behaviour (the probe's `host`, or the pod IP); `pod-ip` fails a probe that names
    /// another host, and HTTP redirects to another host are not followed.
    #[arg(long, value_enum, env = "PROBELET_PROBE_HOST_POLICY", default_value_t = ProbeHostPolicy::Any)]
    pub probe_host_policy: ProbeHostPolicy,

    /// At most this many probes run at once (exec probes: as many again, in a pool of their
    /// own); a probe due while all are running waits for one to end (its timeout starts when it
    /// runs), so a node that cannot keep up with its probes runs them late instead of all at once
    /// past their timeouts. 0: no limit, as the kubelet.
    #[arg(long, value_name = "N", env = "PROBELET_MAX_PROBES_IN_FLIGHT", default_value_t = DEFAULT_MAX_PROBES_IN_FLIGHT)]
    pub max_probes_in_flight: usize,

    /// Log format on standard error.
    #[arg(long, value_enum, env = "PROBELET_LOG_FORMAT", default_value_t = LogFormat::Text)]
    pub log_format: LogFormat,

    /// More log on standard error: -v adds probelet's debug lines (every event, every probe's
    /// outcome, container starts; the kubelet's lines of verbosity 1 to 3), -vv everything at
    /// debug. RUST_LOG, when set, decides instead (kube's client logs only its errors unless
    /// RUST_LOG names `kube_client`: it would log whole answers).
    #[arg(short, long, action = clap::ArgAction::Count)]
    pub verbose: u8,

    /// API requests per second the agent may send for status writes (the kubelet's
    /// --kube-api-qps; 0 for no limit); webhook authorization's reviews get a bucket of their
    /// own at this rate (at the default when this is 0).
    #[arg(long, env = "PROBELET_QPS", default_value_t = 50.0)]
    pub qps: f64,

    /// Burst of API requests above --qps (the kubelet's --kube-api-burst).
    #[arg(long, env = "PROBELET_BURST", default_value_t = 100)]
    pub burst: u32,

    /// Cluster mode: `pods/exec` requests per second for exec probes, a budget of their own so
    /// that exec probes never hold status writes back (the kubelet's exec probes go to its
    /// local runtime and cost it no API requests).
    #[arg(long, env = "PROBELET_EXEC_QPS", default_value_t = 50.0)]
    pub exec_qps: f64,

    /// Burst of `pods/exec` requests above --exec-qps.
    #[arg(long, env = "PROBELET_EXEC_BURST", default_value_t = 100)]
    pub exec_burst: u32,

    /// The kubelet's feature gates, in its syntax: `Name=true,Name2=false`. Known:
    /// ContainerLifecycleProber (alpha, default false), MutableContainerProbes (alpha, default
    /// false), ChangeContainerStatusOnKubeletRestart (deprecated, default false),
    /// InPlacePodVerticalScaling (GA, locked to true), ContainerRestartRules (beta, default
    /// true), RestartAllContainersOnContainerExits (alpha, default false). AllAlpha=BOOL and
    /// AllBeta=BOOL set every alpha (beta) gate not named explicitly, whatever the order.
    #[arg(long, value_name = "NAME=BOOL,...", env = "PROBELET_FEATURE_GATES", default_value = "", value_parser = parse_feature_gates, hide_default_value = true)]
    pub feature_gates: ParsedFeatureGates,

    /// Standalone mode: where the agent records its containers' process groups, so that after
    /// a crash of the agent the next one kills them before it starts anything (never two
    /// copies of a container). One agent at a time per folder. Default: `.probelet-state` in
    /// the manifests folder.
    #[arg(long, value_name = "DIR", env = "PROBELET_STATE_DIR")]
    pub state_dir: Option<PathBuf>,
}

fn parse_feature_gates(value: &str) -> Result<ParsedFeatureGates, FeatureGateError> {
    FeatureGates::parse(value)
}

#[derive(Debug, Clone, Args)]
pub struct LintArgs {
    /// Manifest files (YAML with one or more documents, or JSON) and folders, walked for
    /// `*.yaml`, `*.yml` and `*.json`.
    #[arg(value_name = "FILE|DIR", required = true)]
    pub paths: Vec<PathBuf>,

    /// `text` for a person, `json` (one document) for CI.
    #[arg(long, value_enum, default_value_t = LintFormat::Text)]
    pub format: LintFormat,

    /// The feature gates of the cluster's API server, in the kubelet's syntax (as `run
    /// --feature-gates`): what it accepts depends on them, such as a restart rule's
    /// `RestartAllContainers` action (only with RestartAllContainersOnContainerExits=true).
    #[arg(long, value_name = "NAME=BOOL,...", default_value = "", value_parser = parse_feature_gates, hide_default_value = true)]
    pub feature_gates: ParsedFeatureGates,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum LintFormat {
    Text,
    Json,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum LivenessAction {
    /// Only report the failure (events, metrics); the node's runtime decides.
    None,
    /// Delete the pod.
    DeletePod,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum AuthorizationMode {
    /// `webhook` in cluster mode on a non-loopback address, `always-allow` otherwise.
    Auto,
    /// TokenReview and SubjectAccessReview against the API server (cluster mode only).
    Webhook,
    /// No authentication (a warning at start when the address is not loopback).
    AlwaysAllow,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum ProbeHostPolicy {
    /// The kubelet's behaviour: whatever host the probe names.
    Any,
    /// Only the pod's own IP (what Pod Security's baseline level admits).
    PodIp,
}

impl From<ProbeHostPolicy> for probelet_actors::prober::ProbeHostPolicy {
    fn from(policy: ProbeHostPolicy) -> Self {
        match policy {
            ProbeHostPolicy::Any => probelet_actors::prober::ProbeHostPolicy::Any,
            ProbeHostPolicy::PodIp => probelet_actors::prober::ProbeHostPolicy::PodIp,
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum LogFormat {
    Text,
    Json,
}

/// Which mode `run` was asked for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Mode {
    Standalone(PathBuf),
    Cluster { kubeconfig: Option<PathBuf> },
}

/// Why `run` cannot run as asked: a command line that no agent could run, found before the
/// agent touches anything (a standalone agent would otherwise claim its folder and kill what a
/// dead agent left before it found the flag it cannot use). The binary exits 2 on it, as clap
/// does on the errors it finds itself.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum UsageError {
    #[error(
        "nothing to run: give --manifests DIR (standalone), or --kubeconfig PATH / --in-cluster (cluster mode)"
    )]
    NoMode,
    #[error("--authorization-mode webhook needs cluster mode (an API server to ask)")]
    WebhookWithoutCluster,
    #[error(
        "--healthz-listen {0} is the address of --listen: give the health listener an address of its own"
    )]
    HealthzIsListen(SocketAddr),
}

impl RunArgs {
    /// The mode asked for, or why these arguments cannot run.
    pub fn mode(&self) -> Result<Mode, UsageError> {
        let mode = match (&self.manifests, &self.kubeconfig, self.in_cluster) {
            (Some(dir), _, _) => Mode::Standalone(dir.clone()),
            (None, Some(path), _) => Mode::Cluster { kubeconfig: Some(path.clone()) },
            (None, None, true) => Mode::Cluster { kubeconfig: None },
            (None, None, false) => return Err(UsageError::NoMode),
        };
        if matches!(mode, Mode::Standalone(_)) && self.authorization_mode == AuthorizationMode::Webhook {
            return Err(UsageError::WebhookWithoutCluster);
        }
        if let Some(health) = self.healthz_listen.filter(|health| healthz_is_listen(*health, self.listen)) {
            return Err(UsageError::HealthzIsListen(health));
        }
        Ok(mode)
    }
}

/// Whether the health listener's address is the main listener's: one of them could not be
/// bound. Port 0 asks the kernel for a port of its own each time.
pub fn healthz_is_listen(health: SocketAddr, listen: SocketAddr) -> bool {
    health == listen && health.port() != 0
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(args: &[&str]) -> Result<Cli, clap::Error> {
        Cli::try_parse_from(std::iter::once("probelet").chain(args.iter().copied()))
    }

    /// `--feature-gates`'s help names every gate the agent knows: it is written by hand.
    #[test]
    fn the_feature_gates_help_names_every_known_gate() {
        use clap::CommandFactory as _;
        let mut cli = Cli::command();
        let run = cli.find_subcommand_mut("run").expect("the run subcommand");
        let help = run.render_long_help().to_string();
        for spec in probelet_actors::features::KNOWN_FEATURES {
            assert!(help.contains(spec.feature.name()), "{} is not in run --help", spec.feature.name());
        }
        for special in [probelet_actors::features::ALL_ALPHA, probelet_actors::features::ALL_BETA] {
            assert!(help.contains(&format!("{special}=BOOL")), "{special} is not in run --help");
        }
    }

    #[test]
    fn modes() {
        let Command::Run(run) = parse(&["run", "--manifests", "examples/pods"]).unwrap().command else {
            panic!()
        };
        assert_eq!(run.mode(), Ok(Mode::Standalone("examples/pods".into())));
        assert_eq!(run.listen.to_string(), "127.0.0.1:9898");
        let Command::Run(run) = parse(&["run", "--in-cluster", "--node-name", "n1"]).unwrap().command else {
            panic!()
        };
        assert_eq!(run.mode(), Ok(Mode::Cluster { kubeconfig: None }));
        assert_eq!(run.node_name, "n1");
        let Command::Run(run) = parse(&["run"]).unwrap().command else { panic!() };
        assert_eq!(run.mode(), Err(UsageError::NoMode));
        assert!(parse(&["run", "--manifests", "x", "--in-cluster"]).is_err(), "one mode at a time");
        assert!(parse(&["run", "--liveness-action", "explode"]).is_err());
        assert_eq!(run.http_max_connections, 256);
        assert_eq!(run.http_header_timeout, 10);
        for refused in ["0", "86401", "9300000000000000000"] {
            assert!(
                parse(&["run", "--manifests", "x", "--http-header-timeout", refused]).is_err(),
                "{refused}"
            );
        }
        assert_eq!(run.authorization_mode, AuthorizationMode::Auto);
        assert_eq!(run.probe_host_policy, ProbeHostPolicy::Any);
        assert_eq!(run.max_probes_in_flight, 1024);
        assert!(parse(&["run", "--http-max-connections", "0"]).is_err());
        assert!(parse(&["run", "--http-header-timeout", "0"]).is_err());
        let Command::Run(run) =
            parse(&["run", "--authorization-mode", "webhook", "--probe-host-policy", "pod-ip"])
                .unwrap()
                .command
        else {
            panic!()
        };
        assert_eq!(run.authorization_mode, AuthorizationMode::Webhook);
        assert_eq!(run.probe_host_policy, ProbeHostPolicy::PodIp);
    }

    /// Flags no agent can run with are refused before anything runs, as clap refuses its own.
    #[test]
    fn usage_errors_beyond_claps() {
        let mode = |args: &[&str]| {
            let Command::Run(run) = parse(args).unwrap().command else { panic!() };
            run.mode()
        };
        assert_eq!(mode(&["run"]), Err(UsageError::NoMode));
        assert_eq!(
            mode(&["run", "--manifests", "x", "--authorization-mode", "webhook"]),
            Err(UsageError::WebhookWithoutCluster)
        );
        assert!(mode(&["run", "--in-cluster", "--authorization-mode", "webhook"]).is_ok());
        assert_eq!(
            mode(&[
                "run",
                "--manifests",
                "x",
                "--listen",
                "127.0.0.1:9000",
                "--healthz-listen",
                "127.0.0.1:9000"
            ]),
            Err(UsageError::HealthzIsListen("127.0.0.1:9000".parse().unwrap()))
        );
        assert!(
            mode(&["run", "--manifests", "x", "--listen", "127.0.0.1:0", "--healthz-listen", "127.0.0.1:0"])
                .is_ok(),
            "port 0 is a port of its own each time"
        );
    }

    #[test]
    fn feature_gates() {
        use probelet_actors::features::Feature;
        let Command::Run(run) = parse(&["run"]).unwrap().command else { panic!() };
        assert_eq!(run.feature_gates.gates, FeatureGates::default());
        let Command::Run(run) =
            parse(&["run", "--feature-gates=ContainerLifecycleProber=true"]).unwrap().command
        else {
            panic!()
        };
        assert!(run.feature_gates.gates.enabled(Feature::ContainerLifecycleProber));
        let err = parse(&["run", "--feature-gates", "Foo=true"]).unwrap_err().to_string();
        assert!(err.contains("unrecognized feature gate: Foo"), "{err}");
        let Command::Run(run) =
            parse(&["run", "--feature-gates=MutableContainerProbes=true"]).unwrap().command
        else {
            panic!()
        };
        assert!(run.feature_gates.gates.enabled(Feature::MutableContainerProbes));
        // The kubelet's special gates, which the flag once refused as unknown.
        let Command::Run(run) =
            parse(&["run", "--feature-gates", "AllAlpha=true,AllBeta=false,MutableContainerProbes=false"])
                .unwrap()
                .command
        else {
            panic!()
        };
        let gates = run.feature_gates.gates;
        assert!(gates.enabled(Feature::ContainerLifecycleProber), "AllAlpha=true");
        assert!(!gates.enabled(Feature::MutableContainerProbes), "named: false wins");
        assert!(!gates.enabled(Feature::ContainerRestartRules), "AllBeta=false");
        assert!(gates.enabled(Feature::RestartAllContainersOnContainerExits), "AllAlpha=true");
        assert!(gates.enabled(Feature::InPlacePodVerticalScaling), "GA, locked");
        assert!(run.feature_gates.warnings.is_empty(), "{:?}", run.feature_gates.warnings);
    }

    #[test]
    fn readiness_gate_flags() {
        let Command::Run(run) = parse(&["run", "--in-cluster", "--readiness-gates"]).unwrap().command else {
            panic!()
        };
        assert!(run.readiness_gates && !run.readiness_gate_exec);
        assert_eq!(run.mode(), Ok(Mode::Cluster { kubeconfig: None }));
        assert!(parse(&["run", "--in-cluster", "--readiness-gate-exec"]).is_err(), "exec needs the mode");
        assert!(parse(&["run", "--manifests", "x", "--readiness-gates"]).is_err(), "cluster mode only");
        let Command::Run(run) =
            parse(&["run", "--in-cluster", "--readiness-gates", "--readiness-gate-exec"]).unwrap().command
        else {
            panic!()
        };
        assert!(run.readiness_gate_exec);
    }

    #[test]
    fn lint_arguments() {
        let Command::Lint(lint) = parse(&["lint", "a.yaml", "dir"]).unwrap().command else { panic!() };
        assert_eq!(lint.paths, vec![PathBuf::from("a.yaml"), PathBuf::from("dir")]);
        assert_eq!(lint.format, LintFormat::Text);
        let Command::Lint(lint) = parse(&["lint", "--format", "json", "x"]).unwrap().command else {
            panic!()
        };
        assert_eq!(lint.format, LintFormat::Json);
        assert!(parse(&["lint"]).is_err(), "a path is required");
        assert!(parse(&["lint", "--format", "xml", "x"]).is_err());
    }

    #[test]
    fn shim_arguments_pass_the_command_through_untouched() {
        let Command::ContainerShim(shim) =
            parse(&["container-shim", "--wait-for-go", "--", "sh", "-c", "--version"]).unwrap().command
        else {
            panic!()
        };
        assert!(shim.wait_for_go);
        assert_eq!(shim.command, ["sh", "-c", "--version"]);
        let help = Cli::try_parse_from(["probelet", "--help"]).unwrap_err().to_string();
        assert!(!help.contains("container-shim"), "hidden: {help}");
    }

    #[test]
    fn the_shim_parsed_alone_reads_its_arguments_as_the_whole_cli_does() {
        let os = |args: &[&str]| args.iter().map(std::ffi::OsString::from).collect::<Vec<_>>();
        for args in [
            &["probelet", "container-shim", "--wait-for-go", "--parent", "42", "--", "sh", "-c", "--version"]
                [..],
            &["probelet", "container-shim", "--raise-signal", "15"],
            &["probelet", "container-shim", "--", "--wait-for-go"],
        ] {
            let alone = ShimCli::parse_if_shim(os(args)).expect("the shim");
            let Command::ContainerShim(whole) = Cli::try_parse_from(args).unwrap().command else { panic!() };
            assert_eq!(
                (alone.wait_for_go, alone.parent, alone.raise_signal, &alone.command),
                (whole.wait_for_go, whole.parent, whole.raise_signal, &whole.command),
                "{args:?}"
            );
        }
        assert!(ShimCli::parse_if_shim(os(&["probelet", "run", "--manifests", "x"])).is_none());
        assert!(ShimCli::parse_if_shim(os(&["probelet"])).is_none());
        // The name only as an argument of another subcommand is not the shim.
        assert!(ShimCli::parse_if_shim(os(&["probelet", "lint", "container-shim"])).is_none());
        let refused = ShimCli::try_parse_from(["container-shim", "--parent", "x"]).unwrap_err().to_string();
        assert!(refused.contains("invalid value 'x' for '--parent <PID>'"), "{refused}");
        let help = ShimCli::try_parse_from(["container-shim", "--help"]).unwrap_err().to_string();
        assert!(help.starts_with("The agent's own parent process"), "{help}");
        assert!(help.contains("Usage: probelet container-shim"), "{help}");
    }
}
