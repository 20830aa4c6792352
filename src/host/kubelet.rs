//! The standalone agent's pod sync loop: what the kubelet's `syncLoop` and `SyncPod` do, for
//! pods from a manifests folder and containers from the local process runtime.
//!
//! Pods come and go with the folder (rescanned every few seconds). A pod is synced — runtime
//! state → phase → `UpdatePodStatus` → conditions → `SetPodStatus` → `AddPod` → the runtime
//! told to converge — whenever its containers change, a probe result changes, and every
//! resync period. A pod in a terminal phase is no longer probed nor converged. A failed
//! liveness or startup probe kills the container with the kubelet's message and grace period.
//! Every status transition is printed as one readable line.
//!
//! A pod with `spec.activeDeadlineSeconds` is checked against it on every sync, and a timer
//! syncs it when the deadline passes: it then fails (`DeadlineExceeded`) and its containers
//! are killed for good (docs/reliability.md, "A pod's active deadline").
//!
//! A sync gathers asynchronously and decides on the actor: the pod may have started
//! terminating, or be gone, by the time its status is ready, and only the actor's state says so.
//!
//! A manifest moved out and back in comes back with the same UID (the UID hashes path and
//! content). If its pod is still stopping, the new one waits (upstream pod workers'
//! `restartRequested`): the old pod's termination finishes — containers stopped, final status,
//! workers, status and runtime state forgotten — and then the pod is added afresh.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use tokio::time::Instant;

use actix::prelude::*;
use k8s_openapi::api::core::v1::{HostIP, Pod, PodIP, PodStatus};
use k8s_openapi::jiff::Timestamp;
use probelet_actors::Pipeline;
use probelet_actors::capacity::ShrinkAfterRemoval;
use probelet_actors::contracts::{EventType, PodRegistry};
use probelet_actors::features::Feature;
use probelet_actors::format::pod_ref;
use probelet_actors::prober::update_status::{
    keep_started_and_ready_once_finished, keep_started_while_terminating,
};
use probelet_actors::prober::{ProbeKind, ProbeResult, pod_reference};
use probelet_actors::restart::{InRuntime, all_containers_could_restart};
use probelet_actors::results::ProbeResultChanged;
use probelet_actors::status::stored::StoredStatus;
use probelet_actors::status::{
    PHASE_FAILED, PHASE_SUCCEEDED, all_containers_restarting, generate_all_containers_restarting_condition,
    generate_kubelet_conditions, keep_initialized_once_initialized,
};
use probelet_actors::vocabulary::PodUid;

use super::console::{self, Tone, tone_of_transition};
use super::deadline::{
    MESSAGE_DEADLINE_EXCEEDED, REASON_DEADLINE_EXCEEDED, active_deadline, past_active_deadline, until,
};
use super::history::ProbeHistory;
use super::manifests::{self, Snapshot, SourceChange};
use super::phase::{
    has_any_regular_container_started, kill_grace_period, pod_phase_restarting_all, probe_kill_message,
};
use super::runtime::{
    ContainerGroups, ForgetPod, GetRuntimeStatus, KillContainer, KillPod, ProcessRuntime, RuntimeChanged,
    StateWriteError, SyncPod,
};
use super::transitions::{Summary, describe_changes};

/// The pod IP every standalone pod gets: containers are local processes.
pub const POD_IP: &str = "127.0.0.1";

// === messages ===

/// Look at the manifests folder now.
#[derive(Debug, Clone, Copy, Message)]
#[rtype(result = "()")]
pub struct Rescan;

/// Stop every pod (containers with their grace periods) and resolve when done.
#[derive(Debug, Clone, Copy, Message)]
#[rtype(result = "()")]
pub struct Shutdown;

/// The pods the agent runs now.
#[derive(Debug, Clone, Copy, Message)]
#[rtype(result = "Vec<Arc<Pod>>")]
pub struct ListPods;

// === the actor ===

/// Where pods come from and how often to look.
#[derive(Debug, Clone)]
pub struct KubeletConfig {
    /// The folder the pods come from, resolved once at start (no symlink, absolute): the folder
    /// the agent claimed and keeps its container records in, so a symlink swapped while it runs
    /// cannot lead it to another agent's folder.
    pub manifests: PathBuf,
    /// The folder as the command line gave it, when that differs: if it comes to lead elsewhere
    /// (a symlink swapped), the agent says so, once, and keeps serving `manifests`.
    pub manifests_as_given: Option<PathBuf>,
    pub node_name: String,
    /// How often the folder is rescanned.
    pub rescan_period: Duration,
    /// The pods the previous agent on the folder ran (named in its state directory): the first
    /// scan gives each namespace/name back to the file that ran it before file order does.
    pub ran_before: manifests::RanBefore,
    /// The runtime's container groups: with a state directory, the pods the agent runs are
    /// named there for the next agent ([`crate::host::runtime::RUNNING_PODS`]), under the
    /// same check as the container records ([`ContainerGroups::write_running_pods`]); without
    /// one, not written.
    pub groups: ContainerGroups,
    /// How long after its last sync a pod is synced again regardless of events, plus up to half
    /// as much again at random per pod (the kubelet's `--sync-frequency`, 1 m, and its pod
    /// workers' jitter). Each sync of a pod with a readiness probe not yet passing triggers that
    /// probe (`UpdatePodStatus`), so a shorter resync runs such probes more often than their
    /// period.
    pub resync_period: Duration,
    /// How often pods that are gone have their probes cleaned up and due resyncs are run (the
    /// kubelet's housekeeping, every 2 s).
    pub housekeeping_period: Duration,
}

/// How many files newly unreadable with one kind of error a scan names; the rest are counted.
const UNREADABLE_NAMED: usize = 3;

/// How many manifests newly skipped (wrong, refused) a scan names; the rest are counted. A
/// thousand copies of one pod dropped in the folder printed a thousand lines at once.
const SKIPPED_NAMED: usize = 20;

/// The kubelet's `workerResyncIntervalJitterFactor`.
const RESYNC_JITTER: f64 = 0.5;

/// When a pod synced now is due for its resync: `period` plus up to half of it, at random.
fn next_resync(period: Duration) -> Instant {
    let jitter = period.mul_f64(RESYNC_JITTER * rand::random::<f64>());
    Instant::now() + period + jitter
}

struct PodEntry {
    /// Tells this entry from an earlier one of the same UID (a manifest removed and added back
    /// while a sync of the old one was in flight).
    generation: u64,
    pod: Arc<Pod>,
    /// What was printed last, to print only changes.
    printed: Option<Summary>,
    syncing: bool,
    /// Another sync was asked for while one ran.
    dirty: bool,
    /// A probe's result changed since the last sync began: the next sync is one the kubelet
    /// runs `SyncPod` for (`handleProbeSync`), which the runtime counts as a sync of the pod
    /// ([`SyncPod::kubelet_sync`]).
    probe_changed: bool,
    terminating: bool,
    /// The pod reached a terminal phase: its workers are gone and nothing restarts.
    finished: bool,
    /// The manifest came back (same UID) while this entry was terminating: added once the
    /// termination has finished.
    restart: Option<Restart>,
    /// When the pod is synced again if nothing else syncs it first.
    next_resync: Instant,
    /// `status.startTime` as the status manager stored it: what the active deadline counts
    /// from. Learned from the first stored status; it never changes for a pod.
    start_time: Option<Timestamp>,
    /// Syncs the pod when its active deadline passes, so that it fails then and not at its
    /// next resync (upstream's sync loop picks out pods past their deadline every second).
    deadline_timer: Option<SpawnHandle>,
    /// The active deadline failed the pod: every later status of it says so, as upstream's
    /// deadline handler keeps saying so for as long as the pod is synced.
    deadline_exceeded: bool,
}

impl PodEntry {
    /// Whether the pod's active deadline has passed at `now` and has yet to fail it (a pod
    /// that stopped or ended by itself is past caring).
    fn deadline_passed(&self, now: Timestamp) -> bool {
        !self.terminating
            && !self.finished
            && !self.deadline_exceeded
            && past_active_deadline(&self.pod, self.start_time, now)
    }
}

/// A pod to add once an earlier pod of its UID or its name has stopped.
struct Restart {
    pod: Pod,
    file: PathBuf,
}

impl Restart {
    fn uid(&self) -> Option<&str> {
        self.pod.metadata.uid.as_deref()
    }
}

/// Why the running pods' list is owed, each said once while it lasts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Owed {
    /// The write failed (a full or read-only disk).
    WriteFailed,
    /// Another agent holds the directory at the state directory's path: its list is not
    /// overwritten.
    HeldByAnotherAgent,
}

/// Whether two pods have the same namespace and name (upstream's "full name").
fn same_full_name(a: &Pod, b: &Pod) -> bool {
    a.metadata.name == b.metadata.name && a.metadata.namespace == b.metadata.namespace
}

/// What a scan told about the manifests, kept to tell each thing once while it lasts (a line at
/// every 2 s scan would bury everything else).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
enum Told {
    /// What is wrong with what a file holds (`manifest skipped`, `manifest field ignored`):
    /// told again when the file is read with other contents and it still holds, as the kubelet
    /// logs it at every read of a changed file: an operator who saves a broken manifest still
    /// broken hears it again (docs/reliability.md, "A manifest saved still broken is told
    /// again").
    Contents { file: PathBuf, line: String },
    /// A running file held, caught empty or half written (or unreadable for a moment): once per
    /// line while the hold lasts, although a writer changes the file at every scan; its end is
    /// told as what the file then is.
    Held { file: PathBuf, line: String },
    /// A file (or the folder) that cannot be read, by kind of error: no contents to compare.
    Unreadable { file: PathBuf, kind: std::io::ErrorKind },
    /// The manifests path as given now leads elsewhere.
    ManifestsPathMoved,
}

/// Tells each of `items` (a file and its line) once while the file's contents last, naming the
/// first [`SKIPPED_NAMED`] of those new to this scan; how many were new.
fn tell_per_contents<'a>(
    items: impl Iterator<Item = (&'a PathBuf, String)>,
    reported: &mut HashSet<Told>,
    current: &mut HashSet<Told>,
    lines: &mut Vec<(Tone, String)>,
) -> usize {
    let mut new = 0;
    for (file, line) in items {
        let told = Told::Contents { file: file.clone(), line: line.clone() };
        if reported.insert(told.clone()) {
            new += 1;
            if new <= SKIPPED_NAMED {
                lines.push((Tone::Warn, line));
            }
        }
        current.insert(told);
    }
    new
}

/// The lines a scan that gave `next` tells about the manifests in the folder `manifests`, each
/// thing once while it lasts ([`Told`]); `reported` is what was told, kept up to date.
fn manifest_lines(reported: &mut HashSet<Told>, next: &Snapshot, folder: &Path) -> Vec<(Tone, String)> {
    let mut lines = Vec::new();
    // A file read with other contents is told afresh what is still wrong with it.
    reported.retain(|told| !matches!(told, Told::Contents { file, .. } if next.changed_files.contains(file)));
    let mut current = HashSet::new();
    // Files newly unreadable this scan, by kind of error, beyond the ones named.
    let mut unnamed: BTreeMap<String, usize> = BTreeMap::new();
    // Manifests newly skipped this scan, and running ones newly held (caught empty or half
    // written: their pods kept).
    let (mut skipped, mut held_now) = (0, 0);
    for error in &next.errors {
        // Each file that cannot be read is told once while it lasts, and so is what is wrong,
        // once per file and reason while the file's contents last. A node short of file
        // descriptors fails every file the same way: of one kind of error, a scan names the
        // first few files only.
        let kind = next.folder_unreadable.or_else(|| next.unreadable_files.get(&error.file).copied());
        // A file caught empty or half written is kept as an unreadable one is, but it was read:
        // said as what it is, not counted among the files that cannot be read. So is a running
        // file held while it cannot be read: its pods stop if it lasts.
        let held = manifests::kept_for_now(&error.reason);
        let kind = kind.filter(|_| !held);
        let file = error.file.clone();
        let (told, line) = match kind {
            Some(kind) => (
                Told::Unreadable { file, kind },
                format!("manifests cannot be read, keeping their last pods: {error}"),
            ),
            // Its pods run on: "skipped" would say the opposite of what follows.
            None if held => {
                let line = format!("manifest held: {}", error.for_a_line());
                (Told::Held { file, line: line.clone() }, line)
            }
            None => {
                // One document of several: the file's others are read as they are, and
                // "manifest skipped" would say the whole file is. When the file gave no pod
                // (each of its documents refused), the whole file is skipped and said so.
                let file_runs = || next.pods.values().any(|pod| pod.file == error.file);
                let line = match error.document() {
                    Some(_) if file_runs() => {
                        format!("manifest document skipped (not the whole file): {}", error.for_a_line())
                    }
                    _ => format!("manifest skipped: {}", error.for_a_line()),
                };
                (Told::Contents { file, line: line.clone() }, line)
            }
        };
        if reported.insert(told.clone()) {
            match kind {
                None if held => {
                    held_now += 1;
                    if held_now <= SKIPPED_NAMED {
                        lines.push((Tone::Warn, line));
                    }
                }
                Some(kind) => {
                    let count = unnamed.entry(format!("{kind:?}")).or_default();
                    *count += 1;
                    if *count <= UNREADABLE_NAMED {
                        lines.push((Tone::Bad, line));
                    }
                }
                None => {
                    skipped += 1;
                    if skipped <= SKIPPED_NAMED {
                        lines.push((Tone::Warn, line));
                    }
                }
            }
        }
        current.insert(told);
    }
    for (kind, count) in unnamed {
        if count > UNREADABLE_NAMED {
            let more = count - UNREADABLE_NAMED;
            lines.push((Tone::Bad, format!("… and {more} more manifests cannot be read ({kind})")));
        }
    }
    let folder = folder.display();
    if skipped > SKIPPED_NAMED {
        let more = skipped - SKIPPED_NAMED;
        lines.push((
            Tone::Warn,
            format!("… and {more} more manifests skipped: `probelet lint {folder}` names them all"),
        ));
    }
    if held_now > SKIPPED_NAMED {
        let more = held_now - SKIPPED_NAMED;
        lines.push((Tone::Warn, format!("… and {more} more manifests held, their pods kept")));
    }
    // Fields a Pod does not have (a misspelled `readinesProbe`): ignored, as the kubelet
    // ignores them. A key written twice in a mapping: the last value is read, as the kubelet
    // reads it. Each told once per file (document) and line while the file's contents last.
    let ignored =
        next.unknown_fields.iter().map(|unknown| (&unknown.file, manifests::ignored_fields_line(unknown)));
    let ignoring = tell_per_contents(ignored, reported, &mut current, &mut lines);
    let doubled = next
        .duplicate_keys
        .iter()
        .map(|duplicate| (&duplicate.file, manifests::duplicate_key_line(duplicate)));
    let twice = tell_per_contents(doubled, reported, &mut current, &mut lines);
    if twice > SKIPPED_NAMED {
        let more = twice - SKIPPED_NAMED;
        lines.push((
            Tone::Warn,
            format!("… and {more} more manifests with a key written twice: `probelet lint {folder}` names them all"),
        ));
    }
    if ignoring > SKIPPED_NAMED {
        let more = ignoring - SKIPPED_NAMED;
        lines.push((
            Tone::Warn,
            format!(
                "… and {more} more manifests with fields ignored: `probelet lint {folder}` names them all"
            ),
        ));
    }
    // A file this scan did not read (the folder could not be listed, or the file not opened)
    // still holds what it held: what was told of its contents stays told, else a folder
    // unreadable for one scan told every skipped file and ignored field again.
    let not_read = |file: &Path| next.folder_unreadable.is_some() || next.unreadable_files.contains_key(file);
    reported.retain(|told| match told {
        _ if current.contains(told) => true,
        Told::ManifestsPathMoved => true,
        Told::Contents { file, .. } => not_read(file),
        Told::Held { .. } | Told::Unreadable { .. } => false,
    });
    lines
}

pub struct StandaloneKubelet {
    config: KubeletConfig,
    pipeline: Pipeline,
    runtime: Addr<ProcessRuntime>,
    pods: PodRegistry,
    history: ProbeHistory,
    snapshot: Snapshot,
    /// What was told about the manifests and the folder, to tell each once while it lasts.
    reported: HashSet<Told>,
    /// What each manifest parsed to, so that a rescan parses only what changed.
    parse_cache: manifests::ParseCache,
    entries: HashMap<PodUid, PodEntry>,
    /// The last [`PodEntry::generation`] given.
    generation: u64,
    /// Set once the folder has been read: `/readyz`.
    synced: Arc<AtomicBool>,
    /// [`Shutdown`] came: no pod is added any more (its containers would outlive the agent).
    shutting_down: bool,
    /// The last write of the running pods' list did not happen, and why: it is owed
    /// ([`Self::write_running_pods`]).
    running_pods_owed: Option<Owed>,
}

impl StandaloneKubelet {
    pub fn new(
        mut config: KubeletConfig,
        pipeline: Pipeline,
        runtime: Addr<ProcessRuntime>,
        pods: PodRegistry,
        history: ProbeHistory,
        synced: Arc<AtomicBool>,
    ) -> Self {
        let ran_before = std::mem::take(&mut config.ran_before);
        StandaloneKubelet {
            config,
            pipeline,
            runtime,
            pods,
            history,
            snapshot: Snapshot { ran_before, ..Snapshot::default() },
            reported: HashSet::new(),
            parse_cache: manifests::ParseCache::default(),
            entries: HashMap::new(),
            generation: 0,
            synced,
            shutting_down: false,
            running_pods_owed: None,
        }
    }

    /// Names the running pods in the state directory for the next agent
    /// ([`crate::host::runtime::RUNNING_PODS`]): when they `changed`, and again at every scan
    /// after a write that failed (a full or read-only disk) or was refused (another agent holds
    /// the directory at the path now), or once the file is gone (the state directory deleted
    /// and made again), until a write succeeds. Written only at a change, a list that could not
    /// be written stayed stale for good, and the next agent gave a running pod's name to a
    /// newcomer by file order. Each reason is said at WARN, once while it lasts, naming the
    /// file (docs/reliability.md, "The agent's own disk").
    fn write_running_pods(&mut self, changed: bool) {
        let Some(state_dir) = self.config.groups.state_dir() else { return };
        let path = state_dir.join(crate::host::runtime::RUNNING_PODS);
        if !changed && self.running_pods_owed.is_none() && path.exists() {
            return;
        }
        match self.config.groups.write_running_pods(self.snapshot.pods.values(), &self.snapshot.ran_before) {
            Ok(()) => {
                if self.running_pods_owed.take().is_some() {
                    tracing::info!(path = %path.display(), "Named the running pods for the next agent again");
                }
            }
            Err(error) => {
                let owed = match error {
                    StateWriteError::HeldByAnotherAgent { .. } => Owed::HeldByAnotherAgent,
                    StateWriteError::Io(_) => Owed::WriteFailed,
                };
                if self.running_pods_owed.replace(owed) != Some(owed) {
                    tracing::warn!(path = %path.display(), %error, "Cannot name the running pods for the next agent; tried again at every scan");
                }
            }
        }
    }

    /// The pod of `uid` waiting for an earlier pod to stop, if it waits.
    fn waiting_mut(&mut self, uid: &str) -> Option<&mut Restart> {
        self.entries.values_mut().filter_map(|e| e.restart.as_mut()).find(|r| r.uid() == Some(uid))
    }

    /// Says once, while it lasts, that the folder as given now leads elsewhere.
    fn check_manifests_path(&mut self) {
        let Some(given) = &self.config.manifests_as_given else { return };
        match std::fs::canonicalize(given) {
            Ok(now) if now != self.config.manifests => {
                if self.reported.insert(Told::ManifestsPathMoved) {
                    console::print(
                        Tone::Warn,
                        &format!(
                            "manifests path {} now leads to {}: this agent keeps serving {}; restart it to follow",
                            given.display(),
                            now.display(),
                            self.config.manifests.display()
                        ),
                    );
                }
            }
            _ => {
                self.reported.remove(&Told::ManifestsPathMoved);
            }
        }
    }

    fn rescan(&mut self, ctx: &mut Context<Self>) {
        // MutableContainerProbes: a manifest whose probes alone changed keeps its UID and its
        // running pod, and the new probes are applied in place (docs/prober.md §3.9). A file
        // that gives the namespace/name of a pod running from another file is refused, not run
        // in its place (docs/reliability.md, "A new manifest never displaces a running pod").
        let next = manifests::rescan(
            &self.config.manifests,
            &self.config.node_name,
            &self.pipeline.feature_gates,
            &mut self.parse_cache,
            &self.snapshot,
        );
        for (tone, line) in manifest_lines(&mut self.reported, &next, &self.config.manifests) {
            console::print(tone, &line);
        }
        self.check_manifests_path();
        let changes = manifests::diff(&self.snapshot, &next);
        // The names held for a file that ran before the agent started are recorded too: one
        // held, or one whose hold ended, changes the record as a pod does.
        let waiting_changed = self.snapshot.ran_before != next.ran_before;
        self.snapshot = next;
        self.write_running_pods(!changes.is_empty() || waiting_changed);
        for change in changes {
            match change {
                SourceChange::Added(loaded) => self.add(loaded.pod, &loaded.file, ctx),
                SourceChange::Removed { uid, file, namespace, name } => {
                    let exists = manifests::leads_to_a_file(&file);
                    let why = manifests::removal(&self.snapshot, &file, &namespace, &name, exists);
                    self.terminate(uid, why, ctx)
                }
                SourceChange::Updated(loaded) => self.update(loaded.pod, ctx),
            }
        }
        if !self.synced.swap(true, Ordering::SeqCst) {
            tracing::info!(manifests = %self.config.manifests.display(), pods = self.entries.len(), "Pod source synced");
        }
    }

    fn add(&mut self, pod: Pod, file: &Path, ctx: &mut Context<Self>) {
        if self.shutting_down {
            return;
        }
        let Some(uid) = PodUid::of(&pod) else { return };
        if let Some(entry) = self.entries.get_mut(&uid).filter(|e| e.terminating) {
            // Replacing the entry now would let the old termination remove the new pod, and the
            // runtime and status manager still hold the old one's stopping containers and final
            // status under this UID.
            tracing::info!(pod = %pod_ref(&entry.pod), "pod added back while stopping, starts once stopped");
            entry.restart = Some(Restart { pod, file: file.to_owned() });
            return;
        }
        // The kubelet starts a static pod only once every earlier pod of its full name has
        // terminated (its pod workers' `allowStaticPodStart`, docs/status-manager.md): a
        // changed manifest is a new UID under the old name, and starting it at once would run
        // both copies of each container side by side for the old one's grace period.
        if let Some(entry) = self.entries.values_mut().find(|e| e.terminating && same_full_name(&e.pod, &pod))
        {
            tracing::info!(pod = %pod_ref(&pod), "pod waits for the earlier pod of its name to stop");
            entry.restart = Some(Restart { pod, file: file.to_owned() });
            return;
        }
        let pod = Arc::new(pod);
        console::print(Tone::Plain, &format!("{}: added from {}", pod_ref(&pod), file.display()));
        self.pods.upsert(pod.clone());
        self.generation += 1;
        let entry = PodEntry {
            generation: self.generation,
            pod,
            printed: None,
            syncing: false,
            dirty: false,
            probe_changed: false,
            terminating: false,
            finished: false,
            restart: None,
            next_resync: next_resync(self.config.resync_period),
            start_time: None,
            deadline_timer: None,
            deadline_exceeded: false,
        };
        self.entries.insert(uid.clone(), entry);
        self.sync(uid, ctx);
    }

    /// A running pod's manifest changed its probes only (`MutableContainerProbes`): the pod
    /// keeps running and its next sync reconciles the probes.
    fn update(&mut self, pod: Pod, ctx: &mut Context<Self>) {
        let Some(uid) = PodUid::of(&pod) else { return };
        let Some(entry) = self.entries.get_mut(&uid).filter(|e| !e.terminating) else {
            // Not started yet: it waits for an earlier pod (of its UID or its name) to stop.
            if let Some(waiting) = self.waiting_mut(&uid) {
                waiting.pod = pod;
            }
            return;
        };
        let pod = Arc::new(pod);
        console::print(Tone::Plain, &format!("{}: probes updated in place", pod_ref(&pod)));
        self.pods.upsert(pod.clone());
        entry.pod = pod.clone();
        self.pipeline.reconcile_pod(pod);
        self.sync(uid, ctx);
    }

    /// One pod sync (the kubelet's `SyncPod`): the status is generated off the actor, then
    /// [`Self::apply`] decides what to do with it.
    fn sync(&mut self, uid: PodUid, ctx: &mut Context<Self>) {
        let Some(entry) = self.entries.get_mut(&uid) else { return };
        if entry.syncing {
            entry.dirty = true;
            return;
        }
        entry.syncing = true;
        let kubelet_sync = std::mem::take(&mut entry.probe_changed);
        let generation = entry.generation;
        // Upstream's deadline handler, asked on every status generation. A pod that reached a
        // terminal phase by itself, or is stopping because its manifest went away, is past
        // caring: only one the deadline already failed stays failed by it.
        let evict = entry.deadline_exceeded || entry.deadline_passed(self.pipeline.clock.now());
        let status = generate_status(
            entry.pod.clone(),
            self.pipeline.clone(),
            self.runtime.clone(),
            entry.terminating,
            evict,
        );
        ctx.spawn(
            status
                .into_actor(self)
                .map(move |status, act, ctx| act.apply(uid, generation, evict, kubelet_sync, status, ctx)),
        );
    }

    /// The deciding half of a sync, on the actor: store the status unless the pod is gone (a
    /// status stored now would outlive the pod); unless it is terminating, probe it and have the
    /// runtime converge — or, once its phase is terminal, stop probing it. A sync that found
    /// the pod past its active deadline (`evict`) fails it: the first such sync records the
    /// event and kills every container, none to be started again.
    fn apply(
        &mut self,
        uid: PodUid,
        generation: u64,
        evict: bool,
        kubelet_sync: bool,
        status: Option<PodStatus>,
        ctx: &mut Context<Self>,
    ) {
        let Some(entry) = self.entries.get_mut(&uid).filter(|e| e.generation == generation) else { return };
        let Some(status) = status else { return self.synced(uid, generation, None, ctx) };
        let pod = entry.pod.clone();
        let terminal = matches!(status.phase.as_deref(), Some(PHASE_SUCCEEDED | PHASE_FAILED));
        let started = started_containers(&status);
        let lifecycle = self.pipeline.feature_gates.enabled(Feature::ContainerLifecycleProber);
        let stored = lifecycle.then(|| status.clone());
        self.pipeline.set_pod_status(pod.clone(), status);
        if !entry.terminating {
            if evict && !std::mem::replace(&mut entry.deadline_exceeded, true) {
                // Upstream: the terminal phase ends the pod's sync, and its termination kills
                // every container with the pod's grace period. The runtime's pod kill also
                // stops all restarts, whatever the restart policy.
                console::print(Tone::Bad, &format!("{}: {MESSAGE_DEADLINE_EXCEEDED}", pod_ref(&pod)));
                self.pipeline.recorder.record(
                    &pod_reference(&pod),
                    EventType::Normal,
                    REASON_DEADLINE_EXCEEDED,
                    MESSAGE_DEADLINE_EXCEEDED,
                );
                let grace = kill_grace_period(&pod, "", None);
                self.runtime.do_send(KillPod { pod_uid: uid.clone(), grace });
            }
            if terminal || entry.finished {
                // The kubelet never syncs a terminal pod again: no workers, no SyncPod.
                if !std::mem::replace(&mut entry.finished, true) {
                    if let Some(timer) = entry.deadline_timer.take() {
                        ctx.cancel_future(timer);
                    }
                    self.pipeline.remove_pod(pod);
                }
            } else {
                self.pipeline.reconcile_pod(pod.clone());
                // ContainerLifecycleProber: the containers this status shows started or
                // stopped start or stop their probes (nothing with the gate off).
                if let Some(stored) = &stored {
                    self.pipeline.sync_container_probes(&pod, stored);
                }
                self.runtime.do_send(SyncPod { pod, started, kubelet_sync });
            }
        }
        let pipeline = self.pipeline.clone();
        let stored = {
            let uid = uid.clone();
            async move { pipeline.versioned_status(&uid).await.ok().flatten().map(|v| v.status) }
        };
        ctx.spawn(
            stored.into_actor(self).map(move |stored, act, ctx| act.synced(uid, generation, stored, ctx)),
        );
    }

    fn synced(
        &mut self,
        uid: PodUid,
        generation: u64,
        stored: Option<StoredStatus>,
        ctx: &mut Context<Self>,
    ) {
        let Some(entry) = self.entries.get_mut(&uid).filter(|e| e.generation == generation) else { return };
        entry.syncing = false;
        entry.next_resync = next_resync(self.config.resync_period);
        if let Some(decoded) = stored.as_ref().and_then(StoredStatus::decode_logged) {
            if entry.start_time.is_none() {
                entry.start_time = decoded.start_time.as_ref().map(|t| t.0);
            }
            let summary = Summary::of(&decoded);
            for line in describe_changes(entry.printed.as_ref(), &summary) {
                console::print(tone_of_transition(&line), &format!("{}: {line}", pod_ref(&entry.pod)));
            }
            entry.printed = Some(summary);
        }
        let dirty = std::mem::take(&mut entry.dirty);
        self.arm_deadline(&uid, ctx);
        if dirty {
            self.sync(uid, ctx);
        }
    }

    /// Syncs the pod when its active deadline passes, once its start time is known: the sync
    /// then fails it. A timer that fires early (tokio's sleeps last about two years at most, a
    /// deadline up to 68; the node's wall clock stepped back) finds the pod not yet past it,
    /// and its sync arms the next one. One that would fire late (the wall clock stepped
    /// forward, or the node suspended: the timer counts on tokio's clock) is overtaken by the
    /// housekeeping, which syncs every pod past its deadline by the wall clock.
    fn arm_deadline(&mut self, uid: &PodUid, ctx: &mut Context<Self>) {
        let now = self.pipeline.clock.now();
        let Some(entry) = self.entries.get_mut(uid) else { return };
        if entry.deadline_timer.is_some() || entry.terminating || entry.finished || entry.deadline_exceeded {
            return;
        }
        let Some(deadline) = active_deadline(&entry.pod, entry.start_time) else { return };
        let (uid, generation) = (uid.clone(), entry.generation);
        let timer = ctx.run_later(until(deadline, now), move |act, ctx| {
            let Some(entry) = act.entries.get_mut(&uid).filter(|e| e.generation == generation) else {
                return;
            };
            entry.deadline_timer = None;
            act.sync(uid, ctx);
        });
        entry.deadline_timer = Some(timer);
    }

    /// The kubelet's `SyncTerminatingPod` and `SyncTerminatedPod` for a pod whose manifest
    /// went away: stop liveness and startup, stop the containers, write the final status,
    /// stop probing and forget the pod.
    fn terminate(&mut self, uid: PodUid, why: manifests::Removal, ctx: &mut Context<Self>) {
        if let Some(entry) =
            self.entries.values_mut().find(|e| e.restart.as_ref().is_some_and(|r| r.uid() == Some(&*uid)))
        {
            // Removed again before the pod it waited for stopped: it never starts.
            entry.restart = None;
        }
        let Some(entry) = self.entries.get_mut(&uid).filter(|e| !e.terminating) else { return };
        entry.terminating = true;
        if let Some(timer) = entry.deadline_timer.take() {
            ctx.cancel_future(timer);
        }
        let generation = entry.generation;
        let pod = entry.pod.clone();
        console::print(Tone::Plain, &format!("{}: removed ({why}), stopping its containers", pod_ref(&pod)));
        self.pipeline.stop_liveness_and_startup(pod.clone());
        let grace = kill_grace_period(&pod, "", None);
        let kill = self.runtime.send(KillPod { pod_uid: uid.clone(), grace });
        ctx.spawn(kill.into_actor(self).map(move |_, act, ctx| act.finish_termination(uid, generation, ctx)));
    }

    /// Only for the entry that was terminated: a later one of the same UID is not this
    /// termination's to remove. Every message below is queued before the restarted pod's first
    /// sync sends any, so the runtime, the prober manager and the status manager see the old
    /// pod gone before the new one arrives.
    fn finish_termination(&mut self, uid: PodUid, generation: u64, ctx: &mut Context<Self>) {
        if self.entries.get(&uid).is_none_or(|e| e.generation != generation) {
            return;
        }
        let Some(entry) = self.entries.remove(&uid) else { return };
        self.pipeline.terminate_pod(entry.pod.clone());
        self.pipeline.remove_pod(entry.pod.clone());
        self.runtime.do_send(ForgetPod(uid.clone()));
        self.pods.remove(&uid);
        self.entries.shrink_after_removal();
        self.history.remove_pod(&uid);
        // Drops this pod's status too (it is no longer an entry): the status manager's
        // "finished" flag is sticky per UID and must not carry over to a restarted pod.
        self.pipeline.remove_orphaned_statuses(self.entries.keys().cloned().collect());
        console::print(Tone::Plain, &format!("{}: stopped", pod_ref(&entry.pod)));
        if let Some(Restart { pod, file }) = entry.restart {
            self.add(pod, &file, ctx);
        }
    }

    /// Liveness or startup failed: kill the container if it still runs that container ID.
    ///
    /// Read from the status the workers read (the one the failed probe was run against, or a
    /// newer one), not from this actor's own last read of the stored status, which can be older:
    /// a failure reported before that read caught up was dropped, and the worker, holding after
    /// a failure, never probed again. The runtime kills only that instance, not a newer one of
    /// the same name.
    fn kill_for_probe(&mut self, change: &ProbeResultChanged) {
        let Some(entry) = self.entries.get(&change.pod_uid) else { return };
        if entry.terminating {
            return;
        }
        let Some(status) = self.pipeline.views.probe_status(&change.pod_uid) else { return };
        let Some(container) = status.running(&change.container_id) else { return };
        let container_rules = self.pipeline.feature_gates.enabled(Feature::ContainerRestartRules);
        let message = probe_kill_message(&entry.pod, &container.name, change.kind, container_rules);
        let grace = kill_grace_period(&entry.pod, &container.name, Some(change.kind));
        console::print(Tone::Bad, &format!("{}: {message}", pod_ref(&entry.pod)));
        self.runtime.do_send(KillContainer {
            pod_uid: change.pod_uid.clone(),
            container: container.name.to_string(),
            container_id: Some(change.container_id.clone()),
            message,
            grace,
            restart: true,
        });
    }
}

impl Actor for StandaloneKubelet {
    type Context = Context<Self>;

    fn started(&mut self, ctx: &mut Self::Context) {
        self.rescan(ctx);
        ctx.run_interval(self.config.rescan_period, |act, ctx| act.rescan(ctx));
        ctx.run_interval(self.config.housekeeping_period, |act, ctx| {
            act.pipeline.cleanup_pods(act.entries.keys().cloned().collect());
            let now = Instant::now();
            let wall = act.pipeline.clock.now();
            // Past its deadline by the wall clock is due too, as upstream's sync loop asks its
            // deadline handler about every pod each second: the deadline's timer counts on
            // tokio's clock, which neither a step of the node's clock nor a suspend moves.
            let due: Vec<PodUid> = act
                .entries
                .iter()
                .filter(|(_, e)| e.next_resync <= now || e.deadline_passed(wall))
                .map(|(uid, _)| uid.clone())
                .collect();
            for uid in due {
                act.sync(uid, ctx);
            }
        });
    }
}

impl Handler<Rescan> for StandaloneKubelet {
    type Result = ();

    fn handle(&mut self, _msg: Rescan, ctx: &mut Self::Context) {
        self.rescan(ctx);
    }
}

impl Handler<RuntimeChanged> for StandaloneKubelet {
    type Result = ();

    fn handle(&mut self, msg: RuntimeChanged, ctx: &mut Self::Context) {
        self.sync(msg.pod_uid, ctx);
    }
}

impl Handler<ProbeResultChanged> for StandaloneKubelet {
    type Result = ();

    fn handle(&mut self, msg: ProbeResultChanged, ctx: &mut Self::Context) {
        // The kubelet's sync loop: liveness only matters when it failed; readiness and
        // startup changes regenerate the status.
        let failed = msg.result == ProbeResult::Failure;
        match msg.kind {
            ProbeKind::Liveness if !failed => return,
            ProbeKind::Liveness | ProbeKind::Startup if failed => self.kill_for_probe(&msg),
            _ => {}
        }
        if let Some(entry) = self.entries.get_mut(&msg.pod_uid) {
            entry.probe_changed = true;
        }
        self.sync(msg.pod_uid, ctx);
    }
}

impl Handler<ListPods> for StandaloneKubelet {
    type Result = MessageResult<ListPods>;

    fn handle(&mut self, _msg: ListPods, _ctx: &mut Self::Context) -> Self::Result {
        let mut pods: Vec<Arc<Pod>> = self.entries.values().map(|e| e.pod.clone()).collect();
        pods.sort_by_key(|p| pod_ref(p));
        MessageResult(pods)
    }
}

impl Handler<Shutdown> for StandaloneKubelet {
    type Result = ResponseActFuture<Self, ()>;

    fn handle(&mut self, _msg: Shutdown, ctx: &mut Self::Context) -> Self::Result {
        self.shutting_down = true;
        let mut kills = Vec::new();
        for (uid, entry) in &mut self.entries {
            entry.terminating = true;
            entry.restart = None;
            if let Some(timer) = entry.deadline_timer.take() {
                ctx.cancel_future(timer);
            }
            // As for a removed manifest: readiness goes on through the kill. Removing the pod
            // here made a failing readiness probe's container read ready until the agent exited.
            self.pipeline.stop_liveness_and_startup(entry.pod.clone());
            let grace = kill_grace_period(&entry.pod, "", None);
            kills.push(self.runtime.send(KillPod { pod_uid: uid.clone(), grace }));
        }
        Box::pin(futures::future::join_all(kills).into_actor(self).map(|_, _, _| ()))
    }
}

/// The gathering half of a sync (upstream `generateAPIPodStatus`): the runtime's container
/// states, the phase, `started` / `ready` from the prober, the kubelet's conditions. `evict`:
/// the pod is past its active deadline, so its phase is `Failed` with upstream's reason and
/// message whatever its containers say (before the prober and the conditions read it, as
/// upstream's deadline handler overrides it). `None` when the engine did not answer.
async fn generate_status(
    pod: Arc<Pod>,
    pipeline: Pipeline,
    runtime: Addr<ProcessRuntime>,
    terminating: bool,
    evict: bool,
) -> Option<PodStatus> {
    let uid = PodUid::of(&pod).unwrap_or_default();
    let spec = pod.spec.clone().unwrap_or_default();
    let runtime_status = runtime.send(GetRuntimeStatus(uid.clone())).await.ok().flatten();
    let (init, containers, in_runtime) =
        runtime_status.map(|s| (s.init_containers, s.containers, s.in_runtime)).unwrap_or_default();
    let initialized = has_any_regular_container_started(&spec, &containers);
    let container_rules = pipeline.feature_gates.enabled(Feature::ContainerRestartRules);
    // `RestartAllContainersOnContainerExits`, for a pod that could restart that way: whether it
    // is restarting all its containers now, from the runtime and the last stored status
    // (upstream's `oldPodStatus`), and the `AllContainersRestarting` condition.
    let restart_all_gate = pipeline.feature_gates.enabled(Feature::RestartAllContainersOnContainerExits);
    let could_restart_all = container_rules && restart_all_gate && all_containers_could_restart(&spec);
    // Under the gate every pod's last status is read: `Initialized` stays True once it was
    // (upstream reads the gate alone, not the pod's rules).
    let old = match restart_all_gate {
        true => pipeline.versioned_status(&uid).await.ok().flatten().and_then(|v| v.status.decode_logged()),
        false => None,
    };
    let in_runtime: Vec<InRuntime<'_>> =
        in_runtime.iter().map(|(name, exited_with)| InRuntime { name, exited_with: *exited_with }).collect();
    let restarting_all = could_restart_all && all_containers_restarting(&spec, &in_runtime, old.as_ref());
    let phase = if evict {
        PHASE_FAILED
    } else {
        pod_phase_restarting_all(&spec, &init, &containers, initialized, container_rules, restarting_all)
    };
    let status = PodStatus {
        phase: Some(phase.to_owned()),
        reason: evict.then(|| REASON_DEADLINE_EXCEEDED.to_owned()),
        message: evict.then(|| MESSAGE_DEADLINE_EXCEEDED.to_owned()),
        pod_ip: Some(POD_IP.to_owned()),
        pod_ips: Some(vec![PodIP { ip: POD_IP.to_owned() }]),
        host_ip: Some(POD_IP.to_owned()),
        host_ips: Some(vec![HostIP { ip: POD_IP.to_owned() }]),
        qos_class: Some("BestEffort".to_owned()),
        init_container_statuses: if spec.init_containers.as_ref().is_some_and(|i| !i.is_empty()) {
            Some(init)
        } else {
            None
        },
        container_statuses: Some(containers),
        ..Default::default()
    };
    let mut status = pipeline.update_pod_status(pod.clone(), status).await.ok()?;
    let finished = matches!(phase, PHASE_SUCCEEDED | PHASE_FAILED);
    if finished || terminating {
        let stored =
            pipeline.versioned_status(&uid).await.ok().flatten().and_then(|v| v.status.decode_logged());
        if finished {
            // Its probes stopped at its first finished sync while its containers may still
            // be killed: `started` and `ready` stay what they were.
            keep_started_and_ready_once_finished(&pod, &mut status, stored.as_ref());
        } else {
            // Liveness and startup have stopped: `started` stays what it was.
            keep_started_while_terminating(&pod, &mut status, stored.as_ref());
        }
    }
    generate_kubelet_conditions(&pod, &mut status);
    if restart_all_gate && let Some(conditions) = status.conditions.as_mut() {
        keep_initialized_once_initialized(conditions, old.as_ref());
    }
    if could_restart_all {
        let condition = generate_all_containers_restarting_condition(&spec, &in_runtime, old.as_ref(), phase);
        status.conditions.get_or_insert_default().push(condition);
    }
    Some(status)
}

/// The IDs of the containers the status says have started: what the status manager will hold
/// once the status is stored, and what lets the runtime go past a sidecar.
fn started_containers(status: &PodStatus) -> HashSet<String> {
    status
        .init_container_statuses
        .iter()
        .flatten()
        .chain(status.container_statuses.iter().flatten())
        .filter(|c| c.started == Some(true))
        .filter_map(|c| c.container_id.clone())
        .collect()
}

/// Starts the standalone kubelet and subscribes it to runtime and probe result changes.
pub fn start_kubelet(kubelet: StandaloneKubelet) -> Addr<StandaloneKubelet> {
    let runtime = kubelet.runtime.clone();
    let pipeline = kubelet.pipeline.clone();
    let addr = kubelet.start();
    runtime.do_send(super::runtime::SubscribeRuntime(addr.clone().recipient()));
    pipeline.subscribe_results(addr.clone().recipient());
    addr
}

#[cfg(test)]
mod tests;
