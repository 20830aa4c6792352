//! Probing: the four executors ([`exec`], [`http`], [`tcp`], [`grpc`]) and the dispatcher that
//! picks one for a probe spec, with the probe vocabulary (kinds, executor outcomes, cache
//! results, errors) re-exported from its leaf module [`crate::vocabulary`]. Upstream:
//! `pkg/probe` and `pkg/kubelet/prober/prober.go`.
//!
//! And what runs them: the probe worker ([`worker`], its decisions in [`do_probe`]) and the
//! prober manager that supervises the workers ([`manager`], `UpdatePodStatus` in
//! [`update_status`]), upstream's `worker.go` and `prober_manager.go`; with probelet's own
//! bound on probes in flight ([`slots`]), the probe prepared once per status ([`prepared`]) and
//! the probe-timing annotation ([`timing`]).

pub mod do_probe;
pub mod exec;
pub mod executors;
pub mod grpc;
pub mod http;
pub mod lifecycle;
pub mod manager;
pub mod memo;
pub mod pod_container;
pub mod port;
pub mod prepared;
mod probe;
pub mod probe_metrics;
pub mod reconcile;
pub mod slots;
pub mod tcp;
pub mod timing;
pub mod update_status;
pub mod worker;

#[allow(deprecated)]
pub use crate::vocabulary::Outcome;
pub use crate::vocabulary::{ProbeError, ProbeKind, ProbeOutcome, ProbeResult};
pub use memo::ProbeMemo;
pub use pod_container::PodContainer;
pub use prepared::PreparedProbe;
pub use probe::{
    EVENT_PROBE_WARNING, EVENT_UNHEALTHY, MAX_PROBE_RETRIES, ProbeHostPolicy, ProbeRun, ProbeRunner, Prober,
    container_reference, host_refusal, pod_name, pod_reference, probe_timeout,
};
pub use slots::{DEFAULT_MAX_PROBES_IN_FLIGHT, ProbeSlots};

/// The version the kubelet reports in `User-Agent: kube-probe/<major>.<minor>`.
pub const KUBE_PROBE_VERSION: &str = "1.35";

/// The default User-Agent of HTTP and gRPC probes.
pub const KUBE_PROBE_USER_AGENT: &str = "kube-probe/1.35";

/// An executor's answer when it did not error: the outcome and its output text.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Probed {
    /// What the executor concluded.
    pub outcome: ProbeOutcome,
    /// The output the kubelet reports in events: the command's output, the body of an HTTP
    /// response, a dial error's text.
    pub output: String,
}

impl Probed {
    /// An answer from its outcome and output text.
    pub fn new(outcome: ProbeOutcome, output: impl Into<String>) -> Self {
        Probed { outcome, output: output.into() }
    }
}
