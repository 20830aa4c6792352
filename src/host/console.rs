//! What the standalone agent prints on standard output: one line per status transition, per
//! pod added, removed or killed, and per manifest that cannot be used. Each line is printed once,
//! when it happens; the events behind it (`Created`, `Started`, `Unhealthy`, ...) are logged at
//! debug level (`-v` or `RUST_LOG`) so a person reads each thing once.
//!
//! Colour only on a terminal, and never when `NO_COLOR` is set to a non-empty value
//! (<https://no-color.org>). The same rule decides colour on standard error (the log).

use std::ffi::OsString;
use std::io::IsTerminal;
use std::sync::OnceLock;

use super::history::format_time;

/// How a line reads: what it tells the operator.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Tone {
    /// A fact to note (pod added, phase, container running).
    Plain,
    /// Something became ready.
    Good,
    /// Something is not ready or was skipped: worth a look.
    Warn,
    /// Something failed and is being acted on (a kill after a failed probe).
    Bad,
}

/// Colour is wanted when the stream is a terminal and `NO_COLOR` is unset or empty.
pub fn colour_wanted(is_terminal: bool, no_color: Option<OsString>) -> bool {
    is_terminal && no_color.is_none_or(|v| v.is_empty())
}

/// Whether standard output gets colour (decided once).
fn stdout_colour() -> bool {
    static COLOUR: OnceLock<bool> = OnceLock::new();
    *COLOUR.get_or_init(|| colour_wanted(std::io::stdout().is_terminal(), std::env::var_os("NO_COLOR")))
}

/// `text` in the tone's colour (ANSI SGR), or as is without colour.
pub fn paint(tone: Tone, text: &str, colour: bool) -> String {
    let code = match tone {
        _ if !colour => return text.to_owned(),
        Tone::Plain => return text.to_owned(),
        Tone::Good => "32",
        Tone::Warn => "33",
        Tone::Bad => "31",
    };
    format!("\x1b[{code}m{text}\x1b[0m")
}

/// The tone of a status transition line from [`super::transitions::describe_changes`].
pub fn tone_of_transition(line: &str) -> Tone {
    let not_ready = line.ends_with(" not ready");
    if line == "Ready=True" || (line.ends_with(" ready") && !not_ready) {
        Tone::Good
    } else if line.starts_with("Ready=False")
        || line.ends_with(" not ready")
        || line.contains("terminated (")
        || line.contains(" restarted (")
    {
        Tone::Warn
    } else {
        Tone::Plain
    }
}

/// Prints one console line: the time, then the text in its tone.
pub fn print(tone: Tone, text: &str) {
    // What a person reads beside the line is the real time, not a test's clock.
    #[allow(clippy::disallowed_methods)]
    let now = format_time(k8s_openapi::jiff::Timestamp::now());
    // File names and container output come from users: one line each, in its own colour.
    let text = crate::logging::escape_controls(text);
    say(format_args!("{now} {}", paint(tone, &text, stdout_colour())));
}

/// Writes one line to standard output, or nothing if it cannot be written. The terminal that
/// ran the agent may be gone (after a hang-up every write fails with `EIO`) or its reader may
/// have left (`EPIPE`): `println!` would panic there and end the agent in the middle of its
/// shutdown, leaving its containers running.
/// Written through the output's queue once the agent started it, so that a reader that stops
/// reading never blocks the agent either (docs/reliability.md, "A log reader that stops reading").
pub fn say(line: std::fmt::Arguments<'_>) {
    crate::logging::queue::write(crate::logging::queue::Stream::Stdout, format!("{line}\n").as_bytes());
}

/// [`say`] for the agent's last line before it exits (a forced stop's): it is queued past a
/// queue full of other lines, in the room kept for last words (`logging::queue::write_reserved`).
pub fn say_last(line: std::fmt::Arguments<'_>) {
    crate::logging::queue::write_reserved(
        crate::logging::queue::Stream::Stdout,
        format!("{line}\n").as_bytes(),
    );
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn colour_only_on_a_terminal_without_no_color() {
        assert!(colour_wanted(true, None));
        assert!(colour_wanted(true, Some(OsString::new())), "an empty NO_COLOR does not count");
        assert!(!colour_wanted(true, Some("1".into())));
        assert!(!colour_wanted(false, None));
    }

    #[test]
    fn a_line_cannot_be_broken_or_recoloured_by_what_it_prints() {
        let name = "a\u{1b}[31mRED\nfake line.yaml";
        assert_eq!(crate::logging::escape_controls(name), "a\\u{1b}[31mRED\\nfake line.yaml");
        assert_eq!(crate::logging::escape_controls("plain é"), "plain é");
    }

    #[test]
    fn paint_wraps_in_sgr_only_with_colour() {
        assert_eq!(paint(Tone::Good, "Ready=True", true), "\x1b[32mReady=True\x1b[0m");
        assert_eq!(paint(Tone::Bad, "killed", true), "\x1b[31mkilled\x1b[0m");
        assert_eq!(paint(Tone::Good, "Ready=True", false), "Ready=True");
        assert_eq!(paint(Tone::Plain, "phase Running", true), "phase Running");
    }

    #[test]
    fn transitions_read_by_what_they_say() {
        assert_eq!(tone_of_transition("Ready=True"), Tone::Good);
        assert_eq!(tone_of_transition("container web ready"), Tone::Good);
        assert_eq!(tone_of_transition("container web not ready"), Tone::Warn);
        assert_eq!(tone_of_transition("Ready=False (ContainersNotReady: x)"), Tone::Warn);
        assert_eq!(tone_of_transition("container web terminated (Error, exit code 1)"), Tone::Warn);
        assert_eq!(tone_of_transition("container web restarted (restart count 2)"), Tone::Warn);
        assert_eq!(tone_of_transition("phase Running"), Tone::Plain);
    }
}
