//! Signalling local process groups without `unsafe`: the one place that stops a local command
//! together with everything it started, for the exec probes' [`crate::local_runner`] and the
//! standalone host's process runtime. Upstream has no counterpart of its own: a container
//! runtime kills a container's PID namespace (runc's `kill`), which a process group stands in
//! for here.
//!
//! std and tokio can only signal a single process, and the workspace forbids `unsafe` (so no
//! `libc::kill`): a group is signalled by running `kill -<SIG> -- -<pgid>`, falling back to the
//! shell's builtin where there is no `kill` executable.

use std::process::Stdio;

use tokio::process::Command;

/// The signals sent to a process group.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Signal {
    /// SIGTERM: asks the processes to stop.
    Term,
    /// SIGKILL: stops them at once.
    Kill,
}

impl Signal {
    /// The name `kill` takes, without the `SIG` prefix.
    pub fn name(self) -> &'static str {
        match self {
            Signal::Term => "TERM",
            Signal::Kill => "KILL",
        }
    }
}

/// Sends `signal` to every process of group `pgid`. A failing `kill` means the group is already
/// gone, so only being unable to run `kill` at all is logged.
pub async fn signal_group(pgid: u32, signal: Signal) {
    let mut last_error = None;
    for (program, args) in kill_commands(pgid, signal) {
        let status = Command::new(program)
            .args(&args)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()
            .await;
        match status {
            Ok(_) => return,
            Err(e) => last_error = Some(e),
        }
    }
    tracing::error!(pgid, signal = signal.name(), error = ?last_error, "cannot run kill to signal a process group");
}

/// [`signal_group`] for `Drop`, which cannot await: `kill` is short-lived, so waiting for it is
/// brief.
pub fn signal_group_blocking(pgid: u32, signal: Signal) {
    let mut last_error = None;
    for (program, args) in kill_commands(pgid, signal) {
        let status = std::process::Command::new(program)
            .args(&args)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status();
        match status {
            Ok(_) => return,
            Err(e) => last_error = Some(e),
        }
    }
    tracing::error!(pgid, signal = signal.name(), error = ?last_error, "cannot run kill to signal a process group");
}

/// `kill` from PATH, or the shell's builtin where there is no `kill` executable.
fn kill_commands(pgid: u32, signal: Signal) -> [(&'static str, Vec<String>); 2] {
    let (signal, target) = (format!("-{}", signal.name()), format!("-{pgid}"));
    [
        ("kill", vec![signal.clone(), "--".to_owned(), target.clone()]),
        ("sh", vec!["-c".to_owned(), format!("kill {signal} -- {target}")]),
    ]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kills_the_group_not_the_process() {
        let [(program, args), (shell, shell_args)] = kill_commands(42, Signal::Kill);
        assert_eq!((program, args.as_slice()), ("kill", ["-KILL", "--", "-42"].map(String::from).as_slice()));
        assert_eq!(
            (shell, shell_args.as_slice()),
            ("sh", ["-c", "kill -KILL -- -42"].map(String::from).as_slice())
        );
    }

    #[test]
    fn signals_the_group_not_the_process() {
        let [(program, args), (shell, shell_args)] = kill_commands(42, Signal::Term);
        assert_eq!((program, args.as_slice()), ("kill", ["-TERM", "--", "-42"].map(String::from).as_slice()));
        assert_eq!(
            (shell, shell_args.as_slice()),
            ("sh", ["-c", "kill -TERM -- -42"].map(String::from).as_slice())
        );
    }
}
