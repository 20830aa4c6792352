//! What changed between two scans of the manifest folder, and the static pod UID that makes a
//! changed manifest a new pod (`pkg/kubelet/config/common.go`'s hash).

use std::collections::{BTreeMap, HashSet};
use std::io;
use std::path::{Path, PathBuf};

use k8s_openapi::api::core::v1::Pod;
use probelet_actors::fnv::Fnv1a128;
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
    /// Files that exist but could not be read, with why; their pods are not in `pods`.
    pub unreadable_files: BTreeMap<PathBuf, io::ErrorKind>,
}

impl Snapshot {
    /// This scan, with what it could not read taken from `previous`: every pod of `previous`
    /// when the folder could not be listed, else the pods `previous` had from each unreadable
    /// file. A pod that cannot be read is still running; only a file that is gone, or that was
    /// read and is wrong, takes its pods away.
    pub fn keeping_unreadable(mut self, previous: &Snapshot) -> Snapshot {
        if self.folder_unreadable.is_some() {
            self.pods = previous.pods.clone();
            return self;
        }
        let kept = previous.pods.iter().filter(|(_, p)| self.unreadable_files.contains_key(&p.file));
        let kept: Vec<(String, LoadedPod)> = kept.map(|(uid, p)| (uid.clone(), p.clone())).collect();
        // A kept pod whose namespace/name a readable file now claims gives way to it.
        let names: HashSet<(String, String)> =
            self.pods.values().map(|p| (p.namespace().to_owned(), p.name().to_owned())).collect();
        for (uid, pod) in kept {
            if !names.contains(&(pod.namespace().to_owned(), pod.name().to_owned())) {
                self.pods.insert(uid, pod);
            }
        }
        self
    }
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
    let mut loaded = load_cached(dir, node_name, gates, cache);
    if gates.enabled(Feature::MutableContainerProbes) {
        for loaded in &mut loaded.pods {
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
    Snapshot {
        pods: loaded.pods.into_iter().map(|p| (p.uid().to_owned(), p)).collect(),
        errors: loaded.errors,
        folder_unreadable: loaded.folder_unreadable,
        unreadable_files: loaded.unreadable_files,
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
