//! A [`CommandRunner`] that runs commands as local processes: the standalone host's containers
//! and the tests' real children. It plays the part a container runtime's `ExecSync` plays
//! upstream (containerd's `execInternal`): run argv directly, capture combined stdout and stderr
//! up to [`MAX_EXEC_OUTPUT`] bytes, and kill the command when its timeout passes.
//!
//! Each command runs in its own process group so that a timeout, a cancelled probe or the
//! command's own exit kills what it left in that group, not only the process we spawned (a
//! container's exec leftovers would die with the container; here they have none);
//! [`crate::process`] sends the signal (a system call, so a cancelled probe's group is killed
//! right where the probe is dropped). A process that leaves the group (`setsid`, a daemon) is
//! out of reach of a group's signal: only with a shim ([`LocalCommandRunner::with_shim`], the
//! agent binary's `container-shim`, [`crate::shim`]) is it killed too. The shim is the group's
//! leader and the parent of all the command's orphans; when the command exits it SIGKILLs
//! everything the command left, and on a timeout or cancel it is sent SIGUSR1 (it kills the
//! whole tree) before the group's SIGKILL. The output is captured as without it: the shim's
//! standard output and error are the runner's pipes and the command inherits them.

use std::collections::HashMap;
use std::io;
use std::os::unix::process::ExitStatusExt;
use std::path::{Path, PathBuf};
use std::process::{ExitStatus, Stdio};
use std::sync::{Arc, PoisonError, RwLock};
use std::time::Duration;

use futures::future::BoxFuture;
use tokio::io::{AsyncRead, AsyncReadExt};
use tokio::process::{Child, Command};
use tokio::time::Instant;

use crate::capacity::ShrinkAfterRemoval;
use crate::container::ContainerId;
use crate::contracts::{CommandRunner, ExecError, ExecOutput, MAX_EXEC_OUTPUT};
use crate::gofmt::go_quote;
use crate::process::{Signal, exited, signal_group_logged, signal_leader};
use crate::shim::{Report, TREE_KILL_WAIT, runc_start_error, shim_args};

/// How long to wait for a killed command to be reaped before leaving it to tokio's background
/// reaper, so a process stuck in the kernel cannot hold a probe much past its timeout.
const REAP_GRACE: Duration = Duration::from_millis(250);

/// What a registered local container gives the commands run "in" it.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct LocalContainer {
    /// The directory commands start in; the agent's own when `None`.
    pub working_dir: Option<PathBuf>,
    /// Variables set on top of the agent's own environment, which commands inherit (so `PATH`
    /// finds `sh`).
    pub env: Vec<(String, String)>,
}

/// Runs commands as local processes. A container ID only selects the working directory and
/// environment registered for it; an unregistered ID runs in the agent's own.
#[derive(Debug, Clone, Default)]
pub struct LocalCommandRunner {
    /// Per-container settings, shared by every clone of the runner.
    containers: Arc<RwLock<HashMap<ContainerId, LocalContainer>>>,
    /// The agent binary whose `container-shim` runs each command; `None`: run it directly.
    shim: Option<Arc<Path>>,
}

// === impl LocalCommandRunner ===

impl LocalCommandRunner {
    /// A runner with no container registered: every command runs in the agent's directory and
    /// environment.
    pub fn new() -> Self {
        Self::default()
    }

    /// Runs every command under the container shim of the agent binary at `program` (`probelet
    /// container-shim -- COMMAND`), so that what a command started dies with it even when it
    /// left the command's process group. Only for a `program` that is the probelet binary.
    pub fn with_shim(mut self, program: impl Into<PathBuf>) -> Self {
        self.shim = Some(Arc::from(program.into()));
        self
    }

    /// Sets (or replaces) the working directory and environment of a container's commands.
    pub fn register(&self, container_id: ContainerId, container: LocalContainer) {
        self.containers.write().unwrap_or_else(PoisonError::into_inner).insert(container_id, container);
    }

    /// Forgets a container's settings, returning them.
    pub fn unregister(&self, container_id: &ContainerId) -> Option<LocalContainer> {
        let mut containers = self.containers.write().unwrap_or_else(PoisonError::into_inner);
        let removed = containers.remove(container_id);
        containers.shrink_after_removal();
        removed
    }

    fn container(&self, container_id: &ContainerId) -> LocalContainer {
        self.containers
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .get(container_id)
            .cloned()
            .unwrap_or_default()
    }
}

impl CommandRunner for LocalCommandRunner {
    fn run_in_container(
        &self,
        container_id: &ContainerId,
        cmd: &[String],
        timeout: Duration,
    ) -> BoxFuture<'static, Result<ExecOutput, ExecError>> {
        let container = self.container(container_id);
        let container_id = container_id.clone();
        let argv = cmd.to_vec();
        let shim = self.shim.clone();
        Box::pin(async move { run(&container_id, &argv, &container, shim.as_deref(), timeout).await })
    }
}

// === running one command ===

async fn run(
    container_id: &ContainerId,
    argv: &[String],
    container: &LocalContainer,
    shim: Option<&Path>,
    timeout: Duration,
) -> Result<ExecOutput, ExecError> {
    let Some((program, args)) = argv.split_first() else {
        return Err(ExecError::Runtime("cannot run an empty command".to_owned()));
    };
    if program.is_empty() {
        return Err(ExecError::Runtime("cannot run a command with an empty program name".to_owned()));
    }
    // Taken before spawning so the timeout covers the spawn too; `None` (a timeout too large to
    // represent) means no deadline.
    let deadline = Instant::now().checked_add(timeout);

    let in_dir = container.working_dir.as_ref().map(|dir| format!(" in {dir:?}")).unwrap_or_default();
    // The shim (or, without it, the program) could not be started at all.
    let start_error = |e: &io::Error| spawn_failure(program, &in_dir, false, e);
    // The program could not be started: containerd's answer to an ExecSync whose process runc
    // could not start, as the kubelet shows it.
    let exec_error = |e: &io::Error| spawn_failure(program, &in_dir, true, e);
    // Under the shim its standard input is a socket it reports the start on.
    let (mut command, control) = match shim {
        Some(shim) => {
            let (ours, theirs) = std::os::unix::net::UnixStream::pair().map_err(|e| start_error(&e))?;
            let mut command = Command::new(shim);
            command
                .args(shim_args(false, Some(std::process::id()), Path::new(program), args))
                .stdin(Stdio::from(std::os::fd::OwnedFd::from(theirs)));
            (command, Some(ours))
        }
        None => {
            let mut command = Command::new(program);
            command.args(args).stdin(Stdio::null());
            (command, None)
        }
    };
    command
        .envs(container.env.iter().map(|(name, value)| (name, value)))
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        // The shim is killed by [`ProcessGroup`] itself, never by a bare SIGKILL that would
        // leave its tree behind.
        .kill_on_drop(control.is_none())
        .process_group(0);
    if let Some(dir) = &container.working_dir {
        command.current_dir(dir);
    }
    // Recorded, so that a subreaping agent tells it from an orphan (crate::spawned).
    let spawned = crate::spawned::spawn(&mut command);
    // It holds the shim's end of the socket: dropped now, so that the report's reader sees the
    // end of file if the shim dies before reporting.
    drop(command);
    // Without a shim the program itself was spawned: its failure is the exec's, unless the
    // working directory is what is missing.
    let workdir_ok = container.working_dir.as_ref().is_none_or(|dir| Path::new(dir).is_dir());
    // A shim that could not be forked for want of a process slot or memory: the program would
    // have failed the same way, and reads as when the shim reports it.
    let mut child = spawned.map_err(|e| {
        if workdir_ok && (shim.is_none() || out_of_processes(&e)) { exec_error(&e) } else { start_error(&e) }
    })?;
    let stdout = child.stdout.take();
    let stderr = child.stderr.take();
    let mut group = ProcessGroup::new(child, control.is_some());
    if let Some(control) = control {
        match tokio::time::timeout_at(until_or_far(deadline), Report::receive(control)).await {
            Ok(Ok((Report::Started, control))) => group.control = Some(control),
            Ok(Ok((Report::Failed(e), _))) => {
                // The shim exits by itself; killed and reaped here all the same, so that the
                // group is never signalled after its leader was reaped.
                group.kill_tree().await;
                return Err(exec_error(&e));
            }
            Ok(Err(e)) => {
                group.kill_tree().await;
                return Err(ExecError::Runtime(format!(
                    "failed to start command {program:?}{in_dir}: container shim: {e}"
                )));
            }
            Err(_) => {
                tracing::debug!(%container_id, program, ?timeout, "the shim did not report the start within the timeout");
                group.kill_tree().await;
                return Err(ExecError::Timeout { output: Vec::new() });
            }
        }
    }

    let mut output = Vec::new();
    let ended = group.pump(stdout, stderr, &mut output, deadline).await;
    match ended {
        Ended::Exited(status) => {
            // What the command left running in its group (`sleep 77 &`) dies with it, as it
            // would with its container; usually done already, as the leader exited.
            group.kill();
            Ok(ExecOutput { output, exit_code: exit_code(status) })
        }
        Ended::PipesHeld(status) => {
            tracing::debug!(%container_id, program, "command exited but its children held its output open");
            group.kill();
            Ok(ExecOutput { output, exit_code: exit_code(status) })
        }
        Ended::TimedOut => {
            tracing::debug!(%container_id, program, ?timeout, "command timed out, killing its process group");
            group.kill_tree().await;
            Err(ExecError::Timeout { output })
        }
        Ended::WaitFailed(e) => {
            group.kill();
            Err(ExecError::Runtime(format!("failed to wait for command {program:?}: {e}")))
        }
    }
}

/// How [`pump`] stopped.
#[derive(Debug)]
enum Ended {
    /// The process exited and both pipes reached end of file.
    Exited(ExitStatus),
    /// The process exited within the timeout but something it started kept a pipe open.
    PipesHeld(ExitStatus),
    /// The process was still running at the deadline.
    TimedOut,
    WaitFailed(io::Error),
}

/// Reads both pipes and waits for the process, until it exited and both pipes are closed or
/// the deadline passes; `output` gets standard output, then standard error (upstream's
/// `RunInContainer` appends ExecSync's stderr to its stdout before the prober's 10 KiB cap).
/// Pipes keep being drained once their share is full so the command never blocks on a full
/// pipe.
async fn pump(
    child: &mut Child,
    pgid: &mut Option<u32>,
    stdout: Option<impl AsyncRead + Unpin>,
    stderr: Option<impl AsyncRead + Unpin>,
    output: &mut Vec<u8>,
    deadline: Option<Instant>,
) -> Ended {
    let mut errors = Vec::new();
    let ended = pump_into(child, pgid, stdout, stderr, output, &mut errors, deadline).await;
    append_capped(output, &errors);
    ended
}

async fn pump_into(
    child: &mut Child,
    pgid: &mut Option<u32>,
    mut stdout: Option<impl AsyncRead + Unpin>,
    mut stderr: Option<impl AsyncRead + Unpin>,
    output: &mut Vec<u8>,
    errors: &mut Vec<u8>,
    deadline: Option<Instant>,
) -> Ended {
    let mut status = None;
    let mut stdout_buf = [0u8; 4096];
    let mut stderr_buf = [0u8; 4096];
    let deadline = until(deadline);
    tokio::pin!(deadline);
    let exit = leader_exit(child, pgid);
    tokio::pin!(exit);
    loop {
        if let (Some(status), None, None) = (status, &stdout, &stderr) {
            return Ended::Exited(status);
        }
        tokio::select! {
            read = read_some(&mut stdout, &mut stdout_buf), if stdout.is_some() => match read {
                Some(n) => append_capped(output, &stdout_buf[..n]),
                None => stdout = None,
            },
            read = read_some(&mut stderr, &mut stderr_buf), if stderr.is_some() => match read {
                Some(n) => append_capped(errors, &stderr_buf[..n]),
                None => stderr = None,
            },
            waited = &mut exit, if status.is_none() => match waited {
                Ok(exited) => status = Some(exited),
                Err(e) => return Ended::WaitFailed(e),
            },
            () = &mut deadline => {
                return match status {
                    Some(status) => Ended::PipesHeld(status),
                    None => Ended::TimedOut,
                };
            }
        }
    }
}

/// The leader's exit status. Where the exit is seen before the leader is reaped ([`exited`]:
/// a pidfd, or `waitid(WNOWAIT)` without one), the group (whatever the command left behind) is
/// killed first, while its ID is still held. Either way `pgid` is taken once the look is over:
/// once the leader is reaped its ID may name another process's group, so nothing signals it by
/// that ID any more
/// (docs/reliability.md, "A container's group is never killed by a reaped leader's ID").
async fn leader_exit(child: &mut Child, pgid: &mut Option<u32>) -> io::Result<ExitStatus> {
    leader_exit_with(child, pgid, exited).await
}

/// [`leader_exit`] with the way the exit is seen before the reap given (a test's own).
async fn leader_exit_with<F: Future<Output = io::Result<()>>>(
    child: &mut Child,
    pgid: &mut Option<u32>,
    exited: impl FnOnce(u32) -> F,
) -> io::Result<ExitStatus> {
    if let Some(group) = *pgid {
        let seen = exited(group).await;
        // Taken only now: until the exit is seen, a timeout or a dropped probe kills the group.
        *pgid = None;
        match seen {
            Ok(()) => signal_group_logged(group, Signal::Kill),
            Err(error) => tracing::debug!(
                group,
                %error,
                "cannot see an exec command's exit before it is reaped; what it left in its process group is not killed"
            ),
        }
    }
    child.wait().await
}

/// `deadline`, or one far enough away to never pass.
fn until_or_far(deadline: Option<Instant>) -> Instant {
    deadline.unwrap_or_else(|| Instant::now() + Duration::from_secs(86_400 * 365))
}

/// One read from a pipe; `None` at end of file or on a read error (nothing more will come).
async fn read_some(pipe: &mut Option<impl AsyncRead + Unpin>, buf: &mut [u8]) -> Option<usize> {
    match pipe {
        Some(pipe) => match pipe.read(buf).await {
            Ok(0) | Err(_) => None,
            Ok(n) => Some(n),
        },
        None => std::future::pending().await,
    }
}

async fn until(deadline: Option<Instant>) {
    match deadline {
        Some(deadline) => tokio::time::sleep_until(deadline).await,
        None => std::future::pending().await,
    }
}

/// Upstream's limited writer: keeps the first [`MAX_EXEC_OUTPUT`] bytes, drops the rest.
fn append_capped(output: &mut Vec<u8>, data: &[u8]) {
    let room = MAX_EXEC_OUTPUT.saturating_sub(output.len());
    output.extend_from_slice(&data[..data.len().min(room)]);
}

/// The error of an exec whose process could not be spawned: with `program_failed`,
/// containerd's error for a program runc could not start; otherwise the runner's own, for a
/// shim that could not be started for a reason of its own (its executable gone, a missing
/// working directory).
fn spawn_failure(program: &str, in_dir: &str, program_failed: bool, e: &io::Error) -> ExecError {
    ExecError::Runtime(if program_failed {
        exec_start_error(&runc_start_error(program, e))
    } else {
        format!("failed to start command {program:?}{in_dir}: {e}")
    })
}

/// Whether a spawn failed for want of what any process needs, a process slot (`EAGAIN`: a
/// pids cgroup or RLIMIT_NPROC full) or memory (`ENOMEM`).
fn out_of_processes(e: &io::Error) -> bool {
    [rustix::io::Errno::AGAIN, rustix::io::Errno::NOMEM]
        .iter()
        .any(|errno| e.raw_os_error() == Some(errno.raw_os_error()))
}

/// containerd's CRI error for an exec whose process did not start, around runc's `error`, as
/// the kubelet gets it over gRPC (containerd 1.7 and 2.x, runc 1.1 and later). The exec ID is
/// a fresh random one, as containerd's.
fn exec_start_error(error: &str) -> String {
    format!(
        "rpc error: code = Unknown desc = failed to exec in container: failed to start exec {}: OCI runtime \
         exec failed: exec failed: unable to start container process: {error}: unknown",
        go_quote(&exec_id())
    )
}

/// 64 random hex digits.
fn exec_id() -> String {
    use std::hash::{BuildHasher, Hasher};
    let state = std::collections::hash_map::RandomState::new();
    (0..4u64)
        .map(|i| {
            let mut hasher = state.build_hasher();
            hasher.write_u64(i);
            format!("{:016x}", hasher.finish())
        })
        .collect()
}

/// The exit code as a shell reports it: 128 + the signal for a killed process.
fn exit_code(status: ExitStatus) -> i32 {
    status.code().or_else(|| status.signal().map(|signal| 128 + signal)).unwrap_or(-1)
}

// === impl ProcessGroup ===

/// The spawned process and its group. Dropping it (a cancelled probe) kills the whole group;
/// the child itself is killed on drop too and reaped by tokio in the background. A shim is
/// asked first (SIGUSR1) and given [`TREE_KILL_WAIT`] before the group's SIGKILL, in a task of
/// its own when dropped.
struct ProcessGroup {
    /// The leader, killed on drop (`kill_on_drop`) after the group: fields drop after `drop`.
    /// `None` once a dropped shim was handed to the task that kills it.
    child: Option<Child>,
    /// The group still to kill; the child's PID, as it leads its own group. Taken once the
    /// group is killed, which happens while the leader is unreaped (so the ID cannot have been
    /// reused) wherever a pidfd is available.
    pgid: Option<u32>,
    /// Whether the leader is the container shim.
    shimmed: bool,
    /// The shim's control socket once it reported the start: where it is asked to kill its
    /// tree (with SIGUSR1 as well, which the command could drown).
    control: Option<std::os::unix::net::UnixStream>,
}

impl ProcessGroup {
    fn new(child: Child, shimmed: bool) -> Self {
        let pgid = child.id();
        ProcessGroup { child: Some(child), pgid, shimmed, control: None }
    }

    /// Asks the shim (leader `pgid`, unreaped) to kill its tree: on its control socket, and by
    /// SIGUSR1.
    fn ask_to_kill_tree(&self, pgid: u32) {
        if let Some(control) = &self.control {
            crate::shim::ask_to_kill_tree(control);
        }
        let _ = signal_leader(pgid, Signal::KillTree);
    }

    /// [`pump`] on the leader.
    async fn pump(
        &mut self,
        stdout: Option<impl AsyncRead + Unpin>,
        stderr: Option<impl AsyncRead + Unpin>,
        output: &mut Vec<u8>,
        deadline: Option<Instant>,
    ) -> Ended {
        let Some(child) = self.child.as_mut() else {
            return Ended::WaitFailed(io::Error::other("the command was handed over"));
        };
        pump(child, &mut self.pgid, stdout, stderr, output, deadline).await
    }

    fn kill(&mut self) {
        if let Some(pgid) = self.pgid.take() {
            signal_group_logged(pgid, Signal::Kill);
        }
        // Also signal the leader directly in case the group could not be signalled; an error
        // only means it has already been reaped.
        if let Some(child) = self.child.as_mut() {
            let _ = child.start_kill();
        }
    }

    /// A shim is asked to kill its tree and given [`TREE_KILL_WAIT`] to exit; then (and at once
    /// without a shim) the group is SIGKILLed and the leader reaped.
    async fn kill_tree(&mut self) {
        if self.shimmed
            && let Some(pgid) = self.pgid
        {
            // Unreaped (its exit not seen yet): the PID is still the shim's.
            self.ask_to_kill_tree(pgid);
            let _ = tokio::time::timeout(TREE_KILL_WAIT, exited(pgid)).await;
        }
        self.kill();
        self.reap().await;
    }

    async fn reap(&mut self) {
        let Some(child) = self.child.as_mut() else { return };
        if tokio::time::timeout(REAP_GRACE, child.wait()).await.is_err() {
            tracing::warn!(pid = ?child.id(), "killed command not reaped yet, leaving it to the background reaper");
        }
    }
}

impl Drop for ProcessGroup {
    fn drop(&mut self) {
        let Some(pgid) = self.pgid.take() else { return };
        if self.shimmed
            && let Some(mut child) = self.child.take()
            && let Ok(runtime) = tokio::runtime::Handle::try_current()
        {
            // A cancelled probe under the shim: SIGKILLing the group now would kill the shim
            // before it killed what left the group, so it is asked first and the group's
            // SIGKILL waits for it (bounded) in a task that owns the unreaped shim.
            self.ask_to_kill_tree(pgid);
            runtime.spawn(async move {
                let _ = tokio::time::timeout(TREE_KILL_WAIT, exited(pgid)).await;
                signal_group_logged(pgid, Signal::Kill);
                let _ = child.start_kill();
                let _ = tokio::time::timeout(REAP_GRACE, child.wait()).await;
            });
            return;
        }
        // The group first, while the leader (killed and reaped in the background by tokio once
        // `child` drops) still holds its ID.
        signal_group_logged(pgid, Signal::Kill);
        if let Some(child) = self.child.as_mut() {
            let _ = child.start_kill();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A command whose exit cannot be seen before the reap (the look failed) leaves no group ID
    /// for the caller to kill by: the caller's kill after the reap would go to whatever group
    /// now has the ID. Before, `pgid` stayed set and the runner SIGKILLed it after the reap.
    #[tokio::test]
    async fn a_group_whose_leader_could_only_be_reaped_is_left_unsignalled() {
        let mut child = tokio::process::Command::new("sh")
            .args(["-c", "exit 4"])
            .stdin(std::process::Stdio::null())
            .process_group(0)
            .spawn()
            .expect("spawn");
        let mut pgid = child.id();
        assert!(pgid.is_some());
        let failed = |_| async { Err(io::Error::from_raw_os_error(rustix::io::Errno::CHILD.raw_os_error())) };
        let status = leader_exit_with(&mut child, &mut pgid, failed).await.expect("reaped");
        assert_eq!(status.code(), Some(4));
        assert_eq!(pgid, None, "nothing is left to signal by the reaped leader's ID");
    }

    #[test]
    fn a_shim_that_cannot_be_forked_for_want_of_processes_reads_as_the_programs_start_error() {
        let again = io::Error::from_raw_os_error(rustix::io::Errno::AGAIN.raw_os_error());
        assert!(out_of_processes(&again));
        assert!(out_of_processes(&io::Error::from_raw_os_error(rustix::io::Errno::NOMEM.raw_os_error())));
        assert!(!out_of_processes(&io::Error::from(io::ErrorKind::NotFound)));
        let ExecError::Runtime(text) = spawn_failure("sh", "", true, &again) else {
            panic!("a runtime error")
        };
        assert!(text.starts_with(
            "rpc error: code = Unknown desc = failed to exec in container: failed to start exec "
        ));
        assert!(
            text.ends_with(
                ": OCI runtime exec failed: exec failed: unable to start container process: exec: \"sh\": \
                 resource temporarily unavailable: unknown"
            ),
            "{text}"
        );
    }

    #[test]
    fn caps_appended_output() {
        let mut output = Vec::new();
        append_capped(&mut output, &[b'a'; MAX_EXEC_OUTPUT - 1]);
        append_capped(&mut output, b"bcd");
        append_capped(&mut output, b"e");
        assert_eq!(output.len(), MAX_EXEC_OUTPUT);
        assert_eq!(output.last(), Some(&b'b'));
    }

    #[test]
    fn reports_signals_as_a_shell_does() {
        assert_eq!(exit_code(ExitStatus::from_raw(3 << 8)), 3);
        assert_eq!(exit_code(ExitStatus::from_raw(9)), 137);
        assert_eq!(exit_code(ExitStatus::from_raw(15)), 143);
    }
}
