//! Exec probes: static `$(VAR)` expansion of the probe command and the mapping of a command's
//! exit to a probe outcome. Upstream: `pkg/probe/exec` (the executor),
//! `kubecontainer.ExpandContainerCommandOnlyStatic` and `third_party/forked/golang/expansion`
//! (the expansion), and the CRI client's `ExecSync` timeout error text.
//!
//! The command itself runs through the host's [`CommandRunner`]; this module never spawns.

use std::collections::HashMap;
use std::time::Duration;

use k8s_openapi::api::core::v1::EnvVar;

use super::{ProbeError, ProbeOutcome, Probed};
use crate::container::ContainerId;
use crate::contracts::{CommandRunner, ExecError, ExecOutput, MAX_EXEC_OUTPUT};
use crate::gofmt::go_quote;

/// Expands `$(VAR)` references in every element of `command` from the container's env.
///
/// Upstream builds the mapping from every env entry's `value` field as given (later entries with
/// the same name win, values are not themselves expanded). An entry that only has a `valueFrom`
/// therefore maps to the empty string: its source is never resolved, so `$(FROM_SECRET)` becomes
/// `""`, not the secret. A name with no entry at all stays literally `$(NAME)`. `$$` is an
/// escaped `$`; `$(` without a closing `)` and a `$` before any other character stay as written.
pub fn expand_command(command: &[String], env: &[EnvVar]) -> Vec<String> {
    let values = env_values(env);
    command.iter().map(|arg| expand(arg, |name| values.get(name).copied())).collect()
}

/// Each env entry's `value` as given, by name (later entries win; see [`expand_command`]).
fn env_values(env: &[EnvVar]) -> HashMap<&str, &str> {
    env.iter().map(|var| (var.name.as_str(), var.value.as_deref().unwrap_or(""))).collect()
}

/// The longest argument `execve` takes (the kernel's `MAX_ARG_STRLEN`, its NUL included).
pub const MAX_ARG_STRLEN: usize = 32 * 4096;

/// The most bytes of arguments built for one command: above what `execve` takes with any usual
/// stack limit, and a bound on the memory references can make (`$(A)` a million times;
/// docs/reliability.md, "Container start failures").
pub const MAX_ARGS_TOTAL: usize = 16 << 20;

/// [`expand_command`] within what `execve` takes: `None` when an argument would be longer than
/// [`MAX_ARG_STRLEN`] allows, or all of them longer than [`MAX_ARGS_TOTAL`], which the command
/// could not be run with (`argument list too long`); expansion stops there.
pub fn expand_command_within(command: &[String], env: &[EnvVar]) -> Option<Vec<String>> {
    let values = env_values(env);
    let mut total = 0usize;
    let mut expanded = Vec::with_capacity(command.len());
    for arg in command {
        let limit = (MAX_ARG_STRLEN - 1).min(MAX_ARGS_TOTAL.saturating_sub(total));
        let arg = expand_within(arg, |name| values.get(name).copied(), limit)?;
        total += arg.len() + 1;
        expanded.push(arg);
    }
    Some(expanded)
}

/// Upstream `expansion.Expand` with a mapping that leaves unknown names as `$(name)`: each
/// `$(NAME)` becomes `lookup(NAME)` when that is `Some` and stays as written when `None`; `$$`
/// is an escaped `$`; `$(` without a closing `)` and a `$` before any other character stay as
/// written. Shared by exec probe commands ([`expand_command`]) and the standalone host's
/// container env and command.
///
/// Upstream appends the byte after a lone `$` as a rune, which garbles a non-ASCII character
/// there (`$é` becomes invalid UTF-8 that the CRI call then rejects); here the character is kept
/// as written. ASCII input expands byte for byte as upstream.
pub fn expand<'a>(input: &str, lookup: impl Fn(&str) -> Option<&'a str>) -> String {
    let mut out = String::with_capacity(input.len());
    expand_into(input, lookup, &mut out, usize::MAX);
    out
}

/// [`expand`] into `out`, stopping once `out` would pass `limit` bytes: `false` then, with `out`
/// cut short. References can repeat one value without end (`$(A)$(A)…`, each chained on the
/// last), so what a host builds from a user's manifest needs a bound (docs/reliability.md).
pub fn expand_within<'a>(
    input: &str,
    lookup: impl Fn(&str) -> Option<&'a str>,
    limit: usize,
) -> Option<String> {
    let mut out = String::with_capacity(input.len().min(limit));
    expand_into(input, lookup, &mut out, limit).then_some(out)
}

fn expand_into<'a>(
    input: &str,
    lookup: impl Fn(&str) -> Option<&'a str>,
    out: &mut String,
    limit: usize,
) -> bool {
    let bytes = input.as_bytes();
    let fits = |out: &String, more: usize| out.len().checked_add(more).is_some_and(|n| n <= limit);
    let mut checkpoint = 0;
    let mut cursor = 0;
    while cursor < bytes.len() {
        if bytes[cursor] == b'$' && cursor + 1 < bytes.len() {
            if !fits(out, cursor - checkpoint) {
                return false;
            }
            out.push_str(&input[checkpoint..cursor]);
            let rest = &input[cursor + 1..];
            let advance = match rest.as_bytes()[0] {
                b'$' => {
                    out.push('$');
                    1
                }
                b'(' => match rest.find(')') {
                    Some(close) => {
                        let name = &rest[1..close];
                        match lookup(name) {
                            Some(value) if !fits(out, value.len()) => return false,
                            Some(value) => out.push_str(value),
                            None => {
                                out.push_str("$(");
                                out.push_str(name);
                                out.push(')');
                            }
                        }
                        close + 1
                    }
                    None => {
                        out.push_str("$(");
                        1
                    }
                },
                // Not a reference: keep the `$`; the next character is copied with the
                // following literal run.
                _ => {
                    out.push('$');
                    0
                }
            };
            cursor += advance;
            checkpoint = cursor + 1;
        }
        cursor += 1;
    }
    if !fits(out, input.len() - checkpoint) {
        return false;
    }
    out.push_str(&input[checkpoint..]);
    true
}

/// Runs an (already expanded) exec probe command and maps its end to a probe outcome
/// (upstream `execProber.Probe` with the `ExecProbeTimeout` feature on, its default).
///
/// * exit 0 → success, non-zero → failure, both with the combined output (lossy UTF-8, at most
///   [`MAX_EXEC_OUTPUT`] bytes of it);
/// * timeout → failure with the CRI client's text `command "<argv joined by spaces>" timed out`
///   (upstream returns the timeout error's text, not what the command printed);
/// * the runtime could not run it → [`ProbeError::Runtime`];
/// * an empty command or an empty program name → [`ProbeError::InvalidCommand`].
///
/// A runner that has not answered [`RUNTIME_REQUEST_TIMEOUT`] after the probe's own timeout is
/// given up on, as the kubelet's CRI client gives up on `ExecSync` (its deadline is the probe's
/// timeout plus `--runtime-request-timeout`, 2 minutes): a timeout, so a failure. Its future is
/// dropped, which kills what it ran. Without this a runner that never answers (a remote exec
/// whose connection went silent) would hold the probe, and its slot in the exec pool, for good.
pub async fn probe(
    runner: &dyn CommandRunner,
    container_id: &ContainerId,
    command: &[String],
    timeout: Duration,
) -> Result<Probed, ProbeError> {
    validate_command(command)?;
    let run = runner.run_in_container(container_id, command, timeout);
    let result = match tokio::time::timeout(timeout.saturating_add(RUNTIME_REQUEST_TIMEOUT), run).await {
        Ok(result) => result,
        Err(_) => {
            // The CRI client's line, with its keys: the runtime's own ID, the command as klog
            // writes a list (JSON).
            tracing::error!(
                err = "context deadline exceeded", containerID = &*container_id.id,
                cmd = %serde_json::to_string(command).unwrap_or_default(),
                "ExecSync cmd from runtime service failed"
            );
            Err(ExecError::Timeout { output: Vec::new() })
        }
    };
    classify(command, result)
}

/// How much longer than a probe's timeout a [`CommandRunner`] is waited for (the kubelet's
/// default `--runtime-request-timeout`, which its CRI client adds to an `ExecSync`'s timeout).
pub const RUNTIME_REQUEST_TIMEOUT: Duration = Duration::from_secs(120);

fn validate_command(command: &[String]) -> Result<(), ProbeError> {
    match command.first() {
        None => Err(ProbeError::InvalidCommand("exec probe command is empty".to_owned())),
        Some(program) if program.is_empty() => Err(ProbeError::InvalidCommand(
            "exec probe command has an empty program name (argv[0])".to_owned(),
        )),
        Some(_) => Ok(()),
    }
}

/// The pure half of [`probe`]: the runner's answer as a probe outcome.
fn classify(command: &[String], result: Result<ExecOutput, ExecError>) -> Result<Probed, ProbeError> {
    match result {
        Ok(ExecOutput { output, exit_code }) => {
            let outcome = if exit_code == 0 { ProbeOutcome::Success } else { ProbeOutcome::Failure };
            Ok(Probed::new(outcome, output_text(&output)))
        }
        Err(ExecError::Timeout { output }) => {
            tracing::debug!(output = %output_text(&output), "exec probe timed out");
            Ok(Probed::new(ProbeOutcome::Failure, timeout_message(command)))
        }
        Err(ExecError::Runtime(message)) => Err(ProbeError::Runtime(message)),
    }
}

/// The cap applies to the bytes, as upstream's limited writer does; a runner that captured
/// more is cut here too. Invalid UTF-8 (including a character cut by the cap) becomes U+FFFD.
fn output_text(output: &[u8]) -> String {
    let capped = &output[..output.len().min(MAX_EXEC_OUTPUT)];
    String::from_utf8_lossy(capped).into_owned()
}

/// Upstream CRI client: `fmt.Errorf("command %q timed out", strings.Join(cmd, " "))`.
fn timeout_message(command: &[String]) -> String {
    format!("command {} timed out", go_quote(&command.join(" ")))
}

#[cfg(test)]
mod tests {
    use super::*;
    use futures::future::BoxFuture;
    use k8s_openapi::api::core::v1::{EnvVarSource, ObjectFieldSelector};
    use proptest::prelude::*;

    fn literal(name: &str, value: &str) -> EnvVar {
        EnvVar { name: name.into(), value: Some(value.into()), value_from: None }
    }

    fn from_field(name: &str) -> EnvVar {
        EnvVar {
            name: name.into(),
            value: None,
            value_from: Some(EnvVarSource {
                field_ref: Some(ObjectFieldSelector {
                    field_path: "metadata.name".into(),
                    ..Default::default()
                }),
                ..Default::default()
            }),
        }
    }

    fn strings(args: &[&str]) -> Vec<String> {
        args.iter().map(|s| (*s).to_owned()).collect()
    }

    /// A runner that never answers.
    struct Silent;

    impl CommandRunner for Silent {
        fn run_in_container(
            &self,
            _: &ContainerId,
            _: &[String],
            _: Duration,
        ) -> futures::future::BoxFuture<'static, Result<ExecOutput, ExecError>> {
            Box::pin(std::future::pending())
        }
    }

    /// A runner given up on logs the CRI client's line with its keys: `err` first (klog's
    /// `ErrorS`), the runtime's own container ID, the command as klog writes a list.
    #[tokio::test(start_paused = true)]
    async fn a_runner_given_up_on_logs_the_cri_clients_line() {
        let (log, _guard) = crate::test_log::Captured::start();
        let id = ContainerId::parse("containerd://abc");
        let got = probe(&Silent, &id, &strings(&["sh", "-c", "exit 0"]), Duration::from_secs(1)).await;
        assert_eq!(got.map(|p| p.outcome), Ok(ProbeOutcome::Failure));
        let line = "ExecSync cmd from runtime service failed";
        assert_eq!(log.levels_of(line), [tracing::Level::ERROR]);
        assert_eq!(
            log.fields_of(line),
            [r#"err="context deadline exceeded" containerID="abc" cmd=["sh","-c","exit 0"]"#]
        );
    }

    #[test]
    fn a_command_expanded_past_what_execve_takes_is_refused() {
        let env = [literal("A", &"x".repeat(100_000))];
        assert!(expand_command_within(&strings(&["echo", "$(A)"]), &env).is_some());
        assert_eq!(expand_command_within(&strings(&["echo", "$(A)$(A)"]), &env), None, "one too long");
        assert_eq!(expand_command_within(&vec!["$(A)".to_owned(); 200], &env), None, "all too long");
        assert_eq!(expand_command_within(&strings(&[&"$(A)".repeat(1_000_000)]), &env), None);
    }

    #[test]
    fn expansion_within_a_limit_stops_at_it() {
        let lookup = |name: &str| (name == "A").then_some("abcd");
        assert_eq!(expand_within("x$(A)y", lookup, 6).as_deref(), Some("xabcdy"));
        assert_eq!(expand_within("x$(A)y", lookup, 5), None, "the literal tail does not fit");
        assert_eq!(expand_within("x$(A)y", lookup, 4), None, "the value does not fit");
        assert_eq!(expand_within(&"$(A)".repeat(1_000_000), lookup, 100), None);
    }

    #[test]
    fn expands_static_references() {
        let env = vec![
            literal("A", "script"),
            literal("B", "b"),
            from_field("POD"),
            literal("SELF", "$(A)"),
            literal("DUP", "first"),
            literal("DUP", "second"),
            EnvVar { name: "BARE".into(), value: None, value_from: None },
        ];
        let cases: &[(&str, &str, &[EnvVar], &str)] = &[
            ("spec example", "some $(A) $(B)", &env[..1], "some script $(B)"),
            ("no references", "plain text", &env, "plain text"),
            ("adjacent references", "$(A)$(B)", &env, "scriptb"),
            ("reference inside a word", "x$(A)y", &env, "xscripty"),
            ("unknown name stays", "$(NOPE)", &env, "$(NOPE)"),
            ("empty env", "$(A) $(B)", &[], "$(A) $(B)"),
            ("valueFrom maps to empty, never resolved", "[$(POD)]", &env, "[]"),
            ("entry without value maps to empty", "[$(BARE)]", &env, "[]"),
            ("values are not expanded", "$(SELF)", &env, "$(A)"),
            ("later duplicate wins", "$(DUP)", &env, "second"),
            ("escaped operator", "$$(A)", &env, "$(A)"),
            ("double escape", "$$$$", &env, "$$"),
            ("escape then reference", "$$$(A)", &env, "$script"),
            ("unclosed reference", "$(A", &env, "$(A"),
            ("reference name runs to the first closer", "$($(A)", &env, "$($(A)"),
            ("unclosed, scanning resumes after the opener", "$(x $$ $(", &env, "$(x $ $("),
            ("nested opener is part of the name", "$(A$(B))", &env, "$(A$(B))"),
            ("dollar before other char", "$A $ x", &env, "$A $ x"),
            ("trailing dollar", "cost$", &env, "cost$"),
            ("lone dollar", "$", &env, "$"),
            ("empty name", "$()", &env, "$()"),
            ("dollar before non-ascii", "$é$(A)", &env, "$éscript"),
            ("empty string", "", &env, ""),
        ];
        for (name, input, env, want) in cases {
            let got = expand_command(&strings(&[input]), env);
            assert_eq!(got, strings(&[want]), "case {name}");
        }
    }

    #[test]
    fn expands_every_element_and_keeps_an_empty_command_empty() {
        let env = vec![literal("A", "x")];
        assert_eq!(expand_command(&strings(&["$(A)", "-c", "$(A)$(A)"]), &env), strings(&["x", "-c", "xx"]));
        assert!(expand_command(&[], &env).is_empty());
    }

    proptest! {
        #[test]
        fn expansion_never_panics(
            command in proptest::collection::vec("[$()a-zA-Z_é ]{0,12}", 0..4),
            env in proptest::collection::vec(("[A-Z$()]{0,3}", proptest::option::of("[a-z$()]{0,4}")), 0..4),
        ) {
            let env: Vec<EnvVar> =
                env.into_iter().map(|(name, value)| EnvVar { name, value, value_from: None }).collect();
            let expanded = expand_command(&command, &env);
            prop_assert_eq!(expanded.len(), command.len());
        }

        #[test]
        fn text_without_dollar_is_unchanged(arg in "[^$]{0,20}") {
            prop_assert_eq!(expand_command(std::slice::from_ref(&arg), &[literal("A", "x")]), vec![arg]);
        }
    }

    #[test]
    fn quotes_like_go() {
        let cases = [
            ("plain", "sh -c sleep 30", r#""sh -c sleep 30""#),
            ("quotes and backslash", r#"echo "a\b""#, r#""echo \"a\\b\"""#),
            ("named escapes", "\u{7}\u{8}\u{c}\n\r\t\u{b}", r#""\a\b\f\n\r\t\v""#),
            ("other controls", "\u{0}\u{1b}\u{7f}", r#""\x00\x1b\x7f""#),
            ("latin-1", "é\u{a0}\u{ad}", "\"é\\u00a0\\u00ad\""),
            ("unicode", "日本 \u{200b}\u{2028}\u{feff}", "\"日本 \\u200b\\u2028\\ufeff\""),
            ("astral", "😀\u{e0001}\u{f0000}", "\"😀\\U000e0001\\U000f0000\""),
        ];
        for (name, input, want) in cases {
            assert_eq!(go_quote(input), want, "case {name}");
        }
    }

    #[test]
    fn maps_runner_answers_to_outcomes() {
        let command = strings(&["sh", "-c", "echo \"hi\""]);
        type Case = (&'static str, Result<ExecOutput, ExecError>, Result<Probed, ProbeError>);
        let cases: Vec<Case> = vec![
            (
                "exit 0",
                Ok(ExecOutput { output: b"ok\n".to_vec(), exit_code: 0 }),
                Ok(Probed::new(ProbeOutcome::Success, "ok\n")),
            ),
            (
                "exit 3",
                Ok(ExecOutput { output: b"bad".to_vec(), exit_code: 3 }),
                Ok(Probed::new(ProbeOutcome::Failure, "bad")),
            ),
            (
                "killed by a signal",
                Ok(ExecOutput { output: Vec::new(), exit_code: 137 }),
                Ok(Probed::new(ProbeOutcome::Failure, "")),
            ),
            (
                "timeout drops what was printed",
                Err(ExecError::Timeout { output: b"partial".to_vec() }),
                Ok(Probed::new(ProbeOutcome::Failure, r#"command "sh -c echo \"hi\"" timed out"#)),
            ),
            (
                "runtime error",
                Err(ExecError::Runtime("no such container".into())),
                Err(ProbeError::Runtime("no such container".into())),
            ),
            (
                "invalid utf-8",
                Ok(ExecOutput { output: vec![b'a', 0xFF, b'b'], exit_code: 0 }),
                Ok(Probed::new(ProbeOutcome::Success, "a\u{FFFD}b")),
            ),
        ];
        for (name, answer, want) in cases {
            assert_eq!(classify(&command, answer), want, "case {name}");
        }
    }

    #[test]
    fn caps_output_from_a_runner_that_did_not() {
        let answer = Ok(ExecOutput { output: vec![b'x'; MAX_EXEC_OUTPUT + 100], exit_code: 0 });
        let probed = classify(&strings(&["x"]), answer).expect("a capped success");
        assert_eq!(probed.output.len(), MAX_EXEC_OUTPUT);
    }

    /// Answers every command with exit 0 and its argv, to see what reached the runner.
    struct EchoRunner;

    impl CommandRunner for EchoRunner {
        fn run_in_container(
            &self,
            _container_id: &ContainerId,
            cmd: &[String],
            _timeout: Duration,
        ) -> BoxFuture<'static, Result<ExecOutput, ExecError>> {
            let output = cmd.join("|").into_bytes();
            Box::pin(async move { Ok(ExecOutput { output, exit_code: 0 }) })
        }
    }

    /// Never answers, as a remote exec whose connection went silent.
    struct SilentRunner;

    impl CommandRunner for SilentRunner {
        fn run_in_container(
            &self,
            _container_id: &ContainerId,
            _cmd: &[String],
            _timeout: Duration,
        ) -> BoxFuture<'static, Result<ExecOutput, ExecError>> {
            Box::pin(futures::future::pending())
        }
    }

    #[tokio::test(start_paused = true)]
    async fn a_runner_that_never_answers_is_a_timeout_after_the_runtime_request_timeout() {
        let id = ContainerId::new("probelet", "c1");
        let started = tokio::time::Instant::now();
        let probed = probe(&SilentRunner, &id, &strings(&["check"]), Duration::from_secs(1)).await;
        assert_eq!(probed, Ok(Probed::new(ProbeOutcome::Failure, r#"command "check" timed out"#)));
        assert_eq!(started.elapsed(), Duration::from_secs(121), "the probe's 1 s and the 2 minutes");
    }

    #[tokio::test]
    async fn rejects_empty_commands_before_running_them() {
        let id = ContainerId::new("probelet", "c1");
        for (name, command) in [("no argv", strings(&[])), ("empty argv[0]", strings(&["", "x"]))] {
            let err = probe(&EchoRunner, &id, &command, Duration::from_secs(1)).await.expect_err(name);
            assert!(matches!(err, ProbeError::InvalidCommand(_)), "case {name}: {err:?}");
            assert_eq!(err.outcome(), ProbeOutcome::Unknown, "case {name}");
        }
        let ok = probe(&EchoRunner, &id, &strings(&["true", "a b"]), Duration::from_secs(1)).await;
        assert_eq!(ok, Ok(Probed::new(ProbeOutcome::Success, "true|a b")));
    }
}
