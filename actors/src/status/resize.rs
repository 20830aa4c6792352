//! A pod's in-place resize conditions, `PodResizePending` and `PodResizeInProgress` (upstream:
//! the status manager's `podResizeConditions`, with `SetPodResizePendingCondition`,
//! `SetPodResizeInProgressCondition`, `ClearPodResize…Condition` and `GetPodResizeConditions`,
//! v1.33+). Whoever decides resizes (the kubelet's allocation manager; here the host) sets them;
//! the host's status generation appends them to every status it generates, and a terminal pod
//! clears them (docs/status-manager.md, "Resize conditions").
//!
//! Pure: the status manager keeps one [`PodResizeConditions`] per pod UID and answers its
//! messages with these functions.

use k8s_openapi::api::core::v1::PodCondition;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use k8s_openapi::jiff::Timestamp;

use super::equality::{POD_RESIZE_IN_PROGRESS, POD_RESIZE_PENDING};

/// `v1.PodReasonDeferred`: the resize fits the node, not now.
pub const POD_REASON_DEFERRED: &str = "Deferred";
/// `v1.PodReasonInfeasible`: the resize can never fit the node.
pub const POD_REASON_INFEASIBLE: &str = "Infeasible";
/// `v1.PodReasonError`: actuating the resize failed (on `PodResizeInProgress`).
pub const POD_REASON_ERROR: &str = "Error";

/// The resize conditions of one pod: each present or not.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct PodResizeConditions {
    /// `PodResizePending`: a resize was asked for and not admitted yet.
    pub pending: Option<PodCondition>,
    /// `PodResizeInProgress`: an admitted resize is being actuated.
    pub in_progress: Option<PodCondition>,
}

impl PodResizeConditions {
    /// Sets `PodResizePending` (upstream `SetPodResizePendingCondition`).
    pub fn set_pending(&mut self, reason: &str, message: &str, observed_generation: i64, now: Timestamp) {
        self.pending = Some(updated_condition(
            POD_RESIZE_PENDING,
            self.pending.as_ref(),
            reason,
            message,
            observed_generation,
            now,
        ));
    }

    /// Sets `PodResizeInProgress` (upstream `SetPodResizeInProgressCondition`).
    pub fn set_in_progress(&mut self, reason: &str, message: &str, observed_generation: i64, now: Timestamp) {
        self.in_progress = Some(updated_condition(
            POD_RESIZE_IN_PROGRESS,
            self.in_progress.as_ref(),
            reason,
            message,
            observed_generation,
            now,
        ));
    }

    /// Clears `PodResizePending` (upstream `ClearPodResizePendingCondition`).
    pub fn clear_pending(&mut self) {
        self.pending = None;
    }

    /// Clears `PodResizeInProgress`; whether there was one to clear (upstream
    /// `ClearPodResizeInProgressCondition`).
    pub fn clear_in_progress(&mut self) -> bool {
        self.in_progress.take().is_some()
    }

    /// Both present conditions, pending first (upstream `GetPodResizeConditions`).
    pub fn list(&self) -> Vec<PodCondition> {
        self.pending.iter().chain(self.in_progress.iter()).cloned().collect()
    }

    /// Neither condition is set.
    pub fn is_empty(&self) -> bool {
        self.pending.is_none() && self.in_progress.is_none()
    }

    /// The pending resize waits for room (upstream `IsPodResizeDeferred`).
    pub fn is_deferred(&self) -> bool {
        self.pending.as_ref().is_some_and(|c| c.reason.as_deref() == Some(POD_REASON_DEFERRED))
    }

    /// The pending resize can never be admitted (upstream `IsPodResizeInfeasible`).
    pub fn is_infeasible(&self) -> bool {
        self.pending.as_ref().is_some_and(|c| c.reason.as_deref() == Some(POD_REASON_INFEASIBLE))
    }
}

/// Upstream `updatedPodResizeCondition`: the condition is always `True` (its presence is the
/// signal); `lastProbeTime` is now; `lastTransitionTime` is now unless the condition existed with
/// the same reason. An empty reason or message is an omitted field, as Go's zero string is, and
/// so is generation 0.
fn updated_condition(
    type_: &str,
    old: Option<&PodCondition>,
    reason: &str,
    message: &str,
    observed_generation: i64,
    now: Timestamp,
) -> PodCondition {
    let reason = (!reason.is_empty()).then(|| reason.to_owned());
    let last_transition_time = match old {
        Some(old) if old.reason == reason => old.last_transition_time.clone(),
        _ => Some(Time(now)),
    };
    PodCondition {
        type_: type_.to_owned(),
        status: "True".to_owned(),
        observed_generation: (observed_generation != 0).then_some(observed_generation),
        last_probe_time: Some(Time(now)),
        last_transition_time,
        reason,
        message: (!message.is_empty()).then(|| message.to_owned()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(secs: i64) -> Timestamp {
        Timestamp::from_second(secs).expect("a valid timestamp")
    }

    /// Without the times, which upstream's test ignores.
    fn untimed(conditions: Vec<PodCondition>) -> Vec<(String, Option<String>, Option<String>)> {
        conditions.into_iter().map(|c| (c.type_, c.reason, c.message)).collect()
    }

    fn cond(
        type_: &str,
        reason: Option<&str>,
        message: Option<&str>,
    ) -> (String, Option<String>, Option<String>) {
        (type_.to_owned(), reason.map(str::to_owned), message.map(str::to_owned))
    }

    /// Upstream `TestPodResizeConditions`, its steps in order on one pod.
    #[test]
    fn pod_resize_conditions() {
        let mut c = PodResizeConditions::default();
        // initial empty conditions
        assert!(c.list().is_empty());
        // set pod resize in progress condition with reason and message
        c.set_in_progress("some-reason", "some-message", 0, at(1));
        assert_eq!(
            untimed(c.list()),
            vec![cond(POD_RESIZE_IN_PROGRESS, Some("some-reason"), Some("some-message"))]
        );
        // set pod resize in progress condition without reason and message
        c.set_in_progress("", "", 0, at(2));
        assert_eq!(untimed(c.list()), vec![cond(POD_RESIZE_IN_PROGRESS, None, None)]);
        // set pod resize pending condition with reason and message
        c.set_pending("some-reason", "some-message", 0, at(3));
        assert_eq!(
            untimed(c.list()),
            vec![
                cond(POD_RESIZE_PENDING, Some("some-reason"), Some("some-message")),
                cond(POD_RESIZE_IN_PROGRESS, None, None),
            ]
        );
        // clear pod resize in progress condition
        assert!(c.clear_in_progress());
        assert_eq!(
            untimed(c.list()),
            vec![cond(POD_RESIZE_PENDING, Some("some-reason"), Some("some-message"))]
        );
        assert!(!c.clear_in_progress(), "nothing left to clear");
        // clear pod resize pending condition
        c.clear_pending();
        assert!(c.list().is_empty());
        assert!(c.is_empty());
    }

    #[test]
    fn every_condition_is_true_with_the_generation_it_was_set_for() {
        let mut c = PodResizeConditions::default();
        c.set_pending(POD_REASON_DEFERRED, "Node didn't have enough capacity", 3, at(10));
        let pending = c.pending.clone().expect("pending");
        assert_eq!(pending.status, "True");
        assert_eq!(pending.observed_generation, Some(3));
        assert_eq!(pending.last_probe_time, Some(Time(at(10))));
        c.set_in_progress("", "", 0, at(11));
        assert_eq!(c.in_progress.expect("in progress").observed_generation, None, "generation 0 is omitted");
    }

    #[test]
    fn the_transition_time_moves_only_when_the_reason_changes() {
        let mut c = PodResizeConditions::default();
        c.set_pending(POD_REASON_DEFERRED, "first", 1, at(10));
        c.set_pending(POD_REASON_DEFERRED, "a new message", 2, at(20));
        let pending = c.pending.clone().expect("pending");
        assert_eq!(pending.last_transition_time, Some(Time(at(10))), "same reason: kept");
        assert_eq!(pending.last_probe_time, Some(Time(at(20))));
        assert_eq!(pending.message.as_deref(), Some("a new message"));
        assert_eq!(pending.observed_generation, Some(2));
        c.set_pending(POD_REASON_INFEASIBLE, "never fits", 2, at(30));
        assert_eq!(
            c.pending.clone().expect("pending").last_transition_time,
            Some(Time(at(30))),
            "new reason"
        );
        // Cleared and set again: a new transition.
        c.clear_pending();
        c.set_pending(POD_REASON_INFEASIBLE, "never fits", 2, at(40));
        assert_eq!(c.pending.clone().expect("pending").last_transition_time, Some(Time(at(40))));
    }

    #[test]
    fn deferred_and_infeasible_read_the_pending_reason() {
        let mut c = PodResizeConditions::default();
        assert!(!c.is_deferred() && !c.is_infeasible());
        c.set_pending(POD_REASON_DEFERRED, "", 1, at(1));
        assert!(c.is_deferred() && !c.is_infeasible());
        c.set_pending(POD_REASON_INFEASIBLE, "", 1, at(2));
        assert!(!c.is_deferred() && c.is_infeasible());
        // An in-progress error is neither.
        c.clear_pending();
        c.set_in_progress(POD_REASON_ERROR, "resize failed", 1, at(3));
        assert!(!c.is_deferred() && !c.is_infeasible());
    }
}
