//! The lint rules: pure functions from a pod spec (as written, before the API server's
//! defaulting) to findings and the timings the kubelet's probe workers give it. No I/O; every
//! rule and formula is explained in `docs/lint.md`, the worker behaviour they come from in
//! `docs/prober.md` §1.2–§1.3 and §3.4.
//!
//! Defaulting and validation are the agent's own ([`apply_defaults`], [`validate_pod_spec`],
//! [`validate_object_metadata`], [`validate_annotations`]), so what `probelet run` refuses is
//! an error here with the same message and field path (less the agent's own rules for running
//! containers without images), and a default it fills in is the default reported here.
//!
//! This file holds the report types, the walk over a pod's containers ([`lint_pod_spec`]), the
//! API server's validation errors (the containers', the pod's own, and those of a workload's
//! name, selector and template that its kind adds) and the start-time annotation. Beside it: the effective probes
//! (`probe`), the per-container set-up rules (`container`) and the timing rules (`timing`).

use std::collections::{BTreeMap, BTreeSet};

use k8s_openapi::api::core::v1::{Container, Pod, PodSpec};
#[cfg(test)]
use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelectorRequirement;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelector, ObjectMeta};
use probelet_actors::FeatureGates;
use probelet_actors::gofmt::go_quote;
use probelet_actors::prober::ProbeKind;
use serde::Serialize;

use crate::host::manifests::{
    DEFAULT_RESTART_POLICY, DEFAULT_TERMINATION_GRACE_PERIOD_SECONDS, NameRule, apply_defaults,
    dns1123_label, unknown_fields_text, validate_annotations, validate_labels, validate_object_metadata,
    validate_pod_spec,
};
use probe::{Endpoint, effective_probe};

mod container;
mod probe;
mod selector;
mod timing;

pub use timing::timings;

/// The annotation that tells the linter how long a container takes to start, in seconds: `"45"`
/// for every container of the pod, or `"web=45,proxy=5"` per container (both forms may be
/// mixed; a named entry wins). Read from the pod template, else from the object's own metadata
/// (which does not roll a Deployment out when it changes).
pub const START_SECONDS_ANNOTATION: &str = "lint.probelet.dev/start-seconds";

/// The kubelet's floor for the grace period of a kill (`minimumGracePeriodInSeconds`).
pub const MINIMUM_KILL_GRACE_SECONDS: i64 = 2;

/// Below this period an exec probe is reported for its cost (the API server's default period).
pub const EXEC_PERIOD_FLOOR_SECONDS: i32 = 10;

/// Rule identifiers, as they appear in the output.
pub mod rule {
    /// A value the API server (or, for a port name, the kubelet when it probes) rejects.
    pub const INVALID: &str = "invalid";
    /// The lint annotation cannot be read.
    pub const BAD_ANNOTATION: &str = "bad-annotation";
    /// What a probe is after the API server's defaulting.
    pub const DEFAULTS: &str = "defaults";
    /// Worst-case time to Ready after the container starts and after a kubelet restart.
    pub const TIME_TO_READY: &str = "time-to-ready";
    /// Worst-case time from a broken liveness endpoint to the container being killed.
    pub const LIVENESS_RESTART: &str = "liveness-restart";
    /// Liveness checks what readiness checks and gives up no later.
    pub const LIVENESS_LIKE_READINESS: &str = "liveness-like-readiness";
    /// A probe can kill the container before it has started.
    pub const KILLED_BEFORE_START: &str = "killed-before-start";
    /// `timeoutSeconds` is not below `periodSeconds`.
    pub const TIMEOUT_NOT_BELOW_PERIOD: &str = "timeout-not-below-period";
    /// An exec probe with a period under 10 s.
    pub const EXEC_SHORT_PERIOD: &str = "exec-short-period";
    /// A field the object's type does not have (a misspelled `readinesProbe`).
    pub const UNKNOWN_FIELD: &str = "unknown-field";
}

/// How bad a finding is. `error`: the API server would reject the pod, or the probe can never
/// work; `warning`: it works, and will hurt; `info`: what the kubelet will do.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Severity {
    Info,
    Warning,
    Error,
}

impl Severity {
    pub fn as_str(self) -> &'static str {
        match self {
            Severity::Info => "info",
            Severity::Warning => "warning",
            Severity::Error => "error",
        }
    }
}

/// One thing the linter has to say about a pod spec.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Finding {
    pub severity: Severity,
    /// One of [`rule`].
    pub rule: &'static str,
    /// The container it is about, if any.
    pub container: Option<String>,
    /// Where that container is (`spec.containers[1]`): what tells it from another of the same
    /// name, which the API server refuses but a manifest can hold (the report groups by it).
    #[serde(skip)]
    pub container_path: Option<String>,
    /// The probe it is about (`livenessProbe`, `readinessProbe`, `startupProbe`), if any.
    pub probe: Option<&'static str>,
    /// The field path it is about, from the top of the object (`spec.template.spec…`).
    pub field: Option<String>,
    pub message: String,
}

/// A probe as the kubelet runs it: the API server's defaults applied.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct EffectiveProbe {
    /// `livenessProbe`, `readinessProbe` or `startupProbe`.
    pub probe: &'static str,
    /// What it checks, for a person (`httpGet http://<pod IP>:8080/healthz`).
    pub handler: String,
    pub initial_delay_seconds: i32,
    pub timeout_seconds: i32,
    pub period_seconds: i32,
    pub success_threshold: i32,
    pub failure_threshold: i32,
    /// Liveness and startup: the grace period of the kill a failure causes, before the 2 s floor
    /// (the probe's own, else the pod's).
    pub termination_grace_period_seconds: Option<i64>,
    /// The fields the API server fills in, with their values (`timeoutSeconds: 1`).
    pub defaulted: Vec<String>,
    #[serde(skip)]
    kind: ProbeKind,
    #[serde(skip)]
    endpoint: Endpoint,
}

/// Computed timings of one container, in whole seconds. Each is a worst case, an upper bound
/// that a probe schedule can come arbitrarily close to; `docs/lint.md` gives the formulas.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct Timings {
    /// From the container's start to its `ready: true`, when the app answers from the start.
    pub ready_after_start_seconds: Option<i64>,
    /// From a kubelet restart to the kubelet's own readiness verdict on a running container
    /// that was started (its `started` kept, the kubelet's default).
    pub ready_after_kubelet_restart_seconds: Option<i64>,
    /// The same when the kubelet drops `started` on a restart (feature
    /// `ChangeContainerStatusOnKubeletRestart`), so the startup probe runs again first; only
    /// with a startup probe.
    pub ready_after_kubelet_restart_rerunning_startup_seconds: Option<i64>,
    /// The earliest time after start at which a probe can have the container killed for not
    /// answering: the startup probe's, or the liveness probe's when there is no startup probe.
    pub start_tolerance_seconds: Option<i64>,
    /// From a liveness endpoint breaking to the failure that kills the container.
    pub liveness_detection_seconds: Option<i64>,
    /// The grace period of that kill (the 2 s floor applied).
    pub liveness_kill_grace_seconds: Option<i64>,
    /// Detection plus grace: from the endpoint breaking to the container being gone.
    pub liveness_restart_seconds: Option<i64>,
}

/// One container the kubelet probes (a regular container or a sidecar).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ContainerReport {
    pub name: String,
    /// Where it is in the object (`spec.containers[1]`); its findings' `container_path`.
    #[serde(skip)]
    pub path: String,
    /// A sidecar (an init container with `restartPolicy: Always`).
    pub sidecar: bool,
    /// Its probes, in the order startup, readiness, liveness.
    pub probes: Vec<EffectiveProbe>,
    /// `None` when the container's probes have errors.
    pub timings: Option<Timings>,
}

/// Everything the rules say about one pod spec.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct PodLint {
    pub findings: Vec<Finding>,
    pub containers: Vec<ContainerReport>,
}

/// The start-time annotation where it was found: its field path and its value.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StartAnnotation {
    /// `metadata.annotations[lint.probelet.dev/start-seconds]` or the template's.
    pub field: String,
    pub value: String,
}

/// Lints a pod spec found at `spec_path` (`spec` for a Pod, `spec.template.spec` for a
/// Deployment, …), with the pod's `annotations` (the Pod's own, or its template's). `spec` is
/// the spec as written: defaults are applied here, so that the findings can say which values
/// came from them.
pub fn lint_pod_spec(
    spec: &PodSpec,
    spec_path: &str,
    annotations: Option<&BTreeMap<String, String>>,
    start: Option<&StartAnnotation>,
) -> PodLint {
    lint_pod_spec_with(spec, spec_path, annotations, start, &FeatureGates::default())
}

/// [`lint_pod_spec`] for a cluster whose API server runs with `gates` (`probelet lint
/// --feature-gates`): what the API server accepts depends on them (a restart rule's
/// `RestartAllContainers` action only under `RestartAllContainersOnContainerExits`).
pub fn lint_pod_spec_with(
    spec: &PodSpec,
    spec_path: &str,
    annotations: Option<&BTreeMap<String, String>>,
    start: Option<&StartAnnotation>,
    gates: &FeatureGates,
) -> PodLint {
    let mut lint = PodLint::default();
    lint.findings.extend(pod_errors(spec, spec_path, annotations, gates));
    // Where a container with a probe error is: its probes' numbers would be about a pod the API
    // server does not take. Its other errors (a duplicate name, a bad port) leave them alone.
    let probe_errors: BTreeSet<String> =
        lint.findings.iter().filter(|f| f.probe.is_some()).filter_map(|f| f.container_path.clone()).collect();
    let defaulted = defaulted_spec(spec);
    let starts = match start.map(|a| parse_start_seconds(&a.value, spec).map_err(|e| (a, e))) {
        None => KnownStarts::default(),
        Some(Ok(starts)) => starts,
        Some(Err((annotation, reason))) => {
            lint.findings.push(Finding {
                severity: Severity::Error,
                rule: rule::BAD_ANNOTATION,
                container: None,
                container_path: None,
                probe: None,
                field: Some(annotation.field.clone()),
                message: format!(
                    "{}: Invalid value: {}: {reason}",
                    annotation.field,
                    go_quote(&annotation.value)
                ),
            });
            KnownStarts::default()
        }
    };
    let pod_grace =
        defaulted.termination_grace_period_seconds.unwrap_or(DEFAULT_TERMINATION_GRACE_PERIOD_SECONDS);
    let restart_policy = defaulted.restart_policy.clone().unwrap_or_default();
    let containers =
        spec.containers.iter().zip(&defaulted.containers).enumerate().map(|(i, c)| (false, i, c));
    let init = spec.init_containers.iter().flatten().zip(defaulted.init_containers.iter().flatten());
    for (is_init, i, (raw, container)) in containers.chain(init.enumerate().map(|(i, c)| (true, i, c))) {
        let path = container_path(spec_path, is_init, i);
        let sidecar = is_init && container.restart_policy.as_deref() == Some("Always");
        if is_init && !sidecar {
            continue;
        }
        let probes: Vec<EffectiveProbe> = ProbeKind::ADD_ORDER
            .into_iter()
            .filter_map(|kind| {
                effective_probe(kind, raw, container, pod_grace, spec.termination_grace_period_seconds)
            })
            .collect();
        if probes.is_empty() {
            continue;
        }
        let timings = (!probe_errors.contains(&path)).then(|| {
            let context = ContainerContext {
                container,
                path: &path,
                probes: &probes,
                known_start: starts.of(&container.name),
                start_annotation: start.map(|a| a.field.as_str()),
                // A sidecar is started again whatever the pod's policy; a regular container
                // that sets its own policy follows it (ContainerRestartRules, on since v1.35;
                // a probe's kill reads no exit-code rules).
                restart_policy: if sidecar {
                    "Always"
                } else {
                    container.restart_policy.as_deref().unwrap_or(&restart_policy)
                },
            };
            context.rules(&mut lint.findings)
        });
        lint.containers.push(ContainerReport {
            name: container.name.clone(),
            path,
            sidecar,
            probes,
            timings,
        });
    }
    lint
}

/// Where the pod's metadata is in an object whose pod spec is at `spec_path`: `metadata` for a
/// Pod, the template's (`spec.template.metadata`) for a workload.
pub fn metadata_path(spec_path: &str) -> String {
    match spec_path.strip_suffix(".spec") {
        Some(template) => format!("{template}.metadata"),
        None => "metadata".to_owned(),
    }
}

/// Where the container `i` of a pod spec at `spec_path` is (`spec.initContainers[0]`).
fn container_path(spec_path: &str, init: bool, i: usize) -> String {
    format!("{spec_path}.{}[{i}]", if init { "initContainers" } else { "containers" })
}

/// What the API server refuses in the pod (what `probelet run` refuses too, less its own rules
/// for containers without images), in its order: the annotations' keys and size, then the spec
/// ([`validate_pod_spec`]). An error under a container is that container's (and its probe's,
/// when it is under one); any other (`restartPolicy`, `activeDeadlineSeconds`) is about no
/// container, and leaves the containers' findings and timings alone.
fn pod_errors(
    spec: &PodSpec,
    spec_path: &str,
    annotations: Option<&BTreeMap<String, String>>,
    gates: &FeatureGates,
) -> Vec<Finding> {
    // The API server validates a template's metadata under the template's own path, so its
    // message says `spec.template.annotations`; the finding's field is where they are written.
    let upstream_annotations = match spec_path.strip_suffix(".spec") {
        Some(template) => format!("{template}.annotations"),
        None => "metadata.annotations".to_owned(),
    };
    let mut findings: Vec<Finding> = validate_annotations(annotations, &upstream_annotations)
        .into_iter()
        .map(|message| invalid_object(format!("{}.annotations", metadata_path(spec_path)), message))
        .collect();
    let containers =
        spec.containers.iter().enumerate().map(|(i, c)| (container_path(spec_path, false, i), c));
    let init = spec.init_containers.iter().flatten().enumerate();
    let containers: Vec<(String, &Container)> =
        containers.chain(init.map(|(i, c)| (container_path(spec_path, true, i), c))).collect();
    // A lint checks a pod for a cluster: the gates are its API server's (the defaults unless
    // `--feature-gates` says otherwise).
    for error in validate_pod_spec(spec, spec_path, gates, false) {
        let field = error_field(&error);
        let owner = containers.iter().find(|(path, _)| under(field, path));
        findings.push(match owner {
            Some((path, container)) => invalid(container, path, &error),
            None => invalid_object(field.to_owned(), error),
        });
    }
    findings
}

/// The field an API server error names: the text before its first `": "`.
fn error_field(error: &str) -> &str {
    error.split(": ").next().unwrap_or_default()
}

/// `field` is `path` or a field inside it: `spec.containers[1].name` is under
/// `spec.containers[1]`, `spec.containers[10].name` is not.
fn under(field: &str, path: &str) -> bool {
    field.strip_prefix(path).is_some_and(|rest| rest.is_empty() || rest.starts_with('.'))
}

/// What the API server refuses in an object's own `metadata.name`, `metadata.namespace` and
/// `metadata.labels` (`ValidateObjectMeta`, with the name rule of its `kind`: an RFC 1123 label
/// for a StatefulSet, a subdomain for the others; a `generateName` stands in for a missing name,
/// as the API server makes one from it; each label's key and value, [`validate_labels`]). A
/// workload's pod is its template, whose name the workload's controller makes and whose labels
/// are checked with it ([`template_label_errors`]).
pub fn metadata_errors(
    kind: &str,
    name: &str,
    namespace: Option<&str>,
    generate_name: Option<&str>,
    labels: Option<&BTreeMap<String, String>>,
) -> Vec<Finding> {
    let meta = ObjectMeta {
        name: Some(name.to_owned()),
        namespace: namespace.map(str::to_owned),
        generate_name: generate_name.map(str::to_owned),
        labels: labels.cloned(),
        ..Default::default()
    };
    let rule = if kind == "StatefulSet" { NameRule::Label } else { NameRule::Subdomain };
    validate_object_metadata(&meta, rule, false)
        .into_iter()
        .map(|error| invalid_object(error_field(&error).to_owned(), error))
        .collect()
}

/// What the API server refuses in a workload's pod template's labels (`ValidatePodTemplateSpec`
/// checks them before the template's annotations and pod): each key and value as a Pod's
/// ([`validate_labels`]), named at the template's own path as the API server names them
/// (`spec.template.labels`), the finding's field where they are written
/// (`spec.template.metadata.labels`). None for a Pod, whose labels are its own
/// ([`metadata_errors`]).
pub fn template_label_errors(kind: &str, workload: &WorkloadSpec, spec_path: &str) -> Vec<Finding> {
    let Some(template) = spec_path.strip_suffix(".spec").filter(|_| kind != "Pod") else {
        return Vec::new();
    };
    let field = format!("{}.labels", metadata_path(spec_path));
    validate_labels(workload.template_labels.as_ref(), &format!("{template}.labels"))
        .into_iter()
        .map(|message| invalid_object(field.clone(), message))
        .collect()
}

/// What the API server refuses in a workload's own metadata: its `annotations`' keys and their
/// size, as a Pod's, in the same words (`ValidateObjectMeta` checks every kind's under
/// `metadata`). A Pod's own annotations are its pod's, checked with its spec ([`lint_pod_spec`]).
pub fn object_errors(annotations: Option<&BTreeMap<String, String>>) -> Vec<Finding> {
    let field = "metadata.annotations";
    validate_annotations(annotations, field)
        .into_iter()
        .map(|message| invalid_object(field.to_owned(), message))
        .collect()
}

/// What lint reads of a workload's spec beside its pod spec, for the API server's rules of the
/// workload's kind (all empty for a Pod).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct WorkloadSpec {
    /// Its `spec.selector` as written (a CronJob's: its job template's).
    pub selector: Option<LabelSelector>,
    /// Its pod template's `metadata.labels`.
    pub template_labels: Option<BTreeMap<String, String>>,
    /// A Job's (or a CronJob's job's) `spec.manualSelector: true`: its selector is the user's,
    /// not generated.
    pub manual_selector: bool,
    /// A Job's (or a CronJob's job's) `spec.podFailurePolicy` is set.
    pub pod_failure_policy: bool,
    /// A Job's `spec.completions` when its `completionMode` is `Indexed`.
    pub indexed_completions: Option<i32>,
}

/// The kinds whose template is validated as a ReplicaSet's, a StatefulSet's or a DaemonSet's:
/// pods that run for good, `restartPolicy: Always`.
fn keeps_pods_running(kind: &str) -> bool {
    matches!(kind, "Deployment" | "ReplicaSet" | "StatefulSet" | "DaemonSet")
}

/// The label the API server adds to a Job's generated selector, with the Job's UID.
const JOB_CONTROLLER_UID_LABEL: &str = "batch.kubernetes.io/controller-uid";

/// What lint writes for a Job's UID, which the API server prints in one message and which does
/// not exist before the Job is created.
const UID_PLACEHOLDER: &str = "<uid>";

/// What the API server refuses in a workload's selector, which it checks before the template's
/// pod, in its order and words:
///
/// * a Deployment's, ReplicaSet's or StatefulSet's: `ValidateLabelSelector`'s errors
///   (`selector::validate_label_selector`), then an empty selector (`empty selector is invalid
///   for deployment`: a ReplicaSet's says `deployment` too; `… for statefulset`), then one that
///   cannot be made a selector (`invalid label selector`; a StatefulSet's has no detail) or that
///   does not select the template's labels (`selector_mismatch`);
/// * a DaemonSet's: the selector's errors, then the mismatch, then `… for daemonset`;
/// * a Job's without `manualSelector: true`: the API server adds its own
///   `batch.kubernetes.io/controller-uid` entry to the selector, which must then select only the
///   labels it generates, or ``spec.selector: Invalid value: v1.LabelSelector{…}: `selector` not
///   auto-generated`` (the Job's UID printed as `<uid>`: it has none yet).
pub fn selector_errors(kind: &str, workload: &WorkloadSpec, spec_path: &str) -> Vec<Finding> {
    let Some(given) = workload.selector.as_ref() else { return Vec::new() };
    let field = "spec.selector";
    let mut messages = Vec::new();
    if kind == "Job" {
        if !workload.manual_selector {
            // Matched with a UID of a valid label value's form; printed as `<uid>`.
            let with_uid = |uid: &str| {
                let mut merged = given.clone();
                merged
                    .match_labels
                    .get_or_insert_with(BTreeMap::new)
                    .entry(JOB_CONTROLLER_UID_LABEL.to_owned())
                    .or_insert_with(|| uid.to_owned());
                merged
            };
            let uid = "0-uid";
            let generated = BTreeMap::from([(JOB_CONTROLLER_UID_LABEL.to_owned(), uid.to_owned())]);
            if selector::selects(&with_uid(uid), &generated) == Some(false) {
                messages.push(format!(
                    "{field}: Invalid value: {}: `selector` not auto-generated",
                    selector::go_label_selector(&with_uid(UID_PLACEHOLDER))
                ));
            }
        }
    } else if keeps_pods_running(kind) {
        let errors = selector::validate_label_selector(given, field);
        let empty = selector::is_empty(given).then(|| {
            let named = match kind {
                "StatefulSet" => "statefulset",
                "DaemonSet" => "daemonset",
                _ => "deployment",
            };
            format!(
                "{field}: Invalid value: {}: empty selector is invalid for {named}",
                selector::go_label_selector(given)
            )
        });
        let mismatch = selector_mismatch(workload, spec_path).map(|f| f.message);
        messages.extend(errors.iter().cloned());
        if kind == "DaemonSet" {
            messages.extend(mismatch);
            messages.extend(empty);
        } else {
            messages.extend(empty);
            if errors.is_empty() {
                messages.extend(mismatch);
            } else if kind == "StatefulSet" {
                messages.push(format!("{field}: Invalid value: {}", selector::go_label_selector(given)));
            } else {
                messages.push(format!(
                    "{field}: Invalid value: {}: invalid label selector",
                    selector::go_label_selector(given)
                ));
            }
        }
    }
    messages.into_iter().map(|message| invalid_object(error_field(&message).to_owned(), message)).collect()
}

/// `spec.template.metadata.labels: Invalid value: map[string]string{…}: `selector` does not
/// match template `labels``, when a non-empty selector that the API server can read
/// ([`selector::selects`]: `matchLabels` and `matchExpressions`) does not select the template's
/// labels. An empty selector selects everything; one it cannot read is refused for that
/// instead.
fn selector_mismatch(workload: &WorkloadSpec, spec_path: &str) -> Option<Finding> {
    let given = workload.selector.as_ref()?;
    if selector::is_empty(given) {
        return None;
    }
    let no_labels = BTreeMap::new();
    let labels = workload.template_labels.as_ref();
    if selector::selects(given, labels.unwrap_or(&no_labels))? {
        return None;
    }
    let field = format!("{}.labels", metadata_path(spec_path));
    let message = format!(
        "{field}: Invalid value: {}: `selector` does not match template `labels`",
        go_string_map(labels)
    );
    Some(invalid_object(field, message))
}

/// A `map[string]string` as Go's `%#v` prints it (keys sorted): what the API server prints for
/// a bad map value.
fn go_string_map(map: Option<&BTreeMap<String, String>>) -> String {
    match map {
        None => "map[string]string(nil)".to_owned(),
        Some(map) => {
            let entries: Vec<String> =
                map.iter().map(|(k, v)| format!("{}:{}", go_quote(k), go_quote(v))).collect();
            format!("map[string]string{{{}}}", entries.join(", "))
        }
    }
}

/// The longest name a CronJob may have (`ValidateCronJobCreate`): its Jobs are named after it
/// with an 11-character suffix, within a Job name's 63.
pub const MAX_CRON_JOB_NAME_LENGTH: usize = 52;

/// What the API server refuses in the pod template of a workload of `kind` and not in a Pod,
/// after the template's pod, in its order:
///
/// * the template's `restartPolicy` (`Always` when unset): `Always` in a Deployment, ReplicaSet,
///   StatefulSet or DaemonSet; `OnFailure` or `Never` in a Job's or a CronJob's, and `Never`
///   with a `podFailurePolicy`;
/// * any `activeDeadlineSeconds` in the template of a workload that keeps its pods running (the
///   apps group's validation, which names the kind); a Job's and a CronJob's may set one;
/// * a Job's own selector (`manualSelector: true`): required, `ValidateLabelSelector`'s errors,
///   and it must select its template's labels (`selector_mismatch`; a generated selector always
///   does);
/// * a CronJob's job's `selector` (`` `selector` will be auto-generated ``) or `manualSelector:
///   true` (`Unsupported value: true`);
/// * a CronJob's `metadata.name` over 52 characters;
/// * an indexed Job (`completionMode: Indexed`) whose last pod's hostname (its name, a dash and
///   `completions - 1`) is not an RFC 1123 label (`will not able to create pod with invalid DNS label`).
pub fn workload_errors(
    kind: &str,
    name: &str,
    spec: &PodSpec,
    spec_path: &str,
    workload: &WorkloadSpec,
) -> Vec<Finding> {
    let mut findings: Vec<Finding> =
        template_restart_policy(kind, spec, spec_path, workload).into_iter().collect();
    // A Deployment's template is validated as its ReplicaSets' is, and says so.
    let named = match kind {
        "Deployment" | "ReplicaSet" => Some("ReplicaSet"),
        "StatefulSet" | "DaemonSet" => Some(kind),
        _ => None,
    };
    if let (Some(named), Some(_)) = (named, spec.active_deadline_seconds) {
        let field = format!("{spec_path}.activeDeadlineSeconds");
        let message = format!("{field}: Forbidden: activeDeadlineSeconds in {named} is not Supported");
        findings.push(invalid_object(field, message));
    }
    if kind == "Job" && workload.manual_selector {
        match workload.selector.as_ref() {
            None => {
                let field = "spec.selector";
                findings.push(invalid_object(field.to_owned(), format!("{field}: Required value")));
                // No selector selects nothing: not the template's labels either.
                let field = format!("{}.labels", metadata_path(spec_path));
                let message = format!(
                    "{field}: Invalid value: {}: `selector` does not match template `labels`",
                    go_string_map(workload.template_labels.as_ref())
                );
                findings.push(invalid_object(field, message));
            }
            Some(given) => {
                findings.extend(
                    selector::validate_label_selector(given, "spec.selector")
                        .into_iter()
                        .map(|message| invalid_object(error_field(&message).to_owned(), message)),
                );
                findings.extend(selector_mismatch(workload, spec_path));
            }
        }
    }
    if kind == "CronJob" {
        // Its jobs' selectors are always generated.
        let field = "spec.jobTemplate.spec.selector";
        if let Some(given) = workload.selector.as_ref() {
            let message = format!(
                "{field}: Invalid value: {}: `selector` will be auto-generated",
                selector::go_label_selector(given)
            );
            findings.push(invalid_object(field.to_owned(), message));
        }
        if workload.manual_selector {
            let field = "spec.jobTemplate.spec.manualSelector";
            let message = format!("{field}: Unsupported value: true: supported values: \"nil\", \"false\"");
            findings.push(invalid_object(field.to_owned(), message));
        }
    }
    // An indexed Job's pods are named and hostnamed after it with their index: the last one's
    // hostname must be an RFC 1123 label (`ValidateJob`).
    if kind == "Job"
        && !name.is_empty()
        && let Some(completions) = workload.indexed_completions.filter(|c| *c > 0)
    {
        let hostname = format!("{name}-{}", completions - 1);
        if !dns1123_label(&hostname).is_empty() {
            let field = "metadata.name";
            let message = format!(
                "{field}: Invalid value: {}: will not able to create pod with invalid DNS label: {hostname}",
                go_quote(name)
            );
            findings.push(invalid_object(field.to_owned(), message));
        }
    }
    if kind == "CronJob" && name.len() > MAX_CRON_JOB_NAME_LENGTH {
        let field = "metadata.name";
        let message = format!(
            "{field}: Invalid value: {}: must be no more than {MAX_CRON_JOB_NAME_LENGTH} characters",
            go_quote(name)
        );
        findings.push(invalid_object(field.to_owned(), message));
    }
    findings
}

/// The template's `restartPolicy` against its workload's kind (`Always` when unset, as the API
/// server defaults it before it validates), in the API server's words: `NotSupported` for a
/// workload that keeps its pods running; for a Job's, `Required` when `Always`, `NotSupported`
/// for a value that is none of the three (the pod's own check refuses it too), and `Invalid`
/// for `OnFailure` beside a `podFailurePolicy`.
fn template_restart_policy(
    kind: &str,
    spec: &PodSpec,
    spec_path: &str,
    workload: &WorkloadSpec,
) -> Option<Finding> {
    let policy = spec.restart_policy.as_deref().filter(|p| !p.is_empty()).unwrap_or(DEFAULT_RESTART_POLICY);
    let field = format!("{spec_path}.restartPolicy");
    let message = if keeps_pods_running(kind) {
        if policy == "Always" {
            return None;
        }
        format!("{field}: Unsupported value: {}: supported values: \"Always\"", go_quote(policy))
    } else if matches!(kind, "Job" | "CronJob") {
        match policy {
            "Always" => format!("{field}: Required value: valid values: \"OnFailure\", \"Never\""),
            "OnFailure" if workload.pod_failure_policy => format!(
                "{field}: Invalid value: \"OnFailure\": only \"Never\" is supported when podFailurePolicy is specified"
            ),
            "OnFailure" | "Never" => return None,
            other => format!(
                "{field}: Unsupported value: {}: supported values: \"OnFailure\", \"Never\"",
                go_quote(other)
            ),
        }
    } else {
        return None;
    };
    Some(invalid_object(field, message))
}

/// What follows the API server's words in an `unknown-field` finding: who ignores the field and
/// who refuses it, and that "unknown" means unknown to the v1.35 API lint reads.
const UNKNOWN_FIELD_EFFECT: &str = "the kubelet ignores it, and so does `probelet run` (a misspelled \
     probe is no probe), while the API server's strict field validation, kubectl's default, refuses \
     the object. Fields are checked against the v1.35 API: one that only a newer cluster has is \
     reported too";

/// One `unknown-field` warning per path of a field the object holds that its type does not
/// have, in the API server's words (`unknown field "spec.containers[0].readinesProbe"`), about
/// the object as a whole.
pub fn unknown_field_findings(paths: &[String]) -> Vec<Finding> {
    paths
        .iter()
        .map(|path| Finding {
            severity: Severity::Warning,
            rule: rule::UNKNOWN_FIELD,
            container: None,
            container_path: None,
            probe: None,
            field: Some(path.clone()),
            message: format!("{}: {UNKNOWN_FIELD_EFFECT}", unknown_fields_text(std::slice::from_ref(path))),
        })
        .collect()
}

/// An error the API server gives about `field` of the object as a whole: of no container and
/// no probe.
pub(crate) fn invalid_object(field: String, message: String) -> Finding {
    Finding {
        severity: Severity::Error,
        rule: rule::INVALID,
        container: None,
        container_path: None,
        probe: None,
        field: Some(field),
        message,
    }
}

fn defaulted_spec(spec: &PodSpec) -> PodSpec {
    let mut pod = Pod { spec: Some(spec.clone()), ..Default::default() };
    apply_defaults(&mut pod);
    pod.spec.unwrap_or_default()
}

/// A validation error as a finding, attributed to the probe its field path names.
fn invalid(container: &Container, path: &str, error: &str) -> Finding {
    let field = error_field(error);
    let probe = ProbeKind::ADD_ORDER.into_iter().map(probe_field).find(|probe| {
        field.strip_prefix(path).and_then(|rest| rest.strip_prefix('.')).is_some_and(|rest| {
            rest.strip_prefix(probe).is_some_and(|after| after.is_empty() || after.starts_with('.'))
        })
    });
    Finding {
        severity: Severity::Error,
        rule: rule::INVALID,
        container: Some(container.name.clone()),
        container_path: Some(path.to_owned()),
        probe,
        field: Some(field.to_owned()),
        message: error.to_owned(),
    }
}

/// The probe's field name in a container.
pub fn probe_field(kind: ProbeKind) -> &'static str {
    match kind {
        ProbeKind::Liveness => "livenessProbe",
        ProbeKind::Readiness => "readinessProbe",
        ProbeKind::Startup => "startupProbe",
    }
}

// === start-time annotation ===

#[derive(Debug, Clone, Default, PartialEq, Eq)]
struct KnownStarts {
    all: Option<i64>,
    by_container: BTreeMap<String, i64>,
}

impl KnownStarts {
    fn of(&self, container: &str) -> Option<i64> {
        self.by_container.get(container).copied().or(self.all)
    }
}

const START_SECONDS_FORMAT: &str =
    "must be a whole number of seconds, or container=seconds entries separated by commas";

fn parse_start_seconds(value: &str, spec: &PodSpec) -> Result<KnownStarts, String> {
    let mut starts = KnownStarts::default();
    let seconds =
        |s: &str| s.trim().parse::<u32>().map(i64::from).map_err(|_| START_SECONDS_FORMAT.to_owned());
    for entry in value.split(',') {
        match entry.split_once('=') {
            None => starts.all = Some(seconds(entry)?),
            Some((name, value)) => {
                let name = name.trim();
                let known = spec
                    .containers
                    .iter()
                    .chain(spec.init_containers.iter().flatten())
                    .any(|c| c.name == name);
                if !known {
                    return Err(format!("{} names no container of the pod", go_quote(name)));
                }
                starts.by_container.insert(name.to_owned(), seconds(value)?);
            }
        }
    }
    Ok(starts)
}

// === per-container rules ===

struct ContainerContext<'a> {
    container: &'a Container,
    path: &'a str,
    probes: &'a [EffectiveProbe],
    known_start: Option<i64>,
    start_annotation: Option<&'a str>,
    restart_policy: &'a str,
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A pod spec from YAML.
    pub(super) fn spec(yaml: &str) -> PodSpec {
        serde_saphyr::from_str(yaml).unwrap()
    }

    pub(super) fn lint_yaml(yaml: &str) -> PodLint {
        lint_pod_spec(&spec(yaml), "spec", None, None)
    }

    pub(super) fn lint_with_start(yaml: &str, start: &str) -> PodLint {
        let annotation = StartAnnotation {
            field: format!("metadata.annotations[{START_SECONDS_ANNOTATION}]"),
            value: start.into(),
        };
        lint_pod_spec(&spec(yaml), "spec", None, Some(&annotation))
    }

    pub(super) fn with_rule<'a>(lint: &'a PodLint, rule: &str) -> Vec<&'a Finding> {
        lint.findings.iter().filter(|f| f.rule == rule).collect()
    }

    pub(super) fn timings_of(lint: &PodLint, container: &str) -> Timings {
        lint.containers.iter().find(|c| c.name == container).and_then(|c| c.timings).unwrap()
    }

    /// One container `web` with port `http` 8080 and the given probes (YAML at the probe level).
    pub(super) fn web(probes: &str) -> String {
        let probes: String = probes.lines().map(|l| format!("    {l}\n")).collect();
        format!(
            "containers:\n  - name: web\n    image: web:1\n    ports:\n      - name: http\n        containerPort: 8080\n{probes}"
        )
    }

    pub(super) const HTTP_LIVENESS: &str = "livenessProbe:\n  httpGet: {path: /healthz, port: http}\n";
    pub(super) const HTTP_READINESS: &str = "readinessProbe:\n  httpGet: {path: /healthz, port: http}\n";

    #[test]
    fn invalid_values_are_errors_with_the_api_servers_wording() {
        let cases = [
            (
                "negative period",
                "livenessProbe:\n  tcpSocket: {port: 8080}\n  periodSeconds: -1\n",
                "spec.containers[0].livenessProbe.periodSeconds: Invalid value: -1: must be greater than or equal to 0",
                Some("livenessProbe"),
            ),
            (
                "success threshold on liveness",
                "livenessProbe:\n  tcpSocket: {port: 8080}\n  successThreshold: 2\n",
                "spec.containers[0].livenessProbe.successThreshold: Invalid value: 2: must be 1",
                Some("livenessProbe"),
            ),
            (
                "success threshold on startup",
                "startupProbe:\n  tcpSocket: {port: 8080}\n  successThreshold: 3\n",
                "spec.containers[0].startupProbe.successThreshold: Invalid value: 3: must be 1",
                Some("startupProbe"),
            ),
            (
                "port name that names no port",
                "readinessProbe:\n  httpGet: {path: /, port: metrics}\n",
                "spec.containers[0].readinessProbe.httpGet.port: Invalid value: \"metrics\": must be the name of one of the container's ports",
                Some("readinessProbe"),
            ),
            (
                "grace period on readiness",
                "readinessProbe:\n  tcpSocket: {port: 8080}\n  terminationGracePeriodSeconds: 5\n",
                "spec.containers[0].readinessProbe.terminationGracePeriodSeconds: Invalid value: 5: must not be set for readinessProbes",
                Some("readinessProbe"),
            ),
            (
                "no handler",
                "livenessProbe:\n  periodSeconds: 5\n",
                "spec.containers[0].livenessProbe: Required value: must specify a handler type",
                Some("livenessProbe"),
            ),
        ];
        for (name, probes, message, probe) in cases {
            let lint = lint_yaml(&web(probes));
            let errors = with_rule(&lint, rule::INVALID);
            assert_eq!(errors.len(), 1, "case {name}: {:?}", lint.findings);
            assert_eq!(errors[0].severity, Severity::Error, "case {name}");
            assert_eq!(errors[0].message, message, "case {name}");
            assert_eq!(errors[0].probe, probe, "case {name}");
            assert_eq!(errors[0].container.as_deref(), Some("web"), "case {name}");
            assert_eq!(errors[0].field.as_deref(), message.split(": ").next(), "case {name}");
            assert_eq!(lint.containers[0].timings, None, "case {name}: no timings from invalid values");
        }
    }

    #[test]
    fn valid_probes_and_defaulted_zeroes_are_no_errors() {
        // A zero period is "unset" to the API server, which fills in 10; no command is needed.
        let lint = lint_yaml(&web("livenessProbe:\n  tcpSocket: {port: http}\n  periodSeconds: 0\n"));
        assert!(with_rule(&lint, rule::INVALID).is_empty(), "{:?}", lint.findings);
        assert_eq!(lint.containers[0].probes[0].period_seconds, 10);
        assert!(lint.containers[0].probes[0].defaulted.contains(&"periodSeconds: 10".to_owned()));
    }

    #[test]
    fn probes_of_plain_init_containers_are_errors_and_sidecars_are_linted() {
        let lint = lint_yaml(
            "initContainers:\n  - name: migrate\n    image: m\n    readinessProbe:\n      tcpSocket: {port: 1}\n  \
             - name: proxy\n    image: p\n    restartPolicy: Always\n    readinessProbe:\n      tcpSocket: {port: 1}\n\
             containers:\n  - name: app\n    image: a\n",
        );
        let errors = with_rule(&lint, rule::INVALID);
        assert_eq!(errors.len(), 1, "{:?}", lint.findings);
        assert_eq!(
            errors[0].message,
            "spec.initContainers[0].readinessProbe: Forbidden: may not be set for init containers without restartPolicy=Always"
        );
        let names: Vec<(&str, bool)> = lint.containers.iter().map(|c| (c.name.as_str(), c.sidecar)).collect();
        assert_eq!(names, vec![("proxy", true)]);
    }

    #[test]
    fn field_paths_start_at_the_objects_top() {
        let lint = lint_pod_spec(
            &spec(&web("livenessProbe:\n  tcpSocket: {port: 8080}\n  timeoutSeconds: -2\n")),
            "spec.template.spec",
            None,
            None,
        );
        let errors = with_rule(&lint, rule::INVALID);
        assert_eq!(
            errors[0].message,
            "spec.template.spec.containers[0].livenessProbe.timeoutSeconds: Invalid value: -2: must be greater than or equal to 0"
        );
        let lint =
            lint_pod_spec(&spec(&web(HTTP_READINESS)), "spec.jobTemplate.spec.template.spec", None, None);
        let defaults = with_rule(&lint, rule::DEFAULTS);
        assert_eq!(
            defaults[0].field.as_deref(),
            Some("spec.jobTemplate.spec.template.spec.containers[0].readinessProbe")
        );
    }

    /// The pod's `activeDeadlineSeconds` and the size of its annotations, checked by the agent's
    /// own validation: errors about no container, with the API server's message, for a Pod and
    /// for a template (whose annotations the API server names by the template's path).
    #[test]
    fn active_deadline_and_annotation_bytes_are_errors_about_the_pod() {
        let range = "must be between 1 and 2147483647, inclusive";
        let too_long = "Too long: may not be more than 262144 bytes";
        let annotations = |bytes: usize| BTreeMap::from([("a".to_owned(), "x".repeat(bytes - 1))]);
        let cases = [
            (
                "deadline 0",
                "spec",
                Some(0),
                0,
                Some((
                    "spec.activeDeadlineSeconds",
                    format!("spec.activeDeadlineSeconds: Invalid value: 0: {range}"),
                )),
            ),
            (
                "negative deadline",
                "spec",
                Some(-1),
                0,
                Some((
                    "spec.activeDeadlineSeconds",
                    format!("spec.activeDeadlineSeconds: Invalid value: -1: {range}"),
                )),
            ),
            (
                "deadline past int32",
                "spec",
                Some(2_147_483_648),
                0,
                Some((
                    "spec.activeDeadlineSeconds",
                    format!("spec.activeDeadlineSeconds: Invalid value: 2147483648: {range}"),
                )),
            ),
            ("deadline 1", "spec", Some(1), 0, None),
            ("largest deadline", "spec", Some(2_147_483_647), 0, None),
            (
                "template deadline 0",
                "spec.template.spec",
                Some(0),
                0,
                Some((
                    "spec.template.spec.activeDeadlineSeconds",
                    format!("spec.template.spec.activeDeadlineSeconds: Invalid value: 0: {range}"),
                )),
            ),
            ("annotations of 256 KiB", "spec", None, 262_144, None),
            (
                "annotations a byte over",
                "spec",
                None,
                262_145,
                Some(("metadata.annotations", format!("metadata.annotations: {too_long}"))),
            ),
            (
                "template annotations a byte over",
                "spec.template.spec",
                None,
                262_145,
                Some((
                    "spec.template.metadata.annotations",
                    format!("spec.template.annotations: {too_long}"),
                )),
            ),
            (
                "cron job template annotations a byte over",
                "spec.jobTemplate.spec.template.spec",
                None,
                262_145,
                Some((
                    "spec.jobTemplate.spec.template.metadata.annotations",
                    format!("spec.jobTemplate.spec.template.annotations: {too_long}"),
                )),
            ),
        ];
        for (name, spec_path, deadline, bytes, want) in cases {
            let mut pod = spec(&web(HTTP_LIVENESS));
            pod.active_deadline_seconds = deadline;
            let annotations = (bytes > 0).then(|| annotations(bytes));
            let lint = lint_pod_spec(&pod, spec_path, annotations.as_ref(), None);
            let errors = with_rule(&lint, rule::INVALID);
            let got: Vec<(&str, &str)> =
                errors.iter().map(|f| (f.field.as_deref().unwrap_or_default(), f.message.as_str())).collect();
            let want: Vec<(&str, &str)> =
                want.iter().map(|(field, message)| (*field, message.as_str())).collect();
            assert_eq!(got, want, "case {name}");
            for error in errors {
                assert_eq!(error.severity, Severity::Error, "case {name}");
                assert_eq!((error.container.as_deref(), error.probe), (None, None), "case {name}");
            }
            assert!(lint.containers[0].timings.is_some(), "case {name}: the probes' timings stay");
        }
        let both = {
            let mut pod = spec(&web(HTTP_LIVENESS));
            pod.active_deadline_seconds = Some(0);
            lint_pod_spec(&pod, "spec", Some(&annotations(262_145)), None)
        };
        let fields: Vec<Option<&str>> =
            with_rule(&both, rule::INVALID).iter().map(|f| f.field.as_deref()).collect();
        assert_eq!(
            fields,
            [Some("metadata.annotations"), Some("spec.activeDeadlineSeconds")],
            "both, in the API server's order"
        );
    }

    /// A workload's own annotations over the limit are refused as a Pod's are: an error about no
    /// container at `metadata.annotations`, in the same words; up to the limit, nothing.
    #[test]
    fn a_workloads_own_annotations_are_checked_as_a_pods_are() {
        let annotations = |bytes: usize| BTreeMap::from([("a".to_owned(), "x".repeat(bytes - 1))]);
        assert_eq!(object_errors(None), []);
        assert_eq!(object_errors(Some(&BTreeMap::new())), []);
        assert_eq!(object_errors(Some(&annotations(262_144))), []);
        // Bytes, not characters: 131072 two-byte characters and the key are a byte over.
        let wide = BTreeMap::from([("a".to_owned(), "é".repeat(131_072))]);
        for over in [annotations(262_145), wide] {
            assert_eq!(
                object_errors(Some(&over)),
                [Finding {
                    severity: Severity::Error,
                    rule: rule::INVALID,
                    container: None,
                    container_path: None,
                    probe: None,
                    field: Some("metadata.annotations".to_owned()),
                    message: "metadata.annotations: Too long: may not be more than 262144 bytes".to_owned(),
                }]
            );
        }
    }

    #[test]
    fn a_workload_that_keeps_its_pods_running_may_not_set_a_deadline() {
        let field = "spec.template.spec.activeDeadlineSeconds";
        let forbidden = |named: &str| {
            Some(format!("{field}: Forbidden: activeDeadlineSeconds in {named} is not Supported"))
        };
        let cases = [
            ("Deployment", Some(30), forbidden("ReplicaSet")),
            ("ReplicaSet", Some(30), forbidden("ReplicaSet")),
            ("StatefulSet", Some(30), forbidden("StatefulSet")),
            ("DaemonSet", Some(30), forbidden("DaemonSet")),
            ("Job", Some(30), None),
            ("Deployment", None, None),
        ];
        for (kind, deadline, want) in cases {
            let mut pod = spec(&web(HTTP_LIVENESS));
            pod.active_deadline_seconds = deadline;
            if kind == "Job" {
                pod.restart_policy = Some("Never".to_owned());
            }
            let errors = workload_errors(kind, "w", &pod, "spec.template.spec", &WorkloadSpec::default());
            let got: Vec<(Option<&str>, &str)> =
                errors.iter().map(|f| (f.field.as_deref(), f.message.as_str())).collect();
            let want: Vec<(Option<&str>, &str)> = want.iter().map(|m| (Some(field), m.as_str())).collect();
            assert_eq!(got, want, "{kind} with {deadline:?}");
            assert!(errors.iter().all(|f| f.severity == Severity::Error && f.rule == rule::INVALID));
        }
        let mut pod = spec(&web(HTTP_LIVENESS));
        pod.active_deadline_seconds = Some(30);
        pod.restart_policy = Some("OnFailure".to_owned());
        let cron = workload_errors(
            "CronJob",
            "c",
            &pod,
            "spec.jobTemplate.spec.template.spec",
            &WorkloadSpec::default(),
        );
        assert!(cron.is_empty(), "a CronJob's job may run to a deadline");
    }

    /// What the mismatch check reads: `matchLabels` as a subset of the template's labels and
    /// `matchExpressions` by their operators; an empty selector, or one the API server cannot
    /// read, is not its (each is refused for that instead).
    #[test]
    fn a_selector_must_select_its_templates_labels() {
        let labels = |pairs: &[(&str, &str)]| {
            pairs.iter().map(|(k, v)| ((*k).to_owned(), (*v).to_owned())).collect::<BTreeMap<_, _>>()
        };
        let selector = |pairs: &[(&str, &str)]| LabelSelector {
            match_labels: Some(labels(pairs)),
            match_expressions: None,
        };
        let mismatch = |labels: &str| {
            Some(format!(
                "spec.template.metadata.labels: Invalid value: {labels}: `selector` does not match template `labels`"
            ))
        };
        let expression = |key: &str, operator: &str, values: &[&str]| LabelSelector {
            match_labels: None,
            match_expressions: Some(vec![LabelSelectorRequirement {
                key: key.to_owned(),
                operator: operator.to_owned(),
                values: (!values.is_empty()).then(|| values.iter().map(|v| (*v).to_owned()).collect()),
            }]),
        };
        let broken = LabelSelector {
            match_labels: Some(labels(&[("app", "x")])),
            match_expressions: Some(vec![Default::default()]),
        };
        let cases = [
            ("subset", Some(selector(&[("app", "a")])), Some(labels(&[("app", "a"), ("b", "c")])), None),
            (
                "other value",
                Some(selector(&[("app", "a")])),
                Some(labels(&[("app", "b")])),
                mismatch("map[string]string{\"app\":\"b\"}"),
            ),
            ("no labels", Some(selector(&[("app", "a")])), None, mismatch("map[string]string(nil)")),
            (
                "empty labels",
                Some(selector(&[("app", "a")])),
                Some(BTreeMap::new()),
                mismatch("map[string]string{}"),
            ),
            ("empty selector", Some(selector(&[])), None, None),
            ("no selector", None, None, None),
            ("In, selected", Some(expression("app", "In", &["a", "b"])), Some(labels(&[("app", "a")])), None),
            (
                "In, not selected",
                Some(expression("app", "In", &["x"])),
                Some(labels(&[("app", "a")])),
                mismatch("map[string]string{\"app\":\"a\"}"),
            ),
            (
                "NotIn, no such label",
                Some(expression("tier", "NotIn", &["x"])),
                Some(labels(&[("app", "a")])),
                None,
            ),
            (
                "NotIn, excluded",
                Some(expression("app", "NotIn", &["a"])),
                Some(labels(&[("app", "a")])),
                mismatch("map[string]string{\"app\":\"a\"}"),
            ),
            ("Exists", Some(expression("app", "Exists", &[])), Some(labels(&[("app", "")])), None),
            (
                "Exists, missing",
                Some(expression("tier", "Exists", &[])),
                None,
                mismatch("map[string]string(nil)"),
            ),
            ("DoesNotExist", Some(expression("tier", "DoesNotExist", &[])), None, None),
            (
                "DoesNotExist, present",
                Some(expression("app", "DoesNotExist", &[])),
                Some(labels(&[("app", "a")])),
                mismatch("map[string]string{\"app\":\"a\"}"),
            ),
            ("unreadable expression", Some(broken), Some(labels(&[("app", "a")])), None),
            ("bad key", Some(selector(&[("a b", "x")])), None, None),
            ("bad value", Some(selector(&[("app", "-x")])), None, None),
        ];
        for (name, selector, template_labels, want) in cases {
            let workload = WorkloadSpec { selector, template_labels, ..Default::default() };
            let got = selector_mismatch(&workload, "spec.template.spec").map(|f| f.message);
            assert_eq!(got, want, "case {name}");
        }
    }

    /// A restart rule's `RestartAllContainers` action is an error for an API server with the
    /// default gates, and accepted by one with `RestartAllContainersOnContainerExits` on.
    #[test]
    fn restart_all_containers_is_accepted_only_under_its_gate() {
        let yaml = "containers:\n  - name: app\n    image: a\n    restartPolicy: Never\n    restartPolicyRules:\n      \
                    - action: RestartAllContainers\n        exitCodes: {operator: In, values: [42]}\n";
        let errors = with_rule(&lint_yaml(yaml), rule::INVALID)
            .into_iter()
            .map(|f| f.message.clone())
            .collect::<Vec<_>>();
        assert_eq!(
            errors,
            [
                "spec.containers[0].restartPolicyRules[0].action: Unsupported value: \"RestartAllContainers\": supported values: \"Restart\""
            ]
        );
        let on = FeatureGates::default()
            .with(probelet_actors::Feature::RestartAllContainersOnContainerExits, true)
            .unwrap();
        let lint = lint_pod_spec_with(&spec(yaml), "spec", None, None, &on);
        assert!(with_rule(&lint, rule::INVALID).is_empty(), "{:?}", lint.findings);
    }

    #[test]
    fn metadata_paths() {
        assert_eq!(metadata_path("spec"), "metadata");
        assert_eq!(metadata_path("spec.template.spec"), "spec.template.metadata");
        assert_eq!(
            metadata_path("spec.jobTemplate.spec.template.spec"),
            "spec.jobTemplate.spec.template.metadata"
        );
    }

    #[test]
    fn start_annotation() {
        let cases = [
            ("all containers", "30", true, Some(30)),
            ("by name", "web=45", true, Some(45)),
            ("mixed", "10, web = 45", true, Some(45)),
            ("not a number", "soon", false, None),
            ("negative", "-5", false, None),
            ("unknown container", "db=5", false, None),
        ];
        let spec = spec(&web(HTTP_LIVENESS));
        for (name, value, ok, web) in cases {
            let parsed = parse_start_seconds(value, &spec);
            assert_eq!(parsed.is_ok(), ok, "case {name}: {parsed:?}");
            assert_eq!(parsed.ok().and_then(|s| s.of("web")), web, "case {name}");
        }
        let lint = lint_with_start(&web(HTTP_LIVENESS), "db=5");
        let found = with_rule(&lint, rule::BAD_ANNOTATION);
        assert_eq!(found.len(), 1);
        assert_eq!(found[0].severity, Severity::Error);
        assert_eq!(
            found[0].message,
            "metadata.annotations[lint.probelet.dev/start-seconds]: Invalid value: \"db=5\": \"db\" names no container of the pod"
        );
        assert!(with_rule(&lint_with_start(&web(HTTP_LIVENESS), "web=5"), rule::BAD_ANNOTATION).is_empty());
    }
}
