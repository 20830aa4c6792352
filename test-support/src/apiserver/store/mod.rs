//! The fake's storage and registry logic: one global resourceVersion counter bumped per change
//! (like etcd's revision), a change history that serves watches and exact-version lists, and the
//! create/update/patch/delete strategies of pods (`pkg/registry/core/pod`), pods/status,
//! pods/binding and events (`pkg/registry/core/event`), as the generic registry store
//! (`k8s.io/apiserver/pkg/registry/generic/registry/store.go`) runs them.
//!
//! One job a file: [`read`] (get and list, exact-version snapshots, continue tokens), [`watch`]
//! (watch streams and the events each watcher sees), [`write`] (create, update, patch, delete,
//! bind, and the test-fixture insert), [`decode`] (request bodies, patch types, unknown-field
//! handling, delete options), [`render`] (an object as each API serves it, the two event APIs'
//! conversion) and [`defaults`] (pod defaulting and the default admission plugins).

mod decode;
mod defaults;
mod read;
mod render;
mod watch;
mod write;

use std::collections::BTreeMap;

use serde_json::{Value, json};

use crate::apiserver::schema::{Ty, schemas, to_json};
use crate::apiserver::selectors::FieldSet;
use crate::apiserver::validation::{ApiError, EventApi, Resource};

pub use render::render;
pub use watch::{WatchStart, Watcher};

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

/// What an etcd snapshot holds of the fake's state: the objects and the revision
/// (`Store::backup`, `Store::restore`).
#[derive(Clone)]
pub struct Backup {
    rv: u64,
    pods: BTreeMap<(String, String), Value>,
    events: BTreeMap<(String, String), Value>,
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
    /// How many of the next changes reach the open watches as a line that is no JSON
    /// ([`Store::corrupt_watch_events`]).
    corrupt_events: u32,
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
            corrupt_events: 0,
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

    /// A snapshot of the objects and the revision, as `etcdctl snapshot save` takes one.
    pub fn backup(&self) -> Backup {
        Backup { rv: self.rv, pods: self.pods.clone(), events: self.events.clone() }
    }

    /// etcd restored from `backup` without `--bump-revision`, and the server started again on
    /// it: the objects and the revision are the backup's, so resourceVersions go back and the
    /// ones handed out since are handed out again for other contents; the change history and
    /// the open watches are gone. A watch from a version handed out since gets 504 "Too large
    /// resource version" until the revision passes it.
    pub fn restore(&mut self, backup: Backup) {
        self.rv = backup.rv;
        self.pods = backup.pods;
        self.events = backup.events;
        self.compact();
        self.close_watches();
    }

    /// Drops the change history: watches from older versions get 410 Expired.
    pub fn compact(&mut self) {
        self.floor = self.rv;
        self.history.clear();
    }
    /// as it starts, so the version moves on), and a watch from any version seen before gets
    /// 410 Expired, as a real server's does after a restart.
    pub fn restarted(&mut self) {
        self.rv += 1;
        self.compact();
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
