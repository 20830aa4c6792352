//! Starting a container's process: its argv and environment as the kubelet builds them, the
//! spawn in its own process group (under the container shim when the runtime has one), start
//! errors in the runtime's words, and its output.

use std::collections::hash_map::RandomState;
use std::hash::{BuildHasher, Hasher};
use std::io;
use std::os::fd::OwnedFd;
use std::os::unix::net::UnixStream;
use std::os::unix::process::ExitStatusExt;
use std::path::{Path, PathBuf};
use std::process::{ExitStatus, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};

use k8s_openapi::api::core::v1::Container;
use probelet_actors::gofmt::go_quote;
use probelet_actors::shim::{runc_start_error as spawn_error_text, shim_args};
use probelet_actors::spawned;
use tokio::io::{AsyncBufReadExt, AsyncRead, BufReader};
use tokio::process::{Child, Command};

use crate::container::ContainerId;
use crate::prober::exec::expand;

use super::{RUNTIME_NAME, SELF_COMMAND};

/// Longer output lines are logged in pieces of this size, so a process printing without
/// newlines cannot grow the agent's memory.
const MAX_LOG_LINE: usize = 16 * 1024;

/// What a container's process is started with.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct Launch {
    pub(super) argv: Vec<String>,
    pub(super) env: Vec<(String, String)>,
    pub(super) working_dir: Option<PathBuf>,
    /// Variables left out because they come from `valueFrom`.
    pub(super) skipped: Vec<String>,
}

impl Launch {
    /// Upstream `makeEnvironmentVariables` (literal values, each expanded against the ones
    /// before it) and `ExpandContainerCommandAndArgs`. With no image there is no entrypoint:
    /// the process is `command` followed by `args`.
    pub(super) fn of(container: &Container) -> Self {
        let mut env: Vec<(String, String)> = Vec::new();
        let mut skipped = Vec::new();
        for var in container.env.iter().flatten() {
            if var.value_from.is_some() {
                skipped.push(var.name.clone());
                continue;
            }
            let value = expand(var.value.as_deref().unwrap_or_default(), |name| lookup(&env, name));
            env.push((var.name.clone(), value));
        }
        let argv = container
            .command
            .iter()
            .flatten()
            .chain(container.args.iter().flatten())
            .map(|arg| expand(arg, |name| lookup(&env, name)))
            .collect();
        let working_dir = container.working_dir.as_deref().filter(|d| !d.is_empty()).map(PathBuf::from);
        Launch { argv, env, working_dir, skipped }
    }

    /// Spawns the process in its own group; the error is the text the status and event show.
    /// With `shim`, the process spawned is the shim (`shim container-shim --wait-for-go --
    /// PROGRAM ARGS`), the group's leader, and its standard input is returned as the control
    /// socket: nothing runs until the go byte is written on it, and the shim's report on it says
    /// whether PROGRAM started.
    pub(super) fn spawn(&self, shim: Option<&Path>) -> Result<Spawned, String> {
        let Some((program, args)) = self.argv.split_first() else {
            return Err("no command specified".to_owned());
        };
        let executable = if program == SELF_COMMAND {
            std::env::current_exe().map_err(|e| start_error(&format!("exec: {}: {e}", go_quote(program))))?
        } else {
            PathBuf::from(program)
        };
        let (mut command, control) = match shim {
            Some(shim) => {
                let (ours, theirs) =
                    UnixStream::pair().map_err(|e| start_error(&spawn_error_text(program, &e)))?;
                let mut command = Command::new(shim);
                command
                    .args(shim_args(true, None, &executable, args))
                    .stdin(Stdio::from(OwnedFd::from(theirs)));
                (command, Some(ours))
            }
            None => {
                let mut command = Command::new(&executable);
                command.args(args).stdin(Stdio::null());
                (command, None)
            }
        };
        command
            .envs(self.env.iter().map(|(name, value)| (name, value)))
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .kill_on_drop(true)
            .process_group(0);
        if let Some(dir) = &self.working_dir {
            // Checked first: spawn reports a missing directory as a missing executable.
            check_working_dir(dir).map_err(|e| start_error(&e))?;
            command.current_dir(dir);
        }
        // `command` holds the shim's end of the socket and is dropped on return, so that the
        // agent's end sees the end of file if the shim dies before it reports.
        // Recorded, so that the orphan sweep tells it from a container's orphan (orphans.rs).
        let child = spawned::spawn(&mut command).map_err(|e| start_error(&spawn_error_text(program, &e)))?;
        Ok(Spawned { child, control })
    }
}

/// A spawned container process: the command itself, or the shim with its control socket.
pub(super) struct Spawned {
    pub(super) child: Child,
    /// The agent's end of the shim's standard input; `None` without a shim.
    pub(super) control: Option<UnixStream>,
}

/// The start error of a program the shim could not start: the same text a direct spawn gives.
pub(super) fn shim_start_error(program: &str, e: &io::Error) -> String {
    start_error(&spawn_error_text(program, e))
}

/// containerd's wording for a task that could not start, around runc's error (containerd 1.7
/// and 2.x over runc 1.1 and later): what the `Failed` event and the container's status show.
pub(super) fn start_error(runc: &str) -> String {
    format!(
        "failed to create containerd task: failed to create shim task: OCI runtime create failed: runc create \
         failed: unable to start container process: error during container init: {runc}: unknown"
    )
}

/// The last value of `name` defined so far (a later definition overrides an earlier one).
pub(super) fn lookup<'a>(env: &'a [(String, String)], name: &str) -> Option<&'a str> {
    env.iter().rev().find(|(n, _)| n == name).map(|(_, v)| v.as_str())
}

pub(super) fn check_working_dir(dir: &Path) -> Result<(), String> {
    let problem = match std::fs::metadata(dir) {
        Ok(meta) if meta.is_dir() => return Ok(()),
        Ok(_) => "not a directory".to_owned(),
        Err(e) if e.kind() == io::ErrorKind::NotFound => "no such file or directory".to_owned(),
        Err(e) => e.to_string(),
    };
    Err(format!("chdir to cwd ({}) set in config.json failed: {problem}", go_quote(&dir.to_string_lossy())))
}

/// A fresh `probelet://<16 hex digits>` container ID.
pub(super) fn new_container_id() -> ContainerId {
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    // `RandomState` is seeded randomly, so IDs differ across agent runs as well.
    let mut hasher = RandomState::new().build_hasher();
    hasher.write_u64(COUNTER.fetch_add(1, Ordering::Relaxed));
    hasher.write_u32(std::process::id());
    ContainerId::new(RUNTIME_NAME, format!("{:016x}", hasher.finish()))
}

/// The exit code as a shell reports it: 128 + the signal for a killed process.
pub(super) fn exit_code(status: ExitStatus) -> i32 {
    status.code().or_else(|| status.signal().map(|signal| 128 + signal)).unwrap_or(-1)
}

/// Logs a process's output line by line as it comes, so the pipe never fills up.
pub(super) async fn forward_output(pipe: impl AsyncRead + Unpin, pod: String, container: String) {
    let mut reader = BufReader::with_capacity(MAX_LOG_LINE, pipe);
    let mut line = Vec::new();
    let mut budget = LogBudget::new(tokio::time::Instant::now());
    let mut log = |line: &[u8]| {
        let now = tokio::time::Instant::now();
        if budget.admit(line.len(), now) {
            log_line(&pod, &container, line);
        }
        if let Some(dropped) = budget.report(now) {
            log_dropped(&pod, &container, dropped);
        }
    };
    loop {
        let (taken, complete) = match reader.fill_buf().await {
            Ok(buf) if !buf.is_empty() => {
                let (taken, complete) = match buf.iter().position(|&b| b == b'\n') {
                    Some(at) => (at + 1, true),
                    None => (buf.len(), false),
                };
                line.extend_from_slice(&buf[..taken]);
                (taken, complete)
            }
            _ => break,
        };
        reader.consume(taken);
        if complete || line.len() >= MAX_LOG_LINE {
            log(&line);
            line.clear();
        }
    }
    if !line.is_empty() {
        log(&line);
    }
    if let Some(dropped) = budget.report_all() {
        log_dropped(&pod, &container, dropped);
    }
}

fn log_dropped(pod: &str, container: &str, lines: u64) {
    tracing::warn!(
        pod,
        container,
        lines,
        "container output over {} KiB/s: lines not logged",
        LOG_BYTES_PER_SECOND / 1024
    );
}

/// Output logged per second and container stream, in bytes. The kubelet's container logs go to
/// files of their own (10 MiB, 5 rotated); here they go to the agent's log, so a container
/// printing as fast as it can (1.3 GB in 12 s) would fill that log and take the agent's CPU.
/// Beyond this rate lines are read and dropped, and how many is logged once a second.
pub(super) const LOG_BYTES_PER_SECOND: u64 = 64 * 1024;

/// What a logged line costs beyond its own bytes: the record around it (time, level, target,
/// pod and container), so that empty lines are not free.
pub(super) const LOG_LINE_COST: u64 = 128;

/// A stream's [`LOG_BYTES_PER_SECOND`]: a bucket of that many bytes, refilled continuously.
#[derive(Debug)]
struct LogBudget {
    allowance: u64,
    refilled: tokio::time::Instant,
    dropped: u64,
    reported: tokio::time::Instant,
}

impl LogBudget {
    fn new(now: tokio::time::Instant) -> Self {
        LogBudget { allowance: LOG_BYTES_PER_SECOND, refilled: now, dropped: 0, reported: now }
    }

    /// Whether a line of `len` bytes is logged now; one that is not is counted. A line costs
    /// its bytes and [`LOG_LINE_COST`] more: each is a whole record in the log.
    fn admit(&mut self, len: usize, now: tokio::time::Instant) -> bool {
        let nanos = now.saturating_duration_since(self.refilled).as_nanos();
        let rate = u128::from(LOG_BYTES_PER_SECOND);
        let refill = nanos.saturating_mul(rate) / 1_000_000_000;
        if refill > 0 {
            let refill_bytes = u64::try_from(refill).unwrap_or(u64::MAX);
            self.allowance = self.allowance.saturating_add(refill_bytes).min(LOG_BYTES_PER_SECOND);
            // Forward by the time the whole bytes credited took (rounded up, never past now),
            // not to now: the fraction of a byte left over is kept for the next refill.
            let credited = (refill * 1_000_000_000).div_ceil(rate);
            self.refilled += std::time::Duration::from_nanos(u64::try_from(credited).unwrap_or(u64::MAX));
        }
        let len = (len as u64).saturating_add(LOG_LINE_COST);
        if len <= self.allowance {
            self.allowance -= len;
            return true;
        }
        self.dropped += 1;
        false
    }

    /// The lines dropped since the last report, at most once a second.
    fn report(&mut self, now: tokio::time::Instant) -> Option<u64> {
        if self.dropped == 0
            || now.saturating_duration_since(self.reported) < std::time::Duration::from_secs(1)
        {
            return None;
        }
        self.reported = now;
        self.report_all()
    }

    /// The lines dropped since the last report, whenever: at the end of the stream.
    fn report_all(&mut self) -> Option<u64> {
        (self.dropped > 0).then(|| std::mem::take(&mut self.dropped))
    }
}

pub(super) fn log_line(pod: &str, container: &str, line: &[u8]) {
    let text = String::from_utf8_lossy(line);
    let text = text.strip_suffix('\n').unwrap_or(&text);
    let text = text.strip_suffix('\r').unwrap_or(text);
    tracing::info!(pod, container, "{text}");
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::{EnvVar, EnvVarSource, ObjectFieldSelector};

    /// A container printing flat out gets its rate's worth of lines logged, the rest counted
    /// and told once a second; a quiet one loses nothing.
    #[test]
    fn output_beyond_the_rate_is_counted_not_logged() {
        let start = tokio::time::Instant::now();
        let mut budget = LogBudget::new(start);
        let line = 1024 - LOG_LINE_COST as usize;
        let logged = (0..1000).filter(|_| budget.admit(line, start)).count() as u64;
        assert_eq!(logged, LOG_BYTES_PER_SECOND / 1024, "a second's worth at once, records included");
        assert_eq!(budget.report(start), None, "told at most once a second");
        let later = start + std::time::Duration::from_millis(1500);
        assert!(budget.admit(line, later), "refilled meanwhile");
        assert_eq!(budget.report(later), Some(1000 - logged));
        assert_eq!(budget.report_all(), None);

        // Empty lines cost their records: no more of them than records fit.
        let mut empty = LogBudget::new(start);
        let logged = (0..10_000).filter(|_| empty.admit(1, start)).count() as u64;
        assert_eq!(logged, LOG_BYTES_PER_SECOND / (1 + LOG_LINE_COST));

        // Lines 20 µs apart get the whole rate over 10 s, fractions of a byte included: the
        // first second's bucket and ten seconds of refill, less at most one line.
        let mut steady = LogBudget::new(start);
        let mut bytes = 0u64;
        for step in 0..500_000u64 {
            let now = start + std::time::Duration::from_micros(step * 20);
            if steady.admit(100, now) {
                bytes += 100 + LOG_LINE_COST;
            }
        }
        let most = LOG_BYTES_PER_SECOND * 11;
        assert!(
            bytes <= most && bytes + 2 * (100 + LOG_LINE_COST) >= most,
            "{bytes} of {most} bytes in 10 s"
        );

        let mut quiet = LogBudget::new(start);
        for second in 0..100 {
            let now = start + std::time::Duration::from_secs(second);
            assert!((0..10).all(|_| quiet.admit(100, now)), "10 short lines a second all logged");
        }
        assert_eq!(quiet.report_all(), None);
    }

    #[test]
    fn expands_like_upstream() {
        let env = vec![("A".to_owned(), "a".to_owned()), ("B".to_owned(), "b".to_owned())];
        let cases = [
            ("$(A)", "a"),
            ("x$(A)y$(B)z", "xaybz"),
            ("$(MISSING)", "$(MISSING)"),
            ("$$(A)", "$(A)"),
            ("$$", "$"),
            ("$", "$"),
            ("a$", "a$"),
            ("$A", "$A"),
            ("$(A", "$(A"),
            ("$()", "$()"),
            ("$é$(A)", "$éa"),
            ("no refs", "no refs"),
        ];
        for (input, want) in cases {
            assert_eq!(expand(input, |name| lookup(&env, name)), want, "{input:?}");
        }
    }

    #[test]
    fn launch_uses_literal_env_expanded_in_order() {
        let var = |name: &str, value: &str| EnvVar {
            name: name.into(),
            value: Some(value.into()),
            ..Default::default()
        };
        let container = Container {
            name: "app".into(),
            command: Some(vec!["sh".into(), "-c".into()]),
            args: Some(vec!["echo $(FOO) $(LATER) $HOME".into()]),
            env: Some(vec![
                var("FOO", "foo"),
                var("BAR", "$(FOO)-bar-$(LATER)"),
                EnvVar {
                    name: "NODE".into(),
                    value_from: Some(EnvVarSource {
                        field_ref: Some(ObjectFieldSelector {
                            field_path: "spec.nodeName".into(),
                            ..Default::default()
                        }),
                        ..Default::default()
                    }),
                    ..Default::default()
                },
                var("LATER", "later"),
            ]),
            working_dir: Some("/tmp".into()),
            ..Default::default()
        };
        let launch = Launch::of(&container);
        assert_eq!(launch.argv, ["sh", "-c", "echo foo later $HOME"]);
        assert_eq!(
            launch.env,
            [("FOO", "foo"), ("BAR", "foo-bar-$(LATER)"), ("LATER", "later")]
                .map(|(n, v)| (n.to_owned(), v.to_owned()))
        );
        assert_eq!(launch.skipped, ["NODE"]);
        assert_eq!(launch.working_dir, Some(PathBuf::from("/tmp")));
    }

    #[test]
    fn start_errors_read_like_runc() {
        let not_found = io::Error::from(io::ErrorKind::NotFound);
        assert_eq!(
            spawn_error_text("nope", &not_found),
            r#"exec: "nope": executable file not found in $PATH"#
        );
        assert_eq!(
            spawn_error_text("/x/nope", &not_found),
            r#"exec: "/x/nope": stat /x/nope: no such file or directory"#
        );
        let denied = io::Error::from(io::ErrorKind::PermissionDenied);
        assert_eq!(spawn_error_text("/etc/passwd", &denied), r#"exec: "/etc/passwd": permission denied"#);
        assert_eq!(
            check_working_dir(Path::new("/no/such/dir")),
            Err(r#"chdir to cwd ("/no/such/dir") set in config.json failed: no such file or directory"#
                .to_owned())
        );
        assert_eq!(
            Launch::of(&Container::default()).spawn(None).err().as_deref(),
            Some("no command specified")
        );
        let missing = Container { command: Some(vec!["/x/nope".into()]), ..Default::default() };
        assert_eq!(
            Launch::of(&missing).spawn(None).err().as_deref(),
            Some(
                "failed to create containerd task: failed to create shim task: OCI runtime create failed: \
                 runc create failed: unable to start container process: error during container init: \
                 exec: \"/x/nope\": stat /x/nope: no such file or directory: unknown"
            )
        );
    }

    #[test]
    fn container_ids_are_fresh_and_typed() {
        let (a, b) = (new_container_id(), new_container_id());
        assert_ne!(a, b);
        assert_eq!(&*a.runtime, "probelet");
        assert_eq!(a.id.len(), 16);
        assert!(a.id.chars().all(|c| c.is_ascii_hexdigit()));
    }

    #[test]
    fn reports_signals_as_a_shell_does() {
        assert_eq!(exit_code(ExitStatus::from_raw(3 << 8)), 3);
        assert_eq!(exit_code(ExitStatus::from_raw(9)), 137);
        assert_eq!(exit_code(ExitStatus::from_raw(15)), 143);
    }
}
