//! The results cache (upstream `pkg/kubelet/prober/results`): the latest result of every
//! container's liveness, readiness and startup probes, keyed by container ID.
//!
//! `SetResult` stores and emits only on change; `RemoveResult` emits nothing. Unlike upstream
//! (a 20-slot channel whose 21st send blocks the probe worker), emission is lossless and never
//! blocks: changes go out with `do_send` to the status manager (readiness and startup) and to
//! every subscribed host recipient (all kinds; the host restarts containers on liveness failure).

use std::collections::HashMap;

use actix::prelude::*;

use crate::container::ContainerId;
use crate::prober::{ProbeKind, ProbeResult};
use crate::status::manager::{SetContainerReadiness, SetContainerStartup};

// === messages ===

/// Store a container's result (upstream `Manager.Set`).
#[derive(Debug, Clone, Message)]
#[rtype(result = "()")]
pub struct SetResult {
    pub kind: ProbeKind,
    pub container_id: ContainerId,
    pub result: ProbeResult,
    pub pod_uid: String,
}

/// Store a container's result only if it has none: a resumed worker's initial value, which
/// must not overwrite what its predecessor wrote.
#[derive(Debug, Clone, Message)]
#[rtype(result = "()")]
pub struct SeedResult {
    pub kind: ProbeKind,
    pub container_id: ContainerId,
    pub result: ProbeResult,
    pub pod_uid: String,
}

/// Forget a container's result; emits nothing (upstream `Manager.Remove`).
#[derive(Debug, Clone, Message)]
#[rtype(result = "()")]
pub struct RemoveResult {
    pub kind: ProbeKind,
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
    pub kind: ProbeKind,
    pub container_id: ContainerId,
    pub result: ProbeResult,
    pub pod_uid: String,
}

/// Subscribe a recipient to every change of every kind.
#[derive(Message)]
#[rtype(result = "()")]
pub struct SubscribeResults(pub Recipient<ProbeResultChanged>);

// === the actor ===

/// One map per probe kind, and who to tell about changes.
#[derive(Default)]
pub struct ResultsCache {
    /// Latest result per kind and container ID.
    results: HashMap<ProbeKind, HashMap<ContainerId, ProbeResult>>,
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

    fn get(&self, kind: ProbeKind, id: &ContainerId) -> Option<ProbeResult> {
        self.results.get(&kind).and_then(|m| m.get(id)).copied()
    }
}

impl Actor for ResultsCache {
    type Context = Context<Self>;
}

impl Handler<SetResult> for ResultsCache {
    type Result = ();

    fn handle(&mut self, msg: SetResult, _ctx: &mut Self::Context) {
        let map = self.results.entry(msg.kind).or_default();
        if map.get(&msg.container_id) == Some(&msg.result) {
            return;
        }
        map.insert(msg.container_id.clone(), msg.result);
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
        if self.get(msg.kind, &msg.container_id).is_none() {
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
        if let Some(map) = self.results.get_mut(&msg.kind) {
            map.remove(&msg.container_id);
        }
    }
}

impl Handler<GetResults> for ResultsCache {
    type Result = MessageResult<GetResults>;

    fn handle(&mut self, msg: GetResults, _ctx: &mut Self::Context) -> Self::Result {
        MessageResult(msg.0.iter().map(|(kind, id)| self.get(*kind, id)).collect())
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
}
