//! Exec probes against real child processes: the exec executor (docs/prober.md §4.5) on top of the
//! local-process runner. Commands are `sh -c` scripts and coreutils; scripts that must be
//! killed print their PIDs first so the test can check nothing is left running.

// The real binary runs on real time: its tests read the real clocks too.
#![allow(clippy::disallowed_methods)]

use std::future::Future;
use std::path::{Path, PathBuf};
use std::time::Duration;

use k8s_openapi::api::core::v1::EnvVar;
use probelet::container::ContainerId;
use probelet::contracts::{CommandRunner, ExecError, ExecOutput, MAX_EXEC_OUTPUT};
use probelet::local_runner::{LocalCommandRunner, LocalContainer};
use probelet::prober::exec::{expand_command, probe};
use probelet::prober::{ProbeError, ProbeOutcome, Probed};
use tokio::time::Instant;

/// A timeout the command is meant to hit.
const SHORT: Duration = Duration::from_millis(300);
/// A timeout the command is not meant to hit.
const LONG: Duration = Duration::from_secs(10);
/// How far past its timeout a killed command may end (far below the scripts' `sleep 30`).
const SLACK: Duration = Duration::from_secs(5);
/// Upper bound on any single test.
const TEST_BOUND: Duration = Duration::from_secs(20);
/// How long a killed process may take to disappear.
const GONE_WITHIN: Duration = Duration::from_secs(2);

fn sh(script: &str) -> Vec<String> {
    vec!["sh".to_owned(), "-c".to_owned(), script.to_owned()]
}

fn container() -> ContainerId {
    ContainerId::new("probelet", "exec-test")
}

async fn bounded<T>(test: impl Future<Output = T>) -> T {
    tokio::time::timeout(TEST_BOUND, test).await.expect("test exceeded its time bound")
}

async fn run(
    runner: &LocalCommandRunner,
    cmd: &[String],
    timeout: Duration,
) -> Result<ExecOutput, ExecError> {
    runner.run_in_container(&container(), cmd, timeout).await
}

fn pids_in(output: &[u8]) -> Vec<u32> {
    String::from_utf8_lossy(output)
        .split_whitespace()
        .map(|word| word.parse().expect("the script prints PIDs first"))
        .collect()
}

/// `(state, ppid)` of a live or zombie process, `None` once it is gone.
fn proc_state(pid: u32) -> Option<(char, u32)> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // `pid (comm) state ppid …`; comm may hold spaces and parentheses.
    let mut fields = stat[stat.rfind(')')? + 1..].split_whitespace();
    let state = fields.next()?.chars().next()?;
    let ppid = fields.next()?.parse().ok()?;
    Some((state, ppid))
}

/// Our own child must be gone: killed and reaped, not left a zombie.
async fn assert_reaped(pid: u32) {
    let start = Instant::now();
    loop {
        match proc_state(pid) {
            None => return,
            // The PID was reused by a process that is not ours.
            Some((_, ppid)) if ppid != std::process::id() => return,
            Some(state) if start.elapsed() > GONE_WITHIN => {
                panic!("child {pid} still present after {GONE_WITHIN:?}: {state:?}")
            }
            Some(_) => tokio::time::sleep(Duration::from_millis(5)).await,
        }
    }
}

/// A grandchild must be dead. Orphans are reparented to PID 1, whose reaping is not ours to
/// control (in this sandbox it never reaps), so a zombie counts as dead.
async fn assert_dead(pid: u32) {
    let start = Instant::now();
    loop {
        match proc_state(pid) {
            None | Some(('Z', _)) => return,
            Some(state) if start.elapsed() > GONE_WITHIN => {
                panic!("process {pid} still running after {GONE_WITHIN:?}: {state:?}")
            }
            Some(_) => tokio::time::sleep(Duration::from_millis(5)).await,
        }
    }
}

// === outcomes ===

#[tokio::test]
async fn exit_zero_is_success_with_output() {
    bounded(async {
        let runner = LocalCommandRunner::new();
        let probed = probe(&runner, &container(), &sh("echo hello"), LONG).await;
        assert_eq!(probed, Ok(Probed::new(ProbeOutcome::Success, "hello\n")));
    })
    .await;
}

#[tokio::test]
async fn non_zero_exit_is_failure_with_output() {
    bounded(async {
        let runner = LocalCommandRunner::new();
        let cmd = sh("echo broken; exit 3");
        assert_eq!(
            run(&runner, &cmd, LONG).await,
            Ok(ExecOutput { output: b"broken\n".to_vec(), exit_code: 3 })
        );
        let probed = probe(&runner, &container(), &cmd, LONG).await;
        assert_eq!(probed, Ok(Probed::new(ProbeOutcome::Failure, "broken\n")));
    })
    .await;
}

#[tokio::test]
async fn killed_by_a_signal_exits_128_plus_the_signal() {
    bounded(async {
        let runner = LocalCommandRunner::new();
        let cmd = sh("echo bye; kill -KILL $$");
        assert_eq!(
            run(&runner, &cmd, LONG).await,
            Ok(ExecOutput { output: b"bye\n".to_vec(), exit_code: 137 })
        );
        let probed = probe(&runner, &container(), &cmd, LONG).await;
        assert_eq!(probed, Ok(Probed::new(ProbeOutcome::Failure, "bye\n")));
    })
    .await;
}

/// Upstream's `RunInContainer` returns ExecSync's stdout with its stderr after it, and the
/// prober caps that: the order is not the order of arrival, and a full stdout leaves no room.
#[tokio::test]
async fn stdout_comes_before_stderr_whatever_came_first() {
    bounded(async {
        let runner = LocalCommandRunner::new();
        // The pauses make the arrival order the opposite of the output's.
        let cmd = sh("echo err >&2; sleep 0.2; echo out; sleep 0.2; echo err2 >&2; echo out2");
        let probed = probe(&runner, &container(), &cmd, LONG).await;
        assert_eq!(probed, Ok(Probed::new(ProbeOutcome::Success, "out\nout2\nerr\nerr2\n")));
        let cmd = sh("echo fatal >&2; head -c 12288 /dev/zero | tr '\\0' a; exit 1");
        let probed = probe(&runner, &container(), &cmd, LONG).await.expect("a failure");
        assert_eq!(probed.output, "a".repeat(10240), "stdout fills the 10 KiB; stderr is cut");
    })
    .await;
}

#[tokio::test]
async fn output_flood_is_capped_and_fully_drained() {
    bounded(async {
        let runner = LocalCommandRunner::new();
        // A megabyte on each pipe: the command only exits if both are drained past the cap.
        let cmd = sh("head -c 1000000 /dev/zero | tr '\\0' a; head -c 1000000 /dev/zero >&2; exit 4");
        let ran = run(&runner, &cmd, LONG).await.expect("the flood completes");
        assert_eq!(ran.exit_code, 4);
        assert_eq!(ran.output.len(), MAX_EXEC_OUTPUT);
        assert!(ran.output.iter().all(|b| *b == b'a'), "the first 10 KiB are stdout's");

        let probed = probe(&runner, &container(), &cmd, LONG).await.expect("a failure, not an error");
        assert_eq!(probed.outcome, ProbeOutcome::Failure);
        assert_eq!(probed.output.len(), 10240);
    })
    .await;
}

#[tokio::test]
async fn expanded_command_runs() {
    bounded(async {
        let runner = LocalCommandRunner::new();
        let env = [EnvVar { name: "WHO".into(), value: Some("world".into()), value_from: None }];
        let cmd = expand_command(&sh("echo hello $(WHO) '$(NOBODY)'"), &env);
        assert_eq!(cmd[2], "echo hello world '$(NOBODY)'");
        let probed = probe(&runner, &container(), &cmd, LONG).await;
        assert_eq!(probed, Ok(Probed::new(ProbeOutcome::Success, "hello world $(NOBODY)\n")));
    })
    .await;
}

// === timeouts and cleanup ===

#[tokio::test]
async fn timeout_is_a_failure_with_the_runtime_text() {
    bounded(async {
        let runner = LocalCommandRunner::new();
        let probed = probe(&runner, &container(), &sh("echo started; sleep 30"), SHORT).await;
        assert_eq!(
            probed,
            Ok(Probed::new(ProbeOutcome::Failure, r#"command "sh -c echo started; sleep 30" timed out"#))
        );
    })
    .await;
}

#[tokio::test]
async fn timeout_kills_the_process_and_what_it_started() {
    bounded(async {
        let runner = LocalCommandRunner::new();
        let start = Instant::now();
        let ran = run(&runner, &sh("echo $$; sleep 30 & echo $!; sleep 30"), SHORT).await;
        let elapsed = start.elapsed();
        let Err(ExecError::Timeout { output }) = ran else { panic!("expected a timeout, got {ran:?}") };
        assert!(elapsed >= SHORT && elapsed < SHORT + SLACK, "took {elapsed:?}");
        let pids = pids_in(&output);
        assert_eq!(pids.len(), 2, "output {output:?}");
        assert_reaped(pids[0]).await;
        assert_dead(pids[1]).await;
    })
    .await;
}

#[tokio::test]
async fn timeout_kills_a_process_that_ignores_sigterm() {
    bounded(async {
        let runner = LocalCommandRunner::new();
        let ran = run(&runner, &sh("trap '' TERM; echo $$; sleep 30 & echo $!; wait"), SHORT).await;
        let Err(ExecError::Timeout { output }) = ran else { panic!("expected a timeout, got {ran:?}") };
        let pids = pids_in(&output);
        assert_eq!(pids.len(), 2, "output {output:?}");
        assert_reaped(pids[0]).await;
        assert_dead(pids[1]).await;
    })
    .await;
}

#[tokio::test]
async fn exited_command_whose_child_holds_the_pipes_does_not_hang() {
    bounded(async {
        let runner = LocalCommandRunner::new();
        let start = Instant::now();
        let ran = run(&runner, &sh("sleep 30 & echo $!; exit 0"), SHORT).await.expect("the command exited");
        assert!(start.elapsed() < SHORT + SLACK, "took {:?}", start.elapsed());
        assert_eq!(ran.exit_code, 0);
        let pids = pids_in(&ran.output);
        assert_eq!(pids.len(), 1, "output {:?}", ran.output);
        assert_dead(pids[0]).await;
    })
    .await;
}

/// A finished probe leaves nothing behind: what it started in the background, output
/// redirected or not, is killed when it exits (in a container it would die with the container).
#[tokio::test]
async fn what_a_finished_probe_left_running_is_killed() {
    bounded(async {
        let runner = LocalCommandRunner::new();
        for script in ["sleep 77 >/dev/null 2>&1 & echo $!", "sleep 77 & echo $!"] {
            let start = Instant::now();
            let ran = run(&runner, &sh(script), LONG).await.expect("the command exited");
            assert_eq!(ran.exit_code, 0, "{script}");
            assert!(start.elapsed() < SLACK, "{script}: took {:?}, not its timeout", start.elapsed());
            let pids = pids_in(&ran.output);
            assert_eq!(pids.len(), 1, "{script}: output {:?}", ran.output);
            assert_dead(pids[0]).await;
        }
    })
    .await;
}

/// Polls for the file a script writes its PIDs to (renamed into place once complete).
/// Starts a probe of `cmd`, reads the PIDs its script writes to `path` while it runs, then
/// drops (cancels) the probe; the PIDs.
async fn pids_then_drop(
    runner: &LocalCommandRunner,
    id: &ContainerId,
    cmd: &[String],
    path: &Path,
) -> Vec<u32> {
    let mut probing = Box::pin(probe(runner, id, cmd, LONG));
    let pids = tokio::select! {
        done = &mut probing => panic!("the probe finished early: {done:?}"),
        pids = pids_from_file(path) => pids,
    };
    drop(probing);
    let _ = std::fs::remove_file(path);
    pids
}

async fn pids_from_file(path: &Path) -> Vec<u32> {
    let start = Instant::now();
    loop {
        if let Ok(text) = std::fs::read_to_string(path) {
            return pids_in(text.as_bytes());
        }
        assert!(start.elapsed() < GONE_WITHIN, "the script never wrote {}", path.display());
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

#[tokio::test]
async fn dropping_the_probe_kills_the_process_group() {
    bounded(async {
        let dir = std::env::temp_dir();
        let path = dir.join(format!("probelet-exec-drop-{}", std::process::id()));
        let _ = std::fs::remove_file(&path);
        let script = format!(
            "echo $$ > '{tmp}'; sleep 30 & echo $! >> '{tmp}'; mv '{tmp}' '{path}'; wait",
            tmp = path.with_extension("tmp").display(),
            path = path.display(),
        );
        let runner = LocalCommandRunner::new();
        let id = container();
        let cmd = sh(&script);
        let pids = pids_then_drop(&runner, &id, &cmd, &path).await;
        assert_eq!(pids.len(), 2, "pids {pids:?}");
        assert_reaped(pids[0]).await;
        assert_dead(pids[1]).await;
    })
    .await;
}

/// Starts a probe of a script that prints its PIDs (its own, then a background `sleep`'s) and
/// waits; returns the still-running probe and the PIDs.
async fn start_killable(
    name: &str,
) -> (std::pin::Pin<Box<impl Future<Output = Result<Probed, ProbeError>>>>, Vec<u32>) {
    let path = std::env::temp_dir().join(format!("probelet-exec-{name}-{}", std::process::id()));
    let _ = std::fs::remove_file(&path);
    let script = format!(
        "echo $$ > '{tmp}'; sleep 30 & echo $! >> '{tmp}'; mv '{tmp}' '{path}'; wait",
        tmp = path.with_extension("tmp").display(),
        path = path.display(),
    );
    let cmd = sh(&script);
    let mut probing =
        Box::pin(async move { probe(&LocalCommandRunner::new(), &container(), &cmd, LONG).await });
    let pids = tokio::select! {
        done = &mut probing => panic!("the probe finished early: {done:?}"),
        pids = pids_from_file(&path) => pids,
    };
    let _ = std::fs::remove_file(&path);
    assert_eq!(pids.len(), 2, "pids {pids:?}");
    (probing, pids)
}

/// Without a runtime to wait on: every process must be dead (a zombie counts) soon.
fn assert_all_dead_blocking(pids: &[u32]) {
    let start = std::time::Instant::now();
    for &pid in pids {
        loop {
            match proc_state(pid) {
                None | Some(('Z', _)) => break,
                Some(state) if start.elapsed() > GONE_WITHIN => {
                    panic!("process {pid} still running after {GONE_WITHIN:?}: {state:?}")
                }
                Some(_) => std::thread::sleep(Duration::from_millis(5)),
            }
        }
    }
}

fn current_thread_runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread().enable_all().build().expect("a runtime")
}

#[test]
fn dropping_the_probe_outside_a_runtime_kills_the_process_group() {
    let runtime = current_thread_runtime();
    let (probing, pids) = runtime.block_on(bounded(start_killable("drop-outside")));
    // No runtime to run a task on: the group is killed on this thread.
    drop(probing);
    assert_all_dead_blocking(&pids);
}

#[test]
fn a_runtime_shut_down_before_the_kill_ran_still_kills_the_process_group() {
    let runtime = current_thread_runtime();
    let pids = runtime.block_on(bounded(async {
        let (probing, pids) = start_killable("drop-shutdown").await;
        // Hands the kill to a task on this runtime, which never gets to run it.
        drop(probing);
        pids
    }));
    drop(runtime);
    assert_all_dead_blocking(&pids);
}

// === errors ===

#[tokio::test]
async fn missing_executable_is_a_runtime_error() {
    bounded(async {
        let runner = LocalCommandRunner::new();
        let cmd = vec!["/nonexistent/probelet-no-such-probe".to_owned(), "arg".to_owned()];
        let err = probe(&runner, &container(), &cmd, LONG).await.expect_err("cannot run");
        let ProbeError::Runtime(message) = &err else { panic!("expected a runtime error, got {err:?}") };
        assert!(message.contains("/nonexistent/probelet-no-such-probe"), "message {message}");
        assert_eq!(err.outcome(), ProbeOutcome::Unknown);
    })
    .await;
}

#[tokio::test]
async fn empty_command_is_invalid() {
    bounded(async {
        let runner = LocalCommandRunner::new();
        for cmd in [vec![], vec![String::new(), "x".to_owned()]] {
            let err = probe(&runner, &container(), &cmd, LONG).await.expect_err("invalid");
            assert!(matches!(err, ProbeError::InvalidCommand(_)), "{cmd:?}: {err:?}");
            // The runner refuses on its own as well.
            let ran = run(&runner, &cmd, LONG).await;
            assert!(matches!(ran, Err(ExecError::Runtime(_))), "{cmd:?}: {ran:?}");
        }
    })
    .await;
}

// === registered containers ===

#[tokio::test]
async fn registered_container_sets_working_dir_and_env() {
    bounded(async {
        let dir: PathBuf = std::env::temp_dir().canonicalize().expect("a temp dir");
        let runner = LocalCommandRunner::new();
        let id = container();
        runner.register(
            id.clone(),
            LocalContainer {
                working_dir: Some(dir.clone()),
                env: vec![("PROBELET_EXEC_TEST".into(), "from-container".into())],
            },
        );
        let cmd = sh("pwd -P; echo \"[$PROBELET_EXEC_TEST]\"");
        let ran = runner.run_in_container(&id, &cmd, LONG).await.expect("runs");
        assert_eq!(String::from_utf8_lossy(&ran.output), format!("{}\n[from-container]\n", dir.display()));

        let other = runner.run_in_container(&ContainerId::new("probelet", "other"), &cmd, LONG).await;
        let other = other.expect("runs");
        assert!(String::from_utf8_lossy(&other.output).ends_with("[]\n"), "{other:?}");

        assert!(runner.unregister(&id).is_some());
        let after = runner.run_in_container(&id, &cmd, LONG).await.expect("runs");
        assert_eq!(after.output, other.output);
    })
    .await;
}

#[tokio::test]
async fn missing_working_dir_is_a_runtime_error() {
    bounded(async {
        let runner = LocalCommandRunner::new();
        let id = container();
        let dir = PathBuf::from("/nonexistent/probelet-dir");
        runner.register(id.clone(), LocalContainer { working_dir: Some(dir), env: vec![] });
        let ran = runner.run_in_container(&id, &sh("true"), LONG).await;
        let Err(ExecError::Runtime(message)) = ran else { panic!("expected a runtime error, got {ran:?}") };
        assert!(message.contains("/nonexistent/probelet-dir"), "message {message}");
    })
    .await;
}

// === under the container shim (the agent's standalone mode) ===

/// A runner whose commands run under the agent binary's `container-shim`.
fn shimmed() -> LocalCommandRunner {
    LocalCommandRunner::new().with_shim(env!("CARGO_BIN_EXE_probelet"))
}

/// A script that starts `sleep <seconds>` in a new session (out of the command's process group,
/// holding its output pipes unless `quiet`), waits until it wrote its PID to a file, prints
/// the PID, then runs `rest`.
fn escaping_script(name: &str, seconds: u32, quiet: bool, rest: &str) -> (Vec<String>, PathBuf) {
    let path = std::env::temp_dir().join(format!("probelet-exec-shim-{name}-{}", std::process::id()));
    let _ = std::fs::remove_file(&path);
    let redirect = if quiet { "</dev/null >/dev/null 2>&1" } else { "" };
    let script = format!(
        "setsid -f sh -c 'echo $$ > {path}.tmp; mv {path}.tmp {path}; exec sleep {seconds}' {redirect}; \
         while [ ! -s {path} ]; do sleep 0.01; done; cat {path}; {rest}",
        path = path.display(),
    );
    (sh(&script), path)
}

/// What a probe's command started in a session of its own is killed when the command exits,
/// and a leftover holding the output pipes no longer holds the probe until its timeout; the
/// output and exit code are the command's.
#[tokio::test]
async fn under_the_shim_what_left_the_group_is_killed_when_the_probe_exits() {
    bounded(async {
        let runner = shimmed();
        for (quiet, seconds) in [(true, 7341), (false, 7342)] {
            let (cmd, path) =
                escaping_script(&format!("exit-{seconds}"), seconds, quiet, "echo done; exit 3");
            let start = Instant::now();
            let ran = run(&runner, &cmd, LONG).await.expect("the command exited");
            let _ = std::fs::remove_file(&path);
            assert!(start.elapsed() < SLACK, "took {:?}, not its timeout", start.elapsed());
            assert_eq!(ran.exit_code, 3, "the command's exit code");
            let text = String::from_utf8_lossy(&ran.output).into_owned();
            assert!(text.ends_with("done\n"), "the command's output: {text:?}");
            let pid: u32 = text.lines().next().and_then(|l| l.trim().parse().ok()).expect("a pid first");
            assert_dead(pid).await;
        }
    })
    .await;
}

/// On a timeout the shim kills the whole tree, including what left the group.
#[tokio::test]
async fn under_the_shim_a_timed_out_probe_kills_what_left_the_group() {
    bounded(async {
        let (cmd, path) = escaping_script("timeout", 7343, true, "sleep 30");
        let ran = run(&shimmed(), &cmd, Duration::from_secs(2)).await;
        let pids = pids_from_file(&path).await;
        let _ = std::fs::remove_file(&path);
        let Err(ExecError::Timeout { output }) = ran else { panic!("expected a timeout, got {ran:?}") };
        assert_eq!(pids_in(&output), pids, "the output so far is kept");
        assert_dead(pids[0]).await;
    })
    .await;
}

/// A cancelled (dropped) probe: the shim kills the whole tree.
#[tokio::test]
async fn under_the_shim_a_dropped_probe_kills_what_left_the_group() {
    bounded(async {
        let (cmd, path) = escaping_script("drop", 7344, true, "sleep 30");
        let (runner, id) = (shimmed(), container());
        let pids = pids_then_drop(&runner, &id, &cmd, &path).await;
        assert_dead(pids[0]).await;
    })
    .await;
}

/// A command that floods its shim with SIGUSR1 cannot drown the kill of a timed-out or
/// dropped probe: the runner asks on the shim's control socket as well, and what left the
/// group dies with the rest.
#[tokio::test]
async fn under_the_shim_a_command_cannot_drown_its_kill() {
    bounded(async {
        let flood = "while :; do kill -USR1 $PPID 2>/dev/null; done";
        let (cmd, path) = escaping_script("flood-timeout", 7345, true, flood);
        let ran = run(&shimmed(), &cmd, Duration::from_secs(1)).await;
        let pids = pids_from_file(&path).await;
        let _ = std::fs::remove_file(&path);
        assert!(matches!(ran, Err(ExecError::Timeout { .. })), "{ran:?}");
        assert_dead(pids[0]).await;

        let (cmd, path) = escaping_script("flood-drop", 7346, true, flood);
        let (runner, id) = (shimmed(), container());
        let pids = pids_then_drop(&runner, &id, &cmd, &path).await;
        assert_dead(pids[0]).await;
    })
    .await;
}

/// Start errors read as without the shim.
#[tokio::test]
async fn under_the_shim_a_missing_executable_is_the_same_runtime_error() {
    bounded(async {
        let cmd = vec!["/nonexistent/probelet-no-such-probe".to_owned(), "arg".to_owned()];
        let direct = run(&LocalCommandRunner::new(), &cmd, LONG).await;
        let shimmed = run(&shimmed(), &cmd, LONG).await;
        let (Err(ExecError::Runtime(direct)), Err(ExecError::Runtime(shimmed))) = (direct, shimmed) else {
            panic!("both are runtime errors")
        };
        // containerd's answer to an ExecSync whose process did not start, with a fresh exec ID.
        let without_id = |text: &str| {
            let (before, rest) = text.split_once("failed to start exec \"").expect("an exec ID");
            let (id, after) = rest.split_once('"').expect("a quoted ID");
            assert!(id.len() == 64 && id.bytes().all(|b| b.is_ascii_hexdigit()), "{id}");
            format!("{before}<id>{after}")
        };
        assert_eq!(
            without_id(&shimmed),
            "rpc error: code = Unknown desc = failed to exec in container: <id>: OCI runtime exec failed: \
             exec failed: unable to start container process: exec: \"/nonexistent/probelet-no-such-probe\": \
             stat /nonexistent/probelet-no-such-probe: no such file or directory: unknown"
        );
        assert_eq!(without_id(&direct), without_id(&shimmed));
        let ran = run(&self::shimmed(), &sh("printf out; printf err >&2; exit 7"), LONG).await.expect("ran");
        assert_eq!(String::from_utf8_lossy(&ran.output), "outerr", "stdout, then stderr");
        assert_eq!(ran.exit_code, 7);
    })
    .await;
}
