//! Watch streams: the events each open watch sees for a change (as the watch cache filters
//! them by namespace and selectors), the initial events and bookmarks, and ending watches.

use bytes::Bytes;
use serde_json::{Value, json};
use tokio::sync::mpsc;

use super::read::{parse_rv, too_large};
use super::*;
use crate::apiserver::schema::{self, Ty, schemas};
use crate::apiserver::selectors::{FieldSelector, LabelSelector};
use crate::apiserver::validation::ApiError;

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

/// The start of a watch stream.
pub struct WatchStart {
    /// Which API the watch is of (for its bookmarks).
    pub api: Api,
    /// Events to send first.
    pub initial: Vec<Bytes>,
    /// Live events; `None` when the stream ends after `initial`.
    pub live: Option<mpsc::UnboundedReceiver<Bytes>>,
}

impl Store {
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

    /// The next `n` changes reach every open watch they concern as a line that is no JSON (the
    /// event's line with its first byte replaced): what a proxy that garbles the stream sends.
    /// The change is stored as usual; only the watches miss it, and a later list shows it.
    pub fn corrupt_watch_events(&mut self, n: u32) {
        self.corrupt_events = n;
    }

    pub(super) fn dispatch(&mut self, change: &Change) {
        let corrupt = self.corrupt_events > 0;
        self.corrupt_events = self.corrupt_events.saturating_sub(1);
        self.watchers.retain(|w| {
            if w.api.kind() != change.kind {
                return !w.tx.is_closed();
            }
            match watch_event(w, change) {
                Some(line) if corrupt => {
                    let mut garbled = line.to_vec();
                    if let Some(first) = garbled.first_mut() {
                        *first = b'x';
                    }
                    w.tx.send(Bytes::from(garbled)).is_ok()
                }
                Some(line) => w.tx.send(line).is_ok(),
                None => !w.tx.is_closed(),
            }
        });
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
                if n > self.rv {
                    // A version the server has not reached (its etcd was restored from a backup
                    // without `--bump-revision`, or this server's cache lags another's): the real
                    // server waits 3 s for it, then sends one ERROR event, 504 "Too large
                    // resource version", and ends the stream. The fake does not wait.
                    let line = event_line("ERROR", &too_large(n, self.rv).status_json(), &schemas().status);
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
