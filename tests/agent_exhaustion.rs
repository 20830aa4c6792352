//! End to end: the real agent binary when the node has no process to spare (docs/reliability.md,
//! "No process to spare"). The allocator runs one background thread, so that no thread of its
//! own retries without end when none can be made; and with its pids cgroup full from the start,
//! the agent neither floods its log nor panics, and still serves; an engine a host embeds with
//! probe worker threads starts without them when none can be made.

// Helpers here may panic: a panic fails the test that called them.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use probelet_test_support as support;

use std::path::{Path, PathBuf};
use std::time::Duration;

use tokio::process::Command;

/// The threads of `pid` named `name`.
fn threads_named(pid: u32, name: &str) -> usize {
    std::fs::read_dir(format!("/proc/{pid}/task"))
        .expect("the agent's threads")
        .filter_map(Result::ok)
        .filter(|task| {
            std::fs::read_to_string(task.path().join("comm")).is_ok_and(|comm| comm.trim_end() == name)
        })
        .count()
}

fn temp_dir(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("probelet-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).expect("a temp dir");
    dir
}

#[tokio::test]
async fn the_allocator_runs_one_background_thread() {
    if !cfg!(feature = "jemalloc") {
        eprintln!("skipped: built without jemalloc");
        return;
    }
    let dir = temp_dir("allocator-threads");
    let manifests = dir.to_str().expect("a UTF-8 path");
    let agent = support::agent::RunningAgent::start(
        env!("CARGO_BIN_EXE_probelet"),
        &["run", "--manifests", manifests],
    )
    .await;
    let pid = agent.child.id().expect("the agent's PID");
    // jemalloc's first background thread started the others as their arenas came into use.
    tokio::time::sleep(Duration::from_secs(2)).await;
    let threads = threads_named(pid, "jemalloc_bg_thd");
    agent.stop().await;
    let _ = std::fs::remove_dir_all(&dir);
    assert_eq!(threads, 1, "the allocator's background threads");
}

/// A pids cgroup of its own, removed on drop; `None` when there is none to make (not root, no
/// pids controller mounted where cgroup v1 mounts it or enabled for children in cgroup v2).
struct PidsCgroup(PathBuf);

impl PidsCgroup {
    fn make(max: u32) -> Option<PidsCgroup> {
        let v1 = Path::new("/sys/fs/cgroup/pids");
        let v2 = Path::new("/sys/fs/cgroup");
        let parent = if v1.join("cgroup.procs").exists() {
            v1
        } else if std::fs::read_to_string(v2.join("cgroup.subtree_control")).is_ok_and(|c| c.contains("pids"))
        {
            v2
        } else {
            return None;
        };
        let dir = parent.join(format!("probelet-test-{}", std::process::id()));
        std::fs::create_dir(&dir).ok()?;
        let cgroup = PidsCgroup(dir);
        std::fs::write(cgroup.0.join("pids.max"), max.to_string()).ok()?;
        Some(cgroup)
    }
}

impl Drop for PidsCgroup {
    fn drop(&mut self) {
        // Empty by now: the agent and its containers are gone.
        let _ = std::fs::remove_dir(&self.0);
    }
}

#[tokio::test]
async fn with_no_process_to_spare_the_agent_neither_floods_its_log_nor_panics() {
    // Ten tasks: the agent's own threads (its two log writers, made first, among them) take
    // them all, so its allocator's thread, its orphan sweeps and the container's shim find
    // none.
    let Some(cgroup) = PidsCgroup::make(10) else {
        eprintln!("skipped: no pids cgroup can be made here (needs root and the pids controller)");
        return;
    };
    let dir = temp_dir("no-pids");
    std::fs::write(
        dir.join("pod.yaml"),
        "apiVersion: v1\nkind: Pod\nmetadata: {name: sleeper, namespace: default}\n\
         spec:\n  containers:\n    - name: c\n      command: [\"sleep\", \"3707\"]\n",
    )
    .expect("a manifest");
    let log = dir.join("agent.log");
    let script = format!(
        "echo $$ > {}/cgroup.procs && exec {} run --manifests {} --listen 127.0.0.1:0 2>{}",
        cgroup.0.display(),
        env!("CARGO_BIN_EXE_probelet"),
        dir.display(),
        log.display()
    );
    let (mut child, addr) = support::agent::start_under_shell(&script).await;
    // The first sweeps (at once and 5 s later) and the container's first starts.
    tokio::time::sleep(Duration::from_secs(7)).await;
    let (status, _) = support::agent::get(&addr, "/healthz", None).await;
    // Room again, so that the agent can stop its container (if one ever started).
    std::fs::write(cgroup.0.join("pids.max"), "max").expect("raise the limit");
    support::agent::stop(&mut child, Duration::from_secs(30)).await;
    let text = std::fs::read_to_string(&log).expect("the agent's log");
    let _ = std::fs::remove_dir_all(&dir);
    drop(cgroup);
    assert_eq!(status, 200, "/healthz");
    assert!(!text.contains("panicked"), "the agent panicked:\n{}", &text[..text.len().min(4000)]);
    let allocator = text.matches("<jemalloc>").count();
    assert!(allocator <= 1, "{allocator} lines from the allocator, {} bytes of log", text.len());
    assert!(text.len() < 1_000_000, "{} bytes of log in 7 s", text.len());
}

/// A log on standard error that reaches the file-size limit (`ulimit -f`) does not end the agent
/// (SIGXFSZ's default): the write fails, and the agent serves and stops as before.
#[tokio::test]
async fn a_log_past_the_file_size_limit_does_not_end_the_agent() {
    let dir = temp_dir("file-size");
    std::fs::write(
        dir.join("pod.yaml"),
        "apiVersion: v1\nkind: Pod\nmetadata: {name: chatty, namespace: default}\n\
         spec:\n  containers:\n    - name: c\n      command: [\"sh\", \"-c\", \"while :; do echo 0123456789abcdef0123456789abcdef; sleep 0.01; done\"]\n",
    )
    .expect("a manifest");
    let log = dir.join("agent.log");
    // 32 KiB (64 blocks of 512 bytes): the container's lines fill it within a few seconds.
    let script = format!(
        "ulimit -f 64 && exec {} run --manifests {} --listen 127.0.0.1:0 2>{}",
        env!("CARGO_BIN_EXE_probelet"),
        dir.display(),
        log.display()
    );
    let (mut child, addr) = support::agent::start_under_shell(&script).await;
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    while std::fs::metadata(&log).map_or(0, |m| m.len()) < 32 * 1024 {
        assert!(tokio::time::Instant::now() < deadline, "the log reached the limit within 30 s");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    // Lines past the limit were written (and failed) meanwhile.
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert_eq!(child.try_wait().expect("the agent's state"), None, "the agent still runs");
    assert_eq!(support::agent::get(&addr, "/healthz", None).await.0, 200);
    support::agent::stop(&mut child, Duration::from_secs(30)).await;
    let _ = std::fs::remove_dir_all(&dir);
}

/// An agent whose hard limit of open files is too low to start says so in one line and exits 1:
/// with 6 it panicked in tokio's signal set-up, with 8 in actix's runtime, and with 12 to 16 it
/// blamed the state directory and advised another `--state-dir`.
#[tokio::test]
async fn too_few_open_files_to_start_is_one_clear_error() {
    let dir = temp_dir("too-few-files");
    for limit in [6, 8, 16] {
        let script = format!(
            "ulimit -n {limit} && exec {} run --manifests {} --listen 127.0.0.1:0",
            env!("CARGO_BIN_EXE_probelet"),
            dir.display()
        );
        let out = Command::new("sh").args(["-c", &script]).output().await.expect("the agent");
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(1), "limit {limit}: {stderr}");
        assert!(
            stderr.starts_with(&format!(
                "Error: the limit of open files (RLIMIT_NOFILE) is {limit}: the agent needs at least 32 to start"
            )),
            "limit {limit}: {stderr}"
        );
        assert!(!stderr.contains("panicked") && !stderr.contains("--state-dir"), "{stderr}");
    }
    let _ = std::fs::remove_dir_all(&dir);
}

/// Runs `test`, of this same test binary, again with `child_env` set, inside a pids cgroup that
/// has room for its one thread only: its exit status and its output (standard output, then
/// error). `None`, said, where no pids cgroup can be made.
fn rerun_in_a_full_pids_cgroup(test: &str, child_env: &str) -> Option<(std::process::ExitStatus, String)> {
    let Some(cgroup) = PidsCgroup::make(1) else {
        eprintln!("skipped: no pids cgroup can be made here (needs root and the pids controller)");
        return None;
    };
    let script = format!(
        "echo $$ > {}/cgroup.procs && exec {} --exact {test} --test-threads=1 --nocapture",
        cgroup.0.display(),
        std::env::current_exe().expect("this test binary").display(),
    );
    let output = std::process::Command::new("sh")
        .args(["-c", &script])
        .env(child_env, "1")
        .output()
        .expect("the test binary runs");
    drop(cgroup);
    let text =
        format!("{}{}", String::from_utf8_lossy(&output.stdout), String::from_utf8_lossy(&output.stderr));
    Some((output.status, text))
}

/// Set for the run of this test binary that [`an_embedded_engine_with_no_thread_to_spare_runs_its_workers_on_the_callers`]
/// starts inside a full pids cgroup.
const NO_THREADS_CHILD: &str = "PROBELET_TEST_NO_THREADS_CHILD";

/// A host embedding the engine on a node (or in a container) whose pids limit is reached asks
/// for probe worker threads: the engine starts, its workers on the caller's runtime, as
/// `PipelineConfig::worker_threads` says. tokio's runtime builder panicked instead ("OS can't
/// spawn worker thread"), taking the host down with it. The engine is started by this same test
/// binary, run again inside a pids cgroup that has room for its one thread only.
#[test]
fn an_embedded_engine_with_no_thread_to_spare_runs_its_workers_on_the_callers() {
    if std::env::var_os(NO_THREADS_CHILD).is_some() {
        return start_an_engine_with_worker_threads();
    }
    let Some((status, text)) = rerun_in_a_full_pids_cgroup(
        "an_embedded_engine_with_no_thread_to_spare_runs_its_workers_on_the_callers",
        NO_THREADS_CHILD,
    ) else {
        return;
    };
    assert!(status.success() && text.contains("engine answered"), "{status}:\n{text}");
    assert!(!text.contains("panicked"), "{text}");
}

/// The child's part: an engine with two worker threads asked for, which answers.
fn start_an_engine_with_worker_threads() {
    actix::System::new().block_on(async {
        let pods = probelet::contracts::PodRegistry::new();
        let engine = probelet::Engine::builder(std::sync::Arc::new(pods)).worker_threads(2).start();
        let workers = engine.pipeline().workers().await.expect("the prober manager answers");
        println!("engine answered: {} workers", workers.len());
    });
}

/// Set for the run of this test binary that [`a_probe_to_a_host_name_with_no_thread_to_spare_fails_without_a_panic`]
/// starts inside a full pids cgroup.
const NO_LOOKUP_THREAD_CHILD: &str = "PROBELET_TEST_NO_LOOKUP_THREAD_CHILD";

/// A TCP or HTTP probe to a host *name* on a node whose pids limit is reached: the name is
/// resolved on a thread, and none can be made. The probe fails with the OS error as the lookup's
/// reason; tokio's `lookup_host` panicked instead (its `spawn_blocking`: `OS can't spawn worker
/// thread`), and the worker logged "Probe panicked; keeping the previous result" every period.
/// The probes run in this same test binary, run again inside a pids cgroup that has room for its
/// one thread only.
#[test]
fn a_probe_to_a_host_name_with_no_thread_to_spare_fails_without_a_panic() {
    if std::env::var_os(NO_LOOKUP_THREAD_CHILD).is_some() {
        return probe_a_host_name();
    }
    let Some((status, text)) = rerun_in_a_full_pids_cgroup(
        "a_probe_to_a_host_name_with_no_thread_to_spare_fails_without_a_panic",
        NO_LOOKUP_THREAD_CHILD,
    ) else {
        return;
    };
    assert!(!text.contains("panicked"), "{text}");
    assert!(status.success(), "{status}:\n{text}");
    let lookup_failed = "dial tcp: lookup localhost: resource temporarily unavailable";
    assert!(text.contains(&format!("tcp: Failure {lookup_failed}\n")), "{text}");
    assert!(text.contains("http: Failure Get \"http://localhost:"), "{text}");
    assert!(text.contains(&format!("\": {lookup_failed}\n")), "{text}");
}

/// The child's part: a TCP and an HTTP probe to `localhost` on a listener nothing accepts from,
/// on a runtime of the calling thread (which makes no thread); each outcome and output printed.
fn probe_a_host_name() {
    use k8s_openapi::api::core::v1::{Container, HTTPGetAction};
    use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
    use probelet::prober::http::{HttpProbeRequest, HttpProber};

    let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().expect("a runtime");
    runtime.block_on(async {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("a listener");
        let port = listener.local_addr().expect("its address").port();
        let timeout = Duration::from_secs(5);
        let tcp = probelet::prober::tcp::probe("localhost", port, timeout).await;
        println!("tcp: {:?} {}", tcp.outcome, tcp.output);
        let action = HTTPGetAction {
            host: Some("localhost".into()),
            port: IntOrString::Int(i32::from(port)),
            ..Default::default()
        };
        let request = HttpProbeRequest::new(&action, &Container::default(), "127.0.0.1").expect("a request");
        let http = HttpProber::new().probe(&request, timeout).await.expect("a probe's answer");
        println!("http: {:?} {}", http.outcome, http.output);
    });
}
