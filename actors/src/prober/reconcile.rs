//! What changed between a running worker's probe spec and the pod's new one, and what that
//! change does to the worker (the `MutableContainerProbes` gate, KEP-6318; upstream
//! `prober.Manager.ReconcilePod`). Plain functions: the prober manager and the probe worker
//! apply their answers. docs/prober.md §3.9 has the table they follow.

use k8s_openapi::api::core::v1::{Pod, Probe};

use super::ProbeKind;
use super::timing::EffectiveTiming;

/// The pod annotation naming where a pod came from (upstream `kubetypes.ConfigSourceAnnotationKey`).
pub const CONFIG_SOURCE_ANNOTATION: &str = "kubernetes.io/config.source";

/// The annotation a mirror pod carries (upstream `kubetypes.ConfigMirrorAnnotationKey`).
pub const CONFIG_MIRROR_ANNOTATION: &str = "kubernetes.io/config.mirror";

/// The config source of pods from the API server (upstream `kubetypes.ApiserverSource`).
pub const API_SERVER_SOURCE: &str = "api";

/// The event reason of an applied probe change (KEP-6318).
pub const EVENT_CONTAINER_PROBE_CHANGED: &str = "ContainerProbeChanged";

/// A probe field whose change the worker takes into account, by its API name.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum ProbeField {
    /// The action: `exec`, `httpGet`, `tcpSocket` or `grpc`.
    Handler,
    /// `timeoutSeconds` (or the timing annotation's `timeoutMs`).
    TimeoutSeconds,
    /// `periodSeconds` (or the timing annotation's `periodMs` / `startIntervalMs`).
    PeriodSeconds,
    /// `initialDelaySeconds` (or the timing annotation's `initialDelayMs`).
    InitialDelaySeconds,
    /// `successThreshold`.
    SuccessThreshold,
    /// `failureThreshold`.
    FailureThreshold,
    /// `terminationGracePeriodSeconds`: read by a later probe-triggered kill only.
    TerminationGracePeriodSeconds,
}

impl ProbeField {
    /// The field's name as the event message gives it.
    pub fn as_str(self) -> &'static str {
        match self {
            ProbeField::Handler => "handler",
            ProbeField::TimeoutSeconds => "timeoutSeconds",
            ProbeField::PeriodSeconds => "periodSeconds",
            ProbeField::InitialDelaySeconds => "initialDelaySeconds",
            ProbeField::SuccessThreshold => "successThreshold",
            ProbeField::FailureThreshold => "failureThreshold",
            ProbeField::TerminationGracePeriodSeconds => "terminationGracePeriodSeconds",
        }
    }
}

/// One probe's change between two specs of a pod.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ProbeChange {
    /// The container has this probe now and had none.
    Added,
    /// The container had this probe and has none now (or is gone from the spec).
    Removed,
    /// The probe is still there with these fields changed (never empty).
    Updated(Vec<ProbeField>),
}

/// What an update does to a running worker: the strongest row of the table wins when several
/// fields change together.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct UpdateEffect {
    /// A new handler or timeout: the attempt in flight is invalidated (its result is never
    /// applied) and the new probe runs at once.
    pub restart: bool,
    /// The run of equal results restarts from zero (threshold, handler or timeout changed);
    /// the published result stays.
    pub reset_count: bool,
    /// The period changed: the next probe is due at the last completion + the new period.
    pub reschedule: bool,
    /// The initial delay changed: it applies if the worker has not probed its container yet.
    pub initial_delay: bool,
}

impl UpdateEffect {
    /// The effect of an update that changed `fields`.
    pub fn of(fields: &[ProbeField]) -> Self {
        let has = |f| fields.contains(&f);
        let restart = has(ProbeField::Handler) || has(ProbeField::TimeoutSeconds);
        UpdateEffect {
            restart,
            reset_count: restart || has(ProbeField::SuccessThreshold) || has(ProbeField::FailureThreshold),
            reschedule: has(ProbeField::PeriodSeconds),
            initial_delay: has(ProbeField::InitialDelaySeconds),
        }
    }
}

/// How a probe changed from `old` to `new` (each with its effective timing), or `None` when
/// nothing the worker uses changed. Unset fields are compared as the values they default to,
/// so an API server filling in defaults is no change.
pub fn probe_change(
    old: Option<(&Probe, EffectiveTiming)>,
    new: Option<(&Probe, EffectiveTiming)>,
) -> Option<ProbeChange> {
    match (old, new) {
        (None, None) => None,
        (None, Some(_)) => Some(ProbeChange::Added),
        (Some(_), None) => Some(ProbeChange::Removed),
        (Some((old, old_timing)), Some((new, new_timing))) => {
            let fields = changed_fields(old, old_timing, new, new_timing);
            (!fields.is_empty()).then_some(ProbeChange::Updated(fields))
        }
    }
}

fn changed_fields(
    old: &Probe,
    old_timing: EffectiveTiming,
    new: &Probe,
    new_timing: EffectiveTiming,
) -> Vec<ProbeField> {
    let handler = |p: &Probe| (p.exec.clone(), p.http_get.clone(), p.tcp_socket.clone(), p.grpc.clone());
    let initial_delay = |p: &Probe| p.initial_delay_seconds.unwrap_or(0).max(0);
    let success = |p: &Probe| p.success_threshold.unwrap_or(1).max(1);
    let failure = |p: &Probe| p.failure_threshold.unwrap_or(3).max(1);
    let checks = [
        (ProbeField::Handler, handler(old) != handler(new)),
        (ProbeField::TimeoutSeconds, old_timing.timeout != new_timing.timeout),
        (
            ProbeField::PeriodSeconds,
            old_timing.period != new_timing.period || old_timing.start_interval != new_timing.start_interval,
        ),
        (
            ProbeField::InitialDelaySeconds,
            initial_delay(old) != initial_delay(new) || old_timing.initial_delay != new_timing.initial_delay,
        ),
        (ProbeField::SuccessThreshold, success(old) != success(new)),
        (ProbeField::FailureThreshold, failure(old) != failure(new)),
        (
            ProbeField::TerminationGracePeriodSeconds,
            old.termination_grace_period_seconds != new.termination_grace_period_seconds,
        ),
    ];
    checks.into_iter().filter(|(_, changed)| *changed).map(|(field, _)| field).collect()
}

/// Whether the pod is a static pod (from a source other than the API server) or a mirror pod
/// (upstream `kubetypes.IsStaticPod` / `IsMirrorPod`): their probes change only through their
/// source, never in place. A pod without a source annotation counts as the API server's, so a
/// host's own pods (standalone manifests) are not static here.
pub fn is_static_or_mirror(pod: &Pod) -> bool {
    let Some(annotations) = pod.metadata.annotations.as_ref() else { return false };
    annotations.contains_key(CONFIG_MIRROR_ANNOTATION)
        || annotations.get(CONFIG_SOURCE_ANNOTATION).is_some_and(|source| source != API_SERVER_SOURCE)
}

/// Whether the pod is a mirror pod (upstream `kubetypes.IsMirrorPod`).
pub fn is_mirror(pod: &Pod) -> bool {
    pod.metadata.annotations.as_ref().is_some_and(|a| a.contains_key(CONFIG_MIRROR_ANNOTATION))
}

/// The `ContainerProbeChanged` event message: the container, the probe type and what was
/// done (added, removed, or updated with the changed fields).
pub fn change_message(container: &str, kind: ProbeKind, change: &ProbeChange) -> String {
    match change {
        ProbeChange::Added => format!("{kind} probe of container {container} added"),
        ProbeChange::Removed => format!("{kind} probe of container {container} removed"),
        ProbeChange::Updated(fields) => {
            let names: Vec<&str> = fields.iter().map(|f| f.as_str()).collect();
            format!("{kind} probe of container {container} updated: {}", names.join(", "))
        }
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use std::collections::BTreeMap;

    use k8s_openapi::api::core::v1::{ExecAction, HTTPGetAction};
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
    use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;

    use super::*;

    fn exec(cmd: &str) -> Probe {
        Probe { exec: Some(ExecAction { command: Some(vec![cmd.to_owned()]) }), ..Probe::default() }
    }

    fn change(old: &Probe, new: &Probe) -> Option<ProbeChange> {
        probe_change(
            Some((old, EffectiveTiming::new(old, None))),
            Some((new, EffectiveTiming::new(new, None))),
        )
    }

    #[test]
    fn defaults_filled_in_are_no_change() {
        let old = exec("true");
        let new = Probe {
            period_seconds: Some(10),
            timeout_seconds: Some(1),
            success_threshold: Some(1),
            failure_threshold: Some(3),
            initial_delay_seconds: Some(0),
            ..exec("true")
        };
        assert_eq!(change(&old, &new), None);
    }

    #[test]
    fn each_field_is_named() {
        let old = exec("true");
        let cases = [
            (exec("false"), ProbeField::Handler),
            (Probe { timeout_seconds: Some(5), ..exec("true") }, ProbeField::TimeoutSeconds),
            (Probe { period_seconds: Some(3), ..exec("true") }, ProbeField::PeriodSeconds),
            (Probe { initial_delay_seconds: Some(7), ..exec("true") }, ProbeField::InitialDelaySeconds),
            (Probe { success_threshold: Some(2), ..exec("true") }, ProbeField::SuccessThreshold),
            (Probe { failure_threshold: Some(9), ..exec("true") }, ProbeField::FailureThreshold),
            (
                Probe { termination_grace_period_seconds: Some(4), ..exec("true") },
                ProbeField::TerminationGracePeriodSeconds,
            ),
        ];
        for (new, field) in cases {
            assert_eq!(change(&old, &new), Some(ProbeChange::Updated(vec![field])), "{field:?}");
        }
    }

    #[test]
    fn another_kind_of_handler_is_a_handler_change() {
        let http = Probe {
            http_get: Some(HTTPGetAction { port: IntOrString::Int(80), ..HTTPGetAction::default() }),
            ..Probe::default()
        };
        assert_eq!(change(&exec("true"), &http), Some(ProbeChange::Updated(vec![ProbeField::Handler])));
    }

    #[test]
    fn added_and_removed() {
        let p = exec("true");
        let t = EffectiveTiming::new(&p, None);
        assert_eq!(probe_change(None, Some((&p, t))), Some(ProbeChange::Added));
        assert_eq!(probe_change(Some((&p, t)), None), Some(ProbeChange::Removed));
        assert_eq!(probe_change(None, None), None);
    }

    #[test]
    fn the_strongest_row_wins() {
        let e = UpdateEffect::of(&[ProbeField::PeriodSeconds]);
        assert_eq!(
            e,
            UpdateEffect { restart: false, reset_count: false, reschedule: true, initial_delay: false }
        );
        let e = UpdateEffect::of(&[ProbeField::FailureThreshold]);
        assert!(e.reset_count && !e.restart && !e.reschedule);
        let e = UpdateEffect::of(&[ProbeField::Handler, ProbeField::PeriodSeconds]);
        assert!(e.restart && e.reset_count && e.reschedule);
        let e = UpdateEffect::of(&[ProbeField::TimeoutSeconds]);
        assert!(e.restart && e.reset_count);
        let e = UpdateEffect::of(&[ProbeField::TerminationGracePeriodSeconds]);
        assert_eq!(
            e,
            UpdateEffect { restart: false, reset_count: false, reschedule: false, initial_delay: false }
        );
    }

    #[test]
    fn static_and_mirror_pods() {
        let pod = |pairs: &[(&str, &str)]| Pod {
            metadata: ObjectMeta {
                annotations: Some(
                    pairs.iter().map(|(k, v)| ((*k).to_owned(), (*v).to_owned())).collect::<BTreeMap<_, _>>(),
                ),
                ..ObjectMeta::default()
            },
            ..Pod::default()
        };
        assert!(!is_static_or_mirror(&Pod::default()));
        assert!(!is_static_or_mirror(&pod(&[(CONFIG_SOURCE_ANNOTATION, "api")])));
        assert!(is_static_or_mirror(&pod(&[(CONFIG_SOURCE_ANNOTATION, "file")])));
        assert!(is_static_or_mirror(&pod(&[(CONFIG_SOURCE_ANNOTATION, "http")])));
        assert!(is_static_or_mirror(&pod(&[(CONFIG_MIRROR_ANNOTATION, "abc")])));
        assert!(is_mirror(&pod(&[(CONFIG_MIRROR_ANNOTATION, "abc")])));
        assert!(!is_mirror(&pod(&[(CONFIG_SOURCE_ANNOTATION, "file")])));
    }

    #[test]
    fn event_messages() {
        assert_eq!(
            change_message("web", ProbeKind::Readiness, &ProbeChange::Added),
            "Readiness probe of container web added"
        );
        assert_eq!(
            change_message("web", ProbeKind::Liveness, &ProbeChange::Removed),
            "Liveness probe of container web removed"
        );
        assert_eq!(
            change_message(
                "web",
                ProbeKind::Startup,
                &ProbeChange::Updated(vec![ProbeField::PeriodSeconds, ProbeField::FailureThreshold])
            ),
            "Startup probe of container web updated: periodSeconds, failureThreshold"
        );
    }
}
