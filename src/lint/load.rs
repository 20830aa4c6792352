//! Reading what `probelet lint` checks: files and folders of manifests (YAML, several documents
//! per file, or JSON), and in them the objects that carry a pod spec — Pods, and the pod
//! templates of Deployments, StatefulSets, DaemonSets, ReplicaSets, Jobs and CronJobs (a `List`
//! is looked into). Other objects (Services, ConfigMaps, documents without a `kind`) are
//! skipped. A file that cannot be read or parsed, or an object of a known kind that does not
//! decode, is an error naming the file and, for a type error, the field.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use k8s_openapi::api::apps::v1::{DaemonSet, Deployment, ReplicaSet, StatefulSet};
use k8s_openapi::api::batch::v1::{CronJob, Job, JobSpec};
use k8s_openapi::api::core::v1::{Pod, PodSpec, PodTemplateSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelector, ObjectMeta};
use serde::de::DeserializeOwned;
use serde_json::Value;
use serde_saphyr::Spanned;

use super::rules::{START_SECONDS_ANNOTATION, StartAnnotation, WorkloadSpec, metadata_path};
use crate::host::manifests::decode::{DecodeError, Node, Segment, as_kubelet_json, decode_value, spans};
use crate::host::manifests::sections::{document_number, document_sections};
use crate::host::manifests::{
    EMPTY, MANIFEST_EXTENSIONS, ReadDocuments, ReadFile, read_documents, read_regular_file,
};

/// The largest file read, in bytes (16 MiB: a rendered chart can be large).
pub const MAX_LINT_FILE_BYTES: u64 = 16 << 20;

/// An object with a pod spec.
#[derive(Debug, Clone, PartialEq)]
pub struct Workload {
    pub file: PathBuf,
    /// `Pod`, `Deployment`, …
    pub kind: String,
    pub namespace: Option<String>,
    pub name: String,
    /// Its `metadata.generateName`, which the API server makes a name from when `name` is empty.
    pub generate_name: Option<String>,
    /// Where the pod spec is in the object (`spec`, `spec.template.spec`, …).
    pub spec_path: &'static str,
    /// The pod spec as written.
    pub spec: PodSpec,
    /// The pod's annotations: the Pod's own, or its template's (not the workload's).
    pub annotations: Option<BTreeMap<String, String>>,
    /// The object's own `metadata.labels` (a workload's template's are its
    /// [`WorkloadSpec::template_labels`]).
    pub labels: Option<BTreeMap<String, String>>,
    /// A workload's own annotations (its `metadata.annotations`), which the API server checks
    /// as it does a Pod's; `None` for a Pod, whose own are its pod's ([`Workload::annotations`]).
    pub object_annotations: Option<BTreeMap<String, String>>,
    /// The start-time annotation, if the object or its pod template has one.
    pub start_annotation: Option<StartAnnotation>,
    /// What the API server checks of a workload's spec beside its pod (its selector, its
    /// template's labels); empty for a Pod.
    pub workload_spec: WorkloadSpec,
    /// The paths of the fields the object holds that its type does not have
    /// (`spec.template.spec.containers[0].readinesProbe`), which the kubelet ignores and the API
    /// server's strict field validation refuses.
    pub unknown_fields: Vec<String>,
}

/// A file, or an object in it, that could not be read.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{}: {reason}", file.display())]
pub struct LoadError {
    pub file: PathBuf,
    pub reason: String,
}

/// What the paths hold.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Loaded {
    /// The files read, in order.
    pub files: Vec<PathBuf>,
    pub workloads: Vec<Workload>,
    pub errors: Vec<LoadError>,
    /// Files read that hold nothing to lint, as the agent warns of them: an empty file (no
    /// document but empty or null ones: blank, only comments, `~`, `---`) gives no pod ([`EMPTY`], the agent's words). Not errors: the agent
    /// runs on without its pods (docs/lint.md, "Exit codes and output").
    pub warnings: Vec<LoadError>,
    /// Documents that are not objects with a pod spec.
    pub skipped: usize,
}

/// Reads every path: a file as it is (whatever its extension), a folder walked for `*.yaml`,
/// `*.yml` and `*.json` (hidden entries skipped, symlinked folders not followed), in path order.
pub fn load_paths(paths: &[PathBuf]) -> Loaded {
    let mut loaded = Loaded::default();
    for path in paths {
        match std::fs::metadata(path) {
            Ok(meta) if meta.is_dir() => {
                let mut files = Vec::new();
                walk(path, &mut files, &mut loaded.errors);
                files.sort();
                for file in files {
                    load_file(&file, &mut loaded);
                }
            }
            Ok(_) => load_file(path, &mut loaded),
            Err(e) => {
                loaded.errors.push(LoadError { file: path.clone(), reason: format!("cannot read: {e}") })
            }
        }
    }
    loaded
}

fn walk(dir: &Path, files: &mut Vec<PathBuf>, errors: &mut Vec<LoadError>) {
    let entries = match std::fs::read_dir(dir) {
        Ok(entries) => entries,
        Err(e) => {
            errors.push(LoadError { file: dir.to_path_buf(), reason: format!("cannot read folder: {e}") });
            return;
        }
    };
    for entry in entries {
        let entry = match entry {
            Ok(entry) => entry,
            Err(e) => {
                errors
                    .push(LoadError { file: dir.to_path_buf(), reason: format!("cannot read folder: {e}") });
                continue;
            }
        };
        if entry.file_name().as_encoded_bytes().starts_with(b".") {
            continue;
        }
        let path = entry.path();
        match entry.file_type() {
            Ok(kind) if kind.is_dir() => walk(&path, files, errors),
            Ok(_) if is_manifest(&path) => files.push(path),
            Ok(_) => {}
            Err(e) => errors.push(LoadError { file: path, reason: format!("cannot read: {e}") }),
        }
    }
}

fn is_manifest(path: &Path) -> bool {
    path.extension()
        .and_then(|e| e.to_str())
        .is_some_and(|e| MANIFEST_EXTENSIONS.iter().any(|x| e.eq_ignore_ascii_case(x)))
}

fn load_file(file: &Path, loaded: &mut Loaded) {
    loaded.files.push(file.to_path_buf());
    let error = |reason: String| LoadError { file: file.to_path_buf(), reason };
    match read(file) {
        Ok(contents) => parse_contents(file, &contents, loaded),
        Err(reason) => loaded.errors.push(error(reason)),
    }
}

/// The objects of one file's contents, into `loaded` (errors included).
fn parse_contents(file: &Path, contents: &str, loaded: &mut Loaded) {
    let error = |reason: String| LoadError { file: file.to_path_buf(), reason };
    let (documents, twice) = match documents(contents) {
        Ok(read) => read,
        Err(reason) => return loaded.errors.push(error(reason)),
    };
    // The agent's test: no document but empty or null ones (blank, only comments, `~`, `---`),
    // so that both say it of one file.
    if documents.iter().all(|d| d.as_ref().is_ok_and(Value::is_null)) {
        loaded.warnings.push(error(EMPTY.to_owned()));
    }
    let several = documents.iter().filter(|d| !d.as_ref().is_ok_and(Value::is_null)).count() > 1;
    let total = documents.len();
    let sections = if several { document_sections(contents) } else { Vec::new() };
    // Said as the agent says it, and the document linted as read (the last value).
    for (index, text) in twice.into_iter().enumerate() {
        let Some(text) = text else { continue };
        let text = if several {
            format!("document {}: {text}", document_number(&sections, total, index))
        } else {
            text
        };
        loaded.warnings.push(error(text));
    }
    // Where each value is, read only if a document does not decode: its error names the line.
    let mut located: Option<Option<Vec<Spanned<Node>>>> = None;
    for (index, document) in documents.into_iter().enumerate() {
        if document.as_ref().is_ok_and(Value::is_null) {
            continue;
        }
        let mut found = Vec::new();
        let outcome = match document {
            Ok(document) => objects(file, document, &mut found, &mut loaded.skipped).map_err(|failure| {
                // A JSON file is read as YAML for where its values are: its text is YAML too.
                let place = located
                    .get_or_insert_with(|| spans(contents))
                    .as_ref()
                    .and_then(|documents| documents.get(index));
                failure.text(place, contents)
            }),
            Err(refusal) => Err(refusal),
        };
        if let Err(reason) = outcome {
            let reason = if several {
                format!("document {}: {reason}", document_number(&sections, total, index))
            } else {
                reason
            };
            loaded.errors.push(error(reason));
        }
        loaded.workloads.extend(found);
    }
}

/// Why an object of a document did not decode: its kind and name, and the error, whose path
/// starts with the `items` of the `List`s it is in (`lists` of them).
#[derive(Debug)]
struct ObjectError {
    lists: usize,
    what: String,
    error: DecodeError,
}

impl ObjectError {
    /// `items[0]: invalid Pod web: spec.containers[0].env[0].value: invalid type: integer
    /// `0644`, expected a string at line 10, column 33`.
    fn text(&self, document: Option<&Spanned<Node>>, contents: &str) -> String {
        let mut prefix = String::new();
        for pair in self.error.path.chunks(2).take(self.lists) {
            if let [_, Segment::Index(index)] = pair {
                prefix.push_str(&format!("items[{index}]: "));
            }
        }
        format!("{prefix}invalid {}: {}", self.what, self.error.text(2 * self.lists, document, contents))
    }

    /// The error of item `index` of a `List`'s `items`.
    fn in_item(mut self, index: usize) -> Self {
        self.lists += 1;
        self.error = self.error.under(Segment::Index(index)).under(Segment::Key("items".into()));
        self
    }
}

fn read(file: &Path) -> Result<String, String> {
    read_regular_file(file, MAX_LINT_FILE_BYTES).map_err(|e| e.to_string())
}

/// The file's documents, each the JSON the kubelet decodes (`decode.rs` in
/// `src/host/manifests/`). A `.json` file is read as YAML too, as the kubelet reads every file
/// (its `tryDecodeSinglePod`: "JSON is valid YAML"). A document may be null (`--- ~`); such
/// documents are passed over. With each document's keys written twice in its mappings, if any,
/// in words: their last values are read, as the kubelet reads them (`read_documents` in
/// `src/host/manifests`), and lint warns of them.
pub fn documents(contents: &str) -> Result<ReadDocuments<Value>, String> {
    let contents = contents.strip_prefix('\u{feff}').unwrap_or(contents);
    let ReadFile { values: mut documents, refused, twice } = read_documents(contents)?;
    documents.iter_mut().for_each(as_kubelet_json);
    let documents = documents
        .into_iter()
        .zip(refused)
        .map(|(document, refused)| match refused {
            // What lint does not look into (a Helm values file) it does not refuse either.
            Some(reason) => match object_named(&document) {
                Some(what) => Err(format!("invalid {what}: {reason}")),
                None => Ok(document),
            },
            None => Ok(document),
        })
        .collect();
    Ok((documents, twice))
}

/// `Kind name` of an object lint looks at (one with an `apiVersion` and a `kind`), as its
/// errors name it; `None` for any other document.
fn object_named(document: &Value) -> Option<String> {
    document.get("apiVersion")?.as_str()?;
    let kind = document.get("kind")?.as_str()?;
    match document.pointer("/metadata/name").and_then(Value::as_str) {
        Some(name) if !name.is_empty() => Some(format!("{kind} {name}")),
        _ => Some(kind.to_owned()),
    }
}

/// The objects with a pod spec in one document, into `found`; other documents count as skipped.
fn objects(
    file: &Path,
    document: Value,
    found: &mut Vec<Workload>,
    skipped: &mut usize,
) -> Result<(), ObjectError> {
    let field = |name: &str| document.get(name).and_then(Value::as_str).map(str::to_owned);
    let (Some(api_version), Some(kind)) = (field("apiVersion"), field("kind")) else {
        *skipped += 1;
        return Ok(());
    };
    let name = document.pointer("/metadata/name").and_then(Value::as_str).unwrap_or_default().to_owned();
    let what = || if name.is_empty() { kind.clone() } else { format!("{kind} {name}") };
    let workload = |meta: ObjectMeta,
                    template: Option<(Option<ObjectMeta>, &'static str)>,
                    spec: Option<PodSpec>,
                    mut workload_spec: WorkloadSpec,
                    unknown_fields: Vec<String>| {
        let (template_meta, spec_path) = template.unwrap_or((None, "spec"));
        workload_spec.template_labels = template_meta.as_ref().and_then(|m| m.labels.clone());
        let start_annotation = template_meta
            .as_ref()
            .and_then(|m| start_annotation(m, &metadata_path(spec_path)))
            .or_else(|| start_annotation(&meta, "metadata"));
        // A workload's pod is its template: the workload's own annotations are not the pod's.
        let annotations =
            if kind == "Pod" { meta.annotations.clone() } else { template_meta.and_then(|m| m.annotations) };
        let object_annotations = if kind == "Pod" { None } else { meta.annotations.clone() };
        Workload {
            file: file.to_path_buf(),
            kind: kind.clone(),
            namespace: meta.namespace.clone().filter(|n| !n.is_empty()),
            name: meta.name.clone().unwrap_or_default(),
            generate_name: meta.generate_name.clone(),
            spec_path,
            spec: spec.unwrap_or_default(),
            annotations,
            labels: meta.labels.clone(),
            object_annotations,
            start_annotation,
            workload_spec,
            unknown_fields,
        }
    };
    let selected = |selector: LabelSelector| WorkloadSpec { selector: Some(selector), ..Default::default() };
    let template = |t: PodTemplateSpec, path: &'static str| (t.spec, Some((t.metadata, path)));
    // A workload without its template (`spec: ~`, `jobTemplate: ~`) has its pod's errors at the
    // template's path still, as the API server names them (`spec.jobTemplate.spec.template.spec.
    // containers: Required value`), not at a Pod's (`spec.containers`).
    let no_template = |path: &'static str| (None, Some((None, path)));
    match (api_version.as_str(), kind.as_str()) {
        ("v1", "List") => {
            let items = match document.get("items") {
                Some(Value::Array(items)) => items.clone(),
                _ => Vec::new(),
            };
            for (i, item) in items.into_iter().enumerate() {
                objects(file, item, found, skipped).map_err(|e| e.in_item(i))?;
            }
        }
        ("v1", "Pod") => {
            let (pod, unknown): (Pod, _) = decode(document.clone(), &what())?;
            found.push(workload(pod.metadata, None, pod.spec, WorkloadSpec::default(), unknown));
        }
        ("apps/v1", "Deployment") => {
            let (object, unknown): (Deployment, _) = decode(document.clone(), &what())?;
            let selector = object.spec.as_ref().map(|s| selected(s.selector.clone())).unwrap_or_default();
            let (spec, t) = object
                .spec
                .map(|s| template(s.template, "spec.template.spec"))
                .unwrap_or_else(|| no_template("spec.template.spec"));
            found.push(workload(object.metadata, t, spec, selector, unknown));
        }
        ("apps/v1", "StatefulSet") => {
            let (object, unknown): (StatefulSet, _) = decode(document.clone(), &what())?;
            let selector = object.spec.as_ref().map(|s| selected(s.selector.clone())).unwrap_or_default();
            let (spec, t) = object
                .spec
                .map(|s| template(s.template, "spec.template.spec"))
                .unwrap_or_else(|| no_template("spec.template.spec"));
            found.push(workload(object.metadata, t, spec, selector, unknown));
        }
        ("apps/v1", "DaemonSet") => {
            let (object, unknown): (DaemonSet, _) = decode(document.clone(), &what())?;
            let selector = object.spec.as_ref().map(|s| selected(s.selector.clone())).unwrap_or_default();
            let (spec, t) = object
                .spec
                .map(|s| template(s.template, "spec.template.spec"))
                .unwrap_or_else(|| no_template("spec.template.spec"));
            found.push(workload(object.metadata, t, spec, selector, unknown));
        }
        ("apps/v1", "ReplicaSet") => {
            let (object, unknown): (ReplicaSet, _) = decode(document.clone(), &what())?;
            let selector = object.spec.as_ref().map(|s| selected(s.selector.clone())).unwrap_or_default();
            let (spec, t) = object
                .spec
                .and_then(|s| s.template)
                .map(|t| template(t, "spec.template.spec"))
                .unwrap_or_else(|| no_template("spec.template.spec"));
            found.push(workload(object.metadata, t, spec, selector, unknown));
        }
        ("batch/v1", "Job") => {
            let (object, unknown): (Job, _) = decode(document.clone(), &what())?;
            let job = object.spec.as_ref().map(job_spec).unwrap_or_default();
            let (spec, t) = object
                .spec
                .map(|s| template(s.template, "spec.template.spec"))
                .unwrap_or_else(|| no_template("spec.template.spec"));
            found.push(workload(object.metadata, t, spec, job, unknown));
        }
        ("batch/v1", "CronJob") => {
            let (object, unknown): (CronJob, _) = decode(document.clone(), &what())?;
            let job_template = object.spec.as_ref().and_then(|s| s.job_template.spec.as_ref());
            // A CronJob's job gets a generated selector: one written is refused, not checked.
            let job = WorkloadSpec {
                selector: job_template.and_then(|s| s.selector.clone()),
                manual_selector: job_template.is_some_and(|s| s.manual_selector == Some(true)),
                pod_failure_policy: job_template.is_some_and(|s| s.pod_failure_policy.is_some()),
                ..Default::default()
            };
            let (spec, t) = object
                .spec
                .and_then(|s| s.job_template.spec)
                .map(|s| template(s.template, "spec.jobTemplate.spec.template.spec"))
                .unwrap_or_else(|| no_template("spec.jobTemplate.spec.template.spec"));
            found.push(workload(object.metadata, t, spec, job, unknown));
        }
        _ => *skipped += 1,
    }
    Ok(())
}

/// What the API server checks of a Job's spec beside its pod: its selector (the user's with
/// `manualSelector: true`; else the API server generates one, and a selector written must agree
/// with it), whether it has a pod failure policy, and an indexed Job's completions.
fn job_spec(spec: &JobSpec) -> WorkloadSpec {
    WorkloadSpec {
        selector: spec.selector.clone(),
        template_labels: None,
        manual_selector: spec.manual_selector == Some(true),
        pod_failure_policy: spec.pod_failure_policy.is_some(),
        indexed_completions: spec.completions.filter(|_| spec.completion_mode.as_deref() == Some("Indexed")),
    }
}

/// Decodes a document into its type as the kubelet decodes it (strictly by type), with the
/// paths of the fields it holds that the type does not have; a type error names the field
/// (`spec.template.spec.containers[0].livenessProbe.periodSeconds: invalid type: …`).
fn decode<T: DeserializeOwned>(document: Value, what: &str) -> Result<(T, Vec<String>), ObjectError> {
    decode_value::<T>(document).map_err(|error| ObjectError { lists: 0, what: what.to_owned(), error })
}

fn start_annotation(meta: &ObjectMeta, path: &str) -> Option<StartAnnotation> {
    let annotations: &BTreeMap<String, String> = meta.annotations.as_ref()?;
    let value = annotations.get(START_SECONDS_ANNOTATION)?;
    Some(StartAnnotation {
        field: format!("{path}.annotations[{START_SECONDS_ANNOTATION}]"),
        value: value.clone(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(file: &str, contents: &str) -> (Vec<Workload>, Vec<String>, usize) {
        let mut loaded = Loaded::default();
        parse_contents(Path::new(file), contents, &mut loaded);
        (loaded.workloads, loaded.errors.into_iter().map(|e| e.reason).collect(), loaded.skipped)
    }

    const CONTAINERS: &str =
        "containers: [{name: app, image: app:1, readinessProbe: {tcpSocket: {port: 80}}}]";

    #[test]
    fn every_kind_with_a_pod_template() {
        let yaml = format!(
            "apiVersion: v1\nkind: Pod\nmetadata: {{name: p, namespace: shop}}\nspec: {{{CONTAINERS}}}\n---\n\
             apiVersion: apps/v1\nkind: Deployment\nmetadata: {{name: d}}\nspec:\n  selector: {{}}\n  template:\n    spec: {{{CONTAINERS}}}\n---\n\
             apiVersion: apps/v1\nkind: StatefulSet\nmetadata: {{name: s}}\nspec:\n  selector: {{}}\n  template:\n    spec: {{{CONTAINERS}}}\n---\n\
             apiVersion: apps/v1\nkind: DaemonSet\nmetadata: {{name: ds}}\nspec:\n  selector: {{}}\n  template:\n    spec: {{{CONTAINERS}}}\n---\n\
             apiVersion: apps/v1\nkind: ReplicaSet\nmetadata: {{name: rs}}\nspec:\n  selector: {{}}\n  template:\n    spec: {{{CONTAINERS}}}\n---\n\
             apiVersion: batch/v1\nkind: Job\nmetadata: {{name: j}}\nspec:\n  template:\n    spec: {{{CONTAINERS}}}\n---\n\
             apiVersion: batch/v1\nkind: CronJob\nmetadata: {{name: c}}\nspec:\n  schedule: '* * * * *'\n  jobTemplate:\n    spec:\n      template:\n        spec: {{{CONTAINERS}}}\n---\n\
             apiVersion: v1\nkind: Service\nmetadata: {{name: svc}}\n---\n\
             # only a comment\n---\n\
             replicas: 3\n"
        );
        let (workloads, errors, skipped) = parse("all.yaml", &yaml);
        assert!(errors.is_empty(), "{errors:?}");
        let got: Vec<(&str, &str, &str)> =
            workloads.iter().map(|w| (w.kind.as_str(), w.name.as_str(), w.spec_path)).collect();
        assert_eq!(
            got,
            vec![
                ("Pod", "p", "spec"),
                ("Deployment", "d", "spec.template.spec"),
                ("StatefulSet", "s", "spec.template.spec"),
                ("DaemonSet", "ds", "spec.template.spec"),
                ("ReplicaSet", "rs", "spec.template.spec"),
                ("Job", "j", "spec.template.spec"),
                ("CronJob", "c", "spec.jobTemplate.spec.template.spec"),
            ]
        );
        assert!(workloads.iter().all(|w| w.spec.containers[0].name == "app"));
        assert_eq!(workloads[0].namespace.as_deref(), Some("shop"));
        assert_eq!(workloads[1].namespace, None);
        assert_eq!(skipped, 2, "the Service and the document without a kind");
    }

    /// A workload written without its pod template (`spec: ~`, `jobTemplate: ~`) is linted at
    /// the template's path, where the API server names its errors: a CronJob's empty job template
    /// was linted at `spec`, a Pod's, so its errors read `spec.containers: Required value`.
    #[test]
    fn a_workload_without_its_template_is_linted_at_the_templates_path() {
        let yaml = "apiVersion: batch/v1\nkind: CronJob\nmetadata: {name: c}\nspec:\n  schedule: '* * * * *'\n  \
                    jobTemplate: ~\n---\napiVersion: apps/v1\nkind: Deployment\nmetadata: {name: d}\nspec: ~\n---\n\
                    apiVersion: apps/v1\nkind: ReplicaSet\nmetadata: {name: rs}\nspec: {selector: {}}\n---\n\
                    apiVersion: batch/v1\nkind: Job\nmetadata: {name: j}\n";
        let (workloads, errors, _) = parse("bare.yaml", yaml);
        assert!(errors.is_empty(), "{errors:?}");
        let got: Vec<(&str, &str)> = workloads.iter().map(|w| (w.name.as_str(), w.spec_path)).collect();
        assert_eq!(
            got,
            [
                ("c", "spec.jobTemplate.spec.template.spec"),
                ("d", "spec.template.spec"),
                ("rs", "spec.template.spec"),
                ("j", "spec.template.spec"),
            ]
        );
    }

    #[test]
    fn json_and_lists() {
        let json = r#"{"apiVersion": "v1", "kind": "List", "items": [
                {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "a"},
                  "spec": {"containers": [{"name": "app", "image": "x"}]}},
                {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "cm"}}
            ]}"#;
        let (workloads, errors, skipped) = parse("list.json", json);
        assert!(errors.is_empty(), "{errors:?}");
        assert_eq!(workloads.len(), 1);
        assert_eq!(workloads[0].name, "a");
        assert_eq!(skipped, 1);
    }

    /// A JSON manifest's error says where its value is, as a YAML one's does; it had neither
    /// line nor column.
    #[test]
    fn a_json_error_has_line_and_column() {
        let json = "{\"apiVersion\": \"apps/v1\", \"kind\": \"Deployment\", \"metadata\": {\"name\": \"web\"},\n \
                    \"spec\": {\"selector\": {}, \"template\": {\"spec\": {\"containers\": [\n  \
                    {\"name\": \"app\", \"livenessProbe\": {\"periodSeconds\": \"ten\"}}]}}}}\n";
        let (_, errors, _) = parse("web.json", json);
        assert_eq!(
            errors,
            ["invalid Deployment web: spec.template.spec.containers[0].livenessProbe.periodSeconds: \
              invalid type: string \"ten\", expected i32 at line 3, column 54"]
        );
    }

    /// A document lint reads that go-yaml refuses (an infinity, a tag it cannot read) is an
    /// error naming it and the field; a document lint does not look into is not refused.
    #[test]
    fn a_document_go_yaml_refuses_is_an_error() {
        let yaml = "apiVersion: v1\nkind: Pod\nmetadata: {name: p}\nspec:\n  containers:\n  \
                    - name: app\n    livenessProbe: {periodSeconds: .inf}\n---\nthreshold: .inf\n";
        let (workloads, errors, skipped) = parse("inf.yaml", yaml);
        assert!(workloads.is_empty());
        assert_eq!(skipped, 1);
        assert_eq!(
            errors,
            ["document 1: invalid Pod p: spec.containers[0].livenessProbe.periodSeconds: error converting \
              YAML to JSON: json: unsupported value: +Inf (`.inf`) at line 7, column 36"]
        );
    }

    #[test]
    fn errors_name_the_document_and_the_field() {
        let yaml = "apiVersion: v1\nkind: Service\nmetadata: {name: svc}\n---\n\
                    apiVersion: apps/v1\nkind: Deployment\nmetadata: {name: web}\nspec:\n  selector: {}\n  template:\n    spec:\n      \
                    containers: [{name: app, livenessProbe: {periodSeconds: ten}}]\n";
        let (workloads, errors, _) = parse("bad.yaml", yaml);
        assert!(workloads.is_empty());
        assert_eq!(errors.len(), 1);
        assert!(
            errors[0].starts_with(
                "document 2: invalid Deployment web: spec.template.spec.containers[0].livenessProbe.periodSeconds: "
            ),
            "{}",
            errors[0]
        );
        let (_, errors, _) = parse("broken.yaml", "kind: Pod\n  - : [\n");
        assert!(errors[0].starts_with("invalid YAML: "), "{errors:?}");
        let (_, errors, _) = parse("broken.json", "{\"kind\": ");
        assert!(errors[0].starts_with("invalid YAML: "), "{errors:?}");
    }

    /// Each of many bad documents of mixed types gets its own line and column (the file is read
    /// with its places once, for all of them).
    #[test]
    fn every_bad_document_is_located() {
        let pod = |i: usize| {
            format!("apiVersion: v1\nkind: Pod\nmetadata: {{name: p{i}}}\nspec: {{containers: 5}}\n")
        };
        let job = "apiVersion: batch/v1\nkind: Job\nmetadata: {name: j}\nspec: {template: 5}\n".to_owned();
        let yaml = [pod(0), job, pod(2), pod(3)].join("---\n");
        let (_, errors, _) = parse("many.yaml", &yaml);
        let want = [
            "document 1: invalid Pod p0: spec.containers: invalid type: integer `5`, expected a sequence at line 4, column 20",
            "document 2: invalid Job j: spec.template: ",
            "document 3: invalid Pod p2: spec.containers: invalid type: integer `5`, expected a sequence at line 14, column 20",
            "document 4: invalid Pod p3: spec.containers: invalid type: integer `5`, expected a sequence at line 19, column 20",
        ];
        assert_eq!(errors.len(), want.len(), "{errors:?}");
        for (got, want) in errors.iter().zip(want) {
            assert!(got.starts_with(want), "{got} / {want}");
        }
    }

    /// Documents are named by their `---` sections, as the agent names them: an empty section
    /// keeps its number.
    #[test]
    fn an_empty_section_keeps_its_number() {
        let bad = "apiVersion: v1\nkind: Pod\nmetadata: {name: p}\nspec: {containers: 5}\n";
        let yaml = format!("{bad}---\n# nothing here\n---\n{bad}");
        let (_, errors, _) = parse("gap.yaml", &yaml);
        assert_eq!(errors.len(), 2, "{errors:?}");
        assert!(errors[0].starts_with("document 1: ") && errors[1].starts_with("document 3: "), "{errors:?}");
    }

    /// A Pod's annotations are its own; a workload's pod's are its template's, never the
    /// workload's own (not even when it has no template), which are kept apart.
    #[test]
    fn the_pods_annotations_are_the_pods_or_its_templates() {
        let yaml = "apiVersion: v1\nkind: Pod\nmetadata: {name: p, annotations: {a: pod}}\nspec: {containers: [{name: app}]}\n---\n\
                    apiVersion: apps/v1\nkind: Deployment\nmetadata: {name: d, annotations: {a: deployment}}\n\
                    spec:\n  selector: {}\n  template:\n    metadata: {annotations: {a: template}}\n    \
                    spec: {containers: [{name: app}]}\n---\n\
                    apiVersion: batch/v1\nkind: Job\nmetadata: {name: j, annotations: {a: job}}\n\
                    spec:\n  template:\n    spec: {containers: [{name: app}]}\n---\n\
                    apiVersion: apps/v1\nkind: Deployment\nmetadata: {name: bare, annotations: {a: bare}}\n";
        let (workloads, errors, _) = parse("a.yaml", yaml);
        assert!(errors.is_empty(), "{errors:?}");
        let got: Vec<Option<&str>> = workloads
            .iter()
            .map(|w| w.annotations.as_ref().and_then(|a| a.get("a")).map(String::as_str))
            .collect();
        assert_eq!(got, [Some("pod"), Some("template"), None, None]);
        let own: Vec<Option<&str>> = workloads
            .iter()
            .map(|w| w.object_annotations.as_ref().and_then(|a| a.get("a")).map(String::as_str))
            .collect();
        assert_eq!(own, [None, Some("deployment"), Some("job"), Some("bare")], "a Pod's are its pod's");
    }

    #[test]
    fn the_templates_annotation_wins_over_the_objects() {
        let yaml = "apiVersion: apps/v1\nkind: Deployment\n\
                    metadata: {name: web, annotations: {lint.probelet.dev/start-seconds: '10'}}\n\
                    spec:\n  selector: {}\n  template:\n    metadata: {annotations: {lint.probelet.dev/start-seconds: '20'}}\n    \
                    spec: {containers: [{name: app}]}\n---\n\
                    apiVersion: apps/v1\nkind: Deployment\n\
                    metadata: {name: other, annotations: {lint.probelet.dev/start-seconds: '10'}}\n\
                    spec:\n  selector: {}\n  template:\n    spec: {containers: [{name: app}]}\n";
        let (workloads, errors, _) = parse("a.yaml", yaml);
        assert!(errors.is_empty(), "{errors:?}");
        let got: Vec<(String, String)> = workloads
            .iter()
            .map(|w| w.start_annotation.clone().map(|a| (a.field, a.value)).unwrap_or_default())
            .collect();
        assert_eq!(
            got,
            vec![
                ("spec.template.metadata.annotations[lint.probelet.dev/start-seconds]".into(), "20".into()),
                ("metadata.annotations[lint.probelet.dev/start-seconds]".into(), "10".into()),
            ]
        );
    }
}
