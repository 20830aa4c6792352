//! The client-side request budget (the kubelet's `--kube-api-qps` / `--kube-api-burst`): a
//! token bucket shared by every request the agent sends. Reservation style, like Go's
//! `rate.Limiter.Reserve`: taking a token always succeeds and says how long to wait first.
//!
//! A caller that needs two requests in quick succession (a GET and the PATCH merged from it)
//! takes both tokens at once ([`RateLimiter::acquire_with_spare`]), so that no queueing of other
//! senders comes between them; a spare token it did not use goes back to the bucket.
//!
//! Any `qps` is accepted without a panic: zero, negative, NaN or infinite means no limit (as a
//! non-positive limit does for client-go's flag); a tiny one waits at most [`Duration::MAX`]
//! (for ever, in effect) instead of overflowing.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::time::Instant;

/// A token bucket: `burst` tokens, refilled at `qps` per second.
#[derive(Debug, Clone)]
pub struct TokenBucket {
    qps: f64,
    burst: f64,
    /// Tokens available at `last`; negative when requests are reserved ahead.
    tokens: f64,
    last: Instant,
}

impl TokenBucket {
    /// A full bucket. A `qps` of zero or less, NaN or infinite means no limit.
    pub fn new(qps: f64, burst: u32, now: Instant) -> Self {
        let burst = f64::from(burst.max(1));
        TokenBucket { qps, burst, tokens: burst, last: now }
    }

    /// Reserves one token; returns how long the caller must wait before using it.
    pub fn reserve(&mut self, now: Instant) -> Duration {
        if self.qps <= 0.0 || !self.qps.is_finite() {
            return Duration::ZERO;
        }
        let elapsed = now.saturating_duration_since(self.last).as_secs_f64();
        self.tokens = (self.tokens + elapsed * self.qps).min(self.burst);
        self.last = now.max(self.last);
        self.tokens -= 1.0;
        if self.tokens >= 0.0 { Duration::ZERO } else { wait_for(-self.tokens / self.qps) }
    }

    /// Gives back one reserved token that was not used (as Go's `Reservation.Cancel` does), at
    /// most up to a full bucket.
    pub fn refund(&mut self) {
        if self.qps <= 0.0 || !self.qps.is_finite() {
            return;
        }
        self.tokens = (self.tokens + 1.0).min(self.burst);
    }

    /// Takes one token if one is there now, and refuses otherwise (client-go's `TryAccept`): for
    /// callers that drop rather than wait, such as the event spam filter.
    pub fn try_accept(&mut self, now: Instant) -> bool {
        if self.qps <= 0.0 || !self.qps.is_finite() {
            return true;
        }
        let elapsed = now.saturating_duration_since(self.last).as_secs_f64();
        self.tokens = (self.tokens + elapsed * self.qps).min(self.burst);
        self.last = now.max(self.last);
        if self.tokens >= 1.0 {
            self.tokens -= 1.0;
            true
        } else {
            false
        }
    }
}

/// `seconds` as a duration, saturated: `Duration::from_secs_f64` panics beyond `Duration::MAX`,
/// which a tiny qps reaches (`--qps 1e-20`: 1e20 s per token).
fn wait_for(seconds: f64) -> Duration {
    match Duration::try_from_secs_f64(seconds) {
        Ok(wait) => wait,
        Err(_) if seconds > 0.0 => Duration::MAX,
        // Negative or NaN: cannot come from a finite positive qps, and waiting is never right.
        Err(_) => Duration::ZERO,
    }
}

/// A [`TokenBucket`] shared by every sender. The lock is held only to reserve, never across an
/// await.
#[derive(Debug, Clone)]
pub struct RateLimiter {
    bucket: Arc<Mutex<TokenBucket>>,
}

impl RateLimiter {
    /// A full bucket of `burst` tokens (at least 1), refilled at `qps` per second; a `qps` of zero
    /// or less, NaN or infinite means no limit.
    pub fn new(qps: f64, burst: u32) -> Self {
        RateLimiter { bucket: Arc::new(Mutex::new(TokenBucket::new(qps, burst, Instant::now()))) }
    }

    /// Waits until the caller may send one request.
    pub async fn acquire(&self) {
        let wait = match self.bucket.lock() {
            Ok(mut bucket) => bucket.reserve(Instant::now()),
            Err(_) => Duration::ZERO,
        };
        if !wait.is_zero() {
            tokio::time::sleep(wait).await;
        }
    }

    /// Waits until the caller may send two requests, one now and one whenever it likes: both
    /// tokens are reserved together, so the second request is not queued behind other senders.
    /// The second token is given back if the [`SpareToken`] is dropped unspent.
    pub async fn acquire_with_spare(&self) -> SpareToken {
        let wait = match self.bucket.lock() {
            Ok(mut bucket) => {
                let now = Instant::now();
                let first = bucket.reserve(now);
                bucket.reserve(now).max(first)
            }
            Err(_) => Duration::ZERO,
        };
        if !wait.is_zero() {
            tokio::time::sleep(wait).await;
        }
        SpareToken { limiter: Some(self.clone()) }
    }

    /// Waits until the caller may send one request, unless that is more than `max_wait` away:
    /// then it takes nothing and returns `false`. A caller dropped while it waits gives its
    /// token back, as client-go's `Wait(ctx)` cancels its reservation: for requests made on
    /// behalf of clients, who may hang up (and who must not be able to push everyone else's
    /// turn into the future by hanging up).
    pub async fn acquire_within(&self, max_wait: Duration) -> bool {
        let wait = match self.bucket.lock() {
            Ok(mut bucket) => bucket.reserve(Instant::now()),
            Err(_) => Duration::ZERO,
        };
        if wait > max_wait {
            self.refund();
            return false;
        }
        if !wait.is_zero() {
            let mut reserved = Reserved(Some(self.clone()));
            tokio::time::sleep(wait).await;
            reserved.0 = None;
        }
        true
    }

    fn refund(&self) {
        if let Ok(mut bucket) = self.bucket.lock() {
            bucket.refund();
        }
    }
}

/// A token reserved by a caller still waiting for it: given back if the wait is dropped.
struct Reserved(Option<RateLimiter>);

impl Drop for Reserved {
    fn drop(&mut self) {
        if let Some(limiter) = self.0.take() {
            limiter.refund();
        }
    }
}

/// A token taken ahead of the request it is for ([`RateLimiter::acquire_with_spare`]); given back
/// to the bucket when dropped without [`SpareToken::spend`].
#[derive(Debug)]
pub struct SpareToken {
    limiter: Option<RateLimiter>,
}

impl SpareToken {
    /// Uses the token: the request it was taken for is sent now, without waiting.
    pub fn spend(mut self) {
        self.limiter = None;
    }
}

impl Drop for SpareToken {
    fn drop(&mut self) {
        if let Some(limiter) = self.limiter.take() {
            limiter.refund();
        }
    }
}

/// Per-pod retry back-off: `initial`, doubling per consecutive failure, at most `max`.
pub fn backoff(initial: Duration, max: Duration, failures: u32) -> Duration {
    let factor = 1u32.checked_shl(failures.saturating_sub(1)).unwrap_or(u32::MAX);
    initial.saturating_mul(factor).min(max)
}

/// How much shorter than [`backoff`] a [`jittered_backoff`] may be.
const JITTER: f64 = 0.25;

/// [`backoff`] made up to a quarter shorter by a hash of `seed` (a pod UID) and `attempt`: pods
/// that fail together do not retry together, yet the waits are the same in every run (tests),
/// and never beyond `max`.
pub fn jittered_backoff(initial: Duration, max: Duration, attempt: u32, seed: &str) -> Duration {
    let wait = backoff(initial, max, attempt);
    let cut = Duration::try_from_secs_f64(wait.as_secs_f64() * JITTER * unit_fraction(seed, attempt))
        .unwrap_or(Duration::ZERO);
    wait.saturating_sub(cut)
}

/// A fraction in [0, 1) determined by `seed` and `attempt`: FNV-1a over both, then SplitMix64's
/// finalizer to spread the bits.
fn unit_fraction(seed: &str, attempt: u32) -> f64 {
    let mut fnv = crate::fnv::Fnv1a64::new();
    fnv.write(seed.as_bytes());
    fnv.write(&attempt.to_le_bytes());
    let mut hash = fnv.finish();
    hash = (hash ^ (hash >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    hash = (hash ^ (hash >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    hash ^= hash >> 31;
    // The top 53 bits, exactly representable as an f64.
    (hash >> 11) as f64 / (1u64 << 53) as f64
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A caller that would wait too long takes nothing, and one that gives up while waiting
    /// gives its token back: clients that hang up cannot push later callers' turns away.
    #[tokio::test(start_paused = true)]
    async fn acquire_within_is_bounded_and_cancel_safe() {
        let limiter = RateLimiter::new(1.0, 1);
        assert!(limiter.acquire_within(Duration::from_secs(5)).await, "the burst");
        let emptied = Instant::now();
        assert!(!limiter.acquire_within(Duration::from_millis(500)).await, "a token is 1 s away");
        for _ in 0..50 {
            let gave_up = tokio::time::timeout(
                Duration::from_millis(10),
                limiter.acquire_within(Duration::from_secs(5)),
            );
            assert!(gave_up.await.is_err(), "each one waits, then hangs up");
        }
        assert!(limiter.acquire_within(Duration::from_secs(5)).await);
        let waited = emptied.elapsed();
        assert!(waited <= Duration::from_millis(1001), "the callers that hung up took no turns: {waited:?}");
    }

    #[test]
    fn burst_then_qps() {
        let start = Instant::now();
        let mut bucket = TokenBucket::new(50.0, 100, start);
        for i in 0..100 {
            assert_eq!(bucket.reserve(start), Duration::ZERO, "request {i} within the burst");
        }
        let wait = bucket.reserve(start);
        assert!((wait.as_secs_f64() - 0.02).abs() < 1e-9, "the 101st waits one token: {wait:?}");
        let wait = bucket.reserve(start);
        assert!((wait.as_secs_f64() - 0.04).abs() < 1e-9, "the 102nd waits two: {wait:?}");
        // One second later 50 tokens came back, two of them already reserved.
        let later = start + Duration::from_secs(1);
        for _ in 0..48 {
            assert_eq!(bucket.reserve(later), Duration::ZERO);
        }
        assert!(bucket.reserve(later) > Duration::ZERO);
    }

    #[test]
    fn try_accept_refuses_without_taking_ahead() {
        let start = Instant::now();
        let mut bucket = TokenBucket::new(0.5, 2, start);
        assert!(bucket.try_accept(start) && bucket.try_accept(start));
        for _ in 0..10 {
            assert!(!bucket.try_accept(start), "an empty bucket refuses");
        }
        // Refusals reserve nothing: two seconds bring exactly one token.
        let later = start + Duration::from_secs(2);
        assert!(bucket.try_accept(later));
        assert!(!bucket.try_accept(later));
    }

    #[test]
    fn refills_no_more_than_the_burst() {
        let start = Instant::now();
        let mut bucket = TokenBucket::new(10.0, 5, start);
        let later = start + Duration::from_secs(100);
        for _ in 0..5 {
            assert_eq!(bucket.reserve(later), Duration::ZERO);
        }
        assert!(bucket.reserve(later) > Duration::ZERO);
    }

    #[test]
    fn zero_qps_is_unlimited() {
        let now = Instant::now();
        let mut bucket = TokenBucket::new(0.0, 1, now);
        for _ in 0..1000 {
            assert_eq!(bucket.reserve(now), Duration::ZERO);
        }
    }

    #[test]
    fn any_qps_reserves_without_panicking() {
        let now = Instant::now();
        let later = now + Duration::from_secs(3600);
        let cases: [(&str, f64, Option<Duration>); 11] = [
            ("NaN is unlimited", f64::NAN, Some(Duration::ZERO)),
            ("infinite is unlimited", f64::INFINITY, Some(Duration::ZERO)),
            ("minus infinity is unlimited", f64::NEG_INFINITY, Some(Duration::ZERO)),
            ("negative is unlimited", -5.0, Some(Duration::ZERO)),
            ("negative zero is unlimited", -0.0, Some(Duration::ZERO)),
            ("1e-20 saturates", 1e-20, Some(Duration::MAX)),
            ("smallest normal saturates", f64::MIN_POSITIVE, Some(Duration::MAX)),
            ("subnormal saturates", 5e-324, Some(Duration::MAX)),
            ("1e-9 waits about 31.7 years", 1e-9, None),
            ("huge waits nothing measurable", 1e300, Some(Duration::ZERO)),
            ("the largest waits nothing", f64::MAX, Some(Duration::ZERO)),
        ];
        for (name, qps, want) in cases {
            let mut bucket = TokenBucket::new(qps, 1, now);
            assert_eq!(bucket.reserve(now), Duration::ZERO, "case: {name} (the burst)");
            let wait = bucket.reserve(now);
            match want {
                Some(want) => assert_eq!(wait, want, "case: {name}"),
                None => assert!(
                    wait.abs_diff(Duration::from_secs(1_000_000_000)) < Duration::from_secs(1),
                    "case: {name}: {wait:?}"
                ),
            }
            // Time passing (even an hour into a bucket that refills at f64::MAX) never panics.
            let _ = bucket.reserve(later);
        }
    }

    #[test]
    fn saturated_waits() {
        let cases = [
            ("normal", 1.5, Duration::from_millis(1500)),
            ("zero", 0.0, Duration::ZERO),
            ("beyond the maximum", 1e30, Duration::MAX),
            ("infinite", f64::INFINITY, Duration::MAX),
            ("negative", -1.0, Duration::ZERO),
            ("NaN", f64::NAN, Duration::ZERO),
        ];
        for (name, seconds, want) in cases {
            assert_eq!(wait_for(seconds), want, "case: {name}");
        }
    }

    #[tokio::test(start_paused = true)]
    async fn a_saturated_wait_does_not_panic_the_limiter() {
        let limiter = RateLimiter::new(1e-20, 1);
        limiter.acquire().await;
        let second = tokio::time::timeout(Duration::from_secs(3600), limiter.acquire()).await;
        assert!(second.is_err(), "the second request waits (for ever, in effect)");
    }

    #[test]
    fn backoff_doubles_to_its_cap() {
        let (initial, max) = (Duration::from_millis(500), Duration::from_secs(30));
        let got: Vec<_> = (1..=9).map(|n| backoff(initial, max, n).as_millis()).collect();
        assert_eq!(got, [500, 1000, 2000, 4000, 8000, 16000, 30000, 30000, 30000]);
        assert_eq!(backoff(initial, max, 200), max);
    }

    #[test]
    fn a_refund_gives_back_one_token_up_to_the_burst() {
        let now = Instant::now();
        let mut bucket = TokenBucket::new(10.0, 2, now);
        assert_eq!(bucket.reserve(now), Duration::ZERO);
        assert_eq!(bucket.reserve(now), Duration::ZERO);
        assert!(bucket.reserve(now) > Duration::ZERO, "the bucket is empty, one reserved ahead");
        bucket.refund();
        bucket.refund();
        assert_eq!(bucket.reserve(now), Duration::ZERO, "the refunds made up for the reservation");
        bucket.refund();
        bucket.refund();
        bucket.refund();
        assert_eq!(bucket.reserve(now), Duration::ZERO);
        assert_eq!(bucket.reserve(now), Duration::ZERO);
        assert!(bucket.reserve(now) > Duration::ZERO, "never more than the burst");
        let mut unlimited = TokenBucket::new(0.0, 1, now);
        unlimited.refund();
        assert_eq!(unlimited.reserve(now), Duration::ZERO);
    }

    #[tokio::test(start_paused = true)]
    async fn a_spare_token_is_reserved_with_the_first_and_refunded_unspent() {
        // One token a second, burst 2.
        let limiter = RateLimiter::new(1.0, 2);
        let start = Instant::now();
        limiter.acquire_with_spare().await.spend();
        assert_eq!(start.elapsed(), Duration::ZERO, "both tokens from the burst");
        let spare = limiter.acquire_with_spare().await;
        assert_eq!(start.elapsed(), Duration::from_secs(2), "waits for both tokens");
        drop(spare);
        limiter.acquire().await;
        assert_eq!(start.elapsed(), Duration::from_secs(2), "the unspent token came back");
        limiter.acquire().await;
        assert_eq!(start.elapsed(), Duration::from_secs(3));
    }

    #[test]
    fn jittered_backoff_is_repeatable_shorter_by_at_most_a_quarter_and_capped() {
        let (initial, max) = (Duration::from_millis(50), Duration::from_secs(1));
        for uid in ["pod-a", "pod-b", ""] {
            for attempt in 0..40 {
                let plain = backoff(initial, max, attempt);
                let wait = jittered_backoff(initial, max, attempt, uid);
                assert_eq!(wait, jittered_backoff(initial, max, attempt, uid), "{uid}/{attempt}: repeatable");
                assert!(
                    wait <= plain && wait >= plain.mul_f64(0.75),
                    "{uid}/{attempt}: {wait:?} of {plain:?}"
                );
                assert!(wait <= max);
            }
        }
        let spread: std::collections::HashSet<Duration> =
            (0..20).map(|i| jittered_backoff(initial, max, 3, &format!("pod-{i}"))).collect();
        assert!(spread.len() > 10, "pods conflicting together do not retry together: {spread:?}");
        // Saturated durations do not panic.
        let huge = jittered_backoff(Duration::MAX, Duration::MAX, u32::MAX, "x");
        assert!(huge >= Duration::MAX.mul_f64(0.75), "{huge:?}");
    }

    #[test]
    fn unit_fractions_stay_in_range() {
        for attempt in [0, 1, 2, u32::MAX] {
            for seed in ["", "a", "0b1c2d3e-uid"] {
                let f = unit_fraction(seed, attempt);
                assert!((0.0..1.0).contains(&f), "{seed}/{attempt}: {f}");
            }
        }
    }
}
