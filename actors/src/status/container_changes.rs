//! Readiness and startup results on their way into a pod's status: the queue the status
//! manager keeps between a result's arrival and its application, and the pure application of a
//! pod's queued results to its status.
//!
//! Upstream applies each result at once: decode nothing, flip one field, regenerate Ready and
//! ContainersReady, store. Here a status is kept as its JSON (`stored.rs`), so applying a result
//! costs a decode, an encode and a comparison of the whole status: for a pod of 2,000
//! containers whose probes all pass in a burst, that was 2,000 times the work of the whole
//! pod, and the status manager's thread (which also serves the agent's HTTP endpoints) went
//! quiet for seconds. So results are queued and applied per pod in one pass when the status
//! manager has drained its mailbox, or before any message that reads or replaces a status, so
//! no asker sees a status without the results sent before its question
//! (docs/status-manager.md §5.5).

use std::collections::HashMap;

use k8s_openapi::api::core::v1::{ContainerStatus, PodStatus};

use crate::container::ContainerId;
use crate::vocabulary::PodUid;

/// One probe result for one container.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct ContainerChange {
    pub pod_uid: PodUid,
    pub container_id: ContainerId,
    pub change: Change,
}

/// What the result sets.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Change {
    /// `ready`, from a readiness result.
    Ready(bool),
    /// `started`, from a startup result.
    Started(bool),
}

impl Change {
    /// The word upstream's log lines use for it.
    pub(super) fn what(self) -> &'static str {
        match self {
            Change::Ready(_) => "readiness",
            Change::Started(_) => "startup",
        }
    }
}

/// What became of one change applied to a status.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Applied {
    /// The field changed.
    Changed,
    /// The field already had that value.
    Unchanged,
    /// No container status has that ID.
    UnknownContainer,
}

/// The pods' changes in the order of each pod's first change, each pod's in arrival order.
pub(super) fn group_by_pod(changes: Vec<ContainerChange>) -> Vec<(PodUid, Vec<ContainerChange>)> {
    let mut groups: Vec<(PodUid, Vec<ContainerChange>)> = Vec::new();
    let mut index: HashMap<PodUid, usize> = HashMap::new();
    for change in changes {
        match index.get(&change.pod_uid) {
            Some(&i) => groups[i].1.push(change),
            None => {
                index.insert(change.pod_uid.clone(), groups.len());
                groups.push((change.pod_uid.clone(), vec![change]));
            }
        }
    }
    groups
}

/// Applies one pod's changes to its status in order, as upstream's setters would one after the
/// other (a container status found by ID among regular, then init containers). Returns what
/// became of each; the caller regenerates the conditions if a readiness changed.
pub(super) fn apply_changes(status: &mut PodStatus, changes: &[ContainerChange]) -> Vec<Applied> {
    let ids = ContainerIndex::of(status, changes.len());
    changes
        .iter()
        .map(|change| {
            let Some(container) = ids.find(status, &change.container_id) else {
                return Applied::UnknownContainer;
            };
            let changed = match change.change {
                Change::Ready(ready) => std::mem::replace(&mut container.ready, ready) != ready,
                Change::Started(started) => container.started.replace(started) != Some(started),
            };
            if changed { Applied::Changed } else { Applied::Unchanged }
        })
        .collect()
}

/// Where each container ID's status is: an index for many changes, a scan for a few.
struct ContainerIndex(Option<HashMap<String, (bool, usize)>>);

/// Changes in a batch from which an index beats scanning the statuses per change.
const INDEX_FROM: usize = 8;

impl ContainerIndex {
    fn of(status: &PodStatus, changes: usize) -> ContainerIndex {
        if changes < INDEX_FROM {
            return ContainerIndex(None);
        }
        let mut index = HashMap::new();
        // Inserted init containers first, so that a regular container's entry wins an ID they
        // share, as the scan finds regular containers first.
        for (init, list) in [(true, &status.init_container_statuses), (false, &status.container_statuses)] {
            for (i, c) in list.iter().flatten().enumerate() {
                if let Some(id) = &c.container_id {
                    index.entry(id.clone()).and_modify(|at| *at = (init, i).min(*at)).or_insert((init, i));
                }
            }
        }
        ContainerIndex(Some(index))
    }

    /// The status of the container `id` names; none for an empty ID, which names no container
    /// (upstream looks up `ContainerID.String()`, `://` for an empty ID, which no status has:
    /// a container status without an ID is never set by a result).
    fn find<'a>(&self, status: &'a mut PodStatus, id: &ContainerId) -> Option<&'a mut ContainerStatus> {
        if id.is_empty() {
            return None;
        }
        let id = id.to_string();
        match &self.0 {
            Some(index) => {
                let &(init, i) = index.get(&id)?;
                let list =
                    if init { &mut status.init_container_statuses } else { &mut status.container_statuses };
                list.as_mut()?.get_mut(i)
            }
            None => {
                let matches = |s: &&mut ContainerStatus| s.container_id.as_deref() == Some(id.as_str());
                if let Some(found) = status.container_statuses.iter_mut().flatten().find(matches) {
                    return Some(found);
                }
                status.init_container_statuses.iter_mut().flatten().find(matches)
            }
        }
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)] // a panic is the failure report
mod tests {
    use super::*;

    fn container(name: &str, id: &str) -> ContainerStatus {
        ContainerStatus { name: name.into(), container_id: Some(id.into()), ..Default::default() }
    }

    fn change(pod: &str, id: &str, change: Change) -> ContainerChange {
        ContainerChange { pod_uid: pod.into(), container_id: ContainerId::parse(id), change }
    }

    #[test]
    fn changes_are_grouped_by_pod_in_order() {
        let changes = vec![
            change("a", "cri://1", Change::Ready(true)),
            change("b", "cri://2", Change::Ready(true)),
            change("a", "cri://3", Change::Started(true)),
        ];
        let groups = group_by_pod(changes.clone());
        let uids: Vec<&str> = groups.iter().map(|(uid, _)| uid.as_ref()).collect();
        assert_eq!(uids, ["a", "b"]);
        assert_eq!(groups[0].1, [changes[0].clone(), changes[2].clone()]);
    }

    #[test]
    fn each_change_applies_in_order_with_or_without_an_index() {
        for extra in [0, INDEX_FROM] {
            let mut status = PodStatus {
                init_container_statuses: Some(vec![
                    container("init", "cri://i"),
                    container("dup-init", "cri://d"),
                ]),
                container_statuses: Some(vec![container("app", "cri://a"), container("dup", "cri://d")]),
                ..Default::default()
            };
            let mut changes = vec![
                change("p", "cri://a", Change::Ready(true)),
                change("p", "cri://a", Change::Ready(true)),
                change("p", "cri://i", Change::Started(true)),
                change("p", "cri://nope", Change::Ready(true)),
                change("p", "cri://a", Change::Ready(false)),
                change("p", "cri://d", Change::Ready(true)),
            ];
            changes.extend((0..extra).map(|_| change("p", "cri://i", Change::Started(true))));
            let applied = apply_changes(&mut status, &changes);
            assert_eq!(
                applied[..6],
                [
                    Applied::Changed,
                    Applied::Unchanged,
                    Applied::Changed,
                    Applied::UnknownContainer,
                    Applied::Changed,
                    Applied::Changed
                ],
                "with {extra} more"
            );
            let containers = status.container_statuses.as_ref().unwrap();
            assert!(!containers[0].ready, "the last readiness wins");
            assert!(containers[1].ready, "an ID shared with an init container finds the regular one");
            let inits = status.init_container_statuses.as_ref().unwrap();
            assert_eq!((inits[0].started, inits[1].ready), (Some(true), false));
        }
    }

    /// An empty ID names no container, not even one whose status has an empty ID.
    #[test]
    fn an_empty_id_finds_no_container_with_or_without_an_index() {
        for extra in [0, INDEX_FROM] {
            let mut status = PodStatus {
                container_statuses: Some(vec![container("blank", ""), container("app", "cri://a")]),
                ..Default::default()
            };
            let mut changes =
                vec![change("p", "", Change::Started(true)), change("p", "", Change::Ready(true))];
            changes.extend((0..extra).map(|_| change("p", "cri://a", Change::Ready(true))));
            let applied = apply_changes(&mut status, &changes);
            assert_eq!(
                applied[..2],
                [Applied::UnknownContainer, Applied::UnknownContainer],
                "with {extra} more"
            );
            let blank = &status.container_statuses.as_ref().unwrap()[0];
            assert_eq!((blank.started, blank.ready), (None, false));
        }
    }
}
