//! What a pod's probes read of its status, published beside every stored status.
//!
//! A probe worker reads the pod's status before every probe (upstream `doProbe` asks the
//! status manager for it): whether the pod finished, its container's ID, state, start time and
//! `started` flag, and, for the probe itself, the pod IP. Reading those from the stored
//! status would mean decoding it every probe ([`super::stored`] keeps it as JSON), so the
//! status manager extracts them once per stored version: about 300 bytes for a one-container
//! pod where the whole status in k8s-openapi's types took 2.1 KB (docs/memory.md).

use std::collections::HashMap;
use std::net::IpAddr;

use k8s_openapi::api::core::v1::{ContainerStatus, PodStatus};
use k8s_openapi::jiff::Timestamp;

use super::{PHASE_FAILED, PHASE_SUCCEEDED};
use crate::container::ContainerId;

/// The part of a pod's status its probe workers and probes read.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct PodProbeStatus {
    /// The pod's phase when it is Failed or Succeeded (its workers stop); `None` otherwise.
    pub finished: Option<&'static str>,
    /// The pod's IP; `None` when the status has none, or an empty one. Private, with its
    /// parsed form, so that the two always agree ([`PodProbeStatus::set_pod_ip`]).
    pod_ip: Option<Box<str>>,
    /// `pod_ip` parsed, when it is an IP address: a TCP probe dials it without reading and
    /// parsing the text again at every probe (docs/benchmarks.md).
    pod_ip_addr: Option<IpAddr>,
    /// The containers that have an ID, regular containers first, then init containers (which
    /// is where sidecars are).
    pub containers: Box<[ProbedContainer]>,
    /// The status's `AllContainersRestarting` condition is True: the pod is restarting all its
    /// containers (KEP-5532), so a terminated container's workers go on (docs/prober.md §1.3
    /// step 7).
    pub all_containers_restarting: bool,
}

/// One container's status, as its probes read it.
#[derive(Debug, Clone, PartialEq)]
pub struct ProbedContainer {
    /// The container's name in the spec.
    pub name: Box<str>,
    /// The container instance the status shows.
    pub id: ContainerId,
    /// Whether it runs, and since when.
    pub state: ContainerRunState,
    /// The status's `started` flag.
    pub started: Option<bool>,
}

/// A container's state, as far as a probe cares.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ContainerRunState {
    /// Running, since `started_at` if the status says.
    Running {
        /// The state's `startedAt`.
        started_at: Option<Timestamp>,
    },
    /// Terminated, with the exit code the runtime reported (what decides, under
    /// `ContainerRestartRules`, whether the container runs again: `restart::container_should_restart`).
    Terminated {
        /// The state's `exitCode`.
        exit_code: i32,
    },
    /// Waiting, or no state at all.
    Waiting,
}

impl PodProbeStatus {
    /// The probe status of `status`. Container IDs equal to those in `previous` are shared
    /// with it rather than parsed again, so a pod's versions (and its workers, which keep the
    /// ID) hold one copy of each.
    pub fn of(status: &PodStatus, previous: Option<&PodProbeStatus>) -> Self {
        let with_id = |cs: &&ContainerStatus| cs.container_id.as_deref().is_some_and(|id| !id.is_empty());
        let known = KnownIds::of(previous);
        let containers = status
            .container_statuses
            .iter()
            .flatten()
            .filter(with_id)
            .chain(status.init_container_statuses.iter().flatten().filter(with_id))
            .map(|cs| ProbedContainer::of(cs, known.find(cs.container_id.as_deref().unwrap_or_default())))
            .collect();
        let all_containers_restarting =
            status.conditions.iter().flatten().any(|c| {
                c.type_ == crate::restart::CONDITION_ALL_CONTAINERS_RESTARTING && c.status == "True"
            });
        let mut probe = PodProbeStatus {
            finished: match status.phase.as_deref() {
                Some(PHASE_FAILED) => Some(PHASE_FAILED),
                Some(PHASE_SUCCEEDED) => Some(PHASE_SUCCEEDED),
                _ => None,
            },
            containers,
            all_containers_restarting,
            ..Default::default()
        };
        probe.set_pod_ip(status.pod_ip.as_deref());
        probe
    }

    /// Sets the pod IP (`None` or empty: none), and its parsed form.
    pub fn set_pod_ip(&mut self, ip: Option<&str>) {
        let ip = ip.filter(|ip| !ip.is_empty());
        self.pod_ip = ip.map(Box::from);
        self.pod_ip_addr = ip.and_then(|ip| ip.parse().ok());
    }

    /// The pod IP as an address, when it is one (a name or a scoped IPv6 address is not).
    pub fn pod_ip_addr(&self) -> Option<IpAddr> {
        self.pod_ip_addr
    }

    /// Whether the status has a pod IP.
    pub fn has_pod_ip(&self) -> bool {
        self.pod_ip.is_some()
    }

    /// Where the container named `name` is in [`PodProbeStatus::containers`].
    pub fn container_index(&self, name: &str) -> Option<usize> {
        self.containers.iter().position(|c| &*c.name == name)
    }

    /// The container's status by name: the regular container's, else the init container's.
    pub fn container(&self, name: &str) -> Option<&ProbedContainer> {
        self.containers.get(self.container_index(name)?)
    }

    /// The container whose running instance is `id`, if the status shows it running: what a
    /// kill for a failed liveness or startup probe must find.
    pub fn running(&self, id: &ContainerId) -> Option<&ProbedContainer> {
        self.containers.iter().find(|c| c.id == *id && matches!(c.state, ContainerRunState::Running { .. }))
    }

    /// Upstream `ShouldAllContainersRestart` on this status alone (as the worker asks it, with
    /// no runtime view): the `AllContainersRestarting` condition is True, or one of the pod's
    /// containers shows terminated with an exit code its rules answer with
    /// `RestartAllContainers`.
    pub fn all_containers_restart(&self, spec: &k8s_openapi::api::core::v1::PodSpec) -> bool {
        let terminated = |name: &str| match self.container(name)?.state {
            ContainerRunState::Terminated { exit_code } => Some(exit_code),
            _ => None,
        };
        crate::restart::should_all_containers_restart(spec, None, self.all_containers_restarting, terminated)
    }

    /// The pod IP, or `""`.
    pub fn pod_ip(&self) -> &str {
        self.pod_ip.as_deref().unwrap_or_default()
    }
}

impl From<&PodStatus> for PodProbeStatus {
    fn from(status: &PodStatus) -> Self {
        PodProbeStatus::of(status, None)
    }
}

/// The previous version's containers, found by raw container ID: scanned when they are few,
/// through an index by the ID's text when there are many (a scan per container was quadratic:
/// three quarters of the agent's CPU for a pod of 2,000 containers).
enum KnownIds<'a> {
    Scan(&'a [ProbedContainer]),
    Index(HashMap<String, &'a ProbedContainer>),
}

impl<'a> KnownIds<'a> {
    /// Lists shorter than this are scanned.
    const INDEX_FROM: usize = 16;

    fn of(previous: Option<&'a PodProbeStatus>) -> Self {
        let containers: &[ProbedContainer] = previous.map_or(&[], |p| &p.containers);
        if containers.len() < Self::INDEX_FROM {
            return KnownIds::Scan(containers);
        }
        // First of an ID wins, as with a scan. An ID's text is the raw ID it was parsed from,
        // except for one with an empty runtime written `://id`: not found then, it is parsed
        // again, an equal value in a copy of its own.
        let mut index = HashMap::with_capacity(containers.len());
        for c in containers {
            index.entry(c.id.to_string()).or_insert(c);
        }
        KnownIds::Index(index)
    }

    fn find(&self, raw: &str) -> Option<&'a ProbedContainer> {
        match self {
            KnownIds::Scan(containers) => containers.iter().find(|c| c.id.is(raw)),
            KnownIds::Index(index) => index.get(raw).copied(),
        }
    }
}

impl ProbedContainer {
    fn of(cs: &ContainerStatus, known: Option<&ProbedContainer>) -> Self {
        let raw = cs.container_id.as_deref().unwrap_or_default();
        let state = cs.state.as_ref();
        let state = match (state.and_then(|s| s.running.as_ref()), state.and_then(|s| s.terminated.as_ref()))
        {
            (Some(running), _) => {
                ContainerRunState::Running { started_at: running.started_at.as_ref().map(|t| t.0) }
            }
            (None, Some(terminated)) => ContainerRunState::Terminated { exit_code: terminated.exit_code },
            (None, None) => ContainerRunState::Waiting,
        };
        ProbedContainer {
            name: known
                .filter(|k| *k.name == *cs.name)
                .map_or_else(|| cs.name.as_str().into(), |k| k.name.clone()),
            id: known.map_or_else(|| ContainerId::parse(raw), |k| k.id.clone()),
            state,
            started: cs.started,
        }
    }

    /// When it started running, if it runs and the status says.
    pub fn running_since(&self) -> Option<Timestamp> {
        match self.state {
            ContainerRunState::Running { started_at } => started_at,
            _ => None,
        }
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)] // a panic is the failure report
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::{ContainerState, ContainerStateRunning, ContainerStateTerminated};
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
    use std::sync::Arc;

    fn container(name: &str, id: Option<&str>, state: Option<ContainerState>) -> ContainerStatus {
        ContainerStatus { name: name.into(), container_id: id.map(Into::into), state, ..Default::default() }
    }

    fn running(at: i64) -> Option<ContainerState> {
        Some(ContainerState {
            running: Some(ContainerStateRunning {
                started_at: Some(Time(Timestamp::from_second(at).unwrap())),
            }),
            ..Default::default()
        })
    }

    /// What a kill for a failed probe looks up: the container by its instance's ID, only while
    /// that instance runs (a sidecar, an init container, is found too).
    #[test]
    fn a_running_instance_is_found_by_its_id() {
        let waiting = Some(ContainerState { waiting: Some(Default::default()), ..Default::default() });
        let status = PodStatus {
            container_statuses: Some(vec![
                container("app", Some("containerd://a"), running(100)),
                container("created", Some("containerd://c"), waiting),
            ]),
            init_container_statuses: Some(vec![container("side", Some("containerd://s"), running(90))]),
            ..Default::default()
        };
        let status = PodProbeStatus::from(&status);
        let name = |id: &str| status.running(&ContainerId::parse(id)).map(|c| &*c.name);
        assert_eq!(name("containerd://a"), Some("app"));
        assert_eq!(name("containerd://s"), Some("side"));
        assert_eq!(name("containerd://c"), None, "created, not running");
        assert_eq!(name("containerd://gone"), None);
    }

    #[test]
    fn containers_with_an_id_regular_first_then_init() {
        let status = PodStatus {
            phase: Some("Running".into()),
            pod_ip: Some("10.1.2.3".into()),
            container_statuses: Some(vec![
                container("side", None, None),
                container("app", Some("containerd://a"), running(100)),
            ]),
            init_container_statuses: Some(vec![
                container("side", Some("containerd://s"), running(50)),
                container(
                    "init",
                    Some("containerd://i"),
                    Some(ContainerState {
                        terminated: Some(ContainerStateTerminated::default()),
                        ..Default::default()
                    }),
                ),
                container("empty", Some(""), running(1)),
            ]),
            ..Default::default()
        };
        let probe = PodProbeStatus::from(&status);
        assert!(probe.finished.is_none());
        assert_eq!(probe.pod_ip(), "10.1.2.3");
        let names: Vec<&str> = probe.containers.iter().map(|c| &*c.name).collect();
        assert_eq!(names, ["app", "side", "init"]);
        // A regular container without an ID yet is looked for among init containers.
        assert_eq!(probe.container("side").unwrap().id, ContainerId::parse("containerd://s"));
        assert_eq!(
            probe.container("app").unwrap().running_since(),
            Some(Timestamp::from_second(100).unwrap())
        );
        assert_eq!(probe.container("init").unwrap().state, ContainerRunState::Terminated { exit_code: 0 });
        assert!(probe.container("empty").is_none());
    }

    #[test]
    fn a_finished_phase_and_a_missing_ip() {
        for (phase, finished) in
            [("Failed", Some("Failed")), ("Succeeded", Some("Succeeded")), ("Pending", None), ("", None)]
        {
            let status =
                PodStatus { phase: Some(phase.into()), pod_ip: Some(String::new()), ..Default::default() };
            let probe = PodProbeStatus::from(&status);
            assert_eq!(probe.finished, finished, "{phase}");
            assert!(!probe.has_pod_ip());
            assert_eq!((probe.pod_ip(), probe.pod_ip_addr()), ("", None));
        }
    }

    #[test]
    fn the_pod_ip_is_parsed_once_when_it_is_an_address() {
        let of =
            |ip: &str| PodProbeStatus::from(&PodStatus { pod_ip: Some(ip.into()), ..Default::default() });
        let v4 = of("10.1.2.3");
        assert_eq!((v4.pod_ip(), v4.pod_ip_addr()), ("10.1.2.3", Some(IpAddr::from([10, 1, 2, 3]))));
        assert_eq!(of("fd00::7").pod_ip_addr(), Some("fd00::7".parse().unwrap()));
        for not_an_address in ["pod.example", "fe80::1%eth0", "10.1.2"] {
            let status = of(not_an_address);
            assert_eq!(status.pod_ip(), not_an_address, "kept as text");
            assert_eq!(status.pod_ip_addr(), None, "{not_an_address}: dialled by name");
        }
        let mut moved = v4;
        moved.set_pod_ip(Some("10.9.9.9"));
        assert_eq!((moved.pod_ip(), moved.pod_ip_addr()), ("10.9.9.9", Some(IpAddr::from([10, 9, 9, 9]))));
        moved.set_pod_ip(Some(""));
        assert_eq!((moved.has_pod_ip(), moved.pod_ip_addr()), (false, None));
    }

    #[test]
    fn a_new_version_shares_the_ids_it_already_had() {
        let status = |id: &str| PodStatus {
            container_statuses: Some(vec![container("app", Some(id), running(1))]),
            ..Default::default()
        };
        let first = PodProbeStatus::from(&status("containerd://a"));
        let same = PodProbeStatus::of(&status("containerd://a"), Some(&first));
        assert!(Arc::ptr_eq(&first.containers[0].id.id, &same.containers[0].id.id));
        let next = PodProbeStatus::of(&status("containerd://b"), Some(&first));
        assert_eq!(next.containers[0].id, ContainerId::parse("containerd://b"));
    }

    /// With many containers the previous IDs are found through an index: the same sharing as
    /// the scan, the first of a duplicated ID winning, a new ID parsed.
    #[test]
    fn many_containers_share_their_ids_through_the_index() {
        let status = |ids: &[String]| PodStatus {
            container_statuses: Some(
                ids.iter()
                    .enumerate()
                    .map(|(i, id)| container(&format!("c{i}"), Some(id), running(1)))
                    .collect(),
            ),
            ..Default::default()
        };
        let mut ids: Vec<String> = (0..40).map(|i| format!("containerd://{i}")).collect();
        ids.push("containerd://7".into());
        let first = PodProbeStatus::from(&status(&ids));
        ids[3] = "containerd://new".into();
        let next = PodProbeStatus::of(&status(&ids), Some(&first));
        for (i, c) in next.containers.iter().enumerate() {
            assert_eq!(c.id, ContainerId::parse(&ids[i]), "{i}");
            let shared = i != 3;
            assert_eq!(
                Arc::ptr_eq(&first.containers[if i == 40 { 7 } else { i }].id.id, &c.id.id),
                shared,
                "{i}"
            );
        }
    }
}
