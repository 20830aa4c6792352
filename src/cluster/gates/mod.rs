//! Readiness-gate mode (`probelet run --readiness-gates`): for clusters whose kubelet runs the
//! pods' own probes. A pod opts in by listing the readiness gate [`GATE_CONDITION`]
//! (`probelet.dev/ready`) and the annotation [`READINESS_PROBES_ANNOTATION`] with extra probes;
//! the agent probes them from the node and writes that one condition — never
//! `containerStatuses`, never another condition — so the kubelet's own Ready condition takes
//! it in through the pod's readiness gate. Upstream has no counterpart: the gate mechanism is
//! the kubelet's (`generate_pod_ready_condition`), the writer is ours. docs/readiness-gates.md
//! is the user's guide and says why the condition is written with server-side apply.
//!
//! How the probes run: the engine's own probe workers run them, unchanged. For each gated pod
//! the host hands the engine a derived pod ([`derived`]) with the real pod's identity and one
//! container per gate probe, that probe as its readiness probe; those containers "run" exactly
//! while every container of the real pod runs, from when the last of them started. Chosen over
//! a probe loop of our own because everything a readiness probe means — period, jitter,
//! thresholds, initial delay, timeouts, the HTTP/TCP/gRPC/exec executors, the probe host
//! policy, `Unhealthy` events and the prober metrics — then holds for gate probes as it does
//! for the kubelet's, with one implementation. The derived pods never reach the syncer: this
//! mode has none. Each gate probe's latest readiness result, read from the results cache, makes
//! the verdict ([`condition::Verdict`]) the condition is written from.
//!
//! The parts: [`annotation`] (reading and validating the annotation), [`derived`] (the derived
//! pod), [`condition`] (the condition and its write, pure), [`host`] (the actor).

pub mod annotation;
pub mod condition;
pub mod derived;
pub mod host;

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::Arc;

use actix::prelude::*;
use probelet_actors::sync::rate::RateLimiter;

pub use annotation::{GateProbe, READINESS_PROBES_ANNOTATION, parse_gate_probes};
pub use condition::{FIELD_MANAGER, GATE_CONDITION};
pub use host::GateHost;

use super::{Clients, CoreEventRecorder, EVENT_BURST, EVENT_QPS, ExecRunner, clients, pod_watch};
use crate::agent::{AgentError, ClusterSignals, Common, max_probes_in_flight};
use crate::cli::RunArgs;
use crate::host::console::say;

/// Readiness-gate mode until SIGTERM.
pub async fn run_readiness_gates(args: &RunArgs, kubeconfig: Option<PathBuf>) -> Result<(), AgentError> {
    // First: a request to stop from here on ends the agent, whatever start-up is waiting for.
    let signals = ClusterSignals::listen()?;
    let Clients { client, writes } = clients(kubeconfig).await?;
    let mut common = Common::new(&args.node_name)?;
    common.probe_host_policy = args.probe_host_policy.into();
    common.max_probes_in_flight = max_probes_in_flight(args);
    // Exec gate probes only when the operator says `pods/exec` is granted; without it, exec
    // entries are rejected when the annotation is read, so this runner is never called.
    let exec = ExecRunner::new(client.clone(), RateLimiter::new(args.exec_qps, args.exec_burst));
    let recorder = Arc::new(CoreEventRecorder::new(
        client.clone(),
        RateLimiter::new(EVENT_QPS, EVENT_BURST),
        args.node_name.clone(),
        common.events.clone(),
    ));
    let pipeline = common.pipeline_with(Arc::new(exec.clone()), recorder.clone());
    let (base, stop_server, server) = common.serve(args, pipeline.clone(), Some(writes.clone())).await?;
    say(format_args!(
        "probelet {}: readiness-gate mode ({GATE_CONDITION}), node {}; {base}/pods, /metrics{}",
        env!("CARGO_PKG_VERSION"),
        args.node_name,
        base.health_note()
    ));
    let host = GateHost {
        writes: writes.clone(),
        pipeline: pipeline.clone(),
        pods: common.pods.clone(),
        exec: args.readiness_gate_exec.then_some(exec),
        recorder,
        limiter: RateLimiter::new(args.qps, args.burst),
        clock: common.clock.clone(),
        ready: common.ready.clone(),
        watch: Default::default(),
        gated: HashMap::new(),
    };
    // Without kube's retry, which would sleep out a `Retry-After` inside the list request: the
    // watch waits what the server asks (at most a minute) and says so.
    let watch = pod_watch(
        writes.clone(),
        &args.node_name,
        args.pod_selector.as_ref().and_then(crate::cluster::label_selector::LabelSelector::query),
    );
    let host = GateHost::create(move |ctx| {
        ctx.add_stream(watch);
        host
    });
    pipeline.subscribe_results(host.recipient());

    let shutdown = async {
        // The condition stays as last written: the kubelet keeps the pod's readiness from it
        // until an agent runs again (or the pod goes).
        for pod in common.pods.pods() {
            pipeline.remove_pod(pod);
        }
        let _ = stop_server.send(());
        let _ = server.await;
    };
    signals.stop_on_signal("probelet: shutting down", shutdown, "probelet: shutdown forced").await;
    Ok(())
}
