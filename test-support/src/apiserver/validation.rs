//! API errors as kube-apiserver reports them (`k8s.io/apimachinery/pkg/api/errors` and
//! `pkg/util/validation/field`), and the validation rules the fake applies to pods and events
//! (`pkg/apis/core/validation`), with the upstream message texts.

use std::net::IpAddr;

use serde_json::{Map, Value, json};

use super::golang::quote;

// === field errors ===

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ErrType {
    Invalid,
    Required,
    Forbidden,
    Duplicate,
}

impl ErrType {
    fn text(self) -> &'static str {
        match self {
            ErrType::Invalid => "Invalid value",
            ErrType::Required => "Required value",
            ErrType::Forbidden => "Forbidden",
            ErrType::Duplicate => "Duplicate value",
        }
    }

    fn reason(self) -> &'static str {
        match self {
            ErrType::Invalid => "FieldValueInvalid",
            ErrType::Required => "FieldValueRequired",
            ErrType::Forbidden => "FieldValueForbidden",
            ErrType::Duplicate => "FieldValueDuplicate",
        }
    }
}

/// A bad value as `field.Error` prints it.
#[derive(Clone, Debug)]
pub enum BadValue {
    Str(String),
    Int(i64),
    /// Printed as is (Go marshals structs and slices to JSON).
    Raw(String),
}

/// `field.Error`.
#[derive(Clone, Debug)]
pub struct FieldError {
    pub kind: ErrType,
    pub field: String,
    pub value: Option<BadValue>,
    pub detail: String,
}

impl FieldError {
    pub fn invalid(field: impl Into<String>, value: BadValue, detail: impl Into<String>) -> Self {
        FieldError { kind: ErrType::Invalid, field: field.into(), value: Some(value), detail: detail.into() }
    }

    pub fn required(field: impl Into<String>, detail: impl Into<String>) -> Self {
        FieldError { kind: ErrType::Required, field: field.into(), value: None, detail: detail.into() }
    }

    pub fn forbidden(field: impl Into<String>, detail: impl Into<String>) -> Self {
        FieldError { kind: ErrType::Forbidden, field: field.into(), value: None, detail: detail.into() }
    }

    pub fn duplicate(field: impl Into<String>, value: BadValue) -> Self {
        FieldError {
            kind: ErrType::Duplicate,
            field: field.into(),
            value: Some(value),
            detail: String::new(),
        }
    }

    /// `ErrorBody()`: the message without the field path.
    pub fn body(&self) -> String {
        let mut s = match (&self.kind, &self.value) {
            (ErrType::Required | ErrType::Forbidden, _) | (_, None) => self.kind.text().to_string(),
            (_, Some(v)) => {
                let v = match v {
                    BadValue::Str(s) => quote(s),
                    BadValue::Int(i) => i.to_string(),
                    BadValue::Raw(r) => r.clone(),
                };
                format!("{}: {v}", self.kind.text())
            }
        };
        if !self.detail.is_empty() {
            s.push_str(": ");
            s.push_str(&self.detail);
        }
        s
    }

    pub fn error(&self) -> String {
        format!("{}: {}", self.field, self.body())
    }
}

// === API errors ===

/// An error response: the `Status` body and its HTTP code.
#[derive(Clone, Debug)]
pub struct ApiError {
    pub code: u16,
    pub reason: &'static str,
    pub message: String,
    /// `None` leaves `details` out of the body.
    pub details: Option<Value>,
    /// `Retry-After` seconds, for 429.
    pub retry_after: Option<u64>,
}

impl ApiError {
    pub(crate) fn status_json(&self) -> Value {
        let mut m = Map::new();
        m.insert("kind".into(), json!("Status"));
        m.insert("apiVersion".into(), json!("v1"));
        m.insert("metadata".into(), json!({}));
        m.insert("status".into(), json!("Failure"));
        m.insert("message".into(), json!(self.message));
        if !self.reason.is_empty() {
            m.insert("reason".into(), json!(self.reason));
        }
        if let Some(d) = &self.details {
            m.insert("details".into(), d.clone());
        }
        m.insert("code".into(), json!(self.code));
        Value::Object(m)
    }

    fn new(code: u16, reason: &'static str, message: impl Into<String>, details: Option<Value>) -> Self {
        ApiError { code, reason, message: message.into(), details, retry_after: None }
    }

    /// `NewNotFound`.
    pub fn not_found(res: &Resource, name: &str) -> Self {
        Self::new(
            404,
            "NotFound",
            format!("{} {} not found", res.qualified(), quote(name)),
            Some(res.details(name)),
        )
    }

    /// `NewAlreadyExists`.
    pub(crate) fn already_exists(res: &Resource, name: &str) -> Self {
        Self::new(
            409,
            "AlreadyExists",
            format!("{} {} already exists", res.qualified(), quote(name)),
            Some(res.details(name)),
        )
    }

    /// `NewConflict`.
    pub fn conflict(res: &Resource, name: &str, msg: &str) -> Self {
        Self::new(
            409,
            "Conflict",
            format!("Operation cannot be fulfilled on {} {}: {msg}", res.qualified(), quote(name)),
            Some(res.details(name)),
        )
    }

    /// The optimistic-concurrency conflict.
    pub(crate) fn modified(res: &Resource, name: &str) -> Self {
        Self::conflict(
            res,
            name,
            "the object has been modified; please apply your changes to the latest version and try again",
        )
    }

    pub(crate) fn bad_request(message: impl Into<String>) -> Self {
        Self::new(400, "BadRequest", message, None)
    }

    /// A plain Go error turned into a Status: 500 without reason or details.
    pub(crate) fn internal(message: impl Into<String>) -> Self {
        Self::new(500, "", message, None)
    }

    pub(crate) fn internal_error(message: impl Into<String>) -> Self {
        let message = message.into();
        Self::new(
            500,
            "InternalError",
            format!("Internal error occurred: {message}"),
            Some(json!({"causes": [{"message": message}]})),
        )
    }

    pub fn expired(message: impl Into<String>) -> Self {
        Self::new(410, "Expired", message, None)
    }

    pub(crate) fn method_not_allowed() -> Self {
        Self::new(
            405,
            "MethodNotAllowed",
            "the server does not allow this method on the requested resource",
            Some(json!({})),
        )
    }

    pub(crate) fn route_not_found() -> Self {
        Self::new(404, "NotFound", "the server could not find the requested resource", Some(json!({})))
    }

    pub(crate) fn unsupported_media_type() -> Self {
        Self::new(415, "UnsupportedMediaType", "415: Unsupported Media Type", Some(json!({})))
    }

    pub fn too_many_requests(retry_after: u64) -> Self {
        let mut e = Self::new(
            429,
            "TooManyRequests",
            "Too many requests, please try again later.",
            Some(json!({"retryAfterSeconds": retry_after})),
        );
        e.retry_after = Some(retry_after);
        e
    }

    /// What the authentication filter answers a request whose credentials it does not accept
    /// (`NewUnauthorized("Unauthorized")`).
    pub(crate) fn unauthorized() -> Self {
        Self::new(401, "Unauthorized", "Unauthorized", None)
    }

    pub(crate) fn service_unavailable() -> Self {
        Self::new(
            503,
            "ServiceUnavailable",
            "the server is currently unable to handle the request",
            Some(json!({})),
        )
    }

    /// `NewGenericServerResponse(422, ...)`: what a failed JSON patch gives.
    pub(crate) fn unprocessable_generic() -> Self {
        Self::new(
            422,
            "Invalid",
            "the server rejected our request due to an error in our request",
            Some(json!({})),
        )
    }

    /// `NewInvalid(kind, name, errs)`.
    pub fn invalid(group: &str, kind: &str, name: &str, errs: &[FieldError]) -> Self {
        let causes: Vec<Value> = errs
            .iter()
            .map(|e| {
                let mut c = Map::new();
                c.insert("reason".into(), json!(e.kind.reason()));
                c.insert("message".into(), json!(e.body()));
                if !e.field.is_empty() {
                    c.insert("field".into(), json!(e.field));
                }
                Value::Object(c)
            })
            .collect();
        let mut details = Map::new();
        if !name.is_empty() {
            details.insert("name".into(), json!(name));
        }
        if !group.is_empty() {
            details.insert("group".into(), json!(group));
        }
        if !kind.is_empty() {
            details.insert("kind".into(), json!(kind));
        }
        if !causes.is_empty() {
            details.insert("causes".into(), Value::Array(causes));
        }
        let qualified = if group.is_empty() { kind.to_string() } else { format!("{kind}.{group}") };
        let message = match aggregate(errs) {
            None => format!("{qualified} {} is invalid", quote(name)),
            Some(a) => format!("{qualified} {} is invalid: {a}", quote(name)),
        };
        Self::new(422, "Invalid", message, Some(Value::Object(details)))
    }
}

/// `ErrorList.ToAggregate().Error()`: messages deduplicated, bracketed when more than one.
fn aggregate(errs: &[FieldError]) -> Option<String> {
    let mut msgs: Vec<String> = Vec::new();
    for e in errs {
        let m = e.error();
        if !msgs.contains(&m) {
            msgs.push(m);
        }
    }
    match msgs.len() {
        0 => None,
        1 => msgs.pop(),
        _ => Some(format!("[{}]", msgs.join(", "))),
    }
}

/// A resource as errors name it: `pods`, `events.events.k8s.io`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Resource {
    pub group: &'static str,
    pub plural: &'static str,
}

impl Resource {
    pub const PODS: Resource = Resource { group: "", plural: "pods" };

    pub(crate) fn qualified(&self) -> String {
        if self.group.is_empty() {
            self.plural.to_string()
        } else {
            format!("{}.{}", self.plural, self.group)
        }
    }

    fn details(&self, name: &str) -> Value {
        let mut d = Map::new();
        d.insert("name".into(), json!(name));
        if !self.group.is_empty() {
            d.insert("group".into(), json!(self.group));
        }
        d.insert("kind".into(), json!(self.plural));
        Value::Object(d)
    }
}

// === name and value syntax (k8s.io/apimachinery/pkg/util/validation) ===

fn regex_error(msg: &str, fmt: &str, examples: &[&str]) -> String {
    if examples.is_empty() {
        return format!("{msg} (regex used for validation is '{fmt}')");
    }
    let mut s = format!("{msg} (e.g. ");
    for (i, e) in examples.iter().enumerate() {
        if i > 0 {
            s.push_str(" or ");
        }
        s.push_str(&format!("'{e}', "));
    }
    s.push_str(&format!("regex used for validation is '{fmt}')"));
    s
}

const QUALIFIED_NAME_FMT: &str = "([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]";
const QUALIFIED_NAME_MSG: &str = "must consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character";
const DNS1123_SUBDOMAIN_FMT: &str = r"[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*";
const DNS1123_SUBDOMAIN_MSG: &str = "a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.', and must start and end with an alphanumeric character";
const DNS1123_LABEL_FMT: &str = "[a-z0-9]([-a-z0-9]*[a-z0-9])?";
const DNS1123_LABEL_MSG: &str = "a lowercase RFC 1123 label must consist of lower case alphanumeric characters or '-', and must start and end with an alphanumeric character";
const LABEL_VALUE_FMT: &str = "(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?";
const LABEL_VALUE_MSG: &str = "a valid label must be an empty string or consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character";

fn is_qualified_name_part(s: &str) -> bool {
    let b = s.as_bytes();
    !b.is_empty()
        && b[0].is_ascii_alphanumeric()
        && b[b.len() - 1].is_ascii_alphanumeric()
        && b.iter().all(|c| c.is_ascii_alphanumeric() || matches!(c, b'-' | b'_' | b'.'))
}

fn is_dns1123_label_part(s: &str) -> bool {
    let b = s.as_bytes();
    let ok = |c: &u8| c.is_ascii_lowercase() || c.is_ascii_digit();
    !b.is_empty() && ok(&b[0]) && ok(&b[b.len() - 1]) && b.iter().all(|c| ok(c) || *c == b'-')
}

/// `IsDNS1123Subdomain`.
pub(crate) fn dns1123_subdomain(s: &str) -> Vec<String> {
    let mut errs = Vec::new();
    if s.len() > 253 {
        errs.push("must be no more than 253 characters".to_string());
    }
    if !s.split('.').all(is_dns1123_label_part) {
        errs.push(regex_error(DNS1123_SUBDOMAIN_MSG, DNS1123_SUBDOMAIN_FMT, &["example.com"]));
    }
    errs
}

/// `IsDNS1123Label`.
pub(crate) fn dns1123_label(s: &str) -> Vec<String> {
    let mut errs = Vec::new();
    if s.len() > 63 {
        errs.push("must be no more than 63 characters".to_string());
    }
    if !is_dns1123_label_part(s) {
        errs.push(regex_error(DNS1123_LABEL_MSG, DNS1123_LABEL_FMT, &["my-name", "123-abc"]));
    }
    errs
}

/// `IsQualifiedName`.
pub(crate) fn qualified_name(value: &str) -> Vec<String> {
    let mut errs = Vec::new();
    let parts: Vec<&str> = value.split('/').collect();
    let name = match parts.as_slice() {
        [name] => *name,
        [prefix, name] => {
            if prefix.is_empty() {
                errs.push("prefix part must be non-empty".to_string());
            } else {
                errs.extend(dns1123_subdomain(prefix).into_iter().map(|m| format!("prefix part {m}")));
            }
            *name
        }
        _ => {
            return vec![format!(
                "a qualified name {} with an optional DNS subdomain prefix and '/' (e.g. 'example.com/MyName')",
                regex_error(QUALIFIED_NAME_MSG, QUALIFIED_NAME_FMT, &["MyName", "my.name", "123-abc"])
            )];
        }
    };
    if name.is_empty() {
        errs.push("name part must be non-empty".to_string());
    } else if name.len() > 63 {
        errs.push("name part must be no more than 63 characters".to_string());
    }
    if !is_qualified_name_part(name) {
        errs.push(format!(
            "name part {}",
            regex_error(QUALIFIED_NAME_MSG, QUALIFIED_NAME_FMT, &["MyName", "my.name", "123-abc"])
        ));
    }
    errs
}

/// `ValidateQualifiedName`.
pub(crate) fn validate_qualified_name(value: &str, field: &str) -> Vec<FieldError> {
    qualified_name(value)
        .into_iter()
        .map(|m| FieldError::invalid(field, BadValue::Str(value.into()), m))
        .collect()
}

fn label_value(v: &str) -> Vec<String> {
    let mut errs = Vec::new();
    if v.len() > 63 {
        errs.push("must be no more than 63 characters".to_string());
    }
    if !v.is_empty() && !is_qualified_name_part(v) {
        errs.push(regex_error(LABEL_VALUE_MSG, LABEL_VALUE_FMT, &["MyValue", "my_value", "12345"]));
    }
    errs
}

fn str_map(v: Option<&Value>) -> Vec<(String, String)> {
    v.and_then(Value::as_object)
        .map(|m| m.iter().map(|(k, v)| (k.clone(), v.as_str().unwrap_or("").to_string())).collect())
        .unwrap_or_default()
}

/// `ValidateLabels` and `ValidateAnnotations` of an object's metadata.
fn validate_labels_annotations(meta: &Value) -> Vec<FieldError> {
    let mut errs = Vec::new();
    for (k, v) in str_map(meta.get("labels")) {
        errs.extend(validate_qualified_name(&k, "metadata.labels"));
        for m in label_value(&v) {
            errs.push(FieldError::invalid(format!("metadata.labels[{k}]"), BadValue::Str(v.clone()), m));
        }
    }
    for (k, _) in str_map(meta.get("annotations")) {
        for m in qualified_name(&k.to_lowercase()) {
            errs.push(FieldError::invalid("metadata.annotations", BadValue::Str(k.clone()), m));
        }
    }
    errs
}

fn meta_str<'a>(obj: &'a Value, key: &str) -> &'a str {
    obj.pointer(&format!("/metadata/{key}")).and_then(Value::as_str).unwrap_or("")
}

/// `ValidateObjectMetaUpdate`: immutable identity fields and label syntax.
pub(crate) fn validate_object_meta_update(new: &Value, old: &Value) -> Vec<FieldError> {
    let mut errs = Vec::new();
    for key in ["name", "namespace", "uid"] {
        let (n, o) = (meta_str(new, key), meta_str(old, key));
        if n != o {
            errs.push(FieldError::invalid(
                format!("metadata.{key}"),
                BadValue::Str(n.into()),
                "field is immutable",
            ));
        }
    }
    if let Some(g) = new.pointer("/metadata/generation").and_then(Value::as_i64)
        && g < 0
    {
        errs.push(FieldError::invalid(
            "metadata.generation",
            BadValue::Int(g),
            "must be greater than or equal to 0",
        ));
    }
    errs.extend(validate_labels_annotations(new.get("metadata").unwrap_or(&Value::Null)));
    errs
}

/// Metadata checks on create (`ValidateObjectMeta`).
pub(crate) fn validate_object_meta_create(obj: &Value, name_is_label: bool) -> Vec<FieldError> {
    let mut errs = Vec::new();
    let name = meta_str(obj, "name");
    if name.is_empty() {
        errs.push(FieldError::required("metadata.name", "name or generateName is required"));
    } else {
        let msgs = if name_is_label { dns1123_label(name) } else { dns1123_subdomain(name) };
        for m in msgs {
            errs.push(FieldError::invalid("metadata.name", BadValue::Str(name.into()), m));
        }
    }
    errs.extend(validate_labels_annotations(obj.get("metadata").unwrap_or(&Value::Null)));
    errs
}

// === pods ===

const SYSTEM_CONDITIONS: [&str; 3] = ["PodScheduled", "Ready", "Initialized"];
const IP_DETAIL: &str = "must be a valid IP address, (e.g. 10.9.8.7 or 2001:db8::ffff)";

fn ip_list(status: &Value, key: &str) -> Vec<String> {
    status
        .get(key)
        .and_then(Value::as_array)
        .map(|a| a.iter().map(|x| x.get("ip").and_then(Value::as_str).unwrap_or("").to_string()).collect())
        .unwrap_or_default()
}

fn validate_ip_list(field: &str, ips: &[String], existing: &[String]) -> Vec<FieldError> {
    let mut errs = Vec::new();
    for (i, ip) in ips.iter().enumerate() {
        if existing.contains(ip) {
            continue;
        }
        if ip.parse::<IpAddr>().is_err() {
            errs.push(FieldError::invalid(format!("{field}[{i}]"), BadValue::Str(ip.clone()), IP_DETAIL));
        }
    }
    if ips.len() > 1 {
        let v4 = ips.iter().filter(|ip| matches!(ip.parse::<IpAddr>(), Ok(IpAddr::V4(_)))).count();
        let dual_stack = ips.len() == 2 && v4 == 1;
        if !dual_stack {
            // Go prints the internal []PodIP / []HostIP (no json tags) as JSON.
            let raw = format!(
                "[{}]",
                ips.iter()
                    .map(|ip| format!("{{\"IP\":{}}}", serde_json::to_string(ip).unwrap_or_default()))
                    .collect::<Vec<_>>()
                    .join(",")
            );
            errs.push(FieldError::invalid(
                field,
                BadValue::Raw(raw),
                "may specify no more than one IP for each IP family",
            ));
        }
    }
    errs
}

fn restart_policy(pod: &Value) -> &str {
    pod.pointer("/spec/restartPolicy").and_then(Value::as_str).unwrap_or("Always")
}

fn container_state_transitions(new: &Value, old: &Value, key: &str, policy: &str) -> Vec<FieldError> {
    let mut errs = Vec::new();
    if policy == "Always" {
        return errs;
    }
    let list = |v: &Value| {
        v.pointer(&format!("/status/{key}")).and_then(Value::as_array).cloned().unwrap_or_default()
    };
    let (new_list, old_list) = (list(new), list(old));
    for (i, ns) in new_list.iter().enumerate() {
        let name = ns.get("name");
        let Some(os) = old_list.iter().find(|o| o.get("name") == name) else { continue };
        let Some(term) = os.pointer("/state/terminated") else { continue };
        if ns.pointer("/state/terminated").is_some() {
            continue;
        }
        let exit_ok = term.get("exitCode").and_then(Value::as_i64) == Some(0);
        if policy == "Never" || exit_ok {
            errs.push(FieldError::forbidden(
                format!("status.{key}[{i}].state"),
                "may not be transitioned to non-terminated state",
            ));
        }
    }
    errs
}

fn validate_observed_generations(status: &Value) -> Vec<FieldError> {
    let mut errs = Vec::new();
    if let Some(g) = status.get("observedGeneration").and_then(Value::as_i64)
        && g < 0
    {
        errs.push(FieldError::invalid(
            "status.observedGeneration",
            BadValue::Int(g),
            "must be a non-negative integer",
        ));
    }
    for (i, c) in status.get("conditions").and_then(Value::as_array).into_iter().flatten().enumerate() {
        if let Some(g) = c.get("observedGeneration").and_then(Value::as_i64)
            && g < 0
        {
            errs.push(FieldError::invalid(
                format!("status.conditions[{i}].observedGeneration"),
                BadValue::Int(g),
                "must be a non-negative integer",
            ));
        }
    }
    errs
}

/// `ValidatePodStatusUpdate` (the strategy's part; the caller adds the common metadata checks).
pub(crate) fn validate_pod_status_update(new: &Value, old: &Value) -> Vec<FieldError> {
    let mut errs = validate_object_meta_update(new, old);
    let status = new.get("status").cloned().unwrap_or(Value::Null);
    let old_status = old.get("status").cloned().unwrap_or(Value::Null);
    for (i, c) in status.get("conditions").and_then(Value::as_array).into_iter().flatten().enumerate() {
        let t = c.get("type").and_then(Value::as_str).unwrap_or("");
        if SYSTEM_CONDITIONS.contains(&t) {
            continue;
        }
        errs.extend(validate_qualified_name(t, &format!("status.conditions[{i}].Type")));
    }
    let policy = restart_policy(old);
    errs.extend(container_state_transitions(new, old, "containerStatuses", policy));
    errs.extend(container_state_transitions(new, old, "initContainerStatuses", policy));
    errs.extend(container_state_transitions(new, old, "ephemeralContainerStatuses", "Never"));

    let pod_ips = ip_list(&status, "podIPs");
    errs.extend(validate_ip_list("status.podIPs", &pod_ips, &ip_list(&old_status, "podIPs")));

    let host_ips = ip_list(&status, "hostIPs");
    if let Some(first) = host_ips.first() {
        let host_ip = status.get("hostIP").and_then(Value::as_str).unwrap_or("");
        if host_ip != first {
            errs.push(FieldError::invalid(
                "status.hostIPs[0].ip",
                BadValue::Str(first.clone()),
                "must be equal to `hostIP`",
            ));
        }
        errs.extend(validate_ip_list("status.hostIPs", &host_ips, &ip_list(&old_status, "hostIPs")));
    }
    errs.extend(validate_observed_generations(&status));
    errs
}

/// The update rules of `ValidatePodUpdate` for the main resource: only images,
/// `activeDeadlineSeconds` and added tolerations may change.
pub(crate) fn validate_pod_update(new: &Value, old: &Value) -> Vec<FieldError> {
    let mut errs = validate_object_meta_update(new, old);
    let (ns, os) =
        (new.get("spec").cloned().unwrap_or(Value::Null), old.get("spec").cloned().unwrap_or(Value::Null));
    match (
        ns.get("activeDeadlineSeconds").and_then(Value::as_i64),
        os.get("activeDeadlineSeconds").and_then(Value::as_i64),
    ) {
        (Some(n), _) if !(0..=i64::from(i32::MAX)).contains(&n) => {
            errs.push(FieldError::invalid(
                "spec.activeDeadlineSeconds",
                BadValue::Int(n),
                "must be between 0 and 2147483647, inclusive",
            ));
            return errs;
        }
        (Some(n), Some(o)) if o < n => {
            errs.push(FieldError::invalid(
                "spec.activeDeadlineSeconds",
                BadValue::Int(n),
                "must be less than or equal to previous value",
            ));
            return errs;
        }
        (None, Some(_)) => errs.push(FieldError::invalid(
            "spec.activeDeadlineSeconds",
            BadValue::Raw("null".into()),
            "must not update from a positive integer to nil value",
        )),
        _ => {}
    }
    // Everything else must stay: copy the mutable fields from the new spec and compare.
    let mut munged = ns.clone();
    if let Value::Object(m) = &mut munged {
        for key in ["containers", "initContainers"] {
            if let (Some(Value::Array(nl)), Some(Value::Array(ol))) = (m.get_mut(key), os.get(key)) {
                for (n, o) in nl.iter_mut().zip(ol) {
                    if let (Value::Object(n), Some(img)) = (n, o.get("image")) {
                        n.insert("image".into(), img.clone());
                    }
                }
            }
        }
        match os.get("activeDeadlineSeconds") {
            Some(v) => m.insert("activeDeadlineSeconds".into(), v.clone()),
            None => m.remove("activeDeadlineSeconds"),
        };
        let old_tol = os.get("tolerations").and_then(Value::as_array).cloned().unwrap_or_default();
        let new_tol = m.get("tolerations").and_then(Value::as_array).cloned().unwrap_or_default();
        if old_tol.iter().all(|t| new_tol.contains(t)) {
            match os.get("tolerations") {
                Some(v) => m.insert("tolerations".into(), v.clone()),
                None => m.remove("tolerations"),
            };
        }
    }
    if munged != os {
        errs.push(FieldError::forbidden(
            "spec",
            "pod updates may not change fields other than `spec.containers[*].image`,`spec.initContainers[*].image`,`spec.activeDeadlineSeconds`,`spec.tolerations` (only additions to existing tolerations),`spec.terminationGracePeriodSeconds` (allow it to be set to 1 if it was previously negative)",
        ));
    }
    errs
}

/// The subset of `ValidatePodCreate` the fake checks: metadata and containers.
pub(crate) fn validate_pod_create(pod: &Value) -> Vec<FieldError> {
    let mut errs = validate_object_meta_create(pod, false);
    for key in ["initContainers", "containers"] {
        let list =
            pod.pointer(&format!("/spec/{key}")).and_then(Value::as_array).cloned().unwrap_or_default();
        if key == "containers" && list.is_empty() {
            errs.push(FieldError::required("spec.containers", ""));
        }
        let mut seen: Vec<String> = Vec::new();
        for (i, c) in list.iter().enumerate() {
            let name = c.get("name").and_then(Value::as_str).unwrap_or("");
            let path = format!("spec.{key}[{i}]");
            if name.is_empty() {
                errs.push(FieldError::required(format!("{path}.name"), ""));
            } else {
                for m in dns1123_label(name) {
                    errs.push(FieldError::invalid(format!("{path}.name"), BadValue::Str(name.into()), m));
                }
                if seen.iter().any(|s| s == name) {
                    errs.push(FieldError::duplicate(format!("{path}.name"), BadValue::Str(name.into())));
                }
                seen.push(name.to_string());
            }
            if c.get("image").and_then(Value::as_str).unwrap_or("").is_empty() {
                errs.push(FieldError::required(format!("{path}.image"), ""));
            }
        }
    }
    errs
}

// === events ===

/// Which API a request came through; events validate differently per version.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum EventApi {
    CoreV1,
    EventsV1,
}

fn ev_str<'a>(e: &'a Value, key: &str) -> &'a str {
    e.get(key).and_then(Value::as_str).unwrap_or("")
}

/// `legacyValidateEvent` on the stored (core) form.
fn legacy_validate_event(e: &Value, api: EventApi) -> Vec<FieldError> {
    let mut errs = Vec::new();
    let ns = meta_str(e, "namespace");
    let involved_ns = e.pointer("/involvedObject/namespace").and_then(Value::as_str).unwrap_or("");
    let controller_field = if api == EventApi::CoreV1 { "reportingComponent" } else { "reportingController" };
    if e.get("eventTime").is_none_or(Value::is_null) {
        let bad = if involved_ns.is_empty() { !ns.is_empty() && ns != "default" } else { ns != involved_ns };
        if bad {
            errs.push(FieldError::invalid(
                "involvedObject.namespace",
                BadValue::Str(involved_ns.into()),
                "does not match event.namespace",
            ));
        }
    } else {
        if involved_ns.is_empty() && ns != "default" && ns != "kube-system" {
            errs.push(FieldError::invalid(
                "involvedObject.namespace",
                BadValue::Str(involved_ns.into()),
                "does not match event.namespace",
            ));
        }
        let controller = ev_str(e, "reportingComponent");
        if controller.is_empty() {
            errs.push(FieldError::required(controller_field, ""));
        }
        errs.extend(validate_qualified_name(controller, controller_field));
        let instance = ev_str(e, "reportingInstance");
        if instance.is_empty() {
            errs.push(FieldError::required("reportingInstance", ""));
        }
        if instance.len() > 128 {
            errs.push(FieldError::invalid(
                "reportingInstance",
                BadValue::Str(String::new()),
                "can have at most 128 characters",
            ));
        }
        let action = ev_str(e, "action");
        if action.is_empty() {
            errs.push(FieldError::required("action", ""));
        }
        if action.len() > 128 {
            errs.push(FieldError::invalid(
                "action",
                BadValue::Str(String::new()),
                "can have at most 128 characters",
            ));
        }
        let reason = ev_str(e, "reason");
        if reason.is_empty() {
            errs.push(FieldError::required("reason", ""));
        }
        if reason.len() > 128 {
            errs.push(FieldError::invalid(
                "reason",
                BadValue::Str(String::new()),
                "can have at most 128 characters",
            ));
        }
        if ev_str(e, "message").len() > 1024 {
            errs.push(FieldError::invalid(
                "message",
                BadValue::Str(String::new()),
                "can have at most 1024 characters",
            ));
        }
    }
    for m in dns1123_subdomain(ns) {
        errs.push(FieldError::invalid("namespace", BadValue::Str(ns.into()), m));
    }
    errs
}

fn validate_v1_event_series(e: &Value) -> Vec<FieldError> {
    let mut errs = Vec::new();
    if let Some(s) = e.get("series").filter(|s| !s.is_null()) {
        if s.get("count").and_then(Value::as_i64).unwrap_or(0) < 2 {
            errs.push(FieldError::invalid(
                "series.count",
                BadValue::Str(String::new()),
                "should be at least 2",
            ));
        }
        if s.get("lastObservedTime").is_none_or(Value::is_null) {
            errs.push(FieldError::required("series.lastObservedTime", ""));
        }
    }
    errs
}

/// `ValidateEventCreate` on the stored (core) form.
pub(crate) fn validate_event_create(e: &Value, api: EventApi) -> Vec<FieldError> {
    let mut errs = legacy_validate_event(e, api);
    if api == EventApi::CoreV1 {
        return errs;
    }
    errs.extend(validate_object_meta_create(e, false));
    errs.extend(validate_v1_event_series(e));
    if e.get("eventTime").is_none_or(Value::is_null) {
        errs.push(FieldError::required("eventTime", ""));
    }
    let t = ev_str(e, "type");
    if t != "Normal" && t != "Warning" {
        errs.push(FieldError::invalid(
            "type",
            BadValue::Str(String::new()),
            format!("has invalid value: {t}"),
        ));
    }
    if e.get("firstTimestamp").is_some_and(|v| !v.is_null()) {
        errs.push(FieldError::invalid("firstTimestamp", BadValue::Str(String::new()), "needs to be unset"));
    }
    if e.get("lastTimestamp").is_some_and(|v| !v.is_null()) {
        errs.push(FieldError::invalid("lastTimestamp", BadValue::Str(String::new()), "needs to be unset"));
    }
    if e.get("count").and_then(Value::as_i64).unwrap_or(0) != 0 {
        errs.push(FieldError::invalid("count", BadValue::Str(String::new()), "needs to be unset"));
    }
    if e.get("source").and_then(Value::as_object).is_some_and(|s| !s.is_empty()) {
        errs.push(FieldError::invalid("source", BadValue::Str(String::new()), "needs to be unset"));
    }
    errs
}

/// `ValidateEventUpdate` on the stored (core) forms.
pub(crate) fn validate_event_update(new: &Value, old: &Value, api: EventApi) -> Vec<FieldError> {
    let mut errs = legacy_validate_event(new, api);
    if api == EventApi::CoreV1 {
        return errs;
    }
    errs.extend(validate_object_meta_update(new, old));
    if new.get("series") != old.get("series") {
        errs.extend(validate_v1_event_series(new));
    }
    for (key, field) in [
        ("involvedObject", "involvedObject"),
        ("reason", "reason"),
        ("message", "message"),
        ("source", "source"),
        ("firstTimestamp", "firstTimestamp"),
        ("lastTimestamp", "lastTimestamp"),
        ("count", "count"),
        ("reason", "reason"),
        ("type", "type"),
        ("eventTime", "eventTime"),
        ("action", "action"),
        ("related", "related"),
        ("reportingComponent", "reportingController"),
        ("reportingInstance", "reportingInstance"),
    ] {
        let (n, o) =
            (new.get(key).cloned().unwrap_or(Value::Null), old.get(key).cloned().unwrap_or(Value::Null));
        if n != o {
            let v = match &n {
                Value::String(s) => BadValue::Str(s.clone()),
                Value::Number(x) => BadValue::Int(x.as_i64().unwrap_or(0)),
                other => BadValue::Raw(other.to_string()),
            };
            errs.push(FieldError::invalid(field, v, "field is immutable"));
        }
    }
    errs
}
