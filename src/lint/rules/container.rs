//! The rules run on each container whose probes are valid ([`ContainerContext::rules`]), and
//! those about a probe's set-up: `defaults`, `timeout-not-below-period`, `exec-short-period` and
//! `liveness-like-readiness`. The timing rules are in `timing`.

use probelet_actors::prober::ProbeKind;

use super::probe::{Endpoint, describe};
use super::{
    ContainerContext, EXEC_PERIOD_FLOOR_SECONDS, EffectiveProbe, Finding, Severity, Timings, rule, timings,
};

impl ContainerContext<'_> {
    pub(super) fn probe(&self, kind: ProbeKind) -> Option<&EffectiveProbe> {
        self.probes.iter().find(|p| p.kind == kind)
    }

    pub(super) fn finding(
        &self,
        severity: Severity,
        rule: &'static str,
        probe: Option<&EffectiveProbe>,
        field: Option<&str>,
        message: String,
    ) -> Finding {
        let field = match (probe, field) {
            (Some(p), Some(f)) => Some(format!("{}.{}.{f}", self.path, p.probe)),
            (Some(p), None) => Some(format!("{}.{}", self.path, p.probe)),
            (None, _) => Some(self.path.to_owned()),
        };
        Finding {
            severity,
            rule,
            container: Some(self.container.name.clone()),
            container_path: Some(self.path.to_owned()),
            probe: probe.map(|p| p.probe),
            field,
            message,
        }
    }

    /// Runs every rule on a container whose probes are valid; returns its timings.
    pub(super) fn rules(&self, findings: &mut Vec<Finding>) -> Timings {
        let timings = timings(self.probes);
        for probe in self.probes {
            findings.push(self.finding(Severity::Info, rule::DEFAULTS, Some(probe), None, describe(probe)));
            if probe.timeout_seconds >= probe.period_seconds {
                findings.push(self.finding(
                    Severity::Warning,
                    rule::TIMEOUT_NOT_BELOW_PERIOD,
                    Some(probe),
                    Some("timeoutSeconds"),
                    timeout_not_below_period(probe),
                ));
            }
            if matches!(probe.endpoint, Endpoint::Exec(_)) && probe.period_seconds < EXEC_PERIOD_FLOOR_SECONDS
            {
                findings.push(self.finding(
                    Severity::Warning,
                    rule::EXEC_SHORT_PERIOD,
                    Some(probe),
                    Some("periodSeconds"),
                    exec_short_period(probe),
                ));
            }
        }
        self.liveness_like_readiness(findings);
        self.killed_before_start(findings, &timings);
        self.timing_findings(findings, &timings);
        timings
    }

    fn liveness_like_readiness(&self, findings: &mut Vec<Finding>) {
        let (Some(l), Some(r)) = (self.probe(ProbeKind::Liveness), self.probe(ProbeKind::Readiness)) else {
            return;
        };
        if l.endpoint != r.endpoint || l.endpoint == Endpoint::None {
            return;
        }
        let window =
            |p: &EffectiveProbe| i64::from(p.failure_threshold).saturating_mul(i64::from(p.period_seconds));
        if window(l) > window(r) || l.timeout_seconds > r.timeout_seconds {
            return;
        }
        findings.push(self.finding(
            Severity::Warning,
            rule::LIVENESS_LIKE_READINESS,
            Some(l),
            None,
            format!(
                "livenessProbe checks the same endpoint as readinessProbe ({}) and gives up no later \
                 ({} failures {} s apart with a {} s timeout, against {} failures {} s apart with a {} s \
                 timeout): an app that is slow or overloaded fails both at once, and is restarted when it \
                 should only be taken out of its Services' endpoints. Give the liveness probe an endpoint \
                 that only checks the process itself, or more failures and a longer timeout than readiness",
                l.handler,
                l.failure_threshold,
                l.period_seconds,
                l.timeout_seconds,
                r.failure_threshold,
                r.period_seconds,
                r.timeout_seconds
            ),
        ));
    }
}

fn timeout_not_below_period(p: &EffectiveProbe) -> String {
    let schedule = if p.timeout_seconds == p.period_seconds {
        "so a hung endpoint is probed back to back, with no pause between probes".to_owned()
    } else {
        format!(
            "so a hung endpoint is probed back to back, every {} s instead of every {} s",
            p.timeout_seconds, p.period_seconds
        )
    };
    format!(
        "timeoutSeconds {} is not below periodSeconds {}: a probe of a hung endpoint runs until its timeout, \
         and the next one starts as soon as it gives up (the kubelet's ticker keeps one missed tick), \
         {schedule}, and each failure takes {} s to be seen. Keep the timeout below the period",
        p.timeout_seconds, p.period_seconds, p.timeout_seconds
    )
}

fn exec_short_period(p: &EffectiveProbe) -> String {
    let per_minute = 60 / i64::from(p.period_seconds.max(1));
    format!(
        "an exec probe every {} s: each run is an exec into the container through the container runtime, \
         which starts new processes for it (the command itself inside the container's namespaces and \
         cgroup, and the runtime's own helpers); that is {per_minute} a minute for this probe alone, on every \
         replica. Short-period exec probes on many pods are a known source of node CPU load (kubernetes \
         #82440). Prefer httpGet, tcpSocket or grpc, or a period of {EXEC_PERIOD_FLOOR_SECONDS} s or more",
        p.period_seconds
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::lint::rules::tests::*;

    #[test]
    fn liveness_like_readiness() {
        let same_port_by_number = "readinessProbe:\n  httpGet: {path: /healthz, port: 8080}\n";
        let cases = [
            ("same endpoint, same thresholds", format!("{HTTP_LIVENESS}{HTTP_READINESS}"), true),
            ("a named port is the same port", format!("{HTTP_LIVENESS}{same_port_by_number}"), true),
            (
                "liveness gives up sooner",
                format!("{HTTP_LIVENESS}  failureThreshold: 1\n{HTTP_READINESS}"),
                true,
            ),
            (
                "other path",
                format!("{HTTP_LIVENESS}readinessProbe:\n  httpGet: {{path: /ready, port: http}}\n"),
                false,
            ),
            (
                "liveness more tolerant",
                format!("{HTTP_LIVENESS}  failureThreshold: 6\n{HTTP_READINESS}"),
                false,
            ),
            ("liveness waits longer", format!("{HTTP_LIVENESS}  timeoutSeconds: 5\n{HTTP_READINESS}"), false),
            (
                "tcp on the same port",
                "livenessProbe:\n  tcpSocket: {port: http}\nreadinessProbe:\n  tcpSocket: {port: 8080}\n"
                    .to_owned(),
                true,
            ),
        ];
        for (name, probes, fires) in cases {
            let lint = lint_yaml(&web(&probes));
            let found = with_rule(&lint, rule::LIVENESS_LIKE_READINESS);
            assert_eq!(found.len(), usize::from(fires), "case {name}: {:?}", lint.findings);
            if fires {
                assert_eq!(found[0].severity, Severity::Warning, "case {name}");
                assert_eq!(found[0].probe, Some("livenessProbe"), "case {name}");
            }
        }
    }

    #[test]
    fn timeout_not_below_period() {
        let cases = [
            ("equal", "  timeoutSeconds: 5\n  periodSeconds: 5\n", true),
            ("above", "  timeoutSeconds: 10\n  periodSeconds: 5\n", true),
            ("below", "  timeoutSeconds: 4\n  periodSeconds: 5\n", false),
            ("defaults", "", false),
        ];
        for (name, fields, fires) in cases {
            let lint = lint_yaml(&web(&format!("{HTTP_READINESS}{fields}")));
            let found = with_rule(&lint, rule::TIMEOUT_NOT_BELOW_PERIOD);
            assert_eq!(found.len(), usize::from(fires), "case {name}");
            if fires {
                assert_eq!(found[0].severity, Severity::Warning);
                assert_eq!(
                    found[0].field.as_deref(),
                    Some("spec.containers[0].readinessProbe.timeoutSeconds")
                );
            }
        }
    }

    #[test]
    fn exec_short_period() {
        let cases = [
            ("exec every 5 s", "readinessProbe:\n  exec: {command: [cat, /ok]}\n  periodSeconds: 5\n", true),
            (
                "exec every 10 s",
                "readinessProbe:\n  exec: {command: [cat, /ok]}\n  periodSeconds: 10\n",
                false,
            ),
            ("exec by default", "livenessProbe:\n  exec: {command: [cat, /ok]}\n", false),
            (
                "http every 2 s",
                "readinessProbe:\n  httpGet: {path: /, port: http}\n  periodSeconds: 2\n",
                false,
            ),
        ];
        for (name, probes, fires) in cases {
            let lint = lint_yaml(&web(probes));
            let found = with_rule(&lint, rule::EXEC_SHORT_PERIOD);
            assert_eq!(found.len(), usize::from(fires), "case {name}");
            if fires {
                assert_eq!(found[0].severity, Severity::Warning);
                assert!(found[0].message.contains("12 a minute"), "{}", found[0].message);
                assert!(found[0].message.contains("#82440"));
            }
        }
    }
}
