//! The one condition readiness-gate mode owns: what it should say, whether it changed, and the
//! request body that writes it (server-side apply of that condition alone, beside the
//! kubelet's own writes; docs/readiness-gates.md says why).

use k8s_openapi::api::core::v1::{Pod, PodCondition};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use serde_json::{Value, json};

/// The condition type the agent owns; a pod opts in by listing it in `spec.readinessGates`.
pub const GATE_CONDITION: &str = "probelet.dev/ready";

/// The field manager of the agent's writes (`managedFields` shows it as the condition's owner).
pub const FIELD_MANAGER: &str = "probelet";

/// Every gate probe succeeded.
pub const REASON_PROBES_SUCCEEDED: &str = "ReadinessProbesSucceeded";
/// At least one gate probe has not succeeded (failed, or not run yet).
pub const REASON_PROBES_FAILED: &str = "ReadinessProbesFailed";
/// Not every container of the pod runs, so the gate probes do not run.
pub const REASON_CONTAINERS_NOT_RUNNING: &str = "ContainersNotRunning";
/// The annotation is missing or cannot be used; the message says why.
pub const REASON_INVALID_PROBES: &str = "InvalidReadinessProbes";

/// What the gate probes say about the pod, before it is a condition.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Verdict {
    /// Every gate probe's latest result is Success.
    Ready { probes: usize },
    /// These probes have not succeeded; `pending` when none failed but some have no result
    /// yet (the condition already written is then kept rather than turned False).
    NotReady { unready: Vec<String>, pending: bool },
    /// These containers of the pod do not run.
    ContainersNotRunning { containers: Vec<String> },
    /// The annotation cannot be used.
    Invalid(String),
}

/// The condition's status, reason and message.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Desired {
    pub status: &'static str,
    pub reason: &'static str,
    pub message: String,
}

/// What to write for a verdict, given the condition the pod has now; `None` keeps it.
pub fn desired(verdict: &Verdict, current: Option<&PodCondition>) -> Option<Desired> {
    let (status, reason, message) = match verdict {
        Verdict::Ready { probes } => {
            ("True", REASON_PROBES_SUCCEEDED, format!("{probes} of {probes} readiness probes succeeded"))
        }
        // After an agent restart every probe starts without a result: the condition written
        // before stays until they have run, rather than going False for a period.
        Verdict::NotReady { pending: true, .. } if current.is_some() => return None,
        Verdict::NotReady { unready, .. } => (
            "False",
            REASON_PROBES_FAILED,
            format!("readiness probes with unready status: [{}]", bounded_list(unready)),
        ),
        Verdict::ContainersNotRunning { containers } => (
            "False",
            REASON_CONTAINERS_NOT_RUNNING,
            format!("containers not running: [{}]", bounded_list(containers)),
        ),
        Verdict::Invalid(why) => ("False", REASON_INVALID_PROBES, why.clone()),
    };
    Some(Desired { status, reason, message })
}

/// The most of a message's list of names: an annotation may list thousands of probes, and the
/// message is written again whenever the list changes.
pub const LIST_BYTES: usize = 1024;

/// `names` joined by spaces, as many as fit in [`LIST_BYTES`], then `… and N more`.
fn bounded_list(names: &[String]) -> String {
    let mut list = String::new();
    for (i, name) in names.iter().enumerate() {
        let sep = usize::from(i > 0);
        if list.len() + sep + name.len() > LIST_BYTES {
            list.push_str(&format!(" … and {} more", names.len() - i));
            return list;
        }
        if sep == 1 {
            list.push(' ');
        }
        list.push_str(name);
    }
    list
}

/// The condition to write, or `None` when `current` already says the same. The transition
/// time moves only when the status does; `observed_generation` is written where the server
/// keeps it (see [`observed_generation`]).
pub fn next_condition(
    current: Option<&PodCondition>,
    desired: &Desired,
    observed_generation: Option<i64>,
    now: Time,
) -> Option<PodCondition> {
    let same = current.is_some_and(|c| {
        c.status == desired.status
            && c.reason.as_deref() == Some(desired.reason)
            && c.message.as_deref() == Some(desired.message.as_str())
            && c.observed_generation == observed_generation
    });
    if same {
        return None;
    }
    let last_transition_time = match current {
        Some(c) if c.status == desired.status && c.last_transition_time.is_some() => {
            c.last_transition_time.clone()
        }
        _ => Some(now),
    };
    Some(PodCondition {
        type_: GATE_CONDITION.to_owned(),
        status: desired.status.to_owned(),
        reason: Some(desired.reason.to_owned()),
        message: Some(desired.message.clone()),
        last_transition_time,
        last_probe_time: None,
        observed_generation,
    })
}

/// The pod's generation, when the server keeps `observedGeneration` on pod conditions: the
/// pod's status or another condition already carries one (the kubelet of a server with pod
/// generation tracking writes it). An older server does not know the field and would drop it
/// with a warning.
pub fn observed_generation(pod: &Pod) -> Option<i64> {
    let status = pod.status.as_ref()?;
    let tracked = status.observed_generation.is_some()
        || status
            .conditions
            .iter()
            .flatten()
            .any(|c| c.type_ != GATE_CONDITION && c.observed_generation.is_some());
    tracked.then_some(pod.metadata.generation).flatten()
}

/// The gate condition as the pod has it now.
pub fn current_condition(pod: &Pod) -> Option<&PodCondition> {
    pod.status.as_ref()?.conditions.as_ref()?.iter().find(|c| c.type_ == GATE_CONDITION)
}

/// The server-side apply configuration that writes `condition` and nothing else. The UID makes
/// it a precondition: `metadata.uid` is immutable, so a pod recreated under the same name
/// rejects the write instead of taking the old pod's condition.
pub fn apply_body(name: &str, uid: &str, condition: &PodCondition) -> Value {
    json!({
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": { "name": name, "uid": uid },
        "status": { "conditions": [condition] },
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::PodStatus;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
    use k8s_openapi::jiff::Timestamp;

    /// Thousands of unready probes make a message of about a kilobyte, not of every name.
    #[test]
    fn a_long_list_of_names_is_cut_and_counted() {
        let names: Vec<String> = (0..2400).map(|i| format!("{i:0>63}")).collect();
        let verdict = Verdict::NotReady { unready: names.clone(), pending: false };
        let message = desired(&verdict, None).unwrap().message;
        assert!(message.len() < LIST_BYTES + 100, "{} bytes", message.len());
        assert!(message.ends_with(" … and 2384 more]"), "{message}");
        assert!(
            message.starts_with(&format!("readiness probes with unready status: [{} {}", names[0], names[1]))
        );
        let few = Verdict::NotReady { unready: vec!["a".into(), "b".into()], pending: false };
        assert_eq!(desired(&few, None).unwrap().message, "readiness probes with unready status: [a b]");
    }

    fn at(s: &str) -> Time {
        Time(s.parse::<Timestamp>().unwrap())
    }

    fn written(status: &str, reason: &str, message: &str, since: &str) -> PodCondition {
        PodCondition {
            type_: GATE_CONDITION.into(),
            status: status.into(),
            reason: Some(reason.into()),
            message: Some(message.into()),
            last_transition_time: Some(at(since)),
            ..Default::default()
        }
    }

    #[test]
    fn verdicts() {
        let ready = desired(&Verdict::Ready { probes: 2 }, None).unwrap();
        assert_eq!(
            (ready.status, ready.reason, ready.message.as_str()),
            ("True", "ReadinessProbesSucceeded", "2 of 2 readiness probes succeeded")
        );
        let failed = Verdict::NotReady { unready: vec!["backend".into(), "db".into()], pending: false };
        let failed = desired(&failed, None).unwrap();
        assert_eq!(
            (failed.status, failed.reason, failed.message.as_str()),
            ("False", "ReadinessProbesFailed", "readiness probes with unready status: [backend db]")
        );
        let waiting =
            desired(&Verdict::ContainersNotRunning { containers: vec!["app".into()] }, None).unwrap();
        assert_eq!(
            (waiting.reason, waiting.message.as_str()),
            ("ContainersNotRunning", "containers not running: [app]")
        );
        let invalid = desired(&Verdict::Invalid("annotation x: bad".into()), None).unwrap();
        assert_eq!(
            (invalid.status, invalid.reason, invalid.message.as_str()),
            ("False", "InvalidReadinessProbes", "annotation x: bad")
        );
    }

    #[test]
    fn probes_without_results_keep_what_was_written() {
        let pending = Verdict::NotReady { unready: vec!["backend".into()], pending: true };
        let before = written(
            "True",
            REASON_PROBES_SUCCEEDED,
            "1 of 1 readiness probes succeeded",
            "2026-01-01T00:00:00Z",
        );
        assert_eq!(desired(&pending, Some(&before)), None, "kept across an agent restart");
        assert_eq!(desired(&pending, None).unwrap().status, "False", "nothing written yet: False");
    }

    #[test]
    fn an_unchanged_condition_is_not_written_and_the_transition_time_moves_with_the_status() {
        let now = at("2026-01-01T00:01:00Z");
        let ready = desired(&Verdict::Ready { probes: 1 }, None).unwrap();
        let first = next_condition(None, &ready, None, now.clone()).unwrap();
        assert_eq!(first.last_transition_time, Some(now.clone()));
        assert_eq!(next_condition(Some(&first), &ready, None, at("2026-01-01T00:02:00Z")), None);

        // Same status, new message: rewritten, transition time kept.
        let two = desired(&Verdict::Ready { probes: 2 }, None).unwrap();
        let second = next_condition(Some(&first), &two, None, at("2026-01-01T00:03:00Z")).unwrap();
        assert_eq!(second.last_transition_time, Some(now));
        assert_eq!(second.message.as_deref(), Some("2 of 2 readiness probes succeeded"));

        // Status flips: the transition time moves.
        let failed = desired(&Verdict::NotReady { unready: vec!["a".into()], pending: false }, None).unwrap();
        let third = next_condition(Some(&second), &failed, None, at("2026-01-01T00:04:00Z")).unwrap();
        assert_eq!(third.last_transition_time, Some(at("2026-01-01T00:04:00Z")));
        assert_eq!(third.status, "False");

        // A new generation to observe is a change too.
        let fourth = next_condition(Some(&third), &failed, Some(3), at("2026-01-01T00:05:00Z")).unwrap();
        assert_eq!(fourth.observed_generation, Some(3));
        assert_eq!(fourth.last_transition_time, third.last_transition_time);
    }

    #[test]
    fn observed_generation_only_where_the_server_keeps_it() {
        let mut pod = Pod {
            metadata: ObjectMeta { generation: Some(4), ..Default::default() },
            status: Some(PodStatus {
                conditions: Some(vec![PodCondition {
                    type_: "Ready".into(),
                    status: "True".into(),
                    ..Default::default()
                }]),
                ..Default::default()
            }),
            ..Default::default()
        };
        assert_eq!(observed_generation(&pod), None, "no sign the server tracks it");
        pod.status.as_mut().unwrap().observed_generation = Some(4);
        assert_eq!(observed_generation(&pod), Some(4));
        pod.status.as_mut().unwrap().observed_generation = None;
        pod.status.as_mut().unwrap().conditions.as_mut().unwrap()[0].observed_generation = Some(3);
        assert_eq!(observed_generation(&pod), Some(4), "a kubelet condition carries one");
    }

    #[test]
    fn the_apply_body_holds_the_condition_alone() {
        let condition = written(
            "True",
            REASON_PROBES_SUCCEEDED,
            "1 of 1 readiness probes succeeded",
            "2026-01-01T00:00:00Z",
        );
        let body = apply_body("web", "uid-1", &condition);
        assert_eq!(
            body,
            json!({
                "apiVersion": "v1",
                "kind": "Pod",
                "metadata": {"name": "web", "uid": "uid-1"},
                "status": {"conditions": [{
                    "type": "probelet.dev/ready",
                    "status": "True",
                    "reason": "ReadinessProbesSucceeded",
                    "message": "1 of 1 readiness probes succeeded",
                    "lastTransitionTime": "2026-01-01T00:00:00Z",
                }]},
            })
        );
    }
}
