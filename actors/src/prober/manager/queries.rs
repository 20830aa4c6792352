//! What a host or a test can ask the prober manager about its workers: their keys, a listing
//! with what each probes, and one running worker's state (what upstream's tests read from a
//! worker directly).

use actix::prelude::*;

use crate::container::ContainerId;
use crate::prober::do_probe::WorkerState;
use crate::prober::worker::ProbeKey;

use super::ProberManager;

// === messages ===

/// The keys of the workers that exist now (stopping ones included).
#[derive(Debug, Clone, Copy, Message)]
#[rtype(result = "Vec<ProbeKey>")]
pub struct GetWorkers;

/// Every worker the manager holds, started or not, with what it probes.
#[derive(Debug, Clone, Copy, Message)]
#[rtype(result = "Vec<WorkerInfo>")]
pub struct ListWorkers;

/// The state of the running worker for a key (container ID, on-hold, result run, last result):
/// what upstream's tests read from a worker. `None` when no worker runs for the key (none, not
/// started yet under `ContainerLifecycleProber`, or gone before it answered).
#[derive(Debug, Clone, Message)]
#[rtype(result = "Option<WorkerState>")]
pub struct GetWorkerState(pub ProbeKey);

/// One worker as [`ListWorkers`] reports it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WorkerInfo {
    /// Its pod UID, container name and probe kind.
    pub key: ProbeKey,
    /// The manager's number for it; a replacement always has a higher one.
    pub worker_id: u64,
    /// It probes (or will after its start-up jitter). False for a worker `AddPod` created under
    /// `ContainerLifecycleProber` that `StartContainerProbes` has not started yet.
    pub running: bool,
    /// It was told to stop and has not exited yet.
    pub stopping: bool,
    /// The container instance it was started for (`StartContainerProbes`), if any.
    pub container_id: Option<ContainerId>,
}

// === the handlers ===

impl Handler<GetWorkers> for ProberManager {
    type Result = MessageResult<GetWorkers>;

    fn handle(&mut self, _msg: GetWorkers, _ctx: &mut Self::Context) -> Self::Result {
        MessageResult(self.workers.keys().cloned().collect())
    }
}

impl Handler<ListWorkers> for ProberManager {
    type Result = MessageResult<ListWorkers>;

    fn handle(&mut self, _msg: ListWorkers, _ctx: &mut Self::Context) -> Self::Result {
        MessageResult(
            self.workers
                .iter()
                .map(|(key, e)| WorkerInfo {
                    key: key.clone(),
                    worker_id: e.id,
                    running: e.addr.is_some() && !e.stopping,
                    stopping: e.stopping,
                    container_id: e.binding.as_ref().map(|b| b.container_id.clone()),
                })
                .collect(),
        )
    }
}

impl Handler<GetWorkerState> for ProberManager {
    type Result = ResponseFuture<Option<WorkerState>>;

    fn handle(&mut self, msg: GetWorkerState, _ctx: &mut Self::Context) -> Self::Result {
        let addr = self.workers.get(&msg.0).and_then(|e| e.addr.clone());
        let state = addr.map(|addr| addr.state());
        Box::pin(async move { state?.await })
    }
}
