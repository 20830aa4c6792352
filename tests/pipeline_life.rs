//! The whole life of a pod through the pipeline, under paused time with a scripted prober.

use probelet_test_support as support;

use std::time::Duration;

use actix::prelude::*;
use probelet::prober::{ProbeKind, ProbeResult};
use probelet::results::ProbeResultChanged;
use probelet::status::{CONTAINERS_READY, POD_READY};
use support::kubelet::{Harness, advance, epoch, settle};
use support::pods::{probe, running, test_pod, waiting};
use support::scripted::Step;

/// Collects every result change the results cache emits (the host's view).
#[derive(Default)]
struct Changes(Vec<ProbeResultChanged>);

impl Actor for Changes {
    type Context = Context<Self>;
}

impl Handler<ProbeResultChanged> for Changes {
    type Result = ();
    fn handle(&mut self, msg: ProbeResultChanged, _: &mut Context<Self>) {
        self.0.push(msg);
    }
}

#[derive(Message)]
#[rtype(result = "Vec<ProbeResultChanged>")]
struct Drain;

impl Handler<Drain> for Changes {
    type Result = MessageResult<Drain>;
    fn handle(&mut self, _: Drain, _: &mut Context<Self>) -> Self::Result {
        MessageResult(std::mem::take(&mut self.0))
    }
}

#[actix::test]
async fn whole_life_of_a_pod() {
    tokio::time::pause();
    let h = Harness::start();
    let changes = Changes::default().start();
    h.pipeline.subscribe_results(changes.clone().recipient());
    let pod = test_pod("web")
        .container("app")
        .with_probe("app", ProbeKind::Startup, probe(10, 1, 3))
        .with_probe("app", ProbeKind::Readiness, probe(10, 1, 2))
        .with_probe("app", ProbeKind::Liveness, probe(10, 1, 2))
        .build();
    // Age the manager past one period so workers start without jitter.
    advance(Duration::from_secs(11)).await;
    let started_at = epoch() + Duration::from_secs(11);

    // Added: first sync before the runtime created the container, as in SyncPod.
    h.sync(&pod, vec![waiting("app")]).await;
    settle().await;
    assert!(h.prober.calls().is_empty(), "nothing to probe while waiting");
    // The container runs but has not started; only the startup probe runs.
    let status = h.sync(&pod, vec![running("app", "cri://1", started_at)]).await;
    assert_eq!(status.container_statuses.as_ref().unwrap()[0].started, Some(false));
    settle().await;
    assert_eq!(h.worker_count().await, 3);
    // The worker saw the new container at its last probe; the next tick probes startup.
    advance(Duration::from_secs(10)).await;
    assert_eq!(h.prober.calls_of("app", ProbeKind::Startup).len(), 1, "startup probed on the next tick");
    assert!(h.prober.calls_of("app", ProbeKind::Readiness).is_empty(), "readiness gated on startup");
    assert!(h.prober.calls_of("app", ProbeKind::Liveness).is_empty(), "liveness gated on startup");

    // Startup succeeded: the status manager marks the container started.
    let container = h.container(&pod, "app").await;
    assert_eq!(container.started, Some(true));
    assert!(!container.ready);

    // The next sync sees started; readiness gets probed at once by the manual trigger.
    let before = h.prober.calls_of("app", ProbeKind::Readiness).len();
    h.sync(&pod, vec![running("app", "cri://1", started_at)]).await;
    settle().await;
    assert_eq!(h.prober.calls_of("app", ProbeKind::Readiness).len(), before + 1, "readiness probed at once");
    // The readiness change set Ready on the cache; the sync it triggers keeps it.
    h.resync(&pod).await;
    assert_eq!(h.condition(&pod, POD_READY).await.status, "True");
    assert_eq!(h.condition(&pod, CONTAINERS_READY).await.status, "True");

    // Readiness fails once (below the threshold of 2): still Ready.
    h.prober.always("app", ProbeKind::Readiness, Step::Return(ProbeResult::Failure));
    advance(Duration::from_secs(10)).await;
    assert_eq!(h.condition(&pod, POD_READY).await.status, "True", "one failure is below the threshold");
    // Second failure reaches it: NotReady.
    advance(Duration::from_secs(10)).await;
    let ready = h.condition(&pod, POD_READY).await;
    assert_eq!(ready.status, "False");
    assert_eq!(ready.reason.as_deref(), Some("ContainersNotReady"));
    assert_eq!(ready.message.as_deref(), Some("containers with unready status: [app]"));

    // Liveness fails twice: the host is told once, and the worker holds.
    changes.send(Drain).await.unwrap();
    h.prober.always("app", ProbeKind::Liveness, Step::Return(ProbeResult::Failure));
    advance(Duration::from_secs(10)).await;
    advance(Duration::from_secs(10)).await;
    let liveness: Vec<_> =
        changes.send(Drain).await.unwrap().into_iter().filter(|c| c.kind == ProbeKind::Liveness).collect();
    assert_eq!(liveness.len(), 1, "one liveness change: {liveness:?}");
    assert_eq!(liveness[0].result, ProbeResult::Failure);
    let held = h.prober.calls_of("app", ProbeKind::Liveness).len();
    advance(Duration::from_secs(30)).await;
    assert_eq!(
        h.prober.calls_of("app", ProbeKind::Liveness).len(),
        held,
        "liveness on hold until a new container"
    );

    // The host restarts the container: a new ID; probing resumes from startup.
    h.prober.always("app", ProbeKind::Liveness, Step::Return(ProbeResult::Success));
    h.prober.always("app", ProbeKind::Readiness, Step::Return(ProbeResult::Success));
    let restarted_at = epoch() + Duration::from_secs(100);
    h.sync(&pod, vec![running("app", "cri://2", restarted_at)]).await;
    let status = h.status(&pod).await;
    assert_eq!(
        status.container_statuses.as_ref().unwrap()[0].started,
        Some(false),
        "new container not started yet"
    );
    advance(Duration::from_secs(10)).await;
    let startup_calls = h.prober.calls_of("app", ProbeKind::Startup);
    assert_eq!(startup_calls.last().unwrap().container_id.to_string(), "cri://2");
    h.sync(&pod, vec![running("app", "cri://2", restarted_at)]).await;
    settle().await;
    h.resync(&pod).await;
    assert_eq!(h.condition(&pod, POD_READY).await.status, "True", "ready again after the restart");
    advance(Duration::from_secs(10)).await;
    let liveness_calls = h.prober.calls_of("app", ProbeKind::Liveness);
    assert_eq!(
        liveness_calls.last().unwrap().container_id.to_string(),
        "cri://2",
        "liveness probes the new container"
    );
}

/// With no worker threads of its own the workers run on the host's runtime, which goes on after
/// the engine is gone: dropping the last pipeline stops them, as it does with threads (where
/// their runtime ends), instead of leaving them probing for good, unreachable.
#[actix::test]
async fn dropping_the_last_pipeline_stops_its_probes_on_the_callers_runtime() {
    tokio::time::pause();
    let h = Harness::start();
    let pod =
        test_pod("web").container("app").with_probe("app", ProbeKind::Readiness, probe(1, 1, 1)).build();
    advance(Duration::from_secs(2)).await;
    h.sync(&pod, vec![running("app", "cri://1", epoch())]).await;
    for _ in 0..5 {
        advance(Duration::from_secs(1)).await;
    }
    let prober = h.prober.clone();
    assert!(prober.calls().len() >= 3, "probing: {}", prober.calls().len());

    drop(h);
    settle().await;
    let at_drop = prober.calls().len();
    for _ in 0..10 {
        advance(Duration::from_secs(1)).await;
    }
    assert_eq!(prober.calls().len(), at_drop, "no probe after the last pipeline was dropped");
}
