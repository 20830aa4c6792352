//! The API server's defaulting (`pkg/apis/core/v1/defaults.go`) and validation
//! (`pkg/apis/core/validation/validation.go`) of the pod fields the agent relies on, applied to
//! every manifest pod as the kubelet does for static pods through `ValidatePodCreate`.

use std::collections::{BTreeMap, BTreeSet};

use k8s_openapi::api::core::v1::{
    Container, ContainerPort, ContainerRestartRule, EnvFromSource, EnvVar, Pod, PodReadinessGate, PodSpec,
    Probe,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use probelet_actors::gofmt::go_quote;
use probelet_actors::prober::timing::{PROBE_TIMING_ANNOTATION, probe_timings};
use probelet_actors::restart;
use probelet_actors::{Feature, FeatureGates};

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

mod env;

const NEGATIVE: &str = "must be greater than or equal to 0";
pub(crate) const PORT_RANGE: &str = "must be between 1 and 65535, inclusive";
const NO_HANDLER: &str = "must specify a handler type";
const SECOND_HANDLER: &str = "may not specify more than 1 handler type";
const INIT_PROBE: &str = "may not be set for init containers without restartPolicy=Always";
const NEEDS_COMMAND: &str = "the standalone runtime runs each container's command as a local process";
const UNKNOWN_PORT_NAME: &str = "must be the name of one of the container's ports";
/// Upstream `TotalAnnotationSizeLimitB`: the most bytes a pod's annotations may take, keys and
/// values together (256 KiB).
pub const MAX_ANNOTATIONS_BYTES: usize = 256 * 1024;
/// The largest `spec.activeDeadlineSeconds` the API server takes (`math.MaxInt32`).
pub const MAX_ACTIVE_DEADLINE_SECONDS: i64 = i32::MAX as i64;
pub(super) const DNS1123_LABEL: &str = "a lowercase RFC 1123 label must consist of lower case alphanumeric characters or '-', \
and must start and end with an alphanumeric character (e.g. 'my-name',  or '123-abc', regex used for validation \
is '[a-z0-9]([-a-z0-9]*[a-z0-9])?')";
pub(super) const DNS1123_SUBDOMAIN: &str = r"a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.', and must start and end with an alphanumeric character (e.g. 'example.com', regex used for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*')";
pub(crate) const HTTP_HEADER_NAME: &str = "a valid HTTP header must consist of alphanumeric characters or '-' \
(e.g. 'X-Header-Name', regex used for validation is '[-A-Za-z0-9]+')";

/// The API server's validation of what the agent relies on, with its messages
/// (`<field path>: <Required value|Invalid value: v|Forbidden|Duplicate value: v|Unsupported
/// value: v|Too long>[: detail]`): metadata name and namespace; each label's key and value
/// ([`validate_labels`]); each annotation's key and the annotations' total size (at
/// most 256 KiB of keys and values); containers present, named (RFC 1123
/// labels), unique across containers and init containers; container ports; `env` names and
/// `envFrom` prefixes (printable ASCII without `=`, as since v1.34), each `valueFrom` (one
/// source, not beside a `value`; its field path, resource, or object name and key) and each
/// `envFrom` source (one of `configMapRef` and `secretRef`, named); probes (one handler,
/// exec command, HTTP path, scheme and header names, port numbers and names, non-negative timing
/// fields, `successThreshold` 1 for liveness and startup, probe-level grace period, none on
/// readiness, none on init containers that are not sidecars); restart policies; each readiness
/// gate's `conditionType` a qualified name (docs/readiness-gates.md); `activeDeadlineSeconds` between 1 and 2147483647 (docs/reliability.md, "A pod's active
/// deadline", says what the agent does with it). Two rules are this
/// agent's own: every container needs a `command` (there are no images to supply one), and a named
/// probe port must name one of the container's ports (the kubelet finds out only when probing).
/// A third is the agent's own annotation: the probe timing annotation must be valid for the pod.
/// Fields the API server defaults are read with their defaults, so the answer is the same before
/// and after [`apply_defaults`]. The image is not required: the standalone runtime does not use it.
pub fn validate(pod: &Pod) -> Result<(), Vec<String>> {
    validate_with(pod, &FeatureGates::default())
}

/// [`validate`] under `gates`: with `ContainerRestartRules` (on by default, as in v1.35) a
/// regular container may set its own `restartPolicy` and `restartPolicyRules`, and an init
/// container `OnFailure` or `Never` besides `Always` (docs/prober.md §3.10 says what they
/// change); without it a regular container's `restartPolicy` is forbidden, as before.
pub fn validate_with(pod: &Pod, gates: &FeatureGates) -> Result<(), Vec<String>> {
    let mut errs = Errors(validate_pod_metadata(&pod.metadata, true));
    errs.0.extend(validate_annotations(pod.metadata.annotations.as_ref(), "metadata.annotations"));
    let empty = PodSpec::default();
    errs.0.extend(validate_pod_spec(pod.spec.as_ref().unwrap_or(&empty), "spec", gates, true));
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

/// The checks of [`validate_with`] on a pod's `metadata.name` and `metadata.namespace`, with
/// its messages. `standalone`: the agent's static pod, which must have a `name`; otherwise (for
/// `probelet lint`) a `generateName` stands in for it, as the API server generates the name
/// before it validates.
pub fn validate_pod_metadata(meta: &ObjectMeta, standalone: bool) -> Vec<String> {
    validate_object_metadata(meta, NameRule::Subdomain, standalone)
}

/// What an object's `metadata.name` must be: upstream's `ValidateNameFunc` of its kind.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NameRule {
    /// `NameIsDNSSubdomain`: a Pod, Deployment, ReplicaSet, DaemonSet, Job or CronJob.
    Subdomain,
    /// `NameIsDNSLabel`: a StatefulSet (`ValidateStatefulSetName`: its pods' names, and their
    /// hostnames, are its name and an ordinal).
    Label,
}

/// [`validate_pod_metadata`] for an object whose name follows `rule` (`ValidateObjectMeta`'s
/// checks of the name, the namespace and the labels, in its order and words).
pub fn validate_object_metadata(meta: &ObjectMeta, rule: NameRule, standalone: bool) -> Vec<String> {
    let mut errs = Errors::default();
    match meta.name.as_deref() {
        None | Some("") => {
            let generated = !standalone && meta.generate_name.as_deref().is_some_and(|g| !g.is_empty());
            if !generated {
                errs.required("metadata.name", "name or generateName is required");
            }
        }
        Some(name) => {
            let msgs = match rule {
                NameRule::Subdomain => dns1123_subdomain(name),
                NameRule::Label => dns1123_label(name),
            };
            for msg in msgs {
                errs.invalid("metadata.name", go_quote(name), msg);
            }
        }
    }
    if let Some(namespace) = meta.namespace.as_deref().filter(|ns| !ns.is_empty()) {
        for msg in dns1123_label(namespace) {
            errs.invalid("metadata.namespace", go_quote(namespace), msg);
        }
    }
    errs.0.extend(validate_labels(meta.labels.as_ref(), "metadata.labels"));
    errs.0
}

/// Upstream `ValidateLabels` (apimachinery's `meta/v1/validation`) of the labels at `path`: each
/// key a qualified name (`qualified_name`: an optional DNS subdomain prefix and `/`, then a
/// name of at most 63 characters) and each value a label value (`label_value`: at most 63
/// characters, empty or alphanumeric at both ends), every error at `path` itself with the key
/// or the value it is about. Keys in order: Go walks the map in no set order, so with several
/// bad labels the API server's order may differ.
pub fn validate_labels(labels: Option<&BTreeMap<String, String>>, path: &str) -> Vec<String> {
    let mut errs = Errors::default();
    for (key, value) in labels.into_iter().flatten() {
        for msg in qualified_name(key) {
            errs.invalid(path, go_quote(key), &msg);
        }
        for msg in label_value(value) {
            errs.invalid(path, go_quote(value), msg);
        }
    }
    errs.0
}

/// The checks of [`validate_with`] on a pod spec found at `spec_path` (`spec` for a Pod,
/// `spec.template.spec` in a workload), in its order and with its messages: containers, init
/// containers, `restartPolicy`, `nodeSelector` (as labels), `readinessGates`,
/// `activeDeadlineSeconds`. `standalone`: the agent's own rule that
/// every container has a `command` (it has no images to supply one) applies; `probelet lint`,
/// which checks pods for a cluster, passes `false`. The rule that a named probe port names one
/// of the container's ports applies either way: the kubelet cannot probe such a port.
pub fn validate_pod_spec(
    spec: &PodSpec,
    spec_path: &str,
    gates: &FeatureGates,
    standalone: bool,
) -> Vec<String> {
    let container_rules = gates.enabled(Feature::ContainerRestartRules);
    let restart_all = container_rules && gates.enabled(Feature::RestartAllContainersOnContainerExits);
    let mut errs = Errors::default();
    let ctx = SpecContext { container_rules, restart_all, standalone };
    validate_containers(&spec.containers, &format!("{spec_path}.containers"), ctx, &mut errs);
    validate_init_containers(
        spec.init_containers.as_deref().unwrap_or_default(),
        &spec.containers,
        &format!("{spec_path}.initContainers"),
        ctx,
        &mut errs,
    );
    match spec.restart_policy.as_deref() {
        None | Some("" | "Always" | "OnFailure" | "Never") => {}
        Some(other) => errs.not_supported(
            &format!("{spec_path}.restartPolicy"),
            other,
            &["Always", "OnFailure", "Never"],
        ),
    }
    // Upstream's ValidatePodSpec checks the node selector as labels, after the restart policy
    // (and the DNS policy, which probelet does not read).
    errs.0.extend(validate_labels(spec.node_selector.as_ref(), &format!("{spec_path}.nodeSelector")));
    validate_readiness_gates(
        spec.readiness_gates.as_deref().unwrap_or_default(),
        &format!("{spec_path}.readinessGates"),
        &mut errs,
    );
    errs.0.extend(validate_active_deadline_seconds(
        spec.active_deadline_seconds,
        &format!("{spec_path}.activeDeadlineSeconds"),
    ));
    errs.0
}

/// What decides which container checks apply.
#[derive(Clone, Copy)]
struct SpecContext {
    /// `ContainerRestartRules` is on.
    container_rules: bool,
    /// `RestartAllContainersOnContainerExits` is on too: a rule may restart every container,
    /// and a sidecar may have rules.
    restart_all: bool,
    /// The agent's own rules apply (a container needs a `command`).
    standalone: bool,
}

fn validate_containers(containers: &[Container], path: &str, ctx: SpecContext, errs: &mut Errors) {
    if containers.is_empty() {
        errs.required(path, "");
        return;
    }
    let mut names = BTreeSet::new();
    for (i, container) in containers.iter().enumerate() {
        let path = format!("{path}[{i}]");
        validate_container_common(container, &path, ctx.standalone, errs);
        if !names.insert(container.name.as_str()) {
            errs.duplicate(&format!("{path}.name"), &container.name);
        }
        container_probes(container, true, &path, errs);
        if ctx.container_rules {
            validate_restart_policy(container, false, ctx.restart_all, &path, errs);
        } else if container.restart_policy.is_some() {
            errs.forbidden(&format!("{path}.restartPolicy"), "may not be set for non-init containers");
        }
    }
}

/// The longest `restartPolicyRules` the API server takes, and the most exit codes in a rule.
const MAX_RESTART_RULES: usize = 20;
const MAX_RESTART_RULE_EXIT_CODES: usize = 255;

/// Upstream `validateContainerRestartPolicy` and `validateInitContainerRestartPolicy`
/// (`ContainerRestartRules` on): a policy the API knows, required beside rules; at most 20
/// rules, each `Restart` on `In` or `NotIn` at most 255 exit codes. An init container's
/// `Always` makes a sidecar, which may have no rules; its rules are checked only beside
/// `OnFailure` or `Never`, a regular container's whatever its policy. With `restart_all`
/// (`RestartAllContainersOnContainerExits` on too) an action may also be
/// `RestartAllContainers`, and a sidecar may have rules, checked as any other container's.
fn validate_restart_policy(
    container: &Container,
    init: bool,
    restart_all: bool,
    path: &str,
    errs: &mut Errors,
) {
    let rules = container.restart_policy_rules.as_deref().unwrap_or_default();
    let policy = container.restart_policy.as_deref();
    match policy {
        None if !rules.is_empty() => errs.required(
            &format!("{path}.restartPolicy"),
            "must specify restartPolicy when restart rules are used",
        ),
        Some(restart::ALWAYS) if init && !restart_all && !rules.is_empty() => errs.forbidden(
            &format!("{path}.restartPolicyRules"),
            "restartPolicyRules are not allowed for init containers with restart policy Always",
        ),
        None | Some(restart::ALWAYS | restart::ON_FAILURE | restart::NEVER) => {}
        Some(other) => errs.not_supported(
            &format!("{path}.restartPolicy"),
            other,
            &[restart::ALWAYS, restart::NEVER, restart::ON_FAILURE],
        ),
    }
    if !init || restart_all || matches!(policy, Some(restart::ON_FAILURE | restart::NEVER)) {
        validate_restart_rules(rules, restart_all, path, errs);
    }
}

fn validate_restart_rules(rules: &[ContainerRestartRule], restart_all: bool, path: &str, errs: &mut Errors) {
    let actions: &[&str] = if restart_all {
        &[restart::ACTION_RESTART, restart::ACTION_RESTART_ALL_CONTAINERS]
    } else {
        &[restart::ACTION_RESTART]
    };
    if rules.len() > MAX_RESTART_RULES {
        errs.too_many(&format!("{path}.restartPolicyRules"), rules.len(), MAX_RESTART_RULES);
    }
    for (i, rule) in rules.iter().enumerate() {
        let path = format!("{path}.restartPolicyRules[{i}]");
        if !actions.contains(&rule.action.as_str()) {
            errs.not_supported(&format!("{path}.action"), &rule.action, actions);
        }
        let Some(codes) = &rule.exit_codes else {
            errs.required(&format!("{path}.exitCodes"), "must be specified");
            continue;
        };
        if !matches!(codes.operator.as_str(), "In" | "NotIn") {
            errs.not_supported(&format!("{path}.exitCodes.operator"), &codes.operator, &["In", "NotIn"]);
        }
        let values = codes.values.as_deref().unwrap_or_default();
        if values.len() > MAX_RESTART_RULE_EXIT_CODES {
            errs.too_many(&format!("{path}.exitCodes.values"), values.len(), MAX_RESTART_RULE_EXIT_CODES);
        }
    }
}

fn validate_init_containers(
    init_containers: &[Container],
    containers: &[Container],
    path: &str,
    ctx: SpecContext,
    errs: &mut Errors,
) {
    let mut names: BTreeSet<&str> = containers.iter().map(|c| c.name.as_str()).collect();
    for (i, container) in init_containers.iter().enumerate() {
        let path = format!("{path}[{i}]");
        validate_container_common(container, &path, ctx.standalone, errs);
        let sidecar = container.restart_policy.as_deref() == Some(restart::ALWAYS);
        if ctx.container_rules {
            validate_restart_policy(container, true, ctx.restart_all, &path, errs);
        } else if let Some(other) = container.restart_policy.as_deref().filter(|p| *p != restart::ALWAYS) {
            errs.not_supported(&format!("{path}.restartPolicy"), other, &[restart::ALWAYS]);
        }
        if names.contains(container.name.as_str()) {
            errs.duplicate(&format!("{path}.name"), &container.name);
        } else if !container.name.is_empty() {
            names.insert(container.name.as_str());
        }
        container_probes(container, sidecar, &path, errs);
    }
}

/// Upstream `ValidateAnnotations` of the annotations at `path`: each key a qualified name once
/// made lower case (upstream's rule, "case doesn't matter"; `qualified_name`), its error at
/// `path` with the key as written, keys in order (Go walks the map in no set order); then their
/// size ([`validate_annotations_size`]).
pub fn validate_annotations(annotations: Option<&BTreeMap<String, String>>, path: &str) -> Vec<String> {
    let mut errs = Errors::default();
    for key in annotations.into_iter().flatten().map(|(key, _)| key) {
        for msg in qualified_name(&go_to_lower(key)) {
            errs.invalid(path, go_quote(key), &msg);
        }
    }
    errs.0.extend(validate_annotations_size(annotations, path));
    errs.0
}

/// Go's `strings.ToLower`: each character's own lower case. Rust's `to_lowercase` makes 'İ'
/// (U+0130) two characters, `i` and a combining dot, where Go makes it `i`: an annotation key
/// the API server takes (`example.com/İstanbul`) was refused.
fn go_to_lower(value: &str) -> String {
    value.chars().map(|c| c.to_lowercase().next().unwrap_or(c)).collect()
}

/// Upstream `ValidateAnnotationsSize`, with the error `ValidateAnnotations` makes of it: the
/// annotations' keys and values together, in bytes as Go's `len` counts them, at most
/// [`MAX_ANNOTATIONS_BYTES`]. `path` is the field the error names: `metadata.annotations` for a
/// pod ([`validate`]); `probelet lint` passes a pod template's too, and a workload's own.
pub fn validate_annotations_size(
    annotations: Option<&BTreeMap<String, String>>,
    path: &str,
) -> Option<String> {
    let bytes = annotations
        .into_iter()
        .flatten()
        .fold(0usize, |total, (key, value)| total.saturating_add(key.len()).saturating_add(value.len()));
    let mut errs = Errors::default();
    if bytes > MAX_ANNOTATIONS_BYTES {
        errs.too_long(path, MAX_ANNOTATIONS_BYTES);
    }
    errs.0.pop()
}

/// Upstream `validateReadinessGates`: each `conditionType` a qualified name
/// ([`qualified_name`]), one `Invalid value` per message. Nothing else: an empty one is two
/// messages, not a `Required value`, and a type may repeat.
fn validate_readiness_gates(gates: &[PodReadinessGate], path: &str, errs: &mut Errors) {
    for (i, gate) in gates.iter().enumerate() {
        let path = format!("{path}[{i}].conditionType");
        for msg in qualified_name(&gate.condition_type) {
            errs.invalid(&path, go_quote(&gate.condition_type), &msg);
        }
    }
}

/// Upstream `ValidatePodSpec`'s check of `activeDeadlineSeconds`: unset, or between 1 and
/// [`MAX_ACTIVE_DEADLINE_SECONDS`]. `path` is the field the error names:
/// `spec.activeDeadlineSeconds` for a pod, a template's in a workload ([`validate_pod_spec`]).
fn validate_active_deadline_seconds(deadline: Option<i64>, path: &str) -> Option<String> {
    let deadline = deadline.filter(|d| !(1..=MAX_ACTIVE_DEADLINE_SECONDS).contains(d))?;
    let mut errs = Errors::default();
    errs.invalid(
        path,
        deadline.to_string(),
        &format!("must be between 1 and {MAX_ACTIVE_DEADLINE_SECONDS}, inclusive"),
    );
    errs.0.pop()
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

fn validate_container_common(container: &Container, path: &str, standalone: bool, errs: &mut Errors) {
    let name_path = format!("{path}.name");
    if container.name.is_empty() {
        errs.required(&name_path, "");
    } else {
        for msg in dns1123_label(&container.name) {
            errs.invalid(&name_path, go_quote(&container.name), msg);
        }
    }
    if standalone && container.command.as_ref().is_none_or(Vec::is_empty) {
        errs.required(&format!("{path}.command"), NEEDS_COMMAND);
    }
    validate_container_ports(container.ports.as_deref().unwrap_or_default(), &format!("{path}.ports"), errs);
    validate_env(container.env.as_deref().unwrap_or_default(), &format!("{path}.env"), errs);
    validate_env_from(container.env_from.as_deref().unwrap_or_default(), &format!("{path}.envFrom"), errs);
}

/// Upstream `ValidateEnv`: each name required and a relaxed environment variable name
/// ([`relaxed_env_var_name`]), then its `valueFrom` (`env::validate_value_from`). Names may
/// repeat (the last one wins, as in the kubelet; the API server only warns).
fn validate_env(vars: &[EnvVar], path: &str, errs: &mut Errors) {
    for (i, var) in vars.iter().enumerate() {
        let name_path = format!("{path}[{i}].name");
        if var.name.is_empty() {
            errs.required(&name_path, "");
        } else {
            for msg in relaxed_env_var_name(&var.name) {
                errs.invalid(&name_path, go_quote(&var.name), msg);
            }
        }
        env::validate_value_from(var, &format!("{path}[{i}]"), errs);
    }
}

/// Upstream `ValidateEnvFrom`: a `prefix`, when there is one, a relaxed environment variable
/// name too; then the entry's source (`env::validate_env_from_source`).
fn validate_env_from(sources: &[EnvFromSource], path: &str, errs: &mut Errors) {
    for (i, source) in sources.iter().enumerate() {
        if let Some(prefix) = source.prefix.as_deref().filter(|p| !p.is_empty()) {
            for msg in relaxed_env_var_name(prefix) {
                errs.invalid(&format!("{path}[{i}].prefix"), go_quote(prefix), msg);
            }
        }
        env::validate_env_from_source(source, path, i, errs);
    }
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

    /// Go's `field.TooLong`, which never prints the value, in its wording since v1.32
    /// (kubernetes#128553; "must have at most N bytes" before). Upstream says "byte" for a limit
    /// of 1, which no limit here is.
    fn too_long(&mut self, path: &str, max_bytes: usize) {
        self.push(path, "Too long".into(), &format!("may not be more than {max_bytes} bytes"));
    }

    /// Go's `field.TooMany`.
    fn too_many(&mut self, path: &str, actual: usize, max: usize) {
        self.push(path, format!("Too many: {actual}"), &format!("must have at most {max} items"));
    }

    fn into_result(self) -> Result<(), Vec<String>> {
        if self.0.is_empty() { Ok(()) } else { Err(self.0) }
    }
}

/// Upstream `validation.IsDNS1123Label`.
pub(crate) fn dns1123_label(value: &str) -> Vec<&'static str> {
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
pub(super) fn dns1123_subdomain(value: &str) -> Vec<&'static str> {
    let mut msgs = Vec::new();
    if value.len() > 253 {
        msgs.push("must be no more than 253 characters");
    }
    if !is_subdomain(value) {
        msgs.push(DNS1123_SUBDOMAIN);
    }
    msgs
}

/// What a qualified name's name part must be, with upstream's `RegexError` wording (its two
/// blanks before each "or" included).
const QUALIFIED_NAME: &str = "must consist of alphanumeric characters, '-', '_' or '.', and must start and end \
with an alphanumeric character (e.g. 'MyName',  or 'my.name',  or '123-abc', regex used for validation is \
'([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]')";

/// Upstream `validation.IsQualifiedName` (a label key; apimachinery's `content.IsLabelKey`):
/// an optional RFC 1123 subdomain and `/`, then a name of at most 63 characters, alphanumeric at
/// both ends and `-`, `_`, `.` or alphanumeric between. More than one `/` is one message, in
/// the words of v1.35's `IsLabelKey` ("a valid label key …"; older releases began it "a
/// qualified name"); otherwise every problem of the prefix, then of the name.
pub(crate) fn qualified_name(value: &str) -> Vec<String> {
    let mut msgs = Vec::new();
    let name = match value.split_once('/') {
        None => value,
        Some((_, name)) if name.contains('/') => {
            return vec![format!(
                "a valid label key {QUALIFIED_NAME} with an optional DNS subdomain prefix and '/' (e.g. \
                 'example.com/MyName')"
            )];
        }
        Some((prefix, name)) => {
            if prefix.is_empty() {
                msgs.push("prefix part must be non-empty".to_owned());
            } else {
                msgs.extend(dns1123_subdomain(prefix).into_iter().map(|m| format!("prefix part {m}")));
            }
            name
        }
    };
    if name.is_empty() {
        msgs.push("name part must be non-empty".to_owned());
    } else if name.len() > 63 {
        msgs.push("name part must be no more than 63 characters".to_owned());
    }
    if !is_qualified_name_part(name) {
        msgs.push(format!("name part {QUALIFIED_NAME}"));
    }
    msgs
}

/// Upstream `validation.IsValidLabelValue`'s pattern message.
const LABEL_VALUE: &str = "a valid label must be an empty string or consist of alphanumeric characters, '-', '_' or \
'.', and must start and end with an alphanumeric character (e.g. 'MyValue',  or 'my_value',  or '12345', regex used \
for validation is '(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?')";

/// Upstream `validation.IsValidLabelValue`: at most 63 characters, empty or a qualified name's
/// name part.
pub(crate) fn label_value(value: &str) -> Vec<&'static str> {
    let mut msgs = Vec::new();
    if value.len() > 63 {
        msgs.push("must be no more than 63 characters");
    }
    // The pattern alone, whatever the length: a qualified name's part, or empty.
    if !value.is_empty() && !is_qualified_name_part(value) {
        msgs.push(LABEL_VALUE);
    }
    msgs
}

/// `([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]` (also a label value's pattern, which may be empty).
pub(crate) fn is_qualified_name_part(name: &str) -> bool {
    let bytes = name.as_bytes();
    match (bytes.first(), bytes.last()) {
        (Some(first), Some(last)) => {
            first.is_ascii_alphanumeric()
                && last.is_ascii_alphanumeric()
                && bytes.iter().all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.'))
        }
        _ => false,
    }
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

const RELAXED_ENV_VAR_NAME: &str =
    "a valid environment variable name must consist only of printable ASCII characters other than '='";

/// Upstream `validation.IsRelaxedEnvVarName`, the only rule since `RelaxedEnvironmentVariableValidation`
/// went GA (locked on in v1.34; beta and on by default since v1.32): not empty, and every
/// character printable ASCII (`' '` to `'~'`) other than `=`, with one message however many
/// characters are not. Callers check emptiness first (`Required value`), as upstream's do.
fn relaxed_env_var_name(name: &str) -> Vec<&'static str> {
    let mut msgs = Vec::new();
    if name.is_empty() {
        msgs.push("environment variable name must be non-empty");
    }
    if name.chars().any(|c| !(' '..='~').contains(&c) || c == '=') {
        msgs.push(RELAXED_ENV_VAR_NAME);
    }
    msgs
}

/// Upstream `validation.IsValidPortName`.
pub(crate) fn port_name(name: &str) -> Vec<&'static str> {
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
pub(crate) fn is_http_header_name(name: &str) -> bool {
    !name.is_empty() && name.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-')
}
