//! `probelet lint FILE|DIR`: what the kubelet will do with the probes of Pod manifests and of
//! workloads' pod templates, and where that will hurt — the API server's defaults, worst-case
//! times to Ready and to a liveness restart, and the probe set-ups that go wrong in production.
//! The kubelet has no such command; its behaviour that the timings follow is described in
//! `docs/prober.md`, the rules and formulas in `docs/lint.md`.
//!
//! [`load`] reads files and finds the pod specs, [`rules`] is pure (pod spec in, findings and
//! timings out), [`report`] prints text or JSON. Exit codes: 2 when a file cannot be read or
//! parsed, else 1 when any finding is an error, else 0.

pub mod load;
pub mod report;
pub mod rules;

use std::collections::HashMap;
use std::path::PathBuf;

use probelet_actors::FeatureGates;
use probelet_actors::gofmt::go_quote;

use crate::host::manifests::DEFAULT_NAMESPACE;

use load::{LoadError, Workload};
use rules::{PodLint, Severity};

/// Exit code when every object was read and none has an error.
pub const EXIT_OK: i32 = 0;
/// Exit code when a finding is an error.
pub const EXIT_ERRORS: i32 = 1;
/// Exit code when a file cannot be read or parsed.
pub const EXIT_UNREADABLE: i32 = 2;

/// The lint of one object.
#[derive(Debug, Clone, PartialEq)]
pub struct ObjectReport {
    pub workload: Workload,
    pub lint: PodLint,
}

/// The lint of every path.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Report {
    pub files: Vec<PathBuf>,
    pub objects: Vec<ObjectReport>,
    pub errors: Vec<LoadError>,
    /// Files read with nothing to lint in them (an empty file: no pod); they change no exit
    /// code, as the agent runs on without their pods.
    pub warnings: Vec<LoadError>,
    /// Documents without a pod spec.
    pub skipped: usize,
}

impl Report {
    /// Findings of the given severity, over all objects.
    pub fn count(&self, severity: Severity) -> usize {
        self.objects.iter().flat_map(|o| &o.lint.findings).filter(|f| f.severity == severity).count()
    }

    pub fn exit_code(&self) -> i32 {
        if !self.errors.is_empty() {
            EXIT_UNREADABLE
        } else if self.count(Severity::Error) > 0 {
            EXIT_ERRORS
        } else {
            EXIT_OK
        }
    }
}

/// Reads and lints every path, for an API server with the default feature gates.
pub fn lint_paths(paths: &[PathBuf]) -> Report {
    lint_paths_with(paths, &FeatureGates::default())
}

/// [`lint_paths`] for an API server running with `gates`.
pub fn lint_paths_with(paths: &[PathBuf], gates: &FeatureGates) -> Report {
    let loaded = load::load_paths(paths);
    let objects = loaded
        .workloads
        .into_iter()
        .map(|workload| {
            let mut lint = rules::lint_pod_spec_with(
                &workload.spec,
                workload.spec_path,
                workload.annotations.as_ref(),
                workload.start_annotation.as_ref(),
                gates,
            );
            // The API server checks an object's metadata before its spec: its name, namespace and
            // labels, then a workload's own annotations (a Pod's are its pod's, checked with its
            // spec), then a workload's selector against its template's labels, then the
            // template: its labels, then its pod.
            let mut metadata = rules::metadata_errors(
                &workload.kind,
                &workload.name,
                workload.namespace.as_deref(),
                workload.generate_name.as_deref(),
                workload.labels.as_ref(),
            );
            if workload.kind != "Pod" {
                metadata.extend(rules::object_errors(workload.object_annotations.as_ref()));
            }
            metadata.extend(rules::selector_errors(
                &workload.kind,
                &workload.workload_spec,
                workload.spec_path,
            ));
            metadata.extend(rules::template_label_errors(
                &workload.kind,
                &workload.workload_spec,
                workload.spec_path,
            ));
            // Fields the object's type does not have come first: the API server's strict
            // decoding refuses them before it validates anything.
            let mut first = rules::unknown_field_findings(&workload.unknown_fields);
            first.extend(metadata);
            lint.findings.splice(0..0, first);
            // After the pod spec's own errors, as the API server checks the template first.
            lint.findings.extend(rules::workload_errors(
                &workload.kind,
                &workload.name,
                &workload.spec,
                workload.spec_path,
                &workload.workload_spec,
            ));
            ObjectReport { workload, lint }
        })
        .collect();
    let mut report = Report {
        files: loaded.files,
        objects,
        errors: loaded.errors,
        warnings: loaded.warnings,
        skipped: loaded.skipped,
    };
    refuse_duplicate_pods(&mut report.objects);
    report
}

/// A Pod whose namespace/name an earlier Pod of the same folder has gets an error at
/// `metadata.name`: `probelet run` on that folder runs only one of them (the one running, else
/// the first in file-name order; docs/reliability.md, "A new manifest never displaces a running
/// pod"), and the API server would refuse the second as existing. Pods of other folders (other
/// nodes' manifests) may share a name.
fn refuse_duplicate_pods(objects: &mut [ObjectReport]) {
    let mut first: HashMap<(Option<PathBuf>, String, String), PathBuf> = HashMap::new();
    for object in objects.iter_mut().filter(|o| o.workload.kind == "Pod" && !o.workload.name.is_empty()) {
        let workload = &object.workload;
        let namespace = workload
            .namespace
            .clone()
            .filter(|n| !n.is_empty())
            .unwrap_or_else(|| DEFAULT_NAMESPACE.to_owned());
        // As the folder is, not as it was written: `pods/a.yaml` and `./pods/b.yaml` share one.
        let folder = workload.file.parent().map(|dir| {
            let dir = if dir.as_os_str().is_empty() { std::path::Path::new(".") } else { dir };
            std::fs::canonicalize(dir).unwrap_or_else(|_| dir.to_path_buf())
        });
        let key = (folder, namespace.clone(), workload.name.clone());
        match first.get(&key) {
            Some(earlier) => {
                let message = format!(
                    "metadata.name: Duplicate value: {}: pod {namespace}/{} is also in {}; `probelet run` on this folder runs only one of them",
                    go_quote(&workload.name),
                    workload.name,
                    earlier.display()
                );
                object.lint.findings.insert(0, rules::invalid_object("metadata.name".to_owned(), message));
            }
            None => {
                first.insert(key, workload.file.clone());
            }
        }
    }
}
