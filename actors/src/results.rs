//! The results cache (upstream `pkg/kubelet/prober/results`): the latest result of every
//! container's liveness, readiness and startup probes, keyed by container ID.
//!
//! `SetResult` stores and emits only on change; `RemoveResult` emits nothing. Unlike upstream
//! (a 20-slot channel whose 21st send blocks the probe worker), emission is lossless and never
//! blocks: changes go out with `do_send` to the status manager (readiness and startup) and to
//! every subscribed host recipient (all kinds; the host restarts containers on liveness failure).
//!
//! The actor is the only writer. What it stores is readable at once through [`ResultsView`]
//! (upstream's `Manager.Get`, a map under a read lock): the prober manager's `UpdatePodStatus`
//! reads a pod's results there without a message round trip, so a busy or stopped cache can
//! never turn into "no results" (which would mark every probed container not ready), and a probe
//! worker asks it whether its result is news before sending anything. The lock guards plain map
//! operations only, never an await.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, PoisonError, RwLock};

use actix::prelude::*;

use crate::capacity::ShrinkAfterRemoval;
use crate::container::ContainerId;
use crate::status::manager::{SetContainerReadiness, SetContainerStartup};
use crate::vocabulary::PodUid;
use crate::vocabulary::{ProbeKind, ProbeResult};

// === messages ===

/// Store a container's result (upstream `Manager.Set`).
#[derive(Debug, Clone, Message)]
#[rtype(result = "()")]
pub struct SetResult {
    /// Which of the container's probes produced the result.
    pub kind: ProbeKind,
    /// The container the result is for; results are keyed by container ID, so a restarted container
    /// starts afresh.
    pub container_id: ContainerId,
    /// The new result.
    pub result: ProbeResult,
    /// The UID of the container's pod, passed on with the change to the status manager and
    /// subscribers.
    pub pod_uid: PodUid,
}

/// Store a container's result only if it has none: a resumed worker's initial value, which
/// must not overwrite what its predecessor wrote.
#[derive(Debug, Clone, Message)]
#[rtype(result = "()")]
pub struct SeedResult {
    /// Which of the container's probes the result is for.
    pub kind: ProbeKind,
    /// The container the result is for.
    pub container_id: ContainerId,
    /// The initial value to store when the container has no entry.
    pub result: ProbeResult,
    /// The UID of the container's pod, passed on with the change.
    pub pod_uid: PodUid,
}

/// Forget a container's result; emits nothing (upstream `Manager.Remove`).
#[derive(Debug, Clone, Message)]
#[rtype(result = "()")]
pub struct RemoveResult {
    /// Which of the container's probes to forget.
    pub kind: ProbeKind,
    /// The container whose entry goes (its container is gone or its worker exited).
    pub container_id: ContainerId,
}

/// Read several results at once: `None` where the cache has no entry.
#[derive(Debug, Clone, Message)]
#[rtype(result = "Vec<Option<ProbeResult>>")]
pub struct GetResults(pub Vec<(ProbeKind, ContainerId)>);

/// Emitted when a stored result changed (upstream `results.Update`).
#[derive(Debug, Clone, PartialEq, Eq, Message)]
#[rtype(result = "()")]
pub struct ProbeResultChanged {
    /// Which probe's result changed.
    pub kind: ProbeKind,
    /// The container whose result changed.
    pub container_id: ContainerId,
    /// The result now stored.
    pub result: ProbeResult,
    /// The UID of the container's pod.
    pub pod_uid: PodUid,
}

/// The results cache as probe workers and the prober manager use it: the messages they send,
/// not the actor, so that a host or a test can stand in for it.
#[derive(Clone)]
pub struct ResultsSink {
    /// Stores a worker's result.
    pub set: Recipient<SetResult>,
    /// Seeds a new container's initial value.
    pub seed: Recipient<SeedResult>,
    /// Drops a container's entry.
    pub remove: Recipient<RemoveResult>,
}

impl From<Addr<ResultsCache>> for ResultsSink {
    fn from(cache: Addr<ResultsCache>) -> Self {
        ResultsSink {
            set: cache.clone().recipient(),
            seed: cache.clone().recipient(),
            remove: cache.recipient(),
        }
    }
}

/// Subscribe a recipient to every change of every kind.
#[derive(Message)]
#[rtype(result = "()")]
pub struct SubscribeResults(pub Recipient<ProbeResultChanged>);

// === the shared view ===

type Table = HashMap<ProbeKind, HashMap<ContainerId, ProbeResult>>;

/// The cache's stored results, readable from any thread. Cheap to clone; every clone reads the
/// same table. Only the [`ResultsCache`] it came from writes it.
#[derive(Debug, Clone, Default)]
pub struct ResultsView {
    table: Arc<RwLock<Table>>,
    /// How many times the table has changed; written under its write lock. While it stays
    /// the same, every stored result does: a worker checks this instead of taking the lock.
    changes: Arc<AtomicU64>,
}

impl ResultsView {
    /// The stored result of a container's probe of `kind` (upstream `Manager.Get`).
    pub fn get(&self, kind: ProbeKind, container_id: &ContainerId) -> Option<ProbeResult> {
        // A writer that panicked left a map, not a half-written value: reading it is still right.
        let table = self.table.read().unwrap_or_else(PoisonError::into_inner);
        table.get(&kind).and_then(|m| m.get(container_id)).copied()
    }

    /// [`ResultsView::get`], with the [`ResultsView::changes`] count the table had when read.
    pub fn get_counted(&self, kind: ProbeKind, container_id: &ContainerId) -> (Option<ProbeResult>, u64) {
        let table = self.table.read().unwrap_or_else(PoisonError::into_inner);
        let result = table.get(&kind).and_then(|m| m.get(container_id)).copied();
        (result, self.changes.load(Ordering::Acquire))
    }

    /// How many changes the table has seen so far: a result read at one count is still stored
    /// while the count is the same.
    pub fn changes(&self) -> u64 {
        self.changes.load(Ordering::Acquire)
    }

    /// Several results under one read of the table.
    pub fn get_many(&self, keys: &[(ProbeKind, ContainerId)]) -> Vec<Option<ProbeResult>> {
        let table = self.table.read().unwrap_or_else(PoisonError::into_inner);
        keys.iter().map(|(kind, id)| table.get(kind).and_then(|m| m.get(id)).copied()).collect()
    }

    /// How many results are stored (tests check for leaks).
    pub fn len(&self) -> usize {
        self.table.read().unwrap_or_else(PoisonError::into_inner).values().map(HashMap::len).sum()
    }

    /// Whether no result is stored.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Stores `result`; false when it was stored already (no change).
    fn set(&self, kind: ProbeKind, container_id: &ContainerId, result: ProbeResult) -> bool {
        let mut table = self.table.write().unwrap_or_else(PoisonError::into_inner);
        let map = table.entry(kind).or_default();
        if map.get(container_id) == Some(&result) {
            return false;
        }
        map.insert(container_id.clone(), result);
        self.changes.fetch_add(1, Ordering::Release);
        true
    }

    fn remove(&self, kind: ProbeKind, container_id: &ContainerId) {
        let mut table = self.table.write().unwrap_or_else(PoisonError::into_inner);
        if let Some(map) = table.get_mut(&kind)
            && map.remove(container_id).is_some()
        {
            map.shrink_after_removal();
            self.changes.fetch_add(1, Ordering::Release);
        }
    }
}

// === the actor ===

/// The stored results, and who to tell about changes.
#[derive(Default)]
pub struct ResultsCache {
    /// Latest result per kind and container ID, shared with readers.
    results: ResultsView,
    /// Where readiness changes go.
    readiness: Option<Recipient<SetContainerReadiness>>,
    /// Where startup changes go.
    startup: Option<Recipient<SetContainerStartup>>,
    /// Host recipients of every change.
    subscribers: Vec<Recipient<ProbeResultChanged>>,
}

impl ResultsCache {
    /// A cache that forwards readiness and startup changes to the status manager.
    pub fn new(
        readiness: Option<Recipient<SetContainerReadiness>>,
        startup: Option<Recipient<SetContainerStartup>>,
    ) -> Self {
        ResultsCache { readiness, startup, ..Default::default() }
    }

    /// A reader of what this cache stores; take it before starting the actor.
    pub fn view(&self) -> ResultsView {
        self.results.clone()
    }
}

impl Actor for ResultsCache {
    type Context = Context<Self>;
}

impl Handler<SetResult> for ResultsCache {
    type Result = ();

    fn handle(&mut self, msg: SetResult, _ctx: &mut Self::Context) {
        if !self.results.set(msg.kind, &msg.container_id, msg.result) {
            return;
        }
        tracing::debug!(
            probe_kind = %msg.kind, container_id = %msg.container_id, pod_uid = %msg.pod_uid,
            result = %msg.result, "Probe result changed"
        );
        match msg.kind {
            ProbeKind::Readiness => {
                if let Some(r) = &self.readiness {
                    r.do_send(SetContainerReadiness {
                        pod_uid: msg.pod_uid.clone(),
                        container_id: msg.container_id.clone(),
                        ready: msg.result == ProbeResult::Success,
                    });
                }
            }
            ProbeKind::Startup => {
                if let Some(r) = &self.startup {
                    r.do_send(SetContainerStartup {
                        pod_uid: msg.pod_uid.clone(),
                        container_id: msg.container_id.clone(),
                        started: msg.result == ProbeResult::Success,
                    });
                }
            }
            ProbeKind::Liveness => {}
        }
        let change = ProbeResultChanged {
            kind: msg.kind,
            container_id: msg.container_id,
            result: msg.result,
            pod_uid: msg.pod_uid,
        };
        self.subscribers.retain(|s| s.connected());
        for s in &self.subscribers {
            s.do_send(change.clone());
        }
    }
}

impl Handler<SeedResult> for ResultsCache {
    type Result = ();

    fn handle(&mut self, msg: SeedResult, ctx: &mut Self::Context) {
        if self.results.get(msg.kind, &msg.container_id).is_none() {
            self.handle(
                SetResult {
                    kind: msg.kind,
                    container_id: msg.container_id,
                    result: msg.result,
                    pod_uid: msg.pod_uid,
                },
                ctx,
            );
        }
    }
}

impl Handler<RemoveResult> for ResultsCache {
    type Result = ();

    fn handle(&mut self, msg: RemoveResult, _ctx: &mut Self::Context) {
        self.results.remove(msg.kind, &msg.container_id);
    }
}

impl Handler<GetResults> for ResultsCache {
    type Result = MessageResult<GetResults>;

    fn handle(&mut self, msg: GetResults, _ctx: &mut Self::Context) -> Self::Result {
        MessageResult(self.results.get_many(&msg.0))
    }
}

impl Handler<SubscribeResults> for ResultsCache {
    type Result = ();

    fn handle(&mut self, msg: SubscribeResults, _ctx: &mut Self::Context) {
        self.subscribers.push(msg.0);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn seed(id: &str, result: ProbeResult) -> SeedResult {
        SeedResult {
            kind: ProbeKind::Startup,
            container_id: ContainerId::parse(id),
            result,
            pod_uid: "u".into(),
        }
    }

    #[test]
    fn the_table_gives_back_the_room_of_a_burst_of_containers() {
        let view = ResultsView::default();
        let ids: Vec<ContainerId> = (0..2_000).map(|i| ContainerId::parse(&format!("x://{i}"))).collect();
        for id in &ids {
            view.set(ProbeKind::Readiness, id, ProbeResult::Success);
        }
        for id in &ids[1..] {
            view.remove(ProbeKind::Readiness, id);
        }
        let table = view.table.read().unwrap_or_else(PoisonError::into_inner);
        let capacity = table.get(&ProbeKind::Readiness).map_or(0, HashMap::capacity);
        assert!(capacity <= 2 * crate::capacity::KEEP, "{capacity} slots kept for one result");
        assert_eq!(view.get(ProbeKind::Readiness, &ids[0]), Some(ProbeResult::Success));
    }

    #[actix::test]
    async fn seed_sets_only_what_is_missing() {
        let cache = ResultsCache::default().start();
        let started = SetResult {
            kind: ProbeKind::Startup,
            container_id: ContainerId::parse("x://1"),
            result: ProbeResult::Success,
            pod_uid: "u".into(),
        };
        cache.send(started).await.unwrap();
        cache.send(seed("x://1", ProbeResult::Unknown)).await.unwrap();
        cache.send(seed("x://2", ProbeResult::Unknown)).await.unwrap();
        let got = cache
            .send(GetResults(vec![
                (ProbeKind::Startup, ContainerId::parse("x://1")),
                (ProbeKind::Startup, ContainerId::parse("x://2")),
            ]))
            .await
            .unwrap();
        assert_eq!(got, vec![Some(ProbeResult::Success), Some(ProbeResult::Unknown)]);
    }

    #[test]
    fn the_change_count_moves_exactly_when_a_stored_result_does() {
        let view = ResultsView::default();
        let (kind, a, b) = (ProbeKind::Readiness, ContainerId::parse("x://a"), ContainerId::parse("x://b"));
        assert_eq!(view.get_counted(kind, &a), (None, 0));
        assert!(view.set(kind, &a, ProbeResult::Failure));
        assert_eq!(view.get_counted(kind, &a), (Some(ProbeResult::Failure), 1));
        assert!(!view.set(kind, &a, ProbeResult::Failure), "the same result again");
        view.remove(kind, &b);
        assert_eq!(view.changes(), 1, "neither a repeat nor removing a missing entry is a change");
        assert!(view.set(kind, &a, ProbeResult::Success));
        view.remove(kind, &a);
        assert_eq!(view.get_counted(kind, &a), (None, 3));
        assert_eq!(view.clone().changes(), 3, "clones share the count");
    }
}
