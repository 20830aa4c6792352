//! Pod manifests from a folder: the standalone agent's pod source, the counterpart of the kubelet's
//! static pods (`pkg/kubelet/config/file.go` and `common.go`). It owns reading the folder, decoding
//! YAML and JSON, the API server's defaulting (`pkg/apis/core/v1/defaults.go`) and validation
//! (`pkg/apis/core/validation/validation.go`) of the fields the agent relies on, the static pod UID,
//! and what changed between two scans of the folder.
//!
//! What a loaded pod looks like:
//! * defaults applied ([`apply_defaults`]) and validated ([`validate`]), as the kubelet does for
//!   static pods through `ValidatePodCreate`;
//! * `metadata.uid` is [`static_pod_uid`], a hash of the node name, the file path and the manifest.
//!   Unlike the kubelet, a `uid` written in the manifest is ignored: the UID must change with the
//!   content so that a changed manifest replaces the pod;
//! * annotations `kubernetes.io/config.source: file` and `kubernetes.io/config.hash: <uid>`;
//! * `spec.nodeName` is the agent's node name;
//! * `status` is cleared except `status.conditions`: conditions written in the manifest are kept so
//!   a user can declare the value of a readiness-gate condition (nothing else would set it in
//!   standalone mode). The kubelet also sets `status.phase: Pending`; here the phase is left to the
//!   status machinery.
//!
//! Unlike the kubelet, a file may hold several YAML documents (`---`), each one pod; a bad document
//! is reported and the file's other documents still load. A file that does not parse at all loads
//! nothing, so while it is broken its pods are gone (as with the kubelet). Type errors name the
//! field path as well as the line and column (`spec.containers[0].readinessProbe.periodSeconds:
//! invalid i32 at line 14, column 88`), like the validation errors.
//!
//! A folder or file that cannot be *read* is not a folder without pods: when listing the folder
//! fails for any reason but "does not exist" (say `EMFILE` while the node is short of file
//! descriptors), [`Snapshot::keeping_unreadable`] keeps the last good pod set, as the kubelet's
//! file source does (it sends no update when the listing fails). A single file that cannot be
//! read for the same kind of reason keeps the pods it last gave; the kubelet drops those, which
//! would restart every container of a pod whose file could not be opened for a moment. A folder
//! that does not exist means no pods, as upstream.
//!
//! Manifests should be written atomically (write a temporary file beside them, then rename it
//! over the manifest): a scan that catches a half-written file sees a parse error and stops that
//! file's pods until the next scan. Hidden files (`.name.yaml`) are skipped, so a temporary file
//! whose name starts with a dot is never read.

use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};
use std::fs::{self, File};
use std::io::{self, Read};
use std::path::{Path, PathBuf};

use k8s_openapi::api::core::v1::{Container, ContainerPort, Pod, PodSpec, PodStatus, Probe};
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use probelet_actors::fnv::Fnv1a128;
use probelet_actors::gofmt::go_quote;
use probelet_actors::prober::timing::{PROBE_TIMING_ANNOTATION, probe_timings};
use probelet_actors::vocabulary::PodUid;
use serde_json::Value;

/// The largest manifest file read, in bytes (1 MiB).
pub const MAX_MANIFEST_BYTES: u64 = 1 << 20;
/// Upstream `kubetypes.ConfigSourceAnnotationKey`.
pub const CONFIG_SOURCE_ANNOTATION: &str = "kubernetes.io/config.source";
/// Upstream `kubetypes.ConfigHashAnnotationKey`.
pub const CONFIG_HASH_ANNOTATION: &str = "kubernetes.io/config.hash";
/// Upstream `kubetypes.FileSource`: the value of [`CONFIG_SOURCE_ANNOTATION`].
pub const FILE_SOURCE: &str = "file";
/// File extensions read from the folder (compared case-insensitively).
pub const MANIFEST_EXTENSIONS: [&str; 3] = ["yaml", "yml", "json"];

/// Defaults the API server applies (`SetDefaults_*` in `pkg/apis/core/v1/defaults.go`).
pub const DEFAULT_NAMESPACE: &str = "default";
pub const DEFAULT_RESTART_POLICY: &str = "Always";
pub const DEFAULT_TERMINATION_GRACE_PERIOD_SECONDS: i64 = 30;
pub const DEFAULT_PROBE_TIMEOUT_SECONDS: i32 = 1;
pub const DEFAULT_PROBE_PERIOD_SECONDS: i32 = 10;
pub const DEFAULT_PROBE_SUCCESS_THRESHOLD: i32 = 1;
pub const DEFAULT_PROBE_FAILURE_THRESHOLD: i32 = 3;
pub const DEFAULT_HTTP_GET_PATH: &str = "/";
pub const DEFAULT_HTTP_GET_SCHEME: &str = "HTTP";
pub const DEFAULT_PORT_PROTOCOL: &str = "TCP";

const TOO_LARGE: &str = "file larger than 1 MiB";

/// A pod loaded from a manifest: defaults applied, validated, UID and source annotations set.
#[derive(Debug, Clone, PartialEq)]
pub struct LoadedPod {
    /// The manifest file it came from.
    pub file: PathBuf,
    /// The pod, ready to hand to the engine.
    pub pod: Pod,
}

impl LoadedPod {
    /// The static pod UID (`metadata.uid`).
    pub fn uid(&self) -> &str {
        self.pod.metadata.uid.as_deref().unwrap_or_default()
    }

    /// `metadata.namespace` (always set after defaulting).
    pub fn namespace(&self) -> &str {
        self.pod.metadata.namespace.as_deref().unwrap_or(DEFAULT_NAMESPACE)
    }

    /// `metadata.name`.
    pub fn name(&self) -> &str {
        self.pod.metadata.name.as_deref().unwrap_or_default()
    }
}

/// Why a file, or one document in it, gave no pod.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{}: {reason}", file.display())]
pub struct ManifestError {
    /// The manifest file (or the folder, when the folder itself cannot be read).
    pub file: PathBuf,
    /// What is wrong, for a person to read.
    pub reason: String,
}

impl ManifestError {
    fn new(file: &Path, reason: impl Into<String>) -> Self {
        Self { file: file.to_path_buf(), reason: reason.into() }
    }
}

// === parsing ===

/// Parses one file's contents: YAML or JSON (by the `.json` extension), several YAML documents per
/// file (`---`), empty documents skipped. Each document must be `kind: Pod`, `apiVersion: v1`;
/// anything else is an error for that document while the file's other documents still load. When
/// the file holds more than one document, errors name the document (1-based, empty ones not
/// counted). Returned pods are ready: defaults, validation, UID, annotations, node name.
pub fn parse_manifest(file: &Path, contents: &str, node_name: &str) -> (Vec<Pod>, Vec<ManifestError>) {
    if contents.len() as u64 > MAX_MANIFEST_BYTES {
        return (Vec::new(), vec![ManifestError::new(file, TOO_LARGE)]);
    }
    let contents = contents.strip_prefix('\u{feff}').unwrap_or(contents);
    let documents = match decode_documents(file, contents) {
        Ok(documents) => documents,
        Err(reason) => return (Vec::new(), vec![ManifestError::new(file, reason)]),
    };
    let several = documents.len() > 1;
    let mut pods = Vec::new();
    let mut errors = Vec::new();
    for (index, document) in documents.into_iter().enumerate() {
        match document.and_then(|pod| prepare(file, pod, node_name)) {
            Ok(pod) => pods.push(pod),
            Err(reason) if several => {
                errors.push(ManifestError::new(file, format!("document {}: {reason}", index + 1)))
            }
            Err(reason) => errors.push(ManifestError::new(file, reason)),
        }
    }
    (pods, errors)
}

fn is_json(file: &Path) -> bool {
    file.extension().and_then(|e| e.to_str()).is_some_and(|e| e.eq_ignore_ascii_case("json"))
}

/// The file's documents, each a pod or why not; `Err` when the file does not parse at all.
fn decode_documents(file: &Path, contents: &str) -> Result<Vec<Result<Pod, String>>, String> {
    if is_json(file) {
        if contents.trim().is_empty() {
            return Ok(Vec::new());
        }
        let value: Value = serde_json::from_str(contents).map_err(|e| format!("invalid JSON: {e}"))?;
        // Decoding again straight into a Pod gives type errors with their line and column.
        let pod = check_kind(&value).and_then(|()| {
            serde_path_to_error::deserialize::<_, Pod>(&mut serde_json::Deserializer::from_str(contents))
                .map_err(|e| format!("invalid Pod: {}", with_path(&e.path().to_string(), e.inner())))
        });
        return Ok(vec![pod]);
    }
    let values: Vec<Value> = serde_saphyr::from_multiple_with_options(contents, yaml_options())
        .map_err(|e| format!("invalid YAML: {}", one_line(&e.to_string())))?;
    if values.is_empty() {
        return Ok(Vec::new());
    }
    // A second pass decodes each document straight into a Pod: YAML scalars then fit the field
    // types (`value: 8080` for a string) and type errors carry their line and column. It lines up
    // with the first pass document for document (both skip the same empty documents); should it
    // not, each document is converted from its JSON value instead.
    let mut bytes = contents.as_bytes();
    let typed: Vec<Result<Tracked<Pod>, serde_saphyr::Error>> =
        serde_saphyr::read_with_options(&mut bytes, yaml_options()).collect();
    let aligned = typed.len() == values.len();
    let mut typed = typed.into_iter();
    Ok(values
        .into_iter()
        .map(|value| {
            let direct = if aligned { typed.next() } else { None };
            check_kind(&value)?;
            match direct {
                Some(Ok(Tracked(pod))) => Ok(pod),
                Some(Err(e)) => Err(format!("invalid Pod: {}", one_line(&e.to_string()))),
                None => serde_path_to_error::deserialize::<_, Pod>(value)
                    .map_err(|e| format!("invalid Pod: {}", with_path(&e.path().to_string(), e.inner()))),
            }
        })
        .collect())
}

/// A [`Pod`] (or any other decoded type) whose type errors start with the path of the field
/// they are about. The YAML deserializer adds the line and column to the error this returns, so
/// the message reads `spec.containers[0].readinessProbe.periodSeconds: invalid i32 at line 14,
/// column 88`.
pub(crate) struct Tracked<T>(pub(crate) T);

impl<'de, T: serde::Deserialize<'de>> serde::Deserialize<'de> for Tracked<T> {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        use serde::de::Error as _;
        let mut track = serde_path_to_error::Track::new();
        match T::deserialize(serde_path_to_error::Deserializer::new(deserializer, &mut track)) {
            Ok(value) => Ok(Tracked(value)),
            Err(e) => Err(D::Error::custom(with_path(&track.path().to_string(), &e))),
        }
    }
}

/// `path: error`, or only the error when it is about the document itself (path `.`).
pub(crate) fn with_path(path: &str, error: &dyn std::fmt::Display) -> String {
    if path.is_empty() || path == "." { error.to_string() } else { format!("{path}: {error}") }
}

pub(crate) fn yaml_options() -> serde_saphyr::Options {
    let mut options = serde_saphyr::Options::default();
    // The snippet is a multi-line rendering; the one-line message already has line and column.
    options.with_snippet = false;
    options
}

pub(crate) fn one_line(message: &str) -> String {
    message.split_whitespace().collect::<Vec<_>>().join(" ")
}

/// Only `kind: Pod` in `apiVersion: v1` is a pod, as for the kubelet's file source.
fn check_kind(document: &Value) -> Result<(), String> {
    let Value::Object(fields) = document else {
        return Err(format!("expected a Pod object, found {}", json_type(document)));
    };
    match fields.get("kind") {
        Some(Value::String(kind)) if kind == "Pod" => {}
        None | Some(Value::Null) => return Err("kind is missing: expected \"Pod\"".into()),
        Some(other) => return Err(format!("kind {other} is not supported: expected \"Pod\"")),
    }
    match fields.get("apiVersion") {
        Some(Value::String(version)) if version == "v1" => Ok(()),
        None | Some(Value::Null) => Err("apiVersion is missing: expected \"v1\"".into()),
        Some(other) => Err(format!("apiVersion {other} is not supported for kind Pod: expected \"v1\"")),
    }
}

fn json_type(value: &Value) -> &'static str {
    match value {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "a sequence",
        Value::Object(_) => "a mapping",
    }
}

/// Turns a decoded pod into a loaded one, or says why it is invalid.
fn prepare(file: &Path, mut pod: Pod, node_name: &str) -> Result<Pod, String> {
    pod.status = only_conditions(pod.status.take());
    apply_defaults(&mut pod);
    if let Err(errors) = validate(&pod) {
        let name = pod.metadata.name.as_deref().unwrap_or_default();
        return Err(format!("Pod {} is invalid: {}", go_quote(name), aggregate(&errors)));
    }
    let uid = static_pod_uid(node_name, file, &pod);
    let annotations = pod.metadata.annotations.get_or_insert_with(BTreeMap::new);
    annotations.insert(CONFIG_SOURCE_ANNOTATION.into(), FILE_SOURCE.into());
    annotations.insert(CONFIG_HASH_ANNOTATION.into(), uid.clone());
    pod.metadata.uid = Some(uid);
    if let Some(spec) = pod.spec.as_mut() {
        spec.node_name = Some(node_name.into());
    }
    Ok(pod)
}

fn only_conditions(status: Option<PodStatus>) -> Option<PodStatus> {
    let conditions = status?.conditions?;
    Some(PodStatus { conditions: Some(conditions), ..Default::default() })
}

/// Upstream `utilerrors.Aggregate` formatting: one message as is, several as `[a, b]`.
fn aggregate(messages: &[String]) -> String {
    let mut seen = BTreeSet::new();
    let unique: Vec<&str> = messages.iter().filter(|m| seen.insert(m.as_str())).map(String::as_str).collect();
    match unique.as_slice() {
        [one] => (*one).to_owned(),
        many => format!("[{}]", many.join(", ")),
    }
}

// === folder ===

/// Every `*.yaml`, `*.yml`, `*.json` file directly in `dir` (hidden files skipped, symlinks
/// followed), in file-name order. Unreadable files, bad documents and a second pod with a
/// namespace/name already seen are reported; everything else is returned.
pub fn load_dir(dir: &Path, node_name: &str) -> (Vec<LoadedPod>, Vec<ManifestError>) {
    let loaded = load(dir, node_name);
    (loaded.pods, loaded.errors)
}

/// What one read of the folder gave, with what could not be read told apart from what is wrong.
struct Loaded {
    pods: Vec<LoadedPod>,
    errors: Vec<ManifestError>,
    /// Listing the folder failed (other than "not found"): nothing here says which pods exist.
    folder_unreadable: Option<io::ErrorKind>,
    /// Files that exist but could not be read, with why: their pods are unknown, not gone.
    unreadable_files: BTreeMap<PathBuf, io::ErrorKind>,
}

fn load(dir: &Path, node_name: &str) -> Loaded {
    let mut loaded = Loaded {
        pods: Vec::new(),
        errors: Vec::new(),
        folder_unreadable: None,
        unreadable_files: BTreeMap::new(),
    };
    let files = match manifest_files(dir, &mut loaded) {
        Ok(files) => files,
        Err(e) => {
            if e.kind() != io::ErrorKind::NotFound {
                loaded.folder_unreadable = Some(e.kind());
            }
            loaded.errors.push(ManifestError::new(dir, format!("cannot read directory: {e}")));
            return loaded;
        }
    };
    let mut seen: HashMap<(String, String), PathBuf> = HashMap::new();
    for file in files {
        let contents = match read_manifest(&file) {
            Ok(contents) => contents,
            Err(ReadError::Io(e)) => {
                if e.kind() != io::ErrorKind::NotFound {
                    loaded.unreadable_files.insert(file.clone(), e.kind());
                }
                loaded.errors.push(ManifestError::new(&file, format!("cannot read file: {e}")));
                continue;
            }
            Err(ReadError::Content(reason)) => {
                loaded.errors.push(ManifestError::new(&file, reason));
                continue;
            }
        };
        let (parsed, bad) = parse_manifest(&file, &contents, node_name);
        loaded.errors.extend(bad);
        for pod in parsed {
            let pod = LoadedPod { file: file.clone(), pod };
            let key = (pod.namespace().to_owned(), pod.name().to_owned());
            if let Some(first) = seen.get(&key) {
                let reason = format!("duplicate pod {}/{}, also in {}", key.0, key.1, first.display());
                loaded.errors.push(ManifestError::new(&file, reason));
                continue;
            }
            seen.insert(key, file.clone());
            loaded.pods.push(pod);
        }
    }
    loaded
}

/// The manifest files of `dir`; `Err` when the folder cannot be listed completely (a partial
/// listing would look like removed files).
fn manifest_files(dir: &Path, loaded: &mut Loaded) -> io::Result<Vec<PathBuf>> {
    let mut files = Vec::new();
    for entry in fs::read_dir(dir)? {
        let entry = entry?;
        let path = entry.path();
        // Editors leave hidden swap and backup files beside the manifests; the kubelet skips them.
        let hidden = entry.file_name().as_encoded_bytes().starts_with(b".");
        let wanted = path
            .extension()
            .and_then(|e| e.to_str())
            .is_some_and(|e| MANIFEST_EXTENSIONS.iter().any(|x| e.eq_ignore_ascii_case(x)));
        if hidden || !wanted {
            continue;
        }
        match fs::metadata(&path) {
            Ok(meta) if meta.is_file() => files.push(path),
            Ok(_) => {}
            Err(e) => {
                if e.kind() != io::ErrorKind::NotFound {
                    loaded.unreadable_files.insert(path.clone(), e.kind());
                }
                loaded.errors.push(ManifestError::new(&path, format!("cannot read file: {e}")));
            }
        }
    }
    files.sort_by(|a, b| a.file_name().cmp(&b.file_name()));
    Ok(files)
}

enum ReadError {
    /// The file could not be read: its pods are unknown.
    Io(io::Error),
    /// The file was read and is not a manifest.
    Content(String),
}

fn read_manifest(file: &Path) -> Result<String, ReadError> {
    let opened = File::open(file).map_err(ReadError::Io)?;
    let mut bytes = Vec::new();
    // Reading one byte past the cap tells a file at the cap from a larger one without reading
    // the rest of a huge file.
    opened.take(MAX_MANIFEST_BYTES + 1).read_to_end(&mut bytes).map_err(ReadError::Io)?;
    if bytes.len() as u64 > MAX_MANIFEST_BYTES {
        return Err(ReadError::Content(TOO_LARGE.into()));
    }
    String::from_utf8(bytes).map_err(|e| ReadError::Content(format!("invalid UTF-8: {}", e.utf8_error())))
}

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

/// Scans the folder (see [`load_dir`]). Follow it with [`Snapshot::keeping_unreadable`] to keep
/// the pods of what could not be read.
pub fn scan(dir: &Path, node_name: &str) -> Snapshot {
    scan_with(dir, node_name, false)
}

/// [`scan`]; with `probes_in_place` (the `MutableContainerProbes` gate) each pod's UID is
/// [`static_pod_uid_ignoring_probes`], so a manifest whose probes alone changed keeps its pod
/// and [`diff`] reports it [`SourceChange::Updated`] instead of removed and added.
pub fn scan_with(dir: &Path, node_name: &str, probes_in_place: bool) -> Snapshot {
    let mut loaded = load(dir, node_name);
    if probes_in_place {
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

// === defaults ===

/// The API server's defaults that the agent relies on: namespace `default`; `restartPolicy:
/// Always`; `terminationGracePeriodSeconds: 30`; for every probe of containers and init
/// containers `timeoutSeconds: 1`, `periodSeconds: 10`, `successThreshold: 1`,
/// `failureThreshold: 3` when unset or 0 (the API server defaults zero values), `httpGet.path: /`
/// and `httpGet.scheme: HTTP` when unset; container ports' `protocol: TCP`. Negative values are
/// left for [`validate`] to reject. A missing `spec` becomes an empty one.
pub fn apply_defaults(pod: &mut Pod) {
    if pod.metadata.namespace.as_deref().is_none_or(str::is_empty) {
        pod.metadata.namespace = Some(DEFAULT_NAMESPACE.into());
    }
    let spec = pod.spec.get_or_insert_with(PodSpec::default);
    default_str(&mut spec.restart_policy, DEFAULT_RESTART_POLICY);
    spec.termination_grace_period_seconds.get_or_insert(DEFAULT_TERMINATION_GRACE_PERIOD_SECONDS);
    for container in spec.containers.iter_mut().chain(spec.init_containers.iter_mut().flatten()) {
        for port in container.ports.iter_mut().flatten() {
            default_str(&mut port.protocol, DEFAULT_PORT_PROTOCOL);
        }
        for probe in
            [&mut container.liveness_probe, &mut container.readiness_probe, &mut container.startup_probe]
                .into_iter()
                .flatten()
        {
            default_probe(probe);
        }
    }
}

fn default_probe(probe: &mut Probe) {
    default_positive(&mut probe.timeout_seconds, DEFAULT_PROBE_TIMEOUT_SECONDS);
    default_positive(&mut probe.period_seconds, DEFAULT_PROBE_PERIOD_SECONDS);
    default_positive(&mut probe.success_threshold, DEFAULT_PROBE_SUCCESS_THRESHOLD);
    default_positive(&mut probe.failure_threshold, DEFAULT_PROBE_FAILURE_THRESHOLD);
    if let Some(http) = probe.http_get.as_mut() {
        default_str(&mut http.path, DEFAULT_HTTP_GET_PATH);
        default_str(&mut http.scheme, DEFAULT_HTTP_GET_SCHEME);
    }
}

fn default_str(field: &mut Option<String>, default: &str) {
    if field.as_deref().is_none_or(str::is_empty) {
        *field = Some(default.into());
    }
}

fn default_positive(field: &mut Option<i32>, default: i32) {
    if matches!(field, None | Some(0)) {
        *field = Some(default);
    }
}

/// The value a defaulted field has: unset and 0 read as the default.
fn defaulted(field: Option<i32>, default: i32) -> i32 {
    match field {
        None | Some(0) => default,
        Some(value) => value,
    }
}

// === validation ===

const NEGATIVE: &str = "must be greater than or equal to 0";
const PORT_RANGE: &str = "must be between 1 and 65535, inclusive";
const NO_HANDLER: &str = "must specify a handler type";
const SECOND_HANDLER: &str = "may not specify more than 1 handler type";
const INIT_PROBE: &str = "may not be set for init containers without restartPolicy=Always";
const NEEDS_COMMAND: &str = "the standalone runtime runs each container's command as a local process";
const UNKNOWN_PORT_NAME: &str = "must be the name of one of the container's ports";
const DNS1123_LABEL: &str = "a lowercase RFC 1123 label must consist of lower case alphanumeric characters or '-', \
and must start and end with an alphanumeric character (e.g. 'my-name',  or '123-abc', regex used for validation \
is '[a-z0-9]([-a-z0-9]*[a-z0-9])?')";
const DNS1123_SUBDOMAIN: &str = r"a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.', and must start and end with an alphanumeric character (e.g. 'example.com', regex used for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*')";
const HTTP_HEADER_NAME: &str = "a valid HTTP header must consist of alphanumeric characters or '-' \
(e.g. 'X-Header-Name', regex used for validation is '[-A-Za-z0-9]+')";

/// The API server's validation of what the agent relies on, with its messages
/// (`<field path>: <Required value|Invalid value: v|Forbidden|Duplicate value: v|Unsupported
/// value: v>[: detail]`): metadata name and namespace; containers present, named (RFC 1123
/// labels), unique across containers and init containers; container ports; probes (one handler,
/// exec command, HTTP path, scheme and header names, port numbers and names, non-negative timing
/// fields, `successThreshold` 1 for liveness and startup, probe-level grace period, none on
/// readiness, none on init containers that are not sidecars); restart policies. Two rules are this
/// agent's own: every container needs a `command` (there are no images to supply one), and a named
/// probe port must name one of the container's ports (the kubelet finds out only when probing).
/// A third is the agent's own annotation: the probe timing annotation must be valid for the pod.
/// Fields the API server defaults are read with their defaults, so the answer is the same before
/// and after [`apply_defaults`]. The image is not required: the standalone runtime does not use it.
pub fn validate(pod: &Pod) -> Result<(), Vec<String>> {
    let mut errs = Errors::default();
    match pod.metadata.name.as_deref() {
        None | Some("") => errs.required("metadata.name", "name or generateName is required"),
        Some(name) => {
            for msg in dns1123_subdomain(name) {
                errs.invalid("metadata.name", go_quote(name), msg);
            }
        }
    }
    if let Some(namespace) = pod.metadata.namespace.as_deref().filter(|ns| !ns.is_empty()) {
        for msg in dns1123_label(namespace) {
            errs.invalid("metadata.namespace", go_quote(namespace), msg);
        }
    }
    let empty = PodSpec::default();
    let spec = pod.spec.as_ref().unwrap_or(&empty);
    validate_containers(&spec.containers, "spec.containers", &mut errs);
    validate_init_containers(
        spec.init_containers.as_deref().unwrap_or_default(),
        &spec.containers,
        &mut errs,
    );
    match spec.restart_policy.as_deref() {
        None | Some("" | "Always" | "OnFailure" | "Never") => {}
        Some(other) => errs.not_supported("spec.restartPolicy", other, &["Always", "OnFailure", "Never"]),
    }
    // The agent's own annotation (docs/probe-timing.md): rejected with the JSON path inside it.
    if let Err(err) = probe_timings(pod) {
        errs.push(
            &format!("metadata.annotations[{PROBE_TIMING_ANNOTATION}]"),
            "Invalid value".into(),
            &err.detail(),
        );
    }
    errs.into_result()
}

fn validate_containers(containers: &[Container], path: &str, errs: &mut Errors) {
    if containers.is_empty() {
        errs.required(path, "");
        return;
    }
    let mut names = BTreeSet::new();
    for (i, container) in containers.iter().enumerate() {
        let path = format!("{path}[{i}]");
        validate_container_common(container, &path, errs);
        if !names.insert(container.name.as_str()) {
            errs.duplicate(&format!("{path}.name"), &container.name);
        }
        container_probes(container, true, &path, errs);
        if container.restart_policy.is_some() {
            errs.forbidden(&format!("{path}.restartPolicy"), "may not be set for non-init containers");
        }
    }
}

fn validate_init_containers(init_containers: &[Container], containers: &[Container], errs: &mut Errors) {
    let mut names: BTreeSet<&str> = containers.iter().map(|c| c.name.as_str()).collect();
    for (i, container) in init_containers.iter().enumerate() {
        let path = format!("spec.initContainers[{i}]");
        validate_container_common(container, &path, errs);
        let sidecar = match container.restart_policy.as_deref() {
            None => false,
            Some("Always") => true,
            Some(other) => {
                errs.not_supported(&format!("{path}.restartPolicy"), other, &["Always"]);
                false
            }
        };
        if names.contains(container.name.as_str()) {
            errs.duplicate(&format!("{path}.name"), &container.name);
        } else if !container.name.is_empty() {
            names.insert(container.name.as_str());
        }
        container_probes(container, sidecar, &path, errs);
    }
}

/// The probe rules of [`validate`] for one container at `path` (`spec.containers[0]`), the
/// same messages included: for a regular container (`init` false) or a sidecar, every probe
/// (handler, ports, timing fields, thresholds, grace period); for a plain init container, that
/// it has no probe. The container's other fields are not looked at, so this also checks pods
/// whose containers run from images (`probelet lint`).
pub fn validate_container_probes(container: &Container, init: bool, path: &str) -> Vec<String> {
    let mut errs = Errors::default();
    let probed = !init || container.restart_policy.as_deref() == Some("Always");
    container_probes(container, probed, path, &mut errs);
    errs.0
}

/// `probed`: a regular container or a sidecar, whose probes run; else an init container, which
/// may have none.
fn container_probes(container: &Container, probed: bool, path: &str, errs: &mut Errors) {
    if probed {
        validate_probes(container, path, errs);
    } else {
        for (field, probe) in probes(container) {
            if probe.is_some() {
                errs.forbidden(&format!("{path}.{field}"), INIT_PROBE);
            }
        }
    }
}

fn probes(container: &Container) -> [(&'static str, Option<&Probe>); 3] {
    [
        ("livenessProbe", container.liveness_probe.as_ref()),
        ("readinessProbe", container.readiness_probe.as_ref()),
        ("startupProbe", container.startup_probe.as_ref()),
    ]
}

fn validate_container_common(container: &Container, path: &str, errs: &mut Errors) {
    let name_path = format!("{path}.name");
    if container.name.is_empty() {
        errs.required(&name_path, "");
    } else {
        for msg in dns1123_label(&container.name) {
            errs.invalid(&name_path, go_quote(&container.name), msg);
        }
    }
    if container.command.as_ref().is_none_or(Vec::is_empty) {
        errs.required(&format!("{path}.command"), NEEDS_COMMAND);
    }
    validate_container_ports(container.ports.as_deref().unwrap_or_default(), &format!("{path}.ports"), errs);
}

fn validate_container_ports(ports: &[ContainerPort], path: &str, errs: &mut Errors) {
    let mut names = BTreeSet::new();
    for (i, port) in ports.iter().enumerate() {
        let path = format!("{path}[{i}]");
        if let Some(name) = port.name.as_deref().filter(|n| !n.is_empty()) {
            let msgs = port_name(name);
            if !msgs.is_empty() {
                for msg in msgs {
                    errs.invalid(&format!("{path}.name"), go_quote(name), msg);
                }
            } else if !names.insert(name) {
                errs.duplicate(&format!("{path}.name"), name);
            }
        }
        if port.container_port == 0 {
            errs.required(&format!("{path}.containerPort"), "");
        } else if !(1..=65535).contains(&port.container_port) {
            errs.invalid(&format!("{path}.containerPort"), port.container_port.to_string(), PORT_RANGE);
        }
        if let Some(host_port) = port.host_port.filter(|p| *p != 0 && !(1..=65535).contains(p)) {
            errs.invalid(&format!("{path}.hostPort"), host_port.to_string(), PORT_RANGE);
        }
        match port.protocol.as_deref() {
            None | Some("" | "TCP" | "UDP" | "SCTP") => {}
            Some(other) => errs.not_supported(&format!("{path}.protocol"), other, &["SCTP", "TCP", "UDP"]),
        }
    }
}

fn validate_probes(container: &Container, path: &str, errs: &mut Errors) {
    for (field, probe) in probes(container) {
        let Some(probe) = probe else { continue };
        let path = format!("{path}.{field}");
        validate_probe(probe, container, &path, errs);
        match field {
            "readinessProbe" => {
                if let Some(grace) = probe.termination_grace_period_seconds {
                    errs.invalid(
                        &format!("{path}.terminationGracePeriodSeconds"),
                        grace.to_string(),
                        "must not be set for readinessProbes",
                    );
                }
            }
            _ => {
                let success = defaulted(probe.success_threshold, DEFAULT_PROBE_SUCCESS_THRESHOLD);
                if success != 1 {
                    errs.invalid(&format!("{path}.successThreshold"), success.to_string(), "must be 1");
                }
            }
        }
    }
}

/// Upstream `validateProbe`: the handler, then the timing fields, then the probe's grace period.
fn validate_probe(probe: &Probe, container: &Container, path: &str, errs: &mut Errors) {
    let mut handlers = 0;
    let mut handler = |name: &str, errs: &mut Errors| {
        handlers += 1;
        if handlers > 1 {
            errs.forbidden(&format!("{path}.{name}"), SECOND_HANDLER);
            false
        } else {
            true
        }
    };
    if let Some(exec) = probe.exec.as_ref()
        && handler("exec", errs)
        && exec.command.as_ref().is_none_or(Vec::is_empty)
    {
        errs.required(&format!("{path}.exec.command"), "");
    }
    if let Some(http) = probe.http_get.as_ref()
        && handler("httpGet", errs)
    {
        let http_path = format!("{path}.httpGet");
        validate_probe_port(&http.port, container, &format!("{http_path}.port"), errs);
        match http.scheme.as_deref() {
            None | Some("" | "HTTP" | "HTTPS") => {}
            Some(other) => errs.not_supported(&format!("{http_path}.scheme"), other, &["HTTP", "HTTPS"]),
        }
        for header in http.http_headers.iter().flatten() {
            if !is_http_header_name(&header.name) {
                errs.invalid(&format!("{http_path}.httpHeaders"), go_quote(&header.name), HTTP_HEADER_NAME);
            }
        }
    }
    if let Some(tcp) = probe.tcp_socket.as_ref()
        && handler("tcpSocket", errs)
    {
        validate_probe_port(&tcp.port, container, &format!("{path}.tcpSocket.port"), errs);
    }
    if let Some(grpc) = probe.grpc.as_ref()
        && handler("grpc", errs)
        && !(1..=65535).contains(&grpc.port)
    {
        errs.invalid(&format!("{path}.grpc.port"), grpc.port.to_string(), PORT_RANGE);
    }
    if handlers == 0 {
        errs.required(path, NO_HANDLER);
    }

    for (field, value) in [
        ("initialDelaySeconds", probe.initial_delay_seconds),
        ("timeoutSeconds", probe.timeout_seconds),
        ("periodSeconds", probe.period_seconds),
        ("successThreshold", probe.success_threshold),
        ("failureThreshold", probe.failure_threshold),
    ] {
        if let Some(value) = value.filter(|v| *v < 0) {
            errs.invalid(&format!("{path}.{field}"), value.to_string(), NEGATIVE);
        }
    }
    if let Some(grace) = probe.termination_grace_period_seconds.filter(|g| *g <= 0) {
        errs.invalid(
            &format!("{path}.terminationGracePeriodSeconds"),
            grace.to_string(),
            "must be greater than 0",
        );
    }
}

/// Upstream `ValidatePortNumOrName`, plus this agent's check that a name is one of the
/// container's ports.
fn validate_probe_port(port: &IntOrString, container: &Container, path: &str, errs: &mut Errors) {
    match port {
        IntOrString::Int(number) => {
            if !(1..=65535).contains(number) {
                errs.invalid(path, number.to_string(), PORT_RANGE);
            }
        }
        IntOrString::String(name) => {
            let msgs = port_name(name);
            if msgs.is_empty() {
                let known =
                    container.ports.iter().flatten().any(|p| p.name.as_deref() == Some(name.as_str()));
                if !known {
                    errs.invalid(path, go_quote(name), UNKNOWN_PORT_NAME);
                }
            }
            for msg in msgs {
                errs.invalid(path, go_quote(name), msg);
            }
        }
    }
}

/// Field errors in upstream `field.Error` format.
#[derive(Default)]
struct Errors(Vec<String>);

impl Errors {
    fn push(&mut self, path: &str, body: String, detail: &str) {
        if detail.is_empty() {
            self.0.push(format!("{path}: {body}"));
        } else {
            self.0.push(format!("{path}: {body}: {detail}"));
        }
    }

    fn required(&mut self, path: &str, detail: &str) {
        self.push(path, "Required value".into(), detail);
    }

    fn forbidden(&mut self, path: &str, detail: &str) {
        self.push(path, "Forbidden".into(), detail);
    }

    /// `value` as upstream prints it: numbers plain, strings Go-quoted.
    fn invalid(&mut self, path: &str, value: String, detail: &str) {
        self.push(path, format!("Invalid value: {value}"), detail);
    }

    fn duplicate(&mut self, path: &str, value: &str) {
        self.push(path, format!("Duplicate value: {}", go_quote(value)), "");
    }

    fn not_supported(&mut self, path: &str, value: &str, supported: &[&str]) {
        let supported: Vec<String> = supported.iter().map(|s| go_quote(s)).collect();
        let detail = format!("supported values: {}", supported.join(", "));
        self.push(path, format!("Unsupported value: {}", go_quote(value)), &detail);
    }

    fn into_result(self) -> Result<(), Vec<String>> {
        if self.0.is_empty() { Ok(()) } else { Err(self.0) }
    }
}

/// Upstream `validation.IsDNS1123Label`.
fn dns1123_label(value: &str) -> Vec<&'static str> {
    let mut msgs = Vec::new();
    if value.len() > 63 {
        msgs.push("must be no more than 63 characters");
    }
    if !is_label(value) {
        msgs.push(if is_subdomain(value) { "must not contain dots" } else { DNS1123_LABEL });
    }
    msgs
}

/// Upstream `validation.IsDNS1123Subdomain`.
fn dns1123_subdomain(value: &str) -> Vec<&'static str> {
    let mut msgs = Vec::new();
    if value.len() > 253 {
        msgs.push("must be no more than 253 characters");
    }
    if !is_subdomain(value) {
        msgs.push(DNS1123_SUBDOMAIN);
    }
    msgs
}

/// `[a-z0-9]([-a-z0-9]*[a-z0-9])?`
fn is_label(value: &str) -> bool {
    let bytes = value.as_bytes();
    let alnum = |b: &u8| b.is_ascii_lowercase() || b.is_ascii_digit();
    match (bytes.first(), bytes.last()) {
        (Some(first), Some(last)) => {
            alnum(first) && alnum(last) && bytes.iter().all(|b| alnum(b) || *b == b'-')
        }
        _ => false,
    }
}

/// Labels joined by dots.
fn is_subdomain(value: &str) -> bool {
    value.split('.').all(is_label)
}

/// Upstream `validation.IsValidPortName`.
fn port_name(name: &str) -> Vec<&'static str> {
    let mut msgs = Vec::new();
    if name.len() > 15 {
        msgs.push("must be no more than 15 characters");
    }
    if name.is_empty() || !name.bytes().all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-') {
        msgs.push("must contain only alpha-numeric characters (a-z, 0-9), and hyphens (-)");
    }
    if !name.bytes().any(|b| b.is_ascii_lowercase()) {
        msgs.push("must contain at least one letter (a-z)");
    }
    if name.contains("--") {
        msgs.push("must not contain consecutive hyphens");
    }
    if name.starts_with('-') || name.ends_with('-') {
        msgs.push("must not begin or end with a hyphen");
    }
    msgs
}

/// `[-A-Za-z0-9]+`
fn is_http_header_name(name: &str) -> bool {
    !name.is_empty() && name.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-')
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn go_quote_matches_strconv_quote() {
        let cases = [
            ("plain", "abc", r#""abc""#),
            ("quote and backslash", r#"a"b\c"#, r#""a\"b\\c""#),
            ("escapes", "\n\t\r\u{7}\u{8}\u{c}\u{b}", r#""\n\t\r\a\b\f\v""#),
            ("control", "\u{1}\u{7f}", r#""\x01\x7f""#),
            ("c1 control", "\u{85}", r#""\u0085""#),
            ("unicode kept", "héllo ✓", "\"héllo ✓\""),
            ("empty", "", r#""""#),
        ];
        for (name, input, want) in cases {
            assert_eq!(go_quote(input), want, "case {name}");
        }
    }

    #[test]
    fn dns_names() {
        let long_label = "a".repeat(64);
        let cases: Vec<(&str, &str, Vec<&str>)> = vec![
            ("label ok", "web-1", vec![]),
            ("digits first", "1abc", vec![]),
            ("upper", "Web", vec![DNS1123_LABEL]),
            ("dots", "a.b", vec!["must not contain dots"]),
            ("trailing hyphen", "web-", vec![DNS1123_LABEL]),
            ("too long", &long_label, vec!["must be no more than 63 characters"]),
        ];
        for (name, value, want) in cases {
            assert_eq!(dns1123_label(value), want, "case {name}");
        }
        assert!(dns1123_subdomain("a.b-c.d").is_empty());
        assert_eq!(dns1123_subdomain("a..b"), vec![DNS1123_SUBDOMAIN]);
        assert_eq!(dns1123_subdomain("_x"), vec![DNS1123_SUBDOMAIN]);
    }

    #[test]
    fn port_names() {
        let cases: Vec<(&str, Vec<&str>)> = vec![
            ("http", vec![]),
            ("http-2", vec![]),
            ("8080", vec!["must contain at least one letter (a-z)"]),
            ("a--b", vec!["must not contain consecutive hyphens"]),
            ("-a", vec!["must not begin or end with a hyphen"]),
            (
                "HTTP",
                vec![
                    "must contain only alpha-numeric characters (a-z, 0-9), and hyphens (-)",
                    "must contain at least one letter (a-z)",
                ],
            ),
            ("abcdefghijklmnop", vec!["must be no more than 15 characters"]),
        ];
        for (value, want) in cases {
            assert_eq!(port_name(value), want, "case {value}");
        }
    }

    #[test]
    fn aggregate_formats_like_go() {
        assert_eq!(aggregate(&["a".into()]), "a");
        assert_eq!(aggregate(&["a".into(), "b".into(), "a".into()]), "[a, b]");
    }

    #[test]
    fn uid_is_uuid_shaped() {
        let uid = static_pod_uid("node", Path::new("/m/a.yaml"), &Pod::default());
        let parts: Vec<usize> = uid.split('-').map(str::len).collect();
        assert_eq!(parts, vec![8, 4, 4, 4, 12], "{uid}");
        assert_eq!(&uid[14..15], "8", "version nibble in {uid}");
        assert!(matches!(&uid[19..20], "8" | "9" | "a" | "b"), "variant in {uid}");
    }
}
