//! The lint report as text for a person or as one JSON document for CI.

use std::fmt::Write as _;

use serde::Serialize;
use serde_json::{Value, json};

use super::rules::{ContainerReport, Finding, Severity, Timings, rule};
use super::{ObjectReport, Report};
use crate::host::manifests::bounded_quotes;
use crate::logging::escape_controls;

/// The object as the report names it: `Deployment shop/web`, `Pod web` (no namespace written).
fn object_name(object: &ObjectReport) -> String {
    let w = &object.workload;
    match &w.namespace {
        Some(ns) => format!("{} {ns}/{}", w.kind, w.name),
        None => format!("{} {}", w.kind, w.name),
    }
}

/// The report as text: per object, per container its probes as the kubelet runs them, then the
/// findings (errors first); a summary line at the end. Files that could not be read are not
/// here: they go to standard error. Every line goes through [`line`].
pub fn text(report: &Report) -> String {
    let mut out = String::new();
    for object in &report.objects {
        // The file's path is not the manifest's text: it is not cut, its object's name is.
        let name = bounded_quotes(&object_name(object)).into_owned();
        out.push_str(&escape_controls(&format!("{}: {name}", object.workload.file.display())));
        out.push('\n');
        let findings = &object.lint.findings;
        for finding in sorted(findings.iter().filter(|f| f.container.is_none())) {
            write_finding(&mut out, "  ", finding);
        }
        // Containers go by where they are, not by name: two of the same name (which the API
        // server refuses, and which is reported) each keep their own probes and findings.
        let mut paths: Vec<(&str, &str)> =
            object.lint.containers.iter().map(|c| (c.path.as_str(), c.name.as_str())).collect();
        for finding in findings {
            if let (Some(path), Some(name)) =
                (finding.container_path.as_deref(), finding.container.as_deref())
                && !paths.iter().any(|(p, _)| *p == path)
            {
                paths.push((path, name));
            }
        }
        for (path, name) in paths {
            let container = object.lint.containers.iter().find(|c| c.path == path);
            let sidecar = if container.is_some_and(|c| c.sidecar) { " (sidecar)" } else { "" };
            line(&mut out, format_args!("  container {name}{sidecar}"));
            for probe in container.map(|c| c.probes.as_slice()).unwrap_or_default() {
                line(&mut out, format_args!("    {}: {}", probe.probe, describe(probe)));
                if !probe.defaulted.is_empty() {
                    line(&mut out, format_args!("      defaults: {}", probe.defaulted.join(", ")));
                }
            }
            let own = findings
                .iter()
                .filter(|f| f.container_path.as_deref() == Some(path) && f.rule != rule::DEFAULTS);
            for finding in sorted(own) {
                write_finding(&mut out, "    ", finding);
            }
        }
    }
    line(&mut out, format_args!("{}", summary_line(report)));
    out
}

fn describe(probe: &super::rules::EffectiveProbe) -> String {
    let mut text = format!(
        "{}, every {} s, timeout {} s, successThreshold {}, failureThreshold {}, initial delay {} s",
        probe.handler,
        probe.period_seconds,
        probe.timeout_seconds,
        probe.success_threshold,
        probe.failure_threshold,
        probe.initial_delay_seconds
    );
    if let Some(grace) = probe.termination_grace_period_seconds {
        let _ = write!(text, ", kill grace {grace} s");
    }
    text
}

/// Writes one line of the report with its control characters escaped (`\n`, `\u{1b}`): names,
/// paths, commands and file names come from whoever wrote the manifest, who could otherwise
/// end a line and start one that looks like the report's own (a fake summary), or drive the
/// terminal. The console's escaping, so that both read the same; and the console's cuts
/// ([`for_a_line`]): a 900 KB key is its first 255 characters and `…`, not a 900 KB line.
fn line(out: &mut String, text: std::fmt::Arguments<'_>) {
    out.push_str(&for_a_line(&text.to_string()));
    out.push('\n');
}

/// `text` (a line of lint's that quotes a manifest) as the agent's console writes such a
/// line: each word of more than 256 characters, and the whole past 4,096, cut with `…`
/// ([`bounded_quotes`]), control characters escaped.
fn for_a_line(text: &str) -> String {
    escape_controls(&bounded_quotes(text)).into_owned()
}

/// An error or a warning about a file, for a line of standard error: `<file>: <reason>`, the
/// reason cut as the console cuts it (`for_a_line`; the file's path is not cut), control
/// characters escaped.
pub fn file_line(error: &super::load::LoadError) -> String {
    escape_controls(&format!("{}: {}", error.file.display(), bounded_quotes(&error.reason))).into_owned()
}

fn sorted<'a>(findings: impl Iterator<Item = &'a Finding>) -> Vec<&'a Finding> {
    let mut findings: Vec<&Finding> = findings.collect();
    findings.sort_by_key(|f| std::cmp::Reverse(f.severity));
    findings
}

fn write_finding(out: &mut String, indent: &str, finding: &Finding) {
    let probe = finding.probe.map(|p| format!(" [{p}]")).unwrap_or_default();
    line(
        out,
        format_args!("{indent}{:<7} {}{probe}: {}", finding.severity.as_str(), finding.rule, finding.message),
    );
}

fn summary_line(report: &Report) -> String {
    let plural = |n: usize, one: &str, many: &str| format!("{n} {}", if n == 1 { one } else { many });
    let mut line = format!(
        "{}, {}",
        plural(report.files.len(), "file", "files"),
        plural(report.objects.len(), "object with a pod spec", "objects with a pod spec")
    );
    if report.skipped > 0 {
        let _ = write!(line, " ({} skipped)", plural(report.skipped, "other document", "other documents"));
    }
    // A file's own warning (an empty file) counts with the findings' for a person; the JSON
    // document keeps the two apart.
    let _ = write!(
        line,
        ": {}, {}",
        plural(report.count(Severity::Error), "error", "errors"),
        plural(report.count(Severity::Warning) + report.warnings.len(), "warning", "warnings")
    );
    if !report.errors.is_empty() {
        let _ = write!(
            line,
            "; {}",
            plural(report.errors.len(), "file or document not read", "files or documents not read")
        );
    }
    line
}

/// One finding in the JSON document: where it is, what it says, and its container's timings.
#[derive(Serialize)]
struct JsonFinding<'a> {
    file: String,
    kind: &'a str,
    namespace: Option<&'a str>,
    name: &'a str,
    #[serde(flatten)]
    finding: &'a Finding,
    timings: Option<&'a Timings>,
}

#[derive(Serialize)]
struct JsonObject<'a> {
    file: String,
    kind: &'a str,
    namespace: Option<&'a str>,
    name: &'a str,
    containers: &'a [ContainerReport],
}

/// The report as one JSON document: `findings` (every finding, with file, object, container,
/// probe, rule, severity, field, message and the container's timings), `objects` (each
/// container's probes after defaulting and its timings), `errors` (files not read), `warnings`
/// (files read with nothing to lint: an empty one) and `summary`.
pub fn json(report: &Report) -> Value {
    let mut findings = Vec::new();
    let mut objects = Vec::new();
    for object in &report.objects {
        let w = &object.workload;
        let file = w.file.display().to_string();
        for finding in &object.lint.findings {
            let timings = finding
                .container_path
                .as_deref()
                .and_then(|path| object.lint.containers.iter().find(|c| c.path == path))
                .and_then(|c| c.timings.as_ref());
            findings.push(JsonFinding {
                file: file.clone(),
                kind: &w.kind,
                namespace: w.namespace.as_deref(),
                name: &w.name,
                finding,
                timings,
            });
        }
        objects.push(JsonObject {
            file,
            kind: &w.kind,
            namespace: w.namespace.as_deref(),
            name: &w.name,
            containers: &object.lint.containers,
        });
    }
    let of_files = |list: &[super::load::LoadError]| -> Vec<Value> {
        list.iter().map(|e| json!({ "file": e.file.display().to_string(), "message": e.reason })).collect()
    };
    let errors = of_files(&report.errors);
    let warnings = of_files(&report.warnings);
    json!({
        "findings": findings,
        "objects": objects,
        "errors": errors,
        "warnings": warnings,
        "summary": {
            "files": report.files.len(),
            "objects": report.objects.len(),
            "skipped": report.skipped,
            "errors": report.count(Severity::Error),
            "warnings": report.count(Severity::Warning),
            "infos": report.count(Severity::Info),
            "unreadable": report.errors.len(),
            "file_warnings": report.warnings.len(),
            "exit_code": report.exit_code(),
        },
    })
}
