//! Time from healthy to Ready with the kubelet's readiness schedule and with a readiness start
//! interval (the `probelet.dev/probe-timing` annotation, docs/probe-timing.md), through the
//! real engine against a real HTTP target on 127.0.0.1.
//!
//! ```text
//! cargo run --release -p probelet-actors --example start_interval -- \
//!     [--pods 100] [--period 10] [--start-interval-ms 100] [--healthy-within-ms 3000] [--seed 1]
//! ```
//!
//! Each pod's container starts at once and turns healthy at a random instant (uniform, seeded)
//! within `--healthy-within-ms`: the target answers its path with 503 before that and 200 after.
//! Every pod has an HTTP readiness probe with `periodSeconds: --period`. The run is made twice
//! on fresh engines: without the annotation (the kubelet's semantics) and with
//! `startIntervalMs: --start-interval-ms`. Ready is the instant the results cache reports the
//! container's readiness turning Success (the status manager sets `ready` and the Ready
//! condition from that same message). The figures: mean, p50, p99 and max of Ready minus
//! healthy, and the probes and CPU time (engine and target together) the run took. The engine runs without the start-up jitter
//! (`PipelineConfig::start_up_jitter`), so the pods meet it as an agent that has been up for a
//! while, as pods created on a running node do. Only 127.0.0.1 is contacted; each run stops by itself.

// A measurement on real time: it times the engine on the real clock.
#![allow(clippy::disallowed_methods)]

use std::collections::HashMap;
use std::process::ExitCode;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use actix::prelude::*;
use k8s_openapi::api::core::v1::{
    Container, ContainerState, ContainerStateRunning, ContainerStatus, HTTPGetAction, Pod, PodSpec,
    PodStatus, Probe,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, Time};
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use k8s_openapi::jiff::Timestamp;
use probelet_actors::contracts::{LogRecorder, PodRegistry, ProbeObserver, ProbeRecord};
use probelet_actors::local_runner::LocalCommandRunner;
use probelet_actors::prober::timing::PROBE_TIMING_ANNOTATION;
use probelet_actors::prober::{ProbeKind, ProbeResult};
use probelet_actors::results::ProbeResultChanged;
use probelet_actors::status::generate_kubelet_conditions;
use probelet_actors::vocabulary::PodUid;
use probelet_actors::{Pipeline, PipelineConfig};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

type Error = Box<dyn std::error::Error + Send + Sync>;

const USAGE: &str = "usage: start_interval [--pods N] [--period SECS] [--start-interval-ms MS] \
[--healthy-within-ms MS] [--seed N]";

#[derive(Debug, Clone, Copy)]
struct Args {
    pods: usize,
    period: u32,
    start_interval_ms: u32,
    healthy_within_ms: u64,
    seed: u64,
}

impl Args {
    fn parse(argv: &[String]) -> Result<Args, String> {
        let mut args =
            Args { pods: 100, period: 10, start_interval_ms: 100, healthy_within_ms: 3000, seed: 1 };
        let mut it = argv.iter();
        while let Some(flag) = it.next() {
            let value = it.next().ok_or_else(|| format!("{flag} needs a value"))?;
            let bad = |_| format!("{flag}: not a number: {value:?}");
            match flag.as_str() {
                "--pods" => args.pods = value.parse().map_err(bad)?,
                "--period" => args.period = value.parse().map_err(bad)?,
                "--start-interval-ms" => args.start_interval_ms = value.parse().map_err(bad)?,
                "--healthy-within-ms" => args.healthy_within_ms = value.parse().map_err(bad)?,
                "--seed" => args.seed = value.parse().map_err(bad)?,
                other => return Err(format!("unknown flag {other}")),
            }
        }
        if args.pods == 0 || args.period == 0 {
            return Err("--pods and --period must be positive".into());
        }
        Ok(args)
    }
}

fn main() -> ExitCode {
    let argv: Vec<String> = std::env::args().skip(1).collect();
    let args = match Args::parse(&argv) {
        Ok(args) => args,
        Err(usage) => {
            eprintln!("start_interval: {usage}\n{USAGE}");
            return ExitCode::from(2);
        }
    };
    match run(args) {
        Ok(()) => ExitCode::SUCCESS,
        Err(err) => {
            eprintln!("start_interval: {err}");
            ExitCode::FAILURE
        }
    }
}

fn run(args: Args) -> Result<(), Error> {
    let mut rng = StdRng::seed_from_u64(args.seed);
    let healthy_after: Vec<Duration> =
        (0..args.pods).map(|_| Duration::from_millis(rng.random_range(0..=args.healthy_within_ms))).collect();
    println!(
        "{} pods, healthy at random in 0-{} ms (seed {}), readiness periodSeconds {}; load average {}",
        args.pods,
        args.healthy_within_ms,
        args.seed,
        args.period,
        load_average()
    );
    for start_interval in [None, Some(args.start_interval_ms)] {
        let system = actix::System::new();
        let report = system.block_on(measure(args, &healthy_after, start_interval))?;
        println!("{report}");
    }
    Ok(())
}

/// This process's user + system CPU time in seconds (`/proc/self/stat`, in ticks of
/// `USER_HZ`, which Linux fixes at 100): the engine and the in-process target together.
fn cpu_secs() -> f64 {
    let Ok(stat) = std::fs::read_to_string("/proc/self/stat") else { return f64::NAN };
    // The command name (field 2) is in parentheses and may hold spaces: count from the last `)`.
    let Some((_, rest)) = stat.rsplit_once(')') else { return f64::NAN };
    let fields: Vec<&str> = rest.split_whitespace().collect();
    // utime and stime are fields 14 and 15 of the line, 11 and 12 after the name.
    let field = |i: usize| fields.get(i).and_then(|f| f.parse::<u64>().ok());
    match (field(11), field(12)) {
        (Some(user), Some(system)) => (user + system) as f64 / 100.0,
        _ => f64::NAN,
    }
}

fn load_average() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .map(|l| l.split_whitespace().take(3).collect::<Vec<_>>().join(" "))
        .unwrap_or_default()
}

// === the target ===

/// When each pod's container turns healthy, on the real clock.
struct Target {
    healthy_at: Mutex<Vec<Instant>>,
}

/// Serves `GET /pod/<i>`: 503 before pod `i` is healthy, 200 after. One request per connection,
/// as the kubelet's HTTP prober does (no keep-alive).
async fn serve(listener: tokio::net::TcpListener, target: Arc<Target>) {
    while let Ok((mut socket, _)) = listener.accept().await {
        let target = target.clone();
        tokio::spawn(async move {
            let mut request = Vec::new();
            let mut buf = [0u8; 1024];
            while !request.windows(4).any(|w| w == b"\r\n\r\n") && request.len() < 16 * 1024 {
                match socket.read(&mut buf).await {
                    Ok(0) | Err(_) => return,
                    Ok(n) => request.extend_from_slice(&buf[..n]),
                }
            }
            let line = String::from_utf8_lossy(&request);
            let index = line
                .split_whitespace()
                .nth(1)
                .and_then(|path| path.strip_prefix("/pod/"))
                .and_then(|i| i.parse::<usize>().ok());
            let healthy = index.is_some_and(|i| {
                target
                    .healthy_at
                    .lock()
                    .unwrap_or_else(PoisonError::into_inner)
                    .get(i)
                    .is_some_and(|at| Instant::now() >= *at)
            });
            let status = if healthy { "200 OK" } else { "503 Service Unavailable" };
            let response = format!("HTTP/1.1 {status}\r\nContent-Length: 3\r\nConnection: close\r\n\r\nok\n");
            let _ = socket.write_all(response.as_bytes()).await;
            let _ = socket.shutdown().await;
        });
    }
}

// === the engine's side ===

/// The instants at which each pod's readiness turned Success.
#[derive(Default)]
struct ReadyLog {
    ready: HashMap<PodUid, Instant>,
}

impl Actor for ReadyLog {
    type Context = Context<Self>;
}

impl Handler<ProbeResultChanged> for ReadyLog {
    type Result = ();

    fn handle(&mut self, msg: ProbeResultChanged, _ctx: &mut Context<Self>) {
        if msg.kind == ProbeKind::Readiness && msg.result == ProbeResult::Success {
            self.ready.entry(msg.pod_uid).or_insert_with(Instant::now);
        }
    }
}

#[derive(Message)]
#[rtype(result = "HashMap<PodUid, Instant>")]
struct GetReady;

impl Handler<GetReady> for ReadyLog {
    type Result = MessageResult<GetReady>;

    fn handle(&mut self, _msg: GetReady, _ctx: &mut Context<Self>) -> Self::Result {
        MessageResult(self.ready.clone())
    }
}

/// Counts the probes the engine ran.
struct Probes(Arc<AtomicUsize>);

impl ProbeObserver for Probes {
    fn observe(&self, _record: ProbeRecord<'_>) {
        self.0.fetch_add(1, Ordering::Relaxed);
    }
}

fn pod(i: usize, port: u16, period: u32, start_interval_ms: Option<u32>) -> Pod {
    let annotations = start_interval_ms.map(|ms| {
        let value = format!(r#"{{"app": {{"readiness": {{"startIntervalMs": {ms}}}}}}}"#);
        [(PROBE_TIMING_ANNOTATION.to_owned(), value)].into()
    });
    Pod {
        metadata: ObjectMeta {
            name: Some(format!("pod-{i}")),
            namespace: Some("default".into()),
            uid: Some(format!("uid-{i}")),
            annotations,
            ..Default::default()
        },
        spec: Some(PodSpec {
            containers: vec![Container {
                name: "app".into(),
                readiness_probe: Some(Probe {
                    http_get: Some(HTTPGetAction {
                        path: Some(format!("/pod/{i}")),
                        port: IntOrString::Int(i32::from(port)),
                        ..Default::default()
                    }),
                    period_seconds: Some(i32::try_from(period).unwrap_or(i32::MAX)),
                    timeout_seconds: Some(1),
                    success_threshold: Some(1),
                    failure_threshold: Some(3),
                    ..Default::default()
                }),
                ..Default::default()
            }],
            ..Default::default()
        }),
        status: None,
    }
}

fn running(i: usize, started_at: Timestamp) -> PodStatus {
    PodStatus {
        phase: Some("Running".into()),
        pod_ip: Some("127.0.0.1".into()),
        container_statuses: Some(vec![ContainerStatus {
            name: "app".into(),
            container_id: Some(format!("harness://{i}")),
            state: Some(ContainerState {
                running: Some(ContainerStateRunning { started_at: Some(Time(started_at)) }),
                ..Default::default()
            }),
            ..Default::default()
        }]),
        ..Default::default()
    }
}

/// One run: a fresh engine, every pod synced as a host syncs a new pod, until all are Ready
/// (or the period has passed twice).
async fn measure(
    args: Args,
    healthy_after: &[Duration],
    start_interval_ms: Option<u32>,
) -> Result<String, Error> {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let port = listener.local_addr()?.port();
    let target = Arc::new(Target { healthy_at: Mutex::new(Vec::new()) });
    let server = tokio::spawn(serve(listener, target.clone()));

    let registry = PodRegistry::new();
    let probes = Arc::new(AtomicUsize::new(0));
    let mut config = PipelineConfig::new(
        Arc::new(LocalCommandRunner::new()),
        Arc::new(LogRecorder),
        Arc::new(registry.clone()),
    );
    config.worker_threads = std::thread::available_parallelism().map(|n| n.get()).unwrap_or(1);
    config.observer = Some(Arc::new(Probes(probes.clone())));
    // The pods arrive as at an agent past its start-up jitter.
    config.start_up_jitter = false;
    let pipeline = Pipeline::start(config);
    let log = ReadyLog::default().start();
    pipeline.subscribe_results(log.clone().recipient());

    let cpu_before = cpu_secs();
    let start = Instant::now();
    *target.healthy_at.lock().unwrap_or_else(PoisonError::into_inner) =
        healthy_after.iter().map(|d| start + *d).collect();
    for i in 0..args.pods {
        let pod = Arc::new(pod(i, port, args.period, start_interval_ms));
        registry.upsert(pod.clone());
        let mut status = pipeline.update_pod_status(pod.clone(), running(i, pipeline.clock.now())).await?;
        generate_kubelet_conditions(&pod, &mut status);
        pipeline.set_pod_status(pod.clone(), status);
        pipeline.add_pod(pod);
    }
    let setup = start.elapsed();
    let deadline = start
        + Duration::from_secs(u64::from(args.period) * 2)
        + Duration::from_millis(args.healthy_within_ms);
    let ready = loop {
        let ready = log.send(GetReady).await?;
        if ready.len() == args.pods || Instant::now() >= deadline {
            break ready;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    let took = start.elapsed();
    let cpu = cpu_secs() - cpu_before;
    let probed = probes.load(Ordering::Relaxed);
    server.abort();
    System::current().stop();

    let mut latencies: Vec<Duration> = (0..args.pods)
        .filter_map(|i| {
            let at = ready.get(format!("uid-{i}").as_str())?;
            Some(at.saturating_duration_since(start + healthy_after[i]))
        })
        .collect();
    latencies.sort();
    let mode = match start_interval_ms {
        None => "kubelet semantics".to_owned(),
        Some(ms) => format!("start interval {ms} ms"),
    };
    let ms = |d: Duration| d.as_secs_f64() * 1000.0;
    let quantile = |q: f64| {
        let rank = ((q * latencies.len() as f64).ceil() as usize).clamp(1, latencies.len().max(1));
        latencies.get(rank - 1).copied().map_or(f64::NAN, ms)
    };
    let mean = if latencies.is_empty() {
        f64::NAN
    } else {
        latencies.iter().map(|d| ms(*d)).sum::<f64>() / latencies.len() as f64
    };
    Ok(format!(
        "{mode:>24}: ready {}/{} in {:.1} s; healthy->Ready mean {mean:.0} ms, p50 {:.0} ms, p99 {:.0} ms, \
         max {:.0} ms; {probed} probes, {cpu:.2} s CPU; setup {:.0} ms",
        latencies.len(),
        args.pods,
        took.as_secs_f64(),
        quantile(0.5),
        quantile(0.99),
        quantile(1.0),
        ms(setup),
    ))
}
