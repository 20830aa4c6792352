//! Which pod conditions the status writer owns, and the "did the status change?" test built on
//! it (docs/status-manager.md §5.9). Upstream: `kubetypes.PodConditionByKubelet`,
//! `kubetypes.PodConditionSharedByKubelet` (`pkg/kubelet/types/pod_status.go`) and
//! `isPodStatusByKubeletEqual` (`pkg/kubelet/status/status_manager.go`).
//!
//! The owned set is a value ([`ConditionOwnership`]) rather than constants spread through the
//! code, so a later mode can own just one readiness-gate condition; [`ConditionOwnership::KUBELET`]
//! is today's set and what the plain functions use.

use std::borrow::Cow;

use k8s_openapi::api::core::v1::{PodCondition, PodStatus};

/// `v1.PodScheduled`.
pub const POD_SCHEDULED: &str = "PodScheduled";
pub use super::generate::{CONTAINERS_READY, POD_INITIALIZED, POD_READY};
/// `v1.PodResizeInProgress`.
pub const POD_RESIZE_IN_PROGRESS: &str = "PodResizeInProgress";
/// `v1.PodResizePending`.
pub const POD_RESIZE_PENDING: &str = "PodResizePending";
/// `v1.PodReadyToStartContainers` (kubelet-owned while its feature gate is on, which we assume).
pub const POD_READY_TO_START_CONTAINERS: &str = "PodReadyToStartContainers";
/// `v1.AllContainersRestarting` (KEP-5532): generated only for a pod that could restart all its
/// containers, under `RestartAllContainersOnContainerExits`.
pub use crate::restart::CONDITION_ALL_CONTAINERS_RESTARTING as ALL_CONTAINERS_RESTARTING;
/// `v1.DisruptionTarget`: written by controllers and by the kubelet (shared).
pub const DISRUPTION_TARGET: &str = "DisruptionTarget";

/// Upstream `PodConditionsByKubelet` plus `PodReadyToStartContainers` (its gate treated as on)
/// and `AllContainersRestarting`.
pub const KUBELET_OWNED_CONDITIONS: [&str; 8] = [
    POD_SCHEDULED,
    POD_READY,
    POD_INITIALIZED,
    CONTAINERS_READY,
    POD_RESIZE_IN_PROGRESS,
    POD_RESIZE_PENDING,
    POD_READY_TO_START_CONTAINERS,
    ALL_CONTAINERS_RESTARTING,
];

/// Upstream `PodConditionSharedByKubelet`: condition types the kubelet writes alongside others.
pub const KUBELET_SHARED_CONDITIONS: [&str; 1] = [DISRUPTION_TARGET];

/// Upstream `kubetypes.PodConditionByKubelet` (with the PodReadyToStartContainers gate on).
pub fn is_kubelet_owned_condition(condition_type: &str) -> bool {
    ConditionOwnership::KUBELET.owns(condition_type)
}

/// Upstream `kubetypes.PodConditionSharedByKubelet`.
pub fn is_shared_condition(condition_type: &str) -> bool {
    ConditionOwnership::KUBELET.shares(condition_type)
}

/// The pod condition types a status writer owns outright (it decides their whole value and
/// removes them) and those it shares with other writers (it sets them only at specific moments
/// and never removes them). Everything else belongs to someone else and is never touched.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConditionOwnership {
    /// Types the writer owns (the kubelet: [`KUBELET_OWNED_CONDITIONS`]).
    owned: Cow<'static, [Cow<'static, str>]>,
    /// Types the writer shares (the kubelet: [`KUBELET_SHARED_CONDITIONS`]).
    shared: Cow<'static, [Cow<'static, str>]>,
}

impl ConditionOwnership {
    /// The kubelet's ownership: what upstream's status manager uses.
    pub const KUBELET: ConditionOwnership = ConditionOwnership {
        owned: Cow::Borrowed(&[
            Cow::Borrowed(POD_SCHEDULED),
            Cow::Borrowed(POD_READY),
            Cow::Borrowed(POD_INITIALIZED),
            Cow::Borrowed(CONTAINERS_READY),
            Cow::Borrowed(POD_RESIZE_IN_PROGRESS),
            Cow::Borrowed(POD_RESIZE_PENDING),
            Cow::Borrowed(POD_READY_TO_START_CONTAINERS),
            Cow::Borrowed(ALL_CONTAINERS_RESTARTING),
        ]),
        shared: Cow::Borrowed(&[Cow::Borrowed(DISRUPTION_TARGET)]),
    };

    /// An ownership built at run time (e.g. one readiness-gate condition from configuration).
    pub fn new<O, S>(owned: O, shared: S) -> Self
    where
        O: IntoIterator,
        O::Item: Into<String>,
        S: IntoIterator,
        S::Item: Into<String>,
    {
        let collect = |items: Vec<String>| Cow::Owned(items.into_iter().map(Cow::Owned).collect());
        ConditionOwnership {
            owned: collect(owned.into_iter().map(Into::into).collect()),
            shared: collect(shared.into_iter().map(Into::into).collect()),
        }
    }

    /// Whether the writer owns this condition type outright.
    pub fn owns(&self, condition_type: &str) -> bool {
        self.owned.iter().any(|t| t == condition_type)
    }

    /// Whether the writer shares this condition type with other writers.
    pub fn shares(&self, condition_type: &str) -> bool {
        self.shared.iter().any(|t| t == condition_type)
    }

    /// The owned types, in declaration order.
    pub fn owned(&self) -> impl Iterator<Item = &str> {
        self.owned.iter().map(|t| t.as_ref())
    }

    /// The shared types, in declaration order.
    pub fn shared(&self) -> impl Iterator<Item = &str> {
        self.shared.iter().map(|t| t.as_ref())
    }
}

impl Default for ConditionOwnership {
    fn default() -> Self {
        ConditionOwnership::KUBELET
    }
}

/// Upstream `podutil.GetPodConditionFromList`: the first condition of that type.
pub fn get_pod_condition<'a>(
    conditions: Option<&'a [PodCondition]>,
    condition_type: &str,
) -> Option<&'a PodCondition> {
    conditions?.iter().find(|c| c.type_ == condition_type)
}

/// Upstream `isPodStatusByKubeletEqual` with the kubelet's ownership. See
/// [`is_pod_status_equal_for`].
pub fn is_pod_status_by_kubelet_equal(old: &PodStatus, new: &PodStatus) -> bool {
    is_pod_status_equal_for(old, new, &ConditionOwnership::KUBELET)
}

/// Upstream `isPodStatusByKubeletEqual` for a given ownership. Statuses are expected to be
/// normalised already.
///
/// 1. Every owned or shared condition in **new** must exist in old with equal `status`, `reason`
///    and `message` (timestamps ignored). An owned condition that exists only in old is not a
///    difference (docs/status-manager.md §8.28): the check looks at new's conditions only.
/// 2. The rest of the status, with old's conditions replaced by new's, must be semantically
///    equal (see [`semantic_eq`]).
///
/// Like upstream since kubernetes#136238, `resourceClaimStatuses` and
/// `extendedResourceClaimStatus` are also taken from new before comparing: other components
/// write them, and comparing them made every DRA pod look changed on each reconcile.
pub fn is_pod_status_equal_for(old: &PodStatus, new: &PodStatus, ownership: &ConditionOwnership) -> bool {
    let old_conditions = old.conditions.as_deref();
    for c in new.conditions.iter().flatten() {
        if !(ownership.owns(&c.type_) || ownership.shares(&c.type_)) {
            continue;
        }
        let Some(oc) = get_pod_condition(old_conditions, &c.type_) else {
            return false;
        };
        // Go compares plain strings: an unset reason or message equals an empty one.
        if oc.status != c.status
            || oc.reason.as_deref().unwrap_or_default() != c.reason.as_deref().unwrap_or_default()
            || oc.message.as_deref().unwrap_or_default() != c.message.as_deref().unwrap_or_default()
        {
            return false;
        }
    }
    let mut old_copy = old.clone();
    old_copy.conditions.clone_from(&new.conditions);
    old_copy.resource_claim_statuses.clone_from(&new.resource_claim_statuses);
    old_copy.extended_resource_claim_status.clone_from(&new.extended_resource_claim_status);
    semantic_eq(&old_copy, new)
}

/// Upstream's `apiequality.Semantic.DeepEqual`, as far as it matters for pod statuses: beyond
/// plain equality, resource quantities compare by value (`1000m` is `1`), an absent list or
/// quantity map equals an empty one, and an absent string equals an empty one (Go has no
/// "absent" for these, and the API server omits them). Compared with the quantities in one
/// form ([`super::quantity::compared_by_value`]), then on the JSON form with those empties
/// pruned, only when the cheap derived equality says "different".
///
/// Other empty objects are kept: in JSON a map cannot be told from a struct, and Go's pointer
/// to an empty struct (`state: {running: {}}`) differs from nil.
pub fn semantic_eq(a: &PodStatus, b: &PodStatus) -> bool {
    if a == b {
        return true;
    }
    let (mut a, mut b) = (a.clone(), b.clone());
    super::quantity::compared_by_value(&mut a);
    super::quantity::compared_by_value(&mut b);
    if a == b {
        return true;
    }
    match (serde_json::to_value(&a), serde_json::to_value(&b)) {
        (Ok(mut a), Ok(mut b)) => {
            prune_empty(&mut a);
            prune_empty(&mut b);
            a == b
        }
        // Unreachable for valid statuses; "different" only costs a redundant update.
        _ => false,
    }
}

/// Removes object members that are null, `""` or `[]` (after pruning their insides).
/// Array elements are kept in place so that positions still compare.
fn prune_empty(value: &mut serde_json::Value) {
    use serde_json::Value;
    match value {
        Value::Object(map) => {
            for member in map.values_mut() {
                prune_empty(member);
            }
            map.retain(|_, v| !is_empty_json(v));
        }
        Value::Array(items) => items.iter_mut().for_each(prune_empty),
        _ => {}
    }
}

fn is_empty_json(value: &serde_json::Value) -> bool {
    use serde_json::Value;
    match value {
        Value::Null => true,
        Value::String(s) => s.is_empty(),
        Value::Array(a) => a.is_empty(),
        Value::Object(_) | Value::Bool(_) | Value::Number(_) => false,
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)] // a panic is the failure report
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::{
        ContainerState, ContainerStateRunning, ContainerStateWaiting, ContainerStatus, PodResourceClaimStatus,
    };
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
    use k8s_openapi::jiff::Timestamp;

    fn cond(t: &str, status: &str, reason: Option<&str>, message: Option<&str>) -> PodCondition {
        PodCondition {
            type_: t.into(),
            status: status.into(),
            reason: reason.map(Into::into),
            message: message.map(Into::into),
            ..Default::default()
        }
    }

    fn with_ltt(mut c: PodCondition, second: i64) -> PodCondition {
        c.last_transition_time = Some(Time(Timestamp::constant(second, 0)));
        c.last_probe_time = Some(Time(Timestamp::constant(second + 1, 0)));
        c
    }

    fn running(name: &str) -> ContainerStatus {
        ContainerStatus {
            name: name.into(),
            ready: true,
            state: Some(ContainerState {
                running: Some(ContainerStateRunning::default()),
                ..Default::default()
            }),
            ..Default::default()
        }
    }

    fn base() -> PodStatus {
        PodStatus {
            phase: Some("Running".into()),
            conditions: Some(vec![
                cond("Ready", "True", None, None),
                cond("ContainersReady", "True", None, None),
                cond("example.com/gate", "True", None, None),
            ]),
            container_statuses: Some(vec![running("c")]),
            ..Default::default()
        }
    }

    #[test]
    fn ownership_sets() {
        let cases = [
            ("PodScheduled", true, false),
            ("Ready", true, false),
            ("Initialized", true, false),
            ("ContainersReady", true, false),
            ("PodResizeInProgress", true, false),
            ("PodResizePending", true, false),
            ("PodReadyToStartContainers", true, false),
            ("DisruptionTarget", false, true),
            ("example.com/gate", false, false),
            ("ready", false, false),
        ];
        for (t, owned, shared) in cases {
            assert_eq!(is_kubelet_owned_condition(t), owned, "case: {t} owned");
            assert_eq!(is_shared_condition(t), shared, "case: {t} shared");
        }
        let gate = ConditionOwnership::new(["example.com/gate"], Vec::<String>::new());
        assert!(gate.owns("example.com/gate"), "case: custom owns its gate");
        assert!(!gate.owns("Ready"), "case: custom does not own Ready");
        assert!(!gate.shares("DisruptionTarget"), "case: custom shares nothing");
        assert_eq!(ConditionOwnership::default(), ConditionOwnership::KUBELET, "case: default is kubelet");
        assert_eq!(
            ConditionOwnership::KUBELET.owned().collect::<Vec<_>>(),
            KUBELET_OWNED_CONDITIONS,
            "case: const set matches list"
        );
    }

    /// Edits (old, new) copies of [`base`].
    type Edit = Box<dyn Fn(&mut PodStatus, &mut PodStatus)>;

    #[test]
    fn kubelet_equality() {
        let cases: Vec<(&str, Edit, bool)> = vec![
            ("identical", Box::new(|_, _| {}), true),
            (
                "foreign condition change is equal",
                Box::new(|_, new| {
                    new.conditions.as_mut().unwrap()[2] = cond("example.com/gate", "False", Some("X"), None)
                }),
                true,
            ),
            (
                "foreign condition only in new is equal",
                Box::new(|_, new| new.conditions.as_mut().unwrap().push(cond("other", "True", None, None))),
                true,
            ),
            (
                "Ready reason change is not equal",
                Box::new(|_, new| {
                    new.conditions.as_mut().unwrap()[0] = cond("Ready", "True", Some("Because"), None)
                }),
                false,
            ),
            (
                "Ready message change is not equal",
                Box::new(|_, new| new.conditions.as_mut().unwrap()[0].message = Some("m".into())),
                false,
            ),
            (
                "Ready status change is not equal",
                Box::new(|_, new| new.conditions.as_mut().unwrap()[0].status = "False".into()),
                false,
            ),
            (
                "unset reason equals empty reason",
                Box::new(|_, new| new.conditions.as_mut().unwrap()[0].reason = Some(String::new())),
                true,
            ),
            (
                "owned condition only in new is not equal",
                Box::new(|_, new| {
                    new.conditions.as_mut().unwrap().push(cond("Initialized", "True", None, None))
                }),
                false,
            ),
            (
                "shared condition only in new is not equal",
                Box::new(|_, new| {
                    new.conditions.as_mut().unwrap().push(cond("DisruptionTarget", "True", None, None))
                }),
                false,
            ),
            (
                "owned condition missing from new is still equal (8.28)",
                Box::new(|_, new| {
                    new.conditions.as_mut().unwrap().remove(1);
                }),
                true,
            ),
            (
                "condition timestamps ignored",
                Box::new(|old, new| {
                    let o = old.conditions.as_mut().unwrap();
                    o[0] = with_ltt(o[0].clone(), 10);
                    let n = new.conditions.as_mut().unwrap();
                    n[0] = with_ltt(n[0].clone(), 99);
                }),
                true,
            ),
            ("condition order ignored", Box::new(|_, new| new.conditions.as_mut().unwrap().reverse()), true),
            (
                "container readiness change is not equal",
                Box::new(|_, new| new.container_statuses.as_mut().unwrap()[0].ready = false),
                false,
            ),
            (
                "container state change is not equal",
                Box::new(|_, new| {
                    new.container_statuses.as_mut().unwrap()[0].state = Some(ContainerState {
                        waiting: Some(ContainerStateWaiting::default()),
                        ..Default::default()
                    })
                }),
                false,
            ),
            ("phase change is not equal", Box::new(|_, new| new.phase = Some("Succeeded".into())), false),
            (
                "start time change is not equal",
                Box::new(|_, new| new.start_time = Some(Time(Timestamp::constant(5, 0)))),
                false,
            ),
            (
                "absent list equals empty list",
                Box::new(|old, new| {
                    old.ephemeral_container_statuses = None;
                    new.ephemeral_container_statuses = Some(vec![]);
                }),
                true,
            ),
            (
                "absent string equals empty string",
                Box::new(|old, new| {
                    old.message = None;
                    new.message = Some(String::new());
                }),
                true,
            ),
            (
                "unset started differs from false",
                Box::new(|old, new| {
                    old.container_statuses.as_mut().unwrap()[0].started = None;
                    new.container_statuses.as_mut().unwrap()[0].started = Some(false);
                }),
                false,
            ),
            (
                "resource claim statuses ignored",
                Box::new(|old, _| {
                    old.resource_claim_statuses = Some(vec![PodResourceClaimStatus {
                        name: "gpu".into(),
                        resource_claim_name: Some("pod-gpu-x".into()),
                    }])
                }),
                true,
            ),
        ];
        for (name, edit, want) in cases {
            let (mut old, mut new) = (base(), base());
            edit(&mut old, &mut new);
            assert_eq!(is_pod_status_by_kubelet_equal(&old, &new), want, "case: {name}");
        }
    }

    #[test]
    fn equality_with_custom_ownership() {
        let gate = ConditionOwnership::new(["example.com/gate"], Vec::<String>::new());
        let old = base();
        let mut foreign_ready = base();
        foreign_ready.conditions.as_mut().unwrap()[0].status = "False".into();
        assert!(is_pod_status_equal_for(&old, &foreign_ready, &gate), "case: Ready is foreign to the gate");
        let mut gate_flipped = base();
        gate_flipped.conditions.as_mut().unwrap()[2].status = "False".into();
        assert!(!is_pod_status_equal_for(&old, &gate_flipped, &gate), "case: gate flip is a change");
    }
}
