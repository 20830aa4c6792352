//! A pod's active deadline (`spec.activeDeadlineSeconds`), as the kubelet's active deadline
//! handler decides it: the pod has been active too long once `status.startTime` plus the
//! deadline is now or past. What the standalone host then does (the pod fails, its containers
//! are killed for good, an event is recorded) is in docs/reliability.md, "A pod's active
//! deadline".

use std::time::Duration;

use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::jiff::{SignedDuration, Timestamp};

/// The pod status reason, and the event reason, of a pod failed by its active deadline
/// (upstream's, byte for byte).
pub const REASON_DEADLINE_EXCEEDED: &str = "DeadlineExceeded";
/// The pod status message, and the event message, of a pod failed by its active deadline
/// (upstream's, byte for byte).
pub const MESSAGE_DEADLINE_EXCEEDED: &str = "Pod was active on the node longer than the specified deadline";

/// When the pod's active deadline passes: `start` plus `spec.activeDeadlineSeconds`. `None`
/// when the pod has no deadline or no start time yet (the kubelet does not count a deadline
/// from nothing), and for a value no timestamp can hold (past year 9999: never).
pub fn active_deadline(pod: &Pod, start: Option<Timestamp>) -> Option<Timestamp> {
    let seconds = pod.spec.as_ref()?.active_deadline_seconds?;
    start?.checked_add(SignedDuration::from_secs(seconds)).ok()
}

/// Whether the pod has been active for its whole deadline at `now` (upstream
/// `pastActiveDeadline`: the time since the start is at least the deadline).
pub fn past_active_deadline(pod: &Pod, start: Option<Timestamp>, now: Timestamp) -> bool {
    active_deadline(pod, start).is_some_and(|deadline| now >= deadline)
}

/// How long from `now` until `deadline`: zero once it has passed.
pub fn until(deadline: Timestamp, now: Timestamp) -> Duration {
    Duration::try_from(deadline.duration_since(now)).unwrap_or(Duration::ZERO)
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::PodSpec;

    fn pod(deadline: Option<i64>) -> Pod {
        Pod {
            spec: Some(PodSpec { active_deadline_seconds: deadline, ..Default::default() }),
            ..Default::default()
        }
    }

    fn at(second: i64, nanos: i32) -> Timestamp {
        Timestamp::new(1_800_000_000 + second, nanos).unwrap()
    }

    #[test]
    fn the_deadline_is_past_from_start_plus_its_seconds_on() {
        let start = Some(at(0, 0));
        let pod = pod(Some(30));
        assert_eq!(active_deadline(&pod, start), Some(at(30, 0)));
        assert!(!past_active_deadline(&pod, start, at(29, 999_999_999)), "a nanosecond before");
        assert!(past_active_deadline(&pod, start, at(30, 0)), "at the deadline: upstream's >=");
        assert!(past_active_deadline(&pod, start, at(31, 0)));
    }

    #[test]
    fn no_deadline_without_the_field_or_a_start_time() {
        assert_eq!(active_deadline(&pod(None), Some(at(0, 0))), None);
        assert!(!past_active_deadline(&pod(None), Some(at(0, 0)), at(1_000_000, 0)));
        assert_eq!(active_deadline(&pod(Some(1)), None), None);
        assert!(!past_active_deadline(&pod(Some(1)), None, at(1_000_000, 0)));
        assert!(!past_active_deadline(&Pod::default(), Some(at(0, 0)), at(1_000_000, 0)), "no spec");
    }

    /// The largest deadline the API takes is 68 years: it fits. A larger one (only a pod that
    /// skipped validation) past what a timestamp holds is never reached, and nothing overflows.
    #[test]
    fn the_largest_deadlines_do_not_overflow() {
        let start = Some(at(0, 0));
        let largest = pod(Some(i64::from(i32::MAX)));
        assert_eq!(active_deadline(&largest, start), Some(at(i64::from(i32::MAX), 0)));
        assert_eq!(active_deadline(&pod(Some(i64::MAX)), start), None);
        assert!(!past_active_deadline(&pod(Some(i64::MAX)), start, Timestamp::MAX));
    }

    #[test]
    fn time_until_the_deadline() {
        assert_eq!(until(at(30, 0), at(28, 500_000_000)), Duration::from_millis(1_500));
        assert_eq!(until(at(30, 0), at(30, 0)), Duration::ZERO);
        assert_eq!(until(at(30, 0), at(45, 0)), Duration::ZERO, "past: now");
    }
}
