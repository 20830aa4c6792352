//! The `demo-target` command line ([`DemoArgs`]) and the health script it describes: health as a
//! pure function of the time since start ([`healthy_at`]), the next instant it may change, and
//! Go-style durations ([`parse_duration`]).

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

/// The `demo-target` command line.
#[derive(Debug, Clone, clap::Args)]
pub struct DemoArgs {
    /// Serve HTTP on this address (GET /healthz, /readyz, /livez, / — 200 "ok" while healthy, 503
    /// "unhealthy" otherwise; /redirect → 302 to /healthz)
    #[arg(long, env = "DEMO_HTTP")]
    pub http: Option<SocketAddr>,

    /// Accept TCP connections on this address while healthy (close the listener while
    /// unhealthy, reopen it when healthy again)
    #[arg(long, env = "DEMO_TCP")]
    pub tcp: Option<SocketAddr>,

    /// Serve grpc.health.v1 on this address: SERVING while healthy, NOT_SERVING otherwise
    /// (service "" and every --grpc-service name)
    #[arg(long, env = "DEMO_GRPC")]
    pub grpc: Option<SocketAddr>,

    /// A gRPC service name to report besides "" (repeatable)
    #[arg(long = "grpc-service", value_name = "NAME")]
    pub grpc_service: Vec<String>,

    /// Healthy for this long after start, then unhealthy for good (e.g. 30s)
    #[arg(long, value_name = "DURATION", value_parser = parse_duration)]
    pub fail_after: Option<Duration>,

    /// Flip between healthy and unhealthy every DURATION, counted from when the target first
    /// becomes healthy (0 = never)
    #[arg(long, value_name = "DURATION", value_parser = parse_duration)]
    pub flip_every: Option<Duration>,

    /// Unhealthy for this long after start (slow start), then healthy — for startup probes
    #[arg(long, value_name = "DURATION", value_parser = parse_duration)]
    pub start_after: Option<Duration>,

    /// Delay every HTTP and gRPC response by this long
    #[arg(long, value_name = "DURATION", value_parser = parse_duration)]
    pub delay: Option<Duration>,

    /// Exit with --exit-code this long after start
    #[arg(long, value_name = "DURATION", value_parser = parse_duration)]
    pub exit_after: Option<Duration>,

    /// The exit code for --exit-after
    #[arg(long, default_value_t = 1)]
    pub exit_code: i32,

    /// Create this file while healthy and remove it while unhealthy (`test -f FILE` is then the
    /// exec probe)
    #[arg(long, value_name = "FILE")]
    pub health_file: Option<PathBuf>,
}

impl Default for DemoArgs {
    /// No servers, always healthy, runs forever: the command line with no flags.
    fn default() -> Self {
        Self {
            http: None,
            tcp: None,
            grpc: None,
            grpc_service: Vec::new(),
            fail_after: None,
            flip_every: None,
            start_after: None,
            delay: None,
            exit_after: None,
            exit_code: 1,
            health_file: None,
        }
    }
}

// === health as a function of time ===

/// Is the target healthy `elapsed` after start under these args?
///
/// Unhealthy before `--start-after`; from then on healthy, or alternating healthy/unhealthy
/// every `--flip-every` (starting healthy); unhealthy for good from `--fail-after`. All
/// intervals are half-open: at exactly `start_after` it is healthy, at exactly `fail_after` not.
pub fn healthy_at(args: &DemoArgs, elapsed: Duration) -> bool {
    let base = args.start_after.unwrap_or(Duration::ZERO);
    let Some(since_up) = elapsed.checked_sub(base) else {
        return false;
    };
    if args.fail_after.is_some_and(|fail| elapsed >= fail) {
        return false;
    }
    match flip_period(args) {
        Some(period) => (since_up.as_nanos() / period.as_nanos()).is_multiple_of(2),
        None => true,
    }
}

/// The first instant after `elapsed` at which [`healthy_at`] may change, or `None` when it
/// never changes again. A boundary may turn out not to change anything (a flip that lands
/// after `--fail-after`); the clock then just sleeps again.
pub(super) fn next_transition(args: &DemoArgs, elapsed: Duration) -> Option<Duration> {
    if args.fail_after.is_some_and(|fail| elapsed >= fail) {
        return None;
    }
    let base = args.start_after.unwrap_or(Duration::ZERO);
    let flip = flip_period(args).and_then(|period| {
        let since_up = elapsed.checked_sub(base)?;
        let next = (since_up.as_nanos() / period.as_nanos() + 1).checked_mul(period.as_nanos())?;
        let next = base.checked_add(Duration::from_nanos(u64::try_from(next).ok()?))?;
        Some(next)
    });
    [args.start_after, args.fail_after, flip].into_iter().flatten().filter(|&at| at > elapsed).min()
}

/// `--flip-every`, unless absent or zero (zero means no flipping rather than a division by it).
pub(super) fn flip_period(args: &DemoArgs) -> Option<Duration> {
    args.flip_every.filter(|period| !period.is_zero())
}

// === durations ===

/// Parses a duration the way Go's `time.ParseDuration` does (`500ms`, `30s`, `2m`, `1h30m`,
/// `1.5s`; units `ns`, `us`/`µs`, `ms`, `s`, `m`, `h`; a bare `0`), except that negative
/// durations are rejected. Errors use Go's texts.
pub fn parse_duration(s: &str) -> Result<Duration, String> {
    let invalid = || format!("time: invalid duration {s:?}");
    let (negative, mut rest) = match s.as_bytes().first() {
        Some(b'-') => (true, &s[1..]),
        Some(b'+') => (false, &s[1..]),
        _ => (false, s),
    };
    if rest == "0" {
        return Ok(Duration::ZERO);
    }
    if rest.is_empty() {
        return Err(invalid());
    }
    let mut total: u128 = 0;
    while !rest.is_empty() {
        let int_len = rest.bytes().take_while(u8::is_ascii_digit).count();
        let (int_digits, after_int) = rest.split_at(int_len);
        let (frac_digits, after_number) = match after_int.strip_prefix('.') {
            Some(after_dot) => {
                let frac_len = after_dot.bytes().take_while(u8::is_ascii_digit).count();
                after_dot.split_at(frac_len)
            }
            None => ("", after_int),
        };
        if int_digits.is_empty() && frac_digits.is_empty() {
            return Err(invalid());
        }
        let unit_len =
            after_number.find(|c: char| c == '.' || c.is_ascii_digit()).unwrap_or(after_number.len());
        let (unit, after_unit) = after_number.split_at(unit_len);
        if unit.is_empty() {
            return Err(format!("time: missing unit in duration {s:?}"));
        }
        let unit_nanos: u128 = match unit {
            "ns" => 1,
            "us" | "µs" | "μs" => 1_000,
            "ms" => 1_000_000,
            "s" => 1_000_000_000,
            "m" => 60 * 1_000_000_000,
            "h" => 60 * 60 * 1_000_000_000,
            _ => return Err(format!("time: unknown unit {unit:?} in duration {s:?}")),
        };
        let int: u128 = if int_digits.is_empty() { 0 } else { int_digits.parse().map_err(|_| invalid())? };
        // Digits past the nineteenth cannot change a nanosecond count of this size; dropping
        // them keeps the arithmetic in range, as Go does.
        let (mut frac, mut scale) = (0u128, 1u128);
        for digit in frac_digits.bytes().take(19) {
            frac = frac * 10 + u128::from(digit - b'0');
            scale *= 10;
        }
        let component = int
            .checked_mul(unit_nanos)
            .and_then(|nanos| nanos.checked_add(frac * unit_nanos / scale))
            .ok_or_else(invalid)?;
        total = total.checked_add(component).ok_or_else(invalid)?;
        // Go's limit: a duration is an i64 count of nanoseconds.
        if total > i64::MAX as u128 {
            return Err(invalid());
        }
        rest = after_unit;
    }
    if negative && total != 0 {
        return Err(format!("invalid duration {s:?}: must not be negative"));
    }
    u64::try_from(total).map(Duration::from_nanos).map_err(|_| invalid())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ms(n: u64) -> Duration {
        Duration::from_millis(n)
    }

    #[test]
    fn next_transition_lands_on_every_boundary() {
        let args = DemoArgs {
            start_after: Some(ms(100)),
            flip_every: Some(ms(50)),
            fail_after: Some(ms(260)),
            ..DemoArgs::default()
        };
        let mut at = Duration::ZERO;
        let mut boundaries = Vec::new();
        while let Some(next) = next_transition(&args, at) {
            assert!(next > at, "boundary {next:?} after {at:?}");
            boundaries.push(next);
            at = next;
        }
        assert_eq!(boundaries, [100, 150, 200, 250, 260].map(ms));
    }

    #[test]
    fn next_transition_is_none_when_health_is_final() {
        assert_eq!(next_transition(&DemoArgs::default(), ms(5)), None, "no script");
        let failing = DemoArgs { fail_after: Some(ms(10)), ..DemoArgs::default() };
        assert_eq!(next_transition(&failing, ms(3)), Some(ms(10)), "before failing");
        assert_eq!(next_transition(&failing, ms(10)), None, "failed");
        let starting = DemoArgs { start_after: Some(ms(10)), ..DemoArgs::default() };
        assert_eq!(next_transition(&starting, ms(10)), None, "started");
        let zero_flip = DemoArgs { flip_every: Some(Duration::ZERO), ..DemoArgs::default() };
        assert_eq!(next_transition(&zero_flip, ms(10)), None, "flip 0 never flips");
    }

    #[test]
    fn health_only_changes_at_boundaries() {
        let args = DemoArgs {
            start_after: Some(ms(30)),
            flip_every: Some(ms(20)),
            fail_after: Some(ms(170)),
            ..DemoArgs::default()
        };
        for step in 0..200u64 {
            let at = ms(step);
            let next = next_transition(&args, at);
            let later = ms(step + 1);
            if next.is_none_or(|next| later < next) {
                assert_eq!(
                    healthy_at(&args, at),
                    healthy_at(&args, later),
                    "no boundary between {at:?} and {later:?}"
                );
            }
        }
    }
}
