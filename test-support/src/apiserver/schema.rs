//! The Go shapes of the objects the fake API server stores: field order, `omitempty`, pointers,
//! value types, and the strategic-merge-patch strategies of each list (the `patchStrategy` and
//! `patchMergeKey` struct tags of `k8s.io/api`).
//!
//! kube-apiserver decodes every write into Go structs and encodes them back, so a stored object
//! differs from what the client sent: unknown fields vanish (with a warning), `lastProbeTime: null`
//! appears, `lastState: {}` appears, timestamps are cut to whole seconds. [`decode`] does the same
//! to a JSON value; `Ordered` writes a value with the keys in Go's field order.

use std::sync::{Arc, OnceLock};

use serde::ser::{SerializeMap, SerializeSeq};
use serde_json::{Map, Value};

use super::golang;

/// A Go type, as far as JSON encoding and patching care.
#[derive(Clone)]
pub enum Ty {
    Str,
    Int32,
    Int64,
    Bool,
    /// `metav1.Time`: RFC 3339, whole seconds, `null` when zero.
    Time,
    /// `metav1.MicroTime`: RFC 3339 with microseconds, `null` when zero.
    MicroTime,
    /// `resource.Quantity`, kept as sent.
    Quantity,
    /// `intstr.IntOrString`.
    IntOrString,
    Struct(Arc<StructTy>),
    List(Box<Ty>),
    Map(Box<Ty>),
    /// A subtree this fake does not model field by field; kept as sent.
    Any,
}

/// A Go struct: its name (for error texts) and its fields in declaration order.
pub struct StructTy {
    pub name: &'static str,
    pub fields: Vec<Field>,
}

/// How a field is encoded when it holds its zero value.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum Omit {
    /// No `omitempty`: always written (zero value, or `null` for nil slices/maps).
    Never,
    /// `omitempty` on a value type: left out when zero (structs are never left out).
    Empty,
    /// A pointer with `omitempty`: left out when nil, written (even if zero) otherwise.
    Ptr,
}

/// A field's strategic-merge-patch strategy.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum Strategy {
    /// No tag: lists are replaced whole, maps merged key by key.
    None,
    /// `patchStrategy:"merge"` with the merge key (`None` for lists of scalars).
    Merge(Option<&'static str>),
    /// `patchStrategy:"merge,retainKeys"`.
    MergeRetainKeys(&'static str),
    /// `patchStrategy:"replace"`.
    Replace,
}

pub struct Field {
    pub name: &'static str,
    pub ty: Ty,
    pub omit: Omit,
    pub strategy: Strategy,
}

impl Ty {
    /// The type and patch strategy of the member `key` of a value of this type.
    pub(crate) fn member(&self, key: &str) -> (Ty, Strategy) {
        match self {
            Ty::Struct(s) => s
                .fields
                .iter()
                .find(|f| f.name == key)
                .map(|f| (f.ty.clone(), f.strategy))
                .unwrap_or((Ty::Any, Strategy::None)),
            Ty::Map(t) => ((**t).clone(), Strategy::None),
            _ => (Ty::Any, Strategy::None),
        }
    }

    /// The element type of a list type.
    pub(crate) fn elem(&self) -> Ty {
        match self {
            Ty::List(t) => (**t).clone(),
            _ => Ty::Any,
        }
    }

    fn go_name(&self) -> String {
        match self {
            Ty::Str => "string".into(),
            Ty::Int32 => "int32".into(),
            Ty::Int64 => "int64".into(),
            Ty::Bool => "bool".into(),
            Ty::Time => "v1.Time".into(),
            Ty::MicroTime => "v1.MicroTime".into(),
            Ty::Quantity => "resource.Quantity".into(),
            Ty::IntOrString => "intstr.IntOrString".into(),
            Ty::Struct(s) => format!("v1.{}", s.name),
            Ty::List(t) => format!("[]{}", t.go_name()),
            Ty::Map(t) => format!("map[string]{}", t.go_name()),
            Ty::Any => "interface {}".into(),
        }
    }

    fn go_kind(&self) -> &'static str {
        match self {
            Ty::Str => "string",
            Ty::Int32 => "int32",
            Ty::Int64 => "int64",
            Ty::Bool => "bool",
            Ty::Struct(_) | Ty::Time | Ty::MicroTime | Ty::Quantity | Ty::IntOrString => "struct",
            Ty::List(_) => "slice",
            Ty::Map(_) => "map",
            Ty::Any => "interface",
        }
    }
}

// === decoding ===

/// A value that does not fit its Go type.
#[derive(Debug, Clone)]
pub struct TypeError {
    /// `status.containerStatuses.ready` (no indices), as Go's json errors print it.
    pub go_path: String,
    /// The innermost Go struct holding the field.
    pub struct_name: &'static str,
    pub json_type: &'static str,
    pub go_type: String,
    pub go_kind: &'static str,
    /// The reflect kind of the unstructured source value.
    pub src_kind: &'static str,
    /// A message that replaces both texts (bad timestamps).
    pub custom: Option<String>,
}

impl TypeError {
    /// The text of `runtime.DefaultUnstructuredConverter.FromUnstructured`, used for SMP.
    pub fn converter_message(&self) -> String {
        if let Some(c) = &self.custom {
            return c.clone();
        }
        match self.go_kind {
            "struct" => format!("cannot restore struct from: {}", self.src_kind),
            "slice" => format!("cannot restore slice from {}", self.src_kind),
            "map" => format!("cannot restore map from {}", self.src_kind),
            k => format!("unrecognized type: {k}"),
        }
    }

    /// The text of `encoding/json`, used for bodies and JSON/merge patches.
    pub fn json_message(&self) -> String {
        if let Some(c) = &self.custom {
            return c.clone();
        }
        format!(
            "json: cannot unmarshal {} into Go struct field {}.{} of type {}",
            self.json_type, self.struct_name, self.go_path, self.go_type
        )
    }
}

/// A decoded value with the unknown fields that were dropped.
pub struct Decoded {
    pub value: Value,
    /// Paths such as `status.bogusField`, in document order.
    pub unknown: Vec<String>,
}

/// Decodes `v` into `ty` and encodes it back the way Go's `encoding/json` would.
pub fn decode(v: &Value, ty: &Ty) -> Result<Decoded, Box<TypeError>> {
    let mut d = Dec { path: Vec::new(), go_path: Vec::new(), unknown: Vec::new() };
    let value = d.value(v, ty, "")?;
    Ok(Decoded { value, unknown: d.unknown })
}

/// The zero value of `ty` as Go encodes it.
pub fn zero(ty: &Ty) -> Value {
    match ty {
        Ty::Str => Value::String(String::new()),
        Ty::Int32 | Ty::Int64 | Ty::IntOrString => Value::Number(0.into()),
        Ty::Bool => Value::Bool(false),
        Ty::Quantity => Value::String("0".into()),
        Ty::Struct(_) => decode(&Value::Object(Map::new()), ty).map(|d| d.value).unwrap_or(Value::Null),
        _ => Value::Null,
    }
}

/// Whether `omitempty` leaves out `v` of type `ty`.
fn is_empty(v: &Value, ty: &Ty) -> bool {
    match ty {
        Ty::Struct(_) | Ty::Time | Ty::MicroTime | Ty::Quantity | Ty::IntOrString => false,
        _ => match v {
            Value::Null => true,
            Value::Bool(b) => !b,
            Value::Number(n) => n.as_f64() == Some(0.0),
            Value::String(s) => s.is_empty(),
            Value::Array(a) => a.is_empty(),
            Value::Object(m) => m.is_empty(),
        },
    }
}

fn json_type(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "bool",
        Value::Number(_) => "number",
        Value::String(_) => "string",
        Value::Array(_) => "array",
        Value::Object(_) => "object",
    }
}

fn src_kind(v: &Value) -> &'static str {
    match v {
        Value::Null => "invalid",
        Value::Bool(_) => "bool",
        Value::Number(n) if n.is_f64() => "float64",
        Value::Number(_) => "int64",
        Value::String(_) => "string",
        Value::Array(_) => "slice",
        Value::Object(_) => "map",
    }
}

struct Dec {
    path: Vec<String>,
    go_path: Vec<String>,
    unknown: Vec<String>,
}

impl Dec {
    fn err(&self, v: &Value, ty: &Ty, struct_name: &'static str) -> Box<TypeError> {
        Box::new(TypeError {
            go_path: self.go_path.join("."),
            struct_name,
            json_type: json_type(v),
            go_type: ty.go_name(),
            go_kind: ty.go_kind(),
            src_kind: src_kind(v),
            custom: None,
        })
    }

    fn path_str(&self) -> String {
        let mut s = String::new();
        for p in &self.path {
            if p.starts_with('[') || s.is_empty() {
                s.push_str(p);
            } else {
                s.push('.');
                s.push_str(p);
            }
        }
        s
    }

    fn value(&mut self, v: &Value, ty: &Ty, owner: &'static str) -> Result<Value, Box<TypeError>> {
        if v.is_null() {
            return Ok(zero(ty));
        }
        match ty {
            Ty::Any => Ok(v.clone()),
            Ty::Str => match v {
                Value::String(_) => Ok(v.clone()),
                _ => Err(self.err(v, ty, owner)),
            },
            Ty::Bool => match v {
                Value::Bool(_) => Ok(v.clone()),
                _ => Err(self.err(v, ty, owner)),
            },
            Ty::Int32 | Ty::Int64 => {
                let n = match v {
                    Value::Number(n) => n,
                    _ => return Err(self.err(v, ty, owner)),
                };
                let i = match n.as_i64() {
                    Some(i) => i,
                    None => match n.as_f64() {
                        Some(f) if f.fract() == 0.0 && f.abs() < 9.2e18 => f as i64,
                        _ => return Err(self.err(v, ty, owner)),
                    },
                };
                if matches!(ty, Ty::Int32) && i32::try_from(i).is_err() {
                    return Err(self.err(v, ty, owner));
                }
                Ok(Value::Number(i.into()))
            }
            Ty::Time | Ty::MicroTime => match v {
                Value::String(s) if s.is_empty() => Ok(Value::Null),
                Value::String(s) => match golang::parse_rfc3339(s) {
                    Ok(t) => Ok(Value::String(if matches!(ty, Ty::Time) {
                        t.rfc3339()
                    } else {
                        t.rfc3339_micro()
                    })),
                    Err(msg) => {
                        let mut e = self.err(v, ty, owner);
                        e.custom = Some(msg);
                        Err(e)
                    }
                },
                _ => Err(self.err(v, ty, owner)),
            },
            Ty::Quantity => match v {
                Value::String(_) => Ok(v.clone()),
                Value::Number(n) => Ok(Value::String(n.to_string())),
                _ => Err(self.err(v, ty, owner)),
            },
            Ty::IntOrString => match v {
                Value::String(_) => Ok(v.clone()),
                Value::Number(n) if n.as_i64().is_some() => Ok(v.clone()),
                _ => Err(self.err(v, ty, owner)),
            },
            Ty::List(elem) => {
                let Value::Array(items) = v else { return Err(self.err(v, ty, owner)) };
                let mut out = Vec::with_capacity(items.len());
                for (i, item) in items.iter().enumerate() {
                    self.path.push(format!("[{i}]"));
                    let r = self.value(item, elem, owner);
                    self.path.pop();
                    out.push(r?);
                }
                Ok(Value::Array(out))
            }
            Ty::Map(elem) => {
                let Value::Object(m) = v else { return Err(self.err(v, ty, owner)) };
                let mut out = Map::new();
                for (k, item) in m {
                    out.insert(k.clone(), self.value(item, elem, owner)?);
                }
                Ok(Value::Object(out))
            }
            Ty::Struct(st) => {
                let Value::Object(m) = v else { return Err(self.err(v, ty, owner)) };
                // Go's decoder walks the input in its order (a patched object is encoded with
                // sorted keys first), so unknown fields are reported in that order, nested ones
                // included; the output keeps the struct's order.
                let mut decoded: std::collections::HashMap<&str, Option<Value>> = Default::default();
                for (k, item) in m {
                    match st.fields.iter().find(|f| f.name == k) {
                        Some(f) => {
                            self.path.push(f.name.to_string());
                            self.go_path.push(f.name.to_string());
                            let r = self.field(Some(item), f, st.name);
                            self.path.pop();
                            self.go_path.pop();
                            decoded.insert(f.name, r?);
                        }
                        None => {
                            self.path.push(k.clone());
                            self.unknown.push(self.path_str());
                            self.path.pop();
                        }
                    }
                }
                let mut out = Map::new();
                for f in &st.fields {
                    let val = match decoded.remove(f.name) {
                        Some(val) => val,
                        None => {
                            self.path.push(f.name.to_string());
                            self.go_path.push(f.name.to_string());
                            let r = self.field(None, f, st.name);
                            self.path.pop();
                            self.go_path.pop();
                            r?
                        }
                    };
                    if let Some(val) = val {
                        out.insert(f.name.to_string(), val);
                    }
                }
                Ok(Value::Object(out))
            }
        }
    }

    fn field(
        &mut self,
        v: Option<&Value>,
        f: &Field,
        owner: &'static str,
    ) -> Result<Option<Value>, Box<TypeError>> {
        match (f.omit, v) {
            (Omit::Ptr, None | Some(Value::Null)) => Ok(None),
            (Omit::Ptr, Some(v)) => self.value(v, &f.ty, owner).map(Some),
            (Omit::Never, v) => self.value(v.unwrap_or(&Value::Null), &f.ty, owner).map(Some),
            (Omit::Empty, v) => {
                let val = self.value(v.unwrap_or(&Value::Null), &f.ty, owner)?;
                Ok(if is_empty(&val, &f.ty) { None } else { Some(val) })
            }
        }
    }
}

// === ordered output ===

/// Serializes a value with object keys in the Go field order of `ty` (keys the type does not
/// know follow in alphabetical order).
pub(crate) struct Ordered<'a>(pub(crate) &'a Value, pub(crate) &'a Ty);

impl serde::Serialize for Ordered<'_> {
    fn serialize<S: serde::Serializer>(&self, ser: S) -> Result<S::Ok, S::Error> {
        match (self.0, self.1) {
            (Value::Object(m), Ty::Struct(st)) => {
                let mut map = ser.serialize_map(Some(m.len()))?;
                for f in &st.fields {
                    if let Some(v) = m.get(f.name) {
                        map.serialize_entry(f.name, &Ordered(v, &f.ty))?;
                    }
                }
                for (k, v) in m {
                    if !st.fields.iter().any(|f| f.name == k) {
                        map.serialize_entry(k, v)?;
                    }
                }
                map.end()
            }
            (Value::Object(m), Ty::Map(elem)) => {
                let mut map = ser.serialize_map(Some(m.len()))?;
                for (k, v) in m {
                    map.serialize_entry(k, &Ordered(v, elem))?;
                }
                map.end()
            }
            (Value::Array(a), Ty::List(elem)) => {
                let mut seq = ser.serialize_seq(Some(a.len()))?;
                for v in a {
                    seq.serialize_element(&Ordered(v, elem))?;
                }
                seq.end()
            }
            (v, _) => v.serialize(ser),
        }
    }
}

/// `value` as JSON bytes with Go's key order.
pub(crate) fn to_json(value: &Value, ty: &Ty) -> Vec<u8> {
    serde_json::to_vec(&Ordered(value, ty)).unwrap_or_default()
}

// === the schemas ===

fn f(name: &'static str, ty: Ty, omit: Omit) -> Field {
    Field { name, ty, omit, strategy: Strategy::None }
}

fn fs(name: &'static str, ty: Ty, omit: Omit, strategy: Strategy) -> Field {
    Field { name, ty, omit, strategy }
}

fn st(name: &'static str, fields: Vec<Field>) -> Ty {
    Ty::Struct(Arc::new(StructTy { name, fields }))
}

fn list(t: Ty) -> Ty {
    Ty::List(Box::new(t))
}

fn map(t: Ty) -> Ty {
    Ty::Map(Box::new(t))
}

use Omit::{Empty, Never, Ptr};
use Ty::{Any, Bool, Int32, Int64, MicroTime, Quantity, Str, Time};

fn type_meta() -> Vec<Field> {
    vec![f("kind", Str, Empty), f("apiVersion", Str, Empty)]
}

fn object_meta() -> Ty {
    let owner_ref = st(
        "OwnerReference",
        vec![
            f("apiVersion", Str, Never),
            f("kind", Str, Never),
            f("name", Str, Never),
            f("uid", Str, Never),
            f("controller", Bool, Ptr),
            f("blockOwnerDeletion", Bool, Ptr),
        ],
    );
    st(
        "ObjectMeta",
        vec![
            f("name", Str, Empty),
            f("generateName", Str, Empty),
            f("namespace", Str, Empty),
            f("selfLink", Str, Empty),
            f("uid", Str, Empty),
            f("resourceVersion", Str, Empty),
            f("generation", Int64, Empty),
            f("creationTimestamp", Time, Empty),
            f("deletionTimestamp", Time, Ptr),
            f("deletionGracePeriodSeconds", Int64, Ptr),
            f("labels", map(Str), Empty),
            f("annotations", map(Str), Empty),
            fs("ownerReferences", list(owner_ref), Empty, Strategy::Merge(Some("uid"))),
            fs("finalizers", list(Str), Empty, Strategy::Merge(None)),
            f("managedFields", list(Any), Empty),
        ],
    )
}

fn list_meta() -> Ty {
    st(
        "ListMeta",
        vec![
            f("selfLink", Str, Empty),
            f("resourceVersion", Str, Empty),
            f("continue", Str, Empty),
            f("remainingItemCount", Int64, Ptr),
        ],
    )
}

fn resource_requirements() -> Ty {
    st(
        "ResourceRequirements",
        vec![
            f("limits", map(Quantity), Empty),
            f("requests", map(Quantity), Empty),
            f("claims", list(Any), Empty),
        ],
    )
}

fn probe() -> Ty {
    let http_get = st(
        "HTTPGetAction",
        vec![
            f("path", Str, Empty),
            f("port", Ty::IntOrString, Never),
            f("host", Str, Empty),
            f("scheme", Str, Empty),
            f("httpHeaders", list(Any), Empty),
        ],
    );
    let grpc = st("GRPCAction", vec![f("port", Int32, Never), f("service", Str, Ptr)]);
    let tcp = st("TCPSocketAction", vec![f("port", Ty::IntOrString, Never), f("host", Str, Empty)]);
    let exec = st("ExecAction", vec![f("command", list(Str), Empty)]);
    st(
        "Probe",
        vec![
            f("exec", exec, Ptr),
            f("httpGet", http_get, Ptr),
            f("tcpSocket", tcp, Ptr),
            f("grpc", grpc, Ptr),
            f("initialDelaySeconds", Int32, Empty),
            f("timeoutSeconds", Int32, Empty),
            f("periodSeconds", Int32, Empty),
            f("successThreshold", Int32, Empty),
            f("failureThreshold", Int32, Empty),
            f("terminationGracePeriodSeconds", Int64, Ptr),
        ],
    )
}

fn container() -> Ty {
    let port = st(
        "ContainerPort",
        vec![
            f("name", Str, Empty),
            f("hostPort", Int32, Empty),
            f("containerPort", Int32, Never),
            f("protocol", Str, Empty),
            f("hostIP", Str, Empty),
        ],
    );
    st(
        "Container",
        vec![
            f("name", Str, Never),
            f("image", Str, Empty),
            f("command", list(Str), Empty),
            f("args", list(Str), Empty),
            f("workingDir", Str, Empty),
            fs("ports", list(port), Empty, Strategy::Merge(Some("containerPort"))),
            f("envFrom", list(Any), Empty),
            fs("env", list(Any), Empty, Strategy::Merge(Some("name"))),
            f("resources", resource_requirements(), Empty),
            f("resizePolicy", list(Any), Empty),
            f("restartPolicy", Str, Ptr),
            f("restartPolicyRules", list(Any), Empty),
            fs("volumeMounts", list(Any), Empty, Strategy::Merge(Some("mountPath"))),
            fs("volumeDevices", list(Any), Empty, Strategy::Merge(Some("devicePath"))),
            f("livenessProbe", probe(), Ptr),
            f("readinessProbe", probe(), Ptr),
            f("startupProbe", probe(), Ptr),
            f("lifecycle", Any, Ptr),
            f("terminationMessagePath", Str, Empty),
            f("terminationMessagePolicy", Str, Empty),
            f("imagePullPolicy", Str, Empty),
            f("securityContext", Any, Ptr),
            f("stdin", Bool, Empty),
            f("stdinOnce", Bool, Empty),
            f("tty", Bool, Empty),
        ],
    )
}

fn pod_spec() -> Ty {
    let toleration = st(
        "Toleration",
        vec![
            f("key", Str, Empty),
            f("operator", Str, Empty),
            f("value", Str, Empty),
            f("effect", Str, Empty),
            f("tolerationSeconds", Int64, Ptr),
        ],
    );
    st(
        "PodSpec",
        vec![
            fs("volumes", list(Any), Empty, Strategy::MergeRetainKeys("name")),
            fs("initContainers", list(container()), Empty, Strategy::Merge(Some("name"))),
            fs("containers", list(container()), Never, Strategy::Merge(Some("name"))),
            fs("ephemeralContainers", list(Any), Empty, Strategy::Merge(Some("name"))),
            f("restartPolicy", Str, Empty),
            f("terminationGracePeriodSeconds", Int64, Ptr),
            f("activeDeadlineSeconds", Int64, Ptr),
            f("dnsPolicy", Str, Empty),
            f("nodeSelector", map(Str), Empty),
            f("serviceAccountName", Str, Empty),
            f("serviceAccount", Str, Empty),
            f("automountServiceAccountToken", Bool, Ptr),
            f("nodeName", Str, Empty),
            f("hostNetwork", Bool, Empty),
            f("hostPID", Bool, Empty),
            f("hostIPC", Bool, Empty),
            f("shareProcessNamespace", Bool, Ptr),
            f("securityContext", Any, Ptr),
            fs("imagePullSecrets", list(Any), Empty, Strategy::Merge(Some("name"))),
            f("hostname", Str, Empty),
            f("subdomain", Str, Empty),
            f("affinity", Any, Ptr),
            f("schedulerName", Str, Empty),
            f("tolerations", list(toleration), Empty),
            fs("hostAliases", list(Any), Empty, Strategy::Merge(Some("ip"))),
            f("priorityClassName", Str, Empty),
            f("priority", Int32, Ptr),
            f("dnsConfig", Any, Ptr),
            f("readinessGates", list(Any), Empty),
            f("runtimeClassName", Str, Ptr),
            f("enableServiceLinks", Bool, Ptr),
            f("preemptionPolicy", Str, Ptr),
            f("overhead", map(Quantity), Empty),
            fs("topologySpreadConstraints", list(Any), Empty, Strategy::Merge(Some("topologyKey"))),
            f("setHostnameAsFQDN", Bool, Ptr),
            f("os", Any, Ptr),
            f("hostUsers", Bool, Ptr),
            fs("schedulingGates", list(Any), Empty, Strategy::Merge(Some("name"))),
            fs("resourceClaims", list(Any), Empty, Strategy::MergeRetainKeys("name")),
            f("resources", resource_requirements(), Ptr),
            f("hostnameOverride", Str, Ptr),
        ],
    )
}

/// `VolumeMountStatus` as of v1.36, whose `volumeStatus` (the image volume's digest, feature
/// gate ImageVolumeWithDigest) k8s-openapi's v1_35 structs lack: the fake is the newer server.
fn volume_mount_status() -> Ty {
    let image = st("ImageVolumeStatus", vec![f("imageRef", Str, Never)]);
    let volume_status = st("VolumeStatus", vec![f("image", image, Ptr)]);
    st(
        "VolumeMountStatus",
        vec![
            f("name", Str, Never),
            f("mountPath", Str, Never),
            f("readOnly", Bool, Empty),
            f("recursiveReadOnly", Str, Ptr),
            f("volumeStatus", volume_status, Ptr),
        ],
    )
}

fn container_status() -> Ty {
    let waiting = st("ContainerStateWaiting", vec![f("reason", Str, Empty), f("message", Str, Empty)]);
    let running = st("ContainerStateRunning", vec![f("startedAt", Time, Empty)]);
    let terminated = st(
        "ContainerStateTerminated",
        vec![
            f("exitCode", Int32, Never),
            f("signal", Int32, Empty),
            f("reason", Str, Empty),
            f("message", Str, Empty),
            f("startedAt", Time, Empty),
            f("finishedAt", Time, Empty),
            f("containerID", Str, Empty),
        ],
    );
    let state = || {
        st(
            "ContainerState",
            vec![
                f("waiting", waiting.clone(), Ptr),
                f("running", running.clone(), Ptr),
                f("terminated", terminated.clone(), Ptr),
            ],
        )
    };
    st(
        "ContainerStatus",
        vec![
            f("name", Str, Never),
            f("state", state(), Empty),
            f("lastState", state(), Empty),
            f("ready", Bool, Never),
            f("restartCount", Int32, Never),
            f("image", Str, Never),
            f("imageID", Str, Never),
            f("containerID", Str, Empty),
            f("started", Bool, Ptr),
            f("allocatedResources", map(Quantity), Empty),
            f("resources", Any, Ptr),
            f("volumeMounts", list(volume_mount_status()), Empty),
            f("user", Any, Ptr),
            f("allocatedResourcesStatus", list(Any), Empty),
            f("stopSignal", Str, Ptr),
        ],
    )
}

fn pod_status() -> Ty {
    let condition = st(
        "PodCondition",
        vec![
            f("type", Str, Never),
            f("observedGeneration", Int64, Empty),
            f("status", Str, Never),
            f("lastProbeTime", Time, Empty),
            f("lastTransitionTime", Time, Empty),
            f("reason", Str, Empty),
            f("message", Str, Empty),
        ],
    );
    let host_ip = st("HostIP", vec![f("ip", Str, Never)]);
    let pod_ip = st("PodIP", vec![f("ip", Str, Never)]);
    st(
        "PodStatus",
        vec![
            f("observedGeneration", Int64, Empty),
            f("phase", Str, Empty),
            fs("conditions", list(condition), Empty, Strategy::Merge(Some("type"))),
            f("message", Str, Empty),
            f("reason", Str, Empty),
            f("nominatedNodeName", Str, Empty),
            f("hostIP", Str, Empty),
            fs("hostIPs", list(host_ip), Empty, Strategy::Merge(Some("ip"))),
            f("podIP", Str, Empty),
            fs("podIPs", list(pod_ip), Empty, Strategy::Merge(Some("ip"))),
            f("startTime", Time, Ptr),
            f("initContainerStatuses", list(container_status()), Empty),
            f("containerStatuses", list(container_status()), Empty),
            f("qosClass", Str, Empty),
            f("ephemeralContainerStatuses", list(container_status()), Empty),
            f("resize", Str, Empty),
            fs("resourceClaimStatuses", list(Any), Empty, Strategy::MergeRetainKeys("name")),
            f("extendedResourceClaimStatus", Any, Ptr),
        ],
    )
}

fn object_reference() -> Ty {
    st(
        "ObjectReference",
        vec![
            f("kind", Str, Empty),
            f("namespace", Str, Empty),
            f("name", Str, Empty),
            f("uid", Str, Empty),
            f("apiVersion", Str, Empty),
            f("resourceVersion", Str, Empty),
            f("fieldPath", Str, Empty),
        ],
    )
}

fn event_source() -> Ty {
    st("EventSource", vec![f("component", Str, Empty), f("host", Str, Empty)])
}

/// The schemas, built once.
pub struct Schemas {
    pub pod: Ty,
    pub pod_list: Ty,
    pub event_core: Ty,
    pub event_core_list: Ty,
    pub event_v1: Ty,
    pub event_v1_list: Ty,
    pub status: Ty,
    pub delete_options: Ty,
    pub binding: Ty,
}

pub fn schemas() -> &'static Schemas {
    static S: OnceLock<Schemas> = OnceLock::new();
    S.get_or_init(|| {
        let pod = {
            let mut fields = type_meta();
            fields.push(f("metadata", object_meta(), Empty));
            fields.push(f("spec", pod_spec(), Empty));
            fields.push(f("status", pod_status(), Empty));
            st("Pod", fields)
        };
        let list_of = |name: &'static str, item: &Ty| {
            let mut fields = type_meta();
            fields.push(f("metadata", list_meta(), Empty));
            fields.push(f("items", list(item.clone()), Never));
            st(name, fields)
        };
        let event_core = {
            let series =
                st("EventSeries", vec![f("count", Int32, Empty), f("lastObservedTime", MicroTime, Empty)]);
            let mut fields = type_meta();
            fields.extend([
                f("metadata", object_meta(), Empty),
                f("involvedObject", object_reference(), Never),
                f("reason", Str, Empty),
                f("message", Str, Empty),
                f("source", event_source(), Empty),
                f("firstTimestamp", Time, Empty),
                f("lastTimestamp", Time, Empty),
                f("count", Int32, Empty),
                f("type", Str, Empty),
                f("eventTime", MicroTime, Never),
                f("series", series, Ptr),
                f("action", Str, Empty),
                f("related", object_reference(), Ptr),
                f("reportingComponent", Str, Never),
                f("reportingInstance", Str, Never),
            ]);
            st("Event", fields)
        };
        let event_v1 = {
            let series =
                st("EventSeries", vec![f("count", Int32, Never), f("lastObservedTime", MicroTime, Never)]);
            let mut fields = type_meta();
            fields.extend([
                f("metadata", object_meta(), Empty),
                f("eventTime", MicroTime, Never),
                f("series", series, Ptr),
                f("reportingController", Str, Empty),
                f("reportingInstance", Str, Empty),
                f("action", Str, Empty),
                f("reason", Str, Empty),
                f("regarding", object_reference(), Empty),
                f("related", object_reference(), Ptr),
                f("note", Str, Empty),
                f("type", Str, Empty),
                f("deprecatedSource", event_source(), Empty),
                f("deprecatedFirstTimestamp", Time, Empty),
                f("deprecatedLastTimestamp", Time, Empty),
                f("deprecatedCount", Int32, Empty),
            ]);
            st("Event", fields)
        };
        let status = {
            let cause = st(
                "StatusCause",
                vec![f("reason", Str, Empty), f("message", Str, Empty), f("field", Str, Empty)],
            );
            let details = st(
                "StatusDetails",
                vec![
                    f("name", Str, Empty),
                    f("group", Str, Empty),
                    f("kind", Str, Empty),
                    f("uid", Str, Empty),
                    f("causes", list(cause), Empty),
                    f("retryAfterSeconds", Int32, Empty),
                ],
            );
            let mut fields = type_meta();
            fields.extend([
                f("metadata", list_meta(), Empty),
                f("status", Str, Empty),
                f("message", Str, Empty),
                f("reason", Str, Empty),
                f("details", details, Ptr),
                f("code", Int32, Empty),
            ]);
            st("Status", fields)
        };
        let delete_options = {
            let pre = st("Preconditions", vec![f("uid", Str, Ptr), f("resourceVersion", Str, Ptr)]);
            let mut fields = type_meta();
            fields.extend([
                f("gracePeriodSeconds", Int64, Ptr),
                f("preconditions", pre, Ptr),
                f("orphanDependents", Bool, Ptr),
                f("propagationPolicy", Str, Ptr),
                f("dryRun", list(Str), Empty),
                f("ignoreStoreReadErrorWithClusterBreakingPotential", Bool, Ptr),
            ]);
            st("DeleteOptions", fields)
        };
        let binding = {
            let mut fields = type_meta();
            fields.extend([f("metadata", object_meta(), Empty), f("target", object_reference(), Never)]);
            st("Binding", fields)
        };
        Schemas {
            pod_list: list_of("PodList", &pod),
            event_core_list: list_of("EventList", &event_core),
            event_v1_list: list_of("EventList", &event_v1),
            pod,
            event_core,
            event_v1,
            status,
            delete_options,
            binding,
        }
    })
}
