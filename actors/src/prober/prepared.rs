//! A probe made ready once per published status and run at every probe of it: what
//! [`ProbeRunner::prepare`](super::ProbeRunner::prepare) answers. The real prober's
//! `Prepared` keeps the probe's memo (the HTTP request), the container ID it probes, the
//! address a TCP probe of the pod IP dials, and the pod's names for the observer in one block
//! of text, so that a probe that runs every second reads only its own few lines of memory, not
//! the pod, its container's probe spec and the container ID's reference counts afresh
//! (docs/benchmarks.md, "A probe prepared once per status"). What it runs is exactly what
//! [`ProbeRunner::probe_with_memo`](super::ProbeRunner::probe_with_memo) runs for the same
//! arguments: the same executor, tries, events and observer record.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use futures::future::BoxFuture;
use k8s_openapi::api::core::v1::{Container, Pod, Probe};

use super::probe::{RecordNames, SlotUse};
use super::{PodContainer, ProbeKind, ProbeMemo, ProbeRun, Prober, port, tcp};
use crate::container::ContainerId;
use crate::status::probe_status::PodProbeStatus;

/// A probe of one container instance, ready to run again and again while the pod's probe
/// status stays at the publish it was prepared from. A worker drops it at the next publish,
/// and at a new probe spec, and prepares another.
pub trait PreparedProbe: Send + Sync + 'static {
    /// Runs the probe once. `status` is the pod's probe status of the publish the probe was
    /// prepared from (the worker's, with the pod IP its container started with when the
    /// status has none yet); it is passed, not kept, so that a prepared probe does not hold an
    /// old status alive after the next publish.
    fn run(self: Arc<Self>, status: Arc<PodProbeStatus>) -> BoxFuture<'static, ProbeRun>;
}

/// The real prober's prepared probe.
pub(crate) struct Prepared {
    prober: Prober,
    kind: ProbeKind,
    container: PodContainer,
    container_id: ContainerId,
    timeout: Duration,
    memo: ProbeMemo,
    /// A `tcpSocket` probe of the pod IP with the real executor: the address it dials. The
    /// other probes go through the dispatcher at every run.
    tcp_addr: Option<SocketAddr>,
    /// The pod's and container's names as the observer's record carries them; `None` when the
    /// prober has no observer.
    names: Option<KeptNames>,
}

impl Prepared {
    pub(crate) fn new(
        prober: &Prober,
        kind: ProbeKind,
        container: &PodContainer,
        status: &PodProbeStatus,
        container_id: &ContainerId,
        timeout: Duration,
    ) -> Self {
        let spec = kind.probe_of(container);
        Prepared {
            prober: prober.clone(),
            kind,
            container: container.clone(),
            container_id: container_id.clone(),
            timeout,
            memo: ProbeMemo::for_probe(spec),
            tcp_addr: spec.and_then(|spec| tcp_addr(prober, spec, container, status)),
            names: prober.has_observer().then(|| KeptNames::new(container.pod(), container)),
        }
    }

    fn record_names(&self) -> RecordNames<'_> {
        match &self.names {
            Some(names) => names.get(),
            None => RecordNames::of(self.container.pod(), &self.container),
        }
    }
}

impl PreparedProbe for Prepared {
    fn run(self: Arc<Self>, status: Arc<PodProbeStatus>) -> BoxFuture<'static, ProbeRun> {
        Box::pin(self.run_owned(status))
    }
}

impl Prepared {
    async fn run_owned(self: Arc<Self>, status: Arc<PodProbeStatus>) -> ProbeRun {
        let this = &*self;
        let (kind, pod) = (this.kind, this.container.pod());
        let names = || this.record_names();
        match this.tcp_addr {
            // What the dispatcher would do for this probe (`Prober::run_probe`): one try, as a
            // TCP probe never errors. Boxed once the slot is held, as the dispatcher's tries
            // are: inline, the try's state would be held while the probe queues for its slot.
            Some(addr) => {
                drop(status);
                let attempt = || Box::pin(async move { Ok(tcp::probe_addr(addr, this.timeout).await) });
                let slot = SlotUse::new(false, this.timeout);
                this.prober.run_observed(kind, slot, pod, || &*this.container, names, attempt).await
            }
            None => {
                let (id, memo) = (&this.container_id, Some(&this.memo));
                this.prober
                    .probe_remembering(kind, pod, &status, &this.container, id, this.timeout, memo, names)
                    .await
            }
        }
    }
}

/// The address a `tcpSocket` probe dials when it is the probe's handler, has no `host` of its
/// own, runs on the real executor, and the pod IP is an address: the dispatcher's own rule for
/// dialling the pod IP directly. A port that does not resolve is left to the dispatcher, which
/// reports it at each run.
fn tcp_addr(
    prober: &Prober,
    spec: &Probe,
    container: &Container,
    status: &PodProbeStatus,
) -> Option<SocketAddr> {
    // The first handler set wins: exec, httpGet, tcpSocket.
    if spec.exec.is_some() || spec.http_get.is_some() || prober.has_tcp_executor() {
        return None;
    }
    let action = spec.tcp_socket.as_ref()?;
    if action.host.as_deref().is_some_and(|host| !host.is_empty()) {
        return None;
    }
    let port = port::resolve_container_port(&action.port, container).ok()?;
    Some(SocketAddr::new(status.pod_ip_addr()?, port))
}

/// The four names of an observer's record in one allocation: the pod's UID, namespace and name,
/// and the container's name.
struct KeptNames {
    text: Box<str>,
    /// Where the first three end in `text`.
    ends: [usize; 3],
}

impl KeptNames {
    fn new(pod: &Pod, container: &Container) -> Self {
        let RecordNames { pod_uid, namespace, pod, container } = RecordNames::of(pod, container);
        let mut text = String::with_capacity(pod_uid.len() + namespace.len() + pod.len() + container.len());
        let mut ends = [0; 3];
        for (end, part) in ends.iter_mut().zip([pod_uid, namespace, pod]) {
            text.push_str(part);
            *end = text.len();
        }
        text.push_str(container);
        KeptNames { text: text.into_boxed_str(), ends }
    }

    fn get(&self) -> RecordNames<'_> {
        let [a, b, c] = self.ends;
        let part = |from: usize, to: usize| self.text.get(from..to).unwrap_or_default();
        RecordNames {
            pod_uid: part(0, a),
            namespace: part(a, b),
            pod: part(b, c),
            container: part(c, self.text.len()),
        }
    }
}

#[cfg(test)]
mod tests {
    use k8s_openapi::api::core::v1::{PodSpec, TCPSocketAction};
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
    use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;

    use super::*;
    use crate::contracts::MemoryRecorder;
    use crate::local_runner::LocalCommandRunner;

    /// What a prepared probe holds while it queues for a probe slot (docs/memory.md, "The
    /// burst of first probes"): the dispatcher's own future and little more (the prepared
    /// probe and the status; 560 bytes against 504 in a debug build). A TCP probe's try is
    /// boxed once the slot is held, as the dispatcher's are: inline, it made 744.
    #[test]
    fn a_prepared_probe_waiting_for_a_slot_stays_small() {
        let probe = Probe {
            tcp_socket: Some(TCPSocketAction { port: IntOrString::Int(80), host: None }),
            ..Default::default()
        };
        let container = Container { name: "app".into(), readiness_probe: Some(probe), ..Default::default() };
        let pod = Arc::new(Pod {
            spec: Some(PodSpec { containers: vec![container], ..Default::default() }),
            ..Default::default()
        });
        let container = PodContainer::find(&pod, "app").expect("the container");
        let prober = Prober::new(Arc::new(LocalCommandRunner::default()), Arc::new(MemoryRecorder::new()));
        let status = PodProbeStatus::default();
        let id = ContainerId::parse("x://1");
        let prepared = Arc::new(Prepared::new(
            &prober,
            ProbeKind::Readiness,
            &container,
            &status,
            &id,
            Duration::from_secs(1),
        ));
        let dispatched = prober.probe_remembering(
            ProbeKind::Readiness,
            &pod,
            &status,
            &container,
            &id,
            Duration::from_secs(1),
            None,
            || RecordNames::of(&pod, &container),
        );
        let dispatched = std::mem::size_of_val(&dispatched);
        let size = std::mem::size_of_val(&prepared.clone().run_owned(Arc::new(status.clone())));
        assert!(
            size <= dispatched + 64,
            "a prepared probe's future is {size} bytes before its slot, the dispatcher's {dispatched}"
        );
    }

    #[test]
    fn kept_names_give_back_each_name() {
        let pod = Pod {
            metadata: ObjectMeta {
                uid: Some("u-1".into()),
                namespace: Some("".into()),
                name: Some("web-0".into()),
                ..Default::default()
            },
            ..Default::default()
        };
        let container = Container { name: "app".into(), ..Default::default() };
        let kept = KeptNames::new(&pod, &container);
        let names = kept.get();
        assert_eq!((names.pod_uid, names.namespace, names.pod, names.container), ("u-1", "", "web-0", "app"));
        let unnamed = KeptNames::new(&Pod::default(), &Container::default());
        let names = unnamed.get();
        assert_eq!((names.pod_uid, names.namespace, names.pod, names.container), ("", "", "", ""));
    }
}
