//! Probe timing extensions: millisecond periods, timeouts and initial delays, and a readiness
//! start interval, set per probe through the pod annotation [`PROBE_TIMING_ANNOTATION`]. The
//! kubelet has no counterpart (KEP-3066, sub-second probes, is still a proposal); the semantics,
//! the floor and the errors are in `docs/probe-timing.md`.
//!
//! This module owns the annotation's format ([`ProbeTiming`]), its parsing and validation
//! against the pod ([`probe_timings`]) and the effective durations a worker runs with
//! ([`EffectiveTiming`]). Without the annotation every value is the kubelet's.

use std::collections::BTreeMap;
use std::fmt;
use std::time::Duration;

use k8s_openapi::api::core::v1::{Container, Pod, Probe};
use serde::{Deserialize, Serialize};

use super::ProbeKind;
use crate::status::is_restartable_init_container;

/// The pod annotation holding the timing extensions, as JSON:
/// `{"<container>": {"readiness"|"liveness"|"startup": {"periodMs": 250, …}}}`.
pub const PROBE_TIMING_ANNOTATION: &str = "probelet.dev/probe-timing";

/// The event reason of the Warning a host records for a pod whose timing annotation is invalid.
pub const EVENT_INVALID_PROBE_TIMING: &str = "InvalidProbeTiming";

/// The shortest `periodMs` and `startIntervalMs` accepted, in milliseconds.
pub const MIN_PERIOD_MS: u32 = 100;

/// The shortest `timeoutMs` accepted, in milliseconds.
pub const MIN_TIMEOUT_MS: u32 = 10;

/// The kubelet's period when `periodSeconds` is unset or not positive.
const DEFAULT_PERIOD: Duration = Duration::from_secs(10);

/// One probe's timing extensions. Every field is optional; a field that is set replaces the
/// probe's corresponding seconds field (it is not added to it).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ProbeTiming {
    /// Replaces `periodSeconds`: probe every this many milliseconds (at least [`MIN_PERIOD_MS`]).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub period_ms: Option<u32>,
    /// Replaces `timeoutSeconds`: the probe's timeout in milliseconds (at least
    /// [`MIN_TIMEOUT_MS`]; it may exceed the period, as `timeoutSeconds` may).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub timeout_ms: Option<u32>,
    /// Replaces `initialDelaySeconds`: no probe before the container has run this many
    /// milliseconds.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub initial_delay_ms: Option<u32>,
    /// Readiness only: until the container's first readiness success, probe every this many
    /// milliseconds instead of every period (at least [`MIN_PERIOD_MS`]).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub start_interval_ms: Option<u32>,
}

/// A container's entry in the annotation: one timing per probe type.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct ContainerTimings {
    readiness: Option<ProbeTiming>,
    liveness: Option<ProbeTiming>,
    startup: Option<ProbeTiming>,
}

/// The pod's validated timing extensions, by container name and probe type.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ProbeTimings(BTreeMap<(String, ProbeKind), ProbeTiming>);

impl ProbeTimings {
    /// The timing of the container's probe of `kind`, if the annotation sets one.
    pub fn get(&self, container: &str, kind: ProbeKind) -> Option<&ProbeTiming> {
        self.0.get(&(container.to_owned(), kind))
    }

    /// Whether the annotation sets no timing at all.
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
}

/// Why the timing annotation was rejected: the JSON path inside the annotation's value (`.` for
/// the value itself) and what is wrong there.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub struct TimingError {
    /// Where in the annotation's JSON: `app.readiness.periodMs`, or `.` for the whole value.
    pub path: String,
    /// What is wrong, for a person to read.
    pub reason: String,
}

impl fmt::Display for TimingError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // serde_path_to_error says `?` where a syntax error left no path; `detail` drops it.
        write!(f, "annotation {PROBE_TIMING_ANNOTATION}: {}", self.detail())
    }
}

impl TimingError {
    /// The error without the annotation's name: `path: reason`, or only the reason when it is
    /// about the whole value (for messages that name the annotation themselves).
    pub fn detail(&self) -> String {
        if matches!(self.path.as_str(), "" | "." | "?") {
            self.reason.clone()
        } else {
            format!("{}: {}", self.path, self.reason)
        }
    }

    fn at(path: impl Into<String>, reason: impl Into<String>) -> Self {
        TimingError { path: path.into(), reason: reason.into() }
    }
}

/// Parses and validates the pod's [`PROBE_TIMING_ANNOTATION`]: no annotation gives no
/// timings. Rejected: a value that is not the JSON object described there (unknown fields and
/// probe types included), a container that is neither a container nor a sidecar of the pod, a
/// timing for a probe the container does not define, a start interval on anything but
/// readiness, and values below the floor.
pub fn probe_timings(pod: &Pod) -> Result<ProbeTimings, TimingError> {
    let Some(value) = pod.metadata.annotations.as_ref().and_then(|a| a.get(PROBE_TIMING_ANNOTATION)) else {
        return Ok(ProbeTimings::default());
    };
    let parsed: BTreeMap<String, ContainerTimings> =
        serde_path_to_error::deserialize(&mut serde_json::Deserializer::from_str(value))
            .map_err(|e| TimingError::at(e.path().to_string(), e.inner().to_string()))?;
    let mut timings = BTreeMap::new();
    for (name, entry) in parsed {
        let Some(container) = probed_container(pod, &name) else {
            return Err(TimingError::at(
                name.clone(),
                format!("the pod has no container or sidecar named {name:?}"),
            ));
        };
        let kinds = [
            (ProbeKind::Readiness, "readiness", entry.readiness),
            (ProbeKind::Liveness, "liveness", entry.liveness),
            (ProbeKind::Startup, "startup", entry.startup),
        ];
        for (kind, field, timing) in kinds {
            let Some(timing) = timing else { continue };
            let path = format!("{name}.{field}");
            if kind.probe_of(container).is_none() {
                return Err(TimingError::at(path, format!("container {name:?} has no {field} probe")));
            }
            timing.validate(kind, &path)?;
            timings.insert((name.clone(), kind), timing);
        }
    }
    Ok(ProbeTimings(timings))
}

impl ProbeTiming {
    /// Checks the floor and that a start interval is only on a readiness probe, for a timing
    /// of a probe of `kind` found at `path` (the JSON path errors start with). For timings that
    /// come from elsewhere than [`PROBE_TIMING_ANNOTATION`]; [`probe_timings`] calls it.
    pub fn validate(&self, kind: ProbeKind, path: &str) -> Result<(), TimingError> {
        let floors = [
            ("periodMs", self.period_ms, MIN_PERIOD_MS),
            ("startIntervalMs", self.start_interval_ms, MIN_PERIOD_MS),
            ("timeoutMs", self.timeout_ms, MIN_TIMEOUT_MS),
        ];
        for (field, value, floor) in floors {
            if let Some(value) = value.filter(|v| *v < floor) {
                return Err(TimingError::at(
                    format!("{path}.{field}"),
                    format!("{value} is below the floor of {floor} ms"),
                ));
            }
        }
        if self.start_interval_ms.is_some() && kind != ProbeKind::Readiness {
            return Err(TimingError::at(
                format!("{path}.startIntervalMs"),
                "a start interval is only supported on readiness probes",
            ));
        }
        Ok(())
    }
}

/// The container of that name the prober manager probes: a regular container or a sidecar.
fn probed_container<'a>(pod: &'a Pod, name: &str) -> Option<&'a Container> {
    let spec = pod.spec.as_ref()?;
    let sidecars = spec.init_containers.iter().flatten().filter(|c| is_restartable_init_container(c));
    spec.containers.iter().chain(sidecars).find(|c| c.name == name)
}

/// The durations a worker runs a probe with: the probe's seconds fields (with the kubelet's
/// defaults for unset or non-positive values), each replaced by its millisecond field when the
/// timing sets one.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct EffectiveTiming {
    /// How often to probe.
    pub period: Duration,
    /// How long one probe may take.
    pub timeout: Duration,
    /// No probe before the container has run this long. `None`: the seconds field applies, with
    /// the kubelet's whole-second comparison (see [`super::do_probe::WorkerSpec`]).
    pub initial_delay: Option<Duration>,
    /// Readiness only: the period until the container's first readiness success.
    pub start_interval: Option<Duration>,
}

impl EffectiveTiming {
    /// The kubelet's durations for `probe`, replaced where `timing` says so.
    pub fn new(probe: &Probe, timing: Option<&ProbeTiming>) -> Self {
        let timing = timing.copied().unwrap_or_default();
        let ms = |v: u32| Duration::from_millis(u64::from(v));
        let period = probe
            .period_seconds
            .and_then(|p| u64::try_from(p).ok())
            .filter(|p| *p > 0)
            .map_or(DEFAULT_PERIOD, Duration::from_secs);
        EffectiveTiming {
            period: timing.period_ms.map_or(period, ms),
            timeout: timing.timeout_ms.map_or_else(|| super::probe_timeout(probe), ms),
            initial_delay: timing.initial_delay_ms.map(ms),
            start_interval: timing.start_interval_ms.map(ms),
        }
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use k8s_openapi::api::core::v1::{ExecAction, PodSpec};
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

    use super::*;

    fn probe() -> Probe {
        Probe { exec: Some(ExecAction { command: Some(vec!["true".into()]) }), ..Default::default() }
    }

    fn pod(annotation: Option<&str>) -> Pod {
        let app = Container {
            name: "app".into(),
            readiness_probe: Some(probe()),
            liveness_probe: Some(probe()),
            ..Default::default()
        };
        let sidecar = Container {
            name: "proxy".into(),
            restart_policy: Some("Always".into()),
            readiness_probe: Some(probe()),
            ..Default::default()
        };
        let init = Container { name: "setup".into(), ..Default::default() };
        Pod {
            metadata: ObjectMeta {
                name: Some("p".into()),
                annotations: annotation
                    .map(|a| BTreeMap::from([(PROBE_TIMING_ANNOTATION.to_owned(), a.to_owned())])),
                ..Default::default()
            },
            spec: Some(PodSpec {
                containers: vec![app],
                init_containers: Some(vec![init, sidecar]),
                ..Default::default()
            }),
            ..Default::default()
        }
    }

    #[test]
    fn no_annotation_means_no_timings() {
        assert!(probe_timings(&pod(None)).unwrap().is_empty());
    }

    #[test]
    fn parses_every_field_per_container_and_kind() {
        let value = r#"{"app": {"readiness": {"periodMs": 250, "timeoutMs": 100, "initialDelayMs": 0,
            "startIntervalMs": 100}, "liveness": {"periodMs": 500}}, "proxy": {"readiness": {}}}"#;
        let timings = probe_timings(&pod(Some(value))).unwrap();
        let readiness = ProbeTiming {
            period_ms: Some(250),
            timeout_ms: Some(100),
            initial_delay_ms: Some(0),
            start_interval_ms: Some(100),
        };
        assert_eq!(timings.get("app", ProbeKind::Readiness), Some(&readiness));
        assert_eq!(
            timings.get("app", ProbeKind::Liveness),
            Some(&ProbeTiming { period_ms: Some(500), ..Default::default() })
        );
        assert_eq!(timings.get("proxy", ProbeKind::Readiness), Some(&ProbeTiming::default()));
        assert_eq!(timings.get("app", ProbeKind::Startup), None);
    }

    #[test]
    fn rejections_name_the_annotation_and_the_path() {
        let cases = [
            ("not json", "{", "annotation probelet.dev/probe-timing: EOF while parsing an object"),
            ("not an object", "[1]", "annotation probelet.dev/probe-timing: invalid type: sequence"),
            (
                "unknown field",
                r#"{"app": {"readiness": {"periodMS": 250}}}"#,
                "annotation probelet.dev/probe-timing: app.readiness.periodMS: unknown field `periodMS`, expected one of `periodMs`",
            ),
            (
                "unknown probe type",
                r#"{"app": {"ready": {}}}"#,
                "annotation probelet.dev/probe-timing: app.ready: unknown field `ready`, expected one of `readiness`, `liveness`, `startup`",
            ),
            (
                "negative",
                r#"{"app": {"readiness": {"periodMs": -5}}}"#,
                "annotation probelet.dev/probe-timing: app.readiness.periodMs: invalid value: integer `-5`",
            ),
            (
                "a string",
                r#"{"app": {"readiness": {"timeoutMs": "100"}}}"#,
                "annotation probelet.dev/probe-timing: app.readiness.timeoutMs: invalid type: string",
            ),
            (
                "unknown container",
                r#"{"web": {"readiness": {}}}"#,
                r#"annotation probelet.dev/probe-timing: web: the pod has no container or sidecar named "web""#,
            ),
            (
                "an init container is not probed",
                r#"{"setup": {"readiness": {}}}"#,
                r#"annotation probelet.dev/probe-timing: setup: the pod has no container or sidecar named "setup""#,
            ),
            (
                "probe not defined",
                r#"{"app": {"startup": {"periodMs": 200}}}"#,
                r#"annotation probelet.dev/probe-timing: app.startup: container "app" has no startup probe"#,
            ),
            (
                "start interval on liveness",
                r#"{"app": {"liveness": {"startIntervalMs": 200}}}"#,
                "annotation probelet.dev/probe-timing: app.liveness.startIntervalMs: a start interval is only supported on readiness probes",
            ),
            (
                "period below the floor",
                r#"{"app": {"readiness": {"periodMs": 99}}}"#,
                "annotation probelet.dev/probe-timing: app.readiness.periodMs: 99 is below the floor of 100 ms",
            ),
            (
                "start interval below the floor",
                r#"{"proxy": {"readiness": {"startIntervalMs": 50}}}"#,
                "annotation probelet.dev/probe-timing: proxy.readiness.startIntervalMs: 50 is below the floor of 100 ms",
            ),
            (
                "timeout below the floor",
                r#"{"app": {"readiness": {"timeoutMs": 9}}}"#,
                "annotation probelet.dev/probe-timing: app.readiness.timeoutMs: 9 is below the floor of 10 ms",
            ),
        ];
        for (name, value, want) in cases {
            let err = probe_timings(&pod(Some(value))).unwrap_err().to_string();
            assert!(err.starts_with(want), "{name}: got {err:?}, want it to start with {want:?}");
        }
    }

    #[test]
    fn values_at_the_floor_and_timeouts_above_the_period_are_accepted() {
        let value = r#"{"app": {"readiness": {"periodMs": 100, "startIntervalMs": 100, "timeoutMs": 5000}}}"#;
        assert!(probe_timings(&pod(Some(value))).is_ok());
        let value = r#"{"app": {"liveness": {"timeoutMs": 10}}}"#;
        assert!(probe_timings(&pod(Some(value))).is_ok());
    }

    #[test]
    fn a_timing_from_elsewhere_is_validated_at_its_own_path() {
        let slow_start = ProbeTiming { start_interval_ms: Some(100), ..Default::default() };
        assert_eq!(slow_start.validate(ProbeKind::Readiness, "probes[0]"), Ok(()));
        let err = slow_start.validate(ProbeKind::Startup, "probes[0]").unwrap_err();
        assert_eq!(err.path, "probes[0].startIntervalMs");
        let fast = ProbeTiming { period_ms: Some(99), ..Default::default() };
        assert_eq!(
            fast.validate(ProbeKind::Liveness, "probes[1]").unwrap_err().detail(),
            "probes[1].periodMs: 99 is below the floor of 100 ms"
        );
    }

    #[test]
    fn effective_values_replace_the_seconds_fields() {
        let spec = Probe {
            period_seconds: Some(3),
            timeout_seconds: Some(2),
            initial_delay_seconds: Some(5),
            ..probe()
        };
        let kubelet = EffectiveTiming::new(&spec, None);
        assert_eq!(
            kubelet,
            EffectiveTiming {
                period: Duration::from_secs(3),
                timeout: Duration::from_secs(2),
                initial_delay: None,
                start_interval: None,
            }
        );
        assert_eq!(EffectiveTiming::new(&probe(), None).period, Duration::from_secs(10), "defaults");
        let timing = ProbeTiming {
            period_ms: Some(250),
            timeout_ms: Some(50),
            initial_delay_ms: Some(1500),
            start_interval_ms: Some(100),
        };
        assert_eq!(
            EffectiveTiming::new(&spec, Some(&timing)),
            EffectiveTiming {
                period: Duration::from_millis(250),
                timeout: Duration::from_millis(50),
                initial_delay: Some(Duration::from_millis(1500)),
                start_interval: Some(Duration::from_millis(100)),
            }
        );
        let only_period = ProbeTiming { period_ms: Some(1500), ..Default::default() };
        let effective = EffectiveTiming::new(&spec, Some(&only_period));
        assert_eq!(effective.period, Duration::from_millis(1500));
        assert_eq!(effective.timeout, Duration::from_secs(2), "unset fields keep the seconds value");
    }
}
