//! What the probe workers log, where upstream's text and level are the contract (docs/prober.md
//! §1.2). Its own test binary: the log is captured by a process-wide subscriber, since the
//! workers run on threads of their own.

// Test helpers may panic: a panic there is a failed assertion.
#![allow(clippy::unwrap_used)]

use probelet_test_support as support;

use std::time::Duration;

use probelet::prober::{ProbeKind, ProbeResult};
use support::kubelet::{aged_harness, settle, wall};
use support::log::CapturedLog;
use support::pods::{probe, running, test_pod};
use support::scripted::Step;

/// Upstream's `UpdatePodStatus` sends a manual readiness trigger into the worker's one-slot
/// channel; when one already waits there (the worker is busy probing), the send fails and
/// `Failed to trigger a manual run` is logged at info with the probe type, under klog's key
/// (`probe="Readiness"`). Before, probelet kept any number of triggers silently.
#[actix::test]
async fn a_trigger_while_one_already_waits_is_logged_at_info() {
    let captured = CapturedLog::default();
    captured.capture_globally_at(tracing::Level::INFO);

    let (h, t0) = aged_harness().await;
    h.prober.always("app", ProbeKind::Readiness, Step::Slow(Duration::from_secs(5), ProbeResult::Success));
    let pod =
        test_pod("busy").container("app").with_probe("app", ProbeKind::Readiness, probe(10, 1, 3)).build();
    h.sync(&pod, vec![running("app", "cri://1", wall(t0))]).await;
    settle().await;
    // The container restarted while its probe runs: no readiness result for the new one, so
    // each sync triggers a probe. The first waits for the probe in flight; the second finds
    // it waiting.
    h.sync(&pod, vec![running("app", "cri://2", wall(t0))]).await;
    settle().await;
    assert!(captured.lines_with("Failed to trigger a manual run").is_empty(), "one trigger fits");
    h.sync(&pod, vec![running("app", "cri://2", wall(t0))]).await;
    settle().await;
    let lines = captured.lines_with("Failed to trigger a manual run");
    assert_eq!(lines.len(), 1, "{lines:?}");
    assert!(
        lines[0].starts_with("INFO ")
            && lines[0].ends_with(r#"Failed to trigger a manual run probe="Readiness""#),
        "{lines:?}"
    );
}
