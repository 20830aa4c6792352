//! The probelet binary: parse the command line, set up logging, run.

use clap::Parser;
use probelet::cli::{Cli, Command, LintFormat, LogFormat, Mode, ShimArgs, ShimCli, UsageError};
use tracing_subscriber::EnvFilter;

/// jemalloc, with its background thread (started by `run`, see [`start_allocator_thread`]):
/// pages freed after a burst (a thousand pods gone, an overload of probes over) go back to the
/// kernel within about ten seconds, where glibc's allocator keeps them (docs/memory.md, "The
/// allocator").
#[cfg(feature = "jemalloc")]
#[global_allocator]
static GLOBAL: tikv_jemallocator::Jemalloc = tikv_jemallocator::Jemalloc;

/// The fewest descriptors the agent starts with: its runtime, signal pipe, listener, state
/// directory, claim and log take about 24; the rest is for probes and the API. (Standalone
/// mode warns at start when its containers have no room: the budget in `host::runtime` keeps
/// 64 back for probes and the API, then each container holds 5.)
const MIN_OPEN_FILES: u64 = 32;

/// The exit code of a command line that cannot run, clap's own for the errors it finds.
const EXIT_USAGE: i32 = 2;
/// The exit code of an agent that could not start or could not stop in order.
const EXIT_FAILURE: i32 = 1;

/// Every error ends the process here with one line (and clap's usage for a usage error), never
/// through `main` returning an error: that printed a backtrace under `RUST_BACKTRACE=1` (anyhow
/// captures one), which an operator's typo does not deserve. Panics keep theirs.
fn main() {
    // First, and without the rest of the command line: the shim is a small parent of each
    // container and exec probe, and sets up nothing else.
    if let Some(args) = ShimCli::parse_if_shim(std::env::args_os()) {
        run_shim(&args);
    }
    let cli = Cli::parse();
    match cli.command {
        Command::ContainerShim(args) => run_shim(&args),
        Command::Run(args) => {
            // Before the first line: a stream nobody reads must never stop the agent.
            probelet::logging::queue::start();
            probelet::logging::queue::queue_panics();
            // A panic that leaves the main thread ends the agent: its text is waited for there,
            // as an exit waits (the hook waits for nothing: tokio catches a task's panic).
            probelet::logging::queue::flushed_on_panic(|| run(args));
        }
        Command::Lint(args) => {
            let report = probelet::lint::lint_paths_with(&args.paths, &args.feature_gates.gates);
            let mut notes = String::new();
            for error in &report.errors {
                // A file name, or a value quoted in the reason, may hold a newline or an escape.
                notes.push_str(&format!("error: {}\n", probelet::lint::report::file_line(error)));
            }
            for warning in &report.warnings {
                notes.push_str(&format!("warning: {}\n", probelet::lint::report::file_line(warning)));
            }
            // Notes that cannot be written (standard error on a full disk) leave the report
            // and its exit code as they are (the exit code still says a file was unreadable,
            // and the JSON report lists each); where print! and eprintln! panicked.
            {
                use std::io::Write as _;
                let _ = std::io::stderr().write_all(notes.as_bytes());
            }
            let output = match args.format {
                LintFormat::Text => probelet::lint::report::text(&report),
                LintFormat::Json => format!("{:#}\n", probelet::lint::report::json(&report)),
            };
            write_lint_output(&mut std::io::stdout(), &output);
            std::process::exit(report.exit_code());
        }
        Command::DemoTarget(args) => {
            init_logging(LogFormat::Text, 0);
            match system().block_on(probelet::demo::run(args)) {
                Ok(code) => std::process::exit(code),
                Err(error) => {
                    eprintln!("Error: demo-target: {error}");
                    std::process::exit(EXIT_FAILURE);
                }
            }
        }
    }
}

/// Writes lint's report, as much as the reader takes: a reader gone early
/// (`probelet lint … | head`) is no error of the report's, whose exit code stands, where
/// `print!` panicked with a backtrace on the broken pipe. Any other failure to write is a
/// report not given, said (if standard error still can) and exited with as unreadable input is.
fn write_lint_output(stream: &mut dyn std::io::Write, text: &str) {
    match stream.write_all(text.as_bytes()).and_then(|()| stream.flush()) {
        Ok(()) => {}
        Err(error) if error.kind() == std::io::ErrorKind::BrokenPipe => {}
        Err(error) => {
            use std::io::Write as _;
            let _ = writeln!(std::io::stderr(), "error: writing the report: {error}");
            std::process::exit(probelet::lint::EXIT_UNREADABLE);
        }
    }
}

/// `run`: the agent, standalone or in a cluster, until it stops.
fn run(args: probelet::cli::RunArgs) {
    init_logging(args.log_format, args.verbose);
    // Before anything is logged: clap says a usage error on standard error in place and
    // exits, without waiting for lines queued before it.
    let mode = args.mode().unwrap_or_else(|error| usage_error(&error));
    start_allocator_thread();
    // kube's TLS needs one process-wide crypto provider (docs/dependencies.md §1).
    let _ = rustls::crypto::ring::default_provider().install_default();
    // Containers and probes hold the agent's descriptors: use all the hard limit allows
    // (the budget in `host::runtime` then shares it out). First of all, so that neither
    // the runtime below nor the folder's claim fails for want of one.
    // Below a floor the agent cannot even start its runtime, listener and state
    // directory (tokio's signal set-up panics at 6): one clear error instead of whichever
    // of them fails first.
    let limit = match probelet::host::runtime::raise_nofile_limit() {
        Ok(limit) => {
            tracing::debug!(?limit, "RLIMIT_NOFILE raised to the hard limit");
            limit
        }
        Err(error) => {
            tracing::warn!(%error, "cannot raise RLIMIT_NOFILE to the hard limit");
            probelet::host::runtime::nofile_limit()
        }
    };
    if let Some(limit) = limit.filter(|&limit| limit < MIN_OPEN_FILES) {
        fail(format_args!(
            "Error: the limit of open files (RLIMIT_NOFILE) is {limit}: the agent needs at least \
             {MIN_OPEN_FILES} to start (raise it: ulimit -n or LimitNOFILE=)"
        ));
    }
    let ran = system().block_on(async move {
        // SIGXFSZ (a write past the file-size limit, `ulimit -f`: standard error sent to
        // a file, a container record) caught and never read, for the agent's whole life
        // (tokio never takes a handler back): the write fails with EFBIG, handled like a
        // full disk, instead of the signal's default ending the agent and leaving its
        // containers running.
        let file_size = tokio::signal::unix::SignalKind::from_raw(rustix::process::Signal::XFSZ.as_raw());
        if let Err(error) = tokio::signal::unix::signal(file_size) {
            tracing::warn!(%error, "cannot catch SIGXFSZ: a write past the file-size limit ends the agent");
        }
        match mode {
            Mode::Standalone(dir) => probelet::agent::run_standalone(&args, dir).await,
            Mode::Cluster { kubeconfig } if args.readiness_gates => {
                probelet::cluster::gates::run_readiness_gates(&args, kubeconfig).await
            }
            Mode::Cluster { kubeconfig } => probelet::cluster::run_cluster(&args, kubeconfig).await,
        }
    });
    if let Err(error) = ran {
        // A stop during a cluster agent's start-up ends what start-up waits for; the
        // signal watcher exits 0 as soon as it has, and this error is its doing. Waited
        // for a bounded time, should the watcher be gone.
        let deadline = std::time::Duration::from_secs(5);
        let waited = std::time::Duration::from_millis(10);
        for _ in 0..deadline.as_millis() / waited.as_millis() {
            if !probelet::agent::stopping_during_start_up() {
                break;
            }
            std::thread::sleep(waited);
        }
        // Each of the agent's errors names its cause in its own text (the file, the
        // flag, the OS error): the chain of sources below it would say it again.
        fail(format_args!("Error: {error}{}", probelet::agent::shortage_hint(&error)));
    }
    probelet::logging::queue::flush(probelet::logging::queue::FLUSH_DEADLINE);
}

/// actix's own `System::new` panics when tokio cannot make its runtime, which needs a few
/// descriptors of its own (an epoll instance, a wake-up eventfd): under a limit of open files
/// of 8 or less. Here that is an error that says so, like the agent's others.
/// Nothing runs yet, so it exits at once.
fn system() -> actix::SystemRunner {
    match tokio::runtime::Builder::new_current_thread().enable_all().build() {
        Ok(runtime) => actix::System::with_tokio_rt(move || runtime),
        Err(error) => {
            fail(format_args!(
                "Error: cannot start the runtime: {error}{}",
                probelet::agent::shortage_hint(&error)
            ));
        }
    }
}

/// Says `line` on standard error after what the agent queued there (`run` writes its streams
/// through queues: docs/reliability.md, "A log reader that stops reading") and exits 1.
fn fail(line: std::fmt::Arguments<'_>) -> ! {
    // The last words: queued past a queue full of other lines.
    probelet::logging::queue::write_reserved(
        probelet::logging::queue::Stream::Stderr,
        format!("{line}\n").as_bytes(),
    );
    probelet::logging::queue::exit(EXIT_FAILURE)
}

/// Ends the process as clap ends it on a usage error of its own: the error, `run`'s usage,
/// exit 2.
fn usage_error(error: &UsageError) -> ! {
    use clap::CommandFactory as _;
    let kind = match error {
        UsageError::NoMode => clap::error::ErrorKind::MissingRequiredArgument,
        UsageError::WebhookWithoutCluster | UsageError::HealthzIsListen(_) => {
            clap::error::ErrorKind::ArgumentConflict
        }
    };
    let mut cli = Cli::command();
    // Built, so that `run` knows its name as `probelet run` for its usage line.
    cli.build();
    match cli.find_subcommand_mut("run") {
        Some(run) => run.error(kind, error).exit(),
        None => {
            eprintln!("error: {error}");
            std::process::exit(EXIT_USAGE);
        }
    }
}

/// What the agent logs of kube's client, whatever the level (see [`init_logging`]).
const KUBE_CLIENT_DIRECTIVES: &str =
    "kube_client::client::builder=off,kube_client::client=error,kube_client::client::tls=warn";

/// Whether a `RUST_LOG` says itself what to log of kube's client: a directive for
/// `kube_client` or `kube_client::client` (one for a module below, `kube_client::client::tls`,
/// says nothing of the client's own lines).
fn names_kube_client(rust_log: &str) -> bool {
    rust_log.split(',').any(|directive| {
        let target = directive.split(['=', '[']).next().unwrap_or("").trim();
        target == "kube_client" || target == "kube_client::client"
    })
}

fn init_logging(format: LogFormat, verbose: u8) {
    let default = match verbose {
        0 => "info",
        1 => "info,probelet=debug,probelet_actors=debug",
        _ => "debug",
    };
    // kube's client logs every failed request at ERROR (its trace layer's `on_failure`): one
    // line per retry while the API server is down. The agent says once that the API is lost and
    // once that it is back, and each caller logs what failed at its own level.
    // Its client also logs the whole body of a response it cannot decode at WARN: a pod list
    // with every pod's spec and environment, at every retry. The agent says what failed itself.
    // (Its TLS module's warnings, a CA bundle that failed to reload, stay.)
    let default = format!("{default},{KUBE_CLIENT_DIRECTIVES}");
    let filter = match std::env::var("RUST_LOG") {
        // A RUST_LOG that does not speak of kube's client gets these too: `RUST_LOG=info`
        // would otherwise log an undecodable TokenReview answer whole at WARN, the bearer token
        // it echoes included (a hostile test's finding). One that names it decides.
        Ok(env) if !names_kube_client(&env) => EnvFilter::try_new(format!("{env},{KUBE_CLIENT_DIRECTIVES}")),
        Ok(env) => EnvFilter::try_new(env),
        Err(_) => EnvFilter::try_new(&default),
    }
    .unwrap_or_else(|_| EnvFilter::new(default));
    let ansi = probelet::host::console::colour_wanted(
        std::io::IsTerminal::is_terminal(&std::io::stderr()),
        std::env::var_os("NO_COLOR"),
    );
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(probelet::logging::queue::QueuedStderr)
        .with_ansi(ansi);
    match format {
        LogFormat::Text => builder.fmt_fields(probelet::logging::escaped_fields()).init(),
        LogFormat::Json => builder.json().init(),
    }
}

/// Runs the container shim and exits as it ends.
fn run_shim(args: &ShimArgs) -> ! {
    match args.raise_signal {
        Some(signal) => std::process::exit(probelet::shim::raise(signal)),
        None => std::process::exit(probelet::shim::run(args.wait_for_go, args.parent, &args.command)),
    }
}

/// Starts the allocator's background thread, which returns freed pages to the kernel. It is
/// started here rather than by the build's default options so that the other subcommands, the
/// container shim above all (started for every exec probe), do not pay for a thread they have
/// no use for (docs/benchmarks.md, "The container shim's start-up").
///
/// One thread, for every arena: jemalloc's default is one per CPU, the first of which starts
/// the others as their arenas come into use and, when the system cannot make a thread (a pids
/// cgroup or RLIMIT_NPROC full), retries at once, without end, printing `<jemalloc>: background
/// thread creation failed (11)` each time: a core and megabytes of log a second (docs/reliability.md,
/// "No process to spare"). The one thread is made here or not at all, and the agent's pages
/// are few enough for it.
fn start_allocator_thread() {
    // An explicit `background_thread:` in jemalloc's run-time options is left as it says.
    #[cfg(feature = "jemalloc")]
    if !std::env::var("_RJEM_MALLOC_CONF").is_ok_and(|conf| conf.contains("background_thread:")) {
        if let Err(error) = tikv_jemalloc_ctl::max_background_threads::write(1) {
            tracing::warn!(%error, "Cannot limit the allocator to one background thread; not starting it");
            return;
        }
        if let Err(error) = tikv_jemalloc_ctl::background_thread::write(true) {
            tracing::warn!(%error, "Cannot start the allocator's background thread; freed memory returns to the kernel only as the agent allocates again");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::names_kube_client;

    /// Only a directive for kube's client itself (or the whole crate) takes the guard off.
    #[test]
    fn a_rust_log_names_kube_client_only_by_its_own_target() {
        assert!(names_kube_client("info,kube_client=debug"));
        assert!(names_kube_client("kube_client::client=warn"));
        assert!(names_kube_client("kube_client::client[HTTP]=debug"));
        assert!(!names_kube_client("info"));
        assert!(!names_kube_client("info,kube_client::client::tls=debug"), "a module below");
        assert!(!names_kube_client("kube_clientele=debug"));
    }
}
