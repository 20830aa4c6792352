//! What changed between two scans of the manifest folder, which file's pod runs when several
//! give one namespace/name, and the static pod UID that makes a changed manifest a new pod
//! (`pkg/kubelet/config/common.go`'s hash).
//!
//! One pod per namespace/name: the pod already running keeps it. A file that comes to give the
//! name of a running pod from another file is refused (`metadata.name: Duplicate value`) for as
//! long as the running pod's file gives that name, whatever the files' order; the running
//! file's own edits replace its pod as any edit does. At the agent's start, the pod the
//! previous agent ran under a name (named in the state directory, [`Snapshot::ran_before`])
//! keeps it, and so does its file if edited since. When nothing runs under the
//! name (at start, or once the running file is gone or stops giving it), the first in file-name
//! order wins. Upstream's file source lets the newest or the last file take the name over, stopping
//! the running pod; the difference is deliberate (docs/reliability.md, "A new manifest never
//! displaces a running pod").

use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};
use std::io;
use std::path::{Path, PathBuf};

use k8s_openapi::api::core::v1::Pod;
use probelet_actors::fnv::Fnv1a128;
use probelet_actors::gofmt::go_quote;
use probelet_actors::vocabulary::PodUid;
use probelet_actors::{Feature, FeatureGates};

use super::{
    CONFIG_HASH_ANNOTATION, CONFIG_SOURCE_ANNOTATION, LoadedPod, ManifestError, ParseCache, load_cached,
    only_conditions,
};

// === snapshot and diff ===

/// What the folder holds at one scan.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Snapshot {
    /// Loaded pods keyed by their UID.
    pub pods: BTreeMap<String, LoadedPod>,
    /// Files and documents that gave no pod.
    pub errors: Vec<ManifestError>,
    /// Listing the folder failed with this error (not "not found"): `pods` is not what the
    /// folder holds. [`Snapshot::keeping_unreadable`] puts the last good set back.
    pub folder_unreadable: Option<io::ErrorKind>,
    /// Files whose pods this scan kept although it took none from them, with why: they could
    /// not be read, or are held, caught empty or half written
    /// ([`kept_for_now`](super::kept_for_now)). Their pods are not in `pods`.
    pub unreadable_files: BTreeMap<PathBuf, io::ErrorKind>,
    /// The pods that ran under the previous agent (named in its state directory): in the
    /// agent's first snapshot, where nothing runs yet, so that its first scan gives each
    /// namespace/name back to the file that ran it before file order does. A scan's own
    /// snapshot carries on only the names whose file it held or could not read, which wait for
    /// that file, with the UIDs they ran under: the agent records them with its running pods
    /// for as long as they wait.
    pub ran_before: RanBefore,
    /// The fields of the files read that a Pod does not have: their pods run without them, as
    /// the kubelet runs them (docs/lint.md, "`unknown-field`").
    pub unknown_fields: Vec<super::UnknownFields>,
    /// The files read with a key written twice in a mapping: the last value is read, as the
    /// kubelet reads it (docs/lint.md, "What it reads").
    pub duplicate_keys: Vec<super::DuplicateKey>,
    /// The files this scan read with new contents (parsed afresh: edited since the last scan,
    /// or read for the first time). What was told about such a file's contents is told again if
    /// it still holds (the kubelet's reporting loop, docs/reliability.md, "A manifest saved
    /// still broken is told again").
    pub changed_files: BTreeSet<PathBuf>,
}

/// What the previous agent on the folder ran, as its state directory tells it
/// ([`crate::host::runtime::pods_that_ran`]).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RanBefore {
    /// The pods' UIDs (a crash's container records name these only).
    pub uids: std::collections::BTreeSet<String>,
    /// The file each namespace/name ran from, where the state directory says: a manifest
    /// edited while no agent ran is a new pod (a new UID) of the file that ran its name.
    pub files: BTreeMap<(String, String), PathBuf>,
    /// The UID each namespace/name of `files` ran under: a name whose file is held is written
    /// to the state directory again with it, so that an agent started during the hold finds
    /// the name, and the pod, as the one before found them
    /// ([`ContainerGroups::write_running_pods`](crate::host::runtime::ContainerGroups::write_running_pods)).
    pub uid_by_name: BTreeMap<(String, String), String>,
}

impl Snapshot {
    /// This scan, with what it could not read taken from `previous`: every pod of `previous`
    /// when the folder could not be listed, else the pods `previous` had from each unreadable
    /// file. A pod that cannot be read is still running; only a file that is gone, or that was
    /// read and is wrong, takes its pods away.
    ///
    /// A kept pod keeps its namespace/name too: a readable file's pod of that name is refused
    /// as a duplicate. ([`rescan`] already refuses it; a scan that was not told what runs may
    /// not have.)
    pub fn keeping_unreadable(mut self, previous: &Snapshot) -> Snapshot {
        if self.folder_unreadable.is_some() {
            self.pods = previous.pods.clone();
            return self;
        }
        let kept = previous.pods.iter().filter(|(_, p)| self.unreadable_files.contains_key(&p.file));
        let kept: Vec<(String, LoadedPod)> = kept.map(|(uid, p)| (uid.clone(), p.clone())).collect();
        let kept_names: HashMap<FullName, &LoadedPod> = kept.iter().map(|(_, p)| (full_name(p), p)).collect();
        let claimed: Vec<String> = self
            .pods
            .iter()
            .filter(|(_, p)| kept_names.contains_key(&full_name(p)))
            .map(|(uid, _)| uid.clone())
            .collect();
        for uid in claimed {
            if let Some(refused) = self.pods.remove(&uid)
                && let Some(keeper) = kept_names.get(&full_name(&refused))
            {
                self.errors.push(duplicate(&refused, keeper));
            }
        }
        self.pods.extend(kept);
        self
    }
}

// === one pod per namespace/name ===

/// A pod's namespace and name (upstream's "full name"), the key no two running pods share.
type FullName = (String, String);

fn full_name(pod: &LoadedPod) -> FullName {
    (pod.namespace().to_owned(), pod.name().to_owned())
}

/// Of `candidates` (a scan's pods in file-name order, each file's in document order), one per
/// namespace/name, with an error for each pod refused. The file that gives a pod of `running`
/// keeps its name (its first document of that name, should it hold several); a pod of
/// `running` whose file is in `unreadable` keeps it too, and every candidate of that name is
/// refused ([`Snapshot::keeping_unreadable`] keeps the running pod). A name nothing runs
/// under, or whose running file no longer gives it, goes to the first candidate. The chosen
/// pods come in candidate order, and so do the errors.
pub(super) fn one_per_name(
    candidates: Vec<LoadedPod>,
    running: &Snapshot,
    unreadable: &BTreeMap<PathBuf, io::ErrorKind>,
) -> (Vec<LoadedPod>, Vec<ManifestError>) {
    let ran_before = &running.ran_before;
    let running: HashMap<FullName, &LoadedPod> = running.pods.values().map(|p| (full_name(p), p)).collect();
    // Which candidate (by index) keeps each name: the running file's first pod of it, wherever
    // the file comes in the order; else the first pod of it.
    let mut keeper: HashMap<FullName, usize> = HashMap::new();
    for (index, pod) in candidates.iter().enumerate() {
        let name = full_name(pod);
        if running.get(&name).is_some_and(|r| r.file == pod.file) {
            keeper.entry(name).or_insert(index);
        }
    }
    // A name nothing runs under, at the agent's start: the very pod the previous agent ran
    // (same file, same contents, so same UID), if it is still there; else the file that ran
    // the name, edited since.
    for (index, pod) in candidates.iter().enumerate() {
        if ran_before.uids.contains(pod.uid()) {
            keeper.entry(full_name(pod)).or_insert(index);
        }
    }
    for (index, pod) in candidates.iter().enumerate() {
        let name = full_name(pod);
        if ran_before.files.get(&name).is_some_and(|file| *file == pod.file) {
            keeper.entry(name).or_insert(index);
        }
    }
    for (index, pod) in candidates.iter().enumerate() {
        keeper.entry(full_name(pod)).or_insert(index);
    }
    // The file that ran a name before the agent started, caught empty, half written or
    // unreadable now: the name waits for it, as it would for a running pod's.
    let waiting: HashMap<&FullName, &PathBuf> =
        ran_before.files.iter().filter(|(_, file)| unreadable.contains_key(*file)).collect();
    let refusals: Vec<Option<ManifestError>> = candidates
        .iter()
        .enumerate()
        .map(|(index, pod)| {
            let name = full_name(pod);
            if let Some(file) = waiting.get(&name).filter(|file| ***file != pod.file) {
                return Some(waits_for(pod, file));
            }
            match (running.get(&name).filter(|r| unreadable.contains_key(&r.file)), keeper.get(&name)) {
                (Some(held), _) => Some(duplicate(pod, held)),
                (None, Some(&chosen)) if chosen != index => Some(duplicate(pod, &candidates[chosen])),
                _ => None,
            }
        })
        .collect();
    let mut pods = Vec::new();
    let mut errors = Vec::new();
    for (pod, refusal) in candidates.into_iter().zip(refusals) {
        match refusal {
            Some(error) => errors.push(error),
            None => pods.push(pod),
        }
    }
    (pods, errors)
}

/// Why `refused` is not started: `keeper` has its namespace/name. Named by the field, as
/// validation errors are, with the file (and document) of both; the same words whether `keeper`
/// runs already or starts in this scan, so that a refusal is told once while it lasts.
fn duplicate(refused: &LoadedPod, keeper: &LoadedPod) -> ManifestError {
    let mut place = keeper.file.display().to_string();
    if let Some(n) = keeper.document {
        place = format!("{place}, document {n}");
    }
    let mut reason = format!(
        "metadata.name: Duplicate value: {}: pod {}/{} runs from {place}; this one is not started while it does",
        go_quote(refused.name()),
        refused.namespace(),
        refused.name(),
    );
    if let Some(n) = refused.document {
        reason = format!("document {n}: {reason}");
    }
    ManifestError { file: refused.file.clone(), reason }
}

/// Why `refused` is not started: the previous agent ran its namespace/name from `file`, which
/// this agent cannot load yet (caught empty or half written, or unreadable).
fn waits_for(refused: &LoadedPod, file: &Path) -> ManifestError {
    let mut reason = format!(
        "metadata.name: Duplicate value: {}: pod {}/{} ran from {} before this agent started; this one is not started while that file is held",
        go_quote(refused.name()),
        refused.namespace(),
        refused.name(),
        file.display(),
    );
    if let Some(n) = refused.document {
        reason = format!("document {n}: {reason}");
    }
    ManifestError { file: refused.file.clone(), reason }
}

/// Scans the folder (see [`load_dir`](super::load_dir)). Follow it with [`Snapshot::keeping_unreadable`] to keep
/// the pods of what could not be read.
pub fn scan(dir: &Path, node_name: &str) -> Snapshot {
    scan_with(dir, node_name, &FeatureGates::default())
}

/// [`scan`] under `gates`: pods are validated under them, and with `MutableContainerProbes`
/// each pod's UID is [`static_pod_uid_ignoring_probes`], so a manifest whose probes alone
/// changed keeps its pod and [`diff`] reports it [`SourceChange::Updated`] instead of removed
/// and added.
pub fn scan_with(dir: &Path, node_name: &str, gates: &FeatureGates) -> Snapshot {
    scan_cached(dir, node_name, gates, &mut ParseCache::default())
}

/// [`scan_with`], parsing only the files whose contents changed since `cache` last saw them.
pub fn scan_cached(dir: &Path, node_name: &str, gates: &FeatureGates, cache: &mut ParseCache) -> Snapshot {
    scan_running(dir, node_name, gates, cache, &Snapshot::default())
}

/// The agent's next snapshot, `running` being its last: [`scan_cached`] where each
/// namespace/name of a running pod stays with the file that runs it (a newcomer of that name is
/// refused, see the module doc), then [`Snapshot::keeping_unreadable`].
pub fn rescan(
    dir: &Path,
    node_name: &str,
    gates: &FeatureGates,
    cache: &mut ParseCache,
    running: &Snapshot,
) -> Snapshot {
    scan_running(dir, node_name, gates, cache, running).keeping_unreadable(running)
}

fn scan_running(
    dir: &Path,
    node_name: &str,
    gates: &FeatureGates,
    cache: &mut ParseCache,
    running: &Snapshot,
) -> Snapshot {
    cache.remember_ran_before(&running.ran_before);
    let mut loaded = load_cached(dir, node_name, gates, cache);
    // The UIDs first: `one_per_name` knows a pod that ran before by its UID.
    if gates.enabled(Feature::MutableContainerProbes) {
        for loaded in &mut loaded.candidates {
            let uid = static_pod_uid_ignoring_probes(node_name, &loaded.file, &loaded.pod);
            loaded
                .pod
                .metadata
                .annotations
                .get_or_insert_with(BTreeMap::new)
                .insert(CONFIG_HASH_ANNOTATION.into(), uid.clone());
            loaded.pod.metadata.uid = Some(uid);
        }
    }
    let (pods, duplicates) = one_per_name(loaded.candidates, running, &loaded.unreadable_files);
    loaded.errors.extend(duplicates);
    // Of a pod refused for its name, as of one refused by validation, the refusal alone is
    // said: the fields it would have run without do not matter while it does not run.
    let runs: HashSet<(&Path, Option<usize>)> = pods.iter().map(|p| (p.file.as_path(), p.document)).collect();
    loaded.unknown_fields.retain(|unknown| runs.contains(&(unknown.file.as_path(), unknown.document)));
    // A name whose file of before is held or cannot be read still waits for that file: said
    // again to the next scan, which has no other way to know, and with the UID it ran under, to
    // the state directory's record of what runs (an agent started during the hold waits too).
    let files: BTreeMap<FullName, PathBuf> = running
        .ran_before
        .files
        .iter()
        .filter(|(_, file)| loaded.unreadable_files.contains_key(*file))
        .map(|(name, file)| (name.clone(), file.clone()))
        .collect();
    let uid_by_name: BTreeMap<FullName, String> = running
        .ran_before
        .uid_by_name
        .iter()
        .filter(|(name, _)| files.contains_key(*name))
        .map(|(name, uid)| (name.clone(), uid.clone()))
        .collect();
    let ran_before = RanBefore { uids: uid_by_name.values().cloned().collect(), files, uid_by_name };
    Snapshot {
        pods: pods.into_iter().map(|p| (p.uid().to_owned(), p)).collect(),
        errors: loaded.errors,
        folder_unreadable: loaded.folder_unreadable,
        unreadable_files: loaded.unreadable_files,
        ran_before,
        unknown_fields: loaded.unknown_fields,
        duplicate_keys: loaded.duplicate_keys,
        changed_files: loaded.changed_files,
    }
}

/// One change of the folder's pods.
// A scan yields a handful of changes that are consumed at once; boxing the pod would only make
// matching on them clumsier.
#[allow(clippy::large_enum_variant)]
#[derive(Debug, Clone, PartialEq)]
pub enum SourceChange {
    /// A pod to start.
    Added(LoadedPod),
    /// A pod to stop: its file is gone, no longer loads, or changed (the UID changes with it).
    Removed { uid: PodUid, file: PathBuf, namespace: String, name: String },
    /// A running pod whose manifest changed and kept its UID: only its probes changed (only
    /// [`scan_with`]'s in-place UIDs leave them out). Its probes are updated in place.
    Updated(LoadedPod),
}

/// What changed from `old` to `new`: removals first (so a changed pod's old UID goes before its
/// new one arrives under the same name), then additions, then pods updated under the same UID,
/// each in file, namespace, name order.
pub fn diff(old: &Snapshot, new: &Snapshot) -> Vec<SourceChange> {
    let order = |p: &LoadedPod| (p.file.clone(), p.namespace().to_owned(), p.name().to_owned());
    let mut removed: Vec<&LoadedPod> =
        old.pods.iter().filter(|(uid, _)| !new.pods.contains_key(*uid)).map(|(_, p)| p).collect();
    let mut added: Vec<&LoadedPod> =
        new.pods.iter().filter(|(uid, _)| !old.pods.contains_key(*uid)).map(|(_, p)| p).collect();
    let mut updated: Vec<&LoadedPod> = new
        .pods
        .iter()
        .filter(|(uid, p)| old.pods.get(*uid).is_some_and(|o| o.pod != p.pod))
        .map(|(_, p)| p)
        .collect();
    removed.sort_by_key(|p| order(p));
    added.sort_by_key(|p| order(p));
    updated.sort_by_key(|p| order(p));
    removed
        .into_iter()
        .map(|p| SourceChange::Removed {
            uid: p.uid().into(),
            file: p.file.clone(),
            namespace: p.namespace().to_owned(),
            name: p.name().to_owned(),
        })
        .chain(added.into_iter().map(|p| SourceChange::Added(p.clone())))
        .chain(updated.into_iter().map(|p| SourceChange::Updated(p.clone())))
        .collect()
}

/// Why a running pod is no longer among the folder's pods ([`SourceChange::Removed`]), as the
/// agent says when it stops it: an operator who sees a pod stop should not have to guess.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Removal {
    /// Its file gives a pod of its namespace/name that is another pod (a new UID).
    Changed,
    /// Its file is gone.
    Deleted,
    /// Its file reads empty ([`EMPTY`](super::EMPTY)).
    Empty,
    /// Its file, or the pod's document, gives an error (it does not parse or validate, or is
    /// not a regular file, or is too large).
    DoesNotLoad,
    /// Its file could not be read for longer than it is held
    /// ([`UNREADABLE_FOR_NOW`](super::UNREADABLE_FOR_NOW)).
    Unreadable,
    /// Its file loads and gives other pods only.
    NotGiven,
}

impl std::fmt::Display for Removal {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Removal::Changed => "file changed",
            Removal::Deleted => "file deleted",
            Removal::Empty => "file empty",
            Removal::DoesNotLoad => "file does not load",
            Removal::Unreadable => "file unreadable",
            Removal::NotGiven => "no longer in its file",
        })
    }
}

/// Why the pod `namespace`/`name` of `file` is not in `new`; `file_exists` is whether `file` is
/// still there ([`leads_to_a_file`](super::leads_to_a_file): a dangling link is not).
pub fn removal(new: &Snapshot, file: &Path, namespace: &str, name: &str, file_exists: bool) -> Removal {
    let is_this = |p: &LoadedPod| p.file == file && p.namespace() == namespace && p.name() == name;
    if new.pods.values().any(is_this) {
        Removal::Changed
    } else if !file_exists {
        Removal::Deleted
    } else if new.errors.iter().any(|e| e.file == file && e.reason == super::EMPTY) {
        Removal::Empty
    } else if new.errors.iter().any(|e| e.file == file && e.reason.starts_with(super::CANNOT_READ)) {
        Removal::Unreadable
    } else if new.errors.iter().any(|e| e.file == file) {
        Removal::DoesNotLoad
    } else {
        Removal::NotGiven
    }
}

// === UID ===

/// The static pod UID. Like the kubelet's (an MD5 of the pod, the host and the file), it hashes
/// the node name, the file path and the pod's canonical JSON, so a changed manifest gives a new
/// UID. The hash is 128-bit FNV-1a, stable across runs and platforms for the same inputs, shown as
/// a UUID (version 8, RFC 9562 variant). The fields this module sets after loading (`uid`, the
/// source annotations, `spec.nodeName`, `status` other than conditions) are left out, so the UID
/// of a loaded pod computes to itself.
pub fn static_pod_uid(node_name: &str, file: &Path, pod: &Pod) -> String {
    let mut pod = pod.clone();
    pod.metadata.uid = None;
    if let Some(annotations) = pod.metadata.annotations.as_mut() {
        annotations.remove(CONFIG_SOURCE_ANNOTATION);
        annotations.remove(CONFIG_HASH_ANNOTATION);
        if annotations.is_empty() {
            pod.metadata.annotations = None;
        }
    }
    if let Some(spec) = pod.spec.as_mut() {
        spec.node_name = None;
    }
    pod.status = only_conditions(pod.status.take());
    // A Pod always serialises (its maps have string keys); the fallback only avoids a panic path.
    let json = serde_json::to_vec(&pod).unwrap_or_default();

    let mut hash = Fnv1a128::new();
    hash.write(b"host:");
    hash.write(node_name.as_bytes());
    hash.write(b"\0file:");
    hash.write(file.as_os_str().as_encoded_bytes());
    hash.write(b"\0pod:");
    hash.write(&json);
    let mut bytes = hash.finish().to_be_bytes();
    bytes[6] = (bytes[6] & 0x0f) | 0x80;
    bytes[8] = (bytes[8] & 0x3f) | 0x80;
    let hex: String = bytes.iter().map(|b| format!("{b:02x}")).collect();
    format!("{}-{}-{}-{}-{}", &hex[0..8], &hex[8..12], &hex[12..16], &hex[16..20], &hex[20..32])
}

/// [`static_pod_uid`] of the pod without its containers' and init containers' probes: the UID
/// a pod keeps when only its probes change (`MutableContainerProbes`).
pub fn static_pod_uid_ignoring_probes(node_name: &str, file: &Path, pod: &Pod) -> String {
    let mut pod = pod.clone();
    if let Some(spec) = pod.spec.as_mut() {
        for container in spec.containers.iter_mut().chain(spec.init_containers.iter_mut().flatten()) {
            container.liveness_probe = None;
            container.readiness_probe = None;
            container.startup_probe = None;
        }
    }
    static_pod_uid(node_name, file, &pod)
}

#[cfg(test)]
mod tests {
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

    use super::*;

    /// A candidate pod: `namespace/name` from `file`, in `document` of a file of several.
    fn pod(file: &str, document: Option<usize>, namespace: &str, name: &str) -> LoadedPod {
        let metadata = ObjectMeta {
            name: Some(name.into()),
            namespace: Some(namespace.into()),
            uid: Some(format!("{file}#{document:?}/{namespace}/{name}")),
            ..ObjectMeta::default()
        };
        LoadedPod { file: PathBuf::from(file), document, pod: Pod { metadata, ..Pod::default() } }
    }

    fn running(pods: &[LoadedPod]) -> Snapshot {
        Snapshot {
            pods: pods.iter().map(|p| (p.uid().to_owned(), p.clone())).collect(),
            ..Snapshot::default()
        }
    }

    /// The agent says why it stops a pod: its file changed, was deleted, reads empty, does not
    /// load, cannot be read (past its hold), or no longer gives it. It said only `removed`
    /// before.
    #[test]
    fn a_removal_says_why() {
        let error =
            |file: &str, reason: &str| ManifestError { file: PathBuf::from(file), reason: reason.into() };
        let mut new =
            running(&[pod("a.yaml", Some(1), "default", "web"), pod("b.yaml", None, "default", "other")]);
        new.errors = vec![
            error("c.yaml", super::super::EMPTY),
            error("d.yaml", "invalid YAML: …"),
            error("f.yaml", "cannot read file: Permission denied (os error 13)"),
        ];
        let why =
            |file: &str, exists: bool| removal(&new, Path::new(file), "default", "web", exists).to_string();
        assert_eq!(why("a.yaml", true), "file changed");
        assert_eq!(why("b.yaml", true), "no longer in its file");
        assert_eq!(why("c.yaml", true), "file empty");
        assert_eq!(why("d.yaml", true), "file does not load");
        assert_eq!(why("e.yaml", false), "file deleted");
        assert_eq!(why("f.yaml", true), "file unreadable");
        assert_eq!(removal(&new, Path::new("a.yaml"), "kube-system", "web", true), Removal::NotGiven);
    }

    /// Where each chosen pod came from, and which files were refused.
    fn places(chosen: &[LoadedPod], errors: &[ManifestError]) -> (Vec<String>, Vec<String>) {
        let place = |p: &LoadedPod| match p.document {
            Some(n) => format!("{}#{n}", p.file.display()),
            None => p.file.display().to_string(),
        };
        (chosen.iter().map(place).collect(), errors.iter().map(|e| e.file.display().to_string()).collect())
    }

    #[test]
    fn one_pod_per_name_goes_to_the_running_file_else_the_first() {
        let web_a = pod("a.yaml", None, "default", "web");
        let web_b = pod("b.yaml", None, "default", "web");
        let web_c2 = pod("c.yaml", Some(2), "default", "web");
        let web_c3 = pod("c.yaml", Some(3), "default", "web");
        let other_ns = pod("d.yaml", None, "other", "web");
        /// What runs, the scan's candidates, and where the chosen and the refused come from.
        struct Case {
            name: &'static str,
            running: Vec<LoadedPod>,
            candidates: Vec<LoadedPod>,
            chosen: Vec<&'static str>,
            refused: Vec<&'static str>,
        }
        let cases = [
            Case {
                name: "nothing runs: file order",
                running: vec![],
                candidates: vec![web_a.clone(), web_b.clone()],
                chosen: vec!["a.yaml"],
                refused: vec!["b.yaml"],
            },
            Case {
                name: "the running file comes last",
                running: vec![web_b.clone()],
                candidates: vec![web_a.clone(), web_b.clone()],
                chosen: vec!["b.yaml"],
                refused: vec!["a.yaml"],
            },
            Case {
                name: "the running file's first document of the name, whatever document ran",
                running: vec![web_c3.clone()],
                candidates: vec![web_a.clone(), web_c2.clone(), web_c3.clone()],
                chosen: vec!["c.yaml#2"],
                refused: vec!["a.yaml", "c.yaml"],
            },
            Case {
                name: "the running file gives it no more",
                running: vec![web_c2.clone()],
                candidates: vec![web_b.clone(), web_a.clone()],
                chosen: vec!["b.yaml"],
                refused: vec!["a.yaml"],
            },
            Case {
                name: "another namespace is another name",
                running: vec![web_b.clone()],
                candidates: vec![web_a.clone(), other_ns.clone()],
                chosen: vec!["a.yaml", "d.yaml"],
                refused: vec![],
            },
        ];
        for case in cases {
            let (chosen, errors) = one_per_name(case.candidates, &running(&case.running), &BTreeMap::new());
            let strings = |v: &[&str]| v.iter().map(|s| s.to_string()).collect::<Vec<_>>();
            assert_eq!(
                places(&chosen, &errors),
                (strings(&case.chosen), strings(&case.refused)),
                "case {}",
                case.name
            );
        }
    }

    /// At the agent's start nothing runs: the pod the previous agent ran (by its UID, named in
    /// the state directory) keeps its name before file order does; a name none of them
    /// had goes by file order.
    #[test]
    fn at_start_the_pod_that_ran_before_keeps_its_name() {
        let (web_a, web_b) = (pod("a.yaml", None, "default", "web"), pod("b.yaml", None, "default", "web"));
        let (api_c, api_d) = (pod("c.yaml", None, "default", "api"), pod("d.yaml", None, "default", "api"));
        let ran_before = RanBefore { uids: [web_b.uid().to_owned()].into(), ..RanBefore::default() };
        let start = Snapshot { ran_before, ..Snapshot::default() };
        let candidates = vec![web_a, web_b, api_c, api_d];
        let (chosen, errors) = one_per_name(candidates, &start, &BTreeMap::new());
        assert_eq!(
            places(&chosen, &errors),
            (vec!["b.yaml".to_owned(), "c.yaml".to_owned()], vec!["a.yaml".to_owned(), "d.yaml".to_owned()])
        );
    }

    /// A manifest edited while no agent ran gives a new UID: its file, named in the state
    /// directory as running the name, keeps it before file order does. File order decided
    /// before. The very pod that ran still comes first.
    #[test]
    fn at_start_the_file_that_ran_a_name_keeps_it_when_edited_since() {
        let (web_a, web_b) = (pod("a.yaml", None, "default", "web"), pod("b.yaml", None, "default", "web"));
        let (api_c, api_d) = (pod("c.yaml", None, "default", "api"), pod("d.yaml", None, "default", "api"));
        let named = |name: &str, file: &str| (("default".to_owned(), name.to_owned()), PathBuf::from(file));
        let ran_before = RanBefore {
            uids: [api_c.uid().to_owned()].into(),
            files: [named("web", "b.yaml"), named("api", "d.yaml")].into(),
            ..RanBefore::default()
        };
        let start = Snapshot { ran_before, ..Snapshot::default() };
        let (chosen, errors) = one_per_name(vec![web_a, web_b, api_c, api_d], &start, &BTreeMap::new());
        assert_eq!(
            places(&chosen, &errors),
            (vec!["b.yaml".to_owned(), "c.yaml".to_owned()], vec!["a.yaml".to_owned(), "d.yaml".to_owned()])
        );
    }

    /// A running pod whose file cannot be read keeps its name: every readable pod of it is
    /// refused, and [`Snapshot::keeping_unreadable`] keeps the running one.
    #[test]
    fn a_running_pod_whose_file_cannot_be_read_keeps_its_name() {
        let held = pod("b.yaml", Some(1), "default", "web");
        let unreadable = BTreeMap::from([(PathBuf::from("b.yaml"), io::ErrorKind::PermissionDenied)]);
        let candidates = vec![pod("a.yaml", None, "default", "web"), pod("c.yaml", None, "default", "api")];
        let (chosen, errors) = one_per_name(candidates, &running(&[held]), &unreadable);
        assert_eq!(places(&chosen, &errors), (vec!["c.yaml".to_owned()], vec!["a.yaml".to_owned()]));
        assert_eq!(
            errors[0].reason,
            "metadata.name: Duplicate value: \"web\": pod default/web runs from b.yaml, document 1; this one is not started while it does"
        );
    }
}
