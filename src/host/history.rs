//! The last results of every probe, for the agent's `/pods/{namespace}/{name}/probes`.
//! (No upstream counterpart: the kubelet keeps only the current result.)

use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Mutex};

use k8s_openapi::jiff::Timestamp;
use probelet_actors::capacity::ShrinkAfterRemoval;
use probelet_actors::clock::SharedClock;
use probelet_actors::contracts::{PodLookup, ProbeObserver, ProbeRecord};
use probelet_actors::prober::ProbeKind;
use probelet_actors::vocabulary::PodUid;
use serde::Serialize;

/// Results kept per probe.
pub const RESULTS_KEPT: usize = 10;
/// Output kept per result, in bytes.
pub const OUTPUT_KEPT: usize = 1024;

/// One probe run as `/probes` shows it.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ProbeRun {
    pub time: String,
    /// `Success`, `Failure`, `UNKNOWN`, or `Error` when the probe errored and was discarded.
    pub result: String,
    pub duration_seconds: f64,
    /// How long the probe waited for a probe slot before it ran (0 unless the node had as many
    /// probes in flight as the agent allows).
    pub waited_seconds: f64,
    pub output: String,
}

/// The runs of one probe, newest last.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ProbeRuns {
    pub container: String,
    pub probe_type: String,
    pub results: Vec<ProbeRun>,
}

/// One pod's probes, each with its runs: a pod has few (its containers times three kinds), so a
/// list, searched by container name and kind without building a key.
type PodProbes = Vec<(Box<str>, ProbeKind, VecDeque<ProbeRun>)>;

/// Keeps the last [`RESULTS_KEPT`] runs of every probe, by pod: a run, a pod's page and a pod's
/// removal each reach one pod's entry, whatever the number of pods. The lock guards a map
/// update only.
#[derive(Clone)]
pub struct ProbeHistory {
    runs: Arc<Mutex<HashMap<PodUid, PodProbes>>>,
    clock: SharedClock,
    /// When set, runs of pods it does not know are dropped.
    pods: Option<Arc<dyn PodLookup>>,
}

impl ProbeHistory {
    /// A history that keeps the runs of any pod until [`ProbeHistory::remove_pod`].
    pub fn new(clock: SharedClock) -> Self {
        ProbeHistory { runs: Arc::default(), clock, pods: None }
    }

    /// A history that keeps runs only of pods `pods` knows. A probe that finishes after its
    /// pod was removed (its worker stops a moment later) would otherwise bring the pod's entry
    /// back for good: hosts remove the pod from the registry first, then call `remove_pod`.
    pub fn with_pods(clock: SharedClock, pods: Arc<dyn PodLookup>) -> Self {
        ProbeHistory { runs: Arc::default(), clock, pods: Some(pods) }
    }

    /// The runs of every probe of a pod, ordered by container and probe type.
    pub fn pod(&self, pod_uid: &str) -> Vec<ProbeRuns> {
        let Ok(runs) = self.runs.lock() else { return Vec::new() };
        let Some(probes) = runs.get(pod_uid) else { return Vec::new() };
        let mut out: Vec<ProbeRuns> = probes
            .iter()
            .map(|(container, kind, results)| ProbeRuns {
                container: container.to_string(),
                probe_type: kind.as_str().to_owned(),
                results: results.iter().cloned().collect(),
            })
            .collect();
        out.sort_by(|a, b| (&a.container, &a.probe_type).cmp(&(&b.container, &b.probe_type)));
        out
    }

    /// Forgets a pod's runs.
    pub fn remove_pod(&self, pod_uid: &str) {
        if let Ok(mut runs) = self.runs.lock()
            && runs.remove(pod_uid).is_some()
        {
            runs.shrink_after_removal();
        }
    }
}

impl ProbeObserver for ProbeHistory {
    fn observe(&self, record: ProbeRecord<'_>) {
        let run = ProbeRun {
            time: format_time(self.clock.now()),
            result: match &record.result {
                Ok(result) => result.as_str().to_owned(),
                Err(_) => "Error".to_owned(),
            },
            duration_seconds: record.duration.as_secs_f64(),
            waited_seconds: record.waited.as_secs_f64(),
            output: cut(&record.output, OUTPUT_KEPT),
        };
        if let Ok(mut runs) = self.runs.lock() {
            // Checked under the lock: a `remove_pod` that follows the registry removal then
            // either waits for this insert and removes it, or this check sees the pod gone.
            if self.pods.as_ref().is_some_and(|pods| pods.pod_by_uid(&record.pod_uid).is_none()) {
                return;
            }
            // Looked up by the record's borrowed text: an entry is made (and the text copied)
            // only at a probe's first run.
            let probes = match runs.get_mut(&*record.pod_uid) {
                Some(probes) => probes,
                None => runs.entry(PodUid::from(&*record.pod_uid)).or_default(),
            };
            let found = probes
                .iter()
                .position(|(container, kind, _)| **container == *record.container && *kind == record.kind);
            let at = found.unwrap_or_else(|| {
                probes.push((record.container.into(), record.kind, VecDeque::new()));
                probes.len() - 1
            });
            let list = &mut probes[at].2;
            if list.len() == RESULTS_KEPT {
                list.pop_front();
            }
            list.push_back(run);
        }
    }
}

/// RFC 3339 with second precision, as the API shows times.
pub fn format_time(t: Timestamp) -> String {
    t.strftime("%Y-%m-%dT%H:%M:%SZ").to_string()
}

/// At most `max` bytes of `s`, cut on a character boundary.
pub fn cut(s: &str, max: usize) -> String {
    if s.len() <= max {
        return s.to_owned();
    }
    let mut end = max;
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    s[..end].to_owned()
}

#[cfg(test)]
mod tests {
    use super::*;
    use probelet_actors::clock::TokioClock;
    use probelet_actors::prober::ProbeResult;
    use std::time::Duration;

    fn record(i: usize, output: String) -> ProbeRecord<'static> {
        ProbeRecord {
            pod_uid: "u".into(),
            namespace: "ns".into(),
            pod: "p".into(),
            container: "c".into(),
            kind: ProbeKind::Readiness,
            result: if i.is_multiple_of(2) { Ok(ProbeResult::Success) } else { Err("boom".into()) },
            output: output.into(),
            duration: Duration::from_millis(5),
            waited: Duration::ZERO,
        }
    }

    #[tokio::test]
    async fn keeps_the_last_ten_with_cut_output() {
        let history = ProbeHistory::new(Arc::new(TokioClock::starting_at(Timestamp::UNIX_EPOCH)));
        for i in 0..15 {
            history.observe(record(i, format!("{i}").repeat(2000)));
        }
        let runs = history.pod("u");
        assert_eq!(runs.len(), 1);
        let results = &runs[0].results;
        assert_eq!(results.len(), RESULTS_KEPT);
        assert!(results[0].output.starts_with('5'), "oldest kept is run 5");
        assert_eq!(results[9].result, "Success");
        assert_eq!(results[8].result, "Error");
        assert!(results.iter().all(|r| r.output.len() <= OUTPUT_KEPT));
        assert_eq!(results[0].time, "1970-01-01T00:00:00Z");
        history.remove_pod("u");
        assert!(history.pod("u").is_empty());
    }

    #[tokio::test]
    async fn forgets_removed_pods_and_ignores_runs_of_unknown_pods() {
        use k8s_openapi::api::core::v1::Pod;
        use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
        use probelet_actors::contracts::PodRegistry;

        let registry = PodRegistry::new();
        let clock = Arc::new(TokioClock::starting_at(Timestamp::UNIX_EPOCH));
        let history = ProbeHistory::with_pods(clock, Arc::new(registry.clone()));
        history.observe(record(0, "before the pod is known".into()));
        assert!(history.pod("u").is_empty(), "a run of an unknown pod is dropped");

        let pod = Pod {
            metadata: ObjectMeta { uid: Some("u".into()), ..Default::default() },
            ..Default::default()
        };
        registry.upsert(Arc::new(pod));
        history.observe(record(0, "known".into()));
        assert_eq!(history.pod("u")[0].results.len(), 1);

        // The host's delete: registry first, then the history.
        registry.remove("u");
        history.remove_pod("u");
        history.observe(record(0, "a probe that finished late".into()));
        assert!(history.pod("u").is_empty(), "a late run does not bring the deleted pod back");
    }

    #[tokio::test]
    async fn keeps_each_probe_of_each_pod_apart_and_forgets_one_pod_alone() {
        let history = ProbeHistory::new(Arc::new(TokioClock::starting_at(Timestamp::UNIX_EPOCH)));
        let run = |uid: &'static str, container: &'static str, kind, output: &str| {
            history.observe(ProbeRecord {
                pod_uid: uid.into(),
                container: container.into(),
                kind,
                ..record(0, output.to_owned())
            });
        };
        run("u", "web", ProbeKind::Readiness, "1");
        run("u", "web", ProbeKind::Liveness, "2");
        run("u", "app", ProbeKind::Readiness, "3");
        run("v", "web", ProbeKind::Readiness, "4");
        run("u", "web", ProbeKind::Readiness, "5");
        let shown = |uid| {
            history
                .pod(uid)
                .into_iter()
                .map(|p| {
                    let outputs: Vec<String> = p.results.into_iter().map(|r| r.output).collect();
                    (p.container, p.probe_type, outputs.join(","))
                })
                .collect::<Vec<_>>()
        };
        let owned = |c: &str, t: &str, o: &str| (c.to_owned(), t.to_owned(), o.to_owned());
        assert_eq!(
            shown("u"),
            [owned("app", "Readiness", "3"), owned("web", "Liveness", "2"), owned("web", "Readiness", "1,5")]
        );
        assert_eq!(shown("v"), [owned("web", "Readiness", "4")]);
        history.remove_pod("u");
        assert!(shown("u").is_empty());
        assert_eq!(shown("v"), [owned("web", "Readiness", "4")], "another pod's runs stay");
    }

    #[test]
    fn a_burst_of_removed_pods_gives_its_room_back() {
        let history = ProbeHistory::new(Arc::new(TokioClock::starting_at(Timestamp::UNIX_EPOCH)));
        let uids: Vec<String> = (0..2_000).map(|i| format!("pod-{i}")).collect();
        for uid in &uids {
            history.observe(ProbeRecord { pod_uid: uid.as_str().into(), ..record(0, String::new()) });
        }
        for uid in &uids {
            history.remove_pod(uid);
        }
        let runs = history.runs.lock().unwrap();
        assert!(runs.is_empty());
        assert!(runs.capacity() <= 2 * probelet_actors::capacity::KEEP, "{} kept", runs.capacity());
    }

    #[test]
    fn cuts_on_char_boundaries() {
        assert_eq!(cut("héllo", 2), "h");
        assert_eq!(cut("abc", 10), "abc");
    }
}
