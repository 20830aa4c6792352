//! A worker's metric series (upstream: the label sets `newWorker` precomputes and deletes on
//! exit): `prober_probe_total` and `prober_probe_duration_seconds`, observed exactly when
//! upstream observes them — successes and unknowns get a duration, failures only a count.

use std::time::Duration;

use k8s_openapi::api::core::v1::Pod;

use super::{ProbeKind, ProbeResult};
use crate::metrics::{self as names, forget_series};

/// The labels of one worker's series.
#[derive(Debug, Clone)]
pub struct ProbeLabels {
    probe_type: &'static str,
    container: String,
    pod: String,
    namespace: String,
    pod_uid: String,
}

impl ProbeLabels {
    /// The labels of a `kind` worker for `container` of `pod`: `probe_type`, `container`, `pod`,
    /// `namespace`, `pod_uid`.
    pub fn new(kind: ProbeKind, pod: &Pod, container: &str) -> Self {
        ProbeLabels {
            probe_type: kind.as_str(),
            container: container.to_owned(),
            pod: pod.metadata.name.clone().unwrap_or_default(),
            namespace: pod.metadata.namespace.clone().unwrap_or_default(),
            pod_uid: pod.metadata.uid.clone().unwrap_or_default(),
        }
    }

    /// Counts a probe that returned a result and, unless it failed, observes its duration.
    pub fn observe(&self, result: ProbeResult, duration: Duration) {
        let label = match result {
            ProbeResult::Success => names::RESULT_SUCCESSFUL,
            ProbeResult::Failure => names::RESULT_FAILED,
            ProbeResult::Unknown => names::RESULT_UNKNOWN,
        };
        metrics::counter!(
            names::PROBER_PROBE_TOTAL,
            "probe_type" => self.probe_type,
            "result" => label,
            "container" => self.container.clone(),
            "pod" => self.pod.clone(),
            "namespace" => self.namespace.clone(),
            "pod_uid" => self.pod_uid.clone(),
        )
        .increment(1);
        if result != ProbeResult::Failure {
            metrics::histogram!(
                names::PROBER_PROBE_DURATION_SECONDS,
                "probe_type" => self.probe_type,
                "container" => self.container.clone(),
                "pod" => self.pod.clone(),
                "namespace" => self.namespace.clone(),
            )
            .record(duration.as_secs_f64());
        }
    }

    /// Deletes this worker's series (upstream deletes the three result series and the
    /// duration series when the worker exits).
    pub fn forget(&self) {
        forget_series(
            names::PROBER_PROBE_TOTAL,
            &[
                ("probe_type", self.probe_type),
                ("container", &self.container),
                ("pod", &self.pod),
                ("namespace", &self.namespace),
                ("pod_uid", &self.pod_uid),
            ],
        );
        forget_series(
            names::PROBER_PROBE_DURATION_SECONDS,
            &[
                ("probe_type", self.probe_type),
                ("container", &self.container),
                ("pod", &self.pod),
                ("namespace", &self.namespace),
            ],
        );
    }
}

/// Counts a probe that errored after its retries and was discarded.
pub fn probe_errored(kind: ProbeKind) {
    metrics::counter!(names::PROBELET_PROBE_ERRORS_TOTAL, "probe_type" => kind.as_str()).increment(1);
}
