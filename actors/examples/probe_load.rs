//! The probe load harness: N readiness probes of one kind, each on its own pod, through the
//! real engine (workers, results cache, status manager, prober manager, executors) against a
//! target server in a separate process on 127.0.0.1; prints one JSON line with the probe rate,
//! failures, CPU per probe, RSS and the lateness and latency percentiles.
//!
//! ```text
//! cargo run --release -p probelet-actors --example probe_load -- \
//!     --kind http|tcp|grpc|exec --workers N --period SECS --warmup SECS --window SECS \
//!     [--floor] [--idle] [--churn [--rounds N] [--floor]] [--overload-workers N --overload-for SECS]
//!     [--max-in-flight N] [--floor-per-core] [--contend PERCENT [--contend-preempt]]
//! ```
//!
//! * The target is this same binary run again with a hidden flag: it serves HTTP (200, a small
//!   body), TCP (accept and close) and the gRPC health service (SERVING) on ephemeral ports of
//!   127.0.0.1, prints the ports, and exits when its stdin closes (the harness holds it and also
//!   kills it on exit). Exec probes run `true` through [`LocalCommandRunner`]; no target.
//! * The engine is driven as a host drives it: each pod registered in a [`PodRegistry`], then
//!   `update_pod_status` with a running container, the kubelet's conditions,
//!   `set_pod_status`, `add_pod`. The metrics registry is installed as the agent installs it,
//!   and the engine's [`ProbeObserver`] hook reports each probe with its duration.
//! * `--floor` runs the same I/O without the engine: one tokio task per worker on a
//!   fixed-rate `interval` (missed ticks skipped), a new connection per probe.
//! * `--idle` measures resident memory per worker at a long period (see [`idle`]).
//! * `--churn` adds and removes pods at `--workers` pods per second for `--window` seconds,
//!   each pod living one second, as a host adds (register, status, `add_pod`) and removes
//!   (`remove_pod`, deregister, `remove_orphaned_statuses`) them; it prints the rate achieved,
//!   the workers, statuses and views left at the end, and RSS before, during and after (see
//!   [`churn`]); `--rounds N` repeats it N times on the same engine. With `--floor` it churns
//!   bare tokio tasks instead, for what the process keeps of a churn with no engine.
//! * `--overload-workers N --overload-for SECS` runs N workers for SECS, then drops to
//!   `--workers` for the window, and prints a line per second and one per phase (see
//!   [`overload`]).
//! * `--max-in-flight N` sets the engine's bound on probes in flight (0: none, as upstream);
//!   the pipeline's default otherwise.
//! * `--floor-per-core` is `--floor` with its tasks on one single-threaded runtime per core,
//!   split by worker index as the engine split its workers over its arbiters until 2026-12-04,
//!   instead of one work-stealing runtime: what that threading alone cost.
//! * `--contend PERCENT` runs, for the whole run, a second child process with one busy thread
//!   pinned to each CPU, runnable PERCENT % of every 50 ms, the CPUs' busy slices staggered: other
//!   pods' containers on the node. With `--contend-preempt` those threads run at real-time
//!   priority (through `chrt -f`, root only), so each one stops whatever ran on its CPU while
//!   it is busy, as a hypervisor that gives a vCPU to another guest does (CPU steal). See
//!   [`contend`]. The steady-load lines (the engine's, `--floor`'s) report the CPUs' steal
//!   share over the window from `/proc/stat` (`steal_pct`), which only a hypervisor causes.
//!
//! * Built with `--features jemalloc` (`cargo run --release -p probelet-actors --features
//!   jemalloc --example probe_load -- …`), the harness runs on the allocator the agent binary
//!   ships; otherwise on the system's. Every output line says which (`allocator`).
//!
//! CPU is this process's user + system time over the window (from `/proc/self/stat`): the
//! target's CPU is not in it. Lateness is a probe's start minus the latest due time on its
//! worker's fixed-rate grid, the grid anchored at the worker's first probe.
//! Every run stops by itself after warmup + window; only 127.0.0.1 is contacted.

// A load run on real time: it times itself and the probes on the real clock.
#![allow(clippy::disallowed_methods)]

use std::io::{BufRead, BufReader};
use std::process::{Child, ChildStdin, Command, ExitCode, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::{
    Container, ContainerState, ContainerStateRunning, ContainerStateWaiting, ContainerStatus, ExecAction,
    GRPCAction, HTTPGetAction, Pod, PodSpec, PodStatus, Probe, TCPSocketAction,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, Time};
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use k8s_openapi::jiff::Timestamp;
use probelet_actors::contracts::{LogRecorder, PodRegistry, ProbeObserver, ProbeRecord};
use probelet_actors::local_runner::LocalCommandRunner;
use probelet_actors::metrics::PrometheusRegistry;
use probelet_actors::prober::{DEFAULT_MAX_PROBES_IN_FLIGHT, ProbeResult};
use probelet_actors::status::generate_kubelet_conditions;
use probelet_actors::{Pipeline, PipelineConfig};
use serde_json::json;

type Error = Box<dyn std::error::Error + Send + Sync>;

/// With `--features jemalloc`, the allocator the agent binary ships, its background thread
/// started as the agent starts it (see `main`).
#[cfg(feature = "jemalloc")]
#[global_allocator]
static GLOBAL: tikv_jemallocator::Jemalloc = tikv_jemallocator::Jemalloc;

/// The allocator this build runs with, for the output line.
const ALLOCATOR: &str = if cfg!(feature = "jemalloc") { "jemalloc" } else { "system" };

/// The hidden flag that turns this binary into the target server.
const SERVE_TARGET: &str = "--serve-target";
/// The hidden flag that turns this binary into the busy threads of `--contend`.
const SERVE_CONTENTION: &str = "--serve-contention";
/// Every probe's timeout (`timeoutSeconds: 1`).
const PROBE_TIMEOUT: Duration = Duration::from_secs(1);
/// An HTTP probe reads at most this much of the body, as the engine's executor does.
const BODY_CAP: usize = 10 * 1024;
/// The target's HTTP body.
const TARGET_BODY: &str = "ok\n";
/// `/proc` reports CPU time in clock ticks of `USER_HZ`, which Linux fixes at 100.
const USER_HZ: u64 = 100;
/// The page size `/proc/self/statm` counts in (x86-64 and the common arm64 kernels).
const PAGE_SIZE: u64 = 4096;

fn main() -> ExitCode {
    let argv: Vec<String> = std::env::args().skip(1).collect();
    let outcome = if argv.first().map(String::as_str) == Some(SERVE_TARGET) {
        target::serve()
    } else if argv.first().map(String::as_str) == Some(SERVE_CONTENTION) {
        contend::serve(&argv[1..])
    } else {
        // As the agent does (src/main.rs): one background thread for all arenas, and an
        // explicit `background_thread:` in `_RJEM_MALLOC_CONF` left as it says.
        #[cfg(feature = "jemalloc")]
        if !std::env::var("_RJEM_MALLOC_CONF").is_ok_and(|conf| conf.contains("background_thread:"))
            && let Err(error) = tikv_jemalloc_ctl::max_background_threads::write(1)
                .and_then(|()| tikv_jemalloc_ctl::background_thread::write(true))
        {
            eprintln!("probe_load: cannot start the allocator's background thread: {error}");
        }
        match Args::parse(&argv) {
            Ok(args) => run(args),
            Err(usage) => {
                eprintln!("probe_load: {usage}\n{USAGE}");
                return ExitCode::from(2);
            }
        }
    };
    match outcome {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("probe_load: {e}");
            ExitCode::FAILURE
        }
    }
}

const USAGE: &str = "usage: probe_load --kind http|tcp|grpc|exec --workers N --period SECS \
--warmup SECS --window SECS [--floor] [--idle] [--churn [--rounds N] [--floor]] [--overload-workers N --overload-for SECS] [--max-in-flight N] [--floor-per-core] [--contend PERCENT [--contend-preempt]]";

fn run(args: Args) -> Result<(), Error> {
    // The target lives in its own process so that its CPU is not counted; it dies with us.
    let target = match args.kind {
        Kind::Exec => None,
        _ => Some(target::Target::start()?),
    };
    let ports = target.as_ref().map(|t| t.ports).unwrap_or_default();
    let mut contention = args.contend.map(contend::Contention::start).transpose()?;
    let line = if args.overload_workers > 0 {
        overload::run(&args, ports)?
    } else if args.idle {
        idle(&args, ports)?
    } else if args.churn && args.floor {
        floor::churn(&args, ports)?
    } else if args.churn {
        churn(&args, ports)?
    } else if args.floor {
        floor::run(&args, ports)?
    } else {
        engine_load(&args, ports)?
    };
    if let Some(contention) = contention.as_mut() {
        contention.check_alive()?;
    }
    let line = match (line, args.contend) {
        (serde_json::Value::Object(mut fields), Some(c)) => {
            fields.insert("contend".into(), json!({ "percent": c.percent, "preempt": c.preempt }));
            serde_json::Value::Object(fields)
        }
        (line, _) => line,
    };
    println!("{line}");
    drop(contention);
    drop(target);
    Ok(())
}

// === command line ===

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    Http,
    Tcp,
    Grpc,
    Exec,
}

impl Kind {
    fn name(self) -> &'static str {
        match self {
            Kind::Http => "http",
            Kind::Tcp => "tcp",
            Kind::Grpc => "grpc",
            Kind::Exec => "exec",
        }
    }
}

#[derive(Debug, Clone, PartialEq)]
struct Args {
    kind: Kind,
    workers: usize,
    period: u64,
    warmup: u64,
    window: u64,
    floor: bool,
    idle: bool,
    churn: bool,
    /// Workers of the overload phase; 0 for none.
    overload_workers: usize,
    /// How long the overload phase lasts, in seconds.
    overload_for: u64,
    /// The engine's bound on probes in flight (`--max-in-flight`, 0 for none); the
    /// pipeline's default unless given.
    max_in_flight: Option<usize>,
    /// `--floor-per-core`: the floor's tasks on one single-threaded runtime per core, split by
    /// worker index, as the engine's workers sit on one arbiter per core (no work stealing).
    floor_per_core: bool,
    /// `--rounds N`: `--churn` runs N rounds on the same engine (1 unless given).
    rounds: usize,
    /// `--contend PERCENT [--contend-preempt]`: busy threads beside the run.
    contend: Option<contend::Contend>,
}

impl Args {
    fn parse(argv: &[String]) -> Result<Args, String> {
        let mut args = Args {
            kind: Kind::Http,
            workers: 1000,
            period: 0,
            warmup: 5,
            window: 20,
            floor: false,
            idle: false,
            churn: false,
            overload_workers: 0,
            overload_for: 10,
            max_in_flight: Some(DEFAULT_MAX_PROBES_IN_FLIGHT),
            floor_per_core: false,
            rounds: 1,
            contend: None,
        };
        let mut preempt = false;
        let mut it = argv.iter();
        while let Some(flag) = it.next() {
            let mut value = || it.next().ok_or_else(|| format!("{flag} needs a value"));
            match flag.as_str() {
                "--kind" => {
                    args.kind = match value()?.as_str() {
                        "http" => Kind::Http,
                        "tcp" => Kind::Tcp,
                        "grpc" => Kind::Grpc,
                        "exec" => Kind::Exec,
                        other => return Err(format!("--kind: unknown kind {other:?}")),
                    }
                }
                "--workers" => args.workers = number(flag, value()?)?,
                "--period" => args.period = number(flag, value()?)?,
                "--warmup" => args.warmup = number(flag, value()?)?,
                "--window" => args.window = number(flag, value()?)?,
                "--floor" => args.floor = true,
                "--floor-per-core" => {
                    args.floor = true;
                    args.floor_per_core = true;
                }
                "--idle" => args.idle = true,
                "--churn" => args.churn = true,
                "--rounds" => args.rounds = number(flag, value()?)?,
                "--overload-workers" => args.overload_workers = number(flag, value()?)?,
                "--overload-for" => args.overload_for = number(flag, value()?)?,
                "--max-in-flight" => {
                    args.max_in_flight = Some(number(flag, value()?)?).filter(|n: &usize| *n > 0)
                }
                "--contend" => {
                    let percent = number::<u32>(flag, value()?)?;
                    let percent = u8::try_from(percent)
                        .ok()
                        .filter(|p| (1..=contend::MAX_PERCENT).contains(p))
                        .ok_or_else(|| {
                            format!("--contend: a percentage from 1 to {}", contend::MAX_PERCENT)
                        })?;
                    args.contend = Some(contend::Contend { percent, preempt: false });
                }
                "--contend-preempt" => preempt = true,
                other => return Err(format!("unknown argument {other:?}")),
            }
        }
        match (&mut args.contend, preempt) {
            (Some(contend), true) => contend.preempt = true,
            (None, true) => return Err("--contend-preempt: only with --contend PERCENT".into()),
            _ => {}
        }
        if args.period == 0 {
            args.period = if args.idle { 3600 } else { 1 };
        }
        if args.period > i32::MAX as u64 {
            return Err("--period: more than periodSeconds can hold".into());
        }
        if args.workers == 0 {
            return Err("--workers: must be at least 1".into());
        }
        if args.window == 0 && !args.idle {
            return Err("--window: must be at least 1".into());
        }
        if args.idle && args.floor {
            return Err("--idle measures the engine's workers; it has no --floor variant".into());
        }
        if args.rounds == 0 || (args.rounds > 1 && !args.churn) {
            return Err("--rounds: at least 1, and more than 1 only with --churn".into());
        }
        if args.idle && args.churn {
            return Err("--idle and --churn are different runs".into());
        }
        if args.overload_workers > 0 && (args.idle || args.overload_workers < args.workers) {
            return Err("--overload-workers: at least --workers, and not with --idle".into());
        }
        Ok(args)
    }
}

fn number<T: std::str::FromStr>(flag: &str, value: &str) -> Result<T, String> {
    value.parse().map_err(|_| format!("{flag}: not a number: {value:?}"))
}

// === measurements: pure pieces ===

/// A histogram of microsecond values: exact below 1,024 µs, then 64 buckets per power of two
/// (a value reads back at most 1/64 below itself). Fixed size, so recording allocates nothing.
#[derive(Debug, Clone)]
struct Histogram {
    counts: Vec<u64>,
    total: u64,
    max: u64,
}

const LINEAR: u64 = 1024;
const SUB_BITS: u32 = 6;
const SUBS: u64 = 1 << SUB_BITS;
const LINEAR_BITS: u32 = 10;

impl Histogram {
    fn new() -> Self {
        let buckets = LINEAR + u64::from(64 - LINEAR_BITS) * SUBS;
        Histogram { counts: vec![0; buckets as usize], total: 0, max: 0 }
    }

    fn bucket(v: u64) -> usize {
        if v < LINEAR {
            return v as usize;
        }
        let exp = 63 - v.leading_zeros();
        let sub = (v >> (exp - SUB_BITS)) & (SUBS - 1);
        (LINEAR + u64::from(exp - LINEAR_BITS) * SUBS + sub) as usize
    }

    /// The smallest value that falls in bucket `b`.
    fn lower_bound(b: usize) -> u64 {
        let b = b as u64;
        if b < LINEAR {
            return b;
        }
        let i = b - LINEAR;
        let exp = LINEAR_BITS as u64 + i / SUBS;
        (1 << exp) + ((i % SUBS) << (exp - SUB_BITS as u64))
    }

    fn merge(&mut self, other: &Histogram) {
        for (mine, theirs) in self.counts.iter_mut().zip(&other.counts) {
            *mine += theirs;
        }
        self.total += other.total;
        self.max = self.max.max(other.max);
    }

    fn record(&mut self, v: u64) {
        self.counts[Self::bucket(v)] += 1;
        self.total += 1;
        self.max = self.max.max(v);
    }

    /// The `q` quantile (0 < q ≤ 1) by the nearest-rank rule; 0 when empty.
    fn quantile(&self, q: f64) -> u64 {
        if self.total == 0 {
            return 0;
        }
        let rank = ((q * self.total as f64).ceil() as u64).clamp(1, self.total);
        let mut seen = 0;
        for (b, count) in self.counts.iter().enumerate() {
            seen += count;
            if seen >= rank {
                return Self::lower_bound(b).min(self.max);
            }
        }
        self.max
    }
}

/// One worker's fixed-rate schedule, as far as its probe starts show it: due times are
/// `anchor + k·period`, the anchor being the first probe (a worker probes at once and runs its
/// ticker from that moment). That first start can itself be a little late (the first tick
/// found no status to probe and the second one, a timer's millisecond late, is the first
/// seen), so a later start that reads as almost a whole period late is really on time: it
/// counts as on time and pulls the anchor back, by at most the tolerance given.
///
/// The tolerance must stay small: a probe really a whole period late less the tolerance (as
/// after an overload) pulls the anchor back too, and every on-time probe after it reads that
/// much late. An engine probe's asked time is its worker's schedule itself (the first one
/// starts the ticker), so [`ENGINE_EARLY_TOLERANCE`] is a timer's granularity.
///
/// An engine probe that reads as almost a whole period late, by less than [`EARLY_TOLERANCE`]
/// short of it, is held rather than counted ([`Grid::place_engine`]): it may have started
/// before its due time, which an engine probe never does unless the grid is anchored late (the
/// first probe seen was a tick delayed in the start-up burst, the worker's schedule itself being
/// earlier). If the worker's next probe also starts before its due time, the grid moves back by
/// the larger of the two and both count on time; otherwise the held one counts as late as it
/// read. Two probes in a row really a whole period late less 20 ms are rare, and a worker does
/// not stay a period behind: its fixed-rate schedule skips missed ticks and keeps its grid.
#[derive(Debug, Clone, Copy)]
struct Grid {
    anchor: Option<Instant>,
    /// How far before its due time the held probe seemed to start.
    held: Option<Duration>,
}

/// Where an engine probe falls on its worker's grid ([`Grid::place_engine`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Placed {
    /// The worker's first probe: it defines the grid.
    first: bool,
    /// This probe's lateness; `None` for the first and for a probe held.
    late: Option<Duration>,
    /// The lateness of the probe held before this one, now that this one settled it.
    held_late: Option<Duration>,
}

/// How far before a due time a start may seem to be and still count as on time (at most a
/// fiftieth of the period): more than the scheduling noise of a loaded machine, and a probe
/// really that close to a whole period late is rare and late anyway.
const EARLY_TOLERANCE: Duration = Duration::from_millis(20);

/// The tolerance for engine probes placed by the time they asked ([`Collector::record_waited`]):
/// tokio's timer wheel fires a millisecond late, and the first probe is the schedule's origin.
const ENGINE_EARLY_TOLERANCE: Duration = Duration::from_millis(2);

impl Grid {
    const fn new() -> Self {
        Grid { anchor: None, held: None }
    }

    /// An engine probe asked for at `asked`, on a grid that forgives `tolerance` early.
    fn place_engine(&mut self, asked: Instant, period: Duration, tolerance: Duration) -> Placed {
        let Some(anchor) = self.anchor else {
            self.anchor = Some(asked);
            return Placed { first: true, late: None, held_late: None };
        };
        let (late, early) = offsets(anchor, asked, period);
        let held = self.held.take();
        let suspect = early <= EARLY_TOLERANCE.min(period / 50);
        match held {
            // This one starts before its due time too: the grid is late, by the larger of the
            // two at least; both are on time on the grid pulled back that far.
            Some(held) if suspect => {
                let by = held.max(early);
                self.anchor = Some(anchor.checked_sub(by).unwrap_or(anchor));
                Placed { first: false, late: Some(by - early), held_late: Some(by - held) }
            }
            None if early <= tolerance.min(period / 50) => {
                self.anchor = Some(anchor.checked_sub(early).unwrap_or(anchor));
                Placed { first: false, late: Some(Duration::ZERO), held_late: None }
            }
            None if suspect => {
                self.held = Some(early);
                Placed { first: false, late: None, held_late: None }
            }
            held => {
                Placed { first: false, late: Some(late), held_late: held.map(|e| period.saturating_sub(e)) }
            }
        }
    }

    /// The lateness of a probe that started at `start`; `None` for the first (it defines the
    /// grid). A start at most [`EARLY_TOLERANCE`] before a due time is on time and pulls the
    /// anchor back.
    fn lateness(&mut self, start: Instant, period: Duration) -> Option<Duration> {
        let Some(anchor) = self.anchor else {
            self.anchor = Some(start);
            return None;
        };
        let (late, early) = offsets(anchor, start, period);
        if early <= EARLY_TOLERANCE.min(period / 50) {
            self.anchor = Some(anchor.checked_sub(early).unwrap_or(anchor));
            return Some(Duration::ZERO);
        }
        Some(late)
    }
}

/// How far `at` is past the latest due time of the grid `anchor + k·period`, and how far
/// before the next.
fn offsets(anchor: Instant, at: Instant, period: Duration) -> (Duration, Duration) {
    let since = at.saturating_duration_since(anchor);
    let late = Duration::from_nanos((since.as_nanos() % period.as_nanos().max(1)) as u64);
    (late, period.saturating_sub(late))
}

/// User and system CPU time of a process and of its waited-for children, in clock ticks.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
struct CpuTicks {
    user: u64,
    system: u64,
    children_user: u64,
    children_system: u64,
}

/// Parses `/proc/<pid>/stat`. The command name (field 2) is in parentheses and may contain
/// spaces and parentheses itself, so fields are counted from the last `)`.
fn parse_stat(stat: &str) -> Option<CpuTicks> {
    let (_, rest) = stat.rsplit_once(')')?;
    let fields: Vec<&str> = rest.split_whitespace().collect();
    // After the name: state is field 3 of the line, index 0 here; utime is field 14.
    let field = |n: usize| fields.get(n - 3)?.parse::<u64>().ok();
    Some(CpuTicks {
        user: field(14)?,
        system: field(15)?,
        children_user: field(16)?,
        children_system: field(17)?,
    })
}

/// Resident set size in bytes from `/proc/<pid>/statm` (its second field, in pages).
fn parse_statm(statm: &str) -> Option<u64> {
    statm.split_whitespace().nth(1)?.parse::<u64>().ok().map(|pages| pages * PAGE_SIZE)
}

fn cpu_ticks() -> CpuTicks {
    std::fs::read_to_string("/proc/self/stat").ok().as_deref().and_then(parse_stat).unwrap_or_default()
}

fn rss_bytes() -> u64 {
    std::fs::read_to_string("/proc/self/statm").ok().as_deref().and_then(parse_statm).unwrap_or(0)
}

/// Resident memory split as the kernel counts it (`/proc/self/status`), in KiB: anonymous
/// pages (the heap, stacks) and file-backed ones (mostly this binary's code, paged in as it
/// first runs and the same in every process that runs it).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
struct RssSplit {
    anon_kib: u64,
    file_kib: u64,
}

impl RssSplit {
    /// Both kinds together (the RSS, less shared memory, which this process has none of).
    fn kib(self) -> u64 {
        self.anon_kib + self.file_kib
    }
}

/// Parses `RssAnon:` and `RssFile:` of a `/proc/<pid>/status`.
fn parse_rss_split(status: &str) -> RssSplit {
    let field = |name: &str| {
        status
            .lines()
            .find_map(|l| l.strip_prefix(name))
            .and_then(|v| v.split_whitespace().next()?.parse().ok())
            .unwrap_or(0)
    };
    RssSplit { anon_kib: field("RssAnon:"), file_kib: field("RssFile:") }
}

fn rss_split() -> RssSplit {
    std::fs::read_to_string("/proc/self/status").map(|s| parse_rss_split(&s)).unwrap_or_default()
}

/// Open sockets of this process (`/proc/self/fd` links to `socket:[…]`): one per probe in
/// flight, plus the runtime's few of its own.
fn open_sockets() -> usize {
    let Ok(dir) = std::fs::read_dir("/proc/self/fd") else { return 0 };
    dir.filter_map(Result::ok)
        .filter(|e| std::fs::read_link(e.path()).is_ok_and(|l| l.to_string_lossy().starts_with("socket:")))
        .count()
}

/// The machine's CPU time over all CPUs (the `cpu` line of `/proc/stat`), in clock ticks: all
/// of it, and the part the hypervisor gave to other guests while this one had work (steal).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
struct MachineTicks {
    total: u64,
    steal: u64,
}

impl MachineTicks {
    /// The steal share of all CPU time from `before` to this reading (0 to 1).
    fn steal_share_since(self, before: MachineTicks) -> f64 {
        let total = self.total.saturating_sub(before.total);
        self.steal.saturating_sub(before.steal) as f64 / total.max(1) as f64
    }
}

/// Parses the `cpu ` line of `/proc/stat`: user, nice, system, idle, iowait, irq, softirq,
/// steal, then guest times that are already counted in user and nice.
fn parse_machine_stat(stat: &str) -> Option<MachineTicks> {
    let line = stat.lines().find(|l| l.starts_with("cpu "))?;
    let fields: Vec<u64> =
        line.split_whitespace().skip(1).take(8).map(|f| f.parse().ok()).collect::<Option<_>>()?;
    (fields.len() == 8).then(|| MachineTicks { total: fields.iter().sum(), steal: fields[7] })
}

/// `None` where `/proc/stat` cannot be read: the line then says `null`, not "no steal".
fn machine_ticks() -> Option<MachineTicks> {
    std::fs::read_to_string("/proc/stat").ok().as_deref().and_then(parse_machine_stat)
}

fn load_average() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .map(|l| l.split_whitespace().take(3).collect::<Vec<_>>().join(" "))
        .unwrap_or_default()
}

fn ticks_to_secs(ticks: u64) -> f64 {
    ticks as f64 / USER_HZ as f64
}

/// A pod UID of the harness (`uid-<n>`) back to its worker number.
fn worker_index(pod_uid: &str) -> Option<usize> {
    pod_uid.strip_prefix("uid-")?.parse().ok()
}

// === measurements: collecting ===

/// Every probe, from the engine's observer or the floor's tasks.
struct Collector {
    period: Duration,
    inner: Mutex<Samples>,
}

struct Samples {
    grids: Vec<Grid>,
    /// The number of the worker `grids[0]` is for (0 but in later rounds of `--churn`).
    first_worker: usize,
    /// Workers that have probed at least once.
    probed: usize,
    recording: bool,
    probes: u64,
    failures: u64,
    lateness: Histogram,
    latency: Histogram,
    /// The same since the last [`Collector::take_second`], for the per-second lines.
    second: Second,
}

impl Samples {
    /// The grid of worker `worker`, if it is a worker of this run (of this round of `--churn`:
    /// see [`Collector::new_round`]).
    fn grid(&mut self, worker: usize) -> Option<&mut Grid> {
        self.grids.get_mut(worker.checked_sub(self.first_worker)?)
    }

    /// The lateness of a probe counted before, known only now (a held one: [`Grid`]).
    fn add_lateness(&mut self, late: Duration) {
        self.second.lateness.record(late.as_micros() as u64);
        if self.recording {
            self.lateness.record(late.as_micros() as u64);
        }
    }

    /// One probe into the counts and histograms: `first` if it is its worker's first, `late`
    /// its lateness when known.
    fn add(&mut self, first: bool, late: Option<Duration>, duration: Duration, ok: bool) {
        if first {
            self.probed += 1;
        }
        let second = &mut self.second;
        second.probes += 1;
        second.failures += u64::from(!ok);
        if let Some(late) = late {
            second.lateness.record(late.as_micros() as u64);
        }
        second.latency.record(duration.as_micros() as u64);
        if !self.recording {
            return;
        }
        self.probes += 1;
        if !ok {
            self.failures += 1;
        }
        if let Some(late) = late {
            self.lateness.record(late.as_micros() as u64);
        }
        self.latency.record(duration.as_micros() as u64);
    }
}

/// What a per-second line reports.
struct Second {
    probes: u64,
    failures: u64,
    lateness: Histogram,
    latency: Histogram,
}

impl Second {
    fn new() -> Self {
        Second { probes: 0, failures: 0, lateness: Histogram::new(), latency: Histogram::new() }
    }
}

impl Collector {
    fn new(workers: usize, period: Duration) -> Arc<Self> {
        Arc::new(Collector {
            period,
            inner: Mutex::new(Samples {
                grids: vec![Grid::new(); workers],
                first_worker: 0,
                probed: 0,
                recording: false,
                probes: 0,
                failures: 0,
                lateness: Histogram::new(),
                latency: Histogram::new(),
                second: Second::new(),
            }),
        })
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Samples> {
        self.inner.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Probes and failures counted so far.
    fn counts(&self) -> (u64, u64) {
        let s = self.lock();
        (s.probes, s.failures)
    }

    /// A new round of `--churn`, whose pods are numbered from `first_worker` on: they take
    /// the grids over from the first, forgotten, so that the grids need not grow (and add to
    /// the RSS the run measures) with every round; a late probe of an earlier round's pod is
    /// not counted.
    fn new_round(&self, first_worker: usize) {
        let mut s = self.lock();
        s.grids.fill(Grid::new());
        s.first_worker = first_worker;
    }

    #[cfg(test)]
    fn record(&self, worker: usize, start: Instant, duration: Duration, ok: bool) {
        self.record_due(worker, None, start, duration, ok);
    }

    /// [`Collector::record`] for an engine probe that waited `waited` for a probe slot before
    /// it started at `start`: the worker asked at `start - waited`, on its schedule, so that
    /// is what is placed on the grid (a first probe that waited would otherwise anchor the grid
    /// late, and every on-time probe after it would read as late), and the wait is added.
    fn record_waited(&self, worker: usize, waited: Duration, start: Instant, duration: Duration, ok: bool) {
        let asked = start.checked_sub(waited).unwrap_or(start);
        let mut s = self.lock();
        let Some(grid) = s.grid(worker) else { return };
        let placed = grid.place_engine(asked, self.period, ENGINE_EARLY_TOLERANCE);
        let late = match placed.late {
            Some(late) => Some(late + waited),
            None if placed.first && !waited.is_zero() => Some(waited),
            None => None,
        };
        if let Some(held_late) = placed.held_late {
            s.add_lateness(held_late);
        }
        s.add(placed.first, late, duration, ok);
    }

    /// [`Collector::record`] for a probe whose due time is known (the floor's `Interval`
    /// says it): its lateness is measured from that, not from the grid its starts imply.
    fn record_due(&self, worker: usize, due: Option<Instant>, start: Instant, duration: Duration, ok: bool) {
        let mut s = self.lock();
        let Some(grid) = s.grid(worker) else { return };
        let first = grid.anchor.is_none();
        let late = match due {
            Some(due) => {
                grid.anchor.get_or_insert(due);
                Some(start.saturating_duration_since(due))
            }
            None => grid.lateness(start, self.period),
        };
        s.add(first, late, duration, ok);
    }

    /// The probes since the last call, and resets them.
    fn take_second(&self) -> Second {
        std::mem::replace(&mut self.lock().second, Second::new())
    }

    fn set_recording(&self, on: bool) {
        self.lock().recording = on;
    }

    fn probed(&self) -> usize {
        self.lock().probed
    }
}

/// Feeds the engine's probe reports to the collector. The engine measures the duration from
/// the probe's start and reports at its end, so the start is now minus the duration.
struct Observer(Arc<Collector>);

impl ProbeObserver for Observer {
    fn observe(&self, record: ProbeRecord<'_>) {
        let now = Instant::now();
        let start = now.checked_sub(record.duration).unwrap_or(now);
        if let Some(worker) = worker_index(&record.pod_uid) {
            let ok = record.result == Ok(ProbeResult::Success);
            self.0.record_waited(worker, record.waited, start, record.duration, ok);
        }
    }
}

/// Waits out the warmup, then measures over the window.
async fn measure(collector: &Collector, args: &Args, mode: &str, setup: Duration) -> serde_json::Value {
    tokio::time::sleep(Duration::from_secs(args.warmup)).await;
    collector.set_recording(true);
    let (cpu0, rss0, t0, machine0) = (cpu_ticks(), rss_bytes(), Instant::now(), machine_ticks());
    tokio::time::sleep(Duration::from_secs(args.window)).await;
    collector.set_recording(false);
    let (cpu1, rss1, elapsed, machine1) = (cpu_ticks(), rss_bytes(), t0.elapsed(), machine_ticks());
    let s = collector.lock();
    let secs = elapsed.as_secs_f64();
    let cpu = ticks_to_secs((cpu1.user + cpu1.system).saturating_sub(cpu0.user + cpu0.system));
    let children = ticks_to_secs(
        (cpu1.children_user + cpu1.children_system).saturating_sub(cpu0.children_user + cpu0.children_system),
    );
    json!({
        "mode": mode,
        "kind": args.kind.name(),
        "workers": args.workers,
        "max_in_flight": args.max_in_flight,
        "period_s": args.period,
        "warmup_s": args.warmup,
        "window_s": round(secs, 3),
        "setup_s": round(setup.as_secs_f64(), 3),
        "probes": s.probes,
        "probes_per_s": round(s.probes as f64 / secs, 1),
        "expected_per_s": round(args.workers as f64 / args.period as f64, 1),
        "failures": s.failures,
        "cpu_s": round(cpu, 2),
        "cpu_us_per_probe": round(cpu * 1e6 / s.probes.max(1) as f64, 1),
        "children_cpu_s": round(children, 2),
        "rss_start_kib": rss0 / 1024,
        "rss_end_kib": rss1 / 1024,
        "lateness_us": {
            "p50": s.lateness.quantile(0.50),
            "p99": s.lateness.quantile(0.99),
            "max": s.lateness.max,
        },
        "latency_us": { "p50": s.latency.quantile(0.50), "p99": s.latency.quantile(0.99) },
        "cpus": std::thread::available_parallelism().map(|n| n.get()).unwrap_or(1),
        "allocator": ALLOCATOR,
        "loadavg": load_average(),
        "steal_pct": machine0.zip(machine1).map(|(before, after)| round(after.steal_share_since(before) * 100.0, 1)),
    })
}

fn round(v: f64, digits: i32) -> f64 {
    let scale = 10f64.powi(digits);
    (v * scale).round() / scale
}

// === the engine ===

/// The target's ports, as it printed them.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
struct Ports {
    http: u16,
    tcp: u16,
    grpc: u16,
}

fn readiness_probe(kind: Kind, ports: Ports, period: u64) -> Probe {
    let mut probe = Probe {
        period_seconds: Some(period as i32),
        timeout_seconds: Some(PROBE_TIMEOUT.as_secs() as i32),
        ..Default::default()
    };
    match kind {
        Kind::Http => {
            probe.http_get = Some(HTTPGetAction {
                path: Some("/".into()),
                port: IntOrString::Int(i32::from(ports.http)),
                ..Default::default()
            })
        }
        Kind::Tcp => {
            probe.tcp_socket =
                Some(TCPSocketAction { port: IntOrString::Int(i32::from(ports.tcp)), ..Default::default() })
        }
        Kind::Grpc => probe.grpc = Some(GRPCAction { port: i32::from(ports.grpc), service: None }),
        Kind::Exec => probe.exec = Some(ExecAction { command: Some(vec!["true".into()]) }),
    }
    probe
}

fn pod(i: usize, probe: &Probe) -> Pod {
    Pod {
        metadata: ObjectMeta {
            name: Some(format!("load-{i}")),
            namespace: Some("default".into()),
            uid: Some(format!("uid-{i}")),
            ..Default::default()
        },
        spec: Some(PodSpec {
            containers: vec![Container {
                name: "app".into(),
                readiness_probe: Some(probe.clone()),
                ..Default::default()
            }],
            ..Default::default()
        }),
        status: None,
    }
}

/// The runtime's view of pod `i`: its container running (or still being created).
fn runtime_status(i: usize, running: bool) -> PodStatus {
    let (state, container_id) = if running {
        let running = ContainerStateRunning { started_at: Some(Time(Timestamp::now())) };
        (ContainerState { running: Some(running), ..Default::default() }, Some(format!("harness://{i}")))
    } else {
        let waiting = ContainerStateWaiting { reason: Some("ContainerCreating".into()), message: None };
        (ContainerState { waiting: Some(waiting), ..Default::default() }, None)
    };
    PodStatus {
        phase: Some(if running { "Running" } else { "Pending" }.into()),
        pod_ip: Some("127.0.0.1".into()),
        container_statuses: Some(vec![ContainerStatus {
            name: "app".into(),
            container_id,
            state: Some(state),
            ..Default::default()
        }]),
        ..Default::default()
    }
}

/// One pod sync as a host does it.
async fn sync(pipeline: &Pipeline, pod: &Arc<Pod>, runtime: PodStatus) -> Result<(), Error> {
    let mut status = pipeline.update_pod_status(pod.clone(), runtime).await?;
    generate_kubelet_conditions(pod, &mut status);
    pipeline.set_pod_status(pod.clone(), status);
    pipeline.add_pod(pod.clone());
    Ok(())
}

/// The engine as the agent starts it: the global metrics registry, workers spread over one
/// arbiter per core, the observer hook; with `jitter` false, without the start-up jitter (the
/// pods are then those added to an agent up for longer than a period).
fn start_pipeline(
    args: &Args,
    registry: &PodRegistry,
    collector: &Arc<Collector>,
    jitter: bool,
) -> Result<Pipeline, Error> {
    PrometheusRegistry::global()?;
    let mut config = PipelineConfig::new(
        Arc::new(LocalCommandRunner::new()),
        Arc::new(LogRecorder),
        Arc::new(registry.clone()),
    );
    config.worker_threads = std::thread::available_parallelism().map(|n| n.get()).unwrap_or(1);
    config.observer = Some(Arc::new(Observer(collector.clone())));
    config.start_up_jitter = jitter;
    config.max_probes_in_flight = args.max_in_flight;
    Ok(Pipeline::start(config))
}

fn engine_load(args: &Args, ports: Ports) -> Result<serde_json::Value, Error> {
    let system = actix::System::new();
    let out = system.block_on(async move {
        let collector = Collector::new(args.workers, Duration::from_secs(args.period));
        let registry = PodRegistry::new();
        let pipeline = start_pipeline(args, &registry, &collector, true)?;
        let probe = readiness_probe(args.kind, ports, args.period);
        let setup = Instant::now();
        for i in 0..args.workers {
            let pod = Arc::new(pod(i, &probe));
            registry.upsert(pod.clone());
            sync(&pipeline, &pod, runtime_status(i, true)).await?;
        }
        let setup = setup.elapsed();
        let line = measure(&collector, args, "probelet", setup).await;
        actix::System::current().stop();
        Ok::<_, Error>(line)
    })?;
    Ok(out)
}

/// How long `--idle` and `--churn` let the engine and the allocator settle before an RSS reading.
const SETTLE: Duration = Duration::from_secs(2);

/// When `--idle` reads RSS a second time after every worker has probed (`probed_settled`):
/// long enough for jemalloc to have handed back the pages of the burst of first probes (its
/// dirty pages decay over ten seconds; the readings of 2026-12-04 had stopped falling by 18 s).
const SETTLED_AFTER: Duration = Duration::from_secs(25);

/// `--idle`: resident memory per worker at a long period. RSS is read before any pod exists,
/// once the pod objects are built and registered with the host (pods), after every pod has a
/// worker that has not probed yet (fresh), and after every worker has probed once; each is
/// given per worker above the first reading, so it includes the pod objects. The upstream start-up jitter would hold a new worker's first probe for up to
/// a period while the manager is younger than one period; to measure without waiting a whole
/// period, the engine runs without it (`PipelineConfig::start_up_jitter`), so the pods are
/// those added to an agent that has been up for longer than a period. They are
/// added as the kubelet adds a new pod: first with the container still being created (the
/// worker waits, "fresh"), then a sync with it running, whose `update_pod_status` triggers
/// the readiness worker's first probe at once.
fn idle(args: &Args, ports: Ports) -> Result<serde_json::Value, Error> {
    let limit = Duration::from_secs(120.max(args.workers as u64 / 100));
    let system = actix::System::new();
    let out = system.block_on(async move {
        let collector = Collector::new(args.workers, Duration::from_secs(args.period));
        let registry = PodRegistry::new();
        let pipeline = start_pipeline(args, &registry, &collector, false)?;
        let probe = readiness_probe(args.kind, ports, args.period);
        tokio::time::sleep(SETTLE).await;
        let before = rss_bytes();

        let pods: Vec<Arc<Pod>> = (0..args.workers).map(|i| Arc::new(pod(i, &probe))).collect();
        for pod in &pods {
            registry.upsert(pod.clone());
        }
        let pod_objects = rss_bytes();

        let started = Instant::now();
        for (i, pod) in pods.iter().enumerate() {
            sync(&pipeline, pod, runtime_status(i, false)).await?;
        }
        while pipeline.workers().await?.len() < args.workers {
            if started.elapsed() > limit {
                return Err("the workers were not all created in time".into());
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        let created = started.elapsed();
        tokio::time::sleep(SETTLE).await;
        let fresh = rss_bytes();
        let early = collector.probed();

        collector.set_recording(true);
        let started = Instant::now();
        for (i, pod) in pods.iter().enumerate() {
            sync(&pipeline, pod, runtime_status(i, true)).await?;
        }
        while collector.probed() < args.workers {
            if started.elapsed() > limit {
                return Err(format!(
                    "only {} of {} workers probed in {limit:?}",
                    collector.probed(),
                    args.workers
                )
                .into());
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        let all_probed = started.elapsed();
        tokio::time::sleep(SETTLE).await;
        let probed = rss_bytes();
        collector.set_recording(false);
        // The reading above is taken while the allocator still holds the pages of the burst of
        // first probes: jemalloc hands them back along its decay curve (ten seconds by
        // default), behind its background thread's timer. The idle workers' own cost is the
        // reading once that has run its course.
        tokio::time::sleep(SETTLED_AFTER - SETTLE).await;
        let settled = rss_bytes();
        let s = collector.lock();
        let per_worker = |rss: u64| round(rss.saturating_sub(before) as f64 / 1024.0 / args.workers as f64, 2);
        let line = json!({
            "mode": "idle",
            "kind": args.kind.name(),
            "workers": args.workers,
            "period_s": args.period,
            "first_probes": "prompt: engine clock one period ahead of the manager's start (no start-up jitter); \
                             first probe triggered by the sync that shows the container running",
            "workers_created_s": round(created.as_secs_f64(), 3),
            "all_probed_s": round(all_probed.as_secs_f64(), 3),
            "probed_before_running": early,
            "probes": s.probes,
            "failures": s.failures,
            "rss_kib": {
                "before": before / 1024,
                "pods": pod_objects / 1024,
                "fresh": fresh / 1024,
                "probed": probed / 1024,
                "probed_settled": settled / 1024,
            },
            "kib_per_worker": {
                "pods": per_worker(pod_objects),
                "fresh": per_worker(fresh),
                "probed": per_worker(probed),
                "probed_settled": per_worker(settled),
            },
            "probed_settled_after_s": SETTLED_AFTER.as_secs(),
            "allocator": ALLOCATOR,
            "loadavg": load_average(),
        });
        drop(s);
        actix::System::current().stop();
        Ok::<_, Error>(line)
    })?;
    Ok(out)
}

/// `--churn`: pods added and removed at `--workers` per second for `--window` seconds, as a
/// host does it. Every 10 ms the pods due by then are added (registered, synced with their
/// container running: `update_pod_status`, conditions, `set_pod_status`, `add_pod`) and the
/// oldest removed until one second's worth (`--workers`) is left (`remove_pod`, deregistered,
/// then one `remove_orphaned_statuses` with the pods left, as the agent's hosts do on a
/// deletion): each pod lives about a second, the population stays at `--workers` however late
/// a tick runs, and each pod probes at `--period` (its first probe at once: the engine runs
/// without the start-up jitter, as for `--idle`). At the end the
/// last pods are removed and the run waits for the workers to exit. RSS is read before the
/// first pod, after the first 5 s (the population and the allocator at their steady state),
/// at the end of the window, 2 s, 17 s and 47 s after everything is removed (an allocator
/// that returns freed pages does it on a timer), each also split into anonymous and
/// file-backed pages; the workers, cached statuses and status views left at the end are
/// counted.
///
/// With `--rounds N` the same engine goes through N such rounds, each with new pods, and the
/// line has the first round's figures (its probes and failures: all rounds') and one entry per
/// round: whether what a round leaves behind is paid once (the code paged in, the allocator's
/// caches) or again every round. Each round's entry also has the RSS where that round started
/// (just before its first pod) and its reading 47 s after the removal against it: for the
/// rounds after the first, the churn on an engine that has run pods before, as on a node.
///
/// `--churn --floor` churns bare tokio tasks the same way ([`floor::churn`]): what the process,
/// its runtime and its allocator keep of a churn with no engine at all.
fn churn(args: &Args, ports: Ports) -> Result<serde_json::Value, Error> {
    let per_round = args.workers.saturating_mul(args.window as usize);
    let system = actix::System::new();
    let out = system.block_on(async move {
        let collector = Collector::new(per_round, Duration::from_secs(args.period));
        let registry = PodRegistry::new();
        let pipeline = start_pipeline(args, &registry, &collector, false)?;
        let probe = readiness_probe(args.kind, ports, args.period);
        collector.set_recording(true);
        tokio::time::sleep(SETTLE).await;
        let before = rss_bytes();
        let before_split = rss_split();
        let mut pods =
            EnginePods { pipeline: &pipeline, registry: &registry, probe: &probe, live: Default::default() };
        let mut rounds = Vec::with_capacity(args.rounds);
        for round in 0..args.rounds {
            let first_pod = round * per_round;
            collector.new_round(first_pod);
            let (probes, failures) = collector.counts();
            let measured = churn_round(args, &mut pods, first_pod, before).await?;
            let (probes_after, failures_after) = collector.counts();
            rounds.push((measured, probes_after - probes, failures_after - failures));
        }
        collector.set_recording(false);
        let line = churn_line(args, "churn", &collector, (before, before_split), &rounds)?;
        actix::System::current().stop();
        Ok::<_, Error>(line)
    })?;
    Ok(out)
}

/// The `--churn` line (the engine's or the floor's, `mode`): the first round's figures, and
/// with `--rounds N` one entry per round. `before` is the RSS before the first pod, as
/// [`rss_bytes`] and as [`rss_split`] read it.
fn churn_line(
    args: &Args,
    mode: &str,
    collector: &Collector,
    (before, before_split): (u64, RssSplit),
    rounds: &[(ChurnRound, u64, u64)],
) -> Result<serde_json::Value, Error> {
    let (probes, failures) = collector.counts();
    let Some((first, _, _)) = rounds.first() else { return Err("--rounds: at least 1".into()) };
    let kib = |b: u64| b / 1024;
    let secs = first.elapsed.as_secs_f64();
    let mut line = json!({
        "mode": mode,
        "kind": args.kind.name(),
        "pods_per_s_asked": args.workers,
        "period_s": args.period,
        "window_s": round(secs, 3),
        "added": first.added,
        "removed": first.removed,
        "adds_per_s": round(first.added as f64 / secs, 1),
        "max_live_pods": first.max_live,
        "workers_at_window_end": first.workers_at_window_end,
        "drain_s": round(first.drained.as_secs_f64(), 3),
        "left": first.left,
        "probes": probes,
        "failures": failures,
        "rss_kib": {
            "before": kib(before),
            "after_5s": first.warm.map(kib),
            "max": kib(first.rss_max),
            "end_of_window": kib(first.end_of_window),
            "after_removal": kib(first.after),
            "after_removal_17s": kib(first.returned),
        },
        "rss_anon_file_kib": {
            "before": [before_split.anon_kib, before_split.file_kib],
            "after_removal": [first.after_split.anon_kib, first.after_split.file_kib],
            "after_removal_17s": [first.returned_split.anon_kib, first.returned_split.file_kib],
            "after_removal_47s": [first.returned_late.anon_kib, first.returned_late.file_kib],
        },
        "after_removal_vs_before": round(first.after as f64 / before.max(1) as f64, 3),
        "after_removal_17s_vs_before": round(first.returned as f64 / before.max(1) as f64, 3),
        "after_removal_47s_vs_before": round(first.returned_late.kib() as f64 / before_split.kib().max(1) as f64, 3),
        "anon_after_removal_17s_vs_before": round(
            first.returned_split.anon_kib as f64 / before_split.anon_kib.max(1) as f64,
            3
        ),
        "end_of_window_vs_after_5s": first.warm.map(|w| round(first.end_of_window as f64 / w.max(1) as f64, 3)),
        "allocator": ALLOCATOR,
        "loadavg": load_average(),
    });
    if args.rounds > 1 {
        let each: Vec<serde_json::Value> = rounds
            .iter()
            .map(|(r, probes, failures)| {
                json!({
                    "adds_per_s": round(r.added as f64 / r.elapsed.as_secs_f64(), 1),
                    "probes": probes,
                    "failures": failures,
                    "left": r.left,
                    "rss_kib_after_5s": r.warm.map(kib),
                    "rss_kib_end_of_window": kib(r.end_of_window),
                    "rss_kib_after_removal_17s": kib(r.returned),
                    "rss_anon_file_kib_after_removal_17s": [r.returned_split.anon_kib, r.returned_split.file_kib],
                    "rss_anon_file_kib_after_removal_47s": [r.returned_late.anon_kib, r.returned_late.file_kib],
                    "after_removal_17s_vs_before": round(r.returned as f64 / before.max(1) as f64, 3),
                    "after_removal_47s_vs_before": round(r.returned_late.kib() as f64 / before_split.kib().max(1) as f64, 3),
                    "after_removal_47s_vs_round_1": round(r.returned_late.kib() as f64 / first.returned_late.kib().max(1) as f64, 3),
                    "rss_anon_file_kib_at_round_start": [r.started.anon_kib, r.started.file_kib],
                    "after_removal_47s_vs_round_start": round(r.returned_late.kib() as f64 / r.started.kib().max(1) as f64, 3),
                })
            })
            .collect();
        line["rounds"] = serde_json::Value::Array(each);
    }
    Ok(line)
}

/// What one round of `--churn` measured.
struct ChurnRound {
    /// RSS just before the round's first pod: where this round started (the reading before the
    /// first pod for the first round; what the round before left, for the later ones).
    started: RssSplit,
    elapsed: Duration,
    added: usize,
    removed: usize,
    max_live: usize,
    workers_at_window_end: usize,
    drained: Duration,
    /// RSS 5 s into the round, once the population is at its steady state.
    warm: Option<u64>,
    rss_max: u64,
    end_of_window: u64,
    /// RSS 2 s after the last pod went, and 17 s after it.
    after: u64,
    after_split: RssSplit,
    returned: u64,
    returned_split: RssSplit,
    /// RSS 47 s after the last pod went.
    returned_late: RssSplit,
    /// What the engine holds once the round's pods are gone (all zero when nothing is left).
    left: serde_json::Value,
}

/// What a churn round adds and removes: the engine's pods, or the floor's tasks.
trait Churned {
    /// Adds item `index` (each round's are numbered on from the last round's, so they are new).
    async fn add(&mut self, index: usize) -> Result<(), Error>;
    /// Removes the oldest item, if there is one.
    fn remove_oldest(&mut self) -> bool;
    /// Called once after a tick that removed some (the hosts' `remove_orphaned_statuses`).
    fn after_removals(&mut self) {}
    /// The items alive.
    fn live(&self) -> usize;
    /// The workers (or tasks) running.
    async fn running(&self) -> Result<usize, Error>;
    /// What is left once every item is removed and the workers have gone.
    async fn left(&self) -> Result<serde_json::Value, Error>;
}

/// The engine's pods, added and removed as a host does it.
struct EnginePods<'a> {
    pipeline: &'a Pipeline,
    registry: &'a PodRegistry,
    probe: &'a Probe,
    live: std::collections::VecDeque<Arc<Pod>>,
}

impl Churned for EnginePods<'_> {
    async fn add(&mut self, index: usize) -> Result<(), Error> {
        let pod = Arc::new(pod(index, self.probe));
        self.registry.upsert(pod.clone());
        sync(self.pipeline, &pod, runtime_status(index, true)).await?;
        self.live.push_back(pod);
        Ok(())
    }

    fn remove_oldest(&mut self) -> bool {
        let Some(pod) = self.live.pop_front() else { return false };
        remove(self.pipeline, self.registry, &pod);
        true
    }

    fn after_removals(&mut self) {
        self.pipeline.remove_orphaned_statuses(live_uids(&self.live));
    }

    fn live(&self) -> usize {
        self.live.len()
    }

    async fn running(&self) -> Result<usize, Error> {
        Ok(self.pipeline.workers().await?.len())
    }

    async fn left(&self) -> Result<serde_json::Value, Error> {
        Ok(json!({
            "workers": self.pipeline.workers().await?.len(),
            "statuses": self.pipeline.statuses().await?.len(),
            "status_views": self.pipeline.views.len(),
            "results": self.pipeline.results_view.len(),
            "registered_pods": self.registry.pods().len(),
        }))
    }
}

/// One round of `--churn` (see [`churn`]): items numbered from `first_pod`, so that each round's
/// are new.
async fn churn_round(
    args: &Args,
    items: &mut impl Churned,
    first_pod: usize,
    rss_at_start: u64,
) -> Result<ChurnRound, Error> {
    const TICK: Duration = Duration::from_millis(10);
    let started = rss_split();
    let rate = args.workers;
    let window = Duration::from_secs(args.window);
    let total = rate.saturating_mul(args.window as usize);
    let (mut added, mut removed, mut max_live) = (0usize, 0usize, 0usize);
    let (mut warm, mut rss_max) = (None, rss_at_start);
    let mut ticks = tokio::time::interval(TICK);
    ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Skip);
    let start = Instant::now();
    while start.elapsed() < window {
        ticks.tick().await;
        let due = ((start.elapsed().as_secs_f64() * rate as f64) as usize).min(total);
        let mut removed_now = false;
        while added < due {
            items.add(first_pod + added).await?;
            added += 1;
            max_live = max_live.max(items.live());
            // One in, one out: the population never passes one second's worth, however
            // far behind the adds run.
            while items.live() > rate && items.remove_oldest() {
                removed += 1;
                removed_now = true;
            }
        }
        if removed_now {
            items.after_removals();
        }
        if warm.is_none() && start.elapsed() >= WARM {
            warm = Some(rss_bytes());
        }
        rss_max = rss_max.max(rss_bytes());
    }
    let elapsed = start.elapsed();
    let end_of_window = rss_bytes();
    let workers_at_window_end = items.running().await?;
    while items.remove_oldest() {
        removed += 1;
    }
    items.after_removals();
    let drain = Instant::now();
    while items.running().await? > 0 && drain.elapsed() < Duration::from_secs(60) {
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let drained = drain.elapsed();
    let (after, after_split, returned, returned_split, returned_late) = read_after_removal().await;
    Ok(ChurnRound {
        started,
        elapsed,
        added,
        removed,
        max_live,
        workers_at_window_end,
        drained,
        warm,
        rss_max,
        end_of_window,
        after,
        after_split,
        returned,
        returned_split,
        returned_late,
        left: items.left().await?,
    })
}

/// RSS 5 s into a churn round, once the population and the allocator are at their steady state.
const WARM: Duration = Duration::from_secs(5);

/// RSS after a churn round's last removal: 2 s, 17 s and 47 s after it, the first two also as
/// [`rss_bytes`] reads them.
async fn read_after_removal() -> (u64, RssSplit, u64, RssSplit, RssSplit) {
    tokio::time::sleep(SETTLE).await;
    let after = rss_bytes();
    let after_split = rss_split();
    // An allocator that gives freed pages back does so on a timer (jemalloc's background
    // thread decays them over 10 s): read again once that is past.
    tokio::time::sleep(Duration::from_secs(15)).await;
    let returned = rss_bytes();
    let returned_split = rss_split();
    // It may take longer: jemalloc purges along a decay curve, on its background thread's
    // timer, and a round's reading at 17 s has been seen at twice its reading 5 s later.
    tokio::time::sleep(Duration::from_secs(30)).await;
    (after, after_split, returned, returned_split, rss_split())
}

/// The host's removal of a deleted pod: its workers stopped, then the pod deregistered (its
/// status goes with the next `remove_orphaned_statuses`).
fn remove(pipeline: &Pipeline, registry: &PodRegistry, pod: &Arc<Pod>) {
    pipeline.remove_pod(pod.clone());
    if let Some(uid) = pod.metadata.uid.as_deref() {
        registry.remove(uid);
    }
}

fn live_uids(
    live: &std::collections::VecDeque<Arc<Pod>>,
) -> std::collections::HashSet<probelet_actors::vocabulary::PodUid> {
    live.iter().filter_map(|pod| probelet_actors::vocabulary::PodUid::of(pod)).collect()
}

// === overload ===

mod overload {
    //! `--overload-workers N --overload-for SECS`: N workers for SECS (more than the machine
    //! can probe on time, say), then the pods above `--workers` go and the rest run for the
    //! window. A JSON line per second (probes finished, failures, RSS, probe sockets open,
    //! lateness and latency of the probes finished in that second), then one per phase. It
    //! shows whether an overload spirals (probes pile up, memory grows, everything fails) and
    //! how soon the probes are back on schedule once the load falls.

    use super::*;

    pub fn run(args: &Args, ports: Ports) -> Result<serde_json::Value, Error> {
        if args.floor { floor(args, ports) } else { engine(args, ports) }
    }

    fn engine(args: &Args, ports: Ports) -> Result<serde_json::Value, Error> {
        let system = actix::System::new();
        let out = system.block_on(async move {
            let collector = Collector::new(args.overload_workers, Duration::from_secs(args.period));
            let registry = PodRegistry::new();
            let baseline = open_sockets();
            let pipeline = start_pipeline(args, &registry, &collector, true)?;
            let probe = readiness_probe(args.kind, ports, args.period);
            let mut pods = Vec::with_capacity(args.overload_workers);
            for i in 0..args.overload_workers {
                let pod = Arc::new(pod(i, &probe));
                registry.upsert(pod.clone());
                sync(&pipeline, &pod, runtime_status(i, true)).await?;
                pods.push(pod);
            }
            // One clean-up of the pods that went, as the kubelet's housekeeping does it: the
            // prober manager finds a pod's workers by a scan of all of them, so one
            // `remove_pod` per pod would cost the removal of thousands of pods squared.
            let drop_load = || {
                let mut keep = std::collections::HashSet::new();
                for (i, pod) in pods.iter().enumerate() {
                    let uid = probelet_actors::vocabulary::PodUid::of(pod).unwrap_or_default();
                    if i < args.workers {
                        keep.insert(uid);
                    } else {
                        registry.remove(&uid);
                    }
                }
                pipeline.cleanup_pods(keep);
            };
            let line = phases(&collector, args, "probelet", baseline, drop_load).await;
            actix::System::current().stop();
            Ok::<_, Error>(line)
        })?;
        Ok(out)
    }

    fn floor(args: &Args, ports: Ports) -> Result<serde_json::Value, Error> {
        let threads = std::thread::available_parallelism().map(|n| n.get()).unwrap_or(1);
        let runtime =
            tokio::runtime::Builder::new_multi_thread().worker_threads(threads).enable_all().build()?;
        let line = runtime.block_on(async move {
            let collector = Collector::new(args.overload_workers, Duration::from_secs(args.period));
            let period = Duration::from_secs(args.period);
            let baseline = open_sockets();
            let mut tasks = tokio::task::JoinSet::new();
            let mut handles = Vec::with_capacity(args.overload_workers);
            for i in 0..args.overload_workers {
                let first = tokio::time::Instant::now() + period.mul_f64(rand::random::<f64>());
                handles.push(tasks.spawn(super::floor::worker(
                    i,
                    args.kind,
                    ports,
                    first,
                    period,
                    collector.clone(),
                )));
            }
            let drop_load = || {
                for handle in handles.drain(args.workers..) {
                    handle.abort();
                }
            };
            let line = phases(&collector, args, "floor", baseline, drop_load).await;
            tasks.abort_all();
            line
        });
        runtime.shutdown_background();
        Ok(line)
    }

    /// One phase's totals, from its per-second samples.
    struct Phase {
        name: &'static str,
        workers: usize,
        seconds: u64,
        probes: u64,
        failures: u64,
        lateness: Histogram,
        latency: Histogram,
        max_sockets: usize,
        rss_start: u64,
        rss_max: u64,
        rss_end: u64,
        cpu_ticks: u64,
        /// Seconds until a second whose lateness p99 was within a tenth of a period.
        back_on_schedule_s: Option<u64>,
    }

    async fn phases(
        collector: &Collector,
        args: &Args,
        mode: &str,
        baseline_sockets: usize,
        drop_load: impl FnOnce(),
    ) -> serde_json::Value {
        let period = Duration::from_secs(args.period);
        let over = second_by_second(
            collector,
            "overload",
            args.overload_workers,
            args.overload_for,
            baseline_sockets,
            period,
        )
        .await;
        drop_load();
        let after =
            second_by_second(collector, "after", args.workers, args.window, baseline_sockets, period).await;
        let summary = |p: &Phase| {
            json!({
                "phase": p.name,
                "workers": p.workers,
                "seconds": p.seconds,
                "probes_per_s": round(p.probes as f64 / p.seconds.max(1) as f64, 1),
                "expected_per_s": round(p.workers as f64 / args.period as f64, 1),
                "failures": p.failures,
                "cpu_us_per_probe": round(ticks_to_secs(p.cpu_ticks) * 1e6 / p.probes.max(1) as f64, 1),
                "max_probe_sockets": p.max_sockets,
                "rss_kib": { "start": p.rss_start / 1024, "max": p.rss_max / 1024, "end": p.rss_end / 1024 },
                "lateness_us": { "p50": p.lateness.quantile(0.5), "p99": p.lateness.quantile(0.99), "max": p.lateness.max },
                "latency_us": { "p50": p.latency.quantile(0.5), "p99": p.latency.quantile(0.99) },
                "back_on_schedule_after_s": p.back_on_schedule_s,
            })
        };
        json!({
            "mode": mode,
            "kind": args.kind.name(),
            "period_s": args.period,
            "phases": [summary(&over), summary(&after)],
            "cpus": std::thread::available_parallelism().map(|n| n.get()).unwrap_or(1),
            "allocator": ALLOCATOR,
            "loadavg": load_average(),
        })
    }

    async fn second_by_second(
        collector: &Collector,
        name: &'static str,
        workers: usize,
        seconds: u64,
        baseline_sockets: usize,
        period: Duration,
    ) -> Phase {
        let rss = rss_bytes();
        let mut phase = Phase {
            name,
            workers,
            seconds,
            probes: 0,
            failures: 0,
            lateness: Histogram::new(),
            latency: Histogram::new(),
            max_sockets: 0,
            rss_start: rss,
            rss_max: rss,
            rss_end: rss,
            cpu_ticks: 0,
            back_on_schedule_s: None,
        };
        // The probes of the last second of the previous phase are not this phase's.
        collector.take_second();
        let start = tokio::time::Instant::now();
        let mut cpu = cpu_ticks();
        for t in 1..=seconds {
            tokio::time::sleep_until(start + Duration::from_secs(t)).await;
            let second = collector.take_second();
            let now_cpu = cpu_ticks();
            let ticks = (now_cpu.user + now_cpu.system).saturating_sub(cpu.user + cpu.system);
            cpu = now_cpu;
            // Off this thread: with the engine, it is the one its results cache, status manager
            // and prober manager run on, and a scan of thousands of descriptors takes a while.
            let sockets = tokio::task::spawn_blocking(open_sockets).await.unwrap_or(0);
            let sockets = sockets.saturating_sub(baseline_sockets);
            let rss = rss_bytes();
            let p99 = second.lateness.quantile(0.99);
            if phase.back_on_schedule_s.is_none()
                && second.probes > 0
                && Duration::from_micros(p99) <= period / 10
            {
                phase.back_on_schedule_s = Some(t);
            }
            println!(
                "{}",
                json!({
                    "phase": name,
                    "t_s": t,
                    "probes": second.probes,
                    "failures": second.failures,
                    "cpu_s": round(ticks_to_secs(ticks), 2),
                    "probe_sockets": sockets,
                    "rss_kib": rss / 1024,
                    "lateness_us": { "p50": second.lateness.quantile(0.5), "p99": p99 },
                    "latency_us": { "p50": second.latency.quantile(0.5), "p99": second.latency.quantile(0.99) },
                })
            );
            phase.probes += second.probes;
            phase.failures += second.failures;
            phase.lateness.merge(&second.lateness);
            phase.latency.merge(&second.latency);
            phase.max_sockets = phase.max_sockets.max(sockets);
            phase.rss_max = phase.rss_max.max(rss);
            phase.rss_end = rss;
            phase.cpu_ticks += ticks;
        }
        phase
    }
}

// === the floor ===

mod floor {
    //! The same I/O as the engine's executors with nothing around it: a task per worker on a
    //! fixed-rate interval, a new connection per probe, the result counted.

    use super::*;
    use bytes::Bytes;
    use http_body_util::{BodyExt, Empty};
    use hyper_util::rt::TokioIo;
    use tokio::net::TcpSocket;
    use tonic_health::pb::HealthCheckRequest;
    use tonic_health::pb::health_client::HealthClient;

    pub fn run(args: &Args, ports: Ports) -> Result<serde_json::Value, Error> {
        let threads = std::thread::available_parallelism().map(|n| n.get()).unwrap_or(1);
        let runtime =
            tokio::runtime::Builder::new_multi_thread().worker_threads(threads).enable_all().build()?;
        // `--floor-per-core`: one single-threaded runtime per core, each driven by its own
        // thread until the run ends.
        let mut cores = Vec::new();
        let mut stops = Vec::new();
        if args.floor_per_core {
            for _ in 0..threads {
                let core = tokio::runtime::Builder::new_current_thread().enable_all().build()?;
                let handle = core.handle().clone();
                let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
                stops.push(stop);
                cores.push((handle, std::thread::spawn(move || core.block_on(stopped))));
            }
        }
        let handles: Vec<tokio::runtime::Handle> = cores.iter().map(|(h, _)| h.clone()).collect();
        let line = runtime.block_on(async move {
            let collector = Collector::new(args.workers, Duration::from_secs(args.period));
            let period = Duration::from_secs(args.period);
            let setup = Instant::now();
            let mut tasks = Vec::with_capacity(args.workers);
            for i in 0..args.workers {
                // Spread the first probes over a period, as the prober manager's start-up
                // jitter spreads those of workers created while it is young.
                let first = tokio::time::Instant::now() + period.mul_f64(rand::random::<f64>());
                let task = worker(i, args.kind, ports, first, period, collector.clone());
                tasks.push(match handles.get(i % handles.len().max(1)) {
                    Some(core) => core.spawn(task),
                    None => tokio::spawn(task),
                });
            }
            let line = measure(&collector, args, mode(args), setup.elapsed()).await;
            for task in &tasks {
                task.abort();
            }
            line
        });
        for stop in stops {
            let _ = stop.send(());
        }
        for (_, thread) in cores {
            let _ = thread.join();
        }
        runtime.shutdown_background();
        Ok(line)
    }

    fn mode(args: &Args) -> &'static str {
        if args.floor_per_core { "floor-per-core" } else { "floor" }
    }

    /// `--churn --floor`: the churn of [`super::churn`] with bare tokio tasks for pods, on the
    /// runtime [`run`] uses: each task probes at once and then at the period, and a removal
    /// aborts it. RSS is read at the same moments, so what the process, the runtime and the
    /// allocator keep of a churn with no engine at all can be set beside the engine's.
    pub fn churn(args: &Args, ports: Ports) -> Result<serde_json::Value, Error> {
        let threads = std::thread::available_parallelism().map(|n| n.get()).unwrap_or(1);
        let runtime =
            tokio::runtime::Builder::new_multi_thread().worker_threads(threads).enable_all().build()?;
        let per_round = args.workers.saturating_mul(args.window as usize);
        let line = runtime.block_on(async move {
            let collector = Collector::new(per_round, Duration::from_secs(args.period));
            collector.set_recording(true);
            tokio::time::sleep(SETTLE).await;
            let before = (rss_bytes(), rss_split());
            let mut tasks = FloorTasks {
                kind: args.kind,
                ports,
                period: Duration::from_secs(args.period),
                collector: collector.clone(),
                running: Arc::new(AtomicUsize::new(0)),
                live: Default::default(),
            };
            let mut rounds = Vec::with_capacity(args.rounds);
            for round in 0..args.rounds {
                let first_pod = round * per_round;
                collector.new_round(first_pod);
                let (probes, failures) = collector.counts();
                let measured = churn_round(args, &mut tasks, first_pod, before.0).await?;
                let (probes_after, failures_after) = collector.counts();
                rounds.push((measured, probes_after - probes, failures_after - failures));
            }
            collector.set_recording(false);
            churn_line(args, "churn-floor", &collector, before, &rounds)
        });
        runtime.shutdown_background();
        line
    }

    /// The floor's churned items: bare tasks that probe at once and then every period, aborted
    /// on removal.
    struct FloorTasks {
        kind: Kind,
        ports: Ports,
        period: Duration,
        collector: Arc<Collector>,
        running: Arc<AtomicUsize>,
        live: std::collections::VecDeque<tokio::task::JoinHandle<()>>,
    }

    impl Churned for FloorTasks {
        async fn add(&mut self, index: usize) -> Result<(), Error> {
            let now = tokio::time::Instant::now();
            let task = worker(index, self.kind, self.ports, now, self.period, self.collector.clone());
            let running = Running::new(&self.running);
            self.live.push_back(tokio::spawn(async move {
                let _running = running;
                task.await;
            }));
            Ok(())
        }

        fn remove_oldest(&mut self) -> bool {
            let Some(task) = self.live.pop_front() else { return false };
            task.abort();
            true
        }

        fn live(&self) -> usize {
            self.live.len()
        }

        async fn running(&self) -> Result<usize, Error> {
            Ok(self.running.load(Ordering::Relaxed))
        }

        async fn left(&self) -> Result<serde_json::Value, Error> {
            Ok(json!({ "tasks": self.running.load(Ordering::Relaxed) }))
        }
    }

    /// Counts a churn task as running until it ends or is aborted (dropped).
    struct Running(Arc<AtomicUsize>);

    impl Running {
        fn new(count: &Arc<AtomicUsize>) -> Self {
            count.fetch_add(1, Ordering::Relaxed);
            Running(count.clone())
        }
    }

    impl Drop for Running {
        fn drop(&mut self) {
            self.0.fetch_sub(1, Ordering::Relaxed);
        }
    }

    pub(super) async fn worker(
        i: usize,
        kind: Kind,
        ports: Ports,
        first: tokio::time::Instant,
        period: Duration,
        collector: Arc<Collector>,
    ) {
        let mut ticks = tokio::time::interval_at(first, period);
        ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Skip);
        loop {
            let due = ticks.tick().await.into_std();
            let start = Instant::now();
            let ok = matches!(tokio::time::timeout(PROBE_TIMEOUT, probe(kind, ports)).await, Ok(Ok(true)));
            collector.record_due(i, Some(due), start, start.elapsed(), ok);
        }
    }

    async fn probe(kind: Kind, ports: Ports) -> Result<bool, Error> {
        match kind {
            Kind::Http => http(ports.http).await,
            Kind::Tcp => {
                connect(ports.tcp).await?;
                Ok(true)
            }
            Kind::Grpc => grpc(ports.grpc).await,
            Kind::Exec => {
                let out = tokio::process::Command::new("true")
                    .stdin(Stdio::null())
                    .stdout(Stdio::piped())
                    .stderr(Stdio::piped())
                    .kill_on_drop(true)
                    .output()
                    .await?;
                Ok(out.status.success())
            }
        }
    }

    /// A connection closed with RST, as the engine's dialer does (no TIME_WAIT left behind).
    async fn connect(port: u16) -> Result<tokio::net::TcpStream, Error> {
        let socket = TcpSocket::new_v4()?;
        socket.set_zero_linger()?;
        Ok(socket.connect((std::net::Ipv4Addr::LOCALHOST, port).into()).await?)
    }

    /// A new-connection HTTP/1.1 GET with `Connection: close`; the connection is driven in
    /// this task, the body read up to the cap.
    async fn http(port: u16) -> Result<bool, Error> {
        let stream = connect(port).await?;
        let (mut sender, conn) = hyper::client::conn::http1::handshake(TokioIo::new(stream)).await?;
        let request = http::Request::get("/")
            .header(http::header::HOST, format!("127.0.0.1:{port}"))
            .header(http::header::USER_AGENT, "kube-probe/1.35")
            .header(http::header::ACCEPT, "*/*")
            .header(http::header::CONNECTION, "close")
            .body(Empty::<Bytes>::new())?;
        let exchange = async move {
            let response = sender.send_request(request).await?;
            let ok = response.status().is_success() || response.status().is_redirection();
            let mut body = response.into_body();
            let mut read = 0;
            while read < BODY_CAP {
                match body.frame().await {
                    Some(frame) => read += frame?.data_ref().map_or(0, Bytes::len),
                    None => break,
                }
            }
            Ok::<_, Error>(ok)
        };
        let (ok, _closed) = tokio::join!(exchange, conn);
        ok
    }

    /// A health Check on a new channel.
    async fn grpc(port: u16) -> Result<bool, Error> {
        let channel =
            tonic::transport::Endpoint::from_shared(format!("http://127.0.0.1:{port}"))?.connect().await?;
        let response =
            HealthClient::new(channel).check(HealthCheckRequest { service: String::new() }).await?;
        Ok(response.into_inner().status == tonic_health::ServingStatus::Serving as i32)
    }
}

// === the target ===

mod contend {
    //! `--contend`: busy threads beside the run, one pinned to each CPU this process may use,
    //! so that the prober shares the CPUs as it does on a node; in a child process whose CPU is
    //! not counted.
    //!
    //! Each thread is runnable for `PERCENT` % of every [`EVERY`], the CPUs' busy slices spread
    //! evenly over the cycle, so that at low percentages some CPU is free at most moments (on
    //! N CPUs, while PERCENT ≤ 100/N): a prober that can move its work to a free CPU keeps its
    //! schedule, one whose work waits on the busy CPU does not. At normal priority the kernel
    //! shares each CPU between the busy thread and whatever else runs there (other pods'
    //! containers), so the busy thread takes at most PERCENT %; with `preempt` they run at
    //! real-time priority (`chrt -f`), so whatever ran on a CPU stops for the whole slice, as a
    //! thread on a vCPU the hypervisor has lent to another guest does.

    use super::*;
    use std::io::Read;
    use std::sync::mpsc;

    /// The busy threads' cycle.
    pub const EVERY: Duration = Duration::from_millis(50);
    /// The most of each CPU `--contend` takes: the run needs the rest.
    pub const MAX_PERCENT: u8 = 90;
    /// The real-time priority of `--contend-preempt` (`chrt -f`); any real-time priority
    /// preempts every ordinary thread.
    const PREEMPT_PRIORITY: &str = "10";
    /// What `--contend-preempt` needs when the busy threads do not start.
    const PREEMPT_HINT: &str = " (--contend-preempt runs them with `chrt -f`, which needs util-linux and \
the right to real-time scheduling: root or CAP_SYS_NICE, and a real-time budget in the cgroup)";

    /// What `--contend` asked for.
    #[derive(Debug, Clone, Copy, PartialEq, Eq)]
    pub struct Contend {
        /// How much of each CPU the busy threads take.
        pub percent: u8,
        /// Run them at real-time priority.
        pub preempt: bool,
    }

    /// The `n`-th of `cpus` busy threads' slice in each cycle: how long, and where in the cycle
    /// it starts.
    pub fn slice(n: usize, cpus: usize, percent: u8) -> (Duration, Duration) {
        let busy = EVERY * u32::from(percent.min(MAX_PERCENT)) / 100;
        let phase = EVERY * (n % cpus.max(1)) as u32 / cpus.max(1) as u32;
        (busy, phase)
    }

    /// The start of the slice after the one that started at `slice`, at `now`: one cycle on,
    /// or, for a thread held off its CPU for a cycle or more, the first one not yet over, so the
    /// phase is kept and missed slices are skipped rather than run back to back.
    pub fn next_slice(slice: Instant, now: Instant) -> Instant {
        let mut next = slice + EVERY;
        while next + EVERY <= now {
            next += EVERY;
        }
        next
    }

    /// The busy process; killed and reaped when dropped.
    pub struct Contention {
        child: Child,
        /// Held open: the busy process exits when it closes, even if this process is killed.
        _stdin: Option<ChildStdin>,
        preempt: bool,
    }

    impl Contention {
        pub fn start(contend: Contend) -> Result<Contention, Error> {
            let hint = if contend.preempt { PREEMPT_HINT } else { "" };
            let exe = std::env::current_exe()?;
            let mut command = if contend.preempt {
                let mut chrt = Command::new("chrt");
                chrt.args(["-f", PREEMPT_PRIORITY]).arg(exe);
                chrt
            } else {
                Command::new(exe)
            };
            let mut child = command
                .arg(SERVE_CONTENTION)
                .arg(contend.percent.to_string())
                .stdin(Stdio::piped())
                .stdout(Stdio::piped())
                .stderr(Stdio::inherit())
                .spawn()
                .map_err(|e| format!("--contend: could not start the busy threads: {e}{hint}"))?;
            let stdin = child.stdin.take();
            let mut contention = Contention { child, _stdin: stdin, preempt: contend.preempt };
            let stdout = contention.child.stdout.take().ok_or("the busy threads have no stdout")?;
            let mut line = String::new();
            BufReader::new(stdout).read_line(&mut line)?;
            if line.trim() != "busy" {
                return Err(format!("--contend: the busy threads did not start{hint}").into());
            }
            Ok(contention)
        }

        /// Fails if the busy process has gone: a run it did not last through says nothing about
        /// contention.
        pub fn check_alive(&mut self) -> Result<(), Error> {
            match self.child.try_wait()? {
                None => Ok(()),
                Some(status) => {
                    let hint = if self.preempt { PREEMPT_HINT } else { "" };
                    Err(format!("--contend: the busy threads ended during the run ({status}){hint}").into())
                }
            }
        }
    }

    impl Drop for Contention {
        fn drop(&mut self) {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }

    /// The busy process: one thread per CPU this process may run on, until stdin closes. It
    /// says `busy` only once every thread is pinned, so the harness never reports contention
    /// that did not happen.
    pub fn serve(argv: &[String]) -> Result<(), Error> {
        let percent: u8 = argv.first().ok_or("the busy threads need a percentage")?.parse()?;
        let allowed = rustix::thread::sched_getaffinity(None)?;
        let cpus: Vec<usize> =
            (0..rustix::thread::CpuSet::MAX_CPU).filter(|&cpu| allowed.is_set(cpu)).collect();
        // One origin for every thread's phase, so the slices stay staggered however long each
        // thread takes to start.
        let origin = Instant::now() + EVERY;
        let (pinned, told) = mpsc::channel();
        for (n, &cpu) in cpus.iter().enumerate() {
            let (busy, phase) = slice(n, cpus.len(), percent);
            let pinned = pinned.clone();
            std::thread::Builder::new()
                .name(format!("busy-{cpu}"))
                .spawn(move || spin(cpu, busy, origin + phase, pinned))?;
        }
        drop(pinned);
        for answer in told.iter().take(cpus.len()) {
            answer?;
        }
        println!("busy");
        // The harness holds our stdin: end of file means it is gone.
        let mut sink = [0u8; 64];
        let mut stdin = std::io::stdin();
        while stdin.read(&mut sink).is_ok_and(|n| n > 0) {}
        Ok(())
    }

    /// Pinned to `cpu` (which it reports on `pinned`): busy for `busy` from `first`, and then
    /// every cycle, asleep in between.
    fn spin(cpu: usize, busy: Duration, first: Instant, pinned: mpsc::Sender<Result<(), String>>) {
        let mut set = rustix::thread::CpuSet::new();
        set.set(cpu);
        let answer = rustix::thread::sched_setaffinity(None, &set)
            .map_err(|e| format!("busy thread not pinned to CPU {cpu}: {e}"));
        let failed = answer.is_err();
        let _ = pinned.send(answer);
        if failed {
            return;
        }
        let mut slice = first;
        loop {
            std::thread::sleep(slice.saturating_duration_since(Instant::now()));
            let end = slice + busy;
            while Instant::now() < end {
                std::hint::spin_loop();
            }
            slice = next_slice(slice, Instant::now());
        }
    }
}

mod target {
    //! The target server, in a child process: HTTP, TCP and gRPC health on 127.0.0.1.

    use super::*;
    use bytes::Bytes;
    use http_body_util::Full;
    use hyper::service::service_fn;
    use hyper_util::rt::TokioIo;
    use std::io::Read;
    use tokio::net::TcpListener;

    /// The target process; killed and reaped when dropped.
    pub struct Target {
        child: Child,
        /// Held open: the target exits when it closes, even if this process is killed.
        _stdin: Option<ChildStdin>,
        pub ports: Ports,
    }

    impl Target {
        pub fn start() -> Result<Target, Error> {
            let mut child = Command::new(std::env::current_exe()?)
                .arg(SERVE_TARGET)
                .stdin(Stdio::piped())
                .stdout(Stdio::piped())
                .stderr(Stdio::inherit())
                .spawn()?;
            let stdin = child.stdin.take();
            let mut target = Target { child, _stdin: stdin, ports: Ports::default() };
            let stdout = target.child.stdout.take().ok_or("the target has no stdout")?;
            let mut line = String::new();
            BufReader::new(stdout).read_line(&mut line)?;
            target.ports =
                parse_ports(&line).ok_or_else(|| format!("the target said {line:?}, not its ports"))?;
            Ok(target)
        }
    }

    impl Drop for Target {
        fn drop(&mut self) {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }

    /// `ports http=<p> tcp=<p> grpc=<p>`
    pub fn parse_ports(line: &str) -> Option<Ports> {
        let mut words = line.split_whitespace();
        if words.next()? != "ports" {
            return None;
        }
        let mut ports = Ports::default();
        for word in words {
            let (name, port) = word.split_once('=')?;
            let port: u16 = port.parse().ok()?;
            match name {
                "http" => ports.http = port,
                "tcp" => ports.tcp = port,
                "grpc" => ports.grpc = port,
                _ => return None,
            }
        }
        (ports.http != 0 && ports.tcp != 0 && ports.grpc != 0).then_some(ports)
    }

    pub fn serve() -> Result<(), Error> {
        let runtime = tokio::runtime::Builder::new_multi_thread().enable_all().build()?;
        runtime.block_on(async {
            let (http, tcp, grpc) = (listen()?, listen()?, listen()?);
            println!(
                "ports http={} tcp={} grpc={}",
                http.local_addr()?.port(),
                tcp.local_addr()?.port(),
                grpc.local_addr()?.port()
            );
            tokio::spawn(serve_http(http));
            tokio::spawn(serve_tcp(tcp));
            let (_reporter, health) = tonic_health::server::health_reporter();
            tokio::spawn(
                tonic::transport::Server::builder()
                    .add_service(health)
                    .serve_with_incoming(tonic::transport::server::TcpIncoming::from(grpc)),
            );
            // The harness holds our stdin: end of file means it is gone.
            tokio::task::spawn_blocking(|| {
                let mut sink = [0u8; 64];
                let mut stdin = std::io::stdin();
                while stdin.read(&mut sink).is_ok_and(|n| n > 0) {}
            })
            .await?;
            Ok::<_, Error>(())
        })?;
        runtime.shutdown_background();
        Ok(())
    }

    /// An ephemeral port of 127.0.0.1 with the longest accept queue the kernel allows, so that
    /// a burst of probes queues rather than being refused by the target.
    fn listen() -> Result<TcpListener, Error> {
        let socket = tokio::net::TcpSocket::new_v4()?;
        socket.bind((std::net::Ipv4Addr::LOCALHOST, 0).into())?;
        Ok(socket.listen(u32::MAX >> 1)?)
    }

    async fn serve_http(listener: TcpListener) {
        loop {
            let Ok((stream, _)) = listener.accept().await else { continue };
            tokio::spawn(async move {
                let service = service_fn(|_request| async {
                    Ok::<_, std::convert::Infallible>(hyper::Response::new(Full::new(Bytes::from_static(
                        TARGET_BODY.as_bytes(),
                    ))))
                });
                let _ = hyper::server::conn::http1::Builder::new()
                    .serve_connection(TokioIo::new(stream), service)
                    .await;
            });
        }
    }

    async fn serve_tcp(listener: TcpListener) {
        loop {
            // Accepted and closed at once.
            let _ = listener.accept().await;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn argv(s: &str) -> Vec<String> {
        s.split_whitespace().map(str::to_owned).collect()
    }

    #[test]
    fn quantiles_are_exact_below_a_millisecond() {
        let mut h = Histogram::new();
        for v in 1..=1000 {
            h.record(v);
        }
        assert_eq!(h.quantile(0.50), 500);
        assert_eq!(h.quantile(0.99), 990);
        assert_eq!(h.quantile(1.0), 1000);
        assert_eq!(h.max, 1000);
        assert_eq!(Histogram::new().quantile(0.5), 0);
    }

    #[test]
    fn quantiles_above_a_millisecond_are_within_a_sixty_fourth() {
        let mut h = Histogram::new();
        for v in [1_500u64, 20_000, 1_000_000, 3_000_000_000] {
            h.record(v);
            let got = Histogram::lower_bound(Histogram::bucket(v));
            assert!(got <= v && v - got <= v / 64, "{v} read back as {got}");
        }
        // Four samples: the median is the second, the 99th percentile the last (read exact
        // through the max).
        assert!((19_688..=20_000).contains(&h.quantile(0.5)), "{}", h.quantile(0.5));
        assert_eq!(h.quantile(0.99), Histogram::lower_bound(Histogram::bucket(3_000_000_000)));
        assert_eq!(h.max, 3_000_000_000);
    }

    #[test]
    fn buckets_are_contiguous_and_increasing() {
        let mut last = 0;
        for b in 1..Histogram::new().counts.len() {
            let lower = Histogram::lower_bound(b);
            assert!(lower > last, "bucket {b}");
            assert_eq!(Histogram::bucket(lower), b);
            assert_eq!(Histogram::bucket(lower - 1), b - 1);
            last = lower;
        }
        assert_eq!(Histogram::bucket(u64::MAX), Histogram::new().counts.len() - 1);
    }

    #[test]
    fn lateness_is_measured_from_the_latest_due_time() {
        let period = Duration::from_secs(1);
        let t0 = Instant::now();
        let mut grid = Grid::new();
        assert_eq!(grid.lateness(t0, period), None, "the first probe anchors the grid");
        let ms = Duration::from_millis;
        assert_eq!(grid.lateness(t0 + ms(1_003), period), Some(ms(3)));
        // A missed tick is skipped: 2.4 s after the anchor is 400 ms after the due time at 2 s.
        assert_eq!(grid.lateness(t0 + ms(2_400), period), Some(ms(400)));
        assert_eq!(grid.lateness(t0 + ms(3_000), period), Some(Duration::ZERO));
    }

    #[test]
    fn a_start_just_before_its_due_time_is_on_time_and_moves_the_anchor() {
        let period = Duration::from_secs(1);
        let t0 = Instant::now();
        let us = Duration::from_micros;
        let mut grid = Grid::new();
        // The first start was measured 500 µs late: the next one, on time, seems early.
        grid.lateness(t0 + us(500), period);
        assert_eq!(grid.lateness(t0 + us(1_000_000), period), Some(Duration::ZERO));
        assert_eq!(grid.lateness(t0 + us(2_000_300), period), Some(us(300)));
        // Further before the due time than the tolerance is lateness on the previous one.
        assert_eq!(grid.lateness(t0 + us(3_950_000), period), Some(us(950_000)));
        assert_eq!(grid.lateness(t0 + us(4_985_000), period), Some(Duration::ZERO));
        assert_eq!(grid.lateness(t0 + us(5_000_000), period), Some(us(15_000)), "the anchor moved back");
    }

    #[test]
    fn stat_fields_are_counted_from_the_last_parenthesis() {
        let stat = "4242 (probe (load) x) S 1 4242 4242 0 -1 4194304 1234 0 0 0 \
                    731 122 9 4 20 0 3 0 123456 98765432 2345 18446744073709551615";
        let cpu = parse_stat(stat).expect("parses");
        assert_eq!(cpu, CpuTicks { user: 731, system: 122, children_user: 9, children_system: 4 });
        assert_eq!(parse_stat("4242 (truncated"), None);
        assert_eq!(parse_stat("1 (x) S 1 2"), None);
        assert!(parse_stat(&std::fs::read_to_string("/proc/self/stat").expect("read")).is_some());
    }

    #[test]
    fn the_status_file_gives_anonymous_and_file_backed_resident_memory() {
        let status = "Name:\tprobe_load\nVmRSS:\t   22772 kB\nRssAnon:\t   15364 kB\nRssFile:\t    7408 kB\nRssShmem:\t       0 kB\n";
        assert_eq!(parse_rss_split(status), RssSplit { anon_kib: 15_364, file_kib: 7_408 });
        assert_eq!(parse_rss_split("Name:\tx\n"), RssSplit::default());
    }

    #[test]
    fn statm_resident_pages_become_bytes() {
        assert_eq!(parse_statm("52113 2345 812 1 0 6078 0\n"), Some(2345 * PAGE_SIZE));
        assert_eq!(parse_statm("52113"), None);
        assert!(rss_bytes() > 0);
    }

    #[test]
    fn the_arguments_parse_and_defaults_follow_the_mode() {
        let args =
            Args::parse(&argv("--kind tcp --workers 5000 --warmup 2 --window 7 --floor")).expect("parses");
        assert_eq!(
            args,
            Args {
                kind: Kind::Tcp,
                workers: 5000,
                period: 1,
                warmup: 2,
                window: 7,
                floor: true,
                idle: false,
                churn: false,
                overload_workers: 0,
                overload_for: 10,
                max_in_flight: Some(DEFAULT_MAX_PROBES_IN_FLIGHT),
                floor_per_core: false,
                rounds: 1,
                contend: None,
            }
        );
        assert_eq!(Args::parse(&argv("--idle")).expect("parses").period, 3600);
        assert!(Args::parse(&argv("--kind udp")).is_err());
        assert!(Args::parse(&argv("--workers")).is_err());
        assert!(Args::parse(&argv("--workers ten")).is_err());
        assert!(Args::parse(&argv("--idle --floor")).is_err());
        let floor_churn = Args::parse(&argv("--churn --floor --rounds 2")).expect("parses");
        assert!(floor_churn.churn && floor_churn.floor && floor_churn.rounds == 2);
        assert!(Args::parse(&argv("--churn --idle")).is_err());
        let churn = Args::parse(&argv("--churn --workers 1000 --window 60")).expect("parses");
        assert!(churn.churn && churn.period == 1 && churn.window == 60 && churn.rounds == 1);
        let rounds = Args::parse(&argv("--churn --window 20 --rounds 3")).expect("parses");
        assert_eq!((rounds.churn, rounds.rounds), (true, 3));
        assert!(Args::parse(&argv("--churn --rounds 0")).is_err());
        assert!(Args::parse(&argv("--idle --rounds 2")).is_err());
        assert!(Args::parse(&argv("--workers 0")).is_err());
        let over =
            Args::parse(&argv("--workers 100 --overload-workers 900 --overload-for 7")).expect("parses");
        assert_eq!((over.overload_workers, over.overload_for), (900, 7));
        assert!(Args::parse(&argv("--workers 100 --overload-workers 50")).is_err());
    }

    #[test]
    fn contention_takes_a_percentage_and_preempts_only_when_asked() {
        let shared = Args::parse(&argv("--contend 20")).expect("parses");
        assert_eq!(shared.contend, Some(contend::Contend { percent: 20, preempt: false }));
        // The flag may come before the percentage it modifies.
        let preempting = Args::parse(&argv("--contend-preempt --floor --contend 10")).expect("parses");
        assert_eq!(preempting.contend, Some(contend::Contend { percent: 10, preempt: true }));
        assert!(Args::parse(&argv("--contend-preempt")).is_err(), "nothing to preempt with");
        assert_eq!(Args::parse(&argv("--contend 1")).expect("parses").contend.map(|c| c.percent), Some(1));
        assert_eq!(Args::parse(&argv("--contend 90")).expect("parses").contend.map(|c| c.percent), Some(90));
        assert!(Args::parse(&argv("--contend 0")).is_err());
        assert!(Args::parse(&argv("--contend 91")).is_err(), "the run needs some of each CPU");
        let too_many = Args::parse(&argv("--contend 300")).expect_err("out of range");
        assert!(too_many.contains("a percentage from 1 to 90"), "{too_many}");
        assert!(Args::parse(&argv("--contend half")).is_err());
        assert!(Args::parse(&argv("--contend")).is_err());
    }

    #[test]
    fn each_cpu_is_busy_for_its_share_of_the_cycle_at_its_own_phase() {
        let ms = Duration::from_millis;
        assert_eq!(contend::slice(0, 2, 20), (ms(10), ms(0)));
        assert_eq!(contend::slice(1, 2, 20), (ms(10), ms(25)), "the second CPU's slice is half a cycle on");
        assert_eq!(contend::slice(3, 4, 10), (ms(5), ms(37) + Duration::from_micros(500)));
        assert_eq!(contend::slice(0, 1, 90), (ms(45), ms(0)));
        assert_eq!(contend::slice(2, 0, 20).1, ms(0), "no CPUs read as one");
        assert_eq!(contend::slice(0, 1, 200).0, ms(45), "never more than the most it may take");
    }

    #[test]
    fn a_busy_thread_held_off_its_cpu_skips_the_slices_it_missed_and_keeps_its_phase() {
        let ms = Duration::from_millis;
        let t0 = Instant::now();
        assert_eq!(contend::next_slice(t0, t0 + ms(10)), t0 + ms(50), "on time: one cycle on");
        assert_eq!(contend::next_slice(t0, t0 + ms(60)), t0 + ms(50), "the next slice has begun: run it");
        assert_eq!(contend::next_slice(t0, t0 + ms(100)), t0 + ms(100), "a whole slice missed");
        assert_eq!(contend::next_slice(t0, t0 + ms(237)), t0 + ms(200), "several missed, the phase kept");
    }

    #[test]
    fn steal_is_the_eighth_time_of_the_cpu_line() {
        let before = "cpu  100 5 50 800 10 1 2 30 7 0\ncpu0 50 2 25 400 5 0 1 15 0 0\n";
        let after = "cpu  160 5 70 900 10 1 2 50 9 0\ncpu0 80 2 35 450 5 0 1 25 0 0\n";
        let (b, a) =
            (parse_machine_stat(before).expect("parses"), parse_machine_stat(after).expect("parses"));
        assert_eq!(b, MachineTicks { total: 998, steal: 30 }, "guest time is already in user time");
        assert!((a.steal_share_since(b) - 20.0 / 200.0).abs() < 1e-9);
        assert_eq!(a.steal_share_since(a), 0.0, "no time passed");
        assert_eq!(parse_machine_stat("cpu0 1 2 3\n"), None);
        assert_eq!(parse_machine_stat("cpu  1 2 3 4\n"), None, "too old a kernel to say");
        assert!(parse_machine_stat(&std::fs::read_to_string("/proc/stat").expect("read")).is_some());
    }

    #[test]
    fn the_target_line_names_every_port() {
        assert_eq!(
            target::parse_ports("ports http=8080 tcp=8081 grpc=8082\n"),
            Some(Ports { http: 8080, tcp: 8081, grpc: 8082 })
        );
        assert_eq!(target::parse_ports("ports http=8080 tcp=8081\n"), None);
        assert_eq!(target::parse_ports("error: address in use\n"), None);
        assert_eq!(target::parse_ports("ports http=x tcp=1 grpc=2"), None);
    }

    #[test]
    fn worker_numbers_come_from_pod_uids() {
        assert_eq!(worker_index("uid-417"), Some(417));
        assert_eq!(worker_index("417"), None);
        assert_eq!(worker_index("uid-"), None);
    }

    #[test]
    fn later_churn_rounds_reuse_the_grids_and_start_them_over() {
        let period = Duration::from_secs(1);
        let c = Collector::new(2, period);
        c.set_recording(true);
        let t0 = Instant::now();
        let ms = Duration::from_millis;
        // Worker 0 anchors its grid; a probe 300 ms off it reads 300 ms late.
        c.record_due(0, None, t0, ms(1), true);
        c.record_due(0, None, t0 + period + ms(300), ms(1), true);
        assert_eq!(c.lock().lateness.max, 300_000);
        // A new round: worker 2 (the next round's first pod) takes worker 0's grid, which
        // holds no anchor from the round before, so its first probe is a first and is not late;
        // a late probe of worker 1, of the round before, is not counted.
        c.new_round(2);
        c.record_due(2, None, t0 + ms(1700), ms(1), true);
        c.record_due(1, None, t0 + ms(1800), ms(1), true);
        let s = c.lock();
        assert_eq!((s.probed, s.probes, s.lateness.total), (2, 3, 1));
        assert_eq!(s.grids.len(), 2);
        assert!(s.grids[0].anchor.is_some() && s.grids[1].anchor.is_none());
    }

    #[test]
    fn each_churn_round_is_read_against_where_it_started_and_against_the_first_pod() {
        let split = |anon_kib, file_kib| RssSplit { anon_kib, file_kib };
        let round = |started: RssSplit, late: RssSplit| ChurnRound {
            started,
            elapsed: Duration::from_secs(20),
            added: 20_000,
            removed: 20_000,
            max_live: 1_000,
            workers_at_window_end: 1_000,
            drained: Duration::from_millis(100),
            warm: Some(20 << 20),
            rss_max: 21 << 20,
            end_of_window: 21 << 20,
            after: 20 << 20,
            after_split: split(14_000, 7_000),
            returned: 14 << 20,
            returned_split: split(7_000, 7_000),
            returned_late: late,
            left: json!({ "workers": 0 }),
        };
        // Cold: 1,000 + 7,000 KiB; the first round leaves 6,000 + 8,000; the second starts
        // there and leaves 6,200 + 8,000.
        let first = round(split(1_000, 7_000), split(6_000, 8_000));
        let second = round(split(6_000, 8_000), split(6_200, 8_000));
        let args = Args::parse(&argv("--churn --rounds 2 --window 20")).expect("parses");
        let c = Collector::new(2, Duration::from_secs(1));
        let line = churn_line(
            &args,
            "churn",
            &c,
            (8_000 << 10, split(1_000, 7_000)),
            &[(first, 5, 0), (second, 7, 1)],
        )
        .expect("a line");
        assert_eq!(line["mode"], "churn");
        assert_eq!(line["after_removal_47s_vs_before"], 1.75);
        let rounds = line["rounds"].as_array().expect("one entry per round");
        assert_eq!(rounds[0]["after_removal_47s_vs_round_start"], 1.75);
        assert_eq!(rounds[1]["rss_anon_file_kib_at_round_start"], json!([6_000, 8_000]));
        assert_eq!(rounds[1]["after_removal_47s_vs_round_start"], 1.014);
        assert_eq!(rounds[1]["after_removal_47s_vs_before"], 1.775);
        assert_eq!((rounds[1]["probes"].as_u64(), rounds[1]["failures"].as_u64()), (Some(7), Some(1)));
    }

    #[test]
    fn a_known_due_time_gives_the_lateness_of_every_probe_the_first_included() {
        let period = Duration::from_secs(1);
        let c = Collector::new(1, period);
        c.set_recording(true);
        let due = Instant::now();
        let ms = Duration::from_millis;
        // The first tick fired 0.7 ms late; a grid anchored at it would read the next as on time.
        c.record_due(0, Some(due), due + Duration::from_micros(700), ms(1), true);
        c.record_due(0, Some(due + period), due + period + Duration::from_micros(700), ms(1), true);
        let s = c.lock();
        assert_eq!((s.probes, s.lateness.total), (2, 2));
        assert_eq!(s.lateness.quantile(0.5), 700);
        assert_eq!(s.lateness.max, 700);
    }

    #[test]
    fn per_second_samples_are_taken_and_reset_and_merge_into_a_phase() {
        let c = Collector::new(1, Duration::from_secs(1));
        let t0 = Instant::now();
        c.record_due(0, Some(t0), t0 + Duration::from_micros(10), Duration::from_micros(700), false);
        let first = c.take_second();
        assert_eq!((first.probes, first.failures, first.latency.max), (1, 1, 700));
        assert_eq!(c.take_second().probes, 0, "taken means reset");
        let mut phase = Histogram::new();
        phase.merge(&first.latency);
        phase.merge(&first.latency);
        assert_eq!((phase.total, phase.max, phase.quantile(0.5)), (2, 700, 700));
    }

    #[test]
    fn the_collector_counts_only_inside_the_window() {
        let period = Duration::from_secs(1);
        let c = Collector::new(2, period);
        let t0 = Instant::now();
        c.record(0, t0, Duration::from_millis(2), true);
        c.record(1, t0, Duration::from_millis(2), true);
        assert_eq!(c.probed(), 2);
        c.set_recording(true);
        c.record(0, t0 + Duration::from_millis(1_005), Duration::from_micros(700), false);
        c.record(7, t0, Duration::from_millis(2), true); // not a worker of this run
        c.set_recording(false);
        c.record(1, t0 + Duration::from_secs(1), Duration::from_millis(2), true);
        let s = c.lock();
        assert_eq!((s.probes, s.failures), (1, 1));
        assert_eq!(s.lateness.max, 5_000);
        assert_eq!(s.latency.quantile(0.5), 700);
    }

    #[test]
    fn an_engine_probe_almost_a_period_late_does_not_pull_its_grid_back() {
        let (period, ms) = (Duration::from_secs(1), Duration::from_millis);
        let c = Collector::new(1, period);
        c.set_recording(true);
        let t0 = Instant::now();
        c.record_waited(0, Duration::ZERO, t0, ms(2), true);
        // Late by 985 ms (an overload), then on time again.
        c.record_waited(0, Duration::ZERO, t0 + ms(1_985), ms(2), true);
        c.record_waited(0, Duration::ZERO, t0 + ms(3_000), ms(2), true);
        let s = c.lock();
        let max = s.lateness.max;
        assert!((970_000..=985_000).contains(&max), "the late one reads late: {max}");
        assert_eq!(s.lateness.quantile(0.5), 0, "the on-time one reads on time");
    }

    #[test]
    fn an_engine_grid_anchored_late_moves_once_two_probes_agree_on_an_earlier_phase() {
        let (period, ms) = (Duration::from_secs(1), Duration::from_millis);
        let c = Collector::new(1, period);
        c.set_recording(true);
        let t0 = Instant::now();
        // The first probe seen came 5 ms after the worker's schedule (a tick delayed in the
        // start-up burst); every later tick is on that schedule, 5 ms before this grid's.
        c.record_waited(0, Duration::ZERO, t0 + ms(5), ms(2), true);
        for k in 1..=4 {
            c.record_waited(0, Duration::ZERO, t0 + period * k, ms(2), true);
        }
        let s = c.lock();
        assert_eq!((s.probes, s.lateness.total), (5, 4), "the first defines the grid");
        assert_eq!(s.lateness.max, 0, "none reads a period late");
    }

    #[test]
    fn an_engine_probe_held_as_almost_a_period_late_reads_late_when_the_next_is_not_early() {
        let (period, ms) = (Duration::from_secs(1), Duration::from_millis);
        let c = Collector::new(1, period);
        c.set_recording(true);
        let t0 = Instant::now();
        c.record_waited(0, Duration::ZERO, t0, ms(2), true);
        // 990 ms late (an overload), then 100 ms late.
        c.record_waited(0, Duration::ZERO, t0 + ms(1_990), ms(2), true);
        assert_eq!(c.lock().lateness.total, 0, "held until the next probe says what it was");
        c.record_waited(0, Duration::ZERO, t0 + ms(3_100), ms(2), true);
        let s = c.lock();
        assert_eq!((s.probes, s.lateness.total), (3, 2));
        let max = s.lateness.max;
        assert!((975_000..=990_000).contains(&max), "the held one: {max}");
        let median = s.lateness.quantile(0.5);
        assert!(
            (98_000..=100_000).contains(&median),
            "the next one, on the grid that did not move: {median}"
        );
    }

    #[test]
    fn an_engine_grid_anchored_late_moves_by_the_larger_of_two_early_starts() {
        let (period, ms) = (Duration::from_secs(1), Duration::from_millis);
        let us = Duration::from_micros;
        let c = Collector::new(1, period);
        c.set_recording(true);
        let t0 = Instant::now();
        // The first probe seen 5 ms after the schedule; the next two a little late on it, so
        // they read 2.2 and 1.8 ms early: beyond the 2 ms forgiven, then within it.
        c.record_waited(0, Duration::ZERO, t0 + ms(5), ms(2), true);
        c.record_waited(0, Duration::ZERO, t0 + period + us(2_800), ms(2), true);
        c.record_waited(0, Duration::ZERO, t0 + period * 2 + us(3_200), ms(2), true);
        c.record_waited(0, Duration::ZERO, t0 + period * 3 + us(2_900), ms(2), true);
        let s = c.lock();
        assert_eq!((s.probes, s.lateness.total), (4, 3));
        let max = s.lateness.max;
        assert!(max <= 500, "on the grid moved back 2.2 ms, none is late by more than 0.4 ms: {max}");
    }

    #[test]
    fn a_wait_for_a_probe_slot_is_late_but_does_not_move_the_grid() {
        let (period, ms) = (Duration::from_secs(1), Duration::from_millis);
        let c = Collector::new(1, period);
        c.set_recording(true);
        let t0 = Instant::now();
        // Asked at t0, ran 300 ms later; the next two on the schedule, one of them waiting too.
        c.record_waited(0, ms(300), t0 + ms(300), ms(2), true);
        c.record_waited(0, Duration::ZERO, t0 + ms(1_000), ms(2), true);
        c.record_waited(0, ms(40), t0 + ms(2_040), ms(2), true);
        let s = c.lock();
        assert_eq!(s.probes, 3);
        assert_eq!(s.lateness.max, 300_000, "the first probe's wait");
        let median = s.lateness.quantile(0.5);
        assert!((39_000..=40_000).contains(&median), "on the grid from t0, not from t0 + 300 ms: {median}");
    }
}
