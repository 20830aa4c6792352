//! The timing rules: each container's worst-case times ([`timings`]: to Ready, after a kubelet
//! restart, to a liveness kill) and the findings told from them (`time-to-ready`,
//! `liveness-restart`, `killed-before-start`).

use std::fmt::Write as _;

use probelet_actors::prober::ProbeKind;

use super::{
    ContainerContext, EffectiveProbe, Finding, MINIMUM_KILL_GRACE_SECONDS, START_SECONDS_ANNOTATION,
    Severity, Timings, rule,
};

/// The longest gap between the starts of two probes of a failing or slow endpoint: the period,
/// or the timeout when a probe outlasts the period (the ticker keeps one missed tick).
fn interval(p: &EffectiveProbe) -> i64 {
    i64::from(p.period_seconds.max(p.timeout_seconds))
}

/// From a moment the probe becomes able to count (its initial delay has passed and, for
/// liveness and readiness, the container has started) to `runs` results in a row, worst case:
/// the first probe starts less than a period later, the others at most an interval apart, and
/// the last one takes up to its timeout.
fn runs_after(p: &EffectiveProbe, runs: i32) -> i64 {
    let period = i64::from(p.period_seconds);
    let runs = i64::from(runs.max(1));
    period.saturating_add((runs - 1).saturating_mul(interval(p))).saturating_add(i64::from(p.timeout_seconds))
}

fn delay(p: &EffectiveProbe) -> i64 {
    i64::from(p.initial_delay_seconds.max(0))
}

/// The earliest moment after start the probe's `failureThreshold`-th failure can begin: probes
/// from the initial delay on, a period apart, each failing at once.
fn earliest_kill(p: &EffectiveProbe) -> i64 {
    delay(p)
        .saturating_add(i64::from(p.failure_threshold.max(1) - 1).saturating_mul(i64::from(p.period_seconds)))
}

/// A container's timings from its effective probes.
pub fn timings(probes: &[EffectiveProbe]) -> Timings {
    let of = |kind| probes.iter().find(|p| p.kind == kind);
    let (startup, readiness, liveness) =
        (of(ProbeKind::Startup), of(ProbeKind::Readiness), of(ProbeKind::Liveness));
    let started = startup.map_or(0, |s| delay(s).saturating_add(runs_after(s, s.success_threshold)));
    let started_again = startup.map_or(0, |s| runs_after(s, s.success_threshold));
    let ready = |started: i64, delay_counts: bool| match readiness {
        Some(r) => {
            let from = if delay_counts { started.max(delay(r)) } else { started };
            Some(from.saturating_add(runs_after(r, r.success_threshold)))
        }
        None => startup.map(|_| started),
    };
    let detection = liveness.map(|l| runs_after(l, l.failure_threshold));
    let grace =
        liveness.map(|l| l.termination_grace_period_seconds.unwrap_or(0).max(MINIMUM_KILL_GRACE_SECONDS));
    Timings {
        ready_after_start_seconds: ready(started, true),
        ready_after_kubelet_restart_seconds: ready(0, false),
        ready_after_kubelet_restart_rerunning_startup_seconds: startup.and(ready(started_again, false)),
        start_tolerance_seconds: startup.or(liveness).map(earliest_kill),
        liveness_detection_seconds: detection,
        liveness_kill_grace_seconds: grace,
        liveness_restart_seconds: detection.zip(grace).map(|(d, g)| d.saturating_add(g)),
    }
}

impl ContainerContext<'_> {
    pub(super) fn killed_before_start(&self, findings: &mut Vec<Finding>, timings: &Timings) {
        let Some(tolerance) = timings.start_tolerance_seconds else { return };
        let annotation = self.start_annotation.unwrap_or(START_SECONDS_ANNOTATION);
        if let Some(s) = self.probe(ProbeKind::Startup) {
            let Some(start) = self.known_start.filter(|start| *start > tolerance) else { return };
            let needed = needed_failures(start, s);
            findings.push(self.finding(
                Severity::Warning,
                rule::KILLED_BEFORE_START,
                Some(s),
                Some("failureThreshold"),
                format!(
                    "the container takes {start} s to start ({annotation}), but its startupProbe can have it \
                     killed {tolerance} s after start (initialDelaySeconds {} + (failureThreshold {} - 1) × \
                     periodSeconds {}): it would be restarted before it ever answers. A failureThreshold of \
                     {needed} allows {start} s",
                    s.initial_delay_seconds, s.failure_threshold, s.period_seconds
                ),
            ));
            return;
        }
        let Some(l) = self.probe(ProbeKind::Liveness) else { return };
        let formula = format!(
            "initialDelaySeconds {} + (failureThreshold {} - 1) × periodSeconds {}",
            l.initial_delay_seconds, l.failure_threshold, l.period_seconds
        );
        let message = match self.known_start {
            Some(start) if start > tolerance => format!(
                "the container takes {start} s to start ({annotation}), but with no startupProbe its \
                 livenessProbe can have it killed {tolerance} s after start ({formula}): it would be \
                 restarted before it ever answers, over and over (CrashLoopBackOff). Add a startupProbe \
                 with the liveness probe's handler that allows {start} s (periodSeconds {} with \
                 failureThreshold {})",
                l.period_seconds,
                needed_failures(start, &EffectiveProbe { initial_delay_seconds: 0, ..l.clone() })
            ),
            None if l.initial_delay_seconds <= 0 => format!(
                "no startupProbe and initialDelaySeconds 0: the livenessProbe can have the container killed \
                 {tolerance} s after it starts ({formula}). A start that takes longer (a cold cache, \
                 migrations, a busy node) is killed every time and ends in CrashLoopBackOff. Add a \
                 startupProbe, which holds liveness off until the app has answered once, or say how long \
                 the container takes to start in the {START_SECONDS_ANNOTATION} annotation to check against it"
            ),
            _ => return,
        };
        findings.push(self.finding(Severity::Warning, rule::KILLED_BEFORE_START, Some(l), None, message));
    }

    pub(super) fn timing_findings(&self, findings: &mut Vec<Finding>, timings: &Timings) {
        if let (Some(ready), Some(again)) =
            (timings.ready_after_start_seconds, timings.ready_after_kubelet_restart_seconds)
        {
            let mut message = format!("Ready at most {ready} s after the container starts");
            let startup = self.probe(ProbeKind::Startup);
            let readiness = self.probe(ProbeKind::Readiness);
            match (startup, readiness) {
                (Some(s), Some(r)) => {
                    let started = delay(s) + runs_after(s, s.success_threshold);
                    let _ = write!(
                        message,
                        " (the startupProbe succeeds by {started} s; readiness then needs {} probed every {} s)",
                        count(r.success_threshold, "success", "successes"),
                        r.period_seconds
                    );
                }
                (None, Some(r)) => {
                    let _ = write!(
                        message,
                        " (initialDelaySeconds {}, then {} probed every {} s, each taking up to {} s)",
                        r.initial_delay_seconds,
                        count(r.success_threshold, "success", "successes"),
                        r.period_seconds,
                        r.timeout_seconds
                    );
                }
                (Some(_), None) => {
                    message.push_str(" (no readinessProbe: Ready once the startupProbe succeeds)")
                }
                (None, None) => {}
            }
            let _ = write!(
                message,
                ", when the app answers from the start. After a kubelet restart, the kubelet has its own \
                 verdict on a running container within {again} s (probes start at a random point of their \
                 first period)"
            );
            if let Some(rerun) = timings.ready_after_kubelet_restart_rerunning_startup_seconds {
                let _ = write!(
                    message,
                    "; {rerun} s with ChangeContainerStatusOnKubeletRestart, which runs the startupProbe again first"
                );
            }
            findings.push(self.finding(Severity::Info, rule::TIME_TO_READY, None, None, message));
        }
        let (Some(l), Some(detection), Some(grace), Some(total)) = (
            self.probe(ProbeKind::Liveness),
            timings.liveness_detection_seconds,
            timings.liveness_kill_grace_seconds,
            timings.liveness_restart_seconds,
        ) else {
            return;
        };
        let whose = match l.termination_grace_period_seconds {
            Some(g) if g < MINIMUM_KILL_GRACE_SECONDS => "the kubelet's 2 s floor",
            _ if l.defaulted.iter().any(|d| d.starts_with("terminationGracePeriodSeconds")) => {
                "the pod's terminationGracePeriodSeconds; livenessProbe.terminationGracePeriodSeconds would override it for this kill"
            }
            _ => "livenessProbe.terminationGracePeriodSeconds",
        };
        let outcome = if self.restart_policy == "Never" {
            "kills the container (restartPolicy Never: it is not started again)"
        } else {
            "restarts the container"
        };
        findings.push(self.finding(
            Severity::Info,
            rule::LIVENESS_RESTART,
            Some(l),
            None,
            format!(
                "a failing livenessProbe {outcome} at most {total} s after its endpoint breaks: up to \
                 {detection} s to see {} in a row (probed every {} s, each failure taking up to {} s), \
                 then up to {grace} s for the container to stop ({whose})",
                count(l.failure_threshold, "failure", "failures"),
                l.period_seconds.max(l.timeout_seconds),
                l.timeout_seconds
            ),
        ));
    }
}

/// The `failureThreshold` with which `p` lets the container take `start` seconds to start.
fn needed_failures(start: i64, p: &EffectiveProbe) -> i64 {
    let period = i64::from(p.period_seconds.max(1));
    let after_delay = (start - delay(p)).max(0);
    (after_delay + period - 1) / period + 1
}

/// `1 success`, `3 successes`.
fn count(n: i32, one: &str, many: &str) -> String {
    format!("{n} {}", if n == 1 { one } else { many })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::lint::rules::probe::Endpoint;
    use crate::lint::rules::probe_field;
    use crate::lint::rules::tests::*;

    fn probe(
        kind: ProbeKind,
        delay: i32,
        period: i32,
        timeout: i32,
        success: i32,
        failure: i32,
    ) -> EffectiveProbe {
        EffectiveProbe {
            probe: probe_field(kind),
            handler: String::new(),
            initial_delay_seconds: delay,
            timeout_seconds: timeout,
            period_seconds: period,
            success_threshold: success,
            failure_threshold: failure,
            termination_grace_period_seconds: (kind != ProbeKind::Readiness).then_some(30),
            defaulted: Vec::new(),
            kind,
            endpoint: Endpoint::None,
        }
    }

    #[test]
    fn timings_follow_the_worker_loop() {
        use ProbeKind::{Liveness, Readiness, Startup};
        // (case, probes, ready after start, after a kubelet restart, start tolerance, liveness detection)
        type Case = (&'static str, Vec<EffectiveProbe>, Option<i64>, Option<i64>, Option<i64>, Option<i64>);
        let cases: Vec<Case> = vec![
            ("readiness defaults", vec![probe(Readiness, 0, 10, 1, 1, 3)], Some(11), Some(11), None, None),
            // 5 s delay, a tick just missed (< 10 s), two more successes 10 s apart, the last taking 1 s.
            ("delay and successes", vec![probe(Readiness, 5, 10, 1, 3, 3)], Some(36), Some(31), None, None),
            (
                "startup then readiness",
                vec![probe(Startup, 0, 1, 1, 1, 15), probe(Readiness, 0, 2, 1, 1, 3)],
                Some(5),
                Some(3),
                Some(14),
                None,
            ),
            (
                "readiness delay longer than the startup",
                vec![probe(Startup, 0, 10, 1, 1, 3), probe(Readiness, 30, 5, 1, 1, 3)],
                Some(36),
                Some(6),
                Some(20),
                None,
            ),
            (
                "slow probes space the runs",
                vec![probe(Readiness, 0, 2, 5, 2, 3)],
                Some(12),
                Some(12),
                None,
                None,
            ),
            ("startup alone", vec![probe(Startup, 5, 2, 1, 1, 10)], Some(8), Some(0), Some(23), None),
            ("liveness defaults", vec![probe(Liveness, 0, 10, 1, 1, 3)], None, None, Some(20), Some(31)),
            (
                "liveness timeout above period",
                vec![probe(Liveness, 0, 10, 15, 1, 3)],
                None,
                None,
                Some(20),
                Some(55),
            ),
        ];
        for (name, probes, ready, again, tolerance, detection) in cases {
            let t = timings(&probes);
            assert_eq!(t.ready_after_start_seconds, ready, "case {name}");
            assert_eq!(t.ready_after_kubelet_restart_seconds, again, "case {name}");
            assert_eq!(t.start_tolerance_seconds, tolerance, "case {name}");
            assert_eq!(t.liveness_detection_seconds, detection, "case {name}");
            assert_eq!(t.liveness_restart_seconds, detection.map(|d| d + 30), "case {name}");
        }
        // When the startup probe runs again after a restart: its own time first.
        let t = timings(&[probe(Startup, 0, 10, 1, 1, 3), probe(Readiness, 30, 5, 1, 1, 3)]);
        assert_eq!(t.ready_after_kubelet_restart_rerunning_startup_seconds, Some(11 + 6));
        let t = timings(&[probe(Startup, 5, 2, 1, 1, 10)]);
        assert_eq!(t.ready_after_kubelet_restart_rerunning_startup_seconds, Some(3));
        let t = timings(&[probe(Readiness, 0, 10, 1, 1, 3)]);
        assert_eq!(t.ready_after_kubelet_restart_rerunning_startup_seconds, None);
    }

    #[test]
    fn time_to_ready_is_told_for_containers_with_readiness_or_startup() {
        let lint =
            lint_yaml(&web("readinessProbe:\n  httpGet: {path: /, port: http}\n  initialDelaySeconds: 5\n"));
        let found = with_rule(&lint, rule::TIME_TO_READY);
        assert_eq!(found.len(), 1);
        assert_eq!(found[0].severity, Severity::Info);
        assert!(
            found[0].message.starts_with("Ready at most 16 s after the container starts"),
            "{}",
            found[0].message
        );
        assert!(found[0].message.contains("within 11 s"), "{}", found[0].message);
        // Liveness only: Ready when it runs, nothing to tell.
        let lint = lint_yaml(&web(HTTP_LIVENESS));
        assert!(with_rule(&lint, rule::TIME_TO_READY).is_empty());
        assert_eq!(timings_of(&lint, "web").ready_after_start_seconds, None);
    }

    #[test]
    fn liveness_restart_adds_the_grace_period_of_the_kill() {
        let cases = [
            (
                "pod default grace",
                "",
                HTTP_LIVENESS.to_owned(),
                61,
                "the pod's terminationGracePeriodSeconds",
            ),
            (
                "probe-level grace",
                "",
                format!("{HTTP_LIVENESS}  terminationGracePeriodSeconds: 5\n"),
                36,
                "(livenessProbe.terminationGracePeriodSeconds)",
            ),
            (
                "the 2 s floor",
                "terminationGracePeriodSeconds: 0\n",
                HTTP_LIVENESS.to_owned(),
                33,
                "the kubelet's 2 s floor",
            ),
            (
                "never restarted",
                "restartPolicy: Never\n",
                HTTP_LIVENESS.to_owned(),
                61,
                "restartPolicy Never",
            ),
        ];
        for (name, pod, probes, total, says) in cases {
            let lint = lint_yaml(&format!("{pod}{}", web(&probes)));
            let found = with_rule(&lint, rule::LIVENESS_RESTART);
            assert_eq!(found.len(), 1, "case {name}");
            assert!(
                found[0].message.contains(&format!("at most {total} s")),
                "case {name}: {}",
                found[0].message
            );
            assert!(found[0].message.contains(says), "case {name}: {}", found[0].message);
            assert_eq!(timings_of(&lint, "web").liveness_restart_seconds, Some(total), "case {name}");
        }
        let lint = lint_yaml(&web(HTTP_READINESS));
        assert!(with_rule(&lint, rule::LIVENESS_RESTART).is_empty(), "no liveness probe");
        // A sidecar is restarted even in a pod that restarts nothing.
        let lint = lint_yaml(
            "restartPolicy: Never\ninitContainers:\n  - name: proxy\n    image: p\n    restartPolicy: Always\n    \
             livenessProbe:\n      tcpSocket: {port: 1}\ncontainers:\n  - name: app\n    image: a\n",
        );
        let found = with_rule(&lint, rule::LIVENESS_RESTART);
        assert!(
            found[0].message.starts_with("a failing livenessProbe restarts the container"),
            "{}",
            found[0].message
        );
        // A container's own policy wins over the pod's, either way.
        for (pod_policy, own, says) in
            [("Never", "Always", "restarts the container"), ("Always", "Never", "it is not started again")]
        {
            let lint = lint_yaml(&format!(
                "restartPolicy: {pod_policy}\ncontainers:\n  - name: app\n    image: a\n    restartPolicy: {own}\n    \
                 livenessProbe:\n      tcpSocket: {{port: 1}}\n"
            ));
            let found = with_rule(&lint, rule::LIVENESS_RESTART);
            assert!(found[0].message.contains(says), "pod {pod_policy}, own {own}: {}", found[0].message);
        }
    }

    #[test]
    fn killed_before_start() {
        let startup = "startupProbe:\n  httpGet: {path: /healthz, port: http}\n  failureThreshold: 30\n";
        let delayed = format!("{HTTP_LIVENESS}  initialDelaySeconds: 30\n");
        // (case, probes, annotation, fires on, says)
        type Case = (&'static str, String, Option<&'static str>, Option<&'static str>, &'static str);
        let cases: Vec<Case> = vec![
            (
                "no startup probe, no delay",
                HTTP_LIVENESS.into(),
                None,
                Some("livenessProbe"),
                "killed 20 s after",
            ),
            ("a delay and nothing known", delayed.clone(), None, None, ""),
            ("a startup probe", format!("{startup}{HTTP_LIVENESS}"), None, None, ""),
            ("known start within the delay", delayed.clone(), Some("45"), None, ""),
            ("known start beyond it", delayed, Some("web=60"), Some("livenessProbe"), "takes 60 s to start"),
            ("known start within liveness tolerance", HTTP_LIVENESS.into(), Some("15"), None, ""),
            (
                "known start beyond the startup budget",
                format!("{startup}{HTTP_LIVENESS}"),
                Some("400"),
                Some("startupProbe"),
                "A failureThreshold of 41 allows 400 s",
            ),
            (
                "known start within the startup budget",
                format!("{startup}{HTTP_LIVENESS}"),
                Some("250"),
                None,
                "",
            ),
        ];
        for (name, probes, start, fires, says) in cases {
            let lint = match start {
                Some(start) => lint_with_start(&web(&probes), start),
                None => lint_yaml(&web(&probes)),
            };
            let found = with_rule(&lint, rule::KILLED_BEFORE_START);
            assert_eq!(found.first().and_then(|f| f.probe), fires, "case {name}: {:?}", lint.findings);
            if let Some(f) = found.first() {
                assert_eq!(f.severity, Severity::Warning, "case {name}");
                assert!(f.message.contains(says), "case {name}: {}", f.message);
            }
        }
    }
}
