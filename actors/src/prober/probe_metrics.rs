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

use std::cell::RefCell;
use std::sync::Arc;
use std::time::Duration;

use metrics::{Counter, Histogram};

use k8s_openapi::api::core::v1::Pod;

use super::{ProbeKind, ProbeResult};
use crate::metrics::{self as names, PrometheusRegistry, SeriesKind, installed};
use crate::vocabulary::ProbeKey;

/// The labels of one worker's series. The values are shared, not copied: the container name
/// and pod UID are the worker key's own text, and the pod name and namespace are read from the
/// host's pod, taken as shared text only when the worker's first series is looked up (and then
/// shared by all its series). So a worker that has not probed yet holds no label text of its
/// own and no handles (docs/memory.md).
#[derive(Debug)]
pub struct ProbeLabels {
    kind: ProbeKind,
    container: Arc<str>,
    pod_uid: Arc<str>,
    /// The pod, for its name and namespace.
    pod: Arc<Pod>,
    /// The series looked up so far; `None` until the first observation.
    handles: RefCell<Option<Box<Handles>>>,
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
    /// The pod's name and namespace, as the series' label values.
    pod: Arc<str>,
    namespace: Arc<str>,
}

/// A copy names the same series and looks its handles up again when it observes.
impl Clone for ProbeLabels {
    fn clone(&self) -> Self {
        ProbeLabels {
            kind: self.kind,
            container: self.container.clone(),
            pod_uid: self.pod_uid.clone(),
            pod: self.pod.clone(),
            handles: RefCell::new(None),
        }
    }
}

impl ProbeLabels {
    /// The labels of a `kind` worker for `container` of `pod`: `probe_type`, `container`, `pod`,
    /// `namespace`, `pod_uid`.
    pub fn new(kind: ProbeKind, pod: Arc<Pod>, container: &str) -> Self {
        let pod_uid = Arc::from(pod.metadata.uid.as_deref().unwrap_or_default());
        ProbeLabels { kind, container: Arc::from(container), pod_uid, pod, handles: RefCell::new(None) }
    }

    /// The labels of the worker `key` of `pod`: the container name and pod UID are the key's
    /// own text, shared rather than copied (docs/memory.md).
    pub fn for_worker(key: &ProbeKey, pod: &Arc<Pod>) -> Self {
        ProbeLabels {
            kind: key.kind,
            container: key.container_name.clone(),
            pod_uid: key.pod_uid.shared(),
            pod: pod.clone(),
            handles: RefCell::new(None),
        }
    }

    /// The pod as it is now (an in-place probe update hands the worker a newer copy): the old
    /// one is not kept alive by the labels. The name and namespace of a pod UID never change,
    /// so the series already looked up stay this worker's.
    pub fn set_pod(&mut self, pod: Arc<Pod>) {
        self.pod = pod;
    }

    fn pod_name(&self) -> &str {
        self.pod.metadata.name.as_deref().unwrap_or_default()
    }

    fn namespace(&self) -> &str {
        self.pod.metadata.namespace.as_deref().unwrap_or_default()
    }

    /// Counts a probe that returned a result and, unless it failed, observes its duration.
    pub fn observe(&self, result: ProbeResult, duration: Duration) {
        let (slot, label) = match result {
            ProbeResult::Success => (0, names::RESULT_SUCCESSFUL),
            ProbeResult::Failure => (1, names::RESULT_FAILED),
            ProbeResult::Unknown => (2, names::RESULT_UNKNOWN),
        };
        let probe_type = self.kind.as_str();
        let epoch = names::forget_epoch();
        let mut kept = self.handles.borrow_mut();
        let handles = kept.get_or_insert_with(|| {
            Box::new(Handles {
                epoch,
                totals: Default::default(),
                duration: None,
                pod: Arc::from(self.pod_name()),
                namespace: Arc::from(self.namespace()),
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
                    "container" => self.container.clone(),
                    "pod" => pod.clone(),
                    "namespace" => namespace.clone(),
                    "pod_uid" => self.pod_uid.clone(),
                )
            })
            .increment(1);
        if result != ProbeResult::Failure {
            histogram
                .get_or_insert_with(|| {
                    metrics::histogram!(
                        names::PROBER_PROBE_DURATION_SECONDS,
                        "probe_type" => probe_type,
                        "container" => self.container.clone(),
                        "pod" => pod.clone(),
                        "namespace" => namespace.clone(),
                    )
                })
                .record(duration.as_secs_f64());
        }
    }

    /// Deletes this worker's series (upstream deletes the three result series and the
    /// duration series when the worker exits) from the global registry, if one is installed.
    pub fn forget(&self) {
        if let Some(registry) = installed() {
            self.forget_in(registry);
        }
    }

    /// [`ProbeLabels::forget`] in `registry`: each series by its exact key, with the labels in
    /// the order [`ProbeLabels::observe`] creates them, so that an exit costs a few lookups,
    /// not a scan of every worker's series.
    pub fn forget_in(&self, registry: &PrometheusRegistry) {
        let (probe_type, pod, namespace) = (self.kind.as_str(), self.pod_name(), self.namespace());
        for result in [names::RESULT_SUCCESSFUL, names::RESULT_FAILED, names::RESULT_UNKNOWN] {
            registry.forget_exact(
                SeriesKind::Counter,
                names::PROBER_PROBE_TOTAL,
                &[
                    ("probe_type", probe_type),
                    ("result", result),
                    ("container", &self.container),
                    ("pod", pod),
                    ("namespace", namespace),
                    ("pod_uid", &self.pod_uid),
                ],
            );
        }
        registry.forget_exact(
            SeriesKind::Histogram,
            names::PROBER_PROBE_DURATION_SECONDS,
            &[
                ("probe_type", probe_type),
                ("container", &self.container),
                ("pod", pod),
                ("namespace", namespace),
            ],
        );
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

    fn pod(uid: &str) -> Arc<Pod> {
        Arc::new(Pod {
            metadata: ObjectMeta {
                name: Some("web".into()),
                namespace: Some("default".into()),
                uid: Some(uid.into()),
                ..Default::default()
            },
            ..Default::default()
        })
    }

    fn lines(registry: &PrometheusRegistry, needle: &str) -> Vec<String> {
        registry.render().lines().filter(|l| l.starts_with(needle)).map(str::to_owned).collect()
    }

    #[test]
    fn kept_handles_count_into_the_registry() {
        let registry = PrometheusRegistry::new();
        let labels = ProbeLabels::new(ProbeKind::Readiness, pod("uid-1"), "app");
        metrics::with_local_recorder(&registry, || {
            for _ in 0..3 {
                labels.observe(ProbeResult::Success, Duration::from_millis(5));
            }
            labels.observe(ProbeResult::Failure, Duration::from_millis(5));
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
    fn a_clone_and_the_series_share_the_label_strings() {
        let registry = PrometheusRegistry::new();
        let pod = pod("uid-1");
        let labels = ProbeLabels::new(ProbeKind::Readiness, pod.clone(), "app");
        let copy = labels.clone();
        for (a, b) in [(&labels.container, &copy.container), (&labels.pod_uid, &copy.pod_uid)] {
            assert!(Arc::ptr_eq(a, b), "{a}: copied, not shared");
        }
        assert!(Arc::ptr_eq(&labels.pod, &copy.pod));
        assert!(labels.handles.borrow().is_none(), "no label text or handles before the first probe");
        metrics::with_local_recorder(&registry, || {
            labels.observe(ProbeResult::Success, Duration::ZERO);
            labels.observe(ProbeResult::Failure, Duration::ZERO);
        });
        // The two counters and the histogram hold the pod name the handles took, not copies.
        let handles = labels.handles.borrow();
        let name = &handles.as_ref().expect("looked up").pod;
        assert_eq!(&**name, "web");
        assert!(Arc::strong_count(name) >= 4, "{}", Arc::strong_count(name));
    }

    /// A worker's exit forgets exactly its own series, found by key: every result and its
    /// duration, and nothing of another worker's.
    #[test]
    fn a_workers_labels_share_its_keys_text() {
        let key =
            ProbeKey { pod_uid: "uid-1".into(), container_name: "app".into(), kind: ProbeKind::Readiness };
        let pod = pod("uid-1");
        let labels = ProbeLabels::for_worker(&key, &pod);
        assert!(Arc::ptr_eq(&labels.container, &key.container_name));
        assert!(Arc::ptr_eq(&labels.pod_uid, &key.pod_uid.shared()));
        assert!(Arc::ptr_eq(&labels.pod, &pod), "the host's pod, not a copy");
        assert_eq!((labels.pod_name(), labels.namespace()), ("web", "default"));
    }

    #[test]
    fn a_worker_that_has_not_probed_holds_no_label_text() {
        // docs/memory.md: the labels of a worker waiting for its container are the key's text
        // and the host's pod, nothing of their own.
        assert!(std::mem::size_of::<ProbeLabels>() <= 64, "{}", std::mem::size_of::<ProbeLabels>());
    }

    #[test]
    fn forget_removes_this_workers_series_and_no_others() {
        let registry = PrometheusRegistry::new();
        let gone = ProbeLabels::new(ProbeKind::Readiness, pod("uid-1"), "app");
        let other = ProbeLabels::new(ProbeKind::Readiness, pod("uid-1"), "sidecar");
        metrics::with_local_recorder(&registry, || {
            for result in [ProbeResult::Success, ProbeResult::Failure, ProbeResult::Unknown] {
                gone.observe(result, Duration::from_millis(5));
                other.observe(result, Duration::from_millis(5));
            }
        });
        assert_eq!(lines(&registry, "prober_probe_total{").len(), 6);
        gone.forget_in(&registry);
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
        let old = ProbeLabels::new(ProbeKind::Readiness, pod("uid-old"), "app");
        let new = ProbeLabels::new(ProbeKind::Readiness, pod("uid-new"), "app");
        metrics::with_local_recorder(&registry, || {
            old.observe(ProbeResult::Success, Duration::from_millis(5));
            new.observe(ProbeResult::Success, Duration::from_millis(5));
        });
        registry.forget(
            names::PROBER_PROBE_DURATION_SECONDS,
            &[("probe_type", "Readiness"), ("container", "app"), ("pod", "web"), ("namespace", "default")],
        );
        assert!(lines(&registry, "prober_probe_duration_seconds_count").is_empty());
        metrics::with_local_recorder(&registry, || {
            new.observe(ProbeResult::Success, Duration::from_millis(5))
        });
        let counts = lines(&registry, "prober_probe_duration_seconds_count");
        assert_eq!(counts.len(), 1, "{counts:?}");
        assert!(counts[0].ends_with(" 1"), "starts again from zero: {counts:?}");
    }
}
