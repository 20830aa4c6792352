//! Starting a container and recording its exit: upstream `doBackOff` and `startContainer`
//! (`kuberuntime_container.go`), with the descriptor budget in front and containerd's report
//! of a start that failed. Under the shim a start is: spawn the shim, record its group in the
//! state directory, write the go byte, read whether the program started (the start barrier of
//! [`crate::shim`]): a container never runs unrecorded. The container is `Starting` until the
//! report has been read, off the actor's thread. Without the shim (a runtime an embedding host
//! built without it) the program runs from its spawn: a record refused then kills its group
//! at once, and the start fails as the shim's does (`CreateContainerConfigError`).

use std::io::{self, Write as _};
use std::os::unix::net::UnixStream;
use std::os::unix::process::ExitStatusExt;
use std::process::ExitStatus;
use std::sync::Arc;
use std::time::Duration;

use actix::prelude::*;
use k8s_openapi::api::core::v1::{Container, ContainerStateTerminated, Pod};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use k8s_openapi::jiff::Timestamp;
use tokio::process::Child;
use tokio::sync::watch;
use tokio::time::Instant;

use crate::container::ContainerId;
use crate::contracts::EventType;
use crate::local_runner::LocalContainer;
use crate::prober::pod_name;
use crate::process::Signal;
use crate::shim::{GO, Report, ask_to_kill_tree};
use probelet_actors::format::pod_ref;
use probelet_actors::gofmt::go_errno_text;

use super::super::groups::GroupOwner;
use super::super::launch::{Launch, Spawned, exit_code, new_container_id, shim_start_error, start_error};
use super::super::output::forward_output;
use super::super::state::{Current, RestartRules, Role, Running, Slot};
use super::super::stop::ProcessGuard;
use super::super::{
    EVENT_BACK_OFF, EVENT_CREATED, EVENT_FAILED, EVENT_OUT_OF_FILE_DESCRIPTORS, EVENT_STARTED,
    REASON_COMPLETED, REASON_ERROR, REASON_OOM_KILLED, REASON_START_ERROR,
};
use super::{Pass, ProcessRuntime};
use probelet_actors::vocabulary::PodUid;

/// The exit code containerd reports for a container it could not start (Docker's, kept).
pub(super) const START_ERROR_EXIT_CODE: i32 = 128;
/// How long the runtime waits for the shim's report that the program started (on a blocking
/// thread; a shim reports within milliseconds).
const REPORT_WAIT: Duration = Duration::from_secs(5);

impl ProcessRuntime {
    /// Starts the container unless a retry is pending or it is backing off (upstream
    /// `doBackOff`: in back-off since the last exit → wait, with a `BackOff` event at each
    /// sync of the pod; otherwise the back-off grows and the container starts now). What is
    /// left of the wait goes to the pod's requeue ([`Self::reconcile`]), which is at most the
    /// resync interval away: each sync until the back-off's end records `BackOff` once more,
    /// the status unchanged.
    pub(super) fn try_start(
        &mut self,
        pod_uid: &str,
        container: &Container,
        role: Role,
        pass: Pass,
        ctx: &mut Context<Self>,
    ) {
        let (initial, max) = (self.initial_backoff, self.max_backoff);
        let Some(state) = self.pods.get_mut(pod_uid) else { return };
        let pod = state.pod.clone();
        let slot = state.containers.entry(container.name.clone()).or_insert_with(|| Slot::new(initial, max));
        if slot.timer.is_some() || matches!(slot.current, Current::Running(_) | Current::Starting(_)) {
            return;
        }
        let now = Instant::now();
        if let Some(remaining) = slot.last_event.and_then(|event| slot.backoff.remaining_since(event, now)) {
            state.back_off_left = Some(state.back_off_left.map_or(remaining, |left| left.min(remaining)));
            if pass == Pass::Quiet {
                return;
            }
            let Some(slot) = state.containers.get_mut(&container.name) else { return };
            slot.backing_off = true;
            // Upstream's reason cache keeps only the last sync's outcome for a container: a
            // sync that backs off replaces a refused record's error with the back-off
            // (docs/reliability.md, "The agent's own disk").
            slot.create_error = None;
            let message =
                format!("Back-off restarting failed container {} in pod {}", container.name, pod_name(&pod));
            tracing::debug!(pod = %pod_ref(&pod), container = %container.name, ?remaining, "container is backing off");
            // Every sync of the pod that finds the container still backing off records
            // `BackOff` again, whatever synced it (docs/reliability.md, "A `BackOff` at each
            // resync of a long wait").
            self.record(&pod, container, EventType::Warning, EVENT_BACK_OFF, &message);
            self.notify(pod_uid, ctx);
            return;
        }
        // The back-off is over: the container is no longer said backing off, whether it starts
        // now or the turn or the descriptor budget holds it back (its status is then the last
        // instance's, as before every sync recorded `BackOff`).
        if let Some(slot) = state.containers.get_mut(&container.name) {
            slot.backing_off = false;
        }
        // A turn's share of starts: a spawn blocks the thread until the child has exec'd, which
        // costs more the more descriptors the agent holds (the child closes them all), so a
        // pod of thousands of containers starts them over many turns, each short enough for
        // the listener and the probes on this thread to run in between.
        if !self.turn_has_room(pod_uid) {
            return;
        }
        let Some(state) = self.pods.get_mut(pod_uid) else { return };
        let Some(slot) = state.containers.get_mut(&container.name) else { return };
        // The descriptor budget: a start it refuses is retried later, without growing the
        // back-off (the container did nothing wrong), by one timer for the whole pod.
        if let Err(refusal) = self.budget.try_start(pod_uid) {
            let first = !std::mem::replace(&mut slot.refused, true);
            let retry_pending = state.held_back.is_some();
            tracing::debug!(pod = %pod_ref(&pod), container = %container.name, reason = %refusal.message, "container start held back");
            if first {
                let message = format!("Container {} not started: {}", container.name, refusal.message);
                self.record(&pod, container, EventType::Warning, EVENT_OUT_OF_FILE_DESCRIPTORS, &message);
            }
            if !retry_pending {
                let uid = PodUid::from(pod_uid);
                let handle = ctx.run_later(self.initial_backoff, move |act, ctx| {
                    if let Some(state) = act.pods.get_mut(&uid) {
                        state.held_back = None;
                    }
                    act.reconcile(&uid, Pass::Quiet, ctx);
                });
                if let Some(state) = self.pods.get_mut(pod_uid) {
                    state.held_back = Some(handle);
                }
            }
            return;
        }
        slot.refused = false;
        if let Some(event) = slot.last_event {
            slot.backoff.next(event, Instant::now());
        }
        self.start_container(pod_uid, &pod, container, role, ctx);
    }

    fn schedule_retry(&mut self, pod_uid: &str, name: &str, delay: Duration, ctx: &mut Context<Self>) {
        let (uid, container) = (pod_uid.to_owned(), name.to_owned());
        let handle = ctx.run_later(delay, move |act, ctx| {
            if let Some(slot) = act.slot_mut(&uid, &container) {
                slot.timer = None;
            }
            // The pod worker's sync after a failed one: a sync of the pod.
            act.reconcile(&uid, Pass::Sync, ctx);
        });
        if let Some(slot) = self.slot_mut(pod_uid, name) {
            slot.timer = Some(handle);
        }
    }

    /// Upstream `startContainer`: `Created`, then `Started` or `Failed`.
    fn start_container(
        &mut self,
        pod_uid: &str,
        pod: &Arc<Pod>,
        container: &Container,
        role: Role,
        ctx: &mut Context<Self>,
    ) {
        self.count_start(ctx);
        let restart_owed = self
            .slot_mut(pod_uid, &container.name)
            .is_some_and(|slot| std::mem::replace(&mut slot.restart_owed, false));
        let launch = Launch::of(container);
        for name in &launch.skipped {
            tracing::warn!(pod = %pod_ref(pod), container = %container.name, env = %name, "env valueFrom is not supported by the local runtime, variable not set");
        }
        if container.env_from.as_ref().is_some_and(|e| !e.is_empty()) {
            tracing::warn!(pod = %pod_ref(pod), container = %container.name, "envFrom is not supported by the local runtime, ignored");
        }
        if let Some(lifecycle) = &container.lifecycle {
            for (hook, set) in
                [("postStart", lifecycle.post_start.is_some()), ("preStop", lifecycle.pre_stop.is_some())]
            {
                if set {
                    tracing::warn!(pod = %pod_ref(pod), container = %container.name, hook, "lifecycle hooks are not run by the local runtime, ignored");
                }
            }
        }
        let id = new_container_id();
        // Upstream records `Created` once the runtime created the container, before its start:
        // a program that cannot start is `Created` then `Failed`; a container the kubelet
        // could not configure (here: its record refused) is `Failed` alone.
        let created = |act: &mut Self| {
            act.record(
                pod,
                container,
                EventType::Normal,
                EVENT_CREATED,
                &format!("Created container: {}", container.name),
            )
        };
        let spawned = match launch.spawn(self.shim.as_deref()) {
            Ok(spawned) => spawned,
            Err(message) => {
                created(self);
                return self.start_failed(pod_uid, pod, container, role, id, message, ctx);
            }
        };
        let Spawned { mut child, control } = spawned;
        let pgid = child.id();
        let owner = GroupOwner { pod: pod_name(pod), container: container.name.clone() };
        let recorded = pgid.map_or(Ok(()), |pgid| self.groups.add(pgid, owner));
        if let Err(error) = &recorded
            && error.kind() == io::ErrorKind::Interrupted
        {
            // The agent has killed every container and is exiting: nothing more may run.
            let _ = child.start_kill();
            let message = start_error(&error.to_string());
            created(self);
            return self.start_failed(pod_uid, pod, container, role, id, message, ctx);
        }
        // Nothing runs unrecorded, with the shim or without: after a crash the next agent
        // would not know it, and it would run beside its next copy. A shim has run nothing yet
        // (it waits for the go byte); a program spawned without one (an embedder's runtime)
        // runs already and may have started others: its whole group is SIGKILLed while the
        // leader is unreaped, its ID still ours. Either way the start fails before `Created`.
        if let Err(error) = recorded {
            if let Some(pgid) = pgid {
                self.signaller.send(&self.groups, pgid, Signal::Kill);
                // Unlisted only: no record was written, and removing one that is not there
                // fails on a read-only disk or a `containers` that is no folder, a warning at
                // each retry.
                self.groups.unlist(pgid);
            }
            // Killed and reaped in the background (`kill_on_drop`).
            let _ = child.start_kill();
            let message = format!("cannot record the container in the state directory: {error}");
            return self.create_failed(pod_uid, pod, container, restart_owed, message, ctx);
        }
        created(self);
        let Some(control) = control else {
            return self.container_started(pod_uid, pod, container, id, launch, child, false, ctx);
        };
        // Under the shim: recorded, so the go byte.
        if let Err(message) = (&control).write_all(&[GO]).map_err(shim_error) {
            // The shim ran nothing: killed and reaped in the background (`kill_on_drop`).
            let _ = child.start_kill();
            if let Some(pgid) = pgid {
                self.groups.remove(pgid);
            }
            return self.start_failed(pod_uid, pod, container, role, id, message, ctx);
        }
        // The report comes within milliseconds, but thousands of starts in one sync would hold
        // the actor's thread (and with it the listener and the probes) for seconds: it is read
        // on a blocking thread, and the container is `Starting` meanwhile.
        let Some(slot) = self.slot_mut(pod_uid, &container.name) else { return };
        begin_instance(
            slot,
            Current::Starting(Running {
                id: id.clone(),
                pgid,
                shimmed: true,
                started_at: Time(Timestamp::UNIX_EPOCH),
                exited: watch::channel(false).0,
                killing: None,
            }),
        );
        self.notify(pod_uid, ctx);
        // Read on the reactor, not on a thread: tokio's blocking pool panics (and with it this
        // actor) when the system can make no thread and none of the pool is alive, and a
        // thread per start would hold thousands of threads during a burst of starts
        // (docs/reliability.md, "No process to spare").
        let report = Report::read(control, REPORT_WAIT);
        let (uid, pod, container) = (PodUid::from(pod_uid), pod.clone(), container.clone());
        ctx.spawn(report.into_actor(self).map(move |report, act, ctx| {
            act.start_reported(&uid, &pod, &container, role, id, launch, child, report, ctx)
        }));
    }

    /// The shim's report on a `Starting` container: it runs, or its start failed. A container
    /// that is no longer the one starting (its pod was forgotten meanwhile) is killed.
    #[allow(clippy::too_many_arguments)]
    fn start_reported(
        &mut self,
        pod_uid: &PodUid,
        pod: &Arc<Pod>,
        container: &Container,
        role: Role,
        id: ContainerId,
        launch: Launch,
        mut child: Child,
        report: io::Result<(Report, UnixStream)>,
        ctx: &mut Context<Self>,
    ) {
        let pgid = child.id();
        let current = self.slot_mut(pod_uid, &container.name).map(|slot| &slot.current);
        if !matches!(current, Some(Current::Starting(starting)) if starting.id == id) {
            tracing::debug!(pod = %pod_ref(pod), container = %container.name, "container started after its pod was forgotten, killing it");
            // Its whole tree, by the shim; then the guard kills the group once the shim is gone.
            let guard = ProcessGuard {
                child,
                pgid,
                signaller: self.signaller.clone(),
                groups: self.groups.clone(),
                shimmed: true,
            };
            if let Ok((_, control)) = &report {
                ask_to_kill_tree(control);
            }
            if let Some(pgid) = pgid {
                self.signaller.send(&self.groups, pgid, Signal::KillTree);
            }
            ctx.spawn(guard.wait().into_actor(self).map(|_, _, _| ()));
            return;
        }
        let program = launch.argv.first().map(String::as_str).unwrap_or_default();
        let message = match report.map_err(shim_error) {
            Ok((Report::Started, control)) => {
                if let Some(pgid) = pgid {
                    self.groups.keep_control(pgid, control);
                }
                return self.container_started(pod_uid, pod, container, id, launch, child, true, ctx);
            }
            Ok((Report::Failed(e), _)) => shim_start_error(program, &e),
            Err(message) => message,
        };
        // No report (late, or the shim died): the program may run all the same. The whole
        // group is killed, not only its leader, while the leader is unreaped and the group's
        // ID still ours.
        if let Some(pgid) = pgid {
            self.signaller.send(&self.groups, pgid, Signal::Kill);
        }
        let _ = child.start_kill();
        if let Some(pgid) = pgid {
            self.groups.remove(pgid);
        }
        self.start_failed(pod_uid, pod, container, role, id, message, ctx);
    }

    /// A container the agent could not create, for a fault of its own before anything ran (its
    /// record cannot be written: a full or read-only disk). As upstream's `startContainer` when
    /// `generateContainerConfig` fails (its log directory cannot be made, say): a `Failed`
    /// event, the container waiting with `CreateContainerConfigError`, and no instance: no
    /// restart counted, no exit for `restartPolicy` to weigh (a `Never` pod's container still
    /// gets its one run). Tried again after the initial back-off (10 s), as the kubelet's pod
    /// worker syncs a pod again after a failed sync (`backOffPeriod`); a container in crash-loop
    /// back-off takes its next step before each try, as upstream's `doBackOff` runs before
    /// `startContainer`, and a retry that finds it still backing off shows `CrashLoopBackOff`
    /// until the next try ([`Self::try_start`]; the timeline is in docs/reliability.md, "The
    /// agent's own disk").
    fn create_failed(
        &mut self,
        pod_uid: &str,
        pod: &Arc<Pod>,
        container: &Container,
        restart_owed: bool,
        message: String,
        ctx: &mut Context<Self>,
    ) {
        self.budget.release(pod_uid);
        tracing::warn!(pod = %pod_ref(pod), container = %container.name, error = %message, "cannot start container");
        self.record(pod, container, EventType::Warning, EVENT_FAILED, &format!("Error: {message}"));
        let Some(slot) = self.slot_mut(pod_uid, &container.name) else { return };
        slot.create_error = Some(message);
        slot.restart_owed = restart_owed;
        let retry = self.initial_backoff;
        self.schedule_retry(pod_uid, &container.name, retry, ctx);
        self.notify(pod_uid, ctx);
    }

    /// A container that could not start: `Failed`, and containerd's `StartError` state.
    #[allow(clippy::too_many_arguments)]
    fn start_failed(
        &mut self,
        pod_uid: &str,
        pod: &Arc<Pod>,
        container: &Container,
        role: Role,
        id: ContainerId,
        message: String,
        ctx: &mut Context<Self>,
    ) {
        self.budget.release(pod_uid);
        tracing::warn!(pod = %pod_ref(pod), container = %container.name, error = %message, "cannot start container");
        self.record(pod, container, EventType::Warning, EVENT_FAILED, &format!("Error: {message}"));
        let spec = probelet_actors::status::spec_of(pod);
        let rules = RestartRules { spec: &spec, container_rules: self.container_restart_rules };
        let retry = rules.after_exit(role, container, START_ERROR_EXIT_CODE);
        // What containerd reports for a created container whose task could not start:
        // exited with `StartError`, exit code 128, never started (a zero start time).
        let terminated = ContainerStateTerminated {
            exit_code: START_ERROR_EXIT_CODE,
            reason: Some(REASON_START_ERROR.to_owned()),
            message: Some(message),
            started_at: Some(Time(Timestamp::UNIX_EPOCH)),
            finished_at: Some(self.now_time()),
            container_id: Some(id.to_string()),
            signal: None,
        };
        let Some(slot) = self.slot_mut(pod_uid, &container.name) else { return };
        slot.last_event = Some(Instant::now());
        slot.started += 1;
        // A kill waiting on a `Starting` container sees it gone when its `exited` drops.
        if retry {
            begin_instance(slot, Current::StartFailed { id, terminated });
        } else {
            begin_instance(slot, Current::Exited { id, terminated });
        }
        // The runtime reports the failed start as an exit, which syncs the pod: through the
        // next turn, not recursively, and the back-off decides when it starts again. One not
        // to be restarted syncs it too: the exits that came while its start was under way
        // wait for its report to be synced (`sync_soon`).
        self.sync_soon(pod_uid, ctx);
        self.notify(pod_uid, ctx);
    }

    #[allow(clippy::too_many_arguments)]
    fn container_started(
        &mut self,
        pod_uid: &str,
        pod: &Arc<Pod>,
        container: &Container,
        id: ContainerId,
        launch: Launch,
        mut child: Child,
        shimmed: bool,
        ctx: &mut Context<Self>,
    ) {
        let pgid = child.id();
        let pod_label = pod_name(pod);
        if let Some(stdout) = child.stdout.take() {
            tokio::spawn(forward_output(
                stdout,
                self.output_budget.clone(),
                pod_label.clone(),
                container.name.clone(),
            ));
        }
        if let Some(stderr) = child.stderr.take() {
            tokio::spawn(forward_output(
                stderr,
                self.output_budget.clone(),
                pod_label.clone(),
                container.name.clone(),
            ));
        }
        self.runner.register(
            id.clone(),
            LocalContainer { working_dir: launch.working_dir.clone(), env: launch.env.clone() },
        );
        let started_at = self.now_time();
        let Some(slot) = self.slot_mut(pod_uid, &container.name) else { return };
        slot.started += 1;
        match std::mem::replace(&mut slot.current, Current::NotStarted) {
            // A kill that began while it was starting goes on waiting for the same exit.
            Current::Starting(starting) => {
                slot.current = Current::Running(Running { started_at, ..starting });
            }
            previous => {
                slot.current = previous;
                let running = Running {
                    id: id.clone(),
                    pgid,
                    shimmed,
                    started_at,
                    exited: watch::channel(false).0,
                    killing: None,
                };
                begin_instance(slot, Current::Running(running));
            }
        }
        tracing::debug!(pod = %pod_label, container = %container.name, container_id = %id, ?pgid, "container started");
        self.record(
            pod,
            container,
            EventType::Normal,
            EVENT_STARTED,
            &format!("Started container {}", container.name),
        );

        let (uid, name) = (pod_uid.to_owned(), container.name.clone());
        let guard = ProcessGuard {
            child,
            pgid,
            signaller: self.signaller.clone(),
            groups: self.groups.clone(),
            shimmed,
        };
        ctx.spawn(
            guard
                .wait()
                .into_actor(self)
                .map(move |status, act, ctx| act.container_exited(&uid, &name, &id, status, ctx)),
        );
        self.notify(pod_uid, ctx);
        // The runtime reports the start (PLEG's `ContainerStarted`), which syncs the pod: the
        // other containers backing off record `BackOff` again.
        self.sync_soon(pod_uid, ctx);
    }

    fn container_exited(
        &mut self,
        pod_uid: &str,
        name: &str,
        id: &ContainerId,
        status: io::Result<ExitStatus>,
        ctx: &mut Context<Self>,
    ) {
        self.runner.unregister(id);
        self.budget.release(pod_uid);
        let finished_at = self.now_time();
        let Some(slot) = self.slot_mut(pod_uid, name) else { return };
        let Current::Running(running) = std::mem::replace(&mut slot.current, Current::NotStarted) else {
            return;
        };
        let (exit_code, signal, message) = match status {
            Ok(status) => (exit_code(status), status.signal(), None),
            Err(e) => (-1, None, Some(format!("cannot wait for the container's process: {e}"))),
        };
        tracing::debug!(pod_uid, container = %name, container_id = %id, exit_code, ?signal, "container exited");
        // Not for a kill of the runtime's own: upstream would say OOMKilled only if its cgroup
        // saw one, and here the count is the node's (oom.rs).
        let oom_killed = signal == Some(rustix::process::Signal::KILL.as_raw())
            && running.killing.is_none()
            && self.oom_kills.killed_by_oom();
        let reason = match exit_code {
            0 => REASON_COMPLETED,
            _ if oom_killed => REASON_OOM_KILLED,
            _ => REASON_ERROR,
        };
        let Some(slot) = self.slot_mut(pod_uid, name) else { return };
        slot.current = Current::Exited {
            id: running.id.clone(),
            terminated: ContainerStateTerminated {
                exit_code,
                // Never set by the kubelet (CRI reports no signal; `convertContainerStatus`
                // writes none): the exit code says it, 128 + the signal.
                signal: None,
                reason: Some(reason.to_owned()),
                message,
                started_at: Some(running.started_at.clone()),
                finished_at: Some(finished_at),
                container_id: Some(running.id.to_string()),
            },
        };
        slot.last_event = Some(Instant::now());
        running.exited.send_replace(true);
        self.notify(pod_uid, ctx);
        self.sync_soon(pod_uid, ctx);
    }
}

/// A start error from talking to the shim.
fn shim_error(e: io::Error) -> String {
    start_error(&format!("container shim: {}", go_errno_text(&e)))
}

/// Makes `next` the slot's current instance; an exited or failed one becomes the last state.
fn begin_instance(slot: &mut Slot, next: Current) {
    slot.create_error = None;
    if let Current::Exited { terminated, .. } | Current::StartFailed { terminated, .. } =
        std::mem::replace(&mut slot.current, next)
    {
        slot.last_terminated = Some(terminated);
    }
}
