//! The fake's storage and registry logic: one global resourceVersion counter bumped per change
//! (like etcd's revision), a change history that serves watches and exact-version lists, and the
//! create/update/patch/delete strategies of pods (`pkg/registry/core/pod`), pods/status,
//! pods/binding and events (`pkg/registry/core/event`), as the generic registry store
//! (`k8s.io/apiserver/pkg/registry/generic/registry/store.go`) runs them.

use std::collections::BTreeMap;

use bytes::Bytes;
use serde_json::{Map, Value, json};
use tokio::sync::mpsc;

use super::golang::{self, Instant, fmt_v, quote};
use super::patch::{self, SmpError};
use super::schema::{self, Ty, schemas, to_json};
use super::selectors::{FieldSelector, FieldSet, LabelSelector};
use super::validation::{self as v, ApiError, BadValue, EventApi, FieldError, Resource};

/// The resourceVersion the store starts at: the cluster has "already" made this many changes, so
/// a watch from version 1 is too old, as on a real cluster.
pub(crate) const INITIAL_RESOURCE_VERSION: u64 = 100;

/// The API a request addresses.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Api {
    Pods,
    EventsCore,
    EventsV1,
}

impl Api {
    fn kind(self) -> Kind {
        match self {
            Api::Pods => Kind::Pod,
            _ => Kind::Event,
        }
    }

    pub fn resource(self) -> Resource {
        match self {
            Api::Pods => Resource::PODS,
            Api::EventsCore => Resource { group: "", plural: "events" },
            Api::EventsV1 => Resource { group: "events.k8s.io", plural: "events" },
        }
    }

    fn ty(self) -> &'static Ty {
        match self {
            Api::Pods => &schemas().pod,
            Api::EventsCore => &schemas().event_core,
            Api::EventsV1 => &schemas().event_v1,
        }
    }

    fn list_ty(self) -> &'static Ty {
        match self {
            Api::Pods => &schemas().pod_list,
            Api::EventsCore => &schemas().event_core_list,
            Api::EventsV1 => &schemas().event_v1_list,
        }
    }

    fn api_version(self) -> &'static str {
        match self {
            Api::EventsV1 => "events.k8s.io/v1",
            _ => "v1",
        }
    }

    fn kind_name(self) -> &'static str {
        match self {
            Api::Pods => "Pod",
            _ => "Event",
        }
    }

    fn field_set(self) -> FieldSet {
        match self {
            Api::Pods => FieldSet::Pod,
            Api::EventsCore => FieldSet::EventCore,
            Api::EventsV1 => FieldSet::EventV1,
        }
    }

    fn event_api(self) -> EventApi {
        if self == Api::EventsV1 { EventApi::EventsV1 } else { EventApi::CoreV1 }
    }
}

/// What is stored (both event APIs share one store, like upstream).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Kind {
    Pod,
    Event,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ChangeType {
    Added,
    Modified,
    Deleted,
}

/// One entry of the change history.
#[derive(Clone, Debug)]
pub struct Change {
    pub rv: u64,
    pub kind: Kind,
    pub ty: ChangeType,
    /// The object before the change (`None` for Added).
    pub prev: Option<Value>,
    /// The object after the change; for Deleted the last state with the deletion's version.
    pub obj: Value,
}

/// An open watch.
pub struct Watcher {
    api: Api,
    ns: Option<String>,
    fields: FieldSelector,
    labels: LabelSelector,
    tx: mpsc::UnboundedSender<Bytes>,
}

/// Watches taken out of a stopping server's store ([`Store::detach_watches`]).
pub struct DetachedWatches {
    // Held, never read: dropping them ends the watch streams.
    _held: Vec<Watcher>,
}

/// A reply with a body.
#[derive(Clone, Debug)]
pub struct Reply {
    pub code: u16,
    pub body: Vec<u8>,
    pub warnings: Vec<String>,
    pub retry_after: Option<u64>,
}

impl Reply {
    fn object(code: u16, value: &Value, ty: &Ty) -> Reply {
        Reply { code, body: to_json(value, ty), warnings: Vec::new(), retry_after: None }
    }

    pub fn error(e: &ApiError) -> Reply {
        Reply {
            code: e.code,
            body: to_json(&e.status_json(), &schemas().status),
            warnings: Vec::new(),
            retry_after: e.retry_after,
        }
    }
}

/// The start of a watch stream.
pub struct WatchStart {
    /// Which API the watch is of (for its bookmarks).
    pub api: Api,
    /// Events to send first.
    pub initial: Vec<Bytes>,
    /// Live events; `None` when the stream ends after `initial`.
    pub live: Option<mpsc::UnboundedReceiver<Bytes>>,
}

/// How a request is answered.
pub enum Outcome {
    Reply(Reply),
    /// Close the connection without an answer (the real server panicked).
    Drop,
    Watch(WatchStart),
}

impl From<ApiError> for Outcome {
    fn from(e: ApiError) -> Self {
        Outcome::Reply(Reply::error(&e))
    }
}

/// A request as the store sees it.
pub struct Req<'a> {
    pub query: &'a [(String, String)],
    /// The media type without parameters.
    pub content_type: &'a str,
    pub body: &'a [u8],
}

impl Req<'_> {
    pub fn param(&self, key: &str) -> Option<&str> {
        self.query.iter().find(|(k, _)| k == key).map(|(_, v)| v.as_str())
    }

    fn dry_run(&self) -> bool {
        self.query.iter().any(|(k, v)| k == "dryRun" && v == "All")
    }

    fn field_validation(&self) -> &str {
        self.param("fieldValidation").unwrap_or("Warn")
    }
}

/// The patch types, by content type.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum PatchType {
    Json,
    Merge,
    Strategic,
    Apply,
}

fn patch_type(content_type: &str) -> Option<PatchType> {
    match content_type {
        "application/json-patch+json" => Some(PatchType::Json),
        "application/merge-patch+json" => Some(PatchType::Merge),
        "application/strategic-merge-patch+json" => Some(PatchType::Strategic),
        "application/apply-patch+yaml" | "application/apply-patch+cbor" => Some(PatchType::Apply),
        _ => None,
    }
}

/// Which part of a pod a write addresses.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Sub {
    Main,
    Status,
}

/// SplitMix64: a small seedable generator for UIDs and generated names.
pub struct SplitMix(pub u64);

impl SplitMix {
    pub(crate) fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    /// A uniform float in [0, 1).
    pub(crate) fn next_f64(&mut self) -> f64 {
        (self.next_u64() >> 11) as f64 / (1u64 << 53) as f64
    }
}

/// The fake's state.
pub struct Store {
    pub rv: u64,
    /// Changes at or below this version are compacted away.
    pub floor: u64,
    pods: BTreeMap<(String, String), Value>,
    events: BTreeMap<(String, String), Value>,
    history: Vec<Change>,
    watchers: Vec<Watcher>,
    rng: SplitMix,
}

type Key = (String, String);

impl Store {
    pub fn new(seed: u64) -> Store {
        Store {
            rv: INITIAL_RESOURCE_VERSION,
            floor: INITIAL_RESOURCE_VERSION,
            pods: BTreeMap::new(),
            events: BTreeMap::new(),
            history: Vec::new(),
            watchers: Vec::new(),
            rng: SplitMix(seed),
        }
    }

    fn map(&self, kind: Kind) -> &BTreeMap<Key, Value> {
        match kind {
            Kind::Pod => &self.pods,
            Kind::Event => &self.events,
        }
    }

    fn map_mut(&mut self, kind: Kind) -> &mut BTreeMap<Key, Value> {
        match kind {
            Kind::Pod => &mut self.pods,
            Kind::Event => &mut self.events,
        }
    }

    pub fn uid(&mut self) -> String {
        let a = self.rng.next_u64();
        let b = self.rng.next_u64();
        let b = (b & 0x3fff_ffff_ffff_ffff) | 0x8000_0000_0000_0000;
        let a = (a & 0xffff_ffff_ffff_0fff) | 0x4000;
        format!(
            "{:08x}-{:04x}-{:04x}-{:04x}-{:012x}",
            a >> 32,
            (a >> 16) & 0xffff,
            a & 0xffff,
            b >> 48,
            b & 0xffff_ffff_ffff
        )
    }

    fn generated_name(&mut self, prefix: &str) -> String {
        const ALPHABET: &[u8] = b"bcdfghjklmnpqrstvwxz2456789";
        let suffix: String = (0..5)
            .map(|_| ALPHABET[(self.rng.next_u64() % ALPHABET.len() as u64) as usize] as char)
            .collect();
        format!("{prefix}{suffix}")
    }

    /// A stored pod, as the API serves it.
    pub fn pod(&self, ns: &str, name: &str) -> Option<Value> {
        self.pods.get(&(ns.to_string(), name.to_string())).map(|p| render(Api::Pods, p))
    }

    /// All stored objects of an API, rendered, in key order.
    pub fn all(&self, api: Api) -> Vec<Value> {
        self.map(api.kind()).values().map(|o| render(api, o)).collect()
    }

    /// Drops the change history: watches from older versions get 410 Expired.
    pub fn compact(&mut self) {
        self.floor = self.rv;
        self.history.clear();
    }

    /// Ends every open watch.
    pub fn close_watches(&mut self) {
        self.watchers.clear();
    }

    /// Takes the open watches out of the store: they get no more events, and end (a clean EOF)
    /// when the returned value is dropped. A stopping server's watches, which the process
    /// still holds open but no longer feeds.
    pub(crate) fn detach_watches(&mut self) -> DetachedWatches {
        DetachedWatches { _held: std::mem::take(&mut self.watchers) }
    }

    /// The server came back: its watch cache starts empty (the server writes its own objects
    /// as it starts, so the version moves on), and a watch from any version seen before gets
    /// 410 Expired, as a real server's does after a restart.
    pub fn restarted(&mut self) {
        self.rv += 1;
        self.compact();
    }

    /// A BOOKMARK event at the current version: a bare object with only
    /// `metadata.resourceVersion`, as the real server sends it.
    pub(crate) fn bookmark_line(&self, api: Api) -> Bytes {
        let bookmark = json!({
            "kind": api.kind_name(),
            "apiVersion": api.api_version(),
            "metadata": {"resourceVersion": self.rv.to_string()},
            "spec": {"containers": null},
            "status": {},
        });
        event_line("BOOKMARK", &bookmark, api.ty())
    }

    // === committing changes ===

    fn commit(&mut self, kind: Kind, ty: ChangeType, prev: Option<Value>, mut obj: Value) -> Value {
        self.rv += 1;
        set_meta(&mut obj, "resourceVersion", Value::String(self.rv.to_string()));
        let key = obj_key(&obj);
        match ty {
            ChangeType::Deleted => {
                self.map_mut(kind).remove(&key);
            }
            _ => {
                self.map_mut(kind).insert(key, obj.clone());
            }
        }
        let change = Change { rv: self.rv, kind, ty, prev, obj: obj.clone() };
        self.dispatch(&change);
        self.history.push(change);
        obj
    }

    fn dispatch(&mut self, change: &Change) {
        self.watchers.retain(|w| {
            if w.api.kind() != change.kind {
                return !w.tx.is_closed();
            }
            match watch_event(w, change) {
                Some(line) => w.tx.send(line).is_ok(),
                None => !w.tx.is_closed(),
            }
        });
    }

    /// Inserts an object as a test fixture (no admission, no validation), emitting ADDED or
    /// MODIFIED. Fills in uid, creationTimestamp and generation when missing.
    pub fn insert(&mut self, api: Api, obj: &Value) -> Result<Value, String> {
        let decoded = schema::decode(obj, api.ty()).map_err(|e| e.json_message())?;
        let mut o = to_storage(api, decoded.value);
        if meta_str(&o, "namespace").is_empty() {
            set_meta(&mut o, "namespace", json!("default"));
        }
        if meta_str(&o, "name").is_empty() {
            return Err("metadata.name is required".into());
        }
        if meta_str(&o, "uid").is_empty() {
            let uid = self.uid();
            set_meta(&mut o, "uid", json!(uid));
        }
        if o.pointer("/metadata/creationTimestamp").is_none_or(Value::is_null) {
            set_meta(&mut o, "creationTimestamp", json!(Instant::now().rfc3339()));
        }
        if api == Api::Pods && o.pointer("/metadata/generation").is_none() {
            set_meta(&mut o, "generation", json!(1));
        }
        let kind = api.kind();
        let prev = self.map(kind).get(&obj_key(&o)).cloned();
        let ty = if prev.is_some() { ChangeType::Modified } else { ChangeType::Added };
        let stored = self.commit(kind, ty, prev, o);
        Ok(render(api, &stored))
    }

    // === reads ===

    pub fn get(&self, api: Api, ns: &str, name: &str, req: &Req) -> Outcome {
        if let Some(rv) = req.param("resourceVersion")
            && let Err(e) = parse_rv(rv)
        {
            return e.into();
        }
        match self.map(api.kind()).get(&(ns.to_string(), name.to_string())) {
            Some(o) => Outcome::Reply(Reply::object(200, &render(api, o), api.ty())),
            None => ApiError::not_found(&api.resource(), name).into(),
        }
    }

    /// The objects of `kind` as they were at version `rv`.
    fn snapshot_at(&self, kind: Kind, rv: u64) -> BTreeMap<Key, Value> {
        let mut m = self.map(kind).clone();
        for c in self.history.iter().rev().filter(|c| c.rv > rv && c.kind == kind) {
            let key = obj_key(&c.obj);
            match (&c.ty, &c.prev) {
                (ChangeType::Added, _) => {
                    m.remove(&key);
                }
                (_, Some(p)) => {
                    m.insert(key, p.clone());
                }
                (_, None) => {}
            }
        }
        m
    }

    pub fn list(&self, api: Api, ns: Option<&str>, req: &Req) -> Outcome {
        let fields = match FieldSelector::parse(req.param("fieldSelector").unwrap_or(""), api.field_set()) {
            Ok(f) => f,
            Err(e) => return ApiError::bad_request(e).into(),
        };
        let labels = match LabelSelector::parse(req.param("labelSelector").unwrap_or("")) {
            Ok(l) => l,
            Err(e) => return ApiError::bad_request(e).into(),
        };
        let rv_param = req.param("resourceVersion").filter(|s| !s.is_empty());
        let rv = match rv_param.map(parse_rv).transpose() {
            Ok(rv) => rv,
            Err(e) => return e.into(),
        };
        let rv_match = req.param("resourceVersionMatch").filter(|s| !s.is_empty());
        let limit: usize = req.param("limit").and_then(|l| l.parse().ok()).unwrap_or(0);
        let continue_token = req.param("continue").filter(|s| !s.is_empty());

        if rv_match.is_some() && rv.is_none() {
            return ApiError::invalid(
                "meta.k8s.io",
                "ListOptions",
                "",
                &[FieldError::forbidden(
                    "resourceVersionMatch",
                    "resourceVersionMatch is forbidden unless resourceVersion is provided",
                )],
            )
            .into();
        }
        let (snapshot_rv, start_after) = match continue_token {
            Some(token) => match decode_continue(token) {
                Some((trv, key)) if trv >= self.floor => (trv, Some(key)),
                Some(_) => {
                    return ApiError::expired("The provided continue parameter is too old to display a consistent list result. You can start a new list without the continue parameter, or use the continue token in this response to retrieve the remainder of the results. Continuing with the provided token results in an inconsistent list - objects that were created, modified, or deleted between the time the first chunk was returned and now may show up in the list.").into();
                }
                None => return ApiError::bad_request("continue key is not valid: incorrect encoded start resourceVersion (version meta.k8s.io/v1)").into(),
            },
            None => match (rv, rv_match) {
                (Some(n), Some("Exact")) => {
                    if n < self.floor {
                        return ApiError::expired("The resourceVersion for the provided list is too old.").into();
                    }
                    if n > self.rv {
                        return too_large(n, self.rv).into();
                    }
                    (n, None)
                }
                (Some(n), _) if n > self.rv => return too_large(n, self.rv).into(),
                _ => (self.rv, None),
            },
        };
        let objects = if snapshot_rv == self.rv {
            self.map(api.kind()).clone()
        } else {
            self.snapshot_at(api.kind(), snapshot_rv)
        };
        let filtered = req.param("fieldSelector").is_some_and(|s| !s.is_empty())
            || req.param("labelSelector").is_some_and(|s| !s.is_empty());
        let mut items: Vec<(Key, Value)> = objects
            .into_iter()
            .filter(|(k, _)| start_after.as_ref().is_none_or(|s| k > s))
            .filter(|(k, _)| ns.is_none_or(|n| k.0 == n))
            .filter(|(_, o)| {
                fields.matches(o, api.field_set()) && labels.matches(o.pointer("/metadata/labels"))
            })
            .map(|(k, o)| (k, render(api, &o)))
            .collect();
        let mut meta = Map::new();
        meta.insert("resourceVersion".into(), json!(snapshot_rv.to_string()));
        if limit > 0 && items.len() > limit {
            let remaining = items.len() - limit;
            items.truncate(limit);
            if let Some((last, _)) = items.last() {
                meta.insert("continue".into(), json!(encode_continue(snapshot_rv, last)));
            }
            if !filtered {
                meta.insert("remainingItemCount".into(), json!(remaining));
            }
        }
        let items: Vec<Value> = items
            .into_iter()
            .map(|(_, mut o)| {
                if let Value::Object(m) = &mut o {
                    m.remove("kind");
                    m.remove("apiVersion");
                }
                o
            })
            .collect();
        let list = json!({
            "kind": format!("{}List", api.kind_name()),
            "apiVersion": api.api_version(),
            "metadata": Value::Object(meta),
            "items": items,
        });
        Outcome::Reply(Reply::object(200, &list, api.list_ty()))
    }

    pub fn watch(&mut self, api: Api, ns: Option<&str>, req: &Req) -> Outcome {
        let fields = match FieldSelector::parse(req.param("fieldSelector").unwrap_or(""), api.field_set()) {
            Ok(f) => f,
            Err(e) => return ApiError::bad_request(e).into(),
        };
        let labels = match LabelSelector::parse(req.param("labelSelector").unwrap_or("")) {
            Ok(l) => l,
            Err(e) => return ApiError::bad_request(e).into(),
        };
        let rv = match req.param("resourceVersion").filter(|s| !s.is_empty()).map(parse_rv).transpose() {
            Ok(rv) => rv,
            Err(e) => return e.into(),
        };
        let send_initial = req.param("sendInitialEvents") == Some("true");
        let (tx, rx) = mpsc::unbounded_channel();
        let w = Watcher { api, ns: ns.map(String::from), fields, labels, tx };
        let mut initial = Vec::new();
        match rv {
            Some(n) if n != 0 && !send_initial => {
                if n < self.floor {
                    let e = ApiError::expired(format!("too old resource version: {n} ({})", self.floor));
                    let line = event_line("ERROR", &e.status_json(), &schemas().status);
                    return Outcome::Watch(WatchStart { api, initial: vec![line], live: None });
                }
                for c in self.history.iter().filter(|c| c.rv > n && c.kind == api.kind()) {
                    if let Some(line) = watch_event(&w, c) {
                        initial.push(line);
                    }
                }
            }
            _ => {
                for o in self.map(api.kind()).values() {
                    if w.ns.as_deref().is_none_or(|n| n == meta_str(o, "namespace")) && passes(&w, o) {
                        initial.push(event_line("ADDED", &render(api, o), api.ty()));
                    }
                }
                if send_initial {
                    let mut bookmark =
                        schema::decode(&json!({}), api.ty()).map(|d| d.value).unwrap_or(json!({}));
                    bookmark["kind"] = json!(api.kind_name());
                    bookmark["apiVersion"] = json!(api.api_version());
                    set_meta(&mut bookmark, "resourceVersion", json!(self.rv.to_string()));
                    set_meta(&mut bookmark, "annotations", json!({"k8s.io/initial-events-end": "true"}));
                    initial.push(event_line("BOOKMARK", &bookmark, api.ty()));
                }
            }
        }
        self.watchers.push(w);
        Outcome::Watch(WatchStart { api, initial, live: Some(rx) })
    }

    // === writes ===

    pub fn create(&mut self, api: Api, ns: &str, req: &Req) -> Outcome {
        if req.content_type != "application/json" {
            return ApiError {
                code: 415,
                reason: "UnsupportedMediaType",
                message: "the body of the request was in an unknown format - accepted media types include: application/json, application/yaml, application/vnd.kubernetes.protobuf, application/cbor".into(),
                details: None,
                retry_after: None,
            }
            .into();
        }
        let (obj, warnings) = match decode_body(api, req) {
            Ok(x) => x,
            Err(e) => return e.into(),
        };
        let mut obj = to_storage(api, obj);
        let body_ns = meta_str(&obj, "namespace").to_string();
        if !body_ns.is_empty() && body_ns != ns {
            return ApiError::bad_request(
                "the namespace of the provided object does not match the namespace sent on the request",
            )
            .into();
        }
        set_meta(&mut obj, "namespace", json!(ns));
        if meta_str(&obj, "name").is_empty() {
            let prefix = meta_str(&obj, "generateName").to_string();
            if !prefix.is_empty() {
                let name = self.generated_name(&prefix);
                set_meta(&mut obj, "name", json!(name));
            }
        }
        let name = meta_str(&obj, "name").to_string();
        // System fields the client may not set.
        if let Some(Value::Object(m)) = obj.get_mut("metadata") {
            for key in [
                "uid",
                "resourceVersion",
                "selfLink",
                "deletionTimestamp",
                "deletionGracePeriodSeconds",
                "managedFields",
                "generation",
            ] {
                m.remove(key);
            }
        }
        let errs = match api {
            Api::Pods => {
                default_pod(&mut obj);
                let qos = qos_class(obj.get("spec").unwrap_or(&Value::Null));
                obj["status"] = json!({"phase": "Pending", "qosClass": qos});
                set_meta(&mut obj, "generation", json!(1));
                v::validate_pod_create(&obj)
            }
            _ => {
                if obj.get("source").is_none() {
                    obj["source"] = json!({});
                }
                let mut errs = v::validate_event_create(&obj, api.event_api());
                if errs.is_empty() && name.is_empty() {
                    errs.push(FieldError::required("metadata.name", "name or generateName is required"));
                }
                errs
            }
        };
        if !errs.is_empty() {
            return ApiError::invalid("", api.kind_name(), &name, &errs).into();
        }
        let key = (ns.to_string(), name.clone());
        if self.map(api.kind()).contains_key(&key) {
            return ApiError::already_exists(&api.resource(), &name).into();
        }
        let uid = self.uid();
        set_meta(&mut obj, "uid", json!(uid));
        set_meta(&mut obj, "creationTimestamp", json!(Instant::now().rfc3339()));
        let stored = if req.dry_run() { obj } else { self.commit(api.kind(), ChangeType::Added, None, obj) };
        let mut r = Reply::object(201, &render(api, &stored), api.ty());
        r.warnings = warnings;
        Outcome::Reply(r)
    }

    /// PATCH of a pod, pods/status or an event.
    pub fn patch(&mut self, api: Api, sub: Sub, ns: &str, name: &str, req: &Req) -> Outcome {
        let Some(pt) = patch_type(req.content_type) else { return ApiError::unsupported_media_type().into() };
        let key = (ns.to_string(), name.to_string());
        let Some(current) = self.map(api.kind()).get(&key).cloned() else {
            return ApiError::not_found(&api.resource(), name).into();
        };
        let versioned = render(api, &current);
        let validation = req.field_validation();
        let (patched, warnings) = match apply_patch(api, pt, &versioned, req, validation) {
            Ok(PatchResult::Patched(p, w)) => (p, w),
            Ok(PatchResult::Drop) => return Outcome::Drop,
            Err(e) => return e.into(),
        };
        self.finish_update(api, sub, current, to_storage(api, patched), warnings, req.dry_run())
    }

    /// PUT of a pod, pods/status or an event.
    pub fn update(&mut self, api: Api, sub: Sub, ns: &str, name: &str, req: &Req) -> Outcome {
        if req.content_type != "application/json" {
            return ApiError::unsupported_media_type().into();
        }
        let (obj, warnings) = match decode_body(api, req) {
            Ok(x) => x,
            Err(e) => return e.into(),
        };
        let mut obj = to_storage(api, obj);
        let body_name = meta_str(&obj, "name").to_string();
        if body_name != name {
            return ApiError::bad_request(format!(
                "the name of the object ({body_name}) does not match the name on the URL ({name})"
            ))
            .into();
        }
        let body_ns = meta_str(&obj, "namespace").to_string();
        if !body_ns.is_empty() && body_ns != ns {
            return ApiError::bad_request(
                "the namespace of the provided object does not match the namespace sent on the request",
            )
            .into();
        }
        set_meta(&mut obj, "namespace", json!(ns));
        let key = (ns.to_string(), name.to_string());
        let Some(current) = self.map(api.kind()).get(&key).cloned() else {
            return ApiError::not_found(&api.resource(), name).into();
        };
        let uid = meta_str(&obj, "uid").to_string();
        let current_uid = meta_str(&current, "uid").to_string();
        if !uid.is_empty() && uid != current_uid {
            let msg = format!(
                "StorageError: invalid object, Code: 4, Key: /registry/{}/{ns}/{name}, ResourceVersion: 0, AdditionalErrorMsg: Precondition failed: UID in precondition: {uid}, UID in object meta: {current_uid}",
                api.resource().plural
            );
            return ApiError::conflict(&api.resource(), name, &msg).into();
        }
        self.finish_update(api, sub, current, obj, warnings, req.dry_run())
    }

    /// The common tail of PATCH and PUT: optimistic concurrency, the strategy, validation,
    /// the no-op check, the commit.
    fn finish_update(
        &mut self,
        api: Api,
        sub: Sub,
        current: Value,
        mut new: Value,
        warnings: Vec<String>,
        dry_run: bool,
    ) -> Outcome {
        let name = meta_str(&current, "name").to_string();
        let new_rv = meta_str(&new, "resourceVersion").to_string();
        if !new_rv.is_empty() {
            match new_rv.parse::<u64>() {
                Err(_) => {
                    return ApiError::internal(format!(
                        "strconv.ParseUint: parsing {}: invalid syntax",
                        quote(&new_rv)
                    ))
                    .into();
                }
                Ok(n) if n != 0 && n.to_string() != meta_str(&current, "resourceVersion") => {
                    return ApiError::modified(&api.resource(), &name).into();
                }
                Ok(_) => {}
            }
        }
        // The strategy's PrepareForUpdate.
        if api == Api::Pods {
            match sub {
                Sub::Status => prepare_status_update(&mut new, &current),
                Sub::Main => {
                    new["status"] = current.get("status").cloned().unwrap_or(json!({}));
                }
            }
        }
        // rest.BeforeUpdate: fields a request cannot change.
        let old_gen = current.pointer("/metadata/generation").cloned();
        match old_gen {
            Some(g) => set_meta(&mut new, "generation", g),
            None => remove_meta(&mut new, "generation"),
        }
        if api == Api::Pods && sub == Sub::Main && new.get("spec") != current.get("spec") {
            let g = current.pointer("/metadata/generation").and_then(Value::as_i64).unwrap_or(0);
            set_meta(&mut new, "generation", json!(g + 1));
        }
        if meta_str(&new, "uid").is_empty() {
            set_meta(&mut new, "uid", json!(meta_str(&current, "uid")));
        }
        for key in ["creationTimestamp", "deletionTimestamp"] {
            match current.pointer(&format!("/metadata/{key}")) {
                Some(t) => set_meta(&mut new, key, t.clone()),
                None => remove_meta(&mut new, key),
            }
        }
        if new.pointer("/metadata/deletionGracePeriodSeconds").is_none()
            && let Some(g) = current.pointer("/metadata/deletionGracePeriodSeconds")
        {
            set_meta(&mut new, "deletionGracePeriodSeconds", g.clone());
        }
        if let Some(mf) = current.pointer("/metadata/managedFields") {
            set_meta(&mut new, "managedFields", mf.clone());
        }
        set_meta(&mut new, "resourceVersion", json!(meta_str(&current, "resourceVersion")));
        let mut errs = v::validate_object_meta_update(&new, &current);
        match api {
            Api::Pods => errs.extend(match sub {
                Sub::Status => v::validate_pod_status_update(&new, &current),
                Sub::Main => v::validate_pod_update(&new, &current),
            }),
            _ => errs.extend(v::validate_event_update(&new, &current, api.event_api())),
        }
        if !errs.is_empty() {
            return ApiError::invalid("", api.kind_name(), &name, &errs).into();
        }
        let new = canonical(api, new);
        let stored = if new == current || dry_run {
            if new == current { current } else { new }
        } else {
            let kind = api.kind();
            let updated = self.commit(kind, ChangeType::Modified, Some(current), new);
            self.delete_if_finished(kind, updated)
        };
        let mut r = Reply::object(200, &render(api, &stored), api.ty());
        r.warnings = warnings;
        Outcome::Reply(r)
    }

    /// An object with a deletion timestamp, grace period 0 and no finalizers left is removed.
    fn delete_if_finished(&mut self, kind: Kind, obj: Value) -> Value {
        let terminating = obj.pointer("/metadata/deletionTimestamp").is_some();
        let grace0 = obj.pointer("/metadata/deletionGracePeriodSeconds").and_then(Value::as_i64) == Some(0);
        let no_finalizers =
            obj.pointer("/metadata/finalizers").and_then(Value::as_array).is_none_or(Vec::is_empty);
        if terminating && grace0 && no_finalizers {
            self.commit(kind, ChangeType::Deleted, Some(obj.clone()), obj)
        } else {
            obj
        }
    }

    pub fn delete(&mut self, api: Api, ns: &str, name: &str, req: &Req) -> Outcome {
        let opts = match delete_options(req) {
            Ok(o) => o,
            Err(e) => return e.into(),
        };
        let dry_run = req.dry_run() || opts["dryRun"].as_array().is_some_and(|d| d.contains(&json!("All")));
        let key = (ns.to_string(), name.to_string());
        let Some(current) = self.map(api.kind()).get(&key).cloned() else {
            return ApiError::not_found(&api.resource(), name).into();
        };
        let precondition_res = Resource { group: "", plural: api.kind_name() };
        if let Some(uid) = opts.pointer("/preconditions/uid").and_then(Value::as_str) {
            let current_uid = meta_str(&current, "uid");
            if uid != current_uid {
                return ApiError::conflict(
                    &precondition_res,
                    name,
                    &format!("the UID in the precondition ({uid}) does not match the UID in record ({current_uid}). The object might have been deleted and then recreated"),
                )
                .into();
            }
        }
        if let Some(rv) = opts.pointer("/preconditions/resourceVersion").and_then(Value::as_str) {
            let current_rv = meta_str(&current, "resourceVersion");
            if rv != current_rv {
                return ApiError::conflict(
                    &precondition_res,
                    name,
                    &format!("the ResourceVersion in the precondition ({rv}) does not match the ResourceVersion in record ({current_rv}). The object might have been modified"),
                )
                .into();
            }
        }
        let kind = api.kind();
        if api != Api::Pods {
            if dry_run {
                return Outcome::Reply(Reply::object(200, &deleted_status(api, &current), &schemas().status));
            }
            self.commit(kind, ChangeType::Deleted, Some(current.clone()), current.clone());
            return Outcome::Reply(Reply::object(200, &deleted_status(api, &current), &schemas().status));
        }
        let grace = opts.get("gracePeriodSeconds").and_then(Value::as_i64).map(|g| if g < 0 { 1 } else { g });
        let now = Instant::now();
        let mut next = current.clone();
        // rest.BeforeDelete with the pod strategy's CheckGracefulDelete.
        let (graceful, pending) = if current.pointer("/metadata/deletionTimestamp").is_some() {
            match current.pointer("/metadata/deletionGracePeriodSeconds").and_then(Value::as_i64) {
                None | Some(0) => (false, false),
                Some(old_grace) => match grace {
                    Some(g) if g < old_grace => {
                        let old_ts = current
                            .pointer("/metadata/deletionTimestamp")
                            .and_then(Value::as_str)
                            .and_then(|s| golang::parse_rfc3339(s).ok())
                            .unwrap_or(now);
                        let ts = old_ts.plus_secs(g - old_grace);
                        set_meta(&mut next, "deletionTimestamp", json!(ts.rfc3339()));
                        set_meta(&mut next, "deletionGracePeriodSeconds", json!(g));
                        (true, false)
                    }
                    _ => (false, true),
                },
            }
        } else {
            let mut period = grace.unwrap_or_else(|| {
                current.pointer("/spec/terminationGracePeriodSeconds").and_then(Value::as_i64).unwrap_or(0)
            });
            if current.pointer("/spec/nodeName").and_then(Value::as_str).unwrap_or("").is_empty() {
                period = 0;
            }
            let phase = current.pointer("/status/phase").and_then(Value::as_str).unwrap_or("");
            if phase == "Succeeded" || phase == "Failed" {
                period = 0;
            }
            set_meta(&mut next, "deletionTimestamp", json!(now.plus_secs(period).rfc3339()));
            set_meta(&mut next, "deletionGracePeriodSeconds", json!(period));
            let g = current.pointer("/metadata/generation").and_then(Value::as_i64).unwrap_or(0);
            if g > 0 {
                set_meta(&mut next, "generation", json!(g + 1));
            }
            (true, false)
        };
        if dry_run {
            return Outcome::Reply(Reply::object(200, &render(api, &next), api.ty()));
        }
        let result = if pending {
            current
        } else if graceful {
            let updated = self.commit(kind, ChangeType::Modified, Some(current), next);
            self.delete_if_finished(kind, updated)
        } else {
            self.commit(kind, ChangeType::Deleted, Some(current.clone()), current)
        };
        Outcome::Reply(Reply::object(200, &render(api, &result), api.ty()))
    }

    /// POST pods/{name}/binding, what the scheduler does.
    pub fn bind(&mut self, ns: &str, name: &str, req: &Req) -> Outcome {
        let body: Value = match serde_json::from_slice(req.body) {
            Ok(b) => b,
            Err(_) => {
                let msg = golang::json_syntax_error(req.body).unwrap_or_else(|| "invalid body".into());
                return ApiError::bad_request(msg).into();
            }
        };
        let binding = match schema::decode(&body, &schemas().binding) {
            Ok(d) => d.value,
            Err(e) => return ApiError::bad_request(e.json_message()).into(),
        };
        let target = binding.pointer("/target/name").and_then(Value::as_str).unwrap_or("").to_string();
        if target.is_empty() {
            return ApiError::invalid("", "Binding", name, &[FieldError::required("target.name", "")]).into();
        }
        let key = (ns.to_string(), name.to_string());
        let Some(current) = self.pods.get(&key).cloned() else {
            return ApiError::not_found(&Resource::PODS, name).into();
        };
        let res = Resource { group: "", plural: "pods/binding" };
        if current.pointer("/metadata/deletionTimestamp").is_some() {
            return ApiError::conflict(
                &res,
                name,
                &format!("pod {name} is being deleted, cannot be assigned to a host"),
            )
            .into();
        }
        let node = current.pointer("/spec/nodeName").and_then(Value::as_str).unwrap_or("");
        if !node.is_empty() {
            return ApiError::conflict(
                &res,
                name,
                &format!("pod {name} is already assigned to node {}", quote(node)),
            )
            .into();
        }
        let mut next = current.clone();
        next["spec"]["nodeName"] = json!(target);
        if let Some(Value::Object(ann)) = binding.pointer("/metadata/annotations") {
            for (k, val) in ann {
                let mut anns = next.pointer("/metadata/annotations").cloned().unwrap_or(json!({}));
                anns[k] = val.clone();
                set_meta(&mut next, "annotations", anns);
            }
        }
        let cond = json!({"type": "PodScheduled", "status": "True", "lastProbeTime": null, "lastTransitionTime": Instant::now().rfc3339()});
        let conds = next["status"]["conditions"].as_array().cloned().unwrap_or_default();
        let mut conds: Vec<Value> =
            conds.into_iter().filter(|c| c.get("type") != Some(&json!("PodScheduled"))).collect();
        conds.push(cond);
        next["status"]["conditions"] = Value::Array(conds);
        if !req.dry_run() {
            self.commit(Kind::Pod, ChangeType::Modified, Some(current), next);
        }
        let status =
            json!({"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Success", "code": 201});
        Outcome::Reply(Reply::object(201, &status, &schemas().status))
    }
}

// === helpers ===

fn too_large(n: u64, current: u64) -> ApiError {
    ApiError {
        code: 504,
        reason: "Timeout",
        message: format!("Timeout: Too large resource version: {n}, current: {current}"),
        details: Some(
            json!({"causes": [{"reason": "ResourceVersionTooLarge", "message": "Too large resource version"}], "retryAfterSeconds": 1}),
        ),
        retry_after: Some(1),
    }
}

fn parse_rv(s: &str) -> Result<u64, ApiError> {
    s.parse::<u64>().map_err(|_| {
        ApiError::bad_request(format!(
            "invalid resource version: resourceVersion: Invalid value: {}: strconv.ParseUint: parsing {}: invalid syntax",
            quote(s),
            quote(s)
        ))
    })
}

fn encode_continue(rv: u64, key: &Key) -> String {
    let raw = format!("{rv}\u{0}{}\u{0}{}", key.0, key.1);
    raw.bytes().map(|b| format!("{b:02x}")).collect()
}

fn decode_continue(token: &str) -> Option<(u64, Key)> {
    if !token.len().is_multiple_of(2) {
        return None;
    }
    let bytes: Option<Vec<u8>> =
        (0..token.len()).step_by(2).map(|i| u8::from_str_radix(token.get(i..i + 2)?, 16).ok()).collect();
    let raw = String::from_utf8(bytes?).ok()?;
    let mut parts = raw.split('\u{0}');
    let rv = parts.next()?.parse().ok()?;
    Some((rv, (parts.next()?.to_string(), parts.next()?.to_string())))
}

fn obj_key(o: &Value) -> Key {
    (meta_str(o, "namespace").to_string(), meta_str(o, "name").to_string())
}

pub(crate) fn meta_str<'a>(o: &'a Value, key: &str) -> &'a str {
    o.get("metadata").and_then(|m| m.get(key)).and_then(Value::as_str).unwrap_or("")
}

fn set_meta(o: &mut Value, key: &str, val: Value) {
    if !o.get("metadata").is_some_and(Value::is_object) {
        o["metadata"] = json!({});
    }
    o["metadata"][key] = val;
}

fn remove_meta(o: &mut Value, key: &str) {
    if let Some(Value::Object(m)) = o.get_mut("metadata") {
        m.remove(key);
    }
}

fn event_line(ty: &str, obj: &Value, obj_ty: &Ty) -> Bytes {
    #[derive(serde::Serialize)]
    struct Line<'a> {
        #[serde(rename = "type")]
        ty: &'a str,
        object: schema::Ordered<'a>,
    }
    let mut out = serde_json::to_vec(&Line { ty, object: schema::Ordered(obj, obj_ty) }).unwrap_or_default();
    out.push(b'\n');
    Bytes::from(out)
}

/// Whether a stored object passes a watcher's selectors (field labels name stored fields).
fn passes(w: &Watcher, stored: &Value) -> bool {
    w.fields.matches(stored, w.api.field_set()) && w.labels.matches(stored.pointer("/metadata/labels"))
}

/// The event a watcher sees for a change, as the watch cache filters it.
fn watch_event(w: &Watcher, c: &Change) -> Option<Bytes> {
    if let Some(ns) = &w.ns
        && meta_str(&c.obj, "namespace") != ns
    {
        return None;
    }
    let cur_pass = passes(w, &c.obj);
    let cur = || render(w.api, &c.obj);
    let ty = w.api.ty();
    match c.ty {
        ChangeType::Added => cur_pass.then(|| event_line("ADDED", &cur(), ty)),
        ChangeType::Deleted => cur_pass.then(|| event_line("DELETED", &cur(), ty)),
        ChangeType::Modified => {
            let prev_pass = c.prev.as_ref().is_some_and(|p| passes(w, p));
            match (prev_pass, cur_pass) {
                (false, true) => Some(event_line("ADDED", &cur(), ty)),
                (true, true) => Some(event_line("MODIFIED", &cur(), ty)),
                (true, false) => {
                    let mut old = render(w.api, c.prev.as_ref().unwrap_or(&c.obj));
                    set_meta(&mut old, "resourceVersion", json!(c.rv.to_string()));
                    Some(event_line("DELETED", &old, ty))
                }
                (false, false) => None,
            }
        }
    }
}

fn deleted_status(api: Api, obj: &Value) -> Value {
    let res = api.resource();
    let mut details = Map::new();
    details.insert("name".into(), json!(meta_str(obj, "name")));
    if !res.group.is_empty() {
        details.insert("group".into(), json!(res.group));
    }
    details.insert("kind".into(), json!(res.plural));
    details.insert("uid".into(), json!(meta_str(obj, "uid")));
    json!({"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Success", "details": Value::Object(details)})
}

/// The stored form of an object rendered for an API: kind and apiVersion added, events converted.
pub fn render(api: Api, stored: &Value) -> Value {
    let mut o = match api {
        Api::EventsV1 => {
            let v1 = core_event_to_v1(stored);
            schema::decode(&v1, api.ty()).map(|d| d.value).unwrap_or(v1)
        }
        _ => stored.clone(),
    };
    if let Value::Object(m) = &mut o {
        let mut out = Map::new();
        out.insert("kind".into(), json!(api.kind_name()));
        out.insert("apiVersion".into(), json!(api.api_version()));
        for (k, val) in std::mem::take(m) {
            if k != "kind" && k != "apiVersion" {
                out.insert(k, val);
            }
        }
        *m = out;
    }
    o
}

/// A decoded object of an API in its stored form.
fn to_storage(api: Api, obj: Value) -> Value {
    let mut o = match api {
        Api::EventsV1 => {
            let core = v1_event_to_core(&obj);
            schema::decode(&core, &schemas().event_core).map(|d| d.value).unwrap_or(core)
        }
        _ => obj,
    };
    if let Value::Object(m) = &mut o {
        m.remove("kind");
        m.remove("apiVersion");
    }
    o
}

/// Re-encodes a stored object so that equal content compares equal.
fn canonical(api: Api, obj: Value) -> Value {
    let ty = match api {
        Api::Pods => &schemas().pod,
        _ => &schemas().event_core,
    };
    let mut o = schema::decode(&obj, ty).map(|d| d.value).unwrap_or(obj);
    if let Value::Object(m) = &mut o {
        m.remove("kind");
        m.remove("apiVersion");
    }
    o
}

const EVENT_FIELD_MAP: [(&str, &str); 15] = [
    ("metadata", "metadata"),
    ("eventTime", "eventTime"),
    ("series", "series"),
    ("reportingComponent", "reportingController"),
    ("reportingInstance", "reportingInstance"),
    ("action", "action"),
    ("reason", "reason"),
    ("involvedObject", "regarding"),
    ("related", "related"),
    ("message", "note"),
    ("type", "type"),
    ("source", "deprecatedSource"),
    ("firstTimestamp", "deprecatedFirstTimestamp"),
    ("lastTimestamp", "deprecatedLastTimestamp"),
    ("count", "deprecatedCount"),
];

fn core_event_to_v1(core: &Value) -> Value {
    let mut out = Map::new();
    for (c, n) in EVENT_FIELD_MAP {
        if let Some(val) = core.get(c) {
            out.insert(n.into(), val.clone());
        }
    }
    Value::Object(out)
}

fn v1_event_to_core(v1: &Value) -> Value {
    let mut out = Map::new();
    for (c, n) in EVENT_FIELD_MAP {
        if let Some(val) = v1.get(n) {
            out.insert(c.into(), val.clone());
        }
    }
    Value::Object(out)
}

/// Decodes a POST/PUT body into the API's type.
fn decode_body(api: Api, req: &Req) -> Result<(Value, Vec<String>), ApiError> {
    let kind = api.kind_name();
    let version = api.api_version();
    let body: Value = serde_json::from_slice(req.body).map_err(|_| {
        let msg = golang::json_syntax_error(req.body).unwrap_or_else(|| "invalid body".into());
        ApiError::bad_request(format!("couldn't get version/kind; json parse error: {msg}"))
    })?;
    if !body.is_object() {
        return Err(ApiError::bad_request(format!(
            "couldn't get version/kind; json parse error: json: cannot unmarshal {} into Go value of type struct {{ APIVersion string \"json:\\\"apiVersion,omitempty\\\"\"; Kind string \"json:\\\"kind,omitempty\\\"\" }}",
            json_kind(&body)
        )));
    }
    let decoded = schema::decode(&body, api.ty()).map_err(|e| {
        ApiError::bad_request(format!(
            "{kind} in version {} cannot be handled as a {kind}: {}",
            quote(version),
            e.json_message()
        ))
    })?;
    let warnings = unknown_field_handling(&decoded.unknown, req.field_validation(), |msg| {
        ApiError::bad_request(format!(
            "{kind} in version {} cannot be handled as a {kind}: {msg}",
            quote(version)
        ))
    })?;
    Ok((decoded.value, warnings))
}

fn json_kind(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "bool",
        Value::Number(_) => "number",
        Value::String(_) => "string",
        Value::Array(_) => "array",
        Value::Object(_) => "object",
    }
}

/// Warn (default), Strict or Ignore for unknown fields.
fn unknown_field_handling(
    unknown: &[String],
    directive: &str,
    strict_err: impl Fn(String) -> ApiError,
) -> Result<Vec<String>, ApiError> {
    if unknown.is_empty() || directive == "Ignore" {
        return Ok(Vec::new());
    }
    let msgs: Vec<String> = unknown.iter().map(|u| format!("unknown field {}", quote(u))).collect();
    if directive == "Strict" {
        return Err(strict_err(format!("strict decoding error: {}", msgs.join(", "))));
    }
    Ok(msgs)
}

enum PatchResult {
    Patched(Value, Vec<String>),
    Drop,
}

/// Parses and applies a patch to the versioned object and decodes the result.
fn apply_patch(
    api: Api,
    pt: PatchType,
    versioned: &Value,
    req: &Req,
    validation: &str,
) -> Result<PatchResult, ApiError> {
    let ty = api.ty();
    let parse_json = || -> Result<Value, ApiError> {
        serde_json::from_slice::<Value>(req.body).map_err(|_| {
            ApiError::bad_request(
                golang::json_syntax_error(req.body).unwrap_or_else(|| "unexpected end of JSON input".into()),
            )
        })
    };
    let invalid_patch = |value: String, msg: String| {
        ApiError::invalid("", "", "", &[FieldError::invalid("patch", BadValue::Str(value), msg)])
    };
    match pt {
        PatchType::Strategic => {
            let patch = parse_json()?;
            let Value::Object(patch_map) = patch else {
                return Err(ApiError::bad_request(format!(
                    "json: cannot unmarshal {} into Go value of type map[string]interface {{}}",
                    json_kind(&patch)
                )));
            };
            let patched = match patch::strategic_merge(versioned, &patch_map, ty) {
                Ok(p) => p,
                Err(SmpError::Panic(_)) => return Ok(PatchResult::Drop),
                Err(SmpError::Failed { message, code }) => {
                    return Err(match code {
                        400 => ApiError::bad_request(message),
                        _ => ApiError::internal(message),
                    });
                }
            };
            let shown = fmt_v(&Value::Object(patch_map));
            let decoded = schema::decode(&patched, ty)
                .map_err(|e| invalid_patch(shown.clone(), e.converter_message()))?;
            let warnings =
                unknown_field_handling(&decoded.unknown, validation, |m| invalid_patch(shown.clone(), m))?;
            Ok(PatchResult::Patched(decoded.value, warnings))
        }
        PatchType::Merge | PatchType::Json => {
            let patch = parse_json()?;
            let patched = if pt == PatchType::Merge {
                if !patch.is_object() {
                    return Err(ApiError::bad_request(format!(
                        "json: cannot unmarshal {} into Go value of type map[string]interface {{}}",
                        json_kind(&patch)
                    )));
                }
                patch::merge_patch(versioned, &patch)
            } else {
                let Value::Array(ops) = &patch else {
                    return Err(ApiError::bad_request(format!(
                        "json: cannot unmarshal {} into Go value of type jsonpatch.Patch",
                        json_kind(&patch)
                    )));
                };
                patch::json_patch(versioned, ops).map_err(|_| ApiError::unprocessable_generic())?
            };
            let shown = serde_json::to_string(&patched).unwrap_or_default();
            let decoded =
                schema::decode(&patched, ty).map_err(|e| invalid_patch(shown.clone(), e.json_message()))?;
            let warnings =
                unknown_field_handling(&decoded.unknown, validation, |m| invalid_patch(shown.clone(), m))?;
            Ok(PatchResult::Patched(decoded.value, warnings))
        }
        PatchType::Apply => {
            if req.param("fieldManager").is_none_or(str::is_empty) {
                return Err(ApiError::bad_request("PATCH /apply requires fieldManager to be set"));
            }
            let text = std::str::from_utf8(req.body).map_err(|e| ApiError::bad_request(e.to_string()))?;
            let config: Value = serde_saphyr::from_str(text)
                .map_err(|e| ApiError::bad_request(format!("error decoding YAML: {e}")))?;
            if !config.is_object() {
                return Err(ApiError::bad_request("error decoding YAML: the object is not a map"));
            }
            let name = config.pointer("/metadata/name").and_then(Value::as_str).unwrap_or("");
            if name.is_empty() {
                return Err(ApiError::bad_request("metadata.name is required in an applied configuration"));
            }
            let patched = patch::apply(versioned, &config, ty);
            let shown = serde_json::to_string(&patched).unwrap_or_default();
            let decoded =
                schema::decode(&patched, ty).map_err(|e| invalid_patch(shown.clone(), e.json_message()))?;
            let warnings =
                unknown_field_handling(&decoded.unknown, validation, |m| invalid_patch(shown.clone(), m))?;
            Ok(PatchResult::Patched(decoded.value, warnings))
        }
    }
}

/// DeleteOptions from the body and the query.
fn delete_options(req: &Req) -> Result<Value, ApiError> {
    let mut opts = json!({});
    if let Some(g) = req.param("gracePeriodSeconds") {
        let g: i64 = g
            .parse()
            .map_err(|_| ApiError::bad_request(format!("invalid gracePeriodSeconds {}", quote(g))))?;
        opts["gracePeriodSeconds"] = json!(g);
    }
    if let Some(p) = req.param("propagationPolicy") {
        opts["propagationPolicy"] = json!(p);
    }
    if req.body.iter().all(u8::is_ascii_whitespace) {
        return Ok(opts);
    }
    let body: Value = serde_json::from_slice(req.body).map_err(|_| {
        ApiError::bad_request(golang::json_syntax_error(req.body).unwrap_or_else(|| "invalid body".into()))
    })?;
    let decoded = schema::decode(&body, &schemas().delete_options)
        .map_err(|e| ApiError::bad_request(e.json_message()))?;
    if let (Value::Object(o), Value::Object(b)) = (&mut opts, decoded.value) {
        o.extend(b);
    }
    Ok(opts)
}

/// podStatusStrategy.PrepareForUpdate and the v1→internal conversion of pod IPs.
fn prepare_status_update(new: &mut Value, old: &Value) {
    new["spec"] = old.get("spec").cloned().unwrap_or(json!({}));
    match old.pointer("/metadata/ownerReferences") {
        Some(r) => set_meta(new, "ownerReferences", r.clone()),
        None => remove_meta(new, "ownerReferences"),
    }
    if !new.get("status").is_some_and(Value::is_object) {
        new["status"] = json!({});
    }
    let status = &mut new["status"];
    if status.get("qosClass").and_then(Value::as_str).unwrap_or("").is_empty()
        && let Some(q) = old.pointer("/status/qosClass")
    {
        status["qosClass"] = q.clone();
    }
    // preserveOldObservedGeneration
    if status.get("observedGeneration").and_then(Value::as_i64).unwrap_or(0) == 0
        && let Some(g) = old.pointer("/status/observedGeneration")
    {
        status["observedGeneration"] = g.clone();
    }
    let mut old_gens: Vec<(String, i64)> = old
        .pointer("/status/conditions")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .map(|c| {
            (
                c.get("type").and_then(Value::as_str).unwrap_or("").to_string(),
                c.get("observedGeneration").and_then(Value::as_i64).unwrap_or(0),
            )
        })
        .collect();
    if let Some(Value::Array(conds)) = status.get_mut("conditions") {
        for c in conds {
            let t = c.get("type").and_then(Value::as_str).unwrap_or("").to_string();
            let old_gen =
                old_gens.iter().position(|(ot, _)| *ot == t).map(|i| old_gens.remove(i).1).unwrap_or(0);
            if c.get("observedGeneration").and_then(Value::as_i64).unwrap_or(0) == 0 && old_gen != 0 {
                c["observedGeneration"] = json!(old_gen);
            }
        }
    }
    normalize_pod_ips(new);
}

/// `Convert_v1_PodStatus_To_core_PodStatus` and back: `podIP` is authoritative over `podIPs`.
fn normalize_pod_ips(pod: &mut Value) {
    let Some(Value::Object(status)) = pod.get_mut("status") else { return };
    let pod_ip = status.get("podIP").and_then(Value::as_str).unwrap_or("").to_string();
    let first = status.pointer_first_ip();
    let has_ips = status.get("podIPs").and_then(Value::as_array).is_some_and(|a| !a.is_empty());
    if !pod_ip.is_empty() && (!has_ips || first.as_deref() != Some(pod_ip.as_str())) {
        status.insert("podIPs".into(), json!([{"ip": pod_ip}]));
    }
    match status.pointer_first_ip() {
        Some(ip) => {
            status.insert("podIP".into(), json!(ip));
        }
        None => {
            status.remove("podIP");
        }
    }
}

trait FirstIp {
    fn pointer_first_ip(&self) -> Option<String>;
}

impl FirstIp for Map<String, Value> {
    fn pointer_first_ip(&self) -> Option<String> {
        self.get("podIPs")
            .and_then(Value::as_array)
            .and_then(|a| a.first())
            .and_then(|p| p.get("ip"))
            .and_then(Value::as_str)
            .map(String::from)
    }
}

/// Pod defaulting (`SetDefaults_*`) plus the admission plugins a default cluster runs
/// (DefaultTolerationSeconds, Priority).
fn default_pod(pod: &mut Value) {
    if !pod.get("spec").is_some_and(Value::is_object) {
        pod["spec"] = json!({});
    }
    let spec = &mut pod["spec"];
    let defaults = [
        ("restartPolicy", json!("Always")),
        ("terminationGracePeriodSeconds", json!(30)),
        ("dnsPolicy", json!("ClusterFirst")),
        ("securityContext", json!({})),
        ("schedulerName", json!("default-scheduler")),
        ("priority", json!(0)),
        ("enableServiceLinks", json!(true)),
        ("preemptionPolicy", json!("PreemptLowerPriority")),
    ];
    for (k, val) in defaults {
        if spec.get(k).is_none_or(|x| x.is_null() || x == &json!("")) {
            spec[k] = val;
        }
    }
    for key in ["initContainers", "containers"] {
        if let Some(Value::Array(list)) = spec.get_mut(key) {
            for c in list {
                default_container(c);
            }
        }
    }
    let mut tols = spec.get("tolerations").and_then(Value::as_array).cloned().unwrap_or_default();
    for key in ["node.kubernetes.io/not-ready", "node.kubernetes.io/unreachable"] {
        let present = tols.iter().any(|t| {
            let effect = t.get("effect").and_then(Value::as_str).unwrap_or("");
            let op = t.get("operator").and_then(Value::as_str).unwrap_or("");
            (t.get("key").and_then(Value::as_str) == Some(key) || (t.get("key").is_none() && op == "Exists"))
                && (effect.is_empty() || effect == "NoExecute")
        });
        if !present {
            tols.push(
                json!({"key": key, "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": 300}),
            );
        }
    }
    spec["tolerations"] = Value::Array(tols);
}

fn default_container(c: &mut Value) {
    let set = |c: &mut Value, k: &str, val: Value| {
        if c.get(k).is_none_or(|x| x.is_null() || x == &json!("")) {
            c[k] = val;
        }
    };
    set(c, "terminationMessagePath", json!("/dev/termination-log"));
    set(c, "terminationMessagePolicy", json!("File"));
    let image = c.get("image").and_then(Value::as_str).unwrap_or("").to_string();
    let last = image.rsplit('/').next().unwrap_or("");
    let policy = if image.contains('@') {
        "IfNotPresent"
    } else {
        match last.rsplit_once(':') {
            Some((_, tag)) if tag != "latest" => "IfNotPresent",
            _ => "Always",
        }
    };
    set(c, "imagePullPolicy", json!(policy));
    if !c.get("resources").is_some_and(Value::is_object) {
        c["resources"] = json!({});
    }
    // Requests default to limits.
    if let Some(limits) = c.pointer("/resources/limits").and_then(Value::as_object).cloned() {
        let mut requests =
            c.pointer("/resources/requests").and_then(Value::as_object).cloned().unwrap_or_default();
        for (k, val) in limits {
            requests.entry(k).or_insert(val);
        }
        c["resources"]["requests"] = Value::Object(requests);
    }
    if let Some(Value::Array(ports)) = c.get_mut("ports") {
        for p in ports {
            if p.get("protocol").is_none_or(|x| x == &json!("")) {
                p["protocol"] = json!("TCP");
            }
        }
    }
    for probe in ["livenessProbe", "readinessProbe", "startupProbe"] {
        if let Some(p) = c.get_mut(probe).filter(|p| p.is_object()) {
            for (k, d) in [
                ("timeoutSeconds", 1),
                ("periodSeconds", 10),
                ("successThreshold", 1),
                ("failureThreshold", 3),
            ] {
                if p.get(k).and_then(Value::as_i64).unwrap_or(0) == 0 {
                    p[k] = json!(d);
                }
            }
            if let Some(h) = p.get_mut("httpGet").filter(|h| h.is_object()) {
                if h.get("path").is_none_or(|x| x == &json!("")) {
                    h["path"] = json!("/");
                }
                if h.get("scheme").is_none_or(|x| x == &json!("")) {
                    h["scheme"] = json!("HTTP");
                }
            }
        }
    }
}

/// A quantity as a number (approximate; enough to compare requests and limits).
fn quantity(q: &Value) -> f64 {
    let s = match q {
        Value::String(s) => s.clone(),
        other => other.to_string(),
    };
    let suffixes: [(&str, f64); 13] = [
        ("Ki", 1024.0),
        ("Mi", 1024f64.powi(2)),
        ("Gi", 1024f64.powi(3)),
        ("Ti", 1024f64.powi(4)),
        ("Pi", 1024f64.powi(5)),
        ("Ei", 1024f64.powi(6)),
        ("n", 1e-9),
        ("u", 1e-6),
        ("m", 1e-3),
        ("k", 1e3),
        ("M", 1e6),
        ("G", 1e9),
        ("T", 1e12),
    ];
    for (suffix, mult) in suffixes {
        if let Some(n) = s.strip_suffix(suffix) {
            return n.parse::<f64>().unwrap_or(0.0) * mult;
        }
    }
    s.parse().unwrap_or(0.0)
}

/// `qos.GetPodQOS`.
fn qos_class(spec: &Value) -> &'static str {
    let containers: Vec<&Value> = ["initContainers", "containers"]
        .iter()
        .flat_map(|k| spec.get(*k).and_then(Value::as_array).into_iter().flatten())
        .collect();
    let get = |c: &Value, kind: &str, res: &str| {
        c.pointer(&format!("/resources/{kind}/{res}")).map(quantity).filter(|q| *q > 0.0)
    };
    let any = containers.iter().any(|c| {
        ["cpu", "memory"].iter().any(|r| get(c, "requests", r).is_some() || get(c, "limits", r).is_some())
    });
    if !any {
        return "BestEffort";
    }
    let guaranteed = containers.iter().all(|c| {
        ["cpu", "memory"].iter().all(|r| match (get(c, "limits", r), get(c, "requests", r)) {
            (Some(l), Some(q)) => (l - q).abs() < f64::EPSILON * l.max(1.0),
            _ => false,
        })
    });
    if guaranteed { "Guaranteed" } else { "Burstable" }
}
