//! Upstream `ValidateEnv`'s check of each variable's `valueFrom` (`validateEnvVarValueFrom`) and
//! `ValidateEnvFrom`'s check of each entry's source, with their messages: what the API server,
//! `probelet run` and `probelet lint` refuse alike (docs/lint.md, `invalid`). The standalone
//! runtime sets none of these variables (it says so when it starts a container); a pod that
//! names them is still a pod the API server would refuse, so the agent refuses it too.

use k8s_openapi::api::core::v1::{
    ConfigMapKeySelector, EnvFromSource, EnvVar, EnvVarSource, ObjectFieldSelector, ResourceFieldSelector,
    SecretKeySelector,
};
use probelet_actors::gofmt::go_quote;

use super::{DNS1123_SUBDOMAIN, Errors, dns1123_subdomain, qualified_name};

const ONE_VALUE_SOURCE: &str =
    "must specify one of: `fieldRef`, `resourceFieldRef`, `configMapKeyRef` or `secretKeyRef`";
const ONE_ENV_FROM_SOURCE: &str = "must specify one of: `configMapRef` or `secretRef`";
const MORE_THAN_ONE: &str = "may not have more than one field specified at a time";
const BESIDE_VALUE: &str = "may not be specified when `value` is not empty";

/// The pod fields an environment variable's `fieldRef` may name without a subscript
/// (`validEnvDownwardAPIFieldPathExpressions`), sorted as upstream lists them.
const ENV_FIELD_PATHS: [&str; 9] = [
    "metadata.name",
    "metadata.namespace",
    "metadata.uid",
    "spec.nodeName",
    "spec.serviceAccountName",
    "status.hostIP",
    "status.hostIPs",
    "status.podIP",
    "status.podIPs",
];

/// The container resources a `resourceFieldRef` may name (`validContainerResourceFieldPathExpressions`),
/// sorted; besides them, any resource starting `requests.hugepages-` or `limits.hugepages-`.
const RESOURCE_FIELDS: [&str; 6] = [
    "limits.cpu",
    "limits.ephemeral-storage",
    "limits.memory",
    "requests.cpu",
    "requests.ephemeral-storage",
    "requests.memory",
];
const HUGEPAGES_PREFIXES: [&str; 2] = ["limits.hugepages-", "requests.hugepages-"];

/// `validateEnvVarValueFrom` of the variable at `path` (`…env[1]`): each source set is checked,
/// then exactly one source must be set, and none beside a non-empty `value`. A `fileKeyRef`
/// (feature `EnvFiles`) counts as a source; its fields are not checked.
pub(super) fn validate_value_from(var: &EnvVar, path: &str, errs: &mut Errors) {
    let Some(source) = var.value_from.as_ref() else { return };
    let path = format!("{path}.valueFrom");
    let EnvVarSource { config_map_key_ref, field_ref, file_key_ref, resource_field_ref, secret_key_ref } =
        source;
    let mut sources = 0;
    if let Some(field_ref) = field_ref {
        sources += 1;
        validate_field_ref(field_ref, &format!("{path}.fieldRef"), errs);
    }
    if let Some(resource) = resource_field_ref {
        sources += 1;
        validate_resource_field_ref(resource, &format!("{path}.resourceFieldRef"), errs);
    }
    if let Some(ConfigMapKeySelector { name, key, .. }) = config_map_key_ref {
        sources += 1;
        validate_key_selector(name, key, &format!("{path}.configMapKeyRef"), errs);
    }
    if let Some(SecretKeySelector { name, key, .. }) = secret_key_ref {
        sources += 1;
        validate_key_selector(name, key, &format!("{path}.secretKeyRef"), errs);
    }
    if file_key_ref.is_some() {
        sources += 1;
    }
    let value = var.value.as_deref().unwrap_or_default();
    if sources == 0 {
        errs.invalid(&path, go_quote(""), ONE_VALUE_SOURCE);
    } else if !value.is_empty() {
        errs.invalid(&path, go_quote(""), BESIDE_VALUE);
    } else if sources > 1 {
        errs.invalid(&path, go_quote(""), MORE_THAN_ONE);
    }
}

/// `ValidateEnvFrom`'s check of the entry `index` of `envFrom` at `list_path`: each reference
/// set is checked (its `name` required and a subdomain, a trailing `-` allowed), then exactly
/// one must be set. Upstream names the list itself, not the entry, in that last error.
pub(super) fn validate_env_from_source(
    source: &EnvFromSource,
    list_path: &str,
    index: usize,
    errs: &mut Errors,
) {
    let mut sources = 0;
    if let Some(config_map) = source.config_map_ref.as_ref() {
        sources += 1;
        validate_env_source_name(&config_map.name, &format!("{list_path}[{index}].configMapRef.name"), errs);
    }
    if let Some(secret) = source.secret_ref.as_ref() {
        sources += 1;
        validate_env_source_name(&secret.name, &format!("{list_path}[{index}].secretRef.name"), errs);
    }
    if sources == 0 {
        errs.invalid(list_path, go_quote(""), ONE_ENV_FROM_SOURCE);
    } else if sources > 1 {
        errs.invalid(list_path, go_quote(""), MORE_THAN_ONE);
    }
}

/// `validateConfigMapEnvSource` and `validateSecretEnvSource`: required, then
/// `NameIsDNSSubdomain(name, prefix=true)`.
fn validate_env_source_name(name: &str, path: &str, errs: &mut Errors) {
    if name.is_empty() {
        errs.required(path, "");
        return;
    }
    for msg in prefix_subdomain(name) {
        errs.invalid(path, go_quote(name), msg);
    }
}

/// `NameIsDNSSubdomain` with `prefix` true: a name that ends in `-` (and is longer than one
/// byte) is checked with its last two bytes replaced by `a` (apimachinery's `maskTrailingDash`,
/// which drops two bytes for one). Where those bytes split a character, Go checks broken UTF-8,
/// which is never a subdomain: one byte shorter, and the pattern's message.
fn prefix_subdomain(name: &str) -> Vec<&'static str> {
    if name.len() > 1 && name.ends_with('-') {
        return match name.get(..name.len() - 2) {
            Some(head) => dns1123_subdomain(&format!("{head}a")),
            None => {
                let mut msgs = Vec::new();
                if name.len() - 1 > 253 {
                    msgs.push("must be no more than 253 characters");
                }
                msgs.push(DNS1123_SUBDOMAIN);
                msgs
            }
        };
    }
    dns1123_subdomain(name)
}

/// `validateConfigMapKeySelector` and `validateSecretKeySelector`: the name a subdomain (an
/// empty one gets the pattern's message: no `Required value`), the key required and a valid
/// config key (`IsConfigMapKey`).
fn validate_key_selector(name: &str, key: &str, path: &str, errs: &mut Errors) {
    for msg in dns1123_subdomain(name) {
        errs.invalid(&format!("{path}.name"), go_quote(name), msg);
    }
    let key_path = format!("{path}.key");
    if key.is_empty() {
        errs.required(&key_path, "");
        return;
    }
    for msg in config_map_key(key) {
        errs.invalid(&key_path, go_quote(key), msg);
    }
}

/// Upstream `validation.IsConfigMapKey`.
fn config_map_key(key: &str) -> Vec<&'static str> {
    let mut msgs = Vec::new();
    if key.len() > 253 {
        msgs.push("must be no more than 253 characters");
    }
    if !key.bytes().all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'.' | b'_')) {
        msgs.push(
            "a valid config key must consist of alphanumeric characters, '-', '_' or '.' (e.g. 'key.name',  \
             or 'KEY_NAME',  or 'key-name', regex used for validation is '[-._a-zA-Z0-9]+')",
        );
    }
    if key == "." {
        msgs.push("must not be '.'");
    } else if key == ".." {
        msgs.push("must not be '..'");
    } else if key.starts_with("..") {
        msgs.push("must not start with '..'");
    }
    msgs
}

/// `validateObjectFieldSelector` with the environment's field paths. The API server defaults an
/// unset `apiVersion` to `v1` before it validates; any other version cannot be converted.
fn validate_field_ref(selector: &ObjectFieldSelector, path: &str, errs: &mut Errors) {
    let api_version = selector.api_version.as_deref().filter(|v| !v.is_empty()).unwrap_or("v1");
    let field_path = selector.field_path.as_str();
    let field_path_path = format!("{path}.fieldPath");
    if field_path.is_empty() {
        errs.required(&field_path_path, "");
        return;
    }
    if let Err(reason) = convert_field_label(api_version, field_path) {
        errs.invalid(
            &field_path_path,
            go_quote(field_path),
            &format!("error converting fieldPath: {reason}"),
        );
        return;
    }
    // `spec.host` converts to `spec.nodeName`, which is supported.
    let internal = if field_path == "spec.host" { "spec.nodeName" } else { field_path };
    match split_subscript(internal) {
        Some(("metadata.annotations", key)) => {
            let key = key.to_lowercase();
            for msg in qualified_name(&key) {
                errs.invalid(path, go_quote(&key), &msg);
            }
        }
        Some(("metadata.labels", key)) => {
            for msg in qualified_name(key) {
                errs.invalid(path, go_quote(key), &msg);
            }
        }
        // Conversion passes only the two subscripted paths above.
        Some((other, _)) => errs.invalid(path, go_quote(other), "does not support subscript"),
        None if !ENV_FIELD_PATHS.contains(&internal) => {
            errs.not_supported(&field_path_path, internal, &ENV_FIELD_PATHS)
        }
        None => {}
    }
}

/// Upstream `podshelper.ConvertDownwardAPIFieldLabel` (the label's value is not used here): the
/// pod fields a `fieldRef` can name at all, in v1 only.
fn convert_field_label(version: &str, label: &str) -> Result<(), String> {
    if version != "v1" {
        return Err(format!("unsupported pod version: {version}"));
    }
    if let Some((path, _)) = split_subscript(label) {
        return match path {
            "metadata.annotations" | "metadata.labels" => Ok(()),
            _ => Err(format!("field label does not support subscript: {label}")),
        };
    }
    match label {
        "metadata.annotations"
        | "metadata.labels"
        | "metadata.name"
        | "metadata.namespace"
        | "metadata.uid"
        | "spec.nodeName"
        | "spec.restartPolicy"
        | "spec.serviceAccountName"
        | "spec.schedulerName"
        | "status.phase"
        | "status.hostIP"
        | "status.hostIPs"
        | "status.podIP"
        | "status.podIPs"
        | "spec.host" => Ok(()),
        _ => Err(format!("field label not supported: {label}")),
    }
}

/// Upstream `fieldpath.SplitMaybeSubscriptedPath`: `metadata.labels['app']` is
/// (`metadata.labels`, `app`).
fn split_subscript(field_path: &str) -> Option<(&str, &str)> {
    let inner = field_path.strip_suffix("']")?;
    let (path, subscript) = inner.split_once("['")?;
    (!path.is_empty()).then_some((path, subscript))
}

/// `validateContainerResourceFieldSelector` for an environment variable (no `containerName`
/// needed): the resource required, and one of [`RESOURCE_FIELDS`] or a huge pages resource.
/// The `divisor` is not checked (its check needs the API server's canonical quantities).
fn validate_resource_field_ref(selector: &ResourceFieldSelector, path: &str, errs: &mut Errors) {
    let resource = selector.resource.as_str();
    let resource_path = format!("{path}.resource");
    if resource.is_empty() {
        errs.required(&resource_path, "");
    } else if !RESOURCE_FIELDS.contains(&resource)
        && !HUGEPAGES_PREFIXES.iter().any(|p| resource.starts_with(p))
    {
        errs.not_supported(&resource_path, resource, &RESOURCE_FIELDS);
    }
}
