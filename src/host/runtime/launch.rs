//! Starting a container's process: its argv and environment as the kubelet builds them, the
//! spawn in its own process group (under the container shim when the runtime has one), start
//! errors in the runtime's words. Its output is [`super::output`]'s.

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
use tokio::process::{Child, Command};

use crate::container::ContainerId;
use crate::prober::exec::{MAX_ARG_STRLEN, MAX_ARGS_TOTAL, expand_within};

use super::{RUNTIME_NAME, SELF_COMMAND};

/// What a container's process is started with.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct Launch {
    pub(super) argv: Vec<String>,
    pub(super) env: Vec<(String, String)>,
    pub(super) working_dir: Option<PathBuf>,
    /// Variables left out because they come from `valueFrom`.
    pub(super) skipped: Vec<String>,
    /// An argument or variable expanded past what `execve` takes ([`MAX_ARG_STRLEN`]), or all
    /// of them past [`MAX_ARGS_TOTAL`]: expansion stopped there, and the start fails as the
    /// kernel would fail it (`argument list too long`).
    pub(super) too_long: bool,
}

impl Launch {
    /// Upstream `makeEnvironmentVariables` (literal values, each expanded against the ones
    /// before it) and `ExpandContainerCommandAndArgs`. With no image there is no entrypoint:
    /// the process is `command` followed by `args`.
    pub(super) fn of(container: &Container) -> Self {
        let mut env: Vec<(String, String)> = Vec::new();
        let mut skipped = Vec::new();
        let mut total = 0usize;
        let mut too_long = false;
        // Each string within the kernel's limit, all of them within the total.
        let mut within = |input: &str, taken: usize, env: &[(String, String)]| {
            let limit = (MAX_ARG_STRLEN - 1).saturating_sub(taken).min(MAX_ARGS_TOTAL.saturating_sub(total));
            match expand_within(input, |name| lookup(env, name), limit) {
                Some(value) => {
                    total += taken + value.len() + 1;
                    Some(value)
                }
                None => {
                    too_long = true;
                    None
                }
            }
        };
        for var in container.env.iter().flatten() {
            if var.value_from.is_some() {
                skipped.push(var.name.clone());
                continue;
            }
            // `NAME=value`.
            let Some(value) = within(var.value.as_deref().unwrap_or_default(), var.name.len() + 1, &env)
            else {
                break;
            };
            env.push((var.name.clone(), value));
        }
        let mut argv = Vec::new();
        for arg in container.command.iter().flatten().chain(container.args.iter().flatten()) {
            let Some(arg) = within(arg, 0, &env) else { break };
            argv.push(arg);
        }
        let working_dir = container.working_dir.as_deref().filter(|d| !d.is_empty()).map(PathBuf::from);
        Launch { argv, env, working_dir, skipped, too_long }
    }

    /// Spawns the process in its own group; the error is the text the status and event show.
    /// With `shim`, the process spawned is the shim (`shim container-shim --wait-for-go --
    /// PROGRAM ARGS`), the group's leader, and its standard input is returned as the control
    /// socket: nothing runs until the go byte is written on it, and the shim's report on it says
    /// whether PROGRAM started.
    pub(super) fn spawn(&self, shim: Option<&Path>) -> Result<Spawned, String> {
        if self.too_long {
            let program = self.argv.first().map_or("", String::as_str);
            let e2big = io::Error::from_raw_os_error(rustix::io::Errno::TOOBIG.raw_os_error());
            return Err(start_error(&spawn_error_text(program, &e2big)));
        }
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::prober::exec::expand;
    use k8s_openapi::api::core::v1::{EnvVar, EnvVarSource, ObjectFieldSelector};

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
    fn references_that_expand_past_what_execve_takes_fail_the_start_without_building_it() {
        let var = |name: &str, value: String| EnvVar {
            name: name.into(),
            value: Some(value),
            ..Default::default()
        };
        let container = |env: Vec<EnvVar>, args: Vec<String>| Container {
            command: Some(vec!["sh".into()]),
            args: Some(args),
            env: Some(env),
            ..Default::default()
        };
        // 100,000 bytes referenced 50,000 times would be 5 GB.
        let bomb = container(vec![var("A", "x".repeat(100_000)), var("B", "$(A)".repeat(50_000))], vec![]);
        // One string past the kernel's 128 KiB, and many strings past the total.
        let long_arg = container(vec![var("A", "x".repeat(100_000))], vec!["$(A)$(A)".into()]);
        let many = container(vec![var("A", "x".repeat(100_000))], vec!["$(A)".into(); 200]);
        for (case, container) in [("bomb", bomb), ("one long argument", long_arg), ("many arguments", many)] {
            let launch = Launch::of(&container);
            assert!(launch.too_long, "{case}");
            let built: usize =
                launch.argv.iter().chain(launch.env.iter().map(|(_, v)| v)).map(String::len).sum();
            assert!(built <= MAX_ARGS_TOTAL, "{case}: {built} bytes built");
            let error = launch.spawn(None).err().unwrap_or_default();
            assert!(error.contains(r#"exec: "sh": argument list too long"#), "{case}: {error}");
        }
        let fits = container(vec![var("A", "x".repeat(100_000))], vec!["$(A)".into(); 10]);
        assert!(!Launch::of(&fits).too_long, "10 × 100 kB is within what execve takes");
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
        // No process left to fork (a pids cgroup or RLIMIT_NPROC full): Go's errno text, as
        // runc prints it, not Rust's `Resource temporarily unavailable (os error 11)`.
        let again = io::Error::from_raw_os_error(rustix::io::Errno::AGAIN.raw_os_error());
        assert_eq!(
            spawn_error_text("probelet", &again),
            r#"exec: "probelet": resource temporarily unavailable"#
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
