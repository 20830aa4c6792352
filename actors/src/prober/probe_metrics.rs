//! A worker's metric series (upstream: the label sets `newWorker` precomputes and deletes on
//! exit): `prober_probe_total` and `prober_probe_duration_seconds`, observed exactly when
//! upstream observes them — successes and unknowns get a duration, failures only a count.
//!
//! Each series is looked up once per worker, at its first observation, and its handle kept:
//! looking it up on every probe cloned the label strings and hashed them each time. (The
//! first observation, not the worker's creation, so that a recorder installed after the
//! workers exist still gets the series, and a series exists only once observed, as upstream's.)
//! A kept handle is dropped whenever any series was forgotten since it was looked up
//! ([`crate::metrics::forget_epoch`]): the duration series has no `pod_uid`, so the exit of a
//! deleted pod's worker forgets the series its same-named successor records into, and a kept
//! handle would then count into nothing.

use std::sync::Arc;
use std::time::Duration;

use metrics::{Counter, Histogram};

use k8s_openapi::api::core::v1::Pod;

use super::{ProbeKind, ProbeResult};
use crate::metrics::{self as names, PrometheusRegistry, SeriesKind, installed};
use crate::vocabulary::ProbeKey;

/// The labels of one worker's series: its key (probe type, container name, pod UID) and its
/// pod's name and namespace. Borrowed, not kept: the worker already holds its key and its pod,
/// and when it exits the manager builds these from the key and pod the exit notice carries. So
/// a worker keeps no second copy of its identity for its metrics (docs/memory.md).
#[derive(Debug, Clone, Copy)]
pub struct ProbeLabels<'a> {
    key: &'a ProbeKey,
    pod: &'a Pod,
}

impl<'a> ProbeLabels<'a> {
    /// The labels of the worker `key` of `pod`.
    pub fn new(key: &'a ProbeKey, pod: &'a Pod) -> Self {
        ProbeLabels { key, pod }
    }

    fn pod_name(&self) -> &'a str {
        self.pod.metadata.name.as_deref().unwrap_or_default()
    }

    fn namespace(&self) -> &'a str {
        self.pod.metadata.namespace.as_deref().unwrap_or_default()
    }

    /// Deletes this worker's series (upstream deletes the three result series and the
    /// duration series when the worker exits) from the global registry, if one is installed.
    pub fn forget(&self) {
        if let Some(registry) = installed() {
            self.forget_in(registry);
        }
    }

    /// [`ProbeLabels::forget`] in `registry`: each series by its exact key, with the labels in
    /// the order [`ProbeSeries::observe`] creates them, so that an exit costs a few lookups,
    /// not a scan of every worker's series.
    pub fn forget_in(&self, registry: &PrometheusRegistry) {
        let (probe_type, pod, namespace) = (self.key.kind.as_str(), self.pod_name(), self.namespace());
        let (container, pod_uid) = (&*self.key.container_name, self.key.pod_uid.as_str());
        for result in [names::RESULT_SUCCESSFUL, names::RESULT_FAILED, names::RESULT_UNKNOWN] {
            registry.forget_exact(
                SeriesKind::Counter,
                names::PROBER_PROBE_TOTAL,
                &[
                    ("probe_type", probe_type),
                    ("result", result),
                    ("container", container),
                    ("pod", pod),
                    ("namespace", namespace),
                    ("pod_uid", pod_uid),
                ],
            );
        }
        registry.forget_exact(
            SeriesKind::Histogram,
            names::PROBER_PROBE_DURATION_SECONDS,
            &[("probe_type", probe_type), ("container", container), ("pod", pod), ("namespace", namespace)],
        );
    }
}

/// The series handles a worker has looked up so far; nothing until its first observation, so
/// a worker that has not probed holds no label text and no handles (docs/memory.md).
#[derive(Debug, Default)]
pub struct ProbeSeries {
    handles: Option<Box<Handles>>,
}

/// A worker's series handles, and the label text they share.
#[derive(Debug)]
struct Handles {
    /// [`crate::metrics::forget_epoch`] when these were looked up.
    epoch: u64,
    /// `prober_probe_total` by result: successful, failed, unknown.
    totals: [Option<Counter>; 3],
    /// `prober_probe_duration_seconds`.
    duration: Option<Histogram>,
    /// The pod's name and namespace, as the series' label values, taken once and shared by
    /// all the series.
    pod: Arc<str>,
    namespace: Arc<str>,
}

impl ProbeSeries {
    /// Counts a probe of the worker `labels` names that returned a result and, unless it
    /// failed, observes its duration. The container name and pod UID label values are the
    /// key's own text, shared rather than copied.
    pub fn observe(&mut self, labels: ProbeLabels<'_>, result: ProbeResult, duration: Duration) {
        let (slot, label) = match result {
            ProbeResult::Success => (0, names::RESULT_SUCCESSFUL),
            ProbeResult::Failure => (1, names::RESULT_FAILED),
            ProbeResult::Unknown => (2, names::RESULT_UNKNOWN),
        };
        let key = labels.key;
        let probe_type = key.kind.as_str();
        let epoch = names::forget_epoch();
        let handles = self.handles.get_or_insert_with(|| {
            Box::new(Handles {
                epoch,
                totals: Default::default(),
                duration: None,
                pod: Arc::from(labels.pod_name()),
                namespace: Arc::from(labels.namespace()),
            })
        });
        if handles.epoch != epoch {
            handles.epoch = epoch;
            handles.totals = Default::default();
            handles.duration = None;
        }
        let Handles { totals, duration: histogram, pod, namespace, .. } = &mut **handles;
        totals[slot]
            .get_or_insert_with(|| {
                metrics::counter!(
                    names::PROBER_PROBE_TOTAL,
                    "probe_type" => probe_type,
                    "result" => label,
                    "container" => key.container_name.clone(),
                    "pod" => pod.clone(),
                    "namespace" => namespace.clone(),
                    "pod_uid" => key.pod_uid.shared(),
                )
            })
            .increment(1);
        if result != ProbeResult::Failure {
            histogram
                .get_or_insert_with(|| {
                    metrics::histogram!(
                        names::PROBER_PROBE_DURATION_SECONDS,
                        "probe_type" => probe_type,
                        "container" => key.container_name.clone(),
                        "pod" => pod.clone(),
                        "namespace" => namespace.clone(),
                    )
                })
                .record(duration.as_secs_f64());
        }
    }
}

/// Counts a probe that errored after its retries and was discarded.
pub fn probe_errored(kind: ProbeKind) {
    metrics::counter!(names::PROBELET_PROBE_ERRORS_TOTAL, "probe_type" => kind.as_str()).increment(1);
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::metrics::PrometheusRegistry;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

    fn pod(uid: &str) -> Pod {
        Pod {
            metadata: ObjectMeta {
                name: Some("web".into()),
                namespace: Some("default".into()),
                uid: Some(uid.into()),
                ..Default::default()
            },
            ..Default::default()
        }
    }

    fn key(uid: &str, container: &str) -> ProbeKey {
        ProbeKey { pod_uid: uid.into(), container_name: container.into(), kind: ProbeKind::Readiness }
    }

    fn lines(registry: &PrometheusRegistry, needle: &str) -> Vec<String> {
        registry.render().lines().filter(|l| l.starts_with(needle)).map(str::to_owned).collect()
    }

    #[test]
    fn kept_handles_count_into_the_registry() {
        let registry = PrometheusRegistry::new();
        let (key, pod) = (key("uid-1", "app"), pod("uid-1"));
        let mut series = ProbeSeries::default();
        metrics::with_local_recorder(&registry, || {
            for _ in 0..3 {
                series.observe(ProbeLabels::new(&key, &pod), ProbeResult::Success, Duration::from_millis(5));
            }
            series.observe(ProbeLabels::new(&key, &pod), ProbeResult::Failure, Duration::from_millis(5));
        });
        assert_eq!(
            lines(&registry, "prober_probe_total{"),
            [
                "prober_probe_total{container=\"app\",namespace=\"default\",pod=\"web\",pod_uid=\"uid-1\",probe_type=\"Readiness\",result=\"failed\"} 1",
                "prober_probe_total{container=\"app\",namespace=\"default\",pod=\"web\",pod_uid=\"uid-1\",probe_type=\"Readiness\",result=\"successful\"} 3",
            ]
        );
        assert_eq!(lines(&registry, "prober_probe_duration_seconds_count").len(), 1);
        assert!(lines(&registry, "prober_probe_duration_seconds_count")[0].ends_with(" 3"));
    }

    #[test]
    fn the_series_share_the_keys_and_the_pods_text() {
        let registry = PrometheusRegistry::new();
        let (key, pod) = (key("uid-1", "app"), pod("uid-1"));
        let mut series = ProbeSeries::default();
        assert!(series.handles.is_none(), "no label text or handles before the first probe");
        let (container_refs, uid_refs) =
            (Arc::strong_count(&key.container_name), Arc::strong_count(&key.pod_uid.shared()));
        metrics::with_local_recorder(&registry, || {
            series.observe(ProbeLabels::new(&key, &pod), ProbeResult::Success, Duration::ZERO);
            series.observe(ProbeLabels::new(&key, &pod), ProbeResult::Failure, Duration::ZERO);
        });
        // The two counters and the histogram hold the key's container name and pod UID, and
        // the pod name the handles took once, not copies of them.
        assert!(Arc::strong_count(&key.container_name) >= container_refs + 3);
        assert!(Arc::strong_count(&key.pod_uid.shared()) >= uid_refs + 2);
        let name = &series.handles.as_ref().expect("looked up").pod;
        assert_eq!(&**name, "web");
        assert!(Arc::strong_count(name) >= 4, "{}", Arc::strong_count(name));
    }

    #[test]
    fn a_worker_that_has_not_probed_holds_no_label_text() {
        // docs/memory.md: a worker keeps one pointer for its metrics until its first probe.
        assert_eq!(std::mem::size_of::<ProbeSeries>(), std::mem::size_of::<usize>());
    }

    /// A worker's exit forgets exactly its own series, found by key: every result and its
    /// duration, and nothing of another worker's.
    #[test]
    fn forget_removes_this_workers_series_and_no_others() {
        let registry = PrometheusRegistry::new();
        let pod = pod("uid-1");
        let (gone, other) = (key("uid-1", "app"), key("uid-1", "sidecar"));
        let (mut gone_series, mut other_series) = (ProbeSeries::default(), ProbeSeries::default());
        metrics::with_local_recorder(&registry, || {
            for result in [ProbeResult::Success, ProbeResult::Failure, ProbeResult::Unknown] {
                gone_series.observe(ProbeLabels::new(&gone, &pod), result, Duration::from_millis(5));
                other_series.observe(ProbeLabels::new(&other, &pod), result, Duration::from_millis(5));
            }
        });
        assert_eq!(lines(&registry, "prober_probe_total{").len(), 6);
        ProbeLabels::new(&gone, &pod).forget_in(&registry);
        let totals = lines(&registry, "prober_probe_total{");
        assert_eq!(totals.len(), 3, "{totals:?}");
        assert!(totals.iter().all(|l| l.contains("container=\"sidecar\"")), "{totals:?}");
        let durations = lines(&registry, "prober_probe_duration_seconds_count");
        assert_eq!(durations.len(), 1, "{durations:?}");
        assert!(durations[0].contains("container=\"sidecar\""), "{durations:?}");
    }

    /// A pod deleted and created again under its name: the old worker's exit forgets the
    /// duration series (it has no `pod_uid`) that the new worker records into; the new worker's
    /// next durations must still be exported.
    #[test]
    fn a_series_forgotten_under_a_worker_is_looked_up_again() {
        let registry = PrometheusRegistry::new();
        let (old_key, old_pod) = (key("uid-old", "app"), pod("uid-old"));
        let (new_key, new_pod) = (key("uid-new", "app"), pod("uid-new"));
        let (mut old, mut new) = (ProbeSeries::default(), ProbeSeries::default());
        metrics::with_local_recorder(&registry, || {
            old.observe(ProbeLabels::new(&old_key, &old_pod), ProbeResult::Success, Duration::from_millis(5));
            new.observe(ProbeLabels::new(&new_key, &new_pod), ProbeResult::Success, Duration::from_millis(5));
        });
        registry.forget(
            names::PROBER_PROBE_DURATION_SECONDS,
            &[("probe_type", "Readiness"), ("container", "app"), ("pod", "web"), ("namespace", "default")],
        );
        assert!(lines(&registry, "prober_probe_duration_seconds_count").is_empty());
        metrics::with_local_recorder(&registry, || {
            new.observe(ProbeLabels::new(&new_key, &new_pod), ProbeResult::Success, Duration::from_millis(5))
        });
        let counts = lines(&registry, "prober_probe_duration_seconds_count");
        assert_eq!(counts.len(), 1, "{counts:?}");
        assert!(counts[0].ends_with(" 1"), "starts again from zero: {counts:?}");
    }
}
