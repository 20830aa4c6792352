//! The probe dispatcher (upstream `pkg/kubelet/prober/prober.go`): picks the handler of a probe
//! spec, runs it with the probe's timeout and up to three tries while it errors, maps the
//! executor's outcome to a cache result and records the `Unhealthy` / `ProbeWarning` events.

use std::borrow::Cow;
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use futures::future::BoxFuture;
use k8s_openapi::api::core::v1::{Container, ObjectReference, Pod, Probe};

use super::executors::Executors;
use super::prepared::{Prepared, PreparedProbe};
use super::{
    PodContainer, ProbeError, ProbeKind, ProbeMemo, ProbeOutcome, ProbeResult, ProbeSlots, Probed, exec,
    grpc, http, port, tcp,
};
use crate::container::ContainerId;
use crate::contracts::{CommandRunner, EventRecorder, EventType, ProbeObserver, ProbeRecord};
pub use crate::format::pod_name;
use crate::format::{pod_ref, pod_uid};
use crate::status::probe_status::PodProbeStatus;

/// The names an observer's record carries, borrowed from the pod or from a prepared probe.
#[derive(Debug, Clone, Copy)]
pub(crate) struct RecordNames<'a> {
    pub(crate) pod_uid: &'a str,
    pub(crate) namespace: &'a str,
    pub(crate) pod: &'a str,
    pub(crate) container: &'a str,
}

impl<'a> RecordNames<'a> {
    /// The names as the pod and its container spec hold them (an unset one is empty).
    pub(crate) fn of(pod: &'a Pod, container: &'a Container) -> Self {
        let text = |value: &'a Option<String>| value.as_deref().unwrap_or_default();
        RecordNames {
            pod_uid: text(&pod.metadata.uid),
            namespace: text(&pod.metadata.namespace),
            pod: text(&pod.metadata.name),
            container: &container.name,
        }
    }
}

/// Upstream `maxProbeRetries`: a handler is tried this many times while it returns an error.
pub const MAX_PROBE_RETRIES: usize = 3;

/// Event reason for a failed or errored probe.
pub const EVENT_UNHEALTHY: &str = "Unhealthy";
/// Event reason for a probe that succeeded with a warning.
pub const EVENT_PROBE_WARNING: &str = "ProbeWarning";

/// Runs one probe of a container and says what the results cache should hold. The worker
/// calls this; tests substitute a scripted implementation.
///
/// # What the worker calls
///
/// For each publish of the pod's status, [`ProbeRunner::prepare`]; while the prepared probe it
/// answers lives, the worker runs that ([`PreparedProbe::run`]) at every probe and calls
/// nothing else here. When `prepare` answers `None`, [`ProbeRunner::probe_with_memo`] at every
/// probe. [`ProbeRunner::probe`] and [`ProbeRunner::probe_with_timeout`] are reached only
/// through the defaults of those two.
///
/// # Wrapping the real prober
///
/// To be told of every probe, [`crate::contracts::ProbeObserver`] is enough; to change how
/// HTTP, TCP or gRPC probes reach their targets, [`super::executors::Executors`]. A runner
/// that wraps the real [`Prober`] (to force a result for some pods, say) gets it from
/// `PipelineConfig::wrap_prober` (`EngineBuilder::wrap_prober` in the facade), so that the
/// prober has the pipeline's probe slots, host policy, observer and executors; a
/// `PipelineConfig::prober` of the host's gets none of them. And it forwards both entry
/// points:
/// * [`ProbeRunner::prepare`]: the prober's prepared probe runs every probe of a publish
///   without coming back to the wrapper, so a wrapper that wants to see each run answers a
///   [`PreparedProbe`] of its own around it (or `None`, giving up the prepared probe's
///   savings: docs/benchmarks.md, "A probe prepared once per status");
/// * [`ProbeRunner::probe_with_memo`]: the prober's takes a probe slot (the bound on probes in
///   flight), runs with the probe's timeout (the timing annotation's included) and says how
///   long it waited for its slot. The defaults of this trait do none of that: a wrapper that
///   forwards only [`ProbeRunner::probe`] runs every due probe at once, with
///   `timeoutSeconds`.
///
/// `tests/pipeline_slots.rs` has a wrapper that does both
/// (`a_wrapped_prober_keeps_its_slots_and_sees_every_probe`).
///
/// # Ending every probe
///
/// The worker waits for each probe's answer before it runs the next, as the kubelet's worker
/// does: a runner ends every probe, within its timeout or a little after. The real prober's
/// own executors end with the timeout; a command runner, and an injected executor
/// ([`super::executors::Executors`]), that has not answered 2 minutes past it
/// ([`super::exec::RUNTIME_REQUEST_TIMEOUT`], timed once the probe holds its slot) is given up
/// on. A runner of the host's own is not: one whose probe never ends stops its worker's probing.
pub trait ProbeRunner: Send + Sync + 'static {
    /// `Err` means the probe errored after its retries: the worker discards it.
    fn probe(
        &self,
        kind: ProbeKind,
        pod: Arc<Pod>,
        status: Arc<PodProbeStatus>,
        container: PodContainer,
        container_id: ContainerId,
    ) -> BoxFuture<'static, Result<ProbeResult, ProbeError>>;

    /// [`ProbeRunner::probe`] with the timeout the worker runs the probe with: the probe's
    /// `timeoutSeconds`, or the timing annotation's `timeoutMs` (see
    /// [`super::timing::EffectiveTiming`]). The default ignores `timeout` and calls
    /// [`ProbeRunner::probe`]; a runner that enforces timeouts itself overrides it.
    fn probe_with_timeout(
        &self,
        kind: ProbeKind,
        pod: Arc<Pod>,
        status: Arc<PodProbeStatus>,
        container: PodContainer,
        container_id: ContainerId,
        timeout: Duration,
    ) -> BoxFuture<'static, Result<ProbeResult, ProbeError>> {
        let _ = timeout;
        self.probe(kind, pod, status, container, container_id)
    }

    /// [`ProbeRunner::probe_with_timeout`] for a worker that keeps `memo` between its probes:
    /// a runner may keep what it built for one probe there for the next (the real prober keeps
    /// the HTTP request). A memo belongs to one probe of one container. The answer also says
    /// how long the probe waited for a probe slot before its first try (the real prober's
    /// [`Prober::with_slots`]): the worker times the probe from its slot, and drops a tick that
    /// came due while it waited. The default ignores the memo and never waits, so a runner
    /// that wraps another forwards this method, or the inner runner's slots, timeout and memo
    /// go unused (see "Wrapping the real prober" above).
    #[allow(clippy::too_many_arguments)]
    fn probe_with_memo(
        &self,
        kind: ProbeKind,
        pod: Arc<Pod>,
        status: Arc<PodProbeStatus>,
        container: PodContainer,
        container_id: ContainerId,
        timeout: Duration,
        memo: ProbeMemo,
    ) -> BoxFuture<'static, ProbeRun> {
        let _ = memo;
        let probe = self.probe_with_timeout(kind, pod, status, container, container_id, timeout);
        Box::pin(async move { ProbeRun { result: probe.await, waited: Duration::ZERO } })
    }

    /// The probe of `kind` made ready to run again and again against `container_id` while the
    /// pod's probe status stays at the publish `status` came from: the worker runs it
    /// ([`PreparedProbe::run`]) for every probe of that publish instead of calling
    /// [`ProbeRunner::probe_with_memo`], and prepares another after a new publish or a new
    /// probe spec. A prepared probe runs exactly what `probe_with_memo` would run with the same
    /// arguments and `timeout`, and keeps its memo; what it reads once per publish rather than
    /// at every probe is the runner's choice (the real prober's: docs/benchmarks.md, "A probe
    /// prepared once per status"). `None`, the default: the worker calls `probe_with_memo`
    /// for every probe, with a memo that keeps nothing. A runner that wraps another forwards
    /// this method for the prepared probes (and the memo) to be used, and wraps the prepared
    /// probe it gets if it wants to see each run: the worker runs it without coming back here
    /// (see "Wrapping the real prober" above).
    fn prepare(
        &self,
        kind: ProbeKind,
        container: &PodContainer,
        status: &PodProbeStatus,
        container_id: &ContainerId,
        timeout: Duration,
    ) -> Option<Arc<dyn PreparedProbe>> {
        let _ = (kind, container, status, container_id, timeout);
        None
    }
}

/// What [`ProbeRunner::probe_with_memo`] answers: the probe's result, and how long it waited
/// for a probe slot before its first try.
#[derive(Debug, Clone, PartialEq)]
pub struct ProbeRun {
    /// `Err` means the probe errored after its retries: the worker discards it.
    pub result: Result<ProbeResult, ProbeError>,
    /// Zero when a slot was free at once, or the runner has none.
    pub waited: Duration,
}

/// Which hosts `httpGet` and `tcpSocket` probes may connect to.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum ProbeHostPolicy {
    /// The kubelet's behaviour: the probe's `host` when set (any name, resolved by DNS, or any
    /// address), else the pod IP.
    #[default]
    Any,
    /// Only the pod's own IP: a probe whose `host` names anything else fails without
    /// connecting. Pod Security Admission's baseline level (policy version v1.34 and later)
    /// admits only an unset or empty `host` in probes and lifecycle hooks; this also accepts the
    /// pod IP written out. Redirects stay on the original host as with the kubelet, which here
    /// is the pod IP.
    PodIp,
}

/// Why `policy` refuses a probe whose `field` (`httpGet.host`, `tcpSocket.host`) is `host`, if it
/// does. An unset or empty host means the pod IP; with no pod IP either, a TCP or gRPC probe
/// would dial the agent's own loopback (Go's empty host), which `PodIp` refuses too.
pub fn host_refusal(
    policy: ProbeHostPolicy,
    field: &str,
    host: Option<&str>,
    pod_ip: &str,
) -> Option<String> {
    let host = host.filter(|h| !h.is_empty());
    match (policy, host) {
        (ProbeHostPolicy::Any, _) => None,
        (ProbeHostPolicy::PodIp, None) if pod_ip.is_empty() => {
            Some("the pod has no IP: the probe host policy only lets probes connect to the pod IP".to_owned())
        }
        (ProbeHostPolicy::PodIp, None) => None,
        (ProbeHostPolicy::PodIp, Some(host)) if host == pod_ip => None,
        (ProbeHostPolicy::PodIp, Some(host)) => Some(format!(
            "{field} {host:?} is not allowed: the probe host policy only lets probes connect to the pod IP {pod_ip:?}"
        )),
    }
}

/// Which slot a probe takes and whether it gives it back after [`SLOT_LEASE`]: the exec
/// probes' pool or the network probes'. Two flags, not the timeout: a probe's future holds its
/// arguments while it queues for a slot, and ten thousand new workers queue at once.
#[derive(Debug, Clone, Copy)]
pub(super) struct SlotUse {
    exec: bool,
    leased: bool,
}

impl SlotUse {
    /// The slot of an exec probe (`exec`) or a network probe whose timeout is `timeout`: a
    /// network probe that may run longer than the lease gives its slot back after it (not an
    /// exec probe: its pool is sized by what each one holds while it runs, a local command's
    /// descriptors or a cluster's pods/exec budget, which it holds just the same past a lease).
    pub fn new(exec: bool, timeout: Duration) -> SlotUse {
        SlotUse { exec, leased: !exec && timeout > SLOT_LEASE }
    }
}

/// The longest a network probe holds its probe slot: one whose timeout is longer gives the slot back
/// after this and runs on without one. Ten seconds is ten periods of the shortest, and longer
/// than any probe of a node that keeps up (docs/benchmarks.md, "Overload").
pub const SLOT_LEASE: Duration = Duration::from_secs(10);

/// The real prober: the four executors behind the kubelet's dispatch rules.
///
/// Its parts sit behind one `Arc`: every probe takes its own handle on the prober, and one
/// shared count costs less than one per part (every worker shares them).
#[derive(Clone)]
pub struct Prober {
    parts: Arc<ProberParts>,
}

#[derive(Clone)]
struct ProberParts {
    runner: Arc<dyn CommandRunner>,
    recorder: Arc<dyn EventRecorder>,
    http: http::HttpProber,
    /// Told about every probe run (the agent's recent-results view).
    observer: Option<Arc<dyn ProbeObserver>>,
    host_policy: ProbeHostPolicy,
    /// Injected network executors, in place of the real ones.
    executors: Executors,
    /// The slots an `httpGet`, `tcpSocket` or `grpc` probe takes while it runs; `None` runs
    /// every probe at once.
    slots: Option<ProbeSlots>,
    /// The slots of exec probes: a pool of their own, so that exec probes waiting on their
    /// runner (the cluster agent's `pods/exec` budget) never hold the network probes' slots.
    exec_slots: Option<ProbeSlots>,
}

impl Prober {
    /// A prober that runs exec probes through `runner` and records its events with `recorder`; any
    /// probe host is allowed, as the kubelet does.
    pub fn new(runner: Arc<dyn CommandRunner>, recorder: Arc<dyn EventRecorder>) -> Self {
        Prober {
            parts: Arc::new(ProberParts {
                runner,
                recorder,
                http: http::HttpProber::new(),
                observer: None,
                host_policy: ProbeHostPolicy::Any,
                executors: Executors::default(),
                slots: None,
                exec_slots: None,
            }),
        }
    }

    /// Run at most `slots.limit()` network probes (`httpGet`, `tcpSocket`, `grpc`) and as many
    /// exec probes, from a pool of their own, at once (docs/prober.md §1.2, "Probe slots"): a
    /// probe due while every slot of its pool is taken waits for one, and its timeout starts
    /// when it has it. Without this every probe runs as soon as it is due, as upstream's do.
    pub fn with_slots(mut self, slots: ProbeSlots) -> Self {
        let parts = Arc::make_mut(&mut self.parts);
        parts.exec_slots = Some(ProbeSlots::new(slots.limit()));
        parts.slots = Some(slots);
        self
    }

    /// Bound exec probes in flight by `slots` of their own (after [`Prober::with_slots`], which
    /// gives them a pool of its size).
    pub fn with_exec_slots(mut self, slots: ProbeSlots) -> Self {
        Arc::make_mut(&mut self.parts).exec_slots = Some(slots);
        self
    }

    /// Run network probes with `executors` where they name one (tests, hosts with their own
    /// network path); the real executors for the rest.
    pub fn with_executors(mut self, executors: Executors) -> Self {
        Arc::make_mut(&mut self.parts).executors = executors;
        self
    }

    /// Restrict which hosts network probes may connect to.
    pub fn with_host_policy(mut self, policy: ProbeHostPolicy) -> Self {
        Arc::make_mut(&mut self.parts).host_policy = policy;
        self
    }

    /// Also report every probe run to `observer`.
    pub fn with_observer(mut self, observer: Arc<dyn ProbeObserver>) -> Self {
        Arc::make_mut(&mut self.parts).observer = Some(observer);
        self
    }

    /// Upstream `prober.probe`: run the probe of `kind`, record events, map to a cache result.
    pub async fn probe(
        &self,
        kind: ProbeKind,
        pod: &Pod,
        status: &PodProbeStatus,
        container: &Container,
        container_id: &ContainerId,
    ) -> Result<ProbeResult, ProbeError> {
        let timeout = kind.probe_of(container).map_or(Duration::from_secs(1), probe_timeout);
        self.probe_timed(kind, pod, status, container, container_id, timeout).await
    }

    /// [`Prober::probe`] with each try limited to `timeout` instead of the probe's
    /// `timeoutSeconds` (the timing annotation's `timeoutMs`).
    pub async fn probe_timed(
        &self,
        kind: ProbeKind,
        pod: &Pod,
        status: &PodProbeStatus,
        container: &Container,
        container_id: &ContainerId,
        timeout: Duration,
    ) -> Result<ProbeResult, ProbeError> {
        let names = || RecordNames::of(pod, container);
        self.probe_remembering(kind, pod, status, container, container_id, timeout, None, names).await.result
    }

    /// [`Prober::probe_timed`], keeping what can be kept for the worker's next probe in `memo`.
    /// `names` gives the observer's record its names (read only when there is an observer).
    #[allow(clippy::too_many_arguments)]
    pub(super) async fn probe_remembering<'n>(
        &self,
        kind: ProbeKind,
        pod: &Pod,
        status: &PodProbeStatus,
        container: &Container,
        container_id: &ContainerId,
        timeout: Duration,
        memo: Option<&ProbeMemo>,
        names: impl FnOnce() -> RecordNames<'n>,
    ) -> ProbeRun {
        let Some(spec) = kind.probe_of(container) else {
            tracing::info!(
                probeType = kind.as_str(),
                pod = pod_ref(pod),
                podUID = pod_uid(pod),
                containerName = container.name.as_str(),
                "Probe is nil"
            );
            return ProbeRun { result: Ok(ProbeResult::Success), waited: Duration::ZERO };
        };
        // Boxed once the slot is held: inline, the tries' state would be part of the future
        // from the start, and a burst of new workers (a node's pods all starting) would hold
        // it while they queue for the slots, ten thousand times over (docs/memory.md).
        let attempt =
            || Box::pin(self.run_with_retries(spec, pod, status, container, container_id, timeout, memo));
        let slot = SlotUse::new(spec.exec.is_some(), timeout);
        self.run_observed(kind, slot, pod, || container, names, attempt).await
    }

    /// Runs `attempt` (the probe's tries) once it has a slot of its pool (the exec probes' when
    /// `exec`), maps its answer to a cache result with its event, and tells the observer.
    /// `container` is asked for only when an event is recorded: a prepared probe's container is
    /// read through its pod, memory a probe that succeeds need not touch (docs/benchmarks.md,
    /// "Fewer lines of memory a probe").
    pub(super) async fn run_observed<'n, 'c, F>(
        &self,
        kind: ProbeKind,
        SlotUse { exec, leased }: SlotUse,
        pod: &Pod,
        container: impl Fn() -> &'c Container,
        names: impl FnOnce() -> RecordNames<'n>,
        attempt: impl FnOnce() -> F,
    ) -> ProbeRun
    where
        F: Future<Output = Result<Probed, ProbeError>>,
    {
        let asked = tokio::time::Instant::now();
        // Held until the probe's tries are over; each try's timeout starts after it.
        let pool = if exec { &self.parts.exec_slots } else { &self.parts.slots };
        let slot = match pool {
            Some(slots) => Some(slots.acquire().await),
            None => None,
        };
        // A slot taken at once began the probe when it was asked for: one clock read fewer.
        let (started, waited) = if slot.as_ref().is_some_and(|s| s.waited()) {
            let started = tokio::time::Instant::now();
            (started, started - asked)
        } else {
            (asked, Duration::ZERO)
        };
        // A network probe that may run longer than a slot's lease gives its slot back once the
        // lease is over and goes on without one: probes that hang for their whole long timeout
        // (an endpoint that accepts and never answers) must not keep every slot, and every
        // other pod's probes waiting, for as long (docs/prober.md §1.2; not an exec probe, see
        // `SlotUse::new`). Boxed, and one await either way: the lease's timer and race would
        // otherwise grow every probe's future, which a burst of new workers holds while it
        // queues for a slot.
        let attempt = attempt();
        let attempt = match slot {
            Some(slot) if leased => futures::future::Either::Left(Box::pin(async move {
                let mut attempt = std::pin::pin!(attempt);
                tokio::select! {
                    biased;
                    done = &mut attempt => done,
                    () = tokio::time::sleep(SLOT_LEASE) => {
                        drop(slot);
                        attempt.await
                    }
                }
            })),
            slot => futures::future::Either::Right(async move {
                let attempt = attempt.await;
                drop(slot);
                attempt
            }),
        }
        .await;
        let mapped = self.map_outcome(kind, pod, container, &attempt);
        if let Some(observer) = self.parts.observer.as_ref() {
            let output = match &attempt {
                Ok(probed) => Cow::Borrowed(probed.output.as_str()),
                Err(err) => Cow::Owned(err.to_string()),
            };
            let names = names();
            observer.observe(ProbeRecord {
                pod_uid: Cow::Borrowed(names.pod_uid),
                namespace: Cow::Borrowed(names.namespace),
                pod: Cow::Borrowed(names.pod),
                container: Cow::Borrowed(names.container),
                kind,
                result: mapped.as_ref().map(|r| *r).map_err(ToString::to_string),
                output,
                duration: started.elapsed(),
                waited,
            });
        }
        ProbeRun { result: mapped, waited }
    }

    /// Whether probes are reported to an observer.
    pub(super) fn has_observer(&self) -> bool {
        self.parts.observer.is_some()
    }

    /// Whether `tcpSocket` probes run on an injected executor.
    pub(super) fn has_tcp_executor(&self) -> bool {
        self.parts.executors.tcp.is_some()
    }

    /// Maps an executor's answer to a cache result and records the event it calls for.
    fn map_outcome<'c>(
        &self,
        kind: ProbeKind,
        pod: &Pod,
        container: impl Fn() -> &'c Container,
        attempt: &Result<Probed, ProbeError>,
    ) -> Result<ProbeResult, ProbeError> {
        // Built only for an event: most probes succeed and record none.
        let reference = || container_reference(pod, container());
        match attempt {
            Err(err) => {
                tracing::debug!(
                    probeType = kind.as_str(),
                    pod = pod_ref(pod),
                    podUID = pod_uid(pod),
                    containerName = container().name.as_str(),
                    probeResult = err.outcome().as_str(),
                    err = err.to_string(),
                    "Probe errored"
                );
                self.parts.recorder.record(
                    &reference(),
                    EventType::Warning,
                    EVENT_UNHEALTHY,
                    &format!("{kind} probe errored and resulted in {} state: {err}", err.outcome()),
                );
                // Cloned, as the observer reads the attempt after this: errors are rare.
                Err(err.clone())
            }
            Ok(Probed { outcome: ProbeOutcome::Success, .. }) => {
                tracing::debug!(
                    probeType = kind.as_str(),
                    pod = pod_ref(pod),
                    podUID = pod_uid(pod),
                    containerName = container().name.as_str(),
                    "Probe succeeded"
                );
                Ok(ProbeResult::Success)
            }
            Ok(Probed { outcome: ProbeOutcome::Warning, output }) => {
                self.parts.recorder.record(
                    &reference(),
                    EventType::Warning,
                    EVENT_PROBE_WARNING,
                    &format!("{kind} probe warning: {output}"),
                );
                tracing::debug!(
                    probeType = kind.as_str(),
                    pod = pod_ref(pod),
                    podUID = pod_uid(pod),
                    containerName = container().name.as_str(),
                    output = output.as_str(),
                    "Probe succeeded with a warning"
                );
                Ok(ProbeResult::Success)
            }
            Ok(Probed { outcome: ProbeOutcome::Failure, output }) => {
                tracing::debug!(
                    probeType = kind.as_str(),
                    pod = pod_ref(pod),
                    podUID = pod_uid(pod),
                    containerName = container().name.as_str(),
                    probeResult = ProbeOutcome::Failure.as_str(),
                    output = output.as_str(),
                    "Probe failed"
                );
                self.parts.recorder.record(
                    &reference(),
                    EventType::Warning,
                    EVENT_UNHEALTHY,
                    &format!("{kind} probe failed: {output}"),
                );
                Ok(ProbeResult::Failure)
            }
            Ok(Probed { outcome: ProbeOutcome::Unknown, .. }) => {
                tracing::debug!(
                    probeType = kind.as_str(),
                    pod = pod_ref(pod),
                    podUID = pod_uid(pod),
                    containerName = container().name.as_str(),
                    probeResult = ProbeOutcome::Unknown.as_str(),
                    "Probe unknown without error"
                );
                Ok(ProbeResult::Failure)
            }
        }
    }

    #[allow(clippy::too_many_arguments)]
    async fn run_with_retries(
        &self,
        spec: &Probe,
        pod: &Pod,
        status: &PodProbeStatus,
        container: &Container,
        container_id: &ContainerId,
        timeout: Duration,
        memo: Option<&ProbeMemo>,
    ) -> Result<Probed, ProbeError> {
        let mut last = Err(ProbeError::Runtime("probe was not run".into()));
        for _ in 0..MAX_PROBE_RETRIES {
            last = self.run_probe(spec, pod, status, container, container_id, timeout, memo).await;
            if last.is_ok() {
                break;
            }
        }
        last
    }

    /// Upstream `runProbe`: the first handler set wins (exec, httpGet, tcpSocket, grpc).
    #[allow(clippy::too_many_arguments)]
    async fn run_probe(
        &self,
        spec: &Probe,
        pod: &Pod,
        status: &PodProbeStatus,
        container: &Container,
        container_id: &ContainerId,
        timeout: Duration,
        memo: Option<&ProbeMemo>,
    ) -> Result<Probed, ProbeError> {
        let pod_ip = status.pod_ip();
        if let Some(action) = &spec.exec {
            let Some(command) = exec::expand_command_within(
                action.command.as_deref().unwrap_or_default(),
                container.env.as_deref().unwrap_or_default(),
            ) else {
                // What running it would answer: the kernel refuses such a command.
                return Err(ProbeError::Runtime("argument list too long".to_owned()));
            };
            // The exec, HTTP and gRPC futures are boxed: inline, the largest of them would set
            // the size of every probe's future, TCP's too (a 4.5 KB allocation per probe,
            // beyond the allocator's per-thread cache).
            return Box::pin(exec::probe(self.parts.runner.as_ref(), container_id, &command, timeout)).await;
        }
        if let Some(action) = &spec.http_get {
            if let Some(refusal) =
                host_refusal(self.parts.host_policy, "httpGet.host", action.host.as_deref(), pod_ip)
            {
                return Ok(Probed::new(ProbeOutcome::Failure, refusal));
            }
            if let Some(refusal) = action.http_headers.as_deref().and_then(http::send_refusal) {
                // Go's transport refuses to send such headers: upstream's `client.Do` fails, and
                // the probe with it (a liveness probe restarts the container), before any dial.
                let url = http::HttpProbeRequest::url_of(action, container, pod_ip)?;
                return Ok(Probed::new(ProbeOutcome::Failure, http::transport_error(&url, &refusal)));
            }
            let build = || http::HttpProbeRequest::new(action, container, pod_ip);
            return match (&self.parts.executors.http, memo) {
                (Some(injected), _) => {
                    given_up_after(timeout, "HTTP", injected.probe(&build()?, timeout)).await?
                }
                (None, Some(memo)) => {
                    let Some(first) = memo.http_request(pod_ip, build)? else {
                        return Box::pin(self.parts.http.probe(&build()?, timeout)).await;
                    };
                    // The whole request again only for a redirect: built from the same spec,
                    // container and pod IP, it is the one `first` was taken from.
                    let whole = || build().map(std::borrow::Cow::Owned);
                    Box::pin(self.parts.http.probe_from(http::Start::Kept(&first), whole, timeout)).await
                }
                (None, None) => Box::pin(self.parts.http.probe(&build()?, timeout)).await,
            };
        }
        if let Some(action) = &spec.tcp_socket {
            if let Some(refusal) =
                host_refusal(self.parts.host_policy, "tcpSocket.host", action.host.as_deref(), pod_ip)
            {
                return Ok(Probed::new(ProbeOutcome::Failure, refusal));
            }
            let port = port::resolve_container_port(&action.port, container)?;
            let host = action.host.as_deref().filter(|h| !h.is_empty());
            return Ok(match (&self.parts.executors.tcp, host, status.pod_ip_addr()) {
                (Some(injected), ..) => {
                    given_up_after(timeout, "TCP", injected.probe(host.unwrap_or(pod_ip), port, timeout))
                        .await?
                }
                // The pod IP, parsed once per status version.
                (None, None, Some(ip)) => tcp::probe_addr(std::net::SocketAddr::new(ip, port), timeout).await,
                (None, ..) => tcp::probe(host.unwrap_or(pod_ip), port, timeout).await,
            });
        }
        if let Some(action) = &spec.grpc {
            if let Some(refusal) = host_refusal(self.parts.host_policy, "grpc", None, pod_ip) {
                return Ok(Probed::new(ProbeOutcome::Failure, refusal));
            }
            let port = u16::try_from(action.port)
                .ok()
                .filter(|p| *p > 0)
                .ok_or(ProbeError::InvalidPort(i64::from(action.port)))?;
            let service = action.service.as_deref().unwrap_or_default();
            return Ok(match &self.parts.executors.grpc {
                Some(injected) => {
                    given_up_after(timeout, "gRPC", injected.probe(pod_ip, port, service, timeout)).await?
                }
                None => Box::pin(grpc::probe(pod_ip, port, service, timeout)).await,
            });
        }
        // Upstream's verbosity 4 since the gRPC probe came (v1.24): trace here.
        tracing::trace!(
            containerName = container.name.as_str(),
            "Failed to find probe builder for container"
        );
        Err(ProbeError::MissingHandler { pod: pod_name(pod), container: container.name.clone() })
    }
}

/// An injected executor's answer, or an error once it has not answered
/// [`exec::RUNTIME_REQUEST_TIMEOUT`] past the probe's timeout, as a command runner's is given up
/// on: an executor of the host's that never answers would hold its worker, and the worker's last
/// result, for good. Timed from here, once the probe holds its slot; the real executors end
/// with their timeout and are not wrapped.
async fn given_up_after<T>(
    timeout: Duration,
    kind: &str,
    answer: impl Future<Output = T>,
) -> Result<T, ProbeError> {
    let limit = timeout.saturating_add(exec::RUNTIME_REQUEST_TIMEOUT);
    tokio::time::timeout(limit, answer).await.map_err(|_| {
        ProbeError::Runtime(format!(
            "the host's {kind} executor did not answer within {}s: probe given up",
            limit.as_secs()
        ))
    })
}

impl ProbeRunner for Prober {
    fn probe(
        &self,
        kind: ProbeKind,
        pod: Arc<Pod>,
        status: Arc<PodProbeStatus>,
        container: PodContainer,
        container_id: ContainerId,
    ) -> BoxFuture<'static, Result<ProbeResult, ProbeError>> {
        let prober = self.clone();
        Box::pin(async move { prober.probe(kind, &pod, &status, &container, &container_id).await })
    }

    fn probe_with_timeout(
        &self,
        kind: ProbeKind,
        pod: Arc<Pod>,
        status: Arc<PodProbeStatus>,
        container: PodContainer,
        container_id: ContainerId,
        timeout: Duration,
    ) -> BoxFuture<'static, Result<ProbeResult, ProbeError>> {
        let prober = self.clone();
        Box::pin(
            async move { prober.probe_timed(kind, &pod, &status, &container, &container_id, timeout).await },
        )
    }

    fn probe_with_memo(
        &self,
        kind: ProbeKind,
        pod: Arc<Pod>,
        status: Arc<PodProbeStatus>,
        container: PodContainer,
        container_id: ContainerId,
        timeout: Duration,
        memo: ProbeMemo,
    ) -> BoxFuture<'static, ProbeRun> {
        let prober = self.clone();
        Box::pin(async move {
            let names = || RecordNames::of(&pod, &container);
            prober
                .probe_remembering(
                    kind,
                    &pod,
                    &status,
                    &container,
                    &container_id,
                    timeout,
                    Some(&memo),
                    names,
                )
                .await
        })
    }

    fn prepare(
        &self,
        kind: ProbeKind,
        container: &PodContainer,
        status: &PodProbeStatus,
        container_id: &ContainerId,
        timeout: Duration,
    ) -> Option<Arc<dyn PreparedProbe>> {
        Some(Arc::new(Prepared::new(self, kind, container, status, container_id, timeout)))
    }
}

/// The probe's `timeoutSeconds`; a value below one second (only possible when the API
/// server's defaulting was skipped) is taken as the default of one second.
pub fn probe_timeout(spec: &Probe) -> Duration {
    Duration::from_secs(
        spec.timeout_seconds.and_then(|t| u64::try_from(t).ok()).filter(|t| *t > 0).unwrap_or(1),
    )
}

/// The object an event about the pod itself is recorded against: the pod, with no field path.
pub fn pod_reference(pod: &Pod) -> ObjectReference {
    ObjectReference {
        api_version: Some("v1".into()),
        kind: Some("Pod".into()),
        name: pod.metadata.name.clone(),
        namespace: pod.metadata.namespace.clone(),
        uid: pod.metadata.uid.clone(),
        resource_version: pod.metadata.resource_version.clone(),
        field_path: None,
    }
}

/// The object an event about a container is recorded against: the pod, with the container's
/// field path (`spec.containers{name}` or `spec.initContainers{name}`).
pub fn container_reference(pod: &Pod, container: &Container) -> ObjectReference {
    let is_init = pod
        .spec
        .as_ref()
        .and_then(|s| s.init_containers.as_ref())
        .is_some_and(|init| init.iter().any(|c| c.name == container.name))
        && !pod.spec.as_ref().is_some_and(|s| s.containers.iter().any(|c| c.name == container.name));
    let list = if is_init { "initContainers" } else { "containers" };
    ObjectReference {
        api_version: Some("v1".into()),
        kind: Some("Pod".into()),
        name: pod.metadata.name.clone(),
        namespace: pod.metadata.namespace.clone(),
        uid: pod.metadata.uid.clone(),
        resource_version: pod.metadata.resource_version.clone(),
        field_path: Some(format!("spec.{list}{{{}}}", container.name)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::contracts::{ExecError, ExecOutput, MemoryRecorder};
    use k8s_openapi::api::core::v1::{EnvVar, ExecAction, PodSpec, TCPSocketAction};
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
    use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
    use std::sync::Mutex;

    /// Answers exec calls from a script and records the commands it was asked to run.
    #[derive(Default)]
    struct FakeRunner {
        answers: Mutex<Vec<Result<ExecOutput, ExecError>>>,
        commands: Mutex<Vec<Vec<String>>>,
    }

    impl CommandRunner for FakeRunner {
        fn run_in_container(
            &self,
            _id: &ContainerId,
            cmd: &[String],
            _timeout: Duration,
        ) -> BoxFuture<'static, Result<ExecOutput, ExecError>> {
            self.commands.lock().unwrap().push(cmd.to_vec());
            let mut answers = self.answers.lock().unwrap();
            let answer = if answers.len() > 1 { answers.remove(0) } else { answers[0].clone() };
            Box::pin(async move { answer })
        }
    }

    fn exit(code: i32, output: &str) -> Result<ExecOutput, ExecError> {
        Ok(ExecOutput { output: output.as_bytes().to_vec(), exit_code: code })
    }

    fn setup(answers: Vec<Result<ExecOutput, ExecError>>) -> (Prober, Arc<FakeRunner>, MemoryRecorder) {
        let runner = Arc::new(FakeRunner { answers: Mutex::new(answers), ..Default::default() });
        let recorder = MemoryRecorder::new();
        (Prober::new(runner.clone(), Arc::new(recorder.clone())), runner, recorder)
    }

    fn pod_and_container(probe: Probe) -> (Pod, Container) {
        let container = Container {
            name: "app".into(),
            readiness_probe: Some(probe.clone()),
            liveness_probe: Some(probe),
            env: Some(vec![EnvVar { name: "A".into(), value: Some("script".into()), ..Default::default() }]),
            ..Default::default()
        };
        let pod = Pod {
            metadata: ObjectMeta {
                name: Some("web".into()),
                namespace: Some("ns".into()),
                uid: Some("u1".into()),
                ..Default::default()
            },
            spec: Some(PodSpec { containers: vec![container.clone()], ..Default::default() }),
            status: None,
        };
        (pod, container)
    }

    fn exec_probe(cmd: &[&str]) -> Probe {
        Probe {
            exec: Some(ExecAction { command: Some(cmd.iter().map(|s| (*s).to_owned()).collect()) }),
            ..Default::default()
        }
    }

    async fn run(prober: &Prober, kind: ProbeKind, probe: Probe) -> Result<ProbeResult, ProbeError> {
        let (pod, container) = pod_and_container(probe);
        prober.probe(kind, &pod, &PodProbeStatus::default(), &container, &ContainerId::parse("x://1")).await
    }

    #[test]
    fn host_policy_refusals() {
        let any = ProbeHostPolicy::Any;
        let pod_ip = ProbeHostPolicy::PodIp;
        assert_eq!(host_refusal(any, "httpGet.host", Some("example.com"), "10.0.0.1"), None);
        assert_eq!(host_refusal(pod_ip, "httpGet.host", None, "10.0.0.1"), None);
        assert_eq!(host_refusal(pod_ip, "httpGet.host", Some(""), "10.0.0.1"), None);
        assert_eq!(host_refusal(pod_ip, "tcpSocket.host", Some("10.0.0.1"), "10.0.0.1"), None);
        assert_eq!(
            host_refusal(pod_ip, "tcpSocket.host", Some("localhost"), "10.0.0.1").as_deref(),
            Some(
                "tcpSocket.host \"localhost\" is not allowed: the probe host policy only lets probes connect to the pod IP \"10.0.0.1\""
            )
        );
        assert!(host_refusal(pod_ip, "httpGet.host", Some("10.0.0.2"), "10.0.0.1").is_some());
        // No pod IP: an unset host would be the agent's own loopback.
        assert_eq!(
            host_refusal(pod_ip, "tcpSocket.host", None, "").as_deref(),
            Some("the pod has no IP: the probe host policy only lets probes connect to the pod IP")
        );
        assert!(host_refusal(pod_ip, "tcpSocket.host", Some("127.0.0.1"), "").is_some());
        assert_eq!(host_refusal(any, "tcpSocket.host", None, ""), None, "the kubelet's behaviour");
    }

    #[tokio::test]
    async fn maps_outcomes_and_records_exact_events() {
        let cases = [
            ("exit 0", exit(0, "fine"), Ok(ProbeResult::Success), vec![]),
            (
                "exit 1",
                exit(1, "boom"),
                Ok(ProbeResult::Failure),
                vec!["Warning Unhealthy Readiness probe failed: boom".to_owned()],
            ),
            (
                "runtime error",
                Err(ExecError::Runtime("no such container".into())),
                Err(ProbeError::Runtime("no such container".into())),
                vec!["Warning Unhealthy Readiness probe errored and resulted in unknown state: no such container".to_owned()],
            ),
        ];
        for (name, answer, want, events) in cases {
            let (prober, _, recorder) = setup(vec![answer]);
            assert_eq!(run(&prober, ProbeKind::Readiness, exec_probe(&["check"])).await, want, "case {name}");
            assert_eq!(recorder.rendered(), events, "case {name}");
        }
    }

    /// Keeps what it is shown.
    #[derive(Default, Clone)]
    struct Seen(Arc<Mutex<Vec<ProbeRecord<'static>>>>);

    impl ProbeObserver for Seen {
        fn observe(&self, record: ProbeRecord<'_>) {
            self.0.lock().unwrap().push(record.into_owned());
        }
    }

    #[tokio::test]
    async fn the_observer_reads_the_pod_the_container_and_what_the_probe_said() {
        let error = Err(ExecError::Runtime("no such container".into()));
        let (prober, _, _) = setup(vec![exit(1, "not yet"), error.clone(), error.clone(), error]);
        let seen = Seen::default();
        let prober = prober.with_observer(Arc::new(seen.clone()));
        assert_eq!(
            run(&prober, ProbeKind::Readiness, exec_probe(&["check"])).await,
            Ok(ProbeResult::Failure)
        );
        assert!(run(&prober, ProbeKind::Liveness, exec_probe(&["check"])).await.is_err());
        let records = seen.0.lock().unwrap().clone();
        let text = |r: &ProbeRecord<'_>| {
            [&r.pod_uid, &r.namespace, &r.pod, &r.container, &r.output].map(|t| t.to_string())
        };
        assert_eq!(records.len(), 2, "one record per probe run, retries included: {records:?}");
        assert_eq!(text(&records[0]), ["u1", "ns", "web", "app", "not yet"]);
        assert_eq!(
            (records[0].kind, records[0].result.clone()),
            (ProbeKind::Readiness, Ok(ProbeResult::Failure))
        );
        assert_eq!(text(&records[1]), ["u1", "ns", "web", "app", "no such container"]);
        assert_eq!(records[1].kind, ProbeKind::Liveness);
        assert_eq!(records[1].result, Err("no such container".to_owned()));
    }

    #[tokio::test]
    async fn retries_three_times_only_while_erroring() {
        let error = Err(ExecError::Runtime("flaky".into()));
        let (prober, runner, recorder) = setup(vec![error.clone(), error.clone(), exit(0, "")]);
        assert_eq!(run(&prober, ProbeKind::Liveness, exec_probe(&["check"])).await, Ok(ProbeResult::Success));
        assert_eq!(runner.commands.lock().unwrap().len(), 3, "two errors, then a result");
        assert!(recorder.events().is_empty());

        let (prober, runner, recorder) = setup(vec![error]);
        assert!(run(&prober, ProbeKind::Liveness, exec_probe(&["check"])).await.is_err());
        assert_eq!(runner.commands.lock().unwrap().len(), MAX_PROBE_RETRIES);
        assert_eq!(recorder.events().len(), 1, "one event after the last try");

        let (prober, runner, _) = setup(vec![exit(1, "")]);
        assert_eq!(run(&prober, ProbeKind::Liveness, exec_probe(&["check"])).await, Ok(ProbeResult::Failure));
        assert_eq!(runner.commands.lock().unwrap().len(), 1, "a failure is not retried");
    }

    #[tokio::test]
    async fn expands_env_in_exec_commands() {
        let (prober, runner, _) = setup(vec![exit(0, "")]);
        run(&prober, ProbeKind::Readiness, exec_probe(&["some", "$(A)", "$(B)"])).await.unwrap();
        assert_eq!(runner.commands.lock().unwrap()[0], ["some", "script", "$(B)"]);
    }

    #[tokio::test]
    async fn errors_name_what_is_wrong() {
        let (prober, _, recorder) = setup(vec![exit(0, "")]);
        assert_eq!(
            run(&prober, ProbeKind::Readiness, Probe::default()).await,
            Err(ProbeError::MissingHandler { pod: "web_ns(u1)".into(), container: "app".into() })
        );
        assert_eq!(
            recorder.rendered(),
            [
                "Warning Unhealthy Readiness probe errored and resulted in unknown state: missing probe handler for web_ns(u1):app"
            ]
        );

        let tcp = Probe {
            tcp_socket: Some(TCPSocketAction { port: IntOrString::String("web".into()), host: None }),
            ..Default::default()
        };
        assert_eq!(run(&prober, ProbeKind::Liveness, tcp).await, Err(ProbeError::PortNotFound("web".into())));
        let empty = exec_probe(&[]);
        assert!(matches!(run(&prober, ProbeKind::Liveness, empty).await, Err(ProbeError::InvalidCommand(_))));
    }

    #[tokio::test]
    async fn exec_wins_over_other_handlers() {
        let (prober, runner, _) = setup(vec![exit(0, "")]);
        let both = Probe {
            tcp_socket: Some(TCPSocketAction { port: IntOrString::Int(1), host: None }),
            ..exec_probe(&["check"])
        };
        assert_eq!(run(&prober, ProbeKind::Readiness, both).await, Ok(ProbeResult::Success));
        assert_eq!(runner.commands.lock().unwrap().len(), 1);
    }

    #[tokio::test]
    async fn absent_probe_is_success() {
        let (prober, runner, _) = setup(vec![exit(1, "")]);
        let (pod, mut container) = pod_and_container(exec_probe(&["check"]));
        container.startup_probe = None;
        let got = prober
            .probe(ProbeKind::Startup, &pod, &PodProbeStatus::default(), &container, &ContainerId::default())
            .await;
        assert_eq!(got, Ok(ProbeResult::Success));
        assert!(runner.commands.lock().unwrap().is_empty());
    }

    #[test]
    fn timeout_defaults_and_container_references() {
        assert_eq!(probe_timeout(&Probe::default()), Duration::from_secs(1));
        assert_eq!(
            probe_timeout(&Probe { timeout_seconds: Some(0), ..Default::default() }),
            Duration::from_secs(1)
        );
        assert_eq!(
            probe_timeout(&Probe { timeout_seconds: Some(5), ..Default::default() }),
            Duration::from_secs(5)
        );
        let (pod, container) = pod_and_container(Probe::default());
        assert_eq!(container_reference(&pod, &container).field_path.as_deref(), Some("spec.containers{app}"));
    }

    #[tokio::test]
    async fn warning_is_success_with_an_event() {
        let recorder = MemoryRecorder::new();
        let prober = Prober::new(Arc::new(FakeRunner::default()), Arc::new(recorder.clone()));
        let (pod, container) = pod_and_container(Probe::default());
        // The HTTP executor returns warnings for unfollowed redirects; the mapping is the same
        // for any executor, so drive it directly.
        let mapped = prober.map_outcome(
            ProbeKind::Readiness,
            &pod,
            || &container,
            &Ok(Probed::new(ProbeOutcome::Warning, "probe output")),
        );
        assert_eq!(mapped, Ok(ProbeResult::Success));
        assert_eq!(recorder.rendered(), ["Warning ProbeWarning Readiness probe warning: probe output"]);
        let unknown = prober.map_outcome(
            ProbeKind::Readiness,
            &pod,
            || &container,
            &Ok(Probed::new(ProbeOutcome::Unknown, "")),
        );
        assert_eq!(unknown, Ok(ProbeResult::Failure));
        assert_eq!(recorder.events().len(), 1, "unknown records no event");
    }

    /// Upstream's `probe` logs each outcome: "Probe errored" and "Probe failed" and "Probe
    /// unknown without error" at verbosity 1, "Probe succeeded" and "Probe succeeded with a
    /// warning" at 3, all at debug here, with klog's keys in upstream's order and klog's value
    /// forms: the pod as `namespace/name`, the probe type capitalised, strings quoted
    /// (docs/architecture.md, "Log lines"). Before, only the error was logged; then with the
    /// engine's own keys (`probe_kind`, `container`, the pod as `name_namespace(uid)`).
    #[test]
    fn each_outcome_logs_upstreams_line_at_debug() {
        let prober = Prober::new(Arc::new(FakeRunner::default()), Arc::new(MemoryRecorder::new()));
        let (pod, container) = pod_and_container(Probe::default());
        let who = r#"probeType="Readiness" pod="ns/web" podUID="u1" containerName="app""#;
        let cases = [
            ("success", Ok(Probed::new(ProbeOutcome::Success, "")), "Probe succeeded", String::new()),
            (
                "warning",
                Ok(Probed::new(ProbeOutcome::Warning, "w")),
                "Probe succeeded with a warning",
                r#" output="w""#.to_owned(),
            ),
            (
                "failure",
                Ok(Probed::new(ProbeOutcome::Failure, "f")),
                "Probe failed",
                r#" probeResult="failure" output="f""#.to_owned(),
            ),
            (
                "unknown",
                Ok(Probed::new(ProbeOutcome::Unknown, "")),
                "Probe unknown without error",
                r#" probeResult="unknown""#.to_owned(),
            ),
            (
                "error",
                Err(ProbeError::InvalidPort(0)),
                "Probe errored",
                format!(r#" probeResult="unknown" err={:?}"#, ProbeError::InvalidPort(0).to_string()),
            ),
        ];
        for (name, attempt, line, rest) in cases {
            let (log, _guard) = crate::test_log::Captured::start();
            let _ = prober.map_outcome(ProbeKind::Readiness, &pod, || &container, &attempt);
            assert_eq!(log.messages(), [line], "case {name}");
            assert_eq!(log.levels_of(line), [tracing::Level::DEBUG], "case {name}");
            assert_eq!(log.fields_of(line), [format!("{who}{rest}")], "case {name}");
        }
    }

    /// A container without the probe asked for: upstream's "Probe is nil" at info, with its
    /// keys.
    #[tokio::test]
    async fn a_missing_probe_logs_upstreams_line_with_its_keys() {
        let (prober, _, _) = setup(vec![]);
        let (pod, mut container) = pod_and_container(exec_probe(&["check"]));
        container.startup_probe = None;
        let (log, _guard) = crate::test_log::Captured::start();
        let _ = prober
            .probe(ProbeKind::Startup, &pod, &PodProbeStatus::default(), &container, &ContainerId::default())
            .await;
        assert_eq!(log.levels_of("Probe is nil"), [tracing::Level::INFO]);
        assert_eq!(
            log.fields_of("Probe is nil"),
            [r#"probeType="Startup" pod="ns/web" podUID="u1" containerName="app""#]
        );
    }

    /// A probe without a handler: upstream logs "Failed to find probe builder for container"
    /// at verbosity 4 (trace) before it answers the error. Before, nothing was logged; then it
    /// was logged at info, the level of an older upstream.
    #[tokio::test]
    async fn a_probe_without_a_handler_logs_upstreams_line_at_trace() {
        let (prober, _, _) = setup(vec![]);
        let (log, _guard) = crate::test_log::Captured::start();
        let _ = run(&prober, ProbeKind::Readiness, Probe::default()).await;
        assert_eq!(
            log.levels_of("Failed to find probe builder for container"),
            [tracing::Level::TRACE; MAX_PROBE_RETRIES],
            "one per try: {:?}",
            log.messages()
        );
        assert_eq!(
            log.fields_of("Failed to find probe builder for container"),
            [r#"containerName="app""#; MAX_PROBE_RETRIES]
        );
    }

    /// What a probe holds while it queues for a slot: the tries are boxed once the slot is
    /// held, so ten thousand workers started at once queue with 376 bytes each (release
    /// build), not the 1,304 of the tries' whole state (docs/memory.md, "The burst of first
    /// probes").
    #[test]
    fn a_probe_waiting_for_a_slot_stays_small() {
        let (prober, _, _) = setup(vec![exit(0, "")]);
        let (pod, container) = pod_and_container(exec_probe(&["check"]));
        let status = PodProbeStatus::default();
        let id = ContainerId::parse("x://1");
        let memo = ProbeMemo::for_probe(Some(&exec_probe(&["check"])));
        let waiting = prober.probe_remembering(
            ProbeKind::Readiness,
            &pod,
            &status,
            &container,
            &id,
            Duration::from_secs(1),
            Some(&memo),
            || RecordNames::of(&pod, &container),
        );
        let size = std::mem::size_of_val(&waiting);
        assert!(size <= 512, "a probe's future is {size} bytes before its slot");
    }
}
